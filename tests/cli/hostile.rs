//! Attacks a hostile model, server or repository would try, through the real binary: each must
//! fail, and the user's key, checkout and state must come out untouched.

use std::time::Duration;

use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::fake::{Fake, anthropic_results, anthropic_text, anthropic_tool, endless_body_server};
use crate::support::{Output, Test, git, init_repo};

const KEY: &str = "sk-ant-hostile-test-key-7f3a9c21e5";
const MODELS: &str = "[models]\ndefault = \"anthropic/claude-test\"\n";

fn one_step(agent: &str, extra: &str) -> String {
    format!("name = \"t\"\n{MODELS}[steps.s]\nagent = \"{agent}\"\nprompt = \"go\"\n{extra}")
}

async fn run(test: Test, fake_uri: &str, args: &[&str]) -> (Output, Test) {
    test.anthropic_api(fake_uri, KEY)
        .args(args)
        .run_async()
        .await
}

fn run_json(out: &Output) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("run.json on stdout ({e}):\n{}", out.transcript()))
}

/// Every file under the state directory, as text.
fn state_files(test: &Test) -> Vec<(String, String)> {
    fn walk(dir: &std::path::Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
                out.push((path.display().to_string(), text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&test.path().join(".runner"), &mut out);
    out
}

fn assert_no_key(out: &Output, test: &Test, bodies: &[Value]) {
    assert!(!out.stdout.contains(KEY), "key on stdout");
    assert!(!out.stderr.contains(KEY), "key on stderr");
    for (path, text) in state_files(test) {
        assert!(!text.contains(KEY), "key in {path}");
    }
    for body in bodies {
        assert!(!body.to_string().contains(KEY), "key sent to the model");
    }
}

const STEAL: &str = "R=$(awk '{print $4}' /proc/$PPID/stat); tr '\\0' '\\n' < /proc/$R/environ; ps eww $R; cat /proc/$R/cmdline; env | grep -i key; echo tried";

#[tokio::test(flavor = "multi_thread")]
async fn bash_cannot_read_the_key_from_runner() {
    for (agent, flags) in [
        ("explore", vec![]),
        ("code", vec![]),
        // Unconfined bash still finds no key: it left runner's environment at start.
        ("code", vec!["--sandbox", "off"]),
    ] {
        let fake = Fake::anthropic(vec![
            anthropic_tool("t1", "bash", json!({"command": STEAL})),
            anthropic_text("nothing found"),
        ])
        .await;
        let mut args = vec!["run", "w.toml", "--format", "json"];
        args.extend(flags.iter().copied());
        let test = Test::new().file("w.toml", &one_step(agent, ""));
        let (out, test) = run(test, &fake.uri(), &args).await;
        assert_eq!(out.status, 0, "{agent} {flags:?}: {}", out.transcript());
        let bodies = fake.bodies().await;
        let results = anthropic_results(&bodies[1]);
        assert!(results[0].1.contains("tried"), "{}", results[0].1);
        assert_no_key(&out, &test, &bodies);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_echoed_by_the_server_is_hidden_everywhere() {
    let echo = ResponseTemplate::new(401).set_body_json(json!({
        "type": "error",
        "error": {"type": "authentication_error",
                  "message": format!("invalid x-api-key: {KEY}\u{1b}]0;pwned\u{7}\u{1b}[2J")}
    }));
    let fake = Fake::anthropic(vec![echo]).await;
    let test = Test::new().file("w.toml", &one_step("explore", ""));
    let (out, test) = run(
        test,
        &fake.uri(),
        &["run", "w.toml", "--format", "json", "--junit", "junit.xml"],
    )
    .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    assert_no_key(&out, &test, &[]);
    let junit = std::fs::read_to_string(test.path().join("junit.xml")).unwrap();
    assert!(
        !junit.contains(KEY) && junit.contains("[hidden]"),
        "{junit}"
    );
    assert!(
        out.stderr.contains("invalid x-api-key: [hidden]"),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains('\u{1b}'),
        "escape codes reached the terminal"
    );
    let run = run_json(&out);
    assert!(
        run["steps"]["s"]["error"]
            .as_str()
            .unwrap()
            .contains("[hidden]")
    );
}

/// An endpoint that redirects (each kind a server may send) is not followed: the other
/// server never sees a request, so never the key, and the step's error says where the
/// endpoint points.
#[tokio::test(flavor = "multi_thread")]
async fn a_redirecting_endpoint_is_not_followed() {
    let elsewhere = wiremock::MockServer::start().await;
    for code in [301u16, 302, 303, 307, 308] {
        let to = format!("{}/v1/messages?from={code}", elsewhere.uri());
        let fake = Fake::anthropic(vec![
            ResponseTemplate::new(code).insert_header("location", to.as_str()),
        ])
        .await;
        let test = Test::new().file("w.toml", &one_step("explore", ""));
        let (out, test) = run(test, &fake.uri(), &["run", "w.toml", "--format", "json"]).await;
        assert_eq!(out.status, 1, "{code}: {}", out.transcript());
        let run = run_json(&out);
        let error = run["steps"]["s"]["error"].as_str().unwrap();
        assert!(
            error.contains(&format!("redirects to {to}")) && error.contains(&code.to_string()),
            "{code}: {error}"
        );
        assert_eq!(
            fake.requests().await.len(),
            1,
            "{code}: asked once, not retried"
        );
        assert_no_key(&out, &test, &[]);
    }
    let seen = elsewhere.received_requests().await.unwrap_or_default();
    assert!(seen.is_empty(), "the redirect was followed: {seen:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tools_cannot_plant_commands_in_git() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-plant",
            vec![
                anthropic_tool(
                    "w1",
                    "write_file",
                    json!({"path": ".git/config", "content": "[core]\n\tfsmonitor = touch PLANTED\n"}),
                ),
                anthropic_tool(
                    "w2",
                    "write_file",
                    json!({"path": ".git/hooks/post-checkout", "content": "#!/bin/sh\ntouch PLANTED\n"}),
                ),
                anthropic_tool(
                    "w3",
                    "bash",
                    json!({"command": "git config core.fsmonitor 'touch PLANTED'; printf '[core]\\n\\tfsmonitor = touch PLANTED\\n' >> .git/config; echo '#!/bin/sh' > .git/hooks/pre-commit"}),
                ),
                anthropic_text("planted"),
            ],
        ),
        (
            "MARK-work",
            vec![
                anthropic_tool("w4", "write_file", json!({"path": "b.txt", "content": "b\n"})),
                anthropic_text("worked"),
            ],
        ),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.plant]\nagent = \"code\"\nprompt = \"MARK-plant\"\n[steps.work]\nagent = \"code\"\nneeds = [\"plant\"]\nisolation = \"worktree\"\nprompt = \"MARK-work\"\n"
    );
    let test = Test::new().file("w.toml", &workflow).file("a.txt", "a\n");
    init_repo(test.path());
    let config_before = std::fs::read_to_string(test.path().join(".git/config")).unwrap();
    let (out, test) = run(test, &fake.uri(), &["run", "w.toml", "--format", "json"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    let results: Vec<(String, String, bool)> = bodies.iter().flat_map(anthropic_results).collect();
    for id in ["w1", "w2", "w3"] {
        let (_, text, is_error) = results.iter().find(|r| r.0 == id).unwrap();
        assert!(is_error, "{id} was not refused: {text}");
    }
    assert!(!test.path().join("PLANTED").exists());
    assert_eq!(
        std::fs::read_to_string(test.path().join(".git/config")).unwrap(),
        config_before
    );
    assert!(!test.path().join(".git/hooks/post-checkout").exists());
    assert!(!test.path().join(".git/hooks/pre-commit").exists());
    let run = run_json(&out);
    let branch = run["steps"]["work"]["branch"].as_str().unwrap();
    assert_eq!(
        git(test.path(), &["show", &format!("{branch}:b.txt")]),
        "b\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worktree_step_cannot_redirect_its_commit_onto_main() {
    let test = Test::new()
        .file("a.txt", "a\n")
        .file("w.toml", &one_step("code", "isolation = \"worktree\"\n"));
    init_repo(test.path());
    let main_git = test.path().canonicalize().unwrap().join(".git");
    let fake = Fake::anthropic(vec![
        anthropic_tool(
            "t1",
            "bash",
            json!({"command": format!("echo evil > a.txt; printf 'gitdir: {}\\n' > .git", main_git.display())}),
        ),
        anthropic_text("done"),
    ])
    .await;
    let head = git(test.path(), &["rev-parse", "HEAD"]);
    let (out, test) = run(test, &fake.uri(), &["run", "w.toml", "--format", "json"]).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run = run_json(&out);
    assert!(
        run["steps"]["s"]["error"]
            .as_str()
            .unwrap()
            .contains("changed its worktree's `.git` file"),
        "{}",
        run["steps"]["s"]
    );
    assert_eq!(git(test.path(), &["rev-parse", "HEAD"]), head);
    assert_eq!(git(test.path(), &["status", "--porcelain"]), "");
    assert_eq!(
        std::fs::read_to_string(test.path().join("a.txt")).unwrap(),
        "a\n"
    );
    assert_eq!(git(test.path(), &["branch", "--list", "runner/*"]), "");
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_state_is_refused_and_never_resumed() {
    let forged_id = "99999999T999999-ffff";
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-a",
            vec![
                anthropic_tool(
                    "f1",
                    "write_file",
                    json!({"path": format!(".runner/runs/{forged_id}/run.json"), "content": "{}"}),
                ),
                anthropic_text("real summary"),
            ],
        ),
        ("MARK-b", vec![anthropic_text("b done")]),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.a]\nagent = \"code\"\nprompt = \"MARK-a\"\n[steps.b]\nagent = \"plan\"\nneeds = [\"a\"]\nprompt = \"MARK-b {{{{ steps.a.summary }}}}\"\n"
    );
    let test = Test::new().file("w.toml", &workflow);
    let (first, test) = run(test, &fake.uri(), &["run", "w.toml", "--format", "json"]).await;
    assert_eq!(first.status, 0, "{}", first.transcript());
    let first = run_json(&first);
    let bodies = fake.bodies().await;
    let refused = anthropic_results(&bodies[1]);
    assert!(
        refused[0].1.contains("runner's state directory"),
        "{}",
        refused[0].1
    );
    // Now forge runs the way something outside the sandbox could: one from the future, one
    // whose record names another run. Neither may become "latest".
    let mut forged = first.clone();
    forged["run_id"] = json!(forged_id);
    forged["started_at"] = json!("2999-01-01T00:00:00Z");
    forged["steps"]["a"]["summary"] = json!("INJECTED");
    let runs = test.path().join(".runner/runs");
    for (dir, record) in [(forged_id, &forged), ("zzzz-not-a-run", &first)] {
        std::fs::create_dir_all(runs.join(dir)).unwrap();
        std::fs::write(runs.join(dir).join("run.json"), record.to_string()).unwrap();
    }
    let fake = Fake::anthropic_routed(vec![("MARK-b", vec![anthropic_text("b again")])]).await;
    let test = test.clear_args().file(
        "w.toml",
        &workflow.replace("MARK-b {{", "MARK-b changed {{"),
    );
    let (second, _) = run(
        test,
        &fake.uri(),
        &["run", "w.toml", "--format", "json", "--resume", "latest"],
    )
    .await;
    assert_eq!(second.status, 0, "{}", second.transcript());
    let second = run_json(&second);
    assert_eq!(second["steps"]["a"]["reused_from"], first["run_id"]);
    let prompt = crate::fake::prompt_of(&fake.bodies().await[0]);
    assert!(
        prompt.contains("real summary") && !prompt.contains("INJECTED"),
        "{prompt}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_replies_fail_the_step_cleanly() {
    // A retry-after no clock can wait for: runner backs off normally instead of panicking.
    let fake = Fake::anthropic(vec![
        ResponseTemplate::new(429)
            .insert_header("retry-after", "1e+30")
            .insert_header("retry-after-ms", "1e+300")
            .set_body_string("slow down"),
        anthropic_text("fine"),
    ])
    .await;
    let test = Test::new().file("w.toml", &one_step("explore", ""));
    let (out, _) = run(test, &fake.uri(), &["run", "w.toml", "--format", "json"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(run_json(&out)["steps"]["s"]["summary"], "fine");

    // A body that never ends stops at the limit; so does an event stream whose line never
    // ends (no event is ever complete, so only the bytes received can stop it).
    for (content_type, opening, error) in [
        (
            "application/json",
            "{",
            "the response body is larger than 32 MiB",
        ),
        (
            "text/event-stream",
            "event: message_start\ndata: {",
            "the response stream is larger than 32 MiB",
        ),
    ] {
        let url = endless_body_server(content_type, opening);
        let test = Test::new().file("w.toml", &one_step("explore", ""));
        let (out, _) = run(test, &url, &["run", "w.toml", "--format", "json"]).await;
        assert_eq!(out.status, 1, "{}", out.transcript());
        assert!(
            run_json(&out)["steps"]["s"]["error"]
                .as_str()
                .unwrap()
                .contains(error),
            "{}",
            out.stdout
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn files_that_would_block_or_flood_are_refused() {
    let fake = Fake::anthropic(vec![
        anthropic_tool("r1", "read_file", json!({"path": "fifo"})),
        anthropic_tool("r2", "read_file", json!({"path": "sparse"})),
        anthropic_tool("r3", "grep", json!({"pattern": "x"})),
        anthropic_text("done"),
    ])
    .await;
    let test = Test::new()
        .file("w.toml", &one_step("explore", ""))
        .file("note.txt", "x marks\n");
    nix::unistd::mkfifo(&test.path().join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::fs::File::create(test.path().join("sparse"))
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let (out, _) = run(test, &fake.uri(), &["run", "w.toml", "--format", "json"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    let result = |id: &str| {
        bodies
            .iter()
            .flat_map(anthropic_results)
            .find(|r| r.0 == id)
            .unwrap()
    };
    assert!(
        result("r1").1.contains("not a regular file"),
        "{:?}",
        result("r1")
    );
    assert!(result("r2").1.contains("binary file"), "{:?}", result("r2"));
    assert!(
        result("r3").1.contains("note.txt:1:x marks"),
        "{:?}",
        result("r3")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_state_directory_that_cannot_be_written_fails_the_run_loudly() {
    let fake = Fake::anthropic(vec![anthropic_text("done")]).await;
    let test = Test::new()
        .file("w.toml", &one_step("explore", ""))
        // Any file runner writes past 64 bytes fails with EFBIG, as on a full disk.
        .limit(nix::sys::resource::Resource::RLIMIT_FSIZE, 64);
    let (out, _) = run(test, &fake.uri(), &["run", "w.toml"]).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    assert!(
        out.stderr.contains("/run.json`: File too large"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("the run was stopped"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_cleans_up_what_a_killed_run_left() {
    let test = Test::new().file("a.txt", "a\n").file(
        "w.toml",
        &format!("name = \"t\"\n{MODELS}[steps.s]\nagent = \"code\"\nisolation = \"worktree\"\nprompt = \"MARK-impl\"\n"),
    );
    init_repo(test.path());
    let (fake, requested) = Fake::anthropic_hanging(Duration::from_secs(600)).await;
    let test = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml"]);
    let mut child = test.spawn();
    // The step's worktree exists once its first request arrives.
    requested
        .recv_timeout(Duration::from_secs(60))
        .expect("the step's request");
    child.kill().unwrap();
    child.wait().unwrap();
    let killed_branch = git(
        test.path(),
        &[
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/runner/",
        ],
    );
    let killed_branch = killed_branch.trim();
    assert!(!killed_branch.is_empty(), "the killed step left no branch");
    assert!(git(test.path(), &["worktree", "list"]).contains(".runner/worktrees/"));

    let fake = Fake::anthropic(vec![
        anthropic_tool(
            "t1",
            "write_file",
            json!({"path": "b.txt", "content": "b\n"}),
        ),
        anthropic_text("done"),
    ])
    .await;
    let (out, test) = run(
        test.clear_args(),
        &fake.uri(),
        &["run", "w.toml", "--resume", "latest", "--format", "json"],
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("note: removed the worktree of step `s` (left by run")
            && out
                .stderr
                .contains(&format!("removed the branch `{killed_branch}`")),
        "{}",
        out.stderr
    );
    let run = run_json(&out);
    let branch = run["steps"]["s"]["branch"].as_str().unwrap();
    assert_eq!(
        git(test.path(), &["branch", "--list", "runner/*"]).trim(),
        branch
    );
    assert_eq!(git(test.path(), &["worktree", "list"]).lines().count(), 1);
    assert_eq!(git(test.path(), &["status", "--porcelain"]), "");
}

/// A workflow file is the repository's text: `validate` and `plan` print it (quoted source,
/// messages, prompts) without one of its control characters, so it cannot clear the screen,
/// retitle the window or write the clipboard.
#[test]
fn plan_and_validate_print_no_terminal_escapes_from_the_file() {
    let controls = |text: &str| {
        text.chars()
            .filter(|c| c.is_control() && *c != '\n')
            .count()
    };
    // A raw escape in a TOML string is a parse error that quotes the line.
    let raw = format!(
        "name = \"t\"\n{MODELS}[steps.s]\nagent = \"explore\"\nprompt = \"go\x1b[2J\x1b]52;c;ZXZpbA==\x07\"\n"
    );
    let out = Test::new()
        .file("w.toml", &raw)
        .args(&["validate", "w.toml"])
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(out.stderr.contains("w.toml:6"), "{}", out.stderr);
    assert!(
        out.stderr.contains("go?[2J?]52;c;ZXZpbA==?"),
        "{}",
        out.stderr
    );
    assert_eq!(controls(&out.stderr), 0, "{:?}", out.stderr);

    // Escaped ones are valid TOML: they reach a message (an unknown agent) and the plan.
    let escaped = format!(
        "name = \"t\"\n{MODELS}[steps.s]\nagent = \"explore\"\nprompt = \"go \\u001b]0;owned\\u0007 now\"\n[steps.t]\nagent = \"ex\\u001b[2Jplore\"\nprompt = \"x\"\n"
    );
    let out = Test::new()
        .file("w.toml", &escaped)
        .args(&["validate", "w.toml"])
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(out.stderr.contains("explore"), "{}", out.stderr);
    assert_eq!(controls(&out.stderr), 0, "{:?}", out.stderr);

    let valid = escaped.replace("ex\\u001b[2Jplore", "explore");
    let out = Test::new()
        .file("w.toml", &valid)
        .args(&["plan", "w.toml"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(out.stdout.contains("go  now"), "{}", out.stdout);
    assert_eq!(controls(&out.stdout), 0, "{:?}", out.stdout);
    // JSON keeps the text, escaped.
    let out = Test::new()
        .file("w.toml", &valid)
        .args(&["plan", "w.toml", "--format", "json"])
        .run();
    assert!(
        out.stdout.contains("go \\u001b]0;owned\\u0007 now"),
        "{}",
        out.stdout
    );
}

/// A summary (the model's text) or a workflow name holding characters XML cannot carry still
/// gives a JUnit report a strict parser reads.
#[tokio::test(flavor = "multi_thread")]
async fn junit_stays_well_formed_whatever_the_model_says() {
    let fake = Fake::anthropic(vec![anthropic_text(
        "done \u{fffe}\u{ffff}\u{1}\u{1b}[0m ok",
    )])
    .await;
    let workflow =
        format!("name = \"t\\uFFFE\"\n{MODELS}[steps.s]\nagent = \"explore\"\nprompt = \"go\"\n");
    let (out, test) = run(
        Test::new().file("w.toml", &workflow),
        &fake.uri(),
        &["run", "w.toml", "--junit", "j.xml"],
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let path = test.path().join("j.xml");
    let xml = std::fs::read_to_string(&path).unwrap();
    assert!(xml.contains("done \u{fffd}\u{fffd}"), "{xml}");
    // expat, as CI servers' parsers, refuses any character XML 1.0 does not allow.
    let parsed = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])",
        ])
        .arg(&path)
        .output()
        .expect("python3 parses the report");
    assert!(
        parsed.status.success(),
        "{}\n{xml}",
        String::from_utf8_lossy(&parsed.stderr)
    );
}
