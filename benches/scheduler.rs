//! Scheduler benchmarks.
//!
//! 1. A grid of 8 parallel x 3 dependent steps through the real binary against a fake model API
//!    answering every request after 400 ms: the critical path is 3 x 400 ms = 1.2 s, and the run
//!    should take within 1.1x of that plus process start.
//! 2. Delegation: one step fanning out 50 subagents in one turn, every model call answered after
//!    200 ms, through the real binary. With at most L subagents at once the ideal is the step's
//!    two calls plus ceil(50 / L) rounds of subagents; the run should take within 1.15x of that
//!    plus process start.
//! 3. The scheduler's own cost per step: 1,000 steps (a 50-wide, 20-deep layered DAG) run with an
//!    executor that finishes each step at once, so only the walk, the decisions, prompt rendering
//!    and run.json writing are measured.
//! 4. Fan-out: a command step prints a list of N items and an explore step runs once per item
//!    against a fake model API that answers at once, through the real binary, for N = 100, 300
//!    and 1,000. Runner's time per instance should stay flat: within 1.5x from 100 to 1,000.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use camino::Utf8PathBuf;
use futures_util::future::BoxFuture;
use runner::agent::AgentCatalog;
use runner::event::Sinks;
use runner::plan::{PlanOptions, build_plan};
use runner::run::executor::{Executor, StepJob};
use runner::run::{self, RunOptions};
use runner::session::StepOutcome;
use runner::tools::Registry;
use runner::workflow::load_workflow;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const LATENCY: Duration = Duration::from_millis(400);

fn grid_workflow() -> String {
    let mut text = String::from(
        "name = \"grid\"\nmax_parallel = 8\n[models]\ndefault = \"anthropic/bench\"\n",
    );
    for row in 0..3 {
        for col in 0..8 {
            text.push_str(&format!(
                "[steps.r{row}c{col}]\nagent = \"explore\"\nprompt = \"cell {row} {col}\"\n"
            ));
            if row > 0 {
                text.push_str(&format!("needs = [\"r{}c{col}\"]\n", row - 1));
            }
        }
    }
    text
}

/// Times one whole run of the release binary in `dir` against the fake API at `uri`.
fn timer(dir: &std::path::Path, uri: String) -> impl Fn(&[&str]) -> Duration + '_ {
    move |args: &[&str]| {
        let started = Instant::now();
        common::succeeded(
            Command::new(env!("CARGO_BIN_EXE_runner"))
                .args(args)
                .current_dir(dir)
                .env("ANTHROPIC_BASE_URL", &uri)
                .env("ANTHROPIC_API_KEY", "bench"),
        );
        started.elapsed()
    }
}

fn grid(runtime: &tokio::runtime::Runtime) {
    let server = runtime.block_on(async {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/messages"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(json!({
                        "content": [{"type": "text", "text": "ok"}],
                        "stop_reason": "end_turn",
                        "usage": {"input_tokens": 10, "output_tokens": 2}
                    }))
                    .set_delay(LATENCY),
            )
            .mount(&server)
            .await;
        server
    });
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("w.toml"), grid_workflow()).expect("write");
    let time = timer(dir.path(), server.uri());
    let start = common::median((0..10).map(|_| time(&["--version"])).collect());
    let runs: Vec<Duration> = (0..5)
        .map(|_| time(&["run", "w.toml", "--no-progress"]))
        .collect();
    let run = common::median(runs.clone());
    let critical = LATENCY * 3;
    println!("grid 8 x 3 at {} ms per model call", LATENCY.as_millis());
    println!(
        "  process start (runner --version), median of 10: {:.1} ms",
        start.as_secs_f64() * 1e3
    );
    println!(
        "  run, median of 5: {:.3} s (runs: {})",
        run.as_secs_f64(),
        runs.iter()
            .map(|d| format!("{:.3}", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  critical path {:.1} s; run / critical path = {:.3}; budget 1.1 x critical path + start = {:.3} s: {}",
        critical.as_secs_f64(),
        run.as_secs_f64() / critical.as_secs_f64(),
        (critical.mul_f64(1.1) + start).as_secs_f64(),
        if run <= critical.mul_f64(1.1) + start {
            "within"
        } else {
            "OVER"
        }
    );
}

const FAN_OUT: usize = 50;
const SUBAGENT_LATENCY: Duration = Duration::from_millis(200);

/// The lead step asks for 50 subagents at once, then answers; every subagent answers at once.
struct FanOut;

impl wiremock::Respond for FanOut {
    fn respond(&self, request: &wiremock::Request) -> ResponseTemplate {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let lead = messages.first().is_some_and(|m| {
            m["content"][0]["text"]
                .as_str()
                .unwrap_or("")
                .contains("LEAD")
        });
        let reply = if lead && messages.len() == 1 {
            let calls: Vec<serde_json::Value> = (0..FAN_OUT)
                .map(|i| {
                    json!({"type": "tool_use", "id": format!("t{i}"), "name": "task", "input": {
                        "description": format!("part {i}"),
                        "prompt": format!("Look at part {i}."),
                        "subagent_type": "explore"
                    }})
                })
                .collect();
            json!({"content": calls, "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 2}})
        } else {
            json!({"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {"input_tokens": 10, "output_tokens": 2}})
        };
        ResponseTemplate::new(200)
            .set_body_json(reply)
            .set_delay(SUBAGENT_LATENCY)
    }
}

fn fan_out(runtime: &tokio::runtime::Runtime) {
    let server = runtime.block_on(async {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/messages"))
            .respond_with(FanOut)
            .mount(&server)
            .await;
        server
    });
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("w.toml"),
        "name = \"fan\"\nmax_subagents_per_step = 64\n[models]\ndefault = \"anthropic/bench\"\n[steps.lead]\nagent = \"code\"\nprompt = \"LEAD: split the work\"\n",
    )
    .expect("write");
    let time = timer(dir.path(), server.uri());
    let start = common::median((0..10).map(|_| time(&["--version"])).collect());
    println!(
        "fan-out: one step, {FAN_OUT} subagents in one turn, {} ms per model call",
        SUBAGENT_LATENCY.as_millis()
    );
    for limit in [8usize, 16, 50] {
        let runs: Vec<Duration> = (0..3)
            .map(|_| {
                time(&[
                    "run",
                    "w.toml",
                    "--no-progress",
                    "--max-subagents",
                    &limit.to_string(),
                ])
            })
            .collect();
        let run = common::median(runs);
        let rounds = FAN_OUT.div_ceil(limit) as u32;
        let ideal = SUBAGENT_LATENCY * (2 + rounds);
        let budget = ideal.mul_f64(1.15) + start;
        println!(
            "  --max-subagents {limit}: median of 3 {:.3} s; ideal {:.1} s ({rounds} rounds + 2 step calls); run / ideal = {:.3}; budget 1.15 x ideal + start = {:.3} s: {}",
            run.as_secs_f64(),
            ideal.as_secs_f64(),
            run.as_secs_f64() / ideal.as_secs_f64(),
            budget.as_secs_f64(),
            if run <= budget { "within" } else { "OVER" }
        );
    }
}

/// Finishes every step at once.
struct Instantly;

impl Executor for Instantly {
    fn run(&self, job: StepJob) -> BoxFuture<'static, StepOutcome> {
        Box::pin(async move { StepOutcome::succeeded(format!("{} done", job.step.id)) })
    }
}

fn overhead(runtime: &tokio::runtime::Runtime) {
    let (width, depth) = (50, 20);
    let mut text = String::from(
        "name = \"wide\"\nmax_parallel = 16\n[models]\ndefault = \"anthropic/bench\"\n",
    );
    for row in 0..depth {
        for col in 0..width {
            text.push_str(&format!("[steps.r{row}c{col}]\nagent = \"explore\"\n"));
            if row > 0 {
                text.push_str(&format!(
                    "needs = [\"r{}c{col}\"]\nprompt = \"after {{{{ steps.r{}c{col}.summary }}}}\"\n",
                    row - 1,
                    row - 1
                ));
            } else {
                text.push_str("prompt = \"start\"\n");
            }
        }
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let root = Utf8PathBuf::from_path_buf(dir.path().to_owned()).expect("utf-8");
    std::fs::write(root.join("w.toml"), text).expect("write");
    let loaded = load_workflow(&root.join("w.toml")).expect("load");
    let (plan, problems) = build_plan(
        &loaded,
        &AgentCatalog::load(&[], &Registry::builtin()),
        &Registry::builtin(),
        &PlanOptions::default(),
    );
    let plan = plan.unwrap_or_else(|| panic!("{problems:?}"));
    let steps = plan.steps().len();
    let mut times = Vec::new();
    for _ in 0..5 {
        let options = RunOptions {
            workdir: root.clone(),
            state_dir: root.join(".runner"),
            fail_fast: false,
            resume: None,
            continue_steps: false,
            only: BTreeSet::new(),
            run_id: None,
            interrupt: CancellationToken::new(),
            last_saved: Default::default(),
        };
        let started = Instant::now();
        let record = runtime
            .block_on(run::execute(
                &plan,
                Arc::new(Instantly),
                &options,
                &mut Sinks::default(),
            ))
            .expect("run");
        times.push(started.elapsed());
        assert_eq!(record.status, run::RunStatus::Succeeded);
    }
    let run = common::median(times);
    println!("scheduler overhead, {steps} steps ({width} wide x {depth} deep), instant executor");
    println!(
        "  run, median of 5: {:.1} ms = {:.3} ms per step",
        run.as_secs_f64() * 1e3,
        run.as_secs_f64() * 1e3 / steps as f64
    );
}

fn fan_out_instances(runtime: &tokio::runtime::Runtime) {
    let server = runtime.block_on(async {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/messages"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "content": [{"type": "text", "text": "ok"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 2}
            })))
            .mount(&server)
            .await;
        server
    });
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("w.toml"), common::FAN_OUT_WORKFLOW).expect("write");
    let time = timer(dir.path(), server.uri());
    println!(
        "fan-out instances: an explore step per item of a command step's list, instant fake API, 16 at once"
    );
    let whole = |n: usize| {
        let input = format!("n={n}");
        time(&["run", "w.toml", "--no-progress", "-i", &input])
    };
    // Each round runs every width back to back, so that all see the machine in one state (its
    // speed drifts over minutes); what comes on top of the empty fan-out (start, the command
    // step) in that round is the widths' cost.
    let widths = [100usize, 300, 1000];
    let (mut fixed, mut runs, mut per_instance, mut ratios) = (
        Vec::new(),
        vec![Vec::new(); 3],
        vec![Vec::new(); 3],
        Vec::new(),
    );
    for _ in 0..7 {
        let base = whole(0);
        fixed.push(base);
        let mut each = [0.0; 3];
        for (i, n) in widths.into_iter().enumerate() {
            let run = whole(n);
            each[i] = run.saturating_sub(base).as_secs_f64() * 1e3 / n as f64;
            runs[i].push(run);
            per_instance[i].push(each[i]);
        }
        ratios.push(each[2] / each[0]);
    }
    println!(
        "      0 instances: median of 7 whole runs {:.3} s (the fixed cost)",
        common::median(fixed).as_secs_f64()
    );
    for (i, n) in widths.into_iter().enumerate() {
        println!(
            "  {n:>5} instances: median of 7 whole runs {:.3} s = {:.2} ms per instance above it",
            common::median(runs[i].clone()).as_secs_f64(),
            common::median(per_instance[i].clone()),
        );
    }
    let ratio = common::median(ratios);
    println!(
        "  per instance at 1,000 / at 100, median of 7 rounds = {ratio:.2} (budget 1.5): {}",
        if ratio <= 1.5 { "within" } else { "OVER" }
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // `cargo bench` passes `--bench`; `cargo test --benches` would pass nothing: run either way.
    grid(&runtime);
    fan_out(&runtime);
    overhead(&runtime);
    fan_out_instances(&runtime);
}
