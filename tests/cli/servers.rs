//! Real model servers and how they behave (docs/src/models.md "Running against each kind of server"):
//! llama.cpp's server closes the connection after each streamed reply while advertising
//! keep-alive, a CPU server streams slowly for a long time, local models write tool calls as
//! text, a full context ends a reply with `length`, and agents repeat themselves or run out of
//! turns. Each behaviour is a test server here that behaves so: a raw HTTP/1.1 server on
//! 127.0.0.1 speaking OpenAI's streamed Chat Completions, or the fake API.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::fake::{Fake, ok, openai_text, openai_tools};
use crate::support::{Output, Test};

const KEY: &str = "sk-local-test-0000";

fn workflow(url: &str, step: &str) -> String {
    format!(
        "name = \"local\"\n[providers.local]\nkind = \"openai\"\nbase_url = \"{url}\"\n[models]\ndefault = \"local/qwen2.5-coder-1.5b\"\n[steps.s]\nagent = \"explore\"\nretries = 0\nprompt = \"Look around\"\n{step}"
    )
}

async fn run(url: &str, step: &str, env: &[(&str, &str)], format: &str) -> (Output, Value) {
    let mut test = Test::new()
        .file("w.toml", &workflow(url, step))
        .file("notes.txt", "hello\n")
        .env("OPENAI_API_KEY", KEY)
        .args(&["run", "w.toml", "--format", format]);
    for (name, value) in env {
        test = test.env(name, value);
    }
    let (out, test) = test.run_async().await;
    let run_dir = std::fs::read_dir(test.path().join(".runner/runs"))
        .ok()
        .and_then(|mut runs| runs.next())
        .and_then(|run| Some(run.ok()?.path()));
    let mut record = run_dir
        .as_ref()
        .and_then(|dir| std::fs::read_to_string(dir.join("run.json")).ok())
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    // The step's transcript rides along, for tests that read what the tools returned.
    if let Some(transcript) =
        run_dir.and_then(|dir| std::fs::read_to_string(dir.join("steps/s/transcript.jsonl")).ok())
    {
        record["transcript"] = Value::String(transcript);
    }
    (out, record)
}

/// One streamed Chat Completions reply, as llama.cpp's server writes it: `data:` lines, usage
/// in the last chunk, `[DONE]`.
fn stream_events(reply: &Reply) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| json!({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    if let Reply::Chunks(chunks) = reply {
        let mut lines: Vec<String> = chunks.iter().map(|e| format!("data: {e}\n\n")).collect();
        lines.push("data: [DONE]\n\n".into());
        return lines;
    }
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": null}),
        Value::Null,
    )];
    match reply {
        Reply::Tool(name, arguments) => events.push(chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments.to_string()}}]}),
            Value::Null,
        )),
        Reply::Text(parts) => {
            for part in parts {
                events.push(chunk(json!({"content": part}), Value::Null));
            }
        }
        Reply::Chunks(_) => {}
    }
    let finish = match reply {
        Reply::Tool(..) => "tool_calls",
        Reply::Text(_) | Reply::Chunks(_) => "stop",
    };
    let mut last = chunk(json!({}), json!(finish));
    last["usage"] = json!({"prompt_tokens": 50, "completion_tokens": 10});
    events.push(last);
    let mut lines: Vec<String> = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    lines.push("data: [DONE]\n\n".into());
    lines
}

#[derive(Clone)]
enum Reply {
    Tool(&'static str, Value),
    Text(Vec<String>),
    /// These chunks exactly, then `[DONE]`.
    Chunks(Vec<Value>),
}

/// How the raw server behaves.
#[derive(Clone, Copy)]
enum Manner {
    /// Advertises keep-alive, then drops the connection when the next request arrives on it,
    /// before answering: what a request sent on llama.cpp's closed connection meets.
    ClosesAfterEachReply,
    /// Streams each event after a pause.
    Slow(Duration),
    /// Streams the first events, then falls silent (the connection stays open).
    StallsAfter(usize),
}

/// Requests received, by connection.
type Seen = Arc<Mutex<Vec<usize>>>;

async fn read_request(socket: &mut tokio::net::TcpStream, got: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 16384];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                got.drain(..end + 4 + length);
                return true;
            }
        }
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// A streaming OpenAI-compatible server on 127.0.0.1 answering with `replies` in order.
async fn raw_server(replies: Vec<Reply>, manner: Manner) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let replies = Arc::new(Mutex::new(std::collections::VecDeque::from(replies)));
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let connection = {
                let mut seen = record.lock().unwrap();
                seen.push(0);
                seen.len() - 1
            };
            let (record, replies) = (record.clone(), replies.clone());
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut answered = 0;
                while read_request(&mut socket, &mut got).await {
                    record.lock().unwrap()[connection] += 1;
                    if answered > 0 && matches!(manner, Manner::ClosesAfterEachReply) {
                        return;
                    }
                    let Some(reply) = replies.lock().unwrap().pop_front() else {
                        return;
                    };
                    answered += 1;
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n";
                    if socket.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    for (i, event) in stream_events(&reply).into_iter().enumerate() {
                        match manner {
                            Manner::Slow(pause) => tokio::time::sleep(pause).await,
                            Manner::StallsAfter(n) if i == n => {
                                // Silent, the connection open, until runner gives up on it.
                                let mut rest = [0u8; 1];
                                let _ = socket.read(&mut rest).await;
                                return;
                            }
                            _ => {}
                        }
                        let chunk = format!("{:x}\r\n{event}\r\n", event.len());
                        if socket.write_all(chunk.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    if socket.write_all(b"0\r\n\r\n").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, seen)
}

fn events(out: &Output) -> Vec<Value> {
    out.stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A request sent on a kept connection the server has closed is sent again at once on a new
/// one, not counted as a retry: with `retries = 0`, every turn still succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_closes_after_each_streamed_reply_costs_no_retry() {
    let (url, seen) = raw_server(
        vec![
            Reply::Tool("list_dir", json!({"path": "."})),
            Reply::Tool("read_file", json!({"path": "notes.txt"})),
            Reply::Text(vec!["It says hello.".into()]),
        ],
        Manner::ClosesAfterEachReply,
    )
    .await;
    let (out, record) = run(&url, "", &[], "jsonl").await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        !events(&out).iter().any(|e| e["event"] == "retrying"),
        "{}",
        out.stdout
    );
    assert_eq!(record["steps"]["s"]["summary"], "It says hello.");
    assert_eq!(record["steps"]["s"]["turns"], 3);
    // A later request goes out on the kept connection when the client still holds it, meets it
    // closed, and goes again on a new one; whether the client still holds it depends on when it
    // read the close, so only the bounds are certain: no connection carried more than the one
    // answered request and the one it dropped, and no request was sent on more than two.
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|n| (1..=2).contains(n)) && seen.len() <= 3,
        "{seen:?}"
    );
    assert!((3..=5).contains(&seen.iter().sum::<usize>()), "{seen:?}");
}

/// No total limit cuts a reply that keeps streaming: pauses under the idle limit add up to far
/// more than it.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_stream_longer_than_the_idle_limit_is_not_cut() {
    let parts: Vec<String> = (0..30).map(|i| format!("w{i} ")).collect();
    let (url, _seen) = raw_server(
        vec![Reply::Text(parts.clone())],
        Manner::Slow(Duration::from_millis(100)),
    )
    .await;
    let (out, record) = run(&url, "", &[("RUNNER_IDLE_TIMEOUT", "2s")], "json").await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(record["steps"]["s"]["summary"], parts.concat());
}

/// A stream that falls silent is given up after the idle limit, and said to have broken off
/// while streaming, not that the API could not be reached.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_that_falls_silent_is_reported_as_broken_off() {
    let (url, _seen) = raw_server(
        vec![Reply::Text(vec!["partial".into(), "never".into()])],
        Manner::StallsAfter(2),
    )
    .await;
    let (out, record) = run(&url, "", &[("RUNNER_IDLE_TIMEOUT", "1s")], "json").await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let error = record["steps"]["s"]["error"].as_str().unwrap();
    assert!(
        error.contains("the reply broke off while streaming: nothing more came for 1s")
            && error.contains("`RUNNER_IDLE_TIMEOUT` raises it")
            && !error.contains("could not reach"),
        "{error}"
    );
}

/// The tool results sent back in a Chat Completions request, in order.
fn tool_results(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A model's fenced `{"name", "arguments"}` is run as the call it is, never taken as the
/// step's answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_call_written_as_text_is_run_not_taken_as_the_answer() {
    let fake = Fake::openai(vec![
        openai_text(
            "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"notes.txt\"}}\n```",
        ),
        openai_text("The notes say hello."),
    ])
    .await;
    let (out, record) = run(&format!("{}/v1", fake.uri()), "", &[], "jsonl").await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(record["steps"]["s"]["summary"], "The notes say hello.");
    assert_eq!(record["steps"]["s"]["tool_calls"], 1);
    let bodies = fake.bodies().await;
    let results = tool_results(&bodies[1]);
    assert_eq!(results.len(), 1);
    assert!(results[0].contains("hello"), "{results:?}");
    let noted: Vec<Value> = events(&out)
        .into_iter()
        .filter(|e| e["event"] == "tool_call_in_text")
        .collect();
    assert_eq!(noted.len(), 1, "{}", out.stdout);
    assert_eq!(noted[0]["name"], "read_file");
}

/// `finish_reason: length` far below `max_tokens` is the context, and the error says so.
#[tokio::test(flavor = "multi_thread")]
async fn length_on_a_full_context_names_the_context_not_max_tokens() {
    let fake = Fake::openai(vec![ok(json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "The answer is"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 3932, "completion_tokens": 164}
    }))])
    .await;
    let (out, record) = run(&format!("{}/v1", fake.uri()), "", &[], "json").await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let error = record["steps"]["s"]["error"].as_str().unwrap();
    assert!(
        error.contains("cut off after 164 tokens, below max_tokens (8192)")
            && error.contains("context is full (3932 prompt + 164 reply tokens)"),
        "{error}"
    );
    assert!(!error.contains("raise `max_tokens`"), "{error}");
}

/// llama.cpp's own context error is "too long", and not retried.
#[tokio::test(flavor = "multi_thread")]
async fn llama_cpps_context_error_is_too_long() {
    let fake = Fake::openai(vec![wiremock::ResponseTemplate::new(400).set_body_json(json!({
        "error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 4200, "n_ctx": 4096}
    }))])
    .await;
    let (out, record) = run(&format!("{}/v1", fake.uri()), "", &[], "json").await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let error = record["steps"]["s"]["error"].as_str().unwrap();
    assert!(
        error.contains("the conversation is too long for the model") && error.contains("1 attempt"),
        "{error}"
    );
}

/// The third identical call in a row is not run: the model reads that it has the output.
#[tokio::test(flavor = "multi_thread")]
async fn the_same_call_three_times_in_a_row_gets_an_error_result() {
    let call = || openai_tools(&[("c", "read_file", json!({"path": "notes.txt"}))]);
    let fake = Fake::openai(vec![call(), call(), call(), openai_text("It says hello.")]).await;
    let (out, record) = run(&format!("{}/v1", fake.uri()), "", &[], "json").await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(record["steps"]["s"]["summary"], "It says hello.");
    let last = tool_results(&fake.bodies().await[3]);
    assert_eq!(last.len(), 3);
    assert!(
        last[0].contains("hello") && last[1].contains("hello"),
        "{last:?}"
    );
    assert!(
        last[2].contains("was called with exactly this input 3 times in a row")
            && !last[2].contains("hello"),
        "{last:?}"
    );
}

/// A model that reads `notes.txt` again and again until it is given no tool call.
async fn repeating_model() -> Fake {
    Fake::openai_fn(|body| {
        if body["tool_choice"] == "none" {
            openai_text("notes.txt says hello.")
        } else {
            openai_tools(&[("c", "read_file", json!({"path": "notes.txt"}))])
        }
    })
    .await
}

/// A model that keeps making the refused call is sent to its last turn after three refusals
/// in a row (the wrap-up turn `max_turns` gives: tools offered, `tool_choice` none), instead of
/// a full request for each refusal until `max_turns`.
#[tokio::test(flavor = "multi_thread")]
async fn three_refused_repeats_send_the_model_to_its_last_turn() {
    let fake = repeating_model().await;
    let (out, record) = run(
        &format!("{}/v1", fake.uri()),
        "max_turns = 30\n",
        &[],
        "json",
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let step = &record["steps"]["s"];
    assert_eq!(step["summary"], "notes.txt says hello.", "{step}");
    let bodies = fake.bodies().await;
    // Two calls run, the next three refused; the sixth request is the last, not the thirtieth.
    assert_eq!(bodies.len(), 6, "{}", out.transcript());
    assert!(bodies[..5].iter().all(|b| b.get("tool_choice").is_none()));
    let last = &bodies[5];
    assert_eq!(last["tool_choice"], "none");
    assert!(!last["tools"].as_array().unwrap().is_empty());
    let results = tool_results(last);
    assert_eq!(results.len(), 5);
    assert!(
        results[2..]
            .iter()
            .all(|r| r.contains("was called with exactly this input")),
        "{results:?}"
    );
    assert!(
        last.to_string()
            .contains("refused 3 times in a row, so this is your last turn"),
        "{last}"
    );
    assert_eq!(step["turns"], 6);
    assert!(
        out.stderr
            .contains("warning: `read_file` refused 3 times in a row: turn 6 is its last"),
        "{}",
        out.stderr
    );
    let transcript = record["transcript"].as_str().unwrap();
    let noted: Vec<Value> = transcript
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "repeats_refused")
        .collect();
    assert_eq!(noted.len(), 1, "{transcript}");
    assert_eq!(
        (&noted[0]["name"], &noted[0]["turn"], &noted[0]["refusals"]),
        (&json!("read_file"), &json!(6), &json!(3))
    );
}

/// Being sent to the last turn is a warning, not progress: CI's `--no-progress` still says it.
#[tokio::test(flavor = "multi_thread")]
async fn the_last_turn_warning_is_printed_without_progress() {
    let fake = repeating_model().await;
    let (out, _) = Test::new()
        .file(
            "w.toml",
            &workflow(&format!("{}/v1", fake.uri()), "max_turns = 30\n"),
        )
        .file("notes.txt", "hello\n")
        .env("OPENAI_API_KEY", KEY)
        .args(&["run", "w.toml", "--no-progress"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("warning: `read_file` refused 3 times in a row: turn 6 is its last"),
        "{}",
        out.stderr
    );
    // Progress itself stays off.
    assert!(!out.stderr.contains("started"), "{}", out.stderr);
}

/// The step's `output_schema` as TOML, and as the JSON Schema it stands for.
const VERDICT: &str = "output_schema = { type = \"object\", properties = { verdict = { type = \"string\", enum = [\"approve\", \"reject\"] } }, required = [\"verdict\"], additionalProperties = false }\n";

fn verdict_schema() -> Value {
    json!({"type": "object", "properties": {"verdict": {"type": "string", "enum": ["approve", "reject"]}},
        "required": ["verdict"], "additionalProperties": false})
}

/// A small model's answers: the schema itself first (what a 1.5B model does with a schema in
/// its system prompt), then whatever `then` gives for the request.
fn schema_model(
    then: impl Fn(&Value, usize) -> wiremock::ResponseTemplate + Send + Sync + 'static,
) -> impl Fn(&Value) -> wiremock::ResponseTemplate + Send + Sync + 'static {
    let seen = Arc::new(Mutex::new(0));
    move |body| {
        let n = {
            let mut seen = seen.lock().unwrap();
            *seen += 1;
            *seen
        };
        if n == 1 {
            return openai_text(&verdict_schema().to_string());
        }
        then(body, n)
    }
}

/// `output_schema` goes as `response_format` (a grammar on llama.cpp and vLLM) on a turn that
/// is answered in text: not on a turn whose tools may be called, but on the turn that asks for
/// a fixed answer; the answer is still checked against the schema.
#[tokio::test(flavor = "multi_thread")]
async fn output_schema_goes_as_response_format_on_a_turn_answered_in_text() {
    let fake = Fake::openai_fn(schema_model(|_, _| {
        openai_text("{\"verdict\": \"approve\"}")
    }))
    .await;
    let (out, record) = run(&format!("{}/v1", fake.uri()), VERDICT, &[], "json").await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(
        record["steps"]["s"]["output"],
        json!({"verdict": "approve"})
    );
    let bodies = fake.bodies().await;
    assert_eq!(bodies.len(), 2, "{}", out.transcript());
    // The first turn offers callable tools: no grammar that would forbid calling them.
    assert!(bodies[0].get("response_format").is_none(), "{}", bodies[0]);
    assert_eq!(
        bodies[1]["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": verdict_schema(), "strict": true}})
    );
}

/// A server that refuses `response_format` (400 naming it) gets the request again without it,
/// and no later request sends it; the step still ends with its checked answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_refuses_response_format_still_works() {
    let fake = Fake::openai_fn(schema_model(|body, n| {
        if body.get("response_format").is_some() {
            return wiremock::ResponseTemplate::new(400).set_body_json(json!({"error": {
                "message": "Unrecognized request argument supplied: response_format",
                "type": "invalid_request_error", "param": null, "code": null}}));
        }
        match n {
            // The fix turn, sent again without it: still not the answer.
            3 => openai_text("approve"),
            _ => openai_text("{\"verdict\": \"reject\"}"),
        }
    }))
    .await;
    let (out, record) = run(&format!("{}/v1", fake.uri()), VERDICT, &[], "json").await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(record["steps"]["s"]["output"], json!({"verdict": "reject"}));
    let sent: Vec<bool> = fake
        .bodies()
        .await
        .iter()
        .map(|b| b.get("response_format").is_some())
        .collect();
    // The first turn; the first fix, refused and sent again without; the second fix, without.
    assert_eq!(sent, [false, true, false, false], "{}", out.transcript());
}

/// Two steps refused `response_format` at once: each is sent again without it, though the
/// other learnt the refusal first (only one used to be, and the other step failed on the 400).
#[tokio::test(flavor = "multi_thread")]
async fn parallel_steps_refused_response_format_both_go_on() {
    let fake = Fake::openai_fn(|body| {
        if body.get("response_format").is_some() {
            // Held a moment so both refusals are in flight together; with no overlap the test
            // still passes, it only proves less.
            return wiremock::ResponseTemplate::new(400)
                .set_body_json(json!({"error": {
                    "message": "Unrecognized request argument supplied: response_format",
                    "type": "invalid_request_error", "param": null, "code": null}}))
                .set_delay(std::time::Duration::from_millis(500));
        }
        openai_text("{\"verdict\": \"reject\"}")
    })
    .await;
    let step = |id: &str| {
        format!(
            "[steps.{id}]\nagent = \"explore\"\ntools = []\nretries = 0\nprompt = \"Judge\"\n{VERDICT}"
        )
    };
    let text = format!(
        "name = \"local\"\n[providers.local]\nkind = \"openai\"\nbase_url = \"{}/v1\"\n[models]\ndefault = \"local/qwen2.5-coder-1.5b\"\n{}{}",
        fake.uri(),
        step("a"),
        step("b")
    );
    let (out, _) = Test::new()
        .file("w.toml", &text)
        .env("OPENAI_API_KEY", KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let record: Value = serde_json::from_str(&out.stdout).unwrap();
    for id in ["a", "b"] {
        assert_eq!(
            record["steps"][id]["output"],
            json!({"verdict": "reject"}),
            "{id}: {}",
            out.transcript()
        );
    }
}

/// A step that keeps calling tools gets, on its last allowed turn, no tool calls and a request
/// for its answer: it ends with one, recorded as having run out of turns.
#[tokio::test(flavor = "multi_thread")]
async fn the_last_turn_asks_for_the_answer_with_no_tools() {
    let fake = Fake::openai_fn(|body| {
        if body["tool_choice"] == "none" {
            openai_text("Partial: notes.txt says hello; the rest is unread.")
        } else {
            let n = body["messages"].as_array().unwrap().len();
            openai_tools(&[("c", "list_dir", json!({"path": format!("./{n}")}))])
        }
    })
    .await;
    let (out, record) = run(
        &format!("{}/v1", fake.uri()),
        "max_turns = 3\n",
        &[],
        "json",
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let step = &record["steps"]["s"];
    assert_eq!(step["status"], "succeeded");
    assert_eq!(step["ran_out_of_turns"], true);
    assert_eq!(step["turns"], 3);
    assert!(step["summary"].as_str().unwrap().starts_with("Partial:"));
    let bodies = fake.bodies().await;
    assert_eq!(bodies.len(), 3);
    assert!(bodies[..2].iter().all(|b| b.get("tool_choice").is_none()));
    // Still offered (the cached prefix holds them), none callable, and the agent is told.
    assert_eq!(bodies[2]["tool_choice"], "none");
    assert!(!bodies[2]["tools"].as_array().unwrap().is_empty());
    assert!(
        bodies[2]
            .to_string()
            .contains("This is your last turn (max_turns = 3)")
    );
    // The warning says what the request does: the tools stay, no call is allowed.
    assert!(
        out.stderr.contains(
            "warning: out of turns: turn 3 is its last (max_turns), so it allows no tool call (the tools stay offered, with `tool_choice: none`) and asks for the final answer"
        ),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("offers no tools"), "{}", out.stderr);
}

/// The ways OpenAI-compatible servers bend the stream, each taken where its meaning is clear:
/// `reasoning_content` (not the answer), a call with no id and its arguments as an object
/// (Ollama), `finish_reason: stop` alongside tool calls, usage only in the last chunk, and
/// arguments encoded twice.
#[tokio::test(flavor = "multi_thread")]
async fn the_quirks_of_openai_compatible_streams_are_understood() {
    let chunk = |delta: Value, finish: Value| json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    let mut last = chunk(json!({}), json!("stop"));
    last["usage"] = json!({"prompt_tokens": 70, "completion_tokens": 9});
    let ollama = Reply::Chunks(vec![
        chunk(
            json!({"role": "assistant", "content": "", "reasoning_content": "The notes first."}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"name": "read_file", "arguments": {"path": "notes.txt"}}}]}),
            Value::Null,
        ),
        last,
    ]);
    let encoded_twice = json!(json!({"path": "notes.txt", "limit": 1}).to_string()).to_string();
    let mut last = chunk(json!({}), json!("tool_calls"));
    last["usage"] = json!({"prompt_tokens": 90, "completion_tokens": 7});
    let twice = Reply::Chunks(vec![
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_2", "type": "function", "function": {"name": "read_file", "arguments": encoded_twice}}]}),
            Value::Null,
        ),
        last,
    ]);
    let (url, _seen) = raw_server(
        vec![ollama, twice, Reply::Text(vec!["It says hello.".into()])],
        Manner::Slow(Duration::ZERO),
    )
    .await;
    let (out, record) = run(&url, "", &[], "json").await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let step = &record["steps"]["s"];
    assert_eq!(step["summary"], "It says hello.");
    assert_eq!(
        (step["tool_calls"].as_u64(), step["turns"].as_u64()),
        (Some(2), Some(3)),
        "{step}"
    );
    // Usage from each last chunk: 70 + 90 + 50 in, 9 + 7 + 10 out.
    assert_eq!(
        (
            step["input_tokens"].as_u64(),
            step["output_tokens"].as_u64()
        ),
        (Some(210), Some(26)),
        "{step}"
    );
    assert!(
        !step["summary"]
            .as_str()
            .unwrap()
            .contains("The notes first.")
    );
    // Both calls read the file: their inputs were understood.
    let finished: Vec<Value> = record["transcript"]
        .as_str()
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "tool_finished")
        .collect();
    assert_eq!(finished.len(), 2);
    for event in &finished {
        assert_eq!(event["is_error"], false, "{event}");
        assert!(
            event["output"].as_str().unwrap().contains("hello"),
            "{event}"
        );
    }
}

/// A reply's tool calls are run up to a limit; the rest are answered with an error the model
/// can read, never held in memory all at once (3,000 reads of a large file in one reply).
#[tokio::test(flavor = "multi_thread")]
async fn tool_calls_past_the_limit_of_one_reply_are_answered_not_run() {
    let calls: Vec<(String, Value)> = (1..=70)
        .map(|i| (format!("c{i}"), json!({"path": "notes.txt", "offset": i})))
        .collect();
    let refs: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, input)| (id.as_str(), "read_file", input.clone()))
        .collect();
    let fake = Fake::openai(vec![openai_tools(&refs), openai_text("enough")]).await;
    let (out, record) = run(&format!("{}/v1", fake.uri()), "", &[], "json").await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(record["steps"]["s"]["summary"], "enough");
    let results = tool_results(&fake.bodies().await[1]);
    assert_eq!(results.len(), 70);
    assert!(
        results[..64].iter().all(|r| !r.contains("not run")),
        "{results:?}"
    );
    assert!(
        results[64..]
            .iter()
            .all(|r| r
                .contains("not run: a reply may make at most 64 tool calls, and this one made 70")),
        "{results:?}"
    );
}

/// Usage figures a hostile server reports add up to the largest count and stop there, said as
/// such, instead of wrapping around to a small number (or panicking).
#[tokio::test(flavor = "multi_thread")]
async fn impossible_usage_saturates_and_says_so() {
    let huge = u64::MAX - 10;
    let reply = |body: Value| ok(body);
    let fake = Fake::openai(vec![
        reply(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": huge, "completion_tokens": huge}
        })),
        reply(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": huge, "completion_tokens": huge}
        })),
    ])
    .await;
    let (out, record) = run(&format!("{}/v1", fake.uri()), "", &[], "json").await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let step = &record["steps"]["s"];
    assert_eq!(step["input_tokens"].as_u64(), Some(u64::MAX), "{step}");
    assert_eq!(step["output_tokens"].as_u64(), Some(u64::MAX), "{step}");
    assert!(
        out.stderr
            .contains("overflowed (a server reported impossible usage)"),
        "{}",
        out.stderr
    );
}
