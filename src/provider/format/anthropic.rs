//! Anthropic Messages API: request bodies and response parsing.

use serde::Serialize;
use serde_json::{Value, json};

use super::FormatError;
use crate::provider::message::{
    Block, ChatRequest, ChatResponse, Message, Role, StopReason, Usage,
};

/// A request as the Messages API reads it, borrowed from the neutral conversation. The field
/// order is the body's byte order, which is the cached prefix: tools and system first, then the
/// messages, so each turn's request begins with the bytes of the last one.
#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    max_tokens: u32,
    stream: bool,
    /// One text block with a cache breakpoint: tools and system are the stable prefix.
    system: [SystemText<'a>; 1],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoice>,
    messages: Vec<WireMessage<'a>>,
    /// `{"effort": "high"}`: after the messages, so the cached prefix stays the same bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    output_config: Option<OutputConfig>,
}

/// The Messages API's `output_config` (docs/src/agents.md, `effort`).
#[derive(Serialize)]
struct OutputConfig {
    effort: &'static str,
}

/// `{"type": "none"}`: the tools stay offered but none may be called.
#[derive(Serialize)]
struct ToolChoice {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: Role,
    content: Vec<WireBlock<'a>>,
}

/// A block as the wire has it.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock<'a> {
    Text {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<Ephemeral>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<Ephemeral>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<Ephemeral>,
    },
}

/// `{"type": "ephemeral"}`: a cache breakpoint.
#[derive(Serialize, Clone, Copy)]
struct Ephemeral {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: Ephemeral = Ephemeral { kind: "ephemeral" };

impl<'a> WireBlock<'a> {
    fn of(block: &'a Block, cache_control: Option<Ephemeral>) -> Self {
        match block {
            Block::Text { text } => WireBlock::Text {
                text,
                cache_control,
            },
            Block::ToolUse { id, name, input } => WireBlock::ToolUse {
                id,
                name,
                input,
                cache_control,
            },
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => WireBlock::ToolResult {
                tool_use_id,
                content,
                is_error: *is_error,
                cache_control,
            },
        }
    }
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
}

#[derive(Serialize)]
struct SystemText<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    cache_control: Ephemeral,
}

/// The request body. Two cache breakpoints: one on the system prompt (caching tools and
/// system, the stable prefix) and one on the newest message's last block, so each turn reads
/// what the last one wrote; a third at the end of a history shared with others (a fork's). `messages` are the conversation's, already redacted.
pub(super) fn body(req: &ChatRequest, system: &str, messages: &[&Message]) -> Vec<u8> {
    let newest = messages.len().saturating_sub(1);
    let request = Request {
        model: &req.model,
        max_tokens: req.max_tokens,
        stream: true,
        system: [SystemText {
            kind: "text",
            text: system,
            cache_control: EPHEMERAL,
        }],
        tools: req
            .tools
            .iter()
            .map(|t| WireTool {
                name: &t.name,
                description: &t.description,
                input_schema: &t.input_schema,
            })
            .collect(),
        tool_choice: (req.no_tool_calls && !req.tools.is_empty())
            .then_some(ToolChoice { kind: "none" }),
        messages: messages
            .iter()
            .enumerate()
            .map(|(at, message)| {
                let last = message.content.len().saturating_sub(1);
                WireMessage {
                    role: message.role,
                    content: message
                        .content
                        .iter()
                        .enumerate()
                        .map(|(i, b)| {
                            let marked = at == newest || Some(at) == req.shared_until;
                            WireBlock::of(b, (marked && i == last).then_some(EPHEMERAL))
                        })
                        .collect(),
                }
            })
            .collect(),
        output_config: req.effort.map(|e| OutputConfig { effort: e.as_str() }),
    };
    super::to_vec(&request)
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

    fn request_body(request: &ChatRequest) -> Value {
        let body = super::super::body::Body::of(super::super::body::Wire::Anthropic, request);
        serde_json::from_slice(&body.to_vec()).unwrap()
    }

    #[test]
    fn effort_goes_as_output_config_after_the_messages_and_only_when_set() {
        let plain = request_body(&request());
        assert!(plain.get("output_config").is_none(), "{plain}");
        let mut with = request();
        with.effort = Some(crate::provider::message::Effort::Max);
        let body = super::super::body::Body::of(super::super::body::Wire::Anthropic, &with);
        let text = String::from_utf8(body.to_vec()).unwrap();
        let json: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["output_config"], json!({"effort": "max"}));
        assert!(text.find("\"messages\"") < text.find("\"output_config\""));
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
