//! `run.json` as a sink: the record of the run, kept from the events and written as it changes,
//! so an interrupted run keeps what finished. Each step this run decided is also written alone,
//! `steps/<id>/record.json`: jobs on several machines that share a `--run-id` write different
//! files, so their state directories copied into one merge (see `run::load_merged`).

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
}

impl RecordSink {
    pub fn new(dir: OutDir, record: RunRecord) -> Self {
        Self {
            dir,
            record,
            last: None,
            dirty: true,
        }
    }

    fn flush(&mut self) -> Result<(), String> {
        self.last = Some(Instant::now());
        self.dirty = false;
        self.record.save(&self.dir)
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
