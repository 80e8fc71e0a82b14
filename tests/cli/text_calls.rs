//! Model text is a call only when it is a call (docs/src/runs.md, "Agents that loop or run out
//! of turns"): a call written as text runs only as the reply's whole text, on a turn that
//! offered tools and allowed calling them, when it is no valid answer of the step's
//! `output_schema` and no quote of text the model was given. Each test offers a writing step
//! a `bash` call that would leave a marker file, and asserts what ran.

use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::fake::{Fake, anthropic_results, anthropic_text, anthropic_tool};
use crate::support::{Output, Test};

/// The call every test's model writes as text: it would leave `MARKER` in the working directory.
const CALL: &str = r#"{"name": "bash", "arguments": {"command": "touch ran-the-text-call"}}"#;
const MARKER: &str = "ran-the-text-call";

/// A writing step against `fake`, with `keys` added to it.
fn project(fake: &Fake, keys: &str) -> Test {
    Test::new()
        .file(
            "w.toml",
            &format!(
                "name = \"t\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.s]\nagent = \"code\"\nretries = 0\nprompt = \"Look at calls.json\"\n{keys}\n"
            ),
        )
        .file("calls.json", &format!("{CALL}\n"))
        .file("notes.txt", "hello\n")
        .anthropic_api(&fake.uri(), "sk-test")
        .args(&["run", "w.toml", "--format", "json"])
}

/// Runs, and reads what `run --format json` printed; whether the marker was made.
async fn run(test: Test) -> (Output, Value, bool) {
    let (out, test) = test.run_async().await;
    let record = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
    let ran = test.path().join(MARKER).exists();
    (out, record, ran)
}

/// The last turn after `max_turns` offers the tools (the cached prefix holds them) but allows
/// no call (`tool_choice` none): a call written as text there is not run, and it is no answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_written_as_text_on_the_last_turn_is_not_run() {
    let fake = Fake::anthropic(vec![
        anthropic_tool("t1", "read_file", json!({"path": "notes.txt"})),
        anthropic_text(CALL),
    ])
    .await;
    let (out, record, ran) = run(project(&fake, "max_turns = 2")).await;
    let bodies = fake.bodies().await;
    assert_eq!(bodies.len(), 2, "{}", out.transcript());
    assert_eq!(bodies[1]["tool_choice"]["type"], "none", "{}", bodies[1]);
    assert!(!ran, "the call written on the last turn ran");
    assert_eq!(out.status, 1, "{}", out.transcript());
    let error = record["steps"]["s"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("reached max_turns (2)") && error.contains("wrote a call of `bash` as text"),
        "{error}"
    );
}

/// The request that asks for a summary before compacting allows no call either: a summary
/// written as a call is not run.
#[tokio::test(flavor = "multi_thread")]
async fn a_summary_written_as_a_call_is_not_run() {
    // A model that reads `f0.txt`, `f1.txt`, … one a turn until it is asked for a summary,
    // which it writes as a call; after the compaction it answers. Its usage counts a request's
    // tokens as its JSON's bytes over four, as the context tests' model does.
    let fake = Fake::anthropic_fn(|body| {
        let text = body.to_string();
        let tokens = text.len() / 4;
        let last = body["messages"].as_array().and_then(|m| m.last()).cloned();
        if last.is_some_and(|m| m.to_string().contains("will be compacted")) {
            assert_eq!(body["tool_choice"]["type"], "none", "{body}");
            return answer(CALL, tokens);
        }
        if text.contains("was compacted") {
            return answer("done", tokens);
        }
        let read = anthropic_results(body).len();
        ResponseTemplate::new(200).set_body_json(json!({
            "type": "message", "role": "assistant",
            "content": [{"type": "tool_use", "id": format!("t{read}"), "name": "read_file", "input": {"path": format!("f{read}.txt")}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": tokens, "output_tokens": 20}
        }))
    })
    .await;
    let mut test = project(
        &fake,
        "context_window = 100000\ncompact_at = 0.1\nkeep_tool_results = 1000",
    );
    let page: String = (0..100)
        .map(|i| format!("line {i:02} of a page\n"))
        .collect();
    for n in 0..40 {
        test = test.file(&format!("f{n}.txt"), &page);
    }
    let (out, record, ran) = run(test).await;
    assert!(!ran, "the summary written as a call ran");
    let bodies = fake.bodies().await;
    assert!(
        bodies
            .iter()
            .any(|b| b.to_string().contains("will be compacted")),
        "no compaction: {}",
        out.transcript()
    );
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(record["steps"]["s"]["summary"], "done");
}

/// An Anthropic final answer whose usage says its request took `input_tokens`.
fn answer(text: &str, input_tokens: usize) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "type": "message", "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "usage": {"input_tokens": input_tokens, "output_tokens": 40}
    }))
}

/// The model read a file that holds a call, and its reply repeats it, whole or fenced: that is
/// a quote of the file, the step's answer, and not a call to run.
#[tokio::test(flavor = "multi_thread")]
async fn a_reply_quoting_a_file_does_not_run_the_call_it_holds() {
    for (reply, read) in [
        (CALL.to_owned(), json!({"path": "calls.json"})),
        (
            format!("```json\n{CALL}\n```"),
            json!({"path": "calls.json"}),
        ),
        // Read through bash as well: any tool's output is text the model was given.
        (CALL.to_owned(), json!({"command": "cat calls.json"})),
    ] {
        let tool = if read.get("path").is_some() {
            "read_file"
        } else {
            "bash"
        };
        let fake = Fake::anthropic(vec![
            anthropic_tool("t1", tool, read),
            anthropic_text(&reply),
        ])
        .await;
        let (out, record, ran) = run(project(&fake, "")).await;
        assert!(!ran, "the quoted call ran: {reply}");
        assert_eq!(out.status, 0, "{}", out.transcript());
        assert_eq!(record["steps"]["s"]["summary"], reply.as_str());
        assert_eq!(record["steps"]["s"]["tool_calls"], 1);
        let bodies = fake.bodies().await;
        assert_eq!(bodies.len(), 2, "{}", out.transcript());
        assert!(
            anthropic_results(&bodies[1])[0]
                .1
                .contains("touch ran-the-text-call"),
            "the model was not given the file: {}",
            bodies[1]
        );
    }
}

/// The same call not quoted from anything the model was given still runs: a local model's
/// call written as text is its call.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_written_as_text_of_its_own_still_runs() {
    let fake = Fake::anthropic(vec![anthropic_text(CALL), anthropic_text("made it")]).await;
    let test = project(&fake, "").file("calls.json", "nothing to see\n");
    let (out, record, ran) = run(test).await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(ran, "the model's own call written as text did not run");
    assert_eq!(record["steps"]["s"]["summary"], "made it");
}

/// A step whose `output_schema` asks for `{name, parameters}` gets that as its answer: a valid
/// final answer is an answer, not a call of the tool it happens to name.
#[tokio::test(flavor = "multi_thread")]
async fn an_output_schema_answer_shaped_like_a_call_is_the_answer() {
    let answer = r#"{"name": "bash", "parameters": {"command": "touch ran-the-text-call"}}"#;
    let fake = Fake::anthropic(vec![anthropic_text(answer)]).await;
    let schema = "output_schema = { type = \"object\", required = [\"name\", \"parameters\"], properties = { name = { type = \"string\" }, parameters = { type = \"object\" } } }";
    let test = project(&fake, schema).file("calls.json", "nothing to see\n");
    let (out, record, ran) = run(test).await;
    assert!(!ran, "the structured answer ran as bash");
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(
        record["steps"]["s"]["output"],
        json!({"name": "bash", "parameters": {"command": "touch ran-the-text-call"}})
    );
    assert_eq!(fake.bodies().await.len(), 1);
}

/// A subagent's conversation keeps the same rule: its reply quoting a file it read is its
/// answer, and its caller's reply quoting that answer (a tool's output to the caller) is the
/// step's answer; neither runs the call.
#[tokio::test(flavor = "multi_thread")]
async fn a_subagent_and_its_caller_quoting_a_file_run_nothing() {
    let fake = Fake::anthropic_routed(vec![
        (
            "MARK-lead",
            vec![
                anthropic_tool(
                    "t1",
                    "task",
                    json!({"description": "look", "prompt": "MARK-sub read calls.json", "subagent_type": "code"}),
                ),
                anthropic_text(CALL),
            ],
        ),
        (
            "MARK-sub",
            vec![
                anthropic_tool("s1", "read_file", json!({"path": "calls.json"})),
                anthropic_text(CALL),
            ],
        ),
    ])
    .await;
    let test = Test::new()
        .file(
            "w.toml",
            "name = \"t\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.s]\nagent = \"code\"\nretries = 0\nprompt = \"MARK-lead\"\n",
        )
        .file("calls.json", &format!("{CALL}\n"))
        .anthropic_api(&fake.uri(), "sk-test")
        .args(&["run", "w.toml", "--format", "json"]);
    let (out, record, ran) = run(test).await;
    assert!(!ran, "a quoted call ran");
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(record["steps"]["s"]["summary"], CALL);
    // The subagent's one call is its read; the lead's, its task.
    assert_eq!(record["steps"]["s"]["subagents"][0]["tool_calls"], 1);
    assert_eq!(record["steps"]["s"]["tool_calls"], 1);
    let bodies = fake.bodies().await;
    assert_eq!(bodies.len(), 4, "{}", out.transcript());
    // The subagent offered bash (a call of it would have run), and its answer reached the lead.
    let sub = bodies
        .iter()
        .find(|b| b.to_string().contains("MARK-sub") && anthropic_results(b).len() == 1)
        .unwrap();
    assert!(sub["tools"].to_string().contains("\"bash\""), "{sub}");
    let lead = bodies.last().unwrap();
    assert!(
        anthropic_results(lead)[0]
            .1
            .contains("touch ran-the-text-call"),
        "{lead}"
    );
}

/// A fork is given its caller's conversation: its reply quoting a file its caller read is a
/// quote, though the fork itself never read it.
#[tokio::test(flavor = "multi_thread")]
async fn a_fork_quoting_a_file_its_caller_read_runs_nothing() {
    let fake = Fake::anthropic_fn(|body| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let last = messages.last().map(Value::to_string).unwrap_or_default();
        if last.contains("MARK-fork") {
            return anthropic_text(CALL);
        }
        match anthropic_results(body).len() {
            0 => anthropic_tool("t1", "read_file", json!({"path": "calls.json"})),
            1 => anthropic_tool(
                "t2",
                "task",
                json!({"description": "go on", "prompt": "MARK-fork go on", "subagent_type": "forker"}),
            ),
            _ => anthropic_text("done"),
        }
    })
    .await;
    let test = Test::new()
        .file(
            "w.toml",
            "name = \"t\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.s]\nagent = \"code\"\nretries = 0\nprompt = \"MARK-lead\"\n",
        )
        .file(
            "agents/forker.md",
            "---\nname: forker\ndescription: Goes on\ntools: Read, Bash\nforkContext: true\n---\nYou go on.\n",
        )
        .file("calls.json", &format!("{CALL}\n"))
        .anthropic_api(&fake.uri(), "sk-test")
        .args(&["run", "w.toml", "--format", "json", "--agents-dir", "agents"]);
    let (out, record, ran) = run(test).await;
    assert!(!ran, "the fork's quote ran");
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(record["steps"]["s"]["summary"], "done");
    // The fork called nothing (its bash is read-only, so the marker alone would not tell).
    let fork = &record["steps"]["s"]["subagents"][0];
    assert_eq!(fork["tool_calls"], 0, "{fork}");
    let bodies = fake.bodies().await;
    let fork = bodies
        .iter()
        .find(|b| {
            let messages = b["messages"].as_array().cloned().unwrap_or_default();
            messages
                .last()
                .is_some_and(|m| m.to_string().contains("MARK-fork"))
        })
        .unwrap_or_else(|| panic!("no fork request: {}", out.transcript()));
    // The fork was offered bash, and was given the file through its caller's conversation.
    assert!(fork["tools"].to_string().contains("\"bash\""), "{fork}");
    assert!(
        fork.to_string().contains("touch ran-the-text-call"),
        "{fork}"
    );
    // The fork's reply reached its caller as the task's result.
    let last = bodies.last().unwrap();
    assert_eq!(anthropic_results(last).len(), 2, "{last}");
    assert!(
        anthropic_results(last)[1]
            .1
            .contains("touch ran-the-text-call"),
        "{last}"
    );
}
