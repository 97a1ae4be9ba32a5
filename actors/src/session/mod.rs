//! session: agent sessions. The `SessionManager` maps session ids to
//! `SessionActor`s, spawning them on demand and letting idle ones stop; a
//! session's state lives in sled (`store.rs`), not in the actor. A
//! `SessionActor` owns at most one run, a task it can cancel (`run.rs`):
//! the ReAct loop over the provider layer (`crate::llm`) and the tools
//! (`crate::tools`, through `orchestrator.rs`), with the transcript
//! repaired by `normalize.rs` before every provider call. `approval.rs`
//! holds a session's pending `ask` approvals: the attached clients that
//! can answer, first answer wins, bounded by `approval_timeout`.
//!
//! **Invariant**: during a run only the run task writes the session's
//! record and messages; outside a run only the actor does.
//! **Invariant**: a stored transcript never ends with a tool call without
//! its result — cancel writes `[cancelled by user]` results, recovery after
//! a crash writes `interrupted` results. A cancelled reply leaves a
//! `[cancelled]` assistant message, so the user sees it in the history and
//! the model on its next run.
//! It never sees a connection; the daemon translates requests.

pub mod actor;
pub mod approval;
pub mod context;
pub mod follow;
pub mod manager;
pub mod model;
pub mod orchestrator;
pub mod run;
pub mod shared;
pub mod store;
pub mod subagent;

pub use actor::{SessionActor, SessionMsg, Subscription};
pub use manager::{ManagerMsg, SESSION_MANAGER, SESSION_MANAGER_NAME, SessionManager};
pub use model::SessionSandbox;
pub use store::{SessionStore, SledSessionStore};

use crate::clock::Clock;
use crate::kernel::PlanSockets;
use crate::llm::{LlmClient, LlmError, Models, Route};
use crate::tools::Registry;
use std::sync::{Arc, RwLock};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Model calls per run before it stops (a backstop).
    pub max_iterations: u32,
    /// Stop a run whose provider cost passes this (USD); 0 = no limit.
    pub max_run_cost_usd: f64,
    /// Automatic "continue" requests after a reply hit its output limit.
    pub max_continuations: u32,
    /// An actor with no run and no listener stops after this long.
    pub idle_stop: Duration,
    pub default_workdir: String,
    /// Profile or role used when a session names none.
    pub default_model: String,
    /// The control socket: tool processes get it as `FLYTO_PLAN_SOCK` only
    /// when no scoped plan socket could be opened.
    pub plan_socket: String,
    /// How long an `ask` waits for an attached person's answer.
    pub approval_timeout: Duration,
    /// `[sandbox] profile` and `network`: what a session that names no
    /// sandbox gets.
    pub sandbox_profile: crate::tools::sandbox::Profile,
    pub sandbox_network: bool,
    /// `[memory]`: how much memory each model call gets.
    pub memory: crate::memory::prompt::InjectConfig,
    /// `[memory] extract_every`: turns without a memory write of the
    /// agent's own after which a background extraction runs; 0: never.
    pub extract_every: u32,
    /// Sub-agents below a session people started: the `agent` tool is not
    /// offered at this depth; 0 turns it off.
    pub max_agent_depth: u32,
    /// Model calls of one sub-agent's run.
    pub agent_max_iterations: u32,
    /// The share of its parent's remaining run budget a sub-agent may
    /// spend (with `max_run_cost_usd` set).
    pub agent_budget_share: f64,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            max_iterations: 50,
            max_run_cost_usd: 0.0,
            max_continuations: 3,
            idle_stop: Duration::from_secs(600),
            default_workdir: std::env::var("HOME").unwrap_or_else(|_| "/".into()),
            default_model: "main".into(),
            plan_socket: String::new(),
            approval_timeout: Duration::from_secs(300),
            sandbox_profile: crate::tools::sandbox::Profile::WorkspaceWrite,
            sandbox_network: true,
            memory: crate::memory::prompt::InjectConfig::default(),
            extract_every: 5,
            max_agent_depth: 2,
            agent_max_iterations: 20,
            agent_budget_share: 0.5,
        }
    }
}

/// What every session actor and run shares.
pub struct SessionDeps {
    pub store: Arc<dyn SessionStore>,
    pub llm: LlmClient,
    pub models: RwLock<Arc<Models>>,
    pub tools: Registry,
    pub config: RwLock<SessionConfig>,
    pub clock: Arc<dyn Clock>,
    /// Scoped plan sockets for the agent's children.
    pub sockets: Arc<dyn PlanSockets>,
    /// The skills every session sees (its catalogue and `load_skill`).
    pub skills: Arc<crate::skills::SkillRegistry>,
    /// The memory the system prompt carries of the session's project.
    pub memory: crate::memory::Memory,
    /// Background memory extractions in flight, one per project.
    pub extractions: crate::memory::extract::Flights,
    /// People's hooks around runs and tool calls.
    pub hooks: Arc<crate::hooks::Hooks>,
    /// MCP servers' tools; `None`: no MCP room.
    pub mcp: Option<crate::mcp::McpHandle>,
    /// Told of each message a session takes (workdir, session, at ms):
    /// dream counts sessions per project by it. The daemon wires it, so
    /// this room never reaches into dream.
    pub on_activity: Option<OnActivity>,
}

/// See [`SessionDeps::on_activity`].
pub type OnActivity = Arc<dyn Fn(&str, u64, u64) + Send + Sync>;

impl SessionDeps {
    pub fn config(&self) -> SessionConfig {
        self.config.read().map(|c| c.clone()).unwrap_or_default()
    }
    /// The context budget of a session's model, None when it is unknown.
    pub fn budget(&self, model: &str) -> Option<crate::compaction::Budget> {
        context::budget(&self.models(), model)
    }
    pub fn models(&self) -> Arc<Models> {
        self.models
            .read()
            .map(|m| m.clone())
            .unwrap_or_else(|_| Arc::new(Models::default()))
    }
}

/// What a session's `model` names: a role (`main`, `fast`) or a profile.
pub fn route_for(models: &Models, model: &str) -> Result<Route, LlmError> {
    if model == "main" || model == "fast" {
        return models.route(model);
    }
    match models.profile(model) {
        Some(profile) => Ok(Route::single(model, profile.clone())),
        None => Err(LlmError::Config {
            detail: format!(
                "no model profile or role named `{model}`: use main, fast, or one of the [models.<name>] profiles in the config"
            ),
        }),
    }
}

/// Asks a session-room actor (the manager or a session) and waits at
/// most a minute: its refusal comes back as its message.
pub async fn ask<M: Send + 'static, T: Send + 'static>(
    actor: &ractor::ActorRef<M>,
    build: impl FnOnce(ractor::RpcReplyPort<Result<T, crate::kernel::Reject>>) -> M,
) -> Result<T, String> {
    match actor
        .call(build, Some(std::time::Duration::from_secs(60)))
        .await
    {
        Ok(ractor::rpc::CallResult::Success(Ok(v))) => Ok(v),
        Ok(ractor::rpc::CallResult::Success(Err(r))) => Err(r.message),
        _ => Err("the session room did not answer; see the daemon log".into()),
    }
}
