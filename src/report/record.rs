//! `run.json` as a sink: the record of the run, kept from the events and written as it changes,
//! so an interrupted run keeps what finished. Each step this run decided is also written alone,
//! `steps/<id>/record.json`: jobs on several machines that share a `--run-id` write different
//! files, so their state directories copied into one merge (see `run::load_merged`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::event::{Event, EventKind, Sink};
use crate::out::OutDir;
use crate::record::{RunRecord, StepRecord, StepStatus};

/// How often `run.json` is rewritten at most while steps finish in quick succession.
pub const SAVE_INTERVAL: Duration = Duration::from_millis(100);

/// Writes `run.json` after changes, at most every [`SAVE_INTERVAL`]: a change inside the interval
/// is written when it ends (the scheduler waits on [`Sink::deadline`]), so the file is never more
/// than that behind, and a thousand quick steps do not cost a thousand rewrites. The end of the
/// run is always written at once.
pub struct RecordSink {
    /// The run's folder (written through no link).
    dir: OutDir,
    record: RunRecord,
    last: Option<Instant>,
    dirty: bool,
    saved: LastSaved,
}

/// The newest `run.json` written and its folder, shared with the signal handler: a run that
/// ends at once (a second Ctrl-C) does not wait for the sinks, and writes this one as
/// interrupted instead (docs/src/runs.md "Scheduling and failures").
#[derive(Clone, Default)]
pub struct LastSaved(Arc<Mutex<Saved>>);

#[derive(Default)]
struct Saved {
    newest: Option<(OutDir, RunRecord)>,
    /// Set once the run ended at once: nothing is written after its last word.
    abandoned: bool,
}

impl LastSaved {
    /// Writes the newest record as interrupted (its running steps cancelled), and nothing after
    /// it. Returns the record's folder, when there was a record.
    pub fn abandon(&self) -> Result<Option<camino::Utf8PathBuf>, String> {
        let mut saved = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        saved.abandoned = true;
        let Some((dir, record)) = saved.newest.as_mut() else {
            return Ok(None);
        };
        record.abandon();
        record.save(dir)?;
        Ok(Some(dir.path().to_owned()))
    }

    /// Saves `record` unless the run has ended at once; the lock keeps an abandoning write from
    /// being overtaken by this one.
    fn save(&self, dir: &OutDir, record: &RunRecord) -> Result<(), String> {
        let mut saved = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if saved.abandoned {
            return Ok(());
        }
        record.save(dir)?;
        match &mut saved.newest {
            Some((_, newest)) => newest.clone_from(record),
            None => saved.newest = dir.try_clone().ok().map(|dir| (dir, record.clone())),
        }
        Ok(())
    }
}

impl RecordSink {
    pub fn new(dir: OutDir, record: RunRecord, saved: LastSaved) -> Self {
        Self {
            dir,
            record,
            last: None,
            dirty: true,
            saved,
        }
    }

    fn flush(&mut self) -> Result<(), String> {
        self.last = Some(Instant::now());
        self.dirty = false;
        self.saved.save(&self.dir, &self.record)
    }
}

impl Sink for RecordSink {
    fn handle(&mut self, event: &Event) -> Result<(), String> {
        match &event.kind {
            EventKind::RunStarted { .. } => return self.flush(),
            EventKind::StepStarted { step, .. } => {
                if let Some(entry) = self.record.steps.get_mut(step) {
                    entry.status = StepStatus::Running;
                }
            }
            EventKind::StepFinished {
                step,
                record,
                decided,
            } => {
                match record
                    .instance
                    .as_ref()
                    .map(|_| crate::plan::verified::step_of(step))
                {
                    // An instance shows in its step's list as soon as it ends.
                    Some(parent) => {
                        if let Some(entry) = self.record.steps.get_mut(parent) {
                            match entry
                                .instances
                                .iter_mut()
                                .find(|i| i.instance.as_deref() == Some(step.as_str()))
                            {
                                Some(slot) => *slot = (**record).clone(),
                                None => entry.instances.push((**record).clone()),
                            }
                        }
                    }
                    None => {
                        self.record.steps.insert(step.clone(), (**record).clone());
                    }
                }
                if *decided {
                    save_step(&self.dir, step, record)?;
                }
            }
            EventKind::RunFinished { record, .. } => {
                self.record = (**record).clone();
                return self.flush();
            }
            _ => return Ok(()),
        }
        self.dirty = true;
        if self.last.is_none_or(|t| t.elapsed() >= SAVE_INTERVAL) {
            return self.flush();
        }
        Ok(())
    }

    fn deadline(&self) -> Option<Instant> {
        match (self.dirty, self.last) {
            (true, Some(last)) => Some(last + SAVE_INTERVAL),
            (true, None) => Some(Instant::now()),
            _ => None,
        }
    }

    fn tick(&mut self) -> Result<(), String> {
        if self.dirty { self.flush() } else { Ok(()) }
    }
}

/// `steps/<id>/record.json`, written whole and renamed into place.
fn save_step(dir: &OutDir, step: &str, record: &StepRecord) -> Result<(), String> {
    let text = serde_json::to_string_pretty(record).unwrap_or_default();
    dir.sub(&format!("steps/{step}"))
        .and_then(|dir| dir.write("record.json", text.as_bytes()))
        .map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A second Ctrl-C ends the run without the sinks: the newest record is written as
    /// interrupted, its running step cancelled, and no later save overtakes it.
    #[test]
    fn an_abandoned_run_leaves_a_final_status_and_nothing_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = camino::Utf8Path::from_path(dir.path()).unwrap();
        let out = OutDir::open(path).unwrap();
        let mut step = serde_json::to_value(StepRecord::pending("m")).unwrap();
        step["status"] = json!("running");
        let mut record: RunRecord = serde_json::from_value(json!({
            "run_id": "r", "workflow": "w", "status": "running", "started_at": "now",
            "duration_ms": 0, "steps": {"s": step}, "needs": {},
        }))
        .unwrap();
        let saved = LastSaved::default();
        saved.save(&out, &record).unwrap();
        assert_eq!(saved.abandon().unwrap().as_deref(), Some(path));
        let read = |p: &camino::Utf8Path| -> serde_json::Value {
            let text = std::fs::read_to_string(p.join("run.json")).unwrap();
            serde_json::from_str(&text).unwrap()
        };
        let written = read(path);
        assert_eq!(written["status"], "interrupted");
        assert_eq!(written["steps"]["s"]["status"], "cancelled");
        // The sinks, still going on their thread, write no more.
        record.duration_ms = 99;
        saved.save(&out, &record).unwrap();
        assert_eq!(read(path)["status"], "interrupted");
    }
}
