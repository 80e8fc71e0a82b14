//! Protected paths stay protected for the whole step: a writing step's bash calls, one after
//! another, cannot carry a nested `.git`, a submodule's `.git` file, the cassettes or the state
//! directory away with their folder and put a decoy in their place, nor reach them through a
//! second mount of the checkout; a nested repository is protected however deep it lies.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::fake::{Fake, anthropic_results, anthropic_text, anthropic_tool};
use crate::support::{Test, commit, git, init_repo};

const KEY: &str = "sk-ant-protected-test-key-77c1e0a9";
const MODELS: &str = "[models]\ndefault = \"anthropic/claude-test\"\n";
/// What every refused call prints instead of its marker.
const BUSY: &str = "Device or resource busy";

/// Every file below `dir` with its bytes (a link as where it points).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap().flatten() {
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            let rel = path.strip_prefix(dir).unwrap().to_owned();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                files.insert(rel, target.into_os_string().into_encoded_bytes());
            } else {
                files.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// A step of the `code` agent whose model makes `commands` as bash calls, one a turn, then
/// ends; what each call returned.
async fn one_step(test: Test, commands: &[&str], args: &[&str]) -> (Vec<String>, Test) {
    let mut script: Vec<_> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| anthropic_tool(&format!("b{i}"), "bash", json!({ "command": c })))
        .collect();
    script.push(anthropic_text("done"));
    let fake = Fake::anthropic(script).await;
    let workflow = format!("name = \"p\"\n{MODELS}[steps.s]\nagent = \"code\"\nprompt = \"go\"\n");
    let mut all = vec!["run", "w.toml", "--format", "json"];
    all.extend(args);
    let (out, test) = test
        .file("w.toml", &workflow)
        .anthropic_api(&fake.uri(), KEY)
        .args(&all)
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    let results = anthropic_results(bodies.last().unwrap());
    assert_eq!(results.len(), commands.len(), "{results:?}");
    (results.into_iter().map(|(_, text, _)| text).collect(), test)
}

/// Makes `dir` a repository of its own with one commit.
fn nested_repo(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("code.txt"), "v1\n").unwrap();
    init_repo(dir);
}

/// No file the planted commands would make exists anywhere below `root`.
fn nothing_ran(root: &Path) {
    let planted: Vec<_> = snapshot(root)
        .into_keys()
        .filter(|p| p.to_string_lossy().contains("PWNED"))
        .collect();
    assert!(planted.is_empty(), "a planted command ran: {planted:?}");
}

/// `mv vendor/lib vendor/lib2 && mkdir -p vendor/lib/.git` would move the read-only bind with
/// its folder and leave a decoy for the next call to protect: the next call would then write
/// the real `vendor/lib2/.git/config` and `hooks/`, and the last swap the folders back. Every
/// folder on the way to a protected path is a mount point of each call, so none of it moves.
#[tokio::test(flavor = "multi_thread")]
async fn a_nested_repository_stays_protected_when_its_folder_is_renamed() {
    let test = Test::new().file("README.md", "top\n");
    init_repo(test.path());
    let lib = test.path().join("vendor/lib");
    nested_repo(&lib);
    let (git_before, lib_before) = (
        snapshot(&test.path().join(".git")),
        snapshot(&lib.join(".git")),
    );
    let (results, test) = one_step(
        test,
        &[
            "mv vendor/lib vendor/lib2 && mkdir -p vendor/lib/.git && echo MOVED",
            "printf '[core]\\n\\tfsmonitor = touch PWNED\\n' >> vendor/lib2/.git/config && echo CONFIG; printf '#!/bin/sh\\ntouch PWNED\\n' > vendor/lib2/.git/hooks/pre-commit && echo HOOK",
            "mv vendor/lib vendor/decoy && mv vendor/lib2 vendor/lib && echo SWAPPED",
            "mv vendor elsewhere && echo MOVED-VENDOR; rm -rf vendor/lib/.git && echo REMOVED",
            "echo v2 > vendor/lib/code.txt && echo WROTE-CODE",
        ],
        &[],
    )
    .await;
    for marker in ["MOVED", "CONFIG", "HOOK", "SWAPPED", "REMOVED"] {
        assert!(
            !results.iter().any(|r| r.contains(marker)),
            "{marker}: {results:?}"
        );
    }
    assert!(results[0].contains(BUSY), "{results:?}");
    // The rest of the nested repository's folder is the step's to write.
    assert!(results[4].contains("WROTE-CODE"), "{results:?}");
    let root = test.path();
    assert_eq!(snapshot(&lib.join(".git")), lib_before);
    assert_eq!(snapshot(&root.join(".git")), git_before);
    for gone in ["vendor/lib2", "vendor/decoy", "elsewhere"] {
        assert!(!root.join(gone).exists(), "{gone} exists");
    }
    assert_eq!(
        std::fs::read_to_string(lib.join("code.txt")).unwrap(),
        "v2\n"
    );
    git(&lib, &["status", "--short"]);
    nothing_ran(root);
}

/// A submodule's `.git` file cannot be pointed at a git directory the step made (written over,
/// or its folder renamed and a new one made), and a submodule the index registers but the
/// checkout does not populate (an empty folder, or none) cannot be given a `.git`: the user's
/// `git status` recurses into populated submodules and would run the planted `core.fsmonitor`.
#[tokio::test(flavor = "multi_thread")]
async fn submodules_git_files_cannot_be_swapped_or_planted() {
    let origin = tempfile::tempdir().unwrap();
    nested_repo(origin.path());
    let test = Test::new().file("README.md", "top\n");
    init_repo(test.path());
    let root = test.path().to_owned();
    let url = origin.path().to_str().unwrap();
    git(
        &root,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "--quiet",
            url,
            "vendor/sub",
        ],
    );
    let head = git(origin.path(), &["rev-parse", "HEAD"]);
    for unpopulated in ["vendor/empty", "vendor/gone"] {
        let entry = format!("160000,{},{unpopulated}", head.trim());
        git(&root, &["update-index", "--add", "--cacheinfo", &entry]);
    }
    commit(&root, "subs");
    std::fs::create_dir_all(root.join("vendor/empty")).unwrap();
    let sub_git = std::fs::read_to_string(root.join("vendor/sub/.git")).unwrap();
    assert!(sub_git.starts_with("gitdir: "), "{sub_git}");
    let point = "printf 'gitdir: ../../evil/.git\\n' >";
    let (results, _test) = one_step(
        test,
        &[
            // The step's own repository, whose fsmonitor the user's git would run.
            &format!("git init -q evil && printf '[core]\\n\\tfsmonitor = touch {}/PWNED\\n' >> evil/.git/config && echo EVIL", root.display()),
            &format!("{point} vendor/sub/.git && echo WROTE-FILE"),
            &format!("rm -f vendor/sub/.git && echo REMOVED-FILE; mv vendor/sub vendor/sub-old && mkdir vendor/sub && {point} vendor/sub/.git && echo SWAPPED-DIR"),
            &format!("{point} vendor/empty/.git && echo PLANTED-EMPTY"),
            &format!("rmdir vendor/gone && echo REMOVED-GONE; mkdir -p vendor/gone && {point} vendor/gone/.git && echo PLANTED-GONE"),
        ],
        &[],
    )
    .await;
    assert!(results[0].contains("EVIL"), "{results:?}");
    for marker in [
        "WROTE-FILE",
        "REMOVED-FILE",
        "SWAPPED-DIR",
        "PLANTED-EMPTY",
        "REMOVED-GONE",
        "PLANTED-GONE",
    ] {
        assert!(
            !results.iter().any(|r| r.contains(marker)),
            "{marker}: {results:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(root.join("vendor/sub/.git")).unwrap(),
        sub_git
    );
    assert!(!root.join("vendor/sub-old").exists());
    for unpopulated in ["vendor/empty", "vendor/gone"] {
        assert_eq!(
            std::fs::read_dir(root.join(unpopulated)).unwrap().count(),
            0,
            "{unpopulated}"
        );
    }
    // What the user runs next, with git's own defaults: it enters every populated submodule.
    git(&root, &["status"]);
    nothing_ran(&root);
}

/// `--record` and `--state-dir` below a subfolder: renaming the subfolder would carry the
/// read-only binds away, and the moved cassettes (a poisoned reply `--replay` then serves) and
/// state directory would be the step's to write. The folder is a mount point of each call.
#[tokio::test(flavor = "multi_thread")]
async fn cassettes_and_the_state_directory_stay_protected_when_their_folder_is_renamed() {
    let fake = Fake::anthropic_routed(vec![
        ("MARK-a", vec![anthropic_text("the real answer")]),
        (
            "MARK-b",
            vec![
                anthropic_tool("b1", "bash", json!({"command": "mv sub sub2 && echo MOVED"})),
                anthropic_tool("b2", "bash", json!({"command": "for f in sub2/cassettes/a/*.json sub/cassettes/a/*.json; do echo tampered > \"$f\" && echo TAMPERED; done; test -d sub2/state && mkdir sub2/state/runs/x && echo PLANTED; test -d sub2 && mv sub2 sub && echo BACK"})),
                anthropic_tool("b3", "bash", json!({"command": "ls sub/state; mv sub/state sub/state2 && echo MOVED-STATE"})),
                anthropic_text("done"),
            ],
        ),
    ])
    .await;
    let workflow = format!(
        "name = \"c\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"MARK-a\"\n[steps.b]\nneeds = [\"a\"]\nagent = \"code\"\nprompt = \"MARK-b\"\n"
    );
    let (out, test) = Test::new()
        .file("w.toml", &workflow)
        .file("sub/keep.txt", "x\n")
        .anthropic_api(&fake.uri(), KEY)
        .args(&[
            "run",
            "w.toml",
            "--record",
            "sub/cassettes",
            "--state-dir",
            "sub/state",
            "--format",
            "json",
        ])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    let results: Vec<String> = anthropic_results(bodies.last().unwrap())
        .into_iter()
        .map(|(_, text, _)| text)
        .collect();
    for marker in ["MOVED", "TAMPERED", "PLANTED", "BACK"] {
        assert!(
            !results.iter().any(|r| r.contains(marker)),
            "{marker}: {results:?}"
        );
    }
    assert!(results[0].contains(BUSY), "{results:?}");
    let root = test.path();
    assert!(!root.join("sub2").exists());
    let cassettes = snapshot(&root.join("sub/cassettes/a"));
    assert!(!cassettes.is_empty());
    for (path, bytes) in &cassettes {
        assert!(
            !String::from_utf8_lossy(bytes).contains("tampered"),
            "{path:?}"
        );
    }
    // The run's record went where it belongs, and nothing else is in the state's runs.
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    let id = run["run_id"].as_str().unwrap_or_default().to_owned();
    let runs: Vec<String> = std::fs::read_dir(root.join("sub/state/runs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(runs.iter().all(|r| r != "x"), "{runs:?} ({id})");
}

/// The checkout reached through a second mount of it (what a container's or devcontainer's
/// bind gives): the read-only bind covers one path while Landlock grants by inode, so without
/// more `.git` would be writable through the alias. Each alias of a protected path is bound
/// read-only too, and folders on the way cannot be renamed through it either. The alias lives
/// in a private mount namespace around runner, so nothing of it reaches the host.
#[tokio::test(flavor = "multi_thread")]
async fn git_stays_read_only_through_a_second_mount_of_the_checkout() {
    let test = Test::new().file("README.md", "top\n");
    init_repo(test.path());
    let root = test.path().canonicalize().unwrap();
    nested_repo(&root.join("vendor/lib"));
    let alias_dir = tempfile::tempdir().unwrap();
    let alias = alias_dir.path().canonicalize().unwrap();
    let (git_before, lib_before) = (
        snapshot(&root.join(".git")),
        snapshot(&root.join("vendor/lib/.git")),
    );
    let a = alias.display();
    let commands = [
        format!("echo '[core] fsmonitor = touch PWNED' >> {a}/.git/config && echo WROTE-GIT"),
        format!("touch {a}/.git/hooks/pre-commit && echo HOOK"),
        format!("echo x >> {a}/vendor/lib/.git/config && echo WROTE-NESTED"),
        format!("mv {a}/vendor/lib {a}/vendor/lib2 && echo MOVED"),
        format!("ls {a}/.runner; echo y > {a}/via-alias.txt && echo WROTE-FILE"),
    ];
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    // Root makes the bind directly; anyone else in a user namespace of their own.
    let mut wrapper = vec!["unshare"];
    if !nix::unistd::geteuid().is_root() {
        wrapper.extend(["--user", "--map-root-user"]);
    }
    let bind = format!(
        "mount --bind '{}' '{a}' && exec \"$0\" \"$@\"",
        root.display()
    );
    wrapper.extend(["--mount", "--propagation", "private", "sh", "-c", &bind]);
    let (results, _test) = one_step(test.through(&wrapper), &commands, &[]).await;
    for marker in ["WROTE-GIT", "HOOK", "WROTE-NESTED", "MOVED"] {
        assert!(
            !results.iter().any(|r| r.contains(marker)),
            "{marker}: {results:?}"
        );
    }
    assert!(results[3].contains(BUSY), "{results:?}");
    // The rest of the checkout is as writable through the alias as it is directly.
    assert!(results[4].contains("WROTE-FILE"), "{results:?}");
    assert_eq!(
        std::fs::read_to_string(root.join("via-alias.txt")).unwrap(),
        "y\n"
    );
    assert_eq!(snapshot(&root.join(".git")), git_before);
    assert_eq!(snapshot(&root.join("vendor/lib/.git")), lib_before);
    // The alias never existed outside runner's namespace.
    assert_eq!(std::fs::read_dir(&alias).unwrap().count(), 0);
}

/// A nested repository past the first 100,000 entries of the tree (a `node_modules` gets
/// there): it is found and protected like any other, and nothing says a part was skipped.
#[tokio::test(flavor = "multi_thread")]
async fn a_nested_repository_past_a_hundred_thousand_entries_is_protected() {
    let test = Test::new().file("README.md", "top\n");
    // One folder of more entries than a scan of 100,000 would read, the repository inside it:
    // listing the folder alone would use up such a scan before it went in.
    let big = test.path().join("node_modules");
    std::fs::create_dir_all(&big).unwrap();
    for i in 0..100_050 {
        std::fs::File::create(big.join(format!("f{i}"))).unwrap();
    }
    let lib = big.join("pkg");
    std::fs::create_dir_all(lib.join(".git/hooks")).unwrap();
    std::fs::write(lib.join(".git/config"), "[core]\n").unwrap();
    let fake = Fake::anthropic(vec![
        anthropic_tool("b1", "bash", json!({"command": "echo '[core] fsmonitor = touch PWNED' >> node_modules/pkg/.git/config && echo WROTE; touch node_modules/pkg/.git/hooks/pre-commit && echo HOOK; echo x > node_modules/pkg/index.js && echo CODE"})),
        anthropic_text("done"),
    ])
    .await;
    let workflow = format!("name = \"p\"\n{MODELS}[steps.s]\nagent = \"code\"\nprompt = \"go\"\n");
    let (out, test) = test
        .file("w.toml", &workflow)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(!out.stderr.contains("did not look"), "{}", out.stderr);
    let bodies = fake.bodies().await;
    let result = &anthropic_results(&bodies[1])[0].1;
    assert!(
        !result.contains("WROTE") && !result.contains("HOOK"),
        "{result}"
    );
    assert!(
        result.contains("CODE") && !result.contains("note:"),
        "{result}"
    );
    let lib = test.path().join("node_modules/pkg");
    assert_eq!(
        std::fs::read_to_string(lib.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!lib.join(".git/hooks/pre-commit").exists());
}
