//! OpenTelemetry traces of a run (docs/src/runs.md, "Traces"), a sink like the others: it reads
//! the run's events and makes one span per thing the events say started and ended, with the
//! times the events carry. One trace a run, following the GenAI semantic conventions:
//! `invoke_workflow` for the run, `invoke_agent` per step, fan-out instance and subagent, `chat`
//! per model request, `execute_tool` per tool call, `check` per check, `run` per command step.
//!
//! Configured only by the standard `OTEL_*` variables: with neither
//! `OTEL_EXPORTER_OTLP_ENDPOINT` nor `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` set (or with
//! `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`) nothing is made. The exporter is the
//! `opentelemetry-otlp` crate's over HTTP (`OTEL_EXPORTER_OTLP_PROTOCOL` `http/protobuf`, the
//! default, or `http/json`), sent by the SDK's batch processor on its own thread, flushed when
//! the run ends.
//!
//! What it trusts: nothing it sends. Prompts, replies, tool inputs and outputs go out only with
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, and so do the ids of tool calls
//! (the model's or the server's choice) and why a step or subagent failed (its error quotes
//! answers and output; without capture the status says only `failed`); a tool name the step
//! was not offered goes out as `unknown`. Every string that goes out (ids, errors, commands,
//! content) passes the redactor, and so does every body the exporter sends ([`exporter`]); the
//! values of `OTEL_EXPORTER_OTLP_HEADERS` and the credentials of the endpoint's URL are secrets
//! too.

mod exporter;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::time::SystemTime;

use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, Span};

use crate::event::{Event, EventKind, Sink};
use crate::provider::message::Usage;
use crate::record::{StepRecord, StepStatus};

/// The variable that lets prompts, replies and tool text into spans.
const CAPTURE: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";
/// What a tool name the step was not offered is reported as: the name is the model's text.
const UNKNOWN_TOOL: &str = "unknown";

/// A step's or a subagent's open spans.
struct Scope {
    agent: Span,
    model: String,
    /// The tools its requests offer (from `session_started`): a call to any other is reported
    /// as [`UNKNOWN_TOOL`].
    offered: BTreeSet<String>,
    chat: Option<Span>,
    tools: BTreeMap<String, Span>,
    checks: Vec<Span>,
}

impl Scope {
    fn new(agent: Span, model: &str) -> Self {
        Scope {
            agent,
            model: model.to_owned(),
            offered: BTreeSet::new(),
            chat: None,
            tools: BTreeMap::new(),
            checks: Vec::new(),
        }
    }

    /// Ends the request, tool calls and checks still open, as cut short by `why`.
    fn cut_short(&mut self, at: SystemTime, why: &'static str) {
        for mut span in self
            .chat
            .take()
            .into_iter()
            .chain(std::mem::take(&mut self.tools).into_values())
            .chain(std::mem::take(&mut self.checks))
        {
            span.set_status(Status::error(why));
            span.end_with_timestamp(at);
        }
    }
}

pub struct OtelSink {
    provider: SdkTracerProvider,
    failure: exporter::Failure,
    tracer: SdkTracer,
    content: bool,
    workflow: Option<Span>,
    /// By `(step, subagent id or "")`.
    scopes: BTreeMap<(String, String), Scope>,
}

impl OtelSink {
    /// The sink the environment asks for: `Ok(None)` when it asks for none, `Err` when it asks
    /// for one runner cannot make (said as a warning; the run goes on without traces).
    pub fn from_env() -> Result<Option<Self>, String> {
        let Some((provider, failure)) = exporter::provider()? else {
            return Ok(None);
        };
        let scope = opentelemetry::InstrumentationScope::builder("runner")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer_with_scope(&provider, scope);
        Ok(Some(OtelSink {
            provider,
            failure,
            tracer,
            content: std::env::var(CAPTURE).is_ok_and(|v| v.trim().eq_ignore_ascii_case("true")),
            workflow: None,
            scopes: BTreeMap::new(),
        }))
    }

    /// The spans of the step or subagent an event is about.
    fn scope(&mut self, step: &str, agent: Option<&str>) -> Option<&mut Scope> {
        self.scopes
            .get_mut(&(step.to_owned(), agent.unwrap_or_default().to_owned()))
    }

    /// The span new spans of that step or subagent go under, and its model.
    fn parent(&mut self, step: &str, agent: Option<&str>) -> Option<(SpanContext, String)> {
        self.scope(step, agent)
            .map(|s| (s.agent.span_context().clone(), s.model.clone()))
    }

    /// Every span still open ends now, said to have been cut short; then the run's span, and
    /// the batch is sent.
    fn finish(&mut self, at: SystemTime, record: &crate::record::RunRecord) {
        for (_, mut scope) in std::mem::take(&mut self.scopes) {
            scope.cut_short(at, "the run ended first");
            scope.agent.set_status(Status::error("the run ended first"));
            scope.agent.end_with_timestamp(at);
        }
        if let Some(mut span) = self.workflow.take() {
            span.set_attribute(KeyValue::new("runner.run.status", record.status.as_str()));
            span.set_attributes(usage_attributes(&record.usage_here()));
            if let Some(cost) = record.cost_usd {
                span.set_attribute(KeyValue::new("runner.cost_usd", cost));
            }
            if record.status != crate::record::RunStatus::Succeeded {
                span.set_attribute(KeyValue::new("error.type", record.status.as_str()));
                span.set_status(Status::error(format!("the run {}", record.status.as_str())));
            }
            span.end_with_timestamp(at);
        }
        let flushed = self.provider.force_flush().map_err(|err| err.to_string());
        let failure = self
            .failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(err) = failure.or(flushed.err()) {
            // The sinks' thread writes the progress lines too: this one goes with them.
            let _ = writeln!(
                crate::out::stderr(),
                "warning: traces were not all sent to {}: {err}",
                exporter::endpoint()
            );
        }
    }
}

impl Drop for OtelSink {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

/// A span from `at`, under `parent` (none for the run's).
fn start(
    tracer: &SdkTracer,
    name: &str,
    kind: SpanKind,
    at: SystemTime,
    parent: Option<SpanContext>,
    attributes: Vec<KeyValue>,
) -> Span {
    let parent = parent.map_or_else(Context::new, |p| Context::new().with_remote_span_context(p));
    tracer
        .span_builder(redact(name))
        .with_kind(kind)
        .with_start_time(at)
        .with_attributes(attributes)
        .start_with_context(tracer, &parent)
}

fn redact(text: &str) -> String {
    crate::secrets::redact_owned(text.to_owned())
}

fn time(at: &jiff::Timestamp) -> SystemTime {
    SystemTime::try_from(*at).unwrap_or_else(|_| SystemTime::now())
}

/// The provider in a `provider/model` label.
fn provider_of(model: &str) -> &str {
    model.split_once('/').map_or(model, |(p, _)| p)
}

fn model_of(model: &str) -> &str {
    model.split_once('/').map_or(model, |(_, m)| m)
}

/// `gen_ai.usage.*`: input tokens count every input token, cached or not, as the conventions
/// say; the cache's share is in its own two attributes.
fn usage_attributes(usage: &Usage) -> Vec<KeyValue> {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    vec![
        KeyValue::new("gen_ai.usage.input_tokens", int(usage.total_input())),
        KeyValue::new("gen_ai.usage.output_tokens", int(usage.output_tokens)),
        KeyValue::new(
            "gen_ai.usage.cache_read.input_tokens",
            int(usage.cache_read_input_tokens),
        ),
        KeyValue::new(
            "gen_ai.usage.cache_creation.input_tokens",
            int(usage.cache_creation_input_tokens),
        ),
    ]
}

/// How a step or subagent ended, on its span: its tokens and turns, and why when it failed.
/// The why is sent only with content capture: an error quotes what the model answered or a
/// command printed.
fn agent_end(span: &mut Span, status: StepStatus, error: Option<&str>, usage: &Usage, turns: u32) {
    span.set_attributes(usage_attributes(usage));
    span.set_attribute(KeyValue::new("runner.turns", i64::from(turns)));
    if matches!(status, StepStatus::Failed | StepStatus::Cancelled) {
        span.set_attribute(KeyValue::new("error.type", status.as_str()));
        span.set_status(Status::error(redact(error.unwrap_or(status.as_str()))));
    }
}

/// What a step's span says when it ends (`error` as [`agent_end`] takes it).
fn step_end(span: &mut Span, r: &StepRecord, error: Option<&str>) {
    agent_end(span, r.status, error, &r.usage(), r.turns);
    span.set_attribute(KeyValue::new("runner.step.status", r.status.as_str()));
    span.set_attribute(KeyValue::new("runner.tool_calls", i64::from(r.tool_calls)));
    if let Some(cost) = r.cost_usd {
        span.set_attribute(KeyValue::new("runner.cost_usd", cost));
    }
}

impl Sink for OtelSink {
    // Over 80 lines: one arm per event that opens or closes a span, each a few lines; split,
    // the arms would pass the sink's state around for nothing.
    fn handle(&mut self, event: &Event) -> Result<(), String> {
        let at = time(&event.at);
        let agent = event.agent.as_deref();
        match &event.kind {
            EventKind::RunStarted {
                run_id, workflow, ..
            } => {
                let span = start(
                    &self.tracer,
                    &format!("invoke_workflow {workflow}"),
                    SpanKind::Internal,
                    at,
                    None,
                    vec![
                        KeyValue::new("gen_ai.operation.name", "invoke_workflow"),
                        KeyValue::new("gen_ai.workflow.name", redact(workflow)),
                        KeyValue::new("runner.run.id", redact(run_id)),
                        KeyValue::new("runner.version", env!("CARGO_PKG_VERSION")),
                    ],
                );
                self.workflow = Some(span);
            }
            EventKind::StepStarted {
                step,
                agent: name,
                model,
            } => {
                // An instance's parent is its step's span, open while its instances run.
                let parent_step = crate::plan::verified::split_instance(step).map(|(p, _)| p);
                let parent = parent_step
                    .and_then(|p| self.scopes.get(&(p.to_owned(), String::new())))
                    .map(|s| &s.agent)
                    .or(self.workflow.as_ref())
                    .map(|s| s.span_context().clone());
                let mut attributes = vec![KeyValue::new("runner.step.id", redact(step))];
                let name = if name == "command" {
                    attributes.push(KeyValue::new("runner.step.kind", "command"));
                    format!("run {step}")
                } else {
                    attributes.extend([
                        KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                        KeyValue::new("gen_ai.agent.name", redact(name)),
                        KeyValue::new("gen_ai.agent.id", redact(step)),
                        KeyValue::new("gen_ai.provider.name", redact(provider_of(model))),
                        KeyValue::new("gen_ai.request.model", redact(model_of(model))),
                    ]);
                    format!("invoke_agent {name}")
                };
                let span = start(
                    &self.tracer,
                    &name,
                    SpanKind::Internal,
                    at,
                    parent,
                    attributes,
                );
                self.scopes
                    .insert((step.clone(), String::new()), Scope::new(span, model));
            }
            EventKind::SubagentStarted {
                step,
                id,
                agent: name,
                model,
                description,
                background,
            } => {
                let Some((parent, _)) = self.parent(step, agent) else {
                    return Ok(());
                };
                let mut attributes = vec![
                    KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                    KeyValue::new("gen_ai.agent.name", redact(name)),
                    KeyValue::new("gen_ai.agent.id", redact(&format!("{step}/{id}"))),
                    KeyValue::new("gen_ai.provider.name", redact(provider_of(model))),
                    KeyValue::new("gen_ai.request.model", redact(model_of(model))),
                    KeyValue::new("runner.step.id", redact(step)),
                    KeyValue::new("runner.subagent.background", *background),
                ];
                if self.content {
                    attributes.push(KeyValue::new(
                        "gen_ai.agent.description",
                        redact(description),
                    ));
                }
                let span = start(
                    &self.tracer,
                    &format!("invoke_agent {name}"),
                    SpanKind::Internal,
                    at,
                    Some(parent),
                    attributes,
                );
                self.scopes
                    .insert((step.clone(), id.clone()), Scope::new(span, model));
            }
            EventKind::SubagentFinished { step, record } => {
                if let Some(mut scope) = self.scopes.remove(&(step.clone(), record.id.clone())) {
                    scope.cut_short(at, "the subagent ended first");
                    let status = record.status;
                    let error = record.error.as_deref().filter(|_| self.content);
                    let usage = record.usage();
                    agent_end(&mut scope.agent, status, error, &usage, record.turns);
                    scope.agent.end_with_timestamp(at);
                }
            }
            EventKind::TurnStarted {
                step,
                turn,
                messages,
                ..
            } => {
                let Some((parent, model)) = self.parent(step, agent) else {
                    return Ok(());
                };
                let mut attributes = vec![
                    KeyValue::new("gen_ai.operation.name", "chat"),
                    KeyValue::new("gen_ai.provider.name", redact(provider_of(&model))),
                    KeyValue::new("gen_ai.request.model", redact(model_of(&model))),
                    KeyValue::new("runner.turn", i64::from(*turn)),
                ];
                if self.content {
                    let text = serde_json::to_string(messages).unwrap_or_default();
                    attributes.push(KeyValue::new("gen_ai.input.messages", redact(&text)));
                }
                let span = start(
                    &self.tracer,
                    &format!("chat {}", model_of(&model)),
                    SpanKind::Client,
                    at,
                    Some(parent),
                    attributes,
                );
                if let Some(scope) = self.scope(step, agent)
                    && let Some(mut earlier) = scope.chat.replace(span)
                {
                    earlier.set_status(Status::error("no reply"));
                    earlier.end_with_timestamp(at);
                }
            }
            EventKind::TurnFinished {
                step,
                usage,
                cost_usd,
                body,
                ..
            } => {
                let content = self.content;
                if let Some(mut span) = self.scope(step, agent).and_then(|s| s.chat.take()) {
                    span.set_attributes(usage_attributes(usage));
                    if let Some(cost) = cost_usd {
                        span.set_attribute(KeyValue::new("runner.cost_usd", *cost));
                    }
                    if content {
                        let text = serde_json::to_string(body).unwrap_or_default();
                        span.set_attribute(KeyValue::new("gen_ai.output.messages", redact(&text)));
                    }
                    span.end_with_timestamp(at);
                }
            }
            EventKind::SessionStarted { step, tools, .. } => {
                if let Some(scope) = self.scope(step, agent) {
                    scope.offered = tools.iter().map(|t| t.name.clone()).collect();
                }
            }
            EventKind::ToolStarted {
                step,
                id,
                name,
                input,
                ..
            } => {
                let Some((parent, _)) = self.parent(step, agent) else {
                    return Ok(());
                };
                // The name is the model's text: only a tool the step was offered is named.
                let offered = self
                    .scope(step, agent)
                    .is_some_and(|scope| scope.offered.contains(name));
                let name = if offered { name.as_str() } else { UNKNOWN_TOOL };
                let mut attributes = vec![
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", redact(name)),
                    KeyValue::new("gen_ai.tool.type", "function"),
                ];
                if self.content {
                    // The call's id is the model's or the server's choice, like its arguments.
                    attributes.push(KeyValue::new("gen_ai.tool.call.id", redact(id)));
                    attributes.push(KeyValue::new(
                        "gen_ai.tool.call.arguments",
                        redact(&input.to_string()),
                    ));
                }
                let span = start(
                    &self.tracer,
                    &format!("execute_tool {name}"),
                    SpanKind::Internal,
                    at,
                    Some(parent),
                    attributes,
                );
                if let Some(scope) = self.scope(step, agent) {
                    scope.tools.insert(id.clone(), span);
                }
            }
            EventKind::ToolFinished {
                step,
                id,
                is_error,
                output,
                ..
            } => {
                let content = self.content;
                if let Some(mut span) = self.scope(step, agent).and_then(|s| s.tools.remove(id)) {
                    if content {
                        span.set_attribute(KeyValue::new(
                            "gen_ai.tool.call.result",
                            redact(output),
                        ));
                    }
                    if *is_error {
                        span.set_attribute(KeyValue::new("error.type", "tool_error"));
                        span.set_status(Status::error("the tool reported an error"));
                    }
                    span.end_with_timestamp(at);
                }
            }
            EventKind::CheckStarted {
                step,
                round,
                command,
            } => {
                let Some((parent, _)) = self.parent(step, None) else {
                    return Ok(());
                };
                let span = start(
                    &self.tracer,
                    "check",
                    SpanKind::Internal,
                    at,
                    Some(parent),
                    vec![
                        KeyValue::new("runner.check.command", redact(command)),
                        KeyValue::new("runner.check.round", i64::from(*round)),
                    ],
                );
                if let Some(scope) = self.scope(step, None) {
                    scope.checks.push(span);
                }
            }
            EventKind::CheckFinished { step, record, .. } => {
                if let Some(mut span) = self.scope(step, None).and_then(|s| s.checks.pop()) {
                    if let Some(code) = record.exit_code {
                        span.set_attribute(KeyValue::new("process.exit.code", i64::from(code)));
                    }
                    span.set_attribute(KeyValue::new("runner.check.passed", record.passed));
                    if !record.passed {
                        span.set_attribute(KeyValue::new(
                            "error.type",
                            if record.timed_out {
                                "timeout"
                            } else {
                                "check_failed"
                            },
                        ));
                        span.set_status(Status::error("the check failed"));
                    }
                    span.end_with_timestamp(at);
                }
            }
            EventKind::CommandFinished {
                step, exit_code, ..
            } => {
                if let (Some(scope), Some(code)) = (self.scope(step, None), exit_code) {
                    scope
                        .agent
                        .set_attribute(KeyValue::new("process.exit.code", i64::from(*code)));
                }
            }
            EventKind::ContextCompacted { step, .. } => {
                if let Some(scope) = self.scope(step, agent) {
                    scope
                        .agent
                        .add_event_with_timestamp("context_compacted", at, Vec::new());
                }
            }
            EventKind::StepFinished { step, record, .. } => {
                if let Some(mut scope) = self.scopes.remove(&(step.clone(), String::new())) {
                    scope.cut_short(at, "the step ended first");
                    let error = record.error.as_deref().filter(|_| self.content);
                    step_end(&mut scope.agent, record, error);
                    scope.agent.end_with_timestamp(at);
                }
            }
            EventKind::RunFinished { record, .. } => self.finish(at, record),
            _ => {}
        }
        Ok(())
    }
}
