//! Nothing a command started outlives the flytod that started it.
//!
//! Every command flytod spawns leads a session of its own (see
//! `process::confine_child`); PR_SET_PDEATHSIG takes only that leader
//! along when flytod is SIGKILLed, so its children (`sleep 1000 &`, a
//! pipeline, a process that cleared its environment) would run on,
//! reparented to init. So each spawn is recorded as a file
//! `<runs>/<flytod pid>.<start>/<leader pid>.<start>` while it runs, and
//! whoever finds a record of a dead flytod kills that session:
//!
//! - the guard, a small `flytod guard-runs` process that waits for its
//!   flytod's end (the end of file on a pipe only flytod holds), at once;
//! - the next flytod on the same state directory, at start, before it
//!   runs (or reruns) anything, in case the guard was killed too.
//!
//! A session is found by scanning /proc for its id (the leader's pid),
//! which its members keep whatever they do to their group or environment.
//! Linux does not hand out a pid while a live process still uses it as a
//! session id, so members started no earlier than the recorded leader are
//! that session's, even when the leader is gone. A process that started a
//! session of its own (`setsid`) left deliberately; steps' such processes
//! are still killed by their environment marker (`process::kill_orphaned_group`).
//!
//! The records are plain files, not synced: a power cut ends the
//! processes too.

use super::process::proc_stat;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// This flytod's record folder, once [`watch`] made it.
static RECORDS: OnceLock<PathBuf> = OnceLock::new();

/// The write end of the guard's pipe: held (never written) for as long
/// as flytod lives. Opened close-on-exec, so no child holds it.
static GUARD_PIPE: OnceLock<std::process::ChildStdin> = OnceLock::new();

/// How long to wait for a killed session's processes to be gone.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// `<pid>.<start time>`: a process, unique across pid reuse.
fn name(pid: i32, start_time: u64) -> String {
    format!("{pid}.{start_time}")
}

fn parse_name(name: &str) -> Option<(i32, u64)> {
    let (pid, start) = name.split_once('.')?;
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// At start, with the state directory's lock held (no other flytod uses
/// `runs`): kills what earlier flytods on this state directory left
/// running and waits until it is gone, then records this flytod's spawns
/// under `runs` and starts the guard (`program guard-runs <folder>`;
/// `program` is normally `/proc/self/exe`). A guard that cannot start is
/// a warning: the next start still cleans up.
pub fn watch(runs: &Path, program: &Path) -> std::io::Result<()> {
    let me = std::process::id() as i32;
    let mine = proc_stat(me)
        .map(|st| name(me, st.start_time))
        .ok_or_else(|| std::io::Error::other("cannot read /proc/self/stat"))?;
    std::fs::create_dir_all(runs)?;
    for entry in std::fs::read_dir(runs)?.flatten() {
        if entry.file_name().to_str() != Some(mine.as_str()) {
            kill_recorded(&entry.path());
        }
    }
    let folder = runs.join(&mine);
    std::fs::create_dir_all(&folder)?;
    let _ = RECORDS.set(folder.clone());
    match start_guard(program, &folder) {
        Ok(stdin) => {
            let _ = GUARD_PIPE.set(stdin);
        }
        Err(e) => tracing::warn!(
            program = %program.display(),
            error = %e,
            "cannot start the guard that kills this flytod's commands if it is killed; they are killed at its next start instead"
        ),
    }
    Ok(())
}

fn start_guard(program: &Path, folder: &Path) -> std::io::Result<std::process::ChildStdin> {
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new(program)
        .arg("guard-runs")
        .arg(folder)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        // It talks to no service manager and serves no socket.
        .env_remove("NOTIFY_SOCKET")
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        // Out of the terminal's process group: a Ctrl-C meant for flytod
        // must not take the guard first.
        .process_group(0)
        .current_dir("/")
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("the guard has no stdin"))
}

/// The guard's whole life: wait until flytod (the only writer of stdin)
/// is gone, then kill the sessions it still had recorded in `folder`.
pub fn guard_main(folder: &Path) {
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin();
    // Nothing is ever written: any end (EOF, an error) is flytod's.
    while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    kill_recorded(folder);
}

/// Records a spawned leader while it runs; the record goes when dropped.
pub struct Record(Option<PathBuf>);

impl Record {
    /// Records leader `pid` (started at `start_time`), when [`watch`] ran.
    pub fn new(pid: i32, start_time: u64) -> Record {
        Record(RECORDS.get().and_then(|folder| {
            let path = folder.join(name(pid, start_time));
            match std::fs::File::create(&path) {
                Ok(_) => Some(path),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot record a command; if flytod is killed, its processes may outlive it");
                    None
                }
            }
        }))
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Kills every session recorded in `folder` (a dead flytod's), waits
/// until each is gone, and removes the folder.
fn kill_recorded(folder: &Path) {
    let leaders: Vec<(i32, u64)> = std::fs::read_dir(folder)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| parse_name(e.file_name().to_str()?))
        .collect();
    for (sid, start_time) in leaders {
        let left = kill_session(sid, start_time, KILL_WAIT);
        if left.is_empty() {
            tracing::info!(
                session = sid,
                "killed what a command of a flytod that was killed left running"
            );
        } else {
            tracing::warn!(
                session = sid,
                pids = ?left,
                "processes left over by a killed flytod did not die within {}s (stuck in the kernel?); check them with `ps -s {sid}`",
                KILL_WAIT.as_secs()
            );
        }
    }
    if let Err(e) = std::fs::remove_dir_all(folder)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(folder = %folder.display(), error = %e, "cannot remove a killed flytod's records; remove the folder by hand");
    }
}

/// Live (not zombie) processes of session `sid` started no earlier than
/// its leader (`start_time`). None when `sid` is now another process's
/// pid: the session ended before its number was reused.
fn session_members(sid: i32, start_time: u64) -> Vec<i32> {
    if proc_stat(sid).is_some_and(|st| st.start_time != start_time) {
        return Vec::new();
    }
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            proc_stat(pid).is_some_and(|st| {
                st.session == sid && st.start_time >= start_time && !matches!(st.state, 'Z' | 'X')
            })
        })
        .collect()
}

/// SIGKILLs session `sid`'s processes until none is left (they may fork
/// meanwhile) or `limit` passed; answers those still there.
pub fn kill_session(sid: i32, start_time: u64, limit: Duration) -> Vec<i32> {
    if sid <= 1 {
        return Vec::new();
    }
    let deadline = Instant::now() + limit;
    loop {
        let members = session_members(sid, start_time);
        if members.is_empty() || Instant::now() >= deadline {
            return members;
        }
        for pid in members {
            // SAFETY: kill(2) on one pid; no memory is involved.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A grandchild that cleared its environment is still found by its
    /// session id.
    #[test]
    fn a_session_is_killed_whatever_its_members_did() {
        let tag = format!("flyto-leftover-test-{}", std::process::id());
        let mut leader = std::process::Command::new("setsid")
            .args([
                "sh",
                "-c",
                &format!("env -i sh -c 'sleep 300 & wait' {tag} & echo $$; wait"),
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = String::new();
        let mut stdout = leader.stdout.take().unwrap();
        let mut byte = [0u8; 1];
        while stdout.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
            out.push(byte[0] as char);
        }
        let sid: i32 = out.trim().parse().unwrap();
        let start = proc_stat(sid).unwrap().start_time;
        // The grandchild and its `sleep` exist.
        let deadline = Instant::now() + Duration::from_secs(10);
        while session_members(sid, start).len() < 3 {
            assert!(Instant::now() < deadline, "the session never grew");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(kill_session(sid, start, Duration::from_secs(10)).is_empty());
        assert!(session_members(sid, start).is_empty());
        let _ = leader.wait();
    }

    #[test]
    fn a_reused_leader_pid_is_not_its_session() {
        let me = std::process::id() as i32;
        let start = proc_stat(me).unwrap().start_time;
        // Our pid with an earlier start time: a session that ended.
        assert!(session_members(me, start.saturating_sub(1)).is_empty());
        assert_eq!(parse_name(&name(12, 34)), Some((12, 34)));
    }
}
