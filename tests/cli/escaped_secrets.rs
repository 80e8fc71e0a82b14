//! Secrets in every form they are written in (docs/src/security.md, "Secrets"): a PEM key of
//! several lines, a JSON credentials blob and a password with a quote and a backslash, taken
//! from the environment, reach every sink (transcripts, cassettes, run.json, JSONL, JUnit, the
//! GitHub job summary and log, the HTML report, `show`, OTLP spans with content, the drift line
//! of a replay, stderr). Then every byte runner wrote is searched for any piece of them, raw and
//! in every escaped form a writer could give it (JSON, JSON in JSON, ASCII JSON, XML and HTML
//! entities, URL encoding, base64).

use base64::Engine as _;
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::fake::{Fake, anthropic_text, anthropic_tool};
use crate::support::Test;

const PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCpemLineOne0aa11\nBKcwggSjAgEAAoIBAQC7pemLineTwo0bb22zz\n-----END PRIVATE KEY-----\n";
const CREDENTIALS: &str = r#"{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nMIIBVgIBADANcredsKeyLine0cc33\n-----END PRIVATE KEY-----\n", "client_email": "bot@example.iam"}"#;
const PASSWORD: &str = r#"pa"ss\wo'rd<&>marker-0dd44"#;

/// What must never show: each line of each key, the password, and the markers inside them (a
/// piece of a secret cut in two).
const PIECES: &[&str] = &[
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCpemLineOne0aa11",
    "BKcwggSjAgEAAoIBAQC7pemLineTwo0bb22zz",
    "pemLineOne0aa11",
    "pemLineTwo0bb22zz",
    "MIIBVgIBADANcredsKeyLine0cc33",
    "credsKeyLine0cc33",
    PASSWORD,
    r#"pa"ss\wo'rd"#,
    "marker-0dd44",
];

/// `text` as a JSON string's inside (serde's escaping).
fn json_inside(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap();
    quoted[1..quoted.len() - 1].to_owned()
}

/// Every form of `piece` a writer could give it.
fn forms(piece: &str) -> Vec<String> {
    let json = json_inside(piece);
    let mut out = vec![
        piece.to_owned(),
        json.clone(),
        json_inside(&json),
        json.replace('/', "\\/"),
        json.replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026"),
        percent_encoding::utf8_percent_encode(piece, percent_encoding::NON_ALPHANUMERIC)
            .to_string(),
        piece.replace('%', "%25").replace('\n', "%0A"),
        piece.replace('|', "\\|"),
    ];
    for text in [piece.to_owned(), json] {
        let base = text
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        out.push(base.clone());
        out.push(base.replace('"', "&quot;").replace('\'', "&apos;"));
        out.push(base.replace('"', "&quot;").replace('\'', "&#x27;"));
        out.push(base.replace('"', "&#34;").replace('\'', "&#39;"));
        out.push(
            base.replace('"', "&quot;")
                .replace('\'', "&#x27;")
                .replace('/', "&#x2f;"),
        );
    }
    // Base64 at each alignment: the characters made of the piece's own bits.
    for offset in 0..3usize {
        let mut padded = vec![0u8; offset];
        padded.extend_from_slice(piece.as_bytes());
        let encoded = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&padded);
        let start = (offset * 8).div_ceil(6);
        let end = padded.len() * 8 / 6;
        out.push(encoded[start..end].to_owned());
    }
    out.sort();
    out.dedup();
    out
}

/// Every file under `dir` (but the inputs), with its bytes.
fn every_file(dir: &std::path::Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            every_file(&path, out);
        } else if !matches!(name.as_str(), "secrets.txt" | "w.toml") {
            out.push((path.display().to_string(), std::fs::read(&path).unwrap()));
        }
    }
}

/// No piece of a secret, in any form, in `what`.
fn assert_clean(where_: &str, what: &[u8]) {
    let text = String::from_utf8_lossy(what);
    for piece in PIECES {
        for form in forms(piece) {
            assert!(
                !text.contains(&form),
                "`{form}` (a form of `{piece}`) in {where_}:\n{text}"
            );
        }
    }
}

/// An OTLP/HTTP receiver that takes every export.
async fn receiver() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw("{}", "application/json"))
        .mount(&server)
        .await;
    server
}

#[tokio::test(flavor = "multi_thread")]
async fn escaped_secrets_are_hidden_in_every_sink() {
    let missing = format!("missing-{PASSWORD}.txt");
    let answer = format!("Found these:\n{PEM}\n{CREDENTIALS}\nand the password {PASSWORD}");
    let fake =
        Fake::anthropic_fn(
            move |body| match body["messages"].as_array().map_or(0, Vec::len) {
                1 => anthropic_tool("t1", "read_file", json!({"path": "secrets.txt"})),
                3 => anthropic_tool("t2", "read_file", json!({"path": missing})),
                _ => anthropic_text(&answer),
            },
        )
        .await;
    let otlp = receiver().await;
    // The workflow's name holds the password too: the job summary shows a failure's first line
    // only, and the name in its title.
    let name = serde_json::to_string(&format!("leaky {PASSWORD}")).unwrap();
    let workflow = r#"name = NAME
[models]
default = "anthropic/claude-test"
[steps.read]
agent = "explore"
prompt = "Read secrets.txt and tell me what it holds."
[steps.fail]
run = "cat secrets.txt >&2; exit 3"
"#
    .replace("NAME", &name);
    let secrets = format!("notes: the deploy key\n{PEM}{CREDENTIALS}\n{PASSWORD}\n");
    let summary = tempfile::NamedTempFile::new().unwrap();
    let summary_path = summary.path().to_str().unwrap().to_owned();
    let base = Test::new()
        .file("w.toml", &workflow)
        .file("secrets.txt", &secrets)
        .env("DEPLOY_KEY", PEM)
        .env("GCP_CREDENTIALS", CREDENTIALS)
        .env("DB_PASSWORD", PASSWORD)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary_path)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp.uri())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        .anthropic_api(&fake.uri(), "sk-ant-escaped-secrets-test-key");
    let mut written: Vec<(String, Vec<u8>)> = Vec::new();
    let (recorded, test) = base
        .args(&[
            "run",
            "w.toml",
            "--record",
            "cassettes",
            "--junit",
            "junit.xml",
            "--format",
            "jsonl",
        ])
        .run_async()
        .await;
    // The command step fails (its stderr holds the secrets), the model's step succeeds.
    assert_eq!(recorded.status, 1, "{}", recorded.transcript());
    let (report, test) = test
        .clear_args()
        .args(&["report", "latest", "-o", "report.html"])
        .run_async()
        .await;
    assert_eq!(report.status, 0, "{}", report.transcript());
    let (show, test) = test
        .clear_args()
        .args(&["show", "latest", "read"])
        .run_async()
        .await;
    assert_eq!(show.status, 0, "{}", show.transcript());
    // The file changes just before the key: the replay's first request after the read drifts,
    // and the drift line shows what is around the difference.
    std::fs::write(
        test.path().join("secrets.txt"),
        secrets.replace("the deploy key", "THE DEPLOY KEY"),
    )
    .unwrap();
    let (replayed, test) = test
        .clear_args()
        .args(&[
            "run",
            "w.toml",
            "--replay",
            "cassettes",
            "--format",
            "jsonl",
        ])
        .run_async()
        .await;
    assert_eq!(replayed.status, 1, "{}", replayed.transcript());

    // Each sink was reached by the secrets (so each search below means something).
    let read = |path: &str| std::fs::read_to_string(test.path().join(path)).unwrap();
    let junit = read("junit.xml");
    assert!(junit.contains("[hidden]"), "{junit}");
    let page = read("report.html");
    assert!(page.contains("[hidden]"), "the report");
    assert!(show.stdout.contains("[hidden]"), "{}", show.stdout);
    let github = std::fs::read_to_string(&summary_path).unwrap();
    assert!(github.contains("[hidden]"), "{github}");
    assert!(recorded.stdout.contains("[hidden]"), "JSONL");
    assert!(recorded.stderr.contains("[hidden]"), "{}", recorded.stderr);
    assert!(
        replayed.stdout.contains("\"replay_drift\""),
        "{}",
        replayed.stdout
    );
    assert!(
        replayed.stderr.contains("first difference"),
        "{}",
        replayed.stderr
    );
    let bodies: Vec<u8> = otlp
        .received_requests()
        .await
        .unwrap_or_default()
        .into_iter()
        .flat_map(|r| r.body)
        .collect();
    assert!(
        String::from_utf8_lossy(&bodies).contains("[hidden]"),
        "the spans carry content"
    );

    every_file(test.path(), &mut written);
    let names: Vec<&str> = written.iter().map(|(n, _)| n.as_str()).collect();
    for wanted in ["run.json", "transcript.jsonl", "index.json", "record.json"] {
        assert!(
            names.iter().any(|n| n.ends_with(wanted)),
            "{wanted}: {names:?}"
        );
    }
    written.push(("the GitHub summary".into(), github.into_bytes()));
    written.push(("the OTLP bodies".into(), bodies));
    for (what, out) in [
        ("recording", &recorded),
        ("report", &report),
        ("show", &show),
        ("replay", &replayed),
    ] {
        written.push((format!("{what}: stdout"), out.stdout.clone().into_bytes()));
        written.push((format!("{what}: stderr"), out.stderr.clone().into_bytes()));
    }
    for (what, bytes) in &written {
        assert_clean(what, bytes);
    }
    // The model was sent none of them either.
    for body in fake.bodies().await {
        assert_clean("a request", body.to_string().as_bytes());
    }
}
