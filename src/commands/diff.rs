//! `runner diff RUN_A RUN_B` (docs/src/ci.md "Comparing runs"): two runs compared step by step. A step is
//! `added`, `removed`, `changed` (its status, summary or output differ) or `same`; for steps in
//! both, the counts (tool calls, tokens, cost, time) are shown side by side. Summaries are diffed
//! by line.

use std::fmt::Write as _;

use camino::{Utf8Path, Utf8PathBuf};
use serde::Serialize;
use serde_json::Value;

use crate::cli::{DiffArgs, Format, Io};
use crate::error::{Exit, Problem};
use crate::record::{RunRecord, StepRecord};
use crate::report::{seconds, tokens, total_tokens, usd};

/// Finds a run: a run.json file, a run directory, or an id (or `latest`) in the state directory.
pub(crate) fn load(which: &str, state_dir: &Utf8Path) -> Result<RunRecord, Problem> {
    let path = Utf8PathBuf::from(which);
    let file = if path.is_file() {
        Some(path)
    } else if path.join("run.json").is_file() {
        Some(path.join("run.json"))
    } else {
        None
    };
    let Some(file) = file else {
        return crate::run::load_resume(state_dir, which).map_err(|p| {
            Problem::error(format!(
                "`{which}` is not a run.json, a run directory, or a run in `{state_dir}/runs`"
            ))
            .help(p.message)
        });
    };
    crate::run::records::read_file(&file).map_err(Problem::error)
}

#[derive(Serialize)]
pub(crate) struct StepDiff<'a> {
    pub(crate) id: &'a str,
    /// `added`, `removed`, `changed` or `same`.
    pub(crate) change: &'static str,
    /// `[a, b]`, `null` where the step is missing.
    pub(crate) status: [Option<&'static str>; 2],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) summary: Option<[&'a str; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) output: Option<[&'a Value; 2]>,
    pub(crate) tool_calls: [Option<u32>; 2],
    pub(crate) tokens: [Option<u64>; 2],
    pub(crate) cost_usd: [Option<f64>; 2],
    pub(crate) duration_ms: [Option<u64>; 2],
}

#[derive(Serialize)]
pub(crate) struct RunDiff<'a> {
    pub(crate) a: &'a str,
    pub(crate) b: &'a str,
    pub(crate) status: [&'static str; 2],
    pub(crate) steps: Vec<StepDiff<'a>>,
}

fn step_diff<'a>(
    id: &'a str,
    a: Option<&'a StepRecord>,
    b: Option<&'a StepRecord>,
) -> StepDiff<'a> {
    let both = a.zip(b);
    let change = match both {
        None if a.is_none() => "added",
        None => "removed",
        Some((a, b)) if a.status != b.status || a.summary != b.summary || a.output != b.output => {
            "changed"
        }
        Some(_) => "same",
    };
    StepDiff {
        id,
        change,
        status: [a.map(|r| r.status.as_str()), b.map(|r| r.status.as_str())],
        summary: both
            .filter(|(a, b)| a.summary != b.summary)
            .map(|(a, b)| [a.summary.as_str(), b.summary.as_str()]),
        output: both
            .filter(|(a, b)| a.output != b.output)
            .map(|(a, b)| [&a.output, &b.output]),
        tool_calls: [a.map(|r| r.tool_calls), b.map(|r| r.tool_calls)],
        tokens: [a.map(total_tokens), b.map(total_tokens)],
        cost_usd: [a.and_then(|r| r.cost_usd), b.and_then(|r| r.cost_usd)],
        duration_ms: [a.map(|r| r.duration_ms), b.map(|r| r.duration_ms)],
    }
}

pub(crate) fn pair<T>(values: &[Option<T>; 2], show: impl Fn(&T) -> String) -> String {
    let [a, b] = values;
    let a = a.as_ref().map_or_else(|| "-".to_owned(), &show);
    let b = b.as_ref().map_or_else(|| "-".to_owned(), &show);
    if a == b { a } else { format!("{a} → {b}") }
}

/// Changed summary lines shown for one step, at most; the rest are counted.
pub(crate) const MAX_SUMMARY_LINES: usize = 400;
/// Time spent looking for the smallest line diff of one summary; past it the diff found so far
/// is taken (it may be larger than the smallest, never wrong), so a hostile or huge record costs
/// bounded time, not time quadratic in its size.
pub(crate) const DIFF_DEADLINE: std::time::Duration = std::time::Duration::from_millis(300);

fn text(diff: &RunDiff<'_>) -> String {
    use crate::terminal::clean;
    // Ids come from run records, which a checkout may ship: no escape of theirs reaches the
    // terminal (a changed step drawn to look "same").
    let mut out = format!(
        "runs {} ({}) → {} ({})\n",
        clean(diff.a),
        diff.status[0],
        clean(diff.b),
        diff.status[1]
    );
    for step in &diff.steps {
        let mark = match step.change {
            "added" => '+',
            "removed" => '-',
            "changed" => '~',
            _ => '=',
        };
        let _ = write!(out, "\n{mark} {} {}", clean(step.id), step.change);
        match step.status {
            [Some(a), Some(b)] if a != b => {
                let _ = write!(out, ": {a} → {b}");
            }
            [Some(s), None] | [None, Some(s)] | [Some(s), Some(_)] => {
                let _ = write!(out, " ({s})");
            }
            [None, None] => {}
        }
        out.push('\n');
        if step.change == "same" || step.change == "changed" {
            let _ = writeln!(
                out,
                "    tools {} · tokens {} · cost {} · time {}",
                pair(&step.tool_calls, u32::to_string),
                pair(&step.tokens, |t| tokens(*t)),
                pair(&step.cost_usd, |c| usd(*c)),
                pair(&step.duration_ms, |d| seconds(*d)),
            );
        }
        if let Some([a, b]) = step.summary {
            out.push_str("    summary:\n");
            let lines = similar::TextDiff::configure()
                .timeout(DIFF_DEADLINE)
                .diff_lines(a, b);
            let mut shown = 0;
            let mut left = 0;
            for change in lines.iter_all_changes() {
                let sign = match change.tag() {
                    similar::ChangeTag::Delete => '-',
                    similar::ChangeTag::Insert => '+',
                    similar::ChangeTag::Equal => ' ',
                };
                if shown >= MAX_SUMMARY_LINES {
                    left += 1;
                    continue;
                }
                shown += 1;
                let line = clean(change.value().trim_end_matches('\n'));
                let _ = writeln!(out, "      {sign} {line}");
            }
            if left > 0 {
                let _ = writeln!(
                    out,
                    "      … {left} more lines (`--format json` has both summaries)"
                );
            }
        }
        if let Some([a, b]) = step.output {
            let _ = writeln!(out, "    output: {a} → {b}");
        }
    }
    out
}

/// Two runs compared step by step: the earlier run's steps in its order, then the ones only the
/// later run has.
pub(crate) fn compare<'a>(a: &'a RunRecord, b: &'a RunRecord) -> RunDiff<'a> {
    let mut ids: Vec<&str> = a.steps.keys().map(String::as_str).collect();
    ids.extend(
        b.steps
            .keys()
            .map(String::as_str)
            .filter(|id| !a.steps.contains_key(*id)),
    );
    RunDiff {
        a: &a.run_id,
        b: &b.run_id,
        status: [a.status.as_str(), b.status.as_str()],
        steps: ids
            .into_iter()
            .map(|id| step_diff(id, a.steps.get(id), b.steps.get(id)))
            .collect(),
    }
}

pub fn diff(args: DiffArgs, io: &mut Io<'_>) -> Exit {
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| Utf8PathBuf::from(".runner"));
    let (a, b) = match (load(&args.run_a, &state_dir), load(&args.run_b, &state_dir)) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => {
            let problems: Vec<Problem> = [a.err(), b.err()].into_iter().flatten().collect();
            super::report(io, &problems);
            return Exit::Invalid;
        }
    };
    let diff = compare(&a, &b);
    let rendered = match args.format {
        Format::Text => text(&diff),
        Format::Json => crate::terminal::to_json_pretty(&diff).unwrap_or_default() + "\n",
    };
    let _ = write!(io.out, "{}", crate::secrets::redact_owned(rendered));
    Exit::Success
}
