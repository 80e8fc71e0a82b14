//! Context that lasts (docs/src/runs.md, "Context that lasts"): a conversation kept inside its
//! model's window. Before each request its size is estimated (the last reply's reported input
//! tokens plus the bytes added since, over four, so a replay decides the same from the same
//! cassettes). Past a quarter of the window, old tool results are cleared in one batch down to a
//! low-water mark, when that pays for the cache it breaks (see [`clearing`]); past `compact_at`
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
    /// The newest tool results kept whole when old ones are cleared, at most.
    pub keep_tool_results: u32,
    /// The newest tool results kept whole however large: the step's `keep_tool_results` when it
    /// sets one, else 1 (the newest result, which the model has not read yet).
    pub keep_at_least: u32,
}

/// Past this share of the window, old tool results are cleared. Each clearing rewrites what
/// follows its first stub at 1.25 times the input price, and every turn reads the whole
/// conversation at 0.1: a quarter of the window, cleared down to [`LOW_WATER`], keeps the reads
/// small and each rewrite a few kept results (docs/src/performance.md, "What the cache saves").
pub const CLEAR_AT: f64 = 0.25;
/// A clearing frees results, oldest first, until the conversation is under this share of the
/// window; the newest `keep_at_least` stay whatever their size.
pub const LOW_WATER: f64 = 0.05;
/// A clearing that frees fewer tokens than this is not worth the cache it breaks (Anthropic
/// caches nothing shorter either).
pub const MIN_FREED_TOKENS: usize = 1024;

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
        (self.tokens as f64 * CLEAR_AT) as u64
    }

    /// A clearing brings the conversation down to this.
    pub fn low_water(&self) -> u64 {
        (self.tokens as f64 * LOW_WATER) as u64
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

pub(crate) fn message_bytes(message: &Message) -> usize {
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

/// Each call by its id: its tool's name and input, for the stubs of its result.
fn calls_of(messages: &[Message]) -> BTreeMap<&str, (&str, &Value)> {
    messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|block| match block {
            Block::ToolUse { id, name, input } => Some((id.as_str(), (name.as_str(), input))),
            _ => None,
        })
        .collect()
}

/// Where each tool result is (message, block), oldest first.
fn results_of(messages: &[Message]) -> Vec<(usize, usize)> {
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::User)
        .flat_map(|(at, m)| {
            m.content
                .iter()
                .enumerate()
                .filter(|(_, b)| matches!(b, Block::ToolResult { .. }))
                .map(move |(i, _)| (at, i))
        })
        .collect()
}

/// The stub that would replace a result, when it is not one already and is shorter than it:
/// a stub as long as its result frees nothing and breaks the cache for it.
fn stub_for(calls: &BTreeMap<&str, (&str, &Value)>, block: &Block) -> Option<String> {
    let Block::ToolResult {
        tool_use_id,
        content,
        ..
    } = block
    else {
        return None;
    };
    if content.ends_with(CLEARED) {
        return None;
    }
    let (name, input) = calls
        .get(tool_use_id.as_str())
        .map_or(("tool", None), |(n, i)| (*n, Some(*i)));
    let stub = format!(
        "[{name}{}: {}{CLEARED}",
        input.map(what_it_named).unwrap_or_default(),
        size(content.len())
    );
    (stub.len() < content.len()).then_some(stub)
}

fn replace(block: &mut Block, stub: String) -> usize {
    match block {
        Block::ToolResult { content, .. } => {
            let freed = content.len() - stub.len();
            *content = stub;
            freed
        }
        _ => 0,
    }
}

/// Replaces every tool result but the newest `keep` with a one-line stub naming the call
/// (`[read_file data/f003.txt: 8.1 kB, cleared; read it again if needed]`), except those no
/// longer than their stub. Returns how many were cleared, and the first message changed.
pub fn clear_old_results(messages: &mut [Message], keep: usize) -> (usize, Option<usize>) {
    let results = results_of(messages);
    let stubs: Vec<((usize, usize), String)> = {
        let calls = calls_of(messages);
        results[..results.len().saturating_sub(keep)]
            .iter()
            .filter_map(|&(at, i)| Some(((at, i), stub_for(&calls, &messages[at].content[i])?)))
            .collect()
    };
    let first = stubs.first().map(|((at, _), _)| *at);
    let cleared = stubs.len();
    for ((at, i), stub) in stubs {
        replace(&mut messages[at].content[i], stub);
    }
    (cleared, first)
}

/// A clearing worked out on a copy of the conversation, to be taken only when it pays.
#[derive(Debug)]
pub struct Clearing {
    /// The conversation with the results cleared.
    pub messages: Vec<Message>,
    pub cleared: usize,
    /// The first message changed: the cache breaks there.
    pub first: usize,
    /// Bytes the stubs free.
    pub freed: usize,
    /// Bytes from the first change to the newest message, which the next request writes to
    /// the cache again instead of reading them (the newest message it writes anyway).
    pub rewritten: usize,
}

impl Clearing {
    /// Whether the clearing is worth the cache it breaks: it frees at least
    /// [`MIN_FREED_TOKENS`], and at least the write price (1.25 times) of what it makes the
    /// next request write again.
    pub fn pays(&self) -> bool {
        self.freed / 4 >= MIN_FREED_TOKENS && self.freed * 4 >= self.rewritten * 5
    }
}

/// The clearing of a conversation of about `tokens` tokens in `window`: old tool results,
/// oldest first, become stubs until the conversation is under the low-water mark; every result
/// older than the newest `keep_tool_results` goes, the newest `keep_at_least` stay, and a
/// result no longer than its stub stays. `None` when nothing would be cleared.
pub fn clearing(messages: &[Message], window: &Window, tokens: u64) -> Option<Clearing> {
    let results = results_of(messages);
    let total = results.len();
    let must_stay = total.saturating_sub(window.keep_at_least as usize);
    let may_stay = total.saturating_sub(window.keep_tool_results as usize);
    let need = tokens.saturating_sub(window.low_water()) as usize * 4;
    let calls = calls_of(messages);
    let mut stubs = Vec::new();
    let mut freed = 0;
    for (rank, &(at, i)) in results[..must_stay].iter().enumerate() {
        // Among the newest `keep_tool_results`, only while the conversation is still too long.
        if rank >= may_stay && freed >= need {
            break;
        }
        let block = &messages[at].content[i];
        if let Some(stub) = stub_for(&calls, block) {
            if let Block::ToolResult { content, .. } = block {
                freed += content.len() - stub.len();
            }
            stubs.push(((at, i), stub));
        }
    }
    let first = stubs.first().map(|((at, _), _)| *at)?;
    let mut messages = messages.to_vec();
    let cleared = stubs.len();
    for ((at, i), stub) in stubs {
        replace(&mut messages[at].content[i], stub);
    }
    let newest = messages.len().saturating_sub(1);
    let rewritten = messages[first.saturating_sub(1).min(newest)..newest]
        .iter()
        .map(message_bytes)
        .sum();
    Some(Clearing {
        messages,
        cleared,
        first,
        freed,
        rewritten,
    })
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
    fn a_clearing_goes_down_to_the_low_water_mark_and_only_when_it_pays() {
        let window = |keep_tool_results, keep_at_least| Window {
            tokens: 60_000,
            compact_at: 0.8,
            keep_tool_results,
            keep_at_least,
        };
        let mut messages = vec![Message::user_text("task")];
        for i in 0..8 {
            messages.extend(round(
                &format!("t{i}"),
                &format!("f{i}.txt"),
                &"x".repeat(8300),
            ));
        }
        let tokens = (bytes_of(&ChatRequest {
            messages: messages.clone(),
            ..ChatRequest::default()
        }) / 4) as u64;
        // Unset: down to 3,000 tokens, so only the newest stays whole.
        let clearing = clearing(&messages, &window(4, 1), tokens).unwrap();
        assert_eq!((clearing.cleared, clearing.first), (7, 2));
        assert!(clearing.pays(), "{clearing:?}");
        // Set: exactly that many stay, whatever their size.
        let kept = super::clearing(&messages, &window(4, 4), tokens).unwrap();
        assert_eq!(kept.cleared, 4);
        assert!(super::clearing(&messages, &window(1000, 1000), tokens).is_none());
        // Short results are no longer than their stubs: nothing to clear.
        let mut short = vec![Message::user_text("task")];
        for i in 0..8 {
            short.extend(round(&format!("t{i}"), "f.txt", "`f.txt` does not exist"));
        }
        assert!(super::clearing(&short, &window(4, 1), 20_000).is_none());
        // One result freed against several rewritten does not pay.
        let mut few = messages.clone();
        let _ = clear_old_results(&mut few[..3], 0);
        let small = super::clearing(&few, &window(4, 4), tokens).unwrap();
        assert!(small.freed < small.rewritten, "{small:?}");
        assert!(!small.pays());
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
            keep_at_least: 1,
        };
        assert_eq!(window.learnt("test-model-a").tokens, 63_000);
        assert_eq!(window.learnt("test-model-b").tokens, 200_000);
    }
}
