//! The SessionActor: one live session. It accepts a message and starts a
//! run (a task it owns), answers `Conflict` while one is active, cancels it
//! on request, hands out event subscriptions, and stops when idle.

use super::SessionDeps;
use super::approval::{Approvals, ApproverGuard};
use super::model::{ExtractionRecord, SessionRecord, SessionStatus, format_id, message_view};
use super::run::{self, Emitter};
use super::store::Claim;
use crate::kernel::Reject;
use crate::llm::{Block, Message, Role};
use flyto_protocol::{ErrorCode, MessageView, SessionEvent, SessionView};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

pub struct Subscription {
    pub rx: broadcast::Receiver<(u64, SessionEvent)>,
    /// Held while this listener can answer approval requests.
    pub approver: Option<ApproverGuard>,
}

impl Subscription {
    /// The run's next event; `None` once the session's stream closed. A
    /// listener that fell behind skips what it missed.
    pub async fn next(&mut self) -> Option<SessionEvent> {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            match self.rx.recv().await {
                Ok((_, e)) => return Some(e),
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return None,
            }
        }
    }
}

/// A session, its recent messages, and a subscription to what comes next.
pub type Snapshot = (SessionView, Vec<MessageView>, Subscription);

pub enum SessionMsg {
    /// Append a user message and start a run. The reply carries a
    /// subscription taken before the run starts, so nothing is missed.
    Send {
        text: String,
        /// The sender answers approval requests.
        can_approve: bool,
        /// A retried agent step: when `text` is already the last user
        /// message and still unanswered, run on it instead of adding it
        /// again.
        once: bool,
        reply: RpcReplyPort<Result<Subscription, Reject>>,
        /// Set when a job's plan sends it: the job (`j<N>`), so the run
        /// cannot create, change or delete jobs.
        job: Option<String>,
    },
    /// A sub-agent's task: like `Send`, with the bounds of its one run.
    SendAgent {
        task: String,
        limits: Arc<run::AgentLimits>,
        reply: RpcReplyPort<Result<Subscription, Reject>>,
    },
    /// Cancels the run, if any. Answers the session as the cancel left it:
    /// `cancelling` when a run was cancelled.
    Cancel {
        reply: RpcReplyPort<SessionView>,
    },
    /// The session and its last `recent` messages, plus live events.
    Attach {
        recent: u64,
        can_approve: bool,
        reply: RpcReplyPort<Result<Snapshot, Reject>>,
    },
    /// Deletes the session (refused while it runs) and stops the actor.
    Delete {
        reply: RpcReplyPort<Result<(), Reject>>,
    },
    /// An attached client's answer to an approval request.
    Approve {
        approval: u64,
        allow: bool,
        reply: RpcReplyPort<Result<(), Reject>>,
    },
    View {
        reply: RpcReplyPort<SessionView>,
    },
    /// Moves the window start (soft: to the last user message; hard: to
    /// the end). History keeps everything.
    Reset {
        soft: bool,
        reply: RpcReplyPort<Result<SessionView, Reject>>,
    },
    /// Switches the model; compacts at once when the context is over the
    /// new model's threshold.
    SetModel {
        model: String,
        reply: RpcReplyPort<Result<SessionView, Reject>>,
    },
    /// Starts a run that only compacts the window.
    Compact {
        reply: RpcReplyPort<Result<Subscription, Reject>>,
    },
    RunFinished(Box<run::Finished>),
    /// The background memory extraction this session started has ended.
    ExtractionFinished(Box<ExtractionRecord>),
    IdleCheck,
    /// Shutdown: no new runs; a running one gets `grace`, then is
    /// cancelled. Answers once no run is left.
    Drain {
        grace: std::time::Duration,
        reply: RpcReplyPort<()>,
    },
    DrainDeadline,
}

pub struct SessionActor;

pub struct SessionArgs {
    pub id: u64,
    pub deps: Arc<SessionDeps>,
}

pub struct SessionState {
    deps: Arc<SessionDeps>,
    rec: SessionRecord,
    run: Option<CancellationToken>,
    /// Only while a run or a listener needs it: its slots are allocated up
    /// front, and an idle session should cost about a kilobyte.
    emit: Option<Emitter>,
    seq: Arc<std::sync::atomic::AtomicU64>,
    last_active_ms: u64,
    /// Set while the daemon drains: waiting for the run to end.
    draining: Option<Vec<RpcReplyPort<()>>>,
    approvals: Arc<Approvals>,
    /// Set (before the cancel) when the current run is cancelled because
    /// flytod shuts down.
    shutdown: Arc<AtomicBool>,
    /// A `Send` that came after the run's end event but before the run
    /// task reported back: started as soon as it has.
    deferred: Option<Deferred>,
    /// The background memory extraction of this session's turns, while it
    /// waits or runs (at most one per session).
    extraction: Option<CancellationToken>,
    /// Extractions that ended during a run: their cost joins the record
    /// when the run has ended (only the run writes the record meanwhile).
    extracted: Vec<ExtractionRecord>,
    /// On a shared store: cancelled if this node's claim on the session is
    /// lost, until the next run takes it.
    lost: Option<CancellationToken>,
    /// Cancels the run when the claim is lost; ends with the run.
    claim_watch: Option<tokio::task::JoinHandle<()>>,
    /// The claim the current run holds (cancelled once lost).
    run_claim: Option<CancellationToken>,
    /// The bounds of the next run, when it is a sub-agent's task.
    agent_limits: Option<Arc<run::AgentLimits>>,
    /// On a shared store, while clients here follow another node's run.
    follow: Option<tokio::task::JoinHandle<()>>,
}

struct Deferred {
    text: String,
    can_approve: bool,
    once: bool,
    reply: RpcReplyPort<Result<Subscription, Reject>>,
    job: Option<String>,
}

impl Actor for SessionActor {
    type Msg = SessionMsg;
    type State = SessionState;
    type Arguments = SessionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SessionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let Some(rec) = args.deps.store.get(args.id)? else {
            return Err(format!("no session {}", format_id(args.id)).into());
        };
        // On a shared store a `running` record may be another node's live
        // run: it is repaired when this node claims the session.
        let rec = if args.deps.store.shared() {
            rec
        } else {
            recover(&args.deps, rec)?
        };
        let state = SessionState {
            last_active_ms: args.deps.clock.now_ms(),
            deps: args.deps,
            rec,
            run: None,
            emit: None,
            seq: Arc::default(),
            draining: None,
            approvals: Arc::default(),
            shutdown: Arc::default(),
            deferred: None,
            extraction: None,
            extracted: Vec::new(),
            lost: None,
            claim_watch: None,
            run_claim: None,
            agent_limits: None,
            follow: None,
        };
        myself.send_after(state.deps.config().idle_stop, || SessionMsg::IdleCheck);
        Ok(state)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // An actor that dies mid-run takes its run down with it; the record
        // still says `running`, and the next start repairs it.
        if let Some(cancel) = state.run.take() {
            cancel.cancel();
        }
        if let Some(cancel) = state.extraction.take() {
            cancel.cancel();
        }
        for w in [state.claim_watch.take(), state.follow.take()]
            .into_iter()
            .flatten()
        {
            w.abort();
        }
        state.deps.store.release(state.rec.id);
        state.deps.sockets.close(&format_id(state.rec.id));
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if !matches!(msg, SessionMsg::IdleCheck) {
            state.last_active_ms = state.deps.clock.now_ms();
        }
        match msg {
            SessionMsg::SendAgent {
                task,
                limits,
                reply,
            } => {
                if state.run.is_some() {
                    let _ = reply.send(Err(Reject::new(
                        ErrorCode::Conflict,
                        "the sub-agent's session is busy",
                    )));
                } else {
                    state.agent_limits = Some(limits);
                    state.send(task, false, false, reply, None, &myself);
                    state.agent_limits = None;
                }
            }
            SessionMsg::Send {
                text,
                can_approve,
                once,
                reply,
                job,
            } => {
                let ended = state
                    .emit
                    .as_ref()
                    .is_some_and(|e| e.ended.load(Ordering::SeqCst));
                if state.run.is_some() && ended && state.deferred.is_none() {
                    // The run has ended and said so; the actor hears of
                    // it next. Whoever saw the end may send at once.
                    state.deferred = Some(Deferred {
                        text,
                        can_approve,
                        once,
                        reply,
                        job,
                    });
                } else {
                    state.send(text, can_approve, once, reply, job, &myself);
                }
            }
            SessionMsg::Cancel { reply } => {
                let mut view = state.view();
                if let Some(cancel) = &state.run {
                    cancel.cancel();
                    // Read before the run task has seen the cancel: say
                    // what the cancel did, not what it interrupted.
                    view.status = "cancelling".into();
                }
                let _ = reply.send(view);
            }
            SessionMsg::Attach {
                recent,
                can_approve,
                reply,
            } => {
                state.refresh();
                let rx = state.emitter().tx.subscribe();
                state.follow_elsewhere();
                let approver = can_approve.then(|| state.approvals.approver());
                let from = state.rec.next_idx.saturating_sub(recent);
                let answer = state
                    .deps
                    .store
                    .stamped_messages(state.rec.id, from, u64::MAX)
                    .map(|ms| {
                        let views = ms
                            .iter()
                            .map(|(i, m)| message_view(*i, m.created_ms, &m.message))
                            .collect();
                        (state.view(), views, Subscription { rx, approver })
                    })
                    .map_err(Reject::from);
                let _ = reply.send(answer);
            }
            SessionMsg::Delete { reply } => match state.delete() {
                Ok(()) => {
                    if let Some(h) = super::run::SessionHooks::for_record(&state.deps, &state.rec) {
                        h.background(crate::hooks::HookEvent::SessionEnd, serde_json::json!({}));
                    }
                    state.deps.store.after_sync(Box::new(move |synced| {
                        let _ = reply.send(synced.map_err(|e| {
                            Reject::internal(format!("cannot delete the session: {e}"))
                        }));
                    }));
                    myself.stop(Some("deleted".into()));
                }
                Err(r) => {
                    let _ = reply.send(Err(r));
                }
            },
            SessionMsg::Approve {
                approval,
                allow,
                reply,
            } => {
                let answer = if state.approvals.answer(approval, allow) {
                    Ok(())
                } else {
                    Err(Reject::new(
                        ErrorCode::Conflict,
                        format!(
                            "approval {approval} of {} is no longer waiting: it was already answered, timed out, or its run ended",
                            format_id(state.rec.id)
                        ),
                    ))
                };
                let _ = reply.send(answer);
            }
            SessionMsg::View { reply } => {
                state.refresh();
                let _ = reply.send(state.view());
            }
            SessionMsg::Reset { soft, reply } => {
                let answer = state.reset(soft);
                state.reply_when_durable(reply, answer);
            }
            SessionMsg::SetModel { model, reply } => {
                let answer = state.set_model(model, &myself);
                state.reply_when_durable(reply, answer);
            }
            SessionMsg::Compact { reply } => {
                let answer = state
                    .idle_check()
                    .and_then(|()| state.own())
                    .map(|()| state.begin(run::Mode::Compact, None, &myself));
                let _ = reply.send(answer);
            }
            SessionMsg::Drain { grace, reply } => {
                // An extraction is background work: shutdown cancels it at
                // once, and waits only for it to record what it spent.
                if let Some(cancel) = &state.extraction {
                    cancel.cancel();
                }
                if state.run.is_none() && state.extraction.is_none() {
                    let _ = reply.send(());
                } else if state.run.is_none() {
                    state.draining.get_or_insert_with(Vec::new).push(reply);
                } else {
                    state.draining.get_or_insert_with(Vec::new).push(reply);
                    myself.send_after(grace, || SessionMsg::DrainDeadline);
                }
            }
            SessionMsg::DrainDeadline => {
                if let Some(cancel) = &state.run {
                    state.shutdown.store(true, Ordering::SeqCst);
                    cancel.cancel();
                }
            }
            SessionMsg::RunFinished(finished) => {
                state.rec = finished.record;
                state.run = None;
                if let Some(w) = state.claim_watch.take() {
                    w.abort();
                }
                state.release_emitter();
                let lost = state.run_claim.take().is_some_and(|c| c.is_cancelled());
                if lost {
                    // Another node may have the session now: what this run
                    // ended with was refused; read where it stands.
                    state.deps.store.release(state.rec.id);
                    state.refresh();
                    state.extracted.clear();
                } else {
                    for x in std::mem::take(&mut state.extracted) {
                        state.record_extraction(x);
                    }
                    state.maybe_extract(&myself);
                    state.deps.store.release(state.rec.id);
                }
                state.answer_drain();
                myself.send_after(state.deps.config().idle_stop, || SessionMsg::IdleCheck);
                if let Some(d) = state.deferred.take() {
                    state.send(d.text, d.can_approve, d.once, d.reply, d.job, &myself);
                }
            }
            SessionMsg::ExtractionFinished(x) => {
                state.extraction = None;
                if state.run.is_some() {
                    state.extracted.push(*x);
                } else {
                    state.record_extraction(*x);
                }
                state.answer_drain();
            }
            SessionMsg::IdleCheck => {
                state.release_emitter();
                let idle_for = state
                    .deps
                    .clock
                    .now_ms()
                    .saturating_sub(state.last_active_ms);
                let idle_stop = state.deps.config().idle_stop.as_millis() as u64;
                if state.run.is_none()
                    && state.extraction.is_none()
                    && state.listeners() == 0
                    && idle_for + 1 >= idle_stop
                {
                    myself.stop(Some("idle".into()));
                } else if state.run.is_none() {
                    // Busy since the check was set (or someone listens):
                    // look again when the idle time could have run out.
                    let wait = idle_stop.saturating_sub(idle_for).max(1000);
                    myself.send_after(std::time::Duration::from_millis(wait), || {
                        SessionMsg::IdleCheck
                    });
                }
            }
        }
        Ok(())
    }
}

impl SessionState {
    /// Answers a drain once neither a run nor an extraction is left, when
    /// their last writes are durable.
    fn answer_drain(&mut self) {
        if self.run.is_some() || self.extraction.is_some() {
            return;
        }
        for reply in self.draining.take().unwrap_or_default() {
            self.deps.store.after_sync(Box::new(move |_| {
                let _ = reply.send(());
            }));
        }
    }

    /// After a run: once `[memory] extract_every` turns passed since the
    /// last extraction, either the agent saved memory itself in them (the
    /// count starts again) or a background extraction over them starts.
    /// The count (`extract_turns`, bumped with each user message stored)
    /// and the turns' first message (`extract_from_idx`) are in the
    /// record, and both move on before the extraction starts, so a restart
    /// neither loses the count nor extracts a turn twice (an extraction
    /// cut by a crash or a shutdown is not redone).
    fn maybe_extract(&mut self, myself: &ActorRef<SessionMsg>) {
        let every = u64::from(self.deps.config().extract_every);
        // One per session at a time: until it ends the turns keep counting
        // and the next run's end starts one over all of them.
        if every == 0 || self.extraction.is_some() || self.draining.is_some() {
            return;
        }
        let turns = self.rec.extract_turns;
        if turns < every {
            return;
        }
        let id = format_id(self.rec.id);
        let from = self.rec.extract_from_idx.min(self.rec.next_idx);
        let messages: Vec<Message> = match self.deps.store.messages(self.rec.id, from) {
            Ok(ms) => ms.into_iter().map(|(_, m)| m).collect(),
            Err(e) => {
                tracing::warn!(session = %id, "cannot read the turns to extract memory from: {e}");
                return;
            }
        };
        let to = self.rec.next_idx;
        self.rec.extract_from_idx = to;
        self.rec.extract_turns = 0;
        if let Err(e) = self.deps.store.save(&self.rec, &[], false) {
            tracing::warn!(session = %id, "cannot record the memory extraction mark: {e}");
            return;
        }
        if crate::memory::extract::agent_wrote_memory(&messages) {
            tracing::debug!(session = %id, "no memory extraction: the agent saved memory itself");
            return;
        }
        let cancel = CancellationToken::new();
        self.extraction = Some(cancel.clone());
        let job = crate::memory::extract::Job {
            session: id,
            workdir: std::path::PathBuf::from(&self.rec.workdir),
            transcript: crate::memory::extract::transcript(&messages),
            turns,
        };
        let deps = self.deps.clone();
        let me = myself.clone();
        // A task of its own: the mailbox stays free, so the session takes
        // its next message while the extraction works.
        tokio::spawn(async move {
            let models = deps.models();
            let done = crate::memory::extract::run(
                &deps.llm,
                &models,
                &deps.memory,
                deps.clock.clone(),
                &deps.extractions,
                job,
                cancel,
            )
            .await;
            let mut x = ExtractionRecord {
                at_ms: deps.clock.now_ms(),
                from_idx: from,
                to_idx: to,
                turns,
                model: String::new(),
                model_calls: 0,
                usage: Default::default(),
                cost_usd: 0.0,
                saved: Vec::new(),
                forgot: Vec::new(),
                outcome: String::new(),
            };
            match done {
                Ok(d) => {
                    x.model = d.model;
                    x.model_calls = d.outcome.model_calls;
                    x.usage = d.outcome.usage;
                    x.cost_usd = d.outcome.cost;
                    x.saved = d.saved;
                    x.forgot = d.forgot;
                    x.outcome = d.outcome.end.describe();
                }
                Err(why) => {
                    tracing::warn!("memory extraction not run: {why}");
                    x.outcome = format!("not run: {why}");
                }
            }
            let _ = me.cast(SessionMsg::ExtractionFinished(Box::new(x)));
        });
    }

    /// Adds an extraction's cost to the session's totals and keeps its
    /// record, in one write.
    fn record_extraction(&mut self, x: ExtractionRecord) {
        self.rec.usage.add(&x.usage);
        self.rec.cost_usd += x.cost_usd;
        if let Err(e) = self.deps.store.save_extraction(&self.rec, &x) {
            tracing::warn!(session = %format_id(self.rec.id), "cannot record a memory extraction: {e}");
        }
    }

    /// Appends the user's message and starts a run, answering `reply`
    /// once the message is durable.
    fn send(
        &mut self,
        text: String,
        can_approve: bool,
        once: bool,
        reply: RpcReplyPort<Result<Subscription, Reject>>,
        job: Option<String>,
        myself: &ActorRef<SessionMsg>,
    ) {
        // The sender counts as an approver before the run starts:
        // its first tool call may come before this handler ends.
        let approver = can_approve.then(|| self.approvals.approver());
        let answer = self.start(text, once, job, myself).map(|mut sub| {
            sub.approver = approver;
            sub
        });
        match answer {
            Ok(sub) => {
                // Answer once the user's message is durable.
                self.deps.store.after_sync(Box::new(move |synced| {
                    let _ = reply.send(synced.map(|_| sub).map_err(|e| {
                        Reject::new(
                            ErrorCode::Internal,
                            format!("cannot store the message: {e}"),
                        )
                    }));
                }));
            }
            Err(r) => {
                let _ = reply.send(Err(r));
            }
        }
    }

    fn emitter(&mut self) -> &Emitter {
        let seq = self.seq.clone();
        self.emit.get_or_insert_with(|| Emitter::with_seq(seq))
    }

    fn listeners(&self) -> usize {
        self.emit.as_ref().map_or(0, |e| e.tx.receiver_count())
    }

    /// Lets the channel go when nobody runs or listens.
    fn release_emitter(&mut self) {
        if self.run.is_none() && self.listeners() == 0 {
            self.emit = None;
        }
    }

    fn view(&self) -> SessionView {
        self.rec
            .view(self.run.is_some(), self.deps.budget(&self.rec.model))
    }

    /// Answers once what the answer reports is durable.
    fn reply_when_durable<T: Send + 'static>(
        &self,
        reply: RpcReplyPort<Result<T, Reject>>,
        answer: Result<T, Reject>,
    ) {
        match answer {
            Ok(v) => self.deps.store.after_sync(Box::new(move |synced| {
                let _ = reply.send(synced.map(|_| v).map_err(|e| {
                    Reject::new(
                        ErrorCode::Internal,
                        format!("cannot store the session: {e}"),
                    )
                }));
            })),
            Err(r) => {
                let _ = reply.send(Err(r));
            }
        }
    }

    fn save(&mut self) -> Result<(), Reject> {
        self.rec.updated_ms = self.deps.clock.now_ms();
        self.deps
            .store
            .save(&self.rec, &[], false)
            .map_err(Reject::from)
    }

    fn reset(&mut self, soft: bool) -> Result<SessionView, Reject> {
        self.idle_check()?;
        self.own()?;
        let done = self.reset_owned(soft);
        self.disown();
        done
    }

    fn reset_owned(&mut self, soft: bool) -> Result<SessionView, Reject> {
        let base = if soft {
            let from = self.rec.context_base_idx.min(self.rec.next_idx);
            let mut last_user = self.last_user_turn(from)?;
            if last_user.is_none() && from > 0 {
                last_user = self.last_user_turn(0)?;
            }
            last_user.unwrap_or(self.rec.next_idx)
        } else {
            self.rec.next_idx
        };
        let visible: Vec<Message> = self
            .deps
            .store
            .messages(self.rec.id, base)
            .map_err(Reject::from)?
            .into_iter()
            .map(|(_, m)| m)
            .collect();
        let fixed = run::fixed_tokens(&self.deps, &self.rec.workdir, self.deps.clock.now_ms());
        self.rec.context = self.rec.context.reset(fixed, &visible);
        self.rec.context_base_idx = base;
        self.save()?;
        Ok(self.view())
    }

    /// Removes the record and messages; the actor stops after this.
    fn delete(&mut self) -> Result<(), Reject> {
        if self.run.is_some() {
            let id = format_id(self.rec.id);
            return Err(Reject::new(
                ErrorCode::Conflict,
                format!(
                    "session {id} is running, so it cannot be deleted: cancel it first (`flytoctl session_cancel {id}`), then delete it"
                ),
            ));
        }
        self.idle_check()?;
        self.own()?;
        if let Err(e) = self.deps.store.delete(self.rec.id) {
            self.disown();
            return Err(Reject::internal(e));
        }
        // Its private TMPDIR goes with it (absent when it never ran).
        let _ = std::fs::remove_dir_all(crate::tools::sandbox::tmpdir_for(&format_id(self.rec.id)));
        Ok(())
    }

    /// Whether `text` is the last user message and nothing answered it
    /// (no assistant message without tool calls came after it): a step
    /// retried after a crash finds its prompt there.
    fn unanswered_prompt(&self, text: &str) -> Result<bool, Reject> {
        let ms = self
            .deps
            .store
            .messages(self.rec.id, self.rec.context_base_idx)
            .map_err(Reject::from)?;
        let Some(pos) = ms
            .iter()
            .rposition(|(_, m)| crate::compaction::window::is_user_turn(m))
        else {
            return Ok(false);
        };
        let (_, prompt) = &ms[pos];
        let same = matches!(prompt.content.as_slice(), [Block::Text { text: t }] if t == text);
        let answered = ms[pos + 1..].iter().any(|(_, m)| {
            m.role == Role::Assistant
                && !m.content.iter().any(|b| matches!(b, Block::ToolUse { .. }))
        });
        Ok(same && !answered)
    }

    fn last_user_turn(&self, from: u64) -> Result<Option<u64>, Reject> {
        Ok(self
            .deps
            .store
            .messages(self.rec.id, from)
            .map_err(Reject::from)?
            .into_iter()
            .rev()
            .find(|(_, m)| crate::compaction::window::is_user_turn(m))
            .map(|(i, _)| i))
    }

    fn set_model(
        &mut self,
        model: String,
        myself: &ActorRef<SessionMsg>,
    ) -> Result<SessionView, Reject> {
        self.idle_check()?;
        let route = super::route_for(&self.deps.models(), &model)
            .map_err(|e| Reject::new(ErrorCode::BadRequest, e.to_string()))?;
        self.own()?;
        self.rec.model = model;
        if let Err(e) = self.save() {
            self.disown();
            return Err(e);
        }
        let budget = crate::compaction::Budget::for_profile(&route.primary.profile);
        if self.rec.context.tokens() >= budget.compact_at {
            // Re-checked at once: the next message must not overflow.
            self.begin(run::Mode::Compact, None, myself);
        } else {
            self.disown();
        }
        Ok(self.view())
    }

    /// On a shared store, takes the session for this node before a run or
    /// a change, with its record as the store has it now; a record another
    /// node left `running` when it died is repaired first, as after a
    /// crash. Refused while another node runs it.
    fn own(&mut self) -> Result<(), Reject> {
        let id = format_id(self.rec.id);
        match self.deps.store.claim(self.rec.id).map_err(Reject::from)? {
            Claim::Local => Ok(()),
            Claim::Taken { record, lost } => {
                self.lost = Some(lost);
                match recover(&self.deps, *record) {
                    Ok(rec) => {
                        self.rec = rec;
                        Ok(())
                    }
                    Err(e) => {
                        self.disown();
                        Err(Reject::internal(format!("cannot repair session {id}: {e}")))
                    }
                }
            }
            Claim::Gone => Err(Reject::new(
                ErrorCode::NotFound,
                format!(
                    "session {id} was deleted (on another node): `flytoctl session_list` shows the sessions that exist"
                ),
            )),
            Claim::Busy { node } => Err(Reject::new(
                ErrorCode::Conflict,
                format!(
                    "session {id} is running on node {node}: wait for its run to end (`flytoctl session_history {id}` shows it), or cancel it from that node"
                ),
            )),
        }
    }

    /// On a shared store, a session running on another node: what that
    /// run stores reaches the clients attached here.
    fn follow_elsewhere(&mut self) {
        let following = self.follow.as_ref().is_some_and(|f| !f.is_finished());
        if self.run.is_some()
            || following
            || !self.deps.store.shared()
            || self.rec.status != SessionStatus::Running
        {
            return;
        }
        let emit = self.emitter().clone();
        self.follow = Some(super::follow::spawn(
            self.deps.clone(),
            self.rec.id,
            self.rec.next_idx,
            emit,
        ));
    }

    /// Gives back a claim no run holds.
    fn disown(&mut self) {
        if self.lost.take().is_some() {
            self.deps.store.release(self.rec.id);
        }
    }

    /// On a shared store, the record as it is now (another node may have
    /// run the session since); a run of this node's own is the truth.
    fn refresh(&mut self) {
        if self.run.is_some() || !self.deps.store.shared() {
            return;
        }
        match self.deps.store.get(self.rec.id) {
            Ok(Some(rec)) => self.rec = rec,
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(session = %format_id(self.rec.id), "cannot read the session again: {e}");
            }
        }
    }

    /// Refuses while draining or running.
    fn idle_check(&self) -> Result<(), Reject> {
        if self.draining.is_some() {
            return Err(Reject::new(
                ErrorCode::Unavailable,
                "flytod is shutting down: send the message again once it has restarted",
            ));
        }
        if self.run.is_some() {
            return Err(Reject::new(
                ErrorCode::Conflict,
                format!(
                    "session {} is already running: wait for it to finish, or cancel it with `flytoctl session_cancel {}`",
                    format_id(self.rec.id),
                    format_id(self.rec.id)
                ),
            ));
        }
        Ok(())
    }

    fn start(
        &mut self,
        text: String,
        once: bool,
        job: Option<String>,
        myself: &ActorRef<SessionMsg>,
    ) -> Result<Subscription, Reject> {
        self.idle_check()?;
        if text.trim().is_empty() {
            return Err(Reject::new(
                ErrorCode::BadRequest,
                "the message is empty: say what the agent should do",
            ));
        }
        // Fail fast (before storing anything) when no model is configured.
        super::route_for(&self.deps.models(), &self.rec.model)
            .map_err(|e| Reject::new(ErrorCode::BadRequest, e.to_string()))?;
        self.own()?;
        let started = self.start_owned(text, once, job, myself);
        if started.is_err() {
            self.disown();
        }
        started
    }

    fn start_owned(
        &mut self,
        text: String,
        once: bool,
        job: Option<String>,
        myself: &ActorRef<SessionMsg>,
    ) -> Result<Subscription, Reject> {
        self.rec.status = SessionStatus::Running;
        self.rec.error = None;
        self.rec.updated_ms = self.deps.clock.now_ms();
        let messages = if once && self.unanswered_prompt(&text)? {
            Vec::new()
        } else {
            vec![Message::user_text(text)]
        };
        self.rec.next_idx += messages.len() as u64;
        // A turn for memory extraction (see `maybe_extract`).
        self.rec.extract_turns += 1;
        super::context::count_appended(&mut self.rec, &messages);
        self.deps
            .store
            .save(&self.rec, &messages, false)
            .map_err(Reject::from)?;
        if let Some(tell) = &self.deps.on_activity {
            tell(&self.rec.workdir, self.rec.id, self.rec.updated_ms);
        }
        Ok(self.begin(run::Mode::Chat, job, myself))
    }

    /// Starts a run task; the record is already saved as it should start.
    /// `job`: the job whose plan started it.
    fn begin(
        &mut self,
        mode: run::Mode,
        job: Option<String>,
        myself: &ActorRef<SessionMsg>,
    ) -> Subscription {
        if mode == run::Mode::Compact {
            self.rec.status = SessionStatus::Running;
            self.rec.error = None;
            if let Err(e) = self.save() {
                tracing::warn!(session = %format_id(self.rec.id), "cannot mark the session running: {}", e.message);
            }
        }
        let sub = Subscription {
            rx: self.emitter().tx.subscribe(),
            approver: None,
        };
        self.emitter().ended.store(false, Ordering::SeqCst);
        let cancel = CancellationToken::new();
        self.run = Some(cancel.clone());
        if let Some(f) = self.follow.take() {
            f.abort();
        }
        if let Some(lost) = self.lost.take() {
            self.run_claim = Some(lost.clone());
            let run = cancel.clone();
            let id = format_id(self.rec.id);
            self.claim_watch = Some(tokio::spawn(async move {
                lost.cancelled().await;
                tracing::warn!(session = %id, "this node lost its claim on the session: the run stops");
                run.cancel();
            }));
        }
        self.shutdown = Arc::default();
        let ctl = run::Control {
            cancel,
            shutdown: self.shutdown.clone(),
            approvals: self.approvals.clone(),
            job,
            agent: self.agent_limits.take(),
        };
        let deps = self.deps.clone();
        let rec = self.rec.clone();
        let emit = self.emitter().clone();
        let me = myself.clone();
        tokio::spawn(async move {
            let finished = run::run(deps, rec, ctl, emit, mode).await;
            let _ = me.cast(SessionMsg::RunFinished(Box::new(finished)));
        });
        sub
    }
}

/// A session found `running` belongs to a run that died with the daemon
/// (or its actor): answer its unanswered tool calls and mark it interrupted.
pub fn recover(
    deps: &SessionDeps,
    mut rec: SessionRecord,
) -> Result<SessionRecord, ActorProcessingErr> {
    if rec.status != SessionStatus::Running {
        return Ok(rec);
    }
    // Tool processes of the dead run may still be going (a tool's
    // background children outlive flytod): they must not keep acting.
    let socket = deps.config().plan_socket;
    let socket_dir = std::path::Path::new(&socket)
        .parent()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    crate::tools::process::kill_session_leftovers(&format_id(rec.id), &socket_dir);
    let last = rec.next_idx.saturating_sub(1);
    let tail = deps.store.messages(rec.id, last)?;
    let mut repair = Vec::new();
    if let Some((_, m)) = tail.last()
        && m.role == Role::Assistant
    {
        let results: Vec<Block> = m
            .content
            .iter()
            .filter_map(|b| match b {
                Block::ToolUse { id, .. } => Some(Block::ToolResult {
                    call_id: id.clone(),
                    content: "[interrupted: flytod stopped before this tool call finished]".into(),
                    is_error: true,
                }),
                _ => None,
            })
            .collect();
        if !results.is_empty() {
            repair.push(Message {
                role: Role::User,
                content: results,
            });
        }
    }
    rec.next_idx += repair.len() as u64;
    rec.status = SessionStatus::Error;
    rec.error = Some("interrupted: flytod stopped during a run; send a message to continue".into());
    rec.updated_ms = deps.clock.now_ms();
    deps.store.save(&rec, &repair, false)?;
    Ok(rec)
}
