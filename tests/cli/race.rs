//! Confinement under a race: another process swaps a directory for a symlink that points out
//! while the file tools run. Resolution and opening happen in one step beneath the working
//! directory, so no try may read or write outside.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use camino::Utf8PathBuf;
use runner::tools::confine::Workspace;
use runner::tools::edit::write_file;
use runner::tools::fs::read_file;
use serde_json::json;

/// Tries under the race. How the tries and the swaps interleave depends on the machine; what
/// each state does is then checked in lockstep, so no assertion depends on the scheduler.
const TRIES: usize = 2_000;

#[test]
fn swapping_a_directory_for_a_symlink_never_leads_outside() {
    let dir = tempfile::tempdir().unwrap();
    let base = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
    let root = base.join("work");
    let outside = base.join("outside");
    std::fs::create_dir_all(root.join("real")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(root.join("real/f"), "inside\n").unwrap();
    std::fs::write(outside.join("f"), "SECRET\n").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    let ws = Workspace::new(&root).unwrap();

    // `d` is, in turn, missing, the real directory, missing, and the link out.
    let stop = Arc::new(AtomicBool::new(false));
    let (started, swapping) = std::sync::mpsc::channel();
    let swapper = {
        let (stop, root) = (stop.clone(), root.clone());
        std::thread::spawn(move || {
            let d = root.join("d");
            let _ = started.send(());
            while !stop.load(Ordering::Relaxed) {
                // A write that found `d` missing created it as a new folder; it would block the
                // swap for good.
                if d.symlink_metadata().is_ok_and(|m| m.is_dir()) {
                    let _ = std::fs::remove_dir_all(&d);
                }
                for source in ["real", "link"] {
                    let _ = std::fs::rename(root.join(source), &d);
                    let _ = std::fs::rename(&d, root.join(source));
                }
            }
        })
    };
    swapping.recv().unwrap();
    let check = |i: usize, ws: &Workspace| {
        let read = read_file(ws, &json!({"path": "d/f"}));
        assert!(!read.text.contains("SECRET"), "try {i} read outside");
        let _ = write_file(ws, &json!({"path": format!("d/w{i}"), "content": "x"}));
        assert!(
            !outside.join(format!("w{i}")).exists(),
            "try {i} wrote outside"
        );
        read
    };
    for i in 0..TRIES {
        check(i, &ws);
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();

    // Each state the swapper passes through, held still: a missing folder is an error, the
    // real one is read, the link out is refused. First put `real` and `link` back.
    let d = root.join("d");
    for source in ["real", "link"] {
        if root.join(source).symlink_metadata().is_err() {
            std::fs::rename(&d, root.join(source)).unwrap();
        }
    }
    // A write that found `d` missing made it a new folder (inside, as it should).
    let clear = |d: &Utf8PathBuf| {
        if d.symlink_metadata().is_ok() {
            std::fs::remove_dir_all(d).unwrap();
        }
    };
    clear(&d);
    let missing = check(TRIES, &ws);
    assert!(missing.is_error, "{}", missing.text);
    clear(&d);
    std::fs::rename(root.join("real"), &d).unwrap();
    let inside = check(TRIES + 1, &ws);
    assert!(
        inside.text.contains("inside") && !inside.is_error,
        "{}",
        inside.text
    );
    std::fs::rename(&d, root.join("real")).unwrap();
    std::fs::rename(root.join("link"), &d).unwrap();
    let refused = check(TRIES + 2, &ws);
    assert!(refused.is_error, "{}", refused.text);

    let listed: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(listed, ["f"], "something was written outside");
}
