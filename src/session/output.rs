//! Structured output: a step with `output_schema` must end with a JSON value that validates.

use serde_json::Value;

/// The JSON in a final answer: the last ```json fenced block, else the whole text, else the last
/// `{...}` or `[...]` span.
pub fn extract(text: &str) -> Option<Value> {
    let mut fenced = None;
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        let body_start = after.find('\n').map_or(after.len(), |i| i + 1);
        let lang = after[..body_start].trim();
        let body = &after[body_start..];
        let Some(end) = body.find("```") else { break };
        if lang.is_empty() || lang.eq_ignore_ascii_case("json") {
            fenced = Some(&body[..end]);
        }
        rest = &body[end + 3..];
    }
    if let Some(value) = fenced.and_then(|f| serde_json::from_str(f.trim()).ok()) {
        return Some(value);
    }
    if let Ok(value) = serde_json::from_str(text.trim()) {
        return Some(value);
    }
    for (open, close) in [('{', '}'), ('[', ']')] {
        if let (Some(start), Some(end)) = (text.find(open), text.rfind(close))
            && start < end
            && let Ok(value) = serde_json::from_str(&text[start..=end])
        {
            return Some(value);
        }
    }
    None
}

/// The parsed value, or what is wrong with it (for the model to fix).
pub fn check(text: &str, schema: &Value) -> Result<Value, String> {
    let Some(value) = extract(text) else {
        return Err("the answer holds no JSON value".into());
    };
    let validator =
        jsonschema::validator_for(schema).map_err(|e| format!("the schema is invalid: {e}"))?;
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .take(5)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("at {at}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(errors.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_json_in_fences_plain_text_and_prose() {
        assert_eq!(extract("```json\n{\"a\": 1}\n```"), Some(json!({"a": 1})));
        assert_eq!(
            extract("Here:\n```\n[1, 2]\n```\nDone."),
            Some(json!([1, 2]))
        );
        assert_eq!(extract(" {\"a\": true} "), Some(json!({"a": true})));
        assert_eq!(
            extract("The result is {\"ok\": false} as asked."),
            Some(json!({"ok": false}))
        );
        assert_eq!(extract("```rust\nfn x() -> u8 { 1 }\n```"), None);
        assert_eq!(extract("no json here"), None);
    }

    #[test]
    fn validates_against_the_schema() {
        let schema =
            json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}});
        assert_eq!(check("{\"n\": 3}", &schema), Ok(json!({"n": 3})));
        let err = check("{\"n\": \"three\"}", &schema).unwrap_err();
        assert!(err.contains("/n"), "{err}");
        assert!(
            check("{}", &schema)
                .unwrap_err()
                .contains("\"n\" is a required property")
        );
        assert!(check("nothing", &schema).unwrap_err().contains("no JSON"));
    }
}
