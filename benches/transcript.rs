//! How a step's transcript grows with its turns. Each request is logged by what it adds to the
//! conversation (plus a digest of the whole), so the file must grow linearly; logging every
//! request whole, as runner used to, grows with the square of the turns. This prints both for a
//! step of 25 to 400 turns, each turn a `read_file` of a 2 kB file answered by a scripted model;
//! then 20 turns of a 100 kB file, to show each tool output is written once (about 1x its size a
//! turn, where writing it in `tool_finished` and again in the next request took 2x).

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use camino::Utf8PathBuf;
use futures_util::future::BoxFuture;
use runner::event::{Emitter, EventKind, Sink};
use runner::provider::message::{Block, ChatResponse, StopReason, Usage};
use runner::provider::{Exchange, ModelApi, Outgoing, ProviderError};
use runner::report::transcript::TranscriptSink;
use runner::sandbox::Mode;
use runner::session::{self, Session};
use runner::tools::bash::BashEnv;
use runner::tools::confine::Workspace;
use runner::tools::{Registry, StepTools, ToolContext};
use serde_json::json;

/// Replies from a script, in process.
struct Scripted(Mutex<VecDeque<ChatResponse>>);

impl ModelApi for Scripted {
    fn endpoint(&self) -> String {
        "scripted".into()
    }
    fn send<'a>(&'a self, _: Outgoing<'a>) -> BoxFuture<'a, Result<Exchange, ProviderError>> {
        let reply = self.0.lock().expect("script").pop_front();
        Box::pin(async move {
            let response = reply.ok_or(ProviderError::InvalidResponse {
                message: "the script is over".into(),
            })?;
            let raw = json!({"content": format!("{:?}", response.content)});
            Ok(Exchange {
                response,
                raw: raw.into(),
            })
        })
    }
}

fn script(turns: usize) -> VecDeque<ChatResponse> {
    let usage = Usage::default();
    let mut replies: VecDeque<ChatResponse> = (1..turns)
        .map(|i| ChatResponse {
            content: vec![
                Block::Text {
                    text: format!("Reading the notes again, pass {i}."),
                },
                Block::ToolUse {
                    id: format!("t{i}"),
                    name: "read_file".into(),
                    input: json!({"path": "notes.txt"}),
                },
            ],
            stop_reason: StopReason::ToolUse,
            usage,
        })
        .collect();
    replies.push_back(ChatResponse {
        content: vec![Block::Text {
            text: "Done.".into(),
        }],
        stop_reason: StopReason::EndTurn,
        usage,
    });
    replies
}

/// Runs a step of `turns` turns; the transcript's size, and what logging every request whole
/// would have written.
async fn transcript_bytes(turns: usize, file_bytes: usize) -> (u64, u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().expect("path")).expect("utf-8");
    let line = "The signing key rotates every 90 days; see docs/keys.md for the procedure.\n";
    std::fs::write(root.join("notes.txt"), line.repeat(file_bytes / line.len())).expect("write");
    let tools = StepTools {
        registry: Arc::new(Registry::builtin()),
        allowed: BTreeSet::from(["read_file".to_owned()]),
        offered: None,
        context: ToolContext::new(
            Arc::new(Workspace::new(&root).expect("workspace")),
            Arc::new(BashEnv::new(Mode::ReadOnly, false)),
        ),
        dont_ask: false,
    };
    let api = Scripted(Mutex::new(script(turns)));
    let (sender, mut events) = tokio::sync::mpsc::unbounded_channel();
    let emitter = Emitter::new("s", sender);
    let outcome = session::run(Session {
        api: &api,
        model: "m",
        system: "You read notes.".into(),
        history: Vec::new(),
        first_message: "Read the notes.".into(),
        max_turns: turns as u32,
        max_tokens: 1000,
        retries: 0,
        output_schema: None,
        tools: &tools,
        events: &emitter,
        meter: &runner::budget::Meter::unlimited("s"),
        checks: &[],
        check_retries: 0,
        shared_until: None,
        effort: None,
        // Wide enough that nothing is cleared: this measures the transcript of a whole
        // conversation.
        window: runner::session::context::Window {
            tokens: 1 << 40,
            compact_at: 0.8,
            keep_tool_results: 4,
            keep_at_least: 1,
        },
    })
    .await;
    assert!(
        matches!(outcome, session::StepOutcome::Succeeded { .. }),
        "{outcome:?}"
    );
    drop(emitter);
    let run_dir = root.join("run");
    let mut sink = TranscriptSink::new(runner::out::OutDir::open(&run_dir).expect("run dir"));
    let (mut conversation, mut whole) = (0u64, 0u64);
    while let Ok(event) = events.try_recv() {
        if let EventKind::TurnStarted { messages, .. } = &event.kind {
            conversation += serde_json::to_string(messages).expect("json").len() as u64;
            whole += conversation;
        }
        sink.handle(&event).expect("transcript");
    }
    sink.flush().expect("transcript");
    let bytes = std::fs::metadata(TranscriptSink::path(&run_dir, "s"))
        .expect("transcript")
        .len();
    (bytes, whole)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("turns  transcript bytes  per turn  (requests logged whole: bytes)");
    let mut previous: Option<(usize, u64)> = None;
    for turns in [25, 50, 100, 200, 400] {
        let (bytes, whole) = runtime.block_on(transcript_bytes(turns, 2048));
        let per_turn = bytes as f64 / turns as f64;
        println!("{turns:>5}  {bytes:>16}  {per_turn:>8.0}  ({whole})");
        if let Some((turns_before, bytes_before)) = previous {
            let growth = bytes as f64 / bytes_before as f64;
            let ratio = turns as f64 / turns_before as f64;
            assert!(
                growth < ratio * 1.1,
                "the transcript grew {growth:.2}x for {ratio}x the turns"
            );
        }
        previous = Some((turns, bytes));
    }
    // Under read_file's 2,000 lines, so the whole file is each output.
    let (turns, size) = (20, 100 * 1024);
    let (bytes, _) = runtime.block_on(transcript_bytes(turns, size));
    // Each turn reads the file once (the first request has none).
    let per_output = bytes as f64 / ((turns - 1) * size) as f64;
    println!(
        "{turns} turns of a {} kB file: {bytes} bytes, {per_output:.2} x the tool output per turn",
        size / 1024
    );
    assert!(per_output < 1.2, "each output should be written once");
}
