//! `for_each` at run time (docs/src/verified-steps.md): the list is evaluated once the step's needs
//! are done, each item becomes an instance (`X[0]`, or `X[<key>]`) with `item` and
//! `item_index` in its context, and each instance is prepared like a step of its own: reused
//! from the resumed run when its fingerprint is unchanged, left to another job by `--only`, or
//! run.

use minijinja::Value as JinjaValue;
use serde_json::Value;

use super::RunOptions;
use super::decide::{Prepared, Selection, decided_elsewhere, from_another_job, prepare_one, reuse};
use super::outcome::{Outcome, SkipReason};
use crate::plan::verified::instance_ids;
use crate::plan::{ForEachSource, PlannedStep};
use crate::record::{RunRecord, StepRecord, StepStatus};
use crate::session::FailureKind;
use crate::template;

// Over 80 lines: a fan-out's list read, checked, keyed and bounded in one pass with one message per
// failure.
/// The instances of `step`, each prepared; or how the step ends when its list cannot be made.
pub fn expand(
    step: &PlannedStep,
    context: JinjaValue,
    selection: &Selection,
    options: &RunOptions,
    record: &RunRecord,
    env: &minijinja::Environment<'static>,
) -> Prepared {
    let Some(for_each) = &step.for_each else {
        return Prepared::Ended(Outcome::failed(
            FailureKind::FanOut,
            "the step has no `for_each`",
        ));
    };
    let items = match &for_each.source {
        ForEachSource::Items(items) => items.clone(),
        ForEachSource::Expression(expression) => {
            match template::evaluate_value(env, expression, context.clone()) {
                Ok(Value::Array(items)) => items,
                Ok(other) => {
                    return Prepared::Ended(Outcome::failed(
                        FailureKind::FanOut,
                        format!(
                            "`for_each` gave {}, not a list",
                            crate::limits::preview(&other.to_string(), 80)
                        ),
                    ));
                }
                Err(err) => {
                    return Prepared::Ended(Outcome::failed(
                        FailureKind::FanOut,
                        format!(
                            "`for_each` does not evaluate: {}",
                            template::describe_error(&err)
                        ),
                    ));
                }
            }
        }
    };
    if items.len() > for_each.max_instances as usize {
        return Prepared::Ended(Outcome::failed(
            FailureKind::FanOut,
            format!(
                "`for_each` gave {} items, more than `max_instances` ({}); raise `max_instances` or narrow the list",
                items.len(),
                for_each.max_instances
            ),
        ));
    }
    let ids = match instance_ids(&step.id, &items, for_each.key.as_deref()) {
        Ok(ids) => ids,
        Err(why) => return Prepared::Ended(Outcome::failed(FailureKind::FanOut, why)),
    };
    // `--only X[7]` naming an instance the list does not have selects nothing: say so, rather
    // than skip every instance and call the run a success.
    if let Selection::Instances(chosen) = selection {
        let missing: Vec<&String> = chosen.iter().filter(|c| !ids.contains(c)).collect();
        if !missing.is_empty() {
            let have = if ids.is_empty() {
                "none (the list is empty)".to_owned()
            } else {
                crate::limits::preview(&ids.join(", "), 200)
            };
            return Prepared::Ended(Outcome::failed(
                FailureKind::FanOut,
                format!(
                    "--only {}: step `{}` has no such instance; it has {have}",
                    missing
                        .iter()
                        .map(|m| m.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    step.id
                ),
            ));
        }
    }
    // Instances of the resumed run that succeeded, whatever became of the step as a whole.
    let earlier = options.resume.as_ref().and_then(|r| r.steps.get(&step.id));
    let mut instances = Vec::with_capacity(items.len());
    for (index, (id, item)) in ids.into_iter().zip(items).enumerate() {
        let previous: Option<&StepRecord> = earlier.and_then(|e| {
            e.instances.iter().find(|i| {
                i.instance.as_deref() == Some(id.as_str()) && i.status == StepStatus::Succeeded
            })
        });
        let prepared = match selection {
            Selection::Instances(chosen) if !chosen.contains(&id) => {
                match (decided_elsewhere(options, record, &id), previous) {
                    (Some(decided), _) => {
                        Prepared::Reuse(Box::new(from_another_job(decided, record)))
                    }
                    (None, Some(previous)) => {
                        Prepared::Reuse(Box::new(reuse(previous, options, record)))
                    }
                    (None, None) => Prepared::Ended(Outcome::Skipped(SkipReason::NotSelected)),
                }
            }
            _ => {
                let context = template::with_item(
                    context.clone(),
                    JinjaValue::from(minijinja::value::Serde(&item)),
                    JinjaValue::from(index),
                );
                // `--continue`: an instance that ran and did not succeed goes on from there.
                let unfinished = earlier.and_then(|e| {
                    e.instances.iter().find(|i| {
                        options.continue_steps
                            && i.instance.as_deref() == Some(id.as_str())
                            && !matches!(i.status, StepStatus::Succeeded | StepStatus::Skipped)
                            && i.turns > 0
                    })
                });
                super::decide::continuing(
                    prepare_one(step, context, previous, options, record, env),
                    unfinished,
                )
            }
        };
        instances.push((id, item, prepared));
    }
    Prepared::FanOut(instances)
}
