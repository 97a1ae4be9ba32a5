//! `mcp_list`, `mcp_tools`, `mcp_restart`: the MCP servers flytod connects
//! sessions to (`[mcp.servers.NAME]` in the config), their tools, and a
//! way to start one again.

use crate::conn::{Ctx, unexpected};
use crate::exit;
use crate::output;
use anyhow::{Context, Result};
use clap::Args;
use flyto_protocol::{McpServerView, Request, Response};
use std::io::IsTerminal;

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print the servers as pretty JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// The server's name (its [mcp.servers.NAME])
    pub server: String,
    /// Print the tools, with their schemas, as pretty JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RestartArgs {
    /// The server's name (its [mcp.servers.NAME])
    pub server: String,
}

fn print(text: &str) -> Result<()> {
    // Names, errors and descriptions come from servers: sanitised on a TTY.
    output::stdout(&crate::sanitize::for_tty(
        text,
        std::io::stdout().is_terminal(),
    ))
}

fn server_lines(servers: &[McpServerView]) -> String {
    let mut out = String::new();
    for s in servers {
        let protocol = s
            .protocol
            .as_ref()
            .map(|p| format!(", MCP {p}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{}: {} ({} tool{}{protocol}, {} restart{}) {}\n",
            s.name,
            s.state,
            s.tools,
            if s.tools == 1 { "" } else { "s" },
            s.restarts,
            if s.restarts == 1 { "" } else { "s" },
            s.transport
        ));
        if let Some(e) = &s.last_error {
            out.push_str(&format!("  last error: {e}\n"));
        }
        for p in &s.problems {
            out.push_str(&format!("  {p}\n"));
        }
    }
    out
}

pub fn list(ctx: &Ctx, args: ListArgs) -> Result<u8> {
    let servers = match ctx.request(&Request::McpList {})? {
        Response::McpServers { servers } => servers,
        other => return Err(unexpected("mcp_list", &other)),
    };
    if args.json {
        let json =
            serde_json::to_string_pretty(&servers).context("cannot encode the servers as JSON")?;
        output::stdout(&format!("{json}\n"))?;
        return Ok(exit::SUCCESS);
    }
    if servers.is_empty() {
        print("no MCP servers: add [mcp.servers.NAME] entries to the config (see docs/mcp.md)\n")?;
        return Ok(exit::SUCCESS);
    }
    print(&server_lines(&servers))?;
    Ok(exit::SUCCESS)
}

pub fn tools(ctx: &Ctx, args: ToolsArgs) -> Result<u8> {
    let tools = match ctx.request(&Request::McpTools {
        server: args.server.clone(),
    })? {
        Response::McpTools { tools } => tools,
        other => return Err(unexpected("mcp_tools", &other)),
    };
    if args.json {
        let json =
            serde_json::to_string_pretty(&tools).context("cannot encode the tools as JSON")?;
        output::stdout(&format!("{json}\n"))?;
        return Ok(exit::SUCCESS);
    }
    let mut out = String::new();
    if tools.is_empty() {
        out.push_str(&format!(
            "MCP server `{}` offers no tools (or its allow/deny lists leave none)\n",
            args.server
        ));
    }
    for t in &tools {
        let ro = if t.read_only { " (read-only)" } else { "" };
        out.push_str(&format!("{}{ro}\n  {}\n", t.name, t.description.trim()));
    }
    // The tools the server has that the model is not offered, and why.
    if let Ok(Response::McpServers { servers }) = ctx.request(&Request::McpList {}) {
        for p in servers
            .iter()
            .filter(|s| s.name == args.server)
            .flat_map(|s| &s.problems)
        {
            out.push_str(&format!("{p}\n"));
        }
    }
    print(&out)?;
    Ok(exit::SUCCESS)
}

pub fn restart(ctx: &Ctx, args: RestartArgs) -> Result<u8> {
    let servers = match ctx.request(&Request::McpRestart {
        server: args.server.clone(),
    })? {
        Response::McpServers { servers } => servers,
        other => return Err(unexpected("mcp_restart", &other)),
    };
    print(&format!(
        "restarting MCP server `{}`\n{}",
        args.server,
        server_lines(&servers)
    ))?;
    Ok(exit::SUCCESS)
}
