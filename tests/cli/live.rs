//! Opt-in: one explore step against the real API. It needs the network and `ANTHROPIC_API_KEY`
//! (or `OPENAI_API_KEY`), so it is ignored unless asked for:
//! `cargo test --test cli live -- --ignored`.

use crate::support::Test;

#[test]
#[ignore = "calls the real model API: needs the network and ANTHROPIC_API_KEY or OPENAI_API_KEY"]
fn live_explore_step_against_the_real_api() {
    let choice = [
        ("ANTHROPIC_API_KEY", "anthropic/claude-haiku-4-5"),
        ("OPENAI_API_KEY", "openai/gpt-4.1-mini"),
    ]
    .into_iter()
    .find_map(|(var, model)| {
        std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .map(|key| (var, model, key))
    });
    let Some((var, model, key)) = choice else {
        panic!("set ANTHROPIC_API_KEY or OPENAI_API_KEY to run the live test");
    };
    let workflow = format!(
        "name = \"live\"\n[models]\ndefault = \"{model}\"\n[steps.find]\nagent = \"explore\"\nthoroughness = \"quick\"\nmax_turns = 8\nprompt = \"Which file defines the function `rotate_signing_key`? Answer with its path.\"\n"
    );
    let out = Test::new()
        .file("w.toml", &workflow)
        .file(
            "src/keys/rotation.py",
            "def rotate_signing_key(store):\n    store.rotate()\n",
        )
        .file("src/app.py", "print('hello')\n")
        .env(var, &key)
        .args(&["run", "w.toml", "--format", "json"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let summary = run["steps"]["find"]["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains("rotation.py"),
        "unexpected answer: {summary}"
    );
    assert!(!out.stdout.contains(&key) && !out.stderr.contains(&key));
}
