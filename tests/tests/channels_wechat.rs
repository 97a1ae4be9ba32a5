//! WeChat (iLink) and WeCom bindings through the real daemon, against the
//! fake iLink and WeCom servers: binding by QR code with `flytoctl`,
//! answers that carry the user's context token and a unique stable
//! client id, a reply over the chunk limit shortened with the full text
//! saved, a proactive send without a fresh context token held for the
//! user, an expired platform session pausing the binding, and a job's
//! result pushed through WeCom.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_protocol::client::Client;
use flyto_protocol::{ChannelSpec, Request, Response};
use flyto_tests::fake_ilink::FakeIlink;
use flyto_tests::fake_llm::{FakeLlm, Reply};
use flyto_tests::fake_wecom::FakeWecom;
use flyto_tests::{DEADLINE, TestEnv, wait_until};
use serde_json::Value;
use std::process::Stdio;

const TOKEN: &str = "wx-bot-token-0123456789";
const ALICE: &str = "alice@im.wechat";

fn config(fake: &FakeLlm, extra: &str) -> String {
    format!(
        "{}\n[channels]\npoll_timeout = \"1s\"\nstall_grace = \"2s\"\n{extra}\n[channels.allow]\nwechat = [\"{ALICE}\"]\n",
        fake.config()
    )
}

fn list(env: &TestEnv) -> Value {
    let out = env.ctl(&["channel_list", "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

/// Binds through the protocol with a token, as a JSON-lines client may.
fn bind_with_token(env: &TestEnv, ilink: &FakeIlink) {
    let mut c = Client::connect(&env.sock).unwrap();
    let answer = c
        .call(&Request::ChannelBind {
            spec: ChannelSpec {
                kind: "wechat".into(),
                token: Some(TOKEN.into()),
                api_base: Some(ilink.base_url()),
                ..ChannelSpec::default()
            },
        })
        .unwrap();
    assert!(matches!(answer, Response::Channel { .. }), "{answer:?}");
}

/// `flytoctl channel_bind wechat` against the fake, left running: it
/// draws the QR code and waits for it to be confirmed.
fn start_binding(env: &TestEnv, ilink: &FakeIlink) -> std::process::Child {
    env.command(&flyto_tests::bin("flytoctl"))
        .args(["channel_bind", "wechat", "--base-url", &ilink.base_url()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn binding_by_qr_code_then_a_message_is_answered_with_its_context_token() {
    let ilink = FakeIlink::start(TOKEN);
    let fake = FakeLlm::start(vec![Reply::text("hello from the agent")]);
    let env = TestEnv::new(&config(&fake, ""));
    let daemon = env.start();
    let bind = start_binding(&env, &ilink);
    // The QR code is shown and its status polled: confirm it in "WeChat".
    wait_until("the QR status polled", DEADLINE, || {
        ilink
            .requests()
            .iter()
            .any(|r| r.path.ends_with("get_qrcode_status"))
            .then_some(())
    });
    ilink.confirm_qr();
    let out = bind.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Scan this with WeChat"), "{stdout}");
    assert!(
        stdout.contains('█') || stdout.contains('▀'),
        "no QR code drawn: {stdout}"
    );
    assert!(
        !stdout.contains(TOKEN),
        "the bot token reached the terminal"
    );
    assert_eq!(list(&env)["channels"][0]["kind"], "wechat");

    let id = ilink.push_message(ALICE, "hi");
    let token = ilink.context_token_of(&id).unwrap();
    let sent = wait_until("the answer", DEADLINE, || {
        let s = ilink.sends();
        (!s.is_empty()).then_some(s)
    });
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].text, "hello from the agent");
    assert_eq!(sent[0].to_user, ALICE);
    assert_eq!(sent[0].context_token, token);
    assert_eq!(sent[0].message_state, 2);
    assert!(!sent[0].client_id.is_empty());
    // The answer was delivered, every send carried the bot's headers, and
    // the token is nowhere in the daemon's log.
    assert!(sent[0].delivered);
    for r in ilink
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("sendmessage"))
    {
        assert_eq!(r.header("authorizationtype"), Some("ilink_bot_token"));
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {TOKEN}").as_str())
        );
    }
    assert!(
        !daemon.log().contains(TOKEN),
        "the bot token is in flytod's log"
    );
}

#[test]
fn a_long_reply_is_cut_shortened_and_saved_and_chunks_are_marked_in_order() {
    let ilink = FakeIlink::start(TOKEN);
    let long: String = (0..40)
        .map(|i| format!("Paragraph {i}: {}\n\n", "word ".repeat(60)))
        .collect();
    let fake = FakeLlm::start(vec![Reply::text(&long)]);
    let workdir = tempfile::tempdir().unwrap();
    let env = TestEnv::new(&config(
        &fake,
        &format!(
            "workdir = \"{}\"\n[channels.wechat]\nchunk_chars = 1000\nmax_chunks = 3\n",
            workdir.path().display()
        ),
    ));
    let _daemon = env.start();
    bind_with_token(&env, &ilink);
    ilink.push_message(ALICE, "tell me everything");
    let sent = wait_until("three chunks", DEADLINE, || {
        let s = ilink.sends();
        (s.len() >= 3).then_some(s)
    });
    assert_eq!(sent.len(), 3, "more than max_chunks were sent");
    let states: Vec<i64> = sent.iter().map(|s| s.message_state).collect();
    assert_eq!(states, [1, 1, 2]);
    let mut ids: Vec<&str> = sent.iter().map(|s| s.client_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3, "client ids are not unique");
    assert!(sent.iter().all(|s| s.text.chars().count() <= 1000));
    let last = &sent[2].text;
    assert!(last.contains("the full text is in"), "{last}");
    let saved: Vec<_> = std::fs::read_dir(workdir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("reply-"))
        .collect();
    assert_eq!(saved.len(), 1);
    assert_eq!(std::fs::read_to_string(saved[0].path()).unwrap(), long);
}

#[test]
fn a_push_without_a_fresh_context_token_waits_for_the_user_and_says_so() {
    let ilink = FakeIlink::start(TOKEN);
    let fake = FakeLlm::start(vec![Reply::text("first answer")]);
    let env = TestEnv::new(&config(&fake, "[channels.wechat]\ncontext_ttl = \"1h\"\n"));
    let daemon = env.start();
    bind_with_token(&env, &ilink);
    ilink.push_message(ALICE, "hi");
    // Recorded as sent before the kill: a chunk killed while `sending` is
    // given up, which is another test's business.
    wait_until("the answer recorded as sent", DEADLINE, || {
        (list(&env)["channels"][0]["sent"] == 1).then_some(())
    });
    assert_eq!(ilink.sends().len(), 1);
    daemon.kill9();
    // Two hours later the user's context token is stale: a job's result
    // is held as waiting for the user, not reported as sent.
    let later = (2 * 3_600_000).to_string();
    let _daemon = env
        .try_start(&[("FLYTO_CLOCK_OFFSET_MS", later.as_str())])
        .unwrap();
    let plan = env.work.join("p.toml");
    std::fs::create_dir_all(&env.work).unwrap();
    std::fs::write(&plan, "[[steps]]\nid = \"s\"\nrun = \"echo done\"\n").unwrap();
    let out = env.ctl(&[
        "job_create",
        "--schedule",
        "every 1h",
        "--plan",
        plan.to_str().unwrap(),
        "--notify",
        &format!("wechat:{ALICE}"),
        "--name",
        "push",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(env.ctl(&["job_run", "push"]).code, 0);
    let c = wait_until("the push held", DEADLINE, || {
        let l = list(&env);
        (l["channels"][0]["needs_user_message"] == 1).then(|| l["channels"][0].clone())
    });
    assert_eq!(c["sent"], 1, "{c}");
    assert_eq!(
        ilink.sends().len(),
        1,
        "the push was sent without a context token"
    );
}

#[test]
fn an_expired_platform_session_pauses_the_binding_and_shows_it() {
    let ilink = FakeIlink::start(TOKEN);
    let fake = FakeLlm::start(vec![]);
    let env = TestEnv::new(&config(&fake, ""));
    let _daemon = env.start();
    bind_with_token(&env, &ilink);
    ilink.expire_session();
    let c = wait_until("the binding paused", DEADLINE, || {
        let l = list(&env);
        (l["channels"][0]["state"] == "paused").then(|| l["channels"][0].clone())
    });
    assert!(
        c["last_error"].as_str().unwrap_or("").contains("expired"),
        "{c}"
    );
}

#[test]
fn a_jobs_result_reaches_wecom_once() {
    let wecom = FakeWecom::start("corp1", "secret-abcdefgh");
    let env = TestEnv::new(&format!(
        "[channels]\npoll_timeout = \"1s\"\n[channels.wecom]\napi_base = \"{}\"\n",
        wecom.base_url()
    ));
    let daemon = env.start();
    let out = env.ctl_with(
        &["channel_bind", "wecom", "--userid", "bob"],
        &[
            ("WECOM_CORP_ID", "corp1"),
            ("WECOM_AGENT_ID", "1000002"),
            ("WECOM_SECRET", "secret-abcdefgh"),
        ],
        None,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stdout.contains("secret-abcdefgh"));
    let plan = env.work.join("p.toml");
    std::fs::create_dir_all(&env.work).unwrap();
    std::fs::write(
        &plan,
        "[[steps]]\nid = \"s\"\nrun = \"echo weekly-report\"\n",
    )
    .unwrap();
    let out = env.ctl(&[
        "job_create",
        "--schedule",
        "every 1h",
        "--plan",
        plan.to_str().unwrap(),
        "--notify",
        "wecom",
        "--name",
        "report",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(env.ctl(&["job_run", "report"]).code, 0);
    let sent = wait_until("the result pushed", DEADLINE, || {
        let s = wecom.sends();
        (!s.is_empty()).then_some(s)
    });
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].errcode, 0);
    assert_eq!(sent[0].body["touser"], "bob");
    let text = sent[0].body["text"]["content"].as_str().unwrap_or("");
    assert!(text.contains("weekly-report"), "{}", sent[0].body);
    assert!(!daemon.log().contains("secret-abcdefgh"));
}

#[test]
fn an_expired_qr_code_is_renewed_and_the_new_one_binds() {
    let ilink = FakeIlink::start(TOKEN);
    let fake = FakeLlm::start(vec![]);
    let env = TestEnv::new(&config(&fake, ""));
    let _daemon = env.start();
    let bind = start_binding(&env, &ilink);
    let codes = |ilink: &FakeIlink| {
        ilink
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("get_bot_qrcode"))
            .count()
    };
    wait_until("the first code polled", DEADLINE, || {
        ilink
            .requests()
            .iter()
            .any(|r| r.path.ends_with("get_qrcode_status"))
            .then_some(())
    });
    ilink.expire_qr();
    wait_until("a second code", DEADLINE, || {
        (codes(&ilink) >= 2).then_some(())
    });
    ilink.confirm_qr();
    let out = bind.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("The code expired; scan this one"),
        "{stdout}"
    );
    assert_eq!(list(&env)["channels"][0]["name"], "wechat");
}
