//! Path confinement: every path a tool touches must resolve, symlinks followed, inside the step's
//! working directory.
//!
//! Paths are opened through a handle on the working directory with `cap-std`, which resolves
//! them beneath it (`openat2` with `RESOLVE_BENEATH` where the kernel has it, a careful walk
//! otherwise) in the same step as opening them: a directory swapped for a symlink while a tool
//! runs cannot lead outside. There is one way in: every open, of every kind, is then checked by
//! its real path (read back from the open descriptor, so it is the file actually opened): nothing may be written inside a `.git`
//! (of any checkout) and nothing read or written inside runner's state directory.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use camino::{Utf8Component, Utf8Path, Utf8PathBuf};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

/// The directory a step works in.
#[derive(Debug)]
pub struct Workspace {
    /// Canonical.
    root: Utf8PathBuf,
    /// The root as the user named it, for absolute paths the model copies from there.
    given: Utf8PathBuf,
    dir: Dir,
    /// runner's state directory (canonical, or as given when it does not exist yet).
    state_dir: Option<Utf8PathBuf>,
    /// The cassettes of `--record`/`--replay` (canonical, or as given): hidden like the state
    /// directory, so a recorded run and its replay see the same tree.
    cassettes: Option<Utf8PathBuf>,
}

/// What a tool means to do with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfineError {
    #[error("`{0}` is outside the working directory")]
    Outside(String),
    #[error("`{0}` is inside `.git`, which tools may not change")]
    Git(String),
    #[error("`{0}` is inside runner's state directory, which tools may not touch")]
    State(String),
    #[error("`{0}` is inside the cassette directory of this run, which tools may not touch")]
    Cassettes(String),
    #[error("`{0}` does not exist")]
    NotFound(String),
    #[error("cannot open `{path}`: {reason}")]
    Io { path: String, reason: String },
}

/// A refused path is an error result marked as a refusal (docs/src/audit.md); a file that is
/// not there, or cannot be opened, is only an error.
impl From<ConfineError> for super::ToolOutput {
    fn from(err: ConfineError) -> Self {
        match err {
            ConfineError::NotFound(_) | ConfineError::Io { .. } => Self::error(err.to_string()),
            _ => Self::refused(super::Refusal::Path, err.to_string()),
        }
    }
}

impl Workspace {
    pub fn new(root: &Utf8Path) -> io::Result<Self> {
        let canonical = root.canonicalize_utf8()?;
        let dir = Dir::open_ambient_dir(&canonical, ambient_authority())?;
        Ok(Self {
            root: canonical,
            given: root.to_owned(),
            dir,
            state_dir: None,
            cassettes: None,
        })
    }

    /// The text of a file runner itself reads from the working directory (an agent file,
    /// `.mcp.json`, `CLAUDE.md`): opened as the tools open it (no link followed out of the
    /// directory, no `/proc`), a regular file of at most `limit` bytes, UTF-8 (docs/src/security.md:
    /// one way in).
    pub fn read_text(&self, path: &str, limit: u64) -> Result<String, String> {
        use std::io::Read as _;
        let (file, _) = self.open_read(path).map_err(|e| e.to_string())?;
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot read `{path}`: {e}"))?;
        if !meta.is_file() {
            return Err(format!("`{path}` is not a regular file"));
        }
        let mut bytes = Vec::new();
        file.take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read `{path}`: {e}"))?;
        if bytes.len() as u64 > limit {
            return Err(format!(
                "`{path}` is larger than {}",
                crate::limits::bytes(limit)
            ));
        }
        let text = String::from_utf8(bytes).map_err(|_| format!("`{path}` is not UTF-8"))?;
        Ok(text
            .strip_prefix('\u{feff}')
            .map_or(text.clone(), str::to_owned))
    }

    /// Keeps tools out of runner's state directory.
    pub fn with_state_dir(mut self, state_dir: &Utf8Path) -> Self {
        let state = state_dir
            .canonicalize_utf8()
            .unwrap_or_else(|_| state_dir.to_owned());
        // A worktree step works inside the state directory (in `worktrees/`): everything
        // outside its root is refused already, and its root itself is its own.
        if !self.root.starts_with(&state) {
            self.state_dir = Some(state);
        }
        self
    }

    /// Keeps tools out of the run's cassette directory.
    pub fn with_cassettes(mut self, dir: &Utf8Path) -> Self {
        self.cassettes = Some(dir.canonicalize_utf8().unwrap_or_else(|_| {
            // Not made yet (a first `--record`): where it will be.
            if dir.is_absolute() {
                dir.to_owned()
            } else {
                std::env::current_dir()
                    .ok()
                    .and_then(|cwd| Utf8PathBuf::from_path_buf(cwd).ok())
                    .map_or_else(|| dir.to_owned(), |cwd| cwd.join(dir))
            }
        }));
        self
    }

    pub fn root(&self) -> &Utf8Path {
        &self.root
    }

    /// The handle everything is opened through.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// The model's path relative to the root: relative paths as given, absolute ones only when
    /// they start with the root. Nothing is resolved here; opening does that, beneath the root.
    pub fn relative(&self, path: &str) -> Result<Utf8PathBuf, ConfineError> {
        let given = Utf8Path::new(path);
        let rel = if given.is_absolute() {
            given
                .strip_prefix(&self.root)
                .or_else(|_| given.strip_prefix(&self.given))
                .map_err(|_| ConfineError::Outside(path.to_owned()))?
        } else {
            given
        };
        // cap-std would refuse a climb out as well; saying so plainly gives a better message.
        let mut depth: i64 = 0;
        for part in rel.components() {
            match part {
                Utf8Component::ParentDir => depth -= 1,
                Utf8Component::Normal(_) => depth += 1,
                _ => {}
            }
            if depth < 0 {
                return Err(ConfineError::Outside(path.to_owned()));
            }
        }
        Ok(if rel.as_str().is_empty() {
            Utf8PathBuf::from(".")
        } else {
            rel.to_owned()
        })
    }

    /// Opens a file to read it. FIFOs and devices are opened without blocking, so that the
    /// caller can refuse them by their type.
    pub fn open_read(&self, path: &str) -> Result<(File, Utf8PathBuf), ConfineError> {
        let rel = self.relative(path)?;
        let mut options = OpenOptions::new();
        options.read(true).custom_flags(nix::libc::O_NONBLOCK);
        let file = self
            .dir
            .open_with(&rel, &options)
            .map_err(|e| classify(path, e))?
            .into_std();
        let real = self.check(path, &file, Access::Read)?;
        Ok((file, real))
    }

    /// Opens a directory to list or search it.
    pub fn open_dir(&self, path: &str) -> Result<(Dir, Utf8PathBuf), ConfineError> {
        let rel = self.relative(path)?;
        let dir = self.dir.open_dir(&rel).map_err(|e| classify(path, e))?;
        let real = self.check(path, &dir, Access::Read)?;
        Ok((dir, real))
    }

    /// Opens a file to write it, creating it and its folders when missing. The file is not
    /// truncated here: the caller does that once the path has passed every check (truncating on
    /// open would empty a protected file a symlink pointed to before the check could refuse it).
    /// Returns the file, its real path, and whether it existed.
    pub fn open_write(
        &self,
        path: &str,
        create: bool,
    ) -> Result<(File, Utf8PathBuf, bool), ConfineError> {
        let rel = self.relative(path)?;
        if has_git_part(&rel) {
            return Err(ConfineError::Git(path.to_owned()));
        }
        if create && let Some(parent) = rel.parent().filter(|p| !p.as_str().is_empty()) {
            self.create_dirs(path, parent)?;
        }
        let existed = self.dir.symlink_metadata(&rel).is_ok();
        let mut options = OpenOptions::new();
        options
            .read(true)
            .write(true)
            .create(create)
            .custom_flags(nix::libc::O_NONBLOCK);
        let file = self
            .dir
            .open_with(&rel, &options)
            .map_err(|e| classify(path, e))?
            .into_std();
        let real = self.check(path, &file, Access::Write)?;
        Ok((file, real, existed))
    }

    /// Creates the folders of `rel`, one at a time, checking each where it really is.
    fn create_dirs(&self, path: &str, rel: &Utf8Path) -> Result<(), ConfineError> {
        let mut so_far = Utf8PathBuf::new();
        for part in rel.components() {
            so_far.push(part.as_str());
            let dir = match self.dir.open_dir(&so_far) {
                Ok(dir) => dir,
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    match self.dir.create_dir(&so_far) {
                        Ok(()) => {}
                        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
                        Err(err) => return Err(classify(path, err)),
                    }
                    self.dir.open_dir(&so_far).map_err(|e| classify(path, e))?
                }
                Err(err) => return Err(classify(path, err)),
            };
            self.check(path, &dir, Access::Write)?;
        }
        Ok(())
    }

    /// Where an open file or directory really is, refused when it is somewhere tools may not go.
    fn check(
        &self,
        path: &str,
        opened: &impl AsRawFd,
        access: Access,
    ) -> Result<Utf8PathBuf, ConfineError> {
        let link = format!("/proc/self/fd/{}", opened.as_raw_fd());
        let real = std::fs::read_link(&link)
            .ok()
            .and_then(|p| Utf8PathBuf::from_path_buf(p).ok())
            .ok_or_else(|| ConfineError::Io {
                path: path.to_owned(),
                reason: "cannot tell where it is".into(),
            })?;
        self.check_real(path, &real, access)?;
        Ok(real)
    }

    /// Refuses a real path that is somewhere tools may not go.
    fn check_real(&self, path: &str, real: &Utf8Path, access: Access) -> Result<(), ConfineError> {
        let Ok(inside) = real.strip_prefix(&self.root) else {
            return Err(ConfineError::Outside(path.to_owned()));
        };
        if let Some(state) = &self.state_dir
            && real.starts_with(state)
        {
            return Err(ConfineError::State(path.to_owned()));
        }
        if let Some(cassettes) = &self.cassettes
            && real.starts_with(cassettes)
        {
            return Err(ConfineError::Cassettes(path.to_owned()));
        }
        if access == Access::Write && has_git_part(inside) {
            return Err(ConfineError::Git(path.to_owned()));
        }
        Ok(())
    }

    /// Whether a real path is one tools may read (used to filter walks).
    pub fn readable(&self, real: &Utf8Path) -> bool {
        real.starts_with(&self.root)
            && self
                .state_dir
                .as_ref()
                .is_none_or(|state| !real.starts_with(state))
            && self
                .cassettes
                .as_ref()
                .is_none_or(|dir| !real.starts_with(dir))
    }

    /// A path as the model should see it: relative to the root.
    pub fn display(&self, path: &Utf8Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_str().is_empty() => ".".into(),
            Ok(rel) => rel.to_string(),
            Err(_) => path.to_string(),
        }
    }
}

/// Whether any part of a path is `.git` (a checkout's git directory, or a worktree's `.git`
/// file). Compared without case: on a case-insensitive file system `.GIT` is the same.
pub fn has_git_part(path: &Utf8Path) -> bool {
    path.components()
        .any(|c| c.as_str().eq_ignore_ascii_case(".git"))
}

fn classify(path: &str, err: io::Error) -> ConfineError {
    if err.kind() == io::ErrorKind::NotFound {
        return ConfineError::NotFound(path.to_owned());
    }
    // cap-std reports a resolution that would leave the directory as PermissionDenied ("a path
    // led outside of the filesystem"); openat2 reports EXDEV.
    let text = err.to_string();
    if err.raw_os_error() == Some(nix::libc::EXDEV) || text.contains("outside") {
        return ConfineError::Outside(path.to_owned());
    }
    ConfineError::Io {
        path: path.to_owned(),
        reason: text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn workspace() -> (tempfile::TempDir, Workspace, Utf8PathBuf) {
        let outer = tempfile::tempdir().unwrap();
        let outer_path = Utf8PathBuf::from_path_buf(outer.path().canonicalize().unwrap()).unwrap();
        std::fs::create_dir_all(outer_path.join("work/src")).unwrap();
        std::fs::create_dir_all(outer_path.join("work/.git/hooks")).unwrap();
        std::fs::create_dir_all(outer_path.join("work/.runner/runs")).unwrap();
        std::fs::write(outer_path.join("work/src/a.rs"), "fn a() {}\n").unwrap();
        std::fs::write(outer_path.join("work/.git/config"), "[core]\n").unwrap();
        std::fs::write(outer_path.join("secret.txt"), "secret").unwrap();
        let root = outer_path.join("work");
        let ws = Workspace::new(&root)
            .unwrap()
            .with_state_dir(&root.join(".runner"));
        (outer, ws, outer_path)
    }

    fn read(ws: &Workspace, path: &str) -> Result<String, ConfineError> {
        let (mut file, _) = ws.open_read(path)?;
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        Ok(text)
    }

    #[test]
    fn paths_inside_open() {
        let (_dir, ws, _) = workspace();
        assert_eq!(read(&ws, "src/a.rs").unwrap(), "fn a() {}\n");
        assert_eq!(read(&ws, "src/../src/a.rs").unwrap(), "fn a() {}\n");
        let absolute = ws.root().join("src/a.rs");
        assert_eq!(read(&ws, absolute.as_str()).unwrap(), "fn a() {}\n");
        let (_, real, existed) = ws.open_write("new/dir/file.txt", true).unwrap();
        assert_eq!(real, ws.root().join("new/dir/file.txt"));
        assert!(!existed);
        assert_eq!(ws.open_dir(".").unwrap().1, ws.root());
        // .git can be read, not written.
        assert_eq!(read(&ws, ".git/config").unwrap(), "[core]\n");
    }

    #[test]
    fn escapes_are_refused() {
        let (_dir, ws, outer) = workspace();
        for path in [
            "../secret.txt",
            "/etc/passwd",
            "src/../../secret.txt",
            "missing/../../x",
        ] {
            assert!(
                matches!(ws.open_read(path), Err(ConfineError::Outside(_))),
                "{path} should be refused"
            );
        }
        assert!(ws.open_read(outer.join("secret.txt").as_str()).is_err());
        assert!(matches!(
            ws.open_write("../planted.txt", true),
            Err(ConfineError::Outside(_))
        ));
        assert!(!outer.join("planted.txt").exists());
    }

    #[test]
    fn git_and_the_state_directory_are_protected() {
        let (_dir, ws, _) = workspace();
        for path in [".git/config", ".git/hooks/pre-commit", "sub/.GIT/x", ".git"] {
            assert!(
                matches!(ws.open_write(path, true), Err(ConfineError::Git(_))),
                "{path}"
            );
        }
        assert!(matches!(
            ws.open_write(".runner/runs/99999999T999999-ffff/run.json", true),
            Err(ConfineError::State(_))
        ));
        assert!(matches!(
            ws.open_dir(".runner"),
            Err(ConfineError::State(_))
        ));
        // Through a symlink that hides the name: the real path is what counts.
        std::os::unix::fs::symlink(".git", ws.root().join("innocent")).unwrap();
        assert!(matches!(
            ws.open_write("innocent/config", true),
            Err(ConfineError::Git(_))
        ));
        std::os::unix::fs::symlink(".git/config", ws.root().join("cfg")).unwrap();
        assert!(matches!(
            ws.open_write("cfg", false),
            Err(ConfineError::Git(_))
        ));
        assert_eq!(
            std::fs::read_to_string(ws.root().join(".git/config")).unwrap(),
            "[core]\n",
            "a refused write must not have truncated the file"
        );
        std::os::unix::fs::symlink(".runner", ws.root().join("state")).unwrap();
        assert!(matches!(
            ws.open_read("state/runs"),
            Err(ConfineError::State(_))
        ));
    }

    /// Every path is opened one way and checked where the kernel says it is: through a symlink
    /// inside, by `.` and `..`, the state directory and the cassettes under any name.
    #[test]
    fn paths_are_checked_where_they_really_are() {
        let (_dir, ws, outer) = workspace();
        std::os::unix::fs::symlink("src", ws.root().join("code")).unwrap();
        assert_eq!(read(&ws, "code/a.rs").unwrap(), "fn a() {}\n");
        for path in ["src/a.rs", "./src/../src/./a.rs", "src", "."] {
            let (file, real) = ws.open_read(path).unwrap();
            let told = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).unwrap();
            assert_eq!(real.as_std_path(), told, "{path}");
        }
        for path in [
            ".runner",
            ".runner/runs",
            "src/../.runner/runs",
            "./.runner",
        ] {
            assert!(
                matches!(ws.open_read(path), Err(ConfineError::State(_))),
                "{path}"
            );
        }
        std::fs::create_dir_all(outer.join("work/tapes")).unwrap();
        std::fs::write(outer.join("work/tapes/t.json"), "{}").unwrap();
        let ws = ws.with_cassettes(&outer.join("work/tapes"));
        assert!(matches!(
            ws.open_read("src/../tapes/t.json"),
            Err(ConfineError::Cassettes(_))
        ));
    }

    #[test]
    fn symlinks_pointing_out_are_refused() {
        let (_dir, ws, outer) = workspace();
        std::os::unix::fs::symlink(outer.join("secret.txt"), ws.root().join("link.txt")).unwrap();
        std::os::unix::fs::symlink(&outer, ws.root().join("up")).unwrap();
        assert!(matches!(
            ws.open_read("link.txt"),
            Err(ConfineError::Outside(_))
        ));
        assert!(matches!(
            ws.open_read("up/secret.txt"),
            Err(ConfineError::Outside(_))
        ));
        assert!(matches!(
            ws.open_write("up/new.txt", true),
            Err(ConfineError::Outside(_))
        ));
        assert!(!outer.join("new.txt").exists());
        // A dangling link would create its target wherever it points.
        std::os::unix::fs::symlink(outer.join("planted.txt"), ws.root().join("dangling")).unwrap();
        assert!(ws.open_write("dangling", true).is_err());
        assert!(!outer.join("planted.txt").exists());
        // A relative link that stays inside is fine; an absolute one is refused even when it
        // points inside (resolution never leaves the directory handle).
        std::os::unix::fs::symlink("src", ws.root().join("code")).unwrap();
        assert_eq!(read(&ws, "code/a.rs").unwrap(), "fn a() {}\n");
        std::os::unix::fs::symlink(ws.root().join("src"), ws.root().join("abs")).unwrap();
        assert!(ws.open_read("abs/a.rs").is_err());
    }
}
