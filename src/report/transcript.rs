//! `steps/<id>/transcript.jsonl` as a sink: every event of a step, one JSON object a line,
//! appended and flushed as it happens, so a crash or an interrupt keeps everything up to that
//! moment. Requests are logged by what they add (see [`EventKind::TurnStarted`]), so a
//! transcript grows with the conversation, not with its square. A subagent's events go to
//! `steps/<id>/subagents/<agent_id>/transcript.jsonl`; its start and end are in the step's.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;

use camino::{Utf8Path, Utf8PathBuf};

use crate::event::{Event, EventKind, Sink};

pub struct TranscriptSink {
    run_dir: Utf8PathBuf,
    /// Open files by step and subagent.
    files: BTreeMap<(String, Option<String>), File>,
}

impl TranscriptSink {
    pub fn new(run_dir: &Utf8Path) -> Self {
        Self {
            run_dir: run_dir.to_owned(),
            files: BTreeMap::new(),
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
            self.files
                .remove(&(step.to_owned(), Some(record.id.clone())));
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
            self.files.insert(key.clone(), file);
        }
        let mut line =
            crate::secrets::redact_owned(serde_json::to_string(event).unwrap_or_default());
        line.push('\n');
        let file = self.files.get_mut(&key).ok_or("transcript file missing")?;
        file.write_all(line.as_bytes())
            .and_then(|()| file.flush())
            .map_err(|err| format!("cannot write `{path}`: {err}"))?;
        // A finished step writes no more: a run of a thousand fan-out instances must not hold a
        // thousand files open.
        if matches!(event.kind, EventKind::StepFinished { .. }) {
            self.files.remove(&key);
        }
        Ok(())
    }
}
