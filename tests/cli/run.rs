//! `runner run` against a fake model API: the agent loop, both providers, tools, retries, limits,
//! run.json and transcripts.

use std::time::Instant;

use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::fake::{Fake, anthropic_results, anthropic_text, anthropic_tool, ok, openai_text};
use crate::support::{Output, Test};

const KEY: &str = "sk-test-secret-4f1c9a";

fn one_step(agent: &str, prompt: &str, extra: &str) -> String {
    format!(
        "name = \"t\"\n[models]\ndefault = \"anthropic/claude-test\"\n\n[steps.s]\nagent = \"{agent}\"\nprompt = \"{prompt}\"\n{extra}"
    )
}

fn project(workflow: &str) -> Test {
    Test::new()
        .file("w.toml", workflow)
        .file("src/auth.rs", "fn login(user: &str) -> bool { true }\n")
        .file("README.md", "demo\n")
}

async fn run_anthropic(test: Test, fake: &Fake) -> (Output, Test) {
    test.anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await
}

fn run_json(out: &Output) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("run.json on stdout ({e}):\n{}", out.transcript()))
}

fn transcript(test: &Test, run: &Value, step: &str) -> String {
    let id = run["run_id"].as_str().unwrap();
    std::fs::read_to_string(
        test.path()
            .join(format!(".runner/runs/{id}/steps/{step}/transcript.jsonl")),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_multi_turn_with_a_tool() {
    let fake = Fake::anthropic(vec![
        anthropic_tool("tu_1", "grep", json!({"pattern": "fn login"})),
        anthropic_text("Login is in src/auth.rs:1."),
    ])
    .await;
    let (out, test) = run_anthropic(project(&one_step("explore", "Find login", "")), &fake).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = run_json(&out);
    let step = &run["steps"]["s"];
    assert_eq!(run["status"], "succeeded");
    assert_eq!(step["status"], "succeeded");
    assert_eq!(step["summary"], "Login is in src/auth.rs:1.");
    assert_eq!(step["turns"], 2);
    assert_eq!(step["tool_calls"], 1);
    assert_eq!(step["input_tokens"], 110);
    assert_eq!(step["output_tokens"], 50);
    assert_eq!(step["cache_read_input_tokens"], 150);
    assert_eq!(step["model"], "anthropic/claude-test");

    let requests = fake.requests().await;
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.headers.get("x-api-key").unwrap(), KEY);
        assert_eq!(r.headers.get("anthropic-version").unwrap(), "2023-06-01");
    }
    let bodies = fake.bodies().await;
    assert_eq!(bodies[0]["model"], "claude-test");
    assert!(
        bodies[0]["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("read-only")
    );
    // Where the step runs is in its first message, not in the cacheable system prompt.
    assert!(
        !bodies[0]["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Working directory:")
    );
    assert!(
        bodies[0]["messages"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("<environment>\nWorking directory:")
    );
    let tools: Vec<&str> = bodies[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["bash", "glob", "grep", "list_dir", "read_file"]);
    // Cache breakpoints on the stable prefix and on the newest message, every turn.
    for body in &bodies {
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        let last = body["messages"].as_array().unwrap().last().unwrap();
        assert_eq!(
            last["content"].as_array().unwrap().last().unwrap()["cache_control"]["type"],
            "ephemeral"
        );
    }
    // The grep really ran over the working directory and its result went back.
    let results = anthropic_results(&bodies[1]);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].0, "tu_1");
    assert!(
        results[0].1.contains("src/auth.rs:1:fn login"),
        "{:?}",
        results[0]
    );
    assert!(!results[0].2);

    let log = transcript(&test, &run, "s");
    let events: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "step_started",
            "session_started",
            "turn_started",
            "turn_finished",
            "tool_started",
            "tool_finished",
            "turn_started",
            "turn_finished",
            "step_finished"
        ]
    );
    // Each request logs what it adds, not the whole conversation again: the second one carries
    // the reply and the tool result, not the prompt.
    let second = events
        .iter()
        .filter(|e| e["event"] == "turn_started")
        .nth(1)
        .unwrap();
    let added = second["messages"].to_string();
    assert!(
        added.contains("tool_result") && !added.contains("Find login"),
        "{added}"
    );
    assert_eq!(second["digest"].as_str().unwrap().len(), 64);
    // The tool's output is written once: the request after it points at `tool_finished`.
    let result = &second["messages"][1]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["content_in"], "tool_finished");
    assert!(result.get("content").is_none(), "{result}");
    // ... and the events still rebuild every request whole: its digest says so.
    let run_dir = test
        .path()
        .join(".runner/runs")
        .join(run["run_id"].as_str().unwrap());
    assert_eq!(rebuilt_digests(&events, &run_dir), 2);
    // ... and each digest is of the very bytes the server received, sent with their length.
    let sent: Vec<String> = requests.iter().map(|r| sha256(&r.body)).collect();
    let logged: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "turn_started")
        .map(|e| e["digest"].as_str().unwrap())
        .collect();
    assert_eq!(sent, logged);
    for r in &requests {
        assert_eq!(
            r.headers.get("content-length").unwrap().to_str().unwrap(),
            r.body.len().to_string()
        );
    }
    assert!(!log.contains(KEY), "the API key leaked into the transcript");
    assert!(!out.stdout.contains(KEY) && !out.stderr.contains(KEY));
    assert!(
        out.stderr.contains("[explore] s done (1 tool,"),
        "{}",
        out.stderr
    );
}

/// A model may give two tool calls one id: each result is still written so that the events
/// rebuild the request (only the result matching the id's last output points at it).
#[tokio::test(flavor = "multi_thread")]
async fn tool_calls_sharing_an_id_still_rebuild_their_request() {
    let fake = Fake::anthropic(vec![
        crate::fake::anthropic_tools(&[
            ("dup", "read_file", json!({"path": "src/auth.rs"})),
            ("dup", "read_file", json!({"path": "README.md"})),
        ]),
        anthropic_text("done"),
    ])
    .await;
    let (out, test) = run_anthropic(project(&one_step("explore", "Read", "")), &fake).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = run_json(&out);
    let events: Vec<Value> = transcript(&test, &run, "s")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let second = events
        .iter()
        .filter(|e| e["event"] == "turn_started")
        .nth(1)
        .unwrap();
    let results = second["messages"][1]["content"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    // Whichever finished last is the id's output; the other is written where it is.
    let pointed = results
        .iter()
        .filter(|r| r["content_in"] == "tool_finished")
        .count();
    let inline = results.iter().filter(|r| r["content"].is_string()).count();
    assert_eq!((pointed, inline), (1, 1), "{results:?}");
    let run_dir = test
        .path()
        .join(".runner/runs")
        .join(run["run_id"].as_str().unwrap());
    assert_eq!(rebuilt_digests(&events, &run_dir), 2);
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Rebuilds each request of a transcript from its events (tool results put back from the
/// `tool_finished` events they point at), writes it as the API's body, checks that against the
/// request's digest, and returns how many it checked.
fn rebuilt_digests(events: &[Value], run_dir: &std::path::Path) -> usize {
    let started = events
        .iter()
        .find(|e| e["event"] == "session_started")
        .unwrap();
    // The system prompt and tool schemas, written once for the run.
    let shared = run_dir.join(started["session_in"].as_str().unwrap());
    let session: Value = serde_json::from_str(&std::fs::read_to_string(shared).unwrap()).unwrap();
    assert!(started.get("system").is_none() && started.get("tools").is_none());
    let outputs: std::collections::BTreeMap<&str, &Value> = events
        .iter()
        .filter(|e| e["event"] == "tool_finished")
        .map(|e| (e["id"].as_str().unwrap(), &e["output"]))
        .collect();
    let mut messages: Vec<Value> = Vec::new();
    let mut checked = 0;
    for turn in events.iter().filter(|e| e["event"] == "turn_started") {
        for message in turn["messages"].as_array().unwrap() {
            let mut message = message.clone();
            for block in message["content"].as_array_mut().unwrap() {
                if block["content_in"] == "tool_finished" {
                    let id = block["tool_use_id"].as_str().unwrap().to_owned();
                    let map = block.as_object_mut().unwrap();
                    map.remove("content_in");
                    map.insert("content".into(), outputs[id.as_str()].clone());
                }
            }
            messages.push(message);
        }
        let request: runner::provider::message::ChatRequest = serde_json::from_value(json!({
            "model": started["model"],
            "system": session["system"],
            "messages": messages,
            "tools": session["tools"],
            "max_tokens": started["max_tokens"],
        }))
        .unwrap();
        let body = runner::provider::Body::of(runner::provider::Wire::Anthropic, &request);
        let digest = sha256(&body.to_vec());
        assert_eq!(body.digest(), digest);
        assert_eq!(
            turn["digest"].as_str().unwrap(),
            digest,
            "turn {}",
            turn["turn"]
        );
        checked += 1;
    }
    checked
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_compatible_quirks_are_accepted() {
    let fake = Fake::openai(vec![
        // No id, arguments as an object, finish_reason "stop" although tools are called.
        ok(json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
            {"type": "function", "function": {"name": "read_file", "arguments": {"path": "src/auth.rs"}}}
        ]}, "finish_reason": "stop"}]})),
        openai_text("It returns true for everyone."),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n[providers.local]\nkind = \"openai\"\nbase_url = \"{}/v1\"\napi_key_env = \"LOCAL_KEY\"\n[models]\ndefault = \"local/qwen\"\n[steps.s]\nagent = \"plan\"\nprompt = \"Review auth\"\n",
        fake.uri()
    );
    let (out, _test) = project(&workflow)
        .env("LOCAL_KEY", KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = run_json(&out);
    assert_eq!(
        run["steps"]["s"]["summary"],
        "It returns true for everyone."
    );
    let requests = fake.requests().await;
    assert_eq!(
        requests[0].headers.get("authorization").unwrap(),
        &format!("Bearer {KEY}")
    );
    let second: Value = serde_json::from_slice(&requests[1].body).unwrap();
    let messages = second["messages"].as_array().unwrap();
    let call_id = messages[2]["tool_calls"][0]["id"].as_str().unwrap();
    assert!(!call_id.is_empty());
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(messages[3]["tool_call_id"], call_id);
    assert!(
        messages[3]["content"]
            .as_str()
            .unwrap()
            .contains("fn login")
    );
    assert_eq!(second["tools"][0]["type"], "function");
}

#[tokio::test(flavor = "multi_thread")]
async fn ollama_needs_no_key() {
    let fake = Fake::openai(vec![openai_text("hello from llama")]).await;
    let workflow = "name = \"t\"\n[models]\ndefault = \"ollama/llama3.2\"\n[steps.s]\nagent = \"explore\"\nprompt = \"hi\"\n";
    let (out, _) = project(workflow)
        .env("OLLAMA_HOST", &fake.uri())
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(run_json(&out)["steps"]["s"]["summary"], "hello from llama");
    let requests = fake.requests().await;
    assert!(requests[0].headers.get("authorization").is_none());
    let body: Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(body["model"], "llama3.2");
}

#[tokio::test(flavor = "multi_thread")]
async fn denied_tools_and_path_escapes_are_error_results() {
    let fake = Fake::anthropic(vec![
        anthropic_tool(
            "t1",
            "write_file",
            json!({"path": "pwned.txt", "content": "x"}),
        ),
        anthropic_tool("t2", "read_file", json!({"path": "../secret.txt"})),
        anthropic_tool("t3", "read_file", json!({"path": "link/secret.txt"})),
        anthropic_tool("t4", "list_dir", json!({"path": "/etc"})),
        anthropic_text("done"),
    ])
    .await;
    let outer = tempfile::tempdir().unwrap();
    std::fs::write(outer.path().join("secret.txt"), "TOP SECRET").unwrap();
    let test = project(&one_step("explore", "poke", ""));
    std::os::unix::fs::symlink(outer.path(), test.path().join("link")).unwrap();
    let (out, test) = run_anthropic(test, &fake).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(!test.path().join("pwned.txt").exists());
    let bodies = fake.bodies().await;
    let results = anthropic_results(bodies.last().unwrap());
    assert_eq!(results.len(), 4);
    assert_eq!(results[0].1, "`write_file` is not available to this step");
    for (id, text, is_error) in &results {
        assert!(is_error, "{id} should be an error: {text}");
        assert!(!text.contains("TOP SECRET"));
    }
    assert!(results[1].1.contains("outside the working directory"));
    assert!(results[2].1.contains("outside the working directory"));
    assert!(results[3].1.contains("outside the working directory"));
}

#[tokio::test(flavor = "multi_thread")]
async fn bash_sees_no_provider_keys() {
    let fake = Fake::anthropic(vec![
        anthropic_tool("t1", "bash", json!({"command": "env; echo marker"})),
        anthropic_text("ok"),
    ])
    .await;
    let (out, _) = run_anthropic(
        project(&one_step("code", "look", ""))
            .env("OTHER_API_KEY", "sk-other-7d2e")
            .env("KEEP_ME", "visible"),
        &fake,
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    let results = anthropic_results(&bodies[1]);
    let env = &results[0].1;
    // A clean environment: what programs need, not whatever runner was given.
    assert!(env.contains("marker") && env.contains("PATH="), "{env}");
    assert!(!env.contains("KEEP_ME"), "{env}");
    assert!(!env.contains(KEY) && !env.contains("ANTHROPIC_API_KEY"));
    assert!(!env.contains("sk-other-7d2e"));
}

#[tokio::test(flavor = "multi_thread")]
async fn retries_overloaded_and_rate_limited_requests() {
    let fake = Fake::anthropic(vec![
        ResponseTemplate::new(529).set_body_json(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
        ResponseTemplate::new(429)
            .insert_header("retry-after-ms", "300")
            .set_body_json(json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})),
        anthropic_text("finally"),
    ])
    .await;
    let started = Instant::now();
    let (out, test) = run_anthropic(project(&one_step("explore", "hi", "")), &fake).await;
    let elapsed = started.elapsed();
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(fake.requests().await.len(), 3);
    let run = run_json(&out);
    assert_eq!(run["steps"]["s"]["summary"], "finally");
    // The server's retry-after-ms was waited, not the default backoff.
    let log = transcript(&test, &run, "s");
    let retries: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "retrying")
        .collect();
    assert_eq!(retries.len(), 2);
    assert!(retries[0]["error"].as_str().unwrap().contains("529"));
    assert_eq!(retries[1]["delay_ms"], 300);
    assert!(
        elapsed.as_millis() >= 300,
        "the retry-after wait was not honoured"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_request_fails_at_once_with_the_api_message() {
    let fake = Fake::anthropic(vec![ResponseTemplate::new(400).set_body_json(
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: too large"}}),
    )])
    .await;
    let (out, _) = run_anthropic(project(&one_step("explore", "hi", "")), &fake).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    assert_eq!(fake.requests().await.len(), 1);
    let run = run_json(&out);
    assert_eq!(run["status"], "failed");
    let error = run["steps"]["s"]["error"].as_str().unwrap();
    assert!(
        error.contains("400") && error.contains("max_tokens: too large"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_garbage_body_is_a_clear_step_error() {
    let fake = Fake::anthropic(vec![
        ResponseTemplate::new(200).set_body_string("<html>proxy error</html>"),
    ])
    .await;
    let (out, _) = run_anthropic(project(&one_step("explore", "hi", "")), &fake).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let error = run_json(&out)["steps"]["s"]["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        error.contains("not JSON") && error.contains("proxy error"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn max_turns_ends_the_step() {
    let fake = Fake::anthropic(vec![
        anthropic_tool("t1", "list_dir", json!({})),
        anthropic_tool("t2", "list_dir", json!({})),
        anthropic_tool("t3", "list_dir", json!({})),
    ])
    .await;
    let (out, _) = run_anthropic(
        project(&one_step("explore", "loop", "max_turns = 2")),
        &fake,
    )
    .await;
    assert_eq!(out.status, 1);
    assert_eq!(fake.requests().await.len(), 2);
    let step = &run_json(&out)["steps"]["s"];
    assert_eq!(step["status"], "failed");
    assert_eq!(step["turns"], 2);
    // The last turn asked for the answer with no tool calls; this model called one anyway.
    assert_eq!(
        step["error"],
        "reached max_turns (2): asked for its final answer on its last turn, with no tools, it called tools again"
    );
    let bodies = fake.bodies().await;
    assert_eq!(bodies[1]["tool_choice"]["type"], "none");
    assert!(bodies[0].get("tool_choice").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_key_stops_before_any_request() {
    let fake = Fake::anthropic(vec![anthropic_text("never")]).await;
    let (out, test) = project(&one_step("explore", "hi", ""))
        .env("ANTHROPIC_BASE_URL", &fake.uri())
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("ANTHROPIC_API_KEY is not set; step `s` needs it"),
        "{}",
        out.stderr
    );
    assert!(fake.requests().await.is_empty());
    assert!(!test.path().join(".runner").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn summaries_flow_to_dependents_literally() {
    let fake = Fake::anthropic(vec![
        anthropic_text("Found {{ inputs.x }} in auth.rs"),
        anthropic_text("Plan ready"),
    ])
    .await;
    let workflow = "name = \"t\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.a]\nagent = \"explore\"\nprompt = \"find\"\n[steps.b]\nagent = \"plan\"\nneeds = [\"a\"]\nprompt = \"Given: {{ steps.a.summary }} ({{ steps.a.status }})\"\n";
    let (out, _) = run_anthropic(project(workflow), &fake).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    assert_eq!(
        crate::fake::prompt_of(&bodies[1]),
        "Given: Found {{ inputs.x }} in auth.rs (succeeded)"
    );
    let run = run_json(&out);
    assert_eq!(run["steps"]["b"]["summary"], "Plan ready");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_step_skips_its_dependents() {
    let fake = Fake::anthropic(vec![ResponseTemplate::new(401).set_body_json(
        json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
    )])
    .await;
    let workflow = "name = \"t\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.a]\nagent = \"explore\"\nprompt = \"find\"\n[steps.b]\nagent = \"plan\"\nneeds = [\"a\"]\nprompt = \"{{ steps.a.summary }}\"\n";
    let (out, _) = run_anthropic(project(workflow), &fake).await;
    assert_eq!(out.status, 1);
    let run = run_json(&out);
    assert_eq!(run["steps"]["a"]["status"], "failed");
    assert_eq!(run["steps"]["b"]["status"], "skipped");
    assert_eq!(fake.requests().await.len(), 1);
}

/// A reply the server paused (`pause_turn`) is no final answer: the conversation goes back as
/// it stands and the step ends with the answer that follows.
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_turn_is_sent_back_and_goes_on() {
    let paused = ok(json!({
        "id": "msg", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": "Still searching"}],
        "stop_reason": "pause_turn",
        "usage": {"input_tokens": 10, "output_tokens": 5}
    }));
    let fake = Fake::anthropic(vec![paused, anthropic_text("Found it.")]).await;
    let (out, _test) = run_anthropic(project(&one_step("explore", "find", "")), &fake).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = run_json(&out);
    assert_eq!(run["steps"]["s"]["summary"], "Found it.");
    assert_eq!(run["steps"]["s"]["turns"], 2);
    let requests = fake.requests().await;
    assert_eq!(requests.len(), 2);
    // The paused reply's text went back to the model as its own turn.
    let second: Value = serde_json::from_slice(&requests[1].body).unwrap();
    assert_eq!(
        second["messages"][1]["content"][0]["text"],
        "Still searching"
    );
}
