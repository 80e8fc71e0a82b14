//! What the user sees of a run (docs/src/runs.md "Output", "The answer"; docs/src/ci.md "Record
//! and replay"): the answers after the table, drift as a warning with `--no-progress`, a
//! heartbeat in plain output, `show` in plan order with skipped steps apart, a failure's output
//! once, and what `--record` wrote.

use std::io::{BufRead, BufReader, Read};
use std::sync::Mutex;

use serde_json::Value;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::fake::{Fake, anthropic_text};
use crate::support::Test;

const KEY: &str = "sk-test-key-0000";

/// Three leaves and a needed step, named so that plan order is not alphabetical: `z_look` and
/// `m_verdict` (structured) in the first wave, `a_report` (needs `z_look`) and `s_skip` (its
/// `if` false) after.
const FOUND: &str = r#"name = "found"
[models]
default = "anthropic/m"
[inputs.mode]
default = "quick"
[steps.z_look]
agent = "explore"
prompt = "MARK-z look around"
[steps.m_verdict]
run = "echo '{\"ok\": true}'"
output_schema = { type = "object", properties = { ok = { type = "boolean" } }, required = ["ok"] }
[steps.a_report]
agent = "explore"
needs = ["z_look"]
prompt = "MARK-a report on {{ steps.z_look.summary }}"
[steps.s_skip]
run = "echo never"
needs = ["z_look"]
if = "inputs.mode == 'full'"
"#;

async fn found() -> Fake {
    Fake::anthropic_routed(vec![
        // Twice each: the test runs the workflow twice.
        ("MARK-z", vec![anthropic_text("three files"); 2]),
        (
            "MARK-a",
            vec![anthropic_text("The report:\nline two of a long answer"); 2],
        ),
    ])
    .await
}

/// After the table, `runner run` prints each leaf's answer on stdout, headed by its id and in
/// plan order, structured output as pretty JSON, a skipped leaf nothing; `--quiet` prints none.
/// `runner show` lists the steps in plan order, the skipped one under `skipped:`, and ends with
/// the same answers.
#[tokio::test(flavor = "multi_thread")]
async fn the_run_says_what_it_found_and_show_keeps_plan_order() {
    let fake = found().await;
    let (out, test) = Test::new()
        .file("w.toml", FOUND)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let answers = "── m_verdict ──\n{\n  \"ok\": true\n}\n\n── a_report ──\nThe report:\nline two of a long answer\n";
    assert_eq!(out.stdout, answers, "{}", out.transcript());
    assert!(
        out.stderr.contains("record and transcripts:"),
        "{}",
        out.stderr
    );

    let (quiet, test) = test
        .clear_args()
        .args(&["run", "w.toml", "--quiet", "--run-id", "again"])
        .run_async()
        .await;
    assert_eq!(quiet.status, 0, "{}", quiet.transcript());
    assert_eq!(quiet.stdout, "", "{}", quiet.transcript());

    let (shown, test) = test.clear_args().args(&["show", "again"]).run_async().await;
    assert_eq!(shown.status, 0, "{}", shown.transcript());
    let rows: Vec<&str> = shown
        .stdout
        .lines()
        .skip(2)
        .take(4)
        .map(|l| l.split_whitespace().next().unwrap_or_default())
        .collect();
    assert_eq!(
        rows,
        ["m_verdict", "z_look", "a_report", "s_skip"],
        "{}",
        shown.stdout
    );
    assert!(
        shown
            .stdout
            .contains("skipped: s_skip: `if` is false: inputs.mode == 'full'")
            && !shown.stdout.contains("failed:"),
        "{}",
        shown.stdout
    );
    assert!(shown.stdout.ends_with(answers), "{}", shown.stdout);
    // The report: plan order in its steps and its timeline.
    let (wrote, test) = test
        .clear_args()
        .args(&["report", "again", "-o", "r.html"])
        .run_async()
        .await;
    assert_eq!(wrote.status, 0, "{}", wrote.transcript());
    let html = std::fs::read_to_string(test.path().join("r.html")).unwrap();
    let order = |opening: &str| -> Vec<String> {
        html.split(opening)
            .skip(1)
            .filter_map(|rest| rest.split("data-step=\"").nth(1))
            .map(|rest| rest.split('"').next().unwrap_or_default().to_owned())
            .collect()
    };
    let plan = ["m_verdict", "z_look", "a_report", "s_skip"];
    assert_eq!(order("<g class=\"row"), plan, "timeline");
    assert_eq!(order("<article class=\"step"), plan, "step by step");
    assert_eq!(order("<tr class=\"step-row"), plan, "steps table");
    // Times read to the second: the start has no fraction of a second.
    let header = shown.stdout.lines().next().unwrap();
    let started = header.split("started ").nth(1).unwrap();
    let stamp = &started[..20];
    assert!(
        stamp.ends_with('Z') && stamp.as_bytes()[10] == b' ' && !stamp.contains('.'),
        "{header}"
    );
}

/// Answers each request only once the test releases it: a step that takes as long as the test
/// wants, with no clock in the test.
struct Held(Mutex<std::sync::mpsc::Receiver<()>>);

impl Respond for Held {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let _ = self.0.lock().unwrap().recv();
        anthropic_text("the slow answer")
    }
}

/// A run of one step whose model answers only once its heartbeat was seen (and, by then,
/// `runner show` of the running run was taken): its status, stdout, stderr lines, and what
/// `show` said.
async fn held_run(env: &[(&str, &str)]) -> (Option<i32>, String, Vec<String>, String) {
    let (release, held) = std::sync::mpsc::channel();
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(Held(Mutex::new(held)))
        .mount(&server)
        .await;
    // A step that got no heartbeat fails at its timeout rather than hanging the test.
    let workflow = "name = \"slow\"\n[models]\ndefault = \"anthropic/m\"\n[steps.s]\nagent = \"explore\"\ntimeout = \"120s\"\nprompt = \"Think hard\"\n";
    let mut test = Test::new()
        .file("w.toml", workflow)
        .anthropic_api(&server.uri(), KEY)
        .env("RUNNER_HEARTBEAT_SECS", "0.2")
        .args(&["run", "w.toml", "--run-id", "held"]);
    for (key, value) in env {
        test = test.env(key, value);
    }
    tokio::task::spawn_blocking(move || {
        let mut child = test.spawn_piped();
        let show = test.clear_args().args(&["show", "held"]);
        let mut lines = Vec::new();
        let mut shown = String::new();
        let err = child.stderr.take().unwrap();
        for line in BufReader::new(err).lines() {
            let line = line.unwrap();
            if line.starts_with("[explore] s running:")
                && !lines
                    .iter()
                    .any(|l: &String| l.starts_with("[explore] s running:"))
            {
                // While it runs, `show` says for how long so far (run.json is written soon
                // after the step starts: a bounded poll for it).
                for _ in 0..500 {
                    let out = show.run_keeping();
                    if out.status == 0 {
                        shown = out.stdout;
                        break;
                    }
                }
                let _ = release.send(());
            }
            lines.push(line);
        }
        let mut stdout = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        let status = child.wait().unwrap();
        (status.code(), stdout, lines, shown)
    })
    .await
    .unwrap()
}

/// Without a terminal, a step waiting on its model says it is alive (turn, tools, tokens, time)
/// every heartbeat (30 s; `RUNNER_HEARTBEAT_SECS` here), between its start and its end; `show`
/// of the running run says how long it has run so far.
#[tokio::test(flavor = "multi_thread")]
async fn plain_output_says_a_slow_step_is_alive() {
    let (status, stdout, stderr, shown) = held_run(&[]).await;
    let text = stderr.join("\n");
    assert_eq!(status, Some(0), "{text}");
    let beat = stderr
        .iter()
        .find(|l| l.starts_with("[explore] s running:"))
        .unwrap_or_else(|| panic!("no heartbeat:\n{text}"));
    assert!(
        beat.starts_with("[explore] s running: turn 1, 0 tools, 0 tokens, "),
        "{beat}"
    );
    let at = |prefix: &str| stderr.iter().position(|l| l.starts_with(prefix)).unwrap();
    assert!(
        at("[explore] s started") < at("[explore] s running:"),
        "{text}"
    );
    assert!(
        at("[explore] s running:") < at("[explore] s done"),
        "{text}"
    );
    assert_eq!(stdout, "the slow answer\n");
    let header = shown.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("run held  slow  running  started ") && header.ends_with(" so far"),
        "{shown}"
    );
}

/// In a GitHub Actions job the heartbeat is printed as it comes, before the step's group
/// (which is printed when the step ends).
#[tokio::test(flavor = "multi_thread")]
async fn a_github_job_log_says_a_slow_step_is_alive() {
    let (status, _stdout, stderr, _shown) =
        held_run(&[("GITHUB_ACTIONS", "true"), ("GITHUB_STEP_SUMMARY", "")]).await;
    let text = stderr.join("\n");
    assert_eq!(status, Some(0), "{text}");
    let at = |prefix: &str| {
        stderr
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}`:\n{text}"))
    };
    assert!(
        at("[explore] s running: turn 1, 0 tools, 0 tokens, ") < at("::group::[explore] s done"),
        "{text}"
    );
}

/// A changed prompt replayed with `--no-progress` (the usual CI flag) is still warned of on
/// stderr, counted under the table and recorded in run.json; `--record` says what it wrote.
#[tokio::test(flavor = "multi_thread")]
async fn drift_is_a_warning_with_no_progress() {
    let fake = Fake::anthropic(vec![anthropic_text("the answer")]).await;
    let workflow = "name = \"d\"\n[models]\ndefault = \"anthropic/m\"\n[steps.s]\nagent = \"explore\"\nprompt = \"MARK ask once\"\n";
    let (out, test) = Test::new()
        .file("w.toml", workflow)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--no-progress", "--record", "cassettes"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stderr.contains(
            "recorded: 1 cassette (1 request of 1 step) in cassettes; replay them with `--replay cassettes`"
        ),
        "{}",
        out.stderr
    );
    std::fs::write(
        test.path().join("w.toml"),
        workflow.replace("ask once", "ask again"),
    )
    .unwrap();
    let (out, _test) = test
        .clear_args()
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .args(&[
            "run",
            "w.toml",
            "--no-progress",
            "--replay",
            "cassettes",
            "--format",
            "json",
        ])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let drift: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("replay drift in request 1"))
        .collect();
    assert_eq!(drift.len(), 1, "{}", out.stderr);
    assert!(
        drift[0].starts_with("[explore] s: replay drift in request 1: first difference")
            && drift[0].contains("ask again"),
        "{}",
        drift[0]
    );
    assert!(
        out.stderr.contains(
            "warning: 1 request drifted from its recording (s: 1) and was answered from the cassettes all the same"
        ) && out.stderr.contains("`--replay-strict`"),
        "{}",
        out.stderr
    );
    let record: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(record["replay_drift"], 1, "{record}");
    assert_eq!(record["steps"]["s"]["replay_drift"], 1, "{record}");
}

/// A failed check's output (a Python traceback) is printed once: under the table, not in the
/// progress line too; and `1 tool`, not `1 tools`.
#[tokio::test(flavor = "multi_thread")]
async fn a_failures_output_is_printed_once() {
    let fake = Fake::anthropic(vec![
        crate::fake::anthropic_tool("t1", "list_dir", serde_json::json!({"path": "."})),
        anthropic_text("done"),
    ])
    .await;
    let workflow = "name = \"c\"\n[models]\ndefault = \"anthropic/m\"\n[steps.s]\nagent = \"code\"\nprompt = \"Fix it\"\nchecks = [\"python3 check.py\"]\ncheck_retries = 0\n";
    let check = "def main():\n    raise ValueError('TRACE-MARK the check failed')\n\nmain()\n";
    let (out, _test) = Test::new()
        .file("w.toml", workflow)
        .file("check.py", check)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    assert_eq!(
        out.stderr.matches("ValueError: TRACE-MARK").count(),
        1,
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.matches("Traceback").count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("[code] s failed (1 tool, "),
        "{}",
        out.stderr
    );
}
