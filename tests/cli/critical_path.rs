//! Critical path first (docs/src/runs.md "The order steps start in"): with more ready than
//! `max_parallel` allows, the step (or instance) with the longest remaining path starts first,
//! by the durations of earlier runs where there are some, else by step count, ties by the
//! order of the file. Orders are observed through `step_started` events under
//! `max_parallel = 1`, where one step at a time makes the order the scheduler's choice alone;
//! history is made by real runs whose recorded durations are then set and sealed again.

use std::path::Path;

use serde_json::Value;

use crate::fake::{Fake, anthropic_text};
use crate::support::{Output, Test};

fn project(workflow: &str, fake: &Fake) -> Test {
    Test::new()
        .file("w.toml", workflow)
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.uri())
}

/// A server answering every request at once.
async fn answering() -> Fake {
    Fake::anthropic_fn(|_| anthropic_text("done")).await
}

fn step(id: &str, needs: &[&str]) -> String {
    let needs: Vec<String> = needs.iter().map(|n| format!("\"{n}\"")).collect();
    format!(
        "[steps.{id}]\nagent = \"explore\"\nprompt = \"{id}\"\nneeds = [{}]\n",
        needs.join(", ")
    )
}

fn workflow(max_parallel: u32, steps: &[String]) -> String {
    format!(
        "name = \"order\"\nmax_parallel = {max_parallel}\n[models]\ndefault = \"anthropic/claude-test\"\n{}",
        steps.concat()
    )
}

/// Runs the workflow with the JSONL stream; the ids in the order they started.
async fn run(test: Test) -> (Vec<String>, Test) {
    let (out, test) = test
        .clear_args()
        .args(&["run", "w.toml", "--format", "jsonl"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    (started(&out), test)
}

fn started(out: &Output) -> Vec<String> {
    out.stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "step_started")
        .filter_map(|e| e["step"].as_str().map(str::to_owned))
        .collect()
}

/// Sets the recorded durations of every recorded run (`id` or an instance id `X[k]`), and
/// seals each record again with this user's key, as runner would have written it.
fn set_durations(dir: &Path, durations: &[(&str, u64)]) {
    let runs = dir.join(".runner/runs");
    for entry in std::fs::read_dir(&runs).unwrap() {
        let path = entry.unwrap().path().join("run.json");
        let mut record: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        record.as_object_mut().unwrap().remove("recorded_by");
        for (id, ms) in durations {
            match id.split_once('[') {
                Some((step, _)) => {
                    for instance in record["steps"][step]["instances"].as_array_mut().unwrap() {
                        if instance["instance"] == *id {
                            instance["duration_ms"] = (*ms).into();
                        }
                    }
                }
                None => record["steps"][*id]["duration_ms"] = (*ms).into(),
            }
        }
        let (sealed, unsealed) =
            runner::run::seal::seal(serde_json::to_string_pretty(&record).unwrap());
        assert_eq!(unsealed, None, "this user can seal records");
        std::fs::write(&path, sealed).unwrap();
    }
}

/// Today's order was wave then id (`a`, `b`, `z1`, ...): the chain waited behind the
/// independent steps. Without history the longest chain by step count goes first; where paths
/// tie, the step declared first.
#[tokio::test(flavor = "multi_thread")]
async fn without_history_the_longest_chain_by_steps_starts_first() {
    let fake = answering().await;
    let steps = [
        step("b", &[]),
        step("a", &[]),
        step("z1", &[]),
        step("z2", &["z1"]),
        step("z3", &["z2"]),
    ];
    let (order, _test) = run(project(&workflow(1, &steps), &fake)).await;
    // z1 (3 to go), z2 (2); then b, a and z3 tie at 1: the file declares b, a, then z3.
    assert_eq!(order, ["z1", "z2", "b", "a", "z3"]);
}

/// With history, recorded durations decide: one long step outweighs a chain of two short ones.
#[tokio::test(flavor = "multi_thread")]
async fn with_history_the_longest_recorded_path_starts_first() {
    let fake = answering().await;
    let steps = [step("x1", &[]), step("x2", &["x1"]), step("long", &[])];
    let (first, test) = run(project(&workflow(1, &steps), &fake)).await;
    // By step count x1 has 2 to go; then x2 and long tie, and the file declares x2 first.
    assert_eq!(first, ["x1", "x2", "long"]);
    set_durations(test.path(), &[("x1", 100), ("x2", 100), ("long", 60_000)]);
    let (second, test) = run(test).await;
    assert_eq!(second, ["long", "x1", "x2"]);
    // The plan says so too, with an ETA; both runs now hold the chosen durations.
    set_durations(test.path(), &[("x1", 100), ("x2", 100), ("long", 60_000)]);
    let (out, _test) = test
        .clear_args()
        .args(&["plan", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let plan: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        plan["critical_path"],
        serde_json::json!({"steps": ["long"], "duration_ms": 60_000, "eta_ms": 60_200, "runs": 2, "without_history": []})
    );
}

/// Fan-out instances start by their own recorded durations, else in list order.
#[tokio::test(flavor = "multi_thread")]
async fn fan_out_instances_start_longest_first() {
    let fake = answering().await;
    let steps = [
        "[steps.each]\nagent = \"explore\"\nfor_each = [\"p\", \"q\", \"r\"]\nprompt = \"item {{ item }}\"\n".to_owned(),
    ];
    let (first, test) = run(project(&workflow(1, &steps), &fake)).await;
    assert_eq!(first, ["each", "each[0]", "each[1]", "each[2]"]);
    set_durations(
        test.path(),
        &[("each[0]", 10), ("each[1]", 5_000), ("each[2]", 20_000)],
    );
    let (second, _test) = run(test).await;
    assert_eq!(second, ["each", "each[2]", "each[1]", "each[0]"]);
}

/// `plan` shows the critical path: by step count with no history.
#[test]
fn plan_shows_the_critical_path_by_step_count_without_history() {
    let steps = [step("b", &[]), step("z1", &[]), step("z2", &["z1"])];
    let out = Test::new()
        .file("w.toml", &workflow(2, &steps))
        .args(&["plan", "w.toml"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stdout
            .contains("critical path: z1 -> z2 (2 steps; no history yet, so by step count)\n"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("eta:"), "{}", out.stdout);
    let out = Test::new()
        .file("w.toml", &workflow(2, &steps))
        .args(&["plan", "w.toml", "--format", "json"])
        .run();
    let plan: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        plan["critical_path"],
        serde_json::json!({"steps": ["z1", "z2"], "duration_ms": null, "eta_ms": null, "runs": 0, "without_history": []})
    );
}

/// `plan` with history: the path's length in time and an ETA.
#[tokio::test(flavor = "multi_thread")]
async fn plan_shows_the_critical_path_and_eta_with_history() {
    let fake = answering().await;
    let steps = [step("b", &[]), step("z1", &[]), step("z2", &["z1"])];
    let (_, test) = run(project(&workflow(2, &steps), &fake)).await;
    set_durations(test.path(), &[("b", 30_000), ("z1", 10_000), ("z2", 5_000)]);
    let (out, _test) = test
        .clear_args()
        .args(&["plan", "w.toml"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    // b alone (30 s) is longer than z1 then z2 (15 s); two at once: 30 s in all.
    assert!(
        out.stdout.contains(
            "critical path: b (30s, median of the last 1 run)\neta: 30s with at most 2 at once\n"
        ),
        "{}",
        out.stdout
    );
}

/// `run.json` and `show` give the queue waits of steps and instances: counts of what started,
/// percentiles in order.
#[tokio::test(flavor = "multi_thread")]
async fn queue_waits_are_recorded_and_shown() {
    let fake = answering().await;
    let steps = [
        step("a", &[]),
        step("b", &[]),
        step("c", &[]),
        "[steps.each]\nagent = \"explore\"\nfor_each = [\"p\", \"q\"]\nprompt = \"item {{ item }}\"\n".to_owned(),
    ];
    let (out, test) = project(&workflow(1, &steps), &fake)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let record: Value = serde_json::from_str(&out.stdout).unwrap();
    let waits = &record["queue_waits"];
    assert_eq!(waits["steps"]["count"], 3, "{waits}");
    assert_eq!(waits["instances"]["count"], 2, "{waits}");
    assert!(waits.get("subagents").is_none(), "{waits}");
    for kind in ["steps", "instances"] {
        let ms = |p: &str| waits[kind][p].as_u64().unwrap();
        assert!(
            ms("p50_ms") <= ms("p90_ms")
                && ms("p90_ms") <= ms("p99_ms")
                && ms("p99_ms") <= ms("max_ms"),
            "{waits}"
        );
    }
    // The longest wait is one a step recorded.
    let longest = record["steps"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(id, _)| *id != "each")
        .filter_map(|(_, s)| s["queue_ms"].as_u64())
        .max();
    assert_eq!(waits["steps"]["max_ms"].as_u64(), longest, "{waits}");
    let (shown, test) = test
        .clear_args()
        .args(&["show", "latest"])
        .run_async()
        .await;
    assert_eq!(shown.status, 0, "{}", shown.transcript());
    let line = shown
        .stdout
        .lines()
        .find(|l| l.starts_with("queue waits: "))
        .unwrap_or_else(|| panic!("{}", shown.stdout));
    assert!(
        line.contains("steps ") && line.contains("(3 started)"),
        "{line}"
    );
    assert!(
        line.contains("; instances ") && line.contains("(2 started)"),
        "{line}"
    );
    // The report shows the same, in a table under its totals.
    let (wrote, test) = test
        .clear_args()
        .args(&["report", "-o", "r.html"])
        .run_async()
        .await;
    assert_eq!(wrote.status, 0, "{}", wrote.transcript());
    let page = std::fs::read_to_string(test.path().join("r.html")).unwrap();
    assert!(
        page.contains("<table class=\"queue-waits\">"),
        "no queue waits"
    );
    for kind in ["steps", "instances"] {
        assert!(
            page.contains(&format!("<tr data-kind=\"{kind}\"><td>{kind}</td>")),
            "{kind}"
        );
    }
    assert!(!page.contains("data-kind=\"subagents\""));
}

/// A record from before queue waits (and step agents) loads and shows as it did.
#[tokio::test(flavor = "multi_thread")]
async fn an_older_record_without_queue_waits_still_loads() {
    let fake = answering().await;
    let (_, test) = run(project(&workflow(1, &[step("a", &[])]), &fake)).await;
    let runs = test.path().join(".runner/runs");
    for entry in std::fs::read_dir(&runs).unwrap() {
        let path = entry.unwrap().path().join("run.json");
        let mut record: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let object = record.as_object_mut().unwrap();
        object.remove("recorded_by");
        assert!(object.remove("queue_waits").is_some());
        assert!(
            record["steps"]["a"]
                .as_object_mut()
                .unwrap()
                .remove("agent")
                .is_some()
        );
        let (sealed, _) = runner::run::seal::seal(serde_json::to_string_pretty(&record).unwrap());
        std::fs::write(&path, sealed).unwrap();
    }
    let (shown, test) = test
        .clear_args()
        .args(&["show", "latest"])
        .run_async()
        .await;
    assert_eq!(shown.status, 0, "{}", shown.transcript());
    assert!(!shown.stdout.contains("queue waits"), "{}", shown.stdout);
    // Its step still counts as history: matched by its model when no agent is recorded.
    let (out, _test) = test
        .clear_args()
        .args(&["plan", "w.toml", "--format", "json"])
        .run_async()
        .await;
    let plan: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(plan["critical_path"]["runs"], 1, "{}", out.stdout);
    assert!(
        plan["critical_path"]["duration_ms"].is_u64(),
        "{}",
        out.stdout
    );
}

/// Subagents waiting for `max_subagents` are counted in `queue_waits.subagents`, each with its
/// own `queue_ms`.
#[tokio::test(flavor = "multi_thread")]
async fn subagent_queue_waits_are_recorded() {
    use crate::fake::anthropic_tools;
    let task = |prompt: &str| serde_json::json!({"description": "look", "prompt": prompt, "subagent_type": "explore"});
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-lead",
            vec![
                anthropic_tools(&[
                    ("t1", "task", task("MARK-a look")),
                    ("t2", "task", task("MARK-b look")),
                ]),
                anthropic_text("both looked"),
            ],
        ),
        ("MARK-a", vec![anthropic_text("a seen")]),
        ("MARK-b", vec![anthropic_text("b seen")]),
    ])
    .await;
    let workflow = "name = \"subs\"\nmax_subagents = 1\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.lead]\nagent = \"code\"\nprompt = \"MARK-lead look twice\"\n";
    let (out, _test) = project(workflow, &fake)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let record: Value = serde_json::from_str(&out.stdout).unwrap();
    let subagents = record["steps"]["lead"]["subagents"].as_array().unwrap();
    assert_eq!(subagents.len(), 2);
    assert!(
        subagents.iter().all(|s| s["queue_ms"].is_u64()),
        "{subagents:?}"
    );
    assert_eq!(
        record["queue_waits"]["subagents"]["count"], 2,
        "{}",
        record["queue_waits"]
    );
}
