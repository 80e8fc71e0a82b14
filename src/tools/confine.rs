//! Path confinement: every path a tool touches must resolve, symlinks followed, inside the step's
//! working directory.

use camino::{Utf8Component, Utf8Path, Utf8PathBuf};

/// The directory a step works in, canonicalized once.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: Utf8PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfineError {
    #[error("`{0}` is outside the working directory")]
    Outside(String),
    #[error("cannot resolve `{path}`: {reason}")]
    Unresolvable { path: String, reason: String },
}

impl Workspace {
    pub fn new(root: &Utf8Path) -> std::io::Result<Self> {
        Ok(Self {
            root: root.canonicalize_utf8()?,
        })
    }

    pub fn root(&self) -> &Utf8Path {
        &self.root
    }

    /// Resolves `path` (relative to the root, or absolute) to a real path inside the root. The
    /// part that exists is canonicalized (following symlinks); the part that does not yet exist
    /// (a file about to be written) may not climb with `..`.
    pub fn resolve(&self, path: &str) -> Result<Utf8PathBuf, ConfineError> {
        let given = Utf8Path::new(path);
        let joined = if given.is_absolute() {
            given.to_owned()
        } else {
            self.root.join(given)
        };
        // Walk down from the full path to the deepest ancestor that exists.
        let mut existing = joined.as_path();
        let mut rest: Vec<&str> = Vec::new();
        let real = loop {
            match existing.canonicalize_utf8() {
                Ok(real) => break real,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    // A dangling symlink: writing through it would create its target, wherever
                    // that is.
                    if existing.symlink_metadata().is_ok() {
                        return Err(ConfineError::Outside(path.to_owned()));
                    }
                    let Some(name) = existing.file_name() else {
                        return Err(ConfineError::Outside(path.to_owned()));
                    };
                    rest.push(name);
                    existing = existing
                        .parent()
                        .ok_or_else(|| ConfineError::Outside(path.to_owned()))?;
                }
                Err(err) => {
                    return Err(ConfineError::Unresolvable {
                        path: path.to_owned(),
                        reason: err.to_string(),
                    });
                }
            }
        };
        let mut resolved = real;
        for name in rest.iter().rev() {
            match Utf8Path::new(name).components().next() {
                Some(Utf8Component::Normal(_)) => resolved.push(name),
                _ => return Err(ConfineError::Outside(path.to_owned())),
            }
        }
        if resolved.starts_with(&self.root) {
            Ok(resolved)
        } else {
            Err(ConfineError::Outside(path.to_owned()))
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace, Utf8PathBuf) {
        let outer = tempfile::tempdir().unwrap();
        let outer_path = Utf8PathBuf::from_path_buf(outer.path().to_owned()).unwrap();
        std::fs::create_dir_all(outer_path.join("work/src")).unwrap();
        std::fs::write(outer_path.join("work/src/a.rs"), "fn a() {}\n").unwrap();
        std::fs::write(outer_path.join("secret.txt"), "secret").unwrap();
        let ws = Workspace::new(&outer_path.join("work")).unwrap();
        (outer, ws, outer_path)
    }

    #[test]
    fn paths_inside_resolve() {
        let (_dir, ws, _) = workspace();
        assert_eq!(ws.resolve("src/a.rs").unwrap(), ws.root().join("src/a.rs"));
        assert_eq!(
            ws.resolve("src/../src/a.rs").unwrap(),
            ws.root().join("src/a.rs")
        );
        assert_eq!(
            ws.resolve("new/dir/file.txt").unwrap(),
            ws.root().join("new/dir/file.txt")
        );
        assert_eq!(ws.resolve(".").unwrap(), ws.root());
        let absolute = ws.root().join("src/a.rs");
        assert_eq!(ws.resolve(absolute.as_str()).unwrap(), absolute);
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
                matches!(ws.resolve(path), Err(ConfineError::Outside(_))),
                "{path} should be refused"
            );
        }
        assert!(ws.resolve(outer.join("secret.txt").as_str()).is_err());
    }

    #[test]
    fn symlinks_pointing_out_are_refused() {
        let (_dir, ws, outer) = workspace();
        std::os::unix::fs::symlink(outer.join("secret.txt"), ws.root().join("link.txt")).unwrap();
        std::os::unix::fs::symlink(&outer, ws.root().join("up")).unwrap();
        assert!(matches!(
            ws.resolve("link.txt"),
            Err(ConfineError::Outside(_))
        ));
        assert!(matches!(
            ws.resolve("up/secret.txt"),
            Err(ConfineError::Outside(_))
        ));
        // A file to be created through a link that leads out is refused too.
        assert!(matches!(
            ws.resolve("up/new.txt"),
            Err(ConfineError::Outside(_))
        ));
        // A dangling link would create its target wherever it points.
        std::os::unix::fs::symlink(outer.join("planted.txt"), ws.root().join("dangling")).unwrap();
        assert!(matches!(
            ws.resolve("dangling"),
            Err(ConfineError::Outside(_))
        ));
        // A link that stays inside is fine.
        std::os::unix::fs::symlink(ws.root().join("src"), ws.root().join("code")).unwrap();
        assert_eq!(ws.resolve("code/a.rs").unwrap(), ws.root().join("src/a.rs"));
    }
}
