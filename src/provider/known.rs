//! What runner knows of models by name, as of December 2026: their context windows and their
//! list prices. A step's `context_window` overrides the window, and a provider's refusal for
//! length teaches the real one for the rest of the run (docs/src/runs.md, "Context that lasts");
//! `[prices]` overrides a price (docs/src/budgets.md).

/// The window runner assumes for a model it does not know.
pub const DEFAULT_WINDOW: u64 = 128_000;

/// Model name prefixes and their context windows in tokens, the most specific first.
const WINDOWS: &[(&str, u64)] = &[
    ("claude-", 200_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-5", 400_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
];

/// The known context window of `model` (the name after `provider/`), if runner knows it.
pub fn window(model: &str) -> Option<u64> {
    WINDOWS
        .iter()
        .find(|(prefix, _)| model.starts_with(prefix))
        .map(|(_, window)| *window)
}

/// The shortest prefix Anthropic's prompt cache keeps for `model` (the name after
/// `provider/`), in tokens: a shorter one is neither written nor read, so waiting for a sibling
/// to write it saves nothing. 4,096 for Opus 4.5 and later and Haiku 4.5 and later, 2,048 for
/// Haiku 3.x, 1,024 for the rest (Sonnet, Opus up to 4.1, a name runner does not know). The
/// sibling gate ([`crate::session::gate`]) and the cache benchmark (benches/cache.rs) both ask
/// this.
pub fn anthropic_min_cacheable(model: &str) -> u64 {
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

/// When the prices below were the providers' list prices.
pub const PRICES_AS_OF: &str = "2026-12-01";

/// USD per million tokens: input, output, cache read, cache write, by model name prefix, the
/// most specific first (a dated name such as `claude-sonnet-4-5-20250929` takes its family's).
/// Anthropic bills a cache write at 1.25 times the input price and a read at 0.1; OpenAI caches
/// without a write premium and bills a read at a quarter to a half of the input price.
const ANTHROPIC: &[(&str, [f64; 4])] = &[
    ("claude-opus-4-5", [5.0, 25.0, 0.5, 6.25]),
    ("claude-opus-4-1", [15.0, 75.0, 1.5, 18.75]),
    ("claude-opus-4", [15.0, 75.0, 1.5, 18.75]),
    ("claude-sonnet-4-5", [3.0, 15.0, 0.3, 3.75]),
    ("claude-sonnet-4", [3.0, 15.0, 0.3, 3.75]),
    ("claude-3-7-sonnet", [3.0, 15.0, 0.3, 3.75]),
    ("claude-haiku-4-5", [1.0, 5.0, 0.1, 1.25]),
    ("claude-3-5-haiku", [0.8, 4.0, 0.08, 1.0]),
];

const OPENAI: &[(&str, [f64; 4])] = &[
    ("gpt-5-nano", [0.05, 0.4, 0.005, 0.05]),
    ("gpt-5-mini", [0.25, 2.0, 0.025, 0.25]),
    ("gpt-5", [1.25, 10.0, 0.125, 1.25]),
    ("gpt-4.1-nano", [0.1, 0.4, 0.025, 0.1]),
    ("gpt-4.1-mini", [0.4, 1.6, 0.1, 0.4]),
    ("gpt-4.1", [2.0, 8.0, 0.5, 2.0]),
    ("gpt-4o-mini", [0.15, 0.6, 0.075, 0.15]),
    ("gpt-4o", [2.5, 10.0, 1.25, 2.5]),
    ("o4-mini", [1.1, 4.4, 0.275, 1.1]),
    ("o3-mini", [1.1, 4.4, 0.55, 1.1]),
    ("o3", [2.0, 8.0, 0.5, 2.0]),
];

/// The list price of `model` (`provider/model`) on the built-in `anthropic` or `openai`
/// provider, if runner knows it. Other endpoints (a proxy, a local server) have no built-in
/// price: their models may be named alike and cost anything.
pub fn price(model: &str) -> Option<crate::workflow::Price> {
    let (provider, name) = model.split_once('/')?;
    let table = match provider {
        "anthropic" => ANTHROPIC,
        "openai" => OPENAI,
        _ => return None,
    };
    table
        .iter()
        .find(|(prefix, _)| {
            name == *prefix
                || name
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with('-'))
        })
        .map(|(_, [input, output, read, write])| crate::workflow::Price {
            input: *input,
            output: *output,
            cache_read: Some(*read),
            cache_write: Some(*write),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_models_have_their_windows() {
        assert_eq!(window("claude-sonnet-4-5"), Some(200_000));
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

    #[test]
    fn known_models_have_their_prices_and_others_none() {
        let sonnet = price("anthropic/claude-sonnet-4-5-20250929").unwrap();
        assert_eq!((sonnet.input, sonnet.output), (3.0, 15.0));
        assert_eq!(
            price("anthropic/claude-sonnet-4").unwrap().cache_write,
            Some(3.75)
        );
        // The most specific family wins; a name only sharing a prefix is not a match.
        assert_eq!(price("openai/gpt-4o-mini").unwrap().input, 0.15);
        assert!(price("openai/gpt-4oops").is_none());
        assert!(price("local/gpt-4o").is_none());
        assert!(price("anthropic/claude-test").is_none());
    }
}
