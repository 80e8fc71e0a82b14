//! Verified steps (docs/src/verified-steps.md): command steps (`run`), `checks` after an agent's
//! answer, and `for_each` fan-out, resolved and checked like the rest of a step.

use super::*;
use crate::template::typing::{self, Ty};

/// Keys that only mean something for an agent step.
const AGENT_KEYS: &[&str] = &[
    "model",
    "tools",
    "disallowed_tools",
    "max_turns",
    "max_tokens",
    "retries",
    "thoroughness",
    "subagents",
    "max_subagent_depth",
    "max_tokens_total",
    "checks",
    "check_retries",
];

/// How long a key of a fan-out instance may be (`X[<key>]`).
const MAX_KEY_CHARS: usize = 64;

impl Builder<'_> {
    /// A command step has no agent: `agent`, `prompt` and the agent's settings are refused
    /// where they stand.
    pub(super) fn check_command_keys(&mut self, id: &str, step: &Step) {
        for key in ["agent", "prompt"] {
            if self.loaded.tree.find(&path!["steps", id, key]).is_some() {
                let span = self.key_span(&path!["steps", id, key]);
                self.error(
                    format!("step `{id}` has both `run` and `{key}`"),
                    span,
                    "a command step has no agent",
                    Some(
                        "a step runs an agent (`agent` and `prompt`) or a shell command (`run`): split it into two steps, the second with `needs`"
                            .into(),
                    ),
                );
            }
        }
        for key in AGENT_KEYS {
            if self.loaded.tree.find(&path!["steps", id, *key]).is_some() {
                let span = self.key_span(&path!["steps", id, *key]);
                let help = (*key == "checks").then(|| {
                    "a command step is checked by its own exit status; add the check to `run` (`cmd && check`)".to_owned()
                });
                self.error(
                    format!("step `{id}` runs a command (`run`), so `{key}` does not apply"),
                    span,
                    "agent steps only",
                    help,
                );
            }
        }
        let _ = step;
    }

    /// Shell text holds no templates: a value spliced into it could run as shell code.
    pub(super) fn check_run_text(&mut self, id: &str, run: &str) -> bool {
        self.shell_text_is_plain(id, &path!["steps", id, "run"], run, "run")
    }

    fn shell_text_is_plain(&mut self, id: &str, at: &[Seg], text: &str, what: &str) -> bool {
        if text.trim().is_empty() {
            let span = self.span(at);
            self.error(
                format!("step `{id}`: `{what}` is empty"),
                span,
                "no command",
                None,
            );
            return false;
        }
        if !template::is_template(text) {
            return true;
        }
        let value = self.span(at);
        let raw = self.file.text.get(value.clone()).unwrap_or_default();
        let span = ["{{", "{%", "{#"]
            .iter()
            .filter_map(|open| raw.find(open))
            .min()
            .map_or(value.clone(), |i| value.start + i..value.start + i + 2);
        self.error(
            format!(
                "step `{id}`: `{what}` cannot hold a template: a value spliced into shell text could run as shell code"
            ),
            span,
            "a template in shell text",
            Some(
                "pass the value through `env` and quote it in the command: `env = { TARGET = \"{{ inputs.target }}\" }`, then `\"$TARGET\"`"
                    .into(),
            ),
        );
        false
    }

    /// The step's checks, each with its timeout; plain shell text like `run`.
    pub(super) fn resolve_checks(&mut self, id: &str, step: &Step) -> Vec<Check> {
        if step.run.is_some() {
            return Vec::new();
        }
        if step.checks.is_empty() && step.check_retries.is_some() {
            let span = self.key_span(&path!["steps", id, "check_retries"]);
            self.problems.push(
                Problem::warning(format!(
                    "step `{id}` has no `checks`, so `check_retries` has no effect"
                ))
                .at(self.file, span, "no effect"),
            );
        }
        let mut checks = Vec::new();
        for (i, check) in step.checks.iter().enumerate() {
            let table = self
                .loaded
                .tree
                .find(&path!["steps", id, "checks", i, "command"])
                .is_some();
            let at = if table {
                path!["steps", id, "checks", i, "command"].to_vec()
            } else {
                path!["steps", id, "checks", i].to_vec()
            };
            if !self.shell_text_is_plain(id, &at, &check.command, "checks") {
                continue;
            }
            let timeout = match &check.timeout {
                Some(t) => self.duration(t, &path!["steps", id, "checks", i, "timeout"]),
                None => Some(DEFAULT_CHECK_TIMEOUT),
            };
            if let Some(timeout) = timeout {
                checks.push(Check {
                    command: check.command.clone(),
                    timeout,
                });
            }
        }
        checks
    }

    /// The step's fan-out, and the type of its `item`.
    pub(super) fn resolve_for_each(
        &mut self,
        ctx: &StepCtx<'_>,
        step: &Step,
        inputs: &BTreeMap<String, Option<String>>,
        env: &minijinja::Environment<'static>,
    ) -> (Option<ForEach>, Option<Ty>) {
        let id = ctx.id;
        let at = path!["steps", id, "for_each"];
        let Some(list) = &step.for_each else {
            for key in ["for_each_key", "max_instances"] {
                if self.loaded.tree.find(&path!["steps", id, key]).is_some() {
                    let span = self.key_span(&path!["steps", id, key]);
                    self.error(
                        format!("step `{id}` has `{key}` but no `for_each`"),
                        span,
                        "no fan-out",
                        None,
                    );
                }
            }
            return (None, None);
        };
        let max_instances = step.max_instances.unwrap_or(DEFAULT_MAX_INSTANCES);
        let (source, item, known) = match list {
            Value::Array(items) => {
                let item = if items.iter().all(Value::is_string) {
                    Ty::string()
                } else {
                    Ty::any()
                };
                (
                    ForEachSource::Items(items.clone()),
                    item,
                    Some(items.clone()),
                )
            }
            Value::String(expression) => {
                let Some((item, known)) = self.for_each_expression(ctx, expression, inputs, env)
                else {
                    // The expression's own error says it all: the prompt's `item` is still an
                    // instance's, not a second error.
                    return (None, Some(Ty::any()));
                };
                (ForEachSource::Expression(expression.clone()), item, known)
            }
            // The schema allows nothing else.
            _ => return (None, None),
        };
        if let Some(key) = &step.for_each_key {
            self.check_key_field(id, key, &item);
        }
        if let Some(items) = &known {
            let span = self.span(&at);
            if items.len() > max_instances as usize {
                self.error(
                    format!(
                        "step `{id}`: `for_each` has {} items, more than `max_instances` ({max_instances})",
                        items.len()
                    ),
                    span,
                    "too many instances",
                    Some("raise `max_instances`, or split the list".into()),
                );
            } else if let Err(why) = instance_ids(id, items, step.for_each_key.as_deref()) {
                self.error(format!("step `{id}`: {why}"), span, "instance keys", None);
            }
        }
        (
            Some(ForEach {
                source,
                key: step.for_each_key.clone(),
                max_instances,
                known,
            }),
            Some(item),
        )
    }

    // Over 80 lines: one arm per kind of `for_each` expression.
    /// A `for_each` expression: its names, that it is a list by its types, and its items when
    /// the plan can know them (it reads no step). `None` when it cannot work.
    fn for_each_expression(
        &mut self,
        ctx: &StepCtx<'_>,
        expression: &str,
        inputs: &BTreeMap<String, Option<String>>,
        env: &minijinja::Environment<'static>,
    ) -> Option<(Ty, Option<Vec<Value>>)> {
        let id = ctx.id;
        let at = path!["steps", id, "for_each"];
        let names = match template::expression_names(env, expression) {
            Ok(names) => names,
            Err(err) => {
                let span = self.template_span(&at, expression, &err);
                self.error(
                    format!(
                        "step `{id}`: invalid `for_each` expression: {}",
                        template::describe_error(&err)
                    ),
                    span,
                    "expression error",
                    None,
                );
                return None;
            }
        };
        let before = self.error_count();
        self.check_names(ctx, &at, &names);
        if self.error_count() > before {
            return None;
        }
        let roots = self.roots(ctx, &names);
        let (ty, problems) = typing::type_expression(env, expression, &roots);
        let had_problems = !problems.is_empty();
        for problem in problems {
            self.report_type(ctx, &at, expression, problem);
        }
        let ty = ty.filter(|_| !had_problems)?;
        let item = match ty.item() {
            Ok(item) => item,
            Err(kind) => {
                let span = self.span(&at);
                let help = if kind == "a string" {
                    format!("split it into a list: `{expression} | split(\",\")`")
                } else {
                    "name a list: an upstream `output` field whose schema is an array, an input split into a list, or a literal list".to_owned()
                };
                self.error(
                    format!("step `{id}`: `for_each` must be a list, but `{expression}` is {kind}"),
                    span,
                    "not a list",
                    Some(help),
                );
                return None;
            }
        };
        // Known now when it reads no step and every input it reads has a value.
        let knowable = names.iter().all(|n| {
            let mut parts = n.split('.');
            match (parts.next(), parts.next()) {
                (Some("inputs"), Some(input)) => inputs.get(input).is_some_and(Option::is_some),
                (Some("steps"), _) => false,
                _ => true,
            }
        });
        let known = if knowable {
            let context = templates::plan_context(self.loaded, inputs, false);
            match template::evaluate_value(env, expression, context) {
                Ok(value) => match value {
                    Value::Array(items) => Some(items),
                    _ => None,
                },
                Err(err) => {
                    let span = self.span(&at);
                    self.error(
                        format!(
                            "step `{id}`: `for_each` does not evaluate: {}",
                            template::describe_error(&err)
                        ),
                        span,
                        "expression error",
                        None,
                    );
                    return None;
                }
            }
        } else {
            None
        };
        Some((item, known))
    }

    /// `for_each_key` names a field the items have.
    fn check_key_field(&mut self, id: &str, key: &str, item: &Ty) {
        let span = self.span(&path!["steps", id, "for_each_key"]);
        match item.field_names() {
            Err(kind) => self.error(
                format!("step `{id}`: `for_each_key` names a field of each item, but the items are {kind}"),
                span,
                "items have no fields",
                Some("leave `for_each_key` out: instances are then named by index (`X[0]`)".into()),
            ),
            Ok(Some(fields)) if !fields.iter().any(|f| f == key) => {
                let help = did_you_mean(key, fields.iter().map(String::as_str)).or_else(|| {
                    Some(format!(
                        "the items have {}",
                        fields.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")
                    ))
                });
                self.error(
                    format!("step `{id}`: `for_each_key` is `{key}`, but the items have no field `{key}`"),
                    span,
                    "not a field of the items",
                    help,
                );
            }
            Ok(_) => {}
        }
    }
}

/// The ids of a fan-out's instances: `X[0]`, `X[1]`, … or `X[<key>]` from each item's `key`
/// field, made a plain name (letters, digits, `_`, `-`, `.`; anything else becomes `_`), since
/// it names files and comes from upstream output. Keys must be unique.
pub fn instance_ids(step: &str, items: &[Value], key: Option<&str>) -> Result<Vec<String>, String> {
    let Some(key) = key else {
        return Ok((0..items.len()).map(|i| format!("{step}[{i}]")).collect());
    };
    let mut seen = BTreeSet::new();
    let mut ids = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let raw = match item.get(key) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(_) => {
                return Err(format!(
                    "item {i}'s `{key}` (its `for_each_key`) is not a string or number"
                ));
            }
            None => return Err(format!("item {i} has no `{key}` (its `for_each_key`)")),
        };
        let name: String = raw
            .chars()
            .take(MAX_KEY_CHARS)
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if name.is_empty() {
            return Err(format!("item {i}'s `{key}` is empty"));
        }
        if !seen.insert(name.clone()) {
            return Err(format!(
                "two items have the key `{name}` (`for_each_key = \"{key}\"`): instance names must be unique"
            ));
        }
        ids.push(format!("{step}[{name}]"));
    }
    Ok(ids)
}

/// The step an id names: itself, or for a fan-out instance (`X[0]`) its step.
pub fn step_of(id: &str) -> &str {
    split_instance(id).map_or(id, |(step, _)| step)
}

/// The step a fan-out instance id (`X[0]`) belongs to, and its key; `None` for a step id.
pub fn split_instance(id: &str) -> Option<(&str, &str)> {
    let (step, rest) = id.split_once('[')?;
    Some((step, rest.strip_suffix(']')?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn instance_ids_are_indexes_or_plain_unique_keys() {
        let items = [json!({"dir": "src/auth"}), json!({"dir": "lib"})];
        assert_eq!(instance_ids("x", &items, None).unwrap(), ["x[0]", "x[1]"]);
        assert_eq!(
            instance_ids("x", &items, Some("dir")).unwrap(),
            ["x[src_auth]", "x[lib]"]
        );
        let twice = [json!({"dir": "a/b"}), json!({"dir": "a_b"})];
        assert!(
            instance_ids("x", &twice, Some("dir"))
                .unwrap_err()
                .contains("two items have the key `a_b`")
        );
        assert!(
            instance_ids("x", &[json!({"d": 1})], Some("dir"))
                .unwrap_err()
                .contains("item 0 has no `dir`")
        );
        assert_eq!(split_instance("x[src_auth]"), Some(("x", "src_auth")));
        assert_eq!(split_instance("x"), None);
    }
}
