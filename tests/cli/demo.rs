//! The README's first command (`sh demo/run.sh`): the flagship workflow for real on a throwaway
//! checkout of `demo/repo`, the model's side from the shipped cassettes. This runs the same
//! steps with the built binary: if runner's requests drift from what the cassettes hold, or the
//! demo stops passing its own checks, this fails.

use std::process::Command;

use serde_json::Value;

use crate::support::{REPO, git};

#[test]
fn the_first_command_runs_the_example_for_real_from_the_shipped_cassettes() {
    let demo = tempfile::tempdir().unwrap();
    let copied = Command::new("cp")
        .arg("-R")
        .arg(format!("{REPO}/demo/repo/."))
        .arg(demo.path())
        .status()
        .unwrap();
    assert!(copied.success());
    crate::support::init_repo(demo.path());
    let out = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["run", "workflows/jwt-migration.toml", "--workdir"])
        .arg(demo.path())
        .args(["--replay", "demo/cassettes", "--format", "json"])
        .current_dir(REPO)
        .env_remove("ANTHROPIC_API_KEY")
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The shipped cassettes match today's requests: a newcomer's first run warns of no drift
    // (record them again with demo/script.py when a request changes).
    assert!(!stderr.contains("drifted"), "{stderr}");
    for step in [
        "baseline",
        "find_auth",
        "find_sessions",
        "plan",
        "implement",
        "review",
    ] {
        assert_eq!(
            run["steps"][step]["status"], "succeeded",
            "{step}: {stderr}"
        );
    }
    // The project's tests ran for real: they failed once in the worktree, the failure went back
    // to the agent, and its fix passed them.
    let checks: Vec<(u64, bool)> = run["steps"]["implement"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["round"].as_u64().unwrap(), c["passed"].as_bool().unwrap()))
        .collect();
    assert_eq!(checks, [(1, false), (2, true)]);
    let branch = run["steps"]["implement"]["branch"].as_str().unwrap();
    let module = git(
        demo.path(),
        &["show", &format!("{branch}:src/jwt_tokens.py")],
    );
    assert!(module.contains("if claims[\"exp\"] <"), "{module}");
    assert!(
        run["steps"]["review"]["summary"]
            .as_str()
            .unwrap()
            .starts_with("No blocking findings.")
    );
    // The checkout itself is as it was: the change is on the branch.
    assert_eq!(git(demo.path(), &["status", "--porcelain"]), "");
    readme_step_5_after_the_demo(demo.path());
}

/// README step 5's commands for the demo's runs, as written there (with this test's checkout in
/// place of `target/demo`), from the repository: each finds the demo's run.
fn readme_step_5_after_the_demo(demo: &std::path::Path) {
    let readme = std::fs::read_to_string(format!("{REPO}/README.md")).unwrap();
    let block = readme
        .split("```")
        .find(|b| b.contains("runner runs --workdir target/demo"))
        .expect("README step 5 gives the demo's commands");
    let report = demo.join("report.html");
    let commands: Vec<&str> = block.lines().filter(|l| l.starts_with("runner ")).collect();
    assert_eq!(commands.len(), 3, "{block}");
    for line in commands {
        let line = line
            .replace("target/demo", demo.to_str().unwrap())
            .replace("report.html", report.to_str().unwrap());
        let args: Vec<&str> = line.split_whitespace().skip(1).collect();
        let out = Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(&args)
            .current_dir(REPO)
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{line}: {stdout}{stderr}");
        assert!(!stdout.contains("no runs"), "{line}: {stdout}");
        match args[0] {
            "runs" => assert!(stdout.contains("jwt-migration"), "{line}: {stdout}"),
            "show" => assert!(stdout.contains("implement"), "{line}: {stdout}"),
            _ => assert!(report.is_file(), "{line}: {stdout}{stderr}"),
        }
    }
}
