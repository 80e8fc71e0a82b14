//! JSON strings written quickly: the large texts of a turn (tool results, file contents) are
//! escaped once into the request and once into the transcript, and serde_json's writer goes byte
//! by byte. This one looks at eight bytes at a time for the few that need escaping and copies
//! the runs between them, writing exactly what serde_json writes (a test holds it to that: the
//! request's bytes are what its digest and the cassettes' keys are of).

/// Appends `text` as a JSON string, quotes included.
pub fn write_str(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // `run` is where the bytes not yet copied start; `at` where to look next.
    let mut run = 0;
    let mut at = 0;
    while let Some(word) = bytes.get(at..at + 8) {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        let mask = escape_mask(u64::from_le_bytes(eight));
        if mask == 0 {
            at += 8;
            continue;
        }
        // The lowest byte flagged is one that needs escaping (see `escape_mask`).
        let found = at + (mask.trailing_zeros() / 8) as usize;
        out.extend_from_slice(&bytes[run..found]);
        put_escape(out, bytes[found]);
        run = found + 1;
        at = found + 1;
    }
    for (offset, &byte) in bytes[at..].iter().enumerate() {
        if needs_escape(byte) {
            let found = at + offset;
            out.extend_from_slice(&bytes[run..found]);
            put_escape(out, byte);
            run = found + 1;
        }
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

/// The high bit of each of the eight bytes (little-endian) that is a control character, `"` or
/// `\`; past the first such byte, later ones may be flagged wrongly (a borrow carries upward),
/// so only the lowest flag is to be trusted, and no flag means none.
fn escape_mask(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    control | zero(word ^ (ONES * u64::from(b'"'))) | zero(word ^ (ONES * u64::from(b'\\')))
}

fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// The escape serde_json writes: the short forms, `\u00XX` for other control characters.
fn put_escape(out: &mut Vec<u8>, byte: u8) {
    let short = match byte {
        b'"' => b'"',
        b'\\' => b'\\',
        b'\n' => b'n',
        b'\r' => b'r',
        b'\t' => b't',
        0x08 => b'b',
        0x0c => b'f',
        _ => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0xf)]);
            return;
        }
    };
    out.extend_from_slice(&[b'\\', short]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ours(text: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, text);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_byte_that_needs_it_is_escaped_as_serde_json_does() {
        for byte in 0u8..0x80 {
            let c = char::from(byte);
            for text in [
                c.to_string(),
                format!("abcdefg{c}"),
                format!("{c}abcdefgh"),
                format!("abcdefghijkl{c}mnopqrstuvwx{c}{c}"),
            ] {
                assert_eq!(
                    ours(&text),
                    serde_json::to_string(&text).unwrap(),
                    "{byte:#x}"
                );
            }
        }
        let text = "é\u{7f}\u{2028}😀 \"quoted\"\tand\\back\r\n".repeat(9);
        assert_eq!(ours(&text), serde_json::to_string(&text).unwrap());
    }

    proptest! {
        #[test]
        fn any_text_is_written_as_serde_json_writes_it(text in "(?s).{0,300}") {
            prop_assert_eq!(ours(&text), serde_json::to_string(&text).unwrap());
        }

        #[test]
        fn any_mostly_plain_text_too(text in "[ -~\t\n\"\\\\\u{0}-\u{1f}é]{0,300}") {
            prop_assert_eq!(ours(&text), serde_json::to_string(&text).unwrap());
        }
    }
}

/// The first key some object of `text` (JSON) has twice, if any. A tool call whose input says
/// `path` twice would be run with one and shown, by a reader that takes the other, as the
/// other: such a reply is refused rather than guessed at (README "Security").
pub fn first_duplicate_key(text: &str) -> Option<String> {
    use serde::de::{Deserializer as _, MapAccess, SeqAccess, Visitor};

    struct Walk;
    impl<'de> Visitor<'de> for Walk {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut keys = std::collections::BTreeSet::new();
            let mut found = None;
            while let Some(key) = map.next_key::<String>()? {
                let inner = map.next_value_seed(WalkSeed)?;
                if found.is_none() {
                    found = inner.or_else(|| (!keys.insert(key.clone())).then_some(key));
                }
            }
            Ok(found)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut found = None;
            while let Some(inner) = seq.next_element_seed(WalkSeed)? {
                found = found.or(inner);
            }
            Ok(found)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    struct WalkSeed;
    impl<'de> serde::de::DeserializeSeed<'de> for WalkSeed {
        type Value = Option<String>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(Walk)
        }
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    // Deep nesting is refused by serde_json's own recursion limit (an error: no duplicate).
    deserializer.deserialize_any(Walk).ok().flatten()
}

#[cfg(test)]
mod duplicate_tests {
    use super::first_duplicate_key;

    #[test]
    fn a_key_given_twice_at_any_depth_is_found() {
        assert_eq!(
            first_duplicate_key(r#"{"path":"a","path":"/etc/passwd"}"#).as_deref(),
            Some("path")
        );
        assert_eq!(
            first_duplicate_key(r#"{"a":[{"x":1,"y":2,"x":3}]}"#).as_deref(),
            Some("x")
        );
        assert_eq!(first_duplicate_key(r#"{"a":{"x":1},"b":{"x":2}}"#), None);
        assert_eq!(first_duplicate_key("not json"), None);
    }
}
