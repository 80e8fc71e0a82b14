//! One way out (docs/src/security.md): every byte runner sends to a model or writes (run records,
//! transcripts, cassettes, the terminal) passes one redactor that knows every secret of the
//! run: provider keys, values of variables whose names say they are secrets, values a workflow
//! takes from the environment with `${VAR}`, and their URL and base64 encodings. Each feature
//! that carries text (checks, command steps' structured output, fan-out items, `context_files`,
//! replies that echo a key) is driven here with marked secrets, and no marker may show anywhere.

use serde_json::{Value, json};

use crate::fake::{Fake, anthropic_text, anthropic_tool, prompt_of};
use crate::support::Test;

const KEY: &str = "sk-ant-redaction-marker-4f1a2b3c";
const NAMED: &str = "named-secret-marker-9d8c7b";
const TAKEN: &str = "taken-by-var-marker-6e5d4c";

/// Every file under `dir`, as text.
fn every_file(dir: &std::path::Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(every_file(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((
                path.display().to_string(),
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
    }
    out
}

/// An MCP server whose one tool answers with a secret it was given (`LEAKED`).
fn leak_server() -> String {
    crate::fake::python_mcp_server(
        "leak",
        "\"the server says \" + os.environ[\"LEAKED\"]",
        "",
        "",
    )
}

fn assert_clean(what: &str, text: &str) {
    for marker in [KEY, NAMED, TAKEN] {
        assert!(!text.contains(marker), "{marker} in {what}:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn no_secret_reaches_a_model_a_record_or_the_terminal() {
    let fake = Fake::anthropic_fn(|body| {
        let prompt = prompt_of(body);
        let turns = body["messages"].as_array().unwrap().len();
        if prompt.contains("MARK-sub") {
            return anthropic_text("the env file holds keys");
        }
        if prompt.contains("MARK-fan") {
            return anthropic_text("looked at the item");
        }
        if prompt.contains("MARK-mcp") {
            return match turns {
                1 => anthropic_tool("m1", "mcp__leak__leak", json!({})),
                _ => anthropic_text("the server answered"),
            };
        }
        match turns {
            // The final answer echoes the key, as a server that repeats its input would.
            1 => anthropic_text(&format!("done; I was called with {KEY}")),
            3 => anthropic_tool(
                "t1",
                "task",
                json!({"description": "read env", "prompt": "MARK-sub read it", "subagent_type": "explore", "context_files": [{"path": ".env"}]}),
            ),
            _ => anthropic_text("fixed"),
        }
    })
    .await;
    let workflow = r#"name = "r"
[models]
default = "anthropic/claude-test"
[steps.cmd]
run = 'printf "{\"items\": [\"%s\"]}" "$SVC"'
env = { SVC = "${TAKEN_VALUE}" }
output_schema = { type = "object", required = ["items"], properties = { items = { type = "array", items = { type = "string" } } } }
[steps.fan]
agent = "explore"
needs = ["cmd"]
for_each = "steps.cmd.output.items"
prompt = "MARK-fan look at {{ item }}"
[mcp_servers.leak]
command = "python3"
args = ["leak.py"]
env = { LEAKED = "${TAKEN_VALUE}" }
[steps.mcp]
agent = "explore"
tools = ["mcp__leak"]
prompt = "MARK-mcp ask the server"
[steps.work]
agent = "code"
needs = ["cmd"]
prompt = "MARK-work fix it; the list is {{ steps.cmd.output.items }}"
env = { SVC = "${TAKEN_VALUE}" }
checks = ["sh check.sh"]
"#;
    let check = "echo \"svc=$SVC\"; cat .env; test -f fixed || { touch fixed; exit 1; }\n";
    let test = Test::new()
        .file("w.toml", workflow)
        .file("check.sh", check)
        .file("leak.py", &leak_server())
        .file(
            ".env",
            &format!("ANTHROPIC_API_KEY={KEY}\nDEPLOY_SECRET={NAMED}\n"),
        )
        .env("DEPLOY_SECRET", NAMED)
        .env("TAKEN_VALUE", TAKEN);
    let (out, test) = test
        .anthropic_api(&fake.uri(), KEY)
        .args(&["run", "w.toml", "--format", "json", "--record", "cassettes"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let bodies = fake.bodies().await;
    // The features ran: a check failed and went back, a subagent read `.env`, the fan-out ran.
    assert!(
        bodies
            .iter()
            .any(|b| b.to_string().contains("The checks did not pass"))
    );
    assert!(bodies.iter().any(|b| prompt_of(b).contains("MARK-sub")));
    assert!(bodies.iter().any(|b| prompt_of(b).contains("MARK-fan")));
    assert!(
        bodies
            .iter()
            .any(|b| b.to_string().contains("the server says"))
    );
    for body in &bodies {
        assert_clean("a request", &body.to_string());
    }
    assert_clean("stdout", &out.stdout);
    assert_clean("stderr", &out.stderr);
    for (path, text) in every_file(&test.path().join(".runner"))
        .into_iter()
        .chain(every_file(&test.path().join("cassettes")))
    {
        assert_clean(&path, &text);
    }
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(run["steps"]["cmd"]["output"]["items"][0], "[hidden]");
}

/// A diagnostic quotes the file's line: a key pasted into a workflow shows hidden there too.
#[test]
fn diagnostics_quote_no_secret() {
    let out = Test::new()
        .file(
            "w.toml",
            &format!("name = \"d\"\n[models]\ndefault = \"anthropic/m\"\n[steps.s]\nagent = \"explore\"\nprompt = \"x\"\nenv = {{ K = \"{KEY}\" }}\nunknown_key = 1\n"),
        )
        .env("ANTHROPIC_API_KEY", KEY)
        .args(&["validate", "w.toml"])
        .run();
    assert_eq!(out.status, 2, "{}", out.transcript());
    assert!(out.stderr.contains("unknown_key"), "{}", out.stderr);
    assert!(
        out.stderr.contains("env = { K = \"[hidden]\" }"),
        "{}",
        out.stderr
    );
    assert_clean("a diagnostic", &out.stderr);
}
