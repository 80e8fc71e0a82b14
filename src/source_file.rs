//! A file's name and text, shared by every diagnostic about it. Low in the tree: the
//! diagnostics (`error.rs`) quote it, and the loaders (`workflow/source.rs`) make it, without
//! either depending on the other.

use std::sync::Arc;

use camino::Utf8PathBuf;

/// A file's name (as the user wrote it) and its text; shared by every diagnostic about it.
#[derive(Debug)]
pub struct SourceFile {
    pub name: Utf8PathBuf,
    pub text: String,
}

impl SourceFile {
    pub fn new(name: impl Into<Utf8PathBuf>, text: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            text: text.into(),
        })
    }
}
