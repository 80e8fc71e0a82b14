//! What the run found (docs/src/runs.md "The answer"): the answer of each step no other step
//! needs, printed by `runner run` after its table and by `runner show RUN`. An answer is printed
//! whole (it is what the user asked for); structured output as pretty JSON. With several such
//! steps, each is headed by its id. A leaf that did not succeed prints nothing here: its reason
//! is under the table already, once.

use std::fmt::Write as _;

use crate::record::{RunRecord, StepRecord, StepStatus};
use crate::terminal;

/// The answers of the run's leaf steps, as text for people; empty when no leaf succeeded.
pub fn answers(record: &RunRecord) -> String {
    let mut found: Vec<(String, &StepRecord)> = Vec::new();
    for (id, step) in record.leaves() {
        if step.instances.is_empty() {
            found.push((id.clone(), step));
        } else {
            // A fan-out's answer is each instance's.
            for instance in &step.instances {
                let iid = instance.instance.clone().unwrap_or_else(|| id.clone());
                found.push((iid, instance));
            }
        }
    }
    found.retain(|(_, step)| step.status == StepStatus::Succeeded && !answer(step).is_empty());
    let headed = found.len() > 1;
    let mut out = String::new();
    for (i, (id, step)) in found.iter().enumerate() {
        if headed {
            if i > 0 {
                out.push('\n');
            }
            let _ = writeln!(out, "── {} ──", terminal::clean(id));
        }
        let _ = writeln!(out, "{}", answer(step));
    }
    out
}

/// A step's answer: its structured output as pretty JSON, else its summary; cleaned of what a
/// terminal would take as commands.
fn answer(step: &StepRecord) -> String {
    let text = if step.output.is_null() {
        step.summary.trim_end().to_owned()
    } else {
        terminal::to_json_pretty(&step.output).unwrap_or_else(|_| step.summary.clone())
    };
    terminal::clean(&text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn step(status: StepStatus, summary: &str) -> StepRecord {
        StepRecord {
            status,
            summary: summary.to_owned(),
            ..StepRecord::pending("m")
        }
    }

    fn record(steps: Vec<(&str, StepRecord)>, needs: &[(&str, &[&str])]) -> RunRecord {
        let mut record: RunRecord = serde_json::from_value(json!({
            "run_id": "r", "workflow": "w", "status": "succeeded",
            "started_at": "2026-12-07T11:33:09Z", "duration_ms": 1, "steps": {},
        }))
        .unwrap();
        record.steps = steps.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        record.needs = needs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.iter().map(|n| (*n).to_owned()).collect()))
            .collect();
        record
    }

    /// One leaf: its answer alone; several: each under its id, in plan order; a failed leaf and
    /// a needed step print nothing; structured output is pretty JSON.
    #[test]
    fn the_leaves_answers_are_printed_in_plan_order() {
        let one = record(
            vec![
                ("a", step(StepStatus::Succeeded, "found files")),
                (
                    "b",
                    step(StepStatus::Succeeded, "the answer\nin two lines\n"),
                ),
            ],
            &[("b", &["a"])],
        );
        assert_eq!(answers(&one), "the answer\nin two lines\n");
        let mut structured = step(StepStatus::Succeeded, "{\"ok\":true}");
        structured.output = json!({"ok": true});
        let several = record(
            vec![
                ("a", step(StepStatus::Succeeded, "found files")),
                ("z", step(StepStatus::Succeeded, "z says")),
                ("m", structured),
                ("f", step(StepStatus::Failed, "")),
            ],
            &[("m", &["a"]), ("f", &["a"])],
        );
        assert_eq!(
            answers(&several),
            "── z ──\nz says\n\n── m ──\n{\n  \"ok\": true\n}\n"
        );
    }
}
