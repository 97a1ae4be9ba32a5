//! `flyto-bench sessions`, MCP part: one tool call to a stdio MCP server
//! (`fake-mcp`'s `echo`) through flytod's MCP tool — the rmcp client, the
//! stdout filter, the argument check, timeout and rendering — against the
//! same call on the same server made by a bare client (JSON-RPC lines
//! written and read by hand over the child's pipes), in the same run.

use anyhow::Context;
use flyto_actors::mcp::conn::{Handler, Host, connect};
use flyto_actors::mcp::tool::{McpTool, Slot};
use flyto_actors::tools::sandbox::Profile;
use flyto_actors::tools::{Tool, ToolContext};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const CALLS: usize = 2_000;
const WARMUP: usize = 200;

pub fn run(rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    println!("\n== MCP: one `echo` tool call over stdio, {CALLS} calls after {WARMUP} warm-up ==");
    let server = flyto_tests::bin("fake-mcp");
    if !server.exists() {
        println!(
            "MCP call overhead: not measured ({} is missing: run `cargo build --release --workspace --bins`)",
            server.display()
        );
        return Ok(());
    }
    let bare = bare_calls(&server)?;
    let flyto = rt.block_on(flyto_calls(&server))?;
    let p50 = |v: &[Duration]| v[v.len() / 2];
    let (b, f) = (p50(&bare), p50(&flyto));
    println!(
        "MCP tool call p50: bare JSON-RPC client {:.1}us, through flytod's MCP tool {:.1}us: ratio {:.2}, overhead {:.1}us per call",
        b.as_secs_f64() * 1e6,
        f.as_secs_f64() * 1e6,
        f.as_secs_f64() / b.as_secs_f64(),
        f.saturating_sub(b).as_secs_f64() * 1e6,
    );
    Ok(())
}

/// Round trips of a hand-written client, sorted.
fn bare_calls(server: &std::path::Path) -> anyhow::Result<Vec<Duration>> {
    let mut child = Command::new(server)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("start fake-mcp")?;
    let mut to = child.stdin.take().context("stdin")?;
    let mut from = BufReader::new(child.stdout.take().context("stdout")?);
    let mut line = String::new();
    let mut rpc = |msg: Value, answer: bool| -> anyhow::Result<()> {
        writeln!(to, "{msg}")?;
        to.flush()?;
        if answer {
            line.clear();
            from.read_line(&mut line)?;
            anyhow::ensure!(line.contains("\"result\""), "fake-mcp answered {line}");
        }
        Ok(())
    };
    rpc(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}),
        true,
    )?;
    rpc(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        false,
    )?;
    let mut took = Vec::with_capacity(CALLS);
    for i in 0..WARMUP + CALLS {
        let start = Instant::now();
        rpc(
            json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}}),
            true,
        )?;
        if i >= WARMUP {
            took.push(start.elapsed());
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    took.sort();
    Ok(took)
}

/// Calls through flytod's MCP tool, sorted.
async fn flyto_calls(server: &std::path::Path) -> anyhow::Result<Vec<Duration>> {
    let tmp = tempfile::tempdir().context("temp dir")?;
    let section: flyto_actors::mcp::McpSection = serde_json::from_value(json!({
        "servers": {"bench": {"command": server.display().to_string(), "sandbox": "off"}}
    }))
    .context("MCP config")?;
    let specs = flyto_actors::mcp::check(&section).map_err(anyhow::Error::msg)?;
    let host = Host {
        default_cwd: tmp.path().to_path_buf(),
        sandbox_profile: Profile::Off,
        sandbox_network: true,
    };
    let connected = connect(
        &specs[0],
        &host,
        Handler {
            list_changed: Arc::new(|| {}),
        },
        Arc::default(),
    )
    .await
    .map_err(anyhow::Error::msg)?;
    let slot = Arc::new(Slot::default());
    slot.set(Some(connected.service.peer().clone()), None);
    let tool = McpTool {
        model_name: "mcp__bench__echo".into(),
        server: "bench".into(),
        remote_name: "echo".into(),
        description: String::new(),
        schema: "{}".into(),
        read_only: true,
        call_timeout: Duration::from_secs(30),
        max_result_bytes: 1 << 20,
        slot,
        last_use: Arc::default(),
        epoch: tokio::time::Instant::now(),
    };
    let ctx = ToolContext {
        workdir: tmp.path().to_path_buf(),
        env: Vec::new(),
        cancel: CancellationToken::new(),
        approver: None,
        sandbox: None,
        hooks: None,
    };
    let mut took = Vec::with_capacity(CALLS);
    for i in 0..WARMUP + CALLS {
        let start = Instant::now();
        let out = tool.call(&ctx, r#"{"text":"hi"}"#).await;
        if i >= WARMUP {
            took.push(start.elapsed());
        }
        anyhow::ensure!(!out.is_error, "the MCP call failed: {}", out.content);
    }
    drop(connected);
    took.sort();
    Ok(took)
}
