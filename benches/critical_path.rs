//! Critical path first (docs/src/performance.md "Critical path first").
//!
//! A chain of 4 steps and 6 independent steps under `max_parallel = 2`, through the release
//! binary against a fake model API that answers each step after its chosen time, in two
//! shapes. "Even": every step 200 ms (issue 46's case); the best order runs the chain beside
//! the independent steps: 1.0 s. "One long": the chain's steps 100 ms, five independent steps
//! 200 ms and one 1,500 ms, declared last; the best order starts the long step at once and runs
//! the chain and the short steps beside it: 1.5 s. Each case runs in a fresh
//! state directory twice: the first run has no history (the order is by step count), the second
//! has the first's durations. Both id orders: the chain's ids sorting first (`a1`..`a4`) and
//! last (`z1`..`z4`); the file declares the independent steps first either way.
//!
//! The best order is measured too: the same steps with `needs` that leave nothing to choose.
//! The makespan is the run's `duration_ms` in `run.json` (runner's own clock, from the first
//! step's start to the last's end: process start is not the scheduler's), median of 3.

mod common;

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const REPEATS: usize = 3;

/// A shape: the chain's step time, the independent steps' times (in the file's order), and the
/// best order's makespan.
struct Shape {
    name: &'static str,
    chain_ms: u64,
    independent_ms: [u64; 6],
    /// The best order's makespan with no overhead.
    best_ms: u64,
    /// The best order forced by `needs` (`-` the chain's last step): with two chains of
    /// work and two slots nothing is left to choose, so the same binary runs the best order
    /// with the same per-step costs.
    forced: [Option<&'static str>; 6],
}

const SHAPES: [Shape; 2] = [
    Shape {
        name: "even",
        chain_ms: 200,
        independent_ms: [200; 6],
        // 10 steps of 200 ms, two at a time.
        best_ms: 1_000,
        forced: [
            None,
            Some("m1"),
            Some("m2"),
            Some("m3"),
            Some("m4"),
            Some("-"),
        ],
    },
    Shape {
        name: "one long",
        chain_ms: 100,
        independent_ms: [200, 200, 200, 200, 200, 1_500],
        // The long step; the chain and the others (1.4 s) fit beside it.
        best_ms: 1_500,
        forced: [
            Some("-"),
            Some("m1"),
            Some("m2"),
            Some("m3"),
            Some("m4"),
            None,
        ],
    },
];

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

/// The shape's workflow, its chain's ids starting with `chain`; `forced`: in its best order.
fn workflow(shape: &Shape, chain: &str, forced: bool) -> String {
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
    for (k, ms) in shape.independent_ms.iter().enumerate() {
        let need = shape.forced[k].filter(|_| forced).map(|n| match n {
            "-" => format!("{chain}4"),
            other => other.to_owned(),
        });
        step(&mut text, &format!("m{}", k + 1), *ms, need);
    }
    for k in 1..=4 {
        let need = (k > 1).then(|| format!("{chain}{}", k - 1));
        step(&mut text, &format!("{chain}{k}"), shape.chain_ms, need);
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
        "a chain of 4 and 6 independent steps, max_parallel = 2; makespans, median of {REPEATS}"
    );
    let mut worst_second = 0.0_f64;
    for shape in &SHAPES {
        let best = common::median(
            (0..REPEATS)
                .map(|_| {
                    let dir = tempfile::tempdir().expect("temp dir");
                    std::fs::write(dir.path().join("w.toml"), workflow(shape, "a", true))
                        .expect("write");
                    run(dir.path(), &server.uri())
                })
                .collect(),
        );
        println!(
            "{}: chain {} ms a step, independent {:?} ms; best order {} ms ({} ms with no overhead)",
            shape.name, shape.chain_ms, shape.independent_ms, best, shape.best_ms
        );
        for (case, chain) in [("chain ids sort first", "a"), ("chain ids sort last", "z")] {
            let (mut firsts, mut seconds) = (Vec::new(), Vec::new());
            for _ in 0..REPEATS {
                let dir = tempfile::tempdir().expect("temp dir");
                std::fs::write(dir.path().join("w.toml"), workflow(shape, chain, false))
                    .expect("write");
                firsts.push(run(dir.path(), &server.uri()));
                seconds.push(run(dir.path(), &server.uri()));
            }
            let (first, second) = (common::median(firsts), common::median(seconds));
            let ratio = |ms: u64| ms as f64 / best as f64;
            worst_second = worst_second.max(ratio(second));
            println!(
                "  {case}: first run (no history) {first} ms = {:.2}x best; second run (history) {second} ms = {:.2}x best",
                ratio(first),
                ratio(second)
            );
        }
    }
    println!(
        "second runs within 5% of the best order: {}",
        if worst_second <= 1.05 { "yes" } else { "NO" }
    );
}
