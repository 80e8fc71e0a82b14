//! An event as one line of JSON, by serde's derives. A request's tool results that the
//! transcript already holds (in the `tool_finished` event of their call) are pointed at instead
//! of repeated: [`TurnStartedLine`] is `turn_started` as the derived [`Event`] writes it, with
//! such results written as `{"type":"tool_result","tool_use_id":…,"content_in":"tool_finished"}`.

use serde::Serialize;

use super::{Event, EventKind};
use crate::provider::message::{Block, Message};

/// Appends `event` as JSON (no newline) to `out`. `written` says which tool results of a
/// request are already in the transcript (a `tool_finished` event with that call id and text).
pub fn write(out: &mut Vec<u8>, event: &Event, written: &dyn Fn(&str, &str) -> bool) {
    // An event is plain data (strings, numbers, JSON values): writing it to memory cannot fail.
    let _ = match &event.kind {
        EventKind::TurnStarted {
            step,
            turn,
            messages,
            digest,
        } if messages.iter().any(|m| {
            m.content.iter().any(|b| {
                matches!(b, Block::ToolResult { tool_use_id, content, .. } if written(tool_use_id, content))
            })
        }) =>
        {
            serde_json::to_writer(
                &mut *out,
                &TurnStartedLine {
                    at: &event.at,
                    agent: &event.agent,
                    event: "turn_started",
                    step,
                    turn: *turn,
                    messages: Messages { messages, written },
                    digest,
                },
            )
        }
        _ => serde_json::to_writer(&mut *out, event),
    };
}

fn rfc3339<S: serde::Serializer>(at: &&jiff::Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
    super::rfc3339(at, serializer)
}

/// `turn_started` with its field order and names as [`Event`] derives them.
#[derive(Serialize)]
struct TurnStartedLine<'a> {
    #[serde(serialize_with = "rfc3339")]
    at: &'a jiff::Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: &'a Option<String>,
    event: &'static str,
    step: &'a str,
    turn: u32,
    messages: Messages<'a>,
    digest: &'a str,
}

/// A request's new messages, tool results already written pointed at instead of repeated.
struct Messages<'a> {
    messages: &'a [Message],
    written: &'a dyn Fn(&str, &str) -> bool,
}

impl Serialize for Messages<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.messages.iter().map(|message| {
            MessageOut {
                role: message.role,
                content: message
                    .content
                    .iter()
                    .map(|block| match block {
                        Block::ToolResult {
                            tool_use_id,
                            content,
                            is_error,
                        } if (self.written)(tool_use_id, content) => {
                            BlockOut::Written(WrittenResult {
                                tool_use_id,
                                content_in: "tool_finished",
                                is_error: *is_error,
                            })
                        }
                        block => BlockOut::As(block),
                    })
                    .collect(),
            }
        }))
    }
}

/// A message as [`Message`] writes it, its blocks as [`BlockOut`].
#[derive(Serialize)]
struct MessageOut<'a> {
    role: crate::provider::message::Role,
    content: Vec<BlockOut<'a>>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum BlockOut<'a> {
    As(&'a Block),
    Written(WrittenResult<'a>),
}

/// A tool result whose text is in the `tool_finished` event of its call.
#[derive(Serialize)]
#[serde(tag = "type", rename = "tool_result")]
struct WrittenResult<'a> {
    tool_use_id: &'a str,
    content_in: &'static str,
    is_error: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::message::{Role, Usage};
    use serde_json::json;

    fn events() -> Vec<Event> {
        let kinds = vec![
            EventKind::TurnStarted {
                step: "s".into(),
                turn: 2,
                messages: vec![
                    Message {
                        role: Role::Assistant,
                        content: vec![
                            Block::Text {
                                text: "a \"quoted\"\nline".into(),
                            },
                            Block::ToolUse {
                                id: "t1".into(),
                                name: "read_file".into(),
                                input: json!({"path": "a.txt", "limit": 3}),
                            },
                        ],
                    },
                    Message {
                        role: Role::User,
                        content: vec![Block::ToolResult {
                            tool_use_id: "t1".into(),
                            content: "1\tx\u{1}é\n".into(),
                            is_error: true,
                        }],
                    },
                ],
                digest: "ab12".into(),
            },
            EventKind::TurnFinished {
                step: "s".into(),
                turn: 2,
                duration_ms: 15,
                usage: Usage {
                    input_tokens: 1,
                    output_tokens: 2,
                    cache_creation_input_tokens: 3,
                    cache_read_input_tokens: 4,
                },
                cost_usd: Some(0.25),
                body: json!({"content": [], "stop_reason": "end_turn"}).into(),
                cut_off: false,
            },
            EventKind::TurnFinished {
                step: "s".into(),
                turn: 3,
                duration_ms: 1,
                usage: Usage::default(),
                cost_usd: None,
                body: json!(null).into(),
                cut_off: true,
            },
            EventKind::ToolStarted {
                step: "s".into(),
                turn: 2,
                id: "t1".into(),
                name: "grep".into(),
                input: json!({"pattern": "a\\b"}),
            },
            EventKind::ToolFinished {
                step: "s".into(),
                turn: 2,
                id: "t1".into(),
                name: "grep".into(),
                is_error: false,
                duration_ms: 7,
                output: "x\ty\r\n\u{7f}".into(),
                refused: Some(crate::tools::Refusal::Path),
            },
            EventKind::StepError {
                step: "s".into(),
                error: "e".into(),
            },
        ];
        let mut all = Vec::new();
        for kind in kinds {
            let mut event = Event::from(kind);
            all.push(event.clone());
            event.agent = Some("explore#2".into());
            all.push(event);
        }
        all
    }

    /// With nothing pointed at, a line is the derived serializer's.
    #[test]
    fn lines_are_what_the_derived_serializer_writes() {
        for event in events() {
            let mut out = Vec::new();
            write(&mut out, &event, &|_, _| false);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(&event).unwrap()
            );
        }
    }

    #[test]
    fn written_results_point_at_their_call() {
        let event = &events()[0];
        let mut out = Vec::new();
        write(&mut out, event, &|id, text| {
            id == "t1" && text == "1\tx\u{1}é\n"
        });
        let line: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let result = &line["messages"][1]["content"][0];
        assert_eq!(
            *result,
            json!({"type": "tool_result", "tool_use_id": "t1", "content_in": "tool_finished", "is_error": true})
        );
        // Everything else as it was.
        let mut whole = serde_json::to_value(event).unwrap();
        whole["messages"][1]["content"][0] = result.clone();
        assert_eq!(line, whole);
    }
}
