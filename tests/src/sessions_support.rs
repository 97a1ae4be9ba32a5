//! Session helpers shared by the e2e session modules (`sessions`, `guards`,
//! `providers`): starting flytod with no proxy in the way of the loopback
//! fake servers, creating sessions, sending messages and reading their
//! event streams (checking each run's shape), and picking apart events,
//! stored history and the requests a fake server was sent.

use crate::fake_llm::{FakeLlm, Reply};
use crate::flyto_protocol::{
    BlockView, Client, ClientError, ErrorCode, Event, MessageView, Request, Response, SessionEvent,
    SessionView,
};
use crate::{DEADLINE, Daemon, TestEnv, bin};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

/// The config every session test starts from.
pub const BASE: &str = "[daemon]\nshutdown_grace = \"1s\"\n\n[plans]\nkill_grace = \"200ms\"\n\n";

/// Starts flytod with no proxy in the way of the loopback fake server.
pub fn start(env: &TestEnv) -> Daemon {
    start_with(env, &[])
}

/// [`start`] with `extra` environment variables for flytod.
pub fn start_with(env: &TestEnv, extra: &[(&str, &str)]) -> Daemon {
    let mut vars = vec![
        ("NO_PROXY", "127.0.0.1,localhost"),
        ("no_proxy", "127.0.0.1,localhost"),
    ];
    vars.extend_from_slice(extra);
    env.try_start(&vars)
        .unwrap_or_else(|log| panic!("flytod did not become ready:\n{log}"))
}

/// A fake server with `script`, an env whose config points at it, flytod.
pub fn setup(script: Vec<Reply>) -> (FakeLlm, TestEnv, Daemon) {
    setup_on(crate::Backend::Sled, script)
}

/// [`setup`] on `backend`.
pub fn setup_on(backend: crate::Backend, script: Vec<Reply>) -> (FakeLlm, TestEnv, Daemon) {
    let fake = FakeLlm::start(script);
    let env = TestEnv::on(backend, &format!("{BASE}{}", fake.config()));
    let daemon = start(&env);
    (fake, env, daemon)
}

/// A fake server with `script`, flytod configured with `extra` (e.g. a
/// `[sessions]` section) and the fake's model profile.
pub fn setup_with(extra: &str, script: Vec<Reply>) -> (FakeLlm, TestEnv, Daemon) {
    setup_with_on(crate::Backend::Sled, extra, script)
}

/// [`setup_with`] on `backend`.
pub fn setup_with_on(
    backend: crate::Backend,
    extra: &str,
    script: Vec<Reply>,
) -> (FakeLlm, TestEnv, Daemon) {
    let fake = FakeLlm::start(script);
    let env = TestEnv::on(backend, &format!("{BASE}{extra}\n{}", fake.config()));
    let daemon = start(&env);
    (fake, env, daemon)
}

/// The directory `name` under the env's work dir, created.
pub fn workdir(env: &TestEnv, name: &str) -> PathBuf {
    let dir = env.work.join(name);
    std::fs::create_dir_all(&dir).expect("workdir");
    dir
}

pub fn try_new_session(env: &TestEnv, dir: &Path) -> Result<SessionView, ClientError> {
    env.client()
        .call(&Request::SessionNew {
            name: None,
            workdir: Some(dir.display().to_string()),
            model: None,
            sandbox: None,
            network: None,
        })
        .map(|r| match r {
            Response::Session { session } => session,
            other => panic!("unexpected answer to session_new: {other:?}"),
        })
}

/// A new session in `dir`: its id.
pub fn new_session(env: &TestEnv, dir: &Path) -> String {
    try_new_session(env, dir).expect("session_new").id
}

/// A client whose `session_send` has been sent; read it with [`next_event`].
pub fn start_send(env: &TestEnv, id: &str, text: &str) -> Client {
    let mut client = env.client();
    client.set_read_timeout(Some(DEADLINE)).expect("timeout");
    client
        .send(&Request::SessionSend {
            id: id.into(),
            text: text.into(),
            can_approve: false,
        })
        .expect("send session_send");
    client
}

/// The next session event on a send/attach stream; `None` at `End`.
pub fn next_event(client: &mut Client, id: &str) -> Option<(u64, SessionEvent)> {
    read_event(client, None, id)
}

/// [`next_event`], but a broken stream fails the test with flytod's log.
pub fn next_event_logged(
    client: &mut Client,
    daemon: &Daemon,
    id: &str,
) -> Option<(u64, SessionEvent)> {
    read_event(client, Some(daemon), id)
}

fn read_event(
    client: &mut Client,
    daemon: Option<&Daemon>,
    id: &str,
) -> Option<(u64, SessionEvent)> {
    match client.recv() {
        Ok(Response::Event {
            seq,
            event: Event::Session { session, event },
        }) => {
            assert_eq!(session, id, "event of another session: {event:?}");
            Some((seq, event))
        }
        Ok(Response::End {}) => None,
        Ok(other) => panic!("unexpected frame in the session stream: {other:?}"),
        Err(e) => match daemon {
            Some(daemon) => panic!(
                "the session stream broke: {e:?}; flytod's log:\n{}",
                daemon.log()
            ),
            None => panic!("session event: {e:?}"),
        },
    }
}

/// Sends a message and returns every event of the run, checking the
/// stream's shape: RunStart first, exactly one run-ending event, last,
/// increasing sequence numbers, then End.
pub fn send(env: &TestEnv, id: &str, text: &str) -> Vec<SessionEvent> {
    send_and_check(env, None, id, text)
}

/// [`send`], but a broken stream fails the test with flytod's log.
pub fn send_logged(env: &TestEnv, daemon: &Daemon, id: &str, text: &str) -> Vec<SessionEvent> {
    send_and_check(env, Some(daemon), id, text)
}

fn send_and_check(
    env: &TestEnv,
    daemon: Option<&Daemon>,
    id: &str,
    text: &str,
) -> Vec<SessionEvent> {
    let mut client = start_send(env, id, text);
    let mut events = Vec::new();
    let mut last_seq = 0;
    while let Some((seq, event)) = read_event(&mut client, daemon, id) {
        assert!(seq > last_seq, "seq {seq} after {last_seq}: {event:?}");
        last_seq = seq;
        events.push(event);
    }
    assert_run_shape(&events);
    events
}

/// RunStart first, exactly one run-ending event, last.
pub fn assert_run_shape(events: &[SessionEvent]) {
    assert!(
        matches!(events.first(), Some(SessionEvent::RunStart { .. })),
        "a run starts with RunStart: {events:#?}"
    );
    let ends = events.iter().filter(|e| e.ends_run()).count();
    assert_eq!(ends, 1, "exactly one run-ending event: {events:#?}");
    assert!(
        events.last().is_some_and(SessionEvent::ends_run),
        "the run-ending event comes last: {events:#?}"
    );
}

/// `session_send` that must be refused: its error code and message.
pub fn send_refused(env: &TestEnv, id: &str, text: &str) -> (ErrorCode, String) {
    let mut client = env.client();
    client.set_read_timeout(Some(DEADLINE)).expect("timeout");
    match client.call(&Request::SessionSend {
        id: id.into(),
        text: text.into(),
        can_approve: false,
    }) {
        Err(ClientError::Remote { code, message }) => (code, message),
        other => panic!("session_send was not refused: {other:?}"),
    }
}

pub fn cancel(env: &TestEnv, id: &str) -> SessionView {
    match env
        .client()
        .call(&Request::SessionCancel { id: id.into() })
        .expect("session_cancel")
    {
        Response::Session { session } => session,
        other => panic!("unexpected answer to session_cancel: {other:?}"),
    }
}

pub fn history(env: &TestEnv, id: &str) -> (SessionView, Vec<MessageView>) {
    match env
        .client()
        .call(&Request::SessionHistory { id: id.into() })
        .expect("session_history")
    {
        Response::History {
            session, messages, ..
        } => (session, messages),
        other => panic!("unexpected answer to session_history: {other:?}"),
    }
}

/// Reads the send stream until the first Text delta.
pub fn wait_for_text(client: &mut Client, id: &str) {
    loop {
        match next_event(client, id) {
            Some((_, SessionEvent::Text { .. })) => return,
            Some((_, e)) if e.ends_run() => panic!("the run ended early: {e:?}"),
            Some(_) => {}
            None => panic!("the stream ended before any text"),
        }
    }
}

/// Reads the rest of a send stream (to End).
pub fn drain(client: &mut Client, id: &str) -> Vec<SessionEvent> {
    let mut events = Vec::new();
    while let Some((_, e)) = next_event(client, id) {
        events.push(e);
    }
    events
}

/// The streamed text of a run.
pub fn text_of(events: &[SessionEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::Text { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

/// The stored result of tool call `call`: its content, and whether it is
/// an error.
pub fn stored_result(messages: &[MessageView], call: &str) -> Option<(String, bool)> {
    messages
        .iter()
        .flat_map(|m| &m.blocks)
        .find_map(|b| match b {
            BlockView::ToolResult {
                call_id,
                content,
                is_error,
            } if call_id == call => Some((content.clone(), *is_error)),
            _ => None,
        })
}

/// The Notice messages of a run.
pub fn notices(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::Notice { message } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

/// Whether the run ended with `Done`.
pub fn done(events: &[SessionEvent]) -> bool {
    matches!(events.last(), Some(SessionEvent::Done { .. }))
}

/// The text blocks of a stored message, joined.
pub fn message_text(m: &MessageView) -> String {
    m.blocks
        .iter()
        .filter_map(|b| match b {
            BlockView::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// Every stored tool call has a result in the next message.
pub fn assert_every_call_answered(messages: &[MessageView]) {
    for (i, m) in messages.iter().enumerate() {
        for b in &m.blocks {
            if let BlockView::ToolUse { id, .. } = b {
                let answered = messages.get(i + 1).is_some_and(|next| {
                    next.blocks.iter().any(
                        |nb| matches!(nb, BlockView::ToolResult { call_id, .. } if call_id == id),
                    )
                });
                assert!(
                    answered,
                    "tool call {id} (message {i}) has no result in the next message: {messages:#?}"
                );
            }
        }
    }
}

/// The `messages` of an OpenAI-style request body.
pub fn request_messages(body: &Value) -> &Vec<Value> {
    body["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("no messages in {body:#}"))
}

/// The tool names an OpenAI-style request body offers.
pub fn offered_tools(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The system message of an OpenAI-style request body.
pub fn system_prompt(body: &Value) -> String {
    request_messages(body)
        .iter()
        .find(|m| m["role"] == "system")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no system message in {body:#}"))
        .to_string()
}

/// The `role: "tool"` message answering `call` in a request body.
pub fn request_tool_result(body: &Value, call: &str) -> String {
    request_messages(body)
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no tool result for {call} in {body:#}"))
        .to_string()
}

/// A flytoctl running in the background with `args`, stdin a pipe (write
/// to it with [`write_stdin`]), stdout and stderr captured.
pub fn spawn_ctl(env: &TestEnv, args: &[&str]) -> Child {
    env.command(&bin("flytoctl"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn flytoctl")
}

pub fn write_stdin(child: &mut Child, text: &str) {
    let pipe = child.stdin.as_mut().expect("stdin");
    pipe.write_all(text.as_bytes()).expect("write stdin");
    pipe.flush().expect("flush stdin");
}

/// Closes stdin and waits: exit code, stdout, stderr.
pub fn finish_ctl(mut child: Child) -> (i32, String, String) {
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("flytoctl output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits until the daemon reports session `id` running.
pub fn wait_running(env: &TestEnv, id: &str) {
    crate::wait_until("the session to be running", DEADLINE, || {
        let (session, _) = history(env, id);
        (session.status == "running").then_some(())
    });
}
