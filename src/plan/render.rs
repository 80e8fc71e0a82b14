//! Plans as people and programs read them: text, JSON (docs/src/reference/commands.md), Mermaid, DOT.

use std::fmt::Write as _;

use serde::Serialize;

use super::{Plan, PlannedStep};
use crate::agent::{AgentSource, PermissionMode};
use crate::provider::known::PriceSource;
use crate::sandbox::{Mode, Support};
use crate::workflow::Isolation;
use crate::workflow::duration::format_duration;

#[derive(Serialize)]
struct JsonPlan<'a> {
    name: &'a str,
    /// The run's ceilings: `max_tokens`, `max_cost_usd` (null when not set).
    budget: JsonBudget,
    /// Subagents running at once across the run.
    max_subagents: u32,
    waves: &'a [Vec<String>],
    /// The predicted critical path, and with history the run's ETA.
    critical_path: JsonCritical,
    /// The run's forecast from earlier runs (docs/src/budgets.md "Cost before you pay").
    forecast: serde_json::Value,
    steps: Vec<JsonStep<'a>>,
}

#[derive(Serialize)]
struct JsonCritical {
    /// Its steps, first to last.
    steps: Vec<String>,
    /// Its length by the history's median durations; null without history (then by steps).
    duration_ms: Option<u64>,
    /// How long the run should take with `max_parallel`; null without history.
    eta_ms: Option<u64>,
    /// Earlier runs the durations come from.
    runs: usize,
    /// Steps with no history, counted as a typical step of the workflow.
    without_history: Vec<String>,
}

/// What `plan` says of the path: the critical path, by the earlier runs' durations when there
/// are some (`run::history`), else by step count.
pub struct PathView<'a> {
    pub paths: &'a super::critical::Paths,
    /// Earlier runs read.
    pub runs: usize,
    /// Tokens, cost and time by those runs.
    pub forecast: &'a super::forecast::Forecast,
}

impl PathView<'_> {
    fn json(&self, plan: &Plan) -> JsonCritical {
        let timed = self.paths.weigh == super::critical::Weigh::Time;
        let path = self.paths.critical_path(plan);
        JsonCritical {
            duration_ms: path
                .first()
                .filter(|_| timed)
                .map(|&i| self.paths.remaining[i]),
            eta_ms: timed.then(|| self.paths.makespan(plan, plan.max_parallel)),
            steps: path.iter().map(|&i| plan.steps()[i].id.clone()).collect(),
            runs: self.runs,
            without_history: if timed {
                (0..plan.steps().len())
                    .filter(|&i| !self.paths.known[i])
                    .map(|i| plan.steps()[i].id.clone())
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    fn text(&self, plan: &Plan, out: &mut String) {
        let doc = self.json(plan);
        if doc.steps.is_empty() {
            return;
        }
        let steps = doc.steps.len();
        let _ = write!(out, "critical path: {}", doc.steps.join(" -> "));
        let (Some(length), Some(eta)) = (doc.duration_ms, doc.eta_ms) else {
            let _ = writeln!(
                out,
                " ({steps} step{}; no history yet, so by step count)",
                plural(steps)
            );
            return;
        };
        let _ = writeln!(
            out,
            " ({}, median of the last {} run{})",
            crate::units::seconds(length),
            self.runs,
            plural(self.runs)
        );
        let _ = write!(
            out,
            "eta: {} with at most {} at once",
            crate::units::seconds(eta),
            plan.max_parallel
        );
        let unknown = doc.without_history.len();
        if unknown > 0 {
            let typical = (0..plan.steps().len())
                .find(|&i| !self.paths.known[i])
                .map_or(0, |i| self.paths.weight[i]);
            let _ = write!(
                out,
                " ({unknown} step{} with no history counted as {} each)",
                plural(unknown),
                crate::units::seconds(typical)
            );
        }
        out.push('\n');
    }
}

#[derive(Serialize)]
struct JsonBudget {
    max_tokens: Option<u64>,
    max_cost_usd: Option<f64>,
    /// `[budget] daily_usd`, only when set (docs/src/budgets.md "Daily budget").
    #[serde(skip_serializing_if = "Option::is_none")]
    daily_usd: Option<f64>,
}

#[derive(Serialize)]
struct JsonStep<'a> {
    id: &'a str,
    agent: &'a str,
    /// Where the agent came from: `built-in` or its file.
    agent_source: String,
    /// False for an agent file the working directory brought and the user did not trust.
    agent_trusted: bool,
    /// What kind of place the agent came from: `built-in`, `file`, `untrusted` or `user`
    /// (`~/.claude/agents/`).
    agent_origin: &'static str,
    /// The agent's `permissionMode` (`default` when it sets none).
    permission_mode: &'static str,
    /// The agent's `effort`, or null.
    effort: Option<&'static str>,
    /// The agent's persistent memory scope (`user`, `project`, `local`), or null.
    memory: Option<&'static str>,
    /// `provider/model`; null for a command step.
    model: Option<String>,
    tools: Vec<&'a str>,
    needs: &'a [String],
    prompt: &'a str,
    max_turns: u32,
    timeout_secs: u64,
    isolation: &'static str,
    condition: Option<&'a str>,
    /// What the step's bash may write: `read-only`, `workdir` or `off`.
    sandbox: &'static str,
    network: bool,
    /// What its bash may read besides the system, the toolchains and its directories.
    read_paths: &'a [String],
    /// The project memory file the step's agent gets (`CLAUDE.md`, `AGENTS.md`), or null.
    project_memory: Option<&'static str>,
    /// Whether this machine confines the step's bash as `sandbox` says (null without bash): a
    /// kernel without Landlock cannot.
    bash_confined: Option<bool>,
    /// Agents the step's `task` may spawn (empty without `task`).
    subagents: &'a [String],
    max_subagent_depth: u32,
    max_tokens_total: Option<u64>,
    /// The context window in tokens, the share of it at which the conversation is compacted,
    /// and the newest tool results kept whole when old ones are cleared (null for a command
    /// step, which has no conversation).
    context_window: Option<u64>,
    compact_at: Option<f64>,
    keep_tool_results: Option<u32>,
    /// USD per million tokens of its model (`[prices]`, else LiteLLM's list price); null when
    /// no price is known or for a command step.
    price: Option<crate::workflow::Price>,
    /// Where the price comes from: `[prices]` or `LiteLLM <version> (<date>)`; null without one.
    price_source: Option<String>,
    /// A command step's shell text (null for an agent step).
    run: Option<&'a str>,
    /// Commands that must pass after the agent's final answer.
    checks: Vec<JsonCheck<'a>>,
    check_retries: u32,
    /// The fan-out, when the step runs once per item.
    for_each: Option<JsonForEach<'a>>,
    /// Its tokens, cost and time by earlier runs (null figures: no history).
    forecast: serde_json::Value,
}

#[derive(Serialize)]
struct JsonCheck<'a> {
    command: &'a str,
    timeout_secs: u64,
}

#[derive(Serialize)]
struct JsonForEach<'a> {
    /// The expression, or null for a literal list.
    expression: Option<&'a str>,
    key: Option<&'a str>,
    max_instances: u32,
    /// Each instance, when the list is known before the run (literals, inputs).
    instances: Option<Vec<JsonInstance>>,
}

#[derive(Serialize)]
struct JsonInstance {
    id: String,
    item: serde_json::Value,
}

fn instances(step: &PlannedStep) -> Option<Vec<JsonInstance>> {
    let for_each = step.for_each.as_ref()?;
    let items = for_each.known.as_ref()?;
    let ids = super::verified::instance_ids(&step.id, items, for_each.key.as_deref()).ok()?;
    Some(
        ids.into_iter()
            .zip(items)
            .map(|(id, item)| JsonInstance {
                id,
                item: item.clone(),
            })
            .collect(),
    )
}

pub fn to_json(plan: &Plan, support: Support) -> String {
    let paths = super::critical::Paths::new(plan, &[]);
    let forecast = no_history(plan);
    to_json_with(
        plan,
        support,
        &PathView {
            paths: &paths,
            runs: 0,
            forecast: &forecast,
        },
    )
}

/// The forecast of a plan with no earlier runs: every step unknown.
fn no_history(plan: &Plan) -> super::forecast::Forecast {
    super::forecast::Forecast {
        runs: 0,
        steps: vec![Default::default(); plan.steps().len()],
        duration_ms: None,
    }
}

/// The plan as JSON, its critical path by `path`.
pub fn to_json_with(plan: &Plan, support: Support, path: &PathView<'_>) -> String {
    let priced = |s: &PlannedStep| s.model.as_ref().and_then(|m| plan.price_of(&m.to_string()));
    let doc = JsonPlan {
        critical_path: path.json(plan),
        forecast: super::forecast::json(path.forecast, plan),
        name: &plan.name,
        budget: JsonBudget {
            max_tokens: plan.max_tokens,
            max_cost_usd: plan.max_cost_usd,
            daily_usd: plan.daily_usd,
        },
        max_subagents: plan.max_subagents,
        waves: plan.waves(),
        steps: plan
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| JsonStep {
                forecast: super::forecast::step_json(path.forecast, i),
                id: &s.id,
                agent: &s.agent,
                agent_source: match s.agent_source.path() {
                    Some(path) => path.to_string(),
                    None => "built-in".to_owned(),
                },
                agent_trusted: s.agent_source.trusted(),
                agent_origin: s.agent_source.kind(),
                permission_mode: s.permission_mode.as_str(),
                effort: s.effort.map(|e| e.as_str()),
                memory: s.agent_memory.map(|m| m.as_str()),
                model: s.model.as_ref().map(ToString::to_string),
                price: priced(s).map(|(price, _)| price),
                price_source: priced(s).map(|(_, source)| source.to_string()),
                // BTreeSet of an Ord enum whose order matches the names' order: sorted.
                tools: s.tools.iter().map(String::as_str).collect(),
                needs: &s.needs,
                prompt: &s.prompt,
                max_turns: s.settings.max_turns,
                timeout_secs: s.settings.timeout.as_secs(),
                isolation: s.isolation.as_str(),
                condition: s.condition.as_deref(),
                sandbox: s.sandbox.as_str(),
                network: s.settings.network,
                read_paths: &s.settings.read_paths,
                project_memory: s.project_memory,
                bash_confined: s
                    .tools
                    .contains("bash")
                    .then(|| s.sandbox != Mode::Off && support.landlock()),
                subagents: &s.subagents,
                max_subagent_depth: s.settings.max_subagent_depth,
                max_tokens_total: s.settings.max_tokens_total,
                context_window: s.command.is_none().then_some(s.settings.context_window),
                compact_at: s.command.is_none().then_some(s.settings.compact_at),
                keep_tool_results: s.command.is_none().then(|| {
                    s.settings
                        .keep_tool_results
                        .unwrap_or(super::step_settings::DEFAULT_KEEP_TOOL_RESULTS)
                }),
                run: s.command.as_deref(),
                checks: s
                    .checks
                    .iter()
                    .map(|c| JsonCheck {
                        command: &c.command,
                        timeout_secs: c.timeout.as_secs(),
                    })
                    .collect(),
                check_retries: s.check_retries,
                for_each: s.for_each.as_ref().map(|f| JsonForEach {
                    expression: match &f.source {
                        super::ForEachSource::Expression(e) => Some(e),
                        super::ForEachSource::Items(_) => None,
                    },
                    key: f.key.as_deref(),
                    max_instances: f.max_instances,
                    instances: instances(s),
                }),
            })
            .collect(),
    };
    // Serializing plain strings and numbers cannot fail.
    let mut out = crate::terminal::to_json_pretty(&doc).unwrap_or_default();
    out.push('\n');
    out
}

pub fn to_text(plan: &Plan, support: Support) -> String {
    let paths = super::critical::Paths::new(plan, &[]);
    let forecast = no_history(plan);
    to_text_with(
        plan,
        support,
        &PathView {
            paths: &paths,
            runs: 0,
            forecast: &forecast,
        },
    )
}

/// The plan as people read it, its critical path by `path`.
pub fn to_text_with(plan: &Plan, support: Support, path: &PathView<'_>) -> String {
    let mut out = String::new();
    let _ = write!(out, "{}", plan.name);
    if let Some(description) = &plan.description {
        let _ = write!(out, ": {description}");
    }
    out.push('\n');
    let steps = plan.steps().len();
    let waves = plan.waves().len();
    let _ = write!(
        out,
        "{steps} step{} in {waves} wave{}, at most {} at once",
        plural(steps),
        plural(waves),
        plan.max_parallel
    );
    if plan.steps().iter().any(|s| !s.subagents.is_empty()) {
        let _ = write!(out, " (subagents: at most {})", plan.max_subagents);
    }
    out.push('\n');
    let mut ceilings = Vec::new();
    if let Some(tokens) = plan.max_tokens {
        ceilings.push(format!("{tokens} tokens"));
    }
    if let Some(usd) = plan.max_cost_usd {
        ceilings.push(format!("${usd:.2}"));
    }
    if let Some(usd) = plan.daily_usd {
        ceilings.push(format!("${usd:.2} a day across runs"));
    }
    if !ceilings.is_empty() {
        let _ = writeln!(out, "budget: {}", ceilings.join(", "));
    }
    if !plan.inputs.is_empty() {
        let inputs: Vec<String> = plan
            .inputs
            .iter()
            .map(|(k, v)| format!("{k}={}", one_line(v)))
            .collect();
        let _ = writeln!(out, "inputs: {}", inputs.join(", "));
    }
    path.text(plan, &mut out);
    path.forecast.text(plan, &mut out);
    let width = plan.steps().iter().map(|s| s.id.len()).max().unwrap_or(0);
    // Steps are stored wave by wave: one pass over them prints every wave.
    let mut wave = None;
    for (i, step) in plan.steps().iter().enumerate() {
        if wave != Some(step.wave) {
            wave = Some(step.wave);
            let _ = writeln!(out, "\nwave {}", step.wave + 1);
        }
        let price = step.model.as_ref().map(|model| price_text(plan, model));
        let mut forecast = String::new();
        path.forecast.step_text(i, &mut forecast);
        step_text(&mut out, step, width, support, price, &forecast);
    }
    out
}

/// A step's price line. A model without a known price says so: it is not free, and `$0` would
/// read as free.
fn price_text(plan: &Plan, model: &crate::provider::ModelRef) -> String {
    let Some((price, source)) = plan.price_of(&model.to_string()) else {
        return format!(
            "none known (not in `[prices]` nor {}); add `[prices.\"{model}\"]` to count its cost",
            PriceSource::LiteLlm(crate::provider::known::snapshot())
        );
    };
    format!(
        "${} in, ${} out per million tokens (cache read ${}, write ${}; {source})",
        dollars(price.input),
        dollars(price.output),
        dollars(price.cache_read.unwrap_or(price.input)),
        dollars(price.cache_write.unwrap_or(price.input))
    )
}

// Over 80 lines: one section per part of a step, in the order the plan shows them; splitting would
// scatter the layout.
/// A price per million tokens: cents (`3.00`, `0.30`), or the digits it has below a cent.
pub fn dollars(usd: f64) -> String {
    let cents = format!("{usd:.2}");
    if cents.parse::<f64>().is_ok_and(|c| c == usd) {
        cents
    } else {
        usd.to_string()
    }
}

fn step_text(
    out: &mut String,
    step: &PlannedStep,
    width: usize,
    support: Support,
    price: Option<String>,
    forecast: &str,
) {
    let _ = writeln!(
        out,
        "  {:<width$}  [{}] {}",
        step.id,
        step.agent,
        step.model_label()
    );
    if let Some(description) = &step.description {
        let _ = writeln!(out, "    {:<9}{}", "about", description);
    }
    match &step.agent_source {
        AgentSource::Builtin => {}
        AgentSource::File(path) => {
            let _ = writeln!(out, "    {:<9}{path}", "agent");
        }
        AgentSource::Untrusted(path) => {
            let _ = writeln!(
                out,
                "    {:<9}{path} (untrusted: from the working directory, tools capped, no MCP servers)",
                "agent"
            );
        }
        AgentSource::User(path) => {
            let shown = crate::agent::home_relative(path);
            let _ = writeln!(out, "    {:<9}{shown} (user)", "agent");
        }
    }
    if !step.needs.is_empty() {
        let _ = writeln!(out, "    {:<9}{}", "needs", step.needs.join(", "));
    }
    if let Some(condition) = &step.condition {
        let _ = writeln!(out, "    {:<9}{}", "if", condition);
    }
    if let Some(for_each) = &step.for_each {
        let list = match &for_each.source {
            super::ForEachSource::Expression(e) => one_line(e),
            super::ForEachSource::Items(items) => format!("{} items", items.len()),
        };
        let _ = writeln!(
            out,
            "    {:<9}{list} (at most {} instances)",
            "for each", for_each.max_instances
        );
        if let Some(instances) = instances(step) {
            let shown: Vec<String> = instances
                .iter()
                .take(20)
                .map(|i| format!("{} = {}", i.id, one_line(&i.item.to_string())))
                .collect();
            let more = instances.len().saturating_sub(shown.len());
            let tail = if more > 0 {
                format!(", and {more} more")
            } else {
                String::new()
            };
            let _ = writeln!(out, "    {:<9}{}{tail}", "items", shown.join(", "));
        }
    }
    if let Some(command) = &step.command {
        // The whole command, as it will run: this is what a reader checks before paying.
        let mut lines = command.trim_end().lines();
        let _ = writeln!(out, "    {:<9}{}", "run", lines.next().unwrap_or_default());
        for line in lines {
            let _ = writeln!(out, "    {:<9}{line}", "");
        }
        if !step.settings.env.is_empty() {
            let vars: Vec<String> = step
                .settings
                .env
                .iter()
                .map(|(k, v)| format!("{k}={}", one_line(v)))
                .collect();
            let _ = writeln!(out, "    {:<9}{}", "env", vars.join(", "));
        }
        let network = if step.settings.network {
            "network"
        } else {
            "no network"
        };
        let mode = match step.sandbox {
            Mode::Off => "off (the command is not confined)".to_owned(),
            Mode::ReadOnly if !support.landlock() => format!(
                "read-only, {network} (this kernel has no Landlock, so the command cannot run)"
            ),
            mode => format!("{}, {network}", mode.as_str()),
        };
        let _ = writeln!(out, "    {:<9}{}", "sandbox", mode);
        write_reads(out, step);
    } else {
        let tools: Vec<&str> = step.tools.iter().map(String::as_str).collect();
        let tools = if tools.is_empty() {
            "none (`tools = []`: the agent only answers)".to_owned()
        } else {
            tools.join(", ")
        };
        let _ = writeln!(out, "    {:<9}{tools}", "tools");
    }
    if !step.checks.is_empty() {
        let checks: Vec<String> = step
            .checks
            .iter()
            .map(|c| format!("{} ({})", one_line(&c.command), format_duration(c.timeout)))
            .collect();
        let _ = writeln!(
            out,
            "    {:<9}{}; a failure goes back to the agent up to {} time{}",
            "checks",
            checks.join(", "),
            step.check_retries,
            plural(step.check_retries as usize)
        );
    }
    if let Some(memory) = step.project_memory {
        let _ = writeln!(out, "    {:<9}{memory} (project memory)", "memory");
    }
    if !step.subagents.is_empty() {
        let nesting = match step.settings.max_subagent_depth {
            1 => String::new(),
            depth => format!(" (nesting {depth} deep)"),
        };
        let _ = writeln!(
            out,
            "    {:<9}{}{nesting}",
            "spawns",
            step.subagents.join(", ")
        );
    }
    if step.tools.contains("bash") {
        let network = if step.settings.network {
            "network"
        } else {
            "no network"
        };
        // Said as this machine will enforce it, not only as the file asks.
        let sandbox = match step.sandbox {
            Mode::Off => "off (bash is not confined)".to_owned(),
            Mode::ReadOnly if !support.landlock() => format!(
                "read-only, {network} (this kernel has no Landlock, so the step gets no bash)"
            ),
            Mode::Workdir if !support.landlock() => format!(
                "workdir, {network} (this kernel has no Landlock: bash can write anywhere this user can)"
            ),
            mode => format!("{}, {network}", mode.as_str()),
        };
        let _ = writeln!(out, "    {:<9}{}", "sandbox", sandbox);
        write_reads(out, step);
    }
    let mut limits = Vec::new();
    if step.command.is_none() {
        limits.push(format!("{} turns", step.settings.max_turns));
    }
    limits.push(format!(
        "timeout {}",
        format_duration(step.settings.timeout)
    ));
    if let Some(tokens) = step.settings.max_tokens {
        limits.push(format!("{tokens} tokens per reply"));
    }
    if let Some(tokens) = step.settings.max_tokens_total {
        limits.push(format!("{tokens} tokens in all"));
    }
    let _ = writeln!(out, "    {:<9}{}", "limits", limits.join(", "));
    if let Some(price) = price {
        let _ = writeln!(out, "    {:<9}{price}", "price");
    }
    out.push_str(forecast);
    if step.command.is_none() {
        let settings = &step.settings;
        let _ = writeln!(
            out,
            "    {:<9}{} tokens, compacted at {:.0}%, {}",
            "context",
            crate::units::tokens(settings.context_window),
            settings.compact_at * 100.0,
            // Unset, the default keeps up to that many while they fit under the low-water mark;
            // set, exactly that many stay whatever their size (docs/src/runs.md, "Context").
            match settings.keep_tool_results {
                Some(n) => format!("newest {n} tool results kept whole"),
                None => format!(
                    "up to {} newest tool results kept whole",
                    super::step_settings::DEFAULT_KEEP_TOOL_RESULTS
                ),
            }
        );
    }
    let mut flags = Vec::new();
    if step.isolation == Isolation::Worktree {
        flags.push("worktree".to_owned());
    }
    if step.output_schema.is_some() {
        flags.push("structured output".to_owned());
    }
    if step.continue_on_error {
        flags.push("continue on error".to_owned());
    }
    if !flags.is_empty() {
        let _ = writeln!(out, "    {:<9}{}", "runs", flags.join(", "));
    }
    if step.command.is_some() {
        return;
    }
    // `default` (the sandbox is the permission) goes without saying; the JSON always says it.
    let mode = match step.permission_mode {
        PermissionMode::Default => None,
        PermissionMode::Plan => Some("plan (read-only tools)"),
        PermissionMode::DontAsk => Some("dontAsk (a call outside its tools is refused)"),
        other => Some(other.as_str()),
    };
    if let Some(mode) = mode {
        let _ = writeln!(out, "    {:<9}{mode}", "mode");
    }
    if let Some(effort) = step.effort {
        let _ = writeln!(out, "    {:<9}{}", "effort", effort.as_str());
    }
    if let Some(memory) = step.agent_memory {
        let _ = writeln!(
            out,
            "    {:<9}{} ({})",
            "memory",
            memory.as_str(),
            memory_place(memory, &step.agent)
        );
    }
    let mut lines = step.prompt.trim_end().lines();
    let _ = writeln!(
        out,
        "    {:<9}{}",
        "prompt",
        lines.next().unwrap_or_default()
    );
    for line in lines {
        if line.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "    {:<9}{line}", "");
        }
    }
}

/// Where an agent's memory folder is, as users know it.
fn memory_place(memory: crate::agent::MemoryScope, agent: &str) -> String {
    match memory {
        crate::agent::MemoryScope::User => format!("~/{}", memory.folder(agent)),
        _ => memory.folder(agent),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The `read_paths` a step's bash may read besides what every step may.
fn write_reads(out: &mut String, step: &PlannedStep) {
    if !step.settings.read_paths.is_empty() {
        let paths: Vec<String> = step
            .settings
            .read_paths
            .iter()
            .map(|p| one_line(p))
            .collect();
        let _ = writeln!(
            out,
            "    {:<9}{} (besides the system, the toolchains and its directories)",
            "reads",
            paths.join(", ")
        );
    }
}

fn one_line(text: &str) -> String {
    if text.is_empty() {
        return "\"\"".into();
    }
    let first = text.lines().next().unwrap_or_default();
    let mut short: String = first.chars().take(60).collect();
    if short.len() < first.len() || text.lines().nth(1).is_some() {
        short.push('…');
    }
    short
}

/// A Mermaid flowchart. Ids that are not plain words get a generated node name with the id as
/// its label, so any step id draws.
pub fn to_mermaid(plan: &Plan) -> String {
    let mut out = String::from("flowchart TD\n");
    let node = |id: &str, i: usize| -> String {
        if id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !is_mermaid_keyword(id) {
            id.to_owned()
        } else {
            format!("step{i}")
        }
    };
    let names: std::collections::BTreeMap<&str, String> = plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), node(&s.id, i)))
        .collect();
    for step in plan.steps() {
        let shape = if step.condition.is_some() {
            ("{{", "}}")
        } else {
            ("[", "]")
        };
        let _ = writeln!(
            out,
            "    {}{}\"{}<br/><small>{}</small>\"{}",
            names[step.id.as_str()],
            shape.0,
            escape_mermaid(&step.id),
            escape_mermaid(&step.agent),
            shape.1
        );
    }
    for step in plan.steps() {
        for need in &step.needs {
            let _ = writeln!(
                out,
                "    {} --> {}",
                names[need.as_str()],
                names[step.id.as_str()]
            );
        }
    }
    out
}

fn is_mermaid_keyword(id: &str) -> bool {
    matches!(
        id,
        "end"
            | "graph"
            | "flowchart"
            | "subgraph"
            | "style"
            | "classDef"
            | "class"
            | "click"
            | "linkStyle"
    )
}

fn escape_mermaid(text: &str) -> String {
    text.replace('"', "#quot;")
        .replace('<', "#lt;")
        .replace('>', "#gt;")
}

/// A Graphviz DOT digraph.
pub fn to_dot(plan: &Plan) -> String {
    let mut out = format!(
        "digraph \"{}\" {{\n    rankdir=LR;\n    node [shape=box];\n",
        escape_dot(&plan.name)
    );
    for step in plan.steps() {
        let _ = writeln!(
            out,
            "    \"{}\" [label=\"{}\\n({})\"];",
            escape_dot(&step.id),
            escape_dot(&step.id),
            escape_dot(&step.agent)
        );
    }
    for step in plan.steps() {
        for need in &step.needs {
            let _ = writeln!(
                out,
                "    \"{}\" -> \"{}\";",
                escape_dot(need),
                escape_dot(&step.id)
            );
        }
    }
    out.push_str("}\n");
    out
}

fn escape_dot(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}
