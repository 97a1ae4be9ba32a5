//! Chat channels through the real daemon: an inbox folder binding (no
//! network) answered by a scripted LLM; SIGKILL at each point of a
//! message's way (after receive, after journal, after acknowledgement, at
//! the turn's start, after its answer, after the reply was sent) still
//! gives one turn per message and no reply twice.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_llm::{FakeLlm, Reply};
use flyto_tests::{DEADLINE, TestEnv, wait_until};
use serde_json::Value;
use std::path::{Path, PathBuf};

const FAST: &str = "[channels]\npoll_timeout = \"1s\"\n";

fn env_with(fake: &FakeLlm) -> TestEnv {
    TestEnv::new(&format!("{}\n{FAST}", fake.config()))
}

fn ok(env: &TestEnv, args: &[&str]) -> String {
    let out = env.ctl(args);
    assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
    out.stdout
}

fn list(env: &TestEnv) -> Value {
    serde_json::from_str(&ok(env, &["channel_list", "--json"])).unwrap()
}

fn inbox(env: &TestEnv) -> PathBuf {
    let dir = env.work.join("inbox");
    ok(
        env,
        &["channel_bind", "inbox", "--dir", dir.to_str().unwrap()],
    );
    dir
}

/// As a writer should: into `tmp/`, then renamed into `new/`.
fn drop_message(dir: &Path, name: &str, text: &str) {
    let tmp = dir.join("tmp").join(name);
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join("new").join(name)).unwrap();
}

fn reply(dir: &Path, name: &str) -> String {
    wait_until(&format!("the reply to {name}"), DEADLINE, || {
        std::fs::read_to_string(dir.join("out").join(name)).ok()
    })
}

/// The user messages the chat's session holds, in order.
fn prompts(env: &TestEnv) -> Vec<String> {
    let sessions: Value = serde_json::from_str(&ok(env, &["session_list", "--json"])).unwrap();
    let Some(s) = sessions.as_array().unwrap().iter().find(|s| {
        s["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("chat inbox"))
    }) else {
        return Vec::new();
    };
    let id = s["id"].as_str().unwrap();
    let h: Value = serde_json::from_str(&ok(env, &["session_history", id, "--json"])).unwrap();
    h["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["blocks"][0]["text"]["text"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn an_inbox_message_gets_one_turn_and_its_reply_in_out() {
    let fake = FakeLlm::start(vec![
        Reply::text("first answer"),
        Reply::text("second answer"),
    ]);
    let env = env_with(&fake);
    let _daemon = env.start();
    let dir = inbox(&env);
    drop_message(&dir, "001.txt", "hello agent");
    assert_eq!(reply(&dir, "001.txt"), "first answer");
    assert!(
        dir.join("cur").join("001.txt").exists(),
        "the message was not moved to cur/"
    );
    assert!(!dir.join("new").join("001.txt").exists());
    // The same chat's next message continues the same session.
    drop_message(&dir, "002.txt", "and again");
    assert_eq!(reply(&dir, "002.txt"), "second answer");
    assert_eq!(prompts(&env), ["hello agent", "and again"]);
    assert_eq!(fake.request_count(), 2);
    let l = list(&env);
    let c = &l["channels"][0];
    assert_eq!(c["name"], "inbox");
    assert_eq!(c["state"], "ok", "{l}");
    assert!(c["last_poll"].is_string());
    assert_eq!(c["queued"], 0);
    assert_eq!(c["sent"], 2);
}

#[test]
fn messages_of_one_chat_are_answered_in_order() {
    let fake = FakeLlm::start(vec![
        Reply::text("a1").held("first"),
        Reply::text("a2"),
        Reply::text("a3"),
    ]);
    let env = env_with(&fake);
    let _daemon = env.start();
    let dir = inbox(&env);
    drop_message(&dir, "1", "m1");
    fake.wait_requests(1, DEADLINE);
    // Queued behind the running turn, not started beside it.
    drop_message(&dir, "2", "m2");
    drop_message(&dir, "3", "m3");
    wait_until("both queued", DEADLINE, || {
        (list(&env)["channels"][0]["queued"] == 3).then_some(())
    });
    assert_eq!(fake.request_count(), 1);
    fake.release("first");
    assert_eq!(reply(&dir, "1"), "a1");
    assert_eq!(reply(&dir, "2"), "a2");
    assert_eq!(reply(&dir, "3"), "a3");
    assert_eq!(prompts(&env), ["m1", "m2", "m3"]);
}

/// Kills flytod at `point` while it handles one message, restarts it, and
/// checks that the message got exactly one turn and one reply.
fn crash_at(point: &str) {
    let fake = FakeLlm::start(vec![Reply::text("the answer"), Reply::text("spare")]);
    let env = env_with(&fake);
    let daemon = env.start();
    let dir = inbox(&env);
    daemon.kill9();
    let mut daemon = env.try_start(&[("FLYTO_TEST_CRASH_AT", point)]).unwrap();
    drop_message(&dir, "m.txt", "only once");
    daemon.wait_exit(DEADLINE);
    let _daemon = env.start();
    let text = reply(&dir, "m.txt");
    assert_eq!(text, "the answer", "{point}");
    wait_until("the message to be done", DEADLINE, || {
        (list(&env)["channels"][0]["queued"] == 0).then_some(())
    });
    assert_eq!(
        prompts(&env),
        ["only once"],
        "{point}: the session saw it more than once"
    );
    assert_eq!(
        fake.request_count(),
        1,
        "{point}: the model was called again"
    );
}

#[test]
fn a_crash_after_receiving_or_journaling_or_acknowledging_gives_one_turn() {
    for point in [
        "channel-after-receive",
        "channel-after-journal",
        "channel-after-ack",
    ] {
        crash_at(point);
    }
}

#[test]
fn a_crash_as_a_turn_starts_or_after_it_answered_gives_one_turn() {
    for point in ["channel-turn-started", "channel-turn-answered"] {
        crash_at(point);
    }
}

#[test]
fn a_crash_mid_turn_resumes_the_stored_message_once() {
    let fake = FakeLlm::start(vec![
        Reply::text("never seen").held("gate"),
        Reply::text("the answer"),
    ]);
    let env = env_with(&fake);
    let daemon = env.start();
    let dir = inbox(&env);
    drop_message(&dir, "m.txt", "survive a crash");
    fake.wait_requests(1, DEADLINE);
    daemon.kill9();
    let _daemon = env.start();
    assert_eq!(reply(&dir, "m.txt"), "the answer");
    assert_eq!(prompts(&env), ["survive a crash"]);
}

#[test]
fn a_reply_being_sent_when_flytod_died_is_given_up_visibly_not_sent_twice() {
    let fake = FakeLlm::start(vec![Reply::text("sent once")]);
    let env = env_with(&fake);
    let daemon = env.start();
    let dir = inbox(&env);
    daemon.kill9();
    let mut daemon = env
        .try_start(&[("FLYTO_TEST_CRASH_AT", "channel-after-send")])
        .unwrap();
    drop_message(&dir, "m.txt", "hi");
    daemon.wait_exit(DEADLINE);
    let out = dir.join("out").join("m.txt");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "sent once");
    std::fs::remove_file(&out).unwrap();
    let _daemon = env.start();
    let c = wait_until("the chunk given up", DEADLINE, || {
        let l = list(&env);
        (l["channels"][0]["dropped"] == 1).then(|| l["channels"][0].clone())
    });
    assert_eq!(c["outbox_pending"], 0, "{c}");
    assert!(!out.exists(), "the chunk was sent a second time");
    assert_eq!(fake.request_count(), 1);
}

#[test]
fn a_stale_unsent_reply_is_dropped_not_sent_late() {
    let fake = FakeLlm::start(vec![Reply::text("too late")]);
    let env = TestEnv::new(&format!(
        "{}\n[channels]\npoll_timeout = \"1s\"\noutbox_ttl = \"1h\"\n",
        fake.config()
    ));
    let daemon = env.start();
    let dir = inbox(&env);
    daemon.kill9();
    // The reply is in the outbox, and flytod dies before sending it.
    let mut daemon = env
        .try_start(&[("FLYTO_TEST_CRASH_AT", "channel-before-send")])
        .unwrap();
    drop_message(&dir, "m.txt", "hi");
    daemon.wait_exit(DEADLINE);
    // Back two hours later: past the outbox ttl, it is dropped and logged.
    let two_hours = (2 * 3_600_000).to_string();
    let daemon = env
        .try_start(&[("FLYTO_CLOCK_OFFSET_MS", two_hours.as_str())])
        .unwrap();
    let c = wait_until("the stale chunk dropped", DEADLINE, || {
        let l = list(&env);
        (l["channels"][0]["dropped"] == 1).then(|| l["channels"][0].clone())
    });
    assert_eq!(c["sent"], 0, "{c}");
    assert!(
        !dir.join("out").join("m.txt").exists(),
        "a stale reply was sent"
    );
    assert!(
        daemon.log().contains("outbox_ttl"),
        "the drop was not logged"
    );
}

#[test]
fn bad_channel_input_gets_a_clear_error() {
    let env = TestEnv::new(FAST);
    let _daemon = env.start();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["channel_bind", "inbox", "--dir", "/proc/no/such/place"],
            "cannot create",
        ),
        (
            vec![
                "channel_bind",
                "telegram",
                "--token-env",
                "FLYTO_NO_SUCH_VAR",
            ],
            "FLYTO_NO_SUCH_VAR is not set",
        ),
        (
            vec!["channel_bind", "inbox", "--dir", "/tmp/x", "--name", "a b"],
            "is not a binding name",
        ),
        (
            vec!["channel_unbind", "nothing"],
            "no channel binding `nothing`",
        ),
        (
            vec!["channel_pair", "ZZZZ"],
            "no pairing request with code ZZZZ",
        ),
        (
            vec!["channel_test", "nothing"],
            "no channel binding `nothing`",
        ),
    ];
    for (args, says) in cases {
        let out = env.ctl(&args);
        assert_ne!(out.code, 0, "{args:?} was accepted");
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
    // A name in use is a conflict that says what to do.
    let dir = env.work.join("in");
    ok(
        &env,
        &["channel_bind", "inbox", "--dir", dir.to_str().unwrap()],
    );
    let out = env.ctl(&["channel_bind", "inbox", "--dir", dir.to_str().unwrap()]);
    assert!(
        out.stderr.contains("channel_unbind inbox"),
        "{}",
        out.stderr
    );
    assert_eq!(list(&env)["channels"].as_array().unwrap().len(), 1);
}

fn notify_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("out"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("notify_"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_jobs_notify_delivers_each_runs_result_once_even_across_a_crash() {
    let env = TestEnv::new(FAST);
    let daemon = env.start();
    let dir = inbox(&env);
    let plan = env.work.join("p.toml");
    std::fs::write(&plan, "[[steps]]\nid = \"s\"\nrun = \"echo the-result\"\n").unwrap();
    ok(
        &env,
        &[
            "job_create",
            "--schedule",
            "every 1s",
            "--plan",
            plan.to_str().unwrap(),
            "--notify",
            "inbox",
            "--name",
            "tick",
        ],
    );
    let first = wait_until("two results delivered", DEADLINE, || {
        let n = notify_files(&dir);
        (n.len() >= 2).then_some(n)
    });
    let body = std::fs::read_to_string(dir.join("out").join(&first[0])).unwrap();
    assert!(
        body.contains("Job tick") && body.contains("succeeded"),
        "{body}"
    );
    assert!(body.contains("the-result"), "{body}");
    daemon.kill9();
    let _daemon = env.start();
    wait_until("more results after the restart", DEADLINE, || {
        (notify_files(&dir).len() >= first.len() + 2).then_some(())
    });
    ok(&env, &["job_pause", "tick"]);
    // Settled: every result file was written by one send. (One the kill
    // caught while sending is given up, counted as dropped, and never
    // sent again.)
    let (files, sent, dropped) = wait_until("the outbox to settle", DEADLINE, || {
        let l = list(&env);
        let c = &l["channels"][0];
        let files = notify_files(&dir);
        let (sent, dropped) = (c["sent"].as_u64()?, c["dropped"].as_u64()?);
        (c["outbox_pending"] == 0 && sent + dropped == files.len() as u64)
            .then_some((files, sent, dropped))
    });
    assert!(dropped <= 1, "{dropped} results given up for one kill");
    assert!(sent as usize <= files.len(), "a result was sent twice");
    let fires: Value = serde_json::from_str(&ok(&env, &["job_show", "tick", "--json"])).unwrap();
    let succeeded = fires["fires"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["plan_state"] == "succeeded")
        .count();
    assert!(
        files.len() <= succeeded && files.len() + 1 >= succeeded,
        "{} results for {succeeded} runs",
        files.len()
    );
}

#[test]
fn an_agent_pushes_to_a_binding_with_channel_send() {
    let fake = FakeLlm::start(vec![
        Reply::tool_call(
            "c1",
            "channel_send",
            serde_json::json!({"binding": "inbox", "text": "pushed by the agent"}).to_string(),
        ),
        Reply::tool_call(
            "c2",
            "channel_send",
            serde_json::json!({"binding": "nowhere", "text": "x"}).to_string(),
        ),
        Reply::text("done"),
    ]);
    let env = env_with(&fake);
    let _daemon = env.start();
    let dir = inbox(&env);
    drop_message(&dir, "m.txt", "push something to me");
    assert_eq!(reply(&dir, "m.txt"), "done");
    let pushed: Vec<String> = std::fs::read_dir(dir.join("out"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("push_"))
        .collect();
    assert_eq!(pushed.len(), 1, "{pushed:?}");
    let body = std::fs::read_to_string(dir.join("out").join(&pushed[0])).unwrap();
    assert_eq!(body, "pushed by the agent");
    // A binding that does not exist is an error the model sees.
    let third = &fake.requests()[2];
    let text = third.to_string();
    assert!(text.contains("no channel binding `nowhere`"), "{text}");
}

#[test]
fn a_failed_turn_is_told_to_the_user_and_the_next_message_is_answered() {
    let fake = FakeLlm::start(vec![Reply::status(400, None), Reply::text("recovered")]);
    let env = env_with(&fake);
    let _daemon = env.start();
    let dir = inbox(&env);
    drop_message(&dir, "1", "first");
    let said = reply(&dir, "1");
    assert!(said.starts_with("(The agent could not answer:"), "{said}");
    drop_message(&dir, "2", "second");
    assert_eq!(reply(&dir, "2"), "recovered");
}

#[test]
fn after_a_long_silence_the_model_starts_from_the_new_message() {
    let fake = FakeLlm::start(vec![Reply::text("one"), Reply::text("two")]);
    let env = TestEnv::new(&format!(
        "{}\n[channels]\npoll_timeout = \"1s\"\nsession_gap_hours = 1\n",
        fake.config()
    ));
    let daemon = env.start();
    let dir = inbox(&env);
    drop_message(&dir, "1", "an old topic");
    assert_eq!(reply(&dir, "1"), "one");
    daemon.kill9();
    let later = (2 * 3_600_000).to_string();
    let _daemon = env
        .try_start(&[("FLYTO_CLOCK_OFFSET_MS", later.as_str())])
        .unwrap();
    drop_message(&dir, "2", "a new topic");
    assert_eq!(reply(&dir, "2"), "two");
    let seen = fake.requests()[1].to_string();
    assert!(seen.contains("a new topic"), "{seen}");
    assert!(
        !seen.contains("an old topic"),
        "the old turn is still in the window: {seen}"
    );
    // The history keeps both.
    assert_eq!(prompts(&env), ["an old topic", "a new topic"]);
}
