//! Provider keys, read once before any step starts.

use std::collections::BTreeMap;

use crate::error::Problem;
use crate::plan::Plan;
use crate::provider::Secret;

/// Keys for every provider the plan's steps use, read once. A missing key is a problem naming
/// the variable, found before any step starts, unless the provider's base URL variable points
/// away from its default (docs/src/models.md): then requests go without one.
pub fn provider_keys(plan: &Plan) -> Result<BTreeMap<String, Option<Secret>>, Vec<Problem>> {
    let mut keys = BTreeMap::new();
    let mut missing: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for step in plan.steps() {
        let Some(spec) = step
            .model
            .as_ref()
            .and_then(|m| plan.providers.get(&m.provider))
        else {
            continue;
        };
        let Some(var) = &spec.api_key_env else {
            keys.insert(spec.name.clone(), None);
            continue;
        };
        let value = crate::secrets::var(var);
        crate::secrets::seal(var);
        match value {
            Some(value) if !value.trim().is_empty() => {
                keys.insert(spec.name.clone(), Some(Secret::new(value.trim())));
            }
            // A local server (llama.cpp, vLLM) at its own base URL: no key, no Authorization.
            _ if spec.key_optional() => {
                keys.insert(spec.name.clone(), None);
            }
            _ => missing.entry(var.clone()).or_default().push(&step.id),
        }
    }
    if missing.is_empty() {
        return Ok(keys);
    }
    Err(missing
        .into_iter()
        .map(|(var, steps)| {
            Problem::error(format!(
                "{var} is not set; step{} {} need{} it",
                if steps.len() == 1 { "" } else { "s" },
                steps
                    .iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if steps.len() == 1 { "s" } else { "" },
            ))
            .help(format!(
                "export {var}=... before running, or pick another model with --model"
            ))
        })
        .collect())
}

/// Base URLs from the environment that are not URLs (`OPENAI_BASE_URL=127.0.0.1:8080/v1`), for
/// the providers the plan's steps use: refused by `validate`, `plan` and `run` before any
/// request, naming the variable and its value.
pub fn endpoint_problems(plan: &Plan) -> Vec<Problem> {
    let mut seen = std::collections::BTreeSet::new();
    let mut problems = Vec::new();
    for step in plan.steps() {
        let Some(spec) = step
            .model
            .as_ref()
            .and_then(|m| plan.providers.get(&m.provider))
        else {
            continue;
        };
        if !seen.insert(spec.name.clone()) {
            continue;
        }
        if let Some((var, value)) = spec.schemeless() {
            let shown = crate::terminal::clean(&value).into_owned();
            problems.push(
                Problem::error(format!(
                    "{var}={shown} is not a URL: a base URL starts with http:// or https:// (step `{}` uses provider `{}`)",
                    step.id, spec.name
                ))
                .help(format!("did you mean {var}=http://{shown}?")),
            );
        }
    }
    problems
}
