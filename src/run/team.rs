//! The run's context, which every step and subagent of a run shares: the tools, the agents,
//! model aliases and providers, the connected APIs, the subagent limits, the budget, the
//! cassettes and the MCP servers. Sessions see the part subagents need through
//! [`Crew`](crate::session::subagent::Crew).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use crate::session::subagent::Slots;

use crate::agent::AgentCatalog;
use crate::plan::Unresolved;
use crate::provider::{ModelApi, ModelRef, ProviderSpec, Secret, connect};
use crate::session::subagent::Crew;
use crate::tools::Registry;

/// What every step of a run shares for its subagents.
pub struct Team {
    pub registry: Arc<Registry>,
    pub catalog: Arc<AgentCatalog>,
    /// Model aliases and providers, to resolve a subagent's model.
    pub aliases: BTreeMap<String, ModelRef>,
    pub providers: BTreeMap<String, ProviderSpec>,
    /// The providers the workflow and its agents name: the only ones a `task` call may route a
    /// subagent to (a model's `task` call is no place to pick a new endpoint to send the
    /// conversation to).
    pub named_providers: BTreeSet<String>,
    /// APIs by provider; others are connected when a subagent first needs them.
    pub apis: Mutex<BTreeMap<String, Arc<dyn ModelApi>>>,
    /// `max_subagents`: subagents running at once, across the run, handed out by their
    /// steps' priority.
    pub slots: Arc<Slots>,
    /// `max_subagents_per_step`: subagents one step may have unfinished at once.
    pub per_step: u32,
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
        let named_providers = plan
            .aliases
            .values()
            .map(|m| m.provider.clone())
            .chain(
                plan.steps()
                    .iter()
                    .filter_map(|s| s.model.as_ref().map(|m| m.provider.clone())),
            )
            .chain(
                catalog
                    .agents()
                    .filter_map(|a| a.model.as_deref().and_then(ModelRef::parse))
                    .map(|m| m.provider),
            )
            .collect();
        Self {
            registry,
            catalog,
            named_providers,
            aliases: plan.aliases.clone(),
            providers: plan.providers.clone(),
            apis: Mutex::new(apis),
            slots: Slots::new(plan.max_subagents as usize),
            per_step: plan.max_subagents_per_step,
            budget: Arc::new(
                crate::budget::RunBudget::new(
                    plan.max_tokens,
                    plan.max_cost_usd,
                    plan.prices.clone(),
                )
                .from_flag(plan.max_cost_from_flag),
            ),
            tapes: None,
            mcp: Arc::default(),
        }
    }

    /// The API a step (or its subagent) working in `roots` sends to: the provider's, through
    /// the cassettes when recording; only the cassettes when replaying (no key, no network).
    pub fn api_for(
        &self,
        provider: &str,
        events: &crate::event::Emitter,
        roots: Vec<String>,
    ) -> Result<Arc<dyn ModelApi>, String> {
        let spec = self.providers.get(provider);
        match &self.tapes {
            Some(tapes) if tapes.replaying() => Ok(tapes.wrap(None, spec, events, roots)),
            Some(tapes) => Ok(tapes.wrap(Some(self.api(provider)?), spec, events, roots)),
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

    /// `model` as a step would resolve it ([`crate::plan::resolve_model`]), on a provider the
    /// workflow or its agents name (a model's `task` call is no place to pick a new endpoint to
    /// send the conversation to).
    pub fn model(&self, text: &str) -> Result<ModelRef, String> {
        let model =
            crate::plan::resolve_model(text, &self.aliases, &self.providers).map_err(|why| {
                match why {
                    Unresolved::NotAModel => {
                        format!("`{text}` is not a model: write `provider/model` or an alias")
                    }
                    Unresolved::UnknownProvider(provider) => {
                        format!("unknown provider `{provider}` in `{text}`")
                    }
                    Unresolved::UndefinedAlias => format!("model alias `{text}` is not defined"),
                }
            })?;
        if !self.named_providers.contains(&model.provider) {
            return Err(format!(
                "provider `{}` is not one this workflow or its agents use: a subagent runs only on providers the workflow names (use one of its aliases, or name the model in the workflow)",
                model.provider
            ));
        }
        Ok(model)
    }
}

impl Crew for Team {
    fn catalog(&self) -> &AgentCatalog {
        &self.catalog
    }

    fn slots(&self) -> &Arc<Slots> {
        &self.slots
    }

    fn per_step(&self) -> u32 {
        self.per_step
    }

    fn model(&self, text: &str) -> Result<ModelRef, String> {
        Team::model(self, text)
    }

    fn api_for(
        &self,
        provider: &str,
        events: &crate::event::Emitter,
        roots: Vec<String>,
    ) -> Result<Arc<dyn ModelApi>, String> {
        Team::api_for(self, provider, events, roots)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanOptions, build_plan};
    use crate::workflow::load::load_workflow_source;
    use crate::workflow::source::{SourceFile, Syntax};

    /// A subagent's model resolves by the rule a step's does, and is refused for the same
    /// reasons, with the named-provider check on top.
    #[test]
    fn a_subagents_model_follows_the_steps_rule() {
        let text = "name = \"w\"\n[models]\ndefault = \"anthropic/m\"\nbig = \"anthropic/opus\"\n[providers.spare]\nbase_url = \"http://127.0.0.1:1/v1\"\nkind = \"openai\"\n[steps.a]\nagent = \"explore\"\nprompt = \"a\"\n";
        let loaded = load_workflow_source(SourceFile::new("w.toml", text), Syntax::Toml).unwrap();
        let registry = Arc::new(Registry::builtin());
        let catalog = Arc::new(AgentCatalog::load(&[], &registry));
        let (plan, problems) = build_plan(&loaded, &catalog, &registry, &PlanOptions::default());
        let plan = plan.unwrap_or_else(|| panic!("{problems:?}"));
        let team = Team::new(&plan, registry, catalog, BTreeMap::new());
        // `explore` runs on `small`, which falls back to `default`: the step and a subagent agree.
        assert_eq!(plan.steps()[0].model, Some(team.model("small").unwrap()));
        assert_eq!(team.model("big").unwrap().to_string(), "anthropic/opus");
        assert_eq!(
            team.model("anthropic/x").unwrap().to_string(),
            "anthropic/x"
        );
        assert_eq!(
            team.model("anthropic/").unwrap_err(),
            "`anthropic/` is not a model: write `provider/model` or an alias"
        );
        assert_eq!(
            team.model("antropic/x").unwrap_err(),
            "unknown provider `antropic` in `antropic/x`"
        );
        assert_eq!(
            team.model("huge").unwrap_err(),
            "model alias `huge` is not defined"
        );
        assert!(
            team.model("spare/x")
                .unwrap_err()
                .starts_with("provider `spare` is not one this workflow or its agents use")
        );
    }
}
