//! Bytes read as text, and a tool call's argument as one short line. `String::from_utf8_lossy` checks valid UTF-8 more slowly than
//! `str::from_utf8`; the turn's hot paths (file lines, reply events, transcript lines) are
//! nearly always valid, so they check the quick way first.

use std::borrow::Cow;

/// `bytes` as text, borrowed when it is valid UTF-8, otherwise with each invalid sequence
/// replaced by U+FFFD.
pub fn lossy(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// What a tool call names, as one short line: its path, pattern or command (the first of those
/// it has), secrets hidden, newlines flattened, cut to `max` characters. For stubs and live
/// lines.
pub fn call_argument(input: &serde_json::Value, max: usize) -> Option<String> {
    let named = [
        "path",
        "pattern",
        "command",
        "file_path",
        "description",
        "prompt",
    ]
    .iter()
    .find_map(|key| input.get(key).and_then(serde_json::Value::as_str))?;
    // Redacted before it is cut: the first half of a secret is one the redactor no longer knows.
    let flat = crate::secrets::redact(named).replace(['\n', '\r'], " ");
    let mut short: String = flat.chars().take(max).collect();
    if short.len() < flat.len() {
        short.push('…');
    }
    Some(short)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_argument_is_one_short_line() {
        use serde_json::json;
        assert_eq!(
            call_argument(&json!({"path": "src/a.rs", "limit": 3}), 40).as_deref(),
            Some("src/a.rs")
        );
        assert_eq!(
            call_argument(&json!({"command": "make\ntest"}), 40).as_deref(),
            Some("make test")
        );
        assert_eq!(
            call_argument(&json!({"pattern": "x".repeat(50)}), 10).unwrap(),
            format!("{}…", "x".repeat(10))
        );
        assert_eq!(call_argument(&json!({"n": 1}), 10), None);
    }

    #[test]
    fn valid_text_is_borrowed_and_invalid_bytes_replaced() {
        assert!(matches!(
            super::lossy("é ok".as_bytes()),
            std::borrow::Cow::Borrowed("é ok")
        ));
        assert_eq!(super::lossy(b"a\xffb"), "a\u{fffd}b");
    }
}
