//! A small blocking client: connect + handshake, then `call` or `send`/`recv`.

use crate::PROTOCOL_VERSION;
use crate::framing::{FrameError, read_frame, write_frame};
use crate::types::{ErrorCode, Request, Response};
use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

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
    stream: BufReader<UnixStream>,
    daemon_version: String,
}

impl Client {
    /// Connects and performs the `Hello`/`Welcome` handshake.
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        Self::connect_as(path, concat!("flyto-protocol/", env!("CARGO_PKG_VERSION")))
    }

    pub fn connect_as(path: &Path, client_name: &str) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                ClientError::NotRunning {
                    path: path.to_path_buf(),
                }
            }
            _ => ClientError::Connect {
                path: path.to_path_buf(),
                source,
            },
        })?;
        let mut client = Client {
            stream: BufReader::new(stream),
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
        write_frame(self.stream.get_mut(), req)?;
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
    pub fn set_read_timeout(&self, limit: Option<std::time::Duration>) -> std::io::Result<()> {
        self.stream.get_ref().set_read_timeout(limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::{frame, read_frame_bytes};
    use std::io::Write;
    use std::os::unix::net::UnixListener;

    #[test]
    fn frames_that_arrive_together_are_read_one_by_one() {
        let dir = std::env::temp_dir().join(format!("flyto-client-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            read_frame_bytes(&mut s).unwrap().unwrap();
            // The welcome and two more answers in one write: the client's
            // buffer holds all three after its first read.
            let mut bytes = frame(&Response::Welcome {
                protocol: PROTOCOL_VERSION,
                daemon_version: "test".into(),
            })
            .unwrap();
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
