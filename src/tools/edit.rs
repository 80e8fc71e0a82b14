//! The writing file tools: `write_file` and `edit_file`. Paths are opened beneath the working
//! directory and checked where they really are before anything is changed (see
//! [`super::confine`]).

use std::io::{Read, Seek, SeekFrom, Write};

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use super::confine::Workspace;
use super::{Tool, ToolContext, ToolOutput, blocking, parse_input};

/// Bytes `edit_file` reads at most.
pub const MAX_EDIT_BYTES: u64 = 16 << 20;

/// `write_file` (Claude Code: `Write`).
pub struct WriteFile;

impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }
    fn aliases(&self) -> &[&str] {
        &["Write"]
    }
    fn description(&self) -> &str {
        "Create a file, or overwrite it, with the given content. Missing folders are created."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string"},
            "content": {"type": "string"}
        }, "required": ["path", "content"]})
    }
    fn writes(&self) -> bool {
        true
    }
    fn call<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        blocking(ctx, input, write_file)
    }
}

/// `edit_file` (Claude Code: `Edit`).
pub struct EditFile;

impl Tool for EditFile {
    fn name(&self) -> &str {
        "edit_file"
    }
    fn aliases(&self) -> &[&str] {
        &["Edit"]
    }
    fn description(&self) -> &str {
        "Replace `old_string` with `new_string` in a file. `old_string` must occur exactly once unless `replace_all` is true; copy it exactly, whitespace included."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string"},
            "old_string": {"type": "string"},
            "new_string": {"type": "string"},
            "replace_all": {"type": "boolean"}
        }, "required": ["path", "old_string", "new_string"]})
    }
    fn writes(&self) -> bool {
        true
    }
    fn call<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        blocking(ctx, input, edit_file)
    }
}

#[derive(Deserialize)]
struct WriteInput {
    path: String,
    content: String,
}

/// Creates or overwrites a file, creating missing parent directories.
pub fn write_file(ws: &Workspace, input: &Value) -> ToolOutput {
    let input: WriteInput = match parse_input("write_file", input) {
        Ok(input) => input,
        Err(err) => return err,
    };
    if let Ok(rel) = ws.relative(&input.path)
        && ws.dir().is_dir(&rel)
    {
        return ToolOutput::error(format!("`{}` is a directory", input.path));
    }
    let (mut file, real, existed) = match ws.open_write(&input.path, true) {
        Ok(opened) => opened,
        Err(err) => return ToolOutput::from(err),
    };
    if let Err(err) = replace_contents(&mut file, input.content.as_bytes()) {
        return ToolOutput::error(format!("cannot write `{}`: {err}", input.path));
    }
    ToolOutput::ok(format!(
        "{} `{}` ({} bytes)",
        if existed { "overwrote" } else { "created" },
        ws.display(&real),
        input.content.len()
    ))
}

/// Replaces what an open regular file holds.
fn replace_contents(file: &mut std::fs::File, contents: &[u8]) -> std::io::Result<()> {
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(contents)
}

#[derive(Deserialize)]
struct EditInput {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

/// Replaces an exact, unique `old_string` (or every one, with `replace_all`).
pub fn edit_file(ws: &Workspace, input: &Value) -> ToolOutput {
    let input: EditInput = match parse_input("edit_file", input) {
        Ok(input) => input,
        Err(err) => return err,
    };
    if input.old_string.is_empty() {
        return ToolOutput::error("`old_string` is empty; use write_file to create a file");
    }
    if input.old_string == input.new_string {
        return ToolOutput::error("`old_string` and `new_string` are the same; nothing to change");
    }
    let (mut file, real, _) = match ws.open_write(&input.path, false) {
        Ok(opened) => opened,
        Err(err) => return ToolOutput::from(err),
    };
    let text = match read_limited(&mut file, MAX_EDIT_BYTES) {
        Ok(text) => text,
        Err(err) => return ToolOutput::error(format!("cannot read `{}`: {err}", input.path)),
    };
    let count = text.matches(&input.old_string).count();
    let updated = match (count, input.replace_all) {
        (0, _) => {
            return ToolOutput::error(format!(
                "`old_string` was not found in `{}`; read the file and copy the text exactly, whitespace included",
                input.path
            ));
        }
        (1, _) | (_, true) => text.replace(&input.old_string, &input.new_string),
        (n, false) => {
            return ToolOutput::error(format!(
                "`old_string` occurs {n} times in `{}`; include more surrounding text to make it unique, or set replace_all",
                input.path
            ));
        }
    };
    match replace_contents(&mut file, updated.as_bytes()) {
        Ok(()) => ToolOutput::ok(format!(
            "replaced {count} occurrence{} in `{}`",
            if count == 1 { "" } else { "s" },
            ws.display(&real)
        )),
        Err(err) => ToolOutput::error(format!("cannot write `{}`: {err}", input.path)),
    }
}

/// An open regular file's text, refused past `limit` bytes.
fn read_limited(file: &mut std::fs::File, limit: u64) -> std::io::Result<String> {
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > limit {
        return Err(std::io::Error::other(format!(
            "it is larger than {}",
            crate::limits::bytes(limit)
        )));
    }
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes)?;
    String::from_utf8(bytes).map_err(|_| std::io::Error::other("it is not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use camino::Utf8PathBuf;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().join("work")).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "one\ntwo\nthree\n").unwrap();
        let ws = Workspace::new(&root).unwrap();
        (dir, ws)
    }

    #[test]
    fn write_file_creates_folders_and_stays_inside() {
        let (dir, ws) = workspace();
        let out = write_file(&ws, &json!({"path": "new/deep/f.txt", "content": "hi"}));
        assert_eq!(out, ToolOutput::ok("created `new/deep/f.txt` (2 bytes)"));
        assert_eq!(
            std::fs::read_to_string(ws.root().join("new/deep/f.txt")).unwrap(),
            "hi"
        );
        let out = write_file(&ws, &json!({"path": "../planted.txt", "content": "x"}));
        assert!(out.is_error);
        assert!(!dir.path().join("planted.txt").exists());
    }

    #[test]
    fn edit_file_needs_a_unique_match_unless_replace_all() {
        let (_d, ws) = workspace();
        std::fs::write(ws.root().join("f"), "a b a").unwrap();
        let twice = edit_file(
            &ws,
            &json!({"path": "f", "old_string": "a", "new_string": "c"}),
        );
        assert!(twice.is_error && twice.text.contains("occurs 2 times"));
        let missing = edit_file(
            &ws,
            &json!({"path": "f", "old_string": "z", "new_string": "c"}),
        );
        assert!(missing.is_error && missing.text.contains("not found"));
        let one = edit_file(
            &ws,
            &json!({"path": "f", "old_string": "b", "new_string": "B"}),
        );
        assert_eq!(one, ToolOutput::ok("replaced 1 occurrence in `f`"));
        let all = edit_file(
            &ws,
            &json!({"path": "f", "old_string": "a", "new_string": "c", "replace_all": true}),
        );
        assert_eq!(all.text, "replaced 2 occurrences in `f`");
        assert_eq!(
            std::fs::read_to_string(ws.root().join("f")).unwrap(),
            "c B c"
        );
    }
}
