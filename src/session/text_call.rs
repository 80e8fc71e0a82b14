//! A tool call written as text. Local models served with their own chat template (llama.cpp,
//! Ollama, vLLM without a tool parser) often answer with the call as plain content: bare JSON
//! `{"name": …, "arguments": {…}}`, fenced in a code block, or inside `<tool_call>` tags. Taken
//! as a final answer, that is a silent false success; so a reply whose *whole* text is one call
//! of a tool the step was offered is run as that call (docs/src/runs.md, "Agents that loop or
//! run out of turns"). Anything else stays text.

use serde_json::Value;

use crate::provider::message::ToolDef;

/// The call `text` is, when its whole text is one call of one of `tools`: the tool's name and
/// its input.
pub fn parse(text: &str, tools: &[ToolDef]) -> Option<(String, Value)> {
    let inner = unwrap(text.trim())?;
    let value: Value = serde_json::from_str(inner).ok()?;
    let object = value.as_object()?;
    let name = object.get("name")?.as_str()?;
    if !tools.iter().any(|t| t.name == name) {
        return None;
    }
    let input = match object.get("arguments").or_else(|| object.get("parameters")) {
        None => Value::Object(Default::default()),
        // Double-encoded: the arguments as a JSON string.
        Some(Value::String(encoded)) => serde_json::from_str(encoded).ok()?,
        Some(arguments) => arguments.clone(),
    };
    input.is_object().then(|| (name.to_owned(), input))
}

/// The JSON inside a fence or `<tool_call>` tags, or the text itself when it is bare.
fn unwrap(text: &str) -> Option<&str> {
    if let Some(rest) = text.strip_prefix("<tool_call>") {
        return Some(rest.strip_suffix("</tool_call>")?.trim());
    }
    if let Some(rest) = text.strip_prefix("```") {
        let rest = rest.strip_suffix("```")?;
        // The fence's language (`json`), up to the first line end.
        let body = rest.split_once('\n').map_or(rest, |(lang, body)| {
            if lang.trim().chars().all(|c| c.is_ascii_alphanumeric()) {
                body
            } else {
                rest
            }
        });
        return Some(body.trim());
    }
    text.starts_with('{').then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> Vec<ToolDef> {
        ["grep", "read_file"]
            .iter()
            .map(|name| ToolDef {
                name: (*name).into(),
                description: String::new(),
                input_schema: json!({}),
            })
            .collect()
    }

    #[test]
    fn a_whole_text_call_in_each_form_is_a_call() {
        let want = Some(("grep".to_owned(), json!({"pattern": "login"})));
        for text in [
            r#"{"name": "grep", "arguments": {"pattern": "login"}}"#,
            "```json\n{\"name\": \"grep\", \"arguments\": {\"pattern\": \"login\"}}\n```",
            "```\n{\"name\": \"grep\", \"arguments\": {\"pattern\": \"login\"}}\n```\n",
            "<tool_call>\n{\"name\": \"grep\", \"arguments\": {\"pattern\": \"login\"}}\n</tool_call>",
            r#"{"name": "grep", "arguments": "{\"pattern\": \"login\"}"}"#,
            r#"{"name": "grep", "parameters": {"pattern": "login"}}"#,
        ] {
            assert_eq!(parse(text, &tools()), want, "{text}");
        }
    }

    #[test]
    fn anything_else_stays_text() {
        for text in [
            "The answer is in src/auth.py.",
            r#"Here is the call: {"name": "grep", "arguments": {}}"#,
            r#"{"name": "bash", "arguments": {"command": "ls"}}"#,
            r#"{"name": "grep", "arguments": [1]}"#,
            r#"{"files": ["a"]}"#,
            "```json\n{\"name\": \"grep\"\n",
        ] {
            assert_eq!(parse(text, &tools()), None, "{text}");
        }
    }
}
