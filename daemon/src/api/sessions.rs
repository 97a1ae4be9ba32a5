//! The `session_*` requests: asked of the session manager (new, list,
//! history, and finding a session's actor) or of one session's actor
//! (send, attach, cancel, reset, approve...). `send` and `attach` stream
//! the run's events on the connection.

use super::{call_actor, registered};
use crate::server::{Ctx, Sink, forward_events};
use flyto_actors::plans::Reject;
use flyto_actors::session::{ManagerMsg, SESSION_MANAGER_NAME, SessionMsg};
use flyto_protocol::framing::FrameError;
use flyto_protocol::{ErrorCode, Response, SessionView};
use ractor::ActorRef;
use std::sync::atomic::Ordering;

/// Asks the session manager and waits for its answer.
pub async fn manager_call<T: Send + 'static>(
    ctx: &Ctx,
    build: impl FnOnce(ractor::RpcReplyPort<Result<T, Reject>>) -> ManagerMsg,
) -> Result<T, Reject> {
    let manager = registered(
        SESSION_MANAGER_NAME,
        "the session manager is restarting: retry in a moment",
    )?;
    call_actor(ctx, &manager, build).await?
}

/// Session `id`'s actor, started by the manager if it sleeps.
async fn actor(ctx: &Ctx, id: &str) -> Result<ActorRef<SessionMsg>, Reject> {
    let id = id.to_string();
    manager_call(ctx, |reply| ManagerMsg::Get { id, reply }).await
}

/// One request to a session actor that answers a view.
async fn view_call(
    ctx: &Ctx,
    id: &str,
    build: impl FnOnce(ractor::RpcReplyPort<Result<SessionView, Reject>>) -> SessionMsg,
) -> Result<Response, Reject> {
    let actor = actor(ctx, id).await?;
    let session = call_actor(ctx, &actor, build).await??;
    Ok(Response::Session { session })
}

pub async fn new(
    ctx: &Ctx,
    name: Option<String>,
    workdir: Option<String>,
    model: Option<String>,
    sandbox: Option<String>,
    network: Option<bool>,
) -> Result<Response, Reject> {
    // Refused here as well as in the manager: the manager hears of the
    // drain a moment after requests start being refused.
    let profile = sandbox
        .as_deref()
        .map(flyto_actors::tools::sandbox::Profile::parse)
        .transpose();
    if ctx.draining.load(Ordering::SeqCst) {
        return Err(Reject::new(
            ErrorCode::Unavailable,
            "flytod is shutting down: create the session again once it has restarted",
        ));
    }
    let profile = profile.map_err(|m| Reject::new(ErrorCode::BadRequest, m))?;
    manager_call(ctx, |reply| ManagerMsg::New {
        name,
        workdir,
        model,
        chain: None,
        sandbox: flyto_actors::session::SessionSandbox {
            profile,
            network,
            write_roots: None,
        },
        reply,
    })
    .await
    .map(|session| Response::Session { session })
}

/// A run's events until it ends: `Some((text, can_approve))` sends a
/// message, `None` only compacts.
pub async fn send(
    id: &str,
    text: Option<(String, bool)>,
    sink: &mut Sink,
    ctx: &Ctx,
) -> Result<(), FrameError> {
    if ctx.draining.load(Ordering::SeqCst) {
        return sink
            .error(
                ErrorCode::Unavailable,
                "flytod is shutting down: send the message again once it has restarted",
            )
            .await;
    }
    let sub = match actor(ctx, id).await {
        Ok(actor) => call_actor(ctx, &actor, |reply| match text {
            Some((text, can_approve)) => SessionMsg::Send {
                text,
                can_approve,
                once: false,
                reply,
                job: None,
            },
            None => SessionMsg::Compact { reply },
        })
        .await
        .and_then(|r| r),
        Err(r) => Err(r),
    };
    match sub {
        Ok(sub) => {
            // Counted until its last event is written: a shutdown waits for
            // that, so the client hears how its run ended.
            let _streaming = ctx.run_streams.enter();
            forward_events(id, sub, true, sink).await
        }
        Err(r) => sink.error(r.code, r.message).await,
    }
}

/// The recent transcript, then every run's events until the client
/// hangs up.
pub async fn attach(
    id: &str,
    (recent, can_approve): (u32, bool),
    sink: &mut Sink,
    ctx: &Ctx,
) -> Result<(), FrameError> {
    let snapshot = match actor(ctx, id).await {
        Ok(actor) => call_actor(ctx, &actor, |reply| SessionMsg::Attach {
            recent: u64::from(recent),
            can_approve,
            reply,
        })
        .await
        .and_then(|r| r),
        Err(r) => Err(r),
    };
    match snapshot {
        Ok((session, messages, sub)) => {
            sink.send(&Response::History {
                session,
                messages,
                summary: None,
                extractions: Vec::new(),
            })
            .await?;
            forward_events(id, sub, false, sink).await
        }
        Err(r) => sink.error(r.code, r.message).await,
    }
}

pub async fn cancel(ctx: &Ctx, id: &str) -> Result<Response, Reject> {
    let actor = actor(ctx, id).await?;
    let session = call_actor(ctx, &actor, |reply| SessionMsg::Cancel { reply }).await?;
    Ok(Response::Session { session })
}

pub async fn list(ctx: &Ctx) -> Result<Response, Reject> {
    manager_call(ctx, |reply| ManagerMsg::List { reply })
        .await
        .map(|sessions| Response::Sessions { sessions })
}

pub async fn history(ctx: &Ctx, id: String) -> Result<Response, Reject> {
    manager_call(ctx, |reply| ManagerMsg::History { id, reply })
        .await
        .map(
            |(session, messages, summary, extractions)| Response::History {
                session,
                messages,
                summary,
                extractions,
            },
        )
}

pub async fn reset(ctx: &Ctx, id: &str, soft: bool) -> Result<Response, Reject> {
    view_call(ctx, id, |reply| SessionMsg::Reset { soft, reply }).await
}

pub async fn set_model(ctx: &Ctx, id: &str, model: String) -> Result<Response, Reject> {
    view_call(ctx, id, |reply| SessionMsg::SetModel { model, reply }).await
}

pub async fn delete(ctx: &Ctx, id: String) -> Result<Response, Reject> {
    let actor = actor(ctx, &id).await?;
    call_actor(ctx, &actor, |reply| SessionMsg::Delete { reply }).await??;
    Ok(Response::SessionDeleted { id })
}

pub async fn approve(ctx: &Ctx, id: &str, approval: u64, allow: bool) -> Result<Response, Reject> {
    let actor = actor(ctx, id).await?;
    call_actor(ctx, &actor, |reply| SessionMsg::Approve {
        approval,
        allow,
        reply,
    })
    .await??;
    Ok(Response::ApprovalAnswered { approval, allow })
}
