//! The agent loop for one step: its own conversation, model turns until a turn has no tool calls,
//! tool calls dispatched through the step's allowlist. Everything that happens is an event
//! ([`crate::event`]); how the step ended is a [`StepOutcome`].

pub mod checks;
pub mod output;
pub mod prompt;
pub mod subagent;
pub mod text_call;

use std::time::Instant;

use serde_json::Value;

use crate::event::{Emitter, EventKind};
use crate::provider::message::{Block, ChatRequest, Message, Role, StopReason, Usage};
use crate::provider::retry::{self, RetryPolicy};
use crate::provider::{ModelApi, Outgoing};
use crate::tools::StepTools;

/// Output tokens per model request when neither the step nor `[defaults]` sets `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
/// Extra turns a step gets to fix a final answer that does not match its `output_schema`.
pub const OUTPUT_FIX_TURNS: u32 = 2;
/// The same call with the same input this many times in a row is answered with an error
/// instead of being run again (README "Agents that loop or run out of turns").
pub const MAX_SAME_CALLS: u32 = 3;
/// Tool calls of one reply that are run; the rest are answered with an error the model can
/// read (a reply of thousands of calls would otherwise hold thousands of outputs at once).
pub const MAX_CALLS_PER_REPLY: usize = 64;

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
    /// A tool broke (an MCP server crashed, hung or answered garbage).
    Tool,
    /// A token or cost budget was used up.
    Budget,
    /// Its checks still failed after the last round.
    Checks,
    /// A command step's command did not exit 0.
    Command,
    /// A `for_each` list could not be made into instances.
    FanOut,
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

/// What one step's (or subagent's) conversation needs.
pub struct Session<'a> {
    pub api: &'a dyn ModelApi,
    pub model: &'a str,
    pub system: String,
    /// A conversation to go on from (a resumed or forked subagent); empty for a fresh one.
    pub history: Vec<Message>,
    /// The first message, or the next one after `history`.
    pub first_message: String,
    pub max_turns: u32,
    pub max_tokens: u32,
    pub retries: u32,
    pub output_schema: Option<&'a Value>,
    pub tools: &'a StepTools,
    pub events: &'a Emitter,
    /// The budgets every request is checked against and every reply charged to.
    pub meter: &'a crate::budget::Meter,
    /// Commands that must pass after the final answer (none for subagents).
    pub checks: &'a [crate::plan::Check],
    /// How many failed rounds of checks go back to the model.
    pub check_retries: u32,
}

/// Runs a turn's tool calls: `task` calls all at once (each is a subagent, and they are
/// independent by design), the others one after another in order, alongside. Results come back
/// in the order of the calls.
async fn call_tools(
    session: &Session<'_>,
    step: &str,
    turn: u32,
    calls: Vec<(String, String, Value)>,
    refused: &[Option<String>],
) -> (Vec<Block>, Option<String>) {
    let one = |id: String, name: String, input: Value, refused: Option<String>| async move {
        session.events.emit(EventKind::ToolStarted {
            step: step.to_owned(),
            turn,
            id: id.clone(),
            name: name.clone(),
            input: input.clone(),
        });
        let started = Instant::now();
        let mut output = match refused {
            Some(why) => crate::tools::ToolOutput::error(why),
            None => session.tools.call(&name, &input).await,
        };
        // The conversation keeps this text for the rest of the step: no spare capacity with it.
        output.text.shrink_to_fit();
        session.events.emit(EventKind::ToolFinished {
            step: step.to_owned(),
            turn,
            id: id.clone(),
            name,
            is_error: output.is_error,
            duration_ms: started.elapsed().as_millis() as u64,
            output: output.text.clone(),
        });
        let fatal = output.fatal.then(|| output.text.clone());
        (
            Block::ToolResult {
                tool_use_id: id,
                content: output.text,
                is_error: output.is_error,
            },
            fatal,
        )
    };
    let is_task = |name: &str| {
        matches!(session.tools.registry.entry(name),
            crate::tools::ToolEntry::Tool(tool) if tool == crate::tools::TASK)
    };
    let mut tasks = Vec::new();
    let mut others = Vec::new();
    for (i, (id, name, input)) in calls.into_iter().enumerate() {
        let refused = refused.get(i).cloned().flatten();
        if is_task(&name) {
            tasks.push((i, one(id, name, input, refused)));
        } else {
            others.push((i, id, name, input, refused));
        }
    }
    let sequential = async {
        let mut done = Vec::with_capacity(others.len());
        for (i, id, name, input, refused) in others {
            done.push((i, one(id, name, input, refused).await));
        }
        done
    };
    let (indexes, futures): (Vec<usize>, Vec<_>) = tasks.into_iter().unzip();
    let (mut done, concurrent) =
        futures_util::future::join(sequential, futures_util::future::join_all(futures)).await;
    done.extend(indexes.into_iter().zip(concurrent));
    done.sort_by_key(|(i, _)| *i);
    let fatal = done.iter().find_map(|(_, (_, fatal))| fatal.clone());
    (
        done.into_iter().map(|(_, (block, _))| block).collect(),
        fatal,
    )
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How a conversation ended, and what it was.
#[derive(Debug, Clone)]
pub struct Conversation {
    pub outcome: StepOutcome,
    /// Every message, the last reply included (a resumed subagent goes on from here).
    pub messages: Vec<Message>,
    pub turns: u32,
    pub tool_calls: u32,
    pub usage: Usage,
}

pub async fn run(session: Session<'_>) -> StepOutcome {
    converse(session).await.outcome
}

/// Appends a user message, joining it to a user message already at the end (both APIs want turns
/// to alternate).
pub fn push_user_text(messages: &mut Vec<Message>, text: String) {
    match messages.last_mut() {
        Some(last) if last.role == Role::User => last.content.push(Block::Text { text }),
        _ => messages.push(Message::user_text(text)),
    }
}

pub async fn converse(mut session: Session<'_>) -> Conversation {
    let definitions = session.tools.definitions();
    session.events.emit(EventKind::SessionStarted {
        step: session.events.step().to_owned(),
        model: session.model.to_owned(),
        system: session.system.clone(),
        tools: definitions.clone(),
        max_tokens: session.max_tokens,
    });
    let mut history = std::mem::take(&mut session.history);
    push_user_text(&mut history, std::mem::take(&mut session.first_message));
    // The one copy of the conversation: the loop adds to it, and it is what the caller gets.
    let mut request = ChatRequest {
        model: session.model.to_owned(),
        system: std::mem::take(&mut session.system),
        messages: history,
        tools: definitions,
        max_tokens: session.max_tokens,
        no_tool_calls: false,
    };
    let mut turns = 0;
    let mut tool_calls = 0;
    let mut usage = Usage::default();
    let outcome = turns_until_done(
        session,
        &mut turns,
        &mut tool_calls,
        &mut usage,
        &mut request,
    )
    .await;
    Conversation {
        outcome,
        messages: request.messages,
        turns,
        tool_calls,
        usage,
    }
}

async fn turns_until_done(
    session: Session<'_>,
    turns: &mut u32,
    tool_calls: &mut u32,
    usage: &mut Usage,
    request: &mut ChatRequest,
) -> StepOutcome {
    let step = session.events.step().to_owned();
    let emit = |kind: EventKind| session.events.emit(kind);
    let policy = RetryPolicy::new(session.retries);
    // Messages already in an earlier TurnStarted event.
    let mut logged = 0;
    let mut fixes_left = if session.output_schema.is_some() {
        OUTPUT_FIX_TURNS
    } else {
        0
    };
    let mut turn_limit = session.max_turns;
    let mut turn = 0;
    let mut check_round = 0;
    let mut last_failure: Option<checks::Failure> = None;
    // The newest call's name and input, and how many times in a row it was made.
    let mut same: Option<(String, Value, u32)> = None;
    while turn < turn_limit {
        // Before every request: a budget is passed by at most the replies already coming.
        if let Err(used_up) = session.meter.check() {
            return StepOutcome::failed(FailureKind::Budget, used_up);
        }
        turn += 1;
        *turns = turn;
        // The last allowed turn asks for the answer with what the agent has, offering the
        // tools (the cached prefix holds them) but allowing no call: a step out of turns ends
        // with an answer rather than nothing.
        if turn == turn_limit && turn > 1 && !request.tools.is_empty() && !request.no_tool_calls {
            request.no_tool_calls = true;
            emit(EventKind::OutOfTurns {
                step: step.clone(),
                turn,
            });
            push_user_text(
                &mut request.messages,
                format!(
                    "This is your last turn (max_turns = {}): no more tool calls. Give your final answer now with what you have found, and say plainly what is left undone.",
                    session.max_turns
                ),
            );
        }
        let body = session.api.encode(request);
        emit(EventKind::TurnStarted {
            step: step.clone(),
            turn,
            messages: request.messages[logged..].to_vec(),
            digest: body.digest().to_owned(),
        });
        logged = request.messages.len();
        let started = Instant::now();
        // Streamed replies show as they arrive, about every 25 tokens (4 characters a token).
        let shown = std::sync::atomic::AtomicU64::new(0);
        let arriving = |chars: usize| {
            let tokens = chars as u64 / 4;
            if tokens >= shown.load(std::sync::atomic::Ordering::Relaxed) + 25 {
                shown.store(tokens, std::sync::atomic::Ordering::Relaxed);
                session.events.emit(EventKind::TokensArriving {
                    step: step.clone(),
                    turn,
                    output_tokens: tokens,
                });
            }
        };
        let sent = retry::send(
            session.api,
            Outgoing {
                request,
                body: &body,
            },
            policy,
            |note| {
                emit(EventKind::Retrying {
                    step: step.clone(),
                    turn,
                    attempt: note.attempt,
                    delay_ms: note.delay.as_millis() as u64,
                    error: note.error.to_string(),
                });
            },
            &arriving,
        )
        .await;
        drop(body);
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
        usage.add(&response.usage);
        let cost_usd = session.meter.charge(&response.usage);
        emit(EventKind::TurnFinished {
            step: step.clone(),
            turn,
            duration_ms: started.elapsed().as_millis() as u64,
            usage: response.usage,
            cost_usd,
            body: exchange.raw,
        });
        let mut response = response;
        let mut calls: Vec<(String, String, Value)> = response
            .tool_uses()
            .map(|(id, name, input)| (id.to_owned(), name.to_owned(), input.clone()))
            .collect();
        if request.no_tool_calls && !calls.is_empty() {
            // A server that ignored `tool_choice`: the calls are not run, and text that came
            // with them ("Let me look.") is no answer.
            return StepOutcome::failed(
                FailureKind::MaxTurns,
                format!(
                    "reached max_turns ({}): asked for its final answer on its last turn, with no tools, it called tools again",
                    session.max_turns
                ),
            );
        } else if calls.is_empty()
            && let Some((name, input)) = text_call::parse(&response.text(), &request.tools)
        {
            emit(EventKind::ToolCallInText {
                step: step.clone(),
                turn,
                name: name.clone(),
            });
            let id = format!("call_text_{turn}");
            response.content = vec![Block::ToolUse {
                id: id.clone(),
                name: name.clone(),
                input: input.clone(),
            }];
            calls.push((id, name, input));
        }
        // The final answer's text is read before the reply's blocks move into the conversation.
        let text = if calls.is_empty() {
            response.text()
        } else {
            String::new()
        };
        let stop_reason = response.stop_reason;
        if !response.content.is_empty() {
            request.messages.push(Message {
                role: Role::Assistant,
                content: response.content,
            });
        }
        if !calls.is_empty() {
            *tool_calls += calls.len() as u32;
            // A forked subagent starts from the conversation as it stands: it is lent to the
            // tools while they run (moved, not copied) and taken back after.
            let shared = &session.tools.context.conversation;
            *lock(shared) = Some(std::mem::take(request));
            let total = calls.len();
            let refused: Vec<Option<String>> = calls
                .iter()
                .enumerate()
                .map(|(i, (_, name, input))| {
                    if i >= MAX_CALLS_PER_REPLY {
                        return Some(format!(
                            "not run: a reply may make at most {MAX_CALLS_PER_REPLY} tool calls, and this one made {total}; make the calls you still need in your next turn"
                        ));
                    }
                    let count = match &same {
                        Some((n, i, count)) if n == name && i == input => count + 1,
                        _ => 1,
                    };
                    same = Some((name.clone(), input.clone(), count));
                    (count >= MAX_SAME_CALLS).then(|| format!(
                        "`{name}` was called with exactly this input {MAX_SAME_CALLS} times in a row, and its output is above: it was not run again. Use what it returned, or do something else."
                    ))
                })
                .collect();
            let (results, fatal) = call_tools(&session, &step, turn, calls, &refused).await;
            let Some(back) = lock(shared).take() else {
                // Nothing else takes it: the tools only read it while they run.
                return StepOutcome::failed(
                    FailureKind::Crashed,
                    "the conversation was lost while its tools ran",
                );
            };
            *request = back;
            request.messages.push(Message {
                role: Role::User,
                content: results,
            });
            if let Some(message) = fatal {
                return StepOutcome::failed(FailureKind::Tool, message);
            }
            continue;
        }
        match stop_reason {
            // The server paused a long turn; sending the conversation back lets it go on.
            StopReason::PauseTurn => continue,
            StopReason::MaxTokens => {
                return StepOutcome::Failed {
                    kind: FailureKind::CutOff,
                    message: cut_off(&response.usage, session.max_tokens),
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
        let output = match session.output_schema {
            None => Value::Null,
            Some(schema) => match output::check(&text, schema) {
                Ok(value) => value,
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
                    continue;
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
            },
        };
        if session.checks.is_empty() {
            return StepOutcome::Succeeded {
                summary: text,
                output,
            };
        }
        // Checks count against the step's turns: a fix is one more request like any other.
        check_round += 1;
        let rounds = session.check_retries.saturating_add(1);
        match checks::run_round(session.checks, check_round, session.tools, session.events).await {
            None => {
                return StepOutcome::Succeeded {
                    summary: text,
                    output,
                };
            }
            Some(failure) if check_round < rounds => {
                push_user_text(&mut request.messages, failure.feedback(check_round, rounds));
                last_failure = Some(failure);
            }
            Some(failure) => {
                return StepOutcome::Failed {
                    kind: FailureKind::Checks,
                    message: failure.message(),
                    summary: text,
                };
            }
        }
    }
    if request.no_tool_calls {
        return StepOutcome::failed(
            FailureKind::MaxTurns,
            format!(
                "reached max_turns ({}): its last turn, asked for the final answer, gave none",
                session.max_turns
            ),
        );
    }
    if let Some(failure) = last_failure {
        return StepOutcome::failed(
            FailureKind::MaxTurns,
            format!(
                "reached max_turns ({}) while fixing failed checks; last: {}",
                session.max_turns,
                failure.message()
            ),
        );
    }
    StepOutcome::failed(
        FailureKind::MaxTurns,
        format!(
            "reached max_turns ({}) without a final answer",
            session.max_turns
        ),
    )
}

/// Why a reply stopped for length, naming the real limit: `max_tokens` when the reply reached
/// it, else the model's context (a local server's context is often far smaller than the
/// prompt and `max_tokens` together).
fn cut_off(usage: &Usage, max_tokens: u32) -> String {
    if usage.output_tokens >= u64::from(max_tokens) || usage.output_tokens == 0 {
        return format!(
            "the model's answer was cut off at max_tokens ({max_tokens}); raise `max_tokens`"
        );
    }
    format!(
        "the model's answer was cut off after {} tokens, below max_tokens ({max_tokens}): the model's context is full ({} prompt + {} reply tokens); use a model or server with a larger context window",
        usage.output_tokens,
        usage.total_input(),
        usage.output_tokens
    )
}
