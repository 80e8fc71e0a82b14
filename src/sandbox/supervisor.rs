//! `runner __sandbox POLICY PROGRAM ARGS...`: the process every `bash` call runs under (see the
//! module above). It is the runner binary itself, so there is nothing else to install.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

use landlock::RulesetStatus;
use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getppid};

use super::{Mode, Policy, SETUP_FAILED, SETUP_FAILED_PREFIX, filter, mounts, ruleset};

/// The first argument that selects the supervisor.
pub const ARG: &str = "__sandbox";

/// The first argument of the confined stage the supervisor starts: it restricts itself and
/// becomes the command, so the supervisor itself stays outside the sandbox (docs/src/security.md).
pub const CONFINE_ARG: &str = "__confine";

/// Rounds of killing before giving up on a process tree that keeps forking.
const MAX_KILL_ROUNDS: usize = 1000;

/// Runs the supervisor (or, with [`CONFINE_ARG`], the confined stage); the result is the
/// process's exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let confine = args.get(1).is_some_and(|a| a == CONFINE_ARG);
    let result = if confine {
        self::confine(args)
    } else {
        supervise(args)
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("{SETUP_FAILED_PREFIX}{message}");
            SETUP_FAILED
        }
    }
}

fn parse(args: Vec<OsString>) -> Result<(Policy, String, OsString, Vec<OsString>), String> {
    let mut args = args.into_iter().skip(2);
    let raw = args
        .next()
        .and_then(|p| p.into_string().ok())
        .ok_or("the sandbox policy is missing or invalid")?;
    let policy: Policy =
        serde_json::from_str(&raw).map_err(|_| "the sandbox policy is missing or invalid")?;
    let program = args.next().ok_or("no command to run")?;
    Ok((policy, raw, program, args.collect()))
}

fn supervise(args: Vec<OsString>) -> Result<i32, String> {
    let (policy, raw, program, rest) = parse(args)?;

    // Stop (and take everything below along) when runner dies, even by SIGKILL.
    prctl::set_pdeathsig(Signal::SIGTERM).map_err(|e| format!("cannot watch runner: {e}"))?;
    if getppid().as_raw() != policy.parent {
        return Ok(128 + Signal::SIGTERM as i32);
    }
    // Orphans of the command (double forks, `setsid`) are re-parented here, not to init.
    prctl::set_child_subreaper(true).map_err(|e| format!("cannot become a subreaper: {e}"))?;
    // Child exits and stop requests are taken with sigwait, so none can slip in between a check
    // and a wait.
    let mut signals = SigSet::empty();
    for signal in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
    ] {
        signals.add(signal);
    }
    signals
        .thread_block()
        .map_err(|e| format!("cannot block signals: {e}"))?;
    // Descriptors runner was given by whoever started it never reach the command.
    super::close_inherited_fds();

    // The command runs in a stage of its own that confines itself: the supervisor is outside
    // its Landlock domain, so the command can neither signal nor trace it (a scoped domain
    // reaches only its own processes).
    let mut command = Command::new("/proc/self/exe");
    command
        .arg(CONFINE_ARG)
        .arg(raw)
        .arg(&program)
        .args(&rest)
        .process_group(0);
    // SAFETY: sigprocmask is async-signal-safe and the closure allocates nothing; the command
    // must start with no signal blocked (`timeout`, `kill` and Ctrl-C work inside it).
    unsafe {
        command.pre_exec(|| {
            SigSet::empty().thread_set_mask()?;
            Ok(())
        });
    }
    let child = command
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", program.to_string_lossy()))?;
    let child = Pid::from_raw(i32::try_from(child.id()).map_err(|_| "pid out of range")?);

    let code = loop {
        if let Some(code) = reap(child) {
            break code;
        }
        match signals.wait() {
            Ok(Signal::SIGCHLD) | Err(_) => {}
            Ok(signal) => {
                kill_tree(child);
                return Ok(128 + signal as i32);
            }
        }
    };
    kill_tree(child);
    Ok(code)
}

/// The confined stage: restricts itself (capabilities, Landlock, seccomp), then becomes the
/// command. It only returns on failure.
fn confine(args: Vec<OsString>) -> Result<i32, String> {
    let (policy, _, program, rest) = parse(args)?;
    if policy.mode != Mode::Off {
        // Mounts need the capabilities that are dropped next, and Landlock forbids them after.
        // A read-only call needs no read-only binds (it writes nowhere), only its empty folders.
        let read_only = match policy.mode {
            Mode::Workdir => ruleset::split_protected(&policy).0,
            _ => Vec::new(),
        };
        let emptied: Vec<&std::path::Path> = policy
            .hidden
            .iter()
            .chain(&policy.secret)
            .map(|p| p.as_path())
            .collect();
        let covered = mounts::protect(&policy.workdir, &read_only, &emptied).unwrap_or(false);
        drop_capabilities();
        let status = ruleset::restrict(&policy, covered)?;
        if status == RulesetStatus::NotEnforced && policy.mode == Mode::ReadOnly {
            return Err(
                "this kernel has no Landlock, so a read-only bash cannot be enforced".into(),
            );
        }
    }
    filter::install(policy.mode, policy.network || policy.mode == Mode::Off)?;
    // runner ignores SIGXFSZ for itself (a full disk is an error it reports); the command gets
    // the default back, as a program started from a shell would.
    // SAFETY: restoring a signal's default disposition installs no handler code.
    unsafe {
        let _ = nix::sys::signal::signal(Signal::SIGXFSZ, nix::sys::signal::SigHandler::SigDfl);
    }
    let err = Command::new(&program).args(&rest).exec();
    Err(format!(
        "cannot start `{}`: {err}",
        program.to_string_lossy()
    ))
}

/// Gives up every capability, for good: a bash run as root would otherwise keep
/// `CAP_SYS_PTRACE` (read runner's memory), `CAP_SYS_ADMIN` and the rest, which Landlock does not
/// cover. Without capabilities root is an ordinary user that happens to own root's files.
fn drop_capabilities() {
    use nix::libc;
    // The last capability number the kernel knows; unknown ones fail harmlessly.
    let last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .unwrap_or(63);
    // SAFETY: prctl and capset with plain integers and a local, fully initialised header and
    // data array; errors (no CAP_SETPCAP as a normal user) leave nothing to drop.
    unsafe {
        for cap in 0..=last {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        // _LINUX_CAPABILITY_VERSION_3: two 32-bit halves.
        let mut header = Header {
            version: 0x2008_0522,
            pid: 0,
        };
        let data = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        libc::syscall(libc::SYS_capset, &mut header, data.as_ptr());
    }
}

/// Reaps every child that has exited; the command's exit code once it has.
fn reap(child: Pid) -> Option<i32> {
    let mut code = None;
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, status)) if pid == child => code = Some(status),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == child => {
                code = Some(128 + signal as i32);
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return code,
            Ok(_) => {}
        }
    }
}

/// Kills every process below the supervisor: the command's group first, then whatever the
/// subreaper collected, round after round until none is left.
fn kill_tree(child: Pid) {
    let _ = killpg(child, Signal::SIGKILL);
    for _ in 0..MAX_KILL_ROUNDS {
        reap(child);
        let living = children();
        if living.is_empty() {
            return;
        }
        for pid in &living {
            let _ = kill(*pid, Signal::SIGKILL);
        }
        for pid in &living {
            // A killed process dies promptly; its own children come up to us for the next round.
            while let Err(Errno::EINTR) = waitpid(*pid, None) {}
        }
    }
}

/// The supervisor's children, from `/proc` (zombies included; they are reaped on the way).
fn children() -> Vec<Pid> {
    let me = std::process::id();
    let listed = std::fs::read_to_string(format!("/proc/{me}/task/{me}/children"));
    let pids: Vec<i32> = match listed {
        Ok(text) => text
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect(),
        // Kernels without CONFIG_PROC_CHILDREN: every process's parent, from its stat line.
        Err(_) => std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| parent_of(*pid) == Some(me as i32))
            .collect(),
    };
    pids.into_iter().map(Pid::from_raw).collect()
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields start after the last `)`.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
