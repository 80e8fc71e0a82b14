//! What a run should cost before it starts (docs/src/budgets.md "Cost before you pay"): each
//! step's tokens, cost and time as the median and the high of its earlier runs, and the run's
//! total. Pure: `run::forecast` makes one from the state directory's history; `plan` shows it
//! and `run` holds it to the cost ceiling. A step with no history is unknown, never $0.

use std::fmt::Write as _;

use serde::Serialize;

use super::Plan;

/// The median and the high of earlier runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate<T> {
    pub median: T,
    pub high: T,
}

impl<T: Copy> Estimate<T> {
    pub fn exactly(value: T) -> Self {
        Estimate {
            median: value,
            high: value,
        }
    }
}

/// Where a step's forecast cost comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CostFrom {
    /// What the earlier runs paid (`cost_usd` of their records).
    Recorded,
    /// Their tokens priced at today's price of the model (`Prices::of`): some record had no
    /// cost, its model had no price then.
    Priced,
    /// A command step calls no model.
    Command,
}

/// Where a fan-out's instance count comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CountFrom {
    /// The list is known before the run (a literal, inputs).
    List,
    /// The list is an expression: the count of the newest earlier run.
    Recorded,
}

/// One step's forecast.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StepForecast {
    /// Earlier runs of the step (same id and agent) the figures come from; 0 is no history.
    pub runs: usize,
    /// Every token sent and received; null without history.
    pub tokens: Option<Estimate<u64>>,
    /// USD; null without history.
    pub cost_usd: Option<Estimate<f64>>,
    pub cost_from: Option<CostFrom>,
    /// Wall time; a fan-out's is the whole fan-out's.
    pub duration_ms: Option<Estimate<u64>>,
    /// A fan-out: the instances its tokens and cost are multiplied by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instances: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instances_from: Option<CountFrom>,
    /// Taken from the run this one resumes: it costs nothing.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reused: bool,
}

/// The forecast of a plan's steps, by plan index.
#[derive(Debug, Clone, Default)]
pub struct Forecast {
    /// Earlier runs read.
    pub runs: usize,
    pub steps: Vec<StepForecast>,
    /// The run's length with `max_parallel`, by the steps' medians and by their highs.
    pub duration_ms: Option<Estimate<u64>>,
}

/// The forecast's high held to a cost ceiling.
#[derive(Debug, Clone)]
pub struct Held<'a> {
    pub ceiling: f64,
    /// The sum of the steps' highs that are known.
    pub high: f64,
    /// Steps whose cost is unknown (no history).
    pub unknown: Vec<&'a str>,
    /// The steps that cost most at their high, most first (at most 3).
    pub costliest: Vec<(&'a str, f64)>,
}

impl Held<'_> {
    /// Whether `run` refuses to start: past the ceiling, or a cost unknown under
    /// `unknown_cost = "refuse"`.
    pub fn refuses(&self, unknown_cost: crate::workflow::UnknownCost) -> bool {
        self.over()
            || (!self.unknown.is_empty() && unknown_cost == crate::workflow::UnknownCost::Refuse)
    }

    /// Past the ceiling; a billionth of a dollar is allowed for the sum's rounding (0.1 + 0.2
    /// is not 0.3 in floating point), so a forecast exactly at the ceiling is within it.
    pub fn over(&self) -> bool {
        self.high > self.ceiling + 1e-9
    }
}

impl Forecast {
    fn sum<T: Copy + std::iter::Sum<T>>(
        &self,
        of: impl Fn(&StepForecast) -> Option<Estimate<T>>,
    ) -> Option<Estimate<T>> {
        let known: Vec<Estimate<T>> = self.steps.iter().filter_map(&of).collect();
        if known.is_empty() {
            return None;
        }
        Some(Estimate {
            median: known.iter().map(|e| e.median).sum(),
            high: known.iter().map(|e| e.high).sum(),
        })
    }

    /// The known steps' tokens, added up.
    pub fn tokens(&self) -> Option<Estimate<u64>> {
        let known: Vec<Estimate<u64>> = self.steps.iter().filter_map(|s| s.tokens).collect();
        if known.is_empty() {
            return None;
        }
        Some(Estimate {
            median: crate::units::sum(known.iter().map(|e| e.median)),
            high: crate::units::sum(known.iter().map(|e| e.high)),
        })
    }

    /// The known steps' costs, added up.
    pub fn cost_usd(&self) -> Option<Estimate<f64>> {
        self.sum(|s| s.cost_usd)
    }

    /// The steps with no earlier run to go by.
    pub fn without_history<'p>(&self, plan: &'p Plan) -> Vec<&'p str> {
        self.named(plan, |f| f.tokens.is_none())
    }

    /// The steps whose cost is unknown: no history, or (with no cost ceiling, which needs
    /// prices) a model with no price.
    pub fn cost_unknown<'p>(&self, plan: &'p Plan) -> Vec<&'p str> {
        self.named(plan, |f| f.cost_usd.is_none())
    }

    fn named<'p>(&self, plan: &'p Plan, pick: impl Fn(&StepForecast) -> bool) -> Vec<&'p str> {
        plan.steps()
            .iter()
            .zip(&self.steps)
            .filter(|(_, f)| pick(f))
            .map(|(s, _)| s.id.as_str())
            .collect()
    }

    /// The forecast held to `ceiling` USD.
    pub fn held_to<'p>(&self, plan: &'p Plan, ceiling: f64) -> Held<'p> {
        let mut costliest: Vec<(&str, f64)> = plan
            .steps()
            .iter()
            .zip(&self.steps)
            .filter_map(|(s, f)| f.cost_usd.map(|c| (s.id.as_str(), c.high)))
            .filter(|(_, high)| *high > 0.0)
            .collect();
        // Most first; equal costs keep the plan's order (a stable sort).
        costliest.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
        costliest.truncate(3);
        Held {
            ceiling,
            high: self.cost_usd().map_or(0.0, |c| c.high),
            unknown: self.cost_unknown(plan),
            costliest,
        }
    }

    fn json(&self, plan: &Plan) -> JsonForecast {
        JsonForecast {
            runs: self.runs,
            tokens: self.tokens(),
            cost_usd: self.cost_usd(),
            duration_ms: self.duration_ms,
            without_history: self
                .without_history(plan)
                .into_iter()
                .map(str::to_owned)
                .collect(),
            over_ceiling: plan
                .max_cost_usd
                .map(|ceiling| self.held_to(plan, ceiling).over()),
            refuses: plan
                .max_cost_usd
                .map(|ceiling| self.held_to(plan, ceiling).refuses(plan.unknown_cost)),
        }
    }

    /// The run's forecast line of `plan`'s text.
    pub fn text(&self, plan: &Plan, out: &mut String) {
        let (Some(tokens), true) = (self.tokens(), self.runs > 0) else {
            let _ = write!(
                out,
                "forecast: no history yet (runs of this workflow recorded in the state directory give tokens, cost and time)"
            );
            if let Some(verdict) = self.verdict(plan) {
                let _ = write!(out, "; {verdict}");
            }
            out.push('\n');
            return;
        };
        let _ = write!(
            out,
            "forecast: {}, {}",
            pair(tokens, |t| format!("{} tokens", crate::units::tokens(t))),
            cost_text(self.cost_usd())
        );
        if let Some(time) = self.duration_ms {
            let _ = write!(out, ", {}", pair(time, crate::units::seconds));
        }
        let _ = write!(
            out,
            " (median, high; last {})",
            crate::units::count(self.runs as u64, "run", "runs")
        );
        let unknown = self.without_history(plan);
        if !unknown.is_empty() {
            let _ = write!(
                out,
                "; not counted, with no history: {}",
                unknown.join(", ")
            );
        }
        if let Some(verdict) = self.verdict(plan) {
            let _ = write!(out, "; {verdict}");
        }
        out.push('\n');
    }

    /// What `run` makes of the forecast under the plan's cost ceiling, if it has one.
    fn verdict(&self, plan: &Plan) -> Option<String> {
        let ceiling = plan.max_cost_usd?;
        let held = self.held_to(plan, ceiling);
        let usd = crate::units::usd(ceiling);
        Some(if held.over() {
            format!("the high passes the {usd} ceiling: `run` refuses to start")
        } else if held.refuses(plan.unknown_cost) {
            format!(
                "with steps of unknown cost and `unknown_cost = \"refuse\"`, `run` refuses to start under the {usd} ceiling"
            )
        } else {
            format!("within the {usd} ceiling")
        })
    }

    /// Step `i`'s forecast line of `plan`'s text.
    pub fn step_text(&self, i: usize, out: &mut String) {
        let Some(step) = self.steps.get(i) else {
            return;
        };
        let label = "forecast";
        if step.reused {
            let _ = writeln!(out, "    {label:<9}reused from the run it resumes: $0");
            return;
        }
        if step.cost_from == Some(CostFrom::Command) {
            let _ = write!(out, "    {label:<9}no model: no tokens, $0");
            if let Some(time) = step.duration_ms {
                let _ = write!(
                    out,
                    ", {} (last {})",
                    pair(time, crate::units::seconds),
                    crate::units::count(step.runs as u64, "run", "runs")
                );
            }
            out.push('\n');
            return;
        }
        let Some(tokens) = step.tokens else {
            let why = match step.instances_from {
                None if step.runs > 0 && step.instances.is_none() => {
                    "the list's length is not known before the run"
                }
                _ => "no earlier run of this step with this agent",
            };
            let _ = writeln!(out, "    {label:<9}no history ({why})");
            return;
        };
        let _ = write!(
            out,
            "    {label:<9}{}, {}",
            pair(tokens, |t| format!("{} tokens", crate::units::tokens(t))),
            cost_text(step.cost_usd)
        );
        if let Some(time) = step.duration_ms {
            let _ = write!(out, ", {}", pair(time, crate::units::seconds));
        }
        let mut notes = vec![format!(
            "last {}",
            crate::units::count(step.runs as u64, "run", "runs")
        )];
        match (step.instances, step.instances_from) {
            (Some(n), Some(CountFrom::List)) => notes.push(format!(
                "{} of the list",
                crate::units::count(n, "instance", "instances")
            )),
            (Some(n), Some(CountFrom::Recorded)) => notes.push(format!(
                "{} as in the last run",
                crate::units::count(n, "instance", "instances")
            )),
            _ => {}
        }
        if step.cost_from == Some(CostFrom::Priced) {
            notes.push("cost: its tokens at today's price".to_owned());
        }
        let _ = writeln!(out, " ({})", notes.join("; "));
    }
}

/// A cost, or why there is none although there are runs: its model has no price (the step's
/// `price` line says so), never `$0`.
fn cost_text(cost: Option<Estimate<f64>>) -> String {
    cost.map_or_else(
        || "cost unknown (no price)".to_owned(),
        |c| pair(c, crate::units::usd),
    )
}

/// `median (high H)`, or one figure when they are the same.
fn pair<T: Copy + PartialEq>(e: Estimate<T>, show: impl Fn(T) -> String) -> String {
    if e.median == e.high {
        show(e.median)
    } else {
        format!("{} (high {})", show(e.median), show(e.high))
    }
}

#[derive(Serialize)]
struct JsonForecast {
    runs: usize,
    tokens: Option<Estimate<u64>>,
    cost_usd: Option<Estimate<f64>>,
    duration_ms: Option<Estimate<u64>>,
    /// Steps whose cost the totals leave out: no history.
    without_history: Vec<String>,
    /// Whether the high passes `max_cost_usd` (null without one).
    over_ceiling: Option<bool>,
    /// Whether `run` refuses to start by it (null without a ceiling).
    refuses: Option<bool>,
}

/// The run's forecast as `plan --format json` gives it.
pub fn json(forecast: &Forecast, plan: &Plan) -> serde_json::Value {
    serde_json::to_value(forecast.json(plan)).unwrap_or_default()
}

/// Step `i`'s forecast as `plan --format json` gives it.
pub fn step_json(forecast: &Forecast, i: usize) -> serde_json::Value {
    forecast
        .steps
        .get(i)
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(steps: &[&str]) -> Plan {
        let dir = tempfile::tempdir().unwrap();
        let path = camino::Utf8PathBuf::from_path_buf(dir.path().join("w.toml")).unwrap();
        let steps: String = steps
            .iter()
            .map(|id| format!("[steps.{id}]\nagent = \"explore\"\nprompt = \"p\"\n"))
            .collect();
        std::fs::write(
            &path,
            format!("name = \"f\"\n[models]\ndefault = \"anthropic/x\"\n{steps}"),
        )
        .unwrap();
        let loaded = crate::workflow::load_workflow(&path).unwrap();
        let registry = crate::tools::Registry::builtin();
        let (plan, problems) = super::super::build_plan(
            &loaded,
            &crate::agent::AgentCatalog::load(&[], &registry),
            &registry,
            &super::super::PlanOptions::default(),
        );
        plan.unwrap_or_else(|| panic!("{problems:?}"))
    }

    fn costing(high: Option<f64>) -> StepForecast {
        StepForecast {
            runs: usize::from(high.is_some()),
            cost_usd: high.map(|high| Estimate { median: 0.0, high }),
            ..StepForecast::default()
        }
    }

    /// The three costliest steps at their high, most first, ties in the plan's order; steps
    /// with no history are named apart and left out of the sum; the ceiling itself is within.
    #[test]
    fn the_costliest_three_are_named_and_unknown_steps_apart() {
        let plan = plan(&["a", "b", "c", "d", "e"]);
        let forecast = Forecast {
            runs: 1,
            steps: vec![
                costing(Some(0.1)),
                costing(Some(0.5)),
                costing(None),
                costing(Some(0.1)),
                costing(Some(0.3)),
            ],
            duration_ms: None,
        };
        let held = forecast.held_to(&plan, 1.0);
        assert_eq!(held.costliest, [("b", 0.5), ("e", 0.3), ("a", 0.1)]);
        assert_eq!(held.unknown, ["c"]);
        assert!((held.high - 1.0).abs() < 1e-9 && !held.over());
        assert!(forecast.held_to(&plan, 0.99).over());
    }
}
