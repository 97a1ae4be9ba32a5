//! A scripted fake of Tencent's iLink bot API (WeChat ClawBot) on
//! 127.0.0.1, for the WeChat platform's tests: a `getupdates` long poll
//! held on a condvar with cursor semantics, `sendmessage` recorded,
//! `getconfig`/`sendtyping`, the QR binding flow, and scripted failures.
//! Every request's headers are kept. It speaks only HTTP/1.1 with
//! `Connection: close`, on the [`crate::fake_http`] plumbing.
//!
//! ```no_run
//! use flyto_tests::fake_ilink::FakeIlink;
//! let fake = FakeIlink::start("bot-token");
//! let id = fake.push_message("user@im.wechat", "hello");
//! ```

use crate::fake_http::{self, Request, read_request};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a `getupdates` (or a `scaned` QR status) is held without news.
pub const DEFAULT_HOLD: Duration = Duration::from_secs(1);

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub method: String,
    /// The path without the query.
    pub path: String,
    pub query: String,
    /// Lower-cased names, trimmed values.
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl SeenRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One `sendmessage` the fake accepted or refused.
#[derive(Debug, Clone, PartialEq)]
pub struct SentMessage {
    pub to_user: String,
    pub client_id: String,
    pub message_type: i64,
    pub message_state: i64,
    pub text: String,
    pub context_token: String,
    /// Whether the fake answered success.
    pub delivered: bool,
}

#[derive(Default)]
struct Qr {
    polls: usize,
    confirmed: bool,
    expired: bool,
}

#[derive(Default)]
struct State {
    /// Every inbound message, in order; a cursor `c<n>` acknowledges the
    /// first n.
    inbox: Vec<Value>,
    next_id: u64,
    sends: Vec<SentMessage>,
    requests: Vec<SeenRequest>,
    send_failures: VecDeque<(i64, i64)>,
    http_failures: VecDeque<u16>,
    session_expired: bool,
    qrs: HashMap<String, Qr>,
    typing: Vec<(String, String)>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
    token: String,
    hold: Duration,
    /// Filled in after bind: the `baseurl` a confirmed QR answers.
    base_url: Mutex<String>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running fake; it stops when dropped.
pub struct FakeIlink {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeIlink {
    /// Requests must carry `Authorization: Bearer <bot_token>` (else HTTP
    /// 401); a confirmed QR hands out this token.
    pub fn start(bot_token: &str) -> FakeIlink {
        FakeIlink::with_hold(bot_token, DEFAULT_HOLD)
    }

    /// [`FakeIlink::start`] holding empty long polls for `hold`.
    pub fn with_hold(bot_token: &str, hold: Duration) -> FakeIlink {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake iLink server");
        let addr = listener.local_addr().expect("fake iLink address");
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            token: bot_token.to_string(),
            hold,
            base_url: Mutex::new(format!("http://{addr}")),
        });
        fake_http::spawn_accept(
            listener,
            "fake-ilink",
            "fake iLink",
            shared.clone(),
            |s| &s.stop,
            serve,
        );
        FakeIlink { addr, shared }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues an inbound text message from `from_user` with a fresh
    /// context token; answers its message id. A held poll wakes at once.
    pub fn push_message(&self, from_user: &str, text: &str) -> String {
        let id = {
            let mut state = self.shared.lock();
            state.next_id += 1;
            let seq = state.next_id;
            let id = 7_000_000 + seq;
            let context = format!("ctx-{id}-{:08x}", rand::random::<u32>());
            state.inbox.push(json!({
                "seq": seq,
                "message_id": id,
                "from_user_id": from_user,
                "to_user_id": "bot@im.bot",
                "create_time_ms": 1_700_000_000_000u64 + seq,
                "message_type": 1,
                "message_state": 2,
                "item_list": [{ "type": 1, "text_item": { "text": text } }],
                "context_token": context,
            }));
            id
        };
        self.shared.changed.notify_all();
        id.to_string()
    }

    /// The context token the fake gave message `id`.
    pub fn context_token_of(&self, id: &str) -> Option<String> {
        self.shared
            .lock()
            .inbox
            .iter()
            .find(|m| m["message_id"].as_u64().map(|n| n.to_string()).as_deref() == Some(id))
            .and_then(|m| m["context_token"].as_str().map(str::to_string))
    }

    /// Every `sendmessage`, in arrival order.
    pub fn sends(&self) -> Vec<SentMessage> {
        self.shared.lock().sends.clone()
    }

    /// Every request, in arrival order.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.shared.lock().requests.clone()
    }

    /// `(user, typing_ticket)` of every `sendtyping`.
    pub fn typing(&self) -> Vec<(String, String)> {
        self.shared.lock().typing.clone()
    }

    /// The next `sendmessage` answers HTTP 200 with this `ret`/`errcode`.
    pub fn fail_next_send(&self, ret: i64, errcode: i64) {
        self.shared.lock().send_failures.push_back((ret, errcode));
    }

    /// The next request of any kind answers this HTTP status.
    pub fn fail_next_http(&self, status: u16) {
        self.shared.lock().http_failures.push_back(status);
    }

    /// From now on every bot call answers errcode -14 (session expired).
    pub fn expire_session(&self) {
        self.shared.lock().session_expired = true;
        self.shared.changed.notify_all();
    }

    /// The user confirms every QR code issued so far.
    pub fn confirm_qr(&self) {
        self.update_qrs(|q| q.confirmed = true);
    }

    /// Every QR code issued so far expires.
    pub fn expire_qr(&self) {
        self.update_qrs(|q| q.expired = true);
    }

    fn update_qrs(&self, change: fn(&mut Qr)) {
        self.shared.lock().qrs.values_mut().for_each(change);
        self.shared.changed.notify_all();
    }
}

impl Drop for FakeIlink {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Writes a whole JSON (or any) response and closes the connection.
pub(crate) fn write_response(conn: &mut TcpStream, code: u16, body: &str) {
    let reason = match code {
        200 => "OK",
        401 => "Unauthorized",
        404 => "Not Found",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let response = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = fake_http::send(conn, response.as_bytes());
    let _ = conn.shutdown(Shutdown::Both);
}

/// Splits a request target into path and query.
pub(crate) fn split_target(target: &str) -> (String, String) {
    match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target.to_string(), String::new()),
    }
}

/// The value of `key` in a query string (percent-decoding `%XX` only).
pub(crate) fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        if bytes[i] == b'%'
            && let Some(b) = hex
        {
            out.push(b);
            i += 3;
        } else {
            out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn serve(mut conn: TcpStream, shared: &Shared) {
    let _ = conn.set_nodelay(true);
    let Some(Request {
        method,
        path,
        headers,
        body,
    }) = read_request(&mut conn)
    else {
        return;
    };
    let (path, query) = split_target(&path);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let seen = SeenRequest {
        method,
        path: path.clone(),
        query: query.clone(),
        headers,
        body: body.clone(),
    };
    let authorized = seen.header("authorization") == Some(&format!("Bearer {}", shared.token));
    let http_failure = {
        let mut state = shared.lock();
        state.requests.push(seen);
        state.http_failures.pop_front()
    };
    shared.changed.notify_all();
    if let Some(code) = http_failure {
        return write_response(&mut conn, code, "{\"error\":\"scripted\"}");
    }
    let answer = match path.as_str() {
        "/ilink/bot/get_bot_qrcode" => issue_qr(shared),
        "/ilink/bot/get_qrcode_status" => qr_status(shared, &query),
        _ if !authorized => {
            return write_response(&mut conn, 401, "{\"errmsg\":\"bad token\"}");
        }
        _ if shared.lock().session_expired => {
            json!({"ret": -14, "errcode": -14, "errmsg": "session timeout"})
        }
        "/ilink/bot/getupdates" => get_updates(shared, &body),
        "/ilink/bot/sendmessage" => send_message(shared, &body),
        "/ilink/bot/getconfig" => {
            json!({"ret": 0, "typing_ticket": format!("ticket-{}", body["ilink_user_id"].as_str().unwrap_or(""))})
        }
        "/ilink/bot/sendtyping" => {
            let user = body["ilink_user_id"].as_str().unwrap_or("").to_string();
            let ticket = body["typing_ticket"].as_str().unwrap_or("").to_string();
            shared.lock().typing.push((user, ticket));
            shared.changed.notify_all();
            json!({"ret": 0})
        }
        _ => return write_response(&mut conn, 404, "{\"errmsg\":\"no such endpoint\"}"),
    };
    write_response(&mut conn, 200, &answer.to_string());
}

fn cursor_position(buf: &str) -> usize {
    buf.strip_prefix('c')
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn get_updates(shared: &Shared, body: &Value) -> Value {
    let from = cursor_position(body["get_updates_buf"].as_str().unwrap_or(""));
    let deadline = Instant::now() + shared.hold;
    let mut state = shared.lock();
    while state.inbox.len() <= from && !state.session_expired && !shared.stop.load(Ordering::SeqCst)
    {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        state = shared
            .changed
            .wait_timeout(state, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    if state.session_expired {
        return json!({"ret": -14, "errcode": -14, "errmsg": "session timeout"});
    }
    let msgs: Vec<Value> = state.inbox.iter().skip(from).cloned().collect();
    json!({
        "ret": 0,
        "msgs": msgs,
        "get_updates_buf": format!("c{}", state.inbox.len().max(from)),
        "longpolling_timeout_ms": shared.hold.as_millis() as u64,
    })
}

fn send_message(shared: &Shared, body: &Value) -> Value {
    let msg = &body["msg"];
    let text = msg["item_list"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["text_item"]["text"].as_str())
                .collect::<String>()
        })
        .unwrap_or_default();
    let failure = {
        let mut state = shared.lock();
        let failure = state.send_failures.pop_front();
        state.sends.push(SentMessage {
            to_user: msg["to_user_id"].as_str().unwrap_or("").to_string(),
            client_id: msg["client_id"].as_str().unwrap_or("").to_string(),
            message_type: msg["message_type"].as_i64().unwrap_or(0),
            message_state: msg["message_state"].as_i64().unwrap_or(0),
            text,
            context_token: msg["context_token"].as_str().unwrap_or("").to_string(),
            delivered: failure.is_none(),
        });
        failure
    };
    shared.changed.notify_all();
    match failure {
        Some((ret, errcode)) => {
            json!({"ret": ret, "errcode": errcode, "errmsg": "scripted failure"})
        }
        None => json!({}),
    }
}

fn issue_qr(shared: &Shared) -> Value {
    let mut state = shared.lock();
    let id = format!("qr-{}", state.qrs.len() + 1);
    state.qrs.insert(id.clone(), Qr::default());
    json!({
        "ret": 0,
        "qrcode": id,
        "qrcode_img_content": format!("https://liteapp.weixin.qq.com/q/{id}?qrcode={id}&bot_type=3"),
    })
}

/// `wait` on the first poll, then `scaned` (held until the test confirms
/// or expires the code), then `confirmed` or `expired`.
fn qr_status(shared: &Shared, query: &str) -> Value {
    let id = query_param(query, "qrcode").unwrap_or_default();
    let deadline = Instant::now() + shared.hold;
    let mut state = shared.lock();
    let Some(qr) = state.qrs.get_mut(&id) else {
        return json!({"ret": -1, "errmsg": format!("unknown qrcode {id}")});
    };
    qr.polls += 1;
    if qr.polls == 1 && !qr.confirmed && !qr.expired {
        return json!({"ret": 0, "status": "wait"});
    }
    loop {
        let Some(qr) = state.qrs.get(&id) else {
            return json!({"ret": -1});
        };
        if qr.expired {
            return json!({"ret": 0, "status": "expired"});
        }
        if qr.confirmed {
            let base = shared
                .base_url
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            return json!({
                "ret": 0,
                "status": "confirmed",
                "bot_token": shared.token,
                "ilink_bot_id": "bot@im.bot",
                "baseurl": base,
                "ilink_user_id": "owner@im.wechat",
            });
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || shared.stop.load(Ordering::SeqCst) {
            return json!({"ret": 0, "status": "scaned"});
        }
        state = shared
            .changed
            .wait_timeout(state, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}
