//! What runner knows of models by name: their list prices, context windows and longest replies,
//! from a dated snapshot of LiteLLM's model map (`models/litellm.json`, trimmed to the models of
//! `anthropic` and `openai`; MIT, `models/LICENSE-litellm`; refreshed by
//! `scripts/refresh-models.py`, docs/src/models.md). A step's `context_window` overrides the
//! window, and a provider's refusal for length teaches the real one for the rest of the run
//! (docs/src/runs.md, "Context that lasts"); `[prices]` overrides a price (docs/src/budgets.md),
//! through [`Prices`], the one place a model is priced.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

use crate::workflow::Price;

/// The window runner assumes for a model it does not know.
pub const DEFAULT_WINDOW: u64 = 128_000;

/// Which LiteLLM package a snapshot (or a retired entry) comes from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Origin {
    pub version: String,
    /// The day the package was published, `YYYY-MM-DD`.
    pub date: String,
}

/// One model of the map, with the fields runner reads. Costs are USD per token, as LiteLLM
/// writes them.
#[derive(Debug, Clone, Deserialize)]
pub struct Entry {
    pub litellm_provider: String,
    pub mode: String,
    input_cost_per_token: Option<f64>,
    output_cost_per_token: Option<f64>,
    cache_read_input_token_cost: Option<f64>,
    cache_creation_input_token_cost: Option<f64>,
    pub max_input_tokens: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub prompt_cache_min_tokens: Option<u64>,
    pub deprecation_date: Option<String>,
    /// Set when the newest package no longer lists the model: the last one that did.
    pub retired: Option<Origin>,
}

impl Entry {
    /// Its list price per million tokens, when the map has both an input and an output cost.
    pub fn price(&self) -> Option<Price> {
        Some(Price {
            input: per_million(self.input_cost_per_token?),
            output: per_million(self.output_cost_per_token?),
            cache_read: self.cache_read_input_token_cost.map(per_million),
            cache_write: self.cache_creation_input_token_cost.map(per_million),
        })
    }

    /// Where its price comes from: the snapshot's package, or the last one that listed it.
    pub fn origin(&'static self) -> &'static Origin {
        self.retired.as_ref().unwrap_or(&SNAPSHOT.litellm)
    }
}

/// `5e-06` per token is `5.0` per million, not `5.000000000000001`: LiteLLM's costs have at
/// most a few significant digits, so twelve decimals of a per-token cost lose nothing.
fn per_million(per_token: f64) -> f64 {
    (per_token * 1e12).round() / 1e6
}

#[derive(Debug, Deserialize)]
struct Snapshot {
    litellm: Origin,
    models: BTreeMap<String, Entry>,
}

/// The snapshot, parsed on first use. It is compiled in, and `tests::the_snapshot_parses` holds
/// it to this shape, so a parse failure here is a broken build, not bad input.
static SNAPSHOT: LazyLock<Snapshot> = LazyLock::new(|| {
    serde_json::from_str(include_str!("../../models/litellm.json"))
        .expect("models/litellm.json is held to its shape by known::tests::the_snapshot_parses")
});

/// The LiteLLM package the snapshot was taken from.
pub fn snapshot() -> &'static Origin {
    &SNAPSHOT.litellm
}

/// Every model of the snapshot, by name.
pub fn models() -> impl Iterator<Item = (&'static str, &'static Entry)> {
    SNAPSHOT
        .models
        .iter()
        .map(|(name, entry)| (name.as_str(), entry))
}

/// The entry of `name` (the model after `provider/`): the name itself, else the name without a
/// trailing `-YYYYMMDD` date or `-latest` (`claude-opus-4-6-20260205` is `claude-opus-4-6`).
/// Never a shorter prefix: `claude-opus-4-6` is not `claude-opus-4`.
pub fn entry(name: &str) -> Option<&'static Entry> {
    let models = &SNAPSHOT.models;
    models.get(name).or_else(|| {
        let (base, suffix) = name.rsplit_once('-')?;
        let dated = suffix.len() == 8 && suffix.bytes().all(|b| b.is_ascii_digit());
        (dated || suffix == "latest")
            .then(|| models.get(base))
            .flatten()
    })
}

/// The newest Claude model of a family the snapshot lists (`sonnet`, `opus`, `haiku`; any other
/// name asks for `sonnet`), as `anthropic/<name>`: the example a message about a missing model
/// gives, so it stays current with the snapshot instead of naming a model of the year it was
/// written. Only undated names of versions (`claude-opus-4-6`), not retired ones.
pub fn newest_claude(family: &str) -> String {
    let family = match family {
        "opus" | "haiku" => family,
        _ => "sonnet",
    };
    let prefix = format!("claude-{family}-");
    SNAPSHOT
        .models
        .iter()
        .filter(|(_, e)| e.litellm_provider == "anthropic" && e.retired.is_none())
        .filter_map(|(name, _)| {
            let version: Option<Vec<u32>> = name
                .strip_prefix(&prefix)?
                .split('-')
                .map(|p| p.parse::<u32>().ok().filter(|_| p.len() <= 2))
                .collect();
            Some((version?, name))
        })
        .max()
        .map_or_else(
            || format!("anthropic/claude-{family}-4-6"),
            |(_, name)| format!("anthropic/{name}"),
        )
}

/// The known context window of `model` (the name after `provider/`), if runner knows it: the
/// map's `max_input_tokens`, on any provider (a proxy's model named alike has the same window
/// more often than not, and a refusal for length corrects it).
pub fn window(model: &str) -> Option<u64> {
    entry(model)?.max_input_tokens
}

/// The shortest prefix Anthropic's prompt cache keeps for `model` (the name after
/// `provider/`), in tokens: a shorter one is neither written nor read, so waiting for a sibling
/// to write it saves nothing. The map's `prompt_cache_min_tokens` where it has one; else by
/// family: 4,096 for Opus 4.5 and later and Haiku 4.5 and later, 2,048 for Haiku 3.x, 1,024 for
/// the rest (Sonnet, Opus up to 4.1, a name runner does not know). The sibling gate
/// ([`crate::session::gate`]) and the cache benchmark (benches/cache.rs) both ask this.
pub fn anthropic_min_cacheable(model: &str) -> u64 {
    if let Some(tokens) = entry(model).and_then(|e| e.prompt_cache_min_tokens) {
        return tokens;
    }
    // `4-5`, `4-5-20251101`, `4-20250514`: a part of over two digits is a date, not a version.
    let version = |rest: &str| -> (u32, u32) {
        let mut parts = rest
            .split('-')
            .map_while(|p| p.parse::<u32>().ok().filter(|_| p.len() <= 2));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    };
    if model.starts_with("claude-3-haiku") || model.starts_with("claude-3-5-haiku") {
        return 2048;
    }
    let newer = |rest: &str| version(rest) >= (4, 5);
    match (
        model.strip_prefix("claude-opus-"),
        model.strip_prefix("claude-haiku-"),
    ) {
        (Some(rest), _) if newer(rest) => 4096,
        (_, Some(rest)) if newer(rest) => 4096,
        (_, Some(_)) => 2048,
        _ => 1024,
    }
}

/// Where a price comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriceSource {
    /// The workflow's `[prices]`.
    Workflow,
    /// The snapshot of LiteLLM's map (or, for a retired model, the last package that listed it).
    LiteLlm(&'static Origin),
}

impl std::fmt::Display for PriceSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Workflow => f.write_str("[prices]"),
            Self::LiteLlm(origin) => write!(f, "LiteLLM {} ({})", origin.version, origin.date),
        }
    }
}

/// How a run prices its models: the workflow's `[prices]` (keyed `provider/model`) first, then
/// the list price of LiteLLM's map on the built-in `anthropic` and `openai` providers. `plan`,
/// the meter, budgets and the cost ceiling's check all ask [`Prices::of`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices {
    workflow: BTreeMap<String, Price>,
}

impl Prices {
    pub fn new(workflow: BTreeMap<String, Price>) -> Self {
        Self { workflow }
    }

    /// The price of `model` (`provider/model`) and where it comes from; `None` when neither
    /// `[prices]` nor the map knows it. Other endpoints than the built-in two (a proxy, a local
    /// server) have no list price: their models may be named alike and cost anything.
    pub fn of(&self, model: &str) -> Option<(Price, PriceSource)> {
        if let Some(price) = self.workflow.get(model) {
            return Some((*price, PriceSource::Workflow));
        }
        let (provider, name) = model.split_once('/')?;
        if !matches!(provider, "anthropic" | "openai") {
            return None;
        }
        let entry = entry(name).filter(|e| e.litellm_provider == provider)?;
        Some((entry.price()?, PriceSource::LiteLlm(entry.origin())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_name_the_newest_model_of_the_family() {
        for family in ["sonnet", "opus", "haiku"] {
            let newest = newest_claude(family);
            let name = newest.strip_prefix("anthropic/").unwrap();
            assert!(name.starts_with(&format!("claude-{family}-")), "{newest}");
            assert!(entry(name).is_some_and(|e| e.retired.is_none()), "{newest}");
            // No undated, current model of the family has a higher version.
            let version = |n: &str| -> Vec<u32> {
                n.trim_start_matches(&format!("claude-{family}-"))
                    .split('-')
                    .map(|p| p.parse().unwrap_or(0))
                    .collect()
            };
            assert!(models().all(|(n, e)| {
                !n.starts_with(&format!("claude-{family}-"))
                    || e.retired.is_some()
                    || n.split('-').any(|p| p.len() > 2)
                    || version(n) <= version(name)
            }));
        }
        assert_eq!(newest_claude("default"), newest_claude("sonnet"));
    }

    #[test]
    fn the_snapshot_parses() {
        assert!(!snapshot().version.is_empty());
        assert!(models().count() > 100);
        // Trimmed to what runner speaks.
        for (name, entry) in models() {
            assert!(!name.contains('/'), "{name}");
            assert!(matches!(
                entry.litellm_provider.as_str(),
                "anthropic" | "openai"
            ));
            assert!(
                matches!(entry.mode.as_str(), "chat" | "responses"),
                "{name}"
            );
        }
    }

    #[test]
    fn known_models_have_their_windows() {
        assert_eq!(window("claude-sonnet-4-5"), Some(200_000));
        assert_eq!(window("claude-opus-4-6"), Some(1_000_000));
        assert_eq!(window("claude-opus-4-6-20990101"), Some(1_000_000));
        assert_eq!(window("gpt-4.1-mini"), Some(1_047_576));
        assert_eq!(window("gpt-4o"), Some(128_000));
        assert_eq!(window("llama3.2"), None);
    }

    #[test]
    fn anthropic_caches_prefixes_from_each_models_minimum() {
        for (model, tokens) in [
            ("claude-sonnet-4-5-20250929", 1024),
            ("claude-sonnet-4", 1024),
            ("claude-3-7-sonnet-latest", 1024),
            ("claude-opus-4-20250514", 1024),
            ("claude-opus-4-1", 1024),
            ("claude-opus-4-5", 4096),
            ("claude-opus-4-6", 4096),
            ("claude-haiku-4-5-20251001", 4096),
            ("claude-3-5-haiku-latest", 2048),
            ("claude-3-haiku-20240307", 2048),
            ("claude-test", 1024),
        ] {
            assert_eq!(anthropic_min_cacheable(model), tokens, "{model}");
        }
    }

    fn price(model: &str) -> Option<Price> {
        Prices::default().of(model).map(|(price, _)| price)
    }

    #[test]
    fn known_models_have_their_prices_and_others_none() {
        let sonnet = price("anthropic/claude-sonnet-4-5-20250929").unwrap();
        assert_eq!((sonnet.input, sonnet.output), (3.0, 15.0));
        assert_eq!(sonnet.cache_write, Some(3.75));
        let opus = price("anthropic/claude-opus-4-6").unwrap();
        assert_eq!(
            (opus.input, opus.output, opus.cache_read),
            (5.0, 25.0, Some(0.5))
        );
        // A date or `-latest` after a known name is the same model; a shorter prefix is not.
        assert_eq!(price("anthropic/claude-opus-4-6-20990101"), Some(opus));
        assert!(price("anthropic/claude-opus-4-9").is_none());
        assert_eq!(price("openai/gpt-4o-mini").unwrap().input, 0.15);
        assert!(price("openai/gpt-4oops").is_none());
        // Only on the built-in provider that sells it.
        assert!(price("local/gpt-4o").is_none());
        assert!(price("openai/claude-opus-4-6").is_none());
        assert!(price("anthropic/claude-test").is_none());
    }

    #[test]
    fn retired_models_keep_the_price_of_the_last_package_that_listed_them() {
        let (price, source) = Prices::default().of("anthropic/claude-opus-4-1").unwrap();
        assert_eq!((price.input, price.output), (15.0, 75.0));
        let PriceSource::LiteLlm(origin) = source else {
            panic!("{source}")
        };
        assert_ne!(origin, snapshot());
        let (_, current) = Prices::default().of("anthropic/claude-opus-4-6").unwrap();
        assert_eq!(current, PriceSource::LiteLlm(snapshot()));
    }

    #[test]
    fn the_workflows_prices_win() {
        let mine = Price {
            input: 1.0,
            output: 2.0,
            cache_read: None,
            cache_write: None,
        };
        let prices = Prices::new(BTreeMap::from([("anthropic/claude-opus-4-6".into(), mine)]));
        assert_eq!(
            prices.of("anthropic/claude-opus-4-6"),
            Some((mine, PriceSource::Workflow))
        );
        assert_eq!(PriceSource::Workflow.to_string(), "[prices]");
    }
}
