//! A step's processes die with the flytod that runs them, grandchildren
//! that cleared their environment included: its guard kills them when
//! flytod is SIGKILLed, the next flytod on the same state directory kills
//! them before it reruns the step (when the guard went too), and on the
//! shared store the rescued attempt never overlaps the killed one.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_protocol::{PlanState, StepState};
use flyto_tests::pg::TestPostgres;
use flyto_tests::{DEADLINE, Daemon, TestEnv, wait_until};
use std::path::Path;

/// Short graces so stopping steps is quick.
const FAST: &str = "[daemon]\nshutdown_grace = \"1s\"\n[plans]\nkill_grace = \"200ms\"\n";

/// Live processes whose command line holds `tag` as an argument.
fn processes_named(tag: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == tag.as_bytes()))
        })
        .collect()
}

fn wait_gone(tag: &str) {
    wait_until(
        &format!("the processes named {tag} to be gone"),
        DEADLINE,
        || processes_named(tag).is_empty().then_some(()),
    );
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A step body: it appends `start-<attempt>` to `log`, then leaves a
/// grandchild named `<tag>-<attempt>` with an empty environment (no
/// `FLYTO_STEP` marker, no `PATH`) that appends `beat-<tag>-<attempt>`
/// every 100 ms until `gate` exists; the step's shell waits for it.
fn body(tag: &str, attempt: &str, log: &Path, gate: &Path) -> String {
    format!(
        "echo start-{attempt} >> {log}; env -i /bin/sh -c 'while [ ! -e {gate} ]; do echo beat-$0 >> {log}; /bin/sleep 0.1; done' {tag}-{attempt} & wait; echo done",
        log = log.display(),
        gate = gate.display(),
    )
}

/// [`body`] with the attempt numbered by the starts so far (1, 2, ...).
fn counted_body(tag: &str, log: &Path, gate: &Path) -> String {
    format!(
        "n=$(( $(cat {log} 2>/dev/null | grep -c ^start-) + 1 )); {}",
        body(tag, "$n", log, gate),
        log = log.display(),
    )
}

/// The beats of attempt `attempt` written after the line `after`.
fn beats_after(log: &[String], tag: &str, attempt: &str, after: &str) -> usize {
    let beat = format!("beat-{tag}-{attempt}");
    log.iter()
        .skip_while(|l| *l != after)
        .filter(|l| **l == beat)
        .count()
}

/// The guard `flytod guard-runs` that `daemon` started.
fn guard_of(daemon: &Daemon) -> i32 {
    let parent = daemon.pid();
    wait_until("flytod's guard to start", DEADLINE, || {
        processes_named("guard-runs").into_iter().find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let (_, rest) = s.rsplit_once(')')?;
                    rest.split_whitespace().nth(1)?.parse::<i32>().ok()
                })
                == Some(parent)
        })
    })
}

/// Waits until the step runs attempt `attempt`'s grandchild.
fn wait_beating(log: &Path, tag: &str, attempt: &str) {
    let beat = format!("beat-{tag}-{attempt}");
    wait_until(&format!("{beat} in the log"), DEADLINE, || {
        lines(log).contains(&beat).then_some(())
    });
}

#[test]
fn a_killed_flytods_step_grandchildren_die_with_it() {
    let env = TestEnv::new(FAST);
    let tag = format!("flyto-orphan-{}", std::process::id());
    let (log, gate) = (env.work.join("log"), env.work.join("gate"));
    let daemon = env.start();
    let id = env.submit(TestEnv::run_plan(&counted_body(&tag, &log, &gate)));
    wait_beating(&log, &tag, "1");
    daemon.kill9();
    // No flytod runs now: the grandchild must still go.
    wait_gone(&format!("{tag}-1"));

    // The next flytod runs the step again, once.
    let _daemon = env.start();
    wait_beating(&log, &tag, "2");
    std::fs::write(&gate, "").expect("gate");
    let plan = env.wait_plan(&id, "finished", |p| p.state.is_terminal());
    assert_eq!(plan.state, PlanState::Succeeded, "{plan:?}");
    assert_eq!(plan.steps[0].attempts, 2, "{plan:?}");
    let starts = lines(&log)
        .iter()
        .filter(|l| l.starts_with("start-"))
        .count();
    assert_eq!(starts, 2, "{:?}", lines(&log));
    wait_gone(&format!("{tag}-2"));
}

#[test]
fn a_restarted_flytod_kills_what_is_left_of_a_step_before_it_runs_it_again() {
    let env = TestEnv::new(FAST);
    let tag = format!("flyto-leftover-{}", std::process::id());
    let (log, gate) = (env.work.join("log"), env.work.join("gate"));
    let daemon = env.start();
    let id = env.submit(TestEnv::run_plan(&counted_body(&tag, &log, &gate)));
    wait_beating(&log, &tag, "1");
    // flytod and its guard die together (an OOM kill, `kill -9` of both):
    // only the next start can clean up.
    let guard = guard_of(&daemon);
    // SAFETY: killing the guard our own flytod started.
    unsafe { libc::kill(guard, libc::SIGKILL) };
    daemon.kill9();

    let _daemon = env.start();
    let plan = env.wait_plan(&id, "the step to run again", |p| {
        p.steps[0].state == StepState::Running && p.steps[0].attempts == 2
    });
    assert!(
        plan.steps[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("interrupted")),
        "{plan:?}"
    );
    wait_beating(&log, &tag, "2");
    // Killed, and gone, before the second attempt started.
    assert!(processes_named(&format!("{tag}-1")).is_empty());
    assert_eq!(
        beats_after(&lines(&log), &tag, "1", "start-2"),
        0,
        "the killed attempt's grandchild ran on beside the new attempt: {:?}",
        lines(&log)
    );
    std::fs::write(&gate, "").expect("gate");
    let plan = env.wait_plan(&id, "finished", |p| p.state.is_terminal());
    assert_eq!(plan.state, PlanState::Succeeded, "{plan:?}");
    assert_eq!(plan.steps[0].attempts, 2, "{plan:?}");
    wait_gone(&format!("{tag}-2"));
}

#[test]
fn on_the_shared_store_a_rescued_step_never_runs_beside_its_killed_attempt() {
    let pg = TestPostgres::start();
    pg.create_database("orphans");
    let config = format!(
        "{FAST}max_parallel_plans = 4\n[store]\nbackend = \"postgres\"\nurl = \"{}\"\n",
        pg.url_for("orphans")
    );
    let (a, b) = (TestEnv::new(&config), TestEnv::new(&config));
    let tag = format!("flyto-rescued-{}", std::process::id());
    let (log, gate) = (a.work.join("log"), a.work.join("gate"));
    let plan = flyto_protocol::PlanSpec {
        steps: vec![flyto_protocol::StepSpec {
            id: "main".into(),
            run: Some(body(&tag, "$FLYTO_ATTEMPT", &log, &gate)),
            idempotent: true,
            ..Default::default()
        }],
        ..Default::default()
    };
    let da = a.start();
    let id = a.submit(plan);
    let first = wait_until("the first attempt to start", DEADLINE, || {
        lines(&log)
            .iter()
            .find_map(|l| l.strip_prefix("start-").map(str::to_string))
    });
    wait_beating(&log, &tag, &first);
    da.kill9();
    // Node A is not restarted: its guard stops the attempt.
    wait_gone(&format!("{tag}-{first}"));

    let _db = b.start();
    let held = b.status(&id);
    assert_eq!(
        (held.steps[0].state, held.steps[0].attempts),
        (StepState::Running, 1),
        "B must not take the step while A's lease holds: {held:?}"
    );
    // A's lease runs out (the database's clock, moved on by the test).
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"lease-expired\n"))
        .expect("log");
    pg.sql(
        "orphans",
        "UPDATE flyto_steps SET lease_until = now() - interval '1 second' WHERE state = 'running'",
    );
    let second = wait_until("the rescued attempt to start", DEADLINE, || {
        lines(&log)
            .iter()
            .skip_while(|l| *l != "lease-expired")
            .find_map(|l| l.strip_prefix("start-").map(str::to_string))
    });
    assert_ne!(first, second, "{:?}", lines(&log));
    wait_beating(&log, &tag, &second);
    std::fs::write(&gate, "").expect("gate");
    let done = b.wait_plan(&id, "finished on B", |p| p.state.is_terminal());
    assert_eq!(done.state, PlanState::Succeeded, "{done:?}");
    let log = lines(&log);
    assert_eq!(
        log.iter().filter(|l| l.starts_with("start-")).count(),
        2,
        "{log:?}"
    );
    assert_eq!(
        beats_after(&log, &tag, &first, &format!("start-{second}")),
        0,
        "A's attempt ran on beside B's: {log:?}"
    );
    wait_gone(&format!("{tag}-{second}"));
}
