//! From a loaded workflow to a sealed plan: every step's agent, model, tools, limits and rendered
//! prompt resolved, the graph checked and cut into waves. Every problem is collected; a plan
//! exists only when there are no errors.

pub mod graph;
pub mod render;

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
use crate::provider::{ModelRef, ProviderSpec, providers_for};
use crate::template::{self, Placeholder, STEP_FIELDS};
use crate::tools::{self, Registry, ToolEntry, ToolSet};
use crate::workflow::duration::parse_duration;
use crate::workflow::source::{Seg, SourceFile};
use crate::workflow::{Isolation, LoadedWorkflow, Step};
use graph::StepGraph;

pub const DEFAULT_MAX_PARALLEL: u32 = 4;
pub const DEFAULT_MAX_TURNS: u32 = 50;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
pub const DEFAULT_RETRIES: u32 = 4;

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
    pub inputs: BTreeMap<String, String>,
    pub providers: BTreeMap<String, ProviderSpec>,
    /// Step ids, sorted within each wave.
    waves: Vec<Vec<String>>,
    /// In wave order, then by id.
    steps: Vec<PlannedStep>,
    /// Each step's needs, as indexes into `steps`.
    needs: Vec<Vec<usize>>,
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
    pub model: ModelRef,
    pub tools: BTreeSet<String>,
    pub needs: Vec<String>,
    pub prompt_template: String,
    /// The prompt with inputs filled in and upstream results as `<steps.x.summary>`.
    pub prompt: String,
    pub max_turns: u32,
    pub timeout: Duration,
    pub max_tokens: Option<u32>,
    pub retries: u32,
    pub condition: Option<String>,
    pub output_schema: Option<Value>,
    pub continue_on_error: bool,
    pub isolation: Isolation,
    /// What the step's `bash` may write, from its tools (or `--sandbox off`).
    pub sandbox: crate::sandbox::Mode,
    /// Whether the step's `bash` may open network connections.
    pub network: bool,
    pub wave: usize,
}

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
        sandbox_off: options.sandbox_off,
        file: &loaded.file,
        problems: loaded.problems.clone(),
        missing_aliases: BTreeMap::new(),
    };
    let def = &loaded.def;

    let providers = b.check_providers();
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

    let env = template::environment();
    let mut resolved: Vec<Option<PlannedStep>> = Vec::with_capacity(ids.len());
    for (i, (id, step)) in def.steps.iter().enumerate() {
        let ctx = StepCtx {
            id,
            index: i,
            graph: (cycles.is_empty()).then_some(&graph),
            steps_index: &index,
        };
        resolved.push(b.resolve_step(&ctx, step, catalog, &aliases, &providers, &inputs, &env));
    }
    if def.steps.is_empty()
        && loaded
            .problems
            .iter()
            .all(|p| !p.message.contains("`steps`"))
    {
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

    b.note_alias_users();
    if cycles.is_empty() {
        b.warn_concurrent_writers(&graph, &ids, &resolved);
    }
    let problems = b.problems;
    if problems.iter().any(Problem::is_error) {
        return (None, problems);
    }
    let Some(waves_idx) = graph.waves() else {
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
        inputs: inputs
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect(),
        waves,
        steps,
        needs,
        index,
        providers,
    };
    (Some(plan), problems)
}

struct Builder<'a> {
    loaded: &'a LoadedWorkflow,
    registry: &'a Registry,
    sandbox_off: bool,
    file: &'a Arc<SourceFile>,
    problems: Vec<Problem>,
    /// Undefined model aliases, reported once: the problem's index and the other steps.
    missing_aliases: BTreeMap<String, (usize, Vec<String>)>,
}

struct StepCtx<'a> {
    id: &'a str,
    index: usize,
    /// `None` when the graph has a cycle (ancestry is then meaningless).
    graph: Option<&'a StepGraph>,
    steps_index: &'a BTreeMap<&'a str, usize>,
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

    fn check_providers(&mut self) -> BTreeMap<String, ProviderSpec> {
        for (name, def) in &self.loaded.def.providers {
            if name.contains('/') || name.trim().is_empty() {
                let span = self.key_span(&path!["providers", name.as_str()]);
                self.error(
                    format!("provider name `{name}` must not contain `/`"),
                    span,
                    "invalid name",
                    None,
                );
            }
            let url = def.base_url.trim();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                let span = self.span(&path!["providers", name.as_str(), "base_url"]);
                self.error(
                    format!("`providers.{name}.base_url` must be an http:// or https:// URL"),
                    span,
                    "not a URL",
                    None,
                );
            }
            if let Some(var) = &def.api_key_env
                && (var.is_empty() || var.contains(['=', '\0', ' ']))
            {
                let span = self.span(&path!["providers", name.as_str(), "api_key_env"]);
                self.error(
                    format!("`providers.{name}.api_key_env` must name an environment variable"),
                    span,
                    "not a variable name",
                    None,
                );
            }
        }
        providers_for(&self.loaded.def.providers)
    }

    /// Checks `[models]` and `--model`, returning the alias table with overrides applied.
    fn check_models(
        &mut self,
        providers: &BTreeMap<String, ProviderSpec>,
        options: &PlanOptions,
    ) -> BTreeMap<String, ModelRef> {
        let mut aliases = BTreeMap::new();
        for (alias, value) in &self.loaded.def.models {
            let span = self.span(&path!["models", alias.as_str()]);
            match self.check_model_ref(value, providers, Some(span)) {
                Some(model) => {
                    aliases.insert(alias.clone(), model);
                }
                // Reported here; steps using the alias say nothing more about it.
                None => {
                    self.missing_aliases
                        .insert(alias.clone(), (usize::MAX, Vec::new()));
                }
            }
        }
        for (alias, value) in &options.models {
            if alias.contains('/') || alias.is_empty() {
                self.problems.push(Problem::error(format!(
                    "`--model {alias}={value}`: the alias must be a name such as `default` or `small`"
                )));
                continue;
            }
            if let Some(model) = self.check_model_ref(value, providers, None) {
                aliases.insert(alias.clone(), model);
            }
        }
        aliases
    }

    fn check_model_ref(
        &mut self,
        text: &str,
        providers: &BTreeMap<String, ProviderSpec>,
        span: Option<Range<usize>>,
    ) -> Option<ModelRef> {
        let push = |b: &mut Self, problem: Problem| {
            b.problems.push(match &span {
                Some(span) => problem.at(b.file, span.clone(), "here"),
                None => problem,
            });
        };
        let Some(model) = ModelRef::parse(text) else {
            push(
                self,
                Problem::error(format!("`{text}` is not a model: write `provider/model`"))
                    .help("for example `anthropic/claude-sonnet-4-5` or `openai/gpt-4.1`"),
            );
            return None;
        };
        if !providers.contains_key(&model.provider) {
            let help = did_you_mean(&model.provider, providers.keys().map(String::as_str))
                .unwrap_or_else(|| {
                    format!(
                        "providers are {}; add others under `[providers.NAME]`",
                        providers
                            .keys()
                            .map(|p| format!("`{p}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                });
            push(
                self,
                Problem::error(format!("unknown provider `{}` in `{text}`", model.provider))
                    .help(help),
            );
            return None;
        }
        Some(model)
    }

    /// Input values: given, or defaults; `None` for a required input that was not given.
    fn check_inputs(&mut self, options: &PlanOptions) -> BTreeMap<String, Option<String>> {
        let declared = &self.loaded.def.inputs;
        let mut values: BTreeMap<String, Option<String>> = declared
            .iter()
            .map(|(name, def)| (name.clone(), def.default.clone()))
            .collect();
        for (name, value) in &options.inputs {
            if declared.contains_key(name) {
                values.insert(name.clone(), Some(value.clone()));
            } else {
                let help = did_you_mean(name, declared.keys().map(String::as_str)).or_else(|| {
                    Some(if declared.is_empty() {
                        "this workflow declares no inputs".to_owned()
                    } else {
                        format!(
                            "inputs are {}",
                            declared
                                .keys()
                                .map(|k| format!("`{k}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })
                });
                self.problems.push(
                    Problem::error(format!("unknown input `{name}` given with --input"))
                        .in_file(self.file)
                        .with_help(help),
                );
            }
        }
        if options.require_inputs {
            for (name, value) in &values {
                if value.is_none() {
                    let span = self.key_span(&path!["inputs", name.as_str()]);
                    let what = declared
                        .get(name)
                        .and_then(|d| d.description.as_deref())
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default();
                    self.error(
                        format!("missing input `{name}`{what}"),
                        span,
                        "required: it has no default",
                        Some(format!(
                            "pass `--input {name}=VALUE`, or `--input {name}=@FILE` to read a file"
                        )),
                    );
                }
            }
        }
        values
    }

    fn check_id(&mut self, id: &str) {
        let mut chars = id.chars();
        let ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            let span = self.key_span(&path!["steps", id]);
            self.error(
                format!("step id `{id}` must start with a letter or `_` and hold only letters, digits, `_` and `-`"),
                span,
                "invalid step id",
                None,
            );
        } else if id.contains('-') {
            let span = self.key_span(&path!["steps", id]);
            self.problems.push(
                Problem::warning(format!("step id `{id}` contains `-`"))
                    .at(self.file, span, "here")
                    .help(format!(
                        "templates must then write `steps[\"{id}\"]` instead of `steps.{id}`; `_` avoids that"
                    )),
            );
        }
    }

    fn check_needs(&mut self, id: &str, step: &Step, index: &BTreeMap<&str, usize>) -> Vec<usize> {
        let mut out = Vec::new();
        for (i, need) in step.needs.iter().enumerate() {
            let span = self.span(&path!["steps", id, "needs", i]);
            if let Some(&n) = index.get(need.as_str()) {
                if out.contains(&n) {
                    self.problems.push(
                        Problem::warning(format!("step `{id}` lists `{need}` in `needs` twice"))
                            .at(self.file, span, "repeated"),
                    );
                }
                out.push(n);
            } else if !self.loaded.broken_steps.contains(need) {
                let known = index
                    .keys()
                    .copied()
                    .chain(self.loaded.broken_steps.iter().map(String::as_str));
                let help = did_you_mean(need, known);
                self.error(
                    format!("step `{id}` needs `{need}`, which is not a step"),
                    span,
                    "unknown step",
                    help,
                );
            }
        }
        out
    }

    fn report_cycle(&mut self, cycle: &[usize], ids: &[&String]) {
        let names: Vec<&str> = cycle.iter().map(|&i| ids[i].as_str()).collect();
        let first = names[0];
        let second = names.get(1).copied().unwrap_or(first);
        let need_at = self.loaded.def.steps[first]
            .needs
            .iter()
            .position(|n| n == second)
            .unwrap_or(0);
        let span = self.span(&path!["steps", first, "needs", need_at]);
        let chain = names.join(" -> ");
        self.problems.push(
            Problem::error(format!("dependency cycle: {chain}"))
                .at(self.file, span, format!("`{first}` needs `{second}`"))
                .help("each step in the cycle waits on the next one (`a -> b` means `a` needs `b`); remove one of these needs"),
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn resolve_step(
        &mut self,
        ctx: &StepCtx<'_>,
        step: &Step,
        catalog: &AgentCatalog,
        aliases: &BTreeMap<String, ModelRef>,
        providers: &BTreeMap<String, ProviderSpec>,
        inputs: &BTreeMap<String, Option<String>>,
        env: &minijinja::Environment<'static>,
    ) -> Option<PlannedStep> {
        let id = ctx.id;
        let errors_before = self.error_count();
        let agent = self.resolve_agent(id, step, catalog);
        let defaults = &self.loaded.def.defaults;

        let model = agent.and_then(|agent| self.resolve_model(id, step, agent, aliases, providers));
        let tools = agent.and_then(|agent| self.resolve_tools(id, step, agent));

        let max_turns = step
            .max_turns
            .or(agent.and_then(|a| a.max_turns))
            .or(defaults.max_turns)
            .unwrap_or(DEFAULT_MAX_TURNS);
        let timeout = match (&step.timeout, &defaults.timeout) {
            (Some(t), _) => self.duration(t, &path!["steps", id, "timeout"]),
            (None, Some(t)) => self.duration(t, &path!["defaults", "timeout"]),
            (None, None) => Some(DEFAULT_TIMEOUT),
        };

        let mut system_prompt = agent.map(|a| a.system_prompt.clone()).unwrap_or_default();
        if let Some(level) = step.thoroughness {
            if step.agent != "explore" {
                let span = self.span(&path!["steps", id, "thoroughness"]);
                self.error(
                    format!(
                        "`thoroughness` applies to `explore` steps; step `{id}` uses `{}`",
                        step.agent
                    ),
                    span,
                    "explore only",
                    None,
                );
            } else {
                system_prompt.push_str("\n\n");
                system_prompt.push_str(builtin::thoroughness_instruction(level));
            }
        }

        let output_schema = step
            .output_schema
            .as_ref()
            .and_then(|schema| self.load_output_schema(id, schema));

        let prompt = self.check_template(ctx, step, inputs, env);
        if let Some(condition) = &step.condition {
            self.check_condition(ctx, condition, env);
        }

        if self.error_count() > errors_before {
            return None;
        }
        let agent = agent?;
        let tools = tools?;
        let sandbox = if self.sandbox_off {
            crate::sandbox::Mode::Off
        } else if self.registry.any_writes(&tools) {
            crate::sandbox::Mode::Workdir
        } else {
            crate::sandbox::Mode::ReadOnly
        };
        Some(PlannedStep {
            id: id.to_owned(),
            description: step.description.clone(),
            agent: agent.name.clone(),
            agent_source: agent.source.clone(),
            system_prompt,
            model: model?,
            tools,
            needs: step.needs.clone(),
            prompt_template: step.prompt.clone(),
            prompt: prompt?,
            max_turns,
            timeout: timeout?,
            max_tokens: step.max_tokens.or(defaults.max_tokens),
            retries: step.retries.or(defaults.retries).unwrap_or(DEFAULT_RETRIES),
            condition: step.condition.clone(),
            output_schema,
            continue_on_error: step.continue_on_error,
            isolation: step.isolation,
            sandbox,
            network: step.network.or(defaults.network).unwrap_or(false),
            wave: 0,
        })
    }

    fn error_count(&self) -> usize {
        self.problems.iter().filter(|p| p.is_error()).count()
    }

    fn resolve_agent<'c>(
        &mut self,
        id: &str,
        step: &Step,
        catalog: &'c AgentCatalog,
    ) -> Option<&'c Agent> {
        if let Some(agent) = catalog.get(&step.agent) {
            if let Some(warnings) = catalog.warnings.get(&step.agent) {
                self.problems.extend(warnings.iter().cloned());
            }
            return Some(agent);
        }
        let span = self.span(&path!["steps", id, "agent"]);
        if let Some((path, problems)) = catalog.broken.get(&step.agent) {
            self.error(
                format!("agent `{}` (from `{path}`) is invalid", step.agent),
                span,
                "this agent's file has errors",
                Some("fix the problems reported for that file".into()),
            );
            self.problems.extend(problems.iter().cloned());
            return None;
        }
        let names: Vec<&str> = catalog.names().collect();
        let help = did_you_mean(&step.agent, names.iter().copied()).unwrap_or_else(|| {
            format!(
                "agents are {}; user agents live in `agents/` beside the workflow's folder or in `.claude/agents/`",
                names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
            )
        });
        self.error(
            format!("unknown agent `{}` in step `{id}`", step.agent),
            span,
            "unknown agent",
            Some(help),
        );
        None
    }

    /// SPEC §4: the step's model, else the agent's, else the agent's alias; `small` and `plan`
    /// fall back to `default`; nothing is made up.
    fn resolve_model(
        &mut self,
        id: &str,
        step: &Step,
        agent: &Agent,
        aliases: &BTreeMap<String, ModelRef>,
        providers: &BTreeMap<String, ProviderSpec>,
    ) -> Option<ModelRef> {
        let (text, from_step) = match (&step.model, &agent.model) {
            (Some(m), _) => (m.as_str(), true),
            (None, Some(m)) => (m.as_str(), false),
            (None, None) => (agent.default_alias, false),
        };
        let point = |b: &Self, problem: Problem| -> Problem {
            if from_step {
                let span = b.span(&path!["steps", id, "model"]);
                problem.at(b.file, span, "model")
            } else {
                let span = b.span(&path!["steps", id, "agent"]);
                problem.at(
                    b.file,
                    span,
                    format!("agent `{}` picks the model", agent.name),
                )
            }
        };
        if text.contains('/') {
            let span = from_step.then(|| self.span(&path!["steps", id, "model"]));
            let found = self.check_model_ref(text, providers, span.clone());
            if found.is_none() && span.is_none() {
                // The bad reference came from the agent file: say which step uses it.
                if let Some(last) = self.problems.pop() {
                    let message = format!("{} (model of agent `{}`)", last.message, agent.name);
                    let problem = point(self, Problem { message, ..last });
                    self.problems.push(problem);
                }
            }
            return found;
        }
        if let Some(model) = aliases.get(text) {
            return Some(model.clone());
        }
        if matches!(text, "small" | "plan") {
            if let Some(model) = aliases.get("default") {
                return Some(model.clone());
            }
            if self
                .missing_aliases
                .get("default")
                .is_some_and(|(at, _)| *at == usize::MAX)
            {
                return None;
            }
        }
        if let Some((_, others)) = self.missing_aliases.get_mut(text) {
            others.push(id.to_owned());
            return None;
        }
        let via = if text == "default" || !matches!(text, "small" | "plan") {
            String::new()
        } else {
            " (which falls back to `default`)".to_owned()
        };
        let message = if from_step || agent.model.is_some() {
            format!("step `{id}`: model alias `{text}`{via} is not defined")
        } else {
            format!(
                "step `{id}` has no model: agent `{}` uses the alias `{text}`{via}, and no such alias is set",
                agent.name
            )
        };
        let alias_hint = closest(text, aliases.keys().map(String::as_str))
            .map(|c| format!("did you mean `{c}`? Otherwise add "))
            .unwrap_or_else(|| "add ".to_owned());
        let help = if matches!(text, "small" | "plan") && !aliases.contains_key("default") {
            format!(
                "{alias_hint}`default = \"anthropic/claude-sonnet-4-5\"` (or any provider/model) under `models`, or `{text} = ...` for this kind of agent alone; or pass `--model default=provider/model`"
            )
        } else {
            format!(
                "{alias_hint}`{text} = \"anthropic/claude-sonnet-4-5\"` (or any provider/model) under `models`, or pass `--model {text}=provider/model`"
            )
        };
        let problem = point(self, Problem::error(message).help(help));
        self.missing_aliases
            .insert(text.to_owned(), (self.problems.len(), Vec::new()));
        self.problems.push(problem);
        None
    }

    /// Two steps that can change files, in the same directory, with nothing ordering them, may
    /// overwrite each other's work: worth a warning.
    fn warn_concurrent_writers(
        &mut self,
        graph: &StepGraph,
        ids: &[&String],
        resolved: &[Option<PlannedStep>],
    ) {
        // Bash writes only in steps that have a write tool (otherwise its sandbox is read-only).
        let writers: Vec<usize> = resolved
            .iter()
            .enumerate()
            .filter(|(_, step)| {
                step.as_ref().is_some_and(|s| {
                    s.isolation != Isolation::Worktree && self.registry.any_writes(&s.tools)
                })
            })
            .map(|(i, _)| i)
            .collect();
        let mut warned = 0;
        for (n, &a) in writers.iter().enumerate() {
            for &b in &writers[n + 1..] {
                if warned >= 5 || graph.is_ancestor(a, b) || graph.is_ancestor(b, a) {
                    continue;
                }
                warned += 1;
                let span = self.key_span(&path!["steps", ids[b].as_str()]);
                self.problems.push(
                    Problem::warning(format!(
                        "steps `{}` and `{}` can change files and may run at the same time in the same directory",
                        ids[a], ids[b]
                    ))
                    .at(self.file, span, "may overlap")
                    .help(format!(
                        "set `isolation = \"worktree\"` on one of them, or order them with `needs = [\"{}\"]`",
                        ids[a]
                    )),
                );
            }
        }
    }

    /// Adds to each undefined-alias problem the other steps that need the alias.
    fn note_alias_users(&mut self) {
        for (at, others) in self.missing_aliases.values() {
            if others.is_empty() {
                continue;
            }
            let list: Vec<String> = others.iter().take(5).map(|s| format!("`{s}`")).collect();
            let more = others.len().saturating_sub(5);
            let tail = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            if let Some(problem) = self.problems.get_mut(*at) {
                problem
                    .message
                    .push_str(&format!(" (also needed by {}{tail})", list.join(", ")));
            }
        }
    }

    fn resolve_tools(&mut self, id: &str, step: &Step, agent: &Agent) -> Option<BTreeSet<String>> {
        let step_tools = match &step.tools {
            Some(list) => Some(self.tool_list(id, "tools", list)?),
            None => None,
        };
        let disallowed = self
            .tool_list(id, "disallowed_tools", &step.disallowed_tools)?
            .expand(self.registry);
        let tools = tools::resolve(
            self.registry,
            &agent.tools,
            step_tools.as_ref(),
            agent.disallowed.iter().chain(&disallowed),
        );
        if tools.is_empty() {
            let key = if step.tools.is_some() {
                "tools"
            } else if !step.disallowed_tools.is_empty() {
                "disallowed_tools"
            } else {
                "agent"
            };
            let span = self.span(&path!["steps", id, key]);
            self.error(
                format!("step `{id}` has no tools left"),
                span,
                "resolves to nothing",
                Some(format!(
                    "agent `{}` gives {}; `tools` replaces that list and `disallowed_tools` removes from it",
                    agent.name,
                    describe_tools(&agent.tools)
                )),
            );
            return None;
        }
        Some(tools)
    }

    fn tool_list(&mut self, id: &str, key: &str, names: &[String]) -> Option<ToolSet> {
        let mut set = BTreeSet::new();
        let mut ok = true;
        let mut all = false;
        for (i, name) in names.iter().enumerate() {
            let span = self.span(&path!["steps", id, key, i]);
            match self.registry.entry(name) {
                ToolEntry::All => all = true,
                ToolEntry::Tool(tool) => {
                    set.insert(tool);
                }
                ToolEntry::Unsupported(name) => self.problems.push(
                    Problem::warning(format!("tool `{name}` is not provided by runner; left out"))
                        .at(self.file, span, "left out"),
                ),
                ToolEntry::Unknown(name) => {
                    ok = false;
                    let help = Some(self.registry.unknown_help(&name));
                    self.error(
                        format!("unknown tool `{name}` in step `{id}`"),
                        span,
                        "unknown tool",
                        help,
                    );
                }
            }
        }
        if !ok {
            return None;
        }
        Some(if all {
            ToolSet::All
        } else {
            ToolSet::Some(set)
        })
    }

    fn duration(&mut self, text: &str, at: &[Seg]) -> Option<Duration> {
        match parse_duration(text) {
            Ok(d) => Some(d),
            Err(why) => {
                let span = self.span(at);
                self.error(
                    format!(
                        "`{}` is not a duration: {why}",
                        crate::workflow::load::dotted(at)
                    ),
                    span,
                    "invalid duration",
                    Some("write a number and a unit: `90s`, `10m`, `1h30m`".into()),
                );
                None
            }
        }
    }

    fn load_output_schema(&mut self, id: &str, schema: &Value) -> Option<Value> {
        let at = path!["steps", id, "output_schema"];
        let span = self.span(&at);
        let schema = match schema {
            Value::String(rel) => {
                let base = self.file.name.parent().unwrap_or(Utf8Path::new(""));
                let path = base.join(rel);
                let text = match crate::limits::read_text(&path, crate::limits::MAX_SCHEMA_BYTES) {
                    Ok(text) => text,
                    Err(err) => {
                        self.error(
                            format!("cannot read output schema `{path}`: {err}"),
                            span,
                            "schema file",
                            None,
                        );
                        return None;
                    }
                };
                match serde_json::from_str::<Value>(&text) {
                    Ok(v) => v,
                    Err(err) => {
                        self.error(
                            format!("output schema `{path}` is not valid JSON: {err}"),
                            span,
                            "schema file",
                            None,
                        );
                        return None;
                    }
                }
            }
            other => other.clone(),
        };
        if let Err(err) = jsonschema::validator_for(&schema) {
            self.error(
                format!("`steps.{id}.output_schema` is not a valid JSON Schema: {err}"),
                span,
                "invalid schema",
                None,
            );
            return None;
        }
        Some(schema)
    }

    /// Checks the names a prompt reads and renders it with placeholders for upstream results.
    fn check_template(
        &mut self,
        ctx: &StepCtx<'_>,
        step: &Step,
        inputs: &BTreeMap<String, Option<String>>,
        env: &minijinja::Environment<'static>,
    ) -> Option<String> {
        let at = path!["steps", ctx.id, "prompt"];
        let names = match template::template_names(env, &step.prompt) {
            Ok(names) => names,
            Err(err) => {
                let span = self.template_span(&at, &step.prompt, &err);
                self.error(
                    format!(
                        "step `{}`: invalid prompt template: {}",
                        ctx.id,
                        template::describe_error(&err)
                    ),
                    span,
                    "template error",
                    None,
                );
                return None;
            }
        };
        let before = self.error_count();
        self.check_names(ctx, &at, &names);
        if self.error_count() > before {
            return None;
        }
        match template::render(env, &step.prompt, plan_context(self.loaded, inputs)) {
            Ok(text) => Some(text),
            Err(err) => {
                let span = self.template_span(&at, &step.prompt, &err);
                self.error(
                    format!(
                        "step `{}`: the prompt does not render: {}",
                        ctx.id,
                        template::describe_error(&err)
                    ),
                    span,
                    "template error",
                    None,
                );
                None
            }
        }
    }

    fn check_condition(
        &mut self,
        ctx: &StepCtx<'_>,
        condition: &str,
        env: &minijinja::Environment<'static>,
    ) {
        let at = path!["steps", ctx.id, "if"];
        match template::expression_names(env, condition) {
            Ok(names) => self.check_names(ctx, &at, &names),
            Err(err) => {
                let span = self.template_span(&at, condition, &err);
                self.error(
                    format!(
                        "step `{}`: invalid `if` expression: {}",
                        ctx.id,
                        template::describe_error(&err)
                    ),
                    span,
                    "expression error",
                    None,
                );
            }
        }
    }

    /// SPEC §1: `inputs.<declared>`, `workflow.name`, and `steps.<ancestor>.<field>`.
    fn check_names(&mut self, ctx: &StepCtx<'_>, at: &[Seg], names: &BTreeSet<String>) {
        let id = ctx.id;
        for name in names {
            let parts: Vec<&str> = name.split('.').collect();
            let span = self.name_span(at, name);
            match parts.as_slice() {
                ["inputs"] | ["workflow"] | ["steps"] => {}
                ["inputs", input, ..] => {
                    if !self.loaded.def.inputs.contains_key(*input) {
                        let help =
                            did_you_mean(input, self.loaded.def.inputs.keys().map(String::as_str))
                                .or_else(|| Some(format!("declare it: `[inputs.{input}]`")));
                        self.error(
                            format!("step `{id}` reads `{name}`, but there is no input `{input}`"),
                            span,
                            "unknown input",
                            help,
                        );
                    }
                }
                ["workflow", field, ..] => {
                    if !matches!(*field, "name" | "description") {
                        self.error(
                            format!("step `{id}` reads `{name}`; `workflow` has `name` and `description`"),
                            span,
                            "unknown field",
                            did_you_mean(field, ["name", "description"]),
                        );
                    }
                }
                ["steps", other, rest @ ..] => self.check_step_ref(ctx, name, other, rest, span),
                [root, ..] => {
                    let help = did_you_mean(root, ["inputs", "steps", "workflow"]).or_else(|| {
                        Some("templates can read `inputs.<name>`, `workflow.name` and `steps.<id>.<field>`".into())
                    });
                    self.error(
                        format!("step `{id}` reads unknown name `{root}`"),
                        span,
                        "unknown name",
                        help,
                    );
                }
                [] => {}
            }
        }
    }

    fn check_step_ref(
        &mut self,
        ctx: &StepCtx<'_>,
        name: &str,
        other: &str,
        rest: &[&str],
        span: Range<usize>,
    ) {
        let id = ctx.id;
        let Some(&other_index) = ctx.steps_index.get(other) else {
            if !self.loaded.broken_steps.contains(other) {
                let help = did_you_mean(other, ctx.steps_index.keys().copied());
                self.error(
                    format!("step `{id}` reads `{name}`, but there is no step `{other}`"),
                    span,
                    "unknown step",
                    help,
                );
            }
            return;
        };
        if let Some(graph) = ctx.graph
            && !graph.is_ancestor(other_index, ctx.index)
        {
            self.error(
                format!("step `{id}` reads `{name}`, but `{other}` is not in its `needs`"),
                span,
                "not an upstream step",
                Some(format!(
                    "a step sees only the results of steps it needs, directly or through others; add `{other}` to the `needs` of `{id}`"
                )),
            );
            return;
        }
        let Some(field) = rest.first() else { return };
        let target = &self.loaded.def.steps[other];
        if !STEP_FIELDS.contains(field) {
            let help = did_you_mean(field, STEP_FIELDS).or_else(|| {
                Some(format!(
                    "fields are {}",
                    STEP_FIELDS.map(|f| format!("`{f}`")).join(", ")
                ))
            });
            self.error(
                format!("step `{id}` reads `{name}`: steps have no field `{field}`"),
                span,
                "unknown field",
                help,
            );
        } else if *field == "output" && target.output_schema.is_none() {
            self.error(
                format!("step `{id}` reads `{name}`, but `{other}` has no `output_schema`"),
                span,
                "no structured output",
                Some(format!(
                    "give `{other}` an `output_schema`, or read `steps.{other}.summary`"
                )),
            );
        } else if matches!(*field, "branch" | "diff") && target.isolation != Isolation::Worktree {
            self.error(
                format!("step `{id}` reads `{name}`, but `{other}` does not run in a worktree"),
                span,
                "no branch",
                Some(format!("set `isolation = \"worktree\"` on `{other}`")),
            );
        }
    }

    /// Where in the file a name read by a template stands: the name's own text if it appears in
    /// the value once, else the value.
    fn name_span(&self, at: &[Seg], name: &str) -> Range<usize> {
        let value = self.span(at);
        let raw = self.file.text.get(value.clone()).unwrap_or_default();
        match raw.find(name) {
            Some(i) => value.start + i..value.start + i + name.len(),
            None => {
                // `steps.a.summary` may be written `steps["a"].summary`; point at the root name.
                let root = name.split('.').next().unwrap_or(name);
                raw.find(root)
                    .map(|i| value.start + i..value.start + i + root.len())
                    .unwrap_or(value)
            }
        }
    }

    /// Maps a template error's range into the file, when the offending text can be found there.
    fn template_span(&self, at: &[Seg], source: &str, err: &minijinja::Error) -> Range<usize> {
        let value = self.span(at);
        let raw = self.file.text.get(value.clone()).unwrap_or_default();
        if let Some(range) = err.range()
            && let Some(snippet) = source.get(range)
            && !snippet.trim().is_empty()
            && let Some(i) = raw.find(snippet)
        {
            return value.start + i..value.start + i + snippet.len();
        }
        if let Some(line) = err.line()
            && let Some(text) = source.lines().nth(line.saturating_sub(1))
            && !text.trim().is_empty()
            && let Some(i) = raw.find(text.trim())
        {
            return value.start + i..value.start + i + text.trim().len();
        }
        value
    }
}

fn describe_tools(tools: &ToolSet) -> String {
    match tools {
        ToolSet::All => "all tools".into(),
        ToolSet::Some(set) if set.is_empty() => "no tools".into(),
        ToolSet::Some(set) => set
            .iter()
            .map(|t| format!("`{t}`"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// The template context of a plan: inputs filled in, upstream results as placeholders.
fn plan_context(loaded: &LoadedWorkflow, inputs: &BTreeMap<String, Option<String>>) -> JinjaValue {
    let inputs: BTreeMap<&str, JinjaValue> = inputs
        .iter()
        .map(|(k, v)| {
            let value = match v {
                Some(v) => JinjaValue::from(v.as_str()),
                None => Placeholder::value(format!("inputs.{k}")),
            };
            (k.as_str(), value)
        })
        .collect();
    template::context(
        inputs,
        &loaded.def.name,
        loaded.def.description.as_deref(),
        Placeholder::value("steps"),
    )
}
