//! Other mounts of the working directory's file system that show a protected path elsewhere: a
//! container's or devcontainer's bind of the checkout, `mount --bind` by hand. A read-only bind
//! covers one path, and Landlock grants by inode, so through such an alias `.git` would be as
//! writable as the working directory. Each alias of a protected path is bound read-only too.
//! (Renaming a folder on the way is refused through an alias as well: the kernel checks mount
//! points per dentry, and the dentries are the same.)

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use procfs_core::FromBufRead;
use procfs_core::process::{MountInfo, MountInfos};

/// Where else each of `protected` (canonical, inside `workdir`) can be reached: the path of each
/// alias checked to be the same file (device and inode) as what it stands for.
pub fn find(workdir: &Path, protected: &[&Path]) -> Result<Vec<(PathBuf, PathBuf)>, String> {
    let file = std::fs::File::open("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let mounts = MountInfos::from_buf_read(std::io::BufReader::new(file))
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    Ok(aliases(&mounts.0, workdir, protected))
}

fn aliases(mounts: &[MountInfo], workdir: &Path, protected: &[&Path]) -> Vec<(PathBuf, PathBuf)> {
    // The mount the working directory is on: the last (topmost) one whose mount point is its
    // longest prefix.
    let Some(home) = mounts
        .iter()
        .filter(|m| workdir.starts_with(unescape(&m.mount_point)))
        .max_by_key(|m| unescape(&m.mount_point).components().count())
    else {
        return Vec::new();
    };
    let home_point = unescape(&home.mount_point);
    let Ok(rel) = workdir.strip_prefix(&home_point) else {
        return Vec::new();
    };
    // The working directory's path inside its file system.
    let in_fs = Path::new(&unescape_str(&home.root)).join(rel);
    let mut found = Vec::new();
    for mount in mounts.iter().filter(|m| m.majmin == home.majmin) {
        let root = PathBuf::from(unescape_str(&mount.root));
        let point = unescape(&mount.mount_point);
        for path in protected {
            let Ok(inside) = path.strip_prefix(workdir) else {
                continue;
            };
            let target = in_fs.join(inside);
            let alias = match target.strip_prefix(&root) {
                Ok(rest) => point.join(rest),
                // A mount of something inside the protected path: all of it is protected.
                Err(_) if root.starts_with(&target) => point.clone(),
                Err(_) => continue,
            };
            if alias != *path && same_file(&alias, path, root.starts_with(&target)) {
                found.push((alias, path.to_path_buf()));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Whether `alias` is the file `path` is (or, for a mount inside it, on the same device).
fn same_file(alias: &Path, path: &Path, inside: bool) -> bool {
    match (alias.symlink_metadata(), path.symlink_metadata()) {
        (Ok(a), Ok(p)) if inside => a.dev() == p.dev(),
        (Ok(a), Ok(p)) => a.dev() == p.dev() && a.ino() == p.ino(),
        _ => false,
    }
}

fn unescape(path: &Path) -> PathBuf {
    PathBuf::from(unescape_str(&path.to_string_lossy()))
}

/// The kernel writes a space, tab, newline and backslash in mountinfo paths as `\ooo` octal
/// escapes, which the parser leaves as they are.
fn unescape_str(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: i32, majmin: &str, root: &str, point: &str) -> MountInfo {
        MountInfo::from_line(&format!(
            "{id} 1 {majmin} {root} {point} rw,relatime - ext4 /dev/vda rw"
        ))
        .unwrap()
    }

    #[test]
    fn octal_escapes_are_read() {
        assert_eq!(unescape_str(r"/a\040b\134c\011"), "/a b\\c\t");
        assert_eq!(unescape_str(r"/plain\9"), r"/plain\9");
    }

    /// A bind of the checkout elsewhere shows `.git` there too; a mount of another file system
    /// does not, nor does a path that is not the same file.
    #[test]
    fn a_second_mount_of_the_checkout_is_an_alias() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let work = base.join("work");
        std::fs::create_dir_all(work.join(".git")).unwrap();
        // What `mount --bind work alias` looks like, without mounting: `alias` is the same file
        // only if it is a link to it, so same_file is exercised by the real mount in
        // tests/cli/protected.rs; here the arithmetic.
        let majmin = "254:0";
        let mounts = vec![
            line(1, majmin, "/", "/"),
            line(
                2,
                majmin,
                &work.display().to_string(),
                &base.join("alias").display().to_string(),
            ),
            line(3, "0:99", "/", &base.join("other").display().to_string()),
        ];
        std::os::unix::fs::symlink(&work, base.join("alias")).unwrap();
        let git = work.join(".git");
        let found = aliases(&mounts, &work, &[git.as_path()]);
        // The link resolves to the same `.git`, as a bind would.
        assert_eq!(found, [(base.join("alias/.git"), git.clone())]);
    }
}
