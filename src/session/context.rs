//! Context that lasts (docs/src/runs.md, "Context that lasts"): a conversation kept inside its
//! model's window. Before each request its size is estimated (the last reply's reported input
//! tokens plus the bytes added since, over four, so a replay decides the same from the same
//! cassettes). Past half the window, old tool results are cleared, all at once; past `compact_at`
//! the step's own model summarises the work and the conversation restarts from the first
//! message, the summary and the newest turn; a compaction that cannot make room fails the step
//! (`context exhausted`) instead of looping.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

use crate::provider::message::{Block, ChatRequest, Message, Role};

/// What bounds one conversation's context.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Tokens the model takes in one request.
    pub tokens: u64,
    /// The share of the window past which the conversation is compacted.
    pub compact_at: f64,
    /// The newest tool results kept whole when old ones are cleared.
    pub keep_tool_results: u32,
}

impl Window {
    /// The window as the run knows it now: a refusal for length earlier in the run (any step)
    /// may have taught a smaller one for this model.
    pub fn learnt(self, model: &str) -> Window {
        match super::lock(learnt()).get(model) {
            Some(&tokens) if tokens < self.tokens => Window { tokens, ..self },
            _ => self,
        }
    }

    /// Past this, old tool results are cleared.
    pub fn clear_above(&self) -> u64 {
        self.tokens / 2
    }

    /// Past this, the conversation is compacted.
    pub fn compact_above(&self) -> u64 {
        (self.tokens as f64 * self.compact_at.clamp(0.1, 1.0)) as u64
    }
}

/// Windows learnt from refusals, by model, for the rest of the run (the process).
fn learnt() -> &'static Mutex<BTreeMap<String, u64>> {
    static LEARNT: OnceLock<Mutex<BTreeMap<String, u64>>> = OnceLock::new();
    LEARNT.get_or_init(Mutex::default)
}

/// Records that `model` refused a request of about `sent` tokens for length. The window is the
/// one the refusal names when it names one (`maximum context length is 32768 tokens`, `n_ctx`),
/// else a tenth below what was sent. Returns the window now known.
pub fn learn(model: &str, sent: u64, message: &str) -> u64 {
    let named = named_window(message).filter(|&n| n >= 1024 && n <= sent.max(1024) * 4);
    let window = named.unwrap_or(sent - sent / 10).max(1024);
    let mut learnt = super::lock(learnt());
    let entry = learnt.entry(model.to_owned()).or_insert(window);
    *entry = (*entry).min(window);
    *entry
}

/// The window a refusal names: the number after "maximum context length is", "context length
/// of", "n_ctx", or the second number of "A tokens > B maximum" (Anthropic).
fn named_window(message: &str) -> Option<u64> {
    let numbers_after = |marker: &str| -> Option<u64> {
        let at = message.find(marker)? + marker.len();
        let digits: String = message[at..]
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(|c| c.is_ascii_digit() || *c == ',')
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    numbers_after("maximum context length is")
        .or_else(|| numbers_after("context length of"))
        .or_else(|| numbers_after("n_ctx"))
        .or_else(|| numbers_after(" > "))
}

/// The size of a request as tokens are estimated from text: four bytes a token.
pub fn bytes_of(request: &ChatRequest) -> usize {
    let tools: usize = request
        .tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.input_schema.to_string().len())
        .sum();
    request.system.len() + tools + request.messages.iter().map(message_bytes).sum::<usize>()
}

fn message_bytes(message: &Message) -> usize {
    message
        .content
        .iter()
        .map(|block| match block {
            Block::Text { text } => text.len(),
            Block::ToolUse { id, name, input } => id.len() + name.len() + input.to_string().len(),
            Block::ToolResult {
                tool_use_id,
                content,
                ..
            } => tool_use_id.len() + content.len(),
        })
        .sum::<usize>()
        + 16
}

/// What the last reply said of its request's size, to estimate the next one from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Estimate {
    /// Input tokens the last request took, as reported (cache reads and writes included).
    reported: u64,
    /// The request's size in bytes when it was sent.
    bytes: usize,
}

impl Estimate {
    /// After a reply: its request's reported input tokens and size.
    pub fn reported(tokens: u64, bytes: usize) -> Estimate {
        Estimate {
            reported: tokens,
            bytes,
        }
    }

    /// Tokens `request` will take: the reported size plus what was added since (or less what
    /// was cleared), a token for every four bytes; four bytes a token for all of it before any
    /// reply.
    pub fn tokens(&self, request: &ChatRequest) -> u64 {
        let now = bytes_of(request) as i64;
        if self.reported == 0 {
            return (now / 4) as u64;
        }
        let change = (now - self.bytes as i64) / 4;
        (self.reported as i64 + change).max(now / 8) as u64
    }
}

/// A stub marks a cleared result; it is never cleared again.
const CLEARED: &str = ", cleared; read it again if needed]";

/// Replaces every tool result but the newest `keep` with a one-line stub naming the call
/// (`[read_file data/f003.txt: 8.1 kB, cleared; read it again if needed]`). Returns how many
/// were cleared, and the first message changed.
pub fn clear_old_results(messages: &mut [Message], keep: usize) -> (usize, Option<usize>) {
    let calls: BTreeMap<String, (String, Value)> = messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|block| match block {
            Block::ToolUse { id, name, input } => Some((id.clone(), (name.clone(), input.clone()))),
            _ => None,
        })
        .collect();
    let total = messages
        .iter()
        .flat_map(|m| &m.content)
        .filter(|b| matches!(b, Block::ToolResult { .. }))
        .count();
    let mut left = total.saturating_sub(keep);
    let mut cleared = 0;
    let mut first = None;
    for (at, message) in messages.iter_mut().enumerate() {
        if message.role != Role::User {
            continue;
        }
        for block in &mut message.content {
            if left == 0 {
                return (cleared, first);
            }
            let Block::ToolResult {
                tool_use_id,
                content,
                ..
            } = block
            else {
                continue;
            };
            left -= 1;
            if content.ends_with(CLEARED) {
                continue;
            }
            let (name, input) = calls
                .get(tool_use_id.as_str())
                .map_or(("tool", None), |(n, i)| (n.as_str(), Some(i)));
            *content = format!(
                "[{name}{}: {}{CLEARED}",
                input.map(what_it_named).unwrap_or_default(),
                size(content.len())
            );
            cleared += 1;
            first.get_or_insert(at);
        }
    }
    (cleared, first)
}

/// A result's size as its stub gives it: `8.1 kB` (of 1,024 bytes), or bytes under one.
fn size(bytes: usize) -> String {
    if bytes < 1024 {
        format!("{bytes} bytes")
    } else {
        format!("{:.1} kB", bytes as f64 / 1024.0)
    }
}

/// What a call named, for its stub.
fn what_it_named(input: &Value) -> String {
    crate::text::call_argument(input, 80).map_or_else(String::new, |named| format!(" {named}"))
}

/// The instruction that asks the step's model for its summary.
pub const SUMMARY_REQUEST: &str = "Your context window is nearly full, so this conversation will be compacted. Write a summary for yourself to carry on from, in place of everything so far: the task as you were given it, what you found, the decisions you made and why, every file you changed and how, what you tried that failed, and what remains to do, in order. Be specific: name files, functions and commands. Answer with the summary only; make no tool calls.";

/// How the summary a compaction leaves in the first message begins.
const COMPACTED_NOTE: &str =
    "[The conversation so far was compacted to fit the context window. Your summary of it:]";

/// The conversation after compaction: the first message with the summary after it, then the
/// newest turn (the last reply and what answered it), so the work goes on where it was.
pub fn compacted(messages: &[Message], summary: &str) -> Vec<Message> {
    let mut out: Vec<Message> = messages.first().cloned().into_iter().collect();
    // A new summary is of everything so far, the earlier summary included: it takes that one's
    // place rather than following it.
    if let Some(first) = out.first_mut() {
        first.content.retain(
            |block| !matches!(block, Block::Text { text } if text.starts_with(COMPACTED_NOTE)),
        );
    }
    let text = format!("{COMPACTED_NOTE}\n\n{summary}");
    super::push_user_text(&mut out, text);
    // The newest turn: from the last assistant message on, when it is not the first message.
    if let Some(at) = messages.iter().rposition(|m| m.role == Role::Assistant)
        && at > 0
    {
        out.extend(messages[at..].iter().cloned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round(id: &str, path: &str, text: &str) -> [Message; 2] {
        [
            Message {
                role: Role::Assistant,
                content: vec![Block::ToolUse {
                    id: id.into(),
                    name: "read_file".into(),
                    input: json!({"path": path}),
                }],
            },
            Message {
                role: Role::User,
                content: vec![Block::ToolResult {
                    tool_use_id: id.into(),
                    content: text.into(),
                    is_error: false,
                }],
            },
        ]
    }

    #[test]
    fn old_results_become_stubs_and_the_newest_stay() {
        let mut messages = vec![Message::user_text("task")];
        for i in 0..6 {
            messages.extend(round(
                &format!("t{i}"),
                &format!("f{i}.txt"),
                &"x".repeat(8300),
            ));
        }
        // Messages: the task, then six rounds; the first result is message 2.
        assert_eq!(clear_old_results(&mut messages, 4), (2, Some(2)));
        let results: Vec<&str> = messages
            .iter()
            .flat_map(|m| &m.content)
            .filter_map(|b| match b {
                Block::ToolResult { content, .. } => Some(content.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            results[0],
            "[read_file f0.txt: 8.1 kB, cleared; read it again if needed]"
        );
        assert!(results[1].starts_with("[read_file f1.txt"));
        assert!(results[2..].iter().all(|r| r.len() == 8300));
        // Cleared once: nothing more to clear with the same number kept.
        assert_eq!(clear_old_results(&mut messages, 4), (0, None));
    }

    #[test]
    fn a_compacted_conversation_keeps_the_task_the_summary_and_the_newest_turn() {
        let mut messages = vec![Message::user_text("task")];
        for i in 0..3 {
            messages.extend(round(&format!("t{i}"), "a", "text"));
        }
        let out = compacted(&messages, "did things");
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].role, Role::User);
        assert!(matches!(&out[0].content[1], Block::Text { text } if text.ends_with("did things")));
        assert_eq!(out[1..], messages[5..]);
        // Compacted again: the new summary takes the old one's place.
        let again = compacted(&out, "did more");
        assert_eq!(again[0].content.len(), 2, "{:?}", again[0]);
        assert!(matches!(&again[0].content[1], Block::Text { text } if text.ends_with("did more")));
    }

    #[test]
    fn refusals_teach_the_window_they_name() {
        assert_eq!(
            named_window("This model's maximum context length is 32768 tokens. However"),
            Some(32768)
        );
        assert_eq!(
            named_window("prompt is too long: 210000 tokens > 200000 maximum"),
            Some(200000)
        );
        assert_eq!(
            named_window("the request exceeds the available context size"),
            None
        );
        assert_eq!(
            learn("test-model-a", 70_000, "context size exceeded"),
            63_000
        );
        assert_eq!(
            learn("test-model-a", 90_000, "too long"),
            63_000,
            "the smaller stays"
        );
        let window = Window {
            tokens: 200_000,
            compact_at: 0.8,
            keep_tool_results: 4,
        };
        assert_eq!(window.learnt("test-model-a").tokens, 63_000);
        assert_eq!(window.learnt("test-model-b").tokens, 200_000);
    }
}
