//! `flytoctl`, the command-line client of `flytod`.
//!
//! This crate owns the CLI only: argument parsing and dispatch (this file),
//! plan files (`plan_file`), following a plan live (`watch`, `progress`),
//! agent sessions and `chat` (`cmd_session`, `chat`, `session_render`, with
//! Ctrl-C handling in `interrupt`), context budgets and compaction breakers
//! (`cmd_breaker`, `context_render`), turning daemon answers into text
//! (`render`, `table`, `style`, `format`), and the exit-code contract
//! (`exit`). The wire types, framing, handshake,
//! socket resolution and the blocking client come from `flyto-protocol`.

mod chat;
mod cmd_breaker;
mod cmd_channels;
mod cmd_daemon;
mod cmd_dream;
mod cmd_hooks;
mod cmd_jobs;
mod cmd_mcp;
mod cmd_memory;
mod cmd_plans;
mod cmd_policy;
mod cmd_session;
mod cmd_skills;
mod cmd_status;
mod cmd_submit;
mod conn;
mod context_render;
mod exit;
mod format;
mod interrupt;
mod logfile;
mod output;
mod plan_file;
mod progress;
mod qr;
mod render;
mod sanitize;
mod session_render;
mod style;
mod table;
mod watch;

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
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
        /// Plan id or name
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
    /// finished, 5 when it was cancelled, 1 when it failed, when a guard
    /// stopped it (sessions.max_iterations, max_run_cost_usd, a repeated
    /// call, a stall) or when the context no longer fits and compaction
    /// failed (or its breaker is open), 4 when flytod refused (e.g.
    /// Conflict: a run is already active), 6 when flytod shut down during
    /// the run. A second Ctrl-C quits at once (130).
    ///
    /// A command hitting an `ask` rule of [permissions] waits for a y/N
    /// answer when stdin and stderr are terminals (or --prompt-approvals),
    /// for at most sessions.approval_timeout; otherwise it is refused and
    /// the model is told.
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

    /// Delete a session that is not running: its record and every message
    #[command(name = "session_delete")]
    SessionDelete {
        /// Session id (or the name of an existing session)
        id: String,
    },
    /// Answer an approval request of a session's `ask` rule
    ///
    /// The number is in the `approval needed` line that chat, session_send
    /// and session_attach show. The first answer wins; a late one exits 4.
    #[command(name = "session_approve")]
    SessionApprove(cmd_session::ApproveArgs),
    /// List sessions
    #[command(name = "session_list")]
    SessionList(cmd_session::ListArgs),

    /// Print every message of a session, its context budget and, after a
    /// compaction, the summary the model sees
    #[command(name = "session_history")]
    SessionHistory(cmd_session::HistoryArgs),

    /// Move the start of what the model sees; history keeps every message
    ///
    /// --soft starts the model's window at the last user message, --hard
    /// starts it empty. For channel-style sessions that run for months.
    #[command(name = "session_reset")]
    SessionReset(cmd_session::ResetArgs),

    /// Switch a session's model and show its context budget under the new one
    ///
    /// When the context is over the new model's compaction threshold, the
    /// session compacts at once (`session_attach` follows it).
    #[command(name = "session_model")]
    SessionModel(cmd_session::ModelArgs),

    /// Compact a session's context now and stream how it goes
    ///
    /// Exits 0 when it compacted or there was nothing to compact, 1 when the
    /// compaction failed, 4 when flytod refused (e.g. a run is active), 5
    /// when cancelled with Ctrl-C.
    #[command(name = "session_compact")]
    SessionCompact(cmd_session::CompactArgs),

    /// Chat with a session: each line you type is a message (starts a new
    /// session unless given one)
    ///
    /// Ctrl-C cancels the current reply, Ctrl-D or /quit leaves. On a
    /// terminal, lines can be edited and recalled (history in
    /// $XDG_STATE_HOME/flytoctl/chat_history, else ~/.local/state/...), and
    /// /help, /reset, /compact, /model NAME and /cancel run here without
    /// reaching the model (//text sends "/text"). With stdin not a terminal
    /// there is no prompt and no commands but /quit: every input line is one
    /// message.
    Chat(chat::ChatArgs),

    /// Show the compaction circuit breaker of every project
    ///
    /// A breaker opens after 3 failed compactions in a row in one project
    /// (workdir); while open, sessions there do not compact. It closes by
    /// itself after a while (RESETS), on a success, or with breaker_reset.
    #[command(name = "breaker_status")]
    BreakerStatus(cmd_breaker::StatusArgs),

    /// Close a project's compaction breaker (every open one without PROJECT)
    #[command(name = "breaker_reset")]
    BreakerReset(cmd_breaker::ResetArgs),

    /// Show what the agent's `bash` tool would decide for a command, without running it
    ///
    /// flytod judges COMMAND with its live [permissions] config, exactly as
    /// the tool does, and prints the verdict (allow, deny or ask), the rule
    /// that decided it (a built-in check such as `deny:recursive-delete`, or
    /// your rule as written, e.g. `deny_paths "/etc/**"`), why, and every
    /// simple command the parser found. Exits 0 whatever the verdict; 2 on a
    /// usage error (no command, a --workdir that is not a directory).
    #[command(name = "policy_check")]
    PolicyCheck(cmd_policy::CheckArgs),

    /// List the skills a session in this directory sees
    ///
    /// Built-in skills, yours (`<config dir>/skills/`) and the project's
    /// (`.flyto/skills/`, `.agents/skills/`), the higher source winning a
    /// name. --all adds the folders each shadows and the skill folders that
    /// could not be loaded, with file, line and reason.
    #[command(name = "skill_list")]
    SkillList(cmd_skills::ListArgs),

    /// The hooks ([[hooks]] in the config) with their last outcomes
    #[command(name = "hook_list")]
    HookList(cmd_hooks::ListArgs),

    /// The MCP servers ([mcp.servers.NAME] in the config): state, tools, last error
    #[command(name = "mcp_list")]
    McpList(cmd_mcp::ListArgs),

    /// One MCP server's tools, as sessions get them (mcp__SERVER__TOOL)
    #[command(name = "mcp_tools")]
    McpTools(cmd_mcp::ToolsArgs),

    /// Stop one MCP server and start it again
    #[command(name = "mcp_restart")]
    McpRestart(cmd_mcp::RestartArgs),

    /// Show one skill: where it comes from, what it shadows, its files and body
    #[command(name = "skill_show")]
    SkillShow(cmd_skills::ShowArgs),

    /// Rescan every skill folder now (sessions see the result at their next model call)
    #[command(name = "skill_reload")]
    SkillReload(cmd_skills::ReloadArgs),

    /// List what the agent remembers for a project and for you
    ///
    /// Both scopes: the project's (entries of type feedback, project,
    /// reference) and the user's (type user, shared by every project).
    /// Files in the folders that cannot be read as entries are listed with
    /// file, line and reason.
    #[command(name = "memory_list")]
    MemoryList(cmd_memory::ListArgs),

    /// Show one memory entry with its body
    #[command(name = "memory_show")]
    MemoryShow(cmd_memory::NameArgs),

    /// Rank memory entries for a query (BM25 over name, description, headings)
    #[command(name = "memory_search")]
    MemorySearch(cmd_memory::SearchArgs),

    /// Forget a memory entry: it moves to the scope's .trash/ for 30 days
    #[command(name = "memory_forget")]
    MemoryForget(cmd_memory::ForgetArgs),

    /// Bring back the most recently forgotten entry of that name
    #[command(name = "memory_restore")]
    MemoryRestore(cmd_memory::NameArgs),

    /// Print the memory folders, for editing entries by hand
    #[command(name = "memory_path")]
    MemoryPath(cmd_memory::ProjectArg),

    /// Write every memory scope's entries to a new folder, to read and edit
    #[command(name = "memory_export")]
    MemoryExport(cmd_memory::FolderArg),

    /// Make memory hold a folder's entries (as memory_export wrote it):
    /// new and changed ones are written, missing ones go to the trash
    #[command(name = "memory_import")]
    MemoryImport(cmd_memory::FolderArg),

    /// Memory consolidation per project: gates, last success, lease, last outcomes
    #[command(name = "dream_status")]
    DreamStatus(cmd_dream::StatusArgs),

    /// The newest consolidation runs with their outcomes and per-entry diffs
    #[command(name = "dream_log")]
    DreamLog(cmd_dream::LogArgs),

    /// One consolidation run: gates, sessions read, cost, outcome, diff
    #[command(name = "dream_diff")]
    DreamDiff(cmd_dream::DiffArgs),

    /// Consolidate a project's memory now (skips the time and session gates);
    /// --dry-run shows the diff and applies nothing
    #[command(name = "dream_run")]
    DreamRun(cmd_dream::RunArgs),

    /// Make the memory before a consolidation run live again, byte for byte
    #[command(name = "dream_undo")]
    DreamUndo(cmd_dream::UndoArgs),

    /// Print the next fire instants of a schedule, creating nothing
    #[command(name = "job_next")]
    JobNext(cmd_jobs::NextArgs),

    /// Create a job: a schedule that submits a plan (one agent prompt, or a plan file)
    #[command(name = "job_create")]
    JobCreate(cmd_jobs::JobArgs),

    /// Change a job's fields (the ones given)
    #[command(name = "job_update")]
    JobUpdate(cmd_jobs::UpdateArgs),

    /// Jobs: next fire (local and UTC), last outcome, failures in a row, state
    #[command(name = "job_list")]
    JobList(cmd_jobs::ListArgs),

    /// A job's definition and its fires: instant, plan, outcome, duration
    #[command(name = "job_show")]
    JobShow(cmd_jobs::IdArgs),

    /// Stop a job firing until job_resume
    #[command(name = "job_pause")]
    JobPause(cmd_jobs::IdArgs),

    /// Let a paused or stopped job fire again, from now on
    #[command(name = "job_resume")]
    JobResume(cmd_jobs::IdArgs),

    /// Delete a job and its fire records (its plans stay)
    #[command(name = "job_delete")]
    JobDelete(cmd_jobs::IdArgs),

    /// Run a job once now, outside its schedule (recorded as manual)
    #[command(name = "job_run")]
    JobRun(cmd_jobs::IdArgs),

    /// Chat bindings: state, last completed poll, last error, queued messages, pairing requests
    #[command(name = "channel_list")]
    ChannelList(cmd_channels::ListArgs),

    /// Bind a chat platform: telegram, wechat, wecom or an inbox folder
    #[command(name = "channel_bind")]
    ChannelBind(cmd_channels::BindArgs),

    /// Remove a binding and everything kept for it
    #[command(name = "channel_unbind")]
    ChannelUnbind(cmd_channels::NameArgs),

    /// Admit the user who was given this pairing code
    #[command(name = "channel_pair")]
    ChannelPair(cmd_channels::CodeArgs),

    /// Send one test message (NAME or NAME:CHAT) and show the platform's answer
    #[command(name = "channel_test")]
    ChannelTest(cmd_channels::NameArgs),

    /// Check that flytod answers: version, pid, uptime
    Ping,

    /// Daemon counters, compactions and the fullest session contexts
    Stats {
        /// Print them as pretty JSON
        #[arg(long)]
        json: bool,
    },

    /// Submit a finished plan again as a new plan (same steps, env and
    /// workdirs); prints the new id, whose status names the old one
    #[command(name = "plan_restart")]
    PlanRestart {
        /// Plan id or name
        id: String,
    },

    /// Delete a finished plan and its logs (refused while it is pending or running)
    #[command(name = "plan_remove")]
    PlanRemove {
        /// Plan id or name
        id: String,
    },

    /// Print a shell completion script
    ///
    /// bash: `flytoctl completions bash > ~/.local/share/bash-completion/completions/flytoctl`;
    /// zsh: into a directory on $fpath as `_flytoctl`; fish:
    /// `flytoctl completions fish > ~/.config/fish/completions/flytoctl.fish`.
    Completions {
        /// bash, zsh, fish, elvish or powershell
        shell: clap_complete::Shell,
    },
}

/// The CLI with a kebab-case alias (`submit-plan`) for every snake_case
/// subcommand, added here so that no subcommand can miss one.
fn cli_command() -> clap::Command {
    Cli::command().mut_subcommands(|sub| {
        let name = sub.get_name().to_string();
        if name.contains('_') {
            sub.alias(name.replace('_', "-"))
        } else {
            sub
        }
    })
}

fn parse_cli() -> Cli {
    let matches = cli_command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() -> ExitCode {
    let cli = parse_cli();
    let result = run(cli);
    // A Ctrl-C being handled finishes its note before we exit.
    interrupt::settle();
    match result {
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
        Command::SessionDelete { id } => cmd_session::delete(&ctx, id),
        Command::SessionApprove(args) => cmd_session::approve(&ctx, args),
        Command::SessionList(args) => cmd_session::list(&ctx, args),
        Command::SessionHistory(args) => cmd_session::history(&ctx, args),
        Command::SessionReset(args) => cmd_session::reset(&ctx, args),
        Command::SessionModel(args) => cmd_session::set_model(&ctx, args),
        Command::SessionCompact(args) => cmd_session::compact(&ctx, args),
        Command::BreakerStatus(args) => cmd_breaker::status(&ctx, args),
        Command::BreakerReset(args) => cmd_breaker::reset(&ctx, args),
        Command::Chat(args) => chat::run(&ctx, args),
        Command::PolicyCheck(args) => cmd_policy::run(&ctx, args),
        Command::SkillList(args) => cmd_skills::list(&ctx, args),
        Command::HookList(args) => cmd_hooks::list(&ctx, args),
        Command::McpList(args) => cmd_mcp::list(&ctx, args),
        Command::McpTools(args) => cmd_mcp::tools(&ctx, args),
        Command::McpRestart(args) => cmd_mcp::restart(&ctx, args),
        Command::SkillShow(args) => cmd_skills::show(&ctx, args),
        Command::SkillReload(args) => cmd_skills::reload(&ctx, args),
        Command::MemoryList(args) => cmd_memory::list(&ctx, args),
        Command::MemoryShow(args) => cmd_memory::show(&ctx, args),
        Command::MemorySearch(args) => cmd_memory::search(&ctx, args),
        Command::MemoryForget(args) => cmd_memory::forget(&ctx, args),
        Command::MemoryRestore(args) => cmd_memory::restore(&ctx, args),
        Command::MemoryPath(args) => cmd_memory::path(&ctx, args),
        Command::MemoryExport(args) => cmd_memory::export(&ctx, args),
        Command::MemoryImport(args) => cmd_memory::import(&ctx, args),
        Command::DreamStatus(args) => cmd_dream::status(&ctx, args),
        Command::DreamLog(args) => cmd_dream::log(&ctx, args),
        Command::DreamDiff(args) => cmd_dream::diff(&ctx, args),
        Command::DreamRun(args) => cmd_dream::run(&ctx, args),
        Command::DreamUndo(args) => cmd_dream::undo(&ctx, args),
        Command::JobNext(args) => cmd_jobs::next(&ctx, args),
        Command::JobCreate(args) => cmd_jobs::create(&ctx, args),
        Command::JobUpdate(args) => cmd_jobs::update(&ctx, args),
        Command::JobList(args) => cmd_jobs::list(&ctx, args),
        Command::JobShow(args) => cmd_jobs::show(&ctx, args),
        Command::JobPause(args) => cmd_jobs::pause(&ctx, args),
        Command::JobResume(args) => cmd_jobs::resume(&ctx, args),
        Command::JobDelete(args) => cmd_jobs::delete(&ctx, args),
        Command::JobRun(args) => cmd_jobs::run(&ctx, args),
        Command::ChannelList(args) => cmd_channels::list(&ctx, args),
        Command::ChannelBind(args) => cmd_channels::bind(&ctx, args),
        Command::ChannelUnbind(args) => cmd_channels::unbind(&ctx, args),
        Command::ChannelPair(args) => cmd_channels::pair(&ctx, args),
        Command::ChannelTest(args) => cmd_channels::test(&ctx, args),
        Command::Ping => cmd_daemon::ping(&ctx),
        Command::Stats { json } => cmd_daemon::stats(&ctx, json),
        Command::PlanRestart { id } => cmd_plans::restart(&ctx, id),
        Command::PlanRemove { id } => cmd_plans::remove(&ctx, id),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cli_command(), "flytoctl", &mut script);
            std::io::Write::write_all(&mut std::io::stdout().lock(), &script)
                .context("cannot write the completion script to stdout")?;
            Ok(exit::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        cli_command().debug_assert();
    }

    #[test]
    fn every_subcommand_has_a_kebab_case_alias() {
        let parse = |args: &[&str]| {
            let matches = cli_command().try_get_matches_from(args)?;
            Cli::from_arg_matches(&matches)
        };
        assert!(matches!(
            parse(&["flytoctl", "plan-status", "p1"]).map(|c| c.command),
            Ok(Command::PlanStatus(_))
        ));
        assert!(parse(&["flytoctl", "submit-plan", "--run", "true"]).is_ok());
        for sub in cli_command().get_subcommands() {
            let name = sub.get_name();
            let kebab = name.replace('_', "-");
            assert!(
                kebab == name || sub.get_all_aliases().any(|a| a == kebab),
                "{name} has no alias {kebab}"
            );
        }
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
    fn context_and_breaker_arguments() {
        let parse = |args: &[&str]| Cli::try_parse_from(args);
        assert!(parse(&["flytoctl", "session_reset", "s1", "--soft"]).is_ok());
        assert!(parse(&["flytoctl", "session_reset", "s1", "--hard"]).is_ok());
        let neither = parse(&["flytoctl", "session_reset", "s1"]).unwrap_err();
        assert_eq!(
            neither.kind(),
            clap::error::ErrorKind::MissingRequiredArgument
        );
        let both = parse(&["flytoctl", "session_reset", "s1", "--soft", "--hard"]).unwrap_err();
        assert_eq!(both.kind(), clap::error::ErrorKind::ArgumentConflict);
        assert!(parse(&["flytoctl", "session_reset", "--soft"]).is_err());
        assert!(parse(&["flytoctl", "session_model", "s1", "fast"]).is_ok());
        assert!(parse(&["flytoctl", "session_model", "s1"]).is_err());
        assert!(parse(&["flytoctl", "session_compact", "s1"]).is_ok());
        assert!(parse(&["flytoctl", "session_compact", "s1", "--usage"]).is_ok());
        assert!(parse(&["flytoctl", "session_compact"]).is_err());
        assert!(parse(&["flytoctl", "breaker_status"]).is_ok());
        assert!(parse(&["flytoctl", "breaker_status", "--json"]).is_ok());
        assert!(parse(&["flytoctl", "breaker_reset"]).is_ok());
        assert!(parse(&["flytoctl", "breaker_reset", "0123456789abcdef"]).is_ok());
        assert!(parse(&["flytoctl", "breaker_reset", "a", "b"]).is_err());

        match parse(&["flytoctl", "session_reset", "s1", "--hard"])
            .unwrap()
            .command
        {
            Command::SessionReset(args) => assert!(!args.how.soft && args.how.hard),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn policy_check_takes_the_command_after_dashes() {
        let parse = |args: &[&str]| Cli::try_parse_from(args);
        assert!(parse(&["flytoctl", "policy_check", "--", "rm -rf /"]).is_ok());
        assert!(
            parse(&[
                "flytoctl",
                "policy_check",
                "--json",
                "--workdir",
                "/",
                "--",
                "ls"
            ])
            .is_ok()
        );
        assert!(parse(&["flytoctl", "policy_check"]).is_err());
        assert!(parse(&["flytoctl", "policy_check", "rm"]).is_err());
        match parse(&["flytoctl", "policy_check", "--", "git", "push", "-f"])
            .unwrap()
            .command
        {
            Command::PolicyCheck(args) => assert_eq!(args.command.join(" "), "git push -f"),
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
