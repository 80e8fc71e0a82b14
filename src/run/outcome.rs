//! How a step ended, as the scheduler decides it: the agent loop's own outcome, or a skip or a
//! cancellation that never reached it. Typed, so nothing downstream reads meaning out of text.

use std::fmt;

use crate::record::{StepRecord, StepStatus};
use crate::session::{FailureKind, StepOutcome};

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It ran (or failed before it could, for a reason of its own): succeeded or failed.
    Ran(StepOutcome),
    Skipped(SkipReason),
    Cancelled(CancelReason),
}

impl From<StepOutcome> for Outcome {
    fn from(outcome: StepOutcome) -> Self {
        Outcome::Ran(outcome)
    }
}

impl Outcome {
    pub fn failed(kind: FailureKind, message: impl Into<String>) -> Self {
        Outcome::Ran(StepOutcome::failed(kind, message))
    }

    pub fn is_failure(&self) -> bool {
        matches!(self, Outcome::Ran(StepOutcome::Failed { .. }))
    }

    /// Writes the outcome into a step's record. Text from the model and the server is redacted:
    /// a key echoed back must not spread further.
    pub fn record(self, entry: &mut StepRecord) {
        use crate::secrets::redact_owned;
        match self {
            Outcome::Ran(StepOutcome::Succeeded { summary, output }) => {
                entry.status = StepStatus::Succeeded;
                entry.summary = redact_owned(summary);
                entry.output = output;
                entry.error = None;
            }
            Outcome::Ran(StepOutcome::Failed {
                message, summary, ..
            }) => {
                entry.status = StepStatus::Failed;
                entry.summary = redact_owned(summary);
                entry.error = Some(redact_owned(message));
            }
            Outcome::Skipped(reason) => {
                entry.status = StepStatus::Skipped;
                entry.error = Some(reason.to_string());
            }
            Outcome::Cancelled(reason) => {
                entry.status = StepStatus::Cancelled;
                entry.error = Some(reason.to_string());
            }
        }
    }
}

/// Why a step was skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// Needs that failed (without `continue_on_error`) or did not finish.
    NeedsFailed(Vec<String>),
    /// Needs that were skipped, and the step has no `if` of its own.
    NeedsSkipped(Vec<String>),
    ConditionFalse(String),
    /// The `if` could not be evaluated.
    ConditionError(String),
    /// `--only` left it out and the resumed run has no result for it.
    NotSelected,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::NeedsFailed(ids) => write!(f, "{} did not succeed", ids.join(", ")),
            SkipReason::NeedsSkipped(ids) => write!(f, "{} was skipped", ids.join(", ")),
            SkipReason::ConditionFalse(condition) => write!(f, "`if` is false: {condition}"),
            SkipReason::ConditionError(error) => write!(f, "`if` could not be evaluated: {error}"),
            SkipReason::NotSelected => f.write_str("not selected by --only"),
        }
    }
}

/// Why a step was cancelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelReason {
    /// It was running when the run stopped (`--fail-fast`, an interrupt, a state failure).
    WhileRunning,
    /// It never started because the run stopped.
    RunStopped,
    /// It never started because the daily budget was spent: what was spent, and of what.
    BudgetSpent(String),
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CancelReason::WhileRunning => "cancelled",
            CancelReason::RunStopped => "the run was stopped",
            CancelReason::BudgetSpent(why) => why,
        })
    }
}
