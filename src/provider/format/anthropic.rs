//! Anthropic Messages API: request bodies and response parsing.

use serde_json::{Value, json};

use super::FormatError;
use crate::provider::message::{
    Block, ChatRequest, ChatResponse, Message, Role, StopReason, Usage,
};

const EPHEMERAL: &str = "ephemeral";

fn block_json(block: &Block) -> Value {
    match block {
        Block::Text { text } => json!({"type": "text", "text": text}),
        Block::ToolUse { id, name, input } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        Block::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => json!({
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": content,
            "is_error": is_error,
        }),
    }
}

fn message_json(message: &Message) -> Value {
    let role = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    json!({"role": role, "content": message.content.iter().map(block_json).collect::<Vec<_>>()})
}

/// The request body. Two cache breakpoints: one on the system prompt (caching tools and system,
/// the stable prefix) and one on the newest message, so each turn reads what the last one wrote.
pub fn request_body(req: &ChatRequest) -> Value {
    let mut messages: Vec<Value> = req.messages.iter().map(message_json).collect();
    if let Some(last) = messages.last_mut()
        && let Some(Value::Object(block)) =
            last["content"].as_array_mut().and_then(|c| c.last_mut())
    {
        block.insert("cache_control".into(), json!({"type": EPHEMERAL}));
    }
    let tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
        .collect();
    let mut body = json!({
        "model": req.model,
        "max_tokens": req.max_tokens,
        "system": [{"type": "text", "text": req.system, "cache_control": {"type": EPHEMERAL}}],
        "messages": messages,
    });
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
    body
}

fn count(usage: &Value, key: &str) -> u64 {
    usage.get(key).and_then(Value::as_u64).unwrap_or(0)
}

pub fn parse_usage(usage: &Value) -> Usage {
    Usage {
        input_tokens: count(usage, "input_tokens"),
        output_tokens: count(usage, "output_tokens"),
        cache_creation_input_tokens: count(usage, "cache_creation_input_tokens"),
        cache_read_input_tokens: count(usage, "cache_read_input_tokens"),
    }
}

pub fn parse_stop_reason(reason: Option<&str>) -> StopReason {
    match reason {
        Some("end_turn") | None => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        Some("stop_sequence") => StopReason::StopSequence,
        Some("pause_turn") => StopReason::PauseTurn,
        Some("refusal") => StopReason::Refusal,
        Some(other) => StopReason::Other(other.to_owned()),
    }
}

pub fn parse_response(body: &Value) -> Result<ChatResponse, FormatError> {
    if body.get("type").and_then(Value::as_str) == Some("error") {
        return Err(FormatError(
            error_message(body).unwrap_or_else(|| body.to_string()),
        ));
    }
    let content = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| FormatError("no `content` in the response".into()))?;
    let mut blocks = Vec::new();
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => blocks.push(Block::Text {
                text: block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            }),
            Some("tool_use") => {
                let id = block.get("id").and_then(Value::as_str);
                let name = block.get("name").and_then(Value::as_str);
                let (Some(id), Some(name)) = (id, name) else {
                    return Err(FormatError(
                        "a `tool_use` block without `id` or `name`".into(),
                    ));
                };
                blocks.push(Block::ToolUse {
                    id: id.to_owned(),
                    name: name.to_owned(),
                    input: block.get("input").cloned().unwrap_or_else(|| json!({})),
                });
            }
            // Thinking and server-tool blocks carry nothing the loop acts on.
            _ => {}
        }
    }
    Ok(ChatResponse {
        content: blocks,
        stop_reason: parse_stop_reason(body.get("stop_reason").and_then(Value::as_str)),
        usage: body.get("usage").map(parse_usage).unwrap_or_default(),
    })
}

/// `error.message` of an error body (`{"type":"error","error":{"type":..,"message":..}}`).
pub fn error_message(body: &Value) -> Option<String> {
    let error = body.get("error")?;
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match error.get("type").and_then(Value::as_str) {
        Some(kind) => Some(format!("{kind}: {message}")),
        None => Some(message.to_owned()),
    }
}

/// Whether an error body says the prompt does not fit (`prompt is too long: ...`).
pub fn context_too_long(body: &Value) -> bool {
    let error = body.get("error");
    let kind = error.and_then(|e| e.get("type")).and_then(Value::as_str);
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    kind == Some("request_too_large") || message.contains("prompt is too long")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::message::one_tool_round;

    fn request() -> ChatRequest {
        one_tool_round("read_file", json!({"path": "a"}), "no", true)
    }

    #[test]
    fn request_has_cache_breakpoints_on_system_and_newest_message() {
        let body = request_body(&request());
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        assert_eq!(
            body["messages"][2]["content"][0]["cache_control"]["type"],
            "ephemeral"
        );
        assert!(
            body["messages"][0]["content"][0]
                .get("cache_control")
                .is_none()
        );
        assert_eq!(body["messages"][2]["content"][0]["is_error"], true);
        assert_eq!(body["messages"][1]["content"][0]["type"], "tool_use");
        assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
        assert_eq!(body["max_tokens"], 100);
    }

    #[test]
    fn response_with_tool_use_and_cache_usage() {
        let body = json!({
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "tu_1", "name": "grep", "input": {"pattern": "x"}}
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 50}
        });
        let r = parse_response(&body).unwrap();
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(r.tool_uses().count(), 1);
        assert_eq!(r.text(), "Looking.");
        assert_eq!(r.usage.cache_read_input_tokens, 50);
        assert_eq!(r.usage.total_input(), 160);
    }

    #[test]
    fn every_stop_reason_parses() {
        for (text, want) in [
            ("end_turn", StopReason::EndTurn),
            ("tool_use", StopReason::ToolUse),
            ("max_tokens", StopReason::MaxTokens),
            ("stop_sequence", StopReason::StopSequence),
            ("pause_turn", StopReason::PauseTurn),
            ("refusal", StopReason::Refusal),
        ] {
            assert_eq!(parse_stop_reason(Some(text)), want);
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(parse_response(&json!({"nope": 1})).is_err());
        assert!(parse_response(&json!({"content": [{"type": "tool_use"}]})).is_err());
        let err = parse_response(
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
        );
        assert_eq!(err.unwrap_err().0, "overloaded_error: busy");
    }
}
