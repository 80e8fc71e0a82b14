//! Checks of the workflow-wide settings: providers, model aliases, inputs, step ids and needs.

use super::*;

impl Builder<'_> {
    /// `[mcp_servers.NAME]`: a name tool names can carry, and either `command` or `url`.
    pub(super) fn check_mcp_servers(&mut self) {
        let def = &self.loaded.def;
        for (name, server) in &def.mcp_servers {
            let span = self.key_span(&path!["mcp_servers", name.as_str()]);
            let plain = !name.is_empty()
                && !name.contains("__")
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
            if !plain {
                self.problems.push(
                    Problem::error(format!(
                        "MCP server name `{name}` cannot be part of tool names"
                    ))
                    .at(self.file, span.clone(), "bad name")
                    .help("use letters, digits, `-` and single `_`"),
                );
            }
            if let Some(timeout) = &server.timeout
                && let Err(why) = crate::workflow::duration::parse_duration(timeout)
            {
                let span = self.span(&path!["mcp_servers", name.as_str(), "timeout"]);
                self.problems.push(
                    Problem::error(format!("MCP server `{name}`: `timeout`: {why}")).at(
                        self.file,
                        span,
                        "not a duration",
                    ),
                );
            }
            if server.command.is_some() == server.url.is_some() {
                self.problems.push(
                    Problem::error(format!(
                        "MCP server `{name}` needs exactly one of `command` (a program to start) and `url` (a streamable HTTP endpoint)"
                    ))
                    .at(self.file, span, "command or url"),
                );
            }
        }
    }

    /// `[prices]`: keys must be `provider/model` of a known provider. With a cost ceiling, a
    /// step whose model has no known price is an error: its replies could not be counted.
    pub(super) fn check_prices(
        &mut self,
        providers: &BTreeMap<String, ProviderSpec>,
        steps: &[Option<PlannedStep>],
        flag_ceiling: bool,
    ) -> Prices {
        let def = &self.loaded.def;
        let mut prices = BTreeMap::new();
        for (key, price) in &def.prices {
            match model_ref(key, providers, " (a key of `[prices]`)") {
                Ok(model) => {
                    prices.insert(model.to_string(), *price);
                }
                Err(problem) => {
                    let span = self.key_span(&path!["prices", key.as_str()]);
                    self.problems
                        .push(problem.at(self.file, span, "not a known provider/model"));
                }
            }
        }
        let prices = Prices::new(prices);
        let file_ceiling = def.budget.as_ref().and_then(|b| b.max_cost_usd).is_some();
        if flag_ceiling || file_ceiling {
            let unpriced: BTreeSet<String> = steps
                .iter()
                .flatten()
                .filter_map(|s| s.model.as_ref().map(ToString::to_string))
                .filter(|m| prices.of(m).is_none())
                .collect();
            if !unpriced.is_empty() {
                let list: Vec<String> = unpriced.iter().map(|m| format!("`{m}`")).collect();
                let problem = Problem::error(format!(
                    "`{}` cannot count replies of {}: no known price (neither `[prices]` nor {} has one)",
                    if flag_ceiling {
                        "--max-cost"
                    } else {
                        "max_cost_usd"
                    },
                    list.join(", "),
                    PriceSource::LiteLlm(crate::provider::known::snapshot())
                ));
                // The flag's ceiling has no place in the file to point at.
                let problem = if flag_ceiling {
                    problem
                } else {
                    let span = self.key_span(&path!["budget", "max_cost_usd"]);
                    problem.at(self.file, span, "cost ceiling")
                };
                self.problems.push(problem.help(format!(
                    "add `[prices.\"{}\"]` with `input` and `output` in USD per million tokens",
                    unpriced.iter().next().map_or("", String::as_str)
                )));
            }
        }
        prices
    }

    pub(super) fn check_providers(&mut self) -> BTreeMap<String, ProviderSpec> {
        for (name, def) in &self.loaded.def.providers {
            if name.contains('/') || name.trim().is_empty() {
                let span = self.key_span(&path!["providers", name.as_str()]);
                self.error(
                    format!("provider name `{name}` must not contain `/`"),
                    span,
                    "invalid name",
                    None,
                );
            }
            let url = def.base_url.trim();
            if !crate::provider::has_scheme(url) {
                let span = self.span(&path!["providers", name.as_str(), "base_url"]);
                // `127.0.0.1:8080/v1` is a local server's address without its scheme.
                let hint = (!url.is_empty() && !url.contains("://"))
                    .then(|| format!("did you mean `http://{url}`?"));
                self.error(
                    format!("`providers.{name}.base_url` must be an http:// or https:// URL"),
                    span,
                    "not a URL",
                    hint,
                );
            }
            if let Some(var) = &def.api_key_env
                && (var.is_empty() || var.contains(['=', '\0', ' ']))
            {
                let span = self.span(&path!["providers", name.as_str(), "api_key_env"]);
                self.error(
                    format!("`providers.{name}.api_key_env` must name an environment variable"),
                    span,
                    "not a variable name",
                    None,
                );
            }
        }
        providers_for(&self.loaded.def.providers)
    }

    /// Checks `[models]` and `--model`, returning the alias table with overrides applied.
    pub(super) fn check_models(
        &mut self,
        providers: &BTreeMap<String, ProviderSpec>,
        options: &PlanOptions,
    ) -> BTreeMap<String, ModelRef> {
        let mut aliases = BTreeMap::new();
        for (alias, value) in &self.loaded.def.models {
            let span = self.span(&path!["models", alias.as_str()]);
            match model_ref(value, providers, "") {
                Ok(model) => {
                    aliases.insert(alias.clone(), model);
                }
                // Reported here; steps using the alias say nothing more about it.
                Err(problem) => {
                    self.problems.push(problem.at(self.file, span, "here"));
                    self.missing_aliases
                        .insert(alias.clone(), MissingAlias::BadDefinition);
                }
            }
        }
        // What `--model` may set: the workflow's aliases, the built-in agents' (which fall back
        // to `default` when the file leaves them out), and any a step names.
        let mut known: std::collections::BTreeSet<&str> =
            ["default", "small", "plan"].into_iter().collect();
        known.extend(self.loaded.def.models.keys().map(String::as_str));
        known.extend(
            self.loaded
                .def
                .steps
                .values()
                .filter_map(|s| s.model.as_deref())
                .filter(|m| !m.contains('/')),
        );
        for (alias, value) in &options.models {
            if alias.contains('/') || alias.is_empty() {
                self.problems.push(Problem::error(format!(
                    "`--model {alias}={value}`: the alias must be a name such as `default` or `small`"
                )));
                continue;
            }
            if !known.contains(alias.as_str()) {
                let help = did_you_mean(alias, known.iter().copied()).unwrap_or_else(|| {
                    format!(
                        "the aliases this workflow uses are {}",
                        known
                            .iter()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                });
                self.problems.push(
                    Problem::error(format!(
                        "`--model {alias}={value}`: this workflow has no model alias `{alias}`"
                    ))
                    .in_file(self.file)
                    .with_help(Some(help)),
                );
                continue;
            }
            match model_ref(value, providers, "") {
                Ok(model) => {
                    aliases.insert(alias.clone(), model);
                }
                Err(problem) => self.problems.push(problem),
            }
        }
        aliases
    }

    /// Input values: given, or defaults; `None` for a required input that was not given.
    pub(super) fn check_inputs(
        &mut self,
        options: &PlanOptions,
    ) -> BTreeMap<String, Option<String>> {
        let declared = &self.loaded.def.inputs;
        let mut values: BTreeMap<String, Option<String>> = declared
            .iter()
            .map(|(name, def)| (name.clone(), def.default.clone()))
            .collect();
        for (name, value) in &options.inputs {
            if declared.contains_key(name) {
                values.insert(name.clone(), Some(value.clone()));
            } else {
                let help = did_you_mean(name, declared.keys().map(String::as_str)).or_else(|| {
                    Some(if declared.is_empty() {
                        "this workflow declares no inputs".to_owned()
                    } else {
                        format!(
                            "inputs are {}",
                            declared
                                .keys()
                                .map(|k| format!("`{k}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })
                });
                self.problems.push(
                    Problem::error(format!("unknown input `{name}` given with --input"))
                        .in_file(self.file)
                        .with_help(help),
                );
            }
        }
        if options.require_inputs {
            for (name, value) in &values {
                if value.is_none() {
                    let span = self.key_span(&path!["inputs", name.as_str()]);
                    let what = declared
                        .get(name)
                        .and_then(|d| d.description.as_deref())
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default();
                    self.error(
                        format!("missing input `{name}`{what}"),
                        span,
                        "required: it has no default",
                        Some(format!(
                            "pass `--input {name}=VALUE`, or `--input {name}=@FILE` to read a file"
                        )),
                    );
                }
            }
        }
        values
    }

    pub(super) fn check_id(&mut self, id: &str) {
        let mut chars = id.chars();
        let ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            let span = self.key_span(&path!["steps", id]);
            self.error(
                format!("step id `{id}` must start with a letter or `_` and hold only letters, digits, `_` and `-`"),
                span,
                "invalid step id",
                None,
            );
        } else if id.contains('-') {
            let span = self.key_span(&path!["steps", id]);
            self.problems.push(
                Problem::warning(format!("step id `{id}` contains `-`"))
                    .at(self.file, span, "here")
                    .help(format!(
                        "templates must then write `steps[\"{id}\"]` instead of `steps.{id}`; `_` avoids that"
                    )),
            );
        }
    }

    pub(super) fn check_needs(
        &mut self,
        id: &str,
        step: &Step,
        index: &BTreeMap<&str, usize>,
    ) -> Vec<usize> {
        let mut out = Vec::new();
        for (i, need) in step.needs.iter().enumerate() {
            let span = self.span(&path!["steps", id, "needs", i]);
            if let Some(&n) = index.get(need.as_str()) {
                if out.contains(&n) {
                    self.problems.push(
                        Problem::warning(format!("step `{id}` lists `{need}` in `needs` twice"))
                            .at(self.file, span, "repeated"),
                    );
                }
                out.push(n);
            } else if !self.loaded.broken_steps.contains(need) {
                let known = index
                    .keys()
                    .copied()
                    .chain(self.loaded.broken_steps.iter().map(String::as_str));
                let help = did_you_mean(need, known);
                self.error(
                    format!("step `{id}` needs `{need}`, which is not a step"),
                    span,
                    "unknown step",
                    help,
                );
            }
        }
        out
    }

    pub(super) fn report_cycle(&mut self, cycle: &[usize], ids: &[&String]) {
        let names: Vec<&str> = cycle.iter().map(|&i| ids[i].as_str()).collect();
        let first = names[0];
        let second = names.get(1).copied().unwrap_or(first);
        let need_at = self.loaded.def.steps[first]
            .needs
            .iter()
            .position(|n| n == second)
            .unwrap_or(0);
        let span = self.span(&path!["steps", first, "needs", need_at]);
        let chain = names.join(" -> ");
        self.problems.push(
            Problem::error(format!("dependency cycle: {chain}"))
                .at(self.file, span, format!("`{first}` needs `{second}`"))
                .help("each step in the cycle waits on the next one (`a -> b` means `a` needs `b`); remove one of these needs"),
        );
    }
}

/// Reads `provider/model`; the problem, when there is one, is not yet placed in a file. `context`
/// ends its message (` (model of agent `x`)`).
pub(super) fn model_ref(
    text: &str,
    providers: &BTreeMap<String, ProviderSpec>,
    context: &str,
) -> Result<ModelRef, Problem> {
    // Where only `provider/model` will do (a `[prices]` key, an alias's definition), an alias
    // is no model.
    let resolved = if text.contains('/') {
        resolve_model(text, &BTreeMap::new(), providers)
    } else {
        Err(Unresolved::NotAModel)
    };
    resolved.map_err(|why| unresolved_problem(text, &why, providers, context))
}

/// The diagnostic of a `provider/model` that [`resolve_model`] refused.
pub(super) fn unresolved_problem(
    text: &str,
    why: &Unresolved,
    providers: &BTreeMap<String, ProviderSpec>,
    context: &str,
) -> Problem {
    let Unresolved::UnknownProvider(provider) = why else {
        return Problem::error(format!(
            "`{text}` is not a model{context}: write `provider/model`"
        ))
        .help(format!(
            "for example `{}` or `openai/gpt-4.1`",
            crate::provider::known::newest_claude("sonnet")
        ));
    };
    let help = did_you_mean(provider, providers.keys().map(String::as_str)).unwrap_or_else(|| {
        format!(
            "providers are {}; add others under `[providers.NAME]`",
            providers
                .keys()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    });
    Problem::error(format!(
        "unknown provider `{provider}` in `{text}`{context}"
    ))
    .help(help)
}
