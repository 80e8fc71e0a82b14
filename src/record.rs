//! `run.json`: what happened in a run, written after every step so an interrupted run keeps what
//! finished. It lives low in the tree: the scheduler keeps the one record, events carry it, and
//! sinks (the file, the reports) only show it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use sha2::{Digest, Sha256};

use crate::plan::{Plan, PlannedStep};
use crate::provider::message::Usage;

pub mod planned;
mod waits;
pub use waits::{Percentiles, QueueWaits};

/// What defines a step for `--resume`: everything that decides what it does or sees (agent,
/// model, tools, system prompt, the rendered prompt and `env`, output schema, isolation, sandbox,
/// command, checks, subagents, MCP servers, project memory, the agent file's effort, permission
/// mode and memory) and every resolved setting but the
/// limits ([`crate::plan::StepSettings::fingerprinted`]). A step that succeeded with the same
/// fingerprint is reused.
pub fn fingerprint(
    step: &PlannedStep,
    prompt: &str,
    env: &std::collections::BTreeMap<String, String>,
) -> String {
    let mut what = serde_json::json!({
        "agent": step.agent,
        "model": step.model_label(),
        "tools": step.tools,
        "system_prompt": step.system_prompt,
        "output_schema": step.output_schema,
        "isolation": step.isolation.as_str(),
        "sandbox": step.sandbox.as_str(),
        "prompt": prompt,
        "env": env,
        "command": step.command,
        "checks": step.checks.iter().map(|c| &c.command).collect::<Vec<_>>(),
        "check_retries": step.check_retries,
        "subagents": step.subagents,
        "mcp_servers": step.mcp_servers,
        "project_memory": step.project_memory,
        "settings": step.settings.fingerprinted(),
    });
    // What an agent file adds, only when set: fingerprints of steps without it stay as they were.
    if let Some(map) = what.as_object_mut() {
        if let Some(effort) = step.effort {
            map.insert("effort".into(), effort.as_str().into());
        }
        if step.permission_mode != crate::agent::PermissionMode::Default {
            map.insert(
                "permission_mode".into(),
                step.permission_mode.as_str().into(),
            );
        }
        if let Some(memory) = step.agent_memory {
            map.insert("agent_memory".into(), memory.as_str().into());
        }
    }
    Sha256::digest(what.to_string().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Succeeded,
    Failed,
    Interrupted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    Pending,
    Running,
    Succeeded,
    Failed,
    Skipped,
    Cancelled,
}

impl StepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::Running => "running",
            StepStatus::Succeeded => "succeeded",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
            StepStatus::Cancelled => "cancelled",
        }
    }

    pub fn is_finished(self) -> bool {
        !matches!(self, StepStatus::Pending | StepStatus::Running)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub status: StepStatus,
    pub summary: String,
    pub output: Value,
    pub error: Option<String>,
    pub model: String,
    /// The step's agent: what the history of a step is matched by, with its id
    /// (`run::history`). Empty in records of older runners and in a fan-out's instances.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub agent: String,
    pub turns: u32,
    pub tool_calls: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub duration_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The worktree of a step that did not succeed, kept because it holds work: where it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
    /// Unified diff of a worktree step against its base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// Hash of what defines the step (agent, model, tools, rendered prompt); `--resume` reuses a
    /// success only when it is unchanged.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fingerprint: String,
    /// The run this result was taken from, when `--resume` reused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused_from: Option<String>,
    /// The run whose conversation this step went on from (`--resume RUN --continue`): its
    /// transcript holds the earlier turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_from: Option<String>,
    /// Some of its tokens are estimated: a reply cut off while it streamed (by `timeout` or an
    /// interrupt) is counted from what had streamed (docs/src/runs.md "Scheduling and failures").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tokens_estimated: bool,
    /// Subagents the step started with `task`, in the order they finished. Their tokens are in
    /// the step's counts too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<SubagentRecord>,
    /// USD, subagents included, when a model the step used has a price (`[prices]`, else
    /// LiteLLM's map: `provider::known::Prices`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Every run of the step's checks, round by round.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckRecord>,
    /// The step used its last allowed turn: that turn offered no tools and asked for the final
    /// answer with what the agent had (docs/src/runs.md, "Agents that loop or run out of turns").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ran_out_of_turns: bool,
    /// Times the step's conversation was compacted to fit its window (docs/src/runs.md,
    /// "Context that lasts").
    #[serde(default, skip_serializing_if = "is_zero")]
    pub compactions: u32,
    /// Replayed requests of the step (its subagents' included) that differed from their
    /// recording and were answered all the same (docs/src/ci.md "Record and replay").
    #[serde(default, skip_serializing_if = "is_zero")]
    pub replay_drift: u32,
    /// When it started (UTC), and how long it waited for a slot (`max_parallel`) once every
    /// step it needs was done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_ms: Option<u64>,
    /// A fan-out instance's id (`X[0]`), in its step's `instances`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// A fan-out instance's item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<Value>,
    /// A fan-out step's instances, in the order of its list. The step's own counts are theirs
    /// summed (what this run did).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<StepRecord>,
}

/// One run of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckRecord {
    pub command: String,
    /// 1 after the first final answer, 2 after the first failure went back, ...
    pub round: u32,
    /// `None` when it timed out or was killed by a signal.
    pub exit_code: Option<i32>,
    pub passed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    pub duration_ms: u64,
    /// When it started (UTC): where `runner report` draws it on the step's timeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
}

impl StepRecord {
    /// Its counts as one usage (subagents included, as the counts are).
    pub fn usage(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cache_creation_input_tokens: self.cache_creation_input_tokens,
            cache_read_input_tokens: self.cache_read_input_tokens,
        }
    }

    /// A record of a step that has not started, on `model`.
    pub fn pending(model: &str) -> Self {
        StepRecord {
            status: StepStatus::Pending,
            summary: String::new(),
            output: Value::Null,
            error: None,
            model: model.to_owned(),
            agent: String::new(),
            turns: 0,
            tool_calls: 0,
            input_tokens: 0,
            output_tokens: 0,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
            duration_ms: 0,
            branch: None,
            worktree: None,
            diff: None,
            fingerprint: String::new(),
            reused_from: None,
            continued_from: None,
            tokens_estimated: false,
            subagents: Vec::new(),
            cost_usd: None,
            checks: Vec::new(),
            ran_out_of_turns: false,
            compactions: 0,
            replay_drift: 0,
            started_at: None,
            queue_ms: None,
            instance: None,
            item: None,
            instances: Vec::new(),
        }
    }

    /// A pending record of a fan-out instance.
    pub fn pending_instance(model: &str, id: &str, item: &Value) -> Self {
        StepRecord {
            instance: Some(id.to_owned()),
            item: Some(item.clone()),
            ..StepRecord::pending(model)
        }
    }

    /// Settles a fan-out step from its instances: succeeded when every one did (an empty list
    /// included), failed when one failed, cancelled when one was; skipped when one was (the
    /// instances `--only` leaves to other jobs are not in the list). Counts are what this run
    /// did; `reused_from` is set when every instance was reused.
    pub fn settle_fan_out(&mut self, instances: Vec<StepRecord>, duration_ms: u64) {
        let count = |status: StepStatus| instances.iter().filter(|r| r.status == status).count();
        let (failed, cancelled, skipped) = (
            count(StepStatus::Failed),
            count(StepStatus::Cancelled),
            count(StepStatus::Skipped),
        );
        self.status = if cancelled > 0 {
            StepStatus::Cancelled
        } else if failed > 0 {
            StepStatus::Failed
        } else if skipped > 0 {
            StepStatus::Skipped
        } else {
            StepStatus::Succeeded
        };
        let mut parts = vec![format!("{} succeeded", count(StepStatus::Succeeded))];
        for (n, word) in [
            (failed, "failed"),
            (cancelled, "cancelled"),
            (skipped, "skipped"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {word}"));
            }
        }
        let plural = if instances.len() == 1 { "" } else { "s" };
        self.summary = format!("{} instance{plural}: {}", instances.len(), parts.join(", "));
        self.error = instances
            .iter()
            .find(|r| matches!(r.status, StepStatus::Failed | StepStatus::Cancelled))
            .or_else(|| instances.iter().find(|r| r.status == StepStatus::Skipped))
            .map(|r| {
                format!(
                    "{}: {}",
                    r.instance.as_deref().unwrap_or("an instance"),
                    r.error.as_deref().unwrap_or(r.status.as_str())
                )
            });
        self.output = Value::Null;
        let here: Vec<&StepRecord> = instances
            .iter()
            .filter(|r| r.reused_from.is_none())
            .collect();
        self.turns = here.iter().map(|r| r.turns).sum();
        self.tool_calls = here.iter().map(|r| r.tool_calls).sum();
        self.replay_drift = here.iter().map(|r| r.replay_drift).sum();
        let sum = |f: fn(&StepRecord) -> u64| crate::units::sum(here.iter().map(|r| f(r)));
        self.input_tokens = sum(|r| r.input_tokens);
        self.output_tokens = sum(|r| r.output_tokens);
        self.cache_creation_input_tokens = sum(|r| r.cache_creation_input_tokens);
        self.cache_read_input_tokens = sum(|r| r.cache_read_input_tokens);
        self.cost_usd = here.iter().filter_map(|r| r.cost_usd).reduce(|a, b| a + b);
        self.reused_from = match instances.first() {
            Some(first) if here.is_empty() => first.reused_from.clone(),
            _ => None,
        };
        self.duration_ms = duration_ms;
        self.instances = instances;
    }

    /// `steps.X.checks` as templates read it: each check of the last round, whether it passed
    /// (one not reached after an earlier failure did not).
    pub fn check_results(&self, commands: &[String]) -> Vec<(String, bool)> {
        let last = self.checks.iter().map(|c| c.round).max().unwrap_or(0);
        commands
            .iter()
            .map(|command| {
                let passed = self
                    .checks
                    .iter()
                    .any(|c| c.round == last && c.passed && &c.command == command);
                (command.clone(), passed)
            })
            .collect()
    }
}

/// One subagent of a step (docs/src/delegation.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubagentRecord {
    /// `explore#2`.
    pub id: String,
    pub agent: String,
    pub model: String,
    pub status: StepStatus,
    pub turns: u32,
    pub tool_calls: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Cache writes and reads, as a step's record counts them (not in `input_tokens`).
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    pub duration_ms: u64,
    pub error: Option<String>,
    /// How long it waited for a slot of the run's `max_subagents`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_ms: Option<u64>,
}

impl SubagentRecord {
    /// Its counts as one usage.
    pub fn usage(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cache_creation_input_tokens: self.cache_creation_input_tokens,
            cache_read_input_tokens: self.cache_read_input_tokens,
        }
    }

    /// Every token it sent and received, cached or not: what its facts line and its progress
    /// line both say.
    pub fn total_tokens(&self) -> u64 {
        crate::units::sum([
            self.input_tokens,
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
            self.output_tokens,
        ])
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub workflow: String,
    pub status: RunStatus,
    pub started_at: String,
    pub duration_ms: u64,
    /// The runner that recorded it (`runner --version`).
    #[serde(default)]
    pub runner_version: String,
    /// The inputs the run was given, defaults filled in (redacted like everything runner
    /// writes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, String>,
    pub steps: BTreeMap<String, StepRecord>,
    /// Each step's `needs`, from the plan (steps that need none are left out): the graph that
    /// `runner report` draws without reading the workflow again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub needs: BTreeMap<String, Vec<String>>,
    /// USD across the steps that have a cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Replayed requests that differed from their recording, across the steps this run did.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub replay_drift: u32,
    /// How long steps, fan-out instances and subagents waited for a slot: median, 90th and
    /// 99th percentile (absent in records of older runners, and when nothing started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_waits: Option<QueueWaits>,
    /// Answered from cassettes (`--replay`): what its replies are priced at was not paid, so
    /// the daily budget does not count it (docs/src/budgets.md "Daily budget").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// What the plan said of each step (model, checks, sandbox, forecast), for `runner audit`
    /// (docs/src/audit.md); absent in records of older runners.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub planned: BTreeMap<String, planned::Planned>,
    /// The run's forecast cost, when every step had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast_usd: Option<planned::CostRange>,
    /// Whether this user's seal is on the record as it was read (`run::records`): only such a
    /// run is `latest`. Never in the file: the seal is.
    #[serde(skip)]
    pub recorded_here: bool,
    /// The first failure to write the state directory (`run.json`, a transcript). It stops the
    /// run and fails it; it cannot be in the file it failed to write, so it is not serialized.
    #[serde(skip)]
    pub storage_error: Option<String>,
}

/// Whether `id` could be a step id runner recorded: a step's (a letter or `_`, then letters,
/// digits, `_`, `-`), or a fan-out instance's `X[key]` (its key letters, digits, `_`, `-`, `.`).
/// Never a path: run directories hold a folder by this name (docs/src/runs.md).
pub fn is_step_id(id: &str) -> bool {
    let plain = |s: &str| {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
    };
    match crate::plan::verified::split_instance(id) {
        Some((step, key)) => {
            plain(step)
                && !key.is_empty()
                && key.len() <= 200
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        }
        None => plain(id) && id.len() <= 200,
    }
}

impl RunRecord {
    /// Every id this record holds is an id, and every branch one of this run's: a record read
    /// back names folders (`steps/<id>/`) and branches (`runner/<run>/<step>`), and one made by
    /// hand may hold `../..` or another branch (docs/src/runs.md "Resume").
    pub fn check_ids(&self) -> Result<(), String> {
        if !is_run_id(&self.run_id) {
            return Err(format!(
                "its run id `{}` is not a run id",
                crate::terminal::clean(&self.run_id)
            ));
        }
        let own = format!("runner/{}/", self.run_id);
        let branch_ok = |step: &str, branch: &Option<String>| match branch {
            None => true,
            Some(branch) => branch.strip_prefix(&own).is_some_and(|tree| {
                // `X` for a step, `X.k` for instance k of `X`.
                tree == step
                    || tree.strip_prefix(step).is_some_and(|k| {
                        k.strip_prefix('.')
                            .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
                    })
            }),
        };
        for (id, step) in &self.steps {
            if !is_step_id(id) || crate::plan::verified::split_instance(id).is_some() {
                return Err(format!(
                    "its step id `{}` is not a step id",
                    crate::terminal::clean(id)
                ));
            }
            let branches =
                std::iter::once(&step.branch).chain(step.instances.iter().map(|i| &i.branch));
            if let Some(branch) = branches.into_iter().find(|b| !branch_ok(id, b)) {
                return Err(format!(
                    "step `{id}` names the branch `{}`, not one of this run's (`{own}{id}`)",
                    crate::terminal::clean(branch.as_deref().unwrap_or_default())
                ));
            }
            for instance in &step.instances {
                if let Some(name) = &instance.instance
                    && !(is_step_id(name)
                        && crate::plan::verified::split_instance(name)
                            .is_some_and(|(of, _)| of == id))
                {
                    return Err(format!(
                        "step `{id}` holds the instance `{}`, not one of its own",
                        crate::terminal::clean(name)
                    ));
                }
            }
        }
        for (id, needs) in &self.needs {
            if let Some(bad) = std::iter::once(id).chain(needs).find(|n| !is_step_id(n)) {
                return Err(format!(
                    "its needs name `{}`, not a step id",
                    crate::terminal::clean(bad)
                ));
            }
        }
        Ok(())
    }
}

/// Whether `id` could be a run id runner made: letters, digits, `.`, `_`, `-`.
pub fn is_run_id(id: &str) -> bool {
    // Also a valid part of a git branch name (`runner/<run id>/<step>`): no `..`, no trailing
    // `.` or `.lock` (git check-ref-format).
    !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('.')
        && !id.ends_with('.')
        && !id.ends_with(".lock")
        && !id.contains("..")
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// A fresh run id: UTC to the millisecond, so ids sort by start time (two runs in one second
/// included), and a random suffix.
pub fn new_run_id() -> String {
    let now = jiff::Timestamp::now();
    format!(
        "{}{:03}-{:04x}",
        now.strftime("%Y%m%dT%H%M%S"),
        now.subsec_millisecond(),
        rand::random::<u16>()
    )
}

impl RunRecord {
    /// A fresh record for `plan`, named `run_id` or, by default, by the UTC start time.
    pub fn new(plan: &Plan, run_id: Option<&str>) -> Self {
        let run_id = run_id.map_or_else(new_run_id, str::to_owned);
        let steps = plan
            .steps()
            .iter()
            .map(|s| {
                let step = StepRecord {
                    agent: s.agent.clone(),
                    ..StepRecord::pending(&s.model_label())
                };
                (s.id.clone(), step)
            })
            .collect();
        Self {
            workflow: plan.name.clone(),
            status: RunStatus::Running,
            started_at: jiff::Timestamp::now().to_string(),
            duration_ms: 0,
            runner_version: env!("CARGO_PKG_VERSION").to_owned(),
            inputs: plan.inputs.clone(),
            recorded_here: false,
            run_id,
            steps,
            needs: plan
                .steps()
                .iter()
                .filter(|s| !s.needs.is_empty())
                .map(|s| (s.id.clone(), s.needs.clone()))
                .collect(),
            cost_usd: None,
            replay_drift: 0,
            queue_waits: None,
            replayed: false,
            planned: BTreeMap::new(),
            forecast_usd: None,
            storage_error: None,
        }
    }

    /// The record of a step of the plan.
    pub fn step_mut(&mut self, id: &str) -> &mut StepRecord {
        // Invariant: `new` made an entry for every step of the plan, and callers only pass ids
        // from that plan (the scheduler removes the steps `--only` leaves out, and never asks
        // for them).
        self.steps
            .get_mut(id)
            .expect("every planned step has a record")
    }

    /// Its steps in plan order, the order `runner plan` shows them: by wave (one past the latest
    /// wave of the steps a step needs), then by id, as the plan is sealed. Computed from `needs`,
    /// so a record from any version reads in the same order.
    pub fn in_plan_order(&self) -> Vec<(&String, &StepRecord)> {
        let mut wave: BTreeMap<&str, usize> = self.steps.keys().map(|k| (k.as_str(), 0)).collect();
        // A record runner wrote is acyclic (its plan was); one edited by hand into a cycle
        // stops after as many passes as it has steps.
        for _ in 0..self.steps.len() {
            let mut changed = false;
            for id in self.steps.keys() {
                let want = self
                    .needs
                    .get(id)
                    .into_iter()
                    .flatten()
                    .filter_map(|n| wave.get(n.as_str()).map(|w| w + 1))
                    .max()
                    .unwrap_or(0)
                    .min(self.steps.len());
                if wave.get(id.as_str()) != Some(&want) {
                    wave.insert(id, want);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let mut steps: Vec<(&String, &StepRecord)> = self.steps.iter().collect();
        steps.sort_by_key(|(id, _)| (wave.get(id.as_str()).copied().unwrap_or(0), id.as_str()));
        steps
    }

    /// The steps no other step needs, in plan order: what the run found (docs/src/runs.md
    /// "The answer").
    pub fn leaves(&self) -> Vec<(&String, &StepRecord)> {
        let needed: std::collections::BTreeSet<&str> =
            self.needs.values().flatten().map(String::as_str).collect();
        self.in_plan_order()
            .into_iter()
            .filter(|(id, _)| !needed.contains(id.as_str()))
            .collect()
    }

    /// The steps this run did itself (not reused from an earlier run): what its totals count.
    pub fn done_here(&self) -> impl Iterator<Item = &StepRecord> {
        self.steps.values().filter(|s| s.reused_from.is_none())
    }

    /// The tokens of the steps this run did itself.
    pub fn usage_here(&self) -> Usage {
        let mut usage = Usage::default();
        for step in self.done_here() {
            usage.add(&step.usage());
        }
        usage
    }

    /// Settles the run's status: interrupted, failed (a step failed without
    /// `continue_on_error`, or was cancelled by `--fail-fast`), or succeeded.
    /// Settles the run's status. With `--only`, only the selected steps count: a job that runs
    /// one step of a bigger run reports that step.
    pub fn finish(
        &mut self,
        elapsed: Duration,
        interrupted: bool,
        plan: &Plan,
        only: &std::collections::BTreeSet<String>,
    ) {
        self.duration_ms = elapsed.as_millis() as u64;
        self.cost_usd = self
            .done_here()
            .filter_map(|s| s.cost_usd)
            .reduce(|a, b| a + b);
        self.replay_drift = self.done_here().map(|s| s.replay_drift).sum();
        self.queue_waits = QueueWaits::of(self);
        for step in self.steps.values_mut() {
            if !step.status.is_finished() {
                step.status = StepStatus::Cancelled;
            }
        }
        let tolerated = |id: &str| plan.step(id).is_some_and(|s| s.continue_on_error);
        // `--only X[1]` counts step `X`: its instance's failure is this job's failure.
        let counted = |id: &str| {
            only.is_empty()
                || only.contains(id)
                || only.iter().any(|o| crate::plan::verified::step_of(o) == id)
        };
        let failed = self
            .steps
            .iter()
            .filter(|(id, _)| counted(id))
            .any(|(id, s)| {
                (s.status == StepStatus::Failed && !tolerated(id))
                    || s.status == StepStatus::Cancelled
            });
        self.status = if interrupted {
            RunStatus::Interrupted
        } else if failed || self.storage_error.is_some() {
            RunStatus::Failed
        } else {
            RunStatus::Succeeded
        };
    }

    /// The record as JSON, every known secret hidden.
    /// The record of a run that ends at once (a second Ctrl-C): interrupted, and what was still
    /// going cancelled, as the normal end would have recorded them.
    pub fn abandon(&mut self) {
        self.status = RunStatus::Interrupted;
        for step in self.steps.values_mut() {
            for instance in &mut step.instances {
                if !instance.status.is_finished() {
                    instance.status = StepStatus::Cancelled;
                }
            }
            if !step.status.is_finished() {
                step.status = StepStatus::Cancelled;
            }
        }
    }

    pub fn to_json(&self) -> String {
        crate::secrets::redact_owned(crate::terminal::to_json_pretty(self).unwrap_or_default())
    }

    /// Writes `run.json` in the run's folder, whole (a new file renamed over it, through the
    /// confined writer: a link there is replaced, never followed), sealed with this user's key
    /// over what it holds (`run::seal`; without a key it is written unsealed, and is nobody's).
    /// The one place it is written: the sealed text is exactly the bytes that land on disk.
    pub fn save(&self, run_dir: &crate::out::OutDir) -> Result<(), String> {
        let redacted = crate::out::Redacted::new(
            crate::terminal::to_json_pretty(self)
                .unwrap_or_default()
                .into_bytes(),
        );
        let (text, _unsealed) =
            crate::run::seal::seal(String::from_utf8_lossy(redacted.as_bytes()).into_owned());
        // Redacting what was redacted changes nothing: the seal still covers these bytes.
        run_dir
            .write_redacted("run.json", &crate::out::Redacted::new(text.into_bytes()))
            .map_err(|err| err.to_string())
    }
}

impl RunRecord {
    /// Writes `run.json` as [`RunRecord::save`] does, without this user's seal: a run made of
    /// records other machines wrote (`runner gather`), which this user vouches for no more than
    /// for them (docs/src/runs.md "Resume").
    pub fn save_unsealed(&self, run_dir: &crate::out::OutDir) -> Result<(), String> {
        let redacted = crate::out::Redacted::new(
            crate::terminal::to_json_pretty(self)
                .unwrap_or_default()
                .into_bytes(),
        );
        run_dir
            .write_redacted("run.json", &redacted)
            .map_err(|err| err.to_string())
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
