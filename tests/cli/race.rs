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

/// Tries at least this many times, and on until the swap has shown both states.
const TRIES: usize = 400;
/// Gives up past this: a machine too busy to run the swapper at all.
const MAX_TRIES: usize = 200_000;

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
    let (mut read_inside, mut refused) = (false, false);
    for i in 0..MAX_TRIES {
        let read = read_file(&ws, &json!({"path": "d/f"}));
        assert!(!read.text.contains("SECRET"), "try {i} read outside");
        read_inside |= read.text.contains("inside");
        refused |= read.is_error;
        let _ = write_file(&ws, &json!({"path": format!("d/w{i}"), "content": "x"}));
        assert!(
            !outside.join(format!("w{i}")).exists(),
            "try {i} wrote outside"
        );
        if i >= TRIES && read_inside && refused {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let listed: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(listed, ["f"], "something was written outside");
    // The race really happened: some tries found the directory in place, some did not.
    assert!(read_inside && refused, "the swap never showed both states");
}
