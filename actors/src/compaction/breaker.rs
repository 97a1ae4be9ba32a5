//! The compaction circuit breaker: one per project (workdir), it stops a
//! project's sessions from retrying a compaction that keeps failing.
//!
//! Three consecutive failures open it; five minutes later it is half open
//! and lets one trial through: a success closes it, a failure opens it again
//! at once. Rate-limit and overload errors (`Outcome::Ignored`) say nothing
//! about the compaction itself and change nothing. The state lives in sled
//! (tree `breakers`, key = project id), so a restarted daemon still knows an
//! open breaker; a record not updated for an hour is forgotten. `record`
//! and `reset` answer once their change is durable (WAL synced).
//!
//! The actor owns the tree; everyone else asks it by name through
//! [`check`], [`record`] and [`status`], which answer "closed" when the
//! breaker is not running: a missing breaker must never stop a session.

use crate::clock::Clock;
use crate::kernel::Reject;
use crate::store::{Batch, Store, StoreError, decode_record, encode_record};
use flyto_protocol::{BreakerView, ErrorCode};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub const BREAKER_NAME: &str = crate::kernel::names::BREAKER;
/// The breaker, found by its name.
pub const BREAKER: crate::kernel::Name<BreakerMsg> = crate::kernel::Name::new(BREAKER_NAME);
/// Consecutive failures that open the breaker.
pub const OPEN_AFTER: u32 = 3;
/// How long an open breaker stays open before it allows one trial.
pub const RESET_AFTER_MS: u64 = 300_000;
/// A record not updated for this long is forgotten.
pub const TTL_MS: u64 = 3_600_000;
/// Longest error text kept: it comes from provider errors, which may echo
/// parts of the request.
pub const MAX_ERROR_CHARS: usize = 500;

const TREE: &str = "breakers";
const FORMAT_VERSION: u32 = 1;
/// How long the free helpers wait for the actor before answering "closed".
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

pub use crate::kernel::ids::project_id;

/// Whether a compaction may run now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    Closed,
    Open {
        failures: u32,
        last_error: String,
        /// When the next trial is allowed (ms since the epoch).
        reset_at_ms: u64,
    },
}

/// How a compaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure {
        error: String,
    },
    /// Rate limits and overloads: not the compaction's fault.
    Ignored,
}

pub enum BreakerMsg {
    /// May `project` compact now? In half-open state the first check is
    /// the trial and is answered `Closed`; the others `Open` until the
    /// trial's outcome is recorded.
    Check {
        project: String,
        reply: RpcReplyPort<Gate>,
    },
    /// Records a compaction's outcome; answers the gate after the change.
    Record {
        project: String,
        workdir: String,
        outcome: Outcome,
        reply: RpcReplyPort<Gate>,
    },
    /// Every remembered project, open ones first.
    Status {
        reply: RpcReplyPort<Vec<BreakerView>>,
    },
    /// Forgets one project's breaker (its id or workdir), or all of them
    /// (`None`); answers the project ids forgotten.
    Reset {
        project: Option<String>,
        reply: RpcReplyPort<Result<Vec<String>, Reject>>,
    },
}

pub struct BreakerActor;

pub struct BreakerArgs {
    pub store: Store,
    pub clock: Arc<dyn Clock>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct BreakerRecord {
    project: String,
    workdir: String,
    /// Consecutive failures (not counting ignored ones).
    failures: u32,
    last_error: Option<String>,
    /// Set while open or half open.
    opened_at_ms: Option<u64>,
    updated_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum State {
    Open,
    HalfOpen,
    Closed,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            State::Open => "open",
            State::HalfOpen => "half_open",
            State::Closed => "closed",
        }
    }
}

impl BreakerRecord {
    fn state(&self, now: u64) -> State {
        match self.opened_at_ms {
            None => State::Closed,
            Some(at) if now < at.saturating_add(RESET_AFTER_MS) => State::Open,
            Some(_) => State::HalfOpen,
        }
    }

    fn expired(&self, now: u64) -> bool {
        self.updated_ms.saturating_add(TTL_MS) <= now
    }

    fn open_gate(&self, reset_at_ms: u64) -> Gate {
        Gate::Open {
            failures: self.failures,
            last_error: self.last_error.clone().unwrap_or_default(),
            reset_at_ms,
        }
    }

    fn view(&self, now: u64) -> BreakerView {
        let state = self.state(now);
        BreakerView {
            project: self.project.clone(),
            workdir: self.workdir.clone(),
            state: state.as_str().into(),
            failures: self.failures,
            last_error: self.last_error.clone(),
            reset_at_ms: match state {
                State::Open => self
                    .opened_at_ms
                    .map(|at| at.saturating_add(RESET_AFTER_MS)),
                _ => None,
            },
            updated_ms: self.updated_ms,
        }
    }
}

fn clip_error(error: &str) -> String {
    error.chars().take(MAX_ERROR_CHARS).collect()
}

fn no_migration<T>(found: u32, _: &[u8]) -> Result<T, String> {
    Err(format!("no migration from breaker format {found}"))
}

pub struct BreakerState {
    store: Store,
    tree: sled::Tree,
    clock: Arc<dyn Clock>,
    /// Every remembered project; the store holds the same (write-through).
    records: HashMap<String, BreakerRecord>,
    /// When each half-open project's trial was let through. In memory
    /// only: after a restart one more trial is harmless.
    trials: HashMap<String, u64>,
}

impl BreakerState {
    /// Answers once what was written is on disk, without holding up the
    /// mailbox: a run told "open" must still find it open after a crash.
    /// A failed sync is logged by the store (which then stops taking
    /// writes); the answer still goes, so no run waits forever.
    fn answer_when_durable<T: Send + 'static>(&self, reply: RpcReplyPort<T>, answer: T) {
        self.store.after_sync(Box::new(move |_| {
            let _ = reply.send(answer);
        }));
    }

    fn save(&self, rec: &BreakerRecord) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.insert(rec.project.as_bytes(), encode_record(FORMAT_VERSION, rec));
        self.store.apply(&self.tree, &batch)
    }

    fn delete(&self, projects: &[String]) -> Result<(), StoreError> {
        if projects.is_empty() {
            return Ok(());
        }
        let mut batch = Batch::new();
        for p in projects {
            batch.remove(p.as_bytes());
        }
        self.store.apply(&self.tree, &batch)
    }

    /// Forgets (and deletes) every record past its TTL.
    fn expire(&mut self, now: u64) -> Result<(), StoreError> {
        let stale: Vec<String> = self
            .records
            .values()
            .filter(|r| r.expired(now))
            .map(|r| r.project.clone())
            .collect();
        self.delete(&stale)?;
        for p in &stale {
            tracing::debug!(project = %p, "forgetting a breaker not updated for an hour");
            self.records.remove(p);
            self.trials.remove(p);
        }
        Ok(())
    }

    /// The gate for `project`; `take_trial` lets a half-open breaker's
    /// trial through (a check does, answering a record does not).
    fn gate(&mut self, project: &str, now: u64, take_trial: bool) -> Gate {
        let Some(rec) = self.records.get(project) else {
            return Gate::Closed;
        };
        match rec.state(now) {
            State::Closed => Gate::Closed,
            State::Open => rec.open_gate(
                rec.opened_at_ms
                    .unwrap_or(now)
                    .saturating_add(RESET_AFTER_MS),
            ),
            State::HalfOpen => match self.trials.get(project) {
                // A trial whose outcome never came (the session stopped)
                // does not hold the breaker forever.
                Some(&at) if now < at.saturating_add(RESET_AFTER_MS) => {
                    rec.open_gate(at.saturating_add(RESET_AFTER_MS))
                }
                _ => {
                    if take_trial {
                        self.trials.insert(project.to_string(), now);
                    }
                    Gate::Closed
                }
            },
        }
    }

    fn record(
        &mut self,
        project: String,
        workdir: String,
        outcome: Outcome,
        now: u64,
    ) -> Result<Gate, StoreError> {
        self.expire(now)?;
        let current = self.records.get(&project);
        let was_open = current.is_some_and(|r| r.opened_at_ms.is_some());
        let next = match outcome {
            Outcome::Ignored => {
                // The trial told nothing: the next check may try again.
                self.trials.remove(&project);
                None
            }
            Outcome::Success => match current {
                Some(rec) if rec.failures > 0 || rec.opened_at_ms.is_some() => {
                    Some(BreakerRecord {
                        failures: 0,
                        opened_at_ms: None,
                        updated_ms: now,
                        ..rec.clone()
                    })
                }
                // Nothing to remember about a project that never failed.
                _ => None,
            },
            Outcome::Failure { error } => {
                let mut rec = current.cloned().unwrap_or_else(|| BreakerRecord {
                    project: project.clone(),
                    workdir: workdir.clone(),
                    failures: 0,
                    last_error: None,
                    opened_at_ms: None,
                    updated_ms: now,
                });
                let state = rec.state(now);
                rec.failures = rec.failures.saturating_add(1);
                rec.last_error = Some(clip_error(&error));
                rec.workdir = workdir;
                rec.updated_ms = now;
                match state {
                    State::Closed if rec.failures >= OPEN_AFTER => {
                        tracing::warn!(project = %rec.project, workdir = %rec.workdir, failures = rec.failures, "compaction breaker open: compactions paused for 5 minutes");
                        rec.opened_at_ms = Some(now);
                    }
                    State::HalfOpen => {
                        tracing::warn!(project = %rec.project, workdir = %rec.workdir, "compaction trial failed: breaker open again for 5 minutes");
                        rec.opened_at_ms = Some(now);
                    }
                    // Open: a compaction let through before it opened;
                    // it does not push the reset further away.
                    _ => {}
                }
                Some(rec)
            }
        };
        if let Some(rec) = next {
            self.save(&rec)?;
            if was_open && rec.opened_at_ms.is_none() {
                tracing::info!(project = %rec.project, workdir = %rec.workdir, "compaction breaker closed");
            }
            self.trials.remove(&project);
            self.records.insert(project.clone(), rec);
        }
        Ok(self.gate(&project, now, false))
    }

    fn status(&mut self, now: u64) -> Result<Vec<BreakerView>, StoreError> {
        self.expire(now)?;
        let mut views: Vec<(State, BreakerView)> = self
            .records
            .values()
            .map(|r| (r.state(now), r.view(now)))
            .collect();
        views.sort_by(|(sa, a), (sb, b)| {
            sa.cmp(sb)
                .then(b.updated_ms.cmp(&a.updated_ms))
                .then(a.project.cmp(&b.project))
        });
        Ok(views.into_iter().map(|(_, v)| v).collect())
    }

    /// The project `p` names: its id, an unambiguous prefix of one, or its
    /// workdir (a trailing `/` is ignored).
    fn find(&self, p: &str) -> Result<String, Reject> {
        let dir = if p.len() > 1 {
            p.trim_end_matches('/')
        } else {
            p
        };
        if let Some(r) = self
            .records
            .values()
            .find(|r| r.project == p || r.workdir == p || r.workdir == dir)
        {
            return Ok(r.project.clone());
        }
        let matches: Vec<&BreakerRecord> = if p.is_empty() {
            Vec::new()
        } else {
            self.records
                .values()
                .filter(|r| r.project.starts_with(p))
                .collect()
        };
        match matches.as_slice() {
            [one] => Ok(one.project.clone()),
            [] => Err(Reject::new(
                ErrorCode::NotFound,
                format!(
                    "no compaction breaker for project `{p}` (it may have been closed or forgotten after an hour without failures): run `flytoctl breaker_status` to see projects"
                ),
            )),
            many => Err(Reject::new(
                ErrorCode::BadRequest,
                format!(
                    "`{p}` is the start of {} projects' ids: {}; give more of the id, or the workdir",
                    many.len(),
                    many.iter()
                        .map(|r| format!("{} ({})", r.project, r.workdir))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    fn reset(&mut self, project: Option<String>, now: u64) -> Result<Vec<String>, Reject> {
        self.expire(now).map_err(Reject::internal)?;
        let mut gone: Vec<String> = match project {
            None => self.records.keys().cloned().collect(),
            Some(p) => vec![self.find(&p)?],
        };
        gone.sort();
        self.delete(&gone).map_err(Reject::internal)?;
        for p in &gone {
            self.records.remove(p);
            self.trials.remove(p);
        }
        if !gone.is_empty() {
            tracing::info!(projects = ?gone, "compaction breakers reset by request");
        }
        Ok(gone)
    }
}

impl Actor for BreakerActor {
    type Msg = BreakerMsg;
    type State = BreakerState;
    type Arguments = BreakerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: BreakerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let tree = args.store.tree(TREE)?;
        let mut records = HashMap::new();
        for kv in args.store.scan_prefix(&tree, b"", false) {
            let (k, v) = kv?;
            // Keys starting with a zero byte are the store's own.
            if k.first() == Some(&0) {
                continue;
            }
            let key = String::from_utf8_lossy(&k).into_owned();
            // A breaker is an optimisation: an unreadable record must not
            // keep the daemon from starting. It stays for the flytod that
            // wrote it.
            match decode_record::<BreakerRecord>(
                format_args!("breaker {key}"),
                &v,
                FORMAT_VERSION,
                no_migration,
            ) {
                Ok(rec) => {
                    records.insert(rec.project.clone(), rec);
                }
                Err(e) => tracing::warn!("ignoring a compaction breaker record: {e}"),
            }
        }
        let mut state = BreakerState {
            store: args.store,
            tree,
            clock: args.clock,
            records,
            trials: HashMap::new(),
        };
        let now = state.clock.now_ms();
        state.expire(now)?;
        let open = state
            .records
            .values()
            .filter(|r| r.opened_at_ms.is_some())
            .count();
        if open > 0 {
            tracing::info!(
                open,
                "compaction breakers still open from before the restart"
            );
        }
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let now = state.clock.now_ms();
        // A store error means the store stopped taking writes: fail, so the
        // supervisor restarts us from what is on disk. Callers then see
        // "closed" (see `call`).
        match msg {
            BreakerMsg::Check { project, reply } => {
                state.expire(now)?;
                let _ = reply.send(state.gate(&project, now, true));
            }
            BreakerMsg::Record {
                project,
                workdir,
                outcome,
                reply,
            } => {
                let gate = state.record(project, workdir, outcome, now)?;
                state.answer_when_durable(reply, gate);
            }
            BreakerMsg::Status { reply } => {
                let _ = reply.send(state.status(now)?);
            }
            BreakerMsg::Reset { project, reply } => {
                let reset = state.reset(project, now);
                state.answer_when_durable(reply, reset);
            }
        }
        Ok(())
    }
}

/// Asks the breaker registered as `name`; `None` if it is not running or
/// did not answer.
async fn call<T: Send + 'static>(
    name: &str,
    what: &str,
    build: impl FnOnce(RpcReplyPort<T>) -> BreakerMsg,
) -> Option<T> {
    let Some(cell) = ractor::registry::where_is(name.into()) else {
        tracing::warn!("{what}: the compaction breaker is not running; treating it as closed");
        return None;
    };
    match ActorRef::<BreakerMsg>::from(cell)
        .call(build, Some(CALL_TIMEOUT))
        .await
    {
        Ok(CallResult::Success(answer)) => Some(answer),
        Ok(CallResult::Timeout) => {
            tracing::warn!(
                "{what}: the compaction breaker did not answer in time; treating it as closed"
            );
            None
        }
        Ok(CallResult::SenderError) | Err(_) => {
            tracing::warn!("{what}: the compaction breaker stopped; treating it as closed");
            None
        }
    }
}

async fn check_at(name: &str, project: &str) -> Gate {
    let project = project.to_string();
    call(name, "breaker check", |reply| BreakerMsg::Check {
        project,
        reply,
    })
    .await
    .unwrap_or(Gate::Closed)
}

async fn record_at(name: &str, project: &str, workdir: &str, outcome: Outcome) -> Gate {
    let (project, workdir) = (project.to_string(), workdir.to_string());
    call(name, "breaker record", |reply| BreakerMsg::Record {
        project,
        workdir,
        outcome,
        reply,
    })
    .await
    .unwrap_or(Gate::Closed)
}

async fn status_at(name: &str) -> Vec<BreakerView> {
    call(name, "breaker status", |reply| BreakerMsg::Status { reply })
        .await
        .unwrap_or_default()
}

/// May `project` compact now? `Closed` when the breaker is not running.
pub async fn check(project: &str) -> Gate {
    check_at(BREAKER_NAME, project).await
}

/// Records a compaction's outcome; answers the gate after it (`Closed`
/// when the breaker is not running).
pub async fn record(project: &str, workdir: &str, outcome: Outcome) -> Gate {
    record_at(BREAKER_NAME, project, workdir, outcome).await
}

/// Every remembered breaker, open ones first (empty when the breaker is
/// not running).
pub async fn status() -> Vec<BreakerView> {
    status_at(BREAKER_NAME).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::testutil::{crash_copy, hold_commits, open_no_checkpoint, wait_durable};
    use ractor::concurrency::JoinHandle;
    use std::path::Path;

    const T0: u64 = 1_700_000_000_000;
    const WD: &str = "/srv/proj";

    struct Env {
        dir: tempfile::TempDir,
        clock: ManualClock,
        store: Option<Store>,
        actor: Option<(ActorRef<BreakerMsg>, JoinHandle<()>)>,
    }

    fn open_store(dir: &Path) -> Store {
        Store::open(&dir.join("db"), 8 << 20).unwrap()
    }

    impl Env {
        async fn new() -> Env {
            let dir = tempfile::tempdir().unwrap();
            let store = open_store(dir.path());
            let mut env = Env {
                dir,
                clock: ManualClock::new(T0),
                store: Some(store),
                actor: None,
            };
            env.spawn(None).await;
            env
        }

        async fn spawn(&mut self, name: Option<&str>) {
            let args = BreakerArgs {
                store: self.store.clone().unwrap(),
                clock: Arc::new(self.clock.clone()),
            };
            let spawned = Actor::spawn(name.map(String::from), BreakerActor, args)
                .await
                .unwrap();
            self.actor = Some(spawned);
        }

        async fn stop(&mut self) {
            let (actor, handle) = self.actor.take().unwrap();
            actor.stop(None);
            handle.await.unwrap();
        }

        /// A daemon restart: the actor stops, the store is synced (as
        /// flytod does on the way out) and opens again, a new actor loads
        /// what it holds.
        async fn restart(&mut self) {
            self.stop().await;
            let store = self.store.take().unwrap();
            store.sync_blocking().unwrap();
            drop(store);
            self.store = Some(open_store(self.dir.path()));
            self.spawn(None).await;
        }

        fn actor(&self) -> &ActorRef<BreakerMsg> {
            &self.actor.as_ref().unwrap().0
        }

        async fn check(&self, project: &str) -> Gate {
            let project = project.to_string();
            self.actor()
                .call(|reply| BreakerMsg::Check { project, reply }, None)
                .await
                .unwrap()
                .unwrap()
        }

        async fn record(&self, workdir: &str, outcome: Outcome) -> Gate {
            let (project, workdir) = (project_id(workdir), workdir.to_string());
            self.actor()
                .call(
                    |reply| BreakerMsg::Record {
                        project,
                        workdir,
                        outcome,
                        reply,
                    },
                    None,
                )
                .await
                .unwrap()
                .unwrap()
        }

        async fn fail(&self, workdir: &str, error: &str) -> Gate {
            self.record(
                workdir,
                Outcome::Failure {
                    error: error.into(),
                },
            )
            .await
        }

        async fn status(&self) -> Vec<BreakerView> {
            self.actor()
                .call(|reply| BreakerMsg::Status { reply }, None)
                .await
                .unwrap()
                .unwrap()
        }

        async fn reset(&self, project: Option<&str>) -> Result<Vec<String>, Reject> {
            let project = project.map(String::from);
            self.actor()
                .call(|reply| BreakerMsg::Reset { project, reply }, None)
                .await
                .unwrap()
                .unwrap()
        }
    }

    fn is_open(g: &Gate) -> bool {
        matches!(g, Gate::Open { .. })
    }

    #[test]
    fn project_id_is_16_lowercase_hex_and_stable() {
        // printf %s /srv/proj | sha256sum
        assert_eq!(project_id("/srv/proj"), "6b9af143446a411a");
        let other = project_id("/srv/other");
        assert_eq!(other.len(), 16);
        assert!(
            other
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        );
        assert_ne!(other, project_id("/srv/proj"));
    }

    #[tokio::test]
    async fn opens_after_three_failures_and_not_before() {
        let env = Env::new().await;
        let p = project_id(WD);
        assert_eq!(env.check(&p).await, Gate::Closed);
        assert_eq!(env.fail(WD, "e1").await, Gate::Closed);
        assert_eq!(env.fail(WD, "e2").await, Gate::Closed);
        assert_eq!(env.check(&p).await, Gate::Closed);
        let gate = env.fail(WD, "summary was empty").await;
        assert_eq!(
            gate,
            Gate::Open {
                failures: 3,
                last_error: "summary was empty".into(),
                reset_at_ms: T0 + RESET_AFTER_MS,
            }
        );
        assert_eq!(env.check(&p).await, gate);
        // Other projects are not affected.
        assert_eq!(env.check(&project_id("/srv/other")).await, Gate::Closed);
        let views = env.status().await;
        assert_eq!(views.len(), 1);
        assert_eq!(
            views[0],
            BreakerView {
                project: p,
                workdir: WD.into(),
                state: "open".into(),
                failures: 3,
                last_error: Some("summary was empty".into()),
                reset_at_ms: Some(T0 + RESET_AFTER_MS),
                updated_ms: T0,
            }
        );
    }

    #[tokio::test]
    async fn ignored_failures_do_not_count() {
        let env = Env::new().await;
        let p = project_id(WD);
        for _ in 0..3 {
            assert_eq!(env.record(WD, Outcome::Ignored).await, Gate::Closed);
        }
        env.fail(WD, "e1").await;
        assert_eq!(env.fail(WD, "e2").await, Gate::Closed);
        assert_eq!(env.record(WD, Outcome::Ignored).await, Gate::Closed);
        assert_eq!(env.check(&p).await, Gate::Closed);
        let views = env.status().await;
        assert_eq!((views[0].state.as_str(), views[0].failures), ("closed", 2));
        // The third real failure opens it.
        assert!(is_open(&env.fail(WD, "e3").await));
    }

    #[tokio::test]
    async fn success_closes_and_zeroes_the_failures() {
        let env = Env::new().await;
        let p = project_id(WD);
        env.fail(WD, "e1").await;
        env.fail(WD, "e2").await;
        assert_eq!(env.record(WD, Outcome::Success).await, Gate::Closed);
        // Failures must be consecutive: two more do not open it.
        env.fail(WD, "e3").await;
        assert_eq!(env.fail(WD, "e4").await, Gate::Closed);
        assert!(is_open(&env.fail(WD, "e5").await));
        assert!(is_open(&env.check(&p).await));
        // A success (a compaction let through before it opened) closes it.
        assert_eq!(env.record(WD, Outcome::Success).await, Gate::Closed);
        assert_eq!(env.check(&p).await, Gate::Closed);
        let v = &env.status().await[0];
        assert_eq!(
            (v.state.as_str(), v.failures, v.reset_at_ms),
            ("closed", 0, None)
        );
        assert_eq!(v.last_error.as_deref(), Some("e5"));
    }

    #[tokio::test]
    async fn half_open_allows_exactly_one_trial_and_a_failure_reopens() {
        let env = Env::new().await;
        let p = project_id(WD);
        for e in ["e1", "e2", "e3"] {
            env.fail(WD, e).await;
        }
        env.clock.advance_ms(RESET_AFTER_MS - 1);
        assert!(is_open(&env.check(&p).await));
        env.clock.advance_ms(1);
        assert_eq!(env.status().await[0].state, "half_open");
        assert_eq!(env.status().await[0].reset_at_ms, None);
        // The trial.
        assert_eq!(env.check(&p).await, Gate::Closed);
        // Nobody else while it runs.
        assert!(is_open(&env.check(&p).await));
        assert!(is_open(&env.check(&p).await));
        let t1 = env.clock.now_ms();
        let gate = env.fail(WD, "trial failed").await;
        assert_eq!(
            gate,
            Gate::Open {
                failures: 4,
                last_error: "trial failed".into(),
                reset_at_ms: t1 + RESET_AFTER_MS,
            }
        );
        assert_eq!(env.status().await[0].state, "open");
        // Half open again five minutes later; this time the trial succeeds.
        env.clock.advance_ms(RESET_AFTER_MS);
        assert_eq!(env.check(&p).await, Gate::Closed);
        assert_eq!(env.record(WD, Outcome::Success).await, Gate::Closed);
        assert_eq!(env.check(&p).await, Gate::Closed);
        assert_eq!(env.check(&p).await, Gate::Closed);
        assert_eq!(env.status().await[0].state, "closed");
    }

    #[tokio::test]
    async fn an_ignored_trial_lets_the_next_check_try_again() {
        let env = Env::new().await;
        let p = project_id(WD);
        for e in ["e1", "e2", "e3"] {
            env.fail(WD, e).await;
        }
        env.clock.advance_ms(RESET_AFTER_MS);
        assert_eq!(env.check(&p).await, Gate::Closed);
        assert!(is_open(&env.check(&p).await));
        assert_eq!(env.record(WD, Outcome::Ignored).await, Gate::Closed);
        assert_eq!(env.check(&p).await, Gate::Closed);
        assert!(is_open(&env.check(&p).await));
        // A trial whose outcome never comes does not hold it forever.
        env.clock.advance_ms(RESET_AFTER_MS);
        assert_eq!(env.check(&p).await, Gate::Closed);
    }

    /// The failure that opens the breaker is answered only once the
    /// breaker is on disk: a crash right after the answer still finds it
    /// open.
    #[tokio::test]
    async fn the_answer_waits_until_the_record_is_durable() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_no_checkpoint(&dir.path().join("db"));
        let mut env = Env {
            dir,
            clock: ManualClock::new(T0),
            store: Some(store.clone()),
            actor: None,
        };
        env.spawn(None).await;
        env.fail(WD, "e1").await;
        env.fail(WD, "e2").await;
        wait_durable(&store);

        // Hold the commit thread from another thread, so nothing written
        // from here on is durable until it lets go.
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn({
            let store = store.clone();
            move || {
                let _hold = hold_commits(&store);
                held_tx.send(()).unwrap();
                let _ = release_rx.recv();
            }
        });
        held_rx.recv().unwrap();
        let (tx, mut answer) = tokio::sync::oneshot::channel();
        env.actor()
            .send_message(BreakerMsg::Record {
                project: project_id(WD),
                workdir: WD.into(),
                outcome: Outcome::Failure { error: "e3".into() },
                reply: tx.into(),
            })
            .unwrap();
        // The mailbox is in order: once Status answers, Record was handled.
        assert_eq!(env.status().await[0].state, "open");
        assert!(
            answer.try_recv().is_err(),
            "the failure was answered before the open breaker was durable"
        );
        release_tx.send(()).unwrap();
        holder.join().unwrap();
        assert!(is_open(&answer.await.unwrap()));

        // What a crash at this instant leaves behind still has it open.
        let copy = tempfile::tempdir().unwrap();
        crash_copy(&env.dir.path().join("db"), &copy.path().join("db"));
        let mut after = Env {
            store: Some(open_store(copy.path())),
            dir: copy,
            clock: ManualClock::new(T0),
            actor: None,
        };
        after.spawn(None).await;
        assert!(is_open(&after.check(&project_id(WD)).await));
        after.stop().await;
        env.stop().await;
    }

    #[tokio::test]
    async fn an_open_breaker_survives_a_restart() {
        let mut env = Env::new().await;
        let p = project_id(WD);
        for e in ["e1", "e2", "e3"] {
            env.fail(WD, e).await;
        }
        env.fail("/srv/other", "x").await;
        env.restart().await;
        let gate = env.check(&p).await;
        assert_eq!(
            gate,
            Gate::Open {
                failures: 3,
                last_error: "e3".into(),
                reset_at_ms: T0 + RESET_AFTER_MS,
            }
        );
        let views = env.status().await;
        assert_eq!(views.len(), 2);
        assert_eq!(
            (views[0].project.as_str(), views[0].state.as_str()),
            (p.as_str(), "open")
        );
        assert_eq!(
            (views[1].workdir.as_str(), views[1].failures),
            ("/srv/other", 1)
        );
        // The failure count goes on from what was stored.
        env.clock.advance_ms(RESET_AFTER_MS);
        env.restart().await;
        assert_eq!(env.check(&p).await, Gate::Closed);
        assert!(is_open(&env.fail(WD, "e4").await));
    }

    #[tokio::test]
    async fn records_are_forgotten_after_the_ttl() {
        let mut env = Env::new().await;
        let p = project_id(WD);
        for e in ["e1", "e2", "e3"] {
            env.fail(WD, e).await;
        }
        env.clock.advance_ms(TTL_MS - 1);
        env.restart().await;
        assert_eq!(env.status().await.len(), 1);
        env.clock.advance_ms(1);
        env.restart().await;
        assert!(env.status().await.is_empty());
        assert_eq!(env.check(&p).await, Gate::Closed);
        // Deleted from the store too, not only hidden.
        let store = env.store.clone().unwrap();
        let tree = store.tree(TREE).unwrap();
        assert_eq!(store.get(&tree, p.as_bytes()).unwrap(), None);

        // A live actor forgets it when it looks: the count starts over.
        env.fail(WD, "e1").await;
        env.fail(WD, "e2").await;
        env.clock.advance_ms(TTL_MS);
        assert_eq!(env.fail(WD, "e3").await, Gate::Closed);
        assert_eq!(env.status().await[0].failures, 1);
    }

    #[tokio::test]
    async fn reset_one_all_or_unknown() {
        let mut env = Env::new().await;
        let (a, b) = (project_id(WD), project_id("/srv/other"));
        for e in ["e1", "e2", "e3"] {
            env.fail(WD, e).await;
            env.fail("/srv/other", e).await;
        }
        env.fail("/srv/third", "e1").await;
        assert_eq!(env.reset(Some(&a)).await, Ok(vec![a.clone()]));
        assert_eq!(env.check(&a).await, Gate::Closed);
        assert!(is_open(&env.check(&b).await));
        // A workdir names its project too.
        assert_eq!(env.reset(Some("/srv/other")).await, Ok(vec![b.clone()]));
        let err = env.reset(Some(&a)).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::NotFound);
        assert!(
            err.message.contains("flytoctl breaker_status"),
            "{}",
            err.message
        );
        // Reset deletes the record: a restart does not bring it back.
        env.fail(WD, "again").await;
        assert_eq!(env.reset(None).await.unwrap().len(), 2);
        assert!(env.status().await.is_empty());
        env.restart().await;
        assert!(env.status().await.is_empty());
        assert_eq!(env.reset(None).await, Ok(vec![]));
    }

    #[tokio::test]
    async fn reset_takes_an_unambiguous_id_prefix_or_a_workdir() {
        let env = Env::new().await;
        // Two workdirs whose ids start alike, and a third.
        let dirs: Vec<String> = (0..64).map(|i| format!("/srv/p{i}")).collect();
        let (x, y) = dirs
            .iter()
            .enumerate()
            .find_map(|(i, a)| {
                dirs[i + 1..]
                    .iter()
                    .find(|b| project_id(a)[..1] == project_id(b)[..1])
                    .map(|b| (a.clone(), b.clone()))
            })
            .unwrap();
        for d in [&x, &y, &WD.to_string()] {
            env.fail(d, "boom").await;
        }
        let (px, py) = (project_id(&x), project_id(&y));
        let shared = px
            .chars()
            .zip(py.chars())
            .take_while(|(a, b)| a == b)
            .count();
        let err = env.reset(Some(&px[..shared])).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::BadRequest);
        for want in [px.as_str(), py.as_str(), x.as_str(), y.as_str()] {
            assert!(err.message.contains(want), "{want}: {}", err.message);
        }
        assert_eq!(env.status().await.len(), 3, "nothing was reset");
        assert_eq!(
            env.reset(Some(&px[..shared + 1])).await,
            Ok(vec![px.clone()])
        );
        assert_eq!(
            env.reset(Some(&format!("{WD}/"))).await,
            Ok(vec![project_id(WD)])
        );
        assert_eq!(
            env.reset(Some("")).await.unwrap_err().code,
            ErrorCode::NotFound
        );
        assert_eq!(env.reset(Some(&py)).await, Ok(vec![py.clone()]));
    }

    #[tokio::test]
    async fn long_errors_are_clipped() {
        let env = Env::new().await;
        let long = "é".repeat(MAX_ERROR_CHARS + 100);
        env.fail(WD, &long).await;
        let v = &env.status().await[0];
        assert_eq!(
            v.last_error.as_ref().map(|e| e.chars().count()),
            Some(MAX_ERROR_CHARS)
        );
    }

    #[tokio::test]
    async fn helpers_answer_closed_without_a_breaker() {
        let name = "test.breaker.helpers";
        let mut env = Env::new().await;
        env.stop().await;
        env.spawn(Some(name)).await;
        let p = project_id(WD);
        for e in ["e1", "e2", "e3"] {
            record_at(name, &p, WD, Outcome::Failure { error: e.into() }).await;
        }
        assert!(is_open(&check_at(name, &p).await));
        assert_eq!(status_at(name).await.len(), 1);
        env.stop().await;
        assert_eq!(check_at(name, &p).await, Gate::Closed);
        assert_eq!(
            record_at(name, &p, WD, Outcome::Failure { error: "e4".into() }).await,
            Gate::Closed
        );
        assert!(status_at(name).await.is_empty());
    }
}
