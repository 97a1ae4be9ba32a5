//! `flytoctl`, the command-line client of `flytod`.
//!
//! This crate owns the CLI only: argument parsing and dispatch (this file),
//! plan files (`plan_file`), following a plan live (`watch`, `progress`),
//! agent sessions and `chat` (`cmd_session`, `chat`, `session_render`, with
//! Ctrl-C handling in `interrupt`), turning daemon answers into text
//! (`render`, `table`, `style`, `format`), and the exit-code contract
//! (`exit`). The wire types, framing, handshake,
//! socket resolution and the blocking client come from `flyto-protocol`.

mod chat;
mod cmd_daemon;
mod cmd_plans;
mod cmd_session;
mod cmd_status;
mod cmd_submit;
mod conn;
mod exit;
mod format;
mod interrupt;
mod output;
mod plan_file;
mod progress;
mod render;
mod session_render;
mod style;
mod table;
mod watch;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "flytoctl",
    version,
    about = "Talk to flytod: submit plans and follow them, chat with agent sessions, inspect the daemon",
    after_help = exit::AFTER_HELP
)]
struct Cli {
    /// flytod's socket [default: $FLYTO_PLAN_SOCK, $FLYTO_SOCK, then the standard path]
    ///
    /// Without it: $FLYTO_PLAN_SOCK, $FLYTO_SOCK, $RUNTIME_DIRECTORY/flytod.sock,
    /// $XDG_RUNTIME_DIR/flyto/flytod.sock, /run/flyto/flytod.sock for root,
    /// else /tmp/flyto-<uid>/flytod.sock.
    #[arg(long, global = true, value_name = "PATH", display_order = 900)]
    socket: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Submit a plan from a file or stdin, or a one-step plan from --run/--prompt; prints its id
    #[command(name = "submit_plan")]
    SubmitPlan(cmd_submit::SubmitArgs),

    /// Show a plan's steps and output, its JSON or a step's log, or follow it live
    #[command(name = "plan_status")]
    PlanStatus(cmd_status::StatusArgs),

    /// Cancel a plan (a running step's process group is killed)
    #[command(name = "plan_cancel")]
    PlanCancel {
        /// Plan id
        id: String,
    },

    /// List plans, newest first
    #[command(name = "plan_list")]
    PlanList(cmd_plans::ListArgs),

    /// Start an agent session; prints its id
    #[command(name = "session_new")]
    SessionNew(cmd_session::NewArgs),

    /// Send a message to a session and stream the reply; Ctrl-C cancels the run
    ///
    /// The reply text goes to stdout; reasoning, tool calls and results,
    /// notices and the end-of-run lines go to stderr. Exits 0 when the run
    /// finished, 5 when it was cancelled, 1 when it failed, 4 when flytod
    /// refused (e.g. Conflict: a run is already active). A second Ctrl-C
    /// quits at once (130).
    #[command(name = "session_send")]
    SessionSend(cmd_session::SendArgs),

    /// Show a session's recent messages, then follow its runs live until Ctrl-C
    #[command(name = "session_attach")]
    SessionAttach(cmd_session::AttachArgs),

    /// Cancel a session's active run
    #[command(name = "session_cancel")]
    SessionCancel {
        /// Session id (or the name of an existing session)
        id: String,
    },

    /// List sessions
    #[command(name = "session_list")]
    SessionList(cmd_session::ListArgs),

    /// Print every message of a session
    #[command(name = "session_history")]
    SessionHistory(cmd_session::HistoryArgs),

    /// Chat with a session: each line you type is a message (starts a new
    /// session unless given one)
    ///
    /// Ctrl-C cancels the current reply, Ctrl-D or /quit leaves. With stdin
    /// not a terminal there is no prompt: every input line is one message.
    Chat(chat::ChatArgs),

    /// Check that flytod answers: version, pid, uptime
    Ping,

    /// Daemon counters
    Stats {
        /// Print them as pretty JSON
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) if exit::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            output::note(&exit::message(&err));
            ExitCode::from(exit::code_for(&err))
        }
    }
}

fn run(cli: Cli) -> Result<u8> {
    let ctx = conn::Ctx {
        socket: flyto_protocol::paths::client_socket(cli.socket.as_deref()),
        style: style::Style::detect(),
    };
    match cli.command {
        Command::SubmitPlan(args) => cmd_submit::run(&ctx, args),
        Command::PlanStatus(args) => cmd_status::run(&ctx, args),
        Command::PlanCancel { id } => cmd_plans::cancel(&ctx, id),
        Command::PlanList(args) => cmd_plans::list(&ctx, args),
        Command::SessionNew(args) => cmd_session::new(&ctx, args),
        Command::SessionSend(args) => cmd_session::send_cmd(&ctx, args),
        Command::SessionAttach(args) => cmd_session::attach(&ctx, args),
        Command::SessionCancel { id } => cmd_session::cancel(&ctx, id),
        Command::SessionList(args) => cmd_session::list(&ctx, args),
        Command::SessionHistory(args) => cmd_session::history(&ctx, args),
        Command::Chat(args) => chat::run(&ctx, args),
        Command::Ping => cmd_daemon::ping(&ctx),
        Command::Stats { json } => cmd_daemon::stats(&ctx, json),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn one_step_options_need_run_or_prompt() {
        let parse = |args: &[&str]| Cli::try_parse_from(args);
        assert!(parse(&["flytoctl", "submit_plan", "--run", "true", "--wait"]).is_ok());
        assert!(parse(&["flytoctl", "submit_plan", "plan.toml"]).is_ok());
        assert!(parse(&["flytoctl", "submit_plan", "plan.toml", "--run", "x"]).is_err());
        assert!(parse(&["flytoctl", "submit_plan", "--run", "x", "--prompt", "y"]).is_err());
        assert!(parse(&["flytoctl", "submit_plan", "--timeout", "5"]).is_err());
        assert!(parse(&["flytoctl", "submit_plan", "--run", "x", "--session", "s"]).is_err());
        assert!(parse(&["flytoctl", "submit_plan", "--session", "s"]).is_err());
        assert!(parse(&["flytoctl", "submit_plan", "--prompt", "p", "--session", "s"]).is_ok());
        assert!(parse(&["flytoctl", "plan_list", "--state", "bogus"]).is_err());
        assert!(parse(&["flytoctl", "plan_status", "p1", "--json", "--watch"]).is_err());
        assert!(parse(&["flytoctl", "--socket", "/s", "ping"]).is_ok());
        assert!(parse(&["flytoctl", "ping", "--socket", "/s"]).is_ok());
    }

    #[test]
    fn session_arguments() {
        let parse = |args: &[&str]| Cli::try_parse_from(args);
        assert!(parse(&["flytoctl", "session_new"]).is_ok());
        assert!(parse(&["flytoctl", "session_new", "--name", "n", "--model", "fast"]).is_ok());
        assert!(parse(&["flytoctl", "session_send", "s1", "hello"]).is_ok());
        assert!(
            parse(&[
                "flytoctl",
                "session_send",
                "s1",
                "-",
                "--usage",
                "--reasoning"
            ])
            .is_ok()
        );
        assert!(parse(&["flytoctl", "session_send", "s1"]).is_err());
        assert!(parse(&["flytoctl", "session_attach", "s1", "--recent", "5"]).is_ok());
        assert!(parse(&["flytoctl", "session_attach", "s1", "--recent", "x"]).is_err());
        assert!(parse(&["flytoctl", "session_cancel", "s1"]).is_ok());
        assert!(parse(&["flytoctl", "session_list", "--json"]).is_ok());
        assert!(parse(&["flytoctl", "session_history", "s1", "--json"]).is_ok());
        assert!(parse(&["flytoctl", "session_history", "s1", "--json", "--reasoning"]).is_err());
        assert!(parse(&["flytoctl", "chat"]).is_ok());
        assert!(
            parse(&[
                "flytoctl",
                "chat",
                "--name",
                "n",
                "--workdir",
                "/",
                "--model",
                "m"
            ])
            .is_ok()
        );
        assert!(parse(&["flytoctl", "chat", "--session", "s1"]).is_ok());
        assert!(parse(&["flytoctl", "chat", "--session", "s1", "--name", "n"]).is_err());
        assert!(parse(&["flytoctl", "chat", "--session", "s1", "--model", "m"]).is_err());

        let cli = parse(&["flytoctl", "session_attach", "s1"]).unwrap();
        match cli.command {
            Command::SessionAttach(args) => assert_eq!(args.recent, 20),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn help_documents_exit_codes() {
        let help = Cli::command().render_help().to_string();
        assert!(help.contains("Exit codes:"), "{help}");
        assert!(help.contains("submit_plan"), "{help}");
    }
}
