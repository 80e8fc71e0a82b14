//! The tools a step can be given. Each is a [`Tool`]: a name, what the model is told about it, and
//! `call`. Built-ins and any later source (MCP servers, `task`) register into one
//! [`Registry`](registry::Registry); allowlists, plans and resume fingerprints only ever see
//! names.

pub mod bash;
pub mod confine;
pub mod edit;
pub mod fs;
pub mod registry;
pub mod search;
pub mod task;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::Value;

use bash::BashEnv;
use confine::Workspace;
pub use registry::{Registry, StepTools};
pub use task::{Delegate, TASK, TASK_OUTPUT};

use crate::provider::message::ChatRequest;

/// What a tool call answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub text: String,
    pub is_error: bool,
    /// The tool itself broke (an MCP server that crashed, hung or answered garbage): the step
    /// fails with this text instead of going on without the tool.
    pub fatal: bool,
    /// Why the call was refused without doing what it asked, when it was: recorded with its
    /// result, so `runner audit` reads it rather than guessing from the text.
    pub refused: Option<Refusal>,
}

/// Why runner refused a call (docs/src/audit.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// There is no tool of that name.
    UnknownTool,
    /// A tool runner has, not given to the step.
    NotGranted,
    /// Not given, and the agent's `permissionMode: dontAsk` denies it.
    DontAsk,
    /// The confined opener refused the path: outside the working directory, inside `.git`, the
    /// state directory or the cassettes.
    Path,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::UnknownTool => "unknown_tool",
            Refusal::NotGranted => "not_granted",
            Refusal::DontAsk => "dont_ask",
            Refusal::Path => "path",
        }
    }
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: false,
            fatal: false,
            refused: None,
        }
    }

    pub fn error(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: true,
            fatal: false,
            refused: None,
        }
    }

    /// An error result of a call runner refused, and why.
    pub fn refused(why: Refusal, text: impl Into<String>) -> Self {
        Self {
            refused: Some(why),
            ..Self::error(text)
        }
    }

    pub fn fatal(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: true,
            fatal: true,
            refused: None,
        }
    }
}

/// Everything a step's tool calls may use.
#[derive(Clone)]
pub struct ToolContext {
    pub workspace: Arc<Workspace>,
    /// How `bash` runs in this step.
    pub bash: Arc<BashEnv>,
    /// Runs subagents for `task`, when the agent may delegate.
    pub delegate: Option<Arc<dyn Delegate>>,
    /// The request whose reply made the current tool calls (a forked subagent starts from it).
    pub conversation: Arc<Mutex<Option<ChatRequest>>>,
}

impl ToolContext {
    pub fn new(workspace: Arc<Workspace>, bash: Arc<BashEnv>) -> Self {
        Self {
            workspace,
            bash,
            delegate: None,
            conversation: Arc::default(),
        }
    }
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("workspace", &self.workspace)
            .field("bash", &self.bash)
            .field("delegates", &self.delegate.is_some())
            .finish()
    }
}

/// A tool a model can call.
pub trait Tool: Send + Sync + 'static {
    /// The name the model calls it by and tool lists use.
    fn name(&self) -> &str;
    /// Other names accepted in tool lists (Claude Code's, such as `Read`).
    fn aliases(&self) -> &[&str] {
        &[]
    }
    /// What the model is told the tool does.
    fn description(&self) -> &str;
    /// The JSON Schema of its input.
    fn input_schema(&self) -> Value;
    /// Whether it changes files. A step with such a tool may also write with `bash`.
    fn writes(&self) -> bool {
        false
    }
    /// Runs one call. Failures are error results the model can act on, never panics.
    fn call<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput>;
}

/// Runs blocking file-system work off the async workers.
pub(crate) fn blocking(
    ctx: &ToolContext,
    input: &Value,
    work: fn(&Workspace, &Value) -> ToolOutput,
) -> BoxFuture<'static, ToolOutput> {
    let workspace = ctx.workspace.clone();
    let input = input.clone();
    Box::pin(async move {
        tokio::task::spawn_blocking(move || work(&workspace, &input))
            .await
            .unwrap_or_else(|err| ToolOutput::error(format!("the tool failed unexpectedly: {err}")))
    })
}

/// One line per item, at most `limit` of `total`, then `note` when some were left out.
pub(crate) fn capped_lines(
    items: impl IntoIterator<Item = String>,
    limit: usize,
    total: usize,
    note: &str,
) -> ToolOutput {
    let mut out: String = items
        .into_iter()
        .take(limit)
        .map(|line| format!("{line}\n"))
        .collect();
    if total > limit {
        out.push_str(&format!("[showing {limit} of {total}; {note}]\n"));
    }
    ToolOutput::ok(out)
}

pub(crate) fn parse_input<T: for<'de> Deserialize<'de>>(
    tool: &str,
    input: &Value,
) -> Result<T, ToolOutput> {
    // Read from the borrowed tree: a tool's input is not copied to be read.
    T::deserialize(input)
        .map_err(|err| ToolOutput::error(format!("invalid input for `{tool}`: {err}")))
}

/// Claude Code tools that `runner` does not provide. An agent copied from `.claude/agents/` that
/// lists them still loads; they are left out with a warning rather than failing the workflow.
pub const CLAUDE_ONLY_TOOLS: &[&str] = &[
    "AskUserQuestion",
    "BashOutput",
    "ExitPlanMode",
    "KillShell",
    "MultiEdit",
    "NotebookEdit",
    "NotebookRead",
    "Skill",
    "SlashCommand",
    "TodoWrite",
    "WebFetch",
    "WebSearch",
];

/// The server an MCP tool name (`mcp__<server>` or `mcp__<server>__<tool>`) belongs to.
pub fn mcp_server(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("mcp__")?;
    let server = rest.split("__").next().unwrap_or(rest);
    (!server.is_empty()).then_some(server)
}

/// Why an entry of a tool list was left out: a Claude Code permission rule narrows a tool runner
/// has (and cannot narrow), anything else is a tool runner does not have.
pub fn left_out(entry: &str) -> String {
    match entry.split_once('(') {
        Some((tool, _)) => format!(
            "`{entry}` is a Claude Code permission rule runner cannot enforce; left out, and `{}` is not granted by it (granting all of it would widen access)",
            tool.trim()
        ),
        None => format!("tool `{entry}` is not provided by runner; left out"),
    }
}

/// What one entry of a tool list means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolEntry {
    All,
    /// A tool's name (an alias is turned into the name).
    Tool(String),
    /// A Claude Code tool we do not have: dropped with a warning.
    Unsupported(String),
    /// An MCP server's tool (`mcp__<server>__<tool>`) or all of a server's (`mcp__<server>`),
    /// kept by name: which exist is known once the server runs.
    Mcp(String),
    /// Claude Code's `Agent(a, b)` (or `Task(a, b)`): `task` limited to starting those agents.
    Spawn(Vec<String>),
    Unknown(String),
}

/// A resolved list of tools, or all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolSet {
    All,
    Some(BTreeSet<String>),
}

impl ToolSet {
    pub fn expand(&self, registry: &Registry) -> BTreeSet<String> {
        match self {
            ToolSet::All => registry.names().map(str::to_owned).collect(),
            ToolSet::Some(set) => set.clone(),
        }
    }

    /// `*`, or the names joined with `, `.
    pub fn describe(&self) -> String {
        match self {
            ToolSet::All => "*".into(),
            ToolSet::Some(set) => set.iter().cloned().collect::<Vec<_>>().join(", "),
        }
    }
}

/// docs/src/tools.md: start from the agent's tools, a step's `tools` replaces them,
/// `disallowed_tools` (the agent's and the step's) are removed last.
pub fn resolve<'a>(
    registry: &Registry,
    agent_tools: &ToolSet,
    step_tools: Option<&ToolSet>,
    disallowed: impl IntoIterator<Item = &'a String>,
) -> BTreeSet<String> {
    let mut tools = step_tools.unwrap_or(agent_tools).expand(registry);
    for tool in disallowed {
        tools.remove(tool);
    }
    tools
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_unknown_tool_is_suggested_in_the_form_it_was_written() {
        let registry = Registry::builtin();
        assert_eq!(registry.unknown_help("grepp"), "did you mean `grep`?");
        assert_eq!(registry.unknown_help("Grepp"), "did you mean `Grep`?");
        // A closer name in the other form still wins.
        assert_eq!(registry.unknown_help("read"), "did you mean `Read`?");
    }

    #[test]
    fn aliases_and_names_parse() {
        let registry = Registry::builtin();
        assert_eq!(registry.entry("Read"), ToolEntry::Tool("read_file".into()));
        assert_eq!(
            registry.entry("read_file"),
            ToolEntry::Tool("read_file".into())
        );
        assert_eq!(registry.entry("LS"), ToolEntry::Tool("list_dir".into()));
        assert_eq!(registry.entry(" * "), ToolEntry::All);
        assert_eq!(
            registry.entry("WebFetch"),
            ToolEntry::Unsupported("WebFetch".into())
        );
        assert_eq!(
            registry.entry("Bash(git diff:*)"),
            ToolEntry::Unsupported("Bash(git diff:*)".into())
        );
        assert_eq!(
            registry.entry("mcp__github__x"),
            ToolEntry::Mcp("mcp__github__x".into())
        );
        assert_eq!(
            registry.entry("reed_file"),
            ToolEntry::Unknown("reed_file".into())
        );
    }

    #[test]
    fn step_tools_replace_and_disallowed_wins() {
        let registry = Registry::builtin();
        let agent = ToolSet::Some(names(&["glob", "grep", "list_dir", "read_file"]));
        let step = ToolSet::Some(names(&["bash", "grep"]));
        let got = resolve(&registry, &agent, Some(&step), &names(&["grep"]));
        assert_eq!(got, names(&["bash"]));
        let all = resolve(&registry, &ToolSet::All, None, &names(&["bash"]));
        assert_eq!(all.len(), registry.names().count() - 1);
        assert!(!all.contains("bash"));
    }
}
