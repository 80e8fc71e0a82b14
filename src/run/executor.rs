//! What runs one step. The scheduler walks the same way whatever runs the steps: the model
//! executor for real runs, others for tests and benchmarks.

use std::path::PathBuf;
use std::sync::Arc;

use camino::{Utf8Path, Utf8PathBuf};
use futures_util::future::BoxFuture;

use crate::event::Emitter;
use crate::plan::PlannedStep;
use crate::sandbox::Support;
use crate::sandbox::tree::{MAX_SCAN, Tree};
use crate::session::subagent::{Delegation, StepScope, Team};
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
}

pub trait Executor: Send + Sync + 'static {
    fn run(&self, job: StepJob) -> BoxFuture<'static, StepOutcome>;
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

/// What a step's bash may never write, even when it may write its working directory: the state
/// directory, the cassette directory being recorded or replayed, and the checkout's `.git` with
/// the repositories nested in it (`tree`, scanned when the run started), unless the step works
/// in a worktree runner made (whose `.git` file runner checks when the step ends, and whose git
/// directory is outside anyway).
pub fn protected_paths(
    root: &Utf8Path,
    state_dir: &Utf8Path,
    cassettes: Option<&Utf8Path>,
    worktree: bool,
    tree: &Tree,
) -> Vec<PathBuf> {
    let mut protected = Vec::new();
    for dir in std::iter::once(state_dir).chain(cassettes) {
        // A link stands protected itself too: the sandbox then keeps the root unwritable, so
        // the step cannot point it elsewhere before runner writes through it.
        if dir
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
            && let (Some(parent), Some(name)) = (dir.parent(), dir.file_name())
        {
            // The link itself, where the sandbox sees it: its folder's real path and its name.
            let parent = if parent.as_str().is_empty() {
                Utf8Path::new(".")
            } else {
                parent
            };
            if let Ok(parent) = parent.canonicalize_utf8() {
                protected.push(parent.join(name).into_std_path_buf());
            }
        }
        if let Ok(dir) = dir.canonicalize_utf8() {
            protected.push(dir.into_std_path_buf());
        }
    }
    let git = root.join(".git");
    if !worktree && git.symlink_metadata().is_ok() {
        protected.push(git.into_std_path_buf());
    }
    // Repositories nested in the tree (vendored clones, submodules' `.git` files): their hooks
    // and config would run the next time the user's git works there.
    if !worktree {
        protected.extend(tree.protected.iter().cloned());
        protected.extend(tree.unscanned.iter().cloned());
    }
    protected
}

/// What of the state directory bash sees as an empty folder (runs' records and transcripts are
/// not its to read; the file tools refuse them too): all of it when it is inside `root`; its
/// runs for a step in a worktree, which is inside the state directory itself.
pub fn hidden_paths(root: &Utf8Path, state_dir: &Utf8Path, worktree: bool) -> Vec<PathBuf> {
    let (Ok(root), Ok(state)) = (root.canonicalize_utf8(), state_dir.canonicalize_utf8()) else {
        return Vec::new();
    };
    if worktree {
        return state
            .join("runs")
            .canonicalize_utf8()
            .ok()
            .filter(|runs| runs.starts_with(&state))
            .map(Utf8PathBuf::into_std_path_buf)
            .into_iter()
            .collect();
    }
    match state.starts_with(&root) && state != root {
        true => vec![state.into_std_path_buf()],
        false => Vec::new(),
    }
}

/// The repositories nested in the run's working directory, looked for once before any step
/// runs (see [`Tree`]): the state and cassette directories are not entered.
pub fn scan_tree(workdir: &Utf8Path, skip: &[&Utf8Path]) -> Tree {
    let Ok(root) = workdir.canonicalize_utf8() else {
        return Tree::default();
    };
    let skip: Vec<PathBuf> = skip
        .iter()
        .filter_map(|d| d.canonicalize_utf8().ok())
        .map(Utf8PathBuf::into_std_path_buf)
        .collect();
    Tree::scan(root.as_std_path(), &skip, &gitlinks(&root), MAX_SCAN)
}

/// The submodules the index of `root`'s repository registers under it (gitlinks), relative to
/// `root`; none when it is not in a repository.
fn gitlinks(root: &Utf8Path) -> Vec<PathBuf> {
    let Ok(listed) = crate::run::worktree::git(root, None, &["ls-files", "--stage", "-z"]) else {
        return Vec::new();
    };
    listed
        .split('\0')
        .filter_map(|entry| {
            let (meta, path) = entry.split_once('\t')?;
            meta.starts_with("160000 ").then(|| PathBuf::from(path))
        })
        .collect()
}

/// Where a worktree step's bash reads its repository: the main checkout's git directory, from
/// the worktree's `.git` file as git wrote it (objects and refs live there).
fn worktree_git_dir(root: &Utf8Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(root.join(".git")).ok()?;
    let admin = PathBuf::from(text.strip_prefix("gitdir:")?.trim());
    let common = std::fs::read_to_string(admin.join("commondir")).ok()?;
    admin.join(common.trim()).canonicalize().ok()
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
        let worktree = step.isolation == Isolation::Worktree;
        bash.protected = protected_paths(
            workspace.root(),
            &self.state_dir,
            self.team.tapes.as_ref().map(|t| t.dir()),
            worktree,
            &self.tree,
        );
        bash.hidden = hidden_paths(workspace.root(), &self.state_dir, worktree);
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let mut reads: Vec<PathBuf> = step
            .settings
            .read_paths
            .iter()
            .filter_map(|entry| {
                crate::sandbox::reads::expand(entry, home.as_deref(), self.workdir.as_std_path())
            })
            .collect();
        if worktree {
            // The checkout it was made from (build tools look for a workspace above their
            // project, git for its objects): a worktree sits in the state directory inside it.
            reads.push(self.workdir.clone().into_std_path_buf());
            reads.extend(worktree_git_dir(workspace.root()));
        } else {
            bash.note = self.tree.note();
        }
        let bash = bash.reading(&reads);
        Ok(StepTools {
            registry: self.team.registry.clone(),
            allowed: step.tools.clone(),
            context: ToolContext::new(Arc::new(workspace), Arc::new(bash)),
            offered: None,
        })
    }
}

impl Executor for ModelExecutor {
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
                let scope = Arc::new(StepScope::new(
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
                ));
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
                ),
                // Going on from an earlier conversation, the next request is that one again.
                first_message: match job.history.is_empty() {
                    true => session::prompt::first_message(&workdir, &job.prompt),
                    false => String::new(),
                },
                history: job.history,
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
        keep_tool_results: settings.keep_tool_results,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state directory that is a link is protected as the link too (so the root stays
    /// unwritable and the link cannot be pointed elsewhere), and as where it leads.
    #[test]
    fn a_linked_state_directory_is_protected_as_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
        std::fs::create_dir_all(root.join("elsewhere")).unwrap();
        std::fs::create_dir_all(root.join("work")).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), root.join("work/.runner")).unwrap();
        let work = root.join("work");
        let protected =
            protected_paths(&work, &work.join(".runner"), None, false, &Tree::default());
        assert_eq!(
            protected,
            [
                work.join(".runner").into_std_path_buf(),
                root.join("elsewhere").into_std_path_buf()
            ]
        );
        // A plain one is protected once.
        std::fs::remove_file(work.join(".runner")).unwrap();
        std::fs::create_dir(work.join(".runner")).unwrap();
        let protected =
            protected_paths(&work, &work.join(".runner"), None, false, &Tree::default());
        assert_eq!(protected, [work.join(".runner").into_std_path_buf()]);
    }
}
