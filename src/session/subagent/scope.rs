//! What subagents share: what they need of the run ([`Crew`]: agents, models, APIs, the
//! run-wide limit) and a step's [`StepScope`] (who may be spawned, its limits, its background subagents and the
//! conversations `resume` continues).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::agent::AgentCatalog;
use crate::provider::message::Message;
use crate::provider::{ModelApi, ModelRef};
use crate::tools::{Registry, ToolOutput};

/// What a step's subagents need of their run: the agents they may be, their models and the APIs
/// to send to, the run-wide and per-step limits. The run's `Team` (`run/team.rs`) is it; the
/// trait lets this floor use the run's context without importing the floor above it.
pub trait Crew: Send + Sync {
    /// The agents a `task` call may name.
    fn catalog(&self) -> &AgentCatalog;
    /// `max_subagents`: subagents running at once, across the run.
    fn slots(&self) -> &Arc<super::Slots>;
    /// `max_subagents_per_step`: subagents one step may have unfinished at once.
    fn per_step(&self) -> u32;
    /// `model` (a `task` call's or an agent's) as a step would resolve it, on a provider the
    /// workflow names.
    fn model(&self, text: &str) -> Result<ModelRef, String>;
    /// The API a subagent working in `roots` sends to.
    fn api_for(
        &self,
        provider: &str,
        events: &crate::event::Emitter,
        roots: Vec<String>,
    ) -> Result<Arc<dyn ModelApi>, String>;
}

/// What the subagents of one step share: who may be spawned, the limits, and what they left.
pub struct StepScope {
    pub team: Arc<dyn Crew>,
    /// Agents the step's `task` may spawn.
    pub spawnable: Vec<String>,
    pub max_depth: u32,
    pub max_turns: u32,
    pub max_tokens: u32,
    pub retries: u32,
    /// The step's context window: its subagents keep theirs inside the same.
    pub window: crate::session::context::Window,
    /// Cancelled when the step ends or is dropped: background subagents stop with it.
    pub cancel: CancellationToken,
    /// The step's budgets: its subagents charge them too.
    pub meter: crate::budget::Meter,
    /// The step's tools (its MCP servers' included).
    pub registry: Arc<Registry>,
    /// The project memory the step got, which its subagents get too unless their agent omits
    /// it (`omitClaudeMd`).
    pub memory: Option<(&'static str, String)>,
    /// The step's place in the scheduler's order: its subagents wait for a slot by it.
    pub priority: super::Priority,
    state: Mutex<State>,
}

#[derive(Default)]
pub(super) struct State {
    /// The last number given to each agent's subagents (`explore#2`).
    pub(super) numbers: BTreeMap<String, u32>,
    /// Background subagents: their answers once they have one.
    pub(super) background: BTreeMap<String, watch::Receiver<Option<ToolOutput>>>,
    /// Finished conversations, for `resume`.
    pub(super) conversations: BTreeMap<String, Saved>,
    /// Subagents started and not yet finished (foreground or background, nested included).
    pub(super) unfinished: u32,
}

/// One unfinished subagent of a step, counted until it is dropped (finished or cancelled).
pub(super) struct Unfinished(Arc<StepScope>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.unfinished = state.unfinished.saturating_sub(1);
    }
}

impl StepScope {
    /// Counts one more unfinished subagent, unless the step already has its
    /// `max_subagents_per_step`.
    pub(super) fn start_one(self: &Arc<Self>) -> Result<Unfinished, String> {
        let mut state = self.state();
        let cap = self.team.per_step();
        if state.unfinished >= cap {
            return Err(format!(
                "this step already has {cap} subagents unfinished (`max_subagents_per_step = {cap}`); collect some with task_output first"
            ));
        }
        state.unfinished += 1;
        Ok(Unfinished(self.clone()))
    }
}

#[derive(Clone)]
pub(super) struct Saved {
    pub(super) agent: String,
    pub(super) model: ModelRef,
    pub(super) tools: BTreeSet<String>,
    pub(super) messages: Vec<Message>,
}

impl StepScope {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        team: Arc<dyn Crew>,
        spawnable: Vec<String>,
        max_depth: u32,
        max_turns: u32,
        max_tokens: u32,
        retries: u32,
        window: crate::session::context::Window,
        meter: crate::budget::Meter,
        registry: Arc<Registry>,
        memory: Option<(&'static str, String)>,
    ) -> Self {
        Self {
            meter,
            registry,
            memory,
            team,
            spawnable,
            max_depth,
            max_turns,
            max_tokens,
            retries,
            window,
            cancel: CancellationToken::new(),
            priority: super::Priority::default(),
            state: Mutex::default(),
        }
    }

    /// With `--continue`: the subagents the step had in its earlier run, finished and ready to
    /// `resume` by their ids; new ones are numbered after them (`explore#3` after `explore#2`).
    /// Their tools are what they would get now: their agent's, within the step's `step_tools`.
    pub fn carry_over(&self, earlier: Vec<EarlierSubagent>, step_tools: &BTreeSet<String>) {
        let mut state = self.state();
        for subagent in earlier {
            if let Some((agent, n)) = subagent.id.rsplit_once('#')
                && let Ok(n) = n.parse::<u32>()
            {
                let number = state.numbers.entry(agent.to_owned()).or_insert(0);
                *number = (*number).max(n);
            }
            let tools = self
                .team
                .catalog()
                .get(&subagent.agent)
                .map(|agent| {
                    let mut tools: BTreeSet<String> = crate::tools::resolve(
                        &self.registry,
                        &agent.tools,
                        None,
                        agent.disallowed.iter(),
                    )
                    .intersection(step_tools)
                    .cloned()
                    .collect();
                    // A step's direct subagents nest only below a depth of one.
                    if self.max_depth <= 1 {
                        tools.remove(crate::tools::task::TASK);
                        tools.remove(crate::tools::task::TASK_OUTPUT);
                    }
                    tools
                })
                .unwrap_or_default();
            if let Some(model) = ModelRef::parse(&subagent.model) {
                state.conversations.insert(
                    subagent.id,
                    Saved {
                        agent: subagent.agent,
                        model,
                        tools,
                        messages: subagent.messages,
                    },
                );
            }
        }
    }

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, State> {
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

/// A subagent a step had in an earlier run (`--continue`): its id, agent, model and conversation.
pub struct EarlierSubagent {
    pub id: String,
    pub agent: String,
    pub model: String,
    pub messages: Vec<crate::provider::message::Message>,
}
