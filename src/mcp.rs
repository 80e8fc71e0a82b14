//! MCP servers (docs/src/mcp.md) through the `rmcp` crate, behind the tool seam: each tool of
//! a server is a [`Tool`] named `mcp__<server>__<tool>`, registered into the step's registry, so
//! allowlists, `task` intersection and transcripts treat it like any other.
//!
//! A server starts once per run, when the first step that needs it starts, and is shared by the
//! steps after; [`Hub::shutdown`] stops them all when the run ends. A stdio server gets a clean
//! environment (no provider keys, unless its entry's `env` names one), and what it writes to
//! stderr is kept so a server that fails says why.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use camino::Utf8PathBuf;
use futures_util::future::BoxFuture;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::async_rw::AsyncRwTransport;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio::sync::OnceCell;

use crate::tools::{Tool, ToolContext, ToolOutput};
use crate::workflow::McpServerDef;

/// How long a server may take to start and answer `initialize` and `tools/list`.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one tool call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(300);
/// How much of a server's stderr is kept (its end).
const STDERR_TAIL: usize = 4096;
/// The most text a tool result may bring back.
const MAX_RESULT_BYTES: usize = 256 << 10;
/// Tools kept from one server.
const MAX_TOOLS: usize = 1000;
/// The longest message (one line of JSON-RPC) a stdio server may send.
const MAX_MESSAGE_BYTES: usize = 8 << 20;

/// A tool name as the model APIs accept it: letters, digits, `_` and `-`, 1 to 64 of them.
fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A running server.
pub struct Server {
    name: String,
    client: tokio::sync::Mutex<Option<RunningService<rmcp::RoleClient, ()>>>,
    peer: rmcp::service::Peer<rmcp::RoleClient>,
    tools: Vec<rmcp::model::Tool>,
    /// Tools left out: a name that is not plain, or more than [`MAX_TOOLS`].
    pub dropped: usize,
    stderr: Arc<Mutex<String>>,
    /// How long one call may take.
    timeout: Duration,
    /// A stdio server's process, waited for (or killed) at shutdown.
    child: tokio::sync::Mutex<Option<Supervised>>,
    /// Set once a stdio server sent a message over [`MAX_MESSAGE_BYTES`]; its output was closed.
    oversized: Arc<AtomicBool>,
}

impl Server {
    fn stderr_tail(&self) -> String {
        tail(&self.stderr)
    }
}

fn tail(stderr: &Mutex<String>) -> String {
    let text = stderr.lock().unwrap_or_else(PoisonError::into_inner);
    text.trim().to_owned()
}

/// A server once its first start has been tried: running, or why it is not.
type Started = Arc<OnceCell<Result<Arc<Server>, String>>>;

/// Every server of a run, started on first use.
#[derive(Default)]
pub struct Hub {
    /// Where stdio servers start.
    workdir: Utf8PathBuf,
    servers: Mutex<BTreeMap<String, Started>>,
}

impl Hub {
    pub fn new(workdir: Utf8PathBuf) -> Self {
        Self {
            workdir,
            servers: Mutex::default(),
        }
    }

    /// The server `name`, started now if this is its first use; the error says why it could not
    /// start, with the end of what it wrote to stderr.
    pub async fn server(&self, name: &str, def: &McpServerDef) -> Result<Arc<Server>, String> {
        let cell = self
            .servers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .clone();
        cell.get_or_init(|| async {
            match tokio::time::timeout(START_TIMEOUT, start(name, def, &self.workdir)).await {
                Ok(started) => started,
                Err(_) => Err(format!(
                    "MCP server `{name}` did not answer within {}s",
                    START_TIMEOUT.as_secs()
                )),
            }
        })
        .await
        .clone()
    }

    /// The tools of the servers a step names, ready to register.
    pub async fn tools(
        &self,
        servers: &BTreeMap<String, McpServerDef>,
    ) -> Result<Vec<McpTool>, String> {
        let mut tools = Vec::new();
        for (name, def) in servers {
            let server = self.server(name, def).await?;
            for tool in &server.tools {
                tools.push(McpTool {
                    name: format!("mcp__{name}__{}", tool.name),
                    tool: tool.name.to_string(),
                    description: tool
                        .description
                        .as_deref()
                        .unwrap_or("(no description)")
                        .to_owned(),
                    schema: Value::Object((*tool.input_schema).clone()),
                    server: server.clone(),
                });
            }
        }
        Ok(tools)
    }

    /// Stops every server that was started (their processes are gone when this returns).
    pub async fn shutdown(&self) {
        let cells: Vec<_> = self
            .servers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for cell in cells {
            if let Some(Ok(server)) = cell.get()
                && let Some(client) = server.client.lock().await.take()
            {
                let _ = tokio::time::timeout(Duration::from_secs(5), client.cancel()).await;
            }
            if let Some(Ok(server)) = cell.get()
                && let Some(mut child) = server.child.lock().await.take()
            {
                // Its stdin is closed now; a server that does not exit on that is stopped, with
                // everything it started.
                if tokio::time::timeout(Duration::from_secs(5), child.0.wait())
                    .await
                    .is_err()
                {
                    child.stop();
                    let _ = tokio::time::timeout(Duration::from_secs(5), child.0.wait()).await;
                }
            }
        }
    }
}

/// A stdio server's supervisor: asked to stop (SIGTERM, on which it kills every process below
/// it and exits) when dropped or told to, never killed outright.
struct Supervised(tokio::process::Child);

impl Supervised {
    fn stop(&self) {
        if let Some(pid) = self.0.id().and_then(|id| i32::try_from(id).ok()) {
            // ESRCH (already gone) is the common, harmless case.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A server's stdout, ended early once one line grows past [`MAX_MESSAGE_BYTES`]: the transport
/// under it would drop such a line without a word and leave its call waiting until the timeout.
struct LimitedLines<R> {
    inner: R,
    /// Bytes since the last newline.
    line: usize,
    oversized: Arc<AtomicBool>,
}

impl<R: AsyncRead + Unpin> AsyncRead for LimitedLines<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.oversized.load(Ordering::Relaxed) {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            for &byte in &buf.filled()[before..] {
                if byte == b'\n' {
                    this.line = 0;
                } else {
                    this.line += 1;
                }
            }
            if this.line > MAX_MESSAGE_BYTES {
                this.oversized.store(true, Ordering::Relaxed);
                // Nothing of the oversize line reaches the transport: it sees the end of stream.
                buf.set_filled(before);
            }
        }
        polled
    }
}

// Over 80 lines: starting a server is one sequence (spawn or connect, handshake, list tools) whose
// failures each get their own message.
async fn start(
    name: &str,
    def: &McpServerDef,
    workdir: &Utf8PathBuf,
) -> Result<Arc<Server>, String> {
    let stderr = Arc::new(Mutex::new(String::new()));
    let oversized = Arc::new(AtomicBool::new(false));
    let mut child = None;
    let failed = |what: String, stderr: &Mutex<String>| {
        let tail = tail(stderr);
        if tail.is_empty() {
            format!("MCP server `{name}` {what}")
        } else {
            format!("MCP server `{name}` {what}; its stderr ends with:\n{tail}")
        }
    };
    let client = match (&def.command, &def.url) {
        (Some(command), _) => {
            // Under the supervisor every bash call runs under, unconfined: its own process
            // group, a parent-death signal, no signal blocked, no inherited descriptor, and
            // everything it starts (behind `sh -c`, `npx`, `uvx`) killed with it when the run
            // ends, runner is killed, or the server ignores the end of its input.
            let policy = crate::sandbox::Policy {
                mode: crate::sandbox::Mode::Off,
                network: true,
                workdir: workdir.clone().into_std_path_buf(),
                tmp: std::env::temp_dir(),
                protected: Vec::new(),
                hidden: Vec::new(),
                secret: Vec::new(),
                read: Vec::new(),
                parent: std::process::id() as i32,
            };
            let policy = serde_json::to_string(&policy)
                .map_err(|err| format!("MCP server `{name}`: {err}"))?;
            let mut cmd = tokio::process::Command::new("/proc/self/exe");
            cmd.arg(crate::sandbox::supervisor::ARG)
                .arg(policy)
                .arg(command)
                .args(&def.args)
                .current_dir(workdir)
                .env_clear();
            // A clean environment: what programs need to run, and what the entry names.
            cmd.envs(crate::secrets::clean_env());
            for (key, value) in &def.env {
                cmd.env(key, crate::secrets::expand_vars(value));
            }
            // Dropped, it is asked to stop (see `Supervised`): a SIGKILL would leave its
            // processes behind.
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut process = cmd
                .spawn()
                .map_err(|err| format!("MCP server `{name}` could not start `{command}`: {err}"))?;
            let (Some(stdin), Some(stdout)) = (process.stdin.take(), process.stdout.take()) else {
                return Err(format!("MCP server `{name}`: its pipes were not opened"));
            };
            let child_stderr = process.stderr.take();
            child = Some(Supervised(process));
            let transport = AsyncRwTransport::new_client(
                LimitedLines {
                    inner: stdout,
                    line: 0,
                    oversized: oversized.clone(),
                },
                stdin,
            );
            let reader = child_stderr.map(|mut pipe| {
                let keep = stderr.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = pipe.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let mut text = keep.lock().unwrap_or_else(PoisonError::into_inner);
                        text.push_str(&String::from_utf8_lossy(&buf[..n]));
                        if text.len() > STDERR_TAIL {
                            let cut = text.len() - STDERR_TAIL;
                            let cut = (cut..text.len())
                                .find(|&i| text.is_char_boundary(i))
                                .unwrap_or(text.len());
                            text.drain(..cut);
                        }
                    }
                })
            });
            match ().serve(transport).await {
                Ok(client) => client,
                Err(err) => {
                    // A server that died has closed its stderr: read it to the end first.
                    if let Some(reader) = reader {
                        let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
                    }
                    return Err(failed(format!("did not start: {err}"), &stderr));
                }
            }
        }
        (None, Some(url)) => {
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let mut headers = std::collections::HashMap::new();
            for (key, value) in &def.headers {
                let header = reqwest::header::HeaderName::from_bytes(key.as_bytes())
                    .map_err(|err| format!("MCP server `{name}`: header `{key}`: {err}"))?;
                let value =
                    reqwest::header::HeaderValue::from_str(&crate::secrets::expand_vars(value))
                        .map_err(|err| format!("MCP server `{name}`: header `{key}`: {err}"))?;
                headers.insert(header, value);
            }
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(headers);
            let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
                crate::provider::http_client(),
                config,
            );
            ().serve(transport)
                .await
                .map_err(|err| format!("MCP server `{name}` at {url} did not start: {err}"))?
        }
        (None, None) => {
            return Err(format!(
                "MCP server `{name}` has neither `command` nor `url`"
            ));
        }
    };
    let listed = client
        .list_all_tools()
        .await
        .map_err(|err| failed(format!("did not list its tools: {err}"), &stderr))?;
    // A server names its own tools, and those names reach the model, the log and file names:
    // only plain ones are kept, and only so many.
    let (tools, dropped): (Vec<_>, Vec<_>) = listed
        .into_iter()
        .enumerate()
        .partition(|(i, tool)| *i < MAX_TOOLS && valid_tool_name(&tool.name));
    let tools: Vec<rmcp::model::Tool> = tools.into_iter().map(|(_, t)| t).collect();
    let peer = client.peer().clone();
    Ok(Arc::new(Server {
        name: name.to_owned(),
        client: tokio::sync::Mutex::new(Some(client)),
        peer,
        tools,
        dropped: dropped.len(),
        stderr,
        timeout: def
            .timeout
            .as_deref()
            .and_then(|t| crate::workflow::duration::parse_duration(t).ok())
            .unwrap_or(CALL_TIMEOUT),
        child: tokio::sync::Mutex::new(child),
        oversized,
    }))
}

/// One tool of a server.
pub struct McpTool {
    name: String,
    /// Its name on the server.
    tool: String,
    description: String,
    schema: Value,
    server: Arc<Server>,
}

impl McpTool {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn description(&self) -> &str {
        &self.description
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        self.schema.clone()
    }

    fn call<'a>(&'a self, input: &'a Value, _ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let arguments = match input {
                Value::Object(map) => map.clone(),
                Value::Null => serde_json::Map::new(),
                _ => return ToolOutput::error("the input must be a JSON object"),
            };
            let params = CallToolRequestParams::new(self.tool.clone()).with_arguments(arguments);
            let server = &self.server;
            let called = tokio::time::timeout(server.timeout, server.peer.call_tool(params)).await;
            // A server that hangs, breaks or answers garbage fails the step: the model cannot
            // act on a tool that is gone.
            let result = match called {
                Err(_) => {
                    return ToolOutput::fatal(format!(
                        "MCP server `{}` did not answer `{}` within {}",
                        server.name,
                        self.tool,
                        crate::workflow::duration::format_duration(server.timeout)
                    ));
                }
                Ok(Err(_)) if server.oversized.load(Ordering::Relaxed) => {
                    if let Some(child) = server.child.lock().await.as_mut() {
                        child.stop();
                    }
                    return ToolOutput::fatal(format!(
                        "MCP server `{}` sent a message over {} MiB for `{}`; it was stopped",
                        server.name,
                        MAX_MESSAGE_BYTES >> 20,
                        self.tool
                    ));
                }
                Ok(Err(err)) => {
                    let tail = server.stderr_tail();
                    return ToolOutput::fatal(if tail.is_empty() {
                        format!("MCP server `{}` failed: {err}", server.name)
                    } else {
                        format!(
                            "MCP server `{}` failed: {err}; its stderr ends with:\n{tail}",
                            server.name
                        )
                    });
                }
                Ok(Ok(result)) => result,
            };
            let mut text = String::new();
            for block in &result.content {
                match block.as_text() {
                    Some(t) => text.push_str(&t.text),
                    None => text.push_str(&serde_json::to_string(block).unwrap_or_default()),
                }
                text.push('\n');
            }
            if text.trim().is_empty()
                && let Some(structured) = &result.structured_content
            {
                text = structured.to_string();
            }
            if text.len() > MAX_RESULT_BYTES {
                let cut = (0..=MAX_RESULT_BYTES)
                    .rev()
                    .find(|&i| text.is_char_boundary(i))
                    .unwrap_or(0);
                text.truncate(cut);
                text.push_str("\n[cut: the result was longer than 256 KiB]");
            }
            let text = text.trim_end().to_owned();
            if result.is_error.unwrap_or(false) {
                ToolOutput::error(text)
            } else {
                ToolOutput::ok(text)
            }
        })
    }
}
