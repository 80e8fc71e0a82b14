//! The provider-neutral conversation: what the agent loop builds and what both wire formats
//! convert to and from.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        content: String,
        is_error: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
}

impl Message {
    /// The message as a model may see it: every known secret in its text, tool results and
    /// tool inputs hidden (docs/src/security.md: one way out). Borrowed when it holds none.
    pub fn redacted(&self) -> std::borrow::Cow<'_, Message> {
        use crate::secrets::{holds_secret, redact_owned};
        let holds = self.content.iter().any(|block| match block {
            Block::Text { text } => holds_secret(text),
            Block::ToolResult { content, .. } => holds_secret(content),
            Block::ToolUse { input, .. } => holds_secret(&input.to_string()),
        });
        if !holds {
            return std::borrow::Cow::Borrowed(self);
        }
        let content = self
            .content
            .iter()
            .map(|block| match block {
                Block::Text { text } => Block::Text {
                    text: redact_owned(text.clone()),
                },
                Block::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } => Block::ToolResult {
                    tool_use_id: tool_use_id.clone(),
                    content: redact_owned(content.clone()),
                    is_error: *is_error,
                },
                Block::ToolUse { id, name, input } => Block::ToolUse {
                    id: id.clone(),
                    name: name.clone(),
                    input: serde_json::from_str(&redact_owned(input.to_string()))
                        .unwrap_or_else(|_| input.clone()),
                },
            })
            .collect();
        std::borrow::Cow::Owned(Message {
            role: self.role,
            content,
        })
    }

    pub fn user_text(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: vec![Block::Text { text: text.into() }],
        }
    }
}

/// The text blocks of a message, joined by newlines.
pub fn text_of(blocks: &[Block]) -> String {
    let parts: Vec<&str> = blocks
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    parts.join("\n")
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolDef>,
    pub max_tokens: u32,
    /// The tools stay offered (the cached prefix holds them) but none may be called: a step's
    /// last allowed turn. Left out of the JSON when false, so recorded requests are unchanged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_tool_calls: bool,
    /// A message whose end is a cached prefix others share (a fork's caller's history): a cache
    /// breakpoint goes there too. Left out of the JSON when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_until: Option<usize>,
    /// The JSON Schema this turn's text answer must match (a step's `output_schema`), set on a
    /// turn that allows no tool call or asks for a fixed answer: an API that can hold its
    /// output to a schema (OpenAI-compatible `response_format`) is asked to (docs/src/models.md,
    /// "Structured output"). Left out of the JSON when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_schema: Option<serde_json::Value>,
    /// How hard the model should think (an agent file's `effort`): Anthropic's
    /// `output_config.effort`, OpenAI's `reasoning_effort`. Left out of the JSON when absent, so
    /// recorded requests without it are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<Effort>,
}

/// Claude Code's effort levels (docs/src/agents.md): how many tokens the model may spend on
/// thinking and answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Effort {
    Low,
    Medium,
    High,
    // Anthropic's level between `high` and `max` (Opus 4.7 and later). A plain comment: a doc
    // comment would make the schema's enum a `oneOf`.
    Xhigh,
    Max,
}

impl Effort {
    /// As an agent file and Anthropic's `output_config.effort` spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
            Effort::Xhigh => "xhigh",
            Effort::Max => "max",
        }
    }

    /// OpenAI's `reasoning_effort`, which has no `max`: its highest level every reasoning model
    /// takes is `high`.
    pub fn openai(self) -> &'static str {
        match self {
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High | Effort::Max => "high",
            Effort::Xhigh => "xhigh",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    StopSequence,
    PauseTurn,
    Refusal,
    Other(String),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        // A hostile server may report any count: totals stop at the largest, never wrap.
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_creation_input_tokens = self
            .cache_creation_input_tokens
            .saturating_add(other.cache_creation_input_tokens);
        self.cache_read_input_tokens = self
            .cache_read_input_tokens
            .saturating_add(other.cache_read_input_tokens);
    }

    /// Every input token, cached or not.
    pub fn total_input(&self) -> u64 {
        crate::units::sum([
            self.input_tokens,
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
        ])
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// Text and tool-use blocks, in order.
    pub content: Vec<Block>,
    pub stop_reason: StopReason,
    pub usage: Usage,
}

impl ChatResponse {
    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.content.iter().filter_map(|b| match b {
            Block::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }

    pub fn text(&self) -> String {
        text_of(&self.content)
    }
}

/// A conversation with one tool round, for the wire-format tests of both APIs.
#[cfg(test)]
pub fn one_tool_round(tool: &str, input: Value, result: &str, is_error: bool) -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        system: "sys".into(),
        messages: vec![
            Message::user_text("hi"),
            Message {
                role: Role::Assistant,
                content: vec![Block::ToolUse {
                    id: "t1".into(),
                    name: tool.into(),
                    input,
                }],
            },
            Message {
                role: Role::User,
                content: vec![Block::ToolResult {
                    tool_use_id: "t1".into(),
                    content: result.into(),
                    is_error,
                }],
            },
        ],
        tools: vec![ToolDef {
            name: tool.into(),
            description: "d".into(),
            input_schema: serde_json::json!({"type": "object"}),
        }],
        max_tokens: 100,
        no_tool_calls: false,
        shared_until: None,
        answer_schema: None,
        effort: None,
    }
}
