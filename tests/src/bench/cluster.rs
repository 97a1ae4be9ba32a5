//! `flyto-bench cluster`: real flytod nodes on one real PostgreSQL
//! (started here). With 1, 2 and 3 daemons: trivial-step throughput
//! (plans submitted round-robin, until every one has finished) and claim
//! latency (a step's start after its plan's submit), against a bare
//! `SKIP LOCKED` claim loop with as many claimers on the same server in
//! the same run; then the time from a node's SIGKILL to its step running
//! on another node. Prints, asserts nothing.

use crate::claims::{bare_run, pct};
use anyhow::{Context, bail};
use flyto_actors::store::postgres::{Shared, claims::LEASE, migrate};
use flyto_protocol::{PlanSpec, Request, Response, StepSpec};
use flyto_tests::TestEnv;
use flyto_tests::pg::TestPostgres;
use std::time::{Duration, Instant};

const PLANS: usize = 300;

fn config(pg: &TestPostgres, db: &str) -> String {
    format!(
        "[daemon]\nshutdown_grace = \"1s\"\n[plans]\nkill_grace = \"200ms\"\nmax_parallel_plans = 4\n[store]\nbackend = \"postgres\"\nurl = \"{}\"\n",
        pg.url_for(db)
    )
}

fn one_step(run: &str, idempotent: bool) -> PlanSpec {
    PlanSpec {
        steps: vec![StepSpec {
            id: "s".into(),
            run: Some(run.into()),
            workdir: Some("/".into()),
            idempotent,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn submit(client: &mut flyto_protocol::Client, plan: PlanSpec) -> anyhow::Result<String> {
    match client.call(&Request::SubmitPlan {
        plan,
        idempotency_key: None,
    })? {
        Response::PlanSubmitted { id, .. } => Ok(id),
        other => bail!("submit_plan answered {other:?}"),
    }
}

fn count(pg: &TestPostgres, db: &str, sql: &str) -> anyhow::Result<i64> {
    pg.sql(db, sql).parse().context("a count from psql")
}

/// Polls until `done` holds; an error after `limit`.
fn poll_until(
    what: &str,
    limit: Duration,
    mut done: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while !done()? {
        if Instant::now() > deadline {
            bail!("{what}: not within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// `nodes` daemons: plans per second and claim latencies.
fn daemons_run(pg: &TestPostgres, nodes: usize) -> anyhow::Result<(f64, Vec<Duration>)> {
    let db = format!("nodes{nodes}");
    pg.create_database(&db);
    let envs: Vec<TestEnv> = (0..nodes).map(|_| TestEnv::new(&config(pg, &db))).collect();
    let _daemons: Vec<_> = envs.iter().map(TestEnv::start).collect();
    let mut clients: Vec<_> = envs.iter().map(TestEnv::client).collect();
    let start = Instant::now();
    for i in 0..PLANS {
        submit(&mut clients[i % nodes], one_step("true", false))?;
    }
    poll_until("every plan finished", Duration::from_secs(300), || {
        Ok(count(
            pg,
            &db,
            "SELECT count(*) FROM flyto_plans WHERE state NOT IN ('succeeded', 'failed', 'cancelled')",
        )? == 0)
    })?;
    let elapsed = start.elapsed();
    // Claim latency: the step's start (the claim, by the database's
    // clock) after its plan's row was written.
    let mut lat: Vec<Duration> = pg
        .sql(
            &db,
            "SELECT (extract(epoch FROM s.started_at - p.created_at) * 1000000)::bigint
             FROM flyto_steps s JOIN flyto_plans p ON p.id = s.plan",
        )
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .map(Duration::from_micros)
        .collect();
    lat.sort_unstable();
    Ok((PLANS as f64 / elapsed.as_secs_f64(), lat))
}

/// From a node's SIGKILL to its running step running on another node.
fn failover(pg: &TestPostgres) -> anyhow::Result<Duration> {
    pg.create_database("failover");
    let (a, b) = (
        TestEnv::new(&config(pg, "failover")),
        TestEnv::new(&config(pg, "failover")),
    );
    let da = a.start();
    submit(&mut a.client(), one_step("sleep 600", true))?;
    poll_until("the step started", Duration::from_secs(60), || {
        Ok(count(
            pg,
            "failover",
            "SELECT count(*) FROM flyto_steps WHERE state = 'running'",
        )? > 0)
    })?;
    let _db = b.start();
    let killed = Instant::now();
    da.kill9();
    poll_until(
        "the step running again elsewhere",
        LEASE + Duration::from_secs(60),
        || {
            Ok(count(
                pg,
                "failover",
                "SELECT count(*) FROM flyto_steps WHERE state = 'running' AND attempts = 2",
            )? > 0)
        },
    )?;
    Ok(killed.elapsed())
}

pub fn run() -> anyhow::Result<()> {
    println!(
        "\n== cluster: {PLANS} one-step plans through 1, 2 and 3 flytod on one PostgreSQL, against a bare SKIP LOCKED loop; failover after a SIGKILL =="
    );
    let pg = TestPostgres::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    for nodes in [1usize, 2, 3] {
        let bare = runtime.block_on(async {
            let db = format!("bare{nodes}");
            pg.create_database(&db);
            let shared = Shared::connect(&pg.url_for(&db), "flyto-bench").await?;
            migrate(&shared).await?;
            bare_run(&shared, nodes).await
        })?;
        let bare_rate = bare.latencies.len() as f64 / bare.elapsed.as_secs_f64();
        let (rate, lat) = daemons_run(&pg, nodes)?;
        let mut bare_lat = bare.latencies;
        bare_lat.sort_unstable();
        println!(
            "{nodes} node(s): {rate:.0} plans/s, claim latency p50 {:.1} ms p99 {:.1} ms; bare loop {bare_rate:.0} claims/s, p50 {:.2} ms; throughput ratio {:.3}x",
            pct(&lat, 0.5).as_secs_f64() * 1e3,
            pct(&lat, 0.99).as_secs_f64() * 1e3,
            pct(&bare_lat, 0.5).as_secs_f64() * 1e3,
            rate / bare_rate.max(1e-9)
        );
    }
    let took = failover(&pg)?;
    let target = LEASE + Duration::from_secs(5) + Duration::from_secs(1);
    println!(
        "failover: a SIGKILLed node's step ran on another node after {:.1} s (target under lease + sweep + 1 s = {} s): {}",
        took.as_secs_f64(),
        target.as_secs(),
        if took < target { "ok" } else { "MISSED" }
    );
    println!("cluster done");
    Ok(())
}
