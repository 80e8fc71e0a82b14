//! Context that lasts (docs/src/runs.md, "Context that lasts"): long steps against a scripted
//! model that enforces a context window, counting a request's tokens as its JSON's bytes over
//! four and refusing one over the window with the provider's own error body.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::fake::Fake;
use crate::support::Test;

const FILES: usize = 150;
const WINDOW: usize = 60_000;

/// The wording a server refuses an over-long request with.
#[derive(Clone, Copy, Debug)]
enum Refusal {
    Anthropic,
    OpenAi,
    LlamaCpp,
    Vllm,
}

impl Refusal {
    fn anthropic_api(self) -> bool {
        matches!(self, Refusal::Anthropic)
    }

    /// The error body, as each server sends it.
    fn body(self, tokens: usize, window: usize) -> Value {
        match self {
            Refusal::Anthropic => {
                json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": format!("prompt is too long: {tokens} tokens > {window} maximum")}})
            }
            Refusal::OpenAi => json!({"error": {"message": format!(
                "This model's maximum context length is {window} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages."),
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
            Refusal::LlamaCpp => json!({"error": {"code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error", "n_prompt_tokens": tokens, "n_ctx": window}}),
            Refusal::Vllm => json!({"object": "error", "message": format!(
                "This model's maximum context length is {window} tokens. However, you requested {tokens} tokens in the messages, Please reduce the length of the messages."),
                "type": "BadRequestError", "param": null, "code": 400}),
        }
    }
}

/// What the scripted model saw.
#[derive(Default)]
struct Seen {
    /// The next file to ask for.
    next: usize,
    /// The largest request it accepted, in tokens.
    largest: usize,
    refusals: usize,
    summaries: usize,
    /// Files whose text reached it in a tool result.
    read: BTreeSet<usize>,
}

/// A model that reads `data/f000.txt` to `data/f149.txt`, one a turn, then answers; it
/// summarises when asked to (runner's compaction request) and refuses requests over `window`.
fn model(
    refusal: Refusal,
    seen: Arc<Mutex<Seen>>,
    window: usize,
) -> impl Fn(&Value) -> ResponseTemplate {
    move |body| {
        let text = body.to_string();
        let tokens = text.len() / 4;
        let mut seen = seen.lock().unwrap();
        if tokens > window {
            seen.refusals += 1;
            return ResponseTemplate::new(400).set_body_json(refusal.body(tokens, window));
        }
        seen.largest = seen.largest.max(tokens);
        for (at, _) in text.match_indices("MARK-f") {
            if let Ok(n) = text[at + 6..at + 9].parse::<usize>() {
                seen.read.insert(n);
            }
        }
        let last = body["messages"].as_array().and_then(|m| m.last()).cloned();
        let asked_to_summarise = last.is_some_and(|m| m.to_string().contains("will be compacted"));
        let reply = if asked_to_summarise {
            seen.summaries += 1;
            Reply::Text(format!(
                "SUMMARY: read data/f000.txt to data/f{:03}.txt",
                seen.next
            ))
        } else if seen.next < FILES {
            seen.next += 1;
            Reply::Read(seen.next - 1)
        } else {
            Reply::Text("Read every file.".into())
        };
        reply.template(refusal.anthropic_api(), tokens)
    }
}

enum Reply {
    Read(usize),
    Text(String),
}

impl Reply {
    /// The reply in the API's shape, its usage reporting the request's tokens as counted.
    fn template(self, anthropic: bool, tokens: usize) -> ResponseTemplate {
        let body = match (self, anthropic) {
            (Reply::Read(n), true) => json!({"type": "message", "role": "assistant",
                "content": [{"type": "tool_use", "id": format!("t{n}"), "name": "read_file",
                    "input": {"path": format!("data/f{n:03}.txt")}}],
                "stop_reason": "tool_use", "usage": {"input_tokens": tokens, "output_tokens": 20}}),
            (Reply::Text(text), true) => json!({"type": "message", "role": "assistant",
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn", "usage": {"input_tokens": tokens, "output_tokens": 40}}),
            (Reply::Read(n), false) => {
                json!({"choices": [{"index": 0, "message": {"role": "assistant",
                "content": null, "tool_calls": [{"id": format!("t{n}"), "type": "function",
                    "function": {"name": "read_file", "arguments": json!({"path": format!("data/f{n:03}.txt")}).to_string()}}]},
                "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": tokens, "completion_tokens": 20}})
            }
            (Reply::Text(text), false) => {
                json!({"choices": [{"index": 0, "message": {"role": "assistant",
                "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": tokens, "completion_tokens": 40}})
            }
        };
        ResponseTemplate::new(200).set_body_json(body)
    }
}

/// A project of 150 files of 8 kB, each starting with its own marker.
fn project(workflow: &str) -> Test {
    let mut test = Test::new().file("w.toml", workflow);
    for n in 0..FILES {
        let line = format!("{n:03} lorem ipsum dolor sit amet consectetur adipiscing elit\n");
        let mut text = format!("MARK-f{n:03}\n");
        while text.len() + line.len() <= 8192 {
            text.push_str(&line);
        }
        test = test.file(&format!("data/f{n:03}.txt"), &text);
    }
    test
}

fn workflow(refusal: Refusal, base_url: &str, keys: &str) -> String {
    let (model, provider) = if refusal.anthropic_api() {
        ("anthropic/claude-test", String::new())
    } else {
        (
            "local/test-model",
            format!("[providers.local]\nkind = \"openai\"\nbase_url = \"{base_url}/v1\"\n"),
        )
    };
    format!(
        "name = \"long\"\n[models]\ndefault = \"{model}\"\n{provider}\n[steps.read]\nagent = \"explore\"\nmax_turns = 400\n{keys}\nprompt = \"Read data/f000.txt to data/f149.txt, one at a time.\"\n"
    )
}

/// Runs the long step against a server whose window is `window`.
async fn run_long(
    refusal: Refusal,
    keys: &str,
    window: usize,
) -> (crate::support::Output, Test, Arc<Mutex<Seen>>, Value) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let fake = if refusal.anthropic_api() {
        Fake::anthropic_fn(model(refusal, seen.clone(), window)).await
    } else {
        Fake::openai_fn(model(refusal, seen.clone(), window)).await
    };
    let (out, test) = project(&workflow(refusal, &fake.uri(), keys))
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.uri())
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    let record: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("run.json on stdout ({e}):\n{}", out.transcript()));
    (out, test, seen, record)
}

fn events(test: &Test, record: &Value) -> Vec<Value> {
    let id = record["run_id"].as_str().unwrap();
    std::fs::read_to_string(
        test.path()
            .join(format!(".runner/runs/{id}/steps/read/transcript.jsonl")),
    )
    .unwrap()
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect()
}

/// With the window declared, old results are cleared in batches, no request passes the window
/// and every file is read.
#[tokio::test(flavor = "multi_thread")]
async fn a_long_step_under_a_declared_window_finishes_inside_it() {
    let (out, test, seen, record) = run_long(
        Refusal::Anthropic,
        &format!("context_window = {WINDOW}"),
        WINDOW,
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(record["steps"]["read"]["summary"], "Read every file.");
    let seen = seen.lock().unwrap();
    eprintln!(
        "declared window: largest request {} tokens, {} refusals",
        seen.largest, seen.refusals
    );
    assert_eq!(seen.refusals, 0, "a request went over the window");
    assert!(seen.largest <= WINDOW, "{}", seen.largest);
    assert_eq!(seen.read.len(), FILES, "files never read: {:?}", seen.read);
    let events = events(&test, &record);
    let clearings: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "context_cleared")
        .collect();
    // Batches, not a clearing every turn: each frees at least 1,024 tokens (the stubs left
    // behind add up, so later ones clear fewer results).
    assert!(
        (2..=FILES / 2).contains(&clearings.len()),
        "{} clearings",
        clearings.len()
    );
    for clearing in &clearings {
        let freed = clearing["tokens_before"].as_u64().unwrap()
            - clearing["tokens_after"].as_u64().unwrap();
        assert!(freed >= 1024, "{clearing}");
    }
    // Cleared results are stubs naming the file and its size.
    let logged = events
        .iter()
        .filter(|e| e["event"] == "turn_started")
        .map(Value::to_string);
    assert!(
        logged
            .into_iter()
            .any(|e| e.contains("[read_file data/f000.txt: ")
                && e.contains(" kB, cleared; read it again if needed]")),
        "no stub for data/f000.txt"
    );
}

/// Without clearing (every result kept), the conversation is compacted by the step's model:
/// the summary exchange is in the transcript, `compactions` in the record.
#[tokio::test(flavor = "multi_thread")]
async fn a_long_step_is_compacted_by_its_own_model() {
    let (out, test, seen, record) = run_long(
        Refusal::Anthropic,
        &format!("context_window = {WINDOW}\nkeep_tool_results = 1000"),
        WINDOW,
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let summaries = {
        let seen = seen.lock().unwrap();
        eprintln!(
            "compaction: {} summaries, largest request {} tokens",
            seen.summaries, seen.largest
        );
        assert_eq!(seen.refusals, 0);
        assert!(seen.summaries >= 2, "{} summaries", seen.summaries);
        assert_eq!(seen.read.len(), FILES);
        seen.summaries
    };
    let step = &record["steps"]["read"];
    assert_eq!(step["compactions"], summaries as u64, "{step}");
    let events = events(&test, &record);
    let compacted: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "context_compacted")
        .collect();
    assert_eq!(compacted.len(), summaries);
    assert!(
        compacted
            .iter()
            .all(|e| e["tokens_after"].as_u64() < e["tokens_before"].as_u64())
    );
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "turn_finished" && e.to_string().contains("SUMMARY: read"))
    );
    // `runner show` tells the step's compactions among its turns.
    let (shown, _test) = test
        .clear_args()
        .args(&["show", "latest", "read"])
        .run_async()
        .await;
    assert_eq!(shown.status, 0, "{}", shown.transcript());
    assert!(
        shown.stdout.contains(": compacted the conversation (")
            && shown.stdout.contains("→ read_file"),
        "{}",
        shown.stdout
    );
    // Each compaction's summary request is labelled, and its note follows it, before the next
    // turn: events are shown where they happened, not after all the turns.
    let lines: Vec<&str> = shown.stdout.lines().collect();
    let labelled: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with("turn ") && lines[i].contains(" · compaction  in "))
        .collect();
    assert_eq!(labelled.len(), summaries, "{}", shown.stdout);
    for at in labelled {
        let next_turn = (at + 1..lines.len())
            .find(|&i| lines[i].starts_with("turn ") && lines[i].contains("  in "))
            .unwrap_or(lines.len());
        assert!(
            lines[at + 1..next_turn]
                .iter()
                .any(|l| l.contains(": compacted the conversation (")),
            "{}",
            lines[at..next_turn].join("\n")
        );
    }
}

/// With no window declared (runner assumes 200k for a Claude model, 128k for an unknown one),
/// the first refusal teaches the window; the step finishes with at most three refusals. The
/// servers' window (24k) is below where runner would clear in the window it assumes.
#[tokio::test(flavor = "multi_thread")]
async fn each_providers_refusal_teaches_the_window() {
    for refusal in [
        Refusal::Anthropic,
        Refusal::OpenAi,
        Refusal::LlamaCpp,
        Refusal::Vllm,
    ] {
        let (out, _test, seen, record) = run_long(refusal, "", 24_000).await;
        assert_eq!(out.status, 0, "{refusal:?}: {}", out.transcript());
        assert_eq!(
            record["steps"]["read"]["summary"], "Read every file.",
            "{refusal:?}"
        );
        let seen = seen.lock().unwrap();
        eprintln!(
            "{refusal:?}: {} refusals, {} summaries, largest accepted {} tokens",
            seen.refusals, seen.summaries, seen.largest
        );
        assert!(
            (1..=3).contains(&seen.refusals),
            "{refusal:?}: {} refusals",
            seen.refusals
        );
        assert_eq!(seen.read.len(), FILES, "{refusal:?}");
    }
}

/// A compacted run replays from its cassettes with `--replay-strict`: the same decisions from
/// the same recorded usage, the summary exchange answered from the recording.
#[tokio::test(flavor = "multi_thread")]
async fn a_compacted_run_replays_strictly() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let fake = Fake::anthropic_fn(model(Refusal::Anthropic, seen.clone(), WINDOW)).await;
    let keys = format!("context_window = {WINDOW}\nkeep_tool_results = 1000");
    let test = project(&workflow(Refusal::Anthropic, &fake.uri(), &keys));
    let cassettes = test.path().join("cassettes");
    let cassettes = cassettes.to_str().unwrap().to_owned();
    let (recorded, test) = test
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.uri())
        .args(&["run", "w.toml", "--format", "json", "--record", &cassettes])
        .run_async()
        .await;
    assert_eq!(recorded.status, 0, "{}", recorded.transcript());
    let first: Value = serde_json::from_str(&recorded.stdout).unwrap();
    let compactions = first["steps"]["read"]["compactions"].as_u64().unwrap_or(0);
    assert!(compactions >= 2, "{}", first["steps"]["read"]);
    let requests = fake.requests().await.len();
    // No server this time: every answer comes from the cassettes, and any request that differs
    // from its recording fails the step.
    let (replayed, _test) = test
        .clear_args()
        .args(&[
            "run",
            "w.toml",
            "--format",
            "json",
            "--replay",
            &cassettes,
            "--replay-strict",
        ])
        .run_async()
        .await;
    assert_eq!(replayed.status, 0, "{}", replayed.transcript());
    let second: Value = serde_json::from_str(&replayed.stdout).unwrap();
    assert_eq!(second["steps"]["read"]["compactions"], compactions);
    assert_eq!(second["steps"]["read"]["summary"], "Read every file.");
    assert!(
        !replayed.stderr.contains("replay drift"),
        "{}",
        replayed.stderr
    );
    assert_eq!(
        fake.requests().await.len(),
        requests,
        "the replay reached the server"
    );
}

/// `--resume RUN --continue`: a step that failed at turn 6 with a provider error goes on from
/// its last turn, its earlier turns in its first request; without `--continue` it starts over.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_step_continues_from_its_last_turn() {
    // Turns 1-5 read a file each; the sixth request is refused (once); then it answers.
    let refused = Arc::new(Mutex::new(false));
    let seen = refused.clone();
    let fake = Fake::anthropic_fn(move |body| {
        let rounds = body["messages"].as_array().map_or(0, Vec::len) / 2;
        let mut refused = seen.lock().unwrap();
        if rounds == 5 && !*refused {
            *refused = true;
            return crate::fake::bad_request("simulated: the provider refused this request");
        }
        if rounds < 5 {
            return Reply::Read(rounds).template(true, 100);
        }
        Reply::Text("Read five files.".into()).template(true, 100)
    })
    .await;
    let workflow = "name = \"c\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.read]\nagent = \"explore\"\nprompt = \"Read data/f000.txt to data/f004.txt.\"\n";
    let (first, record, test) = fail_then_continue(project(workflow), &fake).await;
    let failed: Value = serde_json::from_str(&first.stdout).unwrap();
    assert_eq!(failed["steps"]["read"]["turns"], 6);
    // `runner show` of the failed run says why, after its five tool rounds.
    let failed_id = failed["run_id"].as_str().unwrap();
    let (shown, _test) = test
        .clear_args()
        .args(&["show", failed_id, "read"])
        .run_async()
        .await;
    assert!(
        shown.stdout.contains("step read of run ")
            && shown.stdout.contains("failed: model request failed"),
        "{}",
        shown.stdout
    );
    let before = 6;
    assert_eq!(record["steps"]["read"]["summary"], "Read five files.");
    let bodies = fake.bodies().await;
    // One request, not six: the earlier turns were its first request.
    assert_eq!(bodies.len(), before + 1);
    let resent = &bodies[before];
    let messages = resent["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 11, "the first message and five rounds");
    assert_eq!(
        without_marks(&messages[..10]),
        without_marks(&bodies[5]["messages"].as_array().unwrap()[..10])
    );
    for n in 0..5 {
        assert!(
            resent.to_string().contains(&format!("MARK-f{n:03}")),
            "file {n}"
        );
    }
}

/// Runs the workflow of `test` against `fake` (it must fail), then again with `--resume latest
/// --continue` (it must succeed): the first run's output, the second's `run.json`.
async fn fail_then_continue(test: Test, fake: &Fake) -> (crate::support::Output, Value, Test) {
    let (first, test) = test
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.uri())
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(first.status, 1, "{}", first.transcript());
    let (second, test) = test
        .clear_args()
        .args(&[
            "run",
            "w.toml",
            "--format",
            "json",
            "--resume",
            "latest",
            "--continue",
        ])
        .run_async()
        .await;
    assert_eq!(second.status, 0, "{}", second.transcript());
    let record: Value = serde_json::from_str(&second.stdout).unwrap();
    (first, record, test)
}

fn without_marks(messages: &[Value]) -> String {
    serde_json::to_string(messages)
        .unwrap()
        .replace(",\"cache_control\":{\"type\":\"ephemeral\"}", "")
}

/// A worktree step continued with `--continue` goes on from its branch's work: the file its
/// first turn wrote is in the new worktree, and in the branch the continued step leaves.
#[tokio::test(flavor = "multi_thread")]
async fn a_continued_worktree_step_keeps_its_work() {
    let refused = Arc::new(Mutex::new(false));
    let seen = refused.clone();
    let fake = Fake::anthropic_fn(move |body| {
        let count = body["messages"].as_array().map_or(0, Vec::len);
        let mut refused = seen.lock().unwrap();
        match count {
            1 => crate::fake::anthropic_tool(
                "w1",
                "write_file",
                json!({"path": "new.txt", "content": "written in the first run\n"}),
            ),
            3 if !*refused => {
                *refused = true;
                crate::fake::bad_request("simulated: the provider refused this request")
            }
            _ => Reply::Text("Wrote new.txt.".into()).template(true, 100),
        }
    })
    .await;
    let workflow = "name = \"c\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.write]\nagent = \"code\"\nisolation = \"worktree\"\nprompt = \"Write new.txt.\"\n";
    let test = Test::new()
        .file("w.toml", workflow)
        .file("README.md", "project\n");
    crate::support::init_repo(test.path());
    let (_, record, test) = fail_then_continue(test, &fake).await;
    let branch = record["steps"]["write"]["branch"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", record["steps"]["write"]));
    let shown = crate::support::git(test.path(), &["show", &format!("{branch}:new.txt")]);
    assert_eq!(shown, "written in the first run\n");
}

/// A continued step keeps its subagents' ids: the one it started before the failure can be
/// resumed by its id with its conversation, and a new one is numbered after it.
#[tokio::test(flavor = "multi_thread")]
async fn a_continued_step_keeps_its_subagents() {
    let refused = Arc::new(Mutex::new(false));
    let seen = refused.clone();
    let task = |prompt: &str, resume: Option<&str>| {
        let mut input =
            json!({"description": "look", "prompt": prompt, "subagent_type": "explore"});
        if let Some(id) = resume {
            input["resume"] = json!(id);
        }
        input
    };
    let fake = Fake::anthropic_fn(move |body| {
        let first = body["messages"][0].to_string();
        let last = body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .map(Value::to_string)
            .unwrap_or_default();
        if last.contains("MARK-again") {
            return Reply::Text("resumed with what I had".into()).template(true, 100);
        }
        if first.contains("MARK-new") {
            return Reply::Text("new one done".into()).template(true, 100);
        }
        if first.contains("MARK-look") {
            return Reply::Text("found the config".into()).template(true, 100);
        }
        let mut refused = seen.lock().unwrap();
        match body["messages"].as_array().map_or(0, Vec::len) {
            1 => crate::fake::anthropic_tool("c1", "task", task("MARK-look at the config", None)),
            3 if !*refused => {
                *refused = true;
                crate::fake::bad_request("simulated: the provider refused this request")
            }
            3 => crate::fake::anthropic_tools(&[
                (
                    "c2",
                    "task",
                    task("MARK-again: and the tests?", Some("explore#1")),
                ),
                ("c3", "task", task("MARK-new look elsewhere", None)),
            ]),
            _ => Reply::Text("all done".into()).template(true, 100),
        }
    })
    .await;
    let workflow = "name = \"c\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.lead]\nagent = \"code\"\nprompt = \"MARK-lead: look around.\"\n";
    let (_, _, _test) = fail_then_continue(Test::new().file("w.toml", workflow), &fake).await;
    let bodies = fake.bodies().await;
    // The resumed subagent's request holds its first conversation.
    let resumed = bodies
        .iter()
        .find(|b| {
            b["messages"]
                .as_array()
                .and_then(|m| m.last())
                .is_some_and(|m| m.to_string().contains("MARK-again"))
        })
        .unwrap();
    let text = resumed.to_string();
    assert!(
        text.contains("MARK-look at the config") && text.contains("found the config"),
        "{text}"
    );
    // The new subagent comes after it: explore#2.
    let last = bodies.last().unwrap().to_string();
    assert!(last.contains("[agent explore#2"), "{last}");
    assert!(last.contains("[agent explore#1"), "{last}");
}

/// `--continue` goes on with a fan-out instance that failed, from its own last turn; the
/// instance that succeeded is reused.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_instance_continues_from_its_last_turn() {
    let refused = Arc::new(Mutex::new(false));
    let seen = refused.clone();
    let fake = Fake::anthropic_fn(move |body| {
        let first = body["messages"][0].to_string();
        let count = body["messages"].as_array().map_or(0, Vec::len);
        let mut refused = seen.lock().unwrap();
        match (first.contains("MARK-item-b"), count) {
            (_, 1) => {
                Reply::Read(if first.contains("MARK-item-b") { 1 } else { 0 }).template(true, 100)
            }
            (true, 3) if !*refused => {
                *refused = true;
                crate::fake::bad_request("simulated: the provider refused this request")
            }
            _ => Reply::Text("read it".into()).template(true, 100),
        }
    })
    .await;
    let workflow = "name = \"c\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.each]\nagent = \"explore\"\nfor_each = [\"a\", \"b\"]\nprompt = \"MARK-item-{{ item }}: read your file.\"\n";
    let (_, _, _test) = fail_then_continue(project(workflow), &fake).await;
    // The first run: each instance's first request, a's answer, b's refused third.
    let before = 4;
    let bodies = fake.bodies().await;
    // One request: instance b's third, with its first two turns in it; a is reused.
    assert_eq!(bodies.len(), before + 1);
    let resent = &bodies[before];
    assert_eq!(resent["messages"].as_array().unwrap().len(), 3);
    assert!(resent.to_string().contains("MARK-item-b") && resent.to_string().contains("MARK-f001"));
}

/// A clearing that would free less than its stubs does not happen: results no longer than
/// their stub (short errors) stay, so each request begins with the bytes of the one before and
/// the provider's cache holds, however far past the clearing mark the conversation is.
#[tokio::test(flavor = "multi_thread")]
async fn no_clearing_frees_less_than_its_stubs() {
    let fake = Fake::anthropic_fn(|body| {
        let tokens = body.to_string().len() / 4;
        let rounds = body["messages"].as_array().map_or(0, Vec::len) / 2;
        if rounds < 6 {
            let path = format!("missing-{rounds}.txt");
            return ResponseTemplate::new(200).set_body_json(json!({"type": "message", "role": "assistant",
                "content": [{"type": "tool_use", "id": format!("t{rounds}"), "name": "read_file", "input": {"path": path}}],
                "stop_reason": "tool_use", "usage": {"input_tokens": tokens, "output_tokens": 20}}));
        }
        Reply::Text("None of them exist.".into()).template(true, tokens)
    })
    .await;
    // A long task (about 5,000 tokens) puts every request past the clearing mark of the window.
    let task = "Find the notes, whichever file they are in. ".repeat(460);
    let workflow = format!(
        "name = \"c\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.read]\nagent = \"explore\"\ncontext_window = 10000\nprompt = \"{task}\"\n"
    );
    let (out, test) = Test::new()
        .file("w.toml", &workflow)
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.uri())
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let record: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(record["steps"]["read"]["summary"], "None of them exist.");
    let bodies = fake.bodies().await;
    assert_eq!(bodies.len(), 7);
    for pair in bodies.windows(2) {
        let (before, after) = (
            pair[0]["messages"].as_array().unwrap(),
            pair[1]["messages"].as_array().unwrap(),
        );
        // Compared without the cache breakpoints, which move to the newest message.
        let unmarked = |messages: &[Value]| {
            let mut messages = messages.to_vec();
            for block in messages.iter_mut().flat_map(|m| {
                m["content"]
                    .as_array_mut()
                    .map(|c| c.iter_mut())
                    .into_iter()
                    .flatten()
            }) {
                if let Some(block) = block.as_object_mut() {
                    block.remove("cache_control");
                }
            }
            messages
        };
        assert!(
            unmarked(&after[..before.len()]) == unmarked(before),
            "request {} changed what the one before it sent",
            before.len() / 2 + 2
        );
    }
    assert!(
        !events(&test, &record)
            .iter()
            .any(|e| e["event"] == "context_cleared"),
        "a clearing happened"
    );
}
