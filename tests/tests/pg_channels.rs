//! Channels on the shared store, across two real flytod and one fake
//! Telegram: a binding is polled by exactly one node (its lease), any
//! node lists it and admits a stranger, and when the node holding it dies
//! or is paused past its lease, the other node takes it over with every
//! acknowledged message answered exactly once; the paused node, resumed,
//! answers nothing (its writes present a lost lease).

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_llm::{FakeLlm, Reply};
use flyto_tests::fake_telegram::FakeTelegram;
use flyto_tests::flyto_protocol::{Request, Response};
use flyto_tests::pg::TestPostgres;
use flyto_tests::{DEADLINE, Daemon, TestEnv, wait_until};
use serde_json::Value;
use std::time::{Duration, Instant};

/// `f`'s first `Some` within `limit`, or `None`.
fn wait_until_or<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

const TOKEN: &str = "4242:TEST-secret-bot-token";
const ANN: i64 = 7;
const EVE: i64 = 99;
const DB: &str = "channels";

fn node(pg: &TestPostgres, llm: &FakeLlm) -> TestEnv {
    TestEnv::new(&format!(
        "[daemon]\nshutdown_grace = \"1s\"\n[store]\nbackend = \"postgres\"\nurl = \"{}\"\n\n{}\n[channels]\npoll_timeout = \"1s\"\nstall_grace = \"2s\"\n[channels.allow]\ntelegram = [\"{ANN}\"]\n",
        pg.url_for(DB),
        llm.config()
    ))
}

fn node_id(env: &TestEnv) -> String {
    match env.client().call(&Request::Stats {}).unwrap() {
        Response::Stats { stats } => stats.node,
        other => panic!("stats: {other:?}"),
    }
}

fn ok(env: &TestEnv, args: &[&str]) -> String {
    let out = env.ctl(args);
    assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
    out.stdout
}

fn channel(env: &TestEnv) -> Value {
    let l: Value = serde_json::from_str(&ok(env, &["channel_list", "--json"])).unwrap();
    l["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "telegram")
        .cloned()
        .unwrap_or_else(|| panic!("no binding telegram in {l}"))
}

/// The node holding the binding's live lease.
fn holder(pg: &TestPostgres) -> Option<String> {
    let out = pg.sql(
        DB,
        "SELECT node FROM flyto_channel_leases WHERE binding = 'telegram' AND until > now()",
    );
    let n = out.trim();
    (!n.is_empty()).then(|| n.to_string())
}

fn expire_lease(pg: &TestPostgres) {
    pg.sql(
        DB,
        "UPDATE flyto_channel_leases SET until = now() - interval '1 second'",
    );
}

fn texts(tg: &FakeTelegram, chat: i64) -> Vec<String> {
    let id = chat.to_string();
    tg.sent()
        .into_iter()
        .filter(|m| m.chat_id == id)
        .map(|m| m.text)
        .collect()
}

fn wait_texts(tg: &FakeTelegram, chat: i64, n: usize) -> Vec<String> {
    tg.wait(&format!("{n} messages to chat {chat}"), DEADLINE, |t| {
        texts(t, chat).len() >= n
    });
    texts(tg, chat)
}

struct Cluster {
    pg: TestPostgres,
    llm: FakeLlm,
    tg: FakeTelegram,
    envs: [TestEnv; 2],
    daemons: [Option<Daemon>; 2],
    ids: [String; 2],
}

impl Cluster {
    fn start(script: Vec<Reply>) -> Cluster {
        let pg = TestPostgres::start();
        pg.create_database(DB);
        let llm = FakeLlm::start(script);
        let tg = FakeTelegram::start(TOKEN);
        let envs = [node(&pg, &llm), node(&pg, &llm)];
        let daemons = [Some(envs[0].start()), Some(envs[1].start())];
        let ids = [node_id(&envs[0]), node_id(&envs[1])];
        crate::channels_telegram::bind(&envs[0], &tg, TOKEN, "telegram");
        Cluster {
            pg,
            llm,
            tg,
            envs,
            daemons,
            ids,
        }
    }

    /// The index of the node holding the binding, once one does.
    fn holder(&self) -> usize {
        let n = wait_until("a node holds the binding", DEADLINE, || holder(&self.pg));
        self.ids
            .iter()
            .position(|id| *id == n)
            .unwrap_or_else(|| panic!("{n} is neither node {:?}", self.ids))
    }

    fn say(&self, text: &str) {
        self.tg.push_message(ANN, ANN, "ann", text);
    }
}

#[test]
fn one_node_polls_a_binding_and_a_dead_nodes_binding_moves_with_each_message_answered_once() {
    let mut c = Cluster::start(vec![
        Reply::text("first answer"),
        Reply::text("second answer"),
        Reply::text("third answer"),
        Reply::text("spare"),
    ]);
    let h = c.holder();
    let other = 1 - h;
    // Any node lists it; the other names the node that polls it (told by
    // the holder's notification).
    let polled_by = format!("on node {}", c.ids[h]);
    wait_until("the other node to name the holder", DEADLINE, || {
        let seen = channel(&c.envs[other]);
        (seen["state"] == polled_by.as_str()).then_some(())
    });
    assert_eq!(channel(&c.envs[h])["kind"], "telegram");

    c.say("one");
    assert_eq!(wait_texts(&c.tg, ANN, 1), ["first answer"]);

    // A stranger is admitted from the node that does not poll: its
    // answer goes out through the holder's outbox.
    c.tg.push_message(EVE, EVE, "eve", "let me in");
    let code = wait_texts(&c.tg, EVE, 1)[0]
        .split_whitespace()
        .last()
        .unwrap()
        .trim_end_matches('.')
        .to_string();
    let said = ok(&c.envs[other], &["channel_pair", &code]);
    assert!(said.contains("admitted"), "{said}");
    assert!(wait_texts(&c.tg, EVE, 2)[1].contains("admitted"));

    // (Recorded as sent: a chunk that was being sent when its node died
    // is given up rather than risk sending it twice.)
    wait_until("the holder recorded its sends", DEADLINE, || {
        (channel(&c.envs[other])["sent"] == 3).then_some(())
    });

    // The holder dies; what is said meanwhile is answered by the other
    // node once the lease runs out (here at once, rather than after 45 s).
    c.daemons[h].take().unwrap().kill9();
    c.say("two");
    expire_lease(&c.pg);
    let now_held = c.holder();
    assert_eq!(now_held, other, "the binding did not move");
    assert_eq!(wait_texts(&c.tg, ANN, 2)[1], "second answer");

    // The dead node comes back: the binding stays where it is, and a new
    // message is answered once.
    c.daemons[h] = Some(c.envs[h].start());
    c.say("three");
    let all = wait_texts(&c.tg, ANN, 3);
    assert_eq!(all, ["first answer", "second answer", "third answer"]);
    assert_eq!(
        holder(&c.pg).as_deref(),
        Some(c.ids[other].as_str()),
        "the lease moved back while its holder lives"
    );
    // Three answers, and eve's code and welcome.
    let mut last = Value::Null;
    let done = wait_until_or(DEADLINE, || {
        last = channel(&c.envs[h]);
        (last["sent"] == 5 && last["queued"] == 0 && last["dropped"] == 0).then_some(())
    });
    assert!(
        done.is_some(),
        "the answers are not all recorded as sent: {last}"
    );
    assert_eq!(c.llm.request_count(), 3, "the model was called again");
    assert_eq!(texts(&c.tg, ANN).len(), 3, "a reply was sent twice");
}

#[test]
fn a_paused_holder_loses_the_binding_and_answers_nothing_when_it_resumes() {
    let c = Cluster::start(vec![
        Reply::text("before"),
        Reply::text("while paused"),
        Reply::text("after"),
        Reply::text("spare"),
    ]);
    c.say("one");
    assert_eq!(wait_texts(&c.tg, ANN, 1), ["before"]);
    let h = c.holder();
    let other = 1 - h;
    let paused = c.daemons[h].as_ref().unwrap();
    paused.signal(libc::SIGSTOP);
    expire_lease(&c.pg);
    wait_until("the other node takes the binding", DEADLINE, || {
        (holder(&c.pg).as_deref() == Some(c.ids[other].as_str())).then_some(())
    });
    c.say("two");
    assert_eq!(wait_texts(&c.tg, ANN, 2)[1], "while paused");
    // Resumed, the old holder finds its lease gone: it stops polling and
    // its writes under the old lease change nothing.
    paused.signal(libc::SIGCONT);
    let log = &c.envs[h];
    wait_until("the resumed node stops the binding", DEADLINE, || {
        c.daemons[h]
            .as_ref()
            .unwrap()
            .log()
            .contains("no longer holds its lease")
            .then_some(())
    });
    c.say("three");
    let all = wait_texts(&c.tg, ANN, 3);
    assert_eq!(all, ["before", "while paused", "after"]);
    assert_eq!(holder(&c.pg).as_deref(), Some(c.ids[other].as_str()));
    wait_until("the answers are recorded as sent", DEADLINE, || {
        let v = channel(log);
        (v["sent"] == 3 && v["queued"] == 0).then_some(())
    });
    assert_eq!(c.llm.request_count(), 3, "a message got two turns");
    assert_eq!(texts(&c.tg, ANN).len(), 3, "a reply was sent twice");
}

#[test]
fn with_the_database_away_channel_and_memory_requests_answer_unavailable_and_resume() {
    let pg = TestPostgres::start();
    pg.create_database(DB);
    let llm = FakeLlm::start(vec![]);
    let env = node(&pg, &llm);
    let _d = env.start();
    let inbox = env.work.join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    ok(
        &env,
        &["channel_bind", "inbox", "--dir", inbox.to_str().unwrap()],
    );
    pg.stop();
    for args in [
        vec!["channel_list"],
        vec!["memory_list", "--project", env.work.to_str().unwrap()],
    ] {
        let out = env.ctl(&args);
        assert_eq!(out.code, 6, "{args:?}: {} {}", out.stdout, out.stderr);
        assert!(
            out.stderr.contains("Unavailable") && out.stderr.contains("shared store"),
            "{args:?}: {}",
            out.stderr
        );
    }
    pg.start_again();
    let listed = wait_until("channel_list works again", DEADLINE, || {
        let out = env.ctl(&["channel_list"]);
        (out.code == 0).then_some(out.stdout)
    });
    assert!(listed.contains("inbox"), "{listed}");
}

#[test]
fn migrate_from_sled_moves_a_binding_with_its_admitted_users_and_its_chats_sessions() {
    use flyto_tests::sessions_support::{history, message_text};
    let pg = TestPostgres::start();
    pg.create_database("moved");
    let llm = FakeLlm::start(vec![
        Reply::text("on sled"),
        Reply::text("eve on postgres"),
        Reply::text("ann on postgres"),
        Reply::text("spare"),
    ]);
    let tg = FakeTelegram::start(TOKEN);
    let channels =
        format!("[channels]\npoll_timeout = \"1s\"\n[channels.allow]\ntelegram = [\"{ANN}\"]\n");
    let env = TestEnv::new(&format!(
        "[daemon]\nshutdown_grace = \"1s\"\n\n{}\n{channels}",
        llm.config()
    ));
    // On the node's own sled store: a binding, a turn, a stranger admitted.
    let daemon = env.start();
    crate::channels_telegram::bind(&env, &tg, TOKEN, "telegram");
    tg.push_message(ANN, ANN, "ann", "one");
    assert_eq!(wait_texts(&tg, ANN, 1), ["on sled"]);
    tg.push_message(EVE, EVE, "eve", "let me in");
    let code = wait_texts(&tg, EVE, 1)[0]
        .split_whitespace()
        .last()
        .unwrap()
        .trim_end_matches('.')
        .to_string();
    assert!(ok(&env, &["channel_pair", &code]).contains("admitted"));
    assert!(wait_texts(&tg, EVE, 2)[1].contains("admitted"));
    wait_until("the sends are recorded", DEADLINE, || {
        let l: Value = serde_json::from_str(&ok(&env, &["channel_list", "--json"])).unwrap();
        (l["channels"][0]["sent"] == 3).then_some(())
    });
    assert!(daemon.terminate().success());

    let migrate = || {
        let out = env
            .command(&flyto_tests::bin("flytod"))
            .args([
                "migrate",
                "--from-sled",
                "--database-url",
                &pg.url_for("moved"),
            ])
            .output()
            .expect("flytod migrate");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let said = migrate();
    assert!(
        said.contains("copied 1 channel binding(s)") && said.contains("\n  telegram\n"),
        "{said}"
    );
    let again = migrate();
    assert!(
        again.contains("channel bindings of") && again.contains("before: nothing copied"),
        "{again}"
    );

    // On the shared store: the binding polls from where it stopped, the
    // admitted stranger stays admitted, ann's chat goes on in its session.
    env.write_config(&format!(
        "[daemon]\nshutdown_grace = \"1s\"\n[store]\nbackend = \"postgres\"\nurl = \"{}\"\n\n{}\n{channels}",
        pg.url_for("moved"),
        llm.config()
    ));
    let _daemon = env.start();
    tg.push_message(EVE, EVE, "eve", "hello");
    assert_eq!(wait_texts(&tg, EVE, 3)[2], "eve on postgres");
    tg.push_message(ANN, ANN, "ann", "two");
    assert_eq!(wait_texts(&tg, ANN, 2), ["on sled", "ann on postgres"]);
    let sessions: Value = serde_json::from_str(&ok(&env, &["session_list", "--json"])).unwrap();
    let ann = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == format!("chat telegram {ANN}").as_str())
        .unwrap_or_else(|| panic!("no session of ann's chat in {sessions}"));
    let (_, messages) = history(&env, ann["id"].as_str().unwrap());
    let texts_in: Vec<String> = messages.iter().map(message_text).collect();
    assert_eq!(texts_in, ["one", "on sled", "two", "ann on postgres"]);
    assert_eq!(llm.request_count(), 3, "a message was answered twice");
    assert_eq!(texts(&tg, ANN).len(), 2, "a reply was sent twice");
}
