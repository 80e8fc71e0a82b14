//! The sinks of a run's events (live progress or plain lines on stderr, `run.json`, transcripts,
//! JUnit) and the final table. Only this layer knows how things look.

pub mod answers;
pub mod github;
pub mod heartbeat;
pub mod html;
pub mod jsonl;
pub mod junit;
pub mod otel;
pub mod progress;
pub mod record;
pub mod transcript;
pub mod turns;

use crate::terminal;
use std::fmt::Write as _;

use crate::plan::Plan;
use crate::record::{RunRecord, RunStatus, StepRecord, StepStatus};

pub use crate::units::{seconds, tokens, usd};

/// Every token the step sent and received, cached or not.
pub fn total_tokens(r: &StepRecord) -> u64 {
    crate::units::sum([
        r.input_tokens,
        r.cache_creation_input_tokens,
        r.cache_read_input_tokens,
        r.output_tokens,
    ])
}

/// Rows as aligned columns, two spaces apart, no trailing spaces.
pub fn table<R: AsRef<[String]>>(rows: &[R]) -> String {
    let columns = rows.iter().map(|r| r.as_ref().len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.as_ref().get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .as_ref()
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The width of rows laid out by [`table`].
fn table_width<R: AsRef<[String]>>(rows: &[R]) -> usize {
    table(rows)
        .lines()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
}

/// Makes `rows` fit in `width` columns: first the branch column drops the run's prefix
/// (`runner/<run id>/`, said once in the returned note), then the widest column's longest
/// cells are cut with `…` until the table fits or no cell is wider than 8 characters.
fn fit(rows: &mut [Vec<String>], width: usize, run_id: &str) -> Option<String> {
    // Redacted before any cell is cut: half a secret is one the redactor no longer knows.
    for cell in rows.iter_mut().flatten() {
        *cell = crate::secrets::redact_owned(std::mem::take(cell));
    }
    if table_width(rows) <= width {
        return None;
    }
    let prefix = format!("runner/{run_id}/");
    let mut note = None;
    let branch = rows
        .first()
        .and_then(|header| header.iter().position(|c| c == "BRANCH"));
    if let Some(column) = branch {
        for row in rows.iter_mut().skip(1) {
            if let Some(cell) = row.get_mut(column)
                && let Some(step) = cell.strip_prefix(&prefix)
            {
                *cell = format!("…/{step}");
                note = Some(format!("branches: {prefix}<step>\n"));
            }
        }
    }
    while table_width(rows) > width {
        let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
        let widest = (0..columns)
            .map(|c| {
                let w = rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0);
                (w, c)
            })
            .max();
        let Some((w, column)) = widest.filter(|(w, _)| *w > 8) else {
            break;
        };
        for row in rows.iter_mut() {
            if let Some(cell) = row.get_mut(column)
                && cell.chars().count() == w
            {
                let kept: String = cell.chars().take(w - 2).collect();
                *cell = format!("{kept}…");
            }
        }
    }
    note
}

/// One row of the final table.
fn row(id: String, status: String, r: &StepRecord, costs: bool, branches: bool) -> Vec<String> {
    let input = crate::units::sum([
        r.input_tokens,
        r.cache_creation_input_tokens,
        r.cache_read_input_tokens,
    ]);
    let mut row = vec![
        id,
        status,
        r.turns.to_string(),
        r.tool_calls.to_string(),
        format!("{}/{}", tokens(input), tokens(r.output_tokens)),
        seconds(r.duration_ms),
    ];
    if costs {
        row.push(r.cost_usd.map_or_else(|| "-".to_owned(), usd));
    }
    if branches {
        row.push(r.branch.clone().unwrap_or_default());
    }
    row
}

/// The final table: status, turns, tool calls, tokens and time of every step.
pub fn summary_table(plan: &Plan, record: &RunRecord, run_dir: &camino::Utf8Path) -> String {
    summary_table_within(plan, record, run_dir, None)
}

// Over 80 lines: building the table and fitting it to the width are one pass over the same rows.
/// [`summary_table`] in at most `width` columns (a terminal's): branches lose their
/// `runner/<run id>/` prefix (said once below the table), then the widest cells are cut.
pub fn summary_table_within(
    plan: &Plan,
    record: &RunRecord,
    run_dir: &camino::Utf8Path,
    width: Option<usize>,
) -> String {
    // A cost column only when a price is known, a branch column only when a step made one.
    let costs = record.steps.values().any(|s| s.cost_usd.is_some());
    let branches = record
        .steps
        .values()
        .any(|s| s.branch.is_some() || s.instances.iter().any(|i| i.branch.is_some()));
    let mut header: Vec<String> = ["STEP", "STATUS", "TURNS", "TOOLS", "TOKENS IN/OUT", "TIME"]
        .map(String::from)
        .to_vec();
    if costs {
        header.push("COST".into());
    }
    if branches {
        header.push("BRANCH".into());
    }
    let mut rows = vec![header];
    // Totals count what this run did: a step reused from an earlier run cost nothing now.
    let (mut turns, mut tools, mut input_total, mut output_total) = (0, 0, 0, 0);
    for step in plan.steps() {
        let Some(r) = record.steps.get(&step.id) else {
            continue;
        };
        let input = crate::units::sum([
            r.input_tokens,
            r.cache_creation_input_tokens,
            r.cache_read_input_tokens,
        ]);
        let status = match &r.reused_from {
            Some(run) => format!("{} (reused from {run})", r.status.as_str()),
            None => {
                turns += r.turns;
                tools += r.tool_calls;
                input_total = crate::units::sum([input_total, input]);
                output_total = crate::units::sum([output_total, r.output_tokens]);
                r.status.as_str().to_owned()
            }
        };
        rows.push(row(step.id.clone(), status, r, costs, branches));
        // A fan-out's instances under it (the first fifty; run.json has them all).
        for instance in r.instances.iter().take(50) {
            let id = format!("  {}", instance.instance.as_deref().unwrap_or_default());
            let status = instance.status.as_str().to_owned();
            rows.push(row(id, status, instance, costs, branches));
        }
        if r.instances.len() > 50 {
            rows.push(vec![format!("  … {} more", r.instances.len() - 50)]);
        }
    }
    if rows.len() > 2 {
        let mut row = vec![
            "total".to_owned(),
            String::new(),
            turns.to_string(),
            tools.to_string(),
            format!("{}/{}", tokens(input_total), tokens(output_total)),
            seconds(record.duration_ms),
        ];
        if costs {
            row.push(record.cost_usd.map_or_else(|| "-".to_owned(), usd));
        }
        if branches {
            row.push(String::new());
        }
        rows.push(row);
    }
    let mut out = String::from("\n");
    let mut note = None;
    if let Some(width) = width {
        note = fit(&mut rows, width, &record.run_id);
    }
    out.push_str(&table(&rows));
    if let Some(note) = note {
        out.push_str(&note);
    }
    // Why each failed step failed, so that a CI log without progress lines still says it.
    for step in plan.steps() {
        let Some(r) = record.steps.get(&step.id) else {
            continue;
        };
        if r.status != StepStatus::Failed {
            continue;
        }
        let reason = r.error.as_deref().unwrap_or("no reason was recorded");
        let reason = terminal::clean(reason);
        let mut lines = reason.trim_end().lines();
        let _ = writeln!(
            out,
            "failed: {}: {}",
            step.id,
            lines.next().unwrap_or_default()
        );
        for line in lines {
            let _ = writeln!(out, "    {line}");
        }
    }
    // Work that was kept, and where: a worktree never disappears without a word.
    for (id, r) in record.steps.iter().flat_map(|(id, r)| {
        std::iter::once((id.as_str(), r)).chain(
            r.instances
                .iter()
                .map(|i| (i.instance.as_deref().unwrap_or(id), i)),
        )
    }) {
        if let (Some(path), Some(branch)) = (&r.worktree, &r.branch) {
            let how = if r.status == StepStatus::Cancelled {
                format!(
                    "its changes committed there as work in progress: `--resume {} --continue` goes on from them",
                    record.run_id
                )
            } else {
                "its changes committed there".to_owned()
            };
            let _ = writeln!(
                out,
                "kept: {id}: its worktree at {} on branch {} ({how}); `runner clean` removes it when you are done",
                terminal::clean(path),
                terminal::clean(branch)
            );
        }
    }
    drift_note(record, &mut out);
    if let Some(error) = &record.storage_error {
        let _ = writeln!(
            out,
            "error: {}; the run was stopped",
            terminal::clean(error)
        );
    }
    let _ = writeln!(
        out,
        "run {} {} in {} ({})",
        record.run_id,
        match record.status {
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "was interrupted",
            RunStatus::Running => "is still running",
        },
        seconds(record.duration_ms),
        terminal::clean(&plan.name)
    );
    let _ = writeln!(
        out,
        "record and transcripts: {}",
        terminal::clean(run_dir.as_ref())
    );
    out
}

/// Replayed requests that differed from their recording, by step: answered all the same, so
/// the run can pass on a recording that no longer says what the workflow asks.
fn drift_note(record: &RunRecord, out: &mut String) {
    if record.replay_drift == 0 {
        return;
    }
    let by_step: Vec<String> = record
        .steps
        .iter()
        .filter(|(_, r)| r.replay_drift > 0 && r.reused_from.is_none())
        .map(|(id, r)| format!("{id}: {}", r.replay_drift))
        .collect();
    let n = record.replay_drift;
    let _ = writeln!(
        out,
        "warning: {n} {} drifted from {} recording ({}) and {} answered from the cassettes all the same; if the change is meant, record again with `--record DIR`; `--replay-strict` fails a step that drifts",
        crate::units::plural(u64::from(n), "request", "requests"),
        if n == 1 { "its" } else { "their" },
        by_step.join(", "),
        if n == 1 { "was" } else { "were" },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Vec<String>> {
        let row = |cells: &[&str]| cells.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>();
        vec![
            row(&[
                "STEP",
                "STATUS",
                "TURNS",
                "TOOLS",
                "TOKENS IN/OUT",
                "TIME",
                "BRANCH",
            ]),
            row(&[
                "implement_the_migration",
                "succeeded",
                "12",
                "30",
                "120.5k/8.1k",
                "95.2s",
                "runner/20261206T071950343-5602/implement_the_migration",
            ]),
            row(&["review", "failed", "1", "0", "1.2k/180", "0.0s", ""]),
        ]
    }

    /// The final table fits a narrow terminal: branches lose the run's prefix (said once),
    /// then the widest cells are cut; a wide terminal changes nothing.
    #[test]
    fn the_final_table_fits_the_terminal() {
        let mut wide = rows();
        assert_eq!(fit(&mut wide, 200, "20261206T071950343-5602"), None);
        assert_eq!(wide, rows());
        for width in [100, 80, 60] {
            let mut narrow = rows();
            let note = fit(&mut narrow, width, "20261206T071950343-5602");
            assert_eq!(
                note.as_deref(),
                Some("branches: runner/20261206T071950343-5602/<step>\n")
            );
            let text = table(&narrow);
            assert!(
                text.lines().all(|l| l.chars().count() <= width),
                "{width}:\n{text}"
            );
            assert!(text.contains("review") && text.contains("failed"), "{text}");
        }
    }
}
