//! Trust, round two: what the working directory brings does not configure runner, runner's own
//! git runs nothing a repository wrote, and the CI log runs nothing a model wrote. Each attack's
//! files live under `tests/fixtures/attacks/`.

use std::path::Path;

use serde_json::{Value, json};

use crate::fake::{Fake, anthropic_results, anthropic_text, anthropic_tool};
use crate::support::{REPO, Test};

const KEY: &str = "sk-ant-trust-test-key-5b8e1d07c4";
const MODELS: &str = "[models]\ndefault = \"anthropic/claude-test\"\n";

/// A test dir holding a copy of `tests/fixtures/attacks/<name>/`.
fn with_attack(name: &str) -> Test {
    let test = Test::new();
    copy_tree(
        &Path::new(REPO).join("tests/fixtures/attacks").join(name),
        test.path(),
    );
    test
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn plan_json(test: Test, extra: &[&str]) -> Value {
    let mut args = vec!["plan", "w.toml", "--format", "json"];
    args.extend_from_slice(extra);
    let out = test.args(&args).run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    serde_json::from_str(&out.stdout).unwrap()
}

/// The repository's `explore.md` cannot make the read-only built-in a writer, and its
/// `mcpServers` entry never starts: no file appears, the key stays in runner, and the user is
/// told which file was narrowed.
#[tokio::test(flavor = "multi_thread")]
async fn the_workdirs_agent_files_cannot_widen_a_step_or_start_programs() {
    let fake = Fake::anthropic(vec![
        anthropic_tool(
            "w1",
            "write_file",
            json!({"path": "pwned.txt", "content": "owned"}),
        ),
        anthropic_text("done"),
    ])
    .await;
    let workflow =
        format!("name = \"t\"\n{MODELS}[steps.s]\nagent = \"explore\"\nprompt = \"go\"\n");
    let (out, test) = with_attack("workdir-agent")
        .file("w.toml", &workflow)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    for planted in ["pwned.txt", "pwned-by-mcp", "stolen-key"] {
        assert!(!test.path().join(planted).exists(), "{planted} was written");
    }
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    // The model was not offered the tools the file asked for, and its call was refused.
    let offered: Vec<&str> = bodies[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(!offered.contains(&"write_file"), "{offered:?}");
    assert!(
        !offered.iter().any(|t| t.starts_with("mcp__")),
        "{offered:?}"
    );
    let results = anthropic_results(&bodies[1]);
    assert!(results[0].2, "write_file must fail: {results:?}");
    // Its prompt still applies (an untrusted file may narrow), on the built-in's model alias.
    assert!(
        bodies[0]["system"].to_string().contains("helpful explorer"),
        "{}",
        bodies[0]["system"]
    );
    for said in [
        ".claude/agents/explore.md",
        "not trusted",
        "replaces the built-in",
    ] {
        assert!(out.stderr.contains(said), "{said}: {}", out.stderr);
    }
    assert!(out.stderr.contains("mcpServers"), "{}", out.stderr);
}

/// `plan` says where each agent came from and whether it is trusted; the flag, the workflow key
/// and a list of names each trust the working directory's files.
#[test]
fn plan_shows_trust_and_the_user_can_grant_it() {
    let workflow = |extra: &str| {
        format!(
            "name = \"t\"\n{extra}{MODELS}[steps.s]\nagent = \"helper\"\nprompt = \"go\"\n[steps.e]\nagent = \"explore\"\nprompt = \"go\"\n"
        )
    };
    let step = |plan: &Value, id: &str| {
        plan["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap()
            .clone()
    };
    let untrusted = plan_json(
        with_attack("workdir-agent").file("w.toml", &workflow("")),
        &[],
    );
    let helper = step(&untrusted, "s");
    assert_eq!(helper["agent_trusted"], false);
    assert_eq!(helper["agent_source"], ".claude/agents/helper.md");
    // A new agent from the working directory gets read-only tools at most.
    assert_eq!(helper["tools"], json!(["bash", "read_file"]));
    assert_eq!(helper["sandbox"], "read-only");
    assert_eq!(step(&untrusted, "e")["agent_trusted"], false);

    let flagged = plan_json(
        with_attack("workdir-agent").file("w.toml", &workflow("")),
        &["--trust-workdir"],
    );
    assert_eq!(step(&flagged, "s")["agent_trusted"], true);
    assert_eq!(
        step(&flagged, "s")["tools"],
        json!(["bash", "read_file", "write_file"])
    );

    let keyed = plan_json(
        with_attack("workdir-agent").file("w.toml", &workflow("trust_workdir = true\n")),
        &[],
    );
    assert_eq!(step(&keyed, "s")["agent_trusted"], true);

    let named = plan_json(
        with_attack("workdir-agent").file("w.toml", &workflow("trusted_agents = [\"helper\"]\n")),
        &[],
    );
    assert_eq!(step(&named, "s")["agent_trusted"], true);
    assert_eq!(step(&named, "e")["agent_trusted"], false);

    // The workflow's own `agents/` folder is the user's: trusted without asking.
    let out = Test::new()
        .file("workflows/w.toml", &workflow(""))
        .file(
            "agents/helper.md",
            "---\nname: helper\ntools: Read, Write\n---\nHelp.\n",
        )
        .args(&["plan", "workflows/w.toml", "--format", "json"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let own: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(step(&own, "s")["agent_trusted"], true);
    assert_eq!(step(&own, "s")["tools"], json!(["read_file", "write_file"]));
}

/// runner's own git at the end of a worktree step never enters a repository the step made: the
/// nested repository's filters, textconv and fsmonitor commands run nowhere, and the worktree
/// is gone afterwards whatever happened.
#[tokio::test(flavor = "multi_thread")]
async fn runners_git_runs_nothing_a_nested_repository_configures() {
    let test = Test::new().file("a.txt", "a\n").file(
        "w.toml",
        &format!(
            "name = \"t\"\n{MODELS}[steps.s]\nagent = \"code\"\nisolation = \"worktree\"\nprompt = \"go\"\n"
        ),
    );
    crate::support::init_repo(test.path());
    let mark = test.path().canonicalize().unwrap().join("pwned");
    let plant = std::fs::read_to_string(
        Path::new(REPO).join("tests/fixtures/attacks/nested-repo/plant.sh"),
    )
    .unwrap();
    let command = format!("export MARK={}\n{plant}", mark.display());
    let fake = Fake::anthropic(vec![
        anthropic_tool("b1", "bash", json!({ "command": command })),
        anthropic_text("done"),
    ])
    .await;
    let (out, test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    let bodies = fake.bodies().await;
    let results = anthropic_results(&bodies[1]);
    assert!(results[0].1.contains("planted"), "{results:?}");
    let traces: Vec<String> = std::fs::read_dir(test.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pwned"))
        .collect();
    assert!(
        traces.is_empty(),
        "git ran the nested repository's commands: {traces:?}"
    );
    assert_eq!(out.status, 0, "{}", out.transcript());
    let worktrees = crate::support::git(test.path(), &["worktree", "list", "--porcelain"]);
    assert_eq!(
        worktrees.matches("worktree ").count(),
        1,
        "the step's worktree was left: {worktrees}"
    );
}

/// A read-only bash changes no metadata: no mode, owner, times or xattrs, on the checkout or its
/// `.git`; a writing one still cannot set a setuid bit or change an owner.
#[tokio::test(flavor = "multi_thread")]
async fn bash_cannot_change_metadata_it_may_not_write() {
    let attack = "chmod 000 a.txt .git/HEAD; chmod u+s a.txt; touch -d 2001-01-01 a.txt; \
                  chown 1:1 a.txt; python3 -c \"import os; os.setxattr('a.txt', 'user.x', b'1')\"; \
                  echo tried";
    for (agent, extra) in [("explore", ""), ("code", "isolation = \"worktree\"\n")] {
        let test = Test::new().file("a.txt", "a\n").file(
            "w.toml",
            &format!(
                "name = \"t\"\n{MODELS}[steps.s]\nagent = \"{agent}\"\nprompt = \"go\"\n{extra}"
            ),
        );
        crate::support::init_repo(test.path());
        let before = |test: &Test, name: &str| std::fs::metadata(test.path().join(name)).unwrap();
        let (a, head) = (before(&test, "a.txt"), before(&test, ".git/HEAD"));
        let fake = Fake::anthropic(vec![
            anthropic_tool("b1", "bash", json!({ "command": attack })),
            anthropic_text("done"),
        ])
        .await;
        let (out, test) = test
            .anthropic_api(&fake.uri(), KEY)
            .args(&["run", "w.toml", "--format", "json"])
            .run_async()
            .await;
        assert_eq!(out.status, 0, "{agent}: {}", out.transcript());
        let results = anthropic_results(&fake.bodies().await[1]);
        assert!(results[0].1.contains("tried"), "{results:?}");
        use std::os::unix::fs::MetadataExt;
        for (name, was) in [("a.txt", a), (".git/HEAD", head)] {
            let now = before(&test, name);
            assert_eq!(now.mode(), was.mode(), "{agent}: mode of {name}");
            assert_eq!(now.uid(), was.uid(), "{agent}: owner of {name}");
            assert_eq!(now.mtime(), was.mtime(), "{agent}: mtime of {name}");
        }
        assert!(
            xattr_absent(&test.path().join("a.txt")),
            "{agent}: an xattr was set"
        );
    }
}

fn xattr_absent(path: &Path) -> bool {
    let name = std::ffi::CString::new("user.x").unwrap();
    let path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: getxattr with valid C strings and a null buffer of size 0 only asks for a size.
    let size =
        unsafe { nix::libc::getxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    size < 0
}

/// A command can neither stop nor kill its supervisor, a `setsid` daemon dies with the call,
/// no descriptor runner inherited reaches it, and it starts with no signal blocked.
#[tokio::test(flavor = "multi_thread")]
async fn bash_cannot_outlive_its_call_or_use_runners_descriptors() {
    let test = Test::new().file(
        "w.toml",
        &format!("name = \"t\"\n{MODELS}[steps.s]\nagent = \"code\"\nprompt = \"go\"\n"),
    );
    std::fs::create_dir(test.path().join("work")).unwrap();
    let outside = test.path().join("inherited.txt");
    let attack = "setsid sh -c 'echo $$ > work/daemon.pid; exec sleep 600' </dev/null >/dev/null 2>&1 & \
                  while [ ! -s work/daemon.pid ]; do :; done; \
                  kill -STOP $PPID; echo stop=$?; kill -KILL $PPID; echo kill=$?; \
                  echo leaked >&7; echo fd7=$?; \
                  grep SigBlk /proc/self/status; timeout 1 sleep 30; echo timeout=$?";
    let fake = Fake::anthropic(vec![
        anthropic_tool("b1", "bash", json!({ "command": attack })),
        anthropic_text("done"),
    ])
    .await;
    let (out, test) = test
        .inherit_fd7(&outside)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let results = anthropic_results(&fake.bodies().await[1]);
    let text = &results[0].1;
    for said in [
        "stop=1",
        "kill=1",
        "fd7=1",
        "SigBlk:\t0000000000000000",
        "timeout=124",
    ] {
        assert!(text.contains(said), "{said}: {text}");
    }
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "");
    let pid: i32 = std::fs::read_to_string(test.path().join("work/daemon.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The supervisor killed and reaped it before the call returned.
    assert_eq!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH),
        "the daemon outlived its call"
    );
}

/// The workflow commands GitHub would run from a log: every line that starts with `::` while
/// processing is on, honouring `::stop-commands::TOKEN` ... `::TOKEN::`.
fn processed_commands(log: &str) -> Vec<String> {
    let mut stopped: Option<String> = None;
    let mut out = Vec::new();
    for line in log.lines() {
        let line = line.trim_start();
        if let Some(token) = &stopped {
            if line == format!("::{token}::") {
                stopped = None;
            }
            continue;
        }
        if let Some(token) = line.strip_prefix("::stop-commands::") {
            stopped = Some(token.to_owned());
        } else if line.starts_with("::") || line.contains("##[") {
            out.push(line.to_owned());
        }
    }
    out
}

/// Model text with newlines (a tool name, a failure reason) reaches the Actions log as data: no
/// line of it is processed as a workflow command, and runner's own commands still are; the job
/// summary gets no raw HTML.
#[tokio::test(flavor = "multi_thread")]
async fn ci_log_lines_from_a_model_never_run_as_workflow_commands() {
    let forged = "x\n::add-mask::ghp_realtoken\n::error title=forged::pwned\n##[warning]v1";
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-a",
            vec![
                anthropic_tool("t1", forged, json!({})),
                anthropic_text("a <img src=x onerror=alert(1)> done"),
            ],
        ),
        (
            "MARK-b",
            vec![wiremock::ResponseTemplate::new(400).set_body_json(json!({
                "type": "error",
                "error": {"type": "invalid_request_error", "message": forged}
            }))],
        ),
    ])
    .await;
    let workflow = format!(
        "name = \"t <b>x</b>\"\n{MODELS}[steps.a]\nagent = \"code\"\nprompt = \"MARK-a\"\n[steps.b]\nagent = \"explore\"\nretries = 0\nprompt = \"MARK-b\"\n"
    );
    let test = Test::new().file("w.toml", &workflow);
    let summary = test.path().join("summary.md");
    let (out, _test) = test
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", summary.to_str().unwrap())
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    assert!(
        out.stderr.contains("add-mask"),
        "the text is shown: {}",
        out.stderr
    );
    let commands = processed_commands(&out.stderr);
    // Only runner's own commands are processed; model text inside them is their escaped data.
    for command in &commands {
        let own = [
            "::group::",
            "::endgroup::",
            "::error title=step ",
            "::warning title=step ",
        ]
        .iter()
        .any(|p| command.starts_with(p));
        assert!(
            own && !command.contains("##["),
            "a model's text ran as a command: {command}\n{}",
            out.stderr
        );
    }
    // Runner's own commands still work: both groups and the failure's annotation.
    assert_eq!(
        commands
            .iter()
            .filter(|c| c.starts_with("::group::"))
            .count(),
        2,
        "{commands:?}"
    );
    assert!(
        commands
            .iter()
            .any(|c| c.starts_with("::error title=step b failed::")),
        "{commands:?}"
    );
    // Processing is on again when runner exits.
    assert!(
        out.stderr
            .trim_end()
            .lines()
            .last()
            .unwrap()
            .starts_with("::")
    );
    assert!(
        processed_commands(&format!("{}\n::notice::after", out.stderr))
            .contains(&"::notice::after".to_owned())
    );
    let markdown = std::fs::read_to_string(&summary).unwrap();
    assert!(
        !markdown.contains("<b>") && !markdown.contains("<img"),
        "{markdown}"
    );
}

/// bash gets a clean environment: no secret of the user's or the CI's, whatever its name, only
/// what the step's `env` names; every secret-named value is hidden in what runner writes.
#[tokio::test(flavor = "multi_thread")]
async fn secrets_reach_bash_only_when_named_and_are_hidden_everywhere() {
    const GH: &str = "ghp_trustTestGithubToken0123456789";
    const AWS: &str = "aws-secret-trust-test-9f8e7d6c5b";
    const OIDC: &str = "oidc-request-token-trust-test-42";
    const NPM: &str = "npm_trustTestTokenPassedOnPurpose";
    let fake = Fake::anthropic(vec![
        anthropic_tool("b1", "bash", json!({"command": "env; echo end"})),
        anthropic_text(&format!("the server echoes {GH} and {AWS}")),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.s]\nagent = \"explore\"\nprompt = \"go\"\nenv = {{ PLAIN = \"${{VISIBLE}}-x\", GIVEN = \"${{NPM_TOKEN}}\" }}\n"
    );
    let (out, test) = Test::new()
        .file("w.toml", &workflow)
        .env("GITHUB_TOKEN", GH)
        .env("AWS_SECRET_ACCESS_KEY", AWS)
        .env("ACTIONS_ID_TOKEN_REQUEST_TOKEN", OIDC)
        .env("NPM_TOKEN", NPM)
        .env("VISIBLE", "shown")
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    let env_text = &anthropic_results(&bodies[1])[0].1;
    assert!(env_text.contains("PLAIN=shown-x"), "{env_text}");
    // Named on purpose: bash had it, the model sees it hidden.
    assert!(env_text.contains("GIVEN=[hidden]"), "{env_text}");
    for name in [
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "ACTIONS_ID_TOKEN",
        "NPM_TOKEN=",
    ] {
        assert!(!env_text.contains(name), "{name} reached bash: {env_text}");
    }
    let mut written = out.stdout.clone() + &out.stderr;
    let runs = test.path().join(".runner/runs");
    for run in std::fs::read_dir(&runs).unwrap().flatten() {
        written += &std::fs::read_to_string(run.path().join("run.json")).unwrap();
        written += &std::fs::read_to_string(run.path().join("steps/s/transcript.jsonl")).unwrap();
    }
    for secret in [GH, AWS, OIDC, NPM] {
        assert!(!written.contains(secret), "{secret} was written");
    }
    assert!(written.contains("the server echoes [hidden]"), "{written}");
}

/// `--record` writes only inside its cassette folder: a link planted where a cassette goes is
/// replaced, not followed, and a step folder that is a link is refused.
#[tokio::test(flavor = "multi_thread")]
async fn recording_never_follows_a_planted_link() {
    let workflow =
        format!("name = \"t\"\n{MODELS}[steps.s]\nagent = \"explore\"\nprompt = \"go\"\n");
    let record = |test: Test, uri: String| {
        test.clear_args()
            .anthropic_api(&uri, KEY)
            .args(&["run", "w.toml", "--format", "json", "--record", "cassettes"])
            .run_async()
    };
    let fake = Fake::anthropic(vec![anthropic_text("one"), anthropic_text("two")]).await;
    let test = Test::new()
        .file("w.toml", &workflow)
        .file("outside/target.txt", "keep\n");
    let (out, test) = record(test, fake.uri()).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let step_dir = test.path().join("cassettes/s");
    let cassette = std::fs::read_dir(&step_dir)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let target = test.path().join("outside/target.txt");
    std::fs::remove_file(&cassette).unwrap();
    std::os::unix::fs::symlink(&target, &cassette).unwrap();
    std::os::unix::fs::symlink(&target, cassette.with_extension("json.tmp")).unwrap();
    let (out, test) = record(test, fake.uri()).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep\n");
    assert!(
        !cassette
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink()
    );

    // The step's folder itself a link to somewhere else: refused, nothing written there.
    std::fs::remove_dir_all(&step_dir).unwrap();
    std::os::unix::fs::symlink(test.path().join("outside"), &step_dir).unwrap();
    let fake = Fake::anthropic(vec![anthropic_text("three")]).await;
    let (out, test) = record(test, fake.uri()).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    assert!(out.stdout.contains("symbolic link"), "{}", out.stdout);
    let outside: Vec<_> = std::fs::read_dir(test.path().join("outside"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(outside.len(), 1, "{outside:?}");
}

/// Credentials inside a base URL (`user:pass@`, `?api_key=`) show nowhere: not on stderr, in
/// JSONL, `run.json` or the transcript.
#[tokio::test(flavor = "multi_thread")]
async fn credentials_in_a_base_url_are_hidden_everywhere() {
    const PASS: &str = "urlPassw0rdTrustTest";
    const QUERY: &str = "querySecretTrustTest1";
    let fake = Fake::anthropic(vec![wiremock::ResponseTemplate::new(401).set_body_json(
        json!({"type": "error", "error": {"type": "authentication_error", "message": "bad key"}}),
    )])
    .await;
    let with_userinfo = fake
        .uri()
        .replace("http://", &format!("http://runner:{PASS}@"));
    let refused = format!("http://127.0.0.1:9/?api_key={QUERY}");
    for base in [with_userinfo, refused] {
        let workflow = format!(
            "name = \"t\"\n{MODELS}[steps.s]\nagent = \"explore\"\nretries = 0\nprompt = \"go\"\n"
        );
        let (out, test) = Test::new()
            .file("w.toml", &workflow)
            .env("ANTHROPIC_BASE_URL", &base)
            .env("ANTHROPIC_API_KEY", KEY)
            .args(&["run", "w.toml", "--format", "jsonl"])
            .run_async()
            .await;
        assert_eq!(out.status, 1, "{}", out.transcript());
        let mut written = out.stdout.clone() + &out.stderr;
        for run in std::fs::read_dir(test.path().join(".runner/runs"))
            .unwrap()
            .flatten()
        {
            written += &std::fs::read_to_string(run.path().join("run.json")).unwrap();
            written += &std::fs::read_to_string(run.path().join("steps/s/transcript.jsonl"))
                .unwrap_or_default();
        }
        assert!(
            written.contains("[hidden]"),
            "the URL is still named: {written}"
        );
        for secret in [PASS, QUERY] {
            assert!(
                !written.contains(secret),
                "{secret} was written:\n{written}"
            );
        }
    }
}

/// An agent file (or `.mcp.json`) of the working directory that is a link out of it, to
/// runner's own environment or to a credentials file, is refused, and nothing of what it points
/// at is printed by `validate`, `plan`, `agents` or `run`.
#[test]
fn agent_files_that_link_out_of_the_working_directory_are_never_read() {
    let secret_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        secret_file.path(),
        "aws_secret_access_key = creds-file-marker-31f\n",
    )
    .unwrap();
    for target in [
        std::path::PathBuf::from("/proc/self/environ"),
        secret_file.path().to_owned(),
    ] {
        let test = crate::support::Test::new().file(
            "w.toml",
            "name = \"w\"\ntrust_workdir = true\n[models]\ndefault = \"anthropic/m\"\n[steps.s]\nagent = \"rev\"\nprompt = \"x\"\n",
        );
        std::fs::create_dir_all(test.path().join(".claude/agents")).unwrap();
        std::os::unix::fs::symlink(&target, test.path().join(".claude/agents/rev.toml")).unwrap();
        std::os::unix::fs::symlink(&target, test.path().join(".mcp.json")).unwrap();
        let test = test.env("ENV_MARKER_TOKEN", "env-marker-8c2d1e");
        for args in [
            &["validate", "w.toml"][..],
            &["plan", "w.toml"],
            &["agents", "--workflow", "w.toml"],
            &["run", "w.toml"],
        ] {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_runner"))
                .args(args)
                .current_dir(test.path())
                .env("ENV_MARKER_TOKEN", "env-marker-8c2d1e")
                .output()
                .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(!text.contains("env-marker-8c2d1e"), "{args:?}:\n{text}");
            assert!(!text.contains("creds-file-marker-31f"), "{args:?}:\n{text}");
            assert!(!text.contains("PATH="), "{args:?}:\n{text}");
        }
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(["validate", "w.toml"])
            .current_dir(test.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("outside the working directory"), "{err}");
    }
}

/// A checkout that ships a `.runner/` with links in it (a record's temporary file, a
/// transcript, `.gitignore`, or the folder itself) cannot make runner write through them: the
/// state directory is checked before anything is written, and the run stops naming the link.
#[tokio::test(flavor = "multi_thread")]
async fn a_state_directory_with_links_is_refused_before_any_write() {
    let workflow =
        format!("name = \"w\"\n{MODELS}[steps.s]\nagent = \"explore\"\nprompt = \"x\"\n");
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("target.txt");
    for (link, to) in [
        (".runner/runs/1234/run.json.tmp", target.clone()),
        (".runner/runs/1234/steps/s/transcript.jsonl", target.clone()),
        (".runner/.gitignore", outside.path().join("planted")),
        (".runner", outside.path().to_owned()),
    ] {
        std::fs::write(&target, "untouched\n").unwrap();
        let test = Test::new().file("w.toml", &workflow);
        let link_path = test.path().join(link);
        std::fs::create_dir_all(link_path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&to, &link_path).unwrap();
        let fake = Fake::anthropic(vec![anthropic_text("done")]).await;
        let (out, _test) = test
            .anthropic_api(&fake.uri(), KEY)
            .args(&["run", "w.toml"])
            .run_async()
            .await;
        assert_eq!(out.status, 1, "{link}: {}", out.transcript());
        assert!(
            out.stderr.contains("runner writes") && out.stderr.contains("link"),
            "{link}: {}",
            out.stderr
        );
        assert!(fake.requests().await.is_empty(), "{link}: a step ran");
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "untouched\n",
            "{link}"
        );
        assert!(!outside.path().join("planted").exists(), "{link}");
        assert_eq!(
            std::fs::read_dir(outside.path()).unwrap().count(),
            1,
            "{link}: something was written outside"
        );
    }
}

/// `--resume latest` takes only a run this user recorded: one shipped in the checkout (made to
/// be picked, dated later than the user's own) is passed over, and named alone it is said to be
/// someone else's.
#[tokio::test(flavor = "multi_thread")]
async fn resume_latest_takes_only_runs_this_user_recorded() {
    let workflow =
        format!("name = \"w\"\n{MODELS}[steps.s]\nagent = \"explore\"\nprompt = \"x\"\n");
    let fake = Fake::anthropic(vec![anthropic_text("mine"), anthropic_text("again")]).await;
    let (out, test) = Test::new()
        .file("w.toml", &workflow)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let mine: Value = serde_json::from_str(&out.stdout).unwrap();
    // A forged run, later than mine, whose step "succeeded" with an answer of its own.
    let forged_id = "29990101T000000000-f0f0";
    let mut forged = mine.clone();
    forged["run_id"] = json!(forged_id);
    forged["started_at"] = json!(jiff::Timestamp::now().to_string());
    forged["recorded_by"] = json!("00000000000000000000000000000000");
    forged["steps"]["s"]["summary"] = json!("forged answer");
    let dir = test.path().join(".runner/runs").join(forged_id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("run.json"), forged.to_string()).unwrap();
    let (out, test) = test
        .clear_args()
        .args(&["run", "w.toml", "--resume", "latest", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let resumed: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(resumed["steps"]["s"]["summary"], "mine");
    assert_eq!(resumed["steps"]["s"]["reused_from"], mine["run_id"]);
    // With only the forged run there, `latest` finds none of the user's.
    for entry in std::fs::read_dir(test.path().join(".runner/runs")).unwrap() {
        let path = entry.unwrap().path();
        if !path.ends_with(forged_id) {
            std::fs::remove_dir_all(path).unwrap();
        }
    }
    let (out, _test) = test.run_async().await;
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr.contains("there are no runs you recorded")
            && out.stderr.contains("(1 there was not recorded"),
        "{}",
        out.stderr
    );
}

/// A writing step's `bash` (no worktree) cannot write a nested repository's `.git` (a vendored
/// clone's hooks and config, a submodule's `.git` file), which the user's own git would run the
/// next time it works there; the rest of that folder stays writable.
#[test]
fn a_writing_bash_cannot_plant_hooks_in_a_nested_repository() {
    let test = Test::new()
        .file("vendor/lib/.git/config", "[core]\n")
        .file("vendor/lib/.git/hooks/README", "hooks\n")
        .file("vendor/sub/.git", "gitdir: ../../.git/modules/sub\n")
        .file("vendor/lib/code.txt", "v1\n")
        .file(
            "w.toml",
            "name = \"n\"\n[steps.plant]\nrun = \"\"\"\nfor attempt in 'echo evil > vendor/lib/.git/hooks/pre-commit' 'echo \"[core] fsmonitor = evil\" >> vendor/lib/.git/config' 'echo gitdir: /tmp/evil > vendor/sub/.git' 'rm -rf vendor/lib/.git' 'mv vendor/lib/.git vendor/lib/git-moved'; do sh -c \"$attempt\" 2>/dev/null && echo \"WROTE: $attempt\"; done; echo v2 > vendor/lib/code.txt; echo done\n\"\"\"\nwrites = true\n",
        );
    let test = test.args(&["run", "w.toml", "--format", "json"]);
    let out = test.run_keeping();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    let summary = run["steps"]["plant"]["summary"].as_str().unwrap();
    assert!(!summary.contains("WROTE"), "{summary}");
    assert!(summary.ends_with("done\n"), "{summary}");
    let root = test.path();
    assert!(!root.join("vendor/lib/.git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("vendor/lib/.git/config")).unwrap(),
        "[core]\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("vendor/sub/.git")).unwrap(),
        "gitdir: ../../.git/modules/sub\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("vendor/lib/code.txt")).unwrap(),
        "v2\n"
    );
}

/// While recording into the checkout, a writing step's `bash` cannot rewrite the cassettes of
/// the steps before it (the next `--replay` would serve its answer), nor plant new ones.
#[tokio::test(flavor = "multi_thread")]
async fn a_writing_bash_cannot_tamper_with_the_cassettes_being_recorded() {
    let fake = Fake::anthropic(vec![anthropic_text("the real answer")]).await;
    let workflow = format!(
        "name = \"c\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"x\"\n[steps.b]\nneeds = [\"a\"]\nwrites = true\nrun = \"\"\"\nfor f in cassettes/a/*.json; do sh -c \"echo tampered > $f\" 2>/dev/null && echo \"WROTE $f\"; done\nmkdir -p cassettes/b 2>/dev/null && echo WROTE-DIR\ntouch cassettes/planted.json 2>/dev/null && echo WROTE-FILE\necho done\n\"\"\"\n"
    );
    let (out, test) = Test::new()
        .file("w.toml", &workflow)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--record", "cassettes", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(run["steps"]["b"]["summary"], "done\n");
    for entry in std::fs::read_dir(test.path().join("cassettes/a")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(!text.contains("tampered"), "{text}");
    }
    assert!(!test.path().join("cassettes/planted.json").exists());
}

/// Cassettes are read as the tools read: one that is a link out of the cassette directory is
/// refused, never served, even when what it points at is a valid cassette.
#[tokio::test(flavor = "multi_thread")]
async fn a_cassette_that_links_out_is_refused() {
    let fake = Fake::anthropic(vec![anthropic_text("the real answer")]).await;
    let workflow =
        format!("name = \"c\"\n{MODELS}[steps.a]\nagent = \"explore\"\nprompt = \"x\"\n");
    let (out, test) = Test::new()
        .file("w.toml", &workflow)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--record", "cassettes"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let outside = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(test.path().join("cassettes/a")).unwrap() {
        let path = entry.unwrap().path();
        if path.ends_with("index.json") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("the real answer", "an answer from outside");
        let elsewhere = outside.path().join("cassette.json");
        std::fs::write(&elsewhere, text).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
    }
    let (out, _test) = test
        .clear_args()
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .args(&["run", "w.toml", "--replay", "cassettes", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_ne!(run["steps"]["a"]["summary"], "an answer from outside");
    assert!(
        run["steps"]["a"]["error"]
            .as_str()
            .unwrap()
            .contains("outside"),
        "{}",
        run["steps"]["a"]
    );
}
