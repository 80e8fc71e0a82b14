//! `runner export gitlab-ci`, run for real: the exported pipeline goes through `gitlab-ci-local`
//! (npm) with the shell executor and `--shell-isolation`, each job in its own copy of the
//! repository, state moving between jobs only as artifacts, every model call answered from a
//! cassette: no network, no key.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use crate::fake::{Fake, anthropic_text};
use crate::support::{Test, git, init_repo};

/// gitlab-ci-local, installed once under `target/`: 4.55.0, the last release without the native `re2` module (building it from source costs a minute and a half of a fresh run).
fn gitlab_ci_local() -> &'static Path {
    static INSTALLED: OnceLock<PathBuf> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let bin = "node_modules/.bin/gitlab-ci-local";
        let bin =
            crate::support::npm_install("gitlab-ci-local", "gitlab-ci-local@4.55.0", bin).join(bin);
        // `--shell-isolation` copies the repository for each job with rsync.
        let rsync = Command::new("rsync").arg("--version").output();
        assert!(
            rsync.is_ok_and(|o| o.status.success()),
            "rsync is needed by gitlab-ci-local --shell-isolation (.ci/run installs it)"
        );
        bin
    })
}

/// `variables` is a GitLab keyword (the step runs as the job `step-variables`); the input's
/// default holds what GitLab would expand if runner let it.
const DIAMOND: &str = r#"name = "diamond"
[inputs.odd]
default = "$HOME $(id) ${CI_JOB_TOKEN} $$ end"
[models]
default = "anthropic/claude-test"
[steps.a]
agent = "explore"
prompt = "STEP-a: find the entry point {{ inputs.odd }}"
[steps.variables]
agent = "explore"
needs = ["a"]
prompt = "STEP-v: a keyword as a step id"
[steps.b]
agent = "explore"
needs = ["a"]
prompt = "STEP-b after {{ steps.a.summary }}"
[steps.c]
agent = "explore"
needs = ["a"]
prompt = "STEP-c after {{ steps.a.summary }}"
[steps.d]
agent = "plan"
needs = ["b", "c"]
prompt = "STEP-d after {{ steps.b.summary }} and {{ steps.c.summary }}"
"#;

/// A repository holding `workflow` and its cassettes, recorded against the fake API, with the
/// export of the workflow as its `.gitlab-ci.yml` (each job answering from the cassettes), and
/// the record of a local `--replay` run of it.
async fn repository(workflow: &str) -> (Test, Value) {
    let install = format!(
        "mkdir -p .runner/bin && cp {} .runner/bin/runner",
        env!("CARGO_BIN_EXE_runner")
    );
    repository_installing(workflow, &["--install".to_owned(), install]).await
}

/// [`repository`], its first job installing runner as `install` (export flags) says.
async fn repository_installing(workflow: &str, install: &[String]) -> (Test, Value) {
    let fake = Fake::anthropic_routed(vec![
        ("STEP-a", vec![anthropic_text("entry: src/main.rs")]),
        ("STEP-b", vec![anthropic_text("b looked")]),
        ("STEP-c", vec![anthropic_text("c looked")]),
        ("STEP-d", vec![anthropic_text("d planned")]),
        ("STEP-v", vec![anthropic_text("v looked")]),
    ])
    .await;
    let test = Test::new()
        .file("w.toml", workflow)
        .file(".gitignore", ".runner/\n.gitlab-ci-local/\n.home/\n");
    let (out, test) = test
        .anthropic_api(&fake.uri(), "sk-recording-only")
        .args(&["run", "w.toml", "--record", "cassettes", "--no-progress"])
        .run_async()
        .await;
    assert!(out.status <= 1, "{}", out.transcript());
    drop(fake);
    let (out, test) = test
        .clear_args()
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .args(&["run", "w.toml", "--replay", "cassettes", "--format", "json"])
        .run_async()
        .await;
    let local: Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.transcript()));
    let install: Vec<&str> = install.iter().map(String::as_str).collect();
    let out = Test::new()
        .args(&[
            "export",
            "gitlab-ci",
            test.path().join("w.toml").to_str().unwrap(),
            "--replay",
            "cassettes",
        ])
        .args(&install)
        .args(&[
            // gitlab-ci-local runs jobs that name an image in Docker; here they run in its shell.
            "--image",
            "none",
            "--output",
            test.path().join(".gitlab-ci.yml").to_str().unwrap(),
        ])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    // The jobs see the workflow by its path in the repository.
    let text = std::fs::read_to_string(test.path().join(".gitlab-ci.yml")).unwrap();
    let text = text.replace(test.path().join("w.toml").to_str().unwrap(), "w.toml");
    std::fs::write(test.path().join(".gitlab-ci.yml"), text).unwrap();
    // Only the pipeline's jobs leave state here from now on.
    std::fs::remove_dir_all(test.path().join(".runner")).unwrap();
    init_repo(test.path());
    (test, local)
}

/// Runs the pipeline; its exit status and log.
fn pipeline(dir: &Path) -> (bool, String) {
    pipeline_with(dir, &[])
}

/// [`pipeline`] with more of gitlab-ci-local's arguments (`--needs JOB…`, `--variable`).
fn pipeline_with(dir: &Path, more: &[String]) -> (bool, String) {
    let out = Command::new(gitlab_ci_local())
        .args(["--shell-isolation", "--concurrency", "4"])
        .args(more)
        .current_dir(dir)
        .env("HOME", dir.join(".home"))
        .env_remove("ANTHROPIC_API_KEY")
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), log)
}

/// Where in the log a job line stands (`b            starting shell`).
fn at(log: &str, job: &str, what: &str) -> usize {
    log.lines()
        .position(|l| {
            l.split_whitespace().next() == Some(job) && l.contains(what) && !l.contains(" > ")
        })
        .unwrap_or_else(|| panic!("no `{job} … {what}` in:\n{log}"))
}

/// The step records the jobs left, as artifacts copied back into the repository.
fn merged_steps(dir: &Path) -> Value {
    let runs: Vec<PathBuf> = std::fs::read_dir(dir.join(".runner/runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    // One run: the pipeline's, named by its id.
    let [run] = runs.as_slice() else {
        panic!("one run should come back as artifacts: {runs:?}")
    };
    let mut steps = serde_json::Map::new();
    for entry in std::fs::read_dir(run.join("steps")).unwrap() {
        let entry = entry.unwrap();
        let record = entry.path().join("record.json");
        if record.is_file() {
            let value: Value =
                serde_json::from_str(&std::fs::read_to_string(record).unwrap()).unwrap();
            steps.insert(entry.file_name().into_string().unwrap(), value);
        }
    }
    Value::Object(steps)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_exported_pipeline_runs_each_step_in_its_own_job_and_matches_a_local_run() {
    let (test, local) = repository(DIAMOND).await;
    let (passed, log) = tokio::task::spawn_blocking({
        let dir = test.path().to_owned();
        move || pipeline(&dir)
    })
    .await
    .unwrap();
    assert!(passed, "{log}");
    // gitlab-ci-local checks the file against GitLab's CI schema before it runs anything.
    assert!(log.contains("json schema validated"), "{log}");
    for job in ["runner-build", "a", "step-variables", "b", "c", "d"] {
        assert!(
            log.lines()
                .any(|l| l.contains("PASS") && l.split_whitespace().nth(1) == Some(job)),
            "{job} did not pass:\n{log}"
        );
    }
    // DAG order, and the two independent steps at once: both started before either finished.
    assert!(at(&log, "a", "finished in") < at(&log, "b", "starting"));
    assert!(at(&log, "a", "finished in") < at(&log, "c", "starting"));
    let first_end = at(&log, "b", "finished in").min(at(&log, "c", "finished in"));
    assert!(at(&log, "b", "starting") < first_end, "{log}");
    assert!(at(&log, "c", "starting") < first_end, "{log}");
    assert!(at(&log, "b", "finished in") < at(&log, "d", "starting"));
    assert!(at(&log, "c", "finished in") < at(&log, "d", "starting"));
    // Each job ran its own step; together they are the local run.
    let merged = merged_steps(test.path());
    for step in ["a", "b", "c", "d"] {
        let (job, here) = (&merged[step], &local["steps"][step]);
        assert_eq!(job["status"], here["status"], "{step}");
        assert_eq!(job["summary"], here["summary"], "{step}");
        assert!(job.get("reused_from").is_none(), "{step} ran in its job");
    }
    assert_eq!(merged["d"]["summary"], "d planned");
    assert_eq!(merged["variables"]["summary"], "v looked");
    assert_eq!(git(test.path(), &["status", "--porcelain"]), "");
    // The input reached the step as written: nothing of it was expanded by GitLab.
    let transcript = std::fs::read_dir(test.path().join(".runner/runs"))
        .unwrap()
        .map(|run| run.unwrap().path().join("steps/a/transcript.jsonl"))
        .find(|p| p.is_file())
        .unwrap();
    let transcript = std::fs::read_to_string(transcript).unwrap();
    assert!(
        transcript.contains("find the entry point $HOME $(id) ${CI_JOB_TOKEN} $$ end"),
        "{transcript}"
    );
    assert!(!log.contains("replay drift"), "{log}");
}

/// What a user commits: every job in an image, a pipeline only for merge requests and the
/// default branch, values GitLab reads literally, keywords renamed, pushes that start no
/// pipeline.
#[test]
fn the_gitlab_export_can_be_committed_as_it_is() {
    let out = Test::new()
        .file("w.toml", DIAMOND)
        .args(&[
            "export",
            "gitlab-ci",
            "w.toml",
            "--install",
            "cargo install --locked --git https://example.com/runner --rev $REV runner",
        ])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let text = out.stdout;
    let jobs = ["runner-build", "a", "step-variables", "b", "c", "d"];
    for job in jobs {
        let at = text
            .find(&format!("\n{job}:\n"))
            .unwrap_or_else(|| panic!("no job {job}:\n{text}"));
        let body: String = text[at + 1..]
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with(' '))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            body.contains("image: \"docker.io/library/rust:1-bookworm\""),
            "{job}:\n{body}"
        );
    }
    assert!(!text.contains("\nvariables:\n  stage"), "{text}");
    assert!(
        text.contains("  needs: [\"runner-build\", \"a\"]"),
        "{text}"
    );
    assert!(
        text.contains(
            "workflow:\n  rules:\n    - if: $CI_PIPELINE_SOURCE == \"merge_request_event\"\n    - if: $CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("  INPUT_ODD: \"$$HOME $$(id) $${CI_JOB_TOKEN} $$$$ end\""),
        "{text}"
    );
    assert!(text.contains("--rev $$REV runner"), "{text}");
    // A worktree step's branch is pushed without starting a pipeline of its own.
    let worktree = DIAMOND.replace(
        "[steps.d]\nagent = \"plan\"",
        "[steps.d]\nagent = \"code\"\nisolation = \"worktree\"",
    );
    let out = Test::new()
        .file("w.toml", &worktree)
        .args(&["export", "gitlab-ci", "w.toml", "--install", "true"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stdout.contains("git push -o ci.skip "),
        "{}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_step_fails_the_pipeline_and_its_dependents_never_run() {
    let workflow = DIAMOND.replace(
        "[steps.c]\nagent = \"explore\"\nneeds = [\"a\"]\nprompt = \"STEP-c after {{ steps.a.summary }}\"",
        "[steps.c]\nneeds = [\"a\"]\nrun = \"echo 'error: 3 tests failed' >&2; exit 4\"",
    );
    assert_ne!(workflow, DIAMOND);
    let (test, local) = repository(&workflow).await;
    assert_eq!(local["steps"]["c"]["status"], "failed");
    let (passed, log) = tokio::task::spawn_blocking({
        let dir = test.path().to_owned();
        move || pipeline(&dir)
    })
    .await
    .unwrap();
    assert!(!passed, "the pipeline passed:\n{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("FAIL") && l.split_whitespace().nth(1) == Some("c")),
        "{log}"
    );
    // The failed job's log says what failed and why.
    assert!(
        log.lines()
            .any(|l| l.starts_with("c ") && l.contains("failed: c: the command exited 4:")),
        "{log}"
    );
    assert!(log.contains("error: 3 tests failed"), "{log}");
    assert!(
        !log.lines()
            .any(|l| l.split_whitespace().next() == Some("d") && l.contains("starting")),
        "d ran:\n{log}"
    );
    let merged = merged_steps(test.path());
    assert_eq!(merged["b"]["status"], "succeeded");
    assert!(merged.get("d").is_none());
    // GitLab starts the `when: always` gather job once `d` is skipped; gitlab-ci-local waits
    // for `d` to finish, which it never does, so here the gather job is run by name after the
    // pipeline, in the same pipeline (its id), on the artifacts the jobs left.
    let run = std::fs::read_dir(test.path().join(".runner/runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .next()
        .unwrap();
    let more = [
        "runner-gather".to_owned(),
        "--variable".to_owned(),
        format!("CI_PIPELINE_ID={run}"),
    ];
    let (passed, log) = tokio::task::spawn_blocking({
        let dir = test.path().to_owned();
        move || pipeline_with(&dir, &more)
    })
    .await
    .unwrap();
    assert!(passed, "{log}");
    // It published the run: the failure, and what it stopped.
    assert!(log.contains("d: skipped: c did not succeed"), "{log}");
    let (record, text, _) = gathered(test.path());
    assert_eq!(record["status"], "failed", "{text}");
    assert_eq!(record["steps"]["c"]["status"], "failed", "{text}");
    assert_eq!(record["steps"]["d"]["status"], "skipped", "{text}");
    assert_eq!(record["steps"]["d"]["error"], "c did not succeed", "{text}");
    assert_eq!(record["steps"]["b"]["status"], "succeeded", "{text}");
}

/// Forgets the local run in `dir` (its state and branches: only the pipeline's jobs leave
/// them from now on), writes `workflow`'s export answering from `cassettes/` into
/// `.gitlab-ci.yml` (jobs in gitlab-ci-local's shell, runner copied from this build) and
/// commits everything.
async fn export_for_the_pipeline(test: Test, workflow: &str) -> Test {
    let dir = test.path().to_owned();
    std::fs::remove_dir_all(dir.join(".runner")).unwrap();
    for branch in git(
        &dir,
        &[
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/runner/",
        ],
    )
    .lines()
    {
        git(&dir, &["branch", "-D", branch]);
    }
    let install = format!(
        "mkdir -p .runner/bin && cp {} .runner/bin/runner",
        env!("CARGO_BIN_EXE_runner")
    );
    let (out, test) = test
        .clear_args()
        .args(&[
            "export",
            "gitlab-ci",
            workflow,
            "--replay",
            "cassettes",
            "--image",
            "none",
            "--install",
            &install,
            "--output",
            ".gitlab-ci.yml",
        ])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{workflow}: {}", out.transcript());
    init_repo(&dir);
    test
}

/// Copies a folder of the repository into `to`.
fn copy_into(from: &str, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let copied = Command::new("cp")
        .arg("-R")
        .arg(format!("{}/{from}/.", crate::support::REPO))
        .arg(to)
        .status()
        .unwrap();
    assert!(copied.success(), "cp {from}");
}

/// The flagship workflow as shipped, exported and run by gitlab-ci-local against the demo's
/// recorded cassettes, as docs/src/ci.md's recipe does: a command step, two searches, a plan, a
/// worktree step whose check (the project's tests, `make test`) fails once and then passes, and
/// a user agent's review, each in a job of its own. Every step's record equals a local
/// replay's. The pipeline ends green: `runner-apply`, with no remote to push to, says so and
/// passes. Each job speaks of its own step only, and the state directory the artifacts fill
/// (`.runner/`, not ignored here) is no uncommitted change.
#[tokio::test(flavor = "multi_thread")]
async fn the_flagship_workflow_runs_as_an_exported_pipeline_from_the_demo_cassettes() {
    let test = Test::new().file(".gitignore", ".gitlab-ci-local/\n.home/\n");
    let dir = test.path().to_owned();
    copy_into("demo/repo", &dir);
    copy_into("demo/cassettes", &dir.join("cassettes"));
    copy_into("agents", &dir.join("agents"));
    std::fs::create_dir_all(dir.join("workflows")).unwrap();
    std::fs::copy(
        Path::new(crate::support::REPO).join("workflows/jwt-migration.toml"),
        dir.join("workflows/jwt-migration.toml"),
    )
    .unwrap();
    init_repo(&dir);
    let (out, test) = test
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .args(&[
            "run",
            "workflows/jwt-migration.toml",
            "--replay",
            "cassettes",
            "--format",
            "json",
        ])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let local: Value = serde_json::from_str(&out.stdout).unwrap();
    let _test = export_for_the_pipeline(test, "workflows/jwt-migration.toml").await;
    let (passed, log) = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || pipeline(&dir)
    })
    .await
    .unwrap();
    assert!(passed, "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("PASS") && l.split_whitespace().nth(1) == Some("runner-apply")),
        "{log}"
    );
    assert!(
        log.contains("runner-apply: skipped: no remote to push to"),
        "{log}"
    );
    // gitlab-ci-local's summary names a failed job ` FAIL  job`; the steps' own output may say
    // FAILED (the demo's test run before the fix, quoted in a drift warning when the machine is
    // slower than the recording), so only the summary lines count.
    assert!(
        !log.lines()
            .any(|l| l.split_whitespace().next() == Some("FAIL")),
        "{log}"
    );
    assert!(!log.contains("not selected"), "{log}");
    assert!(!log.contains("uncommitted change"), "{log}");
    let merged = merged_steps(&dir);
    for step in [
        "baseline",
        "find_auth",
        "find_sessions",
        "plan",
        "implement",
        "review",
    ] {
        let (job, here) = (&merged[step], &local["steps"][step]);
        assert_eq!(job["status"], "succeeded", "{step}: {job}");
        assert_eq!(job["status"], here["status"], "{step}");
        assert_eq!(job["turns"], here["turns"], "{step}");
        assert_eq!(job["tool_calls"], here["tool_calls"], "{step}");
        assert_eq!(job["diff"], here["diff"], "{step}");
        if step != "baseline" {
            // The command step's summary is the tests' own output, timing included.
            assert_eq!(job["summary"], here["summary"], "{step}");
        }
    }
    let checks: Vec<bool> = merged["implement"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["passed"].as_bool().unwrap())
        .collect();
    assert_eq!(checks, [false, true]);
}

/// The smallest value a JSON Schema accepts (one item for each array, so a fan-out gets an
/// instance): what a scripted model answers a step that must end with JSON.
fn instance_of(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    match schema["type"].as_str().unwrap_or("object") {
        "object" => {
            let mut object = serde_json::Map::new();
            for name in schema["required"].as_array().into_iter().flatten() {
                let name = name.as_str().unwrap();
                object.insert(name.to_owned(), instance_of(&schema["properties"][name]));
            }
            Value::Object(object)
        }
        "array" => Value::Array(vec![instance_of(&schema["items"])]),
        "integer" | "number" => Value::from(1),
        "boolean" => Value::Bool(true),
        _ => Value::String("src".into()),
    }
}

/// A scripted model for any workflow: a step told to end with JSON gets the smallest value its
/// schema accepts, any other a short answer naming its prompt's start.
fn any_workflow(body: &Value) -> wiremock::ResponseTemplate {
    let system = body["system"][0]["text"].as_str().unwrap_or_default();
    let marker = "matching this JSON Schema (a ```json fenced block is fine):\n";
    if let Some(at) = system.find(marker) {
        let schema: Value = serde_json::from_str(&system[at + marker.len()..]).unwrap();
        return anthropic_text(&instance_of(&schema).to_string());
    }
    let prompt = crate::fake::prompt_of(body);
    let start: String = prompt.chars().take(24).collect();
    anthropic_text(&format!("done: {start}"))
}

/// Every other shipped workflow, recorded against a scripted model, exported and run by
/// gitlab-ci-local step by step in jobs of their own: the records the jobs leave equal a local
/// replay's. (The flagship has its own test, from the demo's cassettes.)
#[tokio::test(flavor = "multi_thread")]
async fn every_shipped_workflow_runs_as_an_exported_pipeline() {
    let fake = Fake::anthropic_fn(any_workflow).await;
    for (workflow, inputs) in [
        ("delegate.toml", vec![]),
        (
            "flaky-test-triage.toml",
            vec![("test", "tests/test_session.py")],
        ),
        ("module-review.toml", vec![]),
        ("pr-review.yaml", vec![]),
    ] {
        let test = Test::new().file(".gitignore", ".runner/\n.gitlab-ci-local/\n.home/\n");
        let dir = test.path().to_owned();
        copy_into("demo/repo", &dir);
        copy_into("workflows", &dir.join("workflows"));
        copy_into("agents", &dir.join("agents"));
        init_repo(&dir);
        let path = format!("workflows/{workflow}");
        let mut args = vec!["run", path.as_str(), "--format", "json"];
        let given: Vec<String> = inputs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for input in &given {
            args.extend(["-i", input.as_str()]);
        }
        let (out, test) = test
            .anthropic_api(&fake.uri(), "sk-recording-only")
            .args(&args)
            .args(&["--record", "cassettes"])
            .run_async()
            .await;
        assert!(out.status <= 1, "{workflow}: {}", out.transcript());
        let (out, test) = test
            .clear_args()
            .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
            .env("ANTHROPIC_API_KEY", "")
            .args(&args)
            .args(&["--replay", "cassettes", "--replay-strict"])
            .run_async()
            .await;
        let local: Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("{workflow}: {e}: {}", out.transcript()));
        let _test = export_for_the_pipeline(test, &path).await;
        // Every step's job and what it needs; not `runner-apply`, which pushes to a GitLab
        // server (there is none here).
        let steps: Vec<String> = local["steps"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let mut more = vec!["--needs".to_owned()];
        more.extend(steps.iter().cloned());
        for (k, v) in &inputs {
            more.extend([
                "--variable".to_owned(),
                format!("INPUT_{}={v}", k.to_uppercase()),
            ]);
        }
        let (passed, log) = tokio::task::spawn_blocking({
            let dir = dir.clone();
            move || pipeline_with(&dir, &more)
        })
        .await
        .unwrap();
        let local_passed = local["status"] == "succeeded";
        assert_eq!(passed, local_passed, "{workflow}:\n{log}");
        let merged = merged_steps(&dir);
        for step in &steps {
            let (job, here) = (&merged[step.as_str()], &local["steps"][step.as_str()]);
            assert_eq!(
                job["status"], here["status"],
                "{workflow} {step}: {job}\n{log}"
            );
            assert_eq!(job["summary"], here["summary"], "{workflow} {step}");
            assert_eq!(job["output"], here["output"], "{workflow} {step}");
            assert_eq!(
                job["instances"].as_array().map(Vec::len),
                here["instances"].as_array().map(Vec::len),
                "{workflow} {step}"
            );
        }
    }
}

/// This build of runner as a release in cargo-dist's layout, standing in for the GitHub
/// release: `<dir>/v<version>/agent-runner-<target>.tar.xz` holding `agent-runner-<target>/runner`
/// (the test binary, its debug symbols stripped to keep the archive small). Returns the
/// export flags that install it: the folder as `--release-url`, its SHA-256 as computed here.
fn release_of_this_build(dir: &Path, sha256: Option<&str>) -> Vec<String> {
    use sha2::Digest as _;
    let target = match std::env::consts::ARCH {
        "x86_64" => "x86_64-unknown-linux-musl",
        "aarch64" => "aarch64-unknown-linux-musl",
        other => panic!("runner is released for x86_64 and aarch64, not {other}"),
    };
    let folder = format!("agent-runner-{target}");
    let stage = dir.join("stage").join(&folder);
    std::fs::create_dir_all(&stage).unwrap();
    let stripped = Command::new("strip")
        .arg("-o")
        .arg(stage.join("runner"))
        .arg(env!("CARGO_BIN_EXE_runner"))
        .status();
    if !stripped.is_ok_and(|s| s.success()) {
        std::fs::copy(env!("CARGO_BIN_EXE_runner"), stage.join("runner")).unwrap();
    }
    let version = dir.join(format!("v{}", env!("CARGO_PKG_VERSION")));
    std::fs::create_dir_all(&version).unwrap();
    let archive = version.join(format!("{folder}.tar.xz"));
    let packed = Command::new("tar")
        .arg("-cJf")
        .arg(&archive)
        .arg("-C")
        .arg(dir.join("stage"))
        .arg(&folder)
        .env("XZ_OPT", "-0")
        .status()
        .unwrap();
    assert!(packed.success(), "tar -cJf {}", archive.display());
    let sum = sha2::Sha256::digest(std::fs::read(&archive).unwrap());
    let sum: String = sum.iter().map(|b| format!("{b:02x}")).collect();
    // What cargo-dist publishes beside it: the job must not be the one to trust it.
    std::fs::write(
        version.join(format!("{folder}.tar.xz.sha256")),
        format!("{sum}  {folder}.tar.xz\n"),
    )
    .unwrap();
    vec![
        "--release-url".to_owned(),
        format!("file://{}", dir.display()),
        "--release-sha256".to_owned(),
        format!("{target}={}", sha256.unwrap_or(&sum)),
    ]
}

/// The one run the gather job published, as gitlab-ci-local keeps its artifacts
/// (`.gitlab-ci-local/artifacts/runner-gather/`): its `run.json` and the report.
fn gathered(dir: &Path) -> (Value, String, String) {
    let artifacts = dir.join(".gitlab-ci-local/artifacts/runner-gather");
    let runs: Vec<PathBuf> = std::fs::read_dir(artifacts.join(".runner/runs"))
        .unwrap_or_else(|e| panic!("{}: {e}", artifacts.display()))
        .map(|e| e.unwrap().path())
        .collect();
    let [run] = runs.as_slice() else {
        panic!("one run should be published: {runs:?}")
    };
    let text = std::fs::read_to_string(run.join("run.json")).unwrap();
    let record: Value = serde_json::from_str(&text).unwrap();
    let report = std::fs::read_to_string(artifacts.join(".runner/report.html")).unwrap();
    (record, text, report)
}

/// The default install, run for real: the first job downloads this version's release archive
/// (a local folder stands in for the GitHub release), checks it against the SHA-256 written
/// into the pipeline, and every step job runs that binary; nothing is built. The last job
/// gathers every job's records into one run and publishes `run.json` and the report.
#[tokio::test(flavor = "multi_thread")]
async fn the_pipeline_installs_the_checked_release_and_its_last_job_publishes_one_run() {
    let release = tempfile::tempdir().unwrap();
    let flags = release_of_this_build(release.path(), None);
    let (test, local) = repository_installing(DIAMOND, &flags).await;
    let yml = std::fs::read_to_string(test.path().join(".gitlab-ci.yml")).unwrap();
    assert!(!yml.contains("cargo install"), "{yml}");
    assert!(!yml.contains("RUNNER_INSTALL"), "{yml}");
    let (passed, log) = tokio::task::spawn_blocking({
        let dir = test.path().to_owned();
        move || pipeline(&dir)
    })
    .await
    .unwrap();
    assert!(passed, "{log}");
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        log.contains(&format!(
            "runner-build: downloading runner {version}: agent-runner-"
        )),
        "{log}"
    );
    // sha256sum checked it, and the binary it unpacked runs.
    assert!(log.contains(".tar.xz: OK"), "{log}");
    assert!(log.contains(&format!("runner {version}")), "{log}");
    assert!(!log.contains("cargo install"), "{log}");
    for job in [
        "runner-build",
        "a",
        "step-variables",
        "b",
        "c",
        "d",
        "runner-gather",
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains("PASS") && l.split_whitespace().nth(1) == Some(job)),
            "{job} did not pass:\n{log}"
        );
    }
    // The gather job ran last, after every step's job.
    for job in ["a", "step-variables", "b", "c", "d"] {
        assert!(at(&log, job, "finished in") < at(&log, "runner-gather", "starting"));
    }
    let (record, text, report) = gathered(test.path());
    // One run, every step in it as the local run had it.
    assert_eq!(record["status"], "succeeded", "{text}");
    assert_eq!(record["status"], local["status"]);
    let steps = record["steps"].as_object().unwrap();
    assert_eq!(steps.len(), 5, "{text}");
    for step in ["a", "variables", "b", "c", "d"] {
        assert_eq!(record["steps"][step]["status"], "succeeded", "{step}");
        assert_eq!(
            record["steps"][step]["summary"], local["steps"][step]["summary"],
            "{step}"
        );
    }
    assert_eq!(record["needs"]["d"], serde_json::json!(["b", "c"]));
    // Made of other machines' records: not sealed as this user's.
    assert!(!text.contains("recorded_by"), "{text}");
    assert!(
        report.contains("<html") && report.contains("d planned"),
        "{report}"
    );
}

/// An archive that is not the one the pipeline was exported with fails the install job, says
/// why, and no step runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_release_archive_with_another_sha256_fails_the_install_and_runs_no_step() {
    let release = tempfile::tempdir().unwrap();
    let wrong = "0".repeat(64);
    let flags = release_of_this_build(release.path(), Some(&wrong));
    let (test, _) = repository_installing(DIAMOND, &flags).await;
    let (passed, log) = tokio::task::spawn_blocking({
        let dir = test.path().to_owned();
        move || pipeline(&dir)
    })
    .await
    .unwrap();
    assert!(!passed, "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("FAIL") && l.split_whitespace().nth(1) == Some("runner-build")),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "does not have the SHA-256 this pipeline was exported with ({wrong}): not installing it"
        )),
        "{log}"
    );
    for job in ["a", "step-variables", "b", "c", "d"] {
        assert!(
            !log.lines()
                .any(|l| l.split_whitespace().next() == Some(job) && l.contains("starting")),
            "{job} ran:\n{log}"
        );
    }
    assert!(!test.path().join(".runner/runs").exists());
}
