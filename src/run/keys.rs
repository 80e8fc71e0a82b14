//! Provider keys, read once before any step starts.

use std::collections::BTreeMap;

use crate::error::Problem;
use crate::plan::Plan;
use crate::provider::Secret;

/// Keys for every provider the plan's steps use, read once. A missing key is a problem naming
/// the variable, found before any step starts.
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
