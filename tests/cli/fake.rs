//! A fake model API on 127.0.0.1: wiremock serving a script of responses in order, for both the
//! Anthropic Messages API and OpenAI Chat Completions.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// Answers each request with the next response of the script.
struct Script(Mutex<VecDeque<ResponseTemplate>>);

impl Respond for Script {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        self.0.lock().unwrap().pop_front().unwrap_or_else(|| {
            ResponseTemplate::new(500).set_body_string("the test script has no more responses")
        })
    }
}

/// Answers by the step: the first user message (the step's prompt) picks a script by marker, so
/// steps running at the same time each get their own conversation.
struct Routed(Vec<(String, Mutex<VecDeque<ResponseTemplate>>)>);

impl Respond for Routed {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let first = &body["messages"][0];
        let prompt = first["content"][0]["text"]
            .as_str()
            .or(first["content"].as_str())
            .unwrap_or_default();
        // OpenAI puts the system prompt first.
        let prompt = if first["role"] == "system" {
            body["messages"][1]["content"].as_str().unwrap_or_default()
        } else {
            prompt
        };
        for (marker, script) in &self.0 {
            if prompt.contains(marker.as_str()) {
                return script.lock().unwrap().pop_front().unwrap_or_else(|| {
                    ResponseTemplate::new(500)
                        .set_body_string(format!("no more responses for {marker}"))
                });
            }
        }
        ResponseTemplate::new(500).set_body_string(format!("no script for prompt: {prompt}"))
    }
}

/// Answers with a function of the request body.
type Answer = Box<dyn Fn(&Value) -> ResponseTemplate + Send + Sync>;
struct ByBody(Answer);

impl Respond for ByBody {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        (self.0)(&body)
    }
}

pub struct Fake {
    pub server: MockServer,
}

impl Fake {
    pub async fn start(endpoint: &str, script: Vec<ResponseTemplate>) -> Self {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path(endpoint))
            .respond_with(Script(Mutex::new(script.into())))
            .mount(&server)
            .await;
        Self { server }
    }

    /// An Anthropic API whose answers depend on which step asks (see [`Routed`]).
    pub async fn anthropic_routed(routes: Vec<(&str, Vec<ResponseTemplate>)>) -> Self {
        Self::routed("/v1/messages", routes).await
    }

    /// An OpenAI-compatible API whose answers depend on which step asks (see [`Routed`]).
    pub async fn openai_routed(routes: Vec<(&str, Vec<ResponseTemplate>)>) -> Self {
        Self::routed("/v1/chat/completions", routes).await
    }

    /// An Anthropic API answering each request with what `answer` makes of its body.
    pub async fn anthropic_fn(
        answer: impl Fn(&Value) -> ResponseTemplate + Send + Sync + 'static,
    ) -> Self {
        Self::by_body("/v1/messages", Box::new(answer)).await
    }

    /// An OpenAI-compatible API answering each request with what `answer` makes of its body.
    pub async fn openai_fn(
        answer: impl Fn(&Value) -> ResponseTemplate + Send + Sync + 'static,
    ) -> Self {
        Self::by_body("/v1/chat/completions", Box::new(answer)).await
    }

    async fn by_body(endpoint: &str, answer: Answer) -> Self {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path(endpoint))
            .respond_with(ByBody(answer))
            .mount(&server)
            .await;
        Self { server }
    }

    async fn routed(endpoint: &str, routes: Vec<(&str, Vec<ResponseTemplate>)>) -> Self {
        let server = MockServer::start().await;
        let routes = routes
            .into_iter()
            .map(|(marker, script)| (marker.to_owned(), Mutex::new(script.into())))
            .collect();
        Mock::given(method("POST"))
            .and(path(endpoint))
            .respond_with(Routed(routes))
            .mount(&server)
            .await;
        Self { server }
    }

    /// How many requests carried `marker` in their first message.
    pub async fn count(&self, marker: &str) -> usize {
        self.bodies()
            .await
            .iter()
            .filter(|b| prompt_of(b).contains(marker))
            .count()
    }

    /// The first request whose first message (the step's prompt) contains `marker`.
    pub async fn body_for(&self, marker: &str) -> Value {
        self.bodies()
            .await
            .into_iter()
            .find(|b| prompt_of(b).contains(marker))
            .unwrap_or_else(|| panic!("no request for {marker}"))
    }

    pub async fn anthropic(script: Vec<ResponseTemplate>) -> Self {
        Self::start("/v1/messages", script).await
    }

    pub async fn openai(script: Vec<ResponseTemplate>) -> Self {
        Self::start("/v1/chat/completions", script).await
    }

    pub fn uri(&self) -> String {
        self.server.uri()
    }

    pub async fn requests(&self) -> Vec<Request> {
        self.server.received_requests().await.unwrap_or_default()
    }

    pub async fn bodies(&self) -> Vec<Value> {
        self.requests()
            .await
            .iter()
            .map(|r| serde_json::from_slice(&r.body).expect("request body is JSON"))
            .collect()
    }
}

/// A 400 the Anthropic API would send: not retried, so the step fails at once.
pub fn bad_request(message: &str) -> ResponseTemplate {
    ResponseTemplate::new(400).set_body_json(
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}}),
    )
}

pub fn ok(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(body)
}

/// An Anthropic turn that calls one tool.
pub fn anthropic_tool(id: &str, name: &str, input: Value) -> ResponseTemplate {
    ok(json!({
        "id": "msg", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": "Let me look."}, {"type": "tool_use", "id": id, "name": name, "input": input}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 50, "cache_read_input_tokens": 0}
    }))
}

/// An Anthropic final answer.
pub fn anthropic_text(text: &str) -> ResponseTemplate {
    ok(json!({
        "id": "msg", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 150}
    }))
}

/// An Anthropic turn that calls several tools at once.
pub fn anthropic_tools(calls: &[(&str, &str, Value)]) -> ResponseTemplate {
    let content: Vec<Value> = calls
        .iter()
        .map(
            |(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input}),
        )
        .collect();
    ok(json!({
        "id": "msg", "type": "message", "role": "assistant", "model": "m",
        "content": content,
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 100, "output_tokens": 20}
    }))
}

/// An OpenAI turn that calls several tools at once.
pub fn openai_tools(calls: &[(&str, &str, Value)]) -> ResponseTemplate {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, input)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": input.to_string()}})
        })
        .collect();
    ok(json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": calls}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20}
    }))
}

pub fn openai_text(text: &str) -> ResponseTemplate {
    ok(json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 12}
    }))
}

/// The first message's text of an Anthropic request, after the environment block: the step's
/// rendered prompt.
pub fn prompt_of(body: &Value) -> String {
    let first = body["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    match first.split_once("</environment>\n\n") {
        Some((_, prompt)) => prompt.to_owned(),
        None => first.to_owned(),
    }
}

/// The tool results a request carries back (Anthropic), by tool_use_id.
pub fn anthropic_results(body: &Value) -> Vec<(String, String, bool)> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| {
            (
                b["tool_use_id"].as_str().unwrap_or_default().to_owned(),
                b["content"].as_str().unwrap_or_default().to_owned(),
                b["is_error"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

/// Tells a channel about each request, then answers after `delay` (a request that never ends,
/// for tests that interrupt or kill runner while it waits: the send is their readiness signal).
pub struct Notify {
    pub sender: Mutex<std::sync::mpsc::Sender<()>>,
    pub delay: std::time::Duration,
}

impl Respond for Notify {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let _ = self.sender.lock().unwrap().send(());
        anthropic_text("too late").set_delay(self.delay)
    }
}

impl Fake {
    /// An Anthropic API whose every request is announced on the returned channel and answered
    /// only after `delay`.
    pub async fn anthropic_hanging(
        delay: std::time::Duration,
    ) -> (Self, std::sync::mpsc::Receiver<()>) {
        let (sender, receiver) = std::sync::mpsc::channel();
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/messages"))
            .respond_with(Notify {
                sender: Mutex::new(sender),
                delay,
            })
            .mount(&server)
            .await;
        (Self { server }, receiver)
    }
}

/// A server on 127.0.0.1 that answers every connection with a 200 of `content_type` whose
/// chunked body is `opening` and then spaces that never end, until the client goes away.
/// Returns its base URL.
pub fn endless_body_server(content_type: &'static str, opening: &'static str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut request = [0u8; 65536];
                let _ = stream.read(&mut request);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{opening}\r\n",
                    opening.len()
                );
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let chunk = vec![b' '; 1 << 20];
                let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                framed.extend_from_slice(&chunk);
                framed.extend_from_slice(b"\r\n");
                while stream.write_all(&framed).is_ok() {}
            });
        }
    });
    url
}

/// A stdio MCP server in Python that speaks just enough JSON-RPC: `initialize`, `tools/list`
/// with one tool, `tools/call` answering with the text the Python expression `answer` makes.
/// `prelude` runs before it reads, `after` once its input ends.
pub fn python_mcp_server(tool: &str, answer: &str, prelude: &str, after: &str) -> String {
    format!(
        r#"
import json, os, subprocess, sys, time
{prelude}
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {{"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {{"tools": {{}}}},
                  "serverInfo": {{"name": "{tool}", "version": "1"}}}}
    elif method == "tools/list":
        result = {{"tools": [{{"name": "{tool}", "inputSchema": {{"type": "object"}}}}]}}
    elif method == "tools/call":
        result = {{"content": [{{"type": "text", "text": {answer}}}]}}
    else:
        result = {{}}
    sys.stdout.write(json.dumps({{"jsonrpc": "2.0", "id": msg["id"], "result": result}}) + "\n")
    sys.stdout.flush()
{after}
"#
    )
}
