//! OpenAI Chat Completions (and the servers that speak it: Ollama, vLLM, llama.cpp, LM Studio,
//! LiteLLM): request bodies and a liberal response parser.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use super::FormatError;
use crate::provider::message::{
    Block, ChatRequest, ChatResponse, Role, StopReason, Usage, text_of,
};

/// Ids for tool calls that came without one; unique within the process.
static SYNTHETIC_IDS: AtomicU64 = AtomicU64::new(1);

pub fn request_body(req: &ChatRequest) -> Value {
    let mut messages = vec![json!({"role": "system", "content": req.system})];
    for message in &req.messages {
        match message.role {
            Role::Assistant => {
                let text = text_of(&message.content);
                let calls: Vec<Value> = message
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        Block::ToolUse { id, name, input } => Some(json!({
                            "id": id,
                            "type": "function",
                            "function": {"name": name, "arguments": input.to_string()},
                        })),
                        _ => None,
                    })
                    .collect();
                let mut m = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::String(text) }});
                if !calls.is_empty() {
                    m["tool_calls"] = Value::Array(calls);
                }
                messages.push(m);
            }
            Role::User => {
                // Tool results become `tool` messages; any text follows as a user message.
                let mut text = Vec::new();
                for block in &message.content {
                    match block {
                        Block::ToolResult {
                            tool_use_id,
                            content,
                            is_error,
                        } => {
                            let content = if *is_error {
                                format!("Error: {content}")
                            } else {
                                content.clone()
                            };
                            messages.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}));
                        }
                        Block::Text { text: t } => text.push(t.as_str()),
                        Block::ToolUse { .. } => {}
                    }
                }
                if !text.is_empty() {
                    messages.push(json!({"role": "user", "content": text.join("\n")}));
                }
            }
        }
    }
    let mut body = json!({"model": req.model, "max_tokens": req.max_tokens, "messages": messages});
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}))
            .collect();
    }
    body
}

/// Tool-call arguments: a JSON string as the API says, or an object as some servers send.
fn arguments(raw: Option<&Value>) -> Value {
    match raw {
        None | Some(Value::Null) => json!({}),
        Some(Value::String(s)) if s.trim().is_empty() => json!({}),
        Some(Value::String(s)) => {
            serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
        }
        Some(other) => other.clone(),
    }
}

pub fn parse_response(body: &Value) -> Result<ChatResponse, FormatError> {
    if let Some(error) = error_message(body) {
        return Err(FormatError(error));
    }
    let choice = body
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| FormatError("no `choices` in the response".into()))?;
    let message = choice
        .get("message")
        .ok_or_else(|| FormatError("no `message` in the first choice".into()))?;
    let mut content = Vec::new();
    if let Some(text) = message.get("content").and_then(Value::as_str)
        && !text.is_empty()
    {
        content.push(Block::Text {
            text: text.to_owned(),
        });
    }
    for call in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let function = call.get("function").unwrap_or(call);
        let Some(name) = function.get("name").and_then(Value::as_str) else {
            return Err(FormatError("a tool call without a function name".into()));
        };
        let id = match call.get("id").and_then(Value::as_str) {
            Some(id) if !id.is_empty() => id.to_owned(),
            _ => format!(
                "call_runner_{}",
                SYNTHETIC_IDS.fetch_add(1, Ordering::Relaxed)
            ),
        };
        content.push(Block::ToolUse {
            id,
            name: name.to_owned(),
            input: arguments(function.get("arguments")),
        });
    }
    let has_calls = content.iter().any(|b| matches!(b, Block::ToolUse { .. }));
    // Some servers say "stop" while returning tool calls: the calls win.
    let stop_reason = match choice.get("finish_reason").and_then(Value::as_str) {
        _ if has_calls => StopReason::ToolUse,
        Some("length") => StopReason::MaxTokens,
        Some("content_filter") => StopReason::Refusal,
        Some("stop") | None => StopReason::EndTurn,
        Some(other) => StopReason::Other(other.to_owned()),
    };
    let usage = body.get("usage").map(|u| {
        let cached = u
            .pointer("/prompt_tokens_details/cached_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let prompt = u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0);
        Usage {
            input_tokens: prompt.saturating_sub(cached),
            output_tokens: u
                .get("completion_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: cached,
        }
    });
    Ok(ChatResponse {
        content,
        stop_reason,
        usage: usage.unwrap_or_default(),
    })
}

/// `error.message` of an error body (`{"error": {"message": ..}}` or `{"error": "..."}`).
pub fn error_message(body: &Value) -> Option<String> {
    match body.get("error")? {
        Value::String(s) => Some(s.clone()),
        Value::Object(e) => Some(
            e.get("message")
                .and_then(Value::as_str)
                .unwrap_or("unknown error")
                .to_owned(),
        ),
        _ => None,
    }
}

/// Whether an error body says the prompt does not fit (`context_length_exceeded`).
pub fn context_too_long(body: &Value) -> bool {
    let error = body.get("error");
    let code = error.and_then(|e| e.get("code")).and_then(Value::as_str);
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    code == Some("context_length_exceeded") || message.contains("maximum context length")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::message::one_tool_round;

    #[test]
    fn request_maps_tool_calls_and_results() {
        let req = one_tool_round("glob", json!({"pattern": "*.rs"}), "a.rs", false);
        let body = request_body(&req);
        let m = body["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "sys"}));
        assert_eq!(m[1], json!({"role": "user", "content": "hi"}));
        assert_eq!(m[2]["content"], Value::Null);
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            "{\"pattern\":\"*.rs\"}"
        );
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "t1", "content": "a.rs"})
        );
        assert_eq!(body["tools"][0]["type"], "function");
        assert_eq!(body["tools"][0]["function"]["parameters"]["type"], "object");
    }

    #[test]
    fn liberal_parsing_of_compatible_servers() {
        // No id, arguments as an object, finish_reason "stop" with tool calls.
        let body = json!({
            "choices": [{"message": {"content": null, "tool_calls": [
                {"type": "function", "function": {"name": "grep", "arguments": {"pattern": "x"}}},
                {"id": "c2", "type": "function", "function": {"name": "glob", "arguments": "{\"pattern\":\"*\"}"}}
            ]}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 10}}
        });
        let r = parse_response(&body).unwrap();
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        let calls: Vec<_> = r.tool_uses().collect();
        assert!(calls[0].0.starts_with("call_runner_"));
        assert_eq!(calls[0].2, &json!({"pattern": "x"}));
        assert_eq!(calls[1].0, "c2");
        assert_eq!(calls[1].2, &json!({"pattern": "*"}));
        assert_eq!(r.usage.input_tokens, 20);
        assert_eq!(r.usage.cache_read_input_tokens, 10);
    }

    #[test]
    fn plain_answers_and_errors() {
        let r = parse_response(
            &json!({"choices": [{"message": {"content": "done"}, "finish_reason": "stop"}]}),
        )
        .unwrap();
        assert_eq!(r.text(), "done");
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        let cut = parse_response(
            &json!({"choices": [{"message": {"content": "do"}, "finish_reason": "length"}]}),
        )
        .unwrap();
        assert_eq!(cut.stop_reason, StopReason::MaxTokens);
        assert!(parse_response(&json!({"choices": []})).is_err());
        assert_eq!(
            parse_response(&json!({"error": {"message": "bad model"}}))
                .unwrap_err()
                .0,
            "bad model"
        );
    }
}
