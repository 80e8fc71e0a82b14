//! `--junit FILE` as a sink: one testcase per step, written with quick-junit when the run ends.
//! Failed steps carry a failure, skipped and cancelled ones are skipped.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use camino::Utf8Path;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use crate::event::{Event, EventKind, Sink};
use crate::plan::Plan;
use crate::record::{RunRecord, StepRecord, StepStatus};

/// `text` with every character XML 1.0 cannot hold (C0 controls but tab, newline and carriage
/// return; U+FFFE, U+FFFF) replaced by U+FFFD: a summary is the model's text, and one such
/// character would make the whole report unreadable to a CI server.
fn xml_text(text: &str) -> Cow<'_, str> {
    let invalid = |c: char| {
        (c < ' ' && !matches!(c, '\t' | '\n' | '\r')) || matches!(c, '\u{fffe}' | '\u{ffff}')
    };
    if text.chars().any(invalid) {
        Cow::Owned(
            text.chars()
                .map(|c| if invalid(c) { '\u{fffd}' } else { c })
                .collect(),
        )
    } else {
        Cow::Borrowed(text)
    }
}

pub struct JunitSink {
    /// The report's folder, found (and made) before the run, and its file name there.
    dir: crate::out::OutDir,
    file: String,
    name: String,
    /// Step ids and agents, in plan order.
    steps: Vec<(String, String)>,
    records: BTreeMap<String, StepRecord>,
}

impl JunitSink {
    /// The sink of `--junit path`; refused at once (before any step runs) when the path leads
    /// through a link (docs/src/ci.md, "Where runner writes").
    pub fn new(path: &Utf8Path, plan: &Plan) -> Result<Self, crate::out::OutError> {
        let (dir, file) = crate::out::file_place(path)?;
        Ok(Self {
            dir,
            file,
            name: plan.name.clone(),
            steps: plan
                .steps()
                .iter()
                .map(|s| (s.id.clone(), s.agent.clone()))
                .collect(),
            records: BTreeMap::new(),
        })
    }

    fn report(&self, run: &RunRecord) -> Result<String, String> {
        let name = xml_text(&self.name);
        let mut suite = TestSuite::new(name.as_ref());
        suite.set_time(Duration::from_millis(run.duration_ms));
        for (id, agent) in &self.steps {
            let Some(r) = self.records.get(id) else {
                continue;
            };
            // Another job of this run (`--only`) reports it: a CI system merging every job's
            // report would count it twice.
            if r.reused_from.as_deref() == Some(run.run_id.as_str()) {
                continue;
            }
            // A fan-out step is one case per instance: CI shows which item failed.
            if r.instances.is_empty() {
                suite.add_test_case(case(&name, id, agent, r));
            }
            for instance in &r.instances {
                let id = instance.instance.as_deref().unwrap_or(id);
                suite.add_test_case(case(&name, id, agent, instance));
            }
        }
        let mut report = Report::new(name.as_ref());
        report.add_test_suite(suite);
        report
            .to_string()
            .map_err(|err| format!("cannot build the JUnit report: {err}"))
    }
}

/// The test case of one step (or instance).
fn case(suite: &str, id: &str, agent: &str, r: &StepRecord) -> TestCase {
    let error = xml_text(r.error.as_deref().unwrap_or_default());
    let error = error.as_ref();
    let status = match r.status {
        StepStatus::Failed => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            status.set_message(error).set_description(error);
            status
        }
        StepStatus::Skipped | StepStatus::Cancelled => {
            let mut status = TestCaseStatus::skipped();
            status.set_message(format!("{}: {error}", r.status.as_str()));
            status
        }
        _ => TestCaseStatus::success(),
    };
    let mut case = TestCase::new(xml_text(id).as_ref(), status);
    case.set_classname(format!("{suite}.{}", xml_text(agent)))
        .set_time(Duration::from_millis(r.duration_ms));
    if r.status == StepStatus::Succeeded {
        case.set_system_out(xml_text(&r.summary).as_ref());
    }
    case
}

impl Sink for JunitSink {
    fn handle(&mut self, event: &Event) -> Result<(), String> {
        match &event.kind {
            // Instances arrive inside their step's record.
            EventKind::StepFinished { step, record, .. } if record.instance.is_none() => {
                self.records.insert(step.clone(), (**record).clone());
                Ok(())
            }
            EventKind::RunFinished { record, .. } => {
                let text = self.report(record)?;
                self.dir
                    .write(&self.file, text.as_bytes())
                    .map_err(|err| format!("the JUnit report: {err}"))
            }
            _ => Ok(()),
        }
    }
}
