//! No input makes the loader panic: mutated workflow files must give exit 0 or 2.

use std::ffi::OsString;

use proptest::prelude::*;
use runner::cli::Io;
use runner::error::Exit;
use runner::run_cli;

use crate::support::REPO;

/// Fragments that tend to break parsers, templates and graphs.
const TOKENS: &[&str] = &[
    "\"",
    "'",
    "[",
    "]",
    "{",
    "}",
    "{{",
    "}}",
    "{%",
    "%}",
    "=",
    ":",
    "-",
    "\n",
    "\t",
    " ",
    "#",
    "needs = [\"find_auth\"]",
    "agent = \"code\"",
    "[steps.x]",
    "steps:",
    "  - a",
    "&a",
    "*a",
    "!!binary",
    "\u{0}",
    "é",
    "\u{feff}",
    "9999999999999999999999",
    "-1",
    "0x",
    "\"\"\"",
    "|",
    "{{ steps.plan.summary }}",
    "{{ inputs.nope }}",
    "tools = []",
    "if = \"(\"",
    "a: &x [*x]",
    "b: &y [*y, *y, *y, *y, *y, *y, *y, *y]",
    "{{ range(99999)|join }}",
    "{% for i in range(9999) %}{% for j in range(9999) %}x{% endfor %}{% endfor %}",
    "{% set s = s ~ s %}",
    "max_parallel = 4294967296",
    "timeout = \"99999999999999999999h\"",
    "network = true",
    "output_schema = \"/dev/zero\"",
];

#[derive(Debug, Clone)]
enum Edit {
    Delete { at: usize, len: usize },
    Insert { at: usize, token: usize },
    DuplicateLine { line: usize },
    SwapLines { a: usize, b: usize },
    Truncate { at: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(at, len)| Edit::Delete { at, len }),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(at, token)| Edit::Insert { at, token }),
        any::<usize>().prop_map(|line| Edit::DuplicateLine { line }),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines { a, b }),
        any::<usize>().prop_map(|at| Edit::Truncate { at }),
    ]
}

fn boundary(text: &str, at: usize) -> usize {
    let mut at = at % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn apply(text: &str, edit: &Edit) -> String {
    match edit {
        Edit::Delete { at, len } => {
            let start = boundary(text, *at);
            let end = boundary(text, (start + len).min(text.len()));
            format!("{}{}", &text[..start], &text[end.max(start)..])
        }
        Edit::Insert { at, token } => {
            let at = boundary(text, *at);
            format!("{}{}{}", &text[..at], TOKENS[*token], &text[at..])
        }
        Edit::DuplicateLine { line } => {
            let mut lines: Vec<&str> = text.lines().collect();
            if !lines.is_empty() {
                let i = line % lines.len();
                lines.insert(i, lines[i]);
            }
            lines.join("\n")
        }
        Edit::SwapLines { a, b } => {
            let mut lines: Vec<&str> = text.lines().collect();
            if !lines.is_empty() {
                let n = lines.len();
                lines.swap(a % n, b % n);
            }
            lines.join("\n")
        }
        Edit::Truncate { at } => text[..boundary(text, *at)].to_owned(),
    }
}

fn seeds() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(format!("{REPO}/workflows")).unwrap() {
        let path = entry.unwrap().path();
        if !path.is_file() {
            continue;
        }
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_owned();
        out.push((ext, std::fs::read_to_string(&path).unwrap()));
    }
    out.sort();
    out
}

/// Runs the whole CLI in-process and returns its exit code; a panic fails the test with the input.
fn validate(dir: &std::path::Path, ext: &str, text: &str) -> Exit {
    let file = dir.join(format!("fuzz.{ext}"));
    std::fs::write(&file, text).unwrap();
    let args: Vec<OsString> = ["runner", "plan", file.to_str().unwrap(), "--format", "json"]
        .iter()
        .map(OsString::from)
        .collect();
    // On a thread with the main thread's stack (8 MiB), as the binary has: a test thread's
    // 2 MiB is too little for a debug build's frames on deeply nested generated templates.
    std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            run_cli(
                args,
                &mut Io {
                    out: &mut out,
                    err: &mut err,
                    color: false,
                },
            )
        })
        .unwrap()
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_workflows_never_panic(seed in any::<usize>(), edits in prop::collection::vec(edit(), 1..6)) {
        let seeds = seeds();
        let (ext, text) = &seeds[seed % seeds.len()];
        let mutated = edits.iter().fold(text.clone(), |t, e| apply(&t, e));
        let dir = tempfile::tempdir().unwrap();
        let code = validate(dir.path(), ext, &mutated);
        prop_assert!(matches!(code, Exit::Success | Exit::Invalid), "exit {:?} for:\n{}", code, mutated);
    }
}

/// A template expression from a small grammar: nesting, long chains, loops, filters and the
/// constructs that have been bombs before.
fn expression() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        (0u64..100_000).prop_map(|n| n.to_string()),
        "[a-z]{0,8}".prop_map(|s| format!("\"{s}\"")),
        Just("steps.find_auth.summary".to_owned()),
        Just("inputs.target".to_owned()),
        Just("workflow.name".to_owned()),
        (0u64..1_000_000).prop_map(|n| format!("range({n})")),
        Just("nope.undefined".to_owned()),
    ];
    atom.prop_recursive(8, 64, 4, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone(), 0..8usize).prop_map(|(a, b, op)| {
                let op = ["+", "~", "*", "-", "and", "or", "==", "in"][op];
                format!("({a} {op} {b})")
            }),
            (inner.clone(), 0..6usize).prop_map(|(a, f)| {
                let filter = [
                    "join",
                    "upper",
                    "length",
                    "replace(\"1\", \"22\")",
                    "default(\"x\")",
                    "list",
                ][f];
                format!("{a}|{filter}")
            }),
            (inner.clone(), 1..3000usize, 0..3usize).prop_map(|(a, n, op)| {
                let op = [" + 1", "|string", ".x"][op];
                format!("{a}{}", op.repeat(n))
            }),
            inner.prop_map(|a| format!("({a})")),
        ]
    })
}

fn template() -> impl Strategy<Value = String> {
    prop_oneof![
        expression().prop_map(|e| format!("{{{{ {e} }}}}")),
        (expression(), expression())
            .prop_map(|(a, b)| format!("{{% for i in {a} %}}{{{{ {b} }}}}{{% endfor %}}")),
        (expression(), 0..40usize).prop_map(|(a, n)| format!(
            "{{% set s = {a} %}}{}{{{{ s }}}}",
            "{% set s = s ~ s %}".repeat(n)
        )),
        (expression(), expression())
            .prop_map(|(a, b)| format!("{{% if {a} %}}{{{{ {b} }}}}{{% endif %}}")),
    ]
}

fn fuzz_cases() -> u32 {
    std::env::var("RUNNER_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000)
}

/// A workflow whose second step carries a generated prompt and `if`.
fn generated(prompt: &str, condition: &str) -> String {
    let quote = |s: &str| s.replace("'''", "");
    format!(
        "name = \"f\"\n[inputs.target]\ndefault = \"src\"\n[models]\ndefault = \"anthropic/x\"\n[steps.find_auth]\nagent = \"explore\"\nprompt = \"x\"\n[steps.b]\nagent = \"plan\"\nneeds = [\"find_auth\"]\nprompt = '''{}'''\nif = '''{}'''\n",
        quote(prompt),
        quote(condition)
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: fuzz_cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// The long fuzz run, outside CI: `cargo test --release --test cli fuzz -- --ignored`
    /// (`RUNNER_FUZZ_CASES` sets the number of files; 10,000 by default). Half the files are
    /// mutated examples, half carry generated templates in a prompt and an `if`.
    #[test]
    #[ignore = "long; run on purpose"]
    fn fuzz_loader_and_template_checker(
        seed in any::<usize>(),
        edits in prop::collection::vec(edit(), 1..10),
        prompt in template(),
        condition in expression(),
        mutate in any::<bool>(),
    ) {
        let seeds = seeds();
        let (ext, text) = if mutate {
            let (ext, text) = &seeds[seed % seeds.len()];
            (ext.clone(), edits.iter().fold(text.clone(), |t, e| apply(&t, e)))
        } else {
            ("toml".to_owned(), generated(&prompt, &condition))
        };
        let dir = tempfile::tempdir().unwrap();
        let code = validate(dir.path(), &ext, &text);
        prop_assert!(matches!(code, Exit::Success | Exit::Invalid), "exit {:?} for:\n{}", code, text);
    }
}

#[test]
fn a_mutated_file_through_the_real_binary_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(format!("{REPO}/workflows/jwt-migration.toml")).unwrap();
    let broken = text.replace("[steps.plan]", "[steps.plan\n");
    std::fs::write(dir.path().join("w.toml"), broken).unwrap();
    let out = crate::support::Test::new()
        .file(
            "w.toml",
            &std::fs::read_to_string(dir.path().join("w.toml")).unwrap(),
        )
        .args(&["validate", "w.toml"])
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(out.stderr.contains("invalid TOML"));
}
