//! The plan requests: writes asked of the scheduler (submit, cancel,
//! restart, remove), reads answered by the plan reader (status, list,
//! watch). A scoped plan socket sees only its chain and submits one level
//! deeper.

use super::{call_actor, registered};
use crate::server::{Ctx, Mode, Scope, Sink, write_all};
use flyto_actors::plans::{EarlyReply, Reject, SCHEDULER_NAME, SchedulerMsg};
use flyto_protocol::framing::{self, FrameError};
use flyto_protocol::{ErrorCode, Event, PlanSpec, PlanState, Response};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::net::unix::OwnedWriteHalf;

/// Sends a message built around a reply port to the scheduler and waits
/// for the answer.
async fn ask<T: Send + 'static>(
    ctx: &Ctx,
    build: impl FnOnce(ractor::RpcReplyPort<Result<T, Reject>>) -> SchedulerMsg,
) -> Result<T, Reject> {
    let scheduler = registered(
        SCHEDULER_NAME,
        "the scheduler is restarting: retry in a moment",
    )?;
    call_actor(ctx, &scheduler, build).await?
}

/// `submit_plan`: answered on `sink` directly, since a lone writer's
/// answer may already have been written from the commit thread (see
/// [`EarlySubmit`]).
pub async fn submit(
    plan: PlanSpec,
    idempotency_key: Option<String>,
    sink: &mut Sink,
    ctx: &Ctx,
) -> Result<(), FrameError> {
    if ctx.draining.load(Ordering::SeqCst) {
        return sink
            .error(
                ErrorCode::Unavailable,
                "flytod is shutting down: submit the plan again once it has restarted",
            )
            .await;
    }
    if idempotency_key
        .as_deref()
        .is_some_and(|k| flyto_actors::plans::model::job_of_key(k).is_some())
    {
        // Such a key marks a job's run (no schedule tools): a client may
        // not borrow it.
        return sink
            .error(
                ErrorCode::BadRequest,
                "idempotency keys of the form `job jN at <ms>` are the jobs' own: choose another key",
            )
            .await;
    }
    let origin = sink.scope.as_deref().map(Scope::child);
    // Among many writers the answer is not written early.
    let early = (matches!(sink.mode, Mode::Binary) && !flyto_actors::store::crowded())
        .then(|| EarlySubmit::new(&sink.w));
    let answer = ask(ctx, |reply| SchedulerMsg::Submit {
        plan,
        idempotency_key,
        origin,
        reply,
        early: early.as_ref().map(EarlySubmit::reply),
    })
    .await;
    if let Some(rest) = early.and_then(|e| e.finish()) {
        return Ok(write_all(&sink.w, &rest).await?);
    }
    match answer {
        Ok((id, duplicate)) => sink.send(&Response::PlanSubmitted { id, duplicate }).await,
        Err(r) => sink.error(r.code, r.message).await,
    }
}

pub async fn status(ctx: &Ctx, id: &str) -> Result<Response, Reject> {
    ctx.plans()
        .status(id)
        .await
        .map(|plan| Response::Plan { plan })
}

pub async fn list(
    ctx: &Ctx,
    sink: &Sink,
    state: Option<PlanState>,
    limit: Option<u32>,
) -> Result<Response, Reject> {
    let limit = limit.unwrap_or(50).clamp(1, 10_000) as usize;
    let reads = ctx.plans();
    match &sink.scope {
        None => {
            let plans = reads.list(state, limit).await?;
            let total = reads.total(state).await?;
            Ok(Response::Plans { plans, total })
        }
        // A chain is small; look further back and keep its plans.
        Some(scope) => reads.list(state, 10_000).await.map(|all| {
            let mut plans: Vec<_> = all.into_iter().filter(|p| p.chain == scope.chain).collect();
            let total = plans.len() as u64;
            plans.truncate(limit);
            Response::Plans { plans, total }
        }),
    }
}

pub async fn cancel(ctx: &Ctx, id: String) -> Result<Response, Reject> {
    ask(ctx, |reply| SchedulerMsg::Cancel { id, reply })
        .await
        .map(|c| Response::PlanCancelled {
            id: c.id,
            state: c.state,
            already_finished: c.already_finished,
        })
}

pub async fn restart(ctx: &Ctx, sink: &Sink, id: String) -> Result<Response, Reject> {
    let origin = sink.scope.as_deref().map(Scope::child);
    ask(ctx, |reply| SchedulerMsg::Restart { id, origin, reply })
        .await
        .map(|id| Response::PlanSubmitted {
            id,
            duplicate: false,
        })
}

pub async fn remove(ctx: &Ctx, id: String) -> Result<Response, Reject> {
    ask(ctx, |reply| SchedulerMsg::Remove { id, reply })
        .await
        .map(|id| Response::PlanRemoved { id })
}

/// `plan_watch`: snapshot, then one event per published change, then
/// `End` once the plan is terminal.
pub async fn watch(id: &str, sink: &mut Sink, ctx: &Ctx) -> Result<(), FrameError> {
    let (view, rx) = match ctx.plans().watch(id).await {
        Ok(v) => v,
        Err(r) => return sink.error(r.code, r.message).await,
    };
    let mut last = view.revision;
    let mut terminal = view.state.is_terminal();
    sink.send(&Response::Plan { plan: view }).await?;
    if let Some(mut rx) = rx {
        while !terminal {
            let next = match rx.next().await {
                Some(next) => next,
                None => {
                    // The plan left the live set (or the scheduler
                    // restarted): send what is stored and stop.
                    terminal = true;
                    match ctx.plans().status(id).await {
                        Ok(v) => v,
                        Err(_) => break,
                    }
                }
            };
            terminal |= next.state.is_terminal();
            let next = ctx.plans().place(next);
            if next.revision > last {
                last = next.revision;
                sink.send(&Response::Event {
                    seq: next.revision,
                    event: Event::PlanUpdated { plan: next },
                })
                .await?;
            }
        }
    }
    sink.send(&Response::End {}).await
}

/// A submit acknowledged from the commit thread: once the plan is durable
/// it writes `plan_submitted` to the client's socket itself, without
/// blocking, instead of waking this connection's task to write it. That
/// takes a cross-CPU wake-up off the acknowledgement of a lone writer
/// (`flytoctl submit_plan`). What the socket did not take is left for the
/// task to write.
struct EarlySubmit {
    w: Arc<OwnedWriteHalf>,
    state: Arc<std::sync::Mutex<Early>>,
}

enum Early {
    Waiting,
    /// The frame is written but for these bytes.
    Written(Vec<u8>),
    /// The task answered by itself (the call failed or timed out): a late
    /// continuation must not write.
    Abandoned,
}

impl EarlySubmit {
    fn new(w: &Arc<OwnedWriteHalf>) -> EarlySubmit {
        EarlySubmit {
            w: w.clone(),
            state: Arc::new(std::sync::Mutex::new(Early::Waiting)),
        }
    }

    fn reply(&self) -> EarlyReply {
        let w = self.w.clone();
        let state = self.state.clone();
        Box::new(move |answer| {
            // With many clients at once, one runtime thread writing all
            // their answers in a row costs less CPU than this.
            let Ok((id, duplicate)) = answer else {
                return;
            };
            if !flyto_actors::store::lone_writer() {
                return;
            }
            let resp = Response::PlanSubmitted {
                id: id.clone(),
                duplicate: *duplicate,
            };
            let Ok(frame) = framing::frame(&resp) else {
                return;
            };
            let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
            if !matches!(*state, Early::Waiting) {
                return;
            }
            let mut sent = 0;
            while sent < frame.len() {
                match w.try_write(&frame[sent..]) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sent += n,
                }
            }
            // Nothing written: the task sends the whole answer as usual
            // (and sees any socket error itself).
            if sent > 0 {
                *state = Early::Written(frame[sent..].to_vec());
            }
        })
    }

    /// What is left to write of the early answer, if it was (partly)
    /// written; otherwise the task answers as usual.
    fn finish(self) -> Option<Vec<u8>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut *state, Early::Abandoned) {
            Early::Written(rest) => Some(rest),
            Early::Waiting | Early::Abandoned => None,
        }
    }
}
