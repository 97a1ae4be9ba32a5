//! Tool-call ids a model server reuses, end to end: the real flytod against
//! the fake OpenAI-compatible server naming its calls `call_0` for every
//! call, restarting its count each response, sending no id, or `call_0`
//! without an index. Every call the model made runs exactly once, the
//! session's history keeps every round, and each request pairs every
//! result with its own call. A transcript stored by an older flytod with
//! repeated ids loads and continues with every round. The same holds for an
//! Anthropic server reusing a `tool_use` id.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_actors::llm::{Block, Message, Role};
use flyto_actors::session::{SessionStore, SledSessionStore};
use flyto_tests::fake_anthropic::{self, FakeAnthropic};
use flyto_tests::fake_llm::{CallIds, FakeLlm, Reply};
use flyto_tests::flyto_protocol::{BlockView, MessageView, SessionEvent};
use flyto_tests::sessions_support::{
    BASE, assert_every_call_answered, done, new_session, request_messages, send, start, start_with,
    workdir,
};
use flyto_tests::{TestEnv, sessions_support::history};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::path::Path;

/// A bash command that appends line `n` to lines.txt and says so.
fn append(n: u32) -> String {
    json!({ "command": format!("echo {n} >> lines.txt && echo appended {n}") }).to_string()
}

/// One call, then two parallel calls, then one more, then the answer:
/// four appends in three rounds.
fn four_appends() -> Vec<Reply> {
    vec![
        Reply::tool_call("call_a", "bash", append(1)),
        Reply::tool_calls(vec![
            ("call_b", "bash", append(2)),
            ("call_c", "bash", append(3)),
        ]),
        Reply::tool_call("call_d", "bash", append(4)),
        Reply::text("Appended four lines."),
    ]
}

fn lines(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("lines.txt"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// The `n` of each `echo n >> lines.txt` the arguments hold.
fn appended_of(arguments: &str) -> u32 {
    let v: Value = serde_json::from_str(arguments).expect("arguments are JSON");
    let command = v["command"].as_str().expect("a command");
    command
        .strip_prefix("echo ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not an append: {command}"))
}

/// Checks an OpenAI request's tool rounds: every call id is unique in the
/// request, and the result naming it is that call's (its output names the
/// line the call appended). Returns the lines appended, in call order.
fn paired_rounds(body: &Value) -> Vec<u32> {
    let mut calls: Vec<(String, u32)> = Vec::new();
    let mut answered = Vec::new();
    for m in request_messages(body) {
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            let id = c["id"].as_str().expect("a call id").to_string();
            let n = appended_of(c["function"]["arguments"].as_str().expect("arguments"));
            assert!(
                calls.iter().all(|(other, _)| *other != id),
                "call id {id} is sent twice: {body:#}"
            );
            calls.push((id, n));
        }
        if m["role"] == "tool" {
            let id = m["tool_call_id"].as_str().expect("tool_call_id");
            let (_, n) = calls
                .iter()
                .find(|(c, _)| c == id)
                .unwrap_or_else(|| panic!("result {id} names no call: {body:#}"));
            let content = m["content"].as_str().unwrap_or("");
            assert!(
                content.contains(&format!("appended {n}")),
                "the result of {id} is not its call's (line {n}): {content:?}"
            );
            answered.push(*n);
        }
    }
    let made: Vec<u32> = calls.iter().map(|(_, n)| *n).collect();
    assert_eq!(answered, made, "every call is answered once, in order");
    made
}

/// The calls of a stored history: (id, line appended).
fn stored_calls(messages: &[MessageView]) -> Vec<(String, u32)> {
    messages
        .iter()
        .flat_map(|m| &m.blocks)
        .filter_map(|b| match b {
            BlockView::ToolUse { id, arguments, .. } => Some((id.clone(), appended_of(arguments))),
            _ => None,
        })
        .collect()
}

/// Runs [`four_appends`] with the server naming calls `ids`' way, in a
/// session of its own, and checks what a user would see.
fn four_appends_run_once_each(env: &TestEnv, fake: &FakeLlm, ids: CallIds) {
    fake.set_call_ids(ids);
    let before = fake.request_count();
    fake.push(four_appends());
    let dir = workdir(env, &format!("{ids:?}"));
    let id = new_session(env, &dir);

    let events = send(env, &id, "append four lines");
    assert!(done(&events), "{ids:?}: {events:#?}");
    // Each call the model made ran exactly once.
    assert_eq!(lines(&dir), ["1", "2", "3", "4"], "{ids:?}");
    let called: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::ToolCall { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    let finished: HashSet<&str> = events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::ToolResult { id, is_error, .. } => {
                assert!(!is_error, "{ids:?}: {events:#?}");
                Some(id.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(called.len(), 4, "{ids:?}: {events:#?}");
    assert_eq!(
        called.iter().copied().collect::<HashSet<_>>(),
        finished,
        "{ids:?}: each call's result event names it, and no other"
    );
    assert_eq!(finished.len(), 4, "{ids:?}: one id per call: {called:?}");

    // Every request sent back every earlier round, each result with its
    // own call; the last one all four.
    let requests = fake.requests();
    let rounds: Vec<Vec<u32>> = requests[before..].iter().map(paired_rounds).collect();
    assert_eq!(
        rounds,
        [vec![], vec![1], vec![1, 2, 3], vec![1, 2, 3, 4]],
        "{ids:?}"
    );
    fake.assert_protocol_ok();

    // The history keeps every round, one id per call, each answered.
    let (_, messages) = history(env, &id);
    let stored = stored_calls(&messages);
    assert_eq!(
        stored.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
        [1, 2, 3, 4],
        "{ids:?}"
    );
    let unique: HashSet<&str> = stored.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(unique.len(), 4, "{ids:?}: {stored:?}");
    assert_eq!(unique, finished, "{ids:?}: history and events agree");
    assert_every_call_answered(&messages);
    // And so does `flytoctl session_history`.
    let out = env.ctl(&["session_history", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for n in 1..=4 {
        assert!(
            out.stdout.contains(&format!("ok: appended {n}")),
            "{ids:?}: round {n} missing from the history:\n{}",
            out.stdout
        );
    }
    assert_eq!(out.stdout.matches("⏺ bash").count(), 4, "{}", out.stdout);
}

/// A server whose count restarts each response (`call_0` again in every
/// round), or that sends no id: every round runs once and stays.
#[test]
fn ids_restarting_each_response_or_missing_lose_no_round() {
    let fake = FakeLlm::start(vec![]);
    let env = TestEnv::new(&format!("{BASE}{}", fake.config()));
    let _daemon = start(&env);
    for ids in [CallIds::PerResponse, CallIds::Missing] {
        four_appends_run_once_each(&env, &fake, ids);
    }
}

/// A server that names every call `call_0`, parallel ones included, with
/// or without an index: each call is its own, runs once and is answered.
#[test]
fn parallel_calls_sharing_call_0_each_run_once() {
    let fake = FakeLlm::start(vec![]);
    let env = TestEnv::new(&format!("{BASE}{}", fake.config()));
    let _daemon = start(&env);
    for ids in [CallIds::AllCall0, CallIds::AllCall0NoIndex] {
        four_appends_run_once_each(&env, &fake, ids);
    }
}

fn call(id: &str, n: u32) -> Block {
    Block::ToolUse {
        id: id.into(),
        name: "bash".into(),
        arguments_json: append(n),
    }
}

fn result(id: &str, n: u32) -> Block {
    Block::ToolResult {
        call_id: id.into(),
        content: format!("appended {n}\n"),
        is_error: false,
    }
}

/// A transcript an older flytod stored against a server that reused
/// `call_0` (in every round, and for two parallel calls) loads, and the
/// next run sends the model every one of its rounds, paired.
#[test]
fn a_stored_transcript_with_repeated_ids_continues_with_every_round() {
    let fake = FakeLlm::start(vec![Reply::text("All three lines are there.")]);
    let env = TestEnv::new(&format!("{BASE}{}", fake.config()));
    let daemon = start(&env);
    let dir = workdir(&env, "old");
    let id = new_session(&env, &dir);
    daemon.terminate();

    {
        let store = flyto_actors::store::Store::open(&env.state.join("db"), 8 << 20)
            .expect("open flytod's store");
        let sessions = SledSessionStore::open(store.clone()).expect("the sessions tree");
        let number = flyto_actors::session::model::parse_id(&id).expect("a session id");
        let mut rec = sessions.get(number).unwrap().expect("the session");
        let old = vec![
            Message::user_text("append three lines"),
            Message {
                role: Role::Assistant,
                content: vec![call("call_0", 1)],
            },
            Message {
                role: Role::User,
                content: vec![result("call_0", 1)],
            },
            Message {
                role: Role::Assistant,
                content: vec![call("call_0", 2), call("call_0", 3)],
            },
            Message {
                role: Role::User,
                content: vec![result("call_0", 2), result("call_0", 3)],
            },
            Message::assistant_text("Appended three lines."),
        ];
        rec.next_idx += old.len() as u64;
        sessions
            .save(&rec, &old, false)
            .expect("store the old rounds");
        store.sync_blocking().expect("sync");
    }

    let _daemon = start(&env);
    let events = send(&env, &id, "are they all there?");
    assert!(done(&events), "{events:#?}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(paired_rounds(&requests[0]), [1, 2, 3]);
    fake.assert_protocol_ok();
    // The history shows every stored round and the new answer.
    let (_, messages) = history(&env, &id);
    assert_eq!(
        stored_calls(&messages)
            .iter()
            .map(|(_, n)| *n)
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert!(messages.iter().any(|m| {
        m.blocks
            .iter()
            .any(|b| matches!(b, BlockView::Text { text } if text.contains("All three lines")))
    }));
}

/// The Anthropic dialect: a server that reuses one `tool_use` id in every
/// round. Each round runs once and every later request sends each round
/// back with its own id, its result naming it.
#[test]
fn anthropic_tool_use_ids_reused_each_round_lose_no_round() {
    const KEY_ENV: &str = "FAKE_ANTHROPIC_KEY";
    const KEY: &str = "sk-ant-test-ids";
    let fake = FakeAnthropic::start(
        KEY,
        (1..=3)
            .map(|n| fake_anthropic::Reply::tool_use("toolu_0", "bash", append(n)))
            .chain([fake_anthropic::Reply::text("Three lines.")])
            .collect(),
    );
    let env = TestEnv::new(&format!("{BASE}{}", fake.config("claude", KEY_ENV)));
    let _daemon = start_with(&env, &[(KEY_ENV, KEY)]);
    let dir = workdir(&env, "claude");
    let id = new_session(&env, &dir);

    let events = send(&env, &id, "append three lines");
    assert!(done(&events), "{events:#?}");
    assert_eq!(lines(&dir), ["1", "2", "3"]);
    fake.assert_protocol_ok();
    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    let rounds: Vec<Vec<u32>> = requests
        .iter()
        .map(|body| {
            let mut calls: Vec<(String, u32)> = Vec::new();
            let mut answered = Vec::new();
            for block in body["messages"]
                .as_array()
                .expect("messages")
                .iter()
                .filter_map(|m| m["content"].as_array())
                .flatten()
            {
                match block["type"].as_str() {
                    Some("tool_use") => {
                        let id = block["id"].as_str().expect("id").to_string();
                        assert!(
                            calls.iter().all(|(c, _)| *c != id),
                            "tool_use id {id} is sent twice: {body:#}"
                        );
                        calls.push((id, appended_of(&block["input"].to_string())));
                    }
                    Some("tool_result") => {
                        let id = block["tool_use_id"].as_str().expect("tool_use_id");
                        let (_, n) = calls
                            .iter()
                            .find(|(c, _)| c == id)
                            .unwrap_or_else(|| panic!("result {id} names no call: {body:#}"));
                        assert!(
                            block["content"]
                                .to_string()
                                .contains(&format!("appended {n}")),
                            "the result of {id} is not its call's: {block:#}"
                        );
                        answered.push(*n);
                    }
                    _ => {}
                }
            }
            let made: Vec<u32> = calls.iter().map(|(_, n)| *n).collect();
            assert_eq!(answered, made);
            made
        })
        .collect();
    assert_eq!(rounds, [vec![], vec![1], vec![1, 2], vec![1, 2, 3]]);
    let (_, messages) = history(&env, &id);
    let stored = stored_calls(&messages);
    let unique: HashSet<&str> = stored.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!((stored.len(), unique.len()), (3, 3), "{stored:?}");
    assert_every_call_answered(&messages);
}

/// After `session_reset --hard` the model's window is empty, but the
/// history still holds the earlier `call_0`: the next run's `call_0` gets
/// an id of its own all the same.
#[test]
fn ids_stay_unique_in_the_history_across_a_reset() {
    let fake = FakeLlm::start(vec![
        Reply::tool_call("call_a", "bash", append(1)),
        Reply::text("One."),
        Reply::tool_call("call_b", "bash", append(2)),
        Reply::text("Two."),
    ]);
    fake.set_call_ids(CallIds::AllCall0);
    let env = TestEnv::new(&format!("{BASE}{}", fake.config()));
    let _daemon = start(&env);
    let dir = workdir(&env, "reset");
    let id = new_session(&env, &dir);
    assert!(done(&send(&env, &id, "append one line")));
    let out = env.ctl(&["session_reset", &id, "--hard"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(done(&send(&env, &id, "append another")));

    assert_eq!(lines(&dir), ["1", "2"]);
    let (_, messages) = history(&env, &id);
    let stored = stored_calls(&messages);
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert_ne!(stored[0].0, stored[1].0, "{stored:?}");
    assert_every_call_answered(&messages);
    fake.assert_protocol_ok();
}
