//! The HTTP exchange both APIs share: post JSON, read a bounded body, and turn what went wrong
//! into a [`ProviderError`] by meaning.

use std::time::Duration;

use http::header::{self, HeaderMap};
use serde_json::Value;

use super::error::{HttpFailure, ProviderError};
use super::format::body::Body;
use super::transport::{Reply, Transport};
use crate::limits::MAX_RESPONSE_BYTES;

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
    // TLS through rustls with ring (far quicker to build than aws-lc). Installing twice is
    // harmless: the second call reports the first provider and changes nothing.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .timeout(REQUEST_TIMEOUT)
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

/// How long one request may take, its reply read to the end.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// A model endpoint: where requests go, and the connections they go over. Redirects are not
/// followed, as the providers' own SDKs do not: a followed redirect would carry the API key to
/// wherever the endpoint points, and a POST turned into a GET is never what was meant. The
/// answer says where the endpoint points instead (README, "Models and providers").
pub struct Endpoint {
    url: String,
    transport: Transport,
}

impl Endpoint {
    /// The endpoint at `url`, every request to it carrying `headers`.
    pub fn new(url: String, headers: &HeaderMap) -> Self {
        Endpoint {
            transport: Transport::new(&url, headers),
            url,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }
}

async fn json_body(reply: Reply<'_>) -> Result<Value, ProviderError> {
    let text = read_body(reply).await?;
    serde_json::from_str(&text).map_err(|err| ProviderError::InvalidResponse {
        message: format!("the body is not JSON ({err}): {}", snippet(&text)),
    })
}

/// Posts `body` asking for a stream of server-sent events and hands each event (its type and
/// data) to `on_event` as it arrives; `Ok(None)` once the stream ended. A server that answers
/// with one JSON body instead (it ignores `stream`) gets `Ok(Some(body))`. The stream is capped
/// like a body; an error event is `on_event`'s to turn into an error. The whole exchange is
/// bounded by [`REQUEST_TIMEOUT`].
pub async fn post_events(
    endpoint: &Endpoint,
    body: &Body,
    errors: &ErrorBodies,
    on_event: &mut (dyn FnMut(&str, &str) -> Result<(), ProviderError> + Send),
) -> Result<Option<Value>, ProviderError> {
    let exchange = async {
        let mut reply = post_checked(endpoint, body, errors).await?;
        let streamed = reply
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !streamed {
            return json_body(reply).await.map(Some);
        }
        let mut events = super::sse::Events::new(MAX_RESPONSE_BYTES);
        while let Some(chunk) = reply
            .chunk()
            .await
            .map_err(|err| ProviderError::Transport {
                message: format!("the stream broke: {}", err.message),
            })?
        {
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
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
        Ok(result) => result,
        Err(_) => Err(ProviderError::Transport {
            message: "the request timed out".into(),
        }),
    }
}

/// Sends the request; a reply with an error status becomes the error it means.
async fn post_checked<'a>(
    endpoint: &'a Endpoint,
    body: &Body,
    errors: &ErrorBodies,
) -> Result<Reply<'a>, ProviderError> {
    let reply = endpoint
        .transport
        .post(body.http())
        .await
        .map_err(|err| match err.lasting {
            true => ProviderError::Unreachable {
                message: err.message,
            },
            false => ProviderError::Transport {
                message: err.message,
            },
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
async fn read_body(mut reply: Reply<'_>) -> Result<String, ProviderError> {
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
    while let Some(chunk) = reply
        .chunk()
        .await
        .map_err(|err| ProviderError::Transport {
            message: err.message,
        })?
    {
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
    use http::header::HeaderValue;

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
