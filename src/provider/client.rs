//! The HTTP transport for both APIs, and the retry policy. The base URL is a constructor argument,
//! so tests point it at a local server.

use std::fmt;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::Value;

use super::format::{self, FormatError};
use super::message::{ChatRequest, ChatResponse};
use crate::limits::MAX_RESPONSE_BYTES;
use crate::workflow::ProviderKind;

/// An API key. Never printed: Debug and Display show `[hidden]`.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[hidden]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[hidden]")
    }
}

/// Why a model request failed; the variant decides whether retrying can help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("the model API answered {status}: {message}")]
    Status {
        status: u16,
        message: String,
        /// From `retry-after-ms` / `retry-after`.
        retry_after: Option<Duration>,
        /// From `x-should-retry`, which overrides the status.
        should_retry: Option<bool>,
    },
    #[error("could not reach the model API: {message}")]
    Transport { message: String },
    #[error("{0}")]
    Decode(#[from] FormatError),
}

impl ProviderError {
    pub fn retryable(&self) -> bool {
        match self {
            ProviderError::Status {
                status,
                should_retry,
                ..
            } => should_retry.unwrap_or(matches!(status, 408 | 409 | 429 | 500..=599)),
            ProviderError::Transport { .. } => true,
            ProviderError::Decode(_) => false,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Exponential backoff with jitter, honouring the server's `retry-after`.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts in all (1 = no retry).
    pub attempts: u32,
    pub base: Duration,
    pub max: Duration,
}

impl RetryPolicy {
    pub fn new(attempts: u32) -> Self {
        Self {
            attempts: attempts.max(1),
            base: Duration::from_millis(500),
            max: Duration::from_secs(8),
        }
    }

    /// The wait before retry number `retry` (1-based).
    pub fn delay(&self, retry: u32, error: &ProviderError) -> Duration {
        if let Some(after) = error.retry_after()
            && after <= Duration::from_secs(60)
        {
            return after;
        }
        let exp = self
            .base
            .saturating_mul(1u32 << retry.saturating_sub(1).min(16));
        let capped = exp.min(self.max);
        // Jitter: up to a quarter less, so parallel steps do not retry in lockstep.
        let jitter = 1.0 - rand::random::<f64>() * 0.25;
        capped.mul_f64(jitter)
    }
}

/// A retry about to happen, for progress and transcripts.
#[derive(Debug, Clone)]
pub struct RetryNote {
    pub attempt: u32,
    pub delay: Duration,
    pub error: ProviderError,
}

/// One provider endpoint.
#[derive(Debug, Clone)]
pub struct ModelClient {
    kind: ProviderKind,
    base_url: String,
    key: Option<Secret>,
    http: reqwest::Client,
}

impl ModelClient {
    pub fn new(kind: ProviderKind, base_url: &str, key: Option<Secret>) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .timeout(Duration::from_secs(600))
            .build()
            // Building fails only when the TLS backend cannot initialise; a default client is the
            // best that can be done then, and its requests will report the problem.
            .unwrap_or_default();
        Self {
            kind,
            base_url: base_url.trim_end_matches('/').to_owned(),
            key,
            http,
        }
    }

    pub fn request_body(&self, req: &ChatRequest) -> Value {
        match self.kind {
            ProviderKind::Anthropic => format::anthropic::request_body(req),
            ProviderKind::Openai => format::openai::request_body(req),
        }
    }

    fn endpoint(&self) -> String {
        match self.kind {
            ProviderKind::Anthropic => format!("{}/v1/messages", self.base_url),
            ProviderKind::Openai => format!("{}/chat/completions", self.base_url),
        }
    }

    fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let secret = |v: String| {
            let mut value = HeaderValue::from_str(&v).ok()?;
            value.set_sensitive(true);
            Some(value)
        };
        match self.kind {
            ProviderKind::Anthropic => {
                headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
                if let Some(value) = self
                    .key
                    .as_ref()
                    .and_then(|k| secret(k.expose().to_owned()))
                {
                    headers.insert("x-api-key", value);
                }
            }
            ProviderKind::Openai => {
                if let Some(value) = self
                    .key
                    .as_ref()
                    .and_then(|k| secret(format!("Bearer {}", k.expose())))
                {
                    headers.insert(reqwest::header::AUTHORIZATION, value);
                }
            }
        }
        headers
    }

    /// One request, no retries. Returns the parsed response and the raw body.
    pub async fn send_once(&self, body: &Value) -> Result<(ChatResponse, Value), ProviderError> {
        let response = self
            .http
            .post(self.endpoint())
            .headers(self.headers())
            .json(body)
            .send()
            .await
            .map_err(|err| ProviderError::Transport {
                message: describe_reqwest(&err),
            })?;
        let status = response.status();
        let headers = response.headers().clone();
        let text = read_body(response).await?;
        let parsed: Result<Value, _> = serde_json::from_str(&text);
        if !status.is_success() {
            let message = parsed
                .ok()
                .and_then(|v| match self.kind {
                    ProviderKind::Anthropic => format::anthropic::error_message(&v),
                    ProviderKind::Openai => format::openai::error_message(&v),
                })
                .unwrap_or_else(|| snippet(&text));
            return Err(ProviderError::Status {
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
            });
        }
        let value = parsed.map_err(|err| {
            ProviderError::Decode(FormatError(format!(
                "the body is not JSON ({err}): {}",
                snippet(&text)
            )))
        })?;
        let response = match self.kind {
            ProviderKind::Anthropic => format::anthropic::parse_response(&value)?,
            ProviderKind::Openai => format::openai::parse_response(&value)?,
        };
        Ok((response, value))
    }

    /// Sends with retries per `policy`; `on_retry` hears about each retry before its wait.
    pub async fn send(
        &self,
        body: &Value,
        policy: RetryPolicy,
        mut on_retry: impl FnMut(&RetryNote),
    ) -> Result<(ChatResponse, Value), ProviderError> {
        let mut attempt = 1;
        loop {
            match self.send_once(body).await {
                Ok(ok) => return Ok(ok),
                Err(error) if error.retryable() && attempt < policy.attempts => {
                    let delay = policy.delay(attempt, &error);
                    on_retry(&RetryNote {
                        attempt,
                        delay,
                        error: error.clone(),
                    });
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }
}

/// The body as text, refused past [`MAX_RESPONSE_BYTES`]: an endless or huge body from a broken or
/// hostile server fails the request instead of growing memory until the step times out.
async fn read_body(mut response: reqwest::Response) -> Result<String, ProviderError> {
    let too_large = || {
        ProviderError::Decode(FormatError(format!(
            "the response body is larger than {}",
            crate::limits::bytes(MAX_RESPONSE_BYTES as u64)
        )))
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
    // Duration instead of panicking, and [`RetryPolicy::delay`] ignores waits over a minute.
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

    fn status(code: u16, should_retry: Option<bool>) -> ProviderError {
        ProviderError::Status {
            status: code,
            message: String::new(),
            retry_after: None,
            should_retry,
        }
    }

    #[test]
    fn which_errors_retry() {
        for code in [408, 409, 429, 500, 502, 503, 529] {
            assert!(status(code, None).retryable(), "{code}");
        }
        for code in [400, 401, 403, 404, 413, 422] {
            assert!(!status(code, None).retryable(), "{code}");
        }
        assert!(!status(529, Some(false)).retryable());
        assert!(status(400, Some(true)).retryable());
        assert!(
            ProviderError::Transport {
                message: "x".into()
            }
            .retryable()
        );
        assert!(!ProviderError::Decode(FormatError("x".into())).retryable());
    }

    #[test]
    fn backoff_grows_caps_and_honours_retry_after() {
        let policy = RetryPolicy::new(4);
        let e = status(529, None);
        let d1 = policy.delay(1, &e);
        assert!(d1 <= Duration::from_millis(500) && d1 >= Duration::from_millis(375));
        let d3 = policy.delay(3, &e);
        assert!(d3 <= Duration::from_secs(2) && d3 >= Duration::from_millis(1500));
        assert!(policy.delay(10, &e) <= Duration::from_secs(8));
        let told = ProviderError::Status {
            status: 429,
            message: String::new(),
            retry_after: Some(Duration::from_millis(1234)),
            should_retry: None,
        };
        assert_eq!(policy.delay(1, &told), Duration::from_millis(1234));
    }

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
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("sk-very-secret");
        assert_eq!(format!("{s:?} {s}"), "[hidden] [hidden]");
    }
}
