//! The model API seam: send a neutral request, get a neutral reply. Anthropic's Messages API and
//! OpenAI-compatible Chat Completions implement it over HTTP; tests and (later) replay implement
//! it in process.

use futures_util::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;

use super::error::ProviderError;
use super::format::FormatError;
use super::format::body::{Body, Wire};
use super::message::{ChatRequest, ChatResponse};
use super::parts::AnthropicParts;

/// A request as it goes out: the conversation (what cassettes and in-process APIs read) and its
/// body, written once in the API's wire format (what goes over HTTP, and what its digest is of).
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    pub request: &'a ChatRequest,
    pub body: &'a Body,
}

/// One reply: what it means, and the body as the API sent it (for the transcript).
#[derive(Debug, Clone)]
pub struct Exchange {
    pub response: ChatResponse,
    pub raw: Raw,
}

impl Exchange {
    /// A reply body, read by the API's parser; what it cannot read is an invalid reply.
    pub fn read(
        raw: Value,
        parse: fn(&Value) -> Result<ChatResponse, FormatError>,
    ) -> Result<Self, ProviderError> {
        let response = parse(&raw).map_err(|e| ProviderError::InvalidResponse { message: e.0 })?;
        Ok(Exchange {
            response,
            raw: raw.into(),
        })
    }
}

/// A reply's body as the API sent it: a JSON value, or a streamed Anthropic reply kept as the
/// text of its events, made into the one body it stands for only where it is written (the
/// transcript's thread, a cassette), not on the step's thread. It serializes as that body.
#[derive(Debug, Clone)]
pub struct Raw(RawBody);

#[derive(Debug, Clone)]
enum RawBody {
    Value(Value),
    Anthropic(Box<AnthropicParts>),
}

impl Raw {
    /// The body as one JSON value.
    pub fn to_value(&self) -> Value {
        match &self.0 {
            RawBody::Value(value) => value.clone(),
            RawBody::Anthropic(parts) => parts.to_value(),
        }
    }
}

impl From<Value> for Raw {
    fn from(value: Value) -> Self {
        Raw(RawBody::Value(value))
    }
}

impl From<AnthropicParts> for Raw {
    fn from(parts: AnthropicParts) -> Self {
        Raw(RawBody::Anthropic(Box::new(parts)))
    }
}

impl Serialize for Raw {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            RawBody::Value(value) => value.serialize(serializer),
            RawBody::Anthropic(parts) => parts.to_value().serialize(serializer),
        }
    }
}

pub trait ModelApi: Send + Sync {
    /// Where requests go, named in every error about them.
    fn endpoint(&self) -> String;
    /// `request` written as this API's body (what goes over HTTP, and what its digest is of).
    /// The API owns its wire format, which may change between requests (OpenAI's output-limit
    /// name, learnt from a refusal): the caller asks before each request.
    fn encode(&self, request: &ChatRequest) -> Body {
        Body::of(Wire::Anthropic, request)
    }
    /// The shortest prefix this API's prompt cache keeps for `model`, in tokens; `None` when it
    /// keeps none a sibling request could wait for (docs/src/delegation.md, "Clean context").
    fn min_cacheable(&self, model: &str) -> Option<u64> {
        let _ = model;
        None
    }
    /// One attempt; retries are the caller's (see [`super::retry`]).
    fn send<'a>(&'a self, request: Outgoing<'a>) -> BoxFuture<'a, Result<Exchange, ProviderError>>;

    /// One attempt, streamed where the API can: `progress` hears how many characters of the
    /// reply have arrived so far. The result is the same as [`ModelApi::send`]'s.
    fn send_streaming<'a>(
        &'a self,
        request: Outgoing<'a>,
        progress: &'a (dyn Fn(usize) + Send + Sync),
    ) -> BoxFuture<'a, Result<Exchange, ProviderError>> {
        let _ = progress;
        self.send(request)
    }
}
