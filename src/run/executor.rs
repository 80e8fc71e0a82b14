//! What runs one step. The scheduler walks the same way whatever runs the steps: the model
//! executor for real runs, others for tests and benchmarks.

use std::sync::Arc;

use camino::Utf8PathBuf;
use futures_util::future::BoxFuture;

use crate::event::Emitter;
use crate::plan::PlannedStep;
use crate::run::confinement::Places;
use crate::run::team::Team;
use crate::sandbox::Support;
use crate::sandbox::tree::Tree;
use crate::session::subagent::{Delegation, StepScope};
use crate::session::{self, DEFAULT_MAX_TOKENS, FailureKind, Session, StepOutcome};
use crate::tools::bash::BashEnv;
use crate::tools::confine::Workspace;
use crate::tools::{StepTools, TASK, ToolContext};
use crate::workflow::Isolation;

/// One step, ready to run: its prompt rendered, its directory chosen.
pub struct StepJob {
    pub step: Arc<PlannedStep>,
    pub prompt: String,
    /// Where its tools work: the working directory, or its worktree.
    pub root: Utf8PathBuf,
    /// Where its events go.
    pub events: Emitter,
    /// Its `env` values that were templates, rendered (the others still hold `${VAR}`).
    pub rendered_env: std::collections::BTreeMap<String, String>,
    /// `--continue`: the conversation it goes on from (empty for a fresh start), and the
    /// subagents it had, to be resumed by their ids.
    pub history: Vec<crate::provider::message::Message>,
    pub subagents: Vec<crate::session::subagent::EarlierSubagent>,
    /// Its place in the scheduler's order (longest remaining path first): its subagents wait
    /// for `max_subagents` by it.
    pub priority: crate::session::subagent::Priority,
}

pub trait Executor: Send + Sync + 'static {
    fn run(&self, job: StepJob) -> BoxFuture<'static, StepOutcome>;

    /// Whether another step may start (the daily budget: docs/src/budgets.md); the error is
    /// why it does not.
    fn may_start(&self) -> Result<(), String> {
        Ok(())
    }

    /// Whether its replies come from cassettes (`--replay`), which cost nothing.
    fn replaying(&self) -> bool {
        false
    }
}

/// Runs steps as subagents against their models.
pub struct ModelExecutor {
    /// The APIs, tools, agents and limits every step (and its subagents) share.
    pub team: Arc<Team>,
    /// runner's state directory: no tool may touch it.
    pub state_dir: Utf8PathBuf,
    /// The run's working directory (canonical), as requests show it.
    pub workdir: Utf8PathBuf,
    /// What the kernel can enforce, probed once for the run.
    pub support: Support,
    /// The repositories nested in the working directory, found when the run started.
    pub tree: Arc<Tree>,
}

impl ModelExecutor {
    /// The tools of one step, working in `root`.
    fn tools(&self, job: &StepJob) -> Result<StepTools, String> {
        let (step, root) = (&job.step, &job.root);
        let mut workspace = Workspace::new(root)
            .map_err(|err| format!("cannot use `{root}`: {err}"))?
            .with_state_dir(&self.state_dir);
        if let Some(tapes) = &self.team.tapes {
            workspace = workspace.with_cassettes(tapes.dir());
        }
        let mut bash = BashEnv::new(step.sandbox, step.settings.network);
        bash.vars = crate::tools::bash::bash_vars(&step.settings.env, &job.rendered_env);
        bash.support = self.support;
        let places = Places {
            workdir: &self.workdir,
            state_dir: &self.state_dir,
            cassettes: self.team.tapes.as_ref().map(|t| t.dir()),
            tree: &self.tree,
        };
        places.confine(
            &mut bash,
            workspace.root(),
            step.isolation == Isolation::Worktree,
            &step.settings.read_paths,
        );
        Ok(StepTools {
            registry: self.team.registry.clone(),
            allowed: step.tools.clone(),
            context: ToolContext::new(Arc::new(workspace), Arc::new(bash)),
            offered: None,
            dont_ask: step.permission_mode == crate::agent::PermissionMode::DontAsk,
        })
    }
}

impl Executor for ModelExecutor {
    fn may_start(&self) -> Result<(), String> {
        self.team.budget.may_start()
    }

    fn replaying(&self) -> bool {
        self.team.tapes.as_ref().is_some_and(|t| t.replaying())
    }

    // Over 80 lines: one step's run in order (workspace, tools, session or command, checks,
    // record); each part is a call.
    fn run(&self, job: StepJob) -> BoxFuture<'static, StepOutcome> {
        let step = job.step.clone();
        let tools = self.tools(&job);
        let Some(model) = step.model.clone() else {
            // A command step: no model, its command in the step's sandbox.
            return Box::pin(async move {
                match tools {
                    Ok(tools) => super::command::run(&step, &tools, &job.events).await,
                    Err(err) => StepOutcome::failed(FailureKind::Setup, err),
                }
            });
        };
        let api = self.team.api_for(
            &model.provider,
            &job.events,
            vec![
                job.root.to_string(),
                job.root
                    .canonicalize_utf8()
                    .unwrap_or_else(|_| job.root.clone())
                    .to_string(),
                self.workdir.to_string(),
            ],
        );
        let team = self.team.clone();
        let meter = crate::budget::Meter::new(
            team.budget.clone(),
            &step.id,
            step.settings.max_tokens_total,
            &model,
        );
        Box::pin(async move {
            let api = match api {
                Ok(api) => api,
                Err(err) => return StepOutcome::failed(FailureKind::Setup, err),
            };
            let mut tools = match tools {
                Ok(tools) => tools,
                Err(err) => return StepOutcome::failed(FailureKind::Setup, err),
            };
            // MCP servers start when the first step that needs them does.
            if !step.mcp_servers.is_empty() {
                match with_mcp_tools(&team, &step, &tools).await {
                    Ok((registry, allowed)) => {
                        tools.registry = registry;
                        tools.allowed = allowed;
                    }
                    Err(err) => return StepOutcome::failed(FailureKind::Setup, err),
                }
            }
            // A step with `task` gets subagents; they end with it, whatever ends it.
            // The project's CLAUDE.md / AGENTS.md, from the step's own root (its worktree's).
            let memory = step
                .project_memory
                .and_then(|_| session::prompt::project_memory(&tools.context.workspace));
            let mut subagents = job.subagents;
            let scope = step.tools.contains(TASK).then(|| {
                let mut scope = StepScope::new(
                    team,
                    step.subagents.clone(),
                    step.settings.max_subagent_depth,
                    step.settings.max_turns,
                    step.settings.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
                    step.settings.retries,
                    step_window(&step.settings),
                    meter.clone(),
                    tools.registry.clone(),
                    memory.clone(),
                );
                scope.priority = job.priority;
                let scope = Arc::new(scope);
                scope.carry_over(std::mem::take(&mut subagents), &tools.allowed);
                scope
            });
            let _stop_subagents = scope.as_ref().map(|s| s.cancel.clone().drop_guard());
            if let Some(scope) = &scope {
                tools.context.delegate = Some(Arc::new(Delegation::for_step(
                    scope.clone(),
                    model.clone(),
                    tools.allowed.clone(),
                    job.events.clone(),
                )));
            }
            let workdir = tools.context.workspace.root().to_string();
            let outcome = session::run(Session {
                api: api.as_ref(),
                model: &model.model,
                system: session::prompt::with_memory(
                    session::prompt::system_prompt(
                        &step.system_prompt,
                        step.output_schema.as_ref(),
                    ),
                    memory.as_ref(),
                ) + &step
                    .agent_memory
                    .map(|scope| {
                        session::agent_memory::section(
                            &tools.context.workspace,
                            crate::agent::home_dir().as_deref(),
                            scope,
                            &step.agent,
                        )
                    })
                    .unwrap_or_default(),
                // Going on from an earlier conversation, the next request is that one again.
                first_message: match job.history.is_empty() {
                    true => session::prompt::first_message(&workdir, &job.prompt),
                    false => String::new(),
                },
                history: session::prompt::continued(job.history, step.settings.max_turns),
                shared_until: None,
                max_turns: step.settings.max_turns,
                max_tokens: step.settings.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
                retries: step.settings.retries,
                output_schema: step.output_schema.as_ref(),
                tools: &tools,
                events: &job.events,
                meter: &meter,
                checks: &step.checks,
                check_retries: step.check_retries,
                window: step_window(&step.settings),
                effort: step.effort,
            })
            .await;
            // A step does not end before its background subagents do.
            if let Some(scope) = &scope {
                scope.wait_background().await;
            }
            outcome
        })
    }
}

/// The step's registry with its MCP servers' tools added, and its allowlist with each
/// `mcp__<server>` turned into that server's tools. A named tool the server does not have, or a
/// server that does not start, fails the step.
async fn with_mcp_tools(
    team: &Team,
    step: &PlannedStep,
    tools: &StepTools,
) -> Result<
    (
        Arc<crate::tools::Registry>,
        std::collections::BTreeSet<String>,
    ),
    String,
> {
    let mcp = team.mcp.tools(&step.mcp_servers).await?;
    let mut registry = (*tools.registry).clone();
    let mut allowed = std::collections::BTreeSet::new();
    let names: Vec<String> = mcp.iter().map(|t| t.name().to_owned()).collect();
    for entry in &tools.allowed {
        match crate::tools::mcp_server(entry) {
            None => {
                allowed.insert(entry.clone());
            }
            Some(server) if entry == &format!("mcp__{server}") => {
                let prefix = format!("{entry}__");
                allowed.extend(names.iter().filter(|n| n.starts_with(&prefix)).cloned());
            }
            Some(server) => {
                if !names.contains(entry) {
                    let prefix = format!("mcp__{server}__");
                    let has: Vec<&str> = names
                        .iter()
                        .filter_map(|n| n.strip_prefix(&prefix))
                        .collect();
                    return Err(format!(
                        "MCP server `{server}` has no tool `{}`; it has: {}",
                        entry.strip_prefix(&prefix).unwrap_or(entry),
                        has.join(", ")
                    ));
                }
                allowed.insert(entry.clone());
            }
        }
    }
    for tool in mcp {
        registry.register(tool);
    }
    Ok((Arc::new(registry), allowed))
}

/// A step's context window, from its settings (its subagents use the same).
pub fn step_window(settings: &crate::plan::StepSettings) -> crate::session::context::Window {
    crate::session::context::Window {
        tokens: settings.context_window,
        compact_at: settings.compact_at,
        // Unset, up to the default as fit under the low-water mark, at least the newest one;
        // set, exactly that many.
        keep_tool_results: settings
            .keep_tool_results
            .unwrap_or(crate::plan::DEFAULT_KEEP_TOOL_RESULTS),
        keep_at_least: settings.keep_tool_results.unwrap_or(1),
    }
}
