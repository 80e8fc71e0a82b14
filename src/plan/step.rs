//! Resolving one step: its agent, model, limits and output schema.

use super::settings::unresolved_problem;
use super::*;

impl Builder<'_> {
    // Over 80 lines: each step key resolved in turn; the parts with logic of their own are methods
    // already.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn resolve_step(
        &mut self,
        ctx: &StepCtx<'_>,
        step: &Step,
        catalog: &AgentCatalog,
        aliases: &BTreeMap<String, ModelRef>,
        providers: &BTreeMap<String, ProviderSpec>,
        inputs: &BTreeMap<String, Option<String>>,
        env: &minijinja::Environment<'static>,
    ) -> Option<PlannedStep> {
        let id = ctx.id;
        let errors_before = self.error_count();
        let command = step.run.as_deref();
        if command.is_some() {
            self.check_command_keys(id, step);
        } else if step.writes.is_some() {
            let span = self.key_span(&path!["steps", id, "writes"]);
            self.error(
                format!("step `{id}`: `writes` applies to command steps (`run`)"),
                span,
                "command steps only",
                Some(
                    "an agent step may write when its tools do (`write_file`, `edit_file`)".into(),
                ),
            );
        }
        let agent = match command {
            Some(_) => None,
            None => self.resolve_agent(id, step, catalog),
        };

        if let Some(agent) = agent {
            self.check_required_mcp_servers(id, agent);
        }
        let model = agent.and_then(|agent| self.resolve_model(id, step, agent, aliases, providers));
        let tools = match command {
            Some(_) => Some(BTreeSet::new()),
            None => agent.and_then(|agent| self.resolve_tools(id, step, agent)),
        };

        let mut system_prompt = agent.map(|a| a.system_prompt.clone()).unwrap_or_default();
        if let Some(level) = step.thoroughness
            && command.is_none()
        {
            if step.agent != "explore" {
                let span = self.span(&path!["steps", id, "thoroughness"]);
                self.error(
                    format!(
                        "`thoroughness` applies to `explore` steps; step `{id}` uses `{}`",
                        step.agent
                    ),
                    span,
                    "explore only",
                    None,
                );
            } else {
                system_prompt.push_str("\n\n");
                system_prompt.push_str(builtin::thoroughness_instruction(level));
            }
        }

        let output_schema = ctx.schemas.get(ctx.index).cloned().flatten();
        let schema_failed = step.output_schema.is_some() && output_schema.is_none();

        if let Some(condition) = &step.condition {
            self.check_condition(ctx, condition, env);
        }
        // What the step's own templates see: `item` too, when it fans out.
        let (for_each, item) = self.resolve_for_each(ctx, step, inputs, env);
        let item_ctx = StepCtx {
            item,
            ..ctx.clone()
        };
        let ctx = &item_ctx;
        let prompt = match command {
            Some(run) => self.check_run_text(id, run).then(|| run.to_owned()),
            None => self.check_template(ctx, step, inputs, env),
        };
        let checks = self.resolve_checks(id, step);
        let subagents = self.subagents(id, step, catalog, tools.as_ref());
        let subagents = self.limit_subagents(id, step, agent, catalog, subagents);
        self.warn_subagent_isolation(id, &subagents, catalog);
        let env = self.step_env(ctx, step, inputs, env);
        let settings = self.resolve_settings(
            id,
            &step.keys,
            model.as_ref().map(|m| m.model.as_str()),
            agent.and_then(|a| a.max_turns),
            command.is_some(),
            env,
        );
        let mcp_servers = match (agent, &tools) {
            (Some(agent), Some(tools)) => {
                let known = self.mcp_servers_of(agent);
                let used: BTreeSet<&str> = tools
                    .iter()
                    .filter_map(|t| crate::tools::mcp_server(t))
                    .collect();
                known
                    .into_iter()
                    .filter(|(name, _)| used.contains(name.as_str()))
                    .collect()
            }
            _ => BTreeMap::new(),
        };

        if self.error_count() > errors_before || schema_failed {
            return None;
        }
        let tools = tools?;
        let settings = settings?;
        let project_memory = self
            .project_memory
            .filter(|_| settings.project_memory && agent.is_some_and(|a| !a.omit_project_memory));
        let writes = match command {
            Some(_) => step.writes.unwrap_or(false),
            None => self.registry.any_writes(&tools),
        };
        let sandbox = crate::sandbox::Mode::for_tools(self.sandbox_off, writes);
        let isolation = self.isolation_of(id, step);
        let (agent_name, agent_source, model) = match command {
            Some(_) => ("command".to_owned(), AgentSource::Builtin, None),
            None => {
                let agent = agent?;
                (agent.name.clone(), agent.source.clone(), Some(model?))
            }
        };
        Some(PlannedStep {
            id: id.to_owned(),
            description: step.description.clone(),
            agent: agent_name,
            agent_source,
            system_prompt,
            model,
            tools,
            needs: step.needs.clone(),
            prompt_template: step.prompt.clone(),
            prompt: prompt?,
            settings,
            condition: step.condition.clone(),
            output_schema,
            continue_on_error: step.continue_on_error,
            isolation,
            sandbox,
            project_memory,
            subagents,
            mcp_servers,
            command: command.map(str::to_owned),
            checks,
            check_retries: step.check_retries.unwrap_or(DEFAULT_CHECK_RETRIES),
            for_each,
            wave: 0,
            effort: agent.and_then(|a| a.effort),
            permission_mode: agent.map(|a| a.permission_mode).unwrap_or_default(),
            agent_memory: agent.and_then(|a| a.memory),
        })
    }

    /// A subagent works in its caller's directory: an agent file's `isolation: worktree` does
    /// not apply to it there (docs/src/agents.md), which the user should hear before the run.
    fn warn_subagent_isolation(&mut self, id: &str, subagents: &[String], catalog: &AgentCatalog) {
        let isolated: Vec<String> = subagents
            .iter()
            .filter(|name| {
                catalog
                    .get(name)
                    .is_some_and(|a| a.isolation == Some(Isolation::Worktree))
            })
            .map(|name| format!("`{name}`"))
            .collect();
        if isolated.is_empty() {
            return;
        }
        let span = self.span(&path!["steps", id, "agent"]);
        self.problems.push(
            Problem::warning(format!(
                "step `{id}` may start {} as a subagent; `isolation: worktree` applies to an agent's steps, and a subagent works in its caller's directory",
                isolated.join(", ")
            ))
            .at(self.file, span, "spawns subagents"),
        );
    }

    /// Each of the agent's `requiredMcpServers` must be one the step can start: the workflow's
    /// `[mcp_servers]`, the project's `.mcp.json` (when trusted), or the agent's `mcpServers`.
    fn check_required_mcp_servers(&mut self, id: &str, agent: &Agent) {
        let available: BTreeSet<&str> = agent
            .mcp_servers
            .keys()
            .chain(self.project_mcp.keys())
            .chain(self.loaded.def.mcp_servers.keys())
            .map(String::as_str)
            .collect();
        for server in &agent.required_mcp_servers {
            if available.contains(server.as_str()) {
                continue;
            }
            let span = self.span(&path!["steps", id, "agent"]);
            let known = if available.is_empty() {
                "there are none".to_owned()
            } else {
                let names: Vec<String> = available.iter().map(|s| format!("`{s}`")).collect();
                format!("there are {}", names.join(", "))
            };
            let from = agent
                .source
                .path()
                .map_or_else(String::new, |p| format!(" (`{p}`)"));
            self.error(
                format!(
                    "step `{id}`: agent `{}`{from} requires the MCP server `{server}`, which is not available here; {known}",
                    agent.name
                ),
                span,
                "missing MCP server",
                Some(format!(
                    "define `{server}` in the workflow's `[mcp_servers]`, the project's `.mcp.json` (trusted with `--trust-workdir`) or the agent's `mcpServers`"
                )),
            );
        }
    }

    /// `[defaults] env` with the step's `env` on top; each name a valid variable name, each
    /// value a template (checked like the prompt) or text with `${VAR}`, not both.
    fn step_env(
        &mut self,
        ctx: &StepCtx<'_>,
        step: &Step,
        inputs: &BTreeMap<String, Option<String>>,
        jinja: &minijinja::Environment<'static>,
    ) -> BTreeMap<String, String> {
        let id = ctx.id;
        let defaults = &self.loaded.def.defaults.env;
        let mut env = defaults.clone();
        env.extend(step.keys.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        for (name, value) in &env {
            let at = if step.keys.env.contains_key(name) {
                path!["steps", id, "env", name.as_str()].to_vec()
            } else {
                path!["defaults", "env", name.as_str()].to_vec()
            };
            let valid = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                let span = self.key_span(&at);
                self.error(
                    format!("`{name}` is not a valid environment variable name"),
                    span,
                    "invalid name",
                    Some("use letters, digits and `_`, not starting with a digit".into()),
                );
            }
            if template::is_template(value) {
                if value.contains("${") {
                    let span = self.span(&at);
                    self.error(
                        format!(
                            "`{}` mixes a template with `${{VAR}}`",
                            crate::workflow::load::dotted(&at)
                        ),
                        span,
                        "template and variable",
                        Some("a value is a template or names runner's variables with `${VAR}`, not both: use two variables".into()),
                    );
                } else {
                    self.check_text(ctx, &at, value, "env value", inputs, jinja);
                }
            }
        }
        env
    }

    // Over 80 lines: the `subagents` list checked name by name, each failure with its own message.
    /// The agents the step's `task` may spawn: its `subagents` list, checked, or every agent the
    /// workflow sees (sorted either way).
    fn subagents(
        &mut self,
        id: &str,
        step: &Step,
        catalog: &AgentCatalog,
        tools: Option<&BTreeSet<String>>,
    ) -> Vec<String> {
        let delegates = tools.is_some_and(|t| t.contains(crate::tools::TASK));
        // A subagent's tools are its agent's within the step's: an agent whose tools (it has
        // some) share none with the step's could do nothing as one.
        let delegation = [crate::tools::TASK, crate::tools::TASK_OUTPUT];
        let step_tools: BTreeSet<&str> = tools
            .into_iter()
            .flatten()
            .map(String::as_str)
            .filter(|t| !delegation.contains(t))
            .collect();
        let registry = self.registry;
        let useless = |agent: &Agent| {
            let own: BTreeSet<String> = agent
                .tools
                .expand(registry)
                .into_iter()
                .filter(|t| !agent.disallowed.contains(t) && !delegation.contains(&t.as_str()))
                .collect();
            !own.is_empty() && !own.iter().any(|t| step_tools.contains(t.as_str()))
        };
        let Some(list) = &step.subagents else {
            return if delegates {
                catalog
                    .names()
                    .filter(|name| !catalog.get(name).is_some_and(useless))
                    .map(str::to_owned)
                    .collect()
            } else {
                Vec::new()
            };
        };
        if tools.is_some() && !delegates {
            let span = self.key_span(&path!["steps", id, "subagents"]);
            self.problems.push(
                Problem::warning(format!(
                    "step `{id}` has no `task` tool, so `subagents` has no effect"
                ))
                .at(self.file, span, "no effect"),
            );
        }
        let mut names = BTreeSet::new();
        for (i, name) in list.iter().enumerate() {
            if let Some(agent) = catalog.get(name) {
                if delegates && useless(agent) {
                    let span = self.span(&path!["steps", id, "subagents", i]);
                    let step_list: Vec<&str> = step_tools.iter().copied().collect();
                    self.error(
                        format!(
                            "step `{id}` may spawn `{name}`, but its tools and the step's share none: every call would fail"
                        ),
                        span,
                        "no tools in common",
                        Some(format!(
                            "a subagent gets its agent's tools within the step's: agent `{name}` has {}, step `{id}` has {}; give the step one of them, or spawn another agent",
                            super::tools_check::describe_tools(&agent.tools),
                            if step_list.is_empty() { "none besides `task`".to_owned() } else { step_list.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ") }
                        )),
                    );
                    continue;
                }
                names.insert(name.clone());
                continue;
            }
            let span = self.span(&path!["steps", id, "subagents", i]);
            let help = did_you_mean(name, catalog.names()).unwrap_or_else(|| {
                format!(
                    "agents are {}",
                    catalog
                        .names()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            });
            self.error(
                format!("unknown agent `{name}` in `subagents` of step `{id}`"),
                span,
                "unknown agent",
                Some(help),
            );
        }
        if delegates {
            names.into_iter().collect()
        } else {
            Vec::new()
        }
    }

    /// The step's subagents within what its agent's file allows (`tools: Agent(a, b)`,
    /// `disallowedTools: Agent(c)`, as Claude Code writes them); a name the step lists that the
    /// agent does not allow is left out with a warning.
    fn limit_subagents(
        &mut self,
        id: &str,
        step: &Step,
        agent: Option<&Agent>,
        catalog: &AgentCatalog,
        subagents: Vec<String>,
    ) -> Vec<String> {
        let Some(agent) = agent else {
            return subagents;
        };
        if agent.spawn_only.is_none() && agent.spawn_never.is_empty() {
            return subagents;
        }
        let file = agent
            .source
            .path()
            .map_or_else(|| agent.name.clone(), ToString::to_string);
        for name in agent.spawn_only.iter().flatten().chain(&agent.spawn_never) {
            if catalog.get(name).is_none() {
                let span = self.span(&path!["steps", id, "agent"]);
                self.problems.push(
                    Problem::warning(format!(
                        "`{file}` names the agent `{name}` in `Agent(...)`, and there is no such agent"
                    ))
                    .at(self.file, span, "this step's agent"),
                );
            }
        }
        let allowed = |name: &String| {
            agent
                .spawn_only
                .as_ref()
                .is_none_or(|only| only.contains(name))
                && !agent.spawn_never.contains(name)
        };
        let listed = step.subagents.is_some();
        let (kept, left): (Vec<String>, Vec<String>) = subagents.into_iter().partition(allowed);
        if listed && !left.is_empty() {
            let span = self.key_span(&path!["steps", id, "subagents"]);
            self.problems.push(
                Problem::warning(format!(
                    "step `{id}` lists {} in `subagents`, which its agent `{}` may not start (`{file}`); left out",
                    left.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "),
                    agent.name
                ))
                .at(self.file, span, "left out"),
            );
        }
        kept
    }

    pub(super) fn resolve_agent<'c>(
        &mut self,
        id: &str,
        step: &Step,
        catalog: &'c AgentCatalog,
    ) -> Option<&'c Agent> {
        if let Some(agent) = catalog.get(&step.agent) {
            if let Some(warnings) = catalog.warnings.get(&step.agent) {
                self.problems.extend(warnings.iter().cloned());
            }
            return Some(agent);
        }
        let span = self.span(&path!["steps", id, "agent"]);
        if let Some((path, problems)) = catalog.broken.get(&step.agent) {
            self.error(
                format!("agent `{}` (from `{path}`) is invalid", step.agent),
                span,
                "this agent's file has errors",
                Some("fix the problems reported for that file".into()),
            );
            self.problems.extend(problems.iter().cloned());
            return None;
        }
        let names: Vec<&str> = catalog.names().collect();
        let help = did_you_mean(&step.agent, names.iter().copied()).unwrap_or_else(|| {
            format!(
                "agents are {}; user agents live in `agents/` beside the workflow's folder or in `.claude/agents/`",
                names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
            )
        });
        self.error(
            format!("unknown agent `{}` in step `{id}`", step.agent),
            span,
            "unknown agent",
            Some(help),
        );
        None
    }

    // Over 80 lines: the model resolution order (step, agent, aliases, defaults) with a message for
    // each miss.
    /// docs/src/models.md: the step's model, else the agent's, else the agent's alias;
    /// `small` and `plan` fall back to `default`; nothing is made up.
    pub(super) fn resolve_model(
        &mut self,
        id: &str,
        step: &Step,
        agent: &Agent,
        aliases: &BTreeMap<String, ModelRef>,
        providers: &BTreeMap<String, ProviderSpec>,
    ) -> Option<ModelRef> {
        let (text, from_step) = match (&step.model, &agent.model) {
            (Some(m), _) => (m.as_str(), true),
            (None, Some(m)) => (m.as_str(), false),
            (None, None) => (agent.default_alias, false),
        };
        let (span, label) = if from_step {
            (self.span(&path!["steps", id, "model"]), "here".to_owned())
        } else {
            (
                self.span(&path!["steps", id, "agent"]),
                format!("agent `{}` picks the model", agent.name),
            )
        };
        match super::resolve_model(text, aliases, providers) {
            Ok(model) => return Some(model),
            Err(Unresolved::UndefinedAlias) => {}
            Err(why) => {
                let context = if from_step {
                    String::new()
                } else {
                    format!(" (model of agent `{}`)", agent.name)
                };
                let problem = unresolved_problem(text, &why, providers, &context);
                self.problems.push(problem.at(self.file, span, label));
                return None;
            }
        }
        // `small` and `plan` fall back to a `default` whose definition was already reported.
        if matches!(text, "small" | "plan")
            && matches!(
                self.missing_aliases.get("default"),
                Some(MissingAlias::BadDefinition)
            )
        {
            return None;
        }
        match self.missing_aliases.get_mut(text) {
            Some(MissingAlias::Undefined { others, .. }) => {
                others.push(id.to_owned());
                return None;
            }
            Some(MissingAlias::BadDefinition) => return None,
            None => {}
        }
        let via = if text == "default" || !matches!(text, "small" | "plan") {
            String::new()
        } else {
            " (which falls back to `default`)".to_owned()
        };
        let message = if from_step || agent.model.is_some() {
            format!("step `{id}`: model alias `{text}`{via} is not defined")
        } else {
            format!(
                "step `{id}` has no model: agent `{}` uses the alias `{text}`{via}, and no such alias is set",
                agent.name
            )
        };
        let alias_hint = closest(text, aliases.keys().map(String::as_str))
            .map(|c| format!("did you mean `{c}`? Otherwise add "))
            .unwrap_or_else(|| "add ".to_owned());
        let help = if matches!(text, "small" | "plan") && !aliases.contains_key("default") {
            format!(
                "{alias_hint}`default = \"{}\"` (or any provider/model) under `models`, or `{text} = ...` for this kind of agent alone; or pass `--model default=provider/model`",
                crate::provider::known::newest_claude("default")
            )
        } else {
            format!(
                "{alias_hint}`{text} = \"{}\"` (or any provider/model) under `models`, or pass `--model {text}=provider/model`",
                crate::provider::known::newest_claude(text)
            )
        };
        self.missing_aliases.insert(
            text.to_owned(),
            MissingAlias::Undefined {
                message,
                span,
                label,
                help,
                others: Vec::new(),
            },
        );
        None
    }

    /// Reports each undefined alias once, with every step that needs it.
    pub(super) fn report_missing_aliases(&mut self) {
        for missing in std::mem::take(&mut self.missing_aliases).into_values() {
            let MissingAlias::Undefined {
                message,
                span,
                label,
                help,
                others,
            } = missing
            else {
                continue;
            };
            let also = if others.is_empty() {
                String::new()
            } else {
                let list: Vec<String> = others.iter().take(5).map(|s| format!("`{s}`")).collect();
                let more = others.len().saturating_sub(5);
                let tail = if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                };
                format!(" (also needed by {}{tail})", list.join(", "))
            };
            self.problems.push(
                Problem::error(format!("{message}{also}"))
                    .at(self.file, span, label)
                    .help(help),
            );
        }
    }

    pub(super) fn duration(&mut self, text: &str, at: &[Seg]) -> Option<Duration> {
        match parse_duration(text) {
            Ok(d) => Some(d),
            Err(why) => {
                let span = self.span(at);
                self.error(
                    format!(
                        "`{}` is not a duration: {why}",
                        crate::workflow::load::dotted(at)
                    ),
                    span,
                    "invalid duration",
                    Some("write a number and a unit: `90s`, `10m`, `1h30m`".into()),
                );
                None
            }
        }
    }

    pub(super) fn load_output_schema(&mut self, id: &str, schema: &Value) -> Option<Value> {
        let at = path!["steps", id, "output_schema"];
        let span = self.span(&at);
        let schema = match schema {
            Value::String(rel) => {
                let base = self.file.name.parent().unwrap_or(Utf8Path::new(""));
                let path = base.join(rel);
                let text = match crate::limits::read_text(&path, crate::limits::MAX_SCHEMA_BYTES) {
                    Ok(text) => text,
                    Err(err) => {
                        self.error(
                            format!("cannot read output schema `{path}`: {err}"),
                            span,
                            "schema file",
                            None,
                        );
                        return None;
                    }
                };
                match serde_json::from_str::<Value>(&text) {
                    Ok(v) => v,
                    Err(err) => {
                        self.error(
                            format!("output schema `{path}` is not valid JSON: {err}"),
                            span,
                            "schema file",
                            None,
                        );
                        return None;
                    }
                }
            }
            other => other.clone(),
        };
        if let Err(err) = jsonschema::validator_for(&schema) {
            self.error(
                format!("`steps.{id}.output_schema` is not a valid JSON Schema: {err}"),
                span,
                "invalid schema",
                None,
            );
            return None;
        }
        Some(schema)
    }
}
