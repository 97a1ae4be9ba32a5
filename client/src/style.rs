//! Colors: only when the stream written to is a terminal and `NO_COLOR` is
//! unset; daemon-provided text made safe for that terminal. Also the
//! terminal's width, for one-line summaries.

use crate::sanitize;
use flyto_protocol::{PlanState, StepState};
use std::borrow::Cow;
use std::io::IsTerminal;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Plain,
    Bold,
    Green,
    Red,
    Yellow,
    Dim,
}

impl Tone {
    fn sgr(self) -> Option<&'static str> {
        match self {
            Tone::Plain => None,
            Tone::Bold => Some("1"),
            Tone::Green => Some("32"),
            Tone::Red => Some("31"),
            Tone::Yellow => Some("33"),
            Tone::Dim => Some("2"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    color: bool,
    /// The stream is a terminal: daemon-provided text is sanitised.
    tty: bool,
}

impl Style {
    pub fn detect() -> Style {
        Style::of(std::io::stdout().is_terminal())
    }

    /// For text written to stderr (session runs show tool calls there).
    pub fn detect_stderr() -> Style {
        Style::of(std::io::stderr().is_terminal())
    }

    fn of(tty: bool) -> Style {
        Style {
            color: tty && std::env::var_os("NO_COLOR").is_none(),
            tty,
        }
    }

    #[cfg(test)]
    pub fn plain() -> Style {
        Style {
            color: false,
            tty: false,
        }
    }

    #[cfg(test)]
    pub fn colored() -> Style {
        Style {
            color: true,
            tty: true,
        }
    }

    pub fn is_tty(self) -> bool {
        self.tty
    }

    /// Daemon-provided `text` as this stream may show it: without escape
    /// sequences on a terminal, unchanged for pipes.
    pub fn text(self, text: &str) -> Cow<'_, str> {
        sanitize::for_tty(text, self.tty)
    }

    pub fn paint(self, text: &str, tone: Tone) -> String {
        match tone.sgr() {
            Some(code) if self.color => format!("\x1b[{code}m{text}\x1b[0m"),
            _ => text.to_string(),
        }
    }
}

/// Columns of the terminal on stderr, else of stdout, else 100.
pub fn term_width() -> usize {
    const DEFAULT: usize = 100;
    for fd in [libc::STDERR_FILENO, libc::STDOUT_FILENO] {
        let mut size = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ only writes a `winsize` into the struct we pass,
        // which lives for the whole call; a non-terminal fd just fails.
        let ok = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &raw mut size) } == 0;
        if ok && size.ws_col > 0 {
            return usize::from(size.ws_col);
        }
    }
    DEFAULT
}

/// Tone of a session status (`idle`, `running`, `cancelling`, `error`).
pub fn session_tone(status: &str) -> Tone {
    match status {
        "running" | "cancelling" => Tone::Yellow,
        "error" => Tone::Red,
        _ => Tone::Plain,
    }
}

pub fn step_tone(state: StepState) -> Tone {
    match state {
        StepState::Pending => Tone::Plain,
        StepState::Running => Tone::Yellow,
        StepState::Succeeded => Tone::Green,
        StepState::Failed => Tone::Red,
        StepState::Cancelled | StepState::Skipped => Tone::Dim,
    }
}

pub fn plan_tone(state: PlanState) -> Tone {
    match state {
        PlanState::Pending => Tone::Plain,
        PlanState::Running => Tone::Yellow,
        PlanState::Succeeded => Tone::Green,
        PlanState::Failed => Tone::Red,
        PlanState::Cancelled => Tone::Dim,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paints_only_with_color() {
        assert_eq!(Style::plain().paint("ok", Tone::Green), "ok");
        let color = Style::colored();
        assert_eq!(color.paint("ok", Tone::Green), "\x1b[32mok\x1b[0m");
        assert_eq!(color.paint("ok", Tone::Plain), "ok");
    }
}
