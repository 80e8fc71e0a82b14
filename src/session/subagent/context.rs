//! What a subagent starts from besides its prompt: the files its `task` call names, and for a
//! forked subagent its caller's conversation.

use std::collections::BTreeSet;

use crate::provider::message::{Block, ChatRequest, Message, Role, ToolDef};
use crate::tools::ToolContext;
use crate::tools::task::ContextFile;

/// The files a `task` call asked for, numbered as `read_file` shows them, ready to append to the
/// first message. A file that cannot be read (outside the directory, missing) fails the call.
pub(super) fn context_files(ctx: &ToolContext, files: &[ContextFile]) -> Result<String, String> {
    let mut out = String::new();
    for file in files {
        let start = file.start_line.unwrap_or(1).max(1);
        let mut input = serde_json::json!({"path": file.path, "offset": start});
        if let Some(end) = file.end_line {
            if end < start {
                return Err(format!(
                    "context file `{}`: end_line {end} is before start_line {start}",
                    file.path
                ));
            }
            input["limit"] = (end - start + 1).into();
        }
        let read = crate::tools::fs::read_file(&ctx.workspace, &input);
        if read.is_error {
            return Err(format!("context file `{}`: {}", file.path, read.text));
        }
        let lines = match (file.start_line, file.end_line) {
            (None, None) => String::new(),
            _ => format!(
                " lines=\"{start}-{}\"",
                file.end_line
                    .map_or_else(|| "end".to_owned(), |e| e.to_string())
            ),
        };
        out.push_str(&format!(
            "\n\n<context_file path=\"{}\"{lines}>\n{}</context_file>",
            file.path, read.text
        ));
    }
    Ok(out)
}

/// What a forked subagent starts from (docs/src/delegation.md): its caller's system prompt, tools
/// and conversation byte for byte, so its requests begin with the bytes its caller's cache
/// holds; a call of a tool the fork may not use is refused when made. The calls of the caller's
/// last reply (the `task` calls being run, and their siblings) are answered with a note, as the
/// API wants every call answered.
pub struct Fork {
    pub system: String,
    pub tools: Vec<ToolDef>,
    pub history: Vec<Message>,
    /// The caller's last message: where the history every sibling shares ends.
    pub shared_until: Option<usize>,
}

/// The note each of the caller's unanswered calls gets in a fork.
pub const RUNNING: &str = "[this call is being run: you are one of the subagents it started]";

pub fn fork(parent: &ChatRequest) -> Fork {
    let answered: BTreeSet<&str> = parent
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            Block::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
            _ => None,
        })
        .collect();
    let pending: Vec<Block> = parent
        .messages
        .last()
        .filter(|m| m.role == Role::Assistant)
        .into_iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            Block::ToolUse { id, .. } if !answered.contains(id.as_str()) => {
                Some(Block::ToolResult {
                    tool_use_id: id.clone(),
                    content: RUNNING.to_owned(),
                    is_error: false,
                })
            }
            _ => None,
        })
        .collect();
    let mut history = parent.messages.clone();
    let shared_until = history.len().checked_sub(1);
    if !pending.is_empty() {
        history.push(Message {
            role: Role::User,
            content: pending,
        });
    }
    Fork {
        system: parent.system.clone(),
        tools: parent.tools.clone(),
        history,
        shared_until,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool_use(id: &str, name: &str) -> Block {
        Block::ToolUse {
            id: id.into(),
            name: name.into(),
            input: json!({"path": "a.rs"}),
        }
    }

    fn result(id: &str, text: &str) -> Block {
        Block::ToolResult {
            tool_use_id: id.into(),
            content: text.into(),
            is_error: false,
        }
    }

    #[test]
    fn a_fork_starts_from_its_callers_request_byte_for_byte() {
        let parent = ChatRequest {
            model: "m".into(),
            system: "the caller's system".into(),
            messages: vec![
                Message::user_text("go"),
                Message {
                    role: Role::Assistant,
                    content: vec![tool_use("t1", "read_file"), tool_use("t2", "write_file")],
                },
                Message {
                    role: Role::User,
                    content: vec![result("t1", "fn a() {}"), result("t2", "created a.rs")],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![
                        Block::Text {
                            text: "Delegating.".into(),
                        },
                        tool_use("t3", "task"),
                        tool_use("t4", "task"),
                    ],
                },
            ],
            tools: vec![ToolDef {
                name: "task".into(),
                description: "d".into(),
                input_schema: json!({"type": "object"}),
            }],
            max_tokens: 10,
            no_tool_calls: false,
            shared_until: None,
            answer_schema: None,
            effort: None,
        };
        let fork = fork(&parent);
        assert_eq!(fork.system, parent.system);
        assert_eq!(fork.tools, parent.tools);
        // Everything the caller sent, unchanged, then an answer to each call being run.
        assert_eq!(fork.history[..4], parent.messages[..]);
        assert_eq!(fork.shared_until, Some(3));
        assert_eq!(
            fork.history[4].content,
            vec![result("t3", RUNNING), result("t4", RUNNING)]
        );
    }
}
