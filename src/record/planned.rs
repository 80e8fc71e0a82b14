//! What the plan said of each step, kept in `run.json` when the run starts: the model it was to
//! run on, how many checks it had, its sandbox, and the forecast of its cost. `runner audit`
//! checks the run against these (docs/src/audit.md); the record alone says what happened, not
//! what was meant to. Absent in records of older runners: then those findings are not made.

use serde::{Deserialize, Serialize};

use crate::plan::Plan;
use crate::plan::forecast::Forecast;

/// USD, as the forecast had it: the median and the high of the step's earlier runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CostRange {
    pub median: f64,
    pub high: f64,
}

/// One step as planned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Planned {
    /// `provider/model`, or `-` for a command step.
    pub model: String,
    /// Checks that must pass after its final answer.
    #[serde(default)]
    pub checks: u32,
    /// What its `bash` may write: `read-only`, `workdir` or `off`.
    #[serde(default)]
    pub sandbox: String,
    /// Whether its `bash` may open network connections.
    #[serde(default)]
    pub network: bool,
    /// Its forecast cost; absent without history (no forecast, no finding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast_usd: Option<CostRange>,
}

/// Each step of `plan` as planned, by id, with its forecast.
pub fn of(plan: &Plan, forecast: &Forecast) -> std::collections::BTreeMap<String, Planned> {
    plan.steps()
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let forecast_usd = forecast
                .steps
                .get(i)
                .filter(|f| !f.reused)
                .and_then(|f| f.cost_usd)
                .map(|c| CostRange {
                    median: c.median,
                    high: c.high,
                });
            let planned = Planned {
                model: step.model_label(),
                checks: u32::try_from(step.checks.len()).unwrap_or(u32::MAX),
                sandbox: step.sandbox.as_str().to_owned(),
                network: step.settings.network,
                forecast_usd,
            };
            (step.id.clone(), planned)
        })
        .collect()
}

/// The run's forecast cost: its steps' added up, when every step had one (a sum of some is
/// no forecast of the run).
pub fn run_forecast(planned: &std::collections::BTreeMap<String, Planned>) -> Option<CostRange> {
    let all: Option<Vec<CostRange>> = planned.values().map(|p| p.forecast_usd).collect();
    let all = all.filter(|a| !a.is_empty())?;
    Some(CostRange {
        median: all.iter().map(|c| c.median).sum(),
        high: all.iter().map(|c| c.high).sum(),
    })
}
