//! The seams hold: a tool and a model API written here, outside the library, plug in by
//! registration alone, and a run uses both like its own.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use camino::Utf8PathBuf;
use futures_util::future::BoxFuture;
use runner::agent::AgentCatalog;
use runner::event::Sinks;
use runner::plan::{PlanOptions, build_plan};
use runner::provider::message::{Block, ChatRequest, ChatResponse, StopReason, Usage};
use runner::provider::{Exchange, ModelApi, Outgoing, ProviderError};
use runner::run::executor::ModelExecutor;
use runner::run::team::Team;
use runner::run::{self, RunOptions, RunStatus};
use runner::sandbox::Support;
use runner::tools::{Registry, Tool, ToolContext, ToolOutput};
use runner::workflow::load_workflow;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// A tool the library has never heard of.
struct Shout;

impl Tool for Shout {
    fn name(&self) -> &str {
        "shout"
    }
    fn description(&self) -> &str {
        "Repeats `text` in capitals."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    }
    fn call<'a>(&'a self, input: &'a Value, _: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        let text = input["text"].as_str().unwrap_or_default().to_uppercase();
        Box::pin(async move { ToolOutput::ok(text) })
    }
}

/// A model that answers from a script, in process, and keeps what it was asked.
#[derive(Default)]
struct Scripted {
    replies: Mutex<VecDeque<ChatResponse>>,
    seen: Mutex<Vec<ChatRequest>>,
}

impl ModelApi for Scripted {
    fn endpoint(&self) -> String {
        "scripted".into()
    }
    fn send<'a>(&'a self, request: Outgoing<'a>) -> BoxFuture<'a, Result<Exchange, ProviderError>> {
        self.seen.lock().unwrap().push(request.request.clone());
        let reply = self.replies.lock().unwrap().pop_front();
        Box::pin(async move {
            let response = reply.ok_or(ProviderError::InvalidResponse {
                message: "the script is over".into(),
            })?;
            Ok(Exchange {
                response,
                raw: Value::Null.into(),
            })
        })
    }
}

fn reply(content: Vec<Block>, stop_reason: StopReason) -> ChatResponse {
    ChatResponse {
        content,
        stop_reason,
        usage: Usage {
            input_tokens: 7,
            output_tokens: 3,
            ..Usage::default()
        },
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_and_a_model_api_plug_in_by_registration() {
    let dir = tempfile::tempdir().unwrap();
    let root = Utf8PathBuf::from_path_buf(dir.path().canonicalize().unwrap()).unwrap();
    std::fs::write(
        root.join("w.toml"),
        "name = \"s\"\n[models]\ndefault = \"anthropic/scripted\"\n[steps.loud]\nagent = \"explore\"\ntools = [\"shout\"]\nprompt = \"Shout hello\"\n",
    )
    .unwrap();
    let mut registry = Registry::builtin();
    registry.register(Shout);
    let loaded = load_workflow(&root.join("w.toml")).unwrap();
    let (plan, problems) = build_plan(
        &loaded,
        &AgentCatalog::load(&[], &registry),
        &registry,
        &PlanOptions::default(),
    );
    let plan = plan.unwrap_or_else(|| panic!("{problems:?}"));
    assert_eq!(plan.steps()[0].tools, BTreeSet::from(["shout".to_owned()]));

    let api = Arc::new(Scripted::default());
    api.replies.lock().unwrap().extend([
        reply(
            vec![Block::ToolUse {
                id: "t1".into(),
                name: "shout".into(),
                input: json!({"text": "hello"}),
            }],
            StopReason::ToolUse,
        ),
        reply(
            vec![Block::Text {
                text: "It said HELLO.".into(),
            }],
            StopReason::EndTurn,
        ),
    ]);
    let apis: BTreeMap<String, Arc<dyn ModelApi>> =
        BTreeMap::from([("anthropic".to_owned(), api.clone() as Arc<dyn ModelApi>)]);
    let catalog = Arc::new(AgentCatalog::load(&[], &registry));
    let team = Team::new(&plan, Arc::new(registry), catalog, apis);
    let executor = Arc::new(ModelExecutor {
        team: Arc::new(team),
        state_dir: root.join(".runner"),
        workdir: root.clone(),
        support: Support::probe(),
        tree: Default::default(),
    });
    let options = RunOptions {
        workdir: root.clone(),
        state_dir: root.join(".runner"),
        fail_fast: false,
        resume: None,
        continue_steps: false,
        only: BTreeSet::new(),
        run_id: None,
        interrupt: CancellationToken::new(),
        last_saved: Default::default(),
    };
    let record = run::execute(&plan, executor, &options, &mut Sinks::default())
        .await
        .unwrap();
    assert_eq!(record.status, RunStatus::Succeeded);
    let step = &record.steps["loud"];
    assert_eq!(step.summary, "It said HELLO.");
    assert_eq!((step.turns, step.tool_calls), (2, 1));
    assert_eq!((step.input_tokens, step.output_tokens), (14, 6));

    let seen = api.seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    let tools: Vec<&str> = seen[0].tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["shout"]);
    let result = seen[1].messages.last().unwrap().content[0].clone();
    assert_eq!(
        result,
        Block::ToolResult {
            tool_use_id: "t1".into(),
            content: "HELLO".into(),
            is_error: false
        }
    );
}
