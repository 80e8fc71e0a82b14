//! The seccomp filters of a confined `bash` call.
//!
//! - Without `network = true`: no sockets at all. Landlock refuses TCP connect and bind, but not
//!   UDP (a DNS query can carry data out), raw sockets, or connecting to a UNIX socket such as a
//!   container engine's. Refusing `socket(2)` and io_uring (which can open sockets on its own)
//!   covers them all; `socketpair(2)`, which only joins two ends inside the sandbox, stays allowed.
//! - Metadata: Landlock does not cover `chmod`, `chown`, `utime`, extended attributes or inode
//!   flags. A read-only bash may change none of them anywhere; a writing bash may `chmod` and
//!   `touch` (builds need both) but never set a setuid or setgid bit, change an owner, an xattr
//!   or an inode flag (`chattr`: the `FS_IOC_SETFLAGS` and `FS_IOC_FSSETXATTR` ioctls and
//!   `file_setattr`), since nothing can confine those to the working directory.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::Mode;
use nix::libc;

/// `setxattrat` and `removexattrat` (Linux 6.13), numbered alike on every architecture runner
/// builds for; the libc crate does not name them yet.
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;
/// `file_setattr` (Linux 6.17): inode flags (`chattr`) by path, without `ioctl`.
const SYS_FILE_SETATTR: i64 = 469;

/// The `ioctl` requests that set inode flags (`chattr +A`, `+d`, `+S`, `+i` …): Landlock does
/// not cover them, and they reach any file the user owns. `FS_IOC_SETFLAGS` (and its 32-bit
/// twin) and `FS_IOC_FSSETXATTR`.
const SET_FLAGS_IOCTLS: [u64; 3] = [0x4008_6602, 0x4004_6602, 0x401c_5820];

/// Installs the filters a call in `mode` needs on the calling thread (its children inherit
/// them). Needs `no_new_privs`, which the Landlock step sets first.
pub fn install(mode: Mode, network: bool) -> Result<(), String> {
    if !network {
        let mut rules = BTreeMap::new();
        // An empty rule list matches the call whatever its arguments.
        for call in [
            libc::SYS_socket,
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
        ] {
            rules.insert(call, Vec::new());
        }
        apply(rules, libc::EACCES)?;
    }
    if mode != Mode::Off {
        apply(metadata_rules(mode)?, libc::EPERM)?;
    }
    Ok(())
}

/// The metadata calls refused in `mode`, with the argument checks that narrow them.
fn metadata_rules(mode: Mode) -> Result<BTreeMap<i64, Vec<SeccompRule>>, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let always = [
        libc::SYS_fchown,
        libc::SYS_fchownat,
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
        SYS_SETXATTRAT,
        SYS_REMOVEXATTRAT,
        SYS_FILE_SETATTR,
    ];
    for call in always {
        rules.insert(call, Vec::new());
    }
    let set_flags: Result<Vec<SeccompRule>, String> = SET_FLAGS_IOCTLS
        .iter()
        .map(|request| {
            let condition =
                SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, *request)
                    .map_err(|e| format!("cannot build the seccomp filter: {e}"))?;
            SeccompRule::new(vec![condition])
                .map_err(|e| format!("cannot build the seccomp filter: {e}"))
        })
        .collect();
    rules.insert(libc::SYS_ioctl, set_flags?);
    #[cfg(target_arch = "x86_64")]
    for call in [libc::SYS_chown, libc::SYS_lchown] {
        rules.insert(call, Vec::new());
    }
    // (call, index of its mode argument)
    let mut chmods = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (libc::SYS_fchmodat2, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    chmods.push((libc::SYS_chmod, 1));
    let mut times = vec![libc::SYS_utimensat];
    #[cfg(target_arch = "x86_64")]
    times.extend([libc::SYS_utime, libc::SYS_utimes, libc::SYS_futimesat]);
    match mode {
        Mode::ReadOnly => {
            for (call, _) in chmods {
                rules.insert(call, Vec::new());
            }
            for call in times {
                rules.insert(call, Vec::new());
            }
        }
        Mode::Workdir | Mode::Off => {
            for (call, arg) in chmods {
                let bit = |bit: u64| -> Result<SeccompRule, String> {
                    let condition = SeccompCondition::new(
                        arg,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::MaskedEq(bit),
                        bit,
                    )
                    .map_err(|e| format!("cannot build the seccomp filter: {e}"))?;
                    SeccompRule::new(vec![condition])
                        .map_err(|e| format!("cannot build the seccomp filter: {e}"))
                };
                // Rules of one call match when any does: setuid or setgid.
                rules.insert(call, vec![bit(0o4000)?, bit(0o2000)?]);
            }
        }
    }
    Ok(rules)
}

fn apply(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<(), String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("seccomp does not support this architecture: {e}"))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch,
    )
    .map_err(|e| format!("cannot build the seccomp filter: {e}"))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e| format!("cannot compile the seccomp filter: {e}"))?;
    seccompiler::apply_filter(&program).map_err(|e| format!("cannot install seccomp: {e}"))
}
