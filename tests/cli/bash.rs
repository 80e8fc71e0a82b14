//! `bash` under its sandbox supervisor (the real `runner` binary), called through the library:
//! exit codes and output, timeouts, cancellation, processes that try to outlive their call, and
//! what the Landlock and seccomp sandbox lets a command do.

use std::io::Read;
use std::net::TcpListener;
use std::path::PathBuf;
use std::time::Duration;

use camino::Utf8PathBuf;
use runner::sandbox::{Mode, Support};
use runner::tools::ToolOutput;
use runner::tools::bash::{BashEnv, bash};
use runner::tools::confine::Workspace;
use serde_json::json;

fn env(mode: Mode, network: bool) -> BashEnv {
    let mut env = BashEnv::new(mode, network);
    env.exe = PathBuf::from(env!("CARGO_BIN_EXE_runner"));
    env
}

struct Place {
    _dir: tempfile::TempDir,
    /// The working directory.
    ws: Workspace,
    /// A directory beside it, outside.
    outside: Utf8PathBuf,
}

fn place() -> Place {
    let dir = tempfile::tempdir().unwrap();
    let base = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
    let root = base.join("work");
    let outside = base.join("outside");
    for d in [
        root.join("src"),
        root.join(".git/hooks"),
        root.join(".runner/runs"),
        outside.clone(),
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(root.join("src/lib.rs"), "fn a() {}\n").unwrap();
    std::fs::write(root.join("README.md"), "hello\n").unwrap();
    std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
    Place {
        _dir: dir,
        ws: Workspace::new(&root).unwrap(),
        outside,
    }
}

async fn run(place: &Place, env: &BashEnv, command: &str) -> ToolOutput {
    bash(&place.ws, &json!({"command": command}), env).await
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

#[tokio::test]
async fn runs_in_the_workdir_and_reports_exit_codes() {
    let p = place();
    for mode in [Mode::ReadOnly, Mode::Workdir, Mode::Off] {
        let env = env(mode, false);
        let out = run(&p, &env, "pwd; echo oops >&2; exit 3").await;
        assert!(out.is_error);
        assert!(out.text.starts_with("exit code 3\n"), "{}", out.text);
        assert!(out.text.contains(p.ws.root().as_str()));
        assert!(out.text.contains("[stderr]\noops"));
        let ok = run(&p, &env, "echo hi").await;
        assert_eq!(ok, ToolOutput::ok("exit code 0\nhi\n"), "{mode:?}");
    }
}

#[tokio::test]
async fn long_output_keeps_head_and_tail() {
    let p = place();
    let out = run(&p, &env(Mode::ReadOnly, false), "seq 1 100000").await;
    assert!(out.text.contains("\n1\n2\n3\n"));
    assert!(out.text.contains("100000\n"));
    assert!(out.text.contains("bytes cut"));
    assert!(out.text.len() < 40_000);
}

#[tokio::test]
async fn a_huge_timeout_is_clamped_not_a_panic() {
    let p = place();
    let out = bash(
        &p.ws,
        &json!({"command": "echo fine", "timeout": 1e20}),
        &env(Mode::ReadOnly, false),
    )
    .await;
    assert_eq!(out, ToolOutput::ok("exit code 0\nfine\n"));
}

#[tokio::test]
async fn the_timeout_holds_and_kills_everything_even_escaped_processes() {
    let p = place();
    let env = env(Mode::Off, false);
    // One child in the group, one that left it with setsid and keeps stdout open.
    let cmd = "sleep 300 & echo $! > $TMPDIR/bg.pid; setsid sleep 300 & echo $! > $TMPDIR/sid.pid; sleep 300";
    // The timeout leaves the shell seconds to write both pids, even on a loaded machine (at 0.5 s
    // it sometimes had not yet written the second when it was killed).
    let out = bash(&p.ws, &json!({"command": cmd, "timeout": 3}), &env).await;
    assert!(out.is_error);
    assert!(out.text.contains("timed out after 3s"), "{}", out.text);
    let tmp = read_tmp(&p, &env, "bg.pid sid.pid").await;
    for pid in tmp.split_whitespace() {
        assert!(wait_dead(pid), "process {pid} outlived the call");
    }
}

/// The pids a command left in the step's temporary directory.
async fn read_tmp(p: &Place, env: &BashEnv, files: &str) -> String {
    let out = run(p, env, &format!("cd $TMPDIR && cat {files}")).await;
    assert!(!out.is_error, "{}", out.text);
    out.text.trim_start_matches("exit code 0\n").to_owned()
}

#[tokio::test]
async fn a_command_that_returns_takes_its_background_processes_along() {
    let p = place();
    let env = env(Mode::ReadOnly, false);
    // The daemon escapes the process group and holds stdout open; the call still returns at once
    // when bash exits, and the daemon is gone.
    let out = run(
        &p,
        &env,
        "(setsid sleep 300 & echo $! > $TMPDIR/daemon.pid); echo returned",
    )
    .await;
    assert_eq!(out, ToolOutput::ok("exit code 0\nreturned\n"));
    let pid = read_tmp(&p, &env, "daemon.pid").await;
    assert!(wait_dead(&pid), "the daemon outlived its call");
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_the_call_kills_the_whole_tree() {
    let p = place();
    let env = std::sync::Arc::new(env(Mode::Off, false));
    let fifo = p.outside.join("ready");
    nix::unistd::mkfifo(fifo.as_std_path(), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let ws = std::sync::Arc::new(p.ws);
    let (ws2, env2, fifo2) = (ws.clone(), env.clone(), fifo.clone());
    let call = tokio::spawn(async move {
        bash(
            &ws2,
            &json!({"command": format!("setsid sleep 300 & echo $! > {fifo2}; wait")}),
            &env2,
        )
        .await
    });
    // Readiness: the command writes the escaped sleep's pid into the FIFO.
    let pid = tokio::task::spawn_blocking(move || std::fs::read_to_string(fifo).unwrap())
        .await
        .unwrap();
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    assert!(
        wait_dead(&pid),
        "the escaped sleep outlived the cancelled call"
    );
}

#[tokio::test]
async fn bash_gets_only_the_variables_it_is_given() {
    let p = place();
    let mut env = env(Mode::ReadOnly, false);
    env.vars = vec![("ONLY_THIS".into(), "yes".into())];
    let out = run(
        &p,
        &env,
        "echo ${HOME-unset} ${CARGO_HOME-unset} $ONLY_THIS",
    )
    .await;
    assert_eq!(out.text, "exit code 0\nunset unset yes\n");
}

#[tokio::test]
async fn read_only_bash_writes_nothing_but_its_temporary_directory() {
    let p = place();
    let env = env(Mode::ReadOnly, false);
    let root = p.ws.root().to_owned();
    let attempts = [
        "touch new.txt",
        "echo more >> README.md",
        ": > README.md",
        "truncate -s 0 README.md",
        "rm README.md",
        "mkdir newdir",
        "mv README.md moved.md",
        "ln -s /etc/passwd link",
        &format!("touch {}/x", p.outside),
        "touch /tmp/runner-sandbox-escape",
        "touch /dev/shm/runner-sandbox-escape",
    ];
    for attempt in attempts {
        let out = run(&p, &env, attempt).await;
        assert!(out.is_error, "`{attempt}` succeeded:\n{}", out.text);
    }
    assert_eq!(
        std::fs::read_to_string(root.join("README.md")).unwrap(),
        "hello\n"
    );
    assert!(!root.join("new.txt").exists() && !root.join("newdir").exists());
    assert!(!std::path::Path::new("/tmp/runner-sandbox-escape").exists());
    assert_eq!(std::fs::read_dir(&p.outside).unwrap().count(), 0);
    // Reading works, and the private temporary directory takes writes.
    let ok = run(
        &p,
        &env,
        "cat src/lib.rs && echo scratch > $TMPDIR/s && cat $TMPDIR/s && ls /etc >/dev/null",
    )
    .await;
    assert_eq!(ok, ToolOutput::ok("exit code 0\nfn a() {}\nscratch\n"));
}

#[tokio::test]
async fn without_landlock_a_read_only_bash_is_refused_not_run_unconfined() {
    let p = place();
    let mut env = env(Mode::ReadOnly, false);
    env.support = Support { landlock_abi: 0 };
    let out = run(&p, &env, "touch new.txt").await;
    assert!(out.is_error, "{}", out.text);
    assert!(
        out.text.contains("the kernel has no Landlock"),
        "{}",
        out.text
    );
    assert!(!p.ws.root().join("new.txt").exists());
    // What the run says once, before any step: which modes lose what.
    let warning = env
        .support
        .warning([Mode::ReadOnly, Mode::Workdir])
        .unwrap();
    assert!(
        warning.contains("read-only steps get no bash")
            && warning.contains("can write anywhere this user can")
            && warning.contains("`--sandbox off`"),
        "{warning}"
    );
    assert_eq!(env.support.warning([Mode::Off]), None);
    assert_eq!(
        Support::probe().warning([Mode::ReadOnly]),
        None,
        "this machine has Landlock"
    );
}

#[tokio::test]
async fn the_temporary_directory_goes_with_the_step() {
    let p = place();
    let env = env(Mode::ReadOnly, false);
    let out = run(&p, &env, "echo $TMPDIR").await;
    let tmp = out
        .text
        .trim_start_matches("exit code 0\n")
        .trim()
        .to_owned();
    assert!(std::path::Path::new(&tmp).is_dir(), "{tmp}");
    drop(env);
    assert!(
        !std::path::Path::new(&tmp).exists(),
        "{tmp} was not removed"
    );
}

#[tokio::test]
async fn without_network_no_socket_opens() {
    let p = place();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    for mode in [Mode::ReadOnly, Mode::Workdir] {
        let env = env(mode, false);
        for attempt in [
            format!("exec 3<>/dev/tcp/127.0.0.1/{port}"),
            "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)'".into(),
            "python3 -c 'import socket; socket.socket(socket.AF_UNIX)'".into(),
        ] {
            let out = run(&p, &env, &attempt).await;
            assert!(out.is_error, "{mode:?}: `{attempt}` worked:\n{}", out.text);
        }
    }
    assert!(
        listener.accept().is_err(),
        "a sandboxed command reached the listener"
    );
    // With network = true the same connection goes through.
    let out = run(
        &p,
        &env(Mode::Workdir, true),
        &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"),
    )
    .await;
    assert_eq!(out, ToolOutput::ok("exit code 0\nconnected\n"));
    listener.set_nonblocking(false).unwrap();
    let (mut conn, _) = listener.accept().unwrap();
    let mut buf = Vec::new();
    let _ = conn.read_to_end(&mut buf);
}

#[tokio::test]
async fn a_writing_step_writes_its_directory_but_not_git_state_or_outside() {
    let p = place();
    let mut env = env(Mode::Workdir, false);
    let root = p.ws.root().to_owned();
    env.protected = vec![
        root.join(".git").into_std_path_buf(),
        root.join(".runner").into_std_path_buf(),
    ];
    let ok = run(
        &p,
        &env,
        "echo changed > README.md && mkdir -p src/new && echo x > src/new/f && rm src/lib.rs && echo done",
    )
    .await;
    assert_eq!(ok, ToolOutput::ok("exit code 0\ndone\n"));
    // The root itself takes new files and folders, as `cargo test` (Cargo.lock, target/) and
    // pytest (.pytest_cache/) need, and gives them up again.
    let ok = run(
        &p,
        &env,
        "touch Cargo.lock new.txt && mkdir -p target/debug tests && rm new.txt && mv tests t2 && rmdir t2 && echo done",
    )
    .await;
    assert_eq!(ok, ToolOutput::ok("exit code 0\ndone\n"));
    assert!(root.join("Cargo.lock").is_file() && root.join("target/debug").is_dir());
    assert!(!root.join("new.txt").exists() && !root.join("t2").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("README.md")).unwrap(),
        "changed\n"
    );
    assert!(root.join("src/new/f").exists() && !root.join("src/lib.rs").exists());
    for attempt in [
        "git config core.fsmonitor 'env > /tmp/leak'".to_owned(),
        "echo '[core] fsmonitor = env' >> .git/config".to_owned(),
        "echo '#!/bin/sh' > .git/hooks/pre-commit".to_owned(),
        "mkdir -p .runner/runs/99999999T999999-ffff && echo '{}' > .runner/runs/99999999T999999-ffff/run.json".to_owned(),
        format!("echo x > {}/planted", p.outside),
        "ln -s ../outside escape && echo x > escape/planted".to_owned(),
        "cd src && ln -s ../.git g && echo x > g/config".to_owned(),
        // With the root writable, `.git` and the state directory must not be moved, removed,
        // replaced or unmounted either.
        "mv .git git-moved".to_owned(),
        "rm -rf .git".to_owned(),
        "rm -rf .runner".to_owned(),
        "mv .runner elsewhere".to_owned(),
        "umount .git".to_owned(),
        "umount -l .runner".to_owned(),
        "mount -o remount,rw .git".to_owned(),
        "touch .git/new-file".to_owned(),
        "mkdir .git/hooks2".to_owned(),
    ] {
        let out = run(&p, &env, &attempt).await;
        assert!(out.is_error, "`{attempt}` succeeded:\n{}", out.text);
    }
    assert_eq!(
        std::fs::read_to_string(root.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!root.join(".git/hooks/pre-commit").exists());
    assert!(root.join(".git/hooks").is_dir() && root.join(".runner/runs").is_dir());
    assert!(!root.join(".git/new-file").exists() && !root.join(".git/hooks2").exists());
    assert!(!root.join("git-moved").exists() && !root.join("elsewhere").exists());
    assert!(!root.join(".runner/runs/99999999T999999-ffff").exists());
    assert_eq!(std::fs::read_dir(&p.outside).unwrap().count(), 0);
}

#[tokio::test]
async fn runner_cannot_be_signalled_or_read_from_the_sandbox() {
    let p = place();
    let env = env(Mode::ReadOnly, false);
    // The supervisor's parent is this test process: what runner is to a real step.
    let me = std::process::id();
    for attempt in [
        format!("kill -0 {me}"),
        format!("head -c 1 /proc/{me}/environ"),
        format!("head -c 1 /proc/{me}/mem"),
    ] {
        let out = run(&p, &env, &attempt).await;
        assert!(out.is_error, "`{attempt}` worked:\n{}", out.text);
    }
}

/// A `.git` that is a link cannot be bound read-only (a bind follows it), and a writable root
/// would let the step swap the link for a `.git` of its own: the root then stays unwritable.
#[tokio::test]
async fn a_git_link_at_the_root_cannot_be_swapped() {
    let p = place();
    let root = p.ws.root().to_owned();
    std::fs::remove_dir_all(root.join(".git")).unwrap();
    std::fs::create_dir_all(p.outside.join("real-git")).unwrap();
    std::os::unix::fs::symlink(p.outside.join("real-git"), root.join(".git")).unwrap();
    let mut env = env(Mode::Workdir, false);
    env.protected = vec![
        root.join(".git").into_std_path_buf(),
        root.join(".runner").into_std_path_buf(),
    ];
    for attempt in ["rm .git && mkdir .git", "mv .git old && mkdir .git"] {
        let out = run(&p, &env, attempt).await;
        assert!(out.is_error, "`{attempt}` succeeded:\n{}", out.text);
    }
    assert!(
        root.join(".git")
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // Subfolders stay writable.
    let ok = run(&p, &env, "echo x > src/new.txt && echo done").await;
    assert_eq!(ok, ToolOutput::ok("exit code 0\ndone\n"));
}

/// Inode flags (`chattr`: append-only, no-atime, synchronous, immutable …) reach any file the
/// user owns and no Landlock rule covers them: no bash may set them, read-only or writing, in
/// its directory or outside it.
#[tokio::test]
async fn no_bash_sets_inode_flags() {
    let p = place();
    let outside = p.outside.join("owned.txt");
    std::fs::write(&outside, "x\n").unwrap();
    let inside = p.ws.root().join("README.md");
    // The file system takes the flag from an unconfined process: the refusal is the sandbox's.
    let free = std::process::Command::new("chattr")
        .args(["+A", outside.as_str()])
        .status()
        .expect("chattr (Debian's e2fsprogs, always installed) is needed");
    let supported = free.success();
    let _ = std::process::Command::new("chattr")
        .args(["-A", outside.as_str()])
        .status();
    assert!(supported, "this file system takes no inode flags");
    for mode in [Mode::ReadOnly, Mode::Workdir] {
        let mut env = env(mode, false);
        env.protected = vec![p.ws.root().join(".git").into_std_path_buf()];
        for target in [&outside, &inside] {
            for flag in ["+A", "+S", "+d"] {
                let out = run(&p, &env, &format!("chattr {flag} {target}")).await;
                assert!(
                    out.is_error,
                    "{mode:?} chattr {flag} {target}:\n{}",
                    out.text
                );
            }
        }
    }
    let flags = std::process::Command::new("lsattr")
        .arg(outside.as_str())
        .output()
        .unwrap();
    let flags = String::from_utf8_lossy(&flags.stdout);
    let flags = flags.split_whitespace().next().unwrap_or_default();
    assert!(
        !flags.contains('A') && !flags.contains('S') && !flags.contains('d'),
        "{flags}"
    );
}

/// A command starts as from a shell: no signal ignored that runner ignores for itself (SIGXFSZ,
/// so that a full disk is an error runner reports).
#[test]
fn commands_start_with_default_signal_dispositions() {
    let out = crate::support::Test::new()
        .file(
            "w.toml",
            "name = \"s\"\n[steps.s]\nrun = \"grep SigIgn /proc/self/status\"\n",
        )
        .args(&["run", "w.toml", "--format", "json"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let line = run["steps"]["s"]["summary"].as_str().unwrap().to_owned();
    let mask = u64::from_str_radix(line.split_whitespace().last().unwrap(), 16).unwrap();
    // Bit n-1 stands for signal n; SIGXFSZ is 25.
    assert_eq!(mask & (1 << 24), 0, "{line}");
}
