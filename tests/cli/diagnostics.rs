//! Rendered diagnostics for bad workflow files: exit code 2, file, line, column, caret, hint.

use crate::support::Test;

const MODELS: &str = "[models]\ndefault = \"anthropic/claude-sonnet-4-5\"\n";

fn check(name: &str, file: &str, text: &str, args: &[&str]) -> String {
    let mut all = vec!["validate", file];
    all.extend_from_slice(args);
    let out = Test::new().file(file, text).args(&all).run();
    assert_eq!(
        out.status,
        2,
        "{name}: expected exit 2\n{}",
        out.transcript()
    );
    assert_eq!(out.stdout, "");
    insta::assert_snapshot!(name, out.stderr);
    out.stderr
}

#[test]
fn unknown_key() {
    let err = check(
        "unknown_key",
        "w.toml",
        &format!("name = \"w\"\n{MODELS}\n[steps.a]\nagent = \"explore\"\npromt = \"hi\"\n"),
        &[],
    );
    assert!(err.contains("unknown key `promt` in `steps.a`"));
    assert!(err.contains("w.toml:7:1"));
    assert!(err.contains("did you mean `prompt`?"));
    assert!(err.contains("missing required key `prompt` in `steps.a`"));
}

#[test]
fn cycle() {
    let err = check(
        "cycle",
        "w.toml",
        &format!(
            "name = \"w\"\n{MODELS}\n[steps.a]\nagent = \"explore\"\nprompt = \"a\"\nneeds = [\"c\"]\n\n[steps.b]\nagent = \"explore\"\nprompt = \"b\"\nneeds = [\"a\"]\n\n[steps.c]\nagent = \"explore\"\nprompt = \"c\"\nneeds = [\"b\"]\n"
        ),
        &[],
    );
    assert!(err.contains("dependency cycle: a -> c -> b -> a"));
}

#[test]
fn unknown_agent() {
    let err = check(
        "unknown_agent",
        "w.yaml",
        "name: w\nmodels:\n  default: anthropic/claude-sonnet-4-5\nsteps:\n  a:\n    agent: explorer\n    prompt: hi\n",
        &[],
    );
    assert!(err.contains("unknown agent `explorer` in step `a`"));
    assert!(err.contains("w.yaml:6:12"));
    assert!(err.contains("did you mean `explore`?"));
}

#[test]
fn missing_input() {
    let out = Test::new()
        .file(
            "w.toml",
            &format!(
                "name = \"w\"\n{MODELS}\n[inputs.target]\ndescription = \"Directory to scan\"\n\n[steps.a]\nagent = \"explore\"\nprompt = \"scan {{{{ inputs.target }}}}\"\n"
            ),
        )
        .args(&["plan", "w.toml"])
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    insta::assert_snapshot!("missing_input", out.stderr);
    assert!(
        out.stderr
            .contains("missing input `target` (Directory to scan)")
    );
    assert!(out.stderr.contains("--input target=VALUE"));
}

#[test]
fn template_reads_non_ancestor() {
    let err = check(
        "template_non_ancestor",
        "w.toml",
        &format!(
            "name = \"w\"\n{MODELS}\n[steps.a]\nagent = \"explore\"\nprompt = \"a\"\n\n[steps.b]\nagent = \"plan\"\nprompt = \"\"\"\nUse this:\n{{{{ steps.a.summary }}}}\n\"\"\"\n"
        ),
        &[],
    );
    assert!(err.contains("step `b` reads `steps.a.summary`, but `a` is not in its `needs`"));
    assert!(err.contains("w.toml:13:4"), "{err}");
}

#[test]
fn empty_tool_set() {
    let err = check(
        "empty_tool_set",
        "w.toml",
        &format!(
            "name = \"w\"\n{MODELS}\n[steps.a]\nagent = \"explore\"\nprompt = \"a\"\ndisallowed_tools = [\"Read\", \"grep\", \"glob\", \"list_dir\", \"Bash\"]\n"
        ),
        &[],
    );
    assert!(err.contains("step `a` has no tools left"));
}

#[test]
fn several_errors_in_one_file_are_all_reported_in_order() {
    let err = check(
        "several_errors",
        "w.toml",
        r#"name = "w"
max_paralel = 2

[models]
default = "antropic/claude-sonnet-4-5"

[steps.a]
agent = "explore"
prompt = "{{ steps.b.summary }}"
timeout = "ten minutes"

[steps.b]
agent = "code"
needs = ["a", "z"]
prompt = "{{ inputs.nope }}"
tools = ["Read", "Wrte"]
isolation = "worktre"
"#,
        &[],
    );
    let order = [
        "unknown key `max_paralel`",
        "unknown provider `antropic`",
        "step `a` reads `steps.b.summary`",
        "`steps.a.timeout` is not a duration",
        "step `b` needs `z`, which is not a step",
        "there is no input `nope`",
        "unknown tool `Wrte`",
        "`steps.b.isolation` must be one of `none`, `worktree`",
    ];
    let mut at = 0;
    for needle in order {
        let found = err[at..]
            .find(needle)
            .unwrap_or_else(|| panic!("`{needle}` missing or out of order in:\n{err}"));
        at += found;
    }
    assert!(err.contains("error: w.toml is invalid: 8 errors"), "{err}");
}

#[test]
fn syntax_errors_point_at_the_text() {
    let err = check(
        "toml_syntax",
        "w.toml",
        "name = \"w\"\n[steps.a]\nagent = explore\n",
        &[],
    );
    assert!(err.contains("invalid TOML"));
    assert!(err.contains("w.toml:3:9"), "{err}");
    let err = check(
        "yaml_syntax",
        "w.yaml",
        "name: w\nsteps:\n  a:\n    agent: [explore\n",
        &[],
    );
    assert!(err.contains("invalid YAML"));
}

#[test]
fn wrong_types_and_values() {
    let err = check(
        "wrong_types",
        "w.yaml",
        "name: w\nmax_parallel: 0\nmodels:\n  default: anthropic/claude-sonnet-4-5\nsteps:\n  a:\n    agent: explore\n    prompt: hi\n    needs: 3\n    thoroughness: fast\n",
        &[],
    );
    assert!(err.contains("`max_parallel` must be at least 1"));
    assert!(err.contains("`steps.a.needs` must be a string or a list, not a whole number"));
    assert!(
        err.contains("`steps.a.thoroughness` must be one of `quick`, `medium`, `very thorough`")
    );
}

#[test]
fn no_model_anywhere_says_how_to_set_one() {
    let out = Test::new()
        .file("w.toml", "name = \"w\"\n[steps.a]\nagent = \"explore\"\nprompt = \"a\"\n[steps.b]\nagent = \"explore\"\nprompt = \"b\"\n")
        .args(&["plan", "w.toml"])
        .run();
    assert_eq!(out.status, 2);
    insta::assert_snapshot!("no_model", out.stderr);
    assert!(out.stderr.contains("step `a` has no model"));
    assert!(out.stderr.contains("(also needed by `b`)"));
    assert!(out.stderr.contains("--model default=provider/model"));
    // The same workflow plans once a model is given on the command line.
    let ok = Test::new()
        .file(
            "w.toml",
            "name = \"w\"\n[steps.a]\nagent = \"explore\"\nprompt = \"a\"\n",
        )
        .args(&["plan", "w.toml", "--model", "default=ollama/llama3.2"])
        .run();
    assert_eq!(ok.status, 0, "{}", ok.stderr);
    assert!(ok.stdout.contains("ollama/llama3.2"));
}

#[test]
fn unknown_inputs_and_bad_flags_are_usage_errors() {
    let out = Test::new()
        .file("w.toml", &format!("name = \"w\"\n{MODELS}\n[inputs.target]\ndefault = \"src\"\n[steps.a]\nagent = \"explore\"\nprompt = \"a\"\n"))
        .args(&["plan", "w.toml", "-i", "targte=x"])
        .run();
    assert_eq!(out.status, 2);
    assert!(
        out.stderr.contains("unknown input `targte`"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("did you mean `target`?"));

    let out = Test::new().args(&["plan", "missing.toml"]).run();
    assert_eq!(out.status, 2);
    assert!(
        out.stderr.contains("cannot read `missing.toml`"),
        "{}",
        out.stderr
    );

    let out = Test::new()
        .file("w.json", "{}")
        .args(&["validate", "w.json"])
        .run();
    assert_eq!(out.status, 2);
    assert!(out.stderr.contains("must end in .toml, .yaml or .yml"));

    let out = Test::new().args(&["plan"]).run();
    assert_eq!(out.status, 2);
}

#[test]
fn validate_checks_every_file_and_reports_each() {
    let good = format!("name = \"w\"\n{MODELS}\n[steps.a]\nagent = \"explore\"\nprompt = \"a\"\n");
    let out = Test::new()
        .file("good.toml", &good)
        .file(
            "bad.toml",
            "name = \"w\"\n[steps.a]\nagent = \"nope\"\nprompt = \"a\"\n",
        )
        .args(&["validate", "good.toml", "bad.toml"])
        .run();
    assert_eq!(out.status, 2);
    assert!(
        out.stdout.contains("ok: good.toml (1 step, 1 wave)"),
        "{}",
        out.stdout
    );
    assert!(out.stderr.contains("unknown agent `nope`"));
}
