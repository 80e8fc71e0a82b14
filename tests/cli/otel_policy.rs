//! The OTLP exporter under runner's policy (docs/src/runs.md, "Traces"): the endpoint's
//! credentials are secrets, no redirect is followed (the headers of `OTEL_EXPORTER_OTLP_HEADERS`
//! go to the endpoint named and nowhere else), and without content capture nothing the model
//! chose goes out: a tool it was not offered is `unknown`, call ids and errors stay home.

use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::fake::{Fake, anthropic_text, anthropic_tools};
use crate::otel::{receiver, spans};
use crate::support::Test;

const WORKFLOW: &str = "name = \"policy\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.s]\nagent = \"explore\"\nprompt = \"look\"\n";

/// A run of [`WORKFLOW`] exporting to `endpoint` (through `variable`), with `env` besides.
async fn traced(fake: &Fake, variable: &str, endpoint: &str, env: &[(&str, &str)]) -> String {
    let mut test = Test::new()
        .file("w.toml", WORKFLOW)
        .file("notes.txt", "notes\n")
        .anthropic_api(&fake.uri(), "sk-ant-otel-policy-test")
        .env(variable, endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
    for (name, value) in env {
        test = test.env(name, value);
    }
    let (out, _test) = test
        .args(&["run", "w.toml", "--no-progress"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    out.stderr
}

/// A receiver that is down makes runner warn, naming the endpoint: a password or a key in its
/// URL shows hidden there, whichever variable names it.
#[tokio::test(flavor = "multi_thread")]
async fn otlp_endpoint_credentials_are_hidden_in_the_warning() {
    const PASSWORD: &str = "otlpUrlPassw0rdMarker";
    const QUERY_KEY: &str = "otlpQueryKeyMarker42";
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let endpoint = format!("http://tracer:{PASSWORD}@{addr}/otlp?api_key={QUERY_KEY}");
    for variable in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ] {
        let fake = Fake::anthropic(vec![anthropic_text("done")]).await;
        let stderr = traced(&fake, variable, &endpoint, &[]).await;
        assert!(
            stderr.contains("warning: traces were not all sent to http://[hidden]@"),
            "{variable}: {stderr}"
        );
        assert!(!stderr.contains(PASSWORD), "{variable}: {stderr}");
        assert!(!stderr.contains(QUERY_KEY), "{variable}: {stderr}");
    }
}

/// A receiver that redirects elsewhere: the export is not sent on (the headers stay with the
/// endpoint named), and the run says the traces did not go.
#[tokio::test(flavor = "multi_thread")]
async fn otlp_exports_follow_no_redirect() {
    const HEADER: &str = "otlpHeaderKeyMarker77";
    let elsewhere = receiver().await;
    let redirecting = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(307)
                .insert_header("location", format!("{}/v1/traces", elsewhere.uri())),
        )
        .mount(&redirecting)
        .await;
    let fake = Fake::anthropic(vec![anthropic_text("done")]).await;
    let headers = format!("x-api-key={HEADER}");
    let stderr = traced(
        &fake,
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        &redirecting.uri(),
        &[("OTEL_EXPORTER_OTLP_HEADERS", &headers)],
    )
    .await;
    let asked = redirecting.received_requests().await.unwrap_or_default();
    assert!(!asked.is_empty(), "the endpoint was asked");
    assert!(
        asked
            .iter()
            .all(|r| r.headers.get("x-api-key").is_some_and(|v| v == HEADER)),
        "the endpoint gets its headers"
    );
    let followed = elsewhere.received_requests().await.unwrap_or_default();
    assert!(
        followed.is_empty(),
        "the redirect was followed: {followed:?}"
    );
    assert!(
        stderr.contains("warning: traces were not all sent to") && stderr.contains("307"),
        "{stderr}"
    );
    assert!(!stderr.contains(HEADER), "{stderr}");
}

/// Without content capture, a call to a tool the step was not offered is `unknown` (its name is
/// the model's text), and no call id or error goes out; with capture the id does, and the name
/// is still `unknown`.
#[tokio::test(flavor = "multi_thread")]
async fn otlp_names_no_tool_the_step_was_not_offered() {
    const TOOL: &str = "not_offered_marker_tool";
    const CALL_ID: &str = "call-id-marker-5150";
    for capture in [false, true] {
        let fake = Fake::anthropic(vec![
            anthropic_tools(&[
                (CALL_ID, TOOL, json!({})),
                ("t2", "read_file", json!({"path": "notes.txt"})),
            ]),
            anthropic_text("done"),
        ])
        .await;
        let server = receiver().await;
        let env: &[(&str, &str)] = if capture {
            &[("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")]
        } else {
            &[]
        };
        traced(&fake, "OTEL_EXPORTER_OTLP_ENDPOINT", &server.uri(), env).await;
        let (spans, raw) = spans(&server).await;
        let tools: Vec<(&str, &str)> = spans
            .iter()
            .filter(|s| s.attr("gen_ai.operation.name") == "execute_tool")
            .map(|s| (s.name.as_str(), s.attr("gen_ai.tool.name")))
            .collect();
        assert_eq!(
            tools,
            [
                ("execute_tool unknown", "unknown"),
                ("execute_tool read_file", "read_file")
            ],
            "capture {capture}"
        );
        let unknown = spans
            .iter()
            .find(|s| s.name == "execute_tool unknown")
            .unwrap();
        assert!(unknown.error, "the call failed: {unknown:?}");
        let raw = String::from_utf8_lossy(&raw);
        if capture {
            assert_eq!(unknown.attr("gen_ai.tool.call.id"), CALL_ID);
        } else {
            assert!(!raw.contains(TOOL), "the model's tool name went out");
            assert!(!raw.contains(CALL_ID), "the model's call id went out");
        }
    }
}

/// Without content capture a failed step's span says it failed, not why (the why quotes what
/// a command printed or the model answered).
#[tokio::test(flavor = "multi_thread")]
async fn otlp_sends_no_error_text_without_content_capture() {
    let server = receiver().await;
    let workflow = "name = \"fails\"\n[steps.c]\nrun = \"echo error-text-marker-31 >&2; exit 4\"\n";
    let (out, _test) = Test::new()
        .file("w.toml", workflow)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &server.uri())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .args(&["run", "w.toml", "--no-progress"])
        .run_async()
        .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    assert!(
        out.stdout.contains("error-text-marker-31") || out.stderr.contains("error-text-marker-31"),
        "{}",
        out.transcript()
    );
    let (spans, raw) = spans(&server).await;
    let step = spans
        .iter()
        .find(|s| s.attr("runner.step.id") == "c")
        .unwrap();
    assert!(step.error, "{step:?}");
    assert!(
        !String::from_utf8_lossy(&raw).contains("error-text-marker-31"),
        "the error's text went out"
    );
}
