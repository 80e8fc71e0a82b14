//! Retries: exponential backoff with jitter, honouring the server's `retry-after`, for the
//! errors whose meaning says retrying can help.

use std::fmt;
use std::time::Duration;

use super::api::{Exchange, ModelApi, Outgoing};
use super::error::ProviderError;

#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts in all (1 = no retry).
    pub attempts: u32,
    pub base: Duration,
    pub max: Duration,
}

impl RetryPolicy {
    /// `retries` retries after the first attempt (docs/src/reference/workflow.md: `retries = 4` is 5
    /// attempts).
    pub fn new(retries: u32) -> Self {
        Self {
            attempts: retries.saturating_add(1),
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

/// A request that failed for good: what went wrong, where, after how many attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFailure {
    pub endpoint: String,
    pub attempts: u32,
    pub error: ProviderError,
}

impl fmt::Display for ModelFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (POST {}, {} attempt{})",
            self.error,
            self.endpoint,
            self.attempts,
            if self.attempts == 1 { "" } else { "s" }
        )?;
        if matches!(self.error, ProviderError::BadRequest { status: 404, .. })
            && path_repeats(&self.endpoint)
        {
            write!(
                f,
                "; the path is there twice, so the `base_url` already held the endpoint: cut it back to the host (and `/v1`)"
            )?;
        }
        Ok(())
    }
}

/// Whether an endpoint's path holds the API's own path twice (`…/v1/messages/v1/messages`), the
/// sign of a `base_url` that was the whole endpoint.
fn path_repeats(endpoint: &str) -> bool {
    endpoint.contains("/v1/v1/")
        || ["/messages", "/chat/completions"]
            .iter()
            .any(|p| endpoint.matches(p).count() > 1)
}

/// Sends with retries per `policy`; `on_retry` hears about each retry before its wait.
pub async fn send(
    api: &dyn ModelApi,
    request: Outgoing<'_>,
    policy: RetryPolicy,
    mut on_retry: impl FnMut(&RetryNote),
    progress: &(dyn Fn(usize) + Send + Sync),
) -> Result<Exchange, ModelFailure> {
    let mut attempt = 1;
    loop {
        match api.send_streaming(request, progress).await {
            Ok(exchange) => return Ok(exchange),
            Err(error) if error.retryable() && attempt < policy.attempts => {
                let delay = policy.delay(attempt, &error);
                on_retry(&RetryNote {
                    attempt,
                    delay,
                    error,
                });
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
            Err(error) => {
                return Err(ModelFailure {
                    endpoint: api.endpoint(),
                    attempts: attempt,
                    error,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_caps_and_honours_retry_after() {
        let policy = RetryPolicy::new(4);
        assert_eq!(policy.attempts, 5);
        let e = ProviderError::Overloaded {
            status: 529,
            message: String::new(),
            retry_after: None,
        };
        let d1 = policy.delay(1, &e);
        assert!(d1 <= Duration::from_millis(500) && d1 >= Duration::from_millis(375));
        let d3 = policy.delay(3, &e);
        assert!(d3 <= Duration::from_secs(2) && d3 >= Duration::from_millis(1500));
        assert!(policy.delay(10, &e) <= Duration::from_secs(8));
        let told = ProviderError::RateLimited {
            message: String::new(),
            retry_after: Some(Duration::from_millis(1234)),
        };
        assert_eq!(policy.delay(1, &told), Duration::from_millis(1234));
        assert_eq!(RetryPolicy::new(0).attempts, 1);
    }
}
