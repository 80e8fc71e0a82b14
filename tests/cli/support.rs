//! A small `Test` builder, in the manner of `just`'s: it owns a temp dir, writes files, runs the
//! real binary there and hands back status, stdout and stderr.

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

pub const REPO: &str = env!("CARGO_MANIFEST_DIR");

pub struct Test {
    dir: TempDir,
    cwd: Option<PathBuf>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    limits: Vec<(nix::sys::resource::Resource, u64)>,
    /// A file runner inherits open for writing as descriptor 7, as a shell's `7>file` does.
    fd7: Option<PathBuf>,
    /// A program runner is started through (its path is the last argument before runner's).
    wrapper: Vec<String>,
}

pub struct Output {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Test {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
            cwd: None,
            args: Vec::new(),
            env: Vec::new(),
            limits: Vec::new(),
            fd7: None,
            wrapper: Vec::new(),
        }
    }

    /// Runs in the repository itself (for the shipped example workflows).
    pub fn in_repo() -> Self {
        let mut test = Self::new();
        test.cwd = Some(PathBuf::from(REPO));
        test
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn file(self, path: &str, contents: &str) -> Self {
        let full = self.dir.path().join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).expect("create dirs");
        }
        std::fs::write(full, contents).expect("write file");
        self
    }

    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Forgets the arguments given so far (to run again in the same directory).
    pub fn clear_args(mut self) -> Self {
        self.args.clear();
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Points the Anthropic provider at a fake API (`uri`, on 127.0.0.1) with `key`.
    pub fn anthropic_api(self, uri: &str, key: &str) -> Self {
        self.env("ANTHROPIC_BASE_URL", uri)
            .env("ANTHROPIC_API_KEY", key)
    }

    /// Runs the binary under a resource limit (`setrlimit`), e.g. an address-space cap that makes
    /// a memory bomb abort instead of exhausting the machine.
    pub fn limit(mut self, resource: nix::sys::resource::Resource, value: u64) -> Self {
        self.limits.push((resource, value));
        self
    }

    /// Starts runner through `program` (e.g. `unshare` with its options), which gets runner's
    /// path and arguments after its own.
    pub fn through(mut self, program: &[&str]) -> Self {
        self.wrapper = program.iter().map(|a| a.to_string()).collect();
        self
    }

    /// Starts runner with `path` open for writing as its descriptor 7.
    pub fn inherit_fd7(mut self, path: &Path) -> Self {
        self.fd7 = Some(path.to_owned());
        self
    }

    /// Starts the binary without waiting, its output dropped (for tests that kill it).
    pub fn spawn(&self) -> std::process::Child {
        let mut command = self.command();
        command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        command.spawn().expect("start runner")
    }

    /// Starts the binary without waiting, its stdout and stderr piped (for tests that read its
    /// lines as they come).
    pub fn spawn_piped(&self) -> std::process::Child {
        let mut command = self.command();
        command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        command.spawn().expect("start runner")
    }

    /// Runs the binary off the async workers, so a fake server in this process keeps serving.
    pub async fn run_async(self) -> (Output, Self) {
        tokio::task::spawn_blocking(move || {
            let out = self.run_here();
            (out, self)
        })
        .await
        .expect("runner thread")
    }

    pub fn run(self) -> Output {
        self.run_here()
    }

    /// Runs the binary with the arguments given so far and keeps the directory, for looking at
    /// what the run left.
    pub fn run_keeping(&self) -> Output {
        self.run_here()
    }

    fn run_here(&self) -> Output {
        let output = self.command().output().expect("run runner");
        Output {
            status: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    fn command(&self) -> Command {
        let cwd = self
            .cwd
            .clone()
            .unwrap_or_else(|| self.dir.path().to_owned());
        let mut command = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(env!("CARGO_BIN_EXE_runner"));
                command
            }
            None => Command::new(env!("CARGO_BIN_EXE_runner")),
        };
        command
            .args(&self.args)
            .current_dir(cwd)
            .env("NO_COLOR", "1")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_BASE_URL")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OLLAMA_HOST");
        // Traces only where a test asks for them (tests/cli/otel.rs).
        for (key, _) in std::env::vars() {
            if key.starts_with("OTEL_") {
                command.env_remove(key);
            }
        }
        // Proxies only where a test sets them (tests/cli/proxy.rs).
        for proxy in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"] {
            command
                .env_remove(proxy)
                .env_remove(proxy.to_ascii_lowercase());
        }
        for (key, value) in &self.env {
            command.env(key, value);
        }
        if let Some(path) = &self.fd7 {
            use std::os::fd::IntoRawFd;
            use std::os::unix::process::CommandExt;
            let fd = std::fs::File::create(path)
                .expect("fd 7 file")
                .into_raw_fd();
            // SAFETY: dup2 is async-signal-safe; the new descriptor has no close-on-exec flag.
            unsafe {
                command.pre_exec(move || {
                    if nix::libc::dup2(fd, 7) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let limits = self.limits.clone();
        if !limits.is_empty() {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe and the closure allocates nothing.
            unsafe {
                command.pre_exec(move || {
                    for (resource, value) in &limits {
                        nix::sys::resource::setrlimit(*resource, *value, *value)?;
                    }
                    Ok(())
                });
            }
        }
        command
    }
}

impl Output {
    /// Status, stdout and stderr in one text, for snapshots.
    pub fn transcript(&self) -> String {
        format!(
            "status: {}\n--- stdout\n{}--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// Runs git in `dir` (for setting up and checking repositories); panics when git fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Makes `dir` a repository whose one commit holds everything in it.
pub fn init_repo(dir: &Path) {
    git(dir, &["init", "--quiet", "-b", "main"]);
    git(dir, &["add", "-A"]);
    commit(dir, "init");
}

/// Commits what is staged in `dir` as a test author.
pub fn commit(dir: &Path, message: &str) {
    git(
        dir,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "--quiet",
            "-m",
            message,
        ],
    );
}

/// Reads a `--format jsonl` stream in the order runner decided and asserts that no `what`
/// (`step` or `subagent`) started while another was running; returns how many started.
pub fn one_at_a_time(jsonl: &str, what: &str) -> usize {
    let (start, finish) = (format!("{what}_started"), format!("{what}_finished"));
    let mut running: Option<String> = None;
    let mut started = 0;
    for line in jsonl.lines() {
        let event: serde_json::Value = serde_json::from_str(line).unwrap();
        let who = event[what].as_str().unwrap_or_default().to_owned();
        let kind = event["event"].as_str().unwrap();
        if kind == start {
            assert!(running.is_none(), "{who} started while {running:?} ran");
            running = Some(who);
            started += 1;
        } else if kind == finish {
            assert_eq!(running.take().as_deref(), Some(who.as_str()));
        }
    }
    started
}

/// `package` (`name@version`) from npm, installed once under `target/<dir>` (tests of one run
/// that need it at the same time wait for one install, others go on); the folder it went to.
pub fn npm_install(dir: &str, package: &str, marker: &str) -> PathBuf {
    type Locks =
        std::sync::Mutex<std::collections::BTreeMap<String, std::sync::Arc<std::sync::Mutex<()>>>>;
    static LOCKS: Locks = std::sync::Mutex::new(std::collections::BTreeMap::new());
    let lock = LOCKS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(dir.to_owned())
        .or_default()
        .clone();
    let _one_at_a_time = lock.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Path::new(REPO).join("target").join(dir);
    if !dir.join(marker).exists() {
        std::fs::create_dir_all(&dir).unwrap();
        let installed = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(package)
            .status()
            .unwrap_or_else(|e| panic!("npm is needed to install {package}: {e}"));
        assert!(installed.success(), "npm install {package} failed");
    }
    dir
}
