//! `task` and `task_output`: an agent hands a focused sub-task to a subagent with a clean
//! conversation (docs/src/delegation.md). The tools only read their input; the subagents themselves
//! are run by whatever [`Delegate`] the step was given (the agent loop's, in
//! [`crate::session::subagent`]), because running a conversation is the session's business, not a
//! tool's.

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolOutput, parse_input};

pub const TASK: &str = "task";
pub const TASK_OUTPUT: &str = "task_output";

/// What a `task` call asks for.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskInput {
    /// Three to five words, for progress and records.
    pub description: String,
    pub prompt: String,
    pub subagent_type: String,
    /// An alias or `provider/model`.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub context_files: Vec<ContextFile>,
    /// Unset: as the agent's file says (`background`), else in the foreground.
    #[serde(default)]
    pub run_in_background: Option<bool>,
    /// An agent id from an earlier call: continue that subagent's conversation.
    #[serde(default)]
    pub resume: Option<String>,
}

/// Part of a file put into the subagent's first message.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextFile {
    pub path: String,
    #[serde(default)]
    pub start_line: Option<usize>,
    #[serde(default)]
    pub end_line: Option<usize>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputInput {
    agent_id: String,
    #[serde(default = "yes")]
    wait: bool,
}

fn yes() -> bool {
    true
}

/// Runs subagents for one agent (a step, or a subagent that may nest).
pub trait Delegate: Send + Sync {
    /// Runs a `task` call; its result is the subagent's answer and a line of facts, or an error
    /// the model can act on.
    fn task<'a>(&'a self, input: TaskInput, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput>;
    /// The result of a background subagent, waiting for it when `wait`.
    fn output<'a>(&'a self, agent_id: String, wait: bool) -> BoxFuture<'a, ToolOutput>;
    /// The agents a `task` call may name, each with its description: Claude Code's model picks
    /// a subagent by its description, so the `task` tool's own description lists them.
    fn roster(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// For the implementation to find itself behind the trait.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// The `task` tool's description with the agents it may start, one line each (a description cut
/// to its first line and 200 characters, so an agent file cannot fill the tool list).
pub fn describe_with_roster(base: &str, roster: &[(String, String)]) -> String {
    if roster.is_empty() {
        return base.to_owned();
    }
    let mut text = format!("{base}\n\nAgents you may start (subagent_type):");
    for (name, description) in roster {
        let line = description.lines().next().unwrap_or("").trim();
        let line: String = line.chars().take(200).collect();
        if line.is_empty() {
            text.push_str(&format!("\n- {name}"));
        } else {
            text.push_str(&format!("\n- {name}: {line}"));
        }
    }
    text
}

fn unavailable() -> ToolOutput {
    ToolOutput::error("subagents cannot be started here")
}

/// `task` (Claude Code: `Task`, `Agent`).
pub struct Task;

impl Tool for Task {
    fn name(&self) -> &str {
        TASK
    }
    fn aliases(&self) -> &[&str] {
        &["Task", "Agent"]
    }
    fn description(&self) -> &str {
        "Hand a focused sub-task to a subagent: it works in its own clean conversation with its own tools and model, and only its final answer comes back to you. Use it for searches or investigations whose details you do not need to keep (\"find where sessions are stored; answer with paths\"). Several task calls in one turn run at the same time. With run_in_background the call returns at once with an agent id; collect the answer with task_output. With resume, continue an earlier subagent's conversation."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "description": {"type": "string", "description": "The task in 3-5 words"},
            "prompt": {"type": "string", "description": "Everything the subagent needs to know: it sees nothing of your conversation"},
            "subagent_type": {"type": "string", "description": "The agent to use, such as `explore`"},
            "model": {"type": "string", "description": "A model alias or provider/model (default: the agent's)"},
            "context_files": {"type": "array", "description": "Files (or line ranges) to put in the subagent's first message", "items": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "start_line": {"type": "integer", "minimum": 1},
                    "end_line": {"type": "integer", "minimum": 1}
                },
                "required": ["path"]
            }},
            "run_in_background": {"type": "boolean", "description": "Return at once with an agent id; collect the answer with task_output"},
            "resume": {"type": "string", "description": "An agent id from an earlier task call: continue that conversation with this prompt"}
        }, "required": ["description", "prompt", "subagent_type"]})
    }
    fn call<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let input: TaskInput = match parse_input(TASK, input) {
                Ok(input) => input,
                Err(err) => return err,
            };
            match &ctx.delegate {
                Some(delegate) => delegate.task(input, ctx).await,
                None => unavailable(),
            }
        })
    }
}

/// `task_output` (Claude Code: `TaskOutput`).
pub struct TaskOutput;

impl Tool for TaskOutput {
    fn name(&self) -> &str {
        TASK_OUTPUT
    }
    fn aliases(&self) -> &[&str] {
        &["TaskOutput"]
    }
    fn description(&self) -> &str {
        "The answer of a subagent started with run_in_background, by its agent id. Waits for it unless wait is false."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "agent_id": {"type": "string"},
            "wait": {"type": "boolean", "description": "Wait for the subagent to finish (default true)"}
        }, "required": ["agent_id"]})
    }
    fn call<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let input: OutputInput = match parse_input(TASK_OUTPUT, input) {
                Ok(input) => input,
                Err(err) => return err,
            };
            match &ctx.delegate {
                Some(delegate) => delegate.output(input.agent_id, input.wait).await,
                None => unavailable(),
            }
        })
    }
}
