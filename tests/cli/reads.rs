//! Reads are confined too: a step's bash (read-only or writing, its checks and command steps)
//! reads the system's directories, the toolchains, its working and temporary directories and
//! what the step's `read_paths` names, and nothing else of the user's home: not `~/.ssh`, not
//! runner's own key. The model never sees a byte of them.

use std::path::Path;

use serde_json::json;

use crate::fake::{Fake, anthropic_results, anthropic_text, anthropic_tool};
use crate::support::Test;

const KEY: &str = "sk-ant-reads-test-key-4b1d9e02";
const SSH_MARK: &str = "SSH-PRIVATE-KEY-MARK-5e0c7a";
const RUNNER_MARK: &str = "RUNNER-SEAL-KEY-MARK-93f1b6-0123456789abcdef";
/// What the commands look for: part of the mark, so the commands do not carry it whole.
const SSH_PART: &str = "MARK-5e0c7a";
/// How a refused read ends: Landlock's refusal, or (runner's key, whose folder is covered by an
/// empty one in the call's mount namespace) a file that is not there.
const DENIED: &str = "Permission denied|No such file or directory";

/// A home of its own holding an ssh key and runner's key where runner looks for it.
fn home_with_keys() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let ssh = home.path().join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    std::fs::write(ssh.join("id_ed25519"), format!("{SSH_MARK}\n")).unwrap();
    let state = home.path().join(".local/state/runner");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("key"), RUNNER_MARK).unwrap();
    home
}

/// A shell test that passes when reading `file` (which exists outside) is refused.
fn refused(file: &Path) -> String {
    format!(
        "(cat '{}' 2>&1; true) | grep -qE '{DENIED}'",
        file.display()
    )
}

/// How many reads `result` says were refused.
fn refusals(result: &str) -> usize {
    DENIED.split('|').map(|d| result.matches(d).count()).sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn bash_cannot_read_the_ssh_key_or_runners_key_unless_read_paths_names_them() {
    let home = home_with_keys();
    let h = home.path().canonicalize().unwrap();
    let (ssh, key) = (h.join(".ssh/id_ed25519"), h.join(".local/state/runner/key"));
    let read_both = format!("cat '{}'; cat '{}'; echo END", ssh.display(), key.display());
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-look",
            vec![
                anthropic_tool("l1", "bash", json!({ "command": read_both })),
                anthropic_text("looked"),
            ],
        ),
        (
            "MARK-edit",
            vec![
                anthropic_tool("e1", "bash", json!({ "command": read_both })),
                anthropic_text("edited"),
            ],
        ),
        (
            "MARK-granted",
            vec![
                anthropic_tool(
                    "g1",
                    "bash",
                    json!({ "command": format!("grep -c {SSH_PART} '{}'; cat '{}'; echo END", ssh.display(), key.display()) }),
                ),
                anthropic_text("granted"),
            ],
        ),
    ])
    .await;
    let check = format!("{} && {}", refused(&ssh), refused(&key));
    let command = format!("{} && {} && echo REFUSED", refused(&ssh), refused(&key));
    let granted_check = format!(
        "grep -q {SSH_PART} '{}' && {}",
        ssh.display(),
        refused(&key)
    );
    let workflow = format!(
        r#"name = "reads"
[models]
default = "anthropic/claude-test"
[steps.look]
agent = "explore"
prompt = "MARK-look"
[steps.edit]
needs = ["look"]
agent = "code"
prompt = "MARK-edit"
checks = [{check:?}]
check_retries = 0
[steps.cmd]
needs = ["edit"]
run = {command:?}
[steps.granted]
needs = ["cmd"]
agent = "code"
prompt = "MARK-granted"
read_paths = ["~/.ssh", "~/.local/state"]
checks = [{granted_check:?}]
check_retries = 0
"#
    );
    let (out, _test) = Test::new()
        .file("w.toml", &workflow)
        .env("HOME", h.to_str().unwrap())
        .env("XDG_STATE_HOME", h.join(".local/state").to_str().unwrap())
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    // Every check passed and the command step succeeded: each refusal held.
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    for marker in ["MARK-look", "MARK-edit"] {
        let last = bodies
            .iter()
            .rfind(|b| crate::fake::prompt_of(b).contains(marker))
            .unwrap();
        let result = &anthropic_results(last)[0].1;
        assert_eq!(refusals(result), 2, "{marker}: {result}");
        assert!(result.contains("END"), "{marker}: {result}");
    }
    // `read_paths` grants the ssh folder, and never runner's key, even naming the folder it is in.
    let last = bodies
        .iter()
        .rfind(|b| crate::fake::prompt_of(b).contains("MARK-granted"))
        .unwrap();
    let result = &anthropic_results(last)[0].1;
    assert!(result.lines().any(|l| l == "1"), "{result}");
    assert_eq!(refusals(result), 1, "{result}");
    // Not a byte of either key reached the model.
    for body in &bodies {
        let text = body.to_string();
        assert!(!text.contains(SSH_MARK), "{text}");
        assert!(!text.contains(&RUNNER_MARK[..20]), "{text}");
    }
    assert!(
        !out.stdout.contains(SSH_MARK) && !out.stderr.contains(SSH_MARK),
        "{}",
        out.transcript()
    );
}

/// `runner plan` shows what a step may read besides what every step may, `[defaults]`'s first.
#[test]
fn plan_shows_a_steps_read_paths() {
    let workflow = "name = \"p\"\n[defaults]\nread_paths = [\"~/.ssh/known_hosts\"]\n[steps.a]\nrun = \"true\"\nread_paths = [\"../shared\"]\n";
    let test = Test::new().file("w.toml", workflow);
    let out = test.args(&["plan", "w.toml"]).run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stdout
            .contains("reads    ~/.ssh/known_hosts, ../shared (besides the system"),
        "{}",
        out.stdout
    );
    let test = Test::new().file("w.toml", workflow);
    let out = test.args(&["plan", "w.toml", "--format", "json"]).run();
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        plan["steps"][0]["read_paths"],
        json!(["~/.ssh/known_hosts", "../shared"])
    );
}

/// The state directory inside the working directory is an empty folder to bash: other steps'
/// transcripts and records are not its to read (the file tools refuse them too), in the
/// working directory and in a worktree, which sits inside the state directory.
#[tokio::test(flavor = "multi_thread")]
async fn bash_sees_the_state_directory_as_empty() {
    const SAID: &str = "EARLIER-STEP-SAID-0d8e41";
    let look = "ls -A .runner | wc -l; cat .runner/runs/*/steps/first/transcript.jsonl; find / -path /proc -prune -o -name transcript.jsonl -print 2>/dev/null; echo END";
    let fake = Fake::anthropic_routed(vec![
        ("MARK-first", vec![anthropic_text(SAID)]),
        (
            "MARK-here",
            vec![
                anthropic_tool("h1", "bash", json!({ "command": look })),
                anthropic_text("done"),
            ],
        ),
        (
            "MARK-tree",
            vec![
                anthropic_tool("t1", "bash", json!({ "command": "cat ../../runs/*/steps/first/transcript.jsonl; ls ../../runs | wc -l; echo END" })),
                anthropic_text("done"),
            ],
        ),
    ])
    .await;
    let workflow = r#"name = "state"
[models]
default = "anthropic/claude-test"
[steps.first]
agent = "explore"
prompt = "MARK-first"
[steps.here]
needs = ["first"]
agent = "code"
prompt = "MARK-here"
[steps.tree]
needs = ["first"]
agent = "code"
isolation = "worktree"
prompt = "MARK-tree"
"#;
    let test = Test::new()
        .file("w.toml", workflow)
        .file("README.md", "x\n");
    crate::support::init_repo(test.path());
    let (out, test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    // The transcript is there on the host, with what the first step said.
    let runs = test.path().join(".runner/runs");
    let run = std::fs::read_dir(&runs).unwrap().flatten().next().unwrap();
    let transcript = run.path().join("steps/first/transcript.jsonl");
    assert!(std::fs::read_to_string(transcript).unwrap().contains(SAID));
    let bodies = fake.bodies().await;
    for marker in ["MARK-here", "MARK-tree"] {
        let last = bodies
            .iter()
            .rfind(|b| crate::fake::prompt_of(b).contains(marker))
            .unwrap();
        let result = &anthropic_results(last)[0].1;
        assert!(result.contains("END"), "{marker}: {result}");
        assert!(result.lines().any(|l| l == "0"), "{marker}: {result}");
        assert!(!result.contains("transcript.jsonl\n"), "{marker}: {result}");
        // Only the first step's own request carries what it said.
        let text = last.to_string();
        assert!(!text.contains(SAID), "{marker}: {text}");
    }
}

/// `~/.gitconfig` (which can carry tokens: `http.extraHeader`, `url.<base>.insteadOf`) is not
/// bash's to read: git in bash works without it, reading no global configuration, unless the
/// step's `read_paths` names it.
#[test]
fn git_in_bash_reads_the_global_configuration_only_when_named() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path().canonicalize().unwrap();
    std::fs::write(
        h.join(".gitconfig"),
        "[user]\n\tname = Gitconfig Mark\n[http]\n\textraHeader = Authorization: Bearer tok-9a7c\n",
    )
    .unwrap();
    let command = "git config --global --get user.name; git config --get-all http.extraHeader; git status --short >/dev/null && echo GIT-OK";
    let workflow = format!(
        "name = \"g\"\n[steps.plain]\nrun = {command:?}\n[steps.named]\nrun = {command:?}\nread_paths = [\"~/.gitconfig\"]\n"
    );
    let test = Test::new().file("w.toml", &workflow);
    crate::support::init_repo(test.path());
    let out = test
        .env("HOME", h.to_str().unwrap())
        .env("XDG_STATE_HOME", h.join(".local/state").to_str().unwrap())
        .args(&["run", "w.toml", "--format", "json"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let plain = run["steps"]["plain"]["summary"].as_str().unwrap();
    assert_eq!(plain.trim(), "GIT-OK", "{}", out.transcript());
    let named = run["steps"]["named"]["summary"].as_str().unwrap();
    assert!(
        named.contains("Gitconfig Mark") && named.contains("GIT-OK"),
        "{}",
        out.transcript()
    );
}
