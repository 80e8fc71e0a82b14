//! What earlier runs of a workflow took (docs/src/runs.md "The order steps start in"): for each
//! step, matched by its id and agent, the durations, tokens and costs of its last
//! [`RUNS`] successful runs in the state directory, with their median and high. The scheduler
//! orders ready work by it, `plan` shows the critical path and an ETA from it, and forecasts
//! read it.
//!
//! Records come through `run::records` (bounded, ids checked) and only those with this user's
//! seal count: a checkout that ships a `.runner/` cannot steer the order or a forecast. A step
//! reused by `--resume`, or one that did not succeed, tells nothing about how long it takes.

use std::collections::BTreeMap;

use camino::Utf8Path;

use crate::plan::Plan;
use crate::plan::critical::Paths;
use crate::record::{RunRecord, StepRecord, StepStatus};

/// Earlier runs read, at most: recent enough to follow a workflow that changed, enough for a
/// median that one slow run does not move.
pub const RUNS: usize = 10;

/// One earlier run of a step, an instance or a subagent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub duration_ms: u64,
    /// Every token sent and received, cached or not.
    pub tokens: u64,
    pub cost_usd: Option<f64>,
    /// Its tokens priced by today's price of its model (`Prices::of`), for a run that
    /// recorded no cost (its model had no price then).
    pub priced_usd: Option<f64>,
}

impl Sample {
    fn of(step: &StepRecord, plan: &Plan) -> Self {
        let usage = crate::provider::message::Usage {
            input_tokens: step.input_tokens,
            output_tokens: step.output_tokens,
            cache_creation_input_tokens: step.cache_creation_input_tokens,
            cache_read_input_tokens: step.cache_read_input_tokens,
        };
        Sample {
            priced_usd: plan
                .price_of(&step.model)
                .map(|(price, _)| crate::budget::cost(&price, &usage)),
            duration_ms: step.duration_ms,
            tokens: crate::units::sum([
                step.input_tokens,
                step.output_tokens,
                step.cache_creation_input_tokens,
                step.cache_read_input_tokens,
            ]),
            cost_usd: step.cost_usd,
        }
    }
}

/// The median and the high of some samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread<T> {
    pub median: T,
    pub high: T,
}

/// `values`' median (the lower of the middle two) and high; `None` when there are none.
pub fn spread<T: PartialOrd + Copy>(mut values: Vec<T>) -> Option<Spread<T>> {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let high = *values.last()?;
    Some(Spread {
        median: values[(values.len() - 1) / 2],
        high,
    })
}

/// What one step took in the runs read, newest first.
#[derive(Debug, Clone, Default)]
pub struct StepHistory {
    pub runs: Vec<Sample>,
    /// A fan-out's instances, by instance id (`X[key]`).
    pub instances: BTreeMap<String, Vec<Sample>>,
    /// Its subagents, by agent.
    pub subagents: BTreeMap<String, Vec<Sample>>,
    /// A fan-out's instance count in each run read, newest first.
    pub counts: Vec<usize>,
}

impl StepHistory {
    pub fn duration(&self) -> Option<Spread<u64>> {
        spread(self.runs.iter().map(|s| s.duration_ms).collect())
    }

    pub fn tokens(&self) -> Option<Spread<u64>> {
        spread(self.runs.iter().map(|s| s.tokens).collect())
    }

    /// The cost, when every run read has one (a run with no price says nothing about it).
    pub fn cost_usd(&self) -> Option<Spread<f64>> {
        let costs: Option<Vec<f64>> = self.runs.iter().map(|s| s.cost_usd).collect();
        spread(costs?)
    }

    /// The median duration of instance `id`.
    pub fn instance_duration(&self, id: &str) -> Option<u64> {
        let samples = self.instances.get(id)?;
        spread(samples.iter().map(|s| s.duration_ms).collect()).map(|s| s.median)
    }
}

/// The history of a workflow's steps.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// By step id; a step with no successful earlier run is not here.
    pub steps: BTreeMap<String, StepHistory>,
    /// The runs read, newest first.
    pub runs: Vec<String>,
}

impl History {
    /// The last [`RUNS`] runs of `plan`'s workflow recorded in `state_dir` by this user, newest
    /// first. Records that cannot be read are passed over (`runner runs` says why).
    pub fn read(state_dir: &Utf8Path, plan: &Plan) -> Self {
        let listing = super::records::list(state_dir);
        // A listing keeps the first 200 characters of a name: the whole record says the rest.
        let listed: String = plan.name.chars().take(200).collect();
        let records = listing
            .runs
            .iter()
            .filter(|run| run.ours && run.workflow == listed)
            .filter_map(|run| super::records::read(state_dir, &run.run_id).ok())
            .filter(|record| record.recorded_here && record.workflow == plan.name)
            .take(RUNS);
        Self::of(plan, records)
    }

    /// The history of `plan`'s steps in `records`, newest first.
    pub fn of(plan: &Plan, records: impl IntoIterator<Item = RunRecord>) -> Self {
        let mut history = History::default();
        for record in records {
            history.runs.push(record.run_id.clone());
            for step in plan.steps() {
                let Some(done) = record.steps.get(&step.id) else {
                    continue;
                };
                // Older records name no agent: their model stands in for it.
                let same = if done.agent.is_empty() {
                    done.model == step.model_label()
                } else {
                    done.agent == step.agent
                };
                if !same || done.reused_from.is_some() {
                    continue;
                }
                let entry = history.steps.entry(step.id.clone()).or_default();
                if done.status == StepStatus::Succeeded {
                    entry.runs.push(Sample::of(done, plan));
                }
                if step.for_each.is_some() {
                    entry.counts.push(done.instances.len());
                }
                for instance in &done.instances {
                    if instance.status != StepStatus::Succeeded || instance.reused_from.is_some() {
                        continue;
                    }
                    if let Some(id) = &instance.instance {
                        entry
                            .instances
                            .entry(id.clone())
                            .or_default()
                            .push(Sample::of(instance, plan));
                    }
                }
                let subagents = done
                    .subagents
                    .iter()
                    .chain(done.instances.iter().flat_map(|i| i.subagents.iter()));
                for subagent in subagents.filter(|s| s.status == StepStatus::Succeeded) {
                    entry
                        .subagents
                        .entry(subagent.agent.clone())
                        .or_default()
                        .push(Sample {
                            duration_ms: subagent.duration_ms,
                            tokens: subagent.total_tokens(),
                            cost_usd: None,
                            priced_usd: None,
                        });
                }
            }
        }
        history.steps.retain(|_, h| {
            !(h.runs.is_empty() && h.instances.is_empty() && h.subagents.is_empty())
        });
        history
    }

    /// The step's history, if it has any.
    pub fn step(&self, id: &str) -> Option<&StepHistory> {
        self.steps.get(id)
    }

    /// Each step's median recorded duration, by plan index.
    pub fn durations(&self, plan: &Plan) -> Vec<Option<u64>> {
        plan.steps()
            .iter()
            .map(|s| {
                self.step(&s.id)
                    .and_then(StepHistory::duration)
                    .map(|d| d.median)
            })
            .collect()
    }

    /// The remaining paths of `plan`'s steps by this history.
    pub fn paths(&self, plan: &Plan) -> Paths {
        Paths::new(plan, &self.durations(plan))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(agent: &str) -> Plan {
        let dir = tempfile::tempdir().unwrap();
        let path = camino::Utf8PathBuf::from_path_buf(dir.path().join("w.toml")).unwrap();
        std::fs::write(
            &path,
            format!("name = \"h\"\n[models]\ndefault = \"anthropic/x\"\n[steps.s]\nagent = \"{agent}\"\nprompt = \"p\"\n"),
        )
        .unwrap();
        let loaded = crate::workflow::load_workflow(&path).unwrap();
        let registry = crate::tools::Registry::builtin();
        let (plan, problems) = crate::plan::build_plan(
            &loaded,
            &crate::agent::AgentCatalog::load(&[], &registry),
            &registry,
            &crate::plan::PlanOptions::default(),
        );
        plan.unwrap_or_else(|| panic!("{problems:?}"))
    }

    /// A run of `plan` in which step `s` ended as `status` after `ms`.
    fn ran(plan: &Plan, status: StepStatus, ms: u64, reused: bool) -> RunRecord {
        let mut record = RunRecord::new(plan, None);
        let step = record.step_mut("s");
        step.status = status;
        step.duration_ms = ms;
        step.reused_from = reused.then(|| "earlier".to_owned());
        record
    }

    #[test]
    fn only_successes_of_the_same_agent_done_in_their_run_count() {
        let explore = plan("explore");
        let records = vec![
            ran(&explore, StepStatus::Succeeded, 300, false),
            ran(&explore, StepStatus::Failed, 9_000, false),
            ran(&explore, StepStatus::Succeeded, 1, true),
            ran(&explore, StepStatus::Succeeded, 100, false),
            ran(&plan("code"), StepStatus::Succeeded, 50_000, false),
        ];
        let history = History::of(&explore, records);
        assert_eq!(history.runs.len(), 5);
        let step = history.step("s").unwrap();
        assert_eq!(
            step.duration(),
            Some(Spread {
                median: 100,
                high: 300
            })
        );
        assert_eq!(history.durations(&explore), vec![Some(100)]);
    }

    #[test]
    fn the_median_is_the_lower_middle_and_the_high_the_largest() {
        assert_eq!(spread::<u64>(Vec::new()), None);
        assert_eq!(
            spread(vec![30, 10, 20]),
            Some(Spread {
                median: 20,
                high: 30
            })
        );
        assert_eq!(
            spread(vec![40, 10, 30, 20]),
            Some(Spread {
                median: 20,
                high: 40
            })
        );
    }
}
