//! A running step's heartbeat in plain output (docs/src/runs.md "Output"): without a terminal,
//! a step that runs longer than [`HEARTBEAT`] says it is alive every [`HEARTBEAT`] (turn, tool
//! calls, tokens, time so far), so a CI log never goes quiet while a slow model thinks. Plain
//! progress and the GitHub Actions log both keep one.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::event::{Event, EventKind};

/// How often a running step says it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(30);

/// The running steps and what each has done.
pub struct Heartbeats {
    every: Duration,
    running: BTreeMap<String, Beat>,
}

struct Beat {
    started: Instant,
    next: Instant,
    turn: u32,
    tools: u32,
    tokens: u64,
}

impl Heartbeats {
    /// A heartbeat every `every` (at least a tenth of a second).
    pub fn new(every: Duration) -> Self {
        Self {
            every: every.max(Duration::from_millis(100)),
            running: BTreeMap::new(),
        }
    }

    /// Keeps the running steps up to date with `event`.
    pub fn count(&mut self, event: &Event) {
        let own = event.agent.is_none();
        match &event.kind {
            EventKind::StepStarted { step, .. } => {
                let now = Instant::now();
                let beat = Beat {
                    started: now,
                    next: now + self.every,
                    turn: 0,
                    tools: 0,
                    tokens: 0,
                };
                self.running.insert(step.clone(), beat);
            }
            EventKind::StepFinished { step, .. } => {
                self.running.remove(step);
            }
            kind => {
                let Some(beat) = kind.step().and_then(|s| self.running.get_mut(s)) else {
                    return;
                };
                match kind {
                    EventKind::TurnStarted { turn, .. } if own => beat.turn = *turn,
                    EventKind::ToolFinished { .. } if own => beat.tools += 1,
                    // The step's tokens count its subagents', as its record does.
                    EventKind::TurnFinished { usage, .. } => {
                        beat.tokens = crate::units::sum([
                            beat.tokens,
                            usage.total_input(),
                            usage.output_tokens,
                        ]);
                    }
                    _ => {}
                }
            }
        }
    }

    /// When the next heartbeat is due.
    pub fn deadline(&self) -> Option<Instant> {
        self.running.values().map(|b| b.next).min()
    }

    /// The steps whose heartbeat is due, each with what its line says after its label
    /// (`running: turn 3, 2 tools, 8.1k tokens, 1m 00s`).
    pub fn due(&mut self) -> Vec<(String, String)> {
        let now = Instant::now();
        let mut lines = Vec::new();
        for (step, beat) in &mut self.running {
            if beat.next > now {
                continue;
            }
            // One line however late the tick: the next is an interval from now.
            beat.next = now + self.every;
            lines.push((
                step.clone(),
                format!(
                    "running: turn {}, {}, {} tokens, {}",
                    beat.turn,
                    crate::units::count(beat.tools.into(), "tool", "tools"),
                    crate::units::tokens(beat.tokens),
                    crate::units::seconds(now.duration_since(beat.started).as_millis() as u64)
                ),
            ));
        }
        lines
    }
}
