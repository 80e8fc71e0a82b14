//! Anthropic Messages API: request bodies and response parsing.

use serde::Serialize;
use serde_json::{Value, json};

use super::FormatError;
use crate::provider::message::{
    Block, ChatRequest, ChatResponse, Message, Role, StopReason, Usage,
};

/// A block as the wire has it, borrowed from the conversation: what [`message`] writes by hand.
#[cfg(test)]
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

#[cfg(test)]
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

/// Writes `value` as JSON; the types written here are plain data, which cannot fail to encode.
pub(super) fn put(out: &mut Vec<u8>, value: &impl Serialize) {
    let _ = serde_json::to_writer(&mut *out, value);
}

/// The body up to the `messages` array's `[`. Two cache breakpoints: one on the system prompt
/// (caching tools and system, the stable prefix) and one on the newest message (see
/// [`message`]), so each turn reads what the last one wrote.
pub(super) fn head(req: &ChatRequest) -> Vec<u8> {
    let mut out = Vec::with_capacity(req.system.len() + 4096);
    out.extend_from_slice(b"{\"model\":");
    put(&mut out, &req.model);
    out.extend_from_slice(b",\"max_tokens\":");
    put(&mut out, &req.max_tokens);
    out.extend_from_slice(b",\"stream\":true,\"system\":");
    put(
        &mut out,
        &[SystemText {
            kind: "text",
            text: &req.system,
            cache_control: EPHEMERAL,
        }],
    );
    if !req.tools.is_empty() {
        out.extend_from_slice(b",\"tools\":");
        let tools: Vec<WireTool> = req
            .tools
            .iter()
            .map(|t| WireTool {
                name: &t.name,
                description: &t.description,
                input_schema: &t.input_schema,
            })
            .collect();
        put(&mut out, &tools);
        if req.no_tool_calls {
            out.extend_from_slice(b",\"tool_choice\":{\"type\":\"none\"}");
        }
    }
    out.extend_from_slice(b",\"messages\":[");
    out
}

/// One message; the newest carries the cache breakpoint on its last block. Written by hand, as
/// [`WireBlock`]'s derived serializer would write it (a test holds it to that), so that a long
/// text is escaped by [`super::json::write_str`].
pub(super) fn message(out: &mut Vec<u8>, message: &Message, first: bool, newest: bool) {
    use super::json::write_str;
    if !first {
        out.push(b',');
    }
    out.extend_from_slice(match message.role {
        Role::User => b"{\"role\":\"user\",\"content\":[",
        Role::Assistant => b"{\"role\":\"assistant\",\"content\":[",
    });
    let last = message.content.len().saturating_sub(1);
    for (i, block) in message.content.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match block {
            Block::Text { text } => {
                out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
                write_str(out, text);
            }
            Block::ToolUse { id, name, input } => {
                out.extend_from_slice(b"{\"type\":\"tool_use\",\"id\":");
                write_str(out, id);
                out.extend_from_slice(b",\"name\":");
                write_str(out, name);
                out.extend_from_slice(b",\"input\":");
                put(out, input);
            }
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => {
                out.extend_from_slice(b"{\"type\":\"tool_result\",\"tool_use_id\":");
                write_str(out, tool_use_id);
                out.extend_from_slice(b",\"content\":");
                write_str(out, content);
                out.extend_from_slice(if *is_error {
                    b",\"is_error\":true"
                } else {
                    b",\"is_error\":false"
                });
            }
        }
        if newest && i == last {
            out.extend_from_slice(br#","cache_control":{"type":"ephemeral"}"#);
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
}

/// [`message`] through the derived serializer: what it must write.
#[cfg(test)]
fn message_by_serde(out: &mut Vec<u8>, message: &Message, first: bool, newest: bool) {
    if !first {
        out.push(b',');
    }
    out.extend_from_slice(match message.role {
        Role::User => b"{\"role\":\"user\",\"content\":",
        Role::Assistant => b"{\"role\":\"assistant\",\"content\":",
    });
    let last = message.content.len().saturating_sub(1);
    let blocks: Vec<WireBlock> = message
        .content
        .iter()
        .enumerate()
        .map(|(i, b)| WireBlock::of(b, (newest && i == last).then_some(EPHEMERAL)))
        .collect();
    put(out, &blocks);
    out.push(b'}');
}

/// The breakpoint as [`message`] writes it on the newest message's last block, with the `}]}`
/// that then closes the block, the content and the message.
const MARKED_END: &[u8] = br#","cache_control":{"type":"ephemeral"}}]}"#;

/// A message's newest form made from its settled form, as [`message`] would write it: the
/// breakpoint is the last field of the last block. The two forms share all but the settled
/// form's last three bytes: how many they share. `None` (and nothing written) when the bytes do
/// not end in a block (a message without blocks): the caller writes it then.
pub(super) fn mark_newest(settled: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    let body = settled.strip_suffix(b"}]}")?;
    out.extend_from_slice(body);
    out.extend_from_slice(MARKED_END);
    Some(body.len())
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

    #[test]
    fn messages_are_written_as_the_derived_serializer_writes_them() {
        let odd = "a \"quoted\"\tline\\ with é, \u{1} and \u{7f}\r\n".repeat(3);
        let messages = [
            Message {
                role: Role::Assistant,
                content: vec![
                    Block::Text { text: odd.clone() },
                    Block::ToolUse {
                        id: "t\"1".into(),
                        name: "read_file".into(),
                        input: json!({"path": odd, "n": [1, 2.5, null, true]}),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    Block::ToolResult {
                        tool_use_id: "t1".into(),
                        content: odd.clone(),
                        is_error: true,
                    },
                    Block::ToolResult {
                        tool_use_id: "t2".into(),
                        content: String::new(),
                        is_error: false,
                    },
                    Block::Text {
                        text: "more".into(),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: Vec::new(),
            },
        ];
        for message in &messages {
            for (first, newest) in [(true, false), (false, true), (true, true), (false, false)] {
                let (mut ours, mut theirs) = (Vec::new(), Vec::new());
                super::message(&mut ours, message, first, newest);
                message_by_serde(&mut theirs, message, first, newest);
                assert_eq!(
                    String::from_utf8(ours).unwrap(),
                    String::from_utf8(theirs).unwrap()
                );
            }
        }
    }
    use crate::provider::message::one_tool_round;

    fn request() -> ChatRequest {
        one_tool_round("read_file", json!({"path": "a"}), "no", true)
    }

    /// The newest form made from the settled one is, byte for byte, what writing the message
    /// as the newest gives, for every kind of block, several blocks, escapes and no blocks.
    #[test]
    fn the_newest_form_made_from_the_settled_one_is_the_written_one() {
        let blocks = vec![
            Block::Text {
                text: "plain \"quoted\"\n\u{1F600} \\ end}]}".into(),
            },
            Block::ToolUse {
                id: "t1".into(),
                name: "grep".into(),
                input: json!({"pattern": "}]}", "nested": {"a": [1, 2]}}),
            },
            Block::ToolResult {
                tool_use_id: "t1".into(),
                content: "a:1:x\n".repeat(50),
                is_error: true,
            },
        ];
        let mut messages: Vec<Message> = Vec::new();
        for role in [Role::User, Role::Assistant] {
            for block in &blocks {
                messages.push(Message {
                    role,
                    content: vec![block.clone()],
                });
            }
            messages.push(Message {
                role,
                content: blocks.clone(),
            });
        }
        for message in &messages {
            for first in [true, false] {
                let mut settled = Vec::new();
                super::message(&mut settled, message, first, false);
                let mut direct = Vec::new();
                super::message(&mut direct, message, first, true);
                let mut made = Vec::new();
                let shared = mark_newest(&settled, &mut made).unwrap();
                // What the forms are said to share, they share.
                assert_eq!(settled[..shared], made[..shared]);
                assert_eq!(
                    String::from_utf8(made).unwrap(),
                    String::from_utf8(direct).unwrap()
                );
            }
        }
        let empty = Message {
            role: Role::User,
            content: Vec::new(),
        };
        let mut settled = Vec::new();
        super::message(&mut settled, &empty, true, false);
        let mut made = Vec::new();
        assert!(mark_newest(&settled, &mut made).is_none() && made.is_empty());
    }

    fn request_body(request: &ChatRequest) -> Value {
        let body = super::super::body::Body::of(super::super::body::Wire::Anthropic, request);
        serde_json::from_slice(&body.to_vec()).unwrap()
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
