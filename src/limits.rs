//! Every input has a size limit. The numbers live here so that the docs and the code agree, and
//! [`read_text`] is the one way runner reads a file whose size it does not control: regular files
//! only (a FIFO or `/dev/zero` is refused, never read), opened without blocking, and never more
//! than the limit.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

use camino::Utf8Path;

/// A workflow or agent file (a generated pipeline of 50,000 steps is about 7 MiB).
pub const MAX_SOURCE_BYTES: u64 = 16 << 20;
/// An `output_schema` file.
pub const MAX_SCHEMA_BYTES: u64 = 1 << 20;
/// A `--input NAME=@FILE` value.
pub const MAX_INPUT_FILE_BYTES: u64 = 4 << 20;
/// A transcript read back (`--continue`, `runner show`, `runner report`).
pub const MAX_RUN_RECORD_BYTES: u64 = 256 << 20;
/// A `run.json` read back (`runs`, `show`, `report`, `diff`, `--resume`), and the JSON values
/// it may hold (a step's record is about 60; a list of a million numbers takes 2 MB on disk
/// and 32 MB in memory, so values are counted before a record is built).
pub const MAX_RUN_JSON_BYTES: u64 = 64 << 20;
pub const MAX_RUN_JSON_VALUES: u64 = 2_000_000;
/// Runs that `runs` and `--resume latest` open, at most: the newest by when their `run.json` was
/// written.
pub const MAX_RUNS_READ: usize = 100;
/// A model API response body.
pub const MAX_RESPONSE_BYTES: usize = 32 << 20;
/// Values a YAML file may hold once its aliases are expanded (a "billion laughs" file has few
/// bytes and billions of values).
pub const MAX_YAML_VALUES: usize = 100_000;
/// Bytes of text a YAML file may hold once its aliases are expanded: more than any file runner
/// reads can hold without aliases, far less than a repeated long string would make.
pub const MAX_YAML_BYTES: usize = 32 << 20;
/// Tables and lists nested in each other, in any file runner parses.
pub const MAX_NESTING: usize = 64;
/// Bytes of one template (a prompt or an `if`); longer ones are refused before parsing.
pub const MAX_TEMPLATE_BYTES: usize = 256 << 10;
/// minijinja fuel for one render: about one unit per instruction and per 64 bytes of data, so
/// this bounds both time and memory (roughly 64 MB) of a hostile template.
pub const TEMPLATE_FUEL: u64 = 1_000_000;

/// Why a file could not be read within its limit.
#[derive(Debug)]
pub enum ReadError {
    NotRegular,
    TooLarge { limit: u64 },
    NotUtf8,
    Io(std::io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::NotRegular => f.write_str("it is not a regular file"),
            ReadError::TooLarge { limit } => {
                write!(f, "it is larger than the limit of {}", bytes(*limit))
            }
            ReadError::NotUtf8 => f.write_str("it is not UTF-8 text"),
            ReadError::Io(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for ReadError {}

/// `4 MiB`, `512 KiB`, `300 bytes`.
pub fn bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

/// Reads a regular file of at most `limit` bytes as UTF-8 text, without a byte-order mark.
pub fn read_text(path: &Utf8Path, limit: u64) -> Result<String, ReadError> {
    let bytes = read_bytes(path, limit)?;
    let text = String::from_utf8(bytes).map_err(|_| ReadError::NotUtf8)?;
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    })
}

/// Reads a regular file of at most `limit` bytes.
pub fn read_bytes(path: &Utf8Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(ReadError::Io)?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular);
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge { limit });
    }
    // The file may grow while it is read: never take more than the limit.
    let mut out = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut out)
        .map_err(ReadError::Io)?;
    if out.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(out)
}

/// At most `max` characters of `text`, with `…` when cut: a value quoted in a message.
/// Redacted before it is cut: the first half of a secret is one the redactor no longer knows.
pub fn preview(text: &str, max: usize) -> String {
    let text = crate::secrets::redact(text);
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_cut_short_in_a_preview_is_still_hidden() {
        const SECRET: &str = "preview-cut-secret-0123456789";
        crate::secrets::register(SECRET);
        let shown = preview(&format!("key {SECRET} and more"), 16);
        assert_eq!(shown, "key [hidden] and…");
    }

    #[test]
    fn special_files_and_large_files_are_refused_without_reading() {
        assert!(matches!(
            read_text(Utf8Path::new("/dev/zero"), 10),
            Err(ReadError::NotRegular)
        ));
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let fifo = Utf8Path::from_path(&fifo).unwrap();
        assert!(matches!(read_text(fifo, 10), Err(ReadError::NotRegular)));
        let big = dir.path().join("big");
        std::fs::write(&big, "x".repeat(11)).unwrap();
        let big = Utf8Path::from_path(&big).unwrap();
        let err = read_text(big, 10).unwrap_err();
        assert_eq!(err.to_string(), "it is larger than the limit of 10 bytes");
        assert_eq!(read_text(big, 11).unwrap(), "x".repeat(11));
    }

    #[test]
    fn a_byte_order_mark_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bom.yaml");
        std::fs::write(&path, "\u{feff}name: x\n").unwrap();
        let text = read_text(Utf8Path::from_path(&path).unwrap(), 100).unwrap();
        assert_eq!(text, "name: x\n");
        assert_eq!(bytes(4 << 20), "4 MiB");
        assert_eq!(bytes(512 << 10), "512 KiB");
    }
}
