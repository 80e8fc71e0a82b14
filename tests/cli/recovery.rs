//! Recovery (docs/src/runs.md "Resume" and "Worktrees"): Ctrl-C keeps a worktree step's work on
//! its branch so that `--resume RUN --continue` goes on from the files the conversation
//! describes; signals that arrive together count as one, and every exit leaves `run.json` with
//! a final status; `runs` shows a dead run as interrupted; `clean` after an interrupt keeps the
//! branch its kept worktree has checked out, and its dry run says what the real one does.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::fake::{Fake, anthropic_text, anthropic_tool};
use crate::support::{Test, git, init_repo};

const KEY: &str = "sk-ant-recovery-test-5e6f";
const HEAD: &str = "name = \"t\"\n[models]\ndefault = \"anthropic/claude-test\"\n";

/// Where the signals go: runner alone, or runner and then its process group (as `timeout`
/// does).
#[derive(Clone, Copy)]
enum Target {
    Runner,
    RunnerThenGroup,
}

/// Runs `runner ARGS --format jsonl` in `dir` against the fake at `uri`; once an event line
/// holds `ready` it sends the first of `signals`, and the others as soon as runner has said it
/// took the first (the moment `timeout`'s signal to the group lands when runner was quick).
/// Returns the exit code and stderr.
async fn interrupt(
    dir: &Path,
    uri: &str,
    args: &[&str],
    ready: &str,
    signals: &[Signal],
    target: Target,
) -> (Option<i32>, String) {
    let (dir, uri, ready) = (dir.to_owned(), uri.to_owned(), ready.to_owned());
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let signals = signals.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_runner"));
        command
            .args(&args)
            .args(["--format", "jsonl"])
            .current_dir(&dir)
            .env("ANTHROPIC_BASE_URL", &uri)
            .env("ANTHROPIC_API_KEY", KEY)
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .stdout(Stdio::piped());
        // A group of its own, as a job under `timeout` or a CI runner has.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command.spawn().unwrap();
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let mut events = BufReader::new(child.stdout.take().unwrap());
        // Readiness: an event line says the step got there.
        loop {
            let mut line = String::new();
            if events.read_line(&mut line).unwrap() == 0 {
                break;
            }
            if line.contains(&ready) {
                break;
            }
        }
        let send = |signal: Signal| {
            nix::sys::signal::kill(pid, signal).unwrap();
            if let Target::RunnerThenGroup = target {
                nix::sys::signal::killpg(pid, signal).unwrap();
            }
        };
        let mut errors = BufReader::new(child.stderr.take().unwrap());
        let mut stderr = String::new();
        if let Some((first, rest)) = signals.split_first() {
            send(*first);
            if !rest.is_empty() {
                loop {
                    let mut line = String::new();
                    if errors.read_line(&mut line).unwrap() == 0 {
                        break;
                    }
                    stderr.push_str(&line);
                    if line.starts_with("interrupted: ") {
                        break;
                    }
                }
                rest.iter().for_each(|signal| send(*signal));
            }
        }
        std::io::copy(&mut events, &mut std::io::sink()).unwrap();
        std::io::Read::read_to_string(&mut errors, &mut stderr).unwrap();
        (child.wait().unwrap().code(), stderr)
    })
    .await
    .unwrap()
}

/// The only run's `run.json` in `dir`'s state directory, and its folder.
fn only_run(dir: &Path) -> (Value, PathBuf) {
    let runs = dir.join(".runner/runs");
    let mut all: Vec<PathBuf> = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    all.sort();
    let run_dir = all.pop().unwrap();
    let text = std::fs::read_to_string(run_dir.join("run.json")).unwrap();
    (serde_json::from_str(&text).unwrap(), run_dir)
}

fn worktree_step(checks: &str) -> String {
    format!(
        "{HEAD}[steps.s]\nagent = \"code\"\nisolation = \"worktree\"\nprompt = \"Make it\"\nchecks = [{checks}]\ncheck_retries = 0\n"
    )
}

/// The first run writes `half.txt` in its worktree, then waits for a reply that never comes
/// and is interrupted there; returns the test and the first run's id.
async fn interrupted_after_an_edit() -> (Test, String) {
    let fake = Fake::anthropic(vec![
        anthropic_tool(
            "t1",
            "write_file",
            json!({"path": "half.txt", "content": "half\n"}),
        ),
        anthropic_text("never").set_delay(Duration::from_secs(120)),
    ])
    .await;
    let test = Test::new()
        .file("w.toml", &worktree_step("\"grep -q half half.txt\""))
        .file(".gitignore", ".runner/\n");
    init_repo(test.path());
    let (status, stderr) = interrupt(
        test.path(),
        &fake.uri(),
        &["run", "w.toml"],
        "\"tool_finished\"",
        &[Signal::SIGINT],
        Target::Runner,
    )
    .await;
    assert_eq!(status, Some(130), "{stderr}");
    let (run, _) = only_run(test.path());
    let id = run["run_id"].as_str().unwrap().to_owned();
    (test, id)
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_then_continue_goes_on_from_the_interrupted_edit() {
    let (test, first) = interrupted_after_an_edit().await;
    let (run, _) = only_run(test.path());
    let step = &run["steps"]["s"];
    assert_eq!(step["status"], "cancelled");
    // The edit is on the step's branch, as a commit of its own.
    let branch = step["branch"].as_str().unwrap();
    assert_eq!(
        git(test.path(), &["show", &format!("{branch}:half.txt")]),
        "half\n"
    );
    assert!(
        git(test.path(), &["log", "-1", "--format=%s", branch]).contains("work in progress"),
        "{}",
        git(test.path(), &["log", "-1", "--format=%s", branch])
    );

    // Going on: the conversation says `half.txt` was written, and the files agree.
    let fake = Fake::anthropic(vec![anthropic_text("done")]).await;
    let (out, test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&[
            "run",
            "w.toml",
            "--resume",
            &first,
            "--continue",
            "--format",
            "json",
        ])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    let step = &run["steps"]["s"];
    assert_eq!(step["checks"][0]["passed"], true, "{step}");
    assert_eq!(step["continued_from"], first.as_str());
    let branch = step["branch"].as_str().unwrap();
    assert_eq!(
        git(test.path(), &["show", &format!("{branch}:half.txt")]),
        "half\n"
    );
    // The one request went on from the earlier conversation: the write and its result.
    let bodies = fake.bodies().await;
    assert_eq!(bodies.len(), 1);
    assert!(bodies[0]["messages"].to_string().contains("half.txt"));

    // `show` says the step went on from earlier turns, and where they are.
    let id = run["run_id"].as_str().unwrap().to_owned();
    let out = test.clear_args().args(&["show", &id, "s"]).run_keeping();
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stdout.contains(&format!(
            "continues the conversation of run {first}: its first turn here sends the earlier turns again (`runner show {first} s` shows them)"
        )),
        "{}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn continue_refuses_a_step_whose_work_is_not_on_its_branch() {
    let (test, first) = interrupted_after_an_edit().await;
    // As a run killed before it could commit leaves it: work in the tree, not on the branch.
    let (run, _) = only_run(test.path());
    let tree = PathBuf::from(run["steps"]["s"]["worktree"].as_str().unwrap());
    std::fs::write(tree.join("late.txt"), "late\n").unwrap();
    let fake = Fake::anthropic(vec![anthropic_text("done")]).await;
    let (out, _test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&[
            "run",
            "w.toml",
            "--resume",
            &first,
            "--continue",
            "--format",
            "json",
        ])
        .run_async()
        .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    let error = run["steps"]["s"]["error"].as_str().unwrap();
    assert_eq!(
        error,
        format!(
            "cannot continue: its worktree from run {first} at {} holds 1 uncommitted change that its branch does not (the run ended before runner could commit them); commit them there (`git -C {0} add -A && git -C {0} commit -m wip`) and continue again, or resume without `--continue` to start the step afresh",
            tree.display()
        )
    );
    assert!(fake.bodies().await.is_empty(), "nothing was asked");
    assert!(tree.join("late.txt").is_file());
}

fn slow_step() -> String {
    format!("{HEAD}[steps.s]\nagent = \"explore\"\nprompt = \"go\"\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn signals_that_arrive_together_are_one_interrupt_with_its_table_and_record() {
    for (signal, target) in [
        (Signal::SIGTERM, Target::RunnerThenGroup),
        (Signal::SIGINT, Target::Runner),
    ] {
        let fake = Fake::anthropic(vec![
            anthropic_text("never").set_delay(Duration::from_secs(120)),
        ])
        .await;
        let test = Test::new().file("w.toml", &slow_step());
        // As `timeout` does: runner, then its group; or Ctrl-C pressed twice at once.
        let (status, stderr) = interrupt(
            test.path(),
            &fake.uri(),
            &["run", "w.toml"],
            "\"step_started\"",
            &[signal, signal],
            target,
        )
        .await;
        assert_eq!(status, Some(130), "{stderr}");
        let (run, _) = only_run(test.path());
        let id = run["run_id"].as_str().unwrap();
        assert_eq!(run["status"], "interrupted", "{stderr}");
        assert_eq!(run["steps"]["s"]["status"], "cancelled");
        assert!(!stderr.contains("exiting at once"), "{stderr}");
        assert!(
            stderr.contains(&format!("run {id} was interrupted in")),
            "the table and its last line: {stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_shows_a_run_that_died_saying_running_as_interrupted() {
    let fake = Fake::anthropic(vec![
        anthropic_text("never").set_delay(Duration::from_secs(120)),
    ])
    .await;
    let test = Test::new().file("w.toml", &slow_step());
    // Killed outright: nothing runs after SIGKILL, so the record still says `running`.
    let (status, _) = interrupt(
        test.path(),
        &fake.uri(),
        &["run", "w.toml"],
        "\"step_started\"",
        &[Signal::SIGKILL],
        Target::Runner,
    )
    .await;
    assert_eq!(status, None, "killed by a signal");
    let (run, _) = only_run(test.path());
    assert_eq!(run["status"], "running");
    let id = run["run_id"].as_str().unwrap().to_owned();
    let out = Test::new()
        .args(&["runs", "--workdir", test.path().to_str().unwrap()])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{}", out.stdout));
    assert!(line.contains(" interrupted "), "{line}");
    assert!(!line.contains("running"), "{line}");
    let out = Test::new()
        .args(&[
            "runs",
            "--workdir",
            test.path().to_str().unwrap(),
            "--format",
            "json",
        ])
        .run();
    let runs: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(runs[0]["run_id"], id.as_str());
    assert_eq!(runs[0]["status"], "interrupted");
    // `show` says the same of it.
    let out = Test::new()
        .args(&["show", &id, "--workdir", test.path().to_str().unwrap()])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let head = out.stdout.lines().next().unwrap_or_default();
    assert!(head.contains(" interrupted "), "{}", out.stdout);
}

/// `runner clean --dry-run`, then `runner clean`: both exit 0 and say the same, line for line.
fn clean_as_promised(test: Test) -> (String, Test) {
    let test = test.clear_args().args(&["clean", "--dry-run"]);
    let dry = test.run_keeping();
    assert_eq!(dry.status, 0, "{}", dry.transcript());
    let test = test.clear_args().args(&["clean"]);
    let real = test.run_keeping();
    assert_eq!(real.status, 0, "{}", real.transcript());
    assert_eq!(
        dry.stdout.replace("would remove", "removed"),
        real.stdout,
        "the dry run promised what the real one did not"
    );
    (real.stdout, test)
}

#[tokio::test(flavor = "multi_thread")]
async fn clean_after_an_interrupt_keeps_the_branch_and_does_what_its_dry_run_said() {
    let (test, _first) = interrupted_after_an_edit().await;
    let (run, _) = only_run(test.path());
    let branch = run["steps"]["s"]["branch"].as_str().unwrap().to_owned();
    let tree = run["steps"]["s"]["worktree"].as_str().unwrap().to_owned();
    let (said, test) = clean_as_promised(test);
    // The work is on the branch: the tree can go, the branch stays.
    assert!(
        said.contains(&format!("removed worktree {tree}\n")),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "kept branch {branch}: it holds 1 commit not pushed anywhere"
        )),
        "{said}"
    );
    assert!(!Path::new(&tree).exists());
    assert_eq!(
        git(test.path(), &["show", &format!("{branch}:half.txt")]),
        "half\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn clean_keeps_the_branch_a_kept_worktree_has_checked_out() {
    let (test, _first) = interrupted_after_an_edit().await;
    let (run, _) = only_run(test.path());
    let branch = run["steps"]["s"]["branch"].as_str().unwrap().to_owned();
    let tree = run["steps"]["s"]["worktree"].as_str().unwrap().to_owned();
    // Work that is not on the branch keeps the tree, and the tree keeps its branch.
    std::fs::write(Path::new(&tree).join("late.txt"), "late\n").unwrap();
    let (said, _test) = clean_as_promised(test);
    assert!(
        said.contains(&format!(
            "kept worktree {tree}: it holds 1 uncommitted change (`--force` removes it)"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!("kept branch {branch}: its worktree is kept")),
        "{said}"
    );
    assert!(Path::new(&tree).join("late.txt").is_file());
}

/// A model that reads `data/f0.txt`, `data/f1.txt`, ... one a turn, summarises when runner asks
/// it to compact, and answers on a turn that allows no tool call. Its usage reports a request's
/// tokens as its JSON's bytes over four.
fn reader(body: &Value) -> wiremock::ResponseTemplate {
    let tokens = body.to_string().len() / 4;
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().map(Value::to_string).unwrap_or_default();
    let read = body.to_string().matches("MARK-f").count();
    let (content, stop) = if last.contains("will be compacted") {
        (
            json!([{"type": "text", "text": "SUMMARY: read the first files; go on with the next."}]),
            "end_turn",
        )
    } else if body["tool_choice"]["type"] == "none" {
        (json!([{"type": "text", "text": "PARTIAL"}]), "end_turn")
    } else {
        let n = last
            .rfind("MARK-f")
            .and_then(|at| last[at + 6..].split('\\').next()?.parse::<usize>().ok())
            .map_or(read, |n| n + 1);
        (
            json!([{"type": "tool_use", "id": format!("t{n}"), "name": "read_file",
                "input": {"path": format!("data/f{n}.txt")}}]),
            "tool_use",
        )
    };
    wiremock::ResponseTemplate::new(200).set_body_json(json!({
        "type": "message", "role": "assistant", "content": content, "stop_reason": stop,
        "usage": {"input_tokens": tokens, "output_tokens": 20}
    }))
}

/// Roles alternate, starting with the user's.
fn alternates(messages: &[Value]) -> bool {
    messages
        .iter()
        .enumerate()
        .all(|(i, m)| m["role"] == if i % 2 == 0 { "user" } else { "assistant" })
}

#[tokio::test(flavor = "multi_thread")]
async fn continue_after_a_compaction_sends_the_compacted_conversation_without_a_stale_last_turn() {
    let workflow = |max_turns: u32| {
        format!(
            "{HEAD}[steps.read]\nagent = \"explore\"\nmax_turns = {max_turns}\ncontext_window = 12000\nkeep_tool_results = 1000\nchecks = [\"test -f ok.txt\"]\ncheck_retries = 0\nprompt = \"TASK-READ the data files, one a turn.\"\n"
        )
    };
    let mut test = Test::new().file("w.toml", &workflow(8));
    for n in 0..20 {
        let mut text = format!("MARK-f{n}\n");
        while text.len() < 8000 {
            text.push_str("lorem ipsum dolor sit amet consectetur adipiscing elit\n");
        }
        test = test.file(&format!("data/f{n}.txt"), &text);
    }
    let fake = Fake::anthropic_fn(reader).await;
    let (out, test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let first: Value = serde_json::from_str(&out.stdout).unwrap();
    let step = &first["steps"]["read"];
    assert!(step["compactions"].as_u64().unwrap_or(0) >= 1, "{step}");
    assert_eq!(step["ran_out_of_turns"], true, "{step}");
    let first = first["run_id"].as_str().unwrap().to_owned();

    // Going on with a raised limit: two turns of its own.
    let fake = Fake::anthropic_fn(reader).await;
    let test = test
        .file("w.toml", &workflow(2))
        .file("ok.txt", "ok\n")
        .clear_args();
    let (out, _test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--resume", &first, "--continue"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    assert_eq!(
        bodies.len(),
        2,
        "max_turns counts this continuation's turns"
    );
    let sent = &bodies[0];
    let messages = sent["messages"].as_array().unwrap();
    let text = sent["messages"].to_string();
    assert!(alternates(messages), "roles do not alternate: {text}");
    // From the compacted conversation: the task once, the summary once, nothing before it.
    assert_eq!(text.matches("TASK-READ").count(), 1, "{text}");
    assert_eq!(
        text.matches("The conversation so far was compacted")
            .count(),
        1,
        "{text}"
    );
    assert!(
        !text.contains("MARK-f0\\n"),
        "a result from before the compaction: {text}"
    );
    // No stale last turn: tools may be called, and the model is told so.
    assert!(sent.get("tool_choice").is_none(), "{sent}");
    assert!(!text.contains("This is your last turn"), "{text}");
    assert!(
        text.contains("The step goes on from here with 2 more turns (max_turns), and tool calls are allowed again"),
        "{text}"
    );
    // Its own last turn is the second.
    assert_eq!(bodies[1]["tool_choice"]["type"], "none");
    assert!(
        bodies[1]["messages"]
            .to_string()
            .contains("This is your last turn (max_turns = 2)")
    );
}

/// A model server on 127.0.0.1 for the Anthropic API that answers each request by its body:
/// one that holds `hang` gets a stream that sends `text` in one delta and then nothing more
/// (the connection held until runner lets go of it); any other gets `whole`, unstreamed.
/// Returns its base URL.
fn hanging_server(hang: &'static str, text: String, whole: Value) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (text, whole) = (text.clone(), whole.clone());
            std::thread::spawn(move || {
                // The whole request: its head, then as many bytes as it says.
                let mut request = Vec::new();
                let mut buf = [0u8; 65536];
                let body_at = loop {
                    let Ok(n) = stream.read(&mut buf) else { return };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                };
                let head = String::from_utf8_lossy(&request[..body_at]).to_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0);
                while request.len() < body_at + length {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let body = String::from_utf8_lossy(&request[body_at..]).into_owned();
                if !body.contains(hang) {
                    let reply = whole.to_string();
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                        reply.len()
                    );
                    return;
                }
                let events = [
                    json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": null, "usage": {"input_tokens": 500, "output_tokens": 1}}}),
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
                ];
                let opening: String = events
                    .iter()
                    .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
                    .collect();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{opening}\r\n",
                    opening.len()
                );
                let _ = stream.flush();
                // Never more: wait for runner to close the connection.
                while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    url
}

fn run_json(test: &Test, url: &str, workflow: &str) -> (crate::support::Output, Value) {
    let test_dir = test.path().to_owned();
    std::fs::write(test_dir.join("w.toml"), workflow).unwrap();
    let out = Test::new()
        .anthropic_api(url, KEY)
        .args(&[
            "run",
            test_dir.join("w.toml").to_str().unwrap(),
            "--workdir",
            test_dir.to_str().unwrap(),
            "--format",
            "json",
        ])
        .run();
    let record = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("run.json on stdout ({e}):\n{}", out.transcript()));
    (out, record)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reply_cut_off_by_the_timeout_counts_the_tokens_it_streamed() {
    let url = hanging_server("MARK-slow", "x".repeat(400), json!({}));
    let test = Test::new();
    let (out, record) = run_json(
        &test,
        &url,
        &format!(
            "{HEAD}[steps.s]\nagent = \"explore\"\nprompt = \"MARK-slow look\"\ntimeout = \"2s\"\n"
        ),
    );
    assert_eq!(out.status, 1, "{}", out.transcript());
    let step = &record["steps"]["s"];
    assert_eq!(step["error"], "timed out after 2s", "{step}");
    // 400 characters streamed: 100 tokens, estimated; the request's from its size.
    assert_eq!(step["output_tokens"], 100, "{step}");
    assert!(step["input_tokens"].as_u64().unwrap() > 100, "{step}");
    assert_eq!(step["tokens_estimated"], true, "{step}");
    // The transcript has the cut-off turn with the same counts.
    let id = record["run_id"].as_str().unwrap();
    let transcript = std::fs::read_to_string(
        test.path()
            .join(format!(".runner/runs/{id}/steps/s/transcript.jsonl")),
    )
    .unwrap();
    let turn: Value = transcript
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["event"] == "turn_finished")
        .unwrap_or_else(|| panic!("{transcript}"));
    assert_eq!(turn["cut_off"], true, "{turn}");
    assert_eq!(turn["usage"]["output_tokens"], 100, "{turn}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subagent_still_running_at_the_timeout_is_recorded_as_cancelled_with_its_tokens() {
    let lead = json!({
        "id": "msg", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "tool_use", "id": "t1", "name": "task", "input": {
            "description": "scan", "prompt": "MARK-sub list files", "subagent_type": "explore"}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 100, "output_tokens": 20}
    });
    let url = hanging_server("MARK-sub", "y".repeat(80), lead);
    let test = Test::new();
    let (out, record) = run_json(
        &test,
        &url,
        &format!(
            "{HEAD}[steps.lead]\nagent = \"explore\"\ntools = [\"read_file\", \"task\"]\nprompt = \"MARK-lead look\"\ntimeout = \"2s\"\n"
        ),
    );
    assert_eq!(out.status, 1, "{}", out.transcript());
    let step = &record["steps"]["lead"];
    assert_eq!(step["error"], "timed out after 2s", "{step}");
    let subagents = step["subagents"].as_array().unwrap();
    assert_eq!(subagents.len(), 1, "{step}");
    let sub = &subagents[0];
    assert_eq!(sub["id"], "explore#1", "{sub}");
    assert_eq!(sub["status"], "cancelled", "{sub}");
    assert_eq!(
        sub["error"], "still running when its step timed out after 2s",
        "{sub}"
    );
    assert_eq!(sub["turns"], 1, "{sub}");
    assert_eq!(sub["output_tokens"], 20, "80 characters streamed: {sub}");
    // The listed subagents add up to the step: its own 100 + 20, and the subagent's.
    let sum = |key: &str| {
        100 * u64::from(key == "input_tokens")
            + 20 * u64::from(key == "output_tokens")
            + sub[key].as_u64().unwrap()
    };
    assert_eq!(
        step["input_tokens"].as_u64().unwrap(),
        sum("input_tokens"),
        "{step}"
    );
    assert_eq!(
        step["output_tokens"].as_u64().unwrap(),
        sum("output_tokens"),
        "{step}"
    );
}
