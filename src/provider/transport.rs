//! The HTTP/1.1 connections model requests go over, on hyper's connection API.
//!
//! A turn's request is the hot path of a run, and a general client's layers (a URL parsed again,
//! redirect and retry services, a pool keyed by origin, headers cloned through each layer) cost
//! more than the rest of the turn (README, "Performance"). This keeps what a model endpoint
//! needs of a client and nothing else:
//! - proxies from the environment (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, read as
//!   curl reads them): plain HTTP is forwarded to the proxy, HTTPS goes through a `CONNECT`
//!   tunnel, with the proxy URL's credentials as `Proxy-Authorization`;
//! - TLS with the system's roots, loaded the first time an `https://` connection is made (a
//!   plain `http://` endpoint never reads them);
//! - credentials in the endpoint's URL (`http://user:pass@host`) sent as Basic authorization;
//! - a connect timeout, kept-alive connections reused, and a request that fails on a kept
//!   connection before any byte of its answer came sent again at once on a new one, not counted
//!   as a retry: a server may close the connection after each streamed reply while advertising
//!   keep-alive (llama.cpp's does), so the next request on it meets a closed socket;
//! - no redirects: an answer is the endpoint's own (see [`super::http`]).

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, StatusCode, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::proxy::matcher::Matcher;
use tower_service::Service;

use super::format::body::Pieces;

/// How long making a connection (DNS, TCP, proxy tunnel, TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// A kept connection unused this long is not trusted to be open any more (servers close theirs
/// after a minute or two).
const IDLE_FOR: Duration = Duration::from_secs(90);
/// Kept connections per endpoint at most; more at once are closed when their request ends.
const MAX_IDLE: usize = 256;

/// Why a request could not be made, in words for an error message.
#[derive(Debug)]
pub struct TransportError {
    pub message: String,
    /// Trying again cannot help: the certificate is not trusted, TLS cannot be agreed, the URL
    /// or proxy cannot be used.
    pub lasting: bool,
}

impl TransportError {
    fn passing(message: String) -> Self {
        TransportError {
            message,
            lasting: false,
        }
    }
}

/// Where connections go and how requests name the endpoint.
enum Route {
    Direct,
    /// Plain HTTP through a proxy: each request goes to it in absolute form.
    Forward {
        proxy: Uri,
        auth: Option<HeaderValue>,
    },
    /// HTTPS through a proxy: a `CONNECT` tunnel, then TLS to the endpoint inside it.
    Tunnel {
        proxy: Uri,
        auth: Option<HeaderValue>,
    },
    /// A proxy this cannot use (SOCKS): every request fails saying so.
    Unsupported(String),
}

struct Idle {
    sender: SendRequest<Pieces>,
    since: Instant,
}

/// The connections to one endpoint.
pub struct Transport {
    /// The endpoint, without credentials.
    target: Uri,
    /// What the request line names: the path (direct or tunnelled), or the whole URL (forwarded).
    request_uri: Uri,
    /// Every request's headers: `Host`, the API's own, Basic authorization from the URL's
    /// credentials, and the proxy's for a forwarded request.
    headers: HeaderMap,
    route: Route,
    idle: Mutex<Vec<Idle>>,
}

impl Transport {
    /// The transport for `url`, an absolute `http://` or `https://` URL, whose requests carry
    /// `headers`. A URL that cannot be used gives a transport whose every request fails saying
    /// why (the endpoint is named in that error by the caller).
    pub fn new(url: &str, headers: &HeaderMap) -> Transport {
        // A proxy's credentials are hidden in every output, as an endpoint's are.
        for name in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
            for name in [name.to_owned(), name.to_ascii_lowercase()] {
                if let Ok(proxy) = std::env::var(name) {
                    super::hide_url_credentials(&proxy);
                }
            }
        }
        match Self::build(url, headers, &Matcher::from_env()) {
            Ok(transport) => transport,
            Err(why) => Transport {
                target: Uri::from_static("http://invalid/"),
                request_uri: Uri::from_static("/"),
                headers: HeaderMap::new(),
                route: Route::Unsupported(why),
                idle: Mutex::new(Vec::new()),
            },
        }
    }

    fn build(url: &str, api: &HeaderMap, proxies: &Matcher) -> Result<Transport, String> {
        let parsed =
            reqwest::Url::parse(url).map_err(|err| format!("the URL is invalid: {err}"))?;
        let scheme = parsed.scheme();
        if scheme != "http" && scheme != "https" {
            return Err(format!("`{scheme}` URLs are not supported"));
        }
        let host = parsed
            .host_str()
            .ok_or_else(|| "the URL has no host".to_owned())?;
        let authority = match parsed.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        let path = match parsed.query() {
            Some(query) => format!("{}?{query}", parsed.path()),
            None => parsed.path().to_owned(),
        };
        let target: Uri = format!("{scheme}://{authority}{path}")
            .parse()
            .map_err(|err| format!("the URL is invalid: {err}"))?;
        let mut headers = HeaderMap::new();
        headers.insert(
            header::HOST,
            HeaderValue::from_str(&authority).map_err(|_| "the URL's host is invalid")?,
        );
        if !parsed.username().is_empty() || parsed.password().is_some() {
            headers.insert(
                header::AUTHORIZATION,
                basic_auth(parsed.username(), parsed.password().unwrap_or("")),
            );
        }
        // The API's own headers win over the URL's credentials (a bearer key over Basic).
        for (name, value) in api {
            headers.insert(name, value.clone());
        }
        let origin_form: Uri = path
            .parse()
            .map_err(|err| format!("the URL's path is invalid: {err}"))?;
        let (route, request_uri) = match proxies.intercept(&target) {
            None => (Route::Direct, origin_form),
            Some(proxy) => {
                let auth = proxy.basic_auth().cloned().map(|mut value| {
                    value.set_sensitive(true);
                    value
                });
                let uri = proxy.uri().clone();
                match (uri.scheme_str(), scheme) {
                    (Some("http" | "https"), "http") => {
                        (Route::Forward { proxy: uri, auth }, target.clone())
                    }
                    (Some("http" | "https"), _) => {
                        (Route::Tunnel { proxy: uri, auth }, origin_form)
                    }
                    (other, _) => (
                        Route::Unsupported(format!(
                            "the proxy's scheme `{}` is not supported (http and https proxies are)",
                            other.unwrap_or("")
                        )),
                        origin_form,
                    ),
                }
            }
        };
        if let Route::Forward {
            auth: Some(auth), ..
        } = &route
        {
            headers.insert(header::PROXY_AUTHORIZATION, auth.clone());
        }
        Ok(Transport {
            target,
            request_uri,
            headers,
            route,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Posts `body` (with `Content-Length`); the reply's head, with its body to read. A request
    /// that fails on a kept connection before the answer's head came (the server had closed it,
    /// or closes it now) is sent again at once on a new connection, once.
    pub async fn post(&self, body: Pieces) -> Result<Reply<'_>, TransportError> {
        let mut request = self.request(body)?;
        let mut fresh = false;
        loop {
            let kept = if fresh { None } else { self.checkout().await };
            let (mut sender, reused) = match kept {
                Some(sender) => (sender, true),
                None => (self.connect().await?, false),
            };
            let spare = reused.then(|| request.body().clone());
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let (head, body) = response.into_parts();
                    return Ok(Reply {
                        head,
                        body: Some(body),
                        lease: Some(sender),
                        transport: self,
                    });
                }
                Err(mut failed) => match (failed.take_message(), spare) {
                    (Some(unsent), Some(_)) => {
                        request = unsent;
                        fresh = true;
                    }
                    (None, Some(spare)) => {
                        request = self.request(spare)?;
                        fresh = true;
                    }
                    _ => return Err(TransportError::passing(describe(failed.error()))),
                },
            }
        }
    }

    fn request(&self, body: Pieces) -> Result<Request<Pieces>, TransportError> {
        let mut request = Request::post(self.request_uri.clone())
            .body(body)
            .map_err(|err| TransportError {
                message: format!("the request could not be made: {err}"),
                lasting: true,
            })?;
        *request.headers_mut() = self.headers.clone();
        Ok(request)
    }

    /// A kept connection ready for a request, the most recent first.
    async fn checkout(&self) -> Option<SendRequest<Pieces>> {
        loop {
            let idle = {
                let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                idle.pop()?
            };
            if idle.sender.is_closed() || idle.since.elapsed() > IDLE_FOR {
                continue;
            }
            let mut sender = idle.sender;
            if sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
    }

    /// A connection whose reply was read to its end is kept for the next request.
    fn keep(&self, sender: SendRequest<Pieces>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(Idle {
                sender,
                since: Instant::now(),
            });
        }
    }

    async fn connect(&self) -> Result<SendRequest<Pieces>, TransportError> {
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let connecting = async {
            match &self.route {
                Route::Unsupported(why) => Err((why.clone(), true)),
                Route::Direct if self.target.scheme_str() == Some("https") => {
                    handshake(call(tls(tcp)?, self.target.clone()).await?).await
                }
                Route::Direct => handshake(call(tcp, self.target.clone()).await?).await,
                Route::Forward { proxy, .. } if proxy.scheme_str() == Some("https") => {
                    handshake(call(tls(tcp)?, proxy.clone()).await?).await
                }
                Route::Forward { proxy, .. } => handshake(call(tcp, proxy.clone()).await?).await,
                Route::Tunnel { proxy, auth } if proxy.scheme_str() == Some("https") => {
                    let tunnel = with_auth(Tunnel::new(proxy.clone(), tls(tcp)?), auth);
                    handshake(call(tls(tunnel)?, self.target.clone()).await?).await
                }
                Route::Tunnel { proxy, auth } => {
                    let tunnel = with_auth(Tunnel::new(proxy.clone(), tcp), auth);
                    handshake(call(tls(tunnel)?, self.target.clone()).await?).await
                }
            }
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
            Ok(result) => result.map_err(|(why, lasting)| TransportError {
                message: format!("connection failed: {why}"),
                lasting,
            }),
            Err(_) => Err(TransportError::passing(format!(
                "connection failed: no connection within {}s",
                CONNECT_TIMEOUT.as_secs()
            ))),
        }
    }
}

fn with_auth<C>(tunnel: Tunnel<C>, auth: &Option<HeaderValue>) -> Tunnel<C> {
    match auth {
        Some(auth) => tunnel.with_auth(auth.clone()),
        None => tunnel,
    }
}

/// Why a connection could not be made, and whether that lasts (see [`TransportError`]).
type ConnectError = (String, bool);

/// A connection error in words, lasting when TLS itself refused (an untrusted certificate, no
/// protocol both sides speak), not when the network failed on the way.
fn connect_error(err: &(dyn std::error::Error + 'static)) -> ConnectError {
    (chain(err), from_tls(err))
}

/// Whether a rustls error is among `err`'s causes. An I/O error names its inner error's
/// source, not the inner error itself (and hyper-rustls wraps tokio-rustls's I/O error in
/// another): each inner error is looked into as well.
fn from_tls(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut seen = 0;
    let mut next = vec![err];
    while let Some(cause) = next.pop() {
        seen += 1;
        if cause.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        // A chain this long is not one a connection error makes; stop rather than loop.
        if seen > 64 {
            return false;
        }
        if let Some(inner) = cause
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            next.push(inner);
        }
        next.extend(cause.source());
    }
    false
}

/// One connection made by `connector`.
async fn call<C>(mut connector: C, to: Uri) -> Result<C::Response, ConnectError>
where
    C: Service<Uri>,
    C::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    poll_fn(|cx| connector.poll_ready(cx))
        .await
        .map_err(|err| connect_error(&*err.into()))?;
    connector
        .call(to)
        .await
        .map_err(|err| connect_error(&*err.into()))
}

/// HTTP/1.1 over `io`, the connection driven by a task of its own until it closes.
async fn handshake<T>(io: T) -> Result<SendRequest<Pieces>, ConnectError>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::Builder::new()
        .handshake(io)
        .await
        .map_err(|err| connect_error(&err))?;
    tokio::spawn(async move {
        // Its errors reach the request that was in flight; nothing else waits for it.
        let _ = connection.await;
    });
    Ok(sender)
}

/// `connector` with TLS for `https://` destinations (and plain for `http://`).
fn tls<C>(connector: C) -> Result<hyper_rustls::HttpsConnector<C>, ConnectError> {
    let config = tls_config().map_err(|why| (why, true))?;
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((*config).clone())
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector))
}

/// TLS checked against the system's roots (as the providers' SDKs do), made once per process.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let verifier = rustls_platform_verifier::Verifier::new(provider.clone())
                .map_err(|err| format!("the system's certificates could not be loaded: {err}"))?;
            // hyper-rustls sets the ALPN protocols (HTTP/1.1) itself.
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|err| format!("TLS could not be set up: {err}"))?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
}

/// `Basic` credentials from a URL's user and password (percent-decoded, as written in URLs).
fn basic_auth(user: &str, password: &str) -> HeaderValue {
    use base64::Engine as _;
    let decode = |text: &str| percent_encoding::percent_decode_str(text).collect::<Vec<u8>>();
    let mut pair = decode(user);
    pair.push(b':');
    pair.extend(decode(password));
    let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
    // Invariant: base64 is plain ASCII, which a header value always takes.
    let mut value = HeaderValue::from_str(&format!("Basic {encoded}"))
        .unwrap_or_else(|_| HeaderValue::from_static("Basic"));
    value.set_sensitive(true);
    value
}

/// An error and its causes, each once.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

fn describe(err: &hyper::Error) -> String {
    if err.is_incomplete_message() || err.is_canceled() || err.is_closed() {
        format!("the connection closed: {}", chain(err))
    } else {
        chain(err)
    }
}

/// A reply on its way: the head has arrived, the body is read with [`Reply::chunk`]. Read to
/// its end, the connection is kept for the next request; dropped before, it is closed.
pub struct Reply<'a> {
    head: http::response::Parts,
    /// `None` once read to its end (or broken).
    body: Option<Incoming>,
    lease: Option<SendRequest<Pieces>>,
    transport: &'a Transport,
}

impl Reply<'_> {
    pub fn status(&self) -> StatusCode {
        self.head.status
    }

    pub fn headers(&self) -> &HeaderMap {
        &self.head.headers
    }

    /// The next piece of the body; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, TransportError> {
        while let Some(body) = self.body.as_mut() {
            match poll_fn(|cx| http_body::Body::poll_frame(Pin::new(&mut *body), cx)).await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                    // Trailers carry nothing a model reply needs.
                }
                Some(Err(err)) => {
                    self.body = None;
                    self.lease = None;
                    return Err(TransportError::passing(describe(&err)));
                }
                None => {
                    self.body = None;
                    if let Some(sender) = self.lease.take() {
                        self.transport.keep(sender);
                    }
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(all: &str, no: &str) -> Matcher {
        Matcher::builder()
            .all(all.to_owned())
            .no(no.to_owned())
            .build()
    }

    #[test]
    fn a_direct_request_names_the_path_and_the_host() {
        let t = Transport::build(
            "http://127.0.0.1:8080/v1/messages?beta=1",
            &HeaderMap::new(),
            &matcher("", ""),
        )
        .unwrap();
        assert!(matches!(t.route, Route::Direct));
        assert_eq!(t.request_uri.to_string(), "/v1/messages?beta=1");
        assert_eq!(t.headers[header::HOST], "127.0.0.1:8080");
        assert!(!t.headers.contains_key(header::AUTHORIZATION));
    }

    #[test]
    fn url_credentials_become_basic_authorization_and_leave_the_url() {
        let t = Transport::build(
            "https://us%65r:p%40ss@example.com/v1",
            &HeaderMap::new(),
            &matcher("", ""),
        )
        .unwrap();
        // "user:p@ss"
        assert_eq!(t.headers[header::AUTHORIZATION], "Basic dXNlcjpwQHNz");
        assert!(t.headers[header::AUTHORIZATION].is_sensitive());
        assert_eq!(t.target.to_string(), "https://example.com/v1");
        assert_eq!(t.headers[header::HOST], "example.com");
        // The API's own key wins over the URL's credentials.
        let mut api = HeaderMap::new();
        api.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer k"));
        let t = Transport::build("https://u:p@example.com/v1", &api, &matcher("", "")).unwrap();
        assert_eq!(t.headers[header::AUTHORIZATION], "Bearer k");
    }

    #[test]
    fn proxies_forward_http_tunnel_https_and_respect_no_proxy() {
        let proxies = matcher("http://me:secret@proxy.local:3128", "internal.example");
        let t =
            Transport::build("http://api.example/v1/chat", &HeaderMap::new(), &proxies).unwrap();
        let Route::Forward { proxy, auth } = &t.route else {
            panic!("plain HTTP is forwarded");
        };
        assert_eq!(proxy.host(), Some("proxy.local"));
        assert!(auth.as_ref().is_some_and(HeaderValue::is_sensitive));
        assert_eq!(t.request_uri.to_string(), "http://api.example/v1/chat");
        assert!(t.headers.contains_key(header::PROXY_AUTHORIZATION));
        let t =
            Transport::build("https://api.example/v1/chat", &HeaderMap::new(), &proxies).unwrap();
        assert!(matches!(t.route, Route::Tunnel { .. }));
        // A tunnel's credentials go in the CONNECT, never to the endpoint.
        assert!(!t.headers.contains_key(header::PROXY_AUTHORIZATION));
        assert_eq!(t.request_uri.to_string(), "/v1/chat");
        let t =
            Transport::build("https://internal.example/v1", &HeaderMap::new(), &proxies).unwrap();
        assert!(matches!(t.route, Route::Direct));
        let t = Transport::build(
            "https://api.example/v1",
            &HeaderMap::new(),
            &matcher("socks5://p:1080", ""),
        )
        .unwrap();
        assert!(matches!(t.route, Route::Unsupported(_)));
    }

    #[test]
    fn a_url_that_is_not_http_is_refused() {
        assert!(
            Transport::build("ftp://example.com/", &HeaderMap::new(), &matcher("", "")).is_err()
        );
        assert!(Transport::build("not a url", &HeaderMap::new(), &matcher("", "")).is_err());
    }
}
