//! `runner validate WORKFLOW...`: every problem of every file.

use super::load_plan;
use crate::cli::{Io, LimitArgs, ValidateArgs};
use crate::error::Exit;

pub fn validate(args: ValidateArgs, io: &mut Io<'_>) -> Exit {
    let require_inputs = !args.resolve.inputs.is_empty();
    let mut failed = false;
    for workflow in &args.workflows {
        match load_plan(
            workflow,
            &args.resolve,
            LimitArgs::default(),
            require_inputs,
            io,
        ) {
            Some(plan) if !super::endpoints_ok(&plan, io) => failed = true,
            Some(plan) => {
                let (steps, waves) = (plan.steps().len(), plan.waves().len());
                let _ = writeln!(
                    io.out,
                    "ok: {} ({steps} step{}, {waves} wave{})",
                    crate::terminal::clean(workflow.as_str()),
                    if steps == 1 { "" } else { "s" },
                    if waves == 1 { "" } else { "s" },
                );
            }
            None => failed = true,
        }
    }
    if failed { Exit::Invalid } else { Exit::Success }
}
