//! The `agent` tool: hands a bounded task to a sub-agent — a child
//! session of its own (linked to its parent, stored and repaired like any
//! session), in the same workdir and sandbox, starting from the parent's
//! window (so the provider's prompt cache is reused) or from nothing
//! (`fresh`). Its answer is the tool's result. Its run has its own bounds
//! (`sessions.agent_max_iterations`, a share of the parent's remaining
//! budget); cancelling the parent's call cancels it.

use super::manager::{ChildOf, ManagerMsg};
use super::run::AgentLimits;
use super::{SESSION_MANAGER, SessionDeps, SessionMsg, SessionSandbox, ask};
use crate::llm::{Block, Message, Role};
use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use flyto_protocol::SessionEvent;
use ractor::ActorRef;
use serde::Deserialize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const AGENT_TOOL: &str = "agent";

const DESCRIPTION: &str = "Hands a bounded piece of work to a sub-agent and returns its final answer. The sub-agent works in the same folder with your tools (not `agent`, unless listed in `tools`), starting from this conversation (or from nothing with `fresh: true`), with its own budget. Say exactly what to do and what to report back. Several `agent` calls in one reply run at the same time. For work that should outlive this turn, submit a plan instead (see the flyto-plans skill).";

const SCHEMA: &str = r#"{"type":"object","properties":{"task":{"type":"string","description":"What the sub-agent should do and what its answer should contain"},"tools":{"type":"array","items":{"type":"string"},"description":"Only these tools (default: yours, without agent)"},"model":{"type":"string","description":"A model profile or role (default: this session's)"},"fresh":{"type":"boolean","description":"Start from an empty context instead of this conversation"}},"required":["task"]}"#;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    task: String,
    tools: Option<Vec<String>>,
    model: Option<String>,
    #[serde(default)]
    fresh: bool,
}

/// The session whose run offers the tool.
pub struct Parent {
    pub id: u64,
    pub workdir: String,
    pub model: String,
    pub chain: String,
    pub depth: u32,
    pub sandbox: SessionSandbox,
    pub agent_depth: u32,
}

/// One per run: knows the parent's window and what its run has spent.
pub struct AgentTool {
    deps: Arc<SessionDeps>,
    parent: Parent,
    /// The tool names a child may be given.
    known: Vec<String>,
    state: Mutex<Now>,
}

#[derive(Default)]
struct Now {
    /// The parent's window, ending with the reply that calls the tool.
    window: Vec<Message>,
    /// What the parent's run may still spend (USD); `None`: no cap.
    left_usd: Option<f64>,
}

impl AgentTool {
    pub fn new(deps: Arc<SessionDeps>, parent: Parent, known: Vec<String>) -> Self {
        AgentTool {
            deps,
            parent,
            known,
            state: Mutex::default(),
        }
    }

    /// Before the calls of a reply: the window, ending with that reply,
    /// and the budget the run has left.
    pub fn before_calls(&self, window: &[Message], left_usd: Option<f64>) {
        if let Ok(mut s) = self.state.lock() {
            s.window = window.to_vec();
            s.left_usd = left_usd;
        }
    }

    async fn run(&self, ctx: &ToolContext, args: Args) -> Result<String, String> {
        let config = self.deps.config();
        let depth = self.parent.agent_depth + 1;
        if depth > config.max_agent_depth {
            return Err(format!(
                "no sub-agents here: this session is {} levels down and sessions.max_agent_depth is {}; do the work yourself",
                self.parent.agent_depth, config.max_agent_depth
            ));
        }
        if args.task.trim().is_empty() {
            return Err("`task` is empty: say what the sub-agent should do".into());
        }
        if let Some(tools) = &args.tools {
            let unknown: Vec<&String> = tools.iter().filter(|t| !self.known.contains(t)).collect();
            if !unknown.is_empty() {
                return Err(format!(
                    "unknown tools {unknown:?} in `tools`: choose from {}",
                    self.known.join(", ")
                ));
            }
        }
        let model = args.model.unwrap_or_else(|| self.parent.model.clone());
        super::route_for(&self.deps.models(), &model).map_err(|e| e.to_string())?;
        let (prefix, left, memory_query) = {
            let s = self
                .state
                .lock()
                .map_err(|_| "the tool's state is poisoned")?;
            if args.fresh {
                (Vec::new(), s.left_usd, None)
            } else {
                let query = super::run::latest_user_text(&s.window);
                (fork(&s.window), s.left_usd, Some(query))
            }
        };
        let budget = left.map(|l| (l * config.agent_budget_share).max(0.0));
        if budget.is_some_and(|b| b <= 0.0) {
            return Err(
                "no budget left for a sub-agent: this run has spent its sessions.max_run_cost_usd"
                    .into(),
            );
        }
        let manager = SESSION_MANAGER
            .find()
            .ok_or("the session room is not running; see the daemon log")?;
        let p = &self.parent;
        let id = ask(&manager, |reply| ManagerMsg::Child {
            workdir: p.workdir.clone(),
            model,
            chain: (p.chain.clone(), p.depth),
            sandbox: p.sandbox.clone(),
            of: ChildOf {
                parent: p.id,
                agent_depth: depth,
                prefix,
            },
            reply,
        })
        .await?;
        let session = ask(&manager, |reply| ManagerMsg::Get {
            id: id.clone(),
            reply,
        })
        .await?;
        let limits = Arc::new(AgentLimits {
            tools: args.tools,
            max_iterations: config.agent_max_iterations,
            max_cost_usd: budget,
            memory_query,
        });
        let task = args.task;
        let mut sub = ask(&session, |reply| SessionMsg::SendAgent {
            task,
            limits,
            reply,
        })
        .await?;
        // The parent's run drops this call when it is cancelled: the child
        // is cancelled with it.
        let mut guard = CancelOnDrop(Some(session.clone()));
        let mut reply = LastReply::default();
        let mut cancelled = false;
        let (mut calls, mut cost) = (0u32, 0f64);
        loop {
            let event = tokio::select! {
                _ = ctx.cancel.cancelled(), if !cancelled => {
                    cancelled = true;
                    let _ = session
                        .call(|reply| SessionMsg::Cancel { reply }, Some(Duration::from_secs(10)))
                        .await;
                    continue;
                }
                event = sub.next() => event,
            };
            let Some(event) = event else {
                return Err(format!("sub-agent {id} stopped before its run ended"));
            };
            reply.see(&event);
            if event.ends_run() {
                guard.0 = None;
            }
            match event {
                SessionEvent::LlmEnd { cost_usd, .. } => {
                    calls += 1;
                    cost += cost_usd;
                }
                SessionEvent::Done { stop, message } => {
                    let usage = format!("[sub-agent {id}: {calls} model calls, ${cost:.4}]");
                    return if stop == "end_turn" {
                        Ok(format!("{}\n\n{usage}", reply.text.trim()))
                    } else {
                        Err(format!(
                            "sub-agent {id} stopped before it finished ({message}); what it had so far:\n{}\n\n{usage}",
                            reply.text.trim()
                        ))
                    };
                }
                SessionEvent::Cancelled { .. } => {
                    return Err(format!("cancelled: sub-agent {id} was stopped"));
                }
                SessionEvent::Error { message } => {
                    return Err(format!("sub-agent {id} failed: {message}"));
                }
                _ => {}
            }
        }
    }
}

impl Tool for AgentTool {
    fn name(&self) -> &str {
        AGENT_TOOL
    }
    fn description(&self) -> &str {
        DESCRIPTION
    }
    fn input_schema(&self) -> &str {
        SCHEMA
    }
    /// Children work in their own sessions: several run at once.
    fn concurrency_safe(&self, _args_json: &str) -> bool {
        true
    }
    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match crate::tools::builtin::parse_args(
                AGENT_TOOL,
                args_json,
                r#"{"task": "...", "tools": ["read", "grep"], "model": "fast", "fresh": false}"#,
            ) {
                Ok(a) => a,
                Err(out) => return out,
            };
            match self.run(ctx, args).await {
                Ok(answer) => ToolOutput::ok(answer),
                Err(e) => ToolOutput::error(e),
            }
        })
    }
}

/// Cancels a child whose run is still going when dropped.
struct CancelOnDrop(Option<ActorRef<SessionMsg>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(session) = self.0.take() {
            let (reply, _) = ractor::concurrency::oneshot();
            let _ = session.cast(SessionMsg::Cancel {
                reply: reply.into(),
            });
        }
    }
}

/// What a child starts from: the parent's window as it is, so the request
/// shares the parent's prefix (the provider's prompt cache), with the
/// calls of its last reply answered — their results stay the parent's.
fn fork(window: &[Message]) -> Vec<Message> {
    let mut out = window.to_vec();
    let calls: Vec<Block> = window
        .last()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| {
            m.content
                .iter()
                .filter_map(|b| match b {
                    Block::ToolUse { id, .. } => Some(Block::ToolResult {
                        call_id: id.clone(),
                        content: "[this call continues in a sub-agent: you; your task follows]"
                            .into(),
                        is_error: false,
                    }),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    if !calls.is_empty() {
        out.push(Message {
            role: Role::User,
            content: calls,
        });
    }
    out
}

/// The text of a run's last reply, from its events: a model call after a
/// tool round starts afresh, a retried call voids only its own text, and
/// a reply continued after the output limit spans calls.
#[derive(Default)]
pub struct LastReply {
    pub text: String,
    call_start: usize,
    after_tools: bool,
    started: bool,
}

impl LastReply {
    pub fn see(&mut self, event: &SessionEvent) {
        match event {
            SessionEvent::LlmStart { .. } => {
                if self.after_tools || !self.started {
                    self.text.clear();
                }
                self.started = true;
                self.after_tools = false;
                self.call_start = self.text.len();
            }
            SessionEvent::Restart { .. } => self.text.truncate(self.call_start),
            SessionEvent::ToolCall { .. } => self.after_tools = true,
            SessionEvent::Text { delta } => self.text.push_str(delta),
            _ => {}
        }
    }
}
