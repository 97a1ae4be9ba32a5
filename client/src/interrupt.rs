//! Ctrl-C while a session run streams: the first one asks the daemon to
//! cancel the run (over a second connection, while the first keeps reading
//! until the run's `Cancelled` event), a second one exits at once.
//!
//! The SIGINT handler only writes a byte to a self-pipe (async-signal-safe);
//! a thread reading the pipe decides what the interrupt means from the
//! current [`Mode`]. The handler is installed with `SA_RESTART`, so the main
//! thread's blocking reads (socket, stdin) carry on undisturbed.

use crate::conn;
use crate::exit;
use crate::output;
use crate::session_render;
use anyhow::{Context, Result};
use flyto_protocol::{Request, Response};
use std::fs::File;
use std::io::Read;
use std::os::fd::FromRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// What Ctrl-C means right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Between runs (the chat prompt). `interactive`: say how to leave;
    /// otherwise exit.
    Idle { interactive: bool },
    /// A run of session `id` streams.
    Run { id: String, cancel_sent: bool },
    /// Following a session: Ctrl-C ends it successfully.
    Attach,
    /// Waiting for plan `id`: Ctrl-C stops waiting, not the plan.
    Plan { id: String },
    /// At the y/N prompt of approval `approval` of session `id`: Ctrl-C
    /// answers no, so the run goes on without the tool and no request is
    /// left waiting for a client that is gone.
    Approval { id: String, approval: u64 },
}

/// What to do about one Ctrl-C.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Hint,
    Cancel(String),
    Exit(u8),
    /// Say how to cancel plan `.0`, then die of SIGINT as before.
    Detach(String),
    /// Deny approval `.1` of session `.0`, then exit.
    Deny(String, u64),
}

/// Decides, and moves `mode` on.
pub fn on_interrupt(mode: &mut Mode) -> Action {
    match mode {
        Mode::Idle { interactive: true } => Action::Hint,
        Mode::Idle { interactive: false } => Action::Exit(exit::INTERRUPTED),
        Mode::Run {
            cancel_sent: true, ..
        } => Action::Exit(exit::INTERRUPTED),
        Mode::Run { id, cancel_sent } => {
            *cancel_sent = true;
            Action::Cancel(id.clone())
        }
        Mode::Attach => Action::Exit(exit::SUCCESS),
        Mode::Plan { id } => Action::Detach(id.clone()),
        Mode::Approval { id, approval } => Action::Deny(id.clone(), *approval),
    }
}

/// The installed handler; set its mode as the command goes.
#[derive(Clone)]
pub struct CtrlC {
    mode: Arc<Mutex<Mode>>,
}

impl CtrlC {
    pub fn set(&self, mode: Mode) {
        *self.lock() = mode;
    }

    /// Sets `mode`, answering the one it replaces.
    pub fn replace(&self, mode: Mode) -> Mode {
        std::mem::replace(&mut *self.lock(), mode)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Mode> {
        self.mode
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Held by the Ctrl-C thread while it acts on one Ctrl-C (the cancel
/// request and its note), so the main thread can wait for it to finish
/// before the process exits: see [`settle`].
static BUSY: Mutex<()> = Mutex::new(());

/// Waits until the Ctrl-C thread has finished what it is doing, so its
/// note ("cancelled s1") is not cut off by the process exiting. A run
/// ends only after the daemon handled the cancel that thread sent, so by
/// then the thread is inside its work, or done.
pub fn settle() {
    drop(
        BUSY.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
}

/// Write end of the self-pipe, for the signal handler.
static PIPE: AtomicI32 = AtomicI32::new(-1);
static INSTALLED: OnceLock<CtrlC> = OnceLock::new();

/// The handler, when this process installed one.
pub fn installed() -> Option<CtrlC> {
    INSTALLED.get().cloned()
}

/// Installs the handler (once per process) in `mode`; `socket` is where
/// cancel requests go.
pub fn install(socket: PathBuf, mode: Mode) -> Result<CtrlC> {
    if let Some(ctrlc) = INSTALLED.get() {
        ctrlc.set(mode);
        return Ok(ctrlc.clone());
    }
    let reader = self_pipe().context("cannot set up the Ctrl-C handler")?;
    let ctrlc = CtrlC {
        mode: Arc::new(Mutex::new(mode)),
    };
    let watcher = ctrlc.clone();
    std::thread::Builder::new()
        .name("ctrl-c".into())
        .spawn(move || watch(reader, &watcher, &socket))
        .context("cannot start the Ctrl-C thread")?;
    handle_sigint().context("cannot set up the Ctrl-C handler")?;
    Ok(INSTALLED.get_or_init(|| ctrlc).clone())
}

fn watch(mut reader: File, ctrlc: &CtrlC, socket: &std::path::Path) {
    let mut byte = [0u8; 1];
    while let Ok(1) = reader.read(&mut byte) {
        let _busy = BUSY
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let action = on_interrupt(&mut ctrlc.lock());
        match action {
            Action::Hint => {
                let _ = output::stderr("\n(Ctrl-D or /quit leaves the chat)\n> ");
            }
            Action::Exit(code) => {
                let _ = output::stderr("\n");
                if code != exit::SUCCESS {
                    output::note("interrupted");
                }
                std::process::exit(i32::from(code));
            }
            Action::Cancel(id) => {
                let _ = output::stderr("\n");
                output::note(&format!("cancelling {id}… (Ctrl-C again quits at once)"));
                cancel(socket, &id);
            }
            Action::Deny(id, approval) => {
                let _ = output::stderr("\n");
                deny(socket, &id, approval);
                output::note("interrupted");
                std::process::exit(i32::from(exit::INTERRUPTED));
            }
            Action::Detach(id) => {
                let _ = output::stderr("\n");
                output::note(&format!(
                    "stopped waiting; plan {id} keeps running (`flytoctl plan_cancel {id}` cancels it)"
                ));
                die_of_sigint();
            }
        }
    }
}

fn cancel(socket: &std::path::Path, id: &str) {
    let answer = conn::connect(socket)
        .and_then(|mut client| client.call(&Request::SessionCancel { id: id.to_string() }));
    match answer {
        // The same words as `session_cancel`.
        Ok(Response::Session { session }) => output::note(&session_render::cancelled(&session)),
        Ok(_) => {}
        Err(e) => output::note(&format!(
            "cannot cancel {id}: {}",
            exit::message(&anyhow::Error::new(e))
        )),
    }
}

/// Answers no to approval `approval` of session `id`, saying so.
fn deny(socket: &std::path::Path, id: &str, approval: u64) {
    let answer = conn::connect(socket).and_then(|mut client| {
        client.call(&Request::SessionApprove {
            id: id.to_string(),
            approval,
            allow: false,
        })
    });
    match answer {
        Ok(Response::Error { message, .. }) => {
            output::note(&format!("cannot deny the request of {id}: {message}"))
        }
        Ok(_) => output::note(&format!(
            "denied the request of {id}; the run goes on without it"
        )),
        Err(e) => output::note(&format!(
            "cannot deny the request of {id}: {}",
            exit::message(&anyhow::Error::new(e))
        )),
    }
}

/// Ends the process as an unhandled Ctrl-C would, so the shell and scripts
/// see the same status as before the handler was installed.
fn die_of_sigint() -> ! {
    // SAFETY: restoring the default disposition and raising the signal
    // takes no pointers; the default action terminates the process.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::raise(libc::SIGINT);
    }
    std::process::exit(i32::from(exit::INTERRUPTED))
}

/// A pipe whose write end the handler uses; returns the read end.
fn self_pipe() -> std::io::Result<File> {
    let mut fds = [-1 as libc::c_int; 2];
    // SAFETY: pipe(2) writes two fds into the array we pass.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let [read, write] = fds;
    for (fd, nonblock) in [(read, false), (write, true)] {
        // SAFETY: fcntl on fds we own, with integer arguments only.
        let ok = unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) == 0
                && (!nonblock || {
                    let flags = libc::fcntl(fd, libc::F_GETFL);
                    flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
                })
        };
        if !ok {
            return Err(std::io::Error::last_os_error());
        }
    }
    PIPE.store(write, Ordering::SeqCst);
    // SAFETY: `read` is a fresh fd nothing else owns.
    Ok(unsafe { File::from_raw_fd(read) })
}

fn handle_sigint() -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is a valid starting point; we then set the
    // handler, an empty mask and SA_RESTART, and install it for SIGINT only.
    // The handler is async-signal-safe (see `on_sigint`).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&raw mut action.sa_mask);
        if libc::sigaction(libc::SIGINT, &raw const action, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Writes one byte to the self-pipe; errno is preserved.
extern "C" fn on_sigint(_signal: libc::c_int) {
    let fd = PIPE.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    let saved = errno::get();
    let byte = 1u8;
    // SAFETY: write(2) is async-signal-safe; `fd` is the non-blocking write
    // end of the self-pipe, open for the life of the process. A full pipe
    // (many pending Ctrl-Cs) just drops this one.
    unsafe {
        libc::write(fd, (&raw const byte).cast(), 1);
    }
    errno::set(saved);
}

mod errno {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn location() -> *mut libc::c_int {
        // SAFETY: returns the calling thread's errno slot; always valid.
        unsafe { libc::__errno_location() }
    }

    #[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
    fn location() -> *mut libc::c_int {
        // SAFETY: returns the calling thread's errno slot; always valid.
        unsafe { libc::__error() }
    }

    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd"
    ))]
    pub fn get() -> libc::c_int {
        // SAFETY: the thread's errno slot is valid for reads.
        unsafe { *location() }
    }

    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd"
    ))]
    pub fn set(value: libc::c_int) {
        // SAFETY: the thread's errno slot is valid for writes.
        unsafe { *location() = value }
    }

    #[cfg(not(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd"
    )))]
    pub fn get() -> libc::c_int {
        0
    }

    #[cfg(not(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd"
    )))]
    pub fn set(_value: libc::c_int) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_ctrl_c_cancels_the_second_exits() {
        let mut mode = Mode::Run {
            id: "s1".into(),
            cancel_sent: false,
        };
        assert_eq!(on_interrupt(&mut mode), Action::Cancel("s1".into()));
        assert_eq!(on_interrupt(&mut mode), Action::Exit(exit::INTERRUPTED));
    }

    #[test]
    fn idle_and_attach() {
        assert_eq!(
            on_interrupt(&mut Mode::Idle { interactive: true }),
            Action::Hint
        );
        assert_eq!(
            on_interrupt(&mut Mode::Idle { interactive: false }),
            Action::Exit(exit::INTERRUPTED)
        );
        assert_eq!(on_interrupt(&mut Mode::Attach), Action::Exit(exit::SUCCESS));
        assert_eq!(
            on_interrupt(&mut Mode::Plan { id: "p3".into() }),
            Action::Detach("p3".into())
        );
    }
}
