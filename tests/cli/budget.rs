//! Budgets (docs/src/budgets.md): a step's `max_tokens_total` and the run's `[budget]`, through the
//! binary.

use serde_json::{Value, json};

use crate::fake::{Fake, anthropic_text, ok};
use crate::support::Test;

const KEY: &str = "sk-test-key-0000";

/// A turn that uses 110 tokens (100 in, 10 out) and calls `list_dir`, so the step goes on.
fn turn(n: u32) -> wiremock::ResponseTemplate {
    ok(json!({
        "id": "msg", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "tool_use", "id": format!("t{n}"), "name": "list_dir", "input": {"path": "."}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 100, "output_tokens": 10}
    }))
}

async fn run(fake: &Fake, workflow: &str) -> (crate::support::Output, Value) {
    let (out, _test) = Test::new()
        .file("w.toml", workflow)
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    let run =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", out.transcript()));
    (out, run)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_budget_stops_the_step_before_the_request_that_would_pass_it() {
    let fake = Fake::anthropic((1..=10).map(turn).collect()).await;
    let workflow = "name = \"t\"\n[models]\ndefault = \"anthropic/m\"\n[steps.s]\nagent = \"explore\"\nmax_tokens_total = 250\nprompt = \"look\"\n";
    let (out, run) = run(&fake, workflow).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    // 110, 220 (< 250: one more), 330: the fourth request is never sent.
    assert_eq!(fake.requests().await.len(), 3);
    let step = &run["steps"]["s"];
    assert_eq!(step["status"], "failed");
    assert_eq!(
        step["error"],
        "step `s` used 330 tokens of its budget `max_tokens_total = 250`"
    );
    assert_eq!(step["turns"], 3);
    assert!(
        out.stderr
            .contains("failed: s: step `s` used 330 tokens of its budget `max_tokens_total = 250`"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_cost_ceiling_stops_later_steps_and_costs_are_recorded() {
    let fake = Fake::anthropic(vec![
        // 1M input tokens at $3 and 10k output at $15: $3.15, past the $1 ceiling.
        ok(json!({
            "content": [{"type": "text", "text": "expensive"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 1_000_000, "output_tokens": 10_000}
        })),
        anthropic_text("never"),
    ])
    .await;
    let workflow = "name = \"t\"\n[budget]\nmax_cost_usd = 1.0\n[prices.\"anthropic/m\"]\ninput = 3.0\noutput = 15.0\n[models]\ndefault = \"anthropic/m\"\n[steps.a]\nagent = \"explore\"\nprompt = \"first\"\n[steps.b]\nagent = \"explore\"\nneeds = [\"a\"]\nprompt = \"second\"\n";
    let (out, run) = run(&fake, workflow).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    assert_eq!(fake.requests().await.len(), 1);
    assert_eq!(run["steps"]["a"]["status"], "succeeded");
    assert!((run["steps"]["a"]["cost_usd"].as_f64().unwrap() - 3.15).abs() < 1e-9);
    assert!((run["cost_usd"].as_f64().unwrap() - 3.15).abs() < 1e-9);
    assert_eq!(run["steps"]["b"]["status"], "failed");
    assert_eq!(
        run["steps"]["b"]["error"],
        "the run cost $3.1500 of its budget `[budget] max_cost_usd = 1`"
    );
    // The table has a cost column.
    assert!(out.stderr.contains("COST"), "{}", out.stderr);
    assert!(out.stderr.contains("$3.15"), "{}", out.stderr);
}

#[test]
fn plan_shows_the_ceilings_and_refuses_unpriced_models() {
    let workflow = "name = \"t\"\n[budget]\nmax_tokens = 100000\nmax_cost_usd = 2.5\n[models]\ndefault = \"anthropic/m\"\n[defaults]\nmax_tokens_total = 5000\n[steps.a]\nagent = \"explore\"\nprompt = \"first\"\n";
    let priced = workflow.replace(
        "[models]",
        "[prices.\"anthropic/m\"]\ninput = 1\noutput = 2\n[models]",
    );
    let out = Test::new()
        .file("w.toml", &priced)
        .args(&["plan", "w.toml"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stdout.contains("budget: 100000 tokens, $2.50\n"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("5000 tokens in all"), "{}", out.stdout);
    // A cost ceiling that could not count a step's replies is no ceiling: refused.
    let out = Test::new()
        .file("w.toml", workflow)
        .args(&["plan", "w.toml"])
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    insta::assert_snapshot!("unpriced_model_error", out.stderr);

    let bad = Test::new()
        .file(
            "w.toml",
            &workflow.replace(
                "[models]",
                "[prices.\"antropic/m\"]\ninput = 1\noutput = 2\n[models]",
            ),
        )
        .args(&["validate", "w.toml"])
        .run();
    assert_eq!(bad.status, 2);
    assert!(
        bad.stderr
            .contains("unknown provider `antropic` in `antropic/m` (a key of `[prices]`)"),
        "{}",
        bad.stderr
    );
}

/// Under `max_cost_usd`, a subagent on a model without a price is refused before its first
/// request: its replies could not be counted.
#[tokio::test(flavor = "multi_thread")]
async fn a_subagent_on_an_unpriced_model_cannot_pass_the_cost_ceiling() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-lead",
            vec![
                crate::fake::anthropic_tools(&[(
                    "t1",
                    "task",
                    json!({
                        "description": "look around",
                        "prompt": "MARK-sub list files",
                        "subagent_type": "explore",
                        "model": "cheap"
                    }),
                )]),
                anthropic_text("lead done"),
            ],
        ),
        ("MARK-sub", vec![anthropic_text("sub answered")]),
    ])
    .await;
    let workflow = "name = \"t\"\n[budget]\nmax_cost_usd = 5.0\n[prices.\"anthropic/m\"]\ninput = 3.0\noutput = 15.0\n[models]\ndefault = \"anthropic/m\"\ncheap = \"anthropic/unpriced\"\n[steps.s]\nagent = \"code\"\nprompt = \"MARK-lead\"\n";
    let (out, _run) = run(&fake, workflow).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(fake.count("MARK-sub").await, 0, "the subagent was sent");
    // The lead's two requests, nothing else; the second carries the refusal.
    let bodies = fake.bodies().await;
    assert_eq!(bodies.len(), 2);
    let results = crate::fake::anthropic_results(&bodies[1]);
    assert!(
        results[0]
            .1
            .contains("`anthropic/unpriced` has no known price"),
        "{results:?}"
    );
}

/// A step may have at most `max_subagents_per_step` subagents unfinished: the next `task` call
/// is refused, so one step cannot queue thousands and starve the others. The subagents here
/// never get an answer, so two stay unfinished whatever the scheduling; the step's timeout only
/// ends the test.
#[tokio::test(flavor = "multi_thread")]
async fn a_step_cannot_start_more_subagents_than_its_cap() {
    let background = |id: &str| {
        (
            id.to_owned(),
            "task".to_owned(),
            json!({
                "description": "wait here",
                "prompt": format!("MARK-sub {id}"),
                "subagent_type": "explore",
                "run_in_background": true
            }),
        )
    };
    let calls = [background("t1"), background("t2"), background("t3")];
    let calls: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.clone()))
        .collect();
    let hang = || anthropic_text("never").set_delay(std::time::Duration::from_secs(600));
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-lead",
            vec![
                crate::fake::anthropic_tools(&calls),
                anthropic_text("lead done"),
            ],
        ),
        ("MARK-sub", vec![hang(), hang(), hang()]),
    ])
    .await;
    let workflow = "name = \"t\"\nmax_subagents_per_step = 2\n[models]\ndefault = \"anthropic/m\"\n[steps.s]\nagent = \"code\"\ntimeout = \"3s\"\nprompt = \"MARK-lead\"\n";
    let (_out, _run) = run(&fake, workflow).await;
    let lead = fake
        .bodies()
        .await
        .into_iter()
        .find(|b| {
            crate::fake::prompt_of(b).contains("MARK-lead")
                && b["messages"].as_array().unwrap().len() == 3
        })
        .expect("the lead's second request");
    let results = crate::fake::anthropic_results(&lead);
    let refused: Vec<_> = results.iter().filter(|r| r.2).collect();
    assert_eq!(refused.len(), 1, "{results:?}");
    assert!(
        refused[0].1.contains("max_subagents_per_step = 2"),
        "{results:?}"
    );
}
