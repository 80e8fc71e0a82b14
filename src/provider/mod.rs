//! Model providers: the neutral conversation (`message`), the seam a session sends it through
//! (`api`), each API's wire format and stream reading (`format`, `anthropic`, `openai`,
//! `stream`), HTTP over reqwest (`http`), retries, record/replay (`tape`), and the endpoints a
//! workflow can name (`registry`).

pub mod anthropic;
pub mod api;
pub mod error;
pub mod format;
mod http;
pub mod known;
pub mod message;
pub mod openai;
pub mod parts;
mod registry;
pub mod retry;
mod secret;
mod sse;
pub mod stream;
pub mod tape;

pub use api::{Exchange, ModelApi, Outgoing, Raw};
pub use error::ProviderError;
pub use format::body::{Body, Wire};
pub use http::{hide_url_credentials, install_tls};
pub use registry::{
    BaseUrl, ModelRef, ProviderSpec, builtin_providers, connect, has_scheme, http_client,
    providers_for,
};
pub use secret::Secret;
