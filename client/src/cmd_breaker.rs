//! `breaker_status` and `breaker_reset`: the per-project circuit breakers
//! that stop compaction after repeated failures.

use crate::conn::{Ctx, unexpected};
use crate::context_render;
use crate::exit;
use crate::format::now_ms;
use crate::output;
use anyhow::{Context, Result};
use clap::Args;
use flyto_protocol::{Request, Response};

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print the breakers as pretty JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ResetArgs {
    /// Project id as `breaker_status` shows it, an unambiguous prefix of one, or the project's workdir
    /// [default: every open breaker]
    pub project: Option<String>,
}

pub fn status(ctx: &Ctx, args: StatusArgs) -> Result<u8> {
    let breakers = match ctx.request(&Request::BreakerStatus {})? {
        Response::Breakers { breakers } => breakers,
        other => return Err(unexpected("breaker_status", &other)),
    };
    if args.json {
        let json = serde_json::to_string_pretty(&breakers)
            .context("cannot encode the breakers as JSON")?;
        output::stdout(&format!("{json}\n"))?;
    } else if breakers.is_empty() {
        output::note("no compaction breakers recorded (all closed)");
    } else {
        output::stdout(&context_render::breaker_table(
            &breakers,
            now_ms(),
            ctx.style,
        ))?;
    }
    Ok(exit::SUCCESS)
}

pub fn reset(ctx: &Ctx, args: ResetArgs) -> Result<u8> {
    let req = Request::BreakerReset {
        project: args.project,
    };
    let projects = match ctx.request(&req)? {
        Response::BreakersReset { projects } => projects,
        other => return Err(unexpected("breaker_reset", &other)),
    };
    if projects.is_empty() {
        output::stdout("no breaker was open\n")?;
    }
    for project in projects {
        output::stdout(&format!("closed the compaction breaker of {project}\n"))?;
    }
    Ok(exit::SUCCESS)
}
