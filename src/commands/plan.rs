//! `runner plan WORKFLOW` (and `run --dry-run`): the plan, with no model called.

use camino::Utf8Path;

use super::load_plan;
use crate::cli::{Format, Io, LimitArgs, ResolveArgs};
use crate::error::Exit;
use crate::plan::render;
use crate::sandbox::Support;

pub fn plan(
    workflow: &Utf8Path,
    args: &ResolveArgs,
    limits: LimitArgs,
    format: Format,
    io: &mut Io<'_>,
) -> Exit {
    let Some(plan) = load_plan(workflow, args, limits, true, io) else {
        return Exit::Invalid;
    };
    if !super::endpoints_ok(&plan, io) {
        return Exit::Invalid;
    }
    let text = match format {
        // The plan quotes the workflow (prompts, names): none of its control characters reach
        // a terminal. JSON escapes them itself.
        Format::Text => {
            crate::terminal::clean(&render::to_text(&plan, Support::probe())).into_owned()
        }
        Format::Json => render::to_json(&plan, Support::probe()),
    };
    let _ = write!(io.out, "{text}");
    Exit::Success
}
