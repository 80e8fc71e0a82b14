//! Nothing a user made is thrown away (docs/src/runs.md "Worktrees"): a worktree step that fails keeps its
//! worktree (its changes committed on its branch) and Ctrl-C commits them there as work in progress, each said
//! with its path and branch; `--resume` leaves such a worktree alone; `runner clean` lists and
//! removes what finished runs left, and what holds work only with `--force`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake::{Fake, anthropic_text, anthropic_tool};
use crate::support::{Output, Test, git, init_repo};

const KEY: &str = "sk-ant-clean-test-0a1b";
const HEAD: &str = "name = \"t\"\n[models]\ndefault = \"anthropic/claude-test\"\n";

fn clean(test: Test, args: &[&str]) -> (Output, Test) {
    let mut all = vec!["clean"];
    all.extend_from_slice(args);
    let test = test.clear_args().args(&all);
    let out = test.run_keeping();
    (out, test)
}

fn branches(test: &Test) -> String {
    git(
        test.path(),
        &[
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/runner/",
        ],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_worktree_step_keeps_its_worktree_and_clean_removes_it_in_steps() {
    let fake = Fake::anthropic(vec![
        anthropic_tool(
            "t1",
            "write_file",
            json!({"path": "made.txt", "content": "work\n"}),
        ),
        anthropic_text("done"),
    ])
    .await;
    let workflow = format!(
        "{HEAD}[steps.s]\nagent = \"code\"\nisolation = \"worktree\"\nprompt = \"Make it\"\nchecks = [\"false\"]\ncheck_retries = 0\n"
    );
    let test = Test::new()
        .file("w.toml", &workflow)
        .file(".gitignore", ".runner/\n");
    init_repo(test.path());
    let (out, test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    let step = &run["steps"]["s"];
    let (tree, branch) = (
        step["worktree"].as_str().unwrap(),
        step["branch"].as_str().unwrap(),
    );
    assert!(
        std::path::Path::new(tree).join("made.txt").is_file(),
        "{tree}"
    );
    assert_eq!(
        git(test.path(), &["show", &format!("{branch}:made.txt")]),
        "work\n"
    );
    assert!(
        out.stderr.contains(&format!(
            "kept: s: its worktree at {tree} on branch {branch} (its changes committed there)"
        )),
        "{}",
        out.stderr
    );

    // A dry run removes nothing; the worktree holds nothing uncommitted, the branch a commit.
    let (out, test) = clean(test, &["--dry-run"]);
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stdout
            .contains(&format!("would remove worktree {tree}")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!(
            "kept branch {branch}: it holds 1 commit not pushed anywhere (`--force` removes it)"
        )),
        "{}",
        out.stdout
    );
    assert!(std::path::Path::new(tree).exists());
    let (out, test) = clean(test, &[]);
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(!std::path::Path::new(tree).exists());
    assert_eq!(branches(&test).trim(), branch);
    let (out, test) = clean(test, &["--force"]);
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stdout.contains(&format!("removed branch {branch}")),
        "{}",
        out.stdout
    );
    assert_eq!(branches(&test).trim(), "");
    assert_eq!(git(test.path(), &["worktree", "list"]).lines().count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_keeps_the_work_on_the_branch_and_resume_keeps_it() {
    let fake = Fake::anthropic(vec![
        anthropic_tool(
            "t1",
            "write_file",
            json!({"path": "half.txt", "content": "half\n"}),
        ),
        anthropic_text("never").set_delay(Duration::from_secs(120)),
    ])
    .await;
    let workflow = format!(
        "{HEAD}[steps.s]\nagent = \"code\"\nisolation = \"worktree\"\nprompt = \"Make it\"\n"
    );
    let test = Test::new()
        .file("w.toml", &workflow)
        .file(".gitignore", ".runner/\n");
    init_repo(test.path());
    let dir = test.path().to_owned();
    let uri = fake.uri();
    let (status, stderr) = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(["run", "w.toml", "--format", "jsonl"])
            .current_dir(&dir)
            .env("ANTHROPIC_BASE_URL", &uri)
            .env("ANTHROPIC_API_KEY", KEY)
            .stderr(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut events = BufReader::new(child.stdout.take().unwrap());
        // Readiness: the file is written once its tool call has finished.
        loop {
            let mut line = String::new();
            if events.read_line(&mut line).unwrap() == 0 {
                break;
            }
            if line.contains("\"tool_finished\"") {
                nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGINT,
                )
                .unwrap();
                break;
            }
        }
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut rest).unwrap();
        (child.wait().unwrap(), rest)
    })
    .await
    .unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    let kept = stderr
        .lines()
        .find(|l| l.starts_with("kept: s: its worktree at "))
        .unwrap_or_else(|| panic!("{stderr}"))
        .to_owned();
    assert!(
        kept.contains("(its changes committed there as work in progress: `--resume ")
            && kept.ends_with(
                " --continue` goes on from them); `runner clean` removes it when you are done"
            ),
        "{kept}"
    );
    let (tree, branch) = kept
        .trim_start_matches("kept: s: its worktree at ")
        .split_once(" on branch ")
        .map(|(tree, rest)| {
            (
                tree.to_owned(),
                rest.split(' ').next().unwrap_or_default().to_owned(),
            )
        })
        .unwrap();
    assert!(
        std::path::Path::new(&tree).join("half.txt").is_file(),
        "{tree}"
    );
    assert_eq!(
        git(test.path(), &["show", &format!("{branch}:half.txt")]),
        "half\n"
    );

    // Resuming reruns the step in a worktree of its own; the old tree holds nothing its branch
    // does not, so it goes, and the branch with the work stays.
    let fake = Fake::anthropic(vec![anthropic_text("done")]).await;
    let (out, test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--resume", "latest"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("note: removed the worktree of step `s` (left by run "),
        "{}",
        out.stderr
    );
    assert!(!std::path::Path::new(&tree).exists());
    assert_eq!(
        git(test.path(), &["show", &format!("{branch}:half.txt")]),
        "half\n"
    );
    let (out, test) = clean(test, &[]);
    assert!(
        out.stdout.contains(&format!(
            "kept branch {branch}: it holds 1 commit not pushed anywhere"
        )),
        "{}",
        out.stdout
    );
    let (out, test) = clean(test, &["--force"]);
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(branches(&test).trim(), "");
}
