//! The scheduler: a [`Walker`] hands out steps whose needs are done; on top of it this keeps at
//! most `max_parallel` running, applies the stop policy (`--fail-fast`, interrupts, a state
//! directory that cannot be written), decides skips and reuse, sets up worktrees, and turns what
//! happens into events for the sinks. Steps themselves run in an [`Executor`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::decide::{Prepared, left_out, prepare};

use super::executor::{Executor, StepJob};
use super::outcome::{CancelReason, Outcome, SkipReason};
use super::walker::Walker;
use super::worktree::{Keep, Repo, Worktree};
use super::{RunError, RunOptions};
use crate::error::Problem;
use crate::event::pump::Pump;
use crate::event::{Emitter, EventKind, Sinks, Tally};
use crate::plan::{Plan, PlannedStep};
use crate::record::{RunRecord, StepRecord, StepStatus};
use crate::report::record::RecordSink;
use crate::report::transcript::TranscriptSink;
use crate::session::FailureKind;
use crate::template;
use crate::workflow::Isolation;
use fan_out::FanOut;

mod fan_out;

/// How a running step's task ended.
enum Ended {
    Done(Outcome),
    TimedOut(Duration),
    Cancelled,
}

struct Running {
    /// Counted by the step's emitter as its events are made.
    tally: Arc<Mutex<Tally>>,
    started: Instant,
    worktree: Option<Worktree>,
}

/// What runs as one task: a step, or one instance of a fan-out step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Unit {
    step: usize,
    instance: Option<usize>,
}

impl Unit {
    fn step(step: usize) -> Self {
        Unit {
            step,
            instance: None,
        }
    }
}

/// A unit waiting for a slot, in the order units start: the longest remaining path to the end
/// of the DAG first, then the step declared first, then the instance first in its list
/// (docs/src/runs.md "The order steps start in").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Queued {
    remaining: std::cmp::Reverse<u64>,
    declared: usize,
    unit: Unit,
}

/// Everything the loop changes as it goes.
struct Scheduler<'a> {
    plan: &'a Plan,
    options: &'a RunOptions,
    /// The sinks, on their own thread.
    pump: Pump,
    record: RunRecord,
    walker: Walker,
    ready: BTreeSet<usize>,
    to_start: BTreeSet<Queued>,
    /// Each step's longest remaining path, from the earlier runs' durations (else step counts).
    paths: crate::plan::critical::Paths,
    history: super::history::History,
    prompts: BTreeMap<Unit, (String, BTreeMap<String, String>)>,
    /// `--continue`: the resumed run's records of steps that go on from where they were.
    continues: BTreeMap<Unit, Box<StepRecord>>,
    /// When each unit waiting to start became ready: its queue wait ends when it starts.
    ready_at: BTreeMap<Unit, Instant>,
    running: BTreeMap<Unit, Running>,
    fan_outs: BTreeMap<usize, FanOut>,
    /// Steps `--only` leaves to other jobs with nothing of them here ([`left_out`]): walked
    /// past, never recorded or reported.
    left_out: BTreeSet<usize>,
    /// What finished steps left, as templates read it.
    results: super::decide::Results,
    stopping: bool,
    cancel: CancellationToken,
    repo: Option<Repo>,
}

// Over 80 lines: the scheduler's main loop: start what is ready, settle what finished, in one
// select.
/// Runs the plan and returns the finished record (also written to disk as it goes).
pub async fn execute(
    plan: &Plan,
    executor: Arc<dyn Executor>,
    options: &RunOptions,
    sinks: &mut Sinks,
) -> Result<RunRecord, RunError> {
    let workdir = options.workdir.canonicalize_utf8().map_err(|err| {
        RunError::Invalid(Problem::error(format!(
            "cannot use `{}` as the working directory: {err}",
            options.workdir
        )))
    })?;
    // The world is checked once, here: planning never looks at git.
    let needs_git = plan
        .steps()
        .iter()
        .any(|s| s.isolation == Isolation::Worktree);
    let repo = match (needs_git, Repo::discover(&workdir)) {
        (true, None) => {
            return Err(RunError::Invalid(Problem::error(format!(
                "`{workdir}` is not inside a git repository with a commit, which `isolation = \"worktree\"` needs"
            )).help("run inside a git checkout (or pass --workdir), or remove `isolation`")));
        }
        (_, repo) => repo,
    };
    // Checked (or made) before anything is written into it: no link a checkout planted there
    // redirects a record.
    super::state::prepare(&options.state_dir).map_err(RunError::Storage)?;
    // Read before this run records anything: its own record is not history.
    let history = super::history::History::read(&options.state_dir, plan);
    let paths = history.paths(plan);
    let mut record = RunRecord::new(plan, options.run_id.as_deref());
    record.replayed = executor.replaying();
    // What the plan meant, for `runner audit` to hold the run to (docs/src/audit.md).
    let forecast = super::forecast::forecast(plan, &history, &|_| false);
    record.planned = crate::record::planned::of(plan, &forecast);
    let left_out = left_out(plan, &record, options);
    for &i in &left_out {
        record.steps.remove(&plan.steps()[i].id);
        record.planned.remove(&plan.steps()[i].id);
    }
    record.forecast_usd = crate::record::planned::run_forecast(&record.planned);
    let run_dir = options.state_dir.join("runs").join(&record.run_id);
    // Made and written through the confined writer: no link is followed into or inside it.
    let storage = |err: crate::out::OutError| RunError::Storage(err.to_string());
    let state = crate::out::OutDir::open(&options.state_dir).map_err(storage)?;
    let run_out = state
        .sub(&format!("runs/{}", record.run_id))
        .map_err(storage)?;
    // Held until the run ends: `runner clean` leaves a live run's worktrees alone.
    let _running = super::lock::hold(&run_dir);
    // Worktrees live in the state directory, which exists now (docs/src/runs.md "Worktrees").
    let repo = repo.map(|r| r.keeping_worktrees_in(&options.state_dir));
    // Keep run records out of the user's `git status`.
    if !state.has(".gitignore") {
        state.write(".gitignore", b"*\n").map_err(storage)?;
    }
    sinks.add(RecordSink::new(
        run_out.try_clone().map_err(storage)?,
        record.clone(),
        options.last_saved.clone(),
    ));
    sinks.add(TranscriptSink::new(run_out));
    let pump = Pump::start(std::mem::take(sinks));

    let started = Instant::now();
    let needs: Vec<Vec<usize>> = (0..plan.steps().len())
        .map(|i| plan.needs_of(i).to_vec())
        .collect();
    let mut walker = Walker::new(&needs);
    let ready = walker.start().into_iter().collect();
    let mut scheduler = Scheduler {
        plan,
        options,
        pump,
        record,
        walker,
        ready,
        to_start: BTreeSet::new(),
        paths,
        history,
        prompts: BTreeMap::new(),
        continues: BTreeMap::new(),
        ready_at: BTreeMap::new(),
        running: BTreeMap::new(),
        fan_outs: BTreeMap::new(),
        left_out,
        results: Default::default(),
        stopping: false,
        cancel: CancellationToken::new(),
        repo,
    };
    scheduler.emit(EventKind::RunStarted {
        run_id: scheduler.record.run_id.clone(),
        workflow: plan.name.clone(),
        steps: plan
            .steps()
            .iter()
            .filter(|s| scheduler.record.steps.contains_key(&s.id))
            .map(|s| (s.id.clone(), s.model_label()))
            .collect(),
    });
    let interrupted = scheduler.drive(executor, workdir).await;
    scheduler.pump.flush().await;
    let mut record = scheduler.record;
    record.storage_error = scheduler.pump.queue().failure();
    let elapsed = started.elapsed();
    record.finish(elapsed, interrupted, plan, &options.only);
    // The sinks get the record itself: `run.json` and every report show this one.
    scheduler.pump.emit(
        EventKind::RunFinished {
            record: Box::new(record.clone()),
            run_dir: run_dir.clone(),
        }
        .into(),
    );
    *sinks = scheduler.pump.finish();
    // Only a final write that failed changes the record after the sinks saw it.
    if record.storage_error.is_none()
        && let Some(error) = sinks.failure()
    {
        record.storage_error = Some(error.clone());
        record.finish(elapsed, interrupted, plan, &options.only);
    }
    Ok(record)
}

impl Scheduler<'_> {
    fn emit(&mut self, kind: EventKind) {
        self.pump.emit(kind.into());
    }

    /// The main loop; returns whether the run was interrupted.
    async fn drive(&mut self, executor: Arc<dyn Executor>, workdir: camino::Utf8PathBuf) -> bool {
        let env = template::environment();
        let max_parallel = self.plan.max_parallel.max(1) as usize;
        let mut tasks: JoinSet<(Unit, Ended)> = JoinSet::new();
        let mut task_units: BTreeMap<tokio::task::Id, Unit> = BTreeMap::new();
        let mut interrupted = false;
        loop {
            // A state directory that cannot be written loses the run's record: stop at once.
            if self.pump.queue().failed().is_cancelled() {
                self.stop();
            }
            self.decide_ready(&env);
            if self.stopping {
                for queued in std::mem::take(&mut self.to_start) {
                    self.finish_unstarted(
                        queued.unit,
                        Outcome::Cancelled(CancelReason::RunStopped),
                    );
                }
                if !self.ready.is_empty() {
                    continue;
                }
            }
            // Start what the limit allows, longest remaining path first.
            while self.running.len() < max_parallel {
                let Some(Queued {
                    unit,
                    remaining,
                    declared,
                }) = self.to_start.pop_first()
                else {
                    break;
                };
                // Past the daily budget no step starts; those running finish (docs/src/budgets.md
                // "Daily budget").
                if let Err(why) = executor.may_start() {
                    self.finish_unstarted(unit, Outcome::Cancelled(CancelReason::BudgetSpent(why)));
                    continue;
                }
                let priority = crate::session::subagent::Priority {
                    remaining: remaining.0,
                    declared: std::cmp::Reverse(declared),
                };
                if let Some(future) = self.start(unit, priority, &executor, &workdir) {
                    let cancelled = self.cancel.clone();
                    let timeout = self.plan.steps()[unit.step].settings.timeout;
                    let handle = tasks.spawn(async move {
                        // Dropping the step's future on timeout or cancel aborts its HTTP
                        // request and stops its bash calls.
                        let ended = tokio::select! {
                            result = tokio::time::timeout(timeout, future) => match result {
                                Ok(outcome) => Ended::Done(outcome.into()),
                                Err(_) => Ended::TimedOut(timeout),
                            },
                            () = cancelled.cancelled() => Ended::Cancelled,
                        };
                        (unit, ended)
                    });
                    task_units.insert(handle.id(), unit);
                }
            }
            if tasks.is_empty() {
                if self.ready.is_empty() {
                    break;
                }
                continue;
            }
            let failed = self.pump.queue().failed().clone();
            tokio::select! {
                () = failed.cancelled(), if !self.stopping => self.stop(),
                joined = tasks.join_next() => {
                    let Some(joined) = joined else { continue };
                    let (unit, ended) = match joined {
                        Ok(pair) => pair,
                        // A step that panicked fails alone; the run and its record go on.
                        Err(err) => match task_units.get(&err.id()) {
                            Some(&unit) => (unit, Ended::Done(Outcome::failed(FailureKind::Crashed, format!("the step crashed: {err}")))),
                            None => continue,
                        },
                    };
                    // The step's own events come first: they were queued before it ended.
                    let failed = self.finish_started(unit, ended);
                    let step = &self.plan.steps()[unit.step];
                    if failed && self.options.fail_fast && !step.continue_on_error {
                        self.stop();
                    }
                }
                () = self.options.interrupt.cancelled(), if !interrupted => {
                    interrupted = true;
                    self.stop();
                }
            }
        }
        interrupted
    }

    fn stop(&mut self) {
        if !self.stopping {
            self.stopping = true;
            self.cancel.cancel();
        }
    }

    /// Decides every ready step: skip, reuse, fan out, or queue to start.
    fn decide_ready(&mut self, env: &minijinja::Environment<'static>) {
        let plan = self.plan;
        while let Some(i) = self.ready.pop_first() {
            let step = &plan.steps()[i];
            // Another job's step: its dependents here are left out too, or reused.
            if self.left_out.contains(&i) {
                self.ready.extend(self.walker.complete(i));
                continue;
            }
            if self.stopping {
                self.finish_unstarted(Unit::step(i), Outcome::Cancelled(CancelReason::RunStopped));
                continue;
            }
            let prepared = match prepare(step, plan, &self.record, &self.results, self.options, env)
            {
                Prepared::Expand { context, selection } => super::fanout::expand(
                    step,
                    context,
                    &selection,
                    self.options,
                    &self.record,
                    env,
                ),
                prepared => prepared,
            };
            match prepared {
                Prepared::Ended(outcome) => {
                    let failed = outcome.is_failure();
                    self.finish_unstarted(Unit::step(i), outcome);
                    if failed && self.options.fail_fast && !step.continue_on_error {
                        self.stop();
                    }
                }
                Prepared::Reuse(previous) => {
                    *self.record.step_mut(&step.id) = *previous;
                    self.finished(i, false);
                    self.ready.extend(self.walker.complete(i));
                }
                Prepared::Run {
                    prompt,
                    fingerprint,
                    env,
                    continues,
                } => {
                    if let Some(earlier) = continues {
                        self.continues.insert(Unit::step(i), earlier);
                    }
                    self.record.step_mut(&step.id).fingerprint = fingerprint;
                    self.prompts.insert(Unit::step(i), (prompt, env));
                    self.queue(Unit::step(i), None);
                }
                Prepared::FanOut(instances) => self.fan_out(i, instances),
                // Expanded above; a second `Expand` would be a fan-out of a fan-out.
                Prepared::Expand { .. } => self.finish_unstarted(
                    Unit::step(i),
                    Outcome::failed(FailureKind::FanOut, "the step's list was not expanded"),
                ),
            }
        }
    }

    /// Queues a unit to start when a slot is free, by its remaining path: a step's, or for
    /// instance `id` its own recorded time (else its step's typical instance's) and what comes
    /// after its step.
    fn queue(&mut self, unit: Unit, id: Option<&str>) {
        use crate::plan::critical::Weigh;
        let paths = &self.paths;
        let remaining = match (unit.instance, paths.weigh) {
            (None, _) | (Some(_), Weigh::Steps) => paths.remaining[unit.step],
            (Some(_), Weigh::Time) => {
                let step = self.history.step(&self.plan.steps()[unit.step].id);
                let own = step.zip(id).and_then(|(h, id)| h.instance_duration(id));
                let typical = || {
                    let all = step?.instances.values().flatten();
                    super::history::spread(all.map(|s| s.duration_ms).collect()).map(|s| s.median)
                };
                let weight = own
                    .or_else(typical)
                    .unwrap_or(paths.weight[unit.step])
                    .max(1);
                paths.after(unit.step).saturating_add(weight)
            }
        };
        self.to_start.insert(Queued {
            remaining: std::cmp::Reverse(remaining),
            declared: self.plan.declared(unit.step),
            unit,
        });
        self.ready_at.insert(unit, Instant::now());
    }

    /// The id a unit runs as: the step's, or the instance's (`X[0]`).
    fn unit_id(&self, unit: Unit) -> String {
        let step = &self.plan.steps()[unit.step];
        match unit.instance {
            Some(k) => self
                .fan_outs
                .get(&unit.step)
                .and_then(|f| f.records.get(k))
                .and_then(|r| r.instance.clone())
                .unwrap_or_else(|| format!("{}[{k}]", step.id)),
            None => step.id.clone(),
        }
    }

    /// The record a unit writes into.
    fn entry(&mut self, unit: Unit) -> &mut StepRecord {
        match unit.instance {
            Some(k) => {
                let id = self.plan.steps()[unit.step].id.clone();
                match self
                    .fan_outs
                    .get_mut(&unit.step)
                    .and_then(|f| f.records.get_mut(k))
                {
                    Some(entry) => entry,
                    None => self.record.step_mut(&id),
                }
            }
            None => {
                let id = &self.plan.steps()[unit.step].id;
                self.record.step_mut(id)
            }
        }
    }

    /// The conversation `id` had in the resumed run, as its transcript recorded it, and its
    /// subagents' (those whose transcripts can be read; the others start afresh if resumed).
    fn earlier_conversation(
        &self,
        id: &str,
        earlier: &StepRecord,
    ) -> Result<
        (
            Vec<crate::provider::message::Message>,
            Vec<crate::session::subagent::EarlierSubagent>,
        ),
        String,
    > {
        use crate::report::transcript::{TranscriptSink, conversation};
        let resumed = self
            .options
            .resume
            .as_ref()
            .ok_or_else(|| "--continue needs --resume".to_owned())?;
        // Read below the state directory with no link followed (`run::records`).
        let state_dir = &self.options.state_dir;
        let run_id = &resumed.run_id;
        let read = |in_run: camino::Utf8PathBuf| {
            crate::run::records::read_run_file(state_dir, run_id, &in_run)
        };
        let path = TranscriptSink::path(camino::Utf8Path::new(""), id);
        let messages = conversation(&path, &read(path.clone())?, None)?;
        let subagents = earlier
            .subagents
            .iter()
            .filter_map(|s| {
                let path = TranscriptSink::subagent_path(camino::Utf8Path::new(""), id, &s.id);
                let messages = conversation(&path, &read(path.clone()).ok()?, Some(&s.id)).ok()?;
                Some(crate::session::subagent::EarlierSubagent {
                    id: s.id.clone(),
                    agent: s.agent.clone(),
                    model: s.model.clone(),
                    messages,
                })
            })
            .collect();
        Ok((messages, subagents))
    }

    /// Starts a unit: its worktree, its record, its future. `None` when it could not start
    /// (it has been recorded as failed).
    fn start(
        &mut self,
        unit: Unit,
        priority: crate::session::subagent::Priority,
        executor: &Arc<dyn Executor>,
        workdir: &camino::Utf8Path,
    ) -> Option<futures_util::future::BoxFuture<'static, crate::session::StepOutcome>> {
        let mut planned = self.plan.steps()[unit.step].clone();
        let id = self.unit_id(unit);
        // An instance's worktree (and branch) is `X.0`: ids with brackets are not branch names.
        let tree_name = match unit.instance {
            Some(k) => format!("{}.{k}", planned.id),
            None => planned.id.clone(),
        };
        planned.id = id.clone();
        let step: Arc<PlannedStep> = Arc::new(planned);
        let earlier = self.continues.remove(&unit);
        // Going on from an earlier run: its conversation, and its branch's work.
        let (history, subagents) = match &earlier {
            Some(earlier) => match self.earlier_conversation(&id, earlier) {
                Ok(found) => found,
                Err(err) => {
                    self.finish_unstarted(unit, Outcome::failed(FailureKind::Setup, err));
                    return None;
                }
            },
            None => (Vec::new(), Vec::new()),
        };
        // The branch that step left in the resumed run: runner's own name for it, never the
        // text a record holds (docs/src/runs.md "Resume").
        let start_from = earlier
            .as_ref()
            .filter(|e| e.branch.is_some())
            .and(self.options.resume.as_ref())
            .map(|resumed| resumed.run_id.clone());
        // Work the earlier run could not commit (it was killed, or exited at a second Ctrl-C)
        // is not on the branch: going on without it, the conversation and the files disagree.
        if let (Some(repo), Some(resumed), Some(_), Isolation::Worktree) = (
            &self.repo,
            self.options.resume.as_ref(),
            &earlier,
            step.isolation,
        ) && let Some((path, work)) = repo.uncommitted_work(&resumed.run_id, &tree_name)
        {
            let why = format!(
                "cannot continue: its worktree from run {} at {path} holds {work} that its branch does not (the run ended before runner could commit them); commit them there (`git -C {path} add -A && git -C {path} commit -m wip`) and continue again, or resume without `--continue` to start the step afresh",
                resumed.run_id
            );
            self.finish_unstarted(unit, Outcome::failed(FailureKind::Worktree, why));
            return None;
        }
        let tree = match (&self.repo, step.isolation) {
            (Some(repo), Isolation::Worktree) => {
                match repo.add_from(&self.record.run_id, &tree_name, start_from.as_deref()) {
                    Ok(tree) => Some(tree),
                    Err(err) => {
                        self.finish_unstarted(unit, Outcome::failed(FailureKind::Worktree, err));
                        return None;
                    }
                }
            }
            _ => None,
        };
        let root = tree
            .as_ref()
            .map_or_else(|| workdir.to_owned(), |t| t.workdir.clone());
        let queued = self.ready_at.remove(&unit).map(|at| at.elapsed());
        let start_from_run = earlier
            .as_ref()
            .and(self.options.resume.as_ref())
            .map(|resumed| resumed.run_id.clone());
        let entry = self.entry(unit);
        entry.status = StepStatus::Running;
        entry.started_at = Some(jiff::Timestamp::now().to_string());
        entry.queue_ms = queued.map(|wait| wait.as_millis() as u64);
        entry.continued_from = start_from_run;
        self.emit(EventKind::StepStarted {
            step: id.clone(),
            agent: step.agent.clone(),
            model: step.model_label(),
        });
        let tally = Arc::new(Mutex::new(Tally::default()));
        self.running.insert(
            unit,
            Running {
                tally: tally.clone(),
                started: Instant::now(),
                worktree: tree,
            },
        );
        let (prompt, rendered_env) = self.prompts.remove(&unit).unwrap_or_default();
        Some(executor.run(StepJob {
            prompt,
            rendered_env,
            root,
            events: Emitter::queued(&id, self.pump.queue().clone(), tally),
            step,
            history,
            subagents,
            priority,
        }))
    }

    /// Records a unit that never ran.
    fn finish_unstarted(&mut self, unit: Unit, outcome: Outcome) {
        // A step `--only` left out is another job's to decide.
        let decided = !matches!(outcome, Outcome::Skipped(SkipReason::NotSelected));
        outcome.record(self.entry(unit));
        self.prompts.remove(&unit);
        self.ready_at.remove(&unit);
        match unit.instance {
            Some(k) => self.instance_done(unit.step, k, decided),
            None => {
                self.finished(unit.step, decided);
                self.ready.extend(self.walker.complete(unit.step));
            }
        }
    }

    /// Records how a started unit ended and settles its worktree; a step's dependents (or a
    /// fan-out's, after its last instance) may go. Returns whether it failed.
    fn finish_started(&mut self, unit: Unit, ended: Ended) -> bool {
        let Some(run) = self.running.remove(&unit) else {
            return false;
        };
        let id = self.unit_id(unit);
        let repo = self.repo.take();
        let mut tally =
            std::mem::take(&mut *run.tally.lock().unwrap_or_else(PoisonError::into_inner));
        tally.cancel_running(&match &ended {
            Ended::TimedOut(after) => format!(
                "still running when its step timed out after {}",
                crate::workflow::duration::format_duration(*after)
            ),
            Ended::Cancelled => "still running when its step was cancelled".to_owned(),
            Ended::Done(_) => "still running when its step ended".to_owned(),
        });
        let entry = self.entry(unit);
        entry.turns = tally.turns;
        entry.tool_calls = tally.tool_calls;
        entry.input_tokens = tally.usage.input_tokens;
        entry.output_tokens = tally.usage.output_tokens;
        entry.cache_creation_input_tokens = tally.usage.cache_creation_input_tokens;
        entry.cache_read_input_tokens = tally.usage.cache_read_input_tokens;
        entry.subagents = tally.subagents;
        entry.cost_usd = tally.cost_usd;
        entry.checks = tally.checks;
        entry.ran_out_of_turns = tally.ran_out_of_turns;
        entry.compactions = tally.compactions;
        entry.tokens_estimated = tally.tokens_estimated;
        entry.replay_drift = tally.replay_drift;
        entry.duration_ms = run.started.elapsed().as_millis() as u64;
        let cancelled = matches!(ended, Ended::Cancelled);
        let outcome = match ended {
            Ended::Done(outcome) => outcome,
            Ended::TimedOut(after) => Outcome::failed(
                FailureKind::Timeout,
                format!(
                    "timed out after {}",
                    crate::workflow::duration::format_duration(after)
                ),
            ),
            Ended::Cancelled => Outcome::Cancelled(CancelReason::WhileRunning),
        };
        outcome.record(entry);
        if let (Some(repo), Some(tree)) = (&repo, &run.worktree) {
            // Work is never thrown away: a step that did not succeed keeps a worktree that
            // holds changes, and the table says where (docs/src/runs.md "Worktrees").
            let keep = match entry.status {
                _ if cancelled => Keep::InProgress,
                StepStatus::Succeeded => Keep::Nothing,
                _ => Keep::Tree,
            };
            match repo.finish(tree, &id, keep) {
                Ok(done) => {
                    entry.branch = done.branch;
                    entry.diff = Some(done.diff);
                    entry.worktree = done.kept.map(|p| p.to_string());
                }
                Err(err) => Outcome::failed(
                    FailureKind::Worktree,
                    format!("cannot record the worktree's changes: {err}"),
                )
                .record(entry),
            }
        }
        let failed = entry.status == StepStatus::Failed;
        self.repo = repo;
        match unit.instance {
            Some(k) => self.instance_done(unit.step, k, true),
            None => {
                self.finished(unit.step, true);
                self.ready.extend(self.walker.complete(unit.step));
            }
        }
        failed
    }

    /// Tells the sinks how step `i` ended; `decided` when this run decided it (not reused from
    /// an earlier run, not left to another job by `--only`).
    fn finished(&mut self, i: usize, decided: bool) {
        let id = self.plan.steps()[i].id.clone();
        let record: StepRecord = self.record.step_mut(&id).clone();
        self.results.settle(self.plan, &id, &record);
        self.emit(EventKind::StepFinished {
            step: id,
            record: Box::new(record),
            decided,
        });
    }
}
