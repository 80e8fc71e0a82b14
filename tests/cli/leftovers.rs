//! `runner clean` and the clean-up of `--resume` remove only worktrees runner made: registered
//! with git at `<state dir>/worktrees/<run>/<step>`, reached through no link
//! (docs/src/runs.md "Worktrees"). A checkout that ships links in that folder (to the checkout,
//! to a sibling folder, to the user's own linked worktree, a link in the middle of the path, the
//! folder itself a link) gets them named and left, and nothing outside is touched.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::Path;

use crate::support::{Output, Test, git};

/// The run whose worktree runner really made (registered with git, nothing in it).
const OWN_RUN: &str = "20260101T000000000-0001";

/// Everything under `root` as it is: each path with its kind and contents (a file's text, a
/// link's target), links never followed.
fn listing(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            let meta = path.symlink_metadata().unwrap();
            if meta.file_type().is_symlink() {
                let to = std::fs::read_link(&path).unwrap();
                out.insert(name, format!("link to {}", to.display()));
            } else if meta.is_dir() {
                out.insert(name, "dir".into());
                walk(root, &path, out);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.insert(name, String::from_utf8_lossy(&bytes).into_owned());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// What may change when runner removes its own worktree: the tree, git's record of it, its
/// branch, and the state directory's records of runs.
fn outside_runners_own(listing: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let own = format!("checkout/.runner/worktrees/{OWN_RUN}");
    listing
        .iter()
        .filter(|(path, _)| {
            !path.starts_with(&own)
                && !path.starts_with("checkout/.git/worktrees/own")
                && !path.contains("refs/heads/runner")
                && !path.starts_with("checkout/.git/logs")
                && !path.starts_with("checkout/.runner/runs")
                && !path.starts_with("checkout/.git/packed-refs")
                && *path != "checkout/.runner/.gitignore"
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A checkout in `<test>/checkout` with, beside it, a sibling folder and the user's own linked
/// worktree (an ignored `.env` in it), and runner's own worktree of a killed run in its state
/// directory. The test folder holds it all, so a link that escapes stays inside it.
fn layout() -> Test {
    let test = Test::new()
        .file("checkout/a.txt", "a\n")
        .file("checkout/.gitignore", ".runner/\n.env\n")
        .file(
            "checkout/w.toml",
            "name = \"t\"\n[steps.s]\nrun = \"echo ran\"\n",
        )
        .file("sibling/keep.txt", "the user's\n");
    let checkout = test.path().join("checkout");
    crate::support::init_repo(&checkout);
    git(
        &checkout,
        &["worktree", "add", "--quiet", "-b", "mine", "../userwt"],
    );
    std::fs::write(test.path().join("userwt/.env"), "SECRET=1\n").unwrap();
    let own = checkout.join(format!(".runner/worktrees/{OWN_RUN}/own"));
    git(
        &checkout,
        &[
            "worktree",
            "add",
            "--quiet",
            "-b",
            &format!("runner/{OWN_RUN}/own"),
            own.to_str().unwrap(),
        ],
    );
    test
}

/// The links a checkout ships in runner's worktree folder, each with where it points.
fn ship_links(test: &Test) -> Vec<&'static str> {
    let trees = test.path().join("checkout/.runner/worktrees");
    let elsewhere = test.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    // A worktree git knows of, outside runner's folder, reached through a link mid-path.
    git(
        &test.path().join("checkout"),
        &[
            "worktree",
            "add",
            "--quiet",
            "-b",
            "other",
            elsewhere.join("s").to_str().unwrap(),
        ],
    );
    std::fs::write(elsewhere.join("s/.env"), "SECRET=2\n").unwrap();
    let links: [(&str, &Path); 6] = [
        ("evil", Path::new("../../..")),
        ("middle", &elsewhere),
        // Relative to the link's folder: `worktrees/r-checkout`.
        ("r-checkout/s", Path::new("../../..")),
        ("r-sibling/s", &test.path().join("sibling")),
        ("r-userwt/s", &test.path().join("userwt")),
        ("r-up/s", Path::new("../../../..")),
    ];
    for (link, to) in links {
        let at = trees.join(link);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        symlink(to, &at).unwrap();
    }
    vec![
        "evil",
        "middle",
        "r-checkout/s",
        "r-sibling/s",
        "r-userwt/s",
        "r-up/s",
    ]
}

/// Fails naming each path that differs, with what it was and is.
fn assert_same(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>, what: &str) {
    let mut changed = Vec::new();
    for path in before
        .keys()
        .chain(after.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let (b, a) = (before.get(path), after.get(path));
        if b != a {
            let short = |v: Option<&String>| v.map(|v| v.chars().take(80).collect::<String>());
            changed.push(format!("{path}: {:?} -> {:?}", short(b), short(a)));
        }
    }
    assert!(
        changed.is_empty(),
        "{what}: changed:\n{}",
        changed.join("\n")
    );
}

fn runner(test: Test, args: &[&str]) -> (Output, Test) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend_from_slice(&["--workdir", "checkout"]);
    let test = test.clear_args().args(&all);
    let out = test.run_keeping();
    (out, test)
}

/// A shipped record of a "killed" run, for `--resume` to clean up after.
fn ship_killed_run(test: &Test, id: &str) {
    let record = serde_json::json!({
        "run_id": id, "workflow": "t", "status": "running",
        "started_at": "2026-01-01T00:00:00Z", "duration_ms": 0,
        "steps": {"s": {
            "status": "running", "summary": "", "output": null, "error": null, "model": "",
            "turns": 0, "tool_calls": 0, "input_tokens": 0, "output_tokens": 0,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "duration_ms": 0,
        }},
    });
    let dir = test.path().join("checkout/.runner/runs").join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("run.json"), record.to_string()).unwrap();
}

fn assert_links_kept(test: &Test, links: &[&str]) {
    for link in links {
        let at = test.path().join("checkout/.runner/worktrees").join(link);
        assert!(
            at.symlink_metadata()
                .is_ok_and(|m| m.file_type().is_symlink()),
            "{link} was removed"
        );
    }
}

#[test]
fn clean_removes_only_runners_worktrees_never_through_a_shipped_link() {
    let mut test = layout();
    let links = ship_links(&test);
    let before = listing(test.path());
    let own = test
        .path()
        .join(format!("checkout/.runner/worktrees/{OWN_RUN}/own"));
    assert!(own.join("a.txt").is_file());
    // Inside runner's own worktree, links a step left: removing the tree removes them and
    // nothing they point at (`--force`, as the tree now holds uncommitted changes).
    symlink(test.path().join("sibling"), own.join("to-sibling")).unwrap();
    symlink("../../../../../userwt", own.join("to-userwt")).unwrap();
    assert!(own.join("to-userwt/.env").is_file());

    for flags in [
        &["clean", "--dry-run"][..],
        &["clean"],
        &["clean", "--force"],
    ] {
        let (out, again) = runner(test, flags);
        test = again;
        assert_same(
            &outside_runners_own(&before),
            &outside_runners_own(&listing(test.path())),
            &format!("{flags:?}"),
        );
        assert_links_kept(&test, &links);
        assert_eq!(out.status, 0, "{flags:?}: {}", out.transcript());
        for link in &links {
            assert!(
                out.stdout.lines().any(|l| l.starts_with("left ")
                    && l.contains(&format!(
                        "/worktrees/{link}: a link, not a worktree runner made"
                    ))),
                "{flags:?}: {link} not named as refused:\n{}",
                out.stdout
            );
        }
    }
    // runner's own worktree went (it held nothing); the user's worktrees are still git's.
    assert!(!own.exists());
    let trees = git(&test.path().join("checkout"), &["worktree", "list"]);
    assert!(
        trees.contains("userwt") && trees.contains("elsewhere/s") && !trees.contains("/own"),
        "{trees}"
    );
    assert_eq!(
        std::fs::read_to_string(test.path().join("userwt/.env")).unwrap(),
        "SECRET=1\n"
    );
}

#[test]
fn resume_of_a_shipped_killed_run_cleans_up_nothing_but_runners_own() {
    let mut test = layout();
    let links = ship_links(&test);
    for id in [
        "evil",
        "r-checkout",
        "r-sibling",
        "r-userwt",
        "r-up",
        "middle",
    ] {
        ship_killed_run(&test, id);
    }
    ship_killed_run(&test, OWN_RUN);
    let before = listing(test.path());
    for id in [
        "evil",
        "r-checkout",
        "r-sibling",
        "r-userwt",
        "r-up",
        "middle",
    ] {
        let (out, again) = runner(test, &["run", "checkout/w.toml", "--resume", id]);
        test = again;
        assert_same(
            &outside_runners_own(&before),
            &outside_runners_own(&listing(test.path())),
            id,
        );
        assert_links_kept(&test, &links);
        assert_eq!(out.status, 0, "{id}: {}", out.transcript());
        assert!(
            out.stderr.contains("note: left ")
                && out.stderr.contains("a link, not a worktree runner made")
                && out.stderr.contains(&format!("(left by run {id})")),
            "{id}: the refusal is not said:\n{}",
            out.stderr
        );
    }
    // The run that did make a worktree there gets it cleaned up.
    let (out, test) = runner(test, &["run", "checkout/w.toml", "--resume", OWN_RUN]);
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("note: removed the worktree of step `own` (left by run"),
        "{}",
        out.stderr
    );
    assert_same(
        &outside_runners_own(&before),
        &outside_runners_own(&listing(test.path())),
        OWN_RUN,
    );
}

/// The whole `worktrees` folder a link, or the state directory itself: nothing is removed
/// through it, and `clean` says why.
#[test]
fn a_worktrees_folder_or_state_directory_that_is_a_link_is_never_cleaned() {
    for (link, to) in [
        ("checkout/.runner/worktrees", "../.."),
        ("checkout/.runner", ".."),
    ] {
        let mut test = Test::new()
            .file("checkout/a.txt", "a\n")
            .file(
                "checkout/w.toml",
                "name = \"t\"\n[steps.s]\nrun = \"echo ran\"\n",
            )
            .file("sibling/keep.txt", "the user's\n");
        let checkout = test.path().join("checkout");
        crate::support::init_repo(&checkout);
        // Folders shaped like runner's worktrees where the link leads.
        std::fs::create_dir_all(test.path().join("r1/s")).unwrap();
        std::fs::write(test.path().join("r1/s/f.txt"), "x\n").unwrap();
        let at = test.path().join(link);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        symlink(to, &at).unwrap();
        if link == "checkout/.runner" {
            std::fs::create_dir_all(test.path().join("worktrees/r1/s")).unwrap();
        }
        let before = listing(test.path());
        for flags in [&["clean"][..], &["clean", "--force"]] {
            let (out, again) = runner(test, flags);
            test = again;
            assert!(
                out.transcript().contains("is a link")
                    && out
                        .transcript()
                        .contains("runner removes nothing through a link"),
                "{link} {flags:?}: {}",
                out.transcript()
            );
            assert_same(&before, &listing(test.path()), &format!("{link} {flags:?}"));
        }
    }
}
