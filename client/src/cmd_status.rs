//! `plan_status`: a plan's table, its JSON, a step's full log, or a live
//! watch.

use crate::conn::{self, Ctx};
use crate::exit::{self, usage};
use crate::format::now_ms;
use crate::interrupt;
use crate::logfile;
use crate::output;
use crate::progress::{BarSink, LineSink};
use crate::render;
use crate::watch;
use anyhow::{Context, Result, anyhow};
use clap::Args;
use flyto_protocol::{Client, PlanView, Request, Response, StepState, StepView};
use std::io::IsTerminal;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Plan id, as printed by submit_plan, or its name
    pub id: String,

    /// Print the plan as pretty JSON
    #[arg(long, conflicts_with_all = ["watch", "log"])]
    pub json: bool,

    /// Follow the plan until it finishes (progress bar on a terminal, one
    /// `<step> <state>` line per change otherwise); exits with its outcome.
    /// Ctrl-C stops following; the plan keeps running
    #[arg(long, conflicts_with = "log")]
    pub watch: bool,

    /// Print the full output log of STEP (stdout and stderr as they came;
    /// read from flytod's state directory, so on the same machine only)
    #[arg(long, value_name = "STEP")]
    pub log: Option<String>,

    /// With --log: keep printing the log as it grows until the step ends
    /// (waits for a pending step to start); exits 0 when it succeeded, 1
    /// when it failed or was skipped, 5 when it was cancelled
    #[arg(long, requires = "log")]
    pub follow: bool,
}

pub fn run(ctx: &Ctx, args: StatusArgs) -> Result<u8> {
    let mut client = ctx.connect()?;
    if args.watch {
        return watch_plan(ctx, client, &args.id);
    }
    let plan = fetch(&mut client, &args.id)?;
    if let Some(step) = &args.log {
        if args.follow {
            return follow_log(ctx, client, plan, step);
        }
        print_log(&plan, step, ctx.style.is_tty())?;
    } else if args.json {
        let json = serde_json::to_string_pretty(&plan).context("cannot encode the plan as JSON")?;
        output::stdout(&format!("{json}\n"))?;
    } else {
        let live = live_output(&plan);
        output::stdout(&render::plan_view(&plan, now_ms(), ctx.style, &live))?;
    }
    Ok(exit::SUCCESS)
}

/// The end of each running step's log.
fn live_output(plan: &PlanView) -> render::Live {
    plan.steps
        .iter()
        .filter(|s| s.state == StepState::Running)
        .filter_map(|s| Some((s.id.clone(), logfile::tail(s.log_path.as_deref()?)?)))
        .collect()
}

fn fetch(client: &mut Client, id: &str) -> Result<PlanView> {
    match conn::call(client, &Request::PlanStatus { id: id.to_string() })? {
        Response::Plan { plan } => Ok(plan),
        other => Err(conn::unexpected("plan_status", &other)),
    }
}

fn watch_plan(ctx: &Ctx, client: Client, id: &str) -> Result<u8> {
    interrupt::install(ctx.socket.clone(), interrupt::Mode::Plan { id: id.into() })?;
    let plan = if std::io::stdout().is_terminal() {
        let mut bar = BarSink::new(ctx.style);
        let result = watch::follow(&ctx.socket, client, id, &mut bar);
        bar.finish();
        let plan = result?;
        output::stdout(&render::plan_view(
            &plan,
            now_ms(),
            ctx.style,
            &render::Live::new(),
        ))?;
        plan
    } else {
        let plan = watch::follow(&ctx.socket, client, id, &mut LineSink::default())?;
        crate::cmd_submit::report_outcome(&plan);
        plan
    };
    Ok(exit::plan_outcome(plan.state))
}

fn find_step<'a>(plan: &'a PlanView, step_id: &str) -> Result<&'a StepView> {
    plan.steps.iter().find(|s| s.id == step_id).ok_or_else(|| {
        let ids: Vec<&str> = plan.steps.iter().map(|s| s.id.as_str()).collect();
        usage(format!(
            "plan {} has no step `{step_id}`; its steps are: {}",
            plan.id,
            ids.join(", ")
        ))
    })
}

/// Copies the step's log file (the daemon runs on this machine) to stdout.
fn print_log(plan: &PlanView, step_id: &str, tty: bool) -> Result<()> {
    let step = find_step(plan, step_id)?;
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
    let mut file = logfile::open(path, &format!("step `{step_id}`"))?;
    logfile::Copier::new(tty).copy_new(&mut file, Path::new(path))?;
    Ok(())
}

/// How often a followed log is checked for more output: what `tail -f`
/// users expect to feel live, at next to no cost.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// `--log STEP --follow`: the log so far, then what is appended, until the
/// step is terminal. A watch of the plan on its own thread says when the
/// step starts (its log appears) and when it ends.
fn follow_log(ctx: &Ctx, client: Client, plan: PlanView, step_id: &str) -> Result<u8> {
    let mut step = find_step(&plan, step_id)?.clone();
    interrupt::install(
        ctx.socket.clone(),
        interrupt::Mode::Plan {
            id: plan.id.clone(),
        },
    )?;
    let (tx, rx) = mpsc::channel();
    let socket = ctx.socket.clone();
    let id = plan.id.clone();
    std::thread::Builder::new()
        .name("watch".into())
        .spawn(move || {
            let mut sink = ChannelSink(tx.clone());
            if let Err(e) = watch::follow(&socket, client, &id, &mut sink) {
                let _ = tx.send(Err(e));
            }
        })
        .context("cannot start the plan watch")?;
    let mut copier = logfile::Copier::new(ctx.style.is_tty());
    let mut file: Option<(std::fs::File, String)> = None;
    loop {
        if file.is_none()
            && let Some(path) = &step.log_path
            && let Ok(f) = std::fs::File::open(path)
        {
            file = Some((f, path.clone()));
        }
        if let Some((f, path)) = file.as_mut() {
            copier.copy_new(f, Path::new(path.as_str()))?;
        }
        if step.state.is_terminal() {
            if file.is_none() {
                // Ended without output to show (skipped, cancelled before it
                // started): say why there is nothing.
                print_log(&plan, step_id, ctx.style.is_tty())?;
            }
            return Ok(step_outcome(step.state));
        }
        match rx.recv_timeout(FOLLOW_POLL) {
            Ok(update) => {
                let plan = update?;
                step = find_step(&plan, step_id)?.clone();
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(anyhow!("lost the watch of plan {}", plan.id));
            }
        }
    }
}

/// Exit code of a followed step, as `--watch` maps a plan's outcome.
fn step_outcome(state: StepState) -> u8 {
    match state {
        StepState::Succeeded => exit::SUCCESS,
        StepState::Cancelled => exit::PLAN_CANCELLED,
        StepState::Failed | StepState::Skipped => exit::PLAN_FAILED,
        StepState::Pending | StepState::Running => exit::SUCCESS,
    }
}

/// Plan views from the watch thread.
struct ChannelSink(mpsc::Sender<Result<PlanView>>);

impl watch::WatchSink for ChannelSink {
    fn update(&mut self, plan: &PlanView) -> Result<()> {
        // The follower gone means the command is ending; stop watching.
        self.0
            .send(Ok(plan.clone()))
            .map_err(|_| anyhow!("the log follower stopped"))
    }
}
