//! `ping` and `stats`: what the daemon says about itself.

use crate::conn::{Ctx, unexpected};
use crate::exit;
use crate::output;
use crate::render;
use anyhow::{Context, Result};
use flyto_protocol::{Request, Response};

pub fn ping(ctx: &Ctx) -> Result<u8> {
    match ctx.request(&Request::Ping {})? {
        Response::Pong {
            daemon_version,
            pid,
            uptime_ms,
        } => {
            output::stdout(&format!(
                "{}\n",
                render::pong(&daemon_version, pid, uptime_ms)
            ))?;
            Ok(exit::SUCCESS)
        }
        other => Err(unexpected("ping", &other)),
    }
}

pub fn stats(ctx: &Ctx, json: bool) -> Result<u8> {
    let stats = match ctx.request(&Request::Stats {})? {
        Response::Stats { stats } => stats,
        other => return Err(unexpected("stats", &other)),
    };
    if json {
        let text = serde_json::to_string_pretty(&stats).context("cannot encode stats as JSON")?;
        output::stdout(&format!("{text}\n"))?;
    } else {
        output::stdout(&render::stats(&stats))?;
    }
    Ok(exit::SUCCESS)
}
