//! What CI gets (SPEC §9): the JSONL event stream and the GitHub Actions summary, annotations
//! and groups, through the binary.

use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::fake::{Fake, anthropic_text, anthropic_tool};
use crate::support::Test;

const KEY: &str = "sk-test-key-0000";
const MODELS: &str = "[models]\ndefault = \"anthropic/m\"\n";

fn bad_request() -> ResponseTemplate {
    ResponseTemplate::new(400).set_body_json(
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt too odd"}}),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn jsonl_streams_every_step_and_tool_event() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-a",
            vec![
                anthropic_tool("t1", "list_dir", json!({"path": "."})),
                anthropic_text("a done"),
            ],
        ),
        ("MARK-b", vec![anthropic_text("b done")]),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"MARK-a\"\n[steps.b]\nagent = \"explore\"\nneeds = [\"a\"]\nprompt = \"MARK-b {{{{ steps.a.summary }}}}\"\n"
    );
    let (out, _test) = Test::new()
        .file("w.toml", &workflow)
        .env("ANTHROPIC_BASE_URL", &fake.uri())
        .env("ANTHROPIC_API_KEY", KEY)
        .args(&["run", "w.toml", "--format", "jsonl"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let events: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names.first(), Some(&"run_started"));
    assert_eq!(names.last(), Some(&"run_finished"));
    assert!(
        events
            .iter()
            .all(|e| e["at"].as_str().is_some_and(|at| at.ends_with('Z')))
    );
    let of = |name: &str, step: &str| {
        events
            .iter()
            .filter(|e| e["event"] == name && e["step"] == step)
            .count()
    };
    for step in ["a", "b"] {
        assert_eq!(of("step_started", step), 1, "{step}");
        assert_eq!(of("step_finished", step), 1, "{step}");
    }
    assert_eq!(of("tool_called", "a"), 1);
    assert_eq!(of("tool_finished", "a"), 1);
    let called = events.iter().find(|e| e["event"] == "tool_called").unwrap();
    assert_eq!(called["name"], "list_dir");
    assert_eq!(called["input"]["path"], ".");
    let finished = events
        .iter()
        .find(|e| e["event"] == "step_finished" && e["step"] == "b")
        .unwrap();
    assert_eq!(finished["status"], "succeeded");
    assert_eq!(finished["summary"], "b done");
    // a's end comes before b's start: the stream is in the order things happened.
    let position = |name: &str, step: &str| {
        events
            .iter()
            .position(|e| e["event"] == name && e["step"] == step)
            .unwrap()
    };
    assert!(position("step_finished", "a") < position("step_started", "b"));
    assert_eq!(events.last().unwrap()["status"], "succeeded");
}

#[tokio::test(flavor = "multi_thread")]
async fn github_actions_get_a_summary_annotations_and_groups() {
    let fake = Fake::anthropic_routed(vec![
        // Two runs.
        (
            "MARK-a",
            vec![anthropic_text("a done"), anthropic_text("a done")],
        ),
        ("MARK-b", vec![bad_request(), bad_request()]),
    ])
    .await;
    let workflow = format!(
        "name = \"gh\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"MARK-a\"\n[steps.b]\nagent = \"explore\"\nprompt = \"MARK-b\"\n[steps.c]\nagent = \"explore\"\nneeds = [\"a\"]\nif = \"steps.a.status == 'failed'\"\nprompt = \"MARK-c\"\n"
    );
    let test = Test::new()
        .file("w.toml", &workflow)
        .file("summary.md", "previous step's summary\n");
    let summary = test.path().join("summary.md");
    let test = test
        .env("ANTHROPIC_BASE_URL", &fake.uri())
        .env("ANTHROPIC_API_KEY", KEY)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", summary.to_str().unwrap())
        .args(&["run", "w.toml", "--format", "json"]);
    let (out, test) = test.run_async().await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    // stdout stays the run's JSON.
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(run["steps"]["b"]["status"], "failed");

    let err = &out.stderr;
    assert!(
        err.contains("::error title=step b failed::model request failed"),
        "{err}"
    );
    assert!(err.contains("::warning title=step c skipped::"), "{err}");
    assert!(err.contains("::group::[explore] a done ("), "{err}");
    assert_eq!(err.matches("::group::").count(), 3, "{err}");
    assert_eq!(err.matches("::endgroup::").count(), 3, "{err}");

    let text = std::fs::read_to_string(&summary).unwrap();
    assert!(
        text.starts_with("previous step's summary\n### runner: gh failed after "),
        "{text}"
    );
    for row in [
        "| `a` | ✅ succeeded |",
        "| `b` | ❌ failed |",
        "| `c` | ⏭️ skipped |",
    ] {
        assert!(text.contains(row), "{row} in {text}");
    }
    assert!(
        text.contains("**Failures**\n\n- `b`: model request failed"),
        "{text}"
    );

    // A second run appends; nothing is overwritten.
    let (_, _test) = test.run_async().await;
    let again = std::fs::read_to_string(&summary).unwrap();
    assert!(again.starts_with(&text));
    assert_eq!(again.matches("### runner: gh").count(), 2);
}
