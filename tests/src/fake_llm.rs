//! A scripted fake OpenAI-compatible chat-completions server on 127.0.0.1,
//! for driving flytod's sessions without a real provider.
//!
//! Each request to `POST {base_url}/chat/completions` takes the next
//! [`Reply`] of the script. The request bodies are kept (parsed) in
//! arrival order, and every one is checked for the tool-call protocol: a
//! `role: "tool"` message must answer a call of the assistant message right
//! before it, and every call must be answered before the next
//! assistant/user turn, and no two calls of a request share an id.
//! [`FakeLlm::assert_protocol_ok`] fails the test listing what was wrong.
//!
//! [`FakeLlm::set_call_ids`] makes it name its tool calls the way servers
//! whose ids cannot be trusted do: `call_0` for every call, a count that
//! restarts each response, no id at all, or `call_0` without an index.
//!
//! ```no_run
//! use flyto_tests::fake_llm::{FakeLlm, Reply};
//! let fake = FakeLlm::start(vec![
//!     Reply::tool_call("call_1", "write", r#"{"path":"a.txt","content":"x"}"#),
//!     Reply::text("Done."),
//! ]);
//! let config = fake.config(); // [models.fake] + [roles] for flytod
//! ```
//!
//! Replies are served over HTTP/1.1 with `Connection: close` (the body
//! ends when the connection does). While a reply waits between chunks the
//! server watches the connection, so a client that hangs up is noticed at
//! once ([`FakeLlm::wait_hangup`]).

use crate::fake_http;
use serde_json::{Value, json};
use std::collections::{HashSet, VecDeque};
use std::io::Read;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Prompt/completion tokens reported by replies that do not set them.
pub const DEFAULT_USAGE: (u64, u64) = (1000, 50);

/// How long a [`Reply::hang`] (or a slow reply) waits at most before the
/// server gives up on its own, so no thread outlives a test for long.
const MAX_HANG: Duration = Duration::from_secs(120);

/// How the server names the tool calls it streams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CallIds {
    /// As the script says.
    #[default]
    Scripted,
    /// `call_0` for every call, parallel ones included.
    AllCall0,
    /// `call_0`, `call_1`… counted from 0 in each response.
    PerResponse,
    /// No `id` field at all.
    Missing,
    /// `call_0` for every call, and no `index` field: a call is told from
    /// the next only by its name coming again.
    AllCall0NoIndex,
}

impl CallIds {
    /// `data` (one chunk's JSON) with its tool calls named this way.
    fn apply(self, data: &str) -> String {
        if self == CallIds::Scripted {
            return data.to_string();
        }
        let Ok(mut chunk) = serde_json::from_str::<Value>(data) else {
            return data.to_string();
        };
        let Some(calls) = chunk["choices"][0]["delta"]["tool_calls"].as_array_mut() else {
            return data.to_string();
        };
        for call in calls {
            let Some(obj) = call.as_object_mut() else {
                continue;
            };
            let index = obj.get("index").and_then(Value::as_u64).unwrap_or(0);
            if self == CallIds::AllCall0NoIndex {
                obj.remove("index");
            }
            if obj.contains_key("id") {
                match self {
                    CallIds::Scripted => {}
                    CallIds::AllCall0 | CallIds::AllCall0NoIndex => {
                        obj.insert("id".into(), "call_0".into());
                    }
                    CallIds::PerResponse => {
                        obj.insert("id".into(), format!("call_{index}").into());
                    }
                    CallIds::Missing => {
                        obj.remove("id");
                    }
                }
            }
        }
        chunk.to_string()
    }
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Sse {
        /// `data:` payloads, each sent after its pause.
        events: Vec<(Duration, String)>,
        /// The finish reason of the last chunk; `None` leaves it out.
        finish: Option<String>,
        usage: Option<(u64, u64)>,
        /// Sends `data: [DONE]` at the end; false cuts the stream.
        done: bool,
    },
    Status {
        code: u16,
        retry_after: Option<u64>,
        body: String,
    },
    Hang,
    /// The inner reply, sent once the test released `gate`.
    Held {
        gate: String,
        reply: Box<Reply>,
    },
}

fn chunk(delta: Value) -> String {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": null}],
    })
    .to_string()
}

/// Splits `s` into up to `n` pieces at char boundaries (never empty ones).
fn split(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    let size = chars.len().div_ceil(n.max(1));
    chars
        .chunks(size.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

impl Reply {
    /// Streams `text` as several `content` deltas, then finish_reason
    /// "stop", a usage chunk and `[DONE]`.
    pub fn text(text: &str) -> Reply {
        let mut events = vec![(Duration::ZERO, chunk(json!({"role": "assistant"})))];
        for piece in split(text, 4) {
            events.push((Duration::ZERO, chunk(json!({"content": piece}))));
        }
        Reply::sse(events, Some("stop"))
    }

    /// One tool call; `args_json` is the arguments object as JSON text.
    pub fn tool_call(id: &str, name: &str, args_json: impl ToString) -> Reply {
        Reply::tool_calls(vec![(id, name, args_json.to_string())])
    }

    /// Several tool calls in one response, each with its arguments split
    /// into fragments mid-JSON; finish_reason "tool_calls".
    pub fn tool_calls(calls: Vec<(&str, &str, String)>) -> Reply {
        let mut events = vec![(
            Duration::ZERO,
            chunk(json!({"role": "assistant", "content": null})),
        )];
        for (index, (id, name, args)) in calls.iter().enumerate() {
            events.push((
                Duration::ZERO,
                chunk(json!({"tool_calls": [{
                    "index": index,
                    "id": id,
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }]})),
            ));
            for piece in split(args, 3) {
                events.push((
                    Duration::ZERO,
                    chunk(json!({"tool_calls": [{
                        "index": index,
                        "function": {"arguments": piece},
                    }]})),
                ));
            }
        }
        Reply::sse(events, Some("tool_calls"))
    }

    /// One `content` delta per chunk, each sent `interval` after the
    /// previous one (the first one at once), then stop/usage/`[DONE]`.
    pub fn slow_text<S: Into<String>>(
        chunks: impl IntoIterator<Item = S>,
        interval: Duration,
    ) -> Reply {
        let mut events = vec![(Duration::ZERO, chunk(json!({"role": "assistant"})))];
        for (i, c) in chunks.into_iter().enumerate() {
            let pause = if i == 0 { Duration::ZERO } else { interval };
            events.push((pause, chunk(json!({"content": c.into()}))));
        }
        Reply::sse(events, Some("stop"))
    }

    /// An HTTP error with an OpenAI-style error body, and a `retry-after`
    /// header (seconds) when given.
    pub fn status(code: u16, retry_after: Option<u64>) -> Reply {
        let (kind, message) = match code {
            429 => ("rate_limit_error", "Rate limit reached for requests"),
            401 => ("authentication_error", "Incorrect API key provided"),
            404 => ("not_found_error", "The model does not exist"),
            503 | 529 => ("overloaded_error", "The engine is currently overloaded"),
            _ => ("server_error", "The server had an error"),
        };
        Reply {
            kind: Kind::Status {
                code,
                retry_after,
                body: json!({"error": {"message": message, "type": kind, "code": kind}})
                    .to_string(),
            },
        }
    }

    /// HTTP 400 saying the prompt is longer than the model's context.
    pub fn prompt_too_long() -> Reply {
        Reply {
            kind: Kind::Status {
                code: 400,
                retry_after: None,
                body: json!({"error": {
                    "message": "This model's maximum context length is 4096 tokens. However, your messages resulted in 9000 tokens.",
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded"
                }})
                .to_string(),
            },
        }
    }

    /// Reads the request and never answers; the connection stays open until
    /// the client hangs up.
    pub fn hang() -> Reply {
        Reply { kind: Kind::Hang }
    }

    /// Raw `data:` payloads as given (no finish chunk, usage or `[DONE]`
    /// added), for malformed or unusual streams.
    pub fn raw(payloads: Vec<String>) -> Reply {
        Reply {
            kind: Kind::Sse {
                events: payloads.into_iter().map(|p| (Duration::ZERO, p)).collect(),
                finish: None,
                usage: None,
                done: false,
            },
        }
    }

    fn sse(events: Vec<(Duration, String)>, finish: Option<&str>) -> Reply {
        Reply {
            kind: Kind::Sse {
                events,
                finish: finish.map(str::to_string),
                usage: Some(DEFAULT_USAGE),
                done: true,
            },
        }
    }

    /// This reply, held until [`FakeLlm::release`] opens `gate`: the
    /// request stays in flight (its client waits) until then.
    pub fn held(self, gate: &str) -> Reply {
        Reply {
            kind: Kind::Held {
                gate: gate.into(),
                reply: Box::new(self),
            },
        }
    }

    /// Sets the usage the reply reports (prompt and completion tokens).
    pub fn usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Reply {
        if let Kind::Sse { usage, .. } = &mut self.kind {
            *usage = Some((prompt_tokens, completion_tokens));
        }
        self
    }

    /// Ends the stream (closes the connection) before the finish chunk,
    /// the usage and `[DONE]`: a stream cut mid-way.
    pub fn cut(mut self) -> Reply {
        if let Kind::Sse {
            finish,
            usage,
            done,
            ..
        } = &mut self.kind
        {
            *finish = None;
            *usage = None;
            *done = false;
        }
        self
    }
}

/// What the server knows about one request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub body: Value,
    pub at: Instant,
    /// The client closed the connection before the reply was complete.
    pub hung_up: Option<Instant>,
    /// The whole reply was written.
    pub completed: bool,
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    seen: Vec<Seen>,
    violations: Vec<String>,
    /// Gates of [`Reply::held`] the test opened.
    released: HashSet<String>,
    call_ids: CallIds,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running fake server; it stops when dropped.
pub struct FakeLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeLlm {
    pub fn start(script: Vec<Reply>) -> FakeLlm {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake LLM server");
        let addr = listener.local_addr().expect("fake LLM address");
        let shared = Arc::new(Shared::default());
        shared.lock().script = script.into();
        fake_http::spawn_accept(
            listener,
            "fake-llm",
            "fake LLM",
            shared.clone(),
            |s| &s.stop,
            serve,
        );
        FakeLlm { addr, shared }
    }

    /// `http://127.0.0.1:<port>/v1`: requests go to `{base_url}/chat/completions`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `[models.fake]` and `[roles] main = "fake"` pointing at this server
    /// (no API key needed), to put in flytod's config.
    pub fn config(&self) -> String {
        format!(
            "[models.fake]\napi = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\ninput_price = 1.0\noutput_price = 2.0\n\n[roles]\nmain = \"fake\"\n",
            self.base_url()
        )
    }

    /// Adds replies to the end of the script.
    pub fn push(&self, replies: Vec<Reply>) {
        self.shared.lock().script.extend(replies);
        self.shared.changed.notify_all();
    }

    /// Names the tool calls of the replies sent from now on `ids`' way.
    pub fn set_call_ids(&self, ids: CallIds) {
        self.shared.lock().call_ids = ids;
    }

    /// Lets the replies held at `gate` go (now, or as soon as they come).
    pub fn release(&self, gate: &str) {
        self.shared.lock().released.insert(gate.into());
        self.shared.changed.notify_all();
    }

    /// The parsed request bodies, in arrival order.
    pub fn requests(&self) -> Vec<Value> {
        self.shared
            .lock()
            .seen
            .iter()
            .map(|s| s.body.clone())
            .collect()
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
        self.wait(&format!("{n} request(s) to the fake LLM"), limit, |s| {
            (s.seen.len() >= n).then(|| s.seen.iter().map(|x| x.body.clone()).collect())
        })
    }

    /// Waits until the client closed the connection of request `index`
    /// (0-based) before its reply was complete; returns when that happened.
    pub fn wait_hangup(&self, index: usize, limit: Duration) -> Instant {
        self.wait(
            &format!("the client to hang up on fake LLM request #{index}"),
            limit,
            |s| s.seen.get(index).and_then(|x| x.hung_up),
        )
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
            "the fake LLM saw {} protocol violation(s):\n- {}",
            v.len(),
            v.join("\n- ")
        );
    }

    fn wait<T>(&self, what: &str, limit: Duration, mut f: impl FnMut(&State) -> Option<T>) -> T {
        let deadline = Instant::now() + limit;
        let mut state = self.shared.lock();
        loop {
            if let Some(v) = f(&state) {
                return v;
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
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Checks the tool-call pairing of one request's `messages`.
fn check_protocol(n: usize, body: &Value, out: &mut Vec<String>) {
    if body["stream"] != json!(true) {
        out.push(format!("request #{n}: `stream` is not true"));
    }
    let Some(messages) = body["messages"].as_array() else {
        out.push(format!("request #{n}: no `messages` array"));
        return;
    };
    // Calls of the last assistant message, and which were answered.
    let mut open: Vec<String> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();
    let mut unanswered = |open: &Vec<String>, answered: &HashSet<String>, at: String| {
        for id in open.iter().filter(|id| !answered.contains(*id)) {
            out.push(format!(
                "request #{n}: tool call {id:?} has no result before {at}"
            ));
        }
    };
    let mut problems = Vec::new();
    // Every call id of the request: a result must name one call only.
    let mut all_ids: HashSet<String> = HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        match m["role"].as_str().unwrap_or("") {
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap_or("").to_string();
                if !open.contains(&id) {
                    problems.push(format!(
                        "request #{n}: message {i} is a tool result for {id:?} without a preceding assistant tool call with that id"
                    ));
                } else if !answered.insert(id.clone()) {
                    problems.push(format!(
                        "request #{n}: message {i} is a second tool result for {id:?}"
                    ));
                }
            }
            role @ ("assistant" | "user") => {
                unanswered(&open, &answered, format!("message {i} ({role})"));
                open.clear();
                answered.clear();
                if role == "assistant" {
                    for call in m["tool_calls"].as_array().into_iter().flatten() {
                        let id = call["id"].as_str().unwrap_or("").to_string();
                        if id.is_empty() || open.contains(&id) {
                            problems.push(format!(
                                "request #{n}: message {i} has a tool call with an empty or repeated id {id:?}"
                            ));
                        } else if !all_ids.insert(id.clone()) {
                            problems.push(format!(
                                "request #{n}: message {i} has a tool call with the id {id:?} of an earlier call"
                            ));
                        }
                        open.push(id);
                    }
                }
            }
            _ => {}
        }
    }
    unanswered(&open, &answered, "the end of the request".into());
    out.extend(problems);
}

fn serve(mut conn: TcpStream, shared: &Shared) {
    let _ = conn.set_nodelay(true);
    let Some((path, body)) = read_request(&mut conn) else {
        return;
    };
    if !path.ends_with("/chat/completions") {
        let _ = write_status(
            &mut conn,
            404,
            None,
            &json!({"error": {"message": format!("no route {path}"), "type": "not_found_error"}})
                .to_string(),
        );
        return;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or_else(
        |e| json!({"unparsable_body": String::from_utf8_lossy(&body), "error": e.to_string()}),
    );
    let (index, reply) = {
        let mut state = shared.lock();
        let index = state.seen.len();
        let mut problems = Vec::new();
        check_protocol(index, &body, &mut problems);
        let reply = state.script.pop_front();
        if reply.is_none() {
            problems.push(format!(
                "request #{index} came after the script was exhausted"
            ));
        }
        state.violations.extend(problems);
        state.seen.push(Seen {
            body,
            at: Instant::now(),
            hung_up: None,
            completed: false,
        });
        (index, reply)
    };
    shared.changed.notify_all();
    let reply = reply.unwrap_or_else(|| Reply {
        kind: Kind::Status {
            code: 400,
            retry_after: None,
            body: json!({"error": {"message": "fake LLM: the test script has no reply left for this request", "type": "invalid_request_error"}}).to_string(),
        },
    });
    let outcome = play(&mut conn, &reply, shared);
    {
        let mut state = shared.lock();
        if let Some(seen) = state.seen.get_mut(index) {
            match outcome {
                Outcome::Completed => seen.completed = true,
                Outcome::HungUp(at) => seen.hung_up = Some(at),
                Outcome::Stopped => {}
            }
        }
    }
    shared.changed.notify_all();
    let _ = conn.shutdown(Shutdown::Both);
}

enum Outcome {
    Completed,
    HungUp(Instant),
    Stopped,
}

fn play(conn: &mut TcpStream, reply: &Reply, shared: &Shared) -> Outcome {
    match &reply.kind {
        Kind::Status {
            code,
            retry_after,
            body,
        } => match write_status(conn, *code, *retry_after, body) {
            Ok(()) => Outcome::Completed,
            Err(_) => Outcome::HungUp(Instant::now()),
        },
        Kind::Hang => match watch(conn, MAX_HANG, shared) {
            Some(outcome) => outcome,
            None => Outcome::Stopped,
        },
        Kind::Held { gate, reply } => {
            let deadline = Instant::now() + MAX_HANG;
            let mut state = shared.lock();
            while !state.released.contains(gate) {
                let now = Instant::now();
                if shared.stop.load(Ordering::SeqCst) || now >= deadline {
                    return Outcome::Stopped;
                }
                state = shared
                    .changed
                    .wait_timeout(state, (deadline - now).min(Duration::from_millis(200)))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            drop(state);
            play(conn, reply, shared)
        }
        Kind::Sse {
            events,
            finish,
            usage,
            done,
        } => {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n";
            if send(conn, head).is_err() {
                return Outcome::HungUp(Instant::now());
            }
            let mut tail = Vec::new();
            if let Some(reason) = finish {
                tail.push(
                    json!({
                        "id": "chatcmpl-fake",
                        "object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": {}, "finish_reason": reason}],
                    })
                    .to_string(),
                );
            }
            if let Some((prompt, completion)) = usage {
                tail.push(
                    json!({
                        "id": "chatcmpl-fake",
                        "object": "chat.completion.chunk",
                        "choices": [],
                        "usage": {
                            "prompt_tokens": prompt,
                            "completion_tokens": completion,
                            "total_tokens": prompt + completion,
                        },
                    })
                    .to_string(),
                );
            }
            if *done {
                tail.push("[DONE]".into());
            }
            let ids = shared.lock().call_ids;
            let all = events
                .iter()
                .cloned()
                .chain(tail.into_iter().map(|t| (Duration::ZERO, t)));
            for (pause, data) in all {
                if !pause.is_zero()
                    && let Some(outcome) = watch(conn, pause, shared)
                {
                    return outcome;
                }
                let data = ids.apply(&data);
                if send(conn, &format!("data: {data}\n\n")).is_err() {
                    return Outcome::HungUp(Instant::now());
                }
            }
            Outcome::Completed
        }
    }
}

/// Waits `pause` while watching the connection: `Some` when the client
/// hung up (or the server is stopping), `None` when the pause is over.
fn watch(conn: &mut TcpStream, pause: Duration, shared: &Shared) -> Option<Outcome> {
    let deadline = Instant::now() + pause;
    let mut buf = [0u8; 256];
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return Some(Outcome::Stopped);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        // Short slices so a stopping server is noticed too.
        let slice = (deadline - now).min(Duration::from_millis(200));
        let _ = conn.set_read_timeout(Some(slice));
        match conn.read(&mut buf) {
            Ok(0) => return Some(Outcome::HungUp(Instant::now())),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return Some(Outcome::HungUp(Instant::now())),
        }
    }
}

fn send(conn: &mut TcpStream, text: &str) -> std::io::Result<()> {
    fake_http::send(conn, text.as_bytes())
}

fn write_status(
    conn: &mut TcpStream,
    code: u16,
    retry_after: Option<u64>,
    body: &str,
) -> std::io::Result<()> {
    let reason = match code {
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let mut head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(secs) = retry_after {
        head.push_str(&format!("retry-after: {secs}\r\n"));
    }
    head.push_str("\r\n");
    send(conn, &format!("{head}{body}"))
}

/// Reads one request: its path and body (by Content-Length).
fn read_request(conn: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    fake_http::read_request(conn).map(|r| (r.path, r.body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn check(messages: Value) -> Vec<String> {
        let mut out = Vec::new();
        check_protocol(0, &json!({"stream": true, "messages": messages}), &mut out);
        out
    }

    #[test]
    fn the_protocol_check_accepts_paired_calls_and_flags_the_rest() {
        let call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "read", "arguments": "{}"}});
        let ok = check(json!([
            {"role": "system", "content": "s"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "tool", "tool_call_id": "b", "content": "2"},
            {"role": "assistant", "content": "done"},
        ]));
        assert!(ok.is_empty(), "{ok:?}");
        let orphan = check(json!([
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "x", "content": "1"},
        ]));
        assert_eq!(orphan.len(), 1, "{orphan:?}");
        let unanswered = check(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "user", "content": "go on"},
        ]));
        assert_eq!(unanswered.len(), 1, "{unanswered:?}");
        assert!(unanswered[0].contains("\"b\""), "{unanswered:?}");
        let trailing = check(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [call("a")]},
        ]));
        assert_eq!(trailing.len(), 1, "{trailing:?}");
        let late = check(json!([
            {"role": "assistant", "content": null, "tool_calls": [call("a")]},
            {"role": "user", "content": "x"},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
        ]));
        assert_eq!(late.len(), 2, "{late:?}");
        // A reused id makes the second round's result ambiguous.
        let reused = check(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [call("call_0")]},
            {"role": "tool", "tool_call_id": "call_0", "content": "1"},
            {"role": "assistant", "content": null, "tool_calls": [call("call_0")]},
            {"role": "tool", "tool_call_id": "call_0", "content": "2"},
        ]));
        assert_eq!(reused.len(), 1, "{reused:?}");
        assert!(reused[0].contains("of an earlier call"), "{reused:?}");
    }

    #[test]
    fn call_id_modes_rename_the_streamed_calls() {
        let chunk = |index: u64, id: &str| {
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": index, "id": id, "function": {"name": "bash", "arguments": ""}}
            ]}}]})
            .to_string()
        };
        let call = |ids: CallIds, index: u64| -> Value {
            let out: Value = serde_json::from_str(&ids.apply(&chunk(index, "call_x"))).unwrap();
            out["choices"][0]["delta"]["tool_calls"][0].clone()
        };
        assert_eq!(call(CallIds::Scripted, 2)["id"], "call_x");
        assert_eq!(call(CallIds::AllCall0, 2)["id"], "call_0");
        assert_eq!(call(CallIds::PerResponse, 2)["id"], "call_2");
        assert!(call(CallIds::Missing, 2).get("id").is_none());
        let no_index = call(CallIds::AllCall0NoIndex, 2);
        assert_eq!(no_index["id"], "call_0");
        assert!(no_index.get("index").is_none());
        // Chunks without calls go out as they are.
        assert_eq!(CallIds::AllCall0.apply("[DONE]"), "[DONE]");
    }

    fn post(fake: &FakeLlm, body: &str) -> TcpStream {
        let mut conn = TcpStream::connect(fake.addr).unwrap();
        let req = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(req.as_bytes()).unwrap();
        conn
    }

    #[test]
    fn serves_the_script_in_order_and_notices_hangups() {
        let fake = FakeLlm::start(vec![
            Reply::text("héllo there"),
            Reply::status(429, Some(1)),
            Reply::slow_text(["a", "b", "c"], Duration::from_secs(10)),
        ]);
        let body = r#"{"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let mut out = String::new();
        post(&fake, body).read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.contains("text/event-stream"), "{out}");
        assert!(out.contains("\"finish_reason\":\"stop\""), "{out}");
        assert!(out.ends_with("data: [DONE]\n\n"), "{out}");
        let text: String = out
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .filter_map(|v| {
                v["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_string)
            })
            .collect();
        assert_eq!(text, "héllo there");

        let mut out = String::new();
        post(&fake, body).read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 429"), "{out}");
        assert!(out.contains("retry-after: 1\r\n"), "{out}");

        let mut conn = post(&fake, body);
        let mut first = [0u8; 64];
        let _ = conn.read(&mut first).unwrap();
        let closed = Instant::now();
        drop(conn);
        let seen = fake.wait_hangup(2, Duration::from_secs(5));
        assert!(seen.duration_since(closed) < Duration::from_secs(2));
        assert_eq!(fake.requests().len(), 3);
        fake.assert_protocol_ok();
        drop(post(&fake, body));
        fake.wait_requests(4, Duration::from_secs(5));
        assert_eq!(fake.violations().len(), 1, "{:?}", fake.violations());
    }

    #[test]
    fn split_keeps_chars_whole() {
        assert_eq!(split("héllo wörld", 3).concat(), "héllo wörld");
        assert_eq!(split("ab", 4), vec!["a", "b"]);
    }
}
