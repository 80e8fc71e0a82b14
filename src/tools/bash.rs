//! `bash`: `bash -c` in the working directory, in its own process group, with a timeout, an output
//! cap and no provider keys in its environment. When the command ends, times out or the step is
//! cancelled (the future dropped), the whole group is killed, so nothing it started lives on.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use super::confine::Workspace;
use super::fs::{ToolOutput, parse_input};

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// Bytes kept of stdout and of stderr; the middle is cut beyond this.
const MAX_STREAM_BYTES: usize = 30_000;
/// Bytes read from each stream at most (the rest is drained and dropped).
const MAX_READ_BYTES: usize = 4 * 1024 * 1024;

#[derive(Deserialize)]
struct BashInput {
    command: String,
    /// Seconds.
    #[serde(default)]
    timeout: Option<f64>,
}

/// Environment variables `bash` must not see: every `*_API_KEY` plus the configured ones.
pub fn scrubbed_vars(configured: &[String]) -> Vec<String> {
    let mut names: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.ends_with("_API_KEY"))
        .collect();
    names.extend(configured.iter().cloned());
    names.sort();
    names.dedup();
    names
}

/// Kills the process group when dropped: on timeout, on cancellation, and after the command
/// exits (background children it left).
struct GroupGuard(Option<Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            // ESRCH (already gone) is the common, harmless case.
            let _ = killpg(pid, Signal::SIGKILL);
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
fn cap(bytes: &[u8], total: usize) -> String {
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
    let cut = total - head_end - (text.len() - tail_start);
    format!(
        "{}\n[… {cut} bytes cut; redirect to a file and read it in parts to see everything …]\n{}",
        &text[..head_end],
        &text[tail_start..]
    )
}

pub async fn bash(ws: &Workspace, input: &Value, scrub: &[String]) -> ToolOutput {
    let input: BashInput = match parse_input("bash", input) {
        Ok(input) => input,
        Err(err) => return err,
    };
    let timeout = match input.timeout {
        Some(secs) if secs.is_finite() && secs > 0.0 => {
            Duration::from_secs_f64(secs).min(MAX_TIMEOUT)
        }
        _ => DEFAULT_TIMEOUT,
    };
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(&input.command)
        .current_dir(ws.root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    for name in scrub {
        command.env_remove(name);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => return ToolOutput::error(format!("cannot start bash: {err}")),
    };
    let mut guard = GroupGuard(
        child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw),
    );
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return ToolOutput::error("cannot capture the command's output");
    };
    let out_task = tokio::spawn(read_capped(stdout));
    let err_task = tokio::spawn(read_capped(stderr));
    let status = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) => Some(status),
        Ok(Err(err)) => return ToolOutput::error(format!("waiting for the command failed: {err}")),
        Err(_) => None,
    };
    // Whatever the command left running in the background goes too; then the pipes close.
    drop(std::mem::replace(&mut guard, GroupGuard(None)));
    let (stdout, out_total) = out_task.await.unwrap_or_default();
    let (stderr, err_total) = err_task.await.unwrap_or_default();
    let mut text = String::new();
    match status {
        None => text.push_str(&format!(
            "the command timed out after {}s and was killed, with every process it started\n",
            timeout.as_secs_f64()
        )),
        Some(status) => match status.code() {
            Some(code) => text.push_str(&format!("exit code {code}\n")),
            None => text.push_str("the command was killed by a signal\n"),
        },
    }
    if !stdout.is_empty() {
        text.push_str(&cap(&stdout, out_total));
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    if !stderr.is_empty() {
        text.push_str("[stderr]\n");
        text.push_str(&cap(&stderr, err_total));
    }
    let failed = status.is_none_or(|s| !s.success());
    if failed {
        ToolOutput::error(text)
    } else {
        ToolOutput::ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use camino::Utf8PathBuf;
    use serde_json::json;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().to_owned()).unwrap();
        (dir, Workspace::new(&root).unwrap())
    }

    #[tokio::test]
    async fn runs_in_the_workdir_and_reports_exit_codes() {
        let (_d, ws) = workspace();
        let out = bash(&ws, &json!({"command": "pwd; echo oops >&2; exit 3"}), &[]).await;
        assert!(out.is_error);
        assert!(out.text.starts_with("exit code 3\n"), "{}", out.text);
        assert!(out.text.contains(ws.root().as_str()));
        assert!(out.text.contains("[stderr]\noops"));
        let ok = bash(&ws, &json!({"command": "echo hi"}), &[]).await;
        assert_eq!(ok, ToolOutput::ok("exit code 0\nhi\n"));
    }

    #[tokio::test]
    async fn long_output_keeps_head_and_tail() {
        let (_d, ws) = workspace();
        let out = bash(&ws, &json!({"command": "seq 1 100000"}), &[]).await;
        assert!(out.text.contains("\n1\n2\n3\n"));
        assert!(out.text.contains("100000\n"));
        assert!(out.text.contains("bytes cut"));
        assert!(out.text.len() < 40_000);
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let (_d, ws) = workspace();
        let cmd = "sleep 300 & echo $! > bg.pid; sleep 300";
        let out = bash(&ws, &json!({"command": cmd, "timeout": 0.5}), &[]).await;
        assert!(out.is_error);
        assert!(out.text.contains("timed out after 0.5s"), "{}", out.text);
        let pid = std::fs::read_to_string(ws.root().join("bg.pid")).unwrap();
        // Without the group kill it would sleep for 300 s.
        assert!(wait_dead(&pid), "the background sleep is still alive");
    }

    /// Waits (bounded) until `pid` is gone or a zombie; SIGKILL lands asynchronously.
    fn wait_dead(pid: &str) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let stat =
                std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().next());
            if matches!(state, None | Some("Z") | Some("X")) {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::yield_now();
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn cancelling_the_call_kills_the_whole_group() {
        let (_d, ws) = workspace();
        let fifo = ws.root().join("ready");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let ws2 = ws.clone();
        let call = tokio::spawn(async move {
            bash(
                &ws2,
                &json!({"command": "sleep 300 & echo $! > ready; wait"}),
                &[],
            )
            .await
        });
        // Readiness: the command writes the background pid into the FIFO.
        let pid = tokio::task::spawn_blocking(move || std::fs::read_to_string(fifo).unwrap())
            .await
            .unwrap();
        call.abort();
        assert!(call.await.unwrap_err().is_cancelled());
        assert!(
            wait_dead(&pid),
            "the background sleep outlived the cancelled call"
        );
    }

    #[tokio::test]
    async fn scrubbed_variables_are_absent() {
        let (_d, ws) = workspace();
        let out = bash(
            &ws,
            &json!({"command": "echo ${HOME-unset}"}),
            &["HOME".into()],
        )
        .await;
        assert_eq!(out.text, "exit code 0\nunset\n");
    }

    #[test]
    fn scrub_list_covers_api_keys_and_configured_names() {
        let names = scrubbed_vars(&["LOCAL_TOKEN".into()]);
        assert!(names.contains(&"LOCAL_TOKEN".to_owned()));
        assert!(
            names
                .iter()
                .all(|n| n.ends_with("_API_KEY") || n == "LOCAL_TOKEN")
        );
    }
}
