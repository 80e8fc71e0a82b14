//! The daily budget (docs/src/budgets.md "Daily budget"): what the runs of a state directory
//! spent in the last 24 hours, a rolling window, as gh-aw's daily credits count a repository's.
//!
//! Every workflow's runs count, and only records with this user's seal (a checkout that ships a
//! `.runner/` can neither spend the budget nor hide spending). A step's cost is spent when it
//! ended (its start and duration; an older record's steps, when the run ended); a step reused by
//! `--resume` was paid for by the run it came from, and a replay paid for nothing. A run still going counts the steps it has
//! recorded. Records come through `run::records`, bounded: the newest
//! [`crate::limits::MAX_RUNS_READ`] runs by when their `run.json` was written.

use camino::Utf8Path;
use jiff::{SignedDuration, Timestamp};

use crate::record::{RunRecord, RunStatus, StepRecord};
use crate::units::usd;

/// The window: a rolling 24 hours.
pub const WINDOW: SignedDuration = SignedDuration::from_hours(24);

/// Runs named when a run is refused; the rest are counted as "and N more".
const NAMED: usize = 5;

/// What one run spent in the window.
#[derive(Debug, Clone, PartialEq)]
pub struct Spent {
    pub run_id: String,
    pub workflow: String,
    pub started_at: String,
    pub cost_usd: f64,
}

/// What the state directory's runs spent in the window ending `now`.
#[derive(Debug, Clone)]
pub struct Spend {
    /// The runs that spent something, costliest first (then the newest first).
    pub runs: Vec<Spent>,
    pub total_usd: f64,
    /// Each cost in the window and when it was spent, oldest first.
    spent: Vec<(Timestamp, f64)>,
    now: Timestamp,
}

impl Spend {
    /// The spend of `state_dir`'s runs recorded by this user, leaving out run `except` (the run
    /// about to start, whose own spend its meter counts).
    pub fn read(state_dir: &Utf8Path, except: Option<&str>, now: Timestamp) -> Self {
        let from = now - WINDOW;
        let listing = super::records::list(state_dir);
        let records = listing
            .runs
            .iter()
            .filter(|run| run.ours && Some(run.run_id.as_str()) != except)
            // A finished run that ended before the window spent nothing in it; a run still
            // going (or killed while it was) is read whole: its steps say when they ended.
            .filter(|run| {
                run.status == RunStatus::Running
                    || run
                        .started_at
                        .parse::<Timestamp>()
                        .is_ok_and(|at| end(at, run.duration_ms).is_none_or(|end| end > from))
            })
            .filter_map(|run| super::records::read(state_dir, &run.run_id).ok())
            .filter(|record| record.recorded_here);
        Self::of(records, now)
    }

    /// The spend of `records` in the window ending `now`.
    pub fn of(records: impl IntoIterator<Item = RunRecord>, now: Timestamp) -> Self {
        let from = now - WINDOW;
        let mut runs = Vec::new();
        let mut spent = Vec::new();
        // A replay paid for nothing: its costs are what the recording's replies were priced at.
        for record in records.into_iter().filter(|r| !r.replayed) {
            let run_end = record
                .started_at
                .parse::<Timestamp>()
                .ok()
                .and_then(|at| end(at, record.duration_ms));
            let mut cost = 0.0;
            for (at, usd) in costs(&record, run_end) {
                // A time ahead of this clock (another machine's, or a clock set back) is spent
                // now: it counts, and leaves the window no later than a day from now.
                let at = at.min(now);
                if at > from {
                    cost += usd;
                    spent.push((at, usd));
                }
            }
            if cost > 0.0 {
                runs.push(Spent {
                    run_id: record.run_id,
                    workflow: record.workflow,
                    started_at: record.started_at,
                    cost_usd: cost,
                });
            }
        }
        runs.sort_by(|a, b| {
            b.cost_usd
                .total_cmp(&a.cost_usd)
                .then_with(|| b.started_at.cmp(&a.started_at))
        });
        spent.sort_by_key(|(at, _)| *at);
        Spend {
            total_usd: spent.iter().map(|(_, usd)| usd).sum(),
            runs,
            spent,
            now,
        }
    }

    /// When the oldest spend in the window leaves it.
    pub fn oldest_leaves(&self) -> Option<Timestamp> {
        self.spent.first().map(|(at, _)| *at + WINDOW)
    }

    /// When the spend falls below `limit` again, if nothing more is spent: when the spend that
    /// takes it there leaves the window.
    pub fn under_at(&self, limit: f64) -> Option<Timestamp> {
        let mut left = self.total_usd;
        for (at, usd) in &self.spent {
            if left < limit {
                break;
            }
            left -= usd;
            if left < limit {
                return Some(*at + WINDOW);
            }
        }
        None
    }

    /// Why a run may not start, for `error:`: the spend, the runs that spent it, when it can run
    /// again and how to raise the budget. `set_by` says where the budget was set.
    pub fn refusal(&self, limit: f64, set_by: &str, file: &Utf8Path) -> String {
        let mut out = format!(
            "error: the daily budget is spent: {} in the last 24 hours, of `{set_by}`, by {}:\n",
            usd(self.total_usd),
            crate::units::count(self.runs.len() as u64, "run", "runs"),
        );
        for run in self.runs.iter().take(NAMED) {
            out.push_str(&format!(
                "  {}  {}  started {}  {}\n",
                run.run_id,
                crate::terminal::clean(&run.workflow),
                crate::terminal::clean(&crate::units::when(&run.started_at)),
                usd(run.cost_usd),
            ));
        }
        if self.runs.len() > NAMED {
            out.push_str(&format!("  and {} more\n", self.runs.len() - NAMED));
        }
        if let Some(leaves) = self.oldest_leaves() {
            out.push_str(&format!(
                "the oldest of it leaves the window at {}",
                self.at(leaves)
            ));
            match self.under_at(limit) {
                Some(under) if under != leaves => out.push_str(&format!(
                    "; runs start again at {}, when the spend falls under {}",
                    self.at(under),
                    usd(limit)
                )),
                _ => out.push_str(&format!(
                    ", and runs start again then: the spend falls under {}",
                    usd(limit)
                )),
            }
            out.push('\n');
        }
        out.push_str(&format!(
            "help: to run now, raise it for this run with `--daily-budget USD`, or raise `daily_usd` in `[budget]` of {}; `runner runs` shows the runs of the last 24 hours\n",
            crate::terminal::clean(file.as_str())
        ));
        out
    }

    /// `2026-12-08 15:20:00Z (in 2h 10m)`.
    fn at(&self, at: Timestamp) -> String {
        let wait = (at - self.now).as_millis().max(0) as u64;
        format!(
            "{} (in {})",
            at.strftime("%Y-%m-%d %H:%M:%SZ"),
            crate::units::seconds(wait)
        )
    }

    /// What `runner runs` says of the window: the spend, and with a budget what is left of it.
    pub fn line(&self, limit: Option<f64>) -> String {
        let mut line = if self.runs.is_empty() {
            "last 24 hours: nothing spent".to_owned()
        } else {
            format!(
                "last 24 hours: {} by {}",
                usd(self.total_usd),
                crate::units::count(self.runs.len() as u64, "run", "runs"),
            )
        };
        if let Some(limit) = limit {
            if self.total_usd >= limit {
                line.push_str(&format!(
                    ", past the daily budget of {}: runs are refused",
                    usd(limit)
                ));
                if let Some(under) = self.under_at(limit) {
                    line.push_str(&format!(" until {}", self.at(under)));
                }
            } else {
                line.push_str(&format!(
                    ", {} left of the daily budget of {}",
                    usd(limit - self.total_usd),
                    usd(limit)
                ));
            }
        }
        line
    }
}

/// `at` plus `ms`, when that is a time.
fn end(at: Timestamp, ms: u64) -> Option<Timestamp> {
    let ms = i64::try_from(ms).ok()?;
    at.checked_add(SignedDuration::from_millis(ms)).ok()
}

/// Each cost `record` holds and when it was spent: a step's (or each fan-out instance's) at its
/// end, else at the run's end; what was reused from another run is that run's.
fn costs(record: &RunRecord, run_end: Option<Timestamp>) -> Vec<(Timestamp, f64)> {
    let ended = |step: &StepRecord| {
        step.started_at
            .as_deref()
            .and_then(|at| at.parse::<Timestamp>().ok())
            .and_then(|at| end(at, step.duration_ms))
            .or(run_end)
    };
    let paid = |step: &&StepRecord| step.reused_from.is_none();
    let mut out = Vec::new();
    for step in record.steps.values().filter(paid) {
        let units: Vec<&StepRecord> = if step.instances.is_empty() {
            vec![step]
        } else {
            step.instances.iter().filter(paid).collect()
        };
        for unit in units {
            if let (Some(usd), Some(at)) = (unit.cost_usd, ended(unit))
                && usd.is_finite()
                && usd > 0.0
            {
                out.push((at, usd));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, started: Timestamp, costs: &[(i64, f64)]) -> RunRecord {
        let steps: serde_json::Map<String, serde_json::Value> = costs
            .iter()
            .enumerate()
            .map(|(i, (minutes, usd))| {
                let mut step = serde_json::to_value(StepRecord::pending("m")).unwrap();
                step["status"] = "succeeded".into();
                step["cost_usd"] = (*usd).into();
                step["started_at"] = (started + SignedDuration::from_mins(*minutes))
                    .to_string()
                    .into();
                (format!("s{i}"), step)
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "run_id": id, "workflow": "w", "status": "succeeded",
            "started_at": started.to_string(), "duration_ms": 0, "steps": steps,
        }))
        .unwrap()
    }

    #[test]
    fn only_the_last_24_hours_count_and_the_window_rolls_by_step() {
        let now: Timestamp = "2026-12-07T12:00:00Z".parse().unwrap();
        let hours = |h: i64| now - SignedDuration::from_hours(h);
        let spend = Spend::of(
            [
                record("old", hours(25), &[(0, 5.0)]),
                // Started 24 h 30 min ago: its first step ended before the window, its second in it.
                record(
                    "edge",
                    hours(24) - SignedDuration::from_mins(30),
                    &[(0, 1.0), (60, 0.25)],
                ),
                record("new", hours(2), &[(0, 0.5), (10, 0.5)]),
            ],
            now,
        );
        assert!((spend.total_usd - 1.25).abs() < 1e-9, "{}", spend.total_usd);
        let ids: Vec<&str> = spend.runs.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(ids, ["new", "edge"]);
        // The edge run's second step ended 23 h 30 min ago: it leaves in 30 minutes.
        assert_eq!(
            spend.oldest_leaves(),
            Some(now + SignedDuration::from_mins(30))
        );
        // Under $1.10 once that $0.25 leaves; under $1 (strictly) only when the first $0.50
        // does too, and under $0.50 when everything has.
        assert_eq!(spend.under_at(1.1), spend.oldest_leaves());
        assert_eq!(spend.under_at(1.0), Some(hours(2) + WINDOW));
        assert_eq!(
            spend.under_at(0.5),
            Some(hours(2) + SignedDuration::from_mins(10) + WINDOW)
        );
    }

    #[test]
    fn a_refusal_names_the_five_costliest_runs_and_counts_the_rest() {
        let now: Timestamp = "2026-12-07T12:00:00Z".parse().unwrap();
        let records = (1..=7).map(|i| {
            record(
                &format!("r{i}"),
                now - SignedDuration::from_hours(i),
                &[(0, i as f64)],
            )
        });
        let text =
            Spend::of(records, now).refusal(20.0, "[budget] daily_usd = 20", "w.toml".into());
        assert!(text.starts_with("error: the daily budget is spent: $28.00 in the last 24 hours, of `[budget] daily_usd = 20`, by 7 runs:\n  r7  w  started 2026-12-07 05:00:00Z  $7.00\n  r6  "), "{text}");
        assert!(
            text.contains("  r3  w  started 2026-12-07 09:00:00Z  $3.00\n  and 2 more\n"),
            "{text}"
        );
        assert!(!text.contains("  r2  "), "{text}");
        // $28 falls under $20 once r7 ($7) and r6 ($6) have left: when r6's spend does.
        assert!(text.contains("the oldest of it leaves the window at 2026-12-08 05:00:00Z (in 17h 00m); runs start again at 2026-12-08 06:00:00Z (in 18h 00m), when the spend falls under $20.00\n"), "{text}");
    }

    #[test]
    fn reused_steps_were_paid_for_by_their_own_run() {
        let now: Timestamp = "2026-12-07T12:00:00Z".parse().unwrap();
        let mut resumed = record(
            "r",
            now - SignedDuration::from_hours(1),
            &[(0, 2.0), (5, 1.0)],
        );
        resumed.steps.get_mut("s0").unwrap().reused_from = Some("earlier".into());
        let spend = Spend::of([resumed], now);
        assert!((spend.total_usd - 1.0).abs() < 1e-9);
    }
}
