//! socket_gate: the kernel gate on the UNIX sockets a confined process may
//! connect to. Landlock (up to ABI 8) does not restrict `connect()` on a
//! UNIX socket, so without this a confined command could ask a server the
//! user runs (tmux, screen, the D-Bus session bus, `systemd --user`,
//! ssh-agent, gpg-agent, flytod's main socket) to act for it outside the
//! sandbox. It owns the seccomp filter installed in the child and the one
//! supervisor thread in flytod that answers it; it does not decide what is
//! hidden or writable (`sandbox`) and does not spawn (`process`).
//!
//! The filter, installed in the child after Landlock:
//! - sends every `connect()` to the supervisor (seccomp user notification);
//! - refuses `socket`/`socketpair` of UNIX datagram sockets (a datagram can
//!   be sent to a path without `connect`);
//! - refuses `io_uring_setup` (io_uring's connect would pass by seccomp);
//! - kills a process that makes a syscall of another architecture (the
//!   numbers checked here are the native ones).
//!
//! The supervisor lets a connect on any socket that is not UNIX through (its
//! family cannot change, so the address cannot make it a UNIX connect); a
//! UNIX connect goes through only to the child's scoped plan socket, a
//! socket `[sandbox] sockets` names, or a socket inside the folders the
//! child may write (its own); abstract sockets only where Landlock scopes
//! them (ABI 6: only those made inside the same sandbox). Everything else
//! gets `EACCES`. The check reads the address from the child, so a child
//! that rewrites it from another thread between the check and the kernel's
//! own read could win a race: the mount namespace hides the usual servers'
//! folders as well, so that race finds nothing to reach there.

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What one confined process tree may connect to, sent with its listener.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// Sockets allowed by path (the plan socket, `[sandbox] sockets`).
    pub sockets: Vec<PathBuf>,
    /// Folders whose sockets are the child's own (workdir, TMPDIR,
    /// `[sandbox] writable`).
    pub roots: Vec<PathBuf>,
    /// Landlock scopes abstract sockets (ABI 6+): let them through to it.
    pub abstract_scoped: bool,
}

impl Rules {
    /// The rules with every existing path made canonical, as the
    /// supervisor compares canonical paths.
    pub fn canonical(mut self) -> Rules {
        let canon = |p: &PathBuf| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        self.sockets = self.sockets.iter().map(canon).collect();
        self.roots = self.roots.iter().map(canon).collect();
        self
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = vec![u8::from(self.abstract_scoped)];
        for (tag, paths) in [(b's', &self.sockets), (b'r', &self.roots)] {
            for p in paths {
                out.push(tag);
                out.extend_from_slice(p.as_os_str().as_bytes());
                out.push(0);
            }
        }
        out
    }

    fn decode(bytes: &[u8]) -> Rules {
        let mut rules = Rules {
            abstract_scoped: bytes.first() == Some(&1),
            ..Rules::default()
        };
        for item in bytes.get(1..).unwrap_or_default().split(|b| *b == 0) {
            let Some((tag, path)) = item.split_first() else {
                continue;
            };
            let path = PathBuf::from(OsStr::from_bytes(path));
            match tag {
                b's' => rules.sockets.push(path),
                b'r' => rules.roots.push(path),
                _ => {}
            }
        }
        rules
    }

    /// Whether a connect to the canonical `path` may go through.
    fn allows(&self, path: &Path) -> bool {
        self.sockets.iter().any(|s| s == path) || self.roots.iter().any(|r| path.starts_with(r))
    }
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Whether this build can gate sockets on this architecture at all.
pub const BUILT: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The filter program (see the module comment). Jumps count the
/// instructions skipped, forward only.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn program() -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = 0x20;
    const JEQ: u16 = 0x15;
    const JGE: u16 = 0x35;
    const RET: u16 = 0x06;
    const AND: u16 = 0x54;
    // seccomp_data: nr at 0, arch at 4, args at 16 + 8 * i (low half
    // first: both architectures are little-endian).
    let nr = |n: libc::c_long| n as u32;
    vec![
        /* 0 */ stmt(LD_W_ABS, 4),
        /* 1 */ jump(JEQ, AUDIT_ARCH, 1, 0),
        /* 2 */ stmt(RET, RET_KILL_PROCESS),
        /* 3 */ stmt(LD_W_ABS, 0),
        // x32 numbers (x86_64) and anything above the table.
        /* 4 */
        jump(JGE, 0x4000_0000, 13, 0),
        /* 5 */ jump(JEQ, nr(libc::SYS_connect), 11, 0),
        /* 6 */ jump(JEQ, nr(libc::SYS_io_uring_setup), 11, 0),
        /* 7 */ jump(JEQ, nr(libc::SYS_socket), 2, 0),
        /* 8 */ jump(JEQ, nr(libc::SYS_socketpair), 1, 0),
        /* 9 */ stmt(RET, RET_ALLOW),
        /* 10 */ stmt(LD_W_ABS, 16),
        /* 11 */ jump(JEQ, libc::AF_UNIX as u32, 0, 3),
        /* 12 */ stmt(LD_W_ABS, 24),
        /* 13 */ stmt(AND, 0xf),
        /* 14 */ jump(JEQ, libc::SOCK_DGRAM as u32, 1, 0),
        /* 15 */ stmt(RET, RET_ALLOW),
        /* 16 */ stmt(RET, RET_ERRNO | libc::EACCES as u32),
        /* 17 */ stmt(RET, libc::SECCOMP_RET_USER_NOTIF),
        /* 18 */ stmt(RET, RET_ERRNO | libc::ENOSYS as u32),
    ]
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn program() -> Vec<libc::sock_filter> {
    Vec::new()
}

/// What the child needs to put itself behind the gate, built before the
/// fork.
pub struct Ticket {
    program: Vec<libc::sock_filter>,
    rules: Vec<u8>,
    /// The gate's sending end (the gate lives as long as flytod).
    sender: RawFd,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("rules", &Rules::decode(&self.rules))
            .finish_non_exhaustive()
    }
}

// The program is plain data; the raw fd is the gate's, which never closes.
unsafe impl Send for Ticket {}
unsafe impl Sync for Ticket {}

/// A ticket for a child confined by `rules`; an error when the gate cannot
/// run in this process.
pub fn ticket(rules: &Rules) -> Result<Ticket, String> {
    let gate = gate()?;
    Ok(Ticket {
        program: program(),
        rules: rules.encode(),
        sender: gate.sender.as_raw_fd(),
    })
}

impl Ticket {
    /// In the child, between fork and exec, after Landlock (so no-new-privs
    /// is set): installs the filter and hands its listener to the gate.
    /// Only raw syscalls on what was built before the fork.
    pub fn install(&self) -> std::io::Result<()> {
        let listener = install_filter(&self.program)?;
        let sent = send_fd(self.sender, listener, &self.rules);
        // SAFETY: closing the fd this function got from the kernel.
        unsafe { libc::close(listener) };
        sent
    }
}

fn install_filter(program: &[libc::sock_filter]) -> std::io::Result<RawFd> {
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: seccomp with a pointer to a live program; the kernel copies it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const libc::sock_fprog,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd as RawFd)
}

/// Sends `fd` with `data` in one message. No allocation.
fn send_fd(sock: RawFd, fd: RawFd, data: &[u8]) -> std::io::Result<()> {
    // Room for one fd, aligned as cmsghdr needs.
    let mut control = [0u64; 4];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    // SAFETY: msghdr and cmsghdr filled in place on stack buffers that
    // outlive the sendmsg call; CMSG_* compute offsets within `control`.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The supervisor: one thread that polls the listeners of every gated
/// process tree, and the socket new listeners arrive on.
struct Gate {
    sender: OwnedFd,
}

static GATE: OnceLock<Result<Gate, String>> = OnceLock::new();

fn gate() -> Result<&'static Gate, String> {
    GATE.get_or_init(start).as_ref().map_err(Clone::clone)
}

fn start() -> Result<Gate, String> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair fills two fds into a live array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(format!(
            "cannot start the socket gate: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: both fds were just made and are owned here.
    let (sender, receiver) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    std::thread::Builder::new()
        .name("socket-gate".into())
        .spawn(move || supervise(receiver))
        .map_err(|e| format!("cannot start the socket gate: {e}"))?;
    Ok(Gate { sender })
}

fn supervise(receiver: OwnedFd) {
    let mut watched: Vec<(OwnedFd, Rules)> = Vec::new();
    loop {
        let mut polls: Vec<libc::pollfd> = std::iter::once(receiver.as_raw_fd())
            .chain(watched.iter().map(|(fd, _)| fd.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: poll on a live array of pollfds. Blocks until something
        // happens: an idle gate costs nothing.
        let n = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, -1) };
        if n < 0 {
            continue;
        }
        for i in (1..polls.len()).rev() {
            let revents = polls[i].revents;
            if revents & libc::POLLIN != 0 {
                let (fd, rules) = &watched[i - 1];
                answer(fd.as_raw_fd(), rules);
            } else if revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                // Every process behind this listener is gone.
                watched.swap_remove(i - 1);
            }
        }
        if polls[0].revents & libc::POLLIN != 0
            && let Some(entry) = receive(&receiver)
        {
            watched.push(entry);
        }
    }
}

/// One listener and its rules from a child. (The child's side stays raw
/// syscalls, as it must allocate nothing; this side uses nix.)
fn receive(receiver: &OwnedFd) -> Option<(OwnedFd, Rules)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut data = vec![0u8; 64 * 1024];
    let mut control = nix::cmsg_space!(RawFd);
    let mut iov = [std::io::IoSliceMut::new(&mut data)];
    let msg = recvmsg::<()>(
        receiver.as_raw_fd(),
        &mut iov,
        Some(&mut control),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .ok()?;
    let len = msg.bytes;
    let fd = msg.cmsgs().ok()?.find_map(|c| match c {
        ControlMessageOwned::ScmRights(fds) => fds.first().copied(),
        _ => None,
    })?;
    // SAFETY: the kernel just installed this fd for us.
    let listener = unsafe { OwnedFd::from_raw_fd(fd) };
    data.truncate(len);
    Some((listener, Rules::decode(&data)))
}

enum Verdict {
    Continue,
    Deny(i32),
}

/// Answers one pending connect on `listener`.
fn answer(listener: RawFd, rules: &Rules) {
    // SAFETY: zeroed plain-data structs filled by the kernel.
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: the ioctl writes into `req`.
    if unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut req) } != 0 {
        // The caller died meanwhile (ENOENT) or a signal interrupted it.
        return;
    }
    let verdict = decide(listener, &req, rules);
    let mut resp = libc::seccomp_notif_resp {
        id: req.id,
        val: 0,
        error: 0,
        flags: 0,
    };
    match verdict {
        Verdict::Continue => resp.flags = libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
        Verdict::Deny(errno) => resp.error = -errno,
    }
    // SAFETY: the ioctl reads `resp`. ENOENT: the caller is gone.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SEND, &resp) };
}

fn decide(listener: RawFd, req: &libc::seccomp_notif, rules: &Rules) -> Verdict {
    let pid = req.pid as libc::pid_t;
    let sockfd = req.data.args[0] as RawFd;
    let addr = req.data.args[1];
    let len = (req.data.args[2] as usize).min(std::mem::size_of::<libc::sockaddr_un>());
    let domain = match socket_domain(pid, sockfd) {
        Ok(d) => d,
        Err(errno) => return Verdict::Deny(errno),
    };
    if domain != libc::AF_UNIX {
        return Verdict::Continue;
    }
    // An address of the family alone names no socket: the kernel refuses.
    if len <= std::mem::size_of::<libc::sa_family_t>() {
        return Verdict::Continue;
    }
    let mut buf = [0u8; std::mem::size_of::<libc::sockaddr_un>()];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: reads `len` bytes of the caller into `buf`.
    if unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) } != len as isize {
        return Verdict::Deny(libc::EFAULT);
    }
    // The pid could have been reused between RECV and the read.
    // SAFETY: the ioctl reads the id.
    if unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &req.id) } != 0 {
        return Verdict::Deny(libc::ESRCH);
    }
    let path = &buf[std::mem::size_of::<libc::sa_family_t>()..len];
    if path.first() == Some(&0) {
        return if rules.abstract_scoped {
            Verdict::Continue
        } else {
            refuse(pid, "an abstract UNIX socket")
        };
    }
    let end = path.iter().position(|b| *b == 0).unwrap_or(path.len());
    let mut path = PathBuf::from(OsStr::from_bytes(&path[..end]));
    if path.is_relative() {
        match std::fs::read_link(format!("/proc/{pid}/cwd")) {
            Ok(cwd) => path = cwd.join(path),
            Err(_) => return Verdict::Deny(libc::EACCES),
        }
    }
    match std::fs::canonicalize(&path) {
        Ok(real) if rules.allows(&real) => Verdict::Continue,
        Ok(real) => refuse(pid, &real.display().to_string()),
        Err(e) => Verdict::Deny(e.raw_os_error().unwrap_or(libc::ENOENT)),
    }
}

fn refuse(pid: libc::pid_t, what: &str) -> Verdict {
    tracing::info!(
        pid,
        "sandbox: refused a confined process's connect to {what} (only its plan socket, its own sockets and `[sandbox] sockets` are reachable)"
    );
    Verdict::Deny(libc::EACCES)
}

/// The family of `sockfd` in process `pid` (a socket's family never
/// changes, unlike the address the caller passes).
fn socket_domain(pid: libc::pid_t, sockfd: RawFd) -> Result<i32, i32> {
    let errno = || {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EACCES)
    };
    // SAFETY: pidfd_open and pidfd_getfd take integers and return new fds.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        return Err(errno());
    }
    // SAFETY: the fd was just returned by the kernel.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    // SAFETY: as above.
    let sock = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), sockfd, 0) };
    if sock < 0 {
        let e = errno();
        return Err(if e == libc::EPERM { libc::EACCES } else { e });
    }
    // SAFETY: as above.
    let sock = unsafe { OwnedFd::from_raw_fd(sock as RawFd) };
    let mut domain: libc::c_int = 0;
    let mut size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes one int.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&mut domain as *mut libc::c_int).cast(),
            &mut size,
        )
    };
    if r != 0 {
        return Err(errno());
    }
    Ok(domain)
}

/// Whether this kernel lets a process install the gate's filter (seccomp
/// user notification, Linux 5.9+ for letting a connect through).
pub fn probe() -> Result<(), String> {
    if !BUILT {
        return Err("no socket gate for this architecture".into());
    }
    let program = program();
    let mut cmd = std::process::Command::new("/bin/true");
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: the closure makes only raw syscalls on the program built
    // before the fork.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = install_filter(&program)?;
            libc::close(fd);
            Ok(())
        });
    }
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("a process behind the socket gate failed ({s})")),
        Err(e) => Err(format!("seccomp user notification refused: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_survive_the_trip_to_the_supervisor() {
        let rules = Rules {
            sockets: vec![PathBuf::from("/run/user/1/flyto/plans/a.sock")],
            roots: vec![PathBuf::from("/work/ws"), PathBuf::from("/tmp/flyto-1/s")],
            abstract_scoped: true,
        };
        assert_eq!(Rules::decode(&rules.encode()), rules);
    }

    #[test]
    fn only_the_named_sockets_and_own_folders_are_allowed() {
        let rules = Rules {
            sockets: vec![PathBuf::from("/run/user/1/flyto/plans/a.sock")],
            roots: vec![PathBuf::from("/work/ws")],
            abstract_scoped: false,
        };
        assert!(rules.allows(Path::new("/run/user/1/flyto/plans/a.sock")));
        assert!(rules.allows(Path::new("/work/ws/.run/server.sock")));
        assert!(!rules.allows(Path::new("/run/user/1/flyto/plans/b.sock")));
        assert!(!rules.allows(Path::new("/tmp/tmux-1/default")));
        assert!(!rules.allows(Path::new("/run/user/1/bus")));
        assert!(!rules.allows(Path::new("/work/ws2/x.sock")));
    }

    #[test]
    fn the_filter_jumps_land_inside_the_program() {
        let program = program();
        if program.is_empty() {
            return;
        }
        for (i, ins) in program.iter().enumerate() {
            if ins.code == 0x15 || ins.code == 0x35 {
                assert!(i + 1 + (ins.jt as usize) < program.len(), "jt of {i}");
                assert!(i + 1 + (ins.jf as usize) < program.len(), "jf of {i}");
            }
        }
        assert_eq!(program.last().map(|i| i.code), Some(0x06));
    }
}
