//! What `stats` reports about the daemon and its peers on a shared store.

use super::*;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DaemonStats {
    pub daemon_version: String,
    pub pid: u32,
    pub uptime_ms: u64,
    pub draining: bool,
    pub plans_pending: u64,
    pub plans_running: u64,
    pub plans_succeeded: u64,
    pub plans_failed: u64,
    pub plans_cancelled: u64,
    pub steps_running: u64,
    pub scheduler_restarts: u64,
    pub db_bytes: u64,
    pub sessions: u64,
    pub sessions_running: u64,
    /// Session actors in memory (idle ones stop after `sessions.idle_stop`).
    pub sessions_live: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    pub compactions: u64,
    pub breakers_open: u64,
    /// Live sessions' context budgets, fullest first (at most 10).
    pub contexts: Vec<SessionContext>,
    /// `fdatasync`/`fsync` calls the store made since start (WAL group
    /// commits and checkpoints); over the submits acknowledged meanwhile,
    /// how many acknowledgements share one sync.
    pub disk_syncs: u64,
    /// How agents' processes are confined here: "landlock ABI 7, mount
    /// namespace", or why they are not.
    pub sandbox: String,
    /// The kernel's Landlock ABI; 0: none.
    pub landlock_abi: u32,
    /// Where plans are kept: "sled at <dir>", or "postgres at host:port
    /// (database d, user u)" for the shared store.
    pub store: String,
    /// This daemon's node id on the shared store (new at every start);
    /// empty with sled.
    pub node: String,
    /// The nodes on the shared store that heartbeated lately, this one
    /// among them.
    pub peers: Vec<PeerView>,
}

/// A node of the shared store, as `stats` shows it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PeerView {
    pub node: String,
    pub host: String,
    pub pid: u32,
    /// Since its last heartbeat, by the database's clock.
    pub heartbeat_age_ms: u64,
}
