//! tools: everything that runs on the user's machine on the agent's or a
//! plan's behalf — process execution with the process rules of
//! docs/design.md ("Processes and their environment"), and the agent's
//! builtin tools (`read`, `write`, `edit`, `glob`, `grep`, `bash`) behind
//! the [`Tool`] trait, with workdir confinement, secret scanning and the
//! bash permission policy. Every spawn is recorded in the spawn table
//! (`process.rs`) until its leader is reaped: the daemon's main-socket
//! peer check and orphan reaper read it.
//!
//! **Invariant**: tools never touch storage or actors; callers persist.
//! **Invariant**: a tool's future stops its work (and kills its process
//! group) when the context's cancellation token fires.

pub mod bash;
pub mod builtin;
pub mod edit;
pub mod env;
pub mod fs_guard;
pub mod glob;
pub mod grep;
pub mod inline_code;
pub mod leftovers;
pub mod model_output;
pub mod policy;
pub mod process;
pub mod read;
pub mod sandbox;
pub mod secrets;
pub mod shell;
pub mod socket_gate;
pub mod write;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What a tool call may use: where it runs, what its children get, and how
/// it is stopped.
#[derive(Clone)]
pub struct ToolContext {
    /// Canonical session workdir; file tools are confined to it.
    pub workdir: PathBuf,
    /// Environment for child processes (already filtered, with `FLYTO_*`).
    pub env: Vec<(String, String)>,
    /// Fires on cancel: the tool stops and kills what it started.
    pub cancel: CancellationToken,
    /// Who may approve an `ask` command; `None` (plans, tests): no one, so
    /// an ask is a refusal.
    pub approver: Option<Arc<dyn Approver>>,
    /// The confinement of the processes the tools start.
    pub sandbox: Option<sandbox::SandboxSpec>,
    /// People's hooks around each call; `None`: none.
    pub hooks: Option<Arc<dyn ToolHooks>>,
}

/// What runs around a tool call (the hooks room, through the session).
pub trait ToolHooks: Send + Sync {
    /// Before the call: `Some(reason)` blocks it (the model gets the
    /// reason as the call's error).
    fn before<'a>(
        &'a self,
        tool: &'a str,
        args_json: &'a str,
    ) -> Pin<Box<dyn Future<Output = Option<String>> + Send + 'a>>;
    /// After the call, with its result; must not hold the run up.
    fn after(&self, tool: &str, args_json: &str, output: &ToolOutput);
}

/// How a request for a person's approval ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approval {
    Allowed,
    Denied,
    /// No client that can answer is attached (or the last one left).
    NoOneAttached,
    /// No one answered within this long.
    TimedOut(std::time::Duration),
}

/// Asks a person whether a command the policy flagged `ask` may run.
/// Dropping the future withdraws the request.
pub trait Approver: Send + Sync {
    /// `command`: the whole command line; `rule`: the rule that asks and why.
    fn approve<'a>(
        &'a self,
        command: &'a str,
        rule: &'a str,
    ) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>>;
}

/// A tool's answer, as the model will see it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            is_error: false,
        }
    }
    pub fn error(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            is_error: true,
        }
    }
}

pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = ToolOutput> + Send + 'a>>;

pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    /// One paragraph for the model.
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object, as JSON text.
    fn input_schema(&self) -> &str;
    /// The schema for a session in `workdir`, when it depends on it (e.g.
    /// `load_skill`'s enum of skills); `None`: the static one.
    fn input_schema_for(&self, _workdir: &std::path::Path) -> Option<String> {
        None
    }
    /// Whether a session whose tools get `env` is offered this tool (the
    /// schedule tools are not, in a job's run); a call of a tool not
    /// offered still reaches `call`, which must refuse it itself.
    fn offered(&self, _env: &[(String, String)]) -> bool {
        true
    }
    /// True when this call may run in parallel with other safe calls
    /// (reads); false for anything that changes state.
    fn concurrency_safe(&self, args_json: &str) -> bool;
    /// Runs the call. Bad arguments are an error output, never a panic.
    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a>;
}

/// The tools a session offers, by name.
#[derive(Clone, Default)]
pub struct Registry {
    tools: Vec<Arc<dyn Tool>>,
}

impl Registry {
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        Registry { tools }
    }
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.name() == name)
    }
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.iter()
    }
    /// Only the tools named in `names`.
    pub fn only(&self, names: &[String]) -> Registry {
        Registry {
            tools: self
                .tools
                .iter()
                .filter(|t| names.iter().any(|n| n == t.name()))
                .cloned()
                .collect(),
        }
    }
    /// These tools and `more` (MCP servers' tools, say).
    pub fn with(&self, more: &[Arc<dyn Tool>]) -> Registry {
        let mut tools = self.tools.clone();
        tools.extend(more.iter().cloned());
        Registry { tools }
    }
}
