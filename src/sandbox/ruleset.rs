//! The Landlock ruleset of one `bash` call, applied by the confined stage to itself before it
//! becomes the command: what it may read ([`super::reads`], the working and temporary
//! directories), and what it may write.
//!
//! Landlock only grants: a right given on a directory holds for everything beneath it, and
//! nothing can be taken back below. So the working directory cannot be granted whole while its
//! `.git` stays read-only. Instead, each directory on the way down to a protected path gets no
//! write right itself, and every other entry in it gets its own grant. Inside a worktree (whose
//! `.git` is a file runner checks afterwards) or a directory with nothing protected, the whole
//! directory is granted at once.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};
use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode as FileMode;

use super::{Mode, Policy};

/// The newest ABI whose rights runner asks for; older kernels enforce what they know.
const ABI_WANTED: ABI = ABI::V6;

/// How many grants one call may add (a directory with more entries than this on the way to a
/// protected path is refused rather than half-granted).
const MAX_GRANTS: usize = 20_000;

/// Restricts the calling (single-threaded) process. `covered`: the mounts of
/// [`super::mounts::protect`] are in place (the protected paths inside the working directory
/// are read-only mounts, the hidden and secret ones empty folders), so the working directory
/// can be granted whole, its root included.
pub fn restrict(policy: &Policy, covered: bool) -> Result<RulesetStatus, String> {
    let all = AccessFs::from_all(ABI_WANTED);
    let read = AccessFs::from_read(ABI_WANTED);
    let file = AccessFs::from_file(ABI_WANTED);
    let err = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");

    let mut ruleset = Ruleset::default()
        .handle_access(all)
        .map_err(|e| err("cannot handle file access", &e))?
        .scope(Scope::from_all(ABI_WANTED))
        .map_err(|e| err("cannot scope signals and sockets", &e))?;
    if !policy.network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI::V4))
            .map_err(|e| err("cannot handle TCP", &e))?;
    }
    let mut created = ruleset
        .create()
        .map_err(|e| err("cannot create the Landlock ruleset", &e))?;
    // Reads are an allowlist too (super::reads). A secret is never granted: without the empty
    // folder over it, a grant that holds it goes around it instead.
    let mut reads = Vec::new();
    let around: &[PathBuf] = if covered { &[] } else { &policy.secret };
    for path in policy.read.iter().chain(std::iter::once(&policy.workdir)) {
        if policy.secret.iter().any(|s| path.starts_with(s)) {
            continue;
        }
        plan_grants(path, around, &mut reads)?;
    }
    for (path, _) in reads {
        // A place that does not exist here is skipped.
        if let Some(fd) = open_beneath(&path) {
            let access = if is_dir(&fd) { read } else { read & file };
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| err(&format!("cannot grant reading `{}`", path.display()), &e))?;
        }
    }
    // Commands write to /dev/null all the time (`2>/dev/null`).
    created = add(created, Path::new("/dev/null"), file & !AccessFs::Execute)?;
    created = add(created, &policy.tmp, all)?;
    if policy.mode == Mode::Workdir {
        let mut grants = Vec::new();
        let around: Vec<PathBuf> = if covered {
            let (_, outside) = split_protected(policy);
            outside.into_iter().map(Path::to_path_buf).collect()
        } else {
            policy
                .protected
                .iter()
                .chain(&policy.hidden)
                .chain(&policy.secret)
                .cloned()
                .collect()
        };
        plan_grants(&policy.workdir, &around, &mut grants)?;
        for (path, is_dir) in grants {
            let Some(fd) = open_beneath(&path) else {
                continue;
            };
            let access = if is_dir { all } else { file };
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| err(&format!("cannot grant `{}`", path.display()), &e))?;
        }
    }
    let status = created
        .restrict_self()
        .map_err(|e| err("cannot enforce the Landlock ruleset", &e))?;
    Ok(status.ruleset)
}

/// The protected paths strictly inside the working directory (which a read-only bind can
/// cover), and the others.
pub fn split_protected(policy: &Policy) -> (Vec<&Path>, Vec<&Path>) {
    policy
        .protected
        .iter()
        .map(|p| p.as_path())
        .partition(|p| p.starts_with(&policy.workdir) && *p != policy.workdir)
}

fn add(
    created: RulesetCreated,
    path: &Path,
    access: BitFlags<AccessFs>,
) -> Result<RulesetCreated, String> {
    let fd = PathFd::new(path).map_err(|e| format!("cannot open `{}`: {e}", path.display()))?;
    created
        .add_rule(PathBeneath::new(fd, access))
        .map_err(|e| format!("cannot grant `{}`: {e}", path.display()))
}

fn is_dir(fd: &OwnedFd) -> bool {
    nix::sys::stat::fstat(fd).is_ok_and(|st| st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFDIR)
}

/// Opens a path for a rule without following a symlink in its last part (the grant must be on
/// what runner looked at, not on where a link that replaced it points).
fn open_beneath(path: &Path) -> Option<OwnedFd> {
    open(
        path,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        FileMode::empty(),
    )
    .ok()
}

/// The paths to grant under `dir` so that everything is writable but the protected paths: `dir`
/// itself when nothing protected is inside it, otherwise each of its entries (recursing towards
/// the protected paths). Symlinks are never granted: what they point to is granted, or not, where
/// it really is.
pub(crate) fn plan_grants(
    dir: &Path,
    protected: &[std::path::PathBuf],
    out: &mut Vec<(std::path::PathBuf, bool)>,
) -> Result<(), String> {
    if protected.iter().any(|p| p == dir) {
        return Ok(());
    }
    if !protected.iter().any(|p| p.starts_with(dir)) {
        out.push((dir.to_owned(), true));
        return Ok(());
    }
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list `{}`: {e}", dir.display()))?;
    for entry in entries.flatten() {
        if out.len() >= MAX_GRANTS {
            return Err(format!(
                "`{}` holds too many entries to sandbox (more than {MAX_GRANTS})",
                dir.display()
            ));
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            plan_grants(&path, protected, out)?;
        } else if !kind.is_symlink() && !protected.contains(&path) {
            // Files, and FIFOs or sockets, which commands open like files.
            out.push((path, false));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_go_around_protected_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in [".git/hooks", ".runner/runs", "src/deep", "docs"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("README.md"), "").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etc-link")).unwrap();
        let protected = vec![root.join(".git"), root.join(".runner")];
        let mut grants = Vec::new();
        plan_grants(&root, &protected, &mut grants).unwrap();
        grants.sort();
        let rel: Vec<(String, bool)> = grants
            .iter()
            .map(|(p, d)| (p.strip_prefix(&root).unwrap().display().to_string(), *d))
            .collect();
        assert_eq!(
            rel,
            [
                ("README.md".to_owned(), false),
                ("docs".to_owned(), true),
                ("src".to_owned(), true)
            ]
        );
        // Nothing protected inside: the whole directory.
        let mut whole = Vec::new();
        plan_grants(&root.join("src"), &protected, &mut whole).unwrap();
        assert_eq!(whole, [(root.join("src"), true)]);
    }
}
