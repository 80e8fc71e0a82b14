//! `runner show [RUN] [STEP]`: a recorded run as people read it (docs/src/reference/commands.md):
//! its steps with status, turns, tokens, cost and time, totals, and where things are; or one step
//! as a readable transcript: each turn's text, tool calls with their inputs and (cut) outputs,
//! checks with exit codes, subagents, context clearings and compactions, tokens and cost per
//! turn. `--format json` gives the same as data. It reads the run record and the transcript
//! and recomputes nothing.

use camino::Utf8Path;
use serde_json::json;

use crate::cli::{Format, Io, ShowArgs};
use crate::error::Exit;
use crate::record::RunRecord;
use crate::report::turns::{Story, cut, note_line};

/// Tool outputs are shown cut to this many characters.
const OUTPUT_SHOWN: usize = 400;

pub fn show(args: ShowArgs, io: &mut Io<'_>) -> Exit {
    let (state_dir, mut record, run_dir) = match args.dirs.recorded_run(args.run.as_deref(), io.err)
    {
        Ok(found) => found,
        Err(message) => {
            let _ = writeln!(io.err, "error: {message}");
            return Exit::Invalid;
        }
    };
    // As `runs` shows it: a record saying `running` that no runner holds was interrupted.
    record.status = crate::run::lock::shown_status(&run_dir, record.status);
    match &args.step {
        None => show_run(&record, &run_dir, args.format, io),
        Some(step) => show_step(&record, &state_dir, step, args.format, io),
    }
}

fn show_run(record: &RunRecord, run_dir: &Utf8Path, format: Format, io: &mut Io<'_>) -> Exit {
    if format == Format::Json {
        let _ = writeln!(io.out, "{}", record.to_json());
        return Exit::Success;
    }
    let clean = |text: &str| crate::terminal::clean(text).into_owned();
    let _ = writeln!(
        io.out,
        "run {}  {}  {}  started {}  {}{}",
        record.run_id,
        clean(&record.workflow),
        record.status.as_str(),
        clean(&crate::units::when(&record.started_at)),
        duration(record),
        record
            .cost_usd
            .map_or_else(String::new, |c| format!("  {}", crate::units::usd(c)))
    );
    let header = ["STEP", "STATUS", "TURNS", "TOOLS", "TOKENS", "COST", "TIME"];
    let mut rows: Vec<Vec<String>> = vec![header.map(str::to_owned).to_vec()];
    let steps = record.in_plan_order();
    rows.extend(steps.iter().map(|(id, step)| {
        vec![
            clean(id),
            step.status.as_str().to_owned(),
            step.turns.to_string(),
            step.tool_calls.to_string(),
            crate::units::tokens(crate::report::total_tokens(step)),
            step.cost_usd
                .map_or_else(|| "-".to_owned(), crate::units::usd),
            crate::units::seconds(step.duration_ms),
        ]
    }));
    let _ = write!(io.out, "{}", crate::report::table(&rows));
    if let Some(waits) = &record.queue_waits {
        let _ = writeln!(io.out, "{}", queue_line(waits));
    }
    // Why each step that did not succeed did not, under its own heading: a skipped step did
    // not fail.
    for (id, step) in &steps {
        let Some(error) = &step.error else { continue };
        let heading = match step.status {
            crate::record::StepStatus::Skipped => "skipped",
            crate::record::StepStatus::Cancelled => "cancelled",
            _ => "failed",
        };
        let _ = writeln!(io.out, "{heading}: {}: {}", clean(id), clean(error));
    }
    for (id, step) in &steps {
        if let Some(branch) = &step.branch {
            let _ = writeln!(io.out, "branch: {}: {}", clean(id), clean(branch));
        }
    }
    let _ = writeln!(
        io.out,
        "record: {}\ntranscripts: {}/steps/<step>/transcript.jsonl (`runner show {} <step>`)",
        run_dir.join("run.json"),
        run_dir,
        record.run_id
    );
    let answers = crate::report::answers::answers(record);
    if !answers.is_empty() {
        let _ = write!(io.out, "\n{answers}");
    }
    Exit::Success
}

/// `queue waits: steps 0ms median, 1.2s p90, 3.4s p99 (6 started); ...`: how long work waited
/// for a slot, as the record computed it.
pub(crate) fn queue_line(waits: &crate::record::QueueWaits) -> String {
    let kinds: Vec<String> = waits
        .lines()
        .into_iter()
        .map(|(kind, p)| {
            format!(
                "{kind} {} median, {} p90, {} p99 ({} started)",
                crate::units::seconds(p.p50_ms),
                crate::units::seconds(p.p90_ms),
                crate::units::seconds(p.p99_ms),
                p.count
            )
        })
        .collect();
    format!("queue waits: {}", kinds.join("; "))
}

/// How long the run took; for one still running, how long it has been going.
fn duration(record: &RunRecord) -> String {
    if record.status != crate::record::RunStatus::Running {
        return crate::units::seconds(record.duration_ms);
    }
    let started = record.started_at.parse::<jiff::Timestamp>().ok();
    match started.and_then(|at| jiff::Timestamp::now().duration_since(at).try_into().ok()) {
        Some(elapsed) => {
            let elapsed: std::time::Duration = elapsed;
            format!(
                "{} so far",
                crate::units::seconds(elapsed.as_millis() as u64)
            )
        }
        None => "still running".to_owned(),
    }
}

fn show_step(
    record: &RunRecord,
    state_dir: &Utf8Path,
    step: &str,
    format: Format,
    io: &mut Io<'_>,
) -> Exit {
    // An instance `X[k]` is among its step's instances.
    let found = match crate::plan::verified::split_instance(step) {
        Some((parent, _)) => record.steps.get(parent).and_then(|p| {
            p.instances
                .iter()
                .find(|i| i.instance.as_deref() == Some(step))
        }),
        None => record.steps.get(step),
    };
    let Some(entry) = found else {
        let known: Vec<&str> = record.steps.keys().map(String::as_str).collect();
        let _ = writeln!(
            io.err,
            "error: run {} has no step `{step}`; its steps: {}",
            record.run_id,
            known.join(", ")
        );
        return Exit::Invalid;
    };
    let in_run = crate::report::transcript::TranscriptSink::path(Utf8Path::new(""), step);
    let text = match crate::run::records::read_run_file(state_dir, &record.run_id, &in_run) {
        Ok(text) => text,
        Err(err) => {
            let _ = writeln!(
                io.err,
                "error: step `{step}` has no transcript to show ({err}); it may not have run"
            );
            return Exit::Invalid;
        }
    };
    let Story { turns, notes } = crate::report::turns::read(&text, OUTPUT_SHOWN);
    if format == Format::Json {
        let shown = json!({
            "run_id": record.run_id,
            "step": step,
            "status": entry.status.as_str(),
            "summary": entry.summary,
            "error": entry.error,
            "continued_from": entry.continued_from,
            "turns": turns,
            "events": notes,
        });
        let _ = writeln!(
            io.out,
            "{}",
            crate::terminal::to_json_pretty(&shown).unwrap_or_default()
        );
        return Exit::Success;
    }
    let clean = |text: &str| crate::terminal::clean(text).into_owned();
    let _ = writeln!(
        io.out,
        "step {step} of run {}: {}, {}, {}",
        record.run_id,
        entry.status.as_str(),
        crate::units::count(entry.turns.into(), "turn", "turns"),
        crate::units::count(entry.tool_calls.into(), "tool call", "tool calls")
    );
    if let Some(earlier) = &entry.continued_from {
        let _ = writeln!(
            io.out,
            "continues the conversation of run {earlier}: its first turn here sends the earlier turns again (`runner show {earlier} {step}` shows them)"
        );
    }
    // Notes before the first turn, then each turn with what happened after it.
    let placed: std::collections::BTreeSet<usize> =
        turns.iter().flat_map(|t| t.notes.iter().copied()).collect();
    for (i, note) in notes.iter().enumerate() {
        if !placed.contains(&i) {
            let _ = writeln!(io.out, "\n{}", clean(&note_line(note)));
        }
    }
    for turn in &turns {
        let tokens = |key: &str| turn.usage[key].as_u64().unwrap_or(0);
        let _ = writeln!(
            io.out,
            "\nturn {}{}  in {} (cache read {}, written {}), out {}{}",
            turn.turn,
            if turn.compaction {
                " · compaction"
            } else {
                ""
            },
            crate::units::tokens(tokens("input_tokens")),
            crate::units::tokens(tokens("cache_read_input_tokens")),
            crate::units::tokens(tokens("cache_creation_input_tokens")),
            crate::units::tokens(tokens("output_tokens")),
            turn.cost_usd
                .map_or_else(String::new, |c| format!(", {}", crate::units::usd(c)))
        );
        if !turn.text.trim().is_empty() {
            for line in clean(turn.text.trim()).lines() {
                let _ = writeln!(io.out, "  {line}");
            }
        }
        for call in &turn.tool_calls {
            let error = if call["is_error"] == true {
                " (error)"
            } else {
                ""
            };
            let _ = writeln!(
                io.out,
                "  → {} {}{error}",
                clean(call["name"].as_str().unwrap_or_default()),
                clean(&cut(&call["input"].to_string(), OUTPUT_SHOWN))
            );
            for line in clean(call["output"].as_str().unwrap_or_default()).lines() {
                let _ = writeln!(io.out, "    {line}");
            }
        }
        for note in turn.notes.iter().filter_map(|i| notes.get(*i)) {
            let _ = writeln!(io.out, "\n{}", clean(&note_line(note)));
        }
    }
    if let Some(error) = &entry.error {
        let _ = writeln!(io.out, "\nfailed: {}", clean(error));
    }
    Exit::Success
}
