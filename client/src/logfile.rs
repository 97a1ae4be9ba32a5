//! A step's log file (stdout and stderr as they came, bounded by the
//! daemon's `log_max_bytes`), read where the daemon says it is: the last
//! lines of a running step, the whole log, or the log as it grows.

use crate::output;
use anyhow::{Context, Result};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// How much of a log's end is read for the lines `plan_status` shows.
const TAIL_BYTES: u64 = 64 * 1024;

/// The last bytes of the log at `path` (whole lines only when cut), or
/// `None` when it cannot be read (another machine, expired).
pub fn tail(path: &str) -> Option<String> {
    let mut file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let start = len.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let text = match text.find('\n') {
        Some(i) if start > 0 => &text[i + 1..],
        _ => &text[..],
    };
    Some(text.to_string())
}

/// Size of the log at `path`, if it can be read.
pub fn len(path: &str) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.len())
}

/// The whole log as text (lossy UTF-8), at most `max` bytes of it.
pub fn read(path: &str, max: u64) -> Option<String> {
    let mut bytes = Vec::new();
    File::open(path)
        .ok()?
        .take(max)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

pub fn open(path: &str, what: &str) -> Result<File> {
    File::open(path).with_context(|| {
        format!("cannot open the log of {what} at {path} (is flytod on another machine, or has the plan expired?)")
    })
}

/// Copies what the log holds from where `reader` stands to stdout: the
/// bytes as they are for a pipe, sanitised text for a terminal.
pub struct Copier {
    tty: bool,
    /// The start of a UTF-8 sequence a read cut in two.
    pending: Vec<u8>,
    pos: u64,
}

impl Copier {
    pub fn new(tty: bool) -> Copier {
        Copier {
            tty,
            pending: Vec::new(),
            pos: 0,
        }
    }

    /// Copies everything up to the current end of `file`; returns whether
    /// there was anything. A log shorter than what was copied was started
    /// again (the step runs once more after an interruption): it is then
    /// copied from its start.
    pub fn copy_new(&mut self, file: &mut File, path: &Path) -> Result<bool> {
        let len = file
            .metadata()
            .with_context(|| format!("cannot read the log {}", path.display()))?
            .len();
        if len < self.pos {
            self.pos = 0;
            self.pending.clear();
            output::note("the log started again (the step was started again)");
        }
        file.seek(SeekFrom::Start(self.pos))
            .with_context(|| format!("cannot read the log {}", path.display()))?;
        let mut buf = Vec::new();
        let n = file
            .take(len - self.pos)
            .read_to_end(&mut buf)
            .with_context(|| format!("cannot read the log {}", path.display()))?;
        self.pos += n as u64;
        if n == 0 {
            return Ok(false);
        }
        self.write(&buf)?;
        Ok(true)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if !self.tty {
            let mut out = std::io::stdout().lock();
            return out
                .write_all(bytes)
                .and_then(|()| out.flush())
                .context("cannot write to stdout");
        }
        self.pending.extend_from_slice(bytes);
        let keep = incomplete_suffix(&self.pending);
        let rest = self.pending.split_off(self.pending.len() - keep);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        output::stdout(&crate::sanitize::sanitize(&text))
    }
}

/// Length of a UTF-8 sequence cut short at the end of `bytes` (0 when
/// there is none).
fn incomplete_suffix(bytes: &[u8]) -> usize {
    for back in 1..=3.min(bytes.len()) {
        let b = bytes[bytes.len() - back];
        if b & 0xC0 != 0x80 {
            let need = match b {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                0xF0..=0xF7 => 4,
                _ => 1,
            };
            return if need > back { back } else { 0 };
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_utf8_sequences_wait_for_their_end() {
        assert_eq!(incomplete_suffix(b"abc"), 0);
        assert_eq!(incomplete_suffix("é".as_bytes()), 0);
        assert_eq!(incomplete_suffix(&"é".as_bytes()[..1]), 1);
        assert_eq!(incomplete_suffix(&"€".as_bytes()[..2]), 2);
        assert_eq!(incomplete_suffix(&"a😀".as_bytes()[..4]), 3);
    }

    #[test]
    fn tails_keep_whole_lines() {
        let dir = std::env::temp_dir().join(format!("flytoctl-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.log");
        let long: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, &long).unwrap();
        let tail = tail(path.to_str().unwrap()).unwrap();
        assert!(tail.starts_with("line "), "{}", &tail[..20]);
        assert!(tail.ends_with("line 19999\n"));
        assert!(tail.len() as u64 <= TAIL_BYTES);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
