//! Delegation through the `task` tool (docs/src/delegation.md), through the binary against fake model
//! APIs: what a subagent sees, which tools it gets, how several run, and what is recorded.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fake::{
    Fake, anthropic_results, anthropic_text, anthropic_tool, anthropic_tools, openai_text,
    openai_tools, prompt_of,
};
use crate::support::{Output, Test};

const KEY: &str = "sk-test-key-0000";
const MODELS: &str =
    "[models]\ndefault = \"anthropic/claude-test\"\nsmall = \"anthropic/claude-small\"\n";

fn against(test: Test, fake: &Fake, args: &[&str]) -> Test {
    test.anthropic_api(&fake.uri(), KEY).args(args)
}

fn json_of(out: &Output) -> Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", out.transcript()))
}

/// Runs a workflow of one `code` step, `lead` (with `extra` keys), against `fake`.
async fn run_lead(fake: &Fake, extra: &str, prompt: &str, args: &[&str]) -> (Output, Test) {
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.lead]\nagent = \"code\"\n{extra}prompt = \"{prompt}\"\n"
    );
    let mut all = vec!["run", "w.toml", "--format", "json"];
    all.extend(args);
    against(Test::new().file("w.toml", &workflow), fake, &all)
        .run_async()
        .await
}

fn task(description: &str, prompt: &str, agent: &str) -> Value {
    json!({"description": description, "prompt": prompt, "subagent_type": agent})
}

/// The tool names a request offered (Anthropic or OpenAI).
fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            t["name"]
                .as_str()
                .or(t["function"]["name"].as_str())
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// The result a request carries back for the tool call `id`.
fn result_for(body: &Value, id: &str) -> (String, bool) {
    anthropic_results(body)
        .into_iter()
        .find(|(call, _, _)| call == id)
        .map(|(_, text, error)| (text, error))
        .unwrap_or_else(|| panic!("no result for {id} in {body}"))
}

/// Every request whose first message holds `marker`, in order.
async fn bodies_for(fake: &Fake, marker: &str) -> Vec<Value> {
    fake.bodies()
        .await
        .into_iter()
        .filter(|b| prompt_of(b).contains(marker))
        .collect()
}

fn run_dir(test: &Test, run: &Value) -> std::path::PathBuf {
    test.path()
        .join(".runner/runs")
        .join(run["run_id"].as_str().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subagent_sees_only_its_prompt_and_is_recorded() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-lead",
            vec![
                anthropic_tools(&[(
                    "t1",
                    "task",
                    json!({
                        "description": "find login",
                        "prompt": "MARK-sub where is login?",
                        "subagent_type": "explore",
                        "model": "small",
                        "context_files": [{"path": "src/a.rs", "start_line": 3, "end_line": 4}]
                    }),
                )]),
                anthropic_text("Login is in src/auth.rs."),
            ],
        ),
        (
            "MARK-sub",
            vec![
                anthropic_tool("s1", "read_file", json!({"path": "src/a.rs"})),
                anthropic_text("login is in src/auth.rs"),
            ],
        ),
    ])
    .await;
    let lines: String = (1..=8).map(|n| format!("line {n}\n")).collect();
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.lead]\nagent = \"code\"\nprompt = \"MARK-lead find login\"\n"
    );
    let test = Test::new()
        .file("w.toml", &workflow)
        .file("src/a.rs", &lines);
    let (out, test) = against(test, &fake, &["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = json_of(&out);
    let step = &run["steps"]["lead"];
    assert_eq!(step["summary"], "Login is in src/auth.rs.");

    // Isolation: the subagent's first request holds its own prompt and nothing of the step's.
    let sub = &bodies_for(&fake, "MARK-sub").await[0];
    assert_eq!(sub["messages"].as_array().unwrap().len(), 1);
    let first = prompt_of(sub);
    assert!(first.starts_with("MARK-sub where is login?"), "{first}");
    assert!(!first.contains("MARK-lead"));
    // Context files: exactly the asked lines, numbered as read_file shows them.
    assert!(first.contains("<context_file path=\"src/a.rs\" lines=\"3-4\">"));
    assert!(
        first.contains("line 3") && first.contains("line 4"),
        "{first}"
    );
    assert!(
        !first.contains("line 2") && !first.contains("line 5"),
        "{first}"
    );
    // Its model came from the call; its system prompt is explore's, not the step's.
    assert_eq!(sub["model"], "claude-small");
    let lead = &bodies_for(&fake, "MARK-lead").await[0];
    assert_ne!(sub["system"], lead["system"]);
    assert!(
        sub["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("read-only")
    );
    // explore's tools; no `task` at the default depth of 1.
    assert_eq!(
        tool_names(sub),
        ["bash", "glob", "grep", "list_dir", "read_file"]
    );
    assert!(tool_names(lead).contains(&"task".to_owned()));

    // The step gets the final text and one line of facts.
    let after = &bodies_for(&fake, "MARK-lead").await[1];
    let (text, is_error) = result_for(after, "t1");
    assert!(!is_error);
    assert!(
        text.starts_with("login is in src/auth.rs\n\n[agent explore#1 · 1 tool call · "),
        "{text}"
    );

    // Records: the subagent, and the step's tokens including its own.
    let subagents = step["subagents"].as_array().unwrap();
    assert_eq!(subagents.len(), 1);
    let record = &subagents[0];
    assert_eq!(record["id"], "explore#1");
    assert_eq!(record["agent"], "explore");
    assert_eq!(record["model"], "anthropic/claude-small");
    assert_eq!(record["status"], "succeeded");
    assert_eq!(
        (record["turns"].as_u64(), record["tool_calls"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(
        (
            record["input_tokens"].as_u64(),
            record["output_tokens"].as_u64()
        ),
        (Some(110), Some(50))
    );
    assert_eq!(
        (
            step["input_tokens"].as_u64(),
            step["output_tokens"].as_u64()
        ),
        (Some(220), Some(100))
    );
    // The step's own counts stay its own.
    assert_eq!(
        (step["turns"].as_u64(), step["tool_calls"].as_u64()),
        (Some(2), Some(1))
    );

    // A transcript per subagent; its start and end are in the step's.
    let dir = run_dir(&test, &run);
    let own = std::fs::read_to_string(dir.join("steps/lead/subagents/explore#1/transcript.jsonl"))
        .unwrap();
    assert!(own.contains("MARK-sub where is login?") && own.contains("\"read_file\""));
    assert!(own.lines().all(|l| l.contains("\"agent\":\"explore#1\"")));
    let steps = std::fs::read_to_string(dir.join("steps/lead/transcript.jsonl")).unwrap();
    assert!(steps.contains("\"event\":\"subagent_started\""));
    assert!(steps.contains("\"event\":\"subagent_finished\""));
    assert!(!steps.contains("\"agent\":\"explore#1\""));

    // Progress nests the subagent under its step.
    assert!(
        out.stderr
            .contains("[code] lead › explore#1 started: find login"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("[code] lead › explore#1 done (1 tool, "),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_openai_compatible_subagent_is_isolated_too() {
    let fake = Fake::openai_routed(vec![
        (
            "MARK-lead",
            vec![
                openai_tools(&[("c1", "task", task("scan", "MARK-sub list files", "explore"))]),
                openai_text("The repo has two files."),
            ],
        ),
        ("MARK-sub", vec![openai_text("a.rs and b.rs")]),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n[providers.local]\nkind = \"openai\"\nbase_url = \"{}/v1\"\napi_key_env = \"LOCAL_KEY\"\n[models]\ndefault = \"local/qwen\"\n[steps.lead]\nagent = \"code\"\nprompt = \"MARK-lead count files\"\n",
        fake.uri()
    );
    let (out, _test) = Test::new()
        .file("w.toml", &workflow)
        .env("LOCAL_KEY", KEY)
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = json_of(&out);
    assert_eq!(run["steps"]["lead"]["summary"], "The repo has two files.");
    assert_eq!(run["steps"]["lead"]["subagents"][0]["model"], "local/qwen");
    let bodies = fake.bodies().await;
    let user = |b: &Value| {
        b["messages"][1]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let sub = bodies
        .iter()
        .find(|b| user(b).contains("MARK-sub"))
        .unwrap();
    // System prompt and the subagent's prompt, nothing else.
    let messages = sub["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    assert!(!user(sub).contains("MARK-lead"));
    assert!(!tool_names(sub).contains(&"task".to_owned()));
    let last = bodies
        .iter()
        .filter(|b| user(b).contains("MARK-lead"))
        .nth(1)
        .unwrap();
    let tool = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert_eq!(tool["tool_call_id"], "c1");
    assert!(
        tool["content"]
            .as_str()
            .unwrap()
            .starts_with("a.rs and b.rs\n\n[agent explore#1 · 0 tool calls · ")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_step_cannot_spawn_a_writer_and_bad_calls_are_results() {
    let bad = wiremock::ResponseTemplate::new(400).set_body_json(
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}),
    );
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-lead",
            vec![
                anthropic_tools(&[
                    ("t1", "task", task("try writing", "MARK-writer add a file", "code")),
                    ("t2", "task", task("no such", "MARK-x", "nope")),
                    (
                        "t3",
                        "task",
                        json!({"description": "again", "prompt": "more", "subagent_type": "explore", "resume": "explore#9"}),
                    ),
                    (
                        "t4",
                        "task",
                        json!({"description": "outside", "prompt": "MARK-y", "subagent_type": "explore", "context_files": [{"path": "../outside.txt"}]}),
                    ),
                    ("t5", "task", task("fails", "MARK-fail go", "explore")),
                ]),
                anthropic_text("Handled."),
            ],
        ),
        ("MARK-writer", vec![anthropic_text("I cannot write here.")]),
        ("MARK-fail", vec![bad]),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.lead]\nagent = \"explore\"\ntools = [\"read_file\", \"grep\", \"task\"]\nprompt = \"MARK-lead look\"\n"
    );
    let test = Test::new().file("w.toml", &workflow);
    std::fs::write(test.path().parent().unwrap().join("outside.txt"), "secret").ok();
    let (out, _test) = against(test, &fake, &["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = json_of(&out);
    assert_eq!(run["steps"]["lead"]["summary"], "Handled.");

    // The `code` subagent of a read-only step gets code's tools narrowed to the step's.
    let writer = &bodies_for(&fake, "MARK-writer").await[0];
    assert_eq!(tool_names(writer), ["grep", "read_file"]);

    let after = &bodies_for(&fake, "MARK-lead").await[1];
    let (text, error) = result_for(after, "t1");
    assert!(!error && text.starts_with("I cannot write here."), "{text}");
    let (text, error) = result_for(after, "t2");
    assert!(error);
    assert_eq!(
        text,
        "there is no subagent type `nope` here; available: `code`, `explore`, `plan`"
    );
    let (text, error) = result_for(after, "t3");
    assert!(error);
    assert_eq!(text, "there is no finished subagent `explore#9` to resume");
    let (text, error) = result_for(after, "t4");
    assert!(
        error && text.starts_with("context file `../outside.txt`: "),
        "{text}"
    );
    assert!(!text.contains("secret"));
    let (text, error) = result_for(after, "t5");
    assert!(error);
    assert!(
        text.starts_with("subagent explore#1 failed: model request failed") && text.contains("400"),
        "{text}"
    );

    let records = run["steps"]["lead"]["subagents"].as_array().unwrap();
    let ids: Vec<&str> = records.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&"code#1") && ids.contains(&"explore#1"));
    let failed = records.iter().find(|r| r["id"] == "explore#1").unwrap();
    assert_eq!(failed["status"], "failed");
    assert!(failed["error"].as_str().unwrap().contains("400"));
}

/// Three `code` subagents meet through FIFOs in their bash commands: A writes p1 for B, B
/// writes p2 for C, C writes p3 for A. They can only all finish if they run at the same time.
async fn three_way(limit: Option<&str>) -> (Vec<String>, Output) {
    let side = |id: &str, command: &str, answer: &str| {
        vec![
            anthropic_tool(id, "bash", json!({"command": command, "timeout": 2})),
            anthropic_text(answer),
        ]
    };
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-lead",
            vec![
                anthropic_tools(&[
                    ("t1", "task", task("side a", "MARK-a", "code")),
                    ("t2", "task", task("side b", "MARK-b", "code")),
                    ("t3", "task", task("side c", "MARK-c", "code")),
                ]),
                anthropic_text("met"),
            ],
        ),
        (
            "MARK-a",
            side("a1", "echo a > p1; read x < p3; echo got $x", "a done"),
        ),
        (
            "MARK-b",
            side("b1", "read y < p1; echo b > p2; echo got $y", "b done"),
        ),
        (
            "MARK-c",
            side("c1", "read z < p2; echo c > p3; echo got $z", "c done"),
        ),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.lead]\nagent = \"code\"\nprompt = \"MARK-lead meet\"\n"
    );
    let test = Test::new().file("w.toml", &workflow);
    for fifo in ["p1", "p2", "p3"] {
        let made = Command::new("mkfifo")
            .arg(test.path().join(fifo))
            .status()
            .unwrap();
        assert!(made.success());
    }
    let mut args = vec!["run", "w.toml", "--format", "json"];
    if let Some(limit) = limit {
        args.extend(["--max-subagents", limit]);
    }
    let (out, _test) = against(test, &fake, &args).run_async().await;
    let mut results = Vec::new();
    for (marker, id) in [("MARK-a", "a1"), ("MARK-b", "b1"), ("MARK-c", "c1")] {
        let second = &bodies_for(&fake, marker).await[1];
        results.push(result_for(second, id).0);
    }
    (results, out)
}

#[tokio::test(flavor = "multi_thread")]
async fn task_calls_of_one_turn_run_at_once() {
    let (results, out) = three_way(None).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(
        results,
        [
            "exit code 0\ngot c\n",
            "exit code 0\ngot a\n",
            "exit code 0\ngot b\n"
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn max_subagents_one_runs_them_one_at_a_time() {
    // Read off the event stream in the order runner decided: no subagent starts while another
    // runs. Nothing waits for a timeout.
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-lead",
            vec![
                anthropic_tools(&[
                    ("t1", "task", task("side a", "MARK-a", "explore")),
                    ("t2", "task", task("side b", "MARK-b", "explore")),
                    ("t3", "task", task("side c", "MARK-c", "explore")),
                ]),
                anthropic_text("all done"),
            ],
        ),
        ("MARK-a", vec![anthropic_text("a done")]),
        ("MARK-b", vec![anthropic_text("b done")]),
        ("MARK-c", vec![anthropic_text("c done")]),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.lead]\nagent = \"code\"\nprompt = \"MARK-lead meet\"\n"
    );
    let test = Test::new().file("w.toml", &workflow);
    let (out, _test) = against(
        test,
        &fake,
        &["run", "w.toml", "--format", "jsonl", "--max-subagents", "1"],
    )
    .run_async()
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(crate::support::one_at_a_time(&out.stdout, "subagent"), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn background_subagents_are_collected_and_awaited() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-lead",
            vec![
                anthropic_tools(&[
                    (
                        "t1",
                        "task",
                        json!({"description": "one", "prompt": "MARK-bg1", "subagent_type": "explore", "run_in_background": true}),
                    ),
                    (
                        "t2",
                        "task",
                        json!({"description": "two", "prompt": "MARK-bg2", "subagent_type": "explore", "run_in_background": true}),
                    ),
                ]),
                anthropic_tools(&[("t3", "task_output", json!({"agent_id": "explore#1"}))]),
                anthropic_text("all done"),
            ],
        ),
        ("MARK-bg1", vec![anthropic_text("first answer")]),
        // Still running when the step has its final answer.
        (
            "MARK-bg2",
            vec![anthropic_text("second answer").set_delay(Duration::from_millis(1500))],
        ),
    ])
    .await;
    let (out, _test) = run_lead(&fake, "", "MARK-lead fan out", &[]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = json_of(&out);
    let leads = bodies_for(&fake, "MARK-lead").await;
    let (started, _) = result_for(&leads[1], "t1");
    assert!(
        started.starts_with("started subagent explore#1 in the background"),
        "{started}"
    );
    let (collected, error) = result_for(&leads[2], "t3");
    assert!(
        !error && collected.starts_with("first answer\n\n[agent explore#1"),
        "{collected}"
    );
    // The step ended only after the uncollected one did: both are recorded as finished.
    let records = run["steps"]["lead"]["subagents"].as_array().unwrap();
    let mut ids: Vec<&str> = records.iter().map(|r| r["id"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["explore#1", "explore#2"]);
    assert!(records.iter().all(|r| r["status"] == "succeeded"));
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_continues_a_subagent_conversation() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-lead",
            vec![
                anthropic_tools(&[("t1", "task", task("part one", "MARK-r first part", "explore"))]),
                anthropic_tools(&[(
                    "t2",
                    "task",
                    json!({"description": "part two", "prompt": "now the second part", "subagent_type": "explore", "resume": "explore#1"}),
                )]),
                anthropic_text("fin"),
            ],
        ),
        (
            "MARK-r",
            vec![anthropic_text("answer one"), anthropic_text("answer two")],
        ),
    ])
    .await;
    let (out, test) = run_lead(&fake, "", "MARK-lead two parts", &[]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let second = &bodies_for(&fake, "MARK-r").await[1];
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["content"][0]["text"], "answer one");
    assert_eq!(messages[2]["content"][0]["text"], "now the second part");
    let leads = bodies_for(&fake, "MARK-lead").await;
    let (text, _) = result_for(&leads[2], "t2");
    assert!(
        text.starts_with("answer two\n\n[agent explore#1 "),
        "{text}"
    );
    let run = json_of(&out);
    let dir = run_dir(&test, &run);
    let transcript =
        std::fs::read_to_string(dir.join("steps/lead/subagents/explore#1/transcript.jsonl"))
            .unwrap();
    assert!(transcript.contains("answer one") && transcript.contains("answer two"));
}

/// A request body with its cache markers removed (they say where to cache, not what).
fn without_cache_marks(mut value: Value) -> Value {
    match &mut value {
        Value::Object(map) => {
            map.remove("cache_control");
            for v in map.values_mut() {
                *v = without_cache_marks(v.take());
            }
        }
        Value::Array(items) => {
            for v in items {
                *v = without_cache_marks(v.take());
            }
        }
        _ => {}
    }
    value
}

fn last_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect()
}

/// A forked subagent sends its caller's system prompt, tools and conversation byte for byte
/// (so its request begins with the bytes its caller's cache holds), with a cache breakpoint at
/// the end of that shared history; the caller's unanswered calls are answered with a note; a
/// tool the fork was not given is offered (it is in the shared prefix) and refused when called.
#[tokio::test(flavor = "multi_thread")]
async fn forked_subagents_start_from_the_parent_conversation() {
    let fake = Fake::anthropic_fn(|body| {
        let text = body.to_string();
        if last_text(body).contains("MARK-f1") {
            return anthropic_text("f1 done");
        }
        if text.contains("MARK-f2 go on") {
            // The narrow fork tries a tool it was not given, then answers.
            return match text.contains("\"n1\"") {
                false => anthropic_tool("n1", "read_file", json!({"path": "a.txt"})),
                true => anthropic_text("f2 done"),
            };
        }
        match body["messages"].as_array().map_or(0, Vec::len) {
            1 => anthropic_tool("r1", "read_file", json!({"path": "a.txt"})),
            3 => crate::fake::ok(json!({
                "id": "msg", "type": "message", "role": "assistant", "model": "m",
                "content": [
                    {"type": "text", "text": "Delegating."},
                    {"type": "tool_use", "id": "t1", "name": "task", "input": task("same tools", "MARK-f1 go on", "forker")},
                    {"type": "tool_use", "id": "t2", "name": "task", "input": task("fewer tools", "MARK-f2 go on", "narrow")}
                ],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 10, "output_tokens": 5}
            })),
            _ => anthropic_text("both done"),
        }
    })
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.lead]\nagent = \"forker\"\nmax_subagent_depth = 2\nprompt = \"MARK-lead start\"\n"
    );
    let test = Test::new()
        .file("w.toml", &workflow)
        .file("a.txt", "alpha\n")
        .file(
            ".claude/agents/forker.md",
            "---\nname: forker\ndescription: Goes on from the conversation so far\ntools: Read, Grep, Task, TaskOutput\nforkContext: true\n---\nYou carry on the work you were handed.\n",
        )
        .file(
            ".claude/agents/narrow.md",
            "---\nname: narrow\ndescription: Searches, from the conversation so far\ntools: Grep\nfork_context: true\n---\nYou search.\n",
        );
    let (out, _test) = against(
        test,
        &fake,
        &["run", "w.toml", "--format", "json", "--trust-workdir"],
    )
    .run_async()
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    let parent = bodies
        .iter()
        .find(|b| b["messages"].as_array().unwrap().len() == 3 && !last_text(b).contains("MARK"))
        .cloned()
        .map(without_cache_marks)
        .unwrap();
    let find = |marker: &str| {
        bodies
            .iter()
            .find(|b| last_text(b).contains(marker))
            .cloned()
            .unwrap()
    };
    for (marked, fork) in [("f1", find("MARK-f1")), ("f2", find("MARK-f2"))] {
        // The cache breakpoint at the end of the shared history: the caller's last reply.
        let messages = fork["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 5, "{marked}");
        let shared_end = messages[3]["content"].as_array().unwrap().last().unwrap();
        assert_eq!(shared_end["cache_control"]["type"], "ephemeral", "{marked}");
        let fork = without_cache_marks(fork);
        // The caller's prefix byte for byte: model, limits, system prompt, tools, conversation.
        for key in ["model", "max_tokens", "system", "tools"] {
            assert_eq!(
                serde_json::to_string(&fork[key]).unwrap(),
                serde_json::to_string(&parent[key]).unwrap(),
                "{marked}: {key}"
            );
        }
        let messages = fork["messages"].as_array().unwrap();
        assert_eq!(
            serde_json::to_string(&messages[..3]).unwrap(),
            serde_json::to_string(&parent["messages"].as_array().unwrap()[..3]).unwrap(),
            "{marked}"
        );
        // The caller's last reply as it was, its calls answered with a note, then the task.
        assert_eq!(messages[3]["content"][1]["name"], "task", "{marked}");
        let opening = messages[4]["content"].as_array().unwrap();
        assert_eq!(opening[0]["tool_use_id"], "t1");
        assert_eq!(opening[1]["tool_use_id"], "t2");
        let separator = opening[2]["text"].as_str().unwrap();
        assert!(
            separator.starts_with("--- The conversation above is the one you were started from.")
        );
    }
    // The narrow fork's call of a tool it was not given was refused, not run.
    let refused = bodies
        .iter()
        .find(|b| b.to_string().contains("MARK-f2 go on") && b.to_string().contains("\"n1\""))
        .unwrap();
    let (text, is_error) = result_for(refused, "n1");
    assert!(is_error && !text.contains("alpha"), "{text}");
    let last = bodies.last().unwrap();
    assert!(result_for(last, "t1").0.starts_with("f1 done"));
    assert!(result_for(last, "t2").0.starts_with("f2 done"));
}

#[tokio::test(flavor = "multi_thread")]
async fn nesting_under_a_limit_of_one_does_not_deadlock() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-lead",
            vec![
                anthropic_tools(&[("t1", "task", task("middle", "MARK-mid split", "code"))]),
                anthropic_text("top done"),
            ],
        ),
        (
            "MARK-mid",
            vec![
                anthropic_tools(&[
                    ("m1", "task", task("leaf one", "MARK-leaf1", "explore")),
                    ("m2", "task", task("leaf two", "MARK-leaf2", "explore")),
                ]),
                anthropic_text("mid done"),
            ],
        ),
        ("MARK-leaf1", vec![anthropic_text("leaf one")]),
        ("MARK-leaf2", vec![anthropic_text("leaf two")]),
    ])
    .await;
    let (out, _test) = run_lead(
        &fake,
        "max_subagent_depth = 2\n",
        "MARK-lead nest",
        &["--max-subagents", "1"],
    )
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = json_of(&out);
    assert_eq!(run["steps"]["lead"]["summary"], "top done");
    let mut ids: Vec<String> = run["steps"]["lead"]["subagents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    assert_eq!(ids, ["code#1", "explore#1", "explore#2"]);
    // Depth 2: the middle one may delegate, the leaves may not.
    let mid = &bodies_for(&fake, "MARK-mid").await[0];
    assert!(tool_names(mid).contains(&"task".to_owned()));
    let leaf = &bodies_for(&fake, "MARK-leaf1").await[0];
    assert!(!tool_names(leaf).contains(&"task".to_owned()));
    let mid_after = &bodies_for(&fake, "MARK-mid").await[1];
    assert!(result_for(mid_after, "m2").0.starts_with("leaf two"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_timeout_stops_its_subagents() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-lead",
            vec![
                anthropic_tools(&[(
                    "t1",
                    "task",
                    json!({"description": "slow", "prompt": "MARK-hang", "subagent_type": "explore", "run_in_background": true}),
                )]),
                anthropic_tools(&[("t2", "task_output", json!({"agent_id": "explore#1"}))]),
            ],
        ),
        (
            "MARK-hang",
            vec![anthropic_text("too late").set_delay(Duration::from_secs(120))],
        ),
    ])
    .await;
    let workflow = format!(
        "name = \"t\"\n{MODELS}[steps.lead]\nagent = \"code\"\ntimeout = \"2s\"\nprompt = \"MARK-lead wait\"\n"
    );
    let started = Instant::now();
    let (out, _test) = against(
        Test::new().file("w.toml", &workflow),
        &fake,
        &["run", "w.toml", "--format", "json"],
    )
    .run_async()
    .await;
    // The run does not wait for the subagent's two-minute reply.
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run = json_of(&out);
    assert_eq!(run["steps"]["lead"]["status"], "failed");
    assert_eq!(run["steps"]["lead"]["error"], "timed out after 2s");
}

#[test]
fn plan_shows_who_may_spawn_what_and_the_limit() {
    let workflow = format!(
        "name = \"t\"\nmax_subagents = 5\n{MODELS}[steps.lead]\nagent = \"code\"\nsubagents = [\"explore\"]\nprompt = \"go\"\n[steps.look]\nagent = \"explore\"\nsubagents = [\"plan\"]\nprompt = \"look\"\n"
    );
    let test = Test::new().file("w.toml", &workflow);
    let out = test
        .args(&["plan", "w.toml", "--format", "json", "--max-subagents", "3"])
        .run();
    assert_eq!(out.status, 0, "{}", out.transcript());
    let plan: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(plan["max_subagents"], 3);
    let step = |id: &str| {
        plan["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(step("lead")["subagents"], json!(["explore"]));
    // Without `task`, `subagents` does nothing, and says so.
    assert_eq!(step("look")["subagents"], json!([]));
    assert!(
        out.stderr
            .contains("step `look` has no `task` tool, so `subagents` has no effect"),
        "{}",
        out.stderr
    );

    let zero = Test::new()
        .file("w.toml", &workflow)
        .args(&["plan", "w.toml", "--max-subagents", "0"])
        .run();
    assert_eq!(zero.status, 2);
    assert!(
        zero.stderr.contains("`--max-subagents` must be at least 1"),
        "{}",
        zero.stderr
    );
    let unknown = Test::new()
        .file("w.toml", &workflow.replace("[\"explore\"]", "[\"explor\"]"))
        .args(&["validate", "w.toml"])
        .run();
    assert_eq!(unknown.status, 2);
    assert!(
        unknown
            .stderr
            .contains("unknown agent `explor` in `subagents` of step `lead`"),
        "{}",
        unknown.stderr
    );
    assert!(
        unknown.stderr.contains("did you mean `explore`?"),
        "{}",
        unknown.stderr
    );
}

/// An agent file with no `model` (or `model: inherit`) runs on its caller's model, as in Claude
/// Code: an `openai/...` step's subagents go to that endpoint and model, and a fork shares the
/// caller's prefix byte for byte, even when its file names another model.
#[tokio::test(flavor = "multi_thread")]
async fn agent_files_without_a_model_inherit_the_callers() {
    let last = |b: &Value| {
        serde_json::to_string(b["messages"].as_array().unwrap().last().unwrap()).unwrap()
    };
    let fake = Fake::openai_fn(move |body| {
        let last = last(body);
        if last.contains("MARK-fork") {
            openai_text("fork done")
        } else if last.contains("MARK-helper") {
            openai_text("helper done")
        } else if body["messages"].as_array().unwrap().len() == 2 {
            let call = |id: &str, input: Value| {
                json!({"id": id, "type": "function", "function": {"name": "task", "arguments": input.to_string()}})
            };
            crate::fake::ok(json!({
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Delegating.", "tool_calls": [
                    call("c1", task("help", "MARK-helper look", "helper")),
                    call("c2", task("fork", "MARK-fork go on", "forker")),
                ]}, "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20}
            }))
        } else {
            openai_text("lead done")
        }
    })
    .await;
    // The default alias is on a provider nobody answers: a subagent sent there fails.
    let workflow = format!(
        "name = \"t\"\n[providers.local]\nkind = \"openai\"\nbase_url = \"{}/v1\"\napi_key_env = \"LOCAL_KEY\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.lead]\nagent = \"lead\"\nmodel = \"local/qwen\"\nmax_subagent_depth = 2\nprompt = \"MARK-lead start\"\n",
        fake.uri()
    );
    let (out, _test) = Test::new()
        .file("workflows/w.toml", &workflow)
        .file(
            "agents/lead.md",
            "---\nname: lead\ndescription: Leads\ntools: Read, Task\n---\nYou lead.\n",
        )
        .file(
            "agents/helper.md",
            "---\nname: helper\ndescription: Helps\ntools: Read\n---\nYou help.\n",
        )
        .file(
            "agents/forker.md",
            "---\nname: forker\ndescription: Goes on\ntools: Read, Task\nmodel: default\nforkContext: true\n---\nYou lead.\n",
        )
        .env("LOCAL_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .env("ANTHROPIC_API_KEY", KEY)
        .args(&["run", "workflows/w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = json_of(&out);
    let models: Vec<&str> = run["steps"]["lead"]["subagents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["local/qwen", "local/qwen"]);
    let bodies = fake.bodies().await;
    assert_eq!(bodies.len(), 4);
    assert!(bodies.iter().all(|b| b["model"] == "qwen"));
    let parent = bodies
        .iter()
        .find(|b| b["messages"].as_array().unwrap().len() == 2)
        .unwrap();
    let fork = bodies
        .iter()
        .find(|b| last(b).contains("MARK-fork"))
        .unwrap();
    for key in ["model", "tools"] {
        assert_eq!(
            serde_json::to_string(&fork[key]).unwrap(),
            serde_json::to_string(&parent[key]).unwrap(),
            "{key}"
        );
    }
    let prefix =
        |b: &Value| serde_json::to_string(&b["messages"].as_array().unwrap()[..2]).unwrap();
    assert_eq!(prefix(fork), prefix(parent));
}

/// A subagent's tokens are counted one way everywhere: its facts line, its progress line and its
/// record (which keeps cache reads and writes apart, as a step's does).
#[tokio::test(flavor = "multi_thread")]
async fn a_subagents_tokens_read_the_same_in_its_facts_progress_and_record() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-lead",
            vec![
                anthropic_tool("t1", "task", task("look", "MARK-sub look", "explore")),
                anthropic_text("done"),
            ],
        ),
        // 10 input, 150 cache reads, 30 output.
        ("MARK-sub", vec![anthropic_text("looked")]),
    ])
    .await;
    let (out, _test) = run_lead(&fake, "", "MARK-lead", &[]).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run = json_of(&out);
    let sub = &run["steps"]["lead"]["subagents"][0];
    assert_eq!(
        (
            sub["input_tokens"].as_u64(),
            sub["cache_read_input_tokens"].as_u64(),
            sub["cache_creation_input_tokens"].as_u64(),
            sub["output_tokens"].as_u64()
        ),
        (Some(10), Some(150), Some(0), Some(30))
    );
    let bodies = fake.bodies().await;
    let second = bodies
        .iter()
        .filter(|b| prompt_of(b).contains("MARK-lead"))
        .nth(1)
        .unwrap();
    let (facts_text, _) = result_for(second, "t1");
    assert!(facts_text.ends_with("190 tokens]"), "{facts_text}");
    assert!(
        out.stderr.contains("explore#1 done (0 tools, ") && out.stderr.contains(", 190 tokens)"),
        "{}",
        out.stderr
    );
}

/// A model's `task` call cannot send a subagent (with the conversation a fork carries) to a
/// provider the workflow never names: the call is an error result, and that endpoint hears
/// nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_call_cannot_route_a_subagent_to_a_provider_the_workflow_never_names() {
    let fake = Fake::anthropic_routed(vec![(
        "MARK-lead",
        vec![
            anthropic_tool(
                "t1",
                "task",
                json!({"description": "look", "prompt": "MARK-sub", "subagent_type": "explore", "model": "openai/gpt-4o"}),
            ),
            anthropic_text("done"),
        ],
    )])
    .await;
    let elsewhere = Fake::openai(vec![openai_text("never")]).await;
    let workflow =
        format!("name = \"t\"\n{MODELS}[steps.lead]\nagent = \"code\"\nprompt = \"MARK-lead\"\n");
    let (out, _test) = against(
        Test::new().file("w.toml", &workflow),
        &fake,
        &["run", "w.toml", "--format", "json"],
    )
    .env("OPENAI_BASE_URL", &format!("{}/v1", elsewhere.uri()))
    .env("OPENAI_API_KEY", "sk-elsewhere")
    .run_async()
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        elsewhere.requests().await.is_empty(),
        "the other provider was called"
    );
    let bodies = fake.bodies().await;
    let (result, is_error) = result_for(bodies.last().unwrap(), "t1");
    assert!(is_error, "{result}");
    assert!(
        result.contains("provider `openai` is not one this workflow or its agents use"),
        "{result}"
    );
}

/// Claude Code's model picks a subagent by its description: the `task` tool's description lists
/// each agent the step may start with the first line of its own.
#[tokio::test(flavor = "multi_thread")]
async fn the_task_tool_lists_the_agents_it_may_start_with_their_descriptions() {
    let fake = Fake::anthropic(vec![anthropic_text("done")]).await;
    let agent = "---\nname: db-reader\ndescription: Execute read-only database queries.\n  Use when analysing data.\ntools: Bash\n---\nYou read databases.\n";
    let workflow =
        format!("name = \"t\"\n{MODELS}[steps.lead]\nagent = \"code\"\nprompt = \"go\"\n");
    let test = Test::new()
        .file("workflows/w.toml", &workflow)
        .file("agents/db-reader.md", agent);
    let (out, _test) = against(
        test,
        &fake,
        &["run", "workflows/w.toml", "--format", "json"],
    )
    .run_async()
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let body = &fake.bodies().await[0];
    let task = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "task")
        .expect("task offered");
    let description = task["description"].as_str().unwrap();
    assert!(
        description.contains(
            "\n- db-reader: Execute read-only database queries. Use when analysing data."
        ) && description.contains("\n- explore: Read-only search"),
        "{description}"
    );
}
