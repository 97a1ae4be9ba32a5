//! The `breaker_*` requests: asked of compaction's circuit breaker.

use super::{call_actor, registered};
use crate::server::Ctx;
use flyto_actors::compaction::breaker::{BREAKER_NAME, BreakerMsg};
use flyto_actors::plans::Reject;
use flyto_protocol::Response;

/// Asks the breaker actor and waits for its answer.
pub async fn call<T: Send + 'static>(
    ctx: &Ctx,
    build: impl FnOnce(ractor::RpcReplyPort<T>) -> BreakerMsg,
) -> Result<T, Reject> {
    let breaker = registered(
        BREAKER_NAME,
        "the compaction breaker is restarting: retry in a moment",
    )?;
    call_actor(ctx, &breaker, build).await
}

pub async fn status(ctx: &Ctx) -> Result<Response, Reject> {
    call(ctx, |reply| BreakerMsg::Status { reply })
        .await
        .map(|breakers| Response::Breakers { breakers })
}

pub async fn reset(ctx: &Ctx, project: Option<String>) -> Result<Response, Reject> {
    call(ctx, |reply| BreakerMsg::Reset { project, reply })
        .await
        .and_then(|reset| reset)
        .map(|projects| Response::BreakersReset { projects })
}
