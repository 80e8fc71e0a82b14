//! The HTTP exchange both APIs share, over reqwest: post JSON, read a bounded body, and turn
//! what went wrong into a [`ProviderError`] by meaning.
//!
//! Model requests and MCP servers share one HTTP policy ([`builder`]): proxies from the
//! environment (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`; a proxy URL's credentials
//! go as `Proxy-Authorization`, in the `CONNECT` for HTTPS), TLS by rustls checked against the
//! system's roots, a connect timeout, kept-alive connections. They differ in two things: a model
//! endpoint's redirect is never followed (see [`Endpoint`]), and a model request has no total
//! time limit, only a wait for its answer to begin and for each next piece ([`Waits`]).

use std::time::Duration;

use reqwest::header::{self, HeaderMap};
use serde_json::Value;

use super::error::{HttpFailure, ProviderError};
use super::format::body::Body;
use crate::limits::MAX_RESPONSE_BYTES;

/// Registers for redaction what a URL carries as credentials: its user info and the values of
/// query parameters whose names say they are keys or tokens.
pub fn hide_url_credentials(url: &str) {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return;
    };
    // As written in the URL and as sent (percent-decoded: `proxy%20pass` goes out as
    // `proxy pass`, base64 in a Basic header the redactor recognises by the decoded form).
    let decode = |text: &str| {
        percent_encoding::percent_decode_str(text)
            .decode_utf8_lossy()
            .into_owned()
    };
    if let Some(password) = parsed.password() {
        for (user, password) in [
            (parsed.username().to_owned(), password.to_owned()),
            (decode(parsed.username()), decode(password)),
        ] {
            crate::secrets::register(&format!("{user}:{password}"));
            crate::secrets::register(&password);
        }
    } else if !parsed.username().is_empty() {
        crate::secrets::register(parsed.username());
        crate::secrets::register(&decode(parsed.username()));
    }
    for (name, value) in parsed.query_pairs() {
        let name = name.to_ascii_lowercase();
        if [
            "key",
            "token",
            "secret",
            "password",
            "auth",
            "sig",
            "credential",
        ]
        .iter()
        .any(|word| name.contains(word))
        {
            crate::secrets::register(&value);
        }
    }
}

/// How long making a connection (DNS, TCP, proxy tunnel, TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// TLS through rustls with ring (far quicker to build than aws-lc), for every HTTP client the
/// process makes, runner's and the OTLP exporter's. Installing twice is harmless: the second
/// call reports the first provider and changes nothing.
pub fn install_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The HTTP policy every peer of runner's gets (see the module comment).
fn builder() -> reqwest::ClientBuilder {
    install_tls();
    // A proxy's credentials are hidden in every output, as an endpoint's are.
    for name in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
        for name in [name.to_owned(), name.to_ascii_lowercase()] {
            if let Ok(proxy) = std::env::var(name) {
                hide_url_credentials(&proxy);
            }
        }
    }
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        // Servers close idle connections after a minute or two; one unused for longer is not
        // trusted to be open.
        .pool_idle_timeout(Duration::from_secs(90))
}

/// How an API's error bodies read.
pub struct ErrorBodies {
    /// The human message in an error body.
    pub message: fn(&Value) -> Option<String>,
    /// Whether an error body says the prompt does not fit the context window.
    pub context_too_long: fn(&Value) -> bool,
}

/// The HTTP client for MCP servers. It follows a redirect only to the same origin (scheme, host
/// and port), at most 10: a server's configured headers (a key in `X-API-Key`, say) would go
/// along to any other host, and reqwest drops only `Authorization` and cookies there.
pub fn client() -> reqwest::Client {
    builder()
        .timeout(MCP_REQUEST_TIMEOUT)
        .redirect(reqwest::redirect::Policy::custom(|attempt| {
            let same_origin = attempt
                .previous()
                .last()
                .is_some_and(|from| from.origin() == attempt.url().origin());
            if same_origin && attempt.previous().len() <= 10 {
                attempt.follow()
            } else {
                attempt.stop()
            }
        }))
        .build()
        // Building fails only when the TLS backend cannot initialise; a default client is the
        // best that can be done then: its requests will report the problem.
        .unwrap_or_default()
}

/// How long one MCP request may take, its reply read to the end.
const MCP_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a model request may wait: for the answer to begin, and for each next piece of it
/// once it has (docs/src/models.md). There is no limit on the whole: a CPU server
/// may stream for half an hour, and the step's `timeout` bounds it.
#[derive(Debug, Clone, Copy)]
pub struct Waits {
    pub first_byte: Duration,
    pub idle: Duration,
}

impl Waits {
    /// Generous by default (a CPU server may think for minutes before its first token);
    /// `RUNNER_FIRST_BYTE_TIMEOUT` and `RUNNER_IDLE_TIMEOUT` (`90s`, `20m`) change them.
    pub fn from_env() -> Waits {
        static WAITS: std::sync::OnceLock<Waits> = std::sync::OnceLock::new();
        *WAITS.get_or_init(|| {
            let read = |name: &str, default: u64| {
                std::env::var(name)
                    .ok()
                    .and_then(|v| crate::workflow::duration::parse_duration(v.trim()).ok())
                    .filter(|d| !d.is_zero())
                    .unwrap_or(Duration::from_secs(default))
            };
            Waits {
                first_byte: read("RUNNER_FIRST_BYTE_TIMEOUT", 600),
                idle: read("RUNNER_IDLE_TIMEOUT", 300),
            }
        })
    }
}

/// The name of the variable that raises a wait, for the error that says it ran out.
fn waited(limit: Duration, variable: &str) -> String {
    format!(
        "{} (`{variable}` raises it)",
        crate::workflow::duration::format_duration(limit)
    )
}

/// The next piece of a reply, within the idle limit; `read` counts the bytes so far, for the
/// message when it breaks off.
async fn next_chunk(
    reply: &mut reqwest::Response,
    waits: Waits,
    read: usize,
) -> Result<Option<bytes::Bytes>, ProviderError> {
    match tokio::time::timeout(waits.idle, reply.chunk()).await {
        Ok(Ok(chunk)) => Ok(chunk),
        Ok(Err(err)) => Err(ProviderError::StreamBroke {
            message: format!(
                "after {}: {}",
                crate::limits::bytes(read as u64),
                chain(&err.without_url())
            ),
        }),
        Err(_) => Err(ProviderError::StreamBroke {
            message: format!(
                "nothing more came for {} after {}",
                waited(waits.idle, "RUNNER_IDLE_TIMEOUT"),
                crate::limits::bytes(read as u64)
            ),
        }),
    }
}

/// The client for model requests, one per process (its pool of kept connections shared by
/// every step). Redirects are not followed; a request that went out on a connection the server
/// closed before any byte of the answer came is sent once more, at once, on a new connection,
/// not counted as a retry: a server may close the connection after each streamed reply while
/// advertising keep-alive (llama.cpp's does), so the next request on it meets a closed socket.
/// (One the client sees closed before sending is replaced by reqwest itself.)
fn model_client() -> Result<reqwest::Client, String> {
    static CLIENT: std::sync::OnceLock<Result<reqwest::Client, String>> =
        std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            builder()
                .redirect(reqwest::redirect::Policy::none())
                .retry(
                    reqwest::retry::for_host(AnyHost)
                        .no_budget()
                        .max_retries_per_request(1)
                        .classify_fn(|attempt| match attempt.error() {
                            Some(err) if sent_unanswered(err) => attempt.retryable(),
                            _ => attempt.success(),
                        }),
                )
                .build()
                .map_err(|err| format!("the HTTP client could not be set up: {}", chain(&err)))
        })
        .clone()
}

/// Every host: the resend of [`model_client`] is for any endpoint.
struct AnyHost;

impl PartialEq<&str> for AnyHost {
    fn eq(&self, _: &&str) -> bool {
        true
    }
}

/// A request that was sent and whose connection ended before the answer's head: not a failure to
/// connect, not a timeout, nothing from TLS.
fn sent_unanswered(err: &(dyn std::error::Error + 'static)) -> bool {
    err.downcast_ref::<reqwest::Error>().is_some_and(|err| {
        err.is_request() && !err.is_connect() && !err.is_timeout() && !from_tls(err)
    })
}

/// A model endpoint: where requests go, with the headers each carries. Redirects are not
/// followed, as the providers' own SDKs do not: a followed redirect would carry the API key to
/// wherever the endpoint points, and a POST turned into a GET is never what was meant. The
/// answer says where the endpoint points instead (docs/src/models.md).
pub struct Endpoint {
    url: String,
    headers: HeaderMap,
}

impl Endpoint {
    /// The endpoint at `url`, every request to it carrying `headers`. Credentials in the URL
    /// (`http://user:pass@host`) go as Basic authorization unless `headers` has its own.
    pub fn new(url: String, headers: &HeaderMap) -> Self {
        Endpoint {
            url,
            headers: headers.clone(),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }
}

async fn json_body(reply: reqwest::Response) -> Result<Value, ProviderError> {
    let text = read_body(reply).await?;
    // A key given twice (a tool input's `path`) would be read one way here and maybe another
    // by whoever reads the transcript: refused.
    if let Some(key) = super::format::json::first_duplicate_key(&text) {
        return Err(ProviderError::InvalidResponse {
            message: format!("the reply gives `{key}` twice in one object"),
        });
    }
    serde_json::from_str(&text).map_err(|err| ProviderError::InvalidResponse {
        message: format!("the body is not JSON ({err}): {}", snippet(&text)),
    })
}

/// Posts `body` asking for a stream of server-sent events and hands each event (its type and
/// data) to `on_event` as it arrives; `Ok(None)` once the stream ended. A server that answers
/// with one JSON body instead (it ignores `stream`) gets `Ok(Some(body))`. The stream is capped
/// like a body; an error event is `on_event`'s to turn into an error. The answer must begin
/// within the first-byte wait and each next piece come within the idle wait ([`Waits`]).
pub async fn post_events(
    endpoint: &Endpoint,
    body: &Body,
    errors: &ErrorBodies,
    on_event: &mut (dyn FnMut(&str, &str) -> Result<(), ProviderError> + Send),
) -> Result<Option<Value>, ProviderError> {
    let waits = Waits::from_env();
    let begun = tokio::time::timeout(waits.first_byte, post_checked(endpoint, body, errors)).await;
    let mut reply = match begun {
        Ok(reply) => reply?,
        Err(_) => {
            return Err(ProviderError::Transport {
                message: format!(
                    "no answer began within {}",
                    waited(waits.first_byte, "RUNNER_FIRST_BYTE_TIMEOUT")
                ),
            });
        }
    };
    let streamed = reply
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !streamed {
        return json_body(reply).await.map(Some);
    }
    let mut events = super::sse::Events::new(MAX_RESPONSE_BYTES);
    let mut read = 0;
    while let Some(chunk) = next_chunk(&mut reply, waits, read).await? {
        read += chunk.len();
        match events.feed(&chunk, on_event) {
            Ok(()) => {}
            Err(super::sse::Stop::Handler(err)) => return Err(err),
            Err(super::sse::Stop::TooLarge) => {
                return Err(ProviderError::InvalidResponse {
                    message: format!(
                        "the response stream is larger than {}",
                        crate::limits::bytes(MAX_RESPONSE_BYTES as u64)
                    ),
                });
            }
        }
    }
    Ok(None)
}

/// Sends the request; a reply with an error status becomes the error it means.
async fn post_checked(
    endpoint: &Endpoint,
    body: &Body,
    errors: &ErrorBodies,
) -> Result<reqwest::Response, ProviderError> {
    let client = model_client().map_err(|message| ProviderError::Unreachable { message })?;
    let reply = client
        .post(&endpoint.url)
        .headers(endpoint.headers.clone())
        .body(body.bytes())
        .send()
        .await
        .map_err(|err| {
            let lasting = err.is_builder() || from_tls(&err);
            let err = err.without_url();
            let message = if err.is_connect() {
                format!("connection failed: {}", chain(&err))
            } else {
                chain(&err)
            };
            match lasting {
                true => ProviderError::Unreachable { message },
                false => ProviderError::Transport { message },
            }
        })?;
    let status = reply.status();
    if status.is_success() {
        return Ok(reply);
    }
    let headers = reply.headers().clone();
    if status.is_redirection() {
        let to = headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map_or_else(|| "(no Location)".to_owned(), snippet);
        return Err(ProviderError::BadRequest {
            status: status.as_u16(),
            message: format!(
                "the endpoint redirects to {to}; runner does not follow redirects: set the base URL to where it should go"
            ),
        });
    }
    let text = read_body(reply).await?;
    let parsed: Result<Value, _> = serde_json::from_str(&text);
    let message = parsed
        .as_ref()
        .ok()
        .and_then(errors.message)
        .unwrap_or_else(|| snippet(&text));
    Err(HttpFailure {
        status: status.as_u16(),
        message,
        retry_after: retry_after(&headers),
        should_retry: headers
            .get("x-should-retry")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| match v.trim() {
                "true" => Some(true),
                "false" => Some(false),
                _ => None,
            }),
        context_too_long: parsed.as_ref().is_ok_and(errors.context_too_long),
    }
    .classify())
}

/// The body as text, refused past [`MAX_RESPONSE_BYTES`]: an endless or huge body from a broken or
/// hostile server fails the request instead of growing memory until the step times out.
async fn read_body(mut reply: reqwest::Response) -> Result<String, ProviderError> {
    let too_large = || ProviderError::InvalidResponse {
        message: format!(
            "the response body is larger than {}",
            crate::limits::bytes(MAX_RESPONSE_BYTES as u64)
        ),
    };
    if reply
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > MAX_RESPONSE_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = next_chunk(&mut reply, Waits::from_env(), body.len()).await? {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// `retry-after-ms` (milliseconds), else `retry-after` (seconds, or an HTTP date).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    // A hostile or broken server may send any number: `try_from` refuses what does not fit a
    // Duration instead of panicking, and the retry policy ignores waits over a minute.
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && let Ok(wait) = Duration::try_from_secs_f64(ms / 1000.0)
    {
        return Some(wait);
    }
    let value = get("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Whether a rustls error is among `err`'s causes: TLS itself refused (an untrusted
/// certificate, no protocol both sides speak), which trying again cannot help. An I/O error
/// names its inner error's source, not the inner error itself: each inner error is looked into
/// as well.
fn from_tls(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut seen = 0;
    let mut next = vec![err];
    while let Some(cause) = next.pop() {
        seen += 1;
        if cause.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        // A chain this long is not one a connection error makes; stop rather than loop.
        if seen > 64 {
            return false;
        }
        if let Some(inner) = cause
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            next.push(inner);
        }
        next.extend(cause.source());
    }
    false
}

/// An error and its causes, each once, without the client's own layers ("error sending
/// request", "client error (Connect)") where a cause below says what happened.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let wrapper = |text: &str| {
        text.starts_with("error sending request") || text.starts_with("client error (")
    };
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(err);
    while let Some(cause) = next {
        let text = cause.to_string();
        next = cause.source();
        if (next.is_some() && wrapper(&text)) || parts.iter().any(|p| p.contains(&text)) {
            continue;
        }
        parts.push(text);
    }
    parts.join(": ")
}

fn snippet(text: &str) -> String {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return "(empty body)".into();
    }
    let short: String = trimmed.chars().take(300).collect();
    if short.len() < trimmed.len() {
        format!("{short}…")
    } else {
        short
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn retry_after_headers_parse() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
        let mut h = HeaderMap::new();
        let later = std::time::SystemTime::now() + Duration::from_secs(120);
        h.insert(
            "retry-after",
            HeaderValue::from_str(&httpdate::fmt_http_date(later)).unwrap(),
        );
        let got = retry_after(&h).unwrap();
        assert!(got > Duration::from_secs(110) && got <= Duration::from_secs(120));
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("1e+30"));
        assert_eq!(retry_after(&h), None);
    }
}
