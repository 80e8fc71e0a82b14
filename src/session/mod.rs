//! The agent loop for one step: its own conversation, model turns until a turn has no tool calls,
//! tool calls dispatched through the step's allowlist, usage counted, everything appended to the
//! step's transcript as it happens.

pub mod output;
pub mod transcript;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use serde_json::{Value, json};

use crate::provider::client::{ModelClient, RetryPolicy};
use crate::provider::message::{Block, ChatRequest, Message, Role, StopReason, Usage};
use crate::tools::registry::ToolBox;
use transcript::Transcript;

/// Output tokens per model request when neither the step nor `[defaults]` sets `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
/// Extra turns a step gets to fix a final answer that does not match its `output_schema`.
pub const OUTPUT_FIX_TURNS: u32 = 2;

/// Counters a running step updates as it goes; progress displays read them, and a step that
/// times out or is cancelled still reports what it did.
#[derive(Debug, Default)]
pub struct StepProgress {
    pub turns: AtomicU32,
    pub tool_calls: AtomicU32,
    pub input_tokens: AtomicU64,
    pub output_tokens: AtomicU64,
    pub cache_creation_input_tokens: AtomicU64,
    pub cache_read_input_tokens: AtomicU64,
}

impl StepProgress {
    fn add_usage(&self, usage: &Usage) {
        self.input_tokens
            .fetch_add(usage.input_tokens, Ordering::Relaxed);
        self.output_tokens
            .fetch_add(usage.output_tokens, Ordering::Relaxed);
        self.cache_creation_input_tokens
            .fetch_add(usage.cache_creation_input_tokens, Ordering::Relaxed);
        self.cache_read_input_tokens
            .fetch_add(usage.cache_read_input_tokens, Ordering::Relaxed);
    }

    pub fn usage(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens.load(Ordering::Relaxed),
            output_tokens: self.output_tokens.load(Ordering::Relaxed),
            cache_creation_input_tokens: self.cache_creation_input_tokens.load(Ordering::Relaxed),
            cache_read_input_tokens: self.cache_read_input_tokens.load(Ordering::Relaxed),
        }
    }

    pub fn turns(&self) -> u32 {
        self.turns.load(Ordering::Relaxed)
    }

    pub fn tool_calls(&self) -> u32 {
        self.tool_calls.load(Ordering::Relaxed)
    }
}

/// What one step needs to run.
pub struct StepInput<'a> {
    pub model: &'a str,
    pub system_prompt: String,
    pub prompt: String,
    pub max_turns: u32,
    pub max_tokens: u32,
    pub retries: u32,
    pub output_schema: Option<&'a Value>,
    pub client: &'a ModelClient,
    pub tools: &'a ToolBox,
    pub transcript: &'a mut Transcript,
    pub progress: &'a StepProgress,
}

/// How a step ended. Counters live in [`StepProgress`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepOutcome {
    pub succeeded: bool,
    /// The final answer's text.
    pub summary: String,
    /// The parsed final answer, for steps with `output_schema`.
    pub output: Value,
    pub error: Option<String>,
    /// The step's transcript could not be written: the run stops.
    pub storage_error: Option<String>,
}

impl StepOutcome {
    pub fn failed(error: impl Into<String>) -> Self {
        Self {
            error: Some(error.into()),
            ..Self::default()
        }
    }
}

/// The system prompt plus where and when the step runs (and, with `output_schema`, the shape its
/// final answer must have).
pub fn system_prompt(agent_prompt: &str, workdir: &str, output_schema: Option<&Value>) -> String {
    let date = jiff::ZonedDateTime::now().date();
    let mut text = format!(
        "{agent_prompt}\n\n# Environment\nWorking directory: {workdir}\nPlatform: {}\nToday's date: {date}\nAll paths you use must be inside the working directory.",
        std::env::consts::OS
    );
    if let Some(schema) = output_schema {
        text.push_str(&format!(
            "\n\n# Final answer\nEnd your work with a final answer that is a single JSON value matching this JSON Schema (a ```json fenced block is fine):\n{}",
            serde_json::to_string_pretty(schema).unwrap_or_default()
        ));
    }
    text
}

pub async fn run_step(input: StepInput<'_>) -> StepOutcome {
    let mut messages = vec![Message::user_text(input.prompt.clone())];
    let definitions = input.tools.definitions();
    let policy = RetryPolicy::new(input.retries);
    let progress = input.progress;
    let mut fixes_left = if input.output_schema.is_some() {
        OUTPUT_FIX_TURNS
    } else {
        0
    };
    let mut turn_limit = input.max_turns;
    while progress.turns() < turn_limit {
        let turn = progress.turns.fetch_add(1, Ordering::Relaxed) + 1;
        let request = ChatRequest {
            model: input.model.to_owned(),
            system: input.system_prompt.clone(),
            messages: messages.clone(),
            tools: definitions.clone(),
            max_tokens: input.max_tokens,
        };
        let body = input.client.request_body(&request);
        input
            .transcript
            .write(json!({"type": "request", "turn": turn, "body": body}));
        let started = Instant::now();
        let transcript = &mut *input.transcript;
        let sent = input
            .client
            .send(&body, policy, |note| {
                transcript.write(json!({
                    "type": "retry",
                    "turn": turn,
                    "attempt": note.attempt,
                    "delay_ms": note.delay.as_millis() as u64,
                    "error": note.error.to_string(),
                }));
            })
            .await;
        let (response, raw) = match sent {
            Ok(ok) => ok,
            Err(err) => {
                let error = format!("model request failed: {err}");
                input
                    .transcript
                    .write(json!({"type": "error", "turn": turn, "error": error}));
                return StepOutcome::failed(error);
            }
        };
        progress.add_usage(&response.usage);
        input.transcript.write(json!({
            "type": "response",
            "turn": turn,
            "duration_ms": started.elapsed().as_millis() as u64,
            "body": raw,
        }));

        let calls: Vec<(String, String, Value)> = response
            .tool_uses()
            .map(|(id, name, input)| (id.to_owned(), name.to_owned(), input.clone()))
            .collect();
        if !response.content.is_empty() {
            messages.push(Message {
                role: Role::Assistant,
                content: response.content.clone(),
            });
        }
        if !calls.is_empty() {
            let mut results = Vec::with_capacity(calls.len());
            for (id, name, args) in calls {
                progress.tool_calls.fetch_add(1, Ordering::Relaxed);
                input.transcript.write(json!({"type": "tool_call", "turn": turn, "id": id, "name": name, "input": args}));
                let started = Instant::now();
                let output = input.tools.call(&name, &args).await;
                input.transcript.write(json!({
                    "type": "tool_result",
                    "turn": turn,
                    "id": id,
                    "is_error": output.is_error,
                    "duration_ms": started.elapsed().as_millis() as u64,
                    "content": output.text,
                }));
                results.push(Block::ToolResult {
                    tool_use_id: id,
                    content: output.text,
                    is_error: output.is_error,
                });
            }
            messages.push(Message {
                role: Role::User,
                content: results,
            });
            continue;
        }
        let text = response.text();
        match response.stop_reason {
            // The server paused a long turn; sending the conversation back lets it go on.
            StopReason::PauseTurn => continue,
            StopReason::MaxTokens => {
                return StepOutcome {
                    summary: text,
                    ..StepOutcome::failed(format!(
                        "the model's answer was cut off at max_tokens ({}); raise `max_tokens`",
                        input.max_tokens
                    ))
                };
            }
            StopReason::Refusal => {
                return StepOutcome::failed(format!("the model refused: {text}"));
            }
            _ => {}
        }
        let Some(schema) = input.output_schema else {
            return StepOutcome {
                succeeded: true,
                summary: text,
                ..StepOutcome::default()
            };
        };
        match output::check(&text, schema) {
            Ok(value) => {
                return StepOutcome {
                    succeeded: true,
                    summary: text,
                    output: value,
                    ..StepOutcome::default()
                };
            }
            Err(problem) if fixes_left > 0 => {
                fixes_left -= 1;
                // The fix turns come on top of max_turns: the step did finish its work.
                turn_limit = turn_limit.max(progress.turns()) + 1;
                input
                    .transcript
                    .write(json!({"type": "output_invalid", "turn": turn, "error": problem}));
                messages.push(Message::user_text(format!(
                    "Your final answer does not match the required JSON Schema: {problem}\nAnswer again with only the corrected JSON value."
                )));
            }
            Err(problem) => {
                return StepOutcome {
                    summary: text,
                    ..StepOutcome::failed(format!(
                        "the final answer does not match `output_schema` after {OUTPUT_FIX_TURNS} more tries: {problem}"
                    ))
                };
            }
        }
    }
    let error = format!(
        "reached max_turns ({}) without a final answer",
        input.max_turns
    );
    input
        .transcript
        .write(json!({"type": "error", "error": error}));
    StepOutcome::failed(error)
}
