//! `chat`: an interactive loop over one session. Each input line is one
//! message; its reply streams as with `session_send`. Ctrl-C cancels the
//! current reply (not the chat); Ctrl-D, end of input or `/quit` leave.
//!
//! On a terminal, lines are edited with rustyline (history kept in the
//! user's state dir, 0600) and the slash commands of [`COMMANDS`] run
//! here, never reaching the model. With stdin not a terminal there is no
//! prompt and no commands but `/quit`, so a script can pipe messages in,
//! one per line.

use crate::cmd_session::{self, CompactArgs, ModelArgs, ResetArgs, ResetHow, ShowArgs};
use crate::conn::Ctx;
use crate::exit::{self, usage};
use crate::interrupt;
use crate::output;
use crate::session_render::RunView;
use crate::style::{Style, Tone};
use anyhow::{Context, Result};
use clap::Args;
use flyto_protocol::{ClientError, ErrorCode};
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct ChatArgs {
    /// Continue this session (an id, or the name of an existing session)
    #[arg(long, value_name = "ID", conflicts_with_all = ["name", "workdir", "model"])]
    pub session: Option<String>,

    /// Continue the session with this name, or start one named so
    #[arg(long)]
    pub name: Option<String>,

    /// Directory a new session's tools work in [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,

    /// Model profile or role of a new session [default: the role `main`]
    #[arg(long, value_name = "PROFILE")]
    pub model: Option<String>,

    #[command(flatten)]
    pub sandbox: cmd_session::SandboxArgs,

    #[command(flatten)]
    pub show: ShowArgs,
}

/// What one input line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Input<'a> {
    Skip,
    Quit,
    Message(&'a str),
    /// A slash command (terminal only).
    Command(Slash<'a>),
}

/// The local commands of a chat on a terminal.
#[derive(Debug, PartialEq, Eq)]
pub enum Slash<'a> {
    Help,
    Reset,
    Compact,
    /// `/model NAME`; `None` when NAME is missing.
    Model(Option<&'a str>),
    Cancel,
    Unknown(&'a str),
}

/// For `/help` and the answer to an unknown command.
pub const COMMANDS: &str = "\
  /help          this list
  /reset         soft reset: the model sees only your next message on (history keeps all)
  /compact       compact the session's context now
  /model NAME    switch to a model profile or role (main, fast, ...)
  /cancel        cancel the session's active run
  /quit, /exit   leave (as Ctrl-D does)
  //text         send a message that starts with /text";

/// `commands`: slash commands are recognised (stdin is a terminal).
pub fn parse_line(line: &str, commands: bool) -> Input<'_> {
    let line = line.trim_end_matches(['\n', '\r']);
    let trimmed = line.trim();
    match trimmed {
        "" => return Input::Skip,
        "/quit" | "/exit" => return Input::Quit,
        _ => {}
    }
    if !commands {
        return Input::Message(line);
    }
    if let Some(escaped) = trimmed.strip_prefix("//") {
        return Input::Message(&trimmed[trimmed.len() - escaped.len() - 1..]);
    }
    let Some(rest) = trimmed.strip_prefix('/') else {
        return Input::Message(line);
    };
    let (name, arg) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let arg = arg.trim();
    Input::Command(match name {
        "help" | "?" => Slash::Help,
        "reset" => Slash::Reset,
        "compact" => Slash::Compact,
        "model" => Slash::Model((!arg.is_empty()).then_some(arg)),
        "cancel" => Slash::Cancel,
        _ => Slash::Unknown(trimmed.split_whitespace().next().unwrap_or(trimmed)),
    })
}

pub fn run(ctx: &Ctx, args: ChatArgs) -> Result<u8> {
    let interactive = std::io::stdin().is_terminal();
    let err_style = Style::detect_stderr();
    let id = session_for(ctx, &args)?;
    let hello = if interactive {
        format!(
            "session {id} · {}\n",
            err_style.paint(
                "Ctrl-C cancels a reply · /help lists commands · Ctrl-D or /quit leaves",
                Tone::Dim
            )
        )
    } else {
        format!("session {id}\n")
    };
    let _ = output::stderr(&hello);
    let mut lines = if interactive {
        Lines::editor()?
    } else {
        // Not locked for the whole chat: an approval prompt reads stdin too.
        Lines::Plain(std::io::stdin())
    };
    // After the editor: rustyline replaces the SIGINT handler when it is
    // created, which would leave Ctrl-C during a reply doing nothing. At
    // its own prompt it reads Ctrl-C as a key (raw mode), not a signal.
    let ctrlc = interrupt::install(ctx.socket.clone(), interrupt::Mode::Idle { interactive })?;
    let mut view = RunView::new(cmd_session::run_mode(&args.show, false));
    loop {
        ctrlc.set(interrupt::Mode::Idle { interactive });
        let Some(line) = lines.next()? else {
            return Ok(exit::SUCCESS);
        };
        let text = match parse_line(&line, interactive) {
            Input::Skip => continue,
            Input::Quit => return Ok(exit::SUCCESS),
            Input::Message(text) => text.to_string(),
            Input::Command(command) => {
                if let Err(e) = slash(ctx, &id, command, &args.show) {
                    output::note(&exit::message(&e));
                }
                let _ = output::stderr("\n");
                continue;
            }
        };
        match cmd_session::send(ctx, &id, text, &mut view, &ctrlc) {
            Ok(_) => {}
            Err(e) if interactive && refused(&e) => output::note(&exit::message(&e)),
            Err(e) => return Err(e),
        }
        if interactive {
            let _ = output::stderr("\n");
        }
    }
}

/// Runs a slash command against session `id`; its failure is the chat's
/// note, never its end.
fn slash(ctx: &Ctx, id: &str, command: Slash<'_>, show: &ShowArgs) -> Result<()> {
    let session = || id.to_string();
    match command {
        Slash::Help => {
            output::stderr(&format!(
                "commands (they never reach the model):\n{COMMANDS}\n"
            ))?;
        }
        Slash::Unknown(name) => {
            output::note(&format!(
                "unknown command {name}; the commands are:\n{COMMANDS}"
            ));
        }
        Slash::Reset => {
            cmd_session::reset(
                ctx,
                ResetArgs {
                    id: session(),
                    how: ResetHow {
                        soft: true,
                        hard: false,
                    },
                },
            )?;
        }
        Slash::Compact => {
            cmd_session::compact(
                ctx,
                CompactArgs {
                    id: session(),
                    show: ShowArgs {
                        reasoning: show.reasoning,
                        usage: show.usage,
                        prompt_approvals: show.prompt_approvals,
                    },
                },
            )?;
        }
        Slash::Model(None) => {
            output::note(
                "/model needs a name: /model NAME (a model profile, or a role such as main or fast)",
            );
        }
        Slash::Model(Some(model)) => {
            cmd_session::set_model(
                ctx,
                ModelArgs {
                    id: session(),
                    model: model.to_string(),
                },
            )?;
        }
        Slash::Cancel => {
            cmd_session::cancel(ctx, session())?;
        }
    }
    Ok(())
}

/// Where input lines come from: a line editor on a terminal, else stdin.
enum Lines {
    Editor {
        editor: Box<DefaultEditor>,
        history: Option<PathBuf>,
    },
    Plain(std::io::Stdin),
}

/// Lines of history kept.
const HISTORY_LINES: usize = 1000;

impl Lines {
    fn editor() -> Result<Lines> {
        let config = rustyline::Config::builder()
            .max_history_size(HISTORY_LINES)
            .context("cannot set up line editing")?
            .auto_add_history(true)
            // Prompt and editing on the terminal itself: stdout carries
            // only the replies, even when redirected.
            .behavior(rustyline::Behavior::PreferTerm)
            .build();
        let mut editor =
            DefaultEditor::with_config(config).context("cannot set up line editing")?;
        let history = history_file();
        if let Some(path) = &history {
            // No history yet is the normal first run.
            let _ = editor.load_history(path);
        }
        Ok(Lines::Editor {
            editor: Box::new(editor),
            history,
        })
    }

    /// The next line, `None` at the end of input (Ctrl-D).
    fn next(&mut self) -> Result<Option<String>> {
        match self {
            Lines::Plain(stdin) => {
                let mut line = String::new();
                let n = stdin
                    .read_line(&mut line)
                    .context("cannot read from stdin")?;
                Ok((n > 0).then_some(line))
            }
            Lines::Editor { editor, history } => loop {
                match editor.readline("> ") {
                    Ok(line) => {
                        if let Some(path) = history {
                            save_history(editor, path);
                        }
                        return Ok(Some(line));
                    }
                    // Ctrl-C at the prompt: there is no reply to cancel.
                    Err(ReadlineError::Interrupted) => {
                        let _ = output::stderr("(Ctrl-D or /quit leaves the chat)\n");
                    }
                    Err(ReadlineError::Eof) => return Ok(None),
                    Err(e) => return Err(anyhow::Error::new(e).context("cannot read a line")),
                }
            },
        }
    }
}

/// `$XDG_STATE_HOME/flytoctl/chat_history`, else under
/// `~/.local/state`: the user's own state, apart from flytod's.
fn history_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|home| PathBuf::from(home).join(".local/state"))
        })?;
    Some(base.join("flytoctl").join("chat_history"))
}

/// Writes the history, readable by the user only (it holds what they
/// typed); a failure costs the history, not the chat.
fn save_history(editor: &mut DefaultEditor, path: &Path) {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    if let Some(dir) = path.parent() {
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir);
    }
    // Created 0600 before rustyline writes it, whatever the umask.
    let _ = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path);
    if let Err(e) = editor.save_history(path) {
        output::note(&format!(
            "cannot save the chat history to {}: {e}",
            path.display()
        ));
    }
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
}

/// The daemon said no to this message (e.g. a run is already active); the
/// chat goes on.
fn refused(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<ClientError>(),
            Some(ClientError::Remote { code, .. }) if *code != ErrorCode::Unavailable
        )
    })
}

/// The session to talk to: `--session`, the one named `--name`, or a new one.
fn session_for(ctx: &Ctx, args: &ChatArgs) -> Result<String> {
    if let Some(id) = &args.session {
        return cmd_session::resolve(ctx, id);
    }
    if let Some(name) = &args.name {
        if cmd_session::looks_like_id(name) {
            return Err(usage(format!(
                "--name {name} looks like a session id; use --session {name}, or another name"
            )));
        }
        if let Some(session) = cmd_session::find_named(ctx, name)? {
            if args.workdir.is_some() || args.model.is_some() {
                output::note(&format!(
                    "continuing {} ({name}); --workdir and --model apply to new sessions only",
                    session.id
                ));
            }
            return Ok(session.id);
        }
    }
    let session = cmd_session::create(
        ctx,
        args.name.clone(),
        args.workdir.as_deref(),
        args.model.clone(),
        &args.sandbox,
    )?;
    Ok(session.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        for commands in [false, true] {
            assert_eq!(parse_line("\n", commands), Input::Skip);
            assert_eq!(parse_line("   \r\n", commands), Input::Skip);
            assert_eq!(parse_line("/quit\n", commands), Input::Quit);
            assert_eq!(parse_line(" /exit ", commands), Input::Quit);
            assert_eq!(
                parse_line("  hi there \n", commands),
                Input::Message("  hi there ")
            );
        }
        // Piped input keeps every other line a message.
        assert_eq!(parse_line("/reset\n", false), Input::Message("/reset"));
    }

    #[test]
    fn slash_commands() {
        let cmd = |line| match parse_line(line, true) {
            Input::Command(c) => Some(c),
            _ => None,
        };
        assert_eq!(cmd("/help"), Some(Slash::Help));
        assert_eq!(cmd(" /reset \n"), Some(Slash::Reset));
        assert_eq!(cmd("/compact"), Some(Slash::Compact));
        assert_eq!(cmd("/model  fast "), Some(Slash::Model(Some("fast"))));
        assert_eq!(cmd("/model"), Some(Slash::Model(None)));
        assert_eq!(cmd("/cancel"), Some(Slash::Cancel));
        assert_eq!(cmd("/usr is big"), Some(Slash::Unknown("/usr")));
        assert_eq!(
            parse_line("//usr is big", true),
            Input::Message("/usr is big")
        );
        assert_eq!(
            parse_line("what is /usr?", true),
            Input::Message("what is /usr?")
        );
    }
}
