//! Read side of the plan queue, usable from any task without a round trip
//! through the actor: live plans come from views the scheduler published
//! after their sync, finished plans from the store.

use super::Reject;
use super::model::parse_id;
use super::store::PlanStore;
use flyto_protocol::{PlanState, PlanSummary, PlanView};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use tokio::sync::watch;

/// Views of active plans, each a watch channel holding its latest synced view.
pub type LiveViews = Arc<RwLock<HashMap<u64, Arc<watch::Sender<PlanView>>>>>;

#[derive(Clone)]
pub struct PlanReader {
    pub(super) store: Arc<dyn PlanStore>,
    pub(super) live: LiveViews,
    pub(super) log_dir: PathBuf,
    pub(super) steps_running: Arc<AtomicU64>,
}

#[derive(Debug, Clone, Default)]
pub struct PlanCounts {
    pub pending: u64,
    pub running: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub steps_running: u64,
    pub db_bytes: u64,
    pub disk_syncs: u64,
}

impl PlanReader {
    pub fn new(store: Arc<dyn PlanStore>, log_dir: PathBuf) -> Self {
        PlanReader {
            store,
            live: Arc::default(),
            log_dir,
            steps_running: Arc::default(),
        }
    }

    fn id(id: &str) -> Result<u64, Reject> {
        parse_id(id).ok_or_else(|| Reject::not_found(id))
    }

    pub fn status(&self, id: &str) -> Result<PlanView, Reject> {
        Ok(self.watch(id)?.0)
    }

    /// The current view and, for a live plan, a receiver of its next ones.
    pub fn watch(&self, id: &str) -> Result<(PlanView, Option<watch::Receiver<PlanView>>), Reject> {
        let n = Self::id(id)?;
        if let Some(tx) = self.live.read().ok().and_then(|m| m.get(&n).cloned()) {
            let rx = tx.subscribe();
            let view = rx.borrow().clone();
            return Ok((view, Some(rx)));
        }
        match self.store.get(n).map_err(Reject::internal)? {
            Some(rec) => Ok((rec.into_view(&self.log_dir), None)),
            None => Err(Reject::not_found(id)),
        }
    }

    pub fn list(&self, state: Option<PlanState>, limit: usize) -> Result<Vec<PlanSummary>, Reject> {
        Ok(self
            .store
            .list(state, limit)
            .map_err(Reject::internal)?
            .iter()
            .map(|r| r.summary())
            .collect())
    }

    pub fn counts(&self) -> Result<PlanCounts, Reject> {
        let c = |s| self.store.count(s).map_err(Reject::internal);
        Ok(PlanCounts {
            pending: c(PlanState::Pending)?,
            running: c(PlanState::Running)?,
            succeeded: c(PlanState::Succeeded)?,
            failed: c(PlanState::Failed)?,
            cancelled: c(PlanState::Cancelled)?,
            steps_running: self.steps_running.load(Ordering::Relaxed),
            db_bytes: self.store.size_on_disk(),
            disk_syncs: self.store.disk_syncs(),
        })
    }
}
