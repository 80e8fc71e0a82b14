//! What happens in a run, as one stream of events. The scheduler and the agent loop emit them;
//! everything that shows or records a run (live progress, plain lines, `run.json`, transcripts,
//! JUnit) is a [`Sink`] of the stream, so a new display or record is one new sink. The sinks run
//! on a thread of their own ([`pump`]): emitting an event queues it and goes on.

pub mod line;
pub mod pump;

use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::provider::message::{Message, ToolDef, Usage};
use crate::record::{CheckRecord, RunRecord, StepRecord, SubagentRecord};

/// An event and when it happened.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// When it happened; written as RFC 3339, UTC (formatted where it is written, on the sinks'
    /// thread, not where it happened).
    #[serde(serialize_with = "rfc3339")]
    pub at: jiff::Timestamp,
    /// The subagent the event is about (`explore#2`), when it is not the step itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    RunStarted {
        run_id: String,
        workflow: String,
        /// Each step of the plan with its `provider/model`, in plan order (with `--only`, those
        /// this run records: not the steps it leaves to other jobs).
        steps: Vec<(String, String)>,
    },
    StepStarted {
        step: String,
        agent: String,
        model: String,
    },
    /// What every request of the step shares (sent once, so transcripts stay linear).
    SessionStarted {
        step: String,
        model: String,
        system: String,
        tools: Vec<ToolDef>,
        max_tokens: u32,
    },
    /// A model request: the messages added since the previous one, and a digest of the whole
    /// neutral request (the previous events plus these messages rebuild it).
    TurnStarted {
        step: String,
        turn: u32,
        messages: Vec<Message>,
        digest: String,
    },
    /// A reply is arriving (streamed): about this many output tokens so far. Shown live, not
    /// recorded.
    TokensArriving {
        step: String,
        turn: u32,
        output_tokens: u64,
    },
    Retrying {
        step: String,
        turn: u32,
        attempt: u32,
        delay_ms: u64,
        error: String,
    },
    /// A replayed request differs from its recording (docs/src/ci.md "Record and replay"); it was
    /// answered from the recording all the same.
    ReplayDrift {
        step: String,
        /// Which request of its conversation (from 1).
        request: u32,
        /// Where the two first differ, with a little of each side.
        difference: String,
    },
    TurnFinished {
        step: String,
        turn: u32,
        duration_ms: u64,
        usage: Usage,
        /// What the reply cost, when its model has a price.
        #[serde(skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// The reply as the API sent it.
        body: crate::provider::Raw,
        /// The reply was cut off (the step's `timeout`, an interrupt) while it streamed: `usage`
        /// is estimated from what had streamed, and `body` is empty.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cut_off: bool,
    },
    ToolStarted {
        step: String,
        turn: u32,
        id: String,
        name: String,
        input: Value,
    },
    ToolFinished {
        step: String,
        turn: u32,
        id: String,
        name: String,
        is_error: bool,
        duration_ms: u64,
        output: String,
        /// Why runner refused it, when it did (docs/src/audit.md).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refused: Option<crate::tools::Refusal>,
    },
    /// The step reached its last allowed turn: that request allows no tool call (the tools stay
    /// offered, with `tool_choice: none`, so the cached prefix holds) and asks for the final
    /// answer.
    OutOfTurns { step: String, turn: u32 },
    /// The same call was refused `refusals` times in a row: this turn is the step's last (the
    /// tools offered, no call allowed), as after `max_turns`.
    RepeatsRefused {
        step: String,
        turn: u32,
        /// The tool of the repeated call.
        name: String,
        refusals: u32,
    },
    /// Old tool results were replaced by one-line stubs to keep the conversation inside its
    /// window (docs/src/runs.md, "Context that lasts"). The next `turn_started` carries the
    /// whole conversation.
    ContextCleared {
        step: String,
        turn: u32,
        /// Tool results cleared.
        cleared: u32,
        tokens_before: u64,
        tokens_after: u64,
    },
    /// The conversation was replaced by the step's first message, the model's summary of the
    /// work (the request before this event) and the newest turn. The next `turn_started`
    /// carries the whole conversation.
    ContextCompacted {
        step: String,
        turn: u32,
        tokens_before: u64,
        tokens_after: u64,
    },
    /// A reply whose whole text was a call of an offered tool (a local model's chat template
    /// writes calls as text) is run as that call.
    ToolCallInText {
        step: String,
        turn: u32,
        name: String,
    },
    /// A final answer did not match `output_schema`; the model is asked again.
    OutputInvalid {
        step: String,
        turn: u32,
        error: String,
    },
    /// A check started, after a final answer (round 1 after the first).
    CheckStarted {
        step: String,
        round: u32,
        command: String,
    },
    CheckFinished {
        step: String,
        record: CheckRecord,
        /// The end of what it printed (stdout and stderr together).
        output: String,
    },
    /// A command step's command ended.
    CommandFinished {
        step: String,
        command: String,
        /// `None` when it was killed by a signal.
        exit_code: Option<i32>,
        duration_ms: u64,
        /// The end of its stderr.
        stderr: String,
    },
    /// The step's own account of how it ended, before the scheduler records it.
    StepError { step: String, error: String },
    /// A step (or a subagent) started a subagent through `task`.
    SubagentStarted {
        step: String,
        /// Its id, `explore#2`.
        id: String,
        /// Its agent, as `task`'s `subagent_type` names it (the event's own `agent` says whose
        /// event it is: the subagent that started it, when one did).
        #[serde(rename = "subagent_type")]
        agent: String,
        model: String,
        description: String,
        background: bool,
    },
    SubagentFinished {
        step: String,
        record: Box<SubagentRecord>,
    },
    StepFinished {
        step: String,
        record: Box<StepRecord>,
        /// Decided by this run: not reused from an earlier one, not left to another job by
        /// `--only` (only those are written as `steps/<id>/record.json`).
        decided: bool,
    },
    /// The final record, as the scheduler settled it: sinks show it, never rebuild it.
    RunFinished {
        record: Box<RunRecord>,
        /// Where `run.json` and the transcripts are.
        run_dir: camino::Utf8PathBuf,
    },
}

impl EventKind {
    /// The step an event is about.
    pub fn step(&self) -> Option<&str> {
        match self {
            EventKind::RunStarted { .. } | EventKind::RunFinished { .. } => None,
            EventKind::StepStarted { step, .. }
            | EventKind::SessionStarted { step, .. }
            | EventKind::TurnStarted { step, .. }
            | EventKind::Retrying { step, .. }
            | EventKind::ReplayDrift { step, .. }
            | EventKind::TokensArriving { step, .. }
            | EventKind::TurnFinished { step, .. }
            | EventKind::ToolStarted { step, .. }
            | EventKind::ToolFinished { step, .. }
            | EventKind::OutputInvalid { step, .. }
            | EventKind::OutOfTurns { step, .. }
            | EventKind::RepeatsRefused { step, .. }
            | EventKind::ContextCleared { step, .. }
            | EventKind::ContextCompacted { step, .. }
            | EventKind::ToolCallInText { step, .. }
            | EventKind::CheckStarted { step, .. }
            | EventKind::CheckFinished { step, .. }
            | EventKind::CommandFinished { step, .. }
            | EventKind::StepError { step, .. }
            | EventKind::SubagentStarted { step, .. }
            | EventKind::SubagentFinished { step, .. }
            | EventKind::StepFinished { step, .. } => Some(step),
        }
    }
}

/// A time as RFC 3339 in UTC, written straight into the output.
pub(crate) fn rfc3339<S: serde::Serializer>(
    at: &jiff::Timestamp,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(at)
}

impl From<EventKind> for Event {
    fn from(kind: EventKind) -> Self {
        Event {
            at: jiff::Timestamp::now(),
            agent: None,
            kind,
        }
    }
}

/// Something that shows or records events.
pub trait Sink: Send {
    /// Handles one event. An error means the sink could not record it (a full disk): the run
    /// stops, and the message says which file.
    fn handle(&mut self, event: &Event) -> Result<(), String>;

    /// When the sink wants [`Sink::tick`] called (a write it has put off).
    fn deadline(&self) -> Option<std::time::Instant> {
        None
    }

    /// Catches up on put-off work.
    fn tick(&mut self) -> Result<(), String> {
        Ok(())
    }

    /// Writes what it has buffered. Called after each batch of events (see [`pump`]).
    fn flush(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// Every sink of a run. The first failure to record is kept; it stops the run.
#[derive(Default)]
pub struct Sinks {
    sinks: Vec<Box<dyn Sink>>,
    failure: Option<String>,
}

impl Sinks {
    pub fn new(sinks: Vec<Box<dyn Sink>>) -> Self {
        Self {
            sinks,
            failure: None,
        }
    }

    pub fn add(&mut self, sink: impl Sink + 'static) {
        self.sinks.push(Box::new(sink));
    }

    pub fn emit(&mut self, event: &Event) {
        for sink in &mut self.sinks {
            if let Err(err) = sink.handle(event) {
                self.failure.get_or_insert(err);
            }
        }
    }

    pub fn deadline(&self) -> Option<std::time::Instant> {
        self.sinks.iter().filter_map(|s| s.deadline()).min()
    }

    pub fn tick(&mut self) {
        for sink in &mut self.sinks {
            if let Err(err) = sink.tick() {
                self.failure.get_or_insert(err);
            }
        }
    }

    pub fn flush(&mut self) {
        for sink in &mut self.sinks {
            if let Err(err) = sink.flush() {
                self.failure.get_or_insert(err);
            }
        }
    }

    /// No sinks, and a failure to record already.
    pub fn failed(failure: String) -> Self {
        Self {
            sinks: Vec::new(),
            failure: Some(failure),
        }
    }

    /// The first failure to record, if any.
    pub fn failure(&self) -> Option<&String> {
        self.failure.as_ref()
    }
}

/// What a step has done so far, counted from its events as they are made: a step that times
/// out or is cancelled still reports what it did.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub turns: u32,
    pub tool_calls: u32,
    /// The step's tokens and its subagents' (docs/src/delegation.md: the step's counts include them).
    pub usage: Usage,
    pub subagents: Vec<SubagentRecord>,
    /// USD of the replies with a known price.
    pub cost_usd: Option<f64>,
    pub checks: Vec<CheckRecord>,
    pub ran_out_of_turns: bool,
    /// Times the step's own conversation was compacted.
    pub compactions: u32,
    /// Some of `usage` is estimated: a reply cut off while it streamed.
    pub tokens_estimated: bool,
    /// Subagents started and not yet finished, as counted so far, with when they started.
    running: std::collections::BTreeMap<String, (SubagentRecord, std::time::Instant)>,
    /// Replies streaming now, by who asks (`None`: the step itself), with their tokens as
    /// estimated so far: what a reply cut off by the step's end had used.
    streaming: std::collections::BTreeMap<Option<String>, Usage>,
    /// Replayed requests that differed from their recording, its subagents' included.
    pub replay_drift: u32,
}

impl Tally {
    /// Records the subagents still running when their step ended (its `timeout`, an
    /// interrupt) as `cancelled`, with the tokens they had used, so that the listed subagents
    /// add up to the step.
    pub fn cancel_running(&mut self, why: &str) {
        // Replies cut off mid-stream: their requests do not end with a reply that counts them.
        // A subagent's task winds down after its step ends, so they are counted here, as the
        // stream had them (docs/src/runs.md "Scheduling and failures").
        for (agent, usage) in std::mem::take(&mut self.streaming) {
            self.usage.add(&usage);
            self.tokens_estimated = true;
            if let Some((record, _)) = agent.and_then(|id| self.running.get_mut(&id)) {
                record.input_tokens += usage.input_tokens;
                record.output_tokens += usage.output_tokens;
            }
        }
        for (_, (mut record, started)) in std::mem::take(&mut self.running) {
            record.status = crate::record::StepStatus::Cancelled;
            record.duration_ms = started.elapsed().as_millis() as u64;
            record.error = Some(why.to_owned());
            self.subagents.push(record);
        }
    }

    /// A running subagent's counts, from its own events.
    fn count_subagent(&mut self, event: &Event) {
        let Some(running) = event.agent.as_ref().and_then(|id| self.running.get_mut(id)) else {
            return;
        };
        let record = &mut running.0;
        match &event.kind {
            EventKind::TurnStarted { .. } => record.turns += 1,
            EventKind::ToolStarted { .. } => record.tool_calls += 1,
            EventKind::TurnFinished { usage, .. } => {
                record.input_tokens += usage.input_tokens;
                record.output_tokens += usage.output_tokens;
                record.cache_creation_input_tokens += usage.cache_creation_input_tokens;
                record.cache_read_input_tokens += usage.cache_read_input_tokens;
            }
            _ => {}
        }
    }

    fn count(&mut self, event: &Event) {
        // Turns and tool calls are the step's own; a subagent's show in its record.
        let own = event.agent.is_none();
        if let EventKind::TurnFinished { .. } = event.kind {
            self.streaming.remove(&event.agent);
        }
        self.count_subagent(event);
        match &event.kind {
            EventKind::SubagentStarted {
                id, agent, model, ..
            } => {
                let record = SubagentRecord {
                    id: id.clone(),
                    agent: agent.clone(),
                    model: model.clone(),
                    status: crate::record::StepStatus::Running,
                    turns: 0,
                    tool_calls: 0,
                    input_tokens: 0,
                    output_tokens: 0,
                    cache_creation_input_tokens: 0,
                    cache_read_input_tokens: 0,
                    duration_ms: 0,
                    error: None,
                    queue_ms: None,
                };
                self.running
                    .insert(id.clone(), (record, std::time::Instant::now()));
            }
            EventKind::TurnStarted { .. } if own => self.turns += 1,
            EventKind::ToolStarted { .. } if own => self.tool_calls += 1,
            EventKind::TurnFinished {
                usage,
                cost_usd,
                cut_off,
                ..
            } => {
                self.usage.add(usage);
                self.tokens_estimated |= *cut_off;
                if let Some(cost) = cost_usd {
                    *self.cost_usd.get_or_insert(0.0) += cost;
                }
            }
            EventKind::SubagentFinished { record, .. } => {
                self.running.remove(&record.id);
                self.subagents.push((**record).clone());
            }
            EventKind::CheckFinished { record, .. } if own => {
                self.checks.push(record.clone());
            }
            EventKind::OutOfTurns { .. } if own => self.ran_out_of_turns = true,
            EventKind::ContextCompacted { .. } if own => self.compactions += 1,
            EventKind::ReplayDrift { .. } => self.replay_drift += 1,
            _ => {}
        }
    }
}

#[derive(Debug, Clone)]
enum Destination {
    Channel(mpsc::UnboundedSender<Event>),
    Queue(Arc<pump::Queue>),
}

/// How a running step sends its events: to the sinks' queue (counted in its [`Tally`] on the
/// way), or to a channel (for callers that read the events themselves).
#[derive(Debug, Clone)]
pub struct Emitter {
    step: Arc<str>,
    /// The subagent this emitter speaks for, if not the step itself.
    agent: Option<Arc<str>>,
    to: Destination,
    tally: Option<Arc<Mutex<Tally>>>,
}

impl Emitter {
    pub fn new(step: &str, sender: mpsc::UnboundedSender<Event>) -> Self {
        Self {
            step: Arc::from(step),
            agent: None,
            to: Destination::Channel(sender),
            tally: None,
        }
    }

    /// A step's emitter as the scheduler makes it: its events counted in `tally`, then queued
    /// for the sinks.
    pub fn queued(step: &str, queue: Arc<pump::Queue>, tally: Arc<Mutex<Tally>>) -> Self {
        Self {
            step: Arc::from(step),
            agent: None,
            to: Destination::Queue(queue),
            tally: Some(tally),
        }
    }

    /// The emitter of a subagent of this step.
    pub fn subagent(&self, id: &str) -> Self {
        Self {
            step: self.step.clone(),
            agent: Some(Arc::from(id)),
            to: self.to.clone(),
            tally: self.tally.clone(),
        }
    }

    /// The subagent this emitter speaks for.
    pub fn agent(&self) -> Option<&str> {
        self.agent.as_deref()
    }

    /// An emitter whose events go nowhere (for callers that keep none).
    pub fn discard(step: &str) -> Self {
        let (sender, _) = mpsc::unbounded_channel();
        Self::new(step, sender)
    }

    pub fn step(&self) -> &str {
        &self.step
    }

    /// A reply is streaming: its tokens so far, as estimated, until its `TurnFinished` counts
    /// it (see [`Tally::cancel_running`]).
    pub fn streaming(&self, usage: Usage) {
        if let Some(tally) = &self.tally {
            tally
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .streaming
                .insert(self.agent.as_deref().map(str::to_owned), usage);
        }
    }

    pub fn emit(&self, kind: EventKind) {
        let mut event = Event::from(kind);
        event.agent = self.agent.as_deref().map(str::to_owned);
        if let Some(tally) = &self.tally {
            tally
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .count(&event);
        }
        match &self.to {
            // The receiver is gone only when the run is over; nothing is left to record then.
            Destination::Channel(sender) => {
                let _ = sender.send(event);
            }
            Destination::Queue(queue) => queue.push(event),
        }
    }
}
