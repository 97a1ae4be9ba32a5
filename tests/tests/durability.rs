//! Durability: what flytod acknowledged survives `kill -9`, and work that
//! was running when it died is picked up again (at-least-once), within
//! `max_attempts`, without leaving the killed attempt's processes behind.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_protocol::{Client, PlanSpec, PlanState, Request, Response, StepSpec, StepState};
use flyto_tests::{DEADLINE, TestEnv, wait_until};
use std::path::Path;

/// Short graces so cancelling a `sleep 300` step is quick.
const FAST: &str = "[daemon]\nshutdown_grace = \"1s\"\n[plans]\nkill_grace = \"200ms\"\n";

/// Pids of live processes started by the flytod of `env` for step `marker`
/// (`<plan>/<step>`): their environment carries `FLYTO_STEP=<marker>` and
/// this env's socket as `FLYTO_PLAN_SOCK` (plan ids repeat across the
/// parallel tests' daemons; sockets do not). Zombies have no environment
/// left and do not count.
pub(crate) fn step_processes(env: &TestEnv, marker: &str) -> Vec<i32> {
    let step = format!("FLYTO_STEP={marker}");
    let sock = env.plan_sock_prefix();
    flyto_tests::processes_with(&[&step, &sock])
}

/// Waits until no process of step `marker` of `env` is left.
pub(crate) fn wait_no_step_processes(env: &TestEnv, marker: &str) {
    wait_until(
        &format!("the processes of step {marker} to be gone"),
        DEADLINE,
        || step_processes(env, marker).is_empty().then_some(()),
    );
}

/// Lines in a file a step appends to, one per attempt (0 if missing).
pub(crate) fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

fn submit_on(client: &mut Client, plan: PlanSpec, key: Option<&str>) -> (String, bool) {
    match client
        .call(&Request::SubmitPlan {
            plan,
            idempotency_key: key.map(str::to_string),
        })
        .expect("submit")
    {
        Response::PlanSubmitted { id, duplicate } => (id, duplicate),
        other => panic!("unexpected answer {other:?}"),
    }
}

pub(crate) fn cancel(env: &TestEnv, id: &str) -> PlanState {
    match env
        .client()
        .call(&Request::PlanCancel { id: id.into() })
        .expect("cancel")
    {
        Response::PlanCancelled { state, .. } => state,
        other => panic!("unexpected answer {other:?}"),
    }
}

/// A plan of two steps, `b` after `a`, each echoing something unique to `i`.
fn two_step_plan(i: usize) -> PlanSpec {
    PlanSpec {
        name: Some(format!("plan-{i}")),
        env: Default::default(),
        steps: vec![
            StepSpec {
                id: "a".into(),
                run: Some(format!("echo a{i}")),
                ..Default::default()
            },
            StepSpec {
                id: "b".into(),
                run: Some(format!("echo b{i}")),
                deps: vec!["a".into()],
                ..Default::default()
            },
        ],
        sandbox: None,
    }
}

/// Starts a plan that holds the only plan slot (`max_parallel_plans = 1`)
/// so later plans stay pending; returns its id once it runs.
fn start_blocker(env: &TestEnv) -> String {
    let id = env.submit(TestEnv::run_plan("sleep 300"));
    env.wait_plan(&id, "running", |p| p.state == PlanState::Running);
    id
}

#[test]
fn acknowledged_pending_plans_survive_sigkill_and_run_afterwards() {
    let env = TestEnv::new(FAST);
    let daemon = env.start();
    let blocker = start_blocker(&env);
    let mut client = env.client();
    let ids: Vec<String> = (0..50)
        .map(|i| submit_on(&mut client, two_step_plan(i), None).0)
        .collect();
    drop(client);
    daemon.kill9();

    let _daemon = env.start();
    for (i, id) in ids.iter().enumerate() {
        let plan = env.status(id);
        assert_eq!(plan.name.as_deref(), Some(format!("plan-{i}").as_str()));
        assert_eq!(plan.state, PlanState::Pending, "{plan:?}");
        let steps: Vec<(&str, &str, StepState)> = plan
            .steps
            .iter()
            .map(|s| (s.id.as_str(), s.text.as_str(), s.state))
            .collect();
        assert_eq!(
            steps,
            [
                ("a", format!("echo a{i}").as_str(), StepState::Pending),
                ("b", format!("echo b{i}").as_str(), StepState::Pending),
            ],
        );
        assert_eq!(plan.steps[1].deps, ["a"]);
    }

    // The blocker was running when flytod died: it is running again.
    env.wait_plan(&blocker, "running again", |p| {
        p.state == PlanState::Running && p.steps[0].attempts == 2
    });
    assert_eq!(cancel(&env, &blocker), PlanState::Cancelled);
    for (i, id) in ids.iter().enumerate() {
        let plan = env.wait_plan(id, "finished", |p| p.state.is_terminal());
        assert_eq!(plan.state, PlanState::Succeeded, "{plan:?}");
        assert_eq!(plan.steps[0].stdout_tail, format!("a{i}\n"));
        assert_eq!(plan.steps[1].stdout_tail, format!("b{i}\n"));
        assert!(plan.steps.iter().all(|s| s.attempts == 1), "{plan:?}");
    }
}

#[test]
fn every_acknowledged_concurrent_submit_survives_sigkill() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 10;
    let env = TestEnv::new(FAST);
    let daemon = env.start();
    let blocker = start_blocker(&env);
    let acked: Vec<(usize, String)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let env = &env;
                s.spawn(move || {
                    let mut client = env.client();
                    (0..PER_THREAD)
                        .map(|k| {
                            let i = t * PER_THREAD + k;
                            (i, submit_on(&mut client, two_step_plan(i), None).0)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("submitter thread"))
            .collect()
    });
    daemon.kill9();

    assert_eq!(acked.len(), THREADS * PER_THREAD);
    let mut unique: Vec<&str> = acked.iter().map(|(_, id)| id.as_str()).collect();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), acked.len(), "plan ids were handed out twice");

    let _daemon = env.start();
    for (i, id) in &acked {
        let plan = env.status(id);
        assert_eq!(plan.name.as_deref(), Some(format!("plan-{i}").as_str()));
        assert_eq!(plan.state, PlanState::Pending, "{plan:?}");
        assert_eq!(plan.steps.len(), 2, "{plan:?}");
        assert_eq!(plan.steps[0].text, format!("echo a{i}"));
    }
    assert_eq!(cancel(&env, &blocker), PlanState::Cancelled);
}

#[test]
fn a_step_running_during_sigkill_runs_again_and_its_processes_are_killed() {
    let env = TestEnv::new(FAST);
    let starts = env.work.join("starts");
    let go = env.work.join("go");
    // Each attempt records its start, leaves a background `sleep 300` in its
    // process group (a process flytod's death does not take along), and
    // finishes once `go` exists.
    let command = format!(
        "sleep 300 & echo started >> {starts}; while [ ! -f {go} ]; do sleep 0.05; done; echo finished",
        starts = starts.display(),
        go = go.display(),
    );
    let daemon = env.start();
    let id = env.submit(TestEnv::run_plan(&command));
    let marker = format!("{id}/main");
    wait_until("the first attempt to start", DEADLINE, || {
        (lines(&starts) == 1).then_some(())
    });
    let first_attempt = wait_until("the first attempt's processes", DEADLINE, || {
        let pids = step_processes(&env, &marker);
        (pids.len() >= 2).then_some(pids)
    });
    daemon.kill9();

    let _daemon = env.start();
    let plan = env.wait_plan(&id, "the step to run again", |p| {
        p.steps[0].state == StepState::Running && p.steps[0].attempts == 2
    });
    let error = plan.steps[0].error.clone().unwrap_or_default();
    assert!(
        error.contains("interrupted"),
        "the re-run step should say why it runs again: {plan:?}"
    );
    wait_until(
        "the killed attempt's processes to be gone",
        DEADLINE,
        || {
            let sock = env.plan_sock_prefix();
            let step = format!("FLYTO_STEP={marker}");
            let left: Vec<i32> = first_attempt
                .iter()
                .copied()
                .filter(|&pid| flyto_tests::process_has(pid, &[&step, &sock]))
                .collect();
            left.is_empty().then_some(())
        },
    );
    wait_until("the second attempt to start", DEADLINE, || {
        (lines(&starts) == 2).then_some(())
    });

    std::fs::write(&go, "").expect("write go");
    let plan = env.wait_plan(&id, "finished", |p| p.state.is_terminal());
    assert_eq!(plan.state, PlanState::Succeeded, "{plan:?}");
    let step = &plan.steps[0];
    assert_eq!(step.attempts, 2, "{plan:?}");
    assert_eq!(step.exit_code, Some(0));
    assert_eq!(step.stdout_tail, "finished\n");
    assert_eq!(lines(&starts), 2, "the step ran more than twice");
    wait_no_step_processes(&env, &marker);
}

#[test]
fn a_step_out_of_attempts_fails_after_sigkill() {
    let env = TestEnv::new(FAST);
    let starts = env.work.join("starts");
    let daemon = env.start();
    let id = env.submit(PlanSpec {
        name: None,
        env: Default::default(),
        steps: vec![StepSpec {
            id: "once".into(),
            run: Some(format!(
                "echo started >> {}; sleep 300 & wait",
                starts.display()
            )),
            max_attempts: Some(1),
            ..Default::default()
        }],
        sandbox: None,
    });
    wait_until("the step to start", DEADLINE, || {
        (lines(&starts) == 1).then_some(())
    });
    daemon.kill9();

    let _daemon = env.start();
    let plan = env.wait_plan(&id, "finished", |p| p.state.is_terminal());
    assert_eq!(plan.state, PlanState::Failed, "{plan:?}");
    let step = &plan.steps[0];
    assert_eq!(step.state, StepState::Failed);
    assert_eq!(step.attempts, 1);
    let error = step.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("interrupted") && error.contains("max_attempts"),
        "{error}"
    );
    let reason = plan.reason.as_deref().unwrap_or_default();
    assert!(
        reason.contains("once") && reason.contains("interrupted"),
        "{reason}"
    );
    assert_eq!(lines(&starts), 1, "the step ran again past max_attempts");
    wait_no_step_processes(&env, &format!("{id}/once"));
}

#[test]
fn an_idempotency_key_still_matches_after_sigkill() {
    let env = TestEnv::new(FAST);
    let daemon = env.start();
    let blocker = start_blocker(&env);
    let (first, duplicate) = submit_on(
        &mut env.client(),
        TestEnv::run_plan("echo once"),
        Some("nightly-42"),
    );
    assert!(!duplicate);
    daemon.kill9();

    let _daemon = env.start();
    let (again, duplicate) = submit_on(
        &mut env.client(),
        TestEnv::run_plan("echo once"),
        Some("nightly-42"),
    );
    assert_eq!(again, first);
    assert!(duplicate, "the retried submit queued a second plan");
    // A different key is a different plan.
    let (other, duplicate) = submit_on(
        &mut env.client(),
        TestEnv::run_plan("echo once"),
        Some("nightly-43"),
    );
    assert_ne!(other, first);
    assert!(!duplicate);
    assert_eq!(cancel(&env, &blocker), PlanState::Cancelled);
}

/// A step stopped by a shutdown says so, with how long it really ran, and
/// runs again when flytod starts (or fails for good without attempts left).
#[test]
fn a_step_interrupted_by_a_shutdown_says_so_with_its_real_duration() {
    let env = TestEnv::new(&format!("{FAST}max_parallel_plans = 2\n"));
    let mut daemon = env.start();
    let (mark, go) = (env.work.join("mark"), env.work.join("go"));
    let again = env.submit(PlanSpec {
        name: None,
        env: Default::default(),
        steps: vec![StepSpec {
            id: "job".into(),
            run: Some(format!(
                "if [ -e {mark} ]; then while [ ! -e {go} ]; do sleep 0.05; done; else touch {mark}; exec sleep 300; fi",
                mark = mark.display(),
                go = go.display()
            )),
            max_attempts: Some(2),
            ..Default::default()
        }],
        sandbox: None,
    });
    let last = env.submit(PlanSpec {
        name: None,
        env: Default::default(),
        steps: vec![StepSpec {
            id: "job".into(),
            run: Some("exec sleep 300".into()),
            max_attempts: Some(1),
            ..Default::default()
        }],
        sandbox: None,
    });
    for id in [&again, &last] {
        env.wait_plan(id, "step running", |p| {
            p.steps[0].state == StepState::Running
        });
    }
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(DEADLINE).success());

    let _daemon = env.start();
    let view = env.wait_plan(&last, "failed", |p| p.state == PlanState::Failed);
    let step = &view.steps[0];
    let error = step.error.as_deref().unwrap_or_default();
    assert!(
        error.starts_with("interrupted: flytod shut down during attempt 1 of max_attempts = 1"),
        "{step:?}"
    );
    // It ran until the shutdown grace (1 s) was over, not 0.
    let ran = step
        .finished_ms
        .unwrap_or(0)
        .saturating_sub(step.started_ms.unwrap_or(u64::MAX));
    assert!(ran >= 1000, "{step:?}");

    let view = env.wait_plan(&again, "attempt 2 running", |p| {
        p.steps[0].attempts == 2 && p.steps[0].state == StepState::Running
    });
    let error = view.steps[0].error.as_deref().unwrap_or_default();
    assert!(
        error.starts_with("interrupted: flytod shut down, will run again"),
        "{view:?}"
    );
    // The interrupted attempt's own duration (at least the 1 s grace), as
    // the running attempt's replaces it in the table.
    let ran: f64 = error
        .split_once(" ran ")
        .and_then(|(_, r)| r.split_once('s'))
        .and_then(|(secs, _)| secs.parse().ok())
        .unwrap_or_else(|| panic!("no duration in {error:?}"));
    assert!(ran >= 1.0, "{error}");
    std::fs::write(&go, "").expect("go");
    let view = env.wait_plan(&again, "succeeded", |p| p.state == PlanState::Succeeded);
    assert_eq!(view.steps[0].error, None);
}

/// The paths flytod `fsync`ed or `fdatasync`ed, in order, from an
/// `strace -y` record (`123 fsync(5</path>) = 0`). A call another thread
/// interrupts is split over two lines (`123 fsync(5</path> <unfinished
/// ...>`, later `123 <... fsync resumed>) = 0`): joined by the thread id.
fn synced_paths(trace: &str) -> Vec<String> {
    let path_of = |l: &str| {
        let start = l.find('<')? + 1;
        let end = start + l[start..].find('>')?;
        Some(l[start..end].to_string())
    };
    let mut pending: std::collections::HashMap<String, String> = Default::default();
    let mut synced = Vec::new();
    for l in trace.lines() {
        let tid = l.split_whitespace().next().unwrap_or_default().to_string();
        let ok = l.trim_end().ends_with("= 0");
        if l.contains("fsync(") || l.contains("fdatasync(") {
            let Some(path) = path_of(l) else { continue };
            if l.contains("<unfinished") {
                pending.insert(tid, path);
            } else if ok {
                synced.push(path);
            }
        } else if l.contains("sync resumed>")
            && let Some(path) = pending.remove(&tid)
            && ok
        {
            synced.push(path);
        }
    }
    synced
}

#[test]
fn the_fsync_trace_reader_joins_calls_split_by_another_thread() {
    let trace = "10 fsync(5</s/logs>) = 0\n\
                 11 fsync(6</s/db/wal> <unfinished ...>\n\
                 12 fdatasync(7</s/logs/p1> <unfinished ...>\n\
                 11 <... fsync resumed>) = 0\n\
                 12 <... fdatasync resumed>) = -1 EIO (Input/output error)\n";
    assert_eq!(synced_paths(trace), ["/s/logs", "/s/db/wal"]);
}

/// A power cut forgets every write and every directory entry not synced.
/// Traced through the real flytod: on a first start whose state dir (and
/// folders above it) did not exist, each created folder and the one above
/// them are synced; a plan seen succeeded has its log file, its plan
/// folder and `logs/` synced.
#[test]
fn a_first_start_and_a_finished_step_sync_what_a_power_cut_would_lose() {
    let strace = Path::new("/usr/bin/strace");
    assert!(
        strace.exists(),
        "this test traces flytod's fsyncs with strace: install it (apt-get install strace)"
    );
    let env = TestEnv::new("");
    let root = env.tmp.path().canonicalize().unwrap();
    let state = root.join("fresh/a/state");
    let trace = root.join("fsync.trace");
    let state_s = state.display().to_string();
    let trace_s = trace.display().to_string();
    let mut daemon = env
        .try_start_under(
            &[
                "/usr/bin/strace",
                "-f",
                "-qq",
                "-y",
                "-e",
                "trace=fsync,fdatasync",
                "-e",
                "signal=none",
                "-o",
                &trace_s,
            ],
            &[("FLYTO_HOME", &state_s)],
        )
        .unwrap_or_else(|log| panic!("flytod under strace did not start:\n{log}"));
    let out = env.ctl(&["submit_plan", "--run", "echo logged", "--wait"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("logged"), "{out:?}");
    let plan = env.plans().first().map(|p| p.id.clone()).expect("the plan");

    // flytod is strace's child: stop it, then strace ends with it.
    let children = std::fs::read_to_string(format!(
        "/proc/{pid}/task/{pid}/children",
        pid = daemon.pid()
    ))
    .unwrap();
    let flytod: i32 = children.split_whitespace().next().unwrap().parse().unwrap();
    // SAFETY: a signal to the flytod this test started.
    unsafe { libc::kill(flytod, libc::SIGTERM) };
    daemon.wait_exit(DEADLINE);
    let synced = synced_paths(&std::fs::read_to_string(&trace).unwrap());
    let was_synced = |p: &Path| synced.iter().any(|s| Path::new(s) == p);
    for dir in [
        root.clone(),
        root.join("fresh"),
        root.join("fresh/a"),
        state.clone(),
    ] {
        assert!(
            was_synced(&dir),
            "{} was created (or holds what was) but never synced: {synced:#?}",
            dir.display()
        );
    }
    let plan_logs = state.join("logs").join(&plan);
    let log = std::fs::read_dir(&plan_logs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .expect("the step's log file");
    assert!(std::fs::read_to_string(&log).unwrap().contains("logged"));
    for p in [log.as_path(), plan_logs.as_path(), &state.join("logs")] {
        assert!(was_synced(p), "{} never synced: {synced:#?}", p.display());
    }
}
