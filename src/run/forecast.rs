//! The forecast of a plan from the state directory's history (docs/src/budgets.md "Cost before
//! you pay"), and the check `run` makes with it before any request: the forecast's high held to
//! the cost ceiling.

use crate::error::Problem;
use crate::plan::Plan;
use crate::plan::forecast::{CostFrom, CountFrom, Estimate, Forecast, StepForecast};
use crate::workflow::UnknownCost;

use super::history::{History, Sample, StepHistory, spread};

/// `plan`'s forecast by `history`; the steps `reused` names (taken from the run being resumed)
/// cost nothing.
pub fn forecast(plan: &Plan, history: &History, reused: &dyn Fn(&str) -> bool) -> Forecast {
    let steps: Vec<StepForecast> = plan
        .steps()
        .iter()
        .map(|step| {
            if reused(&step.id) {
                return StepForecast {
                    tokens: Some(Estimate::exactly(0)),
                    cost_usd: Some(Estimate::exactly(0.0)),
                    duration_ms: Some(Estimate::exactly(0)),
                    reused: true,
                    ..StepForecast::default()
                };
            }
            let Some(h) = history.step(&step.id) else {
                let known = step.for_each.as_ref().and_then(|f| f.known.as_ref());
                return StepForecast {
                    instances: known.map(|items| items.len() as u64),
                    instances_from: known.map(|_| CountFrom::List),
                    ..command_step(step, None, 0)
                };
            };
            let duration = h.duration().map(|d| Estimate {
                median: d.median,
                high: d.high,
            });
            if step.command.is_some() {
                return command_step(step, duration, h.runs.len());
            }
            match &step.for_each {
                None => {
                    let (tokens, cost, from) = figures(&h.runs, 1);
                    StepForecast {
                        runs: h.runs.len(),
                        tokens,
                        cost_usd: cost,
                        cost_from: from,
                        duration_ms: duration,
                        ..StepForecast::default()
                    }
                }
                Some(each) => {
                    let (count, count_from) = match &each.known {
                        Some(items) => (Some(items.len() as u64), Some(CountFrom::List)),
                        None => match h.counts.first() {
                            Some(&n) => (
                                Some((n as u64).min(u64::from(each.max_instances))),
                                Some(CountFrom::Recorded),
                            ),
                            None => (None, None),
                        },
                    };
                    let pooled: Vec<Sample> = h.instances.values().flatten().copied().collect();
                    let (tokens, cost, from) = match count {
                        Some(0) => (
                            Some(Estimate::exactly(0)),
                            Some(Estimate::exactly(0.0)),
                            None,
                        ),
                        Some(n) => figures(&pooled, n),
                        None => (None, None, None),
                    };
                    StepForecast {
                        runs: fan_out_runs(h),
                        tokens,
                        cost_usd: cost,
                        cost_from: from,
                        duration_ms: duration,
                        instances: count,
                        instances_from: count_from,
                        ..StepForecast::default()
                    }
                }
            }
        })
        .collect();
    let duration_ms = run_length(plan, &steps);
    Forecast {
        runs: history.runs.len(),
        steps,
        duration_ms,
    }
}

/// A step with no history, or a command step (which calls no model: its tokens and cost are
/// known to be 0 whatever its history).
fn command_step(
    step: &crate::plan::PlannedStep,
    duration: Option<Estimate<u64>>,
    runs: usize,
) -> StepForecast {
    if step.command.is_none() {
        return StepForecast::default();
    }
    StepForecast {
        runs,
        tokens: Some(Estimate::exactly(0)),
        cost_usd: Some(Estimate::exactly(0.0)),
        cost_from: Some(CostFrom::Command),
        duration_ms: duration,
        ..StepForecast::default()
    }
}

/// The earlier runs a fan-out's figures come from.
fn fan_out_runs(h: &StepHistory) -> usize {
    h.counts.len().max(h.runs.len())
}

type Figures = (
    Option<Estimate<u64>>,
    Option<Estimate<f64>>,
    Option<CostFrom>,
);

/// Tokens and cost of `samples`, `times` over (a fan-out's instances): the recorded cost where
/// every sample has one, else each sample's recorded or priced cost; unknown where a sample
/// has neither.
fn figures(samples: &[Sample], times: u64) -> Figures {
    let tokens = spread(samples.iter().map(|s| s.tokens).collect()).map(|t| Estimate {
        median: t.median.saturating_mul(times),
        high: t.high.saturating_mul(times),
    });
    let recorded = samples.iter().all(|s| s.cost_usd.is_some());
    let costs: Option<Vec<f64>> = samples
        .iter()
        .map(|s| s.cost_usd.or(s.priced_usd))
        .collect();
    let cost = costs.and_then(spread).map(|c| Estimate {
        median: c.median * times as f64,
        high: c.high * times as f64,
    });
    let from = cost.map(|_| {
        if recorded {
            CostFrom::Recorded
        } else {
            CostFrom::Priced
        }
    });
    (tokens, cost, from)
}

/// The run's length with `max_parallel` by the steps' median and high durations (the walk
/// `plan`'s ETA makes); none when no step has a recorded time.
fn run_length(plan: &Plan, steps: &[StepForecast]) -> Option<Estimate<u64>> {
    if steps.iter().all(|s| s.duration_ms.is_none()) {
        return None;
    }
    let by = |pick: fn(&Estimate<u64>) -> u64| -> u64 {
        let recorded: Vec<Option<u64>> = steps
            .iter()
            .map(|s| s.duration_ms.as_ref().map(pick))
            .collect();
        crate::plan::critical::Paths::new(plan, &recorded).makespan(plan, plan.max_parallel)
    };
    Some(Estimate {
        median: by(|e| e.median),
        high: by(|e| e.high),
    })
}

/// Where the run's cost ceiling comes from, as the user set it.
pub fn ceiling_name(ceiling: f64, from_flag: bool) -> String {
    if from_flag {
        format!("`--max-cost {ceiling}`")
    } else {
        format!("`[budget] max_cost_usd = {ceiling}`")
    }
}

/// Holds `forecast` to the plan's cost ceiling before the run: `Err` refuses to start (the
/// high passes it, or a step's cost is unknown under `unknown_cost = "refuse"`); `Ok` carries
/// the warning to print when the forecast is incomplete.
pub fn hold(plan: &Plan, forecast: &Forecast) -> Result<Option<String>, Problem> {
    let Some(ceiling) = plan.max_cost_usd else {
        return Ok(None);
    };
    let held = forecast.held_to(plan, ceiling);
    let name = ceiling_name(ceiling, plan.max_cost_from_flag);
    let unknown = (!held.unknown.is_empty()).then(|| {
        format!(
            "the forecast is incomplete: no history for {} (their cost is not counted)",
            held.unknown
                .iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    });
    if held.over() {
        let costliest: Vec<String> = held
            .costliest
            .iter()
            .map(|(id, usd)| format!("`{id}` {}", crate::units::usd(*usd)))
            .collect();
        // A figure that would let this forecast through, rounded up to the cent.
        // Less a hair, so that a sum such as 0.3 + 0.03 (0.32999...) or 0.33000...1 reads 0.33.
        let enough = (held.high * 100.0 - 1e-6).ceil() / 100.0;
        let mut message = format!(
            "not starting: the forecast's high is {}, past the ceiling {name} (costliest: {}; the high of each step's last runs)",
            crate::units::usd(held.high),
            costliest.join(", ")
        );
        if let Some(unknown) = &unknown {
            message.push_str(&format!("; {unknown}"));
        }
        return Err(Problem::error(message).help(format!(
            "raise the ceiling (`--max-cost {enough}` for this run, or `max_cost_usd` under `[budget]`), or run fewer steps (`--only`); the forecast follows the last {} successful runs of each step (`runner plan` shows it)",
            super::history::RUNS
        )));
    }
    match unknown {
        Some(unknown) if plan.unknown_cost == UnknownCost::Refuse => Err(Problem::error(format!(
            "not starting: {unknown}, and `unknown_cost = \"refuse\"` counts that as past the ceiling {name}"
        ))
        .help(
            "run without the ceiling once to make the history (`--unknown-cost allow` starts it, still held live to the ceiling)",
        )),
        Some(unknown) => Ok(Some(format!(
            "{unknown}; starting, held live to the ceiling {name} (`--unknown-cost refuse` would not start)"
        ))),
        None => Ok(None),
    }
}
