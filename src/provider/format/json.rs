//! Checks on JSON a model or server sends.

/// The first key some object of `text` (JSON) has twice, if any. A tool call whose input says
/// `path` twice would be run with one and shown, by a reader that takes the other, as the
/// other: such a reply is refused rather than guessed at (docs/src/security.md).
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
