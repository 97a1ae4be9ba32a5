//! Single instance: an exclusive flock on `<state>/flytod.lock`, held for the
//! life of the process, with the holder's pid written inside.

use anyhow::{Context, bail};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

pub struct InstanceLock {
    _file: File,
}

pub fn acquire(state_dir: &Path) -> anyhow::Result<InstanceLock> {
    let path = state_dir.join("flytod.lock");
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot open lock file {}", path.display()))?;
    // A step process that a killed flytod forked just before it died holds
    // a copy of the locked fd until it execs (a few ms on a busy machine):
    // while the pid in the file is dead, wait a little for that to pass.
    let patience = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let locked = loop {
        // SAFETY: flock on an fd we own; no memory is involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        let result = if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        };
        let busy = matches!(&result, Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK));
        if !busy || std::time::Instant::now() >= patience || holder_alive(&mut file) {
            break result;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    if let Err(err) = locked {
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut holder = String::new();
            let _ = file.rewind();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if holder.is_empty() {
                "another process".to_string()
            } else {
                format!("pid {holder}")
            };
            bail!(
                "another flytod is already running ({who} holds {}): stop it first (`systemctl --user stop flytod` or `kill {}`), or give this one its own FLYTO_HOME",
                path.display(),
                if holder.is_empty() { "<pid>" } else { holder }
            );
        }
        return Err(err).with_context(|| format!("cannot lock {}", path.display()));
    }
    file.set_len(0)?;
    file.rewind()?;
    writeln!(file, "{}", std::process::id())?;
    file.flush()?;
    Ok(InstanceLock { _file: file })
}

/// Whether the pid written in the lock file is a live process (or unknown).
fn holder_alive(file: &mut File) -> bool {
    let mut text = String::new();
    if file.rewind().is_err() || file.read_to_string(&mut text).is_err() {
        return true;
    }
    let Ok(pid) = text.trim().parse::<i32>() else {
        return true;
    };
    // SAFETY: kill with signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}
