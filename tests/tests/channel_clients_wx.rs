//! The WeChat iLink and WeCom platform clients against their fake servers
//! (`flyto_tests::fake_ilink`, `flyto_tests::fake_wecom`): the long poll
//! and its cursor, the bot headers with a fresh UIN per request, stable
//! unique client ids and the message_state sequence, failure classes
//! (non-zero ret, -14, HTTP 5xx and 401, no context token), the QR
//! binding, WeCom's cached access token and its refresh on 42001, and no
//! secret in any error.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_actors::channels::wechat::{self, QrStatus, WechatPlatform};
use flyto_actors::channels::wecom::WecomPlatform;
use flyto_actors::channels::{OutChunk, Platform, PlatformError};
use flyto_tests::fake_ilink::FakeIlink;
use flyto_tests::fake_wecom::FakeWecom;
use std::collections::HashSet;
use std::time::{Duration, Instant};

const TOKEN: &str = "bot-token-5ecret";
const POLL: Duration = Duration::from_secs(2);

fn platform(fake: &FakeIlink, token: &str, chunk_chars: usize) -> WechatPlatform {
    WechatPlatform::new(token.into(), Some(fake.base_url()), POLL, chunk_chars, 8).unwrap()
}

fn chunk(id: &str, text: &str, index: u32, last: bool, context: Option<&str>) -> OutChunk {
    OutChunk {
        id: id.into(),
        text: text.into(),
        index,
        last,
        plain: true,
        context_token: context.map(str::to_string),
        reply_to: None,
    }
}

/// Fails unless no secret shows in the error's text or Debug.
fn assert_clean(err: &PlatformError, secrets: &[&str]) {
    let shown = format!("{err} {err:?}");
    for secret in secrets {
        assert!(!shown.contains(secret), "a secret leaked into {shown:?}");
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    const ALPHABET: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in s.trim_end_matches('=').chars() {
        let v = ALPHABET
            .find(c)
            .unwrap_or_else(|| panic!("{s:?} is not base64"));
        bits = (bits << 6) | v as u32;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    out
}

#[tokio::test]
async fn wechat_poll_returns_messages_and_the_cursor_acknowledges_them() {
    let fake = FakeIlink::start(TOKEN);
    let wx = platform(&fake, TOKEN, 1000);
    let first = fake.push_message("alice@im.wechat", "hello");
    let second = fake.push_message("bob@im.wechat", "你好");

    let polled = wx.poll(None).await.unwrap();
    assert_eq!(polled.updates.len(), 2, "{polled:?}");
    let a = &polled.updates[0];
    assert_eq!(a.update_id, first);
    assert_eq!(a.message_id, first);
    assert_eq!(
        (a.chat.as_str(), a.user.as_str()),
        ("alice@im.wechat", "alice@im.wechat")
    );
    assert_eq!(a.text, "hello");
    assert_eq!(a.context_token, fake.context_token_of(&first));
    assert_eq!(polled.updates[1].update_id, second);
    assert_eq!(polled.updates[1].text, "你好");
    assert_ne!(a.context_token, polled.updates[1].context_token);
    let cursor = polled.cursor.expect("a cursor");

    // Acknowledged updates do not come back: the poll is held, then empty.
    let started = Instant::now();
    let empty = wx.poll(Some(&cursor)).await.unwrap();
    assert!(empty.updates.is_empty(), "{empty:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "the poll was not held"
    );

    let third = fake.push_message("alice@im.wechat", "again");
    let next = wx.poll(Some(&cursor)).await.unwrap();
    let ids: Vec<&str> = next.updates.iter().map(|u| u.update_id.as_str()).collect();
    assert_eq!(ids, vec![third.as_str()]);
    assert_ne!(next.cursor.as_deref(), Some(cursor.as_str()));
}

#[tokio::test]
async fn wechat_every_request_carries_the_bot_headers_and_a_fresh_uin() {
    let fake = FakeIlink::start(TOKEN);
    let wx = platform(&fake, TOKEN, 1000);
    let id = fake.push_message("alice@im.wechat", "hi");
    let polled = wx.poll(None).await.unwrap();
    let ctx = fake.context_token_of(&id);
    for n in 0..3 {
        let c = chunk(&format!("s/1/{n}"), "reply", n, n == 2, ctx.as_deref());
        wx.send("alice@im.wechat", &c).await.unwrap();
    }
    wx.typing("alice@im.wechat").await.unwrap();
    wx.poll(polled.cursor.as_deref()).await.unwrap();

    let requests = fake.requests();
    assert!(requests.len() >= 7, "{requests:?}");
    let mut uins = HashSet::new();
    for r in &requests {
        assert_eq!(r.method, "POST", "{} {}", r.method, r.path);
        assert_eq!(
            r.header("AuthorizationType"),
            Some("ilink_bot_token"),
            "{}",
            r.path
        );
        assert_eq!(
            r.header("Authorization"),
            Some(format!("Bearer {TOKEN}").as_str()),
            "{}",
            r.path
        );
        let uin = r.header("X-WECHAT-UIN").expect("X-WECHAT-UIN");
        let decimal = String::from_utf8(base64_decode(uin)).unwrap();
        decimal
            .parse::<u32>()
            .unwrap_or_else(|_| panic!("the UIN {uin:?} is not base64 of a u32: {decimal:?}"));
        assert!(uins.insert(uin.to_string()), "the UIN {uin} was reused");
        assert!(r.body["base_info"].is_object(), "{}: no base_info", r.path);
    }
    // The typing hint went through getconfig's ticket.
    assert_eq!(
        fake.typing(),
        vec![(
            "alice@im.wechat".to_string(),
            "ticket-alice@im.wechat".to_string()
        )]
    );
}

#[tokio::test]
async fn wechat_client_ids_are_stable_and_unique_and_states_end_with_2() {
    let fake = FakeIlink::start(TOKEN);
    let wx = platform(&fake, TOKEN, 40);
    let id = fake.push_message("alice@im.wechat", "tell me");
    let ctx = fake.context_token_of(&id).unwrap();
    let reply = "First paragraph, fairly short.\n\nSecond paragraph is here. \
                 It has two sentences.\n\nThird and last.";
    let pieces = wx.chunk(reply);
    assert!(pieces.len() >= 3, "{pieces:?}");
    assert_eq!(pieces.concat(), reply);
    assert!(pieces.iter().all(|p| p.chars().count() <= 40), "{pieces:?}");
    let n = pieces.len();
    let mut answered = Vec::new();
    for (i, text) in pieces.iter().enumerate() {
        let c = chunk(
            &format!("sess/7/{i}"),
            text,
            i as u32,
            i + 1 == n,
            Some(&ctx),
        );
        answered.push(wx.send("alice@im.wechat", &c).await.unwrap());
    }
    // A retry of chunk 0 (say after a restart) reuses its client_id.
    let retry = chunk("sess/7/0", &pieces[0], 0, false, Some(&ctx));
    let again = wx.send("alice@im.wechat", &retry).await.unwrap();

    let sends = fake.sends();
    assert_eq!(sends.len(), n + 1);
    let states: Vec<i64> = sends[..n].iter().map(|s| s.message_state).collect();
    let mut want = vec![1; n - 1];
    want.push(2);
    assert_eq!(states, want);
    let ids: HashSet<&str> = sends[..n].iter().map(|s| s.client_id.as_str()).collect();
    assert_eq!(ids.len(), n, "client ids repeat: {sends:?}");
    assert_eq!(sends[n].client_id, sends[0].client_id);
    assert_eq!(again, answered[0]);
    assert_eq!(
        answered[0], sends[0].client_id,
        "no platform id: the client_id"
    );
    for (s, text) in sends.iter().zip(&pieces) {
        assert_eq!(&s.text, text);
        assert_eq!(s.context_token, ctx);
        assert_eq!(s.to_user, "alice@im.wechat");
        assert_eq!(s.message_type, 2);
    }
    assert_eq!(wx.max_chunks(), Some(8));
    assert_eq!(wx.chunk_gap(), Duration::from_millis(300));
}

#[tokio::test]
async fn wechat_failures_are_classified_and_never_success() {
    let fake = FakeIlink::start(TOKEN);
    let wx = platform(&fake, TOKEN, 1000);
    let c = chunk("s/1/0", "hello", 0, true, Some("ctx-1"));

    fake.fail_next_send(1, 0);
    let err = wx.send("alice@im.wechat", &c).await.unwrap_err();
    assert!(matches!(err, PlatformError::Rejected(_)), "{err:?}");
    assert_clean(&err, &[TOKEN]);

    fake.fail_next_send(0, 2001);
    let err = wx.send("alice@im.wechat", &c).await.unwrap_err();
    assert!(matches!(err, PlatformError::Rejected(_)), "{err:?}");

    fake.fail_next_send(0, -14);
    let err = wx.send("alice@im.wechat", &c).await.unwrap_err();
    assert!(matches!(err, PlatformError::SessionExpired(_)), "{err:?}");

    fake.fail_next_http(503);
    let err = wx.poll(None).await.unwrap_err();
    assert!(matches!(err, PlatformError::Transient(_)), "{err:?}");
    assert_clean(&err, &[TOKEN]);

    let delivered: Vec<bool> = fake.sends().iter().map(|s| s.delivered).collect();
    assert_eq!(delivered, vec![false, false, false]);

    // A wrong token: HTTP 401 is an auth failure.
    let wrong = platform(&fake, "not-the-token", 1000);
    let err = wrong.poll(None).await.unwrap_err();
    assert!(matches!(err, PlatformError::Auth(_)), "{err:?}");
    assert_clean(&err, &["not-the-token", TOKEN]);

    fake.expire_session();
    let err = wx.poll(None).await.unwrap_err();
    assert!(matches!(err, PlatformError::SessionExpired(_)), "{err:?}");
    let err = wx.send("alice@im.wechat", &c).await.unwrap_err();
    assert!(matches!(err, PlatformError::SessionExpired(_)), "{err:?}");
    assert_clean(&err, &[TOKEN]);
}

#[tokio::test]
async fn wechat_unreachable_host_is_transient() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let wx = WechatPlatform::new(
        TOKEN.into(),
        Some(format!("http://127.0.0.1:{port}")),
        POLL,
        1000,
        8,
    )
    .unwrap();
    let err = wx.poll(None).await.unwrap_err();
    assert!(matches!(err, PlatformError::Transient(_)), "{err:?}");
    assert_clean(&err, &[TOKEN]);
    wx.reset();
    let err = wx.poll(None).await.unwrap_err();
    assert!(matches!(err, PlatformError::Transient(_)), "{err:?}");
}

#[tokio::test]
async fn wechat_without_a_context_token_the_reply_waits() {
    let fake = FakeIlink::start(TOKEN);
    let wx = platform(&fake, TOKEN, 1000);
    let err = wx
        .send("alice@im.wechat", &chunk("s/1/0", "hi", 0, true, None))
        .await
        .unwrap_err();
    assert!(matches!(err, PlatformError::NeedsUserMessage(_)), "{err:?}");
    assert!(
        fake.requests().is_empty(),
        "nothing may be sent without a token"
    );
    assert!(!format!("{wx:?}").contains(TOKEN));
}

/// One status poll of QR `id`, which must not fail.
async fn qr_status(fake: &FakeIlink, id: &str) -> QrStatus {
    wechat::qr_status(&fake.base_url(), id, Duration::from_secs(5))
        .await
        .unwrap()
}

#[tokio::test]
async fn wechat_qr_binding_reaches_confirmed() {
    let fake = FakeIlink::start(TOKEN);
    let qr = wechat::request_qr(&fake.base_url()).await.unwrap();
    assert!(!qr.id.is_empty());
    assert!(qr.content.contains(&qr.id), "{qr:?}");
    assert_eq!(qr_status(&fake, &qr.id).await, QrStatus::Waiting);
    assert_eq!(qr_status(&fake, &qr.id).await, QrStatus::Scanned);
    fake.confirm_qr();
    let status = qr_status(&fake, &qr.id).await;
    assert_eq!(
        status,
        QrStatus::Confirmed {
            bot_token: TOKEN.into(),
            base_url: fake.base_url(),
        }
    );
    assert!(!format!("{status:?}").contains(TOKEN));
    let status_req = fake
        .requests()
        .into_iter()
        .find(|r| r.path == "/ilink/bot/get_qrcode_status")
        .unwrap();
    assert_eq!(status_req.query, format!("qrcode={}", qr.id));
    let code_req = &fake.requests()[0];
    assert_eq!(
        (
            code_req.method.as_str(),
            code_req.path.as_str(),
            code_req.query.as_str()
        ),
        ("GET", "/ilink/bot/get_bot_qrcode", "bot_type=3")
    );
}

#[tokio::test]
async fn wechat_qr_binding_can_expire() {
    let fake = FakeIlink::start(TOKEN);
    let qr = wechat::request_qr(&fake.base_url()).await.unwrap();
    assert_eq!(qr_status(&fake, &qr.id).await, QrStatus::Waiting);
    fake.expire_qr();
    assert_eq!(qr_status(&fake, &qr.id).await, QrStatus::Expired);
    let err = wechat::qr_status(&fake.base_url(), "qr-unknown", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(err, PlatformError::Rejected(_)), "{err:?}");
}

const CORP: &str = "ww-corp";
const SECRET: &str = "corp-s3cret-value";

fn wecom(fake: &FakeWecom, secret: &str) -> WecomPlatform {
    WecomPlatform::new(CORP.into(), 1000002, secret.into(), Some(fake.base_url()))
        .unwrap()
        .with_poll_timeout(Duration::from_millis(200))
}

#[tokio::test]
async fn wecom_token_is_cached_and_refreshed_on_42001_with_one_retry() {
    let fake = FakeWecom::start(CORP, SECRET);
    let wc = wecom(&fake, SECRET);
    assert!(!wc.inbound());
    let id = wc
        .send("zhangsan", &chunk("s/1/0", "one", 0, false, None))
        .await
        .unwrap();
    assert_eq!(id, "msg-1");
    wc.send("zhangsan", &chunk("s/1/1", "two", 1, true, None))
        .await
        .unwrap();
    assert_eq!(fake.gettoken_calls(), 1, "the token was not cached");

    fake.expire_token();
    wc.send("zhangsan", &chunk("s/2/0", "three", 0, true, None))
        .await
        .unwrap();
    assert_eq!(fake.gettoken_calls(), 2);
    let sends = fake.sends();
    let codes: Vec<i64> = sends.iter().map(|s| s.errcode).collect();
    assert_eq!(codes, vec![0, 0, 42001, 0]);
    assert_eq!(
        sends[2].body, sends[3].body,
        "the retry sends the same message"
    );
    assert_ne!(sends[2].access_token, sends[3].access_token);
    let body = &sends[0].body;
    assert_eq!(body["touser"], "zhangsan");
    assert_eq!(body["msgtype"], "text");
    assert_eq!(body["agentid"], 1000002);
    assert_eq!(body["text"]["content"], "one");

    // A token WeCom says expires within the refresh margin is fetched anew.
    fake.set_expires_in(60);
    fake.expire_token();
    wc.send("zhangsan", &chunk("s/3/0", "four", 0, true, None))
        .await
        .unwrap();
    assert_eq!(fake.gettoken_calls(), 3);
    wc.send("zhangsan", &chunk("s/3/1", "five", 0, true, None))
        .await
        .unwrap();
    assert_eq!(fake.gettoken_calls(), 4, "a token near expiry was reused");
}

#[tokio::test]
async fn wecom_failures_are_classified_without_secrets() {
    let fake = FakeWecom::start(CORP, SECRET);
    let wc = wecom(&fake, SECRET);
    let c = chunk("s/1/0", "hi", 0, true, None);

    fake.fail_next_send(45009);
    let err = wc.send("zhangsan", &c).await.unwrap_err();
    assert_eq!(
        err,
        PlatformError::RateLimited {
            retry_after: Duration::from_secs(60)
        }
    );

    fake.fail_next_send(81013);
    let err = wc.send("nobody", &c).await.unwrap_err();
    assert!(matches!(err, PlatformError::Rejected(_)), "{err:?}");
    let tokens: Vec<String> = fake
        .sends()
        .iter()
        .map(|s| s.access_token.clone())
        .collect();
    for token in &tokens {
        assert_clean(&err, &[SECRET, token]);
    }

    let bad = wecom(&fake, "wrong-secret-xyz");
    let err = bad.send("zhangsan", &c).await.unwrap_err();
    assert!(matches!(err, PlatformError::Auth(_)), "{err:?}");
    assert_clean(&err, &["wrong-secret-xyz", SECRET]);
    assert!(!format!("{wc:?}").contains(SECRET));

    let polled = wc.poll(None).await.unwrap();
    assert!(polled.updates.is_empty() && polled.cursor.is_none());
    wc.typing("zhangsan").await.unwrap();
    let long = "长".repeat(1000);
    let pieces = wc.chunk(&long);
    assert_eq!(pieces.concat(), long);
    assert!(pieces.iter().all(|p| p.len() <= 2048));
}

#[tokio::test]
async fn wechat_a_held_poll_wakes_when_a_message_arrives() {
    let fake = FakeIlink::with_hold(TOKEN, Duration::from_secs(20));
    let wx = std::sync::Arc::new(
        WechatPlatform::new(
            TOKEN.into(),
            Some(fake.base_url()),
            Duration::from_secs(20),
            1000,
            8,
        )
        .unwrap(),
    );
    let poller = {
        let wx = wx.clone();
        tokio::spawn(async move { wx.poll(None).await })
    };
    let seen = fake.requests().len();
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.requests().len() == seen {
        assert!(Instant::now() < deadline, "the poll never reached the fake");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    let id = fake.push_message("alice@im.wechat", "wake up");
    let polled = tokio::time::timeout(Duration::from_secs(10), poller)
        .await
        .expect("the held poll did not wake")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(polled.updates.len(), 1);
    assert_eq!(polled.updates[0].update_id, id);
}
