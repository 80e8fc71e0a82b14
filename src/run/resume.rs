//! `--resume` and `--only`: which earlier run to trust, what it left behind, and whether the
//! selected steps have what they need.

use std::collections::BTreeSet;

use camino::Utf8Path;

use super::worktree::Repo;
use crate::error::Problem;
use crate::plan::Plan;
use crate::record::{RunRecord, StepStatus};

/// Loads the run to resume: a run id, or `latest`.
///
/// Only run directories runner could have written are trusted (`records.rs`: a well-formed id,
/// a `run.json` that is a regular file within its limits, names that same id, holds only ids
/// as ids). `latest` is the newest run this user recorded (its seal is this user's) that did
/// not start in the future: a checkout may ship runs made to be resumed. A run named by id is
/// taken as named.
pub fn load_resume(state_dir: &Utf8Path, which: &str) -> Result<RunRecord, Problem> {
    let runs = state_dir.join("runs");
    if which != "latest" {
        if !is_run_id(which) {
            return Err(Problem::error(format!(
                "--resume {which}: not a run id (run ids look like `20260101T120000123-ab12`)"
            )));
        }
        return super::records::read(state_dir, which)
            .map_err(|why| Problem::error(format!("--resume {which}: {why}")));
    }
    let now = jiff::Timestamp::now();
    let listing = super::records::list(state_dir);
    let not_ours = listing.runs.iter().filter(|run| !run.ours).count();
    // Newest first: the first this user recorded that did not start in the future (a clock a
    // little ahead elsewhere is fine).
    let best = listing.runs.iter().find(|run| {
        run.ours
            && run
                .started_at
                .parse::<jiff::Timestamp>()
                .is_ok_and(|started| started <= now + jiff::SignedDuration::from_mins(5))
    });
    if let Some(best) = best {
        let record = super::records::read(state_dir, &best.run_id)
            .map_err(|why| Problem::error(format!("--resume latest: {why}")))?;
        if !record.recorded_here {
            return Err(Problem::error(format!(
                "--resume latest: run {} changed as it was read",
                best.run_id
            )));
        }
        return Ok(record);
    }
    let among = if listing.not_read > 0 {
        format!(
            " among the newest {} (by when they were written; {} older not looked at)",
            crate::limits::MAX_RUNS_READ,
            listing.not_read
        )
    } else {
        String::new()
    };
    let problem = match not_ours {
        0 if listing.not_read == 0 => {
            return Err(Problem::error(format!(
                "--resume latest: there are no runs in `{}`",
                super::shown_path(&runs)
            ))
            .help(super::ELSEWHERE_HINT));
        }
        n => Problem::error(format!(
            "--resume latest: there are no runs you recorded in `{runs}`{among} ({n} there {} not recorded by you here, or changed since: a checkout may ship them)",
            if n == 1 { "was" } else { "were" }
        )),
    };
    let help = match super::seal::key_problem() {
        Some(why) => format!("runs cannot be sealed or checked here: {why}"),
        None => "name one with --resume RUN_ID to use it all the same".into(),
    };
    Err(problem.help(help))
}

pub use crate::record::is_run_id;

/// The run `id` as jobs on several machines left it, their state directories copied into one:
/// its `run.json` (any job's), with each step's own `steps/<id>/record.json` taking precedence.
/// `None` when there is no such run yet. Another machine's records carry no seal of this user's:
/// the run is taken as `--run-id` names it.
pub fn load_merged(state_dir: &Utf8Path, id: &str) -> Result<Option<RunRecord>, Problem> {
    let runs = state_dir.join("runs");
    if !runs.join(id).is_dir() {
        return Ok(None);
    }
    let fail = |why: String| Problem::error(format!("--run-id {id}: {why}"));
    let mut record = super::records::read(state_dir, id).map_err(fail)?;
    let steps = runs.join(id).join("steps");
    let mut instances: Vec<(String, crate::record::StepRecord)> = Vec::new();
    for entry in steps.read_dir_utf8().into_iter().flatten().flatten() {
        let step = entry.file_name().to_owned();
        let path = entry.path().join("record.json");
        if !path.symlink_metadata().is_ok_and(|m| m.is_file()) {
            continue;
        }
        let step_record =
            super::records::read_json(state_dir, id, &["steps", &step, "record.json"])
                .map_err(fail)?;
        record.recorded_here = false;
        match crate::plan::verified::split_instance(&step) {
            Some((parent, _)) => instances.push((parent.to_owned(), step_record)),
            None => {
                record.steps.insert(step, step_record);
            }
        }
    }
    // Instances another job ran (a matrix job per instance) join their step's list, and the
    // step is settled from them.
    for (parent, instance) in instances {
        // The job whose `run.json` came last may have left the step out (`--only`): the
        // instances still make it up.
        let entry = record
            .steps
            .entry(parent)
            .or_insert_with(|| crate::record::StepRecord::pending(&instance.model));
        let mut list = std::mem::take(&mut entry.instances);
        match list.iter_mut().find(|i| i.instance == instance.instance) {
            Some(slot) => *slot = instance,
            None => list.push(instance),
        }
        // A job's record holds only its own instances (`--only X[1]`): the merged list is put
        // back in list order, which numbered instances carry in their ids.
        let index = |r: &crate::record::StepRecord| {
            r.instance
                .as_deref()
                .and_then(crate::plan::verified::split_instance)
                .and_then(|(_, k)| k.parse::<usize>().ok())
        };
        if list.iter().all(|r| index(r).is_some()) {
            list.sort_by_key(|r| index(r));
        }
        let duration = entry.duration_ms;
        entry.settle_fan_out(list, duration);
    }
    record
        .check_ids()
        .map_err(|why| fail(format!("`{steps}` holds what runner did not write: {why}")))?;
    Ok(Some(record))
}

/// Removes the worktrees and empty branches a killed run left (its steps that did not succeed).
/// Returns notes for the user.
pub fn clean_up_after(
    workdir: &Utf8Path,
    state_dir: &Utf8Path,
    resumed: &RunRecord,
) -> Vec<String> {
    let Some(repo) = Repo::discover(workdir) else {
        return Vec::new();
    };
    let repo = repo.keeping_worktrees_in(state_dir);
    let mut succeeded: Vec<String> = resumed
        .steps
        .iter()
        .filter(|(_, s)| s.status == StepStatus::Succeeded)
        .map(|(id, _)| id.clone())
        .collect();
    // A fan-out instance's worktree and branch are `X.0`, `X.1`, ...
    for (id, step) in &resumed.steps {
        for (k, instance) in step.instances.iter().enumerate() {
            if instance.status == StepStatus::Succeeded {
                succeeded.push(format!("{id}.{k}"));
            }
        }
    }
    repo.clean_up_run(&resumed.run_id, &succeeded)
        .into_iter()
        .map(|what| format!("{what} (left by run {})", resumed.run_id))
        .collect()
}

/// Checks `--only` against the plan and the resumed run: every selected step exists and its
/// needs succeeded in the resumed run. In the same run (`--run-id` of jobs that ran the needs),
/// a need that finished any way will do: the step is then skipped as it would be in one run.
pub fn check_only(
    plan: &Plan,
    only: &BTreeSet<String>,
    resume: Option<&RunRecord>,
    same_run: bool,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    for id in only {
        // `X[1]`: one instance of a fan-out step.
        let (id, instance) = match crate::plan::verified::split_instance(id) {
            Some((step, _)) => (&step.to_owned(), Some(id)),
            None => (id, None),
        };
        if let (Some(instance), Some(step)) = (instance, plan.step(id))
            && step.for_each.is_none()
        {
            problems.push(Problem::error(format!(
                "--only {instance}: step `{id}` has no `for_each`, so it has no instances"
            )));
            continue;
        }
        let Some(step) = plan.steps().iter().find(|s| &s.id == id) else {
            let help = crate::error::did_you_mean(id, plan.steps().iter().map(|s| s.id.as_str()));
            problems.push(
                Problem::error(format!("--only {id}: there is no step `{id}`")).with_help(help),
            );
            continue;
        };
        for need in &step.needs {
            if only.contains(need) {
                continue;
            }
            let done = resume.and_then(|r| r.steps.get(need)).is_some_and(|s| {
                s.status == StepStatus::Succeeded || (same_run && s.status.is_finished())
            });
            if !done {
                problems.push(
                    Problem::error(format!("--only {id}: its need `{need}` has no result to reuse"))
                        .help("pass --resume RUN_ID (or latest) with a run where it succeeded, or the --run-id of the jobs that ran it (their state directories copied here), or add it with --only"),
                );
            }
        }
    }
    problems
}
