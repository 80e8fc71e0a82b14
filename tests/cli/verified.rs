//! Verified steps: checks fed back to the agent, command steps in the DAG, and `for_each`
//! fan-out, against the fake model API with real processes and real git.

use serde_json::{Value, json};

use crate::fake::{Fake, anthropic_text, anthropic_tool, prompt_of};
use crate::support::{Output, Test, init_repo};

const KEY: &str = "sk-test-secret-77c1";
const HEAD: &str = "name = \"v\"\n[models]\ndefault = \"anthropic/claude-test\"\n";

async fn run(test: Test, fake: &Fake) -> (Output, Test) {
    test.anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await
}

fn record(out: &Output) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("run.json on stdout ({e}):\n{}", out.transcript()))
}

/// The text of the last user message of a request: what the model was told last.
fn last_user_text(body: &Value) -> String {
    let messages = body["messages"].as_array().unwrap();
    let last = messages.iter().rev().find(|m| m["role"] == "user").unwrap();
    last["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn write(path: &str, content: &str) -> wiremock::ResponseTemplate {
    anthropic_tool(
        &format!("tu_{content}"),
        "write_file",
        json!({"path": path, "content": content}),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_check_that_fails_twice_goes_back_to_the_model_until_it_passes() {
    let fake = Fake::anthropic(vec![
        write("attempt.txt", "1"),
        anthropic_text("done"),
        write("attempt.txt", "2"),
        anthropic_text("done again"),
        write("attempt.txt", "3"),
        anthropic_text("done at last"),
        anthropic_text("read it"),
    ])
    .await;
    let workflow = format!(
        "{HEAD}[steps.s]\nagent = \"code\"\nprompt = \"Fix it\"\nchecks = [\"sh check.sh\"]\n\n[steps.after]\nagent = \"explore\"\nneeds = [\"s\"]\nprompt = \"CHECKS{{% for c in steps.s.checks %}} {{{{ c.command }}}}={{{{ c.passed }}}}{{% endfor %}}\"\n"
    );
    let test = Test::new().file("w.toml", &workflow).file(
        "check.sh",
        "echo \"attempt=$(cat attempt.txt)\"\necho oops >&2\ntest \"$(cat attempt.txt)\" = 3\n",
    );
    let (out, _test) = run(test, &fake).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = record(&out);
    let step = &run["steps"]["s"];
    assert_eq!(step["status"], "succeeded");
    assert_eq!(step["summary"], "done at last");
    let checks = step["checks"].as_array().unwrap();
    let rounds: Vec<(u64, bool, Value)> = checks
        .iter()
        .map(|c| {
            (
                c["round"].as_u64().unwrap(),
                c["passed"].as_bool().unwrap(),
                c["exit_code"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rounds,
        [
            (1, false, json!(1)),
            (2, false, json!(1)),
            (3, true, json!(0))
        ]
    );
    assert!(checks.iter().all(|c| c["command"] == "sh check.sh"));
    // Each failure reached the model with its output, stdout and stderr in order.
    let bodies = fake.bodies().await;
    assert_eq!(bodies.len(), 7);
    // Templates read the last round's results.
    let prompt = prompt_of(&bodies[6]);
    assert!(prompt.contains("CHECKS sh check.sh=True"), "{prompt}");
    let told = last_user_text(&bodies[2]);
    assert!(told.contains("round 1 of 3"), "{told}");
    assert!(told.contains("`sh check.sh` exited 1"), "{told}");
    assert!(told.contains("attempt=1\noops"), "{told}");
    let told = last_user_text(&bodies[4]);
    assert!(
        told.contains("round 2 of 3") && told.contains("attempt=2"),
        "{told}"
    );
    // Checks count against the step's turns.
    assert_eq!(step["turns"], 6);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_check_that_never_passes_fails_the_step_naming_the_command() {
    let fake = Fake::anthropic(vec![anthropic_text("done"), anthropic_text("still done")]).await;
    let workflow = format!(
        "{HEAD}[steps.s]\nagent = \"explore\"\nprompt = \"Look\"\nchecks = [\"true\", \"sh check.sh\"]\ncheck_retries = 1\n\n[steps.after]\nagent = \"explore\"\nneeds = [\"s\"]\nprompt = \"after\"\n"
    );
    let test = Test::new()
        .file("w.toml", &workflow)
        .file("check.sh", "echo 'test login ... FAILED'\nexit 3\n");
    let (out, _test) = run(test, &fake).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run = record(&out);
    let step = &run["steps"]["s"];
    assert_eq!(step["status"], "failed");
    assert_eq!(
        step["error"],
        "checks failed: sh check.sh exited 3:\ntest login ... FAILED"
    );
    // Two rounds of two checks; the agent heard of the failure once (check_retries = 1).
    let runs: Vec<(u64, &str, bool)> = step["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["round"].as_u64().unwrap(),
                c["command"].as_str().unwrap(),
                c["passed"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        runs,
        [
            (1, "true", true),
            (1, "sh check.sh", false),
            (2, "true", true),
            (2, "sh check.sh", false)
        ]
    );
    assert_eq!(fake.requests().await.len(), 2);
    assert_eq!(run["steps"]["after"]["status"], "skipped");
    assert!(
        out.stderr
            .contains("check `sh check.sh` failed (exit 3), round 2"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_check_in_a_worktree_step_sees_the_steps_changes() {
    let fake = Fake::anthropic(vec![write("new.txt", "made"), anthropic_text("wrote it")]).await;
    let workflow = format!(
        "{HEAD}[steps.s]\nagent = \"code\"\nprompt = \"Write\"\nisolation = \"worktree\"\nchecks = [\"grep -q made new.txt\"]\ncheck_retries = 0\n"
    );
    let test = Test::new().file("w.toml", &workflow);
    init_repo(test.path());
    let (out, test) = run(test, &fake).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = record(&out);
    let step = &run["steps"]["s"];
    assert_eq!(step["checks"][0]["passed"], true);
    assert!(step["diff"].as_str().unwrap().contains("+made"));
    // The check ran in the worktree: the checkout itself never had the file.
    assert!(!test.path().join("new.txt").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_steps_stdout_flows_into_a_later_prompt() {
    let fake = Fake::anthropic(vec![anthropic_text("counted")]).await;
    let workflow = format!(
        r#"{HEAD}[steps.count]
run = "printf 'files: %s' \"$(ls src | wc -l)\""

[steps.sizes]
run = "printf '{{\"n\": %s}}' \"$(ls src | wc -l)\""
output_schema = {{ type = "object", properties = {{ n = {{ type = "integer" }} }}, required = ["n"] }}

[steps.report]
agent = "explore"
needs = ["count", "sizes"]
prompt = "MARK {{{{ steps.count.summary }}}} and n={{{{ steps.sizes.output.n }}}}"
"#
    );
    let test = Test::new()
        .file("w.toml", &workflow)
        .file("src/a.rs", "")
        .file("src/b.rs", "");
    let (out, _test) = run(test, &fake).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = record(&out);
    assert_eq!(run["steps"]["count"]["summary"], "files: 2");
    assert_eq!(run["steps"]["count"]["model"], "-");
    assert_eq!(run["steps"]["sizes"]["output"], json!({"n": 2}));
    let body = fake.body_for("MARK").await;
    assert!(
        prompt_of(&body).contains("MARK files: 2 and n=2"),
        "{}",
        prompt_of(&body)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_command_fails_its_step_with_stderr_and_skips_its_dependents() {
    let fake = Fake::anthropic(vec![]).await;
    let workflow = format!(
        "{HEAD}[steps.test]\nrun = \"echo running; echo 'error: 2 tests failed' >&2; exit 3\"\n\n[steps.next]\nagent = \"explore\"\nneeds = [\"test\"]\nprompt = \"x\"\n"
    );
    let (out, _test) = run(Test::new().file("w.toml", &workflow), &fake).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run = record(&out);
    assert_eq!(run["steps"]["test"]["status"], "failed");
    assert_eq!(
        run["steps"]["test"]["error"],
        "the command exited 3:\nerror: 2 tests failed"
    );
    assert_eq!(run["steps"]["test"]["summary"], "running\n");
    assert_eq!(run["steps"]["next"]["status"], "skipped");
    assert!(fake.requests().await.is_empty());
}

/// A summary a hostile model wrote reaches a command through `env` as a value: no command
/// substitution, no backticks, no variable expansion.
#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_summary_passed_through_env_runs_nothing() {
    // Planted in `out/`, which the command may write: a file there would prove it ran.
    let hostile = "$(touch out/pwned) `touch out/pwned2` ${HOME} ; touch out/pwned3";
    let fake = Fake::anthropic(vec![anthropic_text(hostile)]).await;
    let workflow = format!(
        "{HEAD}[steps.a]\nagent = \"explore\"\nprompt = \"say\"\n\n[steps.b]\nneeds = [\"a\"]\nrun = 'printf \"%s\" \"$SUMMARY\" > out/got.txt'\nwrites = true\nenv = {{ SUMMARY = \"{{{{ steps.a.summary }}}}\" }}\n"
    );
    let test = Test::new().file("w.toml", &workflow).file("out/.keep", "");
    let (out, test) = run(test, &fake).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let got = std::fs::read_to_string(test.path().join("out/got.txt")).unwrap();
    assert_eq!(got, hostile);
    for planted in ["pwned", "pwned2", "pwned3"] {
        assert!(
            !test.path().join("out").join(planted).exists(),
            "{planted} was created"
        );
    }
}

/// A command step is read-only unless it says `writes = true`.
#[tokio::test(flavor = "multi_thread")]
async fn a_command_step_writes_only_when_it_says_so() {
    let fake = Fake::anthropic(vec![]).await;
    let workflow = format!(
        "{HEAD}[steps.w]\nrun = \"echo x > out.txt\"\n\n[steps.ok]\nrun = \"cat w.toml | head -1\"\n"
    );
    let (out, test) = run(Test::new().file("w.toml", &workflow), &fake).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run = record(&out);
    assert_eq!(run["steps"]["w"]["status"], "failed");
    assert!(
        run["steps"]["w"]["error"]
            .as_str()
            .unwrap()
            .contains("exited 1"),
        "{}",
        run["steps"]["w"]
    );
    assert!(!test.path().join("out.txt").exists());
    assert_eq!(run["steps"]["ok"]["summary"], "name = \"v\"\n");
}

fn validate(workflow: &str) -> Output {
    Test::new()
        .file("w.toml", workflow)
        .args(&["validate", "w.toml"])
        .run()
}

#[test]
fn validation_refuses_run_with_agent_and_templates_in_shell_text() {
    let out = validate(&format!(
        "{HEAD}[steps.a]\nagent = \"explore\"\nrun = \"make\"\n\n[steps.b]\nrun = \"grep {{{{ inputs.q }}}} src\"\n\n[steps.c]\nagent = \"explore\"\nprompt = \"x\"\nchecks = [\"test {{{{ workflow.name }}}}\"]\n\n[inputs.q]\ndefault = \"x\"\n"
    ));
    assert_eq!(out.status, 2, "{}", out.transcript());
    let err = &out.stderr;
    assert!(
        err.contains("× step `a` has both `run` and `agent`"),
        "{err}"
    );
    assert!(
        err.contains("w.toml:5:1"),
        "the error points at `agent`: {err}"
    );
    assert!(
        err.contains("× step `b`: `run` cannot hold a template: a value spliced into shell text"),
        "{err}"
    );
    assert!(
        err.contains("w.toml:9:13"),
        "the error points at `{{{{`: {err}"
    );
    assert!(err.contains("pass the value through `env`"), "{err}");
    assert!(
        err.contains("× step `c`: `checks` cannot hold a template"),
        "{err}"
    );
}

#[test]
fn plan_shows_checks_and_command_steps() {
    let workflow = format!(
        "{HEAD}[steps.test]\nrun = \"cargo test\"\nnetwork = true\n\n[steps.fix]\nagent = \"code\"\nneeds = [\"test\"]\nprompt = \"fix {{{{ steps.test.summary }}}}\"\nchecks = [\"cargo test\", {{ command = \"cargo clippy\", timeout = \"20m\" }}]\ncheck_retries = 3\n"
    );
    let text = Test::new()
        .file("w.toml", &workflow)
        .args(&["plan", "w.toml"])
        .run();
    assert_eq!(text.status, 0, "{}", text.transcript());
    assert!(
        text.stdout.contains("test  [command] -\n"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("    run      cargo test\n"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("    sandbox  read-only, network\n"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains(
            "    checks   cargo test (10m), cargo clippy (20m); a failure goes back to the agent up to 3 times\n"
        ),
        "{}",
        text.stdout
    );
    let json = Test::new()
        .file("w.toml", &workflow)
        .args(&["plan", "w.toml", "--format", "json"])
        .run();
    let plan: Value = serde_json::from_str(&json.stdout).unwrap();
    let steps = plan["steps"].as_array().unwrap();
    let test = steps.iter().find(|s| s["id"] == "test").unwrap();
    assert_eq!(test["run"], "cargo test");
    assert_eq!(test["model"], Value::Null);
    let fix = steps.iter().find(|s| s["id"] == "fix").unwrap();
    assert_eq!(
        fix["checks"],
        json!([{"command": "cargo test", "timeout_secs": 600}, {"command": "cargo clippy", "timeout_secs": 1200}])
    );
    assert_eq!(fix["check_retries"], 3);
}

/// The run record a run left in the state directory (for runs whose stdout is JSONL).
fn saved_record(test: &Test) -> Value {
    let runs = test.path().join(".runner/runs");
    let mut ids: Vec<_> = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    ids.sort();
    let last = ids.last().expect("a run");
    serde_json::from_str(&std::fs::read_to_string(runs.join(last).join("run.json")).unwrap())
        .unwrap()
}

const FIND_SCHEMA: &str = "output_schema = { type = \"object\", properties = { dirs = { type = \"array\", items = { type = \"object\", properties = { name = { type = \"string\" } }, required = [\"name\"] } } }, required = [\"dirs\"] }\n";

/// A command step printing `dirs` as JSON, a fan-out over them and a step reading them all.
fn fan_out_workflow(dirs: &str, look: &str) -> String {
    format!(
        "name = \"v\"\nmax_parallel = 2\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.find]\nrun = '''echo '{{\"dirs\": {dirs}}}' '''\n{FIND_SCHEMA}\n[steps.look]\nneeds = [\"find\"]\nfor_each = \"steps.find.output.dirs\"\nfor_each_key = \"name\"\n{look}\n[steps.sum]\nagent = \"explore\"\nneeds = [\"look\"]\nprompt = \"SUM {{{{ steps.look | length }}}}:{{% for r in steps.look %}} {{{{ r.item.name }}}}={{{{ r.summary }}}}{{% endfor %}}\"\n"
    )
}

/// Two instances meet through two FIFOs in their bash commands: each blocks until the other is
/// running, so both can only finish if they overlap (the bash timeout only ends a broken run).
#[tokio::test(flavor = "multi_thread")]
async fn for_each_runs_instances_in_parallel_under_max_parallel_and_downstream_reads_them_all() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-left",
            vec![
                anthropic_tool(
                    "l1",
                    "bash",
                    json!({"command": "echo left > p1; read x < p2; echo got $x", "timeout": 20}),
                ),
                anthropic_text("left done"),
            ],
        ),
        (
            "MARK-right",
            vec![
                anthropic_tool(
                    "r1",
                    "bash",
                    json!({"command": "read y < p1; echo right > p2; echo got $y", "timeout": 20}),
                ),
                anthropic_text("right done"),
            ],
        ),
        ("MARK-solo", vec![anthropic_text("solo done")]),
        ("SUM", vec![anthropic_text("summed")]),
    ])
    .await;
    let workflow = fan_out_workflow(
        r#"[{"name": "left"}, {"name": "right"}, {"name": "solo"}]"#,
        "agent = \"code\"\nprompt = \"MARK-{{ item.name }} number {{ item_index }}\"\n",
    );
    let test = Test::new().file("w.toml", &workflow);
    for fifo in ["p1", "p2"] {
        let made = std::process::Command::new("mkfifo")
            .arg(test.path().join(fifo))
            .status()
            .unwrap();
        assert!(made.success());
    }
    let (out, test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "jsonl"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = saved_record(&test);
    let look = &run["steps"]["look"];
    assert_eq!(look["status"], "succeeded");
    let instances = look["instances"].as_array().unwrap();
    let ids: Vec<&str> = instances
        .iter()
        .map(|i| i["instance"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["look[left]", "look[right]", "look[solo]"]);
    assert_eq!(instances[1]["item"], json!({"name": "right"}));
    assert_eq!(instances[0]["summary"], "left done");
    assert_eq!(look["turns"], 5, "the step counts its instances' turns");
    // Each instance had its own conversation and transcript.
    let run_dir = test
        .path()
        .join(".runner/runs")
        .join(run["run_id"].as_str().unwrap());
    for id in &ids {
        let transcript =
            std::fs::read_to_string(run_dir.join("steps").join(id).join("transcript.jsonl"))
                .unwrap();
        let name = id.trim_start_matches("look[").trim_end_matches(']');
        assert!(transcript.contains(&format!("MARK-{name} number")), "{id}");
    }
    // The three instances share one agent: its system prompt and tools are written once for the
    // run (the `sum` step's explore agent has its own).
    let sessions = std::fs::read_dir(run_dir.join("sessions")).unwrap().count();
    assert_eq!(sessions, 2);
    let results: Vec<String> = fake
        .bodies()
        .await
        .iter()
        .flat_map(crate::fake::anthropic_results)
        .map(|(_, text, _)| text)
        .collect();
    assert!(
        results.iter().any(|t| t.contains("got right")),
        "{results:?}"
    );
    assert!(
        results.iter().any(|t| t.contains("got left")),
        "{results:?}"
    );
    // Never more than max_parallel instances at once, read off the event stream.
    let (mut running, mut most) = (0, 0);
    for line in out.stdout.lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        if !event["step"]
            .as_str()
            .unwrap_or_default()
            .starts_with("look[")
        {
            continue;
        }
        match event["event"].as_str().unwrap() {
            "step_started" => running += 1,
            "step_finished" => running -= 1,
            _ => {}
        }
        most = most.max(running);
    }
    assert_eq!(most, 2, "{}", out.stdout);
    let sum = fake.body_for("SUM").await;
    assert!(
        prompt_of(&sum).contains("SUM 3: left=left done right=right done solo=solo done"),
        "{}",
        prompt_of(&sum)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_list_gives_a_succeeded_step_with_no_instances() {
    let fake = Fake::anthropic_routed(vec![("SUM", vec![anthropic_text("nothing")])]).await;
    let workflow = fan_out_workflow(
        "[]",
        "agent = \"explore\"\nprompt = \"MARK-{{ item.name }}\"\n",
    );
    let (out, _test) = run(Test::new().file("w.toml", &workflow), &fake).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = record(&out);
    let look = &run["steps"]["look"];
    assert_eq!(look["status"], "succeeded");
    assert_eq!(look["summary"], "0 instances: 0 succeeded");
    assert!(look.get("instances").is_none());
    assert!(prompt_of(&fake.body_for("SUM").await).contains("SUM 0:"));
}

#[tokio::test(flavor = "multi_thread")]
async fn more_items_than_max_instances_fails_the_step_before_any_runs() {
    let fake = Fake::anthropic(vec![]).await;
    let workflow = fan_out_workflow(
        r#"[{"name": "a"}, {"name": "b"}, {"name": "c"}, {"name": "d"}]"#,
        "agent = \"explore\"\nprompt = \"MARK-{{ item.name }}\"\nmax_instances = 3\n",
    );
    let (out, _test) = run(Test::new().file("w.toml", &workflow), &fake).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run = record(&out);
    assert_eq!(run["steps"]["look"]["status"], "failed");
    assert_eq!(
        run["steps"]["look"]["error"],
        "`for_each` gave 4 items, more than `max_instances` (3); raise `max_instances` or narrow the list"
    );
    assert_eq!(run["steps"]["sum"]["status"], "skipped");
    assert!(fake.requests().await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_reuses_finished_instances_and_only_reruns_one() {
    let fake = Fake::anthropic_routed(vec![
        ("MARK-a", vec![anthropic_text("a done")]),
        (
            "MARK-b",
            vec![crate::fake::bad_request("bad"), anthropic_text("b fixed")],
        ),
        (
            "MARK-c",
            vec![anthropic_text("c done"), anthropic_text("c again")],
        ),
        (
            "SUM",
            vec![anthropic_text("summed"), anthropic_text("summed again")],
        ),
    ])
    .await;
    let workflow = fan_out_workflow(
        r#"[{"name": "a"}, {"name": "b"}, {"name": "c"}]"#,
        "agent = \"explore\"\nprompt = \"MARK-{{ item.name }}\"\n",
    );
    let (out, test) = run(Test::new().file("w.toml", &workflow), &fake).await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let first = record(&out);
    assert_eq!(first["steps"]["look"]["status"], "failed");
    assert_eq!(
        first["steps"]["look"]["instances"][1]["status"], "failed",
        "{}",
        first["steps"]["look"]
    );
    assert_eq!(first["steps"]["sum"]["status"], "skipped");

    let (out, test) = test
        .clear_args()
        .args(&["run", "w.toml", "--format", "json", "--resume", "latest"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let second = record(&out);
    let instances = second["steps"]["look"]["instances"].as_array().unwrap();
    let first_id = first["run_id"].as_str().unwrap();
    assert_eq!(instances[0]["reused_from"], first_id);
    assert_eq!(instances[1]["summary"], "b fixed");
    assert!(instances[1].get("reused_from").is_none());
    assert_eq!(instances[2]["reused_from"], first_id);
    assert_eq!(fake.count("MARK-a").await, 1);
    assert_eq!(fake.count("MARK-c").await, 1);

    // One instance again, the others taken from the run before.
    let (out, _test) = test
        .clear_args()
        .args(&[
            "run", "w.toml", "--format", "json", "--resume", "latest", "--only", "look[c]",
        ])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let third = record(&out);
    let instances = third["steps"]["look"]["instances"].as_array().unwrap();
    assert_eq!(instances[2]["summary"], "c again");
    assert_eq!(instances[1]["summary"], "b fixed");
    assert_eq!(fake.count("MARK-c").await, 2);
    assert_eq!(fake.count("MARK-b").await, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn each_instance_of_a_worktree_step_gets_its_own_branch() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-x",
            vec![write("x.txt", "from x"), anthropic_text("x")],
        ),
        (
            "MARK-y",
            vec![write("y.txt", "from y"), anthropic_text("y")],
        ),
    ])
    .await;
    let workflow = format!(
        "{HEAD}[steps.w]\nagent = \"code\"\nfor_each = [\"x\", \"y\"]\nprompt = \"MARK-{{{{ item }}}}\"\nisolation = \"worktree\"\n"
    );
    let test = Test::new().file("w.toml", &workflow);
    init_repo(test.path());
    let (out, test) = run(test, &fake).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = record(&out);
    let id = run["run_id"].as_str().unwrap();
    let instances = run["steps"]["w"]["instances"].as_array().unwrap();
    assert_eq!(instances[0]["branch"], format!("runner/{id}/w.0"));
    assert_eq!(instances[1]["branch"], format!("runner/{id}/w.1"));
    let files = crate::support::git(
        test.path(),
        &[
            "show",
            "--name-only",
            "--format=",
            &format!("runner/{id}/w.1"),
        ],
    );
    assert_eq!(files.trim(), "y.txt");
    assert!(
        out.stderr.contains("  w[0]"),
        "the table lists instances: {}",
        out.stderr
    );
}

#[test]
fn validation_types_for_each_and_item() {
    let find = "[steps.find]\nrun = \"true\"\noutput_schema = { type = \"object\", properties = { name = { type = \"string\" }, dirs = { type = \"array\", items = { type = \"object\", properties = { field = { type = \"string\" } } } } }, additionalProperties = false }\n";
    let out = validate(&format!(
        "{HEAD}{find}\n[steps.one]\nagent = \"explore\"\nneeds = [\"find\"]\nfor_each = \"steps.find.output.name\"\nprompt = \"x\"\n\n[steps.two]\nagent = \"explore\"\nneeds = [\"find\"]\nfor_each = \"steps.find.output.dirs\"\nprompt = \"look at {{{{ item.fieled }}}}\"\n\n[steps.three]\nagent = \"explore\"\nneeds = [\"two\"]\nprompt = \"{{{{ steps.two.summary }}}} {{{{ item }}}}\"\n"
    ));
    assert_eq!(out.status, 2, "{}", out.transcript());
    let err = &out.stderr;
    assert!(
        err.contains(
            "× step `one`: `for_each` must be a list, but `steps.find.output.name` is a string"
        ),
        "{err}"
    );
    assert!(err.contains("steps.find.output.name | split"), "{err}");
    assert!(
        err.contains(
            "step `two` reads `item.fieled`, but the schema of its `for_each` items gives"
        ),
        "{err}"
    );
    assert!(err.contains("did you mean `field`?"), "{err}");
    assert!(
        err.contains("step `three` reads `steps.two.summary`, but `two` runs once per item"),
        "{err}"
    );
    assert!(
        err.contains("step `three` reads `item`, but only a step with `for_each` has `item`"),
        "{err}"
    );
}

#[test]
fn plan_shows_the_fan_out_and_known_instances() {
    let workflow = format!(
        "{HEAD}[inputs.dirs]\ndefault = \"src,lib\"\n\n[steps.each]\nagent = \"explore\"\nfor_each = \"inputs.dirs | split(',')\"\nprompt = \"look in {{{{ item }}}}\"\n\n[steps.literal]\nagent = \"explore\"\nfor_each = [{{ dir = \"a b\" }}, {{ dir = \"c\" }}]\nfor_each_key = \"dir\"\nprompt = \"look in {{{{ item.dir }}}}\"\n"
    );
    let out = Test::new()
        .file("w.toml", &workflow)
        .args(&["plan", "w.toml"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stdout.contains(
            "    for each inputs.dirs | split(',') (at most 256 instances)\n    items    each[0] = \"src\", each[1] = \"lib\"\n"
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(
            "    items    literal[a_b] = {\"dir\":\"a b\"}, literal[c] = {\"dir\":\"c\"}\n"
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("prompt   look in <item>"),
        "{}",
        out.stdout
    );
    let json = Test::new()
        .file("w.toml", &workflow)
        .args(&["plan", "w.toml", "--format", "json"])
        .run();
    let plan: Value = serde_json::from_str(&json.stdout).unwrap();
    let each = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "each")
        .unwrap()
        .clone();
    assert_eq!(
        each["for_each"],
        json!({"expression": "inputs.dirs | split(',')", "key": null, "max_instances": 256,
               "instances": [{"id": "each[0]", "item": "src"}, {"id": "each[1]", "item": "lib"}]})
    );
}

/// A matrix of jobs, one instance each, shares a run id; their state directories copied into
/// one give the next job every instance, as on GitHub Actions.
#[test]
fn instances_run_by_separate_jobs_merge_for_the_steps_after() {
    let workflow = format!(
        "{HEAD}[steps.each]\nfor_each = [\"x\", \"y\"]\nrun = 'printf \"got %s\" \"$ITEM\"'\nenv = {{ ITEM = \"{{{{ item }}}}\" }}\n\n[steps.next]\nneeds = [\"each\"]\nrun = 'printf \"%s\" \"$ALL\"'\nenv = {{ ALL = \"{{% for r in steps.each %}}{{{{ r.summary }}}};{{% endfor %}}\" }}\n"
    );
    let test = Test::new().file("w.toml", &workflow);
    let job = |state: &str, only: &str| {
        Test::new().file("w.toml", &workflow).clear_args().args(&[
            "run",
            "w.toml",
            "--only",
            only,
            "--run-id",
            "777",
            "--state-dir",
            state,
            "--format",
            "json",
        ])
    };
    let root = test.path().to_owned();
    for (state, only) in [("a", "each[0]"), ("b", "each[1]")] {
        let dir = root.join(state);
        let out = job(dir.to_str().unwrap(), only).run();
        assert_eq!(out.status, 0, "{only}: {}", out.transcript());
        let run = record(&out);
        // This job decided its instance only.
        let instances = run["steps"]["each"]["instances"].as_array().unwrap();
        let ran: Vec<&str> = instances
            .iter()
            .filter(|i| i["status"] == "succeeded")
            .map(|i| i["instance"].as_str().unwrap())
            .collect();
        assert_eq!(ran, [only]);
        // Like download-artifact with merge-multiple: every job's files in one directory.
        let copied = std::process::Command::new("cp")
            .arg("-r")
            .arg(dir.join("runs"))
            .arg(root.join("merged"))
            .status()
            .unwrap();
        assert!(copied.success());
        if state == "a" {
            std::fs::rename(root.join("merged"), root.join("merged-a")).unwrap();
        }
    }
    // Fold b's copy into a's, files of b winning where both have one (run.json).
    let merged = root.join("merged-a");
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(format!("{}/.", root.join("merged").display()))
        .arg(&merged)
        .status()
        .unwrap();
    assert!(status.success());
    let state = root.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::rename(&merged, state.join("runs")).unwrap();
    let out = job(state.to_str().unwrap(), "next").run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = record(&out);
    assert_eq!(run["steps"]["each"]["status"], "succeeded");
    assert_eq!(run["steps"]["next"]["summary"], "got x;got y;");
}
