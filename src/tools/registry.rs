//! The tools runner knows, by name, and a step's view of them: what the model is told about the
//! tools it was given, and the dispatch of its calls (anything else is an error result).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;

use super::{CLAUDE_ONLY_TOOLS, Refusal, Tool, ToolContext, ToolEntry, ToolOutput};
use crate::provider::message::ToolDef;

/// Every tool a workflow may name.
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl Registry {
    /// runner's own tools (docs/src/tools.md).
    pub fn builtin() -> Self {
        let mut registry = Self::default();
        registry
            .register(super::fs::ReadFile)
            .register(super::fs::ListDir)
            .register(super::edit::WriteFile)
            .register(super::edit::EditFile)
            .register(super::search::Glob)
            .register(super::search::Grep)
            .register(super::bash::Bash)
            .register(super::task::Task)
            .register(super::task::TaskOutput);
        registry
    }

    /// Adds a tool; one of the same name is replaced.
    pub fn register(&mut self, tool: impl Tool) -> &mut Self {
        self.tools.insert(tool.name().to_owned(), Arc::new(tool));
        self
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Tool names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// Whether any of `names` changes files.
    pub fn any_writes<'a>(&self, names: impl IntoIterator<Item = &'a String>) -> bool {
        names
            .into_iter()
            .any(|n| self.get(n).is_some_and(|t| t.writes()))
    }

    /// What one entry of a tool list means: a name, an alias, `*`, or something runner does not
    /// have.
    pub fn entry(&self, spelled: &str) -> ToolEntry {
        let spelled = spelled.trim();
        if spelled == "*" {
            return ToolEntry::All;
        }
        if let Some(tool) = self
            .tools
            .values()
            .find(|t| t.name() == spelled || t.aliases().contains(&spelled))
        {
            return ToolEntry::Tool(tool.name().to_owned());
        }
        // `Agent(explore, reviewer)`: Claude Code's way to say which subagents `task` may start,
        // which runner enforces (docs/src/agents.md, "Fields").
        if let Some((bare, inner)) = spelled
            .strip_suffix(')')
            .and_then(|s| s.split_once('('))
            .filter(|(bare, _)| matches!(bare.trim(), "Agent" | "Task" | "task"))
        {
            let _ = bare;
            return ToolEntry::Spawn(
                inner
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect(),
            );
        }
        // Claude Code permission rules such as `Bash(git diff:*)` narrow a tool to some commands;
        // runner cannot enforce that narrowing, and granting the whole tool would widen access.
        let bare = spelled.split('(').next().unwrap_or(spelled).trim();
        let known = |name: &str| {
            CLAUDE_ONLY_TOOLS.contains(&name)
                || self
                    .tools
                    .values()
                    .any(|t| t.name() == name || t.aliases().contains(&name))
        };
        if super::mcp_server(spelled).is_some() && !spelled.contains('(') {
            return ToolEntry::Mcp(spelled.to_owned());
        }
        if (spelled.contains('(') && known(bare))
            || CLAUDE_ONLY_TOOLS.contains(&bare)
            || bare.starts_with("mcp__")
        {
            return ToolEntry::Unsupported(spelled.to_owned());
        }
        ToolEntry::Unknown(spelled.to_owned())
    }

    /// The hint for an unknown tool name: the closest spelling, in the form the user writes
    /// (`grepp` is runner's `grep`, `Gerp` Claude Code's `Grep`), or the list of tools.
    pub fn unknown_help(&self, name: &str) -> String {
        let spellings: Vec<&str> = self
            .tools
            .values()
            .flat_map(|t| std::iter::once(t.name()).chain(t.aliases().iter().copied()))
            .collect();
        let capital = |s: &str| s.starts_with(|c: char| c.is_uppercase());
        let distance =
            |c: &str| strsim::damerau_levenshtein(&name.to_lowercase(), &c.to_lowercase());
        let same_form = crate::error::closest(
            name,
            spellings
                .iter()
                .copied()
                .filter(|s| capital(s) == capital(name)),
        );
        let any = crate::error::closest(name, spellings.iter().copied());
        let pick = match (same_form, any) {
            (Some(same), Some(other)) if distance(same) > distance(other) => Some(other),
            (Some(same), _) => Some(same),
            (None, other) => other,
        };
        pick.map(|c| format!("did you mean `{c}`?"))
            .unwrap_or_else(|| {
                format!(
                    "tools are {}",
                    self.names()
                        .map(|t| format!("`{t}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }
}

/// The tools of one step: the registry, the names the step was given, and where they work.
#[derive(Debug, Clone)]
pub struct StepTools {
    pub registry: Arc<Registry>,
    pub allowed: BTreeSet<String>,
    /// What the model is told it has, when that is not `allowed`: a fork is offered its
    /// caller's tools byte for byte (so its request shares the caller's cached prefix), and a
    /// call of one it may not use is refused like any tool it was not given.
    pub offered: Option<Vec<ToolDef>>,
    pub context: ToolContext,
    /// The agent's `permissionMode` is `dontAsk`: a call outside `allowed` is refused in those
    /// words (it is refused, without running, in every mode).
    pub dont_ask: bool,
}

impl StepTools {
    /// What the model is told about the tools it may call.
    pub fn definitions(&self) -> Vec<ToolDef> {
        if let Some(offered) = &self.offered {
            return offered.clone();
        }
        self.allowed
            .iter()
            .filter_map(|name| self.registry.get(name))
            .map(|tool| ToolDef {
                name: tool.name().to_owned(),
                description: match &self.context.delegate {
                    Some(delegate) if tool.name() == crate::tools::task::TASK => {
                        crate::tools::task::describe_with_roster(
                            tool.description(),
                            &delegate.roster(),
                        )
                    }
                    _ => tool.description().to_owned(),
                },
                input_schema: tool.input_schema(),
            })
            .collect()
    }

    /// Runs one call. A tool the step was not given is refused without running. A known secret
    /// in the result (a key a command printed) is hidden before the model sees it.
    pub async fn call(&self, name: &str, input: &Value) -> ToolOutput {
        let mut output = match self.registry.get(name) {
            None => ToolOutput::refused(Refusal::UnknownTool, format!("there is no tool `{name}`")),
            Some(_) if !self.allowed.contains(name) && self.dont_ask => ToolOutput::refused(
                Refusal::DontAsk,
                format!(
                    "refused without running: `{name}` is outside this agent's tools, and its `permissionMode: dontAsk` denies every tool it was not given"
                ),
            ),
            Some(_) if !self.allowed.contains(name) => ToolOutput::refused(
                Refusal::NotGranted,
                format!("`{name}` is not available to this step"),
            ),
            Some(tool) => tool.call(input, &self.context).await,
        };
        output.text = crate::secrets::redact_owned(output.text);
        output
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::bash::BashEnv;
    use crate::tools::confine::Workspace;
    use camino::Utf8PathBuf;
    use serde_json::json;

    #[tokio::test]
    async fn denied_and_unknown_tools_do_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().to_owned()).unwrap();
        let tools = StepTools {
            registry: Arc::new(Registry::builtin()),
            allowed: ["read_file".to_owned()].into_iter().collect(),
            context: ToolContext::new(
                Arc::new(Workspace::new(&root).unwrap()),
                Arc::new(BashEnv::new(crate::sandbox::Mode::ReadOnly, false)),
            ),
            offered: None,
            dont_ask: false,
        };
        let denied = tools
            .call("write_file", &json!({"path": "x", "content": "y"}))
            .await;
        assert_eq!(
            denied,
            ToolOutput::refused(
                Refusal::NotGranted,
                "`write_file` is not available to this step"
            )
        );
        let dont_ask = StepTools {
            dont_ask: true,
            ..tools
        };
        let refused = dont_ask
            .call("write_file", &json!({"path": "x", "content": "y"}))
            .await;
        assert!(refused.is_error);
        assert!(refused.text.contains("dontAsk"), "{}", refused.text);
        assert_eq!(refused.refused, Some(Refusal::DontAsk));
        assert!(!root.join("x").exists(), "a refused call must not run");
        let tools = dont_ask;
        assert!(!root.join("x").exists());
        let unknown = tools.call("Write", &json!({})).await;
        assert_eq!(
            unknown,
            ToolOutput::refused(Refusal::UnknownTool, "there is no tool `Write`")
        );
        assert_eq!(tools.definitions().len(), 1);
        let registry = Registry::builtin();
        for name in registry.names() {
            let tool = registry.get(name).unwrap();
            assert_eq!(tool.input_schema()["type"], "object", "{name}");
        }
    }
}
