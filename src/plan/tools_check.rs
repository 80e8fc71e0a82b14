//! A step's tools: its lists read against the registry, and the warning about steps that may
//! write the same directory at once.

use super::*;

/// Warnings about steps that may write at once, at most.
const MAX_OVERLAP_WARNINGS: usize = 5;
/// Graph searches spent looking for such steps in different waves.
const MAX_ANCESTRY_CHECKS: usize = 2_000;

impl Builder<'_> {
    // Over 80 lines: the tool list rules (agent, step, disallowed, MCP, aliases) in their order of
    // precedence.
    pub(super) fn resolve_tools(
        &mut self,
        id: &str,
        step: &Step,
        agent: &Agent,
    ) -> Option<BTreeSet<String>> {
        let step_tools = match &step.tools {
            Some(list) => Some(self.tool_list(id, "tools", list)?),
            None => None,
        };
        let disallowed = self
            .tool_list(id, "disallowed_tools", &step.disallowed_tools)?
            .expand(self.registry);
        let mut tools = tools::resolve(
            self.registry,
            &agent.tools,
            step_tools.as_ref(),
            agent.disallowed.iter().chain(&disallowed),
        );
        // `*` reaches every MCP server the step can see, as `mcp__<server>`.
        if step_tools.as_ref().unwrap_or(&agent.tools) == &ToolSet::All {
            for server in self.mcp_servers_of(agent).into_keys() {
                let all = format!("mcp__{server}");
                if !disallowed.contains(&all) && !agent.disallowed.contains(&all) {
                    tools.insert(all);
                }
            }
        }
        let known = self.mcp_servers_of(agent);
        // Claude Code's `mcpServers: [name]` gives the agent that server's tools.
        for name in &agent.mcp_server_names {
            if !known.contains_key(name) {
                let span = self.span(&path!["steps", id, "agent"]);
                self.error(
                    format!(
                        "agent `{}` names MCP server `{name}` in `mcpServers`, but neither the workflow's `[mcp_servers]` nor a trusted `.mcp.json` defines it",
                        agent.name
                    ),
                    span,
                    "unknown MCP server",
                    Some("define it under `[mcp_servers.NAME]`, or trust the working directory's `.mcp.json` (`--trust-workdir` or `trust_workdir = true`)".to_owned()),
                );
                return None;
            }
            let all = format!("mcp__{name}");
            let overridden = step.tools.is_some();
            if !overridden && !disallowed.contains(&all) && !agent.disallowed.contains(&all) {
                tools.insert(all);
            }
        }
        for tool in &tools {
            let Some(server) = tools::mcp_server(tool) else {
                continue;
            };
            if !known.contains_key(server) {
                let span = self.span(&path![
                    "steps",
                    id,
                    if step.tools.is_some() {
                        "tools"
                    } else {
                        "agent"
                    }
                ]);
                let help = crate::error::did_you_mean(server, known.keys().map(String::as_str))
                    .unwrap_or_else(|| "declare it under `[mcp_servers.NAME]` (or in the agent file's `mcpServers`)".to_owned());
                self.error(
                    format!("step `{id}` uses `{tool}`, but there is no MCP server `{server}`"),
                    span,
                    "unknown MCP server",
                    Some(help),
                );
                return None;
            }
        }
        // `tools = []` on purpose: a step that only formats or judges what it is given.
        let none_on_purpose =
            matches!(&step_tools, Some(ToolSet::Some(listed)) if listed.is_empty());
        if tools.is_empty() && !none_on_purpose {
            let key = if step.tools.is_some() {
                "tools"
            } else if !step.disallowed_tools.is_empty() {
                "disallowed_tools"
            } else {
                "agent"
            };
            let span = self.span(&path!["steps", id, key]);
            self.error(
                format!("step `{id}` has no tools left"),
                span,
                "resolves to nothing",
                Some(format!(
                    "agent `{}` gives {}; `tools` replaces that list and `disallowed_tools` removes from it",
                    agent.name,
                    describe_tools(&agent.tools)
                )),
            );
            return None;
        }
        Some(tools)
    }

    /// The MCP servers a step with `agent` can use: the workflow's, then the agent file's (the
    /// workflow's entry wins a name both declare).
    pub(super) fn mcp_servers_of(
        &self,
        agent: &Agent,
    ) -> BTreeMap<String, crate::workflow::McpServerDef> {
        let mut servers = agent.mcp_servers.clone();
        for name in &agent.mcp_server_names {
            if let Some(def) = self.project_mcp.get(name) {
                servers.insert(name.clone(), def.clone());
            }
        }
        servers.extend(
            self.loaded
                .def
                .mcp_servers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        servers
    }

    pub(super) fn tool_list(&mut self, id: &str, key: &str, names: &[String]) -> Option<ToolSet> {
        let mut set = BTreeSet::new();
        let mut ok = true;
        let mut all = false;
        for (i, name) in names.iter().enumerate() {
            let span = self.span(&path!["steps", id, key, i]);
            match self.registry.entry(name) {
                ToolEntry::All => all = true,
                ToolEntry::Tool(tool) | ToolEntry::Mcp(tool) => {
                    set.insert(tool);
                }
                ToolEntry::Unsupported(name) => self.problems.push(
                    Problem::warning(crate::tools::left_out(&name)).at(self.file, span, "left out"),
                ),
                ToolEntry::Spawn(_) => self.problems.push(
                    Problem::warning(format!(
                        "`{name}` limits the subagents of an agent file; in a workflow, give the step `task` and say `subagents = [...]`"
                    ))
                    .at(self.file, span, "left out"),
                ),
                ToolEntry::Unknown(name) => {
                    ok = false;
                    let help = Some(self.registry.unknown_help(&name));
                    self.error(
                        format!("unknown tool `{name}` in step `{id}`"),
                        span,
                        "unknown tool",
                        help,
                    );
                }
            }
        }
        if !ok {
            return None;
        }
        Some(if all {
            ToolSet::All
        } else {
            ToolSet::Some(set)
        })
    }

    // Over 80 lines: every pair of steps that may write at once, checked in one pass with one
    // warning each.
    /// Two steps that can change files, in the same directory, with nothing ordering them, may
    /// overwrite each other's work: worth a warning.
    pub(super) fn warn_concurrent_writers(
        &mut self,
        graph: &StepGraph,
        ids: &[&String],
        resolved: &[Option<PlannedStep>],
    ) {
        // Bash writes only in steps that have a write tool (otherwise its sandbox is read-only).
        let writers: Vec<usize> = resolved
            .iter()
            .enumerate()
            .filter(|(_, step)| {
                step.as_ref().is_some_and(|s| {
                    s.isolation != Isolation::Worktree && self.registry.any_writes(&s.tools)
                })
            })
            .map(|(i, _)| i)
            .collect();
        // Steps of one wave never wait for each other; steps of different waves may or may not
        // (one may need the other). Same-wave pairs need no graph search, so they come first;
        // other pairs are searched within a budget, so a huge plan stays fast.
        let Some(waves) = graph.waves() else {
            return;
        };
        let mut wave_of = vec![0; ids.len()];
        for (w, wave) in waves.iter().enumerate() {
            for &i in wave {
                wave_of[i] = w;
            }
        }
        let mut by_wave: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &w in &writers {
            by_wave.entry(wave_of[w]).or_default().push(w);
        }
        let mut pairs = Vec::new();
        'same: for group in by_wave.values() {
            for (n, &a) in group.iter().enumerate() {
                for &b in &group[n + 1..] {
                    if pairs.len() >= MAX_OVERLAP_WARNINGS {
                        break 'same;
                    }
                    pairs.push((a, b));
                }
            }
        }
        pairs.sort_unstable();
        let mut budget = MAX_ANCESTRY_CHECKS;
        'search: for (n, &a) in writers.iter().enumerate() {
            for &b in &writers[n + 1..] {
                if pairs.len() >= MAX_OVERLAP_WARNINGS || budget == 0 {
                    break 'search;
                }
                if wave_of[a] == wave_of[b] {
                    continue;
                }
                budget -= 1;
                // Only a step of an earlier wave can be the other's ancestor.
                let (early, late) = if wave_of[a] < wave_of[b] {
                    (a, b)
                } else {
                    (b, a)
                };
                if !graph.is_ancestor(early, late) {
                    pairs.push((a, b));
                }
            }
        }
        for (a, b) in pairs.into_iter().take(MAX_OVERLAP_WARNINGS) {
            let span = self.key_span(&path!["steps", ids[b].as_str()]);
            self.problems.push(
                Problem::warning(format!(
                    "steps `{}` and `{}` can change files and may run at the same time in the same directory",
                    ids[a], ids[b]
                ))
                .at(self.file, span, "may overlap")
                .help(format!(
                    "set `isolation = \"worktree\"` on one of them, or order them with `needs = [\"{}\"]`",
                    ids[a]
                )),
            );
        }
    }
}

pub(super) fn describe_tools(tools: &ToolSet) -> String {
    match tools {
        ToolSet::All => "all tools".into(),
        ToolSet::Some(set) if set.is_empty() => "no tools".into(),
        ToolSet::Some(set) => set
            .iter()
            .map(|t| format!("`{t}`"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}
