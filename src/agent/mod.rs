//! Agent definitions: the built-ins, user agents in Claude Code's Markdown format (or TOML/YAML),
//! and the lookup order of docs/src/agents.md.

pub mod builtin;
mod catalog;
pub mod fields;
mod skills;

pub use catalog::{AgentCatalog, AgentDir, WorkdirTrust, lookup_dirs};
pub use fields::{MemoryScope, NameList, PermissionMode};

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, LazyLock};

use camino::{Utf8Path, Utf8PathBuf};
use jsonschema::Validator;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::error::Problem;
use crate::path;
use crate::tools::{Registry, ToolEntry, ToolSet};
use crate::workflow::load::{compile, load_typed};
use crate::workflow::source::{self, Node, SourceFile, Spanned, Syntax};

/// The user's home directory, from `HOME` (where `~/.claude/agents/` and `~/.claude/skills/`
/// are); `None` when it is unset, empty or not UTF-8.
pub fn home_dir() -> Option<Utf8PathBuf> {
    std::env::var("HOME")
        .ok()
        .filter(|h| !h.is_empty())
        .map(Utf8PathBuf::from)
}

/// `path` written `~/...` when it is under the home directory, as users know their own folder.
pub fn home_relative(path: &Utf8Path) -> String {
    home_dir()
        .and_then(|home| path.strip_prefix(&home).ok().map(|p| format!("~/{p}")))
        .unwrap_or_else(|| path.to_string())
}

/// Where an agent came from, and so whether it is trusted (docs/src/security.md: the working
/// directory's own agent files are not, unless the user says so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentSource {
    Builtin,
    /// A trusted file: an `--agents-dir`, the workflow's own `agents/`, or a working-directory
    /// file the user chose to trust.
    File(Utf8PathBuf),
    /// A file the working directory brought (`.claude/agents/`), not trusted: it may only narrow
    /// what a step can do.
    Untrusted(Utf8PathBuf),
    /// The user's own file (`~/.claude/agents/`): trusted, found after the project's.
    User(Utf8PathBuf),
}

impl AgentSource {
    pub fn trusted(&self) -> bool {
        !matches!(self, AgentSource::Untrusted(_))
    }

    /// What kind of place it came from: `built-in`, `file` (a trusted folder), `untrusted` (the
    /// working directory's) or `user` (`~/.claude/agents/`).
    pub fn kind(&self) -> &'static str {
        match self {
            AgentSource::Builtin => "built-in",
            AgentSource::File(_) => "file",
            AgentSource::Untrusted(_) => "untrusted",
            AgentSource::User(_) => "user",
        }
    }

    pub fn path(&self) -> Option<&Utf8Path> {
        match self {
            AgentSource::Builtin => None,
            AgentSource::File(path) | AgentSource::Untrusted(path) | AgentSource::User(path) => {
                Some(path)
            }
        }
    }
}

impl fmt::Display for AgentSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentSource::Builtin => f.write_str("built-in"),
            AgentSource::File(path) => write!(f, "{path}"),
            AgentSource::Untrusted(path) => write!(f, "{path} (untrusted)"),
            AgentSource::User(path) => write!(f, "{path} (user)"),
        }
    }
}

/// A resolved agent definition.
#[derive(Debug, Clone)]
pub struct Agent {
    pub name: String,
    pub description: String,
    pub source: AgentSource,
    pub tools: ToolSet,
    pub disallowed: BTreeSet<String>,
    /// A model alias or `provider/model`; `None` inherits the agent's default alias.
    pub model: Option<String>,
    /// The alias used when neither the step nor the agent names a model.
    pub default_alias: &'static str,
    pub max_turns: Option<u32>,
    pub system_prompt: String,
    /// As a subagent, it starts from the spawning agent's conversation.
    pub fork_context: bool,
    /// Its file says `omitClaudeMd: true`: no project memory in its system prompt.
    pub omit_project_memory: bool,
    /// MCP servers the agent's file declares (`mcpServers`).
    pub mcp_servers: BTreeMap<String, crate::workflow::McpServerDef>,
    /// Servers it names that are defined elsewhere (the workflow, the project's `.mcp.json`).
    pub mcp_server_names: BTreeSet<String>,
    /// Its file's `permissionMode` (`plan` has already narrowed `tools`).
    pub permission_mode: PermissionMode,
    /// Its file's `effort`, sent with each of its requests.
    pub effort: Option<crate::provider::message::Effort>,
    /// Its file's `isolation`: a step using it runs in a worktree unless the step says.
    pub isolation: Option<crate::workflow::Isolation>,
    /// As a subagent, it runs in the background unless the `task` call says otherwise.
    pub background: bool,
    /// Its persistent memory folder's scope.
    pub memory: Option<MemoryScope>,
    /// Skills whose `SKILL.md` goes into its system prompt, in order.
    pub skills: Vec<String>,
    /// Its file and where `skills` is in it, for an error about a skill that is missing.
    pub skills_at: Option<(Arc<SourceFile>, std::ops::Range<usize>)>,
    /// MCP servers a step using it must have available.
    pub required_mcp_servers: Vec<String>,
    /// `tools: Agent(a, b)`: the only agents its `task` may start (`None`: any).
    pub spawn_only: Option<BTreeSet<String>>,
    /// `disallowedTools: Agent(a)`: agents its `task` may not start.
    pub spawn_never: BTreeSet<String>,
}

/// A list of tool names, written as a YAML/TOML list or, as Claude Code does, one
/// comma-separated string (`tools: Read, Grep, Glob`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ToolList(pub Vec<String>);

impl<'de> Deserialize<'de> for ToolList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ToolList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of tool names or a comma-separated string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ToolList, E> {
                // Commas inside parentheses belong to an entry: `Agent(explore, reviewer), Read`.
                let mut items = Vec::new();
                let (mut depth, mut start) = (0u32, 0);
                for (i, c) in v.char_indices() {
                    match c {
                        '(' => depth += 1,
                        ')' => depth = depth.saturating_sub(1),
                        ',' if depth == 0 => {
                            items.push(&v[start..i]);
                            start = i + 1;
                        }
                        _ => {}
                    }
                }
                items.push(&v[start..]);
                Ok(ToolList(
                    items
                        .into_iter()
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect(),
                ))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ToolList, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<String>()? {
                    out.push(item);
                }
                Ok(ToolList(out))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl JsonSchema for ToolList {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ToolList".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Tool names (runner's or Claude Code's), as a list or a comma-separated string; `*` means all.",
            "type": ["array", "string"],
            "items": { "type": "string" }
        })
    }
}

/// An agent file: YAML front matter of a Markdown file (Claude Code's `.claude/agents/*.md`), or a
/// whole TOML/YAML file with `system_prompt`.
// Unknown keys are allowed (Claude Code adds fields): `fields::unknown_keys` warns about each.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[schemars(title = "runner agent")]
pub struct AgentFile {
    /// The agent's name, used as `agent = "..."` in steps (default: the file name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the agent is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The tools the agent may use; all tools when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolList>,
    /// Tools taken away from the agent (Claude Code spelling).
    #[serde(
        default,
        rename = "disallowedTools",
        skip_serializing_if = "Option::is_none"
    )]
    pub disallowed_tools_camel: Option<ToolList>,
    /// Tools taken away from the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disallowed_tools: Option<ToolList>,
    /// A model alias, `provider/model`, or `inherit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Model requests a step with this agent may make (Claude Code spelling).
    #[serde(default, rename = "maxTurns", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_turns_camel: Option<u32>,
    /// Model requests a step with this agent may make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_turns: Option<u32>,
    /// As a subagent, start from the spawning agent's conversation instead of a clean one
    /// (Claude Code spelling).
    #[serde(
        default,
        rename = "forkContext",
        skip_serializing_if = "Option::is_none"
    )]
    pub fork_context_camel: Option<bool>,
    /// As a subagent, start from the spawning agent's conversation instead of a clean one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_context: Option<bool>,
    /// Leave the project's `CLAUDE.md` / `AGENTS.md` out of this agent's system prompt (Claude
    /// Code spelling).
    #[serde(
        default,
        rename = "omitClaudeMd",
        skip_serializing_if = "Option::is_none"
    )]
    pub omit_claude_md_camel: Option<bool>,
    /// Leave the project's `CLAUDE.md` / `AGENTS.md` out of this agent's system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omit_claude_md: Option<bool>,
    /// The system prompt (TOML and YAML agent files; a Markdown file's body is its prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Claude Code's terminal colour for the agent; runner ignores it (with a warning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
    /// How the agent's tool calls are allowed: `default`, `manual`, `acceptEdits`, `auto` keep
    /// its tools (runner never asks: the sandbox is the permission), `plan` makes it read-only,
    /// `dontAsk` refuses every call outside its tools; `bypassPermissions` is refused.
    #[serde(
        default,
        rename = "permissionMode",
        skip_serializing_if = "Option::is_none"
    )]
    pub permission_mode: Option<PermissionMode>,
    /// Skills whose `SKILL.md` is appended to the system prompt (`~/.claude/skills/<name>/`,
    /// then `.claude/skills/<name>/` of the working directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills: Option<NameList>,
    /// Claude Code's lifecycle hooks; runner ignores them (with a warning): use `checks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<Value>,
    /// A persistent memory folder for the agent: `user`, `project` or `local`; its `MEMORY.md`
    /// goes into the system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryScope>,
    /// As a subagent, always run in the background (as `task` with `run_in_background`) unless
    /// the call says otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background: Option<bool>,
    /// How hard the model thinks: `low`, `medium`, `high`, `xhigh`, `max` (Anthropic's
    /// `output_config.effort`, OpenAI's `reasoning_effort`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<crate::provider::message::Effort>,
    /// `worktree`: a step using this agent runs in its own git worktree unless the step sets
    /// `isolation` itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<crate::workflow::Isolation>,
    /// Claude Code's first user turn when the agent is the main session; runner ignores it
    /// (with a warning): a step's `prompt` is the first turn.
    #[serde(
        default,
        rename = "initialPrompt",
        skip_serializing_if = "Option::is_none"
    )]
    pub initial_prompt: Option<String>,
    /// MCP servers that must be available to a step using this agent (the workflow's
    /// `[mcp_servers]`, the project's `.mcp.json`, the agent's own `mcpServers`).
    #[serde(
        default,
        rename = "requiredMcpServers",
        skip_serializing_if = "Option::is_none"
    )]
    pub required_mcp_servers: Option<NameList>,
    /// The multi-agent design's scheduling priority; runner ignores it (with a warning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Value>,
    /// MCP servers for this agent: a mapping of name to entry, or Claude Code's list of server
    /// names (from the workflow's `[mcp_servers]` or the project's `.mcp.json`) and inline
    /// `{name: entry}` items.
    #[serde(
        default,
        rename = "mcpServers",
        skip_serializing_if = "Option::is_none"
    )]
    pub mcp_servers: Option<McpServers>,
}

/// `mcpServers` in either of Claude Code's shapes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum McpServers {
    Map(BTreeMap<String, crate::workflow::McpServerDef>),
    List(Vec<McpServerItem>),
}

/// One item of the list form: a server defined elsewhere, by name, or one defined here.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum McpServerItem {
    Name(String),
    Inline(BTreeMap<String, crate::workflow::McpServerDef>),
}

impl McpServers {
    /// The servers defined here, and the names of those defined elsewhere.
    fn split(
        self,
    ) -> (
        BTreeMap<String, crate::workflow::McpServerDef>,
        BTreeSet<String>,
    ) {
        match self {
            McpServers::Map(map) => (map, BTreeSet::new()),
            McpServers::List(items) => {
                let (mut inline, mut names) = (BTreeMap::new(), BTreeSet::new());
                for item in items {
                    match item {
                        McpServerItem::Name(name) => {
                            names.insert(name);
                        }
                        McpServerItem::Inline(map) => inline.extend(map),
                    }
                }
                (inline, names)
            }
        }
    }
}

pub fn agent_schema() -> Value {
    crate::workflow::bound_integers(schemars::schema_for!(AgentFile).to_value())
}

static AGENT_SCHEMA: LazyLock<Value> = LazyLock::new(agent_schema);
static AGENT_VALIDATOR: LazyLock<Validator> = LazyLock::new(|| compile(&AGENT_SCHEMA));

/// An agent file that loaded, with the warnings it produced.
#[derive(Debug)]
pub struct LoadedAgent {
    pub agent: Agent,
    pub warnings: Vec<Problem>,
}

/// Loads one agent file (`.md`, `.toml`, `.yaml`, `.yml`).
pub fn load_agent_file(path: &Utf8Path, registry: &Registry) -> Result<LoadedAgent, Vec<Problem>> {
    let file = SourceFile::read(path).map_err(|p| vec![p])?;
    load_agent_source(file, registry)
}

/// Loads an agent from text already read; its name's extension says how to parse it.
pub fn load_agent_source(
    file: Arc<SourceFile>,
    registry: &Registry,
) -> Result<LoadedAgent, Vec<Problem>> {
    let path = file.name.clone();
    let ext = path.extension().map(str::to_ascii_lowercase);
    let (tree, syntax, body) = match ext.as_deref() {
        Some("md") => {
            let (tree, body) = parse_markdown(&file)?;
            (tree, Syntax::Yaml, Some(body))
        }
        _ => {
            let syntax = Syntax::from_path(&path).ok_or_else(|| {
                vec![
                    Problem::error(format!("`{path}` is not an agent file (.md, .toml, .yaml)"))
                        .in_file(&file),
                ]
            })?;
            (source::parse(&file, syntax)?, syntax, None)
        }
    };
    let (def, mut problems) =
        load_typed::<AgentFile>(&file, syntax, &tree, &AGENT_SCHEMA, &AGENT_VALIDATOR);
    let Some(def) = def else {
        return Err(problems);
    };
    match build_agent(&file, &tree, def, body, registry) {
        Ok(loaded) if problems.is_empty() => Ok(loaded),
        Ok(_) => Err(problems),
        Err(more) => {
            problems.extend(more);
            Err(problems)
        }
    }
}

/// Splits `---` front matter from the body; the tree's spans point into the whole file.
fn parse_markdown(file: &Arc<SourceFile>) -> Result<(Spanned<Node>, String), Vec<Problem>> {
    let text = file.text.strip_prefix('\u{feff}').unwrap_or(&file.text);
    let bom = file.text.len() - text.len();
    let first_line_end = text.find('\n').map_or(text.len(), |i| i + 1);
    if text[..first_line_end].trim_end() != "---" {
        return Err(vec![
            Problem::error("an agent file must start with YAML front matter between `---` lines")
                .at(file, bom..bom + first_line_end.saturating_sub(1), "expected `---`")
                .help("see the Claude Code subagent format: `---`, `name: ...`, `---`, then the system prompt"),
        ]);
    }
    let mut offset = first_line_end;
    let mut close = None;
    for line in text[first_line_end..].split_inclusive('\n') {
        if line.trim_end() == "---" {
            close = Some((offset, offset + line.len()));
            break;
        }
        offset += line.len();
    }
    let Some((fm_end, body_start)) = close else {
        return Err(vec![
            Problem::error("the front matter is not closed by a `---` line").at(
                file,
                bom..bom + 3,
                "opened here",
            ),
        ]);
    };
    let front = &text[first_line_end..fm_end];
    let tree = source::parse_yaml_text(file, front, bom + first_line_end)?;
    Ok((tree, text[body_start..].trim().to_owned()))
}

// Over 80 lines: every frontmatter key of an agent file, checked in one place in file order.
fn build_agent(
    file: &Arc<SourceFile>,
    tree: &Spanned<Node>,
    def: AgentFile,
    body: Option<String>,
    registry: &Registry,
) -> Result<LoadedAgent, Vec<Problem>> {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let span = |key: &str| tree.key_or_value_span(&path![key]);

    let name = match &def.name {
        Some(name) => name.trim().to_owned(),
        None => file.name.file_stem().unwrap_or("agent").to_owned(),
    };
    // A name heads every line about its steps: a control or bidirectional character in it
    // would act on the terminal or reorder the line (docs/src/agents.md).
    let unprintable = |c: char| c.is_control() || crate::terminal::needs_escape(c);
    if name.is_empty() || name.contains(char::is_whitespace) || name.contains(unprintable) {
        errors.push(
            Problem::error(format!(
                "agent name `{name}` must be one word, with no control or bidirectional character"
            ))
            .at(file, span("name"), "invalid name"),
        );
    }

    let pair = |both: bool, camel_key: &str, snake_key: &str, errors: &mut Vec<Problem>| {
        if both {
            errors.push(
                Problem::error(format!(
                    "`{camel_key}` and `{snake_key}` are the same setting; keep one"
                ))
                .at(file, span(snake_key), "second spelling"),
            );
        }
    };
    let both_disallowed = def.disallowed_tools_camel.is_some() && def.disallowed_tools.is_some();
    pair(
        both_disallowed,
        "disallowedTools",
        "disallowed_tools",
        &mut errors,
    );
    let both_turns = def.max_turns_camel.is_some() && def.max_turns.is_some();
    pair(both_turns, "maxTurns", "max_turns", &mut errors);
    let both_fork = def.fork_context_camel.is_some() && def.fork_context.is_some();
    pair(both_fork, "forkContext", "fork_context", &mut errors);
    let both_omit = def.omit_claude_md_camel.is_some() && def.omit_claude_md.is_some();
    pair(both_omit, "omitClaudeMd", "omit_claude_md", &mut errors);

    let system_prompt = match (body, &def.system_prompt) {
        (Some(_), Some(_)) => {
            errors.push(
                Problem::error("a Markdown agent's system prompt is its body, not `system_prompt`")
                    .at(
                        file,
                        span("system_prompt"),
                        "move this text below the front matter",
                    ),
            );
            String::new()
        }
        (Some(body), None) => body,
        (None, Some(prompt)) => prompt.trim().to_owned(),
        (None, None) => {
            errors.push(Problem::error("missing required key `system_prompt`").at(
                file,
                0..0,
                "an agent needs a system prompt",
            ));
            String::new()
        }
    };
    if system_prompt.is_empty() && errors.is_empty() {
        errors.push(Problem::error("the agent's system prompt is empty").in_file(file));
    }

    let key_for = |camel: bool| {
        if camel {
            "disallowedTools"
        } else {
            "disallowed_tools"
        }
    };
    let mut spawn_only = None;
    let tools = match &def.tools {
        None => ToolSet::All,
        Some(list) => {
            let (set, spawns) = tool_list(
                file,
                tree,
                "tools",
                list,
                registry,
                &mut errors,
                &mut warnings,
            );
            spawn_only = spawns;
            match set {
                Some(set) => set,
                None => ToolSet::All,
            }
        }
    };
    let mut disallowed = BTreeSet::new();
    let mut spawn_never = None;
    let camel = def.disallowed_tools_camel.is_some();
    if let Some(list) = def
        .disallowed_tools_camel
        .as_ref()
        .or(def.disallowed_tools.as_ref())
    {
        let (set, spawns) = tool_list(
            file,
            tree,
            key_for(camel),
            list,
            registry,
            &mut errors,
            &mut warnings,
        );
        spawn_never = spawns;
        if let Some(set) = set {
            disallowed = set.expand(registry);
        }
    }

    let model = match def.model.as_deref().map(str::trim) {
        None | Some("inherit") => None,
        Some("") => {
            errors.push(Problem::error("`model` is empty").at(file, span("model"), "empty"));
            None
        }
        Some(model) => Some(model.to_owned()),
    };

    for (key, present, why) in [
        (
            "color",
            def.color.is_some(),
            "runner's output has no per-agent colour",
        ),
        (
            "initialPrompt",
            def.initial_prompt.is_some(),
            "a step's `prompt` is the agent's first turn",
        ),
        (
            "hooks",
            def.hooks.is_some(),
            "use a step's `checks` to run commands after the agent",
        ),
        (
            "priority",
            def.priority.is_some(),
            "steps run in the order of their `needs`",
        ),
    ] {
        if present {
            warnings.push(
                Problem::warning(format!(
                    "`{}`: `{key}` is a Claude Code setting that runner ignores",
                    file.name
                ))
                .at(file, span(key), "ignored")
                .help(why),
            );
        }
    }
    warnings.extend(fields::unknown_keys(file, tree));

    let permission_mode = def.permission_mode.unwrap_or_default();
    let tools = match permission_mode {
        PermissionMode::BypassPermissions => {
            errors.push(
                Problem::error(
                    "`permissionMode: bypassPermissions` is refused: runner has no unsandboxed mode for agents",
                )
                .at(file, span("permissionMode"), "not available in runner")
                .help("every tool call already runs without asking, inside the sandbox; remove the key or use `default`"),
            );
            tools
        }
        // As `explore`: only the tools that change nothing, so its bash is read-only too.
        PermissionMode::Plan => ToolSet::Some(
            tools
                .expand(registry)
                .into_iter()
                .filter(|t| registry.get(t).is_some_and(|tool| !tool.writes()))
                .collect(),
        ),
        _ => tools,
    };

    let mut skills = Vec::new();
    for skill in def.skills.map(|s| s.0).unwrap_or_default() {
        if fields::plain_name(&skill) {
            skills.push(skill);
        } else {
            errors.push(
                Problem::error(format!(
                    "skill name `{skill}` must be one word of letters, digits, `-`, `_` or `.`"
                ))
                .at(file, span("skills"), "invalid skill name"),
            );
        }
    }
    if def.memory == Some(MemoryScope::User) {
        warnings.push(
            Problem::warning(format!(
                "`{}`: `memory: user` is read, not written: the agent gets `~/{}/MEMORY.md` in its prompt but cannot change it",
                file.name,
                MemoryScope::User.folder(&name)
            ))
            .at(file, span("memory"), "read only")
            .help("runner grants no write outside the working directory; `project` or `local` memory is written by the agent's own tools"),
        );
    }
    if def.memory.is_some() && !fields::plain_name(&name) {
        errors.push(
            Problem::error(format!(
                "agent `{name}` cannot have `memory`: its name is not a plain folder name"
            ))
            .at(file, span("memory"), "memory folder"),
        );
    }

    if !errors.is_empty() {
        // The warnings too: an unknown key is often the typo that explains the error.
        errors.extend(warnings);
        return Err(errors);
    }
    let (mcp_servers, mcp_server_names) =
        def.mcp_servers.map(McpServers::split).unwrap_or_default();
    Ok(LoadedAgent {
        agent: Agent {
            name,
            description: def.description.unwrap_or_default(),
            source: AgentSource::File(file.name.clone()),
            tools,
            disallowed,
            model,
            default_alias: "default",
            max_turns: def.max_turns_camel.or(def.max_turns),
            system_prompt,
            fork_context: def.fork_context_camel.or(def.fork_context).unwrap_or(false),
            omit_project_memory: def
                .omit_claude_md_camel
                .or(def.omit_claude_md)
                .unwrap_or(false),
            mcp_servers,
            mcp_server_names,
            permission_mode,
            effort: def.effort,
            isolation: def.isolation,
            background: def.background.unwrap_or(false),
            memory: def.memory,
            skills_at: (!skills.is_empty()).then(|| (file.clone(), span("skills"))),
            skills,
            required_mcp_servers: def.required_mcp_servers.map(|s| s.0).unwrap_or_default(),
            spawn_only,
            spawn_never: spawn_never.unwrap_or_default(),
        },
        warnings,
    })
}

/// Resolves a tool list from an agent file; `None` when nothing in it could be read.
fn tool_list(
    file: &Arc<SourceFile>,
    tree: &Spanned<Node>,
    key: &str,
    list: &ToolList,
    registry: &Registry,
    errors: &mut Vec<Problem>,
    warnings: &mut Vec<Problem>,
) -> (Option<ToolSet>, Option<BTreeSet<String>>) {
    let mut spawns: Option<BTreeSet<String>> = None;
    let node = tree.get(key);
    let span_of = |i: usize, name: &str| -> std::ops::Range<usize> {
        match node.map(|n| &n.value) {
            Some(Node::Seq(items)) => items.get(i).map(|n| n.span.clone()),
            // A comma-separated string: point at the name inside it.
            Some(Node::Str(_)) => node.and_then(|n| {
                file.text
                    .get(n.span.clone())
                    .and_then(|t| t.find(name))
                    .map(|at| n.span.start + at..n.span.start + at + name.len())
            }),
            _ => None,
        }
        .unwrap_or_else(|| tree.key_or_value_span(&path![key]))
    };
    let mut set = BTreeSet::new();
    for (i, name) in list.0.iter().enumerate() {
        match registry.entry(name) {
            ToolEntry::All => return (Some(ToolSet::All), spawns),
            ToolEntry::Tool(tool) | ToolEntry::Mcp(tool) => {
                set.insert(tool);
            }
            ToolEntry::Unsupported(name) => {
                warnings.push(Problem::warning(crate::tools::left_out(&name)).at(
                    file,
                    span_of(i, &name),
                    "left out",
                ))
            }
            ToolEntry::Spawn(agents) => {
                // In `tools`, it grants `task` for those agents only; in `disallowedTools`, it
                // takes those agents away, not `task`.
                if key == "tools" {
                    set.insert(crate::tools::TASK.to_owned());
                    set.insert(crate::tools::TASK_OUTPUT.to_owned());
                }
                spawns.get_or_insert_with(BTreeSet::new).extend(agents);
            }
            ToolEntry::Unknown(name) => errors.push(
                Problem::error(format!("unknown tool `{name}`"))
                    .at(file, span_of(i, &name), "unknown tool")
                    .help(registry.unknown_help(&name)),
            ),
        }
    }
    (Some(ToolSet::Some(set)), spawns)
}
