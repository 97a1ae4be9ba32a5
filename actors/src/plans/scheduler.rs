//! The SchedulerActor: owns the active plans, starts steps as tasks it can
//! cancel, and persists every transition before publishing it.

use super::agent_step::{self, AgentStep};
use super::dag;
use super::model::{PlanRecord, StepAction, format_id, plan_log_dir, step_log_path};
use super::store::sled::{LivePlan, LiveViews, Queue, SledPlans, Slot};
use super::validate::{Limits, Workdirs, validate_in};
use super::{Origin, PlanConfig, PlanSockets, Reject};
use crate::clock::Clock;
use crate::session::SessionSandbox;
use crate::store::AfterSync;
use crate::tools::env::child_env;
use crate::tools::process::{self, CancelReason, CommandSpec, Exit, Outcome};
use crate::tools::sandbox::{Profile, SandboxSpec, tmpdir_for};
use flyto_protocol::{ErrorCode, PlanSpec, PlanState, StepState};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::oneshot;

/// Run on the commit thread once a submit's answer is final (after its
/// sync), just before `reply` gets it: the server writes the answer to the
/// client's socket from there, so the acknowledgement does not wait for a
/// runtime thread to wake up first.
pub type EarlyReply = Early<(String, bool)>;
pub type Early<T> = Box<dyn FnOnce(&Result<T, Reject>) + Send>;

pub enum SchedulerMsg {
    Submit {
        plan: PlanSpec,
        idempotency_key: Option<String>,
        /// Set when a step's or an agent's child submits (through its
        /// scoped plan socket); `None` for a user.
        origin: Option<Origin>,
        reply: RpcReplyPort<Result<(String, bool), Reject>>,
        early: Option<EarlyReply>,
    },
    /// By id or name; answers (id, state, already finished).
    Cancel {
        id: String,
        reply: RpcReplyPort<Result<Cancelled, Reject>>,
    },
    /// A new plan from a finished plan's spec; answers its id.
    Restart {
        id: String,
        origin: Option<Origin>,
        reply: RpcReplyPort<Result<String, Reject>>,
    },
    /// Deletes a finished plan and its logs; answers its id.
    Remove {
        id: String,
        reply: RpcReplyPort<Result<String, Reject>>,
    },
    /// Stop starting steps; give running ones `grace`, then cancel them.
    /// Answers once nothing runs and everything is synced.
    Drain {
        grace: Duration,
        reply: RpcReplyPort<()>,
    },
    Reconfigure(PlanConfig),
    Ping(RpcReplyPort<()>),
    StepSpawned {
        plan: u64,
        step: String,
        pgid: i32,
    },
    StepFinished {
        plan: u64,
        step: String,
        outcome: Outcome,
    },
    DrainDeadline,
    Sweep,
}

/// What a cancel found: the plan's id, its state, and whether it had
/// finished before the cancel came.
#[derive(Debug, Clone, PartialEq)]
pub struct Cancelled {
    pub id: String,
    pub state: PlanState,
    pub already_finished: bool,
}

pub struct SchedulerArgs {
    pub reader: SledPlans,
    pub config: PlanConfig,
    pub clock: Arc<dyn Clock>,
    pub sockets: Arc<dyn PlanSockets>,
    /// `plan_finished` hooks, run once a plan's end is durable.
    pub hooks: Option<super::PlanHooks>,
}

pub struct SchedulerActor;

pub struct SchedulerState {
    reader: SledPlans,
    config: PlanConfig,
    clock: Arc<dyn Clock>,
    hooks: Option<super::PlanHooks>,
    next_id: u64,
    /// Boxed: plans are added at the end of the map, and moving big
    /// values around its nodes cost more than the box.
    active: BTreeMap<u64, Box<ActivePlan>>,
    /// Views of new plans to publish once their record is durable: the
    /// next reply's continuation does it, so that a submit queues one
    /// continuation, not two (see `take_unpublished`).
    unpublished: Vec<(u64, Arc<LivePlan>)>,
    /// Ids of the active plans that may be running: every plan in state
    /// `Running` is here (`pump` drops the others lazily), so that a long
    /// queue of pending plans costs nothing per message.
    started: BTreeSet<u64>,
    /// Pending plans of depth 1 and more: the ones that may take a child
    /// slot. A subset of the queue's pending set, usually tiny.
    pending_children: BTreeSet<u64>,
    drain: Option<Vec<RpcReplyPort<()>>>,
    sweeper: Option<tokio::task::JoinHandle<()>>,
    sockets: Arc<dyn PlanSockets>,
    workdirs: Workdirs,
}

struct ActivePlan {
    rec: PlanRecord,
    stored_state: PlanState,
    live: Arc<LivePlan>,
    /// Steps whose process or agent run has not ended yet. The sender is
    /// taken when the step is told to stop; the entry stays until the step
    /// has finished, so a drain or a cancel waits for it.
    running: HashMap<String, Option<oneshot::Sender<CancelReason>>>,
    cancelling: bool,
    cancel_waiters: Vec<RpcReplyPort<Result<Cancelled, Reject>>>,
    /// Runs in a child slot, beyond `max_parallel_plans` (see `pump`).
    extra: bool,
}

impl Actor for SchedulerActor {
    type Msg = SchedulerMsg;
    type State = SchedulerState;
    type Arguments = SchedulerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SchedulerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut state = SchedulerState {
            next_id: args.reader.store.next_id()?,
            reader: args.reader,
            config: args.config,
            clock: args.clock,
            hooks: args.hooks,
            active: BTreeMap::new(),
            unpublished: Vec::new(),
            started: BTreeSet::new(),
            pending_children: BTreeSet::new(),
            drain: None,
            sweeper: None,
            sockets: args.sockets,
            workdirs: Workdirs::default(),
        };
        state.recover()?;
        state.sweep()?;
        let period =
            (state.config.plan_ttl / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
        state.sweeper = Some(myself.send_interval(period, || SchedulerMsg::Sweep));
        state.pump(&myself)?;
        Ok(state)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(h) = state.sweeper.take() {
            h.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SchedulerMsg::Submit {
                plan,
                idempotency_key,
                origin,
                reply,
                early,
            } => {
                let answer = state.submit(plan, idempotency_key, origin, None);
                let started = answer.is_ok();
                state.reply_after_sync_then(reply, answer, early);
                if started {
                    state.pump_after_submit(&myself)?;
                }
            }
            SchedulerMsg::Cancel { id, reply } => state.cancel(&id, reply, &myself)?,
            SchedulerMsg::Restart { id, origin, reply } => {
                let answer = state.restart(&id, origin);
                let started = answer.is_ok();
                state.reply_after_sync(reply, answer);
                if started {
                    state.pump(&myself)?;
                }
            }
            SchedulerMsg::Remove { id, reply } => {
                let answer = state.remove(&id);
                state.reply_after_sync(reply, answer);
            }
            SchedulerMsg::Drain { grace, reply } => {
                let waiters = state.drain.get_or_insert_with(Vec::new);
                waiters.push(reply);
                state.queue().draining = true;
                myself.send_after(grace, || SchedulerMsg::DrainDeadline);
                state.finish_drain_if_idle();
            }
            SchedulerMsg::Reconfigure(config) => {
                state.config = config;
                state.pump(&myself)?;
            }
            SchedulerMsg::Ping(reply) => {
                let _ = reply.send(());
            }
            SchedulerMsg::StepSpawned { plan, step, pgid } => {
                if let Some(ap) = state.active.get_mut(&plan)
                    && let Some(i) = ap.rec.step_index(&step)
                {
                    ap.rec.steps[i].pgid = Some(pgid);
                    state.persist(plan)?;
                }
            }
            SchedulerMsg::StepFinished {
                plan,
                step,
                outcome,
            } => {
                state.step_finished(plan, &step, outcome)?;
                state.pump(&myself)?;
                state.finish_drain_if_idle();
            }
            SchedulerMsg::DrainDeadline => {
                for ap in state.active.values_mut() {
                    for cancel in ap.running.values_mut().filter_map(Option::take) {
                        let _ = cancel.send(CancelReason::Shutdown);
                    }
                }
            }
            SchedulerMsg::Sweep => state.sweep()?,
        }
        // A new plan no reply took along is published on its own.
        let rest = state.take_unpublished();
        if !rest.1.is_empty() {
            state
                .reader
                .store
                .after_sync(Box::new(move |_| publish(rest)));
        }
        Ok(())
    }
}

/// New plans' views, and where to publish them.
type Unpublished = (LiveViews, Vec<(u64, Arc<LivePlan>)>);

/// Makes new plans' views visible to readers (`SledPlans::watch`).
fn publish((live, views): Unpublished) {
    if views.is_empty() {
        return;
    }
    if let Ok(mut m) = live.write() {
        m.extend(views);
    }
}

impl SchedulerState {
    fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    fn reply_after_sync<T: Send + 'static>(
        &mut self,
        reply: RpcReplyPort<Result<T, Reject>>,
        answer: Result<T, Reject>,
    ) {
        self.reply_after_sync_then(reply, answer, None);
    }

    fn take_unpublished(&mut self) -> Unpublished {
        (
            self.reader.live.clone(),
            std::mem::take(&mut self.unpublished),
        )
    }

    /// Like `reply_after_sync`; `early` sees the final answer first.
    fn reply_after_sync_then<T: Send + 'static>(
        &mut self,
        reply: RpcReplyPort<Result<T, Reject>>,
        answer: Result<T, Reject>,
        early: Option<Early<T>>,
    ) {
        // Before the answer: a client told of a plan can watch it.
        let views = self.take_unpublished();
        let then: AfterSync = Box::new(move |synced| {
            publish(views);
            let answer = match synced {
                Ok(()) => answer,
                Err(e) => Err(Reject::new(
                    ErrorCode::Internal,
                    format!("could not make the change durable: {e}"),
                )),
            };
            if let Some(early) = early {
                early(&answer);
            }
            let _ = reply.send(answer);
        });
        // The actor holds no lock here: a lone submit is synced and
        // answered on this thread (the commit thread stays asleep).
        self.reader.store.after_sync_leading(then);
    }

    /// Writes the plan, then publishes its view once synced.
    fn persist(&mut self, id: u64) -> Result<(), ActorProcessingErr> {
        let Some(ap) = self.active.get_mut(&id) else {
            return Ok(());
        };
        ap.rec.revision += 1;
        // Before the write: until the channel exists, readers read the
        // store, which must not show them the change before it is synced.
        let reader = &self.reader;
        let tx = ap
            .live
            .sender(|| {
                Ok(reader
                    .stored_view(id)?
                    .unwrap_or_else(|| ap.rec.view(&reader.log_dir)))
            })
            .map_err(|r| r.message)?;
        self.reader.store.put(&ap.rec, Some(ap.stored_state))?;
        ap.stored_state = ap.rec.state;
        let view = ap.rec.view(&self.reader.log_dir);
        let terminal = ap.rec.state.is_terminal();
        let live = self.reader.live.clone();
        // Only for an end with `plan_finished` hooks to run: most writes
        // are neither.
        let ended = self
            .hooks
            .as_ref()
            .filter(|h| terminal && h.hooks.any(crate::hooks::HookEvent::PlanFinished, None))
            .map(|h| {
                let rt = tokio::runtime::Handle::current();
                (h.clone(), ap.rec.clone(), self.clock.now_ms(), rt)
            });
        self.reader.store.after_sync(Box::new(move |_| {
            tx.send_replace(view);
            if terminal && let Ok(mut m) = live.write() {
                m.remove(&id);
            }
            if let Some((hooks, rec, now, rt)) = ended {
                hooks.finished(&rec, now, &rt);
            }
        }));
        if terminal {
            self.sockets.close(&format_id(id));
        }
        if terminal && let Some(ap) = self.active.remove(&id) {
            let state = ap.rec.state;
            for w in ap.cancel_waiters {
                let answer = Cancelled {
                    id: format_id(id),
                    state,
                    already_finished: false,
                };
                self.reply_after_sync(w, Ok(answer));
            }
        }
        Ok(())
    }

    fn queue(&self) -> std::sync::RwLockWriteGuard<'_, Queue> {
        self.reader.queue.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts pending plan `id` in the queue (it keeps its place by id).
    fn enqueue(&mut self, id: u64, depth: u32) {
        self.queue().pending.insert(id);
        if depth > 0 {
            self.pending_children.insert(id);
        }
    }

    /// Takes plan `id` out of the queue and gives it a slot.
    fn start_plan(&mut self, id: u64, extra: bool, now: u64) {
        self.queue().pending.remove(&id);
        self.pending_children.remove(&id);
        if let Some(ap) = self.active.get_mut(&id) {
            ap.rec.state = PlanState::Running;
            ap.rec.started_ms.get_or_insert(now);
            ap.extra = extra;
            self.started.insert(id);
        }
    }

    fn make_live(&mut self, rec: PlanRecord, synced: bool) {
        let id = rec.id;
        let live = Arc::new(LivePlan::default());
        if synced {
            publish((self.reader.live.clone(), vec![(id, live.clone())]));
        } else {
            self.unpublished.push((id, live.clone()));
        }
        match rec.state {
            PlanState::Running => {
                self.started.insert(id);
            }
            PlanState::Pending => self.enqueue(id, rec.depth),
            _ => {}
        }
        self.active.insert(
            id,
            Box::new(ActivePlan {
                stored_state: rec.state,
                rec,
                live,
                running: HashMap::new(),
                cancelling: false,
                cancel_waiters: Vec::new(),
                extra: false,
            }),
        );
    }

    fn submit(
        &mut self,
        spec: PlanSpec,
        key: Option<String>,
        origin: Option<Origin>,
        restarted_from: Option<u64>,
    ) -> Result<(String, bool), Reject> {
        if self.drain.is_some() {
            return Err(Reject::new(
                ErrorCode::Unavailable,
                "flytod is shutting down: submit the plan again once it has restarted",
            ));
        }
        let (id, now) = (self.next_id, self.now());
        let rec = prepare(
            spec,
            key,
            origin.as_ref(),
            &self.config,
            &mut self.workdirs,
            (id, now),
            restarted_from,
        )?;
        if let Some(k) = &rec.idempotency_key
            && let Some(first) = self
                .reader
                .store
                .find_idempotent(k)
                .map_err(Reject::internal)?
        {
            return self.same_plan_again(first, k, &rec);
        }
        self.reader
            .store
            .put(&rec, None)
            .map_err(Reject::internal)?;
        self.next_id += 1;
        self.make_live(rec, false);
        Ok((format_id(id), false))
    }

    /// A submit whose idempotency key an earlier plan has: a retry of the
    /// same plan gets the first id; another plan under the key is refused,
    /// since answering with the first plan would silently drop it.
    fn same_plan_again(
        &self,
        first: u64,
        key: &str,
        new: &PlanRecord,
    ) -> Result<(String, bool), Reject> {
        let old = match self.active.get(&first) {
            Some(ap) => Some(ap.rec.spec()),
            None => self
                .reader
                .store
                .get(first)
                .map_err(Reject::internal)?
                .map(|r| r.spec()),
        };
        match old {
            Some(old) if old != new.spec() => Err(Reject::new(
                ErrorCode::Conflict,
                format!(
                    "the idempotency key `{key}` belongs to plan {}, which has a different spec: use a new key for a different plan",
                    format_id(first)
                ),
            )),
            _ => Ok((format_id(first), true)),
        }
    }

    /// The finished plan behind `key` (an id or a name); `Conflict` while
    /// it is still queued or running.
    fn finished(&self, key: &str, doing: &str) -> Result<PlanRecord, Reject> {
        let n = self.reader.resolve(key)?;
        if let Some(ap) = self.active.get(&n) {
            let id = format_id(n);
            return Err(Reject::new(
                ErrorCode::Conflict,
                format!(
                    "{id} is {}: only a finished plan can be {doing}; cancel it first (`flytoctl plan_cancel {id}`) or wait for it",
                    ap.rec.state.as_str()
                ),
            ));
        }
        self.reader
            .store
            .get(n)
            .map_err(Reject::internal)?
            .ok_or_else(|| Reject::not_found(key))
    }

    fn restart(&mut self, key: &str, origin: Option<Origin>) -> Result<String, Reject> {
        let old = self.finished(key, "restarted")?;
        self.submit(old.spec(), None, origin, Some(old.id))
            .map(|(id, _)| id)
    }

    fn remove(&mut self, key: &str) -> Result<String, Reject> {
        let rec = self.finished(key, "removed")?;
        self.reader.store.delete(&rec).map_err(Reject::internal)?;
        let _ = std::fs::remove_dir_all(plan_log_dir(&self.reader.log_dir, rec.id));
        let _ = std::fs::remove_dir_all(tmpdir_for(&format_id(rec.id)));
        Ok(format_id(rec.id))
    }

    /// Crash recovery: running plans and steps go back to pending; a step
    /// out of attempts fails with the reason.
    fn recover(&mut self) -> Result<(), ActorProcessingErr> {
        self.reader
            .live
            .write()
            .map_err(|_| "live view lock poisoned")?
            .clear();
        let now = self.now();
        for mut rec in self.reader.store.load_active()? {
            let prev = rec.state;
            let mut changed = false;
            for s in rec
                .steps
                .iter_mut()
                .filter(|s| s.state == StepState::Running)
            {
                process::kill_orphaned_group(
                    s.pgid.take(),
                    &step_marker(rec.id, &s.id),
                    &socket_dir(&self.config.plan_socket),
                );
                changed = true;
                if s.attempts >= s.max_attempts {
                    s.state = StepState::Failed;
                    s.finished_ms = Some(now);
                    s.error = Some(format!(
                        "interrupted: flytod stopped while it ran, {} of max_attempts = {} attempts used; raise max_attempts to allow more",
                        s.attempts, s.max_attempts
                    ));
                } else {
                    s.state = StepState::Pending;
                    s.error = Some(format!(
                        "attempt {} was interrupted (flytod stopped); it runs again",
                        s.attempts
                    ));
                }
            }
            if rec.state == PlanState::Running {
                rec.state = PlanState::Pending;
                changed = true;
            }
            if changed {
                rec.revision += 1;
                self.reader.store.put(&rec, Some(prev))?;
            }
            self.make_live(rec, true);
        }
        self.reader.store.sync_blocking()?;
        Ok(())
    }

    /// Steps run only in running plans.
    fn running_steps(&self) -> usize {
        self.started
            .iter()
            .filter_map(|id| self.active.get(id))
            .map(|p| p.running.len())
            .sum()
    }

    /// Starts whatever may start now. Called after every change.
    /// While draining nothing new starts, but plans whose steps have all
    /// ended (or that were cancelled) are still settled.
    ///
    /// Slots: `max_parallel_plans` plans run at once, oldest first. On top
    /// of those, a child plan (depth >= 1) whose parent level of the same
    /// chain is running gets a slot of its own, one per chain and level:
    /// a step that submits a plan and waits for it would otherwise hold the
    /// only slot its child needs. The depth cap bounds these extra slots.
    fn pump(&mut self, myself: &ActorRef<SchedulerMsg>) -> Result<(), ActorProcessingErr> {
        let draining = self.drain.is_some();
        let now = self.now();
        let active = &self.active;
        self.started.retain(|id| {
            active
                .get(id)
                .is_some_and(|p| p.rec.state == PlanState::Running)
        });
        // Running plans first; the work per message does not grow with
        // the queue, as pending plans are only looked at while a slot is
        // free (and child plans only when their parent level runs).
        let ids: Vec<u64> = self.started.iter().copied().collect();
        for id in ids {
            self.advance(id, draining, now, myself)?;
        }
        if !draining {
            self.start_pending(now, myself)?;
        }
        self.publish_queue(draining);
        Ok(())
    }

    /// What `pump` does after a submit: the running plans are as they were,
    /// so only the new plan can start, and the queue's readers need a new
    /// snapshot only if it did. This keeps a stream of submits behind busy
    /// slots from advancing every running plan and rebuilding the snapshot
    /// once per submit.
    fn pump_after_submit(
        &mut self,
        myself: &ActorRef<SchedulerMsg>,
    ) -> Result<(), ActorProcessingErr> {
        if self.start_pending(self.now(), myself)? {
            self.publish_queue(false);
        }
        Ok(())
    }

    /// Gives free slots to pending plans, oldest first; says whether any
    /// started.
    fn start_pending(
        &mut self,
        now: u64,
        myself: &ActorRef<SchedulerMsg>,
    ) -> Result<bool, ActorProcessingErr> {
        let max_plans = self.config.max_parallel_plans.max(1);
        let mut any = false;
        loop {
            let normal = self
                .started
                .iter()
                .filter(|id| self.active.get(id).is_some_and(|p| !p.extra))
                .count();
            let next = if normal < max_plans {
                self.queue().pending.first().copied()
            } else {
                None
            };
            let (id, extra) = match next {
                Some(id) => (id, false),
                None => match self.next_child() {
                    Some(id) => (id, true),
                    None => break,
                },
            };
            self.start_plan(id, extra, now);
            self.advance(id, false, now, myself)?;
            any = true;
        }
        Ok(any)
    }

    /// Publishes the queue's running plans and limits for readers.
    fn publish_queue(&mut self, draining: bool) {
        let max_plans = self.config.max_parallel_plans.max(1);
        self.reader
            .steps_running
            .store(self.running_steps() as u64, Ordering::Relaxed);
        let running = self
            .started
            .iter()
            .filter_map(|id| self.active.get(id))
            .filter(|p| p.rec.state == PlanState::Running)
            .map(|p| Slot {
                id: p.rec.id,
                chain: p.rec.chain.clone(),
                depth: p.rec.depth,
                extra: p.extra,
            })
            .collect();
        let mut q = self.queue();
        q.running = running;
        q.max_plans = max_plans;
        q.draining = draining;
    }

    /// The oldest pending child plan that may take a child slot: its
    /// parent level of the chain runs and no plan holds its level's slot.
    fn next_child(&self) -> Option<u64> {
        let running: Vec<&PlanRecord> = self
            .started
            .iter()
            .filter_map(|id| self.active.get(id))
            .filter(|p| p.rec.state == PlanState::Running)
            .map(|p| &p.rec)
            .collect();
        let held = |chain: &str, depth: u32| {
            self.started
                .iter()
                .filter_map(|id| self.active.get(id))
                .any(|p| p.extra && p.rec.chain == chain && p.rec.depth == depth)
        };
        self.pending_children.iter().copied().find(|id| {
            self.active.get(id).is_some_and(|p| {
                p.rec.state == PlanState::Pending
                    && running
                        .iter()
                        .any(|r| r.chain == p.rec.chain && r.depth + 1 == p.rec.depth)
                    && !held(&p.rec.chain, p.rec.depth)
            })
        })
    }

    /// Starts the ready steps of running plan `id` and settles it when all
    /// its steps have ended.
    fn advance(
        &mut self,
        id: u64,
        draining: bool,
        now: u64,
        myself: &ActorRef<SchedulerMsg>,
    ) -> Result<(), ActorProcessingErr> {
        let Some(ap) = self.active.get_mut(&id) else {
            return Ok(());
        };
        if ap.rec.state != PlanState::Running {
            return Ok(());
        }
        // A plan that just got its slot is a change even when no step
        // starts (every step may already have ended).
        let mut changed = ap.stored_state != PlanState::Running;
        let slots = self
            .config
            .max_parallel_steps
            .max(1)
            .saturating_sub(ap.running.len());
        let (skipped, ready) = if ap.cancelling || draining {
            (false, Vec::new())
        } else {
            dag::advance(&mut ap.rec, slots, now)
        };
        changed |= skipped;
        let mut launches = Vec::new();
        for i in ready {
            changed = true;
            launches.extend(self.start_step(id, i, myself));
        }
        let Some(ap) = self.active.get_mut(&id) else {
            return Ok(());
        };
        if ap.running.is_empty()
            && let Some((state, reason)) = dag::outcome(&ap.rec, ap.cancelling)
        {
            ap.rec.state = state;
            ap.rec.reason = reason;
            ap.rec.finished_ms = Some(now);
            changed = true;
        }
        if changed {
            self.persist(id)?;
        }
        // Runs start once their `running` record is durable.
        for launch in launches {
            self.reader.store.after_sync(launch);
        }
        Ok(())
    }

    /// The job whose run plan `plan` is part of: its own key's, or, for a
    /// plan submitted from inside a chain, the chain root's (so a job's
    /// run cannot escape the mark by submitting a sub-plan).
    fn job_of_chain(&self, plan: u64) -> Option<String> {
        let key_job = |rec: &PlanRecord| {
            rec.idempotency_key
                .as_deref()
                .and_then(super::model::job_of_key)
        };
        let rec = &self.active.get(&plan)?.rec;
        if let Some(job) = key_job(rec) {
            return Some(job);
        }
        if rec.depth == 0 {
            return None;
        }
        let root = super::model::parse_id(&rec.chain)?;
        match self.active.get(&root) {
            Some(r) => key_job(&r.rec),
            None => self
                .reader
                .store
                .get(root)
                .ok()
                .flatten()
                .as_ref()
                .and_then(key_job),
        }
    }

    /// Marks step `i` started and returns what launches its run, which the
    /// caller registers with `after_sync` once the record saying so is
    /// written: a crash must never leave a run the record does not count.
    fn start_step(
        &mut self,
        plan: u64,
        i: usize,
        myself: &ActorRef<SchedulerMsg>,
    ) -> Option<AfterSync> {
        let now = self.now();
        let job = self.job_of_chain(plan);
        let config = &self.config;
        let log_dir = self.reader.log_dir.clone();
        let ap = self.active.get_mut(&plan)?;
        let step_sandbox = ap.rec.sandbox_of(&ap.rec.steps.get(i)?.id).cloned();
        // Children of any confined step are confined.
        let children_sandbox = ap
            .rec
            .sandboxes
            .iter()
            .map(|(_, b)| b)
            .find(|b| !b.is_off())
            .cloned();
        let step = &mut ap.rec.steps[i];
        step.started_ms = Some(now);
        step.finished_ms = None;
        step.exit_code = None;
        if step.attempts >= step.max_attempts {
            step.state = StepState::Failed;
            step.finished_ms = Some(now);
            step.error = Some(format!(
                "gave up after {} attempts (max_attempts = {})",
                step.attempts, step.max_attempts
            ));
            return None;
        }
        let agent = match &step.action {
            StepAction::Run { .. } => None,
            StepAction::Agent { prompt, session } => Some(AgentStep {
                prompt: prompt.clone(),
                session: session.clone(),
                plan: format_id(plan),
                workdir: step.workdir.clone(),
                chain: ap.rec.chain.clone(),
                depth: ap.rec.depth,
                timeout: Duration::from_secs(step.timeout_secs),
                sandbox: step_sandbox.as_ref().map(|b| SessionSandbox {
                    profile: Some(b.profile),
                    network: Some(b.network),
                    write_roots: Some(b.write_roots.clone()),
                }),
                job: job.clone(),
            }),
        };
        let command = match &step.action {
            StepAction::Run { command } => command.clone(),
            StepAction::Agent { .. } => String::new(),
        };
        // A step only starts again after an interrupted attempt (a non-zero
        // exit is final): keep that note while it re-runs, so `attempts`
        // is explained; the new outcome replaces it.
        if step.attempts == 0 {
            step.error = None;
        }
        step.attempts += 1;
        step.state = StepState::Running;
        step.stdout_tail.clear();
        step.stderr_tail.clear();
        let dir = plan_log_dir(&log_dir, plan);
        // The plan's folder (and `logs/` on a first plan) is durable
        // before its step runs: a log a client may read must not vanish
        // with its folder in a power cut.
        let log_path = crate::durable::create_dir_all_synced(&dir)
            .ok()
            .map(|_| step_log_path(&log_dir, plan, &step.id));
        step.has_log = log_path.is_some() && agent.is_none();
        let step_id = step.id.clone();
        let marker = step_marker(plan, &step_id);
        let plan_sock = self
            .sockets
            .open(
                &format_id(plan),
                &ap.rec.chain,
                ap.rec.depth,
                children_sandbox,
            )
            .unwrap_or_else(|| config.plan_socket.clone());
        let mut flyto = vec![
            ("FLYTO_PLAN_SOCK".to_string(), plan_sock),
            ("FLYTO_CHAIN".to_string(), ap.rec.chain.clone()),
            ("FLYTO_PLAN_ID".to_string(), format_id(plan)),
            ("FLYTO_STEP".to_string(), marker),
        ];
        // A job's run knows it is one (as its agent steps' tools do).
        flyto.extend(job.map(|j| ("FLYTO_JOB".to_string(), j)));
        let extra = step_env(&step.env, flyto);
        let spec = CommandSpec {
            command,
            workdir: step.workdir.clone().into(),
            env: child_env(std::env::vars(), &extra),
            timeout: Duration::from_secs(step.timeout_secs),
            kill_grace: config.kill_grace,
            log_path,
            log_max: config.log_max_bytes,
            tail_max: config.output_tail_bytes,
            confined: ap.rec.depth >= 1,
            sandbox: step_sandbox.filter(|b| !b.is_off()),
        };
        let (cancel_tx, cancel_rx) = oneshot::channel();
        ap.running.insert(step_id.clone(), Some(cancel_tx));
        let synced_log = spec.log_path.clone();
        let me = myself.clone();
        let runtime = tokio::runtime::Handle::current();
        Some(Box::new(move |synced| {
            if let Err(e) = synced {
                let _ = me.cast(SchedulerMsg::StepFinished {
                    plan,
                    step: step_id,
                    outcome: Outcome {
                        exit: Exit::SpawnFailed(format!(
                            "not started: its start could not be made durable: {e}"
                        )),
                        stdout_tail: String::new(),
                        stderr_tail: String::new(),
                        log_truncated: false,
                    },
                });
                return;
            }
            runtime.spawn(async move {
                let spawned_me = me.clone();
                let spawned_step = step_id.clone();
                let outcome = match agent {
                    Some(agent) => agent_step::run(agent, cancel_rx, spec.tail_max).await,
                    None => {
                        process::run(spec, cancel_rx, move |pgid| {
                            let _ = spawned_me.cast(SchedulerMsg::StepSpawned {
                                plan,
                                step: spawned_step,
                                pgid,
                            });
                        })
                        .await
                    }
                };
                // The log and its name are on disk before the step's end
                // is stored (and so before anyone is told of it).
                if let Some(log) = synced_log {
                    sync_step_log(log).await;
                }
                let _ = me.cast(SchedulerMsg::StepFinished {
                    plan,
                    step: step_id,
                    outcome,
                });
            });
        }))
    }

    fn step_finished(
        &mut self,
        plan: u64,
        step_id: &str,
        outcome: Outcome,
    ) -> Result<(), ActorProcessingErr> {
        let now = self.now();
        let Some(ap) = self.active.get_mut(&plan) else {
            return Ok(());
        };
        ap.running.remove(step_id);
        let Some(i) = ap.rec.step_index(step_id) else {
            return Ok(());
        };
        let step = &mut ap.rec.steps[i];
        step.pgid = None;
        step.stdout_tail = outcome.stdout_tail;
        step.stderr_tail = outcome.stderr_tail;
        step.finished_ms = Some(now);
        let (state, exit_code, error) = match outcome.exit {
            Exit::Code(0) => (StepState::Succeeded, Some(0), None),
            Exit::Code(c) => (StepState::Failed, Some(c), Some(format!("exit code {c}"))),
            Exit::Signal(s) => (
                StepState::Failed,
                None,
                Some(format!("killed by signal {s}")),
            ),
            Exit::TimedOut => (
                StepState::Failed,
                Some(process::TIMEOUT_EXIT),
                Some(format!(
                    "timed out after {}s: raise the step's timeout_secs if it needs longer",
                    step.timeout_secs
                )),
            ),
            Exit::Cancelled(CancelReason::User) => {
                (StepState::Cancelled, None, Some("cancelled by user".into()))
            }
            // `finished_ms` stays: the attempt's duration is how long it
            // ran, until the next attempt starts.
            Exit::Cancelled(CancelReason::Shutdown) if step.attempts < step.max_attempts => (
                StepState::Pending,
                None,
                Some(format!(
                    "interrupted: flytod shut down, will run again (attempt {} of {} ran {:.1}s and was stopped after the shutdown grace)",
                    step.attempts,
                    step.max_attempts,
                    now.saturating_sub(step.started_ms.unwrap_or(now)) as f64 / 1000.0
                )),
            ),
            Exit::Cancelled(CancelReason::Shutdown) => (
                StepState::Failed,
                None,
                Some(format!(
                    "interrupted: flytod shut down during attempt {} of max_attempts = {}, so it will not run again: raise max_attempts to allow more",
                    step.attempts, step.max_attempts
                )),
            ),
            Exit::SpawnFailed(m) => (StepState::Failed, None, Some(m)),
        };
        step.state = state;
        step.exit_code = exit_code;
        step.error = error;
        if outcome.log_truncated {
            let note = format!(
                "output log truncated at {} bytes",
                self.config.log_max_bytes
            );
            step.error = Some(match step.error.take() {
                Some(e) => format!("{e}; {note}"),
                None => note,
            });
        }
        if state == StepState::Pending && ap.running.is_empty() {
            ap.rec.state = PlanState::Pending;
            let depth = ap.rec.depth;
            self.enqueue(plan, depth);
        }
        self.persist(plan)
    }

    fn cancel(
        &mut self,
        key: &str,
        reply: RpcReplyPort<Result<Cancelled, Reject>>,
        myself: &ActorRef<SchedulerMsg>,
    ) -> Result<(), ActorProcessingErr> {
        let n = match self.reader.resolve(key) {
            Ok(n) => n,
            Err(r) => {
                self.reply_after_sync(reply, Err(r));
                return Ok(());
            }
        };
        let Some(ap) = self.active.get_mut(&n) else {
            let answer = match self.reader.store.get(n) {
                Ok(Some(rec)) => Ok(Cancelled {
                    id: format_id(n),
                    state: rec.state,
                    already_finished: true,
                }),
                Ok(None) => Err(Reject::not_found(key)),
                Err(e) => Err(Reject::internal(e)),
            };
            self.reply_after_sync(reply, answer);
            return Ok(());
        };
        let now = self.clock.now_ms();
        ap.cancelling = true;
        for s in ap
            .rec
            .steps
            .iter_mut()
            .filter(|s| s.state == StepState::Pending)
        {
            s.state = StepState::Cancelled;
            s.finished_ms = Some(now);
            s.error = Some("cancelled by user before it started".into());
        }
        for cancel in ap.running.values_mut().filter_map(Option::take) {
            let _ = cancel.send(CancelReason::User);
        }
        // The plan is answered when its last step has stopped.
        ap.cancel_waiters.push(reply);
        let (id, idle, pending) = (
            ap.rec.id,
            ap.running.is_empty(),
            ap.rec.state == PlanState::Pending,
        );
        if idle {
            // Nothing to wait for: let pump settle it as cancelled at once.
            if pending {
                self.start_plan(id, false, now);
            }
            self.pump(myself)
        } else {
            self.persist(id)
        }
    }

    fn finish_drain_if_idle(&mut self) {
        if self.running_steps() > 0 {
            return;
        }
        if let Some(waiters) = self.drain.as_mut() {
            for w in waiters.drain(..) {
                self.reader.store.after_sync(Box::new(move |_| {
                    let _ = w.send(());
                }));
            }
        }
    }

    /// Deletes terminal plans older than the TTL, with their logs.
    fn sweep(&mut self) -> Result<(), ActorProcessingErr> {
        let ttl = self.config.plan_ttl.as_millis() as u64;
        let cutoff = self.now().saturating_sub(ttl);
        loop {
            let ids = self.reader.store.expired(cutoff, 256)?;
            let mut deleted = 0;
            for &id in &ids {
                if let Some(rec) = self.reader.store.get(id)? {
                    self.reader.store.delete(&rec)?;
                    let _ = std::fs::remove_dir_all(plan_log_dir(&self.reader.log_dir, id));
                    let _ = std::fs::remove_dir_all(tmpdir_for(&format_id(id)));
                    deleted += 1;
                }
            }
            if deleted == 0 || deleted < ids.len() {
                return Ok(());
            }
        }
    }
}

/// Makes a finished step's log durable: the file, and its name in the
/// plan's folder. Off the async thread: a sync may wait on the disk.
pub(super) async fn sync_step_log(log: std::path::PathBuf) {
    let result = tokio::task::spawn_blocking(move || {
        if !log.exists() {
            return Ok(());
        }
        crate::durable::sync_file(&log)
            .and_then(|()| crate::durable::sync_parent(&log))
            .map_err(|e| format!("cannot sync step log {}: {e}", log.display()))
    })
    .await;
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("{e}; a power cut now may lose it (check the disk)"),
        Err(e) => tracing::warn!("step log sync did not finish: {e}"),
    }
}

fn socket_dir(socket: &str) -> String {
    std::path::Path::new(socket)
        .parent()
        .map(|d| d.display().to_string())
        .unwrap_or_default()
}

/// Put in each child's environment so a restarted daemon can recognise the
/// leftovers of an interrupted attempt.
pub(super) fn step_marker(plan: u64, step: &str) -> String {
    format!("{}/{step}", format_id(plan))
}

/// What a step gets beyond flytod's environment: the plan's env, and the
/// FLYTO_ variables over it, as the chain and crash cleanup rely on them.
pub(super) fn step_env(
    env: &[(String, String)],
    flyto: Vec<(String, String)>,
) -> Vec<(String, String)> {
    let mut extra: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| !flyto.iter().any(|(f, _)| f == k))
        .cloned()
        .collect();
    extra.extend(flyto);
    extra
}

/// Checks submitted plan `spec` and makes the record of new plan `id`
/// from it (created at `now` ms), as every store keeps it.
pub(super) fn prepare(
    spec: PlanSpec,
    key: Option<String>,
    origin: Option<&Origin>,
    config: &PlanConfig,
    workdirs: &mut Workdirs,
    (id, now): (u64, u64),
    restarted_from: Option<u64>,
) -> Result<PlanRecord, Reject> {
    if let Some(o) = origin
        && o.depth > config.max_depth
    {
        return Err(Reject::new(
            ErrorCode::PermissionDenied,
            format!(
                "plan depth {} would exceed plans.max_depth = {} in chain {}: plans started by agents and steps may nest only that deep, so an agent cannot spawn itself without end; do the work in this plan instead",
                o.depth, config.max_depth, o.chain
            ),
        ));
    }
    let limits = Limits {
        max_steps: config.max_steps,
        max_text_bytes: 1024 * 1024,
        default_timeout_secs: config.default_step_timeout.as_secs().max(1),
        default_max_attempts: config.default_max_attempts.max(1),
        default_workdir: config.default_workdir.clone(),
    };
    let steps =
        validate_in(&spec, &limits, workdirs).map_err(|m| Reject::new(ErrorCode::BadRequest, m))?;
    let plan_id = format_id(id);
    let sandboxes = resolve_sandboxes(
        &spec,
        &steps,
        origin.and_then(|o| o.sandbox.as_ref()),
        config,
        &plan_id,
    )
    .map_err(|m| Reject::new(ErrorCode::BadRequest, m))?;
    let rec = PlanRecord {
        id,
        name: spec.name,
        state: PlanState::Pending,
        reason: None,
        created_ms: now,
        started_ms: None,
        finished_ms: None,
        revision: 1,
        idempotency_key: key,
        steps,
        chain: origin.map_or(plan_id, |o| o.chain.clone()),
        depth: origin.map_or(0, |o| o.depth),
        restarted_from,
        sandboxes,
    };
    if let Some(k) = &rec.idempotency_key
        && (k.is_empty() || k.len() > 256)
    {
        return Err(Reject::new(
            ErrorCode::BadRequest,
            "the idempotency key must be 1 to 256 bytes",
        ));
    }
    Ok(rec)
}

/// Each step's confinement. A plan from a confined submitter keeps the
/// submitter's sandbox (its write roots, TMPDIR and network) and may only
/// tighten the profile; a user's plan gets the profile it names (step over
/// plan over `[plans] sandbox`), writing in the step's own workdir.
fn resolve_sandboxes(
    spec: &flyto_protocol::PlanSpec,
    steps: &[super::model::StepRecord],
    inherited: Option<&SandboxSpec>,
    config: &PlanConfig,
    plan_id: &str,
) -> Result<Vec<(String, SandboxSpec)>, String> {
    // `what` names the field, formatted only for an error.
    let named = |name: &Option<String>, what: &dyn Fn() -> String| {
        name.as_deref()
            .map(Profile::parse)
            .transpose()
            .map_err(|e| format!("{}: {e}", what()))
    };
    let plan_profile = named(&spec.sandbox, &|| "the plan's `sandbox`".into())?;
    let mut out = Vec::new();
    for (step_spec, step) in spec.steps.iter().zip(steps) {
        let asked = named(&step_spec.sandbox, &|| {
            format!("step `{}`: `sandbox`", step.id)
        })?
        .or(plan_profile);
        let sandbox = match inherited {
            Some(from) => {
                let profile = asked.map_or(from.profile, |p| from.profile.stricter(p));
                SandboxSpec {
                    profile,
                    ..from.clone()
                }
            }
            // An agent step's session gets `[sandbox]` unless one is named.
            None if matches!(step.action, StepAction::Agent { .. }) && asked.is_none() => continue,
            None => SandboxSpec {
                profile: asked.unwrap_or(config.sandbox),
                write_roots: vec![step.workdir.clone().into()],
                tmpdir: Some(tmpdir_for(plan_id)),
                network: config.sandbox_network,
            },
        };
        // An agent step keeps an explicit `off` (its session would default
        // to `[sandbox]` otherwise).
        if !sandbox.is_off() || matches!(step.action, StepAction::Agent { .. }) {
            out.push((step.id.clone(), sandbox));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A power cut must not take the log of a step anyone saw succeed:
    /// once the success is visible, the log and its folders are synced.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_step_log_and_its_folders_are_synced_before_its_success_is_seen() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let store = crate::store::Store::open(&root.join("db"), 8 << 20).unwrap();
        let plans = crate::plans::store::SledPlanStore::open(store).unwrap();
        let logs = root.join("logs");
        let reader = SledPlans::new(Arc::new(plans), logs.clone());
        let (actor, handle) = Actor::spawn(
            None,
            SchedulerActor,
            SchedulerArgs {
                reader: reader.clone(),
                config: PlanConfig::default(),
                clock: Arc::new(crate::clock::SystemClock),
                sockets: Arc::new(crate::plans::NoPlanSockets),
                hooks: None,
            },
        )
        .await
        .unwrap();
        let plan = PlanSpec {
            steps: vec![flyto_protocol::StepSpec {
                id: "main".into(),
                run: Some("echo logged".into()),
                workdir: Some(root.display().to_string()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let (id, _) = ractor::call!(actor, |reply| SchedulerMsg::Submit {
            plan,
            idempotency_key: None,
            origin: None,
            reply,
            early: None,
        })
        .unwrap()
        .unwrap();
        let (_, rx) = reader.watch(&id).unwrap();
        let mut rx = rx.unwrap();
        tokio::time::timeout(
            Duration::from_secs(30),
            rx.wait_for(|v| v.state == PlanState::Succeeded),
        )
        .await
        .unwrap()
        .unwrap();
        let synced = crate::durable::synced_under(&root);
        let plan_logs = logs.join(&id);
        for p in [plan_logs.join("main.log"), plan_logs, logs.clone(), root] {
            assert!(
                synced.contains(&p),
                "{} not synced: {synced:?}",
                p.display()
            );
        }
        actor.stop(None);
        let _ = handle.await;
    }
}
