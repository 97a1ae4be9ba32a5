//! A scripted fake Anthropic Messages server on 127.0.0.1, for driving
//! flytod's sessions through the `api = "anthropic"` dialect without a
//! real provider.
//!
//! Each request to `POST {base_url}/v1/messages` takes the next [`Reply`]
//! of the script. Requests are kept (headers and parsed body) in arrival
//! order, and every one is checked; [`FakeAnthropic::assert_protocol_ok`]
//! fails the test listing what was wrong:
//! - the `x-api-key` header equals the key the server was started with, and
//!   `anthropic-version` is present;
//! - `stream` is true, `max_tokens` is positive, messages start with a user
//!   message and alternate roles, no text block is empty;
//! - every `tool_result` block of a user message answers a `tool_use` id of
//!   the assistant message right before it (once), and every `tool_use` is
//!   answered in the next user message;
//! - a `thinking` block sent back carries a signature, and for thinking this
//!   server produced, exactly the signature it was issued with.
//!
//! ```no_run
//! use flyto_tests::fake_anthropic::{FakeAnthropic, Reply};
//! let fake = FakeAnthropic::start("sk-ant-test", vec![
//!     Reply::tool_use("toolu_1", "write", r#"{"path":"a.txt","content":"héllo ✓"}"#),
//!     Reply::text("Done."),
//! ]);
//! let config = fake.config("claude", "FAKE_ANTHROPIC_KEY"); // [models.claude] + [roles]
//! ```
//!
//! Replies are served over HTTP/1.1 with `Connection: close`. A reply can
//! be written with every multi-byte UTF-8 character cut in two on the wire
//! (a flush and a short pause between the halves), so the client's SSE
//! reader has to join bytes split mid-character; tool-use replies do this
//! by default. [`SplitProxy`] does the same to any other server's answers
//! (e.g. the OpenAI-compatible fake of `fake_llm`).

use crate::fake_http::{self, read_request, send};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Read;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The pause between the two halves of a character cut on the wire: long
/// enough for the client to read the first half on its own.
const CUT_PAUSE: Duration = Duration::from_millis(5);

/// Prices of the profile written by [`FakeAnthropic::config`], in USD per
/// million tokens: input, output, cache read, cache write.
pub const PRICES: Prices = Prices {
    input: 3.0,
    output: 15.0,
    cache_read: 0.3,
    cache_write: 3.75,
};

#[derive(Debug, Clone, Copy)]
pub struct Prices {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

/// Token counts as the Messages API reports them: `input` excludes the
/// cached parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Usage {
    pub const fn new(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Usage {
        Usage {
            input,
            output,
            cache_read,
            cache_write,
        }
    }

    /// The whole prompt, cached parts included (what flyto reports).
    pub fn total_input(&self) -> u64 {
        self.input + self.cache_read + self.cache_write
    }

    /// What this usage costs at `prices`.
    pub fn cost(&self, prices: &Prices) -> f64 {
        (self.input as f64 * prices.input
            + self.output as f64 * prices.output
            + self.cache_read as f64 * prices.cache_read
            + self.cache_write as f64 * prices.cache_write)
            / 1e6
    }
}

/// Usage of replies that do not set one.
pub const DEFAULT_USAGE: Usage = Usage::new(1000, 50, 0, 0);

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Sse {
        /// Content blocks, in order.
        blocks: Vec<ContentBlock>,
        stop_reason: String,
        usage: Usage,
        /// Cut every multi-byte character in two on the wire.
        cut_utf8: bool,
    },
    Status {
        code: u16,
        body: String,
    },
}

#[derive(Debug, Clone)]
enum ContentBlock {
    Text(String),
    Thinking {
        text: String,
        signature: String,
    },
    ToolUse {
        id: String,
        name: String,
        args: String,
    },
}

/// Splits `s` into pieces of `size` chars (the last may be shorter).
fn split_chars(s: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    chars
        .chunks(size.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

/// Splits `s` into up to `n` pieces at char boundaries (never empty ones).
fn split_n(s: &str, n: usize) -> Vec<String> {
    let count = s.chars().count();
    split_chars(s, count.div_ceil(n.max(1)))
}

impl Reply {
    fn sse(blocks: Vec<ContentBlock>, stop_reason: &str, cut_utf8: bool) -> Reply {
        Reply {
            kind: Kind::Sse {
                blocks,
                stop_reason: stop_reason.into(),
                usage: DEFAULT_USAGE,
                cut_utf8,
            },
        }
    }

    /// `text` as several `text_delta`s; stop reason `end_turn`.
    pub fn text(text: &str) -> Reply {
        Reply::sse(vec![ContentBlock::Text(text.into())], "end_turn", false)
    }

    /// One `tool_use` block whose `input_json_delta` fragments split
    /// `args_json` every 3 characters (mid-key, mid-string, mid-number),
    /// written with every multi-byte character cut on the wire; stop
    /// reason `tool_use`.
    pub fn tool_use(id: &str, name: &str, args_json: impl ToString) -> Reply {
        Reply::sse(
            vec![ContentBlock::ToolUse {
                id: id.into(),
                name: name.into(),
                args: args_json.to_string(),
            }],
            "tool_use",
            true,
        )
    }

    /// A `thinking` block (several `thinking_delta`s, then one
    /// `signature_delta`), then a `tool_use` block as [`Reply::tool_use`].
    /// The server remembers the signature it issued for `thinking`, and
    /// checks it when the thinking comes back.
    pub fn thinking_then_tool_use(
        thinking: &str,
        signature: &str,
        id: &str,
        name: &str,
        args_json: impl ToString,
    ) -> Reply {
        Reply::sse(
            vec![
                ContentBlock::Thinking {
                    text: thinking.into(),
                    signature: signature.into(),
                },
                ContentBlock::ToolUse {
                    id: id.into(),
                    name: name.into(),
                    args: args_json.to_string(),
                },
            ],
            "tool_use",
            true,
        )
    }

    /// HTTP 529 with an `overloaded_error` body, as the API answers when it
    /// is overloaded.
    pub fn overloaded() -> Reply {
        Reply::error(529, "overloaded_error", "Overloaded")
    }

    /// An HTTP error with an Anthropic error body.
    pub fn error(code: u16, kind: &str, message: &str) -> Reply {
        Reply {
            kind: Kind::Status {
                code,
                body: json!({"type": "error", "error": {"type": kind, "message": message}})
                    .to_string(),
            },
        }
    }

    /// Sets the usage the reply reports (`message_start` carries the input
    /// and cache counts, `message_delta` the output count).
    pub fn usage(mut self, u: Usage) -> Reply {
        if let Kind::Sse { usage, .. } = &mut self.kind {
            *usage = u;
        }
        self
    }

    /// Whether multi-byte characters are cut in two on the wire.
    pub fn cut_utf8(mut self, on: bool) -> Reply {
        if let Kind::Sse { cut_utf8, .. } = &mut self.kind {
            *cut_utf8 = on;
        }
        self
    }

    /// The SSE events (name, data) of this reply.
    fn events(&self) -> Vec<(&'static str, Value)> {
        let Kind::Sse {
            blocks,
            stop_reason,
            usage,
            ..
        } = &self.kind
        else {
            return Vec::new();
        };
        let mut out = vec![(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": "msg_fake", "type": "message", "role": "assistant",
                "model": "fake-claude", "content": [],
                "stop_reason": null, "stop_sequence": null,
                "usage": {
                    "input_tokens": usage.input,
                    "cache_creation_input_tokens": usage.cache_write,
                    "cache_read_input_tokens": usage.cache_read,
                    "output_tokens": 1,
                },
            }}),
        )];
        out.push(("ping", json!({"type": "ping"})));
        for (index, block) in blocks.iter().enumerate() {
            let delta = |delta: Value| {
                (
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index, "delta": delta}),
                )
            };
            match block {
                ContentBlock::Text(text) => {
                    out.push((
                        "content_block_start",
                        json!({"type": "content_block_start", "index": index,
                            "content_block": {"type": "text", "text": ""}}),
                    ));
                    for piece in split_n(text, 4) {
                        out.push(delta(json!({"type": "text_delta", "text": piece})));
                    }
                }
                ContentBlock::Thinking { text, signature } => {
                    out.push((
                        "content_block_start",
                        json!({"type": "content_block_start", "index": index,
                            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
                    ));
                    for piece in split_n(text, 3) {
                        out.push(delta(json!({"type": "thinking_delta", "thinking": piece})));
                    }
                    out.push(delta(
                        json!({"type": "signature_delta", "signature": signature}),
                    ));
                }
                ContentBlock::ToolUse { id, name, args } => {
                    out.push((
                        "content_block_start",
                        json!({"type": "content_block_start", "index": index,
                            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                    ));
                    for piece in split_chars(args, 3) {
                        out.push(delta(
                            json!({"type": "input_json_delta", "partial_json": piece}),
                        ));
                    }
                }
            }
            out.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
        out.push((
            "message_delta",
            json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                "usage": {"output_tokens": usage.output}}),
        ));
        out.push(("message_stop", json!({"type": "message_stop"})));
        out
    }

    fn thinking(&self) -> Vec<(String, String)> {
        match &self.kind {
            Kind::Sse { blocks, .. } => blocks
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Thinking { text, signature } => {
                        Some((text.clone(), signature.clone()))
                    }
                    _ => None,
                })
                .collect(),
            Kind::Status { .. } => Vec::new(),
        }
    }
}

/// What the server knows about one request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    /// Header names in lower case, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Value,
    pub at: Instant,
    /// The whole reply was written.
    pub completed: bool,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    seen: Vec<Seen>,
    violations: Vec<String>,
    /// Thinking text → the signature issued with it.
    issued: HashMap<String, String>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
    key: String,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running fake server; it stops when dropped.
pub struct FakeAnthropic {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeAnthropic {
    /// Starts the server; every request must carry `x-api-key: <api_key>`.
    pub fn start(api_key: &str, script: Vec<Reply>) -> FakeAnthropic {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake Anthropic server");
        let addr = listener.local_addr().expect("fake Anthropic address");
        let shared = Arc::new(Shared {
            key: api_key.to_string(),
            ..Shared::default()
        });
        shared.lock().script = script.into();
        fake_http::spawn_accept(
            listener,
            "fake-anthropic",
            "fake Anthropic",
            shared.clone(),
            |s| &s.stop,
            serve,
        );
        FakeAnthropic { addr, shared }
    }

    /// `http://127.0.0.1:<port>`: requests go to `{base_url}/v1/messages`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A `[models.<name>]` table for this server (api = "anthropic", the
    /// key in the environment variable `key_env`, the [`PRICES`]).
    pub fn profile(&self, name: &str, key_env: &str) -> String {
        format!(
            "[models.{name}]\napi = \"anthropic\"\nbase_url = \"{}\"\nmodel = \"fake-claude\"\napi_key_env = \"{key_env}\"\ninput_price = {:?}\noutput_price = {:?}\ncache_read_price = {:?}\ncache_write_price = {:?}\n",
            self.base_url(),
            PRICES.input,
            PRICES.output,
            PRICES.cache_read,
            PRICES.cache_write,
        )
    }

    /// [`FakeAnthropic::profile`] plus `[roles] main = "<name>"`.
    pub fn config(&self, name: &str, key_env: &str) -> String {
        format!(
            "{}\n[roles]\nmain = \"{name}\"\n",
            self.profile(name, key_env)
        )
    }

    /// Adds replies to the end of the script.
    pub fn push(&self, replies: Vec<Reply>) {
        self.shared.lock().script.extend(replies);
        self.shared.changed.notify_all();
    }

    /// The parsed request bodies, in arrival order.
    pub fn requests(&self) -> Vec<Value> {
        self.seen().into_iter().map(|s| s.body).collect()
    }

    /// Everything known about the requests so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.lock().seen.clone()
    }

    pub fn request_count(&self) -> usize {
        self.shared.lock().seen.len()
    }

    /// Waits until at least `n` requests arrived; returns their bodies.
    pub fn wait_requests(&self, n: usize, limit: Duration) -> Vec<Value> {
        let what = format!("{n} request(s) to the fake Anthropic server");
        let deadline = Instant::now() + limit;
        let mut state = self.shared.lock();
        loop {
            if state.seen.len() >= n {
                return state.seen.iter().map(|s| s.body.clone()).collect();
            }
            let now = Instant::now();
            assert!(
                now < deadline,
                "timed out after {limit:?} waiting for {what}"
            );
            state = self
                .shared
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Protocol violations found so far (see the module docs), plus
    /// requests that came when the script was exhausted.
    pub fn violations(&self) -> Vec<String> {
        self.shared.lock().violations.clone()
    }

    /// Panics listing every violation found so far.
    pub fn assert_protocol_ok(&self) {
        let v = self.violations();
        assert!(
            v.is_empty(),
            "the fake Anthropic server saw {} protocol violation(s):\n- {}",
            v.len(),
            v.join("\n- ")
        );
    }
}

impl Drop for FakeAnthropic {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Checks one request's headers and body; the problems go to `out`.
fn check_request(
    n: usize,
    headers: &[(String, String)],
    body: &Value,
    key: &str,
    issued: &HashMap<String, String>,
    out: &mut Vec<String>,
) {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    match header("x-api-key") {
        Some(k) if k == key => {}
        // Never quote the key the client sent: it could be a real one.
        Some(_) => out.push(format!("request #{n}: x-api-key is not the configured key")),
        None => out.push(format!("request #{n}: no x-api-key header")),
    }
    if header("anthropic-version").is_none_or(str::is_empty) {
        out.push(format!("request #{n}: no anthropic-version header"));
    }
    if body["stream"] != json!(true) {
        out.push(format!("request #{n}: `stream` is not true"));
    }
    if body["max_tokens"].as_u64().unwrap_or(0) == 0 {
        out.push(format!(
            "request #{n}: `max_tokens` is not a positive number"
        ));
    }
    let Some(messages) = body["messages"].as_array() else {
        out.push(format!("request #{n}: no `messages` array"));
        return;
    };
    check_messages(n, messages, issued, out);
}

fn check_messages(
    n: usize,
    messages: &[Value],
    issued: &HashMap<String, String>,
    out: &mut Vec<String>,
) {
    // tool_use ids of the previous assistant message, and which of them the
    // current user message answered.
    let mut open: Vec<String> = Vec::new();
    let mut last_role = "";
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        if !matches!(role, "user" | "assistant") {
            out.push(format!("request #{n}: message {i} has role {role:?}"));
            continue;
        }
        if i == 0 && role != "user" {
            out.push(format!(
                "request #{n}: the first message is not a user message"
            ));
        }
        if role == last_role {
            out.push(format!(
                "request #{n}: messages {} and {i} are both {role} messages",
                i - 1
            ));
        }
        let blocks: Vec<Value> = match &m["content"] {
            Value::Array(b) => b.clone(),
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            _ => {
                out.push(format!("request #{n}: message {i} has no content"));
                Vec::new()
            }
        };
        if blocks.is_empty() {
            out.push(format!("request #{n}: message {i} has no content blocks"));
        }
        let mut answered: HashSet<String> = HashSet::new();
        let mut calls: Vec<String> = Vec::new();
        for (j, b) in blocks.iter().enumerate() {
            let at = format!("request #{n}: message {i} ({role}) block {j}");
            match b["type"].as_str().unwrap_or("") {
                "text" => {
                    if b["text"].as_str().is_none_or(|t| t.trim().is_empty()) {
                        out.push(format!("{at}: empty text block"));
                    }
                }
                "thinking" => {
                    if role != "assistant" {
                        out.push(format!("{at}: a thinking block in a user message"));
                    }
                    let text = b["thinking"].as_str().unwrap_or("");
                    match b["signature"].as_str() {
                        None | Some("") => {
                            out.push(format!("{at}: a thinking block without its signature"))
                        }
                        Some(sig) => {
                            if let Some(want) = issued.get(text)
                                && want != sig
                            {
                                out.push(format!(
                                    "{at}: thinking sent back with signature {sig:?}, issued with {want:?}"
                                ));
                            }
                        }
                    }
                }
                "tool_use" => {
                    let id = b["id"].as_str().unwrap_or("").to_string();
                    if role != "assistant" {
                        out.push(format!("{at}: a tool_use block in a user message"));
                    }
                    if id.is_empty() || calls.contains(&id) {
                        out.push(format!(
                            "{at}: a tool_use with an empty or repeated id {id:?}"
                        ));
                    }
                    if !b["input"].is_object() {
                        out.push(format!("{at}: tool_use {id:?} input is not an object"));
                    }
                    calls.push(id);
                }
                "tool_result" => {
                    let id = b["tool_use_id"].as_str().unwrap_or("").to_string();
                    if role != "user" {
                        out.push(format!("{at}: a tool_result block in an assistant message"));
                    } else if !open.contains(&id) {
                        out.push(format!(
                            "{at}: a tool_result for {id:?} that answers no tool_use of the assistant message right before it"
                        ));
                    } else if !answered.insert(id.clone()) {
                        out.push(format!("{at}: a second tool_result for {id:?}"));
                    }
                }
                other => out.push(format!("{at}: unknown block type {other:?}")),
            }
        }
        if role == "user" {
            for id in open.iter().filter(|id| !answered.contains(*id)) {
                out.push(format!(
                    "request #{n}: tool_use {id:?} of message {} has no tool_result in message {i}",
                    i - 1
                ));
            }
            open.clear();
        } else {
            if !open.is_empty() {
                out.push(format!(
                    "request #{n}: tool_use {open:?} of message {} has no tool_result before message {i}",
                    i - 1
                ));
            }
            open = calls;
        }
        last_role = role;
    }
    if !open.is_empty() {
        out.push(format!(
            "request #{n}: tool_use {open:?} of the last message has no tool_result"
        ));
    }
}

fn serve(mut conn: TcpStream, shared: &Shared) {
    let _ = conn.set_nodelay(true);
    let Some(request) = read_request(&mut conn) else {
        return;
    };
    if request.method != "POST" || !request.path.ends_with("/v1/messages") {
        shared.lock().violations.push(format!(
            "a request to {} {} (not POST /v1/messages)",
            request.method, request.path
        ));
        shared.changed.notify_all();
        let _ = write_status(
            &mut conn,
            404,
            &json!({"type": "error", "error": {"type": "not_found_error", "message": format!("no route {}", request.path)}})
                .to_string(),
        );
        return;
    }
    let body: Value = serde_json::from_slice(&request.body).unwrap_or_else(|e| {
        json!({"unparsable_body": String::from_utf8_lossy(&request.body), "error": e.to_string()})
    });
    let (index, reply) = {
        let mut state = shared.lock();
        let index = state.seen.len();
        let mut problems = Vec::new();
        check_request(
            index,
            &request.headers,
            &body,
            &shared.key,
            &state.issued,
            &mut problems,
        );
        let reply = state.script.pop_front();
        match &reply {
            Some(r) => state.issued.extend(r.thinking()),
            None => problems.push(format!(
                "request #{index} came after the script was exhausted"
            )),
        }
        state.violations.extend(problems);
        state.seen.push(Seen {
            path: request.path,
            headers: request.headers,
            body,
            at: Instant::now(),
            completed: false,
        });
        (index, reply)
    };
    shared.changed.notify_all();
    let reply = reply.unwrap_or_else(|| {
        Reply::error(
            400,
            "invalid_request_error",
            "fake Anthropic: the test script has no reply left for this request",
        )
    });
    let completed = play(&mut conn, &reply, shared).is_ok();
    if completed && let Some(seen) = shared.lock().seen.get_mut(index) {
        seen.completed = true;
    }
    shared.changed.notify_all();
    let _ = conn.shutdown(Shutdown::Both);
}

fn play(conn: &mut TcpStream, reply: &Reply, shared: &Shared) -> std::io::Result<()> {
    match &reply.kind {
        Kind::Status { code, body } => write_status(conn, *code, body),
        Kind::Sse { cut_utf8, .. } => {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nrequest-id: req_fake\r\nConnection: close\r\n\r\n";
            send(conn, head.as_bytes())?;
            for (name, data) in reply.events() {
                if shared.stop.load(Ordering::SeqCst) {
                    return Err(std::io::ErrorKind::Interrupted.into());
                }
                let event = format!("event: {name}\ndata: {data}\n\n");
                if *cut_utf8 {
                    write_cut(conn, event.as_bytes())?;
                } else {
                    send(conn, event.as_bytes())?;
                }
            }
            Ok(())
        }
    }
}

/// Writes `bytes` with every multi-byte UTF-8 character cut after its
/// first byte: the first half is flushed, and the rest follows after a
/// short pause, so the reader gets the halves in separate reads.
pub fn write_cut(conn: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    let mut start = 0;
    for (i, b) in bytes.iter().enumerate() {
        // A lead byte of a multi-byte sequence with its continuation next.
        if *b >= 0xC0 && i + 1 < bytes.len() {
            send(conn, &bytes[start..=i])?;
            std::thread::sleep(CUT_PAUSE);
            start = i + 1;
        }
    }
    send(conn, &bytes[start..])
}

fn write_status(conn: &mut TcpStream, code: u16, body: &str) -> std::io::Result<()> {
    let reason = match code {
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        529 => "Site Overloaded",
        _ => "Error",
    };
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nrequest-id: req_fake\r\nConnection: close\r\n\r\n",
        body.len()
    );
    send(conn, format!("{head}{body}").as_bytes())
}

/// A TCP relay in front of another loopback server that writes the
/// answers back with every multi-byte UTF-8 character cut in two (see
/// [`write_cut`]); requests pass through unchanged. Stops when dropped.
pub struct SplitProxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl SplitProxy {
    pub fn start(upstream: SocketAddr) -> SplitProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the split proxy");
        let addr = listener.local_addr().expect("split proxy address");
        let stop = Arc::new(AtomicBool::new(false));
        let accept_stop = stop.clone();
        std::thread::Builder::new()
            .name("split-proxy-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if accept_stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let _ = std::thread::Builder::new()
                        .name("split-proxy-conn".into())
                        .spawn(move || relay(conn, upstream));
                }
            })
            .expect("spawn the split proxy accept thread");
        SplitProxy { addr, stop }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for SplitProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn relay(mut client: TcpStream, upstream: SocketAddr) {
    let _ = client.set_nodelay(true);
    let Ok(mut server) = TcpStream::connect(upstream) else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (Ok(mut client_in), Ok(mut server_out)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    // Requests go up unchanged.
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut client_in, &mut server_out);
        let _ = server_out.shutdown(Shutdown::Write);
    });
    let mut buf = [0u8; 8192];
    loop {
        match server.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if write_cut(&mut client, &buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = server.shutdown(Shutdown::Both);
    let _ = up.join();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn check(messages: Value) -> Vec<String> {
        let issued: HashMap<String, String> = [("plan".to_string(), "sig-1".to_string())]
            .into_iter()
            .collect();
        let mut out = Vec::new();
        let messages = messages.as_array().cloned().unwrap_or_default();
        check_messages(0, &messages, &issued, &mut out);
        out
    }

    #[test]
    fn the_protocol_check_accepts_paired_blocks_and_flags_the_rest() {
        let ok = check(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "plan", "signature": "sig-1"},
                {"type": "tool_use", "id": "a", "name": "read", "input": {}},
                {"type": "tool_use", "id": "b", "name": "read", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                {"type": "tool_result", "tool_use_id": "b", "content": "2"},
            ]},
        ]));
        assert!(ok.is_empty(), "{ok:?}");

        let orphan = check(json!([
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "1"}]},
        ]));
        assert_eq!(orphan.len(), 1, "{orphan:?}");

        let unanswered = check(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "a", "name": "read", "input": {}},
                {"type": "tool_use", "id": "b", "name": "read", "input": {}},
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "1"}]},
        ]));
        assert_eq!(unanswered.len(), 1, "{unanswered:?}");
        assert!(unanswered[0].contains("\"b\""), "{unanswered:?}");

        let unsigned = check(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "x"}]},
            {"role": "user", "content": "go on"},
        ]));
        assert_eq!(unsigned.len(), 1, "{unsigned:?}");
        assert!(unsigned[0].contains("signature"), "{unsigned:?}");

        let forged = check(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "plan", "signature": "sig-2"}, {"type": "text", "text": "x"}]},
            {"role": "user", "content": "go on"},
        ]));
        assert_eq!(forged.len(), 1, "{forged:?}");

        let late = check(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "read", "input": {}}]},
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "y"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "1"}]},
        ]));
        assert_eq!(late.len(), 2, "{late:?}");

        let same_role = check(json!([
            {"role": "user", "content": "hi"},
            {"role": "user", "content": "again"},
        ]));
        assert_eq!(same_role.len(), 1, "{same_role:?}");
    }

    fn post(addr: SocketAddr, key: &str, body: &str) -> String {
        let mut conn = TcpStream::connect(addr).unwrap();
        let req = format!(
            "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: {key}\r\nanthropic-version: 2023-06-01\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(req.as_bytes()).unwrap();
        let mut out = Vec::new();
        conn.read_to_end(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// The `data:` payloads of an SSE body.
    fn data(out: &str) -> Vec<Value> {
        out.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn serves_the_script_and_checks_the_key() {
        let args = r#"{"path":"a.txt","content":"héllo ✓"}"#;
        let fake = FakeAnthropic::start(
            "sk-good",
            vec![
                Reply::text("Bonjour ✓ à tous").usage(Usage::new(10, 5, 7, 3)),
                Reply::thinking_then_tool_use("plan", "sig-1", "toolu_1", "write", args),
                Reply::overloaded(),
            ],
        );
        let body = r#"{"stream":true,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}"#;
        let out = post(fake.addr, "sk-good", body);
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        let events = data(&out);
        let text: String = events
            .iter()
            .filter_map(|e| e["delta"]["text"].as_str())
            .collect();
        assert_eq!(text, "Bonjour ✓ à tous");
        assert_eq!(events[0]["message"]["usage"]["cache_read_input_tokens"], 7);
        assert_eq!(events.last().unwrap()["type"], "message_stop");

        let out = post(fake.addr, "sk-good", body);
        let events = data(&out);
        let partial: Vec<&str> = events
            .iter()
            .filter_map(|e| e["delta"]["partial_json"].as_str())
            .collect();
        assert!(partial.len() > 3, "{partial:?}");
        assert_eq!(partial.concat(), args);
        assert!(events.iter().any(|e| e["delta"]["signature"] == "sig-1"));
        fake.assert_protocol_ok();

        let out = post(fake.addr, "sk-bad", body);
        assert!(out.starts_with("HTTP/1.1 529"), "{out}");
        assert!(out.contains("overloaded_error"), "{out}");
        let v = fake.violations();
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(!v[0].contains("sk-bad"), "{v:?}");
        assert_eq!(fake.seen()[2].header("x-api-key"), Some("sk-bad"));
    }

    #[test]
    fn write_cut_and_the_proxy_keep_the_bytes() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = listener.local_addr().unwrap();
        let text = "héllo ✓ — 😀";
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut req = [0u8; 5];
            conn.read_exact(&mut req).unwrap();
            assert_eq!(&req, b"hello");
            write_cut(&mut conn, text.as_bytes()).unwrap();
        });
        let proxy = SplitProxy::start(upstream);
        let mut conn = TcpStream::connect(proxy.addr()).unwrap();
        conn.write_all(b"hello").unwrap();
        let mut out = String::new();
        conn.read_to_string(&mut out).unwrap();
        assert_eq!(out, text);
        server.join().unwrap();
    }
}
