//! The repositories nested in a working directory, found once when a run starts: every `.git`
//! (a vendored clone's directory, a submodule's file) however deep, and the folder of each
//! submodule the index registers but the tree does not populate (a `.git` a step made there
//! would be entered, and its `core.fsmonitor` run, by the user's next `git status`).
//!
//! A step cannot invalidate this list: what it protects is bound read-only and every folder on
//! the way to it is a mount point for the call ([`super::mounts`]), so nothing can be moved away
//! or put in its place, and the index that registers submodules is inside the read-only `.git`.
//! A tree too large to look through whole is not skipped without a word: the folders not
//! looked through are read-only for the run's steps, and [`Tree::note`] says which.

use std::path::{Path, PathBuf};

/// Entries looked through at most (a large monorepo with its `node_modules` is a few hundred
/// thousand; reading a million takes about a second).
pub const MAX_SCAN: usize = 1_000_000;

/// Folders left unscanned that are named one by one; past this their parents stand for them.
const MAX_UNSCANNED: usize = 64;

/// What [`Tree::scan`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    /// Nested `.git` directories and files, and registered submodules' empty folders.
    pub protected: Vec<PathBuf>,
    /// Folders not looked through (read-only for the run's steps).
    pub unscanned: Vec<PathBuf>,
}

impl Tree {
    /// Looks through `root` (canonical) for nested repositories, not entering links, `.git`s or
    /// the paths in `skip`, within `limit` entries. `gitlinks` are the submodule paths the
    /// index registers (relative to `root`).
    pub fn scan(root: &Path, skip: &[PathBuf], gitlinks: &[PathBuf], limit: usize) -> Tree {
        let mut tree = Tree::default();
        let mut stack = vec![root.to_owned()];
        let mut seen = 0usize;
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut entries = entries.flatten();
            for entry in entries.by_ref() {
                seen += 1;
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                let path = entry.path();
                if entry.file_name() == ".git" {
                    if dir != root {
                        tree.protected
                            .push(git_to_protect(&dir, path, kind.is_symlink()));
                    }
                    continue;
                }
                if kind.is_dir() && !skip.contains(&path) {
                    stack.push(path);
                }
                if seen >= limit {
                    break;
                }
            }
            if seen >= limit {
                // What is left of this folder (its own `.git` protected as found), and every
                // folder still to visit.
                for entry in entries {
                    let path = entry.path();
                    if entry.file_name() == ".git" {
                        if dir != root {
                            let link = entry.file_type().map_or(true, |k| k.is_symlink());
                            tree.protected.push(git_to_protect(&dir, path, link));
                        }
                    } else if entry.file_type().is_ok_and(|k| k.is_dir()) && !skip.contains(&path) {
                        stack.push(path);
                    }
                }
                tree.unscanned = coarsen(root, stack);
                break;
            }
        }
        for link in gitlinks {
            let path = root.join(link);
            // A populated submodule's `.git` was found above; an empty folder is protected whole.
            if path.is_dir() && !path.join(".git").exists() && !path.is_symlink() {
                tree.protected.push(path);
            }
        }
        tree.protected.sort();
        tree.protected.dedup();
        tree
    }

    /// Said to the user and in every bash result when part of the tree was not looked through.
    pub fn note(&self) -> Option<String> {
        if self.unscanned.is_empty() {
            return None;
        }
        let names: Vec<String> = self
            .unscanned
            .iter()
            .take(5)
            .map(|p| format!("`{}`", p.display()))
            .collect();
        let more = self.unscanned.len().saturating_sub(names.len());
        Some(format!(
            "the working directory has more than {MAX_SCAN} entries, so runner did not look for nested repositories in {}{}: they are read-only for this run's steps",
            names.join(", "),
            if more > 0 {
                format!(" and {more} more folders")
            } else {
                String::new()
            }
        ))
    }
}

/// What stands for a nested `.git` found at `path` in `dir`: itself, or when it is a link (which
/// a read-only bind would follow, leaving the link free to be replaced) its whole folder.
fn git_to_protect(dir: &Path, path: PathBuf, link: bool) -> PathBuf {
    if link { dir.to_path_buf() } else { path }
}

/// At most [`MAX_UNSCANNED`] folders covering `dirs`: each folder's parent stands for its
/// children until few enough are left (a parent is read-only whole then, which is stricter).
fn coarsen(root: &Path, mut dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    loop {
        dirs.sort();
        dirs.dedup();
        // A folder inside another listed one is covered by it.
        let mut kept: Vec<PathBuf> = Vec::new();
        for dir in dirs {
            if !kept.iter().any(|k| dir.starts_with(k)) {
                kept.push(dir);
            }
        }
        if kept.len() <= MAX_UNSCANNED {
            return kept;
        }
        let deepest = kept
            .iter()
            .map(|d| d.components().count())
            .max()
            .unwrap_or(0);
        let coarser: Vec<PathBuf> = kept
            .iter()
            .map(|d| match d.parent() {
                Some(parent) if d.components().count() == deepest && parent != root => {
                    parent.to_owned()
                }
                _ => d.clone(),
            })
            .collect();
        if coarser == kept {
            // Nothing left to merge but the root's own folders.
            return kept;
        }
        dirs = coarser;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree_with(dirs: &[&str]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in dirs {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        (dir, root)
    }

    #[test]
    fn nested_repositories_and_empty_submodules_are_found() {
        let (_dir, root) = tree_with(&[
            ".git",
            "a/b/c/.git/hooks",
            "sub",
            "populated",
            "skip/x/.git",
        ]);
        std::fs::write(root.join("populated/.git"), "gitdir: ../.git/modules/p\n").unwrap();
        std::fs::create_dir_all(root.join("linked")).unwrap();
        std::os::unix::fs::symlink("/elsewhere", root.join("linked/.git")).unwrap();
        let tree = Tree::scan(
            &root,
            &[root.join("skip")],
            &[
                PathBuf::from("sub"),
                PathBuf::from("populated"),
                PathBuf::from("missing"),
            ],
            MAX_SCAN,
        );
        assert_eq!(
            tree.protected,
            [
                root.join("a/b/c/.git"),
                root.join("linked"),
                root.join("populated/.git"),
                root.join("sub")
            ]
        );
        assert!(tree.unscanned.is_empty() && tree.note().is_none());
    }

    #[test]
    fn what_is_not_looked_through_is_named_and_nothing_is_missed() {
        let mut dirs: Vec<String> = (0..200).map(|i| format!("big/d{i}/e/.git")).collect();
        dirs.push("small/.git".into());
        let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
        let (_dir, root) = tree_with(&dirs);
        let tree = Tree::scan(&root, &[], &[], 50);
        assert!(!tree.unscanned.is_empty() && tree.unscanned.len() <= MAX_UNSCANNED);
        // Every nested repository is protected, or inside a folder that is read-only whole.
        for d in &dirs {
            let git = root.join(d);
            assert!(
                tree.protected.contains(&git) || tree.unscanned.iter().any(|u| git.starts_with(u)),
                "{d} is neither protected nor unscanned: {tree:?}"
            );
        }
        let note = tree.note().unwrap();
        assert!(note.contains("read-only"), "{note}");
    }
}
