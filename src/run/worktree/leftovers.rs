//! What `runner clean` sees of runner's in a repository: its worktrees and `runner/*` branches,
//! each with the work removing it would lose (docs/src/runs.md "Worktrees"), and what its
//! folders hold that is not its own (left alone, and named).

use camino::{Utf8Path, Utf8PathBuf};

use super::owned::OwnedTree;
use super::{Repo, absolute, git};

impl Repo {
    /// What work a worktree runner made holds, if any: changes git sees, or files in a folder
    /// whose `.git` is gone or was changed. An empty folder holds none.
    pub(super) fn tree_work(&self, path: &Utf8Path) -> Option<String> {
        let mut entries = path.read_dir_utf8().ok()?;
        entries.next()?.ok()?;
        // A `.git` a step replaced by a link (to `/dev/zero`, to another repository) is not
        // read: it is not the one runner made.
        let dot_git = path.join(".git");
        let git_dir = dot_git
            .symlink_metadata()
            .ok()
            .filter(|m| m.is_file())
            .and_then(|_| crate::limits::read_text(&dot_git, 4096).ok())
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

    /// The work that run `run_id` left uncommitted in the worktree of `tree` (a step, or an
    /// instance's `X.0`), with where it is: what `--continue` cannot go on from, since it
    /// starts from that step's branch (docs/src/runs.md "Resume").
    pub fn uncommitted_work(&self, run_id: &str, tree: &str) -> Option<(Utf8PathBuf, String)> {
        self.owned_trees()
            .trees
            .into_iter()
            .find(|t| t.run == run_id && t.step == tree)
            .and_then(|t| self.tree_work(&t.path()).map(|work| (t.path(), work)))
    }

    /// The branches git has checked out in a worktree, each with where: git refuses to delete
    /// one, and the work in that worktree goes on from it.
    pub fn checked_out(&self) -> std::collections::BTreeMap<String, Utf8PathBuf> {
        let listed = self
            .main(&["worktree", "list", "--porcelain"])
            .unwrap_or_default();
        let mut found = std::collections::BTreeMap::new();
        let mut path = None;
        for line in listed.lines() {
            if let Some(tree) = line.strip_prefix("worktree ") {
                path = Some(Utf8PathBuf::from(tree));
            } else if let (Some(branch), Some(tree)) =
                (line.strip_prefix("branch refs/heads/"), &path)
            {
                found.insert(branch.to_owned(), tree.clone());
            }
        }
        found
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
    /// [`Repo::worktrees`], registered with git: see [`Repo::owned_trees`]), empty run folders,
    /// its `runner/<run>/<step>` branches, each with the work it holds, and what is in its
    /// folders that is not its own. Worktrees first: a branch checked out in one goes after it.
    pub fn leftovers(&self) -> Vec<Leftover> {
        let owned = self.owned_trees();
        let mut found: Vec<Leftover> = owned
            .refused
            .into_iter()
            .map(|(path, why)| Leftover {
                run_id: String::new(),
                what: LeftoverKind::NotRunners(path),
                work: Some(why),
            })
            .collect();
        for tree in owned.trees {
            found.push(Leftover {
                work: self.tree_work(&tree.path()),
                run_id: tree.run.clone(),
                what: LeftoverKind::Worktree(tree),
            });
        }
        for (root, run) in owned.empty {
            found.push(Leftover {
                run_id: run.clone(),
                what: LeftoverKind::EmptyFolder(root, run),
                work: None,
            });
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

    /// Removes one thing [`Repo::leftovers`] found: a worktree's files (by descriptors, no
    /// link followed) and git's record of it, an empty run folder, or a branch. What is not
    /// runner's is never removed.
    pub fn remove_leftover(&self, leftover: &Leftover) -> Result<(), String> {
        match &leftover.what {
            LeftoverKind::Worktree(tree) => self.remove_owned(tree),
            LeftoverKind::EmptyFolder(root, run) => Repo::remove_empty(root, run),
            LeftoverKind::Branch(branch) => {
                self.main(&["branch", "-D", "--quiet", branch]).map(|_| ())
            }
            LeftoverKind::NotRunners(path) => Err(format!("`{path}` is not runner's")),
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
    Worktree(OwnedTree),
    /// A run folder of runner's worktrees with nothing in it: the folder, and the run.
    EmptyFolder(Utf8PathBuf, String),
    Branch(String),
    /// Something in runner's worktree folders that runner did not make (a link a checkout
    /// shipped, a folder git does not know): never removed; `work` says why.
    NotRunners(Utf8PathBuf),
}

impl std::fmt::Display for Leftover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.what {
            LeftoverKind::Worktree(tree) => write!(f, "worktree {}", tree.path()),
            LeftoverKind::EmptyFolder(root, run) => write!(f, "empty folder {root}/{run}"),
            LeftoverKind::Branch(branch) => write!(f, "branch {branch}"),
            LeftoverKind::NotRunners(path) => write!(f, "{path}"),
        }
    }
}
