//! What runner knows of models by name, as of December 2026: their context windows. A step's
//! `context_window` overrides it, and a provider's refusal for length teaches the real window
//! for the rest of the run (docs/src/runs.md, "Context that lasts").

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
}
