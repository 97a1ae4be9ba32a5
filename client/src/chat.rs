//! `chat`: an interactive loop over one session. Each input line is one
//! message; its reply streams as with `session_send`. Ctrl-C cancels the
//! current reply (not the chat); Ctrl-D, end of input or `/quit` leave.
//!
//! With stdin not a terminal there is no prompt, so a script can pipe
//! messages in, one per line.

use crate::cmd_session::{self, ShowArgs};
use crate::conn::Ctx;
use crate::exit::{self, usage};
use crate::interrupt;
use crate::output;
use crate::session_render::RunView;
use crate::style::{Style, Tone};
use anyhow::{Context, Result};
use clap::Args;
use flyto_protocol::{ClientError, ErrorCode};
use std::io::IsTerminal;
use std::path::PathBuf;

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
    pub show: ShowArgs,
}

/// What one input line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Input<'a> {
    Skip,
    Quit,
    Message(&'a str),
}

pub fn parse_line(line: &str) -> Input<'_> {
    let line = line.trim_end_matches(['\n', '\r']);
    match line.trim() {
        "" => Input::Skip,
        "/quit" | "/exit" => Input::Quit,
        _ => Input::Message(line),
    }
}

pub fn run(ctx: &Ctx, args: ChatArgs) -> Result<u8> {
    let interactive = std::io::stdin().is_terminal();
    let err_style = Style::detect_stderr();
    let id = session_for(ctx, &args)?;
    let hello = if interactive {
        format!(
            "session {id} · {}\n",
            err_style.paint("Ctrl-C cancels a reply · Ctrl-D or /quit leaves", Tone::Dim)
        )
    } else {
        format!("session {id}\n")
    };
    let _ = output::stderr(&hello);
    let ctrlc = interrupt::install(ctx.socket.clone(), interrupt::Mode::Idle { interactive })?;
    let mut view = RunView::new(cmd_session::run_mode(&args.show, false));
    let prompt = "> ";
    // Not locked for the whole chat: an approval prompt reads stdin too.
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        ctrlc.set(interrupt::Mode::Idle { interactive });
        if interactive {
            let _ = output::stderr(prompt);
        }
        line.clear();
        let n = stdin
            .read_line(&mut line)
            .context("cannot read from stdin")?;
        if n == 0 {
            if interactive {
                let _ = output::stderr("\n");
            }
            return Ok(exit::SUCCESS);
        }
        let text = match parse_line(&line) {
            Input::Skip => continue,
            Input::Quit => return Ok(exit::SUCCESS),
            Input::Message(text) => text.to_string(),
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
    )?;
    Ok(session.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        assert_eq!(parse_line("\n"), Input::Skip);
        assert_eq!(parse_line("   \r\n"), Input::Skip);
        assert_eq!(parse_line("/quit\n"), Input::Quit);
        assert_eq!(parse_line(" /exit "), Input::Quit);
        assert_eq!(parse_line("  hi there \n"), Input::Message("  hi there "));
    }
}
