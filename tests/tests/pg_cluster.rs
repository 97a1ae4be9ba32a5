//! Nodes sharing one PostgreSQL, each a plan runner in this process with
//! its own pool, running real process groups: every step of every plan
//! runs once, after its dependencies; a cancel from any node stops the
//! step where it runs; a node that dies mid-step leaves its step to the
//! sweep, which fails a step that may not run twice with `lease lost`; a
//! node cut off from the database kills its own steps (self-fencing).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_actors::plans::cluster::{ProcessLaunch, Runner, RunnerConfig};
use flyto_actors::plans::model::PlanRecord;
use flyto_actors::plans::store::pg_rows::{self as shared, Submitted};
use flyto_actors::plans::validate::{Limits, Workdirs, validate_in};
use flyto_actors::store::postgres::Shared;
use flyto_actors::store::postgres::claims::KeeperTimes;
use flyto_actors::store::postgres::listen::Listener;
use flyto_actors::store::postgres::plans::{self, Cancel, PLANS_CHANNEL, WORK_CHANNEL};
use flyto_protocol::{PlanSpec, PlanState, StepSpec, StepState};
use flyto_tests::pg::{TestPostgres, expire_leases, fresh, runtime};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn record(steps: &[(&str, &[&str], String)], workdir: &Path) -> PlanRecord {
    let spec = PlanSpec {
        steps: steps
            .iter()
            .map(|(id, deps, run)| StepSpec {
                id: id.to_string(),
                run: Some(run.clone()),
                deps: deps.iter().map(|d| d.to_string()).collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let limits = Limits {
        max_steps: 100,
        max_text_bytes: 1 << 20,
        default_timeout_secs: 60,
        default_max_attempts: 1,
        default_workdir: workdir.display().to_string(),
    };
    let steps = validate_in(&spec, &limits, &mut Workdirs::default()).unwrap();
    PlanRecord {
        id: 0,
        name: None,
        state: PlanState::Pending,
        reason: None,
        created_ms: 0,
        started_ms: None,
        finished_ms: None,
        revision: 1,
        idempotency_key: None,
        steps,
        chain: String::new(),
        depth: 0,
        restarted_from: None,
        sandboxes: Vec::new(),
    }
}

async fn node(pg: &TestPostgres, db: &str, name: &str, heartbeat: Duration) -> Runner {
    let shared = Shared::connect(&pg.url_for(db), name).await.unwrap();
    let listener = Arc::new(Listener::start(
        &shared,
        &[WORK_CHANNEL, PLANS_CHANNEL],
        Duration::from_millis(200),
    ));
    Runner::start(
        shared,
        RunnerConfig {
            node: name.into(),
            slots: 4,
            child_slots: 0,
            plan_ttl: None,
            log_dir: None,
            sweep_every: Duration::from_millis(500),
            keeper: KeeperTimes {
                every: heartbeat,
                fence_after: heartbeat * 3,
            },
        },
        Arc::new(ProcessLaunch {
            kill_grace: Duration::from_millis(200),
            log_dir: None,
            log_max: 1 << 20,
            tail_max: 4096,
            sockets: Arc::new(flyto_actors::plans::NoPlanSockets),
            fallback_socket: String::new(),
            socket_users: Default::default(),
        }),
        listener,
    )
}

async fn until(what: &str, deadline: Duration, mut f: impl AsyncFnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !f().await {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn submit(shared: &Shared, rec: PlanRecord) -> i64 {
    match shared::submit(shared, rec).await.unwrap() {
        Submitted::New(id) => id as i64,
        other => panic!("not a new plan: {other:?}"),
    }
}

#[test]
fn three_nodes_run_every_step_once_after_its_dependencies() {
    let pg = TestPostgres::start();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("runs.log");
    runtime().block_on(async {
        let shared = fresh(&pg, "three").await;
        let nodes = [
            node(&pg, "three", "n1", Duration::from_secs(1)).await,
            node(&pg, "three", "n2", Duration::from_secs(1)).await,
            node(&pg, "three", "n3", Duration::from_secs(1)).await,
        ];
        // Each attempt appends one line (O_APPEND) and takes a moment.
        let line = |_: &str| {
            format!(
                "echo \"$FLYTO_PLAN_ID $FLYTO_STEP $FLYTO_ATTEMPT $(date +%s%N)\" >> {}; sleep 0.05",
                log.display()
            )
        };
        let mut ids = Vec::new();
        for _ in 0..30 {
            let rec = record(
                &[("a", &[], line("a")), ("b", &["a"], line("b")), ("c", &["a"], line("c"))],
                tmp.path(),
            );
            ids.push(submit(&shared, rec).await);
        }
        until("every plan to succeed", Duration::from_secs(120), async || {
            plans::count_plans(&shared, Some("succeeded")).await.unwrap() == 30
        })
        .await;
        let text = std::fs::read_to_string(&log).unwrap();
        let mut runs: HashMap<(String, String), Vec<u128>> = HashMap::new();
        for l in text.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4, "{l}");
            // FLYTO_STEP is `<plan>/<step>`.
            let step = f[1].rsplit('/').next().unwrap();
            runs.entry((f[0].into(), step.into()))
                .or_default()
                .push(f[3].parse().unwrap());
        }
        assert_eq!(runs.len(), 90, "every step ran");
        assert!(
            runs.values().all(|v| v.len() == 1),
            "a step ran twice: {runs:?}"
        );
        for id in &ids {
            let p = format!("p{id}");
            let at = |s: &str| runs[&(p.clone(), s.to_string())][0];
            assert!(at("a") < at("b") && at("a") < at("c"), "{p}: b or c before a");
            let row = plans::get_plan(&shared, *id).await.unwrap().unwrap();
            let rec = shared::record_of(&row).unwrap();
            assert_eq!(rec.state, PlanState::Succeeded);
            assert!(rec.steps.iter().all(|s| s.state == StepState::Succeeded && s.attempts == 1));
        }
        let c = shared.client().await.unwrap();
        let busy: i64 = c
            .query_one("SELECT count(DISTINCT node) FROM flyto_attempts", &[])
            .await
            .unwrap()
            .get(0);
        assert!(busy >= 2, "the work was not shared: {busy} node(s) ran it");
        drop(nodes);
    });
}

#[test]
fn a_cancel_from_another_node_stops_the_step_where_it_runs() {
    let pg = TestPostgres::start();
    let tmp = tempfile::tempdir().unwrap();
    let done = tmp.path().join("done");
    runtime().block_on(async {
        let shared = fresh(&pg, "cancel").await;
        // Heartbeats too rare to matter: the cancel's notification (or
        // the poll) must stop it.
        let n1 = node(&pg, "cancel", "n1", Duration::from_secs(600)).await;
        let run = format!("sleep 30; touch {}", done.display());
        let id = submit(&shared, record(&[("a", &[], run)], tmp.path())).await;
        until("the step to start", Duration::from_secs(30), async || {
            n1.running() == 1
        })
        .await;
        let cancelled = plans::cancel_plan(&shared, id, "cancelled by the user")
            .await
            .unwrap();
        assert!(matches!(cancelled, Cancel::Cancelled { ref revoked } if revoked.len() == 1));
        until("the step to stop", Duration::from_secs(30), async || {
            n1.running() == 0
        })
        .await;
        let rec = shared::record_of(&plans::get_plan(&shared, id).await.unwrap().unwrap()).unwrap();
        assert_eq!(rec.state, PlanState::Cancelled);
        assert_eq!(rec.steps[0].state, StepState::Cancelled);
        assert!(!done.exists(), "the cancelled command ran on");
    });
}

#[test]
fn a_step_of_a_node_that_died_fails_with_lease_lost_and_runs_nowhere_else() {
    let pg = TestPostgres::start();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("starts");
    runtime().block_on(async {
        let shared = fresh(&pg, "died").await;
        let n1 = node(&pg, "died", "n1", Duration::from_secs(1)).await;
        let run = format!("echo started >> {}; sleep 30", log.display());
        let id = submit(
            &shared,
            record(&[("a", &[], run), ("b", &["a"], "true".into())], tmp.path()),
        )
        .await;
        until("the step to start", Duration::from_secs(30), async || {
            n1.running() == 1
        })
        .await;
        until("its first line", Duration::from_secs(30), async || {
            log.exists()
        })
        .await;
        // n1 dies (its process group goes with it); its lease runs out.
        drop(n1);
        let n2 = node(&pg, "died", "n2", Duration::from_secs(1)).await;
        expire_leases(&shared).await;
        until(
            "the sweep to end the plan",
            Duration::from_secs(30),
            async || plans::get_plan(&shared, id).await.unwrap().unwrap().state == "failed",
        )
        .await;
        let rec = shared::record_of(&plans::get_plan(&shared, id).await.unwrap().unwrap()).unwrap();
        assert_eq!(rec.steps[0].error.as_deref(), Some("lease lost"));
        assert_eq!(rec.steps[1].state, StepState::Skipped);
        // A `run` step may not be idempotent: it did not run again.
        assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 1);
        assert_eq!(n2.running(), 0);
    });
}

#[test]
fn a_node_cut_off_from_the_database_stops_its_own_steps_before_its_leases_expire() {
    let pg = TestPostgres::start();
    let tmp = tempfile::tempdir().unwrap();
    let done = tmp.path().join("done");
    runtime().block_on(async {
        let shared = fresh(&pg, "fence").await;
        // Heartbeats every 200 ms; fenced after 600 ms without one.
        let n1 = node(&pg, "fence", "n1", Duration::from_millis(200)).await;
        let run = format!("sleep 20; touch {}", done.display());
        submit(&shared, record(&[("a", &[], run)], tmp.path())).await;
        until("the step to start", Duration::from_secs(30), async || {
            n1.running() == 1
        })
        .await;
        // The database goes away: no heartbeat gets through.
        pg.stop();
        until(
            "the node to fence itself",
            Duration::from_secs(30),
            async || n1.running() == 0,
        )
        .await;
        // Its process group is killed: the command never finishes.
        let pattern = format!("touch {}", done.display());
        until(
            "the step's process to be gone",
            Duration::from_secs(30),
            async || {
                let out = std::process::Command::new("pgrep")
                    .args(["-f", &pattern])
                    .output()
                    .unwrap();
                out.stdout.is_empty()
            },
        )
        .await;
        assert!(!done.exists());
    });
}

#[test]
fn an_idempotent_step_of_a_node_that_died_runs_again_on_another() {
    let pg = TestPostgres::start();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("starts");
    runtime().block_on(async {
        let shared = fresh(&pg, "again").await;
        let n1 = node(&pg, "again", "n1", Duration::from_secs(1)).await;
        // The first attempt hangs; the second finds the first's line and ends.
        let run = format!(
            "echo \"$FLYTO_ATTEMPT\" >> {log}; [ $(wc -l < {log}) -ge 2 ] || sleep 30",
            log = log.display()
        );
        let mut rec = record(&[("a", &[], run)], tmp.path());
        rec.steps[0].idempotent = true;
        rec.steps[0].max_attempts = 2;
        let id = submit(&shared, rec).await;
        until("the first attempt", Duration::from_secs(30), async || {
            log.exists()
        })
        .await;
        drop(n1);
        let n2 = node(&pg, "again", "n2", Duration::from_secs(1)).await;
        expire_leases(&shared).await;
        until(
            "the plan to succeed on n2",
            Duration::from_secs(30),
            async || plans::get_plan(&shared, id).await.unwrap().unwrap().state == "succeeded",
        )
        .await;
        let rec = shared::record_of(&plans::get_plan(&shared, id).await.unwrap().unwrap()).unwrap();
        assert_eq!(rec.steps[0].attempts, 2);
        // Two attempts under two tokens: the rescued one and its successor.
        let tokens: Vec<String> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(tokens.len(), 2);
        assert_ne!(tokens[0], tokens[1]);
        let c = shared.client().await.unwrap();
        let outcomes: Vec<(String, String)> = c
            .query(
                "SELECT node, outcome FROM flyto_attempts ORDER BY token",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(
            outcomes,
            [
                ("n1".to_string(), "lease lost".to_string()),
                ("n2".to_string(), "succeeded".to_string())
            ]
        );
        drop(n2);
    });
}
