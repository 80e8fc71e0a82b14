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
    state_dir: Option<&Utf8Path>,
    format: Format,
    io: &mut Io<'_>,
) -> Exit {
    let Some(plan) = load_plan(workflow, args, limits, true, io) else {
        return Exit::Invalid;
    };
    if !super::endpoints_ok(&plan, io) {
        return Exit::Invalid;
    }
    // The earlier runs of this workflow: its critical path by their durations, and an ETA.
    let (_, state_dir) = crate::run::directories(args.workdir.as_deref(), state_dir);
    let history = crate::run::history::History::read(&state_dir, &plan);
    let paths = history.paths(&plan);
    let forecast = crate::run::forecast::forecast(&plan, &history, &|_| false);
    let path = render::PathView {
        paths: &paths,
        runs: history.runs.len(),
        forecast: &forecast,
    };
    let text = match format {
        // The plan quotes the workflow (prompts, names): none of its control characters reach
        // a terminal. JSON escapes them itself.
        Format::Text => {
            crate::terminal::clean(&render::to_text_with(&plan, Support::probe(), &path))
                .into_owned()
        }
        Format::Json => render::to_json_with(&plan, Support::probe(), &path),
    };
    let _ = write!(io.out, "{text}");
    Exit::Success
}
