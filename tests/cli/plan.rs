//! `plan`, `run --dry-run` and `graph` on the shipped example workflows, snapshotted.

use crate::support::{REPO, Test};

fn example_workflows() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(format!("{REPO}/workflows"))
        .expect("workflows dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml") || n.ends_with(".yaml") || n.ends_with(".yml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_workflow_plans_in_text_and_json() {
    let files = example_workflows();
    assert!(
        files.len() >= 3,
        "expected at least three example workflows, found {files:?}"
    );
    for name in files {
        let path = format!("workflows/{name}");
        // Required inputs of the examples.
        let inputs: &[&str] = match name.as_str() {
            "flaky-test-triage.toml" => &["-i", "test=tests/test_checkout.py::test_total"],
            _ => &[],
        };
        let text = Test::in_repo().args(&["plan", &path]).args(inputs).run();
        assert_eq!(text.status, 0, "{path}: {}", text.stderr);
        assert_eq!(text.stderr, "", "{path} printed warnings");
        // What the kernel can enforce is this machine's, not the plan's: the render tests in
        // src/plan cover both answers.
        let machine = [
            (
                r#""bash_confined": (true|false)"#,
                r#""bash_confined": [machine]"#,
            ),
            (r" \(this kernel has no Landlock[^)]*\)", ""),
        ];
        let _settings = {
            let mut settings = insta::Settings::clone_current();
            for (from, to) in machine {
                settings.add_filter(from, to);
            }
            settings.bind_to_scope()
        };
        insta::assert_snapshot!(format!("plan_text_{name}"), text.stdout);

        let json = Test::in_repo()
            .args(&["plan", &path, "--format", "json"])
            .args(inputs)
            .run();
        assert_eq!(json.status, 0, "{path}: {}", json.stderr);
        let value: serde_json::Value =
            serde_json::from_str(&json.stdout).expect("plan JSON parses");
        check_json_shape(&value);
        insta::assert_snapshot!(format!("plan_json_{name}"), json.stdout);
    }
}

/// docs/src/reference/commands.md: the exact keys, sorted waves and tools, placeholders for results.
fn check_json_shape(plan: &serde_json::Value) {
    let mut keys: Vec<&str> = plan
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "budget",
            "critical_path",
            "forecast",
            "max_subagents",
            "name",
            "steps",
            "waves"
        ]
    );
    for wave in plan["waves"].as_array().unwrap() {
        assert_sorted_strings(wave);
    }
    for step in plan["steps"].as_array().unwrap() {
        let mut keys: Vec<&str> = step
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "agent",
                "agent_origin",
                "agent_source",
                "agent_trusted",
                "bash_confined",
                "check_retries",
                "checks",
                "compact_at",
                "condition",
                "context_window",
                "effort",
                "for_each",
                "forecast",
                "id",
                "isolation",
                "keep_tool_results",
                "max_subagent_depth",
                "max_tokens_total",
                "max_turns",
                "memory",
                "model",
                "needs",
                "network",
                "permission_mode",
                "price",
                "price_source",
                "project_memory",
                "prompt",
                "read_paths",
                "run",
                "sandbox",
                "subagents",
                "timeout_secs",
                "tools"
            ]
        );
        if step["run"].is_null() {
            let model = step["model"].as_str().unwrap();
            assert!(model.contains('/'), "model `{model}` is provider/model");
        } else {
            assert!(step["model"].is_null(), "a command step has no model");
        }
        assert_sorted_strings(&step["tools"]);
        assert!(
            !step["prompt"].as_str().unwrap().contains("{{"),
            "prompt is rendered"
        );
    }
}

fn assert_sorted_strings(list: &serde_json::Value) {
    let items: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let mut sorted = items.clone();
    sorted.sort();
    assert_eq!(items, sorted);
}

#[test]
fn jwt_migration_plan_matches_the_spec() {
    let out = Test::in_repo()
        .args(&["plan", "workflows/jwt-migration.toml", "--format", "json"])
        .run();
    assert_eq!(out.status, 0, "{}", out.stderr);
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(plan["name"], "jwt-migration");
    assert_eq!(
        plan["waves"],
        serde_json::json!([
            ["baseline", "find_auth", "find_sessions"],
            ["plan"],
            ["implement"],
            ["review"]
        ])
    );
    let step = |id: &str| {
        plan["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(step("find_auth")["model"], "anthropic/claude-haiku-4-5");
    assert_eq!(step("plan")["model"], "anthropic/claude-opus-4-1");
    assert_eq!(step("implement")["model"], "anthropic/claude-sonnet-4-5");
    assert_eq!(
        step("find_auth")["tools"],
        serde_json::json!(["bash", "glob", "grep", "list_dir", "read_file"])
    );
    assert_eq!(step("implement")["isolation"], "worktree");
    // Bash's sandbox follows from the tools: explore cannot write, implement can (its worktree).
    assert_eq!(step("find_auth")["sandbox"], "read-only");
    assert_eq!(step("implement")["sandbox"], "workdir");
    assert_eq!(step("implement")["network"], false);
    assert_eq!(step("implement")["timeout_secs"], 1800);
    assert_eq!(step("find_auth")["timeout_secs"], 900);
    assert!(
        step("find_auth")["prompt"]
            .as_str()
            .unwrap()
            .contains("under src")
    );
    assert!(
        step("plan")["prompt"]
            .as_str()
            .unwrap()
            .contains("<steps.find_auth.summary>")
    );
    // The user agent from agents/ replaces nothing and brings its own tool list and turn limit.
    assert_eq!(step("review")["agent"], "security-reviewer");
    assert_eq!(
        step("review")["tools"],
        serde_json::json!(["glob", "grep", "read_file"])
    );
    assert_eq!(step("review")["max_turns"], 20);
    // The suite runs read-only before the change, and checks the implementation in its tree.
    assert_eq!(
        step("baseline")["run"],
        "sh -c \"$TEST_COMMAND\" > \"$TMPDIR/tests.log\" 2>&1; status=$?; tail -n 40 \"$TMPDIR/tests.log\"; exit $status"
    );
    assert_eq!(step("baseline")["model"], serde_json::Value::Null);
    assert_eq!(step("baseline")["sandbox"], "read-only");
    assert_eq!(
        step("implement")["checks"],
        serde_json::json!([{"command": "sh -c \"$TEST_COMMAND\"", "timeout_secs": 600}])
    );
}

#[test]
fn dry_run_prints_the_same_plan() {
    for format in ["text", "json"] {
        let plan = Test::in_repo()
            .args(&["plan", "workflows/jwt-migration.toml", "--format", format])
            .run();
        let dry = Test::in_repo()
            .args(&[
                "run",
                "workflows/jwt-migration.toml",
                "--dry-run",
                "--format",
                format,
            ])
            .run();
        assert_eq!(plan.status, 0);
        assert_eq!(dry.status, 0, "{}", dry.stderr);
        assert_eq!(plan.stdout, dry.stdout);
    }
}

#[test]
fn inputs_models_and_parallelism_come_from_flags() {
    let test = Test::in_repo();
    let value_file = test.path().join("target.txt");
    std::fs::write(&value_file, "lib/auth").unwrap();
    let out = test
        .args(&[
            "plan",
            "workflows/jwt-migration.toml",
            "--format",
            "json",
            "-i",
            &format!("target=@{}", value_file.display()),
            "--model",
            "small=openai/gpt-4.1-mini",
        ])
        .run();
    assert_eq!(out.status, 0, "{}", out.stderr);
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let find = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "find_auth")
        .unwrap();
    assert_eq!(find["model"], "openai/gpt-4.1-mini");
    assert!(find["prompt"].as_str().unwrap().contains("under lib/auth"));

    let text = Test::in_repo()
        .args(&[
            "plan",
            "workflows/jwt-migration.toml",
            "--max-parallel",
            "2",
            "-i",
            "target=app",
        ])
        .run();
    assert!(text.stdout.contains("at most 2 at once"), "{}", text.stdout);
    assert!(text.stdout.contains("under app"));
}

#[test]
fn graph_prints_mermaid_and_dot() {
    let mermaid = Test::in_repo()
        .args(&["graph", "workflows/jwt-migration.toml"])
        .run();
    assert_eq!(mermaid.status, 0, "{}", mermaid.stderr);
    insta::assert_snapshot!("graph_mermaid", mermaid.stdout);
    let dot = Test::in_repo()
        .args(&["graph", "workflows/jwt-migration.toml", "--format", "dot"])
        .run();
    assert_eq!(dot.status, 0);
    insta::assert_snapshot!("graph_dot", dot.stdout);
    assert!(dot.stdout.contains("\"plan\" -> \"implement\";"));
}

#[test]
fn templates_keep_placeholders_nested_and_inputs_literal() {
    let out = Test::new()
        .file(
            "w.toml",
            r#"
name = "t"
[models]
default = "anthropic/claude-sonnet-4-5"
[inputs.note]
[steps.scan]
agent = "explore"
prompt = "scan"
output_schema = { type = "object", properties = { files = { type = "array" } } }
[steps.use]
agent = "plan"
needs = ["scan"]
if = "steps.scan.status == 'succeeded'"
prompt = "{{ inputs.note }} {{ steps.scan.output.files }} {% for f in steps.scan.output.files %}x{% endfor %}"
"#,
        )
        .args(&["plan", "w.toml", "--format", "json", "-i", "note={{ not rendered }}"])
        .run();
    assert_eq!(out.status, 0, "{}", out.stderr);
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let step = &plan["steps"][1];
    assert_eq!(
        step["prompt"],
        "{{ not rendered }} <steps.scan.output.files> "
    );
    assert_eq!(step["condition"], "steps.scan.status == 'succeeded'");
}
