//! The one place provider failures are classified: HTTP status and error
//! bodies (OpenAI, DeepSeek, Anthropic and look-alike shapes), error events
//! inside a stream, and transport errors from reqwest. Everything above this
//! module matches on [`LlmError`] and never looks at a status or a body.
//!
//! **Invariant**: no error text carries the API key. Provider messages are
//! scrubbed of it before they are stored, and the key is never formatted.

use std::time::Duration;

/// A classified provider failure. Each message says what went wrong and,
/// where the user can act, what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    #[error("rate limited: {detail}{}", retry_hint(.retry_after))]
    RateLimited {
        retry_after: Option<Duration>,
        detail: String,
    },
    #[error("the provider is overloaded: {detail}; try again later or set [roles] main_fallback")]
    Overloaded { detail: String },
    #[error(
        "the prompt is too long for the model's context window: {detail}; compact the session or start a new one"
    )]
    PromptTooLong { detail: String },
    #[error(
        "the request is too large for the provider: {detail}; shorten large tool results or start a new session"
    )]
    RequestTooLarge { detail: String },
    #[error(
        "authentication failed: {detail}; check the key in the environment variable named by the profile's api_key_env"
    )]
    Auth { detail: String },
    #[error("model not found: {detail}; check model and base_url of the model profile")]
    ModelNotFound { detail: String },
    #[error("billing problem: {detail}; check the provider account's balance or plan")]
    Billing { detail: String },
    #[error("the provider rejected the request: {detail}")]
    InvalidRequest { detail: String },
    #[error("provider server error: {detail}")]
    Server { detail: String },
    #[error("connection failed: {detail}")]
    Connection { detail: String },
    #[error("timed out: {detail}")]
    Timeout { detail: String },
    #[error("TLS failure: {detail}; check base_url and the system clock")]
    Tls { detail: String },
    #[error(
        "malformed stream: {detail}; check that the profile's api matches the server at base_url"
    )]
    MalformedStream { detail: String },
    /// A setting is missing or wrong (no model, no key, bad profile).
    #[error("{detail}")]
    Config { detail: String },
}

fn retry_hint(retry_after: &Option<Duration>) -> String {
    match retry_after {
        Some(d) => format!(" (the provider asks to retry after {} s)", d.as_secs_f64()),
        None => String::new(),
    }
}

impl LlmError {
    /// Whether the same request may succeed if sent again later.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LlmError::RateLimited { .. }
                | LlmError::Overloaded { .. }
                | LlmError::Server { .. }
                | LlmError::Connection { .. }
                | LlmError::Timeout { .. }
        )
    }

    /// How long the provider asked us to wait, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A short stable name for events, logs and counters.
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::RateLimited { .. } => "rate_limited",
            LlmError::Overloaded { .. } => "overloaded",
            LlmError::PromptTooLong { .. } => "prompt_too_long",
            LlmError::RequestTooLarge { .. } => "request_too_large",
            LlmError::Auth { .. } => "auth",
            LlmError::ModelNotFound { .. } => "model_not_found",
            LlmError::Billing { .. } => "billing",
            LlmError::InvalidRequest { .. } => "invalid_request",
            LlmError::Server { .. } => "server",
            LlmError::Connection { .. } => "connection",
            LlmError::Timeout { .. } => "timeout",
            LlmError::Tls { .. } => "tls",
            LlmError::MalformedStream { .. } => "malformed_stream",
            LlmError::Config { .. } => "config",
        }
    }
}

/// Longest provider message kept in an error.
const MAX_DETAIL: usize = 600;

/// What a classification needs to know besides the failure: which profile
/// (for the message) and the key (only to scrub it from provider text).
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub profile: &'a str,
    pub key: Option<&'a str>,
}

impl Ctx<'_> {
    /// `model profile 'x': HTTP 429: <provider text>`, scrubbed and bounded.
    pub(crate) fn detail(&self, status: Option<u16>, text: &str) -> String {
        let text = scrub(text.trim(), self.key);
        let text = truncate(&text, MAX_DETAIL);
        match status {
            Some(s) => format!("model profile '{}': HTTP {s}: {text}", self.profile),
            None => format!("model profile '{}': {text}", self.profile),
        }
    }
}

/// Replaces every occurrence of the key. Short keys are left alone: a
/// one-letter "key" would blank out ordinary words and protect nothing.
pub(crate) fn scrub(text: &str, key: Option<&str>) -> String {
    match key {
        Some(k) if k.len() >= 8 && text.contains(k) => text.replace(k, "[redacted]"),
        _ => text.to_string(),
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The fields that matter of any of the error JSON shapes seen in the wild:
/// `{"error": {"message", "type", "code", "status_code"}}` (OpenAI,
/// DeepSeek, Groq), `{"type": "error", "error": {"type", "message"}}`
/// (Anthropic), `{"error": "text"}`, `{"message": …}` (vLLM) and
/// `{"detail": …}` (FastAPI-based servers).
struct ErrorBody {
    message: String,
    /// type and code, lower case, for matching.
    codes: String,
    status: Option<u16>,
}

fn parse_body(body: &str) -> ErrorBody {
    let fallback = ErrorBody {
        message: body.trim().to_string(),
        codes: String::new(),
        status: None,
    };
    let Ok(serde_json::Value::Object(root)) = serde_json::from_str::<serde_json::Value>(body)
    else {
        return fallback;
    };
    let obj = match root.get("error") {
        Some(serde_json::Value::Object(e)) => e,
        Some(serde_json::Value::String(s)) => {
            return ErrorBody {
                message: s.clone(),
                codes: String::new(),
                status: None,
            };
        }
        _ => &root,
    };
    let text = |k: &str| match obj.get(k) {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(serde_json::Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let message = text("message")
        .or_else(|| text("detail"))
        .unwrap_or_else(|| body.trim().to_string());
    let codes = [text("type"), text("code")]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    let status = obj
        .get("status_code")
        .and_then(serde_json::Value::as_u64)
        .and_then(|s| u16::try_from(s).ok());
    ErrorBody {
        message,
        codes,
        status,
    }
}

const PROMPT_TOO_LONG: &[&str] = &[
    "context_length_exceeded",
    "prompt is too long",
    "maximum context length",
    "context length",
    "context window",
    "exceed_context_size",
    "exceeds the available context size",
    "input is too long",
    "reduce the length of the messages",
    "too many input tokens",
];

const BILLING: &[&str] = &[
    "insufficient_quota",
    "insufficient balance",
    "insufficient_balance",
    "credit balance is too low",
    "exceeded your current quota",
    "payment required",
];

/// Classifies an HTTP error answer.
pub(crate) fn classify_http(
    ctx: Ctx<'_>,
    status: u16,
    retry_after: Option<Duration>,
    body: &str,
) -> LlmError {
    classify(ctx, Some(status), retry_after, body)
}

/// Classifies an error event inside a 200 stream (`event: error`, or a data
/// chunk holding an `error` object). Its status, if any, is the one the body
/// names; one that names none is taken as a transient server error unless
/// its type says otherwise.
pub(crate) fn classify_stream_error(ctx: Ctx<'_>, body: &str) -> LlmError {
    classify(ctx, None, None, body)
}

fn classify(
    ctx: Ctx<'_>,
    http_status: Option<u16>,
    retry_after: Option<Duration>,
    body: &str,
) -> LlmError {
    let parsed = parse_body(body);
    let status = http_status.or(parsed.status);
    let hay = format!("{} {}", parsed.codes, parsed.message.to_lowercase());
    let has = |needles: &[&str]| needles.iter().any(|n| hay.contains(n));
    let message = if parsed.message.is_empty() {
        "(no error message)".to_string()
    } else {
        parsed.message.clone()
    };
    let detail = ctx.detail(status, &message);
    let client_error = status.is_none_or(|s| (400..500).contains(&s));

    // Billing first: OpenAI reports an empty quota as a 429.
    if status == Some(402) || has(BILLING) {
        LlmError::Billing { detail }
    } else if status == Some(529) || hay.contains("overloaded") {
        LlmError::Overloaded { detail }
    } else if client_error && has(PROMPT_TOO_LONG) {
        LlmError::PromptTooLong { detail }
    } else if status == Some(413) || has(&["request_too_large", "payload too large"]) {
        LlmError::RequestTooLarge { detail }
    } else if matches!(status, Some(401) | Some(403))
        || has(&[
            "authentication_error",
            "permission_error",
            "invalid_api_key",
        ])
    {
        LlmError::Auth { detail }
    } else if status == Some(404) || has(&["model_not_found", "not_found_error"]) {
        LlmError::ModelNotFound { detail }
    } else if status == Some(429) || has(&["rate_limit"]) {
        LlmError::RateLimited {
            retry_after,
            detail,
        }
    } else if status == Some(408) {
        LlmError::Timeout { detail }
    } else if let Some(s) = status {
        if s >= 500 {
            LlmError::Server { detail }
        } else {
            LlmError::InvalidRequest { detail }
        }
    } else if has(&["invalid_request"]) {
        LlmError::InvalidRequest { detail }
    } else {
        LlmError::Server { detail }
    }
}

/// Classifies a transport failure. reqwest's messages name the URL (never
/// the key, which travels in a header), and they are scrubbed anyway.
pub(crate) fn classify_reqwest(ctx: Ctx<'_>, err: &reqwest::Error) -> LlmError {
    let mut chain = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        chain.push_str(": ");
        chain.push_str(&s.to_string());
        source = s.source();
    }
    let detail = ctx.detail(None, &chain);
    let lower = chain.to_lowercase();
    if err.is_timeout() {
        LlmError::Timeout { detail }
    } else if lower.contains("certificate") || lower.contains("tls") {
        LlmError::Tls { detail }
    } else {
        // Refused, reset, DNS, or the body cut mid-way: all worth a retry.
        LlmError::Connection { detail }
    }
}

/// `retry-after` (seconds, possibly fractional) or `retry-after-ms`. An HTTP
/// date or garbage yields `None`, and the caller's backoff applies.
pub(crate) fn parse_retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let ms = get("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok());
    if let Some(ms) = ms.filter(|ms| ms.is_finite() && *ms >= 0.0) {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let secs = get("retry-after")?.trim().parse::<f64>().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}
