//! runner writes nothing through a link it did not make (docs/src/ci.md, "Where runner
//! writes"): a checkout that ships `junit.xml`, `cassettes`, `report.html` or an export's file
//! as a link to somewhere outside it changes nothing there. A link in a file's place is
//! replaced by the file; a folder on the way that is a link is refused, with the path named,
//! before any step runs.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::fake::{Fake, anthropic_text};
use crate::support::Test;

const WORKFLOW: &str = "name = \"links\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.s]\nagent = \"explore\"\nprompt = \"look\"\n";

/// A folder outside the checkout holding one file, as a shipped link would point at.
fn outside() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target.txt");
    std::fs::write(&target, "keep\n").unwrap();
    (dir, target)
}

/// Nothing outside was written: the one file as it was, nothing beside it.
fn untouched(target: &Path) {
    assert_eq!(std::fs::read_to_string(target).unwrap(), "keep\n");
    let names: Vec<String> = std::fs::read_dir(target.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["target.txt"]);
}

/// A regular file now, with `what` in it.
fn written_in_place(path: &Path, what: &str) {
    let meta = path.symlink_metadata().unwrap();
    assert!(meta.is_file(), "{} is still a link", path.display());
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(what), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn junit_and_record_never_follow_a_shipped_link() {
    let (_outside, target) = outside();
    let replies = ["one", "two", "three"].map(anthropic_text).to_vec();
    let fake = Fake::anthropic(replies).await;
    let test = Test::new()
        .file("w.toml", WORKFLOW)
        .anthropic_api(&fake.uri(), "sk-ant-links-test");
    symlink(&target, test.path().join("junit.xml")).unwrap();
    symlink(target.parent().unwrap(), test.path().join("cassettes")).unwrap();
    symlink(target.parent().unwrap(), test.path().join("reports")).unwrap();
    let run = |test: Test, args: &[&str]| {
        test.clear_args()
            .args(&["run", "w.toml", "--no-progress"])
            .args(args)
            .run_async()
    };

    // The docs' own CI flags, in a checkout that ships both as links.
    let (out, test) = run(test, &["--junit", "junit.xml", "--record", "cassettes"]).await;
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("--record: cannot write `cassettes`: `cassettes` is a symbolic link"),
        "{}",
        out.stderr
    );
    assert!(fake.requests().await.is_empty(), "no step ran");
    untouched(&target);

    // A folder on the way to the report that is a link: refused before any step runs.
    let (out, test) = run(test, &["--junit", "reports/junit.xml"]).await;
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("--junit: cannot write `reports/junit.xml`: `reports` is a symbolic link"),
        "{}",
        out.stderr
    );
    assert!(fake.requests().await.is_empty(), "no step ran");
    untouched(&target);

    // A link in the report's own place is replaced by the report; cassettes go to a real folder.
    let (out, test) = run(test, &["--junit", "junit.xml", "--record", "rec"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    written_in_place(&test.path().join("junit.xml"), "<testsuites");
    assert!(test.path().join("rec/s/index.json").is_file());
    untouched(&target);

    // A path the user names outside the checkout is theirs ($RUNNER_TEMP/junit.xml): its
    // folders are made, and a link as its last part is still replaced, not followed.
    let elsewhere = tempfile::tempdir().unwrap();
    let linked = elsewhere.path().join("junit.xml");
    symlink(&target, &linked).unwrap();
    let fresh = elsewhere.path().join("new/deeper/junit.xml");
    let (out, test) = run(test, &["--junit", linked.to_str().unwrap()]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    written_in_place(&linked, "<testsuites");
    untouched(&target);
    let (out, _test) = run(test, &["--junit", fresh.to_str().unwrap()]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    written_in_place(&fresh, "<testsuites");
}

#[tokio::test(flavor = "multi_thread")]
async fn report_and_export_never_follow_a_shipped_link() {
    let (_outside, target) = outside();
    let fake = Fake::anthropic(vec![anthropic_text("one")]).await;
    let test = Test::new()
        .file("w.toml", WORKFLOW)
        .anthropic_api(&fake.uri(), "sk-ant-links-test")
        .args(&["run", "w.toml", "--no-progress"]);
    let (out, test) = test.run_async().await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    symlink(&target, test.path().join("report.html")).unwrap();
    symlink(&target, test.path().join("agents.yml")).unwrap();
    symlink(target.parent().unwrap(), test.path().join("out")).unwrap();
    symlink(target.parent().unwrap(), test.path().join(".github")).unwrap();
    let again = |test: Test, args: &[&str]| test.clear_args().args(args).run_async();

    let (out, test) = again(test, &["report", "latest", "-o", "report.html"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    written_in_place(&test.path().join("report.html"), "<html");
    untouched(&target);
    let (out, test) = again(test, &["report", "latest", "-o", "out/r.html"]).await;
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("cannot write `out/r.html`: `out` is a symbolic link"),
        "{}",
        out.stderr
    );
    untouched(&target);

    let export = ["export", "github-actions", "w.toml", "--install", "true"];
    let (out, test) = again(test, &[&export[..], &["-o", "agents.yml"]].concat()).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    written_in_place(&test.path().join("agents.yml"), "jobs:");
    untouched(&target);
    let (out, _test) = again(
        test,
        &[&export[..], &["-o", ".github/workflows/agents.yml"]].concat(),
    )
    .await;
    assert_ne!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("cannot write `.github/workflows/agents.yml`: `.github` is a symbolic link"),
        "{}",
        out.stderr
    );
    untouched(&target);
}

/// `GITHUB_STEP_SUMMARY` is appended to, never through a link: one there is refused and named.
#[tokio::test(flavor = "multi_thread")]
async fn the_job_summary_is_never_appended_through_a_link() {
    let (_outside, target) = outside();
    let place = tempfile::tempdir().unwrap();
    let summary = place.path().join("step_summary");
    symlink(&target, &summary).unwrap();
    let fake = Fake::anthropic(vec![anthropic_text("one")]).await;
    let (out, _test) = Test::new()
        .file("w.toml", WORKFLOW)
        .anthropic_api(&fake.uri(), "sk-ant-links-test")
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", summary.to_str().unwrap())
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert!(
        out.stderr.contains(&format!(
            "GITHUB_STEP_SUMMARY: cannot write `{}`",
            summary.display()
        )) && out.stderr.contains("symbolic link"),
        "{}",
        out.transcript()
    );
    untouched(&target);
}
