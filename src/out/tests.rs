//! The confined writer against links a checkout plants.

use std::os::unix::fs::symlink;

use camino::{Utf8Path, Utf8PathBuf};

use super::*;

/// A working directory with a file and a folder outside it, as a checkout would link to.
fn place() -> (tempfile::TempDir, Utf8PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
    std::fs::create_dir_all(root.join("work")).unwrap();
    std::fs::create_dir_all(root.join("outside")).unwrap();
    std::fs::write(root.join("outside/target.txt"), "keep\n").unwrap();
    (dir, root)
}

#[test]
fn a_link_in_a_files_place_is_replaced_and_a_folder_link_refused() {
    let (_dir, root) = place();
    let work = root.join("work");
    let outside = root.join("outside");
    symlink(outside.join("target.txt"), work.join("junit.xml")).unwrap();
    symlink(&outside, work.join("reports")).unwrap();
    let dir = OutDir {
        dir: cap_std::fs::Dir::open_ambient_dir(&work, cap_std::ambient_authority()).unwrap(),
        path: work.clone(),
    };
    dir.write("junit.xml", b"<testsuites/>").unwrap();
    assert_eq!(
        std::fs::read_to_string(outside.join("target.txt")).unwrap(),
        "keep\n"
    );
    let meta = work.join("junit.xml").symlink_metadata().unwrap();
    assert!(meta.is_file(), "the link was replaced by the file");
    assert_eq!(
        std::fs::read_to_string(work.join("junit.xml")).unwrap(),
        "<testsuites/>"
    );

    // Bytes redacted already are written as they are, in the same way.
    symlink(outside.join("target.txt"), work.join("run.json")).unwrap();
    dir.write_redacted("run.json", &Redacted::new("{}"))
        .unwrap();
    assert!(work.join("run.json").symlink_metadata().unwrap().is_file());
    assert_eq!(
        std::fs::read_to_string(work.join("run.json")).unwrap(),
        "{}"
    );

    let refused = dir.sub("reports/deeper").unwrap_err();
    assert!(
        matches!(&refused, OutError::Link { link, .. } if link.ends_with("reports")),
        "{refused}"
    );
    assert!(refused.to_string().contains("symbolic link"), "{refused}");
    assert!(!outside.join("deeper").exists());
    let refused = dir.append("junit-link").map(|_| ());
    assert!(refused.is_ok(), "a new file to append to is made");
    symlink(outside.join("target.txt"), work.join("log")).unwrap();
    assert!(matches!(dir.append("log"), Err(OutError::Link { .. })));
    assert_eq!(
        std::fs::read_to_string(outside.join("target.txt")).unwrap(),
        "keep\n"
    );
    // Nothing of the temporary files is left.
    let names: Vec<String> = std::fs::read_dir(&work)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

/// What a file holds passes the redactor on its way.
#[test]
fn what_is_written_is_redacted() {
    let (_dir, root) = place();
    let secret = "confined-writer-secret-91";
    crate::secrets::register(secret);
    let dir = OutDir {
        dir: cap_std::fs::Dir::open_ambient_dir(&root, cap_std::ambient_authority()).unwrap(),
        path: root.clone(),
    };
    let mut file = dir.create("a.json").unwrap();
    std::io::Write::write_all(&mut file, format!("{{\"k\": \"{secret}\"}}").as_bytes()).unwrap();
    file.commit().unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("a.json")).unwrap(),
        "{\"k\": \"[hidden]\"}"
    );
    let dropped = dir.create("b.json").unwrap();
    drop(dropped);
    assert!(!root.join("b.json").exists());
    assert_eq!(
        std::fs::read_dir(&root).unwrap().count(),
        3,
        "work, outside, a.json"
    );
}

#[test]
fn paths_are_normalized_by_their_text() {
    assert_eq!(
        confined_normalize("/a/b/../c/./d"),
        Utf8PathBuf::from("/a/c/d")
    );
    assert_eq!(confined_normalize("/a/../../b"), Utf8PathBuf::from("/b"));
}

fn confined_normalize(path: &str) -> Utf8PathBuf {
    super::confined::normalize_for_tests(Utf8Path::new(path))
}
