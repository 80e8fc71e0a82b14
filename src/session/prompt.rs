//! What a step's model is told. The system prompt holds only what is the same for every step of
//! an agent (its prompt, and the shape of its final answer), so all those requests share one
//! byte-identical, cacheable prefix; where and when the step runs goes into its first message,
//! as Claude Code does.

use std::io::Read as _;

use serde_json::Value;

use crate::provider::message::{Block, Message, Role};
use crate::tools::confine::Workspace;

/// The project memory files agents get, in the order looked for: Claude Code's, then the one
/// Codex and other agents read (docs/src/agents.md "Project memory").
pub const MEMORY_FILES: [&str; 2] = ["CLAUDE.md", "AGENTS.md"];
/// Bytes of a memory file an agent gets; the rest is cut, saying so (Claude Code warns past
/// about 40 k characters).
pub const MAX_MEMORY_BYTES: usize = 40 * 1024;

/// Which memory file `dir` has at its root, if any: a regular file, not a link.
pub fn memory_file(dir: &std::path::Path) -> Option<&'static str> {
    MEMORY_FILES.into_iter().find(|name| {
        dir.join(name)
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_file())
    })
}

/// The project memory at the root of `ws`: its file's name and text, read through the same
/// confined opener as `read_file` (no link out, no special file), cut at
/// [`MAX_MEMORY_BYTES`], with every known secret hidden.
pub fn project_memory(ws: &Workspace) -> Option<(&'static str, String)> {
    let root = ws.root().as_std_path();
    let name = memory_file(root)?;
    let (file, _) = ws.open_read(name).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_MEMORY_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    let cut = bytes.len() > MAX_MEMORY_BYTES;
    bytes.truncate(MAX_MEMORY_BYTES);
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if cut {
        text.push_str(&format!(
            "\n[… {name} is longer than {}; the rest is left out]",
            crate::limits::bytes(MAX_MEMORY_BYTES as u64)
        ));
    }
    Some((name, crate::secrets::redact_owned(text)))
}

/// `system` with the project memory appended under a heading of its own.
pub fn with_memory(mut system: String, memory: Option<&(&'static str, String)>) -> String {
    if let Some((name, text)) = memory {
        system.push_str(&format!(
            "\n\n# Project memory ({name})\nThe project's own instructions for agents working in it:\n\n{}",
            text.trim_end()
        ));
    }
    system
}

/// The agent's prompt plus, with `output_schema`, the shape its final answer must have.
pub fn system_prompt(agent_prompt: &str, output_schema: Option<&Value>) -> String {
    let mut text = agent_prompt.to_owned();
    if let Some(schema) = output_schema {
        text.push_str(&format!(
            "\n\n# Final answer\nEnd your work with a final answer that is a single JSON value matching this JSON Schema (a ```json fenced block is fine):\n{}",
            serde_json::to_string_pretty(schema).unwrap_or_default()
        ));
    }
    text
}

/// How the note of a step's last allowed turn begins (see [`last_turn_note`]).
const LAST_TURN_NOTE: &str = "This is your last turn (max_turns = ";

/// The note the last allowed turn adds: no more calls, answer now.
pub fn last_turn_note(max_turns: u32) -> String {
    format!(
        "{LAST_TURN_NOTE}{max_turns}): no more tool calls. Give your final answer now with what you have found, and say plainly what is left undone."
    )
}

/// A step's conversation read back to go on from (`--resume RUN --continue`). The earlier run's
/// last-turn note no longer holds (tools may be called again, and `max_turns` counts the turns
/// of this continuation: docs/src/runs.md "Resume"); a model told "no more tool calls" obeys and
/// stops, so the note goes, and a word that the step goes on takes its place.
pub fn continued(mut history: Vec<Message>, max_turns: u32) -> Vec<Message> {
    let Some(last) = history.last_mut().filter(|m| m.role == Role::User) else {
        return history;
    };
    let before = last.content.len();
    last.content
        .retain(|block| !matches!(block, Block::Text { text } if text.starts_with(LAST_TURN_NOTE)));
    if last.content.len() < before {
        last.content.push(Block::Text {
            text: format!(
                "The step goes on from here with {max_turns} more turn{} (max_turns), and tool calls are allowed again: carry on with the task where you left off.",
                if max_turns == 1 { "" } else { "s" }
            ),
        });
    }
    history
}

/// The step's first message: where it runs, then its rendered prompt.
pub fn first_message(workdir: &str, prompt: &str) -> String {
    // Read once per run: every step's first message needs it.
    static ZONE: std::sync::LazyLock<jiff::tz::TimeZone> = std::sync::LazyLock::new(local_zone);
    let date = ZONE.to_datetime(jiff::Timestamp::now()).date();
    format!(
        "<environment>\nWorking directory: {workdir}\nPlatform: {}\nToday's date: {date}\nAll paths you use must be inside the working directory.\n</environment>\n\n{prompt}",
        std::env::consts::OS
    )
}

/// The machine's time zone. Without `TZ`, `/etc/localtime` is read as the zone itself: the date
/// needs no zone name, and looking the name up lists the whole zone database first (about a
/// millisecond at every start). `TZ`, or no readable `/etc/localtime`, goes jiff's full way.
/// A zone file is a few kB; more than 256 kB is not one.
fn local_zone() -> jiff::tz::TimeZone {
    use std::io::Read as _;
    let mut data = Vec::new();
    if std::env::var_os("TZ").is_none()
        && let Ok(file) = std::fs::File::open("/etc/localtime")
        && file.take(256 * 1024 + 1).read_to_end(&mut data).is_ok()
        && data.len() <= 256 * 1024
        && let Ok(zone) = jiff::tz::TimeZone::tzif("localtime", &data)
    {
        return zone;
    }
    jiff::tz::TimeZone::system()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_prompt_does_not_depend_on_where_or_when() {
        let a = system_prompt("You explore.", None);
        assert_eq!(a, "You explore.");
        let first = first_message("/tmp/w", "Find login");
        assert!(first.contains("Working directory: /tmp/w"));
        assert!(first.ends_with("\n\nFind login"));
    }

    /// The zone read straight from `/etc/localtime` gives the offsets jiff's own lookup gives,
    /// through a year of days (daylight saving included).
    #[test]
    fn the_local_zone_read_directly_agrees_with_jiff() {
        let ours = local_zone();
        let theirs = jiff::tz::TimeZone::system();
        let start = jiff::Timestamp::from_second(1_767_225_600).expect("2026-01-01");
        for day in 0..366 {
            let at = start + jiff::SignedDuration::from_hours(24 * day + 7);
            assert_eq!(ours.to_offset(at), theirs.to_offset(at), "{at}");
        }
    }
}
