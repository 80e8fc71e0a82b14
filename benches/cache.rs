//! What users pay for input tokens, by Anthropic's rules: a cache read costs 0.1 of a plain input
//! token, a cache write 1.25. The release binary runs against a model API in this process that
//! keeps a prompt cache as Anthropic describes it: a request's prefix up to each block with
//! `cache_control` is cached when its reply begins (here: after a fixed delay, the reply's
//! time), and a later request reads the longest cached prefix that ends at one of its own
//! breakpoints or at one of the 20 block boundaries before one; a prefix shorter than the
//! model's minimum cacheable length (runner's own [`anthropic_min_cacheable`], the one the
//! sibling gate asks) is neither written nor read. Each request's bill is also worked out as if
//! nothing were cached for it (an independent start: every prefix written), so both figures are
//! of the same requests.
//!
//! 1. Ten forks: a step reads a 40 kB file, then calls `task` ten times with a fork agent.
//! 2. Ten fan-out instances of one agent (`for_each` over ten items, all at once).
//! 3. A step of 30, 60 and 100 turns reading a different 8 kB file each turn: with a 60k window
//!    (old results cleared, compaction) against a window too large to ever clear (the
//!    conversation whole). The clearing is runner's own, in the release binary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use runner::provider::known::anthropic_min_cacheable;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The model every case runs on: its minimum cacheable length is the cost model's.
const MODEL: &str = "claude-sonnet-4-5";

/// Block boundaries before a breakpoint where a cached prefix is looked for.
const LOOKBACK: usize = 20;

/// How long a reply takes to begin: the time the cache entry takes to become readable.
const REPLY_AFTER: Duration = Duration::from_millis(300);

/// One request's input tokens as billed.
#[derive(Debug, Default, Clone, Copy)]
struct Bill {
    plain: u64,
    read: u64,
    write: u64,
}

impl Bill {
    fn billable(&self) -> f64 {
        self.plain as f64 + 0.1 * self.read as f64 + 1.25 * self.write as f64
    }

    fn add(&mut self, other: Bill) {
        self.plain += other.plain;
        self.read += other.read;
        self.write += other.write;
    }
}

#[derive(Default)]
struct Ledger {
    /// Cached prefixes (their digest) and when they became readable.
    cache: BTreeMap<String, Instant>,
    /// Per class of request: what it paid, and what it would have paid alone.
    paid: BTreeMap<String, (Bill, Bill, u32)>,
    largest: u64,
    files_next: usize,
}

type Answer = Box<dyn Fn(&Value, &mut Ledger) -> (String, Value) + Send + Sync>;

struct Api {
    ledger: Arc<Mutex<Ledger>>,
    answer: Answer,
}

/// The request as the cache sees it: a run of blocks (the tools, each system block, each
/// message block with its role), the running digest and token count after each, and which
/// end in a breakpoint.
fn blocks(body: &Value) -> Vec<(String, u64, bool)> {
    let mut out = Vec::new();
    let mut hasher = Sha256::new();
    let mut tokens = 0;
    let mut push = |text: String, marked: bool, out: &mut Vec<(String, u64, bool)>| {
        hasher.update(text.as_bytes());
        tokens += text.len() as u64 / 4;
        let digest: String = hasher
            .clone()
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        out.push((digest, tokens, marked));
    };
    push(body["tools"].to_string(), false, &mut out);
    let plain = |block: &Value| {
        let mut block = block.clone();
        if let Some(map) = block.as_object_mut() {
            map.remove("cache_control");
        }
        block
    };
    for block in body["system"].as_array().into_iter().flatten() {
        let marked = block.get("cache_control").is_some();
        push(plain(block).to_string(), marked, &mut out);
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        let role = message["role"].as_str().unwrap_or_default();
        for block in message["content"].as_array().into_iter().flatten() {
            let marked = block.get("cache_control").is_some();
            push(format!("{role}:{}", plain(block)), marked, &mut out);
        }
    }
    out
}

/// The bill of a request with `blocks` against `cache` (entries readable at `now`); the
/// entries its breakpoints write.
fn bill(blocks: &[(String, u64, bool)], cache: &BTreeMap<String, Instant>, now: Instant) -> Bill {
    let total = blocks.last().map_or(0, |b| b.1);
    // A breakpoint reads the longest cached prefix ending at it or at one of the 20 block
    // boundaries before it (Anthropic's lookback).
    let read = blocks
        .iter()
        .enumerate()
        .filter(|(at, _)| {
            blocks[*at..(*at + LOOKBACK + 1).min(blocks.len())]
                .iter()
                .any(|b| b.2)
        })
        .filter(|(_, (digest, _, _))| cache.get(digest).is_some_and(|at| *at <= now))
        .map(|(_, b)| b.1)
        .max()
        .unwrap_or(0);
    let last_mark = blocks
        .iter()
        .filter(|b| b.2)
        .map(|b| b.1)
        .max()
        .unwrap_or(0);
    // Shorter than the minimum, the prefix is not cached: billed plain, as Anthropic does.
    let last_mark = if last_mark >= anthropic_min_cacheable(MODEL) {
        last_mark
    } else {
        0
    };
    let write = last_mark.saturating_sub(read);
    Bill {
        plain: total - read - write,
        read,
        write,
    }
}

impl Respond for Api {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let now = Instant::now();
        let blocks = blocks(&body);
        let mut ledger = self.ledger.lock().unwrap();
        let paid = bill(&blocks, &ledger.cache, now);
        let alone = bill(&blocks, &BTreeMap::new(), now);
        let total = paid.plain + paid.read + paid.write;
        ledger.largest = ledger.largest.max(total);
        for (digest, tokens, marked) in &blocks {
            if *marked && *tokens >= anthropic_min_cacheable(MODEL) {
                ledger
                    .cache
                    .entry(digest.clone())
                    .or_insert(now + REPLY_AFTER);
            }
        }
        let (class, content) = (self.answer)(&body, &mut ledger);
        let entry = ledger.paid.entry(class).or_default();
        entry.0.add(paid);
        entry.1.add(alone);
        entry.2 += 1;
        let stop = if content
            .as_array()
            .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_use"))
        {
            "tool_use"
        } else {
            "end_turn"
        };
        ResponseTemplate::new(200)
            .set_delay(REPLY_AFTER)
            .set_body_json(json!({
                "type": "message", "role": "assistant", "content": content, "stop_reason": stop,
                "usage": {"input_tokens": paid.plain, "cache_read_input_tokens": paid.read,
                    "cache_creation_input_tokens": paid.write, "output_tokens": 20}
            }))
    }
}

fn text(text: &str) -> Value {
    json!([{"type": "text", "text": text}])
}

fn read(id: &str, path: &str) -> Value {
    json!([{"type": "tool_use", "id": id, "name": "read_file", "input": {"path": path}}])
}

fn last_message(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(Value::to_string)
        .unwrap_or_default()
}

async fn serve(answer: Answer) -> (MockServer, Arc<Mutex<Ledger>>) {
    let server = MockServer::start().await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(Api {
            ledger: ledger.clone(),
            answer,
        })
        .mount(&server)
        .await;
    (server, ledger)
}

fn run(dir: &Path, server: &MockServer) {
    let out = Command::new(PathBuf::from(env!("CARGO_BIN_EXE_runner")))
        .args(["run", "w.toml", "--no-progress", "--trust-workdir"])
        .current_dir(dir)
        .env("ANTHROPIC_BASE_URL", server.uri())
        .env("ANTHROPIC_API_KEY", "bench")
        .output()
        .expect("run runner");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn report(label: &str, ledger: &Ledger, class: &str) {
    let (paid, alone, n) = ledger.paid.get(class).copied().unwrap_or_default();
    println!(
        "  {label}: {n} requests, billable input {:.0} tokens (read {}, written {}, plain {}); as independent starts {:.0}: {:.1}% saved",
        paid.billable(),
        paid.read,
        paid.write,
        paid.plain,
        alone.billable(),
        100.0 * (1.0 - paid.billable() / alone.billable())
    );
}

fn models() -> String {
    format!("[models]\ndefault = \"anthropic/{MODEL}\"\n")
}

async fn forks() {
    let dir = tempfile::tempdir().expect("temp dir");
    let line = "The signing key rotates every 90 days; see docs/keys.md for the procedure.\n";
    std::fs::write(dir.path().join("big.txt"), line.repeat(40_000 / line.len())).expect("write");
    std::fs::create_dir_all(dir.path().join(".claude/agents")).expect("agents");
    std::fs::write(
        dir.path().join(".claude/agents/part.md"),
        "---\nname: part\ndescription: Carries on one part of the work\ntools: Read, Grep\nforkContext: true\n---\nDo your part.\n",
    )
    .expect("agent");
    std::fs::write(
        dir.path().join("w.toml"),
        format!("name = \"forks\"\n{}[steps.lead]\nagent = \"code\"\nsubagents = [\"part\"]\nprompt = \"Read big.txt, then split the review ten ways.\"\n", models()),
    )
    .expect("workflow");
    let (server, ledger) = serve(Box::new(|body, _| {
        let last = last_message(body);
        let count = body["messages"].as_array().map_or(0, Vec::len);
        if let Some(at) = last.find("MARK-part-") {
            let n = &last[at + 10..at + 11];
            return ("fork".into(), text(&format!("part {n} reviewed")));
        }
        match count {
            1 => ("lead".into(), read("r1", "big.txt")),
            3 => {
                let calls: Vec<Value> = (0..10)
                    .map(|n| json!({"type": "tool_use", "id": format!("t{n}"), "name": "task",
                        "input": {"description": format!("part {n}"), "prompt": format!("MARK-part-{n}: review part {n} of big.txt"), "subagent_type": "part"}}))
                    .collect();
                ("lead".into(), Value::Array(calls))
            }
            _ => ("lead".into(), text("all parts reviewed")),
        }
    }))
    .await;
    run(dir.path(), &server);
    let ledger = ledger.lock().unwrap();
    println!("ten forks of a step that read a 40 kB file");
    report("forks", &ledger, "fork");
}

async fn fan_out() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("w.toml"),
        format!("name = \"fan\"\nmax_parallel = 10\n{}[steps.each]\nagent = \"explore\"\nfor_each = [\"a\", \"b\", \"c\", \"d\", \"e\", \"f\", \"g\", \"h\", \"i\", \"j\"]\nprompt = \"MARK-fan look at {{{{ item }}}}\"\n", models()),
    )
    .expect("workflow");
    let (server, ledger) = serve(Box::new(|_, _| ("instance".into(), text("looked")))).await;
    run(dir.path(), &server);
    let ledger = ledger.lock().unwrap();
    println!("ten fan-out instances of one agent, all at once");
    report("instances", &ledger, "instance");
}

async fn long_step(window: u64, turns: usize) -> (Bill, u64, u32) {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("data")).expect("data");
    for n in 0..turns {
        let line = format!("{n:03} lorem ipsum dolor sit amet consectetur adipiscing elit\n");
        std::fs::write(
            dir.path().join(format!("data/f{n:03}.txt")),
            line.repeat(8192 / line.len()),
        )
        .expect("file");
    }
    std::fs::write(
        dir.path().join("w.toml"),
        format!("name = \"long\"\n{}[steps.read]\nagent = \"explore\"\nmax_turns = 300\ncontext_window = {window}\nprompt = \"Read the files in data/, one a turn.\"\n", models()),
    )
    .expect("workflow");
    let (server, ledger) = serve(Box::new(move |body, ledger| {
        if last_message(body).contains("will be compacted") {
            return (
                "summary".into(),
                text(&format!(
                    "SUMMARY: read up to data/f{:03}.txt",
                    ledger.files_next
                )),
            );
        }
        if ledger.files_next < turns {
            ledger.files_next += 1;
            let n = ledger.files_next - 1;
            return (
                "turn".into(),
                read(&format!("t{n}"), &format!("data/f{n:03}.txt")),
            );
        }
        ("turn".into(), text("read them all"))
    }))
    .await;
    run(dir.path(), &server);
    let ledger = ledger.lock().unwrap();
    let mut all = Bill::default();
    let mut requests = 0;
    for (paid, _, n) in ledger.paid.values() {
        all.add(*paid);
        requests += n;
    }
    (all, ledger.largest, requests)
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        println!("billable input tokens (cache read 0.1x, write 1.25x, plain 1x), replies begin after {} ms", REPLY_AFTER.as_millis());
        forks().await;
        fan_out().await;
        for (turns, goal) in [(30, None), (60, Some(40.0)), (100, Some(30.0))] {
            println!("a {turns}-turn step, a different 8 kB file each turn");
            let (whole, whole_largest, whole_requests) = long_step(10_000_000, turns).await;
            let (kept, kept_largest, kept_requests) = long_step(60_000, turns).await;
            println!(
                "  nothing cleared: {whole_requests} requests, billable input {:.0} tokens, largest request {whole_largest} tokens",
                whole.billable()
            );
            let goal = goal.map_or_else(String::new, |g: f64| format!(" (goal: at most {g:.0}%)"));
            println!(
                "  60k window (cleared, compacted): {kept_requests} requests, billable input {:.0} tokens (read {}, written {}, plain {}), largest request {kept_largest} tokens{}: {:.1}% of the whole conversation's bill{goal}",
                kept.billable(),
                kept.read,
                kept.write,
                kept.plain,
                if kept_largest > 60_000 { " OVER THE WINDOW" } else { "" },
                100.0 * kept.billable() / whole.billable()
            );
        }
    });
}
