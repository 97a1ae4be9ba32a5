//! `hook_list`: the hooks flytod runs around sessions' runs and tool
//! calls (from `[[hooks]]` in the config), each with its last outcomes.

use crate::conn::{Ctx, unexpected};
use crate::exit;
use crate::output;
use anyhow::{Context, Result};
use clap::Args;
use flyto_protocol::{Request, Response};
use std::io::IsTerminal;

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print the hooks as pretty JSON
    #[arg(long)]
    pub json: bool,
}

pub fn list(ctx: &Ctx, args: ListArgs) -> Result<u8> {
    let hooks = match ctx.request(&Request::HookList {})? {
        Response::Hooks { hooks } => hooks,
        other => return Err(unexpected("hook_list", &other)),
    };
    if args.json {
        let json =
            serde_json::to_string_pretty(&hooks).context("cannot encode the hooks as JSON")?;
        output::stdout(&format!("{json}\n"))?;
        return Ok(exit::SUCCESS);
    }
    let mut out = String::new();
    if hooks.is_empty() {
        out.push_str("no hooks: add [[hooks]] entries to the config (see docs/hooks.md)\n");
    }
    for h in &hooks {
        let matcher = h
            .matcher
            .as_ref()
            .map(|m| format!(" on {m}"))
            .unwrap_or_default();
        let required = if h.required { ", required" } else { "" };
        out.push_str(&format!(
            "{} ({}{matcher}, timeout {} ms{required}): {}\n",
            h.name, h.event, h.timeout_ms, h.command
        ));
        if h.last.is_empty() {
            out.push_str("  not run yet\n");
        }
        for r in &h.last {
            out.push_str(&format!(
                "  {} {} ({} ms)\n",
                r.at, r.outcome, r.duration_ms
            ));
        }
    }
    // Commands and reasons come from config and hooks: sanitised on a TTY.
    output::stdout(&crate::sanitize::for_tty(
        &out,
        std::io::stdout().is_terminal(),
    ))?;
    Ok(exit::SUCCESS)
}
