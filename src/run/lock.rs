//! Whether a run is still going. The runner running it holds an exclusive lock on
//! `<run dir>/run.lock` until it ends, and the kernel lets go of it when the process dies (even
//! by `kill -9`), so `runner clean` leaves a live run's worktrees alone without trusting a
//! status a killed run never updated.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt as _;

use camino::Utf8Path;
use nix::fcntl::{Flock, FlockArg};

const LOCK_FILE: &str = "run.lock";

/// Held for as long as the run goes; dropping it lets go.
pub struct Running {
    _lock: Option<Flock<File>>,
}

/// Takes the run's lock (best effort: a state directory that cannot be written is reported by
/// the run record's own writes).
pub fn hold(run_dir: &Utf8Path) -> Running {
    // Never through a link, and never blocking on a FIFO a checkout shipped in its place.
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(run_dir.join(LOCK_FILE));
    Running {
        _lock: file
            .ok()
            .and_then(|f| Flock::lock(f, FlockArg::LockExclusiveNonblock).ok()),
    }
}

/// Whether a runner holds the lock of the run in `run_dir` now.
pub fn is_running(run_dir: &Utf8Path) -> bool {
    let Ok(file) = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(run_dir.join(LOCK_FILE))
    else {
        return false;
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    Flock::lock(file, FlockArg::LockSharedNonblock).is_err()
}

/// The status a run shows: one whose record still says `running` while no runner holds its lock
/// ended without saying so (killed, or a power cut), and shows as `interrupted`.
pub fn shown_status(
    run_dir: &Utf8Path,
    recorded: crate::record::RunStatus,
) -> crate::record::RunStatus {
    use crate::record::RunStatus;
    match recorded {
        RunStatus::Running if !is_running(run_dir) => RunStatus::Interrupted,
        status => status,
    }
}
