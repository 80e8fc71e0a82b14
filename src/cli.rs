//! The command line: clap definitions and dispatch. Output goes to the writers passed in so the
//! whole CLI can be driven in-process (the no-panic test does that).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

use camino::{Utf8Path, Utf8PathBuf};
use clap::{Args, Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

use crate::agent::{AgentCatalog, AgentSource, agent_schema, lookup_dirs};
use crate::error::{Exit, Problem, Renderer, count_summary};
use crate::plan::{Plan, PlanOptions, build_plan, render};
use crate::provider::client::ModelClient;
use crate::report::junit::to_junit;
use crate::report::progress::{LiveProgress, NoProgress, PlainProgress};
use crate::report::summary_table;
use crate::run::executor::ModelExecutor;
use crate::run::{self, RunOptions, RunStatus};
use crate::sandbox::Support;
use crate::tools::bash::scrubbed_vars;
use crate::tools::{ToolName, ToolSet};
use crate::workflow::{load_workflow, workflow_schema};

#[derive(Debug, Parser)]
#[command(
    name = "runner",
    version,
    about = "Run declarative agent workflows: DAGs of LLM subagent steps",
    long_about = "Run declarative agent workflows.\n\nA workflow file (TOML or YAML) describes a DAG of subagent steps \
                  (explore, plan, code, or your own agents), each with its own tools and model. \
                  runner validates it, resolves the graph and runs independent steps at the same time.",
    after_help = "Exit codes: 0 success, 1 a step failed, 2 invalid workflow or usage, 130 interrupted."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a workflow (or, with --dry-run, print its plan)
    Run(RunArgs),
    /// Print what a run would do: steps in waves, models, tools, rendered prompts; calls no model
    Plan(PlanArgs),
    /// Check workflow files and print every problem
    Validate(ValidateArgs),
    /// Print a workflow's step graph as Mermaid or DOT
    Graph(GraphArgs),
    /// List the agents a workflow can use, and where each comes from
    Agents(AgentsArgs),
    /// Print the JSON Schema of workflow or agent files
    Schema(SchemaArgs),
}

/// Flags that shape how a workflow resolves, shared by every command that reads one.
#[derive(Debug, Args, Clone, Default)]
struct ResolveArgs {
    /// Set an input: NAME=VALUE, or NAME=@FILE to read the value from a file (repeatable)
    #[arg(short = 'i', long = "input", value_name = "NAME=VALUE")]
    inputs: Vec<String>,
    /// Override a model alias for this run: ALIAS=provider/model (repeatable)
    #[arg(long = "model", value_name = "ALIAS=MODEL")]
    models: Vec<String>,
    /// Look for agents here first (repeatable; earlier wins)
    #[arg(long = "agents-dir", value_name = "DIR")]
    agents_dirs: Vec<Utf8PathBuf>,
    /// The directory steps work in [default: current directory]
    #[arg(long, value_name = "DIR")]
    workdir: Option<Utf8PathBuf>,
    /// `off` runs bash without its kernel sandbox (Landlock, no network), on purpose
    #[arg(long, value_enum, default_value_t, value_name = "on|off")]
    sandbox: SandboxSetting,
}

#[derive(Debug, Clone, Copy, ValueEnum, Default, PartialEq, Eq)]
enum SandboxSetting {
    #[default]
    On,
    Off,
}

#[derive(Debug, Clone, Copy, ValueEnum, Default, PartialEq, Eq)]
enum Format {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The workflow file (.toml, .yaml or .yml)
    workflow: Utf8PathBuf,
    #[command(flatten)]
    resolve: ResolveArgs,
    /// Steps running at once (overrides the file's max_parallel)
    #[arg(long, value_name = "N")]
    max_parallel: Option<u32>,
    /// Run only this step, taking its needs from --resume (repeatable)
    #[arg(long, value_name = "STEP")]
    only: Vec<String>,
    /// Print the plan and stop; no model is called
    #[arg(long)]
    dry_run: bool,
    /// Where runs are recorded [default: <workdir>/.runner]
    #[arg(long, value_name = "DIR")]
    state_dir: Option<Utf8PathBuf>,
    /// Reuse the successful steps of an earlier run (a run id, or `latest`)
    #[arg(long, value_name = "RUN_ID")]
    resume: Option<String>,
    /// Output format: `text` for people, `json` for programs
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// Write a JUnit XML report here
    #[arg(long, value_name = "FILE")]
    junit: Option<Utf8PathBuf>,
    /// No live progress on stderr
    #[arg(long)]
    no_progress: bool,
    /// Stop starting steps after the first failure and cancel running ones
    #[arg(long, conflicts_with = "keep_going")]
    fail_fast: bool,
    /// Keep running independent steps after a failure (the default)
    #[arg(long)]
    keep_going: bool,
}

#[derive(Debug, Args)]
struct PlanArgs {
    /// The workflow file (.toml, .yaml or .yml)
    workflow: Utf8PathBuf,
    #[command(flatten)]
    resolve: ResolveArgs,
    /// Steps running at once (overrides the file's max_parallel)
    #[arg(long, value_name = "N")]
    max_parallel: Option<u32>,
    /// Output format: `text` for people, `json` for programs
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

#[derive(Debug, Args)]
struct ValidateArgs {
    /// Workflow files to check
    #[arg(required = true)]
    workflows: Vec<Utf8PathBuf>,
    /// Inputs are optional here: without them, required inputs are not checked
    #[command(flatten)]
    resolve: ResolveArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum, Default)]
enum GraphFormat {
    #[default]
    Mermaid,
    Dot,
}

#[derive(Debug, Args)]
struct GraphArgs {
    /// The workflow file (.toml, .yaml or .yml)
    workflow: Utf8PathBuf,
    #[command(flatten)]
    resolve: ResolveArgs,
    /// Diagram language
    #[arg(long, value_enum, default_value_t)]
    format: GraphFormat,
}

#[derive(Debug, Args)]
struct AgentsArgs {
    /// Also list the agents in this workflow's `agents/` folder
    #[arg(long, value_name = "FILE")]
    workflow: Option<Utf8PathBuf>,
    /// Look for agents here first (repeatable; earlier wins)
    #[arg(long = "agents-dir", value_name = "DIR")]
    agents_dirs: Vec<Utf8PathBuf>,
    /// The directory whose `.claude/agents/` is searched [default: current directory]
    #[arg(long, value_name = "DIR")]
    workdir: Option<Utf8PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SchemaKind {
    Workflow,
    Agent,
}

#[derive(Debug, Args)]
struct SchemaArgs {
    /// Which schema
    kind: SchemaKind,
}

/// What the commands write to; stdout for results, stderr for diagnostics and progress.
pub struct Io<'a> {
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
    pub color: bool,
}

/// Entry point of the binary.
pub fn main() -> Exit {
    crate::secrets::harden_process();
    // SAFETY: this is the start of the binary's main thread; no other thread exists yet, and none
    // is started before the command line is handled.
    unsafe { crate::secrets::take_keys_from_env() };
    let args: Vec<OsString> = std::env::args_os().collect();
    let color = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    // Unlocked handles: progress threads and the signal task write to stderr too.
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    run_cli(
        args,
        &mut Io {
            out: &mut out,
            err: &mut err,
            color,
        },
    )
}

/// Parses `args` (including the program name) and runs the command.
pub fn run_cli(args: Vec<OsString>, io: &mut Io<'_>) -> Exit {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) => {
            let text = if io.color {
                err.render().ansi().to_string()
            } else {
                err.render().to_string()
            };
            return match err.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    let _ = write!(io.out, "{text}");
                    Exit::Success
                }
                _ => {
                    let _ = write!(io.err, "{text}");
                    Exit::Invalid
                }
            };
        }
    };
    match cli.command {
        Command::Run(args) => cmd_run(args, io),
        Command::Plan(args) => {
            let options = (args.max_parallel, true);
            cmd_plan(&args.workflow, &args.resolve, options, args.format, io)
        }
        Command::Validate(args) => cmd_validate(args, io),
        Command::Graph(args) => cmd_graph(args, io),
        Command::Agents(args) => cmd_agents(args, io),
        Command::Schema(args) => {
            let schema = match args.kind {
                SchemaKind::Workflow => workflow_schema(),
                SchemaKind::Agent => agent_schema(),
            };
            let _ = writeln!(io.out, "{}", schema_text(&schema));
            Exit::Success
        }
    }
}

/// The exact text of `schemas/*.json`.
pub fn schema_text(schema: &serde_json::Value) -> String {
    serde_json::to_string_pretty(schema).unwrap_or_default()
}

fn report(io: &mut Io<'_>, problems: &[Problem]) {
    if problems.is_empty() {
        return;
    }
    let text = Renderer::new(io.color).render(problems);
    let _ = write!(io.err, "{text}");
}

/// Reports problems and, if any is an error, how many; returns whether there were errors.
fn report_with_summary(io: &mut Io<'_>, problems: &[Problem], file: &Utf8Path) -> bool {
    report(io, problems);
    let failed = problems.iter().any(Problem::is_error);
    if failed {
        let _ = writeln!(
            io.err,
            "error: {file} is invalid: {}",
            count_summary(problems)
        );
    }
    failed
}

fn workdir(args: &ResolveArgs) -> Result<Utf8PathBuf, Problem> {
    match &args.workdir {
        Some(dir) if dir.is_dir() => Ok(dir.clone()),
        Some(dir) => Err(Problem::error(format!(
            "--workdir `{dir}` is not a directory"
        ))),
        None => Ok(Utf8PathBuf::from(".")),
    }
}

/// Turns `--input`/`--model` flags into options, reading `NAME=@FILE` values.
fn plan_options(
    args: &ResolveArgs,
    max_parallel: Option<u32>,
    require_inputs: bool,
) -> Result<PlanOptions, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut inputs = Vec::new();
    for raw in &args.inputs {
        let Some((name, value)) = raw.split_once('=') else {
            problems.push(Problem::error(format!(
                "`--input {raw}` must be NAME=VALUE (or NAME=@FILE)"
            )));
            continue;
        };
        let value = match value.strip_prefix('@') {
            Some(path) => match crate::limits::read_text(
                Utf8Path::new(path),
                crate::limits::MAX_INPUT_FILE_BYTES,
            ) {
                Ok(text) => text,
                Err(err) => {
                    problems.push(Problem::error(format!(
                        "`--input {name}=@{path}`: cannot read `{path}`: {err}"
                    )));
                    continue;
                }
            },
            None => value.to_owned(),
        };
        inputs.push((name.trim().to_owned(), value));
    }
    let mut models = Vec::new();
    for raw in &args.models {
        match raw.split_once('=') {
            Some((alias, model)) => models.push((alias.trim().to_owned(), model.trim().to_owned())),
            None => problems.push(Problem::error(format!(
                "`--model {raw}` must be ALIAS=provider/model, e.g. `--model default=anthropic/claude-sonnet-4-5`"
            ))),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(PlanOptions {
        inputs,
        models,
        max_parallel,
        require_inputs,
        workdir: Some(
            args.workdir
                .clone()
                .unwrap_or_else(|| Utf8PathBuf::from(".")),
        ),
        sandbox_off: args.sandbox == SandboxSetting::Off,
    })
}

/// Loads a workflow and builds its plan, reporting every problem. `None` means exit 2.
fn load_plan(
    workflow: &Utf8Path,
    args: &ResolveArgs,
    max_parallel: Option<u32>,
    require_inputs: bool,
    io: &mut Io<'_>,
) -> Option<Plan> {
    let prepared = workdir(args).map_err(|p| vec![p]).and_then(|dir| {
        plan_options(args, max_parallel, require_inputs).map(|options| (dir, options))
    });
    let (dir, options) = match prepared {
        Ok(ok) => ok,
        Err(problems) => {
            report(io, &problems);
            return None;
        }
    };
    let loaded = match load_workflow(workflow) {
        Ok(loaded) => loaded,
        Err(problems) => {
            report_with_summary(io, &problems, workflow);
            return None;
        }
    };
    let catalog = AgentCatalog::load(&lookup_dirs(&args.agents_dirs, Some(workflow), &dir));
    let (plan, problems) = build_plan(&loaded, &catalog, &options);
    if report_with_summary(io, &problems, workflow) {
        return None;
    }
    plan
}

fn cmd_plan(
    workflow: &Utf8Path,
    args: &ResolveArgs,
    (max_parallel, require_inputs): (Option<u32>, bool),
    format: Format,
    io: &mut Io<'_>,
) -> Exit {
    let Some(plan) = load_plan(workflow, args, max_parallel, require_inputs, io) else {
        return Exit::Invalid;
    };
    let text = match format {
        Format::Text => render::to_text(&plan),
        Format::Json => render::to_json(&plan),
    };
    let _ = write!(io.out, "{text}");
    Exit::Success
}

fn cmd_run(args: RunArgs, io: &mut Io<'_>) -> Exit {
    if args.dry_run {
        return cmd_plan(
            &args.workflow,
            &args.resolve,
            (args.max_parallel, true),
            args.format,
            io,
        );
    }
    let Some(plan) = load_plan(&args.workflow, &args.resolve, args.max_parallel, true, io) else {
        return Exit::Invalid;
    };
    let workdir = args
        .resolve
        .workdir
        .clone()
        .unwrap_or_else(|| Utf8PathBuf::from("."));
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| run::default_state_dir(&workdir));
    let resume = match &args.resume {
        Some(which) => match run::load_resume(&state_dir, which) {
            Ok(record) => {
                for note in run::clean_up_after(&workdir, &record) {
                    let _ = writeln!(io.err, "note: {note}");
                }
                Some(record)
            }
            Err(problem) => {
                report(io, &[problem]);
                return Exit::Invalid;
            }
        },
        None => None,
    };
    let only: BTreeSet<String> = args.only.iter().cloned().collect();
    let problems = run::check_only(&plan, &only, resume.as_ref());
    if !problems.is_empty() {
        report(io, &problems);
        return Exit::Invalid;
    }
    // Keys are checked before anything starts: a missing one costs nothing.
    let keys = match run::provider_keys(&plan) {
        Ok(keys) => keys,
        Err(problems) => {
            report(io, &problems);
            return Exit::Invalid;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            report(
                io,
                &[Problem::error(format!(
                    "cannot start the async runtime: {err}"
                ))],
            );
            return Exit::Invalid;
        }
    };
    let interrupt = CancellationToken::new();
    watch_signals(&runtime, interrupt.clone());
    let configured: Vec<String> = plan
        .providers
        .values()
        .filter_map(|p| p.api_key_env.clone())
        .collect();
    let clients = plan
        .providers
        .values()
        .filter(|spec| plan.steps.iter().any(|s| s.model.provider == spec.name))
        .map(|spec| {
            let key = keys.get(&spec.name).cloned().flatten();
            (
                spec.name.clone(),
                ModelClient::new(spec.kind, &spec.base_url(), key),
            )
        })
        .collect();
    let support = Support::probe();
    let bash_modes = plan
        .steps
        .iter()
        .filter(|s| s.tools.contains(&ToolName::Bash))
        .map(|s| s.sandbox);
    if let Some(warning) = support.warning(bash_modes) {
        let _ = writeln!(io.err, "warning: {warning}");
    }
    let executor = Arc::new(ModelExecutor {
        clients: Arc::new(clients),
        scrub: Arc::new(scrubbed_vars(&configured)),
        state_dir: state_dir.clone(),
        support,
    });
    let options = RunOptions {
        workdir,
        state_dir,
        fail_fast: args.fail_fast,
        resume,
        only,
        interrupt,
    };
    let mut reporter: Box<dyn run::Reporter> = if args.no_progress {
        Box::new(NoProgress)
    } else if std::io::stderr().is_terminal() {
        Box::new(LiveProgress::new())
    } else {
        Box::new(PlainProgress)
    };
    let result = runtime.block_on(run::execute(&plan, executor, &options, reporter.as_mut()));
    drop(reporter);
    // Steps still winding down (a cancelled HTTP request, a killed process) are not waited for.
    runtime.shutdown_timeout(Duration::from_millis(500));
    let record = match result {
        Ok(record) => record,
        Err(run::RunError::Invalid(problem)) => {
            report(io, &[problem]);
            return Exit::Invalid;
        }
        Err(run::RunError::Storage(error)) => {
            let _ = writeln!(io.err, "error: {error}");
            return Exit::StepFailed;
        }
    };
    let _ = write!(io.err, "{}", summary_table(&plan, &record));
    if let Some(path) = &args.junit
        && let Err(err) = std::fs::write(path, to_junit(&plan, &record))
    {
        let _ = writeln!(
            io.err,
            "error: cannot write the JUnit report `{path}`: {err}"
        );
    }
    if args.format == Format::Json {
        let _ = writeln!(io.out, "{}", record.to_json());
    }
    match record.status {
        RunStatus::Succeeded => Exit::Success,
        RunStatus::Interrupted => Exit::Interrupted,
        RunStatus::Failed | RunStatus::Running => Exit::StepFailed,
    }
}

/// The first SIGINT/SIGTERM stops the run (running steps are cancelled, `run.json` says
/// `interrupted`); a second exits at once. The handlers are installed before the run starts, so
/// a signal cannot slip in between.
fn watch_signals(runtime: &tokio::runtime::Runtime, interrupt: CancellationToken) {
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
        let _ = writeln!(
            std::io::stderr(),
            "interrupted: stopping running steps (again to exit at once)"
        );
        interrupt.cancel();
        let second = tokio::select! {
            got = int.recv() => got,
            got = term.recv() => got,
        };
        if second.is_some() {
            std::process::exit(Exit::Interrupted as i32);
        }
    });
}

fn cmd_validate(args: ValidateArgs, io: &mut Io<'_>) -> Exit {
    let require_inputs = !args.resolve.inputs.is_empty();
    let mut failed = false;
    for workflow in &args.workflows {
        match load_plan(workflow, &args.resolve, None, require_inputs, io) {
            Some(plan) => {
                let _ = writeln!(
                    io.out,
                    "ok: {workflow} ({} step{}, {} wave{})",
                    plan.steps.len(),
                    if plan.steps.len() == 1 { "" } else { "s" },
                    plan.waves.len(),
                    if plan.waves.len() == 1 { "" } else { "s" },
                );
            }
            None => failed = true,
        }
    }
    if failed { Exit::Invalid } else { Exit::Success }
}

fn cmd_graph(args: GraphArgs, io: &mut Io<'_>) -> Exit {
    let Some(plan) = load_plan(&args.workflow, &args.resolve, None, false, io) else {
        return Exit::Invalid;
    };
    let text = match args.format {
        GraphFormat::Mermaid => render::to_mermaid(&plan),
        GraphFormat::Dot => render::to_dot(&plan),
    };
    let _ = write!(io.out, "{text}");
    Exit::Success
}

fn cmd_agents(args: AgentsArgs, io: &mut Io<'_>) -> Exit {
    let resolve = ResolveArgs {
        workdir: args.workdir.clone(),
        ..Default::default()
    };
    let dir = match workdir(&resolve) {
        Ok(dir) => dir,
        Err(problem) => {
            report(io, &[problem]);
            return Exit::Invalid;
        }
    };
    let catalog = AgentCatalog::load(&lookup_dirs(
        &args.agents_dirs,
        args.workflow.as_deref(),
        &dir,
    ));
    let mut rows = vec![[
        "NAME".to_owned(),
        "SOURCE".to_owned(),
        "MODEL".to_owned(),
        "TOOLS".to_owned(),
    ]];
    for agent in catalog.agents() {
        let tools = match &agent.tools {
            ToolSet::All => "*".to_owned(),
            ToolSet::Some(set) => set
                .iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        };
        let tools = if agent.disallowed.is_empty() {
            tools
        } else {
            let minus: Vec<&str> = agent.disallowed.iter().map(|t| t.as_str()).collect();
            format!("{tools} (minus {})", minus.join(", "))
        };
        let model = agent
            .model
            .clone()
            .unwrap_or_else(|| agent.default_alias.to_owned());
        rows.push([
            agent.name.clone(),
            display_source(&agent.source),
            model,
            tools,
        ]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let line = format!(
            "{:<w0$}  {:<w1$}  {:<w2$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
        let _ = writeln!(io.out, "{}", line.trim_end());
    }
    for agent in &catalog.shadowed {
        let _ = writeln!(
            io.err,
            "note: agent `{}` from {} is hidden by one of the same name with higher priority",
            agent.name,
            display_source(&agent.source)
        );
    }
    let mut problems: Vec<Problem> = catalog.warnings.values().flatten().cloned().collect();
    for (_, list) in catalog.broken.values() {
        problems.extend(list.iter().cloned());
    }
    report(io, &problems);
    if catalog.broken.is_empty() {
        Exit::Success
    } else {
        let _ = writeln!(
            io.err,
            "error: {} agent file{} could not be loaded",
            catalog.broken.len(),
            if catalog.broken.len() == 1 { "" } else { "s" }
        );
        Exit::Invalid
    }
}

/// Agent files shown relative to the current directory when they are under it.
fn display_source(source: &AgentSource) -> String {
    match source {
        AgentSource::Builtin => "built-in".into(),
        AgentSource::File(path) => {
            let cwd = std::env::current_dir()
                .ok()
                .and_then(|p| Utf8PathBuf::from_path_buf(p).ok());
            let canonical = path.canonicalize_utf8().unwrap_or_else(|_| path.clone());
            cwd.and_then(|cwd| canonical.strip_prefix(&cwd).ok().map(Utf8Path::to_owned))
                .unwrap_or_else(|| path.clone())
                .to_string()
        }
    }
}
