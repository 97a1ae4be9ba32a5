//! jobs: a job is a schedule that submits plans through the one execution
//! path (the scheduler's `Submit`). This module holds the records, the
//! [`JobStore`] trait every backend implements and its sled side (tree
//! `jobs`, through the store's group commit): `j<id>` a job,
//! `f<id><instant>` a fire. A fire is keyed by (job, scheduled instant
//! in UTC) and written durably before its plan is submitted; the plan's
//! idempotency key is derived from it, so a crash anywhere between the two
//! resubmits the same plan under the same key and the scheduler answers
//! the plan it already has: one plan per instant.

use crate::kernel::{AnswerFut, Reject};
use crate::store::postgres::listen::Wake;
use crate::store::{Batch, Store, StoreError, decode_record, encode_record};
use flyto_protocol::PlanSpec;
use serde::{Deserialize, Serialize};

pub const JOB_FORMAT_VERSION: u32 = 1;
pub const FIRE_FORMAT_VERSION: u32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// A new session per run.
    Isolated,
    /// One session, named after the job, keeps its history across runs.
    Persistent,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Isolated => "isolated",
            Mode::Persistent => "persistent",
        }
    }
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "isolated" => Some(Mode::Isolated),
            "persistent" => Some(Mode::Persistent),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Template {
    /// One agent step with this prompt.
    Prompt(String),
    /// A whole plan.
    Plan(PlanSpec),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: u64,
    pub name: Option<String>,
    pub schedule: String,
    pub tz: String,
    pub template: Template,
    pub mode: Mode,
    pub workdir: Option<String>,
    pub timeout_secs: Option<u64>,
    pub notify: Option<String>,
    pub enabled: bool,
    pub expires_ms: Option<u64>,
    pub max_consecutive_failures: u32,
    /// At most this many seconds of fixed, per-job offset.
    pub jitter_secs: u64,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// The latest scheduled instant handled (fired, skipped or missed):
    /// fires after a restart start after it.
    pub handled_ms: Option<u64>,
    pub consecutive_failures: u32,
    /// Why the job stopped by itself (failures, expiry, a one-shot done).
    pub stopped: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FireOutcome {
    /// Recorded; the plan is being submitted.
    Firing,
    Submitted {
        plan: String,
    },
    Skipped {
        why: String,
    },
    /// Downtime covered `count` instants, `first` to the key's instant.
    Missed {
        count: u64,
        first_ms: u64,
    },
    Failed {
        why: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FireRecord {
    pub job: u64,
    pub instant_ms: u64,
    /// When it was recorded.
    pub at_ms: u64,
    pub manual: bool,
    pub outcome: FireOutcome,
    /// The plan submitted (kept, so a resubmit after a crash is the same
    /// plan under the same key even if the job was edited since).
    pub plan: Option<PlanSpec>,
    /// 0 for the instant's fire; 1, 2, … for retries after a transient
    /// failure.
    pub attempt: u32,
}

/// Format 1, before retries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FireRecordV1 {
    pub job: u64,
    pub instant_ms: u64,
    pub at_ms: u64,
    pub manual: bool,
    pub outcome: FireOutcome,
    pub plan: Option<PlanSpec>,
}

fn migrate_fire(version: u32, body: &[u8]) -> Result<FireRecord, String> {
    match version {
        1 => {
            let v: FireRecordV1 = crate::store::decode_body(body)?;
            Ok(FireRecord {
                job: v.job,
                instant_ms: v.instant_ms,
                at_ms: v.at_ms,
                manual: v.manual,
                outcome: v.outcome,
                plan: v.plan,
                attempt: 0,
            })
        }
        v => Err(format!("fire record format {v} is not known")),
    }
}

/// A job record as any backend stores it.
pub fn decode_job(key: impl std::fmt::Display, bytes: &[u8]) -> Result<JobRecord, StoreError> {
    decode_record(key, bytes, JOB_FORMAT_VERSION, |v, _| {
        Err(format!("job record format {v} is not known"))
    })
}

/// A fire record as any backend stores it, older formats included.
pub fn decode_fire(key: impl std::fmt::Display, bytes: &[u8]) -> Result<FireRecord, StoreError> {
    decode_record(key, bytes, FIRE_FORMAT_VERSION, migrate_fire)
}

/// An owed notification as any backend stores it.
pub fn decode_notify(
    key: impl std::fmt::Display,
    bytes: &[u8],
) -> Result<PendingNotify, StoreError> {
    decode_record(key, bytes, NOTIFY_FORMAT_VERSION, |v, _| {
        Err(format!("notification record format {v} is not known"))
    })
}

pub use crate::kernel::ids::job::{format as format_id, parse as parse_id};

/// The idempotency key of a fire's plan; the plans room recognises a
/// job's run by it (`plans::model::job_of_key`).
pub fn fire_key(job: u64, instant_ms: u64, manual: bool) -> String {
    if manual {
        format!("job {} manual {instant_ms}", format_id(job))
    } else {
        format!("job {} at {instant_ms}", format_id(job))
    }
}

/// The key of a fire's plan, retries included.
pub fn attempt_key(fire: &FireRecord) -> String {
    let key = fire_key(fire.job, fire.instant_ms, fire.manual);
    if fire.attempt == 0 {
        key
    } else {
        format!("{key} retry {}", fire.attempt)
    }
}

fn job_key(id: u64) -> Vec<u8> {
    let mut k = vec![b'j'];
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn tagged_key(tag: u8, job: u64) -> Vec<u8> {
    let mut k = vec![tag];
    k.extend_from_slice(&job.to_be_bytes());
    k
}

pub const NOTIFY_FORMAT_VERSION: u32 = 1;

/// A run's result owed to a chat: sent through the channels' outbox under
/// `key`, which makes a second send of it a no-op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingNotify {
    pub key: String,
    /// `BINDING` or `BINDING:CHAT`.
    pub target: String,
    pub text: String,
}

fn fire_prefix(job: u64) -> Vec<u8> {
    let mut k = vec![b'f'];
    k.extend_from_slice(&job.to_be_bytes());
    k
}

fn fire_key_bytes(job: u64, instant_ms: u64, manual: bool, attempt: u32) -> Vec<u8> {
    let mut k = fire_prefix(job);
    k.extend_from_slice(&instant_ms.to_be_bytes());
    k.push(u8::from(manual));
    if attempt > 0 {
        k.extend_from_slice(&attempt.to_be_bytes());
    }
    k
}

/// What the jobs actor knows of a job when it (re)loads it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSnapshot {
    pub rec: JobRecord,
    /// The latest fire that submitted a plan.
    pub last_submitted: Option<FireRecord>,
    /// The latest fire of any outcome.
    pub last: Option<FireRecord>,
    /// The plan whose end was counted last.
    pub counted: Option<String>,
    /// Fires recorded but not (yet) submitted.
    pub firing: Vec<FireRecord>,
}

impl JobSnapshot {
    /// From a job's fires, oldest first.
    pub fn of(rec: JobRecord, fires: Vec<FireRecord>, counted: Option<String>) -> JobSnapshot {
        let last_submitted = fires
            .iter()
            .rev()
            .find(|f| matches!(f.outcome, FireOutcome::Submitted { .. }))
            .cloned();
        let last = fires.last().cloned();
        let firing = fires
            .into_iter()
            .filter(|f| f.outcome == FireOutcome::Firing)
            .collect();
        JobSnapshot {
            rec,
            last_submitted,
            last,
            counted,
            firing,
        }
    }
}

/// Where jobs, their fires and what their ends owe are kept: this node's
/// sled store ([`SledJobStore`]) or the shared database. Several nodes may
/// evaluate the same schedules, so a fire is *claimed*: only the node
/// whose claim wins submits it, and a plan's end is counted once.
pub trait JobStore: Send + Sync + 'static {
    /// The id a new job gets.
    fn next_id(&self) -> AnswerFut<'_, u64>;
    /// A new or edited job.
    fn put<'a>(&'a self, job: &'a JobRecord) -> AnswerFut<'a, ()>;
    /// The job, its fires and what it owes go together.
    fn delete(&self, id: u64) -> AnswerFut<'_, ()>;
    fn get(&self, id: u64) -> AnswerFut<'_, Option<JobRecord>>;
    /// Every job, with what the actor needs of its fires.
    fn snapshot(&self) -> AnswerFut<'_, Vec<JobSnapshot>>;
    /// Records a new fire and the job's state after it, in one atomic
    /// write. `false`: this fire was recorded already (by another node)
    /// or the job is gone; nothing was written and it must not be
    /// submitted here.
    fn claim_fire<'a>(&'a self, fire: &'a FireRecord, job: &'a JobRecord) -> AnswerFut<'a, bool>;
    /// How a claimed fire's submission ended.
    fn fire_outcome<'a>(&'a self, fire: &'a FireRecord) -> AnswerFut<'a, ()>;
    /// A job's fires, oldest first.
    fn fires(&self, job: u64) -> AnswerFut<'_, Vec<FireRecord>>;
    /// The job after its plan's end was counted, the plan it was, and the
    /// notification that end owes (if the job has `notify`), in one write:
    /// a restart neither counts a plan twice nor forgets what it owes.
    /// `false`: that plan's end was counted already (by another node).
    fn put_accounted<'a>(
        &'a self,
        job: &'a JobRecord,
        plan: &'a str,
        notify: Option<&'a PendingNotify>,
    ) -> AnswerFut<'a, bool>;
    /// Notifications owed that nobody alive is delivering.
    fn pending_notifies(&self) -> AnswerFut<'_, Vec<(u64, PendingNotify)>>;
    /// The notification is in the channels' outbox (or was refused).
    fn notified<'a>(&'a self, id: u64, key: &'a str) -> AnswerFut<'a, ()>;
    /// Waits until everything written so far is durable.
    fn synced(&self) -> AnswerFut<'_, ()>;
    /// Wake-ups when other nodes change jobs; `None` when this node is the
    /// only writer.
    fn changes(&self) -> Option<Wake>;
}

fn internal(e: StoreError) -> Reject {
    Reject::internal(e)
}

/// Jobs in this node's sled store (tree `jobs`): `j<id>` a job,
/// `f<id><instant>` a fire, `c<id>` the plan counted last, `o<id>` a
/// notification owed. The only writer is this node's actor, so every
/// claim wins.
#[derive(Clone)]
pub struct SledJobStore {
    store: Store,
    tree: sled::Tree,
}

impl SledJobStore {
    pub fn open(store: Store) -> Result<SledJobStore, StoreError> {
        let tree = store.tree("jobs")?;
        Ok(SledJobStore { store, tree })
    }

    fn read_next_id(&self) -> Result<u64, StoreError> {
        Ok(self
            .store
            .get(&self.tree, b"n")?
            .and_then(|v| v.as_ref().try_into().ok().map(u64::from_be_bytes))
            .unwrap_or(1))
    }

    fn write(&self, job: &JobRecord) -> Result<(), StoreError> {
        let mut b = Batch::new();
        b.insert(job_key(job.id), encode_record(JOB_FORMAT_VERSION, job));
        if self.read_next_id()? <= job.id {
            b.insert(&b"n"[..], (job.id + 1).to_be_bytes());
        }
        self.store.apply(&self.tree, &b)
    }

    fn remove(&self, id: u64) -> Result<(), StoreError> {
        let mut b = Batch::new();
        b.remove(job_key(id));
        b.remove(tagged_key(b'c', id));
        b.remove(tagged_key(b'o', id));
        for entry in self.store.scan_prefix(&self.tree, &fire_prefix(id), false) {
            b.remove(entry?.0.to_vec());
        }
        self.store.apply(&self.tree, &b)
    }

    fn read(&self, id: u64) -> Result<Option<JobRecord>, StoreError> {
        match self.store.get(&self.tree, &job_key(id))? {
            Some(bytes) => decode_job(format_id(id), &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Every job, in id order.
    pub fn all(&self) -> Result<Vec<JobRecord>, StoreError> {
        let mut out = Vec::new();
        for entry in self.store.scan_prefix(&self.tree, b"j", false) {
            let (k, v) = entry?;
            out.push(decode_job(String::from_utf8_lossy(&k), &v)?);
        }
        Ok(out)
    }

    fn write_fire(&self, fire: &FireRecord, job: Option<&JobRecord>) -> Result<(), StoreError> {
        let mut b = Batch::new();
        b.insert(
            fire_key_bytes(fire.job, fire.instant_ms, fire.manual, fire.attempt),
            encode_record(FIRE_FORMAT_VERSION, fire),
        );
        if let Some(job) = job {
            b.insert(job_key(job.id), encode_record(JOB_FORMAT_VERSION, job));
        }
        self.store.apply(&self.tree, &b)
    }

    /// A job's fires, oldest first.
    pub fn read_fires(&self, job: u64) -> Result<Vec<FireRecord>, StoreError> {
        let mut out = Vec::new();
        for entry in self.store.scan_prefix(&self.tree, &fire_prefix(job), false) {
            let (k, v) = entry?;
            out.push(decode_fire(String::from_utf8_lossy(&k), &v)?);
        }
        Ok(out)
    }

    fn write_accounted(
        &self,
        job: &JobRecord,
        plan: &str,
        notify: Option<&PendingNotify>,
    ) -> Result<(), StoreError> {
        let mut b = Batch::new();
        b.insert(job_key(job.id), encode_record(JOB_FORMAT_VERSION, job));
        b.insert(tagged_key(b'c', job.id), plan.as_bytes().to_vec());
        if let Some(n) = notify {
            b.insert(
                tagged_key(b'o', job.id),
                encode_record(NOTIFY_FORMAT_VERSION, n),
            );
        }
        self.store.apply(&self.tree, &b)
    }

    /// The plan whose end was counted last.
    pub fn counted(&self, id: u64) -> Result<Option<String>, StoreError> {
        Ok(self
            .store
            .get(&self.tree, &tagged_key(b'c', id))?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    fn read_notifies(&self) -> Result<Vec<(u64, PendingNotify)>, StoreError> {
        let mut out = Vec::new();
        for entry in self.store.scan_prefix(&self.tree, b"o", false) {
            let (k, v) = entry?;
            let Some(id) = k
                .get(1..9)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes)
            else {
                continue;
            };
            let n = decode_notify(String::from_utf8_lossy(&k), &v)?;
            out.push((id, n));
        }
        Ok(out)
    }

    fn remove_notify(&self, id: u64, key: &str) -> Result<(), StoreError> {
        let still = self
            .read_notifies()?
            .into_iter()
            .any(|(j, n)| j == id && n.key == key);
        if !still {
            return Ok(());
        }
        let mut b = Batch::new();
        b.remove(tagged_key(b'o', id));
        self.store.apply(&self.tree, &b)
    }

    fn read_snapshot(&self) -> Result<Vec<JobSnapshot>, StoreError> {
        let mut out = Vec::new();
        for rec in self.all()? {
            let fires = self.read_fires(rec.id)?;
            let counted = self.counted(rec.id)?;
            out.push(JobSnapshot::of(rec, fires, counted));
        }
        Ok(out)
    }
}

impl JobStore for SledJobStore {
    fn next_id(&self) -> AnswerFut<'_, u64> {
        Box::pin(async move { self.read_next_id().map_err(internal) })
    }
    fn put<'a>(&'a self, job: &'a JobRecord) -> AnswerFut<'a, ()> {
        Box::pin(async move { self.write(job).map_err(internal) })
    }
    fn delete(&self, id: u64) -> AnswerFut<'_, ()> {
        Box::pin(async move { self.remove(id).map_err(internal) })
    }
    fn get(&self, id: u64) -> AnswerFut<'_, Option<JobRecord>> {
        Box::pin(async move { self.read(id).map_err(internal) })
    }
    fn snapshot(&self) -> AnswerFut<'_, Vec<JobSnapshot>> {
        Box::pin(async move { self.read_snapshot().map_err(internal) })
    }
    fn claim_fire<'a>(&'a self, fire: &'a FireRecord, job: &'a JobRecord) -> AnswerFut<'a, bool> {
        Box::pin(async move {
            self.write_fire(fire, Some(job))
                .map(|()| true)
                .map_err(internal)
        })
    }
    fn fire_outcome<'a>(&'a self, fire: &'a FireRecord) -> AnswerFut<'a, ()> {
        Box::pin(async move { self.write_fire(fire, None).map_err(internal) })
    }
    fn fires(&self, job: u64) -> AnswerFut<'_, Vec<FireRecord>> {
        Box::pin(async move { self.read_fires(job).map_err(internal) })
    }
    fn put_accounted<'a>(
        &'a self,
        job: &'a JobRecord,
        plan: &'a str,
        notify: Option<&'a PendingNotify>,
    ) -> AnswerFut<'a, bool> {
        Box::pin(async move {
            self.write_accounted(job, plan, notify)
                .map(|()| true)
                .map_err(internal)
        })
    }
    fn pending_notifies(&self) -> AnswerFut<'_, Vec<(u64, PendingNotify)>> {
        Box::pin(async move { self.read_notifies().map_err(internal) })
    }
    fn notified<'a>(&'a self, id: u64, key: &'a str) -> AnswerFut<'a, ()> {
        Box::pin(async move { self.remove_notify(id, key).map_err(internal) })
    }
    fn synced(&self) -> AnswerFut<'_, ()> {
        Box::pin(async move { self.store.synced().await.map_err(Reject::internal) })
    }
    fn changes(&self) -> Option<Wake> {
        None
    }
}

/// The plan a fire submits.
pub fn plan_of(job: &JobRecord) -> PlanSpec {
    let name = Some(
        job.name
            .clone()
            .unwrap_or_else(|| format!("job {}", format_id(job.id))),
    );
    match &job.template {
        Template::Plan(spec) => {
            let mut spec = spec.clone();
            spec.name = spec.name.or(name);
            spec
        }
        Template::Prompt(prompt) => PlanSpec {
            name,
            steps: vec![flyto_protocol::StepSpec {
                id: "agent".into(),
                prompt: Some(prompt.clone()),
                session: (job.mode == Mode::Persistent)
                    .then(|| format!("job-{}", format_id(job.id))),
                timeout_secs: job.timeout_secs,
                // A job's schedule retries; a run is one attempt.
                max_attempts: Some(1),
                workdir: job.workdir.clone(),
                ..Default::default()
            }],
            env: Default::default(),
            sandbox: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plans::model::job_of_key;

    #[test]
    fn a_format_1_fire_reads_as_the_instant_s_own_fire() {
        let v1 = FireRecordV1 {
            job: 3,
            instant_ms: 60_000,
            at_ms: 60_001,
            manual: false,
            outcome: FireOutcome::Submitted { plan: "p9".into() },
            plan: None,
        };
        let bytes = encode_record(1, &v1);
        let f: FireRecord = decode_record("f", &bytes, FIRE_FORMAT_VERSION, migrate_fire).unwrap();
        assert_eq!(f.attempt, 0);
        assert_eq!(f.outcome, v1.outcome);
        assert_eq!(attempt_key(&f), "job j3 at 60000");
        let retry = FireRecord { attempt: 2, ..f };
        assert_eq!(attempt_key(&retry), "job j3 at 60000 retry 2");
        assert_eq!(job_of_key(&attempt_key(&retry)).as_deref(), Some("j3"));
    }

    #[test]
    fn a_fires_key_names_its_job_and_no_other_key_does() {
        assert_eq!(
            job_of_key(&fire_key(3, 1_000, false)).as_deref(),
            Some("j3")
        );
        assert_eq!(job_of_key(&fire_key(12, 5, true)).as_deref(), Some("j12"));
        for other in [
            "job j3",
            "job x3 at 5",
            "job j3 at soon",
            "nightly",
            "job j3 later 5",
        ] {
            assert_eq!(job_of_key(other), None, "{other}");
        }
    }
}
