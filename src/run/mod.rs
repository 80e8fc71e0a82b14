//! Running a plan. A [`Walker`](walker::Walker) hands out steps whose needs are done; on top of it
//! this module keeps at most `max_parallel` running, applies the stop policy (`--fail-fast`,
//! interrupts), decides skips (`if`, failed needs), reuses results on `--resume`, sets up
//! worktrees, and writes `run.json` after every change. Steps themselves run in an
//! [`Executor`](executor::Executor).

pub mod executor;
pub mod state;
pub mod walker;
pub mod worktree;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use camino::{Utf8Path, Utf8PathBuf};
use minijinja::Value as JinjaValue;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::error::Problem;
use crate::plan::{Plan, PlannedStep};
use crate::provider::client::Secret;
use crate::session::{StepOutcome, StepProgress};
use crate::template;
use executor::{Executor, StepJob};
pub use state::{RunRecord, RunStatus, Saver, StepRecord, StepStatus};
use walker::Walker;
use worktree::{Repo, Worktree};

/// Progress of a run, reported as it happens. Only the CLI knows how to show it.
pub trait Reporter: Send {
    fn step_started(&mut self, step: &PlannedStep, progress: Arc<StepProgress>);
    fn step_finished(&mut self, step: &PlannedStep, record: &StepRecord);
}

pub struct RunOptions {
    pub workdir: Utf8PathBuf,
    pub state_dir: Utf8PathBuf,
    /// After the first failure, start nothing new and cancel what runs.
    pub fail_fast: bool,
    /// The run whose successful steps may be reused (`--resume`).
    pub resume: Option<RunRecord>,
    /// `--only`: run just these steps.
    pub only: BTreeSet<String>,
    /// Cancelled on SIGINT/SIGTERM.
    pub interrupt: CancellationToken,
}

/// Keys for every provider the plan's steps use, read once. A missing key is a problem naming
/// the variable, found before any step starts.
pub fn provider_keys(plan: &Plan) -> Result<BTreeMap<String, Option<Secret>>, Vec<Problem>> {
    let mut keys = BTreeMap::new();
    let mut missing: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for step in &plan.steps {
        let Some(spec) = plan.providers.get(&step.model.provider) else {
            continue;
        };
        let Some(var) = &spec.api_key_env else {
            keys.insert(spec.name.clone(), None);
            continue;
        };
        let value = crate::secrets::var(var);
        crate::secrets::seal(var);
        match value {
            Some(value) if !value.trim().is_empty() => {
                keys.insert(spec.name.clone(), Some(Secret::new(value.trim())));
            }
            _ => missing.entry(var.clone()).or_default().push(&step.id),
        }
    }
    if missing.is_empty() {
        return Ok(keys);
    }
    Err(missing
        .into_iter()
        .map(|(var, steps)| {
            Problem::error(format!(
                "{var} is not set; step{} {} need{} it",
                if steps.len() == 1 { "" } else { "s" },
                steps
                    .iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if steps.len() == 1 { "s" } else { "" },
            ))
            .help(format!(
                "export {var}=... before running, or pick another model with --model"
            ))
        })
        .collect())
}

/// Loads the run to resume: a run id, or `latest`.
///
/// Only run directories runner could have written are trusted: a well-formed id, a `run.json`
/// that is a regular file within its size limit, names that same id, and started no later than
/// now. (Tools cannot write the state directory at all; this keeps a forged or stray directory,
/// such as `99999999T999999-ffff`, from becoming "latest".)
pub fn load_resume(state_dir: &Utf8Path, which: &str) -> Result<RunRecord, Problem> {
    let runs = state_dir.join("runs");
    if which != "latest" {
        if !is_run_id(which) {
            return Err(Problem::error(format!(
                "--resume {which}: not a run id (run ids look like `20260101T120000123-ab12`)"
            )));
        }
        return read_record(&runs, which)
            .map_err(|why| Problem::error(format!("--resume {which}: {why}")));
    }
    let now = jiff::Timestamp::now();
    let mut best: Option<(jiff::Timestamp, String, RunRecord)> = None;
    for entry in runs.read_dir_utf8().into_iter().flatten().flatten() {
        let id = entry.file_name().to_owned();
        if !is_run_id(&id) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(record) = read_record(&runs, &id) else {
            continue;
        };
        let Ok(started) = record.started_at.parse::<jiff::Timestamp>() else {
            continue;
        };
        // A clock a little ahead elsewhere is fine; a run from the future is not.
        if started > now + jiff::SignedDuration::from_mins(5) {
            continue;
        }
        if best
            .as_ref()
            .is_none_or(|(t, best_id, _)| (started, &id) > (*t, best_id))
        {
            best = Some((started, id, record));
        }
    }
    best.map(|(_, _, record)| record)
        .ok_or_else(|| Problem::error(format!("--resume latest: there are no runs in `{runs}`")))
}

/// Whether `id` could be a run id runner made: letters, digits, `.`, `_`, `-`.
pub fn is_run_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn read_record(runs: &Utf8Path, id: &str) -> Result<RunRecord, String> {
    let path = runs.join(id).join("run.json");
    match path.symlink_metadata() {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Err(format!("`{path}` is not a regular file")),
        Err(err) => return Err(format!("cannot read `{path}`: {err}")),
    }
    let text = crate::limits::read_text(&path, crate::limits::MAX_RUN_RECORD_BYTES)
        .map_err(|err| format!("cannot read `{path}`: {err}"))?;
    let record: RunRecord = serde_json::from_str(&text)
        .map_err(|err| format!("`{path}` is not a run record: {err}"))?;
    if record.run_id != id {
        return Err(format!(
            "`{path}` belongs to run `{}`, not `{id}`",
            record.run_id
        ));
    }
    Ok(record)
}

/// Removes the worktrees and empty branches a killed run left (its steps that did not succeed).
/// Returns notes for the user.
pub fn clean_up_after(workdir: &Utf8Path, resumed: &RunRecord) -> Vec<String> {
    let Some(repo) = Repo::discover(workdir) else {
        return Vec::new();
    };
    let succeeded: Vec<String> = resumed
        .steps
        .iter()
        .filter(|(_, s)| s.status == StepStatus::Succeeded)
        .map(|(id, _)| id.clone())
        .collect();
    repo.clean_up_run(&resumed.run_id, &succeeded)
        .into_iter()
        .map(|what| format!("removed the {what} left by run {}", resumed.run_id))
        .collect()
}

/// Checks `--only` against the plan and the resumed run: every selected step exists and its
/// needs succeeded in the resumed run.
pub fn check_only(
    plan: &Plan,
    only: &BTreeSet<String>,
    resume: Option<&RunRecord>,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    for id in only {
        let Some(step) = plan.steps.iter().find(|s| &s.id == id) else {
            let help = crate::error::did_you_mean(id, plan.steps.iter().map(|s| s.id.as_str()));
            problems.push(
                Problem::error(format!("--only {id}: there is no step `{id}`")).with_help(help),
            );
            continue;
        };
        for need in &step.needs {
            if only.contains(need) {
                continue;
            }
            let done = resume
                .and_then(|r| r.steps.get(need))
                .is_some_and(|s| s.status == StepStatus::Succeeded);
            if !done {
                problems.push(
                    Problem::error(format!("--only {id}: its need `{need}` has no result to reuse"))
                        .help("pass --resume RUN_ID (or latest) with a run where it succeeded, or add it with --only"),
                );
            }
        }
    }
    problems
}

/// How a running step's task ended.
enum Ended {
    Done(StepOutcome),
    TimedOut(Duration),
    Cancelled,
}

struct Running {
    progress: Arc<StepProgress>,
    started: Instant,
    worktree: Option<Worktree>,
}

/// Why a run could not start.
#[derive(Debug)]
pub enum RunError {
    /// Something about the workflow or the flags (exit 2).
    Invalid(Problem),
    /// The state directory cannot be written (exit 1).
    Storage(String),
}

/// Runs the plan and returns the finished record (also written to disk as it goes).
pub async fn execute(
    plan: &Plan,
    executor: Arc<dyn Executor>,
    options: &RunOptions,
    reporter: &mut dyn Reporter,
) -> Result<RunRecord, RunError> {
    let workdir = options.workdir.canonicalize_utf8().map_err(|err| {
        RunError::Invalid(Problem::error(format!(
            "cannot use `{}` as the working directory: {err}",
            options.workdir
        )))
    })?;
    let needs_git = plan
        .steps
        .iter()
        .any(|s| s.isolation == crate::workflow::Isolation::Worktree);
    let repo = match (needs_git, Repo::discover(&workdir)) {
        (true, None) => {
            return Err(RunError::Invalid(Problem::error(format!(
                "`{workdir}` is not inside a git repository with a commit, which `isolation = \"worktree\"` needs"
            ))));
        }
        (_, repo) => repo,
    };
    let mut record = RunRecord::new(plan);
    let run_dir = options.state_dir.join("runs").join(&record.run_id);
    std::fs::create_dir_all(&run_dir)
        .map_err(|err| RunError::Storage(format!("cannot create `{run_dir}`: {err}")))?;
    // Keep run records out of the user's `git status`.
    let ignore = options.state_dir.join(".gitignore");
    if !ignore.exists() {
        std::fs::write(&ignore, "*\n")
            .map_err(|err| RunError::Storage(format!("cannot write `{ignore}`: {err}")))?;
    }
    let started = Instant::now();
    let mut saver = Saver::new(&run_dir);
    saver.flush(&mut record);

    let index: BTreeMap<&str, usize> = plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let needs: Vec<Vec<usize>> = plan
        .steps
        .iter()
        .map(|s| {
            s.needs
                .iter()
                .filter_map(|n| index.get(n.as_str()).copied())
                .collect()
        })
        .collect();
    let steps: Vec<Arc<PlannedStep>> = plan.steps.iter().cloned().map(Arc::new).collect();
    let mut walker = Walker::new(&needs);
    let mut ready: BTreeSet<usize> = walker.start().into_iter().collect();
    let mut to_start: BTreeSet<usize> = BTreeSet::new();
    let mut prompts: BTreeMap<usize, String> = BTreeMap::new();
    let mut running: BTreeMap<usize, Running> = BTreeMap::new();
    let mut tasks: JoinSet<(usize, Ended)> = JoinSet::new();
    let mut task_steps: BTreeMap<tokio::task::Id, usize> = BTreeMap::new();
    let cancel = CancellationToken::new();
    let mut stopping = false;
    let mut interrupted = false;
    let env = template::environment();
    let max_parallel = plan.max_parallel.max(1) as usize;

    loop {
        // A state directory that cannot be written loses the run's record: stop at once.
        if record.storage_error.is_some() && !stopping {
            stopping = true;
            cancel.cancel();
        }
        // Decide every ready step: skip, reuse, or queue to start.
        while let Some(i) = ready.pop_first() {
            let step = &steps[i];
            if stopping {
                finish_unstarted(
                    &mut record,
                    step,
                    StepStatus::Cancelled,
                    "the run was stopped",
                    reporter,
                    &mut saver,
                );
                ready.extend(walker.complete(i));
                continue;
            }
            match prepare(step, plan, &record, options, &env) {
                Prepared::Skip(reason) => {
                    finish_unstarted(
                        &mut record,
                        step,
                        StepStatus::Skipped,
                        &reason,
                        reporter,
                        &mut saver,
                    );
                    ready.extend(walker.complete(i));
                }
                Prepared::Fail(error) => {
                    finish_unstarted(
                        &mut record,
                        step,
                        StepStatus::Failed,
                        &error,
                        reporter,
                        &mut saver,
                    );
                    if options.fail_fast && !step.continue_on_error {
                        stopping = true;
                        cancel.cancel();
                    }
                    ready.extend(walker.complete(i));
                }
                Prepared::Reuse(previous) => {
                    *record.step_mut(&step.id) = *previous;
                    let entry = record.step_mut(&step.id);
                    reporter.step_finished(step, entry);
                    saver.changed(&mut record);
                    ready.extend(walker.complete(i));
                }
                Prepared::Run {
                    prompt,
                    fingerprint,
                } => {
                    record.step_mut(&step.id).fingerprint = fingerprint;
                    prompts.insert(i, prompt);
                    to_start.insert(i);
                }
            }
        }
        if stopping {
            for i in std::mem::take(&mut to_start) {
                finish_unstarted(
                    &mut record,
                    &steps[i],
                    StepStatus::Cancelled,
                    "the run was stopped",
                    reporter,
                    &mut saver,
                );
                ready.extend(walker.complete(i));
            }
            if !ready.is_empty() {
                continue;
            }
        }
        // Start what the limit allows, in plan order.
        while running.len() < max_parallel {
            let Some(i) = to_start.pop_first() else { break };
            let step = steps[i].clone();
            let tree = match (&repo, step.isolation) {
                (Some(repo), crate::workflow::Isolation::Worktree) => {
                    match repo.add(&record.run_id, &step.id) {
                        Ok(tree) => Some(tree),
                        Err(err) => {
                            finish_unstarted(
                                &mut record,
                                &step,
                                StepStatus::Failed,
                                &err,
                                reporter,
                                &mut saver,
                            );
                            ready.extend(walker.complete(i));
                            continue;
                        }
                    }
                }
                _ => None,
            };
            let root = tree
                .as_ref()
                .map_or_else(|| workdir.clone(), |t| t.workdir.clone());
            let progress = Arc::new(StepProgress::default());
            let job = StepJob {
                step: step.clone(),
                prompt: prompts.remove(&i).unwrap_or_default(),
                root,
                transcript: run_dir
                    .join("steps")
                    .join(&step.id)
                    .join("transcript.jsonl"),
                progress: progress.clone(),
            };
            record.step_mut(&step.id).status = StepStatus::Running;
            saver.changed(&mut record);
            reporter.step_started(&step, progress.clone());
            running.insert(
                i,
                Running {
                    progress,
                    started: Instant::now(),
                    worktree: tree,
                },
            );
            let future = executor.run(job);
            let cancelled = cancel.clone();
            let timeout = step.timeout;
            let handle = tasks.spawn(async move {
                // Dropping the step's future on timeout or cancel aborts its HTTP request and
                // kills its bash process groups.
                let ended = tokio::select! {
                    result = tokio::time::timeout(timeout, future) => match result {
                        Ok(outcome) => Ended::Done(outcome),
                        Err(_) => Ended::TimedOut(timeout),
                    },
                    () = cancelled.cancelled() => Ended::Cancelled,
                };
                (i, ended)
            });
            task_steps.insert(handle.id(), i);
        }
        if tasks.is_empty() {
            if ready.is_empty() {
                break;
            }
            continue;
        }
        let flush_at = saver.deadline().map(tokio::time::Instant::from_std);
        tokio::select! {
            () = async { if let Some(at) = flush_at { tokio::time::sleep_until(at).await } }, if flush_at.is_some() => {
                saver.flush(&mut record);
            }
            joined = tasks.join_next() => {
                let Some(joined) = joined else { continue };
                let (i, ended) = match joined {
                    Ok(pair) => pair,
                    // A step that panicked fails alone; the run and its record go on.
                    Err(err) => match task_steps.get(&err.id()) {
                        Some(&i) => (i, Ended::Done(StepOutcome::failed(format!("the step crashed: {err}")))),
                        None => continue,
                    },
                };
                let step = steps[i].clone();
                let Some(run) = running.remove(&i) else { continue };
                let failed = finish_started(&mut record, &step, run, ended, repo.as_ref(), reporter);
                saver.changed(&mut record);
                if failed && options.fail_fast && !step.continue_on_error && !stopping {
                    stopping = true;
                    cancel.cancel();
                }
                ready.extend(walker.complete(i));
            }
            () = options.interrupt.cancelled(), if !interrupted => {
                interrupted = true;
                stopping = true;
                cancel.cancel();
            }
        }
    }
    record.finish(started.elapsed(), interrupted, plan);
    saver.flush(&mut record);
    Ok(record)
}

enum Prepared {
    Skip(String),
    Fail(String),
    Reuse(Box<StepRecord>),
    Run { prompt: String, fingerprint: String },
}

/// What to do with a step whose needs are all done.
fn prepare(
    step: &PlannedStep,
    plan: &Plan,
    record: &RunRecord,
    options: &RunOptions,
    env: &minijinja::Environment<'static>,
) -> Prepared {
    let previous = options
        .resume
        .as_ref()
        .and_then(|r| r.steps.get(&step.id))
        .filter(|s| s.status == StepStatus::Succeeded);
    let reused = |previous: &StepRecord| {
        let mut reused = previous.clone();
        if reused.reused_from.is_none() {
            reused.reused_from = options.resume.as_ref().map(|r| r.run_id.clone());
        }
        Prepared::Reuse(Box::new(reused))
    };
    if !options.only.is_empty() && !options.only.contains(&step.id) {
        return match previous {
            Some(previous) => reused(previous),
            None => Prepared::Skip("not selected by --only".into()),
        };
    }
    if let Err(reason) = decide(step, record, plan, env) {
        return Prepared::Skip(reason);
    }
    let prompt = match template::render(env, &step.prompt_template, context(plan, record)) {
        Ok(prompt) => prompt,
        Err(err) => {
            return Prepared::Fail(format!(
                "the prompt does not render: {}",
                template::describe_error(&err)
            ));
        }
    };
    let fingerprint = state::fingerprint(step, &prompt);
    if options.only.is_empty()
        && let Some(previous) = previous
        && previous.fingerprint == fingerprint
    {
        return reused(previous);
    }
    Prepared::Run {
        prompt,
        fingerprint,
    }
}

fn finish_unstarted(
    record: &mut RunRecord,
    step: &PlannedStep,
    status: StepStatus,
    reason: &str,
    reporter: &mut dyn Reporter,
    saver: &mut Saver,
) {
    let entry = record.step_mut(&step.id);
    entry.status = status;
    entry.error = Some(reason.to_owned());
    reporter.step_finished(step, entry);
    saver.changed(record);
}

/// Records how a started step ended and settles its worktree. Returns whether it failed.
fn finish_started(
    record: &mut RunRecord,
    step: &PlannedStep,
    run: Running,
    ended: Ended,
    repo: Option<&Repo>,
    reporter: &mut dyn Reporter,
) -> bool {
    if let Ended::Done(outcome) = &ended
        && record.storage_error.is_none()
    {
        record.storage_error.clone_from(&outcome.storage_error);
    }
    let entry = record.step_mut(&step.id);
    let usage = run.progress.usage();
    entry.turns = run.progress.turns();
    entry.tool_calls = run.progress.tool_calls();
    entry.input_tokens = usage.input_tokens;
    entry.output_tokens = usage.output_tokens;
    entry.cache_creation_input_tokens = usage.cache_creation_input_tokens;
    entry.cache_read_input_tokens = usage.cache_read_input_tokens;
    entry.duration_ms = run.started.elapsed().as_millis() as u64;
    let cancelled = matches!(ended, Ended::Cancelled);
    match ended {
        Ended::Done(outcome) => {
            entry.status = if outcome.succeeded {
                StepStatus::Succeeded
            } else {
                StepStatus::Failed
            };
            // Text from the model and the server: a key echoed back must not spread further.
            entry.summary = crate::secrets::redact_owned(outcome.summary);
            entry.output = outcome.output;
            entry.error = outcome.error.map(crate::secrets::redact_owned);
        }
        Ended::TimedOut(after) => {
            entry.status = StepStatus::Failed;
            entry.error = Some(format!(
                "timed out after {}",
                crate::workflow::duration::format_duration(after)
            ));
        }
        Ended::Cancelled => {
            entry.status = StepStatus::Cancelled;
            entry.error = Some("cancelled".into());
        }
    }
    if let (Some(repo), Some(tree)) = (repo, &run.worktree) {
        match repo.finish(tree, &step.id, cancelled) {
            Ok(done) => {
                entry.branch = done.branch;
                entry.diff = Some(done.diff);
            }
            Err(err) => {
                entry.status = StepStatus::Failed;
                entry.error = Some(format!("cannot record the worktree's changes: {err}"));
            }
        }
    }
    reporter.step_finished(step, entry);
    entry.status == StepStatus::Failed
}

/// Whether a step runs (SPEC §5): a failed need skips it (unless that need has
/// `continue_on_error`); a skipped need skips it unless it has its own `if`, which then decides.
/// `Err` carries the reason it is skipped.
fn decide(
    step: &PlannedStep,
    record: &RunRecord,
    plan: &Plan,
    env: &minijinja::Environment<'static>,
) -> Result<(), String> {
    let status_of = |id: &str| record.steps.get(id).map(|r| r.status);
    let tolerates = |id: &str| plan.steps.iter().any(|s| s.id == id && s.continue_on_error);
    let failed: Vec<&str> = step
        .needs
        .iter()
        .map(String::as_str)
        .filter(|need| match status_of(need) {
            Some(StepStatus::Succeeded | StepStatus::Skipped) => false,
            Some(StepStatus::Failed) => !tolerates(need),
            _ => true,
        })
        .collect();
    if !failed.is_empty() {
        return Err(format!("{} did not succeed", failed.join(", ")));
    }
    if let Some(condition) = &step.condition {
        let value = template::evaluate(env, condition, context(plan, record)).map_err(|err| {
            format!(
                "`if` could not be evaluated: {}",
                template::describe_error(&err)
            )
        })?;
        return if value {
            Ok(())
        } else {
            Err(format!("`if` is false: {condition}"))
        };
    }
    let skipped: Vec<&str> = step
        .needs
        .iter()
        .map(String::as_str)
        .filter(|need| status_of(need) == Some(StepStatus::Skipped))
        .collect();
    if skipped.is_empty() {
        Ok(())
    } else {
        Err(format!("{} was skipped", skipped.join(", ")))
    }
}

/// The template context at this point of the run: inputs, the workflow, and each step that has
/// finished (templates were checked to read only upstream ones).
fn context(plan: &Plan, record: &RunRecord) -> JinjaValue {
    let steps: BTreeMap<&str, JinjaValue> = record
        .steps
        .iter()
        .filter(|(_, s)| s.status.is_finished())
        .map(|(id, s)| {
            (
                id.as_str(),
                minijinja::context! {
                    summary => s.summary.clone(),
                    status => s.status.as_str(),
                    output => JinjaValue::from(minijinja::value::Serde(&s.output)),
                    branch => s.branch.clone(),
                    diff => s.diff.clone(),
                },
            )
        })
        .collect();
    minijinja::context! {
        inputs => plan.inputs.clone(),
        workflow => minijinja::context! {
            name => plan.name.clone(),
            description => plan.description.clone().unwrap_or_default(),
        },
        steps => steps,
    }
}

/// The state dir's default: `<workdir>/.runner`.
pub fn default_state_dir(workdir: &Utf8Path) -> Utf8PathBuf {
    workdir.join(".runner")
}
