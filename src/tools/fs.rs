//! The reading file tools: `read_file` and `list_dir`. Each takes the model's JSON input and
//! answers with text; failures are error results the model can act on, never panics.

use std::io::{BufRead, BufReader, Read};

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
    fn aliases(&self) -> &[&str] {
        &["Read"]
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
        // Opening is a few system calls (never a wait: the file is opened non-blocking and only a
        // regular file goes on), and a file no longer than one tool output is read where it was
        // opened; a hand-over to the blocking pool and back would cost more than the read.
        // Longer files, whose line count may take a 64 MB scan, are read on the pool.
        let opened = open_for_read(&ctx.workspace, input);
        Box::pin(async move {
            match opened {
                Err(out) => out,
                Ok(opened) if opened.len <= MAX_OUTPUT_BYTES as u64 => opened.read(),
                Ok(opened) => tokio::task::spawn_blocking(move || opened.read())
                    .await
                    .unwrap_or_else(|err| {
                        ToolOutput::error(format!("the tool failed unexpectedly: {err}"))
                    }),
            }
        })
    }
}

/// `list_dir` (Claude Code: `LS`).
pub struct ListDir;

impl Tool for ListDir {
    fn name(&self) -> &str {
        "list_dir"
    }
    fn aliases(&self) -> &[&str] {
        &["LS"]
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
        let (part, used, done) = match memchr::memchr(b'\n', buf) {
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
    match open_for_read(ws, input) {
        Ok(opened) => opened.read(),
        Err(out) => out,
    }
}

/// A regular file `read_file` has opened and may read.
struct OpenedFile {
    input: ReadInput,
    file: std::fs::File,
    len: u64,
}

/// The input checked and its file opened; an error result when it cannot be read.
fn open_for_read(ws: &Workspace, input: &Value) -> Result<OpenedFile, ToolOutput> {
    let input: ReadInput = parse_input("read_file", input)?;
    let (file, _) = ws.open_read(&input.path).map_err(ToolOutput::from)?;
    let meta = file
        .metadata()
        .map_err(|err| ToolOutput::error(format!("cannot read `{}`: {err}", input.path)))?;
    if meta.is_dir() {
        return Err(ToolOutput::error(format!(
            "`{}` is a directory; use list_dir",
            input.path
        )));
    }
    if !meta.is_file() {
        return Err(ToolOutput::error(format!(
            "`{}` is not a regular file (a FIFO, socket or device) and is not read",
            input.path
        )));
    }
    Ok(OpenedFile {
        input,
        file,
        len: meta.len(),
    })
}

/// The rows `read_file` shows, added line by line.
struct Rows {
    out: String,
    start: usize,
    limit: usize,
    /// Lines seen so far.
    total: usize,
    /// The last line shown.
    last: usize,
    cut_lines: bool,
    /// The output cap was reached: later lines are only counted.
    full: bool,
}

impl Rows {
    /// The next line (without its newline; `cut` when it was longer than was kept of it).
    fn push(&mut self, line: &[u8], cut: bool) {
        self.total += 1;
        let total = self.total;
        if total < self.start || self.full || total >= self.start + self.limit {
            return;
        }
        let text = crate::text::lossy(line);
        let text = text.trim_end_matches('\r');
        // A line of at most MAX_LINE_CHARS bytes has at most that many characters: no count.
        let shown = if text.len() <= MAX_LINE_CHARS {
            text
        } else {
            text.char_indices()
                .nth(MAX_LINE_CHARS)
                .map_or(text, |(end, _)| &text[..end])
        };
        let cut = shown.len() < text.len() || cut;
        self.cut_lines |= cut;
        // A row that would pass the output cap is taken back out: the cap holds whole rows.
        let out = &mut self.out;
        let row_start = out.len();
        push_line_number(out, total);
        out.push('\t');
        out.push_str(shown);
        if cut {
            out.push_str(&format!(" [line cut at {MAX_LINE_CHARS} characters]"));
        }
        out.push('\n');
        if out.len() > MAX_OUTPUT_BYTES {
            out.truncate(row_start);
            self.full = true;
            return;
        }
        self.last = total;
    }
}

impl OpenedFile {
    // Over 80 lines: `read_file`'s checks (type, size, binary, lines) in the order they must run.
    /// Its lines, numbered, as `read_file` answers.
    fn read(self) -> ToolOutput {
        let OpenedFile { input, file, len } = self;
        // A buffer the file's size (and one byte to see its end in one read), up to 64 kB.
        let capacity = usize::try_from(len).map_or(64 << 10, |len| (len + 1).clamp(4096, 64 << 10));
        // Read as long as the file was when opened (a file that grows meanwhile is read as it
        // was; one that shrinks ends early): the end is known without reading it again.
        let mut reader = BufReader::with_capacity(capacity, file.take(len.min(MAX_SCAN_BYTES)));
        match reader.fill_buf() {
            Ok(head) if head[..head.len().min(BINARY_PROBE)].contains(&0) => {
                return ToolOutput::error(format!(
                    "`{}` is a binary file ({len} bytes)",
                    input.path
                ));
            }
            Ok(_) => {}
            Err(err) => return ToolOutput::error(format!("cannot read `{}`: {err}", input.path)),
        }
        if len == 0 {
            return ToolOutput::ok(format!("`{}` is empty", input.path));
        }
        let start = input.offset.unwrap_or(1).max(1);
        let limit = input.limit.unwrap_or(READ_DEFAULT_LINES).max(1);
        // The file and a line number for about every line, at most one output: the text is not
        // grown (and copied) row by row.
        let shown = usize::try_from(len).unwrap_or(MAX_OUTPUT_BYTES);
        let mut rows = Rows {
            out: String::with_capacity((shown + shown / 4 + 64).min(MAX_OUTPUT_BYTES + 4096)),
            start,
            limit,
            total: 0,
            last: start - 1,
            cut_lines: false,
            full: false,
        };
        // Four bytes a character at most: enough to show MAX_LINE_CHARS of any line.
        let keep = MAX_LINE_CHARS * 4 + 4;
        let mut line = Vec::new();
        loop {
            // A line whole in the buffer is shown from there; one that runs past it is gathered.
            let buf = match reader.fill_buf() {
                Ok(buf) => buf,
                Err(err) => {
                    return ToolOutput::error(format!("cannot read `{}`: {err}", input.path));
                }
            };
            if buf.is_empty() {
                break;
            }
            if let Some(end) = memchr::memchr(b'\n', buf) {
                rows.push(&buf[..end.min(keep)], end >= keep);
                reader.consume(end + 1);
                continue;
            }
            match next_line(&mut reader, keep, &mut line) {
                Ok(Some(())) => rows.push(&line, line.len() >= keep),
                Ok(None) => break,
                Err(err) => {
                    return ToolOutput::error(format!("cannot read `{}`: {err}", input.path));
                }
            }
        }
        let Rows {
            mut out,
            total,
            last,
            cut_lines,
            ..
        } = rows;
        // The scan stopped at MAX_SCAN_BYTES: there are more lines than counted.
        let scanned_all = len <= MAX_SCAN_BYTES || reader.into_inner().limit() > 0;
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
}

/// `n` right-aligned in six columns (wider when it needs more), as `{n:>6}` writes it, without
/// the formatting machinery a line would otherwise cost.
fn push_line_number(out: &mut String, n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    const SPACES: &str = "      ";
    out.push_str(&SPACES[..6usize.saturating_sub(digits.len() - at)]);
    out.extend(digits[at..].iter().map(|&d| char::from(d)));
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
        Err(err) => return ToolOutput::from(err),
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
    fn line_numbers_are_right_aligned_in_six_columns() {
        for n in [0, 1, 9, 10, 99_999, 999_999, 1_000_000, usize::MAX] {
            let mut out = String::new();
            push_line_number(&mut out, n);
            assert_eq!(out, format!("{n:>6}"));
        }
    }

    #[test]
    fn lines_are_cut_by_characters_not_bytes() {
        let (_d, ws) = workspace();
        // 1,500 two-byte characters: 3,000 bytes, under the 2,000-character cut.
        std::fs::write(ws.root().join("wide"), "é".repeat(1500)).unwrap();
        let out = read_file(&ws, &json!({"path": "wide"}));
        assert_eq!(out.text, format!("     1\t{}\n", "é".repeat(1500)));
        std::fs::write(ws.root().join("wider"), "é".repeat(2001)).unwrap();
        let out = read_file(&ws, &json!({"path": "wider"}));
        assert_eq!(
            out.text,
            format!(
                "     1\t{} [line cut at 2000 characters]\n[some long lines were cut]\n",
                "é".repeat(2000)
            )
        );
    }

    /// Lines shown from the reader's buffer and lines gathered across its refills read alike:
    /// checked against the rules written plainly (numbered rows, CR dropped, invalid bytes
    /// replaced, lines past 2,000 characters cut), on a file larger than the buffer.
    #[test]
    fn rows_read_alike_in_the_buffer_and_across_it() {
        let (_d, ws) = workspace();
        let mut text: Vec<u8> = Vec::new();
        for i in 0..3000 {
            match i % 7 {
                0 => text.extend_from_slice(format!("plain {i}\n").as_bytes()),
                1 => text.extend_from_slice(format!("crlf {i}\r\n").as_bytes()),
                2 => text.extend_from_slice(b"bad \xff byte\n"),
                3 if i % 5 == 0 => {
                    text.extend_from_slice("y".repeat(9000 + i).as_bytes());
                    text.push(b'\n');
                }
                _ => text.extend_from_slice("é".repeat(i % 40).as_bytes()),
            }
            if i % 7 > 3 {
                text.push(b'\n');
            }
        }
        text.extend_from_slice(b"no newline at the end");
        std::fs::write(ws.root().join("mixed"), &text).unwrap();
        let mut want = String::new();
        let mut cut = false;
        let lines: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();
        for (n, line) in lines.iter().enumerate() {
            let line = String::from_utf8_lossy(line);
            let line = line.trim_end_matches('\r');
            let shown: String = line.chars().take(2000).collect();
            let row = if shown.len() < line.len() {
                cut = true;
                format!("{:>6}\t{shown} [line cut at 2000 characters]\n", n + 1)
            } else {
                format!("{:>6}\t{shown}\n", n + 1)
            };
            if want.len() + row.len() > MAX_OUTPUT_BYTES {
                break;
            }
            want.push_str(&row);
        }
        assert!(cut);
        let out = read_file(&ws, &json!({"path": "mixed", "limit": 100_000}));
        assert!(!out.is_error, "{}", out.text);
        assert!(
            out.text.starts_with(&want),
            "first difference at byte {}",
            out.text
                .bytes()
                .zip(want.bytes())
                .position(|(a, b)| a != b)
                .unwrap_or(want.len().min(out.text.len()))
        );
        assert!(out.text[want.len()..].starts_with("[showing lines 1-"));
    }

    /// The tool reads a short file where it opened it and a long one on the blocking pool; both
    /// answer as the plain function does.
    #[tokio::test]
    async fn the_tool_reads_short_and_long_files_alike() {
        let (_d, ws) = workspace();
        let long: String = (0..40_000).map(|i| format!("line {i}\n")).collect();
        assert!(long.len() as u64 > MAX_OUTPUT_BYTES as u64);
        std::fs::write(ws.root().join("long"), &long).unwrap();
        let ctx = ToolContext::new(
            std::sync::Arc::new(ws),
            std::sync::Arc::new(crate::tools::bash::BashEnv::new(
                crate::sandbox::Mode::ReadOnly,
                false,
            )),
        );
        for input in [
            json!({"path": "src/lib.rs"}),
            json!({"path": "long", "offset": 39_000}),
            json!({"path": "missing"}),
            json!({"path": "src"}),
        ] {
            let through_tool = ReadFile.call(&input, &ctx).await;
            assert_eq!(through_tool, read_file(&ctx.workspace, &input), "{input}");
        }
        let tail = ReadFile
            .call(&json!({"path": "long", "offset": 40_000}), &ctx)
            .await;
        assert_eq!(tail.text, " 40000\tline 39999\n");
    }

    #[test]
    fn list_dir_sorts_and_marks_directories() {
        let (_d, ws) = workspace();
        std::fs::write(ws.root().join("b.txt"), "").unwrap();
        assert_eq!(list_dir(&ws, &json!({})).text, "b.txt\nsrc/\n");
        assert_eq!(list_dir(&ws, &json!({"path": "src"})).text, "lib.rs\n");
        assert!(list_dir(&ws, &json!({"path": ".."})).is_error);
    }
}
