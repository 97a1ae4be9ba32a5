//! `job_*`: time-driven plans. `job_next` shows when a schedule would
//! fire, creating nothing.

use crate::conn::{Ctx, unexpected};
use crate::exit;
use crate::output;
use crate::sanitize::for_tty;
use anyhow::Result;
use clap::Args;
use flyto_protocol::{Request, Response};
use std::io::IsTerminal;

#[derive(Debug, Args)]
#[command(after_help = "\
Schedules:
  0 8 * * MON-FRI     cron: minute hour day-of-month month day-of-week (names, lists, ranges, */steps)
  @daily, @hourly     nicknames (@yearly @annually @monthly @weekly @daily @midnight @hourly)
  every 15m           whole periods after the Unix epoch (every 15m fires at :00, :15, :30, :45 UTC)
  at 2026-12-24 08:00 once, at a local time of the zone (or an RFC 3339 instant)

Semantics:
  Day-of-month and day-of-week are ORed when both are restricted (as vixie cron).
  A fixed-time job whose local time does not exist on a spring-forward day fires at
  the first instant after the gap, once. In the repeated hour of a fall-back day a
  fixed-time job fires once (in the first pass), an interval job in both passes.
  Expressions whose meaning differs between cron implementations (a list of times in a
  DST gap, a */N day-of-month with a restricted day-of-week) are accepted with a
  warning showing the next fires; one that can never fire is an error.")]
pub struct NextArgs {
    /// The schedule (quote it, or pass its words as separate arguments)
    #[arg(required = true, num_args = 1.., value_name = "EXPR")]
    pub expr: Vec<String>,
    /// IANA time zone [default: the machine's]
    #[arg(long)]
    pub tz: Option<String>,
    /// Start after this RFC 3339 instant (exclusive) [default: now]
    #[arg(long, value_name = "INSTANT")]
    pub after: Option<String>,
    /// How many fires to show
    #[arg(long, default_value_t = 5)]
    pub count: u32,
    /// Print a JSON array of the instants
    #[arg(long)]
    pub json: bool,
}

pub fn next(ctx: &Ctx, args: NextArgs) -> Result<u8> {
    let req = Request::JobNext {
        expr: args.expr.join(" "),
        tz: args.tz,
        after: args.after,
        count: args.count,
    };
    match ctx.request(&req)? {
        Response::JobNext {
            instants, warnings, ..
        } => {
            for w in &warnings {
                eprintln!("flytoctl: warning: {w}");
            }
            let text = if args.json {
                format!("{}\n", serde_json::to_string(&instants)?)
            } else {
                instants.iter().map(|i| format!("{i}\n")).collect()
            };
            output::stdout(&for_tty(&text, std::io::stdout().is_terminal()))?;
            Ok(exit::SUCCESS)
        }
        other => Err(unexpected("job_next", &other)),
    }
}

#[derive(Debug, Args)]
pub struct JobArgs {
    /// When it fires (see `flytoctl job_next --help`)
    #[arg(long, value_name = "EXPR")]
    pub schedule: Option<String>,
    /// IANA time zone [default: the machine's]
    #[arg(long)]
    pub tz: Option<String>,
    /// What the agent does at each run (one agent step)
    #[arg(long, conflicts_with = "plan")]
    pub prompt: Option<String>,
    /// A whole plan file (TOML or JSON) to submit at each run
    #[arg(long, value_name = "FILE")]
    pub plan: Option<std::path::PathBuf>,
    /// isolated: a new session per run; persistent: one session across runs
    #[arg(long)]
    pub mode: Option<String>,
    #[arg(long)]
    pub name: Option<String>,
    /// Where a prompt job's agent works [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<std::path::PathBuf>,
    /// A run's time limit (90, 5m, 1h)
    #[arg(long, value_name = "D")]
    pub timeout: Option<String>,
    /// Stop the job at this time (RFC 3339, or a local date and time)
    #[arg(long, value_name = "AT")]
    pub expires: Option<String>,
    /// Where to send each run's result: a channel binding, BINDING or
    /// BINDING:CHAT (e.g. telegram:123456)
    #[arg(long, value_name = "BINDING[:CHAT]")]
    pub notify: Option<String>,
    /// Disable the job after this many failed runs in a row [default: 5]
    #[arg(long, value_name = "N")]
    pub max_failures: Option<u32>,
    /// A fixed per-job delay of at most this long: seconds, or a duration
    /// like 90s, 5m
    #[arg(long, value_name = "SECS", value_parser = crate::plan_file::parse_secs)]
    pub jitter: Option<u64>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The job's id (j3) or name
    pub id: String,
    #[command(flatten)]
    pub job: JobArgs,
}

#[derive(Debug, Args)]
pub struct IdArgs {
    /// The job's id (j3) or name
    pub id: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long)]
    pub json: bool,
}

fn spec(args: &JobArgs, creating: bool) -> Result<flyto_protocol::JobSpec> {
    let plan = args
        .plan
        .as_deref()
        .map(|p| crate::plan_file::load(Some(p)))
        .transpose()?;
    let workdir = match (&args.workdir, creating && plan.is_none()) {
        (Some(d), _) => Some(crate::cmd_session::workdir_or_cwd(Some(d))?),
        (None, true) => Some(crate::cmd_session::workdir_or_cwd(None)?),
        (None, false) => None,
    };
    let timeout_secs = args
        .timeout
        .as_deref()
        .map(crate::plan_file::parse_timeout)
        .transpose()
        .map_err(|e| crate::exit::usage(format!("--timeout: {e}")))?;
    Ok(flyto_protocol::JobSpec {
        schedule: args.schedule.clone(),
        tz: args.tz.clone(),
        prompt: args.prompt.clone(),
        plan,
        mode: args.mode.clone(),
        name: args.name.clone(),
        workdir,
        timeout_secs,
        expires: args.expires.clone(),
        notify: args.notify.clone(),
        max_consecutive_failures: args.max_failures,
        jitter_secs: args.jitter,
    })
}

fn print(text: &str) -> Result<()> {
    output::stdout(&for_tty(text, std::io::stdout().is_terminal()))
}

fn job_text(j: &flyto_protocol::JobView) -> String {
    let next = match (&j.next_fire, &j.next_fire_utc) {
        (Some(local), Some(utc)) => format!("{local} ({utc})"),
        _ => "-".into(),
    };
    format!(
        "{} {}{} [{}]\n  schedule: {} ({}), mode {}\n  next fire: {next}\n  last: {}; failures in a row: {} of {}\n  runs: {}\n",
        j.id,
        j.state,
        j.name
            .as_ref()
            .map_or_else(String::new, |n| format!(" `{n}`")),
        j.workdir.as_deref().unwrap_or("-"),
        j.schedule,
        j.tz,
        j.mode,
        j.last_outcome.as_deref().unwrap_or("-"),
        j.consecutive_failures,
        j.max_consecutive_failures,
        j.what,
    )
}

fn answer_job(resp: Response, op: &str, json: bool, verb: &str) -> Result<u8> {
    match resp {
        Response::Job { job, warnings } => {
            for w in &warnings {
                eprintln!("flytoctl: warning: {w}");
            }
            if json {
                print(&format!("{}\n", serde_json::to_string_pretty(&job)?))?;
            } else {
                print(&format!("{verb} {}\n{}", job.id, job_text(&job)))?;
            }
            Ok(exit::SUCCESS)
        }
        other => Err(unexpected(op, &other)),
    }
}

pub fn create(ctx: &Ctx, args: JobArgs) -> Result<u8> {
    let spec = spec(&args, true)?;
    answer_job(
        ctx.request(&Request::JobCreate { spec })?,
        "job_create",
        args.json,
        "created",
    )
}

pub fn update(ctx: &Ctx, args: UpdateArgs) -> Result<u8> {
    let spec = spec(&args.job, false)?;
    answer_job(
        ctx.request(&Request::JobUpdate { id: args.id, spec })?,
        "job_update",
        args.job.json,
        "updated",
    )
}

pub fn pause(ctx: &Ctx, args: IdArgs) -> Result<u8> {
    answer_job(
        ctx.request(&Request::JobPause { id: args.id })?,
        "job_pause",
        args.json,
        "paused",
    )
}

pub fn resume(ctx: &Ctx, args: IdArgs) -> Result<u8> {
    answer_job(
        ctx.request(&Request::JobResume { id: args.id })?,
        "job_resume",
        args.json,
        "resumed",
    )
}

pub fn delete(ctx: &Ctx, args: IdArgs) -> Result<u8> {
    answer_job(
        ctx.request(&Request::JobDelete { id: args.id })?,
        "job_delete",
        args.json,
        "deleted",
    )
}

pub fn run(ctx: &Ctx, args: IdArgs) -> Result<u8> {
    match ctx.request(&Request::JobRun { id: args.id })? {
        Response::JobRan { id, plan } => {
            if args.json {
                print(&format!(
                    "{}\n",
                    serde_json::json!({"job": id, "plan": plan})
                ))?;
            } else {
                print(&format!("{id}: submitted {plan} (a manual run)\n"))?;
            }
            Ok(exit::SUCCESS)
        }
        other => Err(unexpected("job_run", &other)),
    }
}

pub fn list(ctx: &Ctx, args: ListArgs) -> Result<u8> {
    match ctx.request(&Request::JobList {})? {
        Response::Jobs { jobs, tzdb } => {
            if args.json {
                print(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(&serde_json::json!({"jobs": jobs, "tzdb": tzdb}))?
                ))?;
            } else if jobs.is_empty() {
                print(&format!(
                    "no jobs (tz database {tzdb}); `flytoctl job_create --help` says how to make one\n"
                ))?;
            } else {
                let text: String = jobs.iter().map(job_text).collect();
                print(&format!("{text}(tz database {tzdb})\n"))?;
            }
            Ok(exit::SUCCESS)
        }
        other => Err(unexpected("job_list", &other)),
    }
}

pub fn show(ctx: &Ctx, args: IdArgs) -> Result<u8> {
    match ctx.request(&Request::JobShow { id: args.id })? {
        Response::JobHistory { job, fires } => {
            if args.json {
                print(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(&serde_json::json!({"job": job, "fires": fires}))?
                ))?;
                return Ok(exit::SUCCESS);
            }
            let mut text = job_text(&job);
            if fires.is_empty() {
                text.push_str("  no fires yet\n");
            }
            for f in &fires {
                text.push_str(&format!(
                    "  {}{} {}{}{}\n",
                    f.instant,
                    if f.manual { " (manual)" } else { "" },
                    f.outcome,
                    f.plan_state
                        .as_ref()
                        .map_or_else(String::new, |s| format!(", {s}")),
                    f.duration_ms.map_or_else(String::new, |d| format!(
                        " in {}",
                        crate::format::duration(d)
                    )),
                ));
            }
            print(&text)?;
            Ok(exit::SUCCESS)
        }
        other => Err(unexpected("job_show", &other)),
    }
}
