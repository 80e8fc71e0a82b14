//! The state directory, checked before runner writes anything into it (docs/src/security.md: one
//! way in), and whose runs this user recorded.
//!
//! A checkout may ship a `.runner/` of its own: with links inside it (`run.json.tmp`, a
//! transcript, `.gitignore`, the folder itself) runner's writes would land wherever they point,
//! and a forged run could be picked up by `--resume latest`. So the state directory must be a
//! real directory this user owns with no link inside (runner's own worktrees aside, which are
//! git checkouts), or not exist yet; and each run is sealed with a key only this user's account
//! holds (`$XDG_STATE_HOME/runner/key`, else `~/.local/state/runner/key`), so `latest` takes
//! only runs recorded here by this user. A run named by id is taken as named.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};

use camino::{Utf8Path, Utf8PathBuf};
use sha2::{Digest, Sha256};

/// Entries of a state directory looked at for links, at most; a larger one is refused rather
/// than walked forever.
const MAX_ENTRIES: usize = 200_000;

/// Creates the state directory, or checks the one there: a real directory, this user's, with
/// no link anywhere inside but in runner's worktrees.
pub fn prepare(state_dir: &Utf8Path) -> Result<(), String> {
    match state_dir.symlink_metadata() {
        Err(_) => std::fs::create_dir_all(state_dir)
            .map_err(|err| format!("cannot create the state directory `{state_dir}`: {err}")),
        Ok(meta) if meta.file_type().is_symlink() => Err(format!(
            "the state directory `{state_dir}` is a link: runner writes its records through no link (a checkout may ship one to send them elsewhere); remove it, or pass --state-dir"
        )),
        Ok(meta) if !meta.is_dir() => Err(format!(
            "the state directory `{state_dir}` is not a directory"
        )),
        Ok(meta) if meta.uid() != nix::unistd::geteuid().as_raw() => Err(format!(
            "the state directory `{state_dir}` belongs to another user; pass --state-dir"
        )),
        Ok(_) => {
            let mut seen = 0;
            find_link(state_dir, state_dir, &mut seen)
        }
    }
}

fn find_link(root: &Utf8Path, dir: &Utf8Path, seen: &mut usize) -> Result<(), String> {
    let entries = dir
        .read_dir_utf8()
        .map_err(|err| format!("cannot read the state directory `{dir}`: {err}"))?;
    for entry in entries.flatten() {
        *seen += 1;
        if *seen > MAX_ENTRIES {
            return Err(format!(
                "the state directory `{root}` holds more than {MAX_ENTRIES} entries; clean it (`runner clean`, or remove old runs) or pass --state-dir"
            ));
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_symlink() {
            let inside = path.strip_prefix(root).unwrap_or(path);
            return Err(format!(
                "the state directory `{root}` holds a link, `{inside}`: runner writes nothing through links (a checkout may ship them to send its writes elsewhere); remove it, or pass --state-dir"
            ));
        }
        // runner's worktrees are checkouts, whose files may be links of the project's own.
        if kind.is_dir() && !(dir == root && entry.file_name() == "worktrees") {
            find_link(root, path, seen)?;
        }
    }
    Ok(())
}

/// Where this user's key lives (no step's bash may read it: `run/confinement.rs`).
pub(crate) fn key_path() -> Option<Utf8PathBuf> {
    let base = std::env::var("XDG_STATE_HOME")
        .ok()
        .filter(|d| d.starts_with('/'))
        .map(Utf8PathBuf::from)
        .or_else(|| {
            std::env::var("HOME")
                .ok()
                .filter(|h| h.starts_with('/'))
                .map(|home| Utf8PathBuf::from(home).join(".local/state"))
        })?;
    Some(base.join("runner").join("key"))
}

/// This user's key: read, or made the first time (readable by this user alone).
fn user_key() -> Option<Vec<u8>> {
    static KEY: std::sync::OnceLock<Option<Vec<u8>>> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let path = key_path()?;
        if let Ok(key) = std::fs::read(&path)
            && key.len() >= 32
        {
            return Some(key);
        }
        std::fs::create_dir_all(path.parent()?).ok()?;
        let key: [u8; 32] = rand::random();
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .ok()?;
        file.write_all(&key).ok()?;
        Some(key.to_vec())
    })
    .clone()
}

/// The seal of run `run_id` recorded by this user, `None` when this user has no key.
pub fn seal(run_id: &str) -> Option<String> {
    let key = user_key()?;
    let mut hasher = Sha256::new();
    hasher.update(&key);
    hasher.update(b"\0runner run\0");
    hasher.update(run_id.as_bytes());
    Some(
        hasher
            .finalize()
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect(),
    )
}

/// Whether this user recorded run `run_id` (its record carries `seal`).
pub fn sealed_here(run_id: &str, seal_of_record: Option<&str>) -> bool {
    seal_of_record.is_some_and(|s| Some(s) == seal(run_id).as_deref())
}
