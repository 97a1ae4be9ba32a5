//! bash: the agent's `bash` tool. It owns the tool's arguments, the
//! permission check before anything runs, and the shape of the result the
//! model reads (combined output with a head/tail cap, exit code, timeout and
//! cancel notes).
//!
//! Running is [`super::process::run`]'s job (own process group, filtered
//! environment from the context, stdin `/dev/null`, timeout, the whole group
//! killed on timeout or cancel); this tool bridges the context's
//! cancellation token to it and kills the group too if its own future is
//! dropped.
//!
//! **Invariant**: nothing runs unless [`Policy::check`] allowed every simple
//! command of the line, or a person attached to the session approved its
//! `ask` (through the context's [`super::Approver`]); a refusal is an error
//! result that says why.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::oneshot;

use super::policy::{Decision, Policy, Rule};
use super::process::{self, CancelReason, CommandSpec, Exit};
use super::{Approval, Tool, ToolContext, ToolFuture, ToolOutput};

/// Timeout when the call gives none.
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;
/// Longest timeout a call may ask for.
pub const MAX_TIMEOUT_SECS: u64 = 600;
/// Output kept for the model, in bytes: the first and last half of it when
/// there is more.
pub const OUTPUT_LIMIT: usize = 30_000;
/// Between SIGTERM and SIGKILL to the process group.
const KILL_GRACE: Duration = Duration::from_secs(1);

const DESCRIPTION: &str = "Runs a bash command in the session's working directory and returns \
its combined stdout and stderr and its exit code. Each call is a fresh shell: `cd` and variables \
do not carry over to the next call. stdin is /dev/null, so interactive programs cannot be used. \
Output longer than 30 000 bytes keeps its first and last 15 000 bytes; redirect big output to a \
file and read parts of it. The default timeout is 120 s (timeout_secs, at most 600); on timeout or \
cancel the command and everything it started are killed. Every command in the line, including \
ones inside pipes, $(...), bash -c '...', eval and heredocs, is checked against the user's \
permission policy first; a refused command is not run and the result says why.";

const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "command": {"type": "string", "description": "The bash command line to run."},
    "timeout_secs": {"type": "integer", "minimum": 1, "maximum": 600, "description": "Seconds before the command is killed (default 120)."},
    "description": {"type": "string", "description": "A few words on what the command does, shown to the user."}
  },
  "required": ["command"],
  "additionalProperties": false
}"#;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    command: String,
    #[serde(default)]
    timeout_secs: Option<u64>,
    #[serde(default)]
    #[expect(
        dead_code,
        reason = "accepted for the user's display; the tool does not use it"
    )]
    description: Option<String>,
}

/// The `bash` tool.
pub struct BashTool {
    policy: SharedPolicy,
    output_limit: usize,
}

/// The policy the daemon swaps on reload; each call reads the current one.
pub type SharedPolicy = Arc<std::sync::RwLock<Arc<Policy>>>;

impl BashTool {
    pub fn new(policy: Arc<Policy>) -> Self {
        Self::shared(Arc::new(std::sync::RwLock::new(policy)))
    }

    /// A tool following `policy` as it is replaced.
    pub fn shared(policy: SharedPolicy) -> Self {
        BashTool {
            policy,
            output_limit: OUTPUT_LIMIT,
        }
    }

    /// Keeps at most `bytes` of output (tests use small values).
    pub fn with_output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = bytes.max(2);
        self
    }

    async fn run(&self, ctx: &ToolContext, args_json: &str) -> ToolOutput {
        let args: Args = match serde_json::from_str(args_json) {
            Ok(a) => a,
            Err(e) => {
                return ToolOutput::error(format!(
                    "bash: invalid arguments ({e}). Expected {{\"command\": \"<bash command \
                     line>\", \"timeout_secs\": <1-{MAX_TIMEOUT_SECS}, optional>}}."
                ));
            }
        };
        if args.command.trim().is_empty() {
            return ToolOutput::error("bash: `command` is empty; give the command line to run.");
        }
        let timeout_secs = args.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS);
        if !(1..=MAX_TIMEOUT_SECS).contains(&timeout_secs) {
            return ToolOutput::error(format!(
                "bash: timeout_secs must be between 1 and {MAX_TIMEOUT_SECS}, not \
                 {timeout_secs}. For longer jobs, start them in the background with output to \
                 a file (`nohup cmd > log 2>&1 &`) and check the file later."
            ));
        }
        let policy = match self.policy.read() {
            Ok(p) => p.clone(),
            Err(_) => {
                return ToolOutput::error(
                    "bash: the permission policy is unavailable; nothing ran",
                );
            }
        };
        let decision = policy.check(&args.command, &ctx.workdir).decision;
        if let Some(refusal) = refusal(ctx, &args.command, &decision).await {
            return ToolOutput::error(refusal);
        }
        if ctx.cancel.is_cancelled() {
            return ToolOutput::error("cancelled before the command started; nothing was run.");
        }
        run_command(ctx, &args.command, timeout_secs, self.output_limit).await
    }
}

impl Tool for BashTool {
    fn name(&self) -> &'static str {
        "bash"
    }

    fn description(&self) -> &'static str {
        DESCRIPTION
    }

    fn input_schema(&self) -> &'static str {
        SCHEMA
    }

    fn concurrency_safe(&self, _args_json: &str) -> bool {
        false
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(self.run(ctx, args_json))
    }
}

/// Why the command may not run; `None` when it may: allowed, or an `ask`
/// that a person attached to the session approved.
async fn refusal(ctx: &ToolContext, line: &str, decision: &Decision) -> Option<String> {
    let Decision::Ask {
        rule,
        command,
        reason,
    } = decision
    else {
        return decision.message();
    };
    let approver = match (&ctx.approver, rule) {
        // What cannot be parsed cannot be shown for approval either.
        (Some(approver), r) if *r != Rule::Unparsable => approver,
        _ => return decision.message(),
    };
    match approver.approve(line, &format!("{rule}: {reason}")).await {
        Approval::Allowed => None,
        Approval::NoOneAttached => decision.message(),
        Approval::Denied => Some(format!(
            "Not run: the user declined `{command}` ({rule}). Nothing was executed. Do not \
             retry it; use another approach, or ask the user what they want instead."
        )),
        Approval::TimedOut(after) => Some(format!(
            "Not run: `{command}` needs the user's approval ({rule}: {reason}), and no one \
             answered within {} s, so it was refused. Nothing was executed. Do not retry it \
             unchanged; use another approach or tell the user.",
            after.as_secs()
        )),
    }
}

/// Kills the process group if the tool's future is dropped mid-run.
struct GroupGuard {
    pgid: Arc<AtomicI32>,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            process::kill_group(self.pgid.load(Ordering::SeqCst), libc::SIGKILL);
        }
    }
}

async fn run_command(
    ctx: &ToolContext,
    command: &str,
    timeout_secs: u64,
    limit: usize,
) -> ToolOutput {
    // The log file keeps the head of the output; process::run keeps the tail.
    let log_dir = match tempfile::Builder::new().prefix("flyto-bash-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            return ToolOutput::error(format!(
                "bash: cannot create a temporary directory for the output ({e}); check that \
                 TMPDIR is writable."
            ));
        }
    };
    let log_path = log_dir.path().join("output");
    let spec = CommandSpec {
        // stderr joins stdout so the two interleave as on a terminal.
        command: format!("exec 2>&1; {command}"),
        workdir: ctx.workdir.clone(),
        env: ctx.env.clone(),
        timeout: Duration::from_secs(timeout_secs),
        kill_grace: KILL_GRACE,
        log_path: Some(log_path.clone()),
        log_max: limit as u64,
        tail_max: limit / 2,
        // The agent's commands reach flytod only through FLYTO_PLAN_SOCK.
        confined: true,
        sandbox: ctx.sandbox.clone(),
    };

    let pgid = Arc::new(AtomicI32::new(0));
    let mut guard = GroupGuard {
        pgid: pgid.clone(),
        armed: true,
    };
    let (cancel_tx, cancel_rx) = oneshot::channel();
    let run = process::run(spec, cancel_rx, move |id| pgid.store(id, Ordering::SeqCst));
    tokio::pin!(run);
    let outcome = tokio::select! {
        outcome = &mut run => outcome,
        _ = ctx.cancel.cancelled() => {
            let _ = cancel_tx.send(CancelReason::User);
            run.await
        }
    };
    guard.armed = false;

    let output = combined_output(&log_path, &outcome, limit);
    let mut body = if output.is_empty() {
        "(no output)\n".to_string()
    } else if output.ends_with('\n') {
        output
    } else {
        format!("{output}\n")
    };
    // The kernel's refusal reads like any other; say where it came from.
    if let Some(sandbox) = &ctx.sandbox
        && !sandbox.is_off()
        && looks_refused(&body)
    {
        body.push_str(&sandbox.refusal_note());
        body.push('\n');
    }
    match outcome.exit {
        Exit::Code(0) => ToolOutput::ok(format!("{body}exit code 0")),
        Exit::Code(code) => ToolOutput::error(format!("{body}exit code {code}")),
        Exit::Signal(sig) => ToolOutput::error(format!(
            "{body}killed by signal {sig} ({})",
            signal_name(sig)
        )),
        Exit::TimedOut => ToolOutput::error(format!(
            "{body}timed out after {timeout_secs} s: the command and everything it started were \
             killed (exit code {}). Give a larger timeout_secs (at most {MAX_TIMEOUT_SECS}), or \
             run it in the background with output to a file and check on it later.",
            process::TIMEOUT_EXIT
        )),
        Exit::Cancelled(_) => ToolOutput::error(format!(
            "{body}cancelled: the command and everything it started were killed."
        )),
        Exit::SpawnFailed(why) => {
            ToolOutput::error(format!("bash: the command could not be started: {why}"))
        }
    }
}

/// Whether output carries the errors a sandbox refusal produces.
fn looks_refused(output: &str) -> bool {
    [
        "Permission denied",
        "Read-only file system",
        "Operation not permitted",
    ]
    .iter()
    .any(|e| output.contains(e))
}

/// The output as the model sees it: everything when it fits in `limit`
/// bytes, else the first and last half with a note on the cut.
fn combined_output(log_path: &Path, outcome: &process::Outcome, limit: usize) -> String {
    // Only bash's own early errors (before `exec 2>&1` ran) are here.
    let early = &outcome.stderr_tail;
    let logged = std::fs::read(log_path).ok();
    let Some(mut logged) = logged else {
        // No log: the tail is all there is.
        return format!("{early}{}", outcome.stdout_tail);
    };
    if !outcome.log_truncated {
        logged.truncate(limit);
        return format!("{early}{}", String::from_utf8_lossy(&logged));
    }
    logged.truncate(limit / 2);
    let head = utf8_prefix(&logged);
    format!(
        "{early}{head}\n\n[… output cut: it was longer than {limit} bytes; showing the first and \
         last {} bytes. Redirect the output to a file and read the part you need, or filter it \
         with grep/head/tail …]\n\n{}",
        limit / 2,
        outcome.stdout_tail
    )
}

/// The longest valid UTF-8 prefix (the cut may split a character).
fn utf8_prefix(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_string(),
        Err(e) => String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned(),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::policy::{PermissionsConfig, Policy};
    use std::time::Instant;
    use tokio_util::sync::CancellationToken;

    fn tool() -> BashTool {
        BashTool::new(Arc::new(Policy::builtin_only(Some("/home/u".into()))))
    }

    fn ctx(dir: &Path) -> ToolContext {
        ToolContext {
            workdir: dir.to_path_buf(),
            env: vec![
                ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
                ("HOME".into(), dir.display().to_string()),
            ],
            cancel: CancellationToken::new(),
            approver: None,
            sandbox: None,
            hooks: None,
        }
    }

    fn args(command: &str) -> String {
        serde_json::json!({ "command": command }).to_string()
    }

    #[tokio::test]
    async fn runs_in_the_workdir_with_the_context_env_and_reports_the_exit_code() {
        let dir = tempfile::tempdir().unwrap();
        let mut cx = ctx(dir.path());
        cx.env.push(("FLYTO_SESSION_ID".into(), "s-42".into()));
        let out = tool()
            .call(
                &cx,
                &args("pwd; echo \"$FLYTO_SESSION_ID\"; echo oops >&2; exit 3"),
            )
            .await;
        let want = format!("{}\ns-42\noops\nexit code 3", dir.path().display());
        assert_eq!(out.content, want);
        assert!(out.is_error);

        let out = tool().call(&cx, &args("true")).await;
        assert_eq!(out, ToolOutput::ok("(no output)\nexit code 0"));
    }

    #[tokio::test]
    async fn stdout_and_stderr_interleave_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let out = tool()
            .call(
                &ctx(dir.path()),
                &args("echo 1; echo 2 >&2; echo 3; echo 4 >&2"),
            )
            .await;
        assert_eq!(out.content, "1\n2\n3\n4\nexit code 0");
    }

    #[tokio::test]
    async fn refused_commands_do_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let cases = [
            format!("touch {} && rm -rf /", marker.display()),
            format!("touch {}; echo $(rm -rf ~)", marker.display()),
            format!("touch {} | bash -c 'git push --force'", marker.display()),
            format!("touch {}; echo 'unterminated", marker.display()),
        ];
        for command in cases {
            let out = tool().call(&ctx(dir.path()), &args(&command)).await;
            assert!(out.is_error, "{command}: {out:?}");
            assert!(
                out.content.starts_with("Not run:"),
                "{command}: {}",
                out.content
            );
            assert!(!marker.exists(), "{command} ran");
        }
    }

    #[tokio::test]
    async fn config_rules_apply_to_the_tool() {
        let dir = tempfile::tempdir().unwrap();
        let policy = Policy::new(
            &PermissionsConfig {
                deny: vec!["echo secret".into()],
                ..Default::default()
            },
            None,
        )
        .unwrap();
        let tool = BashTool::new(Arc::new(policy));
        let out = tool.call(&ctx(dir.path()), &args("echo secret")).await;
        assert!(
            out.content.contains("deny rule \"echo secret\""),
            "{}",
            out.content
        );
        let out = tool.call(&ctx(dir.path()), &args("echo public")).await;
        assert_eq!(out.content, "public\nexit code 0");
    }

    #[tokio::test]
    async fn bad_arguments_are_explained() {
        let dir = tempfile::tempdir().unwrap();
        let cx = ctx(dir.path());
        let cases = [
            ("{}", "missing field `command`"),
            ("not json", "invalid arguments"),
            (
                r#"{"command": "ls", "timeout": 5}"#,
                "unknown field `timeout`",
            ),
            (r#"{"command": "  "}"#, "`command` is empty"),
            (
                r#"{"command": "ls", "timeout_secs": 0}"#,
                "between 1 and 600",
            ),
            (
                r#"{"command": "ls", "timeout_secs": 601}"#,
                "between 1 and 600",
            ),
        ];
        for (json, needle) in cases {
            let out = tool().call(&cx, json).await;
            assert!(
                out.is_error && out.content.contains(needle),
                "{json}: {}",
                out.content
            );
        }
        let ok = tool()
            .call(
                &cx,
                r#"{"command": "echo hi", "timeout_secs": 5, "description": "greet"}"#,
            )
            .await;
        assert_eq!(ok.content, "hi\nexit code 0");
    }

    #[tokio::test]
    async fn timeout_kills_the_command_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let out = tool()
            .call(
                &ctx(dir.path()),
                r#"{"command": "echo before; sleep 30", "timeout_secs": 1}"#,
            )
            .await;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert!(out.is_error);
        assert!(
            out.content.starts_with("before\ntimed out after 1 s"),
            "{}",
            out.content
        );
        assert!(out.content.contains("exit code 124"), "{}", out.content);
    }

    /// Pids of live processes whose environment holds `marker`.
    fn with_marker(marker: &str) -> Vec<i32> {
        let want = format!("FLYTO_TEST_MARKER={marker}");
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .map(|env| env.split(|b| *b == 0).any(|kv| kv == want.as_bytes()))
                    .unwrap_or(false)
            })
            .collect()
    }

    async fn wait_until(what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn cancel_kills_the_whole_process_group_promptly() {
        let dir = tempfile::tempdir().unwrap();
        let marker = format!(
            "bash-cancel-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        );
        let mut cx = ctx(dir.path());
        cx.env.push(("FLYTO_TEST_MARKER".into(), marker.clone()));
        let cancel = cx.cancel.clone();
        let tool = tool();
        let call = tokio::spawn(async move {
            tool.call(&cx, &args("sleep 30 & sleep 30; echo never"))
                .await
        });

        // bash, the background sleep and the foreground sleep (or bash
        // replaced by it): at least two carry the marker.
        wait_until("the sleeps to start", Duration::from_secs(10), || {
            with_marker(&marker).len() >= 2
        })
        .await;
        let cancelled_at = Instant::now();
        cancel.cancel();
        let out = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("the call returns after cancel")
            .unwrap();
        let latency = cancelled_at.elapsed();
        assert!(latency < Duration::from_secs(3), "cancel took {latency:?}");
        assert!(out.is_error);
        assert!(out.content.contains("cancelled"), "{}", out.content);
        assert!(!out.content.contains("never"), "{}", out.content);
        wait_until(
            "every marked process to die",
            Duration::from_secs(5),
            || with_marker(&marker).is_empty(),
        )
        .await;
    }

    #[tokio::test]
    async fn dropping_the_call_kills_the_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let marker = format!("bash-drop-{}-{}", std::process::id(), rand::random::<u64>());
        let mut cx = ctx(dir.path());
        cx.env.push(("FLYTO_TEST_MARKER".into(), marker.clone()));
        let tool = tool();
        let call = tokio::spawn(async move { tool.call(&cx, &args("sleep 30 & sleep 30")).await });
        wait_until("the sleeps to start", Duration::from_secs(10), || {
            with_marker(&marker).len() >= 2
        })
        .await;
        call.abort();
        let _ = call.await;
        wait_until(
            "every marked process to die",
            Duration::from_secs(5),
            || with_marker(&marker).is_empty(),
        )
        .await;
    }

    #[tokio::test]
    async fn a_cancelled_context_runs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cx = ctx(dir.path());
        cx.cancel.cancel();
        let marker = dir.path().join("ran");
        let out = tool()
            .call(&cx, &args(&format!("touch {}", marker.display())))
            .await;
        assert!(
            out.is_error && out.content.contains("nothing was run"),
            "{}",
            out.content
        );
        assert!(!marker.exists());
    }

    #[tokio::test]
    async fn long_output_keeps_head_and_tail_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let tool = tool().with_output_limit(1000);
        let out = tool
            .call(
                &ctx(dir.path()),
                &args("for i in $(seq 1 2000); do echo line-$i; done"),
            )
            .await;
        assert!(
            out.content.starts_with("line-1\nline-2\n"),
            "{}",
            &out.content[..50]
        );
        assert!(
            out.content.ends_with("line-1999\nline-2000\nexit code 0"),
            "{}",
            out.content
        );
        assert!(out.content.contains("output cut"), "{}", out.content);
        assert!(!out.content.contains("line-1000\n"), "the middle is cut");
        assert!(
            out.content.len() < 1000 + 400,
            "{} bytes",
            out.content.len()
        );

        // Just under the limit: nothing is cut.
        let out = tool
            .call(
                &ctx(dir.path()),
                &args("head -c 999 /dev/zero | tr '\\0' x"),
            )
            .await;
        assert_eq!(out.content, format!("{}\nexit code 0", "x".repeat(999)));
    }

    #[tokio::test]
    async fn a_signal_death_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let out = tool().call(&ctx(dir.path()), &args("kill -SEGV $$")).await;
        assert!(
            out.content.contains("killed by signal 11 (SIGSEGV)"),
            "{}",
            out.content
        );
    }

    #[test]
    fn the_tool_describes_itself() {
        let t = tool();
        assert_eq!(t.name(), "bash");
        assert!(!t.concurrency_safe(&args("ls")));
        let schema: serde_json::Value = serde_json::from_str(t.input_schema()).unwrap();
        assert_eq!(schema["required"][0], "command");
        assert!(t.description().contains("permission policy"));
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        assert_eq!(utf8_prefix("aé".as_bytes()), "aé");
        assert_eq!(utf8_prefix(&"aé".as_bytes()[..2]), "a");
    }
}
