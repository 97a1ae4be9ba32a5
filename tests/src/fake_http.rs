//! The plain HTTP/1.1 plumbing shared by the fake LLM servers
//! ([`crate::fake_llm`], [`crate::fake_anthropic`]): the accept loop,
//! reading one request, and writing bytes out at once.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Serves every connection of `listener` on its own thread (`serve`), until
/// the flag `stop(&shared)` is set and the next connection wakes the loop.
/// Threads are named `<name>-accept` and `<name>-conn`; `what` names the
/// server in the panic if the accept thread cannot start.
pub(crate) fn spawn_accept<S: Send + Sync + 'static>(
    listener: TcpListener,
    name: &str,
    what: &str,
    shared: Arc<S>,
    stop: fn(&S) -> &AtomicBool,
    serve: fn(TcpStream, &S),
) {
    let conn_name = format!("{name}-conn");
    std::thread::Builder::new()
        .name(format!("{name}-accept"))
        .spawn(move || {
            for conn in listener.incoming() {
                if stop(&shared).load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let shared = shared.clone();
                let _ = std::thread::Builder::new()
                    .name(conn_name.clone())
                    .spawn(move || serve(conn, &shared));
            }
        })
        .unwrap_or_else(|e| panic!("spawn the {what} accept thread: {e:?}"));
}

/// Writes `bytes` and flushes.
pub(crate) fn send(conn: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    conn.write_all(bytes)?;
    conn.flush()
}

/// One HTTP request; header names are lower-cased, values trimmed.
pub(crate) struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Reads one request: method, path, headers and body (by Content-Length).
pub(crate) fn read_request(conn: &mut TcpStream) -> Option<Request> {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        let n = conn.read(&mut tmp).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = conn.read(&mut tmp).ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    body.truncate(length);
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}
