//! Whole workflows through the real binary against the fake model API: structured output, step
//! timeouts, interrupts, resume and --only, JUnit, worktrees, and the shipped example end to end.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::fake::{Fake, anthropic_text, anthropic_tool, prompt_of};
use crate::support::{Output, REPO, Test, git, init_repo};

const KEY: &str = "sk-test-key-0000";
const MODELS: &str = "[models]\ndefault = \"anthropic/claude-test\"\n";

fn with_fake(test: Test, fake: &Fake, args: &[&str]) -> Test {
    test.anthropic_api(&fake.uri(), KEY).args(args)
}

/// Runs `workflow` as `w.toml` in a fresh directory against `fake`, with `--format json`.
async fn run_one(fake: &Fake, workflow: &str) -> Output {
    with_fake(
        Test::new().file("w.toml", workflow),
        fake,
        &["run", "w.toml", "--format", "json"],
    )
    .run_async()
    .await
    .0
}

/// [`run_one`] for a run that must succeed: its run.json.
async fn run_ok(fake: &Fake, workflow: &str) -> Value {
    let out = run_one(fake, workflow).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    json_of(&out)
}

fn json_of(out: &Output) -> Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", out.transcript()))
}

#[tokio::test(flavor = "multi_thread")]
async fn structured_output_is_fixed_validated_and_passed_on() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-scan",
            vec![
                anthropic_text("I found two files."),
                anthropic_text("```json\n{\"files\": [\"x.rs\", \"y.rs\"]}\n```"),
            ],
        ),
        ("MARK-use", vec![anthropic_text("used")]),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.scan]\nagent = \"explore\"\nprompt = \"MARK-scan\"\noutput_schema = {{ type = \"object\", required = [\"files\"], properties = {{ files = {{ type = \"array\", items = {{ type = \"string\" }} }} }} }}\n[steps.use]\nagent = \"plan\"\nneeds = [\"scan\"]\nprompt = \"MARK-use {{{{ steps.scan.output.files | join(',') }}}}\"\n"
    );
    let run = run_ok(&fake, &workflow).await;
    assert_eq!(
        run["steps"]["scan"]["output"],
        json!({"files": ["x.rs", "y.rs"]})
    );
    assert_eq!(run["steps"]["scan"]["turns"], 2);
    let bodies = fake.bodies().await;
    let fix = bodies
        .iter()
        .find(|b| b["messages"].as_array().unwrap().len() == 3)
        .expect("a fix request");
    assert!(
        fix["messages"][2]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("does not match the required JSON Schema")
    );
    assert!(
        fix["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("\"files\"")
    );
    assert_eq!(
        prompt_of(&fake.body_for("MARK-use").await),
        "MARK-use x.rs,y.rs"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn structured_output_that_never_validates_fails_the_step() {
    let fake = Fake::anthropic(vec![
        anthropic_text("nope"),
        anthropic_text("still no"),
        anthropic_text("{\"n\": \"x\"}"),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.s]\nagent = \"explore\"\nprompt = \"go\"\noutput_schema = {{ type = \"object\", properties = {{ n = {{ type = \"integer\" }} }} }}\n"
    );
    let out = run_one(&fake, &workflow).await;
    assert_eq!(out.status, 1);
    let error = json_of(&out)["steps"]["s"]["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        error.contains("does not match `output_schema` after 2 more tries"),
        "{error}"
    );
    assert_eq!(fake.requests().await.len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_timeout_cancels_the_request_and_fails_the_step() {
    let fake = Fake::anthropic(vec![
        anthropic_text("too late").set_delay(Duration::from_secs(60)),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.slow]\nagent = \"explore\"\nprompt = \"go\"\ntimeout = \"1s\"\n[steps.after]\nagent = \"plan\"\nneeds = [\"slow\"]\nprompt = \"x\"\n"
    );
    let out = run_one(&fake, &workflow).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run = json_of(&out);
    assert_eq!(run["steps"]["slow"]["status"], "failed");
    assert_eq!(run["steps"]["slow"]["error"], "timed out after 1s");
    assert_eq!(run["steps"]["after"]["status"], "skipped");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigint_stops_the_run_and_records_it() {
    let fake = Fake::anthropic(vec![
        anthropic_text("never").set_delay(Duration::from_secs(120)),
    ])
    .await;
    let test = Test::new().file(
        "w.toml",
        &format!("name = \"t\"\n{MODELS}[steps.s]\nagent = \"explore\"\nprompt = \"go\"\n"),
    );
    let dir = test.path().to_owned();
    let uri = fake.uri();
    let (status, stderr) = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(["run", "w.toml"])
            .current_dir(&dir)
            .env("ANTHROPIC_BASE_URL", &uri)
            .env("ANTHROPIC_API_KEY", KEY)
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        // Readiness: the step has started once its progress line is out.
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 {
                break;
            }
            seen.push_str(&line);
            if line.contains("[explore] s started") {
                nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGINT,
                )
                .unwrap();
                break;
            }
        }
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
        (child.wait().unwrap(), seen + &rest)
    })
    .await
    .unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let runs = test.path().join(".runner/runs");
    let run_dir = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["status"], "interrupted");
    assert_eq!(run["steps"]["s"]["status"], "cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_reruns_only_what_failed_or_changed_and_only_picks_steps() {
    let fake = Fake::anthropic_routed(vec![
        ("MARK-a", vec![anthropic_text("A1"), anthropic_text("A2")]),
        (
            "MARK-b",
            vec![
                ResponseTemplate::new(400).set_body_json(json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}})),
                anthropic_text("B1"),
                anthropic_text("B2"),
                anthropic_text("B3"),
            ],
        ),
    ])
    .await;
    let workflow = |a_prompt: &str| {
        format!(
            "name = \"t\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"{a_prompt}\"\n[steps.b]\nagent = \"plan\"\nneeds = [\"a\"]\nprompt = \"MARK-b {{{{ steps.a.summary }}}}\"\n"
        )
    };
    let test = Test::new().file("w.toml", &workflow("MARK-a"));
    let dir = test.path().to_owned();
    let run = |args: Vec<String>| {
        let fake_uri = fake.uri();
        let dir = dir.clone();
        async move {
            let mut t = Test::new().anthropic_api(&fake_uri, KEY);
            t = t.args(&[
                "run",
                dir.join("w.toml").to_str().unwrap(),
                "--workdir",
                dir.to_str().unwrap(),
                "--format",
                "json",
            ]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            t.args(&args).run_async().await.0
        }
    };
    let junit = dir.join("report.xml");

    // 1: a succeeds, b fails.
    let first = run(vec!["--junit".into(), junit.to_str().unwrap().into()]).await;
    assert_eq!(first.status, 1, "{}", first.transcript());
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("<testcase name=\"a\""));
    assert!(xml.contains("<failure message=\"model request failed: the API rejected the request (400): invalid_request_error: bad (POST http://"), "{xml}");
    for count in ["tests=\"2\"", "failures=\"1\"", "skipped=\"0\""] {
        assert!(xml.contains(count), "{count}: {xml}");
    }

    // 2: resume: a is reused, b runs again.
    let second = run(vec!["--resume".into(), "latest".into()]).await;
    assert_eq!(second.status, 0, "{}", second.transcript());
    let record = json_of(&second);
    assert_eq!(
        record["steps"]["a"]["reused_from"],
        json_of(&first)["run_id"]
    );
    assert_eq!(record["steps"]["b"]["summary"], "B1");
    assert_eq!(fake.count("MARK-a").await, 1);
    assert!(second.stderr.contains("[explore] a reused from run"));

    // 3: --only b reruns b alone, taking a from the resumed run.
    let third = run(vec![
        "--resume".into(),
        "latest".into(),
        "--only".into(),
        "b".into(),
    ])
    .await;
    assert_eq!(third.status, 0, "{}", third.transcript());
    assert_eq!(json_of(&third)["steps"]["b"]["summary"], "B2");
    assert_eq!(fake.count("MARK-a").await, 1);

    // 4: a's definition changed: it runs again, and so does b (its prompt changed with a's summary).
    std::fs::write(dir.join("w.toml"), workflow("MARK-a, now with more detail")).unwrap();
    let fourth = run(vec!["--resume".into(), "latest".into()]).await;
    assert_eq!(fourth.status, 0, "{}", fourth.transcript());
    let record = json_of(&fourth);
    assert!(record["steps"]["a"].get("reused_from").is_none());
    assert_eq!(record["steps"]["a"]["summary"], "A2");
    assert_eq!(record["steps"]["b"]["summary"], "B3");

    // --only with a need that has no result is a usage error.
    let bad = Test::new()
        .file("w.toml", &workflow("MARK-a"))
        .env("ANTHROPIC_API_KEY", KEY)
        .args(&["run", "w.toml", "--only", "b"])
        .run();
    assert_eq!(bad.status, 2);
    assert!(
        bad.stderr
            .contains("--only b: its need `a` has no result to reuse"),
        "{}",
        bad.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worktree_step_commits_on_its_branch_and_leaves_the_main_tree_clean() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-impl",
            vec![
                anthropic_tool(
                    "t1",
                    "write_file",
                    json!({"path": "hello.txt", "content": "hello\n"}),
                ),
                anthropic_tool(
                    "t2",
                    "edit_file",
                    json!({"path": "app.txt", "old_string": "v1", "new_string": "v2"}),
                ),
                anthropic_text("Added hello.txt, bumped app."),
            ],
        ),
        ("MARK-review", vec![anthropic_text("Looks fine.")]),
        ("MARK-after", vec![anthropic_text("Nothing to do.")]),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.impl]\nagent = \"code\"\nisolation = \"worktree\"\nprompt = \"MARK-impl\"\n[steps.review]\nagent = \"explore\"\nneeds = [\"impl\"]\nprompt = \"MARK-review {{{{ steps.impl.branch }}}}\\n{{{{ steps.impl.diff }}}}\"\n[steps.after]\nagent = \"code\"\nneeds = [\"review\"]\nprompt = \"MARK-after\"\n"
    );
    let test = Test::new()
        .file("w.toml", &workflow)
        .file("app.txt", "version v1\n")
        .file(".gitignore", ".runner/\n");
    init_repo(test.path());
    let (out, test) = with_fake(test, &fake, &["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = json_of(&out);
    let branch = format!("runner/{}/impl", run["run_id"].as_str().unwrap());
    assert_eq!(run["steps"]["impl"]["branch"], branch.as_str());
    assert_eq!(
        git(test.path(), &["show", &format!("{branch}:hello.txt")]),
        "hello\n"
    );
    assert_eq!(
        git(test.path(), &["show", &format!("{branch}:app.txt")]),
        "version v2\n"
    );
    // The main tree is untouched and clean; no worktree is left.
    assert_eq!(git(test.path(), &["status", "--porcelain"]), "");
    assert_eq!(
        std::fs::read_to_string(test.path().join("app.txt")).unwrap(),
        "version v1\n"
    );
    assert!(!test.path().join("hello.txt").exists());
    assert_eq!(git(test.path(), &["worktree", "list"]).lines().count(), 1);
    // Both code steps share one cacheable prefix (system prompt and tools), byte for byte: where
    // each works is in its first message, the worktree's path only in the worktree step's.
    let (inside, after) = (
        fake.body_for("MARK-impl").await,
        fake.body_for("MARK-after").await,
    );
    assert_eq!(inside["system"], after["system"]);
    assert_eq!(inside["tools"], after["tools"]);
    let workdir = |body: &Value| {
        let first = body["messages"][0]["content"][0]["text"].as_str().unwrap();
        let line = first.lines().find(|l| l.starts_with("Working directory: "));
        line.unwrap_or_default().to_owned()
    };
    let top = test.path().canonicalize().unwrap();
    assert_eq!(
        workdir(&after),
        format!("Working directory: {}", top.display())
    );
    assert!(workdir(&inside).starts_with("Working directory: /"));
    assert_ne!(workdir(&inside), workdir(&after));
    // The reviewer got the branch and the diff.
    let prompt = prompt_of(&fake.body_for("MARK-review").await);
    assert!(prompt.contains(&branch));
    assert!(
        prompt.contains("+hello")
            && prompt.contains("-version v1")
            && prompt.contains("+version v2"),
        "{prompt}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worktree_step_outside_git_is_refused_when_the_run_starts() {
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.impl]\nagent = \"code\"\nisolation = \"worktree\"\nprompt = \"x\"\n"
    );
    // Planning never looks at git: validate, plan and graph work anywhere.
    for command in ["validate", "plan", "graph"] {
        let out = Test::new()
            .file("w.toml", &workflow)
            .args(&[command, "w.toml"])
            .run();
        assert_eq!(out.status, 0, "{command}: {}", out.transcript());
    }
    let fake = Fake::anthropic(vec![]).await;
    let out = run_one(&fake, &workflow).await;
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("is not inside a git repository with a commit"),
        "{}",
        out.stderr
    );
    assert!(fake.requests().await.is_empty(), "a model was called");
}

#[test]
fn validate_warns_about_concurrent_writers() {
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.a]\nagent = \"code\"\nprompt = \"x\"\n[steps.b]\nagent = \"code\"\nprompt = \"y\"\n[steps.c]\nagent = \"code\"\nneeds = [\"a\", \"b\"]\nprompt = \"z\"\n"
    );
    let out = Test::new()
        .file("w.toml", &workflow)
        .args(&["validate", "w.toml"])
        .run();
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("steps `a` and `b` can change files and may run at the same time"),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("`c`"),
        "c is ordered after both: {}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_jwt_migration_example_runs_end_to_end() {
    let fake = Fake::anthropic_routed(vec![
        ("authenticates users", vec![anthropic_tool("f1", "grep", json!({"pattern": "login"})), anthropic_text("Auth: src/auth.py:1 login()")]),
        ("sessions are created", vec![anthropic_text("Sessions: src/session.py keeps them in a dict")]),
        ("Design a migration", vec![anthropic_text("1. Add jwt.py\n2. Switch login to JWT")]),
        (
            "Implement this plan",
            vec![
                anthropic_tool("i1", "write_file", json!({"path": "src/jwt.py", "content": "def issue(user):\n    return 'token'\n"})),
                anthropic_tool("i2", "bash", json!({"command": "ls src"})),
                anthropic_text("Added src/jwt.py"),
            ],
        ),
        ("Review the JWT migration", vec![anthropic_text("No findings.")]),
    ])
    .await;
    let workflow = std::fs::read_to_string(format!("{REPO}/workflows/jwt-migration.toml")).unwrap();
    let agent = std::fs::read_to_string(format!("{REPO}/agents/security-reviewer.md")).unwrap();
    let test = Test::new()
        .file("workflows/jwt-migration.toml", &workflow)
        .file("agents/security-reviewer.md", &agent)
        .file(
            "src/auth.py",
            "def login(user, password):\n    return True\n",
        )
        .file("src/session.py", "SESSIONS = {}\n")
        .file(".gitignore", ".runner/\n");
    init_repo(test.path());
    let (out, test) = with_fake(
        test,
        &fake,
        &[
            "run",
            "workflows/jwt-migration.toml",
            "--format",
            "json",
            // The project's tests: they pass once the implement step wrote its module.
            "-i",
            "test_command=test -f src/jwt.py && echo 1 passed",
        ],
    )
    .run_async()
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = json_of(&out);
    for step in ["find_auth", "find_sessions", "plan", "implement", "review"] {
        assert_eq!(run["steps"][step]["status"], "succeeded", "{step}");
    }
    // The command step ran the suite before the change (it fails there), read-only.
    assert_eq!(run["steps"]["baseline"]["status"], "failed");
    assert_eq!(run["steps"]["implement"]["checks"][0]["passed"], true);
    assert_eq!(run["steps"]["review"]["summary"], "No findings.");
    let text = prompt_of;
    let plan = &fake.body_for("Design a migration").await;
    assert!(
        text(plan).contains("Auth: src/auth.py:1 login()")
            && text(plan).contains("Sessions: src/session.py")
    );
    assert!(
        text(plan).contains("The test suite before the change (failed):"),
        "{}",
        text(plan)
    );
    assert_eq!(plan["model"], "claude-opus-4-1");
    let review = &fake.body_for("Review the JWT migration").await;
    assert!(
        text(review).contains("+def issue(user):"),
        "{}",
        text(review)
    );
    assert!(
        review["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("You are a security reviewer")
    );
    let branch = run["steps"]["implement"]["branch"].as_str().unwrap();
    assert!(git(test.path(), &["show", &format!("{branch}:src/jwt.py")]).contains("def issue"));
    assert_eq!(git(test.path(), &["status", "--porcelain"]), "");
    assert!(out.stderr.contains("run ") && out.stderr.contains(" succeeded in "));
}

/// Two independent steps meet through two FIFOs in their bash commands: each blocks until the
/// other is running, so they can only both finish if they overlap.
fn rendezvous_fake_routes() -> Vec<(&'static str, Vec<ResponseTemplate>)> {
    vec![
        (
            "MARK-left",
            vec![
                anthropic_tool(
                    "l1",
                    "bash",
                    json!({"command": "echo left > p1; read x < p2; echo got $x", "timeout": 3}),
                ),
                anthropic_text("left done"),
            ],
        ),
        (
            "MARK-right",
            vec![
                anthropic_tool(
                    "r1",
                    "bash",
                    json!({"command": "read y < p1; echo right > p2; echo got $y", "timeout": 3}),
                ),
                anthropic_text("right done"),
            ],
        ),
    ]
}

async fn rendezvous(max_parallel: &str) -> (Vec<Value>, Output) {
    let fake = Fake::anthropic_routed(rendezvous_fake_routes()).await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.left]\nagent = \"code\"\nprompt = \"MARK-left\"\n[steps.right]\nagent = \"code\"\nprompt = \"MARK-right\"\n"
    );
    let test = Test::new().file("w.toml", &workflow);
    for fifo in ["p1", "p2"] {
        let made = Command::new("mkfifo")
            .arg(test.path().join(fifo))
            .status()
            .unwrap();
        assert!(made.success());
    }
    let (out, _) = with_fake(
        test,
        &fake,
        &[
            "run",
            "w.toml",
            "--format",
            "json",
            "--max-parallel",
            max_parallel,
        ],
    )
    .run_async()
    .await;
    let results = fake
        .bodies()
        .await
        .into_iter()
        .flat_map(|b| crate::fake::anthropic_results(&b))
        .map(|(id, text, _)| json!({"id": id, "text": text}))
        .collect();
    (results, out)
}

#[tokio::test(flavor = "multi_thread")]
async fn independent_steps_overlap() {
    let (results, out) = rendezvous("2").await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let text = |id: &str| {
        results.iter().find(|r| r["id"] == id).unwrap()["text"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(text("l1").contains("got right"), "{}", text("l1"));
    assert!(text("r1").contains("got left"), "{}", text("r1"));
}

#[tokio::test(flavor = "multi_thread")]
async fn max_parallel_one_never_overlaps() {
    // Read off the event stream, in the order the scheduler decided: no step starts while
    // another is running. Nothing waits for a timeout.
    let fake = Fake::anthropic_routed(vec![
        ("MARK-a", vec![anthropic_text("a done")]),
        ("MARK-b", vec![anthropic_text("b done")]),
        ("MARK-c", vec![anthropic_text("c done")]),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"MARK-a\"\n[steps.b]\nagent = \"explore\"\nprompt = \"MARK-b\"\n[steps.c]\nagent = \"explore\"\nprompt = \"MARK-c\"\n"
    );
    let test = Test::new().file("w.toml", &workflow);
    let (out, _) = with_fake(
        test,
        &fake,
        &["run", "w.toml", "--format", "jsonl", "--max-parallel", "1"],
    )
    .run_async()
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(crate::support::one_at_a_time(&out.stdout, "step"), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn fail_fast_through_the_binary_cancels_the_slow_step() {
    let fake = Fake::anthropic_routed(vec![
        ("MARK-bad", vec![crate::fake::bad_request("bad")]),
        (
            "MARK-slow",
            vec![anthropic_text("late").set_delay(Duration::from_secs(60))],
        ),
        ("MARK-next", vec![anthropic_text("never")]),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.bad]\nagent = \"explore\"\nprompt = \"MARK-bad\"\n[steps.slow]\nagent = \"explore\"\nprompt = \"MARK-slow\"\n[steps.next]\nagent = \"plan\"\nneeds = [\"slow\"]\nprompt = \"MARK-next\"\n"
    );
    let test = Test::new().file("w.toml", &workflow);
    let (out, test) = with_fake(
        test,
        &fake,
        &[
            "run",
            "w.toml",
            "--format",
            "json",
            "--fail-fast",
            "--junit",
            "j.xml",
        ],
    )
    .run_async()
    .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run = json_of(&out);
    assert_eq!(run["steps"]["bad"]["status"], "failed");
    assert_eq!(run["steps"]["slow"]["status"], "cancelled");
    assert_eq!(run["steps"]["next"]["status"], "cancelled");
    assert_eq!(fake.count("MARK-next").await, 0);
    let xml = std::fs::read_to_string(test.path().join("j.xml")).unwrap();
    for count in ["tests=\"3\"", "failures=\"1\"", "skipped=\"2\""] {
        assert!(xml.contains(count), "{count}: {xml}");
    }
    assert!(
        xml.contains("<skipped message=\"cancelled: cancelled\"/>"),
        "{xml}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn continue_on_error_and_conditions_through_the_binary() {
    let fake = Fake::anthropic_routed(vec![
        ("MARK-flaky", vec![crate::fake::bad_request("bad")]),
        ("MARK-after", vec![anthropic_text("after ran")]),
        ("MARK-fallback", vec![anthropic_text("fallback ran")]),
        ("MARK-never", vec![anthropic_text("never")]),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.flaky]\nagent = \"explore\"\nprompt = \"MARK-flaky\"\ncontinue_on_error = true\n[steps.after]\nagent = \"plan\"\nneeds = [\"flaky\"]\nprompt = \"MARK-after {{{{ steps.flaky.status }}}}\"\n[steps.gate]\nagent = \"plan\"\nneeds = [\"after\"]\nif = \"steps.flaky.status == 'succeeded'\"\nprompt = \"MARK-never\"\n[steps.fallback]\nagent = \"plan\"\nneeds = [\"gate\"]\nif = \"steps.gate.status == 'skipped'\"\nprompt = \"MARK-fallback\"\n[steps.tail]\nagent = \"plan\"\nneeds = [\"gate\"]\nprompt = \"MARK-never\"\n"
    );
    let run = run_ok(&fake, &workflow).await;
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["steps"]["flaky"]["status"], "failed");
    assert_eq!(run["steps"]["after"]["summary"], "after ran");
    assert_eq!(run["steps"]["gate"]["status"], "skipped");
    assert_eq!(run["steps"]["fallback"]["summary"], "fallback ran");
    assert_eq!(run["steps"]["tail"]["status"], "skipped");
    assert_eq!(fake.count("MARK-never").await, 0);
    assert_eq!(
        prompt_of(&fake.body_for("MARK-after").await),
        "MARK-after failed"
    );
}

/// One record, one writer: `run.json` is the `--format json` report field for field; a worktree
/// step that changed nothing gives an empty branch (never the text `None`); the end-of-run
/// table, the GitHub summary and `run_finished` name the branch, the run directory and totals.
#[tokio::test(flavor = "multi_thread")]
async fn the_run_record_is_one_and_says_where_things_are() {
    let routes = || {
        vec![
            (
                "MARK-change",
                vec![
                    anthropic_tool(
                        "t1",
                        "write_file",
                        json!({"path": "new.txt", "content": "new\n"}),
                    ),
                    anthropic_text("changed"),
                ],
            ),
            ("MARK-nothing", vec![anthropic_text("nothing to do")]),
            ("MARK-after", vec![anthropic_text("after")]),
        ]
    };
    let workflow = "name = \"t\"\n[prices.\"anthropic/m\"]\ninput = 3.0\noutput = 15.0\n[models]\ndefault = \"anthropic/m\"\n[steps.change]\nagent = \"code\"\nisolation = \"worktree\"\nprompt = \"MARK-change\"\n[steps.nothing]\nagent = \"code\"\nisolation = \"worktree\"\nprompt = \"MARK-nothing\"\n[steps.after]\nagent = \"plan\"\nneeds = [\"change\", \"nothing\"]\nprompt = \"MARK-after [{{ steps.nothing.branch }}] [{{ steps.change.branch }}]\"\n";
    let test = Test::new().file("w.toml", workflow).file("a.txt", "a\n");
    init_repo(test.path());
    let summary = test.path().join("summary.md");
    let fake = Fake::anthropic_routed(routes()).await;
    let (out, test) = with_fake(test, &fake, &["run", "w.toml", "--format", "json"])
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", summary.to_str().unwrap())
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let printed = json_of(&out);
    let run_id = printed["run_id"].as_str().unwrap();
    let run_dir = format!(".runner/runs/{run_id}");
    let mut saved: Value = serde_json::from_str(
        &std::fs::read_to_string(test.path().join(&run_dir).join("run.json")).unwrap(),
    )
    .unwrap();
    // The file carries the user's seal over its content; what is printed is the record alone.
    let seal = saved
        .as_object_mut()
        .unwrap()
        .remove("recorded_by")
        .unwrap();
    assert!(seal.as_str().unwrap().starts_with("hmac-sha256:"), "{seal}");
    assert_eq!(saved, printed);
    assert!(printed["cost_usd"].as_f64().unwrap() > 0.0, "{printed}");

    let branch = format!("runner/{run_id}/change");
    assert_eq!(printed["steps"]["change"]["branch"], branch.as_str());
    assert!(printed["steps"]["nothing"]["branch"].is_null());
    assert_eq!(
        prompt_of(&fake.body_for("MARK-after").await),
        format!("MARK-after [] [{branch}]")
    );

    let table = &out.stderr;
    assert!(
        table.contains("BRANCH") && table.contains(&branch),
        "{table}"
    );
    assert!(table.lines().any(|l| l.starts_with("total ")), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("record and transcripts: ") && l.ends_with(&run_dir)),
        "{table}"
    );
    let markdown = std::fs::read_to_string(&summary).unwrap();
    assert!(markdown.contains(&format!("`{branch}`")), "{markdown}");
    assert!(markdown.contains("| **total** |"), "{markdown}");
    assert!(markdown.contains(&run_dir), "{markdown}");

    // The event stream ends with the same record's totals, branches and directory.
    let fake = Fake::anthropic_routed(routes()).await;
    let (out, _test) = with_fake(
        test.clear_args(),
        &fake,
        &["run", "w.toml", "--format", "jsonl"],
    )
    .run_async()
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let last: Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "run_finished", "{last}");
    let run_id = last["run_id"].as_str().unwrap();
    assert!(
        last["run_dir"]
            .as_str()
            .unwrap()
            .ends_with(&format!(".runner/runs/{run_id}")),
        "{last}"
    );
    assert_eq!(
        last["branches"],
        json!({"change": format!("runner/{run_id}/change")})
    );
    assert!(last["cost_usd"].as_f64().unwrap() > 0.0);
    assert!(last["output_tokens"].as_u64().unwrap() > 0);
}
