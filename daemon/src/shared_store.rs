//! Joining the shared store at start: connect and migrate, retrying with
//! backoff while PostgreSQL cannot be reached or refuses us (saying so in
//! the log and in sd_notify STATUS, and keeping systemd's start timeout
//! from running out), then announce this node. READY waits for it.

use crate::notify;
use flyto_actors::store::postgres::{PgError, Shared, claims, migrate};
use std::time::Duration;

/// The shared store, joined as node `node`.
pub struct Joined {
    pub shared: Shared,
    pub node: String,
}

/// A node id that is new at every process start: host, pid and start time.
pub fn node_id(started_ms: u64) -> String {
    format!("{}-{}-{started_ms:x}", hostname(), std::process::id())
}

/// The node id of the previous run on `state_dir` (recorded in its file
/// `node`), and `node` recorded for the next. The state dir's lock is
/// ours, so that run is over.
pub fn previous_node(state_dir: &std::path::Path, node: &str) -> Option<String> {
    let path = state_dir.join("node");
    let previous = std::fs::read_to_string(&path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s != node);
    // Replaced whole and synced: a power cut must not leave it empty.
    let written = flyto_actors::durable::write_synced(&path, node.as_bytes(), 0o600);
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "cannot record this node's id; after a restart its channel leases run out by themselves");
    }
    previous
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Connects, migrates and registers; retries what may heal (the server
/// down, wrong credentials being fixed) and gives up at once on what
/// cannot (a malformed URL, a schema newer than this flytod). `waiting`
/// is told why at every retry (for `stats`).
pub async fn join(url: &str, node: String, waiting: &dyn Fn(&str)) -> anyhow::Result<Joined> {
    let mut backoff = Duration::from_millis(500);
    loop {
        let attempt = async {
            let shared = Shared::connect(url, &format!("flytod {node}")).await?;
            migrate(&shared).await?;
            claims::register_node(&shared, &node, &hostname(), std::process::id() as i32).await?;
            Ok::<Shared, PgError>(shared)
        };
        match attempt.await {
            Ok(shared) => {
                tracing::info!(db = %shared.target, node = %node, "joined the shared store");
                return Ok(Joined { shared, node });
            }
            Err(e @ (PgError::Url(_) | PgError::SchemaNewer { .. })) => {
                return Err(anyhow::anyhow!(e));
            }
            Err(e) => {
                let wait = backoff;
                waiting(&e.to_string());
                tracing::warn!(
                    "waiting for the shared store: {e}; retrying in {} ms",
                    wait.as_millis()
                );
                notify::status(&format!(
                    "waiting for the shared store (retrying in {} s): {e}",
                    wait.as_secs().max(1)
                ));
                // Waiting for the database is part of starting: tell
                // systemd not to give up on us meanwhile.
                notify::send(&[sd_notify::NotifyState::ExtendTimeoutUsec(
                    (wait + Duration::from_secs(30)).as_micros() as u32,
                )]);
                tokio::time::sleep(wait).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}
