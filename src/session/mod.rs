//! The agent loop for one step: its own conversation, model turns until a turn has no tool calls,
//! tool calls dispatched through the step's allowlist. Everything that happens is an event
//! ([`crate::event`]); how the step ended is a [`StepOutcome`].

pub mod output;
pub mod prompt;

use std::time::Instant;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::event::{Emitter, EventKind};
use crate::provider::ModelApi;
use crate::provider::message::{Block, ChatRequest, Message, Role, StopReason};
use crate::provider::retry::{self, RetryPolicy};
use crate::tools::StepTools;

/// Output tokens per model request when neither the step nor `[defaults]` sets `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
/// Extra turns a step gets to fix a final answer that does not match its `output_schema`.
pub const OUTPUT_FIX_TURNS: u32 = 2;

/// Why a step failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// A model request failed for good.
    Model,
    /// The model refused.
    Refused,
    /// The answer was cut off at `max_tokens`.
    CutOff,
    MaxTurns,
    /// The final answer never matched `output_schema`.
    OutputSchema,
    Timeout,
    /// The step could not be set up (its directory, its provider).
    Setup,
    /// Its prompt did not render.
    Template,
    /// Its worktree could not be settled.
    Worktree,
    /// Its task panicked.
    Crashed,
}

/// How a step ended.
#[derive(Debug, Clone, PartialEq)]
pub enum StepOutcome {
    Succeeded {
        /// The final answer's text.
        summary: String,
        /// The parsed final answer, for steps with `output_schema`.
        output: Value,
    },
    Failed {
        kind: FailureKind,
        message: String,
        /// Whatever text the step had when it failed.
        summary: String,
    },
}

impl StepOutcome {
    pub fn succeeded(summary: impl Into<String>) -> Self {
        StepOutcome::Succeeded {
            summary: summary.into(),
            output: Value::Null,
        }
    }

    pub fn failed(kind: FailureKind, message: impl Into<String>) -> Self {
        StepOutcome::Failed {
            kind,
            message: message.into(),
            summary: String::new(),
        }
    }
}

/// What one step's conversation needs.
pub struct Session<'a> {
    pub api: &'a dyn ModelApi,
    pub model: &'a str,
    pub system: String,
    pub first_message: String,
    pub max_turns: u32,
    pub max_tokens: u32,
    pub retries: u32,
    pub output_schema: Option<&'a Value>,
    pub tools: &'a StepTools,
    pub events: &'a Emitter,
}

/// A digest of the neutral request, so a transcript can show which request a turn sent without
/// repeating the conversation.
fn digest(request: &ChatRequest) -> String {
    let bytes = serde_json::to_vec(request).unwrap_or_default();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub async fn run(session: Session<'_>) -> StepOutcome {
    let step = session.events.step().to_owned();
    let emit = |kind: EventKind| session.events.emit(kind);
    let definitions = session.tools.definitions();
    emit(EventKind::SessionStarted {
        step: step.clone(),
        model: session.model.to_owned(),
        system: session.system.clone(),
        tools: definitions.clone(),
        max_tokens: session.max_tokens,
    });
    let policy = RetryPolicy::new(session.retries);
    let mut request = ChatRequest {
        model: session.model.to_owned(),
        system: session.system.clone(),
        messages: vec![Message::user_text(session.first_message.clone())],
        tools: definitions,
        max_tokens: session.max_tokens,
    };
    // Messages already in an earlier TurnStarted event.
    let mut logged = 0;
    let mut fixes_left = if session.output_schema.is_some() {
        OUTPUT_FIX_TURNS
    } else {
        0
    };
    let mut turn_limit = session.max_turns;
    let mut turn = 0;
    while turn < turn_limit {
        turn += 1;
        emit(EventKind::TurnStarted {
            step: step.clone(),
            turn,
            messages: request.messages[logged..].to_vec(),
            digest: digest(&request),
        });
        logged = request.messages.len();
        let started = Instant::now();
        let sent = retry::send(session.api, &request, policy, |note| {
            emit(EventKind::Retrying {
                step: step.clone(),
                turn,
                attempt: note.attempt,
                delay_ms: note.delay.as_millis() as u64,
                error: note.error.to_string(),
            });
        })
        .await;
        let exchange = match sent {
            Ok(exchange) => exchange,
            Err(failure) => {
                return StepOutcome::failed(
                    FailureKind::Model,
                    format!("model request failed: {failure}"),
                );
            }
        };
        let response = exchange.response;
        emit(EventKind::TurnFinished {
            step: step.clone(),
            turn,
            duration_ms: started.elapsed().as_millis() as u64,
            usage: response.usage,
            body: exchange.raw,
        });
        let calls: Vec<(String, String, Value)> = response
            .tool_uses()
            .map(|(id, name, input)| (id.to_owned(), name.to_owned(), input.clone()))
            .collect();
        if !response.content.is_empty() {
            request.messages.push(Message {
                role: Role::Assistant,
                content: response.content.clone(),
            });
        }
        if !calls.is_empty() {
            let mut results = Vec::with_capacity(calls.len());
            for (id, name, input) in calls {
                emit(EventKind::ToolStarted {
                    step: step.clone(),
                    turn,
                    id: id.clone(),
                    name: name.clone(),
                    input: input.clone(),
                });
                let started = Instant::now();
                let output = session.tools.call(&name, &input).await;
                emit(EventKind::ToolFinished {
                    step: step.clone(),
                    turn,
                    id: id.clone(),
                    name,
                    is_error: output.is_error,
                    duration_ms: started.elapsed().as_millis() as u64,
                    output: output.text.clone(),
                });
                results.push(Block::ToolResult {
                    tool_use_id: id,
                    content: output.text,
                    is_error: output.is_error,
                });
            }
            request.messages.push(Message {
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
                return StepOutcome::Failed {
                    kind: FailureKind::CutOff,
                    message: format!(
                        "the model's answer was cut off at max_tokens ({}); raise `max_tokens`",
                        session.max_tokens
                    ),
                    summary: text,
                };
            }
            StopReason::Refusal => {
                return StepOutcome::failed(
                    FailureKind::Refused,
                    format!("the model refused: {text}"),
                );
            }
            _ => {}
        }
        let Some(schema) = session.output_schema else {
            return StepOutcome::succeeded(text);
        };
        match output::check(&text, schema) {
            Ok(value) => {
                return StepOutcome::Succeeded {
                    summary: text,
                    output: value,
                };
            }
            Err(problem) if fixes_left > 0 => {
                fixes_left -= 1;
                // The fix turns come on top of max_turns: the step did finish its work.
                turn_limit = turn_limit.max(turn) + 1;
                emit(EventKind::OutputInvalid {
                    step: step.clone(),
                    turn,
                    error: problem.clone(),
                });
                request.messages.push(Message::user_text(format!(
                    "Your final answer does not match the required JSON Schema: {problem}\nAnswer again with only the corrected JSON value."
                )));
            }
            Err(problem) => {
                return StepOutcome::Failed {
                    kind: FailureKind::OutputSchema,
                    message: format!(
                        "the final answer does not match `output_schema` after {OUTPUT_FIX_TURNS} more tries: {problem}"
                    ),
                    summary: text,
                };
            }
        }
    }
    StepOutcome::failed(
        FailureKind::MaxTurns,
        format!(
            "reached max_turns ({}) without a final answer",
            session.max_turns
        ),
    )
}
