//! hooks: people's own commands, run at points of a session's run, that
//! see what the agent does (one JSON object on stdin) and may veto it.
//! A hook runs like the agent's own commands: in the session's workdir,
//! with its filtered environment, in its sandbox, in a process group of
//! its own that a timeout or a cancel kills whole.
//!
//! What a hook's end means: exit 0 goes on (stdout may hold a JSON
//! decision: `{"decision": "block", "reason": "..."}` or
//! `{"additional_context": "..."}`); exit 2 blocks, with stderr as the
//! reason; anything else (another exit, a timeout, a command that cannot
//! start) is logged and does not block, unless the hook is `required`,
//! when it blocks. Hooks of one event run in config order; for the events
//! that can block, one after the other until one blocks; for the others,
//! in the background.
//!
//! It owns the hook specs and their last outcomes and nothing else: it
//! never writes a transcript; the session room decides what a verdict
//! does.

use crate::tools::process::{self, CommandSpec, Exit};
use crate::tools::sandbox::SandboxSpec;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Outcomes kept per hook for `hook_list`.
const KEEP_OUTCOMES: usize = 5;
/// Bytes of a hook's stdout and stderr read.
const OUTPUT_MAX: usize = 64 * 1024;
/// Characters of a reason or context passed on.
const TEXT_MAX: usize = 4_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookEvent {
    /// A session's first run starts (background).
    SessionStart,
    /// A session is deleted (background).
    SessionEnd,
    /// A compaction of the context starts (background).
    PreCompact,
    /// The run waits for a person (an approval) (background).
    Notification,
    /// A job fired: its plan was submitted (background).
    JobFired,
    /// A plan ended: succeeded, failed or cancelled (background).
    PlanFinished,
    /// A run starts with the user's message: may block it or add context.
    UserPrompt,
    /// Before a tool call runs: may block it (the model is told why).
    PreToolUse,
    /// After a tool call, with its result (background).
    PostToolUse,
    /// The run is about to end: may ask it to go on once.
    Stop,
}

impl HookEvent {
    pub const ALL: [HookEvent; 10] = [
        HookEvent::SessionStart,
        HookEvent::SessionEnd,
        HookEvent::PreCompact,
        HookEvent::Notification,
        HookEvent::JobFired,
        HookEvent::PlanFinished,
        HookEvent::UserPrompt,
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::Stop,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "session_start",
            HookEvent::SessionEnd => "session_end",
            HookEvent::PreCompact => "pre_compact",
            HookEvent::Notification => "notification",
            HookEvent::JobFired => "job_fired",
            HookEvent::PlanFinished => "plan_finished",
            HookEvent::UserPrompt => "user_prompt",
            HookEvent::PreToolUse => "pre_tool_use",
            HookEvent::PostToolUse => "post_tool_use",
            HookEvent::Stop => "stop",
        }
    }

    pub fn parse(s: &str) -> Option<HookEvent> {
        HookEvent::ALL.into_iter().find(|e| e.as_str() == s)
    }

    /// Whether its hooks run before the run goes on (and may block it).
    pub fn blocking(self) -> bool {
        matches!(
            self,
            HookEvent::UserPrompt | HookEvent::PreToolUse | HookEvent::Stop
        )
    }
}

/// One `[[hooks]]` entry.
#[derive(Debug, Clone)]
pub struct HookSpec {
    /// Its name in events and `hook_list` (the config's `name`, or
    /// `<event>#<n>`).
    pub name: String,
    pub event: HookEvent,
    /// Tool names it applies to (tool events only); `None`: all.
    pub matcher: Option<globset::GlobMatcher>,
    pub matcher_text: Option<String>,
    pub command: String,
    pub timeout: Duration,
    /// A failure or timeout blocks instead of being ignored.
    pub required: bool,
}

impl HookSpec {
    fn applies_to(&self, tool: Option<&str>) -> bool {
        match (&self.matcher, tool) {
            (Some(m), Some(t)) => m.is_match(t),
            (Some(_), None) => false,
            (None, _) => true,
        }
    }
}

/// A glob for tool names (`bash`, `mcp__*`), or why it is not one.
pub fn tool_matcher(pattern: &str) -> Result<globset::GlobMatcher, String> {
    globset::Glob::new(pattern)
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("`{pattern}` is not a tool name or glob: {e}"))
}

/// How one hook run ended, as events and `hook_list` show it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ran {
    pub name: String,
    pub event: HookEvent,
    /// `ok`, `blocked: <reason>`, `context added`, `failed: <why>`,
    /// `timed out after Ns`.
    pub outcome: String,
    pub duration_ms: u64,
    pub at_ms: u64,
}

/// What the hooks of an event decided.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Verdict {
    /// `Some((hook, reason))`: blocked.
    pub blocked: Option<(String, String)>,
    /// Context the hooks added, in order.
    pub context: Vec<String>,
}

/// Where a hook runs: the session's workdir, environment and sandbox.
#[derive(Clone)]
pub struct HookEnv {
    pub workdir: PathBuf,
    pub env: Vec<(String, String)>,
    pub sandbox: Option<SandboxSpec>,
    pub cancel: CancellationToken,
}

/// The configured hooks and what they did last.
#[derive(Default)]
pub struct Hooks {
    specs: Mutex<Arc<Vec<HookSpec>>>,
    last: Mutex<HashMap<String, VecDeque<Ran>>>,
}

fn clip(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(TEXT_MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

impl Hooks {
    pub fn new(specs: Vec<HookSpec>) -> Hooks {
        Hooks {
            specs: Mutex::new(Arc::new(specs)),
            last: Mutex::new(HashMap::new()),
        }
    }

    /// Config reloaded: the new specs apply from the next event.
    pub fn replace(&self, specs: Vec<HookSpec>) {
        if let Ok(mut s) = self.specs.lock() {
            *s = Arc::new(specs);
        }
    }

    pub fn specs(&self) -> Arc<Vec<HookSpec>> {
        self.specs.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The last outcomes of the hook `name`, oldest first.
    pub fn last(&self, name: &str) -> Vec<Ran> {
        self.last
            .lock()
            .ok()
            .and_then(|l| l.get(name).map(|q| q.iter().cloned().collect()))
            .unwrap_or_default()
    }

    fn record(&self, ran: &Ran) {
        if let Ok(mut l) = self.last.lock() {
            let q = l.entry(ran.name.clone()).or_default();
            q.push_back(ran.clone());
            while q.len() > KEEP_OUTCOMES {
                q.pop_front();
            }
        }
    }

    /// Whether any hook listens for `event` (on `tool`).
    pub fn any(&self, event: HookEvent, tool: Option<&str>) -> bool {
        self.specs()
            .iter()
            .any(|s| s.event == event && s.applies_to(tool))
    }

    /// Runs the hooks of `event` (those matching `tool`) with `input`:
    /// blocking events in order until one blocks, others in a background
    /// task (their verdict is empty). `report` hears of each run.
    pub async fn run(
        self: &Arc<Self>,
        event: HookEvent,
        tool: Option<&str>,
        input: Value,
        env: &HookEnv,
        now_ms: impl Fn() -> u64 + Send + 'static,
        report: Arc<dyn Fn(Ran) + Send + Sync>,
    ) -> Verdict {
        let specs: Vec<HookSpec> = self
            .specs()
            .iter()
            .filter(|s| s.event == event && s.applies_to(tool))
            .cloned()
            .collect();
        if specs.is_empty() {
            return Verdict::default();
        }
        let mut input = input;
        if let Value::Object(m) = &mut input {
            m.insert("event".into(), Value::String(event.as_str().into()));
        }
        let text = input.to_string();
        if !event.blocking() {
            let (me, env) = (self.clone(), env.clone());
            tokio::spawn(async move {
                for spec in specs {
                    let (ran, _) = run_one(&spec, &text, &env, now_ms()).await;
                    me.record(&ran);
                    report(ran);
                }
            });
            return Verdict::default();
        }
        let mut verdict = Verdict::default();
        for spec in specs {
            let (ran, said) = run_one(&spec, &text, env, now_ms()).await;
            self.record(&ran);
            report(ran);
            match said {
                Said::Block(reason) => {
                    verdict.blocked = Some((spec.name.clone(), reason));
                    break;
                }
                Said::Context(c) => verdict.context.push(c),
                Said::Nothing => {}
            }
            if env.cancel.is_cancelled() {
                break;
            }
        }
        verdict
    }
}

enum Said {
    Nothing,
    Block(String),
    Context(String),
}

/// The decision a hook's stdout carries, if it is one.
fn decision(stdout: &str) -> Said {
    let Ok(Value::Object(m)) = serde_json::from_str::<Value>(stdout.trim()) else {
        return Said::Nothing;
    };
    if m.get("decision").and_then(Value::as_str) == Some("block") {
        let reason = m
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("no reason given");
        return Said::Block(clip(reason));
    }
    match m.get("additional_context").and_then(Value::as_str) {
        Some(c) if !c.trim().is_empty() => Said::Context(clip(c)),
        _ => Said::Nothing,
    }
}

async fn run_one(spec: &HookSpec, input: &str, env: &HookEnv, at_ms: u64) -> (Ran, Said) {
    let started = Instant::now();
    // The input on stdin through a heredoc: the JSON is one line, so the
    // end marker cannot occur in it.
    let command = format!(
        "{{\n{}\n}} <<'FLYTO_HOOK_INPUT'\n{input}\nFLYTO_HOOK_INPUT\n",
        spec.command
    );
    let cmd = CommandSpec {
        command,
        workdir: env.workdir.clone(),
        env: env.env.clone(),
        timeout: spec.timeout,
        kill_grace: Duration::from_secs(1),
        log_path: None,
        log_max: 0,
        tail_max: OUTPUT_MAX,
        confined: true,
        sandbox: env.sandbox.clone(),
    };
    let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel();
    let run = process::run(cmd, cancel_rx, |_| {});
    tokio::pin!(run);
    let outcome = tokio::select! {
        o = &mut run => o,
        _ = env.cancel.cancelled() => {
            let _ = cancel_tx.send(process::CancelReason::User);
            run.await
        }
    };
    let sandboxed = env.sandbox.as_ref().is_some_and(|s| !s.is_off());
    // A failure says why and what to do, in the session's events (its
    // outcome), `hook_list` and the log alike: a hook that fails in the
    // sandbox must not look like one that worked.
    let failure = failure(spec, &outcome.exit, &outcome.stderr_tail, sandboxed, env);
    if let Some((why, todo)) = &failure {
        let then = if spec.required {
            "blocking"
        } else {
            "going on"
        };
        tracing::warn!(
            hook = %spec.name,
            event = spec.event.as_str(),
            workdir = %env.workdir.display(),
            "hook `{}` ({}) {why}: {todo}; {then}",
            spec.name,
            spec.event.as_str()
        );
    }
    let said = match (&outcome.exit, &failure) {
        (Exit::Code(0), _) => decision(&outcome.stdout_tail),
        (Exit::Code(2), _) => {
            let reason = clip(&outcome.stderr_tail);
            Said::Block(if reason.is_empty() {
                format!("hook `{}` exited 2 without a reason on stderr", spec.name)
            } else {
                reason
            })
        }
        (_, Some((why, todo))) if spec.required => {
            Said::Block(format!("required hook `{}` {why}: {todo}", spec.name))
        }
        _ => Said::Nothing,
    };
    let outcome_text = match (&said, &outcome.exit, &failure) {
        (Said::Block(r), _, _) => format!("blocked: {r}"),
        (Said::Context(_), _, _) => "context added".into(),
        (_, Exit::Code(0), _) => "ok".into(),
        (_, Exit::Cancelled(_), _) => "cancelled".into(),
        (_, Exit::TimedOut, Some((_, todo))) => {
            format!("timed out after {} s: {todo}", spec.timeout.as_secs_f64())
        }
        (_, _, Some((why, todo))) => format!("failed: {why}: {todo}"),
        (_, _, None) => "failed".into(),
    };
    let ran = Ran {
        name: spec.name.clone(),
        event: spec.event,
        outcome: outcome_text,
        duration_ms: started.elapsed().as_millis() as u64,
        at_ms,
    };
    (ran, said)
}

/// Whether `stderr` reads like a write or an action the kernel refused.
fn denied(stderr: &str) -> bool {
    [
        "Permission denied",
        "Read-only file system",
        "Operation not permitted",
    ]
    .iter()
    .any(|d| stderr.contains(d))
}

/// Why a hook's run failed and what to do about it; `None` when it did
/// not fail (exit 0, exit 2 to block, a cancel).
fn failure(
    spec: &HookSpec,
    exit: &Exit,
    stderr: &str,
    sandboxed: bool,
    env: &HookEnv,
) -> Option<(String, String)> {
    let last = clip(stderr).lines().last().unwrap_or("").trim().to_string();
    let by_hand = format!(
        "run its command by hand in {} with its input on stdin to see why",
        env.workdir.display()
    );
    let sandbox_note = format!(
        "the session's sandbox lets a hook write only in its workdir ({}), TMPDIR and `[sandbox] writable`: have the hook write there, or add the folder it needs to `[sandbox] writable`",
        env.workdir.display()
    );
    let (why, todo) = match exit {
        Exit::Code(0) | Exit::Code(2) | Exit::Cancelled(_) => return None,
        Exit::Code(c) => {
            let why = if last.is_empty() {
                format!("exited {c} with nothing on stderr")
            } else {
                format!("exited {c}: {last}")
            };
            let todo = if *c == 126 || *c == 127 {
                format!(
                    "its command could not be run{}: check `command` in its `[[hooks]]` entry and that the program is on the PATH flytod's sessions get",
                    if sandboxed { " inside the session's sandbox" } else { "" }
                )
            } else if sandboxed && denied(stderr) {
                sandbox_note
            } else {
                by_hand
            };
            (why, todo)
        }
        Exit::Signal(s) => (format!("was killed by signal {s}"), by_hand),
        Exit::TimedOut => (
            format!("timed out after {} s (its timeout)", spec.timeout.as_secs_f64()),
            "raise `timeout` in its `[[hooks]]` entry, or make it finish sooner (a hook that waits for input never ends)".into(),
        ),
        Exit::SpawnFailed(why) => (
            format!("could not start: {why}"),
            if sandboxed {
                format!("check that its workdir {} exists and that the session's sandbox can be set up here (flytod's log at start says what the kernel offers)", env.workdir.display())
            } else {
                format!("check that its workdir {} exists", env.workdir.display())
            },
        ),
    };
    Some((why, todo))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, event: HookEvent, command: &str, required: bool) -> HookSpec {
        HookSpec {
            name: name.into(),
            event,
            matcher: None,
            matcher_text: None,
            command: command.into(),
            timeout: Duration::from_secs(5),
            required,
        }
    }

    fn env(dir: &std::path::Path) -> HookEnv {
        HookEnv {
            workdir: dir.to_path_buf(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            sandbox: None,
            cancel: CancellationToken::new(),
        }
    }

    async fn verdict(hooks: Vec<HookSpec>, tool: Option<&str>) -> (Verdict, Vec<Ran>) {
        let dir = tempfile::tempdir().unwrap();
        let h = Arc::new(Hooks::new(hooks));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let v = h
            .run(
                HookEvent::PreToolUse,
                tool,
                serde_json::json!({"tool": tool}),
                &env(dir.path()),
                || 0,
                Arc::new(move |r| s.lock().unwrap().push(r)),
            )
            .await;
        let ran = seen.lock().unwrap().clone();
        (v, ran)
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn exit_2_blocks_with_stderr_and_later_hooks_do_not_run() {
        let (v, ran) = verdict(
            vec![
                spec(
                    "a",
                    HookEvent::PreToolUse,
                    "cat >/dev/null; echo no rm >&2; exit 2",
                    false,
                ),
                spec("b", HookEvent::PreToolUse, "exit 0", false),
            ],
            Some("bash"),
        )
        .await;
        assert_eq!(v.blocked, Some(("a".into(), "no rm".into())));
        assert_eq!(ran.len(), 1);
        assert_eq!(ran[0].outcome, "blocked: no rm");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_input_is_on_stdin_and_a_json_decision_blocks_or_adds_context() {
        let (v, _) = verdict(
            vec![spec(
                "ctx",
                HookEvent::PreToolUse,
                r#"grep -q '"event":"pre_tool_use"' && echo '{"additional_context": "mind the tests"}'"#,
                false,
            )],
            Some("bash"),
        )
        .await;
        assert_eq!(v.context, ["mind the tests"]);
        let (v, _) = verdict(
            vec![spec(
                "j",
                HookEvent::PreToolUse,
                r#"echo '{"decision": "block", "reason": "not on fridays"}'"#,
                false,
            )],
            Some("bash"),
        )
        .await;
        assert_eq!(v.blocked, Some(("j".into(), "not on fridays".into())));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_failure_is_ignored_unless_the_hook_is_required() {
        let (v, ran) = verdict(
            vec![spec("f", HookEvent::PreToolUse, "exit 3", false)],
            Some("bash"),
        )
        .await;
        assert_eq!(v, Verdict::default());
        assert!(
            ran[0].outcome.starts_with(
                "failed: exited 3 with nothing on stderr: run its command by hand in "
            ),
            "{ran:?}"
        );
        let (v, _) = verdict(
            vec![spec("f", HookEvent::PreToolUse, "exit 3", true)],
            Some("bash"),
        )
        .await;
        assert!(v.blocked.unwrap().1.contains("required hook `f` exited 3"));
        let mut slow = spec("s", HookEvent::PreToolUse, "sleep 30", true);
        slow.timeout = Duration::from_millis(300);
        let (v, ran) = verdict(vec![slow], Some("bash")).await;
        assert!(v.blocked.unwrap().1.contains("timed out"), "{ran:?}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_failure_says_why_and_what_to_do() {
        let (_, ran) = verdict(
            vec![spec(
                "gone",
                HookEvent::PreToolUse,
                "no-such-hook-program-here",
                false,
            )],
            Some("bash"),
        )
        .await;
        let o = &ran[0].outcome;
        assert!(o.starts_with("failed: exited 127: "), "{o}");
        assert!(o.contains("not found"), "{o}");
        assert!(
            o.contains("check `command` in its `[[hooks]]` entry"),
            "{o}"
        );
    }

    #[test]
    fn a_write_the_sandbox_refused_points_at_the_sandbox() {
        let dir = tempfile::tempdir().unwrap();
        let hook = spec("audit", HookEvent::PostToolUse, "x", false);
        let stderr = "bash: line 2: /home/u/audit.log: Permission denied\n";
        let (why, todo) = failure(&hook, &Exit::Code(1), stderr, true, &env(dir.path())).unwrap();
        assert_eq!(
            why,
            "exited 1: bash: line 2: /home/u/audit.log: Permission denied"
        );
        assert!(todo.contains("`[sandbox] writable`"), "{todo}");
        // Unconfined, the same refusal is not the sandbox's.
        let (_, todo) = failure(&hook, &Exit::Code(1), stderr, false, &env(dir.path())).unwrap();
        assert!(todo.starts_with("run its command by hand"), "{todo}");
        assert!(failure(&hook, &Exit::Code(2), "", true, &env(dir.path())).is_none());
        // One that cannot start names its workdir and the sandbox.
        let spawn = Exit::SpawnFailed("No such file or directory".into());
        let (why, todo) = failure(&hook, &spawn, "", true, &env(dir.path())).unwrap();
        assert_eq!(why, "could not start: No such file or directory");
        assert!(
            todo.contains(&dir.path().display().to_string()) && todo.contains("sandbox"),
            "{todo}"
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_matcher_picks_the_tools_it_names() {
        let mut only_write = spec("w", HookEvent::PreToolUse, "exit 2", false);
        only_write.matcher = Some(tool_matcher("write*").unwrap());
        let (v, ran) = verdict(vec![only_write.clone()], Some("bash")).await;
        assert_eq!(v, Verdict::default());
        assert!(ran.is_empty());
        let (v, _) = verdict(vec![only_write], Some("write_file")).await;
        assert!(v.blocked.is_some());
    }
}
