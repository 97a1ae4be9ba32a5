//! The JobsActor (registered as [`JOBS_NAME`]): keeps every job's next
//! fire in an ordered index and sleeps until the earliest; a clock that is
//! set wakes it at once (and it wakes at least every [`WAKE_AT_LEAST`] where
//! that cannot be heard of). A due instant
//! is recorded as a fire (durably, with the plan it will submit) before
//! the plan is submitted under the fire's idempotency key, in a task the
//! actor owns, so the mailbox never waits on the scheduler or the disk.
//!
//! No catch-up: instants that passed while flytod was down (or more than
//! [`LATE`] ago) become one `missed` record. No overlap: a fire while the
//! job's previous plan is still pending or running is `skipped`.

use super::model::{
    FireOutcome, FireRecord, JobRecord, JobSnapshot, JobStore, Mode, PendingNotify, Template,
    fire_key, format_id, parse_id, plan_of,
};
use super::schedule::{Schedule, machine_zone};
use crate::clock::Clock;
use crate::kernel::Reject;
use crate::plans::reader::PlanLookup;
use crate::plans::{SCHEDULER, SchedulerMsg};
use chrono::{DateTime, Utc};
use flyto_protocol::{ErrorCode, FireView, JobSpec, JobView, PlanState};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

pub const JOBS_NAME: &str = crate::kernel::names::JOBS;
/// The jobs actor, found by its name.
pub const JOBS: crate::kernel::Name<JobsMsg> = crate::kernel::Name::new(JOBS_NAME);
/// The longest the actor sleeps, however far the next fire is.
pub const WAKE_AT_LEAST: Duration = Duration::from_secs(30);
/// A due instant older than this when the actor gets to it is missed.
pub const LATE: Duration = Duration::from_secs(60);
const DEFAULT_MAX_FAILURES: u32 = 5;
/// How soon a fire the store could not record is tried again.
const AGAIN: Duration = Duration::from_secs(2);

fn utc(ms: u64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms as i64).unwrap_or_default()
}

fn bad(m: impl Into<String>) -> Reject {
    Reject::new(ErrorCode::BadRequest, m)
}

struct Live {
    rec: JobRecord,
    schedule: Schedule,
    /// The next scheduled instant (ms), if it fires again.
    next: Option<u64>,
    /// The plan of the latest fire, and whether its end was counted.
    last_plan: Option<(String, bool)>,
    /// (instant, attempt) of that fire, for a retry.
    last_fire: Option<(u64, u32)>,
    /// A retry waiting: (when, instant, attempt).
    retry: Option<(u64, u64, u32)>,
    last_outcome: Option<String>,
}

impl Live {
    /// Fixed per job: the same offset at every fire.
    fn jitter_ms(&self) -> u64 {
        if self.rec.jitter_secs == 0 {
            return 0;
        }
        let h = self.rec.id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 17;
        (h % (self.rec.jitter_secs + 1)) * 1000
    }
}

pub enum JobsMsg {
    /// Fires what is due, then sleeps again; a stale generation is ignored.
    Tick(u64),
    /// A run's result is in the channels' outbox (`None`: not now; tried
    /// again at the next tick).
    Notified {
        job: u64,
        notify: PendingNotify,
        done: bool,
    },
    /// The wall clock was set: the pending tick was computed from the old
    /// time, so look now.
    ClockSet,
    /// Another node may have changed jobs: read them again.
    Refresh,
    Create {
        spec: Box<JobSpec>,
        reply: RpcReplyPort<Result<(JobView, Vec<String>), Reject>>,
    },
    Update {
        id: String,
        spec: Box<JobSpec>,
        reply: RpcReplyPort<Result<(JobView, Vec<String>), Reject>>,
    },
    List {
        reply: RpcReplyPort<Result<Vec<JobView>, Reject>>,
    },
    Show {
        id: String,
        reply: RpcReplyPort<Result<(JobView, Vec<FireView>), Reject>>,
    },
    SetEnabled {
        id: String,
        enabled: bool,
        reply: RpcReplyPort<Result<JobView, Reject>>,
    },
    Delete {
        id: String,
        reply: RpcReplyPort<Result<JobView, Reject>>,
    },
    RunNow {
        id: String,
        reply: RpcReplyPort<Result<String, Reject>>,
    },
    /// A fire's task is done: its plan, or why not.
    Fired {
        job: u64,
        instant: u64,
        attempt: u32,
        result: Result<String, String>,
    },
}

pub struct JobsArgs {
    pub store: Arc<dyn JobStore>,
    pub reader: Arc<dyn PlanLookup>,
    pub clock: Arc<dyn Clock>,
    /// Waits before the retries of a run that failed transiently.
    pub retry_backoff: Vec<Duration>,
    /// `job_fired` hooks, and where they run for a job's plan.
    pub hooks: Option<crate::plans::PlanHooks>,
}

impl crate::plans::PlanHooks {
    fn fired(&self, fire: &FireRecord, spec: &flyto_protocol::PlanSpec, plan: &str, now_ms: u64) {
        use crate::hooks::HookEvent;
        if !self.hooks.any(HookEvent::JobFired, None) {
            return;
        }
        let input = serde_json::json!({
            "job": format_id(fire.job),
            "instant": utc(fire.instant_ms).to_rfc3339(),
            "attempt": fire.attempt,
            "manual": fire.manual,
            "plan": plan,
        });
        let (hooks, env) = (self.hooks.clone(), (self.env)(spec));
        tokio::spawn(async move {
            hooks
                .run(
                    HookEvent::JobFired,
                    None,
                    input,
                    &env,
                    move || now_ms,
                    Arc::new(|r: crate::hooks::Ran| {
                        tracing::info!(hook = %r.name, outcome = %r.outcome, "job_fired hook ran")
                    }),
                )
                .await;
        });
    }
}

/// 30 s, 1 min, 5 min.
pub fn default_retry_backoff() -> Vec<Duration> {
    vec![
        Duration::from_secs(30),
        Duration::from_secs(60),
        Duration::from_secs(300),
    ]
}

/// A failure worth trying again soon: the provider was rate limiting,
/// overloaded, failing on its side, or unreachable.
fn transient(view: &flyto_protocol::PlanView) -> bool {
    const MARKS: [&str; 5] = [
        "rate limited",
        "the provider is overloaded",
        "provider server error",
        "connection failed",
        "timed out: ",
    ];
    view.steps
        .iter()
        .filter_map(|s| s.error.as_deref())
        .any(|e| MARKS.iter().any(|m| e.contains(m)))
}

pub struct JobsState {
    store: Arc<dyn JobStore>,
    reader: Arc<dyn PlanLookup>,
    clock: Arc<dyn Clock>,
    jobs: HashMap<u64, Live>,
    /// (fire time with jitter, job): the earliest first.
    due: BTreeSet<(u64, u64)>,
    /// (when, job): retries of transiently failed runs.
    retries: BTreeSet<(u64, u64)>,
    /// (when, job, instant): fires the store could not record, tried again.
    again: BTreeSet<(u64, u64, u64)>,
    retry_backoff: Vec<Duration>,
    hooks: Option<crate::plans::PlanHooks>,
    generation: u64,
    /// When the pending tick comes (monotonic).
    armed: Option<std::time::Instant>,
    /// Jobs whose latest plan has not been seen to end: only these are
    /// looked at on a tick.
    unsettled: BTreeSet<u64>,
    /// Forwards the clock's jumps to the mailbox; ends with the actor.
    jump_watch: Option<tokio::task::JoinHandle<()>>,
    /// Forwards other nodes' changes to the mailbox; ends with the actor.
    change_watch: Option<tokio::task::JoinHandle<()>>,
    /// A `Refresh` is in the mailbox: wake-ups meanwhile add no other.
    refresh_queued: Arc<std::sync::atomic::AtomicBool>,
    /// Run results owed to chats, to hand to the channels room.
    owed: Vec<(u64, PendingNotify)>,
    /// Owed results the channels room could not take yet.
    retry_owed: Vec<(u64, PendingNotify)>,
}

pub struct JobsActor;

/// `BINDING` or `BINDING:CHAT`: a binding's name as in `[channels.NAME]`,
/// and optionally the chat to write to (else the binding's owner chat).
pub fn check_notify(n: &str) -> Result<(), String> {
    let (binding, chat) = match n.split_once(':') {
        Some((b, c)) => (b, Some(c)),
        None => (n, None),
    };
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    if !name_ok(binding) {
        return Err(format!(
            "--notify {n:?}: `{binding}` is not a channel binding name (letters, digits, `_` and `-`); give BINDING or BINDING:CHAT, e.g. telegram or telegram:123456"
        ));
    }
    if let Some(chat) = chat
        && (chat.is_empty() || chat.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        return Err(format!(
            "--notify {n:?}: the chat after `:` must be a chat id without spaces, e.g. telegram:123456"
        ));
    }
    Ok(())
}

fn parse_time(s: &str, tz: &str) -> Result<u64, Reject> {
    let (sched, _) = Schedule::parse(&format!("at {s}"), tz, utc(0)).map_err(|e| bad(e.0))?;
    sched
        .next_after(utc(0))
        .map(|t| t.timestamp_millis() as u64)
        .ok_or_else(|| bad(format!("`{s}` is not a time")))
}

impl JobsState {
    fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    fn view(&self, l: &Live) -> JobView {
        let state = match (&l.rec.stopped, l.rec.enabled) {
            (Some(why), _) => format!("stopped: {why}"),
            (None, true) => "active".into(),
            (None, false) => "paused".into(),
        };
        let next = l
            .next
            .filter(|_| l.rec.enabled && l.rec.stopped.is_none())
            .map(|ms| utc(ms + l.jitter_ms()));
        JobView {
            id: format_id(l.rec.id),
            name: l.rec.name.clone(),
            schedule: l.rec.schedule.clone(),
            tz: l.rec.tz.clone(),
            mode: l.rec.mode.as_str().into(),
            state,
            next_fire: next.map(|t| t.with_timezone(&l.schedule.tz).to_rfc3339()),
            next_fire_utc: next.map(|t| t.to_rfc3339()),
            last_outcome: l.last_outcome.clone(),
            consecutive_failures: l.rec.consecutive_failures,
            max_consecutive_failures: l.rec.max_consecutive_failures,
            workdir: l.rec.workdir.clone(),
            what: match &l.rec.template {
                Template::Prompt(p) => p.clone(),
                Template::Plan(spec) => format!("plan: {} steps", spec.steps.len()),
            },
            timeout_secs: l.rec.timeout_secs,
            expires: l.rec.expires_ms.map(|ms| utc(ms).to_rfc3339()),
            created_ms: l.rec.created_ms,
        }
    }

    fn find(&self, id: &str) -> Result<u64, Reject> {
        let n = parse_id(id).filter(|n| self.jobs.contains_key(n));
        n.or_else(|| {
            let named: Vec<u64> = self
                .jobs
                .values()
                .filter(|l| l.rec.name.as_deref() == Some(id))
                .map(|l| l.rec.id)
                .collect();
            (named.len() == 1).then(|| named[0])
        })
        .ok_or_else(|| {
            Reject::new(
                ErrorCode::NotFound,
                format!("no job `{id}`: `flytoctl job_list` lists the jobs"),
            )
        })
    }

    /// (Re)indexes a job's next fire after `after`.
    fn reindex(&mut self, id: u64, after: u64) {
        let Some(l) = self.jobs.get_mut(&id) else {
            return;
        };
        if let Some(n) = l.next.take() {
            self.due.remove(&(n + l.jitter_ms(), id));
        }
        if !l.rec.enabled || l.rec.stopped.is_some() {
            return;
        }
        let from = l.rec.handled_ms.map_or(after, |h| h.max(after));
        l.next = l
            .schedule
            .next_after(utc(from))
            .map(|t| t.timestamp_millis() as u64);
        if let Some(n) = l.next {
            self.due.insert((n + l.jitter_ms(), id));
        }
    }

    /// Makes sure a tick comes by the earliest time something is due. A
    /// tick already set for then or earlier stands: requests arriving
    /// faster than the period must not keep pushing it back.
    fn arm(&mut self, myself: &ActorRef<JobsMsg>) {
        let now = self.now();
        let first = [self.due.first(), self.retries.first()]
            .into_iter()
            .flatten()
            .map(|(at, _)| *at)
            .chain(self.again.first().map(|(at, _, _)| *at))
            .min();
        // A run whose end is not counted yet is looked at every second, so
        // a failure (and its retry) is noticed soon.
        let watching = !self.unsettled.is_empty();
        let most = if watching {
            Duration::from_secs(1)
        } else {
            WAKE_AT_LEAST
        };
        let wait = first
            .map_or(most, |at| Duration::from_millis(at.saturating_sub(now)))
            .min(most);
        let wake = std::time::Instant::now() + wait;
        if self.armed.is_some_and(|at| at <= wake) {
            return;
        }
        self.armed = Some(wake);
        self.generation += 1;
        let generation = self.generation;
        myself.send_after(wait, move || JobsMsg::Tick(generation));
    }

    /// Hands what is owed to the channels room, each in a task that
    /// reports back once the outbox holds it durably.
    fn pay(&mut self, myself: &ActorRef<JobsMsg>) {
        for (job, notify) in self.owed.drain(..) {
            let me = myself.clone();
            tokio::spawn(async move {
                let done = deliver(&notify).await;
                let _ = me.send_message(JobsMsg::Notified { job, notify, done });
            });
        }
    }

    async fn save(&self, id: u64) -> Result<(), Reject> {
        match self.jobs.get(&id) {
            Some(l) => self.store.put(&l.rec).await,
            None => Ok(()),
        }
    }

    /// Counts how the job's last plan ended, once it has. Where several
    /// nodes watch the same plan, the store lets one of them count it;
    /// that one retries and notifies.
    async fn account(&mut self, id: u64) {
        let Some(l) = self.jobs.get_mut(&id) else {
            return;
        };
        let Some((plan, false)) = l.last_plan.clone() else {
            self.unsettled.remove(&id);
            return;
        };
        let view = match self.reader.status(&plan).await {
            Ok(view) => view,
            Err(r) if r.code == ErrorCode::NotFound => {
                // Removed (plan_remove): nothing to count.
                l.last_plan = Some((plan, true));
                self.unsettled.remove(&id);
                return;
            }
            // The plans cannot be read now: counted at a later tick.
            Err(_) => return,
        };
        let failed = match view.state {
            PlanState::Succeeded => false,
            PlanState::Failed | PlanState::Cancelled => true,
            _ => return,
        };
        let mut rec = l.rec.clone();
        let mut outcome = format!("{plan} {}", state_word(view.state));
        let mut retry = None;
        let now = self.clock.now_ms();
        let (instant, attempt) = l.last_fire.unwrap_or((now, 0));
        let wait = self.retry_backoff.get(attempt as usize).copied();
        let retry_at = wait.map(|w| now + w.as_millis() as u64);
        // Never past the next instant: that one runs anyway.
        let before_next = retry_at.is_some_and(|at| l.next.is_none_or(|n| at < n));
        if failed && view.state == PlanState::Failed && transient(&view) && before_next {
            if let Some(at) = retry_at {
                retry = Some((at, instant, attempt + 1));
                outcome = format!(
                    "{plan} failed transiently; retry {} at {}",
                    attempt + 1,
                    utc(at).to_rfc3339()
                );
            }
        } else if failed {
            rec.consecutive_failures += 1;
            if rec.consecutive_failures >= rec.max_consecutive_failures.max(1) {
                rec.enabled = false;
                rec.stopped = Some(format!(
                    "{} runs failed in a row (the last: {plan}); `flytoctl job_resume {}` starts it again",
                    rec.consecutive_failures,
                    format_id(id)
                ));
            }
        } else {
            rec.consecutive_failures = 0;
        }
        let owed = rec.notify.as_ref().map(|target| PendingNotify {
            key: format!("notify/{}", fire_key(id, instant, false)),
            target: target.clone(),
            text: notify_text(l, &plan, &view, instant),
        });
        match self.store.put_accounted(&rec, &plan, owed.as_ref()).await {
            Ok(true) => {
                l.rec = rec;
                if let Some(r) = retry {
                    l.retry = Some(r);
                    self.retries.insert((r.0, id));
                }
                if let Some(n) = owed {
                    self.owed.push((id, n));
                }
            }
            Ok(false) => {
                // Another node counted it (and retries or notifies).
                if let Ok(Some(counted)) = self.store.get(id).await {
                    l.rec = counted;
                }
            }
            Err(e) => {
                // Still unsettled: counted at a later tick.
                tracing::warn!("job {}: cannot count {plan}'s end: {e}", format_id(id));
                return;
            }
        }
        l.last_plan = Some((plan, true));
        l.last_outcome = Some(outcome);
        self.unsettled.remove(&id);
    }

    /// One due instant of job `id`.
    async fn fire(&mut self, myself: &ActorRef<JobsMsg>, id: u64, instant: u64) {
        self.account(id).await;
        let now = self.now();
        let Some(l) = self.jobs.get_mut(&id) else {
            return;
        };
        if !l.rec.enabled || l.rec.stopped.is_some() {
            // Stopped meanwhile (its last run's failure was just counted).
            self.reindex(id, now);
            return;
        }
        if l.rec.expires_ms.is_some_and(|e| instant >= e) {
            l.rec.enabled = false;
            l.rec.stopped = Some(format!(
                "expired at {}",
                utc(l.rec.expires_ms.unwrap_or(0)).to_rfc3339()
            ));
            if let Err(e) = self.save(id).await {
                tracing::warn!("job {}: cannot record its expiry: {e}", format_id(id));
            }
            self.reindex(id, now);
            return;
        }
        if now.saturating_sub(instant) > LATE.as_millis() as u64 {
            // Asleep or stalled past its instants: no burst, one record.
            self.catch_up(id, now).await;
            return;
        }
        let before = l.rec.clone();
        l.rec.handled_ms = Some(instant);
        let still_running = match l.last_plan.as_ref() {
            Some((p, _)) => self
                .reader
                .status(p)
                .await
                .is_ok_and(|v| matches!(v.state, PlanState::Pending | PlanState::Running)),
            None => false,
        };
        let mut fire = FireRecord {
            job: id,
            instant_ms: instant,
            at_ms: now,
            manual: false,
            outcome: FireOutcome::Firing,
            plan: None,
            attempt: 0,
        };
        if still_running {
            fire.outcome = FireOutcome::Skipped {
                why: "still running".into(),
            };
        } else {
            fire.plan = Some(plan_of(&l.rec));
        }
        if l.schedule.once() {
            l.rec.enabled = false;
            l.rec.stopped = Some(format!("fired once, at {}", utc(instant).to_rfc3339()));
        }
        let rec = l.rec.clone();
        match self.store.claim_fire(&fire, &rec).await {
            Ok(true) => {
                if still_running {
                    l.last_outcome = Some("skipped (still running)".into());
                }
                self.reindex(id, now);
                if fire.plan.is_some() {
                    self.submit(myself, fire, None);
                }
            }
            // Another node recorded this instant first: it submits.
            Ok(false) => self.reindex(id, now),
            Err(e) => {
                tracing::error!(
                    "job {}: cannot record its fire (tried again in {} s): {e}",
                    format_id(id),
                    AGAIN.as_secs()
                );
                l.rec = before;
                self.again
                    .insert((now + AGAIN.as_millis() as u64, id, instant));
            }
        }
    }

    /// A retry that is due: recorded as a fire of the same instant with the
    /// next attempt number, then submitted under its own key.
    async fn retry(&mut self, myself: &ActorRef<JobsMsg>, id: u64) {
        let now = self.now();
        let Some(l) = self.jobs.get_mut(&id) else {
            return;
        };
        let Some((at, instant, attempt)) = l.retry.take() else {
            return;
        };
        // Paused meanwhile: no retry. A one-shot stopped by its own fire
        // still gets its retries.
        if !l.rec.enabled && !l.schedule.once() {
            return;
        }
        let fire = FireRecord {
            job: id,
            instant_ms: instant,
            at_ms: now,
            manual: false,
            outcome: FireOutcome::Firing,
            plan: Some(plan_of(&l.rec)),
            attempt,
        };
        let rec = l.rec.clone();
        match self.store.claim_fire(&fire, &rec).await {
            Ok(true) => self.submit(myself, fire, None),
            Ok(false) => {}
            Err(e) => {
                tracing::error!(
                    "job {}: cannot record its retry (tried again in {} s): {e}",
                    format_id(id),
                    AGAIN.as_secs()
                );
                let again = (now + AGAIN.as_millis() as u64).max(at);
                l.retry = Some((again, instant, attempt));
                self.retries.insert((again, id));
            }
        }
    }

    /// Submits a recorded fire's plan in a task, once the record is durable;
    /// `answer` hears the plan id.
    fn submit(
        &self,
        myself: &ActorRef<JobsMsg>,
        fire: FireRecord,
        answer: Option<RpcReplyPort<Result<String, Reject>>>,
    ) {
        let store = self.store.clone();
        let me = myself.clone();
        let Some(plan) = fire.plan.clone() else {
            return;
        };
        let key = super::model::attempt_key(&fire);
        let (instant, attempt) = (fire.instant_ms, fire.attempt);
        let hooks = self.hooks.clone();
        let spec = plan.clone();
        let now_ms = self.now();
        tokio::spawn(async move {
            let result = async {
                store.synced().await.map_err(|r| r.message)?;
                crate::failpoint::reached("job-before-submit");
                let scheduler = SCHEDULER.find().ok_or("the scheduler is not running")?;
                let answer = scheduler
                    .call(
                        |reply| SchedulerMsg::Submit {
                            plan,
                            idempotency_key: Some(key),
                            origin: None,
                            reply,
                            early: None,
                        },
                        Some(Duration::from_secs(30)),
                    )
                    .await;
                match answer {
                    Ok(ractor::rpc::CallResult::Success(Ok((plan, _)))) => Ok(plan),
                    Ok(ractor::rpc::CallResult::Success(Err(r))) => Err(r.message),
                    _ => Err("the scheduler did not answer".to_string()),
                }
            }
            .await;
            if let (Some(h), Ok(plan)) = (&hooks, &result) {
                h.fired(&fire, &spec, plan, now_ms);
            }
            let mut fire = fire;
            fire.outcome = match &result {
                Ok(plan) => FireOutcome::Submitted { plan: plan.clone() },
                Err(why) => FireOutcome::Failed { why: why.clone() },
            };
            if let Err(e) = store.fire_outcome(&fire).await {
                tracing::warn!(
                    "job {}: cannot record how its fire ended: {e}",
                    format_id(fire.job)
                );
            }
            if let Some(a) = answer {
                let _ = a.send(
                    result
                        .clone()
                        .map_err(|why| Reject::new(ErrorCode::Internal, why)),
                );
            }
            let _ = me.cast(JobsMsg::Fired {
                job: fire.job,
                instant,
                attempt,
                result,
            });
        });
    }

    async fn load(&mut self, myself: &ActorRef<JobsMsg>) -> Result<(), Reject> {
        let now = self.now();
        for snap in self.store.snapshot().await? {
            let Some(live) = live_of(&snap) else {
                continue;
            };
            let id = snap.rec.id;
            self.jobs.insert(id, live);
            // Its last plan's end is counted once seen.
            self.unsettled.insert(id);
            // A fire recorded but never submitted (a crash between the
            // two): submit it now, under its key.
            for f in snap.firing {
                self.submit(myself, f, None);
            }
            self.catch_up(id, now).await;
        }
        Ok(())
    }

    /// What other nodes changed: jobs created, edited or deleted there,
    /// plans their fires submitted, fires and notifications a dead node
    /// left behind. Only on a store other nodes write.
    async fn refresh(&mut self, myself: &ActorRef<JobsMsg>) {
        let snaps = match self.store.snapshot().await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("jobs: cannot look for other nodes' changes now: {e}");
                return;
            }
        };
        let now = self.now();
        let mut seen = BTreeSet::new();
        for snap in snaps {
            let id = snap.rec.id;
            seen.insert(id);
            // Recorded by a node that died before it submitted: the
            // plan's key makes a second submit the same plan.
            for f in &snap.firing {
                if now.saturating_sub(f.at_ms) > LATE.as_millis() as u64 {
                    self.submit(myself, f.clone(), None);
                }
            }
            let Some(l) = self.jobs.get_mut(&id) else {
                if let Some(live) = live_of(&snap) {
                    self.jobs.insert(id, live);
                    self.unsettled.insert(id);
                    self.reindex(id, now);
                }
                continue;
            };
            let mut changed = false;
            if l.rec != snap.rec {
                if (&l.rec.schedule, &l.rec.tz) != (&snap.rec.schedule, &snap.rec.tz) {
                    match Schedule::parse(
                        &snap.rec.schedule,
                        &snap.rec.tz,
                        utc(snap.rec.created_ms),
                    ) {
                        Ok((s, _)) => l.schedule = s,
                        Err(_) => continue,
                    }
                }
                l.rec = snap.rec.clone();
                changed = true;
            }
            if let Some(f) = &snap.last_submitted
                && let FireOutcome::Submitted { plan } = &f.outcome
            {
                let counted = snap.counted.as_deref() == Some(plan.as_str());
                let known = l
                    .last_plan
                    .as_ref()
                    .is_some_and(|(p, c)| p == plan && (*c || !counted));
                if !known {
                    l.last_plan = Some((plan.clone(), counted));
                    l.last_fire = Some((f.instant_ms, f.attempt));
                    l.last_outcome = snap.last.as_ref().map(outcome_word);
                    if !counted {
                        self.unsettled.insert(id);
                    }
                }
            }
            if changed {
                self.reindex(id, now);
            }
        }
        let gone: Vec<u64> = self
            .jobs
            .keys()
            .filter(|id| !seen.contains(id))
            .copied()
            .collect();
        for id in gone {
            self.forget(id);
        }
        match self.store.pending_notifies().await {
            Ok(orphaned) => self.owed.extend(orphaned),
            Err(e) => tracing::debug!("jobs: cannot look for orphaned notifications: {e}"),
        }
    }

    /// Drops a deleted job from the indexes.
    fn forget(&mut self, id: u64) {
        if let Some(l) = self.jobs.remove(&id) {
            if let Some(next) = l.next {
                self.due.remove(&(next + l.jitter_ms(), id));
            }
            if let Some((at, _, _)) = l.retry {
                self.retries.remove(&(at, id));
            }
        }
        self.unsettled.remove(&id);
    }

    /// Instants that passed while flytod was down (or asleep): one
    /// `missed` record, and the next fire is the first after now.
    async fn catch_up(&mut self, id: u64, now: u64) {
        let Some(l) = self.jobs.get_mut(&id) else {
            return;
        };
        if !l.rec.enabled || l.rec.stopped.is_some() {
            self.reindex(id, now);
            return;
        }
        let from = l.rec.handled_ms.unwrap_or(l.rec.created_ms);
        let mut t = from;
        let (mut count, mut first, mut last) = (0u64, 0u64, 0u64);
        while let Some(n) = l.schedule.next_after(utc(t)) {
            let n = n.timestamp_millis() as u64;
            if n > now || count >= 1_000_000 {
                break;
            }
            if count == 0 {
                first = n;
            }
            count += 1;
            last = n;
            t = n;
        }
        if count > 0 {
            l.rec.handled_ms = Some(last);
            l.last_outcome = Some(format!("missed {count} while flytod was down"));
            if l.schedule.once() {
                l.rec.enabled = false;
                l.rec.stopped = Some("its one instant passed while flytod was down".into());
            }
            let fire = FireRecord {
                job: id,
                instant_ms: last,
                at_ms: now,
                manual: false,
                outcome: FireOutcome::Missed {
                    count,
                    first_ms: first,
                },
                plan: None,
                attempt: 0,
            };
            let rec = l.rec.clone();
            // Lost to another node: it recorded the same instants.
            if let Err(e) = self.store.claim_fire(&fire, &rec).await {
                tracing::error!("job {}: cannot record missed fires: {e}", format_id(id));
            }
        }
        self.reindex(id, now);
    }

    async fn show(&self, id: &str) -> Result<(JobView, Vec<FireView>), Reject> {
        let n = self.find(id)?;
        let l = &self.jobs[&n];
        let mut views = Vec::new();
        for f in self.store.fires(n).await? {
            let plan = match &f.outcome {
                FireOutcome::Submitted { plan } => Some(plan.clone()),
                _ => None,
            };
            let pv = match &plan {
                Some(p) => self.reader.status(p).await.ok(),
                None => None,
            };
            views.push(FireView {
                instant: utc(f.instant_ms).with_timezone(&l.schedule.tz).to_rfc3339(),
                at_ms: f.at_ms,
                manual: f.manual,
                outcome: outcome_word(&f),
                plan_state: pv.as_ref().map(|v| state_word(v.state).to_string()),
                duration_ms: pv
                    .as_ref()
                    .and_then(|v| Some(v.finished_ms?.saturating_sub(v.started_ms?))),
                plan,
            });
        }
        Ok((self.view(l), views))
    }

    async fn set_enabled(&mut self, id: &str, enabled: bool) -> Result<JobView, Reject> {
        let now = self.now();
        let n = self.find(id)?;
        if let Some(l) = self.jobs.get_mut(&n) {
            l.rec.enabled = enabled;
            if enabled {
                // Resuming starts from now: nothing paused fires late.
                l.rec.stopped = None;
                l.rec.consecutive_failures = 0;
                l.rec.handled_ms = Some(l.rec.handled_ms.map_or(now, |h| h.max(now)));
            }
            l.rec.updated_ms = now;
        }
        self.save(n).await?;
        self.reindex(n, now);
        Ok(self.view(&self.jobs[&n]))
    }

    fn apply_spec(
        &self,
        rec: &mut JobRecord,
        spec: &JobSpec,
        creating: bool,
    ) -> Result<Vec<String>, Reject> {
        if let Some(tz) = &spec.tz {
            rec.tz.clone_from(tz);
        }
        if let Some(s) = &spec.schedule {
            rec.schedule.clone_from(s);
        }
        let (_, warnings) =
            Schedule::parse(&rec.schedule, &rec.tz, utc(self.now())).map_err(|e| bad(e.0))?;
        match (&spec.prompt, &spec.plan) {
            (Some(_), Some(_)) => {
                return Err(bad("give a job either a prompt or a plan, not both"));
            }
            (Some(p), None) => {
                if p.trim().is_empty() {
                    return Err(bad(
                        "the prompt is empty: say what the agent should do at each run",
                    ));
                }
                rec.template = Template::Prompt(p.clone());
            }
            (None, Some(plan)) => {
                plan.check()
                    .map_err(|e| bad(format!("the job's plan is invalid: {e}")))?;
                rec.template = Template::Plan(plan.clone());
            }
            (None, None) if creating => {
                return Err(bad(
                    "a job needs what to run: --prompt TEXT (an agent task) or --plan FILE",
                ));
            }
            (None, None) => {}
        }
        if let Some(m) = &spec.mode {
            rec.mode = Mode::parse(m).ok_or_else(|| {
                bad(format!("mode `{m}` is not known: use isolated (a new session per run) or persistent (one session across runs)"))
            })?;
        }
        if let Some(n) = &spec.name {
            let taken = self
                .jobs
                .values()
                .any(|l| l.rec.id != rec.id && l.rec.name.as_deref() == Some(n.as_str()));
            if taken {
                return Err(Reject::new(
                    ErrorCode::Conflict,
                    format!("a job named `{n}` exists: choose another name"),
                ));
            }
            rec.name = Some(n.clone());
        }
        if let Some(w) = &spec.workdir {
            if !std::path::Path::new(w).is_dir() {
                return Err(bad(format!(
                    "workdir {w} is not a directory: create it or pass another"
                )));
            }
            rec.workdir = Some(w.clone());
        }
        if let Some(t) = spec.timeout_secs {
            rec.timeout_secs = Some(t.max(1));
        }
        if let Some(e) = &spec.expires {
            let at = parse_time(e, &rec.tz)?;
            if at <= self.now() {
                return Err(bad(format!(
                    "--expires {e} is in the past: give a time after now"
                )));
            }
            rec.expires_ms = Some(at);
        }
        if let Some(n) = &spec.notify {
            check_notify(n).map_err(bad)?;
            rec.notify = Some(n.clone());
        }
        if let Some(m) = spec.max_consecutive_failures {
            rec.max_consecutive_failures = m.max(1);
        }
        if let Some(j) = spec.jitter_secs {
            rec.jitter_secs = j;
        }
        Ok(warnings)
    }

    async fn create(&mut self, spec: &JobSpec) -> Result<(JobView, Vec<String>), Reject> {
        let now = self.now();
        let id = self.store.next_id().await?;
        let mut rec = JobRecord {
            id,
            name: None,
            schedule: spec.schedule.clone().ok_or_else(|| {
                bad("a job needs --schedule EXPR (see `flytoctl job_next --help`)")
            })?,
            tz: machine_zone(),
            template: Template::Prompt(String::new()),
            mode: Mode::Isolated,
            workdir: None,
            timeout_secs: None,
            notify: None,
            enabled: true,
            expires_ms: None,
            max_consecutive_failures: DEFAULT_MAX_FAILURES,
            jitter_secs: 0,
            created_ms: now,
            updated_ms: now,
            handled_ms: Some(now),
            consecutive_failures: 0,
            stopped: None,
        };
        let warnings = self.apply_spec(&mut rec, spec, true)?;
        let (schedule, _) =
            Schedule::parse(&rec.schedule, &rec.tz, utc(now)).map_err(|e| bad(e.0))?;
        self.store.put(&rec).await?;
        self.jobs.insert(
            id,
            Live {
                rec,
                schedule,
                next: None,
                last_plan: None,
                last_fire: None,
                retry: None,
                last_outcome: None,
            },
        );
        self.reindex(id, now);
        Ok((self.view(&self.jobs[&id]), warnings))
    }

    async fn update(&mut self, id: u64, spec: &JobSpec) -> Result<(JobView, Vec<String>), Reject> {
        let now = self.now();
        let mut rec = self.jobs[&id].rec.clone();
        let warnings = self.apply_spec(&mut rec, spec, false)?;
        let (schedule, _) =
            Schedule::parse(&rec.schedule, &rec.tz, utc(now)).map_err(|e| bad(e.0))?;
        rec.updated_ms = now;
        if spec.schedule.is_some() || spec.tz.is_some() {
            // A new schedule counts from now: an edit never fires what
            // the old schedule had due.
            rec.handled_ms = Some(rec.handled_ms.map_or(now, |h| h.max(now)));
        }
        self.store.put(&rec).await?;
        if let Some(l) = self.jobs.get_mut(&id) {
            l.rec = rec;
            l.schedule = schedule;
        }
        self.reindex(id, now);
        Ok((self.view(&self.jobs[&id]), warnings))
    }
}

/// A job as the actor keeps it, from what the store has of it; `None`
/// (logged) when its schedule no longer parses.
fn live_of(snap: &JobSnapshot) -> Option<Live> {
    let rec = &snap.rec;
    let schedule = match Schedule::parse(&rec.schedule, &rec.tz, utc(rec.created_ms)) {
        Ok((s, _)) => s,
        Err(e) => {
            tracing::error!(
                "job {}: its schedule no longer parses: {e}",
                format_id(rec.id)
            );
            return None;
        }
    };
    let submitted = snap.last_submitted.as_ref();
    Some(Live {
        rec: rec.clone(),
        schedule,
        next: None,
        last_fire: submitted.map(|f| (f.instant_ms, f.attempt)),
        last_plan: submitted.and_then(|f| match &f.outcome {
            FireOutcome::Submitted { plan } => {
                Some((plan.clone(), snap.counted.as_deref() == Some(plan.as_str())))
            }
            _ => None,
        }),
        retry: None,
        last_outcome: snap.last.as_ref().map(outcome_word),
    })
}

/// Queues a run's result in the channels' outbox. `false`: the room is
/// not up (or did not answer): try again later. A refusal (no such
/// binding) is final and logged.
async fn deliver(n: &PendingNotify) -> bool {
    use crate::channels::manager::{CHANNELS, ChannelsMsg};
    let Some(channels) = CHANNELS.find() else {
        return false;
    };
    let answer = channels
        .call(
            |reply| ChannelsMsg::Notify {
                target: n.target.clone(),
                key: n.key.clone(),
                text: n.text.clone(),
                reply: Some(reply),
            },
            Some(Duration::from_secs(30)),
        )
        .await;
    match answer {
        Ok(ractor::rpc::CallResult::Success(Ok(_))) => true,
        Ok(ractor::rpc::CallResult::Success(Err(r))) => {
            tracing::warn!(target = %n.target, "a job's result was not sent: {}", r.message);
            r.code != ErrorCode::Unavailable
        }
        _ => false,
    }
}

/// What a chat is told when a job's run ends: which job, how it ended, and
/// the run's final text (the last step's output, or its error).
fn notify_text(l: &Live, plan: &str, view: &flyto_protocol::PlanView, instant: u64) -> String {
    let name = l.rec.name.clone().unwrap_or_else(|| format_id(l.rec.id));
    let at = utc(instant).with_timezone(&l.schedule.tz).to_rfc3339();
    let mut text = format!("Job {name} ({at}): {plan} {}.", state_word(view.state));
    if let Some(step) = view
        .steps
        .iter()
        .rev()
        .find(|s| !s.stdout_tail.trim().is_empty() || s.error.is_some())
    {
        let body = if step.stdout_tail.trim().is_empty() {
            step.error.clone().unwrap_or_default()
        } else {
            step.stdout_tail.trim_end().to_string()
        };
        text.push_str("\n\n");
        text.push_str(&body);
    }
    text
}

fn state_word(s: PlanState) -> &'static str {
    match s {
        PlanState::Pending => "pending",
        PlanState::Running => "running",
        PlanState::Succeeded => "succeeded",
        PlanState::Failed => "failed",
        PlanState::Cancelled => "cancelled",
    }
}

fn outcome_word(f: &FireRecord) -> String {
    let word = outcome_only(f);
    if f.attempt > 0 {
        format!("{word} (retry {})", f.attempt)
    } else {
        word
    }
}

fn outcome_only(f: &FireRecord) -> String {
    match &f.outcome {
        FireOutcome::Firing => "firing".into(),
        FireOutcome::Submitted { plan } => format!("submitted {plan}"),
        FireOutcome::Skipped { why } => format!("skipped ({why})"),
        FireOutcome::Missed { count, first_ms } => {
            format!("missed {count} (first {})", utc(*first_ms).to_rfc3339())
        }
        FireOutcome::Failed { why } => format!("failed: {why}"),
    }
}

impl Actor for JobsActor {
    type Msg = JobsMsg;
    type State = JobsState;
    type Arguments = JobsArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<JobsMsg>,
        args: JobsArgs,
    ) -> Result<JobsState, ActorProcessingErr> {
        let mut s = JobsState {
            store: args.store,
            reader: args.reader,
            clock: args.clock,
            jobs: HashMap::new(),
            due: BTreeSet::new(),
            retries: BTreeSet::new(),
            again: BTreeSet::new(),
            retry_backoff: args.retry_backoff,
            hooks: args.hooks,
            generation: 0,
            armed: None,
            unsettled: BTreeSet::new(),
            jump_watch: None,
            change_watch: None,
            refresh_queued: Arc::default(),
            owed: Vec::new(),
            retry_owed: Vec::new(),
        };
        if let Some(mut jumps) = s.clock.jumps() {
            let me = myself.clone();
            s.jump_watch = Some(tokio::spawn(async move {
                while jumps.changed().await.is_ok() {
                    if me.send_message(JobsMsg::ClockSet).is_err() {
                        break;
                    }
                }
            }));
        }
        if let Some(mut changes) = s.store.changes() {
            let me = myself.clone();
            let queued = s.refresh_queued.clone();
            s.change_watch = Some(tokio::spawn(async move {
                loop {
                    changes.woken().await;
                    if queued.swap(true, std::sync::atomic::Ordering::SeqCst) {
                        continue;
                    }
                    if me.send_message(JobsMsg::Refresh).is_err() {
                        break;
                    }
                }
            }));
        }
        s.load(&myself).await.map_err(|r| r.message)?;
        // What a crash left owed goes out again; the outbox's key makes
        // a second delivery of it a no-op.
        s.owed = s.store.pending_notifies().await.map_err(|r| r.message)?;
        s.arm(&myself);
        Ok(s)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<JobsMsg>,
        s: &mut JobsState,
    ) -> Result<(), ActorProcessingErr> {
        for w in [s.jump_watch.take(), s.change_watch.take()]
            .into_iter()
            .flatten()
        {
            w.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<JobsMsg>,
        msg: JobsMsg,
        s: &mut JobsState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            JobsMsg::Tick(generation) => {
                if generation != s.generation {
                    return Ok(());
                }
                s.armed = None;
                let now = s.now();
                while let Some(&(at, id)) = s.due.first() {
                    if at > now {
                        break;
                    }
                    // Out of the index first: whatever fire() decides, this
                    // entry cannot come round again.
                    s.due.remove(&(at, id));
                    let instant = s.jobs.get_mut(&id).and_then(|l| l.next.take());
                    match instant {
                        Some(instant) => s.fire(&myself, id, instant).await,
                        None => s.reindex(id, now),
                    }
                }
                while let Some(&(at, id, instant)) = s.again.first() {
                    if at > now {
                        break;
                    }
                    s.again.remove(&(at, id, instant));
                    s.fire(&myself, id, instant).await;
                }
                while let Some(&(at, id)) = s.retries.first() {
                    if at > now {
                        break;
                    }
                    s.retries.remove(&(at, id));
                    s.retry(&myself, id).await;
                }
                for id in s.unsettled.clone() {
                    s.account(id).await;
                }
                s.owed.append(&mut s.retry_owed);
            }
            JobsMsg::Notified { job, notify, done } => {
                if done {
                    if let Err(e) = s.store.notified(job, &notify.key).await {
                        tracing::warn!("job {}: {e}", format_id(job));
                    }
                } else {
                    s.retry_owed.push((job, notify));
                }
            }
            JobsMsg::ClockSet => {
                tracing::info!("the system clock was set: looking again at what is due");
                s.armed = None;
                s.generation += 1;
                let generation = s.generation;
                // Through the mailbox, so this is one tick like any other.
                let _ = myself.send_message(JobsMsg::Tick(generation));
                return Ok(());
            }
            JobsMsg::Refresh => {
                s.refresh_queued
                    .store(false, std::sync::atomic::Ordering::SeqCst);
                s.refresh(&myself).await;
            }
            JobsMsg::Create { spec, reply } => {
                let _ = reply.send(s.create(&spec).await);
            }
            JobsMsg::Update { id, spec, reply } => {
                let r = match s.find(&id) {
                    Ok(n) => s.update(n, &spec).await,
                    Err(e) => Err(e),
                };
                let _ = reply.send(r);
            }
            JobsMsg::List { reply } => {
                let mut all: Vec<&Live> = s.jobs.values().collect();
                all.sort_by_key(|l| l.rec.id);
                let _ = reply.send(Ok(all.iter().map(|l| s.view(l)).collect()));
            }
            JobsMsg::Show { id, reply } => {
                let _ = reply.send(s.show(&id).await);
            }
            JobsMsg::SetEnabled { id, enabled, reply } => {
                let _ = reply.send(s.set_enabled(&id, enabled).await);
            }
            JobsMsg::Delete { id, reply } => {
                let r = match s.find(&id) {
                    Ok(n) => {
                        let view = s.view(&s.jobs[&n]);
                        match s.store.delete(n).await {
                            Ok(()) => {
                                s.forget(n);
                                Ok(view)
                            }
                            Err(e) => Err(e),
                        }
                    }
                    Err(e) => Err(e),
                };
                let _ = reply.send(r);
            }
            JobsMsg::RunNow { id, reply } => {
                let now = s.now();
                let n = match s.find(&id) {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        return Ok(());
                    }
                };
                let rec = s.jobs[&n].rec.clone();
                let fire = FireRecord {
                    job: n,
                    instant_ms: now,
                    at_ms: now,
                    manual: true,
                    outcome: FireOutcome::Firing,
                    plan: Some(plan_of(&rec)),
                    attempt: 0,
                };
                match s.store.claim_fire(&fire, &rec).await {
                    Ok(true) => s.submit(&myself, fire, Some(reply)),
                    Ok(false) => {
                        let _ = reply.send(Err(Reject::new(
                            ErrorCode::Conflict,
                            format!(
                                "job {} was deleted or run at this very instant on another node: `flytoctl job_show {}` says which",
                                format_id(n),
                                format_id(n)
                            ),
                        )));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            JobsMsg::Fired {
                job,
                instant,
                attempt,
                result,
            } => {
                if let Some(l) = s.jobs.get_mut(&job) {
                    match result {
                        Ok(plan) => {
                            l.last_outcome = Some(format!("submitted {plan}"));
                            l.last_plan = Some((plan, false));
                            s.unsettled.insert(job);
                            l.last_fire = Some((instant, attempt));
                        }
                        Err(why) => l.last_outcome = Some(format!("failed: {why}")),
                    }
                }
            }
        }
        s.arm(&myself);
        s.pay(&myself);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, SystemClock};
    use crate::jobs::model::SledJobStore;
    use crate::plans::store::{SledPlanStore, SledPlans};
    use crate::store::Store;

    const T0: u64 = 1_780_000_000_000;

    async fn start(
        clock: &ManualClock,
        dir: &std::path::Path,
    ) -> (ActorRef<JobsMsg>, SledJobStore) {
        let store = Store::open(&dir.join("db"), 8 << 20).unwrap();
        let plans: Arc<dyn crate::plans::PlanRecords> =
            Arc::new(SledPlanStore::open(store.clone()).unwrap());
        let job_store = SledJobStore::open(store).unwrap();
        let args = JobsArgs {
            store: Arc::new(job_store.clone()),
            reader: Arc::new(SledPlans::new(plans, dir.join("logs"))),
            clock: Arc::new(clock.clone()),
            retry_backoff: default_retry_backoff(),
            hooks: None,
        };
        (
            Actor::spawn(None, JobsActor, args).await.unwrap().0,
            job_store,
        )
    }

    async fn list(jobs: &ActorRef<JobsMsg>) -> Vec<JobView> {
        match jobs
            .call(|reply| JobsMsg::List { reply }, None)
            .await
            .unwrap()
        {
            ractor::rpc::CallResult::Success(r) => r.unwrap(),
            _ => panic!("no answer"),
        }
    }

    /// Until job 1 has a fire on disk, for at most `secs`. Read from the
    /// store, not asked of the actor: any request wakes it to look again.
    async fn fire_within(store: &SledJobStore, secs: u64) -> Option<FireRecord> {
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        while std::time::Instant::now() < deadline {
            if let Some(f) = store.read_fires(1).unwrap().pop() {
                return Some(f);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    // The pending tick was set for (at most) 30 s of real time; setting the
    // clock past the instant must fire it now, not when that tick comes.
    #[tokio::test]
    async fn setting_the_clock_past_an_instant_fires_it_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0);
        let (jobs, store) = start(&clock, tmp.path()).await;
        let spec = JobSpec {
            schedule: Some("every 1h".into()),
            tz: Some("UTC".into()),
            prompt: Some("hello".into()),
            ..JobSpec::default()
        };
        let created = jobs
            .call(
                |reply| JobsMsg::Create {
                    spec: Box::new(spec),
                    reply,
                },
                None,
            )
            .await
            .unwrap();
        let ractor::rpc::CallResult::Success(Ok((view, _))) = created else {
            panic!("job not created");
        };
        let next = chrono::DateTime::parse_from_rfc3339(view.next_fire_utc.as_deref().unwrap())
            .unwrap()
            .timestamp_millis() as u64;
        assert!(next > T0 && next <= T0 + 3_600_000);
        assert!(
            fire_within(&store, 1).await.is_none(),
            "fired before its time"
        );

        clock.set_ms(next + 200);
        let fire = fire_within(&store, 10).await;
        let fire = fire.expect("a clock set past the instant did not fire the job");
        assert_eq!(fire.instant_ms, next);
        // No scheduler runs in this test: the fire's submission fails, and
        // the list says so.
        let view = &list(&jobs).await[0];
        let outcome = view.last_outcome.clone().unwrap_or_default();
        assert!(outcome.contains("scheduler is not running"), "{outcome}");
        jobs.stop(None);
    }

    #[test]
    fn the_system_clock_can_be_watched_for_sets() {
        // Arming the timerfd works here; a set itself needs CAP_SYS_TIME.
        assert!(SystemClock.jumps().is_some());
    }
}
