//! Writing to the terminal: stdout failures propagate (a closed pipe ends
//! the program quietly), notes on stderr never fail a command.

use anyhow::{Context, Result};
use std::io::Write;

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

/// A `flytoctl: ...` line on stderr.
pub fn note(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "flytoctl: {message}");
}
