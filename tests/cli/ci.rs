//! What CI gets (docs/src/ci.md): the JSONL event stream and the GitHub Actions summary,
//! annotations and groups, through the binary.

use serde_json::{Value, json};

use crate::fake::{Fake, anthropic_text, anthropic_tool};
use crate::support::{Test, init_repo};

const KEY: &str = "sk-test-key-0000";
const MODELS: &str = "[models]\ndefault = \"anthropic/m\"\n";

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
        .anthropic_api(&fake.uri(), KEY)
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
        (
            "MARK-b",
            vec![
                crate::fake::bad_request("prompt too odd"),
                crate::fake::bad_request("prompt too odd"),
            ],
        ),
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
        .anthropic_api(&fake.uri(), KEY)
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

/// A run worth replaying: a tool call, a result passed on, and a subagent.
const PIPELINE: &str = "name = \"p\"\n[models]\ndefault = \"anthropic/m\"\n[steps.a]\nagent = \"explore\"\nprompt = \"MARK-a list the files\"\n[steps.b]\nagent = \"code\"\nneeds = [\"a\"]\nprompt = \"MARK-b check {{ steps.a.summary }}\"\n";

fn summaries(run: &Value) -> Vec<(String, String, String)> {
    run["steps"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(id, s)| {
            (
                id.clone(),
                s["status"].as_str().unwrap().to_owned(),
                s["summary"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recorded_run_replays_elsewhere_without_network_or_key() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-a",
            vec![
                anthropic_tool("t1", "list_dir", json!({"path": "."})),
                anthropic_text("There is notes.txt."),
            ],
        ),
        (
            "MARK-b",
            vec![
                crate::fake::anthropic_tools(&[(
                    "t2",
                    "task",
                    json!({"description": "read notes", "prompt": "MARK-sub read notes.txt", "subagent_type": "explore"}),
                )]),
                anthropic_text("Checked: the notes are fine."),
            ],
        ),
        ("MARK-sub", vec![anthropic_text("The notes say hello.")]),
    ])
    .await;
    let recorded = Test::new()
        .file("w.toml", PIPELINE)
        .file("notes.txt", "hello\n");
    let (out, recorded) = recorded
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json", "--record", "cassettes"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let original: Value = serde_json::from_str(&out.stdout).unwrap();
    let requests = fake.requests().await.len();
    assert_eq!(requests, 5);

    // Cassettes are plain JSON, one per request, by step, with the order beside them.
    let count = |step: &str| {
        std::fs::read_dir(recorded.path().join("cassettes").join(step))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name() != "index.json")
            .count()
    };
    assert_eq!((count("a"), count("b")), (2, 3));
    let index: Value = serde_json::from_str(
        &std::fs::read_to_string(recorded.path().join("cassettes/b/index.json")).unwrap(),
    )
    .unwrap();
    let conversations = index["conversations"].as_object().unwrap();
    assert_eq!(
        conversations["step"].as_array().unwrap().len(),
        2,
        "{index}"
    );
    assert_eq!(
        conversations["explore#1"].as_array().unwrap().len(),
        1,
        "{index}"
    );
    let some = std::fs::read_dir(recorded.path().join("cassettes/a"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| !p.ends_with("index.json"))
        .unwrap();
    let text = std::fs::read_to_string(some).unwrap();
    assert!(!text.contains(KEY));
    let cassette: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(cassette["step"], "a");
    assert!(
        cassette["request"]["messages"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Working directory: <workdir>")
    );

    // Elsewhere, with no key and an API that cannot be reached.
    let replay = Test::new()
        .file("w.toml", PIPELINE)
        .file("notes.txt", "hello\n");
    copy_dir(
        &recorded.path().join("cassettes"),
        &replay.path().join("cassettes"),
    );
    let (out, replay) = replay
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .args(&["run", "w.toml", "--format", "json", "--replay", "cassettes"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let again: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(summaries(&again), summaries(&original));
    assert_eq!(
        again["steps"]["b"]["subagents"][0]["id"],
        original["steps"]["b"]["subagents"][0]["id"]
    );
    assert_eq!(
        fake.requests().await.len(),
        requests,
        "the replay sent nothing"
    );

    // A changed prompt is still answered in order, and each request of the step that differs
    // (both of `b`'s own, not its subagent's) is reported as drift, with both sides.
    std::fs::write(
        replay.path().join("w.toml"),
        PIPELINE.replace("MARK-b check", "MARK-b double-check"),
    )
    .unwrap();
    let (out, replay) = replay.run_async().await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let changed: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(summaries(&changed), summaries(&original));
    let drift = drift_lines(&out.stderr);
    assert_eq!(drift.len(), 2, "{}", out.stderr);
    assert!(
        drift[0].starts_with("[code] b: replay drift in request 1: first difference at character")
            && drift[0].contains("MARK-b check")
            && drift[0].contains("MARK-b double-check"),
        "{}",
        drift[0]
    );
    assert!(drift[1].contains("request 2"), "{}", drift[1]);

    // `--replay-strict` makes drift an error of the step, naming the request and the difference.
    let (out, _replay) = replay_strict(replay).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let strict: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(strict["steps"]["a"]["status"], "succeeded");
    assert_eq!(strict["steps"]["b"]["status"], "failed");
    let error = strict["steps"]["b"]["error"].as_str().unwrap();
    assert!(
        error.contains("step `b` request 1 differs from its recording (`--replay-strict`)")
            && error.contains("MARK-b double-check"),
        "{error}"
    );
}

/// `a` and `b` run on two machines, `c` (needing both) on a third, sharing one run id.
#[tokio::test(flavor = "multi_thread")]
async fn jobs_sharing_a_run_id_merge_their_state_directories() {
    let fake = Fake::anthropic_routed(vec![
        ("MARK-a", vec![anthropic_text("summary of a")]),
        ("MARK-b", vec![anthropic_text("summary of b")]),
        ("MARK-c", vec![anthropic_text("summary of c")]),
    ])
    .await;
    let workflow = format!(
        "name = \"m\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"MARK-a\"\n[steps.b]\nagent = \"explore\"\nprompt = \"MARK-b\"\n[steps.c]\nagent = \"plan\"\nneeds = [\"a\", \"b\"]\nprompt = \"MARK-c {{{{ steps.a.summary }}}} / {{{{ steps.b.summary }}}}\"\n"
    );
    let mut test = Test::new()
        .file("w.toml", &workflow)
        .anthropic_api(&fake.uri(), KEY);
    for (step, state) in [("a", "s1"), ("b", "s2")] {
        let (out, back) = test
            .clear_args()
            .args(&[
                "run",
                "w.toml",
                "--only",
                step,
                "--run-id",
                "4242",
                "--state-dir",
                state,
            ])
            .run_async()
            .await;
        assert_eq!(out.status, 0, "{}", out.transcript());
        test = back;
    }
    // The artifacts of both jobs, downloaded into one directory.
    copy_dir(&test.path().join("s1"), &test.path().join("s3"));
    copy_dir(&test.path().join("s2"), &test.path().join("s3"));
    // Without the run id, `c` has nothing to build on.
    let (out, test) = test
        .clear_args()
        .args(&["run", "w.toml", "--only", "c", "--state-dir", "s3"])
        .run_async()
        .await;
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr.contains("its need `a` has no result to reuse"),
        "{}",
        out.stderr
    );
    let (out, test) = test
        .clear_args()
        .args(&[
            "run",
            "w.toml",
            "--only",
            "c",
            "--run-id",
            "4242",
            "--state-dir",
            "s3",
            "--format",
            "json",
        ])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let c = fake.body_for("MARK-c").await;
    assert!(
        crate::fake::prompt_of(&c).contains("summary of a / summary of b"),
        "{c}"
    );
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(run["run_id"], "4242");
    for (step, summary) in [
        ("a", "summary of a"),
        ("b", "summary of b"),
        ("c", "summary of c"),
    ] {
        assert_eq!(run["steps"][step]["status"], "succeeded", "{step}");
        assert_eq!(run["steps"][step]["summary"], summary, "{step}");
    }
    // The needs another job of the same run decided are reused from the run itself; the job
    // ran its own step.
    for step in ["a", "b"] {
        assert_eq!(run["steps"][step]["reused_from"], "4242", "{step}");
    }
    assert!(run["steps"]["c"].get("reused_from").is_none());
    let on_disk: Value = serde_json::from_str(
        &std::fs::read_to_string(test.path().join("s3/runs/4242/run.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(on_disk["steps"], run["steps"]);
    // Each model call happened once, on its own machine.
    assert_eq!(fake.requests().await.len(), 3);

    let bad = test
        .clear_args()
        .args(&["run", "w.toml", "--run-id", "../x"])
        .run();
    assert_eq!(bad.status, 2);
    assert!(
        bad.stderr.contains("--run-id ../x: use letters"),
        "{}",
        bad.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn diff_reports_a_changed_summary_and_an_added_step() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-a",
            vec![anthropic_text("same"), anthropic_text("same")],
        ),
        (
            "MARK-b",
            vec![
                anthropic_text("auth is in src/auth.rs\nsessions in redis"),
                anthropic_text("auth is in src/login.rs\nsessions in redis"),
            ],
        ),
        ("MARK-c", vec![anthropic_text("new step")]),
    ])
    .await;
    let two = format!(
        "name = \"d\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"MARK-a\"\n[steps.b]\nagent = \"explore\"\nprompt = \"MARK-b\"\n"
    );
    let three = format!("{two}[steps.c]\nagent = \"explore\"\nprompt = \"MARK-c\"\n");
    let mut test = Test::new()
        .file("two.toml", &two)
        .file("three.toml", &three)
        .anthropic_api(&fake.uri(), KEY);
    let mut ids = Vec::new();
    for file in ["two.toml", "three.toml"] {
        let (out, back) = test
            .clear_args()
            .args(&["run", file, "--format", "json"])
            .run_async()
            .await;
        assert_eq!(out.status, 0, "{}", out.transcript());
        let run: Value = serde_json::from_str(&out.stdout).unwrap();
        ids.push(run["run_id"].as_str().unwrap().to_owned());
        test = back;
    }
    let (out, test) = test
        .clear_args()
        .args(&["diff", &ids[0], &ids[1]])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let text = &out.stdout;
    assert!(text.contains("\n= a same (succeeded)\n"), "{text}");
    assert!(text.contains("\n~ b changed (succeeded)\n"), "{text}");
    assert!(
        text.contains("      - auth is in src/auth.rs\n      + auth is in src/login.rs\n        sessions in redis\n"),
        "{text}"
    );
    assert!(text.contains("\n+ c added (succeeded)\n"), "{text}");

    // The same by run directory, as JSON.
    let dir_a = format!(".runner/runs/{}", ids[0]);
    let (out, _test) = test
        .clear_args()
        .args(&["diff", &dir_a, &ids[1], "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let diff: Value = serde_json::from_str(&out.stdout).unwrap();
    let step = |id: &str| {
        diff["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(step("a")["change"], "same");
    assert!(step("a").get("summary").is_none());
    assert_eq!(step("b")["change"], "changed");
    assert_eq!(
        step("b")["summary"],
        json!([
            "auth is in src/auth.rs\nsessions in redis",
            "auth is in src/login.rs\nsessions in redis"
        ])
    );
    assert_eq!(step("c")["change"], "added");
    assert_eq!(step("c")["status"], json!([null, "succeeded"]));

    let missing = Test::new().args(&["diff", "nope", "latest"]).run();
    assert_eq!(missing.status, 2);
    assert!(
        missing
            .stderr
            .contains("`nope` is not a run.json, a run directory, or a run in"),
        "{}",
        missing.stderr
    );
}

/// A need that failed on another machine skips the step, with the reason, as in one run; the job
/// reports its own step, not the other job's failure.
#[tokio::test(flavor = "multi_thread")]
async fn a_need_that_failed_in_another_job_skips_the_step() {
    let fake = Fake::anthropic_routed(vec![(
        "MARK-a",
        vec![crate::fake::bad_request("prompt too odd")],
    )])
    .await;
    let workflow = format!(
        "name = \"m\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"MARK-a\"\n[steps.b]\nagent = \"explore\"\nneeds = [\"a\"]\nprompt = \"MARK-b {{{{ steps.a.summary }}}}\"\n"
    );
    let test = Test::new()
        .file("w.toml", &workflow)
        .anthropic_api(&fake.uri(), KEY);
    let (out, test) = test
        .args(&["run", "w.toml", "--only", "a", "--run-id", "77"])
        .run_async()
        .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let (out, _test) = test
        .clear_args()
        .args(&[
            "run", "w.toml", "--only", "b", "--run-id", "77", "--format", "json",
        ])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(run["steps"]["a"]["status"], "failed");
    assert_eq!(run["steps"]["b"]["status"], "skipped");
    assert_eq!(run["steps"]["b"]["error"], "a did not succeed");
    assert_eq!(fake.count("MARK-b").await, 0);
}

/// The flagship example, recorded into its own checkout as the README teaches, replays twice
/// with no server: the branch name (which holds the run id) reaches the review prompt, and the
/// searches would find the cassettes if tools could see them.
#[tokio::test(flavor = "multi_thread")]
async fn the_flagship_example_replays_from_cassettes_in_its_checkout() {
    let fake = Fake::anthropic_routed(vec![
        (
            "authenticates users",
            vec![
                crate::fake::anthropic_tools(&[
                    ("t1", "glob", json!({"pattern": "**/*"})),
                    ("t2", "grep", json!({"pattern": "session"})),
                ]),
                anthropic_text("Login is in src/auth.py."),
            ],
        ),
        (
            "Find where sessions",
            vec![
                anthropic_tool("t3", "list_dir", json!({"path": "."})),
                anthropic_text("Sessions live in src/auth.py."),
            ],
        ),
        ("Design a migration", vec![anthropic_text("1. Add jwt.py.")]),
        (
            "Implement this plan",
            vec![
                anthropic_tool(
                    "t4",
                    "write_file",
                    json!({"path": "src/jwt.py", "content": "def sign(): pass\n"}),
                ),
                anthropic_text("Added src/jwt.py."),
            ],
        ),
        (
            "Review the JWT migration",
            vec![anthropic_text("No findings.")],
        ),
    ])
    .await;
    let test = Test::new()
        .file(
            "workflows/jwt-migration.toml",
            &std::fs::read_to_string(format!(
                "{}/workflows/jwt-migration.toml",
                crate::support::REPO
            ))
            .unwrap(),
        )
        .file(
            "agents/security-reviewer.md",
            &std::fs::read_to_string(format!(
                "{}/agents/security-reviewer.md",
                crate::support::REPO
            ))
            .unwrap(),
        )
        .file("src/auth.py", "def login(session): pass\n");
    crate::support::init_repo(test.path());
    let run = [
        "run",
        "workflows/jwt-migration.toml",
        "--format",
        "json",
        "-i",
        "test_command=test -f src/jwt.py",
    ];
    let (out, test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&run)
        .args(&["--record", "cassettes"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let recorded: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(fake.requests().await.len(), 8);
    drop(fake);

    let mut test = test;
    for round in 0..2 {
        let (out, again) = test
            .clear_args()
            .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
            .args(&run)
            .args(&["--replay", "cassettes"])
            .run_async()
            .await;
        assert_eq!(out.status, 0, "replay {round}: {}", out.transcript());
        let replayed: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(summaries(&replayed), summaries(&recorded), "replay {round}");
        assert_ne!(replayed["run_id"], recorded["run_id"]);
        test = again;
    }
}

/// The working directory a request names (`Working directory: …` in the step's prompt).
fn workdir_of(body: &Value) -> String {
    let text = body.to_string();
    let at = text.find("Working directory: ").unwrap() + "Working directory: ".len();
    text[at..].split("\\n").next().unwrap().to_owned()
}

/// A check whose output holds a timing (as unittest's, pytest's and cargo's summaries do) is
/// recorded, then replayed: the requests that carry the timing differ from their recording,
/// are answered all the same, and each is reported once as drift; `--replay-strict` refuses.
#[tokio::test(flavor = "multi_thread")]
async fn a_timing_in_a_checks_output_is_drift_not_a_broken_replay() {
    let fake = Fake::anthropic(vec![
        anthropic_text("done"),
        anthropic_tool(
            "t1",
            "write_file",
            json!({"path": "fixed.txt", "content": "yes"}),
        ),
        anthropic_text("fixed"),
    ])
    .await;
    let workflow = "name = \"t\"\n[models]\ndefault = \"anthropic/m\"\n[steps.s]\nagent = \"code\"\nprompt = \"Make the tests pass\"\nchecks = [\"sh check.sh\"]\n";
    // Like `python3 -m unittest`: a summary line with how long the tests took, never the same.
    let check = "echo \"Ran 1 test in 0.$(date +%N)s\"\ntest -f fixed.txt || { echo FAILED; exit 1; }\necho OK\n";
    let test = Test::new().file("w.toml", workflow).file("check.sh", check);
    let (out, test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json", "--record", "cassettes"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let recorded: Value = serde_json::from_str(&out.stdout).unwrap();
    std::fs::remove_file(test.path().join("fixed.txt")).unwrap();
    let (out, test) = test
        .clear_args()
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .args(&["run", "w.toml", "--format", "json", "--replay", "cassettes"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let replayed: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(summaries(&replayed), summaries(&recorded));
    // Request 1 is the prompt; 2 carries the check's failure, 3 keeps it in its history.
    let drift = drift_lines(&out.stderr);
    assert_eq!(drift.len(), 2, "{}", out.stderr);
    assert!(
        drift[0].contains("request 2") && drift[0].contains("Ran 1 test in 0."),
        "{}",
        drift[0]
    );
    assert!(drift[1].contains("request 3"), "{}", drift[1]);
    // The event stream says so too.
    std::fs::remove_file(test.path().join("fixed.txt")).unwrap();
    let (out, test) = test
        .clear_args()
        .args(&[
            "run",
            "w.toml",
            "--format",
            "jsonl",
            "--replay",
            "cassettes",
        ])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let events: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &Value| e["event"] == "replay_drift")
        .collect();
    assert_eq!(events.len(), 2, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        (events[0]["step"].as_str(), events[0]["request"].as_u64()),
        (Some("s"), Some(2))
    );
    assert!(
        events[0]["difference"]
            .as_str()
            .unwrap()
            .contains("recorded `")
    );

    std::fs::remove_file(test.path().join("fixed.txt")).unwrap();
    let (out, _test) = replay_strict(test).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let strict: Value = serde_json::from_str(&out.stdout).unwrap();
    let error = strict["steps"]["s"]["error"].as_str().unwrap();
    assert!(
        error.contains("request 2 differs from its recording"),
        "{error}"
    );
}

/// A real model quotes its working directory (a worktree's path holds the run id): recorded at
/// one path, replayed at another in a new run, the reply names the new directory, its tool call
/// reads the file there, and nothing drifts.
#[tokio::test(flavor = "multi_thread")]
async fn a_reply_that_quotes_its_worktree_replays_at_another_path() {
    let fake = Fake::anthropic_fn(|body| {
        let dir = workdir_of(body);
        if body["messages"].as_array().unwrap().len() == 1 {
            anthropic_tool(
                "t1",
                "read_file",
                json!({"path": format!("{dir}/notes.txt")}),
            )
        } else {
            anthropic_text(&format!("I read {dir}/notes.txt: it says hello."))
        }
    })
    .await;
    let workflow = "name = \"q\"\n[models]\ndefault = \"anthropic/m\"\n[steps.s]\nagent = \"code\"\nisolation = \"worktree\"\nprompt = \"Read the notes\"\n";
    let recorded = Test::new()
        .file("w.toml", workflow)
        .file("notes.txt", "hello\n")
        .file(".gitignore", ".runner/\ncassettes/\n");
    init_repo(recorded.path());
    let (out, recorded) = recorded
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json", "--record", "cassettes"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let first: Value = serde_json::from_str(&out.stdout).unwrap();
    let said = first["steps"]["s"]["summary"].as_str().unwrap().to_owned();
    assert!(
        said.contains(first["run_id"].as_str().unwrap()) || said.contains("worktree"),
        "{said}"
    );
    let cassettes = std::fs::read_dir(recorded.path().join("cassettes/s"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect::<String>();
    assert!(
        !cassettes.contains(recorded.path().to_str().unwrap()),
        "a path was recorded"
    );

    let replay = Test::new()
        .file("w.toml", workflow)
        .file("notes.txt", "hello\n")
        .file(".gitignore", ".runner/\ncassettes/\n");
    init_repo(replay.path());
    copy_dir(
        &recorded.path().join("cassettes"),
        &replay.path().join("cassettes"),
    );
    let (out, replay) = replay
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .args(&[
            "run",
            "w.toml",
            "--format",
            "json",
            "--no-progress",
            "--replay",
            "cassettes",
            "--replay-strict",
        ])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(!out.stderr.contains("replay drift"), "{}", out.stderr);
    let again: Value = serde_json::from_str(&out.stdout).unwrap();
    let summary = again["steps"]["s"]["summary"].as_str().unwrap();
    assert!(
        summary.contains(again["run_id"].as_str().unwrap())
            || summary.contains(
                &std::fs::canonicalize(replay.path())
                    .unwrap()
                    .display()
                    .to_string()
            ),
        "{summary}"
    );
    assert!(
        !summary.contains(recorded.path().to_str().unwrap()),
        "{summary}"
    );
    assert!(summary.ends_with("/notes.txt: it says hello."), "{summary}");
}

/// A job of an exported GitHub workflow runs one step (`--only`): its log and summary speak of
/// that step alone, no warning or row for the steps other jobs run.
#[tokio::test(flavor = "multi_thread")]
async fn a_github_job_with_only_reports_its_own_step_alone() {
    let fake = Fake::anthropic_routed(vec![
        ("MARK-a", vec![anthropic_text("a done")]),
        ("MARK-b", vec![anthropic_text("b done")]),
    ])
    .await;
    let workflow = format!(
        "name = \"gh\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"MARK-a\"\n[steps.b]\nagent = \"explore\"\nneeds = [\"a\"]\nprompt = \"MARK-b {{{{ steps.a.summary }}}}\"\n[steps.c]\nagent = \"explore\"\nprompt = \"MARK-c\"\n"
    );
    let test = Test::new().file("w.toml", &workflow).file("summary.md", "");
    let summary = test.path().join("summary.md");
    let mut test = test
        .anthropic_api(&fake.uri(), KEY)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", summary.to_str().unwrap());
    for step in ["a", "b"] {
        let (out, again) = test
            .clear_args()
            .args(&["run", "w.toml", "--only", step, "--run-id", "4242"])
            .run_async()
            .await;
        test = again;
        assert_eq!(out.status, 0, "{step}: {}", out.transcript());
        assert!(!out.stderr.contains("::warning"), "{step}: {}", out.stderr);
        assert_eq!(out.stderr.matches("::group::").count(), 1, "{}", out.stderr);
    }
    let text = std::fs::read_to_string(&summary).unwrap();
    assert_eq!(text.matches("| `a` |").count(), 1, "{text}");
    assert_eq!(text.matches("| `b` |").count(), 1, "{text}");
    assert!(!text.contains("| `c` |"), "{text}");
    assert!(!text.contains("skipped"), "{text}");
}

/// `w.toml` replayed from `cassettes` with `--replay-strict`, the run's JSON on stdout.
async fn replay_strict(test: Test) -> (crate::support::Output, Test) {
    test.clear_args()
        .args(&[
            "run",
            "w.toml",
            "--format",
            "json",
            "--replay",
            "cassettes",
            "--replay-strict",
        ])
        .run_async()
        .await
}

/// `runner diff` of hostile records: huge summaries cost bounded time and print bounded output
/// (not a quadratic line diff), and ids with terminal escapes print without them.
#[test]
fn diff_of_huge_or_hostile_records_is_bounded_and_clean() {
    let test = Test::new()
        .file("w.toml", "name = \"d\"\n[steps.s]\nrun = \"echo a\"\n")
        .args(&["run", "w.toml", "--format", "json"]);
    let out = test.run_keeping();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let record: Value = serde_json::from_str(&out.stdout).unwrap();
    let many = |tag: &str| {
        (0..20_000)
            .map(|i| format!("{tag} line {i}\n"))
            .collect::<String>()
    };
    let mut a = record.clone();
    a["steps"]["s"]["summary"] = json!(many("old"));
    a["run_id"] = json!("run-a\u{1b}[2J");
    let mut b = record.clone();
    b["steps"]["s"]["summary"] = json!(many("new"));
    b["steps"]["s\u{1b}[8mhidden"] = b["steps"]["s"].clone();
    std::fs::write(test.path().join("a.json"), a.to_string()).unwrap();
    std::fs::write(test.path().join("b.json"), b.to_string()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["diff", "a.json", "b.json"])
        .current_dir(test.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains('\u{1b}'), "an escape reached the terminal");
    assert!(
        text.lines().count() < 1000,
        "{} lines",
        text.lines().count()
    );
    assert!(
        text.contains("more lines (`--format json` has both summaries)"),
        "{text}"
    );
}

/// The job summary stays far under GitHub's 1 MiB however long a failure's reason is.
#[tokio::test(flavor = "multi_thread")]
async fn the_job_summary_stays_bounded() {
    let huge = "x".repeat(300 * 1024);
    let fake = Fake::anthropic(vec![crate::fake::bad_request(&huge)]).await;
    let test = Test::new()
        .file(
            "w.toml",
            &format!("name = \"gh\"\n{MODELS}[steps.a]\nagent = \"explore\"\nretries = 0\nprompt = \"MARK-a\"\n"),
        )
        .file("summary.md", "");
    let summary = test.path().join("summary.md");
    let (out, _test) = test
        .anthropic_api(&fake.uri(), KEY)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", summary.to_str().unwrap())
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let text = std::fs::read_to_string(&summary).unwrap();
    assert!(text.len() < 8 * 1024, "{} bytes", text.len());
    let failure = text.lines().find(|l| l.starts_with("- `a`: ")).unwrap();
    assert!(
        failure.ends_with('…') && failure.chars().count() < 600,
        "{failure}"
    );
}

/// The `replay drift` lines of a run's stderr, in order.
fn drift_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("replay drift"))
        .collect()
}

/// A job of an exported pipeline (`--only STEP --run-id ID`, on any engine) speaks of its own
/// step: the table, the plain lines, JUnit and `run.json` have nothing of the steps other jobs
/// run (none of them "skipped"); a need another job ran is there, as reused.
#[tokio::test(flavor = "multi_thread")]
async fn an_only_job_speaks_of_its_own_step_alone() {
    let fake = Fake::anthropic_routed(vec![
        ("MARK-a", vec![anthropic_text("a done")]),
        ("MARK-b", vec![anthropic_text("b done")]),
        ("MARK-c", vec![anthropic_text("c done")]),
    ])
    .await;
    let workflow = format!(
        "name = \"jobs\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"MARK-a\"\n[steps.b]\nagent = \"explore\"\nneeds = [\"a\"]\nprompt = \"MARK-b {{{{ steps.a.summary }}}}\"\n[steps.c]\nagent = \"explore\"\nprompt = \"MARK-c\"\n"
    );
    let mut test = Test::new()
        .file("w.toml", &workflow)
        .anthropic_api(&fake.uri(), KEY);
    // Each job's step, the steps its table and run.json hold, and whether a need is reused.
    for (step, shown) in [("a", vec!["a"]), ("b", vec!["a", "b"]), ("c", vec!["c"])] {
        let junit = format!("{step}.xml");
        let (out, again) = test
            .clear_args()
            .args(&["run", "w.toml", "--only", step, "--run-id", "5151"])
            .args(&["--format", "json", "--junit", &junit])
            .run_async()
            .await;
        test = again;
        assert_eq!(out.status, 0, "{step}: {}", out.transcript());
        assert!(
            !out.stderr.contains("not selected"),
            "{step}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("skipped"), "{step}: {}", out.stderr);
        let rows: Vec<&str> = out
            .stderr
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|w| ["a", "b", "c"].contains(w))
            .collect();
        assert_eq!(rows, shown, "{step}: {}", out.stderr);
        // Plain lines for this job's own step; of a need, only that it was reused.
        for other in ["a", "b", "c"].into_iter().filter(|o| *o != step) {
            assert!(
                out.stderr
                    .lines()
                    .filter(|l| l.contains(&format!("] {other} ")))
                    .all(|l| l.ends_with(&format!("] {other} reused from run 5151"))),
                "{step}: {}",
                out.stderr
            );
        }
        let run: Value = serde_json::from_str(&out.stdout).unwrap();
        let kept: Vec<&String> = run["steps"].as_object().unwrap().keys().collect();
        assert_eq!(kept, shown, "{step}");
        let xml = std::fs::read_to_string(test.path().join(&junit)).unwrap();
        assert_eq!(xml.matches("<testcase ").count(), 1, "{step}: {xml}");
        assert!(xml.contains(&format!("name=\"{step}\"")), "{step}: {xml}");
        assert!(!xml.contains("<skipped"), "{step}: {xml}");
        if step == "b" {
            // A need another job ran says so in the table, and is not counted as this job's.
            let row = out.stderr.lines().find(|l| l.starts_with("a ")).unwrap();
            assert!(row.contains("succeeded (reused from 5151)"), "{row}");
            assert_eq!(run["steps"]["a"]["reused_from"], "5151");
        }
    }
}
