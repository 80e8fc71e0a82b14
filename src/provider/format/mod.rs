//! Pure wire-format conversion, unit-tested without a network.

pub mod anthropic;
pub mod body;
pub mod json;
pub mod openai;

/// A response body that could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected response from the model API: {0}")]
pub struct FormatError(pub String);

/// A request written as JSON. The request types are plain data (strings, numbers, JSON values,
/// no maps with non-string keys), which serde_json always encodes: the error case cannot happen.
pub(super) fn to_vec(value: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}
