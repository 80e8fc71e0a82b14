//! Subagents (docs/src/delegation.md): the work behind the `task` tool. A subagent is a conversation
//! of its own (its agent's system prompt, the prompt as its first message), with its agent's tools
//! narrowed to the caller's and its own model, in the step's working directory. Several run at once
//! under one run-wide limit; background ones are collected with `task_output`; a step does not end
//! before its background subagents do, and cancelling the step cancels them.

mod context;
mod scope;
mod slots;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures_util::future::BoxFuture;
use tokio::sync::watch;

use super::{Conversation, Session, StepOutcome, prompt};
use crate::agent::{Agent, AgentSource};
use crate::event::{Emitter, EventKind};
use crate::provider::message::Message;
use crate::provider::{ModelApi, ModelRef};
use crate::record::{StepStatus, SubagentRecord};
use crate::sandbox::Mode;
use crate::tools::task::TaskInput;
use crate::tools::{Delegate, StepTools, TASK, TASK_OUTPUT, ToolContext, ToolOutput};

use context::context_files;
pub use context::fork;
use scope::Saved;
pub use scope::{Crew, EarlierSubagent, StepScope};
pub use slots::{Permit, Priority, Slots};

/// One agent that may delegate: a step (depth 0), or a subagent allowed to nest.
pub struct Delegation {
    pub scope: Arc<StepScope>,
    /// How deep the delegating agent is.
    pub depth: u32,
    /// The delegating agent's model: what an agent file without a `model` (or with `inherit`)
    /// and a fork run on.
    pub model: ModelRef,
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
    permit: Option<Permit>,
}

impl Delegation {
    pub fn for_step(
        scope: Arc<StepScope>,
        model: ModelRef,
        tools: BTreeSet<String>,
        events: Emitter,
    ) -> Self {
        Self {
            scope,
            depth: 0,
            model,
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
    /// A fork's: its caller's system prompt, and where the history it shares ends.
    system: Option<String>,
    shared_until: Option<usize>,
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
            let again = Some(self.scope.team.slots().acquire(self.scope.priority).await);
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

    // Over 80 lines: a subagent's set-up (agent, tools, model, budget, history) in order, each part
    // a few lines.
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
            .catalog()
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
            // A fork continues its caller's conversation, and its cached prefix is the
            // caller's: it runs on the caller's model unless the call names one.
            (None, None) if agent.fork_context => self.model.clone(),
            (None, None) => match agent.model.as_deref() {
                Some(model) => team.model(model)?,
                // As in Claude Code: an agent file that names no model (or `inherit`) runs on
                // its caller's. Only built-ins keep their alias (`explore` on `small`).
                None if agent.source != AgentSource::Builtin => self.model.clone(),
                None => team.model(agent.default_alias)?,
            },
        };
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
        // The subagent's own conversation, for cassettes too (replayed in its own order).
        let api = team.api_for(
            &model.provider,
            &events,
            vec![ctx.workspace.root().to_string()],
        )?;
        let parent = ctx
            .conversation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|_| saved.is_none() && agent.fork_context)
            .map(fork);
        let mut offered = None;
        let (mut system, mut shared_until) = (None, None);
        let (history, first_message) = match (saved, parent) {
            (Some(saved), _) => (saved.messages, format!("{}{files}", input.prompt)),
            (None, Some(fork)) => {
                // The caller's prefix byte for byte: its system prompt and tools; the agent's
                // own instructions come with the task.
                system = Some(fork.system);
                offered = Some(fork.tools);
                shared_until = fork.shared_until;
                let first = format!(
                    "--- The conversation above is the one you were started from. You are now the subagent `{}`: do only the task below, and end with its result. Tools you were not given answer with an error. ---\n\n{}\n\n{}{files}",
                    agent.name, agent.system_prompt, input.prompt
                );
                (fork.history, first)
            }
            (None, None) => (
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
                model: model.clone(),
                tools: tools.clone(),
                events: events.clone(),
                hold: Mutex::default(),
            }));
        }
        let dont_ask = agent.permission_mode == crate::agent::PermissionMode::DontAsk;
        Ok(Prepared {
            id,
            agent,
            model,
            api,
            tools: StepTools {
                registry: self.scope.registry.clone(),
                allowed: tools,
                context,
                offered,
                dont_ask,
            },
            history,
            first_message,
            system,
            shared_until,
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

    // Over 80 lines: a subagent's run in order (slot, start event, conversation, record, end
    // event), whose parts share the slot it holds and its timing.
    /// Runs a prepared subagent to its end, under the run-wide limit.
    async fn run(&self, job: Prepared, description: String, background: bool) -> ToolOutput {
        let scope = &self.scope;
        // A subagent starts (and its time counts) once it has a slot.
        let asked = Instant::now();
        let slot = Some(scope.team.slots().acquire(scope.priority).await);
        let queued = asked.elapsed();
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
            system: job.system.unwrap_or_else(|| {
                prompt::with_memory(
                    prompt::system_prompt(&job.agent.system_prompt, None),
                    scope
                        .memory
                        .as_ref()
                        .filter(|_| !job.agent.omit_project_memory),
                ) + &job
                    .agent
                    .memory
                    .map(|memory| {
                        super::agent_memory::section(
                            &job.tools.context.workspace,
                            crate::agent::home_dir().as_deref(),
                            memory,
                            &job.agent.name,
                        )
                    })
                    .unwrap_or_default()
            }),
            shared_until: job.shared_until,
            history: job.history,
            first_message: job.first_message,
            max_turns: job.agent.max_turns.unwrap_or(scope.max_turns),
            max_tokens: scope.max_tokens,
            retries: scope.retries,
            output_schema: None,
            tools: &job.tools,
            events: &job.events,
            meter: &scope.meter.for_model(&job.model),
            checks: &[],
            check_retries: 0,
            window: scope.window,
            effort: job.agent.effort,
        })
        .await;
        if let Some(child) = child {
            child.hold().permit = None;
        }
        drop(held);
        let elapsed = started.elapsed();
        let mut record = record(&job.id, &job.agent.name, &job.model, &conversation, elapsed);
        record.queue_ms = Some(queued.as_millis() as u64);
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
            crate::units::tokens(record.total_tokens())
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

/// Aborts a spawned subagent when the call waiting for it is dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Delegation {
    /// The same delegation, owned, for a subagent on a task of its own.
    fn detached(&self) -> Delegation {
        Delegation {
            scope: self.scope.clone(),
            depth: self.depth,
            model: self.model.clone(),
            tools: self.tools.clone(),
            events: self.events.clone(),
            hold: Mutex::default(),
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
        cache_creation_input_tokens: conversation.usage.cache_creation_input_tokens,
        cache_read_input_tokens: conversation.usage.cache_read_input_tokens,
        duration_ms: elapsed.as_millis() as u64,
        error,
        queue_ms: None,
    }
}
impl Delegate for Delegation {
    fn task<'a>(&'a self, input: TaskInput, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let job = match self.prepare(&input, ctx) {
                Ok(job) => job,
                Err(error) => return ToolOutput::error(error),
            };
            let unfinished = match self.scope.start_one() {
                Ok(unfinished) => unfinished,
                Err(error) => return ToolOutput::error(error),
            };
            // An agent whose file says `background: true` runs in the background unless the
            // call says otherwise.
            if !input.run_in_background.unwrap_or(job.agent.background) {
                // Each on a task of its own, so the subagents of one turn run on every worker
                // thread; the call still waits for it, and a step that stops (a timeout drops
                // this call) stops it too.
                let delegation = self.detached();
                let cancel = self.scope.cancel.clone();
                let description = input.description.clone();
                let task = tokio::spawn(async move {
                    tokio::select! {
                        output = delegation.run(job, description, false) => output,
                        () = cancel.cancelled() => ToolOutput::error("cancelled with its step"),
                    }
                });
                let _stop = AbortOnDrop(task.abort_handle());
                let output = self
                    .waiting(async move {
                        task.await.unwrap_or_else(|err| {
                            ToolOutput::error(format!("the subagent crashed: {err}"))
                        })
                    })
                    .await;
                drop(unfinished);
                return output;
            }
            let id = job.id.clone();
            let (sender, receiver) = watch::channel(None);
            self.scope.state().background.insert(id.clone(), receiver);
            let delegation = self.detached();
            let cancel = self.scope.cancel.clone();
            let description = input.description.clone();
            tokio::spawn(async move {
                let output = tokio::select! {
                    output = delegation.run(job, description, true) => output,
                    () = cancel.cancelled() => ToolOutput::error("cancelled with its step"),
                };
                drop(unfinished);
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

    fn roster(&self) -> Vec<(String, String)> {
        let catalog = self.scope.team.catalog();
        self.scope
            .spawnable
            .iter()
            .map(|name| {
                let description = catalog
                    .get(name)
                    .map(|a| a.description.clone())
                    .unwrap_or_default();
                (name.clone(), description)
            })
            .collect()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
