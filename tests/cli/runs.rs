//! `runner runs`: the recorded runs, newest first, as text and JSON.

use serde_json::Value;

use crate::fake::{Fake, anthropic_text, bad_request};
use crate::support::{Output, Test};

/// A directory with `workflow` as `w.toml`, pointed at `fake`.
fn project(workflow: &str, fake: &Fake) -> Test {
    Test::new()
        .file("w.toml", workflow)
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.uri())
}

/// Runs `args` in the same directory.
async fn again(test: Test, args: &[&str]) -> (Output, Test) {
    test.clear_args().args(args).run_async().await
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_are_listed_newest_first() {
    let fake = Fake::anthropic(vec![anthropic_text("done"), bad_request("refused")]).await;
    let workflow = "name = \"listed\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.s]\nagent = \"explore\"\nprompt = \"look\"\nretries = 0\n";
    let (empty, test) = Test::new()
        .file("w.toml", workflow)
        .args(&["runs"])
        .run_async()
        .await;
    assert_eq!(empty.status, 0, "{}", empty.transcript());
    // Where runs were looked for, whole (a relative `./.runner/runs` says little after a `cd`
    // or in a CI log), and where else they may be.
    let looked = test.path().canonicalize().unwrap().join(".runner/runs");
    assert!(
        empty
            .stdout
            .starts_with(&format!("no runs in `{}`\n", looked.display())),
        "{}",
        empty.stdout
    );
    assert!(
        empty.stdout.contains("pass the run's `--workdir DIR`"),
        "{}",
        empty.stdout
    );
    let (ok, test) = test
        .clear_args()
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.uri())
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert_eq!(ok.status, 0, "{}", ok.transcript());
    let (failed, test) = again(test, &["run", "w.toml"]).await;
    assert_eq!(failed.status, 1, "{}", failed.transcript());
    let (text, test) = again(test, &["runs"]).await;
    assert_eq!(text.status, 0, "{}", text.transcript());
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert!(
        lines[0].starts_with("RUN") && lines[0].contains("STATUS"),
        "{}",
        text.stdout
    );
    // The failed run started last: it comes first.
    assert!(
        lines[1].contains("listed") && lines[1].contains("failed"),
        "{}",
        text.stdout
    );
    assert!(
        lines[2].contains("listed") && lines[2].contains("succeeded"),
        "{}",
        text.stdout
    );
    assert!(lines[3].starts_with("2 runs in `"), "{}", text.stdout);
    // Started to the second (`2026-12-07 13:14:10Z`), never to the nanosecond.
    for line in &lines[1..3] {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert!(
            words
                .iter()
                .any(|w| w.len() == 9 && w.ends_with('Z') && w.matches(':').count() == 2),
            "{line}"
        );
        assert!(
            !words.iter().any(|w| w.contains('T') && w.contains('.')),
            "{line}"
        );
    }
    let (json, _test) = again(test, &["runs", "--format", "json"]).await;
    let list: Value = serde_json::from_str(&json.stdout).unwrap();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["status"], "failed");
    assert_eq!(list[1]["status"], "succeeded");
    assert_eq!(list[0]["workflow"], "listed");
    assert_eq!(list[0]["recorded_here"], true);
    assert!(list[0]["started_at"].as_str() >= list[1]["started_at"].as_str());
}

/// `runner show`: the latest run's steps, then one step turn by turn, as text and JSON.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_and_a_step_are_shown() {
    let fake = Fake::anthropic(vec![
        crate::fake::anthropic_tool("t1", "read_file", serde_json::json!({"path": "notes.txt"})),
        anthropic_text("The notes say hello."),
    ])
    .await;
    let workflow = "name = \"shown\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.s]\nagent = \"explore\"\nprompt = \"read the notes\"\n";
    let (ran, test) = project(workflow, &fake)
        .file("notes.txt", "hello from the notes\n")
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert_eq!(ran.status, 0, "{}", ran.transcript());
    let (run, test) = again(test, &["show"]).await;
    assert_eq!(run.status, 0, "{}", run.transcript());
    assert!(
        run.stdout.contains("shown") && run.stdout.contains("succeeded"),
        "{}",
        run.stdout
    );
    let step_line = run.stdout.lines().find(|l| l.starts_with("s ")).unwrap();
    assert!(step_line.contains("succeeded"), "{step_line}");
    let (step, test) = again(test, &["show", "latest", "s"]).await;
    assert_eq!(step.status, 0, "{}", step.transcript());
    assert!(
        step.stdout.contains("→ read_file {\"path\":\"notes.txt\"}"),
        "{}",
        step.stdout
    );
    assert!(
        step.stdout.contains("hello from the notes"),
        "{}",
        step.stdout
    );
    assert!(
        step.stdout.contains("The notes say hello."),
        "{}",
        step.stdout
    );
    let (json, test) = again(test, &["show", "latest", "s", "--format", "json"]).await;
    let shown: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(shown["turns"][0]["tool_calls"][0]["name"], "read_file");
    assert_eq!(shown["turns"][1]["text"], "The notes say hello.");
    // What show prints passes the redactor: a secret of this process is hidden, even in a
    // transcript recorded before it was one.
    let (hidden, test) = test
        .clear_args()
        .env("ANTHROPIC_API_KEY", "hello from the notes")
        .args(&["show", "latest", "s"])
        .run_async()
        .await;
    assert!(
        hidden.stdout.contains("[hidden]") && !hidden.stdout.contains("hello from the notes"),
        "{}",
        hidden.stdout
    );
    let (missing, _test) = again(test, &["show", "latest", "nope"]).await;
    assert_eq!(missing.status, 2);
    assert!(
        missing.stderr.contains("has no step `nope`; its steps: s"),
        "{}",
        missing.stderr
    );
}

/// A model runner knows is priced without a `[prices]` table (its dated list price, cache reads
/// included); `[prices]` overrides it.
#[tokio::test(flavor = "multi_thread")]
async fn known_models_cost_without_set_up() {
    for (prices, expected) in [
        // 10 input at $3, 30 output at $15, 150 cache reads at $0.30, per million.
        ("", 10.0 * 3.0 + 30.0 * 15.0 + 150.0 * 0.3),
        // Overridden: every token at $1, cache reads at the input price.
        (
            "[prices.\"anthropic/claude-sonnet-4-5\"]\ninput = 1.0\noutput = 1.0\n",
            190.0,
        ),
    ] {
        let fake = Fake::anthropic(vec![anthropic_text("done")]).await;
        let workflow = format!(
            "name = \"priced\"\n[models]\ndefault = \"anthropic/claude-sonnet-4-5\"\n{prices}[steps.s]\nagent = \"explore\"\nprompt = \"look\"\n"
        );
        let (out, _test) = project(&workflow, &fake)
            .args(&["run", "w.toml", "--format", "json"])
            .run_async()
            .await;
        assert_eq!(out.status, 0, "{}", out.transcript());
        let record: Value = serde_json::from_str(&out.stdout).unwrap();
        let cost = record["steps"]["s"]["cost_usd"].as_f64().unwrap();
        assert!((cost - expected / 1e6).abs() < 1e-12, "{prices:?}: {cost}");
        assert_eq!(record["cost_usd"].as_f64(), Some(cost));
    }
}

/// `run.json` says which runner recorded it, with which inputs, and when each step started and
/// how long it waited for a slot.
#[tokio::test(flavor = "multi_thread")]
async fn the_record_holds_version_inputs_start_and_queue_wait() {
    let fake = Fake::anthropic(vec![anthropic_text("a"), anthropic_text("b")]).await;
    let workflow = "name = \"timed\"\nmax_parallel = 1\n[inputs.target]\ndefault = \"src\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.one]\nagent = \"explore\"\nprompt = \"look at {{ inputs.target }}\"\n[steps.two]\nagent = \"explore\"\nprompt = \"look again\"\n";
    let (out, _test) = project(workflow, &fake)
        .args(&["run", "w.toml", "--format", "json", "-i", "target=lib"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let record: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(record["runner_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(record["inputs"]["target"], "lib");
    for step in ["one", "two"] {
        let started = record["steps"][step]["started_at"].as_str().unwrap();
        assert!(started.parse::<jiff::Timestamp>().is_ok(), "{started}");
        assert!(
            record["steps"][step]["queue_ms"].is_u64(),
            "{}",
            record["steps"][step]
        );
    }
    // One slot: the second step started after the first.
    let start = |s: &str| {
        record["steps"][s]["started_at"]
            .as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .unwrap()
    };
    assert!(start("two") >= start("one"));
}

/// `runner show` of steps with checks, a fan-out instance and a subagent.
#[tokio::test(flavor = "multi_thread")]
async fn checks_instances_and_subagents_are_shown() {
    let fake = Fake::anthropic_fn(|body| {
        let first = body["messages"][0].to_string();
        let count = body["messages"].as_array().map_or(0, Vec::len);
        if first.contains("MARK-lead") && count == 1 {
            return crate::fake::anthropic_tool(
                "c1",
                "task",
                serde_json::json!({"description": "look around", "prompt": "MARK-sub look", "subagent_type": "explore"}),
            );
        }
        anthropic_text(if first.contains("MARK-sub") {
            "the subagent looked"
        } else {
            "done"
        })
    })
    .await;
    let workflow = "name = \"many\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.checked]\nagent = \"code\"\nprompt = \"MARK-checked\"\nchecks = [\"true\"]\n[steps.each]\nagent = \"explore\"\nfor_each = [\"a\", \"b\"]\nprompt = \"MARK-each {{ item }}\"\n[steps.lead]\nagent = \"code\"\nprompt = \"MARK-lead\"\n";
    let (ran, test) = project(workflow, &fake)
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert_eq!(ran.status, 0, "{}", ran.transcript());
    let show = |test: Test, step: &'static str| async move {
        let (out, test) = again(test, &["show", "latest", step]).await;
        assert_eq!(out.status, 0, "{}", out.transcript());
        (out.stdout, test)
    };
    let (checked, test) = show(test, "checked").await;
    assert!(
        checked.contains("check `true` (round 1): passed, exit 0"),
        "{checked}"
    );
    let (instance, test) = show(test, "each[1]").await;
    assert!(
        instance.contains("step each[1] of run ") && instance.contains("done"),
        "{instance}"
    );
    let (lead, _test) = show(test, "lead").await;
    assert!(
        lead.contains("subagent explore#1 (explore) started: look around")
            && lead.contains("subagent explore#1 finished: succeeded")
            && lead.contains("→ task "),
        "{lead}"
    );
}
