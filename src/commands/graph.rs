//! `runner graph WORKFLOW`: the DAG as Mermaid or DOT.

use super::load_plan;
use crate::cli::{GraphArgs, GraphFormat, Io, LimitArgs};
use crate::error::Exit;
use crate::plan::render;

pub fn graph(args: GraphArgs, io: &mut Io<'_>) -> Exit {
    let Some(plan) = load_plan(
        &args.workflow,
        &args.resolve,
        LimitArgs::default(),
        false,
        io,
    ) else {
        return Exit::Invalid;
    };
    let text = match args.format {
        GraphFormat::Mermaid => render::to_mermaid(&plan),
        GraphFormat::Dot => render::to_dot(&plan),
    };
    let _ = write!(io.out, "{text}");
    Exit::Success
}
