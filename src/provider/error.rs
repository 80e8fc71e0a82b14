//! Why a model request failed, by meaning. The variant alone decides whether retrying can help.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// Too many requests: retried, after the server's delay when it gives one.
    #[error("rate limited: {message}")]
    RateLimited {
        message: String,
        retry_after: Option<Duration>,
    },
    /// The API is overloaded or failing on its side: retried.
    #[error("the API is overloaded or failing ({status}): {message}")]
    Overloaded {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// The conversation does not fit the model: not retried (it would not fit again).
    #[error("the conversation is too long for the model: {message}")]
    ContextTooLong { message: String },
    /// The key was refused: not retried.
    #[error("the API refused the key ({status}): {message}")]
    Auth { status: u16, message: String },
    /// The request itself is wrong (unknown model, bad parameter): not retried.
    #[error("the API rejected the request ({status}): {message}")]
    BadRequest { status: u16, message: String },
    /// The API could not be reached, or did not begin to answer: retried.
    #[error("could not reach the API: {message}")]
    Transport { message: String },
    /// The reply had begun and broke off (the connection closed, or nothing more came within
    /// the idle limit): retried.
    #[error("the reply broke off while streaming: {message}")]
    StreamBroke { message: String },
    /// The API cannot be reached as configured (its certificate is not trusted, TLS cannot be
    /// agreed, the URL or proxy is one runner cannot use): not retried, it would fail again.
    #[error("could not reach the API: {message}")]
    Unreachable { message: String },
    /// The reply could not be understood (garbage, or too large): not retried.
    #[error("the reply could not be read: {message}")]
    InvalidResponse { message: String },
    /// Record or replay failed: a request with no recording, a cassette that cannot be
    /// written. Not retried: it would fail the same way.
    #[error("{message}")]
    Tape { message: String },
}

impl ProviderError {
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            ProviderError::RateLimited { .. }
                | ProviderError::Overloaded { .. }
                | ProviderError::Transport { .. }
                | ProviderError::StreamBroke { .. }
        )
    }

    /// The server's own wait before a retry.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::RateLimited { retry_after, .. }
            | ProviderError::Overloaded { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// What an HTTP error response says, before it is given a meaning.
#[derive(Debug, Clone, Default)]
pub struct HttpFailure {
    pub status: u16,
    pub message: String,
    pub retry_after: Option<Duration>,
    /// `x-should-retry`: the server's own verdict, which wins over the status.
    pub should_retry: Option<bool>,
    /// The API's error says the prompt does not fit the context window.
    pub context_too_long: bool,
}

impl HttpFailure {
    pub fn classify(self) -> ProviderError {
        let HttpFailure {
            status,
            message,
            retry_after,
            should_retry,
            context_too_long,
        } = self;
        let transient = should_retry.unwrap_or(matches!(status, 408 | 409 | 429 | 500..=599));
        match status {
            429 if transient => ProviderError::RateLimited {
                message,
                retry_after,
            },
            _ if transient => ProviderError::Overloaded {
                status,
                message,
                retry_after,
            },
            _ if context_too_long => ProviderError::ContextTooLong { message },
            401 | 403 => ProviderError::Auth { status, message },
            _ => ProviderError::BadRequest { status, message },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16, should_retry: Option<bool>) -> ProviderError {
        HttpFailure {
            status,
            message: "m".into(),
            should_retry,
            ..HttpFailure::default()
        }
        .classify()
    }

    #[test]
    fn the_meaning_decides_retries() {
        for code in [408, 409, 429, 500, 502, 503, 529] {
            assert!(status(code, None).retryable(), "{code}");
        }
        for code in [400, 401, 403, 404, 413, 422] {
            assert!(!status(code, None).retryable(), "{code}");
        }
        assert!(matches!(
            status(429, None),
            ProviderError::RateLimited { .. }
        ));
        assert!(matches!(status(401, None), ProviderError::Auth { .. }));
        assert!(matches!(
            status(529, None),
            ProviderError::Overloaded { .. }
        ));
        assert!(!status(529, Some(false)).retryable());
        assert!(status(400, Some(true)).retryable());
        let long = HttpFailure {
            status: 400,
            context_too_long: true,
            ..HttpFailure::default()
        }
        .classify();
        assert!(matches!(long, ProviderError::ContextTooLong { .. }));
        assert!(
            ProviderError::Transport {
                message: "x".into()
            }
            .retryable()
        );
        assert!(
            !ProviderError::InvalidResponse {
                message: "x".into()
            }
            .retryable()
        );
    }
}
