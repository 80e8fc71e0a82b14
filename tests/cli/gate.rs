//! The sibling gate (docs/src/delegation.md, "Clean context"): sibling subagents wait
//! for the first one's reply to begin only when their shared prefix reaches the shortest one the
//! provider caches (1,024 tokens for most Claude models); below it they all start at once.
//!
//! The server is a raw HTTP/1.1 one on 127.0.0.1 speaking Anthropic's streamed Messages API,
//! so it can hold a request open: each subagent's request is announced to the test and held
//! until the test releases them all.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::support::Test;

/// How long the test waits for the three subagents' requests before it fails: a hang guard,
/// and below the 30 s that the gate lets a sibling wait at most, so a gate that holds small
/// siblings fails here instead of passing late.
const HANG_GUARD: Duration = Duration::from_secs(20);

/// What the server saw of each subagent request: its number, and whether a subagent's reply
/// had begun when it arrived.
type Arrivals = Arc<Mutex<Vec<(usize, bool)>>>;

struct Server {
    url: String,
    arrivals: Arrivals,
    announced: mpsc::UnboundedReceiver<usize>,
    release: watch::Sender<bool>,
}

/// Reads one request (head and body) from `socket`; `None` once it closes.
async fn read_body(socket: &mut tokio::net::TcpStream) -> Option<Value> {
    let mut got = Vec::new();
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
                return serde_json::from_slice(&got[end + 4..end + 4 + length]).ok();
            }
        }
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// A reply's events as Anthropic streams them: the opening (`message_start`), then the rest.
fn sse(content: &[Value], stop: &str) -> (String, String) {
    let event = |kind: &str, data: Value| format!("event: {kind}\ndata: {data}\n\n");
    let opening = event(
        "message_start",
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant",
            "model": "claude-test", "content": [], "stop_reason": null,
            "usage": {"input_tokens": 100, "output_tokens": 1}}}),
    );
    let mut rest = String::new();
    for (i, block) in content.iter().enumerate() {
        if block["type"] == "text" {
            rest += &event(
                "content_block_start",
                json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}),
            );
            rest += &event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}}),
            );
        } else {
            rest += &event(
                "content_block_start",
                json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}),
            );
            rest += &event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": block["input"].to_string()}}),
            );
        }
        rest += &event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        );
    }
    rest += &event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 20}}),
    );
    rest += &event("message_stop", json!({"type": "message_stop"}));
    (opening, rest)
}

fn chunk(text: &str) -> String {
    format!("{:x}\r\n{text}\r\n", text.len())
}

/// The lead calls `task` three times at once with `agent`; each subagent's request is announced
/// and held until the test releases them. With `open_first`, the first subagent's reply begins
/// (`message_start`) as soon as it arrives, and only its rest waits for the release.
async fn serve(agent: &'static str, open_first: bool) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let arrivals: Arrivals = Arc::default();
    let (announce, announced) = mpsc::unbounded_channel();
    let (release, released) = watch::channel(false);
    let began = Arc::new(Mutex::new(false));
    let record = arrivals.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (record, announce, mut released, began) = (
                record.clone(),
                announce.clone(),
                released.clone(),
                began.clone(),
            );
            tokio::spawn(async move {
                while let Some(body) = read_body(&mut socket).await {
                    let first = body["messages"][0].to_string();
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n";
                    let (opening, rest) = if let Some(at) = first.find("MARK-sub-") {
                        let n: usize = first[at + 9..at + 10].parse().unwrap();
                        let opens = {
                            let mut began = began.lock().unwrap();
                            let mut arrivals = record.lock().unwrap();
                            arrivals.push((n, *began));
                            let opens = open_first && arrivals.len() == 1;
                            *began |= opens;
                            opens
                        };
                        let (opening, rest) = sse(
                            &[json!({"type": "text", "text": format!("part {n} done")})],
                            "end_turn",
                        );
                        let _ = announce.send(n);
                        if opens {
                            let _ = socket.write_all(head.as_bytes()).await;
                            let _ = socket.write_all(chunk(&opening).as_bytes()).await;
                        }
                        let _ = released.wait_for(|go| *go).await;
                        if opens {
                            (String::new(), rest)
                        } else {
                            (head.to_owned() + &chunk(&opening), rest)
                        }
                    } else if body["messages"].as_array().map_or(0, Vec::len) == 1 {
                        let calls: Vec<Value> = (0..3)
                            .map(|n| json!({"type": "tool_use", "id": format!("t{n}"), "name": "task",
                                "input": {"description": format!("part {n}"), "prompt": format!("MARK-sub-{n}: do part {n}"), "subagent_type": agent}}))
                            .collect();
                        let (opening, rest) = sse(&calls, "tool_use");
                        (head.to_owned() + &chunk(&opening), rest)
                    } else {
                        let (opening, rest) = sse(
                            &[json!({"type": "text", "text": "all parts done"})],
                            "end_turn",
                        );
                        (head.to_owned() + &chunk(&opening), rest)
                    };
                    let out = format!("{opening}{}0\r\n\r\n", chunk(&rest));
                    if socket.write_all(out.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Server {
        url,
        arrivals,
        announced,
        release,
    }
}

/// Runs the lead (three `task` calls of `agent`, whose system prompt is `prompt`) against
/// `server`, releasing the server once all three subagents' requests have arrived.
async fn run(mut server: Server, agent: &str, prompt: &str) -> Vec<(usize, bool)> {
    let workflow = format!(
        "name = \"t\"\n[models]\ndefault = \"anthropic/claude-sonnet-4-5\"\n[steps.lead]\nagent = \"code\"\nsubagents = [\"{agent}\"]\nprompt = \"MARK-lead: split the work three ways.\"\n"
    );
    let test = Test::new()
        .file("workflows/w.toml", &workflow)
        .file(
            &format!("agents/{agent}.md"),
            &format!(
                "---\nname: {agent}\ndescription: Does one part\ntools: Read\n---\n{prompt}\n"
            ),
        )
        .anthropic_api(&server.url, "sk-test")
        .args(&["run", "workflows/w.toml", "--format", "json"]);
    let running = tokio::spawn(test.run_async());
    for _ in 0..3 {
        let announced = tokio::time::timeout(HANG_GUARD, server.announced.recv()).await;
        assert!(
            matches!(announced, Ok(Some(_))),
            "the server saw {:?} of the three subagents' requests, and answered none",
            server.arrivals.lock().unwrap()
        );
    }
    server.release.send_replace(true);
    let (out, _test) = running.await.unwrap();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let record: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(record["steps"]["lead"]["summary"], "all parts done");
    server.arrivals.lock().unwrap().clone()
}

/// Three `task` calls of a small agent (a prefix far under 1,024 tokens) all start at once:
/// the server sees the three requests before it answers any.
#[tokio::test(flavor = "multi_thread")]
async fn small_siblings_start_at_once() {
    let server = serve("small", false).await;
    let arrivals = run(server, "small", "Do your part.").await;
    assert_eq!(arrivals.len(), 3);
    assert!(arrivals.iter().all(|(_, began)| !began), "{arrivals:?}");
}

/// A prefix over the minimum still waits: the second and third requests arrive only after the
/// first one's reply has begun, when they can read what it cached.
#[tokio::test(flavor = "multi_thread")]
async fn large_siblings_wait_for_the_first_reply_to_begin() {
    let rules = "Follow the project's rules: name files plainly, test what you change, keep commits small. ".repeat(80);
    let server = serve("large", true).await;
    let arrivals = run(server, "large", &rules).await;
    assert_eq!(arrivals.len(), 3);
    assert!(!arrivals[0].1, "{arrivals:?}");
    assert!(
        arrivals[1..].iter().all(|(_, began)| *began),
        "a sibling went before the first reply began: {arrivals:?}"
    );
}
