//! The `mcp_*` requests: answered by the MCP room's handle.

use crate::server::Ctx;
use flyto_actors::plans::Reject;
use flyto_protocol::Response;

pub async fn list(ctx: &Ctx) -> Result<Response, Reject> {
    ctx.mcp
        .list()
        .await
        .map(|servers| Response::McpServers { servers })
}

pub async fn tools(ctx: &Ctx, server: &str) -> Result<Response, Reject> {
    ctx.mcp
        .tools_of(server)
        .await
        .map(|tools| Response::McpTools { tools })
}

/// Restarts one server and answers with its new state.
pub async fn restart(ctx: &Ctx, server: &str) -> Result<Response, Reject> {
    ctx.mcp.restart(server).await?;
    ctx.mcp.list().await.map(|all| Response::McpServers {
        servers: all.into_iter().filter(|s| s.name == server).collect(),
    })
}
