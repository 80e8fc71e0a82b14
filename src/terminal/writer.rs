//! The writer every byte runner prints goes through: stdout and stderr are only reached as
//! [`Escaping`] (a source scan in `super::scan` holds every other file to that), and the live
//! display draws through [`escape`]. Whatever a caller forgot to clean, no C1 control,
//! bidirectional control or C0 control other than newline and tab reaches the terminal raw:
//! each is written as a `\uXXXX` escape, which inside a JSON string is the same character and
//! in text shows what was there. A carriage return passes only before a newline (a lone one
//! would let a line's end write over its start), ESC only as a colour (SGR: `ESC [`, digits,
//! `;` or `:`, `m`) and as `ESC [?25h` (the cursor shown again), the only sequences runner itself
//! prints; a colour cannot move the cursor, clear the screen, set the title or write the
//! clipboard. Text from models and files is cleaned of all of them by [`super::clean`] first.

use std::borrow::Cow;
use std::io::{self, Write};

/// `W`, with what [`needs_escape_here`] names written as `\uXXXX`.
pub struct Escaping<W: Write> {
    inner: W,
    /// The start of a character whose other bytes the next write brings.
    pending: Vec<u8>,
}

/// Whether the writer escapes `c` wherever it is: every control but newline, tab, carriage
/// return and ESC, and every bidirectional control. A carriage return is escaped unless a
/// newline follows, ESC unless [`own_sequence`] does.
fn needs_escape_here(c: char) -> bool {
    (c.is_control() && !matches!(c, '\n' | '\t' | '\r' | '\u{1b}')) || super::needs_escape(c)
}

/// The length of the sequence `rest` starts with, after its ESC, when it is one runner prints:
/// a colour (SGR) or the cursor shown again.
fn own_sequence(rest: &str) -> Option<usize> {
    const SHOW_CURSOR: &str = "[?25h";
    if rest.starts_with(SHOW_CURSOR) {
        return Some(SHOW_CURSOR.len());
    }
    let params = rest.strip_prefix('[')?;
    // Params are ASCII, so a byte offset is a character's.
    let end = params.find(|c: char| !(c.is_ascii_digit() || c == ';' || c == ':'))?;
    params[end..].starts_with('m').then_some(1 + end + 1)
}

impl<W: Write> Escaping<W> {
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            pending: Vec::new(),
        }
    }

    fn write_text(&mut self, text: &str) -> io::Result<()> {
        self.inner.write_all(escape(text).as_bytes())
    }
}

/// `text` as it may reach a terminal: what [`needs_escape_here`] names, and an ESC that begins
/// no [`own_sequence`], written as `\uXXXX`. For writers that are not an [`Escaping`], such as
/// the live display's terminal.
pub fn escape(text: &str) -> Cow<'_, str> {
    let needs = |(at, c): (usize, char)| {
        needs_escape_here(c)
            || (c == '\u{1b}' && own_sequence(&text[at + 1..]).is_none())
            || (c == '\r' && !text[at + 1..].starts_with('\n'))
    };
    if !text.char_indices().any(needs) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        if c == '\u{1b}'
            && let Some(len) = own_sequence(&text[at + 1..])
        {
            out.push_str(&text[at..at + 1 + len]);
            // The sequence is ASCII: one character a byte.
            chars.nth(len - 1);
        } else if needs((at, c)) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let joined;
        let mut rest = if self.pending.is_empty() {
            buf
        } else {
            let mut bytes = std::mem::take(&mut self.pending);
            bytes.extend_from_slice(buf);
            joined = bytes;
            &joined[..]
        };
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    self.write_text(text)?;
                    break;
                }
                Err(err) => {
                    let (valid, after) = rest.split_at(err.valid_up_to());
                    // Valid UTF-8 up to there, so this reads it all.
                    self.write_text(std::str::from_utf8(valid).unwrap_or_default())?;
                    match err.error_len() {
                        // A character cut at the end: kept for the next write.
                        None => {
                            self.pending.extend_from_slice(after);
                            break;
                        }
                        // Bytes that are no UTF-8 are no control character either.
                        Some(len) => {
                            self.inner.write_all(&after[..len])?;
                            rest = &after[len..];
                        }
                    }
                }
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Write> Drop for Escaping<W> {
    fn drop(&mut self) {
        // A cut character that never got its end: its bytes as they are.
        if !self.pending.is_empty() {
            let _ = self.inner.write_all(&self.pending);
        }
        let _ = self.inner.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through(pieces: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut writer = Escaping::new(&mut out);
            for piece in pieces {
                writer.write_all(piece).unwrap();
            }
        }
        out
    }

    #[test]
    fn controls_and_bidi_are_escaped_and_colours_kept() {
        let text = "ok \u{1b}[1mbold\u{1b}[0m\r\n\ta\u{9b}2Jb\u{202e}c\u{7}d\u{8}e\u{7f}f\u{200e}\u{1b}[2J\n";
        assert_eq!(
            String::from_utf8(through(&[text.as_bytes()])).unwrap(),
            "ok \u{1b}[1mbold\u{1b}[0m\r\n\ta\\u009b2Jb\\u202ec\\u0007d\\u0008e\\u007ff\\u200e\\u001b[2J\n"
        );
    }

    #[test]
    fn the_live_display_escapes_as_the_writer_does() {
        let text = "a\u{9b}b\u{202e}c\u{1b}[1md";
        assert_eq!(escape(text), "a\\u009bb\\u202ec\u{1b}[1md");
        assert!(matches!(escape("plain\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn escape_passes_colours_and_nothing_else() {
        for own in [
            "\u{1b}[0m",
            "\u{1b}[1;31m",
            "\u{1b}[38:5:8m",
            "\u{1b}[m",
            "\u{1b}[?25h",
        ] {
            assert_eq!(escape(own), own);
        }
        for (text, shown) in [
            ("\u{1b}[2J", "\\u001b[2J"),
            ("\u{1b}]0;title\u{7}", "\\u001b]0;title\\u0007"),
            ("\u{1b}]52;c;aGk=\u{1b}\\", "\\u001b]52;c;aGk=\\u001b\\"),
            ("\u{1b}[1A\u{1b}[2K", "\\u001b[1A\\u001b[2K"),
            ("\u{1b}[31", "\\u001b[31"),
            ("\u{1b}", "\\u001b"),
            ("\u{1b}\u{1b}[0m", "\\u001b\u{1b}[0m"),
            ("\u{1b}[31\u{202e}m", "\\u001b[31\\u202em"),
            // A carriage return only ends a line: alone it would write over what came before.
            ("safe\roops\r\n", "safe\\u000doops\r\n"),
            ("end\r", "end\\u000d"),
        ] {
            assert_eq!(escape(text), shown, "{text:?}");
        }
    }

    #[test]
    fn a_character_cut_between_writes_is_escaped_whole() {
        let bytes = "x\u{202e}y\u{9b}".as_bytes();
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(through(&[a, b]), b"x\\u202ey\\u009b", "cut at {cut}");
        }
        // Bytes that are no UTF-8 pass as they are.
        assert_eq!(through(&[b"a\xffb\xe2\x80"]), b"a\xffb\xe2\x80");
    }

    #[test]
    fn json_through_the_writer_reads_the_same() {
        let value = serde_json::json!({"s": "a\u{9b}\u{202e}\u{85}b"});
        let raw = serde_json::to_string(&value).unwrap();
        let escaped = through(&[raw.as_bytes()]);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&escaped).unwrap(),
            value
        );
    }
}
