//! The kernel sandbox `bash` runs in.
//!
//! Every `bash` call runs under a small supervisor: runner starts itself again as
//! `runner __sandbox POLICY bash -c COMMAND`. The supervisor makes itself a child subreaper (so
//! whatever the command starts, even a double-forked daemon, stays below it) and starts
//! `runner __confine POLICY bash -c COMMAND`, which restricts itself with Landlock (what may be
//! written, TCP, signals and abstract sockets outside its domain) and seccomp (no sockets
//! without `network = true`, no metadata changes it may not make), then becomes the command. The
//! supervisor stays outside that domain, so the command cannot signal or trace it. When the
//! command ends, or runner asks it to stop (SIGTERM on a timeout or a cancelled step, or runner
//! itself dying), it kills every process below it before it exits. So nothing a step started
//! outlives its call.
//!
//! What a step's bash may write follows from the step's tools: without `write_file` or
//! `edit_file` it writes nothing but its private temporary directory ([`Mode::ReadOnly`]); with
//! them, also its working directory, its root included, minus the protected paths
//! ([`Mode::Workdir`]): `.git` of the checkout and of every repository nested in it ([`tree`],
//! looked for once when the run starts), the state and cassette directories. In a mount
//! namespace of the call's own these are bound read-only, every folder on the way to them is
//! made a mount point (so none can be renamed away and replaced by a decoy), and every other
//! mount that shows them is bound read-only too (`mounts.rs`, `aliases.rs`). `--sandbox off` runs
//! bash unconfined ([`Mode::Off`]), still under the supervisor.
//!
//! What it may read is an allowlist in the same Landlock ruleset ([`reads`]): the system's
//! directories, the toolchains under the home directory, its working and temporary directories
//! and the step's `read_paths`; never runner's key, which (with the state directory's runs) is
//! covered by an empty folder in the call's namespace. Which paths a step gets is worked out in
//! one place for every kind of step, `crate::run::confinement`.

mod aliases;
mod filter;
mod mounts;
pub mod reads;
mod ruleset;
pub mod supervisor;
pub mod tree;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What a step's `bash` may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Writes nowhere but the step's private temporary directory.
    ReadOnly,
    /// Writes in the working directory (not its `.git` or the state directory) and the
    /// temporary directory.
    Workdir,
    /// No sandbox: `--sandbox off`.
    Off,
}

impl Mode {
    /// What an agent's bash may write, from whether it has a write tool (docs/src/security.md), unless
    /// the sandbox is off for the run.
    pub fn for_tools(sandbox_off: bool, writes: bool) -> Self {
        match (sandbox_off, writes) {
            (true, _) => Mode::Off,
            (false, true) => Mode::Workdir,
            (false, false) => Mode::ReadOnly,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::Workdir => "workdir",
            Mode::Off => "off",
        }
    }
}

/// What one `bash` call may do, handed to the supervisor on its command line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Policy {
    pub mode: Mode,
    /// Whether sockets may be opened.
    pub network: bool,
    /// The step's working directory (canonical).
    pub workdir: PathBuf,
    /// The step's private temporary directory.
    pub tmp: PathBuf,
    /// Paths that stay read-only (canonical): `.git` of the checkout and of nested
    /// repositories, the state and cassette directories, folders not scanned for repositories.
    pub protected: Vec<PathBuf>,
    /// Folders bash sees as empty and read-only when the call has a mount namespace (the state
    /// directory's runs); without one they stay readable.
    pub hidden: Vec<PathBuf>,
    /// Folders bash never reads, namespace or not (runner's key): covered like `hidden`, and
    /// without a namespace the read grants go around them.
    pub secret: Vec<PathBuf>,
    /// Where it may read besides the working and temporary directories ([`reads`]).
    pub read: Vec<PathBuf>,
    /// runner's pid: the supervisor exits at once if its parent is already gone.
    pub parent: i32,
}

/// Marks every descriptor above 2 close-on-exec, so none that runner inherited (a CI runner's
/// pipe, a shell's `7>file`) passes into a child: bash, git, an MCP server.
pub fn close_inherited_fds() {
    use nix::libc;
    // SAFETY: close_range with the CLOEXEC flag only changes descriptor flags.
    let done = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 4u32) } == 0;
    if done {
        return;
    }
    // Kernels before 5.11: each open descriptor by its number.
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: fcntl on a number that may or may not be open; errors are harmless.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

/// The exit code of a supervisor that could not set up the sandbox; its stderr then starts with
/// [`SETUP_FAILED_PREFIX`].
pub const SETUP_FAILED: i32 = 254;
pub const SETUP_FAILED_PREFIX: &str = "runner-sandbox: ";

/// The Landlock ABI version the kernel offers (0: none).
pub fn landlock_abi() -> i32 {
    // SAFETY: landlock_create_ruleset with a NULL attribute, size 0 and the VERSION flag only
    // returns the ABI version (or an error); it touches no memory.
    let version = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    i32::try_from(version).unwrap_or(0).max(0)
}

/// What the kernel can enforce, said once at the start of a run that has `bash` steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Support {
    pub landlock_abi: i32,
}

impl Support {
    pub fn probe() -> Self {
        Self {
            landlock_abi: landlock_abi(),
        }
    }

    pub fn landlock(self) -> bool {
        self.landlock_abi >= 1
    }

    /// The warning to print once, if any, for a run whose bash steps use these modes.
    pub fn warning(self, modes: impl IntoIterator<Item = Mode>) -> Option<String> {
        let modes: Vec<Mode> = modes.into_iter().collect();
        if self.landlock() || modes.iter().all(|m| *m == Mode::Off) {
            return None;
        }
        let mut text = String::from(
            "this kernel has no Landlock (Linux 5.13 or later, enabled at boot), so bash cannot be confined:",
        );
        if modes.contains(&Mode::ReadOnly) {
            text.push_str(" read-only steps get no bash;");
        }
        if modes.contains(&Mode::Workdir) {
            text.push_str(" bash in steps that may write can write anywhere this user can;");
        }
        text.push_str(" `--sandbox off` runs bash unconfined on purpose");
        Some(text)
    }
}
