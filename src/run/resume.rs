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
/// Only run directories runner could have written are trusted: a well-formed id, a `run.json`
/// that is a regular file within its size limit, names that same id, and started no later than
/// now. (Tools cannot write the state directory at all; this keeps a forged or stray directory,
/// such as `99999999T999999-ffff`, from becoming "latest".)
pub fn load_resume(state_dir: &Utf8Path, which: &str) -> Result<RunRecord, Problem> {
    let runs = state_dir.join("runs");
    if which != "latest" {
        if !is_run_id(which) {
            return Err(Problem::error(format!(
                "--resume {which}: not a run id (run ids look like `20260101T120000123-ab12`)"
            )));
        }
        return read_record(&runs, which)
            .map_err(|why| Problem::error(format!("--resume {which}: {why}")));
    }
    let now = jiff::Timestamp::now();
    let mut not_ours = 0;
    // Newest first: the first this user recorded that did not start in the future.
    let best = list_runs(state_dir).into_iter().find_map(|(record, ours)| {
        if !ours {
            // Only a run this user recorded: a checkout may ship one made to be resumed.
            not_ours += 1;
            return None;
        }
        // A clock a little ahead elsewhere is fine; a run from the future is not.
        let started = record.started_at.parse::<jiff::Timestamp>().ok()?;
        (started <= now + jiff::SignedDuration::from_mins(5)).then_some(record)
    });
    best.ok_or_else(|| match not_ours {
        0 => Problem::error(format!("--resume latest: there are no runs in `{runs}`")),
        n => Problem::error(format!(
            "--resume latest: there are no runs you recorded in `{runs}` ({n} there {} not recorded by you here: a checkout may ship them)",
            if n == 1 { "was" } else { "were" }
        ))
        .help("name one with --resume RUN_ID to use it all the same"),
    })
}

/// Every run recorded in `state_dir` that runner could have written (as `--resume` trusts them),
/// newest first by start time (then id; a start that is not a time last), each with whether
/// this user recorded it.
pub fn list_runs(state_dir: &Utf8Path) -> Vec<(RunRecord, bool)> {
    let runs = state_dir.join("runs");
    let mut found: Vec<(RunRecord, bool)> = runs
        .read_dir_utf8()
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| is_run_id(entry.file_name()) && entry.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|entry| read_record(&runs, entry.file_name()).ok())
        .map(|record| {
            let ours = super::state::sealed_here(&record.run_id, record.recorded_by.as_deref());
            (record, ours)
        })
        .collect();
    // By time, not by text: `12:00:00Z` is later than `11:59:59.5Z`.
    let key = |r: &RunRecord| {
        (
            r.started_at.parse::<jiff::Timestamp>().ok(),
            r.run_id.clone(),
        )
    };
    found.sort_by_cached_key(|(record, _)| std::cmp::Reverse(key(record)));
    found
}

pub use crate::record::is_run_id;

/// The run `id` as jobs on several machines left it, their state directories copied into one:
/// its `run.json` (any job's), with each step's own `steps/<id>/record.json` taking precedence.
/// `None` when there is no such run yet.
pub fn load_merged(state_dir: &Utf8Path, id: &str) -> Result<Option<RunRecord>, Problem> {
    let runs = state_dir.join("runs");
    if !runs.join(id).is_dir() {
        return Ok(None);
    }
    let mut record =
        read_record(&runs, id).map_err(|why| Problem::error(format!("--run-id {id}: {why}")))?;
    let steps = runs.join(id).join("steps");
    let mut instances: Vec<(String, crate::record::StepRecord)> = Vec::new();
    for entry in steps.read_dir_utf8().into_iter().flatten().flatten() {
        let step = entry.file_name().to_owned();
        let path = entry.path().join("record.json");
        if !path.symlink_metadata().is_ok_and(|m| m.is_file()) {
            continue;
        }
        let text = crate::limits::read_text(&path, crate::limits::MAX_RUN_RECORD_BYTES)
            .map_err(|err| Problem::error(format!("--run-id {id}: cannot read `{path}`: {err}")))?;
        let step_record = serde_json::from_str(&text).map_err(|err| {
            Problem::error(format!(
                "--run-id {id}: `{path}` is not a step record: {err}"
            ))
        })?;
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
        let Some(entry) = record.steps.get_mut(&parent) else {
            continue;
        };
        let mut list = std::mem::take(&mut entry.instances);
        match list.iter_mut().find(|i| i.instance == instance.instance) {
            Some(slot) => *slot = instance,
            None => list.push(instance),
        }
        let duration = entry.duration_ms;
        entry.settle_fan_out(list, duration);
    }
    Ok(Some(record))
}

fn read_record(runs: &Utf8Path, id: &str) -> Result<RunRecord, String> {
    let path = runs.join(id).join("run.json");
    match path.symlink_metadata() {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Err(format!("`{path}` is not a regular file")),
        Err(err) => return Err(format!("cannot read `{path}`: {err}")),
    }
    let text = crate::limits::read_text(&path, crate::limits::MAX_RUN_RECORD_BYTES)
        .map_err(|err| format!("cannot read `{path}`: {err}"))?;
    let record: RunRecord = serde_json::from_str(&text)
        .map_err(|err| format!("`{path}` is not a run record: {err}"))?;
    if record.run_id != id {
        return Err(format!(
            "`{path}` belongs to run `{}`, not `{id}`",
            record.run_id
        ));
    }
    Ok(record)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_listed_by_time_not_by_text() {
        let dir = tempfile::tempdir().unwrap();
        let state = Utf8Path::from_path(dir.path()).unwrap();
        // As text, `...:00Z` sorts after `...:00.5Z`; as times it is half a second earlier.
        for (id, started) in [
            ("r-whole", "2026-12-06T12:00:00Z"),
            ("r-half", "2026-12-06T12:00:00.5Z"),
            ("r-bad", "not a time"),
        ] {
            let record = serde_json::json!({
                "run_id": id, "workflow": "w", "status": "succeeded",
                "started_at": started, "duration_ms": 0, "steps": {},
            });
            std::fs::create_dir_all(state.join("runs").join(id)).unwrap();
            std::fs::write(
                state.join("runs").join(id).join("run.json"),
                record.to_string(),
            )
            .unwrap();
        }
        let ids: Vec<String> = list_runs(state)
            .into_iter()
            .map(|(r, _)| r.run_id)
            .collect();
        assert_eq!(ids, ["r-half", "r-whole", "r-bad"]);
    }
}
