//! `--format jsonl` (docs/src/ci.md "GitHub Actions and the event stream"): the run's events on stdout, one
//! JSON object a line, written and flushed as they happen. Each line has `event`, `at` and, where
//! it applies, `step` and `subagent` (the id of the subagent it comes from); what follows is the
//! event's own fields. Whole conversations and tool outputs stay in the transcripts: a line says
//! what happened, not everything that was said.

use std::io::Write;

use serde::Serialize;
use serde_json::{Value, json};

use crate::event::{Event, EventKind, Sink};
use crate::out::Redacting;

#[derive(Serialize)]
struct Line<'a> {
    event: &'static str,
    #[serde(serialize_with = "crate::event::rfc3339")]
    at: &'a jiff::Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    subagent: Option<&'a str>,
    #[serde(flatten)]
    fields: Value,
}

// Over 80 lines: one arm per event kind: the public JSONL shape of each, side by side.
/// The public name and fields of an event; `None` for the ones only transcripts keep.
fn public(kind: &EventKind) -> Option<(&'static str, Value)> {
    Some(match kind {
        EventKind::RunStarted {
            run_id,
            workflow,
            steps,
        } => (
            "run_started",
            json!({
                "run_id": run_id,
                "workflow": workflow,
                "steps": steps.iter().map(|(id, model)| json!({"id": id, "model": model})).collect::<Vec<_>>(),
            }),
        ),
        EventKind::StepStarted { agent, model, .. } => {
            ("step_started", json!({"agent": agent, "model": model}))
        }
        EventKind::TurnFinished {
            turn,
            duration_ms,
            usage,
            cost_usd,
            ..
        } => (
            "turn_finished",
            json!({
                "turn": turn,
                "duration_ms": duration_ms,
                "input_tokens": usage.total_input(),
                "output_tokens": usage.output_tokens,
                "cost_usd": cost_usd,
            }),
        ),
        EventKind::Retrying {
            turn,
            attempt,
            delay_ms,
            error,
            ..
        } => (
            "retrying",
            json!({"turn": turn, "attempt": attempt, "delay_ms": delay_ms, "error": error}),
        ),
        EventKind::OutOfTurns { turn, .. } => ("out_of_turns", json!({"turn": turn})),
        EventKind::RepeatsRefused {
            turn,
            name,
            refusals,
            ..
        } => (
            "repeats_refused",
            json!({"turn": turn, "name": name, "refusals": refusals}),
        ),
        EventKind::ContextCleared {
            turn,
            cleared,
            tokens_before,
            tokens_after,
            ..
        } => (
            "context_cleared",
            json!({"turn": turn, "cleared": cleared, "tokens_before": tokens_before, "tokens_after": tokens_after}),
        ),
        EventKind::ContextCompacted {
            turn,
            tokens_before,
            tokens_after,
            ..
        } => (
            "context_compacted",
            json!({"turn": turn, "tokens_before": tokens_before, "tokens_after": tokens_after}),
        ),
        EventKind::ToolCallInText { turn, name, .. } => {
            ("tool_call_in_text", json!({"turn": turn, "name": name}))
        }
        EventKind::ReplayDrift {
            request,
            difference,
            ..
        } => (
            "replay_drift",
            json!({"request": request, "difference": difference}),
        ),
        EventKind::ToolStarted {
            turn,
            id,
            name,
            input,
            ..
        } => (
            "tool_called",
            json!({"turn": turn, "id": id, "name": name, "input": input}),
        ),
        EventKind::ToolFinished {
            turn,
            id,
            name,
            is_error,
            duration_ms,
            ..
        } => (
            "tool_finished",
            json!({"turn": turn, "id": id, "name": name, "is_error": is_error, "duration_ms": duration_ms}),
        ),
        EventKind::OutputInvalid { turn, error, .. } => {
            ("output_invalid", json!({"turn": turn, "error": error}))
        }
        EventKind::SubagentStarted {
            id,
            agent,
            model,
            description,
            background,
            ..
        } => (
            "subagent_started",
            json!({"id": id, "agent": agent, "model": model, "description": description, "background": background}),
        ),
        EventKind::SubagentFinished { record, .. } => (
            "subagent_finished",
            json!({
                "id": record.id,
                "agent": record.agent,
                "status": record.status,
                "turns": record.turns,
                "tool_calls": record.tool_calls,
                "input_tokens": record.input_tokens,
                "output_tokens": record.output_tokens,
                "duration_ms": record.duration_ms,
                "error": record.error,
            }),
        ),
        EventKind::StepFinished { record, .. } => (
            "step_finished",
            json!({
                "status": record.status,
                "error": record.error,
                "summary": record.summary,
                "turns": record.turns,
                "tool_calls": record.tool_calls,
                "input_tokens": super::total_tokens(record) - record.output_tokens,
                "output_tokens": record.output_tokens,
                "cost_usd": record.cost_usd,
                "duration_ms": record.duration_ms,
                "reused_from": record.reused_from,
            }),
        ),
        EventKind::RunFinished { record, run_dir } => (
            "run_finished",
            json!({
                "run_id": record.run_id,
                "status": record.status,
                "duration_ms": record.duration_ms,
                "cost_usd": record.cost_usd,
                "input_tokens": record.usage_here().total_input(),
                "output_tokens": record.usage_here().output_tokens,
                "run_dir": run_dir,
                "branches": record
                    .steps
                    .iter()
                    .flat_map(|(id, s)| {
                        std::iter::once((id.clone(), s)).chain(
                            s.instances
                                .iter()
                                .map(|i| (i.instance.clone().unwrap_or_default(), i)),
                        )
                    })
                    .filter_map(|(id, s)| s.branch.as_ref().map(|b| (id, b.clone())))
                    .collect::<std::collections::BTreeMap<_, _>>(),
            }),
        ),
        EventKind::CheckStarted { round, command, .. } => {
            ("check_started", json!({"round": round, "command": command}))
        }
        EventKind::CheckFinished { record, .. } => (
            "check_finished",
            json!({
                "round": record.round,
                "command": record.command,
                "exit_code": record.exit_code,
                "passed": record.passed,
                "timed_out": record.timed_out,
                "duration_ms": record.duration_ms,
            }),
        ),
        EventKind::CommandFinished {
            command,
            exit_code,
            duration_ms,
            ..
        } => (
            "command_finished",
            json!({"command": command, "exit_code": exit_code, "duration_ms": duration_ms}),
        ),
        EventKind::SessionStarted { .. }
        | EventKind::TokensArriving { .. }
        | EventKind::TurnStarted { .. }
        | EventKind::StepError { .. } => return None,
    })
}

/// Writes events to stdout (or any writer, for tests), a batch at a time, through the redactor.
pub struct JsonlSink<W: Write + Send> {
    out: Redacting<W>,
    /// Lines not written yet.
    buffer: String,
}

impl JsonlSink<crate::terminal::Escaping<std::io::Stdout>> {
    pub fn stdout() -> Self {
        Self::new(crate::out::stdout())
    }
}

impl<W: Write + Send> JsonlSink<W> {
    pub fn new(out: Redacting<W>) -> Self {
        Self {
            out,
            buffer: String::new(),
        }
    }
}

impl<W: Write + Send> Sink for JsonlSink<W> {
    fn handle(&mut self, event: &Event) -> Result<(), String> {
        let Some((name, fields)) = public(&event.kind) else {
            return Ok(());
        };
        let line = Line {
            event: name,
            at: &event.at,
            step: event.kind.step(),
            subagent: event.agent.as_deref(),
            fields,
        };
        let text = crate::terminal::to_json_line(&line).unwrap_or_default();
        self.buffer.push_str(&text);
        self.buffer.push('\n');
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        // A consumer that went away is a failure to record: the run stops and says so.
        let written = self
            .out
            .write_all(self.buffer.as_bytes())
            .and_then(|()| self.out.flush())
            .map_err(|err| format!("cannot write events to stdout: {err}"));
        self.buffer.clear();
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_start_with_event_at_and_step_and_skip_transcript_only_events() {
        let mut out = Vec::new();
        {
            let mut sink = JsonlSink::new(Redacting::new(&mut out));
            let started: Event = EventKind::StepStarted {
                step: "a".into(),
                agent: "explore".into(),
                model: "anthropic/m".into(),
            }
            .into();
            sink.handle(&started).unwrap();
            let mut tool: Event = EventKind::ToolStarted {
                step: "a".into(),
                turn: 1,
                id: "t1".into(),
                name: "grep".into(),
                input: json!({"pattern": "x"}),
            }
            .into();
            tool.agent = Some("explore#1".into());
            sink.handle(&tool).unwrap();
            let hidden: Event = EventKind::StepError {
                step: "a".into(),
                error: "e".into(),
            }
            .into();
            sink.handle(&hidden).unwrap();
            sink.flush().unwrap();
        }
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("{\"event\":\"step_started\",\"at\":\""));
        assert!(lines[0].contains("\"step\":\"a\",\"agent\":\"explore\""));
        let tool: Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(tool["event"], "tool_called");
        assert_eq!(tool["subagent"], "explore#1");
        assert_eq!(tool["input"]["pattern"], "x");
    }
}
