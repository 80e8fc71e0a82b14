//! `runner graph WORKFLOW`: the DAG as Mermaid or DOT.

use super::load_plan_to_inspect;
use crate::cli::{GraphArgs, GraphFormat, Io};
use crate::error::Exit;
use crate::plan::render;

pub fn graph(args: GraphArgs, io: &mut Io<'_>) -> Exit {
    let Some(plan) = load_plan_to_inspect(&args.workflow, &args.resolve, io) else {
        return Exit::Invalid;
    };
    let text = match args.format {
        GraphFormat::Mermaid => render::to_mermaid(&plan),
        GraphFormat::Dot => render::to_dot(&plan),
    };
    let _ = write!(io.out, "{}", crate::terminal::clean(&text));
    Exit::Success
}
