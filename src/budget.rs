//! Budgets (docs/src/budgets.md): a step's `max_tokens_total` and the run's `[budget]`, checked before
//! every model request (a step's and its subagents'), so a ceiling is passed by at most the replies
//! already on their way. Costs come from [`Prices`] (`[prices]`, then LiteLLM's map); under a cost ceiling a model without a price
//! is refused (the plan for a step's model, the request for a subagent's), since its replies could
//! not be counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::provider::ModelRef;
use crate::provider::known::{PriceSource, Prices};
use crate::provider::message::Usage;

/// Costs are kept in billionths of a dollar, so concurrent steps can add them atomically.
const NANO: f64 = 1e9;

/// The run's ceilings and what has been used of them.
#[derive(Debug, Default)]
pub struct RunBudget {
    pub max_tokens: Option<u64>,
    pub max_cost_usd: Option<f64>,
    /// `max_cost_usd` came from `--max-cost`: its messages say so.
    pub max_cost_from_flag: bool,
    pub prices: Prices,
    /// The daily budget, when one is set and the run is not a replay: set once, when the
    /// earlier runs' spend has been read.
    daily: std::sync::OnceLock<DailyLimit>,
    tokens: AtomicU64,
    cost_nano: AtomicU64,
}

/// The daily budget (docs/src/budgets.md "Daily budget"): what the state directory's other
/// runs spent in the last 24 hours when this one started, and the limit.
#[derive(Debug, Clone, PartialEq)]
pub struct DailyLimit {
    pub limit_usd: f64,
    pub earlier_usd: f64,
    /// How it was set, as the user would change it: `--daily-budget 5` or `[budget] daily_usd = 5`.
    pub set_by: String,
}

impl RunBudget {
    pub fn new(max_tokens: Option<u64>, max_cost_usd: Option<f64>, prices: Prices) -> Self {
        Self {
            max_tokens,
            max_cost_usd,
            prices,
            ..Self::default()
        }
    }

    /// The same, its cost ceiling named as `--max-cost` when `flag`.
    pub fn from_flag(mut self, flag: bool) -> Self {
        self.max_cost_from_flag = flag;
        self
    }

    /// What a reply cost, when its model has a price.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        let (price, _) = self.prices.of(model)?;
        Some(cost(&price, usage))
    }

    pub fn tokens_used(&self) -> u64 {
        self.tokens.load(Ordering::Relaxed)
    }

    pub fn cost_used(&self) -> f64 {
        self.cost_nano.load(Ordering::Relaxed) as f64 / NANO
    }

    /// Sets the daily budget; a second one is ignored (the run has one).
    pub fn set_daily(&self, daily: DailyLimit) {
        let _ = self.daily.set(daily);
    }

    /// Whether another step may start: not once the earlier runs' spend of the last 24 hours
    /// and this run's reach the daily budget. Steps already running go on (a step is the unit
    /// of work a user pays for whole); the error says why the rest did not start.
    pub fn may_start(&self) -> Result<(), String> {
        let Some(daily) = self.daily.get() else {
            return Ok(());
        };
        let spent = daily.earlier_usd + self.cost_used();
        if spent >= daily.limit_usd {
            return Err(format!(
                "not started: the daily budget is spent ({} in the last 24 hours, {} of it by this run, of `{}`)",
                crate::units::usd(spent),
                crate::units::usd(self.cost_used()),
                daily.set_by
            ));
        }
        Ok(())
    }
}

/// What `usage` costs at `price`; cache reads and writes at the input price when the price
/// names none. The meter and the forecast (`run::forecast`) both price by it.
pub fn cost(price: &crate::workflow::Price, usage: &Usage) -> f64 {
    let per = |tokens: u64, usd: f64| tokens as f64 * usd / 1e6;
    per(usage.input_tokens, price.input)
        + per(usage.output_tokens, price.output)
        + per(
            usage.cache_read_input_tokens,
            price.cache_read.unwrap_or(price.input),
        )
        + per(
            usage.cache_creation_input_tokens,
            price.cache_write.unwrap_or(price.input),
        )
}

/// A step's ceiling and what it (with its subagents) has used.
#[derive(Debug, Default)]
pub struct StepBudget {
    pub step: String,
    pub max_tokens_total: Option<u64>,
    used: AtomicU64,
}

/// What one conversation charges its replies to: its step's budget and the run's, priced for
/// its model.
#[derive(Debug, Clone)]
pub struct Meter {
    run: Arc<RunBudget>,
    step: Arc<StepBudget>,
    /// `provider/model`, the key of `[prices]`.
    model: String,
}

impl Meter {
    pub fn new(
        run: Arc<RunBudget>,
        step: &str,
        max_tokens_total: Option<u64>,
        model: &ModelRef,
    ) -> Self {
        Self {
            run,
            step: Arc::new(StepBudget {
                step: step.to_owned(),
                max_tokens_total,
                used: AtomicU64::new(0),
            }),
            model: model.to_string(),
        }
    }

    /// No ceilings and no prices (for callers that run a conversation outside a run).
    pub fn unlimited(step: &str) -> Self {
        Self::new(
            Arc::new(RunBudget::default()),
            step,
            None,
            &ModelRef {
                provider: String::new(),
                model: String::new(),
            },
        )
    }

    /// The same budgets, for a subagent on `model`.
    pub fn for_model(&self, model: &ModelRef) -> Self {
        Self {
            run: self.run.clone(),
            step: self.step.clone(),
            model: model.to_string(),
        }
    }

    /// Whether another request may be sent; the error names the budget that is used up.
    pub fn check(&self) -> Result<(), String> {
        let used = self.step.used.load(Ordering::Relaxed);
        if let Some(limit) = self.step.max_tokens_total
            && used >= limit
        {
            return Err(format!(
                "step `{}` used {used} tokens of its budget `max_tokens_total = {limit}`",
                self.step.step
            ));
        }
        let run = &self.run;
        // A cost ceiling only holds if every reply is priced: a model without a price (a
        // subagent's, say) is refused rather than let through uncounted.
        if let Some(limit) = run.max_cost_usd
            && !self.model.is_empty()
            && run.prices.of(&self.model).is_none()
        {
            return Err(format!(
                "`{}` has no known price (neither `[prices]` nor {} has one), so its replies cannot count against `[budget] max_cost_usd = {limit}`",
                self.model,
                PriceSource::LiteLlm(crate::provider::known::snapshot())
            ));
        }
        if let Some(limit) = run.max_tokens
            && run.tokens_used() >= limit
        {
            return Err(format!(
                "the run used {} tokens of its budget `[budget] max_tokens = {limit}`",
                run.tokens_used()
            ));
        }
        if let Some(limit) = run.max_cost_usd
            && run.cost_used() >= limit
        {
            let ceiling = if run.max_cost_from_flag {
                format!("--max-cost {limit}")
            } else {
                format!("[budget] max_cost_usd = {limit}")
            };
            return Err(format!(
                "the run cost ${:.4} of its budget `{ceiling}`",
                run.cost_used()
            ));
        }
        Ok(())
    }

    /// Counts a reply against every budget; returns its cost when the model has a price.
    pub fn charge(&self, usage: &Usage) -> Option<f64> {
        let tokens = crate::units::sum([usage.total_input(), usage.output_tokens]);
        add(&self.step.used, tokens);
        add(&self.run.tokens, tokens);
        let cost = self.run.cost(&self.model, usage)?;
        // `as` saturates a float too large (or not a number) for a u64.
        add(&self.run.cost_nano, (cost * NANO).round() as u64);
        Some(cost)
    }
}

/// Adds to a counter, stopping at the largest count rather than wrapping (a hostile server may
/// report any usage).
fn add(counter: &std::sync::atomic::AtomicU64, n: u64) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
        Some(now.saturating_add(n))
    });
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::workflow::Price;

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        }
    }

    #[test]
    fn a_step_budget_stops_the_request_after_it_is_reached() {
        let model = ModelRef::parse("anthropic/m").unwrap();
        let meter = Meter::new(Arc::new(RunBudget::default()), "s", Some(250), &model);
        for _ in 0..3 {
            assert!(meter.check().is_ok());
            meter.charge(&usage(100, 10));
        }
        assert_eq!(
            meter.check().unwrap_err(),
            "step `s` used 330 tokens of its budget `max_tokens_total = 250`"
        );
        // A subagent charges the same step.
        let sub = meter.for_model(&ModelRef::parse("anthropic/small").unwrap());
        assert!(sub.check().is_err());
    }

    #[test]
    fn costs_follow_prices_and_cache_defaults_to_the_input_price() {
        let prices = BTreeMap::from([(
            "anthropic/m".to_owned(),
            Price {
                input: 3.0,
                output: 15.0,
                cache_read: Some(0.3),
                cache_write: None,
            },
        )]);
        let run = Arc::new(RunBudget::new(None, Some(0.01), Prices::new(prices)));
        let meter = Meter::new(
            run.clone(),
            "s",
            None,
            &ModelRef::parse("anthropic/m").unwrap(),
        );
        let cost = meter
            .charge(&Usage {
                input_tokens: 1000,
                output_tokens: 100,
                cache_read_input_tokens: 10_000,
                cache_creation_input_tokens: 1000,
            })
            .unwrap();
        // 1000 x 3 + 100 x 15 + 10000 x 0.3 + 1000 x 3, per million.
        assert!((cost - 0.0105).abs() < 1e-9, "{cost}");
        assert!(
            meter
                .check()
                .unwrap_err()
                .starts_with("the run cost $0.0105 of its budget")
        );
        let unpriced = meter.for_model(&ModelRef::parse("anthropic/other").unwrap());
        assert!(
            unpriced
                .check()
                .unwrap_err()
                .contains("`anthropic/other` has no known price")
        );
        assert_eq!(unpriced.charge(&usage(5, 5)), None);
        assert_eq!(run.tokens_used(), 12_100 + 10);
    }
}
