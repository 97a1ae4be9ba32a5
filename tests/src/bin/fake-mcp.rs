//! A scripted MCP server for the tests, written by hand (newline-delimited
//! JSON-RPC on stdio, or streamable HTTP answering JSON on 127.0.0.1).
//!
//! Tools: `echo` (read-only), `fail` (an `isError` result), `slow` (never
//! answers; a cancel is logged), `crash` (the process exits mid-call),
//! `big` (`bytes` of text), `image`, `grow` (adds `late` and says the
//! list changed), `secret` (for deny lists).
//!
//! Flags: `--log FILE` (each message's method, and `cancelled ID`),
//! `--version V` (the protocol version it answers with), `--not-mcp`
//! (prints a banner and never answers), `--bad-schema` (adds a tool with
//! an invalid schema), `--http PORT_FILE` (serve HTTP, write the port),
//! `--token T` (HTTP: require `Authorization: Bearer T`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::Mutex;

struct Opts {
    log: Option<String>,
    version: String,
    not_mcp: bool,
    bad_schema: bool,
    http: Option<String>,
    token: Option<String>,
}

static GROWN: Mutex<bool> = Mutex::new(false);

fn main() {
    let mut opts = Opts {
        log: None,
        version: "2025-06-18".into(),
        not_mcp: false,
        bad_schema: false,
        http: None,
        token: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--log" => opts.log = args.next(),
            "--version" => opts.version = args.next().unwrap(),
            "--not-mcp" => opts.not_mcp = true,
            "--bad-schema" => opts.bad_schema = true,
            "--http" => opts.http = args.next(),
            "--token" => opts.token = args.next(),
            other => panic!("fake-mcp: unknown flag {other}"),
        }
    }
    if let Some(port_file) = opts.http.clone() {
        serve_http(&opts, &port_file);
    } else {
        serve_stdio(&opts);
    }
}

fn log(opts: &Opts, line: &str) {
    if let Some(path) = &opts.log {
        let opened = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path);
        match opened {
            Ok(mut f) => writeln!(f, "{line}").unwrap(),
            Err(e) => {
                eprintln!("fake-mcp: cannot write the log {path}: {e}");
                std::process::exit(1);
            }
        }
    }
}

fn tools(opts: &Opts) -> Value {
    let text_arg =
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
    let none = json!({"type": "object", "properties": {}});
    let mut list = vec![
        json!({"name": "echo", "description": "Echoes its text.", "inputSchema": text_arg, "annotations": {"readOnlyHint": true}}),
        json!({"name": "fail", "description": "Always fails.", "inputSchema": none}),
        json!({"name": "slow", "description": "Never answers.", "inputSchema": none}),
        json!({"name": "crash", "description": "Exits mid-call.", "inputSchema": none}),
        json!({"name": "big", "description": "Answers `bytes` bytes.", "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}}}}),
        json!({"name": "image", "description": "Answers an image.", "inputSchema": none}),
        json!({"name": "grow", "description": "Adds a tool.", "inputSchema": none}),
        json!({"name": "secret", "description": "Must be denied.", "inputSchema": none}),
    ];
    if opts.bad_schema {
        list.push(json!({"name": "broken", "description": "Bad schema.", "inputSchema": {"type": "object", "properties": {"x": {"type": "text"}}}}));
    }
    if *GROWN.lock().unwrap() {
        list.push(json!({"name": "late", "description": "Came later.", "inputSchema": none}));
    }
    json!({ "tools": list })
}

fn text(t: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": t.into()}]})
}

/// The answer to one request (`None`: no answer, ever), and a notification
/// to send after it.
fn answer(opts: &Opts, method: &str, params: &Value) -> (Option<Value>, Option<Value>) {
    match method {
        "initialize" => (
            Some(json!({
                "protocolVersion": opts.version,
                "capabilities": {"tools": {"listChanged": true}},
                "serverInfo": {"name": "fake-mcp", "version": "1.0"}
            })),
            None,
        ),
        "tools/list" => (Some(tools(opts)), None),
        "ping" => (Some(json!({})), None),
        "tools/call" => {
            let name = params["name"].as_str().unwrap_or("");
            let args = &params["arguments"];
            match name {
                "echo" => (
                    Some(text(format!(
                        "echo: {}",
                        args["text"].as_str().unwrap_or("")
                    ))),
                    None,
                ),
                "fail" => (
                    Some(
                        json!({"content": [{"type": "text", "text": "the thing is broken"}], "isError": true}),
                    ),
                    None,
                ),
                "slow" => (None, None),
                "crash" => {
                    eprintln!("fake-mcp: crashing as asked");
                    std::process::exit(3);
                }
                "big" => (
                    Some(text(
                        "x".repeat(args["bytes"].as_u64().unwrap_or(10) as usize),
                    )),
                    None,
                ),
                "image" => (
                    Some(
                        json!({"content": [{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]}),
                    ),
                    None,
                ),
                "grow" => {
                    *GROWN.lock().unwrap() = true;
                    (
                        Some(text("grown")),
                        Some(
                            json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
                        ),
                    )
                }
                "late" => (Some(text("late tool answers")), None),
                "secret" => (Some(text("the secret")), None),
                other => (
                    Some(
                        json!({"content": [{"type": "text", "text": format!("no tool {other}")}], "isError": true}),
                    ),
                    None,
                ),
            }
        }
        _ => (None, None),
    }
}

/// One incoming message: what to write back (responses, notifications).
fn handle(opts: &Opts, msg: &Value) -> Vec<Value> {
    let method = msg["method"].as_str().unwrap_or("");
    if method == "notifications/cancelled" {
        log(opts, &format!("cancelled {}", msg["params"]["requestId"]));
        return vec![];
    }
    log(opts, method);
    let Some(id) = msg.get("id") else {
        return vec![];
    };
    let (result, then) = answer(opts, method, &msg["params"]);
    let mut out = Vec::new();
    match result {
        Some(r) => out.push(json!({"jsonrpc": "2.0", "id": id, "result": r})),
        None if method == "tools/call" => {}
        None => out.push(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("no method {method}")}})),
    }
    out.extend(then);
    out
}

fn serve_stdio(opts: &Opts) {
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    if opts.not_mcp {
        println!("Hello! This is a chat bot, not an MCP server.");
        stdout.flush().unwrap();
        for _ in stdin.lock().lines() {}
        return;
    }
    for line in stdin.lock().lines() {
        let Ok(line) = line else { return };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        for out in handle(opts, &msg) {
            writeln!(stdout, "{out}").unwrap();
            stdout.flush().unwrap();
        }
    }
}

fn serve_http(opts: &Opts, port_file: &str) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::fs::write(format!("{port_file}.tmp"), port.to_string()).unwrap();
    std::fs::rename(format!("{port_file}.tmp"), port_file).unwrap();
    std::thread::scope(|s| {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            s.spawn(move || http_connection(opts, stream));
        }
    });
}

fn http_connection(opts: &Opts, stream: std::net::TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let method = request_line
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string();
        let mut length = 0usize;
        let mut auth = None;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap_or((h, ""));
            match k.to_ascii_lowercase().as_str() {
                "content-length" => length = v.trim().parse().unwrap_or(0),
                "authorization" => auth = Some(v.trim().to_string()),
                _ => {}
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let reply = |out: &mut std::net::TcpStream, status: &str, extra: &str, body: &str| {
            write!(
                out,
                "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            out.flush().unwrap();
        };
        if let Some(t) = &opts.token
            && auth.as_deref() != Some(&format!("Bearer {t}"))
        {
            reply(
                &mut out,
                "401 Unauthorized",
                "WWW-Authenticate: Bearer realm=\"fake\"\r\n",
                "",
            );
            continue;
        }
        if method != "POST" {
            reply(&mut out, "405 Method Not Allowed", "", "");
            continue;
        }
        let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let answers = handle(opts, &msg);
        // Notifications the server sends after a reply need a stream; over
        // plain JSON answers there is none, so they are dropped.
        match answers.into_iter().find(|a| a.get("id").is_some()) {
            Some(a) => reply(
                &mut out,
                "200 OK",
                "Content-Type: application/json\r\nMcp-Session-Id: fake-session\r\n",
                &a.to_string(),
            ),
            None if msg.get("id").is_some() && msg["method"] == "tools/call" => {
                // `slow`: hold the request open until the client gives up.
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
            None => reply(&mut out, "202 Accepted", "", ""),
        }
    }
}
