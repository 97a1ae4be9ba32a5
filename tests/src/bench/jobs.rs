//! `flyto-bench jobs`: 10,000 jobs in a real flytod. What the idle
//! scheduler costs per minute with none due, against a process that only
//! sleeps on a timer in the same run; flytod's CPU per fire and how late
//! fires are with 50 jobs firing every second; how long `job_list` takes.

use crate::{config, cpu_ns, machine, percentile, stat_cpu_ns, verdict};
use anyhow::{Context, bail};
use flyto_protocol::{JobSpec, PlanSpec, Request, Response, StepSpec};
use flyto_tests::TestEnv;
use std::time::{Duration, Instant};

const IDLE_JOBS: usize = 10_000;
const FIRING_JOBS: usize = 50;
const IDLE_SECS: u64 = 20;
const FIRING_SECS: u64 = 10;

fn plan() -> PlanSpec {
    PlanSpec {
        name: None,
        steps: vec![StepSpec {
            id: "s".into(),
            run: Some("true".into()),
            workdir: Some("/".into()),
            ..Default::default()
        }],
        env: Default::default(),
        sandbox: None,
    }
}

fn create(client: &mut flyto_protocol::Client, schedule: &str) -> anyhow::Result<String> {
    let spec = JobSpec {
        schedule: Some(schedule.into()),
        tz: Some("UTC".into()),
        plan: Some(plan()),
        ..JobSpec::default()
    };
    match client.call(&Request::JobCreate { spec })? {
        Response::Job { job, .. } => Ok(job.id),
        other => bail!("job_create answered {other:?}"),
    }
}

/// The sleeping baseline: a tokio timer that wakes every 30 s, as the
/// jobs actor does when nothing is due.
pub fn sleeper() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .context("tokio runtime")?;
    rt.block_on(async {
        loop {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
    })
}

pub fn run() -> anyhow::Result<()> {
    machine();
    println!(
        "\n== jobs: {IDLE_JOBS} jobs none due, then {FIRING_JOBS} more firing every second =="
    );
    let env = TestEnv::new(&format!("{}max_parallel_steps = 64\n", config(64)));
    let daemon = env.start();
    let pid = daemon.pid();
    let mut client = env.client();
    let t = Instant::now();
    for _ in 0..IDLE_JOBS {
        create(&mut client, "0 0 1 1 *")?;
    }
    let made = t.elapsed();
    println!(
        "created {IDLE_JOBS} jobs in {:.1}s ({:.0} µs each)",
        made.as_secs_f64(),
        made.as_micros() as f64 / IDLE_JOBS as f64
    );

    // Idle: none due. The store applies the burst of creates to sled in
    // the background first: let it settle.
    // The baseline starts now, so its start-up is not measured.
    let me = std::env::current_exe().context("the bench binary")?;
    let mut sleeper = std::process::Command::new(me)
        .arg("job-sleeper")
        .spawn()
        .context("spawn the sleeping baseline")?;
    let settle = stat_cpu_ns(pid);
    std::thread::sleep(Duration::from_secs(5));
    println!(
        "after the creates, flytod settles: {:.0} ms of CPU in 5 s",
        stat_cpu_ns(pid).saturating_sub(settle) as f64 / 1e6
    );
    // schedstat: nanoseconds, for the threads alive (none exits when idle).
    let (d0, s0) = (cpu_ns(pid), cpu_ns(sleeper.id() as i32));
    std::thread::sleep(Duration::from_secs(IDLE_SECS));
    let (d1, s1) = (cpu_ns(pid), cpu_ns(sleeper.id() as i32));
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let per_min = |ns: u64| ns as f64 / 1e6 * 60.0 / IDLE_SECS as f64;
    println!(
        "idle CPU per minute with {IDLE_JOBS} jobs none due: flytod {:.2} ms (the sleeping timer {:.3} ms; measured over {IDLE_SECS}s)",
        per_min(d1.saturating_sub(d0)),
        per_min(s1.saturating_sub(s0))
    );

    // job_list with them all.
    let mut list_ns = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        match client.call(&Request::JobList {})? {
            Response::Jobs { jobs, .. } if jobs.len() >= IDLE_JOBS => {}
            other => bail!("job_list answered {:?}", std::mem::discriminant(&other)),
        }
        list_ns.push(t.elapsed().as_nanos() as u64);
    }
    list_ns.sort_unstable();
    println!(
        "job_list of {IDLE_JOBS} jobs: p50 {:.1} ms, max {:.1} ms",
        percentile(&list_ns, 0.5) as f64 / 1e6,
        *list_ns.last().unwrap_or(&0) as f64 / 1e6
    );

    // Firing.
    let mut ids = Vec::new();
    for _ in 0..FIRING_JOBS {
        ids.push(create(&mut client, "every 1s")?);
    }
    let c0 = stat_cpu_ns(pid);
    std::thread::sleep(Duration::from_secs(FIRING_SECS));
    let c1 = stat_cpu_ns(pid);
    let mut late = Vec::new();
    let mut fired = 0u64;
    for id in &ids {
        match client.call(&Request::JobShow { id: id.clone() })? {
            Response::JobHistory { fires, .. } => {
                for f in fires {
                    let instant = chrono::DateTime::parse_from_rfc3339(&f.instant)
                        .map(|t| t.timestamp_millis() as u64)
                        .unwrap_or(f.at_ms);
                    late.push(f.at_ms.saturating_sub(instant));
                    fired += 1;
                }
            }
            other => bail!("job_show answered {:?}", std::mem::discriminant(&other)),
        }
    }
    late.sort_unstable();
    let p99 = percentile(&late, 0.99);
    println!(
        "fires: {fired} in about {FIRING_SECS}s; lateness p50 {} ms, p99 {p99} ms, max {} ms (target p99 under 1 s): {}",
        percentile(&late, 0.5),
        late.last().copied().unwrap_or(0),
        verdict(p99 < 1000)
    );
    println!(
        "flytod CPU per fire (recording it, submitting its plan and running its one `true` step): {:.2} ms",
        c1.saturating_sub(c0) as f64 / 1e6 / fired.max(1) as f64
    );
    drop(client);
    daemon.terminate();
    Ok(())
}
