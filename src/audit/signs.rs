//! The few findings read from text, each because nothing else records it (docs/src/audit.md
//! "What is read from text"): the kernel refuses a sandboxed command's write, read or socket
//! with an errno the command prints, not with a record runner could keep; a deletion in `bash`
//! is in its command; a worktree's deletions are in its diff.

/// What a refused socket or name lookup prints (bash's `/dev/tcp`, curl, Python, Node, git).
const NETWORK_SIGNS: &[&str] = &[
    "socket: Permission denied",
    "Could not resolve host",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Couldn't connect to server",
    "Failed to connect to",
    "getaddrinfo",
];

/// What a refused write or read prints (EACCES from Landlock, EROFS from a read-only bind,
/// EPERM from the metadata filter).
const REFUSAL_SIGNS: &[&str] = &[
    "Read-only file system",
    "Permission denied",
    "Operation not permitted",
];

/// Programs that delete what they are given.
const DELETERS: &[&str] = &["rm", "rmdir", "unlink", "shred"];

/// Words a command may start with before the program it runs.
const PREFIXES: &[&str] = &["sudo", "xargs", "command", "env", "nohup", "time", "exec"];

/// The first line of `text` that holds `needle`.
pub fn line_with<'a>(text: &'a str, needle: &str) -> Option<&'a str> {
    text.lines().find(|line| line.contains(needle))
}

/// The line of a failed command's output that shows a refused socket or name lookup.
pub fn network_refused(output: &str) -> Option<&str> {
    if let Some(line) = output
        .lines()
        .find(|line| NETWORK_SIGNS.iter().any(|sign| line.contains(sign)))
    {
        return Some(line);
    }
    // Python names the socket in its traceback and the errno on the last line.
    output
        .contains("socket")
        .then(|| line_with(output, "Permission denied"))
        .flatten()
}

/// The line of a failed command's output that shows a refused write or read (or runner's note
/// under a read-only step's failure that looks like one).
pub fn sandbox_refused(output: &str) -> Option<&str> {
    output
        .lines()
        .find(|line| REFUSAL_SIGNS.iter().any(|sign| line.contains(sign)))
        .or_else(|| line_with(output, "this step's sandbox is read-only"))
}

/// Whether `command` deletes files: `Some(true)` when recursively (`rm -r`, `find -delete`),
/// `Some(false)` for a plain `rm`, `rmdir`, `unlink`, `git rm`.
pub fn deletes(command: &str) -> Option<bool> {
    let mut found = None;
    for segment in command.split([';', '|', '&', '\n', '(', ')', '`']) {
        let mut words = segment
            .split_whitespace()
            .map(|w| w.trim_matches(|c| c == '"' || c == '\''))
            .skip_while(|w| PREFIXES.contains(w) || w.contains('=') || w.starts_with('-'))
            .peekable();
        let Some(first) = words.next() else { continue };
        let program = first.rsplit('/').next().unwrap_or(first);
        let rest: Vec<&str> = words.collect();
        let recursive = |args: &[&str]| {
            args.iter().any(|a| {
                *a == "--recursive"
                    || (a.starts_with('-') && !a.starts_with("--") && a.contains(['r', 'R']))
            })
        };
        let this = match program {
            _ if DELETERS.contains(&program) => Some(program == "rm" && recursive(&rest)),
            "git" if rest.first() == Some(&"rm") => Some(recursive(&rest[1..])),
            "find" if rest.contains(&"-delete") => Some(true),
            _ => None,
        };
        found = match (found, this) {
            (Some(a), Some(b)) => Some(a || b),
            (a, b) => a.or(b),
        };
    }
    found
}

/// The files a unified diff (`git diff`) deletes.
pub fn deleted_in_diff(diff: &str) -> Vec<String> {
    let mut deleted = Vec::new();
    let mut header: Option<&str> = None;
    for line in diff.lines() {
        if let Some(rest) = line.strip_prefix("diff --git a/") {
            header = Some(rest);
        } else if line.starts_with("deleted file mode")
            && let Some(rest) = header.take()
        {
            // `a/<path> b/<path>`, the same path twice for a deletion.
            let half = rest.len().saturating_sub(3) / 2;
            let path = match (rest.get(..half), rest.get(half..)) {
                (Some(path), Some(tail)) if tail.strip_prefix(" b/") == Some(path) => path,
                _ => rest.split(" b/").next().unwrap_or(rest),
            };
            deleted.push(path.to_owned());
        }
    }
    deleted
}

/// Whether a reply that names `answered` came from the model `asked` names: the same, or the
/// same with a date or a tag after it (`claude-sonnet-4-5` answered by
/// `claude-sonnet-4-5-20250929`, `llama3` by `llama3:latest`), `-latest` aliases included,
/// any `provider/` in front left out, in any case.
pub fn same_model(asked: &str, answered: &str) -> bool {
    let bare = |m: &str| m.rsplit('/').next().unwrap_or(m).to_ascii_lowercase();
    let (asked, answered) = (bare(asked), bare(answered));
    let asked = asked.strip_suffix("-latest").unwrap_or(&asked);
    // A date or version after a dash (`-20250929`, `-2024-08-06`), or a tag (`:latest`,
    // `@001`); `gpt-4o-mini` is not `gpt-4o`.
    answered == asked
        || answered.strip_prefix(asked).is_some_and(|rest| {
            rest.starts_with([':', '@'])
                || rest
                    .strip_prefix('-')
                    .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletions_in_commands_are_found_at_the_start_of_a_command_only() {
        assert_eq!(deletes("rm notes.txt"), Some(false));
        assert_eq!(deletes("cd src && rm -rf build"), Some(true));
        assert_eq!(deletes("sudo /bin/rm -fR /tmp/x"), Some(true));
        assert_eq!(deletes("git rm -r --cached old"), Some(true));
        assert_eq!(deletes("git rm old.rs"), Some(false));
        assert_eq!(deletes("find . -name '*.o' -delete"), Some(true));
        assert_eq!(deletes("ls | xargs rm"), Some(false));
        assert_eq!(deletes("LC_ALL=C unlink a"), Some(false));
        assert_eq!(deletes("grep -n rm src/main.rs"), None);
        assert_eq!(deletes("echo rm -rf /"), None);
        assert_eq!(deletes("cargo test"), None);
    }

    #[test]
    fn a_diff_names_the_files_it_deletes() {
        let diff = "diff --git a/src/old file.rs b/src/old file.rs\ndeleted file mode 100644\nindex 1..0\n--- a/src/old file.rs\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\ndiff --git a/kept.rs b/kept.rs\nindex 1..2 100644\n--- a/kept.rs\n+++ b/kept.rs\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(deleted_in_diff(diff), ["src/old file.rs"]);
        assert!(deleted_in_diff("").is_empty());
    }

    #[test]
    fn a_dated_or_tagged_answer_is_the_model_asked() {
        assert!(same_model(
            "claude-sonnet-4-5",
            "claude-sonnet-4-5-20250929"
        ));
        assert!(same_model(
            "claude-3-5-sonnet-latest",
            "claude-3-5-sonnet-20241022"
        ));
        assert!(same_model("llama3", "llama3:latest"));
        assert!(same_model("gpt-4o", "openai/gpt-4o"));
        assert!(same_model("GPT-4o", "gpt-4o-2024-08-06"));
        assert!(!same_model("claude-opus-4-5", "claude-haiku-4-5"));
        assert!(!same_model("gpt-4o", "gpt-4o-mini"));
        assert!(!same_model("claude-test", "m"));
    }

    #[test]
    fn refusals_are_told_apart_by_what_they_print() {
        let network = "exit code 1\n[stderr]\nbash: line 1: socket: Permission denied\nbash: line 1: /dev/tcp/127.0.0.1/9: Invalid argument\n";
        assert_eq!(
            network_refused(network),
            Some("bash: line 1: socket: Permission denied")
        );
        let python = "exit code 1\n[stderr]\nTraceback (most recent call last):\n  File \"<string>\", line 1, in <module>\n    _socket.socket.__init__(self, family, type, proto, fileno)\nPermissionError: [Errno 13] Permission denied\n";
        assert_eq!(
            network_refused(python),
            Some("PermissionError: [Errno 13] Permission denied")
        );
        let write = "exit code 1\n[stderr]\nbash: line 1: ../outside.txt: Permission denied\n";
        assert_eq!(network_refused(write), None);
        assert_eq!(
            sandbox_refused(write),
            Some("bash: line 1: ../outside.txt: Permission denied")
        );
        assert_eq!(sandbox_refused("exit code 1\nerror: tests failed\n"), None);
    }
}
