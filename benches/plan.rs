//! Planning generated workflows of 500, 5,000 and 50,000 steps: load (parse + schema check),
//! resolve agents, models, tools and templates, build the graph and the waves; and printing the
//! plan as text, which must grow with the number of steps, not its square.

mod common;

use camino::Utf8PathBuf;
use runner::agent::AgentCatalog;
use runner::plan::{Plan, PlanOptions, build_plan, render};
use runner::tools::Registry;
use runner::workflow::load_workflow;

fn main() {
    // `cargo bench --bench plan -- validate-ratio`: `runner validate` of 10,000 and 50,000
    // steps, whole processes, run in turn so that both see the machine in the same state.
    if std::env::args().any(|a| a == "validate-ratio") {
        validate_ratio();
        return;
    }
    divan::main();
}

fn validate_ratio() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |steps: usize| {
        let path = dir.path().join(format!("w{steps}.toml"));
        std::fs::write(&path, workflow(steps)).expect("write workflow");
        path
    };
    let (small, large) = (write(10_000), write(50_000));
    let validate = |path: &std::path::Path| {
        common::succeeded(
            std::process::Command::new(env!("CARGO_BIN_EXE_runner"))
                .arg("validate")
                .arg(path),
        );
    };
    let pairs = common::in_turn(9, || validate(&large), || validate(&small));
    println!(
        "runner validate, 9 pairs run in turn: 10,000 steps {:.0} ms, 50,000 steps {:.0} ms (medians); ratio {:.2} (median of the pairs' ratios, {:.2}-{:.2}; budget 5.5)",
        pairs.second_ms, pairs.first_ms, pairs.ratio, pairs.low, pairs.high,
    );
}

/// A layered DAG: each step needs up to two steps of the layer before it and reads their
/// summaries, as real pipelines do.
fn workflow(steps: usize) -> String {
    let mut text = String::from(
        "name = \"generated\"\n[models]\ndefault = \"anthropic/claude-sonnet-4-5\"\nsmall = \"anthropic/claude-haiku-4-5\"\n\n[inputs.target]\ndefault = \"src\"\n",
    );
    let width = 20;
    for i in 0..steps {
        let agent = ["explore", "plan", "code"][i % 3];
        text.push_str(&format!("\n[steps.s{i}]\nagent = \"{agent}\"\n"));
        if i >= width {
            let a = i - width;
            let b = a + 1;
            text.push_str(&format!(
                "needs = [\"s{a}\", \"s{b}\"]\nprompt = \"\"\"\nContinue from {{{{ steps.s{a}.summary }}}} and {{{{ steps.s{b}.summary }}}} in {{{{ inputs.target }}}}.\n\"\"\"\n"
            ));
        } else {
            text.push_str("prompt = \"Look at {{ inputs.target }}.\"\n");
        }
    }
    text
}

#[divan::bench(args = [500, 5_000, 10_000, 50_000], sample_count = 10)]
fn plan_generated(bencher: divan::Bencher, steps: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = Utf8PathBuf::from_path_buf(dir.path().join("w.toml")).expect("utf-8 temp path");
    std::fs::write(&path, workflow(steps)).expect("write workflow");
    let options = PlanOptions {
        require_inputs: true,
        ..PlanOptions::default()
    };
    let registry = Registry::builtin();
    let catalog = AgentCatalog::load(&[], &registry);
    bencher.bench(|| {
        let loaded = load_workflow(&path).expect("loads");
        let (plan, problems) = build_plan(&loaded, &catalog, &registry, &options);
        // Code steps of one layer may overlap: warnings, never errors.
        assert!(
            problems.iter().all(|p| !p.is_error()),
            "{:?}",
            problems.iter().find(|p| p.is_error())
        );
        let plan = plan.expect("plans");
        assert_eq!(plan.steps().len(), steps);
        plan
    });
}

fn planned(steps: usize) -> Plan {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = Utf8PathBuf::from_path_buf(dir.path().join("w.toml")).expect("utf-8 temp path");
    std::fs::write(&path, workflow(steps)).expect("write workflow");
    let registry = Registry::builtin();
    let loaded = load_workflow(&path).expect("loads");
    let (plan, _) = build_plan(
        &loaded,
        &AgentCatalog::load(&[], &registry),
        &registry,
        &PlanOptions::default(),
    );
    plan.expect("plans")
}

#[divan::bench(args = [500, 5_000, 50_000], sample_count = 10)]
fn plan_text(bencher: divan::Bencher, steps: usize) {
    let plan = planned(steps);
    bencher.bench(|| render::to_text(&plan, runner::sandbox::Support::probe()).len());
}
