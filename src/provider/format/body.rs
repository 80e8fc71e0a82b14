//! A request body: the neutral request written in an API's wire format by serde's derives (see
//! `anthropic.rs` and `openai.rs`), every known secret hidden first, with the SHA-256 of its
//! bytes (the transcript's `digest`, what a cassette's request is checked against).

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::{anthropic, openai};
use crate::provider::message::{ChatRequest, Message};

/// The wire format of an API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Anthropic,
    /// Chat Completions; `completion_tokens` names the output limit `max_completion_tokens`
    /// (OpenAI's reasoning models refuse `max_tokens`).
    OpenAi {
        completion_tokens: bool,
        /// Whether a request's answer schema goes as `response_format` (the server has not
        /// refused it).
        response_format: bool,
    },
}

/// One request's body and the SHA-256 of its bytes.
#[derive(Debug, Clone)]
pub struct Body {
    bytes: Bytes,
    digest: String,
}

impl Body {
    /// `request` written in `wire`'s format. Every byte to a model passes the one redactor
    /// (docs/src/security.md): the system prompt and each message are redacted here.
    pub fn of(wire: Wire, request: &ChatRequest) -> Body {
        let system = crate::secrets::redact(&request.system);
        let redacted: Vec<std::borrow::Cow<'_, Message>> =
            request.messages.iter().map(Message::redacted).collect();
        let messages: Vec<&Message> = redacted.iter().map(AsRef::as_ref).collect();
        let bytes = match wire {
            Wire::Anthropic => anthropic::body(request, &system, &messages),
            Wire::OpenAi {
                completion_tokens,
                response_format,
            } => openai::body(
                request,
                &system,
                &messages,
                openai::Options {
                    completion_tokens,
                    response_format,
                },
            ),
        };
        let digest = hex(&Sha256::digest(&bytes));
        Body {
            bytes: Bytes::from(bytes),
            digest,
        }
    }

    /// Lowercase hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The bytes to send (shared, not copied).
    pub fn bytes(&self) -> Bytes {
        self.bytes.clone()
    }

    pub fn to_vec(&self) -> Vec<u8> {
        self.bytes.to_vec()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::message::{Block, Role, one_tool_round};
    use serde_json::{Value, json};

    fn parse(body: &Body) -> Value {
        serde_json::from_slice(&body.to_vec()).expect("the body is JSON")
    }

    /// A conversation's bodies grow at their end only: each turn's body begins with the last
    /// one's bytes up to its newest message, so a provider's prompt cache reads the prefix.
    #[test]
    fn each_turn_begins_with_the_last_turns_bytes() {
        for wire in [
            Wire::Anthropic,
            Wire::OpenAi {
                completion_tokens: false,
                response_format: true,
            },
        ] {
            let mut request = one_tool_round("read_file", json!({"path": "a"}), "x", false);
            let mut last = Body::of(wire, &request).to_vec();
            for turn in 0..20 {
                request.messages.push(Message {
                    role: Role::Assistant,
                    content: vec![Block::ToolUse {
                        id: format!("t{turn}"),
                        name: "read_file".into(),
                        input: json!({"path": "a"}),
                    }],
                });
                request.messages.push(Message {
                    role: Role::User,
                    content: vec![Block::ToolResult {
                        tool_use_id: format!("t{turn}"),
                        content: "line \"q\"\n".repeat(40),
                        is_error: turn % 3 == 0,
                    }],
                });
                let body = Body::of(wire, &request);
                let now = body.to_vec();
                assert_eq!(body.digest(), hex(&Sha256::digest(&now)));
                parse(&body);
                // The newest message of the last turn loses its breakpoint when it settles;
                // all before it is the same bytes.
                let shared = now.iter().zip(&last).take_while(|(a, b)| a == b).count();
                assert!(shared + 200 >= last.len(), "{wire:?} turn {turn}");
                last = now;
            }
        }
    }

    #[test]
    fn only_the_newest_message_has_a_cache_breakpoint() {
        let mut request = one_tool_round("read_file", json!({"path": "a"}), "no", true);
        request.messages.push(Message::user_text("more"));
        // (Two user messages in a row would not be sent; the writer does not care.)
        let body = parse(&Body::of(Wire::Anthropic, &request));
        let marked: Vec<usize> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, m)| {
                m["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|b| b.get("cache_control").is_some())
            })
            .map(|(i, _)| i)
            .collect();
        assert_eq!(marked, vec![3]);
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        assert_eq!(body["stream"], true);
    }

    #[test]
    fn the_output_limit_takes_the_name_the_server_asked_for() {
        let request = one_tool_round("glob", json!({"pattern": "*"}), "a.rs", false);
        let body = parse(&Body::of(
            Wire::OpenAi {
                completion_tokens: true,
                response_format: true,
            },
            &request,
        ));
        assert_eq!(body["max_completion_tokens"], 100);
        assert!(body.get("max_tokens").is_none());
    }
}
