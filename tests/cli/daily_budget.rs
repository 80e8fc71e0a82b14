//! The daily budget (docs/src/budgets.md "Daily budget"): `[budget] daily_usd` and
//! `--daily-budget` count what every run of the state directory spent in the last 24 hours. The
//! runs are real (against the fake server); their times and costs are then set as if recorded
//! earlier, and sealed again with this user's key, as runner would have written them.

use std::path::Path;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use crate::fake::{Fake, anthropic_text};
use crate::support::{Output, Test};

/// A workflow of two independent steps, one at a time; `budget` is its `[budget]` table's body.
fn workflow(name: &str, budget: &str) -> String {
    format!(
        "name = \"{name}\"\nmax_parallel = 1\n[budget]\n{budget}\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.a]\nagent = \"explore\"\nprompt = \"first\"\n[steps.b]\nagent = \"explore\"\nprompt = \"second\"\n"
    )
}

/// A server answering every request at once (each reply: 10 in, 30 out, 150 cache reads).
async fn answering() -> Fake {
    Fake::anthropic_fn(|_| anthropic_text("done")).await
}

fn project(fake: &Fake) -> Test {
    Test::new()
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.uri())
}

async fn run(test: Test, args: &[&str]) -> (Output, Test) {
    test.clear_args().args(args).run_async().await
}

/// The ids of the recorded runs, oldest first (ids sort by start time).
fn run_ids(dir: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(dir.join(".runner/runs"))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

/// Rewrites run `id` as started `hours` ago, its step `a` costing `usd` and `b` nothing; sealed
/// with this user's key when `sealed`, else left without a seal (as a checkout could ship it).
fn set_spend(dir: &Path, id: &str, started: Timestamp, usd: f64, sealed: bool) {
    let path = dir.join(".runner/runs").join(id).join("run.json");
    let mut record: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    record.as_object_mut().unwrap().remove("recorded_by");
    record["started_at"] = started.to_string().into();
    record["duration_ms"] = 2000.into();
    record["cost_usd"] = usd.into();
    for (step, cost, offset) in [("a", usd, 0), ("b", 0.0, 1000)] {
        record["steps"][step]["started_at"] = (started + SignedDuration::from_millis(offset))
            .to_string()
            .into();
        record["steps"][step]["duration_ms"] = 1000.into();
        record["steps"][step]["cost_usd"] = cost.into();
    }
    let text = serde_json::to_string_pretty(&record).unwrap();
    let text = if sealed {
        let (text, unsealed) = runner::run::seal::seal(text);
        assert_eq!(unsealed, None, "this user can seal records");
        text
    } else {
        text
    };
    std::fs::write(&path, text).unwrap();
}

fn hours_ago(now: Timestamp, hours: i64) -> Timestamp {
    now - SignedDuration::from_hours(hours)
}

/// `2026-12-08 15:20:00Z`, as runner prints times.
fn shown(at: Timestamp) -> String {
    at.strftime("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// Runs of two workflows: 23 h ago ($0.70, counts), 25 h ago ($5, outside the window) and an
/// hour ago in another workflow ($0.40, counts): $1.10 against a budget of $1 refuses the next
/// run before any request, naming the two runs, when the oldest spend leaves the window and
/// how to raise it. The flag wins over the key.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_past_the_daily_budget_is_refused_naming_the_runs_that_spent_it() {
    let fake = answering().await;
    let test = project(&fake)
        .file("w.toml", &workflow("daily", "daily_usd = 1"))
        .file("other.toml", &workflow("other", "max_tokens = 100000"));
    let mut test = test;
    for file in ["w.toml", "w.toml", "other.toml"] {
        let (out, next) = run(test, &["run", file, "--daily-budget", "100"]).await;
        assert_eq!(out.status, 0, "{}", out.transcript());
        test = next;
    }
    let ids = run_ids(test.path());
    let now = Timestamp::now();
    let (recent, old, other) = (&ids[0], &ids[1], &ids[2]);
    set_spend(test.path(), recent, hours_ago(now, 23), 0.70, true);
    set_spend(test.path(), old, hours_ago(now, 25), 5.0, true);
    set_spend(test.path(), other, hours_ago(now, 1), 0.40, true);
    let asked = fake.requests().await.len();

    let (refused, test) = run(test, &["run", "w.toml"]).await;
    assert_eq!(refused.status, 2, "{}", refused.transcript());
    let err = &refused.stderr;
    assert!(
        err.contains(
            "error: the daily budget is spent: $1.10 in the last 24 hours, of `[budget] daily_usd = 1`, by 2 runs:"
        ),
        "{err}"
    );
    // Costliest first, each with its workflow, start and cost; the run of 25 h ago is not there.
    let recent_at = shown(hours_ago(now, 23));
    let first = err.find(&format!("  {recent}  daily  started {recent_at}  $0.70"));
    let second = err.find(&format!("  {other}  other  started "));
    assert!(first.is_some() && second.is_some(), "{err}");
    assert!(first < second, "{err}");
    assert!(err.contains("$0.40\n"), "{err}");
    assert!(!err.contains(old.as_str()), "{err}");
    // Step `a` of the 23-hour-old run ended a second after it started: that leaves first.
    let leaves = hours_ago(now, 23) + SignedDuration::from_hours(24) + SignedDuration::from_secs(1);
    assert!(
        err.contains(&format!(
            "the oldest of it leaves the window at {} (in ",
            shown(leaves)
        )),
        "{err}"
    );
    assert!(
        err.contains(", and runs start again then: the spend falls under $1.00\n"),
        "{err}"
    );
    assert!(err.contains("`--daily-budget USD`"), "{err}");
    assert!(
        err.contains("raise `daily_usd` in `[budget]` of w.toml"),
        "{err}"
    );
    // Refused before anything: no request, no record.
    assert_eq!(fake.requests().await.len(), asked);
    assert_eq!(run_ids(test.path()).len(), 3);

    // `runner runs` says the same spend, and what is left of a budget.
    let (runs, test) = run(test, &["runs", "--daily-budget", "1"]).await;
    assert_eq!(runs.status, 0, "{}", runs.transcript());
    assert!(
        runs.stdout.contains(
            "last 24 hours: $1.10 by 2 runs, past the daily budget of $1.00: runs are refused until "
        ),
        "{}",
        runs.stdout
    );
    let (runs, test) = run(test, &["runs", "--daily-budget", "1.5"]).await;
    assert!(
        runs.stdout
            .contains("last 24 hours: $1.10 by 2 runs, $0.40 left of the daily budget of $1.50"),
        "{}",
        runs.stdout
    );

    // The flag wins over the key, both ways.
    let (raised, test) = run(test, &["run", "w.toml", "--daily-budget", "2"]).await;
    assert_eq!(raised.status, 0, "{}", raised.transcript());
    let (lowered, _test) = run(test, &["run", "other.toml", "--daily-budget", "0.5"]).await;
    assert_eq!(lowered.status, 2, "{}", lowered.transcript());
    assert!(
        lowered.stderr.contains("of `--daily-budget 0.5`"),
        "{}",
        lowered.stderr
    );
}

/// A record without this user's seal (a checkout may ship `.runner/`, or a record was changed
/// since) is not counted: it can neither spend the budget nor hide spending.
#[tokio::test(flavor = "multi_thread")]
async fn a_record_without_this_users_seal_is_not_counted() {
    let fake = answering().await;
    let test = project(&fake).file("w.toml", &workflow("daily", "daily_usd = 1"));
    let (out, test) = run(test, &["run", "w.toml"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let id = run_ids(test.path()).remove(0);
    set_spend(test.path(), &id, hours_ago(Timestamp::now(), 1), 5.0, false);
    let (again, test) = run(test, &["run", "w.toml"]).await;
    assert_eq!(again.status, 0, "{}", again.transcript());
    let (runs, test) = run(test, &["runs"]).await;
    assert!(
        runs.stdout.contains(&format!("{id} (not yours)")),
        "{}",
        runs.stdout
    );
    assert!(
        runs.stdout.contains("last 24 hours: nothing spent\n"),
        "{}",
        runs.stdout
    );
    // Sealed, the same record is counted.
    set_spend(test.path(), &id, hours_ago(Timestamp::now(), 1), 5.0, true);
    let (refused, _test) = run(test, &["run", "w.toml"]).await;
    assert_eq!(refused.status, 2, "{}", refused.transcript());
    assert!(
        refused.stderr.contains("$5.00 in the last 24 hours"),
        "{}",
        refused.stderr
    );
}

/// Priced so that one reply costs $1.90 (190 tokens at $10,000 a million): under a budget of
/// $1 the first step crosses it, so no other starts, each saying why; the run fails. The
/// next run is refused at once, by the spend of this one.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_crosses_the_daily_budget_starts_no_more_steps() {
    let fake = answering().await;
    let priced = format!(
        "{}[steps.c]\nagent = \"explore\"\nprompt = \"third\"\nneeds = [\"a\"]\n[steps.d]\nagent = \"explore\"\nprompt = \"fourth\"\nneeds = [\"b\"]\n[prices.\"anthropic/claude-test\"]\ninput = 10000\noutput = 10000\n",
        workflow("daily", "daily_usd = 1")
    );
    let test = project(&fake).file("w.toml", &priced);
    let (out, test) = run(test, &["run", "w.toml", "--format", "json"]).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let record: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(record["status"], "failed");
    assert_eq!(record["steps"]["a"]["status"], "succeeded");
    assert!((record["steps"]["a"]["cost_usd"].as_f64().unwrap() - 1.9).abs() < 1e-6);
    let b = &record["steps"]["b"];
    assert_eq!(b["status"], "cancelled", "{b}");
    assert_eq!(
        b["error"],
        "not started: the daily budget is spent ($1.90 in the last 24 hours, $1.90 of it by this run, of `[budget] daily_usd = 1`)"
    );
    // `c`, whose need succeeded, does not start either; `d`, which needs `b`, is skipped, as
    // after any step that did not run.
    assert_eq!(record["steps"]["c"]["status"], "cancelled");
    assert_eq!(record["steps"]["c"]["error"], b["error"]);
    assert_eq!(record["steps"]["d"]["status"], "skipped");
    assert_eq!(fake.requests().await.len(), 1, "only step a sent a request");
    // The table under the run says why too.
    assert!(
        out.stderr
            .contains("not started: the daily budget is spent"),
        "{}",
        out.stderr
    );

    let (refused, _test) = run(test, &["run", "w.toml"]).await;
    assert_eq!(refused.status, 2, "{}", refused.transcript());
    assert!(
        refused.stderr.contains("$1.90 in the last 24 hours"),
        "{}",
        refused.stderr
    );
    assert_eq!(fake.requests().await.len(), 1);
}

/// A replay sends nothing and costs nothing: a daily budget that is spent does not refuse it,
/// and what its replies would have cost is not counted as spent.
#[tokio::test(flavor = "multi_thread")]
async fn a_replay_is_not_refused_nor_counted() {
    let fake = answering().await;
    let priced = format!(
        "{}[prices.\"anthropic/claude-test\"]\ninput = 10000\noutput = 10000\n",
        workflow("daily", "daily_usd = 1")
    );
    let test = project(&fake).file("w.toml", &priced);
    let (recorded, test) = run(
        test,
        &[
            "run",
            "w.toml",
            "--record",
            "tapes",
            "--daily-budget",
            "100",
        ],
    )
    .await;
    assert_eq!(recorded.status, 0, "{}", recorded.transcript());
    let id = run_ids(test.path()).remove(0);
    set_spend(test.path(), &id, hours_ago(Timestamp::now(), 1), 3.0, true);
    let (refused, test) = run(test, &["run", "w.toml"]).await;
    assert_eq!(refused.status, 2, "{}", refused.transcript());
    let asked = fake.requests().await.len();
    let (replayed, test) = run(test, &["run", "w.toml", "--replay", "tapes"]).await;
    assert_eq!(replayed.status, 0, "{}", replayed.transcript());
    assert_eq!(fake.requests().await.len(), asked);
    let (runs, _test) = run(test, &["runs"]).await;
    assert!(
        runs.stdout.contains("last 24 hours: $3.00 by 1 run\n"),
        "{}",
        runs.stdout
    );
}

/// A fan-out's instances are checked as steps are: the first crosses the budget, the others
/// do not start, and the step says so.
#[tokio::test(flavor = "multi_thread")]
async fn fan_out_instances_stop_starting_at_the_daily_budget() {
    let fake = answering().await;
    let priced = "name = \"daily\"\nmax_parallel = 1\n[budget]\ndaily_usd = 1\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.each]\nagent = \"explore\"\nfor_each = [\"p\", \"q\", \"r\"]\nprompt = \"item {{ item }}\"\n[prices.\"anthropic/claude-test\"]\ninput = 10000\noutput = 10000\n";
    let test = project(&fake).file("w.toml", priced);
    let (out, _test) = run(test, &["run", "w.toml", "--format", "json"]).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let record: Value = serde_json::from_str(&out.stdout).unwrap();
    let each = &record["steps"]["each"];
    assert_eq!(each["status"], "cancelled", "{each}");
    let statuses: Vec<&str> = each["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["succeeded", "cancelled", "cancelled"]);
    assert!(
        each["instances"][1]["error"]
            .as_str()
            .unwrap()
            .starts_with("not started: the daily budget is spent ($1.90"),
        "{each}"
    );
    assert_eq!(fake.requests().await.len(), 1);
}

/// `plan` shows the daily budget with the run's ceilings, in text and JSON.
#[test]
fn plan_shows_the_daily_budget() {
    let test = Test::new().file("w.toml", &workflow("daily", "daily_usd = 20"));
    let text = test.args(&["plan", "w.toml"]).run_keeping();
    assert_eq!(text.status, 0, "{}", text.transcript());
    assert!(
        text.stdout.contains("budget: $20.00 a day across runs\n"),
        "{}",
        text.stdout
    );
    let json = Test::new()
        .file("w.toml", &workflow("daily", "daily_usd = 20"))
        .args(&["plan", "w.toml", "--format", "json"])
        .run();
    let plan: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(plan["budget"]["daily_usd"], 20.0);
}
