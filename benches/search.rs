//! The `grep` and `glob` tools on a generated tree of 50,000 files, beside ripgrep (`rg`) on the
//! same tree when it is installed. The patterns, a literal and a regex, match rarely, so every
//! file is searched; both sides find the same lines.
//!
//! Like is measured with like: both sides are whole processes. This benchmark starts itself again
//! as a child that runs one tool call and prints its result (`RUNNER_BENCH_CHILD`), and times that
//! child from spawn to exit, exactly as it times `rg`. `-- pairs` runs the two in turn instead
//! and prints the median of the pairs' ratios.

mod common;

use std::process::Command;
use std::sync::OnceLock;

use camino::Utf8PathBuf;
use runner::tools::confine::Workspace;
use runner::tools::search::{glob, grep};
use serde_json::json;

const DIRS: usize = 500;
const LITERAL: &str = "NEEDLE: rotate";
/// No literal prefix: only the inner literal `: rotate` can narrow the search, which takes a
/// matcher that knows lines.
const REGEX: &str = r"[A-Z]+: rotate the \w+ key";
const FILES_PER_DIR: usize = 100;

fn main() {
    // The child: one tool call on the given tree, its result on stdout.
    if let (Ok(tool), Ok(root)) = (
        std::env::var("RUNNER_BENCH_CHILD"),
        std::env::var("RUNNER_BENCH_ROOT"),
    ) {
        let workspace = Workspace::new(&Utf8PathBuf::from(root)).expect("workspace");
        let out = match tool.as_str() {
            "glob" => glob(&workspace, &json!({"pattern": "**/file000.rs"})),
            pattern => grep(
                &workspace,
                &json!({"pattern": pattern, "max_results": 2000}),
            ),
        };
        assert!(!out.is_error, "{}", out.text);
        print!("{}", out.text);
        return;
    }
    if std::env::args().skip(1).any(|a| a == "pairs") {
        pairs();
        return;
    }
    divan::main();
}

/// `cargo bench --bench search -- pairs`: runner's `grep` and `rg` run in turn, 15 pairs a
/// pattern, so that both see the machine in the same state (divan runs all samples of one case,
/// then the next, and this machine's speed drifts between them). Prints the medians and the
/// median of the pairs' ratios; both sides must print the same number of lines.
fn pairs() {
    assert!(have_rg(), "the pairs need rg");
    for (name, pattern) in [("literal", LITERAL), ("regex", REGEX)] {
        // One of each first: the tree is made and read into the page cache before timing.
        let expected = rg(pattern);
        assert_eq!(runner_child(pattern), expected, "{name}: the same lines");
        let pairs = common::in_turn(
            15,
            || assert_eq!(runner_child(pattern), expected, "{name}: runner's lines"),
            || assert_eq!(rg(pattern), expected, "{name}: rg's lines"),
        );
        println!(
            "grep {name}, 15 pairs run in turn: runner {:.1} ms, rg {:.1} ms (medians); ratio {:.2} (median of the pairs' ratios, {:.2}-{:.2}; budget 1.0)",
            pairs.first_ms, pairs.second_ms, pairs.ratio, pairs.low, pairs.high,
        );
    }
}

/// Runs one tool call in a child process, like `rg` runs; the number of lines it printed.
fn runner_child(tool: &str) -> usize {
    let t = tree();
    let out = common::succeeded(
        Command::new(std::env::current_exe().expect("bench binary"))
            .env("RUNNER_BENCH_CHILD", tool)
            .env("RUNNER_BENCH_ROOT", t.root.as_str()),
    );
    out.stdout.iter().filter(|b| **b == b'\n').count()
}

struct Tree {
    _dir: tempfile::TempDir,
    root: Utf8PathBuf,
}

fn tree() -> &'static Tree {
    static TREE: OnceLock<Tree> = OnceLock::new();
    TREE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = Utf8PathBuf::from_path_buf(dir.path().to_owned()).expect("utf-8 path");
        std::fs::write(root.join(".gitignore"), "*.log\n").expect("write");
        for d in 0..DIRS {
            let sub = root.join(format!("pkg{d:03}/src"));
            std::fs::create_dir_all(&sub).expect("mkdir");
            for f in 0..FILES_PER_DIR {
                let ext = ["rs", "py", "ts", "md"][f % 4];
                let mut text = String::new();
                for line in 0..30 {
                    text.push_str(&format!(
                        "fn item_{d}_{f}_{line}(value: usize) -> usize {{ value * {line} }}\n"
                    ));
                }
                // One file in a thousand holds the needle.
                if (d * FILES_PER_DIR + f).is_multiple_of(1000) {
                    text.push_str("// NEEDLE: rotate the signing key\n");
                }
                std::fs::write(sub.join(format!("file{f:03}.{ext}")), text).expect("write");
            }
        }
        Tree { _dir: dir, root }
    })
}

/// Whether `rg` is installed; without it its cases time nothing, and the benchmark says so once
/// (their figures are then the cost of finding no `rg`, not ripgrep's).
fn have_rg() -> bool {
    static HAVE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAVE.get_or_init(|| {
        let have = Command::new("rg")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !have {
            eprintln!("rg is not installed (Debian: apt-get install ripgrep): the *_rg cases measure nothing");
        }
        have
    })
}

fn rg(pattern: &str) -> usize {
    let t = tree();
    if !have_rg() {
        return 0;
    }
    let out = Command::new("rg")
        .args(["-n", pattern])
        .current_dir(&t.root)
        .output()
        .expect("rg");
    out.stdout.iter().filter(|b| **b == b'\n').count()
}

#[divan::bench(sample_count = 10)]
fn grep_literal_runner() -> usize {
    runner_child(LITERAL)
}

#[divan::bench(sample_count = 10)]
fn grep_literal_rg() -> usize {
    rg(LITERAL)
}

#[divan::bench(sample_count = 10)]
fn grep_regex_runner() -> usize {
    let found = runner_child(REGEX);
    // Both sides find the same lines, checked once (outside the median: one sample of ten).
    static SAME: std::sync::Once = std::sync::Once::new();
    SAME.call_once(|| {
        let rg = rg(REGEX);
        assert!(
            rg == 0 || found == rg,
            "runner printed {found} lines, rg {rg}"
        );
    });
    found
}

#[divan::bench(sample_count = 10)]
fn grep_regex_rg() -> usize {
    rg(REGEX)
}

#[divan::bench(sample_count = 10)]
fn glob_runner() -> usize {
    runner_child("glob")
}

#[divan::bench(sample_count = 10)]
fn glob_rg() -> usize {
    let t = tree();
    if !have_rg() {
        return 0;
    }
    let out = Command::new("rg")
        .args(["--files", "-g", "**/file000.rs"])
        .current_dir(&t.root)
        .output()
        .expect("rg");
    out.stdout.iter().filter(|b| **b == b'\n').count()
}
