//! The model API seam: send a neutral request, get a neutral reply. Anthropic's Messages API and
//! OpenAI-compatible Chat Completions implement it over HTTP; tests and (later) replay implement
//! it in process.

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::error::ProviderError;
use super::message::{ChatRequest, ChatResponse};

/// One reply: what it means, and the body as the API sent it (for the transcript).
#[derive(Debug, Clone)]
pub struct Exchange {
    pub response: ChatResponse,
    pub raw: Value,
}

pub trait ModelApi: Send + Sync {
    /// Where requests go, named in every error about them.
    fn endpoint(&self) -> String;
    /// One attempt; retries are the caller's (see [`super::retry`]).
    fn send<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<Exchange, ProviderError>>;
}
