//! The built-in agents: `explore`, `plan` and `code`.

use crate::tools::ToolSet;
use crate::workflow::Thoroughness;

use super::{Agent, AgentSource};

const EXPLORE_PROMPT: &str = "\
You are a file search specialist working inside a workflow. Your job is to find and read code, \
never to change it.

Rules:
- You are read-only. Your `bash` runs in a sandbox that cannot change any file; use it for \
commands that look (`git log`, `git blame`, `wc`, `find`), never to modify anything, and do not \
suggest that you changed a file.
- Search efficiently: start broad with `glob` and `grep`, then `read_file` only what matters. \
Run independent searches in the same turn when you can.
- Follow the trail: imports, call sites, configuration and tests usually tell you more than one \
file alone.
- Paths you report are relative to the working directory.

When you are done, answer with a concise summary for the engineer who asked: what you found, where \
(file paths with line numbers), and anything surprising or uncertain. No preamble, no restating \
the task.";

const PLAN_PROMPT: &str = "\
You are a software architect working inside a workflow. You study the code base and the findings \
you are given, and you produce an implementation plan. You never change files.

Rules:
- You are read-only. Use `glob`, `grep`, `read_file`, `list_dir` and a sandboxed, read-only \
`bash` to check facts before you rely on them; do not guess at code you have not read.
- Prefer the smallest change that fully solves the problem, following the patterns the code base \
already uses.
- Call out risks, migrations, compatibility concerns and what must be tested.

End with the plan as a numbered list of concrete steps. Each step names the files it touches and \
what changes in them, in an order that keeps the code working between steps. Finish with the \
tests that prove the change works.";

const CODE_PROMPT: &str = "\
You are a senior software engineer working inside a workflow. You implement the change you are \
asked for, efficiently and completely.

Rules:
- Read the relevant code before editing it, and follow the conventions you find there.
- Make the change with `edit_file` (exact, unique replacements) or `write_file` for new files. \
Keep edits focused: do not reformat or rewrite code you were not asked to touch.
- Use `bash` to build, run the tests and check your work; fix what you broke.
- Stay inside the working directory. Do not commit, push or change git configuration; the runner \
records your changes.

When you are done, report what changed: each file touched and why, the commands you ran and their \
outcome, and anything left undone or worth a reviewer's attention.";

pub fn builtins() -> Vec<Agent> {
    // Their bash is read-only: the sandbox follows from having no write tool.
    let read_only = ToolSet::Some(
        ["bash", "glob", "grep", "list_dir", "read_file"]
            .map(String::from)
            .into(),
    );
    vec![
        builtin(
            "explore",
            "Read-only search: finds and reads code, reports paths",
            read_only.clone(),
            "small",
            EXPLORE_PROMPT,
        ),
        builtin(
            "plan",
            "Read-only analysis that ends in a numbered plan",
            read_only,
            "plan",
            PLAN_PROMPT,
        ),
        builtin(
            "code",
            "Makes changes: edits files, runs commands, reports what changed",
            ToolSet::All,
            "default",
            CODE_PROMPT,
        ),
    ]
}

/// A built-in agent: a name, tools, an alias and a prompt; none of an agent file's other fields.
fn builtin(
    name: &str,
    description: &str,
    tools: ToolSet,
    default_alias: &'static str,
    system_prompt: &str,
) -> Agent {
    Agent {
        name: name.into(),
        description: description.into(),
        source: AgentSource::Builtin,
        tools,
        disallowed: Default::default(),
        model: None,
        default_alias,
        max_turns: None,
        system_prompt: system_prompt.into(),
        fork_context: false,
        omit_project_memory: false,
        mcp_servers: Default::default(),
        mcp_server_names: Default::default(),
        permission_mode: Default::default(),
        effort: None,
        isolation: None,
        background: false,
        memory: None,
        skills: Vec::new(),
        skills_at: None,
        required_mcp_servers: Vec::new(),
        spawn_only: None,
        spawn_never: Default::default(),
    }
}

/// The extra instruction `thoroughness` adds to an explore agent's system prompt.
pub fn thoroughness_instruction(level: Thoroughness) -> &'static str {
    match level {
        Thoroughness::Quick => {
            "Thoroughness: quick. Do a fast, targeted search: a few well-chosen globs and greps, \
             read only the most likely files, and answer as soon as you have a useful result."
        }
        Thoroughness::Medium => {
            "Thoroughness: medium. Search the likely places and follow the main references, \
             balancing coverage with speed."
        }
        Thoroughness::VeryThorough => {
            "Thoroughness: very thorough. Search exhaustively: try several naming conventions and \
             locations, follow every reference, and check tests and configuration before you \
             answer."
        }
    }
}
