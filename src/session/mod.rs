//! The agent loop for one step: its own conversation, model turns until a turn has no tool calls,
//! tool calls dispatched through the step's allowlist, usage counted, everything appended to the
//! step's transcript as it happens.

pub mod transcript;

use std::time::Instant;

use serde_json::json;

use crate::provider::client::{ModelClient, RetryPolicy};
use crate::provider::message::{Block, ChatRequest, Message, Role, StopReason, Usage};
use crate::tools::registry::ToolBox;
use transcript::Transcript;

/// Output tokens per model request when neither the step nor `[defaults]` sets `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// What one step needs to run.
pub struct StepInput<'a> {
    pub model: &'a str,
    pub system_prompt: String,
    pub prompt: String,
    pub max_turns: u32,
    pub max_tokens: u32,
    pub retries: u32,
    pub client: &'a ModelClient,
    pub tools: &'a ToolBox,
    pub transcript: &'a mut Transcript,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepOutcome {
    pub succeeded: bool,
    /// The final answer's text.
    pub summary: String,
    pub error: Option<String>,
    pub turns: u32,
    pub tool_calls: u32,
    pub usage: Usage,
}

/// The system prompt plus where and when the step runs.
pub fn system_prompt(agent_prompt: &str, workdir: &str) -> String {
    let date = jiff::ZonedDateTime::now().date();
    format!(
        "{agent_prompt}\n\n# Environment\nWorking directory: {workdir}\nPlatform: {}\nToday's date: {date}\nAll paths you use must be inside the working directory.",
        std::env::consts::OS
    )
}

pub async fn run_step(input: StepInput<'_>) -> StepOutcome {
    let mut outcome = StepOutcome::default();
    let mut messages = vec![Message::user_text(input.prompt.clone())];
    let definitions = input.tools.definitions();
    let policy = RetryPolicy::new(input.retries);
    while outcome.turns < input.max_turns {
        outcome.turns += 1;
        let turn = outcome.turns;
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
                outcome.error = Some(error);
                return outcome;
            }
        };
        outcome.usage.add(&response.usage);
        input.transcript.write(json!({
            "type": "response",
            "turn": turn,
            "duration_ms": started.elapsed().as_millis() as u64,
            "body": raw,
        }));

        let calls: Vec<(String, String, serde_json::Value)> = response
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
                outcome.tool_calls += 1;
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
        match response.stop_reason {
            // The server paused a long turn; sending the conversation back lets it go on.
            StopReason::PauseTurn => continue,
            StopReason::MaxTokens => {
                outcome.error = Some(format!(
                    "the model's answer was cut off at max_tokens ({}); raise `max_tokens`",
                    input.max_tokens
                ));
                outcome.summary = response.text();
                return outcome;
            }
            StopReason::Refusal => {
                outcome.error = Some(format!("the model refused: {}", response.text()));
                return outcome;
            }
            _ => {
                outcome.succeeded = true;
                outcome.summary = response.text();
                return outcome;
            }
        }
    }
    outcome.error = Some(format!(
        "reached max_turns ({}) without a final answer",
        input.max_turns
    ));
    input
        .transcript
        .write(json!({"type": "error", "error": outcome.error}));
    outcome
}
