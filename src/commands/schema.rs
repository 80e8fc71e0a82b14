//! `runner schema workflow|agent`: the JSON Schema, as committed in `schemas/`.

use crate::agent::agent_schema;
use crate::cli::{Io, SchemaArgs, SchemaKind};
use crate::error::Exit;
use crate::workflow::workflow_schema;

/// The exact text of `schemas/*.json`.
pub fn schema_text(schema: &serde_json::Value) -> String {
    crate::terminal::to_json_pretty(schema).unwrap_or_default()
}

pub fn schema(args: SchemaArgs, io: &mut Io<'_>) -> Exit {
    let schema = match args.kind {
        SchemaKind::Workflow => workflow_schema(),
        SchemaKind::Agent => agent_schema(),
    };
    let _ = writeln!(io.out, "{}", schema_text(&schema));
    Exit::Success
}
