//! The scheduler of a node on the shared store: it answers the same
//! messages as the one-machine scheduler, under the same name, but keeps
//! no plan itself. A submit is checked as there and stored in PostgreSQL;
//! a cancel revokes the plan's leases and answers once every attempt it
//! revoked has stopped, on whichever node it ran; this node's [`Runner`]
//! claims and runs steps. Each request is a task, so the mailbox never
//! waits on the database. It stores through [`PgPlans`] (its writes are
//! `store/pg_writes.rs`) and runs no SQL of its own; it may not touch the
//! node's sled store.

use super::cluster::{Launch, Runner, RunnerConfig};
use super::model::{format_id, plan_log_dir};
use super::scheduler::{Cancelled, SchedulerMsg, prepare};
use super::store::PgPlans;
use super::store::pg_rows::Submitted;
use super::validate::Workdirs;
use super::{Origin, PlanConfig, Reject};
use crate::clock::Clock;
use crate::store::postgres::plans::PLANS_CHANNEL;
use crate::tools::sandbox::tmpdir_for;
use flyto_protocol::{ErrorCode, PlanSpec};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct SharedSchedulerArgs {
    pub reader: PgPlans,
    pub config: PlanConfig,
    pub clock: Arc<dyn Clock>,
    pub runner: RunnerConfig,
    pub launch: Arc<dyn Launch>,
    /// `plan_finished` hooks: this node runs those of the plans it marks
    /// first (see [`plan_finished_hooks`]).
    pub hooks: Option<super::PlanHooks>,
}

pub struct SharedSchedulerActor;

pub struct SharedState {
    ctx: Arc<Ctx>,
    runner: Arc<Runner>,
    draining: bool,
    hooks_task: Option<tokio::task::JoinHandle<()>>,
}

/// What the request tasks share.
struct Ctx {
    reader: PgPlans,
    config: Mutex<PlanConfig>,
    clock: Arc<dyn Clock>,
    workdirs: Mutex<Workdirs>,
}

impl Ctx {
    fn config(&self) -> PlanConfig {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Actor for SharedSchedulerActor {
    type Msg = SchedulerMsg;
    type State = SharedState;
    type Arguments = SharedSchedulerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: SharedSchedulerArgs,
    ) -> Result<SharedState, ActorProcessingErr> {
        let runner = Runner::start(
            args.reader.shared.clone(),
            args.runner,
            args.launch,
            args.reader.listener.clone(),
        );
        let ctx = Arc::new(Ctx {
            reader: args.reader,
            config: Mutex::new(args.config),
            clock: args.clock,
            workdirs: Mutex::default(),
        });
        let since = ctx.clock.now_ms() as i64;
        let hooks_task = args
            .hooks
            .map(|h| tokio::spawn(plan_finished_hooks(ctx.clone(), h, since)));
        Ok(SharedState {
            ctx,
            runner: Arc::new(runner),
            draining: false,
            hooks_task,
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut SharedState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(t) = state.hooks_task.take() {
            t.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut SharedState,
    ) -> Result<(), ActorProcessingErr> {
        let ctx = state.ctx.clone();
        match msg {
            SchedulerMsg::Submit {
                plan,
                idempotency_key,
                origin,
                reply,
                early,
            } => {
                if state.draining {
                    let _ = reply.send(Err(shutting_down()));
                    return Ok(());
                }
                tokio::spawn(async move {
                    let answer = submit(&ctx, plan, idempotency_key, origin, None).await;
                    if let Some(early) = early {
                        early(&answer);
                    }
                    let _ = reply.send(answer);
                });
            }
            SchedulerMsg::Cancel { id, reply } => {
                tokio::spawn(async move {
                    let _ = reply.send(cancel(&ctx, &id).await);
                });
            }
            SchedulerMsg::Restart { id, origin, reply } => {
                if state.draining {
                    let _ = reply.send(Err(shutting_down()));
                    return Ok(());
                }
                tokio::spawn(async move {
                    let answer = async {
                        let old = finished(&ctx, &id, "restarted").await?;
                        submit(&ctx, old.spec(), None, origin, Some(old.id))
                            .await
                            .map(|(id, _)| id)
                    };
                    let _ = reply.send(answer.await);
                });
            }
            SchedulerMsg::Remove { id, reply } => {
                tokio::spawn(async move {
                    let _ = reply.send(remove(&ctx, &id).await);
                });
            }
            SchedulerMsg::Drain { grace, reply } => {
                state.draining = true;
                let runner = state.runner.clone();
                let wait_more = ctx.config().kill_grace + Duration::from_secs(5);
                tokio::spawn(async move {
                    runner.drain(grace, wait_more).await;
                    let _ = reply.send(());
                });
            }
            SchedulerMsg::Reconfigure(config) => {
                *ctx.config.lock().unwrap_or_else(|e| e.into_inner()) = config;
            }
            SchedulerMsg::Ping(reply) => {
                let _ = reply.send(());
            }
            // The runner runs this node's steps; these are the one-machine
            // scheduler's own.
            SchedulerMsg::StepSpawned { .. }
            | SchedulerMsg::StepFinished { .. }
            | SchedulerMsg::DrainDeadline
            | SchedulerMsg::Sweep => {}
        }
        Ok(())
    }
}

fn shutting_down() -> Reject {
    Reject::new(
        ErrorCode::Unavailable,
        "flytod is shutting down: submit the plan on another node, or again once this one has restarted",
    )
}

async fn submit(
    ctx: &Ctx,
    spec: PlanSpec,
    key: Option<String>,
    origin: Option<Origin>,
    restarted_from: Option<u64>,
) -> Result<(String, bool), Reject> {
    let id = ctx.reader.next_id().await?;
    let rec = {
        let mut workdirs = ctx.workdirs.lock().unwrap_or_else(|e| e.into_inner());
        prepare(
            spec,
            key,
            origin.as_ref(),
            &ctx.config(),
            &mut workdirs,
            (id, ctx.clock.now_ms()),
            restarted_from,
        )?
    };
    match ctx.reader.submit(rec.clone()).await? {
        Submitted::New(id) => Ok((format_id(id), false)),
        Submitted::Existing(first) if first.spec() != rec.spec() => Err(Reject::new(
            ErrorCode::Conflict,
            format!(
                "the idempotency key `{}` belongs to plan {}, which has a different spec: use a new key for a different plan",
                rec.idempotency_key.unwrap_or_default(),
                format_id(first.id)
            ),
        )),
        Submitted::Existing(first) => Ok((format_id(first.id), true)),
    }
}

/// Answered once every attempt it revoked has stopped, on whichever node
/// it ran (see [`PgPlans::cancel`]).
async fn cancel(ctx: &Ctx, key: &str) -> Result<Cancelled, Reject> {
    ctx.reader.cancel(key, ctx.config().kill_grace).await
}

/// The finished plan behind `key`; `Conflict` while it is queued or
/// running.
async fn finished(ctx: &Ctx, key: &str, doing: &str) -> Result<super::model::PlanRecord, Reject> {
    let rec = ctx.reader.record(key).await?;
    if !rec.state.is_terminal() {
        let id = format_id(rec.id);
        return Err(Reject::new(
            ErrorCode::Conflict,
            format!(
                "{id} is {}: only a finished plan can be {doing}; cancel it first (`flytoctl plan_cancel {id}`) or wait for it",
                rec.state.as_str()
            ),
        ));
    }
    Ok(rec)
}

async fn remove(ctx: &Ctx, key: &str) -> Result<String, Reject> {
    let rec = finished(ctx, key, "removed").await?;
    if !ctx.reader.delete(rec.id).await? {
        return Err(Reject::not_found(key));
    }
    // This node's logs of it (other nodes keep theirs).
    let _ = std::fs::remove_dir_all(plan_log_dir(&ctx.reader.log_dir, rec.id));
    let _ = std::fs::remove_dir_all(tmpdir_for(&format_id(rec.id)));
    Ok(format_id(rec.id))
}

/// Runs the `plan_finished` hooks of plans that end on any node from now
/// on: at each change of a plan (and the listener's fallback polls) this
/// node marks the ended plans no node has marked, and runs their hooks.
/// A node without such hooks marks nothing, so one that has them does.
async fn plan_finished_hooks(ctx: Arc<Ctx>, hooks: super::PlanHooks, since_ms: i64) {
    use crate::hooks::HookEvent;
    let mut wake = ctx.reader.listener.subscribe(PLANS_CHANNEL);
    let rt = tokio::runtime::Handle::current();
    loop {
        wake.woken().await;
        if !hooks.hooks.any(HookEvent::PlanFinished, None) {
            continue;
        }
        let ids = match ctx.reader.take_finished(since_ms).await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!("cannot look for finished plans to run their hooks: {e}");
                continue;
            }
        };
        for id in ids {
            match ctx.reader.record_of(id).await {
                Ok(Some(rec)) => hooks.finished(&rec, ctx.clock.now_ms(), &rt),
                Ok(None) => {}
                Err(e) => tracing::warn!(
                    plan = %format_id(id),
                    "cannot read a finished plan for its hooks: {}",
                    e.message
                ),
            }
        }
    }
}
