//! `runner agents`: every agent a workflow can use, with where it comes from.

use camino::{Utf8Path, Utf8PathBuf};

use super::{report, workdir};
use crate::agent::{AgentCatalog, AgentSource, WorkdirTrust, lookup_dirs};
use crate::cli::{AgentsArgs, Format, Io, ResolveArgs};
use crate::error::{Exit, Problem};
use crate::tools::Registry;

// Over 80 lines: the listing's columns and warnings in one pass over the catalog.
pub fn agents(args: AgentsArgs, io: &mut Io<'_>) -> Exit {
    let resolve = ResolveArgs {
        workdir: args.workdir.clone(),
        ..Default::default()
    };
    let dir = match workdir(&resolve) {
        Ok(dir) => dir,
        Err(problem) => {
            report(io, &[problem]);
            return Exit::Invalid;
        }
    };
    // The workflow's own keys can trust the working directory's agents, as in `run`.
    let def = args
        .workflow
        .as_deref()
        .and_then(|w| crate::workflow::load_workflow(w).ok());
    let trust = WorkdirTrust::new(args.trust_workdir, def.as_ref().map(|l| &l.def));
    let catalog = AgentCatalog::load(
        &lookup_dirs(
            &args.agents_dirs,
            args.workflow.as_deref(),
            &dir,
            &trust,
            crate::agent::home_dir().as_deref(),
        ),
        &Registry::builtin(),
    );
    let mut rows = vec![[
        "NAME".to_owned(),
        "SOURCE".to_owned(),
        "MODEL".to_owned(),
        "TOOLS".to_owned(),
        "DESCRIPTION".to_owned(),
    ]];
    let mut listed = Vec::new();
    for agent in catalog.agents() {
        // What the agent ends up with: a list shows what is left; only `*` needs a "minus".
        let tools = match &agent.tools {
            crate::tools::ToolSet::Some(set) => set
                .difference(&agent.disallowed)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", "),
            crate::tools::ToolSet::All if agent.disallowed.is_empty() => "*".to_owned(),
            crate::tools::ToolSet::All => {
                let minus: Vec<&str> = agent.disallowed.iter().map(String::as_str).collect();
                format!("* (minus {})", minus.join(", "))
            }
        };
        let model = agent
            .model
            .clone()
            .unwrap_or_else(|| agent.default_alias.to_owned());
        listed.push(serde_json::json!({
            "name": agent.name,
            "source": agent.source.kind(),
            "path": agent.source.path().map(|p| p.to_string()),
            "trusted": agent.source.trusted(),
            "model": model,
            "tools": tools,
            "description": agent.description,
            "permission_mode": agent.permission_mode.as_str(),
            "effort": agent.effort.map(|e| e.as_str()),
            "isolation": agent.isolation.map(|i| i.as_str()),
            "background": agent.background,
            "memory": agent.memory.map(|m| m.as_str()),
            "skills": agent.skills,
            "required_mcp_servers": agent.required_mcp_servers,
        }));
        rows.push([
            agent.name.clone(),
            display_source(&agent.source),
            model,
            tools,
            one_line(&agent.description, DESCRIPTION_WIDTH),
        ]);
    }
    let text = match args.format {
        Format::Text => crate::report::table(&rows),
        Format::Json => {
            crate::terminal::to_json_pretty(&serde_json::json!({ "agents": listed }))
                .unwrap_or_default()
                + "\n"
        }
    };
    let _ = write!(io.out, "{}", crate::terminal::clean(&text));
    for agent in &catalog.shadowed {
        let _ = writeln!(
            io.err,
            "note: agent `{}` from {} is hidden by one of the same name with higher priority",
            crate::terminal::clean(&agent.name),
            crate::terminal::clean(&display_source(&agent.source))
        );
    }
    let mut problems: Vec<Problem> = catalog.warnings.values().flatten().cloned().collect();
    for (_, list) in catalog.broken.values() {
        problems.extend(list.iter().cloned());
    }
    report(io, &problems);
    if catalog.broken.is_empty() {
        Exit::Success
    } else {
        let _ = writeln!(
            io.err,
            "error: {} agent file{} could not be loaded",
            catalog.broken.len(),
            if catalog.broken.len() == 1 { "" } else { "s" }
        );
        Exit::Invalid
    }
}

/// A description's first line, cut to `width` characters: a table row stays one line.
const DESCRIPTION_WIDTH: usize = 60;

fn one_line(text: &str, width: usize) -> String {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let more = first.chars().count() > width || text.trim().lines().nth(1).is_some();
    let mut short: String = first.chars().take(width).collect();
    if more {
        short = short.trim_end().to_owned();
        short.push('…');
    }
    short
}

/// Agent files shown relative to the current directory when they are under it.
fn display_source(source: &AgentSource) -> String {
    match source {
        AgentSource::Builtin => "built-in".into(),
        AgentSource::Untrusted(path) => format!("{} (untrusted)", relative(path)),
        AgentSource::File(path) => relative(path),
        AgentSource::User(path) => format!("user: {}", crate::agent::home_relative(path)),
    }
}

fn relative(path: &Utf8Path) -> String {
    let cwd = std::env::current_dir()
        .ok()
        .and_then(|p| Utf8PathBuf::from_path_buf(p).ok());
    let canonical = path.canonicalize_utf8().unwrap_or_else(|_| path.to_owned());
    cwd.and_then(|cwd| canonical.strip_prefix(&cwd).ok().map(Utf8Path::to_owned))
        .unwrap_or_else(|| path.to_owned())
        .to_string()
}
