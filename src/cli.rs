//! The command line: clap definitions, and [`Io`], the writers every command writes to (so the
//! whole CLI can be driven in-process; the no-panic test does that). [`crate::commands`] parses
//! and dispatches.

use std::io::Write;

use camino::Utf8PathBuf;
use clap::{Args, Parser, Subcommand, ValueEnum};

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
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
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
    /// Compare two runs step by step: status, summary, output, tool calls, tokens, cost, time
    Diff(DiffArgs),
    /// Turn a workflow into a CI workflow with one job per step
    Export(ExportArgs),
    /// Remove the worktrees and `runner/*` branches that finished runs left (--dry-run first)
    Clean(CleanArgs),
    /// List recorded runs, newest first: id, workflow, status, start, duration, cost
    Runs(RunsArgs),
    /// Show a recorded run, or one step of it as a readable transcript
    Show(ShowArgs),
    /// Check a recorded run against its plan and the rules: refused tools and paths, sandbox
    /// refusals, deletions, repeated calls, retry storms, models and costs off the plan, skipped
    /// checks
    Audit(AuditArgs),
    /// Write a recorded run as one self-contained HTML page: graph, timeline, costs, transcripts
    Report(ReportArgs),
    /// Gather the records a pipeline's jobs left (their state copied into one directory) into
    /// one run: the last job of an exported pipeline
    Gather(GatherArgs),
    /// List the models runner knows: list prices, context windows, and the source and its date
    Models(ModelsArgs),
    /// MCP servers: `mcp list WORKFLOW` starts a workflow's servers and lists their tools
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell
    Completions(CompletionsArgs),
    /// Print the manual page (roff), of runner or of one command: `runner man | man -l -`
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete in
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// A command whose page to print (`runner-run(1)` for `run`) [default: runner(1)]
    pub(crate) command: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// Start the MCP servers the workflow's steps use and list their tools
    List(McpListArgs),
}

#[derive(Debug, Args)]
pub(crate) struct McpListArgs {
    /// The workflow file
    pub(crate) workflow: Utf8PathBuf,
    #[command(flatten)]
    pub(crate) resolve: ResolveArgs,
}

/// Flags that shape how a workflow resolves, shared by every command that reads one.
#[derive(Debug, Args, Clone, Default)]
pub(crate) struct ResolveArgs {
    /// Set an input: NAME=VALUE, or NAME=@FILE to read the value from a file (repeatable)
    #[arg(short = 'i', long = "input", value_name = "NAME=VALUE")]
    pub(crate) inputs: Vec<String>,
    /// Override a model alias for this run: ALIAS=provider/model (repeatable)
    #[arg(long = "model", value_name = "ALIAS=MODEL")]
    pub(crate) models: Vec<String>,
    /// Look for agents here first (repeatable; earlier wins)
    #[arg(long = "agents-dir", value_name = "DIR")]
    pub(crate) agents_dirs: Vec<Utf8PathBuf>,
    /// The directory steps work in [default: current directory]
    #[arg(long, value_name = "DIR")]
    pub(crate) workdir: Option<Utf8PathBuf>,
    /// `off` runs bash without its kernel sandbox (Landlock, no network), on purpose
    #[arg(long, value_enum, default_value_t, value_name = "on|off")]
    pub(crate) sandbox: SandboxSetting,
    /// Trust the working directory's agent files (.claude/agents/) and MCP servers (.mcp.json)
    #[arg(long)]
    pub(crate) trust_workdir: bool,
}

/// How much runs at once, shared by `run` and `plan`.
#[derive(Debug, Args, Clone, Copy, Default)]
pub(crate) struct LimitArgs {
    /// Steps running at once (overrides the file's max_parallel)
    #[arg(long, value_name = "N")]
    pub(crate) max_parallel: Option<u32>,
    /// Subagents (`task`) running at once across the run (overrides the file's max_subagents)
    #[arg(long, value_name = "N")]
    pub(crate) max_subagents: Option<u32>,
    /// The run's cost ceiling in USD (overrides the file's max_cost_usd): `run` refuses to start
    /// when the forecast's high passes it, and stops starting requests when the run reaches it
    #[arg(long, value_name = "USD")]
    pub(crate) max_cost: Option<f64>,
    /// What a step with no history counts as against the cost ceiling before the run:
    /// `allow` starts the run (the default), `refuse` does not (overrides the file's
    /// unknown_cost)
    #[arg(long, value_enum, value_name = "allow|refuse")]
    pub(crate) unknown_cost: Option<UnknownCostArg>,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum UnknownCostArg {
    Allow,
    Refuse,
}

impl From<UnknownCostArg> for crate::workflow::UnknownCost {
    fn from(arg: UnknownCostArg) -> Self {
        match arg {
            UnknownCostArg::Allow => Self::Allow,
            UnknownCostArg::Refuse => Self::Refuse,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum, Default, PartialEq, Eq)]
pub(crate) enum SandboxSetting {
    #[default]
    On,
    Off,
}

#[derive(Debug, Clone, Copy, ValueEnum, Default, PartialEq, Eq)]
pub(crate) enum Format {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum, Default, PartialEq, Eq)]
pub(crate) enum RunFormat {
    #[default]
    Text,
    Json,
    Jsonl,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The workflow file (.toml, .yaml or .yml)
    pub(crate) workflow: Utf8PathBuf,
    #[command(flatten)]
    pub(crate) resolve: ResolveArgs,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
    /// Run only this step (or one fan-out instance, `X[1]`), taking its needs from --resume (repeatable)
    #[arg(long, value_name = "STEP")]
    pub(crate) only: Vec<String>,
    /// Print the plan and stop; no model is called
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Where runs are recorded [default: <workdir>/.runner]
    #[arg(long, value_name = "DIR")]
    pub(crate) state_dir: Option<Utf8PathBuf>,
    /// Reuse the successful steps of an earlier run (a run id, or `latest`)
    #[arg(long, value_name = "RUN_ID")]
    pub(crate) resume: Option<String>,
    /// With --resume: continue each step that did not succeed from its last turn (its
    /// conversation, its branch's work) instead of starting it again
    #[arg(long = "continue", requires = "resume")]
    pub(crate) continue_steps: bool,
    /// Name the run (e.g. the CI run's id); steps other jobs recorded under it are reused
    #[arg(long, value_name = "ID", conflicts_with = "resume")]
    pub(crate) run_id: Option<String>,
    /// Output format: `text` for people, `json` (run.json at the end) or `jsonl` (one event per
    /// line as it happens) for programs
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: RunFormat,
    /// Write a JUnit XML report here
    #[arg(long, value_name = "FILE")]
    pub(crate) junit: Option<Utf8PathBuf>,
    /// Keep every model exchange as cassettes in DIR, for `--replay`
    #[arg(long, value_name = "DIR", conflicts_with = "replay")]
    pub(crate) record: Option<Utf8PathBuf>,
    /// Answer model requests from the cassettes in DIR: no network, no key
    #[arg(long, value_name = "DIR")]
    pub(crate) replay: Option<Utf8PathBuf>,
    /// With --replay: a request that differs from its recording fails its step (by default it
    /// is answered and reported as drift)
    #[arg(long, requires = "replay")]
    pub(crate) replay_strict: bool,
    /// USD across every run of the state directory in the last 24 hours: refuse to start past
    /// it, and start no more steps once it is crossed (instead of `[budget] daily_usd`)
    #[arg(long, value_name = "USD", value_parser = usd)]
    pub(crate) daily_budget: Option<f64>,
    /// No live progress on stderr (warnings, such as a replay's drift, are still printed)
    #[arg(long)]
    pub(crate) no_progress: bool,
    /// Do not print the answers of the steps no other step needs after the table
    #[arg(long, short = 'q')]
    pub(crate) quiet: bool,
    /// Stop starting steps after the first failure and cancel running ones
    #[arg(long, conflicts_with = "keep_going")]
    pub(crate) fail_fast: bool,
    /// Keep running independent steps after a failure (the default)
    #[arg(long)]
    pub(crate) keep_going: bool,
}

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// The workflow file (.toml, .yaml or .yml)
    pub(crate) workflow: Utf8PathBuf,
    #[command(flatten)]
    pub(crate) resolve: ResolveArgs,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
    /// Where earlier runs are recorded, whose durations give the critical path and the ETA
    /// [default: <workdir>/.runner]
    #[arg(long, value_name = "DIR")]
    pub(crate) state_dir: Option<Utf8PathBuf>,
    /// Output format: `text` for people, `json` for programs
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
}

#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// Workflow files to check
    #[arg(required = true)]
    pub(crate) workflows: Vec<Utf8PathBuf>,
    /// Inputs are optional here: without them, required inputs are not checked
    #[command(flatten)]
    pub(crate) resolve: ResolveArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum, Default)]
pub(crate) enum GraphFormat {
    #[default]
    Mermaid,
    Dot,
}

#[derive(Debug, Args)]
pub(crate) struct GraphArgs {
    /// The workflow file (.toml, .yaml or .yml)
    pub(crate) workflow: Utf8PathBuf,
    #[command(flatten)]
    pub(crate) resolve: ResolveArgs,
    /// Diagram language
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: GraphFormat,
}

#[derive(Debug, Args)]
pub(crate) struct AgentsArgs {
    /// Also list the agents in this workflow's `agents/` folder
    #[arg(long, value_name = "FILE")]
    pub(crate) workflow: Option<Utf8PathBuf>,
    /// Look for agents here first (repeatable; earlier wins)
    #[arg(long = "agents-dir", value_name = "DIR")]
    pub(crate) agents_dirs: Vec<Utf8PathBuf>,
    /// The directory whose `.claude/agents/` is searched [default: current directory]
    #[arg(long, value_name = "DIR")]
    pub(crate) workdir: Option<Utf8PathBuf>,
    /// Trust the working directory's agent files (.claude/agents/)
    #[arg(long)]
    pub(crate) trust_workdir: bool,
    /// Output format: `text` for people, `json` for programs
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum SchemaKind {
    Workflow,
    Agent,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ExportTarget {
    /// A GitHub Actions workflow
    GithubActions,
    /// A GitLab CI pipeline (`.gitlab-ci.yml`)
    GitlabCi,
    /// An Argo Workflows `Workflow`
    Argo,
}

#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// What to export to
    pub(crate) target: ExportTarget,
    /// The workflow file, as a path relative to the repository root
    pub(crate) workflow: Utf8PathBuf,
    /// Write here instead of stdout (e.g. .github/workflows/agents.yml)
    #[arg(long, short = 'o', value_name = "FILE")]
    pub(crate) output: Option<Utf8PathBuf>,
    /// The shell command that installs runner, run once in a first job whose binary the others
    /// reuse [default: this version's release archive, its SHA-256 checked; before it is
    /// released, this runner's repository at the commit it was built from]
    #[arg(long, value_name = "COMMAND", conflicts_with_all = ["release_url", "release_sha256"])]
    pub(crate) install: Option<String>,
    /// Where the release archives are downloaded from, as `URL/v<version>/<archive>`: a mirror
    /// (https, http) or a folder (file://) [default: the GitHub release]
    #[arg(long, value_name = "URL")]
    pub(crate) release_url: Option<String>,
    /// The SHA-256 of a target's release archive, TARGET=SHA256 (repeatable): for a mirror of
    /// a build of your own; replaces the table this runner was built with
    #[arg(long, value_name = "TARGET=SHA256", value_parser = crate::export::release::parse_sha256)]
    pub(crate) release_sha256: Vec<(String, String)>,
    /// Every job answers the model's side from these cassettes (a path in the repository): the
    /// pipeline needs no API key
    #[arg(long, value_name = "DIR")]
    pub(crate) replay: Option<Utf8PathBuf>,
    /// The container image every job runs in [default for GitLab and Argo:
    /// docker.io/library/rust:1-bookworm; GitHub: none, the runner's own machine]; `none` names
    /// no image (a GitLab shell executor)
    #[arg(long, value_name = "IMAGE")]
    pub(crate) image: Option<String>,
    #[command(flatten)]
    pub(crate) resolve: ResolveArgs,
}

#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    /// The earlier run: a run id (or `latest`) in the state directory, a run directory, or a
    /// run.json file
    pub(crate) run_a: String,
    /// The later run, the same ways
    pub(crate) run_b: String,
    /// Where runs are recorded [default: ./.runner]
    #[arg(long, value_name = "DIR")]
    pub(crate) state_dir: Option<Utf8PathBuf>,
    /// Output format: `text` for people, `json` for programs
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
}

#[derive(Debug, Args)]
pub(crate) struct CleanArgs {
    /// Say what would be removed, and remove nothing
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Also remove worktrees with uncommitted changes and branches with commits not pushed
    /// anywhere
    #[arg(long)]
    pub(crate) force: bool,
    /// The repository's working directory [default: current directory]
    #[arg(long, value_name = "DIR")]
    pub(crate) workdir: Option<Utf8PathBuf>,
    /// Where runs are recorded [default: <workdir>/.runner]: a run still going is left alone
    #[arg(long, value_name = "DIR")]
    pub(crate) state_dir: Option<Utf8PathBuf>,
}

/// Where the recorded runs are, for the commands that read them.
#[derive(Debug, Args)]
pub(crate) struct RunDirs {
    /// The working directory whose runs to read [default: current directory]
    #[arg(long, value_name = "DIR")]
    pub(crate) workdir: Option<Utf8PathBuf>,
    /// Where runs are recorded [default: <workdir>/.runner]
    #[arg(long, value_name = "DIR")]
    pub(crate) state_dir: Option<Utf8PathBuf>,
}

impl RunDirs {
    /// The state directory, the run `which` names there (`latest` by default) and its
    /// directory; or the error to print (`show`, `report`). A named run this user did not
    /// record is read all the same, `warn` told so.
    pub(crate) fn recorded_run(
        &self,
        which: Option<&str>,
        warn: &mut dyn Write,
    ) -> Result<(Utf8PathBuf, crate::record::RunRecord, Utf8PathBuf), String> {
        let (_, state_dir) =
            crate::run::directories(self.workdir.as_deref(), self.state_dir.as_deref());
        let record =
            crate::run::load_resume(&state_dir, which.unwrap_or("latest")).map_err(|problem| {
                let message = problem.message.replacen("--resume ", "", 1);
                match &problem.help {
                    Some(help) => {
                        format!("{message}\n  help: {}", help.replacen("--resume ", "", 1))
                    }
                    None => message,
                }
            })?;
        if let Some(warning) = crate::run::records::not_yours(&record) {
            let _ = writeln!(warn, "warning: {warning}");
        }
        let run_dir = state_dir.join("runs").join(&record.run_id);
        Ok((state_dir, record, run_dir))
    }
}

#[derive(Debug, Args)]
pub(crate) struct RunsArgs {
    #[command(flatten)]
    pub(crate) dirs: RunDirs,
    /// Say what is left of this daily budget (USD) after the last 24 hours' spend
    #[arg(long, value_name = "USD", value_parser = usd)]
    pub(crate) daily_budget: Option<f64>,
    /// `text` for people, `json` for programs
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
}

#[derive(Debug, Args)]
pub(crate) struct ModelsArgs {
    /// Only the models whose `provider/model` contains this (any case), e.g. `opus`
    pub(crate) filter: Option<String>,
    /// `text` for people, `json` for programs
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// The run: an id, or `latest` (the default)
    pub(crate) run: Option<String>,
    /// One step of it (an instance as `X[0]`), shown turn by turn
    pub(crate) step: Option<String>,
    #[command(flatten)]
    pub(crate) dirs: RunDirs,
    /// `text` for people, `json` for programs
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
}

#[derive(Debug, Args)]
pub(crate) struct GatherArgs {
    /// The workflow file the jobs ran
    pub(crate) workflow: Utf8PathBuf,
    /// The run the jobs shared: the `--run-id` of their `runner run`
    #[arg(long, value_name = "ID")]
    pub(crate) run_id: String,
    /// Where the jobs' records were copied [default: <workdir>/.runner]
    #[arg(long, value_name = "DIR")]
    pub(crate) state_dir: Option<Utf8PathBuf>,
    #[command(flatten)]
    pub(crate) resolve: ResolveArgs,
}

#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// The run: an id, `latest` (the default), or its folder (`.runner/runs/<id>`)
    pub(crate) run: Option<String>,
    #[command(flatten)]
    pub(crate) dirs: RunDirs,
    /// Exit 1 when a finding is at this level or above (for CI); without it, 0 whatever is found
    #[arg(long, value_enum, value_name = "high|medium|low")]
    pub(crate) fail_on: Option<crate::audit::Severity>,
    /// `text` for people, `json` for programs
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
}

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// The run: an id, or `latest` (the default)
    pub(crate) run: Option<String>,
    /// The HTML file to write
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "report.html"
    )]
    pub(crate) output: Utf8PathBuf,
    /// An earlier run to compare with (an id, `latest`, a run directory or a run.json file)
    #[arg(long, value_name = "RUN")]
    pub(crate) baseline: Option<String>,
    #[command(flatten)]
    pub(crate) dirs: RunDirs,
}

#[derive(Debug, Args)]
pub(crate) struct SchemaArgs {
    /// Which schema
    pub(crate) kind: SchemaKind,
}

/// What the commands write to; stdout for results, stderr for diagnostics and progress.
pub struct Io<'a> {
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
    pub color: bool,
}

/// A dollar amount of a flag: a number, not negative (`5`, `0.50`; a leading `$` is allowed).
fn usd(text: &str) -> Result<f64, String> {
    let number = text.trim().trim_start_matches('$');
    match number.parse::<f64>() {
        Ok(usd) if usd.is_finite() && usd >= 0.0 => Ok(usd),
        _ => Err(format!(
            "`{text}` is not an amount of USD: give a number such as `5` or `0.50`"
        )),
    }
}
