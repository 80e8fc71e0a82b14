//! A streamed Anthropic reply kept as the text it came in: what the transcript and cassettes
//! write (as the body the API would have sent unstreamed), apart from the stream reader that
//! fills it (`stream.rs`) and the reply type that carries it (`api.rs`), so neither of those
//! imports the other for it.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// A streamed Anthropic reply as it came: the start's message, each block as it opened with
/// what its deltas added, and the message deltas since the start, each kept as its JSON text.
#[derive(Debug, Clone, Default)]
pub struct AnthropicParts {
    pub(super) message: Option<String>,
    pub(super) blocks: BTreeMap<u64, Part>,
    /// Each `message_delta`'s stop reason and usage, in order.
    pub(super) deltas: Vec<(Option<String>, Option<String>)>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Part {
    /// The block as `content_block_start` sent it.
    pub(super) start: Option<String>,
    /// Text from its deltas, when any came.
    pub(super) text: Option<String>,
    /// Tool input from its deltas, until the block closes.
    pub(super) partial_json: Option<String>,
    /// The tool input it closed with (not blank, and JSON).
    pub(super) input: Option<String>,
}

impl AnthropicParts {
    /// The body the API would have sent unstreamed: the start's message with the blocks as its
    /// `content`, and each delta's stop reason and usage laid over it.
    pub fn to_value(&self) -> Value {
        let mut message = self
            .message
            .as_deref()
            .and_then(|m| serde_json::from_str::<Map<String, Value>>(m).ok())
            .unwrap_or_default();
        for (reason, usage) in &self.deltas {
            if let Some(reason) = reason.as_deref().and_then(|r| serde_json::from_str(r).ok()) {
                message.insert("stop_reason".into(), reason);
            }
            let Some(usage) = usage
                .as_deref()
                .and_then(|u| serde_json::from_str::<Map<String, Value>>(u).ok())
            else {
                continue;
            };
            let entry = message.entry("usage").or_insert_with(|| json!({}));
            if !entry.is_object() {
                *entry = json!({});
            }
            if let Some(entry) = entry.as_object_mut() {
                for (key, value) in usage {
                    if !value.is_null() {
                        entry.insert(key, value);
                    }
                }
            }
        }
        let content = self.blocks.values().map(Part::to_value).collect();
        message.insert("content".into(), Value::Array(content));
        Value::Object(message)
    }
}

impl Part {
    fn to_value(&self) -> Value {
        let mut block = self
            .start
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_else(|| json!({}));
        // Only an object can carry the text and input (a block that is not one stays as it is).
        let Some(fields) = block.as_object_mut() else {
            return block;
        };
        if fields.get("type").and_then(Value::as_str) == Some("tool_use") {
            fields.insert("input".into(), json!({}));
        }
        if let Some(text) = &self.text {
            let joined = match fields.get("text").and_then(Value::as_str) {
                Some(opening) if !opening.is_empty() => format!("{opening}{text}"),
                _ => text.clone(),
            };
            fields.insert("text".into(), Value::String(joined));
        }
        if let Some(input) = self
            .input
            .as_deref()
            .and_then(|i| serde_json::from_str(i).ok())
        {
            fields.insert("input".into(), input);
        }
        block
    }
}
