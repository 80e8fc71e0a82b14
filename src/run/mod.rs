//! Running a plan: each step in dependency order with its upstream results rendered into its
//! prompt, its own model client and tools, and `run.json` plus transcripts written as it goes.

pub mod state;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use camino::{Utf8Path, Utf8PathBuf};
use minijinja::Value as JinjaValue;

use crate::error::Problem;
use crate::plan::{Plan, PlannedStep};
use crate::provider::client::{ModelClient, Secret};
use crate::session::transcript::Transcript;
use crate::session::{self, DEFAULT_MAX_TOKENS, StepInput};
use crate::template;
use crate::tools::bash::scrubbed_vars;
use crate::tools::confine::Workspace;
use crate::tools::registry::ToolBox;
pub use state::{RunRecord, RunStatus, StepRecord, StepStatus};

/// Progress of a run, reported as it happens. Only the CLI knows how to show it.
pub trait Reporter: Send {
    fn step_started(&mut self, step: &PlannedStep);
    fn step_finished(&mut self, step: &PlannedStep, record: &StepRecord);
}

/// A reporter that shows nothing.
pub struct Silent;

impl Reporter for Silent {
    fn step_started(&mut self, _: &PlannedStep) {}
    fn step_finished(&mut self, _: &PlannedStep, _: &StepRecord) {}
}

pub struct RunOptions {
    pub workdir: Utf8PathBuf,
    pub state_dir: Utf8PathBuf,
}

/// Keys for every provider the plan's steps use, read once. A missing key is a problem naming
/// the variable, found before any step starts.
pub fn provider_keys(plan: &Plan) -> Result<BTreeMap<String, Option<Secret>>, Vec<Problem>> {
    let mut keys = BTreeMap::new();
    let mut missing: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for step in &plan.steps {
        let Some(spec) = plan.providers.get(&step.model.provider) else {
            continue;
        };
        let Some(var) = &spec.api_key_env else {
            keys.insert(spec.name.clone(), None);
            continue;
        };
        match std::env::var(var) {
            Ok(value) if !value.trim().is_empty() => {
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

/// Runs every step of `plan` and returns the finished record (also written to disk).
pub async fn execute(
    plan: &Plan,
    keys: &BTreeMap<String, Option<Secret>>,
    options: &RunOptions,
    reporter: &mut dyn Reporter,
) -> Result<RunRecord, Problem> {
    let workspace = Workspace::new(&options.workdir).map_err(|err| {
        Problem::error(format!(
            "cannot use `{}` as the working directory: {err}",
            options.workdir
        ))
    })?;
    let workspace = Arc::new(workspace);
    let configured: Vec<String> = plan
        .providers
        .values()
        .filter_map(|p| p.api_key_env.clone())
        .collect();
    let scrub = Arc::new(scrubbed_vars(&configured));
    let mut record = RunRecord::new(plan);
    let run_dir = options.state_dir.join("runs").join(&record.run_id);
    std::fs::create_dir_all(&run_dir)
        .map_err(|err| Problem::error(format!("cannot create `{run_dir}`: {err}")))?;
    let started = Instant::now();
    record.save(&run_dir);

    let env = template::environment();
    let mut clients: BTreeMap<String, ModelClient> = BTreeMap::new();
    for step in &plan.steps {
        let status = decide(step, &record, plan, &env);
        if let Err(reason) = status {
            let entry = record.step_mut(&step.id);
            entry.status = StepStatus::Skipped;
            entry.error = reason;
            reporter.step_finished(step, entry);
            record.save(&run_dir);
            continue;
        }
        let prompt = match template::render(&env, &step.prompt_template, context(plan, &record)) {
            Ok(prompt) => prompt,
            Err(err) => {
                let entry = record.step_mut(&step.id);
                entry.status = StepStatus::Failed;
                entry.error = Some(format!(
                    "the prompt does not render: {}",
                    template::describe_error(&err)
                ));
                reporter.step_finished(step, entry);
                record.save(&run_dir);
                continue;
            }
        };
        let client = clients
            .entry(step.model.provider.clone())
            .or_insert_with(|| {
                let spec = &plan.providers[&step.model.provider];
                ModelClient::new(
                    spec.kind,
                    &spec.base_url(),
                    keys.get(&spec.name).cloned().flatten(),
                )
            });
        record.step_mut(&step.id).status = StepStatus::Running;
        record.save(&run_dir);
        reporter.step_started(step);
        let step_started = Instant::now();
        let mut transcript = Transcript::create(
            &run_dir
                .join("steps")
                .join(&step.id)
                .join("transcript.jsonl"),
        );
        let tools = ToolBox {
            workspace: workspace.clone(),
            allowed: step.tools.clone(),
            scrub: scrub.clone(),
        };
        let outcome = session::run_step(StepInput {
            model: &step.model.model,
            system_prompt: session::system_prompt(&step.system_prompt, workspace.root().as_str()),
            prompt,
            max_turns: step.max_turns,
            max_tokens: step.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            retries: step.retries,
            client,
            tools: &tools,
            transcript: &mut transcript,
        })
        .await;
        let entry = record.step_mut(&step.id);
        entry.status = if outcome.succeeded {
            StepStatus::Succeeded
        } else {
            StepStatus::Failed
        };
        entry.summary = outcome.summary;
        entry.error = outcome.error.or(transcript.error);
        entry.turns = outcome.turns;
        entry.tool_calls = outcome.tool_calls;
        entry.input_tokens = outcome.usage.input_tokens;
        entry.output_tokens = outcome.usage.output_tokens;
        entry.cache_creation_input_tokens = outcome.usage.cache_creation_input_tokens;
        entry.cache_read_input_tokens = outcome.usage.cache_read_input_tokens;
        entry.duration_ms = step_started.elapsed().as_millis() as u64;
        reporter.step_finished(step, entry);
        record.save(&run_dir);
    }
    record.finish(started.elapsed());
    record.save(&run_dir);
    Ok(record)
}

/// Whether a step runs (SPEC §5): a failed need skips it (unless that need has
/// `continue_on_error`); a skipped need skips it unless it has its own `if`, which then decides.
/// `Err` carries the reason it is skipped.
fn decide(
    step: &PlannedStep,
    record: &RunRecord,
    plan: &Plan,
    env: &minijinja::Environment<'static>,
) -> Result<(), Option<String>> {
    let status_of = |id: &str| record.steps.get(id).map(|r| r.status);
    let tolerates = |id: &str| plan.steps.iter().any(|s| s.id == id && s.continue_on_error);
    let failed: Vec<&str> = step
        .needs
        .iter()
        .map(String::as_str)
        .filter(|need| match status_of(need) {
            Some(StepStatus::Succeeded | StepStatus::Skipped) => false,
            Some(StepStatus::Failed) => !tolerates(need),
            _ => true,
        })
        .collect();
    if !failed.is_empty() {
        return Err(Some(format!("{} did not succeed", failed.join(", "))));
    }
    if let Some(condition) = &step.condition {
        let expr = env.compile_expression(condition).map_err(|err| {
            Some(format!(
                "`if` does not compile: {}",
                template::describe_error(&err)
            ))
        })?;
        let value = expr
            .eval(context(plan, record))
            .map_err(|err| Some(format!("`if` failed: {}", template::describe_error(&err))))?;
        return if value.is_true() {
            Ok(())
        } else {
            Err(Some(format!("`if` is false: {condition}")))
        };
    }
    let skipped: Vec<&str> = step
        .needs
        .iter()
        .map(String::as_str)
        .filter(|need| status_of(need) == Some(StepStatus::Skipped))
        .collect();
    if skipped.is_empty() {
        Ok(())
    } else {
        Err(Some(format!("{} was skipped", skipped.join(", "))))
    }
}

/// The template context at this point of the run: inputs, the workflow, and each step that has
/// finished (templates were checked to read only upstream ones).
fn context(plan: &Plan, record: &RunRecord) -> JinjaValue {
    let steps: BTreeMap<&str, JinjaValue> = record
        .steps
        .iter()
        .filter(|(_, s)| s.status.is_finished())
        .map(|(id, s)| {
            (
                id.as_str(),
                minijinja::context! {
                    summary => s.summary.clone(),
                    status => s.status.as_str(),
                    output => JinjaValue::from(minijinja::value::Serde(&s.output)),
                    branch => s.branch.clone(),
                    diff => s.diff.clone(),
                },
            )
        })
        .collect();
    minijinja::context! {
        inputs => plan.inputs.clone(),
        workflow => minijinja::context! {
            name => plan.name.clone(),
            description => plan.description.clone().unwrap_or_default(),
        },
        steps => steps,
    }
}

/// The state dir's default: `<workdir>/.runner`.
pub fn default_state_dir(workdir: &Utf8Path) -> Utf8PathBuf {
    workdir.join(".runner")
}
