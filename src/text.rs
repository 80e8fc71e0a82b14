//! Bytes read as text. `String::from_utf8_lossy` checks valid UTF-8 more slowly than
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

#[cfg(test)]
mod tests {
    #[test]
    fn valid_text_is_borrowed_and_invalid_bytes_replaced() {
        assert!(matches!(
            super::lossy("é ok".as_bytes()),
            std::borrow::Cow::Borrowed("é ok")
        ));
        assert_eq!(super::lossy(b"a\xffb"), "a\u{fffd}b");
    }
}
