//! Pure wire-format conversion, unit-tested without a network.

pub mod anthropic;
pub mod body;
pub mod json;
pub mod openai;

/// A response body that could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected response from the model API: {0}")]
pub struct FormatError(pub String);
