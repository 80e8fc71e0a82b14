//! `runner report`: the HTML page of a run, opened in headless Chromium (Debian's `chromium`,
//! installed by `.ci/run`, driven by playwright-core from npm through tests/browser/open.cjs):
//! every step and its status visible, a transcript that unfolds, the graph's edges, the
//! timeline's bars, nothing fetched, no script; and the comparison with a baseline run.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::fake::{Fake, anthropic_text, anthropic_tool, bad_request};
use crate::support::{Output, Test, init_repo, npm_install};

/// What Chromium shows of `html`: tests/browser/open.cjs's answer. The screenshot goes to
/// `shot`; `unfold` is the step whose transcript is clicked open.
pub fn browse(html: &Path, shot: &Path, unfold: &str) -> Value {
    let dir = npm_install(
        "playwright",
        "playwright-core@1.65.2",
        "node_modules/playwright-core/package.json",
    );
    let out = Command::new("node")
        .arg(Path::new(crate::support::REPO).join("tests/browser/open.cjs"))
        .arg(html)
        .arg(shot)
        .arg(unfold)
        .env("NODE_PATH", dir.join("node_modules"))
        .output()
        .expect("node runs the browser script");
    assert!(
        out.status.success(),
        "Chromium (/usr/bin/chromium, installed by .ci/run) could not open the report: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn again(test: Test, args: &[&str]) -> (Output, Test) {
    test.clear_args().args(args).run_async().await
}

/// A run with a command step, checks, a worktree step with a diff, a fan-out, a subagent, a
/// failure, and a reply that tries to be HTML.
#[tokio::test(flavor = "multi_thread")]
async fn the_report_shows_every_step_and_unfolds_a_transcript_in_chromium() {
    let fake = Fake::anthropic_fn(|body| {
        let first = body["messages"][0].to_string();
        let count = body["messages"].as_array().map_or(0, Vec::len);
        if first.contains("MARK-broken") || first.contains("MARK-each c") {
            return bad_request("this step is refused");
        }
        if first.contains("MARK-lead") && count == 1 {
            return anthropic_tool(
                "c1",
                "task",
                json!({"description": "look around", "prompt": "MARK-sub look", "subagent_type": "explore"}),
            );
        }
        if first.contains("MARK-tree") && count == 1 {
            return anthropic_tool(
                "w1",
                "write_file",
                json!({"path": "made.txt", "content": "new work\n"}),
            );
        }
        anthropic_text(if first.contains("MARK-sub") {
            "the subagent looked"
        } else if first.contains("MARK-each") {
            "<script>document.title='owned'</script><img src=x onerror=alert(1)> each done"
        } else {
            "done"
        })
    })
    .await;
    let workflow = r#"name = "drawn"
[models]
default = "anthropic/claude-test"
[steps.setup]
run = "echo ready"
[steps.checked]
agent = "code"
needs = ["setup"]
prompt = "MARK-checked"
checks = ["true"]
[steps.tree]
agent = "code"
isolation = "worktree"
needs = ["setup"]
prompt = "MARK-tree"
[steps.each]
agent = "explore"
needs = ["checked"]
for_each = ["a", "b", "c"]
prompt = "MARK-each {{ item }}"
[steps.lead]
agent = "code"
needs = ["checked", "tree"]
prompt = "MARK-lead"
[steps.broken]
agent = "explore"
prompt = "MARK-broken"
retries = 0
"#;
    let test = Test::new()
        .file("w.toml", workflow)
        .file(".gitignore", ".runner/\n*.html\n*.png\n");
    init_repo(test.path());
    let (ran, test) = test
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.uri())
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(ran.status, 1, "{}", ran.transcript());
    let record: Value = serde_json::from_str(&ran.stdout).unwrap();
    let (wrote, test) = again(test, &["report", "-o", "report.html"]).await;
    assert_eq!(wrote.status, 0, "{}", wrote.transcript());
    assert!(
        wrote.stdout.starts_with("wrote report.html"),
        "{}",
        wrote.stdout
    );
    let html_path = test.path().join("report.html");
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(
        html.contains("Content-Security-Policy") && html.contains("default-src 'none'"),
        "the page forbids every request and script"
    );

    let shot = test.path().join("report.png");
    let seen = browse(&html_path, &shot, "lead");

    // Every step, with the status run.json gives it, visible in the steps table.
    let steps = record["steps"].as_object().unwrap();
    assert_eq!(
        seen["table"].as_array().unwrap().len(),
        steps.len(),
        "{seen}"
    );
    for (id, step) in steps {
        let row = seen["table"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["step"] == id.as_str())
            .unwrap_or_else(|| panic!("no row for {id}: {seen}"));
        assert_eq!(row["status"], step["status"], "{id}");
        assert_eq!(row["visible"], true, "{id}");
        assert!(
            row["text"]
                .as_str()
                .unwrap()
                .contains(step["status"].as_str().unwrap()),
            "{row}"
        );
    }
    assert_eq!(seen["run_status"], "failed");
    // The graph: a node per step, an edge per need (setup→checked, setup→tree, checked→each,
    // checked→lead, tree→lead).
    assert_eq!(seen["graph"].as_array().unwrap().len(), steps.len());
    assert_eq!(seen["edges"], 5, "{seen}");
    // The timeline: a bar for every step and instance that ran; each instance its own row;
    // the checked step's check drawn on its bar.
    let row = |id: &str| {
        seen["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["step"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no timeline row for {id}: {seen}"))
    };
    for id in [
        "setup", "checked", "tree", "each", "each[0]", "each[1]", "each[2]", "lead",
    ] {
        assert_eq!(row(id)["bar"], true, "{id}");
    }
    assert_eq!(row("checked")["checks"], 1);
    // The critical path ends at the step that ended last and runs through what it needed.
    let critical: Vec<&str> = seen["graph"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["critical"] == true)
        .map(|n| n["step"].as_str().unwrap())
        .collect();
    assert!(critical.contains(&"setup"), "{critical:?}");
    assert!(seen["critical_edges"].as_u64().unwrap() >= 1, "{seen}");
    // The failed instance is named under its step; its link unfolds it.
    let followed = &seen["followed"];
    assert_eq!(followed["step"], "each[2]", "{followed}");
    assert_eq!(followed["status"], "failed");
    assert_eq!(followed["before"], false, "folded at first");
    assert_eq!(followed["open"], true, "{followed}");
    assert!(
        followed["error"]
            .as_str()
            .unwrap()
            .contains("this step is refused"),
        "{followed}"
    );
    // The lead step's transcript is folded, and opens on a click: its call of `task`, and the
    // subagent it started.
    let unfolded = &seen["unfolded"];
    assert_eq!(unfolded["before"], false, "{unfolded}");
    assert_eq!(unfolded["after"], true, "{unfolded}");
    let text = unfolded["text"].as_str().unwrap();
    assert!(text.contains("→ task"), "{text}");
    assert!(
        text.contains("subagent explore#1 (explore) started: look around"),
        "{text}"
    );
    // The worktree step's branch and diff, the failure's cause, the check: on the page.
    let body = seen["body_text"].as_str().unwrap();
    let branch = record["steps"]["tree"]["branch"].as_str().unwrap();
    assert!(body.contains(branch), "no branch {branch}");
    assert!(html.contains("+new work"), "the diff is in the page");
    assert!(body.contains("this step is refused"), "the failure is said");
    assert!(html.contains("<code>true</code>"), "the check is listed");
    // A reply that is HTML is shown as text: no script element, the title untouched, nothing
    // fetched, no error.
    assert_eq!(seen["scripts"], 0);
    assert!(
        seen["title"].as_str().unwrap().starts_with("drawn"),
        "{}",
        seen["title"]
    );
    assert!(
        html.contains("&lt;script&gt;document.title"),
        "escaped in the page"
    );
    assert_eq!(seen["requests"], json!([]));
    assert_eq!(seen["external"], json!([]));
    assert_eq!(seen["errors"], json!([]));
    // The screenshot is a picture of the page.
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{}",
        png.len()
    );
}

/// `--baseline`: what changed between two runs of one workflow, step by step.
#[tokio::test(flavor = "multi_thread")]
async fn a_baseline_shows_what_changed() {
    let fake = Fake::anthropic(vec![
        anthropic_text("first answer"),
        anthropic_text("same"),
        anthropic_text("second answer"),
        anthropic_text("same"),
    ])
    .await;
    let workflow = "name = \"compared\"\nmax_parallel = 1\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.a]\nagent = \"explore\"\nprompt = \"look\"\n[steps.b]\nagent = \"explore\"\nneeds = [\"a\"]\nprompt = \"look again\"\n";
    let test = Test::new()
        .file("w.toml", workflow)
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.uri());
    let (first, test) = again(test, &["run", "w.toml", "--format", "json"]).await;
    assert_eq!(first.status, 0, "{}", first.transcript());
    let first: Value = serde_json::from_str(&first.stdout).unwrap();
    let first_id = first["run_id"].as_str().unwrap().to_owned();
    let (second, test) = again(test, &["run", "w.toml"]).await;
    assert_eq!(second.status, 0, "{}", second.transcript());
    let report = [
        "report",
        "latest",
        "-o",
        "out/r.html",
        "--baseline",
        &first_id,
    ];
    // A file where its folder should be: the page cannot be written, and it says where.
    std::fs::write(test.path().join("out"), "a file\n").unwrap();
    let (wrote, test) = again(test, &report).await;
    assert_eq!(wrote.status, 2, "{}", wrote.transcript());
    assert!(
        wrote.stderr.contains("cannot write `out/r.html`"),
        "{}",
        wrote.stderr
    );
    // A missing folder is made.
    std::fs::remove_file(test.path().join("out")).unwrap();
    let (wrote, test) = again(test, &report).await;
    assert_eq!(wrote.status, 0, "{}", wrote.transcript());
    let html = std::fs::read_to_string(test.path().join("out/r.html")).unwrap();
    assert!(
        html.contains(&format!("Against run {first_id}")),
        "no baseline section"
    );
    assert!(
        html.contains(r#"data-step="a" data-change="changed""#),
        "step a changed its answer"
    );
    assert!(
        html.contains(r#"data-step="b" data-change="same""#),
        "step b did not"
    );
    assert!(html.contains("- first answer") && html.contains("+ second answer"));
    // An unknown baseline is an error naming it.
    let (missing, _test) = again(test, &["report", "-o", "r.html", "--baseline", "nope"]).await;
    assert_eq!(missing.status, 2, "{}", missing.transcript());
    assert!(missing.stderr.contains("`nope`"), "{}", missing.stderr);
}

/// In Chromium: the page starts with the run's answer, a failed check's output keeps its line
/// breaks, and no fact tile is wider than itself (a long branch name wraps inside it).
#[tokio::test(flavor = "multi_thread")]
async fn the_report_starts_with_the_answer_and_keeps_text_inside_its_tiles() {
    let fake = Fake::anthropic_fn(|body| {
        let first = body["messages"][0].to_string();
        let count = body["messages"].as_array().map_or(0, Vec::len);
        if first.contains("MARK-long") && count == 1 {
            return anthropic_tool(
                "w1",
                "write_file",
                json!({"path": "made.txt", "content": "new work\n"}),
            );
        }
        anthropic_text(if first.contains("MARK-long") {
            "The migration is done:\nevery token is a JWT"
        } else {
            "checked"
        })
    })
    .await;
    let long = "implement_the_migration_of_every_session_token_to_jwt_in_one_go";
    let workflow = format!(
        "name = \"tiles\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.{long}]\nagent = \"code\"\nisolation = \"worktree\"\nprompt = \"MARK-long\"\n[steps.verify]\nagent = \"explore\"\nprompt = \"MARK-verify\"\nchecks = [\"printf 'FIRST-LINE of the output\\\\nSECOND-LINE of the output\\\\n'; exit 1\"]\ncheck_retries = 0\n"
    );
    let test = Test::new()
        .file("w.toml", &workflow)
        .file(".gitignore", ".runner/\n*.html\n*.png\n");
    init_repo(test.path());
    let (ran, test) = test
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.uri())
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(ran.status, 1, "{}", ran.transcript());
    let (wrote, test) = again(test, &["report", "-o", "report.html"]).await;
    assert_eq!(wrote.status, 0, "{}", wrote.transcript());
    let html_path = test.path().join("report.html");
    let seen = browse(&html_path, &test.path().join("report.png"), "");
    assert_eq!(seen["first_section"], "answer", "{seen}");
    assert_eq!(
        seen["answers"],
        json!([{"step": long, "text": "The migration is done:\nevery token is a JWT"}]),
        "{seen}"
    );
    let errors = seen["errors_shown"].as_array().unwrap();
    assert!(
        errors.iter().any(|e| e
            .as_str()
            .unwrap()
            .contains("FIRST-LINE of the output\nSECOND-LINE of the output")),
        "{seen}"
    );
    assert_eq!(seen["overflowing"], json!([]), "{seen}");
    // Times of day to the second: no fraction after the seconds anywhere on the page.
    let text = seen["body_text"].as_str().unwrap();
    let fraction = text.as_bytes().windows(5).any(|w| {
        w[0] == b':'
            && w[1].is_ascii_digit()
            && w[2].is_ascii_digit()
            && w[3] == b'.'
            && w[4].is_ascii_digit()
    });
    assert!(!fraction && text.contains("· started 20"), "{text}");
    // The tile that holds the long branch is there, wrapped inside it.
    assert!(
        seen["body_text"]
            .as_str()
            .unwrap()
            .contains(&format!("/{long}")),
        "{seen}"
    );
}
