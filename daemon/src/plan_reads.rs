//! Where the server reads plans: the one-machine scheduler's published
//! views and sled store, or the shared store. Only the answers' source
//! differs; the requests and their answers are the same.

use flyto_actors::plans::reader::PlanCounts;
use flyto_actors::plans::shared_reader::{SharedReader, SharedWatch};
use flyto_actors::plans::{PlanReader, Reject};
use flyto_protocol::{PlanState, PlanSummary, PlanView};
use tokio::sync::watch;

pub enum PlanReads {
    Local(PlanReader),
    Shared(Box<SharedReader>),
    /// The shared store is not joined yet (flytod is starting).
    Joining,
}

pub fn joining() -> Reject {
    Reject::new(
        flyto_protocol::ErrorCode::Unavailable,
        "flytod is starting (on the shared store it waits to reach the database; `flytoctl stats` says why): retry in a moment",
    )
}

/// A plan's next views.
pub enum PlanChanges {
    Local(watch::Receiver<PlanView>),
    Shared(Box<SharedWatch>),
}

impl PlanChanges {
    /// The next view; `None` once the source has no more (the plan left
    /// the live set or is gone).
    pub async fn next(&mut self) -> Option<PlanView> {
        match self {
            PlanChanges::Local(rx) => match rx.changed().await {
                Ok(()) => Some(rx.borrow_and_update().clone()),
                Err(_) => None,
            },
            PlanChanges::Shared(w) => w.next().await,
        }
    }
}

impl PlanReads {
    pub async fn status(&self, id: &str) -> Result<PlanView, Reject> {
        match self {
            PlanReads::Local(r) => r.status(id),
            PlanReads::Shared(r) => r.status(id).await,
            PlanReads::Joining => Err(joining()),
        }
    }

    pub async fn watch(&self, id: &str) -> Result<(PlanView, Option<PlanChanges>), Reject> {
        match self {
            PlanReads::Local(r) => r.watch(id).map(|(v, rx)| (v, rx.map(PlanChanges::Local))),
            PlanReads::Shared(r) => r
                .watch(id)
                .await
                .map(|(v, w)| (v, w.map(|w| PlanChanges::Shared(Box::new(w))))),
            PlanReads::Joining => Err(joining()),
        }
    }

    /// Fills in where a pending plan stands (the shared store's views
    /// carry it already).
    pub fn place(&self, view: PlanView) -> PlanView {
        match self {
            PlanReads::Local(r) => r.place(view),
            PlanReads::Shared(_) | PlanReads::Joining => view,
        }
    }

    pub async fn list(
        &self,
        state: Option<PlanState>,
        limit: usize,
    ) -> Result<Vec<PlanSummary>, Reject> {
        match self {
            PlanReads::Local(r) => r.list(state, limit),
            PlanReads::Shared(r) => r.list(state, limit).await,
            PlanReads::Joining => Err(joining()),
        }
    }

    pub async fn total(&self, state: Option<PlanState>) -> Result<u64, Reject> {
        match self {
            PlanReads::Local(r) => r.total(state),
            PlanReads::Shared(r) => r.total(state).await,
            PlanReads::Joining => Err(joining()),
        }
    }

    pub async fn counts(&self) -> Result<PlanCounts, Reject> {
        match self {
            PlanReads::Local(r) => r.counts(),
            PlanReads::Shared(r) => r.counts().await,
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
