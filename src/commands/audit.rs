//! `runner audit [RUN]`: a recorded run checked against its plan and the rules
//! (docs/src/audit.md). Findings grouped by severity for people, `--format json` for programs,
//! `--fail-on LEVEL` exits 1 for CI. The run is named as `show` names it (an id, `latest`), or by
//! its folder; it is read through `run::records` (bounded, no link followed), and everything
//! printed passes the redacting writer `io` is.

use camino::{Utf8Path, Utf8PathBuf};
use serde_json::json;

use crate::audit::{Audit, Finding, Severity};
use crate::cli::{AuditArgs, Format, Io};
use crate::error::Exit;
use crate::record::RunRecord;

pub fn audit(args: AuditArgs, io: &mut Io<'_>) -> Exit {
    let found = match args.run.as_deref() {
        Some(path) if path.contains('/') => by_folder(Utf8Path::new(path), io.err),
        which => args.dirs.recorded_run(which, io.err),
    };
    let (state_dir, record, run_dir) = match found {
        Ok(found) => found,
        Err(message) => {
            let _ = writeln!(io.err, "error: {message}");
            return Exit::Invalid;
        }
    };
    let status = crate::run::lock::shown_status(&run_dir, record.status);
    let read = |rel: &Utf8Path| crate::run::records::read_run_file(&state_dir, &record.run_id, rel);
    let audit = crate::audit::audit(&record, &read);
    match args.format {
        Format::Json => {
            let shown = json!({
                "run_id": record.run_id,
                "workflow": record.workflow,
                "status": status.as_str(),
                "run_dir": run_dir,
                "findings": audit.findings,
                "counts": {
                    "high": audit.count(Severity::High),
                    "medium": audit.count(Severity::Medium),
                    "low": audit.count(Severity::Low),
                },
                "left_out": audit.left_out,
                "not_audited": audit.not_audited,
            });
            let _ = writeln!(
                io.out,
                "{}",
                crate::terminal::to_json_pretty(&shown).unwrap_or_default()
            );
        }
        Format::Text => text(&record, status.as_str(), &run_dir, &audit, io),
    }
    match args.fail_on {
        Some(level) if audit.reaches(level) => Exit::StepFailed,
        _ => Exit::Success,
    }
}

/// A run named by its folder (`.runner/runs/<id>`, or its `run.json`): the state directory is
/// the folder two up, and the run is read from there as any other.
fn by_folder(
    path: &Utf8Path,
    warn: &mut dyn std::io::Write,
) -> Result<(Utf8PathBuf, RunRecord, Utf8PathBuf), String> {
    let dir = match path.file_name() {
        Some("run.json") => path.parent().unwrap_or(Utf8Path::new(".")),
        _ => path,
    };
    let dir = dir.as_str().trim_end_matches('/');
    let dir = Utf8Path::new(if dir.is_empty() { "/" } else { dir });
    let (Some(id), Some(runs)) = (dir.file_name(), dir.parent()) else {
        return Err(format!("`{path}` is not a run's folder"));
    };
    if runs.file_name() != Some("runs") {
        return Err(format!(
            "`{path}` is not a run's folder (`<state dir>/runs/<run id>`)"
        ));
    }
    let state_dir = runs.parent().unwrap_or(Utf8Path::new(".")).to_owned();
    let record = crate::run::records::read(&state_dir, id)?;
    if let Some(warning) = crate::run::records::not_yours(&record) {
        let _ = writeln!(warn, "warning: {warning}");
    }
    Ok((state_dir, record, dir.to_owned()))
}

fn text(record: &RunRecord, status: &str, run_dir: &Utf8Path, audit: &Audit, io: &mut Io<'_>) {
    let clean = |text: &str| crate::terminal::clean(text).into_owned();
    let _ = writeln!(
        io.out,
        "audit of run {}  {}  {status}  ({})",
        record.run_id,
        clean(&record.workflow),
        run_dir
    );
    for level in [Severity::High, Severity::Medium, Severity::Low] {
        let found: Vec<&Finding> = audit
            .findings
            .iter()
            .filter(|f| f.severity == level)
            .collect();
        if found.is_empty() {
            continue;
        }
        let _ = writeln!(io.out, "\n{}", level.as_str());
        for finding in found {
            let _ = writeln!(io.out, "{}", clean(&line(finding)));
        }
    }
    if audit.left_out > 0 {
        let _ = writeln!(
            io.out,
            "\n{} more findings not listed (an audit lists {})",
            audit.left_out,
            crate::audit::MAX_FINDINGS
        );
    }
    for skipped in &audit.not_audited {
        let _ = writeln!(
            io.out,
            "not audited: step `{}`: {}",
            clean(&skipped.step),
            clean(&skipped.reason)
        );
    }
    let _ = writeln!(io.out, "\n{}", summary(audit));
}

/// `  tool_not_granted  step s (explore#1): called ...` with what was seen and where, indented.
fn line(f: &Finding) -> String {
    let whose = match (&f.step, &f.subagent) {
        (Some(step), Some(agent)) => format!("step {step}, subagent {agent}"),
        (Some(step), None) => format!("step {step}"),
        _ => "run".to_owned(),
    };
    let mut text = format!("  {}  {whose}: {}", f.kind.as_str(), f.message);
    if !f.evidence.seen.is_empty() {
        text.push_str(&format!("\n    seen: {}", f.evidence.seen));
    }
    let mut at = vec![
        f.evidence
            .transcript
            .as_ref()
            .map_or_else(|| "run.json".to_owned(), ToString::to_string),
    ];
    if let Some(turn) = f.evidence.turn {
        at.push(format!("turn {turn}"));
    }
    if let Some(id) = &f.evidence.call_id {
        at.push(format!("call {id}"));
    }
    text.push_str(&format!("\n    at: {}", at.join(", ")));
    text
}

/// `3 findings: 1 high, 2 low`, or `no findings`.
fn summary(audit: &Audit) -> String {
    let total = audit.findings.len() + audit.left_out;
    if total == 0 {
        return "no findings".to_owned();
    }
    let levels: Vec<String> = [Severity::High, Severity::Medium, Severity::Low]
        .into_iter()
        .filter_map(|level| {
            let n = audit.count(level);
            (n > 0).then(|| format!("{n} {}", level.as_str()))
        })
        .collect();
    format!(
        "{}: {}",
        crate::units::count(total as u64, "finding", "findings"),
        levels.join(", ")
    )
}
