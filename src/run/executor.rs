//! What runs one step. The scheduler walks the same way whatever runs the steps: the model
//! executor for real runs, others for tests and benchmarks.

use std::collections::BTreeMap;
use std::sync::Arc;

use std::path::PathBuf;

use camino::{Utf8Path, Utf8PathBuf};
use futures_util::future::BoxFuture;

use crate::plan::PlannedStep;
use crate::provider::client::ModelClient;
use crate::sandbox::Support;
use crate::session::transcript::Transcript;
use crate::session::{self, DEFAULT_MAX_TOKENS, StepInput, StepOutcome, StepProgress};
use crate::tools::bash::BashEnv;
use crate::tools::confine::Workspace;
use crate::tools::registry::ToolBox;

/// One step, ready to run: its prompt rendered, its directory chosen.
pub struct StepJob {
    pub step: Arc<PlannedStep>,
    pub prompt: String,
    /// Where its tools work: the working directory, or its worktree.
    pub root: Utf8PathBuf,
    pub transcript: Utf8PathBuf,
    pub progress: Arc<StepProgress>,
}

pub trait Executor: Send + Sync + 'static {
    fn run(&self, job: StepJob) -> BoxFuture<'static, StepOutcome>;
}

/// Runs steps as subagents against their models.
pub struct ModelExecutor {
    /// One client per provider, by provider name.
    pub clients: Arc<BTreeMap<String, ModelClient>>,
    /// Environment variables removed from `bash`.
    pub scrub: Arc<Vec<String>>,
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

impl Executor for ModelExecutor {
    fn run(&self, job: StepJob) -> BoxFuture<'static, StepOutcome> {
        let clients = self.clients.clone();
        let scrub = self.scrub.clone();
        let state_dir = self.state_dir.clone();
        let support = self.support;
        Box::pin(async move {
            let step = &job.step;
            let Some(client) = clients.get(&step.model.provider) else {
                return StepOutcome::failed(format!(
                    "no client for provider `{}`",
                    step.model.provider
                ));
            };
            let workspace = match Workspace::new(&job.root) {
                Ok(ws) => Arc::new(ws.with_state_dir(&state_dir)),
                Err(err) => {
                    return StepOutcome::failed(format!("cannot use `{}`: {err}", job.root));
                }
            };
            let mut bash = BashEnv::new(step.sandbox, step.network);
            bash.scrub = scrub.to_vec();
            bash.support = support;
            bash.protected = protected_paths(
                workspace.root(),
                &state_dir,
                step.isolation == crate::workflow::Isolation::Worktree,
            );
            let tools = ToolBox {
                workspace: workspace.clone(),
                allowed: step.tools.clone(),
                bash: Arc::new(bash),
            };
            let mut transcript = Transcript::create(&job.transcript);
            let mut outcome = session::run_step(StepInput {
                model: &step.model.model,
                system_prompt: session::system_prompt(
                    &step.system_prompt,
                    workspace.root().as_str(),
                    step.output_schema.as_ref(),
                ),
                prompt: job.prompt,
                max_turns: step.max_turns,
                max_tokens: step.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
                retries: step.retries,
                output_schema: step.output_schema.as_ref(),
                client,
                tools: &tools,
                transcript: &mut transcript,
                progress: &job.progress,
            })
            .await;
            if let Some(error) = transcript.error {
                outcome.succeeded = false;
                outcome.error = Some(error.clone());
                outcome.storage_error = Some(error);
            }
            outcome
        })
    }
}
