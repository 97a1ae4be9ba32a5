//! Where the daemon is and how to talk to it: the socket, a connection with
//! the handshake, and turning unexpected answers into errors.

use crate::style::Style;
use anyhow::Result;
use flyto_protocol::{Client, ClientError, Request, Response};
use std::path::{Path, PathBuf};

const CLIENT_NAME: &str = concat!("flytoctl/", env!("CARGO_PKG_VERSION"));

/// What every command needs: the daemon's socket and the output style.
pub struct Ctx {
    pub socket: PathBuf,
    pub style: Style,
}

impl Ctx {
    pub fn connect(&self) -> Result<Client> {
        Ok(connect(&self.socket)?)
    }

    /// Connect, send one request, return its answer.
    pub fn request(&self, req: &Request) -> Result<Response> {
        let mut client = self.connect()?;
        call(&mut client, req)
    }
}

pub fn connect(socket: &Path) -> Result<Client, ClientError> {
    Client::connect_as(socket, CLIENT_NAME)
}

pub fn call(client: &mut Client, req: &Request) -> Result<Response> {
    Ok(client.call(req)?)
}

/// An answer of the wrong kind for `op`.
pub fn unexpected(op: &str, resp: &Response) -> anyhow::Error {
    let mut shown = format!("{resp:?}");
    if shown.len() > 200 {
        let mut cut = 200;
        while !shown.is_char_boundary(cut) {
            cut -= 1;
        }
        shown.truncate(cut);
        shown.push('…');
    }
    ClientError::Unexpected(format!("to {op}: {shown}")).into()
}
