//! The frontmatter fields Claude Code documents for an agent file, beyond tools and model
//! (docs/src/agents.md, "Fields"): their values, and the warning for a key runner does not know.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use super::ToolList;
use crate::error::Problem;
use crate::workflow::source::{Node, SourceFile, Spanned};

/// Every key an agent file may hold. Others are a warning, never an error: Claude Code adds
/// fields, and a file written for it must still load.
pub const KNOWN_KEYS: &[&str] = &[
    "name",
    "description",
    "tools",
    "disallowedTools",
    "disallowed_tools",
    "model",
    "permissionMode",
    "maxTurns",
    "max_turns",
    "skills",
    "mcpServers",
    "requiredMcpServers",
    "hooks",
    "memory",
    "background",
    "effort",
    "isolation",
    "color",
    "initialPrompt",
    "priority",
    "forkContext",
    "fork_context",
    "omitClaudeMd",
    "omit_claude_md",
    "system_prompt",
];

/// Claude Code's permission modes. Runner never asks before a tool call (the sandbox is the
/// permission), so most keep the agent's tools; `plan` narrows them, `dontAsk` refuses calls
/// outside them in words, and `bypassPermissions` is refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PermissionMode {
    #[default]
    Default,
    Manual,
    AcceptEdits,
    Auto,
    DontAsk,
    BypassPermissions,
    Plan,
}

impl PermissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Default => "default",
            PermissionMode::Manual => "manual",
            PermissionMode::AcceptEdits => "acceptEdits",
            PermissionMode::Auto => "auto",
            PermissionMode::DontAsk => "dontAsk",
            PermissionMode::BypassPermissions => "bypassPermissions",
            PermissionMode::Plan => "plan",
        }
    }
}

/// Where an agent's persistent memory lives (Claude Code's `memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MemoryScope {
    /// `~/.claude/agent-memory/<name>/`: every project's.
    User,
    /// `.claude/agent-memory/<name>/` in the working directory, meant to be committed.
    Project,
    /// `.claude/agent-memory-local/<name>/` in the working directory, not committed.
    Local,
}

impl MemoryScope {
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryScope::User => "user",
            MemoryScope::Project => "project",
            MemoryScope::Local => "local",
        }
    }

    /// The folder, relative to the working directory (`project`, `local`) or to the home
    /// directory (`user`).
    pub fn folder(self, agent: &str) -> String {
        match self {
            MemoryScope::User => format!(".claude/agent-memory/{agent}"),
            MemoryScope::Project => format!(".claude/agent-memory/{agent}"),
            MemoryScope::Local => format!(".claude/agent-memory-local/{agent}"),
        }
    }
}

/// Names (skills, servers), as a list or one comma-separated string, as Claude Code writes
/// `tools`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NameList(pub Vec<String>);

impl<'de> Deserialize<'de> for NameList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ToolList::deserialize(deserializer).map(|list| NameList(list.0))
    }
}

impl JsonSchema for NameList {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NameList".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Names, as a list or a comma-separated string.",
            "type": ["array", "string"],
            "items": { "type": "string" }
        })
    }
}

/// A warning for each top-level key of `tree` that runner does not know, naming the file and
/// pointing at the key.
pub fn unknown_keys(file: &Arc<SourceFile>, tree: &Spanned<Node>) -> Vec<Problem> {
    let Node::Map(entries) = &tree.value else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|(key, _)| !KNOWN_KEYS.contains(&key.as_str()))
        .map(|(key, (span, _))| {
            let mut problem = Problem::warning(format!(
                "`{}`: unknown key `{key}` in an agent file; runner ignores it",
                file.name
            ))
            .at(file, span.clone(), "unknown key, ignored");
            if let Some(hint) = crate::error::did_you_mean(key, KNOWN_KEYS.iter().copied()) {
                problem = problem.help(hint);
            }
            problem
        })
        .collect()
}

/// A skill's or an agent's name as a path part: one plain word, so `../x` cannot reach outside
/// the skills folder.
pub fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{LoadedAgent, load_agent_source};
    use crate::tools::Registry;

    fn load(name: &str, text: &str) -> Result<LoadedAgent, Vec<Problem>> {
        load_agent_source(SourceFile::new(name, text), &Registry::builtin())
    }

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/tests/fixtures/claude-code-agents/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(path).expect("fixture")
    }

    #[test]
    fn every_field_of_claude_code_loads_and_each_is_read() {
        let loaded = load("everything.md", &fixture("everything.md")).expect("loads");
        let agent = &loaded.agent;
        assert_eq!(agent.permission_mode, PermissionMode::AcceptEdits);
        assert_eq!(agent.effort, Some(crate::provider::message::Effort::High));
        assert_eq!(agent.isolation, Some(crate::workflow::Isolation::Worktree));
        assert!(agent.background);
        assert_eq!(agent.memory, Some(MemoryScope::Project));
        assert_eq!(agent.skills, ["api-conventions"]);
        assert_eq!(agent.required_mcp_servers, ["github"]);
        assert_eq!(agent.max_turns, Some(20));
        let warnings: Vec<String> = loaded.warnings.iter().map(|w| w.message.clone()).collect();
        for key in ["color", "initialPrompt", "hooks", "priority"] {
            assert!(
                warnings.iter().any(|w| w.contains(&format!(
                    "`{key}` is a Claude Code setting that runner ignores"
                )) && w.contains("everything.md")),
                "{key}: {warnings:?}"
            );
        }
        let unknown = loaded
            .warnings
            .iter()
            .find(|w| w.message.contains("unknown key `temperature`"))
            .unwrap_or_else(|| panic!("{warnings:?}"));
        assert!(!unknown.is_error());
        assert!(unknown.message.contains("everything.md"));
        let span = unknown.span.clone().expect("a span");
        assert_eq!(&fixture("everything.md")[span], "temperature");
    }

    #[test]
    fn a_known_key_of_the_wrong_type_or_value_is_still_an_error() {
        for (text, expect) in [
            ("background: sometimes", "background"),
            ("effort: extreme", "effort"),
            ("memory: team", "memory"),
            ("isolation: container", "isolation"),
            ("requiredMcpServers: {a: 1}", "requiredMcpServers"),
        ] {
            let file = format!("---\nname: a\n{text}\n---\nPrompt.\n");
            let problems = load("a.md", &file).expect_err(text);
            assert!(
                problems
                    .iter()
                    .any(|p| p.is_error() && p.message.contains(expect)),
                "{text}: {problems:?}"
            );
        }
    }

    #[test]
    fn bypass_permissions_is_refused_and_an_unknown_mode_gets_a_suggestion() {
        let problems = load(
            "a.md",
            "---\nname: a\npermissionMode: bypassPermissions\n---\nPrompt.\n",
        )
        .expect_err("refused");
        assert!(
            problems
                .iter()
                .any(|p| p.message.contains("no unsandboxed mode for agents")),
            "{problems:?}"
        );
        let problems = load(
            "a.md",
            "---\nname: a\npermissionMode: acceptEdit\n---\nPrompt.\n",
        )
        .expect_err("unknown mode");
        let text = format!("{problems:?}");
        assert!(text.contains("acceptEdits"), "{text}");
    }

    #[test]
    fn plan_mode_keeps_only_tools_that_change_nothing() {
        let loaded = load(
            "a.md",
            "---\nname: a\ntools: Read, Write, Edit, Bash, Grep\npermissionMode: plan\n---\nPrompt.\n",
        )
        .expect("loads");
        let tools = loaded.agent.tools.expand(&Registry::builtin());
        assert!(
            tools.contains("read_file") && tools.contains("grep"),
            "{tools:?}"
        );
        assert!(
            !tools.contains("write_file") && !tools.contains("edit_file"),
            "{tools:?}"
        );
        for mode in ["default", "manual", "acceptEdits", "auto", "dontAsk"] {
            let loaded = load(
                "a.md",
                &format!("---\nname: a\ntools: Read, Write\npermissionMode: {mode}\n---\nP.\n"),
            )
            .expect(mode);
            assert!(
                loaded
                    .agent
                    .tools
                    .expand(&Registry::builtin())
                    .contains("write_file"),
                "{mode}"
            );
        }
    }

    #[test]
    fn user_memory_is_said_to_be_read_only() {
        let loaded = load("a.md", "---\nname: a\nmemory: user\n---\nPrompt.\n").expect("loads");
        assert_eq!(loaded.agent.memory, Some(MemoryScope::User));
        assert!(
            loaded
                .warnings
                .iter()
                .any(|w| w.message.contains("`memory: user` is read, not written")),
            "{:?}",
            loaded.warnings
        );
    }

    #[test]
    fn claude_codes_documented_examples_load() {
        for name in [
            "code-reviewer.md",
            "debugger.md",
            "data-scientist.md",
            "db-reader.md",
            "memory-reviewer.md",
            "api-developer.md",
            "browser-tester.md",
        ] {
            let loaded = load(name, &fixture(name)).unwrap_or_else(|p| panic!("{name}: {p:?}"));
            assert!(!loaded.agent.description.is_empty(), "{name}");
        }
    }
}
