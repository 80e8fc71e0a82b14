//! `runner run WORKFLOW`: checks what needs the world (resume, keys, the kernel sandbox), then
//! runs the plan with the sinks the flags ask for, and reports.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{load_plan_with, report};
use crate::cli::{Format, Io, RunArgs, RunFormat};
use crate::error::Exit;
use crate::event::Sinks;
use crate::provider::tape::{Mode as TapeMode, Tapes};
use crate::provider::{ModelApi, connect};
use crate::report::github::GithubSink;
use crate::report::jsonl::JsonlSink;
use crate::report::junit::JunitSink;
use crate::report::progress::{LiveProgress, PlainProgress, Warnings};
use crate::report::summary_table_within;
use crate::run::executor::ModelExecutor;
use crate::run::team::Team;
use crate::run::{self, RunOptions, RunStatus};
use crate::sandbox::Support;
use crate::tools::Registry;

/// Each part is a function below: what the run builds on (`previous`), the cassettes
/// (`tapes`), the keys, the executor with its model APIs (`executor`), the sinks the flags ask
/// for (`sinks`), then the run and its report (`finish`).
pub fn run(args: RunArgs, io: &mut Io<'_>) -> Exit {
    if args.dry_run {
        return dry_run(&args, io);
    }
    let Some(plan) = load_plan_with(&args.workflow, &args.resolve, args.limits, true, true, io)
    else {
        return Exit::Invalid;
    };
    if !super::endpoints_ok(&plan, io) {
        return Exit::Invalid;
    }
    let (workdir, state_dir) =
        run::directories(args.resolve.workdir.as_deref(), args.state_dir.as_deref());
    let resume = match previous(&args, &workdir, &state_dir, io) {
        Ok(resume) => resume,
        Err(exit) => return exit,
    };
    let only: BTreeSet<String> = args.only.iter().cloned().collect();
    let same_run = resume
        .as_ref()
        .is_some_and(|r| Some(&r.run_id) == args.run_id.as_ref());
    let problems = run::check_only(&plan, &only, resume.as_ref(), same_run);
    if !problems.is_empty() {
        report(io, &problems);
        return Exit::Invalid;
    }
    if let Err(exit) = hold_forecast(&args, &plan, &state_dir, resume.as_ref(), &only, io) {
        return exit;
    }
    // Known before the run starts, so that cassettes can leave it out of what they hash.
    let run_id = args.run_id.clone().unwrap_or_else(run::new_run_id);
    let tapes = match tapes(&args, &run_id, io) {
        Ok(tapes) => tapes,
        Err(exit) => return exit,
    };
    let replaying = tapes.as_ref().is_some_and(|t| t.replaying());
    // Before any request or worktree; a replay costs nothing, so no daily budget holds it.
    let daily = match daily_budget(&args, &plan, &state_dir, &run_id, replaying, io) {
        Ok(daily) => daily,
        Err(exit) => return exit,
    };
    // Keys are checked before anything starts: a missing one costs nothing. A replay needs none.
    let keys = if replaying {
        BTreeMap::new()
    } else {
        match run::provider_keys(&plan) {
            Ok(keys) => keys,
            Err(problems) => {
                report(io, &problems);
                return Exit::Invalid;
            }
        }
    };
    let Some(runtime) = super::runtime(io) else {
        return Exit::Unexpected;
    };
    let interrupt = CancellationToken::new();
    let last_saved = crate::report::record::LastSaved::default();
    watch_signals(&runtime, interrupt.clone(), last_saved.clone());
    let recording = tapes.clone().filter(|t| !t.replaying());
    let (executor, mcp) = executor(&args, &plan, &workdir, &state_dir, tapes, &keys, io);
    if let Some(daily) = daily {
        executor.team.budget.set_daily(daily);
    }
    let options = RunOptions {
        workdir,
        state_dir,
        fail_fast: args.fail_fast,
        resume,
        continue_steps: args.continue_steps,
        only,
        run_id: Some(run_id),
        interrupt,
        last_saved,
    };
    warn_uncommitted(&plan, &options.workdir, &options.state_dir, io);
    let mut sinks = match sinks(&args, &plan, &options.only) {
        Ok(sinks) => sinks,
        Err(err) => {
            let _ = writeln!(io.err, "error: --junit: {err}");
            return Exit::Invalid;
        }
    };
    // Traces when the OTEL_* variables ask for them (docs/src/runs.md "Traces"); a setting
    // runner cannot honour is said, and the run goes on without them.
    match crate::report::otel::OtelSink::from_env() {
        Ok(Some(sink)) => sinks.add(sink),
        Ok(None) => {}
        Err(problem) => {
            let _ = writeln!(io.err, "warning: no traces: {problem}");
        }
    }
    let result = runtime.block_on(async {
        let result = run::execute(&plan, executor, &options, &mut sinks).await;
        // MCP servers end with the run, however it ended.
        mcp.shutdown().await;
        result
    });
    drop(sinks);
    // Steps still winding down (a cancelled HTTP request, a killed process) are not waited for.
    runtime.shutdown_timeout(Duration::from_millis(500));
    finish(&args, &plan, &options, result, recording, io)
}

/// The forecast's high held to the cost ceiling (docs/src/budgets.md "Cost before you pay"):
/// before any request, and before cassettes, worktrees or the run's state are made. A replay
/// costs nothing; a step the resumed run finished (or one `--only` leaves out) is reused.
fn hold_forecast(
    args: &RunArgs,
    plan: &crate::plan::Plan,
    state_dir: &camino::Utf8Path,
    resume: Option<&crate::record::RunRecord>,
    only: &BTreeSet<String>,
    io: &mut Io<'_>,
) -> Result<(), Exit> {
    if plan.max_cost_usd.is_none() || args.replay.is_some() {
        return Ok(());
    }
    let history = run::history::History::read(state_dir, plan);
    let selected = |id: &str| {
        only.is_empty()
            || only
                .iter()
                .any(|o| o == id || o.strip_prefix(id).is_some_and(|r| r.starts_with('[')))
    };
    let finished = |id: &str| {
        resume
            .and_then(|r| r.steps.get(id))
            .is_some_and(|s| s.status == crate::record::StepStatus::Succeeded)
    };
    let reused = |id: &str| !selected(id) || finished(id);
    let forecast = run::forecast::forecast(plan, &history, &reused);
    match run::forecast::hold(plan, &forecast) {
        Ok(None) => Ok(()),
        Ok(Some(warning)) => {
            let _ = writeln!(io.err, "warning: {warning}");
            Ok(())
        }
        Err(problem) => {
            report(io, &[problem]);
            Err(Exit::Invalid)
        }
    }
}

/// `--dry-run`: the plan, as `runner plan` prints it.
fn dry_run(args: &RunArgs, io: &mut Io<'_>) -> Exit {
    let format = match args.format {
        RunFormat::Text => Format::Text,
        RunFormat::Json => Format::Json,
        RunFormat::Jsonl => {
            let _ = writeln!(
                io.err,
                "error: `--format jsonl` is the event stream of a run; with `--dry-run` use `text` or `json`"
            );
            return Exit::Invalid;
        }
    };
    let state_dir = args.state_dir.as_deref();
    super::plan::plan(
        &args.workflow,
        &args.resolve,
        args.limits,
        state_dir,
        format,
        io,
    )
}

/// The run this one builds on: `--resume`'s (its leftovers cleaned up), else the run of
/// `--run-id` that other jobs recorded (their state directories copied here).
fn previous(
    args: &RunArgs,
    workdir: &camino::Utf8Path,
    state_dir: &camino::Utf8Path,
    io: &mut Io<'_>,
) -> Result<Option<crate::record::RunRecord>, Exit> {
    let merged = match &args.run_id {
        Some(id) if !run::is_run_id(id) => {
            report(
                io,
                &[crate::error::Problem::error(format!(
                    "--run-id {id}: use letters, digits, `.`, `_` and `-` (at most 64; no `..`, and not ending in `.` or `.lock`: it is part of git branch names)"
                ))],
            );
            return Err(Exit::Invalid);
        }
        Some(id) => run::load_merged(state_dir, id).map_err(|problem| {
            report(io, &[problem]);
            Exit::Invalid
        })?,
        None => None,
    };
    let Some(which) = &args.resume else {
        return Ok(merged);
    };
    match run::load_resume(state_dir, which) {
        Ok(record) => {
            if let Some(warning) = run::records::not_yours(&record) {
                let _ = writeln!(io.err, "warning: {warning}");
            }
            for note in run::clean_up_after(workdir, state_dir, &record) {
                let _ = writeln!(io.err, "note: {note}");
            }
            Ok(Some(record))
        }
        Err(problem) => {
            report(io, &[problem]);
            Err(Exit::Invalid)
        }
    }
}

/// The daily budget of `--daily-budget` (else `[budget] daily_usd`) with what the state
/// directory's runs spent in the last 24 hours; `Err` when that is already past it (said, with
/// the runs that spent it and how to raise it). None when no budget is set or the run replays.
fn daily_budget(
    args: &RunArgs,
    plan: &crate::plan::Plan,
    state_dir: &camino::Utf8Path,
    run_id: &str,
    replaying: bool,
    io: &mut Io<'_>,
) -> Result<Option<crate::budget::DailyLimit>, Exit> {
    let (limit, set_by) = match (args.daily_budget, plan.daily_usd) {
        (Some(usd), _) => (usd, format!("--daily-budget {usd}")),
        (None, Some(usd)) => (usd, format!("[budget] daily_usd = {usd}")),
        (None, None) => return Ok(None),
    };
    if replaying {
        return Ok(None);
    }
    let spend = run::daily::Spend::read(state_dir, Some(run_id), jiff::Timestamp::now());
    if spend.total_usd >= limit {
        let _ = write!(io.err, "{}", spend.refusal(limit, &set_by, &args.workflow));
        return Err(Exit::Invalid);
    }
    Ok(Some(crate::budget::DailyLimit {
        limit_usd: limit,
        earlier_usd: spend.total_usd,
        set_by,
    }))
}

/// The cassettes of `--record` or `--replay`, if either.
fn tapes(args: &RunArgs, run_id: &str, io: &mut Io<'_>) -> Result<Option<Arc<Tapes>>, Exit> {
    match (&args.record, &args.replay) {
        (Some(dir), _) => {
            // Made before any step runs, so a writing step's bash finds it read-only rather
            // than free to plant cassettes in; opened through no link (a checkout may ship
            // `cassettes` as a link to send them elsewhere).
            let out = match crate::out::OutDir::open(dir) {
                Ok(out) => out,
                Err(err) => {
                    let _ = writeln!(io.err, "error: --record: {err}");
                    return Err(Exit::Invalid);
                }
            };
            Ok(Some(Arc::new(
                Tapes::new(TapeMode::Record, dir.clone(), run_id).writing_to(out),
            )))
        }
        (_, Some(dir)) if !dir.is_dir() => {
            let _ = writeln!(
                io.err,
                "error: `--replay {dir}`: there is no such directory of cassettes (make one with `--record {dir}`)"
            );
            Err(Exit::Invalid)
        }
        (_, Some(dir)) => Ok(Some(Arc::new(
            Tapes::new(TapeMode::Replay, dir.clone(), run_id).strict(args.replay_strict),
        ))),
        (None, None) => Ok(None),
    }
}

/// What runs the steps: the model APIs the plan's steps use (none when replaying), the
/// registry, the agents, the MCP hub (returned too, to be shut down with the run).
fn executor(
    args: &RunArgs,
    plan: &crate::plan::Plan,
    workdir: &camino::Utf8Path,
    state_dir: &camino::Utf8Path,
    tapes: Option<Arc<Tapes>>,
    keys: &BTreeMap<String, Option<crate::provider::Secret>>,
    io: &mut Io<'_>,
) -> (Arc<ModelExecutor>, Arc<crate::mcp::Hub>) {
    let replaying = tapes.as_ref().is_some_and(|t| t.replaying());
    let apis: BTreeMap<String, Arc<dyn ModelApi>> = plan
        .providers
        .values()
        .filter(|spec| {
            !replaying
                && plan
                    .steps()
                    .iter()
                    .any(|s| s.model.as_ref().is_some_and(|m| m.provider == spec.name))
        })
        .map(|spec| {
            let key = keys.get(&spec.name).cloned().flatten();
            (spec.name.clone(), connect(spec, key))
        })
        .collect();
    let support = Support::probe();
    let bash_modes = plan
        .steps()
        .iter()
        .filter(|s| s.tools.contains("bash"))
        .map(|s| s.sandbox);
    if let Some(warning) = support.warning(bash_modes) {
        let _ = writeln!(io.err, "warning: {warning}");
    }
    // Nested repositories are looked for once, when some step may write the checkout itself.
    let writes_here = plan.steps().iter().any(|s| {
        s.sandbox == crate::sandbox::Mode::Workdir
            && s.isolation != crate::workflow::Isolation::Worktree
    });
    let tree = match writes_here {
        true => {
            let tape_dir = tapes.as_ref().map(|t| t.dir().to_owned());
            let skip: Vec<&camino::Utf8Path> = std::iter::once(state_dir)
                .chain(tape_dir.as_deref())
                .collect();
            crate::run::confinement::scan_tree(workdir, &skip)
        }
        false => Default::default(),
    };
    let confined = plan.steps().iter().any(|s| {
        s.sandbox != crate::sandbox::Mode::Off && (s.tools.contains("bash") || s.command.is_some())
    });
    for warning in crate::run::confinement::warnings(workdir, &tree, confined) {
        let _ = writeln!(io.err, "warning: {warning}");
    }
    let registry = Arc::new(Registry::builtin());
    let catalog = Arc::new(super::agent_catalog(
        &args.resolve.agents_dirs,
        Some(&args.workflow),
        &plan.workdir_trust,
        workdir,
        &registry,
    ));
    let mut team = Team::new(plan, registry, catalog, apis);
    team.tapes = tapes;
    let canonical = workdir
        .canonicalize_utf8()
        .unwrap_or_else(|_| workdir.to_owned());
    team.mcp = Arc::new(crate::mcp::Hub::new(canonical.clone()));
    let mcp = team.mcp.clone();
    let executor = Arc::new(ModelExecutor {
        team: Arc::new(team),
        workdir: canonical,
        state_dir: state_dir.to_owned(),
        support,
        tree: Arc::new(tree),
    });
    (executor, mcp)
}

/// A worktree starts from HEAD: what the checkout has not committed does not reach it. The state
/// directory is runner's, not a change (in an exported pipeline's job it holds the runner binary
/// and the state of earlier jobs).
fn warn_uncommitted(
    plan: &crate::plan::Plan,
    workdir: &camino::Utf8Path,
    state_dir: &camino::Utf8Path,
    io: &mut Io<'_>,
) {
    let worktree_steps: Vec<&str> = plan
        .steps()
        .iter()
        .filter(|s| s.isolation == crate::workflow::Isolation::Worktree)
        .map(|s| s.id.as_str())
        .collect();
    if worktree_steps.is_empty() {
        return;
    }
    let Some(repo) = crate::run::worktree::Repo::discover(workdir) else {
        return;
    };
    let changed = repo.uncommitted_outside(state_dir);
    if changed > 0 {
        let _ = writeln!(
            io.err,
            "warning: the checkout has {changed} uncommitted change{} (`git status`); worktree steps ({}) start from HEAD and will not see {}: commit first to include {}",
            if changed == 1 { "" } else { "s" },
            worktree_steps.join(", "),
            if changed == 1 { "it" } else { "them" },
            if changed == 1 { "it" } else { "them" },
        );
    }
}

/// The displays and records the flags ask for; `Err` when `--junit` names a place runner will
/// not write through (said before any step runs).
fn sinks(
    args: &RunArgs,
    plan: &crate::plan::Plan,
    only: &BTreeSet<String>,
) -> Result<Sinks, crate::out::OutError> {
    let mut sinks = Sinks::default();
    let terminal = crate::out::stderr_is_terminal();
    // In a GitHub Actions job, its sink prints the log lines (grouped by step) instead.
    let github = crate::report::github::detected();
    if !args.no_progress {
        if terminal {
            sinks.add(LiveProgress::new(plan));
        } else if !github {
            sinks.add(PlainProgress::new(plan).every(heartbeat()));
        }
    } else {
        // Drift is a warning, not progress: CI, which passes `--no-progress`, hears of it.
        sinks.add(Warnings::new(plan));
    }
    if github {
        sinks.add(
            GithubSink::new(plan, !args.no_progress && !terminal)
                .only(only)
                .every(heartbeat()),
        );
    }
    if args.format == RunFormat::Jsonl {
        sinks.add(JsonlSink::stdout());
    }
    if let Some(path) = &args.junit {
        sinks.add(JunitSink::new(path, plan)?);
    }
    Ok(sinks)
}

/// How often plain progress says a running step is alive: 30 s, or `RUNNER_HEARTBEAT_SECS`
/// (not documented for users: the tests' way to see a heartbeat without waiting 30 s).
fn heartbeat() -> Duration {
    std::env::var("RUNNER_HEARTBEAT_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0 && *s < 86_400.0)
        .map_or(crate::report::heartbeat::HEARTBEAT, Duration::from_secs_f64)
}

/// The table under the run, `run.json` on stdout with `--format json`, and the exit code.
fn finish(
    args: &RunArgs,
    plan: &crate::plan::Plan,
    options: &RunOptions,
    result: Result<crate::record::RunRecord, run::RunError>,
    recording: Option<Arc<Tapes>>,
    io: &mut Io<'_>,
) -> Exit {
    let record = match result {
        Ok(record) => record,
        Err(run::RunError::Invalid(problem)) => {
            report(io, &[problem]);
            return Exit::Invalid;
        }
        Err(run::RunError::Storage(error)) => {
            let _ = writeln!(io.err, "error: {error}");
            return Exit::Unexpected;
        }
    };
    let run_dir = options.state_dir.join("runs").join(&record.run_id);
    let _ = write!(
        io.err,
        "{}",
        summary_table_within(plan, &record, &run_dir, crate::terminal::stderr_width())
    );
    if let (Some(tapes), Some(dir)) = (recording, &args.record) {
        let (cassettes, requests, steps) = tapes.written();
        let count = |n: usize, one, many| crate::units::count(n as u64, one, many);
        let _ = writeln!(
            io.err,
            "recorded: {} ({} of {}) in {}; replay them with `--replay {}`",
            count(cassettes, "cassette", "cassettes"),
            count(requests, "request", "requests"),
            count(steps, "step", "steps"),
            crate::terminal::clean(dir.as_str()),
            crate::terminal::clean(dir.as_str()),
        );
    }
    if args.format == RunFormat::Json {
        let _ = writeln!(io.out, "{}", record.to_json());
    }
    // What the run found, on stdout after the table (docs/src/runs.md "The answer"): with
    // `--format json` or `jsonl` stdout is data, which holds it already.
    if args.format == RunFormat::Text && !args.quiet {
        let _ = write!(io.out, "{}", crate::report::answers::answers(&record));
    }
    match record.status {
        RunStatus::Succeeded => Exit::Success,
        RunStatus::Interrupted => Exit::Interrupted,
        _ if record.storage_error.is_some() => Exit::Unexpected,
        RunStatus::Failed | RunStatus::Running => Exit::StepFailed,
    }
}

/// Signals within this long of the first are the same interrupt: `timeout` (and a CI runner
/// cancelling a job) signals runner and then its whole process group at once, and Ctrl-C in a
/// terminal reaches the group too (docs/src/runs.md "Scheduling and failures").
const SAME_INTERRUPT: Duration = Duration::from_secs(1);

/// The first SIGINT/SIGTERM stops the run (running steps are cancelled, `run.json` says
/// `interrupted`); signals within [`SAME_INTERRUPT`] of it count as the same one. A later one
/// exits at once, after writing the newest `run.json` as interrupted. The handlers are
/// installed before the run starts, so a signal cannot slip in between.
fn watch_signals(
    runtime: &tokio::runtime::Runtime,
    interrupt: CancellationToken,
    saved: crate::report::record::LastSaved,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let _entered = runtime.enter();
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    runtime.spawn(async move {
        // `None` means the runtime is shutting down: no signal came.
        let first = tokio::select! {
            got = int.recv() => got,
            got = term.recv() => got,
        };
        if first.is_none() {
            return;
        }
        let first_at = tokio::time::Instant::now();
        let _ = writeln!(
            crate::out::stderr(),
            "interrupted: stopping running steps (again to exit at once)"
        );
        interrupt.cancel();
        loop {
            let next = tokio::select! {
                got = int.recv() => got,
                got = term.recv() => got,
            };
            if next.is_none() {
                return;
            }
            if first_at.elapsed() >= SAME_INTERRUPT {
                break;
            }
        }
        let said = match saved.abandon() {
            Ok(Some(dir)) => {
                format!("interrupted again: exiting at once; {dir}/run.json says interrupted")
            }
            Ok(None) => "interrupted again: exiting at once".to_owned(),
            Err(err) => format!("interrupted again: exiting at once; run.json: {err}"),
        };
        let _ = writeln!(crate::out::stderr(), "{said}");
        // Exiting skips the live display's cleanup: show the cursor it hid.
        if crate::out::stderr_is_terminal() {
            let _ = write!(crate::out::stderr(), "\x1b[?25h");
        }
        std::process::exit(i32::from(Exit::Interrupted.code()));
    });
}
