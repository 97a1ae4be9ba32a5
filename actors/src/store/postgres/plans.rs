//! Plan rows on the shared store. A plan is inserted with its steps in one
//! transaction, its id from one sequence so that every node agrees; from
//! then on its steps' rows carry their live state (claims, leases,
//! outcomes) and the plan's own state follows from theirs ([`settle`]),
//! inside the transaction of the change that moved them. No node rewrites
//! another's record: the record stays as submitted, and a plan's view is
//! that record joined with its steps' rows. Records are opaque bytes here;
//! the plans room encodes them.

use super::{PgError, Shared};
use tokio_postgres::GenericClient;

/// Where nodes hear that steps became ready.
pub const WORK_CHANNEL: &str = "flyto_work";
/// Where nodes hear that a plan changed (payload: its id).
pub const PLANS_CHANNEL: &str = "flyto_plans";

/// A step of a plan being submitted.
#[derive(Debug, Clone, PartialEq)]
pub struct NewStep {
    pub step: String,
    pub deps: Vec<String>,
    pub max_attempts: i32,
    /// May run again when its node lost the lease mid-run.
    pub retry_on_lease_loss: bool,
}

/// A plan being submitted; `id` from [`next_plan_id`], inside `record`
/// too.
#[derive(Debug, Clone, PartialEq)]
pub struct NewPlan {
    pub id: i64,
    pub record: Vec<u8>,
    pub idempotency_key: Option<String>,
    pub name: Option<String>,
    /// 0 for a user's plan; child plans (submitted by steps and agents)
    /// are deeper.
    pub depth: i32,
    pub steps: Vec<NewStep>,
}

/// What [`insert_plan`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Inserted {
    New,
    /// The idempotency key belongs to this earlier plan (its record, to
    /// compare the specs); nothing was inserted.
    Existing {
        id: i64,
        record: Vec<u8>,
    },
}

/// A plan as stored: the record as submitted and the live state.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanRow {
    pub id: i64,
    /// pending, running, succeeded, failed, cancelled
    pub state: String,
    pub record: Vec<u8>,
    pub reason: Option<String>,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    /// Bumped by every change of the plan or one of its steps.
    pub revision: i64,
    /// In the plan's order.
    pub steps: Vec<StepStatus>,
}

/// A step's live state.
#[derive(Debug, Clone, PartialEq)]
pub struct StepStatus {
    pub step: String,
    /// waiting, ready, running, succeeded, failed, skipped, cancelled
    pub state: String,
    pub attempts: i32,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    /// The node running it (while it runs).
    pub node: Option<String>,
    /// The last attempt's full output, on the node that ran it.
    pub log_path: Option<String>,
}

/// What [`cancel_plan`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Cancel {
    NotFound,
    /// The plan had already ended, in this state.
    Finished(String),
    /// Cancelled now; these attempts lost their leases (their nodes stop
    /// them; whatever they write later is refused).
    Cancelled {
        revoked: Vec<i64>,
    },
}

/// A plan copied in from a one-machine store, as it stood there.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedPlan {
    /// Its id there; it gets a new one here.
    pub old_id: i64,
    /// Makes the record to store from the new id.
    pub record: Vec<u8>,
    pub idempotency_key: Option<String>,
    pub name: Option<String>,
    pub depth: i32,
    /// pending (also for a plan that was running: its steps run again
    /// here), succeeded, failed, cancelled.
    pub state: String,
    pub reason: Option<String>,
    pub created_ms: i64,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    pub steps: Vec<ImportedStep>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ImportedStep {
    pub new: NewStep,
    /// waiting (not run, or interrupted), succeeded, failed, skipped,
    /// cancelled.
    pub state: String,
    pub attempts: i32,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub stdout: String,
    pub stderr: String,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
}

/// Copies `plans` in, in one transaction, once per `source`: `Ok(None)`
/// when `source` was copied before. Each plan gets a new id (`record`
/// makes its record for it); plans not finished there are ready to run
/// here. An idempotency key another plan holds already is dropped from
/// the copy. Answers (old id, new id) per plan.
pub async fn import(
    shared: &Shared,
    source: &str,
    plans: &[ImportedPlan],
    record: impl Fn(&ImportedPlan, i64) -> Vec<u8>,
) -> Result<Option<Vec<(i64, i64)>>, PgError> {
    let mut c = shared.client().await?;
    let err = shared.query_err("copying plans in");
    let tx = c.transaction().await.map_err(&err)?;
    let fresh = tx
        .execute(
            "INSERT INTO flyto_imports (source, plans) VALUES ($1, $2)
             ON CONFLICT (source) DO NOTHING",
            &[&source, &(plans.len() as i32)],
        )
        .await
        .map_err(&err)?;
    if fresh == 0 {
        return Ok(None);
    }
    let at = |ms: Option<i64>| ms.map(|m| m as f64 / 1000.0);
    let mut ids = Vec::new();
    for p in plans {
        let id: i64 = tx
            .query_one("SELECT nextval('flyto_plan_ids')", &[])
            .await
            .map_err(&err)?
            .get(0);
        let key_taken = match &p.idempotency_key {
            Some(k) => tx
                .query_opt("SELECT 1 FROM flyto_plans WHERE idempotency_key = $1", &[k])
                .await
                .map_err(&err)?
                .is_some(),
            None => false,
        };
        let key = p.idempotency_key.clone().filter(|_| !key_taken);
        tx.execute(
            "INSERT INTO flyto_plans (id, state, record, idempotency_key, name, reason,
                 created_at, started_at, finished_at)
             VALUES ($1, $2, $3, $4, $5, $6, to_timestamp($7), to_timestamp($8), to_timestamp($9))",
            &[
                &id,
                &p.state,
                &record(p, id),
                &key,
                &p.name,
                &p.reason,
                &(p.created_ms as f64 / 1000.0),
                &at(p.started_ms),
                &at(p.finished_ms),
            ],
        )
        .await
        .map_err(&err)?;
        for (i, s) in p.steps.iter().enumerate() {
            tx.execute(
                "INSERT INTO flyto_steps (plan, step, position, deps, state, max_attempts,
                     retry_on_lease_loss, depth, attempts, exit_code, error, output, stderr,
                     started_at, finished_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
                     to_timestamp($14), to_timestamp($15))",
                &[
                    &id,
                    &s.new.step,
                    &(i as i32),
                    &s.new.deps,
                    &s.state,
                    &s.new.max_attempts,
                    &s.new.retry_on_lease_loss,
                    &p.depth,
                    &s.attempts,
                    &s.exit_code,
                    &s.error,
                    &s.stdout,
                    &s.stderr,
                    &at(s.started_ms),
                    &at(s.finished_ms),
                ],
            )
            .await
            .map_err(&err)?;
        }
        if p.state == "pending" {
            // Its waiting steps whose dependencies succeeded are ready.
            settle(shared, &tx, id, Moved::Any).await?;
        }
        ids.push((p.old_id, id));
    }
    tx.execute("SELECT pg_notify($1, '')", &[&WORK_CHANNEL])
        .await
        .map_err(&err)?;
    tx.commit().await.map_err(&err)?;
    Ok(Some(ids))
}

/// A fresh plan id (ids are never reused, also when a submit then fails).
pub async fn next_plan_id(shared: &Shared) -> Result<i64, PgError> {
    let c = shared.client().await?;
    Ok(c.query_one("SELECT nextval('flyto_plan_ids')", &[])
        .await
        .map_err(shared.query_err("taking a plan id"))?
        .get(0))
}

/// Inserts a plan and its steps (ready, or waiting for their deps) in one
/// transaction, and tells the nodes there is work.
pub async fn insert_plan(shared: &Shared, plan: &NewPlan) -> Result<Inserted, PgError> {
    let mut c = shared.client().await?;
    let err = shared.query_err("submitting a plan");
    let tx = c.transaction().await.map_err(&err)?;
    let inserted = tx
        .execute(
            "INSERT INTO flyto_plans (id, state, record, idempotency_key, name)
             VALUES ($1, 'pending', $2, $3, $4)
             ON CONFLICT (idempotency_key) DO NOTHING",
            &[&plan.id, &plan.record, &plan.idempotency_key, &plan.name],
        )
        .await
        .map_err(&err)?;
    if inserted == 0 {
        let row = tx
            .query_one(
                "SELECT id, record FROM flyto_plans WHERE idempotency_key = $1",
                &[&plan.idempotency_key],
            )
            .await
            .map_err(&err)?;
        return Ok(Inserted::Existing {
            id: row.get(0),
            record: row.get(1),
        });
    }
    let insert = tx
        .prepare(
            "INSERT INTO flyto_steps (plan, step, position, deps, state, max_attempts,
                 retry_on_lease_loss, depth)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .await
        .map_err(&err)?;
    for (i, s) in plan.steps.iter().enumerate() {
        let state = if s.deps.is_empty() {
            "ready"
        } else {
            "waiting"
        };
        tx.execute(
            &insert,
            &[
                &plan.id,
                &s.step,
                &(i as i32),
                &s.deps,
                &state,
                &s.max_attempts,
                &s.retry_on_lease_loss,
                &plan.depth,
            ],
        )
        .await
        .map_err(&err)?;
    }
    tx.execute("SELECT pg_notify($1, '')", &[&WORK_CHANNEL])
        .await
        .map_err(&err)?;
    tx.commit().await.map_err(&err)?;
    Ok(Inserted::New)
}

const PLAN_COLUMNS: &str = "id, state, record, reason,
     (extract(epoch FROM started_at) * 1000)::bigint,
     (extract(epoch FROM finished_at) * 1000)::bigint, revision";

fn plan_row(r: &tokio_postgres::Row) -> PlanRow {
    PlanRow {
        id: r.get(0),
        state: r.get(1),
        record: r.get(2),
        reason: r.get(3),
        started_ms: r.get(4),
        finished_ms: r.get(5),
        revision: r.get(6),
        steps: Vec::new(),
    }
}

/// The steps of `plans`, each plan's in its order.
async fn steps_of(
    shared: &Shared,
    c: &impl GenericClient,
    rows: &mut [PlanRow],
) -> Result<(), PgError> {
    if rows.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = rows.iter().map(|p| p.id).collect();
    let steps = c
        .query(
            "SELECT plan, step, state, attempts, exit_code, error, output, stderr,
                 (extract(epoch FROM started_at) * 1000)::bigint,
                 (extract(epoch FROM finished_at) * 1000)::bigint, lease_node, log_path
             FROM flyto_steps WHERE plan = ANY($1) ORDER BY plan, position",
            &[&ids],
        )
        .await
        .map_err(shared.query_err("reading steps"))?;
    for s in &steps {
        let plan: i64 = s.get(0);
        if let Some(p) = rows.iter_mut().find(|p| p.id == plan) {
            p.steps.push(StepStatus {
                step: s.get(1),
                state: s.get(2),
                attempts: s.get(3),
                exit_code: s.get(4),
                error: s.get(5),
                stdout: s.get(6),
                stderr: s.get(7),
                started_ms: s.get(8),
                finished_ms: s.get(9),
                node: s.get(10),
                log_path: s.get(11),
            });
        }
    }
    Ok(())
}

/// A plan's record as submitted, without its live state (what a node
/// needs to run one of its steps).
pub async fn get_record(shared: &Shared, id: i64) -> Result<Option<Vec<u8>>, PgError> {
    let c = shared.client().await?;
    Ok(
        c.query_opt("SELECT record FROM flyto_plans WHERE id = $1", &[&id])
            .await
            .map_err(shared.query_err("reading a plan's record"))?
            .map(|r| r.get(0)),
    )
}

pub async fn get_plan(shared: &Shared, id: i64) -> Result<Option<PlanRow>, PgError> {
    let c = shared.client().await?;
    let row = c
        .query_opt(
            &format!("SELECT {PLAN_COLUMNS} FROM flyto_plans WHERE id = $1"),
            &[&id],
        )
        .await
        .map_err(shared.query_err("reading a plan"))?;
    let mut rows: Vec<PlanRow> = row.iter().map(plan_row).collect();
    steps_of(shared, &**c, &mut rows).await?;
    Ok(rows.pop())
}

/// Newest first; every plan when `state` is `None`.
pub async fn list_plans(
    shared: &Shared,
    state: Option<&str>,
    limit: i64,
) -> Result<Vec<PlanRow>, PgError> {
    let c = shared.client().await?;
    let rows = c
        .query(
            &format!(
                "SELECT {PLAN_COLUMNS} FROM flyto_plans
                 WHERE $1::text IS NULL OR state = $1 ORDER BY id DESC LIMIT $2"
            ),
            &[&state, &limit],
        )
        .await
        .map_err(shared.query_err("listing plans"))?;
    let mut rows: Vec<PlanRow> = rows.iter().map(plan_row).collect();
    steps_of(shared, &**c, &mut rows).await?;
    Ok(rows)
}

pub async fn count_plans(shared: &Shared, state: Option<&str>) -> Result<i64, PgError> {
    let c = shared.client().await?;
    Ok(c.query_one(
        "SELECT count(*) FROM flyto_plans WHERE $1::text IS NULL OR state = $1",
        &[&state],
    )
    .await
    .map_err(shared.query_err("counting plans"))?
    .get(0))
}

/// Plans per state, and steps running on any node.
/// Plans per state, the steps running, and the database's size in bytes.
pub async fn counts(shared: &Shared) -> Result<(Vec<(String, i64)>, i64, i64), PgError> {
    let c = shared.client().await?;
    let err = shared.query_err("counting plans");
    let rows = c
        .query(
            "SELECT state, count(*) FROM flyto_plans GROUP BY state",
            &[],
        )
        .await
        .map_err(&err)?;
    let running: i64 = c
        .query_one(
            "SELECT count(*) FROM flyto_steps WHERE state = 'running'",
            &[],
        )
        .await
        .map_err(&err)?
        .get(0);
    let size: i64 = c
        .query_one("SELECT pg_database_size(current_database())", &[])
        .await
        .map_err(&err)?
        .get(0);
    Ok((
        rows.iter().map(|r| (r.get(0), r.get(1))).collect(),
        running,
        size,
    ))
}

/// The plans named `name` with their states, newest first.
pub async fn find_by_name(shared: &Shared, name: &str) -> Result<Vec<(i64, String)>, PgError> {
    let c = shared.client().await?;
    let rows = c
        .query(
            "SELECT id, state FROM flyto_plans WHERE name = $1 ORDER BY id DESC",
            &[&name],
        )
        .await
        .map_err(shared.query_err("finding plans by name"))?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Deletes finished plans whose end is older than `ttl` (by the
/// database's clock), with their steps and attempts, at most 1000 at a
/// time; answers their ids. Nodes doing it at once delete each plan once.
pub async fn expire(shared: &Shared, ttl: std::time::Duration) -> Result<Vec<i64>, PgError> {
    let mut c = shared.client().await?;
    let err = shared.query_err("removing expired plans");
    let tx = c.transaction().await.map_err(&err)?;
    let gone: Vec<i64> = tx
        .query(
            "DELETE FROM flyto_plans WHERE id IN (
                 SELECT id FROM flyto_plans
                 WHERE state IN ('succeeded', 'failed', 'cancelled')
                   AND finished_at < now() - make_interval(secs => $1)
                 ORDER BY id LIMIT 1000
                 FOR UPDATE SKIP LOCKED)
             RETURNING id",
            &[&ttl.as_secs_f64()],
        )
        .await
        .map_err(&err)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !gone.is_empty() {
        tx.execute("DELETE FROM flyto_steps WHERE plan = ANY($1)", &[&gone])
            .await
            .map_err(&err)?;
        tx.execute("DELETE FROM flyto_attempts WHERE plan = ANY($1)", &[&gone])
            .await
            .map_err(&err)?;
    }
    tx.commit().await.map_err(&err)?;
    Ok(gone)
}

/// Plans that ended at or after `since_ms` (ms since the epoch) and whose
/// `plan_finished` hooks no node has run, marked as run here: one node
/// takes each, whichever ended it.
pub async fn take_finished(shared: &Shared, since_ms: i64) -> Result<Vec<i64>, PgError> {
    let c = shared.client().await?;
    Ok(c.query(
        "UPDATE flyto_plans SET hooked = true
             WHERE NOT hooked AND finished_at IS NOT NULL
               AND finished_at >= to_timestamp($1::bigint / 1000.0)
             RETURNING id",
        &[&since_ms],
    )
    .await
    .map_err(shared.query_err("taking finished plans for their hooks"))?
    .iter()
    .map(|r| r.get(0))
    .collect())
}

/// Which of `ids` are plans in the database.
pub async fn existing(shared: &Shared, ids: &[i64]) -> Result<Vec<i64>, PgError> {
    let c = shared.client().await?;
    Ok(
        c.query("SELECT id FROM flyto_plans WHERE id = ANY($1)", &[&ids])
            .await
            .map_err(shared.query_err("looking plans up"))?
            .iter()
            .map(|r| r.get(0))
            .collect(),
    )
}

/// Deletes finished plan `id` with its steps and attempts; `Ok(false)`
/// when there is no finished plan `id`.
pub async fn delete_plan(shared: &Shared, id: i64) -> Result<bool, PgError> {
    let mut c = shared.client().await?;
    let err = shared.query_err("removing a plan");
    let tx = c.transaction().await.map_err(&err)?;
    let gone = tx
        .execute(
            "DELETE FROM flyto_plans
             WHERE id = $1 AND state IN ('succeeded', 'failed', 'cancelled')",
            &[&id],
        )
        .await
        .map_err(&err)?;
    if gone == 1 {
        tx.execute("DELETE FROM flyto_steps WHERE plan = $1", &[&id])
            .await
            .map_err(&err)?;
        tx.execute("DELETE FROM flyto_attempts WHERE plan = $1", &[&id])
            .await
            .map_err(&err)?;
    }
    tx.commit().await.map_err(&err)?;
    Ok(gone == 1)
}

/// Cancels a plan: its steps that have not run are cancelled, and those
/// running lose their leases (their nodes stop them; their later writes
/// are refused).
pub async fn cancel_plan(shared: &Shared, id: i64, reason: &str) -> Result<Cancel, PgError> {
    let mut c = shared.client().await?;
    let err = shared.query_err("cancelling a plan");
    let tx = c.transaction().await.map_err(&err)?;
    // Step rows before the plan row, as everywhere (see `settle`).
    tx.execute(
        "SELECT 1 FROM flyto_steps WHERE plan = $1 FOR UPDATE",
        &[&id],
    )
    .await
    .map_err(&err)?;
    let Some(row) = tx
        .query_opt(
            "SELECT state FROM flyto_plans WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .await
        .map_err(&err)?
    else {
        return Ok(Cancel::NotFound);
    };
    let state: String = row.get(0);
    if matches!(state.as_str(), "succeeded" | "failed" | "cancelled") {
        return Ok(Cancel::Finished(state));
    }
    let revoked = tx
        .query(
            "WITH old AS (
                 SELECT step, lease_token FROM flyto_steps
                 WHERE plan = $1 AND state IN ('waiting', 'ready', 'running')
                 FOR UPDATE
             )
             UPDATE flyto_steps s
             SET state = 'cancelled', finished_at = clock_timestamp(),
                 -- Sled's words: a step that never ran says so.
                 error = CASE WHEN s.state = 'running' THEN $2::text
                              ELSE $2::text || ' before it started' END,
                 lease_token = NULL, lease_node = NULL, lease_until = NULL
             FROM old WHERE s.plan = $1 AND s.step = old.step
             RETURNING old.lease_token",
            &[&id, &reason],
        )
        .await
        .map_err(&err)?;
    let revoked: Vec<i64> = revoked
        .iter()
        .filter_map(|r| r.get::<_, Option<i64>>(0))
        .collect();
    tx.execute(
        "UPDATE flyto_attempts SET finished_at = clock_timestamp(), outcome = 'cancelled'
         WHERE token = ANY($1)",
        &[&revoked],
    )
    .await
    .map_err(&err)?;
    tx.execute(
        "UPDATE flyto_plans SET state = 'cancelled', reason = $2, finished_at = clock_timestamp(),
             revision = revision + 1
         WHERE id = $1",
        &[&id, &reason],
    )
    .await
    .map_err(&err)?;
    tx.execute(
        "SELECT pg_notify($1, $2)",
        &[&PLANS_CHANNEL, &id.to_string()],
    )
    .await
    .map_err(&err)?;
    tx.commit().await.map_err(&err)?;
    Ok(Cancel::Cancelled { revoked })
}

/// What moved a plan's steps, for [`settle`]: what it has to look at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Moved {
    /// A step succeeded: steps waiting for it may be ready.
    Succeeded,
    /// A step failed: steps behind it are skipped.
    Failed,
    /// Either (the sweep rescues and fails steps together).
    Any,
}

/// Moves plan `plan` on after one of its steps changed, in that change's
/// transaction: steps whose dependencies all succeeded become ready, steps
/// behind one that did not are skipped, and once no step is left to run
/// the plan ends (succeeded when every step did). Bumps the revision and
/// tells watchers; tells nodes when steps became ready.
pub(super) async fn settle(
    shared: &Shared,
    tx: &tokio_postgres::Transaction<'_>,
    plan: i64,
    moved: Moved,
) -> Result<(), PgError> {
    let err = shared.query_err("moving a plan on");
    // One settle per plan at a time: two steps of a plan ending at once
    // on two nodes would otherwise each see the other still running, and
    // neither would end the plan. Locks go step rows first, then the plan
    // row, in every transaction (claim, complete, sweep, cancel). The lock
    // is its own statement: the statements after it see what the
    // transaction it waited for committed.
    tx.execute(
        "SELECT 1 FROM flyto_plans WHERE id = $1 FOR UPDATE",
        &[&plan],
    )
    .await
    .map_err(&err)?;
    let mut ready = 0;
    if moved != Moved::Failed {
        ready = tx
            .execute(
                "UPDATE flyto_steps w SET state = 'ready'
                 WHERE w.plan = $1 AND w.state = 'waiting'
                   AND NOT EXISTS (
                       SELECT 1 FROM unnest(w.deps) AS d(step)
                       WHERE NOT EXISTS (
                           SELECT 1 FROM flyto_steps s
                           WHERE s.plan = $1 AND s.step = d.step AND s.state = 'succeeded'))",
                &[&plan],
            )
            .await
            .map_err(&err)?;
    }
    // Skipping is transitive: a plan has at most `max_steps` steps, and
    // each round skips at least one.
    if moved != Moved::Succeeded {
        loop {
            let skipped = tx
                .execute(
                    "UPDATE flyto_steps w
                     SET state = 'skipped', finished_at = clock_timestamp(),
                         -- The words of sled's plans (dag.rs): the first
                         -- dependency, in the step's order, that ended badly.
                         error = (
                             SELECT 'skipped: dependency `' || s.step || '` ' || s.state
                             FROM unnest(w.deps) WITH ORDINALITY AS d(step, n)
                             JOIN flyto_steps s ON s.plan = $1 AND s.step = d.step
                             WHERE s.state IN ('failed', 'skipped', 'cancelled')
                             ORDER BY d.n LIMIT 1)
                     WHERE w.plan = $1 AND w.state = 'waiting'
                       AND EXISTS (
                           SELECT 1 FROM unnest(w.deps) AS d(step)
                           JOIN flyto_steps s ON s.plan = $1 AND s.step = d.step
                           WHERE s.state IN ('failed', 'skipped', 'cancelled'))",
                    &[&plan],
                )
                .await
                .map_err(&err)?;
            if skipped == 0 {
                break;
            }
        }
    }
    // The plan's state from its steps', its revision, and the watchers
    // told, in one statement.
    tx.execute(
        "WITH s AS (
             SELECT count(*) FILTER (WHERE state IN ('waiting', 'ready', 'running')) AS open,
                    count(*) FILTER (WHERE state <> 'succeeded') AS bad,
                    min(started_at) AS first,
                    -- Why it failed, as on one machine: its first failed step.
                    (SELECT format('step `%s` failed: %s', step, coalesce(error, 'failed'))
                     FROM flyto_steps WHERE plan = $1 AND state = 'failed'
                     ORDER BY position LIMIT 1) AS why
             FROM flyto_steps WHERE plan = $1
         ), next AS (
             SELECT CASE
                 WHEN p.state IN ('succeeded', 'failed', 'cancelled') THEN p.state
                 WHEN s.open = 0 AND s.bad > 0 THEN 'failed'
                 WHEN s.open = 0 THEN 'succeeded'
                 WHEN s.first IS NOT NULL THEN 'running'
                 ELSE p.state END AS state, s.first, s.why
             FROM flyto_plans p, s WHERE p.id = $1
         )
         UPDATE flyto_plans p SET
             revision = p.revision + 1,
             state = next.state,
             reason = CASE WHEN p.reason IS NULL AND next.state = 'failed' THEN next.why
                           ELSE p.reason END,
             started_at = coalesce(p.started_at, next.first),
             finished_at = CASE WHEN p.finished_at IS NULL
                                 AND next.state IN ('succeeded', 'failed', 'cancelled')
                            THEN clock_timestamp() ELSE p.finished_at END
         FROM next WHERE p.id = $1
         RETURNING pg_notify($2, p.id::text)",
        &[&plan, &PLANS_CHANNEL],
    )
    .await
    .map_err(&err)?;
    if ready > 0 {
        tx.execute("SELECT pg_notify($1, '')", &[&WORK_CHANNEL])
            .await
            .map_err(&err)?;
    }
    Ok(())
}
