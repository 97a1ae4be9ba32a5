//! Colors: only when stdout is a terminal and `NO_COLOR` is unset.

use flyto_protocol::{PlanState, StepState};
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
}

impl Style {
    pub fn detect() -> Style {
        Style {
            color: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    #[cfg(test)]
    pub fn plain() -> Style {
        Style { color: false }
    }

    pub fn paint(self, text: &str, tone: Tone) -> String {
        match tone.sgr() {
            Some(code) if self.color => format!("\x1b[{code}m{text}\x1b[0m"),
            _ => text.to_string(),
        }
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
        let color = Style { color: true };
        assert_eq!(color.paint("ok", Tone::Green), "\x1b[32mok\x1b[0m");
        assert_eq!(color.paint("ok", Tone::Plain), "ok");
    }
}
