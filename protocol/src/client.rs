//! A small blocking client: connect + handshake, then `call` or `send`/`recv`.

use crate::PROTOCOL_VERSION;
use crate::framing::{FrameError, read_frame, write_frame};
use crate::types::{ErrorCode, Request, Response};
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
    stream: UnixStream,
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
            stream,
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
        write_frame(&mut self.stream, req)?;
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
        self.stream.set_read_timeout(limit)
    }

    pub fn into_stream(self) -> UnixStream {
        self.stream
    }
}
