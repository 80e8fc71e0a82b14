//! The endpoints a workflow can name: the built-ins of docs/src/models.md and those
//! `[providers.*]` adds, their keys, and the API each speaks.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::secret::Secret;
use super::{ModelApi, Wire, anthropic, http, openai};

/// The HTTP client runner uses (TLS set up), for other HTTP peers such as MCP servers.
pub fn http_client() -> reqwest::Client {
    http::client()
}

/// The API a provider speaks, ready to send to.
pub fn connect(spec: &ProviderSpec, key: Option<Secret>) -> Arc<dyn ModelApi> {
    match spec.kind {
        ProviderKind::Anthropic => Arc::new(anthropic::AnthropicApi::new(&spec.base_url(), key)),
        ProviderKind::Openai => Arc::new(openai::OpenAiApi::new(&spec.base_url(), key)),
    }
}

use crate::workflow::{ProviderDef, ProviderKind};

/// `provider/model`, split at the first `/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ModelRef {
    pub provider: String,
    pub model: String,
}

impl ModelRef {
    /// `Some` when `text` has the `provider/model` shape (both parts non-empty).
    pub fn parse(text: &str) -> Option<ModelRef> {
        let (provider, model) = text.split_once('/')?;
        let (provider, model) = (provider.trim(), model.trim());
        (!provider.is_empty() && !model.is_empty()).then(|| ModelRef {
            provider: provider.to_owned(),
            model: model.to_owned(),
        })
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

/// Where a provider's base URL comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaseUrl {
    /// An environment variable, with the default used when it is unset.
    Env {
        var: &'static str,
        default: &'static str,
        /// Appended to the variable's value (Ollama's host gets `/v1`).
        suffix: &'static str,
        /// The variable names a host, which may come without a scheme (`OLLAMA_HOST=0.0.0.0:11434`,
        /// as Ollama reads it): `http://` is then meant. Otherwise a scheme is required.
        host: bool,
    },
    Fixed(String),
}

/// An endpoint a model name can be sent to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSpec {
    pub name: String,
    pub kind: ProviderKind,
    pub base_url: BaseUrl,
    /// The environment variable holding the key; `None` for endpoints without one.
    pub api_key_env: Option<String>,
}

impl ProviderSpec {
    /// The base URL; credentials inside it (`user:pass@`, `?api_key=`) are registered as
    /// secrets first, so no output shows them.
    pub fn base_url(&self) -> String {
        let url = self.raw_base_url();
        http::hide_url_credentials(&url);
        url
    }

    /// The wire format its requests are written in (before anything is learnt from replies).
    pub fn wire(&self) -> Wire {
        match self.kind {
            ProviderKind::Anthropic => Wire::Anthropic,
            ProviderKind::Openai => Wire::OpenAi {
                completion_tokens: false,
                response_format: true,
            },
        }
    }

    fn raw_base_url(&self) -> String {
        match &self.base_url {
            BaseUrl::Fixed(url) => url.clone(),
            BaseUrl::Env {
                var,
                default,
                suffix,
                host,
            } => match env_value(var) {
                Some(value) if *host && !has_scheme(&value) => format!("http://{value}{suffix}"),
                Some(value) => format!("{value}{suffix}"),
                None => format!("{default}{suffix}"),
            },
        }
    }

    /// Whether a missing key is no mistake: an OpenAI-compatible base URL that is not the
    /// provider's own (its variable points elsewhere: a llama.cpp or vLLM server), so requests
    /// go without a key rather than not at all. Anthropic's API always wants one, at a proxy
    /// too; a `[providers.*]` entry says itself whether it has a key.
    pub fn key_optional(&self) -> bool {
        // By host, not by text: `https://API.openai.com` or the default with a port is still
        // OpenAI's API, which must never be sent a request without its key.
        let host = |url: &str| {
            reqwest::Url::parse(url)
                .ok()
                .and_then(|url| url.host_str().map(str::to_ascii_lowercase))
        };
        self.kind == ProviderKind::Openai
            && matches!(&self.base_url, BaseUrl::Env { var, default, .. }
            if env_value(var).is_some_and(|value| {
                host(&value).is_some_and(|own| Some(own) != host(default))
            }))
    }

    /// The variable and its value when the base URL comes from the environment and is not a
    /// URL (`OPENAI_BASE_URL=127.0.0.1:8080/v1`): said before the run, not as a relative URL
    /// when the first request is sent.
    pub fn schemeless(&self) -> Option<(&'static str, String)> {
        match &self.base_url {
            BaseUrl::Env {
                var, host: false, ..
            } => env_value(var)
                .filter(|value| !has_scheme(value))
                .map(|value| {
                    // Credentials in it (`user:pass@host`) are registered as secrets, so the
                    // message hides them too.
                    http::hide_url_credentials(&format!("http://{value}"));
                    (*var, value)
                }),
            _ => None,
        }
    }
}

/// A base URL variable's value, trimmed and without a trailing `/`; `None` when unset or empty.
fn env_value(var: &str) -> Option<String> {
    std::env::var(var)
        .ok()
        .map(|value| value.trim().trim_end_matches('/').to_owned())
        .filter(|value| !value.is_empty())
}

/// Whether `url` starts with the scheme runner speaks (`http://`, `https://`, any case).
pub fn has_scheme(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

pub fn builtin_providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec {
            name: "anthropic".into(),
            kind: ProviderKind::Anthropic,
            base_url: BaseUrl::Env {
                var: "ANTHROPIC_BASE_URL",
                default: "https://api.anthropic.com",
                suffix: "",
                host: false,
            },
            api_key_env: Some("ANTHROPIC_API_KEY".into()),
        },
        ProviderSpec {
            name: "openai".into(),
            kind: ProviderKind::Openai,
            base_url: BaseUrl::Env {
                var: "OPENAI_BASE_URL",
                default: "https://api.openai.com/v1",
                suffix: "",
                host: false,
            },
            api_key_env: Some("OPENAI_API_KEY".into()),
        },
        ProviderSpec {
            name: "ollama".into(),
            kind: ProviderKind::Openai,
            base_url: BaseUrl::Env {
                var: "OLLAMA_HOST",
                default: "http://localhost:11434",
                suffix: "/v1",
                host: true,
            },
            api_key_env: None,
        },
    ]
}

/// The providers a workflow can use: built-ins, replaced or extended by `[providers.*]`.
pub fn providers_for(extra: &BTreeMap<String, ProviderDef>) -> BTreeMap<String, ProviderSpec> {
    let mut all: BTreeMap<String, ProviderSpec> = builtin_providers()
        .into_iter()
        .map(|p| (p.name.clone(), p))
        .collect();
    for (name, def) in extra {
        all.insert(
            name.clone(),
            ProviderSpec {
                name: name.clone(),
                kind: def.kind,
                base_url: BaseUrl::Fixed(def.base_url.trim_end_matches('/').to_owned()),
                api_key_env: def.api_key_env.clone(),
            },
        );
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_refs_split_at_first_slash() {
        let r = ModelRef::parse("local/meta-llama/Llama-3-8B").unwrap();
        assert_eq!(r.provider, "local");
        assert_eq!(r.model, "meta-llama/Llama-3-8B");
        assert!(ModelRef::parse("small").is_none());
        assert!(ModelRef::parse("/x").is_none());
        assert!(ModelRef::parse("x/").is_none());
    }
}
