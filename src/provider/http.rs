//! The HTTP exchange both APIs share: post JSON, read a bounded body, and turn what went wrong
//! into a [`ProviderError`] by meaning.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use super::error::{HttpFailure, ProviderError};
use super::format::body::Body;
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
    build(
        builder().redirect(reqwest::redirect::Policy::custom(|attempt| {
            let same_origin = attempt
                .previous()
                .last()
                .is_some_and(|from| from.origin() == attempt.url().origin());
            if same_origin && attempt.previous().len() <= 10 {
                attempt.follow()
            } else {
                attempt.stop()
            }
        })),
    )
}

/// A built client; building fails only when the TLS backend cannot initialise, and a default
/// client is the best that can be done then: its requests will report the problem.
fn build(builder: reqwest::ClientBuilder) -> reqwest::Client {
    // TLS through rustls with ring (far quicker to build than aws-lc). Installing twice is
    // harmless: the second call reports the first provider and changes nothing.
    let _ = rustls::crypto::ring::default_provider().install_default();
    builder.build().unwrap_or_default()
}

fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .timeout(Duration::from_secs(600))
}

/// A model API's client does not follow redirects, as the providers' own SDKs do not: a
/// followed redirect would carry the API key header (which reqwest does not count as
/// sensitive) to wherever the endpoint points, and a POST turned into a GET is never what was
/// meant. The answer says where the endpoint points instead (README, "Models and providers").
fn model_builder() -> reqwest::ClientBuilder {
    builder().redirect(reqwest::redirect::Policy::none())
}

/// The client for one model endpoint. A plain `http://` endpoint (a local model server, a
/// proxy on this machine) never needs the system's certificate authorities, whose loading is
/// most of runner's start (a few milliseconds of reading and decoding every certificate on the
/// machine): its client trusts none, so should anything lead it to `https://`, the check fails
/// rather than connecting unverified.
pub fn client_for(url: &str) -> reqwest::Client {
    let plain = url
        .get(..7)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"));
    if !plain {
        return build(model_builder());
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let trusting_none = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|config| {
            config
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        });
    match trusting_none {
        Ok(config) => model_builder()
            .tls_backend_preconfigured(config)
            .build()
            .unwrap_or_else(|_| build(model_builder())),
        Err(_) => build(model_builder()),
    }
}

async fn json_body(response: reqwest::Response) -> Result<Value, ProviderError> {
    let text = read_body(response).await?;
    serde_json::from_str(&text).map_err(|err| ProviderError::InvalidResponse {
        message: format!("the body is not JSON ({err}): {}", snippet(&text)),
    })
}

/// Posts `body` asking for a stream of server-sent events and hands each event (its type and
/// data) to `on_event` as it arrives; `Ok(None)` once the stream ended. A server that answers
/// with one JSON body instead (it ignores `stream`) gets `Ok(Some(body))`. The stream is capped
/// like a body; an error event is `on_event`'s to turn into an error.
pub async fn post_events(
    client: &reqwest::Client,
    url: &str,
    headers: HeaderMap,
    body: &Body,
    errors: &ErrorBodies,
    on_event: &mut (dyn FnMut(&str, &str) -> Result<(), ProviderError> + Send),
) -> Result<Option<Value>, ProviderError> {
    let mut response = post_checked(client, url, headers, body, errors).await?;
    let streamed = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !streamed {
        return json_body(response).await.map(Some);
    }
    let mut events = super::sse::Events::new(MAX_RESPONSE_BYTES);
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|err| ProviderError::Transport {
            message: format!("the stream broke: {err}"),
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
}

/// Sends the request; a reply with an error status becomes the error it means.
async fn post_checked(
    client: &reqwest::Client,
    url: &str,
    headers: HeaderMap,
    body: &Body,
    errors: &ErrorBodies,
) -> Result<reqwest::Response, ProviderError> {
    let response = client
        .post(url)
        .headers(headers)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.http())
        .send()
        .await
        .map_err(|err| ProviderError::Transport {
            message: describe_reqwest(&err),
        })?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let headers = response.headers().clone();
    if status.is_redirection() {
        let to = headers
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map_or_else(|| "(no Location)".to_owned(), snippet);
        return Err(ProviderError::BadRequest {
            status: status.as_u16(),
            message: format!(
                "the endpoint redirects to {to}; runner does not follow redirects: set the base URL to where it should go"
            ),
        });
    }
    let text = read_body(response).await?;
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
async fn read_body(mut response: reqwest::Response) -> Result<String, ProviderError> {
    let too_large = || ProviderError::InvalidResponse {
        message: format!(
            "the response body is larger than {}",
            crate::limits::bytes(MAX_RESPONSE_BYTES as u64)
        ),
    };
    if response
        .content_length()
        .is_some_and(|n| n > MAX_RESPONSE_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|err| ProviderError::Transport {
            message: describe_reqwest(&err),
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

/// reqwest's message plus its causes (the interesting part is usually in the source chain).
fn describe_reqwest(err: &reqwest::Error) -> String {
    let mut text = if err.is_timeout() {
        "the request timed out".to_owned()
    } else if err.is_connect() {
        "connection failed".to_owned()
    } else {
        err.to_string()
    };
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
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
