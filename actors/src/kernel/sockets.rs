//! Scoped plan sockets: the only way a process an agent starts reaches
//! the daemon. The daemon opens them (it is the part that knows sockets);
//! plans and sessions ask for one per child scope.

use super::confinement::SandboxSpec;

/// Per-scope plan sockets, opened by the daemon (the only part that knows
/// sockets): the path a child of `key` (a plan or session id) gets as
/// `FLYTO_PLAN_SOCK`. It serves plan requests only, sees only plans of
/// `chain`, and submits at `depth + 1`.
pub trait PlanSockets: Send + Sync + 'static {
    /// The socket's path, or `None` when it could not be opened. Plans
    /// submitted through it are confined by at least `sandbox`.
    fn open(
        &self,
        key: &str,
        chain: &str,
        depth: u32,
        sandbox: Option<SandboxSpec>,
    ) -> Option<String>;
    fn close(&self, key: &str);
}

/// No scoped sockets: children get the control socket (tests, tools).
pub struct NoPlanSockets;

impl PlanSockets for NoPlanSockets {
    fn open(
        &self,
        _key: &str,
        _chain: &str,
        _depth: u32,
        _sandbox: Option<SandboxSpec>,
    ) -> Option<String> {
        None
    }
    fn close(&self, _key: &str) {}
}
