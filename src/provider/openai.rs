//! OpenAI-compatible Chat Completions over HTTP (OpenAI, Ollama, vLLM, LiteLLM, ...).

use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};

use super::api::{Exchange, ModelApi, Outgoing};
use super::error::ProviderError;
use super::format;
use super::format::body::{Body, Wire};
use super::http::{Endpoint, ErrorBodies};
use super::message::ChatRequest;
use super::secret::Secret;
use super::stream::{self, OpenAiStream};

const ERRORS: ErrorBodies = ErrorBodies {
    message: format::openai::error_message,
    context_too_long: format::openai::context_too_long,
};

pub struct OpenAiApi {
    endpoint: Endpoint,
    /// The server refused `max_tokens` and asked for `max_completion_tokens` (OpenAI's reasoning
    /// models): every later request uses that.
    completion_tokens: AtomicBool,
    /// The server refused `response_format` (an older or stricter server): no later request
    /// sends it; the answer is still checked against its schema.
    no_response_format: AtomicBool,
}

impl OpenAiApi {
    /// `base_url` as OpenAI writes it (`https://api.openai.com/v1`); a bare host
    /// (`http://localhost:8000`) gets `/v1`.
    pub fn new(base_url: &str, key: Option<Secret>) -> Self {
        let base = base_url.trim_end_matches('/');
        let has_path = base
            .split_once("://")
            .map_or(base, |(_, rest)| rest)
            .contains('/');
        let url = if has_path {
            format!("{base}/chat/completions")
        } else {
            format!("{base}/v1/chat/completions")
        };
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(mut value) = key
            .as_ref()
            .and_then(|k| HeaderValue::from_str(&format!("Bearer {}", k.expose())).ok())
        {
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        Self {
            endpoint: Endpoint::new(url, &headers),
            completion_tokens: AtomicBool::new(false),
            no_response_format: AtomicBool::new(false),
        }
    }
}

impl OpenAiApi {
    fn wire(&self) -> Wire {
        Wire::OpenAi {
            completion_tokens: self.completion_tokens.load(Ordering::Relaxed),
            response_format: !self.no_response_format.load(Ordering::Relaxed),
        }
    }

    async fn post(
        &self,
        body: &Body,
        progress: &(dyn Fn(usize) + Send + Sync),
    ) -> Result<Exchange, ProviderError> {
        stream::post::<OpenAiStream>(&self.endpoint, body, &ERRORS, progress).await
    }
}

/// Whether a rejection is of `response_format` (a server that does not take it, or not that
/// schema).
fn refuses_response_format(error: &ProviderError) -> bool {
    matches!(error, ProviderError::BadRequest { message, .. } if message.contains("response_format"))
}

/// Whether a rejection asks for `max_completion_tokens` instead of `max_tokens`.
fn wants_completion_tokens(error: &ProviderError) -> bool {
    matches!(error, ProviderError::BadRequest { message, .. }
        if message.contains("max_completion_tokens") && message.contains("max_tokens"))
}

impl ModelApi for OpenAiApi {
    fn endpoint(&self) -> String {
        self.endpoint.url().to_owned()
    }

    fn encode(&self, request: &ChatRequest) -> Body {
        Body::of(self.wire(), request)
    }

    fn send<'a>(&'a self, request: Outgoing<'a>) -> BoxFuture<'a, Result<Exchange, ProviderError>> {
        self.send_streaming(request, &|_| {})
    }

    fn send_streaming<'a>(
        &'a self,
        request: Outgoing<'a>,
        progress: &'a (dyn Fn(usize) + Send + Sync),
    ) -> BoxFuture<'a, Result<Exchange, ProviderError>> {
        Box::pin(async move {
            let mut result = self.post(request.body, progress).await;
            // Each refusal is learnt once for the client (every later request asks `wire()` and
            // is written right from the start), and retried once for this request whatever
            // another request in flight learnt meanwhile: at most two retries, no loop.
            let (mut tokens_retried, mut format_retried) = (false, false);
            loop {
                match &result {
                    Err(error) if !tokens_retried && wants_completion_tokens(error) => {
                        tokens_retried = true;
                        self.completion_tokens.store(true, Ordering::Relaxed);
                    }
                    Err(error)
                        if !format_retried
                            && request.request.answer_schema.is_some()
                            && refuses_response_format(error) =>
                    {
                        format_retried = true;
                        self.no_response_format.store(true, Ordering::Relaxed);
                    }
                    _ => return result,
                }
                let body = self.encode(request.request);
                result = self.post(&body, progress).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_follows_the_base_url() {
        let url = |base: &str| OpenAiApi::new(base, None).endpoint();
        assert_eq!(
            url("https://api.openai.com/v1"),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            url("http://localhost:8000"),
            "http://localhost:8000/v1/chat/completions"
        );
        assert_eq!(
            url("http://localhost:8000/v1/"),
            "http://localhost:8000/v1/chat/completions"
        );
        assert_eq!(
            url("https://example.com/v1beta/openai"),
            "https://example.com/v1beta/openai/chat/completions"
        );
    }
}
