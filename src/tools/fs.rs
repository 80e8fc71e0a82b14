//! The file tools: `read_file`, `list_dir`, `write_file`, `edit_file`. Each takes the model's JSON
//! input and answers with text; failures are error results the model can act on, never panics.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use super::confine::Workspace;
use super::{Tool, ToolContext, ToolOutput, blocking, capped_lines, parse_input};

/// Lines `read_file` returns when no `limit` is given.
pub const READ_DEFAULT_LINES: usize = 2000;
/// Characters kept of one line.
pub const MAX_LINE_CHARS: usize = 2000;
/// Bytes of output any tool returns at most.
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;
/// Entries `list_dir` returns at most.
pub const MAX_DIR_ENTRIES: usize = 1000;

/// `read_file` (Claude Code: `Read`).
pub struct ReadFile;

impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }
    fn alias(&self) -> Option<&str> {
        Some("Read")
    }
    fn description(&self) -> &str {
        "Read a text file. Lines come numbered from 1. Long files are paged: pass `offset` (a line number) and `limit` to read more."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string", "description": "File path, relative to the working directory"},
            "offset": {"type": "integer", "minimum": 1, "description": "First line to read (1-based)"},
            "limit": {"type": "integer", "minimum": 1, "description": "Number of lines to read (default 2000)"}
        }, "required": ["path"]})
    }
    fn call<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        blocking(ctx, input, read_file)
    }
}

/// `list_dir` (Claude Code: `LS`).
pub struct ListDir;

impl Tool for ListDir {
    fn name(&self) -> &str {
        "list_dir"
    }
    fn alias(&self) -> Option<&str> {
        Some("LS")
    }
    fn description(&self) -> &str {
        "List the entries of a directory; directories end with `/`."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string", "description": "Directory, relative to the working directory (default: the working directory)"}
        }})
    }
    fn call<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        blocking(ctx, input, list_dir)
    }
}

/// `write_file` (Claude Code: `Write`).
pub struct WriteFile;

impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }
    fn alias(&self) -> Option<&str> {
        Some("Write")
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
    fn alias(&self) -> Option<&str> {
        Some("Edit")
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
struct ReadInput {
    path: String,
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    limit: Option<usize>,
}

/// Bytes `read_file` scans at most to count a file's lines; past this it says "more than".
pub const MAX_SCAN_BYTES: u64 = 64 << 20;
/// Bytes `edit_file` reads at most.
pub const MAX_EDIT_BYTES: u64 = 16 << 20;
/// Bytes looked at to tell a binary file (one with a NUL byte).
const BINARY_PROBE: usize = 8192;

/// One line of `reader` into `line` (without its newline), keeping at most `keep` bytes of it so
/// that a file without newlines cannot fill memory. `None` at the end of the file.
fn next_line(
    reader: &mut impl BufRead,
    keep: usize,
    line: &mut Vec<u8>,
) -> std::io::Result<Option<()>> {
    line.clear();
    let mut any = false;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(any.then_some(()));
        }
        any = true;
        let (part, used, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1, true),
            None => (buf, buf.len(), false),
        };
        let room = keep.saturating_sub(line.len());
        line.extend_from_slice(&part[..part.len().min(room)]);
        reader.consume(used);
        if done {
            return Ok(Some(()));
        }
    }
}

/// A file's lines, numbered from 1, from `offset` (a line number) for `limit` lines. Only
/// regular files are read, streamed: a huge file costs no more memory than the lines shown.
pub fn read_file(ws: &Workspace, input: &Value) -> ToolOutput {
    let input: ReadInput = match parse_input("read_file", input) {
        Ok(input) => input,
        Err(err) => return err,
    };
    let (file, _) = match ws.open_read(&input.path) {
        Ok(opened) => opened,
        Err(err) => return ToolOutput::error(err.to_string()),
    };
    let meta = match file.metadata() {
        Ok(meta) => meta,
        Err(err) => return ToolOutput::error(format!("cannot read `{}`: {err}", input.path)),
    };
    if meta.is_dir() {
        return ToolOutput::error(format!("`{}` is a directory; use list_dir", input.path));
    }
    if !meta.is_file() {
        return ToolOutput::error(format!(
            "`{}` is not a regular file (a FIFO, socket or device) and is not read",
            input.path
        ));
    }
    let mut reader = BufReader::with_capacity(64 << 10, file.take(MAX_SCAN_BYTES));
    match reader.fill_buf() {
        Ok(head) if head[..head.len().min(BINARY_PROBE)].contains(&0) => {
            return ToolOutput::error(format!(
                "`{}` is a binary file ({} bytes)",
                input.path,
                meta.len()
            ));
        }
        Ok(_) => {}
        Err(err) => return ToolOutput::error(format!("cannot read `{}`: {err}", input.path)),
    }
    if meta.len() == 0 {
        return ToolOutput::ok(format!("`{}` is empty", input.path));
    }
    let start = input.offset.unwrap_or(1).max(1);
    let limit = input.limit.unwrap_or(READ_DEFAULT_LINES).max(1);
    // Four bytes a character at most: enough to show MAX_LINE_CHARS of any line.
    let keep = MAX_LINE_CHARS * 4 + 4;
    let mut out = String::new();
    let mut line = Vec::new();
    let mut total = 0usize;
    let mut last = start - 1;
    let mut cut_lines = false;
    let mut full = false;
    loop {
        match next_line(&mut reader, keep, &mut line) {
            Ok(Some(())) => {}
            Ok(None) => break,
            Err(err) => return ToolOutput::error(format!("cannot read `{}`: {err}", input.path)),
        }
        total += 1;
        if total < start || full || total >= start + limit {
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches('\r');
        let shown: String = text.chars().take(MAX_LINE_CHARS).collect();
        let row = if shown.len() < text.len() || line.len() >= keep {
            cut_lines = true;
            format!("{total:>6}\t{shown} [line cut at {MAX_LINE_CHARS} characters]\n")
        } else {
            format!("{total:>6}\t{text}\n")
        };
        if out.len() + row.len() > MAX_OUTPUT_BYTES {
            full = true;
            continue;
        }
        out.push_str(&row);
        last = total;
    }
    // The scan stopped at MAX_SCAN_BYTES: there are more lines than counted.
    let scanned_all = reader.into_inner().limit() > 0;
    let of = if scanned_all {
        total.to_string()
    } else {
        format!("more than {total}")
    };
    if start > total {
        return ToolOutput::error(format!(
            "`{}` has {of} lines; offset {start} is past the end",
            input.path
        ));
    }
    if last < total || !scanned_all {
        out.push_str(&format!(
            "[showing lines {start}-{last} of {of}; read more with offset={}]\n",
            last + 1
        ));
    } else if cut_lines {
        out.push_str("[some long lines were cut]\n");
    }
    ToolOutput::ok(out)
}

#[derive(Deserialize)]
struct ListInput {
    #[serde(default)]
    path: Option<String>,
}

/// The entries of a directory, sorted, directories marked with a trailing `/`.
pub fn list_dir(ws: &Workspace, input: &Value) -> ToolOutput {
    let input: ListInput = match parse_input("list_dir", input) {
        Ok(input) => input,
        Err(err) => return err,
    };
    let shown = input.path.unwrap_or_else(|| ".".into());
    let (dir, real) = match ws.open_dir(&shown) {
        Ok(opened) => opened,
        Err(err) => return ToolOutput::error(err.to_string()),
    };
    let entries = match dir.entries() {
        Ok(entries) => entries,
        Err(err) => return ToolOutput::error(format!("cannot list `{shown}`: {err}")),
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            // runner's own state is not the model's business.
            if !ws.readable(&real.join(&name)) {
                return None;
            }
            let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
            Some(if is_dir { format!("{name}/") } else { name })
        })
        .collect();
    names.sort();
    if names.is_empty() {
        return ToolOutput::ok(format!("`{shown}` is empty"));
    }
    let total = names.len();
    capped_lines(names, MAX_DIR_ENTRIES, total, "use glob to narrow")
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
        Err(err) => return ToolOutput::error(err.to_string()),
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
        Err(err) => return ToolOutput::error(err.to_string()),
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
        std::fs::write(dir.path().join("outside.txt"), "secret").unwrap();
        let ws = Workspace::new(&root).unwrap();
        (dir, ws)
    }

    #[test]
    fn read_file_numbers_lines_and_pages() {
        let (_d, ws) = workspace();
        let out = read_file(&ws, &json!({"path": "src/lib.rs"}));
        assert_eq!(
            out,
            ToolOutput::ok("     1\tone\n     2\ttwo\n     3\tthree\n")
        );
        let page = read_file(&ws, &json!({"path": "src/lib.rs", "offset": 2, "limit": 1}));
        assert_eq!(
            page.text,
            "     2\ttwo\n[showing lines 2-2 of 3; read more with offset=3]\n"
        );
        assert!(read_file(&ws, &json!({"path": "src/lib.rs", "offset": 9})).is_error);
    }

    #[test]
    fn read_file_refuses_escapes_binaries_and_bad_input() {
        let (_d, ws) = workspace();
        let out = read_file(&ws, &json!({"path": "../outside.txt"}));
        assert!(out.is_error);
        assert!(out.text.contains("outside the working directory"));
        std::fs::write(ws.root().join("bin"), [0u8, 1, 2]).unwrap();
        assert!(
            read_file(&ws, &json!({"path": "bin"}))
                .text
                .contains("binary")
        );
        assert!(
            read_file(&ws, &json!({"file": "x"}))
                .text
                .contains("invalid input")
        );
    }

    #[test]
    fn long_lines_and_large_files_are_capped() {
        let (_d, ws) = workspace();
        std::fs::write(ws.root().join("wide"), "x".repeat(5000)).unwrap();
        let out = read_file(&ws, &json!({"path": "wide"}));
        assert!(out.text.contains("[line cut at 2000 characters]"));
        let many: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(ws.root().join("long"), many).unwrap();
        let out = read_file(&ws, &json!({"path": "long"}));
        assert!(
            out.text
                .ends_with("[showing lines 1-2000 of 5000; read more with offset=2001]\n")
        );
    }

    #[test]
    fn list_dir_sorts_and_marks_directories() {
        let (_d, ws) = workspace();
        std::fs::write(ws.root().join("b.txt"), "").unwrap();
        assert_eq!(list_dir(&ws, &json!({})).text, "b.txt\nsrc/\n");
        assert_eq!(list_dir(&ws, &json!({"path": "src"})).text, "lib.rs\n");
        assert!(list_dir(&ws, &json!({"path": ".."})).is_error);
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
