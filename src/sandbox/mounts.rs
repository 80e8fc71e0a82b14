//! Read-only binds of the protected paths inside a writing step's working directory.
//!
//! Landlock only grants, and a grant on a directory covers everything beneath it, so a working
//! directory whose `.git` must stay read-only cannot be granted whole: without more, the
//! directory's root would stay unwritable and `cargo test` could not make `Cargo.lock`, nor
//! pytest `.pytest_cache` (docs/src/security.md). So the confined stage first gives itself a mount
//! namespace of its own (a user namespace too when it is not privileged) and, in this order:
//! - binds every folder on the way from the working directory to a protected path onto itself,
//!   outermost first. A mount point cannot be renamed or removed (`EBUSY`), so a step cannot
//!   carry a protected path away with its folder (`mv vendor/lib vendor/lib2`) and put a decoy
//!   in its place: what was protected when the step started is what stays protected;
//! - binds each protected path read-only onto itself (the state directory inside the working
//!   directory is covered by an empty read-only folder instead, so bash cannot read other steps'
//!   transcripts either): writing into it meets a read-only file system, moving or removing it a
//!   busy mount point;
//! - binds read-only every other place the same file system shows a protected path
//!   ([`super::aliases`]).
//!
//! Then the whole working directory is granted, and once Landlock is enforced and capabilities
//! are dropped nothing can unmount any of it. The cost is two mount calls a protected path and
//! one a folder on the way (see docs/src/performance.md).
//!
//! Where the kernel or the system forbids both kinds of namespace (some container engines,
//! distributions that restrict unprivileged user namespaces), nothing is bound and the ruleset
//! falls back to granting around the protected paths: everything but the folders on the way to
//! them is writable, and those folders' entries cannot be renamed or removed either, since
//! their folder has no write right.

use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::statvfs::{FsFlags, statvfs};

/// In a new mount namespace: pins the folders on the way to each of `read_only` and `emptied`,
/// binds each of `read_only` read-only and covers each of `emptied` with an empty read-only
/// folder, at their aliases too. `Ok(false)`: no namespace could be had and nothing changed.
/// An error after the namespace exists means some mounts may be missing, so the caller must
/// not rely on any of them.
pub fn protect(workdir: &Path, read_only: &[&Path], emptied: &[&Path]) -> Result<bool, String> {
    let all: Vec<&Path> = read_only.iter().chain(emptied).copied().collect();
    if all.is_empty() {
        return Ok(true);
    }
    // A bind follows links, and a link at the root could then be replaced by what the step
    // likes (a `.git` of its own whose hooks the user's git would run): with a protected path
    // that is a link, the root stays unwritable instead.
    if all.iter().any(|p| {
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
    let outer = outermost(&all);
    // Read before anything is mounted here, so only the mounts the call inherited count.
    let aliases = super::aliases::find(workdir, &all)?;
    for dir in on_the_way(workdir, &outer) {
        pin(&dir).map_err(|e| format!("cannot pin `{}`: {e}", dir.display()))?;
    }
    let failed = |path: &Path, e: nix::Error| format!("cannot protect `{}`: {e}", path.display());
    // Read-only binds first, then empty folders (one inside a read-only folder goes on top of
    // it; a read-only path inside an emptied one is covered by it already).
    let emptied = outermost(emptied);
    let binds = outer.iter().filter(|p| !emptied.contains(p));
    for path in binds {
        bind_one(path).map_err(|e| failed(path, e))?;
        for (alias, _) in aliases.iter().filter(|(_, p)| p == path) {
            bind_one(alias).map_err(|e| failed(alias, e))?;
        }
    }
    for path in &emptied {
        hide(path).map_err(|e| failed(path, e))?;
        for (alias, _) in aliases.iter().filter(|(_, p)| p == path) {
            hide(alias).map_err(|e| failed(alias, e))?;
        }
    }
    Ok(true)
}

/// The protected paths that are not inside another one (a read-only folder covers what it
/// holds), outermost first.
fn outermost<'a>(protected: &[&'a Path]) -> Vec<&'a Path> {
    let mut sorted: Vec<&Path> = protected.to_vec();
    sorted.sort();
    sorted.dedup();
    let mut kept: Vec<&Path> = Vec::new();
    for path in sorted {
        if !kept.iter().any(|k| path.starts_with(k)) {
            kept.push(path);
        }
    }
    kept
}

/// Every folder strictly between `workdir` and a protected path, outermost first, once. The
/// working directory itself needs none: its own folder is not granted, so it cannot be moved.
pub(crate) fn on_the_way(workdir: &Path, protected: &[&Path]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for path in protected {
        let Ok(inside) = path.strip_prefix(workdir) else {
            continue;
        };
        let mut dir = workdir.to_path_buf();
        let parts: Vec<_> = inside.components().collect();
        for part in parts.iter().take(parts.len().saturating_sub(1)) {
            dir.push(part);
            dirs.push(dir.clone());
        }
    }
    // Sorted paths put a folder before everything inside it.
    dirs.sort();
    dirs.dedup();
    dirs
}

/// Makes `dir` a mount point of its own (writable as before, with whatever is mounted below
/// it), so it cannot be renamed or removed.
fn pin(dir: &Path) -> nix::Result<()> {
    mount(
        Some(dir),
        dir,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
}

/// Covers `path` with an empty read-only folder (a tmpfs of no size): bash sees nothing of it
/// and can write nothing there.
fn hide(path: &Path) -> nix::Result<()> {
    mount(
        Some("none"),
        path,
        Some("tmpfs"),
        MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("size=4k,nr_inodes=1,mode=0555"),
    )
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
