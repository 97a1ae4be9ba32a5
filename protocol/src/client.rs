//! A small blocking client: connect + handshake, then `call` or `send`/`recv`.
//!
//! It speaks over an `interprocess` local socket (a Unix socket path on
//! Linux), the one blocking transport flytoctl and the processes of plan
//! steps and agents use.

use crate::PROTOCOL_VERSION;
use crate::framing::{FrameError, read_frame, write_frame};
use crate::types::{ErrorCode, Request, Response};
use interprocess::local_socket::GenericFilePath;
use interprocess::local_socket::prelude::*;
// The Unix implementation behind interprocess's local sockets (the only
// one on Linux), named directly because poll(2) needs its fd.
use interprocess::os::unix::uds_local_socket::Stream;
use std::io::{BufReader, Read};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "flytod is not running (nothing answers at {path}): start it with `flytod` or `systemctl --user start flytod`, or point --socket / FLYTO_SOCK at its socket"
    )]
    NotRunning { path: PathBuf },
    #[error("cannot connect to {path}: {source}")]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("flytod closed the connection (it may have stopped or restarted)")]
    Closed,
    #[error("{message}")]
    Remote { code: ErrorCode, message: String },
    #[error("unexpected answer from the daemon: {0}")]
    Unexpected(String),
}

pub struct Client {
    /// Reads through a buffer: a frame's header and payload usually come
    /// in one `read` instead of two. Writes go to the stream itself.
    stream: BufReader<PollIn>,
    daemon_version: String,
}

/// The socket, read only once poll(2) says there is input.
///
/// A thread blocked in read(2) on a Unix socket sleeps on the same wait
/// queue as writers waiting for space, so each time the daemon reads a
/// request it wakes the client (which finds nothing and sleeps again): a
/// cross-CPU wake-up per request, paid mostly by the daemon. poll(2) waits
/// for input only and is not woken by that.
struct PollIn {
    stream: Stream,
    /// Read timeout in nanoseconds; `u64::MAX`: none.
    timeout_ns: AtomicU64,
}

impl PollIn {
    fn timeout(&self) -> Option<Duration> {
        match self.timeout_ns.load(Ordering::Relaxed) {
            u64::MAX => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Waits until the socket is readable (or hung up), up to the timeout.
    fn wait_readable(&self) -> std::io::Result<()> {
        let deadline = self.timeout().map(|t| Instant::now() + t);
        let mut fd = libc::pollfd {
            fd: self.stream.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            let ms = match deadline {
                None => -1,
                // Rounded up, so a short timeout does not become a busy poll.
                Some(d) => d
                    .saturating_duration_since(Instant::now())
                    .as_micros()
                    .div_ceil(1000)
                    .min(i32::MAX as u128) as i32,
            };
            // SAFETY: one pollfd on the stack for a socket this owns.
            match unsafe { libc::poll(&mut fd, 1, ms) } {
                n if n > 0 => return Ok(()),
                0 => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::WouldBlock,
                        "flytod did not answer within the read timeout",
                    ));
                }
                _ => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
    }
}

impl Read for PollIn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.wait_readable()?;
        (&self.stream).read(buf)
    }
}

impl Client {
    /// Connects and performs the `Hello`/`Welcome` handshake.
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        Self::connect_as(path, concat!("flyto-protocol/", env!("CARGO_PKG_VERSION")))
    }

    pub fn connect_as(path: &Path, client_name: &str) -> Result<Client, ClientError> {
        let connect_err = |source: std::io::Error| match source.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                ClientError::NotRunning {
                    path: path.to_path_buf(),
                }
            }
            _ => ClientError::Connect {
                path: path.to_path_buf(),
                source,
            },
        };
        let name = path.to_fs_name::<GenericFilePath>().map_err(connect_err)?;
        let stream = Stream::connect(name).map_err(connect_err)?;
        let mut client = Client {
            stream: BufReader::new(PollIn {
                stream,
                timeout_ns: AtomicU64::new(u64::MAX),
            }),
            daemon_version: String::new(),
        };
        let hello = Request::Hello {
            protocol: PROTOCOL_VERSION,
            client: client_name.to_string(),
        };
        match client.call(&hello)? {
            Response::Welcome { daemon_version, .. } => client.daemon_version = daemon_version,
            other => return Err(ClientError::Unexpected(format!("{other:?}"))),
        }
        Ok(client)
    }

    pub fn daemon_version(&self) -> &str {
        &self.daemon_version
    }

    pub fn send(&mut self, req: &Request) -> Result<(), ClientError> {
        write_frame(&mut self.stream.get_mut().stream, req)?;
        Ok(())
    }

    /// The next response; an `Error` response is returned as a value.
    pub fn recv(&mut self) -> Result<Response, ClientError> {
        read_frame(&mut self.stream)?.ok_or(ClientError::Closed)
    }

    /// One request, one response; an `Error` response becomes
    /// [`ClientError::Remote`].
    pub fn call(&mut self, req: &Request) -> Result<Response, ClientError> {
        self.send(req)?;
        match self.recv()? {
            Response::Error { code, message } => Err(ClientError::Remote { code, message }),
            other => Ok(other),
        }
    }

    /// Bounds how long `recv` waits; `None` waits forever.
    pub fn set_read_timeout(&self, limit: Option<Duration>) -> std::io::Result<()> {
        if limit.is_some_and(|l| l.is_zero()) {
            // As for sockets: a zero timeout is refused, not "forever".
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a read timeout of zero is not a timeout; use None to wait forever",
            ));
        }
        let ns = limit.map_or(u64::MAX, |l| l.as_nanos().min(u64::MAX as u128 - 1) as u64);
        self.stream
            .get_ref()
            .timeout_ns
            .store(ns, Ordering::Relaxed);
        // The socket's own timeout too, should a read ever block after
        // poll said it would not.
        self.stream.get_ref().stream.set_recv_timeout(limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::{frame, read_frame_bytes};
    use std::io::Write;
    use std::os::unix::net::UnixListener;

    /// A fresh directory per test (tests run in parallel threads).
    fn test_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("flyto-client-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn welcome() -> Vec<u8> {
        frame(&Response::Welcome {
            protocol: PROTOCOL_VERSION,
            daemon_version: "test".into(),
        })
        .unwrap()
    }

    #[test]
    fn no_socket_and_a_stale_socket_both_say_flytod_is_not_running() {
        let dir = test_dir("not-running");
        let missing = dir.join("missing.sock");
        let err = Client::connect(&missing).err().unwrap();
        assert!(matches!(&err, ClientError::NotRunning { path } if *path == missing));
        assert!(err.to_string().contains("flytod is not running"), "{err}");
        // A socket file left by a daemon that died: nobody accepts on it.
        let stale = dir.join("stale.sock");
        drop(UnixListener::bind(&stale).unwrap());
        let err = Client::connect(&stale).err().unwrap();
        assert!(matches!(&err, ClientError::NotRunning { path } if *path == stale));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A server on a fresh socket that answers the handshake, then runs
    /// `then` on the connection; the client is connected.
    fn greeted<T: Send + 'static>(
        name: &str,
        then: impl FnOnce(std::os::unix::net::UnixStream) -> T + Send + 'static,
    ) -> (Client, std::thread::JoinHandle<T>, PathBuf) {
        let dir = test_dir(name);
        let listener = UnixListener::bind(dir.join("s.sock")).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            read_frame_bytes(&mut s).unwrap().unwrap();
            s.write_all(&welcome()).unwrap();
            then(s)
        });
        let client = Client::connect(&dir.join("s.sock")).unwrap();
        (client, server, dir)
    }

    #[test]
    fn an_oversized_frame_header_is_refused_before_reading_it() {
        let (mut client, server, dir) = greeted("too-large", |mut s| {
            read_frame_bytes(&mut s).unwrap().unwrap();
            // A header announcing 4 GiB, and nothing after it.
            s.write_all(&u32::MAX.to_be_bytes()).unwrap();
            s
        });
        match client.call(&Request::Ping {}) {
            Err(ClientError::Frame(FrameError::TooLarge { len, max })) => {
                assert_eq!((len, max), (u32::MAX as usize, crate::MAX_FRAME));
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        drop(server.join().unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_read_timeout_bounds_recv() {
        // The server stays silent until the client hangs up.
        let (mut client, server, dir) = greeted("timeout", |mut s| {
            let _ = read_frame_bytes(&mut s);
        });
        client
            .set_read_timeout(Some(std::time::Duration::from_millis(20)))
            .unwrap();
        match client.recv() {
            Err(ClientError::Frame(FrameError::Io(e))) => assert!(
                matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "{e}"
            ),
            other => panic!("expected a timeout, got {other:?}"),
        }
        drop(client);
        server.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn frames_that_arrive_together_are_read_one_by_one() {
        let dir = test_dir("together");
        let path = dir.join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            read_frame_bytes(&mut s).unwrap().unwrap();
            // The welcome and two more answers in one write: the client's
            // buffer holds all three after its first read.
            let mut bytes = welcome();
            for pid in [1, 2] {
                bytes.extend(
                    frame(&Response::Pong {
                        daemon_version: "test".into(),
                        pid,
                        uptime_ms: 0,
                    })
                    .unwrap(),
                );
            }
            s.write_all(&bytes).unwrap();
        });
        let mut client = Client::connect(&path).unwrap();
        assert_eq!(client.daemon_version(), "test");
        for want in [1, 2] {
            match client.recv().unwrap() {
                Response::Pong { pid, .. } => assert_eq!(pid, want),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(matches!(client.recv(), Err(ClientError::Closed)));
        server.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
