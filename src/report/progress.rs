//! Progress on stderr: on a terminal, one live line per running step
//! (`[explore] find_auth … 5 tools · 3.2s`); otherwise a plain line per start and finish
//! (`[explore] find_auth done (8 tools, 5.1s, 12.3k tokens)`).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use super::{seconds, tokens, total_tokens};
use crate::plan::PlannedStep;
use crate::run::{Reporter, StepRecord, StepStatus};
use crate::session::StepProgress;

/// The line printed when a step finishes, whatever the display.
pub fn finish_line(step: &PlannedStep, record: &StepRecord) -> String {
    let label = format!("[{}] {}", step.agent, step.id);
    match record.status {
        StepStatus::Skipped => format!(
            "{label} skipped ({})",
            super::terminal::clean(record.error.as_deref().unwrap_or("condition"))
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
            let mut line = format!(
                "{label} {word} ({} tools, {}, {} tokens)",
                record.tool_calls,
                seconds(record.duration_ms),
                tokens(total_tokens(record))
            );
            if status != StepStatus::Succeeded
                && let Some(error) = &record.error
            {
                // Server and model text: no escape sequences reach the terminal.
                line.push_str(&format!(": {}", super::terminal::clean(error)));
            }
            line
        }
    }
}

/// Plain lines, for logs and CI.
pub struct PlainProgress;

impl Reporter for PlainProgress {
    fn step_started(&mut self, step: &PlannedStep, _: Arc<StepProgress>) {
        let _ = writeln!(std::io::stderr(), "[{}] {} started", step.agent, step.id);
    }

    fn step_finished(&mut self, step: &PlannedStep, record: &StepRecord) {
        let _ = writeln!(std::io::stderr(), "{}", finish_line(step, record));
    }
}

/// Live lines on a terminal, one per running step, redrawn as its counters change.
pub struct LiveProgress {
    multi: MultiProgress,
    bars: BTreeMap<String, ProgressBar>,
}

impl LiveProgress {
    pub fn new() -> Self {
        Self {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
            bars: BTreeMap::new(),
        }
    }
}

impl Default for LiveProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl Reporter for LiveProgress {
    fn step_started(&mut self, step: &PlannedStep, progress: Arc<StepProgress>) {
        let tools = progress.clone();
        let style =
            ProgressStyle::with_template("{prefix} {spinner} {tools} tools · {elapsed_secs}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner())
                .with_key(
                    "tools",
                    move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{}", tools.tool_calls());
                    },
                )
                .with_key(
                    "elapsed_secs",
                    |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{:.1}s", state.elapsed().as_secs_f64());
                    },
                )
                .tick_chars("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏…");
        let bar = self.multi.add(ProgressBar::new_spinner().with_style(style));
        bar.set_prefix(format!("[{}] {}", step.agent, step.id));
        bar.enable_steady_tick(Duration::from_millis(100));
        self.bars.insert(step.id.clone(), bar);
    }

    fn step_finished(&mut self, step: &PlannedStep, record: &StepRecord) {
        if let Some(bar) = self.bars.remove(&step.id) {
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
        let _ = self.multi.println(finish_line(step, record));
    }
}

/// Shows nothing (`--no-progress`).
pub struct NoProgress;

impl Reporter for NoProgress {
    fn step_started(&mut self, _: &PlannedStep, _: Arc<StepProgress>) {}
    fn step_finished(&mut self, _: &PlannedStep, _: &StepRecord) {}
}
