//! The shared store's foundations against a real PostgreSQL (started by
//! the tests): migrations applied once however many nodes start at once,
//! a newer schema refused, connection errors that name the host, port and
//! user and never the password, 32 concurrent claimers over 10,000 steps
//! giving each step exactly one attempt, stale fencing tokens changing
//! nothing, expired leases swept by one node, and three nodes racing one
//! cron instant with one winner.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_actors::channels::shared::SharedChannels;
use flyto_actors::channels::store::{ChannelStore, InboundRecord, TurnState, Write};
use flyto_actors::jobs::model::{
    FireOutcome, FireRecord, JobRecord, JobStore, Mode, PendingNotify, Template,
};
use flyto_actors::jobs::shared::{JOBS_CHANNEL, SharedJobStore};
use flyto_actors::store::postgres::claims::{self, StepRow};
use flyto_actors::store::postgres::listen::Listener;
use flyto_actors::store::postgres::{LATEST, PgError, Shared, migrate};
use flyto_tests::pg::{TestPostgres, expire_leases, fresh, runtime};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

async fn count(shared: &Shared, sql: &str) -> i64 {
    shared
        .client()
        .await
        .unwrap()
        .query_one(sql, &[])
        .await
        .unwrap()
        .get(0)
}

#[test]
fn nodes_migrating_at_once_apply_each_migration_once() {
    let pg = TestPostgres::start();
    pg.create_database("m");
    let url = pg.url_for("m");
    runtime().block_on(async {
        let mut tasks = Vec::new();
        for i in 0..4 {
            let url = url.clone();
            tasks.push(tokio::spawn(async move {
                let shared = Shared::connect(&url, &format!("node-{i}")).await.unwrap();
                migrate(&shared).await.unwrap()
            }));
        }
        let mut applied = Vec::new();
        for t in tasks {
            let done = t.await.unwrap();
            assert_eq!(done.version, LATEST);
            applied.extend(done.applied);
        }
        let expected: Vec<i32> = (1..=LATEST).collect();
        assert_eq!(
            applied, expected,
            "a migration was applied twice or not at all"
        );
        let shared = Shared::connect(&url, "check").await.unwrap();
        assert_eq!(
            count(&shared, "SELECT count(*) FROM flyto_schema").await,
            LATEST as i64
        );
    });
}

#[test]
fn a_schema_newer_than_the_binary_is_refused_naming_both_versions() {
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "n").await;
        shared
            .client()
            .await
            .unwrap()
            .execute("INSERT INTO flyto_schema (version) VALUES (999)", &[])
            .await
            .unwrap();
        let e = migrate(&shared).await.unwrap_err();
        assert!(matches!(e, PgError::SchemaNewer { found: 999, .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("999") && text.contains(&LATEST.to_string()),
            "{text}"
        );
        assert!(text.contains("upgrade flytod"), "{text}");
    });
}

/// The error text of connecting to `url`, which must fail.
async fn refusal(url: &str) -> String {
    Shared::connect(url, "t").await.err().unwrap().to_string()
}

#[test]
fn connection_errors_name_host_port_and_user_and_never_the_password() {
    let pg = TestPostgres::start();
    pg.add_password_user("alice", "s3cret-pw");
    let port = pg.port();
    runtime().block_on(async {
        // Nothing listens there.
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dead = free.local_addr().unwrap().port();
        drop(free);
        let e = refusal(&format!(
            "postgres://alice:s3cret-pw@127.0.0.1:{dead}/postgres"
        ))
        .await;
        assert!(
            e.contains(&format!("127.0.0.1:{dead}")) && e.contains("alice"),
            "{e}"
        );
        assert!(e.to_lowercase().contains("refused"), "{e}");
        assert!(!e.contains("s3cret-pw"), "{e}");
        // The wrong password.
        let e = refusal(&format!(
            "postgres://alice:wrong-pw@127.0.0.1:{port}/postgres"
        ))
        .await;
        assert!(
            e.contains("password authentication failed") && e.contains("alice"),
            "{e}"
        );
        assert!(!e.contains("wrong-pw"), "{e}");
        // The right one works.
        Shared::connect(
            &format!("postgres://alice:s3cret-pw@127.0.0.1:{port}/postgres"),
            "t",
        )
        .await
        .unwrap();
        // Not a URL at all.
        let e = refusal("postgres://u:pw@127.0.0.1:notaport/db").await;
        assert!(e.contains("not valid") && !e.contains(":pw@"), "{e}");
    });
}

#[test]
fn thirty_two_claimers_over_ten_thousand_steps_give_each_step_one_attempt() {
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "c").await;
        let steps: Vec<StepRow> = (0..10_000)
            .map(|i| StepRow {
                plan: i / 4,
                step: format!("s{}", i % 4),
                max_attempts: 1,
                retry_on_lease_loss: false,
            })
            .collect();
        claims::add_ready_steps(&shared, &steps).await.unwrap();
        let mut tasks = Vec::new();
        for n in 0..32 {
            let shared = shared.clone();
            tasks.push(tokio::spawn(async move {
                let node = format!("node-{n}");
                let mut done = Vec::new();
                loop {
                    let got = claims::claim(&shared, &node, 16).await.unwrap();
                    if got.is_empty() {
                        break;
                    }
                    for c in got {
                        assert!(
                            claims::complete(&shared, c.token, &claims::StepEnd::succeeded())
                                .await
                                .unwrap()
                        );
                        done.push((c.plan, c.step));
                    }
                }
                done
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        let unique: HashSet<_> = all.iter().cloned().collect();
        assert_eq!(all.len(), 10_000, "a step ran twice or not at all");
        assert_eq!(unique.len(), 10_000);
        assert_eq!(
            count(&shared, "SELECT count(*) FROM flyto_attempts").await,
            10_000
        );
        assert_eq!(
            count(
                &shared,
                "SELECT count(*) FROM flyto_steps WHERE state = 'succeeded'"
            )
            .await,
            10_000
        );
    });
}

#[test]
fn a_lost_lease_is_swept_once_and_its_stale_token_changes_nothing() {
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "l").await;
        claims::add_ready_steps(
            &shared,
            &[StepRow {
                plan: 1,
                step: "a".into(),
                max_attempts: 2,
                retry_on_lease_loss: true,
            }],
        )
        .await
        .unwrap();
        let first = claims::claim(&shared, "node-1", 8).await.unwrap();
        assert_eq!(first.len(), 1);
        let old = first[0].token;
        // node-1 stops heartbeating; its lease runs out (by the database's clock).
        expire_leases(&shared).await;
        // Two nodes sweep at once: one wins, the step is rescued once.
        let (a, b) = tokio::join!(claims::sweep(&shared), claims::sweep(&shared));
        let rescued: Vec<_> = [a.unwrap(), b.unwrap()]
            .into_iter()
            .flatten()
            .flatten()
            .collect();
        assert_eq!(rescued, [(1, "a".to_string(), old)]);
        let second = claims::claim(&shared, "node-2", 8).await.unwrap();
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].attempt, 2);
        let new = second[0].token;
        assert!(new > old);
        // node-1 wakes up: its heartbeat, output and completion are refused.
        assert!(
            claims::heartbeat(&shared, "node-1", &[old])
                .await
                .unwrap()
                .is_empty()
        );
        assert!(!claims::write_output(&shared, old, "stale").await.unwrap());
        assert!(
            !claims::complete(&shared, old, &claims::StepEnd::succeeded())
                .await
                .unwrap()
        );
        // node-2's are not.
        assert_eq!(
            claims::heartbeat(&shared, "node-2", &[new]).await.unwrap(),
            [new]
        );
        assert!(claims::write_output(&shared, new, "fresh").await.unwrap());
        assert!(
            claims::complete(&shared, new, &claims::StepEnd::succeeded())
                .await
                .unwrap()
        );
        let row = shared
            .client()
            .await
            .unwrap()
            .query_one("SELECT state, output FROM flyto_steps WHERE plan = 1", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), "succeeded");
        assert_eq!(row.get::<_, String>(1), "fresh");
        let outcomes: Vec<String> = shared
            .client()
            .await
            .unwrap()
            .query("SELECT outcome FROM flyto_attempts ORDER BY token", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(outcomes, ["lease lost", "succeeded"]);
    });
}

#[test]
fn a_step_out_of_attempts_fails_with_lease_lost() {
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "f").await;
        claims::add_ready_steps(
            &shared,
            &[StepRow {
                plan: 1,
                step: "a".into(),
                max_attempts: 3,
                retry_on_lease_loss: false,
            }],
        )
        .await
        .unwrap();
        claims::claim(&shared, "node-1", 1).await.unwrap();
        expire_leases(&shared).await;
        claims::sweep(&shared).await.unwrap();
        let row = shared
            .client()
            .await
            .unwrap()
            .query_one("SELECT state, error FROM flyto_steps", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), "failed");
        assert_eq!(row.get::<_, String>(1), "lease lost");
        assert!(
            claims::claim(&shared, "node-2", 1)
                .await
                .unwrap()
                .is_empty()
        );
    });
}

fn job(id: u64) -> JobRecord {
    JobRecord {
        id,
        name: Some(format!("job-{id}")),
        schedule: "every 1m".into(),
        tz: "UTC".into(),
        template: Template::Prompt("hello".into()),
        mode: Mode::Isolated,
        workdir: None,
        timeout_secs: None,
        notify: None,
        enabled: true,
        expires_ms: None,
        max_consecutive_failures: 5,
        jitter_secs: 0,
        created_ms: 1_800_000_000_000,
        updated_ms: 1_800_000_000_000,
        handled_ms: None,
        consecutive_failures: 0,
        stopped: None,
    }
}

fn fire(job: u64, instant_ms: u64) -> FireRecord {
    FireRecord {
        job,
        instant_ms,
        at_ms: instant_ms,
        manual: false,
        outcome: FireOutcome::Firing,
        plan: None,
        attempt: 0,
    }
}

/// Three nodes' job stores on one database.
fn job_stores(shared: &Shared) -> Vec<SharedJobStore> {
    let listener = Arc::new(Listener::start(
        shared,
        &[JOBS_CHANNEL],
        std::time::Duration::from_secs(2),
    ));
    (0..3)
        .map(|n| SharedJobStore {
            shared: shared.clone(),
            node: format!("node-{n}"),
            listener: listener.clone(),
        })
        .collect()
}

#[test]
fn three_nodes_racing_one_cron_instant_record_one_fire() {
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "j").await;
        let stores = job_stores(&shared);
        stores[0].put(&job(7)).await.unwrap();
        for instant in 0..20_u64 {
            let at = 1_800_000_000_000 + instant * 60_000;
            let mut tasks = Vec::new();
            for store in &stores {
                let store = store.clone();
                tasks.push(tokio::spawn(async move {
                    let mut rec = job(7);
                    rec.handled_ms = Some(at);
                    store.claim_fire(&fire(7, at), &rec).await.unwrap()
                }));
            }
            let mut winners = 0;
            for t in tasks {
                winners += usize::from(t.await.unwrap());
            }
            assert_eq!(winners, 1, "instant {instant}");
        }
        assert_eq!(
            count(&shared, "SELECT count(*) FROM flyto_job_fires").await,
            20
        );
        // The job's handled instant is the last one, whoever fired it.
        let rec = stores[2].get(7).await.unwrap().unwrap();
        assert_eq!(rec.handled_ms, Some(1_800_000_000_000 + 19 * 60_000));
        // A fire of a job deleted meanwhile is not recorded.
        stores[1].delete(7).await.unwrap();
        assert!(!stores[0].claim_fire(&fire(7, 1), &job(7)).await.unwrap());
    });
}

#[test]
fn a_plans_end_is_counted_by_one_node_and_an_edit_survives_a_fire() {
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "count").await;
        let stores = job_stores(&shared);
        let mut rec = job(3);
        rec.notify = Some("telegram".into());
        stores[0].put(&rec).await.unwrap();
        let owed = PendingNotify {
            key: "notify/job j3 at 1".into(),
            target: "telegram".into(),
            text: "done".into(),
        };
        let mut tasks = Vec::new();
        for store in &stores {
            let (store, owed) = (store.clone(), owed.clone());
            tasks.push(tokio::spawn(async move {
                let mut counted = job(3);
                counted.consecutive_failures = 1;
                store
                    .put_accounted(&counted, "p9", Some(&owed))
                    .await
                    .unwrap()
            }));
        }
        let mut winners = 0;
        for t in tasks {
            winners += usize::from(t.await.unwrap());
        }
        assert_eq!(winners, 1);
        assert_eq!(
            stores[1]
                .get(3)
                .await
                .unwrap()
                .unwrap()
                .consecutive_failures,
            1
        );
        // Owed once. While its node heartbeats, nobody takes it over; once
        // it stops, one live node does, once.
        assert_eq!(
            count(&shared, "SELECT count(*) FROM flyto_job_notifies").await,
            1
        );
        for store in &stores {
            claims::register_node(&shared, &store.node, "here", 1)
                .await
                .unwrap();
        }
        for store in &stores {
            assert!(store.pending_notifies().await.unwrap().is_empty());
        }
        shared
            .client()
            .await
            .unwrap()
            .execute(
                "UPDATE flyto_nodes SET heartbeat_at = now() - interval '1 hour'
                 WHERE id = (SELECT owner FROM flyto_job_notifies)",
                &[],
            )
            .await
            .unwrap();
        let mut taken = 0;
        for store in &stores {
            taken += store.pending_notifies().await.unwrap().len();
        }
        assert_eq!(taken, 1);

        // An edit on one node, then a fire on another that holds the job
        // as it was: the edit stays, and so does the fire's instant.
        let mut edited = job(3);
        edited.name = Some("renamed".into());
        edited.schedule = "every 5m".into();
        stores[0].put(&edited).await.unwrap();
        let mut stale = job(3);
        stale.handled_ms = Some(1_800_000_060_000);
        assert!(
            stores[2]
                .claim_fire(&fire(3, 1_800_000_060_000), &stale)
                .await
                .unwrap()
        );
        let now = stores[1].get(3).await.unwrap().unwrap();
        assert_eq!(now.name.as_deref(), Some("renamed"));
        assert_eq!(now.schedule, "every 5m");
        assert_eq!(now.handled_ms, Some(1_800_000_060_000));
        // A node whose copy says the next failure stops the job counts one
        // on the row as it is (one failure so far): the second, no stop.
        let mut stale = now.clone();
        stale.consecutive_failures = 5;
        stale.enabled = false;
        stale.stopped = Some("5 runs failed in a row".into());
        assert!(stores[0].put_accounted(&stale, "p10", None).await.unwrap());
        let row = stores[1].get(3).await.unwrap().unwrap();
        assert_eq!(row.consecutive_failures, 2);
        assert!(row.enabled && row.stopped.is_none(), "{row:?}");
        // A name another job has is a conflict, not a second job.
        let mut twin = job(4);
        twin.name = Some("renamed".into());
        let err = stores[1].put(&twin).await.unwrap_err();
        assert_eq!(err.code, flyto_protocol::ErrorCode::Conflict, "{err}");
    });
}

#[test]
fn flytod_migrate_applies_the_schema_once_and_says_so() {
    let pg = TestPostgres::start();
    pg.create_database("cli");
    let url = pg.url_for("cli");
    let run = |url: &str| {
        let out = std::process::Command::new(flyto_tests::bin("flytod"))
            .args(["migrate", "--database-url", url])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stdout, stderr) = run(&url);
    assert!(ok, "{stderr}");
    let all: Vec<i32> = flyto_actors::store::postgres::MIGRATIONS
        .iter()
        .map(|(v, _)| *v)
        .collect();
    assert!(
        stdout.contains(&format!("applied migration(s) {all:?}")),
        "{stdout}"
    );
    let (ok, stdout, _) = run(&url);
    assert!(ok);
    assert!(stdout.contains("nothing to apply"), "{stdout}");
    // From the environment too, and a clear error for a dead server.
    let out = std::process::Command::new(flyto_tests::bin("flytod"))
        .arg("migrate")
        .env(
            "FLYTO_DATABASE_URL",
            "postgres://bob:hunter22@127.0.0.1:1/postgres",
        )
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("127.0.0.1:1") && stderr.contains("bob"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter22"), "{stderr}");
}

/// Until the listener wakes, for at most 20 s.
async fn woke(l: &mut flyto_actors::store::postgres::listen::Wake) -> bool {
    tokio::time::timeout(std::time::Duration::from_secs(20), l.woken())
        .await
        .is_ok()
}

#[test]
fn a_listener_wakes_on_notify_and_after_its_backend_is_killed_still_wakes() {
    use flyto_actors::store::postgres::listen::{Listener, notify};
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "w").await;
        // A long fallback poll: the wake-ups below come from NOTIFY and
        // from reconnecting, not from it.
        let l = Listener::start(
            &shared,
            &["flyto_work"],
            std::time::Duration::from_secs(3600),
        );
        let mut w = l.subscribe("flyto_work");
        assert!(woke(&mut w).await, "no wake-up at connect");
        notify(&shared, "flyto_work", "p1").await.unwrap();
        assert!(woke(&mut w).await, "a NOTIFY did not wake the listener");
        // Its database session is killed: it connects again, LISTENs again,
        // and wakes (what was notified meanwhile is lost, so it looks).
        let killed = pg.terminate_backends("flyto-listen%");
        assert_eq!(killed, 1);
        assert!(woke(&mut w).await, "no wake-up after the reconnect");
        assert_eq!(l.reconnects(), 1);
        notify(&shared, "flyto_work", "p2").await.unwrap();
        assert!(
            woke(&mut w).await,
            "a NOTIFY after the reconnect did not wake it"
        );
    });
}

#[test]
fn a_plans_watcher_is_woken_by_its_plans_notifications_not_by_others() {
    use flyto_actors::store::postgres::listen::{Listener, notify};
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "k").await;
        let l = Listener::start(
            &shared,
            &["flyto_plans"],
            std::time::Duration::from_secs(3600),
        );
        let mut all = l.subscribe("flyto_plans");
        let mut five = l.subscribe_key("flyto_plans", "5");
        // Once connected, the wake-ups of connecting are behind us, and
        // (with no reconnect and an hour's poll) only notifications wake.
        // The connection is counted before its wake-up, which reaches the
        // keyed waiters before the channel's: a wake of `all` seen with
        // the count set means `five` has had its wake-up too.
        loop {
            assert!(woke(&mut all).await, "the listener never connected");
            if l.connects() > 0 {
                break;
            }
        }
        while all.pending() {
            all.woken().await;
        }
        while five.pending() {
            five.woken().await;
        }
        // Another plan's change: the channel's waiter hears it, plan 5's
        // does not (one connection delivers notifications in order).
        notify(&shared, "flyto_plans", "6").await.unwrap();
        assert!(woke(&mut all).await);
        assert!(!five.pending(), "woken by another plan's change");
        notify(&shared, "flyto_plans", "5").await.unwrap();
        assert!(woke(&mut five).await, "its own change did not wake it");
        // A reconnect wakes it too: what was notified meanwhile is lost.
        assert_eq!(pg.terminate_backends("flyto-listen%"), 1);
        assert!(woke(&mut five).await, "no wake-up after the reconnect");
    });
}

#[test]
fn without_any_notify_the_fallback_poll_wakes_the_listener() {
    use flyto_actors::store::postgres::listen::Listener;
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "p").await;
        let l = Listener::start(
            &shared,
            &["flyto_work"],
            std::time::Duration::from_millis(300),
        );
        let mut w = l.subscribe("flyto_work");
        assert!(woke(&mut w).await);
        // Nobody notifies; the poll still comes round, again and again.
        for _ in 0..3 {
            assert!(
                woke(&mut w).await,
                "the fallback poll did not wake the listener"
            );
        }
    });
}

#[derive(Default)]
struct Stops {
    lost: std::sync::Mutex<Vec<i64>>,
    fenced: std::sync::Mutex<Vec<i64>>,
}

impl claims::Fence for Stops {
    fn lost(&self, tokens: &[i64]) {
        self.lost.lock().unwrap().extend(tokens);
    }
    fn fence(&self, tokens: &[i64]) {
        self.fenced.lock().unwrap().extend(tokens);
    }
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn one_step(max_attempts: i32) -> Vec<StepRow> {
    vec![StepRow {
        plan: 1,
        step: "a".into(),
        max_attempts,
        retry_on_lease_loss: true,
    }]
}

#[test]
fn a_keeper_reports_a_lost_lease_and_fences_when_the_database_is_gone() {
    use claims::{KeeperTimes, LeaseKeeper};
    use std::sync::Arc;
    use std::time::Duration;
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "k").await;
        claims::add_ready_steps(&shared, &one_step(3)).await.unwrap();
        let stops = Arc::new(Stops::default());
        let times = KeeperTimes {
            every: Duration::from_millis(100),
            fence_after: Duration::from_millis(800),
        };
        let keeper = LeaseKeeper::start(shared.clone(), "node-1".into(), times, stops.clone());
        let c = claims::claim(&shared, "node-1", 1).await.unwrap().remove(0);
        keeper.hold(c.token);
        // Renewed: the lease keeps moving forward.
        let until_of = |shared: Shared| async move {
            let c = shared.client().await.unwrap();
            let r = c
                .query_one("SELECT extract(epoch FROM lease_until)::float8 FROM flyto_steps", &[])
                .await
                .unwrap();
            r.get::<_, f64>(0)
        };
        let before = until_of(shared.clone()).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while until_of(shared.clone()).await <= before {
            assert!(std::time::Instant::now() < deadline, "the lease was never renewed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Another node rescues the step: the keeper says it was lost.
        shared
            .client()
            .await
            .unwrap()
            .execute(
                "UPDATE flyto_steps SET lease_until = now() - interval '1 second', lease_node = 'gone'",
                &[],
            )
            .await
            .unwrap();
        claims::sweep(&shared).await.unwrap();
        until("the lost lease reported", || stops.lost.lock().unwrap().contains(&c.token)).await;
        // A new attempt, then the database goes away: fenced.
        let c2 = claims::claim(&shared, "node-1", 1).await.unwrap().remove(0);
        keeper.hold(c2.token);
        pg.stop();
        until("the node fenced", || stops.fenced.lock().unwrap().contains(&c2.token)).await;
        assert!(stops.lost.lock().unwrap().len() == 1);
    });
}

/// A CA, a server certificate it signed for `localhost`, and another CA,
/// made with the openssl command: (ca.pem, server.crt, server.key,
/// other.pem) in `dir`.
fn certificates(dir: &std::path::Path) -> [std::path::PathBuf; 4] {
    let run = |args: &str| {
        let out = std::process::Command::new("openssl")
            .args(args.split_whitespace())
            .current_dir(dir)
            .output()
            .expect("the openssl command");
        assert!(
            out.status.success(),
            "openssl {args}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::write(dir.join("ext"), "subjectAltName=DNS:localhost\n").unwrap();
    run(
        "req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=flyto-test-ca",
    );
    run("req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost");
    run(
        "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile ext",
    );
    run(
        "req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.pem -days 2 -subj /CN=other-ca",
    );
    ["ca.pem", "server.crt", "server.key", "other.pem"].map(|f| dir.join(f))
}

/// Whether the pooled connection of `shared` is encrypted.
async fn encrypted(shared: &Shared) -> bool {
    shared
        .client()
        .await
        .unwrap()
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[test]
fn tls_follows_sslmode_and_sslrootcert_and_names_what_failed() {
    let pg = TestPostgres::start();
    let plain = TestPostgres::start();
    let tmp = tempfile::tempdir().unwrap();
    let [ca, crt, key, other] = certificates(tmp.path());
    pg.enable_tls(
        &std::fs::read_to_string(&crt).unwrap(),
        &std::fs::read_to_string(&key).unwrap(),
    );
    let port = pg.port();
    let url =
        |host: &str, query: String| format!("postgres://postgres@{host}:{port}/postgres?{query}");
    runtime().block_on(async {
        // require: encrypted, the certificate not checked (as libpq).
        let s = Shared::connect(&url("127.0.0.1", "sslmode=require".into()), "t")
            .await
            .unwrap();
        assert!(encrypted(&s).await);
        // disable: plain.
        let s = Shared::connect(&url("127.0.0.1", "sslmode=disable".into()), "t")
            .await
            .unwrap();
        assert!(!encrypted(&s).await);
        // verify-full: the chain and the name.
        let root = format!("sslrootcert={}", ca.display());
        let s = Shared::connect(
            &url("localhost", format!("sslmode=verify-full&{root}")),
            "t",
        )
        .await
        .unwrap();
        assert!(encrypted(&s).await);
        let wrong_name = Shared::connect(
            &url("127.0.0.1", format!("sslmode=verify-full&{root}")),
            "t",
        )
        .await
        .err()
        .expect("a certificate for localhost is not one for 127.0.0.1");
        let text = wrong_name.to_string();
        assert!(
            text.contains("127.0.0.1") && text.contains("certificate"),
            "{text}"
        );
        // verify-ca: the chain only.
        let s = Shared::connect(&url("127.0.0.1", format!("sslmode=verify-ca&{root}")), "t")
            .await
            .unwrap();
        assert!(encrypted(&s).await);
        // Another CA: refused, saying so.
        let stranger = format!("sslmode=verify-ca&sslrootcert={}", other.display());
        let e = Shared::connect(&url("127.0.0.1", stranger), "t")
            .await
            .err()
            .expect("a certificate from another CA");
        assert!(e.to_string().contains("certificate"), "{e}");
        // A root file that is not there: the error names it.
        let e = Shared::connect(
            &url(
                "127.0.0.1",
                "sslmode=verify-ca&sslrootcert=/nonexistent.pem".into(),
            ),
            "t",
        )
        .await
        .err()
        .expect("a missing root file");
        assert!(e.to_string().contains("/nonexistent.pem"), "{e}");
        // A server without TLS, where the URL requires it.
        let e = Shared::connect(
            &format!(
                "postgres://postgres@127.0.0.1:{}/postgres?sslmode=require",
                plain.port()
            ),
            "t",
        )
        .await
        .err()
        .expect("TLS required from a server without it");
        assert!(
            e.to_string().contains("TLS") || e.to_string().contains("SSL"),
            "{e}"
        );
    });
}

fn inbound(seq: u64, state: TurnState) -> InboundRecord {
    InboundRecord {
        binding: "tg".into(),
        seq,
        update_id: format!("u{seq}"),
        chat: "c".into(),
        user: "42".into(),
        message_id: format!("m{seq}"),
        text: "hi".into(),
        received_ms: 10,
        state,
    }
}

#[test]
fn a_channel_write_under_a_lost_lease_changes_nothing() {
    let pg = TestPostgres::start();
    let rt = runtime();
    let shared = rt.block_on(fresh(&pg, "ch"));
    // The store blocks its thread for each round trip: on a worker.
    rt.block_on(rt.spawn(async move {
        let backend = Arc::new(SharedChannels::new(shared.clone()));
        let store = ChannelStore::on(backend.clone());
        let lease = Duration::from_secs(45);
        let old = backend.acquire("tg", "node-1", lease).await.unwrap().unwrap();
        assert_eq!(backend.acquire("tg", "node-2", lease).await.unwrap(), None);
        let held = store.fenced("tg", old);
        let mut w = Write::default();
        w.inbound(&inbound(1, TurnState::Queued));
        held.apply(&w).unwrap();

        // node-1 stops renewing; its lease runs out and node-2 takes it.
        count(
            &shared,
            "WITH e AS (UPDATE flyto_channel_leases SET until = now() - interval '1 second' RETURNING 1) SELECT count(*) FROM e",
        )
        .await;
        let new = backend.acquire("tg", "node-2", lease).await.unwrap().unwrap();
        assert!(new > old);
        // node-1 wakes up: its write is refused and changes nothing; its
        // renewal finds nothing to renew.
        let mut stale = Write::default();
        stale.inbound(&inbound(1, TurnState::Answered));
        stale.inbound(&inbound(2, TurnState::Queued));
        let refused = held.apply(&stale).unwrap_err().to_string();
        assert!(refused.contains("another node"), "{refused}");
        let journal = store.inbound("tg").unwrap();
        assert_eq!(journal.len(), 1);
        assert_eq!(journal[0].state, TurnState::Queued);
        assert!(backend.renew(&[old], lease).await.unwrap().is_empty());
        assert_eq!(backend.renew(&[new], lease).await.unwrap(), [new]);
        // node-2's write goes through; the last write of a key in one
        // batch wins, and removes and scans in both directions work as on sled.
        let mut w = Write::default();
        w.inbound(&inbound(1, TurnState::Answered))
            .inbound(&inbound(2, TurnState::Queued))
            .inbound(&inbound(2, TurnState::Answered));
        store.fenced("tg", new).apply(&w).unwrap();
        let states: Vec<TurnState> = store.inbound("tg").unwrap().into_iter().map(|r| r.state).collect();
        assert_eq!(states, [TurnState::Answered, TurnState::Answered]);
        assert_eq!(store.last_seq(b'i', "tg").unwrap(), 2);
        assert!(store.seen_update("tg", "u2").unwrap());
        store.remove_binding("tg").unwrap();
        assert!(store.inbound("tg").unwrap().is_empty());
        assert_eq!(store.last_seq(b'i', "tg").unwrap(), 0);
        // Outbox numbers are unique across nodes.
        let (mut a, mut b) = (0, 0);
        let x = store.next_out_seq(&mut a).unwrap();
        let y = ChannelStore::on(backend.clone()).next_out_seq(&mut b).unwrap();
        assert_ne!(x, y);
    }))
    .unwrap();
}

#[test]
fn a_channel_keeper_takes_free_bindings_and_fences_itself_when_the_database_is_gone() {
    use flyto_actors::channels::lease::{self, Cluster, LeaseTimes, Tick};
    use flyto_actors::channels::store::{BindingKind, BindingRecord};
    let pg = TestPostgres::start();
    let rt = runtime();
    let shared = rt.block_on(fresh(&pg, "keeper"));
    let (tx, rx) = std::sync::mpsc::channel::<Tick>();
    let held: lease::Held = Default::default();
    let cluster = rt
        .block_on(rt.spawn(async move {
            let backend = Arc::new(SharedChannels::new(shared));
            let mut w = Write::default();
            w.binding(&BindingRecord {
                name: "tg".into(),
                kind: BindingKind::Inbox { dir: "/x".into() },
                created_ms: 1,
                auth_failed: None,
                paused_until_ms: None,
            });
            ChannelStore::on(backend.clone()).apply(&w).unwrap();
            Cluster {
                backend,
                node: "node-1".into(),
                previous: None,
                listener: None,
                times: LeaseTimes {
                    tick: Duration::from_millis(100),
                    renew_every: Duration::from_millis(200),
                    lease: Duration::from_secs(5),
                    fence_after: Duration::from_secs(1),
                },
            }
        }))
        .unwrap();
    let keeper = rt.spawn(lease::run(cluster, held.clone(), move |t| {
        tx.send(t).is_ok()
    }));
    let next = |what: &str, f: &dyn Fn(&Tick) -> bool| loop {
        let t = rx
            .recv_timeout(flyto_tests::DEADLINE)
            .unwrap_or_else(|_| panic!("no tick: {what}"));
        if f(&t) {
            return t;
        }
    };
    let got = next("the lease is taken", &|t| !t.acquired.is_empty());
    assert_eq!(got.acquired[0].0.name, "tg");
    let holders = got.holders.expect("the holders were read");
    assert_eq!(holders.get("tg").map(String::as_str), Some("node-1"));
    assert!(held.lock().unwrap().contains_key("tg"));
    // The database goes away: within fence_after (well inside the lease)
    // the keeper tells the node to stop the binding.
    pg.stop();
    let t = next("the node fences itself", &|t| !t.lost.is_empty());
    assert_eq!(t.lost, ["tg"]);
    assert!(held.lock().unwrap().is_empty());
    keeper.abort();
}

#[test]
fn two_nodes_writing_one_memory_scope_at_once_lose_no_entry() {
    use flyto_actors::clock::SystemClock;
    use flyto_actors::memory::shared::SharedMemory;
    use flyto_actors::memory::{Kind, Memory, MemoryArgs, MemoryManager, ScopeKey, WriteReq};
    let pg = TestPostgres::start();
    let rt = runtime();
    let shared = rt.block_on(fresh(&pg, "mem"));
    let tmp = tempfile::tempdir().unwrap();
    let nodes: Vec<Memory> = ["a", "b"]
        .iter()
        .map(|n| {
            let state = tmp.path().join(n);
            let name = format!("test.memory.{n}");
            let shared = shared.clone();
            let (state2, name2) = (state.clone(), name.clone());
            rt.block_on(rt.spawn(async move {
                ractor::Actor::spawn(
                    Some(name2),
                    MemoryManager,
                    MemoryArgs {
                        state_dir: state2,
                        clock: Arc::new(SystemClock),
                        idle: Duration::from_secs(60),
                        shared: Some(Arc::new(SharedMemory::new(shared))),
                    },
                )
                .await
                .unwrap()
            }))
            .unwrap();
            Memory {
                manager: name,
                state_dir: state,
            }
        })
        .collect();
    let writers: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let m = m.clone();
            rt.spawn(async move {
                for k in 0..15 {
                    let req = WriteReq {
                        name: format!("n{i}-{k}"),
                        kind: Kind::User,
                        description: format!("entry {k} of node {i}"),
                        body: "body".into(),
                        source: "user".into(),
                        session: None,
                    };
                    m.write_scope(&ScopeKey::User, req).await.unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        rt.block_on(w).unwrap();
    }
    for m in &nodes {
        let m = m.clone();
        let names = rt
            .block_on(rt.spawn(async move {
                let scan = m.scan_scope(&ScopeKey::User).await.unwrap();
                scan.entries
                    .iter()
                    .map(|e| e.meta.name.clone())
                    .collect::<HashSet<_>>()
            }))
            .unwrap();
        assert_eq!(names.len(), 30, "an update was lost: {names:?}");
    }
}

#[test]
fn one_node_at_a_time_holds_a_projects_dream_lease() {
    use flyto_actors::memory::shared::SharedMemory;
    let pg = TestPostgres::start();
    let rt = runtime();
    let shared = rt.block_on(fresh(&pg, "dream"));
    rt.block_on(async {
        let m = SharedMemory::new(shared.clone());
        let hour = Duration::from_secs(3600);
        assert!(m.take_dream_lease("p1", "a", "a/d1", hour).await.unwrap());
        assert!(!m.take_dream_lease("p1", "b", "b/d1", hour).await.unwrap());
        assert_eq!(m.dream_holder("p1").await.unwrap().as_deref(), Some("a"));
        // Another project is free.
        assert!(m.take_dream_lease("p2", "b", "b/d2", hour).await.unwrap());
        // A drop names its run: b cannot drop a's lease.
        m.drop_dream_lease("p1", "b/d1").await.unwrap();
        assert_eq!(m.dream_holder("p1").await.unwrap().as_deref(), Some("a"));
        m.drop_dream_lease("p1", "a/d1").await.unwrap();
        assert!(m.take_dream_lease("p1", "b", "b/d3", hour).await.unwrap());
        // A dead holder's lease runs out, and another node takes it.
        count(
            &shared,
            "WITH e AS (UPDATE flyto_dream_leases SET until = now() - interval '1 second' RETURNING 1) SELECT count(*) FROM e",
        )
        .await;
        assert!(m.take_dream_lease("p1", "a", "a/d4", hour).await.unwrap());
        assert_eq!(m.dream_holder("p1").await.unwrap().as_deref(), Some("a"));
    });
}

#[test]
fn migrating_channel_bindings_renames_sessions_keeps_the_outbox_order_and_skips_taken_names() {
    use flyto_actors::channels::shared::{ImportedChannels, import};
    use flyto_actors::channels::store::{
        BindingKind, BindingRecord, ChatRecord, OutRecord, OutState, PairingRecord,
    };
    let binding = |name: &str, dir: &str| BindingRecord {
        name: name.into(),
        kind: BindingKind::Inbox { dir: dir.into() },
        created_ms: 1,
        auth_failed: None,
        paused_until_ms: None,
    };
    // A node's own store: `tg` with a chat in session s3, a turn started
    // there, one started in a session that was not copied, an outbox
    // chunk numbered 5 and a stranger's pairing request; and `taken`.
    let tmp = tempfile::tempdir().unwrap();
    let sled =
        ChannelStore::open(flyto_actors::store::Store::open(tmp.path(), 1 << 20).unwrap()).unwrap();
    let mut w = Write::default();
    let chat = ChatRecord {
        session: Some("s3".into()),
        ..Default::default()
    };
    let mut lost = inbound(
        2,
        TurnState::Started {
            session: "s9".into(),
            base: 4,
        },
    );
    lost.chat = "other".into();
    w.binding(&binding("tg", "/srv/tg"))
        .binding(&binding("taken", "/srv/mine"))
        .chat("tg", "c", &chat)
        .inbound(&inbound(
            1,
            TurnState::Started {
                session: "s3".into(),
                base: 2,
            },
        ))
        .inbound(&lost)
        .out(&OutRecord {
            binding: "tg".into(),
            seq: 5,
            id: "s3/1/0".into(),
            chat: "c".into(),
            text: "pending reply".into(),
            index: 0,
            last: true,
            plain: false,
            created_ms: 10,
            reply_to: None,
            state: OutState::Pending,
        })
        .pairing(&PairingRecord {
            code: "CODE1234".into(),
            binding: "tg".into(),
            user: "99".into(),
            user_name: "eve".into(),
            chat: "99".into(),
            created_ms: 10,
        })
        .allow("tg", "42");
    sled.apply(&w).unwrap();
    let exported = sled.export().unwrap();

    let pg = TestPostgres::start();
    let rt = runtime();
    let shared = rt.block_on(fresh(&pg, "moved"));
    rt.block_on(rt.spawn(async move {
        let store = ChannelStore::on(Arc::new(SharedChannels::new(shared.clone())));
        // The database has a binding named `taken` already.
        let mut w = Write::default();
        w.binding(&binding("taken", "/srv/theirs"));
        store.apply(&w).unwrap();
        let sessions = [(3, 41)].into_iter().collect();
        let done = import(&shared, "host:/state", exported, &sessions)
            .await
            .unwrap();
        assert_eq!(
            done,
            Some(ImportedChannels {
                copied: vec!["tg".into()],
                taken: vec!["taken".into()],
            })
        );
        assert_eq!(
            store.binding("taken").unwrap().unwrap().kind,
            BindingKind::Inbox {
                dir: "/srv/theirs".into()
            },
            "a binding of the shared store was overwritten"
        );
        assert_eq!(
            store.chat("tg", "c").unwrap().unwrap().session.as_deref(),
            Some("s41")
        );
        let states: Vec<TurnState> = store
            .inbound("tg")
            .unwrap()
            .into_iter()
            .map(|r| r.state)
            .collect();
        assert_eq!(
            states,
            [
                TurnState::Started {
                    session: "s41".into(),
                    base: 2
                },
                TurnState::Queued
            ]
        );
        assert!(store.seen_update("tg", "u1").unwrap());
        assert_eq!(store.outbox("tg").unwrap()[0].text, "pending reply");
        assert_eq!(store.pairing("CODE1234").unwrap().unwrap().user, "99");
        assert!(store.allowed("tg", "42").unwrap());
        // A chunk numbered on the shared store comes after the copied one.
        let mut local = store.last_seq(b'o', "tg").unwrap();
        assert_eq!(local, 5);
        assert!(store.next_out_seq(&mut local).unwrap() > 5);
        // Once only (the second copy of a source is refused before it
        // looks at what it is given).
        let again = import(&shared, "host:/state", Vec::new(), &sessions)
            .await
            .unwrap();
        assert_eq!(again, None);
    }))
    .unwrap();
}
