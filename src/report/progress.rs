//! Progress on stderr, as sinks of the run's events: on a terminal, one live line per running
//! step (`[explore] find_auth ⠙ 5 tools · 2.1k tok · 3.2s`); otherwise a plain line per start and
//! finish (`[explore] find_auth done (8 tools, 5.1s, 12.3k tokens)`). Subagents show under their
//! step: `[code] implement › explore#2 done (3 tools, 1.2s, 4.1k tokens)`.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressState, ProgressStyle};

use super::heartbeat::{HEARTBEAT, Heartbeats};
use super::{seconds, tokens, total_tokens};
use crate::event::{Event, EventKind, Sink};
use crate::plan::Plan;
use crate::plan::verified::step_of;
use crate::record::{StepRecord, StepStatus, SubagentRecord};
use crate::terminal;

/// The line printed when a step finishes, whatever the display.
pub fn finish_line(agent: &str, id: &str, record: &StepRecord) -> String {
    let label = format!("[{agent}] {id}");
    match record.status {
        StepStatus::Skipped => format!(
            "{label} skipped ({})",
            terminal::clean(record.error.as_deref().unwrap_or("condition"))
        ),
        StepStatus::Succeeded if record.reused_from.is_some() => format!(
            "{label} reused from run {}",
            record.reused_from.as_deref().unwrap_or_default()
        ),
        status => {
            let word = if status == StepStatus::Succeeded {
                "done"
            } else {
                status.as_str()
            };
            // A fan-out says how its instances went instead of counting tools.
            let what = if record.instances.is_empty() {
                crate::units::count(record.tool_calls.into(), "tool", "tools")
            } else {
                record.summary.clone()
            };
            let mut line = format!(
                "{label} {word} ({what}, {}, {} tokens)",
                seconds(record.duration_ms),
                tokens(total_tokens(record))
            );
            if status != StepStatus::Succeeded
                && let Some(error) = &record.error
            {
                // Server and model text: no escape sequences reach the terminal. Only the
                // reason's first line: the rest (a check's output) is under the table, once.
                let clean = terminal::clean(error);
                let mut lines = clean.trim_end().lines();
                let first = lines.next().unwrap_or_default();
                match lines.next() {
                    Some(_) => line.push_str(&format!(
                        ": {} (its output is under the table)",
                        first.trim_end_matches(':')
                    )),
                    None => line.push_str(&format!(": {first}")),
                }
            }
            line
        }
    }
}

/// The line printed when a subagent finishes.
pub fn subagent_finish_line(label: &str, record: &SubagentRecord) -> String {
    let word = match record.status {
        StepStatus::Succeeded => "done",
        status => status.as_str(),
    };
    let mut line = format!(
        "{label} › {} {word} ({}, {}, {} tokens)",
        record.id,
        crate::units::count(record.tool_calls.into(), "tool", "tools"),
        seconds(record.duration_ms),
        tokens(record.total_tokens())
    );
    if let Some(error) = &record.error {
        line.push_str(&format!(": {}", terminal::clean(error)));
    }
    line
}

/// The line printed when a check ends.
pub fn check_line(label: &str, record: &crate::record::CheckRecord) -> String {
    let how = match (record.passed, record.exit_code, record.timed_out) {
        (true, _, _) => "passed".to_owned(),
        (false, _, true) => "timed out".to_owned(),
        (false, Some(code), _) => format!("failed (exit {code})"),
        (false, None, _) => "failed".to_owned(),
    };
    format!(
        "{label} check `{}` {how}, round {} ({})",
        terminal::clean(&record.command),
        record.round,
        seconds(record.duration_ms)
    )
}

/// Each step's agent, for labels.
fn agents(plan: &Plan) -> BTreeMap<String, String> {
    plan.steps()
        .iter()
        .map(|s| (s.id.clone(), s.agent.clone()))
        .collect()
}

/// A line about something that happened on the way (a retry, a replay's drift), under the
/// step's label, naming the subagent when it was one.
fn note_line(label: &str, event: &Event) -> String {
    let who = event
        .agent
        .as_deref()
        .map_or_else(String::new, |a| format!(" › {}", terminal::clean(a)));
    let what = match &event.kind {
        EventKind::ReplayDrift {
            request,
            difference,
            ..
        } => format!("replay drift in request {request}: {difference}"),
        EventKind::Retrying {
            attempt,
            delay_ms,
            error,
            ..
        } => format!(
            "attempt {attempt} failed, retrying in {}: {}",
            seconds(*delay_ms),
            terminal::clean(error)
        ),
        EventKind::OutOfTurns { turn, .. } => format!(
            "warning: out of turns: turn {turn} is its last (max_turns), so it allows no tool call (the tools stay offered, with `tool_choice: none`) and asks for the final answer"
        ),
        EventKind::RepeatsRefused {
            turn,
            name,
            refusals,
            ..
        } => format!(
            "warning: `{}` refused {refusals} times in a row: turn {turn} is its last, with no tool calls allowed, asking for the final answer",
            terminal::clean(name)
        ),
        EventKind::ContextCleared {
            turn,
            cleared,
            tokens_before,
            tokens_after,
            ..
        } => format!(
            "context: turn {turn}: cleared {cleared} old tool result{} ({} to {} tokens)",
            if *cleared == 1 { "" } else { "s" },
            crate::units::tokens(*tokens_before),
            crate::units::tokens(*tokens_after)
        ),
        EventKind::ContextCompacted {
            turn,
            tokens_before,
            tokens_after,
            ..
        } => format!(
            "context: turn {turn}: compacted the conversation ({} to {} tokens)",
            crate::units::tokens(*tokens_before),
            crate::units::tokens(*tokens_after)
        ),
        _ => String::new(),
    };
    format!("{label}{who}: {what}")
}

/// Plain lines, for logs and CI, with a heartbeat for a step that runs long.
pub struct PlainProgress {
    agents: BTreeMap<String, String>,
    beats: Heartbeats,
}

impl PlainProgress {
    pub fn new(plan: &Plan) -> Self {
        Self {
            agents: agents(plan),
            beats: Heartbeats::new(HEARTBEAT),
        }
    }

    /// A heartbeat every `every` instead of [`HEARTBEAT`] (tests set a short one).
    pub fn every(mut self, every: Duration) -> Self {
        self.beats = Heartbeats::new(every);
        self
    }
}

impl Sink for PlainProgress {
    fn handle(&mut self, event: &Event) -> Result<(), String> {
        self.beats.count(event);
        let agent = |id: &str| self.agents.get(step_of(id)).map_or("?", String::as_str);
        let line = match &event.kind {
            EventKind::StepStarted { step, agent, .. } => format!("[{agent}] {step} started"),
            EventKind::StepFinished { step, record, .. } => finish_line(agent(step), step, record),
            EventKind::SubagentStarted {
                step,
                id,
                description,
                ..
            } => format!(
                "[{}] {step} › {id} started: {}",
                agent(step),
                terminal::clean(description)
            ),
            EventKind::SubagentFinished { step, record } => {
                subagent_finish_line(&format!("[{}] {step}", agent(step)), record)
            }
            EventKind::CheckFinished { step, record, .. } => {
                check_line(&format!("[{}] {step}", agent(step)), record)
            }
            EventKind::ReplayDrift { step, .. }
            | EventKind::Retrying { step, .. }
            | EventKind::ContextCleared { step, .. }
            | EventKind::ContextCompacted { step, .. }
            | EventKind::OutOfTurns { step, .. }
            | EventKind::RepeatsRefused { step, .. } => {
                note_line(&format!("[{}] {step}", agent(step)), event)
            }
            _ => return Ok(()),
        };
        // Progress is best effort: a closed stderr must not stop the run.
        let _ = writeln!(crate::out::stderr(), "{line}");
        Ok(())
    }

    fn deadline(&self) -> Option<std::time::Instant> {
        self.beats.deadline()
    }

    /// The heartbeat of each step that has been quiet for its interval.
    fn tick(&mut self) -> Result<(), String> {
        let mut out = crate::out::stderr();
        for (step, line) in self.beats.due() {
            let agent = self.agents.get(step_of(&step)).map_or("?", String::as_str);
            let _ = writeln!(out, "[{agent}] {step} {line}");
        }
        Ok(())
    }
}

/// With `--no-progress`: only what warns (a replay's drift, docs/src/ci.md "Record and
/// replay"; a step sent to its last turn), which CI logs need most and progress lines would
/// otherwise carry.
pub struct Warnings {
    agents: BTreeMap<String, String>,
}

impl Warnings {
    pub fn new(plan: &Plan) -> Self {
        Self {
            agents: agents(plan),
        }
    }
}

impl Sink for Warnings {
    fn handle(&mut self, event: &Event) -> Result<(), String> {
        // The lines that say a step is not going as asked; the rest is progress.
        if let EventKind::ReplayDrift { step, .. }
        | EventKind::OutOfTurns { step, .. }
        | EventKind::RepeatsRefused { step, .. } = &event.kind
        {
            let agent = self.agents.get(step_of(step)).map_or("?", String::as_str);
            let line = note_line(&format!("[{agent}] {step}"), event);
            // Best effort, like progress.
            let _ = writeln!(crate::out::stderr(), "{line}");
        }
        Ok(())
    }
}

/// A running step's live line and what it shows.
struct Live {
    bar: ProgressBar,
    tools: u32,
    tokens: u64,
    /// Tokens of a reply still arriving (streamed).
    arriving: u64,
    doing: Option<String>,
}

impl Live {
    fn redraw(&self) {
        let mut parts = Vec::new();
        if let Some(doing) = &self.doing {
            parts.push(terminal::clean(doing).into_owned());
        }
        parts.push(crate::units::count(self.tools.into(), "tool", "tools"));
        if self.tokens + self.arriving > 0 {
            parts.push(format!("{} tok", tokens(self.tokens + self.arriving)));
        }
        self.bar.set_message(parts.join(" · "));
    }
}

/// Live lines on a terminal, one per running step and one under it per running subagent,
/// redrawn as their events arrive.
pub struct LiveProgress {
    multi: MultiProgress,
    agents: BTreeMap<String, String>,
    /// By step, and subagent id for a subagent's line.
    live: BTreeMap<(String, Option<String>), Live>,
    /// Steps not started yet (waiting on their needs or a free slot), in plan order, shown on a
    /// last line.
    waiting: Vec<String>,
    waiting_bar: ProgressBar,
}

fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{prefix} {spinner} {msg} · {elapsed_secs}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .with_key(
            "elapsed_secs",
            |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.1}s", state.elapsed().as_secs_f64());
            },
        )
        .tick_chars("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏…")
}

impl LiveProgress {
    pub fn new(plan: &Plan) -> Self {
        let multi = MultiProgress::with_draw_target(crate::out::progress_target());
        let waiting_bar = multi.add(
            ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        );
        let progress = Self {
            multi,
            agents: agents(plan),
            live: BTreeMap::new(),
            waiting: plan.steps().iter().map(|s| s.id.clone()).collect(),
            waiting_bar,
        };
        progress.show_waiting();
        progress
    }

    /// `waiting: plan, implement, review`, at most six names.
    fn show_waiting(&self) {
        if self.waiting.is_empty() {
            self.waiting_bar.finish_and_clear();
            return;
        }
        let shown: Vec<&str> = self.waiting.iter().take(6).map(String::as_str).collect();
        let more = self.waiting.len().saturating_sub(shown.len());
        let mut line = format!("waiting: {}", shown.join(", "));
        if more > 0 {
            line.push_str(&format!(" (+{more} more)"));
        }
        self.waiting_bar.set_message(line);
    }

    fn no_longer_waiting(&mut self, step: &str) {
        let before = self.waiting.len();
        self.waiting.retain(|s| s != step);
        if self.waiting.len() != before {
            self.show_waiting();
        }
    }
}

impl LiveProgress {
    fn start(
        &mut self,
        key: (String, Option<String>),
        prefix: String,
        after: Option<&ProgressBar>,
    ) {
        let bar = ProgressBar::new_spinner().with_style(spinner_style());
        let bar = match after {
            Some(above) => self.multi.insert_after(above, bar),
            None => self.multi.insert_before(&self.waiting_bar, bar),
        };
        bar.set_prefix(prefix);
        bar.enable_steady_tick(Duration::from_millis(100));
        let live = Live {
            bar,
            tools: 0,
            tokens: 0,
            arriving: 0,
            doing: None,
        };
        live.redraw();
        self.live.insert(key, live);
    }

    fn end(&mut self, key: &(String, Option<String>), line: String) {
        if let Some(live) = self.live.remove(key) {
            live.bar.finish_and_clear();
            self.multi.remove(&live.bar);
        }
        let _ = self.multi.println(line);
    }
}

impl Sink for LiveProgress {
    // Over 80 lines: one arm per event kind this sink shows.
    fn handle(&mut self, event: &Event) -> Result<(), String> {
        match &event.kind {
            // The steps of this run: with `--only`, other jobs' steps are not waited for here.
            EventKind::RunStarted { steps, .. } => {
                self.waiting.retain(|id| steps.iter().any(|(s, _)| s == id));
                self.show_waiting();
            }
            EventKind::StepStarted { step, agent, .. } => {
                self.no_longer_waiting(step);
                self.start((step.clone(), None), format!("[{agent}] {step}"), None);
            }
            EventKind::StepFinished { step, record, .. } => {
                self.no_longer_waiting(step);
                let agent = self.agents.get(step_of(step)).map_or("?", String::as_str);
                let line = finish_line(agent, step, record);
                self.end(&(step.clone(), None), line);
            }
            EventKind::ReplayDrift { step, .. }
            | EventKind::OutOfTurns { step, .. }
            | EventKind::RepeatsRefused { step, .. }
            | EventKind::ContextCompacted { step, .. } => {
                let agent = self.agents.get(step_of(step)).map_or("?", String::as_str);
                let _ = self
                    .multi
                    .println(note_line(&format!("[{agent}] {step}"), event));
            }
            EventKind::SubagentStarted { step, id, .. } => {
                let agent = self.agents.get(step_of(step)).map_or("?", String::as_str);
                let prefix = format!("[{agent}] {step} › {id}");
                let above = self
                    .live
                    .get(&(step.clone(), event.agent.clone()))
                    .map(|l| l.bar.clone());
                self.start((step.clone(), Some(id.clone())), prefix, above.as_ref());
            }
            EventKind::SubagentFinished { step, record } => {
                let agent = self.agents.get(step_of(step)).map_or("?", String::as_str);
                let line = subagent_finish_line(&format!("[{agent}] {step}"), record);
                self.end(&(step.clone(), Some(record.id.clone())), line);
            }
            EventKind::CheckFinished { step, record, .. } => {
                let agent = self.agents.get(step_of(step)).map_or("?", String::as_str);
                let _ = self
                    .multi
                    .println(check_line(&format!("[{agent}] {step}"), record));
                if let Some(live) = self.live.get_mut(&(step.clone(), None)) {
                    live.doing = None;
                    live.redraw();
                }
            }
            kind => {
                let Some(step) = kind.step() else {
                    return Ok(());
                };
                // The step's line counts its subagents' tokens too, as its record does.
                if let (EventKind::TurnFinished { usage, .. }, Some(_)) = (kind, &event.agent)
                    && let Some(line) = self.live.get_mut(&(step.to_owned(), None))
                {
                    line.tokens =
                        crate::units::sum([line.tokens, usage.total_input(), usage.output_tokens]);
                    line.redraw();
                }
                let Some(live) = self.live.get_mut(&(step.to_owned(), event.agent.clone())) else {
                    return Ok(());
                };
                match kind {
                    EventKind::ToolStarted { name, input, .. } => {
                        // Redacted before it is cut to a short argument.
                        let input = crate::secrets::redact_json(input);
                        live.doing = Some(match crate::text::call_argument(&input, 40) {
                            Some(argument) => format!("{name} {argument}"),
                            None => name.clone(),
                        });
                    }
                    EventKind::ToolFinished { .. } => {
                        live.tools += 1;
                        live.doing = None;
                    }
                    EventKind::TurnFinished { usage, .. } => {
                        live.arriving = 0;
                        live.tokens = crate::units::sum([
                            live.tokens,
                            usage.total_input(),
                            usage.output_tokens,
                        ]);
                    }
                    EventKind::TokensArriving { output_tokens, .. } => {
                        live.arriving = *output_tokens;
                    }
                    EventKind::Retrying { attempt, .. } => {
                        live.doing = Some(format!("retrying ({attempt})"));
                    }
                    EventKind::CheckStarted { command, .. } => {
                        live.doing = Some(format!("check: {command}"));
                    }
                    _ => return Ok(()),
                }
                live.redraw();
            }
        }
        Ok(())
    }
}

impl Drop for LiveProgress {
    /// No frozen spinner lines after an interrupt.
    fn drop(&mut self) {
        for live in self.live.values() {
            live.bar.finish_and_clear();
        }
        self.waiting_bar.finish_and_clear();
        let _ = self.multi.clear();
    }
}
