//! `plan_status`: a plan's table, its JSON, a step's full log, or a live
//! watch.

use crate::conn::{self, Ctx};
use crate::exit::{self, usage};
use crate::format::now_ms;
use crate::output;
use crate::progress::{BarSink, LineSink};
use crate::render;
use crate::watch;
use anyhow::{Context, Result, anyhow};
use clap::Args;
use flyto_protocol::{Client, PlanView, Request, Response};
use std::io::IsTerminal;

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Plan id, as printed by submit_plan, or its name
    pub id: String,

    /// Print the plan as pretty JSON
    #[arg(long, conflicts_with_all = ["watch", "log"])]
    pub json: bool,

    /// Follow the plan until it finishes (progress bar on a terminal, one
    /// `<step> <state>` line per change otherwise); exits with its outcome
    #[arg(long, conflicts_with = "log")]
    pub watch: bool,

    /// Print the full output log of STEP
    #[arg(long, value_name = "STEP")]
    pub log: Option<String>,
}

pub fn run(ctx: &Ctx, args: StatusArgs) -> Result<u8> {
    let mut client = ctx.connect()?;
    if args.watch {
        return watch_plan(ctx, client, &args.id);
    }
    let plan = fetch(&mut client, &args.id)?;
    if let Some(step) = &args.log {
        print_log(&plan, step)?;
    } else if args.json {
        let json = serde_json::to_string_pretty(&plan).context("cannot encode the plan as JSON")?;
        output::stdout(&format!("{json}\n"))?;
    } else {
        output::stdout(&render::plan_view(&plan, now_ms(), ctx.style))?;
    }
    Ok(exit::SUCCESS)
}

fn fetch(client: &mut Client, id: &str) -> Result<PlanView> {
    match conn::call(client, &Request::PlanStatus { id: id.to_string() })? {
        Response::Plan { plan } => Ok(plan),
        other => Err(conn::unexpected("plan_status", &other)),
    }
}

fn watch_plan(ctx: &Ctx, client: Client, id: &str) -> Result<u8> {
    let plan = if std::io::stdout().is_terminal() {
        let mut bar = BarSink::new(ctx.style);
        let result = watch::follow(&ctx.socket, client, id, &mut bar);
        bar.finish();
        let plan = result?;
        output::stdout(&render::plan_view(&plan, now_ms(), ctx.style))?;
        plan
    } else {
        let plan = watch::follow(&ctx.socket, client, id, &mut LineSink::default())?;
        crate::cmd_submit::report_outcome(&plan);
        plan
    };
    Ok(exit::plan_outcome(plan.state))
}

/// Copies the step's log file (the daemon runs on this machine) to stdout.
fn print_log(plan: &PlanView, step_id: &str) -> Result<()> {
    let Some(step) = plan.steps.iter().find(|s| s.id == step_id) else {
        let ids: Vec<&str> = plan.steps.iter().map(|s| s.id.as_str()).collect();
        return Err(usage(format!(
            "plan {} has no step `{step_id}`; its steps are: {}",
            plan.id,
            ids.join(", ")
        )));
    };
    let Some(path) = &step.log_path else {
        return Err(anyhow!(
            "step `{step_id}` of plan {} has no log (it is {}{})",
            plan.id,
            step.state.as_str(),
            if step.started_ms.is_none() {
                " and has not started"
            } else {
                ""
            }
        ));
    };
    let mut file = std::fs::File::open(path).with_context(|| {
        format!("cannot open the log of step `{step_id}` at {path} (is flytod on another machine, or has the plan expired?)")
    })?;
    let mut out = std::io::stdout().lock();
    std::io::copy(&mut file, &mut out)
        .with_context(|| format!("cannot copy the log {path} to stdout"))?;
    Ok(())
}
