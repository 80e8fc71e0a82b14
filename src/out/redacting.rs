//! [`Redacting`]: the writer every sink writes through. It hides every registered secret, in
//! every form [`crate::secrets`] knows, in the bytes as they go out, so a sink cannot forget to
//! redact a field or redact the wrong serialisation of it.

use std::io::{self, Write};

use crate::secrets::Replace;

/// Bytes gathered before they are searched and passed on (unless a line ends first, in line
/// mode): searching in large pieces keeps the cost linear however small the writes are.
const GATHER: usize = 64 << 10;

/// A writer that passes on what it is given with every secret replaced. A secret split across
/// two writes is still found: the end of what was written that could start one is held back
/// until the next write, a flush, or the end.
pub struct Redacting<W: Write> {
    inner: W,
    pending: Vec<u8>,
    /// Pass on each write that ends a line at once (a terminal, a log).
    lines: bool,
    replace: Replace,
}

impl<W: Write> Redacting<W> {
    fn with(inner: W, lines: bool, replace: Replace) -> Self {
        Self {
            inner,
            pending: Vec::new(),
            lines,
            replace,
        }
    }

    /// For files and sockets: written out in large pieces, and when flushed.
    pub fn new(inner: W) -> Self {
        Self::with(inner, false, Replace::Hidden)
    }

    /// For terminals and logs: a write that ends a line is passed on at once.
    pub fn lines(inner: W) -> Self {
        Self::with(inner, true, Replace::Hidden)
    }

    /// For a binary encoding whose lengths must not change: each secret becomes as many `*`.
    pub fn masking(inner: W) -> Self {
        Self::with(inner, false, Replace::Mask)
    }

    /// Passes on what is gathered: all of it when `last`, else what cannot start a secret.
    fn pass_on(&mut self, last: bool) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let redactor = crate::secrets::redactor();
        let inner = &mut self.inner;
        let used = redactor.redact_into(&self.pending, last, self.replace, &mut |piece| {
            inner.write_all(piece)
        })?;
        self.pending.drain(..used);
        Ok(())
    }

    /// Writes out everything held and flushes the writer underneath.
    pub fn finish(&mut self) -> io::Result<()> {
        self.pass_on(true)?;
        self.inner.flush()
    }

    /// The writer underneath (for the tests' eyes only).
    #[cfg(test)]
    fn inner(&self) -> &W {
        &self.inner
    }
}

impl<W: Write> Write for Redacting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        if self.lines && buf.ends_with(b"\n") {
            self.pass_on(true)?;
        } else if self.pending.len() >= GATHER {
            // Only now the redactor is asked (a lock): `serde_json::to_writer` writes a token
            // at a time, and most writes are far below this.
            let longest = crate::secrets::redactor().longest();
            if self.pending.len() >= 2 * longest {
                self.pass_on(false)?;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.finish()
    }
}

impl<W: Write> Drop for Redacting<W> {
    fn drop(&mut self) {
        // Whoever needed to know of a failure called `finish`; nothing is held back unwritten.
        let _ = self.finish();
    }
}

impl<W: Write> std::fmt::Debug for Redacting<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redacting")
    }
}

/// Bytes the redactor has been over, made only by [`Redacted::new`]: written with
/// [`super::OutDir::write_redacted`] they go out exactly as they are, so a caller that signs
/// what it writes (a run record's seal) signs the bytes on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redacted(Vec<u8>);

impl Redacted {
    /// `bytes` with every secret the run knows now hidden.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        let bytes = bytes.into();
        let hidden = match crate::secrets::redactor().redact(&bytes) {
            std::borrow::Cow::Borrowed(_) => bytes,
            std::borrow::Cow::Owned(hidden) => hidden,
        };
        Redacted(hidden)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "redacting-writer-secret-77aa";

    /// Every way of cutting the text into two writes: the secret never comes out whole or in
    /// part, and everything else comes out as it went in.
    #[test]
    fn a_secret_split_across_writes_is_hidden() {
        crate::secrets::register(SECRET);
        let text = format!("before {SECRET} after");
        for cut in 0..=text.len() {
            for lines in [false, true] {
                let mut out = Vec::new();
                {
                    let mut writer = if lines {
                        Redacting::lines(&mut out)
                    } else {
                        Redacting::new(&mut out)
                    };
                    writer.write_all(&text.as_bytes()[..cut]).unwrap();
                    writer.write_all(&text.as_bytes()[cut..]).unwrap();
                    writer.finish().unwrap();
                }
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    "before [hidden] after",
                    "cut at {cut}"
                );
            }
        }
    }

    /// Many one-byte writes (as `serde_json::to_writer` makes) and a JSON-escaped form.
    #[test]
    fn byte_by_byte_and_escaped_forms_are_hidden() {
        let secret = r#"pa"ss\word-redacting-1"#;
        crate::secrets::register(secret);
        let json = serde_json::json!({ "value": secret, "again": format!("x{secret}y") });
        let mut out = Vec::new();
        {
            let mut writer = Redacting::new(&mut out);
            for byte in json.to_string().as_bytes() {
                writer.write_all(&[*byte]).unwrap();
            }
        }
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, r#"{"again":"x[hidden]y","value":"[hidden]"}"#);
    }

    #[test]
    fn redacted_bytes_are_hidden_once_and_kept() {
        let secret = "redacted-bytes-secret-4410";
        crate::secrets::register(secret);
        let text = Redacted::new(format!("{{\"k\": \"{secret}\"}}"));
        assert_eq!(text.as_bytes(), b"{\"k\": \"[hidden]\"}");
    }

    #[test]
    fn a_line_goes_out_when_it_ends_and_masks_keep_length() {
        crate::secrets::register(SECRET);
        let mut out = Vec::new();
        let mut writer = Redacting::lines(&mut out);
        writer.write_all(b"one line\n").unwrap();
        assert_eq!(writer.inner().as_slice(), b"one line\n");
        drop(writer);
        let mut out = Vec::new();
        Redacting::masking(&mut out)
            .write_all(SECRET.as_bytes())
            .unwrap();
        assert_eq!(out, vec![b'*'; SECRET.len()]);
    }
}
