//! One run of the agent loop: a task owned by the session actor. It calls
//! the model, streams events, runs tool calls, persists every message it
//! produces, and stops on end of turn, cancel, error or one of the guards,
//! always saying how to continue.

use super::SessionDeps;
use super::approval::{Approvals, RunApprover};
use super::context::{self, Check, Checked};
use super::model::{SessionRecord, SessionStatus, format_id};
use super::orchestrator::{OrchestratorEvent, run_calls};
use super::subagent::{AGENT_TOOL, AgentTool, Parent};
use crate::hooks::{HookEnv, HookEvent, Hooks};
use crate::llm::normalize::{CallIds, normalize};
use crate::llm::{
    Assembled, Block, ChatRequest, LlmError, Message, Role, StopReason, StreamEvent, ToolSpec,
};
use crate::tools::env::child_env;
use crate::tools::{Registry, ToolContext, ToolHooks, ToolOutput};
use flyto_protocol::SessionEvent;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

const BASE_PROMPT: &str = "You are Flyto, an agent working for the user on their Linux machine while they do something else. \
Work in the given working directory with your tools: read, write and edit files, search with glob and grep, run shell commands with bash. \
Be careful with destructive commands. When the task is done, answer with a short summary of what you did and what is left.";

/// Consecutive model calls without new output before the run stops.
const STALL_LIMIT: u32 = 8;
/// The same tool call with the same result: warn at the soft limit, stop at
/// the hard one.
const REPEAT_SOFT: u32 = 2;
const REPEAT_HARD: u32 = 4;

/// Hands out sequence numbers and fans events out to listeners.
#[derive(Clone)]
pub struct Emitter {
    pub tx: broadcast::Sender<(u64, SessionEvent)>,
    pub seq: Arc<AtomicU64>,
    /// Set once the current run has emitted its run-ending event: its
    /// listeners may already send the next message while the actor has
    /// not yet heard that the run task is done.
    pub ended: Arc<AtomicBool>,
}

impl Emitter {
    /// A channel continuing the sequence numbers of `seq`.
    pub fn with_seq(seq: Arc<AtomicU64>) -> Self {
        let (tx, _) = broadcast::channel(512);
        Emitter {
            tx,
            seq,
            ended: Arc::default(),
        }
    }

    pub fn new() -> Self {
        // Every slot is allocated up front (about 100 bytes each) and kept
        // until the actor stops (idle_stop after its last use): 512 keeps a
        // live session near 50 KB (4096 made 1,000 concurrent runs cost
        // 540 MB). A listener more than 512 events behind gets a Notice;
        // `stream_one` yields to it every coop budget (128 events).
        let (tx, _) = broadcast::channel(512);
        Emitter {
            tx,
            seq: Arc::new(AtomicU64::new(0)),
            ended: Arc::default(),
        }
    }
    pub fn emit(&self, event: SessionEvent) {
        if event.ends_run() {
            self.ended.store(true, Ordering::SeqCst);
        }
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        // No listener is fine: events are not stored.
        let _ = self.tx.send((seq, event));
    }
}

impl Default for Emitter {
    fn default() -> Self {
        Self::new()
    }
}

/// How a run ended, for the actor.
pub struct Finished {
    pub record: SessionRecord,
}

/// What the actor keeps to steer a run.
pub struct Control {
    pub cancel: CancellationToken,
    /// Set before `cancel` fires when flytod shuts down.
    pub shutdown: Arc<AtomicBool>,
    pub approvals: Arc<Approvals>,
    /// The job whose plan started the run (`j<N>`): its tools see it as
    /// `FLYTO_JOB`, and the schedule tools are not offered.
    pub job: Option<String>,
    /// Set for a sub-agent's run: its bounds.
    pub agent: Option<Arc<AgentLimits>>,
}

/// The bounds of a sub-agent's run (see `subagent.rs`).
#[derive(Debug, Clone, Default)]
pub struct AgentLimits {
    /// The tools it may use (by name); `None`: the parent's.
    pub tools: Option<Vec<String>>,
    pub max_iterations: u32,
    /// Its share of the parent's remaining budget, in USD; `None`: no cap.
    pub max_cost_usd: Option<f64>,
    /// What memory is chosen for: the parent's, when it starts from the
    /// parent's window.
    pub memory_query: Option<String>,
}

/// What a cancelled reply leaves in the transcript: the user sees it in the
/// history, the model on its next run.
pub const CANCELLED_MARKER: &str =
    "[cancelled] This reply was cancelled by the user before it was finished.";
/// The same, when flytod shut down during the reply.
pub const SHUTDOWN_MARKER: &str =
    "[cancelled] This reply was interrupted because flytod shut down before it was finished.";

enum Stop {
    Done { stop: &'static str, message: String },
    Cancelled,
    Failed(String),
}

/// What a run does: answer the user (the agent loop), or only compact
/// the window (`session_compact`, or a model switch to a smaller window).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Chat,
    Compact,
}

pub async fn run(
    deps: Arc<SessionDeps>,
    mut rec: SessionRecord,
    ctl: Control,
    emit: Emitter,
    mode: Mode,
) -> Finished {
    rec.runs += 1;
    emit.emit(SessionEvent::RunStart { run: rec.runs });
    let mut stop = match drive(&deps, &mut rec, &ctl, &emit, mode).await {
        Ok(stop) => stop,
        Err(e) => Stop::Failed(e),
    };
    let shutdown = ctl.shutdown.load(Ordering::SeqCst);
    if matches!(stop, Stop::Cancelled) && mode == Mode::Chat {
        let marker = if shutdown {
            SHUTDOWN_MARKER
        } else {
            CANCELLED_MARKER
        };
        let message = Message {
            role: Role::Assistant,
            content: vec![Block::Text {
                text: marker.into(),
            }],
        };
        if let Err(e) = append(&deps, &mut rec, &mut Vec::new(), vec![message]) {
            stop = Stop::Failed(e);
        }
    }
    rec.status = match stop {
        Stop::Failed(_) => SessionStatus::Error,
        _ => SessionStatus::Idle,
    };
    rec.error = match &stop {
        Stop::Failed(m) => Some(m.clone()),
        _ => None,
    };
    rec.updated_ms = deps.clock.now_ms();
    let final_event = match stop {
        Stop::Done { stop, message } => SessionEvent::Done {
            stop: stop.into(),
            message,
        },
        Stop::Cancelled if shutdown => SessionEvent::Cancelled {
            message: "interrupted: flytod is shutting down; send a message to continue once it has restarted".into(),
            shutdown: true,
        },
        Stop::Cancelled => SessionEvent::Cancelled {
            message: "cancelled by user; send a message to continue".into(),
            shutdown: false,
        },
        Stop::Failed(m) => SessionEvent::Error {
            message: format!("{m}; send a message to try again"),
        },
    };
    if let Err(e) = deps.store.save(&rec, &[], false) {
        tracing::error!(session = %format_id(rec.id), "cannot save the session: {e}");
    }
    // The run's end is announced only once it is durable.
    let emitter = emit.clone();
    deps.store
        .after_sync(Box::new(move |_| emitter.emit(final_event)));
    Finished { record: rec }
}

/// The tools offered to a session in `workdir` whose tools get `env`.
fn tool_specs(
    tools: &Registry,
    workdir: &std::path::Path,
    env: &[(String, String)],
) -> Vec<ToolSpec> {
    tools
        .iter()
        .filter(|t| t.offered(env))
        .map(|t| ToolSpec {
            name: t.name().into(),
            description: t.description().into(),
            input_schema_json: t
                .input_schema_for(workdir)
                .unwrap_or_else(|| t.input_schema().into()),
        })
        .collect()
}

/// The system prompt of the next model call (the static part, then the
/// skills catalogue as the registry has it now) and the tool specs.
fn prompt_and_tools(
    deps: &SessionDeps,
    tools: &Registry,
    static_part: &str,
    workdir: &std::path::Path,
    env: &[(String, String)],
    context_window: u64,
) -> (String, Vec<ToolSpec>, crate::skills::Catalogue) {
    let set = deps.skills.for_workdir(workdir);
    let catalogue = crate::skills::catalogue(&set, context_window);
    let system = if catalogue.text.is_empty() {
        static_part.to_string()
    } else {
        format!("{static_part}\n\n{}", catalogue.text)
    };
    (system, tool_specs(tools, workdir, env), catalogue)
}

/// The memory part of the next model call's system prompt, for `query`.
async fn memory_prompt(
    deps: &SessionDeps,
    workdir: &std::path::Path,
    query: &str,
    config: &crate::memory::prompt::InjectConfig,
) -> Result<crate::memory::prompt::MemoryPrompt, crate::memory::MemoryError> {
    let now = deps.clock.now_ms();
    // Some spare candidates, for the ones the token budget leaves out.
    let limit = config.inject.saturating_mul(4);
    let (indexes, ranked) = deps.memory.for_prompt(workdir, query, now, limit).await?;
    Ok(crate::memory::prompt::render(
        &indexes, &ranked, now, config,
    ))
}

/// What the user last wrote: the text of the newest user message that is
/// not only tool results. It is what memory is chosen for.
pub(super) fn latest_user_text(window: &[Message]) -> String {
    window
        .iter()
        .rev()
        .filter(|m| m.role == Role::User)
        .find_map(|m| {
            let text: Vec<&str> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    Block::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            (!text.is_empty()).then(|| text.join("\n"))
        })
        .unwrap_or_default()
}

/// Tokens every request spends before the first message: the system
/// prompt and the tool schemas (the catalogue at its largest budget, so it
/// errs high).
pub fn fixed_tokens(deps: &SessionDeps, workdir: &str, now_ms: u64) -> u64 {
    let dir = std::fs::canonicalize(workdir).unwrap_or_else(|_| workdir.into());
    let (system, tools, _) = prompt_and_tools(
        deps,
        &deps.tools,
        &system_prompt(workdir, now_ms),
        &dir,
        &[],
        0,
    );
    crate::compaction::estimate::request_tokens(&system, &tools, &[])
}

fn system_prompt(workdir: &str, now_ms: u64) -> String {
    let date = humantime_date(now_ms);
    format!(
        "{BASE_PROMPT}\n\n# Environment\n- working directory: {workdir}\n- date: {date}\n- OS: {} ({})",
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

fn humantime_date(now_ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(now_ms as i64)
        .unwrap_or_default()
        .format("%Y-%m-%d")
        .to_string()
}

/// The hooks of one session: where they run, and how they are reported
/// (in its event stream while a run or a listener has one).
#[derive(Clone)]
pub struct SessionHooks {
    hooks: Arc<Hooks>,
    env: HookEnv,
    session: String,
    emit: Option<Emitter>,
    clock: Arc<dyn crate::clock::Clock>,
}

impl SessionHooks {
    /// The hooks of `rec` outside a run (no plan socket, no stream);
    /// `None` when no hook is configured.
    pub(super) fn for_record(deps: &SessionDeps, rec: &SessionRecord) -> Option<SessionHooks> {
        if deps.hooks.specs().is_empty() {
            return None;
        }
        let workdir = std::fs::canonicalize(&rec.workdir)
            .unwrap_or_else(|_| std::path::PathBuf::from(&rec.workdir));
        let id = format_id(rec.id);
        Some(SessionHooks {
            hooks: deps.hooks.clone(),
            env: HookEnv {
                sandbox: sandbox_spec(&deps.config(), rec, &workdir),
                env: child_env(
                    std::env::vars(),
                    &[("FLYTO_SESSION_ID".to_string(), id.clone())],
                ),
                workdir,
                cancel: CancellationToken::new(),
            },
            session: id,
            emit: None,
            clock: deps.clock.clone(),
        })
    }

    /// Runs a non-blocking event's hooks without waiting for them.
    pub(super) fn background(&self, event: HookEvent, input: serde_json::Value) {
        if !self.hooks.any(event, None) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            me.run(event, None, input).await;
        });
    }

    async fn run(
        &self,
        event: HookEvent,
        tool: Option<&str>,
        mut input: serde_json::Value,
    ) -> crate::hooks::Verdict {
        if let serde_json::Value::Object(m) = &mut input {
            m.insert("session_id".into(), self.session.clone().into());
            m.insert(
                "workdir".into(),
                self.env.workdir.display().to_string().into(),
            );
        }
        let emit = self.emit.clone();
        let report = Arc::new(move |r: crate::hooks::Ran| {
            if let Some(emit) = &emit {
                emit.emit(SessionEvent::Hook {
                    name: r.name,
                    event: r.event.as_str().into(),
                    outcome: r.outcome,
                    duration_ms: r.duration_ms,
                })
            }
        });
        let clock = self.clock.clone();
        self.hooks
            .run(
                event,
                tool,
                input,
                &self.env,
                move || clock.now_ms(),
                report,
            )
            .await
    }
}

fn tool_input(tool: &str, args_json: &str) -> serde_json::Value {
    serde_json::json!({
        "tool_name": tool,
        "tool_input": serde_json::from_str::<serde_json::Value>(args_json)
            .unwrap_or_else(|_| serde_json::Value::String(args_json.to_string())),
    })
}

impl ToolHooks for SessionHooks {
    fn before<'a>(
        &'a self,
        tool: &'a str,
        args_json: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + 'a>> {
        Box::pin(async move {
            if !self.hooks.any(HookEvent::PreToolUse, Some(tool)) {
                return None;
            }
            self.run(
                HookEvent::PreToolUse,
                Some(tool),
                tool_input(tool, args_json),
            )
            .await
            .blocked
            .map(|(name, reason)| format!("hook `{name}`: {reason}"))
        })
    }

    fn after(&self, tool: &str, args_json: &str, output: &ToolOutput) {
        if !self.hooks.any(HookEvent::PostToolUse, Some(tool)) {
            return;
        }
        let mut input = tool_input(tool, args_json);
        if let serde_json::Value::Object(m) = &mut input {
            m.insert("tool_result".into(), output.content.clone().into());
            m.insert("is_error".into(), output.is_error.into());
        }
        let me = self.clone();
        let tool = tool.to_string();
        tokio::spawn(async move {
            me.run(HookEvent::PostToolUse, Some(&tool), input).await;
        });
    }
}

/// Appends messages to the transcript (memory and store).
fn append(
    deps: &SessionDeps,
    rec: &mut SessionRecord,
    window: &mut Vec<Message>,
    messages: Vec<Message>,
) -> Result<(), String> {
    rec.next_idx += messages.len() as u64;
    rec.updated_ms = deps.clock.now_ms();
    context::count_appended(rec, &messages);
    deps.store
        .save(rec, &messages, false)
        .map_err(|e| format!("cannot save the transcript: {e}"))?;
    window.extend(messages);
    Ok(())
}

async fn drive(
    deps: &Arc<SessionDeps>,
    rec: &mut SessionRecord,
    ctl: &Control,
    emit: &Emitter,
    mode: Mode,
) -> Result<Stop, String> {
    let cancel = &ctl.cancel;
    let config = deps.config();
    let models = deps.models();
    let route = super::route_for(&models, &rec.model).map_err(|e| e.to_string())?;
    let mut window: Vec<Message> = context::load_window(deps, rec)?;
    // Ids the provider reuses are replaced before a reply is stored: ids
    // must be unique in the whole transcript, not only in the window (a
    // reset or a compaction moved earlier calls out of it).
    let mut call_ids = CallIds::default();
    call_ids.record(&window);
    let earlier = deps
        .store
        .messages_range(rec.id, 0, rec.context_base_idx)
        .map_err(|e| format!("cannot load the transcript: {e}"))?;
    call_ids.record(earlier.iter().map(|(_, m)| m));
    let workdir = std::fs::canonicalize(&rec.workdir).map_err(|e| {
        format!(
            "the session workdir {} is not usable ({e}): create it or start a new session",
            rec.workdir
        )
    })?;
    let id = format_id(rec.id);
    let sandbox = sandbox_spec(&config, rec, &workdir);
    let mut ctx = ToolContext {
        workdir: workdir.clone(),
        env: child_env(
            std::env::vars(),
            &[
                (
                    "FLYTO_PLAN_SOCK".into(),
                    deps.sockets
                        .open(&id, &rec.chain, rec.depth, sandbox.clone())
                        .unwrap_or_else(|| config.plan_socket.clone()),
                ),
                ("FLYTO_SESSION_ID".into(), id.clone()),
                ("FLYTO_CHAIN".into(), rec.chain.clone()),
            ]
            .into_iter()
            .chain(ctl.job.clone().map(|j| ("FLYTO_JOB".into(), j)))
            .collect::<Vec<_>>(),
        ),
        cancel: cancel.child_token(),
        approver: Some(Arc::new(RunApprover {
            approvals: ctl.approvals.clone(),
            emit: emit.clone(),
            timeout: config.approval_timeout,
            hooks: None,
        })),
        sandbox,
        hooks: None,
    };
    let hooks = (!deps.hooks.specs().is_empty()).then(|| {
        Arc::new(SessionHooks {
            hooks: deps.hooks.clone(),
            env: HookEnv {
                workdir: workdir.clone(),
                env: ctx.env.clone(),
                sandbox: ctx.sandbox.clone(),
                cancel: ctx.cancel.clone(),
            },
            session: id.clone(),
            emit: Some(emit.clone()),
            clock: deps.clock.clone(),
        })
    });
    if let Some(h) = &hooks {
        ctx.hooks = Some(h.clone());
        ctx.approver = Some(Arc::new(RunApprover {
            approvals: ctl.approvals.clone(),
            emit: emit.clone(),
            timeout: config.approval_timeout,
            hooks: Some(h.clone()),
        }));
    }
    if ctx.sandbox.is_some()
        && let Some(why) = crate::tools::sandbox::degraded()
    {
        emit.emit(SessionEvent::Notice { message: why });
    }
    // MCP servers this run may use: started if they are not, and waited
    // for (up to their startup timeout) so the first call has their tools.
    let mcp = match &deps.mcp {
        Some(m) if m.enabled() => {
            let snapshot = m.ready(cancel).await;
            for (name, why) in &snapshot.failed {
                emit.emit(SessionEvent::Notice {
                    message: format!(
                        "MCP server `{name}` is not available ({why}); this run goes on without its tools (`flytoctl mcp_list` shows it)"
                    ),
                });
            }
            Some(m)
        }
        _ => None,
    };
    // A sub-agent's run has its own bounds; any run may start sub-agents
    // while the depth cap allows (a sub-agent only when its tools say so).
    let limits = ctl.agent.clone();
    let max_iterations = limits
        .as_ref()
        .map_or(config.max_iterations, |l| l.max_iterations);
    let max_cost = limits
        .as_ref()
        .and_then(|l| l.max_cost_usd)
        .unwrap_or(config.max_run_cost_usd);
    let allowed = limits.as_ref().and_then(|l| l.tools.clone());
    let agent_tool = (rec.agent_depth < config.max_agent_depth
        && limits.is_none()
            | allowed
                .as_ref()
                .is_some_and(|t| t.iter().any(|n| n == AGENT_TOOL)))
    .then(|| {
        let mut known: Vec<String> = deps.tools.iter().map(|t| t.name().to_string()).collect();
        if let Some(m) = mcp {
            known.extend(m.snapshot().tools.iter().map(|t| t.name().to_string()));
        }
        known.push(AGENT_TOOL.into());
        Arc::new(AgentTool::new(
            deps.clone(),
            Parent {
                id: rec.id,
                workdir: rec.workdir.clone(),
                model: rec.model.clone(),
                chain: rec.chain.clone(),
                depth: rec.depth,
                sandbox: rec.sandbox.clone(),
                agent_depth: rec.agent_depth,
            },
            known,
        ))
    });
    let registry_now = || {
        let mut extra: Vec<Arc<dyn crate::tools::Tool>> = match mcp {
            Some(m) => m.snapshot().tools.clone(),
            None => Vec::new(),
        };
        if let Some(a) = &agent_tool {
            extra.push(a.clone());
        }
        let all = deps.tools.with(&extra);
        match &allowed {
            Some(names) => all.only(names),
            None => all,
        }
    };
    let mut registry = registry_now();
    let static_system = system_prompt(&workdir.display().to_string(), deps.clock.now_ms());
    let context_window = u64::from(route.primary.profile.context_window);
    let (mut system, mut tools, _) = prompt_and_tools(
        deps,
        &registry,
        &static_system,
        &workdir,
        &ctx.env,
        context_window,
    );
    let workdir_text = workdir.display().to_string();
    let mut check = Check {
        deps,
        route: &route,
        workdir: &workdir_text,
        fixed_tokens: crate::compaction::estimate::request_tokens(&system, &tools, &[]),
        cancel,
        emit,
        hooks: hooks.as_deref(),
    };
    let mut told_shortened = false;
    // Chosen once per run: the run answers this message, and its own
    // continuation requests are not what the user asked about.
    // A sub-agent that starts from its parent's window chooses memory as
    // its parent did, so its system prompt (the head of the provider's
    // prompt cache) is the parent's.
    let memory_query = limits
        .as_ref()
        .and_then(|l| l.memory_query.clone())
        .unwrap_or_else(|| latest_user_text(&window));
    let mut memory_selection: Option<Vec<(String, &'static str)>> = None;
    let mut told_memory_down = false;
    let mut flags = context::RunFlags::default();
    if mode == Mode::Compact {
        let before = rec.context.compactions;
        return Ok(match check.run(rec, true, &mut flags).await {
            Checked::Cancelled => Stop::Cancelled,
            Checked::Nothing => Stop::Done {
                stop: "nothing_to_compact",
                message: "nothing to compact: the recent turns are all the window holds".into(),
            },
            Checked::Stop { stop, message } => Stop::Done { stop, message },
            Checked::Failed(message) => Stop::Failed(message),
            Checked::Go { compacted: true } => Stop::Done {
                stop: "compacted",
                message: format!(
                    "the window was compacted ({} compaction{} so far); history keeps every message",
                    rec.context.compactions.max(before),
                    if rec.context.compactions == 1 {
                        ""
                    } else {
                        "s"
                    }
                ),
            },
            Checked::Go { compacted: false } | Checked::GoWithout => Stop::Done {
                stop: "compact_failed",
                message: "the window was not compacted; see the message above".into(),
            },
        });
    }
    // A provider that finds the prompt too long gets one compaction and
    // a second try per run.
    let mut forced = false;
    // The run's own model calls; its summary calls are in `flags`.
    let mut run_cost = 0.0;
    let mut continuations = 0;
    let mut stalled = 0;
    let mut repeats: HashMap<(String, String, String), u32> = HashMap::new();
    let mut force = false;
    // A stop hook may send the run on once.
    let mut stop_hooked = false;
    if let Some(h) = &hooks {
        if !window.iter().any(|m| m.role == Role::Assistant) {
            h.run(HookEvent::SessionStart, None, serde_json::json!({}))
                .await;
        }
        let verdict = h
            .run(
                HookEvent::UserPrompt,
                None,
                serde_json::json!({ "prompt": latest_user_text(&window) }),
            )
            .await;
        if let Some((name, reason)) = verdict.blocked {
            return Ok(Stop::Done {
                stop: "blocked_by_hook",
                message: format!("hook `{name}` blocked this message: {reason}"),
            });
        }
        if !verdict.context.is_empty() {
            append(
                deps,
                rec,
                &mut window,
                vec![Message::user_text(format!(
                    "[context added by hooks]\n{}",
                    verdict.context.join("\n")
                ))],
            )?;
        }
    }
    // The config refuses 0, so every run may call the model at least once.
    for _ in 0..max_iterations {
        // Skills reload while a run goes on: each call sees the set as it is now.
        // MCP servers' tools come and go (restarts, list changes).
        registry = registry_now();
        let catalogue;
        (system, tools, catalogue) = prompt_and_tools(
            deps,
            &registry,
            &static_system,
            &workdir,
            &ctx.env,
            context_window,
        );
        // After the static part and the catalogue, so the prompt's prefix
        // stays the same from call to call; memory can change in a run.
        match memory_prompt(deps, &workdir, &memory_query, &config.memory).await {
            Ok(memory) => {
                system.push_str("\n\n");
                system.push_str(&memory.text);
                let now: Vec<(String, &'static str)> = memory
                    .injected
                    .iter()
                    .map(|i| (i.name.clone(), i.scope))
                    .collect();
                let changed = match &memory_selection {
                    None => !now.is_empty(),
                    Some(before) => *before != now,
                };
                if changed {
                    emit.emit(SessionEvent::Notice {
                        message: crate::memory::prompt::notice(&memory, &config.memory),
                    });
                }
                memory_selection = Some(now);
            }
            Err(e) if !told_memory_down => {
                told_memory_down = true;
                emit.emit(SessionEvent::Notice {
                    message: format!("memory is unavailable ({e}); the model is called without it"),
                });
            }
            Err(_) => {}
        }
        check.fixed_tokens = crate::compaction::estimate::request_tokens(&system, &tools, &[]);
        if catalogue.shortened && !told_shortened {
            told_shortened = true;
            emit.emit(SessionEvent::Notice {
                message: format!(
                    "the skills catalogue was shortened to fit its budget of {} characters: some descriptions are cut (every skill is still listed)",
                    catalogue.budget
                ),
            });
        }
        match check.run(rec, force, &mut flags).await {
            Checked::Go { compacted: true } => {
                window = context::load_window(deps, rec)?;
                call_ids.record(&window);
            }
            Checked::Go { compacted: false } | Checked::GoWithout | Checked::Nothing => {}
            Checked::Cancelled => return Ok(Stop::Cancelled),
            Checked::Stop { stop, message } => return Ok(Stop::Done { stop, message }),
            Checked::Failed(message) => return Ok(Stop::Failed(message)),
        }
        // Before every call, so no call (a continuation of a cut-off reply,
        // a retry after a compaction) goes past the limit unchecked; after
        // the compaction check, so its summary cost counts.
        let spent = run_cost + flags.summary_cost_usd;
        if max_cost > 0.0 && spent >= max_cost {
            let summaries = if flags.summary_cost_usd > 0.0 {
                format!(
                    " (${:.4} of it compaction summaries)",
                    flags.summary_cost_usd
                )
            } else {
                String::new()
            };
            return Ok(Stop::Done {
                stop: "budget",
                message: format!(
                    "stopped: this run cost ${spent:.4}{summaries}, reaching {} = ${max_cost:.4}; send a message to continue or raise the limit",
                    if limits.is_some() {
                        "its share of the parent's budget (sessions.agent_budget_share)"
                    } else {
                        "sessions.max_run_cost_usd"
                    }
                ),
            });
        }
        force = false;
        let (messages, report) = normalize(window.clone());
        if !report.is_clean() {
            tracing::debug!(session = %format_id(rec.id), %report, "the window was repaired for the request");
        }
        let request = ChatRequest {
            system: system.clone(),
            messages,
            tools: tools.clone(),
            max_tokens: 0,
        };
        emit.emit(SessionEvent::LlmStart {
            model: route.primary.name.clone(),
        });
        let mut response = match stream_one(deps, &route, request, cancel, emit).await {
            StreamOutcome::Done(a) => *a,
            StreamOutcome::Cancelled => return Ok(Stop::Cancelled),
            StreamOutcome::Failed(LlmError::PromptTooLong { .. }) if !forced => {
                forced = true;
                force = true;
                continue;
            }
            StreamOutcome::Failed(e) => return Ok(Stop::Failed(e.to_string())),
        };
        let usage = response.usage.unwrap_or_default();
        rec.usage.add(&usage);
        rec.cost_usd += response.cost;
        run_cost += response.cost;
        emit.emit(SessionEvent::LlmEnd {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
            cost_usd: response.cost,
        });
        let new_text = !response.text.trim().is_empty();
        // Before the calls are stored, announced or run: everything after
        // (events, approvals, results, the repeat guard) sees one id per call.
        call_ids.assign(&mut response, &format!("s{}m{}", rec.id, rec.next_idx));
        append(deps, rec, &mut window, vec![response.to_message()])?;
        context::count_usage(rec, &usage);

        if response.tool_calls.is_empty() {
            match response.stop_reason {
                StopReason::MaxTokens if continuations < config.max_continuations => {
                    continuations += 1;
                    append(
                        deps,
                        rec,
                        &mut window,
                        vec![Message::user_text(
                            "[Your reply was cut off by the output limit. Continue exactly where you stopped.]",
                        )],
                    )?;
                    continue;
                }
                StopReason::MaxTokens => {
                    return Ok(Stop::Done {
                        stop: "max_tokens",
                        message: format!(
                            "the reply hit the output limit {} times in a row; send \"continue\" for more",
                            continuations + 1
                        ),
                    });
                }
                StopReason::ContentFilter => {
                    return Ok(Stop::Done {
                        stop: "content_filter",
                        message: "the provider withheld the reply (content filter or refusal); rephrase the request".into(),
                    });
                }
                _ => {
                    if let Some(h) = hooks.as_ref().filter(|_| !stop_hooked) {
                        stop_hooked = true;
                        let verdict = h
                            .run(
                                HookEvent::Stop,
                                None,
                                serde_json::json!({ "last_reply": response.text }),
                            )
                            .await;
                        if let Some((name, reason)) = verdict.blocked {
                            append(
                                deps,
                                rec,
                                &mut window,
                                vec![Message::user_text(format!(
                                    "[hook `{name}` asks you to go on before you finish: {reason}]"
                                ))],
                            )?;
                            continue;
                        }
                    }
                    return Ok(Stop::Done {
                        stop: "end_turn",
                        message: String::new(),
                    });
                }
            }
        }

        // A reply with tool calls ends a row of cut-off replies.
        continuations = 0;
        for call in &response.tool_calls {
            emit.emit(SessionEvent::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments_json.clone(),
            });
        }
        if let Some(a) = &agent_tool {
            let left = (max_cost > 0.0).then_some(max_cost - (run_cost + flags.summary_cost_usd));
            a.before_calls(&window, left);
        }
        let results = run_calls(&registry, &ctx, &response.tool_calls, |ev| {
            if let OrchestratorEvent::Finished {
                call_id,
                name,
                preview,
                is_error,
            } = ev
            {
                emit.emit(SessionEvent::ToolResult {
                    id: call_id,
                    name,
                    preview,
                    is_error,
                });
            }
        })
        .await;
        let mut new_output = new_text;
        let mut hard_repeat = None;
        let mut blocks = Vec::with_capacity(results.len());
        for (call, result) in response.tool_calls.iter().zip(results) {
            let key = (
                call.name.clone(),
                call.arguments_json.clone(),
                result.output.content.clone(),
            );
            let seen = repeats.entry(key).or_insert(0);
            *seen += 1;
            let mut content = result.output.content;
            if *seen == 1 {
                new_output = true;
            } else if *seen >= REPEAT_HARD {
                hard_repeat = Some(call.name.clone());
            } else if *seen >= REPEAT_SOFT {
                content.push_str(&format!(
                    "\n\n[flyto: you already called `{}` with these arguments and got this same result {} times; change approach instead of repeating it]",
                    call.name, *seen
                ));
            }
            blocks.push(Block::ToolResult {
                call_id: result.call_id,
                content,
                is_error: result.output.is_error,
            });
        }
        append(
            deps,
            rec,
            &mut window,
            vec![Message {
                role: Role::User,
                content: blocks,
            }],
        )?;
        if cancel.is_cancelled() {
            return Ok(Stop::Cancelled);
        }
        if let Some(name) = hard_repeat {
            return Ok(Stop::Done {
                stop: "repeat_guard",
                message: format!(
                    "stopped: the model called `{name}` {REPEAT_HARD} times with the same arguments and got the same result; send a message with new guidance to continue"
                ),
            });
        }
        stalled = if new_output { 0 } else { stalled + 1 };
        if stalled >= STALL_LIMIT {
            return Ok(Stop::Done {
                stop: "stalled",
                message: format!(
                    "stopped: {STALL_LIMIT} steps in a row produced nothing new; send a message with new guidance to continue"
                ),
            });
        }
    }
    Ok(Stop::Done {
        stop: "max_iterations",
        message: format!(
            "stopped after {max_iterations} model calls ({}); send a message to let it continue",
            if limits.is_some() {
                "sessions.agent_max_iterations"
            } else {
                "sessions.max_iterations"
            }
        ),
    })
}

enum StreamOutcome {
    Done(Box<Assembled>),
    Cancelled,
    Failed(LlmError),
}

/// One provider call. Cancel drops the HTTP stream at once, without waiting
/// for the next chunk.
async fn stream_one(
    deps: &SessionDeps,
    route: &crate::llm::Route,
    request: ChatRequest,
    cancel: &CancellationToken,
    emit: &Emitter,
) -> StreamOutcome {
    let mut stream = deps.llm.stream(route, request);
    // One waiter for the whole call, not one registered per event.
    let cancelled = cancel.cancelled();
    tokio::pin!(cancelled);
    loop {
        // A burst of buffered events is emitted without any other await:
        // let the listeners' tasks run before the event channel wraps.
        tokio::task::coop::consume_budget().await;
        let next = tokio::select! {
            biased;
            _ = &mut cancelled => return StreamOutcome::Cancelled,
            next = stream.next_event() => next,
        };
        match next {
            None => {
                return StreamOutcome::Failed(LlmError::MalformedStream {
                    detail: "the provider stream ended without a response".into(),
                });
            }
            Some(Err(e)) => return StreamOutcome::Failed(e),
            Some(Ok(event)) => match event {
                StreamEvent::TextDelta(delta) => emit.emit(SessionEvent::Text { delta }),
                StreamEvent::ReasoningDelta(delta) => emit.emit(SessionEvent::Reasoning { delta }),
                StreamEvent::RefusalDelta(delta) => emit.emit(SessionEvent::Text { delta }),
                StreamEvent::ToolCallStart { .. } | StreamEvent::ToolCallDelta { .. } => {}
                StreamEvent::Retrying {
                    attempt,
                    max_attempts,
                    delay,
                    error,
                } => emit.emit(SessionEvent::Notice {
                    message: format!(
                        "provider call failed ({error}); retry {attempt}/{max_attempts} in {:.1}s",
                        delay.as_secs_f64()
                    ),
                }),
                StreamEvent::Fallback { from, to, error } => emit.emit(SessionEvent::Notice {
                    message: format!(
                        "model `{from}` is overloaded ({error}); falling back to `{to}`"
                    ),
                }),
                StreamEvent::Restart => emit.emit(SessionEvent::Restart {
                    reason: "the provider call is being retried; the partial reply above is void"
                        .into(),
                }),
                StreamEvent::Done(assembled) => return StreamOutcome::Done(Box::new(assembled)),
            },
        }
    }
}

/// The confinement of a session's commands: its own choice over
/// `[sandbox]`; `None` when off.
fn sandbox_spec(
    config: &super::SessionConfig,
    rec: &SessionRecord,
    workdir: &std::path::Path,
) -> Option<crate::tools::sandbox::SandboxSpec> {
    use crate::tools::sandbox::{Profile, SandboxSpec, tmpdir_for};
    let profile = rec.sandbox.profile.unwrap_or(config.sandbox_profile);
    (profile != Profile::Off).then(|| SandboxSpec {
        profile,
        write_roots: rec
            .sandbox
            .write_roots
            .clone()
            .unwrap_or_else(|| vec![workdir.to_path_buf()]),
        tmpdir: Some(tmpdir_for(&format_id(rec.id))),
        network: rec.sandbox.network.unwrap_or(config.sandbox_network),
    })
}

#[cfg(test)]
mod tests {
    use super::humantime_date;

    #[test]
    fn dates_are_civil() {
        assert_eq!(humantime_date(0), "1970-01-01");
        assert_eq!(humantime_date(1_796_034_747_891), "2026-11-30");
    }
}
