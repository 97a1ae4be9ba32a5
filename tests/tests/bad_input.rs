//! Bad input of every kind gets a clear error, and the daemon keeps serving:
//! after each case a fresh connection still answers and the plans it had
//! acknowledged are still there. Broken frames are sent as raw bytes.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::flyto_protocol::framing::{self, FrameError};
use flyto_tests::flyto_protocol::{
    ClientError, ErrorCode, MAX_FRAME, PROTOCOL_VERSION, PlanSpec, PlanState, Request, Response,
    StepSpec, StepState,
};
use flyto_tests::{DEADLINE, Daemon, TestEnv, bin, wait_until};
use std::io::{BufRead, BufReader, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FAST: &str = "[daemon]\nshutdown_grace = \"1s\"\n[plans]\nkill_grace = \"200ms\"\n";

/// A started daemon with one acknowledged, finished plan.
fn setup(config: &str) -> (TestEnv, Daemon, String) {
    let env = TestEnv::new(config);
    let daemon = env.start();
    let id = env.submit(TestEnv::run_plan("echo kept"));
    env.wait_plan(&id, "succeeded", |p| p.state == PlanState::Succeeded);
    (env, daemon, id)
}

/// The daemon still answers on a fresh connection and still has `id`.
fn assert_serving(env: &TestEnv, id: &str) {
    match env.client().call(&Request::Ping {}) {
        Ok(Response::Pong { .. }) => {}
        other => panic!("ping after bad input: {other:?}"),
    }
    let view = env.status(id);
    assert_eq!(view.state, PlanState::Succeeded, "{view:?}");
    assert_eq!(view.steps[0].stdout_tail, "kept\n");
    let out = env.ctl(&["ping"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

fn raw(env: &TestEnv) -> UnixStream {
    let s = UnixStream::connect(&env.sock).expect("connect");
    s.set_read_timeout(Some(DEADLINE)).expect("timeout");
    s.set_write_timeout(Some(DEADLINE)).expect("timeout");
    s
}

fn frame(req: &Request) -> Vec<u8> {
    framing::frame(req).expect("frame")
}

fn hello(protocol: u32) -> Vec<u8> {
    frame(&Request::Hello {
        protocol,
        client: "bad-input-test".into(),
    })
}

/// A binary connection past the handshake.
fn greeted(env: &TestEnv) -> UnixStream {
    let mut s = raw(env);
    s.write_all(&hello(PROTOCOL_VERSION)).expect("hello");
    match response(&mut s) {
        Response::Welcome { protocol, .. } => assert_eq!(protocol, PROTOCOL_VERSION),
        other => panic!("expected Welcome, got {other:?}"),
    }
    s
}

fn response(s: &mut UnixStream) -> Response {
    framing::read_frame(s)
        .expect("a well-formed response frame")
        .expect("a response before the connection closed")
}

fn error(resp: Response, want: ErrorCode) -> String {
    match resp {
        Response::Error { code, message } => {
            assert_eq!(code, want, "{message}");
            assert!(!message.is_empty());
            message
        }
        other => panic!("expected Error {want:?}, got {other:?}"),
    }
}

/// The daemon closed the connection (EOF, or a reset because it left our
/// extra bytes unread) — not a read timeout.
fn assert_closed(s: &mut UnixStream) {
    match framing::read_frame_bytes(s) {
        Ok(None) => {}
        Err(FrameError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("expected the connection to be closed, got {other:?}"),
    }
}

#[test]
fn an_oversized_frame_is_refused_and_the_connection_closed() {
    let (env, _daemon, id) = setup(FAST);
    let mut s = greeted(&env);
    s.write_all(&((MAX_FRAME as u32) + 1).to_be_bytes())
        .expect("header");
    let message = error(response(&mut s), ErrorCode::TooLarge);
    assert!(message.contains(&MAX_FRAME.to_string()), "{message}");
    assert_closed(&mut s);

    // Also as the very first bytes of a connection.
    let mut s = raw(&env);
    s.write_all(&u32::MAX.to_be_bytes()).expect("header");
    error(response(&mut s), ErrorCode::TooLarge);
    assert_closed(&mut s);
    assert_serving(&env, &id);
}

#[test]
fn a_truncated_frame_is_a_bad_request() {
    let (env, _daemon, id) = setup(FAST);
    let mut s = greeted(&env);
    let mut bytes = 100u32.to_be_bytes().to_vec();
    bytes.extend_from_slice(b"0123456789");
    s.write_all(&bytes).expect("partial frame");
    s.shutdown(Shutdown::Write).expect("shutdown");
    let message = error(response(&mut s), ErrorCode::BadRequest);
    assert!(message.contains("truncated"), "{message}");
    assert!(message.contains("10 of 100"), "{message}");
    assert_closed(&mut s);
    assert_serving(&env, &id);
}

#[test]
fn garbage_bytes_get_a_clear_error() {
    let (env, _daemon, id) = setup(FAST);

    // A well-framed payload that is not a request, after a valid Hello: an
    // error, and the connection still works.
    let mut s = greeted(&env);
    s.write_all(b"\x00\x00\x00\x05hello").expect("garbage");
    let message = error(response(&mut s), ErrorCode::BadRequest);
    assert!(message.contains("could not decode"), "{message}");
    assert!(message.contains("protocol"), "{message}");
    s.write_all(&frame(&Request::Ping {})).expect("ping");
    assert!(matches!(response(&mut s), Response::Pong { .. }));

    // Random bytes as the very first thing on a connection (their first
    // four bytes read as a huge length).
    let mut s = raw(&env);
    let mut seed: u32 = 0x9e37_79b9;
    let random: Vec<u8> = (0..64)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed >> 24) as u8 | 0x80
        })
        .collect();
    s.write_all(&random).expect("random bytes");
    error(response(&mut s), ErrorCode::TooLarge);
    assert_closed(&mut s);

    // Something that is not flyto at all: text, so a JSON error line.
    let s = raw(&env);
    let mut w = s.try_clone().expect("clone");
    w.write_all(b"GET / HTTP/1.1\r\nHost: flyto\r\n\r\n")
        .expect("http");
    let mut answer = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(s), &mut answer).expect("read");
    match serde_json::from_str::<Response>(&answer) {
        Ok(Response::Error { code, message }) => {
            assert_eq!(code, ErrorCode::BadRequest);
            assert!(message.contains("malformed JSON request"), "{message}");
        }
        other => panic!("expected an error, got {other:?} from {answer:?}"),
    }

    // A small frame of junk before any Hello.
    let mut s = raw(&env);
    s.write_all(b"\x00\x00\x00\x03\xff\xfe\xfd").expect("junk");
    let message = error(response(&mut s), ErrorCode::BadRequest);
    assert!(message.contains("could not decode"), "{message}");
    assert_serving(&env, &id);
}

#[test]
fn a_wrong_protocol_version_is_a_mismatch_naming_both_versions() {
    let (env, _daemon, id) = setup(FAST);
    let theirs = PROTOCOL_VERSION + 41;
    let mut s = raw(&env);
    s.write_all(&hello(theirs)).expect("hello");
    let message = error(response(&mut s), ErrorCode::ProtocolMismatch);
    assert!(message.contains(&format!("protocol {theirs}")), "{message}");
    assert!(
        message.contains(&format!("protocol {PROTOCOL_VERSION}")),
        "{message}"
    );
    assert_closed(&mut s);
    assert_serving(&env, &id);
}

#[test]
fn the_first_frame_must_be_hello() {
    let (env, _daemon, id) = setup(FAST);
    let mut s = raw(&env);
    s.write_all(&frame(&Request::PlanStatus { id: id.clone() }))
        .expect("status without hello");
    let message = error(response(&mut s), ErrorCode::BadRequest);
    assert!(message.contains("hello"), "{message}");
    assert!(message.contains("plan_status"), "{message}");
    assert_closed(&mut s);
    assert_serving(&env, &id);
}

#[test]
fn malformed_and_unknown_json_requests_are_bad_requests() {
    let (env, _daemon, id) = setup(FAST);
    let s = raw(&env);
    let mut w = s.try_clone().expect("clone");
    let mut r = BufReader::new(s);
    let mut ask = |line: &str| -> Response {
        w.write_all(line.as_bytes()).expect("write");
        let mut answer = String::new();
        r.read_line(&mut answer).expect("read");
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer:?}"))
    };

    let message = error(ask("{\"ping\":\n"), ErrorCode::BadRequest);
    assert!(message.contains("malformed JSON request"), "{message}");
    let message = error(ask("{\"frobnicate\":{}}\n"), ErrorCode::BadRequest);
    assert!(message.contains("frobnicate"), "{message}");
    assert!(message.contains("unknown variant"), "{message}");
    let message = error(
        ask("{\"plan_status\":{\"identifier\":\"p1\"}}\n"),
        ErrorCode::BadRequest,
    );
    assert!(message.contains("missing field `id`"), "{message}");
    // The same connection goes on answering.
    assert!(matches!(ask("{\"ping\":{}}\n"), Response::Pong { .. }));
    match ask(&format!("{{\"plan_status\":{{\"id\":\"{id}\"}}}}\n")) {
        Response::Plan { plan } => assert_eq!(plan.id, id),
        other => panic!("unexpected {other:?}"),
    }
    assert_serving(&env, &id);
}

fn run_step(id: &str, deps: &[&str]) -> StepSpec {
    StepSpec {
        id: id.into(),
        run: Some("true".into()),
        deps: deps.iter().map(|d| d.to_string()).collect(),
        ..Default::default()
    }
}

fn plan(steps: Vec<StepSpec>) -> PlanSpec {
    PlanSpec {
        name: None,
        steps,
        env: Default::default(),
        sandbox: None,
    }
}

#[test]
fn invalid_plans_are_refused_with_the_reason() {
    let (env, _daemon, id) = setup(FAST);
    let cases = [
        (plan(vec![]), "no steps"),
        (
            plan(vec![run_step("a", &[]), run_step("a", &[])]),
            "duplicate step id `a`",
        ),
        (
            plan(vec![run_step("a", &["ghost"])]),
            "depends on `ghost`, which is not a step",
        ),
        (
            plan(vec![
                run_step("a", &["c"]),
                run_step("b", &["a"]),
                run_step("c", &["b"]),
            ]),
            "dependency cycle: a -> c -> b -> a",
        ),
        (
            plan(vec![StepSpec {
                workdir: Some("/definitely/not/a/dir".into()),
                ..run_step("a", &[])
            }]),
            "/definitely/not/a/dir does not exist",
        ),
        (
            plan(vec![StepSpec {
                prompt: Some("hi".into()),
                ..run_step("both", &[])
            }]),
            "step `both` has both `run` and `prompt`",
        ),
    ];
    for (spec, want) in cases {
        let answer = env.client().call(&Request::SubmitPlan {
            plan: spec.clone(),
            idempotency_key: None,
        });
        match answer {
            Err(ClientError::Remote {
                code: ErrorCode::BadRequest,
                message,
            }) => assert!(
                message.contains(want),
                "{message:?} should contain {want:?}"
            ),
            other => panic!("{spec:?}: expected BadRequest, got {other:?}"),
        }
        assert_serving(&env, &id);
    }
    // Nothing half-accepted was left behind.
    let out = env.ctl(&["plan_list", "--json"]);
    let plans: Vec<serde_json::Value> = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(plans.len(), 1, "{}", out.stdout);
}

#[test]
fn invalid_plans_in_valid_files_exit_2_naming_the_file() {
    let (env, _daemon, id) = setup(FAST);
    let cases = [
        (
            "dup.toml",
            "[[steps]]\nid = \"a\"\nrun = \"true\"\n[[steps]]\nid = \"a\"\nrun = \"true\"\n",
            "duplicate step id `a`",
        ),
        (
            "cycle.json",
            r#"{"steps": [{"id": "a", "run": "true", "deps": ["b"]}, {"id": "b", "run": "true", "deps": ["a"]}]}"#,
            "dependency cycle",
        ),
        (
            "unknown-dep.toml",
            "[[steps]]\nid = \"a\"\nrun = \"true\"\ndeps = [\"nope\"]\n",
            "depends on `nope`",
        ),
        (
            "workdir.toml",
            "[[steps]]\nid = \"a\"\nrun = \"true\"\nworkdir = \"/definitely/not/a/dir\"\n",
            "does not exist",
        ),
    ];
    for (name, text, want) in cases {
        let path = env.work.join(name);
        std::fs::write(&path, text).expect("write plan");
        let out = env.ctl(&["submit_plan", path.to_str().expect("utf8")]);
        // An invalid plan file is a usage error, whichever side notices.
        assert_eq!(out.code, 2, "{name}: {} {}", out.stdout, out.stderr);
        assert!(out.stderr.contains(name), "{name}: {}", out.stderr);
        assert!(out.stderr.contains(want), "{name}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{name}: {}", out.stdout);
    }
    assert_serving(&env, &id);
}

#[test]
fn broken_plan_files_are_refused_naming_the_file() {
    let (env, _daemon, id) = setup(FAST);
    let cases = [
        ("syntax.toml", "[[steps]\nid = \"a\"\n", vec!["TOML"]),
        (
            "unknown-field.toml",
            "[[steps]]\nid = \"a\"\nrun = \"true\"\ncolour = \"red\"\n",
            vec!["colour", "line 4"],
        ),
        ("syntax.json", "{\"steps\": [", vec!["JSON"]),
        (
            "unknown-field.json",
            "{\"steps\": [{\"id\": \"a\", \"run\": \"true\", \"retries\": 3}]}",
            vec!["retries"],
        ),
        ("empty.toml", "name = \"nothing\"\n", vec!["no steps"]),
        (
            "both.toml",
            "[[steps]]\nid = \"a\"\nrun = \"true\"\nprompt = \"hi\"\n",
            vec!["exactly one of"],
        ),
    ];
    for (name, text, wants) in cases {
        let path = env.work.join(name);
        std::fs::write(&path, text).expect("write plan");
        let shown = path.to_str().expect("utf8");
        let out = env.ctl(&["submit_plan", shown]);
        assert_eq!(out.code, 2, "{name}: {} {}", out.stdout, out.stderr);
        assert!(out.stderr.contains(shown), "{name}: {}", out.stderr);
        for want in wants {
            assert!(out.stderr.contains(want), "{name}: {}", out.stderr);
        }
    }
    let missing = env.work.join("missing.toml");
    let out = env.ctl(&["submit_plan", missing.to_str().expect("utf8")]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains(&missing.display().to_string()),
        "{}",
        out.stderr
    );
    // None of them reached the daemon.
    assert_eq!(
        serde_json::from_str::<Vec<serde_json::Value>>(&env.ctl(&["plan_list", "--json"]).stdout)
            .expect("json")
            .len(),
        1
    );
    assert_serving(&env, &id);
}

fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("VmRSS")
}

#[test]
fn a_flood_of_output_is_bounded_in_the_record_the_log_and_memory() {
    const LOG_MAX: u64 = 1024 * 1024;
    const TAIL: usize = 4096;
    let config = format!("{FAST}output_tail_bytes = {TAIL}\nlog_max_bytes = {LOG_MAX}\n");
    let (env, daemon, id) = setup(&config);
    let flood = env.submit(TestEnv::run_plan(
        "head -c 100000000 /dev/zero | tr '\\0' x; echo; echo flood-done",
    ));
    let mut peak = rss_kib(daemon.pid());
    let view = wait_until(
        "the 100 MB step to finish",
        Duration::from_secs(120),
        || {
            peak = peak.max(rss_kib(daemon.pid()));
            let v = env.status(&flood);
            v.state.is_terminal().then_some(v)
        },
    );
    peak = peak.max(rss_kib(daemon.pid()));
    assert_eq!(view.state, PlanState::Succeeded, "{view:?}");
    let step = &view.steps[0];
    assert_eq!(step.state, StepState::Succeeded);
    assert_eq!(step.exit_code, Some(0));
    assert!(
        !step.stdout_tail.is_empty() && step.stdout_tail.len() <= TAIL,
        "tail of {} bytes",
        step.stdout_tail.len()
    );
    // The tail is the very end of the stream: all of it went through.
    let body = step
        .stdout_tail
        .strip_suffix("\nflood-done\n")
        .unwrap_or_else(|| panic!("tail does not end the stream: {:?}", &step.stdout_tail));
    assert!(!body.is_empty() && body.bytes().all(|b| b == b'x'));
    let log = step.log_path.as_deref().expect("a log");
    let size = std::fs::metadata(log).expect("log file").len();
    assert!(
        size >= LOG_MAX,
        "the log keeps the first {LOG_MAX} bytes: {size}"
    );
    assert!(size <= LOG_MAX + 256, "log of {size} bytes");
    assert!(
        step.error
            .as_deref()
            .unwrap_or_default()
            .contains("truncated"),
        "{:?}",
        step.error
    );
    assert!(
        peak < 200 * 1024,
        "flytod's RSS reached {peak} KiB while a step printed 100 MB"
    );
    assert_serving(&env, &id);
}

/// Live processes of step `plan/main` of this env's daemon.
fn step_processes(env: &TestEnv, plan: &str) -> Vec<i32> {
    let marker = format!("FLYTO_STEP={plan}/main");
    let sock = env.plan_sock_prefix();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
        if vars.contains(&marker.as_bytes()) && vars.iter().any(|v| v.starts_with(sock.as_bytes()))
        {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn cancelling_a_command_that_ignores_sigterm_still_stops_it() {
    let (env, _daemon, id) = setup(FAST);
    let stubborn = env.submit(TestEnv::run_plan("trap '' TERM; sleep 30; echo survived"));
    env.wait_plan(&stubborn, "running", |p| {
        p.steps[0].state == StepState::Running
    });
    wait_until("the step's processes", DEADLINE, || {
        (step_processes(&env, &stubborn).len() >= 2).then_some(())
    });
    let started = Instant::now();
    let out = env.ctl(&["plan_cancel", &stubborn]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let view = env.wait_plan(&stubborn, "cancelled", |p| p.state.is_terminal());
    assert_eq!(view.state, PlanState::Cancelled, "{view:?}");
    assert_eq!(view.steps[0].state, StepState::Cancelled);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cancel took {:?}",
        started.elapsed()
    );
    wait_until("no process of the cancelled step", DEADLINE, || {
        step_processes(&env, &stubborn).is_empty().then_some(())
    });
    assert!(!view.steps[0].stdout_tail.contains("survived"));
    assert_serving(&env, &id);
}

fn flytod(env: &TestEnv, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin("flytod"))
        .args(args)
        .env_remove("NOTIFY_SOCKET")
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .envs(env.vars())
        .stdin(Stdio::null())
        .output()
        .expect("run flytod");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_config_with_an_unknown_key_is_refused() {
    let env = TestEnv::new("[plans]\nmax_paralel_plans = 2\n");
    let config = env.config.display().to_string();
    let log = match env.try_start(&[]) {
        Ok(_) => panic!("flytod started with an unknown config key"),
        Err(log) => log,
    };
    assert!(log.contains("exited"), "{log}");
    for want in [config.as_str(), "line 2", "max_paralel_plans"] {
        assert!(log.contains(want), "{want} missing from:\n{log}");
    }
    assert!(!env.sock.exists(), "no socket for a daemon that refused");

    let (code, _, stderr) = flytod(&env, &["check-config"]);
    assert_eq!(code, 1, "{stderr}");
    for want in [config.as_str(), "line 2", "max_paralel_plans"] {
        assert!(stderr.contains(want), "{want} missing from:\n{stderr}");
    }

    env.write_config("[plans]\nmax_parallel_plans = 2\n");
    let (code, stdout, stderr) = flytod(&env, &["check-config"]);
    assert_eq!(code, 0, "{stdout} {stderr}");
    assert!(stdout.contains(&config), "{stdout}");
    let daemon = env.start();
    assert_serving_fresh(&env);
    drop(daemon);
}

/// `max_iterations = 0` would still have made one model call a run; it
/// is refused at start and by check-config, naming the file, key and fix.
#[test]
fn a_config_with_zero_max_iterations_is_refused() {
    let env = TestEnv::new("[sessions]\nmax_iterations = 0\n");
    let config = env.config.display().to_string();
    let wants = [
        config.as_str(),
        "sessions.max_iterations must be at least 1",
    ];
    let (code, _, stderr) = flytod(&env, &["check-config"]);
    assert_eq!(code, 1, "{stderr}");
    for want in wants {
        assert!(stderr.contains(want), "{want} missing from:\n{stderr}");
    }
    let log = match env.try_start(&[]) {
        Ok(_) => panic!("flytod started with sessions.max_iterations = 0"),
        Err(log) => log,
    };
    for want in wants {
        assert!(log.contains(want), "{want} missing from:\n{log}");
    }
    assert!(!env.sock.exists(), "no socket for a daemon that refused");

    env.write_config("[sessions]\nmax_iterations = 1\n");
    let (code, stdout, stderr) = flytod(&env, &["check-config"]);
    assert_eq!(code, 0, "{stdout} {stderr}");
}

fn assert_serving_fresh(env: &TestEnv) {
    let out = env.ctl(&["ping"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

/// A `log_level` that is neither a level nor directives naming levels
/// used to pass and silence the daemon; now check-config and start refuse
/// it, naming the valid forms.
#[test]
fn an_invalid_log_level_is_refused_naming_the_valid_forms() {
    for bad in ["loud", "flyto_actors"] {
        let env = TestEnv::new(&format!("[daemon]\nlog_level = \"{bad}\"\n"));
        let wants = [
            env.config.display().to_string(),
            format!("daemon.log_level = \"{bad}\""),
            "error, warn, info, debug, trace".to_string(),
            "flyto_actors=debug,info".to_string(),
        ];
        let (code, _, stderr) = flytod(&env, &["check-config"]);
        assert_eq!(code, 1, "{stderr}");
        let log = match env.try_start(&[]) {
            Ok(_) => panic!("flytod started with log_level = {bad:?}"),
            Err(log) => log,
        };
        for want in &wants {
            assert!(
                stderr.contains(want.as_str()),
                "{want} missing from:\n{stderr}"
            );
            assert!(log.contains(want.as_str()), "{want} missing from:\n{log}");
        }
    }
    let env = TestEnv::new("[daemon]\nlog_level = \"flytod=debug,warn\"\n");
    let (code, stdout, stderr) = flytod(&env, &["check-config"]);
    assert_eq!(code, 0, "{stdout} {stderr}");
    let daemon = env.start();
    assert_serving_fresh(&env);
    assert!(daemon.log().contains("ready"), "{}", daemon.log());
}

#[test]
fn check_config_checks_the_default_workdir_and_warns_about_unset_keys() {
    let env = TestEnv::new("");
    let missing = env.work.join("no-such-dir");
    env.write_config(&format!(
        "[plans]\ndefault_workdir = \"{}\"\n\n[models.m]\napi = \"openai\"\nbase_url = \"http://127.0.0.1:9\"\nmodel = \"m\"\napi_key_env = \"FLYTO_TEST_UNSET_KEY\"\n",
        missing.display()
    ));
    let (code, _, stderr) = flytod(&env, &["check-config"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("plans.default_workdir"), "{stderr}");
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
    assert!(stderr.contains("warning: models.m.api_key_env"), "{stderr}");
    assert!(
        stderr.contains("FLYTO_TEST_UNSET_KEY is not set"),
        "{stderr}"
    );

    std::fs::create_dir_all(&missing).unwrap();
    let (code, stdout, stderr) = flytod(&env, &["check-config"]);
    assert_eq!(code, 0, "{stdout} {stderr}");
    assert!(
        stderr.contains("FLYTO_TEST_UNSET_KEY is not set"),
        "{stderr}"
    );
    assert!(stdout.contains("config OK"), "{stdout}");
}

/// The hint says where to add a model: the file this daemon reads.
#[test]
fn the_no_model_hint_names_the_config_file_in_use() {
    let env = TestEnv::new(FAST);
    let _daemon = env.start();
    let out = env.ctl(&["submit_plan", "--prompt", "hi", "--wait"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("no model configured"), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("to {}", env.config.display())),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("~/.config"), "{}", out.stderr);
}

/// Scripts may send whitespace or blank lines before their JSON; a line
/// that is not a request gets a JSON error and the next one is served.
#[test]
fn json_mode_tolerates_leading_whitespace_and_answers_bad_lines_in_json() {
    let (env, _daemon, id) = setup(FAST);
    for opening in [
        "  {\"ping\":{}}\n",
        "\n\n {\"ping\":{}}\n",
        "\t{\"ping\":{}}\n",
    ] {
        let s = raw(&env);
        let mut w = s.try_clone().expect("clone");
        let mut r = BufReader::new(s);
        w.write_all(opening.as_bytes()).expect("write");
        let mut answer = String::new();
        r.read_line(&mut answer).expect("read");
        let resp: Response = serde_json::from_str(&answer)
            .unwrap_or_else(|e| panic!("{opening:?}: {e}: {answer:?}"));
        assert!(matches!(resp, Response::Pong { .. }), "{resp:?}");
    }
    let s = raw(&env);
    let mut w = s.try_clone().expect("clone");
    let mut r = BufReader::new(s);
    w.write_all(b" not json at all\n{\"plan_status\":{\"id\":\"")
        .expect("write");
    w.write_all(format!("{id}\"}}}}\n").as_bytes())
        .expect("write");
    let mut answer = String::new();
    r.read_line(&mut answer).expect("read");
    let value: serde_json::Value =
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer:?}"));
    assert_eq!(value["error"]["code"], "BadRequest", "{answer}");
    assert!(
        value["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("malformed JSON request"),
        "{answer}"
    );
    answer.clear();
    r.read_line(&mut answer).expect("read");
    match serde_json::from_str::<Response>(&answer).expect("a JSON response") {
        Response::Plan { plan } => assert_eq!(plan.id, id),
        other => panic!("unexpected {other:?}"),
    }
    // A line that does not even start like JSON (typed at socat) is
    // answered in JSON too, never with a binary frame.
    for line in ["ping\n", "[1]\n", "\"ping\"\n"] {
        let s = raw(&env);
        let mut w = s.try_clone().expect("clone");
        let mut r = BufReader::new(s);
        w.write_all(line.as_bytes()).expect("write");
        w.write_all(b"{\"ping\":{}}\n").expect("write");
        let mut answer = String::new();
        r.read_line(&mut answer).expect("read");
        let value: serde_json::Value =
            serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{line:?}: {e}: {answer:?}"));
        assert_eq!(value["error"]["code"], "BadRequest", "{line:?}: {answer}");
        answer.clear();
        r.read_line(&mut answer).expect("read");
        let resp: Response =
            serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{line:?}: {e}: {answer:?}"));
        assert!(matches!(resp, Response::Pong { .. }), "{resp:?}");
    }
    assert_serving(&env, &id);
}
