//! Anthropic's Messages API over HTTP.

use futures_util::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderValue};

use super::api::{Exchange, ModelApi, Outgoing};
use super::error::ProviderError;
use super::format;
use super::http::{Endpoint, ErrorBodies};
use super::secret::Secret;
use super::stream::{self, AnthropicStream};

const ERRORS: ErrorBodies = ErrorBodies {
    message: format::anthropic::error_message,
    context_too_long: format::anthropic::context_too_long,
};

pub struct AnthropicApi {
    endpoint: Endpoint,
}

impl AnthropicApi {
    /// `base_url` with or without a trailing `/v1` (the natural copy of an OpenAI-style URL).
    pub fn new(base_url: &str, key: Option<Secret>) -> Self {
        let base = base_url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        let url = format!("{base}/v1/messages");
        let mut headers = HeaderMap::new();
        headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(mut value) = key
            .as_ref()
            .and_then(|k| HeaderValue::from_str(k.expose()).ok())
        {
            value.set_sensitive(true);
            headers.insert("x-api-key", value);
        }
        Self {
            endpoint: Endpoint::new(url, &headers),
        }
    }
}

impl ModelApi for AnthropicApi {
    fn endpoint(&self) -> String {
        self.endpoint.url().to_owned()
    }

    fn min_cacheable(&self, model: &str) -> Option<u64> {
        Some(super::known::anthropic_min_cacheable(model))
    }

    fn send<'a>(&'a self, request: Outgoing<'a>) -> BoxFuture<'a, Result<Exchange, ProviderError>> {
        self.send_streaming(request, &|_| {})
    }

    fn send_streaming<'a>(
        &'a self,
        request: Outgoing<'a>,
        progress: &'a (dyn Fn(usize) + Send + Sync),
    ) -> BoxFuture<'a, Result<Exchange, ProviderError>> {
        Box::pin(stream::post::<AnthropicStream>(
            &self.endpoint,
            request.body,
            &ERRORS,
            progress,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_works_with_or_without_v1() {
        for base in [
            "https://api.anthropic.com",
            "https://api.anthropic.com/",
            "https://api.anthropic.com/v1",
            "https://api.anthropic.com/v1/",
        ] {
            assert_eq!(
                AnthropicApi::new(base, None).endpoint(),
                "https://api.anthropic.com/v1/messages"
            );
        }
    }
}
