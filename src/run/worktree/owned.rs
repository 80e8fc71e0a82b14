//! Which worktrees are runner's, and the one way one is removed (docs/src/runs.md "Worktrees").
//!
//! A checkout may ship a `.runner/worktrees/` of its own, with links in it (`evil -> ../../..`)
//! or a whole `worktrees` that is a link: removing "what is in runner's folder" would then remove
//! whatever those links lead to, the user's own checkout and its `.git` included. So a worktree
//! is runner's only when the repository's own worktree list (`git worktree list`) registers it
//! at `<worktrees>/<run>/<step>` exactly, by real path, with no link on the way; and removal
//! walks there by descriptors, each step refusing a link (`O_NOFOLLOW`), then removes the tree
//! with cap-std's `Dir::remove_dir_all` of one name, which removes a link it meets and follows
//! none. Anything else in the folder is left where it is and named.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};

use camino::{Utf8Path, Utf8PathBuf};
use nix::fcntl::{AT_FDCWD, OFlag, openat};
use nix::sys::stat::Mode;
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::Repo;

/// A worktree runner made: registered with git at `<root>/<run>/<step>`, `root` being a folder
/// of runner's worktrees (canonical). Made only by [`Repo::owned_trees`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedTree {
    root: Utf8PathBuf,
    pub run: String,
    pub step: String,
}

impl OwnedTree {
    /// Where it is.
    pub fn path(&self) -> Utf8PathBuf {
        self.root.join(&self.run).join(&self.step)
    }
}

/// What runner's worktree folders hold.
#[derive(Debug, Default)]
pub struct Owned {
    pub trees: Vec<OwnedTree>,
    /// Run folders with nothing in them: removed with the folder alone (`rmdir`).
    pub empty: Vec<(Utf8PathBuf, String)>,
    /// What is there and is not runner's, each with why it is left alone.
    pub refused: Vec<(Utf8PathBuf, String)>,
}

/// Whether `name` could be a folder runner names a worktree by: a step id, or an instance's
/// `X.0` (one path component, never `.` or `..`).
fn is_tree_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !name.contains("..")
}

/// Opens the directory `name` of `dir` (or the path `name`), refusing a link.
fn open_dir_at(dir: Option<&OwnedFd>, name: &str) -> Result<OwnedFd, String> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let opened = match dir {
        Some(dir) => openat(dir.as_fd(), name, flags, Mode::empty()),
        None => openat(AT_FDCWD, name, flags, Mode::empty()),
    };
    opened.map_err(|errno| match errno {
        nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR => {
            format!("`{name}` is a link or not a folder")
        }
        errno => format!("cannot open `{name}`: {}", errno.desc()),
    })
}

impl Repo {
    /// The folders runner keeps worktrees in, as they really are: the state directory's
    /// `worktrees` and the legacy one in the git directory. A folder that is a link is refused
    /// (its contents are not looked at).
    fn tree_roots(&self, owned: &mut Owned) -> Vec<Utf8PathBuf> {
        let mut roots: Vec<Utf8PathBuf> = Vec::new();
        for root in [&self.worktrees, &self.legacy_worktrees] {
            match root.symlink_metadata() {
                Err(_) => continue,
                Ok(meta) if meta.file_type().is_symlink() => owned.refused.push((
                    root.clone(),
                    "the worktrees folder is a link: runner removes nothing through a link".into(),
                )),
                Ok(meta) if !meta.is_dir() => owned
                    .refused
                    .push((root.clone(), "the worktrees folder is not a folder".into())),
                Ok(_) => match root.canonicalize_utf8() {
                    Ok(real) if real == *root && !roots.contains(&real) => roots.push(real),
                    Ok(real) if real == *root => {}
                    _ => owned.refused.push((
                        root.clone(),
                        "a folder on the way to it is a link: runner removes nothing through a link".into(),
                    )),
                },
            }
        }
        roots
    }

    /// runner's worktrees, and what else its folders hold. A tree is runner's when git's
    /// worktree list registers it at `<root>/<run>/<step>` by its real path, `run` a run id
    /// and `step` a step's folder name, and neither is a link.
    pub fn owned_trees(&self) -> Owned {
        let mut owned = Owned::default();
        let roots = self.tree_roots(&mut owned);
        let listed = self
            .main(&["worktree", "list", "--porcelain"])
            .unwrap_or_default();
        // Paths with a newline would split here: they never match the strict shape below.
        let registered: Vec<Utf8PathBuf> = listed
            .lines()
            .filter_map(|line| line.strip_prefix("worktree "))
            .map(Utf8PathBuf::from)
            .collect();
        for root in &roots {
            let Ok(runs) = root.read_dir_utf8() else {
                continue;
            };
            let mut runs: Vec<_> = runs.flatten().collect();
            runs.sort_by(|a, b| a.file_name().cmp(b.file_name()));
            for run in runs {
                let run_path = run.path().to_owned();
                let kind = run.file_type().ok();
                if !kind.is_some_and(|k| k.is_dir()) || !crate::record::is_run_id(run.file_name()) {
                    owned.refused.push((run_path, refusal(kind)));
                    continue;
                }
                let Ok(trees) = run_path.read_dir_utf8() else {
                    continue;
                };
                let mut trees: Vec<_> = trees.flatten().collect();
                if trees.is_empty() {
                    owned.empty.push((root.clone(), run.file_name().to_owned()));
                    continue;
                }
                trees.sort_by(|a, b| a.file_name().cmp(b.file_name()));
                for tree in trees {
                    let kind = tree.file_type().ok();
                    let path = tree.path().to_owned();
                    if !kind.is_some_and(|k| k.is_dir()) || !is_tree_name(tree.file_name()) {
                        owned.refused.push((path, refusal(kind)));
                    } else if !registered.contains(&path) {
                        owned.refused.push((
                            path,
                            "git does not know it as a worktree, so runner did not make it".into(),
                        ));
                    } else {
                        owned.trees.push(OwnedTree {
                            root: root.clone(),
                            run: run.file_name().to_owned(),
                            step: tree.file_name().to_owned(),
                        });
                    }
                }
            }
        }
        owned
    }

    /// The one way runner removes a worktree's files: by descriptors from its root, refusing a
    /// link at every step, the tree itself removed without following any link inside it. The
    /// run's folder goes too when it is left empty; git forgets the tree on its next prune.
    pub(super) fn remove_tree_at(root: &Utf8Path, run: &str, step: &str) -> Result<(), String> {
        if !crate::record::is_run_id(run) || !is_tree_name(step) {
            return Err(format!("`{run}/{step}` is not a worktree runner names"));
        }
        let root_fd = open_dir_at(None, root.as_str())?;
        let run_fd = open_dir_at(Some(&root_fd), run)?;
        let run_dir = cap_std::fs::Dir::from_std_file(File::from(run_fd));
        match run_dir.remove_dir_all(step) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(format!("cannot remove `{root}/{run}/{step}`: {err}")),
        }
        // Only when empty: rmdir fails on a folder with anything left in it, and on a link.
        let _ = unlinkat(root_fd.as_fd(), run, UnlinkatFlags::RemoveDir);
        Ok(())
    }

    /// Removes one of runner's worktrees (see [`Repo::remove_tree_at`]) and git's record of it.
    pub fn remove_owned(&self, tree: &OwnedTree) -> Result<(), String> {
        Self::remove_tree_at(&tree.root, &tree.run, &tree.step)?;
        self.main(&["worktree", "prune"]).map(|_| ())
    }

    /// Removes an empty run folder (and nothing else: `rmdir` of a folder, never through a
    /// link).
    pub fn remove_empty(root: &Utf8Path, run: &str) -> Result<(), String> {
        let root_fd = open_dir_at(None, root.as_str())?;
        unlinkat(root_fd.as_fd(), run, UnlinkatFlags::RemoveDir)
            .map_err(|errno| format!("cannot remove `{root}/{run}`: {}", errno.desc()))
    }
}

fn refusal(kind: Option<std::fs::FileType>) -> String {
    match kind {
        Some(k) if k.is_symlink() => {
            "a link, not a worktree runner made: runner removes nothing through a link".into()
        }
        Some(k) if k.is_dir() => "not a folder runner names (a run id, then a step)".into(),
        _ => "not a worktree runner made".into(),
    }
}
