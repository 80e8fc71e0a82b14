//! What a newcomer trips over (issue: first-hour problems), through the binary, with the
//! message they read snapshotted.

use crate::support::Test;

const MODELS: &str = "models:\n  default: anthropic/m\n";

/// GitHub Actions habits: `needs: lint` as a string is one need.
#[test]
fn needs_may_be_a_single_step_id() {
    let out = Test::new()
        .file(
            "w.yaml",
            &format!("name: w\n{MODELS}steps:\n  lint:\n    agent: explore\n    prompt: x\n  fix:\n    agent: explore\n    needs: lint\n    prompt: y\n"),
        )
        .args(&["plan", "w.yaml", "--format", "json"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(plan["waves"], serde_json::json!([["lint"], ["fix"]]));
}

/// `${{ inputs.dir }}` would render with a literal `$`: a warning points at it.
#[test]
fn github_expression_syntax_in_a_prompt_is_pointed_out() {
    let out = Test::new()
        .file(
            "w.yaml",
            &format!("name: w\ninputs:\n  dir:\n    default: src\n{MODELS}steps:\n  lint:\n    agent: explore\n    prompt: \"look in ${{{{ inputs.dir }}}}\"\n"),
        )
        .args(&["validate", "w.yaml"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    insta::assert_snapshot!("github_expression", out.stderr);
}

/// `timeout: 90` (a number, as `timeout-minutes` is written) says how to write a duration.
#[test]
fn a_numeric_timeout_gets_a_hint() {
    let out = Test::new()
        .file(
            "w.toml",
            "name = \"w\"\n[models]\ndefault = \"anthropic/m\"\n[steps.a]\nagent = \"explore\"\ntimeout = 90\nprompt = \"x\"\n",
        )
        .args(&["validate", "w.toml"])
        .run();
    assert_eq!(out.status, 2);
    insta::assert_snapshot!("numeric_timeout", out.stderr);
}

/// `runner agents` shows what an agent ends up with: no "(minus bash)" after a list that never
/// had bash; `*` still says what it leaves out.
#[test]
fn agents_show_the_tools_that_are_left() {
    let out = Test::new()
        .file(
            ".claude/agents/reader.md",
            "---\nname: reader\ntools: Read, Grep\ndisallowedTools: Bash\n---\nRead.\n",
        )
        .file(
            ".claude/agents/doer.md",
            "---\nname: doer\ndisallowedTools: Bash\n---\nDo.\n",
        )
        .args(&["agents", "--trust-workdir"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let line = |name: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{}", out.stdout))
            .to_owned()
    };
    assert!(
        line("reader").ends_with("grep, read_file"),
        "{}",
        line("reader")
    );
    assert!(line("doer").ends_with("* (minus bash)"), "{}", line("doer"));
}

/// `[steps.a]` twice: one error that names the table and where it first was.
#[test]
fn a_table_defined_twice_is_one_error_naming_it() {
    let out = Test::new()
        .file(
            "w.toml",
            "name = \"w\"\n[models]\ndefault = \"anthropic/m\"\n[steps.a]\nagent = \"explore\"\nprompt = \"x\"\n[steps.a]\nagent = \"plan\"\nprompt = \"y\"\n",
        )
        .args(&["validate", "w.toml"])
        .run();
    assert_eq!(out.status, 2);
    insta::assert_snapshot!("table_defined_twice", out.stderr);
}

/// A step without `prompt` is reported once; steps that need it get no follow-on errors.
#[test]
fn a_step_missing_its_prompt_causes_no_follow_on_errors() {
    let out = Test::new()
        .file(
            "w.toml",
            "name = \"w\"\n[models]\ndefault = \"anthropic/m\"\n[steps.a]\nagent = \"explore\"\n[steps.b]\nagent = \"explore\"\nneeds = [\"a\"]\nprompt = \"{{ steps.a.summary }}\"\n",
        )
        .args(&["validate", "w.toml"])
        .run();
    assert_eq!(out.status, 2);
    insta::assert_snapshot!("missing_prompt", out.stderr);
}

/// A broken agent file is known by the `name` it declares: a step asking for it is pointed at
/// the file and its error, not told the agent does not exist.
#[test]
fn a_broken_agent_file_is_found_by_its_name() {
    let out = Test::new()
        .file(
            "agents/rev.md",
            "---\nname: reviewer\ntools: Read\nmaxTurns: lots\n---\nReview.\n",
        )
        .file(
            "workflows/w.toml",
            "name = \"w\"\n[models]\ndefault = \"anthropic/m\"\n[steps.a]\nagent = \"reviewer\"\nprompt = \"x\"\n",
        )
        .args(&["validate", "workflows/w.toml"])
        .run();
    assert_eq!(out.status, 2);
    insta::assert_snapshot!("broken_agent_by_name", out.stderr);
}

/// A workflow whose step `triage` runs only with `--input mode=full` and outputs JSON with the
/// given properties (and what follows them in the schema), then `rest`.
fn triage_then(properties: &str, rest: &str) -> String {
    format!(
        "name = \"w\"\n[models]\ndefault = \"anthropic/m\"\n[inputs.mode]\ndefault = \"quick\"\n\n[steps.triage]\nagent = \"explore\"\nif = \"inputs.mode == 'full'\"\nprompt = \"Triage.\"\noutput_schema = {{ type = \"object\", properties = {properties} }}\n{rest}"
    )
}

/// Template mistakes are found by `validate`, all at once and together with other errors: a
/// field of a summary, a property the output schema does not declare, an output read unguarded
/// by a step that runs after it was skipped, and an unknown filter.
#[test]
fn template_mistakes_are_found_before_anything_runs() {
    let out = Test::new()
        .file(
            "w.toml",
            &triage_then(
                "{ severity = { type = \"string\" } }",
                r#"
[steps.a]
agent = "explore"
prompt = "Look."

[steps.b]
agent = "plan"
needs = ["a", "triage"]
if = "steps.triage.status != 'succeeded'"
prompt = """
{{ steps.a.summary.foo }}
{{ steps.triage.output.severty }}
{{ steps.triage.output.severity }}
{{ steps.a.summary | shout }}
"""

[steps.c]
agent = "reviewer"
prompt = "x"
"#,
            ),
        )
        .args(&["validate", "w.toml"])
        .run();
    assert_eq!(out.status, 2);
    insta::assert_snapshot!("typed_templates", out.stderr);
}

/// At run time a skipped step's output is undefined: each guard validation accepts renders, with
/// the skipped step and with the step that succeeded.
#[tokio::test(flavor = "multi_thread")]
async fn guarded_reads_render_whether_the_step_ran_or_not() {
    use crate::fake::{Fake, anthropic_text, prompt_of};
    let workflow = triage_then(
        "{ severity = { type = \"string\" }, files = { type = \"array\", items = { type = \"object\", properties = { path = { type = \"string\" } } } } }, required = [\"severity\", \"files\"]",
        r#"
[steps.report]
agent = "explore"
needs = ["triage"]
if = "inputs.mode != 'none'"
prompt = """
Report.
severity={{ steps.triage.output.severity | default("unknown") }}
{% if steps.triage.output is defined %}ran{% else %}skipped{% endif %}
or={{ steps.triage.output.severity or "n/a" }}
files={% for f in steps.triage.output.files %}{{ f.path }} {% endfor %}
status={{ steps.triage.status }}"""
"#,
    );
    for (mode, expected) in [
        (
            "quick",
            "severity=unknown\nskipped\nor=n/a\nfiles=\nstatus=skipped",
        ),
        (
            "full",
            "severity=high\nran\nor=high\nfiles=a.rs b.rs \nstatus=succeeded",
        ),
    ] {
        let fake = Fake::anthropic_routed(vec![
            (
                "Triage.",
                vec![anthropic_text(
                    r#"{"severity": "high", "files": [{"path": "a.rs"}, {"path": "b.rs"}]}"#,
                )],
            ),
            ("Report.", vec![anthropic_text("done")]),
        ])
        .await;
        let (out, _test) = Test::new()
            .file("w.toml", &workflow)
            .anthropic_api(&fake.uri(), "sk-test")
            .args(&[
                "run",
                "w.toml",
                "--no-progress",
                "--input",
                &format!("mode={mode}"),
            ])
            .run_async()
            .await;
        assert_eq!(out.status, 0, "{mode}: {}", out.transcript());
        let prompt = prompt_of(&fake.body_for("Report.").await);
        assert!(prompt.ends_with(expected), "{mode}: {prompt:?}");
    }
}

/// An Anthropic workflow whose model requests go to `base_url` (a `[providers]` entry).
fn anthropic_at(base_url: &str, step_extra: &str) -> String {
    format!(
        "name = \"w\"\n[providers.claude]\nkind = \"anthropic\"\nbase_url = \"{base_url}\"\napi_key_env = \"CLAUDE_KEY\"\n[models]\ndefault = \"claude/m\"\n[steps.s]\nagent = \"explore\"\nprompt = \"Look.\"\n{step_extra}"
    )
}

/// Runs `w.toml` as CI would (`--no-progress`) with the key set.
async fn run_plain(workflow: &str, args: &[&str]) -> crate::support::Output {
    let mut all = vec!["run", "w.toml", "--no-progress"];
    all.extend_from_slice(args);
    Test::new()
        .file("w.toml", workflow)
        .env("CLAUDE_KEY", "sk-test")
        .args(&all)
        .run_async()
        .await
        .0
}

/// The lines a user reads about a failed step, with the fake's port made stable.
fn failure_lines(out: &crate::support::Output, uri: &str) -> String {
    out.stderr
        .lines()
        .filter(|l| l.starts_with("failed:"))
        .map(|l| l.replace(uri, "http://127.0.0.1:PORT"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Item 1: with `--no-progress` (every CI log) a failed step's reason is printed, not only
/// `failed`.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_steps_reason_is_printed_without_progress() {
    use crate::fake::Fake;
    let fake = Fake::anthropic(vec![wiremock::ResponseTemplate::new(401).set_body_json(
        serde_json::json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
    )])
    .await;
    let out = run_plain(&anthropic_at(&fake.uri(), ""), &[]).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    insta::assert_snapshot!("failure_reason", failure_lines(&out, &fake.uri()));
}

/// Item 3: an endpoint nobody listens on is named, with the attempts made; a `base_url` ending
/// in `/v1` (copied from the OpenAI example) works for the Anthropic kind too; a `base_url` that
/// already holds the whole endpoint gets a 404 naming the URL runner called.
#[tokio::test(flavor = "multi_thread")]
async fn endpoint_errors_name_the_url_and_attempts() {
    use crate::fake::{Fake, anthropic_text};
    // A port that was just free: bound, then released.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port())
    };
    let out = run_plain(&anthropic_at(&closed, "retries = 0\n"), &[]).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    insta::assert_snapshot!("connection_refused", failure_lines(&out, &closed));

    let fake = Fake::anthropic(vec![anthropic_text("done")]).await;
    let out = run_plain(&anthropic_at(&format!("{}/v1", fake.uri()), ""), &[]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(fake.requests().await[0].url.path(), "/v1/messages");

    let fake = Fake::anthropic(vec![anthropic_text("done")]).await;
    let pasted = format!("{}/v1/messages", fake.uri());
    let out = run_plain(&anthropic_at(&pasted, "retries = 0\n"), &[]).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    insta::assert_snapshot!("endpoint_pasted_whole", failure_lines(&out, &fake.uri()));
}

/// Item 4: `retries` counts retries, as GitHub Actions and the SDKs do: `retries = 1` is two
/// attempts, and the failure says so.
#[tokio::test(flavor = "multi_thread")]
async fn retries_count_retries_not_attempts() {
    use crate::fake::Fake;
    let overloaded = || {
        wiremock::ResponseTemplate::new(529)
            .insert_header("retry-after-ms", "10")
            .set_body_json(serde_json::json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))
    };
    let fake = Fake::anthropic(vec![overloaded(), overloaded(), overloaded()]).await;
    let out = run_plain(&anthropic_at(&fake.uri(), "retries = 1\n"), &[]).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    assert_eq!(fake.requests().await.len(), 2);
    insta::assert_snapshot!("retries_one", failure_lines(&out, &fake.uri()));
}

/// Item 5: run ids are UTC start times to the millisecond (whatever the local time zone), so
/// `--resume latest` takes the run that started last even when two start in the same second.
#[tokio::test(flavor = "multi_thread")]
async fn resume_latest_takes_the_run_that_started_last() {
    use crate::fake::{Fake, anthropic_text};
    let fake = Fake::anthropic_fn(|_| anthropic_text("done")).await;
    let workflow = format!(
        "{}[inputs.n]\ndescription = \"which\"\n",
        anthropic_at(&fake.uri(), "")
            .replace("prompt = \"Look.\"", "prompt = \"Look {{ inputs.n }}.\"")
    );
    let mut test = Test::new()
        .file("w.toml", &workflow)
        .env("CLAUDE_KEY", "sk-test")
        // Far from UTC: a run id in local time would be hours off.
        .env("TZ", "Pacific/Kiritimati");
    // Two runs back to back (usually within one second), then a resume of the latest.
    let mut ids = Vec::new();
    for n in ["n=1", "n=2"] {
        let (out, back) = test
            .args(&["run", "w.toml", "--format", "json", "--input", n])
            .run_async()
            .await;
        test = back.clear_args();
        assert_eq!(out.status, 0, "{}", out.transcript());
        let record: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        ids.push(record["run_id"].as_str().unwrap().to_owned());
    }
    assert!(ids[0] < ids[1], "{ids:?}");
    // UTC to the hour (a minute back, too, in case the hour turned during the test).
    let now = jiff::Timestamp::now();
    let hours: Vec<String> = [now, now - jiff::SignedDuration::from_secs(60)]
        .iter()
        .map(|t| t.strftime("%Y%m%dT%H").to_string())
        .collect();
    assert!(
        hours.contains(&ids[1][..11].to_owned()),
        "run id {} is not UTC ({hours:?})",
        ids[1]
    );

    let before = fake.requests().await.len();
    let (out, _) = test
        .args(&["run", "w.toml", "--input", "n=2", "--resume", "latest"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    // The step is reused from the second run (same prompt); the first had another prompt.
    assert_eq!(fake.requests().await.len(), before, "{}", out.transcript());
}

/// Item 9: warnings about an agent file shared with Claude Code are whole in `validate` (with
/// the permission rule named as what is unsupported, not the tool), and one line in `run`.
#[tokio::test(flavor = "multi_thread")]
async fn claude_code_agent_warnings_are_brief_when_running() {
    use crate::fake::{Fake, anthropic_text};
    let fake = Fake::anthropic(vec![anthropic_text("done")]).await;
    let test = Test::new()
        .file(
            ".claude/agents/reviewer.md",
            "---\nname: reviewer\ndescription: reviews\ntools: Read, Grep, Bash(git log:*)\npermissionMode: acceptEdits\n---\nReview.\n",
        )
        .file(
            "w.toml",
            &anthropic_at(&fake.uri(), "").replace("agent = \"explore\"", "agent = \"reviewer\""),
        )
        .env("CLAUDE_KEY", "sk-test");
    let (out, test) = test.args(&["validate", "w.toml"]).run_async().await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    insta::assert_snapshot!("agent_warnings_validate", out.stderr);
    let (out, _) = test
        .clear_args()
        .args(&["run", "w.toml", "--no-progress"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let first = out.stderr.lines().next().unwrap_or_default().to_owned();
    insta::assert_snapshot!("agent_warnings_run", first);
    assert!(!out.stderr.contains("permissionMode"), "{}", out.stderr);
}

/// Item 10: an OpenAI reasoning model that refuses `max_tokens` gets `max_completion_tokens`,
/// and the step goes on.
#[tokio::test(flavor = "multi_thread")]
async fn reasoning_models_get_max_completion_tokens() {
    use crate::fake::{Fake, openai_text};
    let fake = Fake::openai_fn(|body| {
        if body.get("max_tokens").is_some() {
            wiremock::ResponseTemplate::new(400).set_body_json(serde_json::json!({"error": {
                "message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"
            }}))
        } else {
            openai_text("done")
        }
    })
    .await;
    let workflow = format!(
        "name = \"w\"\n[providers.oai]\nkind = \"openai\"\nbase_url = \"{}/v1\"\napi_key_env = \"OAI_KEY\"\n[models]\ndefault = \"oai/o3\"\n[steps.s]\nagent = \"explore\"\nmax_tokens = 777\nprompt = \"Look.\"\n",
        fake.uri()
    );
    let (out, _) = Test::new()
        .file("w.toml", &workflow)
        .env("OAI_KEY", "sk-test")
        .args(&["run", "w.toml", "--no-progress"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    let last = bodies.last().unwrap();
    assert_eq!(last["max_completion_tokens"], 777);
    assert!(last.get("max_tokens").is_none());
}

/// `--model smal=…` (a typo of `small`) is an error that names the alias it meant; an alias a
/// built-in agent falls back from (`small`, `plan`) is fine even when the file leaves it out.
#[test]
fn a_mistyped_model_alias_is_an_error_with_did_you_mean() {
    let workflow = format!("name: w\n{MODELS}steps:\n  look:\n    agent: explore\n    prompt: x\n");
    let out = Test::new()
        .file("w.yaml", &workflow)
        .args(&["plan", "w.yaml", "--model", "smal=anthropic/haiku"])
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("`--model smal=anthropic/haiku`: this workflow has no model alias `smal`")
            && out.stderr.contains("did you mean `small`?"),
        "{}",
        out.stderr
    );
    let out = Test::new()
        .file("w.yaml", &workflow)
        .args(&[
            "plan",
            "w.yaml",
            "--model",
            "small=anthropic/haiku",
            "--format",
            "json",
        ])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(out.stdout.contains("anthropic/haiku"), "{}", out.stdout);
}

/// One unclosed TOML array is one error, at the line where it opens, not one per line after.
#[test]
fn an_unclosed_toml_array_is_one_error_where_it_opens() {
    let out = Test::new()
        .file(
            "w.toml",
            "name = \"w\"\n[models]\ndefault = \"anthropic/m\"\n[steps.a]\nagent = \"explore\"\ntools = [\"read_file\", \"grep\"\nprompt = \"look\"\n[steps.b]\nagent = \"explore\"\nprompt = \"more\"\nneeds = [\"a\"]\n",
        )
        .args(&["validate", "w.toml"])
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert_eq!(out.stderr.matches('×').count(), 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("this array is never closed (`]` missing)")
            && out.stderr.contains("[w.toml:6:9]")
            && out.stderr.contains("is invalid: 1 error"),
        "{}",
        out.stderr
    );
}

/// A `for_each` that does not evaluate is one error: the prompt's `item` is not blamed too.
#[test]
fn a_bad_for_each_is_one_error() {
    let out = Test::new()
        .file(
            "w.yaml",
            &format!("name: w\n{MODELS}steps:\n  a:\n    agent: explore\n    for_each: \"[1, 2\"\n    prompt: \"look at {{{{ item }}}} ({{{{ item_index }}}})\"\n"),
        )
        .args(&["validate", "w.yaml"])
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert_eq!(out.stderr.matches('×').count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("invalid `for_each` expression"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("reads `item`"), "{}", out.stderr);
}

/// A worktree starts from HEAD: a checkout with uncommitted changes is warned about.
#[test]
fn a_worktree_step_from_a_dirty_checkout_warns() {
    let test = Test::new()
        .file(
            "w.yaml",
            &format!("name: w\n{MODELS}steps:\n  impl:\n    agent: code\n    isolation: worktree\n    retries: 0\n    prompt: x\n"),
        )
        .file(".gitignore", ".runner/\n");
    crate::support::init_repo(test.path());
    std::fs::write(test.path().join("notes.txt"), "not committed\n").unwrap();
    // Nothing answers: the step fails at once, after the warning.
    let out = test
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .env("ANTHROPIC_API_KEY", "sk-unused")
        .args(&["run", "w.yaml", "--no-progress"])
        .run();
    assert!(
        out.stderr.contains(
            "warning: the checkout has 1 uncommitted change (`git status`); worktree steps (impl) start from HEAD and will not see it: commit first to include it"
        ),
        "{}",
        out.stderr
    );
}

/// A job of an exported pipeline brings the runner binary (`.runner/bin/`, where the GitLab
/// export keeps it) and the state of earlier jobs (`.runner/runs/`) into its checkout, with no
/// `.gitignore` for them: runner's state directory is not an uncommitted change.
#[test]
fn ci_artifacts_in_the_state_directory_are_no_uncommitted_change() {
    let test = Test::new().file(
        "w.yaml",
        &format!("name: w\n{MODELS}steps:\n  impl:\n    agent: code\n    isolation: worktree\n    retries: 0\n    prompt: x\n"),
    );
    crate::support::init_repo(test.path());
    std::fs::create_dir_all(test.path().join(".runner/bin")).unwrap();
    std::fs::write(test.path().join(".runner/bin/runner"), "a binary\n").unwrap();
    std::fs::create_dir_all(test.path().join(".runner/runs/77/steps/a")).unwrap();
    std::fs::write(
        test.path().join(".runner/runs/77/steps/a/record.json"),
        "{}",
    )
    .unwrap();
    let test = test
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .env("ANTHROPIC_API_KEY", "sk-unused")
        .args(&["run", "w.yaml", "--no-progress", "--state-dir", ".runner"]);
    let out = test.run_keeping();
    assert!(!out.stderr.contains("uncommitted"), "{}", out.stderr);
    // What is the user's still counts.
    std::fs::write(test.path().join("notes.txt"), "not committed\n").unwrap();
    let out = test.run();
    assert!(
        out.stderr
            .contains("warning: the checkout has 1 uncommitted change (`git status`)"),
        "{}",
        out.stderr
    );
}

/// `tools = []` is a step that only answers (a verdict, a formatting pass): valid, and it runs
/// with no tools offered.
#[tokio::test(flavor = "multi_thread")]
async fn a_step_with_no_tools_on_purpose_is_valid_and_runs() {
    let fake = crate::fake::Fake::anthropic(vec![crate::fake::anthropic_text("LGTM")]).await;
    let (out, _test) = Test::new()
        .file(
            "w.yaml",
            &format!("name: w\n{MODELS}steps:\n  verdict:\n    agent: plan\n    tools: []\n    prompt: judge\n"),
        )
        .anthropic_api(&fake.uri(), "sk-none")
        .args(&["run", "w.yaml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let body = &fake.bodies().await[0];
    assert!(body.get("tools").is_none(), "{body}");
    let plan = Test::new()
        .file(
            "w.yaml",
            &format!("name: w\n{MODELS}steps:\n  verdict:\n    agent: plan\n    tools: []\n    prompt: judge\n"),
        )
        .args(&["plan", "w.yaml"])
        .run();
    assert!(
        plan.stdout.contains("tools    none (`tools = []`"),
        "{}",
        plan.stdout
    );
}

/// A subagent's tools are its agent's within the step's: naming one that shares none is an
/// error before anything runs; by default such agents are not offered.
#[test]
fn a_subagent_that_could_do_nothing_is_refused() {
    let workflow = |subagents: &str| {
        format!(
            "name: w\n{MODELS}steps:\n  edit:\n    agent: code\n    tools: [task, write_file]\n{subagents}    prompt: do\n"
        )
    };
    let out = Test::new()
        .file("w.yaml", &workflow("    subagents: [explore]\n"))
        .args(&["validate", "w.yaml"])
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("step `edit` may spawn `explore`, but its tools and the step's share none")
            && out.stderr.contains("no tools in common"),
        "{}",
        out.stderr
    );
    let out = Test::new()
        .file("w.yaml", &workflow(""))
        .args(&["plan", "w.yaml", "--format", "json"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(plan["steps"][0]["subagents"], serde_json::json!(["code"]));
}

/// Plain progress says when a request is retried and why, instead of falling silent.
#[test]
fn plain_progress_says_when_a_request_is_retried() {
    let out = Test::new()
        .file(
            "w.yaml",
            &format!("name: w\n{MODELS}steps:\n  look:\n    agent: explore\n    retries: 1\n    prompt: x\n"),
        )
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .env("ANTHROPIC_API_KEY", "sk-unused")
        .args(&["run", "w.yaml"])
        .run();
    assert_eq!(out.status, 1, "{}", out.transcript());
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("retrying"))
        .unwrap_or_else(|| panic!("{}", out.stderr));
    assert!(
        line.starts_with("[explore] look: attempt 1 failed, retrying in ")
            && line.contains("could not reach the API"),
        "{line}"
    );
}

/// A run id is part of git branch names: one git would refuse is refused before anything runs.
#[test]
fn a_run_id_git_would_refuse_is_refused_first() {
    for id in ["a..b", "run.", "x.lock"] {
        let out = Test::new()
            .file(
                "w.yaml",
                &format!("name: w\n{MODELS}steps:\n  s:\n    agent: explore\n    prompt: x\n"),
            )
            .args(&["run", "w.yaml", "--run-id", id])
            .run();
        assert_eq!(out.status, 2, "{id}: {}", out.transcript());
        assert!(
            out.stderr.contains(&format!("--run-id {id}:")),
            "{}",
            out.stderr
        );
    }
}

/// `--only X[7]` for an instance the list does not have fails, naming the instances there are,
/// rather than skipping everything and calling the run a success.
#[test]
fn only_an_instance_that_does_not_exist_fails() {
    let out = Test::new()
        .file(
            "w.yaml",
            "name: w\nsteps:\n  each:\n    run: echo $ITEM\n    env:\n      ITEM: \"{{ item }}\"\n    for_each: '[\"a\", \"b\"]'\n",
        )
        .args(&["run", "w.yaml", "--only", "each[7]", "--format", "json"])
        .run();
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let error = run["steps"]["each"]["error"].as_str().unwrap();
    assert_eq!(
        error,
        "--only each[7]: step `each` has no such instance; it has each[0], each[1]"
    );
}

const OPENAI_STEP: &str = "name: w\nmodels:\n  default: openai/local-model\nsteps:\n  s:\n    agent: plan\n    prompt: hello\n";

/// A llama.cpp or vLLM server at `OPENAI_BASE_URL` needs no dummy `OPENAI_API_KEY`: with no
/// key, requests go without an `Authorization` header. At OpenAI's own URL a missing key is
/// still an error before anything is sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_local_openai_compatible_server_needs_no_key() {
    let fake = crate::fake::Fake::openai(vec![crate::fake::openai_text("hi from llama")]).await;
    let (out, _test) = Test::new()
        .file("w.yaml", OPENAI_STEP)
        .env("OPENAI_BASE_URL", &format!("{}/v1", fake.uri()))
        .args(&["run", "w.yaml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(run["steps"]["s"]["summary"], "hi from llama");
    let requests = fake.requests().await;
    assert_eq!(requests.len(), 1);
    assert!(
        !requests[0].headers.contains_key("authorization"),
        "{:?}",
        requests[0].headers
    );
    let default = Test::new()
        .file("w.yaml", OPENAI_STEP)
        .args(&["run", "w.yaml"])
        .run();
    assert_eq!(default.status, 2, "{}", default.transcript());
    assert!(
        default.stderr.contains("OPENAI_API_KEY is not set"),
        "{}",
        default.stderr
    );
    // OpenAI's own API written another way is still OpenAI's: it needs the key (refused before
    // any request, so nothing leaves the machine).
    for url in [
        "https://api.openai.com",
        "HTTPS://API.OPENAI.COM/v1",
        "https://api.openai.com:443/v1",
    ] {
        let other = Test::new()
            .file("w.yaml", OPENAI_STEP)
            .env("OPENAI_BASE_URL", url)
            .args(&["run", "w.yaml"])
            .run();
        assert_eq!(other.status, 2, "{url}: {}", other.transcript());
        assert!(
            other.stderr.contains("OPENAI_API_KEY is not set"),
            "{url}: {}",
            other.stderr
        );
    }
}

/// A base URL without its scheme (`127.0.0.1:8080/v1`) is an error before the run, naming the
/// variable and the value with the URL meant, from `validate`, `plan` and `run` alike; no
/// request is sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_base_url_without_a_scheme_is_an_error_before_the_run() {
    let fake = crate::fake::Fake::openai(vec![crate::fake::openai_text("never")]).await;
    let schemeless = format!("{}/v1", fake.uri().trim_start_matches("http://"));
    for command in [
        vec!["validate", "w.yaml"],
        vec!["plan", "w.yaml"],
        vec!["run", "w.yaml"],
    ] {
        let out = Test::new()
            .file("w.yaml", OPENAI_STEP)
            .env("OPENAI_BASE_URL", &schemeless)
            .args(&command)
            .run();
        assert_eq!(out.status, 2, "{command:?}: {}", out.transcript());
        assert!(
            out.stderr.contains(&format!(
                "OPENAI_BASE_URL={schemeless} is not a URL: a base URL starts with http:// or https://"
            )),
            "{command:?}: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains(&format!(
                "did you mean OPENAI_BASE_URL=http://{schemeless}?"
            )),
            "{command:?}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("relative URL"), "{}", out.stderr);
    }
    assert!(fake.requests().await.is_empty());
    // `[providers.*]` says it at the key, with the same hint.
    let out = Test::new()
        .file(
            "w.toml",
            "name = \"w\"\n[providers.local]\nkind = \"openai\"\nbase_url = \"localhost:11434\"\n[models]\ndefault = \"local/m\"\n[steps.s]\nagent = \"plan\"\nprompt = \"x\"\n",
        )
        .args(&["validate", "w.toml"])
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("`providers.local.base_url` must be an http:// or https:// URL"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("did you mean `http://localhost:11434`?"),
        "{}",
        out.stderr
    );
}
