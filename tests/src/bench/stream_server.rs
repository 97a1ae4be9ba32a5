//! The fake OpenAI-compatible server of the `sessions` benchmark: tokio,
//! pre-rendered SSE, run as a child process (the hidden `stream-server`
//! subcommand) so that its CPU time is not counted for the daemon nor for
//! the baseline reader, which both read from it.
//!
//! Routes, by the first path segment of `{base_url}/chat/completions`:
//! - `/stream/`: `deltas` content deltas, one write each, `interval` apart,
//!   then one `read` tool call (arguments split in fragments) and
//!   finish_reason `tool_calls`; a request whose last message is a tool
//!   result gets the short final answer instead.
//! - `/slow/`: one content delta per second (the first at once), for at
//!   most two minutes, until the client hangs up.
//! - `/short/`: the short final answer.
//!
//! Every response is HTTP/1.1 with `Connection: close` (the body ends with
//! the connection), like `flyto_tests::fake_llm`.

use anyhow::Context;
use serde_json::{Value, json};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The file the tool call reads (relative to the session workdir).
pub const TOOL_FILE: &str = "notes.txt";
/// The final answer after the tool result.
pub const FINAL_TEXT: &str = "Done.";

const HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n";

fn event(data: &str) -> Vec<u8> {
    format!("data: {data}\n\n").into_bytes()
}

fn chunk(delta: Value, finish: Option<&str>) -> Vec<u8> {
    event(
        &json!({
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "model": "fake-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
        .to_string(),
    )
}

fn usage(prompt: u64, completion: u64) -> Vec<u8> {
    event(
        &json!({
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "model": "fake-model",
            "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        })
        .to_string(),
    )
}

/// The text of content delta `i` (a short word, like a token).
pub fn word(i: usize) -> String {
    const WORDS: [&str; 8] = [
        "the ", "agent ", "reads ", "a ", "file ", "and ", "then ", "answers ",
    ];
    WORDS[i % WORDS.len()].to_string()
}

/// Every reply, rendered once.
struct Replies {
    /// Role chunk, then one entry per content delta.
    deltas: Vec<Vec<u8>>,
    /// Tool call, finish, usage, `[DONE]`: written in one go.
    tool_tail: Vec<u8>,
    /// Role chunk, the final answer, finish, usage, `[DONE]`.
    short: Vec<u8>,
}

impl Replies {
    fn new(n: usize) -> Replies {
        let mut deltas = vec![chunk(json!({"role": "assistant"}), None)];
        deltas.extend((0..n).map(|i| chunk(json!({"content": word(i)}), None)));
        let args = json!({"path": TOOL_FILE}).to_string();
        let mut tool_tail = chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "read", "arguments": ""}}]}),
            None,
        );
        let cut = args.len() / 2;
        for piece in [&args[..cut], &args[cut..]] {
            tool_tail.extend(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                None,
            ));
        }
        tool_tail.extend(chunk(json!({}), Some("tool_calls")));
        tool_tail.extend(usage(1000, n as u64 + 10));
        tool_tail.extend(event("[DONE]"));
        let mut short = chunk(json!({"role": "assistant"}), None);
        short.extend(chunk(json!({"content": FINAL_TEXT}), None));
        short.extend(chunk(json!({}), Some("stop")));
        short.extend(usage(1200, 2));
        short.extend(event("[DONE]"));
        Replies {
            deltas,
            tool_tail,
            short,
        }
    }
}

/// Hidden subcommand: serves until the parent dies; prints `ready <port>`.
pub fn main(deltas: usize, interval: Duration) -> anyhow::Result<()> {
    // SAFETY: prctl with PR_SET_PDEATHSIG only sets a flag on this process.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    rt.block_on(async move {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("bind 127.0.0.1")?;
        let port = listener.local_addr()?.port();
        println!("ready {port}");
        std::io::stdout().flush()?;
        let replies = Arc::new(Replies::new(deltas));
        loop {
            let (conn, _) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors and the like: try again shortly.
                    eprintln!("stream-server: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let replies = replies.clone();
            tokio::spawn(async move {
                let _ = serve(conn, &replies, interval).await;
            });
        }
    })
}

async fn serve(mut conn: TcpStream, replies: &Replies, interval: Duration) -> anyhow::Result<()> {
    conn.set_nodelay(true)?;
    let (path, body) = read_request(&mut conn).await?;
    let route = path.trim_start_matches('/').split('/').next().unwrap_or("");
    match route {
        "stream" => {
            if last_role(&body).as_deref() == Some("tool") {
                conn.write_all(HEAD.as_bytes()).await?;
                conn.write_all(&replies.short).await?;
            } else {
                conn.write_all(HEAD.as_bytes()).await?;
                let mut tick = (!interval.is_zero()).then(|| {
                    let mut t = tokio::time::interval(interval);
                    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    t
                });
                for d in &replies.deltas {
                    if let Some(t) = tick.as_mut() {
                        t.tick().await;
                    }
                    conn.write_all(d).await?;
                }
                conn.write_all(&replies.tool_tail).await?;
            }
        }
        "slow" => {
            conn.write_all(HEAD.as_bytes()).await?;
            conn.write_all(&replies.deltas[0]).await?;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            for i in 0..120 {
                tick.tick().await;
                conn.write_all(&chunk(json!({"content": word(i)}), None))
                    .await?;
            }
            conn.write_all(&chunk(json!({}), Some("stop"))).await?;
            conn.write_all(&event("[DONE]")).await?;
        }
        "short" => {
            conn.write_all(HEAD.as_bytes()).await?;
            conn.write_all(&replies.short).await?;
        }
        _ => {
            let body = json!({"error": {"message": format!("no route {path}"), "type": "not_found_error"}}).to_string();
            conn.write_all(
                format!(
                    "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .await?;
        }
    }
    conn.shutdown().await?;
    Ok(())
}

/// The role of the last message of a chat-completions body.
fn last_role(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    Some(
        v["messages"].as_array()?.last()?["role"]
            .as_str()?
            .to_string(),
    )
}

/// One request: its path and its body (by Content-Length).
async fn read_request(conn: &mut TcpStream) -> anyhow::Result<(String, Vec<u8>)> {
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut tmp = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        let n = conn.read(&mut tmp).await?;
        anyhow::ensure!(n > 0, "the client closed before the end of the headers");
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .context("no request line")?
        .to_string();
    let length: usize = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = conn.read(&mut tmp).await?;
        anyhow::ensure!(n > 0, "the client closed before the end of the body");
        body.extend_from_slice(&tmp[..n]);
    }
    body.truncate(length);
    Ok((path, body))
}
