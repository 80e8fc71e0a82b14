//! `isolation = "worktree"`: a step works in its own `git worktree` on branch
//! `runner/<run_id>/<step>`, made from HEAD. When it ends its changes are committed on that
//! branch and the worktree is removed (the branch too, when nothing changed).

use std::process::Command;

use camino::{Utf8Path, Utf8PathBuf};

/// The repository a working directory belongs to.
#[derive(Debug, Clone)]
pub struct Repo {
    /// The top of the main checkout.
    pub top: Utf8PathBuf,
    /// The working directory, relative to `top` (steps work in the same place in the worktree).
    pub prefix: Utf8PathBuf,
    /// Where runner keeps its worktrees: inside the git directory, out of every checkout.
    pub worktrees: Utf8PathBuf,
}

#[derive(Debug, Clone)]
pub struct Worktree {
    pub path: Utf8PathBuf,
    pub branch: String,
    /// The commit the branch started from.
    pub base: String,
    /// Where the step works: `path` plus the working directory's place in the repository.
    pub workdir: Utf8PathBuf,
}

/// What a finished worktree step left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The branch, when it holds a change.
    pub branch: Option<String>,
    /// Unified diff against the base.
    pub diff: String,
}

fn git(dir: &Utf8Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        // The worktree gets no hooks or prompts of the user's.
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`git {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Repo {
    /// `None` when `workdir` is not inside a git checkout with at least one commit.
    pub fn discover(workdir: &Utf8Path) -> Option<Repo> {
        let top = Utf8PathBuf::from(git(workdir, &["rev-parse", "--show-toplevel"]).ok()?.trim());
        git(workdir, &["rev-parse", "--verify", "HEAD"]).ok()?;
        let common = git(workdir, &["rev-parse", "--git-common-dir"]).ok()?;
        let common = Utf8PathBuf::from(common.trim());
        let common = if common.is_absolute() {
            common
        } else {
            workdir.join(common)
        };
        let canonical = workdir.canonicalize_utf8().ok()?;
        let top = top.canonicalize_utf8().unwrap_or(top);
        let prefix = canonical
            .strip_prefix(&top)
            .map(Utf8Path::to_owned)
            .unwrap_or_default();
        Some(Repo {
            top,
            prefix,
            worktrees: common.join("runner-worktrees"),
        })
    }

    pub fn add(&self, run_id: &str, step: &str) -> Result<Worktree, String> {
        let branch = format!("runner/{run_id}/{step}");
        let path = self.worktrees.join(run_id).join(step);
        let base = git(&self.top, &["rev-parse", "HEAD"])?.trim().to_owned();
        git(
            &self.top,
            &[
                "worktree",
                "add",
                "--quiet",
                "-b",
                &branch,
                path.as_str(),
                &base,
            ],
        )?;
        let workdir = path.join(&self.prefix);
        Ok(Worktree {
            path,
            branch,
            base,
            workdir,
        })
    }

    /// Commits what the step changed on its branch and removes the worktree; with no change the
    /// branch goes too. With `keep_changes_only`, a worktree that holds changes is left in place
    /// uncommitted (an interrupted step's partial work stays for inspection).
    pub fn finish(
        &self,
        tree: &Worktree,
        step: &str,
        keep_changes_only: bool,
    ) -> Result<Finished, String> {
        git(&tree.path, &["add", "-A"])?;
        let changed = !git(&tree.path, &["status", "--porcelain"])?
            .trim()
            .is_empty();
        if changed && keep_changes_only {
            return Ok(Finished {
                branch: Some(tree.branch.clone()),
                diff: String::new(),
            });
        }
        let mut finished = Finished {
            branch: None,
            diff: String::new(),
        };
        if changed {
            let message = format!("runner: {step}");
            git(
                &tree.path,
                &[
                    "-c",
                    "user.name=runner",
                    "-c",
                    "user.email=runner@localhost",
                    "-c",
                    "commit.gpgsign=false",
                    "commit",
                    "--quiet",
                    "--no-verify",
                    "-m",
                    &message,
                ],
            )?;
            finished.diff = git(&tree.path, &["diff", &tree.base, "HEAD"])?;
            finished.branch = Some(tree.branch.clone());
        }
        git(
            &self.top,
            &["worktree", "remove", "--force", tree.path.as_str()],
        )?;
        if !changed {
            git(&self.top, &["branch", "-D", "--quiet", &tree.branch])?;
        }
        Ok(finished)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> (tempfile::TempDir, Utf8PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().to_owned()).unwrap();
        for args in [
            vec!["init", "--quiet", "-b", "main"],
            vec![
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "--quiet",
                "--allow-empty",
                "-m",
                "init",
            ],
        ] {
            git(&root, &args).unwrap();
        }
        std::fs::write(root.join("a.txt"), "one\n").unwrap();
        git(&root, &["add", "a.txt"]).unwrap();
        git(
            &root,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "--quiet",
                "-m",
                "a",
            ],
        )
        .unwrap();
        (dir, root)
    }

    #[test]
    fn changes_are_committed_on_the_branch_and_the_main_tree_stays_clean() {
        let (_d, root) = repo();
        let repo = Repo::discover(&root).unwrap();
        let tree = repo.add("r1", "edit").unwrap();
        assert!(tree.workdir.join("a.txt").exists());
        std::fs::write(tree.workdir.join("a.txt"), "two\n").unwrap();
        let done = repo.finish(&tree, "edit", false).unwrap();
        assert_eq!(done.branch.as_deref(), Some("runner/r1/edit"));
        assert!(done.diff.contains("-one\n+two"), "{}", done.diff);
        assert!(!tree.path.exists());
        assert_eq!(git(&root, &["status", "--porcelain"]).unwrap(), "");
        assert_eq!(
            std::fs::read_to_string(root.join("a.txt")).unwrap(),
            "one\n"
        );
        assert_eq!(
            git(&root, &["show", "runner/r1/edit:a.txt"]).unwrap(),
            "two\n"
        );
    }

    #[test]
    fn no_change_removes_worktree_and_branch() {
        let (_d, root) = repo();
        let repo = Repo::discover(&root).unwrap();
        let tree = repo.add("r1", "look").unwrap();
        let done = repo.finish(&tree, "look", false).unwrap();
        assert_eq!(
            done,
            Finished {
                branch: None,
                diff: String::new()
            }
        );
        assert!(!tree.path.exists());
        assert!(
            git(&root, &["branch", "--list", "runner/*"])
                .unwrap()
                .trim()
                .is_empty()
        );
    }

    #[test]
    fn outside_a_repository_there_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().to_owned()).unwrap();
        assert!(Repo::discover(&root).is_none());
    }
}
