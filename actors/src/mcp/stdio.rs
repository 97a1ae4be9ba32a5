//! A stdio server's process: started like the agent's commands (its own
//! process group, dead with flytod, recorded in the spawn table as
//! confined, in the sandbox), with a filter between its stdout and the
//! MCP client that keeps only JSON lines. What else it prints is kept (the
//! first such line) for the error that says it is not an MCP server; a
//! line over the size limit ends the connection instead of filling memory.

use super::clip;
use super::config::Scrubber;
use crate::tools::process::{self, Spawn, SpawnGuard};
use crate::tools::sandbox::{self, SandboxSpec};
use std::collections::VecDeque;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};

/// Lines of stderr kept for error messages.
const STDERR_LINES: usize = 5;

/// What the server wrote besides MCP, and why its stream ended early.
#[derive(Debug, Default)]
pub struct Noise {
    /// The first line on stdout that was not JSON.
    pub not_json: Option<String>,
    /// Set when the filter cut the connection.
    pub cut: Option<String>,
    /// Its last lines on stderr.
    pub stderr: VecDeque<String>,
}

/// Tools a server listed as needing task-based execution
/// (`execution.taskSupport = "required"`, MCP 2025-11-25), which rmcp's
/// tool type does not carry: read off the `tools/list` answers on their
/// way to the client.
pub type TaskTools = Arc<Mutex<std::collections::HashSet<String>>>;

/// Notes the tools of a `tools/list` answer (one JSON-RPC message) that
/// require tasks.
pub(super) fn note_task_tools(line: &[u8], tasks: &TaskTools) {
    // Cheap test first: most lines are not tool lists.
    if !line.windows(11).any(|w| w == b"taskSupport") {
        return;
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
        return;
    };
    let Some(tools) = v["result"]["tools"].as_array() else {
        return;
    };
    let mut set = tasks.lock().unwrap_or_else(|p| p.into_inner());
    for t in tools {
        if let Some(name) = t["name"].as_str() {
            if t["execution"]["taskSupport"] == "required" {
                set.insert(name.to_string());
            } else {
                set.remove(name);
            }
        }
    }
}

/// The running process: killed (its whole group) when dropped.
pub struct ServerProcess {
    pgid: i32,
    child: tokio::process::Child,
    _entry: Option<SpawnGuard>,
    pub noise: Arc<Mutex<Noise>>,
    pub task_tools: TaskTools,
    /// The task keeping its stderr: done once the pipe closed.
    stderr: Option<tokio::task::JoinHandle<()>>,
}

impl ServerProcess {
    /// Waits (briefly) for a failing server to exit and its last stderr
    /// lines to be read, so that [`Self::explain`] has them.
    pub async fn settle(&mut self) -> Option<String> {
        // Generous: on a loaded machine the exit and the last read of
        // stderr can take a while, and the message is worth the wait.
        let limit = std::time::Duration::from_secs(3);
        let status = match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(Ok(s)) => Some(s.to_string()),
            Ok(Err(e)) => {
                tracing::debug!("cannot wait for an MCP server's exit: {e}");
                None
            }
            Err(_) => None,
        };
        if let Some(task) = self.stderr.take() {
            let _ = tokio::time::timeout(limit, task).await;
        }
        status
    }

    /// What the server said that explains a failure, for error messages.
    pub fn explain(&self) -> String {
        let noise = self.noise.lock().unwrap_or_else(|p| p.into_inner());
        let mut parts = Vec::new();
        if let Some(cut) = &noise.cut {
            parts.push(cut.clone());
        }
        if let Some(line) = &noise.not_json {
            parts.push(format!(
                "it wrote `{}` on stdout, which is not MCP (JSON-RPC): is the command an MCP server, and does it log to stderr?",
                clip(line, 120)
            ));
        }
        if !noise.stderr.is_empty() {
            let lines: Vec<&str> = noise.stderr.iter().map(String::as_str).collect();
            parts.push(format!(
                "its stderr ended with: {}",
                clip(&lines.join(" | "), 300)
            ));
        }
        parts.join("; ")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        process::kill_group(self.pgid, libc::SIGKILL);
    }
}

/// Starts `command args` in `cwd` with `env` (already filtered), confined
/// by `sandbox`. Returns the process and the two ends the MCP client
/// speaks over: filtered stdout, and stdin.
pub fn spawn(
    command: &str,
    args: &[String],
    cwd: &Path,
    env: &[(String, String)],
    sandbox: Option<&SandboxSpec>,
    max_line: usize,
    secrets: Arc<Scrubber>,
) -> Result<
    (
        ServerProcess,
        impl AsyncRead + Send + Unpin + 'static,
        tokio::process::ChildStdin,
    ),
    String,
> {
    let prepared = match sandbox.map(|s| sandbox::prepare(s, None)) {
        Some(Ok(p)) => p.map(Arc::new),
        Some(Err(e)) => return Err(format!("cannot confine it: {e}")),
        None => None,
    };
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // prepare() made it, private; unconfined, the system's TMPDIR stays.
    if let Some(tmp) = sandbox
        .filter(|_| prepared.is_some())
        .and_then(|s| s.tmpdir.as_ref())
    {
        cmd.env("TMPDIR", tmp);
    }
    process::confine_child(&mut cmd, prepared);
    let (spawned, entry) = process::spawn_recorded(
        &mut cmd,
        Spawn {
            start_time: 0,
            confined: true,
            plan_sock: None,
        },
    );
    let mut child = spawned.map_err(|e| {
        format!(
            "cannot start `{command}` in {}: {e}; check `command` (a program on PATH or a full path) and `cwd`",
            cwd.display()
        )
    })?;
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    let (Some(stdout), Some(stdin), Some(stderr)) =
        (child.stdout.take(), child.stdin.take(), child.stderr.take())
    else {
        return Err("its pipes were not set up".into());
    };
    let noise = Arc::new(Mutex::new(Noise::default()));
    let (reader, writer) = tokio::io::duplex(64 * 1024);
    let task_tools = TaskTools::default();
    tokio::spawn(filter(
        stdout,
        writer,
        noise.clone(),
        max_line,
        secrets.clone(),
        task_tools.clone(),
    ));
    let stderr = tokio::spawn(keep_stderr(stderr, noise.clone(), secrets));
    Ok((
        ServerProcess {
            pgid,
            child,
            _entry: entry,
            noise,
            task_tools,
            stderr: Some(stderr),
        },
        reader,
        stdin,
    ))
}

/// Forwards the JSON lines of `from` to `to`; ends `to` when `from` ends
/// or a line is over `max_line` bytes.
async fn filter(
    from: tokio::process::ChildStdout,
    mut to: tokio::io::DuplexStream,
    noise: Arc<Mutex<Noise>>,
    max_line: usize,
    secrets: Arc<Scrubber>,
    task_tools: TaskTools,
) {
    let mut from = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut limited = (&mut from).take(max_line as u64 + 1);
        match limited.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.len() > max_line && !line.ends_with(b"\n") {
            let mut n = noise.lock().unwrap_or_else(|p| p.into_inner());
            n.cut = Some(format!(
                "it sent a message of more than {max_line} bytes, over the size limit (max_result_bytes): the connection was closed"
            ));
            return;
        }
        let text = String::from_utf8_lossy(&line);
        let trimmed = text.trim();
        if trimmed.is_empty() {
            continue;
        }
        if trimmed.starts_with('{') || trimmed.starts_with('[') {
            note_task_tools(&line, &task_tools);
            if to.write_all(&line).await.is_err() {
                return;
            }
            if !line.ends_with(b"\n") && to.write_all(b"\n").await.is_err() {
                return;
            }
        } else {
            let trimmed = secrets.scrub(trimmed);
            let trimmed = trimmed.as_str();
            let mut n = noise.lock().unwrap_or_else(|p| p.into_inner());
            if n.not_json.is_none() {
                n.not_json = Some(trimmed.to_string());
            }
            tracing::debug!(line = %clip(trimmed, 200), "MCP server wrote a line that is not JSON on stdout");
        }
    }
}

async fn keep_stderr(
    from: tokio::process::ChildStderr,
    noise: Arc<Mutex<Noise>>,
    secrets: Arc<Scrubber>,
) {
    let mut lines = BufReader::new(from.take(16 << 20)).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line = secrets.scrub(line.trim());
        if line.is_empty() {
            continue;
        }
        tracing::debug!(line = %clip(&line, 300), "MCP server stderr");
        let mut n = noise.lock().unwrap_or_else(|p| p.into_inner());
        if n.stderr.len() == STDERR_LINES {
            n.stderr.pop_front();
        }
        n.stderr.push_back(clip(&line, 200));
    }
}

/// The private TMPDIR of server `name`.
pub fn tmpdir(name: &str) -> std::path::PathBuf {
    sandbox::tmpdir_for(&format!("mcp-{name}"))
}
