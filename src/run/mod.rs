//! Running a plan: the scheduler, how steps are executed, their outcomes, the state directory,
//! resume, and worktrees.

pub mod command;
pub mod confinement;
pub mod daily;
pub mod decide;
pub mod executor;
pub mod fanout;
pub mod forecast;
pub mod history;
pub mod keys;
pub mod lock;
pub mod outcome;
pub mod records;
pub mod resume;
pub mod scheduler;
pub mod seal;
pub mod state;
pub mod team;
pub mod walker;
pub mod worktree;

use std::collections::BTreeSet;

use camino::{Utf8Path, Utf8PathBuf};
use tokio_util::sync::CancellationToken;

use crate::error::Problem;
pub use crate::record::{RunRecord, RunStatus, StepRecord, StepStatus, SubagentRecord, new_run_id};
pub use keys::{endpoint_problems, provider_keys};
pub use resume::{check_only, clean_up_after, is_run_id, load_merged, load_resume};
pub use scheduler::execute;

pub struct RunOptions {
    pub workdir: Utf8PathBuf,
    pub state_dir: Utf8PathBuf,
    /// After the first failure, start nothing new and cancel what runs.
    pub fail_fast: bool,
    /// The run whose successful steps may be reused (`--resume`).
    pub resume: Option<RunRecord>,
    /// `--continue`: steps of the resumed run that did not succeed go on from their last turn.
    pub continue_steps: bool,
    /// `--only`: run just these steps.
    pub only: BTreeSet<String>,
    /// `--run-id`: the run's id, instead of a fresh one.
    pub run_id: Option<String>,
    /// Cancelled on SIGINT/SIGTERM.
    pub interrupt: CancellationToken,
    /// The newest `run.json`, for a run that ends at once (a second Ctrl-C) to write as
    /// interrupted.
    pub last_saved: crate::report::record::LastSaved,
}

/// Why a run could not start.
#[derive(Debug)]
pub enum RunError {
    /// Something about the workflow, the flags or the working directory (exit 2).
    Invalid(Problem),
    /// The state directory cannot be written (exit 1).
    Storage(String),
}

/// The state dir's default: `<workdir>/.runner`.
pub fn default_state_dir(workdir: &Utf8Path) -> Utf8PathBuf {
    workdir.join(".runner")
}

/// Where runs are, when none were found where they were looked for.
pub const ELSEWHERE_HINT: &str = "runs are kept in the state directory of the working directory they ran in (`<workdir>/.runner`): pass the run's `--workdir DIR`, or `--state-dir DIR`";

/// `path` made absolute for a message that says where runner looked (`./.runner/runs` says
/// little in a CI log or after a `cd`).
pub fn shown_path(path: &Utf8Path) -> String {
    std::path::absolute(path)
        .ok()
        .and_then(|p| Utf8PathBuf::from_path_buf(p).ok())
        .unwrap_or_else(|| path.to_owned())
        .to_string()
}

/// The working and state directories from `--workdir` and `--state-dir`: the current directory
/// and `<workdir>/.runner` unless given.
pub fn directories(
    workdir: Option<&Utf8Path>,
    state_dir: Option<&Utf8Path>,
) -> (Utf8PathBuf, Utf8PathBuf) {
    let workdir = workdir.map_or_else(|| Utf8PathBuf::from("."), Utf8Path::to_owned);
    let state_dir = state_dir.map_or_else(|| default_state_dir(&workdir), Utf8Path::to_owned);
    // Steps read the working directory and a checkout may ship files in it: runner's key is
    // never read from or made there (docs/src/runs.md "Resume").
    seal::distrust(&workdir);
    (workdir, state_dir)
}
