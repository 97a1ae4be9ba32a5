//! `submit_plan`: send a plan, print its id, or with `--wait` follow it and
//! replay the steps' output and outcome.

use crate::conn::{self, Ctx};
use crate::exit;
use crate::format;
use crate::interrupt;
use crate::logfile;
use crate::output;
use crate::plan_file::{self, OneStep};
use crate::progress::QuietSink;
use crate::sanitize::for_tty;
use crate::watch;
use anyhow::Result;
use clap::{ArgGroup, Args};
use flyto_protocol::{ClientError, ErrorCode, PlanState, PlanView, Request, Response, StepView};
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

    /// Step timeout: seconds, or a duration like 90s, 5m, 1h30m [default:
    /// flytod's plans.step_timeout]
    #[arg(long, value_name = "SECS", value_parser = plan_file::parse_timeout, requires = "one_step")]
    pub timeout: Option<u64>,

    /// Working directory of the step [default: the current directory]
    #[arg(long, value_name = "DIR", requires = "one_step")]
    pub workdir: Option<PathBuf>,

    /// How many times the step may be started: it starts again only after
    /// flytod was interrupted (a non-zero exit is final) [default: flytod's
    /// plans.max_attempts]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), requires = "one_step")]
    pub max_attempts: Option<u32>,

    /// Named agent session for --prompt [default: a new one]
    #[arg(long, value_name = "NAME", requires = "prompt", conflicts_with = "run")]
    pub session: Option<String>,

    /// A retried submit with the same key returns the first plan's id
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,

    /// Wait for the plan to finish, print the steps' output (stdout and
    /// stderr; all of it for short steps, else its end and the command that
    /// prints the rest) and exit with its outcome instead of printing the
    /// id. Ctrl-C stops waiting; the plan keeps running
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
        output::note(&format!(
            "submitted {id}; waiting for it to finish (Ctrl-C stops waiting, not the plan)"
        ));
    }
    interrupt::install(ctx.socket.clone(), interrupt::Mode::Plan { id: id.clone() })?;
    let plan = watch::follow(&ctx.socket, client, &id, &mut QuietSink)?;
    let outputs: Vec<StepOutput> = plan
        .steps
        .iter()
        .map(|s| step_output(s, s.log_path.as_deref().and_then(logfile::len)))
        .collect();
    let out = join_tails(outputs.iter().map(|o| o.stdout.as_str()));
    output::stdout(&for_terminal(&out, std::io::stdout().is_terminal()))?;
    let err = join_tails(outputs.iter().map(|o| o.stderr.as_str()));
    output::stderr(&for_terminal(&err, std::io::stderr().is_terminal()))?;
    for (step, o) in plan.steps.iter().zip(&outputs) {
        if let Some(bytes) = o.cut_from {
            let (printed, rest) = if o.log_capped {
                (
                    "more than ",
                    format!("prints its first {}", format::bytes(bytes)),
                )
            } else {
                ("", "prints all of it".to_string())
            };
            output::note(&format!(
                "step `{}` printed {printed}{}; above is only its end: `flytoctl plan_status {} --log {}` {rest}",
                step.id,
                format::bytes(bytes),
                plan.id,
                step.id,
            ));
        }
    }
    report_outcome(&plan);
    Ok(exit::plan_outcome(plan.state))
}

/// The output as a terminal should show it: sanitised, and ended by a
/// newline (an agent step's text has none, and the notes or the shell's
/// prompt would follow on its line). A pipe gets the bytes as they were.
fn for_terminal(text: &str, tty: bool) -> String {
    let mut shown = for_tty(text, tty).into_owned();
    if tty && !shown.is_empty() && !shown.ends_with('\n') {
        shown.push('\n');
    }
    shown
}

/// Whole output up to this size is printed from the log when the tails
/// were cut.
const WHOLE_OUTPUT_MAX: u64 = 1024 * 1024;

/// What `--wait` prints of one step.
#[derive(Debug, Default, PartialEq)]
struct StepOutput {
    stdout: String,
    stderr: String,
    /// Only the tails: the whole output, this many bytes, is in the log.
    cut_from: Option<u64>,
    /// flytod stopped writing the log at plans.log_max_bytes: it holds the
    /// start of the output only, never the whole.
    log_capped: bool,
}

/// The step's whole output when the daemon's tails hold all of it (the log
/// is no longer than they are), or when it went to one stream only and its
/// log is short; otherwise the tails, marked as cut. `log_len` is the size
/// of the step's log file, when it can be read.
fn step_output(step: &StepView, log_len: Option<u64>) -> StepOutput {
    let tails = StepOutput {
        stdout: step.stdout_tail.clone(),
        stderr: step.stderr_tail.clone(),
        cut_from: None,
        log_capped: false,
    };
    let Some((path, len)) = step.log_path.as_deref().zip(log_len) else {
        return tails;
    };
    // flytod says so in the step's error when it capped the log.
    let log_capped = step
        .error
        .as_deref()
        .is_some_and(|e| e.contains("output log truncated"));
    if !log_capped && len <= (step.stdout_tail.len() + step.stderr_tail.len()) as u64 {
        return tails;
    }
    // The log interleaves both streams, so it can stand in for one only.
    let one_stream = step.stdout_tail.is_empty() || step.stderr_tail.is_empty();
    if one_stream
        && !log_capped
        && len <= WHOLE_OUTPUT_MAX
        && let Some(whole) = logfile::read(path, WHOLE_OUTPUT_MAX)
    {
        return if step.stdout_tail.is_empty() {
            StepOutput {
                stderr: whole,
                ..StepOutput::default()
            }
        } else {
            StepOutput {
                stdout: whole,
                ..StepOutput::default()
            }
        };
    }
    StepOutput {
        cut_from: Some(len),
        log_capped,
        ..tails
    }
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
    fn a_terminal_gets_whole_lines_and_a_pipe_the_bytes() {
        assert_eq!(
            for_terminal("the agent's answer", true),
            "the agent's answer\n"
        );
        assert_eq!(for_terminal("done\n", true), "done\n");
        assert_eq!(for_terminal("", true), "");
        assert_eq!(
            for_terminal("the agent's answer", false),
            "the agent's answer"
        );
    }

    #[test]
    fn tails_are_replayed_exactly() {
        assert_eq!(join_tails(["hello\n"].into_iter()), "hello\n");
        assert_eq!(join_tails(["a", "", "b\n"].into_iter()), "a\nb\n");
        assert_eq!(join_tails(["no newline"].into_iter()), "no newline");
        assert_eq!(join_tails(std::iter::empty()), "");
    }

    fn step(out: &str, err: &str, log: Option<&str>) -> StepView {
        StepView {
            id: "main".into(),
            kind: "run".into(),
            text: String::new(),
            deps: vec![],
            state: flyto_protocol::StepState::Succeeded,
            attempts: 1,
            max_attempts: 1,
            started_ms: None,
            finished_ms: None,
            exit_code: Some(0),
            error: None,
            stdout_tail: out.into(),
            stderr_tail: err.into(),
            log_path: log.map(Into::into),
        }
    }

    #[test]
    fn short_steps_print_their_whole_output() {
        // The tails are all of it.
        let s = step("hi\n", "oops\n", Some("/nonexistent"));
        let o = step_output(&s, Some(8));
        assert_eq!(
            (o.stdout.as_str(), o.stderr.as_str(), o.cut_from),
            ("hi\n", "oops\n", None)
        );
        // No readable log: the tails, unmarked (nothing says they were cut).
        assert_eq!(step_output(&s, None).cut_from, None);

        // Cut tails of one stream come whole from the log.
        let dir = std::env::temp_dir().join(format!("flytoctl-submit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("main.log");
        let whole: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, &whole).unwrap();
        let path = path.to_str().unwrap();
        let s = step(&whole[whole.len() - 100..], "", Some(path));
        let o = step_output(&s, Some(whole.len() as u64));
        assert_eq!(o.stdout, whole);
        assert_eq!(o.cut_from, None);

        // Both streams cut: the tails, and a note with the size.
        let s = step(&whole[whole.len() - 100..], "e\n", Some(path));
        let o = step_output(&s, Some(whole.len() as u64));
        assert_eq!(o.stdout, &whole[whole.len() - 100..]);
        assert_eq!(o.cut_from, Some(whole.len() as u64));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
