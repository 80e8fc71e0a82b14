//! `--junit FILE`: one testcase per step; failed steps carry a failure, skipped and cancelled ones
//! are skipped.

use std::fmt::Write as _;

use crate::plan::Plan;
use crate::run::{RunRecord, StepStatus};

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 forbids most control characters, even escaped.
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\r' | '\t') => {}
            c => out.push(c),
        }
    }
    out
}

pub fn to_junit(plan: &Plan, record: &RunRecord) -> String {
    let count =
        |f: &dyn Fn(StepStatus) -> bool| record.steps.values().filter(|s| f(s.status)).count();
    let failures = count(&|s| s == StepStatus::Failed);
    let skipped = count(&|s| matches!(s, StepStatus::Skipped | StepStatus::Cancelled));
    let name = escape(&plan.name);
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"{name}\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\" time=\"{:.3}\">",
        plan.steps.len(),
        record.duration_ms as f64 / 1000.0
    );
    let _ = writeln!(
        out,
        "  <testsuite name=\"{name}\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\" time=\"{:.3}\" timestamp=\"{}\">",
        plan.steps.len(),
        record.duration_ms as f64 / 1000.0,
        escape(&record.started_at)
    );
    for step in &plan.steps {
        let Some(r) = record.steps.get(&step.id) else {
            continue;
        };
        let _ = write!(
            out,
            "    <testcase name=\"{}\" classname=\"{name}.{}\" time=\"{:.3}\"",
            escape(&step.id),
            escape(&step.agent),
            r.duration_ms as f64 / 1000.0
        );
        let error = escape(r.error.as_deref().unwrap_or_default());
        match r.status {
            StepStatus::Failed => {
                let _ = writeln!(
                    out,
                    ">\n      <failure message=\"{error}\">{error}</failure>\n    </testcase>"
                );
            }
            StepStatus::Skipped | StepStatus::Cancelled => {
                let _ = writeln!(
                    out,
                    ">\n      <skipped message=\"{}: {error}\"/>\n    </testcase>",
                    r.status.as_str()
                );
            }
            _ => {
                let _ = writeln!(
                    out,
                    ">\n      <system-out>{}</system-out>\n    </testcase>",
                    escape(&r.summary)
                );
            }
        }
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}
