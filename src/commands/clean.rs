//! `runner clean`: lists and removes the worktrees and `runner/*` branches that finished runs
//! left (docs/src/runs.md "Worktrees"). Nothing that holds work goes without `--force`: a worktree with
//! uncommitted changes, a branch with commits no remote and no checkout has. A run still going
//! (it holds its run lock) is left alone whatever the flags. Only worktrees runner registered
//! with git in its own folder are removed, never through a link; anything else in that folder
//! (a link a checkout shipped) is named and left.

use crate::cli::{CleanArgs, Io};
use crate::error::Exit;
use crate::run::worktree::{LeftoverKind, Repo};

pub fn clean(args: CleanArgs, io: &mut Io<'_>) -> Exit {
    let (workdir, state_dir) =
        crate::run::directories(args.workdir.as_deref(), args.state_dir.as_deref());
    let Some(repo) = Repo::discover(&workdir).map(|r| r.keeping_worktrees_in(&state_dir)) else {
        let _ = writeln!(
            io.err,
            "error: `{workdir}` is not inside a git repository with a commit: runner makes worktrees and branches only there"
        );
        return Exit::Invalid;
    };
    let (mut removed, mut kept, mut failed) = (0, 0, 0);
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    if let Err(why) = state_dir_is_real(&state_dir) {
        let _ = writeln!(io.err, "error: {why}");
        return Exit::Invalid;
    }
    // The branches of worktrees left in place: git cannot delete a branch a worktree has
    // checked out, and the work in that worktree goes on from it.
    let mut kept_trees: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let keep = |leftover: &crate::run::worktree::Leftover,
                kept_trees: &mut std::collections::BTreeSet<String>| {
        if let LeftoverKind::Worktree(tree) = &leftover.what {
            kept_trees.insert(format!("runner/{}/{}", tree.run, tree.step));
        }
    };
    // Whatever worktree has a branch checked out keeps it, runner's or not, unless this clean
    // removes that worktree first; a dry run counts what it would remove, so that it says
    // exactly what the real run does.
    let checked_out = repo.checked_out();
    let mut gone: std::collections::BTreeSet<camino::Utf8PathBuf> = Default::default();
    // Worktrees come first (`Repo::leftovers`), so their branches are known kept in time.
    for leftover in repo.leftovers() {
        let shown = crate::terminal::clean(&leftover.to_string()).into_owned();
        if let LeftoverKind::Branch(branch) = &leftover.what
            && (kept_trees.contains(branch)
                || checked_out
                    .get(branch)
                    .is_some_and(|tree| !gone.contains(tree)))
        {
            kept += 1;
            let _ = writeln!(io.out, "kept {shown}: its worktree is kept");
            continue;
        }
        let removing = match &leftover.what {
            LeftoverKind::Worktree(tree) => Some(tree.path()),
            _ => None,
        };
        if let LeftoverKind::NotRunners(_) = &leftover.what {
            kept += 1;
            let why = leftover.work.as_deref().unwrap_or("not runner's");
            let _ = writeln!(io.out, "left {shown}: {why}");
            continue;
        }
        let run_dir = state_dir.join("runs").join(&leftover.run_id);
        if crate::run::is_run_id(&leftover.run_id) && crate::run::lock::is_running(&run_dir) {
            kept += 1;
            keep(&leftover, &mut kept_trees);
            let _ = writeln!(
                io.out,
                "kept {shown}: run {} is still going",
                leftover.run_id
            );
            continue;
        }
        if let (Some(work), false) = (&leftover.work, args.force) {
            kept += 1;
            keep(&leftover, &mut kept_trees);
            let _ = writeln!(
                io.out,
                "kept {shown}: it holds {work} (`--force` removes it)"
            );
            continue;
        }
        if args.dry_run {
            removed += 1;
            gone.extend(removing);
            let _ = writeln!(io.out, "{verb} {shown}");
            continue;
        }
        match repo.remove_leftover(&leftover) {
            Ok(()) => {
                removed += 1;
                gone.extend(removing);
                let _ = writeln!(io.out, "{verb} {shown}");
            }
            Err(err) => {
                failed += 1;
                keep(&leftover, &mut kept_trees);
                let _ = writeln!(io.err, "error: cannot remove {shown}: {err}");
            }
        }
    }
    let _ = writeln!(
        io.err,
        "{verb} {removed}, kept {kept}{}",
        if failed > 0 {
            format!(", {failed} could not be removed")
        } else {
            String::new()
        }
    );
    if failed > 0 {
        Exit::Unexpected
    } else {
        Exit::Success
    }
}

/// The state directory, when there is one, is a real folder: through a link (a checkout may
/// ship `.runner -> ..`) "runner's worktrees" would be wherever it leads.
fn state_dir_is_real(state_dir: &camino::Utf8Path) -> Result<(), String> {
    match state_dir.symlink_metadata() {
        Ok(meta) if meta.file_type().is_symlink() => Err(format!(
            "the state directory `{state_dir}` is a link: runner removes nothing through a link (a checkout may ship one); remove it, or pass --state-dir"
        )),
        Ok(meta) if !meta.is_dir() => Err(format!(
            "the state directory `{state_dir}` is not a directory"
        )),
        _ => Ok(()),
    }
}
