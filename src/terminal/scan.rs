//! Holds every file to the terminal's one way out: a source scan, in the manner of the floors
//! test, that fails when code reaches stdout or stderr other than through
//! `crate::out::stdout()` / `stderr()` (redacted, then [`super::Escaping`]), or prints JSON with serde_json's own writer instead of
//! [`super::to_json_pretty`] / [`super::to_json_line`].

use std::path::{Path, PathBuf};

/// Files allowed to name stdout or stderr themselves, and why.
const OWN_STDIO: &[(&str, &str)] = &[
    (
        "out/terminal.rs",
        "it makes the handles: redacted, then escaped by the writer",
    ),
    ("out/audit.rs", "it names what it looks for"),
    ("terminal/scan.rs", "it names what it looks for"),
    (
        "sandbox/supervisor.rs",
        "the sandbox's own process, before it runs bash: its stderr is the tool's output",
    ),
];

/// Files that print JSON to the terminal (or build what is printed): they write it through the
/// escaping functions only.
fn prints_json(file: &str) -> bool {
    file.starts_with("commands/")
        || ["report/jsonl.rs", "record.rs", "plan/render.rs"].contains(&file)
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` up to its unit tests, which may print as they like.
fn code(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests")
        .map_or(text, |at| &text[..at])
}

#[test]
fn stdout_and_stderr_are_reached_only_through_the_escaping_writer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(files.len() > 50, "the scan found {} files", files.len());
    let mut bypasses = Vec::new();
    for path in files {
        let name = path
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in code(&text).lines().enumerate() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("//") {
                continue;
            }
            let stdio = [
                "io::stdout()",
                "io::stderr()",
                "ProgressDrawTarget::std",
                "Term::std",
                "Term::buffered_std",
            ]
            .iter()
            .any(|call| line.contains(call) && !line.contains(".is_terminal()"));
            let macros = ["println!", "print!(", "eprintln!", "eprint!(", "dbg!("]
                .iter()
                .any(|m| line.contains(m));
            if (stdio || macros) && !OWN_STDIO.iter().any(|(file, _)| *file == name) {
                bypasses.push(format!("{name}:{}: {}", n + 1, trimmed));
            }
            let raw_json = [
                "serde_json::to_string",
                "serde_json::to_writer",
                "serde_json::to_vec",
            ]
            .iter()
            .any(|call| line.contains(call));
            if raw_json && prints_json(&name) {
                bypasses.push(format!("{name}:{}: {}", n + 1, trimmed));
            }
        }
    }
    assert!(
        bypasses.is_empty(),
        "print through crate::out::stdout()/stderr() and crate::terminal::to_json_pretty/to_json_line:\n{}",
        bypasses.join("\n")
    );
}
