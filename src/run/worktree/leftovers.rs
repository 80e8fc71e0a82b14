//! What `runner clean` sees of runner's in a repository: its worktrees and `runner/*` branches,
//! each with the work removing it would lose (docs/src/runs.md "Worktrees").

use std::collections::BTreeSet;

use camino::{Utf8Path, Utf8PathBuf};

use super::{Repo, absolute, git};

impl Repo {
    /// What work a worktree runner made holds, if any: changes git sees, or files in a folder
    /// whose `.git` is gone or was changed. An empty folder holds none.
    pub(super) fn tree_work(&self, path: &Utf8Path) -> Option<String> {
        let mut entries = path.read_dir_utf8().ok()?;
        entries.next()?.ok()?;
        let git_dir = std::fs::read_to_string(path.join(".git"))
            .ok()
            .and_then(|text| text.strip_prefix("gitdir:").map(|d| absolute(path, d)))
            .filter(|d| d.starts_with(&self.admin));
        let Some(git_dir) = git_dir else {
            return Some("files and no `.git` runner made".into());
        };
        match git(
            path,
            Some((&git_dir, path)),
            &["status", "--porcelain", "--ignore-submodules=all"],
        ) {
            Ok(status) if status.trim().is_empty() => None,
            Ok(status) => Some(format!(
                "{} uncommitted change{}",
                status.lines().count(),
                if status.lines().count() == 1 { "" } else { "s" }
            )),
            Err(_) => Some("a tree git cannot read".into()),
        }
    }

    /// What a branch holds that would be lost with it: commits that neither the checkout's HEAD
    /// nor any remote-tracking branch has.
    fn branch_work(&self, branch: &str) -> Option<String> {
        let own: u64 = self
            .main(&["rev-list", "--count", &format!("HEAD..{branch}")])
            .ok()?
            .trim()
            .parse()
            .ok()?;
        if own == 0 {
            return None;
        }
        let unpushed: u64 = self
            .main(&["rev-list", "--count", branch, "--not", "HEAD", "--remotes"])
            .ok()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(own);
        (unpushed > 0).then(|| {
            format!(
                "{unpushed} commit{} not pushed anywhere",
                if unpushed == 1 { "" } else { "s" }
            )
        })
    }

    /// Everything of runner's in this repository: its worktrees (`<run>/<step>` under
    /// [`Repo::worktrees`]) and its `runner/<run>/<step>` branches, each with the work it
    /// holds. Worktrees first: a branch checked out in one goes after it.
    pub fn leftovers(&self) -> Vec<Leftover> {
        let mut found = Vec::new();
        let mut runs: Vec<Utf8PathBuf> = [&self.worktrees, &self.legacy_worktrees]
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .flat_map(|dir| dir.read_dir_utf8().into_iter().flatten().flatten())
            .map(|e| e.path().to_owned())
            .collect();
        runs.sort();
        for run in runs {
            let run_id = run.file_name().unwrap_or_default().to_owned();
            let mut trees: Vec<Utf8PathBuf> = run
                .read_dir_utf8()
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path().to_owned())
                .collect();
            trees.sort();
            for tree in trees {
                found.push(Leftover {
                    work: self.tree_work(&tree),
                    run_id: run_id.clone(),
                    what: LeftoverKind::Worktree(tree),
                });
            }
            if found.iter().all(|l| l.run_id != run_id) {
                // An empty run folder.
                found.push(Leftover {
                    run_id,
                    what: LeftoverKind::Worktree(run),
                    work: None,
                });
            }
        }
        let branches = self
            .main(&[
                "for-each-ref",
                "--format=%(refname:short)",
                "refs/heads/runner/",
            ])
            .unwrap_or_default();
        for branch in branches.lines().map(str::trim).filter(|b| !b.is_empty()) {
            let run_id = branch
                .strip_prefix("runner/")
                .and_then(|rest| rest.split('/').next())
                .unwrap_or_default()
                .to_owned();
            found.push(Leftover {
                work: self.branch_work(branch),
                run_id,
                what: LeftoverKind::Branch(branch.to_owned()),
            });
        }
        found
    }

    /// Removes one thing [`Repo::leftovers`] found: a worktree's files (no link followed) and
    /// git's record of it, or a branch.
    pub fn remove_leftover(&self, leftover: &Leftover) -> Result<(), String> {
        match &leftover.what {
            LeftoverKind::Worktree(path) => {
                std::fs::remove_dir_all(path)
                    .map_err(|e| format!("cannot remove `{path}`: {e}"))?;
                if let Some(run) = path
                    .parent()
                    .filter(|p| *p != self.worktrees && *p != self.legacy_worktrees)
                {
                    // The run's folder goes with its last worktree.
                    let _ = std::fs::remove_dir(run);
                }
                self.main(&["worktree", "prune"]).map(|_| ())
            }
            LeftoverKind::Branch(branch) => {
                self.main(&["branch", "-D", "--quiet", branch]).map(|_| ())
            }
        }
    }
}

/// A worktree or branch runner made, as `runner clean` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    pub run_id: String,
    pub what: LeftoverKind,
    /// The work removing it would lose, when it would.
    pub work: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftoverKind {
    Worktree(Utf8PathBuf),
    Branch(String),
}

impl std::fmt::Display for Leftover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.what {
            LeftoverKind::Worktree(path) => write!(f, "worktree {path}"),
            LeftoverKind::Branch(branch) => write!(f, "branch {branch}"),
        }
    }
}
