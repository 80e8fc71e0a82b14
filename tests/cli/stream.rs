//! Streamed replies (docs/src/models.md) through the binary: the fake APIs answer with
//! server-sent events, in pieces, as the real ones do.

use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::fake::{Fake, anthropic_results};
use crate::support::Test;

const KEY: &str = "sk-test-key-0000";

fn sse(events: &[(&str, Value)]) -> ResponseTemplate {
    let mut body = String::new();
    for (event, data) in events {
        if !event.is_empty() {
            body.push_str(&format!("event: {event}\n"));
        }
        // A string is sent as it is (`[DONE]`); anything else as JSON.
        let text = data
            .as_str()
            .map_or_else(|| data.to_string(), str::to_owned);
        body.push_str(&format!("data: {text}\n\n"));
    }
    ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
}

fn anthropic_start(input_tokens: u64) -> (&'static str, Value) {
    (
        "message_start",
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": null, "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}),
    )
}

fn text_deltas(index: u64, parts: &[&str]) -> Vec<(&'static str, Value)> {
    let mut events = vec![(
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
    )];
    for part in parts {
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": part}}),
        ));
    }
    events.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    ));
    events
}

fn anthropic_end(stop: &str, output_tokens: u64) -> Vec<(&'static str, Value)> {
    vec![
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": output_tokens}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]
}

async fn run(workflow: &str, env: &[(&str, &str)]) -> (crate::support::Output, Value) {
    let mut test = Test::new()
        .file("w.toml", workflow)
        .file("notes.txt", "alpha\n");
    for (k, v) in env {
        test = test.env(k, v);
    }
    let (out, _test) = test
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    let run =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", out.transcript()));
    (out, run)
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_streams_assemble_tool_calls_and_text_and_survive_a_mid_stream_error() {
    let mut turn1 = vec![anthropic_start(100)];
    turn1.extend(text_deltas(0, &["Let me ", "read it."]));
    turn1.extend([
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"pa"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "th\": \"notes.txt\"}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
    ]);
    turn1.extend(anthropic_end("tool_use", 30));
    // The second turn breaks off with an overloaded error, then succeeds when asked again.
    let mut broken = vec![anthropic_start(150)];
    broken.push((
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ));
    broken.push((
        "content_block_delta",
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "PARTIAL "}}),
    ));
    broken.push((
        "error",
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ));
    let mut turn2 = vec![anthropic_start(150)];
    turn2.extend(text_deltas(0, &["The notes ", "say ", "alpha."]));
    turn2.extend(anthropic_end("end_turn", 12));
    let fake = Fake::anthropic(vec![sse(&turn1), sse(&broken), sse(&turn2)]).await;
    let workflow = "name = \"s\"\n[models]\ndefault = \"anthropic/m\"\n[steps.s]\nagent = \"explore\"\nretries = 2\nprompt = \"read notes\"\n";
    let (out, run) = run(
        workflow,
        &[
            ("ANTHROPIC_BASE_URL", &fake.uri()),
            ("ANTHROPIC_API_KEY", KEY),
        ],
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let step = &run["steps"]["s"];
    // Nothing of the broken reply is kept.
    assert_eq!(step["summary"], "The notes say alpha.");
    assert_eq!(step["turns"], 2);
    // Usage from message_start and message_delta, the retried attempt not counted.
    assert_eq!(
        (
            step["input_tokens"].as_u64(),
            step["output_tokens"].as_u64()
        ),
        (Some(250), Some(42))
    );
    let bodies = fake.bodies().await;
    assert_eq!(bodies.len(), 3);
    assert_eq!(bodies[0]["stream"], true);
    // The streamed tool input was whole: the file was read.
    let results = anthropic_results(&bodies[2]);
    assert_eq!(results[0].0, "t1");
    assert!(results[0].1.contains("alpha"), "{results:?}");
    assert!(!results[0].2);
    // The assistant turn sent back is the assembled one.
    assert_eq!(
        bodies[2]["messages"][1]["content"][0]["text"],
        "Let me read it."
    );
}

fn openai_chunk(delta: Value, finish: Option<&str>) -> (&'static str, Value) {
    (
        "",
        json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_streams_assemble_tool_calls_by_index_count_usage_and_survive_an_error() {
    let turn1 = sse(&[
        openai_chunk(json!({"role": "assistant", "content": ""}), None),
        openai_chunk(
            json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "read_file", "arguments": ""}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [{"index": 1, "id": "c2", "type": "function", "function": {"name": "list_dir", "arguments": "{\"pa"}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\": \"notes.txt\"}"}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [{"index": 1, "function": {"arguments": "th\": \".\"}"}}]}),
            None,
        ),
        openai_chunk(json!({}), Some("tool_calls")),
        (
            "",
            json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 15}}),
        ),
        ("", json!("[DONE]")),
    ]);
    let turn2 = sse(&[
        openai_chunk(json!({"content": "Two "}), None),
        openai_chunk(json!({"content": "files."}), None),
        openai_chunk(json!({}), Some("stop")),
        (
            "",
            json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 60, "completion_tokens": 3}}),
        ),
    ]);
    // The first attempt breaks off with an error chunk; the retry streams the whole turn.
    let broken = sse(&[
        openai_chunk(json!({"role": "assistant", "content": "PARTIAL"}), None),
        (
            "",
            json!({"error": {"type": "server_error", "message": "the model crashed"}}),
        ),
    ]);
    let fake = Fake::openai(vec![broken, turn1, turn2]).await;
    let workflow = format!(
        "name = \"s\"\n[providers.local]\nkind = \"openai\"\nbase_url = \"{}/v1\"\n[models]\ndefault = \"local/m\"\n[steps.s]\nagent = \"explore\"\nprompt = \"look\"\n",
        fake.uri()
    );
    let (out, run) = run(&workflow, &[]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let step = &run["steps"]["s"];
    assert_eq!(step["summary"], "Two files.");
    assert_eq!(
        (
            step["input_tokens"].as_u64(),
            step["output_tokens"].as_u64()
        ),
        (Some(100), Some(18))
    );
    assert_eq!(step["tool_calls"], 2);
    let bodies = fake.bodies().await;
    assert_eq!(bodies.len(), 3);
    assert_eq!(bodies[0]["stream"], true);
    assert_eq!(bodies[0]["stream_options"]["include_usage"], true);
    // The retry asked the same again.
    assert_eq!(bodies[0], bodies[1]);
    let messages = bodies[2]["messages"].as_array().unwrap();
    // Nothing of the broken attempt went into the conversation.
    assert!(!bodies[2].to_string().contains("PARTIAL"));
    let calls = &messages[2]["tool_calls"];
    assert_eq!(calls[0]["id"], "c1");
    assert_eq!(
        calls[0]["function"]["arguments"],
        "{\"path\":\"notes.txt\"}"
    );
    assert_eq!(calls[1]["function"]["name"], "list_dir");
    let results: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(results[0]["tool_call_id"], "c1");
    assert!(results[0]["content"].as_str().unwrap().contains("alpha"));
    assert_eq!(results[1]["tool_call_id"], "c2");
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .contains("notes.txt")
    );
}

/// A streamed tool call whose input gives a key twice is refused: runner would run it with one
/// value while a transcript reader might take the other.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_input_with_a_key_given_twice_is_refused() {
    let tool_start = (
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}}),
    );
    let delta = (
        "content_block_delta",
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"notes.txt\", \"path\": \"/etc/passwd\"}"}}),
    );
    let stop = (
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    );
    let mut events = vec![anthropic_start(10), tool_start, delta, stop];
    events.extend(anthropic_end("tool_use", 5));
    let fake = Fake::anthropic(vec![sse(&events)]).await;
    let workflow = "name = \"d\"\n[models]\ndefault = \"anthropic/m\"\n[steps.s]\nagent = \"explore\"\nretries = 0\nprompt = \"x\"\n";
    let (out, test) = Test::new()
        .file("w.toml", workflow)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    let error = run["steps"]["s"]["error"].as_str().unwrap();
    assert!(
        error.contains("a tool call's input gives `path` twice"),
        "{error}"
    );
    assert_eq!(run["steps"]["s"]["tool_calls"], 0);
    drop(test);
}
