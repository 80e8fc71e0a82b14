//! `runner runs`: the runs a state directory holds, newest first (docs/src/reference/commands.md):
//! id, workflow, status, when it started, how long it took, what it cost. Only runs runner could
//! have written are listed, as `--resume` trusts them; one this user did not record (a checkout
//! may ship a `.runner/`) is marked.

use crate::cli::{Format, Io, RunsArgs};
use crate::error::Exit;

pub fn runs(args: RunsArgs, io: &mut Io<'_>) -> Exit {
    let (_, state_dir) =
        crate::run::directories(args.dirs.workdir.as_deref(), args.dirs.state_dir.as_deref());
    let listing = crate::run::records::list(&state_dir);
    let runs = &listing.runs;
    for why in &listing.refused {
        let _ = writeln!(
            io.err,
            "warning: not listed: {}",
            crate::terminal::clean(why)
        );
    }
    let status = |run: &crate::run::records::Summary| {
        crate::run::lock::shown_status(&state_dir.join("runs").join(&run.run_id), run.status)
    };
    if args.format == Format::Json {
        let list: Vec<serde_json::Value> = runs
            .iter()
            .map(|run| {
                serde_json::json!({
                    "run_id": run.run_id,
                    "workflow": run.workflow,
                    "status": status(run).as_str(),
                    "started_at": run.started_at,
                    "duration_ms": run.duration_ms,
                    "cost_usd": run.cost_usd,
                    "steps": run.steps,
                    "recorded_here": run.ours,
                    "run_dir": state_dir.join("runs").join(&run.run_id),
                })
            })
            .collect();
        let _ = writeln!(
            io.out,
            "{}",
            crate::terminal::to_json_pretty(&list).unwrap_or_default()
        );
        return Exit::Success;
    }
    if runs.is_empty() {
        let _ = writeln!(
            io.out,
            "no runs in `{}`\n{}",
            crate::run::shown_path(&state_dir.join("runs")),
            crate::run::ELSEWHERE_HINT
        );
        return Exit::Success;
    }
    let header = ["RUN", "WORKFLOW", "STATUS", "STARTED", "DURATION", "COST"];
    let mut rows: Vec<Vec<String>> = vec![header.map(str::to_owned).to_vec()];
    rows.extend(runs.iter().map(|run| {
        vec![
            format!(
                "{}{}",
                run.run_id,
                if run.ours { "" } else { " (not yours)" }
            ),
            crate::terminal::clean(&run.workflow).into_owned(),
            status(run).as_str().to_owned(),
            crate::terminal::clean(&crate::units::when(&run.started_at)).into_owned(),
            crate::units::seconds(run.duration_ms),
            run.cost_usd
                .map_or_else(|| "-".to_owned(), crate::units::usd),
        ]
    }));
    let _ = write!(io.out, "{}", crate::report::table(&rows));
    let _ = writeln!(
        io.out,
        "{} run{} in `{}` (`runner show RUN` for one, `runner diff A B` to compare two)",
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        state_dir.join("runs")
    );
    // The daily budget counts every workflow's runs (docs/src/budgets.md "Daily budget").
    let spend = crate::run::daily::Spend::read(&state_dir, None, jiff::Timestamp::now());
    let _ = writeln!(io.out, "{}", spend.line(args.daily_budget));
    if listing.not_read > 0 {
        let _ = writeln!(
            io.out,
            "{} older run{} not read: runner reads the newest {} (by when their run.json was written)",
            listing.not_read,
            if listing.not_read == 1 { "" } else { "s" },
            crate::limits::MAX_RUNS_READ
        );
    }
    Exit::Success
}
