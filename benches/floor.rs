//! Runner against its floor: the same request bytes sent by a minimal client to the same server.
//!
//! One small HTTP/1.1 server in this process speaks Anthropic's streamed Messages API from
//! prebuilt replies (it does no JSON work, so it is not what is measured). Each case first runs
//! the release binary once with the server keeping every body it receives; those bodies are the
//! floor client's requests. The floor client is this benchmark's own executable started again as
//! a separate process: it loads the bodies, then writes each one with its headers to a kept-alive
//! connection and reads the reply to its last byte, nothing more. Both are timed as whole
//! processes, medians, side by side in one run; the floor's time leaves out its loading the
//! bodies from disk, which runner does not do.
//!
//! 1. Turns: one step, each turn a `read_file` of a 2 kB file, at 30, 100 and 300 turns. Time per
//!    turn is read off the server's clock: from the first request's arrival to the last's, over
//!    the turns between, for each client alike (the client's whole turn: reading the reply, its
//!    own work, writing the next request). Process start-up is outside it: runner's start varies
//!    by several milliseconds from run to run, which spread over 29 turns is more than a turn.
//!    Also microseconds per kB sent, which stays flat when the time is linear in the bytes sent,
//!    and, for reference, the slope between whole-process times of a one-turn run and the long
//!    one. Budget: runner under 1 ms a turn (a model turn takes seconds; what matters is that
//!    runner's own share stays out of sight). The floor clients are printed beside it for
//!    reference, not as a budget: a third client, the floor that also reads the 2 kB file after
//!    each reply asking for it (open, read, close: what any `read_file` must do), and a fourth,
//!    the floor that also does the least work any client must do in a turn (`turn_work`: read
//!    the reply's events as JSON, read the file, write the result as JSON, digest the new
//!    bytes).
//! 2. Memory: 50 turns, each reading four 256 kB files (1 MB a turn). Runner's peak RSS (from
//!    `wait4`, read by a small measuring process that starts runner; see `measure`) against the
//!    final request's size, budget 2.5x; transcript bytes per turn, budget 1.2 MB.
//! 3. Wide: 1,000 one-turn steps, 100 at once, every reply after 400 ms (critical path 4.0 s).
//!    Makespan of runner against the floor client doing the same 1,000 requests over 100
//!    connections, budget 1.15x; runner's peak RSS, budget 60 MB.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the server answers and keeps, set by the benchmark before each run.
#[derive(Default)]
struct Script {
    /// Replies still to give as tool calls before the final answer; the final answer resets it
    /// to `turns - 1` for the next conversation.
    tool_replies_left: usize,
    turns: usize,
    /// `read_file` paths each tool reply asks for.
    paths: Vec<String>,
    delay: Duration,
    /// Keep each body received (the capture run).
    keep: bool,
}

#[derive(Default)]
struct Server {
    script: Mutex<Script>,
    kept: Mutex<Vec<Vec<u8>>>,
    bytes: AtomicUsize,
    requests: AtomicUsize,
    last_len: AtomicUsize,
    replies: AtomicUsize,
    /// When each request of the current run had arrived whole, by the server's clock.
    arrivals: Mutex<Vec<Instant>>,
}

impl Server {
    fn set(&self, turns: usize, paths: &[&str], delay: Duration, keep: bool) {
        *self.script.lock().unwrap() = Script {
            tool_replies_left: turns - 1,
            turns,
            paths: paths.iter().map(|p| p.to_string()).collect(),
            delay,
            keep,
        };
        self.kept.lock().unwrap().clear();
        self.arrivals.lock().unwrap().clear();
        self.bytes.store(0, Ordering::SeqCst);
        self.requests.store(0, Ordering::SeqCst);
    }

    /// Time per turn of the last run by this server's clock: from the first request's arrival to
    /// the last's, over the turns between. Each such interval is the client's whole turn (reading
    /// the reply, its own work, writing the next request) plus the server's same share; a
    /// process's start-up and exit are outside it.
    fn per_turn(&self) -> Duration {
        let arrivals = self.arrivals.lock().unwrap();
        match (arrivals.first(), arrivals.last()) {
            (Some(first), Some(last)) if arrivals.len() > 1 => {
                (*last - *first) / (arrivals.len() - 1) as u32
            }
            _ => Duration::ZERO,
        }
    }

    /// The next reply, as a whole HTTP response, and how long to wait before it.
    fn reply(&self) -> (Vec<u8>, Duration) {
        let n = self.replies.fetch_add(1, Ordering::Relaxed);
        let mut script = self.script.lock().unwrap();
        let events = if script.tool_replies_left > 0 {
            script.tool_replies_left -= 1;
            tool_reply(n, &script.paths)
        } else {
            script.tool_replies_left = script.turns.saturating_sub(1);
            text_reply()
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
            events.len()
        );
        let mut out = head.into_bytes();
        out.extend_from_slice(events.as_bytes());
        (out, script.delay)
    }
}

fn event(out: &mut String, kind: &str, data: &str) {
    out.push_str("event: ");
    out.push_str(kind);
    out.push_str("\ndata: ");
    out.push_str(data);
    out.push_str("\n\n");
}

const START: &str = r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"bench","content":[],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}}}"#;

fn tool_reply(n: usize, paths: &[String]) -> String {
    let mut out = String::new();
    event(&mut out, "message_start", START);
    for (i, path) in paths.iter().enumerate() {
        event(
            &mut out,
            "content_block_start",
            &format!(
                r#"{{"type":"content_block_start","index":{i},"content_block":{{"type":"tool_use","id":"tu_{n}_{i}","name":"read_file","input":{{}}}}}}"#
            ),
        );
        event(
            &mut out,
            "content_block_delta",
            &format!(
                r#"{{"type":"content_block_delta","index":{i},"delta":{{"type":"input_json_delta","partial_json":"{{\"path\":\"{path}\"}}"}}}}"#
            ),
        );
        event(
            &mut out,
            "content_block_stop",
            &format!(r#"{{"type":"content_block_stop","index":{i}}}"#),
        );
    }
    event(
        &mut out,
        "message_delta",
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":20}}"#,
    );
    event(&mut out, "message_stop", r#"{"type":"message_stop"}"#);
    out
}

fn text_reply() -> String {
    let mut out = String::new();
    event(&mut out, "message_start", START);
    event(
        &mut out,
        "content_block_start",
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    );
    event(
        &mut out,
        "content_block_delta",
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Done."}}"#,
    );
    event(
        &mut out,
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    );
    event(
        &mut out,
        "message_delta",
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}"#,
    );
    event(&mut out, "message_stop", r#"{"type":"message_stop"}"#);
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `content-length` of a header block, whatever its case.
fn content_length(head: &[u8]) -> usize {
    String::from_utf8_lossy(head)
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0)
}

async fn connection(mut socket: tokio::net::TcpStream, server: Arc<Server>) {
    let _ = socket.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    loop {
        let end = loop {
            if let Some(at) = find(&buf, b"\r\n\r\n") {
                break at + 4;
            }
            match socket.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let len = content_length(&buf[..end]);
        while buf.len() < end + len {
            buf.reserve(end + len - buf.len());
            match socket.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        server.arrivals.lock().unwrap().push(Instant::now());
        server.bytes.fetch_add(len, Ordering::Relaxed);
        server.requests.fetch_add(1, Ordering::Relaxed);
        server.last_len.store(len, Ordering::Relaxed);
        let keep = server.script.lock().unwrap().keep;
        if keep {
            server
                .kept
                .lock()
                .unwrap()
                .push(buf[end..end + len].to_vec());
        }
        buf.drain(..end + len);
        let (reply, delay) = server.reply();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if socket.write_all(&reply).await.is_err() {
            return;
        }
    }
}

/// The server on its own thread and runtime; its address.
fn start_server(server: Arc<Server>) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            loop {
                if let Ok((socket, _)) = listener.accept().await {
                    tokio::spawn(connection(socket, server.clone()));
                }
            }
        });
    });
    addr
}

/// A finished process: wall time and peak RSS.
struct Measured {
    wall: Duration,
    max_rss_kb: u64,
    stdout: String,
}

/// Runs `command` to its end, timing it and reading its peak RSS, through a measuring process
/// (this executable started again). Linux gives a process started from a large one that one's
/// peak as its own starting peak (exec records the peak of the memory it leaves behind), and this
/// benchmark holds every body it kept: measured from here, runner's peak would be at least the
/// benchmark's. The measuring process is small when it starts runner, so the peak is runner's.
fn measure(command: &mut Command) -> Measured {
    let mut wrapper = Command::new(std::env::current_exe().expect("own executable"));
    wrapper
        .env("RUNNER_FLOOR_MEASURE", "1")
        .arg(command.get_program())
        .args(command.get_args());
    if let Some(dir) = command.get_current_dir() {
        wrapper.current_dir(dir);
    }
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => wrapper.env(name, value),
            None => wrapper.env_remove(name),
        };
    }
    let measured = measure_here(&mut wrapper);
    let (line, stdout) = measured
        .stdout
        .split_once('\n')
        .expect("the measuring process's first line");
    let mut figures = line.split(' ').map(|f| f.parse::<u64>().expect("a figure"));
    let (wall, max_rss_kb) = (figures.next().expect("wall"), figures.next().expect("rss"));
    Measured {
        wall: Duration::from_micros(wall),
        max_rss_kb,
        stdout: stdout.to_owned(),
    }
}

/// The measuring process: runs its arguments as a command and prints its wall time (us) and
/// peak RSS (kB) on a line, then the command's output.
fn measuring_process() {
    let mut args = std::env::args_os().skip(1);
    let mut command = Command::new(args.next().expect("a program"));
    command.args(args).env_remove("RUNNER_FLOOR_MEASURE");
    let measured = measure_here(&mut command);
    print!(
        "{} {}\n{}",
        measured.wall.as_micros(),
        measured.max_rss_kb,
        measured.stdout
    );
}

/// Runs `command` to its end from this process, timing it and reading its peak RSS from `wait4`
/// (which reaps it: std's `wait` cannot give the peak).
#[allow(clippy::zombie_processes)]
fn measure_here(command: &mut Command) -> Measured {
    let started = Instant::now();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = String::new();
    let mut stderr = String::new();
    // Both pipes are read to their end before waiting, so a full pipe cannot stall the child.
    let mut err_pipe = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let _ = err_pipe.read_to_string(&mut stderr);
        stderr
    });
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .expect("read stdout");
    let stderr = reader.join().expect("stderr reader");
    let mut status = 0;
    // SAFETY: a plain FFI call on our own child, with valid pointers to locals.
    let (pid, usage) = unsafe {
        let mut usage: nix::libc::rusage = std::mem::zeroed();
        let pid = nix::libc::wait4(child.id() as i32, &mut status, 0, &mut usage);
        (pid, usage)
    };
    let wall = started.elapsed();
    assert!(pid > 0, "wait4 failed");
    assert!(
        nix::libc::WIFEXITED(status) && nix::libc::WEXITSTATUS(status) == 0,
        "{command:?} failed: {stderr}"
    );
    Measured {
        wall,
        max_rss_kb: usage.ru_maxrss as u64,
        stdout,
    }
}

fn runner(dir: &Path, addr: SocketAddr) -> Command {
    // RUNNER_FLOOR_BIN measures another build (one with frame pointers, for a profile).
    let bin = std::env::var_os("RUNNER_FLOOR_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_runner")),
        PathBuf::from,
    );
    let mut command = Command::new(bin);
    command
        .args(["run", "w.toml", "--no-progress"])
        .current_dir(dir)
        .env("ANTHROPIC_BASE_URL", format!("http://{addr}"))
        .env("ANTHROPIC_API_KEY", "bench");
    command
}

/// Writes what the server kept to `dir` as the floor client's requests.
fn keep_bodies(server: &Server, dir: &Path) -> usize {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("bodies dir");
    let kept = server.kept.lock().unwrap();
    for (i, body) in kept.iter().enumerate() {
        std::fs::write(dir.join(format!("{i:06}.json")), body).expect("write body");
    }
    kept.len()
}

fn floor(bodies: &Path, addr: SocketAddr, connections: usize) -> Measured {
    floor_reading(bodies, addr, connections, None, false)
}

/// The floor client; with `read`, it also reads that file after every reply that asks for a
/// tool, as the turn's `read_file` must (open, read, close; nothing else of the tool's work).
fn floor_reading(
    bodies: &Path,
    addr: SocketAddr,
    connections: usize,
    read: Option<&Path>,
    work: bool,
) -> Measured {
    let mut command = Command::new(std::env::current_exe().expect("own executable"));
    command
        .env("RUNNER_FLOOR_CLIENT", bodies)
        .env("RUNNER_FLOOR_ADDR", addr.to_string())
        .env("RUNNER_FLOOR_CONNECTIONS", connections.to_string());
    if let Some(read) = read {
        command.env("RUNNER_FLOOR_READ", read);
    }
    if work {
        command.env("RUNNER_FLOOR_WORK", "1");
    }
    let mut measured = measure(&mut command);
    let loading: u64 = measured.stdout.trim().parse().expect("load time");
    measured.wall = measured.wall.saturating_sub(Duration::from_micros(loading));
    measured
}

/// The floor client: every body, in order, over `connections` kept-alive connections.
fn floor_client(bodies: &str) {
    let started = Instant::now();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(bodies)
        .expect("bodies")
        .map(|e| e.expect("entry").path())
        .collect();
    paths.sort();
    let bodies: Vec<Vec<u8>> = paths
        .iter()
        .map(|p| std::fs::read(p).expect("body"))
        .collect();
    let loading = started.elapsed();
    let addr: SocketAddr = std::env::var("RUNNER_FLOOR_ADDR")
        .expect("address")
        .parse()
        .expect("address");
    let connections: usize = std::env::var("RUNNER_FLOOR_CONNECTIONS")
        .expect("connections")
        .parse()
        .expect("connections");
    let read = std::env::var_os("RUNNER_FLOOR_READ").map(PathBuf::from);
    let work = std::env::var_os("RUNNER_FLOOR_WORK").is_some();
    let bodies = Arc::new(bodies);
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let bodies = bodies.clone();
            let next = next.clone();
            let read = read.clone();
            std::thread::spawn(move || {
                let mut socket = TcpStream::connect(addr).expect("connect");
                socket.set_nodelay(true).expect("nodelay");
                let mut buf = Vec::with_capacity(1 << 16);
                let mut hasher = sha2::Sha256::default();
                let mut sent = 0;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(body) = bodies.get(i) else { break };
                    let head = format!(
                        "POST /v1/messages HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\nx-api-key: bench\r\nanthropic-version: 2023-06-01\r\ncontent-length: {}\r\n\r\n",
                        body.len()
                    );
                    socket.write_all(head.as_bytes()).expect("write");
                    socket.write_all(body).expect("write");
                    buf.clear();
                    let mut chunk = [0u8; 16384];
                    let end = loop {
                        if let Some(at) = find(&buf, b"\r\n\r\n") {
                            break at + 4;
                        }
                        let n = socket.read(&mut chunk).expect("read");
                        assert!(n > 0, "the server closed");
                        buf.extend_from_slice(&chunk[..n]);
                    };
                    let len = content_length(&buf[..end]);
                    while buf.len() < end + len {
                        let n = socket.read(&mut chunk).expect("read");
                        assert!(n > 0, "the server closed");
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    if work {
                        let read = read.as_deref().expect("a file to read");
                        turn_work(&buf[end..], read, body, &mut hasher, &mut sent);
                    } else if let Some(read) = &read
                        && find(&buf[end..], b"\"tool_use\"").is_some()
                    {
                        std::hint::black_box(std::fs::read(read).expect("the file to read"));
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker");
    }
    println!("{}", loading.as_micros());
}

/// The least work any client must do in a turn besides moving the bytes: read the reply's events
/// as JSON to find the tool call, read the file it asks for, write the result as the next
/// message's JSON, and digest the request's new bytes (SHA-256, carried from turn to turn). Done
/// the plain way with serde_json; nothing is recorded.
fn turn_work(reply: &[u8], read: &Path, body: &[u8], hasher: &mut sha2::Sha256, sent: &mut usize) {
    use sha2::Digest;
    let mut input = String::new();
    let mut id = None;
    for line in reply.split(|b| *b == b'\n') {
        let Some(data) = line.strip_prefix(b"data: ") else {
            continue;
        };
        let event: serde_json::Value = serde_json::from_slice(data).expect("an event");
        if let Some(part) = event
            .pointer("/delta/partial_json")
            .and_then(|v| v.as_str())
        {
            input.push_str(part);
        }
        if let Some(tool) = event.pointer("/content_block/id").and_then(|v| v.as_str()) {
            id = Some(tool.to_owned());
        }
    }
    if let Some(id) = id {
        let input: serde_json::Value = serde_json::from_str(&input).expect("tool input");
        assert!(input["path"].is_string());
        let text = std::fs::read_to_string(read).expect("the file to read");
        let message = serde_json::json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": text}
        ]});
        std::hint::black_box(serde_json::to_vec(&message).expect("json"));
    }
    // The body only grows at its end: what was sent before is digested once.
    let new = body.get(sent.saturating_sub(2)..).unwrap_or_default();
    hasher.update(new);
    std::hint::black_box(hasher.clone().finalize());
    *sent = body.len();
}

fn turns(server: &Arc<Server>, addr: SocketAddr) {
    let dir = tempfile::tempdir().expect("temp dir");
    let line = "The signing key rotates every 90 days; see docs/keys.md for the procedure.\n";
    std::fs::write(dir.path().join("notes.txt"), line.repeat(2048 / line.len())).expect("write");
    std::fs::write(
        dir.path().join("w.toml"),
        "name = \"turns\"\n[models]\ndefault = \"anthropic/bench\"\n[steps.s]\nagent = \"explore\"\nprompt = \"Read notes.txt again and again.\"\nmax_turns = 400\n",
    )
    .expect("write");
    println!(
        "per turn: one step, a read_file of a 2 kB file each turn; runner against the floor client, and against the floor client that also reads the file each turn"
    );
    println!(
        "  turns | per turn, server's clock: runner (budget 1 ms) / floor / +read / +work | ratio | to +read | to +work (+work to floor) | whole-process slope: runner / floor | us per kB sent: runner / floor"
    );
    println!(
        "  (medians over rounds; a round runs each client for one turn and for all, back to back)"
    );
    let notes = dir.path().join("notes.txt");
    // Each client's requests, kept from a runner run, and the bytes sent.
    let capture = |n: usize| {
        let bodies = dir.path().join(format!("bodies-{n}"));
        server.set(n, &["notes.txt"], Duration::ZERO, true);
        measure(&mut runner(dir.path(), addr));
        assert_eq!(keep_bodies(server, &bodies), n, "one request a turn");
        (bodies, server.bytes.load(Ordering::SeqCst))
    };
    let (base_bodies, base_sent) = capture(1);
    // One round: each client run for one turn and for `n` back to back (so that both see the
    // machine in the same state); per client, the turn by the server's clock in the long run and
    // the slope between the two whole-process times.
    let round = |n: usize, bodies: &Path| -> [(Duration, Duration); 4] {
        let pair = |client: &dyn Fn(&Path, usize) -> Duration| {
            server.set(1, &["notes.txt"], Duration::ZERO, false);
            let one = client(&base_bodies, 1);
            server.set(n, &["notes.txt"], Duration::ZERO, false);
            let whole = client(bodies, n);
            assert_eq!(server.requests.load(Ordering::SeqCst), n);
            (
                server.per_turn(),
                whole.saturating_sub(one) / (n - 1) as u32,
            )
        };
        [
            pair(&|_, _| measure(&mut runner(dir.path(), addr)).wall),
            pair(&|bodies, _| floor(bodies, addr, 1).wall),
            pair(&|bodies, _| floor_reading(bodies, addr, 1, Some(&notes), false).wall),
            pair(&|bodies, _| floor_reading(bodies, addr, 1, Some(&notes), true).wall),
        ]
    };
    for n in [30usize, 100, 300] {
        let (bodies, sent) = capture(n);
        let rounds = if n >= 300 { 9 } else { 15 };
        let mut turns: [Vec<Duration>; 4] = Default::default();
        let mut slopes: [Vec<Duration>; 4] = Default::default();
        for _ in 0..rounds {
            for (i, (turn, slope)) in round(n, &bodies).into_iter().enumerate() {
                turns[i].push(turn);
                slopes[i].push(slope);
            }
        }
        let [a, b, c, d] = turns.map(common::median);
        let [slope_a, slope_b, _, _] = slopes.map(common::median);
        let kb = (sent - base_sent) as f64 / 1024.0;
        let per_kb = |per_turn: Duration| ms(per_turn) * 1e3 * (n - 1) as f64 / kb;
        println!(
            "  {n:>5} | {:>7.3}{} / {:>7.3} / {:>7.3} / {:>7.3} ms | {:>5.2} | {:>8.2} | {:>8.2} ({:.2}) | {:>7.3} / {:>7.3} ms | {:>6.2} / {:>6.2} ({:.1} MB sent)",
            ms(a),
            if ms(a) < 1.0 { "" } else { " OVER BUDGET" },
            ms(b),
            ms(c),
            ms(d),
            ms(a) / ms(b),
            ms(a) / ms(c),
            ms(a) / ms(d),
            ms(d) / ms(b),
            ms(slope_a),
            ms(slope_b),
            per_kb(a),
            per_kb(b),
            sent as f64 / 1e6
        );
    }
}

fn memory(server: &Arc<Server>, addr: SocketAddr) {
    let dir = tempfile::tempdir().expect("temp dir");
    let names = ["a.txt", "b.txt", "c.txt", "d.txt"];
    for (i, name) in names.iter().enumerate() {
        // 2,000 lines of 128 bytes: read_file's default window, 256 kB.
        let line = format!("{i} {}\n", "x".repeat(125));
        std::fs::write(dir.path().join(name), line.repeat(2000)).expect("write");
    }
    std::fs::write(
        dir.path().join("w.toml"),
        "name = \"memory\"\n[models]\ndefault = \"anthropic/bench\"\n[steps.s]\nagent = \"explore\"\nprompt = \"Read the four files again and again.\"\nmax_turns = 60\n",
    )
    .expect("write");
    let turns = 50;
    let mut peaks = Vec::new();
    let mut last = 0;
    for _ in 0..3 {
        server.set(turns, &names, Duration::ZERO, false);
        let run = measure(&mut runner(dir.path(), addr));
        peaks.push(run.max_rss_kb);
        last = server.last_len.load(Ordering::SeqCst);
        assert_eq!(server.requests.load(Ordering::SeqCst), turns);
    }
    peaks.sort();
    let peak = peaks[1] as f64 * 1024.0;
    let transcript = transcript_bytes(dir.path());
    println!("memory: {turns} turns, four 256 kB read_file results a turn (1 MB)");
    println!(
        "  final request {:.1} MB; runner peak RSS, median of 3: {:.1} MB = {:.2}x the final request (budget 2.5x)",
        last as f64 / 1e6,
        peak / 1e6,
        peak / last as f64
    );
    println!(
        "  transcript {:.1} MB for 3 runs: {:.2} MB a turn (budget 1.2)",
        transcript as f64 / 1e6,
        transcript as f64 / 1e6 / (3 * turns) as f64
    );
}

/// Bytes of every transcript and shared session file under `.runner/runs`.
fn transcript_bytes(dir: &Path) -> u64 {
    fn walk(path: &Path, total: &mut u64) {
        let Ok(entries) = std::fs::read_dir(path) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, total);
            } else if path.extension().is_some_and(|e| e == "jsonl")
                || path.parent().is_some_and(|p| p.ends_with("sessions"))
            {
                *total += entry.metadata().map(|m| m.len()).unwrap_or(0);
            }
        }
    }
    let mut total = 0;
    walk(&dir.join(".runner/runs"), &mut total);
    total
}

fn wide(server: &Arc<Server>, addr: SocketAddr) {
    let (steps, parallel, latency) = (1000usize, 100usize, Duration::from_millis(400));
    let dir = tempfile::tempdir().expect("temp dir");
    let mut text = format!(
        "name = \"wide\"\nmax_parallel = {parallel}\n[models]\ndefault = \"anthropic/bench\"\n"
    );
    for i in 0..steps {
        text.push_str(&format!(
            "[steps.s{i}]\nagent = \"explore\"\nprompt = \"Look at part {i}.\"\n"
        ));
    }
    std::fs::write(dir.path().join("w.toml"), text).expect("write");
    let bodies = dir.path().join("bodies");
    server.set(1, &[], Duration::ZERO, true);
    measure(&mut runner(dir.path(), addr));
    assert_eq!(keep_bodies(server, &bodies), steps);
    let mut ours = Vec::new();
    let mut rss = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..3 {
        server.set(1, &[], latency, false);
        let run = measure(&mut runner(dir.path(), addr));
        ours.push(run.wall);
        rss.push(run.max_rss_kb);
        server.set(1, &[], latency, false);
        theirs.push(floor(&bodies, addr, parallel).wall);
    }
    rss.sort();
    let critical = latency * (steps / parallel) as u32;
    let (ours, theirs) = (common::median(ours), common::median(theirs));
    println!(
        "wide: {steps} one-turn steps, {parallel} at once, {} ms a reply (critical path {:.1} s)",
        latency.as_millis(),
        critical.as_secs_f64()
    );
    println!(
        "  runner {:.3} s ({:.3}x the critical path), floor client {:.3} s ({:.3}x): ratio {:.3} (budget 1.15)",
        ours.as_secs_f64(),
        ours.as_secs_f64() / critical.as_secs_f64(),
        theirs.as_secs_f64(),
        theirs.as_secs_f64() / critical.as_secs_f64(),
        ours.as_secs_f64() / theirs.as_secs_f64()
    );
    println!(
        "  runner peak RSS, median of 3: {:.1} MB (budget 60)",
        rss[1] as f64 / 1024.0
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    if std::env::var_os("RUNNER_FLOOR_MEASURE").is_some() {
        measuring_process();
        return;
    }
    if let Ok(bodies) = std::env::var("RUNNER_FLOOR_CLIENT") {
        floor_client(&bodies);
        return;
    }
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let server = Arc::new(Server::default());
    let addr = start_server(server.clone());
    // `serve TURNS [PATH...]`: only the server, answering TURNS-turn conversations that read
    // PATH (default notes.txt) each turn, for profiling runner against it by hand.
    if only.as_deref() == Some("serve") {
        let args: Vec<String> = std::env::args()
            .skip(2)
            .filter(|a| !a.starts_with('-'))
            .collect();
        let turns = args.first().and_then(|t| t.parse().ok()).unwrap_or(30);
        let paths: Vec<&str> = match args.get(1..) {
            Some(paths) if !paths.is_empty() => paths.iter().map(String::as_str).collect(),
            _ => vec!["notes.txt"],
        };
        server.set(turns, &paths, Duration::ZERO, false);
        println!("http://{addr}");
        loop {
            std::thread::park();
        }
    }
    let wanted = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    if wanted("turns") {
        turns(&server, addr);
    }
    if wanted("memory") {
        memory(&server, addr);
    }
    if wanted("wide") {
        wide(&server, addr);
    }
}
