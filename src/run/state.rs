//! The state directory, checked before runner writes anything into it (docs/src/security.md: one
//! way in).
//!
//! A checkout may ship a `.runner/` of its own: with links inside it (`run.json.tmp`, a
//! transcript, `.gitignore`, the folder itself) runner's writes would land wherever they point.
//! So the state directory must be a real directory this user owns with no link inside
//! (runner's own worktrees aside, which are git checkouts), or not exist yet. Which of its runs
//! this user recorded is the seal's to say (`seal.rs`).

use std::os::unix::fs::MetadataExt as _;

use camino::Utf8Path;

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
