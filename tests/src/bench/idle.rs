//! `flyto-bench idle`: what a configured but idle flytod costs. One real
//! flytod on a throwaway PostgreSQL (the cluster store) with one binding of
//! every channel kind (an inbox folder; Telegram against a server that
//! answers every `getUpdates` at once, the poller's worst case; WeChat
//! iLink, likewise answering at once; WeCom), the real server-everything
//! over stdio and over streamable HTTP (both started, then left alone) and
//! a cron job none of whose fires is due. Over the window it measures
//! flytod's CPU (from /proc/PID/stat) and the requests each outside server
//! got, against two baselines measured at the same time: a bare flytod
//! (sled, nothing configured) and a process that only sleeps on a timer.
//! Targets: under 1 % of one core, at most one request a second to any
//! outside server.

use crate::{machine, stat_cpu_ns, verdict};
use anyhow::{Context, bail};
use flyto_protocol::{ChannelSpec, JobSpec, PlanSpec, Request, Response, StepSpec};
use flyto_tests::fake_ilink::FakeIlink;
use flyto_tests::fake_telegram::FakeTelegram;
use flyto_tests::fake_wecom::FakeWecom;
use flyto_tests::{Backend, DEADLINE, TestEnv, wait_until};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const TG_TOKEN: &str = "4242:idle-bench-token";
const WX_TOKEN: &str = "wx-idle-bench-token";

pub struct Args {
    /// The measured window.
    pub secs: u64,
}

fn npm_peer(name: &str) -> anyhow::Result<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("npm/node_modules/.bin")
        .join(name);
    if !path.exists() {
        bail!(
            "{} is missing: install the test peers with `npm ci --prefix tests/npm` (node and npm needed)",
            path.display()
        );
    }
    Ok(path)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A TCP proxy to `127.0.0.1:to` that counts the HTTP requests going
/// through it (their request lines).
fn counting_proxy(to: u16) -> anyhow::Result<(u16, Arc<AtomicUsize>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let count = Arc::new(AtomicUsize::new(0));
    let n = count.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                continue;
            };
            let (mut c_in, mut s_out) = (client, server);
            let (Ok(mut c_out), Ok(mut s_in)) = (c_in.try_clone(), s_out.try_clone()) else {
                continue;
            };
            let n = n.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 16 * 1024];
                while let Ok(k) = c_in.read(&mut buf) {
                    if k == 0 || s_out.write_all(&buf[..k]).is_err() {
                        break;
                    }
                    let text = String::from_utf8_lossy(&buf[..k]);
                    n.fetch_add(text.matches(" /mcp HTTP/1.1\r\n").count(), Ordering::SeqCst);
                }
                let _ = s_out.shutdown(std::net::Shutdown::Both);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s_in, &mut c_out);
                let _ = c_out.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    Ok((port, count))
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn call(env: &TestEnv, req: Request) -> anyhow::Result<Response> {
    let mut c = env.client();
    Ok(c.call(&req)?)
}

fn bind(env: &TestEnv, spec: ChannelSpec) -> anyhow::Result<()> {
    match call(env, Request::ChannelBind { spec })? {
        Response::Channel { .. } => Ok(()),
        other => bail!("channel_bind answered {other:?}"),
    }
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    machine();
    println!(
        "\n== idle: flytod on PostgreSQL with inbox, Telegram, WeChat and WeCom bindings, two MCP servers, a cron job; {}s ==",
        args.secs
    );
    let everything = npm_peer("mcp-server-everything")?;
    let tg = FakeTelegram::start(TG_TOKEN);
    tg.answer_at_once(true);
    let ilink = FakeIlink::with_hold(WX_TOKEN, Duration::ZERO);
    let wecom = FakeWecom::start("corp1", "idle-bench-secret");

    let http_port = free_port()?;
    let _http_server = Killed(
        std::process::Command::new(&everything)
            .arg("streamableHttp")
            .env("PORT", http_port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("start server-everything over streamable HTTP")?,
    );
    wait_until("server-everything to listen", DEADLINE, || {
        TcpStream::connect(("127.0.0.1", http_port)).ok()
    });
    let (proxy_port, http_requests) = counting_proxy(http_port)?;
    let scratch = tempfile::tempdir()?;
    // What flytod writes to the stdio server, one JSON-RPC message a line.
    let stdio_log = scratch.path().join("stdio-requests");
    std::fs::write(&stdio_log, "")?;
    let config = format!(
        "[channels]\npoll_timeout = \"30s\"\n[channels.wecom]\napi_base = \"{}\"\n\
         [mcp]\nidle_timeout = \"1h\"\n\
         [mcp.servers.stdio]\ncommand = \"sh\"\nargs = [\"-c\", {:?}]\n\
         [mcp.servers.http]\nurl = \"http://127.0.0.1:{proxy_port}/mcp\"\n",
        wecom.base_url(),
        format!(
            "tee -a '{}' | '{}'",
            stdio_log.display(),
            everything.display()
        ),
    );
    let env = TestEnv::on(Backend::Postgres, &config);
    let daemon = env.start();
    let pid = daemon.pid();
    let pg = env.pg.as_ref().context("the env's PostgreSQL")?;

    let inbox = env.work.join("inbox");
    bind(
        &env,
        ChannelSpec {
            kind: "inbox".into(),
            dir: Some(inbox.display().to_string()),
            ..ChannelSpec::default()
        },
    )?;
    bind(
        &env,
        ChannelSpec {
            kind: "telegram".into(),
            token: Some(TG_TOKEN.into()),
            api_base: Some(tg.api_base()),
            ..ChannelSpec::default()
        },
    )?;
    bind(
        &env,
        ChannelSpec {
            kind: "wechat".into(),
            token: Some(WX_TOKEN.into()),
            api_base: Some(ilink.base_url()),
            ..ChannelSpec::default()
        },
    )?;
    bind(
        &env,
        ChannelSpec {
            kind: "wecom".into(),
            corp_id: Some("corp1".into()),
            agent_id: Some("1000002".into()),
            secret: Some("idle-bench-secret".into()),
            userid: Some("bob".into()),
            ..ChannelSpec::default()
        },
    )?;
    for server in ["stdio", "http"] {
        // Started now and kept (idle_timeout 1h): an idle but running server.
        call(
            &env,
            Request::McpRestart {
                server: server.into(),
            },
        )?;
        wait_until(
            &format!("MCP server {server} to list its tools"),
            DEADLINE,
            || match call(
                &env,
                Request::McpTools {
                    server: server.into(),
                },
            ) {
                Ok(Response::McpTools { tools }) if !tools.is_empty() => Some(()),
                _ => None,
            },
        );
    }
    let job = JobSpec {
        schedule: Some("0 0 1 1 *".into()),
        tz: Some("UTC".into()),
        plan: Some(PlanSpec {
            name: None,
            steps: vec![StepSpec {
                id: "s".into(),
                run: Some("true".into()),
                workdir: Some("/".into()),
                ..Default::default()
            }],
            env: Default::default(),
            sandbox: None,
        }),
        ..JobSpec::default()
    };
    match call(&env, Request::JobCreate { spec: job })? {
        Response::Job { .. } => {}
        other => bail!("job_create answered {other:?}"),
    }
    wait_until("every binding polling", DEADLINE, || {
        (tg.calls("getUpdates") > 0
            && ilink
                .requests()
                .iter()
                .any(|r| r.path.ends_with("/getupdates")))
        .then_some(())
    });

    // The baselines, idle over the same window.
    let bare = TestEnv::new("");
    let bare_daemon = bare.start();
    let me = std::env::current_exe().context("the bench binary")?;
    let sleeper = Killed(
        std::process::Command::new(me)
            .arg("job-sleeper")
            .spawn()
            .context("spawn the sleeping baseline")?,
    );
    // Settle: start-up work (migrations, first polls, lease takes) is not idle.
    std::thread::sleep(Duration::from_secs(5));

    let stdio_lines = || -> usize {
        std::fs::read_to_string(&stdio_log)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let ilink_requests = || ilink.requests().len();
    let tg_requests = || {
        [
            "getUpdates",
            "sendMessage",
            "sendChatAction",
            "deleteWebhook",
        ]
        .iter()
        .map(|m| tg.calls(m))
        .sum::<usize>()
    };
    let wecom_requests = || wecom.gettoken_calls() + wecom.sends().len();

    // Every statement flytod sends in the window, from the server's own log.
    pg.sql(
        "postgres",
        "alter system set log_statement = 'all'; select pg_reload_conf()",
    );
    let log_from = pg.log().len();
    let t0 = Instant::now();
    let cpu0 = (
        stat_cpu_ns(pid),
        stat_cpu_ns(bare_daemon.pid()),
        stat_cpu_ns(sleeper.0.id() as i32),
    );
    let counts0 = (
        tg_requests(),
        ilink_requests(),
        wecom_requests(),
        http_requests.load(Ordering::SeqCst),
        stdio_lines(),
    );
    std::thread::sleep(Duration::from_secs(args.secs));
    let counts1 = (
        tg_requests(),
        ilink_requests(),
        wecom_requests(),
        http_requests.load(Ordering::SeqCst),
        stdio_lines(),
    );
    let cpu1 = (
        stat_cpu_ns(pid),
        stat_cpu_ns(bare_daemon.pid()),
        stat_cpu_ns(sleeper.0.id() as i32),
    );
    let secs = t0.elapsed().as_secs_f64();
    let share = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e9 / secs * 100.0;
    let (flytod, bare_share, sleeping) = (
        share(cpu0.0, cpu1.0),
        share(cpu0.1, cpu1.1),
        share(cpu0.2, cpu1.2),
    );
    println!(
        "idle CPU: flytod {flytod:.3} % of one core over {secs:.0}s (bare flytod {bare_share:.3} %, a sleeping timer {sleeping:.3} %; {:.1}x the bare flytod); target < 1 %: {}",
        flytod / bare_share.max(0.001),
        verdict(flytod < 1.0)
    );
    let per_s = |a: usize, b: usize| b.saturating_sub(a) as f64 / secs;
    let rates = [
        (
            "Telegram (answers getUpdates at once)",
            per_s(counts0.0, counts1.0),
        ),
        (
            "WeChat iLink (answers getupdates at once)",
            per_s(counts0.1, counts1.1),
        ),
        ("WeCom", per_s(counts0.2, counts1.2)),
        ("MCP streamable HTTP", per_s(counts0.3, counts1.3)),
        ("MCP stdio (messages)", per_s(counts0.4, counts1.4)),
    ];
    for (server, rate) in rates {
        println!(
            "idle requests/s to {server}: {rate:.2}; target <= 1: {}",
            verdict(rate <= 1.0)
        );
    }
    // Statements, not transactions: the server's own (autovacuum) count
    // as transactions, and each statement is a round trip flytod made.
    let log = pg.log();
    let census = statement_census(log.get(log_from..).unwrap_or_default());
    let statements: usize = census.iter().map(|(n, _)| n).sum();
    let rate = statements as f64 / secs;
    println!(
        "idle requests/s to PostgreSQL (statements flytod sent: leases, heartbeats, sweeps, fallback polls; from the server's log): {rate:.2}; target <= 1: {}",
        verdict(rate <= 1.0)
    );
    for (count, statement) in census {
        println!("  {:.3}/s  {statement}", count as f64 / secs);
    }
    drop(bare_daemon);
    drop(daemon);
    Ok(())
}

/// The statements in a PostgreSQL log excerpt (`log_statement = all`),
/// counted by their first line, most frequent first.
fn statement_census(log: &str) -> Vec<(usize, String)> {
    let mut counts = std::collections::HashMap::<String, usize>::new();
    for line in log.lines() {
        let text = line
            .split_once("LOG:  statement: ")
            .or_else(|| {
                // `execute NAME: TEXT`: the prepared statement's name differs
                // per connection, the text does not.
                let (_, rest) = line.split_once("LOG:  execute ")?;
                rest.split_once(": ")
            })
            .map(|(_, t)| t);
        if let Some(text) = text {
            let key: String = text.chars().take(110).collect();
            *counts.entry(key).or_default() += 1;
        }
    }
    let mut list: Vec<(usize, String)> = counts.into_iter().map(|(k, n)| (n, k)).collect();
    list.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    list
}
