//! A Telegram binding through the real daemon and CLI, against the
//! scripted fake Bot API and a scripted LLM: pairing of strangers, one
//! turn and one reply per message across SIGKILL at each point of its way,
//! long replies in chunks, every error class as a user would notice it,
//! per-chat isolation and order, the chat commands, and the bot token kept
//! out of every log, listing, error and transcript. It drives flytod and
//! flytoctl only; the room's code it may not touch.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_llm::{FakeLlm, Reply};
use flyto_tests::fake_telegram::FakeTelegram;
use flyto_tests::{Backend, DEADLINE, Daemon, TestEnv, wait_until};
use serde_json::Value;
use std::time::{Duration, Instant};

const TOKEN: &str = "4242:TEST-secret-bot-token";
/// The secret part of every token these tests use.
const SECRET: &str = "TEST-secret";
/// The admitted users, each in a private chat of the same id.
const ANN: i64 = 7;
const BOB: i64 = 8;
const POLL: Duration = Duration::from_secs(1);
const STALL_GRACE: Duration = Duration::from_secs(2);

/// One installation: the fakes at its network edge, and its config.
struct Rig {
    llm: FakeLlm,
    tg: FakeTelegram,
    env: TestEnv,
}

/// `extra` is more config, after `[channels.allow]`.
fn rig(script: Vec<Reply>, extra: &str) -> Rig {
    rig_on(Backend::Sled, script, extra)
}

fn rig_on(backend: Backend, script: Vec<Reply>, extra: &str) -> Rig {
    let llm = FakeLlm::start(script);
    let tg = FakeTelegram::start(TOKEN);
    let env = TestEnv::on(
        backend,
        &format!(
            "{}\n[channels]\npoll_timeout = \"1s\"\nstall_grace = \"2s\"\n[channels.allow]\ntelegram = [\"{ANN}\", \"{BOB}\"]\n{extra}",
            llm.config()
        ),
    );
    Rig { llm, tg, env }
}

fn ok(env: &TestEnv, args: &[&str]) -> String {
    let out = env.ctl(args);
    assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
    no_secret("flytoctl's output", &out.stdout);
    no_secret("flytoctl's errors", &out.stderr);
    out.stdout
}

fn no_secret(what: &str, text: &str) {
    assert!(
        !text.contains(SECRET),
        "the bot token is in {what}:\n{text}"
    );
}

/// Binds `name` to the fake at `tg` with `token`, passed as flytoctl is
/// told to take it: from an environment variable.
pub(crate) fn bind(env: &TestEnv, tg: &FakeTelegram, token: &str, name: &str) {
    let base = tg.api_base();
    let out = env.ctl_with(
        &[
            "channel_bind",
            "telegram",
            "--token-env",
            "FLYTO_TEST_TG_TOKEN",
            "--api-base",
            &base,
            "--name",
            name,
        ],
        &[("FLYTO_TEST_TG_TOKEN", token)],
        None,
    );
    assert_eq!(out.code, 0, "channel_bind: {}", out.stderr);
    no_secret(
        "channel_bind's answer",
        &format!("{}{}", out.stdout, out.stderr),
    );
}

fn list(env: &TestEnv) -> Value {
    let text = ok(env, &["channel_list", "--json"]);
    serde_json::from_str(&text).unwrap()
}

/// The binding `name` as `channel_list` shows it.
fn channel(env: &TestEnv, name: &str) -> Value {
    let l = list(env);
    l["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no binding {name} in {l}"))
}

impl Rig {
    fn bind(&self) {
        bind(&self.env, &self.tg, TOKEN, "telegram");
    }

    fn start_bound(&self) -> Daemon {
        let daemon = self.env.start();
        self.bind();
        daemon
    }

    /// What the bot sent to `chat`, in order.
    fn texts(&self, chat: i64) -> Vec<String> {
        let id = chat.to_string();
        self.tg
            .sent()
            .into_iter()
            .filter(|m| m.chat_id == id)
            .map(|m| m.text)
            .collect()
    }

    /// Waits until the bot sent `n` messages to `chat`; answers them all.
    fn wait_texts(&self, chat: i64, n: usize) -> Vec<String> {
        self.tg
            .wait(&format!("{n} messages to chat {chat}"), DEADLINE, |_| {
                self.texts(chat).len() >= n
            });
        self.texts(chat)
    }

    fn say(&self, text: &str) -> i64 {
        self.tg.push_message(ANN, ANN, "ann", text)
    }
}

/// The sessions whose name starts `chat telegram <chat>`, as (name, id).
fn chat_sessions(env: &TestEnv, chat: i64) -> Vec<(String, String)> {
    let prefix = format!("chat telegram {chat}");
    let sessions: Value = serde_json::from_str(&ok(env, &["session_list", "--json"])).unwrap();
    let mut found: Vec<(String, String)> = sessions
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| {
            let name = s["name"].as_str()?;
            let id = s["id"].as_str()?;
            (name == prefix || name.starts_with(&format!("{prefix} #")))
                .then(|| (name.to_string(), id.to_string()))
        })
        .collect();
    found.sort();
    found
}

/// The user messages a session holds, in order.
fn prompts(env: &TestEnv, id: &str) -> Vec<String> {
    let h: Value = serde_json::from_str(&ok(env, &["session_history", id, "--json"])).unwrap();
    h["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["blocks"][0]["text"]["text"].as_str().map(str::to_string))
        .collect()
}

// The room keeps its promises on the shared store too.
on_both_backends!(
    a_stranger_gets_one_pairing_code_and_no_turn_until_admitted,
    a_crash_on_the_way_in_gives_one_turn_and_one_reply,
    a_crash_around_the_turn_gives_one_turn_and_one_reply,
    a_crash_around_the_send_never_sends_a_reply_twice,
);

fn a_stranger_gets_one_pairing_code_and_no_turn_until_admitted(backend: Backend) {
    const EVE: i64 = 99;
    let r = rig_on(
        backend,
        vec![
            Reply::text("hello ann"),
            Reply::text("welcome eve"),
            Reply::text("spare"),
        ],
        "",
    );
    let _daemon = r.start_bound();
    r.tg.push_message(EVE, EVE, "eve", "let me in");
    let first = r.wait_texts(EVE, 1);
    let code = first[0]
        .split_whitespace()
        .last()
        .unwrap()
        .trim_end_matches('.')
        .to_string();
    assert!(first[0].contains("flytoctl channel_pair"), "{first:?}");
    assert_eq!(code.len(), 8, "{first:?}");
    assert_eq!(r.llm.request_count(), 0, "a stranger reached the model");

    // Their second message gets nothing; the admitted user, writing after
    // it, is answered at once, without pairing.
    r.tg.push_message(EVE, EVE, "eve", "hello??");
    r.say("hi");
    assert_eq!(r.wait_texts(ANN, 1), ["hello ann"]);
    assert_eq!(r.texts(EVE).len(), 1, "{:?}", r.texts(EVE));
    assert_eq!(r.llm.request_count(), 1);
    let l = list(&r.env);
    let pairings = l["pairings"].as_array().unwrap();
    assert_eq!(pairings.len(), 1, "{l}");
    assert_eq!(pairings[0]["code"], code.as_str());
    assert_eq!(pairings[0]["binding"], "telegram");
    assert_eq!(pairings[0]["user"], EVE.to_string());
    assert_eq!(pairings[0]["user_name"], "eve");
    assert!(chat_sessions(&r.env, EVE).is_empty());

    let said = ok(&r.env, &["channel_pair", &code]);
    assert!(said.contains("admitted"), "{said}");
    let admitted = r.wait_texts(EVE, 2);
    assert!(admitted[1].contains("admitted"), "{admitted:?}");
    assert!(
        list(&r.env)["pairings"].as_array().unwrap().is_empty(),
        "the request stayed pending"
    );
    r.tg.push_message(EVE, EVE, "eve", "now?");
    assert_eq!(r.wait_texts(EVE, 3)[2], "welcome eve");
    // What they wrote before being admitted reached no session.
    let sessions = chat_sessions(&r.env, EVE);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(prompts(&r.env, &sessions[0].1), ["now?"]);
    let all: Value = serde_json::from_str(&ok(&r.env, &["session_list", "--json"])).unwrap();
    for s in all.as_array().unwrap() {
        let said = prompts(&r.env, s["id"].as_str().unwrap());
        assert!(
            !said.iter().any(|p| p == "let me in" || p == "hello??"),
            "a stranger's message is in session {}: {said:?}",
            s["name"]
        );
    }
    assert_eq!(r.llm.request_count(), 2);
}

/// Kills flytod at `point` while it handles one message, pushes another
/// while it is down, restarts it: one turn per message, each answer sent
/// once (a chunk that may have been sent when it died is given up, not
/// sent again).
fn crash_at(backend: Backend, point: &str) {
    let r = rig_on(
        backend,
        vec![
            Reply::text("the answer"),
            Reply::text("second answer"),
            Reply::text("spare"),
        ],
        "",
    );
    r.start_bound().kill9();
    let mut daemon = r.env.try_start(&[("FLYTO_TEST_CRASH_AT", point)]).unwrap();
    r.say("only once");
    daemon.wait_exit(DEADLINE);
    r.say("while down");
    let _daemon = r.env.start();
    let texts = r.wait_texts(ANN, 2);
    wait_until(&format!("{point}: both messages done"), DEADLINE, || {
        let c = channel(&r.env, "telegram");
        (c["queued"] == 0 && c["outbox_pending"] == 0).then_some(())
    });
    assert_eq!(texts, ["the answer", "second answer"], "{point}");
    assert_eq!(r.texts(ANN), texts, "{point}: a reply was sent twice");
    let sessions = chat_sessions(&r.env, ANN);
    assert_eq!(sessions.len(), 1, "{point}: {sessions:?}");
    assert_eq!(
        prompts(&r.env, &sessions[0].1),
        ["only once", "while down"],
        "{point}"
    );
    assert_eq!(
        r.llm.request_count(),
        2,
        "{point}: the model was called again"
    );
    let dropped = if point == "channel-after-send" { 1 } else { 0 };
    assert_eq!(channel(&r.env, "telegram")["dropped"], dropped, "{point}");
}

fn a_crash_on_the_way_in_gives_one_turn_and_one_reply(backend: Backend) {
    for point in [
        "channel-after-receive",
        "channel-after-journal",
        "channel-after-ack",
    ] {
        crash_at(backend, point);
    }
}

fn a_crash_around_the_turn_gives_one_turn_and_one_reply(backend: Backend) {
    for point in ["channel-turn-started", "channel-turn-answered"] {
        crash_at(backend, point);
    }
}

fn a_crash_around_the_send_never_sends_a_reply_twice(backend: Backend) {
    for point in ["channel-before-send", "channel-after-send"] {
        crash_at(backend, point);
    }
}

#[test]
fn a_long_reply_arrives_in_ordered_chunks_within_telegrams_limit() {
    let unit = "你好，世界😀 mixed text ✨ 🚀。\n";
    let reply: String = unit.repeat(10_000 / unit.encode_utf16().count() + 1);
    assert!(reply.encode_utf16().count() >= 10_000);
    let r = rig(vec![Reply::text(&reply)], "");
    let _daemon = r.start_bound();
    r.say("write a lot");
    r.tg.wait("the whole reply", DEADLINE, |_| {
        r.texts(ANN).concat().len() >= reply.trim_end().len()
    });
    let chunks = r.texts(ANN);
    assert!(chunks.len() >= 3, "{} chunks", chunks.len());
    for (i, c) in chunks.iter().enumerate() {
        let units = c.encode_utf16().count();
        assert!(units <= 4096, "chunk {i} has {units} UTF-16 units");
    }
    assert_eq!(chunks.concat().trim_end(), reply.trim_end());
    assert_eq!(r.llm.request_count(), 1);
}

#[test]
fn a_wrong_token_stops_polling_with_auth_failed() {
    let r = rig(vec![Reply::text("from the good one")], "");
    let good = FakeTelegram::start("777:TEST-secret-other");
    let _daemon = r.env.start();
    bind(&r.env, &r.tg, "4242:TEST-secret-wrong", "bad");
    let c = wait_until("the binding to fail", DEADLINE, || {
        let c = channel(&r.env, "bad");
        (c["state"] == "auth_failed").then_some(c)
    });
    let why = c["last_error"].as_str().unwrap();
    assert!(why.contains("token"), "{c}");
    let polls = r.tg.calls("getUpdates");
    assert_eq!(polls, 1, "it polled again after the token was refused");
    // Several poll periods of another binding later, it still has not.
    bind(&r.env, &good, "777:TEST-secret-other", "good");
    let start = good.calls("getUpdates");
    good.wait("three polls of the good binding", DEADLINE, |t| {
        t.calls("getUpdates") >= start + 3
    });
    assert_eq!(
        r.tg.calls("getUpdates"),
        polls,
        "a retry loop on a refused token"
    );
    assert_eq!(channel(&r.env, "bad")["state"], "auth_failed");
}

#[test]
fn a_rate_limited_chunk_is_sent_once_after_the_wait() {
    let r = rig(vec![Reply::text("patience"), Reply::text("bob's turn")], "");
    let _daemon = r.start_bound();
    r.tg.fail_next(
        "sendMessage",
        429,
        "Too Many Requests: retry after 2",
        Some(2),
    );
    r.say("hi");
    r.tg.wait("the refused send", DEADLINE, |t| {
        t.calls("sendMessage") >= 1
    });
    let refused = Instant::now();
    // Another chat's reply, ready during the wait, does not cut it short.
    r.tg.push_message(BOB, BOB, "bob", "me too");
    assert_eq!(r.wait_texts(ANN, 1), ["patience"]);
    let waited = refused.elapsed();
    assert!(
        waited >= Duration::from_millis(1900),
        "sent {waited:?} after a 429 saying retry after 2 s"
    );
    assert_eq!(r.wait_texts(BOB, 1), ["bob's turn"]);
    wait_until("the chunks recorded sent", DEADLINE, || {
        (channel(&r.env, "telegram")["sent"] == 2).then_some(())
    });
    assert_eq!(
        r.tg.calls("sendMessage"),
        3,
        "a chunk was sent during the wait"
    );
    let order: Vec<String> = r.tg.sent().into_iter().map(|m| m.text).collect();
    assert_eq!(order, ["patience", "bob's turn"]);
}

#[test]
fn a_webhook_is_deleted_once_keeping_pending_updates_then_messages_flow() {
    let r = rig(vec![Reply::text("polled fine")], "");
    r.tg.webhook_set(true);
    // Written while the webhook was set: kept, and answered.
    r.say("sent while the webhook was set");
    let _daemon = r.start_bound();
    assert_eq!(r.wait_texts(ANN, 1), ["polled fine"]);
    assert_eq!(r.tg.webhook_deletes(), [false]);
    assert_eq!(r.tg.calls("deleteWebhook"), 1);
    assert!(!r.tg.webhook_active());
}

#[test]
fn a_blocked_bot_drops_the_chunk_and_a_new_message_opens_the_chat_again() {
    let r = rig(vec![Reply::text("not seen"), Reply::text("seen")], "");
    let _daemon = r.start_bound();
    r.tg.fail_next(
        "sendMessage",
        403,
        "Forbidden: bot was blocked by the user",
        None,
    );
    r.say("hi");
    let c = wait_until("the chunk dropped", DEADLINE, || {
        let c = channel(&r.env, "telegram");
        (c["dropped"] == 1).then_some(c)
    });
    assert_eq!(c["sent"], 0, "{c}");
    assert_eq!(c["outbox_pending"], 0, "{c}");
    assert!(r.texts(ANN).is_empty());
    assert_eq!(
        r.tg.calls("sendMessage"),
        1,
        "a closed chat was sent to again"
    );
    // The user unblocked the bot and writes again: that is answered.
    r.say("I unblocked you");
    assert_eq!(r.wait_texts(ANN, 1), ["seen"]);
}

#[test]
fn a_hung_poll_is_abandoned_while_sends_keep_working() {
    let r = rig(
        vec![
            Reply::text("held answer").held("gate"),
            Reply::text("after the stall"),
        ],
        "",
    );
    let _daemon = r.start_bound();
    r.say("first");
    r.llm.wait_requests(1, DEADLINE);
    r.tg.hang_next_get_updates();
    r.tg.wait("a hung poll", DEADLINE, |t| t.hung() == 1);
    let polls = r.tg.calls("getUpdates");
    r.llm.release("gate");
    assert_eq!(r.wait_texts(ANN, 1), ["held answer"]);
    assert_eq!(
        r.tg.calls("getUpdates"),
        polls,
        "the reply waited for the hung poll to be given up"
    );
    r.say("second");
    let c = wait_until("the stall shown", DEADLINE, || {
        let c = channel(&r.env, "telegram");
        c["last_error"].is_string().then_some(c)
    });
    no_secret("the stall's error", &c.to_string());
    // Given up by the health check (its timeout plus the grace), not left
    // to the HTTP client's longer deadline: the poll after it delivers.
    let why = c["last_error"].as_str().unwrap_or_default();
    assert!(
        why.contains(&format!(
            "no completed poll within {}s",
            (POLL + STALL_GRACE).as_secs()
        )),
        "{why}"
    );
    assert_eq!(r.wait_texts(ANN, 2)[1], "after the stall");
    assert_eq!(channel(&r.env, "telegram")["state"], "ok");
}

#[test]
fn a_markup_refusal_is_resent_once_as_plain_text() {
    let r = rig(
        vec![Reply::text("one."), Reply::text("two")],
        "[channels.telegram]\nparse_mode = \"MarkdownV2\"\n",
    );
    let _daemon = r.start_bound();
    r.tg.fail_next(
        "sendMessage",
        400,
        "Bad Request: can't parse entities: Character '.' is reserved and must be escaped with the preceding '\\'",
        None,
    );
    r.say("hi");
    r.wait_texts(ANN, 1);
    r.say("again");
    r.wait_texts(ANN, 2);
    let sent = r.tg.sent();
    assert_eq!(sent[0].text, "one.");
    assert_eq!(sent[0].parse_mode, None, "the resend kept the markup");
    // The refusal was of MarkdownV2: the next reply is sent with it.
    assert_eq!(sent[1].text, "two");
    assert_eq!(sent[1].parse_mode.as_deref(), Some("MarkdownV2"));
    assert_eq!(r.tg.calls("sendMessage"), 3);
}

#[test]
fn a_held_turn_in_one_chat_does_not_delay_another_and_its_chat_waits() {
    let r = rig(
        vec![
            Reply::text("a1").held("gate"),
            Reply::text("b1"),
            Reply::text("a2"),
        ],
        "",
    );
    let _daemon = r.start_bound();
    r.say("a-one");
    r.llm.wait_requests(1, DEADLINE);
    // While the turn runs, the user sees "typing…".
    r.tg.wait("typing in chat A", DEADLINE, |t| {
        t.actions()
            .contains(&(ANN.to_string(), "typing".to_string()))
    });
    r.tg.push_message(BOB, BOB, "bob", "b-one");
    assert_eq!(r.wait_texts(BOB, 1), ["b1"]);
    r.say("a-two");
    wait_until("a-two queued behind a-one", DEADLINE, || {
        (channel(&r.env, "telegram")["queued"] == 2).then_some(())
    });
    assert_eq!(r.llm.request_count(), 2, "a-two started beside a-one");
    assert!(r.texts(ANN).is_empty());
    r.llm.release("gate");
    assert_eq!(r.wait_texts(ANN, 2), ["a1", "a2"]);
    let sessions = chat_sessions(&r.env, ANN);
    assert_eq!(prompts(&r.env, &sessions[0].1), ["a-one", "a-two"]);
}

#[test]
fn status_and_new_are_answered_without_the_model_and_channel_test_reports_the_id() {
    let r = rig(vec![Reply::text("first"), Reply::text("fresh")], "");
    let _daemon = r.start_bound();
    r.say("/status");
    assert!(
        r.wait_texts(ANN, 1)[0].starts_with("No conversation yet"),
        "{:?}",
        r.texts(ANN)
    );
    assert_eq!(r.llm.request_count(), 0);
    r.say("pineapple");
    assert_eq!(r.wait_texts(ANN, 2)[1], "first");
    r.say("/status");
    let status = r.wait_texts(ANN, 3)[2].clone();
    let first = chat_sessions(&r.env, ANN);
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(status.contains(&first[0].1), "{status}");
    r.say("/new");
    assert!(
        r.wait_texts(ANN, 4)[3].contains("new conversation"),
        "{:?}",
        r.texts(ANN)
    );
    r.say("who are you");
    assert_eq!(r.wait_texts(ANN, 5)[4], "fresh");
    assert_eq!(r.llm.request_count(), 2);
    let sessions = chat_sessions(&r.env, ANN);
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    assert_eq!(prompts(&r.env, &sessions[0].1), ["pineapple"]);
    assert_eq!(prompts(&r.env, &sessions[1].1), ["who are you"]);
    // The fresh session's model saw only the new message.
    let last = r.llm.requests().pop().unwrap();
    assert!(!last.to_string().contains("pineapple"), "{last}");

    let said = ok(&r.env, &["channel_test", &format!("telegram:{ANN}")]);
    let id: u64 = said
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no message id in {said:?}"));
    // The fake numbers pushed and sent messages alike: five of each came
    // before, so the platform's id for the test message is the 11th.
    assert_eq!(id, 11, "{said}");
    let texts = r.wait_texts(ANN, 6);
    assert!(texts[5].contains("test message"), "{texts:?}");
}

#[test]
fn the_bot_token_is_in_no_log_listing_error_or_transcript() {
    let r = rig(vec![Reply::text("all clear")], "");
    let daemon = r.env.try_start(&[("RUST_LOG", "debug")]).unwrap();
    r.bind();
    bind(&r.env, &r.tg, "4242:TEST-secret-wrong", "bad");
    r.tg.fail_next("sendMessage", 500, "Internal Server Error", None);
    r.say("hi");
    assert_eq!(r.wait_texts(ANN, 1), ["all clear"]);
    wait_until("the wrong token refused", DEADLINE, || {
        (channel(&r.env, "bad")["state"] == "auth_failed").then_some(())
    });
    // Errors of a send refused, through the CLI.
    r.tg.fail_next(
        "sendMessage",
        403,
        "Forbidden: bot was blocked by the user",
        None,
    );
    let out = r.env.ctl(&["channel_test", &format!("telegram:{ANN}")]);
    assert_ne!(out.code, 0, "{out:?}");
    no_secret("channel_test's error", &out.stderr);
    let out = r.env.ctl(&["channel_test", "bad:1"]);
    assert_ne!(out.code, 0, "{out:?}");
    no_secret("channel_test's error", &out.stderr);
    no_secret("channel_list", &list(&r.env).to_string());
    let text = ok(&r.env, &["channel_list"]);
    no_secret("channel_list", &text);
    let sessions = chat_sessions(&r.env, ANN);
    let h = ok(&r.env, &["session_history", &sessions[0].1, "--json"]);
    no_secret("the transcript", &h);
    let log = daemon.log();
    assert!(
        log.contains("Telegram"),
        "the log has no channel lines:\n{log}"
    );
    no_secret("flytod's log", &log);
    for req in r.llm.requests() {
        no_secret("a model request", &req.to_string());
    }
}

#[test]
fn an_offset_unused_for_over_a_week_is_not_reused() {
    let r = rig(vec![Reply::text("first"), Reply::text("a week later")], "");
    let daemon = r.start_bound();
    r.say("hello");
    assert_eq!(r.wait_texts(ANN, 1), ["first"]);
    // The journaled offset is in use while flytod polls.
    r.tg.wait("a poll with the offset", DEADLINE, |t| {
        t.offsets().last().is_some_and(Option::is_some)
    });
    daemon.kill9();
    // Eight days later (Telegram may have restarted its update ids): the
    // first poll carries no offset, and messages still flow.
    let polls = r.tg.offsets().len();
    let later = (8 * 86_400_000_i64).to_string();
    let _daemon = r
        .env
        .try_start(&[("FLYTO_CLOCK_OFFSET_MS", later.as_str())])
        .unwrap();
    r.tg.wait("a poll after the restart", DEADLINE, |t| {
        t.offsets().len() > polls
    });
    assert_eq!(r.tg.offsets()[polls], None, "{:?}", r.tg.offsets());
    r.say("are you there?");
    assert_eq!(r.wait_texts(ANN, 2), ["first", "a week later"]);
}

#[test]
fn a_group_that_became_a_supergroup_keeps_its_session() {
    let r = rig(
        vec![
            Reply::text("in the group"),
            Reply::text("in the supergroup"),
        ],
        "",
    );
    let _daemon = r.start_bound();
    let (group, supergroup) = (-100_i64, -1_000_000_100_i64);
    r.tg.push_message(group, ANN, "ann", "remember me");
    r.tg.wait("the group's answer", DEADLINE, |t| {
        t.sent().iter().any(|m| m.chat_id == group.to_string())
    });
    r.tg.push_update(|update_id, message_id| {
        serde_json::json!({"update_id": update_id, "message": {
            "message_id": message_id, "date": 0,
            "chat": {"id": group, "type": "group"},
            "from": {"id": ANN, "is_bot": false, "first_name": "ann"},
            "migrate_to_chat_id": supergroup,
        }})
    });
    r.tg.push_message(supergroup, ANN, "ann", "still me?");
    r.tg.wait("the supergroup's answer", DEADLINE, |t| {
        t.sent().iter().any(|m| m.chat_id == supergroup.to_string())
    });
    // One session across the move: its history has both messages.
    let sessions = chat_sessions(&r.env, group);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(
        prompts(&r.env, &sessions[0].1),
        ["remember me", "still me?"]
    );
    assert!(chat_sessions(&r.env, supergroup).is_empty());
}
