//! The tools users run, inside runner's sandbox, on fresh repositories: `cargo test` on a new
//! crate (no `Cargo.lock`, no `target/`), `python3 -m unittest`, pytest, `make`, `git` and npm,
//! each as a command step and as a check after an agent whose `bash` writes at the root, in the
//! working directory and in a worktree. What they make at the repository's root (a lock file,
//! `target/`, `.pytest_cache/`, `__pycache__/`) is the proof that a writing step writes like a
//! person would (docs/src/security.md).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::fake::{Fake, anthropic_text, anthropic_tool};
use crate::support::{REPO, Test, git, init_repo};

const KEY: &str = "sk-test-real-tools";

/// A fresh project and the command that builds and tests it.
struct Project {
    files: &'static [(&'static str, &'static str)],
    command: &'static str,
    /// What the command makes at the root, in the working directory.
    made: &'static [&'static str],
    /// What of that the worktree's branch keeps (the rest is ignored by the project).
    committed: &'static [&'static str],
    /// Extra environment for runner (and so for the sandboxed commands).
    env: Vec<(String, String)>,
}

const CARGO: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        "[package]\nname = \"fresh\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    ),
    (
        "src/lib.rs",
        "pub fn add(a: u32, b: u32) -> u32 { a + b }\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() { assert_eq!(super::add(2, 2), 4); }\n}\n",
    ),
    (".gitignore", "/target\n"),
];

const PYTHON: &[(&str, &str)] = &[
    ("calc.py", "def add(a, b):\n    return a + b\n"),
    (
        "test_calc.py",
        "import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 2), 4)\n",
    ),
    (".gitignore", "__pycache__/\n.pytest_cache/\n"),
];

const MAKE: &[(&str, &str)] = &[
    (
        "Makefile",
        "test: build/hello.txt\n\tgrep -q hello build/hello.txt\n\nbuild/hello.txt:\n\tmkdir -p build\n\techo hello > build/hello.txt\n",
    ),
    (".gitignore", "/build\n"),
];

const GIT: &[(&str, &str)] = &[("README.md", "hello\n")];

const NPM: &[(&str, &str)] = &[
    (
        "package.json",
        "{\"name\": \"fresh\", \"version\": \"1.0.0\", \"private\": true, \"scripts\": {\"test\": \"node test.js\"}}\n",
    ),
    (
        "test.js",
        "const assert = require('assert');\nassert.strictEqual(1 + 1, 2);\nconsole.log('ok');\n",
    ),
    (".gitignore", "node_modules/\n"),
];

fn cargo() -> Project {
    Project {
        files: CARGO,
        command: "cargo test --offline",
        made: &["Cargo.lock", "target"],
        committed: &["Cargo.lock"],
        env: Vec::new(),
    }
}

fn unittest() -> Project {
    Project {
        files: PYTHON,
        command: "python3 -m unittest -v",
        made: &["__pycache__"],
        committed: &[],
        env: Vec::new(),
    }
}

fn make() -> Project {
    Project {
        files: MAKE,
        command: "make test",
        made: &["build/hello.txt"],
        committed: &[],
        env: Vec::new(),
    }
}

/// git's own commands in a writing step: status, log and diff read the repository (its `.git`
/// stays read-only, docs/src/security.md).
fn git_commands() -> Project {
    Project {
        files: GIT,
        command: "git status --short && git log --oneline -1 && git diff --stat && git rev-parse --show-toplevel > git-top.txt",
        made: &["git-top.txt"],
        committed: &["git-top.txt"],
        env: Vec::new(),
    }
}

fn npm() -> Project {
    Project {
        files: NPM,
        command: "npm install --offline --no-audit --no-fund && npm test",
        made: &["package-lock.json"],
        committed: &["package-lock.json"],
        env: Vec::new(),
    }
}

/// pytest from PyPI, installed once under `target/` (the README says `cargo test` installs from
/// PyPI and npm), reached through `PYTHONPATH`.
fn pytest() -> Project {
    let dir = pip_install("pytest-tool", "pytest==8.3.4", "pytest");
    Project {
        files: PYTHON,
        command: "python3 -m pytest -q",
        made: &[".pytest_cache", "__pycache__"],
        committed: &[],
        env: vec![("PYTHONPATH".into(), dir.display().to_string())],
    }
}

fn pip_install(dir: &str, package: &str, marker: &str) -> PathBuf {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Path::new(REPO).join("target").join(dir);
    if !dir.join(marker).exists() {
        let status = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg("--target")
            .arg(&dir)
            .arg(package)
            .status()
            .unwrap_or_else(|e| panic!("python3 with pip is needed to install {package}: {e}"));
        assert!(status.success(), "pip install {package} failed");
    }
    dir
}

/// Runs `project` as a command step and as the check of an agent step whose `bash` writes at
/// the root; both write, in the working directory or each in its worktree.
async fn writes_at_the_root(project: Project, worktree: bool) {
    let isolation = if worktree { "worktree" } else { "none" };
    // The agent's bash makes a file and a folder at the root, then answers; its check runs the
    // project's command.
    let fake = Fake::anthropic(vec![
        anthropic_tool(
            "tu_1",
            "bash",
            json!({"command": "touch made-by-bash.txt && mkdir -p made-dir/sub && echo made"}),
        ),
        anthropic_text("done"),
    ])
    .await;
    let command = toml_string(project.command);
    let workflow = format!(
        "name = \"real\"\n[models]\ndefault = \"anthropic/claude-test\"\n\n[steps.cmd]\nrun = {command}\nwrites = true\nisolation = \"{isolation}\"\n\n[steps.agent]\nagent = \"code\"\nneeds = [\"cmd\"]\nprompt = \"Make the files\"\nisolation = \"{isolation}\"\nchecks = [{command}]\ncheck_retries = 0\n"
    );
    let mut test = Test::new();
    for (path, content) in project.files {
        test = test.file(path, content);
    }
    test = test.file("w.toml", &workflow);
    init_repo(test.path());
    for (key, value) in &project.env {
        test = test.env(key, value);
    }
    let (out, test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json", "--no-progress"])
        .run_async()
        .await;
    let run: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("run.json on stdout ({e}):\n{}", out.transcript()));
    assert_eq!(out.status, 0, "{}", out.transcript());
    for step in ["cmd", "agent"] {
        assert_eq!(run["steps"][step]["status"], "succeeded", "{step}: {run}");
    }
    assert_eq!(run["steps"]["agent"]["checks"][0]["passed"], true, "{run}");
    let bash_result = fake.bodies().await[1].to_string();
    assert!(
        bash_result.contains("exit code 0") && bash_result.contains("made"),
        "{bash_result}"
    );
    let root = test.path();
    if worktree {
        // Each step's branch holds what it made at the root that the project does not ignore;
        // the checkout itself is untouched.
        let agent_branch = run["steps"]["agent"]["branch"].as_str().unwrap();
        let listed = git(root, &["ls-tree", "-r", "--name-only", agent_branch]);
        assert!(listed.contains("made-by-bash.txt"), "{listed}");
        let cmd_branch = run["steps"]["cmd"]["branch"].as_str().unwrap_or_default();
        for path in project.committed {
            let listed = git(root, &["ls-tree", "-r", "--name-only", cmd_branch]);
            assert!(
                listed.lines().any(|l| l == *path),
                "{path} not on {cmd_branch}:\n{listed}"
            );
        }
        for path in project.made.iter().chain(&["made-by-bash.txt"]) {
            assert!(!root.join(path).exists(), "{path} reached the checkout");
        }
    } else {
        for path in project
            .made
            .iter()
            .chain(&["made-by-bash.txt", "made-dir/sub"])
        {
            assert!(root.join(path).exists(), "{path} was not made");
        }
        // Nothing reached `.git` but what runner's own git does (none here: no worktree).
        assert!(!root.join(".git/made-by-bash.txt").exists());
    }
}

/// A TOML basic string holding `text`.
fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn cargo_test_on_a_fresh_crate_in_the_working_directory() {
    writes_at_the_root(cargo(), false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cargo_test_on_a_fresh_crate_in_a_worktree() {
    writes_at_the_root(cargo(), true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_unittest_in_the_working_directory() {
    writes_at_the_root(unittest(), false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_unittest_in_a_worktree() {
    writes_at_the_root(unittest(), true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pytest_in_the_working_directory() {
    writes_at_the_root(pytest(), false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pytest_in_a_worktree() {
    writes_at_the_root(pytest(), true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn make_in_the_working_directory() {
    writes_at_the_root(make(), false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn make_in_a_worktree() {
    writes_at_the_root(make(), true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn git_in_the_working_directory() {
    writes_at_the_root(git_commands(), false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn git_in_a_worktree() {
    writes_at_the_root(git_commands(), true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn npm_install_and_test_in_the_working_directory() {
    writes_at_the_root(npm(), false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn npm_install_and_test_in_a_worktree() {
    writes_at_the_root(npm(), true).await;
}

/// A build in a step that may not write fails, and says why in the sandbox's words rather than
/// leaving the user with cargo's `Permission denied`.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_steps_build_fails_with_a_sandbox_message() {
    let fake = Fake::anthropic(vec![]).await;
    let mut test = Test::new();
    for (path, content) in CARGO {
        test = test.file(path, content);
    }
    test = test.file(
        "w.toml",
        "name = \"ro\"\n[steps.build]\nrun = \"cargo test --offline\"\n",
    );
    init_repo(test.path());
    let (out, test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json", "--no-progress"])
        .run_async()
        .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    let error = run["steps"]["build"]["error"].as_str().unwrap();
    assert!(error.contains("exited 101"), "{error}");
    assert!(
        error.contains("this step's sandbox is read-only") && error.contains("`writes = true`"),
        "{error}"
    );
    assert!(
        out.stderr.contains("sandbox is read-only"),
        "{}",
        out.stderr
    );
    assert!(!test.path().join("Cargo.lock").exists());
    assert!(!test.path().join("target").exists());
}
