//! How model requests travel (docs/src/models.md): proxies from the environment
//! (plain HTTP forwarded to the proxy with its credentials, HTTPS through a `CONNECT` tunnel with
//! the key inside it, `NO_PROXY` direct), kept connections reused, a kept connection the server
//! closed replaced, and HTTPS endpoints checked against the system's certificate authorities.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::fake::{Fake, anthropic_text};
use crate::support::Test;

const KEY: &str = "sk-ant-proxy-test-key-51c0d9e2";
const WORKFLOW: &str = "name = \"t\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.s]\nagent = \"explore\"\nretries = 0\nprompt = \"go\"\n";
/// `proxyuser:proxy pass` (the URL's `%20` undone), as Basic credentials.
const PROXY_AUTH: &str = "Basic cHJveHl1c2VyOnByb3h5IHBhc3M=";

/// What a server received: for each connection, the bytes of each request on it.
type Seen = Arc<Mutex<Vec<Vec<Vec<u8>>>>>;

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn reply(body: &Value, keep_alive: bool) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{}\r\n{body}",
        body.len(),
        if keep_alive {
            ""
        } else {
            "connection: close\r\n"
        }
    )
    .into_bytes()
}

fn text(text: &str) -> Value {
    json!({
        "id": "msg", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1}
    })
}

fn list_dir(id: &str) -> Value {
    json!({
        "id": "msg", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "tool_use", "id": id, "name": "list_dir", "input": {"path": "."}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 1}
    })
}

/// Reads until `got` holds a whole request head; where the head ends, `None` when the peer
/// closed first.
async fn read_head(stream: &mut (impl AsyncRead + Unpin), got: &mut Vec<u8>) -> Option<usize> {
    let mut buf = [0u8; 8192];
    loop {
        if let Some(at) = find(got, b"\r\n\r\n") {
            return Some(at + 4);
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads the request whose head ends at `head_end` to the end of its body and takes it out of
/// `got`; `None` when the peer closed first.
async fn read_body(
    stream: &mut (impl AsyncRead + Unpin),
    got: &mut Vec<u8>,
    head_end: usize,
) -> Option<Vec<u8>> {
    let length: usize = String::from_utf8_lossy(&got[..head_end])
        .to_lowercase()
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut buf = [0u8; 8192];
    while got.len() < head_end + length {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    Some(got.drain(..head_end + length).collect())
}

/// How the server behaves after each answer.
#[derive(Clone, Copy, PartialEq)]
enum After {
    /// Keeps the connection for the next request.
    Keep,
    /// Says `connection: close` and closes.
    Close,
    /// Closes without saying so (an idle timeout on the server's side).
    Drop,
}

/// A server on 127.0.0.1 answering each request with the next of `answers`. A `CONNECT` is
/// accepted, then whatever comes (a TLS hello) is recorded and the connection closed.
async fn server(answers: Vec<Value>, after: After) -> (std::net::SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let answers = Arc::new(Mutex::new(std::collections::VecDeque::from(answers)));
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let connection = {
                let mut seen = record.lock().unwrap();
                seen.push(Vec::new());
                seen.len() - 1
            };
            let record = record.clone();
            let answers = answers.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let Some(head_end) = read_head(&mut socket, &mut got).await else {
                        return;
                    };
                    if got.to_ascii_lowercase().starts_with(b"connect ") {
                        let _ = socket
                            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                            .await;
                        let mut buf = [0u8; 8192];
                        if let Ok(n) = socket.read(&mut buf).await {
                            got.extend_from_slice(&buf[..n]);
                        }
                        record.lock().unwrap()[connection].push(got);
                        return;
                    }
                    let Some(request) = read_body(&mut socket, &mut got, head_end).await else {
                        return;
                    };
                    record.lock().unwrap()[connection].push(request);
                    let answer = answers.lock().unwrap().pop_front();
                    let Some(answer) = answer else { return };
                    if socket
                        .write_all(&reply(
                            &answer,
                            after == After::Keep || after == After::Drop,
                        ))
                        .await
                        .is_err()
                        || after != After::Keep
                    {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// A server for a step of three turns (two `list_dir` calls, then an answer).
async fn three_turns(after: After) -> (std::net::SocketAddr, Seen) {
    server(vec![list_dir("t1"), list_dir("t2"), text("done")], after).await
}

fn run_with(env: &[(&str, &str)]) -> Test {
    run_as(env, "json")
}

fn run_as(env: &[(&str, &str)], format: &str) -> Test {
    let mut test = Test::new()
        .file("w.toml", WORKFLOW)
        .env("ANTHROPIC_API_KEY", KEY)
        .args(&["run", "w.toml", "--format", format]);
    for (name, value) in env {
        test = test.env(name, value);
    }
    test
}

fn proxy_url(addr: std::net::SocketAddr) -> String {
    format!("http://proxyuser:proxy%20pass@{addr}")
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_http_goes_to_the_proxy_with_its_credentials() {
    let (proxy, seen) = server(vec![text("answered by the proxy")], After::Close).await;
    let (out, _test) = run_with(&[
        ("ANTHROPIC_BASE_URL", "http://models.example.test:8000"),
        ("HTTP_PROXY", &proxy_url(proxy)),
    ])
    .run_async()
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(run["steps"]["s"]["summary"], "answered by the proxy");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "one connection to the proxy");
    let request = String::from_utf8_lossy(&seen[0][0]).into_owned();
    assert!(
        request.starts_with("POST http://models.example.test:8000/v1/messages HTTP/1.1\r\n"),
        "the request names the whole URL: {request}"
    );
    let lower = request.to_lowercase();
    assert!(
        lower.contains(&format!(
            "proxy-authorization: {}",
            PROXY_AUTH.to_lowercase()
        )),
        "{request}"
    );
    assert!(
        lower.contains("host: models.example.test:8000"),
        "{request}"
    );
    assert!(
        lower.contains("x-api-key: "),
        "the API's own headers go too"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_proxy_goes_direct() {
    let (proxy, seen) = server(vec![text("from the proxy")], After::Close).await;
    let fake = Fake::anthropic(vec![anthropic_text("direct")]).await;
    let (out, _test) = run_with(&[
        ("ANTHROPIC_BASE_URL", &fake.uri()),
        ("HTTP_PROXY", &proxy_url(proxy)),
        ("NO_PROXY", "127.0.0.1"),
    ])
    .run_async()
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_eq!(fake.requests().await.len(), 1);
    assert!(seen.lock().unwrap().is_empty(), "the proxy was used");
}

#[tokio::test(flavor = "multi_thread")]
async fn https_goes_through_a_tunnel_and_the_key_stays_inside_it() {
    let (proxy, seen) = server(Vec::new(), After::Close).await;
    let (out, _test) = run_with(&[
        ("ANTHROPIC_BASE_URL", "https://models.example.test"),
        ("HTTPS_PROXY", &proxy_url(proxy)),
    ])
    .run_async()
    .await;
    // The proxy cannot answer TLS as models.example.test: the step fails, naming the endpoint.
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    let error = run["steps"]["s"]["error"].as_str().unwrap();
    assert!(
        error.contains("https://models.example.test/v1/messages"),
        "{error}"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "one tunnel");
    let tunnel = &seen[0][0];
    let text = String::from_utf8_lossy(tunnel);
    assert!(
        text.starts_with("CONNECT models.example.test:443 HTTP/1.1\r\n"),
        "{text}"
    );
    assert!(text.contains(PROXY_AUTH), "the proxy's credentials: {text}");
    let head_end = find(tunnel, b"\r\n\r\n").unwrap() + 4;
    let hello = &tunnel[head_end..];
    assert!(
        hello.first() == Some(&0x16) && find(hello, b"models.example.test").is_some(),
        "a TLS hello naming the endpoint follows"
    );
    assert!(
        find(tunnel, KEY.as_bytes()).is_none(),
        "the key went to the proxy in the clear"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn turns_share_one_kept_connection() {
    let (api, seen) = three_turns(After::Keep).await;
    let (out, _test) = run_with(&[("ANTHROPIC_BASE_URL", &format!("http://{api}"))])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "one connection");
    assert_eq!(seen[0].len(), 3, "three requests on it");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_the_server_closes_is_not_used_again() {
    // Each answer says `connection: close` (retries = 0: a request sent on a closed connection
    // would fail the step).
    let (api, seen) = three_turns(After::Close).await;
    let (out, _test) = run_as(&[("ANTHROPIC_BASE_URL", &format!("http://{api}"))], "jsonl")
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert!(!out.stdout.contains("\"retrying\""), "{}", out.stdout);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3, "a new connection for each request");
    assert!(
        seen.iter().all(|requests| requests.len() == 1),
        "one request each"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kept_connection_the_server_dropped_is_replaced() {
    // Each answer ends its connection without a word, as a server's idle timeout does. A kept
    // connection seen closed is not used again; one the server closes just as a request goes
    // out (a race every HTTP client has) fails that request, which is retried like any other.
    let (api, seen) = three_turns(After::Drop).await;
    let (out, _test) = Test::new()
        .file("w.toml", &WORKFLOW.replace("retries = 0", "retries = 2"))
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", &format!("http://{api}"))
        .args(&["run", "w.toml", "--format", "json"])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let seen = seen.lock().unwrap();
    let answered: Vec<usize> = seen.iter().map(Vec::len).filter(|n| *n > 0).collect();
    assert_eq!(
        answered,
        [1, 1, 1],
        "each request answered once, each on its own connection"
    );
}

/// A TLS model API on 127.0.0.1 answering one request. Its certificate (for `localhost` and
/// 127.0.0.1, valid until 2126) is signed by `tests/fixtures/tls/ca.pem`, a test authority made
/// with openssl for these tests only; `other-ca.pem` signed nothing here. What it received, and
/// whether a TLS session was set up.
async fn tls_server() -> (std::net::SocketAddr, Seen, Arc<Mutex<bool>>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls");
    let certs = CertificateDer::pem_file_iter(dir.join("server.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let shook = Arc::new(Mutex::new(false));
    let (record, handshake) = (seen.clone(), shook.clone());
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            let Ok(mut stream) = acceptor.accept(socket).await else {
                continue;
            };
            *handshake.lock().unwrap() = true;
            let mut got = Vec::new();
            let Some(head_end) = read_head(&mut stream, &mut got).await else {
                continue;
            };
            let Some(request) = read_body(&mut stream, &mut got, head_end).await else {
                continue;
            };
            record.lock().unwrap().push(vec![request]);
            let _ = stream.write_all(&reply(&text("over TLS"), false)).await;
            let _ = stream.shutdown().await;
        }
    });
    (addr, seen, shook)
}

fn tls_run(addr: std::net::SocketAddr, authority: &str) -> Test {
    let ca = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(authority);
    run_with(&[
        (
            "ANTHROPIC_BASE_URL",
            &format!("https://localhost:{}", addr.port()),
        ),
        // The system's authorities, as rustls reads them: only the test's.
        ("SSL_CERT_FILE", ca.to_str().unwrap()),
        ("SSL_CERT_DIR", ""),
    ])
}

#[tokio::test(flavor = "multi_thread")]
async fn an_https_endpoint_with_a_trusted_certificate_is_reached() {
    let (addr, seen, _) = tls_server().await;
    let (out, _test) = tls_run(addr, "ca.pem").run_async().await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(run["steps"]["s"]["summary"], "over TLS");
    let seen = seen.lock().unwrap();
    let request = String::from_utf8_lossy(&seen[0][0]).to_lowercase();
    assert!(
        request.starts_with("post /v1/messages http/1.1\r\n"),
        "{request}"
    );
    assert!(request.contains(&format!("x-api-key: {}", KEY.to_lowercase())));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_https_endpoint_whose_certificate_is_not_trusted_gets_nothing() {
    let (addr, seen, shook) = tls_server().await;
    // The default retries: an untrusted certificate is not worth another attempt.
    let (out, _test) = tls_run(addr, "other-ca.pem")
        .file("w.toml", &WORKFLOW.replace("retries = 0\n", ""))
        .run_async()
        .await;
    assert_eq!(out.status, 1, "{}", out.transcript());
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    let error = run["steps"]["s"]["error"].as_str().unwrap();
    assert!(
        error.contains("certificate")
            && error.contains("https://localhost:")
            && error.ends_with(", 1 attempt)"),
        "{error}"
    );
    assert!(!*shook.lock().unwrap(), "the handshake went through");
    assert!(seen.lock().unwrap().is_empty(), "a request was sent");
}

/// A proxy that echoes the request's headers back (into the reply the model "wrote") shows its
/// own credential, base64 in `Proxy-Authorization`, nowhere runner writes.
#[tokio::test(flavor = "multi_thread")]
async fn a_proxy_that_echoes_its_credential_has_it_hidden() {
    let echoed = format!("you sent Proxy-Authorization: {PROXY_AUTH}");
    let (proxy, _seen) = server(vec![text(&echoed)], After::Close).await;
    let (out, test) = run_with(&[
        ("ANTHROPIC_BASE_URL", "http://models.example.test:8000"),
        ("HTTP_PROXY", &proxy_url(proxy)),
    ])
    .run_async()
    .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let encoded = PROXY_AUTH.trim_start_matches("Basic ");
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    let summary = run["steps"]["s"]["summary"].as_str().unwrap();
    assert!(
        summary.contains("[hidden]") && !summary.contains(encoded),
        "{summary}"
    );
    assert!(!out.stderr.contains(encoded), "{}", out.stderr);
    let runs = test.path().join(".runner/runs");
    let run_dir = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let transcript = std::fs::read_to_string(run_dir.join("steps/s/transcript.jsonl")).unwrap();
    assert!(!transcript.contains(encoded), "{transcript}");
}

/// Credentials in the endpoint's URL go as Basic authorization (percent-decoded), never in the
/// request line.
#[tokio::test(flavor = "multi_thread")]
async fn url_credentials_go_as_basic_authorization() {
    let (api, seen) = server(vec![text("ok")], After::Close).await;
    let (out, _test) = run_with(&[("ANTHROPIC_BASE_URL", &format!("http://us%65r:p%40ss@{api}"))])
        .run_async()
        .await;
    assert_eq!(out.status, 0, "{}", out.transcript());
    let seen = seen.lock().unwrap();
    let request = String::from_utf8_lossy(&seen[0][0]).to_lowercase();
    assert!(
        request.starts_with("post /v1/messages http/1.1\r\n"),
        "{request}"
    );
    // "user:p@ss"
    assert!(
        request.contains("authorization: basic dxnlcjpwqhnz\r\n"),
        "{request}"
    );
    assert!(!out.stdout.contains("p%40ss") && !out.stderr.contains("p%40ss"));
}
