//! The daemon's own requests: `hello`, `ping` and `stats` (served while
//! flytod starts, too).

use crate::server::{Ctx, DAEMON_VERSION};
use flyto_actors::compaction::breaker::BreakerMsg;
use flyto_actors::plans::Reject;
use flyto_actors::session::ManagerMsg;
use flyto_protocol::{DaemonStats, PROTOCOL_VERSION, Response};
use std::sync::atomic::Ordering;

pub fn hello() -> Response {
    Response::Welcome {
        protocol: PROTOCOL_VERSION,
        daemon_version: DAEMON_VERSION.into(),
    }
}

pub fn ping(ctx: &Ctx) -> Response {
    Response::Pong {
        daemon_version: DAEMON_VERSION.into(),
        pid: std::process::id(),
        uptime_ms: ctx.started.elapsed().as_millis() as u64,
    }
}

/// Every room's figures in one answer; a room that cannot answer counts
/// as zero.
pub async fn stats(ctx: &Ctx) -> Result<Response, Reject> {
    let c = ctx.plans().counts().await?;
    let (node, peers) = ctx.store().peers().await;
    let sandbox = flyto_actors::tools::sandbox::probe();
    let t = super::sessions::manager_call(ctx, |reply| ManagerMsg::Totals { reply })
        .await
        .unwrap_or_default();
    let breakers_open = super::breaker::call(ctx, |reply| BreakerMsg::Status { reply })
        .await
        .map(|b| b.iter().filter(|v| v.state == "open").count() as u64)
        .unwrap_or(0);
    Ok(Response::Stats {
        stats: DaemonStats {
            daemon_version: DAEMON_VERSION.into(),
            pid: std::process::id(),
            uptime_ms: ctx.started.elapsed().as_millis() as u64,
            draining: ctx.draining.load(Ordering::SeqCst),
            plans_pending: c.pending,
            plans_running: c.running,
            plans_succeeded: c.succeeded,
            plans_failed: c.failed,
            plans_cancelled: c.cancelled,
            steps_running: c.steps_running,
            scheduler_restarts: ctx.restarts.load(Ordering::Relaxed),
            db_bytes: c.db_bytes,
            sessions: t.sessions,
            sessions_running: t.running,
            sessions_live: t.live,
            input_tokens: t.usage.input_tokens,
            output_tokens: t.usage.output_tokens,
            cost_usd: t.cost_usd,
            breakers_open,
            compactions: t.compactions,
            contexts: t.contexts,
            disk_syncs: c.disk_syncs,
            sandbox: sandbox.describe(),
            landlock_abi: sandbox.landlock_abi.max(0) as u32,
            store: ctx.store().describe.clone(),
            node,
            peers,
        },
    })
}
