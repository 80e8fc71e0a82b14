//! `runner gather WORKFLOW --run-id ID`: the last job of an exported pipeline (docs/src/ci.md,
//! "The last job"). Every job ran one step of the run `ID` and left its state; copied into one
//! state directory, they are read back as one run (`run::load_merged`: bounded, ids checked),
//! the steps no job recorded are said to be so, the run's status is settled as one run would
//! settle it, and `runs/<ID>/run.json` is written, for `runner report` and `runner show`.
//!
//! The record is written without this user's seal: it is made of what other machines wrote,
//! and is no more this user's than they are (`runner report` says so).

use std::collections::BTreeSet;
use std::time::Duration;

use super::load_plan_to_inspect;
use crate::cli::{GatherArgs, Io};
use crate::error::Exit;
use crate::plan::Plan;
use crate::record::{RunRecord, StepRecord, StepStatus};
use crate::run::outcome::SkipReason;

/// Why a step no job recorded is cancelled, when its needs gave its job no reason to skip it.
const NO_RECORD: &str =
    "no job of the pipeline recorded it: its job did not run, or its state was not kept";

pub fn gather(args: GatherArgs, io: &mut Io<'_>) -> Exit {
    let Some(plan) = load_plan_to_inspect(&args.workflow, &args.resolve, io) else {
        return Exit::Invalid;
    };
    let id = args.run_id.as_str();
    if !crate::run::is_run_id(id) {
        let _ = writeln!(
            io.err,
            "error: --run-id {}: not a run id (letters, digits, `.`, `_` and `-`)",
            crate::terminal::clean(id)
        );
        return Exit::Invalid;
    }
    let (_, state_dir) =
        crate::run::directories(args.resolve.workdir.as_deref(), args.state_dir.as_deref());
    // Checked before anything is written into it: no link inside, this user's.
    if let Err(why) = crate::run::state::prepare(&state_dir) {
        let _ = writeln!(io.err, "error: {why}");
        return Exit::Invalid;
    }
    let record = match crate::run::load_merged(&state_dir, id) {
        Ok(Some(record)) => record,
        Ok(None) => {
            let _ = writeln!(
                io.err,
                "error: no job left records of run {id} in `{}`: copy the jobs' state there (their `.runner/runs/` artifacts) first",
                state_dir.join("runs")
            );
            return Exit::Invalid;
        }
        Err(problem) => {
            super::report(io, &[problem]);
            return Exit::Invalid;
        }
    };
    let record = settle(record, &plan);
    let written = crate::out::OutDir::open(&state_dir)
        .and_then(|state| state.sub(&format!("runs/{id}")))
        .map_err(|err| err.to_string())
        .and_then(|dir| record.save_unsealed(&dir));
    if let Err(err) = written {
        let _ = writeln!(io.err, "error: {err}");
        return Exit::Unexpected;
    }
    for (step, entry) in record.in_plan_order() {
        let why = match entry.status {
            StepStatus::Succeeded => String::new(),
            _ => entry
                .error
                .as_deref()
                .map(|e| format!(": {}", crate::terminal::clean(e)))
                .unwrap_or_default(),
        };
        let _ = writeln!(io.out, "  {step}: {}{why}", entry.status.as_str());
    }
    let _ = writeln!(
        io.out,
        "gathered run {id} ({}, {}) into {}",
        record.status.as_str(),
        crate::units::count(record.steps.len() as u64, "step", "steps"),
        state_dir.join("runs").join(id).join("run.json")
    );
    // Gathering succeeded whatever the steps did: the step jobs' own status fails the pipeline.
    Exit::Success
}

/// The merged `record` as one run of `plan`: every step of the plan in it (one no job recorded
/// skipped when a need did not succeed, as one run would have skipped it, else cancelled), its
/// time from the first step's start to the last one's end, and its status settled over every
/// step.
fn settle(mut record: RunRecord, plan: &Plan) -> RunRecord {
    let not_selected = SkipReason::NotSelected.to_string();
    // In plan order: a step's needs are settled before it.
    for step in plan.steps() {
        let entry = record
            .steps
            .entry(step.id.clone())
            .or_insert_with(|| StepRecord {
                agent: step.agent.clone(),
                ..StepRecord::pending(&step.model_label())
            });
        let recorded =
            entry.status.is_finished() && entry.error.as_deref() != Some(not_selected.as_str());
        if recorded {
            continue;
        }
        let unmet: Vec<String> = step
            .needs
            .iter()
            .filter(|need| {
                record.steps.get(*need).is_none_or(|n| {
                    let tolerated = n.status == StepStatus::Failed
                        && plan.step(need).is_some_and(|s| s.continue_on_error);
                    n.status != StepStatus::Succeeded && !tolerated
                })
            })
            .cloned()
            .collect();
        // Invariant: the entry was made above, and nothing since removed it.
        let entry = record
            .steps
            .get_mut(&step.id)
            .expect("the step's entry was just made");
        if unmet.is_empty() {
            entry.status = StepStatus::Cancelled;
            entry.error = Some(NO_RECORD.to_owned());
        } else {
            entry.status = StepStatus::Skipped;
            entry.error = Some(SkipReason::NeedsFailed(unmet).to_string());
        }
    }
    record.needs = plan
        .steps()
        .iter()
        .filter(|s| !s.needs.is_empty())
        .map(|s| (s.id.clone(), s.needs.clone()))
        .collect();
    let span = span(&record);
    if let Some((start, _)) = span {
        record.started_at = start.to_string();
    }
    let elapsed = span.map_or(Duration::from_millis(record.duration_ms), |(start, end)| {
        Duration::from_millis(end.duration_since(start).as_millis().max(0) as u64)
    });
    record.finish(elapsed, false, plan, &BTreeSet::new());
    record
}

/// From the first step's start to the last step's end, when the steps say when they started.
fn span(record: &RunRecord) -> Option<(jiff::Timestamp, jiff::Timestamp)> {
    let times = record.steps.values().filter_map(|s| {
        let start = s.started_at.as_deref()?.parse::<jiff::Timestamp>().ok()?;
        let end = start
            .checked_add(jiff::SignedDuration::from_millis(
                i64::try_from(s.duration_ms).ok()?,
            ))
            .ok()?;
        Some((start, end))
    });
    times.reduce(|(a, b), (c, d)| (a.min(c), b.max(d)))
}
