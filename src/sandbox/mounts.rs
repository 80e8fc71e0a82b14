//! Read-only binds of the protected paths inside a writing step's working directory.
//!
//! Landlock only grants, and a grant on a directory covers everything beneath it, so a working
//! directory whose `.git` must stay read-only cannot be granted whole: without more, the
//! directory's root would stay unwritable and `cargo test` could not make `Cargo.lock`, nor
//! pytest `.pytest_cache` (docs/src/security.md). So the confined stage first gives itself a mount
//! namespace of its own (a user namespace too when it is not privileged) and binds each
//! protected path read-only onto itself. Then the whole working directory is granted: a write
//! into `.git` meets a read-only mount, renaming or removing `.git` meets a mount point (busy),
//! and once Landlock is enforced and capabilities are dropped nothing can unmount it.
//!
//! Where the kernel or the system forbids both kinds of namespace (some container engines,
//! distributions that restrict unprivileged user namespaces), nothing is bound and the ruleset
//! falls back to granting around the protected paths: everything but the directory's root is
//! writable, as before.

use std::path::Path;

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::statvfs::{FsFlags, statvfs};

/// Binds each of `paths` read-only onto itself in a new mount namespace. `Ok(false)`: no
/// namespace could be had and nothing changed. An error after the namespace exists means some
/// binds may be missing, so the caller must not rely on any of them.
pub fn bind_read_only(paths: &[&Path]) -> Result<bool, String> {
    if paths.is_empty() {
        return Ok(true);
    }
    // A bind follows links, and a link at the root could then be replaced by what the step
    // likes (a `.git` of its own whose hooks the user's git would run): with a protected path
    // that is a link, the root stays unwritable instead.
    if paths.iter().any(|p| {
        p.symlink_metadata()
            .map_or(true, |m| m.file_type().is_symlink())
    }) {
        return Ok(false);
    }
    if !new_namespace() {
        return Ok(false);
    }
    // Nothing bound here may reach the namespace runner itself runs in.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("cannot make the mounts private: {e}"))?;
    for path in paths {
        bind_one(path).map_err(|e| format!("cannot protect `{}`: {e}", path.display()))?;
    }
    Ok(true)
}

/// A mount namespace of our own: directly when privileged (root in CI), else inside a user
/// namespace mapping only this user and group to themselves.
fn new_namespace() -> bool {
    if unshare(CloneFlags::CLONE_NEWNS).is_ok() {
        return true;
    }
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    if unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS).is_err() {
        return false;
    }
    // setgroups must be refused before an unprivileged process may write its gid map.
    std::fs::write("/proc/self/setgroups", "deny").is_ok()
        && std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")).is_ok()
        && std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")).is_ok()
}

fn bind_one(path: &Path) -> nix::Result<()> {
    // Not recursive: a mount below `.git` is hidden by the bind, never left writable.
    mount(
        Some(path),
        path,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )?;
    // A remount inside a user namespace must keep the flags the mount already had (they are
    // locked), so they are read back and kept.
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    let had = statvfs(path)?.flags();
    for (fs, ms) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if had.contains(fs) {
            flags |= ms;
        }
    }
    mount(None::<&str>, path, None::<&str>, flags, None::<&str>)
}
