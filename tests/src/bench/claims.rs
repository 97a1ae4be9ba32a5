//! `flyto-bench claims`: the shared store's step claim on a real
//! PostgreSQL (started here): claims per second and claim latency with 1,
//! 2 and 3 claimers, each claim followed by its fenced completion, against
//! a bare `SKIP LOCKED` claim loop (one UPDATE … RETURNING to claim, one to
//! finish; no token, no lease, no attempt row) on the same server in the
//! same run: the primitive the daemons' runners use (`cluster` measures
//! the daemons).

use flyto_actors::store::postgres::claims::{self, StepRow};
use flyto_actors::store::postgres::{Shared, migrate};
use flyto_tests::pg::TestPostgres;
use std::time::{Duration, Instant};

const STEPS: i64 = 3_000;

pub(crate) struct Run {
    pub elapsed: Duration,
    pub latencies: Vec<Duration>,
}

pub(crate) fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(what: &str, r: &mut Run) -> f64 {
    r.latencies.sort_unstable();
    let rate = r.latencies.len() as f64 / r.elapsed.as_secs_f64();
    println!(
        "{what}: {} claims in {:.2}s, {rate:.0} claims/s; claim latency p50 {:.2}ms p99 {:.2}ms",
        r.latencies.len(),
        r.elapsed.as_secs_f64(),
        pct(&r.latencies, 0.5).as_secs_f64() * 1e3,
        pct(&r.latencies, 0.99).as_secs_f64() * 1e3,
    );
    rate
}

async fn flyto_run(shared: &Shared, claimers: usize) -> anyhow::Result<Run> {
    let steps: Vec<StepRow> = (0..STEPS)
        .map(|i| StepRow {
            plan: i,
            step: "s".into(),
            max_attempts: 1,
            retry_on_lease_loss: false,
        })
        .collect();
    claims::add_ready_steps(shared, &steps).await?;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for n in 0..claimers {
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let node = format!("node-{n}");
            let mut lat = Vec::new();
            loop {
                let t = Instant::now();
                let got = claims::claim(&shared, &node, 1).await?;
                lat.push(t.elapsed());
                let Some(c) = got.first() else { break };
                claims::complete(&shared, c.token, &claims::StepEnd::succeeded()).await?;
            }
            lat.pop();
            Ok::<_, anyhow::Error>(lat)
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await??);
    }
    Ok(Run {
        elapsed: start.elapsed(),
        latencies,
    })
}

pub(crate) async fn bare_run(shared: &Shared, claimers: usize) -> anyhow::Result<Run> {
    let c = shared.client().await?;
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS bare;
         CREATE TABLE bare (id bigint PRIMARY KEY, state text NOT NULL);
         INSERT INTO bare SELECT g, 'ready' FROM generate_series(0, {}) g;",
        STEPS - 1
    ))
    .await?;
    drop(c);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..claimers {
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let c = shared.client().await?;
            let mut lat = Vec::new();
            loop {
                let t = Instant::now();
                let row = c
                    .query_opt(
                        "UPDATE bare SET state = 'running' WHERE id = (
                             SELECT id FROM bare WHERE state = 'ready' ORDER BY id LIMIT 1
                             FOR UPDATE SKIP LOCKED) RETURNING id",
                        &[],
                    )
                    .await?;
                lat.push(t.elapsed());
                let Some(row) = row else { break };
                let id: i64 = row.get(0);
                c.execute("UPDATE bare SET state = 'done' WHERE id = $1", &[&id])
                    .await?;
            }
            lat.pop();
            Ok::<_, anyhow::Error>(lat)
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await??);
    }
    Ok(Run {
        elapsed: start.elapsed(),
        latencies,
    })
}

pub fn run() -> anyhow::Result<()> {
    println!(
        "\n== claims: {STEPS} one-step claims on PostgreSQL with 1, 2 and 3 claimers, against a bare SKIP LOCKED loop ==\n(the shared store's primitive; `cluster` measures the daemons)"
    );
    let pg = TestPostgres::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        for claimers in [1usize, 2, 3] {
            let db = format!("bench{claimers}");
            pg.create_database(&db);
            let shared = Shared::connect(&pg.url_for(&db), "flyto-bench").await?;
            migrate(&shared).await?;
            let mut bare = bare_run(&shared, claimers).await?;
            let mut ours = flyto_run(&shared, claimers).await?;
            let b = report(&format!("{claimers} claimer(s), bare loop"), &mut bare);
            let o = report(
                &format!("{claimers} claimer(s), claim + fenced completion"),
                &mut ours,
            );
            println!(
                "{claimers} claimer(s): ratio {:.2}x the bare loop's throughput; claim p50 {:.2}x",
                o / b.max(1e-9),
                pct(&ours.latencies, 0.5).as_secs_f64()
                    / pct(&bare.latencies, 0.5).as_secs_f64().max(1e-9)
            );
        }
        Ok::<(), anyhow::Error>(())
    })?;
    println!("claims done");
    Ok(())
}
