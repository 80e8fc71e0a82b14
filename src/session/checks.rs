//! A step's `checks` (docs/src/verified-steps.md): after the agent's final answer, each command runs
//! in the step's sandbox and directory, in order, until one fails. A failure, with the end of
//! what it printed, becomes the agent's next message.

use std::time::Instant;

use crate::event::{Emitter, EventKind};
use crate::plan::Check;
use crate::record::CheckRecord;
use crate::tools::StepTools;
use crate::tools::bash::{Exit, run_sandboxed};

/// Bytes of a failed check's output the agent (and the error) gets: the end, where test
/// runners put their summary.
pub const OUTPUT_TAIL_BYTES: usize = 8 * 1024;

/// A check that did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub command: String,
    /// `exited 1`, `timed out after 10m`, or why it could not start.
    pub how: String,
    /// The end of its output.
    pub tail: String,
}

impl Failure {
    /// The step's error once no round is left: `checks failed: <cmd> exited 1` and the tail.
    pub fn message(&self) -> String {
        let mut message = format!("checks failed: {} {}", self.command, self.how);
        if !self.tail.trim().is_empty() {
            message.push_str(":\n");
            message.push_str(self.tail.trim_end());
        }
        message
    }

    /// What the agent reads: the failure, and that it should fix it and answer again.
    pub fn feedback(&self, round: u32, rounds: u32) -> String {
        format!(
            "The checks did not pass (round {round} of {rounds}): `{}` {}. The end of its output:\n```\n{}\n```\nFix the cause, then give your final answer again.",
            self.command,
            self.how,
            self.tail.trim_end()
        )
    }
}

/// Runs one round of checks; the first failure, if any.
pub async fn run_round(
    checks: &[Check],
    round: u32,
    tools: &StepTools,
    events: &Emitter,
) -> Option<Failure> {
    let step = events.step().to_owned();
    let root = tools.context.workspace.root().as_std_path().to_owned();
    for check in checks {
        events.emit(EventKind::CheckStarted {
            step: step.clone(),
            round,
            command: check.command.clone(),
        });
        let started = Instant::now();
        let started_at = jiff::Timestamp::now().to_string();
        // Both streams into one, in the order they were written: a test runner's failure and
        // its summary belong together.
        let text = format!("exec 2>&1\n{}", check.command);
        let ran = run_sandboxed(&root, &text, Some(check.timeout), &tools.context.bash).await;
        let duration_ms = started.elapsed().as_millis() as u64;
        let (exit, tail, how) = match &ran {
            Ok(ran) => {
                let mut tail = tail(&ran.stdout, ran.stdout_total);
                if let Some(note) = ran.read_only_note(tools.context.bash.mode) {
                    tail.push_str(&format!("\n{note}"));
                }
                (Some(ran.exit), tail, ran.exit.to_string())
            }
            Err(why) => (None, why.clone(), format!("could not run: {why}")),
        };
        let passed = exit == Some(Exit::Code(0));
        let record = CheckRecord {
            command: check.command.clone(),
            round,
            exit_code: match exit {
                Some(Exit::Code(code)) => Some(code),
                _ => None,
            },
            passed,
            timed_out: matches!(exit, Some(Exit::TimedOut(_))),
            duration_ms,
            started_at: Some(started_at),
        };
        events.emit(EventKind::CheckFinished {
            step: step.clone(),
            record,
            output: tail.clone(),
        });
        if !passed {
            return Some(Failure {
                command: check.command.clone(),
                how,
                tail,
            });
        }
    }
    None
}

/// The last [`OUTPUT_TAIL_BYTES`] of what was read, saying how much came before.
pub fn tail(bytes: &[u8], total: usize) -> String {
    // Redacted before it is cut: the end of a secret is one the redactor no longer knows.
    let text = crate::secrets::redact_owned(String::from_utf8_lossy(bytes).into_owned());
    if text.len() <= OUTPUT_TAIL_BYTES && total == bytes.len() {
        return text;
    }
    let mut start = text.len().saturating_sub(OUTPUT_TAIL_BYTES);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let cut = total.saturating_sub(text.len() - start);
    format!("[… {cut} bytes before this …]\n{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_end_and_says_what_was_cut() {
        let long = "x".repeat(OUTPUT_TAIL_BYTES) + "END";
        let cut = tail(long.as_bytes(), long.len());
        assert!(cut.starts_with("[… 3 bytes before this …]\n"), "{cut}");
        assert!(cut.ends_with("xEND"));
        assert_eq!(tail(b"short", 5), "short");
        let failure = Failure {
            command: "cargo test".into(),
            how: "exited 101".into(),
            tail: "test a ... FAILED\n".into(),
        };
        assert_eq!(
            failure.message(),
            "checks failed: cargo test exited 101:\ntest a ... FAILED"
        );
    }
}
