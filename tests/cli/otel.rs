//! OpenTelemetry traces (docs/src/runs.md "Traces"), sent by runner's exporter to an OTLP/HTTP
//! receiver started here (an HTTP server on 127.0.0.1 that decodes what it is sent with the
//! protocol's own types, `opentelemetry-proto`), over `http/protobuf` and `http/json`: the span
//! tree, the GenAI attributes and token counts, content only when asked for and redacted, and
//! nothing sent when the variables turn traces off.

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message as _;
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::fake::{Fake, anthropic_text, anthropic_tool};
use crate::support::Test;

/// A key long enough to be hidden; the notes file holds it, so a tool's output does.
const KEY: &str = "sk-ant-otel-secret-0123456789";

/// One span as the receiver got it.
#[derive(Debug, Clone)]
pub struct Received {
    pub name: String,
    id: Vec<u8>,
    parent: Vec<u8>,
    trace: Vec<u8>,
    kind: i32,
    pub error: bool,
    pub attributes: BTreeMap<String, String>,
}

impl Received {
    pub fn attr(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

/// The OTLP/HTTP receiver: answers every export with success (an empty response message in the
/// request's encoding).
pub async fn receiver() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/traces"))
        .respond_with(|request: &wiremock::Request| {
            let json = request
                .headers
                .get("content-type")
                .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
            if json {
                ResponseTemplate::new(200).set_body_raw("{}", "application/json")
            } else {
                ResponseTemplate::new(200).set_body_raw(Vec::new(), "application/x-protobuf")
            }
        })
        .mount(&server)
        .await;
    server
}

/// Every span the receiver was sent, decoded by the request's content type; and the raw bodies.
pub async fn spans(server: &MockServer) -> (Vec<Received>, Vec<u8>) {
    let mut out = Vec::new();
    let mut raw = Vec::new();
    for request in server.received_requests().await.unwrap_or_default() {
        let content_type = request
            .headers
            .get("content-type")
            .map(|v| v.to_str().unwrap_or_default().to_owned())
            .unwrap_or_default();
        raw.extend_from_slice(&request.body);
        let export: ExportTraceServiceRequest = if content_type.starts_with("application/json") {
            serde_json::from_slice(&request.body).expect("OTLP JSON")
        } else {
            assert_eq!(content_type, "application/x-protobuf");
            ExportTraceServiceRequest::decode(request.body.as_slice()).expect("OTLP protobuf")
        };
        for resource in export.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref()?.value.clone());
            assert_eq!(service, Some(Any::StringValue("runner".into())));
            for scope in resource.scope_spans {
                for span in scope.spans {
                    let attributes = span
                        .attributes
                        .iter()
                        .map(|kv| {
                            let value = match kv.value.as_ref().and_then(|v| v.value.clone()) {
                                Some(Any::StringValue(s)) => s,
                                Some(Any::IntValue(i)) => i.to_string(),
                                Some(Any::BoolValue(b)) => b.to_string(),
                                Some(Any::DoubleValue(d)) => d.to_string(),
                                other => format!("{other:?}"),
                            };
                            (kv.key.clone(), value)
                        })
                        .collect();
                    out.push(Received {
                        name: span.name,
                        id: span.span_id,
                        parent: span.parent_span_id,
                        trace: span.trace_id,
                        kind: span.kind,
                        error: span.status.is_some_and(|s| s.code == 2),
                        attributes,
                    });
                }
            }
        }
    }
    (out, raw)
}

/// A step that reads a file and runs a check; a fan-out of two instances; a step whose agent
/// starts a subagent.
async fn traced_run(protocol: &str, capture: bool) -> (Vec<Received>, Vec<u8>, String) {
    let fake = Fake::anthropic_fn(|body| {
        let first = body["messages"][0].to_string();
        let count = body["messages"].as_array().map_or(0, Vec::len);
        if first.contains("MARK-read") && count == 1 {
            return anthropic_tool("t1", "read_file", json!({"path": "notes.txt"}));
        }
        if first.contains("MARK-lead") && count == 1 {
            return anthropic_tool(
                "c1",
                "task",
                json!({"description": "look", "prompt": "MARK-sub look", "subagent_type": "explore"}),
            );
        }
        anthropic_text("done")
    })
    .await;
    let server = receiver().await;
    let workflow = r#"name = "traced"
[models]
default = "anthropic/claude-test"
[steps.read]
agent = "explore"
prompt = "MARK-read the notes"
checks = ["true"]
[steps.each]
agent = "explore"
needs = ["read"]
for_each = ["a", "b"]
prompt = "MARK-each {{ item }}"
[steps.lead]
agent = "code"
prompt = "MARK-lead"
"#;
    let mut test = Test::new()
        .file("w.toml", workflow)
        .file("notes.txt", &format!("the notes hold {KEY} by mistake\n"))
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", &fake.uri())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &server.uri())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
    if capture {
        test = test.env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true");
    }
    let (out, _test) = test.args(&["run", "w.toml"]).run_async().await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let (spans, raw) = spans(&server).await;
    (spans, raw, out.stderr)
}

fn check_tree(spans: &[Received]) {
    let named =
        |name: &str| -> Vec<&Received> { spans.iter().filter(|s| s.name == name).collect() };
    let one = |name: &str| -> &Received {
        let found = named(name);
        assert_eq!(found.len(), 1, "{name}: {spans:#?}");
        found[0]
    };
    // One trace, rooted at the run.
    let root = one("invoke_workflow traced");
    assert!(root.parent.is_empty());
    assert!(spans.iter().all(|s| s.trace == root.trace), "one trace");
    assert_eq!(root.attr("gen_ai.operation.name"), "invoke_workflow");
    assert_eq!(root.attr("gen_ai.workflow.name"), "traced");
    assert_eq!(root.attr("runner.run.status"), "succeeded");
    let by_step = |id: &str| -> &Received {
        spans
            .iter()
            .find(|s| s.attr("gen_ai.agent.id") == id)
            .unwrap_or_else(|| panic!("no span for {id}: {spans:#?}"))
    };
    let children =
        |of: &Received| -> Vec<&Received> { spans.iter().filter(|s| s.parent == of.id).collect() };
    // Steps under the run, instances under their step, the subagent under its step.
    let read = by_step("read");
    assert_eq!(read.name, "invoke_agent explore");
    assert_eq!(read.parent, root.id);
    assert_eq!(read.kind, 1, "internal");
    assert_eq!(read.attr("gen_ai.provider.name"), "anthropic");
    assert_eq!(read.attr("gen_ai.request.model"), "claude-test");
    let each = by_step("each");
    assert_eq!(each.parent, root.id);
    for instance in ["each[0]", "each[1]"] {
        assert_eq!(by_step(instance).parent, each.id, "{instance}");
    }
    let lead = by_step("lead");
    assert_eq!(lead.parent, root.id);
    let sub = by_step("lead/explore#1");
    assert_eq!(sub.name, "invoke_agent explore");
    assert_eq!(sub.parent, lead.id);
    assert!(
        children(sub).iter().any(|s| s.name == "chat claude-test"),
        "the subagent's request is under it"
    );
    // The read step: two requests, one tool call, one check, each under it.
    let under: Vec<&str> = children(read).iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        under.iter().filter(|n| **n == "chat claude-test").count(),
        2,
        "{under:?}"
    );
    assert!(under.contains(&"execute_tool read_file"), "{under:?}");
    assert!(under.contains(&"check"), "{under:?}");
    let tool = children(read)
        .into_iter()
        .find(|s| s.name == "execute_tool read_file")
        .unwrap();
    assert_eq!(tool.attr("gen_ai.tool.name"), "read_file");
    assert_eq!(tool.attr("gen_ai.operation.name"), "execute_tool");
    let check = children(read)
        .into_iter()
        .find(|s| s.name == "check")
        .unwrap();
    assert_eq!(check.attr("process.exit.code"), "0");
    assert_eq!(check.attr("runner.check.command"), "true");
    assert!(!check.error);
    // Token counts as the fake reports them: the tool call's reply 100 input, 50 written to the
    // cache, 20 output; the answer 10 input, 150 read from the cache, 30 output. input_tokens
    // counts every input token, cached or not.
    let chat = |turn: &str| {
        children(read)
            .into_iter()
            .find(|s| s.name.starts_with("chat") && s.attr("runner.turn") == turn)
            .unwrap_or_else(|| panic!("no request {turn} of read"))
    };
    for (turn, input, output, written, cached) in [
        ("1", "150", "20", "50", "0"),
        ("2", "160", "30", "0", "150"),
    ] {
        let chat = chat(turn);
        assert_eq!(chat.kind, 3, "client");
        assert_eq!(chat.attr("gen_ai.operation.name"), "chat");
        assert_eq!(chat.attr("gen_ai.provider.name"), "anthropic");
        assert_eq!(chat.attr("gen_ai.request.model"), "claude-test");
        assert_eq!(chat.attr("gen_ai.usage.input_tokens"), input, "{chat:?}");
        assert_eq!(chat.attr("gen_ai.usage.output_tokens"), output, "{chat:?}");
        assert_eq!(
            chat.attr("gen_ai.usage.cache_creation.input_tokens"),
            written
        );
        assert_eq!(chat.attr("gen_ai.usage.cache_read.input_tokens"), cached);
    }
    assert_eq!(read.attr("gen_ai.usage.input_tokens"), "310");
    assert_eq!(read.attr("gen_ai.usage.output_tokens"), "50");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_is_one_trace_over_http_protobuf_without_content() {
    let (spans, raw, stderr) = traced_run("http/protobuf", false).await;
    assert!(!stderr.contains("warning"), "{stderr}");
    check_tree(&spans);
    // No prompt, reply or tool text without the content variable; the key nowhere.
    for span in &spans {
        for key in [
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
            // The call's id is the model's (or the server's) text.
            "gen_ai.tool.call.id",
        ] {
            assert!(!span.attributes.contains_key(key), "{key} in {span:?}");
        }
    }
    let raw = String::from_utf8_lossy(&raw);
    assert!(!raw.contains("the notes hold"), "tool output went out");
    assert!(!raw.contains("MARK-read"), "the prompt went out");
    assert!(!raw.contains(KEY));
}

#[tokio::test(flavor = "multi_thread")]
async fn content_goes_out_redacted_over_http_json_when_asked_for() {
    let (spans, raw, _) = traced_run("http/json", true).await;
    check_tree(&spans);
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool read_file")
        .unwrap();
    assert_eq!(tool.attr("gen_ai.tool.call.id"), "t1");
    let result = tool.attr("gen_ai.tool.call.result");
    assert!(
        result.contains("the notes hold [hidden] by mistake"),
        "{result}"
    );
    assert!(
        tool.attr("gen_ai.tool.call.arguments")
            .contains("notes.txt")
    );
    let first = spans.iter().find(|s| {
        s.name.starts_with("chat") && s.attr("gen_ai.input.messages").contains("MARK-read")
    });
    assert!(first.is_some(), "the prompt is on its request's span");
    assert!(
        spans
            .iter()
            .any(|s| s.attr("gen_ai.output.messages").contains("done")),
        "replies are on their spans"
    );
    assert!(
        !String::from_utf8_lossy(&raw).contains(KEY),
        "the key went out"
    );
}

/// Set but turned off, or set to a protocol runner cannot speak: nothing is sent, and the
/// second says why.
#[tokio::test(flavor = "multi_thread")]
async fn traces_turned_off_send_nothing() {
    let fake = Fake::anthropic(vec![anthropic_text("a"), anthropic_text("b")]).await;
    let server = receiver().await;
    let workflow = "name = \"quiet\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.s]\nagent = \"explore\"\nprompt = \"look\"\n";
    let base = || {
        Test::new()
            .file("w.toml", workflow)
            .env("ANTHROPIC_API_KEY", "sk-test")
            .env("ANTHROPIC_BASE_URL", &fake.uri())
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &server.uri())
            .args(&["run", "w.toml"])
    };
    let (off, _) = base().env("OTEL_SDK_DISABLED", "true").run_async().await;
    assert_eq!(off.status, 0, "{}", off.transcript());
    let (grpc, _) = base()
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .run_async()
        .await;
    assert_eq!(grpc.status, 0, "{}", grpc.transcript());
    assert!(
        grpc.stderr.contains(
            "warning: no traces: OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported: runner exports over `http/protobuf` or `http/json`"
        ),
        "{}",
        grpc.stderr
    );
    assert!(
        server
            .received_requests()
            .await
            .unwrap_or_default()
            .is_empty()
    );
}

/// A receiver that is not there: the run is not held up or failed by it, and says the traces
/// did not go.
#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_that_is_down_is_a_warning() {
    let fake = Fake::anthropic(vec![anthropic_text("a")]).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let workflow = "name = \"down\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.s]\nagent = \"explore\"\nprompt = \"look\"\n";
    let (out, _) = Test::new()
        .file("w.toml", workflow)
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.uri())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .args(&["run", "w.toml", "--no-progress"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(
        out.stderr.contains(&format!(
            "warning: traces were not all sent to {endpoint}/v1/traces: "
        )),
        "{}",
        out.stderr
    );
}
