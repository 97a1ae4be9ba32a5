//! `policy_check`: asks flytod what the agent's `bash` tool would decide
//! for a command line, under the live `[permissions]`, without running it.

use crate::cmd_session::workdir_or_cwd;
use crate::conn::{Ctx, unexpected};
use crate::exit;
use crate::output;
use anyhow::{Context, Result};
use clap::Args;
use flyto_protocol::{PolicyCheckView, Request, Response};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The directory the command would run in [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// Print one JSON object: verdict, rule, reason, command, commands, message, workdir
    #[arg(long)]
    pub json: bool,
    /// The bash command line, after `--` (several words are joined with spaces)
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub fn run(ctx: &Ctx, args: CheckArgs) -> Result<u8> {
    let command = args.command.join(" ");
    if command.trim().is_empty() {
        return Err(exit::usage(
            "policy_check: the command is empty; give it after `--`, e.g. `flytoctl policy_check -- 'rm -rf build'`",
        ));
    }
    let workdir = workdir_or_cwd(args.workdir.as_deref())?;
    let check = match ctx.request(&Request::PolicyCheck { command, workdir })? {
        Response::PolicyVerdict { check } => check,
        other => return Err(unexpected("policy_check", &other)),
    };
    if args.json {
        let json =
            serde_json::to_string_pretty(&check).context("cannot encode the verdict as JSON")?;
        output::stdout(&format!("{json}\n"))?;
    } else {
        output::stdout(&render(&check))?;
    }
    // The verdict is the answer, not a failure: scripts read it.
    Ok(exit::SUCCESS)
}

fn render(check: &PolicyCheckView) -> String {
    let mut out = format!("verdict:  {}\n", check.verdict.as_str());
    out.push_str(&format!(
        "rule:     {}\n",
        check.rule.as_deref().unwrap_or("(none)")
    ));
    if let Some(command) = &check.command {
        out.push_str(&format!("command:  {command}\n"));
    }
    out.push_str(&format!("reason:   {}\n", check.reason));
    out.push_str(&format!("workdir:  {}\n", check.workdir));
    out.push_str("commands:\n");
    if check.commands.is_empty() {
        out.push_str("  (none parsed)\n");
    }
    for c in &check.commands {
        out.push_str(&format!("  {c}\n"));
    }
    if let Some(message) = &check.message {
        out.push_str(&format!("the model would be told:\n  {message}\n"));
    }
    out
}
