//! Writing to the terminal: stdout failures propagate (a closed pipe ends
//! the program quietly), notes on stderr never fail a command.

use anyhow::{Context, Result};
use std::io::{IsTerminal, Write};

pub fn stdout(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("cannot write to stdout")
}

/// Raw bytes for stderr (a step's stderr tail).
pub fn stderr(text: &str) -> Result<()> {
    let mut err = std::io::stderr().lock();
    err.write_all(text.as_bytes())
        .and_then(|()| err.flush())
        .context("cannot write to stderr")
}

/// A `flytoctl: ...` line on stderr; messages can quote daemon-provided
/// text, so a terminal gets it sanitised.
pub fn note(message: &str) {
    let message = crate::sanitize::for_tty(message, std::io::stderr().is_terminal());
    let _ = writeln!(std::io::stderr().lock(), "flytoctl: {message}");
}
