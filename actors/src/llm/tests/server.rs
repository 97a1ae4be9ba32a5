//! A scripted HTTP/1.1 server on 127.0.0.1 for the provider tests. Each
//! connection gets the next [`Reply`] of the script (the last one repeats);
//! the body goes out in pieces cut at chosen byte offsets, each piece its
//! own chunk, flushed on its own, so the client sees every boundary.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// How a reply ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum End {
    /// The whole body, properly terminated.
    Finish,
    /// Close the connection without the terminating chunk: a cut stream.
    Abort,
    /// Keep the connection open and silent until the client leaves.
    Hang,
}

#[derive(Clone, Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Byte offsets at which the body is cut into pieces.
    pub cuts: Vec<usize>,
    pub end: End,
    /// Send no headers at all (a server that accepts and says nothing).
    pub silent: bool,
    /// Delimit the body by closing the connection instead of chunking.
    pub close_delimited: bool,
}

impl Reply {
    pub(crate) fn sse(body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: body.into(),
            cuts: Vec::new(),
            end: End::Finish,
            silent: false,
            close_delimited: false,
        }
    }

    pub(crate) fn json(status: u16, body: &str) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            ..Reply::sse(body)
        }
    }

    pub(crate) fn silent() -> Reply {
        Reply {
            silent: true,
            ..Reply::sse("")
        }
    }

    pub(crate) fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub(crate) fn cuts(mut self, cuts: Vec<usize>) -> Reply {
        self.cuts = cuts;
        self
    }

    /// Pieces of `n` bytes.
    pub(crate) fn every(self, n: usize) -> Reply {
        let cuts = (n..self.body.len()).step_by(n.max(1)).collect();
        self.cuts(cuts)
    }

    pub(crate) fn end(mut self, end: End) -> Reply {
        self.end = end;
        self
    }

    pub(crate) fn close_delimited(mut self) -> Reply {
        self.close_delimited = true;
        self
    }

    fn pieces(&self) -> Vec<&[u8]> {
        let mut cuts: Vec<usize> = self
            .cuts
            .iter()
            .copied()
            .filter(|&c| c > 0 && c < self.body.len())
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut pieces = Vec::with_capacity(cuts.len() + 1);
        let mut start = 0;
        for c in cuts {
            pieces.push(&self.body[start..c]);
            start = c;
        }
        if start < self.body.len() {
            pieces.push(&self.body[start..]);
        }
        pieces
    }
}

/// One request as the server read it.
#[derive(Clone, Debug)]
pub(crate) struct Captured {
    /// `POST /path HTTP/1.1`
    pub request_line: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Captured {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

pub(crate) struct FakeServer {
    pub url: String,
    captured: Arc<Mutex<Vec<Captured>>>,
    /// Notified each time a client closes a connection the server held open.
    pub disconnected: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeServer {
    pub(crate) async fn start(script: Vec<Reply>) -> FakeServer {
        assert!(!script.is_empty());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let captured = Arc::new(Mutex::new(Vec::new()));
        let disconnected = Arc::new(Notify::new());
        let script = Arc::new(script);
        let next = Arc::new(AtomicUsize::new(0));
        let (cap, disc) = (captured.clone(), disconnected.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                let i = next.fetch_add(1, Ordering::SeqCst);
                let reply = script[i.min(script.len() - 1)].clone();
                let (cap, disc) = (cap.clone(), disc.clone());
                tokio::spawn(async move {
                    let _ = serve(sock, reply, cap, disc).await;
                });
            }
        });
        FakeServer {
            url,
            captured,
            disconnected,
            task,
        }
    }

    pub(crate) fn requests(&self) -> Vec<Captured> {
        self.captured.lock().unwrap().clone()
    }
}

async fn serve(
    mut sock: TcpStream,
    reply: Reply,
    captured: Arc<Mutex<Vec<Captured>>>,
    disconnected: Arc<Notify>,
) -> std::io::Result<()> {
    let req = read_request(&mut sock).await?;
    captured.lock().unwrap().push(req);
    if reply.silent {
        wait_for_close(&mut sock).await;
        disconnected.notify_one();
        return Ok(());
    }
    let mut head = format!("HTTP/1.1 {} Fake\r\n", reply.status);
    for (n, v) in &reply.headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    if !reply.close_delimited {
        head.push_str("transfer-encoding: chunked\r\n");
    }
    head.push_str("connection: close\r\n\r\n");
    sock.write_all(head.as_bytes()).await?;
    sock.flush().await?;
    for piece in reply.pieces() {
        if reply.close_delimited {
            sock.write_all(piece).await?;
        } else {
            let mut chunk = format!("{:x}\r\n", piece.len()).into_bytes();
            chunk.extend_from_slice(piece);
            chunk.extend_from_slice(b"\r\n");
            sock.write_all(&chunk).await?;
        }
        sock.flush().await?;
        // Let the client read this piece before the next one lands.
        tokio::task::yield_now().await;
    }
    match reply.end {
        End::Finish => {
            if !reply.close_delimited {
                sock.write_all(b"0\r\n\r\n").await?;
            }
            sock.flush().await?;
            sock.shutdown().await?;
        }
        End::Abort => {}
        End::Hang => {
            wait_for_close(&mut sock).await;
            disconnected.notify_one();
        }
    }
    Ok(())
}

async fn wait_for_close(sock: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    while let Ok(n) = sock.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}

async fn read_request(sock: &mut TcpStream) -> std::io::Result<Captured> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    Ok(Captured {
        request_line,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
