//! The request table: every request of the protocol, and the room that
//! answers it. One flat, exhaustive `match`: a new request is a compile
//! error here until a room answers it, and no request falls through a
//! chain of handlers. Each room's module turns its requests into calls on
//! that room's actor or handle and its answers into wire views; the
//! connection (framing, peer check, scope) stays in `server`.

mod breaker;
pub mod channels;
mod daemon;
mod dream;
mod hooks;
mod jobs;
mod mcp;
mod memory;
mod plans;
mod policy;
mod sessions;
mod skills;

use crate::server::{Ctx, Sink};
use flyto_actors::plans::Reject;
use flyto_protocol::framing::FrameError;
use flyto_protocol::{ErrorCode, Request};
use ractor::ActorRef;
use ractor::rpc::CallResult;
use std::time::Duration;

/// Answers one request on `sink`. A streaming request (a plan's watch, a
/// session's send or attach) writes its events itself; every other one
/// answers once.
pub async fn dispatch(req: Request, sink: &mut Sink, ctx: &Ctx) -> Result<(), FrameError> {
    let answer = match req {
        // The daemon itself.
        Request::Hello { .. } => Ok(daemon::hello()),
        Request::Ping {} => Ok(daemon::ping(ctx)),
        Request::Stats {} => daemon::stats(ctx).await,
        // Plans: the scheduler writes, the plan reader reads.
        Request::SubmitPlan {
            plan,
            idempotency_key,
        } => return plans::submit(plan, idempotency_key, sink, ctx).await,
        Request::PlanStatus { id } => plans::status(ctx, &id).await,
        Request::PlanList { state, limit } => plans::list(ctx, sink, state, limit).await,
        Request::PlanCancel { id } => plans::cancel(ctx, id).await,
        Request::PlanRestart { id } => plans::restart(ctx, sink, id).await,
        Request::PlanRemove { id } => plans::remove(ctx, id).await,
        Request::PlanWatch { id } => return plans::watch(&id, sink, ctx).await,
        // Sessions: the session manager and each session's actor.
        Request::SessionNew {
            name,
            workdir,
            model,
            sandbox,
            network,
        } => sessions::new(ctx, name, workdir, model, sandbox, network).await,
        Request::SessionSend {
            id,
            text,
            can_approve,
        } => return sessions::send(&id, Some((text, can_approve)), sink, ctx).await,
        Request::SessionCompact { id } => return sessions::send(&id, None, sink, ctx).await,
        Request::SessionAttach {
            id,
            recent,
            can_approve,
        } => return sessions::attach(&id, (recent.unwrap_or(20), can_approve), sink, ctx).await,
        Request::SessionCancel { id } => sessions::cancel(ctx, &id).await,
        Request::SessionList {} => sessions::list(ctx).await,
        Request::SessionHistory { id } => sessions::history(ctx, id).await,
        Request::SessionReset { id, soft } => sessions::reset(ctx, &id, soft).await,
        Request::SessionSetModel { id, model } => sessions::set_model(ctx, &id, model).await,
        Request::SessionDelete { id } => sessions::delete(ctx, id).await,
        Request::SessionApprove {
            id,
            approval,
            allow,
        } => sessions::approve(ctx, &id, approval, allow).await,
        // Compaction's circuit breaker.
        Request::BreakerStatus {} => breaker::status(ctx).await,
        Request::BreakerReset { project } => breaker::reset(ctx, project).await,
        // The permission policy, hooks, MCP servers and skills.
        Request::PolicyCheck { command, workdir } => policy::check(ctx, &command, &workdir),
        Request::HookList {} => Ok(hooks::list(&ctx.hooks)),
        Request::McpList {} => mcp::list(ctx).await,
        Request::McpTools { server } => mcp::tools(ctx, &server).await,
        Request::McpRestart { server } => mcp::restart(ctx, &server).await,
        Request::SkillList { workdir } => skills::list(ctx, &workdir),
        Request::SkillShow { name, workdir } => skills::show(ctx, &name, &workdir),
        Request::SkillReload { workdir } => skills::reload(ctx, &workdir),
        // Memory: the memory room's handle.
        Request::MemoryList { project } => memory::list(&ctx.memory, &project).await,
        Request::MemoryShow { project, name } => memory::show(&ctx.memory, &project, &name).await,
        Request::MemorySearch { project, query } => {
            memory::search(&ctx.memory, &project, &query, ctx.clock.now_ms()).await
        }
        Request::MemoryForget {
            project,
            name,
            reason,
        } => memory::forget(&ctx.memory, &project, name, &reason).await,
        Request::MemoryRestore { project, name } => {
            memory::restore(&ctx.memory, &project, name).await
        }
        Request::MemoryPath { project } => memory::path(&ctx.memory, &project),
        Request::MemoryExport {} => memory::export(&ctx.memory).await,
        Request::MemoryImport { folders } => memory::import(&ctx.memory, &folders).await,
        // Dream: its actor, or its run records.
        Request::DreamStatus { project } => dream::status(project).await,
        Request::DreamLog { project, limit } => {
            dream::log(&ctx.memory.state_dir, project.as_deref(), limit)
        }
        Request::DreamDiff { run } => dream::diff(&ctx.memory.state_dir, &run),
        Request::DreamRun { project, dry_run } => dream::run(project, dry_run).await,
        Request::DreamUndo { project, run } => dream::undo(project, run).await,
        // Jobs: the jobs actor (a schedule's next fires need none).
        Request::JobNext {
            expr,
            tz,
            after,
            count,
        } => jobs::next(ctx, &expr, tz, after, count),
        Request::JobCreate { spec } => jobs::create(ctx, spec).await,
        Request::JobUpdate { id, spec } => jobs::update(ctx, id, spec).await,
        Request::JobList {} => jobs::list(ctx).await,
        Request::JobShow { id } => jobs::show(ctx, id).await,
        Request::JobPause { id } => jobs::set_enabled(ctx, id, false).await,
        Request::JobResume { id } => jobs::set_enabled(ctx, id, true).await,
        Request::JobDelete { id } => jobs::delete(ctx, id).await,
        Request::JobRun { id } => jobs::run(ctx, id).await,
        // Channels: the channels room's manager.
        Request::ChannelList {} => channels::list().await,
        Request::ChannelBind { spec } => channels::bind(spec).await,
        Request::ChannelUnbind { name } => channels::unbind(name).await,
        Request::ChannelPair { code } => channels::pair(code).await,
        Request::ChannelTest { name } => channels::test(name).await,
        Request::ChannelQr { base_url } => channels::qr(base_url.as_deref()).await,
        Request::ChannelQrWait { id, base_url, name } => {
            channels::qr_wait(&id, base_url.as_deref(), name).await
        }
    };
    match answer {
        Ok(resp) => sink.send(&resp).await,
        Err(r) => sink.error(r.code, r.message).await,
    }
}

/// The actor registered under `name`, or `Unavailable` saying `what` is
/// restarting.
fn registered<M: Send + 'static>(name: &str, missing: &str) -> Result<ActorRef<M>, Reject> {
    ractor::registry::where_is(name.into())
        .map(ActorRef::from)
        .ok_or_else(|| Reject::new(ErrorCode::Unavailable, missing.to_string()))
}

/// Asks an actor and waits; a stopped actor or a timeout is an answer too.
/// Counted against `[daemon] max_inflight`, so overload is an answer, not a
/// growing queue.
async fn call_actor<M: Send + 'static, T: Send + 'static>(
    ctx: &Ctx,
    actor: &ActorRef<M>,
    build: impl FnOnce(ractor::RpcReplyPort<T>) -> M,
) -> Result<T, Reject> {
    let _permit = ctx.inflight.try_acquire().map_err(|_| {
        Reject::new(
            ErrorCode::Unavailable,
            "flytod is overloaded (too many requests in flight): retry shortly",
        )
    })?;
    match actor.call(build, Some(Duration::from_secs(120))).await {
        Ok(CallResult::Success(answer)) => Ok(answer),
        Ok(CallResult::Timeout) => Err(Reject::new(
            ErrorCode::Internal,
            "flytod did not answer within 120 s; see the daemon log",
        )),
        Ok(CallResult::SenderError) | Err(_) => Err(Reject::new(
            ErrorCode::Unavailable,
            "the actor stopped while handling the request: retry in a moment",
        )),
    }
}

/// A request's `workdir`: absolute and existing, canonicalised as a
/// session's is.
fn canonical_workdir(op: &str, workdir: &str) -> Result<std::path::PathBuf, Reject> {
    if !std::path::Path::new(workdir).is_absolute() {
        return Err(Reject::new(
            ErrorCode::BadRequest,
            format!(
                "{op}: workdir `{workdir}` is not absolute; send the absolute path of the directory it is about"
            ),
        ));
    }
    std::fs::canonicalize(workdir).map_err(|e| {
        Reject::new(
            ErrorCode::BadRequest,
            format!("{op}: the workdir {workdir} is not usable ({e}); give an existing directory"),
        )
    })
}
