//! `submit_plan`: send a plan, print its id, or with `--wait` follow it and
//! replay the steps' output and outcome.

use crate::conn::{self, Ctx};
use crate::exit;
use crate::output;
use crate::plan_file::{self, OneStep};
use crate::progress::QuietSink;
use crate::watch;
use anyhow::Result;
use clap::{ArgGroup, Args};
use flyto_protocol::{ClientError, ErrorCode, PlanState, PlanView, Request, Response};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("one_step").args(["run", "prompt"])))]
pub struct SubmitArgs {
    /// Plan file, TOML or JSON (by extension, else by content); `-` or
    /// nothing reads it from stdin
    #[arg(value_name = "FILE", conflicts_with = "one_step")]
    pub file: Option<PathBuf>,

    /// Submit a one-step plan (step `main`) that runs this shell command
    #[arg(long, value_name = "CMD")]
    pub run: Option<String>,

    /// Submit a one-step plan (step `main`) that runs this agent prompt
    #[arg(long, value_name = "TEXT")]
    pub prompt: Option<String>,

    /// Name of the one-step plan
    #[arg(long, requires = "one_step")]
    pub name: Option<String>,

    /// Step timeout: seconds, or a duration like 90s, 5m, 1h30m
    #[arg(long, value_name = "SECS", value_parser = plan_file::parse_timeout, requires = "one_step")]
    pub timeout: Option<u64>,

    /// Working directory of the step [default: the current directory]
    #[arg(long, value_name = "DIR", requires = "one_step")]
    pub workdir: Option<PathBuf>,

    /// How many times the step may be started
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), requires = "one_step")]
    pub max_attempts: Option<u32>,

    /// Named agent session for --prompt [default: a new one]
    #[arg(long, value_name = "NAME", requires = "prompt", conflicts_with = "run")]
    pub session: Option<String>,

    /// A retried submit with the same key returns the first plan's id
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,

    /// Wait for the plan to finish, print the steps' output (stdout and
    /// stderr) and exit with its outcome instead of printing the id
    #[arg(long)]
    pub wait: bool,

    /// Set a variable in every step's environment (repeatable; over the
    /// file's plan-level `env`, under a step's own). PATH, VIRTUAL_ENV,
    /// CONDA_PREFIX and CONDA_DEFAULT_ENV are taken from yours unless set
    #[arg(long = "env", value_name = "KEY=VAL", value_parser = plan_file::parse_env)]
    pub env: Vec<(String, String)>,
}

pub fn run(ctx: &Ctx, args: SubmitArgs) -> Result<u8> {
    let mut plan = if args.run.is_some() || args.prompt.is_some() {
        plan_file::one_step(OneStep {
            run: args.run,
            prompt: args.prompt,
            name: args.name,
            session: args.session,
            timeout_secs: args.timeout,
            workdir: args.workdir,
            max_attempts: args.max_attempts,
        })?
    } else {
        plan_file::load(args.file.as_deref())?
    };
    plan_file::add_env(&mut plan, args.env, |k| std::env::var(k).ok());
    let mut client = ctx.connect()?;
    let req = Request::SubmitPlan {
        plan,
        idempotency_key: args.idempotency_key,
    };
    let answer = conn::call(&mut client, &req).map_err(invalid_plan_is_usage)?;
    let (id, duplicate) = match answer {
        Response::PlanSubmitted { id, duplicate } => (id, duplicate),
        other => return Err(conn::unexpected("submit_plan", &other)),
    };
    if duplicate {
        output::note(&format!(
            "the idempotency key matches plan {id}, submitted earlier; it was not queued again"
        ));
    }
    if !args.wait {
        output::stdout(&format!("{id}\n"))?;
        return Ok(exit::SUCCESS);
    }
    if std::io::stderr().is_terminal() {
        output::note(&format!("submitted {id}; waiting for it to finish"));
    }
    let plan = watch::follow(&ctx.socket, client, &id, &mut QuietSink)?;
    output::stdout(&join_tails(
        plan.steps.iter().map(|s| s.stdout_tail.as_str()),
    ))?;
    output::stderr(&join_tails(
        plan.steps.iter().map(|s| s.stderr_tail.as_str()),
    ))?;
    report_outcome(&plan);
    Ok(exit::plan_outcome(plan.state))
}

/// A plan the daemon finds invalid (a `BadRequest`) is a usage error like
/// one flytoctl finds itself: exit 2, whichever side noticed.
fn invalid_plan_is_usage(err: anyhow::Error) -> anyhow::Error {
    match err.downcast_ref::<ClientError>() {
        Some(ClientError::Remote {
            code: ErrorCode::BadRequest,
            message,
        }) => exit::usage(format!("the plan is not valid: {message}")),
        _ => err,
    }
}

/// The tails as they were, with a newline added only where one step's
/// output would otherwise run into the next one's.
pub fn join_tails<'a>(tails: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for tail in tails.filter(|t| !t.is_empty()) {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(tail);
    }
    out
}

/// Says on stderr why a plan did not succeed.
pub fn report_outcome(plan: &PlanView) {
    if matches!(plan.state, PlanState::Failed | PlanState::Cancelled) {
        let reason = plan
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        output::note(&format!("plan {} {}{reason}", plan.id, plan.state.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_are_replayed_exactly() {
        assert_eq!(join_tails(["hello\n"].into_iter()), "hello\n");
        assert_eq!(join_tails(["a", "", "b\n"].into_iter()), "a\nb\n");
        assert_eq!(join_tails(["no newline"].into_iter()), "no newline");
        assert_eq!(join_tails(std::iter::empty()), "");
    }
}
