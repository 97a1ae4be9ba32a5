//! Runs one shell command by the process rules: filtered environment, own
//! session and process group, stdin from /dev/null, the user's umask, a
//! timeout, output captured with bounds, and the whole group killed on
//! timeout, cancel or shutdown. Every spawn is recorded in the spawn table
//! ([`spawns`]), which the daemon consults to tell who is connecting to it
//! and which of its children are orphans it must reap.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};

/// The open-files soft limit flytod started with; children get it back.
static CHILD_NOFILE: std::sync::OnceLock<libc::rlimit> = std::sync::OnceLock::new();

/// Raises this process's open-files soft limit to the hard limit (a daemon
/// holding many sessions and sockets needs more than the usual 1024), while
/// children keep the original soft limit, as programs using select(2)
/// expect.
pub fn raise_open_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return;
        }
        let _ = CHILD_NOFILE.set(lim);
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &raised);
        }
    }
}

/// The umask flytod was started with; children get it back.
static CHILD_UMASK: std::sync::OnceLock<libc::mode_t> = std::sync::OnceLock::new();

/// Makes every file flytod creates from now on private (umask 077: files
/// 0600, directories 0700), whatever umask it was started with, while the
/// processes it starts keep that umask, so a step's own files are not
/// forced private. Call once at start, before any thread is spawned.
pub fn make_files_private() {
    // SAFETY: umask only changes this process's file-creation mask.
    let old = unsafe { libc::umask(0o077) };
    let _ = CHILD_UMASK.set(old);
}

/// One process flytod started: the leader of its own session and process
/// group (pid = pgid = sid), recorded while its leader has not been reaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spawn {
    /// The leader's start time (clock ticks after boot), so a reused pid
    /// never matches.
    pub start_time: u64,
    /// Started for an agent's tool or a nested plan's step (depth >= 1):
    /// it and its descendants may reach flytod only through their scoped
    /// plan socket.
    pub confined: bool,
    /// The `FLYTO_PLAN_SOCK` flytod gave it: the one scoped socket that
    /// serves it and its descendants (another chain's, or an ancestor's
    /// that submits less deep, must not).
    pub plan_sock: Option<std::sync::Arc<str>>,
}

/// Leader pid -> spawn.
pub type SpawnTable = std::collections::BTreeMap<i32, Spawn>;

static SPAWNS: std::sync::Mutex<SpawnTable> = std::sync::Mutex::new(SpawnTable::new());

/// The spawn table, locked. While it is held nothing is spawned, so a
/// child of flytod missing from it is not one tokio waits for.
pub fn spawns() -> std::sync::MutexGuard<'static, SpawnTable> {
    // The table stays consistent at every step: a panic cannot leave it
    // half-written, so a poisoned lock is still usable.
    SPAWNS.lock().unwrap_or_else(|p| p.into_inner())
}

/// `spawns[pid]`, if that pid is still the process recorded (alive or a
/// zombie not yet reaped).
pub fn live_spawn(spawns: &SpawnTable, pid: i32) -> Option<Spawn> {
    let spawn = spawns.get(&pid)?.clone();
    (proc_stat(pid)?.start_time == spawn.start_time).then_some(spawn)
}

/// Drops a spawn's entry once its leader is reaped (or its run dropped).
struct SpawnEntry {
    pid: i32,
    start_time: u64,
}

impl Drop for SpawnEntry {
    fn drop(&mut self) {
        let mut spawns = spawns();
        if spawns
            .get(&self.pid)
            .is_some_and(|s| s.start_time == self.start_time)
        {
            spawns.remove(&self.pid);
        }
    }
}

/// What /proc/<pid>/stat says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
    pub start_time: u64,
}

pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is parenthesised and may hold anything, ')' too.
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        session: f.get(3)?.parse().ok()?,
        start_time: f.get(19)?.parse().ok()?,
    })
}

/// Every pid in /proc.
fn all_pids() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
}

/// This process's children: from each thread's `children` list (an
/// adopted orphan may be any thread's child), else from all of /proc.
fn own_children() -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    let mut listed = false;
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            listed = true;
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    if !listed {
        out = all_pids()
            .filter(|p| proc_stat(*p).is_some_and(|st| st.ppid == me))
            .collect();
    }
    out
}

/// Reaps flytod's children that it did not spawn: as a child subreaper it
/// adopts what its steps and tools left behind (double forks, `setsid`)
/// when their parents exit. Only exited children missing from the spawn
/// table are waited for, by pid and with the table locked, so no exit
/// status tokio waits for is taken (an entry leaves the table only once
/// tokio has reaped its leader). Answers how many were reaped.
pub fn reap_orphans() -> usize {
    let spawns = spawns();
    let mut reaped = 0;
    for pid in own_children() {
        if spawns.contains_key(&pid) || proc_stat(pid).is_none_or(|st| st.state != 'Z') {
            continue;
        }
        let mut status = 0;
        // SAFETY: waitpid on one specific child with a pointer to a local.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            reaped += 1;
        }
    }
    reaped
}

/// Exit code reported for a command killed by its timeout (as `timeout(1)`).
pub const TIMEOUT_EXIT: i32 = 124;

#[derive(Debug, Clone)]
pub struct CommandSpec {
    pub command: String,
    pub workdir: PathBuf,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// Time between SIGTERM and SIGKILL to the group.
    pub kill_grace: Duration,
    /// Combined stdout+stderr goes here, up to `log_max` bytes.
    pub log_path: Option<PathBuf>,
    pub log_max: u64,
    /// Bytes of each stream kept for the step record.
    pub tail_max: usize,
    /// An agent's tool or a nested plan's step (see [`Spawn::confined`]).
    pub confined: bool,
    /// The kernel confinement of the whole process tree; `None`: none.
    pub sandbox: Option<super::sandbox::SandboxSpec>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    User,
    Shutdown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    TimedOut,
    Cancelled(CancelReason),
    SpawnFailed(String),
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub exit: Exit,
    pub stdout_tail: String,
    pub stderr_tail: String,
    pub log_truncated: bool,
}

/// Runs `spec` to the end. `cancel` fires (or is dropped) to stop it;
/// `spawned` learns the process group id as soon as it exists.
pub async fn run(
    spec: CommandSpec,
    cancel: oneshot::Receiver<CancelReason>,
    spawned: impl FnOnce(i32),
) -> Outcome {
    let shell = if std::path::Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    let plan_sock = spec
        .env
        .iter()
        .find(|(k, _)| k == "FLYTO_PLAN_SOCK")
        .map(|(_, v)| std::path::PathBuf::from(v));
    let prepared = match spec
        .sandbox
        .as_ref()
        .map(|s| super::sandbox::prepare(s, plan_sock.as_deref()))
    {
        Some(Ok(p)) => p.map(std::sync::Arc::new),
        Some(Err(e)) => {
            return Outcome {
                exit: Exit::SpawnFailed(e.to_string()),
                stdout_tail: String::new(),
                stderr_tail: String::new(),
                log_truncated: false,
            };
        }
        None => None,
    };
    let tmpdir = spec
        .sandbox
        .as_ref()
        .filter(|_| prepared.is_some())
        .and_then(|s| s.tmpdir.clone());
    let mut cmd = tokio::process::Command::new(shell);
    cmd.arg("-c")
        .arg(&spec.command)
        .current_dir(&spec.workdir)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(tmp) = &tmpdir {
        cmd.env("TMPDIR", tmp);
    }
    confine_child(&mut cmd, prepared);
    let (spawned_child, entry) = spawn_recorded(
        &mut cmd,
        Spawn {
            start_time: 0,
            confined: spec.confined,
            plan_sock: spec
                .env
                .iter()
                .find(|(k, _)| k == "FLYTO_PLAN_SOCK")
                .map(|(_, v)| v.as_str().into()),
        },
    );
    let mut child = match spawned_child {
        Ok(c) => c,
        Err(e) => {
            return Outcome {
                exit: Exit::SpawnFailed(format!(
                    "cannot start {shell} in {}: {e}",
                    spec.workdir.display()
                )),
                stdout_tail: String::new(),
                stderr_tail: String::new(),
                log_truncated: false,
            };
        }
    };
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    spawned(pgid);

    let (chunks_tx, chunks_rx) = mpsc::channel::<(Stream, Vec<u8>)>(16);
    let (ended_tx, ended_rx) = watch::channel(false);
    if let Some(out) = child.stdout.take() {
        tokio::spawn(pump(out, Stream::Out, chunks_tx.clone(), ended_rx.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(pump(err, Stream::Err, chunks_tx.clone(), ended_rx));
    }
    drop(chunks_tx);
    let collector = tokio::spawn(collect(chunks_rx, spec.clone()));

    let exit = wait(&mut child, pgid, &spec, cancel).await;
    // The leader is reaped: its pid may be reused from now on.
    drop(entry);
    // Whatever the leader did, nothing of its group outlives the step.
    kill_group(pgid, libc::SIGKILL);
    // A process that left the group (`setsid cmd &`) may hold the pipes
    // open for as long as it lives: the step ends with the shell, so the
    // pumps take what is in the pipes now and stop.
    let _ = ended_tx.send(true);
    let captured = match tokio::time::timeout(Duration::from_secs(5), collector).await {
        Ok(Ok(c)) => c,
        _ => Captured::default(),
    };
    Outcome {
        exit,
        stdout_tail: lossy(&captured.out_tail),
        stderr_tail: lossy(&captured.err_tail),
        log_truncated: captured.log_truncated,
    }
}

/// Makes `cmd`'s child the leader of its own session (its group is what
/// gets killed), dead with flytod, with the children's file limit and
/// umask, and confined by `prepared` (the sandbox) when given.
pub fn confine_child(
    cmd: &mut tokio::process::Command,
    prepared: Option<std::sync::Arc<super::sandbox::Prepared>>,
) {
    // SAFETY: setsid, prctl, getppid, setrlimit and umask are
    // async-signal-safe; the closure only calls them, and the sandbox's
    // raw syscalls on what was built before the fork.
    unsafe {
        let nofile = CHILD_NOFILE.get().copied();
        let umask = CHILD_UMASK.get().copied();
        let parent = std::process::id() as libc::pid_t;
        cmd.pre_exec(move || {
            // Its own session (and so process group): the group is what
            // gets killed, and the session id stays with descendants that
            // leave the group, so flytod can still tell whose they are.
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // If flytod dies without cleaning up, its children die too.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // flytod may have died between fork and prctl; then nobody
            // would ever kill this child.
            if libc::getppid() != parent {
                return Err(std::io::Error::other(
                    "flytod exited while starting the command",
                ));
            }
            if let Some(lim) = nofile {
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
            if let Some(mask) = umask {
                libc::umask(mask);
            }
            // Last: Landlock forbids the mounts it needs before it.
            if let Some(sandbox) = &prepared {
                sandbox.apply()?;
            }
            Ok(())
        });
    }
}

/// A spawn-table entry, dropped once the leader is reaped.
pub struct SpawnGuard {
    _entry: SpawnEntry,
    /// Its session is killed if flytod dies while it runs.
    _record: super::leftovers::Record,
}

/// Spawns `cmd` and records it in the spawn table under the table's lock,
/// so neither the peer check nor the orphan reaper sees the child before
/// its entry. `spawn.start_time` is filled in here.
pub fn spawn_recorded(
    cmd: &mut tokio::process::Command,
    spawn: Spawn,
) -> (std::io::Result<tokio::process::Child>, Option<SpawnGuard>) {
    let mut table = spawns();
    let spawned_child = cmd.spawn();
    let entry = spawned_child
        .as_ref()
        .ok()
        .and_then(|c| c.id())
        .and_then(|pid| {
            let pid = pid as i32;
            let start_time = proc_stat(pid)?.start_time;
            table.insert(
                pid,
                Spawn {
                    start_time,
                    ..spawn
                },
            );
            Some(SpawnGuard {
                _entry: SpawnEntry { pid, start_time },
                _record: super::leftovers::Record::new(pid, start_time),
            })
        });
    (spawned_child, entry)
}

async fn wait(
    child: &mut tokio::process::Child,
    pgid: i32,
    spec: &CommandSpec,
    mut cancel: oneshot::Receiver<CancelReason>,
) -> Exit {
    let stop = tokio::select! {
        status = child.wait() => return status_exit(status),
        _ = tokio::time::sleep(spec.timeout) => Exit::TimedOut,
        reason = &mut cancel => Exit::Cancelled(reason.unwrap_or(CancelReason::Shutdown)),
    };
    kill_group(pgid, libc::SIGTERM);
    if tokio::time::timeout(spec.kill_grace, child.wait())
        .await
        .is_err()
    {
        kill_group(pgid, libc::SIGKILL);
        let _ = child.wait().await;
    }
    stop
}

fn status_exit(status: std::io::Result<std::process::ExitStatus>) -> Exit {
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(sig)) => Exit::Signal(sig),
            (None, None) => Exit::Code(-1),
        },
        Err(e) => Exit::SpawnFailed(format!("cannot wait for the command: {e}")),
    }
}

pub fn kill_group(pgid: i32, signal: i32) {
    if pgid > 0 {
        // SAFETY: kill(2) with a negative pid signals a process group; no
        // memory is involved. ESRCH (already gone) is fine.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

/// After a crash: kills the process groups left over from an interrupted
/// step. A process is a leftover when its environment carries
/// `FLYTO_STEP=<marker>` and either it is in the recorded group `pgid`, or
/// it carries a `FLYTO_PLAN_SOCK` in `socket_dir`: the group may not have been
/// recorded before the crash, and no other live daemon hands out that socket.
/// The marker check means a reused pid is never hit.
pub fn kill_orphaned_group(pgid: Option<i32>, marker: &str, socket_dir: &str) {
    kill_leftovers(pgid, &format!("FLYTO_STEP={marker}"), socket_dir);
}

/// After a crash: kills what the tools of session `session` left running
/// (found by `FLYTO_SESSION_ID` and this daemon's socket directory).
pub fn kill_session_leftovers(session: &str, socket_dir: &str) {
    kill_leftovers(None, &format!("FLYTO_SESSION_ID={session}"), socket_dir);
}

fn kill_leftovers(pgid: Option<i32>, want: &str, socket_dir: &str) {
    let want = want.to_string();
    // Every socket this daemon hands out lives in its socket directory.
    let sock = format!("FLYTO_PLAN_SOCK={}/", socket_dir.trim_end_matches('/'));
    // SAFETY: getpgrp has no preconditions.
    let own_group = unsafe { libc::getpgrp() };
    for pid in all_pids() {
        let Some(pgrp) = proc_stat(pid).map(|st| st.pgrp) else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let has = |var: &str| environ.split(|b| *b == 0).any(|kv| kv == var.as_bytes());
        let has_prefix = |p: &str| {
            environ
                .split(|b| *b == 0)
                .any(|kv| kv.starts_with(p.as_bytes()))
        };
        if pgrp != own_group && has(&want) && (Some(pgrp) == pgid || has_prefix(&sock)) {
            tracing::warn!(
                pgid = pgrp,
                leftover = %want,
                "killing processes left over from an interrupted step"
            );
            kill_group(pgrp, libc::SIGKILL);
        }
    }
}

#[derive(Clone, Copy)]
enum Stream {
    Out,
    Err,
}

/// Forwards what `r` yields until its end of file, or until `ended` says
/// the step is over: then it drains what is already in the pipe (all the
/// step's processes wrote before they died) and stops, without waiting for
/// a writer that outlives the step.
async fn pump<R: AsyncRead + AsRawFd + Unpin>(
    mut r: R,
    which: Stream,
    tx: mpsc::Sender<(Stream, Vec<u8>)>,
    mut ended: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            biased;
            read = r.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.send((which, buf[..n].to_vec())).await.is_err() {
                        return;
                    }
                }
            },
            _ = ended.changed() => break,
        }
    }
    // tokio keeps child pipes non-blocking, so this read never waits; it
    // does not depend on the reactor having seen the data yet.
    let fd = r.as_raw_fd();
    loop {
        // SAFETY: `fd` is the open pipe `r` owns for this whole loop, and
        // `buf` is a valid writable buffer of `buf.len()` bytes.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            return;
        }
        if tx.send((which, buf[..n as usize].to_vec())).await.is_err() {
            return;
        }
    }
}

#[derive(Default)]
struct Captured {
    out_tail: VecDeque<u8>,
    err_tail: VecDeque<u8>,
    log_truncated: bool,
}

async fn collect(mut rx: mpsc::Receiver<(Stream, Vec<u8>)>, spec: CommandSpec) -> Captured {
    let mut cap = Captured::default();
    let mut log = match &spec.log_path {
        Some(p) => tokio::fs::File::create(p).await.ok(),
        None => None,
    };
    let mut logged: u64 = 0;
    while let Some((which, chunk)) = rx.recv().await {
        let tail = match which {
            Stream::Out => &mut cap.out_tail,
            Stream::Err => &mut cap.err_tail,
        };
        push_tail(tail, &chunk, spec.tail_max);
        if let Some(f) = log.as_mut() {
            let room = spec.log_max.saturating_sub(logged) as usize;
            let take = room.min(chunk.len());
            if take > 0 && f.write_all(&chunk[..take]).await.is_ok() {
                logged += take as u64;
            }
            if take < chunk.len() {
                cap.log_truncated = true;
                let note = format!(
                    "\n[flyto: log truncated at {} bytes; the output tail is kept in the step record]\n",
                    spec.log_max
                );
                let _ = f.write_all(note.as_bytes()).await;
                let _ = f.flush().await;
                log = None;
            }
        }
    }
    if let Some(mut f) = log {
        let _ = f.flush().await;
    }
    cap
}

fn push_tail(tail: &mut VecDeque<u8>, chunk: &[u8], max: usize) {
    let chunk = &chunk[chunk.len().saturating_sub(max)..];
    tail.extend(chunk.iter().copied());
    let excess = tail.len().saturating_sub(max);
    tail.drain(..excess);
}

fn lossy(tail: &VecDeque<u8>) -> String {
    let bytes: Vec<u8> = tail.iter().copied().collect();
    // The cut may land inside a UTF-8 sequence; skip its continuation bytes.
    let start = bytes
        .iter()
        .position(|b| (b & 0xC0) != 0x80)
        .unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cmd: &str) -> CommandSpec {
        CommandSpec {
            command: cmd.into(),
            workdir: std::env::temp_dir(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            timeout: Duration::from_secs(30),
            kill_grace: Duration::from_millis(200),
            log_path: None,
            log_max: 1024,
            tail_max: 8,
            confined: false,
            sandbox: None,
        }
    }

    #[tokio::test]
    async fn exit_code_and_tails() {
        let (_tx, rx) = oneshot::channel();
        let out = run(spec("echo 0123456789; echo oops >&2; exit 3"), rx, |_| {}).await;
        assert_eq!(out.exit, Exit::Code(3));
        assert_eq!(out.stdout_tail, "3456789\n");
        assert_eq!(out.stderr_tail, "oops\n");
    }

    #[tokio::test]
    async fn timeout_kills_a_command_that_ignores_sigterm() {
        let (_tx, rx) = oneshot::channel();
        let mut s = spec("trap '' TERM; sleep 30");
        s.timeout = Duration::from_millis(100);
        let out = run(s, rx, |_| {}).await;
        assert_eq!(out.exit, Exit::TimedOut);
    }

    #[tokio::test]
    async fn a_detached_child_holding_stdout_does_not_hold_the_step() {
        let (_tx, rx) = oneshot::channel();
        // Longer than the collector's 5 s bound, which would leave the tail
        // empty if the pumps waited for the end of file.
        let mut s = spec("setsid sleep 8 & echo started");
        s.tail_max = 64;
        let out = run(s, rx, |_| {}).await;
        assert_eq!(out.exit, Exit::Code(0));
        assert_eq!(out.stdout_tail, "started\n");
    }

    #[test]
    fn tail_keeps_the_last_bytes_and_valid_utf8() {
        let mut t = VecDeque::new();
        push_tail(&mut t, "aé".as_bytes(), 2);
        assert_eq!(lossy(&t), "é");
        push_tail(&mut t, b"xyz", 2);
        assert_eq!(lossy(&t), "yz");
    }
}
