//! An agent file's `memory`: a folder of notes that lasts from one run to the next, whose
//! `MEMORY.md` goes into the agent's system prompt, as Claude Code does (docs/src/agents.md,
//! "Memory"). `project` and `local` folders are in the working directory, so the agent writes
//! them with its own file tools, inside the sandbox; `user` is in the home directory, read only
//! (runner grants no write outside the working directory, docs/src/security.md).

use std::io::Read as _;

use camino::Utf8Path;

use crate::agent::MemoryScope;
use crate::tools::confine::Workspace;

/// Of `MEMORY.md`, what the prompt gets: Claude Code's first 200 lines or 25 KB.
const MAX_LINES: usize = 200;
const MAX_BYTES: usize = 25 * 1024;

/// The system prompt's section about the agent's memory: where its folder is, what to keep
/// there, and `MEMORY.md` as it is now (read through the confined opener of the folder's root,
/// every known secret hidden).
pub fn section(ws: &Workspace, home: Option<&Utf8Path>, scope: MemoryScope, agent: &str) -> String {
    let folder = scope.folder(agent);
    let file = format!("{folder}/MEMORY.md");
    let (shown, text) = match scope {
        MemoryScope::User => {
            let text = home
                .and_then(|h| Workspace::new(h).ok())
                .and_then(|h| read(&h, &file));
            (format!("~/{folder}/"), text)
        }
        MemoryScope::Project | MemoryScope::Local => (format!("{folder}/"), read(ws, &file)),
    };
    let how = match scope {
        MemoryScope::User => {
            "It is yours across every project. Runner lets you read it but not change it: your writes stay inside the working directory."
        }
        MemoryScope::Project => {
            "It is in the working directory and shared with the project. Keep `MEMORY.md` short and up to date with what will help you next time (conventions, decisions, where things are), using your file tools; put details in other files of the folder."
        }
        MemoryScope::Local => {
            "It is in the working directory, for this machine only (not committed). Keep `MEMORY.md` short and up to date with what will help you next time, using your file tools; put details in other files of the folder."
        }
    };
    let body = match text {
        Some(text) if !text.trim().is_empty() => format!("\n\n{}", text.trim_end()),
        _ => "\n\n`MEMORY.md` does not exist yet.".to_owned(),
    };
    format!("\n\n# Your memory ({shown})\n{how}{body}")
}

/// The first [`MAX_LINES`] lines or [`MAX_BYTES`] of `path` in `ws`, saying when more was cut;
/// `None` when it cannot be read as a regular file.
fn read(ws: &Workspace, path: &str) -> Option<String> {
    let (file, _) = ws.open_read(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    let mut cut = bytes.len() > MAX_BYTES;
    bytes.truncate(MAX_BYTES);
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<&str> = text.lines().collect();
    if lines.len() > MAX_LINES {
        lines.truncate(MAX_LINES);
        cut = true;
    }
    let mut text = lines.join("\n");
    if cut {
        text.push_str("\n[… MEMORY.md goes on; the rest is left out]");
    }
    Some(crate::secrets::redact_owned(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use camino::Utf8PathBuf;

    #[test]
    fn the_section_quotes_memory_md_and_says_where_the_folder_is() {
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().to_owned()).unwrap();
        let ws = Workspace::new(&root).unwrap();
        let empty = section(&ws, None, MemoryScope::Project, "reviewer");
        assert!(empty.contains(".claude/agent-memory/reviewer/"), "{empty}");
        assert!(empty.contains("does not exist yet"), "{empty}");

        std::fs::create_dir_all(root.join(".claude/agent-memory-local/reviewer")).unwrap();
        let long: String = (0..300).map(|i| format!("line {i}\n")).collect();
        std::fs::write(
            root.join(".claude/agent-memory-local/reviewer/MEMORY.md"),
            long,
        )
        .unwrap();
        let local = section(&ws, None, MemoryScope::Local, "reviewer");
        assert!(local.contains("line 199"), "{local}");
        assert!(!local.contains("line 200"), "{local}");
        assert!(local.contains("the rest is left out"), "{local}");
    }

    #[test]
    fn a_link_out_of_the_working_directory_is_not_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "OUTSIDE-TEXT").unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().to_owned()).unwrap();
        std::fs::create_dir_all(root.join(".claude/agent-memory/a")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret"),
            root.join(".claude/agent-memory/a/MEMORY.md"),
        )
        .unwrap();
        let ws = Workspace::new(&root).unwrap();
        let text = section(&ws, None, MemoryScope::Project, "a");
        assert!(!text.contains("OUTSIDE-TEXT"), "{text}");
    }
}
