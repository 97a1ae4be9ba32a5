//! The WeChat ClawBot platform: Tencent's iLink bot HTTP API
//! (`ilink/bot/getupdates` long poll, `ilink/bot/sendmessage`,
//! `getconfig` + `sendtyping`) and the QR binding that yields a bot token.
//! It owns only the wire format and the error classes; journaling, dedup,
//! the outbox and context-token freshness belong to the room. The bot
//! token never leaves this module in an error or a Debug line.

use super::platform::{Inbound, OutChunk, Platform, PlatformError, PlatformFuture, Polled};
use rand::Rng;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, RwLock};
use std::time::Duration;

/// Where the iLink bot API lives unless a binding names another host (the
/// QR confirmation may answer a regional `baseurl`).
pub const DEFAULT_BASE_URL: &str = "https://ilinkai.weixin.qq.com";

/// The `base_info.channel_version` every request body carries.
const CHANNEL_VERSION: &str = "1.0.2";

/// Deadline for the short calls (send, typing, QR code).
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// iLink message types and states (`message_type`, `message_state`).
const MESSAGE_TYPE_BOT: i64 = 2;
const STATE_GENERATING: i64 = 1;
const STATE_FINISH: i64 = 2;
/// `errcode`/`ret` of an expired bot session.
const SESSION_EXPIRED: i64 = -14;

pub struct WechatPlatform {
    token: String,
    base_url: String,
    poll_timeout: Duration,
    chunk_chars: usize,
    max_chunks: usize,
    http: RwLock<reqwest::Client>,
    /// `typing_ticket` per user from `getconfig`: a hint cache, safe to lose.
    typing_tickets: Mutex<HashMap<String, String>>,
    /// The latest context token seen per user, for `getconfig` only (the
    /// room owns the tokens replies carry).
    last_context: Mutex<HashMap<String, String>>,
}

impl fmt::Debug for WechatPlatform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WechatPlatform")
            .field("token", &"[redacted]")
            .field("base_url", &self.base_url)
            .field("poll_timeout", &self.poll_timeout)
            .field("chunk_chars", &self.chunk_chars)
            .field("max_chunks", &self.max_chunks)
            .finish()
    }
}

impl WechatPlatform {
    /// `base_url` defaults to [`DEFAULT_BASE_URL`]; `chunk_chars` (1000 is
    /// a good value) and `max_chunks` (8) bound each reply.
    pub fn new(
        bot_token: String,
        base_url: Option<String>,
        poll_timeout: Duration,
        chunk_chars: usize,
        max_chunks: usize,
    ) -> Result<WechatPlatform, PlatformError> {
        let base_url = trim_base(base_url.as_deref().unwrap_or(DEFAULT_BASE_URL));
        let http = build_client(&base_url)?;
        Ok(WechatPlatform {
            token: bot_token,
            base_url,
            poll_timeout,
            chunk_chars: chunk_chars.max(1),
            max_chunks: max_chunks.max(1),
            http: RwLock::new(http),
            typing_tickets: Mutex::new(HashMap::new()),
            last_context: Mutex::new(HashMap::new()),
        })
    }

    fn client(&self) -> reqwest::Client {
        self.http.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// POSTs `body` (plus `base_info`) to `endpoint` with the bot headers
    /// and answers the JSON once `ret`/`errcode` said success.
    async fn post(
        &self,
        endpoint: &str,
        mut body: Value,
        timeout: Duration,
    ) -> Result<Value, PlatformError> {
        body["base_info"] = json!({ "channel_version": CHANNEL_VERSION });
        let what = format!("WeChat iLink {endpoint}");
        let request = self
            .client()
            .post(format!("{}/ilink/bot/{endpoint}", self.base_url))
            .timeout(timeout)
            .header("AuthorizationType", "ilink_bot_token")
            .header("Authorization", format!("Bearer {}", self.token))
            .header("X-WECHAT-UIN", fresh_uin())
            .json(&body);
        let result = read_json(&what, request)
            .await
            .and_then(|v| check_ret(&what, v));
        result.map_err(|e| redact(e, &self.token))
    }

    fn remember_context(&self, user: &str, token: &str) {
        let mut map = self.last_context.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(user.to_string(), token.to_string());
    }

    async fn typing_ticket(&self, chat: &str) -> Result<Option<String>, PlatformError> {
        let cached = {
            let map = self
                .typing_tickets
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            map.get(chat).cloned()
        };
        if cached.is_some() {
            return Ok(cached);
        }
        let context = {
            let map = self.last_context.lock().unwrap_or_else(|e| e.into_inner());
            map.get(chat).cloned()
        };
        let mut body = json!({ "ilink_user_id": chat });
        if let Some(context) = context {
            body["context_token"] = json!(context);
        }
        let config = self.post("getconfig", body, CALL_TIMEOUT).await?;
        let ticket = config["typing_ticket"]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(str::to_string);
        if let Some(ticket) = &ticket {
            let mut map = self
                .typing_tickets
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            map.insert(chat.to_string(), ticket.clone());
        }
        Ok(ticket)
    }
}

impl Platform for WechatPlatform {
    fn poll<'a>(&'a self, cursor: Option<&'a str>) -> PlatformFuture<'a, Polled> {
        Box::pin(async move {
            let body = json!({ "get_updates_buf": cursor.unwrap_or("") });
            let answer = self
                .post(
                    "getupdates",
                    body,
                    self.poll_timeout + Duration::from_secs(10),
                )
                .await?;
            let updates: Vec<Inbound> = answer["msgs"]
                .as_array()
                .map(|msgs| msgs.iter().filter_map(parse_inbound).collect())
                .unwrap_or_default();
            for update in &updates {
                if let Some(token) = &update.context_token {
                    self.remember_context(&update.user, token);
                }
            }
            let cursor = answer["get_updates_buf"]
                .as_str()
                .filter(|c| !c.is_empty())
                .map(str::to_string);
            Ok(Polled { updates, cursor })
        })
    }

    fn send<'a>(&'a self, chat: &'a str, chunk: &'a OutChunk) -> PlatformFuture<'a, String> {
        Box::pin(async move {
            let Some(context_token) = chunk.context_token.as_deref() else {
                return Err(PlatformError::NeedsUserMessage(format!(
                    "WeChat can only answer user {chat} with the context token of one of \
                     their messages; the reply waits for their next message"
                )));
            };
            let client_id = client_id(&chunk.id);
            let state = if chunk.last {
                STATE_FINISH
            } else {
                STATE_GENERATING
            };
            let body = json!({
                "msg": {
                    "from_user_id": "",
                    "to_user_id": chat,
                    "client_id": client_id,
                    "message_type": MESSAGE_TYPE_BOT,
                    "message_state": state,
                    "item_list": [{ "type": 1, "text_item": { "text": chunk.text } }],
                    "context_token": context_token,
                }
            });
            let answer = self.post("sendmessage", body, CALL_TIMEOUT).await?;
            Ok(id_string(&answer["message_id"])
                .or_else(|| id_string(&answer["msg"]["message_id"]))
                .unwrap_or(client_id))
        })
    }

    fn typing<'a>(&'a self, chat: &'a str) -> PlatformFuture<'a, ()> {
        Box::pin(async move {
            let Some(ticket) = self.typing_ticket(chat).await? else {
                return Ok(());
            };
            let body = json!({ "ilink_user_id": chat, "typing_ticket": ticket, "status": 1 });
            let result = self.post("sendtyping", body, CALL_TIMEOUT).await;
            if result.is_err() {
                // The ticket may be stale: ask for a fresh one next time.
                let mut map = self
                    .typing_tickets
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                map.remove(chat);
            }
            result.map(|_| ())
        })
    }

    fn chunk(&self, text: &str) -> Vec<String> {
        split_text(text, self.chunk_chars, |_| 1)
    }

    fn poll_timeout(&self) -> Duration {
        self.poll_timeout
    }

    fn reset(&self) {
        // A client that cannot be rebuilt leaves the old one in place.
        if let Ok(fresh) = build_client(&self.base_url) {
            *self.http.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        }
    }

    fn chunk_gap(&self) -> Duration {
        Duration::from_millis(300)
    }

    fn max_chunks(&self) -> Option<usize> {
        Some(self.max_chunks)
    }
}

/// A QR code to bind a bot: `id` for [`qr_status`], `content` to render
/// (the text the WeChat app scans).
#[derive(Debug, Clone, PartialEq)]
pub struct Qr {
    pub id: String,
    pub content: String,
}

/// Where a QR binding stands.
#[derive(Clone, PartialEq)]
pub enum QrStatus {
    Waiting,
    Scanned,
    Expired,
    /// Bound: the bot token and the API host to use with it.
    Confirmed {
        bot_token: String,
        base_url: String,
    },
}

impl fmt::Debug for QrStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QrStatus::Waiting => f.write_str("Waiting"),
            QrStatus::Scanned => f.write_str("Scanned"),
            QrStatus::Expired => f.write_str("Expired"),
            QrStatus::Confirmed { base_url, .. } => f
                .debug_struct("Confirmed")
                .field("bot_token", &"[redacted]")
                .field("base_url", base_url)
                .finish(),
        }
    }
}

/// Asks iLink for a fresh binding QR code (`get_bot_qrcode?bot_type=3`).
pub async fn request_qr(base_url: &str) -> Result<Qr, PlatformError> {
    let base = trim_base(base_url);
    let what = "WeChat iLink get_bot_qrcode";
    let request = build_client(&base)?
        .get(format!("{base}/ilink/bot/get_bot_qrcode"))
        .query(&[("bot_type", "3")])
        .timeout(CALL_TIMEOUT);
    let answer = check_ret(what, read_json(what, request).await?)?;
    match (
        answer["qrcode"].as_str(),
        answer["qrcode_img_content"].as_str(),
    ) {
        (Some(id), Some(content)) if !id.is_empty() => Ok(Qr {
            id: id.to_string(),
            content: content.to_string(),
        }),
        _ => Err(PlatformError::Transient(format!(
            "{what} answered without `qrcode` and `qrcode_img_content`; ask for a new code"
        ))),
    }
}

/// One long poll of a QR binding's status, waiting at most `timeout` (a
/// poll that runs out of time answers [`QrStatus::Waiting`]).
pub async fn qr_status(
    base_url: &str,
    qr_id: &str,
    timeout: Duration,
) -> Result<QrStatus, PlatformError> {
    let base = trim_base(base_url);
    let what = "WeChat iLink get_qrcode_status";
    let request = build_client(&base)?
        .get(format!("{base}/ilink/bot/get_qrcode_status"))
        .query(&[("qrcode", qr_id)])
        .header("iLink-App-ClientVersion", "1")
        .timeout(timeout);
    let answer = match read_json(what, request).await {
        Err(PlatformError::Transient(why)) if why.contains(TIMED_OUT) => {
            return Ok(QrStatus::Waiting);
        }
        other => check_ret(what, other?)?,
    };
    Ok(match answer["status"].as_str().unwrap_or("") {
        "confirmed" => {
            let Some(token) = answer["bot_token"].as_str().filter(|t| !t.is_empty()) else {
                return Err(PlatformError::Rejected(format!(
                    "{what} said confirmed without a bot_token; scan a new code"
                )));
            };
            let host = answer["baseurl"]
                .as_str()
                .filter(|b| !b.is_empty())
                .map_or(base, trim_base);
            QrStatus::Confirmed {
                bot_token: token.to_string(),
                base_url: host,
            }
        }
        "scaned" | "scaned_but_redirect" => QrStatus::Scanned,
        "expired" => QrStatus::Expired,
        // "wait" and states this client does not know: keep polling.
        _ => QrStatus::Waiting,
    })
}

/// A fresh `X-WECHAT-UIN`: base64 of the decimal string of a random u32.
pub fn fresh_uin() -> String {
    uin_from(&mut rand::thread_rng())
}

/// [`fresh_uin`] drawing from `rng` (seed it for reproducible tests).
pub fn uin_from(rng: &mut impl Rng) -> String {
    base64(rng.r#gen::<u32>().to_string().as_bytes())
}

/// The `client_id` of a chunk: a hash of its outbox id, so a retry (even
/// after a restart) reuses it and no two chunks share one.
pub fn client_id(chunk_id: &str) -> String {
    let digest = Sha256::digest(chunk_id.as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("flyto-{hex}")
}

/// Marks an error as a deadline passing, so QR polls can tell it apart.
const TIMED_OUT: &str = "timed out";

fn trim_base(url: &str) -> String {
    url.trim().trim_end_matches('/').to_string()
}

/// The workspace's client settings; loopback hosts (test fakes, a local
/// relay) bypass any proxy from the environment.
pub(crate) fn build_client(base_url: &str) -> Result<reqwest::Client, PlatformError> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .tcp_keepalive(Duration::from_secs(60))
        .user_agent(concat!("flytod/", env!("CARGO_PKG_VERSION")));
    if is_loopback(base_url) {
        builder = builder.no_proxy();
    }
    builder.build().map_err(|e| {
        PlatformError::Transient(format!(
            "cannot set up the HTTP client ({}); check the TLS setup of this host",
            e.without_url()
        ))
    })
}

fn is_loopback(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split(['/', '?']).next().unwrap_or("");
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    host.starts_with("127.") || host.starts_with("localhost") || host.starts_with("[::1]")
}

/// Sends `request` and reads a JSON answer, classifying HTTP and transport
/// failures. An empty 200 body counts as `{}` (iLink answers sends so).
pub(crate) async fn read_json(
    what: &str,
    request: reqwest::RequestBuilder,
) -> Result<Value, PlatformError> {
    let response = request.send().await.map_err(|e| transport_error(what, e))?;
    let status = response.status();
    let retry_after = super::platform::retry_after_header(&response);
    let bytes = response
        .bytes()
        .await
        .map_err(|e| transport_error(what, e))?;
    let code = status.as_u16();
    if code == 401 || code == 403 {
        return Err(PlatformError::Auth(format!(
            "{what} answered HTTP {code}; check the binding's token or secret"
        )));
    }
    if code == 429 {
        return Err(PlatformError::RateLimited {
            retry_after: Duration::from_secs(retry_after.unwrap_or(60)),
        });
    }
    if status.is_server_error() {
        return Err(PlatformError::Transient(format!(
            "{what} answered HTTP {code}; retrying later"
        )));
    }
    if !status.is_success() {
        return Err(PlatformError::Rejected(format!(
            "{what} answered HTTP {code}: {}",
            snippet(&bytes)
        )));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    serde_json::from_slice(&bytes).map_err(|_| {
        PlatformError::Transient(format!(
            "{what} answered something that is not JSON ({}); retrying later",
            snippet(&bytes)
        ))
    })
}

fn snippet(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).chars().take(200).collect()
}

fn transport_error(what: &str, e: reqwest::Error) -> PlatformError {
    let e = e.without_url();
    if e.is_timeout() {
        PlatformError::Transient(format!("{what} {TIMED_OUT}; retrying"))
    } else {
        PlatformError::Transient(format!(
            "{what} failed ({e}); check the network and the base URL"
        ))
    }
}

/// iLink answers HTTP 200 on failure: a non-zero `ret` or `errcode` is one.
fn check_ret(what: &str, answer: Value) -> Result<Value, PlatformError> {
    let code = |k: &str| answer[k].as_i64().unwrap_or(0);
    let (ret, errcode) = (code("ret"), code("errcode"));
    if ret == 0 && errcode == 0 {
        return Ok(answer);
    }
    let errmsg = answer["errmsg"].as_str().unwrap_or("");
    if ret == SESSION_EXPIRED || errcode == SESSION_EXPIRED {
        return Err(PlatformError::SessionExpired(format!(
            "{what} answered errcode -14 ({errmsg}); bind the bot again by QR"
        )));
    }
    Err(PlatformError::Rejected(format!(
        "{what} answered ret {ret}, errcode {errcode} ({errmsg}); the message was not delivered"
    )))
}

/// Scrubs `secret` out of an error message, whatever put it there.
pub(crate) fn redact(e: PlatformError, secret: &str) -> PlatformError {
    if secret.is_empty() {
        return e;
    }
    let r = |s: String| s.replace(secret, "[redacted]");
    match e {
        PlatformError::Auth(s) => PlatformError::Auth(r(s)),
        PlatformError::ChatClosed(s) => PlatformError::ChatClosed(r(s)),
        PlatformError::Conflict(s) => PlatformError::Conflict(r(s)),
        PlatformError::Transient(s) => PlatformError::Transient(r(s)),
        PlatformError::Markup(s) => PlatformError::Markup(r(s)),
        PlatformError::SessionExpired(s) => PlatformError::SessionExpired(r(s)),
        PlatformError::NeedsUserMessage(s) => PlatformError::NeedsUserMessage(r(s)),
        PlatformError::Rejected(s) => PlatformError::Rejected(r(s)),
        other @ PlatformError::RateLimited { .. } => other,
    }
}

/// A JSON id (number or string) as text.
fn id_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// One `msgs[]` entry as an update; the bot's own messages are skipped.
fn parse_inbound(msg: &Value) -> Option<Inbound> {
    if msg["message_type"].as_i64() == Some(MESSAGE_TYPE_BOT) {
        return None;
    }
    let from = msg["from_user_id"].as_str().filter(|f| !f.is_empty())?;
    let message_id = id_string(&msg["message_id"])
        .or_else(|| id_string(&msg["seq"]))
        .unwrap_or_else(|| format!("{from}@{}", msg["create_time_ms"]));
    let parts: Vec<String> = msg["item_list"]
        .as_array()
        .map(|items| items.iter().filter_map(item_text).collect())
        .unwrap_or_default();
    Some(Inbound {
        update_id: message_id.clone(),
        chat: from.to_string(),
        user: from.to_string(),
        user_name: from.to_string(),
        message_id,
        text: parts.join("\n"),
        context_token: msg["context_token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(str::to_string),
        migrate_to: None,
    })
}

/// The text of one item: text as is, a voice note's transcript, and a
/// placeholder for media this platform does not download.
fn item_text(item: &Value) -> Option<String> {
    let s = |v: &Value| v.as_str().filter(|t| !t.is_empty()).map(str::to_string);
    match item["type"].as_i64() {
        Some(1) => s(&item["text_item"]["text"]),
        Some(2) => Some("[image]".to_string()),
        Some(3) => s(&item["voice_item"]["text"]).or_else(|| Some("[voice message]".to_string())),
        Some(4) => Some(format!(
            "[file {}]",
            item["file_item"]["file_name"].as_str().unwrap_or("")
        )),
        Some(5) => Some("[video]".to_string()),
        _ => None,
    }
}

/// Standard base64 with padding (only the UIN header needs it).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b = [
            group[0],
            *group.get(1).unwrap_or(&0),
            *group.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Cuts `text` into pieces of at most `limit` units, a char weighing
/// `weight(c)` units: at the last paragraph break of the window, else a
/// line break, else a sentence end, else a space, else a hard cut at a
/// char boundary. A break only counts in the window's second half, so no
/// piece is needlessly short. The pieces concatenate to `text`.
pub(crate) fn split_text(text: &str, limit: usize, weight: fn(char) -> usize) -> Vec<String> {
    let limit = limit.max(4);
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        // The longest prefix within the limit (at least one char).
        let mut used = 0;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            used += weight(c);
            if used > limit {
                end = i.max(c.len_utf8().min(rest.len()));
                break;
            }
        }
        if end == rest.len() {
            pieces.push(rest.to_string());
            break;
        }
        let cut = best_break(&rest[..end]).unwrap_or(end);
        pieces.push(rest[..cut].to_string());
        rest = &rest[cut..];
    }
    pieces
}

/// Where to end a piece within `window` (a byte index after the break).
fn best_break(window: &str) -> Option<usize> {
    let half = window.len() / 2;
    let after =
        |found: Option<(usize, usize)>| found.map(|(at, len)| at + len).filter(|&cut| cut > half);
    let last = |pat: &str| window.rfind(pat).map(|at| (at, pat.len()));
    let sentence = [". ", "! ", "? ", "。", "！", "？", ".\n"]
        .iter()
        .filter_map(|p| last(p))
        .max_by_key(|(at, len)| at + len);
    after(last("\n\n"))
        .or_else(|| after(last("\n")))
        .or_else(|| after(sentence))
        .or_else(|| after(last(" ")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use rand::SeedableRng;

    fn chars(c: char) -> usize {
        let _ = c;
        1
    }

    #[test]
    fn split_prefers_paragraphs_then_lines_then_sentences_then_spaces() {
        let text = format!("{}\n\n{}", "a".repeat(7), "b".repeat(5));
        assert_eq!(split_text(&text, 10, chars), vec!["aaaaaaa\n\n", "bbbbb"]);
        let text = format!("{}\n{}", "a".repeat(7), "b".repeat(5));
        assert_eq!(split_text(&text, 10, chars), vec!["aaaaaaa\n", "bbbbb"]);
        let text = "One two. Three four";
        assert_eq!(split_text(text, 12, chars), vec!["One two. ", "Three four"]);
        let text = "alpha beta gamma";
        assert_eq!(split_text(text, 12, chars), vec!["alpha beta ", "gamma"]);
        assert_eq!(
            split_text("abcdefghij", 4, chars),
            vec!["abcd", "efgh", "ij"]
        );
        assert!(split_text("", 10, chars).is_empty());
    }

    #[test]
    fn split_by_bytes_keeps_char_boundaries_and_concatenates() {
        let text = "é".repeat(50) + " 微信 " + &"x".repeat(30);
        for limit in [4, 5, 7, 16, 33] {
            let pieces = split_text(&text, limit, char::len_utf8);
            assert_eq!(pieces.concat(), text);
            assert!(pieces.iter().all(|p| p.len() <= limit && !p.is_empty()));
        }
    }

    #[test]
    fn uin_is_base64_of_a_decimal_u32() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let a = uin_from(&mut rng);
        let b = uin_from(&mut rng);
        assert_ne!(a, b);
        assert_eq!(base64(b"4294967295"), "NDI5NDk2NzI5NQ==");
        assert_eq!(base64(b"12"), "MTI=");
    }

    #[test]
    fn client_ids_are_stable_and_distinct() {
        assert_eq!(client_id("s/1/0"), client_id("s/1/0"));
        assert_ne!(client_id("s/1/0"), client_id("s/1/1"));
    }

    #[test]
    fn debug_hides_the_token() {
        let p = WechatPlatform::new(
            "tok-secret".into(),
            Some("http://127.0.0.1:1/".into()),
            Duration::from_secs(1),
            1000,
            8,
        )
        .unwrap();
        assert!(!format!("{p:?}").contains("tok-secret"));
        let s = QrStatus::Confirmed {
            bot_token: "tok-secret".into(),
            base_url: "x".into(),
        };
        assert!(!format!("{s:?}").contains("tok-secret"));
    }
}
