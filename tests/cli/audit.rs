//! `runner audit`: recorded runs of real workflows against the fake model API (real bash under
//! its sandbox, real git for a worktree), audited as text and JSON, with `--fail-on`.

use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::fake::{Fake, anthropic_text, anthropic_tool, anthropic_tools, ok};
use crate::support::{Output, Test, init_repo};

const KEY: &str = "sk-ant-audit-9f3c2b71d0e4a6";
const HEAD: &str = "name = \"audited\"\n[models]\ndefault = \"anthropic/m\"\n";

async fn again(test: Test, args: &[&str]) -> (Output, Test) {
    test.clear_args().args(args).run_async().await
}

/// The audit as JSON, with its exit status.
async fn audit_json(test: Test, extra: &[&str]) -> (Value, i32, Test) {
    let mut args = vec!["audit", "--format", "json"];
    args.extend_from_slice(extra);
    let (out, test) = again(test, &args).await;
    let json = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("audit JSON ({e}):\n{}", out.transcript()));
    (json, out.status, test)
}

/// The findings of `kind`, as (severity, step, subagent).
fn of_kind<'a>(audit: &'a Value, kind: &str) -> Vec<&'a Value> {
    audit["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == kind)
        .collect()
}

/// The one finding of `kind` in `step`, asserted to have `severity`.
fn one<'a>(audit: &'a Value, kind: &str, step: &str, severity: &str) -> &'a Value {
    let found: Vec<&Value> = of_kind(audit, kind)
        .into_iter()
        .filter(|f| f["step"] == step)
        .collect();
    assert_eq!(found.len(), 1, "{kind} in {step}: {audit:#}");
    assert_eq!(found[0]["severity"], severity, "{kind}: {:#}", found[0]);
    found[0]
}

/// A 429 the client may retry at once.
fn rate_limited() -> ResponseTemplate {
    ResponseTemplate::new(429)
        .insert_header("retry-after", "0")
        .set_body_json(
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
        )
}

/// A final answer from another model than the one asked.
fn answered_by(model: &str, text: &str) -> ResponseTemplate {
    ok(json!({
        "id": "msg", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 30}
    }))
}

fn bash(id: &str, command: &str) -> (String, String, Value) {
    (id.into(), "bash".into(), json!({ "command": command }))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_with_each_finding_is_audited_in_text_and_json() {
    let calls = |list: &[(String, String, Value)]| {
        let list: Vec<(&str, &str, Value)> = list
            .iter()
            .map(|(id, name, input)| (id.as_str(), name.as_str(), input.clone()))
            .collect();
        anthropic_tools(&list)
    };
    let grep = |id: &str| {
        (
            id.to_owned(),
            "grep".to_owned(),
            json!({"pattern": "hello"}),
        )
    };
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-reader",
            vec![
                calls(&[
                    (
                        "w1".into(),
                        "write_file".into(),
                        json!({"path": "x.txt", "content": "x"}),
                    ),
                    ("u1".into(), "teleport".into(), json!({"to": "mars"})),
                    (
                        "p1".into(),
                        "read_file".into(),
                        json!({"path": "../outside.txt"}),
                    ),
                    (
                        "s1".into(),
                        "read_file".into(),
                        json!({"path": "notes.txt"}),
                    ),
                ]),
                calls(&[grep("g1"), grep("g2"), grep("g3")]),
                answered_by("claude-other-model", "read"),
            ],
        ),
        (
            "MARK-shell",
            vec![
                rate_limited(),
                rate_limited(),
                rate_limited(),
                rate_limited(),
                rate_limited(),
                calls(&[
                    bash("b1", "echo x > ../outside-audit.txt"),
                    bash("b2", "exec 3<>/dev/tcp/127.0.0.1/9"),
                    bash("b3", "rm scratch.txt"),
                ]),
                anthropic_text("shell done"),
            ],
        ),
        (
            "MARK-tree",
            vec![
                anthropic_tool("t1", "bash", json!({"command": "rm old.txt"})),
                anthropic_text("tree done"),
            ],
        ),
    ])
    .await;
    let workflow = format!(
        "{HEAD}[steps.reader]\nagent = \"explore\"\nprompt = \"MARK-reader\"\n\n[steps.shell]\nagent = \"code\"\nprompt = \"MARK-shell\"\nretries = 6\n\n[steps.tree]\nagent = \"code\"\nprompt = \"MARK-tree\"\nisolation = \"worktree\"\n"
    );
    let test = Test::new()
        .file("w.toml", &workflow)
        .file("notes.txt", &format!("hello\nthe key is {KEY}\n"))
        .file("scratch.txt", "scratch\n")
        .file("old.txt", "old\n");
    init_repo(test.path());
    let (ran, test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert_eq!(ran.status, 0, "{}", ran.transcript());

    let (audit, status, test) = audit_json(test, &[]).await;
    assert_eq!(status, 0, "no --fail-on: exit 0 whatever is found");
    // Not granted, unknown, a path refused, each where it was called.
    let granted = one(&audit, "tool_not_granted", "reader", "high");
    assert_eq!(granted["evidence"]["call_id"], "w1");
    assert_eq!(granted["evidence"]["turn"], 1);
    assert_eq!(
        granted["evidence"]["transcript"],
        "steps/reader/transcript.jsonl"
    );
    assert!(
        granted["message"]
            .as_str()
            .unwrap()
            .contains("`write_file`")
    );
    assert!(
        granted["evidence"]["seen"]
            .as_str()
            .unwrap()
            .contains("x.txt")
    );
    assert_eq!(granted["subagent"], Value::Null);
    assert_eq!(
        one(&audit, "tool_unknown", "reader", "low")["evidence"]["call_id"],
        "u1"
    );
    let path = one(&audit, "path_refused", "reader", "high");
    assert_eq!(path["evidence"]["call_id"], "p1");
    assert!(
        path["message"].as_str().unwrap().contains("outside"),
        "{path:#}"
    );
    // The key in notes.txt was hidden on its way to the model: said, and hidden here too.
    let secret = one(&audit, "secret_in_output", "reader", "medium");
    assert_eq!(secret["evidence"]["call_id"], "s1");
    let repeated = one(&audit, "repeated_calls", "reader", "low");
    assert_eq!(repeated["evidence"]["call_id"], "g1");
    assert_eq!(repeated["evidence"]["turn"], 2);
    assert!(
        repeated["message"]
            .as_str()
            .unwrap()
            .contains("3 times in a row")
    );
    let model = one(&audit, "model_differs", "reader", "medium");
    assert!(
        model["message"]
            .as_str()
            .unwrap()
            .contains("claude-other-model"),
        "{model:#}"
    );
    // The sandbox's refusals, as bash printed them.
    let sandbox = one(&audit, "sandbox_refused", "shell", "medium");
    assert_eq!(sandbox["evidence"]["call_id"], "b1");
    let network = one(&audit, "network_refused", "shell", "high");
    assert_eq!(network["evidence"]["call_id"], "b2");
    let storm = one(&audit, "retry_storm", "shell", "medium");
    assert!(
        storm["message"].as_str().unwrap().contains("5 times"),
        "{storm:#}"
    );
    let rm = of_kind(&audit, "file_deleted");
    assert!(
        rm.iter().any(|f| f["step"] == "shell"
            && f["severity"] == "low"
            && f["evidence"]["call_id"] == "b3"),
        "{audit:#}"
    );
    // The worktree's diff deletes old.txt: found in the record, not a transcript.
    assert!(
        rm.iter().any(|f| f["step"] == "tree"
            && f["severity"] == "medium"
            && f["evidence"]["transcript"] == Value::Null
            && f["message"].as_str().unwrap().contains("old.txt")),
        "{audit:#}"
    );
    // The shape: counts add up to the findings, nothing is left out or unaudited.
    let findings = audit["findings"].as_array().unwrap();
    let counted: u64 = ["high", "medium", "low"]
        .iter()
        .map(|l| audit["counts"][l].as_u64().unwrap())
        .sum();
    assert_eq!(counted as usize, findings.len());
    assert_eq!(audit["left_out"], 0);
    assert_eq!(audit["not_audited"], json!([]));
    for f in findings {
        for key in [
            "kind", "severity", "step", "subagent", "message", "evidence",
        ] {
            assert!(f.get(key).is_some(), "{key} missing: {f:#}");
        }
        for key in ["transcript", "turn", "call_id", "seen"] {
            assert!(f["evidence"].get(key).is_some(), "{key} missing: {f:#}");
        }
    }
    assert!(!audit.to_string().contains(KEY), "the key leaked");

    // The same for people: grouped by severity, most severe first, a summary at the end.
    let (text, test) = again(test, &["audit"]).await;
    assert_eq!(text.status, 0, "{}", text.transcript());
    let out = &text.stdout;
    let (high, medium, low) = (
        out.find("\nhigh\n").expect(out),
        out.find("\nmedium\n").expect(out),
        out.find("\nlow\n").expect(out),
    );
    assert!(high < medium && medium < low, "{out}");
    for kind in [
        "tool_not_granted",
        "path_refused",
        "network_refused",
        "sandbox_refused",
        "secret_in_output",
        "model_differs",
        "retry_storm",
        "file_deleted",
        "repeated_calls",
        "tool_unknown",
    ] {
        assert!(out.contains(&format!("  {kind}  step ")), "{kind}:\n{out}");
    }
    assert!(
        out.contains("at: steps/reader/transcript.jsonl, turn 1, call w1"),
        "{out}"
    );
    let summary = format!(
        "{} findings: {} high, {} medium, {} low",
        findings.len(),
        audit["counts"]["high"],
        audit["counts"]["medium"],
        audit["counts"]["low"]
    );
    assert!(out.trim_end().ends_with(&summary), "{summary}:\n{out}");
    assert!(!out.contains(KEY), "the key leaked");

    // CI: every level reaches a run with a high finding.
    let mut test = test;
    for level in ["high", "medium", "low"] {
        let (failed, back) = again(test, &["audit", "--fail-on", level]).await;
        assert_eq!(
            failed.status,
            1,
            "--fail-on {level}: {}",
            failed.transcript()
        );
        test = back;
    }
}

/// A run that did only what it was meant to: no findings, exit 0 even with `--fail-on low`;
/// named by id, by its folder, and as `latest`. Its resumption reuses the step, which is said
/// not audited (its own run was).
#[tokio::test(flavor = "multi_thread")]
async fn a_clean_run_has_no_findings() {
    let fake = Fake::anthropic(vec![
        anthropic_tool("t1", "read_file", json!({"path": "notes.txt"})),
        anthropic_text("The notes say hello."),
    ])
    .await;
    let workflow = format!(
        "{HEAD}[steps.s]\nagent = \"explore\"\nprompt = \"read the notes\"\nchecks = [\"true\"]\n"
    );
    let (ran, test) = Test::new()
        .file("w.toml", &workflow)
        .file("notes.txt", "hello\n")
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert_eq!(ran.status, 0, "{}", ran.transcript());
    let (text, test) = again(test, &["audit", "--fail-on", "low"]).await;
    assert_eq!(text.status, 0, "{}", text.transcript());
    assert!(text.stdout.starts_with("audit of run "), "{}", text.stdout);
    assert!(
        text.stdout.trim_end().ends_with("\nno findings"),
        "{}",
        text.stdout
    );
    assert!(!text.stdout.contains("\nhigh\n") && !text.stdout.contains("\nlow\n"));
    let (audit, status, test) = audit_json(test, &["--fail-on", "low"]).await;
    assert_eq!(status, 0);
    assert_eq!(audit["findings"], json!([]));
    assert_eq!(audit["counts"], json!({"high": 0, "medium": 0, "low": 0}));
    assert_eq!(audit["workflow"], "audited");
    assert_eq!(audit["status"], "succeeded");
    let id = audit["run_id"].as_str().unwrap().to_owned();
    // By id and by folder, the same run.
    let (by_id, _, test) = audit_json(test, &[&id]).await;
    assert_eq!(by_id["run_id"], id.as_str());
    let folder = format!(".runner/runs/{id}");
    let (by_folder, _, test) = audit_json(test, &[&folder]).await;
    assert_eq!(by_folder["run_id"], id.as_str());
    assert_eq!(by_folder["findings"], json!([]));

    let (resumed, test) = again(test, &["run", "w.toml", "--resume", "latest"]).await;
    assert_eq!(resumed.status, 0, "{}", resumed.transcript());
    let (audit, _, test) = audit_json(test, &[]).await;
    assert_ne!(audit["run_id"], id.as_str());
    assert_eq!(audit["findings"], json!([]));
    assert_eq!(audit["not_audited"][0]["step"], "s");
    assert!(
        audit["not_audited"][0]["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("reused from run {id}")),
        "{audit:#}"
    );
    let (text, _) = again(test, &["audit"]).await;
    assert!(
        text.stdout
            .contains(&format!("not audited: step `s`: reused from run {id}")),
        "{}",
        text.stdout
    );
}

/// `--fail-on` exits 1 only at or above its level: a run whose one finding is low.
#[tokio::test(flavor = "multi_thread")]
async fn fail_on_counts_only_findings_at_or_above_its_level() {
    let fake = Fake::anthropic(vec![
        anthropic_tool("u1", "teleport", json!({"to": "mars"})),
        anthropic_text("stayed"),
    ])
    .await;
    let workflow = format!("{HEAD}[steps.s]\nagent = \"explore\"\nprompt = \"go\"\n");
    let (ran, test) = Test::new()
        .file("w.toml", &workflow)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert_eq!(ran.status, 0, "{}", ran.transcript());
    let (audit, status, mut test) = audit_json(test, &[]).await;
    assert_eq!(status, 0);
    let kinds: Vec<&Value> = audit["findings"].as_array().unwrap().iter().collect();
    assert_eq!(kinds.len(), 1, "{audit:#}");
    one(&audit, "tool_unknown", "s", "low");
    for (level, want) in [("low", 1), ("medium", 0), ("high", 0)] {
        let (out, back) = again(test, &["audit", "--fail-on", level]).await;
        assert_eq!(out.status, want, "--fail-on {level}: {}", out.transcript());
        assert!(
            out.stdout.trim_end().ends_with("1 finding: 1 low"),
            "{}",
            out.stdout
        );
        test = back;
    }
    let (bad, _) = again(test, &["audit", "--fail-on", "severe"]).await;
    assert_eq!(bad.status, 2, "{}", bad.transcript());
}

/// A step's cost and the run's above the forecast of the run before: low for the step,
/// medium for the run; `--fail-on medium` fails, `--fail-on high` does not.
#[tokio::test(flavor = "multi_thread")]
async fn a_cost_above_the_forecast_is_found() {
    let fake = Fake::anthropic(vec![
        anthropic_text("cheap"),
        anthropic_tool("t1", "read_file", json!({"path": "notes.txt"})),
        anthropic_text("dearer"),
    ])
    .await;
    let workflow = format!(
        "{HEAD}[prices.\"anthropic/m\"]\ninput = 3.0\noutput = 15.0\n[steps.s]\nagent = \"explore\"\nprompt = \"look\"\n"
    );
    let (first, test) = Test::new()
        .file("w.toml", &workflow)
        .file("notes.txt", "hello\n")
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert_eq!(first.status, 0, "{}", first.transcript());
    // Without history there is no forecast, and no finding.
    let (audit, _, test) = audit_json(test, &[]).await;
    assert_eq!(audit["findings"], json!([]), "{audit:#}");
    let (second, test) = again(test, &["run", "w.toml"]).await;
    assert_eq!(second.status, 0, "{}", second.transcript());
    let (audit, status, test) = audit_json(test, &["--fail-on", "medium"]).await;
    assert_eq!(status, 1);
    let step = one(&audit, "cost_over_forecast", "s", "low");
    assert!(
        step["message"]
            .as_str()
            .unwrap()
            .contains("forecast's high"),
        "{step:#}"
    );
    assert_eq!(step["evidence"]["transcript"], Value::Null);
    let run: Vec<&Value> = of_kind(&audit, "cost_over_forecast")
        .into_iter()
        .filter(|f| f["step"].is_null())
        .collect();
    assert_eq!(run.len(), 1, "{audit:#}");
    assert_eq!(run[0]["severity"], "medium");
    let (out, _) = again(test, &["audit", "--fail-on", "high"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stdout
            .contains("  cost_over_forecast  run: the run cost"),
        "{}",
        out.stdout
    );
}

/// A step with a check that succeeded without it: made from a real run's record with one field
/// changed (its `checks` emptied), since runner never records such a run. The changed record
/// no longer carries the seal, which is a finding too.
#[tokio::test(flavor = "multi_thread")]
async fn a_success_whose_checks_did_not_run_is_high() {
    let fake = Fake::anthropic(vec![anthropic_text("done")]).await;
    let workflow =
        format!("{HEAD}[steps.s]\nagent = \"explore\"\nprompt = \"look\"\nchecks = [\"true\"]\n");
    let (ran, test) = Test::new()
        .file("w.toml", &workflow)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--run-id", "checked-run"])
        .run_async()
        .await;
    assert_eq!(ran.status, 0, "{}", ran.transcript());
    let path = test.path().join(".runner/runs/checked-run/run.json");
    let mut record: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(record["steps"]["s"]["checks"].as_array().unwrap().len(), 1);
    assert_eq!(record["planned"]["s"]["checks"], 1);
    record["steps"]["s"]["checks"] = json!([]);
    std::fs::write(&path, record.to_string()).unwrap();
    let (out, test) = again(test, &["audit", "checked-run", "--fail-on", "high"]).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("warning: run checked-run is not one you recorded here"),
        "{}",
        out.stderr
    );
    assert!(
        out.stdout
            .contains("  checks_skipped  step s: succeeded, but 1 of its 1 checks"),
        "{}",
        out.stdout
    );
    let (audit, _, _) = audit_json(test, &["checked-run"]).await;
    let skipped = one(&audit, "checks_skipped", "s", "high");
    assert_eq!(skipped["evidence"]["seen"], "1 planned, 0 run");
    let sealed = of_kind(&audit, "record_not_sealed");
    assert_eq!(sealed.len(), 1);
    assert_eq!(sealed[0]["severity"], "medium");
}

/// A run that cannot be read is exit 2 with the usual error, whatever `--fail-on` says.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_does_not_exist_is_an_error() {
    let (none, test) = Test::new().args(&["audit"]).run_async().await;
    assert_eq!(none.status, 2, "{}", none.transcript());
    assert!(
        none.stderr
            .starts_with("error: latest: there are no runs in"),
        "{}",
        none.stderr
    );
    let (missing, test) = again(
        test,
        &["audit", "20990101T000000000-dead", "--fail-on", "low"],
    )
    .await;
    assert_eq!(missing.status, 2, "{}", missing.transcript());
    assert!(
        missing.stderr.contains("error: ") && missing.stderr.contains("20990101T000000000-dead"),
        "{}",
        missing.stderr
    );
    assert!(missing.stdout.is_empty());
    let (not_a_run, test) = again(test, &["audit", "../../etc"]).await;
    assert_eq!(not_a_run.status, 2, "{}", not_a_run.transcript());
    assert!(
        not_a_run.stderr.contains("is not a run's folder"),
        "{}",
        not_a_run.stderr
    );
    let (bad_id, _) = again(test, &["audit", "not a run"]).await;
    assert_eq!(bad_id.status, 2, "{}", bad_id.transcript());
    assert!(bad_id.stderr.contains("not a run id"), "{}", bad_id.stderr);
}

/// A finding in a subagent names the step and the subagent, and points at its own transcript.
#[tokio::test(flavor = "multi_thread")]
async fn a_subagents_finding_names_its_step_and_subagent() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-sub",
            vec![
                anthropic_tool("w9", "write_file", json!({"path": "y.txt", "content": "y"})),
                anthropic_text("looked"),
            ],
        ),
        (
            "MARK-lead",
            vec![
                anthropic_tool(
                    "k1",
                    "task",
                    json!({"description": "look", "prompt": "MARK-sub look around", "subagent_type": "explore"}),
                ),
                anthropic_text("lead done"),
            ],
        ),
    ])
    .await;
    let workflow = format!("{HEAD}[steps.lead]\nagent = \"code\"\nprompt = \"MARK-lead\"\n");
    let (ran, test) = Test::new()
        .file("w.toml", &workflow)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert_eq!(ran.status, 0, "{}", ran.transcript());
    let (audit, _, test) = audit_json(test, &[]).await;
    let found = one(&audit, "tool_not_granted", "lead", "high");
    let agent = found["subagent"].as_str().expect("a subagent");
    assert!(agent.starts_with("explore"), "{found:#}");
    assert_eq!(
        found["evidence"]["transcript"],
        format!("steps/lead/subagents/{agent}/transcript.jsonl")
    );
    assert_eq!(found["evidence"]["call_id"], "w9");
    let (text, _) = again(test, &["audit"]).await;
    assert!(
        text.stdout.contains(&format!(
            "  tool_not_granted  step lead, subagent {agent}: called `write_file`"
        )),
        "{}",
        text.stdout
    );
}
