//! Where the server reads plans: the reader over the plan store the
//! daemon opened (this node's sled store, or the shared store), or none
//! yet while the shared store is being joined.

use flyto_actors::plans::{PlanChanges, PlanCounts, PlanReader, Reject};
use flyto_protocol::{PlanState, PlanSummary, PlanView};

pub enum PlanReads {
    Open(PlanReader),
    /// The shared store is not joined yet (flytod is starting).
    Joining,
}

pub fn joining() -> Reject {
    Reject::new(
        flyto_protocol::ErrorCode::Unavailable,
        "flytod is starting (on the shared store it waits to reach the database; `flytoctl stats` says why): retry in a moment",
    )
}

impl PlanReads {
    fn open(&self) -> Result<&PlanReader, Reject> {
        match self {
            PlanReads::Open(r) => Ok(r),
            PlanReads::Joining => Err(joining()),
        }
    }

    pub async fn status(&self, id: &str) -> Result<PlanView, Reject> {
        self.open()?.status(id).await
    }

    pub async fn watch(&self, id: &str) -> Result<(PlanView, Option<PlanChanges>), Reject> {
        self.open()?.watch(id).await
    }

    /// Fills in where a pending plan stands (the shared store's views
    /// carry it already).
    pub fn place(&self, view: PlanView) -> PlanView {
        match self {
            PlanReads::Open(r) => r.place(view),
            PlanReads::Joining => view,
        }
    }

    pub async fn list(
        &self,
        state: Option<PlanState>,
        limit: usize,
    ) -> Result<Vec<PlanSummary>, Reject> {
        self.open()?.list(state, limit).await
    }

    pub async fn total(&self, state: Option<PlanState>) -> Result<u64, Reject> {
        self.open()?.total(state).await
    }

    pub async fn counts(&self) -> Result<PlanCounts, Reject> {
        match self {
            PlanReads::Open(r) => r.counts().await,
            // Nothing to count yet; `stats` says why.
            PlanReads::Joining => Ok(PlanCounts::default()),
        }
    }
}

/// Where plans are kept, for `stats`.
pub struct StoreInfo {
    /// "sled at <dir>", or "postgres at <host:port> (…)".
    pub describe: String,
    /// The shared store and this node's id on it.
    pub shared: Option<(flyto_actors::store::postgres::Shared, String)>,
}

/// Nodes that heartbeated within this long count as peers.
const PEER_WINDOW: std::time::Duration = std::time::Duration::from_secs(120);

impl StoreInfo {
    /// This node's id and the nodes seen lately (none with sled, or when
    /// the database does not answer).
    pub async fn peers(&self) -> (String, Vec<flyto_protocol::PeerView>) {
        let Some((shared, node)) = &self.shared else {
            return (String::new(), Vec::new());
        };
        let rows = flyto_actors::store::postgres::claims::nodes(shared, PEER_WINDOW)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "stats: cannot list the shared store's nodes");
                Vec::new()
            });
        let peers = rows
            .into_iter()
            .map(|n| flyto_protocol::PeerView {
                node: n.id,
                host: n.host,
                pid: n.pid.max(0) as u32,
                heartbeat_age_ms: n.heartbeat_age_ms.max(0) as u64,
            })
            .collect();
        (node.clone(), peers)
    }
}
