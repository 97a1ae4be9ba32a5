//! flytod on the shared store, through the real binaries: several daemons
//! on one PostgreSQL answer for each other's plans, run each step once,
//! lose nothing when one is killed, and start (or refuse to) with a clear
//! account of the database.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_protocol::{PlanState, Request, Response, StepState};
use flyto_tests::pg::TestPostgres;
use flyto_tests::{DEADLINE, TestEnv, wait_until};
use std::time::Duration;

/// A node's config on database `db`: fast kills and a short drain.
fn node_config(pg: &TestPostgres, db: &str) -> String {
    format!(
        "[daemon]\nshutdown_grace = \"1s\"\n[plans]\nkill_grace = \"200ms\"\nmax_parallel_plans = 4\n[store]\nbackend = \"postgres\"\nurl = \"{}\"\n",
        pg.url_for(db)
    )
}

/// Two nodes' environments on a new database `db`.
fn two_nodes(pg: &TestPostgres, db: &str) -> (TestEnv, TestEnv) {
    pg.create_database(db);
    (
        TestEnv::new(&node_config(pg, db)),
        TestEnv::new(&node_config(pg, db)),
    )
}

/// `args` is answered `Unavailable` (exit 6), saying each of `says`.
fn unavailable(env: &TestEnv, args: &[&str], says: &[&str]) {
    let out = env.ctl(args);
    assert_eq!(out.code, 6, "{args:?}: {out:?}");
    for part in ["Unavailable"].iter().chain(says) {
        assert!(
            out.stderr.contains(part),
            "{args:?}: `{part}` missing: {}",
            out.stderr
        );
    }
}

/// A one-step plan running `body`.
fn one_step(body: &str, idempotent: bool) -> flyto_protocol::PlanSpec {
    flyto_protocol::PlanSpec {
        steps: vec![flyto_protocol::StepSpec {
            id: "main".into(),
            run: Some(body.into()),
            idempotent,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn submitted(out: &flyto_tests::CtlOutput) -> String {
    assert_eq!(out.code, 0, "stdout: {} stderr: {}", out.stdout, out.stderr);
    out.stdout.trim().to_string()
}

/// Processes of plan `plan`'s step `step` run by a node of the shared
/// store of this test: other tests' databases have plans of the same ids,
/// but their daemons another HOME.
fn step_processes(env: &TestEnv, plan: &str, step: &str) -> Vec<i32> {
    flyto_tests::processes_with(&[
        &format!("FLYTO_PLAN_ID={plan}"),
        &format!("FLYTO_STEP={plan}/{step}"),
        &format!("HOME={}", env.work.display()),
    ])
}

fn stats(env: &TestEnv) -> flyto_protocol::DaemonStats {
    match env.client().call(&Request::Stats {}).expect("stats") {
        Response::Stats { stats } => stats,
        other => panic!("unexpected answer {other:?}"),
    }
}

/// Makes every running step's lease run out now, as if its node had been
/// silent for the whole lease: the sweep may take it at once.
fn expire_leases(pg: &TestPostgres, db: &str) {
    pg.sql(
        db,
        "UPDATE flyto_steps SET lease_until = now() - interval '1 second' WHERE state = 'running'",
    );
}

#[test]
fn two_daemons_on_one_database_answer_for_each_other_and_run_each_step_once() {
    let pg = TestPostgres::start();
    let (a, b) = two_nodes(&pg, "two");
    let (_da, _db) = (a.start(), b.start());
    let ran = a.tmp.path().join("ran");
    let mut ids = Vec::new();
    for i in 0..12 {
        let env = if i % 2 == 0 { &a } else { &b };
        let cmd = format!("echo $FLYTO_PLAN_ID >> {}", ran.display());
        ids.push(submitted(&env.ctl(&["submit_plan", "--run", &cmd])));
    }
    // Every plan, whichever node took it, is seen finished from both.
    for id in &ids {
        for env in [&a, &b] {
            let plan = env.wait_plan(id, "finished", |p| p.state.is_terminal());
            assert_eq!(plan.state, PlanState::Succeeded, "{plan:?}");
        }
    }
    let lines = std::fs::read_to_string(&ran).expect("the steps' output file");
    let mut seen: Vec<&str> = lines.lines().collect();
    seen.sort_unstable();
    let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(seen, want, "each plan's step must run exactly once");
    // Both list all twelve.
    for env in [&a, &b] {
        let out = env.ctl(&["plan_list", "--json"]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        for id in &ids {
            assert!(
                out.stdout.contains(&format!("\"{id}\"")),
                "{id} missing: {}",
                out.stdout
            );
        }
    }
    // `--wait` on one node follows a plan to its end wherever it runs.
    let out = a.ctl(&["submit_plan", "--run", "echo from-some-node", "--wait"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "from-some-node\n");
    // stats: the backend, this node, and its peer.
    let (sa, sb) = (stats(&a), stats(&b));
    assert!(
        sa.store.starts_with("postgres at 127.0.0.1:"),
        "{}",
        sa.store
    );
    assert!(!sa.node.is_empty() && sa.node != sb.node);
    for s in [&sa, &sb] {
        let nodes: Vec<&str> = s.peers.iter().map(|p| p.node.as_str()).collect();
        assert!(
            nodes.contains(&sa.node.as_str()) && nodes.contains(&sb.node.as_str()),
            "{nodes:?}"
        );
    }
    assert_eq!(sa.plans_succeeded, 13);
    // The database's size: every node's rows.
    assert!(sa.db_bytes > 1_000_000, "{}", sa.db_bytes);
    let text = a.ctl(&["stats"]);
    assert!(text.stdout.contains(&sb.node), "{}", text.stdout);
    assert!(!sa.store.contains("postgres://"), "{}", sa.store);
    let next = a.ctl(&["job_next", "@daily", "--tz", "UTC"]);
    assert_eq!(next.code, 0, "{next:?}");
}

fn job_json(env: &TestEnv, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = env.ctl(&all);
    assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

fn job_fires(env: &TestEnv, id: &str) -> Vec<serde_json::Value> {
    job_json(env, &["job_show", id])["fires"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn a_job_fires_once_per_instant_across_nodes_and_goes_on_when_one_dies() {
    let pg = TestPostgres::start();
    let (a, b) = two_nodes(&pg, "jobs");
    let da = a.start();
    let _db = b.start();
    let plan = a.tmp.path().join("job.toml");
    std::fs::write(&plan, "[[steps]]\nid = \"s\"\nrun = \"true\"\n").unwrap();
    let created = job_json(
        &a,
        &[
            "job_create",
            "--schedule",
            "every 1s",
            "--plan",
            plan.to_str().unwrap(),
            "--name",
            "tick",
        ],
    );
    let id = created["id"].as_str().unwrap().to_string();
    // Created on one node, the other lists it and shows its fires.
    flyto_tests::wait_until("b to list the job", flyto_tests::DEADLINE, || {
        let list = job_json(&b, &["job_list"]);
        (list["jobs"][0]["name"] == "tick").then_some(())
    });
    flyto_tests::wait_until("six submitted fires", flyto_tests::DEADLINE, || {
        let f = job_fires(&b, &id);
        let done = f
            .iter()
            .filter(|f| f["outcome"].as_str().unwrap().starts_with("submitted"))
            .count();
        (done >= 6).then_some(())
    });
    // Paused on one node, it is paused on both.
    job_json(&b, &["job_pause", "tick"]);
    flyto_tests::wait_until("a to see the pause", flyto_tests::DEADLINE, || {
        (job_json(&a, &["job_show", &id])["job"]["state"] == "paused").then_some(())
    });
    let paused = job_fires(&a, &id).len();
    job_json(&a, &["job_resume", "tick"]);
    // One node dies: the other goes on firing it alone.
    da.kill9();
    flyto_tests::wait_until("fires after a's death", flyto_tests::DEADLINE, || {
        let f = job_fires(&b, &id);
        let after = f[paused..]
            .iter()
            .filter(|f| f["outcome"].as_str().unwrap().starts_with("submitted"))
            .count();
        (after >= 3).then_some(())
    });
    let fires = job_fires(&b, &id);
    let (n, plans) = super::jobs::distinct_fires(&fires);
    assert!(n >= 9, "{n} fires");
    // Every plan the job made belongs to one fire.
    let list = b.ctl(&["plan_list", "--limit", "10000", "--json"]);
    let list: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    for p in list.as_array().unwrap() {
        if p["name"] == "job j1" || p["name"] == "tick" {
            let pid = p["id"].as_str().unwrap();
            assert!(plans.iter().any(|q| q == pid), "{pid} has no fire");
        }
    }
    // Deleted on the survivor, it is gone.
    job_json(&b, &["job_delete", "tick"]);
    let out = b.ctl(&["job_show", &id]);
    assert_ne!(out.code, 0, "{out:?}");
}

#[test]
fn a_cancel_from_another_node_answers_once_the_step_has_stopped() {
    let pg = TestPostgres::start();
    let (a, b) = two_nodes(&pg, "cancel");
    let _da = a.start();
    let id = submitted(&a.ctl(&["submit_plan", "--run", "sleep 300"]));
    a.wait_plan(&id, "its step running", |p| {
        p.steps[0].state == StepState::Running
    });
    wait_until("the step's process", DEADLINE, || {
        (!step_processes(&a, &id, "main").is_empty()).then_some(())
    });
    // B did not run it; it cancels it.
    let _db = b.start();
    let out = b.ctl(&["plan_cancel", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!("cancelled {id}")),
        "{}",
        out.stdout
    );
    // The answer came after the process ended, on the node that ran it.
    assert_eq!(step_processes(&a, &id, "main"), Vec::<i32>::new());
    let plan = a.status(&id);
    assert_eq!(plan.state, PlanState::Cancelled, "{plan:?}");
    // Cancelling it again says it had finished.
    let again = a.ctl(&["plan_cancel", &id]);
    assert!(again.stdout.contains("already"), "{}", again.stdout);
}

#[test]
fn a_node_killed_mid_step_loses_nothing_its_steps_go_to_another_node() {
    let pg = TestPostgres::start();
    let (a, b) = two_nodes(&pg, "kill");
    let da = a.start();
    let tries = a.tmp.path().join("tries");
    let gate = a.tmp.path().join("gate");
    // Runs until the gate exists: on A it never does.
    let body = format!(
        "echo $FLYTO_ATTEMPT >> {t}; while [ ! -e {g} ]; do sleep 0.05; done; echo done",
        t = tries.display(),
        g = gate.display()
    );
    let again = a.submit(one_step(&body, true));
    let once = a.submit(one_step(&body, false));
    // Both steps' processes have started (a claimed step is running in
    // the database a moment before its process is).
    wait_until("both steps to start", DEADLINE, || {
        let lines = std::fs::read_to_string(&tries).unwrap_or_default();
        (lines.lines().count() == 2).then_some(())
    });
    // The node dies with its steps (a machine that goes away).
    da.kill9();
    for id in [&again, &once] {
        for pid in step_processes(&a, id, "main") {
            // SAFETY: killing a leftover test child.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    std::fs::write(&gate, "").expect("gate");
    let _db = b.start();
    // Its leases run out (the database's clock, moved on by the test).
    expire_leases(&pg, "kill");
    let rerun = b.wait_plan(&again, "finished on B", |p| p.state.is_terminal());
    assert_eq!(rerun.state, PlanState::Succeeded, "{rerun:?}");
    assert_eq!(rerun.steps[0].stdout_tail, "done\n");
    let lost = b.wait_plan(&once, "finished on B", |p| p.state.is_terminal());
    assert_eq!(lost.state, PlanState::Failed, "{lost:?}");
    assert_eq!(
        lost.steps[0].error.as_deref(),
        Some("lease lost"),
        "{lost:?}"
    );
    // Two attempts of the idempotent step, under two tokens; one of the other.
    let tries = std::fs::read_to_string(&tries).expect("tries");
    let tokens: Vec<&str> = tries.lines().collect();
    assert_eq!(tokens.len(), 3, "{tries}");
}

#[test]
fn a_draining_node_hands_its_idempotent_step_to_another() {
    let pg = TestPostgres::start();
    let (a, b) = two_nodes(&pg, "drain");
    let da = a.start();
    let gate = a.tmp.path().join("gate");
    let body = format!(
        "while [ ! -e {g} ]; do sleep 0.05; done; echo finished-on-$FLYTO_ATTEMPT",
        g = gate.display()
    );
    let id = a.submit(one_step(&body, true));
    a.wait_plan(&id, "its step running", |p| {
        p.steps[0].state == StepState::Running
    });
    wait_until("the step's process", DEADLINE, || {
        (!step_processes(&a, &id, "main").is_empty()).then_some(())
    });
    let mut da = da;
    da.signal(libc::SIGTERM);
    assert!(da.wait_exit(DEADLINE).success(), "{}", da.log());
    assert_eq!(step_processes(&a, &id, "main"), Vec::<i32>::new());
    let log_a = da.log();
    let handed = b.start();
    std::fs::write(&gate, "").expect("gate");
    let plan = b.wait_plan(&id, "finished on B", |p| p.state.is_terminal());
    assert_eq!(
        plan.state,
        PlanState::Succeeded,
        "{plan:?}\n--- A ---\n{log_a}"
    );
    // The interrupted attempt did not count against the step.
    assert_eq!(plan.steps[0].attempts, 1, "{plan:?}");
    drop(handed);
}

/// A flytod started without waiting for READY: its sd_notify messages
/// and its log.
struct Starting {
    child: std::process::Child,
    notify: std::os::unix::net::UnixDatagram,
    log: std::path::PathBuf,
    notes: Vec<String>,
}

impl Starting {
    fn spawn(env: &TestEnv, extra: &[(&str, &str)]) -> Starting {
        let notify_path = env.tmp.path().join("notify.sock");
        let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).expect("notify socket");
        notify
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let log = env.tmp.path().join("flytod.log");
        let file = std::fs::File::create(&log).expect("log");
        let child = env
            .command(&flyto_tests::bin("flytod"))
            .env("NOTIFY_SOCKET", &notify_path)
            .envs(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())))
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("flytod");
        Starting {
            child,
            notify,
            log,
            notes: Vec::new(),
        }
    }

    /// The first sd_notify message containing `needle`.
    fn wait_note(&mut self, needle: &str) -> String {
        let mut buf = [0u8; 4096];
        let (notify, notes) = (&self.notify, &mut self.notes);
        wait_until(&format!("sd_notify {needle}"), DEADLINE, || {
            let n = notify.recv(&mut buf).ok()?;
            let note = String::from_utf8_lossy(&buf[..n]).into_owned();
            notes.push(note.clone());
            note.contains(needle).then_some(note)
        })
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_unreachable_database_holds_ready_back_and_says_why_until_it_is_up() {
    let pg = TestPostgres::start();
    pg.create_database("late");
    pg.stop();
    let env = TestEnv::new(&node_config(&pg, "late"));
    let mut daemon = Starting::spawn(&env, &[]);
    let waiting = daemon.wait_note("STATUS=waiting for the shared store");
    assert!(
        !daemon.notes.iter().any(|n| n.contains("READY=1")),
        "{:?}",
        daemon.notes
    );
    let port = pg.port().to_string();
    for part in [
        "127.0.0.1",
        port.as_str(),
        "user postgres",
        "cannot connect",
    ] {
        assert!(waiting.contains(part), "{part} missing: {waiting}");
    }
    // Meanwhile the socket answers: stats says what it waits for; plan
    // requests are Unavailable, saying why.
    let st = env.ctl(&["stats"]);
    assert_eq!(st.code, 0, "{st:?}");
    assert!(
        st.stdout.contains("waiting to join the shared store")
            && st
                .stdout
                .contains("cannot connect to PostgreSQL at 127.0.0.1"),
        "{}",
        st.stdout
    );
    for request in [
        &["plan_list"][..],
        &["session_list"],
        &["channel_list"],
        &["dream_status"],
        &["job_list"],
    ] {
        unavailable(&env, request, &["flytod is starting", "flytoctl stats"]);
    }
    // The database comes up: the daemon joins and is ready.
    pg.start_again();
    daemon.wait_note("READY=1");
    let id = submitted(&env.ctl(&["submit_plan", "--run", "true"]));
    env.wait_plan(&id, "succeeded", |p| p.state == PlanState::Succeeded);
}

#[test]
fn wrong_credentials_are_retried_and_never_show_the_password() {
    let pg = TestPostgres::start();
    pg.create_database("creds");
    pg.add_password_user("flyto_node", "right-horse-battery");
    let url = format!(
        "postgres://flyto_node:wrong-staple-9911@127.0.0.1:{}/creds",
        pg.port()
    );
    let env = TestEnv::new("[store]\nbackend = \"postgres\"\n");
    let mut daemon = Starting::spawn(&env, &[("FLYTO_DATABASE_URL", &url)]);
    let first = daemon.wait_note("STATUS=waiting for the shared store");
    // And again: it retries.
    daemon.notes.clear();
    let second = daemon.wait_note("STATUS=waiting for the shared store");
    for note in [&first, &second] {
        assert!(note.contains("user flyto_node"), "{note}");
        assert!(note.contains("password authentication failed"), "{note}");
    }
    let log = daemon.log();
    assert!(log.contains("password authentication failed"), "{log}");
    for text in [&first, &second, &log] {
        assert!(
            !text.contains("wrong-staple-9911"),
            "the password leaked: {text}"
        );
    }
}

#[test]
fn a_schema_newer_than_flytod_stops_it_naming_both_versions() {
    let pg = TestPostgres::start();
    pg.create_database("newer");
    let env = TestEnv::new(&node_config(&pg, "newer"));
    drop(env.start());
    pg.sql("newer", "INSERT INTO flyto_schema (version) VALUES (999)");
    let Err(log) = env.try_start(&[]) else {
        panic!("flytod started on a newer schema");
    };
    assert!(log.contains("version 999"), "{log}");
    assert!(
        log.contains(&format!("({})", flyto_actors::store::postgres::LATEST)),
        "{log}"
    );
    assert!(log.contains("upgrade flytod"), "{log}");
}

#[test]
fn a_postgres_backend_without_a_url_is_a_config_error_naming_both_ways() {
    let check = |config: &str| {
        let env = TestEnv::new(config);
        let out = env
            .command(&flyto_tests::bin("flytod"))
            .arg("check-config")
            .output()
            .expect("flytod");
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = check("[store]\nbackend = \"postgres\"\n");
    assert!(
        err.contains("[store] url") && err.contains("FLYTO_DATABASE_URL"),
        "{err}"
    );
    let err = check("[store]\nurl = \"postgres://x@127.0.0.1/db\"\n");
    assert!(err.contains("backend = \"postgres\""), "{err}");
}

#[test]
fn a_node_with_plans_in_its_own_store_says_which_store_is_in_use() {
    let pg = TestPostgres::start();
    pg.create_database("both");
    let env = TestEnv::new("[plans]\nkill_grace = \"200ms\"\n");
    let daemon = env.start();
    let id = env.submit(TestEnv::run_plan("true"));
    env.wait_plan(&id, "finished", |p| p.state.is_terminal());
    let job = env.ctl(&["job_create", "--schedule", "@daily", "--prompt", "report"]);
    assert_eq!(job.code, 0, "{job:?}");
    let inbox = env.work.join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let bound = env.ctl(&["channel_bind", "inbox", "--dir", inbox.to_str().unwrap()]);
    assert_eq!(bound.code, 0, "{bound:?}");
    assert!(daemon.terminate().success());
    env.write_config(&node_config(&pg, "both"));
    let daemon = env.start();
    let log = daemon.log();
    assert!(
        log.contains(
            "plans, jobs, sessions, channels and memory are on the shared store at 127.0.0.1:"
        ),
        "{log}"
    );
    assert!(
        log.contains("holds 1 jobs that the shared store does not have"),
        "{log}"
    );
    assert!(
        log.contains("holds 1 channel bindings that the shared store does not have"),
        "{log}"
    );
    let jobs = env.ctl(&["job_list"]);
    assert!(!jobs.stdout.contains("report"), "{jobs:?}");
    assert!(
        log.contains("holds 1 plans (0 pending or running) that the shared store does not have")
            && log.contains("backend = \"sled\""),
        "{log}"
    );
    // The shared store is the one answering.
    let out = env.ctl(&["plan_status", &id]);
    assert_eq!(out.code, 4, "{out:?}");
}

#[test]
fn the_database_going_away_mid_run_answers_unavailable_then_everything_resumes() {
    let pg = TestPostgres::start();
    let (a, _) = two_nodes(&pg, "away");
    let _da = a.start();
    let gate = a.tmp.path().join("gate");
    let id = a.submit(one_step(
        &format!(
            "while [ ! -e {g} ]; do sleep 0.05; done; echo through",
            g = gate.display()
        ),
        false,
    ));
    a.wait_plan(&id, "its step running", |p| {
        p.steps[0].state == StepState::Running
    });
    pg.stop();
    // Requests say what is wrong, and the daemon keeps serving.
    let out = a.ctl(&["plan_status", &id]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("Unavailable") && out.stderr.contains("cannot connect to PostgreSQL"),
        "{}",
        out.stderr
    );
    for args in [&["session_list"][..], &["session_history", "s1"][..]] {
        unavailable(&a, args, &["cannot connect to PostgreSQL", "retry"]);
    }
    let ping = a.ctl(&["ping"]);
    assert_eq!(ping.code, 0, "{ping:?}");
    // The step ends while the database is away; its report waits.
    std::fs::write(&gate, "").expect("gate");
    pg.start_again();
    let plan = a.wait_plan(&id, "finished", |p| p.state.is_terminal());
    assert_eq!(plan.state, PlanState::Succeeded, "{plan:?}");
    assert_eq!(plan.steps[0].stdout_tail, "through\n");
    let next = submitted(&a.ctl(&["submit_plan", "--run", "echo again", "--wait"]));
    assert_eq!(next, "again");
}

#[test]
fn migrate_from_sled_copies_a_nodes_plans_jobs_and_sessions_once_and_the_unfinished_ones_run_on() {
    use flyto_tests::sessions_support::{history, message_text, new_session, send, workdir};
    let pg = TestPostgres::start();
    pg.create_database("copy");
    let fake = flyto_tests::fake_llm::FakeLlm::start(vec![flyto_tests::fake_llm::Reply::text(
        "noted on sled",
    )]);
    let env = TestEnv::new(&format!(
        "[daemon]\nshutdown_grace = \"1s\"\n[plans]\nkill_grace = \"200ms\"\nmax_parallel_plans = 1\n\n{}",
        fake.config()
    ));
    let daemon = flyto_tests::sessions_support::start(&env);
    // A session with one turn.
    let session = new_session(&env, &workdir(&env, "ws"));
    assert!(flyto_tests::sessions_support::done(&send(
        &env,
        &session,
        "remember this"
    )));
    let done = env.submit(TestEnv::run_plan("echo finished-on-sled"));
    env.wait_plan(&done, "succeeded", |p| p.state == PlanState::Succeeded);
    let gate = env.tmp.path().join("gate");
    let held = env.submit(TestEnv::run_plan(&format!(
        "while [ ! -e {} ]; do sleep 0.05; done; echo held-then-ran",
        gate.display()
    )));
    env.wait_plan(&held, "running", |p| p.state == PlanState::Running);
    let queued = env.submit(TestEnv::run_plan("echo queued-then-ran"));
    // A job, run once by hand: its fire names a plan of this store.
    let job_plan = env.tmp.path().join("job.toml");
    std::fs::write(
        &job_plan,
        "[[steps]]\nid = \"s\"\nrun = \"echo nightly-ran\"\n",
    )
    .unwrap();
    let job = job_json(
        &env,
        &[
            "job_create",
            "--schedule",
            "@daily",
            "--plan",
            job_plan.to_str().unwrap(),
            "--name",
            "nightly",
        ],
    );
    assert_eq!(job["id"], "j1");
    let job_run = job_json(&env, &["job_run", "nightly"])["plan"]
        .as_str()
        .unwrap()
        .to_string();
    let migrate = || {
        env.command(&flyto_tests::bin("flytod"))
            .args([
                "migrate",
                "--from-sled",
                "--database-url",
                &pg.url_for("copy"),
            ])
            .output()
            .expect("flytod migrate")
    };
    // Not while flytod uses the store.
    let busy = migrate();
    assert_eq!(busy.status.code(), Some(1), "{busy:?}");
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("stop flytod on this node first"),
        "{busy:?}"
    );
    assert!(daemon.terminate().success());
    let out = migrate();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("copied 4 plan(s)"), "{stdout}");
    assert!(stdout.contains("copied 1 job(s)"), "{stdout}");
    assert!(stdout.contains("copied 1 session(s)"), "{stdout}");
    let new_id = |old: &str| -> String {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{old} -> ")))
            .unwrap_or_else(|| panic!("{old} missing: {stdout}"));
        line.rsplit(' ').next().unwrap().to_string()
    };
    let (done2, held2, queued2) = (new_id(&done), new_id(&held), new_id(&queued));
    let (job2, job_run2) = (new_id("j1"), new_id(&job_run));
    let session2 = new_id(&session);
    // Once only.
    let again = migrate();
    assert!(again.status.success(), "{again:?}");
    let again_out = String::from_utf8_lossy(&again.stdout);
    assert!(
        again_out.contains("plans of")
            && again_out.contains("jobs of")
            && again_out.contains("channel bindings of"),
        "{again:?}"
    );
    assert_eq!(again_out.matches("nothing copied").count(), 4, "{again:?}");
    // On the shared store: the finished plan as it ended, the others run.
    std::fs::write(&gate, "").expect("gate");
    env.write_config(&node_config(&pg, "copy"));
    let _daemon = env.start();
    let plan = env.status(&done2);
    assert_eq!(plan.state, PlanState::Succeeded, "{plan:?}");
    assert_eq!(plan.steps[0].stdout_tail, "finished-on-sled\n");
    for (id, out) in [(&held2, "held-then-ran\n"), (&queued2, "queued-then-ran\n")] {
        let plan = env.wait_plan(id, "finished", |p| p.state.is_terminal());
        assert_eq!(plan.state, PlanState::Succeeded, "{plan:?}");
        assert_eq!(plan.steps[0].stdout_tail, out);
    }
    // The job is there under its new id, its fire naming the copied plan.
    let shown = job_json(&env, &["job_show", "nightly"]);
    assert_eq!(shown["job"]["id"], job2.as_str());
    assert_eq!(shown["fires"][0]["plan"], job_run2.as_str());
    let ran = env.wait_plan(&job_run2, "finished", |p| p.state.is_terminal());
    assert_eq!(ran.steps[0].stdout_tail, "nightly-ran\n");
    assert_eq!(
        pg.sql("copy", "SELECT count(*) FROM flyto_plans"),
        "4",
        "nothing copied twice"
    );
    assert_eq!(pg.sql("copy", "SELECT count(*) FROM flyto_jobs"), "1");
    // The session, with its turn, under its new id.
    let (view, messages) = history(&env, &session2);
    assert_eq!(view.id, session2);
    let texts: Vec<String> = messages.iter().map(message_text).collect();
    assert_eq!(texts, ["remember this", "noted on sled"]);
}

#[test]
fn a_plan_finished_hook_runs_once_per_plan_whichever_node_ends_it() {
    let pg = TestPostgres::start();
    pg.create_database("hooked");
    // Each run of the hook writes a file of its own in the plans' folder.
    let hook = "[[hooks]]\nevent = \"plan_finished\"\ncommand = \"cat > \\\"$(mktemp -p . ended.XXXXXX)\\\"\"\n";
    let config = format!("{}{hook}", node_config(&pg, "hooked"));
    let (a, b) = (TestEnv::new(&config), TestEnv::new(&config));
    let (_da, _db) = (a.start(), b.start());
    let shared = a.tmp.path().join("plans");
    std::fs::create_dir_all(&shared).unwrap();
    let ended = || -> Vec<serde_json::Value> {
        std::fs::read_dir(&shared)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("ended."))
            .filter_map(|e| serde_json::from_str(&std::fs::read_to_string(e.path()).ok()?).ok())
            .collect()
    };
    let submit = |env: &TestEnv| {
        let mut plan = one_step("true", false);
        plan.steps[0].workdir = Some(shared.display().to_string());
        env.submit(plan)
    };
    let ids: Vec<String> = (0..8)
        .map(|i| submit(if i % 2 == 0 { &a } else { &b }))
        .collect();
    wait_until("every plan's hook ran", DEADLINE, || {
        (ended().len() >= ids.len()).then_some(())
    });
    // One more plan's hook: both nodes have looked at the earlier ends
    // again by the time it has run, so a second run would show now.
    let last = submit(&a);
    wait_until("the last plan's hook ran", DEADLINE, || {
        ended()
            .iter()
            .any(|v| v["plan"] == last.as_str())
            .then_some(())
    });
    let all = ended();
    for id in ids.iter().chain(std::iter::once(&last)) {
        let runs = all.iter().filter(|v| v["plan"] == id.as_str()).count();
        assert_eq!(runs, 1, "plan {id}: {all:#?}");
        assert!(
            all.iter()
                .any(|v| v["plan"] == id.as_str() && v["state"] == "succeeded")
        );
    }
}
