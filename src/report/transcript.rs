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
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};

use camino::{Utf8Path, Utf8PathBuf};

use crate::event::{Event, EventKind, Sink};

pub struct TranscriptSink {
    run_dir: Utf8PathBuf,
    /// Open files by step and subagent, with their paths.
    files: BTreeMap<(String, Option<String>), (BufWriter<File>, Utf8PathBuf)>,
    /// The outputs already written in `tool_finished` events, by step and subagent, then call
    /// id: a digest of each text.
    outputs: BTreeMap<(String, Option<String>), BTreeMap<String, [u8; 32]>>,
    /// The shared session files written so far, by name.
    sessions: std::collections::BTreeSet<String>,
}

fn text_digest(text: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes()).into()
}

impl TranscriptSink {
    pub fn new(run_dir: &Utf8Path) -> Self {
        Self {
            run_dir: run_dir.to_owned(),
            files: BTreeMap::new(),
            outputs: BTreeMap::new(),
            sessions: std::collections::BTreeSet::new(),
        }
    }

    /// Where a step's transcript is.
    pub fn path(run_dir: &Utf8Path, step: &str) -> Utf8PathBuf {
        run_dir.join("steps").join(step).join("transcript.jsonl")
    }

    /// Where a subagent's transcript is. Agent names come from files the user may not trust, so
    /// anything but a plain name character becomes `_`.
    pub fn subagent_path(run_dir: &Utf8Path, step: &str, agent: &str) -> Utf8PathBuf {
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
        run_dir
            .join("steps")
            .join(step)
            .join("subagents")
            .join(safe)
            .join("transcript.jsonl")
    }
}

impl Sink for TranscriptSink {
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
        let path = match &event.agent {
            Some(agent) => Self::subagent_path(&self.run_dir, step, agent),
            None => Self::path(&self.run_dir, step),
        };
        if !self.files.contains_key(&key) {
            let file = path
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| OpenOptions::new().create(true).append(true).open(&path))
                .map_err(|err| format!("cannot write `{path}`: {err}"))?;
            self.files.insert(
                key.clone(),
                (BufWriter::with_capacity(64 << 10, file), path),
            );
        }
        let text = match &event.kind {
            EventKind::ToolFinished { id, output, .. } => {
                self.outputs
                    .entry(key.clone())
                    .or_default()
                    .insert(id.clone(), text_digest(output));
                serde_json::to_string(event).unwrap_or_default()
            }
            EventKind::TurnStarted { .. } => self.turn_line(&key, event),
            EventKind::SessionStarted { system, tools, .. } => {
                let shared = serde_json::json!({"system": system, "tools": tools});
                let text = serde_json::to_string_pretty(&shared).unwrap_or_default();
                let digest: String = text_digest(&text)[..8]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                let name = format!("sessions/{digest}.json");
                if !self.sessions.contains(&name) {
                    let file = self.run_dir.join(&name);
                    let tmp = self.run_dir.join(format!("{name}.tmp"));
                    file.parent()
                        .map_or(Ok(()), std::fs::create_dir_all)
                        .and_then(|()| std::fs::write(&tmp, crate::secrets::redact_owned(text)))
                        .and_then(|()| std::fs::rename(&tmp, &file))
                        .map_err(|err| format!("cannot write `{file}`: {err}"))?;
                    self.sessions.insert(name.clone());
                }
                let mut value = serde_json::to_value(event).unwrap_or_default();
                if let Some(map) = value.as_object_mut() {
                    map.remove("system");
                    map.remove("tools");
                    map.insert("session_in".into(), name.into());
                }
                serde_json::to_string(&value).unwrap_or_default()
            }
            _ => serde_json::to_string(event).unwrap_or_default(),
        };
        let mut line = crate::secrets::redact_owned(text);
        line.push('\n');
        let (file, path) = self.files.get_mut(&key).ok_or("transcript file missing")?;
        file.write_all(line.as_bytes())
            .map_err(|err| format!("cannot write `{path}`: {err}"))?;
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
            file.flush()
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
                .flush()
                .map_err(|err| format!("cannot write `{path}`: {err}")),
            None => Ok(()),
        }
    }

    /// A request's line, each tool result already written in its `tool_finished` event left
    /// out and pointed at instead.
    fn turn_line(&self, key: &(String, Option<String>), event: &Event) -> String {
        let EventKind::TurnStarted { messages, .. } = &event.kind else {
            return serde_json::to_string(event).unwrap_or_default();
        };
        let written = self.outputs.get(key);
        // Each result is hashed once; the flags follow the blocks in order, as the tree made
        // of the event below holds them (ids alone could repeat: they are the model's).
        let known: Vec<bool> = messages
            .iter()
            .flat_map(|m| &m.content)
            .map(|b| match b {
                crate::provider::message::Block::ToolResult {
                    tool_use_id,
                    content,
                    ..
                } => written
                    .and_then(|w| w.get(tool_use_id))
                    .is_some_and(|d| *d == text_digest(content)),
                _ => false,
            })
            .collect();
        if !known.contains(&true) {
            return serde_json::to_string(event).unwrap_or_default();
        }
        let mut value = serde_json::to_value(event).unwrap_or_default();
        let mut flags = known.into_iter();
        for message in value["messages"].as_array_mut().into_iter().flatten() {
            for block in message["content"].as_array_mut().into_iter().flatten() {
                let is_known = flags.next().unwrap_or(false) && block["type"] == "tool_result";
                if is_known && let Some(map) = block.as_object_mut() {
                    map.remove("content");
                    map.insert("content_in".into(), "tool_finished".into());
                }
            }
        }
        serde_json::to_string(&value).unwrap_or_default()
    }
}
