//! The agent loop for one step: its own conversation, model turns until a turn has no tool calls,
//! tool calls dispatched through the step's allowlist. Everything that happens is an event
//! ([`crate::event`]); how the step ended is a [`StepOutcome`].

pub mod agent_memory;
pub mod checks;
pub mod context;
pub mod gate;
pub mod output;
pub mod prompt;
pub mod subagent;
pub mod text_call;

use std::ops::ControlFlow;
use std::time::Instant;

use serde_json::Value;

use crate::event::{Emitter, EventKind};
use crate::provider::message::{
    Block, ChatRequest, ChatResponse, Message, Role, StopReason, Usage,
};
use crate::provider::retry::{self, RetryPolicy};
use crate::provider::{ModelApi, Outgoing, ProviderError};
use crate::tools::StepTools;

/// Output tokens per model request when neither the step nor `[defaults]` sets `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
/// Extra turns a step gets to fix a final answer that does not match its `output_schema`.
pub const OUTPUT_FIX_TURNS: u32 = 2;
/// The same call with the same input this many times in a row is answered with an error
/// instead of being run again (docs/src/runs.md, "Agents that loop or run out of turns").
pub const MAX_SAME_CALLS: u32 = 3;
/// Refusals of a repeated call in a row after which the step goes to its last turn: a model
/// that keeps making a refused call would otherwise spend a full request on each until
/// `max_turns` (docs/src/runs.md, "Agents that loop or run out of turns").
pub const MAX_REFUSED_REPEATS: u32 = 3;
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
    /// The conversation could not be kept inside the model's window.
    ContextExhausted,
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
    /// Where a history shared with siblings ends (a fork's caller's): a cache breakpoint too.
    pub shared_until: Option<usize>,
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
    /// The context window the conversation is kept inside.
    pub window: context::Window,
    /// The agent's `effort`, sent with every request.
    pub effort: Option<crate::provider::message::Effort>,
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
            refused: output.refused,
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
    let first = std::mem::take(&mut session.first_message);
    if !first.is_empty() {
        push_user_text(&mut history, first);
    }
    // The one copy of the conversation: the loop adds to it, and it is what the caller gets.
    let mut request = ChatRequest {
        model: session.model.to_owned(),
        system: std::mem::take(&mut session.system),
        messages: history,
        tools: definitions,
        max_tokens: session.max_tokens,
        no_tool_calls: false,
        shared_until: session.shared_until,
        answer_schema: None,
        effort: session.effort,
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

/// The conversation's turns until it ends: each turn asks the model, then runs the reply's tool
/// calls, or takes its final answer through the output schema and the checks. Each part is a
/// method of [`Turns`], which holds what the loop carries from one turn to the next.
async fn turns_until_done(
    session: Session<'_>,
    turns: &mut u32,
    tool_calls: &mut u32,
    usage: &mut Usage,
    request: &mut ChatRequest,
) -> StepOutcome {
    let mut state = Turns {
        step: session.events.step().to_owned(),
        policy: RetryPolicy::new(session.retries),
        logged: 0,
        fixes_left: if session.output_schema.is_some() {
            OUTPUT_FIX_TURNS
        } else {
            0
        },
        turn_limit: session.max_turns,
        turn: 0,
        check_round: 0,
        last_failure: None,
        same: None,
        wrap_up: None,
        fixing: false,
        estimate: context::Estimate::default(),
        first_request: true,
        given: text_call::Given::default(),
        session: &session,
    };
    while state.turn < state.turn_limit {
        // Before every request: a budget is passed by at most the replies already coming.
        if let Err(used_up) = session.meter.check() {
            return StepOutcome::failed(FailureKind::Budget, used_up);
        }
        state.turn += 1;
        *turns = state.turn;
        state.wrap_up_if_due(request);
        state.last_turn_if_due(request);
        if let ControlFlow::Break(outcome) = state.fit(request, usage).await {
            return outcome;
        }
        // Only on this request: a fork that reads the conversation, a compaction summary and
        // the next turn do not carry it.
        request.answer_schema = state.answer_schema(request);
        let asked = state.ask(request, usage).await;
        request.answer_schema = None;
        let mut response = match asked {
            Ok(response) => response,
            // The provider's word wins: it teaches the window, the conversation is compacted
            // to fit it, and the request goes once more.
            Err(failure) if matches!(failure.error, ProviderError::ContextTooLong { .. }) => {
                match state.refit(request, usage, &failure).await {
                    ControlFlow::Continue(response) => response,
                    ControlFlow::Break(outcome) => return outcome,
                }
            }
            Err(failure) => return model_failed(&failure),
        };
        let calls = match state.calls_of(&mut response, request) {
            ControlFlow::Continue(calls) => calls,
            ControlFlow::Break(outcome) => return outcome,
        };
        // The final answer's text is read before the reply's blocks move into the conversation.
        let text = if calls.is_empty() {
            response.text()
        } else {
            String::new()
        };
        let (stop_reason, reply_usage) = (response.stop_reason, response.usage);
        if !response.content.is_empty() {
            request.messages.push(Message {
                role: Role::Assistant,
                content: response.content,
            });
        }
        if !calls.is_empty() {
            *tool_calls += calls.len() as u32;
            if let ControlFlow::Break(outcome) = state.run_calls(request, calls).await {
                return outcome;
            }
            continue;
        }
        // The server paused a long turn; sending the conversation back lets it go on.
        if stop_reason == StopReason::PauseTurn {
            continue;
        }
        if let ControlFlow::Break(outcome) = state.stopped(stop_reason, &reply_usage, &text) {
            return outcome;
        }
        let output = match state.output(&text, request) {
            ControlFlow::Continue(Some(output)) => output,
            ControlFlow::Continue(None) => continue,
            ControlFlow::Break(outcome) => return outcome,
        };
        if let ControlFlow::Break(outcome) = state.verify(text, output, request).await {
            return outcome;
        }
    }
    state.out_of_turns(request)
}

/// What the loop carries from one turn to the next.
struct Turns<'s, 'a> {
    session: &'s Session<'a>,
    step: String,
    policy: RetryPolicy,
    /// Messages already in an earlier `TurnStarted` event.
    logged: usize,
    /// Turns left to fix a final answer that does not match the output schema.
    fixes_left: u32,
    turn_limit: u32,
    turn: u32,
    check_round: u32,
    last_failure: Option<checks::Failure>,
    /// The newest call's name and input, and how many times in a row it was made.
    same: Option<(String, Value, u32)>,
    /// The call refused [`MAX_REFUSED_REPEATS`] times in a row, once it was: the next turn is
    /// the last.
    wrap_up: Option<String>,
    /// The last answer did not match the output schema: the next turn asks for it fixed.
    fixing: bool,
    /// What the last reply said of its request's size.
    estimate: context::Estimate,
    /// The conversation's first request waits at the prefix gate ([`gate`]).
    first_request: bool,
    /// The calls that text given to the model holds: a reply quoting one is not run.
    given: text_call::Given,
}

/// A reply in flight. Dropped while armed (its future dropped by the step's `timeout` or an
/// interrupt), it records the reply's tokens as estimated: the request's from the conversation's
/// size, the reply's from the text streamed so far (4 characters a token), since the provider
/// reports usage only with the reply's end (OpenAI-compatible servers in the last chunk). They
/// are charged to the budgets and counted in the step's record, marked `tokens_estimated`.
struct CutOff<'s, 'a> {
    session: &'s Session<'a>,
    step: &'s str,
    turn: u32,
    input_tokens: u64,
    streamed: &'s std::sync::atomic::AtomicUsize,
    /// Whether the reply began to stream: a request cut off before that has no reply to count.
    began: std::sync::atomic::AtomicBool,
    started: Instant,
    armed: bool,
}

impl CutOff<'_, '_> {
    fn usage(&self, chars: usize) -> Usage {
        Usage {
            input_tokens: self.input_tokens,
            output_tokens: chars.div_ceil(4) as u64,
            ..Usage::default()
        }
    }
}

impl Drop for CutOff<'_, '_> {
    fn drop(&mut self) {
        if !self.armed || !self.began.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let usage = self.usage(self.streamed.load(std::sync::atomic::Ordering::Relaxed));
        let cost_usd = self.session.meter.charge(&usage);
        self.session.events.emit(EventKind::TurnFinished {
            step: self.step.to_owned(),
            turn: self.turn,
            duration_ms: self.started.elapsed().as_millis() as u64,
            usage,
            cost_usd,
            body: Value::Null.into(),
            cut_off: true,
        });
    }
}

/// A model request that failed for good.
fn model_failed(failure: &retry::ModelFailure) -> StepOutcome {
    StepOutcome::failed(
        FailureKind::Model,
        format!("model request failed: {failure}"),
    )
}

impl Turns<'_, '_> {
    fn emit(&self, kind: EventKind) {
        self.session.events.emit(kind);
    }

    /// After [`MAX_REFUSED_REPEATS`] refusals of a repeated call in a row, the next turn is the
    /// last: the wrap-up turn `max_turns` gives (the tools offered, no call allowed), so the step
    /// ends with an answer instead of a full request for each refusal until `max_turns`.
    fn wrap_up_if_due(&mut self, request: &mut ChatRequest) {
        let Some(name) = &self.wrap_up else { return };
        if request.tools.is_empty() || request.no_tool_calls {
            return;
        }
        request.no_tool_calls = true;
        self.turn_limit = self.turn;
        self.emit(EventKind::RepeatsRefused {
            step: self.step.clone(),
            turn: self.turn,
            name: name.clone(),
            refusals: MAX_REFUSED_REPEATS,
        });
        push_user_text(
            &mut request.messages,
            format!(
                "`{name}` was called with the same input and refused {MAX_REFUSED_REPEATS} times in a row, so this is your last turn: no more tool calls. Give your final answer now with what you have found, and say plainly what is left undone."
            ),
        );
    }

    /// The output schema to hold this turn's answer to, where the API can (docs/src/models.md,
    /// "Structured output"): on a turn that can only be answered in text (no tools, or none
    /// callable: the last turn) and on a turn that asks for a fixed answer. A turn that offers
    /// callable tools gets none: llama.cpp applies the grammar to the whole reply, so the model
    /// could no longer call them.
    fn answer_schema(&mut self, request: &ChatRequest) -> Option<Value> {
        let schema = self.session.output_schema?;
        let fixing = std::mem::take(&mut self.fixing);
        (request.tools.is_empty() || request.no_tool_calls || fixing).then(|| schema.clone())
    }

    /// How the step came to its last turn, for the errors of a last turn that gave no answer.
    fn last_turn_cause(&self) -> String {
        match &self.wrap_up {
            Some(name) => format!(
                "sent to its last turn after `{name}` was refused {MAX_REFUSED_REPEATS} times in a row"
            ),
            None => format!("reached max_turns ({})", self.session.max_turns),
        }
    }

    /// The last allowed turn asks for the answer with what the agent has, offering the tools
    /// (the cached prefix holds them) but allowing no call: a step out of turns ends with an
    /// answer rather than nothing.
    fn last_turn_if_due(&self, request: &mut ChatRequest) {
        let turn = self.turn;
        if turn != self.turn_limit || turn <= 1 || request.tools.is_empty() || request.no_tool_calls
        {
            return;
        }
        request.no_tool_calls = true;
        self.emit(EventKind::OutOfTurns {
            step: self.step.clone(),
            turn,
        });
        push_user_text(
            &mut request.messages,
            prompt::last_turn_note(self.session.max_turns),
        );
    }

    /// One request, retried as its errors allow, with its `TurnStarted` and `TurnFinished`.
    async fn ask(
        &mut self,
        request: &ChatRequest,
        usage: &mut Usage,
    ) -> Result<ChatResponse, retry::ModelFailure> {
        let session = self.session;
        // The first request waits for a sibling's with the same cacheable prefix to begin.
        let first = std::mem::take(&mut self.first_request);
        let opener =
            if first && gate::worth_waiting(request, session.api.min_cacheable(session.model)) {
                gate::enter(gate::key(request, &self.step)).await
            } else {
                None
            };
        let (step, turn) = (&self.step, self.turn);
        // What the model is given, learnt before its reply can quote it.
        self.given.learn(request, self.logged);
        let body = session.api.encode(request);
        self.emit(EventKind::TurnStarted {
            step: step.clone(),
            turn,
            messages: request.messages[self.logged..].to_vec(),
            digest: body.digest().to_owned(),
        });
        self.logged = request.messages.len();
        let started = Instant::now();
        // Streamed replies show as they arrive, about every 25 tokens (4 characters a token).
        let shown = std::sync::atomic::AtomicU64::new(0);
        let streamed = std::sync::atomic::AtomicUsize::new(0);
        // Dropped with this future when the step times out or is interrupted mid-reply: what
        // had streamed is charged and counted then (docs/src/runs.md "Scheduling and failures").
        let mut cut = CutOff {
            session,
            step,
            turn,
            input_tokens: self.estimate.tokens(request),
            streamed: &streamed,
            began: std::sync::atomic::AtomicBool::new(false),
            started,
            armed: true,
        };
        let arriving = |chars: usize| {
            streamed.store(chars, std::sync::atomic::Ordering::Relaxed);
            cut.began.store(true, std::sync::atomic::Ordering::Relaxed);
            session.events.streaming(cut.usage(chars));
            // The reply has begun: the provider holds the prefix now.
            if let Some(opener) = &opener {
                opener.open();
            }
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
            self.policy,
            |note| {
                session.events.emit(EventKind::Retrying {
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
        cut.armed = false;
        drop(body);
        drop(opener);
        let exchange = sent?;
        self.estimate = context::Estimate::reported(
            exchange.response.usage.total_input(),
            context::bytes_of(request),
        );
        usage.add(&exchange.response.usage);
        let cost_usd = session.meter.charge(&exchange.response.usage);
        self.emit(EventKind::TurnFinished {
            step: step.clone(),
            turn,
            duration_ms: started.elapsed().as_millis() as u64,
            usage: exchange.response.usage,
            cost_usd,
            body: exchange.raw,
            cut_off: false,
        });
        Ok(exchange.response)
    }

    /// Keeps the next request inside the window: past half of it, old tool results are
    /// cleared; past `compact_at`, the conversation is compacted.
    async fn fit(
        &mut self,
        request: &mut ChatRequest,
        usage: &mut Usage,
    ) -> ControlFlow<StepOutcome> {
        let window = self.session.window.learnt(self.session.model);
        let before = self.estimate.tokens(request);
        // One batch down to the low-water mark, and only when it pays for the cache it breaks
        // (docs/src/runs.md, "Context that lasts").
        let clearing = (before > window.clear_above())
            .then(|| context::clearing(&request.messages, &window, before))
            .flatten()
            .filter(context::Clearing::pays);
        if let Some(clearing) = clearing {
            request.messages = clearing.messages;
            // A breakpoint on the newest message an earlier request sent before the first one
            // changed: its prefix is cached, and the next request reads it from there.
            request.shared_until = clearing.first.checked_sub(2);
            let after = self.estimate.tokens(request);
            // Earlier messages changed: the next request is logged whole.
            self.logged = 0;
            self.emit(EventKind::ContextCleared {
                step: self.step.clone(),
                turn: self.turn,
                cleared: clearing.cleared as u32,
                tokens_before: before,
                tokens_after: after,
            });
        }
        if self.estimate.tokens(request) <= window.compact_above() {
            return ControlFlow::Continue(());
        }
        self.compact(request, usage, window).await
    }

    /// The step's own model summarises the work (the same system prompt and tools, so the
    /// cached prefix serves the request) and the conversation restarts from the first message,
    /// the summary and the newest turn. One that cannot make room fails the step.
    async fn compact(
        &mut self,
        request: &mut ChatRequest,
        usage: &mut Usage,
        window: context::Window,
    ) -> ControlFlow<StepOutcome> {
        let before = self.estimate.tokens(request);
        let exhausted = |why: String| {
            ControlFlow::Break(StepOutcome::failed(
                FailureKind::ContextExhausted,
                format!(
                    "context exhausted: {why} (context_window {}; the transcript keeps the conversation)",
                    window.tokens
                ),
            ))
        };
        let mut asking = request.clone();
        push_user_text(&mut asking.messages, context::SUMMARY_REQUEST.to_owned());
        // A summary is text, not the step's answer.
        asking.answer_schema = None;
        asking.no_tool_calls = !asking.tools.is_empty();
        if self.estimate.tokens(&asking) > window.tokens {
            // Over the window even to ask: the old results go, all but the newest.
            let _ = context::clear_old_results(&mut asking.messages, 1);
            if self.estimate.tokens(&asking) > window.tokens {
                return exhausted(format!(
                    "{before} tokens, and too large to summarise even with old tool results cleared"
                ));
            }
        }
        self.logged = 0;
        let summary = match self.ask(&asking, usage).await {
            Ok(reply) => reply.text(),
            Err(failure) => {
                return exhausted(format!("the summary request failed: {failure}"));
            }
        };
        if summary.trim().is_empty() {
            return exhausted("the model gave no summary".to_owned());
        }
        request.messages = context::compacted(&request.messages, &summary);
        request.shared_until = None;
        let after = self.estimate.tokens(request);
        self.logged = 0;
        self.emit(EventKind::ContextCompacted {
            step: self.step.clone(),
            turn: self.turn,
            tokens_before: before,
            tokens_after: after,
        });
        if after > window.tokens || before.saturating_sub(after) < before / 5 {
            return exhausted(format!(
                "compacting freed too little ({before} to {after} tokens)"
            ));
        }
        ControlFlow::Continue(())
    }

    /// After a refusal for length: the window it teaches, a compaction to fit it, one retry.
    async fn refit(
        &mut self,
        request: &mut ChatRequest,
        usage: &mut Usage,
        failure: &retry::ModelFailure,
    ) -> ControlFlow<StepOutcome, ChatResponse> {
        // Refused before any turn: there is nothing to compact, the prompt alone is too long.
        if !request.messages.iter().any(|m| m.role == Role::Assistant) {
            return ControlFlow::Break(model_failed(failure));
        }
        let sent = self.estimate.tokens(request);
        let learnt = context::learn(self.session.model, sent, &failure.error.to_string());
        let window = self.session.window.learnt(self.session.model);
        self.emit(EventKind::Retrying {
            step: self.step.clone(),
            turn: self.turn,
            attempt: 1,
            delay_ms: 0,
            error: format!(
                "{}; the window is taken as {learnt} tokens and the conversation compacted",
                failure.error
            ),
        });
        if let ControlFlow::Break(outcome) = self.compact(request, usage, window).await {
            return ControlFlow::Break(outcome);
        }
        match self.ask(request, usage).await {
            Ok(response) => ControlFlow::Continue(response),
            Err(failure) => ControlFlow::Break(model_failed(&failure)),
        }
    }

    /// The reply's tool calls: its own, or one it wrote as text (a local model's habit), made
    /// into a call of an offered tool.
    fn calls_of(
        &self,
        response: &mut ChatResponse,
        request: &ChatRequest,
    ) -> ControlFlow<StepOutcome, Vec<(String, String, Value)>> {
        let mut calls: Vec<(String, String, Value)> = response
            .tool_uses()
            .map(|(id, name, input)| (id.to_owned(), name.to_owned(), input.clone()))
            .collect();
        if request.no_tool_calls && !calls.is_empty() {
            // A server that ignored `tool_choice`: the calls are not run, and text that came
            // with them ("Let me look.") is no answer.
            return ControlFlow::Break(StepOutcome::failed(
                FailureKind::MaxTurns,
                format!(
                    "{}: asked for its final answer on its last turn, with no tools, it called tools again",
                    self.last_turn_cause()
                ),
            ));
        }
        if !calls.is_empty() {
            return ControlFlow::Continue(calls);
        }
        let turn = text_call::Turn {
            request,
            output_schema: self.session.output_schema,
            given: &self.given,
        };
        match text_call::read(&response.text(), &turn) {
            text_call::Reading::Text => {}
            text_call::Reading::NotAllowed { name } => {
                return ControlFlow::Break(StepOutcome::failed(
                    FailureKind::MaxTurns,
                    format!(
                        "{}: asked for its final answer on its last turn, with no tools, it wrote a call of `{name}` as text",
                        self.last_turn_cause()
                    ),
                ));
            }
            text_call::Reading::Call { name, input } => {
                self.emit(EventKind::ToolCallInText {
                    step: self.step.clone(),
                    turn: self.turn,
                    name: name.clone(),
                });
                let id = format!("call_text_{}", self.turn);
                response.content = vec![Block::ToolUse {
                    id: id.clone(),
                    name: name.clone(),
                    input: input.clone(),
                }];
                calls.push((id, name, input));
            }
        }
        ControlFlow::Continue(calls)
    }

    /// Runs the calls and adds their results to the conversation; a tool's fatal error ends
    /// the step.
    async fn run_calls(
        &mut self,
        request: &mut ChatRequest,
        calls: Vec<(String, String, Value)>,
    ) -> ControlFlow<StepOutcome> {
        let session = self.session;
        let refused = self.refusals(&calls);
        // A forked subagent starts from the conversation as it stands: it is lent to the tools
        // while they run (moved, not copied) and taken back after.
        let shared = &session.tools.context.conversation;
        *lock(shared) = Some(std::mem::take(request));
        let (results, fatal) = call_tools(session, &self.step, self.turn, calls, &refused).await;
        let Some(back) = lock(shared).take() else {
            // Nothing else takes it: the tools only read it while they run.
            return ControlFlow::Break(StepOutcome::failed(
                FailureKind::Crashed,
                "the conversation was lost while its tools ran",
            ));
        };
        *request = back;
        request.messages.push(Message {
            role: Role::User,
            content: results,
        });
        match fatal {
            Some(message) => ControlFlow::Break(StepOutcome::failed(FailureKind::Tool, message)),
            None => ControlFlow::Continue(()),
        }
    }

    /// Which calls are not run, and why: past the most a reply may make, or the same call made
    /// too many times in a row.
    fn refusals(&mut self, calls: &[(String, String, Value)]) -> Vec<Option<String>> {
        let total = calls.len();
        calls
            .iter()
            .enumerate()
            .map(|(i, (_, name, input))| {
                if i >= MAX_CALLS_PER_REPLY {
                    return Some(format!(
                        "not run: a reply may make at most {MAX_CALLS_PER_REPLY} tool calls, and this one made {total}; make the calls you still need in your next turn"
                    ));
                }
                let count = match &self.same {
                    Some((n, i, count)) if n == name && i == input => count + 1,
                    _ => 1,
                };
                self.same = Some((name.clone(), input.clone(), count));
                if count >= MAX_SAME_CALLS + MAX_REFUSED_REPEATS - 1 {
                    self.wrap_up = Some(name.clone());
                }
                (count >= MAX_SAME_CALLS).then(|| format!(
                    "`{name}` was called with exactly this input {MAX_SAME_CALLS} times in a row, and its output is above: it was not run again. Use what it returned, or do something else."
                ))
            })
            .collect()
    }

    /// A reply without calls that ends the step by how it stopped.
    fn stopped(
        &self,
        stop_reason: StopReason,
        usage: &Usage,
        text: &str,
    ) -> ControlFlow<StepOutcome> {
        match stop_reason {
            StopReason::MaxTokens => ControlFlow::Break(StepOutcome::Failed {
                kind: FailureKind::CutOff,
                message: cut_off(usage, self.session.max_tokens),
                summary: text.to_owned(),
            }),
            StopReason::Refusal => ControlFlow::Break(StepOutcome::failed(
                FailureKind::Refused,
                format!("the model refused: {text}"),
            )),
            _ => ControlFlow::Continue(()),
        }
    }

    /// The final answer's structured output, checked against the step's schema: `None` when a
    /// fix was asked for (the loop goes on).
    fn output(
        &mut self,
        text: &str,
        request: &mut ChatRequest,
    ) -> ControlFlow<StepOutcome, Option<Value>> {
        let Some(schema) = self.session.output_schema else {
            return ControlFlow::Continue(Some(Value::Null));
        };
        match output::check(text, schema) {
            Ok(value) => ControlFlow::Continue(Some(value)),
            Err(problem) if self.fixes_left > 0 => {
                self.fixes_left -= 1;
                // The fix turns come on top of max_turns: the step did finish its work.
                self.turn_limit = self.turn_limit.max(self.turn) + 1;
                self.emit(EventKind::OutputInvalid {
                    step: self.step.clone(),
                    turn: self.turn,
                    error: problem.clone(),
                });
                request.messages.push(Message::user_text(format!(
                    "Your final answer does not match the required JSON Schema: {problem}\nAnswer again with only the corrected JSON value."
                )));
                self.fixing = true;
                ControlFlow::Continue(None)
            }
            Err(problem) => ControlFlow::Break(StepOutcome::Failed {
                kind: FailureKind::OutputSchema,
                message: format!(
                    "the final answer does not match `output_schema` after {OUTPUT_FIX_TURNS} more tries: {problem}"
                ),
                summary: text.to_owned(),
            }),
        }
    }

    /// The step's checks on a final answer: success, a failure sent back to the agent (the
    /// loop goes on), or a failure that ends the step.
    async fn verify(
        &mut self,
        text: String,
        output: Value,
        request: &mut ChatRequest,
    ) -> ControlFlow<StepOutcome> {
        let session = self.session;
        if session.checks.is_empty() {
            return ControlFlow::Break(StepOutcome::Succeeded {
                summary: text,
                output,
            });
        }
        // Checks count against the step's turns: a fix is one more request like any other.
        self.check_round += 1;
        let (round, rounds) = (self.check_round, session.check_retries.saturating_add(1));
        match checks::run_round(session.checks, round, session.tools, session.events).await {
            None => ControlFlow::Break(StepOutcome::Succeeded {
                summary: text,
                output,
            }),
            Some(failure) if round < rounds => {
                push_user_text(&mut request.messages, failure.feedback(round, rounds));
                self.last_failure = Some(failure);
                ControlFlow::Continue(())
            }
            Some(failure) => ControlFlow::Break(StepOutcome::Failed {
                kind: FailureKind::Checks,
                message: failure.message(),
                summary: text,
            }),
        }
    }

    /// Why the step ended with its turns used up.
    fn out_of_turns(self, request: &ChatRequest) -> StepOutcome {
        let max_turns = self.session.max_turns;
        let message = if request.no_tool_calls {
            format!(
                "{}: its last turn, asked for the final answer, gave none",
                self.last_turn_cause()
            )
        } else if let Some(failure) = self.last_failure {
            format!(
                "reached max_turns ({max_turns}) while fixing failed checks; last: {}",
                failure.message()
            )
        } else {
            format!("reached max_turns ({max_turns}) without a final answer")
        };
        StepOutcome::failed(FailureKind::MaxTurns, message)
    }
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
