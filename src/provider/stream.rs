//! Streamed replies (README "Models and providers"): the server-sent events of both APIs put back
//! together into the body the API would have sent unstreamed, so one parser reads either. An error
//! event in the middle of a stream becomes the error it means (overloaded and server errors are
//! retried like a failed request; nothing of the partial reply is kept).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::error::ProviderError;

fn parse(data: &str) -> Result<Value, ProviderError> {
    serde_json::from_str(data).map_err(|err| ProviderError::InvalidResponse {
        message: format!("a stream event is not JSON ({err})"),
    })
}

/// What an error in a stream means, by the kind of error it names.
fn stream_error(kind: &str, message: String) -> ProviderError {
    let kind = kind.to_ascii_lowercase();
    if kind.contains("rate") {
        ProviderError::RateLimited {
            message,
            retry_after: None,
        }
    } else if kind.contains("overloaded") || kind.contains("api_error") || kind.contains("server") {
        ProviderError::Overloaded {
            status: if kind.contains("overloaded") {
                529
            } else {
                500
            },
            message,
            retry_after: None,
        }
    } else {
        ProviderError::BadRequest {
            status: 400,
            message,
        }
    }
}

/// A reply put back together from its events.
pub trait Assemble: Default + Send {
    fn event(&mut self, kind: &str, data: &str) -> Result<(), ProviderError>;
    /// Characters of reply seen so far, for progress.
    fn chars(&self) -> usize;
    /// The reply as the API's one-body answer.
    fn finish(self) -> Value;
}

/// Posts `body` for a streamed reply and assembles it with `A`, telling `progress` as it grows.
pub async fn post<A: Assemble>(
    endpoint: &super::http::Endpoint,
    body: &super::format::body::Body,
    errors: &super::http::ErrorBodies,
    progress: &(dyn Fn(usize) + Send + Sync),
) -> Result<Value, ProviderError> {
    let mut assembled = A::default();
    let mut on_event = |kind: &str, data: &str| {
        assembled.event(kind, data)?;
        progress(assembled.chars());
        Ok(())
    };
    let whole = super::http::post_events(endpoint, body, errors, &mut on_event).await?;
    Ok(whole.unwrap_or_else(|| assembled.finish()))
}

/// Anthropic's Messages stream: `message_start`, content blocks opened, grown by deltas (text,
/// or tool input as JSON in pieces) and closed, `message_delta` (stop reason, usage),
/// `message_stop`; `ping` and `error` in between.
#[derive(Default)]
pub struct AnthropicStream {
    message: Map<String, Value>,
    blocks: BTreeMap<u64, Value>,
    /// Text of each block from its deltas, joined into the block when it closes (joining at
    /// every delta would copy the text so far each time).
    texts: BTreeMap<u64, String>,
    partial_json: BTreeMap<u64, String>,
    chars: usize,
}

/// One event of Anthropic's stream, read into its parts rather than into a JSON tree: most are
/// deltas of a few characters, borrowed from the event's text where they need no unescaping.
#[derive(Deserialize)]
struct AnthropicEvent<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    index: u64,
    #[serde(default)]
    message: Option<Map<String, Value>>,
    #[serde(default)]
    content_block: Option<Value>,
    #[serde(default, borrow)]
    delta: Option<AnthropicDelta<'a>>,
    #[serde(default)]
    usage: Option<Map<String, Value>>,
    #[serde(default)]
    error: Option<Value>,
}

/// A content block's delta, or the message's (which carries the stop reason).
#[derive(Deserialize)]
struct AnthropicDelta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default)]
    stop_reason: Option<Value>,
}

impl AnthropicStream {
    /// A block's streamed text joined onto the text it opened with.
    fn settle_text(&mut self, index: u64) {
        if let Some(text) = self.texts.remove(&index) {
            let block = self.blocks.entry(index).or_insert_with(|| json!({}));
            let joined = match block.get("text").and_then(Value::as_str) {
                Some(opening) if !opening.is_empty() => format!("{opening}{text}"),
                _ => text,
            };
            block["text"] = Value::String(joined);
        }
    }
}

impl Assemble for AnthropicStream {
    fn chars(&self) -> usize {
        self.chars
    }

    fn event(&mut self, _kind: &str, data: &str) -> Result<(), ProviderError> {
        let event: AnthropicEvent =
            serde_json::from_str(data).map_err(|err| ProviderError::InvalidResponse {
                message: format!("a stream event cannot be read ({err})"),
            })?;
        let index = event.index;
        match &*event.kind {
            "message_start" => {
                if let Some(message) = event.message {
                    self.message = message;
                }
            }
            "content_block_start" => {
                let mut block = event.content_block.unwrap_or_else(|| json!({}));
                if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                    block["input"] = json!({});
                }
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let Some(delta) = event.delta else {
                    return Ok(());
                };
                self.blocks.entry(index).or_insert_with(|| json!({}));
                match delta.kind.as_deref() {
                    Some("text_delta") => {
                        let text = delta.text.unwrap_or_default();
                        self.chars += text.len();
                        self.texts.entry(index).or_default().push_str(&text);
                    }
                    Some("input_json_delta") => {
                        let part = delta.partial_json.unwrap_or_default();
                        self.chars += part.len();
                        self.partial_json.entry(index).or_default().push_str(&part);
                    }
                    // Thinking and signatures carry nothing the loop acts on.
                    _ => {}
                }
            }
            "content_block_stop" => {
                self.settle_text(index);
                if let Some(json) = self.partial_json.remove(&index)
                    && !json.trim().is_empty()
                {
                    let input: Value = serde_json::from_str(&json).map_err(|err| {
                        ProviderError::InvalidResponse {
                            message: format!("a streamed tool input is not JSON ({err})"),
                        }
                    })?;
                    if let Some(block) = self.blocks.get_mut(&index) {
                        block["input"] = input;
                    }
                }
            }
            "message_delta" => {
                if let Some(reason) = event.delta.and_then(|d| d.stop_reason) {
                    self.message.insert("stop_reason".into(), reason);
                }
                if let Some(usage) = event.usage {
                    let entry = self.message.entry("usage").or_insert_with(|| json!({}));
                    for (key, value) in usage {
                        if !value.is_null() {
                            entry[key] = value;
                        }
                    }
                }
            }
            "error" => {
                let error = event.error.unwrap_or_default();
                let kind = error.get("type").and_then(Value::as_str).unwrap_or("error");
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("an error event in the stream");
                return Err(stream_error(
                    kind,
                    format!("{kind}: {message} (mid-stream)"),
                ));
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(mut self) -> Value {
        let unsettled: Vec<u64> = self.texts.keys().copied().collect();
        for index in unsettled {
            self.settle_text(index);
        }
        self.message.insert(
            "content".into(),
            Value::Array(self.blocks.into_values().collect()),
        );
        Value::Object(self.message)
    }
}

/// OpenAI's Chat Completions stream: chunks whose first choice carries a delta (text, or tool
/// calls by index with their arguments in pieces) and in the end a finish reason; usage comes
/// in a last chunk (`stream_options.include_usage`); `[DONE]` ends it.
#[derive(Default)]
pub struct OpenAiStream {
    text: String,
    /// Tool calls by index: id, name, arguments so far.
    calls: BTreeMap<u64, (String, String, String)>,
    finish_reason: Value,
    usage: Value,
    model: Value,
    chars: usize,
}

impl Assemble for OpenAiStream {
    fn chars(&self) -> usize {
        self.chars
    }

    fn event(&mut self, _kind: &str, data: &str) -> Result<(), ProviderError> {
        if data.trim() == "[DONE]" {
            return Ok(());
        }
        let chunk = parse(data)?;
        if let Some(error) = chunk.get("error") {
            let kind = error
                .get("type")
                .or(error.get("code"))
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .unwrap_or_else(|| "server_error".into());
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("an error in the stream");
            return Err(stream_error(
                &kind,
                format!("{kind}: {message} (mid-stream)"),
            ));
        }
        if let Some(model) = chunk.get("model") {
            self.model = model.clone();
        }
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.usage = usage.clone();
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return Ok(());
        };
        if let Some(text) = choice.pointer("/delta/content").and_then(Value::as_str) {
            self.chars += text.len();
            self.text.push_str(text);
        }
        for call in choice
            .pointer("/delta/tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            let entry = self.calls.entry(index).or_default();
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                entry.0 = id.to_owned();
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                entry.1.push_str(name);
            }
            if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
                self.chars += args.len();
                entry.2.push_str(args);
            }
        }
        if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
            self.finish_reason = reason.clone();
        }
        Ok(())
    }

    fn finish(self) -> Value {
        let mut message = json!({
            "role": "assistant",
            "content": if self.text.is_empty() { Value::Null } else { Value::String(self.text) },
        });
        if !self.calls.is_empty() {
            message["tool_calls"] = Value::Array(
                self.calls
                    .into_values()
                    .map(|(id, name, arguments)| {
                        json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
                    })
                    .collect(),
            );
        }
        json!({
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_text_keeps_its_opening_and_survives_an_unclosed_block() {
        let mut stream = AnthropicStream::default();
        for data in [
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"A"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"b\"c"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"x"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"y"}}"#,
        ] {
            stream.event("", data).unwrap();
        }
        assert_eq!(stream.chars(), 5);
        let body = stream.finish();
        assert_eq!(body["content"][0]["text"], "Ab\"c");
        assert_eq!(body["content"][1]["text"], "xy");
        let err = AnthropicStream::default().event("", "{").unwrap_err();
        assert!(
            err.to_string().contains("a stream event cannot be read"),
            "{err}"
        );
    }

    #[test]
    fn anthropic_events_assemble_text_and_tool_input() {
        let mut stream = AnthropicStream::default();
        for data in [
            r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"x","content":[],"usage":{"input_tokens":12,"output_tokens":1}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t1","name":"grep","input":{}}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"pat"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"tern\": \"x\"}"}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":20}}"#,
            r#"{"type":"message_stop"}"#,
        ] {
            stream.event("", data).unwrap();
        }
        let body = stream.finish();
        assert_eq!(body["content"][0], json!({"type": "text", "text": "Hello"}));
        assert_eq!(body["content"][1]["input"], json!({"pattern": "x"}));
        assert_eq!(body["stop_reason"], "tool_use");
        assert_eq!(
            body["usage"],
            json!({"input_tokens": 12, "output_tokens": 20})
        );
        let mut stream = AnthropicStream::default();
        let err = stream
            .event(
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            )
            .unwrap_err();
        assert!(err.retryable(), "{err}");
    }

    #[test]
    fn openai_chunks_assemble_text_tool_calls_by_index_and_usage() {
        let mut stream = OpenAiStream::default();
        for data in [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Lo"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"oking"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"grep","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c2","function":{"name":"read_file","arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pattern\":\"a\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"x\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":9}}"#,
            "[DONE]",
        ] {
            stream.event("", data).unwrap();
        }
        let body = stream.finish();
        let message = &body["choices"][0]["message"];
        assert_eq!(message["content"], "Looking");
        assert_eq!(
            message["tool_calls"][0]["function"]["arguments"],
            "{\"pattern\":\"a\"}"
        );
        assert_eq!(message["tool_calls"][1]["id"], "c2");
        assert_eq!(
            message["tool_calls"][1]["function"]["arguments"],
            "{\"path\":\"x\"}"
        );
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(body["usage"]["completion_tokens"], 9);
    }
}
