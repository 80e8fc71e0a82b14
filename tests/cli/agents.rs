//! User agents: Claude Code Markdown format, TOML/YAML agent files, lookup order, `runner agents`.

use crate::support::Test;

const MODELS: &str =
    "[models]\ndefault = \"anthropic/claude-sonnet-4-5\"\nsmall = \"anthropic/claude-haiku-4-5\"\n";

fn workflow(agent: &str) -> String {
    format!("name = \"w\"\n{MODELS}\n[steps.a]\nagent = \"{agent}\"\nprompt = \"go\"\n")
}

fn plan_json(test: Test, args: &[&str]) -> serde_json::Value {
    let out = test.args(args).run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    serde_json::from_str(&out.stdout).expect("json")
}

#[test]
fn claude_code_agent_with_aliases_loads_from_agents_beside_the_workflow_folder() {
    let test = Test::new()
        .file("workflows/w.toml", &workflow("reviewer"))
        .file(
            "agents/reviewer.md",
            "---\nname: reviewer\ndescription: Reviews\ntools: Read, Grep, Glob, Bash\ndisallowedTools: Bash\nmodel: small\nmaxTurns: 7\ncolor: blue\n---\nYou review code.\n",
        );
    let plan = plan_json(test, &["plan", "workflows/w.toml", "--format", "json"]);
    let step = &plan["steps"][0];
    assert_eq!(step["agent"], "reviewer");
    assert_eq!(
        step["tools"],
        serde_json::json!(["glob", "grep", "read_file"])
    );
    assert_eq!(step["model"], "anthropic/claude-haiku-4-5");
    assert_eq!(step["max_turns"], 7);
}

#[test]
fn lookup_order_agents_dir_then_beside_then_claude_then_builtin() {
    let md = |tools: &str| format!("---\nname: explore\ntools: {tools}\n---\nCustom explorer.\n");
    let base = || {
        Test::new()
            .file("workflows/w.toml", &workflow("explore"))
            .file("extra/explore.md", &md("Read"))
            .file("agents/explore.md", &md("Grep"))
            .file(".claude/agents/explore.md", &md("Glob"))
    };
    let tools = |test: Test, args: &[&str]| plan_json(test, args)["steps"][0]["tools"].clone();
    let plan = ["plan", "workflows/w.toml", "--format", "json"];
    let with_dir = [
        "plan",
        "workflows/w.toml",
        "--format",
        "json",
        "--agents-dir",
        "extra",
    ];
    assert_eq!(tools(base(), &with_dir), serde_json::json!(["read_file"]));
    assert_eq!(tools(base(), &plan), serde_json::json!(["grep"]));

    let only_claude = Test::new()
        .file("workflows/w.toml", &workflow("explore"))
        .file(".claude/agents/explore.md", &md("Glob"));
    assert_eq!(tools(only_claude, &plan), serde_json::json!(["glob"]));

    let builtin = Test::new().file("workflows/w.toml", &workflow("explore"));
    assert_eq!(
        tools(builtin, &plan),
        serde_json::json!(["bash", "glob", "grep", "list_dir", "read_file"])
    );
}

#[test]
fn toml_and_yaml_agent_files_need_a_system_prompt() {
    let test = Test::new()
        .file("workflows/w.toml", &workflow("fixer"))
        .file(
            "agents/fixer.toml",
            "name = \"fixer\"\ntools = [\"read_file\", \"edit_file\"]\nmax_turns = 3\nsystem_prompt = \"Fix it.\"\n",
        );
    let plan = plan_json(test, &["plan", "workflows/w.toml", "--format", "json"]);
    assert_eq!(
        plan["steps"][0]["tools"],
        serde_json::json!(["edit_file", "read_file"])
    );
    assert_eq!(plan["steps"][0]["max_turns"], 3);

    let out = Test::new()
        .file("workflows/w.toml", &workflow("fixer"))
        .file("agents/fixer.yaml", "name: fixer\ntools: [Read]\n")
        .args(&["plan", "workflows/w.toml"])
        .run();
    assert_eq!(out.status, 2);
    assert!(out.stderr.contains("agent `fixer` (from"), "{}", out.stderr);
    assert!(
        out.stderr.contains("missing required key `system_prompt`"),
        "{}",
        out.stderr
    );
}

#[test]
fn broken_agent_files_are_reported_with_position() {
    let test = Test::new().file("workflows/w.toml", &workflow("bad")).file(
        "agents/bad.md",
        "---\nname: bad\ntools: Read, Grpe\nmaxTurn: 3\n---\nPrompt.\n",
    );
    let out = test.args(&["plan", "workflows/w.toml"]).run();
    assert_eq!(out.status, 2);
    insta::assert_snapshot!("broken_agent", out.stderr);
    assert!(out.stderr.contains("unknown key `maxTurn`"));
    assert!(out.stderr.contains("did you mean `maxTurns`?"));
    assert!(out.stderr.contains("agents/bad.md:4:1"), "{}", out.stderr);

    let out = Test::new()
        .file(
            "agents/bad.md",
            "---\nname: bad\ntools: Read, Grpe\n---\nPrompt.\n",
        )
        .args(&["agents", "--workflow", "workflows/w.toml"])
        .run();
    assert_eq!(out.status, 2);
    assert!(out.stderr.contains("unknown tool `Grpe`"), "{}", out.stderr);
    assert!(out.stderr.contains("did you mean `Grep`?"));
}

#[test]
fn claude_only_tools_are_left_out_with_a_warning() {
    let test = Test::new().file("workflows/w.toml", &workflow("web")).file(
        "agents/web.md",
        "---\nname: web\ntools: Read, WebFetch, Bash(git diff:*)\n---\nPrompt.\n",
    );
    let out = test
        .args(&["plan", "workflows/w.toml", "--format", "json"])
        .run();
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("tool `WebFetch` is not provided by runner; left out")
    );
    // Bash exists: the rule narrowing it is what runner cannot enforce.
    insta::assert_snapshot!("permission_rule_warning", out.stderr);
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(plan["steps"][0]["tools"], serde_json::json!(["read_file"]));
}

#[test]
fn agents_lists_every_agent_with_its_source() {
    let test = Test::new().file("home/.keep", "");
    // Its own `HOME`: the machine's `~/.claude/agents/` would be listed too.
    let home = test.path().join("home");
    let out = test
        .env("HOME", home.to_str().unwrap())
        .file("workflows/w.toml", &workflow("explore"))
        .file(
            "agents/reviewer.md",
            "---\nname: reviewer\ntools: Read\nmodel: small\n---\nReview.\n",
        )
        .file(
            ".claude/agents/plan.md",
            "---\nname: plan\n---\nMy planner.\n",
        )
        .args(&["agents", "--workflow", "workflows/w.toml"])
        .run();
    assert_eq!(out.status, 0, "{}", out.stderr);
    insta::assert_snapshot!("agents_list", out.stdout);
    assert!(out.stdout.contains("explore   built-in"));
    assert!(out.stdout.contains("reviewer  agents/reviewer.md"));
    assert!(
        out.stdout
            .contains("plan      .claude/agents/plan.md (untrusted)")
    );
    assert!(out.stderr.contains("agent `plan` from built-in is hidden"));
}
