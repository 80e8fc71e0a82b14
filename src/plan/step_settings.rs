//! A step's settings, resolved once: the keys a step and `[defaults]` share
//! ([`crate::workflow::SharedKeys`]), a step's own value first, then `[defaults]`, then the
//! built-in default. The plan carries this one value to the executor and the session, and the
//! resume fingerprint is made from it (`record::fingerprint`), so a key added here reaches
//! `--resume` without anyone remembering to (a test below holds every field to that).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::*;
use crate::workflow::SharedKeys;

/// The resolved shared keys of one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepSettings {
    /// Model requests the step may make (0 for a command step, which asks no model).
    pub max_turns: u32,
    pub timeout: Duration,
    /// Output tokens per model request; `None` leaves it to the agent's model default.
    pub max_tokens: Option<u32>,
    pub retries: u32,
    /// Whether the step's `bash` may open network connections.
    pub network: bool,
    /// Whether the project memory file is wanted (the plan says which file, if any, was found).
    pub project_memory: bool,
    /// How deep its subagents may nest.
    pub max_subagent_depth: u32,
    /// Tokens the step (with its subagents) may use.
    pub max_tokens_total: Option<u64>,
    /// The model's context window in tokens: the step's, `[defaults]`'s, the model's known
    /// window, else 128k.
    pub context_window: u64,
    /// The share of the window at which the conversation is compacted.
    pub compact_at: f64,
    /// How many of the newest tool results stay whole when old ones are cleared, as the step
    /// or `[defaults]` sets it; `None` keeps up to [`DEFAULT_KEEP_TOOL_RESULTS`] of them, as
    /// many as fit under the clearing's low-water mark (docs/src/runs.md, "Context that lasts").
    pub keep_tool_results: Option<u32>,
    /// Variables its bash, checks and command get on top of the clean environment: templates
    /// (rendered when the step starts) or text with `${VAR}` (expanded then). `[defaults]`'s,
    /// with the step's on top.
    pub env: BTreeMap<String, String>,
    /// What its bash may read besides the system, the toolchains and its directories, as
    /// written (`~` expanded when the step runs): `[defaults]`'s, then the step's. Left out of
    /// the fingerprint when empty, so steps recorded before the key existed still match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_paths: Vec<String>,
}

impl StepSettings {
    /// The keys that bound how long and how much a step may spend, not what it does: a step
    /// that succeeded is still valid when one of them changes, so `--resume` does not run it
    /// again for that (docs/src/runs.md "Resume"). Every other key is part of the fingerprint.
    /// The context keys are limits too: they bound how much the step may hold at once.
    pub const LIMITS: [&'static str; 7] = [
        "max_turns",
        "timeout",
        "retries",
        "max_tokens_total",
        "context_window",
        "compact_at",
        "keep_tool_results",
    ];

    /// The settings that decide what the step does, as JSON: every field but [`Self::LIMITS`].
    pub fn fingerprinted(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(fields) = value.as_object_mut() {
            for limit in Self::LIMITS {
                fields.remove(limit);
            }
        }
        value
    }
}

/// Compaction at this share of the window, unless a step or `[defaults]` says otherwise.
pub const DEFAULT_COMPACT_AT: f64 = 0.8;
/// The newest tool results kept whole when old ones are cleared.
pub const DEFAULT_KEEP_TOOL_RESULTS: u32 = 4;

/// The step's value, else `[defaults]`'s.
fn first<T: Clone>(step: &Option<T>, defaults: &Option<T>) -> Option<T> {
    step.clone().or_else(|| defaults.clone())
}

impl Builder<'_> {
    /// `step`'s settings from its keys and `[defaults]`; `None` (with the errors reported) when
    /// a value cannot be used. `agent_turns` is the agent's own `maxTurns`, between the step's
    /// and `[defaults]`'s; `env` is the step's environment, already checked (`step_env`).
    pub(super) fn resolve_settings(
        &mut self,
        id: &str,
        step: &SharedKeys,
        model: Option<&str>,
        agent_turns: Option<u32>,
        command: bool,
        env: BTreeMap<String, String>,
    ) -> Option<StepSettings> {
        let defaults = self.loaded.def.defaults.clone();
        let timeout = match (&step.timeout, &defaults.timeout) {
            (Some(t), _) => self.duration(t, &path!["steps", id, "timeout"]),
            (None, Some(t)) => self.duration(t, &path!["defaults", "timeout"]),
            (None, None) => Some(DEFAULT_TIMEOUT),
        };
        Some(StepSettings {
            max_turns: match command {
                true => 0,
                false => step
                    .max_turns
                    .or(agent_turns)
                    .or(defaults.max_turns)
                    .unwrap_or(DEFAULT_MAX_TURNS),
            },
            timeout: timeout?,
            max_tokens: first(&step.max_tokens, &defaults.max_tokens),
            retries: first(&step.retries, &defaults.retries).unwrap_or(DEFAULT_RETRIES),
            network: first(&step.network, &defaults.network).unwrap_or(false),
            project_memory: !command
                && first(&step.project_memory, &defaults.project_memory).unwrap_or(true),
            max_subagent_depth: first(&step.max_subagent_depth, &defaults.max_subagent_depth)
                .unwrap_or(DEFAULT_SUBAGENT_DEPTH),
            max_tokens_total: first(&step.max_tokens_total, &defaults.max_tokens_total),
            context_window: first(&step.context_window, &defaults.context_window)
                .or_else(|| model.and_then(crate::provider::known::window))
                .unwrap_or(crate::provider::known::DEFAULT_WINDOW),
            compact_at: first(&step.compact_at, &defaults.compact_at).unwrap_or(DEFAULT_COMPACT_AT),
            keep_tool_results: first(&step.keep_tool_results, &defaults.keep_tool_results),
            env,
            read_paths: defaults
                .read_paths
                .iter()
                .chain(&step.read_paths)
                .cloned()
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn settings() -> StepSettings {
        StepSettings {
            max_turns: 50,
            timeout: Duration::from_secs(60),
            max_tokens: None,
            retries: 4,
            network: false,
            project_memory: true,
            max_subagent_depth: 1,
            max_tokens_total: None,
            context_window: 200_000,
            compact_at: 0.8,
            keep_tool_results: Some(4),
            env: BTreeMap::new(),
            read_paths: vec!["~/.ssh".into()],
        }
    }

    /// A different value of the same kind: what changing the key in a workflow file gives.
    fn changed(value: &Value) -> Value {
        match value {
            Value::Null => json!(7),
            Value::Bool(b) => json!(!b),
            Value::Number(n) => json!(n.as_u64().unwrap_or(0) + 1),
            Value::String(s) => json!(format!("{s}x")),
            Value::Array(items) => {
                let mut items = items.clone();
                items.push(items.first().cloned().unwrap_or(json!(1)));
                json!(items)
            }
            Value::Object(fields) if fields.contains_key("secs") => {
                json!({"secs": fields["secs"].as_u64().unwrap_or(0) + 1, "nanos": 0})
            }
            Value::Object(fields) => {
                let mut fields = fields.clone();
                fields.insert("ADDED".into(), json!("1"));
                Value::Object(fields)
            }
        }
    }

    /// Every field of the settings reaches the resume fingerprint, except the limits, which
    /// are left out on purpose. Fields are read from the serialized value, so a new one is
    /// covered here without this test knowing its name.
    #[test]
    fn every_setting_reaches_the_fingerprint() {
        let base = settings();
        let step = crate::plan::planned_step_for_tests(base.clone());
        let prompt = "p";
        let env = BTreeMap::new();
        let before = crate::record::fingerprint(&step, prompt, &env);
        let fields = serde_json::to_value(&base).unwrap();
        let fields = fields.as_object().unwrap();
        assert!(fields.len() >= 9, "{fields:?}");
        for (name, value) in fields {
            let mut changed_fields = fields.clone();
            changed_fields.insert(name.clone(), changed(value));
            let settings: StepSettings =
                serde_json::from_value(Value::Object(changed_fields)).unwrap();
            assert_ne!(settings, base, "`{name}` did not change");
            let step = crate::plan::planned_step_for_tests(settings);
            let after = crate::record::fingerprint(&step, prompt, &env);
            if StepSettings::LIMITS.contains(&name.as_str()) {
                assert_eq!(before, after, "`{name}` is a limit: not fingerprinted");
            } else {
                assert_ne!(before, after, "`{name}` does not reach the fingerprint");
            }
        }
    }
}
