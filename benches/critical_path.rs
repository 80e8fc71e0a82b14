//! Critical path first (docs/src/performance.md "Critical path first").
//!
//! A chain of 4 short steps (100 ms each) and 6 independent steps (five of 200 ms, one of
//! 1,500 ms, declared last) under `max_parallel = 2`, through the release binary against a fake
//! model API that answers each step after its chosen time. The best order starts the long step
//! at once and runs the chain and the short steps beside it: 1.5 s. Each case runs in a fresh
//! state directory twice: the first run has no history (the order is by step count), the second
//! has the first's durations. Both id orders: the chain's ids sorting first (`a1`..`a4`) and
//! last (`z1`..`z4`); the file declares the independent steps first either way.
//!
//! The makespan is the run's `duration_ms` in `run.json` (runner's own clock, from the first
//! step's start to the last's end: process start is not the scheduler's), median of 3.

mod common;

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const CHAIN_MS: u64 = 100;
const SHORT_MS: u64 = 200;
const LONG_MS: u64 = 1_500;
/// The best order's makespan: the long step, with the chain and the short steps beside it.
const BEST_MS: u64 = LONG_MS;
const REPEATS: usize = 3;

/// Answers each step after the time its prompt names (`takes N ms`).
struct Timed;

impl Respond for Timed {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let prompt = body["messages"][0]["content"][0]["text"]
            .as_str()
            .or(body["messages"][0]["content"].as_str())
            .unwrap_or_default()
            .to_owned();
        let ms = prompt
            .split("takes ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        ResponseTemplate::new(200)
            .set_body_json(json!({
                "content": [{"type": "text", "text": "ok"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 2}
            }))
            .set_delay(Duration::from_millis(ms))
    }
}

fn workflow(chain: &str) -> String {
    let mut text = String::from(
        "name = \"chain\"\nmax_parallel = 2\n[models]\ndefault = \"anthropic/bench\"\n",
    );
    let step = |text: &mut String, id: &str, ms: u64, needs: Option<String>| {
        text.push_str(&format!(
            "[steps.{id}]\nagent = \"explore\"\nprompt = \"{id} takes {ms} ms\"\n"
        ));
        if let Some(need) = needs {
            text.push_str(&format!("needs = [\"{need}\"]\n"));
        }
    };
    for k in 1..=5 {
        step(&mut text, &format!("m{k}"), SHORT_MS, None);
    }
    step(&mut text, "m6", LONG_MS, None);
    for k in 1..=4 {
        let need = (k > 1).then(|| format!("{chain}{}", k - 1));
        step(&mut text, &format!("{chain}{k}"), CHAIN_MS, need);
    }
    text
}

/// One run in `dir`: its makespan as run.json records it.
fn run(dir: &std::path::Path, uri: &str) -> u64 {
    let out = common::succeeded(
        Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(["run", "w.toml", "--no-progress", "--format", "json"])
            .current_dir(dir)
            .env("ANTHROPIC_BASE_URL", uri)
            .env("ANTHROPIC_API_KEY", "bench"),
    );
    let record: Value = serde_json::from_slice(&out.stdout).expect("run.json on stdout");
    record["duration_ms"].as_u64().expect("duration_ms")
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let server = runtime.block_on(async {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/messages"))
            .respond_with(Timed)
            .mount(&server)
            .await;
        server
    });
    println!(
        "chain of 4 x {CHAIN_MS} ms + 5 x {SHORT_MS} ms + 1 x {LONG_MS} ms independent, max_parallel = 2; best order {BEST_MS} ms; median of {REPEATS}"
    );
    let mut worst_second = 0.0_f64;
    for (case, chain) in [("chain ids sort first", "a"), ("chain ids sort last", "z")] {
        let (mut firsts, mut seconds) = (Vec::new(), Vec::new());
        for _ in 0..REPEATS {
            let dir = tempfile::tempdir().expect("temp dir");
            std::fs::write(dir.path().join("w.toml"), workflow(chain)).expect("write");
            firsts.push(run(dir.path(), &server.uri()));
            seconds.push(run(dir.path(), &server.uri()));
        }
        let (first, second) = (common::median(firsts), common::median(seconds));
        let ratio = |ms: u64| ms as f64 / BEST_MS as f64;
        worst_second = worst_second.max(ratio(second));
        println!(
            "  {case}: first run (no history) {first} ms = {:.2}x best; second run (history) {second} ms = {:.2}x best",
            ratio(first),
            ratio(second)
        );
    }
    println!(
        "  second runs within 5% of the best order: {}",
        if worst_second <= 1.05 { "yes" } else { "NO" }
    );
}
