//! No input makes the loader panic: mutated workflow files must give exit 0 or 2.

use std::ffi::OsString;

use proptest::prelude::*;
use runner::cli::{Io, run_cli};
use runner::error::Exit;

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
    let (mut out, mut err) = (Vec::new(), Vec::new());
    run_cli(
        args,
        &mut Io {
            out: &mut out,
            err: &mut err,
            color: false,
        },
    )
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
