//! The seccomp filter of a `bash` call without `network = true`: no sockets at all.
//!
//! Landlock refuses TCP connect and bind, but not UDP (a DNS query can carry data out), raw
//! sockets, or connecting to a UNIX socket such as a container engine's. Refusing `socket(2)` and
//! io_uring (which can open sockets on its own) covers them all; `socketpair(2)`, which only
//! joins two ends inside the sandbox, stays allowed.

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

/// Installs the filter on the calling thread (its children inherit it). Needs `no_new_privs`,
/// which the Landlock step sets first.
pub fn deny_sockets() -> Result<(), String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("seccomp does not support this architecture: {e}"))?;
    let mut rules = BTreeMap::new();
    // An empty rule list matches the call whatever its arguments.
    for call in [
        nix::libc::SYS_socket,
        nix::libc::SYS_io_uring_setup,
        nix::libc::SYS_io_uring_enter,
        nix::libc::SYS_io_uring_register,
    ] {
        rules.insert(call, Vec::new());
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(nix::libc::EACCES as u32),
        arch,
    )
    .map_err(|e| format!("cannot build the seccomp filter: {e}"))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e| format!("cannot compile the seccomp filter: {e}"))?;
    seccompiler::apply_filter(&program).map_err(|e| format!("cannot install seccomp: {e}"))
}
