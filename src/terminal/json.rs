//! JSON as runner prints it: serde_json's own output, with every C1 control and bidirectional
//! control in a string written as a `\uXXXX` escape. serde_json escapes C0 controls but writes
//! the rest raw, and a raw U+009B starts a terminal sequence, a raw U+202E reorders what follows
//! (docs/src/security.md). The escaped text parses to the very same strings.

use std::io;

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter, Serializer};

/// `value` as pretty JSON (two spaces, as `serde_json::to_string_pretty`), escaped.
pub fn to_json_pretty<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    write(value, PrettyFormatter::new())
}

/// `value` as JSON on one line (as `serde_json::to_string`), escaped.
pub fn to_json_line<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    write(value, CompactFormatter)
}

fn write<T: Serialize + ?Sized, F: Formatter>(value: &T, inner: F) -> serde_json::Result<String> {
    let mut out = Vec::with_capacity(128);
    value.serialize(&mut Serializer::with_formatter(&mut out, Escaping(inner)))?;
    // serde_json writes valid UTF-8, and the escapes are ASCII.
    String::from_utf8(out).map_err(|err| serde::ser::Error::custom(err.to_string()))
}

/// A formatter that writes as `F` does, but escapes what [`super::needs_escape`] names in
/// strings. Only the methods `PrettyFormatter` overrides need forwarding: the rest are the
/// trait's defaults in both formatters.
struct Escaping<F>(F);

impl<F: Formatter> Formatter for Escaping<F> {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut plain = 0;
        for (at, c) in fragment.char_indices() {
            if super::needs_escape(c) {
                self.0.write_string_fragment(writer, &fragment[plain..at])?;
                write!(writer, "\\u{:04x}", u32::from(c))?;
                plain = at + c.len_utf8();
            }
        }
        self.0.write_string_fragment(writer, &fragment[plain..])
    }

    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_array(writer)
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array(writer)
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(writer, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array_value(writer)
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object(writer)
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object(writer)
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(writer, first)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object_value(writer)
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_value(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn c1_and_bidi_controls_are_escaped_and_the_json_is_the_same() {
        let value = json!({
            "id": "a\u{9b}31m\u{202e}b\u{2066}c\u{200f}d\u{1b}[2J",
            "list": ["\u{85}", "plain é 漢", {"\u{202d}key": 1}],
        });
        for text in [
            to_json_pretty(&value).unwrap(),
            to_json_line(&value).unwrap(),
        ] {
            assert!(
                !text
                    .chars()
                    .any(|c| c.is_control() && c != '\n' || super::super::needs_escape(c)),
                "{text:?}"
            );
            assert!(
                text.contains(r"a\u009b31m\u202eb\u2066c\u200fd\u001b[2J"),
                "{text}"
            );
            assert!(text.contains("plain é 漢"), "{text}");
            assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value);
        }
        // Layout as serde_json's own.
        let plain = json!({"a": [1, {"b": "c"}], "d": null});
        assert_eq!(
            to_json_pretty(&plain).unwrap(),
            serde_json::to_string_pretty(&plain).unwrap()
        );
        assert_eq!(
            to_json_line(&plain).unwrap(),
            serde_json::to_string(&plain).unwrap()
        );
    }
}
