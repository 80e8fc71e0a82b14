//! The confined writer (docs/src/security.md, "What runner writes"): every file and folder runner
//! writes goes through [`OutDir`], which follows no link it did not make.
//!
//! - A path inside the working directory (relative, or absolute under it) is walked from the
//!   working directory one folder at a time, each opened with `O_NOFOLLOW` through cap-std: a
//!   folder on the way that is a link is refused, whatever it points at.
//! - A path outside it (`$RUNNER_TEMP/junit.xml`) is the user's choice: the folders above it are
//!   taken as named, but a folder runner writes into (`--record DIR`) that is a link is refused.
//! - A file is written beside its place under a new name (`O_EXCL`) and renamed over it, so a
//!   link planted where it goes is replaced, never followed; a file appended to (a transcript,
//!   the GitHub job summary) is opened with `O_NOFOLLOW` and must be a regular file.
//!
//! What is written goes through [`Redacting`]: there is no other way to a file here.

use std::fs::File;
use std::io::{self, Write};

use camino::{Utf8Component, Utf8Path, Utf8PathBuf};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt as _};
use nix::libc;

use super::{Redacted, Redacting};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutError {
    #[error(
        "cannot write `{path}`: `{link}` is a symbolic link, and runner writes through no link (remove it, or name another path)"
    )]
    Link { path: String, link: String },
    #[error("cannot write `{path}`: {reason}")]
    Io { path: String, reason: String },
}

impl OutError {
    fn io(path: &Utf8Path, err: &io::Error) -> Self {
        OutError::Io {
            path: path.to_string(),
            reason: err.to_string(),
        }
    }
}

/// A real folder runner writes into, opened without following a link.
#[derive(Debug)]
pub struct OutDir {
    pub(super) dir: Dir,
    pub(super) path: Utf8PathBuf,
}

impl OutDir {
    /// The folder `path`, made when missing (see the module comment for what may be a link).
    pub fn open(path: &Utf8Path) -> Result<OutDir, OutError> {
        locate(path, false)
    }

    /// Another handle on the same folder.
    pub fn try_clone(&self) -> Result<OutDir, OutError> {
        Ok(OutDir {
            dir: self
                .dir
                .try_clone()
                .map_err(|e| OutError::io(&self.path, &e))?,
            path: self.path.clone(),
        })
    }

    /// Where it is, as named.
    pub fn path(&self) -> &Utf8Path {
        &self.path
    }

    /// The folder `rel` (one or more plain names) inside this one, made when missing; no part
    /// of it may be a link.
    pub fn sub(&self, rel: &str) -> Result<OutDir, OutError> {
        let mut dir = self
            .dir
            .try_clone()
            .map_err(|e| OutError::io(&self.path, &e))?;
        let mut path = self.path.clone();
        for part in Utf8Path::new(rel).components() {
            let name = plain(part, &self.path.join(rel))?;
            path.push(name);
            dir = child(&dir, name, &path)?;
        }
        Ok(OutDir { dir, path })
    }

    /// A new file `name` in this folder, put in place by [`OutFile::commit`].
    pub fn create(&self, name: &str) -> Result<OutFile, OutError> {
        let (file, dir, tmp, path) = self.fresh(name)?;
        Ok(OutFile {
            file: Some(Redacting::new(file)),
            dir,
            tmp,
            name: name.to_owned(),
            path,
        })
    }

    /// Writes the file `name` whole (see [`OutDir::create`]).
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<(), OutError> {
        let mut file = self.create(name)?;
        file.write_all(bytes)
            .map_err(|e| OutError::io(&file.path, &e))?;
        file.commit()
    }

    /// Writes the file `name` whole with exactly the bytes of `text`, which the redactor has
    /// been over already: what is written is what the caller holds (a record sealed over its
    /// bytes as written).
    pub fn write_redacted(&self, name: &str, text: &Redacted) -> Result<(), OutError> {
        let (mut file, dir, tmp, path) = self.fresh(name)?;
        let mut put = OutFile {
            file: None,
            dir,
            tmp,
            name: name.to_owned(),
            path,
        };
        file.write_all(text.as_bytes())
            .and_then(|()| file.flush())
            .map_err(|e| OutError::io(&put.path, &e))?;
        drop(file);
        put.rename()
    }

    /// A new temporary file beside `name` (`O_EXCL`, a fresh random name): the file, this
    /// folder, the temporary name and where `name` is.
    fn fresh(&self, name: &str) -> Result<(File, Dir, String, Utf8PathBuf), OutError> {
        let path = self.path.join(name);
        plain_name(name, &path)?;
        let dir = self.dir.try_clone().map_err(|e| OutError::io(&path, &e))?;
        let mut options = OpenOptions::new();
        // O_EXCL: a fresh name, never an existing file or link.
        options.write(true).create_new(true);
        for _ in 0..16 {
            let tmp = format!(".{name}.{:016x}.tmp", rand::random::<u64>());
            match dir.open_with(&tmp, &options) {
                Ok(file) => return Ok((file.into_std(), dir, tmp, path)),
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(err) => return Err(OutError::io(&path, &err)),
            }
        }
        Err(OutError::Io {
            path: path.to_string(),
            reason: "no free temporary name beside it".into(),
        })
    }

    /// The file `name`, opened to append to (made when missing): a link there is refused, and
    /// so is anything but a regular file.
    pub fn append(&self, name: &str) -> Result<Redacting<File>, OutError> {
        let path = self.path.join(name);
        plain_name(name, &path)?;
        match self.dir.symlink_metadata(name) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(OutError::Link {
                    path: path.to_string(),
                    link: path.to_string(),
                });
            }
            Ok(meta) if !meta.is_file() => {
                return Err(OutError::Io {
                    path: path.to_string(),
                    reason: "it is not a regular file".into(),
                });
            }
            _ => {}
        }
        let mut options = OpenOptions::new();
        options
            .append(true)
            .create(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
        let file = self
            .dir
            .open_with(name, &options)
            .map_err(|e| link_or_io(&self.dir, name, &path, &path, &e))?
            .into_std();
        let regular = file.metadata().is_ok_and(|m| m.is_file());
        if !regular {
            return Err(OutError::Io {
                path: path.to_string(),
                reason: "it is not a regular file".into(),
            });
        }
        Ok(Redacting::new(file))
    }

    /// Whether the entry `name` exists here (a link counts, and is not followed).
    pub fn has(&self, name: &str) -> bool {
        self.dir.symlink_metadata(name).is_ok()
    }
}

/// A file being written: its bytes go to a temporary file beside its place, through the
/// redactor; [`OutFile::commit`] renames it into place. Dropped without a commit, it is removed.
pub struct OutFile {
    file: Option<Redacting<File>>,
    dir: Dir,
    tmp: String,
    name: String,
    path: Utf8PathBuf,
}

impl OutFile {
    /// Writes out what is held and renames the file into place, replacing what was there (a
    /// link is replaced, not followed).
    pub fn commit(mut self) -> Result<(), OutError> {
        let mut file = self.file.take().ok_or_else(|| OutError::Io {
            path: self.path.to_string(),
            reason: "written twice".into(),
        })?;
        file.finish().map_err(|e| OutError::io(&self.path, &e))?;
        drop(file);
        self.rename()
    }

    /// Renames the temporary file over `name` (a link there is replaced, not followed).
    fn rename(&mut self) -> Result<(), OutError> {
        self.dir
            .rename(&self.tmp, &self.dir, &self.name)
            .map_err(|e| OutError::io(&self.path, &e))?;
        self.tmp.clear();
        Ok(())
    }

    pub fn path(&self) -> &Utf8Path {
        &self.path
    }
}

impl Write for OutFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.file {
            Some(file) => file.write(buf),
            None => Err(io::Error::other("the file was already put in place")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.file {
            Some(file) => file.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for OutFile {
    fn drop(&mut self) {
        if !self.tmp.is_empty() {
            self.file = None;
            let _ = self.dir.remove_file(&self.tmp);
        }
    }
}

/// Writes the file `path` whole, confined as the module comment says.
pub fn write_file(path: &Utf8Path, bytes: &[u8]) -> Result<(), OutError> {
    let (dir, name) = parent(path)?;
    dir.write(name, bytes)
}

/// The file `path`, to write whole (see [`OutDir::create`]).
pub fn create_file(path: &Utf8Path) -> Result<OutFile, OutError> {
    let (dir, name) = parent(path)?;
    dir.create(name)
}

/// The file `path`, to append to (see [`OutDir::append`]).
pub fn append_file(path: &Utf8Path) -> Result<Redacting<File>, OutError> {
    let (dir, name) = parent(path)?;
    dir.append(name)
}

/// The folder the file `path` goes into (made now), and its name: for a file written later
/// whose place should be refused before any work is done.
pub fn file_place(path: &Utf8Path) -> Result<(OutDir, String), OutError> {
    let (dir, name) = parent(path)?;
    plain_name(name, path)?;
    Ok((dir, name.to_owned()))
}

/// The folder a file goes into, and the file's name.
fn parent(path: &Utf8Path) -> Result<(OutDir, &str), OutError> {
    let name = path.file_name().ok_or_else(|| OutError::Io {
        path: path.to_string(),
        reason: "it names no file".into(),
    })?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_str().is_empty() => dir,
        _ => Utf8Path::new("."),
    };
    let dir = locate(dir, true).map_err(|err| named(err, path))?;
    Ok((dir, name))
}

/// The folder `path`: under the working directory, walked from it with no link followed;
/// elsewhere, the folders above it as named and (unless `follow_last`) it itself no link.
fn locate(path: &Utf8Path, follow_last: bool) -> Result<OutDir, OutError> {
    let cwd = std::env::current_dir()
        .ok()
        .and_then(|d| Utf8PathBuf::from_path_buf(d).ok())
        .ok_or_else(|| OutError::Io {
            path: path.to_string(),
            reason: "the working directory cannot be read".into(),
        })?;
    let absolute = normalize(&cwd.join(path));
    let inside = working_dirs(&cwd)
        .into_iter()
        .find_map(|base| absolute.strip_prefix(&base).ok().map(Utf8Path::to_owned));
    if let Some(rel) = inside {
        let dir =
            Dir::open_ambient_dir(&cwd, ambient_authority()).map_err(|e| OutError::io(path, &e))?;
        let root = OutDir {
            dir,
            path: Utf8PathBuf::new(),
        };
        let mut out = root.sub(rel.as_str()).map_err(|err| named(err, path))?;
        out.path = path.to_owned();
        return Ok(out);
    }
    let (above, last) = match (absolute.parent(), absolute.file_name()) {
        (Some(above), Some(last)) if !follow_last => (above.to_owned(), Some(last)),
        _ => (absolute.clone(), None),
    };
    // The user's own folders, outside the checkout: made and taken as named.
    std::fs::create_dir_all(&above).map_err(|e| OutError::io(path, &e))?;
    let dir =
        Dir::open_ambient_dir(&above, ambient_authority()).map_err(|e| OutError::io(path, &e))?;
    let mut out = OutDir { dir, path: above };
    if let Some(last) = last {
        out = out.sub(last).map_err(|err| named(err, path))?;
    }
    out.path = path.to_owned();
    Ok(out)
}

/// The error said of `path` as the user named it.
fn named(err: OutError, path: &Utf8Path) -> OutError {
    match err {
        OutError::Link { link, .. } => OutError::Link {
            path: path.to_string(),
            link,
        },
        OutError::Io { reason, .. } => OutError::Io {
            path: path.to_string(),
            reason,
        },
    }
}

/// The working directory as the kernel names it, and as the shell does (`$PWD`, which may
/// differ by a link above the checkout) when that is the same directory.
fn working_dirs(cwd: &Utf8Path) -> Vec<Utf8PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let mut dirs = vec![cwd.to_owned()];
    if let Ok(pwd) = std::env::var("PWD") {
        let same = |a: &str, b: &Utf8Path| match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        };
        if pwd.starts_with('/') && pwd != cwd.as_str() && same(&pwd, cwd) {
            dirs.push(normalize(Utf8Path::new(&pwd)));
        }
    }
    dirs
}

/// `path` with `.` dropped and `..` taking off the name before it, by the text alone: what
/// the user typed, never where a link would lead.
fn normalize(path: &Utf8Path) -> Utf8PathBuf {
    let mut out = Utf8PathBuf::new();
    for part in path.components() {
        match part {
            Utf8Component::CurDir => {}
            Utf8Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_str()),
        }
    }
    out
}

/// One plain name of a relative path.
fn plain<'a>(part: Utf8Component<'a>, path: &Utf8Path) -> Result<&'a str, OutError> {
    match part {
        Utf8Component::Normal(name) => Ok(name),
        _ => Err(OutError::Io {
            path: path.to_string(),
            reason: format!("`{part}` is not a plain folder name"),
        }),
    }
}

fn plain_name(name: &str, path: &Utf8Path) -> Result<(), OutError> {
    let mut parts = Utf8Path::new(name).components();
    match (parts.next(), parts.next()) {
        (Some(Utf8Component::Normal(_)), None) => Ok(()),
        _ => Err(OutError::Io {
            path: path.to_string(),
            reason: format!("`{name}` is not a plain file name"),
        }),
    }
}

/// The folder `name` inside `dir`, made when missing, opened with `O_NOFOLLOW`.
fn child(dir: &Dir, name: &str, path: &Utf8Path) -> Result<Dir, OutError> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW);
    let open = || dir.open_with(name, &options);
    let opened = match open() {
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            match dir.create_dir(name) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
                Err(err) => return Err(OutError::io(path, &err)),
            }
            open()
        }
        other => other,
    };
    opened
        .map(|file| Dir::from_std_file(file.into_std()))
        .map_err(|err| link_or_io(dir, name, path, path, &err))
}

/// A link where a real folder or file must be, else what went wrong.
fn link_or_io(dir: &Dir, name: &str, whole: &Utf8Path, at: &Utf8Path, err: &io::Error) -> OutError {
    let is_link = dir
        .symlink_metadata(name)
        .is_ok_and(|m| m.file_type().is_symlink());
    if is_link || err.raw_os_error() == Some(libc::ELOOP) {
        return OutError::Link {
            path: whole.to_string(),
            link: at.to_string(),
        };
    }
    match err.raw_os_error() {
        Some(libc::ENOTDIR) => OutError::Io {
            path: whole.to_string(),
            reason: format!("`{at}` is not a folder"),
        },
        _ => OutError::io(whole, err),
    }
}

#[cfg(test)]
pub(super) fn normalize_for_tests(path: &Utf8Path) -> Utf8PathBuf {
    normalize(path)
}
