//! The report of a big run: a 1,000-instance fan-out (each instance reads a file, then answers)
//! run through the release binary against a fake model API, written by `runner report`, then
//! opened from disk in headless Chromium (Debian's, driven by playwright-core through
//! tests/browser/open.cjs) 5 times: the time from asking for the page to its load event, the
//! browser's own navigation timing, and the page's size. The budget is 2 s to open.
//!
//! Needs `chromium` (apt) and npm, as the report tests do; run with `cargo bench --bench report`.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

/// Instances of the fan-out.
const N: usize = 1000;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let server = runtime.block_on(async {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/messages"))
            .respond_with(|request: &Request| {
                let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
                let turn = body["messages"].as_array().map_or(0, Vec::len);
                let reply = if turn == 1 {
                    json!({"content": [{"type": "tool_use", "id": "t1", "name": "read_file",
                        "input": {"path": "notes.txt"}}], "stop_reason": "tool_use"})
                } else {
                    json!({"content": [{"type": "text", "text": "The notes list three things to look at; this item is fine."}],
                        "stop_reason": "end_turn"})
                };
                let mut reply = reply;
                reply["usage"] = json!({"input_tokens": 900, "output_tokens": 40,
                    "cache_read_input_tokens": 2000});
                ResponseTemplate::new(200).set_body_json(reply)
            })
            .mount(&server)
            .await;
        server
    });
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("w.toml"), common::FAN_OUT_WORKFLOW).expect("write");
    std::fs::write(
        dir.path().join("notes.txt"),
        "first: the login form\nsecond: the session store\nthird: the logout path\n".repeat(20),
    )
    .expect("write");
    let runner = |args: &[&str]| {
        common::succeeded(
            Command::new(env!("CARGO_BIN_EXE_runner"))
                .args(args)
                .current_dir(dir.path())
                .env("ANTHROPIC_BASE_URL", server.uri())
                .env("ANTHROPIC_API_KEY", "bench"),
        )
    };
    let input = format!("n={N}");
    runner(&["run", "w.toml", "--no-progress", "-i", &input]);
    let started = Instant::now();
    runner(&["report", "-o", "report.html"]);
    let wrote = started.elapsed();
    let page = dir.path().join("report.html");
    let size = std::fs::metadata(&page).expect("the report").len();
    println!(
        "report of a {N}-instance fan-out: written in {:.0} ms, {:.1} MB",
        wrote.as_secs_f64() * 1e3,
        size as f64 / 1e6
    );
    let (mut opens, mut loads) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let seen = open(&page, &dir.path().join("report.png"));
        assert_eq!(
            seen["table"].as_array().map(Vec::len),
            Some(3),
            "the page shows the run's three steps"
        );
        opens.push(seen["open_ms"].as_f64().unwrap_or(f64::NAN));
        loads.push(seen["navigation"]["load_ms"].as_f64().unwrap_or(f64::NAN));
    }
    let open_ms = common::median(opens.clone());
    println!(
        "  opened in Chromium 5 times: median {open_ms:.0} ms from asking to the load event (each: {}), browser's load event at {:.0} ms (budget 2,000 ms): {}",
        opens
            .iter()
            .map(|o| format!("{o:.0}"))
            .collect::<Vec<_>>()
            .join(", "),
        common::median(loads),
        if open_ms <= 2000.0 { "within" } else { "OVER" }
    );
}

/// tests/browser/open.cjs's answer for `page`, unfolding the fan-out's first instance's step.
fn open(page: &Path, shot: &Path) -> Value {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let modules = repo.join("target/playwright/node_modules");
    if !modules.join("playwright-core/package.json").exists() {
        common::succeeded(
            Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--prefix"])
                .arg(repo.join("target/playwright"))
                .arg("playwright-core@1.65.2"),
        );
    }
    let out = common::succeeded(
        Command::new("node")
            .arg(repo.join("tests/browser/open.cjs"))
            .arg(page)
            .arg(shot)
            .arg("")
            .env("NODE_PATH", &modules),
    );
    serde_json::from_slice(&out.stdout).expect("the browser script's JSON")
}
