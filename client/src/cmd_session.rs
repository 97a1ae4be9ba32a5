//! Agent sessions: `session_new`, `session_send`, `session_attach`,
//! `session_cancel`, `session_list`, `session_history`, `session_delete`,
//! `session_approve`, and the context commands `session_reset`,
//! `session_model`, `session_compact`. Streaming a run is shared with
//! `chat` and `session_compact`.
//!
//! Approvals: a `bash` command hitting an `ask` rule waits for a person.
//! When stdin and stderr are terminals (or with `--prompt-approvals`, for
//! scripts that answer on a pipe), `chat`, `session_send` and
//! `session_attach` tell flytod they can answer, and show a y/N prompt when
//! a request comes; the answer goes back with `session_approve`.
//!
//! Commands take a session id (`s3`) or the name of an existing session.

use crate::conn::{Ctx, unexpected};
use crate::context_render;
use crate::exit::{self, usage};
use crate::format::now_ms;
use crate::interrupt::{self, CtrlC};
use crate::output;
use crate::session_render::{self, Chunk, HistoryMode, Mode, Outcome, RunView, Window};
use crate::style::{Style, Tone, term_width};
use anyhow::{Context, Result, anyhow};
use clap::Args;
use flyto_protocol::{
    Client, ClientError, ErrorCode, Event, MessageView, Request, Response, SessionEvent,
    SessionView,
};
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct NewArgs {
    /// Name of the session (`chat --name` and plan steps find it by name)
    #[arg(long)]
    pub name: Option<String>,

    /// Directory the session's tools work in [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,

    /// Model profile, or a role such as `main` or `fast` [default: the role `main`]
    #[arg(long, value_name = "PROFILE")]
    pub model: Option<String>,

    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// How a new session's commands are confined.
#[derive(Debug, Args, Clone, Default)]
pub struct SandboxArgs {
    /// Sandbox of the session's commands: workspace-write (write only in the
    /// workdir and TMPDIR), read-only, or off [default: `[sandbox] profile`]
    #[arg(long, value_name = "PROFILE", value_parser = ["workspace-write", "read-only", "off"])]
    pub sandbox: Option<String>,

    /// Deny the session's commands TCP connect and bind [default: `[sandbox] network`]
    #[arg(long)]
    pub no_network: bool,
}

/// How a streamed run is shown.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Show the model's reasoning (dimmed, on stderr) [default: only when
    /// stderr is a terminal]
    #[arg(long)]
    pub reasoning: bool,

    /// Print a tokens and cost line after each run [default: only when stderr
    /// is a terminal]
    #[arg(long)]
    pub usage: bool,

    /// Answer approval requests of `ask` rules with a y/N prompt read from
    /// stdin even when stdin is not a terminal [default: only when stdin and
    /// stderr are terminals]
    #[arg(long)]
    pub prompt_approvals: bool,
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// Session id (or the name of an existing session)
    pub id: String,

    /// The message; `-` reads it from stdin
    pub text: String,

    #[command(flatten)]
    pub show: ShowArgs,
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Session id (or the name of an existing session)
    pub id: String,

    /// How many recent messages the snapshot shows
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub recent: u32,

    #[command(flatten)]
    pub show: ShowArgs,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print the sessions as pretty JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Session id (or the name of an existing session)
    pub id: String,

    /// Print the session and every message as pretty JSON
    #[arg(long, conflicts_with = "reasoning")]
    pub json: bool,

    /// Show the model's thinking blocks [default: only when stdout is a
    /// terminal]
    #[arg(long)]
    pub reasoning: bool,
}

#[derive(Debug, Args)]
pub struct ResetArgs {
    /// Session id (or the name of an existing session)
    pub id: String,

    #[command(flatten)]
    pub how: ResetHow,
}

/// Exactly one of `--soft` and `--hard`.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct ResetHow {
    /// The model's window starts at the last user message
    #[arg(long)]
    pub soft: bool,

    /// The model's window starts empty
    #[arg(long)]
    pub hard: bool,
}

#[derive(Debug, Args)]
pub struct ModelArgs {
    /// Session id (or the name of an existing session)
    pub id: String,

    /// Model profile, or a role such as `main` or `fast`
    pub model: String,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// Session id (or the name of an existing session)
    pub id: String,

    /// The approval's number, from the `approval needed` line
    pub approval: u64,

    #[command(flatten)]
    pub answer: ApproveAnswer,
}

/// Exactly one of `--allow` and `--deny`.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct ApproveAnswer {
    /// Let the command run
    #[arg(long)]
    pub allow: bool,

    /// Refuse it (the model is told)
    #[arg(long)]
    pub deny: bool,
}

#[derive(Debug, Args)]
pub struct CompactArgs {
    /// Session id (or the name of an existing session)
    pub id: String,

    #[command(flatten)]
    pub show: ShowArgs,
}

pub fn new(ctx: &Ctx, args: NewArgs) -> Result<u8> {
    let session = create(
        ctx,
        args.name,
        args.workdir.as_deref(),
        args.model,
        &args.sandbox,
    )?;
    output::stdout(&format!("{}\n", session.id))?;
    Ok(exit::SUCCESS)
}

/// Creates a session working in `workdir` (default: the current directory).
pub fn create(
    ctx: &Ctx,
    name: Option<String>,
    workdir: Option<&Path>,
    model: Option<String>,
    sandbox: &SandboxArgs,
) -> Result<SessionView> {
    let req = Request::SessionNew {
        name,
        workdir: Some(workdir_or_cwd(workdir)?),
        model,
        sandbox: sandbox.sandbox.clone(),
        network: sandbox.no_network.then_some(false),
    };
    match ctx.request(&req)? {
        Response::Session { session } => Ok(session),
        other => Err(unexpected("session_new", &other)),
    }
}

/// `dir` made absolute, or the current directory.
pub fn workdir_or_cwd(dir: Option<&Path>) -> Result<String> {
    let path = match dir {
        Some(dir) => {
            if !dir.is_dir() {
                return Err(usage(format!(
                    "--workdir {} is not a directory",
                    dir.display()
                )));
            }
            std::path::absolute(dir)
                .with_context(|| format!("cannot resolve the path {}", dir.display()))?
        }
        None => std::env::current_dir().context("cannot determine the current directory")?,
    };
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| usage(format!("the path {} is not valid UTF-8", path.display())))
}

/// True for what the daemon hands out as ids: `s` and digits.
pub fn looks_like_id(s: &str) -> bool {
    s.strip_prefix('s')
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// The id of session `id_or_name`: an id as is, else the most recently
/// updated session with that name.
pub fn resolve(ctx: &Ctx, id_or_name: &str) -> Result<String> {
    if looks_like_id(id_or_name) {
        return Ok(id_or_name.to_string());
    }
    match find_named(ctx, id_or_name)? {
        Some(session) => Ok(session.id),
        None => Err(ClientError::Remote {
            code: ErrorCode::NotFound,
            message: format!(
                "no session {id_or_name}: give an id like s3 or the name of an existing session (`flytoctl session_list` shows them)"
            ),
        }
        .into()),
    }
}

/// The most recently updated session named `name`.
pub fn find_named(ctx: &Ctx, name: &str) -> Result<Option<SessionView>> {
    Ok(list_sessions(ctx)?
        .into_iter()
        .filter(|s| s.name.as_deref() == Some(name))
        .max_by_key(|s| s.updated_ms))
}

fn list_sessions(ctx: &Ctx) -> Result<Vec<SessionView>> {
    match ctx.request(&Request::SessionList {})? {
        Response::Sessions { sessions } => Ok(sessions),
        other => Err(unexpected("session_list", &other)),
    }
}

/// The run display for the current terminal and flags.
pub fn run_mode(show: &ShowArgs, runs: bool) -> Mode {
    let err_tty = std::io::stderr().is_terminal();
    Mode {
        err: Style::detect_stderr(),
        out_tty: std::io::stdout().is_terminal(),
        reasoning: show.reasoning || err_tty,
        usage: show.usage || err_tty,
        runs,
        width: term_width(),
        approve: show.prompt_approvals || (std::io::stdin().is_terminal() && err_tty),
    }
}

/// The message of `session_send`: the argument, or stdin for `-`.
pub fn message_text(arg: &str) -> Result<String> {
    if arg != "-" {
        return clean_message(arg.to_string());
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("cannot read the message from stdin")?;
    clean_message(text)
}

/// Without trailing line ends; empty is a usage error.
pub fn clean_message(text: String) -> Result<String> {
    let trimmed = text.trim_end_matches(['\n', '\r']);
    if trimmed.trim().is_empty() {
        return Err(usage("the message is empty"));
    }
    Ok(trimmed.to_string())
}

pub fn send_cmd(ctx: &Ctx, args: SendArgs) -> Result<u8> {
    let text = message_text(&args.text)?;
    let id = resolve(ctx, &args.id)?;
    let ctrlc = interrupt::install(
        ctx.socket.clone(),
        interrupt::Mode::Idle { interactive: false },
    )?;
    let mut view = RunView::new(run_mode(&args.show, false));
    let outcome = send(ctx, &id, text, &mut view, &ctrlc)?;
    Ok(run_code(outcome, view.last_stop()))
}

/// Exit code of a run of `session_send` or `session_compact`. A run that
/// ended with `Done` still failed when a guard stopped it (max_iterations,
/// budget, repeat, stall) or when compaction failed or the breaker is open:
/// a script must not take that for an answer.
pub fn run_code(outcome: Outcome, stop: Option<&str>) -> u8 {
    match (outcome, stop) {
        (
            Outcome::Done,
            Some(
                "compact_failed" | "breaker_open" | "max_iterations" | "budget" | "repeat_guard"
                | "stalled",
            ),
        ) => exit::RUN_FAILED,
        (Outcome::Done, _) => exit::SUCCESS,
        (Outcome::Cancelled, _) => exit::RUN_CANCELLED,
        (Outcome::Failed, _) => exit::RUN_FAILED,
        (Outcome::Interrupted, _) => exit::UNAVAILABLE,
    }
}

/// Sends `text` to session `id` and shows the run until it ends; Ctrl-C
/// meanwhile cancels it. Leaves `ctrlc` in the run mode.
pub fn send(
    ctx: &Ctx,
    id: &str,
    text: String,
    view: &mut RunView,
    ctrlc: &CtrlC,
) -> Result<Outcome> {
    let mut client = ctx.connect()?;
    ctrlc.set(interrupt::Mode::Run {
        id: id.to_string(),
        cancel_sent: false,
    });
    client.send(&Request::SessionSend {
        id: id.to_string(),
        text,
        can_approve: view.approves(),
    })?;
    follow_run(ctx, &mut client, "session_send", id, view)
}

/// Prompts for an approval request when this client answers them.
fn on_event(ctx: &Ctx, id: &str, event: &SessionEvent, view: &RunView) {
    if let SessionEvent::ApprovalRequested { approval, .. } = event
        && view.approves()
    {
        answer_approval(ctx, id, *approval);
    }
}

/// `allow it? [y/N]` on stderr, the answer from stdin (end of input is a
/// no), sent with `session_approve`. Another client may have answered first.
fn answer_approval(ctx: &Ctx, id: &str, approval: u64) {
    // Ctrl-C at the prompt denies (see `interrupt::Mode::Approval`).
    let ctrlc = interrupt::installed();
    let before = ctrlc.as_ref().map(|c| {
        c.replace(interrupt::Mode::Approval {
            id: id.to_string(),
            approval,
        })
    });
    let _ = output::stderr("allow it? [y/N] ");
    let mut line = String::new();
    let allow = match std::io::stdin().read_line(&mut line) {
        Ok(_) => matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes"),
        Err(_) => false,
    };
    if let (Some(c), Some(before)) = (&ctrlc, before) {
        c.set(before);
    }
    if line.is_empty() {
        let _ = output::stderr("\n");
    }
    let req = Request::SessionApprove {
        id: id.to_string(),
        approval,
        allow,
    };
    if let Err(e) = ctx.request(&req) {
        output::note(&exit::message(&e));
    }
}

/// Reads one run's events until `End`; `op` names the request in errors.
fn follow_run(
    ctx: &Ctx,
    client: &mut Client,
    op: &str,
    id: &str,
    view: &mut RunView,
) -> Result<Outcome> {
    let mut outcome = None;
    loop {
        let resp = match client.recv() {
            Ok(resp) => resp,
            Err(e) => {
                write(view.finish())?;
                if let Some(outcome) = outcome {
                    return Ok(outcome);
                }
                return Err(anyhow::Error::new(e).context(format!(
                    "lost the connection to flytod during the run; `flytoctl session_attach {id}` shows how it goes on"
                )));
            }
        };
        match resp {
            Response::Event {
                event: Event::Session { session, event },
                ..
            } => {
                view.set_session(&session);
                let (chunks, end) = view.event(&event);
                write(chunks)?;
                on_event(ctx, id, &event, view);
                outcome = end.or(outcome);
            }
            Response::End {} => {
                write(view.finish())?;
                return outcome.ok_or_else(|| {
                    anyhow!(
                        "flytod ended the stream of {id}'s run without saying how the run ended"
                    )
                });
            }
            Response::Error { code, message } => {
                write(view.finish())?;
                return Err(ClientError::Remote { code, message }.into());
            }
            other => return Err(unexpected(op, &other)),
        }
    }
}

/// Writes run output: stdout failures end the command, stderr ones don't.
pub fn write(chunks: Vec<Chunk>) -> Result<()> {
    for chunk in chunks {
        match chunk {
            Chunk::Out(text) => output::stdout(&text)?,
            Chunk::Err(text) => {
                let _ = output::stderr(&text);
            }
        }
    }
    Ok(())
}

pub fn attach(ctx: &Ctx, args: AttachArgs) -> Result<u8> {
    let id = resolve(ctx, &args.id)?;
    interrupt::install(ctx.socket.clone(), interrupt::Mode::Attach)?;
    let mut client = ctx.connect()?;
    let mut view = RunView::new(run_mode(&args.show, true));
    client.send(&Request::SessionAttach {
        id: id.clone(),
        recent: Some(args.recent),
        can_approve: view.approves(),
    })?;
    let (session, messages, summary) = match client.recv()? {
        Response::History {
            session,
            messages,
            summary,
            ..
        } => (session, messages, summary),
        Response::Error { code, message } => {
            return Err(ClientError::Remote { code, message }.into());
        }
        other => return Err(unexpected("session_attach", &other)),
    };
    output::stdout(&snapshot(
        &session,
        &messages,
        summary.as_deref(),
        history_mode(args.show.reasoning),
    ))?;
    let err = Style::detect_stderr();
    if session.status == "running" || session.status == "cancelling" {
        let _ = output::stderr(&format!(
            "{}\n",
            err.paint(
                "a run is in progress (its reply so far is not shown); following it",
                Tone::Dim
            )
        ));
    } else if std::io::stderr().is_terminal() {
        let _ = output::stderr(&format!(
            "{}\n",
            err.paint(&format!("following {id}; Ctrl-C stops"), Tone::Dim)
        ));
    }
    loop {
        match client.recv() {
            Ok(Response::Event {
                event: Event::Session { session, event },
                ..
            }) => {
                view.set_session(&session);
                write(view.event(&event).0)?;
                on_event(ctx, &id, &event, &view);
            }
            Ok(Response::End {}) => {
                write(view.finish())?;
                return Ok(exit::SUCCESS);
            }
            Ok(Response::Error { code, message }) => {
                write(view.finish())?;
                return Err(ClientError::Remote { code, message }.into());
            }
            Ok(other) => return Err(unexpected("session_attach", &other)),
            Err(e) => {
                write(view.finish())?;
                return Err(anyhow::Error::new(e).context(format!("stopped following {id}")));
            }
        }
    }
}

/// The attach snapshot: header, a note when older messages are left out,
/// the recent messages (and the summary, if the window starts among them).
fn snapshot(
    session: &SessionView,
    messages: &[MessageView],
    summary: Option<&str>,
    mode: HistoryMode,
) -> String {
    let mut out = session_render::header(session, now_ms(), mode.style);
    let earlier = messages.first().map_or(session.messages, |m| m.idx);
    if earlier > 0 {
        let note = format!(
            "… {earlier} earlier message{} not shown; `flytoctl session_history {}` shows them",
            if earlier == 1 { "" } else { "s" },
            session.id
        );
        out.push_str(&mode.style.paint(&note, Tone::Dim));
        out.push('\n');
    }
    if !messages.is_empty() {
        out.push('\n');
        out.push_str(&session_render::messages(
            messages,
            &Window::of(session, summary),
            &mode,
        ));
    }
    out
}

fn history_mode(reasoning: bool) -> HistoryMode {
    let tty = std::io::stdout().is_terminal();
    HistoryMode {
        style: Style::detect(),
        tty,
        reasoning: reasoning || tty,
        width: term_width(),
        result_lines: session_render::RESULT_LINES,
    }
}

pub fn cancel(ctx: &Ctx, id: String) -> Result<u8> {
    let id = resolve(ctx, &id)?;
    match ctx.request(&Request::SessionCancel { id })? {
        Response::Session { session } => {
            output::stdout(&format!("{}\n", session_render::cancelled(&session)))?;
            Ok(exit::SUCCESS)
        }
        other => Err(unexpected("session_cancel", &other)),
    }
}

pub fn delete(ctx: &Ctx, id: String) -> Result<u8> {
    let id = resolve(ctx, &id)?;
    match ctx.request(&Request::SessionDelete { id })? {
        Response::SessionDeleted { id } => {
            output::stdout(&format!("deleted {id}\n"))?;
            Ok(exit::SUCCESS)
        }
        other => Err(unexpected("session_delete", &other)),
    }
}

pub fn approve(ctx: &Ctx, args: ApproveArgs) -> Result<u8> {
    let id = resolve(ctx, &args.id)?;
    let req = Request::SessionApprove {
        id: id.clone(),
        approval: args.approval,
        allow: args.answer.allow,
    };
    match ctx.request(&req)? {
        Response::ApprovalAnswered { approval, allow } => {
            let verb = if allow { "allowed" } else { "denied" };
            output::stdout(&format!("{verb} approval {approval} of {id}\n"))?;
            Ok(exit::SUCCESS)
        }
        other => Err(unexpected("session_approve", &other)),
    }
}

pub fn list(ctx: &Ctx, args: ListArgs) -> Result<u8> {
    let sessions = list_sessions(ctx)?;
    if args.json {
        let json =
            serde_json::to_string_pretty(&sessions).context("cannot encode the list as JSON")?;
        output::stdout(&format!("{json}\n"))?;
    } else if sessions.is_empty() {
        output::note("no sessions");
    } else {
        output::stdout(&session_render::session_list(
            &sessions,
            now_ms(),
            ctx.style,
        ))?;
    }
    Ok(exit::SUCCESS)
}

pub fn history(ctx: &Ctx, args: HistoryArgs) -> Result<u8> {
    let id = resolve(ctx, &args.id)?;
    let (session, messages, summary, extractions) =
        match ctx.request(&Request::SessionHistory { id })? {
            Response::History {
                session,
                messages,
                summary,
                extractions,
            } => (session, messages, summary, extractions),
            other => return Err(unexpected("session_history", &other)),
        };
    if args.json {
        let json = serde_json::to_string_pretty(&serde_json::json!({
            "session": session,
            "messages": messages,
            "summary": summary,
            "extractions": extractions,
        }))
        .context("cannot encode the history as JSON")?;
        output::stdout(&format!("{json}\n"))?;
        return Ok(exit::SUCCESS);
    }
    let mode = history_mode(args.reasoning);
    let mut out = session_render::header(&session, now_ms(), mode.style);
    out.push_str(&session_render::extractions(
        &extractions,
        now_ms(),
        mode.style,
    ));
    if !messages.is_empty() {
        out.push('\n');
        out.push_str(&session_render::messages(
            &messages,
            &Window::of(&session, summary.as_deref()),
            &mode,
        ));
    }
    output::stdout(&out)?;
    Ok(exit::SUCCESS)
}

pub fn reset(ctx: &Ctx, args: ResetArgs) -> Result<u8> {
    let id = resolve(ctx, &args.id)?;
    let soft = args.how.soft;
    match ctx.request(&Request::SessionReset { id, soft })? {
        Response::Session { session } => {
            output::stdout(&format!("{}\n", context_render::reset_line(&session, soft)))?;
            Ok(exit::SUCCESS)
        }
        other => Err(unexpected("session_reset", &other)),
    }
}

pub fn set_model(ctx: &Ctx, args: ModelArgs) -> Result<u8> {
    let id = resolve(ctx, &args.id)?;
    let req = Request::SessionSetModel {
        id,
        model: args.model,
    };
    match ctx.request(&req)? {
        Response::Session { session } => {
            output::stdout(&context_render::model_lines(&session, ctx.style))?;
            Ok(exit::SUCCESS)
        }
        other => Err(unexpected("session_model", &other)),
    }
}

/// `session_compact`: streams the compaction like a run of `session_send`
/// (Ctrl-C cancels it the same way).
pub fn compact(ctx: &Ctx, args: CompactArgs) -> Result<u8> {
    let id = resolve(ctx, &args.id)?;
    let ctrlc = interrupt::install(
        ctx.socket.clone(),
        interrupt::Mode::Idle { interactive: false },
    )?;
    let mut view = RunView::new(run_mode(&args.show, false));
    let mut client = ctx.connect()?;
    ctrlc.set(interrupt::Mode::Run {
        id: id.clone(),
        cancel_sent: false,
    });
    client.send(&Request::SessionCompact { id: id.clone() })?;
    let outcome = follow_run(ctx, &mut client, "session_compact", &id, &mut view)?;
    Ok(run_code(outcome, view.last_stop()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names() {
        assert!(looks_like_id("s1"));
        assert!(looks_like_id("s42"));
        assert!(!looks_like_id("s"));
        assert!(!looks_like_id("work"));
        assert!(!looks_like_id("s1x"));
    }

    #[test]
    fn messages_lose_trailing_newlines_and_must_say_something() {
        assert_eq!(clean_message("hi\n".into()).unwrap(), "hi");
        assert_eq!(clean_message("a\n\nb\r\n".into()).unwrap(), "a\n\nb");
        let err = clean_message(" \n".into()).unwrap_err();
        assert_eq!(exit::code_for(&err), exit::USAGE);
    }

    #[test]
    fn outcomes_map_to_exit_codes() {
        assert_eq!(run_code(Outcome::Done, Some("end_turn")), 0);
        assert_eq!(run_code(Outcome::Done, None), 0);
        assert_eq!(run_code(Outcome::Cancelled, None), 5);
        assert_eq!(run_code(Outcome::Failed, None), 1);
        assert_eq!(run_code(Outcome::Interrupted, None), 6);
        // A guard's stop is not an answer a script may take for one.
        for stop in ["max_iterations", "budget", "repeat_guard", "stalled"] {
            assert_eq!(run_code(Outcome::Done, Some(stop)), 1, "{stop}");
        }
        assert_eq!(run_code(Outcome::Done, Some("max_tokens")), 0);
        assert_eq!(run_code(Outcome::Done, Some("compacted")), 0);
        assert_eq!(run_code(Outcome::Done, Some("nothing_to_compact")), 0);
    }

    #[test]
    fn runs_stopped_by_a_failed_compaction_fail() {
        // session_send and session_compact alike: the context no longer
        // fits and could not be compacted.
        assert_eq!(run_code(Outcome::Done, Some("compact_failed")), 1);
        assert_eq!(run_code(Outcome::Done, Some("breaker_open")), 1);
    }

    #[test]
    fn workdirs_are_absolute_directories() {
        let cwd = workdir_or_cwd(None).unwrap();
        assert!(cwd.starts_with('/'), "{cwd}");
        assert!(
            workdir_or_cwd(Some(Path::new(".")))
                .unwrap()
                .starts_with('/')
        );
        let err = workdir_or_cwd(Some(Path::new("/nonexistent/dir"))).unwrap_err();
        assert_eq!(exit::code_for(&err), exit::USAGE);
    }
}
