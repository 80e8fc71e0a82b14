//! `isolation = "worktree"`: a step works in its own `git worktree` on branch
//! `runner/<run_id>/<step>`, made from HEAD. When it ends its changes are committed on that
//! branch and the worktree is removed (the branch too, when nothing changed).
//!
//! A step may be hostile, so git runs on paths runner resolved itself before the step started
//! (`--git-dir`/`--work-tree`; a `.git` file the step rewrote is never followed), with hooks,
//! fsmonitor, external diff drivers, credential helpers and transports off, never entering a
//! repository nested in the tree, attributes read from the commit the step started from (a
//! `.gitattributes` the step wrote selects no filter driver), and with a clean environment. A worktree whose `.git` file changed fails its step and is thrown away.

use std::process::Command;

use camino::{Utf8Path, Utf8PathBuf};

mod leftovers;
mod owned;
pub use leftovers::{Leftover, LeftoverKind};
pub use owned::{Owned, OwnedTree};

/// Configuration that would make git run a program, or enter a repository a step made, turned
/// off for every git runner runs (docs/src/security.md).
const SAFE_CONFIG: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.sshCommand=false",
    "core.editor=false",
    "core.pager=cat",
    "diff.external=",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "safe.bareRepository=explicit",
    "credential.helper=",
    "protocol.allow=never",
    "submodule.recurse=false",
    "diff.ignoreSubmodules=all",
    "status.submoduleSummary=false",
    "fetch.recurseSubmodules=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "user.name=runner",
    "user.email=runner@localhost",
];

/// The only variables git gets from runner's environment: what it needs to find itself, the
/// user's own configuration and a locale. Nothing secret, no `GIT_*` that redirects it.
const GIT_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
];

/// The repository a working directory belongs to.
#[derive(Debug, Clone)]
pub struct Repo {
    /// The top of the main checkout.
    pub top: Utf8PathBuf,
    /// The main checkout's git directory.
    pub git_dir: Utf8PathBuf,
    /// The working directory, relative to `top` (steps work in the same place in the worktree).
    pub prefix: Utf8PathBuf,
    /// Where runner keeps its worktrees: `<state dir>/worktrees` once the run says where its
    /// state directory is ([`Repo::keeping_worktrees_in`]), which tools never see; inside the
    /// git directory until then (where runs before that kept them).
    pub worktrees: Utf8PathBuf,
    /// Where runner kept its worktrees before they moved to the state directory: `runner
    /// clean` still finds what is left there.
    legacy_worktrees: Utf8PathBuf,
    /// Where git keeps the administrative directory of each linked worktree.
    admin: Utf8PathBuf,
}

#[derive(Debug, Clone)]
pub struct Worktree {
    pub path: Utf8PathBuf,
    pub branch: String,
    /// The commit the branch started from.
    pub base: String,
    /// Where the step works: `path` plus the working directory's place in the repository.
    pub workdir: Utf8PathBuf,
    /// The worktree's git directory, read right after git made it.
    git_dir: Utf8PathBuf,
    /// What its `.git` file said then.
    dot_git: String,
}

/// What a finished worktree step left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The branch, when it holds a change.
    pub branch: Option<String>,
    /// Unified diff against the base.
    pub diff: String,
    /// The worktree, when it was kept because it holds work (see [`Keep`]).
    pub kept: Option<Utf8PathBuf>,
}

/// What becomes of a worktree that holds changes when its step ends (docs/src/runs.md "Worktrees").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The step succeeded: its changes are committed on its branch, the worktree goes.
    Nothing,
    /// It failed or timed out: its changes are committed on its branch, and the worktree stays
    /// where it is, to look into or go on from.
    Tree,
    /// It was interrupted: its changes are committed on its branch as work in progress, so that
    /// `--resume RUN --continue` starts from the files the conversation describes, and the
    /// worktree stays where it is.
    InProgress,
}

/// Runs git with the safe configuration. `repo` is `(git dir, work tree)`; `None` lets git find
/// the repository from `dir` (only for [`Repo::discover`] and the sandbox's scan of the tree,
/// before any step has run).
pub(crate) fn git(
    dir: &Utf8Path,
    repo: Option<(&Utf8Path, &Utf8Path)>,
    args: &[&str],
) -> Result<String, String> {
    let mut command = Command::new("git");
    command.env_clear();
    for key in GIT_ENV {
        if let Some(value) = std::env::var_os(key) {
            command.env(key, value);
        }
    }
    command
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_NO_REPLACE_OBJECTS", "1")
        .arg("--no-optional-locks");
    for setting in SAFE_CONFIG {
        command.arg("-c").arg(setting);
    }
    if let Some((git_dir, work_tree)) = repo {
        command
            .arg(format!("--git-dir={git_dir}"))
            .arg(format!("--work-tree={work_tree}"));
    }
    let out = command
        .args(args)
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

fn absolute(base: &Utf8Path, path: &str) -> Utf8PathBuf {
    let path = Utf8PathBuf::from(path.trim());
    let path = if path.is_absolute() {
        path
    } else {
        base.join(path)
    };
    path.canonicalize_utf8().unwrap_or(path)
}

impl Repo {
    /// `None` when `workdir` is not inside a git checkout with at least one commit.
    pub fn discover(workdir: &Utf8Path) -> Option<Repo> {
        let found = git(
            workdir,
            None,
            &[
                "rev-parse",
                "--show-toplevel",
                "--absolute-git-dir",
                "--git-common-dir",
            ],
        )
        .ok()?;
        let mut lines = found.lines();
        let top = absolute(workdir, lines.next()?);
        let git_dir = absolute(workdir, lines.next()?);
        let common = absolute(workdir, lines.next()?);
        git(
            workdir,
            Some((&git_dir, &top)),
            &["rev-parse", "--verify", "HEAD"],
        )
        .ok()?;
        let canonical = workdir.canonicalize_utf8().ok()?;
        let prefix = canonical
            .strip_prefix(&top)
            .map(Utf8Path::to_owned)
            .unwrap_or_default();
        Some(Repo {
            top,
            git_dir,
            prefix,
            worktrees: common.join("runner-worktrees"),
            legacy_worktrees: common.join("runner-worktrees"),
            admin: common.join("worktrees"),
        })
    }

    /// Keeps worktrees in `<state_dir>/worktrees` (docs/src/runs.md "Worktrees"): hidden from every
    /// tool like the rest of the state directory, and out of the git directory, where an agent
    /// told its path went looking around. The path is made absolute (git runs in the checkout's
    /// top, not where runner was started). A state directory that is a link keeps its path as
    /// given: runner's worktree folders are then not where they really are, and nothing is
    /// removed there (`owned.rs`).
    pub fn keeping_worktrees_in(mut self, state_dir: &Utf8Path) -> Self {
        let dir = state_dir.join("worktrees");
        let link = state_dir
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink());
        self.worktrees = match state_dir.canonicalize_utf8() {
            Ok(state) if !link => state.join("worktrees"),
            _ if dir.is_absolute() => dir,
            _ => std::env::current_dir()
                .ok()
                .and_then(|cwd| Utf8PathBuf::from_path_buf(cwd).ok())
                .map_or(dir.clone(), |cwd| cwd.join(&dir)),
        };
        self
    }

    /// How many paths of the main checkout differ from HEAD (changed, staged or untracked):
    /// none of them reach a worktree made from HEAD.
    pub fn uncommitted(&self) -> usize {
        self.main(&["status", "--porcelain", "--ignore-submodules=all"])
            .map_or(0, |status| status.lines().count())
    }

    /// [`Repo::uncommitted`], leaving out what is under `dir` (the state directory): runner's
    /// records, and what an exported pipeline's jobs bring there (the runner binary, the state
    /// of earlier jobs), are nobody's uncommitted work.
    pub fn uncommitted_outside(&self, dir: &Utf8Path) -> usize {
        let inside = dir
            .canonicalize_utf8()
            .ok()
            .and_then(|d| d.strip_prefix(&self.top).ok().map(Utf8Path::to_owned))
            .filter(|d| !d.as_str().is_empty());
        let Some(inside) = inside else {
            return self.uncommitted();
        };
        let exclude = format!(":(top,exclude,literal){inside}");
        self.main(&[
            "status",
            "--porcelain",
            "--ignore-submodules=all",
            "--",
            ":(top)",
            &exclude,
        ])
        .map_or(0, |status| status.lines().count())
    }

    /// git on the main checkout.
    fn main(&self, args: &[&str]) -> Result<String, String> {
        git(&self.top, Some((&self.git_dir, &self.top)), args)
    }

    pub fn add(&self, run_id: &str, step: &str) -> Result<Worktree, String> {
        self.add_from(run_id, step, None)
    }

    /// A worktree whose files start from what the same step left in run `earlier` (for
    /// `--continue`): its branch `runner/<earlier>/<step>`, the only branch runner goes on
    /// from, whatever a record names. Its diff is still taken against HEAD.
    pub fn add_from(
        &self,
        run_id: &str,
        step: &str,
        earlier: Option<&str>,
    ) -> Result<Worktree, String> {
        let branch = format!("runner/{run_id}/{step}");
        let path = self.worktrees.join(run_id).join(step);
        let base = self.main(&["rev-parse", "HEAD"])?.trim().to_owned();
        let start = match earlier {
            Some(earlier) if !crate::record::is_run_id(earlier) => {
                return Err(format!("`{earlier}` is not a run id"));
            }
            // The full ref: a tag of that name (a clone brings the remote's tags) is not it.
            Some(earlier) => self
                .main(&[
                    "rev-parse",
                    "--verify",
                    "--end-of-options",
                    &format!("refs/heads/runner/{earlier}/{step}^{{commit}}"),
                ])?
                .trim()
                .to_owned(),
            None => base.clone(),
        };
        self.main(&[
            "worktree",
            "add",
            "--quiet",
            "-b",
            &branch,
            path.as_str(),
            &start,
        ])?;
        // Read what git wrote before the step can touch it; from now on this is the truth.
        let dot_git = std::fs::read_to_string(path.join(".git"))
            .map_err(|e| format!("cannot read the new worktree's `.git`: {e}"))?;
        let git_dir = dot_git
            .strip_prefix("gitdir:")
            .map(|d| absolute(&path, d))
            .filter(|d| d.starts_with(&self.admin))
            .ok_or_else(|| format!("the new worktree's `.git` is unexpected: {dot_git:?}"))?;
        let workdir = path.join(&self.prefix);
        Ok(Worktree {
            path,
            branch,
            base,
            workdir,
            git_dir,
            dot_git,
        })
    }

    /// Commits what the step changed on its branch and removes the worktree; with no change the
    /// branch goes too. A worktree that holds changes is kept as `keep` says. A worktree whose
    /// `.git` file the step changed is discarded, and that is an error.
    pub fn finish(&self, tree: &Worktree, step: &str, keep: Keep) -> Result<Finished, String> {
        if !tree.untouched() {
            self.discard(tree);
            return Err(format!(
                "step `{step}` changed its worktree's `.git` file; its changes were discarded and nothing was committed"
            ));
        }
        match self.record(tree, step, keep) {
            Ok(finished) => Ok(finished),
            Err(err) => {
                // Whatever failed, nothing of the step's tree stays behind to confuse a later run.
                self.discard(tree);
                Err(err)
            }
        }
    }

    fn record(&self, tree: &Worktree, step: &str, keep: Keep) -> Result<Finished, String> {
        // Attributes come from the commit the step started from, never from a `.gitattributes`
        // the step wrote: the checkout's own filters (git-lfs) work, a filter driver of the
        // repository's config that the step's files would select does not run.
        let attr_source = format!("--attr-source={}", tree.base);
        let in_tree = |args: &[&str]| {
            let mut all = vec![attr_source.as_str()];
            all.extend_from_slice(args);
            git(&tree.path, Some((&tree.git_dir, &tree.path)), &all)
        };
        in_tree(&["add", "-A"])?;
        // `--ignore-submodules=all`: a repository the step made inside its tree is never
        // entered, so its config (filters, fsmonitor) is never read.
        let changed = !in_tree(&["status", "--porcelain", "--ignore-submodules=all"])?
            .trim()
            .is_empty();
        let mut finished = Finished {
            branch: None,
            diff: String::new(),
            kept: None,
        };
        if changed {
            let message = match keep {
                Keep::InProgress => format!("runner: {step} (work in progress: interrupted)"),
                _ => format!("runner: {step}"),
            };
            in_tree(&["commit", "--quiet", "--no-verify", "-m", &message])?;
        }
        // A tree that started from an earlier run's branch (`--continue`) holds that work as
        // commits already.
        let work = changed || in_tree(&["rev-parse", "HEAD"])?.trim() != tree.base;
        if work {
            finished.diff = in_tree(&[
                "diff",
                "--no-ext-diff",
                "--no-textconv",
                "--ignore-submodules=all",
                &tree.base,
                "HEAD",
            ])?;
            finished.branch = Some(tree.branch.clone());
            if keep != Keep::Nothing {
                finished.kept = Some(tree.path.clone());
                return Ok(finished);
            }
        }
        // Not `git worktree remove`: it would look inside (and refuses trees holding a nested
        // repository). The files go without following links, then git forgets the tree.
        self.remove_own(tree)?;
        self.main(&["worktree", "prune"])?;
        if !work {
            self.main(&["branch", "-D", "--quiet", &tree.branch])?;
        }
        Ok(finished)
    }

    /// Throws a worktree away without asking git to read anything inside it.
    fn discard(&self, tree: &Worktree) {
        // Links the step planted are removed, not their targets.
        let _ = self.remove_own(tree);
        let _ = self.main(&["worktree", "prune"]);
        let _ = self.main(&["branch", "-D", "--quiet", &tree.branch]);
    }

    /// Removes what a run that was killed left behind: its worktrees that hold no work, and its
    /// branches that hold no commit of their own, except those of steps in `keep` (steps that
    /// succeeded). A worktree that holds work is never removed here (`runner clean --force`
    /// does that). Returns what was done, for the user.
    pub fn clean_up_run(&self, run_id: &str, keep: &[String]) -> Vec<String> {
        let mut removed = Vec::new();
        // Only worktrees runner registered under its folder (see `owned.rs`); what else the
        // run's folder holds (a link a checkout shipped) is named and left alone.
        let owned = self.owned_trees();
        let run_dirs: Vec<Utf8PathBuf> = [&self.worktrees, &self.legacy_worktrees]
            .iter()
            .map(|root| root.join(run_id))
            .collect();
        for (path, why) in &owned.refused {
            // What is in this run's folder, or the folder of all runs itself.
            let roots = [&self.worktrees, &self.legacy_worktrees];
            if run_dirs.iter().any(|dir| path.starts_with(dir)) || roots.contains(&path) {
                removed.push(format!("left {path} as it is: {why}"));
            }
        }
        for tree in owned.trees.iter().filter(|t| t.run == run_id) {
            let step = tree.step.as_str();
            if keep.iter().any(|k| k == step) {
                continue;
            }
            if let Some(work) = self.tree_work(&tree.path()) {
                removed.push(format!(
                    "left the worktree of step `{step}` at {} as it is: it holds {work} (`runner clean` lists what runner left)",
                    tree.path()
                ));
                continue;
            }
            if self.remove_owned(tree).is_ok() {
                removed.push(format!("removed the worktree of step `{step}`"));
            }
        }
        for (root, run) in owned.empty.iter().filter(|(_, run)| run == run_id) {
            let _ = Repo::remove_empty(root, run);
        }
        let _ = self.main(&["worktree", "prune"]);
        let prefix = format!("runner/{run_id}/");
        let branches = self
            .main(&[
                "for-each-ref",
                "--format=%(refname:short)",
                &format!("refs/heads/{prefix}"),
            ])
            .unwrap_or_default();
        for branch in branches.lines().map(str::trim).filter(|b| !b.is_empty()) {
            let step = branch.strip_prefix(&prefix).unwrap_or(branch);
            if keep.iter().any(|k| k == step) {
                continue;
            }
            let own = self
                .main(&["rev-list", "--count", &format!("HEAD..{branch}")])
                .map(|n| n.trim() != "0")
                .unwrap_or(true);
            if !own && self.main(&["branch", "-D", "--quiet", branch]).is_ok() {
                removed.push(format!("removed the branch `{branch}`"));
            }
        }
        removed
    }
}

impl Repo {
    /// Removes a worktree this run made, through the one removal (`owned.rs`).
    fn remove_own(&self, tree: &Worktree) -> Result<(), String> {
        let (Some(step), Some(run)) = (
            tree.path.file_name(),
            tree.path.parent().and_then(Utf8Path::file_name),
        ) else {
            return Err(format!("`{}` is not a worktree runner made", tree.path));
        };
        Repo::remove_tree_at(&self.worktrees, run, step)
            .map_err(|e| format!("cannot remove the worktree `{}`: {e}", tree.path))
    }
}

impl Worktree {
    /// Whether the `.git` file is still the one git wrote (a regular file, same text).
    fn untouched(&self) -> bool {
        let dot_git = self.path.join(".git");
        dot_git
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_file())
            && std::fs::read_to_string(&dot_git).is_ok_and(|text| text == self.dot_git)
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
            git(&root, None, &args).unwrap();
        }
        std::fs::write(root.join("a.txt"), "one\n").unwrap();
        commit(&root, "a.txt", "a");
        (dir, root)
    }

    /// Adds `path` and commits it (runner's safe configuration names the committer).
    fn commit(root: &Utf8Path, path: &str, message: &str) {
        git(root, None, &["add", path]).unwrap();
        git(root, None, &["commit", "--quiet", "-m", message]).unwrap();
    }

    #[test]
    fn changes_are_committed_on_the_branch_and_the_main_tree_stays_clean() {
        let (_d, root) = repo();
        let repo = Repo::discover(&root).unwrap();
        let tree = repo.add("r1", "edit").unwrap();
        assert!(tree.workdir.join("a.txt").exists());
        std::fs::write(tree.workdir.join("a.txt"), "two\n").unwrap();
        let done = repo.finish(&tree, "edit", Keep::Nothing).unwrap();
        assert_eq!(done.branch.as_deref(), Some("runner/r1/edit"));
        assert!(done.diff.contains("-one\n+two"), "{}", done.diff);
        assert!(!tree.path.exists());
        assert_eq!(git(&root, None, &["status", "--porcelain"]).unwrap(), "");
        assert_eq!(
            std::fs::read_to_string(root.join("a.txt")).unwrap(),
            "one\n"
        );
        assert_eq!(
            git(&root, None, &["show", "runner/r1/edit:a.txt"]).unwrap(),
            "two\n"
        );
    }

    #[test]
    fn no_change_removes_worktree_and_branch() {
        let (_d, root) = repo();
        let repo = Repo::discover(&root).unwrap();
        let tree = repo.add("r1", "look").unwrap();
        let done = repo.finish(&tree, "look", Keep::Nothing).unwrap();
        assert_eq!(
            done,
            Finished {
                branch: None,
                diff: String::new(),
                kept: None,
            }
        );
        assert!(!tree.path.exists());
        assert!(
            git(&root, None, &["branch", "--list", "runner/*"])
                .unwrap()
                .trim()
                .is_empty()
        );
    }

    #[test]
    fn a_rewritten_dot_git_fails_the_step_and_touches_nothing_of_the_user() {
        let (_d, root) = repo();
        let repo = Repo::discover(&root).unwrap();
        let main_head = git(&root, None, &["rev-parse", "HEAD"]).unwrap();
        let tree = repo.add("r1", "evil").unwrap();
        std::fs::write(tree.path.join("a.txt"), "evil\n").unwrap();
        // Point the worktree at the main repository: a commit through it would land on main.
        std::fs::write(
            tree.path.join(".git"),
            format!("gitdir: {}\n", root.join(".git")),
        )
        .unwrap();
        let err = repo.finish(&tree, "evil", Keep::Nothing).unwrap_err();
        assert!(err.contains("changed its worktree's `.git` file"), "{err}");
        assert_eq!(git(&root, None, &["rev-parse", "HEAD"]).unwrap(), main_head);
        assert_eq!(git(&root, None, &["status", "--porcelain"]).unwrap(), "");
        assert_eq!(
            std::fs::read_to_string(root.join("a.txt")).unwrap(),
            "one\n"
        );
        assert!(!tree.path.exists());
        assert!(
            git(&root, None, &["branch", "--list", "runner/*"])
                .unwrap()
                .trim()
                .is_empty()
        );
    }

    #[test]
    fn configured_hooks_and_fsmonitor_never_run() {
        let (dir, root) = repo();
        let planted = Utf8PathBuf::from_path_buf(dir.path().join("planted")).unwrap();
        let hook = format!("#!/bin/sh\ntouch {planted}\n");
        std::fs::write(root.join(".git/hooks/pre-commit"), &hook).unwrap();
        std::fs::write(root.join(".git/hooks/post-checkout"), &hook).unwrap();
        for name in ["pre-commit", "post-checkout"] {
            let path = root.join(".git/hooks").join(name);
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
        }
        git(
            &root,
            None,
            &[
                "config",
                "core.fsmonitor",
                &format!("touch {planted}; false"),
            ],
        )
        .unwrap();
        let repo = Repo::discover(&root).unwrap();
        let tree = repo.add("r1", "edit").unwrap();
        std::fs::write(tree.workdir.join("a.txt"), "two\n").unwrap();
        repo.finish(&tree, "edit", Keep::Nothing).unwrap();
        assert!(!planted.exists(), "git ran a planted command");
    }

    #[test]
    fn leftovers_of_a_killed_run_are_cleaned_up() {
        let (_d, root) = repo();
        let repo = Repo::discover(&root).unwrap();
        let kept = repo.add("r9", "done").unwrap();
        std::fs::write(kept.workdir.join("a.txt"), "two\n").unwrap();
        repo.finish(&kept, "done", Keep::Nothing).unwrap();
        // Steps killed mid-way: their worktrees and empty branches stay behind. One had
        // written nothing yet; the other's partial work is left where it is.
        let left = repo.add("r9", "killed").unwrap();
        let worked = repo.add("r9", "worked").unwrap();
        std::fs::write(worked.workdir.join("partial.txt"), "x\n").unwrap();
        let removed = repo.clean_up_run("r9", &["done".to_owned()]);
        assert_eq!(
            removed,
            [
                "removed the worktree of step `killed`".to_owned(),
                format!(
                    "left the worktree of step `worked` at {} as it is: it holds 1 uncommitted change (`runner clean` lists what runner left)",
                    worked.path
                ),
                "removed the branch `runner/r9/killed`".to_owned(),
            ]
        );
        assert!(!left.path.exists());
        assert!(worked.path.join("partial.txt").exists());
        let branches = git(&root, None, &["branch", "--list", "runner/*"]).unwrap();
        assert!(!branches.contains("runner/r9/killed"), "{branches}");
        assert!(branches.contains("runner/r9/done") && branches.contains("runner/r9/worked"));
        assert!(
            !git(&root, None, &["worktree", "list"])
                .unwrap()
                .contains("killed")
        );
    }

    #[test]
    fn outside_a_repository_there_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().to_owned()).unwrap();
        assert!(Repo::discover(&root).is_none());
    }

    /// A filter driver of the repository's config runs only where the checkout's own
    /// attributes, as they were, select it: a `.gitattributes` the step wrote selects nothing.
    #[test]
    fn only_the_checkouts_own_attributes_select_filters() {
        let (_d, root) = repo();
        let planted = root.join("planted");
        git(
            &root,
            None,
            &[
                "config",
                "filter.evil.clean",
                &format!("touch {planted}; cat"),
            ],
        )
        .unwrap();
        git(&root, None, &["config", "filter.upper.clean", "tr a-z A-Z"]).unwrap();
        std::fs::write(root.join(".gitattributes"), "*.up filter=upper\n").unwrap();
        commit(&root, ".gitattributes", "attrs");
        let repo = Repo::discover(&root).unwrap();
        let tree = repo.add("r1", "edit").unwrap();
        std::fs::write(
            tree.workdir.join(".gitattributes"),
            "*.up filter=upper\n* filter=evil\n",
        )
        .unwrap();
        std::fs::write(tree.workdir.join("a.txt"), "two\n").unwrap();
        std::fs::write(tree.workdir.join("b.up"), "shout\n").unwrap();
        repo.finish(&tree, "edit", Keep::Nothing).unwrap();
        assert!(!planted.exists(), "a filter the step selected ran");
        assert_eq!(
            git(&root, None, &["show", "runner/r1/edit:b.up"]).unwrap(),
            "SHOUT\n"
        );
    }
}
