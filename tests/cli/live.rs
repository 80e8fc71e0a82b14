//! Opt-in: one explore step against the real API when `ANTHROPIC_API_KEY` (or `OPENAI_API_KEY`)
//! is set. Without a key (or with `RUNNER_SKIP_LIVE` set, as in this project's CI, which cannot
//! reach the APIs) the test returns at once and says it was skipped.

use crate::support::Test;

#[test]
fn live_explore_step_against_the_real_api() {
    if std::env::var_os("RUNNER_SKIP_LIVE").is_some() {
        eprintln!("skipped: RUNNER_SKIP_LIVE is set");
        return;
    }
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
        eprintln!("skipped: set ANTHROPIC_API_KEY or OPENAI_API_KEY to run the live test");
        return;
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
