//! The `sessions` benchmark: agent runs through the real release flytod
//! against the tokio fake provider of `stream_server.rs` (a child process).
//!
//! 1. CPU per streamed delta: `runs` concurrent `session_send` streams,
//!    each run streaming `deltas` text deltas and one `read` tool call,
//!    then a short final answer; flytod's CPU time (utime + stime from
//!    /proc/<pid>/stat) per text delta delivered to the clients, next to
//!    a bare reqwest + eventsource-stream reader of the same stream from
//!    the same server, run in this process with the same concurrency (this
//!    process's CPU time while only the reader runs).
//! 2. flytod's peak RSS (VmHWM) during those runs.
//! 3. Cancel latency: runs on a stream of one delta per second, each
//!    cancelled with `session_cancel` on a second connection at a random
//!    point; from sending the cancel to the `Cancelled` event on the stream.
//! 4. Idle RSS per stored session: `sessions` sessions with one short
//!    exchange each, actors stopped by `[sessions] idle_stop = "1s"`.

use super::stream_server::{FINAL_TEXT, TOOL_FILE};
use crate::{machine, mb, memory_kb, percentile, verdict};
use anyhow::{Context, bail};
use eventsource_stream::Eventsource;
use flyto_protocol::framing;
use flyto_protocol::{Event, PROTOCOL_VERSION, Request, Response, SessionEvent};
use flyto_tests::{Daemon, TestEnv};
use futures_util::StreamExt;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

/// What the `sessions` benchmark runs.
pub struct Args {
    pub runs: usize,
    pub deltas: usize,
    pub interval: Duration,
    pub cancels: usize,
    pub sessions: usize,
}

/// No phase may take longer than this (the bench fails instead of hanging).
const PHASE_LIMIT: Duration = Duration::from_secs(300);

pub fn run(args: &Args) -> anyhow::Result<()> {
    let total = Instant::now();
    machine();
    raise_nofile_limit();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    println!("load average at the start: {}", loadavg());
    // First, while this process is as small as a fresh flytod.
    crate::sandbox::run(&rt)?;
    crate::mcp::run(&rt)?;
    let server = StreamServer::spawn(args.deltas, args.interval)?;
    streaming(&rt, &server, args)?;
    idle_sessions(&rt, &server, args.sessions)?;
    println!("sessions done in {:.1}s", total.elapsed().as_secs_f64());
    Ok(())
}

// ---------------------------------------------------------------- helpers

/// The soft RLIMIT_NOFILE raised to the hard one; flytod inherits it (it
/// needs a socket per client plus one per provider stream).
fn raise_nofile_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write a plain-data struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    println!("open files limit (inherited by flytod): {}", lim.rlim_cur);
}

/// utime + stime of a process (every thread, live or exited), in ns.
fn proc_cpu_ns(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    f.iter().sum::<u64>() * 1_000_000_000 / hz
}

fn us_f(ns: f64) -> String {
    format!("{:.2}us", ns / 1000.0)
}

fn ms(d: Duration) -> String {
    format!("{:.2}ms", d.as_secs_f64() * 1000.0)
}

fn secs(ns: u64) -> String {
    format!("{:.2}s", ns as f64 / 1e9)
}

/// The first three fields of /proc/loadavg: other work on the machine
/// shows in the tails.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A tiny xorshift generator for the cancel points.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The stream server child; killed when dropped.
pub struct StreamServer {
    child: Child,
    port: u16,
}

impl StreamServer {
    fn spawn(deltas: usize, interval: Duration) -> anyhow::Result<StreamServer> {
        let exe = std::env::current_exe().context("own executable")?;
        let mut child = Command::new(exe)
            .arg("stream-server")
            .arg("--deltas")
            .arg(deltas.to_string())
            .arg("--delta-interval-ms")
            .arg(interval.as_millis().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .context("spawn the stream server")?;
        let stdout = child.stdout.take().context("stream server stdout")?;
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        let port = line
            .trim()
            .strip_prefix("ready ")
            .and_then(|p| p.parse().ok());
        let mut server = StreamServer { child, port: 0 };
        match port {
            Some(p) => server.port = p,
            None => bail!("the stream server did not start (said {line:?})"),
        }
        Ok(server)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn url(&self, route: &str) -> String {
        format!("http://127.0.0.1:{}/{route}/v1", self.port)
    }
}

impl Drop for StreamServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(server: &StreamServer, main: &str, idle_stop: Option<&str>) -> String {
    let mut c = String::from(
        "[daemon]\nshutdown_grace = \"1s\"\nlog_level = \"warn\"\nmax_connections = 8192\nmax_inflight = 16384\n\n[plans]\nkill_grace = \"200ms\"\n\n",
    );
    if let Some(idle) = idle_stop {
        c.push_str(&format!("[sessions]\nidle_stop = \"{idle}\"\n\n"));
    }
    for route in ["stream", "slow", "short"] {
        c.push_str(&format!(
            "[models.{route}]\napi = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\ninput_price = 1.0\noutput_price = 2.0\n\n",
            server.url(route)
        ));
    }
    // A session's `model` names a role (main or fast), not a profile.
    c.push_str(&format!("[roles]\nmain = \"{main}\"\nfast = \"slow\"\n"));
    c
}

/// flytod with no proxy in the way of the loopback server.
fn start(env: &TestEnv) -> anyhow::Result<Daemon> {
    env.try_start(&[
        ("NO_PROXY", "127.0.0.1,localhost"),
        ("no_proxy", "127.0.0.1,localhost"),
    ])
    .map_err(|log| anyhow::anyhow!("flytod did not become ready:\n{log}"))
}

/// A protocol connection on tokio: 4-byte big-endian length + bincode.
struct Conn {
    r: BufReader<OwnedReadHalf>,
    w: OwnedWriteHalf,
}

impl Conn {
    async fn connect(sock: &Path) -> anyhow::Result<Conn> {
        let s = UnixStream::connect(sock)
            .await
            .with_context(|| format!("connect to {}", sock.display()))?;
        let (r, w) = s.into_split();
        let mut c = Conn {
            r: BufReader::with_capacity(64 * 1024, r),
            w,
        };
        match c
            .call(&Request::Hello {
                protocol: PROTOCOL_VERSION,
                client: "flyto-bench".into(),
            })
            .await?
        {
            Response::Welcome { .. } => Ok(c),
            other => bail!("unexpected answer to hello: {other:?}"),
        }
    }

    async fn send(&mut self, req: &Request) -> anyhow::Result<()> {
        self.w.write_all(&framing::frame(req)?).await?;
        Ok(())
    }

    async fn recv(&mut self) -> anyhow::Result<Response> {
        let mut header = [0u8; 4];
        self.r
            .read_exact(&mut header)
            .await
            .context("flytod closed the connection")?;
        let mut payload = vec![0u8; u32::from_be_bytes(header) as usize];
        self.r.read_exact(&mut payload).await?;
        Ok(framing::decode(&payload)?)
    }

    async fn call(&mut self, req: &Request) -> anyhow::Result<Response> {
        self.send(req).await?;
        self.recv().await
    }

    async fn new_session(&mut self, workdir: &Path, model: Option<&str>) -> anyhow::Result<String> {
        match self
            .call(&Request::SessionNew {
                name: None,
                workdir: Some(workdir.display().to_string()),
                model: model.map(str::to_string),
                sandbox: None,
                network: None,
            })
            .await?
        {
            Response::Session { session } => Ok(session.id),
            other => bail!("unexpected answer to session_new: {other:?}"),
        }
    }

    /// The next session event of a send stream; `None` at `End`.
    async fn event(&mut self) -> anyhow::Result<Option<SessionEvent>> {
        match self.recv().await? {
            Response::Event {
                event: Event::Session { event, .. },
                ..
            } => Ok(Some(event)),
            Response::End {} => Ok(None),
            other => bail!("unexpected answer in a session stream: {other:?}"),
        }
    }

    async fn stats(&mut self) -> anyhow::Result<flyto_protocol::DaemonStats> {
        match self.call(&Request::Stats {}).await? {
            Response::Stats { stats } => Ok(stats),
            other => bail!("unexpected answer to stats: {other:?}"),
        }
    }
}

/// `n` sessions created over a few connections.
async fn create_sessions(
    sock: &Path,
    n: usize,
    workdir: &Path,
    model: Option<&str>,
) -> anyhow::Result<Vec<String>> {
    let workers = 16.min(n.max(1));
    let mut set = tokio::task::JoinSet::new();
    for w in 0..workers {
        let (sock, workdir) = (sock.to_path_buf(), workdir.to_path_buf());
        let model = model.map(str::to_string);
        set.spawn(async move {
            let mut c = Conn::connect(&sock).await?;
            let mut ids = Vec::new();
            for _ in (w..n).step_by(workers) {
                ids.push(c.new_session(&workdir, model.as_deref()).await?);
            }
            anyhow::Ok(ids)
        });
    }
    let mut ids = Vec::with_capacity(n);
    while let Some(r) = set.join_next().await {
        ids.extend(r??);
    }
    Ok(ids)
}

/// What a client saw of one run.
#[derive(Default)]
struct RunSeen {
    deltas: u64,
    tool_results: u64,
    tool_errors: u64,
    last_delta: String,
    /// The event that ended the run, if any.
    end: Option<SessionEvent>,
}

/// Reads a send stream to its `End`.
async fn read_run(c: &mut Conn) -> anyhow::Result<RunSeen> {
    let mut seen = RunSeen::default();
    while let Some(ev) = c.event().await? {
        match ev {
            SessionEvent::Text { delta } => {
                seen.deltas += 1;
                seen.last_delta = delta;
            }
            SessionEvent::ToolResult { is_error, .. } => {
                seen.tool_results += 1;
                seen.tool_errors += u64::from(is_error);
            }
            e if e.ends_run() => seen.end = Some(e),
            _ => {}
        }
    }
    Ok(seen)
}

async fn limit<T>(what: &str, f: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::time::timeout(PHASE_LIMIT, f)
        .await
        .map_err(|_| anyhow::anyhow!("{what} took more than {PHASE_LIMIT:?}"))?
}

// ---------------------------------------------------------------- 1-3. streaming runs

/// The CPU time a set of streams cost, and what they delivered.
#[derive(Default)]
struct Measured {
    deltas: u64,
    cpu_ns: u64,
    server_cpu_ns: u64,
    wall: Duration,
}

impl Measured {
    fn per_delta(&self) -> f64 {
        self.cpu_ns as f64 / self.deltas.max(1) as f64
    }
}

fn streaming(
    rt: &tokio::runtime::Runtime,
    server: &StreamServer,
    args: &Args,
) -> anyhow::Result<()> {
    let (runs, deltas) = (args.runs, args.deltas);
    if runs == 0 {
        return cancel_only(rt, server, args.cancels);
    }
    println!(
        "\n== {runs} concurrent runs: {deltas} text deltas ({} apart) + one `read` tool call + a short answer each ==",
        if args.interval.is_zero() {
            "back to back".to_string()
        } else {
            format!("{}ms", args.interval.as_millis())
        }
    );
    let env = TestEnv::new(&config(server, "stream", None));
    let workdir = env.work.join("bench");
    std::fs::create_dir_all(&workdir)?;
    std::fs::write(workdir.join(TOOL_FILE), "a short note the agent reads\n")?;
    let daemon = start(&env)?;
    let pid = daemon.pid() as u32;

    let sock = env.sock.clone();
    // Rounds alternate, reader / flytod / reader / flytod / reader, so that
    // noise from the rest of the machine hits both alike.
    let mut readers =
        vec![rt.block_on(limit("the baseline reader", baseline(server, runs, false)))?];
    let mut rounds = Vec::new();
    let mut seen = Vec::new();
    let mut first_round = None;
    for round in 0..2 {
        let ids = rt.block_on(limit(
            "session_new",
            create_sessions(&sock, runs, &workdir, None),
        ))?;
        let (_, rss_before) = memory_kb(pid as i32);
        let (round_seen, m, clients_cpu) =
            rt.block_on(limit("the daemon runs", daemon_round(&sock, ids, server)))?;
        if round == 0 {
            let (hwm, rss_after) = memory_kb(pid as i32);
            first_round = Some((hwm, rss_before, rss_after));
        }
        seen.extend(round_seen);
        rounds.push((m, clients_cpu));
        readers.push(rt.block_on(limit("the baseline reader", baseline(server, runs, false)))?);
    }
    let (hwm, rss_before, rss_after) = first_round.unwrap_or_default();
    let json_reader = rt.block_on(limit("the baseline reader", baseline(server, runs, true)))?;
    let total = |ms: &mut dyn Iterator<Item = &Measured>| {
        ms.fold(Measured::default(), |mut a, m| {
            a.deltas += m.deltas;
            a.cpu_ns += m.cpu_ns;
            a.server_cpu_ns += m.server_cpu_ns;
            a.wall += m.wall;
            a
        })
    };
    let daemon_m = total(&mut rounds.iter().map(|(m, _)| m));
    let reader_m = total(&mut readers.iter());
    let clients_cpu: u64 = rounds.iter().map(|(_, c)| c).sum();
    let runs_total = runs * rounds.len();

    let done = seen
        .iter()
        .filter(|s| matches!(&s.end, Some(SessionEvent::Done { stop, .. }) if stop == "end_turn"))
        .count();
    let tools_ok = seen
        .iter()
        .filter(|s| s.tool_results == 1 && s.tool_errors == 0)
        .count();
    let answered = seen.iter().filter(|s| s.last_delta == FINAL_TEXT).count();
    let expected = (runs_total * (deltas + 1)) as u64;
    println!(
        "flytod runs (2 rounds): {done}/{runs_total} done (end_turn), {tools_ok} with one successful tool result, {answered} ending with the final answer; {} text deltas delivered (expected {expected}) in {:.1}s ({:.0} deltas/s)",
        daemon_m.deltas,
        daemon_m.wall.as_secs_f64(),
        daemon_m.deltas as f64 / daemon_m.wall.as_secs_f64()
    );
    if let Some(bad) = seen
        .iter()
        .find(|s| !matches!(&s.end, Some(SessionEvent::Done { stop, .. }) if stop == "end_turn"))
    {
        println!("first run that did not end with end_turn: {:?}", bad.end);
    }
    let per = |ms: &mut dyn Iterator<Item = &Measured>| {
        ms.map(|m| us_f(m.per_delta()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "rounds, CPU per delta: reqwest+SSE reader {}; flytod {}",
        per(&mut readers.iter()),
        per(&mut rounds.iter().map(|(m, _)| m))
    );
    for (name, m) in [
        ("reqwest+SSE reader (3 rounds)", &reader_m),
        ("reqwest+SSE reader + serde_json", &json_reader),
        ("flytod (2 rounds)", &daemon_m),
    ] {
        println!(
            "{name}: {} deltas in {:.1}s, CPU {} ({} per delta), stream server CPU {}",
            m.deltas,
            m.wall.as_secs_f64(),
            secs(m.cpu_ns),
            us_f(m.per_delta()),
            secs(m.server_cpu_ns)
        );
    }
    println!(
        "bench clients of flytod: CPU {} ({} per delta)",
        secs(clients_cpu),
        us_f(clients_cpu as f64 / daemon_m.deltas.max(1) as f64)
    );
    let base = reader_m.per_delta();
    let ratio = daemon_m.per_delta() / base.max(1.0);
    println!(
        "sessions CPU per delta: flytod {} (reqwest+SSE reader {}) ratio {ratio:.2} (target <= 3) {}",
        us_f(daemon_m.per_delta()),
        us_f(base),
        verdict(ratio <= 3.0)
    );
    println!(
        "sessions CPU per delta against reqwest+SSE+serde_json: ratio {:.2} (reader {})",
        daemon_m.per_delta() / json_reader.per_delta().max(1.0),
        us_f(json_reader.per_delta())
    );
    println!(
        "sessions daemon peak RSS: VmHWM {} during {runs} concurrent runs (target < 300 MB) {}; VmRSS {} before the runs, {} after (actors still live), VmHWM {} after the second round (another {runs} sessions)",
        mb(hwm),
        verdict(hwm < 300 * 1024),
        mb(rss_before),
        mb(rss_after),
        mb(memory_kb(pid as i32).0)
    );

    cancel_latency(rt, &env, &workdir, args.cancels)?;
    daemon.terminate();
    Ok(())
}

/// One `session_send` per session, all at once, each read to its end; what
/// the clients saw, flytod's CPU for it, and this process's (the clients').
async fn daemon_round(
    sock: &Path,
    ids: Vec<String>,
    server: &StreamServer,
) -> anyhow::Result<(Vec<RunSeen>, Measured, u64)> {
    let mut conns = Vec::with_capacity(ids.len());
    for _ in 0..ids.len() {
        conns.push(Conn::connect(sock).await?);
    }
    let pid = daemon_pid(&mut conns[0]).await?;
    let me = std::process::id();
    let (cpu0, srv0, me0) = (proc_cpu_ns(pid), proc_cpu_ns(server.pid()), proc_cpu_ns(me));
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (mut c, id) in conns.into_iter().zip(ids) {
        set.spawn(async move {
            c.send(&Request::SessionSend {
                id,
                text: format!("read {TOOL_FILE} and tell me what it says"),
                can_approve: false,
            })
            .await?;
            read_run(&mut c).await
        });
    }
    let mut seen = Vec::new();
    while let Some(r) = set.join_next().await {
        seen.push(r??);
    }
    let m = Measured {
        deltas: seen.iter().map(|s| s.deltas).sum(),
        cpu_ns: proc_cpu_ns(pid) - cpu0,
        server_cpu_ns: proc_cpu_ns(server.pid()) - srv0,
        wall: t.elapsed(),
    };
    Ok((seen, m, proc_cpu_ns(me) - me0))
}

async fn daemon_pid(c: &mut Conn) -> anyhow::Result<u32> {
    match c.call(&Request::Ping {}).await? {
        Response::Pong { pid, .. } => Ok(pid),
        other => bail!("unexpected answer to ping: {other:?}"),
    }
}

/// Only the cancel latency (`--runs 0`), on a daemon of its own.
fn cancel_only(
    rt: &tokio::runtime::Runtime,
    server: &StreamServer,
    n: usize,
) -> anyhow::Result<()> {
    if n == 0 {
        return Ok(());
    }
    let env = TestEnv::new(&config(server, "stream", None));
    let workdir = env.work.join("bench");
    std::fs::create_dir_all(&workdir)?;
    let daemon = start(&env)?;
    cancel_latency(rt, &env, &workdir, n)?;
    daemon.terminate();
    Ok(())
}

/// `runs` concurrent readers of the `stream` route: reqwest + eventsource,
/// counting content deltas; `json` also parses each event's data.
async fn baseline(server: &StreamServer, runs: usize, json: bool) -> anyhow::Result<Measured> {
    let client = reqwest::Client::builder().no_proxy().build()?;
    let url = format!("{}/chat/completions", server.url("stream"));
    let body = serde_json::json!({
        "model": "fake-model",
        "stream": true,
        "messages": [{"role": "user", "content": format!("read {TOOL_FILE} and tell me what it says")}],
    })
    .to_string();
    let me = std::process::id();
    let (cpu0, srv0) = (proc_cpu_ns(me), proc_cpu_ns(server.pid()));
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..runs {
        let req = client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(body.clone());
        set.spawn(async move {
            let resp = req.send().await?.error_for_status()?;
            let mut events = resp.bytes_stream().eventsource();
            let mut deltas = 0u64;
            while let Some(ev) = events.next().await {
                let ev = ev.map_err(|e| anyhow::anyhow!("SSE: {e}"))?;
                if ev.data == "[DONE]" {
                    break;
                }
                if json {
                    let v: serde_json::Value = serde_json::from_str(&ev.data)?;
                    deltas += u64::from(v["choices"][0]["delta"]["content"].is_string());
                } else {
                    deltas += u64::from(ev.data.contains("\"content\":\""));
                }
            }
            anyhow::Ok(deltas)
        });
    }
    let mut deltas = 0;
    while let Some(r) = set.join_next().await {
        deltas += r??;
    }
    Ok(Measured {
        deltas,
        wall: t.elapsed(),
        cpu_ns: proc_cpu_ns(me) - cpu0,
        server_cpu_ns: proc_cpu_ns(server.pid()) - srv0,
    })
}

fn cancel_latency(
    rt: &tokio::runtime::Runtime,
    env: &TestEnv,
    workdir: &Path,
    n: usize,
) -> anyhow::Result<()> {
    if n == 0 {
        return Ok(());
    }
    println!(
        "\n== cancel latency: {n} concurrent runs on a stream of one delta per second, session_cancel at a random point ==",
    );
    let sock = env.sock.clone();
    let ids = rt.block_on(limit(
        "session_new",
        create_sessions(&sock, n, workdir, Some("fast")),
    ))?;
    // Same-run baseline: the run's end is announced once it is durable, so
    // the disk's fdatasync latency is part of every cancel.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let syncer = {
        let (stop, dir) = (stop.clone(), env.state.clone());
        std::thread::spawn(move || fdatasync_latencies(&dir, &stop))
    };
    let results = rt.block_on(limit("the cancels", async {
        let mut set = tokio::task::JoinSet::new();
        for (i, id) in ids.into_iter().enumerate() {
            let sock = sock.clone();
            set.spawn(async move {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((i as u64 + 1) * 0x2545_F491_4F6C_DD1D));
                let mut stream = Conn::connect(&sock).await?;
                let mut ctl = Conn::connect(&sock).await?;
                stream
                    .send(&Request::SessionSend {
                        id: id.clone(),
                        text: "write slowly".into(),
                        can_approve: false,
                    })
                    .await?;
                // The stream is read all along, each event stamped when it
                // is decoded, so no delta waits in a buffer.
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let reader = tokio::spawn(async move {
                    while let Some(ev) = stream.event().await? {
                        let _ = tx.send((Instant::now(), ev));
                    }
                    anyhow::Ok(())
                });
                // Streaming: the first delta is there.
                loop {
                    match rx.recv().await {
                        Some((_, SessionEvent::Text { .. })) => break,
                        Some((_, e)) if e.ends_run() => {
                            bail!("the run ended before streaming: {e:?}")
                        }
                        Some(_) => {}
                        None => bail!("the stream ended before the first delta"),
                    }
                }
                tokio::time::sleep(Duration::from_millis(100 + rng.next() % 2000)).await;
                // Baseline: a ping on the same connection just before, which
                // the connection task answers alone (machine noise shows in
                // both).
                let t = Instant::now();
                match ctl.call(&Request::Ping {}).await? {
                    Response::Pong { .. } => {}
                    other => bail!("unexpected answer to ping: {other:?}"),
                }
                let ping = t.elapsed();
                let t = Instant::now();
                ctl.send(&Request::SessionCancel { id }).await?;
                // The answer to session_cancel is read on its own, while the
                // stream is awaited.
                let answer = tokio::spawn(async move {
                    match ctl.recv().await? {
                        Response::Session { .. } => anyhow::Ok(t.elapsed()),
                        other => bail!("unexpected answer to session_cancel: {other:?}"),
                    }
                });
                let mut deltas_after = 0;
                let latency = loop {
                    match rx.recv().await {
                        Some((at, SessionEvent::Cancelled { .. })) => break at.duration_since(t),
                        Some((at, SessionEvent::Text { .. })) => {
                            deltas_after += u32::from(at > t);
                        }
                        Some((_, e)) if e.ends_run() => {
                            bail!("the run ended with {e:?}, not Cancelled")
                        }
                        Some(_) => {}
                        None => bail!("the stream ended without Cancelled"),
                    }
                };
                let answered = answer.await??;
                reader.await??;
                if rx.recv().await.is_some() {
                    bail!("events after Cancelled");
                }
                anyhow::Ok((latency, answered, deltas_after, ping))
            });
        }
        let mut out = Vec::new();
        while let Some(r) = set.join_next().await {
            out.push(r??);
        }
        anyhow::Ok(out)
    }))?;
    stop.store(true, Ordering::Relaxed);
    let syncs = syncer
        .join()
        .map_err(|_| anyhow::anyhow!("the fdatasync thread panicked"))??;
    let mut lat: Vec<u64> = results.iter().map(|r| r.0.as_nanos() as u64).collect();
    let mut answered: Vec<u64> = results.iter().map(|r| r.1.as_nanos() as u64).collect();
    let mut ping: Vec<u64> = results.iter().map(|r| r.3.as_nanos() as u64).collect();
    lat.sort_unstable();
    answered.sort_unstable();
    ping.sort_unstable();
    let late = results.iter().filter(|r| r.2 > 0).count();
    let d = |ns: u64| ms(Duration::from_nanos(ns));
    let p99 = percentile(&lat, 0.99);
    println!(
        "cancel latency (cancel sent -> Cancelled event): p50 {} p90 {} p99 {} max {} over {} runs (target p99 < 10ms) {}",
        d(percentile(&lat, 0.5)),
        d(percentile(&lat, 0.9)),
        d(p99),
        d(*lat.last().unwrap_or(&0)),
        lat.len(),
        verdict(p99 < 10_000_000)
    );
    println!(
        "cancel baselines: fdatasync of 200 bytes in the state dir meanwhile (the Cancelled event waits for one) p50 {} p90 {} p99 {} max {} ({} syncs); ping just before each cancel p50 {} p99 {}",
        d(percentile(&syncs, 0.5)),
        d(percentile(&syncs, 0.9)),
        d(percentile(&syncs, 0.99)),
        d(*syncs.last().unwrap_or(&0)),
        syncs.len(),
        d(percentile(&ping, 0.5)),
        d(percentile(&ping, 0.99)),
    );
    println!(
        "cancel detail: session_cancel answered p50 {} p99 {}; {late} runs streamed a delta between the cancel and Cancelled; load average {}",
        d(percentile(&answered, 0.5)),
        d(percentile(&answered, 0.99)),
        loadavg()
    );
    Ok(())
}

/// Appends 200 bytes and fdatasyncs, every 10 ms until `stop`; sorted
/// latencies in ns.
fn fdatasync_latencies(
    dir: &Path,
    stop: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<Vec<u64>> {
    use std::io::Write;
    let path = dir.join("bench-fdatasync");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        f.write_all(&[b'x'; 200])?;
        f.sync_data()?;
        out.push(t.elapsed().as_nanos() as u64);
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(f);
    std::fs::remove_file(&path)?;
    out.sort_unstable();
    Ok(out)
}

// ---------------------------------------------------------------- 4. idle sessions

/// `n` sessions with one short exchange each, `workers` at a time.
async fn exchanges(sock: &Path, workdir: &Path, n: usize, workers: usize) -> anyhow::Result<usize> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..workers.min(n.max(1)) {
        let (sock, workdir, next) = (sock.to_path_buf(), workdir.to_path_buf(), next.clone());
        set.spawn(async move {
            let mut c = Conn::connect(&sock).await?;
            let mut done = 0;
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let id = c.new_session(&workdir, None).await?;
                c.send(&Request::SessionSend {
                    id,
                    text: "hi".into(),
                    can_approve: false,
                })
                .await?;
                let seen = read_run(&mut c).await?;
                if !matches!(&seen.end, Some(SessionEvent::Done { .. })) {
                    bail!("a short exchange ended with {:?}", seen.end);
                }
                done += 1;
            }
            anyhow::Ok(done)
        });
    }
    let mut done = 0;
    while let Some(r) = set.join_next().await {
        done += r??;
    }
    Ok(done)
}

/// Waits until no run is active, then long enough for every actor's idle
/// stop (time-driven, and not visible through the protocol).
async fn settle(sock: &Path, idle_stop: Duration) -> anyhow::Result<()> {
    let mut c = Conn::connect(sock).await?;
    while c.stats().await?.sessions_running > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(idle_stop * 2 + Duration::from_millis(500)).await;
    Ok(())
}

fn idle_sessions(
    rt: &tokio::runtime::Runtime,
    server: &StreamServer,
    n: usize,
) -> anyhow::Result<()> {
    if n == 0 {
        return Ok(());
    }
    let idle_stop = Duration::from_secs(1);
    println!(
        "\n== {n} stored sessions, one short exchange each, actors stopped by idle_stop = \"1s\" =="
    );
    let env = TestEnv::new(&config(server, "short", Some("1s")));
    let workdir: PathBuf = env.work.join("bench");
    std::fs::create_dir_all(&workdir)?;
    let daemon = start(&env)?;
    let pid = daemon.pid();
    let sock = env.sock.clone();
    let (_, rss_fresh) = memory_kb(pid);
    // Warm-up: one-time allocations (HTTP client, caches, thread stacks)
    // are not per-session costs.
    let warm = 64.min(n);
    rt.block_on(limit("the warm-up", async {
        exchanges(&sock, &workdir, warm, 32).await?;
        settle(&sock, idle_stop).await
    }))?;
    let (_, rss_before) = memory_kb(pid);
    let cpu0 = proc_cpu_ns(pid as u32);
    let t = Instant::now();
    let done = rt.block_on(limit("the exchanges", exchanges(&sock, &workdir, n, 64)))?;
    let fill = t.elapsed();
    let cpu = proc_cpu_ns(pid as u32) - cpu0;
    let (hwm_fill, rss_filled) = memory_kb(pid);
    rt.block_on(limit("the idle stop", settle(&sock, idle_stop)))?;
    let (_, rss_after) = memory_kb(pid);
    let stats = rt.block_on(async { Conn::connect(&sock).await?.stats().await })?;
    println!(
        "fill: {done} sessions with one exchange each in {:.1}s ({:.0}/s, 64 clients), flytod CPU {} per exchange; {} sessions stored, db {:.1} MB",
        fill.as_secs_f64(),
        done as f64 / fill.as_secs_f64(),
        us_f(cpu as f64 / done.max(1) as f64),
        stats.sessions,
        stats.db_bytes as f64 / 1e6
    );
    daemon.terminate();
    let daemon = start(&env)?;
    rt.block_on(async { Conn::connect(&sock).await?.call(&Request::Ping {}).await })?;
    let (_, rss_restart) = memory_kb(daemon.pid());
    daemon.terminate();
    // KB per session.
    let per = |after: u64, before: u64| after.saturating_sub(before) as f64 / n as f64;
    let restarted = per(rss_restart, rss_fresh);
    println!(
        "idle RSS per stored session (after a restart): {restarted:.1} KB (VmRSS {} with {} sessions stored, {} for a fresh daemon with none) (target < 16 KB) {}",
        mb(rss_restart),
        stats.sessions,
        mb(rss_fresh),
        verdict(restarted < 16.0)
    );
    let same = per(rss_after, rss_before);
    println!(
        "idle RSS per stored session (same process, every actor stopped): {same:.1} KB (VmRSS {} after the warm-up, {} right after the exchanges, {} once idle; VmHWM {}) (target < 16 KB) {}",
        mb(rss_before),
        mb(rss_filled),
        mb(rss_after),
        mb(hwm_fill),
        verdict(same < 16.0)
    );
    Ok(())
}
