//! What runs one step. The scheduler walks the same way whatever runs the steps: the model
//! executor for real runs, others for tests and benchmarks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use camino::{Utf8Path, Utf8PathBuf};
use futures_util::future::BoxFuture;

use crate::event::Emitter;
use crate::plan::PlannedStep;
use crate::provider::ModelApi;
use crate::sandbox::Support;
use crate::session::{self, DEFAULT_MAX_TOKENS, FailureKind, Session, StepOutcome};
use crate::tools::bash::BashEnv;
use crate::tools::confine::Workspace;
use crate::tools::{Registry, StepTools, ToolContext};
use crate::workflow::Isolation;

/// One step, ready to run: its prompt rendered, its directory chosen.
pub struct StepJob {
    pub step: Arc<PlannedStep>,
    pub prompt: String,
    /// Where its tools work: the working directory, or its worktree.
    pub root: Utf8PathBuf,
    /// Where its events go.
    pub events: Emitter,
}

pub trait Executor: Send + Sync + 'static {
    fn run(&self, job: StepJob) -> BoxFuture<'static, StepOutcome>;
}

/// Runs steps as subagents against their models.
pub struct ModelExecutor {
    /// One API per provider, by provider name.
    pub apis: BTreeMap<String, Arc<dyn ModelApi>>,
    /// The tools steps may be given.
    pub registry: Arc<Registry>,
    /// Environment variables removed from `bash`.
    pub scrub: Vec<String>,
    /// runner's state directory: no tool may touch it.
    pub state_dir: Utf8PathBuf,
    /// What the kernel can enforce, probed once for the run.
    pub support: Support,
}

/// What a step's bash may never write, even when it may write its working directory: the state
/// directory, and the checkout's `.git`, unless the step works in a worktree runner made (whose
/// `.git` file runner checks when the step ends, and whose git directory is outside anyway).
pub fn protected_paths(root: &Utf8Path, state_dir: &Utf8Path, worktree: bool) -> Vec<PathBuf> {
    let mut protected = Vec::new();
    if let Ok(state) = state_dir.canonicalize_utf8() {
        protected.push(state.into_std_path_buf());
    }
    let git = root.join(".git");
    if !worktree && git.symlink_metadata().is_ok() {
        protected.push(git.into_std_path_buf());
    }
    protected
}

impl ModelExecutor {
    /// The tools of one step, working in `root`.
    fn tools(&self, step: &PlannedStep, root: &Utf8Path) -> Result<StepTools, String> {
        let workspace = Workspace::new(root)
            .map_err(|err| format!("cannot use `{root}`: {err}"))?
            .with_state_dir(&self.state_dir);
        let mut bash = BashEnv::new(step.sandbox, step.network);
        bash.scrub.clone_from(&self.scrub);
        bash.support = self.support;
        bash.protected = protected_paths(
            workspace.root(),
            &self.state_dir,
            step.isolation == Isolation::Worktree,
        );
        Ok(StepTools {
            registry: self.registry.clone(),
            allowed: step.tools.clone(),
            context: ToolContext {
                workspace: Arc::new(workspace),
                bash: Arc::new(bash),
            },
        })
    }
}

impl Executor for ModelExecutor {
    fn run(&self, job: StepJob) -> BoxFuture<'static, StepOutcome> {
        let step = job.step.clone();
        let api = self.apis.get(&step.model.provider).cloned();
        let tools = self.tools(&step, &job.root);
        Box::pin(async move {
            let Some(api) = api else {
                return StepOutcome::failed(
                    FailureKind::Setup,
                    format!("no API for provider `{}`", step.model.provider),
                );
            };
            let tools = match tools {
                Ok(tools) => tools,
                Err(err) => return StepOutcome::failed(FailureKind::Setup, err),
            };
            let workdir = tools.context.workspace.root().to_string();
            session::run(Session {
                api: api.as_ref(),
                model: &step.model.model,
                system: session::prompt::system_prompt(
                    &step.system_prompt,
                    step.output_schema.as_ref(),
                ),
                first_message: session::prompt::first_message(&workdir, &job.prompt),
                max_turns: step.max_turns,
                max_tokens: step.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
                retries: step.retries,
                output_schema: step.output_schema.as_ref(),
                tools: &tools,
                events: &job.events,
            })
            .await
        })
    }
}
