//! Subagents (SPEC §6): the work behind the `task` tool. A subagent is a conversation of its own
//! (its agent's system prompt, the prompt as its first message), with its agent's tools narrowed
//! to the caller's and its own model, in the step's working directory. Several run at once under
//! one run-wide limit; background ones are collected with `task_output`; a step does not end before
//! its background subagents do, and cancelling the step cancels them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures_util::future::BoxFuture;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;

use super::{Conversation, Session, StepOutcome, prompt};
use crate::agent::{Agent, AgentCatalog};
use crate::event::{Emitter, EventKind};
use crate::provider::message::{Block, ChatRequest, Message, Role};
use crate::provider::{ModelApi, ModelRef, ProviderSpec, Secret, connect};
use crate::run::{StepStatus, SubagentRecord};
use crate::sandbox::Mode;
use crate::tools::task::{ContextFile, TaskInput};
use crate::tools::{Delegate, Registry, StepTools, TASK, TASK_OUTPUT, ToolContext, ToolOutput};

/// What every step of a run shares for its subagents.
pub struct Team {
    pub registry: Arc<Registry>,
    pub catalog: Arc<AgentCatalog>,
    /// Model aliases and providers, to resolve a subagent's model.
    pub aliases: BTreeMap<String, ModelRef>,
    pub providers: BTreeMap<String, ProviderSpec>,
    /// APIs by provider; others are connected when a subagent first needs them.
    pub apis: Mutex<BTreeMap<String, Arc<dyn ModelApi>>>,
    /// `max_subagents`: subagents running at once, across the run.
    pub slots: Arc<Semaphore>,
    /// The run's budget, which every step and subagent charges.
    pub budget: Arc<crate::budget::RunBudget>,
    /// `--record` / `--replay`: every request goes through the cassettes.
    pub tapes: Option<Arc<crate::provider::tape::Tapes>>,
    /// The run's MCP servers.
    pub mcp: Arc<crate::mcp::Hub>,
}

impl Team {
    /// The team of a run of `plan`: its aliases, providers and subagent limit.
    pub fn new(
        plan: &crate::plan::Plan,
        registry: Arc<Registry>,
        catalog: Arc<AgentCatalog>,
        apis: BTreeMap<String, Arc<dyn ModelApi>>,
    ) -> Self {
        Self {
            registry,
            catalog,
            aliases: plan.aliases.clone(),
            providers: plan.providers.clone(),
            apis: Mutex::new(apis),
            slots: Arc::new(Semaphore::new(plan.max_subagents as usize)),
            budget: Arc::new(crate::budget::RunBudget::new(
                plan.max_tokens,
                plan.max_cost_usd,
                plan.prices.clone(),
            )),
            tapes: None,
            mcp: Arc::default(),
        }
    }

    /// The API a step (or its subagent) working in `roots` sends to: the provider's, through
    /// the cassettes when recording; only the cassettes when replaying (no key, no network).
    pub fn api_for(
        &self,
        provider: &str,
        step: &str,
        roots: Vec<String>,
    ) -> Result<Arc<dyn ModelApi>, String> {
        match &self.tapes {
            Some(tapes) if tapes.replaying() => Ok(tapes.wrap(None, step, roots)),
            Some(tapes) => Ok(tapes.wrap(Some(self.api(provider)?), step, roots)),
            None => self.api(provider),
        }
    }

    fn api(&self, provider: &str) -> Result<Arc<dyn ModelApi>, String> {
        let mut apis = self.apis.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(api) = apis.get(provider) {
            return Ok(api.clone());
        }
        let spec = self
            .providers
            .get(provider)
            .ok_or_else(|| format!("there is no provider `{provider}`"))?;
        let key = match &spec.api_key_env {
            Some(var) => Some(Secret::new(crate::secrets::var(var).ok_or_else(|| {
                format!("{var} is not set, so provider `{provider}` cannot be used")
            })?)),
            None => None,
        };
        let api = connect(spec, key);
        apis.insert(provider.to_owned(), api.clone());
        Ok(api)
    }

    /// `model` as a step would resolve it: an alias (`small` and `plan` fall back to `default`)
    /// or `provider/model`.
    fn model(&self, text: &str) -> Result<ModelRef, String> {
        if let Some(model) = ModelRef::parse(text) {
            return if self.providers.contains_key(&model.provider) {
                Ok(model)
            } else {
                Err(format!("unknown provider `{}` in `{text}`", model.provider))
            };
        }
        crate::plan::lookup_alias(&self.aliases, text)
            .cloned()
            .ok_or_else(|| format!("model alias `{text}` is not defined"))
    }
}

/// What the subagents of one step share: who may be spawned, the limits, and what they left.
pub struct StepScope {
    pub team: Arc<Team>,
    /// Agents the step's `task` may spawn.
    pub spawnable: Vec<String>,
    pub max_depth: u32,
    pub max_turns: u32,
    pub max_tokens: u32,
    pub retries: u32,
    /// Cancelled when the step ends or is dropped: background subagents stop with it.
    pub cancel: CancellationToken,
    /// The step's budgets: its subagents charge them too.
    pub meter: crate::budget::Meter,
    /// The step's tools (its MCP servers' included).
    pub registry: Arc<Registry>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The last number given to each agent's subagents (`explore#2`).
    numbers: BTreeMap<String, u32>,
    /// Background subagents: their answers once they have one.
    background: BTreeMap<String, watch::Receiver<Option<ToolOutput>>>,
    /// Finished conversations, for `resume`.
    conversations: BTreeMap<String, Saved>,
}

#[derive(Clone)]
struct Saved {
    agent: String,
    model: ModelRef,
    tools: BTreeSet<String>,
    messages: Vec<Message>,
}

impl StepScope {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        team: Arc<Team>,
        spawnable: Vec<String>,
        max_depth: u32,
        max_turns: u32,
        max_tokens: u32,
        retries: u32,
        meter: crate::budget::Meter,
        registry: Arc<Registry>,
    ) -> Self {
        Self {
            meter,
            registry,
            team,
            spawnable,
            max_depth,
            max_turns,
            max_tokens,
            retries,
            cancel: CancellationToken::new(),
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for every background subagent of the step (a step does not end before them).
    pub async fn wait_background(&self) {
        loop {
            let pending: Vec<watch::Receiver<Option<ToolOutput>>> = self
                .state()
                .background
                .values()
                .filter(|r| r.borrow().is_none())
                .cloned()
                .collect();
            if pending.is_empty() {
                return;
            }
            for mut receiver in pending {
                let _ = receiver.wait_for(Option::is_some).await;
            }
        }
    }
}

/// One agent that may delegate: a step (depth 0), or a subagent allowed to nest.
pub struct Delegation {
    pub scope: Arc<StepScope>,
    /// How deep the delegating agent is.
    pub depth: u32,
    /// Its own tools: a subagent never gets more.
    pub tools: BTreeSet<String>,
    /// Its events; a subagent's events name it.
    pub events: Emitter,
    /// The limit slot it holds (none for a step), given back while it waits for subagents of
    /// its own, so nesting cannot deadlock under a small limit.
    hold: Mutex<Hold>,
}

#[derive(Default)]
struct Hold {
    /// `task` and `task_output` calls of this agent waiting on subagents right now.
    waits: usize,
    permit: Option<OwnedSemaphorePermit>,
}

impl Delegation {
    pub fn for_step(scope: Arc<StepScope>, tools: BTreeSet<String>, events: Emitter) -> Self {
        Self {
            scope,
            depth: 0,
            tools,
            events,
            hold: Mutex::default(),
        }
    }
}

/// A subagent ready to run.
struct Prepared {
    id: String,
    agent: Agent,
    model: ModelRef,
    api: Arc<dyn ModelApi>,
    tools: StepTools,
    history: Vec<Message>,
    first_message: String,
    events: Emitter,
}

impl Delegation {
    fn hold(&self) -> std::sync::MutexGuard<'_, Hold> {
        self.hold.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for `work` (subagents) with this agent's slot given back, and takes a slot again
    /// when its last wait ends: an agent waiting on its subagents is not running, and holding
    /// its slot could deadlock nesting under a small limit.
    async fn waiting<T>(&self, work: impl std::future::Future<Output = T>) -> T {
        {
            let mut hold = self.hold();
            hold.waits += 1;
            hold.permit = None;
        }
        let out = work.await;
        let last = {
            let mut hold = self.hold();
            hold.waits -= 1;
            hold.waits == 0
        };
        // A step holds no slot; a subagent goes back to work only with one.
        if last && self.depth > 0 {
            let again = self.scope.team.slots.clone().acquire_owned().await.ok();
            let mut hold = self.hold();
            if hold.waits == 0 {
                hold.permit = again;
            }
        }
        out
    }

    fn spawnable_list(&self) -> String {
        self.scope
            .spawnable
            .iter()
            .map(|a| format!("`{a}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Everything a `task` call needs before it runs, or the error result the model gets.
    fn prepare(&self, input: &TaskInput, ctx: &ToolContext) -> Result<Prepared, String> {
        // A resumed subagent is taken out while it runs, so two calls cannot resume it at once;
        // it goes back if the call fails before it starts.
        let saved = match &input.resume {
            Some(id) => {
                // One lock: the error lists what can be resumed.
                let mut state = self.scope.state();
                match state.conversations.remove(id) {
                    Some(saved) => Some(saved),
                    None => {
                        let known: Vec<String> = state.conversations.keys().cloned().collect();
                        return Err(if known.is_empty() {
                            format!("there is no finished subagent `{id}` to resume")
                        } else {
                            format!(
                                "there is no finished subagent `{id}` to resume; finished ones are {}",
                                known.join(", ")
                            )
                        });
                    }
                }
            }
            None => None,
        };
        let kept = saved.clone();
        self.prepare_with(input, ctx, saved).inspect_err(|_| {
            if let (Some(id), Some(saved)) = (&input.resume, kept) {
                self.scope.state().conversations.insert(id.clone(), saved);
            }
        })
    }

    fn prepare_with(
        &self,
        input: &TaskInput,
        ctx: &ToolContext,
        saved: Option<Saved>,
    ) -> Result<Prepared, String> {
        let team = &self.scope.team;
        let agent_name = saved.as_ref().map_or(&input.subagent_type, |s| &s.agent);
        if !self.scope.spawnable.contains(agent_name) {
            return Err(format!(
                "there is no subagent type `{agent_name}` here; available: {}",
                self.spawnable_list()
            ));
        }
        let agent = team
            .catalog
            .get(agent_name)
            .cloned()
            .ok_or_else(|| format!("agent `{agent_name}` is not defined"))?;
        let tools = match &saved {
            Some(saved) => saved.tools.clone(),
            None => self.tools_for(&agent),
        };
        if tools.is_empty() {
            return Err(format!(
                "agent `{agent_name}` would have no tools here: none of its tools is one this agent has"
            ));
        }
        let model = match (&saved, &input.model) {
            (Some(saved), None) => saved.model.clone(),
            (_, Some(model)) => team.model(model)?,
            (None, None) => match agent.model.as_deref() {
                Some(model) => team.model(model)?,
                None => team.model(agent.default_alias)?,
            },
        };
        let api = team.api_for(
            &model.provider,
            self.events.step(),
            vec![ctx.workspace.root().to_string()],
        )?;
        let files = context_files(ctx, &input.context_files)?;
        let id = match &input.resume {
            Some(id) => id.clone(),
            None => {
                let mut state = self.scope.state();
                let n = state.numbers.entry(agent.name.clone()).or_insert(0);
                *n += 1;
                format!("{}#{n}", agent.name)
            }
        };
        let events = self.events.subagent(&id);
        let (history, first_message) = match saved {
            Some(saved) => (saved.messages, format!("{}{files}", input.prompt)),
            None if agent.fork_context => {
                let parent = ctx
                    .conversation
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                let history = parent.map_or_else(Vec::new, |p| fork(&p, &tools));
                let first = format!(
                    "--- The conversation above is the one you were started from. You are now the subagent `{}`: do only the task below, and end with its result. ---\n\n{}{files}",
                    agent.name, input.prompt
                );
                (history, first)
            }
            None => (
                Vec::new(),
                prompt::first_message(
                    ctx.workspace.root().as_str(),
                    &format!("{}{files}", input.prompt),
                ),
            ),
        };
        let delegates = tools.contains(TASK);
        let mode = Mode::for_tools(
            ctx.bash.mode == Mode::Off,
            self.scope.registry.any_writes(&tools),
        );
        let mut context =
            ToolContext::new(ctx.workspace.clone(), Arc::new(ctx.bash.with_mode(mode)));
        if delegates {
            context.delegate = Some(Arc::new(Delegation {
                scope: self.scope.clone(),
                depth: self.depth + 1,
                tools: tools.clone(),
                events: events.clone(),
                hold: Mutex::default(),
            }));
        }
        Ok(Prepared {
            id,
            agent,
            model,
            api,
            tools: StepTools {
                registry: self.scope.registry.clone(),
                allowed: tools,
                context,
            },
            history,
            first_message,
            events,
        })
    }

    /// The agent's tools narrowed to this agent's own; `task` only while nesting is allowed.
    fn tools_for(&self, agent: &Agent) -> BTreeSet<String> {
        let registry = &self.scope.registry;
        let mut tools: BTreeSet<String> =
            crate::tools::resolve(registry, &agent.tools, None, agent.disallowed.iter())
                .intersection(&self.tools)
                .cloned()
                .collect();
        if self.depth + 1 >= self.scope.max_depth {
            tools.remove(TASK);
            tools.remove(TASK_OUTPUT);
        }
        tools
    }

    /// Runs a prepared subagent to its end, under the run-wide limit.
    async fn run(&self, job: Prepared, description: String, background: bool) -> ToolOutput {
        let scope = &self.scope;
        // A subagent starts (and its time counts) once it has a slot.
        let slot = scope.team.slots.clone().acquire_owned().await.ok();
        // Its start and end are events of the agent that started it; the rest are its own.
        self.events.emit(EventKind::SubagentStarted {
            step: self.events.step().to_owned(),
            id: job.id.clone(),
            agent: job.agent.name.clone(),
            model: job.model.to_string(),
            description,
            background,
        });
        let started = Instant::now();
        let child = job.tools.context.delegate.as_ref().and_then(delegation_of);
        // The slot is held while it works: by its own delegation when it may nest (which gives
        // it back while waiting on its subagents), here otherwise.
        let held = match child {
            Some(child) => {
                child.hold().permit = slot;
                None
            }
            None => slot,
        };
        let conversation = super::converse(Session {
            api: job.api.as_ref(),
            model: &job.model.model,
            system: prompt::system_prompt(&job.agent.system_prompt, None),
            history: job.history,
            first_message: job.first_message,
            max_turns: job.agent.max_turns.unwrap_or(scope.max_turns),
            max_tokens: scope.max_tokens,
            retries: scope.retries,
            output_schema: None,
            tools: &job.tools,
            events: &job.events,
            meter: &scope.meter.for_model(&job.model),
        })
        .await;
        if let Some(child) = child {
            child.hold().permit = None;
        }
        drop(held);
        let elapsed = started.elapsed();
        let record = record(&job.id, &job.agent.name, &job.model, &conversation, elapsed);
        scope.state().conversations.insert(
            job.id.clone(),
            Saved {
                agent: job.agent.name.clone(),
                model: job.model.clone(),
                tools: job.tools.allowed.clone(),
                messages: conversation.messages.clone(),
            },
        );
        let facts = format!(
            "[agent {} · {} tool call{} · {:.1}s · {} tokens]",
            job.id,
            record.tool_calls,
            if record.tool_calls == 1 { "" } else { "s" },
            elapsed.as_secs_f64(),
            crate::report::tokens(
                conversation.usage.total_input() + conversation.usage.output_tokens
            )
        );
        self.events.emit(EventKind::SubagentFinished {
            step: self.events.step().to_owned(),
            record: Box::new(record),
        });
        match conversation.outcome {
            StepOutcome::Succeeded { summary, .. } => {
                ToolOutput::ok(format!("{summary}\n\n{facts}"))
            }
            StepOutcome::Failed { message, .. } => {
                ToolOutput::error(format!("subagent {} failed: {message}\n\n{facts}", job.id))
            }
        }
    }
}

/// The concrete delegation behind a tool context's delegate, when it is ours.
fn delegation_of(delegate: &Arc<dyn Delegate>) -> Option<&Delegation> {
    delegate.as_any().downcast_ref::<Delegation>()
}

fn record(
    id: &str,
    agent: &str,
    model: &ModelRef,
    conversation: &Conversation,
    elapsed: std::time::Duration,
) -> SubagentRecord {
    let (status, error) = match &conversation.outcome {
        StepOutcome::Succeeded { .. } => (StepStatus::Succeeded, None),
        StepOutcome::Failed { message, .. } => (
            StepStatus::Failed,
            Some(crate::secrets::redact_owned(message.clone())),
        ),
    };
    SubagentRecord {
        id: id.to_owned(),
        agent: agent.to_owned(),
        model: model.to_string(),
        status,
        turns: conversation.turns,
        tool_calls: conversation.tool_calls,
        // As a step's record counts them: cache reads and writes are not input tokens.
        input_tokens: conversation.usage.input_tokens,
        output_tokens: conversation.usage.output_tokens,
        duration_ms: elapsed.as_millis() as u64,
        error,
    }
}

/// The files a `task` call asked for, numbered as `read_file` shows them, ready to append to the
/// first message. A file that cannot be read (outside the directory, missing) fails the call.
fn context_files(ctx: &ToolContext, files: &[ContextFile]) -> Result<String, String> {
    let mut out = String::new();
    for file in files {
        let start = file.start_line.unwrap_or(1).max(1);
        let mut input = serde_json::json!({"path": file.path, "offset": start});
        if let Some(end) = file.end_line {
            if end < start {
                return Err(format!(
                    "context file `{}`: end_line {end} is before start_line {start}",
                    file.path
                ));
            }
            input["limit"] = (end - start + 1).into();
        }
        let read = crate::tools::fs::read_file(&ctx.workspace, &input);
        if read.is_error {
            return Err(format!("context file `{}`: {}", file.path, read.text));
        }
        let lines = match (file.start_line, file.end_line) {
            (None, None) => String::new(),
            _ => format!(
                " lines=\"{start}-{}\"",
                file.end_line
                    .map_or_else(|| "end".to_owned(), |e| e.to_string())
            ),
        };
        out.push_str(&format!(
            "\n\n<context_file path=\"{}\"{lines}>\n{}</context_file>",
            file.path, read.text
        ));
    }
    Ok(out)
}

/// The parent's conversation as a forked subagent starts from it (SPEC §6): tool calls the
/// subagent cannot make, and their results, become short text notes; calls not answered yet
/// (the `task` calls being run, and their siblings) are dropped.
pub fn fork(parent: &ChatRequest, tools: &BTreeSet<String>) -> Vec<Message> {
    let answered: BTreeSet<&str> = parent
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            Block::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
            _ => None,
        })
        .collect();
    let names: BTreeMap<&str, &str> = parent
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            Block::ToolUse { id, name, .. } => Some((id.as_str(), name.as_str())),
            _ => None,
        })
        .collect();
    let short = |text: &str, n: usize| -> String {
        let cut: String = text.chars().take(n).collect();
        if cut.len() < text.len() {
            format!("{cut}…")
        } else {
            cut
        }
    };
    let mut out = Vec::new();
    for message in &parent.messages {
        let mut content = Vec::new();
        for block in &message.content {
            match block {
                Block::ToolUse { id, .. } if !answered.contains(id.as_str()) => {}
                Block::ToolUse { name, input, .. } if !tools.contains(name) => {
                    content.push(Block::Text {
                        text: format!("[called {name} with {}]", short(&input.to_string(), 200)),
                    });
                }
                Block::ToolResult {
                    tool_use_id,
                    content: text,
                    ..
                } if names
                    .get(tool_use_id.as_str())
                    .is_some_and(|n| !tools.contains(*n)) =>
                {
                    let name = names.get(tool_use_id.as_str()).copied().unwrap_or("tool");
                    content.push(Block::Text {
                        text: format!("[{name} returned: {}]", short(text, 500)),
                    });
                }
                other => content.push(other.clone()),
            }
        }
        if content.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(Message {
                role,
                content: last,
            }) if *role == message.role => last.extend(content),
            _ => out.push(Message {
                role: message.role,
                content,
            }),
        }
    }
    // A conversation starts with the user.
    if out.first().is_some_and(|m| m.role == Role::Assistant) {
        out.insert(0, Message::user_text("(earlier conversation)"));
    }
    out
}

impl Delegate for Delegation {
    fn task<'a>(&'a self, input: TaskInput, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let job = match self.prepare(&input, ctx) {
                Ok(job) => job,
                Err(error) => return ToolOutput::error(error),
            };
            if !input.run_in_background {
                return self.waiting(self.run(job, input.description, false)).await;
            }
            let id = job.id.clone();
            let (sender, receiver) = watch::channel(None);
            self.scope.state().background.insert(id.clone(), receiver);
            let delegation = Delegation {
                scope: self.scope.clone(),
                depth: self.depth,
                tools: self.tools.clone(),
                events: self.events.clone(),
                hold: Mutex::default(),
            };
            let cancel = self.scope.cancel.clone();
            let description = input.description.clone();
            tokio::spawn(async move {
                let output = tokio::select! {
                    output = delegation.run(job, description, true) => output,
                    () = cancel.cancelled() => ToolOutput::error("cancelled with its step"),
                };
                let _ = sender.send(Some(output));
            });
            ToolOutput::ok(format!(
                "started subagent {id} in the background ({}); collect its answer with task_output (agent_id \"{id}\")",
                input.description
            ))
        })
    }

    fn output<'a>(&'a self, agent_id: String, wait: bool) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let receiver = self.scope.state().background.get(&agent_id).cloned();
            let Some(mut receiver) = receiver else {
                let known: Vec<String> = self.scope.state().background.keys().cloned().collect();
                return ToolOutput::error(if known.is_empty() {
                    format!("there is no background subagent `{agent_id}`")
                } else {
                    format!(
                        "there is no background subagent `{agent_id}`; there are {}",
                        known.join(", ")
                    )
                });
            };
            if !wait && receiver.borrow().is_none() {
                return ToolOutput::ok(format!("subagent {agent_id} is still running"));
            }
            let answer = self
                .waiting(async move {
                    match receiver.wait_for(Option::is_some).await {
                        Ok(output) => output.clone(),
                        Err(_) => None,
                    }
                })
                .await;
            answer.unwrap_or_else(|| {
                ToolOutput::error(format!("subagent {agent_id} ended without an answer"))
            })
        })
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool_use(id: &str, name: &str) -> Block {
        Block::ToolUse {
            id: id.into(),
            name: name.into(),
            input: json!({"path": "a.rs"}),
        }
    }

    fn result(id: &str, text: &str) -> Block {
        Block::ToolResult {
            tool_use_id: id.into(),
            content: text.into(),
            is_error: false,
        }
    }

    #[test]
    fn a_fork_keeps_what_it_can_use_notes_the_rest_and_drops_unanswered_calls() {
        let parent = ChatRequest {
            model: "m".into(),
            system: "s".into(),
            messages: vec![
                Message::user_text("go"),
                Message {
                    role: Role::Assistant,
                    content: vec![tool_use("t1", "read_file"), tool_use("t2", "write_file")],
                },
                Message {
                    role: Role::User,
                    content: vec![result("t1", "fn a() {}"), result("t2", "created a.rs")],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![
                        Block::Text {
                            text: "Delegating.".into(),
                        },
                        tool_use("t3", "task"),
                    ],
                },
            ],
            tools: Vec::new(),
            max_tokens: 10,
        };
        let tools: BTreeSet<String> = ["read_file".to_owned()].into();
        let forked = fork(&parent, &tools);
        assert_eq!(forked.len(), 4);
        assert_eq!(forked[0], parent.messages[0]);
        assert_eq!(
            forked[1].content,
            vec![
                tool_use("t1", "read_file"),
                Block::Text {
                    text: "[called write_file with {\"path\":\"a.rs\"}]".into()
                }
            ]
        );
        assert_eq!(
            forked[2].content,
            vec![
                result("t1", "fn a() {}"),
                Block::Text {
                    text: "[write_file returned: created a.rs]".into()
                }
            ]
        );
        // The unanswered task call is gone; the text before it stays.
        assert_eq!(
            forked[3].content,
            vec![Block::Text {
                text: "Delegating.".into()
            }]
        );
        // With every tool, nothing but the unanswered call changes.
        let all: BTreeSet<String> = ["read_file", "write_file", "task"].map(String::from).into();
        let same = fork(&parent, &all);
        assert_eq!(same[..3], parent.messages[..3]);
    }
}
