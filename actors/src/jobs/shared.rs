//! Jobs on the shared store: every node's jobs actor evaluates the same
//! schedules, and this is where they meet. A fire is an insert keyed by
//! (job, instant, manual, attempt) with ON CONFLICT DO NOTHING: only the
//! node whose insert wins submits the plan, so there is no leader to elect.
//! A plan's end is counted by the one node whose compare-and-set on the
//! job's `counted` plan wins; what that end owes a chat is a row owned by
//! the node that delivers it, taken over once that node stops
//! heartbeating. Writes merge the fields a fire or a count changes into
//! the row as it is, so an edit on one node and a fire on another both
//! hold. Every change NOTIFYs [`JOBS_CHANNEL`]. It may not submit or run
//! anything; the jobs actor does.

use super::model::{
    FireOutcome, FireRecord, JOB_FORMAT_VERSION, JobRecord, JobSnapshot, JobStore,
    NOTIFY_FORMAT_VERSION, PendingNotify, decode_fire, decode_job, decode_notify, format_id,
};
use crate::kernel::{AnswerFut, Reject};
use crate::plans::store::pg::unavailable;
use crate::store::encode_record;
use crate::store::postgres::Shared;
use crate::store::postgres::claims::LEASE;
use crate::store::postgres::imports::{Copied, drop_taken_name, first_copy, next_value};
use crate::store::postgres::listen::{Listener, Wake};
use flyto_protocol::ErrorCode;
use std::collections::HashMap;
use std::sync::Arc;

/// Woken at every change of a job, its fires or what it owes.
pub const JOBS_CHANNEL: &str = "flyto_jobs";

#[derive(Clone)]
pub struct SharedJobStore {
    pub shared: Shared,
    /// This process's node id: the owner of the notifications it delivers.
    pub node: String,
    /// The daemon's one listener (on [`JOBS_CHANNEL`] among others).
    pub listener: Arc<Listener>,
}

fn outcome_word(o: &FireOutcome) -> &'static str {
    match o {
        FireOutcome::Firing => "firing",
        FireOutcome::Submitted { .. } => "submitted",
        FireOutcome::Skipped { .. } => "skipped",
        FireOutcome::Missed { .. } => "missed",
        FireOutcome::Failed { .. } => "failed",
    }
}

fn corrupt(e: impl std::fmt::Display) -> Reject {
    Reject::internal(format!("a job row on the shared store cannot be read: {e}"))
}

/// What a fire (`counting`: a run's end) changed in `job`, applied to the
/// row as it is (`current`, which another node may have edited since):
/// the latest handled instant never goes back; a counted failure adds
/// one to the row's count (a success clears it), and stops the job when
/// the row's own limit is reached; a stop a fire recorded (a one-shot's)
/// is kept.
fn merged(current: &JobRecord, job: &JobRecord, counting: bool) -> JobRecord {
    let mut out = current.clone();
    out.handled_ms = current.handled_ms.max(job.handled_ms);
    if counting {
        out.consecutive_failures = if job.consecutive_failures == 0 {
            0
        } else {
            current.consecutive_failures + 1
        };
        let reached = out.consecutive_failures >= current.max_consecutive_failures.max(1);
        if reached && current.stopped.is_none() && job.stopped.is_some() {
            out.enabled = false;
            out.stopped.clone_from(&job.stopped);
        }
        return out;
    }
    if job.stopped.is_some() && current.stopped.is_none() {
        out.enabled = job.enabled;
        out.stopped.clone_from(&job.stopped);
    }
    out
}

impl SharedJobStore {
    fn err(&self, what: &'static str) -> impl Fn(tokio_postgres::Error) -> Reject + '_ {
        let query = self.shared.query_err(what);
        move |e| {
            if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) {
                return Reject::new(
                    ErrorCode::Conflict,
                    "another node just gave a job this name: choose another name",
                );
            }
            unavailable(query(e))
        }
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, Reject> {
        self.shared.client().await.map_err(unavailable)
    }

    /// The job's row, locked until `tx` ends: (record, counted plan).
    async fn locked(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        id: u64,
    ) -> Result<Option<(JobRecord, Option<String>)>, Reject> {
        let row = tx
            .query_opt(
                "SELECT record, counted FROM flyto_jobs WHERE id = $1 FOR UPDATE",
                &[&(id as i64)],
            )
            .await
            .map_err(self.err("reading a job"))?;
        match row {
            None => Ok(None),
            Some(r) => {
                let rec = decode_job(format_id(id), r.get::<_, &[u8]>(0)).map_err(corrupt)?;
                Ok(Some((rec, r.get(1))))
            }
        }
    }

    async fn write_job(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        rec: &JobRecord,
        counted: Option<&str>,
    ) -> Result<(), Reject> {
        tx.execute(
            "UPDATE flyto_jobs SET name = $2, record = $3, counted = COALESCE($4, counted),
                    changed_at = clock_timestamp()
             WHERE id = $1",
            &[
                &(rec.id as i64),
                &rec.name,
                &encode_record(JOB_FORMAT_VERSION, rec),
                &counted,
            ],
        )
        .await
        .map_err(self.err("writing a job"))?;
        Ok(())
    }

    /// Tells every node's jobs actor to look again (delivered at commit).
    async fn changed(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        id: u64,
    ) -> Result<(), Reject> {
        tx.execute("SELECT pg_notify($1, $2)", &[&JOBS_CHANNEL, &format_id(id)])
            .await
            .map_err(self.err("announcing a job change"))?;
        Ok(())
    }

    async fn do_put(&self, job: &JobRecord) -> Result<(), Reject> {
        let mut c = self.client().await?;
        let tx = c.transaction().await.map_err(self.err("writing a job"))?;
        match self.locked(&tx, job.id).await? {
            Some((current, _)) => {
                // An edit from this node's copy: the handled instant never
                // goes back, and the failure count is the row's, except
                // when the edit resumes a stopped or paused job.
                let mut rec = job.clone();
                rec.handled_ms = current.handled_ms.max(job.handled_ms);
                let resumes = (!current.enabled || current.stopped.is_some())
                    && job.enabled
                    && job.stopped.is_none();
                if !resumes {
                    rec.consecutive_failures = current.consecutive_failures;
                }
                self.write_job(&tx, &rec, None).await?;
            }
            None => {
                tx.execute(
                    "INSERT INTO flyto_jobs (id, name, record) VALUES ($1, $2, $3)",
                    &[
                        &(job.id as i64),
                        &job.name,
                        &encode_record(JOB_FORMAT_VERSION, job),
                    ],
                )
                .await
                .map_err(self.err("creating a job"))?;
            }
        }
        self.changed(&tx, job.id).await?;
        tx.commit().await.map_err(self.err("writing a job"))
    }

    async fn do_delete(&self, id: u64) -> Result<(), Reject> {
        let mut c = self.client().await?;
        let tx = c.transaction().await.map_err(self.err("deleting a job"))?;
        for sql in [
            "DELETE FROM flyto_job_fires WHERE job = $1",
            "DELETE FROM flyto_job_notifies WHERE job = $1",
            "DELETE FROM flyto_jobs WHERE id = $1",
        ] {
            tx.execute(sql, &[&(id as i64)])
                .await
                .map_err(self.err("deleting a job"))?;
        }
        self.changed(&tx, id).await?;
        tx.commit().await.map_err(self.err("deleting a job"))
    }

    async fn do_get(&self, id: u64) -> Result<Option<JobRecord>, Reject> {
        let row = self
            .client()
            .await?
            .query_opt(
                "SELECT record FROM flyto_jobs WHERE id = $1",
                &[&(id as i64)],
            )
            .await
            .map_err(self.err("reading a job"))?;
        row.map(|r| decode_job(format_id(id), r.get::<_, &[u8]>(0)).map_err(corrupt))
            .transpose()
    }

    async fn do_snapshot(&self) -> Result<Vec<JobSnapshot>, Reject> {
        let c = self.client().await?;
        let err = self.err("reading the jobs");
        let fire = |r: &tokio_postgres::Row| -> Result<(u64, FireRecord), Reject> {
            let job = r.get::<_, i64>(0) as u64;
            let f = decode_fire(format_id(job), r.get::<_, &[u8]>(1)).map_err(corrupt)?;
            Ok((job, f))
        };
        let mut last = HashMap::new();
        for r in c
            .query(
                "SELECT DISTINCT ON (job) job, record FROM flyto_job_fires
                 WHERE record IS NOT NULL
                 ORDER BY job, instant_ms DESC, manual DESC, attempt DESC",
                &[],
            )
            .await
            .map_err(&err)?
        {
            let (job, f) = fire(&r)?;
            last.insert(job, f);
        }
        let mut submitted = HashMap::new();
        for r in c
            .query(
                "SELECT DISTINCT ON (job) job, record FROM flyto_job_fires
                 WHERE outcome = 'submitted' AND record IS NOT NULL
                 ORDER BY job, instant_ms DESC, manual DESC, attempt DESC",
                &[],
            )
            .await
            .map_err(&err)?
        {
            let (job, f) = fire(&r)?;
            submitted.insert(job, f);
        }
        let mut firing: HashMap<u64, Vec<FireRecord>> = HashMap::new();
        for r in c
            .query(
                "SELECT job, record FROM flyto_job_fires
                 WHERE outcome = 'firing' AND record IS NOT NULL
                 ORDER BY job, instant_ms, manual, attempt",
                &[],
            )
            .await
            .map_err(&err)?
        {
            let (job, f) = fire(&r)?;
            firing.entry(job).or_default().push(f);
        }
        let mut out = Vec::new();
        for r in c
            .query(
                "SELECT id, record, counted FROM flyto_jobs ORDER BY id",
                &[],
            )
            .await
            .map_err(&err)?
        {
            let id = r.get::<_, i64>(0) as u64;
            out.push(JobSnapshot {
                rec: decode_job(format_id(id), r.get::<_, &[u8]>(1)).map_err(corrupt)?,
                last_submitted: submitted.remove(&id),
                last: last.remove(&id),
                counted: r.get(2),
                firing: firing.remove(&id).unwrap_or_default(),
            });
        }
        Ok(out)
    }

    async fn do_claim_fire(&self, fire: &FireRecord, job: &JobRecord) -> Result<bool, Reject> {
        let mut c = self.client().await?;
        let err = self.err("recording a job fire");
        let tx = c.transaction().await.map_err(&err)?;
        let Some((current, _)) = self.locked(&tx, job.id).await? else {
            return Ok(false);
        };
        let n = tx
            .execute(
                "INSERT INTO flyto_job_fires
                     (job, instant_ms, manual, attempt, node, outcome, record)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT DO NOTHING",
                &[
                    &(fire.job as i64),
                    &(fire.instant_ms as i64),
                    &fire.manual,
                    &(fire.attempt as i32),
                    &self.node,
                    &outcome_word(&fire.outcome),
                    &encode_record(super::model::FIRE_FORMAT_VERSION, fire),
                ],
            )
            .await
            .map_err(&err)?;
        if n == 0 {
            return Ok(false);
        }
        self.write_job(&tx, &merged(&current, job, false), None)
            .await?;
        self.changed(&tx, job.id).await?;
        tx.commit().await.map_err(&err)?;
        Ok(true)
    }

    async fn do_fire_outcome(&self, fire: &FireRecord) -> Result<(), Reject> {
        let mut c = self.client().await?;
        let err = self.err("recording how a job fire ended");
        let tx = c.transaction().await.map_err(&err)?;
        tx.execute(
            "UPDATE flyto_job_fires SET outcome = $5, record = $6
             WHERE job = $1 AND instant_ms = $2 AND manual = $3 AND attempt = $4",
            &[
                &(fire.job as i64),
                &(fire.instant_ms as i64),
                &fire.manual,
                &(fire.attempt as i32),
                &outcome_word(&fire.outcome),
                &encode_record(super::model::FIRE_FORMAT_VERSION, fire),
            ],
        )
        .await
        .map_err(&err)?;
        self.changed(&tx, fire.job).await?;
        tx.commit().await.map_err(&err)
    }

    async fn do_fires(&self, job: u64) -> Result<Vec<FireRecord>, Reject> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT record FROM flyto_job_fires WHERE job = $1 AND record IS NOT NULL
                 ORDER BY instant_ms, manual, attempt",
                &[&(job as i64)],
            )
            .await
            .map_err(self.err("reading a job's fires"))?;
        rows.iter()
            .map(|r| decode_fire(format_id(job), r.get::<_, &[u8]>(0)).map_err(corrupt))
            .collect()
    }

    async fn do_put_accounted(
        &self,
        job: &JobRecord,
        plan: &str,
        notify: Option<&PendingNotify>,
    ) -> Result<bool, Reject> {
        let mut c = self.client().await?;
        let err = self.err("counting a job's run");
        let tx = c.transaction().await.map_err(&err)?;
        let Some((current, counted)) = self.locked(&tx, job.id).await? else {
            return Ok(false);
        };
        if counted.as_deref() == Some(plan) {
            return Ok(false);
        }
        self.write_job(&tx, &merged(&current, job, true), Some(plan))
            .await?;
        if let Some(n) = notify {
            tx.execute(
                "INSERT INTO flyto_job_notifies (job, key, owner, record) VALUES ($1, $2, $3, $4)
                 ON CONFLICT DO NOTHING",
                &[
                    &(job.id as i64),
                    &n.key,
                    &self.node,
                    &encode_record(NOTIFY_FORMAT_VERSION, n),
                ],
            )
            .await
            .map_err(&err)?;
        }
        self.changed(&tx, job.id).await?;
        tx.commit().await.map_err(&err)?;
        Ok(true)
    }

    /// Takes over the notifications whose node stopped heartbeating.
    async fn do_pending_notifies(&self) -> Result<Vec<(u64, PendingNotify)>, Reject> {
        let rows = self
            .client()
            .await?
            .query(
                "UPDATE flyto_job_notifies n SET owner = $1
                 WHERE owner <> $1 AND NOT EXISTS (
                     SELECT 1 FROM flyto_nodes
                     WHERE id = n.owner AND heartbeat_at > now() - make_interval(secs => $2))
                 RETURNING job, record",
                &[&self.node, &LEASE.as_secs_f64()],
            )
            .await
            .map_err(self.err("taking over owed notifications"))?;
        rows.iter()
            .map(|r| {
                let job = r.get::<_, i64>(0) as u64;
                let n = decode_notify(format_id(job), r.get::<_, &[u8]>(1)).map_err(corrupt)?;
                Ok((job, n))
            })
            .collect()
    }

    async fn do_notified(&self, id: u64, key: &str) -> Result<(), Reject> {
        self.client()
            .await?
            .execute(
                "DELETE FROM flyto_job_notifies WHERE job = $1 AND key = $2",
                &[&(id as i64), &key],
            )
            .await
            .map_err(self.err("clearing an owed notification"))?;
        Ok(())
    }

    async fn do_next_id(&self) -> Result<u64, Reject> {
        let row = self
            .client()
            .await?
            .query_one("SELECT nextval('flyto_job_ids')", &[])
            .await
            .map_err(self.err("taking a job id"))?;
        Ok(row.get::<_, i64>(0) as u64)
    }
}

impl JobStore for SharedJobStore {
    fn next_id(&self) -> AnswerFut<'_, u64> {
        Box::pin(self.do_next_id())
    }
    fn put<'a>(&'a self, job: &'a JobRecord) -> AnswerFut<'a, ()> {
        Box::pin(self.do_put(job))
    }
    fn delete(&self, id: u64) -> AnswerFut<'_, ()> {
        Box::pin(self.do_delete(id))
    }
    fn get(&self, id: u64) -> AnswerFut<'_, Option<JobRecord>> {
        Box::pin(self.do_get(id))
    }
    fn snapshot(&self) -> AnswerFut<'_, Vec<JobSnapshot>> {
        Box::pin(self.do_snapshot())
    }
    fn claim_fire<'a>(&'a self, fire: &'a FireRecord, job: &'a JobRecord) -> AnswerFut<'a, bool> {
        Box::pin(self.do_claim_fire(fire, job))
    }
    fn fire_outcome<'a>(&'a self, fire: &'a FireRecord) -> AnswerFut<'a, ()> {
        Box::pin(self.do_fire_outcome(fire))
    }
    fn fires(&self, job: u64) -> AnswerFut<'_, Vec<FireRecord>> {
        Box::pin(self.do_fires(job))
    }
    fn put_accounted<'a>(
        &'a self,
        job: &'a JobRecord,
        plan: &'a str,
        notify: Option<&'a PendingNotify>,
    ) -> AnswerFut<'a, bool> {
        Box::pin(self.do_put_accounted(job, plan, notify))
    }
    fn pending_notifies(&self) -> AnswerFut<'_, Vec<(u64, PendingNotify)>> {
        Box::pin(self.do_pending_notifies())
    }
    fn notified<'a>(&'a self, id: u64, key: &'a str) -> AnswerFut<'a, ()> {
        Box::pin(self.do_notified(id, key))
    }
    /// A committed write is durable: nothing to wait for.
    fn synced(&self) -> AnswerFut<'_, ()> {
        Box::pin(async { Ok(()) })
    }
    fn changes(&self) -> Option<Wake> {
        Some(self.listener.subscribe(JOBS_CHANNEL))
    }
}

/// A job of a one-machine store, as `flytod migrate --from-sled` copies it.
pub struct ImportedJob {
    pub rec: JobRecord,
    /// Oldest first.
    pub fires: Vec<FireRecord>,
    pub counted: Option<String>,
}

/// Copies `jobs` of the store at `source` once (`None`: copied before),
/// each under a new id, with its fires; `plans` maps the store's plan
/// numbers to the ones their copies got, and a fire whose plan was not
/// copied is left out. In one transaction: all or nothing.
pub async fn import(
    shared: &Shared,
    source: &str,
    jobs: Vec<ImportedJob>,
    plans: &HashMap<u64, u64>,
) -> Result<Option<Vec<Copied>>, Reject> {
    let err = |what| {
        let q = shared.query_err(what);
        move |e| unavailable(q(e))
    };
    let mut c = shared.client().await.map_err(unavailable)?;
    let tx = c.transaction().await.map_err(err("copying jobs"))?;
    if !first_copy(&tx, source, "jobs", jobs.len())
        .await
        .map_err(err("copying jobs"))?
    {
        return Ok(None);
    }
    let remap = |plan: &str| {
        crate::plans::model::parse_id(plan)
            .and_then(|old| plans.get(&old))
            .map(|new| crate::plans::model::format_id(*new))
    };
    let mut copied = Vec::new();
    for job in jobs {
        let id = next_value(&tx, "flyto_job_ids")
            .await
            .map_err(err("taking a job id"))?;
        let mut rec = job.rec.clone();
        rec.id = id;
        let name_dropped = drop_taken_name(&tx, "flyto_jobs", &mut rec.name)
            .await
            .map_err(err("copying jobs"))?;
        let counted = job.counted.as_deref().and_then(remap);
        tx.execute(
            "INSERT INTO flyto_jobs (id, name, record, counted) VALUES ($1, $2, $3, $4)",
            &[
                &(id as i64),
                &rec.name,
                &encode_record(JOB_FORMAT_VERSION, &rec),
                &counted,
            ],
        )
        .await
        .map_err(err("copying jobs"))?;
        for mut fire in job.fires {
            fire.job = id;
            if let FireOutcome::Submitted { plan } = &fire.outcome {
                match remap(plan) {
                    Some(new) => fire.outcome = FireOutcome::Submitted { plan: new },
                    None => continue,
                }
            }
            tx.execute(
                "INSERT INTO flyto_job_fires
                     (job, instant_ms, manual, attempt, node, outcome, record)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &(id as i64),
                    &(fire.instant_ms as i64),
                    &fire.manual,
                    &(fire.attempt as i32),
                    &source,
                    &outcome_word(&fire.outcome),
                    &encode_record(super::model::FIRE_FORMAT_VERSION, &fire),
                ],
            )
            .await
            .map_err(err("copying jobs"))?;
        }
        copied.push(Copied {
            old: job.rec.id,
            new: id,
            name_dropped,
        });
    }
    tx.commit().await.map_err(err("copying jobs"))?;
    Ok(Some(copied))
}
