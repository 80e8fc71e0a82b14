//! Models as they are priced today (docs/src/models.md, "Prices and windows"): prices and windows
//! from the vendored snapshot of LiteLLM's model map, `[prices]` over them, a model without a
//! price said to have none, `runner models`, and the script that refreshes the snapshot.

use std::process::Command;

use serde_json::{Value, json};

use crate::fake::{Fake, ok};
use crate::support::{REPO, Test};

/// A workflow with one explore step per model, `s0`, `s1`, … in order.
fn workflow(models: &[&str], extra: &str) -> String {
    let mut text = format!("name = \"t\"\n{extra}\n[models]\ndefault = \"anthropic/m\"\n");
    for (i, model) in models.iter().enumerate() {
        text.push_str(&format!(
            "[steps.s{i}]\nagent = \"explore\"\nmodel = \"{model}\"\nprompt = \"look\"\n"
        ));
    }
    text
}

fn plan_json(workflow: &str) -> Value {
    let out = Test::new()
        .file("w.toml", workflow)
        .args(&["plan", "w.toml", "--format", "json"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    serde_json::from_str(&out.stdout).unwrap()
}

const TODAY: [&str; 3] = [
    "anthropic/claude-opus-4-6",
    "anthropic/claude-sonnet-4-6",
    "anthropic/claude-opus-4-1",
];

#[test]
fn plan_prices_todays_models_at_their_list_prices() {
    let plan = plan_json(&workflow(&TODAY, ""));
    let steps = plan["steps"].as_array().unwrap();
    let price = |i: usize| (&steps[i]["price"]["input"], &steps[i]["price"]["output"]);
    // Opus 4.6 is not Opus 4 ($15/$75): no name is priced by a shorter one's prefix.
    assert_eq!(price(0), (&json!(5.0), &json!(25.0)));
    assert_eq!(price(1), (&json!(3.0), &json!(15.0)));
    // Opus 4.1 is retired from the newest map and keeps the price of the last one that had it.
    assert_eq!(price(2), (&json!(15.0), &json!(75.0)));
    let version = |i: usize| steps[i]["price_source"].as_str().unwrap().to_owned();
    assert!(version(0).starts_with("LiteLLM "), "{}", version(0));
    assert_ne!(version(2), version(0));
    assert_eq!(steps[0]["price"]["cache_read"], 0.5);
}

#[test]
fn the_workflows_prices_override_each_list_price() {
    let mut extra = String::new();
    for (i, model) in TODAY.iter().enumerate() {
        extra.push_str(&format!(
            "[prices.\"{model}\"]\ninput = {}\noutput = {}\n",
            i + 1,
            i + 10
        ));
    }
    let plan = plan_json(&workflow(&TODAY, &extra));
    for (i, step) in plan["steps"].as_array().unwrap().iter().enumerate() {
        assert_eq!(step["price"]["input"], json!((i + 1) as f64), "{step}");
        assert_eq!(step["price"]["output"], json!((i + 10) as f64), "{step}");
        assert_eq!(step["price_source"], "[prices]");
    }
    let out = Test::new()
        .file("w.toml", &workflow(&TODAY, &extra))
        .args(&["plan", "w.toml"])
        .run();
    assert!(
        out.stdout
            .contains("price    $1.00 in, $10.00 out per million tokens (cache read $1.00, write $1.00; [prices])"),
        "{}",
        out.stdout
    );
}

#[test]
fn windows_come_from_the_map() {
    let plan = plan_json(&workflow(
        &[
            "anthropic/claude-opus-4-6",
            "anthropic/claude-sonnet-4-5",
            "anthropic/claude-opus-4-6-20990101",
        ],
        "",
    ));
    let steps = plan["steps"].as_array().unwrap();
    assert_eq!(steps[0]["context_window"], 1_000_000);
    assert_eq!(steps[1]["context_window"], 200_000);
    // A dated name is its model's.
    assert_eq!(steps[2]["context_window"], 1_000_000);
    let out = Test::new()
        .file("w.toml", &workflow(&["anthropic/claude-opus-4-6"], ""))
        .args(&["plan", "w.toml"])
        .run();
    assert!(
        out.stdout
            .contains("    context  1.0M tokens, compacted at 80%"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_model_without_a_price_says_so_and_a_cost_ceiling_refuses_it() {
    let models = ["anthropic/claude-opus-4-9", "anthropic/claude-sonnet-4-6"];
    let plan = plan_json(&workflow(&models, ""));
    assert_eq!(plan["steps"][0]["price"], Value::Null);
    assert_eq!(plan["steps"][0]["price_source"], Value::Null);
    let out = Test::new()
        .file("w.toml", &workflow(&models, ""))
        .args(&["plan", "w.toml"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let line = out
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("price") && l.contains("none known"))
        .unwrap_or_else(|| panic!("{}", out.stdout));
    assert!(
        line.contains("[prices.\"anthropic/claude-opus-4-9\"]"),
        "{line}"
    );
    assert!(!line.contains('$'), "{line}");

    let out = Test::new()
        .file(
            "w.toml",
            &workflow(&models, "[budget]\nmax_cost_usd = 3.0\n"),
        )
        .args(&["plan", "w.toml"])
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr.contains(
            "`max_cost_usd` cannot count replies of `anthropic/claude-opus-4-9`: no known price"
        ),
        "{}",
        out.stderr
    );
    // The priced model is not named.
    assert!(!out.stderr.contains("claude-sonnet-4-6`"), "{}", out.stderr);
}

/// The meter charges a reply at the same price `plan` shows.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_charges_opus_4_6_at_its_list_price() {
    let fake = Fake::anthropic(vec![ok(json!({
        "id": "msg", "type": "message", "role": "assistant", "model": "claude-opus-4-6",
        "content": [{"type": "text", "text": "done"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1_000_000, "output_tokens": 10_000}
    }))])
    .await;
    let (out, _test) = Test::new()
        .file(
            "w.toml",
            &workflow(
                &["anthropic/claude-opus-4-6"],
                "[budget]\nmax_cost_usd = 100.0\n",
            ),
        )
        .anthropic_api(&fake.uri(), "sk-test-key-0000")
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    // 1M in at $5 and 10k out at $25 per million (Opus 4's prices would make it $15.75).
    let cost = run["steps"]["s0"]["cost_usd"].as_f64().unwrap();
    assert!((cost - 5.25).abs() < 1e-9, "{cost}");
}

#[test]
fn runner_models_lists_prices_windows_and_the_source() {
    let out = Test::new().args(&["models", "opus-4"]).run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let row = |model: &str| {
        out.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(model))
            .unwrap_or_else(|| panic!("{model}:\n{}", out.stdout))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    let opus = row("anthropic/claude-opus-4-6");
    assert_eq!(
        opus[1..7],
        ["$5.00", "$25.00", "$0.50", "$6.25", "1,000,000", "128,000"]
    );
    let old = row("anthropic/claude-opus-4-1");
    assert_eq!(old[1..3], ["$15.00", "$75.00"]);
    assert!(old.join(" ").ends_with(", retired"), "{old:?}");
    // The filter keeps only matching models.
    assert!(!out.stdout.contains("sonnet"), "{}", out.stdout);

    let out = Test::new().args(&["models", "--format", "json"]).run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["source"]["name"], "LiteLLM");
    let version = doc["source"]["version"].as_str().unwrap();
    let find = |model: &str| {
        doc["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["model"] == model)
            .unwrap_or_else(|| panic!("{model}"))
            .clone()
    };
    let sonnet = find("anthropic/claude-sonnet-4-6");
    assert_eq!(sonnet["price"]["input"], 3.0);
    assert_eq!(sonnet["price"]["output"], 15.0);
    assert_eq!(sonnet["retired"], Value::Null);
    assert_eq!(
        sonnet["source"],
        format!(
            "LiteLLM {version} ({})",
            doc["source"]["date"].as_str().unwrap()
        )
    );
    assert_eq!(
        find("anthropic/claude-sonnet-4-5")["context_window"],
        200_000
    );
    assert!(find("anthropic/claude-opus-4-1")["retired"]["version"].is_string());
    assert!(find("openai/gpt-4o")["price"]["input"].is_number());

    let none = Test::new().args(&["models", "no-such-model"]).run();
    assert_eq!(none.status, 0);
    assert!(
        none.stdout.contains("no known model matches"),
        "{}",
        none.stdout
    );
}

/// The chapters that name the snapshot's version and date name the one runner has.
#[test]
fn the_docs_name_the_snapshot_runner_has() {
    let out = Test::new().args(&["models", "--format", "json"]).run();
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    let (version, date) = (
        doc["source"]["version"].as_str().unwrap(),
        doc["source"]["date"].as_str().unwrap(),
    );
    for chapter in ["models.md", "budgets.md"] {
        let text = std::fs::read_to_string(format!("{REPO}/docs/src/{chapter}")).unwrap();
        assert!(
            text.contains(&format!("LiteLLM {version}")) && text.contains(date),
            "docs/src/{chapter} does not name LiteLLM {version} ({date})"
        );
    }
}

/// scripts/refresh-models.py against a fake installed `litellm` (a folder on PYTHONPATH, with
/// its package metadata): trimmed to what runner speaks, merged with the snapshot it replaces.
#[test]
fn the_refresh_script_trims_and_merges_the_installed_map() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    std::fs::create_dir_all(site.join("litellm")).unwrap();
    std::fs::create_dir_all(site.join("litellm-9.9.9.dist-info")).unwrap();
    std::fs::write(
        site.join("litellm/__init__.py"),
        "raise ImportError('not imported')\n",
    )
    .unwrap();
    std::fs::write(
        site.join("litellm-9.9.9.dist-info/METADATA"),
        "Metadata-Version: 2.1\nName: litellm\nVersion: 9.9.9\n",
    )
    .unwrap();
    let map = json!({
        "sample_spec": {"litellm_provider": "one of them", "mode": "chat"},
        "claude-new-1": {
            "litellm_provider": "anthropic", "mode": "chat",
            "input_cost_per_token": 5e-06, "output_cost_per_token": 2.5e-05,
            "cache_read_input_token_cost": 5e-07, "max_input_tokens": 1_000_000,
            "max_output_tokens": 128_000, "prompt_cache_min_tokens": 4096,
            "supports_vision": true, "source": "https://example.com"
        },
        "gpt-new": {"litellm_provider": "openai", "mode": "responses", "input_cost_per_token": 1e-06, "output_cost_per_token": 2e-06},
        "relisted": {"litellm_provider": "openai", "mode": "chat", "input_cost_per_token": 1e-06, "output_cost_per_token": 2e-06},
        "text-embedding-new": {"litellm_provider": "openai", "mode": "embedding", "input_cost_per_token": 1e-07},
        "anthropic/claude-new-1": {"litellm_provider": "anthropic", "mode": "chat"},
        "bedrock-claude": {"litellm_provider": "bedrock", "mode": "chat"}
    });
    std::fs::write(
        site.join("litellm/model_prices_and_context_window_backup.json"),
        map.to_string(),
    )
    .unwrap();
    let snapshot = dir.path().join("litellm.json");
    let old = json!({
        "litellm": {"version": "1.0.0", "date": "2025-01-01"},
        "models": {
            "claude-old": {"litellm_provider": "anthropic", "mode": "chat", "input_cost_per_token": 1.5e-05, "output_cost_per_token": 7.5e-05},
            "claude-older": {"litellm_provider": "anthropic", "mode": "chat", "retired": {"version": "0.1.0", "date": "2024-01-01"}},
            "relisted": {"litellm_provider": "openai", "mode": "chat", "retired": {"version": "0.1.0", "date": "2024-01-01"}},
            "claude-new-1": {"litellm_provider": "anthropic", "mode": "chat", "input_cost_per_token": 9e-06}
        }
    });
    std::fs::write(&snapshot, old.to_string()).unwrap();
    let out = Command::new("python3")
        .arg(format!("{REPO}/scripts/refresh-models.py"))
        .args(["--date", "2026-11-20", "--out"])
        .arg(&snapshot)
        .env("PYTHONPATH", &site)
        .env("PYTHONNOUSERSITE", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("litellm 9.9.9 (2026-11-20), 5 models (2 retired)"),
        "{stdout}"
    );
    let got: Value = serde_json::from_str(&std::fs::read_to_string(&snapshot).unwrap()).unwrap();
    assert_eq!(
        got,
        json!({
            "litellm": {"version": "9.9.9", "date": "2026-11-20"},
            "models": {
                // The package's entry replaces the snapshot's, with runner's fields only.
                "claude-new-1": {
                    "litellm_provider": "anthropic", "mode": "chat",
                    "input_cost_per_token": 5e-06, "output_cost_per_token": 2.5e-05,
                    "cache_read_input_token_cost": 5e-07, "max_input_tokens": 1_000_000,
                    "max_output_tokens": 128_000, "prompt_cache_min_tokens": 4096
                },
                // Dropped by the package: kept, marked with the last version that listed it.
                "claude-old": {
                    "litellm_provider": "anthropic", "mode": "chat",
                    "input_cost_per_token": 1.5e-05, "output_cost_per_token": 7.5e-05,
                    "retired": {"version": "1.0.0", "date": "2025-01-01"}
                },
                "claude-older": {
                    "litellm_provider": "anthropic", "mode": "chat",
                    "retired": {"version": "0.1.0", "date": "2024-01-01"}
                },
                "gpt-new": {"litellm_provider": "openai", "mode": "responses", "input_cost_per_token": 1e-06, "output_cost_per_token": 2e-06},
                // Listed again: no longer retired.
                "relisted": {"litellm_provider": "openai", "mode": "chat", "input_cost_per_token": 1e-06, "output_cost_per_token": 2e-06}
            }
        })
    );

    // No package installed: a clear error, the snapshot untouched.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let before = std::fs::read_to_string(&snapshot).unwrap();
    let out = Command::new("python3")
        .arg(format!("{REPO}/scripts/refresh-models.py"))
        .arg("--out")
        .arg(&snapshot)
        .env("PYTHONPATH", &empty)
        .env("PYTHONNOUSERSITE", "1")
        .current_dir(&empty)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no `litellm` package is installed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&snapshot).unwrap(), before);
}

/// Claude Code's agent files name models by id (`model: claude-opus-4-6`): the id resolves on the
/// provider the model map lists it under; an alias of the same name wins; an id the map does not
/// know stays an undefined alias.
#[test]
fn a_model_id_resolves_on_its_provider_and_an_alias_wins() {
    let plan = plan_json(&workflow(&["claude-opus-4-6", "gpt-4.1"], ""));
    let steps = plan["steps"].as_array().unwrap();
    assert_eq!(steps[0]["model"], "anthropic/claude-opus-4-6");
    assert_eq!(steps[0]["price"]["input"], 5.0);
    assert_eq!(steps[1]["model"], "openai/gpt-4.1");

    let aliased = workflow(&["claude-opus-4-6"], "").replace(
        "[models]\n",
        "[models]\n\"claude-opus-4-6\" = \"anthropic/claude-opus-4-1\"\n",
    );
    let plan = plan_json(&aliased);
    assert_eq!(plan["steps"][0]["model"], "anthropic/claude-opus-4-1");

    let out = Test::new()
        .file("w.toml", &workflow(&["claude-opus-9-9"], ""))
        .args(&["plan", "w.toml"])
        .run();
    assert_ne!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("model alias `claude-opus-9-9` is not defined"),
        "{}",
        out.stderr
    );
}
