//! Small hostile files that used to exhaust the machine, kept as a regression corpus: each must
//! be refused with exit 2 and a clear message, under a 1 GiB address-space limit and a CPU-time
//! limit (a bomb that gets through aborts or is killed, and the test fails on the status).

use nix::sys::resource::Resource;

use crate::support::{Output, Test};

const MODELS: &str = "[models]\ndefault = \"anthropic/claude-test\"\n";

/// `runner ARGS` in a dir holding `files`, under the limits.
fn bounded(files: &[(&str, &str)], args: &[&str]) -> Output {
    let mut test = Test::new()
        .limit(Resource::RLIMIT_AS, 1 << 30)
        .limit(Resource::RLIMIT_CPU, 30);
    for (path, text) in files {
        test = test.file(path, text);
    }
    test.args(args).run()
}

fn refused(name: &str, files: &[(&str, &str)], args: &[&str], message: &str) {
    let out = bounded(files, args);
    assert_eq!(out.status, 2, "{name}:\n{}", out.transcript());
    assert!(
        out.stderr.contains(message),
        "{name}: expected `{message}` in:\n{}",
        out.stderr
    );
}

fn toml_prompt(prompt: &str) -> String {
    format!("name = \"w\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = '''{prompt}'''\n")
}

fn billion_laughs(name_line: &str) -> String {
    let mut lines = vec![
        name_line.to_owned(),
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]"
            .to_owned(),
    ];
    let mut previous = 'a';
    for level in 'b'..='i' {
        let refs = vec![format!("*{previous}"); 9].join(",");
        lines.push(format!("{level}: &{level} [{refs}]"));
        previous = level;
    }
    lines.join("\n") + "\n"
}

#[test]
fn a_yaml_alias_bomb_is_refused() {
    let bomb = billion_laughs("name: w");
    assert!(bomb.len() < 700, "the bomb is {} bytes", bomb.len());
    refused(
        "workflow bomb",
        &[("w.yaml", &bomb)],
        &["validate", "w.yaml"],
        "more than 100000 values once its aliases are expanded",
    );
}

#[test]
fn an_alias_bomb_in_an_unused_agent_file_costs_nothing() {
    let agent = format!("---\n{}---\nYou review.\n", billion_laughs("name: bomb"));
    let workflow =
        format!("name = \"w\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"x\"\n");
    let out = bounded(
        &[("w.toml", &workflow), (".claude/agents/bomb.md", &agent)],
        &["validate", "w.toml"],
    );
    assert_eq!(out.status, 0, "{}", out.transcript());
    // Listing agents reports the broken file instead of dying on it.
    let out = bounded(&[(".claude/agents/bomb.md", &agent)], &["agents"]);
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr.contains("more than 100000 values"),
        "{}",
        out.stderr
    );
}

#[test]
fn deep_nesting_is_refused() {
    let deep =
        |open: &str, close: &str| format!("{}{}", open.repeat(100_000), close.repeat(100_000));
    refused(
        "yaml flow",
        &[("w.yaml", &format!("name: w\na: {}\n", deep("[", "]")))],
        &["validate", "w.yaml"],
        "invalid YAML",
    );
    let block: String = (0..200)
        .map(|i| format!("{}- \n", "  ".repeat(i)))
        .collect();
    refused(
        "yaml block",
        &[("w.yaml", &format!("name: w\na:\n{block}"))],
        &["validate", "w.yaml"],
        "nested more than 64 levels deep",
    );
    refused(
        "toml",
        &[("w.toml", &format!("name = \"w\"\na = {}\n", deep("[", "]")))],
        &["validate", "w.toml"],
        "invalid TOML",
    );
}

#[test]
fn template_bombs_are_refused() {
    let terms = vec!["1"; 30_000].join(" + ");
    let cases = [
        (
            "long chain",
            format!("{{{{ {terms} }}}}"),
            "chains more than 1000",
        ),
        (
            "nested loops",
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"
                .to_owned(),
            "does too much work",
        ),
        (
            "string doubling",
            format!(
                "{{% set s = \"xxxxxxxxxxxxxxxx\" %}}{}{{{{ s }}}}",
                "{% set s = s ~ s %}".repeat(40)
            ),
            "does too much work",
        ),
        (
            "repetition",
            "{{ \"x\" * 10000000000 }}".to_owned(),
            "does too much work",
        ),
        (
            "replace",
            "{{ (range(100000)|join)|replace(\"1\", range(100000)|join) }}".to_owned(),
            "does too much work",
        ),
    ];
    for (name, prompt, message) in cases {
        refused(
            name,
            &[("w.toml", &toml_prompt(&prompt))],
            &["validate", "w.toml"],
            message,
        );
    }
    let condition = format!(
        "name = \"w\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"x\"\nif = \"{terms}\"\n"
    );
    refused(
        "if chain",
        &[("w.toml", &condition)],
        &["validate", "w.toml"],
        "chains more than 1000",
    );
}

#[test]
fn special_files_are_never_read() {
    let schema = format!(
        "name = \"w\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"x\"\noutput_schema = \"/dev/zero\"\n"
    );
    refused(
        "schema",
        &[("w.toml", &schema)],
        &["validate", "w.toml"],
        "cannot read output schema `/dev/zero`: it is not a regular file",
    );
    let input = format!(
        "name = \"w\"\n{MODELS}[inputs.x]\n[steps.a]\nagent = \"explore\"\nprompt = \"{{{{ inputs.x }}}}\"\n"
    );
    refused(
        "input",
        &[("w.toml", &input)],
        &["plan", "w.toml", "-i", "x=@/dev/zero"],
        "cannot read `/dev/zero`: it is not a regular file",
    );
    refused(
        "workflow",
        &[],
        &["validate", "/dev/zero"],
        "not a regular file",
    );
}

#[test]
fn a_number_out_of_range_is_one_error_at_its_place() {
    let workflow = format!(
        "name = \"w\"\nmax_parallel = 4294967296\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"x\"\n"
    );
    let out = bounded(&[("w.toml", &workflow)], &["validate", "w.toml"]);
    assert_eq!(out.status, 2);
    insta::assert_snapshot!("max_parallel_out_of_range", out.stderr);
}

#[test]
fn a_byte_order_mark_is_accepted() {
    let yaml = "\u{feff}name: w\nmodels:\n  default: anthropic/claude-test\nsteps:\n  a:\n    agent: explore\n    prompt: x\n";
    let toml =
        format!("\u{feff}name = \"w\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"x\"\n");
    let out = bounded(
        &[("w.yaml", yaml), ("w.toml", &toml)],
        &["validate", "w.yaml", "w.toml"],
    );
    assert_eq!(out.status, 0, "{}", out.transcript());
}

/// 60 kB that repeat one 30 kB string through 10,000 aliases: few values, gigabytes of text.
fn repeated_string(name_line: &str) -> String {
    let long = "x".repeat(30_000);
    let refs = vec!["*s"; 10_000].join(",");
    format!("{name_line}\ns: &s \"{long}\"\nmany: [{refs}]\n")
}

#[test]
fn a_long_string_repeated_through_aliases_is_refused() {
    let bomb = repeated_string("name: w");
    assert!(bomb.len() < 61_000, "the bomb is {} bytes", bomb.len());
    refused(
        "workflow string bomb",
        &[("w.yaml", &bomb)],
        &["validate", "w.yaml"],
        "more than 32 MiB of text once its aliases are expanded",
    );
    // The same as an agent file the repository brings.
    let agent = format!("---\n{}---\nYou review.\n", repeated_string("name: bomb"));
    let out = bounded(&[(".claude/agents/bomb.md", &agent)], &["agents"]);
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(out.stderr.contains("32 MiB of text"), "{}", out.stderr);
}

/// A file of thousands of `---` separators is one error, found at the second document, and the
/// rest is not read (each document cost an error and its quoting: time quadratic in the file).
#[test]
fn many_yaml_documents_are_one_error() {
    let text = format!("name: w\n{}", "---\na: 1\n".repeat(16_000));
    let out = crate::support::Test::new()
        .file("w.yaml", &text)
        .args(&["validate", "w.yaml"])
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(out.stderr.contains("is invalid: 1 error"), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("a workflow file holds one YAML document; found another"),
        "{}",
        out.stderr
    );
}
