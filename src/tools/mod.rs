//! The tools a step can be given: their names, Claude Code aliases, and allowlist resolution.

pub mod bash;
pub mod confine;
pub mod fs;
pub mod registry;
pub mod search;

use std::collections::BTreeSet;
use std::fmt;

/// Every tool `runner` provides (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ToolName {
    Bash,
    EditFile,
    Glob,
    Grep,
    ListDir,
    ReadFile,
    WriteFile,
}

impl ToolName {
    pub const ALL: [ToolName; 7] = [
        ToolName::Bash,
        ToolName::EditFile,
        ToolName::Glob,
        ToolName::Grep,
        ToolName::ListDir,
        ToolName::ReadFile,
        ToolName::WriteFile,
    ];

    /// The tools that never change anything (`explore` and `plan` get these and a read-only
    /// `bash`).
    pub const READ_ONLY: [ToolName; 4] = [
        ToolName::Glob,
        ToolName::Grep,
        ToolName::ListDir,
        ToolName::ReadFile,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ToolName::Bash => "bash",
            ToolName::EditFile => "edit_file",
            ToolName::Glob => "glob",
            ToolName::Grep => "grep",
            ToolName::ListDir => "list_dir",
            ToolName::ReadFile => "read_file",
            ToolName::WriteFile => "write_file",
        }
    }

    /// The Claude Code name accepted as an alias.
    pub fn claude_alias(self) -> &'static str {
        match self {
            ToolName::Bash => "Bash",
            ToolName::EditFile => "Edit",
            ToolName::Glob => "Glob",
            ToolName::Grep => "Grep",
            ToolName::ListDir => "LS",
            ToolName::ReadFile => "Read",
            ToolName::WriteFile => "Write",
        }
    }

    /// Whether having this tool lets a step change files (and so gives its bash a writable
    /// working directory).
    pub fn writes(self) -> bool {
        matches!(self, ToolName::WriteFile | ToolName::EditFile)
    }

    pub fn parse(name: &str) -> Option<ToolName> {
        Self::ALL
            .into_iter()
            .find(|t| t.as_str() == name || t.claude_alias() == name)
    }
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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
    "Task",
    "TodoWrite",
    "WebFetch",
    "WebSearch",
];

/// What one entry of a tool list means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolEntry {
    All,
    Tool(ToolName),
    /// A Claude Code tool we do not have (or an MCP tool): dropped with a warning.
    Unsupported(String),
    Unknown(String),
}

pub fn parse_entry(name: &str) -> ToolEntry {
    let name = name.trim();
    if name == "*" {
        return ToolEntry::All;
    }
    if let Some(tool) = ToolName::parse(name) {
        return ToolEntry::Tool(tool);
    }
    // Claude Code permission rules such as `Bash(git diff:*)` narrow a tool to some commands;
    // runner cannot enforce that narrowing, so granting the whole tool would widen access.
    let bare = name.split('(').next().unwrap_or(name).trim();
    let is_rule = name.contains('(')
        && (ToolName::parse(bare).is_some() || CLAUDE_ONLY_TOOLS.contains(&bare));
    if is_rule || CLAUDE_ONLY_TOOLS.contains(&bare) || bare.starts_with("mcp__") {
        return ToolEntry::Unsupported(name.to_owned());
    }
    ToolEntry::Unknown(name.to_owned())
}

/// Every spelling a user may write, for "did you mean".
pub fn known_spellings() -> impl Iterator<Item = &'static str> {
    ToolName::ALL
        .into_iter()
        .flat_map(|t| [t.as_str(), t.claude_alias()])
}

/// The hint for an unknown tool name: the closest spelling, or the list of tools.
pub fn unknown_tool_help(name: &str) -> String {
    crate::error::did_you_mean(name, known_spellings()).unwrap_or_else(|| {
        format!(
            "tools are {}",
            ToolName::ALL.map(|t| format!("`{t}`")).join(", ")
        )
    })
}

/// A resolved list of tools, or all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolSet {
    All,
    Some(BTreeSet<ToolName>),
}

impl ToolSet {
    pub fn expand(&self) -> BTreeSet<ToolName> {
        match self {
            ToolSet::All => ToolName::ALL.into_iter().collect(),
            ToolSet::Some(set) => set.clone(),
        }
    }
}

/// SPEC §3: start from the agent's tools, a step's `tools` replaces them, `disallowed_tools`
/// (the agent's and the step's) are removed last.
pub fn resolve(
    agent_tools: &ToolSet,
    step_tools: Option<&ToolSet>,
    disallowed: impl IntoIterator<Item = ToolName>,
) -> BTreeSet<ToolName> {
    let mut tools = step_tools.unwrap_or(agent_tools).expand();
    for tool in disallowed {
        tools.remove(&tool);
    }
    tools
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_and_names_parse() {
        assert_eq!(parse_entry("Read"), ToolEntry::Tool(ToolName::ReadFile));
        assert_eq!(
            parse_entry("read_file"),
            ToolEntry::Tool(ToolName::ReadFile)
        );
        assert_eq!(parse_entry("LS"), ToolEntry::Tool(ToolName::ListDir));
        assert_eq!(parse_entry(" * "), ToolEntry::All);
        assert_eq!(
            parse_entry("WebFetch"),
            ToolEntry::Unsupported("WebFetch".into())
        );
        assert_eq!(
            parse_entry("Bash(git diff:*)"),
            ToolEntry::Unsupported("Bash(git diff:*)".into())
        );
        assert_eq!(
            parse_entry("mcp__github__x"),
            ToolEntry::Unsupported("mcp__github__x".into())
        );
        assert_eq!(
            parse_entry("reed_file"),
            ToolEntry::Unknown("reed_file".into())
        );
    }

    #[test]
    fn step_tools_replace_and_disallowed_wins() {
        let agent = ToolSet::Some(ToolName::READ_ONLY.into_iter().collect());
        let step = ToolSet::Some([ToolName::Bash, ToolName::Grep].into_iter().collect());
        let got = resolve(&agent, Some(&step), [ToolName::Grep]);
        assert_eq!(got, [ToolName::Bash].into_iter().collect());
        let all = resolve(&ToolSet::All, None, [ToolName::Bash]);
        assert_eq!(all.len(), ToolName::ALL.len() - 1);
        assert!(!all.contains(&ToolName::Bash));
    }
}
