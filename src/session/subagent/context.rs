//! What a subagent starts from besides its prompt: the files its `task` call names, and for a
//! forked subagent its caller's conversation.

use std::collections::{BTreeMap, BTreeSet};

use crate::provider::message::{Block, ChatRequest, Message, Role};
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

/// The parent's conversation as a forked subagent starts from it (docs/src/delegation.md): tool calls
/// the subagent cannot make, and their results, become short text notes; calls not answered yet
/// (the `task` calls being run, and their siblings) are dropped.
pub fn fork(parent: &ChatRequest, tools: &BTreeSet<String>) -> Vec<Message> {
    let answered: BTreeSet<&str> = parent
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            Block::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
            _ => None,
        })
        .collect();
    let names: BTreeMap<&str, &str> = parent
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            Block::ToolUse { id, name, .. } => Some((id.as_str(), name.as_str())),
            _ => None,
        })
        .collect();
    let short = |text: &str, n: usize| -> String {
        let cut: String = text.chars().take(n).collect();
        if cut.len() < text.len() {
            format!("{cut}…")
        } else {
            cut
        }
    };
    let mut out = Vec::new();
    for message in &parent.messages {
        let mut content = Vec::new();
        for block in &message.content {
            match block {
                Block::ToolUse { id, .. } if !answered.contains(id.as_str()) => {}
                Block::ToolUse { name, input, .. } if !tools.contains(name) => {
                    content.push(Block::Text {
                        text: format!("[called {name} with {}]", short(&input.to_string(), 200)),
                    });
                }
                Block::ToolResult {
                    tool_use_id,
                    content: text,
                    ..
                } if names
                    .get(tool_use_id.as_str())
                    .is_some_and(|n| !tools.contains(*n)) =>
                {
                    let name = names.get(tool_use_id.as_str()).copied().unwrap_or("tool");
                    content.push(Block::Text {
                        text: format!("[{name} returned: {}]", short(text, 500)),
                    });
                }
                other => content.push(other.clone()),
            }
        }
        if content.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(Message {
                role,
                content: last,
            }) if *role == message.role => last.extend(content),
            _ => out.push(Message {
                role: message.role,
                content,
            }),
        }
    }
    // A conversation starts with the user.
    if out.first().is_some_and(|m| m.role == Role::Assistant) {
        out.insert(0, Message::user_text("(earlier conversation)"));
    }
    out
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
    fn a_fork_keeps_what_it_can_use_notes_the_rest_and_drops_unanswered_calls() {
        let parent = ChatRequest {
            model: "m".into(),
            system: "s".into(),
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
                    ],
                },
            ],
            tools: Vec::new(),
            max_tokens: 10,
            no_tool_calls: false,
        };
        let tools: BTreeSet<String> = ["read_file".to_owned()].into();
        let forked = fork(&parent, &tools);
        assert_eq!(forked.len(), 4);
        assert_eq!(forked[0], parent.messages[0]);
        assert_eq!(
            forked[1].content,
            vec![
                tool_use("t1", "read_file"),
                Block::Text {
                    text: "[called write_file with {\"path\":\"a.rs\"}]".into()
                }
            ]
        );
        assert_eq!(
            forked[2].content,
            vec![
                result("t1", "fn a() {}"),
                Block::Text {
                    text: "[write_file returned: created a.rs]".into()
                }
            ]
        );
        // The unanswered task call is gone; the text before it stays.
        assert_eq!(
            forked[3].content,
            vec![Block::Text {
                text: "Delegating.".into()
            }]
        );
        // With every tool, nothing but the unanswered call changes.
        let all: BTreeSet<String> = ["read_file", "write_file", "task"].map(String::from).into();
        let same = fork(&parent, &all);
        assert_eq!(same[..3], parent.messages[..3]);
    }
}
