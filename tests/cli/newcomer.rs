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
        .args(&["agents"])
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
            "---\nname: reviewer\ntools: Read\nmaxTurn: 3\n---\nReview.\n",
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

/// Template mistakes are found by `validate`, all at once and together with other errors: a
/// field of a summary, a property the output schema does not declare, an output read unguarded
/// by a step that runs after it was skipped, and an unknown filter.
#[test]
fn template_mistakes_are_found_before_anything_runs() {
    let out = Test::new()
        .file(
            "w.toml",
            r#"name = "w"
[models]
default = "anthropic/m"
[inputs.mode]
default = "quick"

[steps.triage]
agent = "explore"
if = "inputs.mode == 'full'"
prompt = "Triage."
output_schema = { type = "object", properties = { severity = { type = "string" } } }

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
    let workflow = r#"name = "w"
[models]
default = "anthropic/m"
[inputs.mode]
default = "quick"

[steps.triage]
agent = "explore"
if = "inputs.mode == 'full'"
prompt = "Triage."
output_schema = { type = "object", properties = { severity = { type = "string" }, files = { type = "array", items = { type = "object", properties = { path = { type = "string" } } } } }, required = ["severity", "files"] }

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
"#;
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
            .file("w.toml", workflow)
            .env("ANTHROPIC_BASE_URL", &fake.uri())
            .env("ANTHROPIC_API_KEY", "sk-test")
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
