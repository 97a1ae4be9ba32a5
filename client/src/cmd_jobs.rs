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
