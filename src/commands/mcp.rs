//! `runner mcp list WORKFLOW`: starts the MCP servers the workflow's steps use (as a run would)
//! and lists each one's tools with their descriptions, then stops them.

use std::collections::BTreeMap;

use super::load_plan_to_inspect;
use crate::cli::{Io, McpListArgs};
use crate::error::Exit;
use crate::mcp::Hub;

pub fn list(args: McpListArgs, io: &mut Io<'_>) -> Exit {
    let Some(plan) = load_plan_to_inspect(&args.workflow, &args.resolve, io) else {
        return Exit::Invalid;
    };
    let servers: BTreeMap<_, _> = plan
        .steps()
        .iter()
        .flat_map(|s| s.mcp_servers.clone())
        .collect();
    if servers.is_empty() {
        let _ = writeln!(io.out, "no step of `{}` uses an MCP server", args.workflow);
        return Exit::Success;
    }
    let workdir = super::workdir(&args.resolve)
        .ok()
        .and_then(|d| d.canonicalize_utf8().ok())
        .unwrap_or_default();
    let Some(runtime) = super::runtime(io) else {
        return Exit::Unexpected;
    };
    let hub = Hub::new(workdir);
    let listed = runtime.block_on(async {
        let mut listed = Vec::new();
        for (name, def) in &servers {
            let one = BTreeMap::from([(name.clone(), def.clone())]);
            let tools = hub.tools(&one).await;
            let dropped = match &tools {
                Ok(_) => hub.server(name, def).await.map_or(0, |s| s.dropped),
                Err(_) => 0,
            };
            listed.push((name.clone(), tools.map(|t| (t, dropped))));
        }
        hub.shutdown().await;
        listed
    });
    let mut failed = false;
    for (name, tools) in listed {
        match tools {
            Ok((tools, dropped)) => {
                let _ = writeln!(
                    io.out,
                    "{name} ({})",
                    crate::units::count(tools.len() as u64, "tool", "tools")
                );
                if dropped > 0 {
                    let _ = writeln!(
                        io.err,
                        "warning: MCP server `{name}`: {dropped} tools left out (a name that is not 1-64 letters, digits, `_` or `-`, or more than 1000 tools)"
                    );
                }
                for tool in tools {
                    let first = tool.description().lines().next().unwrap_or_default();
                    let _ = writeln!(
                        io.out,
                        "  {}  {}",
                        tool.name(),
                        crate::terminal::clean(first)
                    );
                }
            }
            Err(err) => {
                failed = true;
                let _ = writeln!(io.err, "error: {}", crate::terminal::clean(&err));
            }
        }
    }
    if failed {
        Exit::StepFailed
    } else {
        Exit::Success
    }
}
