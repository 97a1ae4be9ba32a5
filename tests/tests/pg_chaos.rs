//! Chaos on the shared store, through the real binaries: three flytod on
//! one PostgreSQL run 200 plans (a → b, a → c) while daemons are killed
//! and restarted, one is paused for longer than a lease, one node's
//! database sessions are killed and PostgreSQL itself restarts. Nothing
//! acknowledged may be lost, and no step may succeed twice.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_protocol::{PlanSpec, Request, Response, StepSpec};
use flyto_tests::pg::TestPostgres;
use flyto_tests::{Daemon, TestEnv, wait_until};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

const PLANS: usize = 200;

/// A small seeded generator: the same run every time.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn node_of(env: &TestEnv) -> String {
    match env.client().call(&Request::Stats {}).expect("stats") {
        Response::Stats { stats } => stats.node,
        other => panic!("unexpected answer {other:?}"),
    }
}

fn count(pg: &TestPostgres, sql: &str) -> i64 {
    pg.sql("chaos", sql).parse().expect("a count")
}

#[test]
fn three_daemons_through_kills_a_pause_and_a_database_restart_run_every_step_to_one_success() {
    let pg = TestPostgres::start();
    pg.create_database("chaos");
    let config = format!(
        "[daemon]\nshutdown_grace = \"1s\"\n[plans]\nkill_grace = \"200ms\"\nmax_parallel_plans = 4\n[store]\nbackend = \"postgres\"\nurl = \"{}\"\n",
        pg.url_for("chaos")
    );
    let envs: Vec<TestEnv> = (0..3).map(|_| TestEnv::new(&config)).collect();
    let mut daemons: Vec<Option<Daemon>> = envs.iter().map(|e| Some(e.start())).collect();
    let log = envs[0].tmp.path().join("executions");
    let mut rng = Lcg(0x5eed);
    // Every execution appends one line (O_APPEND, then fsync) before it
    // sleeps: `plan step token pid`.
    let step = |id: &str, deps: &[&str], ms: u64| StepSpec {
        id: id.into(),
        run: Some(format!(
            "echo \"$FLYTO_PLAN_ID {id} $FLYTO_ATTEMPT $$\" >> {l}; sync {l}; sleep 0.{ms:03}",
            l = log.display()
        )),
        deps: deps.iter().map(|d| d.to_string()).collect(),
        idempotent: true,
        max_attempts: Some(20),
        ..Default::default()
    };
    // Two jobs firing every 2 s, created on different nodes; their steps
    // may be rescued like any other.
    let job_plan = envs[0].tmp.path().join("job.toml");
    std::fs::write(
        &job_plan,
        "[[steps]]\nid = \"tick\"\nrun = \"true\"\nidempotent = true\nmax_attempts = 20\n",
    )
    .expect("the job's plan");
    let jobs: Vec<String> = (0..2)
        .map(|i| {
            let out = envs[i].ctl(&[
                "job_create",
                "--schedule",
                "every 2s",
                "--plan",
                job_plan.to_str().expect("utf-8"),
                "--name",
                &format!("chaos-{i}"),
            ]);
            assert_eq!(out.code, 0, "{out:?}");
            format!("chaos-{i}")
        })
        .collect();
    let mut submitted = HashSet::new();
    for i in 0..PLANS {
        let plan = PlanSpec {
            steps: vec![
                step("a", &[], 50 + rng.below(450)),
                step("b", &["a"], 50 + rng.below(450)),
                step("c", &["a"], 50 + rng.below(450)),
            ],
            ..Default::default()
        };
        submitted.insert(envs[i % 3].submit(plan));
    }
    let started = Instant::now();

    // A daemon killed mid-run and started again.
    let victim = rng.below(3) as usize;
    daemons[victim].take().expect("running").kill9();
    daemons[victim] = Some(envs[victim].start());

    // One node paused while it runs steps, for longer than its leases.
    // (The killed node's steps still look running until the sweep.)
    let nodes: Vec<String> = envs.iter().map(node_of).collect();
    let (paused, busy) = wait_until("a node running steps", Duration::from_secs(60), || {
        (0..3).find_map(|i| {
            let running = count(
                &pg,
                &format!(
                    "SELECT count(*) FROM flyto_steps WHERE state = 'running' AND lease_node = '{}'",
                    nodes[i]
                ),
            );
            (running > 0).then(|| (i, nodes[i].clone()))
        })
    });
    daemons[paused]
        .as_ref()
        .expect("running")
        .signal(libc::SIGSTOP);
    let others: Vec<usize> = (0..3).filter(|&i| i != paused).collect();

    // Meanwhile: one node's database sessions killed, another killed and
    // restarted, and PostgreSQL restarted once.
    let cut = node_of(&envs[others[0]]);
    assert!(pg.terminate_backends(&format!("flytod {cut}")) >= 1);
    let again = others[1];
    daemons[again].take().expect("running").kill9();
    daemons[again] = Some(envs[again].start());
    pg.restart();

    // The paused node's steps are taken over once its leases run out;
    // then it wakes up, and whatever it reports is refused.
    wait_until(
        "the paused node's steps rescued",
        Duration::from_secs(120),
        || {
            (count(
                &pg,
                &format!(
                    "SELECT count(*) FROM flyto_attempts WHERE node = '{busy}' AND outcome = 'lease lost'"
                ),
            ) > 0)
                .then_some(())
        },
    );
    daemons[paused]
        .as_ref()
        .expect("paused")
        .signal(libc::SIGCONT);

    // The jobs stop firing; a fire a killed node recorded and never
    // submitted is taken over by another.
    for (i, job) in jobs.iter().enumerate() {
        let out = envs[others[i % 2]].ctl(&["job_pause", job]);
        assert_eq!(out.code, 0, "{out:?}");
    }
    wait_until("every job fire submitted", Duration::from_secs(120), || {
        (count(
            &pg,
            "SELECT count(*) FROM flyto_job_fires WHERE outcome = 'firing'",
        ) == 0)
            .then_some(())
    });
    wait_until("every plan finished", Duration::from_secs(180), || {
        (count(
            &pg,
            "SELECT count(*) FROM flyto_plans WHERE state NOT IN ('succeeded', 'failed', 'cancelled')",
        ) == 0)
            .then_some(())
    });
    // The woken node's stale reports have come in (and been refused).
    wait_until(
        "a stale report of the paused node refused",
        Duration::from_secs(60),
        || {
            (count(
                &pg,
                &format!(
                    "SELECT count(*) FROM flyto_attempts WHERE node = '{busy}' AND outcome = 'lease lost' AND stopped_at IS NOT NULL"
                ),
            ) > 0)
                .then_some(())
        },
    );
    let took = started.elapsed();
    for d in daemons.into_iter().flatten() {
        assert!(d.terminate().success());
    }

    // Exactly one plan per job instant: every submitted fire has its
    // plan under its key, and every plan a job made has its fire.
    let fired = count(
        &pg,
        "SELECT count(*) FROM flyto_job_fires WHERE outcome = 'submitted' AND NOT manual AND attempt = 0",
    );
    assert!(fired >= 10, "{fired} job fires");
    assert_eq!(
        count(
            &pg,
            "SELECT count(*) FROM flyto_job_fires f WHERE outcome = 'submitted' AND NOT EXISTS (
                 SELECT 1 FROM flyto_plans p
                 WHERE p.idempotency_key = 'job j' || f.job || ' at ' || f.instant_ms)"
        ),
        0
    );
    assert_eq!(
        count(
            &pg,
            "SELECT count(*) FROM flyto_plans WHERE idempotency_key LIKE 'job %'"
        ),
        fired
    );
    assert_eq!(
        count(
            &pg,
            "SELECT count(*) FROM flyto_plans WHERE idempotency_key LIKE 'job %' AND state <> 'succeeded'"
        ),
        0,
        "{}",
        pg.sql(
            "chaos",
            "SELECT id, state, reason FROM flyto_plans WHERE idempotency_key LIKE 'job %' AND state <> 'succeeded' LIMIT 5"
        )
    );
    // From here on, the submitted plans.
    pg.sql(
        "chaos",
        "DELETE FROM flyto_attempts WHERE plan IN (SELECT id FROM flyto_plans WHERE idempotency_key LIKE 'job %')",
    );
    pg.sql(
        "chaos",
        "DELETE FROM flyto_plans WHERE idempotency_key LIKE 'job %'",
    );
    // Every plan acknowledged is there and succeeded.
    assert_eq!(
        count(&pg, "SELECT count(*) FROM flyto_plans") as usize,
        PLANS
    );
    assert_eq!(
        count(
            &pg,
            "SELECT count(*) FROM flyto_plans WHERE state = 'succeeded'"
        ) as usize,
        PLANS,
        "{}",
        pg.sql(
            "chaos",
            "SELECT id, state, reason FROM flyto_plans WHERE state <> 'succeeded' LIMIT 5"
        )
    );
    // Every step has exactly one successful attempt.
    assert_eq!(
        count(
            &pg,
            "SELECT count(*) FROM (SELECT plan, step FROM flyto_attempts GROUP BY plan, step
             HAVING count(*) FILTER (WHERE outcome = 'succeeded') <> 1) t"
        ),
        0
    );
    assert_eq!(
        count(
            &pg,
            "SELECT count(*) FROM flyto_attempts WHERE outcome = 'succeeded'"
        ) as usize,
        PLANS * 3
    );
    // b and c started only after a had succeeded.
    assert_eq!(
        count(
            &pg,
            "SELECT count(*) FROM flyto_attempts x JOIN flyto_attempts a
               ON a.plan = x.plan AND a.step = 'a' AND a.outcome = 'succeeded'
             WHERE x.step IN ('b', 'c') AND x.started_at < a.finished_at"
        ),
        0
    );
    // Executions beyond one per step only where an attempt was rescued.
    let outcomes: HashMap<String, String> = pg
        .sql(
            "chaos",
            "SELECT token, coalesce(outcome, '') FROM flyto_attempts",
        )
        .lines()
        .filter_map(|l| l.split_once('|'))
        .map(|(t, o)| (t.to_string(), o.to_string()))
        .collect();
    let text = std::fs::read_to_string(&log).expect("the executions log");
    let mut succeeded: HashMap<(String, String), usize> = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 4, "{line}");
        let outcome = outcomes
            .get(f[2])
            .unwrap_or_else(|| panic!("an execution under no recorded attempt: {line}"));
        match outcome.as_str() {
            "succeeded" => *succeeded.entry((f[0].into(), f[1].into())).or_default() += 1,
            "lease lost" => {}
            o if o.starts_with("interrupted") => {}
            o => panic!("an extra execution that was not rescued ({o}): {line}"),
        }
    }
    assert_eq!(succeeded.len(), PLANS * 3);
    assert!(succeeded.values().all(|&n| n == 1), "{succeeded:?}");
    assert!(submitted.len() == PLANS);
    eprintln!("chaos: {PLANS} plans and {fired} job fires through the faults in {took:?}");
}
