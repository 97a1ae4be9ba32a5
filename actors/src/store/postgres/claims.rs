//! Step claims across daemons (event times are `clock_timestamp()`, when
//! the statement ran, not when its transaction began, so that they follow
//! the order in which nodes saw the changes): a short transaction takes up to N ready
//! steps with `FOR UPDATE SKIP LOCKED`, gives each a fresh fencing token
//! from a sequence and a lease (the database's clock), and records the
//! attempt. No row lock outlives that transaction. Every later write of
//! the attempt (heartbeat, output, completion) presents its token and
//! changes nothing when the lease was lost. Expired leases are swept by
//! whichever node wins a transaction-scoped advisory lock: no leader.

use super::{PgError, Shared};
use std::time::Duration;

/// How long a claim or heartbeat holds a step.
pub const LEASE: Duration = Duration::from_secs(45);
/// How often a node renews its leases.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(10);
/// A node that could not heartbeat for this long kills its own work, well
/// before its leases expire and another node may take the steps.
pub const SELF_FENCE_AFTER: Duration = Duration::from_secs(30);

const SWEEP_LOCK: i64 = 0x666c_7974_6f5f_7377;

/// One claimed step: run it, then report under `token`.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub plan: i64,
    pub step: String,
    pub token: i64,
    /// 1 for the first attempt.
    pub attempt: i32,
}

/// A step as the claim table holds it (for seeding plans' steps).
#[derive(Debug, Clone, PartialEq)]
pub struct StepRow {
    pub plan: i64,
    pub step: String,
    pub max_attempts: i32,
    pub retry_on_lease_loss: bool,
}

fn lease_secs() -> f64 {
    LEASE.as_secs_f64()
}

/// Announces a node (or renews its row after a restart of the same id).
pub async fn register_node(
    shared: &Shared,
    node: &str,
    host: &str,
    pid: i32,
) -> Result<(), PgError> {
    let c = shared.client().await?;
    c.execute(
        "INSERT INTO flyto_nodes (id, host, pid) VALUES ($1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()",
        &[&node, &host, &pid],
    )
    .await
    .map_err(shared.query_err("registering the node"))?;
    // Every process start is a new node: forget those long gone.
    c.execute(
        "DELETE FROM flyto_nodes WHERE heartbeat_at < now() - interval '7 days'",
        &[],
    )
    .await
    .map_err(shared.query_err("forgetting old nodes"))?;
    Ok(())
}

/// Steps ready to be claimed.
pub async fn add_ready_steps(shared: &Shared, steps: &[StepRow]) -> Result<(), PgError> {
    let mut c = shared.client().await?;
    let err = shared.query_err("adding steps");
    let tx = c.transaction().await.map_err(&err)?;
    let insert = tx
        .prepare(
            "INSERT INTO flyto_steps (plan, step, state, max_attempts, retry_on_lease_loss)
             VALUES ($1, $2, 'ready', $3, $4)",
        )
        .await
        .map_err(&err)?;
    for s in steps {
        tx.execute(
            &insert,
            &[&s.plan, &s.step, &s.max_attempts, &s.retry_on_lease_loss],
        )
        .await
        .map_err(&err)?;
    }
    tx.commit().await.map_err(&err)
}

/// Which ready steps a claim may take, by their plan's depth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Depth {
    Any,
    /// Steps of users' plans (depth 0).
    Top,
    /// Steps of child plans (depth 1 and deeper).
    Child,
}

/// Claims up to `max` ready steps for `node`, oldest plan first.
pub async fn claim(shared: &Shared, node: &str, max: i64) -> Result<Vec<Claim>, PgError> {
    claim_at(shared, node, max, Depth::Any).await
}

/// Like [`claim`], only steps at `depth`.
pub async fn claim_at(
    shared: &Shared,
    node: &str,
    max: i64,
    depth: Depth,
) -> Result<Vec<Claim>, PgError> {
    // NULL: any depth.
    let child: Option<bool> = match depth {
        Depth::Any => None,
        Depth::Top => Some(false),
        Depth::Child => Some(true),
    };
    let mut c = shared.client().await?;
    let err = shared.query_err("claiming steps");
    let tx = c.transaction().await.map_err(&err)?;
    let rows = tx
        .query(
            "WITH picked AS (
                 SELECT plan, step FROM flyto_steps
                 WHERE state = 'ready' AND ($4::bool IS NULL OR (depth > 0) = $4)
                 ORDER BY plan, step
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED
             )
             UPDATE flyto_steps s
             SET state = 'running', lease_node = $1, lease_token = nextval('flyto_fencing'),
                 lease_until = now() + make_interval(secs => $3), attempts = s.attempts + 1,
                 started_at = clock_timestamp(), finished_at = NULL, exit_code = NULL, error = NULL,
                 output = NULL, stderr = NULL, log_path = NULL
             FROM picked
             WHERE s.plan = picked.plan AND s.step = picked.step
             RETURNING s.plan, s.step, s.lease_token, s.attempts",
            &[&node, &max, &lease_secs(), &child],
        )
        .await
        .map_err(&err)?;
    let claims: Vec<Claim> = rows
        .iter()
        .map(|r| Claim {
            plan: r.get(0),
            step: r.get(1),
            token: r.get(2),
            attempt: r.get(3),
        })
        .collect();
    if !claims.is_empty() {
        let tokens: Vec<i64> = claims.iter().map(|c| c.token).collect();
        // The attempt is on record before the step starts.
        tx.execute(
            "INSERT INTO flyto_attempts (token, plan, step, node, started_at)
             SELECT lease_token, plan, step, $2, started_at FROM flyto_steps
             WHERE lease_token = ANY($1)",
            &[&tokens, &node],
        )
        .await
        .map_err(&err)?;
        let mut plans: Vec<i64> = claims.iter().map(|c| c.plan).collect();
        plans.dedup();
        tx.execute(
            "UPDATE flyto_plans SET state = 'running', started_at = coalesce(started_at, clock_timestamp()),
                 revision = revision + 1
             WHERE id = ANY($1) AND state IN ('pending', 'running')",
            &[&plans],
        )
        .await
        .map_err(&err)?;
    }
    tx.commit().await.map_err(&err)?;
    Ok(claims)
}

/// A node as the others see it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub id: String,
    pub host: String,
    pub pid: i32,
    /// Since its last heartbeat, by the database's clock.
    pub heartbeat_age_ms: i64,
}

/// The nodes that heartbeated in the last `within`, this one among them.
pub async fn nodes(shared: &Shared, within: Duration) -> Result<Vec<NodeRow>, PgError> {
    let c = shared.client().await?;
    let rows = c
        .query(
            "SELECT id, host, pid,
                    (extract(epoch FROM now() - heartbeat_at) * 1000)::bigint
             FROM flyto_nodes
             WHERE heartbeat_at > now() - make_interval(secs => $1)
             ORDER BY started_at, id",
            &[&within.as_secs_f64()],
        )
        .await
        .map_err(shared.query_err("listing nodes"))?;
    Ok(rows
        .iter()
        .map(|r| NodeRow {
            id: r.get(0),
            host: r.get(1),
            pid: r.get(2),
            heartbeat_age_ms: r.get(3),
        })
        .collect())
}

/// Renews the leases of `tokens` held by `node`; answers the tokens still
/// held (a missing one was lost: its step must stop here).
pub async fn heartbeat(shared: &Shared, node: &str, tokens: &[i64]) -> Result<Vec<i64>, PgError> {
    let c = shared.client().await?;
    let err = shared.query_err("renewing leases");
    c.execute(
        "UPDATE flyto_nodes SET heartbeat_at = now() WHERE id = $1",
        &[&node],
    )
    .await
    .map_err(&err)?;
    if tokens.is_empty() {
        // Nothing to renew: an idle node's heartbeat is one statement.
        return Ok(Vec::new());
    }
    let rows = c
        .query(
            "UPDATE flyto_steps SET lease_until = now() + make_interval(secs => $3)
             WHERE state = 'running' AND lease_node = $1 AND lease_token = ANY($2)
             RETURNING lease_token",
            &[&node, &tokens, &lease_secs()],
        )
        .await
        .map_err(&err)?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Stores output of the attempt `token`; `false` when its lease was lost.
pub async fn write_output(shared: &Shared, token: i64, output: &str) -> Result<bool, PgError> {
    let c = shared.client().await?;
    let n = c
        .execute(
            "UPDATE flyto_steps SET output = $2 WHERE lease_token = $1 AND state = 'running'",
            &[&token, &output],
        )
        .await
        .map_err(shared.query_err("storing a step's output"))?;
    Ok(n == 1)
}

/// How an attempt ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepEnd {
    pub succeeded: bool,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    /// The output's tail; empty keeps what [`write_output`] stored.
    pub stdout: String,
    pub stderr: String,
    /// The attempt's full output, on this node.
    pub log_path: Option<String>,
}

impl StepEnd {
    pub fn succeeded() -> StepEnd {
        StepEnd {
            succeeded: true,
            exit_code: Some(0),
            ..StepEnd::default()
        }
    }

    pub fn failed(error: &str) -> StepEnd {
        StepEnd {
            error: Some(error.into()),
            ..StepEnd::default()
        }
    }
}

/// Ends the attempt `token` and moves its plan on: `Ok(false)` when it no
/// longer holds its step (the lease was lost and the step rescued, or the
/// plan cancelled): nothing changes then.
pub async fn complete(shared: &Shared, token: i64, end: &StepEnd) -> Result<bool, PgError> {
    let mut c = shared.client().await?;
    let err = shared.query_err("completing a step");
    let tx = c.transaction().await.map_err(&err)?;
    let state = if end.succeeded { "succeeded" } else { "failed" };
    let plan = tx
        .query_opt(
            "UPDATE flyto_steps SET state = $2, error = $3, exit_code = $4,
                 output = CASE WHEN $5 = '' THEN output ELSE $5 END,
                 stderr = $6, log_path = $7, finished_at = clock_timestamp(), lease_token = NULL,
                 lease_node = NULL, lease_until = NULL
             WHERE lease_token = $1 AND state = 'running'
             RETURNING plan",
            &[
                &token,
                &state,
                &end.error,
                &end.exit_code,
                &end.stdout,
                &end.stderr,
                &end.log_path,
            ],
        )
        .await
        .map_err(&err)?
        .map(|r| r.get::<_, i64>(0));
    if let Some(plan) = plan {
        let outcome = match &end.error {
            Some(e) if !end.succeeded => format!("failed: {e}"),
            _ => state.to_string(),
        };
        tx.execute(
            "UPDATE flyto_attempts SET finished_at = clock_timestamp(), outcome = $2 WHERE token = $1",
            &[&token, &outcome],
        )
        .await
        .map_err(&err)?;
        let moved = if end.succeeded {
            super::plans::Moved::Succeeded
        } else {
            super::plans::Moved::Failed
        };
        super::plans::settle(shared, &tx, plan, moved).await?;
    }
    tx.commit().await.map_err(&err)?;
    Ok(plan.is_some())
}

/// Records that the process of attempt `token` has ended on its node
/// after the attempt lost its lease, and tells the plan's watchers (a
/// cancel waits for it). A cancelled attempt's output is the step's last
/// word, so it is kept (a rescued step's row is its next attempt's).
pub async fn stopped(shared: &Shared, token: i64, end: &StepEnd) -> Result<(), PgError> {
    let mut c = shared.client().await?;
    let err = shared.query_err("recording that an attempt stopped");
    let tx = c.transaction().await.map_err(&err)?;
    tx.execute(
        "UPDATE flyto_steps s SET output = $2, stderr = $3, log_path = $4
         FROM flyto_attempts a
         WHERE a.token = $1 AND a.outcome = 'cancelled' AND a.stopped_at IS NULL
           AND s.plan = a.plan AND s.step = a.step AND s.state = 'cancelled'",
        &[&token, &end.stdout, &end.stderr, &end.log_path],
    )
    .await
    .map_err(&err)?;
    tx.execute(
        "WITH a AS (
             UPDATE flyto_attempts SET stopped_at = now() WHERE token = $1 RETURNING plan
         )
         UPDATE flyto_plans p SET revision = p.revision + 1 FROM a
         WHERE p.id = a.plan
         RETURNING pg_notify($2, p.id::text)",
        &[&token, &super::plans::PLANS_CHANNEL],
    )
    .await
    .map_err(&err)?;
    tx.commit().await.map_err(&err)
}

/// How many of `tokens` still run somewhere: not seen to stop, on a node
/// that heartbeated within the lease (a node silent longer has fenced
/// itself).
pub async fn still_running(shared: &Shared, tokens: &[i64]) -> Result<i64, PgError> {
    let c = shared.client().await?;
    Ok(c.query_one(
        "SELECT count(*) FROM flyto_attempts a JOIN flyto_nodes n ON n.id = a.node
         WHERE a.token = ANY($1) AND a.stopped_at IS NULL
           AND n.heartbeat_at > now() - make_interval(secs => $2)",
        &[&tokens, &lease_secs()],
    )
    .await
    .map_err(shared.query_err("checking which attempts still run"))?
    .get(0))
}

/// Gives back the step of attempt `token`, which its node stopped because
/// it is shutting down: the step is ready again for any node when it may
/// run again (`retry_on_lease_loss`; the interrupted attempt does not
/// count), else it fails with `why`. `Ok(false)` when the attempt no
/// longer held its step.
pub async fn hand_back(shared: &Shared, token: i64, why: &str) -> Result<bool, PgError> {
    let mut c = shared.client().await?;
    let err = shared.query_err("handing a step back");
    let tx = c.transaction().await.map_err(&err)?;
    let row = tx
        .query_opt(
            "UPDATE flyto_steps SET
                 state = CASE WHEN retry_on_lease_loss THEN 'ready' ELSE 'failed' END,
                 error = CASE WHEN retry_on_lease_loss THEN NULL ELSE $2 END,
                 finished_at = CASE WHEN retry_on_lease_loss THEN NULL ELSE clock_timestamp() END,
                 attempts = CASE WHEN retry_on_lease_loss THEN greatest(attempts - 1, 0)
                                 ELSE attempts END,
                 lease_token = NULL, lease_node = NULL, lease_until = NULL
             WHERE lease_token = $1 AND state = 'running'
             RETURNING plan, state",
            &[&token, &why],
        )
        .await
        .map_err(&err)?;
    let Some(row) = row else {
        return Ok(false);
    };
    let (plan, state): (i64, String) = (row.get(0), row.get(1));
    tx.execute(
        "UPDATE flyto_attempts SET finished_at = clock_timestamp(), outcome = $2 WHERE token = $1",
        &[&token, &format!("interrupted: {why}")],
    )
    .await
    .map_err(&err)?;
    if state == "ready" {
        tx.execute("SELECT pg_notify($1, '')", &[&super::plans::WORK_CHANNEL])
            .await
            .map_err(&err)?;
        tx.execute(
            "UPDATE flyto_plans SET revision = revision + 1 WHERE id = $1
             RETURNING pg_notify($2, id::text)",
            &[&plan, &super::plans::PLANS_CHANNEL],
        )
        .await
        .map_err(&err)?;
    } else {
        super::plans::settle(shared, &tx, plan, super::plans::Moved::Failed).await?;
    }
    tx.commit().await.map_err(&err)?;
    Ok(true)
}

/// Rescues steps whose lease expired: back to `ready` when the step may
/// run again (`retry_on_lease_loss` and attempts left), else `failed` with
/// `lease lost`. Only the node that wins the advisory lock sweeps; the
/// others answer `None` at once.
pub async fn sweep(shared: &Shared) -> Result<Option<Vec<(i64, String, i64)>>, PgError> {
    let mut c = shared.client().await?;
    let err = shared.query_err("sweeping expired leases");
    // Mostly nothing expired: one read, not a locking transaction.
    let any: bool = c
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM flyto_steps WHERE state = 'running' AND lease_until < now())",
            &[],
        )
        .await
        .map_err(&err)?
        .get(0);
    if !any {
        return Ok(Some(Vec::new()));
    }
    let tx = c.transaction().await.map_err(&err)?;
    let won: bool = tx
        .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&SWEEP_LOCK])
        .await
        .map_err(&err)?
        .get(0);
    if !won {
        return Ok(None);
    }
    let rows = tx
        .query(
            "WITH expired AS (
                 SELECT plan, step, lease_token FROM flyto_steps
                 WHERE state = 'running' AND lease_until < now()
                 FOR UPDATE
             )
             UPDATE flyto_steps s
             SET state = CASE WHEN s.retry_on_lease_loss AND s.attempts < s.max_attempts
                              THEN 'ready' ELSE 'failed' END,
                 error = CASE WHEN s.retry_on_lease_loss AND s.attempts < s.max_attempts
                              THEN NULL ELSE 'lease lost' END,
                 finished_at = CASE WHEN s.retry_on_lease_loss AND s.attempts < s.max_attempts
                                    THEN NULL ELSE clock_timestamp() END,
                 lease_token = NULL, lease_node = NULL, lease_until = NULL
             FROM expired
             WHERE s.plan = expired.plan AND s.step = expired.step
             RETURNING s.plan, s.step, expired.lease_token",
            &[],
        )
        .await
        .map_err(&err)?;
    let rescued: Vec<(i64, String, i64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    if !rescued.is_empty() {
        let tokens: Vec<i64> = rescued.iter().map(|(_, _, t)| *t).collect();
        tx.execute(
            "UPDATE flyto_attempts SET finished_at = clock_timestamp(), outcome = 'lease lost' WHERE token = ANY($1)",
            &[&tokens],
        )
        .await
        .map_err(&err)?;
        let mut plans: Vec<i64> = rescued.iter().map(|(p, _, _)| *p).collect();
        plans.sort_unstable();
        plans.dedup();
        for plan in plans {
            super::plans::settle(shared, &tx, plan, super::plans::Moved::Any).await?;
        }
        // Rescued steps that may run again are ready: say so.
        tx.execute("SELECT pg_notify($1, '')", &[&super::plans::WORK_CHANNEL])
            .await
            .map_err(&err)?;
    }
    tx.commit().await.map_err(&err)?;
    Ok(Some(rescued))
}

/// How often a [`LeaseKeeper`] heartbeats and when it gives up.
#[derive(Debug, Clone, Copy)]
pub struct KeeperTimes {
    pub every: Duration,
    pub fence_after: Duration,
}

impl Default for KeeperTimes {
    fn default() -> Self {
        KeeperTimes {
            every: HEARTBEAT_EVERY,
            fence_after: SELF_FENCE_AFTER,
        }
    }
}

/// What a node's keeper tells it to stop.
pub trait Fence: Send + Sync + 'static {
    /// These attempts lost their leases (the steps were rescued): stop them.
    fn lost(&self, tokens: &[i64]);
    /// No heartbeat got through for `fence_after`: stop every attempt now,
    /// before the leases can expire and another node takes the steps.
    fn fence(&self, tokens: &[i64]);
}

/// Renews the leases of a node's running attempts every `every`; tells
/// the node which attempts lost their lease, and, when the database could
/// not be reached for `fence_after` (well inside [`LEASE`]), to stop all
/// of them: a paused or cut-off node never runs a step beside the node
/// that rescued it.
pub struct LeaseKeeper {
    held: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<i64>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LeaseKeeper {
    pub fn start(
        shared: Shared,
        node: String,
        times: KeeperTimes,
        fence: std::sync::Arc<dyn Fence>,
    ) -> LeaseKeeper {
        let held: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<i64>>> =
            Default::default();
        let h = held.clone();
        let task = tokio::spawn(async move {
            let mut last_ok = std::time::Instant::now();
            loop {
                tokio::time::sleep(times.every).await;
                let tokens: Vec<i64> = h
                    .lock()
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default();
                let beat = tokio::time::timeout(
                    times.every.max(Duration::from_secs(1)),
                    heartbeat(&shared, &node, &tokens),
                )
                .await;
                match beat {
                    Ok(Ok(kept)) => {
                        last_ok = std::time::Instant::now();
                        let lost: Vec<i64> = tokens
                            .iter()
                            .filter(|t| !kept.contains(t))
                            .copied()
                            .collect();
                        if !lost.is_empty() {
                            if let Ok(mut s) = h.lock() {
                                for t in &lost {
                                    s.remove(t);
                                }
                            }
                            fence.lost(&lost);
                        }
                    }
                    Ok(Err(e)) => tracing::warn!(node = %node, error = %e, "heartbeat failed"),
                    Err(_) => tracing::warn!(node = %node, "heartbeat timed out"),
                }
                if last_ok.elapsed() >= times.fence_after && !tokens.is_empty() {
                    tracing::error!(
                        node = %node,
                        after_s = times.fence_after.as_secs(),
                        "no heartbeat reached the database: stopping this node's running work before its leases expire"
                    );
                    if let Ok(mut s) = h.lock() {
                        s.clear();
                    }
                    fence.fence(&tokens);
                }
            }
        });
        LeaseKeeper { held, task }
    }

    /// Keeps the lease of this attempt from now on.
    pub fn hold(&self, token: i64) {
        if let Ok(mut s) = self.held.lock() {
            s.insert(token);
        }
    }

    /// The attempt ended (or was stopped).
    pub fn release(&self, token: i64) {
        if let Ok(mut s) = self.held.lock() {
            s.remove(&token);
        }
    }
}
