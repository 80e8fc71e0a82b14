//! The scheduler's side of `for_each`: a fan-out step's instances are queued, reused or ended
//! as `fanout::expand` prepared them, and the step settles once its last instance has.

use std::time::Instant;

use super::{Scheduler, Unit};
use crate::event::EventKind;
use crate::record::{StepRecord, StepStatus};
use crate::run::decide::Prepared;
use crate::run::outcome::{Outcome, SkipReason};
use crate::session::FailureKind;

/// A fan-out step whose instances are under way.
pub(super) struct FanOut {
    /// Each instance's record, in list order (its id and item set).
    pub(super) records: Vec<StepRecord>,
    /// Instances not finished yet.
    pub(super) left: usize,
    /// Instances `--only` leaves to other jobs with nothing of them here: not reported, and
    /// not part of the step as this job records it.
    pub(super) left_out: std::collections::BTreeSet<usize>,
    pub(super) started: Instant,
}

impl Scheduler<'_> {
    /// Starts a fan-out: each instance reused, ended, or queued; the step is done when the
    /// last instance is (at once for an empty list).
    pub(super) fn fan_out(
        &mut self,
        i: usize,
        instances: Vec<(String, serde_json::Value, Prepared)>,
    ) {
        let step = &self.plan.steps()[i];
        let model = step.model_label();
        let entry = self.record.step_mut(&step.id);
        entry.status = StepStatus::Running;
        // The step starts when its list is known; its instances wait for slots, each its own.
        entry.started_at = Some(jiff::Timestamp::now().to_string());
        entry.queue_ms = Some(0);
        self.emit(EventKind::StepStarted {
            step: step.id.clone(),
            agent: step.agent.clone(),
            model: model.clone(),
        });
        let mut records = Vec::with_capacity(instances.len());
        let mut settled = Vec::new();
        let mut left_out = std::collections::BTreeSet::new();
        for (k, (id, item, prepared)) in instances.into_iter().enumerate() {
            let mut entry = StepRecord::pending_instance(&model, &id, &item);
            let unit = Unit {
                step: i,
                instance: Some(k),
            };
            match prepared {
                Prepared::Run {
                    prompt,
                    fingerprint,
                    env,
                    continues,
                } => {
                    if let Some(earlier) = continues {
                        self.continues.insert(unit, earlier);
                    }
                    entry.fingerprint = fingerprint;
                    self.prompts.insert(unit, (prompt, env));
                    self.queue(unit, Some(&id));
                }
                Prepared::Reuse(previous) => {
                    entry = *previous;
                    settled.push((k, false));
                }
                Prepared::Ended(Outcome::Skipped(SkipReason::NotSelected)) => {
                    left_out.insert(k);
                    settled.push((k, false));
                }
                Prepared::Ended(outcome) => {
                    outcome.record(&mut entry);
                    settled.push((k, true));
                }
                // `expand` never nests fan-outs.
                Prepared::Expand { .. } | Prepared::FanOut(_) => {
                    Outcome::failed(FailureKind::FanOut, "a nested fan-out").record(&mut entry);
                    settled.push((k, true));
                }
            }
            records.push(entry);
        }
        let left = records.len();
        self.fan_outs.insert(
            i,
            FanOut {
                records,
                left,
                left_out,
                started: Instant::now(),
            },
        );
        for (k, decided) in settled {
            self.instance_done(i, k, decided);
        }
        if left == 0 {
            self.finish_fan_out(i);
        }
    }

    /// Tells the sinks an instance ended; settles its step when it was the last.
    pub(super) fn instance_done(&mut self, i: usize, k: usize, decided: bool) {
        let Some(fan_out) = self.fan_outs.get_mut(&i) else {
            return;
        };
        fan_out.left = fan_out.left.saturating_sub(1);
        let last = fan_out.left == 0;
        let shown = !fan_out.left_out.contains(&k);
        if let Some(record) = fan_out.records.get(k).cloned().filter(|_| shown) {
            let id = record.instance.clone().unwrap_or_default();
            self.emit(EventKind::StepFinished {
                step: id,
                record: Box::new(record),
                decided,
            });
        }
        if last {
            self.finish_fan_out(i);
        }
    }

    /// Settles a fan-out step from its instances and lets its dependents go.
    pub(super) fn finish_fan_out(&mut self, i: usize) {
        let Some(fan_out) = self.fan_outs.remove(&i) else {
            return;
        };
        let id = self.plan.steps()[i].id.clone();
        let elsewhere = !fan_out.left_out.is_empty();
        let records = fan_out
            .records
            .into_iter()
            .enumerate()
            .filter(|(k, _)| !fan_out.left_out.contains(k))
            .map(|(_, r)| r)
            .collect();
        self.record
            .step_mut(&id)
            .settle_fan_out(records, fan_out.started.elapsed().as_millis() as u64);
        // With some instances left to other jobs (`--only`), this job did not decide the step.
        self.finished(i, !elsewhere);
        self.ready.extend(self.walker.complete(i));
    }
}
