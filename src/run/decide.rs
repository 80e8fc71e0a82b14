//! What to do with a step whose needs are all done: skip it (a failed need, an `if`, `--only`),
//! reuse a result from the resumed run, or run it with its prompt rendered.

use std::collections::BTreeMap;

use minijinja::Value as JinjaValue;

use super::RunOptions;
use super::outcome::{Outcome, SkipReason};
use crate::plan::{Plan, PlannedStep};
use crate::record::{self, RunRecord, StepRecord, StepStatus};
use crate::session::FailureKind;
use crate::template;

pub enum Prepared {
    /// Ends without running: skipped, or failed before it could start.
    Ended(Outcome),
    Reuse(Box<StepRecord>),
    Run {
        prompt: String,
        fingerprint: String,
        /// Its `env` templates, rendered.
        env: BTreeMap<String, String>,
        /// With `--continue`: the resumed run's record of this step, which did not succeed and
        /// is unchanged: it goes on from there.
        continues: Option<Box<StepRecord>>,
    },
    /// A fan-out whose needs are done: its list is to be made into instances
    /// ([`super::fanout::expand`]) with this context and what `--only` selects of it.
    Expand {
        context: JinjaValue,
        selection: Selection,
    },
    /// A fan-out: each instance's id, item and what to do with it (never `Expand` or `FanOut`).
    FanOut(Vec<(String, serde_json::Value, Prepared)>),
}

pub fn prepare(
    step: &PlannedStep,
    plan: &Plan,
    record: &RunRecord,
    results: &Results,
    options: &RunOptions,
    env: &minijinja::Environment<'static>,
) -> Prepared {
    let earlier = options.resume.as_ref().and_then(|r| r.steps.get(&step.id));
    let previous = earlier.filter(|s| s.status == StepStatus::Succeeded);
    // `--continue`: a step that ran and did not succeed goes on from its last turn.
    let unfinished = earlier.filter(|s| {
        options.continue_steps
            && !matches!(s.status, StepStatus::Succeeded | StepStatus::Skipped)
            && s.turns > 0
    });
    let selection = Selection::of(&step.id, &options.only);
    if selection == Selection::Not {
        // Within one run spread over jobs, what another job decided stands, failures included.
        if let Some(decided) = decided_elsewhere(options, record, &step.id) {
            return Prepared::Reuse(Box::new(from_another_job(decided, record)));
        }
        return match previous {
            Some(previous) => Prepared::Reuse(Box::new(reuse(previous, options, record))),
            None => Prepared::Ended(Outcome::Skipped(SkipReason::NotSelected)),
        };
    }
    let context = results.context(plan);
    if let Err(reason) = decide(step, record, plan, &context, env) {
        return Prepared::Ended(Outcome::Skipped(reason));
    }
    if step.for_each.is_some() {
        return Prepared::Expand { context, selection };
    }
    continuing(
        prepare_one(step, context, previous, options, record, env),
        unfinished,
    )
}

/// A step (or instance) to run goes on from its earlier record when that did not succeed and
/// the step is unchanged (`--continue`).
pub fn continuing(prepared: Prepared, unfinished: Option<&StepRecord>) -> Prepared {
    match prepared {
        Prepared::Run {
            prompt,
            fingerprint,
            env,
            ..
        } => Prepared::Run {
            continues: unfinished
                .filter(|s| s.fingerprint == fingerprint)
                .map(|s| Box::new(s.clone())),
            prompt,
            fingerprint,
            env,
        },
        other => other,
    }
}

/// The steps `--only` leaves to other jobs with nothing of them here: not selected and not
/// needed (however indirectly) by a selected step, unless a resumed *other* run has their
/// result to carry on (`--resume R --only X` keeps R's results for the next `--resume`); and
/// the unselected ones with no result anywhere. Such a step is no part of this run: not in its
/// record, table or reports, and not "skipped" (docs/src/ci.md, "One run across several
/// machines").
pub fn left_out(
    plan: &Plan,
    record: &RunRecord,
    options: &RunOptions,
) -> std::collections::BTreeSet<usize> {
    let steps = plan.steps();
    let not_selected: Vec<bool> = steps
        .iter()
        .map(|s| Selection::of(&s.id, &options.only) == Selection::Not)
        .collect();
    // What the selected steps need, to the roots: shown (as reused) in the job's reports.
    let mut needed = std::collections::BTreeSet::new();
    let mut stack: Vec<usize> = (0..steps.len()).filter(|&i| !not_selected[i]).collect();
    while let Some(i) = stack.pop() {
        for &need in plan.needs_of(i) {
            if needed.insert(need) {
                stack.push(need);
            }
        }
    }
    let same_run = options
        .resume
        .as_ref()
        .is_some_and(|r| r.run_id == record.run_id);
    (0..steps.len())
        .filter(|&i| not_selected[i] && !needed.contains(&i))
        .filter(|&i| {
            let step = &steps[i];
            let earlier = options.resume.as_ref().and_then(|r| r.steps.get(&step.id));
            let carried = !same_run && earlier.is_some_and(|s| s.status == StepStatus::Succeeded);
            !carried
        })
        .chain((0..steps.len()).filter(|&i| {
            not_selected[i]
                && decided_elsewhere(options, record, &steps[i].id).is_none()
                && !options
                    .resume
                    .as_ref()
                    .and_then(|r| r.steps.get(&steps[i].id))
                    .is_some_and(|s| s.status == StepStatus::Succeeded)
        }))
        .collect()
}

/// What `--only` selects of a step: all of it, some of its instances (`X[1]`), or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    All,
    Instances(std::collections::BTreeSet<String>),
    Not,
}

impl Selection {
    fn of(id: &str, only: &std::collections::BTreeSet<String>) -> Self {
        if only.is_empty() || only.contains(id) {
            return Selection::All;
        }
        let instances: std::collections::BTreeSet<String> = only
            .iter()
            .filter(|o| crate::plan::verified::split_instance(o).is_some_and(|(s, _)| s == id))
            .cloned()
            .collect();
        if instances.is_empty() {
            Selection::Not
        } else {
            Selection::Instances(instances)
        }
    }
}

/// The result another job of the same run (`--run-id`) recorded for `id`, if it finished.
pub fn decided_elsewhere<'a>(
    options: &'a RunOptions,
    record: &RunRecord,
    id: &str,
) -> Option<&'a StepRecord> {
    let resumed = options
        .resume
        .as_ref()
        .filter(|r| r.run_id == record.run_id)?;
    let found = match crate::plan::verified::split_instance(id) {
        Some((step, _)) => resumed
            .steps
            .get(step)?
            .instances
            .iter()
            .find(|i| i.instance.as_deref() == Some(id)),
        None => resumed.steps.get(id),
    };
    found.filter(|s| s.status.is_finished())
}

/// What another job of this run decided, taken over: marked as reused (from this run), so the
/// job's table, lines and totals show it as not done here.
pub fn from_another_job(decided: &StepRecord, record: &RunRecord) -> StepRecord {
    let mut reused = decided.clone();
    reused
        .reused_from
        .get_or_insert_with(|| record.run_id.clone());
    reused
}

/// An earlier result taken over, saying where from.
pub fn reuse(previous: &StepRecord, options: &RunOptions, record: &RunRecord) -> StepRecord {
    let mut reused = previous.clone();
    // Reused within the same run (`--run-id` of a run other jobs wrote) is not "from" anywhere.
    if reused.reused_from.is_none() {
        reused.reused_from = options
            .resume
            .as_ref()
            .map(|r| r.run_id.clone())
            .filter(|id| *id != record.run_id);
    }
    reused
}

/// One step (or one instance, with its `item` in `context`) that will run: its prompt and
/// `env` rendered, or the earlier result with the same fingerprint reused.
pub fn prepare_one(
    step: &PlannedStep,
    context: JinjaValue,
    previous: Option<&StepRecord>,
    options: &RunOptions,
    record: &RunRecord,
    env: &minijinja::Environment<'static>,
) -> Prepared {
    let prompt = match template::render(env, &step.prompt_template, context.clone()) {
        Ok(prompt) => prompt,
        Err(err) => {
            return Prepared::Ended(Outcome::failed(
                FailureKind::Template,
                format!(
                    "the prompt does not render: {}",
                    template::describe_error(&err)
                ),
            ));
        }
    };
    let vars = match render_env(step, env, &context) {
        Ok(vars) => vars,
        Err(outcome) => return Prepared::Ended(outcome),
    };
    let fingerprint = record::fingerprint(step, &prompt, &vars);
    if options.only.is_empty()
        && let Some(previous) = previous
        && previous.fingerprint == fingerprint
    {
        return Prepared::Reuse(Box::new(reuse(previous, options, record)));
    }
    Prepared::Run {
        prompt,
        fingerprint,
        env: vars,
        continues: None,
    }
}

/// The step's `env` values that are templates, rendered with the step's context. What they
/// produce is taken as text: an upstream summary holding `$(…)` or `${VAR}` reaches the command
/// as a value, never as shell or a variable to expand.
pub fn render_env(
    step: &PlannedStep,
    env: &minijinja::Environment<'static>,
    context: &JinjaValue,
) -> Result<BTreeMap<String, String>, Outcome> {
    let mut vars = BTreeMap::new();
    for (name, value) in &step.settings.env {
        if !template::is_template(value) {
            continue;
        }
        let rendered = template::render(env, value, context.clone()).map_err(|err| {
            Outcome::failed(
                FailureKind::Template,
                format!(
                    "`env.{name}` does not render: {}",
                    template::describe_error(&err)
                ),
            )
        })?;
        vars.insert(name.clone(), rendered);
    }
    Ok(vars)
}

/// Whether a step runs (docs/src/runs.md "Scheduling and failures"): a failed need skips it (unless that need
/// has `continue_on_error`); a skipped need skips it unless it has its own `if`, which then
/// decides.
fn decide(
    step: &PlannedStep,
    record: &RunRecord,
    plan: &Plan,
    context: &JinjaValue,
    env: &minijinja::Environment<'static>,
) -> Result<(), SkipReason> {
    let status_of = |id: &str| record.steps.get(id).map(|r| r.status);
    let tolerates = |id: &str| plan.step(id).is_some_and(|s| s.continue_on_error);
    let failed: Vec<String> = step
        .needs
        .iter()
        .filter(|need| match status_of(need) {
            Some(StepStatus::Succeeded | StepStatus::Skipped) => false,
            Some(StepStatus::Failed) => !tolerates(need),
            _ => true,
        })
        .cloned()
        .collect();
    if !failed.is_empty() {
        return Err(SkipReason::NeedsFailed(failed));
    }
    if let Some(condition) = &step.condition {
        return match template::evaluate(env, condition, context.clone()) {
            Ok(true) => Ok(()),
            Ok(false) => Err(SkipReason::ConditionFalse(condition.clone())),
            Err(err) => Err(SkipReason::ConditionError(template::describe_error(&err))),
        };
    }
    let skipped: Vec<String> = step
        .needs
        .iter()
        .filter(|need| status_of(need) == Some(StepStatus::Skipped))
        .cloned()
        .collect();
    if skipped.is_empty() {
        Ok(())
    } else {
        Err(SkipReason::NeedsSkipped(skipped))
    }
}

/// The results templates read, kept as steps finish: each is made into a template value once,
/// not again for every step that starts after it.
#[derive(Debug, Default)]
pub struct Results {
    steps: BTreeMap<String, JinjaValue>,
}

impl Results {
    /// Keeps what step `id` left, once it has finished.
    pub fn settle(&mut self, plan: &Plan, id: &str, record: &StepRecord) {
        if record.status.is_finished() {
            self.steps
                .insert(id.to_owned(), result_value(plan, id, record));
        }
    }

    /// The template context at this point of the run: each step that has finished (templates
    /// were checked to read only upstream ones).
    pub fn context(&self, plan: &Plan) -> JinjaValue {
        let steps: BTreeMap<&str, JinjaValue> = self
            .steps
            .iter()
            .map(|(id, value)| (id.as_str(), value.clone()))
            .collect();
        let inputs: BTreeMap<&str, JinjaValue> = plan
            .inputs
            .iter()
            .map(|(k, v)| (k.as_str(), JinjaValue::from(v.as_str())))
            .collect();
        template::context(
            inputs,
            &plan.name,
            plan.description.as_deref(),
            JinjaValue::from(steps),
        )
    }
}

/// `steps.<id>` as templates read it: the step's result, or for a fan-out step the list of its
/// instances' results.
fn result_value(plan: &Plan, id: &str, s: &StepRecord) -> JinjaValue {
    if plan.step(id).is_some_and(|p| p.for_each.is_some()) {
        let list: Vec<JinjaValue> = s
            .instances
            .iter()
            .map(|instance| {
                let key = instance.instance.as_deref().unwrap_or(id);
                one_result(plan, id, key, instance, instance.item.clone())
            })
            .collect();
        return JinjaValue::from(list);
    }
    one_result(plan, id, id, s, None)
}

/// One result: `id` is the step whose checks it ran, `name` what a missing output is called.
fn one_result(
    plan: &Plan,
    id: &str,
    name: &str,
    s: &StepRecord,
    item: Option<serde_json::Value>,
) -> JinjaValue {
    let commands: Vec<String> = plan
        .step(id)
        .filter(|p| !p.checks.is_empty())
        .map(|p| p.checks.iter().map(|c| c.command.clone()).collect())
        .unwrap_or_default();
    let checks: Vec<JinjaValue> = if commands.is_empty() {
        Vec::new()
    } else {
        s.check_results(&commands)
            .into_iter()
            .map(|(command, passed)| minijinja::context! { command, passed })
            .collect()
    };
    template::step_value_with(
        template::step_value(
            JinjaValue::from(s.summary.clone()),
            JinjaValue::from(s.status.as_str()),
            // A step that did not succeed has no output (validation checked that
            // reads of it are guarded).
            if s.status == StepStatus::Succeeded {
                JinjaValue::from(minijinja::value::Serde(&s.output))
            } else {
                template::Missing::value(format!("steps.{name}.output"))
            },
            // A worktree step that changed nothing made no branch: an empty string,
            // never the text `none`.
            JinjaValue::from(s.branch.clone().unwrap_or_default()),
            JinjaValue::from(s.diff.clone().unwrap_or_default()),
        ),
        JinjaValue::from(checks),
        item.map(|item| JinjaValue::from(minijinja::value::Serde(item))),
    )
}
