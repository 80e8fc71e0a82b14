//! The file tools: `read_file`, `list_dir`, `write_file`, `edit_file`. Each takes the model's JSON
//! input and answers with text; failures are error results the model can act on, never panics.

use camino::Utf8PathBuf;
use serde::Deserialize;
use serde_json::Value;

use super::confine::Workspace;

/// Lines `read_file` returns when no `limit` is given.
pub const READ_DEFAULT_LINES: usize = 2000;
/// Characters kept of one line.
pub const MAX_LINE_CHARS: usize = 2000;
/// Bytes of output any tool returns at most.
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;
/// Entries `list_dir` returns at most.
pub const MAX_DIR_ENTRIES: usize = 1000;

/// What a tool call answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub text: String,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: false,
        }
    }

    pub fn error(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: true,
        }
    }
}

/// One line per item, at most `limit` of `total`, then `note` when some were left out.
pub(crate) fn capped_lines(
    items: impl IntoIterator<Item = String>,
    limit: usize,
    total: usize,
    note: &str,
) -> ToolOutput {
    let mut out: String = items
        .into_iter()
        .take(limit)
        .map(|line| format!("{line}\n"))
        .collect();
    if total > limit {
        out.push_str(&format!("[showing {limit} of {total}; {note}]\n"));
    }
    ToolOutput::ok(out)
}

pub(crate) fn parse_input<T: for<'de> Deserialize<'de>>(
    tool: &str,
    input: &Value,
) -> Result<T, ToolOutput> {
    serde_json::from_value(input.clone())
        .map_err(|err| ToolOutput::error(format!("invalid input for `{tool}`: {err}")))
}

/// Input with a `path`, for [`parse_with_path`].
trait HasPath {
    fn path(&self) -> &str;
}

/// Parses a tool's input and confines its `path`.
fn parse_with_path<T: for<'de> Deserialize<'de> + HasPath>(
    tool: &str,
    ws: &Workspace,
    input: &Value,
) -> Result<(T, Utf8PathBuf), ToolOutput> {
    let input: T = parse_input(tool, input)?;
    let path = ws
        .resolve(input.path())
        .map_err(|err| ToolOutput::error(err.to_string()))?;
    Ok((input, path))
}

macro_rules! has_path {
    ($($t:ty),*) => { $(impl HasPath for $t { fn path(&self) -> &str { &self.path } })* };
}
has_path!(ReadInput, WriteInput, EditInput);

#[derive(Deserialize)]
struct ReadInput {
    path: String,
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    limit: Option<usize>,
}

/// A file's lines, numbered from 1, from `offset` (a line number) for `limit` lines.
pub fn read_file(ws: &Workspace, input: &Value) -> ToolOutput {
    let (input, path) = match parse_with_path::<ReadInput>("read_file", ws, input) {
        Ok(parsed) => parsed,
        Err(err) => return err,
    };
    if path.is_dir() {
        return ToolOutput::error(format!("`{}` is a directory; use list_dir", input.path));
    }
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) => return ToolOutput::error(format!("cannot read `{}`: {err}", input.path)),
    };
    if bytes[..bytes.len().min(8192)].contains(&0) {
        return ToolOutput::error(format!(
            "`{}` is a binary file ({} bytes)",
            input.path,
            bytes.len()
        ));
    }
    let text = String::from_utf8_lossy(&bytes);
    if text.is_empty() {
        return ToolOutput::ok(format!("`{}` is empty", input.path));
    }
    let total = text.lines().count();
    let start = input.offset.unwrap_or(1).max(1);
    if start > total {
        return ToolOutput::error(format!(
            "`{}` has {total} lines; offset {start} is past the end",
            input.path
        ));
    }
    let limit = input.limit.unwrap_or(READ_DEFAULT_LINES).max(1);
    let mut out = String::new();
    let mut last = start - 1;
    let mut cut_lines = false;
    for (i, line) in text.lines().enumerate().skip(start - 1).take(limit) {
        let shown: String = line.chars().take(MAX_LINE_CHARS).collect();
        let row = if shown.len() < line.len() {
            cut_lines = true;
            format!(
                "{:>6}\t{shown} [line cut at {MAX_LINE_CHARS} characters]\n",
                i + 1
            )
        } else {
            format!("{:>6}\t{line}\n", i + 1)
        };
        if out.len() + row.len() > MAX_OUTPUT_BYTES {
            break;
        }
        out.push_str(&row);
        last = i + 1;
    }
    if last < total {
        out.push_str(&format!(
            "[showing lines {start}-{last} of {total}; read more with offset={}]\n",
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
    let path = match ws.resolve(&shown) {
        Ok(path) => path,
        Err(err) => return ToolOutput::error(err.to_string()),
    };
    let entries = match path.read_dir_utf8() {
        Ok(entries) => entries,
        Err(err) => return ToolOutput::error(format!("cannot list `{shown}`: {err}")),
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| {
            let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if is_dir {
                format!("{}/", e.file_name())
            } else {
                e.file_name().to_owned()
            }
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
    let (input, path) = match parse_with_path::<WriteInput>("write_file", ws, input) {
        Ok(parsed) => parsed,
        Err(err) => return err,
    };
    if path.is_dir() {
        return ToolOutput::error(format!("`{}` is a directory", input.path));
    }
    let existed = path.exists();
    if let Some(parent) = path.parent()
        && let Err(err) = std::fs::create_dir_all(parent)
    {
        return ToolOutput::error(format!(
            "cannot create the folder of `{}`: {err}",
            input.path
        ));
    }
    match std::fs::write(&path, &input.content) {
        Ok(()) => ToolOutput::ok(format!(
            "{} `{}` ({} bytes)",
            if existed { "overwrote" } else { "created" },
            ws.display(&path),
            input.content.len()
        )),
        Err(err) => ToolOutput::error(format!("cannot write `{}`: {err}", input.path)),
    }
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
    let (input, path) = match parse_with_path::<EditInput>("edit_file", ws, input) {
        Ok(parsed) => parsed,
        Err(err) => return err,
    };
    if input.old_string.is_empty() {
        return ToolOutput::error("`old_string` is empty; use write_file to create a file");
    }
    if input.old_string == input.new_string {
        return ToolOutput::error("`old_string` and `new_string` are the same; nothing to change");
    }
    let text = match std::fs::read_to_string(&path) {
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
    match std::fs::write(&path, updated) {
        Ok(()) => ToolOutput::ok(format!(
            "replaced {count} occurrence{} in `{}`",
            if count == 1 { "" } else { "s" },
            ws.display(&path)
        )),
        Err(err) => ToolOutput::error(format!("cannot write `{}`: {err}", input.path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
