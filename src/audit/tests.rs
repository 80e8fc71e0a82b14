use super::*;
use crate::record::planned::{CostRange, Planned};
use crate::record::{CheckRecord, RunStatus};
use serde_json::json;

fn record(steps: Vec<(&str, StepRecord, Planned)>) -> RunRecord {
    let mut record: RunRecord = serde_json::from_value(json!({
        "run_id": "r1", "workflow": "w", "status": "succeeded",
        "started_at": "2026-12-07T12:00:00Z", "duration_ms": 1, "steps": {},
    }))
    .unwrap();
    record.status = RunStatus::Succeeded;
    record.recorded_here = true;
    for (id, step, planned) in steps {
        record.steps.insert(id.into(), step);
        record.planned.insert(id.into(), planned);
    }
    record
}

fn planned(checks: u32, high: Option<f64>) -> Planned {
    Planned {
        model: "anthropic/m".into(),
        checks,
        sandbox: "workdir".into(),
        network: false,
        forecast_usd: high.map(|high| CostRange { median: high, high }),
    }
}

fn done(status: StepStatus) -> StepRecord {
    StepRecord {
        status,
        ..StepRecord::pending("anthropic/m")
    }
}

fn kinds(audit: &Audit) -> Vec<(&'static str, Severity, Option<&str>)> {
    audit
        .findings
        .iter()
        .map(|f| (f.kind.as_str(), f.severity, f.step.as_deref()))
        .collect()
}

#[test]
fn a_success_without_its_checks_is_high_and_a_reused_step_is_said_not_audited() {
    let mut checked = done(StepStatus::Succeeded);
    checked.checks = vec![CheckRecord {
        command: "true".into(),
        round: 1,
        exit_code: Some(0),
        passed: true,
        timed_out: false,
        duration_ms: 1,
        started_at: None,
    }];
    let mut reused = done(StepStatus::Succeeded);
    reused.reused_from = Some("r0".into());
    let mut costly = done(StepStatus::Succeeded);
    costly.cost_usd = Some(0.5);
    let record = record(vec![
        ("unverified", done(StepStatus::Succeeded), planned(1, None)),
        ("verified", checked, planned(1, None)),
        ("early", done(StepStatus::Failed), planned(2, None)),
        ("old", reused, planned(3, None)),
        ("costly", costly, planned(0, Some(0.25))),
    ]);
    let audit = audit(&record, &|_| Err("no transcript".into()));
    assert_eq!(
        kinds(&audit),
        [
            ("checks_skipped", Severity::High, Some("unverified")),
            ("cost_over_forecast", Severity::Low, Some("costly")),
            ("checks_skipped", Severity::Low, Some("early")),
        ]
    );
    assert_eq!(audit.not_audited.len(), 1);
    assert_eq!(audit.not_audited[0].step, "old");
    assert!(audit.reaches(Severity::High));
}

#[test]
fn a_transcript_shows_refusals_repeats_and_retries_where_they_happened() {
    let mut lines = vec![
        json!({"event": "session_started", "step": "s", "model": "m"}),
        json!({"event": "tool_started", "step": "s", "turn": 1, "id": "t1", "name": "write_file", "input": {"path": "x"}}),
        json!({"event": "tool_finished", "step": "s", "turn": 1, "id": "t1", "name": "write_file", "is_error": true, "output": "`write_file` is not available to this step", "refused": "not_granted"}),
    ];
    for (i, turn) in (2..5).enumerate() {
        let id = format!("g{i}");
        lines.push(json!({"event": "tool_started", "step": "s", "turn": turn, "id": id, "name": "grep", "input": {"pattern": "a"}}));
        lines.push(json!({"event": "tool_finished", "step": "s", "turn": turn, "id": id, "name": "grep", "is_error": false, "output": "a"}));
    }
    for _ in 0..transcript::RETRY_STORM {
        lines.push(json!({"event": "retrying", "step": "s", "turn": 5, "attempt": 1, "delay_ms": 0, "error": "overloaded"}));
    }
    lines.push(
        json!({"event": "turn_finished", "step": "s", "turn": 5, "body": {"model": "other"}}),
    );
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let record = record(vec![("s", done(StepStatus::Succeeded), planned(0, None))]);
    let audit = audit(&record, &|path| {
        assert_eq!(path, "steps/s/transcript.jsonl");
        Ok(text.clone())
    });
    assert_eq!(
        kinds(&audit),
        [
            ("tool_not_granted", Severity::High, Some("s")),
            ("model_differs", Severity::Medium, Some("s")),
            ("retry_storm", Severity::Medium, Some("s")),
            ("repeated_calls", Severity::Low, Some("s")),
        ]
    );
    let repeat = &audit.findings[3];
    assert_eq!(repeat.evidence.turn, Some(2));
    assert_eq!(repeat.evidence.call_id.as_deref(), Some("g0"));
    assert_eq!(repeat.evidence.seen, r#"{"pattern":"a"}"#);
}
