//! `bash`: `bash -c` in the working directory, under the sandbox supervisor (see
//! [`crate::sandbox`]), with a timeout, an output cap and no provider keys in its environment.
//! When the command ends, times out or the step is cancelled (the future dropped), the
//! supervisor kills every process below it, so nothing the command started lives on.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::BoxFuture;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use super::confine::Workspace;
use super::{Tool, ToolContext, ToolOutput, parse_input};
use crate::sandbox::{self, Mode, Policy, Support};

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// Bytes kept of stdout and of stderr; the middle is cut beyond this.
const MAX_STREAM_BYTES: usize = 30_000;
/// Bytes read from each stream at most (the rest is drained and dropped).
const MAX_READ_BYTES: usize = 4 * 1024 * 1024;
/// How long the supervisor gets to take its processes down after being asked to stop.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long output may keep flowing once the command is gone.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// `bash` (Claude Code: `Bash`).
pub struct Bash;

impl Tool for Bash {
    fn name(&self) -> &str {
        "bash"
    }
    fn aliases(&self) -> &[&str] {
        &["Bash"]
    }
    fn description(&self) -> &str {
        "Run a command with `bash -c` in the working directory, in a sandbox: it can write only where this step may (nowhere in a read-only step, never `.git`), cannot open network connections unless the step allows them, and everything it starts is stopped when it returns. `$TMPDIR` is yours for scratch files. Returns the exit code, stdout and stderr."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "command": {"type": "string"},
            "timeout": {"type": "number", "description": "Seconds before the command is killed (default 120, at most 600)"}
        }, "required": ["command"]})
    }
    fn call<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(bash(&ctx.workspace, input, &ctx.bash))
    }
}

#[derive(Deserialize)]
struct BashInput {
    command: String,
    /// Seconds.
    #[serde(default)]
    timeout: Option<f64>,
}

/// The environment of a step's `bash`: the clean one every child gets, plus the step's `env`:
/// templates as `rendered` holds them (taken as they are: an upstream summary's `${VAR}` is
/// text, never expanded), the others with `${VAR}` expanded. Nothing else of runner's: no key,
/// no token, whatever its name.
pub fn bash_vars(
    step_env: &std::collections::BTreeMap<String, String>,
    rendered: &std::collections::BTreeMap<String, String>,
) -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = crate::secrets::clean_env()
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_owned(), v.into_string().ok()?)))
        .collect();
    for (name, value) in step_env {
        vars.retain(|(k, _)| k != name);
        let value = match rendered.get(name) {
            Some(rendered) => rendered.clone(),
            None => crate::secrets::expand_vars(value),
        };
        vars.push((name.clone(), value));
    }
    vars
}

/// How one step's `bash` runs: its sandbox, and the private temporary directory all its calls
/// share (removed when the step ends).
#[derive(Debug)]
pub struct BashEnv {
    /// The runner binary, which is also the supervisor.
    pub exe: PathBuf,
    pub mode: Mode,
    pub network: bool,
    /// Canonical paths bash never writes: the state and cassette directories, `.git` of the
    /// checkout and of the repositories nested in it.
    pub protected: Vec<PathBuf>,
    /// Of `protected`, those bash sees as an empty folder (the state directory's runs).
    pub hidden: Vec<PathBuf>,
    /// What bash never reads, whatever grants it (runner's key; see
    /// `crate::run::confinement::secret_paths`).
    pub secret: Vec<PathBuf>,
    /// Where bash may read besides its working and temporary directories (see
    /// [`crate::sandbox::reads`]).
    pub read: Vec<PathBuf>,
    /// Said under every result: what of the working directory was not scanned for
    /// repositories, and so is read-only.
    pub note: Option<String>,
    /// Its whole environment but the temporary directory (see [`bash_vars`]).
    pub vars: Vec<(String, String)>,
    pub support: Support,
    tmp: Mutex<Option<tempfile::TempDir>>,
}

impl BashEnv {
    pub fn new(mode: Mode, network: bool) -> Self {
        Self {
            // The kernel's link to the running binary: it works even when the file was replaced
            // since runner started.
            exe: PathBuf::from("/proc/self/exe"),
            mode,
            network,
            protected: Vec::new(),
            hidden: Vec::new(),
            secret: Vec::new(),
            read: default_reads(&[]),
            note: None,
            vars: bash_vars(&Default::default(), &Default::default()),
            support: Support::probe(),
            tmp: Mutex::new(None),
        }
    }

    /// The same settings in another mode (a subagent's, from its own tools), with a temporary
    /// directory of its own.
    pub fn with_mode(&self, mode: Mode) -> Self {
        Self {
            exe: self.exe.clone(),
            mode,
            network: self.network,
            protected: self.protected.clone(),
            hidden: self.hidden.clone(),
            secret: self.secret.clone(),
            read: self.read.clone(),
            note: self.note.clone(),
            vars: self.vars.clone(),
            support: self.support,
            tmp: Mutex::new(None),
        }
    }

    /// Whether `~/.gitconfig` is among what bash may read.
    fn reads_gitconfig(&self) -> bool {
        std::env::var_os("HOME").is_some_and(|home| {
            let config = PathBuf::from(home).join(".gitconfig");
            self.read.iter().any(|r| config.starts_with(r))
                && !self.secret.iter().any(|s| config.starts_with(s))
        })
    }

    /// The step's temporary directory, made on first use.
    fn tmp(&self) -> std::io::Result<PathBuf> {
        let mut tmp = self.tmp.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(dir) = tmp.as_ref() {
            return Ok(dir.path().to_owned());
        }
        let dir = tempfile::Builder::new().prefix("runner-bash-").tempdir()?;
        let path = dir.path().canonicalize()?;
        *tmp = Some(dir);
        Ok(path)
    }
}

/// Where a step's bash may read (besides its working and temporary directories): the system,
/// the toolchains runner's own environment names, and `extra` (its `read_paths`, expanded).
pub fn default_reads(extra: &[PathBuf]) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    sandbox::reads::allowed(home.as_deref(), |name| std::env::var(name).ok(), extra)
}

/// Asks the supervisor to stop when dropped (a timeout, a cancelled step): it kills everything
/// below it and exits.
struct Stop(Option<Pid>);

impl Drop for Stop {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            // ESRCH (already gone) is the common, harmless case.
            let _ = kill(pid, Signal::SIGTERM);
        }
    }
}

async fn read_capped(mut stream: impl AsyncRead + Unpin) -> (Vec<u8>, usize) {
    let mut kept = Vec::new();
    let mut total = 0usize;
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                total += n;
                if kept.len() < MAX_READ_BYTES {
                    kept.extend_from_slice(&buf[..n.min(MAX_READ_BYTES - kept.len())]);
                }
            }
        }
    }
    (kept, total)
}

/// Keeps the head and tail of long output, saying how much was cut.
pub fn cap(bytes: &[u8], total: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.len() <= MAX_STREAM_BYTES && total == bytes.len() {
        return text.into_owned();
    }
    let half = MAX_STREAM_BYTES / 2;
    let mut head_end = half.min(text.len());
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len().saturating_sub(half).max(head_end);
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let cut = total.saturating_sub(head_end + (text.len() - tail_start));
    format!(
        "{}\n[… {cut} bytes cut; redirect to a file and read it in parts to see everything …]\n{}",
        &text[..head_end],
        &text[tail_start..]
    )
}

pub async fn bash(ws: &Workspace, input: &Value, env: &BashEnv) -> ToolOutput {
    let input: BashInput = match parse_input("bash", input) {
        Ok(input) => input,
        Err(err) => return err,
    };
    let timeout = match input.timeout {
        // Clamped before converting: a huge float would overflow a Duration.
        Some(secs) if secs.is_finite() && secs > 0.0 => {
            Duration::from_secs_f64(secs.min(MAX_TIMEOUT.as_secs_f64()))
        }
        _ => DEFAULT_TIMEOUT,
    };
    let ran = match run_sandboxed(ws.root().as_std_path(), &input.command, Some(timeout), env).await
    {
        Ok(ran) => ran,
        Err(err) => return ToolOutput::error(err),
    };
    let mut text = String::new();
    match ran.exit {
        Exit::TimedOut(after) => text.push_str(&format!(
            "the command timed out after {}s and was killed, with every process it started\n",
            after.as_secs_f64()
        )),
        Exit::Code(code) => text.push_str(&format!("exit code {code}\n")),
        Exit::Signal => text.push_str("the command was killed by a signal\n"),
    }
    if !ran.stdout.is_empty() {
        text.push_str(&cap(&ran.stdout, ran.stdout_total));
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    if !ran.stderr.is_empty() {
        text.push_str("[stderr]\n");
        text.push_str(&cap(&ran.stderr, ran.stderr_total));
    }
    if let Some(note) = ran.read_only_note(env.mode) {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(note);
        text.push('\n');
    }
    if let Some(note) = &env.note {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("note: ");
        text.push_str(note);
        text.push('\n');
    }
    if ran.exit == Exit::Code(0) {
        ToolOutput::ok(text)
    } else {
        ToolOutput::error(text)
    }
}

/// How a sandboxed command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal,
    TimedOut(Duration),
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exited {code}"),
            Exit::Signal => f.write_str("was killed by a signal"),
            Exit::TimedOut(after) => write!(
                f,
                "timed out after {}",
                crate::workflow::duration::format_duration(*after)
            ),
        }
    }
}

/// What a sandboxed command did: how it ended and what it printed (each stream read up to
/// 4 MiB; `*_total` is how much it printed in all).
#[derive(Debug)]
pub struct Ran {
    pub exit: Exit,
    pub stdout: Vec<u8>,
    pub stdout_total: usize,
    pub stderr: Vec<u8>,
    pub stderr_total: usize,
}

impl Ran {
    /// Said under a failure in a read-only sandbox that looks like a refused write, so a build
    /// tool's `Permission denied` is not taken for a broken project.
    pub fn read_only_note(&self, mode: Mode) -> Option<&'static str> {
        let refused = |bytes: &[u8]| {
            let text = String::from_utf8_lossy(bytes);
            [
                "Permission denied",
                "Read-only file system",
                "Operation not permitted",
            ]
            .iter()
            .any(|what| text.contains(what))
        };
        (mode == Mode::ReadOnly
            && self.exit != Exit::Code(0)
            && (refused(&self.stderr) || refused(&self.stdout)))
        .then_some(READ_ONLY_NOTE)
    }
}

/// See [`Ran::read_only_note`].
pub const READ_ONLY_NOTE: &str = "note: this step's sandbox is read-only, so nothing here may be written (a build's lock file or `target/` included): a command step writes its working directory with `writes = true`, an agent step when its tools include `write_file` or `edit_file`";

// Over 80 lines: the child's set-up (namespace, Landlock, seccomp, limits, pipes) must happen in
// this order in one place.
/// Runs `bash -c command` in `root` under the step's sandbox, as the `bash` tool, checks and
/// command steps all do. `None` for `timeout`: until the caller drops the future (a command
/// step lives as long as its step). An error means the command could not start.
pub async fn run_sandboxed(
    root: &std::path::Path,
    command_text: &str,
    timeout: Option<Duration>,
    env: &BashEnv,
) -> Result<Ran, String> {
    if env.mode == Mode::ReadOnly && !env.support.landlock() {
        return Err("bash is not available in this step: the kernel has no Landlock, so a read-only bash cannot be enforced (runner's `--sandbox off` allows an unconfined one)".into());
    }
    let tmp = env
        .tmp()
        .map_err(|err| format!("cannot make a temporary directory: {err}"))?;
    let policy = Policy {
        mode: env.mode,
        network: env.network,
        workdir: root.to_owned(),
        tmp: tmp.clone(),
        protected: env.protected.clone(),
        hidden: env.hidden.clone(),
        secret: env.secret.clone(),
        read: env.read.clone(),
        parent: std::process::id() as i32,
    };
    let policy = serde_json::to_string(&policy)
        .map_err(|err| format!("cannot describe the sandbox: {err}"))?;
    let mut command = Command::new(&env.exe);
    command
        .arg(sandbox::supervisor::ARG)
        .arg(policy)
        .arg("bash")
        .arg("-c")
        .arg(command_text)
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .env_clear()
        .envs(env.vars.iter().map(|(k, v)| (k, v)))
        .env("TMPDIR", &tmp)
        .env("TMP", &tmp)
        .env("TEMP", &tmp);
    if env.mode != Mode::Off {
        // Well-behaved tools keep caches where the sandbox lets them write.
        command.env("XDG_CACHE_HOME", tmp.join("cache"));
        // git would stop at a `~/.gitconfig` it may not read: unless the step's `read_paths`
        // grant it (or its `env` names another), git in bash reads no global configuration.
        if !env.vars.iter().any(|(k, _)| k == "GIT_CONFIG_GLOBAL") && !env.reads_gitconfig() {
            command.env("GIT_CONFIG_GLOBAL", "/dev/null");
        }
    }
    let mut child = command
        .spawn()
        .map_err(|err| format!("cannot start bash: {err}"))?;
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let mut stop = Stop(pid);
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err("cannot capture the command's output".into());
    };
    let out_task = tokio::spawn(read_capped(stdout));
    let err_task = tokio::spawn(read_capped(stderr));
    let waited = match timeout {
        Some(limit) => tokio::time::timeout(limit, child.wait()).await.ok(),
        None => Some(child.wait().await),
    };
    let status = match waited {
        Some(Ok(status)) => Some(status),
        Some(Err(err)) => return Err(format!("waiting for the command failed: {err}")),
        None => {
            // The supervisor takes its processes down; if it does not, its group goes by force.
            drop(std::mem::replace(&mut stop, Stop(None)));
            if tokio::time::timeout(STOP_GRACE, child.wait())
                .await
                .is_err()
                && let Some(pid) = pid
            {
                let _ = killpg(pid, Signal::SIGKILL);
            }
            None
        }
    };
    stop.0 = None;
    let drained = |task: tokio::task::JoinHandle<(Vec<u8>, usize)>| async move {
        tokio::time::timeout(DRAIN_GRACE, task)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
    };
    let (stdout, stdout_total) = drained(out_task).await;
    let (stderr, stderr_total) = drained(err_task).await;
    let code = status.and_then(|s| s.code());
    if code == Some(sandbox::SETUP_FAILED) {
        let text = String::from_utf8_lossy(&stderr);
        if let Some(why) = text.strip_prefix(sandbox::SETUP_FAILED_PREFIX) {
            return Err(format!(
                "bash could not start in its sandbox: {}",
                why.trim()
            ));
        }
    }
    let exit = match (status, code) {
        (None, _) => Exit::TimedOut(timeout.unwrap_or_default()),
        (Some(_), Some(code)) => Exit::Code(code),
        (Some(_), None) => Exit::Signal,
    };
    Ok(Ran {
        exit,
        stdout,
        stdout_total,
        stderr,
        stderr_total,
    })
}
