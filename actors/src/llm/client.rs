//! The HTTP side: one shared reqwest client, the API key read at request
//! time, and the driver behind every [`LlmStream`] — attempts, classified
//! failures, backoff, `retry-after`, restarts and the overload fallback.

use super::anthropic;
use super::config::{Api, NamedProfile, Route};
use super::conversation::ChatRequest;
use super::error::{
    Ctx, LlmError, classify_http, classify_reqwest, classify_stream_error, parse_retry_after,
};
use super::event::{Assembled, StreamEvent};
use super::openai;
use super::retry;
use super::stream::BodyStream;
use futures_util::{Stream, StreamExt};
use rand::SeedableRng;
use rand::rngs::StdRng;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Looks up an API key by the name in a profile's `api_key_env`.
pub type KeySource = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Error bodies are read up to this size; the rest is not worth waiting for.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Starts provider calls. Cheap to clone; one per daemon is enough.
#[derive(Clone)]
pub struct LlmClient {
    http: reqwest::Client,
    keys: KeySource,
}

impl fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LlmClient")
    }
}

impl LlmClient {
    /// A client that reads keys from the process environment.
    pub fn new() -> Result<LlmClient, LlmError> {
        LlmClient::with_key_source(Arc::new(|name: &str| std::env::var(name).ok()))
    }

    /// A client that reads keys through `keys` (a credentials store, or a
    /// test's map: changing the real environment of a threaded process is
    /// not sound).
    pub fn with_key_source(keys: KeySource) -> Result<LlmClient, LlmError> {
        LlmClient::build(keys, reqwest::Client::builder())
    }

    /// For tests: no proxy from the environment may capture loopback calls.
    #[cfg(test)]
    pub(crate) fn for_tests(keys: KeySource) -> Result<LlmClient, LlmError> {
        LlmClient::build(keys, reqwest::Client::builder().no_proxy())
    }

    fn build(keys: KeySource, builder: reqwest::ClientBuilder) -> Result<LlmClient, LlmError> {
        let http = builder
            .connect_timeout(Duration::from_secs(30))
            .tcp_keepalive(Duration::from_secs(60))
            .user_agent(concat!("flytod/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| LlmError::Config {
                detail: format!("cannot set up the HTTP client: {e}"),
            })?;
        Ok(LlmClient { http, keys })
    }

    /// Streams `request` to `route`, retrying and falling back as the
    /// profiles say. Nothing is sent until the stream is polled; dropping
    /// the stream drops the connection at once.
    pub fn stream(&self, route: &Route, request: ChatRequest) -> LlmStream {
        self.stream_with_rng(route, request, StdRng::from_entropy())
    }

    /// [`LlmClient::stream`] with the backoff jitter drawn from `rng`.
    pub fn stream_with_rng(&self, route: &Route, request: ChatRequest, rng: StdRng) -> LlmStream {
        let driver = Driver {
            http: self.http.clone(),
            keys: self.keys.clone(),
            route: route.clone(),
            request,
            rng,
            on_fallback: false,
            attempt: 0,
            overloads: 0,
            emitted: false,
            state: State::Connect,
            pending: VecDeque::new(),
        };
        let inner = futures_util::stream::unfold(driver, |mut d| async move {
            d.next().await.map(|item| (item, d))
        });
        LlmStream {
            inner: Box::pin(inner),
        }
    }

    /// The whole response, without the deltas.
    pub async fn complete(
        &self,
        route: &Route,
        request: ChatRequest,
    ) -> Result<Assembled, LlmError> {
        self.stream(route, request).response().await
    }
}

/// The events of one model call; see [`StreamEvent`]. It ends after `Done`
/// or after the first `Err`. Reading it in a `select!` is cancel-safe, and
/// dropping it is how a call is cancelled.
pub struct LlmStream {
    inner: Pin<Box<dyn Stream<Item = Result<StreamEvent, LlmError>> + Send>>,
}

impl fmt::Debug for LlmStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LlmStream")
    }
}

impl Stream for LlmStream {
    type Item = Result<StreamEvent, LlmError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl LlmStream {
    pub async fn next_event(&mut self) -> Option<Result<StreamEvent, LlmError>> {
        self.inner.next().await
    }

    /// Drains the stream and returns the `Done` response.
    pub async fn response(mut self) -> Result<Assembled, LlmError> {
        while let Some(item) = self.next_event().await {
            if let StreamEvent::Done(assembled) = item? {
                return Ok(assembled);
            }
        }
        Err(LlmError::Connection {
            detail: "the stream ended without a response".to_string(),
        })
    }
}

enum State {
    Connect,
    Wait(Duration),
    Body(Box<BodyStream>),
    Finished,
}

struct Driver {
    http: reqwest::Client,
    keys: KeySource,
    route: Route,
    request: ChatRequest,
    rng: StdRng,
    on_fallback: bool,
    /// Attempts made on the current profile.
    attempt: u32,
    /// Consecutive "overloaded" failures on the current profile.
    overloads: u32,
    /// Whether content events went out since the start or the last
    /// `Restart`; only `restart_if_emitted` clears it.
    emitted: bool,
    state: State,
    pending: VecDeque<StreamEvent>,
}

impl Driver {
    fn current(&self) -> &NamedProfile {
        match (&self.route.fallback, self.on_fallback) {
            (Some(fb), true) => fb,
            _ => &self.route.primary,
        }
    }

    async fn next(&mut self) -> Option<Result<StreamEvent, LlmError>> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Some(Ok(ev));
            }
            match std::mem::replace(&mut self.state, State::Finished) {
                State::Finished => return None,
                State::Wait(delay) => {
                    tokio::time::sleep(delay).await;
                    self.state = State::Connect;
                }
                State::Connect => match self.connect().await {
                    Ok(body) => self.state = State::Body(Box::new(body)),
                    Err(e) => {
                        if let Some(e) = self.failed(e) {
                            return Some(Err(e));
                        }
                    }
                },
                State::Body(mut body) => {
                    let mut out = Vec::new();
                    match body.step(&mut out).await {
                        Ok(Some(mut assembled)) => {
                            let named = self.current();
                            assembled.profile.clone_from(&named.name);
                            assembled.cost = assembled
                                .usage
                                .map(|u| named.profile.cost(&u))
                                .unwrap_or(0.0);
                            self.pending.extend(out);
                            self.pending.push_back(StreamEvent::Done(assembled));
                        }
                        Ok(None) => {
                            self.emitted |= !out.is_empty();
                            self.pending.extend(out);
                            self.state = State::Body(body);
                        }
                        Err(e) => {
                            // Events decoded alongside the failure belong to
                            // the failed attempt: never handed out.
                            drop(body);
                            if let Some(e) = self.failed(e) {
                                return Some(Err(e));
                            }
                        }
                    }
                }
            }
        }
    }

    /// Decides what follows a failed attempt. Returns the error when the
    /// call is over; otherwise queues the events saying what happens next.
    fn failed(&mut self, error: LlmError) -> Option<LlmError> {
        if !error.is_retryable() {
            return Some(error);
        }
        let overloaded = matches!(error, LlmError::Overloaded { .. });
        self.overloads = if overloaded { self.overloads + 1 } else { 0 };
        let settings = self.current().profile.retry.clone();
        let from = self.current().name.clone();
        let fall_back = overloaded
            && !self.on_fallback
            && (self.overloads >= settings.fallback_after.max(1)
                || self.attempt >= settings.max_attempts);
        if let Some(to) = self.route.fallback.as_ref().filter(|_| fall_back) {
            let to = to.name.clone();
            tracing::warn!(from = %from, to = %to, error = %error, "model overloaded, falling back");
            self.pending
                .push_back(StreamEvent::Fallback { from, to, error });
            self.restart_if_emitted();
            self.on_fallback = true;
            self.attempt = 0;
            self.overloads = 0;
            self.state = State::Connect;
            return None;
        }
        if self.attempt >= settings.max_attempts {
            return Some(error);
        }
        let Some(delay) = retry::delay(&settings, self.attempt, error.retry_after(), &mut self.rng)
        else {
            // The provider wants a longer pause than a session should stall.
            return Some(error);
        };
        tracing::info!(profile = %from, attempt = self.attempt, ?delay, error = %error, "retrying model call");
        self.pending.push_back(StreamEvent::Retrying {
            attempt: self.attempt,
            max_attempts: settings.max_attempts,
            delay,
            error,
        });
        self.restart_if_emitted();
        self.state = State::Wait(delay);
        None
    }

    fn restart_if_emitted(&mut self) {
        if self.emitted {
            self.pending.push_back(StreamEvent::Restart);
            self.emitted = false;
        }
    }

    async fn connect(&mut self) -> Result<BodyStream, LlmError> {
        self.attempt += 1;
        let named = self.current();
        let profile = &named.profile;
        let key = api_key(&self.keys, named)?;
        let ctx = Ctx {
            profile: &named.name,
            key: key.as_deref(),
        };
        let (url, body) = match profile.api {
            Api::Openai => (
                openai::url(&profile.base_url),
                openai::body(profile, &self.request)?,
            ),
            Api::Anthropic => (
                anthropic::url(&profile.base_url),
                anthropic::body(profile, &self.request)?,
            ),
        };
        let body = serde_json::to_vec(&body).map_err(|e| LlmError::InvalidRequest {
            detail: ctx.detail(None, &format!("cannot encode the request: {e}")),
        })?;
        let mut req = self
            .http
            .post(&url)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "text/event-stream")
            .body(body);
        if let Some(key) = &key {
            req = match profile.api {
                Api::Openai => {
                    req.header(AUTHORIZATION, secret_header(ctx, &format!("Bearer {key}"))?)
                }
                Api::Anthropic => req.header("x-api-key", secret_header(ctx, key)?),
            };
        }
        if profile.api == Api::Anthropic {
            req = req.header("anthropic-version", anthropic::VERSION);
        }
        let idle = profile.stream_idle_timeout;
        // The idle guard covers the wait for the headers too: a server that
        // accepts the connection and says nothing is as stuck as a silent
        // stream.
        let resp = match tokio::time::timeout(idle, req.send()).await {
            Err(_) => {
                return Err(LlmError::Timeout {
                    detail: ctx.detail(
                        None,
                        &format!("no answer from {url} within {idle:?} (stream_idle_timeout)"),
                    ),
                });
            }
            Ok(Err(e)) => return Err(classify_reqwest(ctx, &e)),
            Ok(Ok(resp)) => resp,
        };
        let status = resp.status();
        if !status.is_success() {
            let retry_after = parse_retry_after(resp.headers());
            let text = read_small_body(resp, idle).await;
            return Err(classify_http(ctx, status.as_u16(), retry_after, &text));
        }
        let json = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if json {
            // An error reported with status 200, or a server that ignored
            // `stream: true`.
            let text = read_small_body(resp, idle).await;
            return Err(if text.contains("\"error\"") {
                classify_stream_error(ctx, &text)
            } else {
                LlmError::MalformedStream {
                    detail: ctx.detail(None, "the server answered with JSON, not an event stream"),
                }
            });
        }
        let name = named.name.clone();
        let scrub_key = key.clone();
        let bytes = resp.bytes_stream().map(move |r| {
            r.map_err(|e| {
                classify_reqwest(
                    Ctx {
                        profile: &name,
                        key: scrub_key.as_deref(),
                    },
                    &e,
                )
            })
        });
        Ok(BodyStream::new(
            bytes,
            profile.api,
            idle,
            named.name.clone(),
            key,
        ))
    }
}

/// The key for `named`, read now so a rotated key is picked up without a
/// restart. `Ok(None)`: the profile needs none (a local server).
fn api_key(keys: &KeySource, named: &NamedProfile) -> Result<Option<String>, LlmError> {
    let Some(var) = &named.profile.api_key_env else {
        return Ok(None);
    };
    match keys(var) {
        Some(k) if !k.trim().is_empty() => Ok(Some(k.trim().to_string())),
        _ => Err(LlmError::Config {
            detail: format!(
                "model profile '{}' needs an API key: set the environment variable {var} (named by \
                 its api_key_env) in flytod's environment",
                named.name
            ),
        }),
    }
}

/// A header value marked sensitive, so no Debug output of the request
/// shows it. The error never quotes the value.
fn secret_header(ctx: Ctx<'_>, value: &str) -> Result<HeaderValue, LlmError> {
    let mut v = HeaderValue::from_str(value).map_err(|_| LlmError::Config {
        detail: format!(
            "the API key of model profile '{}' contains characters not allowed in an HTTP header",
            ctx.profile
        ),
    })?;
    v.set_sensitive(true);
    Ok(v)
}

/// Best effort: what arrives within the idle timeout, up to a bound.
async fn read_small_body(mut resp: reqwest::Response, idle: Duration) -> String {
    let mut buf = Vec::new();
    while buf.len() < MAX_ERROR_BODY {
        match tokio::time::timeout(idle, resp.chunk()).await {
            Ok(Ok(Some(chunk))) => buf.extend_from_slice(&chunk),
            _ => break,
        }
    }
    buf.truncate(MAX_ERROR_BODY);
    String::from_utf8_lossy(&buf).into_owned()
}
