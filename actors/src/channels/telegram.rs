//! The Telegram platform: the Bot API over HTTPS (`getUpdates` long poll,
//! `sendMessage`, `sendChatAction`), its answers mapped to the room's
//! [`Polled`]/[`Inbound`] and its failures to [`PlatformError`] classes.
//! It keeps no state beyond the HTTP client and whether it has already
//! removed a webhook; journaling, dedup and retries belong to the room.
//!
//! The bot token is part of every URL, so no URL is ever formatted into an
//! error, a log line or `Debug` output.

use super::chunk::{self, Measure};
use super::platform::{Inbound, OutChunk, Platform, PlatformError, PlatformFuture, Polled};
use serde_json::{Value, json};
use std::fmt;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub const DEFAULT_API_BASE: &str = "https://api.telegram.org";
pub const DEFAULT_POLL_TIMEOUT: Duration = Duration::from_secs(30);
/// Telegram's limit on one message, in UTF-16 code units.
pub const MAX_MESSAGE: usize = 4096;
/// A long poll may take this much longer than its own timeout.
const POLL_GRACE: Duration = Duration::from_secs(10);
/// The deadline of every call that is not a long poll.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// A 429 without `retry_after` waits this long.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Why a [`TelegramPlatform`] could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelegramSetupError {
    #[error(
        "the Telegram bot token is malformed: it must be non-empty with no '/', '?', '#' or whitespace (copy it exactly as @BotFather gave it)"
    )]
    BadToken,
    #[error(
        "the Telegram api_base {0:?} is not an http:// or https:// URL: fix it or leave it out"
    )]
    BadApiBase(String),
    #[error("cannot set up the HTTP client for Telegram: {0}")]
    Client(String),
}

/// One Telegram bot, polled with `getUpdates`.
pub struct TelegramPlatform {
    token: String,
    api_base: String,
    poll_timeout: Duration,
    parse_mode: Option<String>,
    http: RwLock<reqwest::Client>,
    /// The webhook is removed at most once: a second 409 means another
    /// poller or setter is fighting us, and that is a conflict to show.
    webhook_deleted: AtomicBool,
}

impl fmt::Debug for TelegramPlatform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelegramPlatform")
            .field("token", &"[redacted]")
            .field("api_base", &self.api_base)
            .field("poll_timeout", &self.poll_timeout)
            .field("parse_mode", &self.parse_mode)
            .finish()
    }
}

/// A failed Bot API call before it is classified.
enum Failure {
    /// Telegram answered `ok: false`.
    Api {
        code: i64,
        description: String,
        retry_after: Option<u64>,
        migrate_to: Option<i64>,
    },
    /// No usable answer: the network, a deadline, a body that is not JSON.
    Transient(String),
}

impl TelegramPlatform {
    /// `api_base` defaults to [`DEFAULT_API_BASE`]; `parse_mode` `None`
    /// sends plain text.
    pub fn new(
        token: String,
        api_base: Option<String>,
        poll_timeout: Duration,
        parse_mode: Option<String>,
    ) -> Result<TelegramPlatform, TelegramSetupError> {
        if token.is_empty()
            || token
                .chars()
                .any(|c| c.is_whitespace() || matches!(c, '/' | '?' | '#'))
        {
            return Err(TelegramSetupError::BadToken);
        }
        let api_base = api_base
            .unwrap_or_else(|| DEFAULT_API_BASE.to_string())
            .trim_end_matches('/')
            .to_string();
        if !(api_base.starts_with("https://") || api_base.starts_with("http://")) {
            return Err(TelegramSetupError::BadApiBase(api_base));
        }
        let http = build_client(&api_base)?;
        Ok(TelegramPlatform {
            token,
            api_base,
            poll_timeout,
            parse_mode,
            http: RwLock::new(http),
            webhook_deleted: AtomicBool::new(false),
        })
    }

    fn client(&self) -> reqwest::Client {
        self.http.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Defence in depth: no text leaving this module carries the token.
    fn redact(&self, text: String) -> String {
        text.replace(&self.token, "[redacted]")
    }

    /// One Bot API call with a JSON body; answers its `result`.
    async fn call(&self, method: &str, body: Value, timeout: Duration) -> Result<Value, Failure> {
        let url = format!("{}/bot{}/{method}", self.api_base, self.token);
        let transient = |what: &str, e: reqwest::Error| {
            Failure::Transient(self.redact(format!(
                "Telegram {method}: {what}: {}",
                error_chain(&e.without_url())
            )))
        };
        let response = self
            .client()
            .post(url)
            .timeout(timeout)
            .json(&body)
            .send()
            .await
            .map_err(|e| transient("no answer", e))?;
        let status = response.status();
        let header_retry = super::platform::retry_after_header(&response);
        let bytes = response
            .bytes()
            .await
            .map_err(|e| transient("the answer broke off", e))?;
        let Ok(answer) = serde_json::from_slice::<Value>(&bytes) else {
            return Err(Failure::Transient(format!(
                "Telegram {method}: HTTP {status} with a body that is not JSON (a proxy or an outage in between?)"
            )));
        };
        if answer["ok"] == json!(true) && status.is_success() {
            return Ok(answer["result"].clone());
        }
        let params = &answer["parameters"];
        Err(Failure::Api {
            code: answer["error_code"]
                .as_i64()
                .unwrap_or(i64::from(status.as_u16())),
            description: self.redact(
                answer["description"]
                    .as_str()
                    .unwrap_or("no description")
                    .to_string(),
            ),
            retry_after: params["retry_after"].as_u64().or(header_retry),
            migrate_to: params["migrate_to_chat_id"].as_i64(),
        })
    }

    async fn poll_once(&self, cursor: Option<&str>) -> Result<Polled, PlatformError> {
        let mut body = json!({
            "timeout": self.poll_timeout.as_secs(),
            "allowed_updates": ["message"],
        });
        if let Some(c) = cursor {
            let offset: i64 = c.parse().map_err(|_| {
                PlatformError::Rejected(format!(
                    "the stored Telegram cursor {c:?} is not an update id; clear the binding's cursor"
                ))
            })?;
            body["offset"] = json!(offset);
        }
        let timeout = self.poll_timeout + POLL_GRACE;
        let result = match self.call("getUpdates", body.clone(), timeout).await {
            Err(Failure::Api {
                code: 409,
                description,
                ..
            }) if description.to_lowercase().contains("webhook")
                && !self.webhook_deleted.swap(true, Ordering::SeqCst) =>
            {
                tracing::info!(
                    "Telegram bot has a webhook set; deleting it (keeping pending updates) to poll"
                );
                self.call(
                    "deleteWebhook",
                    json!({"drop_pending_updates": false}),
                    CALL_TIMEOUT,
                )
                .await
                .map_err(|f| {
                    // It did not happen: the next webhook 409 may try again.
                    self.webhook_deleted.store(false, Ordering::SeqCst);
                    classify("deleteWebhook", f)
                })?;
                self.call("getUpdates", body, timeout).await
            }
            other => other,
        }
        .map_err(|f| classify("getUpdates", f))?;
        parse_updates(&result)
    }

    async fn send_once(&self, chat: &str, chunk: &OutChunk) -> Result<String, PlatformError> {
        let mut body = json!({"chat_id": chat_id(chat), "text": chunk.text});
        if let Some(mode) = self.parse_mode.as_ref().filter(|_| !chunk.plain) {
            body["parse_mode"] = json!(mode);
        }
        let result = self
            .call("sendMessage", body, CALL_TIMEOUT)
            .await
            .map_err(|f| classify("sendMessage", f))?;
        id_string(&result["message_id"]).ok_or_else(|| {
            PlatformError::Transient(
                "Telegram sendMessage answered ok without a message_id".to_string(),
            )
        })
    }
}

impl Platform for TelegramPlatform {
    fn poll<'a>(&'a self, cursor: Option<&'a str>) -> PlatformFuture<'a, Polled> {
        Box::pin(self.poll_once(cursor))
    }

    fn send<'a>(&'a self, chat: &'a str, chunk: &'a OutChunk) -> PlatformFuture<'a, String> {
        Box::pin(self.send_once(chat, chunk))
    }

    fn typing<'a>(&'a self, chat: &'a str) -> PlatformFuture<'a, ()> {
        Box::pin(async move {
            self.call(
                "sendChatAction",
                json!({"chat_id": chat_id(chat), "action": "typing"}),
                CALL_TIMEOUT,
            )
            .await
            .map(|_| ())
            .map_err(|f| classify("sendChatAction", f))
        })
    }

    fn chunk(&self, text: &str) -> Vec<String> {
        chunk::split(text, MAX_MESSAGE, Measure::Utf16)
    }

    fn poll_timeout(&self) -> Duration {
        self.poll_timeout
    }

    fn reset(&self) {
        match build_client(&self.api_base) {
            Ok(fresh) => *self.http.write().unwrap_or_else(|e| e.into_inner()) = fresh,
            Err(e) => tracing::warn!(error = %e, "Telegram: keeping the old HTTP client"),
        }
    }
}

fn build_client(api_base: &str) -> Result<reqwest::Client, TelegramSetupError> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .tcp_keepalive(Duration::from_secs(60))
        .user_agent(concat!("flytod/", env!("CARGO_PKG_VERSION")));
    // A proxy from the environment must not capture a loopback Bot API
    // (a local bot server, or a test's fake).
    if is_loopback(api_base) {
        builder = builder.no_proxy();
    }
    builder
        .build()
        .map_err(|e| TelegramSetupError::Client(error_chain(&e.without_url())))
}

fn is_loopback(api_base: &str) -> bool {
    let rest = api_base.split_once("://").map_or(api_base, |(_, r)| r);
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    host == "localhost"
        || host.starts_with("localhost:")
        || host.starts_with("127.")
        || host.starts_with("[::1]")
}

/// An error and its sources, one after the other.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Chat ids are numbers; `@channelname` stays a string.
fn chat_id(chat: &str) -> Value {
    chat.parse::<i64>()
        .map_or_else(|_| json!(chat), |n| json!(n))
}

fn id_string(v: &Value) -> Option<String> {
    v.as_i64()
        .map(|n| n.to_string())
        .or_else(|| v.as_str().map(str::to_string))
}

fn classify(method: &str, failure: Failure) -> PlatformError {
    let (code, description, retry_after, migrate_to) = match failure {
        Failure::Transient(text) => return PlatformError::Transient(text),
        Failure::Api {
            code,
            description,
            retry_after,
            migrate_to,
        } => (code, description, retry_after, migrate_to),
    };
    let said = format!("Telegram {method} answered {code} {description:?}");
    match code {
        401 | 404 => PlatformError::Auth(format!(
            "{said}: check the bot token (revoked or mistyped? @BotFather shows the current one)"
        )),
        403 => PlatformError::ChatClosed(format!(
            "{said}: the user blocked the bot or removed it from the chat"
        )),
        409 => PlatformError::Conflict(format!(
            "{said}: stop the other program polling this bot, or remove its webhook"
        )),
        429 => PlatformError::RateLimited {
            retry_after: retry_after.map_or(DEFAULT_RETRY_AFTER, Duration::from_secs),
        },
        400 if description.to_lowercase().contains("can't parse entities") => {
            PlatformError::Markup(format!("{said}: resend it as plain text"))
        }
        400 if migrate_to.is_some() => PlatformError::Rejected(format!(
            "{said}: the group became a supergroup with chat id {}; send there",
            migrate_to.unwrap_or_default()
        )),
        400..=499 => PlatformError::Rejected(said),
        _ => PlatformError::Transient(format!("{said}: Telegram is having trouble; retry later")),
    }
}

/// `getUpdates`' `result` as the room's poll result.
fn parse_updates(result: &Value) -> Result<Polled, PlatformError> {
    let updates = result.as_array().ok_or_else(|| {
        PlatformError::Transient("Telegram getUpdates answered ok without a result list".into())
    })?;
    let mut polled = Polled::default();
    let mut last: Option<i64> = None;
    for update in updates {
        let Some(id) = update["update_id"].as_i64() else {
            continue;
        };
        last = Some(last.map_or(id, |l| l.max(id)));
        if let Some(inbound) = inbound(id, &update["message"]) {
            polled.updates.push(inbound);
        }
    }
    polled.cursor = last.map(|l| (l + 1).to_string());
    Ok(polled)
}

fn inbound(update_id: i64, message: &Value) -> Option<Inbound> {
    let chat = id_string(&message["chat"]["id"])?;
    let from = &message["from"];
    let sender = &message["sender_chat"];
    let migrate_to = id_string(&message["migrate_to_chat_id"]);
    let text = message["text"]
        .as_str()
        .or_else(|| message["caption"].as_str())
        .unwrap_or("");
    if text.is_empty() && migrate_to.is_none() {
        return None;
    }
    let name = [&from["username"], &from["first_name"], &sender["title"]]
        .into_iter()
        .find_map(|v| v.as_str())
        .unwrap_or("");
    Some(Inbound {
        update_id: update_id.to_string(),
        chat,
        user: id_string(&from["id"])
            .or_else(|| id_string(&sender["id"]))
            .unwrap_or_default(),
        user_name: name.to_string(),
        message_id: id_string(&message["message_id"]).unwrap_or_default(),
        text: text.to_string(),
        context_token: None,
        migrate_to,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_become_inbound_and_advance_the_cursor() {
        let result = json!([
            {"update_id": 10, "message": {"message_id": 5, "chat": {"id": -100}, "from": {"id": 7, "username": "ann", "first_name": "Ann"}, "text": "hi"}},
            {"update_id": 11, "message": {"message_id": 6, "chat": {"id": 8}, "from": {"id": 8, "first_name": "Bob"}, "caption": "a photo"}},
            {"update_id": 12, "message": {"message_id": 7, "chat": {"id": 8}, "from": {"id": 8}, "sticker": {}}},
            {"update_id": 13, "message": {"message_id": 8, "chat": {"id": -5}, "from": {"id": 8}, "migrate_to_chat_id": -1009}},
            {"update_id": 14, "edited_message": {"message_id": 1, "chat": {"id": 8}, "text": "x"}},
        ]);
        let polled = parse_updates(&result).expect("parse");
        assert_eq!(polled.cursor.as_deref(), Some("15"));
        let got: Vec<_> = polled
            .updates
            .iter()
            .map(|u| {
                (
                    u.update_id.as_str(),
                    u.chat.as_str(),
                    u.user.as_str(),
                    u.user_name.as_str(),
                    u.message_id.as_str(),
                    u.text.as_str(),
                    u.migrate_to.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("10", "-100", "7", "ann", "5", "hi", None),
                ("11", "8", "8", "Bob", "6", "a photo", None),
                ("13", "-5", "8", "", "8", "", Some("-1009")),
            ]
        );
        assert_eq!(parse_updates(&json!([])).expect("empty"), Polled::default());
    }

    #[test]
    fn debug_and_setup_errors_hide_the_token() {
        let token = "123456:SECRET-token".to_string();
        let p = TelegramPlatform::new(token.clone(), None, DEFAULT_POLL_TIMEOUT, None)
            .expect("platform");
        let debug = format!("{p:?}");
        assert!(
            !debug.contains("SECRET") && debug.contains("[redacted]"),
            "{debug}"
        );
        let e = TelegramPlatform::new("12 34/x".into(), None, DEFAULT_POLL_TIMEOUT, None)
            .expect_err("bad token");
        assert!(!e.to_string().contains("34/x"));
        let e = TelegramPlatform::new(token, Some("ftp://x".into()), DEFAULT_POLL_TIMEOUT, None)
            .expect_err("bad base");
        assert!(matches!(e, TelegramSetupError::BadApiBase(_)));
    }

    #[test]
    fn loopback_bases_are_recognised() {
        assert!(is_loopback("http://127.0.0.1:8081"));
        assert!(is_loopback("http://localhost/x"));
        assert!(is_loopback("http://[::1]:80"));
        assert!(!is_loopback("https://api.telegram.org"));
        assert!(!is_loopback("https://localhost.example.com"));
    }

    #[test]
    fn failures_fall_into_classes() {
        let api = |code: i64, d: &str, retry_after: Option<u64>, migrate_to: Option<i64>| {
            classify(
                "sendMessage",
                Failure::Api {
                    code,
                    description: d.into(),
                    retry_after,
                    migrate_to,
                },
            )
        };
        assert!(matches!(
            api(401, "Unauthorized", None, None),
            PlatformError::Auth(_)
        ));
        assert!(matches!(
            api(404, "Not Found", None, None),
            PlatformError::Auth(_)
        ));
        assert!(matches!(
            api(403, "Forbidden: bot was blocked by the user", None, None),
            PlatformError::ChatClosed(_)
        ));
        assert_eq!(
            api(429, "Too Many Requests: retry after 7", Some(7), None),
            PlatformError::RateLimited {
                retry_after: Duration::from_secs(7)
            }
        );
        assert!(matches!(
            api(
                400,
                "Bad Request: can't parse entities: Unsupported start tag",
                None,
                None
            ),
            PlatformError::Markup(_)
        ));
        let PlatformError::Rejected(text) = api(
            400,
            "Bad Request: group chat was upgraded to a supergroup chat",
            None,
            Some(-100123),
        ) else {
            panic!("migration is a rejection");
        };
        assert!(text.contains("-100123"), "{text}");
        assert!(matches!(
            api(400, "Bad Request: chat not found", None, None),
            PlatformError::Rejected(_)
        ));
        assert!(matches!(
            api(502, "Bad Gateway", None, None),
            PlatformError::Transient(_)
        ));
    }
}
