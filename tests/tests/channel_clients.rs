//! The chat platform clients against their fake servers: the Telegram
//! platform over `flyto_tests::fake_telegram` — polling and acknowledging,
//! every error class, a hung long poll, reset, chunked sends — with the
//! bot token kept out of every error.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_actors::channels::telegram::TelegramPlatform;
use flyto_actors::channels::{OutChunk, Platform, PlatformError};
use flyto_tests::DEADLINE;
use flyto_tests::fake_telegram::{Failure, FakeTelegram};
use std::time::{Duration, Instant};

const TOKEN: &str = "4242:TEST-secret-bot-token";

fn platform(
    tg: &FakeTelegram,
    poll_timeout: Duration,
    parse_mode: Option<&str>,
) -> TelegramPlatform {
    TelegramPlatform::new(
        TOKEN.into(),
        Some(tg.api_base()),
        poll_timeout,
        parse_mode.map(str::to_string),
    )
    .expect("telegram platform")
}

fn chunk(text: &str, plain: bool) -> OutChunk {
    OutChunk {
        id: "s/1/0".into(),
        text: text.into(),
        index: 0,
        last: true,
        plain,
        context_token: None,
        reply_to: None,
    }
}

/// A send of "x" to chat 42 after scripting its failure.
async fn failed_send(
    tg: &FakeTelegram,
    p: &TelegramPlatform,
    status: u16,
    description: &str,
    retry_after: Option<u64>,
) -> PlatformError {
    tg.fail_next("sendMessage", status, description, retry_after);
    no_token(p.send("42", &chunk("x", false)).await)
}

/// The error, checked to keep the token out of its text and its Debug.
fn no_token<T: std::fmt::Debug>(r: Result<T, PlatformError>) -> PlatformError {
    let e = r.expect_err("the call should fail");
    for text in [e.to_string(), format!("{e:?}")] {
        assert!(!text.contains("TEST-secret"), "the token leaked: {text}");
    }
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_returns_pushed_messages_and_the_cursor_acknowledges_them() {
    let tg = FakeTelegram::start(TOKEN);
    let p = platform(&tg, Duration::from_secs(1), None);
    let empty = p.poll(None).await.expect("empty poll");
    assert!(empty.updates.is_empty());
    assert_eq!(empty.cursor, None);

    let a = tg.push_message(42, 7, "ann", "hello");
    let b = tg.push_message(-100, 8, "bob", "你好 😀");
    let polled = p.poll(None).await.expect("poll");
    let got: Vec<_> = polled
        .updates
        .iter()
        .map(|u| {
            (
                u.update_id.clone(),
                u.chat.as_str(),
                u.user.as_str(),
                u.user_name.as_str(),
                u.text.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (a.to_string(), "42", "7", "ann", "hello"),
            (b.to_string(), "-100", "8", "bob", "你好 😀"),
        ]
    );
    assert!(!polled.updates[0].message_id.is_empty());
    let cursor = polled.cursor.expect("a cursor");
    assert_eq!(cursor, (b + 1).to_string());

    // Acknowledged: they never come again, and a long poll waits for news.
    let again = p.poll(Some(&cursor)).await.expect("acknowledging poll");
    assert!(again.updates.is_empty(), "{again:?}");
    assert_eq!(tg.pending(), 0);
    let waiting = tokio::spawn({
        let cursor = cursor.clone();
        let p = platform(&tg, Duration::from_secs(20), None);
        async move { p.poll(Some(&cursor)).await }
    });
    let before = tg.calls("getUpdates");
    tg.wait("the long poll to arrive", DEADLINE, |t| {
        t.calls("getUpdates") > before
    });
    let started = Instant::now();
    let c = tg.push_message(42, 7, "ann", "later");
    let late = waiting.await.expect("join").expect("long poll");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the poll did not wake on a push"
    );
    assert_eq!(late.updates.len(), 1);
    assert_eq!(late.updates[0].update_id, c.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_without_text_advance_the_cursor_and_migrations_come_through() {
    let tg = FakeTelegram::start(TOKEN);
    let p = platform(&tg, Duration::from_secs(1), None);
    tg.push_update(|u, m| {
        serde_json::json!({"update_id": u, "message": {"message_id": m, "chat": {"id": 5}, "from": {"id": 5}, "sticker": {}}})
    });
    let polled = p.poll(None).await.expect("poll");
    assert!(polled.updates.is_empty());
    let cursor = polled.cursor.expect("the sticker still moves the cursor");
    let m = tg.push_update(|u, m| {
        serde_json::json!({"update_id": u, "message": {"message_id": m, "chat": {"id": -5}, "from": {"id": 5}, "migrate_to_chat_id": -1005}})
    });
    let polled = p.poll(Some(&cursor)).await.expect("poll");
    assert_eq!(polled.updates.len(), 1);
    assert_eq!(polled.updates[0].update_id, m.to_string());
    assert_eq!(polled.updates[0].chat, "-5");
    assert_eq!(polled.updates[0].migrate_to.as_deref(), Some("-1005"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_revoked_token_is_an_auth_failure() {
    let tg = FakeTelegram::start("1:another-token");
    let p = platform(&tg, Duration::from_secs(1), None);
    assert!(matches!(
        no_token(p.poll(None).await),
        PlatformError::Auth(_)
    ));
    assert!(matches!(
        no_token(p.send("42", &chunk("x", true)).await),
        PlatformError::Auth(_)
    ));
    let tg = FakeTelegram::start(TOKEN);
    let p = platform(&tg, Duration::from_secs(1), None);
    tg.fail_next("getUpdates", 404, "Not Found", None);
    assert!(matches!(
        no_token(p.poll(None).await),
        PlatformError::Auth(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_errors_fall_into_their_classes() {
    let tg = FakeTelegram::start(TOKEN);
    let p = platform(&tg, Duration::from_secs(1), Some("MarkdownV2"));
    assert!(matches!(
        failed_send(&tg, &p, 403, "Forbidden: bot was blocked by the user", None).await,
        PlatformError::ChatClosed(_)
    ));
    assert_eq!(
        failed_send(&tg, &p, 429, "Too Many Requests: retry after 17", Some(17)).await,
        PlatformError::RateLimited {
            retry_after: Duration::from_secs(17)
        }
    );
    assert!(matches!(
        failed_send(
            &tg,
            &p,
            400,
            "Bad Request: can't parse entities: Character '.' is reserved and must be escaped",
            None
        )
        .await,
        PlatformError::Markup(_)
    ));
    tg.fail_next_with(
        "sendMessage",
        Failure {
            migrate_to_chat_id: Some(-100777),
            ..Failure::new(
                400,
                "Bad Request: group chat was upgraded to a supergroup chat",
            )
        },
    );
    match no_token(p.send("-5", &chunk("x", false)).await) {
        PlatformError::Rejected(text) => assert!(text.contains("-100777"), "{text}"),
        other => panic!("a migrated chat is a rejection, got {other:?}"),
    }
    assert!(matches!(
        failed_send(&tg, &p, 400, "Bad Request: chat not found", None).await,
        PlatformError::Rejected(_)
    ));
    assert!(matches!(
        failed_send(&tg, &p, 500, "Internal Server Error", None).await,
        PlatformError::Transient(_)
    ));
    tg.fail_next_with(
        "sendMessage",
        Failure {
            raw_body: Some("<html>Bad Gateway</html>".into()),
            ..Failure::new(502, "")
        },
    );
    assert!(matches!(
        no_token(p.send("42", &chunk("x", false)).await),
        PlatformError::Transient(_)
    ));
    assert!(tg.sent().is_empty(), "{:?}", tg.sent());

    // parse_mode goes along only for chunks that are not plain.
    p.send("42", &chunk("*bold*", false)).await.expect("send");
    p.send("42", &chunk("*plain*", true))
        .await
        .expect("send plain");
    let modes: Vec<_> = tg.sent().into_iter().map(|m| m.parse_mode).collect();
    assert_eq!(modes, vec![Some("MarkdownV2".to_string()), None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_errors_fall_into_their_classes() {
    let tg = FakeTelegram::start(TOKEN);
    let p = platform(&tg, Duration::from_secs(1), None);
    tg.fail_next("getUpdates", 409, "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running", None);
    assert!(matches!(
        no_token(p.poll(None).await),
        PlatformError::Conflict(_)
    ));
    assert!(
        tg.webhook_deletes().is_empty(),
        "a plain conflict deletes no webhook"
    );
    tg.fail_next(
        "getUpdates",
        429,
        "Too Many Requests: retry after 3",
        Some(3),
    );
    assert_eq!(
        no_token(p.poll(None).await),
        PlatformError::RateLimited {
            retry_after: Duration::from_secs(3)
        }
    );
    tg.fail_next("getUpdates", 503, "Service Unavailable", None);
    assert!(matches!(
        no_token(p.poll(None).await),
        PlatformError::Transient(_)
    ));
    // Nothing listens here any more: connection refused.
    let base = tg.api_base();
    drop(tg);
    let gone =
        TelegramPlatform::new(TOKEN.into(), Some(base), Duration::from_secs(1), None).unwrap();
    assert!(matches!(
        no_token(gone.poll(None).await),
        PlatformError::Transient(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_is_deleted_once_without_dropping_updates() {
    let tg = FakeTelegram::start(TOKEN);
    let p = platform(&tg, Duration::from_secs(1), None);
    let id = tg.push_message(42, 7, "ann", "kept");
    tg.webhook_set(true);
    let polled = p.poll(None).await.expect("poll after deleting the webhook");
    assert_eq!(tg.webhook_deletes(), vec![false]);
    assert_eq!(polled.updates.len(), 1);
    assert_eq!(polled.updates[0].update_id, id.to_string());

    // Someone sets it again: this instance does not fight over it.
    tg.webhook_set(true);
    assert!(matches!(
        no_token(p.poll(polled.cursor.as_deref()).await),
        PlatformError::Conflict(_)
    ));
    assert_eq!(tg.webhook_deletes().len(), 1);
    assert_eq!(tg.calls("deleteWebhook"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_poll_fails_transient_by_its_deadline_while_sends_go_on() {
    let tg = FakeTelegram::start(TOKEN);
    let p = std::sync::Arc::new(platform(&tg, Duration::from_secs(1), None));
    tg.hang_next_get_updates();
    let started = Instant::now();
    let poll = tokio::spawn({
        let p = p.clone();
        async move { p.poll(None).await }
    });
    tg.wait("the poll to hang", DEADLINE, |t| t.hung() == 1);
    p.send("42", &chunk("while polling", true))
        .await
        .expect("send during a hung poll");
    p.typing("42").await.expect("typing during a hung poll");
    assert_eq!(tg.sent().len(), 1);
    assert_eq!(tg.actions(), vec![("42".to_string(), "typing".to_string())]);
    let result = tokio::time::timeout(Duration::from_secs(20), poll)
        .await
        .expect("the hung poll never returned")
        .expect("join");
    let elapsed = started.elapsed();
    assert!(matches!(no_token(result), PlatformError::Transient(_)));
    // Not before its deadline (poll_timeout + 10 s); the 20 s timeout
    // above proves it was not left hanging.
    assert!(
        elapsed >= Duration::from_secs(10),
        "the hung poll returned after {elapsed:?}, before poll_timeout + 10 s"
    );
    p.reset();
    let id = tg.push_message(42, 7, "ann", "after reset");
    let polled = p.poll(None).await.expect("poll after reset");
    assert_eq!(polled.updates.len(), 1);
    assert_eq!(polled.updates[0].update_id, id.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_reply_arrives_in_order_in_telegram_sized_chunks() {
    let tg = FakeTelegram::start(TOKEN);
    let p = platform(&tg, Duration::from_secs(1), None);
    let mut reply = String::new();
    for i in 0..900 {
        reply.push_str(&format!("第{i}句：包含表情🧑‍💻和𝕏以及😀。"));
        if i % 50 == 49 {
            reply.push_str("\n\n");
        }
    }
    let chunks = p.chunk(&reply);
    assert!(chunks.len() >= 4, "{} chunks", chunks.len());
    for (i, c) in chunks.iter().enumerate() {
        let mut out = chunk(c, true);
        out.index = i as u32;
        out.last = i + 1 == chunks.len();
        p.send("42", &out).await.expect("send chunk");
    }
    let sent = tg.sent();
    assert_eq!(sent.len(), chunks.len());
    for m in &sent {
        assert!(m.text.encode_utf16().count() <= 4096);
        assert_eq!(m.chat_id, "42");
    }
    let joined: String = sent.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(joined.trim_end(), reply.trim_end());
}

#[test]
fn the_platform_debug_hides_the_token() {
    let tg = FakeTelegram::start(TOKEN);
    let p = platform(&tg, Duration::from_secs(1), None);
    let debug = format!("{p:?}");
    assert!(
        !debug.contains("TEST-secret") && debug.contains("redacted"),
        "{debug}"
    );
}
