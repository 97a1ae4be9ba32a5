//! `flyto-bench channels`: inbound chat messages through a real flytod,
//! answered by the scripted fake LLM with short text replies. Throughput
//! (messages per second, message in to reply out) and latency (message in
//! to the turn's start: the moment the fake LLM receives that message's
//! model request) for
//!
//! 1. the inbox folder binding, one file at a time (one chat, so its
//!    messages are sequential anyway), next to a bare loop that does what
//!    flytod does with the same files (rename into `new/`, scan, read,
//!    move into `cur/`, write the reply into `out/`);
//! 2. the fake Telegram server, messages spread over several private
//!    chats, each chat sending its next message once its reply came (chats
//!    in parallel), next to a bare `getUpdates` + `sendMessage` loop
//!    against another instance of the same fake in the same shape.
//!
//! It prints, and counts lost or duplicated turns and replies; it asserts
//! nothing. Owns only its temp dirs and fakes; touches no flytod code.

use crate::{machine, percentile, stat_cpu_ns};
use anyhow::{Context, bail};
use flyto_tests::fake_llm::{FakeLlm, Reply};
use flyto_tests::fake_telegram::FakeTelegram;
use flyto_tests::{DEADLINE, Daemon, TestEnv};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the `channels` benchmark runs.
pub struct Args {
    /// Messages per platform.
    pub messages: usize,
    /// Telegram chats the messages are spread over.
    pub chats: usize,
}

const TOKEN: &str = "4242:bench-token";
const TOKEN_VAR: &str = "FLYTO_BENCH_TELEGRAM_TOKEN";
/// The first chat's user id (and chat id: the chats are private).
const FIRST_USER: i64 = 7000;
/// Every message's text holds this, then its id.
const MARK: &str = "bench message ";
/// The fake LLM's answer to every request.
const REPLY: &str = "ok";
/// No phase may take longer than this (the bench fails instead of hanging).
const PHASE_LIMIT: Duration = Duration::from_secs(300);

pub fn run(args: &Args) -> anyhow::Result<()> {
    let total = Instant::now();
    machine();
    let n = args.messages.max(1);
    let chats = args.chats.clamp(1, n);
    println!(
        "\n== channels: {n} inbox files one at a time; {n} Telegram messages over {chats} chats in parallel =="
    );
    let fake = FakeLlm::start(Vec::new());
    let users: Vec<String> = (0..chats)
        .map(|c| format!("\"{}\"", FIRST_USER + c as i64))
        .collect();
    let env = TestEnv::new(&format!(
        "{}\n[daemon]\nlog_level = \"warn\"\n[channels]\npoll_timeout = \"1s\"\n[channels.allow]\ntelegram = [{}]\n",
        fake.config(),
        users.join(", ")
    ));
    let daemon = env.start();
    inbox(&env, &daemon, &fake, n)?;
    telegram(&env, &daemon, &fake, n, chats)?;
    daemon.terminate();
    println!("channels done in {:.1}s", total.elapsed().as_secs_f64());
    Ok(())
}

// ---------------------------------------------------------------- inbox

/// Replies for one phase's `n` turns, the memory extractions every few
/// turns, and spares, so an unexpected request shows up in the counts
/// instead of as a failed turn.
fn script(fake: &FakeLlm, n: usize) {
    fake.push((0..2 * n + 20).map(|_| Reply::text(REPLY)).collect());
}

fn inbox(env: &TestEnv, daemon: &Daemon, fake: &FakeLlm, n: usize) -> anyhow::Result<()> {
    script(fake, n);
    let bare = env.work.join("bare-inbox");
    let (bare_time, bare_lat) = bare_inbox(&bare, n)?;

    let dir = env.work.join("inbox");
    ctl_ok(
        env,
        &["channel_bind", "inbox", "--dir", path_str(&dir)?],
        &[],
    )?;
    let mut sent = HashMap::new();
    let phase = Phase::start(daemon, fake);
    let mut answered = 0;
    let mut round_trips = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("{i:05}.txt");
        let id = format!("inbox-{i}");
        std::fs::write(dir.join("tmp").join(&name), format!("{MARK}{id}"))?;
        let t0 = Instant::now();
        std::fs::rename(dir.join("tmp").join(&name), dir.join("new").join(&name))?;
        sent.insert(id, t0);
        if !wait_file(&dir.join("out").join(&name), DEADLINE) {
            println!("inbox: NO REPLY to {name} within {DEADLINE:?}; stopping here");
            break;
        }
        round_trips.push(t0.elapsed());
        answered += 1;
    }
    let (turns, binding) = phase.end(
        (env, daemon, fake),
        "inbox",
        &sent,
        answered,
        &format!("{n} files one at a time"),
        ("rename into new/ -> content read", bare_time, &bare_lat, n),
    );
    // One session holds every message: does a turn cost more as it grows?
    let quarters: Vec<String> = round_trips
        .chunks(round_trips.len().div_ceil(4).max(1))
        .enumerate()
        .map(|(q, c)| {
            let size = round_trips.len().div_ceil(4).max(1);
            let mean = c.iter().sum::<Duration>() / c.len().max(1) as u32;
            format!(
                "{}-{} {:.2}ms",
                q * size + 1,
                q * size + c.len(),
                mean.as_secs_f64() * 1e3
            )
        })
        .collect();
    println!(
        "inbox flytod round trip (file in -> reply in out/) by position in the session: {}",
        quarters.join(", ")
    );
    let replies: Vec<String> = std::fs::read_dir(dir.join("out"))?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    turns.print_check("inbox", n, &replies, &binding);
    Ok(())
}

/// The bare loop: per message, what flytod's inbox does with the file,
/// sequentially in one thread. Latency: the rename into `new/` to the
/// content read.
fn bare_inbox(dir: &Path, n: usize) -> anyhow::Result<(Duration, Vec<u64>)> {
    for sub in ["tmp", "new", "cur", "out"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        let name = format!("{i:05}.txt");
        std::fs::write(dir.join("tmp").join(&name), format!("{MARK}bare-{i}"))?;
        let t0 = Instant::now();
        std::fs::rename(dir.join("tmp").join(&name), dir.join("new").join(&name))?;
        let mut names: Vec<String> = std::fs::read_dir(dir.join("new"))?
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        for found in names {
            let text = std::fs::read_to_string(dir.join("new").join(&found))?;
            if !text.starts_with(MARK) {
                bail!("bare inbox: {found} holds {text:?}");
            }
            lat.push(t0.elapsed().as_nanos() as u64);
            std::fs::rename(dir.join("new").join(&found), dir.join("cur").join(&found))?;
            std::fs::write(dir.join("tmp").join(format!("{found}.out")), REPLY)?;
            std::fs::rename(
                dir.join("tmp").join(format!("{found}.out")),
                dir.join("out").join(&found),
            )?;
        }
    }
    let elapsed = start.elapsed();
    lat.sort_unstable();
    Ok((elapsed, lat))
}

/// Waits for `path` to exist; false after `limit`. Polls every 200 µs (a
/// stat each), so the wait adds at most that to a message's round trip.
fn wait_file(path: &Path, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    false
}

// ---------------------------------------------------------------- telegram

/// Messages per chat: `n` spread as evenly as can be over `chats`.
fn spread(n: usize, chats: usize) -> Vec<usize> {
    (0..chats)
        .map(|c| n / chats + usize::from(c < n % chats))
        .collect()
}

fn chat_id(c: usize) -> i64 {
    FIRST_USER + c as i64
}

/// Chat `id`'s index, if it is one of the first `chats`.
fn chat_index(id: i64, chats: usize) -> Option<usize> {
    usize::try_from(id - FIRST_USER).ok().filter(|&c| c < chats)
}

/// Every chat's first message; answers each chat's next message index.
fn first_messages(
    tg: &FakeTelegram,
    chats: usize,
    sent: &mut HashMap<String, Instant>,
) -> Vec<usize> {
    (0..chats)
        .map(|c| {
            push(tg, c, 0, sent);
            1
        })
        .collect()
}

/// Pushes chat `c`'s message `i`; records when.
fn push(tg: &FakeTelegram, c: usize, i: usize, sent: &mut HashMap<String, Instant>) {
    let id = format!("tg-{c}-{i}");
    let text = format!("{MARK}{id}");
    let t0 = Instant::now();
    tg.push_message(chat_id(c), chat_id(c), &format!("user{c}"), &text);
    sent.insert(id, t0);
}

fn telegram(
    env: &TestEnv,
    daemon: &Daemon,
    fake: &FakeLlm,
    n: usize,
    chats: usize,
) -> anyhow::Result<()> {
    script(fake, n);
    let counts = spread(n, chats);
    let (bare_time, bare_lat) = bare_telegram(&counts)?;

    let tg = FakeTelegram::start(TOKEN);
    let api = tg.api_base();
    ctl_ok(
        env,
        &[
            "channel_bind",
            "telegram",
            "--token-env",
            TOKEN_VAR,
            "--api-base",
            &api,
        ],
        &[(TOKEN_VAR, TOKEN)],
    )?;
    let mut sent = HashMap::new();
    let phase = Phase::start(daemon, fake);
    let start = phase.start;
    let mut next = first_messages(&tg, chats, &mut sent);
    // One driver: each reply lets its chat send the next message.
    let mut seen = 0;
    let deadline = start + PHASE_LIMIT;
    while seen < n && Instant::now() < deadline {
        let more = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tg.wait("a Telegram reply", DEADLINE, |t| t.sent().len() > seen)
        }));
        if more.is_err() {
            println!("telegram: NO REPLY within {DEADLINE:?} after {seen} replies; stopping here");
            break;
        }
        let replies = tg.sent();
        for r in &replies[seen..] {
            let Some(c) = r.chat_id.parse().ok().and_then(|id| chat_index(id, chats)) else {
                println!("telegram: a reply to an unknown chat {:?}", r.chat_id);
                continue;
            };
            if next[c] < counts[c] {
                push(&tg, c, next[c], &mut sent);
                next[c] += 1;
            }
        }
        seen = replies.len();
    }
    let (turns, binding) = phase.end(
        (env, daemon, fake),
        "telegram",
        &sent,
        seen.min(n),
        &format!("{n} messages over {chats} chats, each chat's next after its reply"),
        ("push -> getUpdates answer read", bare_time, &bare_lat, n),
    );
    let replies = tg.sent();
    let mut per_chat = vec![0usize; chats];
    for r in &replies {
        if let Some(c) = r.chat_id.parse().ok().and_then(|id| chat_index(id, chats)) {
            per_chat[c] += 1;
        }
    }
    let off: Vec<String> = (0..chats)
        .filter(|&c| per_chat[c] != counts[c])
        .map(|c| {
            format!(
                "chat {}: {} replies to {}",
                chat_id(c),
                per_chat[c],
                counts[c]
            )
        })
        .collect();
    if !off.is_empty() {
        println!("telegram: replies per chat off: {}", off.join("; "));
    }
    let texts: Vec<String> = replies.into_iter().map(|r| r.text).collect();
    turns.print_check("telegram", n, &texts, &binding);
    Ok(())
}

/// The bare loop, in the same closed-loop shape: one thread long-polls
/// `getUpdates`, answers each message with one `sendMessage` and then
/// lets that chat send its next one. Latency: the push to the
/// `getUpdates` answer holding it read.
fn bare_telegram(counts: &[usize]) -> anyhow::Result<(Duration, Vec<u64>)> {
    let n: usize = counts.iter().sum();
    let tg = FakeTelegram::start(TOKEN);
    let addr = tg.api_base().trim_start_matches("http://").to_string();
    let mut sent = HashMap::new();
    let mut lat = Vec::with_capacity(n);
    let mut offset = 0i64;
    let start = Instant::now();
    let mut next = first_messages(&tg, counts.len(), &mut sent);
    while lat.len() < n {
        if start.elapsed() > PHASE_LIMIT {
            bail!("the bare Telegram loop got {} of {n} messages", lat.len());
        }
        let got = post(
            &addr,
            "getUpdates",
            &json!({"offset": offset, "timeout": 1, "allowed_updates": ["message"]}),
        )?;
        let now = Instant::now();
        for u in got["result"].as_array().into_iter().flatten() {
            offset = u["update_id"].as_i64().unwrap_or(offset) + 1;
            let text = u["message"]["text"].as_str().unwrap_or("");
            let id = text.strip_prefix(MARK).unwrap_or("");
            if let Some(t0) = sent.get(id) {
                lat.push((now - *t0).as_nanos() as u64);
            }
            let chat = u["message"]["chat"]["id"].as_i64().unwrap_or(0);
            post(
                &addr,
                "sendMessage",
                &json!({"chat_id": chat, "text": REPLY}),
            )?;
            if let Some(c) = chat_index(chat, counts.len())
                && next[c] < counts[c]
            {
                push(&tg, c, next[c], &mut sent);
                next[c] += 1;
            }
        }
    }
    let elapsed = start.elapsed();
    lat.sort_unstable();
    Ok((elapsed, lat))
}

/// One Bot API call over a fresh connection, as the fake closes each.
fn post(addr: &str, method: &str, body: &Value) -> anyhow::Result<Value> {
    let body = body.to_string();
    let mut conn = TcpStream::connect(addr).with_context(|| format!("connect to {addr}"))?;
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    conn.set_nodelay(true)?;
    write!(
        conn,
        "POST /bot{TOKEN}/{method} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer)?;
    let (_, json) = answer
        .split_once("\r\n\r\n")
        .with_context(|| format!("{method}: no HTTP body in {answer:?}"))?;
    serde_json::from_str(json).with_context(|| format!("{method}: not JSON: {json:?}"))
}

// ---------------------------------------------------------------- shared

fn path_str(p: &Path) -> anyhow::Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

fn ctl_ok(env: &TestEnv, args: &[&str], vars: &[(&str, &str)]) -> anyhow::Result<()> {
    let out = env.ctl_with(args, vars, None);
    if out.code != 0 {
        bail!("flytoctl {}: {}", args.join(" "), out.stderr.trim());
    }
    Ok(())
}

/// The binding's `channel_list` entry once nothing is queued or pending
/// (or as it is after a short wait).
fn settled(env: &TestEnv, name: &str) -> Value {
    let entry = || -> Option<Value> {
        let out = env.ctl(&["channel_list", "--json"]);
        let v: Value = serde_json::from_str(&out.stdout).ok()?;
        v["channels"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let e = entry().unwrap_or(Value::Null);
        if (e["queued"] == 0 && e["outbox_pending"] == 0) || Instant::now() >= deadline {
            return e;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The message id of a turn's model request: its last `user` message is
/// the message. Other requests (memory extraction quotes the turns in its
/// own prompt) have none.
fn prompt_id(body: &Value) -> Option<String> {
    let m = body["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "user")?;
    let text = m["content"]
        .as_str()
        .map_or_else(|| m["content"].to_string(), str::to_string);
    let rest = text.strip_prefix(MARK)?;
    Some(
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect(),
    )
}

/// The model requests since `base`, matched to the messages sent.
struct Turns {
    /// Sorted: message in to its first model request, ns.
    latencies: Vec<u64>,
    requests: usize,
    /// Messages with more than one request (a turn run twice).
    twice: usize,
    /// Requests not for a message's turn (memory extraction, say).
    other: usize,
    /// Messages with no request.
    missing: usize,
}

fn turn_starts(fake: &FakeLlm, base: usize, sent: &HashMap<String, Instant>) -> Turns {
    let seen = fake.seen();
    let seen = seen.get(base..).unwrap_or(&[]);
    // Requests arrive in order: the first one seen for a message is its
    // turn's start.
    let mut earliest: HashMap<&str, Instant> = HashMap::new();
    let (mut twice, mut other) = (0, 0);
    for s in seen {
        match prompt_id(&s.body).and_then(|id| sent.get_key_value(id.as_str())) {
            Some((id, _)) => {
                if earliest.contains_key(id.as_str()) {
                    twice += 1;
                } else {
                    earliest.insert(id.as_str(), s.at);
                }
            }
            None => other += 1,
        }
    }
    let mut latencies: Vec<u64> = earliest
        .iter()
        .filter_map(
            |(id, at)| Some(at.saturating_duration_since(*sent.get(*id)?).as_nanos() as u64),
        )
        .collect();
    latencies.sort_unstable();
    Turns {
        missing: sent.len() - earliest.len(),
        latencies,
        requests: seen.len(),
        twice,
        other,
    }
}

impl Turns {
    /// `replies`: the text of every reply that arrived.
    fn print_check(&self, what: &str, n: usize, replies: &[String], binding: &Value) {
        let wrong = replies.iter().filter(|r| r.trim() != REPLY).count();
        let ok = self.twice == 0 && self.missing == 0 && replies.len() == n && wrong == 0;
        println!(
            "{what} check: {n} messages, {} model requests, {} messages without a turn, {} turns run twice, {} other requests (not a message's turn: memory extraction every 5 turns by default), {} replies ({wrong} not the model's answer); channel_list: sent {}, queued {}, outbox pending {}, dropped {}, state {} {}",
            self.requests,
            self.missing,
            self.twice,
            self.other,
            replies.len(),
            binding["sent"],
            binding["queued"],
            binding["outbox_pending"],
            binding["dropped"],
            binding["state"],
            if ok { "ok" } else { "MISBEHAVED" }
        );
    }
}

/// One timed run through flytod: when it began, flytod's CPU and the
/// model requests before it.
struct Phase {
    start: Instant,
    cpu: u64,
    base: usize,
}

impl Phase {
    fn start(daemon: &Daemon, fake: &FakeLlm) -> Phase {
        Phase {
            base: fake.request_count(),
            cpu: stat_cpu_ns(daemon.pid()),
            start: Instant::now(),
        }
    }

    /// Ends the run after `answered` replies to the messages `sent`:
    /// prints its figures next to the bare loop's (`(what its latency
    /// spans, time, sorted latencies, messages)`); answers the turns and
    /// the binding's `channel_list` entry once settled.
    fn end(
        self,
        (env, daemon, fake): (&TestEnv, &Daemon, &FakeLlm),
        binding: &str,
        sent: &HashMap<String, Instant>,
        answered: usize,
        shape: &str,
        (bare_latency, bare_time, bare_lat, bare_n): (&str, Duration, &[u64], usize),
    ) -> (Turns, Value) {
        let elapsed = self.start.elapsed();
        let cpu = stat_cpu_ns(daemon.pid()).saturating_sub(self.cpu);
        let turns = turn_starts(fake, self.base, sent);
        let entry = settled(env, binding);
        print_pair(
            binding,
            shape,
            bare_latency,
            (bare_time, bare_lat, bare_n),
            (elapsed, &turns.latencies, answered),
            cpu,
        );
        (turns, entry)
    }
}

fn ms(ns: u64) -> String {
    format!("{:.2}ms", ns as f64 / 1e6)
}

/// The bare loop's line, flytod's, their ratios and flytod's CPU (`cpu`,
/// ns over the run). `(time, sorted latencies, messages)` each.
fn print_pair(
    what: &str,
    shape: &str,
    bare_latency: &str,
    bare: (Duration, &[u64], usize),
    flytod: (Duration, &[u64], usize),
    cpu: u64,
) {
    let per = |(t, _, n): (Duration, &[u64], usize)| t.as_secs_f64() / n.max(1) as f64;
    let (bare_per, flytod_per) = (per(bare), per(flytod));
    // Both lines alike: messages/s, time per message, latency p50/p99/max.
    let line = |who: &str, (_, lat, n): (Duration, &[u64], usize), per: f64, spans: &str| {
        println!(
            "{what} {who}: {n} messages ({shape}), {:.1} messages/s, {:.3}ms per message; latency ({spans}) p50 {} p99 {} max {}",
            1.0 / per.max(1e-12),
            per * 1e3,
            ms(percentile(lat, 0.5)),
            ms(percentile(lat, 0.99)),
            ms(lat.last().copied().unwrap_or(0)),
        );
    };
    line("bare loop", bare, bare_per, bare_latency);
    line(
        "flytod",
        flytod,
        flytod_per,
        "message in -> model request; messages/s: message in -> reply out",
    );
    println!(
        "{what} ratio: flytod's time per message {:.0}x the bare loop's; latency p50 {:.0}x",
        flytod_per / bare_per.max(1e-12),
        percentile(flytod.1, 0.5) as f64 / percentile(bare.1, 0.5).max(1) as f64,
    );
    println!(
        "{what} flytod CPU: {:.2}ms per message (utime+stime of flytod over the run, turns included)",
        cpu as f64 / 1e6 / flytod.2.max(1) as f64
    );
}
