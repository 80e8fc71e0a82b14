//! MCP servers (docs/src/mcp.md) through the binary: the reference server
//! `@modelcontextprotocol/server-everything` from npm, started over stdio for the run.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

use crate::fake::{Fake, anthropic_results, anthropic_text, anthropic_tools};
use crate::support::Test;

const KEY: &str = "sk-test-key-0000";

/// The reference server's entry point, installed once under `target/` (once per test process:
/// tests run at the same time share the install).
fn everything() -> PathBuf {
    static ENTRY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ENTRY.get_or_init(install_everything).clone()
}

fn install_everything() -> PathBuf {
    let entry = "node_modules/@modelcontextprotocol/server-everything/dist/index.js";
    crate::support::npm_install(
        "mcp-everything",
        "@modelcontextprotocol/server-everything@2026.8.31",
        entry,
    )
    .join(entry)
}

/// Processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(marker))
        .collect()
}

fn server_entry(marker: &str) -> String {
    // The marker is an argument the server ignores: it finds the process afterwards.
    format!(
        "command = \"node\"\nargs = [{:?}, \"stdio\", {marker:?}]\nenv = {{ MCP_TEST_NOTE = \"from the entry\" }}\n",
        everything().to_str().unwrap()
    )
}

fn script() -> Vec<wiremock::ResponseTemplate> {
    vec![
        anthropic_tools(&[
            (
                "t1",
                "mcp__everything__echo",
                json!({"message": "hello mcp"}),
            ),
            ("t2", "mcp__everything__get-env", json!({})),
            ("t3", "mcp__everything__get-sum", json!({"a": 1, "b": 2})),
        ]),
        anthropic_text("done"),
    ]
}

/// The tool names a request offered.
fn offered(body: &Value) -> Vec<&str> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

fn results(bodies: &[Value]) -> Vec<(String, String, bool)> {
    anthropic_results(bodies.last().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_calls_mcp_tools_it_was_given_and_only_those() {
    let fake = Fake::anthropic(script()).await;
    let test = Test::new();
    let marker = format!(
        "mcp-marker-{}",
        test.path().file_name().unwrap().to_string_lossy()
    );
    let workflow = format!(
        "name = \"m\"\n[models]\ndefault = \"anthropic/m\"\n[mcp_servers.everything]\n{}[steps.s]\nagent = \"explore\"\ntools = [\"read_file\", \"mcp__everything__echo\", \"mcp__everything__get-env\"]\nprompt = \"use the tools\"\n",
        server_entry(&marker)
    );
    let (out, _test) = test
        .file("w.toml", &workflow)
        .anthropic_api(&fake.uri(), KEY)
        .env("OPENAI_API_KEY", "sk-openai-secret-1111")
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    // The model was offered exactly the listed tools, with the server's descriptions.
    let offered = offered(&bodies[0]);
    assert_eq!(
        offered,
        [
            "mcp__everything__echo",
            "mcp__everything__get-env",
            "read_file"
        ]
    );
    let results = results(&bodies);
    let (_, echo, error) = &results[0];
    assert!(!error && echo.contains("hello mcp"), "{echo}");
    // The server's environment: the entry's variable, no key.
    let (_, env, error) = &results[1];
    assert!(!error && env.contains("from the entry"), "{env}");
    assert!(
        !env.contains(KEY) && !env.contains("sk-openai-secret-1111"),
        "{env}"
    );
    assert!(!env.contains("ANTHROPIC_API_KEY"), "{env}");
    let (_, sum, error) = &results[2];
    assert!(*error);
    assert_eq!(
        sum,
        "`mcp__everything__get-sum` is not available to this step"
    );
    // The server is gone with the run.
    assert_eq!(processes_with(&marker), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_file_brings_its_own_mcp_server() {
    let fake = Fake::anthropic(vec![
        anthropic_tools(&[(
            "t1",
            "mcp__everything__echo",
            json!({"message": "from the agent"}),
        )]),
        anthropic_text("done"),
    ])
    .await;
    let test = Test::new();
    let marker = format!(
        "mcp-agent-{}",
        test.path().file_name().unwrap().to_string_lossy()
    );
    let agent = format!(
        "---\nname: echoer\ndescription: Echoes\ntools: Read, mcp__everything__echo\nmcpServers:\n  everything:\n    type: stdio\n    command: node\n    args: [{:?}, \"stdio\", {marker:?}]\n---\nYou echo.\n",
        everything().to_str().unwrap()
    );
    // The working directory's agent files start programs only when the workflow trusts them.
    let workflow = "name = \"m\"\ntrust_workdir = true\n[models]\ndefault = \"anthropic/m\"\n[steps.s]\nagent = \"echoer\"\nprompt = \"echo\"\n";
    let (out, _test) = test
        .file("w.toml", workflow)
        .file(".claude/agents/echoer.md", &agent)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        !out.stderr.contains("mcpServers"),
        "no warning: {}",
        out.stderr
    );
    let results = results(&fake.bodies().await);
    assert!(results[0].1.contains("from the agent"), "{:?}", results);
    assert_eq!(processes_with(&marker), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_does_not_start_fails_its_step_with_its_stderr() {
    let fake = Fake::anthropic(vec![anthropic_text("never")]).await;
    let workflow = "name = \"m\"\n[models]\ndefault = \"anthropic/m\"\n[mcp_servers.broken]\ncommand = \"sh\"\nargs = [\"-c\", \"echo 'cannot open config.json' >&2; exit 3\"]\n[steps.s]\nagent = \"explore\"\ntools = [\"read_file\", \"mcp__broken\"]\nprompt = \"x\"\n[steps.other]\nagent = \"explore\"\nprompt = \"y\"\n";
    let (out, _test) = Test::new()
        .file("w.toml", workflow)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    let error = run["steps"]["s"]["error"].as_str().unwrap();
    assert!(
        error.starts_with("MCP server `broken` did not start")
            && error.contains("cannot open config.json"),
        "{error}"
    );
    // The step that does not need it ran.
    assert_eq!(run["steps"]["other"]["status"], "succeeded");
}

#[test]
fn an_unknown_server_is_a_validation_error() {
    let out = Test::new()
        .file(
            "w.toml",
            "name = \"m\"\n[models]\ndefault = \"anthropic/m\"\n[mcp_servers.github]\ncommand = \"x\"\n[steps.s]\nagent = \"explore\"\ntools = [\"mcp__githb__search\"]\nprompt = \"x\"\n",
        )
        .args(&["validate", "w.toml"])
        .run();
    assert_eq!(out.status, 2);
    assert!(
        out.stderr
            .contains("step `s` uses `mcp__githb__search`, but there is no MCP server `githb`"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("did you mean `github`?"),
        "{}",
        out.stderr
    );
}

/// The reference server over streamable HTTP, on a free port; killed when dropped.
struct HttpServer {
    child: std::process::Child,
    url: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_server() -> HttpServer {
    use std::io::BufRead;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new("node")
        .arg(everything())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Ready when it says it listens.
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufReader::new(stderr).lines();
    loop {
        let line = lines
            .next()
            .expect("the server ended before listening")
            .unwrap();
        if line.contains("listening on port") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    HttpServer {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamable_http_server_serves_its_tools() {
    let server = tokio::task::spawn_blocking(http_server).await.unwrap();
    let fake = Fake::anthropic(vec![
        anthropic_tools(&[("t1", "mcp__web__echo", json!({"message": "over http"}))]),
        anthropic_text("done"),
    ])
    .await;
    let workflow = format!(
        "name = \"m\"\n[models]\ndefault = \"anthropic/m\"\n[mcp_servers.web]\nurl = \"{}\"\nheaders = {{ X-Runner-Test = \"${{MCP_TEST_HEADER}}\" }}\n[steps.s]\nagent = \"explore\"\ntools = [\"mcp__web\"]\nprompt = \"x\"\n",
        server.url
    );
    let (out, _test) = Test::new()
        .file("w.toml", &workflow)
        .anthropic_api(&fake.uri(), KEY)
        .env("MCP_TEST_HEADER", "yes")
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    // `mcp__web` offers every tool of the server.
    let offered = offered(&bodies[0]);
    assert!(offered.contains(&"mcp__web__echo") && offered.contains(&"mcp__web__get-sum"));
    assert!(
        offered.iter().all(|n| n.starts_with("mcp__web__")),
        "{offered:?}"
    );
    let results = results(&bodies);
    assert!(results[0].1.contains("over http"), "{results:?}");
}

#[test]
fn mcp_list_starts_the_servers_and_lists_their_tools() {
    let test = Test::new();
    let marker = format!(
        "mcp-list-{}",
        test.path().file_name().unwrap().to_string_lossy()
    );
    let workflow = format!(
        "name = \"m\"\n[models]\ndefault = \"anthropic/m\"\n[mcp_servers.everything]\n{}[mcp_servers.unused]\ncommand = \"false\"\n[steps.s]\nagent = \"code\"\nprompt = \"x\"\n",
        server_entry(&marker)
    );
    let out = test
        .file("w.toml", &workflow)
        .args(&["mcp", "list", "w.toml"])
        .run();
    // `code` has `*`, so both servers are used; `unused` cannot start.
    assert_eq!(out.status, 1, "{}", out.transcript());
    assert!(out.stdout.starts_with("everything ("), "{}", out.stdout);
    let echo = out
        .stdout
        .lines()
        .find(|l| l.starts_with("  mcp__everything__echo  "))
        .unwrap_or_else(|| panic!("{}", out.stdout));
    assert!(
        echo.len() > "  mcp__everything__echo  ".len(),
        "a description: {echo}"
    );
    assert!(
        out.stderr.contains("MCP server `unused` did not start"),
        "{}",
        out.stderr
    );
    assert_eq!(processes_with(&marker), Vec::<String>::new());
}

/// An MCP server over streamable HTTP, in this repository: JSON-RPC answered by wiremock, with
/// tools that misbehave on purpose (`hang` never answers in time, `garbage` answers non-JSON).
struct Fixture;

impl wiremock::Respond for Fixture {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        use wiremock::ResponseTemplate;
        if request.method.as_str() != "POST" {
            return ResponseTemplate::new(405);
        }
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let id = body["id"].clone();
        let reply = |result: Value| {
            ResponseTemplate::new(200)
                .insert_header("mcp-session-id", "fixture-session")
                .set_body_json(json!({"jsonrpc": "2.0", "id": id, "result": result}))
        };
        match body["method"].as_str().unwrap_or_default() {
            "initialize" => reply(json!({
                "protocolVersion": body["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "fixture", "version": "1.0.0"}
            })),
            "tools/list" => reply(json!({"tools": [
                {"name": "ok", "description": "Answers fine", "inputSchema": {"type": "object"}},
                {"name": "hang", "description": "Never answers in time", "inputSchema": {"type": "object"}},
                {"name": "garbage", "description": "Answers garbage", "inputSchema": {"type": "object"}},
                // Hostile names: never offered to a model or printed as they are.
                {"name": "evil\n::error::forged", "description": "x", "inputSchema": {"type": "object"}},
                {"name": "../../etc/passwd", "description": "x", "inputSchema": {"type": "object"}},
                {"name": "n".repeat(5000), "description": "x", "inputSchema": {"type": "object"}}
            ]})),
            "tools/call" => match body["params"]["name"].as_str().unwrap_or_default() {
                "hang" => {
                    reply(json!({"content": []})).set_delay(std::time::Duration::from_secs(120))
                }
                "garbage" => ResponseTemplate::new(200)
                    .insert_header("mcp-session-id", "fixture-session")
                    .set_body_raw("this is not JSON-RPC", "application/json"),
                _ => reply(json!({"content": [{"type": "text", "text": "fine"}]})),
            },
            // Notifications.
            _ => ResponseTemplate::new(202),
        }
    }
}

async fn fixture() -> wiremock::MockServer {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::path("/mcp"))
        .respond_with(Fixture)
        .mount(&server)
        .await;
    server
}

async fn broken_tool_run(tool: &str) -> (crate::support::Output, Value, std::time::Duration) {
    let mcp = fixture().await;
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-uses",
            vec![
                anthropic_tools(&[("t1", &format!("mcp__fix__{tool}"), json!({}))]),
                anthropic_text("never"),
            ],
        ),
        ("MARK-other", vec![anthropic_text("other done")]),
    ])
    .await;
    let workflow = format!(
        "name = \"m\"\n[models]\ndefault = \"anthropic/m\"\n[mcp_servers.fix]\nurl = \"{}/mcp\"\ntimeout = \"1s\"\n[steps.uses]\nagent = \"explore\"\ntools = [\"mcp__fix\"]\nprompt = \"MARK-uses\"\n[steps.other]\nagent = \"explore\"\nprompt = \"MARK-other\"\n",
        mcp.uri()
    );
    let started = std::time::Instant::now();
    let (out, _test) = Test::new()
        .file("w.toml", &workflow)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    let run =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", out.transcript()));
    (out, run, started.elapsed())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_hangs_fails_its_step_and_the_run_goes_on() {
    let (out, run, elapsed) = broken_tool_run("hang").await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    assert_eq!(run["steps"]["uses"]["status"], "failed");
    assert_eq!(
        run["steps"]["uses"]["error"],
        "MCP server `fix` did not answer `hang` within 1s"
    );
    assert_eq!(run["steps"]["other"]["status"], "succeeded");
    // The two-minute answer was not waited for.
    assert!(elapsed < std::time::Duration::from_secs(60), "{elapsed:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_answers_garbage_fails_its_step() {
    let (out, run, _) = broken_tool_run("garbage").await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let error = run["steps"]["uses"]["error"].as_str().unwrap();
    assert!(error.starts_with("MCP server `fix` failed: "), "{error}");
    assert_eq!(run["steps"]["other"]["status"], "succeeded");
}

/// Tool names a server makes up are checked: only plain ones (letters, digits, `_`, `-`, up to
/// 64) are offered; the rest are left out with a warning.
#[tokio::test(flavor = "multi_thread")]
async fn tools_with_hostile_names_are_left_out() {
    let mcp = fixture().await;
    let workflow = format!(
        "name = \"m\"\n[models]\ndefault = \"anthropic/m\"\n[mcp_servers.fix]\nurl = \"{}/mcp\"\n[steps.s]\nagent = \"explore\"\ntools = [\"mcp__fix\"]\nprompt = \"x\"\n",
        mcp.uri()
    );
    let (out, _test) = Test::new()
        .file("w.toml", &workflow)
        .args(&["mcp", "list", "w.toml"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(out.stdout.starts_with("fix (3 tools)\n"), "{}", out.stdout);
    assert!(!out.stdout.contains("evil") && !out.stdout.contains("etc/passwd"));
    assert!(out.stderr.contains("3 tools left out"), "{}", out.stderr);
}

/// An MCP server's redirect is followed within its origin only: the headers configured for it
/// (a key, say) never go to another host.
#[tokio::test(flavor = "multi_thread")]
async fn mcp_redirects_are_followed_only_within_the_origin() {
    let mcp = fixture().await;
    wiremock::Mock::given(wiremock::matchers::path("/old"))
        .respond_with(wiremock::ResponseTemplate::new(307).insert_header("location", "/mcp"))
        .mount(&mcp)
        .await;
    let list = |url: String| async move {
        let workflow = format!(
            "name = \"m\"\n[models]\ndefault = \"anthropic/m\"\n[mcp_servers.fix]\nurl = \"{url}\"\nheaders = {{ X-Api-Key = \"header-secret\" }}\n[steps.s]\nagent = \"explore\"\ntools = [\"mcp__fix\"]\nprompt = \"x\"\n"
        );
        let (out, _test) = Test::new()
            .file("w.toml", &workflow)
            .args(&["mcp", "list", "w.toml"])
            .run_async()
            .await;
        out
    };
    let out = list(format!("{}/old", mcp.uri())).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(out.stdout.starts_with("fix (3 tools)\n"), "{}", out.stdout);

    let elsewhere = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::path("/mcp"))
        .respond_with(
            wiremock::ResponseTemplate::new(307)
                .insert_header("location", format!("{}/mcp", mcp.uri()).as_str()),
        )
        .mount(&elsewhere)
        .await;
    let before = mcp.received_requests().await.unwrap_or_default().len();
    let out = list(format!("{}/mcp", elsewhere.uri())).await;
    assert!(
        !out.stdout.contains("fix (3 tools)"),
        "{}",
        out.transcript()
    );
    assert!(
        !elsewhere
            .received_requests()
            .await
            .unwrap_or_default()
            .is_empty()
    );
    assert_eq!(
        mcp.received_requests().await.unwrap_or_default().len(),
        before,
        "the redirect to another origin was followed"
    );
}

/// A stdio server, in Python, whose one tool answers with a single 17 MB line.
fn huge_server() -> String {
    crate::fake::python_mcp_server("huge", "\"x\" * (17 << 20)", "", "")
}

/// A message longer than the transport takes stops the server and fails the call at once, not
/// when the call's timeout ends (the timeout here is long enough that its message would show).
#[tokio::test(flavor = "multi_thread")]
async fn a_result_over_8_mib_stops_the_server_and_fails_the_call() {
    let fake = Fake::anthropic(vec![
        anthropic_tools(&[("t1", "mcp__huge__huge", json!({}))]),
        anthropic_text("never"),
    ])
    .await;
    let workflow = "name = \"m\"\n[models]\ndefault = \"anthropic/m\"\n[mcp_servers.huge]\ncommand = \"python3\"\nargs = [\"huge.py\"]\ntimeout = \"5m\"\n[steps.s]\nagent = \"explore\"\ntools = [\"mcp__huge\"]\nprompt = \"x\"\n";
    let (out, _test) = Test::new()
        .file("w.toml", workflow)
        .file("huge.py", &huge_server())
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        run["steps"]["s"]["error"],
        "MCP server `huge` sent a message over 8 MiB for `huge`; it was stopped"
    );
}

/// Claude Code's list form of `mcpServers` loads unchanged: a name from the project's
/// `.mcp.json` (read only when the working directory is trusted) gives the agent that server's
/// tools, and an inline `{name: entry}` item works too.
#[tokio::test(flavor = "multi_thread")]
async fn agent_files_name_servers_from_the_project_mcp_json() {
    let mcp = fixture().await;
    let fake = Fake::anthropic(vec![
        anthropic_tools(&[
            ("t1", "mcp__docs__ok", json!({})),
            ("t2", "mcp__inline__ok", json!({})),
        ]),
        anthropic_text("done"),
    ])
    .await;
    let mcp_json = format!(
        "{{\"mcpServers\": {{\"docs\": {{\"type\": \"http\", \"url\": \"{}/mcp\"}}}}}}",
        mcp.uri()
    );
    let agent = format!(
        "---\nname: reader\ndescription: Reads docs\ntools: Read, mcp__docs, mcp__inline\nmcpServers:\n  - docs\n  - inline:\n      type: http\n      url: {}/mcp\n---\nYou read.\n",
        mcp.uri()
    );
    let workflow = |trust: &str| {
        format!(
            "name = \"m\"\n{trust}[models]\ndefault = \"anthropic/m\"\n[steps.s]\nagent = \"reader\"\nprompt = \"x\"\n"
        )
    };
    // Not trusted: `.mcp.json` is not read, and the step cannot have `docs`.
    let (out, _test) = Test::new()
        .file("workflows/w.toml", &workflow(""))
        .file("agents/reader.md", &agent)
        .file(".mcp.json", &mcp_json)
        .args(&["plan", "workflows/w.toml"])
        .run_async()
        .await;
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("agent `reader` names MCP server `docs` in `mcpServers`"),
        "{}",
        out.stderr
    );

    let (out, _test) = Test::new()
        .file("workflows/w.toml", &workflow("trust_workdir = true\n"))
        .file("agents/reader.md", &agent)
        .file(".mcp.json", &mcp_json)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "workflows/w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    let tools = offered(&bodies[0]);
    assert!(
        tools.contains(&"mcp__docs__ok") && tools.contains(&"mcp__inline__ok"),
        "{tools:?}"
    );
    let results = results(&bodies);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        results
            .iter()
            .all(|(_, text, error)| text == "fine" && !error),
        "{results:?}"
    );
}

/// A stdio server in Python that starts a helper of its own and, when its input ends, does not
/// exit (as many servers behind `npx` or `uvx` do not).
fn stubborn_server() -> String {
    crate::fake::python_mcp_server(
        "ping",
        "\"pong\"",
        "subprocess.Popen([sys.executable, \"-c\", \"import time; time.sleep(600)\", sys.argv[1]])",
        "time.sleep(600)",
    )
}

/// [`all_gone`] off the async workers.
async fn gone(marker: &str) -> bool {
    let marker = marker.to_owned();
    tokio::task::spawn_blocking(move || all_gone(&marker))
        .await
        .unwrap()
}

/// Waits (bounded) until no process holds `marker`; whether none does.
fn all_gone(marker: &str) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        if processes_with(marker).is_empty() {
            return true;
        }
        std::thread::yield_now();
    }
    processes_with(marker).is_empty()
}

/// MCP servers live and die like bash: behind a wrapper (`sh -c`), with a helper of their own,
/// ignoring the end of their input, nothing they started outlives the run, nor runner killed
/// with `kill -9`.
#[tokio::test(flavor = "multi_thread")]
async fn nothing_an_mcp_server_started_outlives_the_run() {
    let marker = format!("mcp-stubborn-{}", std::process::id());
    let workflow = format!(
        "name = \"m\"\n[models]\ndefault = \"anthropic/m\"\n[mcp_servers.stubborn]\ncommand = \"sh\"\nargs = [\"-c\", \"python3 server.py {marker}\"]\n[steps.s]\nagent = \"explore\"\ntools = [\"mcp__stubborn\"]\nprompt = \"x\"\n"
    );
    let fake = Fake::anthropic(vec![
        anthropic_tools(&[("t1", "mcp__stubborn__ping", json!({}))]),
        anthropic_text("done"),
    ])
    .await;
    let (out, test) = Test::new()
        .file("w.toml", &workflow)
        .file("server.py", &stubborn_server())
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        gone(&marker).await,
        "left running after the run: {:?}",
        processes_with(&marker)
    );

    // runner killed outright while the server runs: the server and its helper go too.
    let (hanging, requested) = Fake::anthropic_hanging(std::time::Duration::from_secs(600)).await;
    let test = test
        .clear_args()
        .anthropic_api(&hanging.uri(), KEY)
        .args(&["run", "w.toml"]);
    let mut child = test.spawn();
    requested
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the step's request");
    assert!(
        !processes_with(&marker).is_empty(),
        "the server is not running"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        gone(&marker).await,
        "left running after kill -9: {:?}",
        processes_with(&marker)
    );
}
