//! Cost before you pay (docs/src/budgets.md): `plan` forecasts each step's tokens, cost and
//! time from the earlier runs of the state directory (median and high), and `run` refuses to
//! start, before any request, when the forecast's high passes the cost ceiling. History is
//! made by real runs against the fake server (its usage numbers decide the tokens, the
//! workflow's price the cost), then the recorded costs and times are set and sealed again.

use std::path::Path;

use serde_json::Value;

use crate::fake::{Fake, anthropic_text};
use crate::support::{Output, Test};

/// 190 tokens a reply: 10 in, 30 out, 150 cache reads (`anthropic_text`); at $3 in and $15 out
/// (cache reads at the input price) that is $0.00093.
const PRICES: &str = "[prices.\"anthropic/claude-test\"]\ninput = 3.0\noutput = 15.0\n";

async fn answering() -> Fake {
    Fake::anthropic_fn(|_| anthropic_text("done")).await
}

fn project(workflow: &str, fake: &Fake) -> Test {
    Test::new()
        .file("w.toml", workflow)
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.uri())
}

fn workflow(extra: &str, steps: &str) -> String {
    format!("name = \"forecast\"\n{extra}[models]\ndefault = \"anthropic/claude-test\"\n{steps}")
}

const A: &str = "[steps.a]\nagent = \"explore\"\nprompt = \"MARK-a look\"\n";
const EACH: &str = "[steps.each]\nagent = \"explore\"\nfor_each = [\"p\", \"q\", \"r\"]\nprompt = \"MARK-each {{ item }}\"\n";

async fn run(test: Test, args: &[&str]) -> (Output, Test) {
    test.clear_args().args(args).run_async().await
}

async fn plan_json(test: Test) -> (Value, Test) {
    let (out, test) = run(test, &["plan", "w.toml", "--format", "json"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    (serde_json::from_str(&out.stdout).unwrap(), test)
}

/// The recorded runs, oldest name first.
fn records(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut runs: Vec<_> = std::fs::read_dir(dir.join(".runner/runs"))
        .map(|d| d.map(|e| e.unwrap().path().join("run.json")).collect())
        .unwrap_or_default();
    runs.sort();
    runs
}

/// Changes every recorded run (`edit` gets its place among them) and seals it again with
/// this user's key, as runner would have written it.
fn edit_records(dir: &Path, edit: impl Fn(usize, &mut Value)) {
    for (i, path) in records(dir).iter().enumerate() {
        let mut record: Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        record.as_object_mut().unwrap().remove("recorded_by");
        edit(i, &mut record);
        let (sealed, unsealed) =
            runner::run::seal::seal(serde_json::to_string_pretty(&record).unwrap());
        assert_eq!(unsealed, None, "this user can seal records");
        std::fs::write(path, sealed).unwrap();
    }
}

/// Diagnostics as one line of words: the renderer wraps them to the terminal's width.
fn flat(text: &str) -> String {
    text.split_whitespace()
        .filter(|w| !matches!(*w, "│" | "×"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn close(value: &Value, expected: f64) -> bool {
    value.as_f64().is_some_and(|v| (v - expected).abs() < 1e-9)
}

/// Two runs whose step `a` cost $0.10 and $0.30 and took 1 s and 3 s; each instance of `each`
/// cost $0.01.
async fn history(fake: &Fake, steps: &str) -> Test {
    let mut test = project(&workflow(PRICES, steps), fake);
    for _ in 0..2 {
        let (out, next) = run(test, &["run", "w.toml", "--no-progress"]).await;
        assert_eq!(out.status, 0, "{}", out.transcript());
        test = next;
    }
    edit_records(test.path(), |i, record| {
        let a = &mut record["steps"]["a"];
        a["cost_usd"] = [0.10, 0.30][i].into();
        a["duration_ms"] = [1_000, 3_000][i].into();
        if let Some(instances) = record["steps"]["each"]["instances"].as_array_mut() {
            for instance in instances {
                instance["cost_usd"] = 0.01.into();
            }
        }
    });
    test
}

/// Per step: median and high of the last runs, a fan-out times its instances, "no history"
/// (never $0) for a step that has none; the total says which steps it leaves out.
#[tokio::test(flavor = "multi_thread")]
async fn plan_forecasts_each_step_and_the_run_from_earlier_runs() {
    let fake = answering().await;
    let test = history(&fake, &format!("{A}{EACH}")).await;
    // A step added since has no history.
    let fresh = "[steps.fresh]\nagent = \"explore\"\nprompt = \"MARK-fresh look\"\n";
    let test = test.file("w.toml", &workflow(PRICES, &format!("{A}{EACH}{fresh}")));
    let (plan, test) = plan_json(test).await;
    let step = |id: &str| {
        plan["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap()["forecast"]
            .clone()
    };
    let a = step("a");
    assert_eq!(a["runs"], 2, "{a}");
    assert_eq!(a["tokens"], serde_json::json!({"median": 190, "high": 190}));
    assert!(close(&a["cost_usd"]["median"], 0.10), "{a}");
    assert!(close(&a["cost_usd"]["high"], 0.30), "{a}");
    assert_eq!(a["cost_from"], "recorded");
    assert_eq!(
        a["duration_ms"],
        serde_json::json!({"median": 1_000, "high": 3_000})
    );
    let each = step("each");
    assert_eq!(each["instances"], 3, "{each}");
    assert_eq!(each["instances_from"], "list");
    assert_eq!(
        each["tokens"],
        serde_json::json!({"median": 570, "high": 570})
    );
    assert!(close(&each["cost_usd"]["high"], 0.03), "{each}");
    let fresh = step("fresh");
    assert_eq!(fresh["runs"], 0, "{fresh}");
    assert!(
        fresh["cost_usd"].is_null() && fresh["tokens"].is_null(),
        "{fresh}"
    );
    let total = &plan["forecast"];
    assert_eq!(total["runs"], 2, "{total}");
    assert!(close(&total["cost_usd"]["median"], 0.13), "{total}");
    assert!(close(&total["cost_usd"]["high"], 0.33), "{total}");
    assert_eq!(total["tokens"]["high"], 760, "{total}");
    assert_eq!(total["without_history"], serde_json::json!(["fresh"]));
    assert!(total["over_ceiling"].is_null(), "{total}");

    let (out, _test) = run(test, &["plan", "w.toml"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let text = &out.stdout;
    assert!(
        text.contains(
            "    forecast 190 tokens, $0.10 (high $0.30), 1.0s (high 3.0s) (last 2 runs)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("    forecast 570 tokens, $0.03, ")
            && text.contains("3 instances of the list"),
        "{text}"
    );
    assert!(
        text.contains("    forecast no history (no earlier run of this step with this agent)\n"),
        "{text}"
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("forecast: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("$0.13 (high $0.33)")
            && line.ends_with("not counted, with no history: fresh"),
        "{line}"
    );
}

/// A run recorded without a price (its model had none then) shows its tokens and an unknown
/// cost; once the model has a price, its tokens are priced at it, and the plan says so.
#[tokio::test(flavor = "multi_thread")]
async fn a_record_without_a_cost_is_priced_from_its_tokens() {
    let fake = answering().await;
    let (out, test) = run(
        project(&workflow("", A), &fake),
        &["run", "w.toml", "--no-progress"],
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    // Without a price its tokens are known, its cost is not: said so, never $0 or "no history".
    let (out, test) = run(test, &["plan", "w.toml"]).await;
    assert!(
        out.stdout
            .contains("    forecast 190 tokens, cost unknown (no price), "),
        "{}",
        out.stdout
    );
    let test = test.file("w.toml", &workflow(PRICES, A));
    let (plan, test) = plan_json(test).await;
    let a = &plan["steps"][0]["forecast"];
    assert_eq!(a["cost_from"], "priced", "{a}");
    assert!(close(&a["cost_usd"]["high"], 0.00093), "{a}");
    let (out, _test) = run(test, &["plan", "w.toml"]).await;
    assert!(
        out.stdout.contains("cost: its tokens at today's price"),
        "{}",
        out.stdout
    );
}

/// A fan-out over an expression is multiplied by the instance count of its last run; a
/// command step costs nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_fan_out_over_an_expression_counts_its_recorded_instances() {
    let fake = answering().await;
    let steps = r#"[steps.list]
run = 'echo "{\"items\": [\"x\", \"y\", \"z\", \"w\"]}"'
output_schema = { type = "object", required = ["items"], properties = { items = { type = "array", items = { type = "string" } } } }
[steps.fan]
agent = "explore"
needs = ["list"]
for_each = "steps.list.output.items"
prompt = "MARK-fan {{ item }}"
"#;
    let (out, test) = run(
        project(&workflow(PRICES, steps), &fake),
        &["run", "w.toml", "--no-progress"],
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let (plan, _test) = plan_json(test).await;
    let fan = &plan["steps"][1]["forecast"];
    assert_eq!(fan["instances"], 4, "{fan}");
    assert_eq!(fan["instances_from"], "recorded", "{fan}");
    assert_eq!(fan["tokens"]["high"], 760, "{fan}");
    assert!(close(&fan["cost_usd"]["high"], 4.0 * 0.00093), "{fan}");
    let list = &plan["steps"][0]["forecast"];
    assert_eq!(list["cost_from"], "command", "{list}");
    assert!(close(&list["cost_usd"]["high"], 0.0), "{list}");
}

/// Past the ceiling, `run` refuses before any request and before it records anything: it
/// names the costliest steps with their high and how to raise the ceiling, and exits 2.
#[tokio::test(flavor = "multi_thread")]
async fn a_forecast_past_the_ceiling_refuses_before_any_request() {
    let fake = answering().await;
    let test = history(&fake, &format!("{A}{EACH}")).await;
    let before = fake.requests().await.len();
    let (out, test) = run(test, &["run", "w.toml", "--max-cost", "0.2"]).await;
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        flat(&out.stderr).contains(
            "not starting: the forecast's high is $0.33, past the ceiling `--max-cost 0.2` (costliest: `a` $0.30, `each` $0.03;"
        ),
        "{}",
        out.stderr
    );
    assert!(
        flat(&out.stderr).contains("`--max-cost 0.33`"),
        "{}",
        out.stderr
    );
    assert_eq!(fake.requests().await.len(), before, "no request was sent");
    assert_eq!(records(test.path()).len(), 2, "no run was recorded");
    // The file's ceiling refuses the same way; the flag overrides it for one run.
    let test = test.file(
        "w.toml",
        &workflow(
            &format!("[budget]\nmax_cost_usd = 0.2\n{PRICES}"),
            &format!("{A}{EACH}"),
        ),
    );
    let (out, test) = run(test, &["run", "w.toml"]).await;
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        flat(&out.stderr).contains("past the ceiling `[budget] max_cost_usd = 0.2`"),
        "{}",
        out.stderr
    );
    assert_eq!(fake.requests().await.len(), before);
    let (out, test) = run(test, &["plan", "w.toml"]).await;
    assert!(
        out.stdout
            .contains("the high passes the $0.20 ceiling: `run` refuses to start"),
        "{}",
        out.stdout
    );
    let (out, _test) = run(test, &["run", "w.toml", "--max-cost", "1", "--no-progress"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(fake.requests().await.len() > before);
}

/// With no history for a step the forecast is incomplete: said, and by default the run starts;
/// `--unknown-cost refuse` (or `[budget] unknown_cost = "refuse"`) counts it as past the
/// ceiling.
#[tokio::test(flavor = "multi_thread")]
async fn an_incomplete_forecast_runs_by_default_and_can_refuse() {
    let fake = answering().await;
    let test = project(&workflow(PRICES, A), &fake);
    let (out, test) = run(
        test,
        &[
            "run",
            "w.toml",
            "--max-cost",
            "1",
            "--unknown-cost",
            "refuse",
        ],
    )
    .await;
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        flat(&out.stderr).contains(
            "not starting: the forecast is incomplete: no history for `a` (their cost is not counted), and `unknown_cost = \"refuse\"` counts that as past the ceiling `--max-cost 1`"
        ),
        "{}",
        out.stderr
    );
    assert!(fake.requests().await.is_empty());
    // `plan` says so before.
    let (out, test) = run(
        test,
        &[
            "plan",
            "w.toml",
            "--max-cost",
            "1",
            "--unknown-cost",
            "refuse",
            "--format",
            "json",
        ],
    )
    .await;
    let plan: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(plan["forecast"]["refuses"], true, "{}", plan["forecast"]);
    assert_eq!(
        plan["forecast"]["over_ceiling"], false,
        "{}",
        plan["forecast"]
    );
    let test = test.file(
        "w.toml",
        &workflow(
            &format!("[budget]\nmax_cost_usd = 1.0\nunknown_cost = \"refuse\"\n{PRICES}"),
            A,
        ),
    );
    let (out, test) = run(test, &["run", "w.toml"]).await;
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(fake.requests().await.is_empty());
    // The flag overrides the key; without either the run starts, saying what it cannot count.
    let (out, test) = run(
        test,
        &["run", "w.toml", "--unknown-cost", "allow", "--no-progress"],
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        flat(&out.stderr).contains(
            "warning: the forecast is incomplete: no history for `a` (their cost is not counted); starting"
        ),
        "{}",
        out.stderr
    );
    assert_eq!(fake.requests().await.len(), 1);
    let test = test.file("w.toml", &workflow(PRICES, A));
    let (out, _test) = run(test, &["run", "w.toml", "--max-cost", "1", "--no-progress"]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(!flat(&out.stderr).contains("incomplete"), "{}", out.stderr);
}

/// A replay costs nothing, and steps a resumed run reuses cost nothing: neither is refused.
#[tokio::test(flavor = "multi_thread")]
async fn replay_and_reused_steps_are_not_refused() {
    let fake = answering().await;
    let (out, test) = run(
        project(&workflow(PRICES, A), &fake),
        &["run", "w.toml", "--record", "cassettes", "--no-progress"],
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    edit_records(test.path(), |_, record| {
        record["steps"]["a"]["cost_usd"] = 5.0.into();
    });
    let (out, test) = run(test, &["run", "w.toml", "--max-cost", "1"]).await;
    assert_eq!(out.status, 2, "{}", out.transcript());
    let before = fake.requests().await.len();
    let (out, test) = run(
        test,
        &[
            "run",
            "w.toml",
            "--replay",
            "cassettes",
            "--max-cost",
            "1",
            "--no-progress",
        ],
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let (out, _test) = run(
        test,
        &[
            "run",
            "w.toml",
            "--resume",
            "latest",
            "--max-cost",
            "1",
            "--no-progress",
        ],
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(fake.requests().await.len(), before, "nothing was sent");
}

/// `--max-cost` is the run's live ceiling too, over the file's: with no history the run starts,
/// and the request after the ceiling is reached is not sent, the step's error naming the flag.
#[tokio::test(flavor = "multi_thread")]
async fn max_cost_is_also_the_live_ceiling() {
    let fake = answering().await;
    let b = "[steps.b]\nagent = \"explore\"\nneeds = [\"a\"]\nprompt = \"MARK-b look\"\n";
    let test = project(
        &workflow(
            &format!("[budget]\nmax_cost_usd = 100.0\n{PRICES}"),
            &format!("{A}{b}"),
        ),
        &fake,
    );
    // `a` costs $0.00093, past $0.0005: `b` is refused before its request.
    let (out, _test) = run(
        test,
        &["run", "w.toml", "--max-cost", "0.0005", "--format", "json"],
    )
    .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let record: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(record["steps"]["a"]["status"], "succeeded");
    assert_eq!(record["steps"]["b"]["status"], "failed");
    assert_eq!(
        record["steps"]["b"]["error"],
        "the run cost $0.0009 of its budget `--max-cost 0.0005`"
    );
    assert_eq!(fake.count("MARK-b").await, 0);
}

/// A ceiling that is not a number of dollars is a usage error, said before anything runs.
#[test]
fn a_ceiling_that_is_not_dollars_is_refused() {
    for bad in ["--max-cost=-1", "--max-cost=nan", "--max-cost=inf"] {
        let out = Test::new()
            .file("w.toml", &workflow(PRICES, A))
            .args(&["run", "w.toml", bad])
            .run();
        assert_eq!(out.status, 2, "{bad}: {}", out.transcript());
        assert!(
            flat(&out.stderr).contains("`--max-cost` must be a number of USD, 0 or more"),
            "{bad}: {}",
            out.stderr
        );
    }
}
