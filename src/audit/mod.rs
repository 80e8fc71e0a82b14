//! `runner audit`: a recorded run checked against its plan and the rules (docs/src/audit.md).
//! What it reads is the record (`run.json`, with what the plan said of each step in `planned`)
//! and the transcripts; what it finds is a list of [`Finding`]s, each with a severity, the step
//! (and subagent) it is in, what was seen, and where to look. It decides nothing of the run: it
//! reads what the scheduler and the tools recorded, and the few signs read from text (a
//! sandbox's refusal, an `rm`) are in `signs.rs`, each said so in the book.

mod signs;
mod transcript;

use camino::{Utf8Path, Utf8PathBuf};
use serde::Serialize;

use crate::record::{RunRecord, StepRecord, StepStatus};

/// Findings kept, at most: past this they are counted, not listed.
pub const MAX_FINDINGS: usize = 1000;
/// Transcripts read, at most (a step's and each subagent's are one each).
pub const MAX_TRANSCRIPTS: usize = 10_000;
/// Characters of what was seen that a finding keeps.
const SEEN_CHARS: usize = 300;

/// How much a finding matters: `--fail-on` exits 1 at or above its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Low,
    Medium,
    High,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
        }
    }
}

/// What a finding is about (docs/src/audit.md names each, with its severity and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    ToolNotGranted,
    ToolUnknown,
    PathRefused,
    SandboxRefused,
    NetworkRefused,
    FileDeleted,
    RepeatedCalls,
    RetryStorm,
    ModelDiffers,
    CostOverForecast,
    ChecksSkipped,
    SecretInOutput,
    OutOfTurns,
    ReplayDrift,
    RecordNotSealed,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ToolNotGranted => "tool_not_granted",
            Kind::ToolUnknown => "tool_unknown",
            Kind::PathRefused => "path_refused",
            Kind::SandboxRefused => "sandbox_refused",
            Kind::NetworkRefused => "network_refused",
            Kind::FileDeleted => "file_deleted",
            Kind::RepeatedCalls => "repeated_calls",
            Kind::RetryStorm => "retry_storm",
            Kind::ModelDiffers => "model_differs",
            Kind::CostOverForecast => "cost_over_forecast",
            Kind::ChecksSkipped => "checks_skipped",
            Kind::SecretInOutput => "secret_in_output",
            Kind::OutOfTurns => "out_of_turns",
            Kind::ReplayDrift => "replay_drift",
            Kind::RecordNotSealed => "record_not_sealed",
        }
    }
}

/// Where to look, and what was there.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Evidence {
    /// The transcript, in the run's folder (`steps/<step>/transcript.jsonl`); `None` when the
    /// record itself says it (`run.json`).
    pub transcript: Option<Utf8PathBuf>,
    pub turn: Option<u64>,
    /// The tool call's id.
    pub call_id: Option<String>,
    /// What was seen: the call's input, the line of its output, the figures.
    pub seen: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub kind: Kind,
    pub severity: Severity,
    /// `None` for the run as a whole.
    pub step: Option<String>,
    pub subagent: Option<String>,
    pub message: String,
    pub evidence: Evidence,
}

/// A step that was not audited, and why (a reused step was audited with its own run).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotAudited {
    pub step: String,
    pub reason: String,
}

/// What `runner audit` found in one run.
#[derive(Debug, Default, Serialize)]
pub struct Audit {
    /// Most severe first, then in plan order.
    pub findings: Vec<Finding>,
    pub not_audited: Vec<NotAudited>,
    /// Findings past [`MAX_FINDINGS`], counted only.
    pub left_out: usize,
}

impl Audit {
    fn add(&mut self, finding: Finding) {
        if self.findings.len() < MAX_FINDINGS {
            self.findings.push(finding);
        } else {
            self.left_out += 1;
        }
    }

    /// How many findings of `severity` (listed ones).
    pub fn count(&self, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == severity)
            .count()
    }

    /// Whether a finding is at `level` or above.
    pub fn reaches(&self, level: Severity) -> bool {
        self.findings.iter().any(|f| f.severity >= level)
    }
}

/// `text` cut to [`SEEN_CHARS`] characters.
fn seen(text: &str) -> String {
    let text = text.trim();
    let short: String = text.chars().take(SEEN_CHARS).collect();
    if short.len() < text.len() {
        format!("{short}…")
    } else {
        short
    }
}

/// A finding the record itself shows (no transcript line).
fn in_record(
    kind: Kind,
    severity: Severity,
    step: Option<&str>,
    message: String,
    what: String,
) -> Finding {
    Finding {
        kind,
        severity,
        step: step.map(str::to_owned),
        subagent: None,
        message,
        evidence: Evidence {
            seen: seen(&what),
            ..Evidence::default()
        },
    }
}

/// Reads a file of the run by its path in the run's folder (bounded and confined:
/// `run::records::read_run_file`).
pub type Reader<'a> = dyn Fn(&Utf8Path) -> Result<String, String> + 'a;

/// Audits `record`, reading its transcripts through `read`.
pub fn audit(record: &RunRecord, read: &Reader<'_>) -> Audit {
    let mut audit = Audit::default();
    let mut transcripts = 0usize;
    let mut retries = 0u64;
    if !record.recorded_here {
        audit.add(in_record(
            Kind::RecordNotSealed,
            Severity::Medium,
            None,
            "the record does not carry your seal: it was made elsewhere or changed since, so what it says may not be what happened".into(),
            format!("run {}", record.run_id),
        ));
    }
    for (id, step) in record.in_plan_order() {
        if let Some(from) = &step.reused_from {
            audit.not_audited.push(NotAudited {
                step: id.clone(),
                reason: format!("reused from run {from}: audit that run"),
            });
            continue;
        }
        let planned = record.planned.get(id);
        step_findings(&mut audit, id, step, planned, step.instances.is_empty());
        let units: Vec<(String, &StepRecord)> = if step.instances.is_empty() {
            vec![(id.clone(), step)]
        } else {
            step.instances
                .iter()
                .filter(|i| i.reused_from.is_none())
                .map(|i| (i.instance.clone().unwrap_or_else(|| id.clone()), i))
                .collect()
        };
        for (label, unit) in units {
            if !step.instances.is_empty() {
                step_findings(&mut audit, &label, unit, planned, true);
            }
            if matches!(unit.status, StepStatus::Pending | StepStatus::Skipped) {
                continue;
            }
            let mut files = vec![(
                None,
                crate::report::transcript::TranscriptSink::path(Utf8Path::new(""), &label),
            )];
            files.extend(unit.subagents.iter().map(|s| {
                (
                    Some(s.id.clone()),
                    crate::report::transcript::TranscriptSink::subagent_path(
                        Utf8Path::new(""),
                        &label,
                        &s.id,
                    ),
                )
            }));
            for (subagent, path) in files {
                if transcripts >= MAX_TRANSCRIPTS {
                    audit.not_audited.push(NotAudited {
                        step: label.clone(),
                        reason: format!(
                            "past the {MAX_TRANSCRIPTS} transcripts an audit reads: `{path}` not read"
                        ),
                    });
                    continue;
                }
                transcripts += 1;
                // A step that failed before its first request has no transcript: nothing to read.
                let Ok(text) = read(&path) else { continue };
                let scan = transcript::Scan {
                    step: &label,
                    subagent: subagent.as_deref(),
                    path: &path,
                    planned,
                };
                retries += scan.run(&text, &mut audit);
            }
        }
    }
    run_findings(&mut audit, record, retries);
    // Most severe first; within a level, in the order found (plan order).
    audit
        .findings
        .sort_by_key(|f| std::cmp::Reverse(f.severity));
    audit
}

/// Retries across a run at which it is a storm, whatever each step's count.
pub const RUN_RETRY_STORM: u64 = 10;

fn run_findings(audit: &mut Audit, record: &RunRecord, retries: u64) {
    if let (Some(forecast), Some(cost)) = (record.forecast_usd, record.cost_usd)
        && cost > forecast.high + 1e-9
    {
        audit.add(in_record(
            Kind::CostOverForecast,
            Severity::Medium,
            None,
            format!(
                "the run cost {}, above its forecast's high of {}",
                crate::units::usd(cost),
                crate::units::usd(forecast.high)
            ),
            format!(
                "cost_usd {cost}, forecast median {} high {}",
                forecast.median, forecast.high
            ),
        ));
    }
    if retries >= RUN_RETRY_STORM {
        audit.add(in_record(
            Kind::RetryStorm,
            Severity::Medium,
            None,
            format!("the run's model requests were retried {retries} times in all"),
            format!("{retries} retries (a storm from {RUN_RETRY_STORM})"),
        ));
    }
    if record.replayed && record.replay_drift > 0 {
        audit.add(in_record(
            Kind::ReplayDrift,
            Severity::Low,
            None,
            format!(
                "{} replayed requests differed from their recording and were answered all the same",
                record.replay_drift
            ),
            format!("replay_drift {}", record.replay_drift),
        ));
    }
}

/// What the record of one step (or fan-out instance, `own_checks`) says against its plan.
fn step_findings(
    audit: &mut Audit,
    id: &str,
    step: &StepRecord,
    planned: Option<&crate::record::planned::Planned>,
    own_checks: bool,
) {
    if let Some(planned) = planned {
        if own_checks {
            checks_skipped(audit, id, step, planned.checks);
        }
        if step.status.is_finished() && step.model != planned.model && step.instance.is_none() {
            audit.add(in_record(
                Kind::ModelDiffers,
                Severity::Medium,
                Some(id),
                format!(
                    "recorded on `{}`, but the plan says `{}`",
                    step.model, planned.model
                ),
                format!("model {}", step.model),
            ));
        }
        if step.instance.is_none()
            && let (Some(forecast), Some(cost)) = (planned.forecast_usd, step.cost_usd)
            && cost > forecast.high + 1e-9
        {
            audit.add(in_record(
                Kind::CostOverForecast,
                Severity::Low,
                Some(id),
                format!(
                    "cost {}, above its forecast's high of {}",
                    crate::units::usd(cost),
                    crate::units::usd(forecast.high)
                ),
                format!(
                    "cost_usd {cost}, forecast median {} high {}",
                    forecast.median, forecast.high
                ),
            ));
        }
    }
    if let Some(diff) = &step.diff {
        for path in signs::deleted_in_diff(diff) {
            audit.add(in_record(
                Kind::FileDeleted,
                Severity::Medium,
                Some(id),
                format!("its worktree's diff deletes `{path}`"),
                format!("deleted file {path}"),
            ));
        }
    }
    if step.ran_out_of_turns {
        audit.add(in_record(
            Kind::OutOfTurns,
            Severity::Low,
            Some(id),
            "it used its last allowed turn: its answer was asked for with what it had".into(),
            format!("{} turns", step.turns),
        ));
    }
}

/// A step with checks whose checks did not all run: one that succeeded without them passed
/// unverified (high); one that failed before them is only said (low). A cancelled or skipped
/// step never reached them.
fn checks_skipped(audit: &mut Audit, id: &str, step: &StepRecord, planned: u32) {
    if planned == 0 {
        return;
    }
    let last = step.checks.iter().map(|c| c.round).max();
    let passed_last = last.map_or(0, |round| {
        step.checks
            .iter()
            .filter(|c| c.round == round && c.passed)
            .count()
    });
    let what = format!(
        "{planned} planned, {} run{}",
        step.checks.len(),
        last.map_or_else(String::new, |r| format!(
            ", {passed_last} passed in round {r}"
        ))
    );
    match step.status {
        StepStatus::Succeeded if (passed_last as u64) < u64::from(planned) => {
            audit.add(in_record(
                Kind::ChecksSkipped,
                Severity::High,
                Some(id),
                format!(
                    "succeeded, but {} of its {planned} checks did not pass in its last round: it was not verified",
                    u64::from(planned) - passed_last as u64
                ),
                what,
            ));
        }
        StepStatus::Failed if step.checks.is_empty() => audit.add(in_record(
            Kind::ChecksSkipped,
            Severity::Low,
            Some(id),
            format!("failed before its {planned} checks ran"),
            what,
        )),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
