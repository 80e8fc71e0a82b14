//! Streamed replies (docs/src/models.md): the server-sent events of both APIs read into
//! the reply the loop acts on, and kept as the body the API would have sent unstreamed (for the
//! transcript and cassettes). Chat Completions chunks are put back together into that body and
//! read by its parser; Anthropic's events are read as they come, their body made only where it
//! is written. An error event in the middle of a stream becomes the error it means (overloaded
//! and server errors are retried like a failed request; nothing of the partial reply is kept).
//!
//! What the assemblers buy: one reply from either API's pieces, the quirks of OpenAI-compatible
//! servers (arguments as objects or double-encoded, no ids, usage in the last chunk) absorbed in
//! one place, and streaming (progress, idle waits) without the session knowing the wire. No
//! crate assembles both APIs' streams into a neutral reply.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::api::{Exchange, Raw};
use super::error::ProviderError;
use super::format;
use super::message::{Block, ChatResponse, Usage};
use super::parts::AnthropicParts;

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
    /// The reply, read and as the API sent it.
    fn finish(self) -> Result<Exchange, ProviderError>;
    /// A reply the server sent as one body instead of a stream.
    fn whole(body: Value) -> Result<Exchange, ProviderError>;
}

/// Posts `body` for a streamed reply and assembles it with `A`, telling `progress` as it grows.
pub async fn post<A: Assemble>(
    endpoint: &super::http::Endpoint,
    body: &super::format::body::Body,
    errors: &super::http::ErrorBodies,
    progress: &(dyn Fn(usize) + Send + Sync),
) -> Result<Exchange, ProviderError> {
    let mut assembled = A::default();
    let mut on_event = |kind: &str, data: &str| {
        assembled.event(kind, data)?;
        progress(assembled.chars());
        Ok(())
    };
    match super::http::post_events(endpoint, body, errors, &mut on_event).await? {
        Some(whole) => A::whole(whole),
        None => assembled.finish(),
    }
}

/// Anthropic's Messages stream: `message_start`, content blocks opened, grown by deltas (text,
/// or tool input as JSON in pieces) and closed, `message_delta` (stop reason, usage),
/// `message_stop`; `ping` and `error` in between.
///
/// The loop needs only a few fields of it: those are read as the events come, into the reply
/// the loop acts on. The rest is kept as the text it came in ([`AnthropicParts`]), and the body
/// the API would have sent unstreamed is made from it where it is written (the transcript, a
/// cassette), off the step's thread (docs/src/performance.md).
#[derive(Default)]
pub struct AnthropicStream {
    parts: AnthropicParts,
    /// What the loop reads of each block, by index.
    read: BTreeMap<u64, Read>,
    /// The usage counts and stop reason so far (the start's, then each delta's over them).
    counts: Counts,
    stop_reason: Option<String>,
    chars: usize,
}

/// What the loop reads of a block: its type, id, name and opening text, and the tool input it
/// closed with.
#[derive(Default)]
struct Read {
    kind: Option<String>,
    id: Option<String>,
    name: Option<String>,
    text: Option<String>,
    input: Option<Value>,
}

/// Token counts as they stand; a field is whatever JSON value the API sent for it.
#[derive(Deserialize, Default)]
struct Counts {
    #[serde(default)]
    input_tokens: Option<Value>,
    #[serde(default)]
    output_tokens: Option<Value>,
    #[serde(default)]
    cache_creation_input_tokens: Option<Value>,
    #[serde(default)]
    cache_read_input_tokens: Option<Value>,
}

impl Counts {
    /// The counts `later` sends laid over these (a count it leaves out or sends as null stays).
    fn update(&mut self, later: Counts) {
        let pairs = [
            (&mut self.input_tokens, later.input_tokens),
            (&mut self.output_tokens, later.output_tokens),
            (
                &mut self.cache_creation_input_tokens,
                later.cache_creation_input_tokens,
            ),
            (
                &mut self.cache_read_input_tokens,
                later.cache_read_input_tokens,
            ),
        ];
        for (slot, value) in pairs {
            if value.is_some() {
                *slot = value;
            }
        }
    }

    fn usage(&self) -> Usage {
        let count = |v: &Option<Value>| v.as_ref().and_then(Value::as_u64).unwrap_or(0);
        Usage {
            input_tokens: count(&self.input_tokens),
            output_tokens: count(&self.output_tokens),
            cache_creation_input_tokens: count(&self.cache_creation_input_tokens),
            cache_read_input_tokens: count(&self.cache_read_input_tokens),
        }
    }
}

/// One event of Anthropic's stream, read into its parts rather than into a JSON tree: most are
/// deltas of a few characters, borrowed from the event's text where they need no unescaping;
/// the start's message and a block's opening are kept as their text.
#[derive(Deserialize)]
struct AnthropicEvent<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    index: u64,
    #[serde(default, borrow)]
    message: Option<&'a RawValue>,
    #[serde(default, borrow)]
    content_block: Option<&'a RawValue>,
    #[serde(default, borrow)]
    delta: Option<AnthropicDelta<'a>>,
    #[serde(default, borrow)]
    usage: Option<&'a RawValue>,
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
    #[serde(default, borrow)]
    stop_reason: Option<&'a RawValue>,
}

/// The fields of the start's message the loop reads.
#[derive(Deserialize)]
struct StartMessage<'a> {
    #[serde(default, borrow)]
    usage: Option<&'a RawValue>,
    #[serde(default, borrow)]
    stop_reason: Option<&'a RawValue>,
}

/// The fields of a block's opening the loop reads; any may be of any JSON type.
#[derive(Deserialize, Default)]
struct BlockStart<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<&'a RawValue>,
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    text: Option<&'a RawValue>,
}

/// A field's text when it is a JSON string.
fn string(raw: Option<&RawValue>) -> Option<String> {
    raw.and_then(|r| serde_json::from_str::<Cow<str>>(r.get()).ok())
        .map(Cow::into_owned)
}

fn unreadable(err: serde_json::Error) -> ProviderError {
    ProviderError::InvalidResponse {
        message: format!("a stream event cannot be read ({err})"),
    }
}

impl Assemble for AnthropicStream {
    fn chars(&self) -> usize {
        self.chars
    }

    // Over 80 lines: one arm per streamed event type of the API.
    fn event(&mut self, _kind: &str, data: &str) -> Result<(), ProviderError> {
        let event: AnthropicEvent = serde_json::from_str(data).map_err(unreadable)?;
        let index = event.index;
        match &*event.kind {
            "message_start" => {
                if let Some(message) = event.message {
                    let start: StartMessage =
                        serde_json::from_str(message.get()).map_err(unreadable)?;
                    // Usage that is not an object counts nothing, as it does unstreamed.
                    self.counts = start
                        .usage
                        .and_then(|u| serde_json::from_str(u.get()).ok())
                        .unwrap_or_default();
                    self.stop_reason = string(start.stop_reason);
                    // A new start stands for the whole message: deltas before it are gone.
                    self.parts.message = Some(message.get().to_owned());
                    self.parts.deltas.clear();
                }
            }
            "content_block_start" => {
                let raw = event.content_block.map(RawValue::get);
                // A block that is not an object opens nothing the loop reads.
                let start: BlockStart = raw
                    .and_then(|raw| serde_json::from_str(raw).ok())
                    .unwrap_or_default();
                let read = self.read.entry(index).or_default();
                read.kind = string(start.kind);
                read.id = string(start.id);
                read.name = string(start.name);
                read.text = string(start.text);
                self.parts.blocks.entry(index).or_default().start = raw.map(str::to_owned);
            }
            "content_block_delta" => {
                let Some(delta) = event.delta else {
                    return Ok(());
                };
                let part = self.parts.blocks.entry(index).or_default();
                match delta.kind.as_deref() {
                    Some("text_delta") => {
                        let text = delta.text.unwrap_or_default();
                        self.chars += text.len();
                        part.text.get_or_insert_with(String::new).push_str(&text);
                    }
                    Some("input_json_delta") => {
                        let piece = delta.partial_json.unwrap_or_default();
                        self.chars += piece.len();
                        part.partial_json
                            .get_or_insert_with(String::new)
                            .push_str(&piece);
                    }
                    // Thinking and signatures carry nothing the loop acts on.
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(part) = self.parts.blocks.get_mut(&index)
                    && let Some(json) = part.partial_json.take()
                    && !json.trim().is_empty()
                {
                    let input: Value = serde_json::from_str(&json).map_err(|err| {
                        ProviderError::InvalidResponse {
                            message: format!("a streamed tool input is not JSON ({err})"),
                        }
                    })?;
                    refuse_duplicates(&json)?;
                    self.read.entry(index).or_default().input = Some(input);
                    part.input = Some(json);
                }
            }
            "message_delta" => {
                let reason = event.delta.and_then(|d| d.stop_reason);
                if let Some(reason) = reason {
                    self.stop_reason = string(Some(reason));
                }
                if let Some(usage) = event.usage {
                    let counts: Counts = serde_json::from_str(usage.get()).map_err(unreadable)?;
                    self.counts.update(counts);
                }
                self.parts.deltas.push((
                    reason.map(|r| r.get().to_owned()),
                    event.usage.map(|u| u.get().to_owned()),
                ));
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

    fn finish(mut self) -> Result<Exchange, ProviderError> {
        let mut content = Vec::new();
        for (index, part) in &self.parts.blocks {
            let read = self.read.remove(index).unwrap_or_default();
            match read.kind.as_deref() {
                Some("text") => content.push(Block::Text {
                    text: match (&part.text, read.text) {
                        (Some(text), Some(opening)) if !opening.is_empty() => {
                            format!("{opening}{text}")
                        }
                        (Some(text), _) => text.clone(),
                        (None, opening) => opening.unwrap_or_default(),
                    },
                }),
                Some("tool_use") => {
                    let (Some(id), Some(name)) = (read.id, read.name) else {
                        return Err(ProviderError::InvalidResponse {
                            message: "a `tool_use` block without `id` or `name`".into(),
                        });
                    };
                    content.push(Block::ToolUse {
                        id,
                        name,
                        input: read.input.unwrap_or_else(|| json!({})),
                    });
                }
                // Thinking and server-tool blocks carry nothing the loop acts on.
                _ => {}
            }
        }
        Ok(Exchange {
            response: ChatResponse {
                content,
                stop_reason: format::anthropic::parse_stop_reason(self.stop_reason.as_deref()),
                usage: self.counts.usage(),
            },
            raw: Raw::from(self.parts),
        })
    }

    fn whole(body: Value) -> Result<Exchange, ProviderError> {
        Exchange::read(body, format::anthropic::parse_response)
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
            match call.pointer("/function/arguments") {
                Some(Value::String(args)) => {
                    self.chars += args.len();
                    entry.2.push_str(args);
                }
                // Ollama streams a call whole, its arguments as an object.
                Some(args @ Value::Object(_)) => {
                    let args = args.to_string();
                    self.chars += args.len();
                    entry.2.push_str(&args);
                }
                _ => {}
            }
        }
        if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
            self.finish_reason = reason.clone();
        }
        Ok(())
    }

    fn whole(body: Value) -> Result<Exchange, ProviderError> {
        Exchange::read(body, format::openai::parse_response)
    }

    fn finish(self) -> Result<Exchange, ProviderError> {
        for (_, _, arguments) in self.calls.values() {
            refuse_duplicates(arguments)?;
        }
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
        let body = json!({
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        });
        Self::whole(body)
    }
}

/// A tool call's input that names a key twice is refused: runner would run it with one value
/// and a reader of the transcript could take the other.
fn refuse_duplicates(json: &str) -> Result<(), ProviderError> {
    match super::format::json::first_duplicate_key(json) {
        Some(key) => Err(ProviderError::InvalidResponse {
            message: format!("a tool call's input gives `{key}` twice"),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reply a stream finishes with, checked against reading the body it stands for with
    /// the unstreamed reader: the two must agree. The body, as one value.
    fn finished(stream: AnthropicStream) -> Value {
        let exchange = stream.finish().unwrap();
        let body = exchange.raw.to_value();
        let read = format::anthropic::parse_response(&body).unwrap();
        assert_eq!(exchange.response, read, "{body}");
        // It serializes as that body.
        assert_eq!(serde_json::to_value(&exchange.raw).unwrap(), body);
        body
    }

    fn anthropic(events: &[&str]) -> AnthropicStream {
        let mut stream = AnthropicStream::default();
        for data in events {
            stream.event("", data).unwrap();
        }
        stream
    }

    #[test]
    fn odd_shapes_neither_panic_nor_disagree() {
        // Blocks and usage that are not objects, deltas for blocks never opened, a delta before
        // the start (the start stands for the whole message), a stop reason that is no string.
        let body = finished(anthropic(&[
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":3}}"#,
            r#"{"type":"message_start","message":{"id":"m","usage":7,"stop_reason":null}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":"not a block"}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{}"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_delta","index":4,"delta":{"type":"text_delta","text":"y"}}"#,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"text","text":7}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":5},"usage":{"output_tokens":9,"input_tokens":null}}"#,
        ]));
        assert_eq!(body["content"][0], "not a block");
        assert_eq!(body["content"][1], json!({"type": "text", "text": 7}));
        assert_eq!(body["content"][2], json!({"text": "y"}));
        assert_eq!(body["usage"], json!({"output_tokens": 9}));
        assert_eq!(body["stop_reason"], 5);
        // A tool call without an id is refused, as it is unstreamed.
        let err = anthropic(&[
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","name":"grep"}}"#,
        ])
        .finish()
        .unwrap_err();
        assert!(err.to_string().contains("without `id` or `name`"), "{err}");
    }

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
        let body = finished(stream);
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
        let body = finished(stream);
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
        let body = stream.finish().unwrap().raw.to_value();
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
