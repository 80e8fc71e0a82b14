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
    },
}

pub fn prepare(
    step: &PlannedStep,
    plan: &Plan,
    record: &RunRecord,
    options: &RunOptions,
    env: &minijinja::Environment<'static>,
) -> Prepared {
    let previous = options
        .resume
        .as_ref()
        .and_then(|r| r.steps.get(&step.id))
        .filter(|s| s.status == StepStatus::Succeeded);
    let reused = |previous: &StepRecord| {
        let mut reused = previous.clone();
        // Reused within the same run (`--run-id` of a run other jobs wrote) is not "from" anywhere.
        if reused.reused_from.is_none() {
            reused.reused_from = options
                .resume
                .as_ref()
                .map(|r| r.run_id.clone())
                .filter(|id| *id != record.run_id);
        }
        Prepared::Reuse(Box::new(reused))
    };
    if !options.only.is_empty() && !options.only.contains(&step.id) {
        // Within one run spread over jobs, what another job decided stands, failures included.
        let same_run = options
            .resume
            .as_ref()
            .filter(|r| r.run_id == record.run_id)
            .and_then(|r| r.steps.get(&step.id))
            .filter(|s| s.status.is_finished());
        if let Some(decided) = same_run {
            return Prepared::Reuse(Box::new(decided.clone()));
        }
        return match previous {
            Some(previous) => reused(previous),
            None => Prepared::Ended(Outcome::Skipped(SkipReason::NotSelected)),
        };
    }
    if let Err(reason) = decide(step, record, plan, env) {
        return Prepared::Ended(Outcome::Skipped(reason));
    }
    let context = context(plan, record);
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
        return reused(previous);
    }
    Prepared::Run {
        prompt,
        fingerprint,
        env: vars,
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
    for (name, value) in &step.env {
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

/// Whether a step runs (SPEC §5): a failed need skips it (unless that need has
/// `continue_on_error`); a skipped need skips it unless it has its own `if`, which then decides.
fn decide(
    step: &PlannedStep,
    record: &RunRecord,
    plan: &Plan,
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
        return match template::evaluate(env, condition, context(plan, record)) {
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

/// The template context at this point of the run: each step that has finished (templates were
/// checked to read only upstream ones).
pub fn context(plan: &Plan, record: &RunRecord) -> JinjaValue {
    let steps: BTreeMap<&str, JinjaValue> = record
        .steps
        .iter()
        .filter(|(_, s)| s.status.is_finished())
        .map(|(id, s)| (id.as_str(), result_value(plan, id, s)))
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

/// `steps.<id>` as templates read it: the step's result.
fn result_value(plan: &Plan, id: &str, s: &StepRecord) -> JinjaValue {
    let commands: Vec<String> = plan
        .step(id)
        .map(|p| p.checks.iter().map(|c| c.command.clone()).collect())
        .unwrap_or_default();
    let checks: Vec<JinjaValue> = s
        .check_results(&commands)
        .into_iter()
        .map(|(command, passed)| minijinja::context! { command, passed })
        .collect();
    template::step_value_with(
        template::step_value(
            JinjaValue::from(s.summary.clone()),
            JinjaValue::from(s.status.as_str()),
            // A step that did not succeed has no output (validation checked that
            // reads of it are guarded).
            if s.status == StepStatus::Succeeded {
                JinjaValue::from(minijinja::value::Serde(&s.output))
            } else {
                template::Missing::value(format!("steps.{id}.output"))
            },
            // A worktree step that changed nothing made no branch: an empty string,
            // never the text `none`.
            JinjaValue::from(s.branch.clone().unwrap_or_default()),
            JinjaValue::from(s.diff.clone().unwrap_or_default()),
        ),
        JinjaValue::from(checks),
        None,
    )
}
