//! Command steps (`run`): a shell command in the step's sandbox and directory, no model. Its
//! stdout is the step's summary, or its `output` when the step has `output_schema`; an exit
//! status other than 0 fails the step.

use std::time::Instant;

use crate::event::{Emitter, EventKind};
use crate::plan::PlannedStep;
use crate::session::checks::tail;
use crate::session::{FailureKind, StepOutcome, output};
use crate::tools::StepTools;
use crate::tools::bash::{Exit, run_sandboxed};

/// Bytes of stdout a command step keeps as its summary or output.
pub const MAX_STDOUT_BYTES: usize = 1024 * 1024;

pub async fn run(step: &PlannedStep, tools: &StepTools, events: &Emitter) -> StepOutcome {
    let Some(command) = &step.command else {
        return StepOutcome::failed(FailureKind::Setup, "the step has no command");
    };
    let root = tools.context.workspace.root().as_std_path().to_owned();
    let started = Instant::now();
    // The step's timeout stops it: the scheduler drops this future, which stops the command.
    let ran = match run_sandboxed(&root, command, None, &tools.context.bash).await {
        Ok(ran) => ran,
        Err(err) => return StepOutcome::failed(FailureKind::Setup, err),
    };
    let stderr = tail(&ran.stderr, ran.stderr_total);
    events.emit(EventKind::CommandFinished {
        step: events.step().to_owned(),
        command: command.clone(),
        exit_code: match ran.exit {
            Exit::Code(code) => Some(code),
            _ => None,
        },
        duration_ms: started.elapsed().as_millis() as u64,
        stderr: stderr.clone(),
    });
    let kept = &ran.stdout[..ran.stdout.len().min(MAX_STDOUT_BYTES)];
    let mut summary = String::from_utf8_lossy(kept).into_owned();
    let cut = ran.stdout_total.saturating_sub(kept.len());
    if ran.exit != Exit::Code(0) {
        let mut message = format!("the command {}", ran.exit);
        if !stderr.trim().is_empty() {
            message.push_str(":\n");
            message.push_str(stderr.trim_end());
        }
        if let Some(note) = ran.read_only_note(tools.context.bash.mode) {
            message.push('\n');
            message.push_str(note);
        }
        return StepOutcome::Failed {
            kind: FailureKind::Command,
            message,
            summary,
        };
    }
    let Some(schema) = &step.output_schema else {
        if cut > 0 {
            summary.push_str(&format!(
                "\n[… {cut} more bytes of stdout cut: a summary keeps {} …]",
                crate::limits::bytes(MAX_STDOUT_BYTES as u64)
            ));
        }
        return StepOutcome::succeeded(summary);
    };
    if cut > 0 {
        return StepOutcome::Failed {
            kind: FailureKind::OutputSchema,
            message: format!(
                "the command printed {} to stdout; structured output may be at most {}",
                crate::limits::bytes(ran.stdout_total as u64),
                crate::limits::bytes(MAX_STDOUT_BYTES as u64)
            ),
            summary: String::new(),
        };
    }
    match output::check(&summary, schema) {
        Ok(value) => StepOutcome::Succeeded {
            summary,
            output: value,
        },
        Err(problem) => StepOutcome::Failed {
            kind: FailureKind::OutputSchema,
            message: format!("the command's stdout does not match `output_schema`: {problem}"),
            summary,
        },
    }
}
