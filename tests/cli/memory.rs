//! Project memory (docs/src/agents.md "Project memory"): the project's `CLAUDE.md` (or `AGENTS.md` where
//! there is none) reaches every agent's system prompt, as Claude Code and Codex give it, read
//! through the confined opener with secrets hidden; `omitClaudeMd` and `project_memory = false`
//! leave it out, and `plan` says which file each step gets.

use serde_json::Value;

use crate::fake::{Fake, anthropic_text, anthropic_tool};
use crate::support::Test;

const KEY: &str = "sk-ant-memory-test-5e1f";
const MEMORY: &str = "# Rules\nRun `make check` before you answer. Never touch vendor/.\n";

fn workflow() -> String {
    "name = \"m\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.plain]\nagent = \"explore\"\nprompt = \"MARK-plain\"\n[steps.off]\nagent = \"explore\"\nproject_memory = false\nprompt = \"MARK-off\"\n[steps.quiet]\nagent = \"quiet\"\nprompt = \"MARK-quiet\"\n[steps.boss]\nagent = \"code\"\nprompt = \"MARK-boss\"\n[steps.cmd]\nrun = \"true\"\n".to_owned()
}

fn project(memory_file: &str, memory: &str) -> Test {
    Test::new()
        .file("w.toml", &workflow())
        .file(memory_file, memory)
        .file(
            "agents/quiet.md",
            "---\nname: quiet\ndescription: Reads without the project's rules\ntools: Read\nomitClaudeMd: true\n---\nYou read quietly.\n",
        )
}

fn system_of(body: &Value) -> String {
    body["system"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_md_reaches_agents_and_subagents_unless_left_out() {
    let fake = Fake::anthropic_routed(vec![
        ("MARK-plain", vec![anthropic_text("ok")]),
        ("MARK-off", vec![anthropic_text("ok")]),
        ("MARK-quiet", vec![anthropic_text("ok")]),
        (
            "MARK-boss",
            vec![
                anthropic_tool(
                    "t1",
                    "task",
                    serde_json::json!({"description": "look", "prompt": "MARK-sub look", "subagent_type": "explore"}),
                ),
                anthropic_text("done"),
            ],
        ),
        ("MARK-sub", vec![anthropic_text("looked")]),
    ])
    .await;
    // A key in the memory file is hidden like everywhere else.
    let memory = format!("{MEMORY}token: {KEY}\n");
    let (out, _test) = project("CLAUDE.md", &memory)
        .anthropic_api(&fake.uri(), KEY)
        .args(&[
            "run",
            "w.toml",
            "--agents-dir",
            "agents",
            "--format",
            "json",
        ])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    let system = |marker: &str| {
        bodies
            .iter()
            .find(|b| crate::fake::prompt_of(b).contains(marker))
            .map(system_of)
            .unwrap_or_else(|| panic!("no request for {marker}"))
    };
    let plain = system("MARK-plain");
    assert!(
        plain.contains("# Project memory (CLAUDE.md)") && plain.contains("Never touch vendor/."),
        "{plain}"
    );
    assert!(
        !plain.contains(KEY) && plain.contains("[hidden]"),
        "{plain}"
    );
    assert!(system("MARK-boss").contains("Never touch vendor/."));
    assert!(system("MARK-sub").contains("Never touch vendor/."));
    assert!(!system("MARK-off").contains("Project memory"));
    assert!(!system("MARK-quiet").contains("Project memory"));

    // `plan` says which file each step gets.
    let out = project("CLAUDE.md", MEMORY)
        .args(&[
            "plan",
            "w.toml",
            "--agents-dir",
            "agents",
            "--format",
            "json",
        ])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let plan: Value = serde_json::from_str(&out.stdout).unwrap();
    let memory: Vec<(String, Value)> = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["project_memory"].clone(),
            )
        })
        .collect();
    let want = |id: &str, v: Value| (id.to_owned(), v);
    assert_eq!(
        memory,
        [
            want("boss", "CLAUDE.md".into()),
            want("cmd", Value::Null),
            want("off", Value::Null),
            want("plain", "CLAUDE.md".into()),
            want("quiet", Value::Null),
        ]
    );
    let out = project("CLAUDE.md", MEMORY)
        .args(&["plan", "w.toml", "--agents-dir", "agents"])
        .run();
    assert!(
        out.stdout
            .contains("    memory   CLAUDE.md (project memory)\n"),
        "{}",
        out.stdout
    );
}

/// Where there is no CLAUDE.md, AGENTS.md is read; a link to a file outside is not.
#[tokio::test(flavor = "multi_thread")]
async fn agents_md_stands_in_and_a_link_out_is_never_followed() {
    let fake = Fake::anthropic_routed(vec![("MARK-plain", vec![anthropic_text("ok")])]).await;
    let test = Test::new()
        .file(
            "w.toml",
            "name = \"m\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.plain]\nagent = \"explore\"\nprompt = \"MARK-plain\"\n",
        )
        .file("AGENTS.md", MEMORY);
    let (out, test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let system = system_of(&fake.body_for("MARK-plain").await);
    assert!(system.contains("# Project memory (AGENTS.md)"), "{system}");

    let fake = Fake::anthropic_routed(vec![("MARK-plain", vec![anthropic_text("ok")])]).await;
    std::fs::remove_file(test.path().join("AGENTS.md")).unwrap();
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "outside secret line\n").unwrap();
    std::os::unix::fs::symlink(secret.path(), test.path().join("CLAUDE.md")).unwrap();
    let (out, _test) = test.anthropic_api(&fake.uri(), KEY).run_async().await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let system = system_of(&fake.body_for("MARK-plain").await);
    assert!(!system.contains("outside secret line"), "{system}");
    assert!(!system.contains("Project memory"), "{system}");
}
