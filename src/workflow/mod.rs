//! The workflow file format: the serde types, and loading them from TOML or YAML with spans.

pub mod duration;
pub mod load;
pub mod source;
mod yaml;

use std::collections::BTreeMap;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use load::{LoadedWorkflow, load_workflow};

/// A workflow file: a named DAG of subagent steps.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "runner workflow")]
pub struct WorkflowFile {
    /// The workflow's name, shown in progress, reports and plans.
    pub name: String,
    /// One line on what the workflow does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// How many steps may run at once (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_parallel: Option<u32>,
    /// How many subagents (`task`) may run at once across the whole run (default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_subagents: Option<u32>,
    /// How many subagents one step may have unfinished at once, its nested ones included
    /// (default 32): a step cannot queue thousands and starve the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_subagents_per_step: Option<u32>,
    /// Inputs given on the command line as `--input NAME=VALUE`.
    #[serde(default)]
    pub inputs: IndexMap<String, InputDef>,
    /// Model aliases: `default`, `small`, `plan` or any name, each a `provider/model`.
    #[serde(default)]
    pub models: BTreeMap<String, String>,
    /// Extra model endpoints, named for use as `NAME/model`.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderDef>,
    /// Limits applied to every step that does not set its own.
    #[serde(default)]
    pub defaults: Defaults,
    /// Ceilings for the whole run: tokens, and cost in USD (with `[prices]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// USD per million tokens, by `provider/model`, for costs and `max_cost_usd`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, Price>,
    /// MCP servers whose tools steps may use, as `mcp__<server>__<tool>` or `mcp__<server>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp_servers: BTreeMap<String, McpServerDef>,
    /// Trust the working directory's own agent files (`.claude/agents/`) and MCP servers
    /// (`.mcp.json`): only for a checkout you trust as much as this workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_workdir: Option<bool>,
    /// Agents of the working directory's `.claude/agents/` to trust, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_agents: Vec<String>,
    /// The steps, by id.
    pub steps: IndexMap<String, Step>,
}

/// The run's ceilings (docs/src/budgets.md): checked before each model request, so a run passes one by
/// at most the replies already on their way.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Tokens (input + output, cache reads and writes included) across every step and subagent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u64>,
    /// USD across the run, priced with `[prices]`. `run` also refuses to start when the
    /// forecast's high (from earlier runs) passes it (docs/src/budgets.md "Cost before you pay").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_cost_usd: Option<f64>,
    /// USD across every run of the state directory in the last 24 hours, this one included: a
    /// run does not start past it, and one that crosses it starts no more steps
    /// (`run --daily-budget` wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub daily_usd: Option<f64>,
    /// What a step with no history counts as against `max_cost_usd` before the run: `allow`
    /// (the default: the run starts, saying the forecast is incomplete) or `refuse`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_cost: Option<UnknownCost>,
}

/// What a step with no history counts as when the forecast is held to a cost ceiling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum UnknownCost {
    /// Start the run, saying which steps the forecast could not count.
    #[default]
    Allow,
    /// Count an unknown cost as over the ceiling: refuse to start.
    Refuse,
}

impl UnknownCost {
    pub fn as_str(self) -> &'static str {
        match self {
            UnknownCost::Allow => "allow",
            UnknownCost::Refuse => "refuse",
        }
    }
}

/// An MCP server (docs/src/mcp.md): a program started for the run (`command`), or a streamable
/// HTTP endpoint (`url`). The same shape as Claude Code's `mcpServers` entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerDef {
    /// Claude Code's `type`: `stdio`, `http` (or `streamable-http`); taken from the other keys
    /// when left out.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The program to start (stdio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Its environment, on top of a clean one; a value may be `${VAR}` from runner's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The endpoint (streamable HTTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// HTTP headers; a value may be `${VAR}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// How long one tool call may take (default 5m), e.g. `30s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// What a model costs, in USD per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    #[schemars(range(min = 0))]
    pub input: f64,
    #[schemars(range(min = 0))]
    pub output: f64,
    /// Cache reads (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub cache_read: Option<f64>,
    /// Cache writes (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub cache_write: Option<f64>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InputDef {
    /// What the input is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The value used when none is given; without a default the input is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderDef {
    /// The API the endpoint speaks.
    pub kind: ProviderKind,
    /// The API's base URL, e.g. `http://localhost:8000/v1`.
    pub base_url: String,
    /// The environment variable that holds the API key, if the endpoint needs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Anthropic's Messages API.
    Anthropic,
    /// The OpenAI Chat Completions API (OpenAI, Ollama, vLLM, LiteLLM, ...).
    Openai,
}

// Declared once for both (`plan::StepSettings` resolves them; adding one is ARCHITECTURE.md
// "a step key").
/// Settings for every step that does not set its own: a step's value wins, then these, then the
/// built-in default.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Defaults")]
pub struct SharedKeys {
    /// Model requests a step may make before it fails (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_turns: Option<u32>,
    /// How long a step may run, e.g. `90s`, `10m`, `1h` (default 30m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Output tokens per model request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u32>,
    /// Attempts for a model request that failed in a way retrying can fix (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// Whether `bash` may open network connections (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// Whether agents (and their subagents) get the project's `CLAUDE.md` (or `AGENTS.md`) in
    /// their system prompt (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_memory: Option<bool>,
    /// How deep subagents may nest: 1 (the default) lets a step spawn subagents that cannot spawn
    /// their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_subagent_depth: Option<u32>,
    /// Tokens a step may use, its subagents included (input + output); reaching it fails the
    /// step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens_total: Option<u64>,
    /// The model's context window in tokens (default: the model's known window, else 128k).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024))]
    pub context_window: Option<u64>,
    /// The share of the window at which the conversation is compacted (default 0.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.1, max = 1.0))]
    pub compact_at: Option<f64>,
    /// How many of the newest tool results are kept whole when old ones are cleared, whatever
    /// their size (unset: up to 4, while they fit under the low-water mark).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_tool_results: Option<u32>,
    /// Variables `bash` gets on top of its clean environment; `${VAR}` in a value is runner's
    /// variable (a secret named here is passed on purpose, and still hidden in every output). A
    /// step's `env` adds to `[defaults]`'s.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Paths outside the working directory that `bash` may read besides the system's and the
    /// toolchains' (`~` is the home directory; a relative path starts at the working
    /// directory), e.g. `["~/.ssh/known_hosts"]`. A step's list adds to `[defaults]`'s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_paths: Vec<String>,
}

/// `[defaults]`: the shared keys, for every step that does not set its own.
pub type Defaults = SharedKeys;

/// One type with two shapes, so a wrong value reads "must be a string or a list".
fn needs_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Steps that must finish first: a list, or one step id (as GitHub Actions allows).",
        "type": ["string", "array"],
        "items": {"type": "string"}
    })
}

/// A list of names, or one name on its own.
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    Ok(match OneOrMany::deserialize(deserializer)? {
        OneOrMany::One(one) => vec![one],
        OneOrMany::Many(many) => many,
    })
}

/// One step: an agent (`agent` and `prompt`) or a command (`run`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("if" = {"required": ["run"]}, "else" = {"required": ["agent", "prompt"]}))]
pub struct Step {
    /// `explore`, `plan`, `code`, or the name of a user-defined agent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub agent: String,
    /// A minijinja template, rendered once every step in `needs` is done.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prompt: String,
    /// A shell command to run instead of an agent (`bash -c`, sandboxed like `bash`); its stdout
    /// is the step's summary (or its `output` with `output_schema`). Templates cannot be used
    /// here: pass values through `env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Command steps: whether the command may write the working directory (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes: Option<bool>,
    /// Commands that must pass after the agent's final answer; a failure goes back to the agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "checks_schema")]
    pub checks: Vec<CheckDef>,
    /// How many times a failed check goes back to the agent before the step fails (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_retries: Option<u32>,
    /// One instance of the step per item: an expression giving a list (`steps.find.output.dirs`,
    /// `inputs.dirs | split(",")`), or a literal list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "for_each_schema")]
    pub for_each: Option<serde_json::Value>,
    /// The item field that names each instance (`X[<key>]`) instead of its index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_each_key: Option<String>,
    /// How many instances `for_each` may make (default 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_instances: Option<u32>,
    /// Short text for progress lines and reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Steps that must finish first: a list, or one step id (as GitHub Actions allows).
    #[serde(default, deserialize_with = "one_or_many")]
    #[schemars(schema_with = "needs_schema")]
    pub needs: Vec<String>,
    /// A model alias (a key of `[models]`) or `provider/model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Replaces the agent's tool list (`*` = all tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Tools taken away last; always wins.
    #[serde(default)]
    pub disallowed_tools: Vec<String>,
    /// A minijinja expression; when false the step is skipped.
    #[serde(default, rename = "if", skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// A JSON Schema (inline table, or a path to a `.json` file relative to the workflow file).
    /// The step must end with a JSON value that validates; it is exposed as `steps.<id>.output`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "output_schema_schema")]
    pub output_schema: Option<serde_json::Value>,
    /// When true, a failure of this step does not fail the run or skip its dependents.
    #[serde(default)]
    pub continue_on_error: bool,
    /// `worktree` runs the step in its own git worktree on its own branch.
    #[serde(default)]
    pub isolation: Isolation,
    /// Explore only: how hard to search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thoroughness: Option<Thoroughness>,
    /// Agents this step's `task` tool may spawn (default: every agent the workflow sees).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagents: Option<Vec<String>>,
    /// The keys `[defaults]` also takes (`max_turns`, `timeout`, `env`, ...).
    #[serde(flatten)]
    pub keys: SharedKeys,
}

fn checks_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Commands that must pass after the agent's final answer: each a string, or a table with `command` and `timeout` (default 10m).",
        "type": "array",
        "items": {
            "type": ["string", "object"],
            "properties": {
                "command": {"type": "string"},
                "timeout": {"type": "string"}
            },
            "required": ["command"],
            "additionalProperties": false
        }
    })
}

fn for_each_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "An expression giving a list, or a literal list: one instance of the step per item.",
        "type": ["string", "array"]
    })
}

/// A check: a command, with its own timeout when given as a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckDef {
    pub command: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

impl<'de> Deserialize<'de> for CheckDef {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            command: String,
            #[serde(default)]
            timeout: Option<String>,
        }
        // The schema has already said what is wrong with any other shape.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Shape {
            Command(String),
            Table(Table),
        }
        Ok(match Shape::deserialize(deserializer)? {
            Shape::Command(command) => CheckDef {
                command,
                timeout: None,
            },
            Shape::Table(t) => CheckDef {
                command: t.command,
                timeout: t.timeout,
            },
        })
    }
}

fn output_schema_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "A JSON Schema as an inline table, or the path of a `.json` file holding one.",
        "type": ["object", "string"]
    })
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// The step works in the working directory.
    #[default]
    None,
    /// The step works in its own git worktree on branch `runner/<run_id>/<step>`.
    Worktree,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::None => "none",
            Isolation::Worktree => "worktree",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum Thoroughness {
    #[serde(rename = "quick")]
    Quick,
    #[default]
    #[serde(rename = "medium")]
    Medium,
    #[serde(rename = "very thorough")]
    VeryThorough,
}

impl Thoroughness {
    pub fn as_str(self) -> &'static str {
        match self {
            Thoroughness::Quick => "quick",
            Thoroughness::Medium => "medium",
            Thoroughness::VeryThorough => "very thorough",
        }
    }
}

/// The JSON Schema of workflow files, as `runner schema workflow` prints it.
pub fn workflow_schema() -> serde_json::Value {
    bound_integers(schemars::schema_for!(WorkflowFile).to_value())
}

/// Gives every `uint32` number a `maximum`, so a value too large for its field is reported at its
/// own place like any other bad value (schemars only writes the format, which is not checked).
pub fn bound_integers(mut schema: serde_json::Value) -> serde_json::Value {
    fn walk(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                if map.get("format").and_then(|f| f.as_str()) == Some("uint32")
                    && !map.contains_key("maximum")
                {
                    map.insert("maximum".into(), u32::MAX.into());
                }
                map.values_mut().for_each(walk);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut schema);
    schema
}
