//! What a step's bash may read and write, worked out in one place for every step (agent steps,
//! their subagents, checks and command steps all take their [`BashEnv`] from here): the paths it
//! may never write, what it sees as an empty folder, what it may never read, and the read
//! allowlist (docs/src/security.md). The sandbox itself (`crate::sandbox`) enforces them.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};

use camino::{Utf8Path, Utf8PathBuf};

use crate::sandbox::reads;
use crate::sandbox::tree::{MAX_SCAN, Tree};
use crate::tools::bash::BashEnv;

/// Submodules looked for at most (nested ones included).
const MAX_GITLINKS: usize = 10_000;

/// The run's places a step's sandbox is worked out from.
pub struct Places<'a> {
    /// The run's working directory (canonical).
    pub workdir: &'a Utf8Path,
    pub state_dir: &'a Utf8Path,
    /// The cassette directory being recorded or replayed.
    pub cassettes: Option<&'a Utf8Path>,
    /// The repositories nested in the working directory ([`scan_tree`]).
    pub tree: &'a Tree,
}

impl Places<'_> {
    /// Sets `bash`'s sandbox for a step working in `root` (the working directory or its
    /// worktree) whose `read_paths` are `read_paths`.
    pub fn confine(
        &self,
        bash: &mut BashEnv,
        root: &Utf8Path,
        worktree: bool,
        read_paths: &[String],
    ) {
        let home = home();
        let mut reads: Vec<PathBuf> = read_paths
            .iter()
            .filter_map(|entry| reads::expand(entry, home.as_deref(), self.workdir.as_std_path()))
            .map(|p| p.canonicalize().unwrap_or(p))
            .collect();
        let named = reads.clone();
        if worktree {
            // The checkout it was made from (build tools look for a workspace above their
            // project, git for its objects): a worktree sits in the state directory inside it.
            reads.push(self.workdir.to_path_buf().into_std_path_buf());
            reads.extend(worktree_git_dir(root));
        } else {
            bash.note = self.tree.note();
        }
        bash.read = reads::allowed(home.as_deref(), |name| std::env::var(name).ok(), &reads);
        bash.protected = protected_paths(root, self.state_dir, self.cassettes, worktree, self.tree);
        bash.hidden = hidden_paths(root, self.state_dir, worktree);
        bash.secret = secret_paths(self.workdir, home.as_deref(), &named);
    }
}

/// The home directory, canonical.
fn home() -> Option<PathBuf> {
    let home = PathBuf::from(std::env::var_os("HOME")?);
    home.canonicalize().ok().filter(|h| h != Path::new("/"))
}

/// What a step's bash may never write, even when it may write its working directory: the state
/// directory, the cassette directory being recorded or replayed, and the checkout's `.git` with
/// the repositories nested in it (`tree`, scanned when the run started), unless the step works
/// in a worktree runner made (whose `.git` file runner checks when the step ends, and whose git
/// directory is outside anyway).
pub fn protected_paths(
    root: &Utf8Path,
    state_dir: &Utf8Path,
    cassettes: Option<&Utf8Path>,
    worktree: bool,
    tree: &Tree,
) -> Vec<PathBuf> {
    let mut protected = Vec::new();
    for dir in std::iter::once(state_dir).chain(cassettes) {
        // A link stands protected itself too: the sandbox then keeps the root unwritable, so
        // the step cannot point it elsewhere before runner writes through it.
        if dir
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
            && let (Some(parent), Some(name)) = (dir.parent(), dir.file_name())
        {
            // The link itself, where the sandbox sees it: its folder's real path and its name.
            let parent = if parent.as_str().is_empty() {
                Utf8Path::new(".")
            } else {
                parent
            };
            if let Ok(parent) = parent.canonicalize_utf8() {
                protected.push(parent.join(name).into_std_path_buf());
            }
        }
        if let Ok(dir) = dir.canonicalize_utf8() {
            protected.push(dir.into_std_path_buf());
        }
    }
    let git = root.join(".git");
    if !worktree && git.symlink_metadata().is_ok() {
        protected.push(git.into_std_path_buf());
    }
    // Repositories nested in the tree (vendored clones, submodules' `.git` files): their hooks
    // and config would run the next time the user's git works there.
    if !worktree {
        protected.extend(tree.protected.iter().cloned());
        protected.extend(tree.unscanned.iter().cloned());
    }
    protected
}

/// What of the state directory bash sees as an empty folder (runs' records and transcripts are
/// not its to read; the file tools refuse them too): all of it when it is inside `root`; its
/// runs for a step in a worktree, which is inside the state directory itself.
pub fn hidden_paths(root: &Utf8Path, state_dir: &Utf8Path, worktree: bool) -> Vec<PathBuf> {
    let (Ok(root), Ok(state)) = (root.canonicalize_utf8(), state_dir.canonicalize_utf8()) else {
        return Vec::new();
    };
    if worktree {
        return state
            .join("runs")
            .canonicalize_utf8()
            .ok()
            .filter(|runs| runs.starts_with(&state))
            .map(Utf8PathBuf::into_std_path_buf)
            .into_iter()
            .collect();
    }
    match state.starts_with(&root) && state != root {
        true => vec![state.into_std_path_buf()],
        false => Vec::new(),
    }
}

/// What bash may never read, whatever grants it: runner's key (a step that read it could seal
/// records as this user), and, when the run's working directory `root` holds the home
/// directory, the credentials in it that `named` (the step's `read_paths`) does not name.
pub fn secret_paths(root: &Utf8Path, home: Option<&Path>, named: &[PathBuf]) -> Vec<PathBuf> {
    let mut secret: Vec<PathBuf> = crate::run::seal::key_path()
        .ok()
        .and_then(|key| {
            let dir = key.parent()?;
            // Made now when missing (runner makes it for its key when it first seals a record,
            // which may be after this step starts), so that it is covered from the start.
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir);
            dir.canonicalize_utf8().ok()
        })
        .map(Utf8PathBuf::into_std_path_buf)
        .into_iter()
        .collect();
    let root = root.canonicalize_utf8().map(Utf8PathBuf::into_std_path_buf);
    if let (Ok(root), Some(home)) = (root, home)
        && home.starts_with(&root)
    {
        secret.extend(
            reads::CREDENTIALS
                .iter()
                .map(|c| home.join(c))
                .filter(|c| c.is_dir() && !c.is_symlink())
                .filter(|c| !named.iter().any(|n| c.starts_with(n))),
        );
    }
    secret
}

/// Said once when the run starts: what of the tree was not looked through, and, when some
/// step runs confined commands (`confined`), a working directory that holds the home directory.
pub fn warnings(workdir: &Utf8Path, tree: &Tree, confined: bool) -> Vec<String> {
    let mut warnings: Vec<String> = tree.note().into_iter().collect();
    if confined
        && let (Ok(root), Some(home)) = (workdir.canonicalize_utf8(), home())
        && home.starts_with(root.as_std_path())
    {
        warnings.push(format!(
            "the working directory holds your home directory: bash in steps that may write can change any file in it (`.bashrc` included), and every step's bash reads all of it but {} and runner's key",
            reads::CREDENTIALS
                .iter()
                .map(|c| format!("`~/{c}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    warnings
}

/// The repositories nested in the run's working directory, looked for once before any step
/// runs (see [`Tree`]): the state and cassette directories are not entered. A submodule the
/// index registers whose folder is missing gets its empty folder, as `git checkout` would have
/// made it, so that it can be protected.
pub fn scan_tree(workdir: &Utf8Path, skip: &[&Utf8Path]) -> Tree {
    let Ok(root) = workdir.canonicalize_utf8() else {
        return Tree::default();
    };
    let skip: Vec<PathBuf> = skip
        .iter()
        .filter_map(|d| d.canonicalize_utf8().ok())
        .map(Utf8PathBuf::into_std_path_buf)
        .collect();
    let links = gitlinks(&root);
    let mut blocked = Vec::new();
    for link in &links {
        if let Err(at) = make_folder(root.as_std_path(), link) {
            blocked.push(at);
        }
    }
    let mut tree = Tree::scan(root.as_std_path(), &skip, &links, MAX_SCAN);
    // A file or link where a submodule's folder should be: it stays as it is.
    tree.protected.extend(blocked);
    tree.protected.sort();
    tree.protected.dedup();
    tree
}

/// Makes the folder `link` (relative to `root`) where it is missing, entering no link; the path
/// that is in the way when something other than a folder is.
fn make_folder(root: &Path, link: &Path) -> Result<(), PathBuf> {
    let mut at = root.to_path_buf();
    for part in link.components() {
        at.push(part);
        match at.symlink_metadata() {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(at),
            Err(_) => std::fs::create_dir(&at).map_err(|_| at.clone())?,
        }
    }
    Ok(())
}

/// The submodules the index of `root`'s repository registers under it (gitlinks), and those of
/// each populated submodule in turn, relative to `root`; none when it is not in a repository.
/// Only plain relative paths are kept (an index can be crafted).
fn gitlinks(root: &Utf8Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut repos = vec![PathBuf::new()];
    while let Some(prefix) = repos.pop() {
        let Ok(dir) = Utf8PathBuf::from_path_buf(root.as_std_path().join(&prefix)) else {
            continue;
        };
        let Ok(listed) = crate::run::worktree::git(&dir, None, &["ls-files", "--stage", "-z"])
        else {
            continue;
        };
        for entry in listed.split('\0') {
            let Some((meta, path)) = entry.split_once('\t') else {
                continue;
            };
            let path = Path::new(path);
            if !meta.starts_with("160000 ")
                || !path.components().all(|c| matches!(c, Component::Normal(_)))
            {
                continue;
            }
            let link = prefix.join(path);
            if found.len() >= MAX_GITLINKS {
                return found;
            }
            // A populated submodule's own submodules: the user's `git status` recurses there.
            if root.as_std_path().join(&link).join(".git").exists() {
                repos.push(link.clone());
            }
            found.push(link);
        }
    }
    found
}

/// Where a worktree step's bash reads its repository: the main checkout's git directory, from
/// the worktree's `.git` file as git wrote it (objects and refs live there).
fn worktree_git_dir(root: &Utf8Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(root.join(".git")).ok()?;
    let admin = PathBuf::from(text.strip_prefix("gitdir:")?.trim());
    let common = std::fs::read_to_string(admin.join("commondir")).ok()?;
    admin.join(common.trim()).canonicalize().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state directory that is a link is protected as the link too (so the root stays
    /// unwritable and the link cannot be pointed elsewhere), and as where it leads.
    #[test]
    fn a_linked_state_directory_is_protected_as_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
        std::fs::create_dir_all(root.join("elsewhere")).unwrap();
        std::fs::create_dir_all(root.join("work")).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), root.join("work/.runner")).unwrap();
        let work = root.join("work");
        let protected =
            protected_paths(&work, &work.join(".runner"), None, false, &Tree::default());
        assert_eq!(
            protected,
            [
                work.join(".runner").into_std_path_buf(),
                root.join("elsewhere").into_std_path_buf()
            ]
        );
        // A plain one is protected once.
        std::fs::remove_file(work.join(".runner")).unwrap();
        std::fs::create_dir(work.join(".runner")).unwrap();
        let protected =
            protected_paths(&work, &work.join(".runner"), None, false, &Tree::default());
        assert_eq!(protected, [work.join(".runner").into_std_path_buf()]);
    }

    /// What the scan did not look through is read-only for every step in the working directory,
    /// and each bash result says so; a step in a worktree (outside that tree) gets neither.
    #[test]
    fn folders_not_looked_through_are_protected_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
        for i in 0..20 {
            std::fs::create_dir_all(root.join(format!("big/d{i}/e/.git"))).unwrap();
        }
        let tree = Tree::scan(root.as_std_path(), &[], &[], 10);
        assert!(!tree.unscanned.is_empty());
        let state = root.join(".runner");
        let places = Places {
            workdir: &root,
            state_dir: &state,
            cassettes: None,
            tree: &tree,
        };
        let mut bash = BashEnv::new(crate::sandbox::Mode::Workdir, false);
        places.confine(&mut bash, &root, false, &[]);
        for unscanned in &tree.unscanned {
            assert!(bash.protected.contains(unscanned), "{unscanned:?}");
        }
        assert!(
            bash.note
                .as_deref()
                .is_some_and(|n| n.contains("read-only"))
        );
        let mut bash = BashEnv::new(crate::sandbox::Mode::Workdir, false);
        places.confine(&mut bash, &root.join("elsewhere"), true, &[]);
        assert!(bash.note.is_none());
        assert!(!tree.unscanned.iter().any(|u| bash.protected.contains(u)));
    }

    /// Runner's key is never readable, whatever `read_paths` names; when the working directory
    /// holds the home directory, its credential folders are not either unless named.
    #[test]
    fn the_key_and_a_homes_credentials_are_secret() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let home = root.join("home");
        for c in [".ssh", ".aws"] {
            std::fs::create_dir_all(home.join(c)).unwrap();
        }
        let work = Utf8PathBuf::from_path_buf(root.clone()).unwrap();
        let named = [home.join(".aws")];
        let secret = secret_paths(&work, Some(&home), &named);
        assert!(secret.contains(&home.join(".ssh")), "{secret:?}");
        assert!(!secret.contains(&home.join(".aws")), "{secret:?}");
        // A working directory inside the home directory leaves the home's folders to the
        // read allowlist, which does not hold them.
        let inside = Utf8PathBuf::from_path_buf(home.join("project")).unwrap();
        std::fs::create_dir_all(&inside).unwrap();
        let secret = secret_paths(&inside, Some(&home), &[]);
        assert!(!secret.contains(&home.join(".ssh")), "{secret:?}");
    }

    /// A missing submodule folder is made, never through a link or over a file.
    #[test]
    fn a_missing_submodule_folder_is_made_inside_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("outside")).unwrap();
        std::fs::create_dir_all(root.join("work")).unwrap();
        let work = root.join("work");
        std::os::unix::fs::symlink(root.join("outside"), work.join("link")).unwrap();
        std::fs::write(work.join("file"), "").unwrap();
        assert_eq!(make_folder(&work, Path::new("a/b/sub")), Ok(()));
        assert!(work.join("a/b/sub").is_dir());
        assert_eq!(
            make_folder(&work, Path::new("link/sub")),
            Err(work.join("link"))
        );
        assert_eq!(
            make_folder(&work, Path::new("file/sub")),
            Err(work.join("file"))
        );
        assert_eq!(std::fs::read_dir(root.join("outside")).unwrap().count(), 0);
    }
}
