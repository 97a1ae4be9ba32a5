//! `plan_cancel`, `plan_list`, `plan_restart` and `plan_remove`.

use crate::conn::Ctx;
use crate::exit;
use crate::format::now_ms;
use crate::output;
use crate::render;
use anyhow::{Context, Result};
use clap::Args;
use flyto_protocol::{PlanState, Request, Response};

pub fn cancel(ctx: &Ctx, id: String) -> Result<u8> {
    match ctx.request(&Request::PlanCancel { id })? {
        Response::PlanCancelled {
            id,
            state,
            already_finished: true,
        } => {
            output::stdout(&format!(
                "{id} had already finished ({}): nothing to cancel\n",
                state.as_str()
            ))?;
            Ok(exit::SUCCESS)
        }
        Response::PlanCancelled { id, state, .. } => {
            output::stdout(&format!("{}\n", render::cancelled(&id, state)))?;
            Ok(exit::SUCCESS)
        }
        other => Err(crate::conn::unexpected("plan_cancel", &other)),
    }
}

/// Prints the new plan's id.
pub fn restart(ctx: &Ctx, id: String) -> Result<u8> {
    match ctx.request(&Request::PlanRestart { id: id.clone() })? {
        Response::PlanSubmitted { id: new, .. } => {
            output::note(&format!("restarted {id} as {new}"));
            output::stdout(&format!("{new}\n"))?;
            Ok(exit::SUCCESS)
        }
        other => Err(crate::conn::unexpected("plan_restart", &other)),
    }
}

pub fn remove(ctx: &Ctx, id: String) -> Result<u8> {
    match ctx.request(&Request::PlanRemove { id })? {
        Response::PlanRemoved { id } => {
            output::stdout(&format!("removed {id} and its logs\n"))?;
            Ok(exit::SUCCESS)
        }
        other => Err(crate::conn::unexpected("plan_remove", &other)),
    }
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only plans in this state: pending, running, succeeded, failed, cancelled
    #[arg(long, value_name = "STATE", value_parser = parse_state)]
    pub state: Option<PlanState>,

    /// At most N plans (newest first); a note on stderr says how many more
    /// there are
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limit: u32,

    /// Print the list as pretty JSON
    #[arg(long)]
    pub json: bool,
}

/// The daemon's default too.
const DEFAULT_LIMIT: u32 = 50;

fn parse_state(s: &str) -> Result<PlanState, String> {
    s.parse()
}

pub fn list(ctx: &Ctx, args: ListArgs) -> Result<u8> {
    let req = Request::PlanList {
        state: args.state,
        limit: Some(args.limit),
    };
    let (plans, total) = match ctx.request(&req)? {
        Response::Plans { plans, total } => (plans, total),
        other => return Err(crate::conn::unexpected("plan_list", &other)),
    };
    if args.json {
        let json =
            serde_json::to_string_pretty(&plans).context("cannot encode the list as JSON")?;
        output::stdout(&format!("{json}\n"))?;
    } else if plans.is_empty() {
        output::note("no plans");
    } else {
        output::stdout(&render::plan_list(&plans, now_ms(), ctx.style))?;
    }
    if let Some(more) = render::more_plans(plans.len(), total, args.state) {
        output::note(&more);
    }
    Ok(exit::SUCCESS)
}
