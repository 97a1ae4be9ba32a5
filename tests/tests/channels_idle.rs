//! What an idle channel binding costs the outside: an inbox folder is not
//! rescanned by its own scans (it once reopened `new/` tens of thousands
//! of times a second), and a server that answers every poll at once, with
//! nothing or with an error, gets about one request a second, not a busy
//! loop. The bounds are counts over a window with a wide margin (a floor of
//! 1 s between empty polls gives ~3 requests in 3 s; the faults gave
//! thousands): a slow machine only lowers them. Also: SIGHUP applies a
//! changed `[channels]` to the bindings it changes and leaves the others
//! running.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_ilink::FakeIlink;
use flyto_tests::fake_llm::{FakeLlm, Reply};
use flyto_tests::fake_telegram::FakeTelegram;
use flyto_tests::{DEADLINE, TestEnv, wait_until};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long an idle binding is watched.
const WINDOW: Duration = Duration::from_secs(3);
/// More requests than this in [`WINDOW`] is a poller without a floor.
const AT_MOST: usize = 10;
const TOKEN: &str = "4242:TEST-secret-bot-token";
const ANN: i64 = 7;

/// Whether `f` holds at some point within `limit` (checked as
/// [`wait_until`] does, but not holding is an answer, not a failure).
fn holds_within(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(1);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
    f()
}

/// Waits for the first request `count` sees, then answers how many more
/// came in the next [`WINDOW`] (stopping early once past [`AT_MOST`]).
fn more_after_the_first(what: &str, count: impl Fn() -> usize) -> usize {
    let first = wait_until(what, DEADLINE, || {
        let n = count();
        (n > 0).then_some(n)
    });
    holds_within(WINDOW, || count() > first + AT_MOST);
    count() - first
}

fn ok(env: &TestEnv, args: &[&str]) -> String {
    let out = env.ctl(args);
    assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
    out.stdout
}

fn bind_telegram(env: &TestEnv, tg: &FakeTelegram, name: &str) {
    let out = env.ctl_with(
        &[
            "channel_bind",
            "telegram",
            "--token-env",
            "FLYTO_TEST_TG_TOKEN",
            "--api-base",
            &tg.api_base(),
            "--name",
            name,
        ],
        &[("FLYTO_TEST_TG_TOKEN", TOKEN)],
        None,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
}

/// The opens of `dir` counted by an inotify watch of our own.
struct Opens {
    fd: nix::sys::inotify::Inotify,
    seen: std::cell::Cell<usize>,
}

impl Opens {
    fn watch(dir: &Path) -> Opens {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        let fd = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).unwrap();
        fd.add_watch(dir, AddWatchFlags::IN_OPEN).unwrap();
        Opens {
            fd,
            seen: std::cell::Cell::new(0),
        }
    }

    fn count(&self) -> usize {
        while let Ok(events) = self.fd.read_events() {
            if events.is_empty() {
                break;
            }
            self.seen.set(self.seen.get() + events.len());
        }
        self.seen.get()
    }
}

#[test]
fn an_idle_inbox_does_not_rescan_its_folder_and_still_answers_at_once() {
    let llm = FakeLlm::start(vec![Reply::text("the answer")]);
    // A long poll timeout: a rescan within the window is a wake-up, and
    // the reply below comes well before the timeout only if the new file
    // woke the poll.
    let env = TestEnv::new(&format!(
        "{}\n[channels]\npoll_timeout = \"50s\"\n",
        llm.config()
    ));
    let _daemon = env.start();
    let dir = env.work.join("inbox");
    for sub in ["tmp", "new", "cur", "out"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let opens = Opens::watch(&dir.join("new"));
    ok(
        &env,
        &["channel_bind", "inbox", "--dir", dir.to_str().unwrap()],
    );
    let more = more_after_the_first("the inbox's first scan of new/", || opens.count());
    assert!(
        more < 3,
        "an idle inbox (poll_timeout 50s) opened new/ {more} more times in {WINDOW:?} after its first scan: it wakes itself"
    );

    let tmp = dir.join("tmp").join("q1");
    std::fs::write(&tmp, "hello").unwrap();
    std::fs::rename(&tmp, dir.join("new").join("q1")).unwrap();
    let reply = wait_until("the reply to q1, woken by its arrival", DEADLINE, || {
        std::fs::read_to_string(dir.join("out").join("q1")).ok()
    });
    assert_eq!(reply, "the answer");
}

#[test]
fn a_telegram_server_that_answers_polls_at_once_gets_about_one_a_second() {
    let llm = FakeLlm::start(vec![Reply::text("answered")]);
    let tg = FakeTelegram::start(TOKEN);
    tg.answer_at_once(true);
    let env = TestEnv::new(&format!(
        "{}\n[channels]\npoll_timeout = \"30s\"\n[channels.allow]\ntelegram = [\"{ANN}\"]\n",
        llm.config()
    ));
    let _daemon = env.start();
    bind_telegram(&env, &tg, "telegram");
    let more = more_after_the_first("the first getUpdates", || tg.calls("getUpdates"));
    assert!(
        more <= AT_MOST,
        "{more} getUpdates in {WINDOW:?} against a server answering at once with nothing"
    );
    // The floor is on empty polls only: a message still gets its answer.
    tg.push_message(ANN, ANN, "ann", "hi");
    tg.wait("the answer", DEADLINE, |t| {
        t.sent().iter().any(|m| m.text == "answered")
    });
}

#[test]
fn a_telegram_server_failing_at_once_is_backed_off() {
    let tg = FakeTelegram::start(TOKEN);
    for _ in 0..200 {
        tg.fail_next("getUpdates", 502, "Bad Gateway", None);
    }
    let env = TestEnv::new("[channels]\npoll_timeout = \"30s\"\n");
    let _daemon = env.start();
    bind_telegram(&env, &tg, "telegram");
    let more = more_after_the_first("the first getUpdates", || tg.calls("getUpdates"));
    assert!(
        more <= AT_MOST,
        "{more} getUpdates in {WINDOW:?} against a server failing each at once"
    );

    // "Retry after 0 s" is not an invitation to a busy loop either.
    let tg = FakeTelegram::start(TOKEN);
    for _ in 0..200 {
        tg.fail_next(
            "getUpdates",
            429,
            "Too Many Requests: retry after 0",
            Some(0),
        );
    }
    bind_telegram(&env, &tg, "zero");
    let more = more_after_the_first("the first getUpdates", || tg.calls("getUpdates"));
    assert!(
        more <= AT_MOST,
        "{more} getUpdates in {WINDOW:?} against a server saying retry after 0"
    );
}

#[test]
fn a_wechat_server_that_answers_polls_at_once_gets_about_one_a_second() {
    let ilink = FakeIlink::with_hold("wx-bot-token-0123456789", Duration::ZERO);
    let env = TestEnv::new("[channels]\npoll_timeout = \"30s\"\n");
    let _daemon = env.start();
    let mut c = flyto_protocol::client::Client::connect(&env.sock).unwrap();
    let answer = c
        .call(&flyto_protocol::Request::ChannelBind {
            spec: flyto_protocol::ChannelSpec {
                kind: "wechat".into(),
                token: Some("wx-bot-token-0123456789".into()),
                api_base: Some(ilink.base_url()),
                ..flyto_protocol::ChannelSpec::default()
            },
        })
        .unwrap();
    assert!(
        matches!(answer, flyto_protocol::Response::Channel { .. }),
        "{answer:?}"
    );
    let polls = || {
        ilink
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/getupdates"))
            .count()
    };
    let more = more_after_the_first("the first getupdates", polls);
    assert!(
        more <= AT_MOST,
        "{more} getupdates in {WINDOW:?} against a server answering at once with nothing"
    );
}

#[test]
fn sighup_applies_a_changed_channels_section_to_the_bindings_it_changes() {
    let llm = FakeLlm::start(vec![Reply::text("welcome, ann")]);
    let (changed, kept) = (FakeTelegram::start(TOKEN), FakeTelegram::start(TOKEN));
    // Polls held for 50 s: a binding restarted by the reload polls again
    // at once, one left alone does not.
    let base = format!("{}\n[channels]\npoll_timeout = \"50s\"\n", llm.config());
    let env = TestEnv::new(&base);
    let daemon = env.start();
    bind_telegram(&env, &changed, "changed");
    bind_telegram(&env, &kept, "kept");
    kept.wait("the kept binding's first poll", DEADLINE, |t| {
        t.calls("getUpdates") == 1
    });

    // Ann is a stranger: she gets a pairing code, not the agent.
    changed.push_message(ANN, ANN, "ann", "first");
    changed.wait("the pairing code", DEADLINE, |t| {
        t.sent().iter().any(|m| m.text.contains("channel_pair"))
    });

    env.write_config(&format!("{base}[channels.allow]\nchanged = [\"{ANN}\"]\n"));
    daemon.signal(libc::SIGHUP);
    // Admitted by the reloaded config: her next message reaches the agent.
    changed.wait("the restarted binding's next poll", DEADLINE, |t| {
        t.offsets().len() >= 3
    });
    changed.push_message(ANN, ANN, "ann", "second");
    changed.wait("the agent's answer", DEADLINE, |t| {
        t.sent().iter().any(|m| m.text == "welcome, ann")
    });
    assert_eq!(
        kept.calls("getUpdates"),
        1,
        "the binding the reload did not change was restarted"
    );
    let list = ok(&env, &["channel_list"]);
    assert!(list.contains("kept"), "{list}");
}
