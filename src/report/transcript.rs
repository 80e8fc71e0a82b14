//! `steps/<id>/transcript.jsonl` as a sink: every event of a step, one JSON object a line,
//! appended as it happens and written out after each batch of events (every few milliseconds,
//! see [`crate::event::pump`]), so a crash or an interrupt keeps everything up to about that
//! moment. Requests are logged by what they add (see [`EventKind::TurnStarted`]), so a
//! transcript grows with the conversation, not with its square. A subagent's events go to
//! `steps/<id>/subagents/<agent_id>/transcript.jsonl`; its start and end are in the step's.
//!
//! A tool's output is written once, in its `tool_finished` event: the request after it carries
//! the same text as a `tool_result`, which the transcript writes as `"content_in":
//! "tool_finished"` instead of the text (the result of the call with that `tool_use_id`). Put
//! back, the events rebuild each request whole; its `digest` says so.
//!
//! What every request of a session shares, its system prompt and tool schemas, is written once
//! per run for all the sessions that share it, as `sessions/<digest>.json` beside `run.json`;
//! a `session_started` event names it in `"session_in"`. A thousand steps of one agent write it
//! once, not a thousand times.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;

use camino::{Utf8Path, Utf8PathBuf};

use crate::event::{Event, EventKind, Sink};
use crate::out::{OutDir, Redacting};

/// A transcript's file name.
const FILE: &str = "transcript.jsonl";

pub struct TranscriptSink {
    /// The run's folder, where every transcript is written (through no link).
    run_dir: OutDir,
    /// Open files by step and subagent, with their paths.
    files: BTreeMap<(String, Option<String>), (Redacting<File>, Utf8PathBuf)>,
    /// The outputs written in `tool_finished` events since the last request, by step and
    /// subagent, then call id: the next request carries them as its tool results, which are
    /// then pointed at instead of written again (a result is matched by its id and its text).
    outputs: BTreeMap<(String, Option<String>), BTreeMap<String, String>>,
    /// The line being written (kept, so its capacity is reused).
    line: Vec<u8>,
    /// The shared session files written so far, by name.
    sessions: std::collections::BTreeSet<String>,
}

fn text_digest(text: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes()).into()
}

impl TranscriptSink {
    pub fn new(run_dir: OutDir) -> Self {
        Self {
            run_dir,
            files: BTreeMap::new(),
            outputs: BTreeMap::new(),
            line: Vec::new(),
            sessions: std::collections::BTreeSet::new(),
        }
    }

    /// Where a step's transcript is.
    pub fn path(run_dir: &Utf8Path, step: &str) -> Utf8PathBuf {
        run_dir.join(Self::folder(step, None)).join(FILE)
    }

    /// Where a subagent's transcript is. Agent names come from files the user may not trust, so
    /// anything but a plain name character becomes `_`.
    pub fn subagent_path(run_dir: &Utf8Path, step: &str, agent: &str) -> Utf8PathBuf {
        run_dir.join(Self::folder(step, Some(agent))).join(FILE)
    }

    /// The folder of a step's or a subagent's transcript, inside the run's.
    fn folder(step: &str, agent: Option<&str>) -> String {
        match agent {
            None => format!("steps/{step}"),
            Some(agent) => {
                let safe: String = agent
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '#') {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                format!("steps/{step}/subagents/{safe}")
            }
        }
    }
}

impl Sink for TranscriptSink {
    // Over 80 lines: a transcript file's life (opened on its first event, closed when its
    // subagent ends) and the line each event writes, which share the open files.
    fn handle(&mut self, event: &Event) -> Result<(), String> {
        let Some(step) = event.kind.step() else {
            return Ok(());
        };
        // Live-only: the reply itself is recorded when it has arrived.
        if matches!(event.kind, EventKind::TokensArriving { .. }) {
            return Ok(());
        }
        // Steps that never ran (skipped, reused) have no transcript.
        let key = (step.to_owned(), event.agent.clone());
        // A finished subagent writes no more (until resumed): do not keep its file open.
        if let EventKind::SubagentFinished { record, .. } = &event.kind {
            self.close(&(step.to_owned(), Some(record.id.clone())))?;
        }
        if matches!(event.kind, EventKind::StepFinished { .. }) && !self.files.contains_key(&key) {
            return Ok(());
        }
        if !self.files.contains_key(&key) {
            let folder = Self::folder(step, event.agent.as_deref());
            let path = self.run_dir.path().join(&folder).join(FILE);
            let file = self
                .run_dir
                .sub(&folder)
                .and_then(|dir| dir.append(FILE))
                .map_err(|err| err.to_string())?;
            self.files.insert(key.clone(), (file, path));
        }
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        match &event.kind {
            EventKind::ToolFinished { id, output, .. } => {
                self.outputs
                    .entry(key.clone())
                    .or_default()
                    .insert(id.clone(), output.clone());
                crate::event::line::write(&mut line, event, &|_, _| false);
            }
            EventKind::TurnStarted { .. } => {
                // The results of the calls since the last request are in this one, if anywhere.
                let written = self.outputs.remove(&key).unwrap_or_default();
                crate::event::line::write(&mut line, event, &|id, text| {
                    written.get(id).is_some_and(|output| output == text)
                });
            }
            EventKind::SessionStarted { system, tools, .. } => {
                let shared = serde_json::json!({"system": system, "tools": tools});
                let text = serde_json::to_string_pretty(&shared).unwrap_or_default();
                let digest: String = text_digest(&text)[..8]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                let name = format!("sessions/{digest}.json");
                if !self.sessions.contains(&name) {
                    self.run_dir
                        .sub("sessions")
                        .and_then(|dir| dir.write(&format!("{digest}.json"), text.as_bytes()))
                        .map_err(|err| err.to_string())?;
                    self.sessions.insert(name.clone());
                }
                let mut value = serde_json::to_value(event).unwrap_or_default();
                if let Some(map) = value.as_object_mut() {
                    map.remove("system");
                    map.remove("tools");
                    map.insert("session_in".into(), name.into());
                }
                let _ = serde_json::to_writer(&mut line, &value);
            }
            _ => crate::event::line::write(&mut line, event, &|_, _| false),
        }
        // The file is a redacting writer: a secret in the line is hidden on its way.
        let (file, path) = self.files.get_mut(&key).ok_or("transcript file missing")?;
        let written = file
            .write_all(&line)
            .and_then(|()| file.write_all(b"\n"))
            .map_err(|err| format!("cannot write `{path}`: {err}"));
        self.line = line;
        written?;
        // A finished step writes no more: a run of a thousand fan-out instances must not hold a
        // thousand files open.
        if matches!(event.kind, EventKind::StepFinished { .. }) {
            self.close(&key)?;
            self.outputs.remove(&key);
        }
        if let EventKind::SubagentFinished { record, .. } = &event.kind {
            self.outputs
                .remove(&(step.to_owned(), Some(record.id.clone())));
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        for (file, path) in self.files.values_mut() {
            file.finish()
                .map_err(|err| format!("cannot write `{path}`: {err}"))?;
        }
        Ok(())
    }
}

impl TranscriptSink {
    /// Writes out and closes a transcript that will get no more lines.
    fn close(&mut self, key: &(String, Option<String>)) -> Result<(), String> {
        match self.files.remove(key) {
            Some((mut file, path)) => file
                .finish()
                .map_err(|err| format!("cannot write `{path}`: {err}")),
            None => Ok(()),
        }
    }
}

/// A step's conversation as its transcript recorded it, as of its last request (for
/// `--continue`): each `turn_started` adds the messages that request added, a tool result
/// written as `"content_in": "tool_finished"` is taken from its call's `tool_finished`, and a
/// request that carries the whole conversation again (after old results were cleared or the
/// conversation compacted) replaces what came before. Only `agent`'s lines count (`None`: the
/// step's own; a subagent's transcript is its own file); a subagent's ends with its final
/// answer, as a finished subagent's conversation does.
/// `text` is the transcript at `path` as `run::records::read_run_file` read it (bounded, no link
/// followed).
pub fn conversation(
    path: &Utf8Path,
    text: &str,
    agent: Option<&str>,
) -> Result<Vec<crate::provider::message::Message>, String> {
    use crate::provider::format::{anthropic, openai};
    use crate::provider::message::{Block, Message, Role};
    use serde_json::Value;
    let mut outputs: BTreeMap<String, String> = BTreeMap::new();
    let mut messages: Vec<Message> = Vec::new();
    // A subagent's final answer: the reply after its last request, when it made no call.
    let mut answer: Option<Message> = None;
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if event.get("agent").and_then(Value::as_str) != agent {
            continue;
        }
        match event["event"].as_str() {
            Some("tool_finished") => {
                if let (Some(id), Some(output)) = (event["id"].as_str(), event["output"].as_str()) {
                    outputs.insert(id.to_owned(), output.to_owned());
                }
            }
            Some("turn_finished") => {
                let body = &event["body"];
                answer = anthropic::parse_response(body)
                    .or_else(|_| openai::parse_response(body))
                    .ok()
                    .filter(|reply| reply.tool_uses().next().is_none())
                    .map(|reply| Message {
                        role: crate::provider::message::Role::Assistant,
                        content: reply.content,
                    });
            }
            Some("turn_started") => {
                answer = None;
                let mut added = Vec::new();
                for mut message in event["messages"].as_array().cloned().unwrap_or_default() {
                    for block in message["content"].as_array_mut().into_iter().flatten() {
                        if block.get("content_in").is_some() {
                            let id = block["tool_use_id"].as_str().unwrap_or_default();
                            let output = outputs.get(id).cloned().ok_or_else(|| {
                                format!(
                                    "`{path}`: the result of call `{id}` is not in the transcript"
                                )
                            })?;
                            block["content"] = Value::String(output);
                            if let Some(fields) = block.as_object_mut() {
                                fields.remove("content_in");
                            }
                        }
                    }
                    let message: Message = serde_json::from_value(message)
                        .map_err(|err| format!("`{path}`: a message cannot be read: {err}"))?;
                    added.push(message);
                }
                // The whole conversation again (after a clearing, a compaction, or a summary
                // request): a request that adds to the last one adds from its reply on, so it
                // starts with the assistant; a whole one starts with the task. Its first
                // message need not equal the first so far (compaction appends the summary to
                // it), but it begins with the same block.
                let task = |m: Option<&Message>| {
                    m.filter(|m| m.role == Role::User)
                        .and_then(|m| m.content.first())
                        .cloned()
                };
                if !messages.is_empty()
                    && task(added.first())
                        .is_some_and(|first| Some(first) == task(messages.first()))
                {
                    messages.clear();
                }
                messages.extend(added);
            }
            _ => {}
        }
    }
    if messages.is_empty() {
        return Err(format!("`{path}` holds no request to go on from"));
    }
    if agent.is_some()
        && let Some(answer) = answer
    {
        messages.push(answer);
    }
    // The step's own summary request (compaction) is no turn of its own to go on from.
    if let Some(last) = messages.last_mut()
        && matches!(last.content.last(), Some(Block::Text { text }) if text == crate::session::context::SUMMARY_REQUEST)
    {
        last.content.pop();
    }
    Ok(messages)
}
