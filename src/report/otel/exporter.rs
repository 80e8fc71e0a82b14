//! The OTLP exporter as the `OTEL_*` variables ask for it, sending through runner's own HTTP
//! client ([`Client`]): no redirect is followed (the headers of `OTEL_EXPORTER_OTLP_HEADERS`, an
//! API key for a hosted backend, would go along to wherever it points), proxies come from the
//! environment as for the model APIs, TLS is rustls's, and every body passes the redactor on
//! its way out (JSON: each secret as `[hidden]`; protobuf, whose strings carry their lengths:
//! each secret's bytes as `*`). Spans are redacted value by value before that; this is the one
//! way their bytes reach the socket.

use std::io::{Read as _, Write as _};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::WithHttpConfig as _;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::out::Redacting;

/// Spans held for export at most (the SDK's default is 2,048; a wide fan-out makes more between
/// two exports). `OTEL_BSP_MAX_QUEUE_SIZE` overrides it.
const QUEUE: usize = 65_536;
/// How long one export may take, unless `OTEL_EXPORTER_OTLP_TIMEOUT` says (the specification's
/// default).
const TIMEOUT: Duration = Duration::from_secs(10);
/// A receiver's answer read at most (what the crate's own clients read).
const MAX_RESPONSE_BYTES: u64 = 4 << 20;

/// The first failure to send, kept for the warning at the end of the run.
pub type Failure = Arc<Mutex<Option<String>>>;

/// Whether the environment asks for traces: an OTLP endpoint, and nothing turning them off.
fn wanted() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let is = |name: &str, value: &str| {
        std::env::var(name).is_ok_and(|v| v.trim().eq_ignore_ascii_case(value))
    };
    (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        && !is("OTEL_SDK_DISABLED", "true")
        && !is("OTEL_TRACES_EXPORTER", "none")
}

/// Where traces go, as the variables say.
pub fn endpoint() -> String {
    std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| format!("{e}/v1/traces")))
        .unwrap_or_default()
}

/// The protocol asked for, when it is one runner cannot speak.
fn unsupported_protocol() -> Option<String> {
    [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ]
    .into_iter()
    .find_map(|name| std::env::var(name).ok().map(|v| (name, v)))
    .filter(|(_, v)| !matches!(v.trim(), "http/protobuf" | "http/json"))
    .map(|(name, v)| {
        format!("{name}={v} is not supported: runner exports over `http/protobuf` or `http/json`")
    })
}

/// What the variables hold that is a secret: the headers' values (percent-encoded there,
/// `Bearer%20sk-…`: hidden as written, as sent, and the credential alone) and the credentials
/// of the endpoints' URLs (`https://user:pass@collector/`, `?api_key=`).
fn hide_secrets() {
    for name in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ] {
        for pair in std::env::var(name).unwrap_or_default().split(',') {
            if let Some((_, value)) = pair.split_once('=') {
                let decoded = percent_encoding::percent_decode_str(value.trim())
                    .decode_utf8_lossy()
                    .into_owned();
                crate::secrets::register(value.trim());
                crate::secrets::register(&decoded);
                for word in decoded.split_whitespace() {
                    crate::secrets::register(word);
                }
            }
        }
    }
    for name in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ] {
        if let Ok(url) = std::env::var(name) {
            crate::provider::hide_url_credentials(url.trim());
        }
    }
    for name in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
        for name in [name.to_owned(), name.to_ascii_lowercase()] {
            if let Ok(proxy) = std::env::var(name) {
                crate::provider::hide_url_credentials(&proxy);
            }
        }
    }
}

/// The exporter's timeout, as `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` or `..._TIMEOUT` say (ms).
fn timeout() -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .into_iter()
    .find_map(|name| std::env::var(name).ok()?.trim().parse::<u64>().ok())
    .map_or(TIMEOUT, Duration::from_millis)
}

/// The tracer provider the environment asks for: `Ok(None)` when it asks for none.
pub fn provider() -> Result<Option<(SdkTracerProvider, Failure)>, String> {
    if !wanted() {
        return Ok(None);
    }
    if let Some(problem) = unsupported_protocol() {
        return Err(problem);
    }
    hide_secrets();
    let timeout = timeout();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(Client::new(timeout)?)
        .build()
        .map_err(|err| format!("cannot set up the OTLP exporter: {err}"))?;
    let mut batch = opentelemetry_sdk::trace::BatchConfigBuilder::default();
    if std::env::var("OTEL_BSP_MAX_QUEUE_SIZE").is_err() {
        batch = batch.with_max_queue_size(QUEUE);
    }
    let failure = Failure::default();
    let exporter = Watched {
        inner: exporter,
        failure: Arc::clone(&failure),
    };
    let processor = opentelemetry_sdk::trace::BatchSpanProcessor::builder(exporter)
        .with_batch_config(batch.build())
        .build();
    let mut resource = opentelemetry_sdk::Resource::builder();
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok()
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES")
            .is_ok_and(|attrs| attrs.contains("service.name="));
    if !named {
        resource = resource.with_service_name("runner");
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource.build())
        .build();
    Ok(Some((provider, failure)))
}

/// The exporter, keeping the first failure to send, which the SDK would only log: the run says
/// it as a warning when it ends.
#[derive(Debug)]
struct Watched {
    inner: opentelemetry_otlp::SpanExporter,
    failure: Failure,
}

impl opentelemetry_sdk::trace::SpanExporter for Watched {
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let sent = self.inner.export(batch).await;
        if let Err(err) = &sent {
            let mut failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
            failure.get_or_insert_with(|| err.to_string());
        }
        sent
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// The exporter's HTTP client: reqwest's blocking client (the batch processor sends from a
/// thread of its own, outside any async runtime) under runner's policy, and the redactor
/// between the exporter and the socket.
#[derive(Debug)]
pub struct Client {
    http: reqwest::blocking::Client,
}

impl Client {
    fn new(timeout: Duration) -> Result<Client, String> {
        crate::provider::install_tls();
        // The blocking client runs a runtime of its own, which cannot be made inside another:
        // made on a thread of its own, as the exporter's default client is.
        let built = std::thread::Builder::new()
            .name("runner-otlp-client".into())
            .spawn(move || {
                reqwest::blocking::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .connect_timeout(timeout)
                    .timeout(timeout)
                    .build()
            })
            .map_err(|err| format!("cannot set up the OTLP client: {err}"))?
            .join()
            .map_err(|_| "cannot set up the OTLP client".to_owned())?
            .map_err(|err| format!("cannot set up the OTLP client: {err}"))?;
        Ok(Client { http: built })
    }

    /// The body as it may leave: every secret hidden, JSON as `[hidden]`, protobuf masked.
    fn redacted(request: Request<Bytes>) -> Result<Request<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let json = parts
            .headers
            .get(reqwest::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        let mut out = Vec::with_capacity(body.len());
        {
            let mut writer = if json {
                Redacting::new(&mut out)
            } else {
                Redacting::masking(&mut out)
            };
            writer.write_all(&body)?;
            writer.finish()?;
        }
        Ok(Request::from_parts(parts, Bytes::from(out)))
    }
}

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request: reqwest::blocking::Request = Self::redacted(request)?.try_into()?;
        let mut response = self.http.execute(request)?;
        let status = response.status();
        let headers = std::mem::take(response.headers_mut());
        let mut body = Vec::new();
        response
            .take(MAX_RESPONSE_BYTES + 1)
            .read_to_end(&mut body)?;
        if body.len() as u64 > MAX_RESPONSE_BYTES {
            return Err("the receiver's answer is larger than 4 MiB".into());
        }
        let mut answer = Response::builder().status(status).body(Bytes::from(body))?;
        *answer.headers_mut() = headers;
        Ok(answer)
    }
}
