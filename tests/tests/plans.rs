//! Plans end to end through the real `flytod` and `flytoctl`: submitting
//! (flags, TOML/JSON files, stdin), following (`--wait`, `--watch`,
//! `plan_watch`), inspecting (`plan_status`, `plan_list`, logs), cancelling,
//! parallelism, timeouts, expiry, the step environment, nested plans, and
//! the JSON-lines mode of the socket.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::flyto_protocol::{
    self as proto, ClientError, DaemonStats, ErrorCode, Event, PlanSpec, PlanState, PlanSummary,
    PlanView, Request, Response, StepSpec, StepState,
};
use flyto_tests::{Backend, DEADLINE, TestEnv, bin, wait_until};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Short graces so cancels and timeouts do not slow the suite down.
const FAST: &str = "[daemon]\nshutdown_grace = \"1s\"\n[plans]\nkill_grace = \"200ms\"\n";

fn fast_with(plans_extra: &str) -> String {
    format!("{FAST}{plans_extra}")
}

/// flytoctl against `env`, left running (for `--wait` / `--watch`).
fn spawn_ctl(env: &TestEnv, args: &[&str]) -> Child {
    Command::new(bin("flytoctl"))
        .args(args)
        .env_remove("FLYTO_PLAN_SOCK")
        .env_remove("NOTIFY_SOCKET")
        .envs(env.vars())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn flytoctl")
}

/// Waits for a spawned flytoctl to exit: (code, stdout, stderr).
fn finish_ctl(mut child: Child, limit: Duration) -> (i32, String, String) {
    wait_until("flytoctl to exit", limit, || {
        child.try_wait().ok().flatten()
    });
    let out = child.wait_with_output().expect("flytoctl output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Pids of live processes started for step `plan/step` by the daemon of
/// `env` (found by the `FLYTO_STEP` marker and this env's socket, so
/// parallel tests with the same plan ids do not see each other's).
fn step_processes(env: &TestEnv, plan: &str, step: &str) -> Vec<i32> {
    let marker = format!("FLYTO_STEP={plan}/{step}");
    let sock = env.plan_sock_prefix();
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
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

fn list(env: &TestEnv, state: Option<PlanState>) -> Vec<PlanSummary> {
    match env
        .client()
        .call(&Request::PlanList { state, limit: None })
        .expect("plan_list")
    {
        Response::Plans { plans, .. } => plans,
        other => panic!("unexpected answer {other:?}"),
    }
}

fn step<'a>(plan: &'a PlanView, id: &str) -> &'a proto::StepView {
    plan.steps
        .iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("plan {} has no step {id}: {plan:?}", plan.id))
}

fn is_state(state: PlanState) -> impl Fn(&PlanView) -> bool {
    move |p| p.state == state
}

fn step_running(id: &'static str) -> impl Fn(&PlanView) -> bool {
    move |p| {
        p.steps
            .iter()
            .any(|s| s.id == id && s.state == StepState::Running)
    }
}

fn run_step(id: &str, command: &str, deps: &[&str]) -> StepSpec {
    StepSpec {
        id: id.into(),
        run: Some(command.into()),
        deps: deps.iter().map(|d| d.to_string()).collect(),
        ..Default::default()
    }
}

/// A shell command that waits (with a deadline of its own) for `file`.
fn wait_for_file(file: &Path) -> String {
    format!(
        "for i in $(seq 1 600); do [ -e '{}' ] && exit 0; sleep 0.05; done; exit 9",
        file.display()
    )
}

fn submit_wait_prints_the_output_and_exits_with_the_outcome(backend: Backend) {
    let env = TestEnv::on(backend, FAST);
    let _daemon = env.start();

    let ok = env.ctl(&["submit_plan", "--run", "echo hello", "--wait"]);
    assert_eq!(ok.code, 0, "stderr: {}", ok.stderr);
    assert_eq!(ok.stdout, "hello\n", "stderr: {}", ok.stderr);

    let bad = env.ctl(&[
        "submit_plan",
        "--run",
        "echo about to fail; echo oops >&2; exit 3",
        "--wait",
    ]);
    assert_eq!(bad.code, 1, "stdout: {} stderr: {}", bad.stdout, bad.stderr);
    assert_eq!(bad.stdout, "about to fail\n");
    assert!(bad.stderr.contains("oops"), "{}", bad.stderr);
    assert!(bad.stderr.contains("failed"), "{}", bad.stderr);
    assert!(
        bad.stderr.contains("step `main` failed: exit code 3"),
        "stderr should name the failed step: {}",
        bad.stderr
    );
}

fn a_cancelled_plan_ends_wait_with_exit_5_and_kills_the_step(backend: Backend) {
    let env = TestEnv::on(backend, FAST);
    let _daemon = env.start();

    let waiter = spawn_ctl(&env, &["submit_plan", "--run", "sleep 30", "--wait"]);
    let id = wait_until("the plan to be submitted", DEADLINE, || {
        list(&env, None).first().map(|p| p.id.clone())
    });
    env.wait_plan(&id, "step running", step_running("main"));
    wait_until("the step's sleep process", DEADLINE, || {
        (!step_processes(&env, &id, "main").is_empty()).then_some(())
    });

    let cancel = env.ctl(&["plan_cancel", &id]);
    assert_eq!(cancel.code, 0, "{}", cancel.stderr);

    let (code, stdout, stderr) = finish_ctl(waiter, DEADLINE);
    assert_eq!(code, 5, "stdout: {stdout} stderr: {stderr}");
    assert!(stderr.contains("cancelled"), "{stderr}");
    assert_eq!(env.status(&id).state, PlanState::Cancelled);
    wait_until("no process of the cancelled step", DEADLINE, || {
        step_processes(&env, &id, "main").is_empty().then_some(())
    });
}

const DAG_TOML: &str = r#"
name = "dag-toml"

[[steps]]
id = "a"
run = "echo a-out"

[[steps]]
id = "b"
run = "echo b-out; seq 1 2000"
deps = ["a"]

[[steps]]
id = "c"
run = "echo c-out"
deps = ["a", "b"]
"#;

const DAG_JSON: &str = r#"{
  "name": "dag-json",
  "steps": [
    {"id": "a", "run": "echo a-out"},
    {"id": "b", "run": "echo b-out; seq 1 2000", "deps": ["a"]},
    {"id": "c", "run": "echo c-out", "deps": ["a", "b"]}
  ]
}"#;

fn submitted_id(out: &flyto_tests::CtlOutput) -> String {
    assert_eq!(out.code, 0, "stdout: {} stderr: {}", out.stdout, out.stderr);
    let id = out.stdout.trim().to_string();
    assert!(
        id.starts_with('p') && id[1..].parse::<u64>().is_ok() && out.stdout == format!("{id}\n"),
        "submit_plan should print only the plan id, got {:?}",
        out.stdout
    );
    id
}

fn check_dag(env: &TestEnv, id: &str, name: &str) {
    let plan = env.wait_plan(id, "succeeded", |p| p.state.is_terminal());
    assert_eq!(plan.state, PlanState::Succeeded, "{plan:?}");
    assert_eq!(plan.name.as_deref(), Some(name));
    let (a, b, c) = (step(&plan, "a"), step(&plan, "b"), step(&plan, "c"));
    for s in [a, b, c] {
        assert_eq!(s.state, StepState::Succeeded, "{s:?}");
        assert_eq!(s.attempts, 1);
    }
    assert_eq!(c.deps, ["a", "b"]);
    // Dependencies ran first.
    assert!(b.started_ms >= a.finished_ms, "{plan:?}");
    assert!(c.started_ms >= b.finished_ms, "{plan:?}");
    assert_eq!(a.stdout_tail, "a-out\n");
    assert_eq!(c.stdout_tail, "c-out\n");
}

fn plans_from_toml_json_and_stdin_then_status_log_and_list(backend: Backend) {
    let env = TestEnv::on(backend, FAST);
    let _daemon = env.start();
    let toml_path = env.work.join("plan.toml");
    std::fs::write(&toml_path, DAG_TOML).expect("write plan");
    let json_path = env.work.join("plan.json");
    std::fs::write(&json_path, DAG_JSON).expect("write plan");

    let from_toml = submitted_id(&env.ctl(&["submit_plan", toml_path.to_str().expect("utf8")]));
    check_dag(&env, &from_toml, "dag-toml");
    let from_json = submitted_id(&env.ctl(&["submit_plan", json_path.to_str().expect("utf8")]));
    check_dag(&env, &from_json, "dag-json");
    let stdin_plan = DAG_TOML.replace("dag-toml", "dag-stdin");
    let from_stdin = submitted_id(&env.ctl_with(&["submit_plan", "-"], &[], Some(&stdin_plan)));
    check_dag(&env, &from_stdin, "dag-stdin");

    // The table: every step with its state and its output tail.
    let text = env.ctl(&["plan_status", &from_toml]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    let out = &text.stdout;
    assert!(
        out.starts_with(&format!("plan {from_toml} \"dag-toml\" succeeded")),
        "{out}"
    );
    for id in ["a", "b", "c"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("{id} ")) && l.contains("succeeded")),
            "no row for step {id} in:\n{out}"
        );
    }
    assert!(out.contains("a stdout:\n    a-out\n"), "{out}");
    assert!(out.contains("c stdout:\n    c-out\n"), "{out}");
    assert!(out.contains("    2000\n"), "{out}");

    // --json is a PlanView.
    let json = env.ctl(&["plan_status", &from_json, "--json"]);
    assert_eq!(json.code, 0, "{}", json.stderr);
    let view: PlanView = serde_json::from_str(&json.stdout).expect("plan_status --json");
    assert_eq!(view.id, from_json);
    assert_eq!(view.state, PlanState::Succeeded);
    assert_eq!(view.steps.len(), 3);

    // --log is the full output, where the tail is only its end.
    let mut full = String::from("b-out\n");
    for i in 1..=2000 {
        full.push_str(&format!("{i}\n"));
    }
    let log = env.ctl(&["plan_status", &from_stdin, "--log", "b"]);
    assert_eq!(log.code, 0, "{}", log.stderr);
    assert_eq!(log.stdout, full);
    let b_tail = step(&env.status(&from_stdin), "b").stdout_tail.clone();
    assert!(b_tail.len() < full.len() && full.ends_with(b_tail.as_str()));

    // A failed plan, then the list: newest first, filterable.
    let failed = submitted_id(&env.ctl(&["submit_plan", "--run", "exit 3"]));
    env.wait_plan(&failed, "failed", is_state(PlanState::Failed));
    let listed = env.ctl(&["plan_list"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let ids: Vec<&str> = listed
        .stdout
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        ids,
        [
            failed.as_str(),
            from_stdin.as_str(),
            from_json.as_str(),
            from_toml.as_str()
        ],
        "{}",
        listed.stdout
    );
    assert!(
        listed
            .stdout
            .lines()
            .nth(1)
            .expect("row")
            .contains("failed")
    );

    let only_failed = env.ctl(&["plan_list", "--state", "failed"]);
    assert_eq!(only_failed.code, 0, "{}", only_failed.stderr);
    let rows: Vec<&str> = only_failed.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "{}", only_failed.stdout);
    assert!(rows[0].starts_with(&format!("{failed} ")), "{rows:?}");

    let as_json = env.ctl(&["plan_list", "--json"]);
    assert_eq!(as_json.code, 0, "{}", as_json.stderr);
    let plans: Vec<PlanSummary> = serde_json::from_str(&as_json.stdout).expect("plan_list --json");
    let json_ids: Vec<&str> = plans.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(json_ids, ids);
    assert_eq!(plans[0].state, PlanState::Failed);
    assert!(
        plans[1..]
            .iter()
            .all(|p| p.state == PlanState::Succeeded && p.steps_total == 3 && p.steps_done == 3)
    );
    let failed_json = env.ctl(&["plan_list", "--state", "failed", "--json"]);
    let plans: Vec<PlanSummary> = serde_json::from_str(&failed_json.stdout).expect("json");
    assert_eq!(plans.len(), 1);
    assert_eq!(plans[0].id, failed);
}

/// Lines of a child's stdout, delivered over a channel so reads have a
/// deadline.
fn stdout_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn status_watch_follows_a_plan_to_the_end_in_plain_lines(backend: Backend) {
    let env = TestEnv::on(backend, FAST);
    let _daemon = env.start();
    let go = env.work.join("go");
    let id = env.submit(PlanSpec {
        name: None,
        env: Default::default(),
        steps: vec![
            run_step("a", &wait_for_file(&go), &[]),
            run_step("b", "echo b done", &["a"]),
        ],
        sandbox: None,
    });

    let mut watcher = spawn_ctl(&env, &["plan_status", &id, "--watch"]);
    let lines = stdout_lines(&mut watcher);
    // The snapshot arrives while the plan still waits for us.
    let first = lines.recv_timeout(DEADLINE).expect("a first line");
    assert!(
        ["a pending", "a running"].contains(&first.as_str()),
        "{first}"
    );
    assert!(!env.status(&id).state.is_terminal());
    std::fs::write(&go, "").expect("go");

    let mut seen = vec![first];
    let deadline = Instant::now() + DEADLINE;
    while let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        seen.push(line);
    }
    let (code, _, stderr) = finish_ctl(watcher, DEADLINE);
    assert_eq!(code, 0, "lines: {seen:?} stderr: {stderr}");
    for want in ["a succeeded", "b succeeded"] {
        assert!(
            seen.iter().any(|l| l == want),
            "{want} missing from {seen:?}"
        );
    }
    assert_eq!(seen.last().map(String::as_str), Some("b succeeded"));
    assert!(
        seen.iter().all(|l| !l.contains('\u{1b}')),
        "plain lines expected: {seen:?}"
    );

    // A failed plan: --watch exits 1 and says why.
    let failed = env.submit(TestEnv::run_plan("exit 7"));
    env.wait_plan(&failed, "failed", is_state(PlanState::Failed));
    let out = env.ctl(&["plan_status", &failed, "--watch"]);
    assert_eq!(out.code, 1, "{} {}", out.stdout, out.stderr);
    assert_eq!(out.stdout, "main failed\n");
    assert!(out.stderr.contains("exit code 7"), "{}", out.stderr);
}

fn plan_watch_sends_a_snapshot_then_ordered_events_then_end(backend: Backend) {
    let env = TestEnv::on(backend, FAST);
    let _daemon = env.start();
    let go = env.work.join("go");
    let id = env.submit(PlanSpec {
        name: None,
        env: Default::default(),
        steps: vec![
            run_step("a", &wait_for_file(&go), &[]),
            run_step("b", "echo b", &["a"]),
        ],
        sandbox: None,
    });

    let mut client = env.client();
    client
        .send(&Request::PlanWatch { id: id.clone() })
        .expect("send plan_watch");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        loop {
            let resp = client.recv();
            let end = !matches!(resp, Ok(Response::Plan { .. } | Response::Event { .. }));
            if tx.send(resp).is_err() || end {
                return;
            }
        }
    });
    let next = || {
        rx.recv_timeout(DEADLINE)
            .expect("a watch message within the deadline")
            .expect("a watch message")
    };

    let snapshot = match next() {
        Response::Plan { plan } => plan,
        other => panic!("the first message should be the snapshot, got {other:?}"),
    };
    assert_eq!(snapshot.id, id);
    assert!(!snapshot.state.is_terminal(), "{snapshot:?}");
    std::fs::write(&go, "").expect("go");

    let mut last_seq = snapshot.revision;
    let mut last_plan = None;
    loop {
        match next() {
            Response::Event {
                seq,
                event: Event::PlanUpdated { plan },
            } => {
                assert!(seq > last_seq, "seq {seq} after {last_seq}");
                assert_eq!(seq, plan.revision);
                assert!(
                    last_plan
                        .as_ref()
                        .is_none_or(|p: &PlanView| !p.state.is_terminal()),
                    "an event after the terminal one"
                );
                last_seq = seq;
                last_plan = Some(plan);
            }
            Response::End {} => break,
            other => panic!("unexpected watch message {other:?}"),
        }
    }
    let last = last_plan.expect("at least one event");
    assert_eq!(last.state, PlanState::Succeeded, "{last:?}");
    assert!(last.steps.iter().all(|s| s.state == StepState::Succeeded));

    // Watching a finished plan: the snapshot, then End at once.
    let mut client = env.client();
    client
        .send(&Request::PlanWatch { id: id.clone() })
        .expect("send");
    assert!(
        matches!(client.recv().expect("snapshot"), Response::Plan { plan } if plan.state == PlanState::Succeeded)
    );
    assert_eq!(client.recv().expect("end"), Response::End {});
}

/// A raw JSON-lines connection: no handshake.
struct JsonConn {
    write: UnixStream,
    read: BufReader<UnixStream>,
}

impl JsonConn {
    fn open(env: &TestEnv) -> JsonConn {
        let s = UnixStream::connect(&env.sock).expect("connect");
        s.set_read_timeout(Some(DEADLINE)).expect("timeout");
        JsonConn {
            write: s.try_clone().expect("clone"),
            read: BufReader::new(s),
        }
    }

    fn send(&mut self, text: &str) {
        self.write.write_all(text.as_bytes()).expect("write");
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.read.read_line(&mut line).expect("read a line");
        assert!(line.ends_with('\n'), "one JSON object per line: {line:?}");
        line
    }

    fn response(&mut self) -> Response {
        let line = self.line();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }
}

fn json_lines_mode_answers_without_a_handshake(backend: Backend) {
    let env = TestEnv::on(backend, FAST);
    let daemon = env.start();
    let mut conn = JsonConn::open(&env);

    conn.send("{\"ping\":{}}\n");
    let pong: serde_json::Value = serde_json::from_str(&conn.line()).expect("json");
    assert_eq!(
        pong["pong"]["pid"].as_u64(),
        Some(daemon.pid() as u64),
        "{pong}"
    );

    conn.send(r#"{"submit_plan":{"plan":{"name":"via-json","steps":[{"id":"a","run":"echo json-mode"}]}}}"#);
    conn.send("\n");
    let id = match conn.response() {
        Response::PlanSubmitted {
            id,
            duplicate: false,
        } => id,
        other => panic!("unexpected {other:?}"),
    };
    let done = wait_until("the JSON-submitted plan to finish", DEADLINE, || {
        conn.send(&format!("{{\"plan_status\":{{\"id\":\"{id}\"}}}}\n"));
        match conn.response() {
            Response::Plan { plan } => plan.state.is_terminal().then_some(plan),
            other => panic!("unexpected {other:?}"),
        }
    });
    assert_eq!(done.state, PlanState::Succeeded);
    assert_eq!(done.name.as_deref(), Some("via-json"));
    assert_eq!(done.steps[0].stdout_tail, "json-mode\n");

    // Several requests in one write: answered in order on the same line
    // stream.
    conn.send(
        "{\"ping\":{}}\n{\"stats\":{}}\n{\"plan_list\":{\"state\":\"succeeded\",\"limit\":5}}\n",
    );
    assert!(matches!(conn.response(), Response::Pong { .. }));
    match conn.response() {
        Response::Stats { stats } => assert_eq!(stats.plans_succeeded, 1),
        other => panic!("unexpected {other:?}"),
    }
    match conn.response() {
        Response::Plans { plans, .. } => {
            assert_eq!(plans.len(), 1);
            assert_eq!(plans[0].id, id);
        }
        other => panic!("unexpected {other:?}"),
    }
}

fn an_idempotency_key_submits_once(backend: Backend) {
    let env = TestEnv::on(backend, FAST);
    let _daemon = env.start();
    let args = [
        "submit_plan",
        "--run",
        "echo once",
        "--idempotency-key",
        "deploy-42",
    ];
    let first = submitted_id(&env.ctl(&args));
    let again = env.ctl(&args);
    assert_eq!(submitted_id(&again), first);
    assert!(again.stderr.contains("idempotency key"), "{}", again.stderr);
    let listed = env.ctl(&["plan_list", "--json"]);
    let plans: Vec<PlanSummary> = serde_json::from_str(&listed.stdout).expect("json");
    assert_eq!(plans.len(), 1, "{plans:?}");
    assert_eq!(plans[0].id, first);

    // Another key is another plan.
    let other = submitted_id(&env.ctl(&[
        "submit_plan",
        "--run",
        "echo once",
        "--idempotency-key",
        "deploy-43",
    ]));
    assert_ne!(other, first);
    assert_eq!(list(&env, None).len(), 2);
}

#[test]
fn cancelling_a_pending_plan_is_immediate_and_leaves_the_running_one() {
    let env = TestEnv::new(FAST);
    let _daemon = env.start();
    let running = env.submit(TestEnv::run_plan("sleep 30"));
    env.wait_plan(&running, "step running", step_running("main"));
    let queued = env.submit(TestEnv::run_plan("echo never"));
    assert_eq!(env.status(&queued).state, PlanState::Pending);

    let out = env.ctl(&["plan_cancel", &queued]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, format!("cancelled {queued}\n"));
    let view = env.status(&queued);
    assert_eq!(view.state, PlanState::Cancelled);
    assert_eq!(view.steps[0].state, StepState::Cancelled);
    assert_eq!(view.steps[0].attempts, 0, "the step never started");
    let first = env.status(&running);
    assert_eq!(first.state, PlanState::Running);
    assert_eq!(first.steps[0].state, StepState::Running);

    let out = env.ctl(&["plan_cancel", &running]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let view = env.wait_plan(&running, "cancelled", is_state(PlanState::Cancelled));
    assert_eq!(view.steps[0].state, StepState::Cancelled);
    wait_until("no process of the cancelled step", DEADLINE, || {
        step_processes(&env, &running, "main")
            .is_empty()
            .then_some(())
    });
    // Cancelling a finished plan says so and changes nothing.
    let out = env.ctl(&["plan_cancel", &queued]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        format!("{queued} had already finished (cancelled): nothing to cancel\n")
    );
}

fn max_parallel_plans_runs_two_plans_at_once(backend: Backend) {
    let env = TestEnv::on(backend, &fast_with("max_parallel_plans = 2\n"));
    let _daemon = env.start();
    let go = env.work.join("go");
    let mut ids = Vec::new();
    for name in ["one", "two"] {
        let marker = env.work.join(format!("{name}.started"));
        ids.push(env.submit(TestEnv::run_plan(&format!(
            "touch '{}'; {}",
            marker.display(),
            wait_for_file(&go)
        ))));
    }
    // Both steps are running at the same time: each has started and is
    // blocked on `go`, which only the test creates.
    wait_until("both plans running", DEADLINE, || {
        let both = ids.iter().all(|id| {
            let v = env.status(id);
            v.state == PlanState::Running && v.steps[0].state == StepState::Running
        });
        let markers = ["one", "two"]
            .iter()
            .all(|n| env.work.join(format!("{n}.started")).exists());
        (both && markers).then_some(())
    });
    let stats = match env.client().call(&Request::Stats {}).expect("stats") {
        Response::Stats { stats } => stats,
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(stats.plans_running, 2, "{stats:?}");
    assert_eq!(stats.steps_running, 2, "{stats:?}");

    std::fs::write(&go, "").expect("go");
    for id in &ids {
        let v = env.wait_plan(id, "finished", |p| p.state.is_terminal());
        assert_eq!(v.state, PlanState::Succeeded, "{v:?}");
    }
}

#[test]
fn an_agent_step_fails_without_a_model() {
    let env = TestEnv::new(FAST);
    let _daemon = env.start();
    let out = env.ctl(&["submit_plan", "--prompt", "hi", "--wait"]);
    assert_eq!(out.code, 1, "{} {}", out.stdout, out.stderr);
    assert!(out.stderr.contains("no model configured"), "{}", out.stderr);
    let plans = list(&env, None);
    let view = env.status(&plans[0].id);
    assert_eq!(view.state, PlanState::Failed);
    assert_eq!(view.steps[0].kind, "agent");
    assert_eq!(view.steps[0].state, StepState::Failed);
    let error = view.steps[0].error.as_deref().unwrap_or_default();
    assert!(error.starts_with("no model configured"), "{error}");
}

fn a_step_timeout_fails_the_step_with_exit_code_124(backend: Backend) {
    let env = TestEnv::on(backend, FAST);
    let _daemon = env.start();
    let started = Instant::now();
    let id = env.submit(PlanSpec {
        name: None,
        env: Default::default(),
        steps: vec![StepSpec {
            timeout_secs: Some(1),
            ..run_step("slow", "sleep 30", &[])
        }],
        sandbox: None,
    });
    let view = env.wait_plan(&id, "finished", |p| p.state.is_terminal());
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(view.state, PlanState::Failed);
    let s = step(&view, "slow");
    assert_eq!(s.state, StepState::Failed);
    assert_eq!(s.exit_code, Some(124));
    let error = s.error.as_deref().unwrap_or_default();
    assert!(error.contains("timed out"), "{error}");
    wait_until("no process of the timed-out step", DEADLINE, || {
        step_processes(&env, &id, "slow").is_empty().then_some(())
    });
}

fn finished_plans_and_their_logs_expire_after_the_ttl(backend: Backend) {
    let env = TestEnv::on(backend, &fast_with("plan_ttl = \"1s\"\n"));
    let _daemon = env.start();
    let id = env.submit(TestEnv::run_plan("echo short-lived"));
    let view = env.wait_plan(&id, "succeeded", is_state(PlanState::Succeeded));
    // The shared store's logs are apart from the node's own store's.
    let logs = match backend {
        Backend::Sled => "logs",
        Backend::Postgres => "shared-logs",
    };
    let log_dir = env.state.join(logs).join(&id);
    let log_path = view.steps[0].log_path.clone().expect("a log path");
    assert!(
        Path::new(&log_path).starts_with(&log_dir),
        "{log_path} should be under {}",
        log_dir.display()
    );

    let gone = wait_until("the plan to expire", DEADLINE, || {
        let out = env.ctl(&["plan_status", &id]);
        (out.code != 0).then_some(out)
    });
    assert_eq!(gone.code, 4, "{}", gone.stderr);
    assert!(gone.stderr.contains("NotFound"), "{}", gone.stderr);
    assert!(gone.stderr.contains(&id), "{}", gone.stderr);
    match env.client().call(&Request::PlanStatus { id: id.clone() }) {
        Err(ClientError::Remote {
            code: ErrorCode::NotFound,
            ..
        }) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
    wait_until("the plan's log directory to be removed", DEADLINE, || {
        (!log_dir.exists()).then_some(())
    });
    assert!(list(&env, None).is_empty());
}

fn steps_get_the_flyto_variables_but_not_the_daemons_secrets(backend: Backend) {
    let env = TestEnv::on(backend, FAST);
    let _daemon = env
        .try_start(&[("MY_API_KEY", "sk-secret-123")])
        .unwrap_or_else(|log| panic!("flytod did not start:\n{log}"));
    let id = env.submit(TestEnv::run_plan("env"));
    env.wait_plan(&id, "succeeded", is_state(PlanState::Succeeded));
    let out = env.ctl(&["plan_status", &id, "--log", "main"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let vars = out.stdout;
    assert!(
        vars.contains(&format!("{}plan-{id}.sock\n", env.plan_sock_prefix())),
        "{vars}"
    );
    assert!(vars.contains(&format!("FLYTO_CHAIN={id}\n")), "{vars}");
    assert!(vars.contains(&format!("FLYTO_STEP={id}/main\n")), "{vars}");
    assert!(vars.contains("PATH="), "{vars}");
    assert!(
        !vars.contains("sk-secret-123"),
        "the secret leaked:\n{vars}"
    );
    assert!(!vars.contains("MY_API_KEY"), "{vars}");
}

fn a_step_can_submit_a_plan_through_flyto_plan_sock(backend: Backend) {
    let env = TestEnv::on(backend, &fast_with("max_parallel_plans = 2\n"));
    let _daemon = env.start();
    // FLYTO_SOCK is removed so only FLYTO_PLAN_SOCK can lead to the daemon.
    let command = format!(
        "env -u FLYTO_SOCK '{}' submit_plan --run 'echo nested' --wait",
        bin("flytoctl").display()
    );
    let outer = env.submit(TestEnv::run_plan(&command));
    let view = env.wait_plan(&outer, "finished", |p| p.state.is_terminal());
    assert_eq!(view.state, PlanState::Succeeded, "{view:?}");
    assert_eq!(view.steps[0].stdout_tail, "nested\n");

    let plans = list(&env, None);
    assert_eq!(plans.len(), 2, "{plans:?}");
    let nested = plans
        .iter()
        .find(|p| p.id != outer)
        .expect("the nested plan");
    assert_eq!(nested.state, PlanState::Succeeded);
    let nested = env.status(&nested.id);
    assert_eq!(nested.steps[0].stdout_tail, "nested\n");
    assert!(nested.created_ms >= view.steps[0].started_ms.unwrap_or(0));
}

#[test]
fn ping_and_stats_describe_the_daemon() {
    let env = TestEnv::new(FAST);
    let daemon = env.start();

    let ping = env.ctl(&["ping"]);
    assert_eq!(ping.code, 0, "{}", ping.stderr);
    assert!(
        ping.stdout.starts_with(&format!(
            "flytod {} pid {} up ",
            env!("CARGO_PKG_VERSION"),
            daemon.pid()
        )),
        "{}",
        ping.stdout
    );

    for cmd in ["true", "echo two"] {
        let id = env.submit(TestEnv::run_plan(cmd));
        env.wait_plan(&id, "succeeded", is_state(PlanState::Succeeded));
    }
    let failed = env.submit(TestEnv::run_plan("exit 1"));
    env.wait_plan(&failed, "failed", is_state(PlanState::Failed));
    let running = env.submit(TestEnv::run_plan("sleep 30"));
    env.wait_plan(&running, "running", step_running("main"));
    let pending = env.submit(TestEnv::run_plan("true"));

    let json = env.ctl(&["stats", "--json"]);
    assert_eq!(json.code, 0, "{}", json.stderr);
    let stats: DaemonStats = serde_json::from_str(&json.stdout).expect("stats --json");
    assert_eq!(stats.pid, daemon.pid() as u32);
    assert!(!stats.draining);
    assert_eq!(
        (
            stats.plans_pending,
            stats.plans_running,
            stats.plans_succeeded,
            stats.plans_failed,
            stats.plans_cancelled,
            stats.steps_running
        ),
        (1, 1, 2, 1, 0, 1),
        "{stats:?}"
    );

    let out = env.ctl(&["plan_cancel", &pending]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = env.ctl(&["plan_cancel", &running]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    env.wait_plan(&running, "cancelled", is_state(PlanState::Cancelled));

    let text = env.ctl(&["stats"]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    let value = |key: &str| {
        text.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {key} in:\n{}", text.stdout))
            .to_string()
    };
    assert_eq!(value("pid"), daemon.pid().to_string());
    assert_eq!(value("plans pending"), "0");
    assert_eq!(value("plans running"), "0");
    assert_eq!(value("plans succeeded"), "2");
    assert_eq!(value("plans failed"), "1");
    assert_eq!(value("plans cancelled"), "2");
    assert_eq!(value("steps running"), "0");
}

#[test]
fn flytoctl_without_a_daemon_exits_3_and_says_how_to_start_it() {
    let env = TestEnv::new(FAST);
    for args in [
        &["ping"][..],
        &["submit_plan", "--run", "true", "--wait"],
        &["plan_status", "p1"],
    ] {
        let out = env.ctl(args);
        assert_eq!(out.code, 3, "{args:?}: {} {}", out.stdout, out.stderr);
        assert!(
            out.stderr.contains("flytod is not running"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(out.stderr.contains("start it with"), "{}", out.stderr);
        assert!(
            out.stderr.contains(&env.sock.display().to_string()),
            "the message should name the socket: {}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "{}", out.stdout);
    }
}

/// A step's children reach the daemon through a socket scoped to the
/// step's chain: plans they submit nest one level deeper, past
/// `plans.max_depth` they are refused, and nothing but plan requests is
/// served there.
fn plans_nested_through_flyto_plan_sock_stop_at_the_depth_cap(backend: Backend) {
    let env = TestEnv::on(backend, "[plans]\nmax_parallel_plans = 8\nmax_depth = 2\n");
    let _daemon = env.start();
    let script = env.work.join("nest.sh");
    std::fs::write(
        &script,
        format!(
            "exec {} submit_plan --run 'sh {}' --wait\n",
            flyto_tests::bin("flytoctl").display(),
            script.display()
        ),
    )
    .expect("script");
    let top = env.submit(TestEnv::run_plan(&format!("sh {}", script.display())));
    let view = env.wait_plan(&top, "failed", is_state(PlanState::Failed));
    assert_eq!(view.depth, 0);
    let plans = list(&env, None);
    // The top plan and two nested levels; the third level was refused.
    assert_eq!(plans.len(), 3, "{plans:?}");
    assert!(plans.iter().all(|p| p.chain == top), "{plans:?}");
    let deepest = env.status(&plans[0].id);
    assert_eq!(deepest.depth, 2);
    let tail = &deepest.steps[0].stderr_tail;
    assert!(tail.contains("PermissionDenied"), "{tail}");
    assert!(tail.contains("max_depth = 2"), "{tail}");

    // Only plan requests, and only this chain's plans, on a scoped socket.
    let other = env.submit(TestEnv::run_plan("true"));
    env.wait_plan(&other, "succeeded", is_state(PlanState::Succeeded));
    let probe = env.submit(TestEnv::run_plan(&format!(
        "{ctl} session_list; echo \"sessions=$?\"; {ctl} plan_status {other}; echo \"other=$?\"; {ctl} plan_status {top} >/dev/null; echo \"top=$?\"; {ctl} plan_status $FLYTO_PLAN_ID >/dev/null; echo \"self=$?\"",
        ctl = flyto_tests::bin("flytoctl").display()
    )));
    let view = env.wait_plan(&probe, "succeeded", is_state(PlanState::Succeeded));
    let step = &view.steps[0];
    assert!(step.stdout_tail.contains("sessions=4"), "{step:?}");
    assert!(step.stderr_tail.contains("plan requests only"), "{step:?}");
    assert!(step.stdout_tail.contains("other=4"), "{step:?}");
    assert!(step.stdout_tail.contains("top=4"), "{step:?}");
    assert!(step.stdout_tail.contains("self=0"), "{step:?}");
}

/// flytod raises its own open-files limit, but the processes it starts get
/// the limit it was started with.
fn steps_keep_the_open_files_limit_flytod_was_given(backend: Backend) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid pointer to a local struct.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    let env = TestEnv::on(backend, "");
    let daemon = env.start();
    let id = env.submit(TestEnv::run_plan("ulimit -Sn"));
    let view = env.wait_plan(&id, "succeeded", is_state(PlanState::Succeeded));
    assert_eq!(view.steps[0].stdout_tail.trim(), lim.rlim_cur.to_string());
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", daemon.pid())).expect("limits");
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("open files line");
    let soft: Vec<&str> = open_files.split_whitespace().collect();
    let hard = if lim.rlim_max == libc::RLIM_INFINITY {
        "unlimited".to_string()
    } else {
        lim.rlim_max.to_string()
    };
    assert_eq!(soft[3], hard, "{open_files}");
}

/// A plan's agent steps share the plan's own session by default, so the
/// second step's model sees the first step's conversation.
#[test]
fn agent_steps_of_a_plan_share_its_session() {
    use flyto_tests::fake_llm::{FakeLlm, Reply};
    let fake = FakeLlm::start(vec![Reply::text("first done"), Reply::text("second done")]);
    let env = TestEnv::new(&fake.config());
    let _daemon = env
        .try_start(&[("NO_PROXY", "127.0.0.1"), ("no_proxy", "127.0.0.1")])
        .unwrap_or_else(|log| panic!("flytod did not start:\n{log}"));
    let plan = flyto_protocol::PlanSpec {
        name: None,
        env: Default::default(),
        steps: vec![
            flyto_protocol::StepSpec {
                id: "one".into(),
                prompt: Some("remember the word kiwi".into()),
                ..Default::default()
            },
            flyto_protocol::StepSpec {
                id: "two".into(),
                prompt: Some("which word?".into()),
                deps: vec!["one".into()],
                ..Default::default()
            },
        ],
        sandbox: None,
    };
    let id = env.submit(plan);
    let view = env.wait_plan(&id, "succeeded", is_state(PlanState::Succeeded));
    assert_eq!(view.steps[0].stdout_tail, "first done");
    assert_eq!(view.steps[1].stdout_tail, "second done");
    let session_of = |tail: &str| tail.split(':').next().unwrap_or_default().to_string();
    assert_eq!(
        session_of(&view.steps[0].stderr_tail),
        session_of(&view.steps[1].stderr_tail)
    );
    let second = fake.requests()[1].to_string();
    assert!(second.contains("remember the word kiwi"), "{second}");
    assert!(second.contains("first done"), "{second}");
}

/// flytoctl run from `dir` (the harness runs it wherever the test runs).
fn ctl_in(
    env: &TestEnv,
    dir: &Path,
    args: &[&str],
    extra: &[(&str, &str)],
) -> (i32, String, String) {
    let child = Command::new(bin("flytoctl"))
        .args(args)
        .current_dir(dir)
        .env_remove("FLYTO_PLAN_SOCK")
        .envs(env.vars())
        .envs(extra.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn flytoctl");
    finish_ctl(child, DEADLINE)
}

/// Kills what a step left running outside its group (`setsid`).
fn kill_step_leftovers(env: &TestEnv, plan: &str, step: &str) {
    for pid in step_processes(env, plan, step) {
        // SAFETY: kill(2) on a pid the test just found with its marker.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// Promise 1 of issue 10: a step that submits a plan and waits for it
/// must not deadlock on the only plan slot, however deep the nesting.
fn three_levels_of_nested_waiting_plans_finish_with_one_plan_slot(backend: Backend) {
    let env = TestEnv::on(
        backend,
        &fast_with("max_parallel_plans = 1\nmax_depth = 3\n"),
    );
    let _daemon = env.start();
    let script = env.work.join("nest.sh");
    std::fs::write(
        &script,
        format!(
            "if [ \"$LEVEL\" -lt 3 ]; then exec {ctl} submit_plan --env LEVEL=$((LEVEL + 1)) --run 'sh {script}' --wait; else echo \"deepest at $LEVEL\"; fi\n",
            ctl = bin("flytoctl").display(),
            script = script.display()
        ),
    )
    .expect("script");
    // With a deadline: a deadlock would otherwise hang the test.
    let waiting = spawn_ctl(
        &env,
        &[
            "submit_plan",
            "--env",
            "LEVEL=0",
            "--run",
            &format!("sh {}", script.display()),
            "--wait",
        ],
    );
    let (code, stdout, stderr) = finish_ctl(waiting, DEADLINE);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "deepest at 3\n");
    let plans = list(&env, None);
    assert_eq!(plans.len(), 4, "{plans:?}");
    assert!(
        plans.iter().all(|p| p.state == PlanState::Succeeded),
        "{plans:?}"
    );
    let mut depths: Vec<u32> = plans.iter().map(|p| env.status(&p.id).depth).collect();
    depths.sort_unstable();
    assert_eq!(depths, [0, 1, 2, 3]);
}

#[test]
fn pending_plans_say_what_they_wait_for_and_where_they_are_in_the_queue() {
    let env = TestEnv::new(&fast_with("max_parallel_plans = 1\n"));
    let _daemon = env.start();
    let go = env.work.join("go");
    let child_go = env.work.join("child-go");
    // The running plan's step submits two child plans without waiting:
    // the first takes the chain's child slot, the second waits for it.
    let child = env.work.join("child.sh");
    std::fs::write(&child, wait_for_file(&child_go)).expect("script");
    let parent = env.submit(TestEnv::run_plan(&format!(
        "{ctl} submit_plan --run 'sh {child}' && {ctl} submit_plan --run 'echo second child' && {}",
        wait_for_file(&go),
        ctl = bin("flytoctl").display(),
        child = child.display()
    )));
    env.wait_plan(&parent, "step running", step_running("main"));
    let children = wait_until("both child plans", DEADLINE, || {
        let mut kids: Vec<PlanSummary> = list(&env, None)
            .into_iter()
            .filter(|p| p.chain == parent && p.id != parent)
            .collect();
        kids.sort_by_key(|p| p.id.trim_start_matches('p').parse::<u64>().unwrap_or(0));
        (kids.len() == 2).then_some(kids)
    });
    let (first_child, second_child) = (&children[0].id, &children[1].id);
    env.wait_plan(first_child, "running in a child slot", step_running("main"));
    let second = env.submit(TestEnv::run_plan("echo second"));
    let third = env.submit(TestEnv::run_plan("echo third"));

    let view = env.status(&second);
    assert_eq!(view.state, PlanState::Pending);
    assert_eq!(
        view.waiting.as_deref(),
        Some(
            format!(
                "queued at position 2, waiting for a free plan slot; 1 of 1 in use by {parent}"
            )
            .as_str()
        )
    );
    let view = env.status(&third);
    assert_eq!(view.queue_position, Some(3), "{view:?}");
    assert_eq!(
        view.waiting.as_deref(),
        Some(
            format!(
                "queued at position 3, waiting for a free plan slot; 1 of 1 in use by {parent}"
            )
            .as_str()
        )
    );
    let view = env.status(second_child);
    let waiting = view.waiting.clone().unwrap_or_default();
    assert!(
        waiting.starts_with(&format!("waiting for {first_child} to finish")),
        "{view:?}"
    );
    // The CLI shows the same, and plan_list the positions.
    let out = env.ctl(&["plan_status", &third]);
    assert!(out.stdout.contains("queued at position 3"), "{out:?}");
    let positions: Vec<(String, Option<u32>)> = list(&env, Some(PlanState::Pending))
        .into_iter()
        .map(|p| (p.id, p.queue_position))
        .collect();
    assert_eq!(
        positions,
        [
            (third.clone(), Some(3)),
            (second.clone(), Some(2)),
            (second_child.clone(), Some(1)),
        ]
    );
    let out = env.ctl(&["plan_list", "--state", "pending"]);
    assert!(out.stdout.contains("pending #3"), "{out:?}");

    std::fs::write(&child_go, "").expect("go");
    std::fs::write(&go, "").expect("go");
    for id in [&parent, first_child, second_child, &second, &third] {
        let view = env.wait_plan(id, "finished", |p| p.state.is_terminal());
        assert_eq!(view.state, PlanState::Succeeded, "{view:?}");
        assert_eq!(view.waiting, None);
    }
}

/// Promise 5 of issue 10: a detached child holding the step's stdout.
fn a_step_ends_with_its_shell_even_when_a_detached_child_holds_its_output(backend: Backend) {
    let env = TestEnv::on(backend, FAST);
    let _daemon = env.start();
    let out = env.ctl(&[
        "submit_plan",
        "--run",
        "setsid sleep 300 & echo started",
        "--wait",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    // Before, the output waited for the pipe's end (which the sleep holds)
    // until a bound, then came back empty.
    assert_eq!(out.stdout, "started\n");
    let first = list(&env, None)[0].id.clone();
    kill_step_leftovers(&env, &first, "main");

    // And a cancel of such a step returns with what it printed.
    let ready = env.work.join("ready");
    let id = env.submit(TestEnv::run_plan(&format!(
        "setsid sleep 300 & echo started; touch {}; exec sleep 300",
        ready.display()
    )));
    wait_until("the step to print", DEADLINE, || {
        ready.exists().then_some(())
    });
    let out = env.ctl(&["plan_cancel", &id]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, format!("cancelled {id}\n"));
    let view = env.status(&id);
    assert_eq!(view.state, PlanState::Cancelled);
    assert_eq!(view.steps[0].stdout_tail, "started\n");
    kill_step_leftovers(&env, &id, "main");
}

fn steps_run_in_the_submitters_directory_and_file_workdirs_are_relative_to_the_file(
    backend: Backend,
) {
    let env = TestEnv::on(backend, FAST);
    let _daemon = env.start();
    let cwd = env.work.join("here");
    let plans = env.work.join("plans");
    std::fs::create_dir_all(plans.join("sub")).expect("dirs");
    std::fs::create_dir_all(&cwd).expect("dirs");
    let file = plans.join("dirs.toml");
    std::fs::write(
        &file,
        "[[steps]]\nid = \"none\"\nrun = \"pwd\"\n\n[[steps]]\nid = \"rel\"\nrun = \"pwd\"\nworkdir = \"sub\"\n\n[[steps]]\nid = \"home\"\nrun = \"pwd\"\nworkdir = \"~\"\n",
    )
    .expect("plan");
    let (code, id, err) = ctl_in(&env, &cwd, &["submit_plan", "../plans/dirs.toml"], &[]);
    assert_eq!(code, 0, "{err}");
    let view = env.wait_plan(id.trim(), "succeeded", is_state(PlanState::Succeeded));
    let pwd = |s: &str| step(&view, s).stdout_tail.trim_end().to_string();
    assert_eq!(pwd("none"), cwd.display().to_string());
    assert_eq!(pwd("rel"), plans.join("sub").display().to_string());
    assert_eq!(pwd("home"), env.work.display().to_string());

    // A missing workdir is an invalid plan file: exit 2, nothing sent.
    std::fs::write(
        &file,
        "[[steps]]\nid = \"a\"\nrun = \"pwd\"\nworkdir = \"gone\"\n",
    )
    .expect("plan");
    let (code, _, err) = ctl_in(&env, &cwd, &["submit_plan", "../plans/dirs.toml"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("does not exist"), "{err}");
}

fn steps_get_the_plans_env_and_the_submitters_path_and_virtualenv(backend: Backend) {
    let env = TestEnv::on(backend, FAST);
    let _daemon = env.start();
    let bin_dir = env.work.join("tools");
    std::fs::create_dir_all(&bin_dir).expect("dir");
    let tool = bin_dir.join("only-in-my-path");
    std::fs::write(&tool, "#!/bin/sh\necho found my tool\n").expect("tool");
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let file = env.work.join("env.toml");
    std::fs::write(
        &file,
        "[env]\nA = \"plan\"\nB = \"plan\"\n\n[[steps]]\nid = \"show\"\nrun = 'echo \"$A $B $C $VIRTUAL_ENV\"; only-in-my-path'\nenv = { B = \"step\" }\n",
    )
    .expect("plan");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (code, out, err) = ctl_in(
        &env,
        &env.work,
        &["submit_plan", "env.toml", "--env", "C=flag", "--wait"],
        &[("PATH", &path), ("VIRTUAL_ENV", "/opt/venv")],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "plan step flag /opt/venv\nfound my tool\n");

    // Secrets stay out of plans, which are stored and shown.
    let (code, _, err) = ctl_in(
        &env,
        &env.work,
        &[
            "submit_plan",
            "--run",
            "true",
            "--env",
            "GITHUB_TOKEN=ghp_x",
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("env `GITHUB_TOKEN` looks like a secret"),
        "{err}"
    );
    // The chain's own variables cannot be chosen by a plan.
    let (code, _, err) = ctl_in(
        &env,
        &env.work,
        &[
            "submit_plan",
            "--run",
            "true",
            "--env",
            "FLYTO_PLAN_SOCK=/tmp/x.sock",
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("FLYTO_* names are reserved"), "{err}");
}

fn plans_are_found_by_name_and_an_idempotency_key_names_one_plan(backend: Backend) {
    let env = TestEnv::on(backend, FAST);
    let _daemon = env.start();
    let run = |args: &[&str]| {
        let out = env.ctl(args);
        assert_eq!(out.code, 0, "{out:?}");
        out.stdout.trim().to_string()
    };
    let nightly = run(&[
        "submit_plan",
        "--run",
        "echo n",
        "--name",
        "nightly",
        "--wait",
    ]);
    assert_eq!(nightly, "n");
    let out = env.ctl(&["plan_status", "nightly", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let view: PlanView = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(view.name.as_deref(), Some("nightly"));
    let out = env.ctl(&["plan_cancel", "nightly"]);
    assert_eq!(
        out.stdout,
        format!(
            "{} had already finished (succeeded): nothing to cancel\n",
            view.id
        )
    );

    let a = run(&["submit_plan", "--run", "true", "--name", "twice"]);
    let b = run(&["submit_plan", "--run", "true", "--name", "twice"]);
    env.wait_plan(&b, "finished", |p| p.state.is_terminal());
    let out = env.ctl(&["plan_status", "twice"]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("BadRequest"), "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("2 plans are named `twice`: {b} (")),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains(&format!(", {a} (")), "{}", out.stderr);

    let key = ["--idempotency-key", "k-1"];
    let first = run(&[&["submit_plan", "--run", "echo one"][..], &key].concat());
    let same = run(&[&["submit_plan", "--run", "echo one"][..], &key].concat());
    assert_eq!(same, first);
    let out = env.ctl(&[&["submit_plan", "--run", "echo two"][..], &key].concat());
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("Conflict"), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("belongs to plan {first}")),
        "{}",
        out.stderr
    );
}

fn plan_restart_makes_a_linked_plan_and_plan_remove_deletes_a_finished_one(backend: Backend) {
    let env = TestEnv::on(backend, FAST);
    let _daemon = env.start();
    let counter = env.work.join("runs");
    let cmd = format!(
        "echo run >> {}; cat {}",
        counter.display(),
        counter.display()
    );
    let out = env.ctl(&["submit_plan", "--run", &cmd, "--name", "again", "--wait"]);
    assert_eq!(out.code, 0, "{out:?}");
    let old = list(&env, None)[0].id.clone();

    let out = env.ctl(&["plan_restart", "again"]);
    assert_eq!(out.code, 0, "{out:?}");
    let new = out.stdout.trim().to_string();
    assert_ne!(new, old);
    let view = env.wait_plan(&new, "succeeded", is_state(PlanState::Succeeded));
    assert_eq!(view.restarted_from.as_deref(), Some(old.as_str()));
    assert_eq!(view.steps[0].stdout_tail, "run\nrun\n");
    let shown = env.ctl(&["plan_status", &new]);
    assert!(
        shown.stdout.contains(&format!("restarted from {old}")),
        "{shown:?}"
    );

    // Not while it runs.
    let running = env.submit(TestEnv::run_plan("sleep 300"));
    env.wait_plan(&running, "step running", step_running("main"));
    for op in ["plan_remove", "plan_restart"] {
        let out = env.ctl(&[op, &running]);
        assert_eq!(out.code, 4, "{op}: {out:?}");
        assert!(out.stderr.contains("Conflict"), "{op}: {}", out.stderr);
        assert!(out.stderr.contains("plan_cancel"), "{op}: {}", out.stderr);
    }
    assert_eq!(env.ctl(&["plan_cancel", &running]).code, 0);

    let log_dir = Path::new(view.steps[0].log_path.as_deref().expect("a log"))
        .parent()
        .expect("plan log dir")
        .to_path_buf();
    assert!(log_dir.is_dir());
    let out = env.ctl(&["plan_remove", &new]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, format!("removed {new} and its logs\n"));
    assert!(!log_dir.exists());
    let out = env.ctl(&["plan_status", &new]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("NotFound"), "{}", out.stderr);
    // The name now means the one plan left with it.
    let out = env.ctl(&["plan_status", "again", "--json"]);
    let left: PlanView = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(left.id, old);
}

on_both_backends!(
    finished_plans_and_their_logs_expire_after_the_ttl,
    submit_wait_prints_the_output_and_exits_with_the_outcome,
    a_cancelled_plan_ends_wait_with_exit_5_and_kills_the_step,
    plans_from_toml_json_and_stdin_then_status_log_and_list,
    status_watch_follows_a_plan_to_the_end_in_plain_lines,
    plan_watch_sends_a_snapshot_then_ordered_events_then_end,
    json_lines_mode_answers_without_a_handshake,
    an_idempotency_key_submits_once,
    a_step_timeout_fails_the_step_with_exit_code_124,
    steps_get_the_flyto_variables_but_not_the_daemons_secrets,
    a_step_can_submit_a_plan_through_flyto_plan_sock,
    plans_nested_through_flyto_plan_sock_stop_at_the_depth_cap,
    three_levels_of_nested_waiting_plans_finish_with_one_plan_slot,
    a_step_ends_with_its_shell_even_when_a_detached_child_holds_its_output,
    steps_run_in_the_submitters_directory_and_file_workdirs_are_relative_to_the_file,
    steps_get_the_plans_env_and_the_submitters_path_and_virtualenv,
    plans_are_found_by_name_and_an_idempotency_key_names_one_plan,
    plan_restart_makes_a_linked_plan_and_plan_remove_deletes_a_finished_one,
    max_parallel_plans_runs_two_plans_at_once,
    steps_keep_the_open_files_limit_flytod_was_given,
);
