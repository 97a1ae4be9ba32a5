//! MCP servers through the real daemon, a scripted model and a fake MCP
//! server (`fake-mcp`, stdio and streamable HTTP): tools are offered as
//! `mcp__<server>__<tool>` (allow/deny lists and bad schemas applied) and
//! called; error results, timeouts and oversized results reach the model
//! as errors; a server that crashes mid-call gives an `interrupted` result
//! and is restarted; cancel reaches a slow call; a changed tool list is
//! picked up; servers that cannot start are reported and never block a
//! session; SIGKILL mid-call leaves a consistent transcript; SIGHUP
//! applies config changes without touching unchanged servers.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_llm::Reply;
use flyto_tests::flyto_protocol::{BlockView, SessionEvent};
use flyto_tests::sessions_support::{
    cancel, done, history, new_session, next_event, notices, offered_tools, request_tool_result,
    send, setup_with, start, start_send, start_with, stored_result, workdir,
};
use flyto_tests::{DEADLINE, TestEnv, bin, processes_with, wait_until};
use serde_json::{Value, json};
use std::time::Duration;

/// A `[mcp.servers.NAME]` entry for fake-mcp with `args`, tagged so the
/// test can find its process, running in the folder `env_tag` (the
/// sandbox lets it write there, and only there).
fn server(name: &str, env_tag: &str, args: &[&str], extra: &str) -> String {
    std::fs::create_dir_all(env_tag).unwrap();
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "[mcp.servers.{name}]\ncommand = {:?}\nargs = [{}]\ncwd = {env_tag:?}\nenv = {{ FAKE_MCP_TAG = {env_tag:?} }}\n{extra}\n",
        bin("fake-mcp").display().to_string(),
        args.join(", ")
    )
}

fn mcp_list(env: &TestEnv) -> Value {
    let out = env.ctl(&["mcp_list", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    serde_json::from_str(&out.stdout).unwrap()
}

fn server_view(env: &TestEnv, name: &str) -> Value {
    mcp_list(env)
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no server {name} in mcp_list"))
}

fn log_of(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn stdio_tools_are_offered_called_and_their_failures_reach_the_model() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("calls.log");
    let tag = tmp.path().display().to_string();
    let config = server(
        "fake",
        &tag,
        &["--log", &log.display().to_string(), "--bad-schema"],
        "call_timeout = \"2s\"\nmax_result_bytes = 1000\ntools = { deny = [\"secret\"] }",
    );
    let (fake, env, _daemon) = setup_with(
        &config,
        vec![
            Reply::tool_calls(vec![
                ("c1", "mcp__fake__echo", json!({"text": "hi"}).to_string()),
                ("c2", "mcp__fake__fail", "{}".into()),
                ("c3", "mcp__fake__image", "{}".into()),
            ]),
            Reply::tool_calls(vec![
                ("c4", "mcp__fake__slow", "{}".into()),
                ("c5", "mcp__fake__big", json!({"bytes": 5000}).to_string()),
                ("c6", "mcp__fake__secret", "{}".into()),
            ]),
            Reply::text("done"),
        ],
    );
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    let events = send(&env, &id, "use the tools");
    assert!(done(&events), "{events:#?}");

    let requests = fake.requests();
    let tools = offered_tools(&requests[0]);
    for t in [
        "mcp__fake__echo",
        "mcp__fake__fail",
        "mcp__fake__slow",
        "read",
    ] {
        assert!(
            tools.contains(&t.to_string()),
            "{t} not offered: {tools:?}\n{:#}",
            mcp_list(&env)
        );
    }
    // The deny list and the invalid schema keep tools out.
    assert!(
        !tools
            .iter()
            .any(|t| t == "mcp__fake__secret" || t == "mcp__fake__broken"),
        "{tools:?}"
    );

    assert_eq!(request_tool_result(&requests[1], "c1"), "echo: hi");
    assert!(request_tool_result(&requests[1], "c2").contains("the thing is broken"));
    assert!(request_tool_result(&requests[1], "c3").contains("[image image/png"));
    let slow = request_tool_result(&requests[2], "c4");
    assert!(
        slow.contains("did not answer `slow` within 2s (call_timeout)"),
        "{slow}"
    );
    let big = request_tool_result(&requests[2], "c5");
    assert!(
        big.contains("over its limit of 1000") && big.contains("max_result_bytes"),
        "{big}"
    );
    assert!(request_tool_result(&requests[2], "c6").contains("unknown tool `mcp__fake__secret`"));
    // The error results are stored as errors.
    let (_, messages) = history(&env, &id);
    let failed: Vec<&str> = messages
        .iter()
        .flat_map(|m| &m.blocks)
        .filter_map(|b| match b {
            BlockView::ToolResult {
                call_id,
                is_error: true,
                ..
            } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(failed, ["c2", "c4", "c5", "c6"]);
    // The abandoned call was cancelled at the server.
    wait_until("the server to hear of the cancel", DEADLINE, || {
        log_of(&log).contains("cancelled").then_some(())
    });

    let view = server_view(&env, "fake");
    assert_eq!(view["state"], "running", "{view:#}");
    assert_eq!(view["protocol"], "2025-06-18", "{view:#}");
    assert!(
        view["problems"]
            .to_string()
            .contains("tool `broken` is left out: its input schema is not valid JSON Schema"),
        "{view:#}"
    );
    let out = env.ctl(&["mcp_tools", "fake"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("mcp__fake__echo (read-only)"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("secret"), "{}", out.stdout);
    let out = env.ctl(&["mcp_tools", "nope"]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr
            .contains("no MCP server named `nope`: the configured ones are fake"),
        "{out:?}"
    );
    // One process for every session: a second session reuses it.
    assert_eq!(processes_with(&[&format!("FAKE_MCP_TAG={tag}")]).len(), 1);
}

#[test]
fn a_crash_mid_call_is_interrupted_and_the_server_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let tag = tmp.path().display().to_string();
    let (fake, env, _daemon) = setup_with(
        &server("fake", &tag, &[], ""),
        vec![
            Reply::tool_call("c1", "mcp__fake__crash", "{}"),
            Reply::text("it crashed"),
            Reply::tool_call("c2", "mcp__fake__echo", json!({"text": "again"})),
            Reply::text("back"),
        ],
    );
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    send(&env, &id, "crash it");
    let crashed = request_tool_result(&fake.requests()[1], "c1");
    assert!(
        crashed.starts_with("interrupted: MCP server `fake` closed the connection during `crash`"),
        "{crashed}"
    );
    let view = wait_until("the server to be restarted", DEADLINE, || {
        let v = server_view(&env, "fake");
        (v["state"] == "running" && v["restarts"] == 1).then_some(v)
    });
    assert!(
        view["last_error"].as_str().is_none_or(|e| !e.is_empty()),
        "{view:#}"
    );
    send(&env, &id, "again");
    assert_eq!(
        request_tool_result(&fake.requests()[3], "c2"),
        "echo: again"
    );
}

#[test]
fn cancel_reaches_a_slow_call_and_a_changed_tool_list_is_picked_up() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("calls.log");
    let tag = tmp.path().display().to_string();
    let (fake, env, _daemon) = setup_with(
        &server("fake", &tag, &["--log", &log.display().to_string()], ""),
        vec![
            Reply::tool_call("c1", "mcp__fake__slow", "{}"),
            Reply::tool_call("c2", "mcp__fake__grow", "{}"),
            Reply::text("grown"),
            Reply::tool_call("c3", "mcp__fake__late", "{}"),
            Reply::text("used it"),
        ],
    );
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    let mut stream = start_send(&env, &id, "be slow");
    wait_until("the slow call to reach the server", DEADLINE, || {
        log_of(&log).contains("tools/call").then_some(())
    });
    cancel(&env, &id);
    loop {
        match next_event(&mut stream, &id) {
            Some((_, e)) if e.ends_run() => {
                assert!(matches!(e, SessionEvent::Cancelled { .. }), "{e:?}");
                break;
            }
            Some(_) => {}
            None => panic!("the stream ended without the run's end"),
        }
    }
    wait_until("the server to hear of the cancel", DEADLINE, || {
        log_of(&log).contains("cancelled").then_some(())
    });

    send(&env, &id, "grow");
    // The server said its list changed: the new tool is listed, and the
    // next run offers and calls it.
    wait_until("the new tool to be listed", DEADLINE, || {
        let out = env.ctl(&["mcp_tools", "fake"]);
        out.stdout.contains("mcp__fake__late").then_some(())
    });
    send(&env, &id, "use the new one");
    let requests = fake.requests();
    let last = requests.last().unwrap();
    assert!(offered_tools(&requests[3]).contains(&"mcp__fake__late".to_string()));
    assert_eq!(request_tool_result(last, "c3"), "late tool answers");
}

/// fake-mcp serving streamable HTTP; its port once it listens.
struct HttpServer {
    child: std::process::Child,
    port: u16,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_server(dir: &std::path::Path, token: &str) -> HttpServer {
    let port_file = dir.join(format!("port-{token}"));
    let child = std::process::Command::new(bin("fake-mcp"))
        .args(["--http", &port_file.display().to_string(), "--token", token])
        .spawn()
        .unwrap();
    let port = wait_until("fake-mcp to listen", DEADLINE, || {
        std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|p| p.parse().ok())
    });
    HttpServer { child, port }
}

#[test]
fn servers_that_cannot_start_are_reported_and_sessions_go_on() {
    let tmp = tempfile::tempdir().unwrap();
    let tag = tmp.path().display().to_string();
    let http = http_server(tmp.path(), "right-token");
    let mut config = String::new();
    config.push_str("[mcp.servers.missing]\ncommand = \"/nonexistent/mcp-server\"\n\n");
    config.push_str(&server(
        "chatty",
        &tag,
        &["--not-mcp"],
        "startup_timeout = \"2s\"",
    ));
    config.push_str(&server("oldproto", &tag, &["--version", "1999-01-01"], ""));
    config.push_str(&format!(
        "[mcp.servers.locked]\nurl = \"http://127.0.0.1:{}/mcp\"\nheaders = {{ Authorization = \"Bearer wrong-token\" }}\n\n",
        http.port
    ));
    config.push_str("[mcp.servers.refused]\nurl = \"http://127.0.0.1:1/mcp\"\n\n");
    let (fake, env, _daemon) = setup_with(&config, vec![Reply::text("hello without them")]);
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    let events = send(&env, &id, "hi");
    assert!(done(&events), "{events:#?}");
    assert_eq!(fake.request_count(), 1);
    let said = notices(&events).join("\n");
    for name in ["missing", "chatty", "oldproto", "locked", "refused"] {
        assert!(
            said.contains(&format!("MCP server `{name}` is not available")),
            "{name}: {said}"
        );
    }
    let error = |name: &str| {
        let v = server_view(&env, name);
        assert_eq!(v["state"], "failed", "{v:#}");
        v["last_error"].as_str().unwrap().to_string()
    };
    let e = error("missing");
    assert!(
        e.contains("cannot start `/nonexistent/mcp-server`") && e.contains("check `command`"),
        "{e}"
    );
    let e = error("chatty");
    assert!(
        e.contains("not MCP (JSON-RPC)") && e.contains("This is a chat bot"),
        "{e}"
    );
    let e = error("oldproto");
    assert!(
        e.contains("protocol version `1999-01-01`, which flytod does not"),
        "{e}"
    );
    let e = error("locked");
    assert!(
        e.contains("401 Unauthorized") && e.contains("headers"),
        "{e}"
    );
    assert!(!e.contains("wrong-token"), "{e}");
    let e = error("refused");
    assert!(e.contains("cannot reach http://127.0.0.1:1/mcp"), "{e}");
}

#[test]
fn http_servers_take_headers_from_the_environment_and_never_show_them() {
    let tmp = tempfile::tempdir().unwrap();
    let http = http_server(tmp.path(), "s3cret-value-42");
    let config = format!(
        "[mcp.servers.web]\nurl = \"http://127.0.0.1:{}/mcp\"\nheaders = {{ Authorization = \"Bearer ${{FAKE_MCP_TOKEN}}\" }}\n",
        http.port
    );
    let fake = flyto_tests::fake_llm::FakeLlm::start(vec![
        Reply::tool_call("c1", "mcp__web__echo", json!({"text": "over http"})),
        Reply::text("done"),
    ]);
    let env = TestEnv::new(&format!(
        "{}{config}\n{}",
        flyto_tests::sessions_support::BASE,
        fake.config()
    ));
    let daemon = start_with(&env, &[("FAKE_MCP_TOKEN", "s3cret-value-42")]);
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    send(&env, &id, "call it");
    assert_eq!(
        request_tool_result(&fake.requests()[1], "c1"),
        "echo: over http"
    );
    let listed = env.ctl(&["mcp_list"]).stdout;
    assert!(
        listed.contains("web: running") && listed.contains("http: http://127.0.0.1"),
        "{listed}"
    );
    assert!(
        !listed.contains("s3cret") && !daemon.log().contains("s3cret"),
        "{listed}"
    );
}

#[test]
fn sigkill_mid_call_leaves_a_consistent_session_and_no_server() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("calls.log");
    let tag = tmp.path().display().to_string();
    let (fake, env, daemon) = setup_with(
        &server("fake", &tag, &["--log", &log.display().to_string()], ""),
        vec![
            Reply::tool_call("c1", "mcp__fake__slow", "{}"),
            Reply::text("recovered"),
        ],
    );
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    let _stream = start_send(&env, &id, "be slow");
    wait_until("the slow call to reach the server", DEADLINE, || {
        log_of(&log).contains("tools/call").then_some(())
    });
    // Everything written so far is durable once another request answers.
    new_session(&env, &dir);
    daemon.kill9();
    wait_until(
        "the server to die with flytod",
        Duration::from_secs(10),
        || {
            processes_with(&[&format!("FAKE_MCP_TAG={tag}")])
                .is_empty()
                .then_some(())
        },
    );
    let _daemon = start(&env);
    let (_, messages) = history(&env, &id);
    let result = stored_result(&messages, "c1").expect("the interrupted call has a result");
    assert!(result.1 && result.0.contains("interrupted"), "{result:?}");
    send(&env, &id, "go on");
    assert!(request_tool_result(&fake.requests()[1], "c1").contains("interrupted"));
}

#[test]
fn sighup_restarts_changed_servers_only() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (
        tmp.path().join("a").display().to_string(),
        tmp.path().join("b").display().to_string(),
    );
    let base = format!(
        "{}{}",
        server("keep", &a, &[], ""),
        server("change", &b, &[], "")
    );
    let (_fake, env, daemon) = setup_with(&base, vec![Reply::text("up"), Reply::text("up")]);
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    send(&env, &id, "start them");
    let pids = |tag: &str| processes_with(&[&format!("FAKE_MCP_TAG={tag}")]);
    let (keep, change) = (pids(&a), pids(&b));
    assert_eq!((keep.len(), change.len()), (1, 1));

    let text = std::fs::read_to_string(&env.config).unwrap();
    let changed = text.replace(
        &server("change", &b, &[], ""),
        &server("change", &b, &[], "tools = { allow = [\"echo\"] }"),
    );
    assert_ne!(text, changed);
    env.write_config(&changed);
    daemon.signal(libc::SIGHUP);
    wait_until(
        "the changed server to restart with its new list",
        DEADLINE,
        || {
            let out = env.ctl(&["mcp_tools", "change"]);
            (out.code == 0 && !out.stdout.contains("mcp__change__fail") && pids(&b) != change)
                .then_some(())
        },
    );
    assert_eq!(pids(&a), keep, "the unchanged server was restarted");
    let out = env.ctl(&["mcp_tools", "change"]);
    assert!(out.stdout.contains("mcp__change__echo"), "{out:?}");
}

#[test]
fn idle_servers_stop_and_start_again_with_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let tag = tmp.path().display().to_string();
    let config = format!(
        "[mcp]\nidle_timeout = \"1s\"\n\n{}",
        server("fake", &tag, &[], "")
    );
    let (fake, env, _daemon) = setup_with(
        &config,
        vec![
            Reply::tool_call("c1", "mcp__fake__echo", json!({"text": "one"})),
            Reply::text("done"),
            Reply::tool_call("c2", "mcp__fake__echo", json!({"text": "two"})),
            Reply::text("done"),
        ],
    );
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    send(&env, &id, "first");
    let procs = || processes_with(&[&format!("FAKE_MCP_TAG={tag}")]);
    wait_until("the idle server to stop", DEADLINE, || {
        (server_view(&env, "fake")["state"] == "idle" && procs().is_empty()).then_some(())
    });
    send(&env, &id, "second");
    let requests = fake.requests();
    assert_eq!(request_tool_result(&requests[1], "c1"), "echo: one");
    assert_eq!(request_tool_result(&requests[3], "c2"), "echo: two");
}

#[test]
fn a_stdio_server_runs_in_the_sandbox_unless_it_is_off() {
    let tmp = tempfile::tempdir().unwrap();
    let (boxed, free) = (tmp.path().join("boxed"), tmp.path().join("free"));
    let (boxed_log, free_log) = (tmp.path().join("boxed.log"), tmp.path().join("free.log"));
    let config = format!(
        "{}{}",
        server(
            "boxed",
            &boxed.display().to_string(),
            &["--log", &boxed_log.display().to_string()],
            ""
        ),
        server(
            "free",
            &free.display().to_string(),
            &["--log", &free_log.display().to_string()],
            "sandbox = \"off\""
        ),
    );
    let (_fake, env, daemon) = setup_with(&config, vec![Reply::text("hi")]);
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    let events = send(&env, &id, "hi");
    // Writing outside its cwd is refused in the sandbox: the confined
    // server dies on its first message; the unconfined one runs.
    assert!(
        notices(&events)
            .join("\n")
            .contains("MCP server `boxed` is not available"),
        "{events:#?}"
    );
    let error = server_view(&env, "boxed")["last_error"].to_string();
    assert!(
        error.contains("Permission denied"),
        "{error}\n{}",
        daemon.log()
    );
    assert!(!boxed_log.exists());
    assert_eq!(server_view(&env, "free")["state"], "running");
    assert!(log_of(&free_log).contains("initialize"));
}

/// A program of the real MCP servers in tests/npm (installed by `.ci/run`).
fn npm_peer(name: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("npm/node_modules/.bin")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: install the test peers with `npm ci --prefix tests/npm` (node and npm needed)",
        path.display()
    );
    path
}

/// The real server-everything serving streamable HTTP on `port`.
struct Everything(std::process::Child);

impl Everything {
    fn start(port: u16) -> Self {
        let child = std::process::Command::new(npm_peer("mcp-server-everything"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        wait_until("server-everything to listen", DEADLINE, || {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .ok()
                .map(|_| ())
        });
        Everything(child)
    }
}

impl Drop for Everything {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_restarted_http_server_gets_a_new_session_and_the_call_goes_through() {
    let port = free_port();
    let server = Everything::start(port);
    let config = format!(
        "[mcp.servers.every]\nurl = \"http://127.0.0.1:{port}/mcp\"\ncall_timeout = \"20s\"\n"
    );
    let (fake, env, _daemon) = setup_with(
        &config,
        vec![
            Reply::tool_call("c1", "mcp__every__echo", json!({"message": "one"})),
            Reply::text("done"),
            Reply::tool_call("c2", "mcp__every__echo", json!({"message": "two"})),
            Reply::text("done"),
        ],
    );
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    send(&env, &id, "first");
    assert_eq!(request_tool_result(&fake.requests()[1], "c1"), "Echo: one");
    drop(server);
    let _server = Everything::start(port);
    send(&env, &id, "second");
    let second = request_tool_result(&fake.requests()[3], "c2");
    assert_eq!(second, "Echo: two", "{:#}", mcp_list(&env));
    let view = server_view(&env, "every");
    assert_eq!(view["state"], "running", "{view:#}");
    let listed = env.ctl(&["mcp_list"]).stdout;
    assert!(listed.contains("reconnected"), "{listed}");
}

/// A stdio entry running the real server-filesystem on `dir` through a
/// shell that exits at once while `dir/STOP` exists (a server that cannot
/// come back), tagged `FS_TAG=<dir>` so the test can kill it.
fn filesystem(name: &str, dir: &std::path::Path, extra: &str) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let d = dir.display().to_string();
    let script = format!(
        "test -e {d}/STOP && exit 3; exec {} {d}",
        npm_peer("mcp-server-filesystem").display()
    );
    format!(
        "[mcp.servers.{name}]\ncommand = \"/bin/sh\"\nargs = [\"-c\", {script:?}]\ncwd = {d:?}\nenv = {{ FS_TAG = {d:?} }}\nsandbox = \"off\"\n{extra}\n"
    )
}

#[test]
fn a_down_server_keeps_its_tools_offered_and_calls_fail_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fs");
    let d = dir.display().to_string();
    let list = json!({ "path": d }).to_string();
    let (fake, env, _daemon) = setup_with(
        &filesystem("fs", &dir, ""),
        vec![
            Reply::tool_call("c1", "mcp__fs__list_directory", list.clone()),
            Reply::text("listed"),
            Reply::tool_call("c2", "mcp__fs__list_directory", list),
            Reply::text("it is down"),
        ],
    );
    std::fs::write(dir.join("hello.txt"), "hi").unwrap();
    let work = workdir(&env, "proj");
    let id = new_session(&env, &work);
    send(&env, &id, "list it");
    let first = request_tool_result(&fake.requests()[1], "c1");
    assert!(first.contains("hello.txt"), "{first}");

    // It exits and cannot start again.
    std::fs::write(dir.join("STOP"), "").unwrap();
    let pids = processes_with(&[&format!("FS_TAG={d}")]);
    assert!(!pids.is_empty(), "server-filesystem is not running");
    for pid in pids {
        std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
    }
    wait_until("the server to be seen down", DEADLINE, || {
        let v = server_view(&env, "fs");
        (v["restarts"] == 1 && v["state"] != "running").then_some(())
    });
    send(&env, &id, "list it again");
    let requests = fake.requests();
    let mut before = offered_tools(&requests[0]);
    let mut after = offered_tools(&requests[2]);
    before.sort();
    after.sort();
    assert!(
        before.iter().any(|t| t == "mcp__fs__list_directory"),
        "{before:?}"
    );
    assert_eq!(before, after, "the offered tools changed while it is down");
    let second = request_tool_result(&requests[3], "c2");
    assert!(
        second.starts_with("server restarting: MCP server `fs`"),
        "{second}"
    );
    // Its tools are still listed.
    let out = env.ctl(&["mcp_tools", "fs"]);
    assert!(out.stdout.contains("mcp__fs__list_directory"), "{out:?}");
}

#[test]
fn secrets_in_server_configs_are_never_shown_or_logged() {
    let port = free_port();
    let _server = Everything::start(port);
    let secrets = [
        "hunter2-url-pw",
        "tok-in-query-77",
        "hdr-secret-value-55",
        "arg-secret-66",
        "arg-secret-77",
        "env-secret-99",
        "pw-refused-88",
    ];
    let config = format!(
        "[mcp.servers.web]\nurl = \"http://admin:hunter2-url-pw@127.0.0.1:{port}/mcp?token=tok-in-query-77&page=2\"\nheaders = {{ X-Api-Key = \"hdr-secret-value-55\" }}\n\n\
         [mcp.servers.fsargs]\ncommand = {:?}\nargs = [\"--token=arg-secret-66\", \"--password\", \"arg-secret-77\"]\nenv = {{ API_TOKEN = \"env-secret-99\" }}\nsandbox = \"off\"\n\n\
         [mcp.servers.every]\ncommand = {:?}\nargs = [\"stdio\"]\nenv = {{ API_TOKEN = \"env-secret-99\" }}\nsandbox = \"off\"\n\n\
         [mcp.servers.gone]\nurl = \"http://bob:pw-refused-88@127.0.0.1:1/mcp\"\n",
        npm_peer("mcp-server-filesystem").display().to_string(),
        npm_peer("mcp-server-everything").display().to_string(),
    );
    let (fake, env, daemon) = setup_with(
        &config,
        vec![
            Reply::tool_calls(vec![
                (
                    "c1",
                    "mcp__web__echo",
                    json!({"message": "over http"}).to_string(),
                ),
                ("c2", "mcp__every__get-env", "{}".into()),
            ]),
            Reply::text("done"),
        ],
    );
    let work = workdir(&env, "proj");
    let id = new_session(&env, &work);
    let events = send(&env, &id, "go");
    let requests = fake.requests();
    assert_eq!(request_tool_result(&requests[1], "c1"), "Echo: over http");
    // A tool that prints the server's environment: the value is hidden.
    let printed = request_tool_result(&requests[1], "c2");
    assert!(printed.contains("API_TOKEN"), "{printed}");
    let failed = |name: &str| {
        wait_until("the server to fail", DEADLINE, || {
            let v = server_view(&env, name);
            (v["state"] == "failed").then_some(v)
        })
    };
    // It names its arguments on stderr, which the error quotes.
    let fsargs = failed("fsargs");
    assert!(
        fsargs["last_error"]
            .as_str()
            .unwrap()
            .contains("Cannot access directory"),
        "{fsargs:#}"
    );
    let gone = failed("gone");
    assert!(
        gone["last_error"]
            .as_str()
            .unwrap()
            .contains("cannot reach http://bob:***@127.0.0.1:1/mcp"),
        "{gone:#}"
    );
    let listed = env.ctl(&["mcp_list"]).stdout;
    assert!(
        listed.contains("http: http://admin:***@127.0.0.1")
            && listed.contains("token=***&page=2")
            && listed.contains("--token=*** --password ***"),
        "{listed}"
    );
    let shown = format!(
        "{listed}\n{}\n{}\n{}\n{:?}\n{printed}",
        env.ctl(&["mcp_list", "--json"]).stdout,
        env.ctl(&["mcp_tools", "web"]).stdout,
        daemon.log(),
        notices(&events),
    );
    for s in secrets {
        assert!(!shown.contains(s), "{s} is shown:\n{shown}");
    }
}

/// server-everything lists its task tool after the handshake
/// (notifications/tools/list_changed): it is left out with the reason,
/// and never offered to the model.
fn task_only_tools_are_left_out(config: &str) {
    let (fake, env, _daemon) = setup_with(config, vec![Reply::text("hi"), Reply::text("hi")]);
    let work = workdir(&env, "proj");
    let id = new_session(&env, &work);
    send(&env, &id, "start it");
    let reason = "tool `simulate-research-query` is left out: it only runs as an MCP task";
    wait_until("the task tool to be left out", DEADLINE, || {
        server_view(&env, "every")["problems"]
            .to_string()
            .contains(reason)
            .then_some(())
    });
    let out = env.ctl(&["mcp_tools", "every"]);
    assert!(
        out.stdout.contains("mcp__every__echo") && out.stdout.contains(reason),
        "{out:?}"
    );
    assert!(!out.stdout.contains("mcp__every__simulate"), "{out:?}");
    send(&env, &id, "again");
    let tools = offered_tools(&fake.requests()[1]);
    assert!(tools.iter().any(|t| t == "mcp__every__echo"), "{tools:?}");
    assert!(
        !tools.iter().any(|t| t.contains("simulate-research")),
        "{tools:?}"
    );
}

#[test]
fn tools_that_only_run_as_tasks_are_left_out_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().display().to_string();
    task_only_tools_are_left_out(&format!(
        "[mcp.servers.every]\ncommand = {:?}\nargs = [\"stdio\"]\ncwd = {d:?}\nsandbox = \"off\"\n",
        npm_peer("mcp-server-everything").display().to_string()
    ));
}

#[test]
fn over_streamable_http_tools_that_only_run_as_tasks_are_left_out_too() {
    let port = free_port();
    let _server = Everything::start(port);
    task_only_tools_are_left_out(&format!(
        "[mcp.servers.every]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"
    ));
}
