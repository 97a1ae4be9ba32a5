//! A scripted fake Telegram Bot API on 127.0.0.1, for driving a Telegram
//! platform without the network. It owns only its own state: queued
//! updates, what was sent, per-method call counts and scripted failures.
//!
//! Requests are `POST {api_base}/bot{token}/{method}` with a JSON body.
//! `getUpdates` behaves like Telegram's: an `offset` forgets every update
//! below it, and with nothing queued the call is held (a long poll) until
//! an update is pushed or its `timeout` passes.
//!
//! ```no_run
//! use flyto_tests::fake_telegram::FakeTelegram;
//! let tg = FakeTelegram::start("123:abc");
//! let id = tg.push_message(42, 7, "ann", "hello");
//! tg.fail_next("sendMessage", 429, "Too Many Requests: retry after 3", Some(3));
//! ```
//!
//! Every answer is sent with `Connection: close`.

use crate::fake_http;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The longest any request is held, so no thread outlives a test for long.
const MAX_HOLD: Duration = Duration::from_secs(120);

/// One `sendMessage` the fake accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct SentMessage {
    /// As sent: a number's digits, or the string.
    pub chat_id: String,
    pub text: String,
    pub parse_mode: Option<String>,
}

/// A scripted failure of one call.
#[derive(Debug, Clone)]
pub struct Failure {
    pub status: u16,
    /// The raw body; `None` builds Telegram's `{"ok":false,..}` from the
    /// fields below.
    pub raw_body: Option<String>,
    pub description: String,
    pub retry_after: Option<u64>,
    pub migrate_to_chat_id: Option<i64>,
}

impl Failure {
    /// Telegram's error body with `description` and no parameters.
    pub fn new(status: u16, description: &str) -> Failure {
        Failure {
            status,
            raw_body: None,
            description: description.to_string(),
            retry_after: None,
            migrate_to_chat_id: None,
        }
    }
}

#[derive(Default)]
struct State {
    next_update_id: i64,
    next_message_id: i64,
    updates: VecDeque<Value>,
    sent: Vec<SentMessage>,
    actions: Vec<(String, String)>,
    failures: HashMap<String, VecDeque<Failure>>,
    hang_get_updates: usize,
    hung: usize,
    /// `getUpdates` answers at once, whatever its `timeout` (a server or
    /// proxy that ignores long polling: the poller's worst case).
    at_once: bool,
    webhook: bool,
    /// `drop_pending_updates` of each `deleteWebhook` call.
    webhook_deletes: Vec<bool>,
    calls: HashMap<String, usize>,
    /// The `offset` of every `getUpdates`, in order (`None`: none sent).
    offsets: Vec<Option<i64>>,
    /// Bumped on every change, so a waiter misses none.
    generation: u64,
}

#[derive(Default)]
struct Shared {
    token: String,
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn changed(&self, state: &mut State) {
        state.generation += 1;
        self.changed.notify_all();
    }
}

pub struct FakeTelegram {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeTelegram {
    /// Serves the bot `token`; any other token gets 401.
    pub fn start(token: &str) -> FakeTelegram {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake Telegram server");
        let addr = listener.local_addr().expect("fake Telegram address");
        let shared = Arc::new(Shared {
            token: token.to_string(),
            ..Shared::default()
        });
        {
            let mut state = shared.lock();
            state.next_update_id = 1000;
            state.next_message_id = 1;
        }
        fake_http::spawn_accept(
            listener,
            "fake-tg",
            "fake Telegram",
            shared.clone(),
            |s| &s.stop,
            serve,
        );
        FakeTelegram { addr, shared }
    }

    /// What goes in the platform's `api_base`.
    pub fn api_base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues a text message; answers its update id (increasing).
    pub fn push_message(&self, chat: i64, user: i64, username: &str, text: &str) -> i64 {
        self.push_update(|update_id, message_id| {
            json!({"update_id": update_id, "message": {
                "message_id": message_id,
                "date": 0,
                "chat": {"id": chat, "type": if chat < 0 { "group" } else { "private" }},
                "from": {"id": user, "is_bot": false, "first_name": username, "username": username},
                "text": text,
            }})
        })
    }

    /// Queues any update; `make(update_id, message_id)` builds it.
    pub fn push_update(&self, make: impl FnOnce(i64, i64) -> Value) -> i64 {
        let mut state = self.shared.lock();
        let id = state.next_update_id;
        let message_id = state.next_message_id;
        state.next_update_id += 1;
        state.next_message_id += 1;
        state.updates.push_back(make(id, message_id));
        self.shared.changed(&mut state);
        id
    }

    /// Every `sendMessage` accepted, in order.
    pub fn sent(&self) -> Vec<SentMessage> {
        self.shared.lock().sent.clone()
    }

    /// Every `sendChatAction` accepted: (chat_id, action).
    pub fn actions(&self) -> Vec<(String, String)> {
        self.shared.lock().actions.clone()
    }

    /// The next call of `method` fails with `status` and Telegram's error
    /// body; call it again to fail more calls.
    pub fn fail_next(
        &self,
        method: &str,
        status: u16,
        description: &str,
        retry_after: Option<u64>,
    ) {
        self.fail_next_with(
            method,
            Failure {
                retry_after,
                ..Failure::new(status, description)
            },
        );
    }

    pub fn fail_next_with(&self, method: &str, failure: Failure) {
        self.shared
            .lock()
            .failures
            .entry(method.to_string())
            .or_default()
            .push_back(failure);
    }

    /// The next `getUpdates` is read and never answered (until the fake
    /// is dropped).
    pub fn hang_next_get_updates(&self) {
        self.shared.lock().hang_get_updates += 1;
    }

    /// How many requests are being held unanswered by a hang.
    pub fn hung(&self) -> usize {
        self.shared.lock().hung
    }

    /// While set, `getUpdates` answers at once, ignoring its `timeout`.
    pub fn answer_at_once(&self, on: bool) {
        let mut state = self.shared.lock();
        state.at_once = on;
        self.shared.changed(&mut state);
    }

    /// While set, `getUpdates` answers 409 as Telegram does with a webhook;
    /// `deleteWebhook` clears it.
    pub fn webhook_set(&self, on: bool) {
        self.shared.lock().webhook = on;
    }

    pub fn webhook_active(&self) -> bool {
        self.shared.lock().webhook
    }

    /// `drop_pending_updates` of each `deleteWebhook` call, in order.
    pub fn webhook_deletes(&self) -> Vec<bool> {
        self.shared.lock().webhook_deletes.clone()
    }

    /// How many calls of `method` arrived (with any token, failed or not).
    pub fn calls(&self, method: &str) -> usize {
        self.shared.lock().calls.get(method).copied().unwrap_or(0)
    }

    /// The `offset` each `getUpdates` carried, in order.
    pub fn offsets(&self) -> Vec<Option<i64>> {
        self.shared.lock().offsets.clone()
    }

    /// Updates still queued (not yet forgotten by an offset).
    pub fn pending(&self) -> usize {
        self.shared.lock().updates.len()
    }

    /// Waits until `f` holds, or panics naming `what` after `limit`.
    pub fn wait(&self, what: &str, limit: Duration, f: impl Fn(&FakeTelegram) -> bool) {
        let deadline = Instant::now() + limit;
        loop {
            let seen = self.shared.lock().generation;
            if f(self) {
                return;
            }
            let now = Instant::now();
            assert!(
                now < deadline,
                "timed out after {limit:?} waiting for {what}"
            );
            let state = self.shared.lock();
            if state.generation == seen {
                drop(wait_until(&self.shared, state, deadline));
            }
        }
    }
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed(&mut self.shared.lock());
        let _ = TcpStream::connect(self.addr);
    }
}

fn answer(conn: &mut TcpStream, status: u16, body: &str) {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        409 => "Conflict",
        429 => "Too Many Requests",
        _ => "Error",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = fake_http::send(conn, head.as_bytes());
    let _ = fake_http::send(conn, body.as_bytes());
}

fn error_body(code: u16, description: &str, parameters: Option<Value>) -> String {
    let mut body = json!({"ok": false, "error_code": code, "description": description});
    if let Some(p) = parameters {
        body["parameters"] = p;
    }
    body.to_string()
}

fn ok(result: Value) -> String {
    json!({"ok": true, "result": result}).to_string()
}

fn serve(mut conn: TcpStream, shared: &Shared) {
    let _ = conn.set_nodelay(true);
    let Some(request) = fake_http::read_request(&mut conn) else {
        return;
    };
    let path = request.path.split('?').next().unwrap_or("");
    let (bot, method) = path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or(("", ""));
    let method = method.to_string();
    let params: Value = serde_json::from_slice(&request.body).unwrap_or(json!({}));
    let mut state = shared.lock();
    *state.calls.entry(method.clone()).or_default() += 1;
    shared.changed(&mut state);
    if bot.strip_prefix("bot") != Some(shared.token.as_str()) {
        drop(state);
        return answer(&mut conn, 401, &error_body(401, "Unauthorized", None));
    }
    if let Some(f) = state
        .failures
        .get_mut(&method)
        .and_then(VecDeque::pop_front)
    {
        drop(state);
        let body = f.raw_body.unwrap_or_else(|| {
            let mut p = serde_json::Map::new();
            if let Some(s) = f.retry_after {
                p.insert("retry_after".into(), json!(s));
            }
            if let Some(id) = f.migrate_to_chat_id {
                p.insert("migrate_to_chat_id".into(), json!(id));
            }
            error_body(f.status, &f.description, (!p.is_empty()).then(|| p.into()))
        });
        return answer(&mut conn, f.status, &body);
    }
    let (status, body) = match method.as_str() {
        "getUpdates" => {
            if state.hang_get_updates > 0 {
                state.hang_get_updates -= 1;
                state.hung += 1;
                shared.changed(&mut state);
                let deadline = Instant::now() + MAX_HOLD;
                while !shared.stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                    state = wait_until(shared, state, deadline);
                }
                state.hung -= 1;
                return;
            }
            if state.webhook {
                drop(state);
                let d = "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first";
                return answer(&mut conn, 409, &error_body(409, d, None));
            }
            state.offsets.push(params["offset"].as_i64());
            if let Some(offset) = params["offset"].as_i64() {
                state
                    .updates
                    .retain(|u| u["update_id"].as_i64() >= Some(offset));
            }
            let hold = if state.at_once {
                Duration::ZERO
            } else {
                Duration::from_secs(params["timeout"].as_u64().unwrap_or(0)).min(MAX_HOLD)
            };
            let deadline = Instant::now() + hold;
            while state.updates.is_empty()
                && !shared.stop.load(Ordering::SeqCst)
                && Instant::now() < deadline
            {
                state = wait_until(shared, state, deadline);
            }
            let limit = params["limit"].as_u64().unwrap_or(100) as usize;
            let updates: Vec<Value> = state.updates.iter().take(limit).cloned().collect();
            (200, ok(json!(updates)))
        }
        "sendMessage" => {
            let text = params["text"].as_str().unwrap_or("").to_string();
            let units = text.encode_utf16().count();
            if text.trim().is_empty() {
                (
                    400,
                    error_body(400, "Bad Request: message text is empty", None),
                )
            } else if units > 4096 {
                (
                    400,
                    error_body(400, "Bad Request: message is too long", None),
                )
            } else {
                let chat_id = id_text(&params["chat_id"]);
                let message_id = state.next_message_id;
                state.next_message_id += 1;
                state.sent.push(SentMessage {
                    chat_id: chat_id.clone(),
                    text: text.clone(),
                    parse_mode: params["parse_mode"].as_str().map(str::to_string),
                });
                shared.changed(&mut state);
                (
                    200,
                    ok(
                        json!({"message_id": message_id, "date": 0, "chat": {"id": params["chat_id"]}, "text": text}),
                    ),
                )
            }
        }
        "sendChatAction" => {
            let action = params["action"].as_str().unwrap_or("").to_string();
            state.actions.push((id_text(&params["chat_id"]), action));
            shared.changed(&mut state);
            (200, ok(json!(true)))
        }
        "deleteWebhook" => {
            let drop_pending = params["drop_pending_updates"].as_bool().unwrap_or(false);
            state.webhook_deletes.push(drop_pending);
            state.webhook = false;
            if drop_pending {
                state.updates.clear();
            }
            shared.changed(&mut state);
            (200, ok(json!(true)))
        }
        _ => (404, error_body(404, "Not Found", None)),
    };
    drop(state);
    answer(&mut conn, status, &body);
}

/// One wait on the fake's condition variable, at most until `deadline`.
fn wait_until<'a>(
    shared: &'a Shared,
    state: MutexGuard<'a, State>,
    deadline: Instant,
) -> MutexGuard<'a, State> {
    let left = deadline.saturating_duration_since(Instant::now());
    shared
        .changed
        .wait_timeout(state, left)
        .unwrap_or_else(|e| e.into_inner())
        .0
}

fn id_text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}
