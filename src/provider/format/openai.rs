//! OpenAI Chat Completions (and the servers that speak it: Ollama, vLLM, llama.cpp, LM Studio,
//! LiteLLM): request bodies and a liberal response parser.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde_json::{Value, json};

use super::FormatError;
use crate::provider::message::{
    Block, ChatRequest, ChatResponse, Message, Role, StopReason, Usage, text_of,
};

/// Ids for tool calls that came without one; unique within the process.
static SYNTHETIC_IDS: AtomicU64 = AtomicU64::new(1);

/// A request as Chat Completions reads it, borrowed from the neutral conversation; the field
/// order is the body's byte order (the prefix a server's cache can reuse).
#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    /// Named `max_completion_tokens` instead when the server asked for it (OpenAI's reasoning
    /// models refuse `max_tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    messages: Vec<WireMessage<'a>>,
    /// After the messages, so the body's prefix stays the one a server's cache holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ResponseFormat<'a>>,
    /// An agent's `effort` (docs/src/agents.md); after the messages, like `response_format`.
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
}

/// `{"type": "json_schema", "json_schema": {...}}`: the answer held to a schema (OpenAI turns it
/// into constrained decoding, llama.cpp and vLLM into a grammar).
#[derive(Serialize)]
struct ResponseFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: JsonSchema<'a>,
}

#[derive(Serialize)]
struct JsonSchema<'a> {
    name: &'static str,
    schema: &'a Value,
    strict: bool,
}

/// How a request is written for the server at hand, as learnt from its refusals.
#[derive(Debug, Clone, Copy)]
pub(super) struct Options {
    /// The output limit is named `max_completion_tokens` (OpenAI's reasoning models).
    pub completion_tokens: bool,
    /// An answer schema goes as `response_format`.
    pub response_format: bool,
}

/// Whether OpenAI's strict mode takes `schema`: an object at the root, and every object in it
/// closed (`additionalProperties: false`) with all its properties required, using no keyword
/// outside those strict mode documents. Any other schema goes with `strict: false`, which
/// every server takes, and the answer is still checked against it.
pub fn strict_compatible(schema: &Value) -> bool {
    const KEYWORDS: &[&str] = &[
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "description",
        "title",
        "$defs",
        "$ref",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    ];
    fn closed(schema: &Value) -> bool {
        let Some(map) = schema.as_object() else {
            return false;
        };
        if map.keys().any(|k| !KEYWORDS.contains(&k.as_str())) {
            return false;
        }
        if let Some(properties) = map.get("properties").and_then(Value::as_object) {
            let required: Vec<&str> = map
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if map.get("additionalProperties") != Some(&Value::Bool(false))
                || properties.keys().any(|k| !required.contains(&k.as_str()))
                || !properties.values().all(closed)
            {
                return false;
            }
        } else if map.get("type").and_then(Value::as_str) == Some("object") {
            // An object with no properties is open unless it says otherwise.
            return map.get("additionalProperties") == Some(&Value::Bool(false));
        }
        let nested = map
            .get("items")
            .into_iter()
            .chain(
                map.get("anyOf")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten(),
            )
            .chain(
                map.get("$defs")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flat_map(|d| d.values()),
            );
        nested.into_iter().all(closed)
    }
    schema.get("type").and_then(Value::as_str) == Some("object") && closed(schema)
}

/// Usage in the stream's last chunk.
#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: CallFunction<'a>,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    name: &'a str,
    /// The API wants the arguments as a JSON string.
    arguments: String,
}

/// One Chat Completions message: each shape as the API names its fields.
#[derive(Serialize)]
#[serde(untagged)]
enum WireMessage<'a> {
    Assistant {
        role: &'static str,
        content: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireCall<'a>>,
    },
    Tool {
        role: &'static str,
        tool_call_id: &'a str,
        content: Cow<'a, str>,
    },
    Plain {
        role: &'static str,
        content: Cow<'a, str>,
    },
}

/// The request body: the system prompt as the first message, then the conversation's messages
/// (already redacted) as [`messages`] maps them.
pub(super) fn body(
    req: &ChatRequest,
    system: &str,
    conversation: &[&Message],
    options: Options,
) -> Vec<u8> {
    let completion_tokens = options.completion_tokens;
    let mut messages = vec![WireMessage::Plain {
        role: "system",
        content: Cow::Borrowed(system),
    }];
    for message in conversation {
        push_messages(&mut messages, message);
    }
    let request = Request {
        model: &req.model,
        max_tokens: (!completion_tokens).then_some(req.max_tokens),
        max_completion_tokens: completion_tokens.then_some(req.max_tokens),
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        tools: req
            .tools
            .iter()
            .map(|t| WireTool {
                kind: "function",
                function: WireFunction {
                    name: &t.name,
                    description: &t.description,
                    parameters: &t.input_schema,
                },
            })
            .collect(),
        tool_choice: (req.no_tool_calls && !req.tools.is_empty()).then_some("none"),
        messages,
        response_format: req
            .answer_schema
            .as_ref()
            .filter(|_| options.response_format)
            .map(|schema| ResponseFormat {
                kind: "json_schema",
                json_schema: JsonSchema {
                    // The name the server may show; any [a-zA-Z0-9_-]{1,64} does.
                    name: "answer",
                    schema,
                    strict: strict_compatible(schema),
                },
            }),
        reasoning_effort: req.effort.map(|e| e.openai()),
    };
    super::to_vec(&request)
}

/// One neutral message as Chat Completions messages: an assistant message with its tool calls;
/// a user message's tool results as `tool` messages, any text after them as a user message.
fn push_messages<'a>(out: &mut Vec<WireMessage<'a>>, message: &'a Message) {
    match message.role {
        Role::Assistant => {
            let text = text_of(&message.content);
            let tool_calls = message
                .content
                .iter()
                .filter_map(|b| match b {
                    Block::ToolUse { id, name, input } => Some(WireCall {
                        id,
                        kind: "function",
                        function: CallFunction {
                            name,
                            arguments: input.to_string(),
                        },
                    }),
                    _ => None,
                })
                .collect();
            out.push(WireMessage::Assistant {
                role: "assistant",
                content: (!text.is_empty()).then_some(text),
                tool_calls,
            });
        }
        Role::User => {
            let mut text = Vec::new();
            for block in &message.content {
                match block {
                    Block::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } => out.push(WireMessage::Tool {
                        role: "tool",
                        tool_call_id: tool_use_id,
                        content: if *is_error {
                            Cow::Owned(format!("Error: {content}"))
                        } else {
                            Cow::Borrowed(content)
                        },
                    }),
                    Block::Text { text: t } => text.push(t.as_str()),
                    Block::ToolUse { .. } => {}
                }
            }
            if !text.is_empty() {
                out.push(WireMessage::Plain {
                    role: "user",
                    content: Cow::Owned(text.join("\n")),
                });
            }
        }
    }
}

/// Tool-call arguments: a JSON string as the API says, an object as some servers send (Ollama),
/// or a JSON string of a JSON string (double-encoded, as some local servers' templates write).
fn arguments(raw: Option<&Value>) -> Value {
    match raw {
        None | Some(Value::Null) => json!({}),
        Some(Value::String(s)) if s.trim().is_empty() => json!({}),
        Some(Value::String(s)) => match serde_json::from_str(s) {
            Ok(Value::String(inner)) => {
                serde_json::from_str(&inner).unwrap_or(Value::String(inner))
            }
            Ok(value) => value,
            Err(_) => Value::String(s.clone()),
        },
        Some(other) => other.clone(),
    }
}

// Over 80 lines: one liberal parser for every OpenAI-compatible server's reply shape.
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
        if let Some(key) = function
            .get("arguments")
            .and_then(Value::as_str)
            .and_then(super::json::first_duplicate_key)
        {
            return Err(FormatError(format!(
                "a tool call's input gives `{key}` twice"
            )));
        }
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
    match body.get("error") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Object(e)) => {
            let message = e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("unknown error");
            // llama.cpp's server names its context size apart from the message: said, so the
            // window it teaches is the real one.
            Some(match e.get("n_ctx").and_then(Value::as_u64) {
                Some(n_ctx) => format!("{message} (n_ctx {n_ctx})"),
                None => message.to_owned(),
            })
        }
        // vLLM: `{"object": "error", "message": ...}`.
        _ if body.get("object").and_then(Value::as_str) == Some("error") => body
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

/// Whether an error body says the prompt does not fit (`context_length_exceeded`).
pub fn context_too_long(body: &Value) -> bool {
    let error = body.get("error");
    let code = error.and_then(|e| e.get("code")).and_then(Value::as_str);
    // vLLM's errors carry their message at the top level.
    let message = error
        .and_then(|e| e.get("message"))
        .or_else(|| body.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = error.and_then(|e| e.get("type")).and_then(Value::as_str);
    // OpenAI's code; llama.cpp's server's type and words; vLLM's and LiteLLM's words.
    code == Some("context_length_exceeded")
        || kind == Some("exceed_context_size_error")
        || [
            "maximum context length",
            "exceeds the available context size",
            "ContextWindowExceeded",
            "context window exceeded",
        ]
        .iter()
        .any(|words| message.contains(words))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::message::one_tool_round;

    /// The context errors of the servers that speak OpenAI's API, each as it words it.
    #[test]
    fn every_servers_context_error_is_too_long() {
        for body in [
            serde_json::json!({"error": {"code": "context_length_exceeded", "message": "This model's maximum context length is 128000 tokens."}}),
            // llama.cpp's server (tools/server): HTTP 400.
            serde_json::json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 4100, "n_ctx": 4096}}),
            // vLLM.
            serde_json::json!({"object": "error", "message": "This model's maximum context length is 32768 tokens. However, you requested 33000 tokens in the messages, Please reduce the length of the messages.", "type": "BadRequestError", "param": null, "code": 400}),
            // LiteLLM's proxy.
            serde_json::json!({"error": {"message": "litellm.ContextWindowExceededError: prompt too long", "type": null, "code": "400"}}),
        ] {
            assert!(context_too_long(&body), "{body}");
        }
        assert!(!context_too_long(
            &serde_json::json!({"error": {"message": "model not found", "code": 404}})
        ));
    }

    fn request_body(request: &ChatRequest) -> Value {
        let wire = super::super::body::Wire::OpenAi {
            completion_tokens: false,
            response_format: true,
        };
        let body = super::super::body::Body::of(wire, request);
        serde_json::from_slice(&body.to_vec()).unwrap()
    }

    #[test]
    fn effort_goes_as_reasoning_effort_and_max_is_high() {
        use crate::provider::message::Effort;
        let wire = super::super::body::Wire::OpenAi {
            completion_tokens: false,
            response_format: true,
        };
        let mut request = crate::provider::message::one_tool_round("a", json!({}), "x", false);
        let body = |request: &ChatRequest| -> Value {
            serde_json::from_slice(&super::super::body::Body::of(wire, request).to_vec()).unwrap()
        };
        assert!(body(&request).get("reasoning_effort").is_none());
        for (effort, wire_name) in [
            (Effort::Low, "low"),
            (Effort::Medium, "medium"),
            (Effort::High, "high"),
            (Effort::Xhigh, "xhigh"),
            (Effort::Max, "high"),
        ] {
            request.effort = Some(effort);
            assert_eq!(body(&request)["reasoning_effort"], wire_name);
        }
    }

    #[test]
    fn an_answer_schema_goes_as_response_format_strict_only_when_it_qualifies() {
        let closed = json!({"type": "object", "properties": {"verdict": {"type": "string",
            "enum": ["approve", "reject"]}, "notes": {"type": "array", "items": {"type": "string"}}},
            "required": ["verdict", "notes"], "additionalProperties": false});
        assert!(strict_compatible(&closed));
        let mut request = one_tool_round("glob", json!({"pattern": "*.rs"}), "a.rs", false);
        request.answer_schema = Some(closed.clone());
        let body = request_body(&request);
        assert_eq!(
            body["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": closed, "strict": true}})
        );
        // After the messages: the body's prefix is the same as without it.
        let text = String::from_utf8(
            super::super::body::Body::of(
                super::super::body::Wire::OpenAi {
                    completion_tokens: false,
                    response_format: true,
                },
                &request,
            )
            .to_vec(),
        )
        .unwrap();
        assert!(text.find("\"messages\"") < text.find("\"response_format\""));
        for open in [
            json!({"type": "object", "properties": {"files": {"type": "array"}}}),
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": [],
                "additionalProperties": false}),
            json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}},
                "required": ["a"], "additionalProperties": false}),
            json!({"type": "array", "items": {"type": "string"}}),
        ] {
            assert!(!strict_compatible(&open), "{open}");
        }
        // A server that refused it: not sent.
        let body = super::super::body::Body::of(
            super::super::body::Wire::OpenAi {
                completion_tokens: false,
                response_format: false,
            },
            &request,
        );
        let body: Value = serde_json::from_slice(&body.to_vec()).unwrap();
        assert!(body.get("response_format").is_none());
    }

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
