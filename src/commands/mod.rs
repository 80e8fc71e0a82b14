//! The binary's entry point and dispatch, one file per command, and what the commands share
//! (loading a workflow into a plan, reporting problems).

pub mod agents;
pub mod audit;
pub mod clean;
pub mod completions;
pub mod diff;
pub mod export;
pub mod gather;
pub mod graph;
pub mod man;
pub mod mcp;
pub mod models;
pub mod plan;
pub mod report;
pub mod run;
pub mod runs;
pub mod schema;
pub mod show;
pub mod validate;

use std::ffi::OsString;

use camino::{Utf8Path, Utf8PathBuf};
use clap::Parser;

use crate::agent::{AgentCatalog, WorkdirTrust, lookup_dirs};
use crate::cli::{Cli, Command, Io, LimitArgs, McpCommand, ResolveArgs, SandboxSetting};
use crate::error::{Exit, Problem, Renderer, count_summary};
use crate::plan::{Plan, PlanOptions, build_plan};
use crate::tools::Registry;
use crate::workflow::load_workflow;

/// Entry point of the binary.
pub fn main() -> Exit {
    crate::secrets::harden_process();
    // SAFETY: this is the start of the binary's main thread; no other thread exists yet, and none
    // is started before the command line is handled.
    unsafe { crate::secrets::take_keys_from_env() };
    crate::secrets::hide_secret_vars();
    let args: Vec<OsString> = std::env::args_os().collect();
    let color = crate::out::stderr_is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    // Unlocked handles: progress threads and the signal task write to stderr too.
    let mut out = crate::out::stdout();
    let mut err = crate::out::stderr();
    // Held until the command is done: nothing it prints runs as a GitHub workflow command.
    let _guard = crate::report::github::LogGuard::start();
    run_cli(
        args,
        &mut Io {
            out: &mut out,
            err: &mut err,
            color,
        },
    )
}

/// Parses `args` (including the program name) and runs the command. Whatever `io` is, the
/// command writes to it through the redactor (docs/src/security.md, "Secrets").
pub fn run_cli(args: Vec<OsString>, io: &mut Io<'_>) -> Exit {
    let mut out = crate::out::Redacting::lines(&mut *io.out);
    let mut err = crate::out::Redacting::lines(&mut *io.err);
    let exit = dispatch(
        args,
        &mut Io {
            out: &mut out,
            err: &mut err,
            color: io.color,
        },
    );
    let _ = out.finish();
    let _ = err.finish();
    exit
}

fn dispatch(args: Vec<OsString>, io: &mut Io<'_>) -> Exit {
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
        Command::Run(args) => run::run(args, io),
        Command::Plan(args) => {
            let state_dir = args.state_dir.as_deref();
            plan::plan(
                &args.workflow,
                &args.resolve,
                args.limits,
                state_dir,
                args.format,
                io,
            )
        }
        Command::Validate(args) => validate::validate(args, io),
        Command::Graph(args) => graph::graph(args, io),
        Command::Agents(args) => agents::agents(args, io),
        Command::Schema(args) => schema::schema(args, io),
        Command::Diff(args) => diff::diff(args, io),
        Command::Export(args) => export::export(args, io),
        Command::Clean(args) => clean::clean(args, io),
        Command::Runs(args) => runs::runs(args, io),
        Command::Show(args) => show::show(args, io),
        Command::Audit(args) => audit::audit(args, io),
        Command::Report(args) => report::report(args, io),
        Command::Gather(args) => gather::gather(args, io),
        Command::Mcp(McpCommand::List(args)) => mcp::list(args, io),
        Command::Models(args) => models::models(args, io),
        Command::Completions(args) => completions::completions(args, io),
        Command::Man(args) => man::man(args, io),
    }
}

pub(crate) fn report(io: &mut Io<'_>, problems: &[Problem]) {
    if problems.is_empty() {
        return;
    }
    let text = Renderer::new(io.color).render(problems);
    // Diagnostics quote files: a secret in one (a key pasted into a workflow) shows hidden,
    // as everything written to `io` is.
    let _ = write!(io.err, "{text}");
}

/// Reports problems and, if any is an error, how many; returns whether there were errors.
pub(crate) fn report_with_summary(io: &mut Io<'_>, problems: &[Problem], file: &Utf8Path) -> bool {
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

pub(crate) fn workdir(args: &ResolveArgs) -> Result<Utf8PathBuf, Problem> {
    match &args.workdir {
        Some(dir) if dir.is_dir() => Ok(dir.clone()),
        Some(dir) => Err(Problem::error(format!(
            "--workdir `{dir}` is not a directory"
        ))),
        None => Ok(Utf8PathBuf::from(".")),
    }
}

/// Turns `--input`/`--model` flags into options, reading `NAME=@FILE` values.
pub(crate) fn plan_options(
    args: &ResolveArgs,
    limits: LimitArgs,
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
                "`--model {raw}` must be ALIAS=provider/model, e.g. `--model default={}`",
                crate::provider::known::newest_claude("sonnet")
            ))),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(PlanOptions {
        inputs,
        models,
        max_parallel: limits.max_parallel,
        require_inputs,
        sandbox_off: args.sandbox == SandboxSetting::Off,
        max_subagents: limits.max_subagents,
        max_cost_usd: limits.max_cost,
        unknown_cost: limits.unknown_cost.map(Into::into),
        trust_workdir: args.trust_workdir,
        project_mcp: Default::default(),
        project_memory: None,
    })
}

/// The servers of the project's `.mcp.json` (Claude Code's `{"mcpServers": {...}}`), read only
/// when the working directory is trusted: a checkout's file must not start programs.
fn project_mcp(
    dir: &Utf8Path,
) -> Result<std::collections::BTreeMap<String, crate::workflow::McpServerDef>, Problem> {
    #[derive(serde::Deserialize)]
    struct McpJson {
        #[serde(default, rename = "mcpServers")]
        mcp_servers: std::collections::BTreeMap<String, crate::workflow::McpServerDef>,
    }
    let path = dir.join(".mcp.json");
    if path.symlink_metadata().is_err() {
        return Ok(Default::default());
    }
    // Read as the tools read: a link out of the working directory is refused.
    let text = crate::tools::confine::Workspace::new(dir)
        .map_err(|err| err.to_string())
        .and_then(|ws| ws.read_text(".mcp.json", crate::limits::MAX_SCHEMA_BYTES))
        .map_err(|err| Problem::error(format!("cannot read `{path}`: {err}")))?;
    serde_json::from_str::<McpJson>(&text)
        .map(|file| file.mcp_servers)
        .map_err(|err| Problem::error(format!("`{path}` is not a valid `.mcp.json`: {err}")))
}

/// Loads a workflow and builds its plan, reporting every problem. `None` means exit 2.
pub(crate) fn load_plan(
    workflow: &Utf8Path,
    args: &ResolveArgs,
    limits: LimitArgs,
    require_inputs: bool,
    io: &mut Io<'_>,
) -> Option<Plan> {
    load_plan_with(workflow, args, limits, require_inputs, false, io)
}

/// [`load_plan`] for commands that look at a workflow without running it (`graph`, `export`,
/// `mcp list`): no limits from flags, and inputs may be left out.
pub(crate) fn load_plan_to_inspect(
    workflow: &Utf8Path,
    args: &ResolveArgs,
    io: &mut Io<'_>,
) -> Option<Plan> {
    load_plan(workflow, args, LimitArgs::default(), false, io)
}

/// [`load_plan`], but when `brief` and the workflow is valid, warnings about other files (agent
/// files using Claude Code settings runner ignores) are one line per file: they are about files
/// the user may share with Claude Code and cannot act on every run; `validate` shows them whole.
pub(crate) fn load_plan_with(
    workflow: &Utf8Path,
    args: &ResolveArgs,
    limits: LimitArgs,
    require_inputs: bool,
    brief: bool,
    io: &mut Io<'_>,
) -> Option<Plan> {
    let prepared = workdir(args)
        .map_err(|p| vec![p])
        .and_then(|dir| plan_options(args, limits, require_inputs).map(|options| (dir, options)));
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
    let registry = Registry::builtin();
    let trust = WorkdirTrust::new(args.trust_workdir, Some(&loaded.def));
    let mut options = options;
    options.project_memory = crate::session::prompt::memory_file(dir.as_std_path());
    if trust.all {
        match project_mcp(&dir) {
            Ok(servers) => options.project_mcp = servers,
            Err(problem) => {
                report(io, &[problem]);
                return None;
            }
        }
    }
    let catalog = agent_catalog(&args.agents_dirs, Some(workflow), &trust, &dir, &registry);
    let (plan, mut problems) = build_plan(&loaded, &catalog, &registry, &options);
    if brief && !problems.iter().any(Problem::is_error) {
        let mut elsewhere: std::collections::BTreeMap<String, usize> = Default::default();
        problems.retain(|p| match &p.file {
            Some(file) if file.name != loaded.file.name => {
                *elsewhere.entry(file.name.to_string()).or_default() += 1;
                false
            }
            _ => true,
        });
        for (file, count) in elsewhere {
            let _ = writeln!(
                io.err,
                "warning: {file}: {count} warning{} (`runner validate {workflow}` shows them)",
                if count == 1 { "" } else { "s" }
            );
        }
    }
    if report_with_summary(io, &problems, workflow) {
        return None;
    }
    plan
}

/// Whether the base URLs the plan's models go to are URLs (a schemeless `OPENAI_BASE_URL` is
/// refused before the run); reports the ones that are not.
pub(crate) fn endpoints_ok(plan: &Plan, io: &mut Io<'_>) -> bool {
    let problems = crate::run::endpoint_problems(plan);
    report(io, &problems);
    problems.is_empty()
}

/// The agents a command sees: the lookup folders, with the working directory's own agent files
/// trusted only as `trust` says.
pub(crate) fn agent_catalog(
    agents_dirs: &[Utf8PathBuf],
    workflow: Option<&Utf8Path>,
    trust: &WorkdirTrust,
    dir: &Utf8Path,
    registry: &Registry,
) -> AgentCatalog {
    let home = crate::agent::home_dir();
    AgentCatalog::load(
        &lookup_dirs(agents_dirs, workflow, dir, trust, home.as_deref()),
        registry,
    )
}

/// The async runtime of a command that runs things; `None` (after saying why) when the machine
/// will not give one.
pub(crate) fn runtime(io: &mut Io<'_>) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => Some(runtime),
        Err(err) => {
            let _ = writeln!(io.err, "error: cannot start the async runtime: {err}");
            None
        }
    }
}
