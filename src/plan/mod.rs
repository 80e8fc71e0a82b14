//! From a loaded workflow to a sealed plan: every step's agent, model, tools, limits and rendered
//! prompt resolved, the graph checked and cut into waves. Every problem is collected; a plan
//! exists only when there are no errors.

pub mod critical;
pub mod forecast;
pub mod graph;
pub mod render;
mod settings;
mod step;
mod step_settings;
mod templates;
mod tools_check;
mod typing;
pub mod verified;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use camino::{Utf8Path, Utf8PathBuf};
use minijinja::Value as JinjaValue;
use serde_json::Value;

use crate::agent::{Agent, AgentCatalog, AgentSource, builtin};
use crate::error::{Problem, closest, did_you_mean};
use crate::path;
use crate::provider::known::{PriceSource, Prices};
use crate::provider::{ModelRef, ProviderSpec, providers_for};
use crate::template::{self, Placeholder, STEP_FIELDS};
use crate::tools::{self, Registry, ToolEntry, ToolSet};
use crate::workflow::duration::parse_duration;
use crate::workflow::source::{Seg, SourceFile};
use crate::workflow::{Isolation, LoadedWorkflow, Step};
use graph::StepGraph;
pub use step_settings::{DEFAULT_KEEP_TOOL_RESULTS, StepSettings};

pub const DEFAULT_MAX_PARALLEL: u32 = 4;
pub const DEFAULT_MAX_TURNS: u32 = 50;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
pub const DEFAULT_RETRIES: u32 = 4;
pub const DEFAULT_MAX_SUBAGENTS: u32 = 8;
pub const DEFAULT_MAX_SUBAGENTS_PER_STEP: u32 = 32;
pub const DEFAULT_SUBAGENT_DEPTH: u32 = 1;
pub const DEFAULT_CHECK_RETRIES: u32 = 2;
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(10 * 60);
pub const DEFAULT_MAX_INSTANCES: u32 = 256;

/// What the command line adds to a workflow.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    /// `--input NAME=VALUE` values, in order given.
    pub inputs: Vec<(String, String)>,
    /// `--model ALIAS=provider/model`.
    pub models: Vec<(String, String)>,
    pub max_parallel: Option<u32>,
    /// When false (`validate` without inputs), missing required inputs are not errors and
    /// render as placeholders.
    pub require_inputs: bool,
    /// `--sandbox off`: bash runs unconfined.
    pub sandbox_off: bool,
    /// `--max-subagents`.
    pub max_subagents: Option<u32>,
    /// `--max-cost`: the run's cost ceiling, over `[budget] max_cost_usd`.
    pub max_cost_usd: Option<f64>,
    /// `--unknown-cost`, over `[budget] unknown_cost`.
    pub unknown_cost: Option<crate::workflow::UnknownCost>,
    /// `--trust-workdir`.
    pub trust_workdir: bool,
    /// The project's `.mcp.json` servers, when the working directory is trusted (else empty):
    /// what an agent file's `mcpServers: [name]` may name besides the workflow's.
    pub project_mcp: BTreeMap<String, crate::workflow::McpServerDef>,
    /// The project memory file at the working directory's root (`CLAUDE.md`, else
    /// `AGENTS.md`), if there is one: what `plan` says each step gets.
    pub project_memory: Option<&'static str>,
}

/// A sealed plan: everything a run needs, with nothing left to resolve. Only [`build_plan`]
/// makes one, from a graph it checked; the steps and their edges cannot change afterwards, and a
/// run walks these edges (by index), never rebuilding them from names.
#[derive(Debug, Clone)]
pub struct Plan {
    pub name: String,
    pub description: Option<String>,
    pub file: Utf8PathBuf,
    pub max_parallel: u32,
    /// Subagents running at once, across the run.
    pub max_subagents: u32,
    /// Subagents one step may have unfinished at once.
    pub max_subagents_per_step: u32,
    /// `[budget] max_tokens`.
    pub max_tokens: Option<u64>,
    /// `--max-cost`, else `[budget] max_cost_usd`.
    pub max_cost_usd: Option<f64>,
    /// Whether `max_cost_usd` is `--max-cost`'s: messages name the ceiling as the user set it.
    pub max_cost_from_flag: bool,
    /// `--unknown-cost`, else `[budget] unknown_cost`: whether a step with no history counts
    /// as over the cost ceiling before the run (docs/src/budgets.md "Cost before you pay").
    pub unknown_cost: crate::workflow::UnknownCost,
    /// `[budget] daily_usd` (docs/src/budgets.md "Daily budget").
    pub daily_usd: Option<f64>,
    /// How its models are priced: `[prices]`, then LiteLLM's map.
    pub prices: Prices,
    pub inputs: BTreeMap<String, String>,
    pub providers: BTreeMap<String, ProviderSpec>,
    /// Model aliases, resolved (`--model` applied): subagents pick their models with them.
    pub aliases: BTreeMap<String, ModelRef>,
    /// How far the working directory's own agent files and MCP servers are trusted
    /// (`--trust-workdir` and the workflow's keys).
    pub workdir_trust: crate::agent::WorkdirTrust,
    /// Step ids, sorted within each wave.
    waves: Vec<Vec<String>>,
    /// In wave order, then by id.
    steps: Vec<PlannedStep>,
    /// Each step's needs, as indexes into `steps`.
    needs: Vec<Vec<usize>>,
    /// Each step's place in the workflow file (0 for the first step declared): the tie-break of
    /// the scheduler's order (docs/src/runs.md "The order steps start in").
    declared: Vec<usize>,
    index: std::collections::HashMap<String, usize>,
}

impl Plan {
    /// The steps, in wave order, then by id.
    pub fn steps(&self) -> &[PlannedStep] {
        &self.steps
    }

    /// Step ids, wave by wave, sorted within each wave.
    pub fn waves(&self) -> &[Vec<String>] {
        &self.waves
    }

    pub fn step(&self, id: &str) -> Option<&PlannedStep> {
        self.index_of(id).map(|i| &self.steps[i])
    }

    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    /// The steps step `i` needs, as indexes into [`Plan::steps`].
    pub fn needs_of(&self, i: usize) -> &[usize] {
        self.needs.get(i).map_or(&[], Vec::as_slice)
    }

    /// Step `i`'s place in the workflow file, 0 for the first declared.
    pub fn declared(&self, i: usize) -> usize {
        self.declared.get(i).copied().unwrap_or(i)
    }

    /// Lowers `max_parallel` (a flag given after planning, as `--max-parallel`).
    pub fn set_max_parallel(&mut self, max_parallel: u32) {
        self.max_parallel = max_parallel;
    }
}

#[derive(Debug, Clone)]
pub struct PlannedStep {
    pub id: String,
    pub description: Option<String>,
    pub agent: String,
    pub agent_source: AgentSource,
    pub system_prompt: String,
    /// `None` for a command step, which asks no model.
    pub model: Option<ModelRef>,
    pub tools: BTreeSet<String>,
    pub needs: Vec<String>,
    pub prompt_template: String,
    /// The prompt with inputs filled in and upstream results as `<steps.x.summary>`.
    pub prompt: String,
    /// The keys it shares with `[defaults]`, resolved (what `--resume` fingerprints).
    pub settings: StepSettings,
    pub condition: Option<String>,
    pub output_schema: Option<Value>,
    pub continue_on_error: bool,
    pub isolation: Isolation,
    /// What the step's `bash` may write, from its tools (or `--sandbox off`).
    pub sandbox: crate::sandbox::Mode,
    /// The project memory file its agent (and subagents) get: `CLAUDE.md` or `AGENTS.md` at
    /// the root of its working directory, unless `project_memory = false`, its agent's
    /// `omitClaudeMd`, or a command step. `Some` names the file found when planning.
    pub project_memory: Option<&'static str>,
    /// Agents its `task` tool may spawn (empty without `task`).
    pub subagents: Vec<String>,
    /// The MCP servers its tools come from, by name.
    pub mcp_servers: BTreeMap<String, crate::workflow::McpServerDef>,
    /// A command step's shell text (`run`); `None` for an agent step.
    pub command: Option<String>,
    /// Commands that must pass after the agent's final answer.
    pub checks: Vec<Check>,
    /// How many times a failed check goes back to the agent.
    pub check_retries: u32,
    /// One instance per item of a list, when set.
    pub for_each: Option<ForEach>,
    pub wave: usize,
    /// Its agent's `effort`, sent with each request.
    pub effort: Option<crate::provider::message::Effort>,
    /// Its agent's `permissionMode` (what `plan` shows; `plan` mode has narrowed `tools`).
    pub permission_mode: crate::agent::PermissionMode,
    /// Its agent's persistent memory, when it has one: the scope, and the agent's name (the
    /// folder's).
    pub agent_memory: Option<crate::agent::MemoryScope>,
}

impl Plan {
    /// What a model costs and where the price comes from (`[prices]`, else LiteLLM's map).
    pub fn price_of(&self, model: &str) -> Option<(crate::workflow::Price, PriceSource)> {
        self.prices.of(model)
    }
}

impl PlannedStep {
    /// `provider/model`, or `-` for a command step.
    pub fn model_label(&self) -> String {
        self.model
            .as_ref()
            .map_or_else(|| "-".to_owned(), ToString::to_string)
    }
}

/// One check of a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub command: String,
    pub timeout: Duration,
}

/// A step's fan-out.
#[derive(Debug, Clone)]
pub struct ForEach {
    /// The list: an expression evaluated when the step is ready, or items written out.
    pub source: ForEachSource,
    /// The item field naming each instance.
    pub key: Option<String>,
    pub max_instances: u32,
    /// The items, when the plan knows them (literals, inputs).
    pub known: Option<Vec<Value>>,
}

#[derive(Debug, Clone)]
pub enum ForEachSource {
    Expression(String),
    Items(Vec<Value>),
}

/// Why a model's text names no model (see [`resolve_model`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// It has a `/` but not the `provider/model` shape (`anthropic/`).
    NotAModel,
    /// `provider/model` of a provider the workflow does not have.
    UnknownProvider(String),
    /// An alias the workflow does not define (after `small` and `plan` fell back to `default`).
    UndefinedAlias,
}

/// The one rule that turns a model's text into a model, for steps (`plan`) and subagents
/// (`task`): `provider/model` of a known provider, else an alias (`small` and `plan` fall back
/// to `default`), else a model id the model map knows (`claude-opus-4-6`) on its provider.
/// docs/src/models.md. Each caller says what a miss means where it is.
pub fn resolve_model(
    text: &str,
    aliases: &BTreeMap<String, ModelRef>,
    providers: &BTreeMap<String, ProviderSpec>,
) -> Result<ModelRef, Unresolved> {
    if text.contains('/') {
        let model = ModelRef::parse(text).ok_or(Unresolved::NotAModel)?;
        if !providers.contains_key(&model.provider) {
            return Err(Unresolved::UnknownProvider(model.provider));
        }
        return Ok(model);
    }
    if let Some(model) = lookup_alias(aliases, text) {
        return Ok(model.clone());
    }
    // A full model id as Claude Code's agent files write it (`model: claude-opus-4-6`): the
    // provider the model map lists it under, when the workflow has that provider. An alias of
    // the same name wins.
    crate::provider::known::entry(text)
        .map(|entry| entry.litellm_provider.as_str())
        .filter(|provider| providers.contains_key(*provider))
        .map(|provider| ModelRef {
            provider: provider.to_owned(),
            model: text.to_owned(),
        })
        .ok_or(Unresolved::UndefinedAlias)
}

/// A model alias as steps and subagents resolve it: its own definition, or for `small` and
/// `plan` (the built-in agents' aliases) the `default` one.
pub fn lookup_alias<'a>(
    aliases: &'a BTreeMap<String, ModelRef>,
    alias: &str,
) -> Option<&'a ModelRef> {
    aliases.get(alias).or_else(|| {
        matches!(alias, "small" | "plan")
            .then(|| aliases.get("default"))
            .flatten()
    })
}

// Over 80 lines: the planning passes in their order, each a call; what flows between them is local
// state.
/// Builds the plan. Warnings come back either way; the plan only when there is no error.
pub fn build_plan(
    loaded: &LoadedWorkflow,
    catalog: &AgentCatalog,
    registry: &Registry,
    options: &PlanOptions,
) -> (Option<Plan>, Vec<Problem>) {
    let mut b = Builder {
        loaded,
        registry,
        project_mcp: &options.project_mcp,
        sandbox_off: options.sandbox_off,
        project_memory: options.project_memory,
        catalog,
        file: &loaded.file,
        problems: loaded.problems.clone(),
        missing_aliases: BTreeMap::new(),
    };
    let def = &loaded.def;

    let providers = b.check_providers();
    b.check_mcp_servers();
    let aliases = b.check_models(&providers, options);
    let inputs = b.check_inputs(options);

    let ids: Vec<&String> = def.steps.keys().collect();
    let index: BTreeMap<&str, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    let mut needs_idx: Vec<Vec<usize>> = Vec::with_capacity(ids.len());
    for (id, step) in &def.steps {
        b.check_id(id);
        needs_idx.push(b.check_needs(id, step, &index));
    }
    let graph = StepGraph::new(&needs_idx);
    let cycles = graph.cycles();
    for cycle in &cycles {
        b.report_cycle(cycle, &ids);
    }

    // Every schema first: a step's templates are typed by the schemas of the steps before it.
    let step_list: Vec<&Step> = def.steps.values().collect();
    let schemas: Vec<Option<Value>> = def
        .steps
        .iter()
        .map(|(id, step)| {
            let schema = step.output_schema.as_ref()?;
            b.load_output_schema(id, schema)
        })
        .collect();
    // Waves once: they order the sealed plan and bound the ancestry walks of typed templates.
    let waves_idx = graph.waves();
    let wave_of = waves_idx
        .as_ref()
        .map(|w| graph::wave_of(w, ids.len()))
        .unwrap_or_default();
    let env = template::environment();
    let mut resolved: Vec<Option<PlannedStep>> = Vec::with_capacity(ids.len());
    for (i, (id, step)) in def.steps.iter().enumerate() {
        let ctx = StepCtx {
            id,
            index: i,
            graph: (cycles.is_empty()).then_some(&graph),
            steps_index: &index,
            ids: &ids,
            steps: &step_list,
            schemas: &schemas,
            wave_of: &wave_of,
            item: None,
        };
        resolved.push(b.resolve_step(&ctx, step, catalog, &aliases, &providers, &inputs, &env));
    }
    if def.steps.is_empty() && !loaded.broken_sections.contains("steps") {
        let span = loaded.tree.key_or_value_span(&path!["steps"]);
        b.problems.push(
            Problem::error("the workflow has no steps")
                .at(b.file, span, "no steps here")
                .help("add a step: `[steps.first]` with `agent` and `prompt`"),
        );
    }
    if def.name.trim().is_empty() && loaded.tree.get("name").is_some() {
        let span = loaded.tree.best_span(&path!["name"]);
        b.problems
            .push(Problem::error("`name` must not be empty").at(b.file, span, "empty name"));
    }

    let max_parallel = options
        .max_parallel
        .or(def.max_parallel)
        .unwrap_or(DEFAULT_MAX_PARALLEL);
    if max_parallel == 0 {
        b.problems
            .push(Problem::error("`--max-parallel` must be at least 1"));
    }
    if options.max_subagents == Some(0) {
        b.problems
            .push(Problem::error("`--max-subagents` must be at least 1"));
    }

    b.report_missing_aliases();
    if options
        .max_cost_usd
        .is_some_and(|usd| !(usd.is_finite() && usd >= 0.0))
    {
        b.problems.push(Problem::error(
            "`--max-cost` must be a number of USD, 0 or more (e.g. `--max-cost 2.50`)",
        ));
    }
    let prices = b.check_prices(&providers, &resolved, options.max_cost_usd.is_some());
    if cycles.is_empty() {
        b.warn_concurrent_writers(&graph, &ids, &resolved);
    }
    let problems = b.problems;
    if problems.iter().any(Problem::is_error) {
        return (None, problems);
    }
    let Some(waves_idx) = waves_idx else {
        return (None, problems);
    };

    // Seal: steps in wave order (by id within a wave), and the graph's edges carried over to
    // those positions.
    let mut waves = Vec::with_capacity(waves_idx.len());
    let mut steps = Vec::with_capacity(ids.len());
    let mut position = vec![usize::MAX; ids.len()];
    for (w, wave) in waves_idx.iter().enumerate() {
        let mut wave_steps: Vec<(usize, PlannedStep)> = wave
            .iter()
            .filter_map(|&i| resolved.get_mut(i).and_then(Option::take).map(|s| (i, s)))
            .map(|(i, mut s)| {
                s.wave = w;
                (i, s)
            })
            .collect();
        wave_steps.sort_by(|a, b| a.1.id.cmp(&b.1.id));
        waves.push(wave_steps.iter().map(|(_, s)| s.id.clone()).collect());
        for (i, step) in wave_steps {
            position[i] = steps.len();
            steps.push(step);
        }
    }
    // The file's order: `def.steps` is sorted by id once it has passed through JSON, the
    // parsed tree keeps the keys as written.
    let written: BTreeMap<&str, usize> = match loaded.tree.get("steps").map(|n| &n.value) {
        Some(crate::workflow::source::Node::Map(entries)) => entries
            .keys()
            .enumerate()
            .map(|(k, id)| (id.as_str(), k))
            .collect(),
        _ => BTreeMap::new(),
    };
    let mut declared = vec![0; steps.len()];
    for (original, &at) in position.iter().enumerate() {
        if let Some(slot) = declared.get_mut(at) {
            *slot = written
                .get(ids[original].as_str())
                .copied()
                .unwrap_or(written.len() + original);
        }
    }
    let mut needs = vec![Vec::new(); steps.len()];
    for (original, edges) in needs_idx.iter().enumerate() {
        if let Some(slot) = needs.get_mut(position[original]) {
            *slot = edges.iter().map(|&n| position[n]).collect();
        }
    }
    let index: std::collections::HashMap<String, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.clone(), i))
        .collect();
    let plan = Plan {
        name: def.name.clone(),
        description: def.description.clone(),
        file: loaded.file.name.clone(),
        max_parallel,
        max_subagents_per_step: def
            .max_subagents_per_step
            .unwrap_or(DEFAULT_MAX_SUBAGENTS_PER_STEP)
            .max(1),
        max_subagents: options
            .max_subagents
            .or(def.max_subagents)
            .unwrap_or(DEFAULT_MAX_SUBAGENTS),
        max_tokens: def.budget.as_ref().and_then(|b| b.max_tokens),
        max_cost_usd: options
            .max_cost_usd
            .or(def.budget.as_ref().and_then(|b| b.max_cost_usd)),
        max_cost_from_flag: options.max_cost_usd.is_some(),
        unknown_cost: options
            .unknown_cost
            .or(def.budget.as_ref().and_then(|b| b.unknown_cost))
            .unwrap_or_default(),
        daily_usd: def.budget.as_ref().and_then(|b| b.daily_usd),
        prices,
        aliases,
        workdir_trust: crate::agent::WorkdirTrust::new(options.trust_workdir, Some(def)),
        inputs: inputs
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect(),
        waves,
        steps,
        needs,
        declared,
        index,
        providers,
    };
    (Some(plan), problems)
}

struct Builder<'a> {
    loaded: &'a LoadedWorkflow,
    registry: &'a Registry,
    project_mcp: &'a BTreeMap<String, crate::workflow::McpServerDef>,
    sandbox_off: bool,
    project_memory: Option<&'static str>,
    /// The agents steps name: an agent file's `isolation` is its steps'.
    catalog: &'a AgentCatalog,
    file: &'a Arc<SourceFile>,
    problems: Vec<Problem>,
    /// Undefined model aliases, reported once each.
    missing_aliases: BTreeMap<String, MissingAlias>,
}

/// A model alias that is not defined.
enum MissingAlias {
    /// Its definition under `[models]` is wrong, and was reported there.
    BadDefinition,
    /// Not defined at all: reported once the plan is built, naming every step that needs it.
    Undefined {
        message: String,
        span: Range<usize>,
        label: String,
        help: String,
        others: Vec<String>,
    },
}

#[derive(Clone)]
struct StepCtx<'a> {
    id: &'a str,
    index: usize,
    /// `None` when the graph has a cycle (ancestry is then meaningless).
    graph: Option<&'a StepGraph>,
    steps_index: &'a BTreeMap<&'a str, usize>,
    /// Every step's id and definition, by index.
    ids: &'a [&'a String],
    steps: &'a [&'a Step],
    /// Every step's output schema, loaded, by index.
    schemas: &'a [Option<Value>],
    /// Every step's wave (empty when the graph has a cycle).
    wave_of: &'a [usize],
    /// The type of the step's `item`, when it fans out (`for_each`).
    item: Option<crate::template::typing::Ty>,
}

impl Builder<'_> {
    fn span(&self, path: &[Seg]) -> Range<usize> {
        self.loaded.tree.best_span(path)
    }

    fn key_span(&self, path: &[Seg]) -> Range<usize> {
        self.loaded.tree.key_or_value_span(path)
    }

    fn error(&mut self, message: String, span: Range<usize>, label: &str, help: Option<String>) {
        self.problems.push(
            Problem::error(message)
                .at(self.file, span, label)
                .with_help(help),
        );
    }

    /// Where step `id` works: its own `isolation` key when it has one, else its agent file's
    /// (`isolation: worktree`), else the working directory.
    fn isolation_of(&self, id: &str, step: &Step) -> Isolation {
        let step_sets_it = self
            .loaded
            .tree
            .find(&path!["steps", id, "isolation"])
            .is_some();
        if step_sets_it || step.run.is_some() {
            return step.isolation;
        }
        self.catalog
            .get(&step.agent)
            .and_then(|a| a.isolation)
            .unwrap_or(step.isolation)
    }

    fn error_count(&self) -> usize {
        self.problems.iter().filter(|p| p.is_error()).count()
    }
}

/// An agent step with `settings` and nothing else of note, for tests of what reads a step.
#[cfg(test)]
pub(crate) fn planned_step_for_tests(settings: StepSettings) -> PlannedStep {
    PlannedStep {
        id: "s".into(),
        description: None,
        agent: "explore".into(),
        agent_source: AgentSource::Builtin,
        system_prompt: "system".into(),
        model: ModelRef::parse("anthropic/m"),
        tools: BTreeSet::from(["read_file".to_owned()]),
        needs: Vec::new(),
        prompt_template: "p".into(),
        prompt: "p".into(),
        settings,
        condition: None,
        output_schema: None,
        continue_on_error: false,
        isolation: Isolation::None,
        sandbox: crate::sandbox::Mode::ReadOnly,
        project_memory: None,
        subagents: Vec::new(),
        mcp_servers: BTreeMap::new(),
        command: None,
        checks: Vec::new(),
        check_retries: 0,
        for_each: None,
        wave: 0,
        effort: None,
        permission_mode: Default::default(),
        agent_memory: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::load::load_workflow_source;
    use crate::workflow::source::Syntax;

    fn plan(text: &str) -> (Option<Plan>, Vec<Problem>) {
        let file = SourceFile::new("w.toml", text);
        let loaded = load_workflow_source(file, Syntax::Toml).unwrap();
        let registry = Registry::builtin();
        let catalog = AgentCatalog::load(&[], &registry);
        build_plan(&loaded, &catalog, &registry, &PlanOptions::default())
    }

    const HEAD: &str = "name = \"w\"\n[models]\ndefault = \"anthropic/m\"\n";

    /// A run's record lists its steps in the plan's order (what `show`, the report and its
    /// timeline follow), from its `needs` alone.
    #[test]
    fn a_record_reads_in_plan_order() {
        let (plan, problems) = plan(&format!(
            "{HEAD}[steps.z]\nagent = \"explore\"\nprompt = \"z\"\n[steps.b]\nagent = \"plan\"\nneeds = [\"z\"]\nprompt = \"b\"\n[steps.a]\nagent = \"explore\"\nneeds = [\"b\"]\nprompt = \"a\"\n[steps.c]\nagent = \"explore\"\nprompt = \"c\"\n[steps.d]\nagent = \"explore\"\nneeds = [\"z\", \"a\"]\nprompt = \"d\"\n"
        ));
        let plan = plan.unwrap_or_else(|| panic!("{problems:?}"));
        let record = crate::record::RunRecord::new(&plan, Some("r"));
        let planned: Vec<&str> = plan.steps().iter().map(|s| s.id.as_str()).collect();
        let recorded: Vec<&str> = record
            .in_plan_order()
            .into_iter()
            .map(|(id, _)| id.as_str())
            .collect();
        assert_eq!(planned, ["c", "z", "b", "a", "d"]);
        assert_eq!(recorded, planned);
        let leaves: Vec<&str> = record
            .leaves()
            .into_iter()
            .map(|(id, _)| id.as_str())
            .collect();
        assert_eq!(leaves, ["c", "d"]);
    }

    #[test]
    fn the_sealed_plan_keeps_the_graph_by_index() {
        let (plan, problems) = plan(&format!(
            "{HEAD}[steps.z]\nagent = \"explore\"\nprompt = \"z\"\n[steps.b]\nagent = \"plan\"\nneeds = [\"z\", \"a\"]\nprompt = \"b\"\n[steps.a]\nagent = \"explore\"\nprompt = \"a\"\n"
        ));
        let plan = plan.unwrap_or_else(|| panic!("{problems:?}"));
        let ids: Vec<&str> = plan.steps().iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["a", "z", "b"], "wave order, then id");
        assert_eq!(plan.waves(), [vec!["a", "z"], vec!["b"]]);
        let b = plan.index_of("b").unwrap();
        let mut needs: Vec<&str> = plan
            .needs_of(b)
            .iter()
            .map(|&i| plan.steps()[i].id.as_str())
            .collect();
        needs.sort();
        assert_eq!(needs, ["a", "z"]);
        assert!(plan.needs_of(plan.index_of("a").unwrap()).is_empty());
        assert_eq!(plan.step("z").unwrap().wave, 0);
        assert!(plan.step("nope").is_none());
    }

    #[test]
    fn an_undefined_alias_is_reported_once_with_every_step_that_needs_it() {
        let (plan, problems) = plan(
            "name = \"w\"\n[steps.a]\nagent = \"code\"\nprompt = \"a\"\n[steps.b]\nagent = \"code\"\nprompt = \"b\"\n[steps.c]\nagent = \"code\"\nprompt = \"c\"\n",
        );
        assert!(plan.is_none());
        let errors: Vec<&Problem> = problems.iter().filter(|p| p.is_error()).collect();
        assert_eq!(errors.len(), 1, "{problems:?}");
        assert!(
            errors[0].message.ends_with("(also needed by `b`, `c`)"),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn no_steps_is_said_once() {
        let (_, problems) = plan(HEAD);
        let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(messages, ["missing required key `steps`"]);
        let (_, problems) = plan(&format!("{HEAD}[steps]\n"));
        let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(messages, ["the workflow has no steps"]);
    }
}

#[cfg(test)]
mod render_tests {
    use super::*;
    use crate::sandbox::Support;
    use crate::workflow::load::load_workflow_source;
    use crate::workflow::source::Syntax;

    /// The plan says what this machine will enforce: without Landlock a read-only step gets no
    /// bash and a writing step's bash is not confined.
    #[test]
    fn the_plan_says_when_bash_cannot_be_confined() {
        let text = "name = \"w\"\n[models]\ndefault = \"anthropic/m\"\n[steps.r]\nagent = \"explore\"\ntools = [\"bash\"]\nprompt = \"r\"\n[steps.w]\nagent = \"code\"\nprompt = \"w\"\n";
        let loaded = load_workflow_source(SourceFile::new("w.toml", text), Syntax::Toml).unwrap();
        let registry = Registry::builtin();
        let catalog = AgentCatalog::load(&[], &registry);
        let (plan, problems) = build_plan(&loaded, &catalog, &registry, &PlanOptions::default());
        let plan = plan.unwrap_or_else(|| panic!("{problems:?}"));
        let with = Support { landlock_abi: 4 };
        let without = Support { landlock_abi: 0 };

        let confined = render::to_text(&plan, with);
        assert!(
            confined.contains("sandbox  read-only, no network\n"),
            "{confined}"
        );
        assert!(
            confined.contains("sandbox  workdir, no network\n"),
            "{confined}"
        );
        let open = render::to_text(&plan, without);
        assert!(
            open.contains(
                "read-only, no network (this kernel has no Landlock, so the step gets no bash)"
            ),
            "{open}"
        );
        assert!(
            open.contains("workdir, no network (this kernel has no Landlock: bash can write anywhere this user can)"),
            "{open}"
        );

        let json = |support| -> serde_json::Value {
            serde_json::from_str(&render::to_json(&plan, support)).unwrap()
        };
        let confined: Vec<_> = json(with)["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["bash_confined"].clone())
            .collect();
        assert_eq!(confined, [true, true]);
        let open: Vec<_> = json(without)["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["bash_confined"].clone())
            .collect();
        assert_eq!(open, [false, false]);
    }
}
