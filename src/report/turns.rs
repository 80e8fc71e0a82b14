//! A step's transcript read back as turns: what `runner show STEP` prints and `runner report`
//! folds under each step. Both read the JSONL the transcript sink wrote; neither recomputes what
//! the run recorded.

use serde_json::{Value, json};

/// One turn of a step, as the transcript tells it.
#[derive(Default, serde::Serialize)]
pub struct Turn {
    pub turn: u64,
    /// The reply's text.
    pub text: String,
    /// `{id, name, input, output, is_error}`, the output cut (see [`cut`]).
    pub tool_calls: Vec<Value>,
    pub usage: Value,
    pub cost_usd: Option<f64>,
    /// The request that asked the model to summarise the work for a compaction, not a turn of
    /// the work: it bears the number of the turn it came before.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub compaction: bool,
    /// Which of the story's notes happened after this turn and before the next, so that checks
    /// and context events are shown where they happened.
    #[serde(skip)]
    pub notes: Vec<usize>,
}

/// A transcript: its turns, and the events noted beside them (checks, subagents, context
/// clearings and compactions, out-of-turns, invalid outputs, errors).
#[derive(Default)]
pub struct Story {
    pub turns: Vec<Turn>,
    pub notes: Vec<Value>,
}

/// Reads a transcript's lines, tool outputs cut to `shown` characters. Lines that are not JSON
/// are passed over (a transcript cut short by a crash ends in half a line).
pub fn read(text: &str, shown: usize) -> Story {
    let mut story = Story::default();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let kind = event["event"].as_str().unwrap_or_default();
        // A subagent's own turns are in its own transcript; its start and end are noted here,
        // a nested one's too (their `agent` is the subagent that started it).
        if event.get("agent").is_some() && !kind.starts_with("subagent_") {
            continue;
        }
        let turns = &mut story.turns;
        match kind {
            "turn_started" => turns.push(Turn {
                turn: event["turn"].as_u64().unwrap_or(0),
                ..Turn::default()
            }),
            "turn_finished" => {
                if let Some(turn) = turns.last_mut() {
                    turn.usage = event["usage"].clone();
                    turn.cost_usd = event["cost_usd"].as_f64();
                    turn.text = reply_text(&event["body"]);
                }
            }
            "tool_started" => {
                if let Some(turn) = turns.last_mut() {
                    turn.tool_calls.push(json!({
                        "id": event["id"], "name": event["name"], "input": event["input"],
                    }));
                }
            }
            "tool_finished" => {
                let call = turns
                    .iter_mut()
                    .rev()
                    .flat_map(|t| t.tool_calls.iter_mut())
                    .find(|c| c["id"] == event["id"]);
                if let Some(call) = call {
                    let output = event["output"].as_str().unwrap_or_default();
                    call["output"] = Value::String(cut(output, shown));
                    call["is_error"] = event["is_error"].clone();
                }
            }
            "check_finished" | "subagent_started" | "subagent_finished" | "context_cleared"
            | "context_compacted" | "out_of_turns" | "repeats_refused" | "output_invalid"
            | "step_error" => {
                if let Some(turn) = turns.last_mut() {
                    // The summary request is the turn just before its compaction.
                    if kind == "context_compacted"
                        && turn.turn == event["turn"].as_u64().unwrap_or(0)
                    {
                        turn.compaction = true;
                    }
                    turn.notes.push(story.notes.len());
                }
                story.notes.push(event)
            }
            _ => {}
        }
    }
    story
}

/// The reply's text, read by either API's parser.
fn reply_text(body: &Value) -> String {
    use crate::provider::format::{anthropic, openai};
    anthropic::parse_response(body)
        .or_else(|_| openai::parse_response(body))
        .map(|reply| reply.text())
        .unwrap_or_default()
}

/// `text` cut to `shown` characters, saying how long it was; redacted before it is cut (a cut
/// secret is no longer one the redactor knows).
pub fn cut(text: &str, shown: usize) -> String {
    let text = crate::secrets::redact(text);
    let short: String = text.chars().take(shown).collect();
    if short.len() < text.len() {
        format!("{short}… ({} bytes in all)", text.len())
    } else {
        short
    }
}

/// A noted event as one line.
pub fn note_line(event: &Value) -> String {
    let turn = event["turn"].as_u64().unwrap_or(0);
    match event["event"].as_str().unwrap_or_default() {
        "check_finished" => {
            let record = &event["record"];
            format!(
                "check `{}` (round {}): {}{}",
                record["command"].as_str().unwrap_or_default(),
                record["round"],
                if record["passed"] == true {
                    "passed"
                } else {
                    "failed"
                },
                record["exit_code"]
                    .as_i64()
                    .map_or_else(String::new, |c| format!(", exit {c}"))
            )
        }
        "subagent_started" => format!(
            "subagent {} ({}) started: {}",
            event["id"].as_str().unwrap_or_default(),
            // Earlier transcripts named it `agent`.
            event["subagent_type"]
                .as_str()
                .or(event["agent"].as_str())
                .unwrap_or_default(),
            event["description"].as_str().unwrap_or_default()
        ),
        "subagent_finished" => format!(
            "subagent {} finished: {}",
            event["record"]["id"].as_str().unwrap_or_default(),
            event["record"]["status"].as_str().unwrap_or_default()
        ),
        "context_cleared" => format!(
            "turn {turn}: cleared {} ({} to {} tokens)",
            crate::units::count(
                event["cleared"].as_u64().unwrap_or(0),
                "old tool result",
                "old tool results"
            ),
            event["tokens_before"],
            event["tokens_after"]
        ),
        "context_compacted" => format!(
            "turn {turn}: compacted the conversation ({} to {} tokens)",
            event["tokens_before"], event["tokens_after"]
        ),
        "out_of_turns" => format!("turn {turn}: its last turn (max_turns)"),
        "repeats_refused" => format!(
            "turn {turn}: its last turn (`{}` refused {} times in a row)",
            event["name"].as_str().unwrap_or_default(),
            event["refusals"]
        ),
        "output_invalid" => format!(
            "turn {turn}: the answer did not match output_schema: {}",
            event["error"].as_str().unwrap_or_default()
        ),
        other => format!("{other}: {}", event["error"].as_str().unwrap_or_default()),
    }
}
