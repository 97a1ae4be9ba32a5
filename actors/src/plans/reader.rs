//! Read side of the plan queue, usable from any task without a round trip
//! through the actor: live plans come from views the scheduler published
//! after their sync, finished plans from the store.

use super::Reject;
use super::model::{format_id, parse_id};
use super::store::PlanStore;
use flyto_protocol::{PlanState, PlanSummary, PlanView};
use std::collections::{BTreeSet, HashMap};
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
    pub(super) queue: Arc<RwLock<Queue>>,
}

/// The plan queue as the scheduler keeps it, so that readers can say where
/// a pending plan stands without asking the actor.
#[derive(Debug, Default)]
pub struct Queue {
    /// Pending plans, in the order they get a plan slot.
    pub(super) pending: BTreeSet<u64>,
    /// Plans holding a slot.
    pub(super) running: Vec<Slot>,
    pub(super) max_plans: usize,
    pub(super) draining: bool,
}

#[derive(Debug, Clone)]
pub(super) struct Slot {
    pub id: u64,
    pub chain: String,
    pub depth: u32,
    /// A child plan's slot beyond `max_parallel_plans`.
    pub extra: bool,
}

impl Queue {
    /// Where pending plan `view` stands: (what it waits for, position).
    fn place(&self, view: &PlanView, id: u64) -> (Option<String>, Option<u32>) {
        if !self.pending.contains(&id) {
            return (None, None);
        }
        let position = self.pending.range(..id).count() as u32 + 1;
        if self.draining {
            return (
                Some("flytod is shutting down: it runs when flytod starts again".into()),
                Some(position),
            );
        }
        let parent_running = view.depth > 0
            && self
                .running
                .iter()
                .any(|s| s.chain == view.chain && s.depth + 1 == view.depth);
        if parent_running
            && let Some(holder) = self
                .running
                .iter()
                .find(|s| s.extra && s.chain == view.chain && s.depth == view.depth)
        {
            return (
                Some(format!(
                    "waiting for {} to finish: child plans of a running chain get one slot per level beyond plans.max_parallel_plans, and {} holds this one",
                    format_id(holder.id),
                    format_id(holder.id)
                )),
                Some(position),
            );
        }
        let normal: Vec<String> = self
            .running
            .iter()
            .filter(|s| !s.extra)
            .map(|s| format_id(s.id))
            .collect();
        if normal.len() < self.max_plans {
            return (Some("starting".into()), Some(position));
        }
        let slots = format!(
            "waiting for a free plan slot; {} of {} in use by {}",
            normal.len(),
            self.max_plans,
            normal.join(", ")
        );
        let ahead = if position > 1 {
            format!("queued at position {position}, ")
        } else {
            String::new()
        };
        (Some(format!("{ahead}{slots}")), Some(position))
    }
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
            queue: Arc::default(),
        }
    }

    fn queue(&self) -> std::sync::RwLockReadGuard<'_, Queue> {
        self.queue.read().unwrap_or_else(|e| e.into_inner())
    }

    /// A plan's number from its id (`p12`, `12`) or its name, when one
    /// plan has it; several: `BadRequest` listing them, newest first.
    pub fn resolve(&self, key: &str) -> Result<u64, Reject> {
        if let Some(n) = parse_id(key) {
            return Ok(n);
        }
        let ids = self.store.find_by_name(key).map_err(Reject::internal)?;
        match ids.as_slice() {
            [] => Err(Reject::not_found(key)),
            [one] => Ok(*one),
            many => Err(Reject::ambiguous(
                key,
                many.len(),
                many.iter()
                    .take(Reject::NAMES_SHOWN)
                    .map(|&n| match self.view(n) {
                        Ok(Some(v)) => format!("{} ({})", v.id, v.state.as_str()),
                        _ => format_id(n),
                    })
                    .collect(),
            )),
        }
    }

    fn view(&self, n: u64) -> Result<Option<PlanView>, Reject> {
        if let Some(tx) = self.live.read().ok().and_then(|m| m.get(&n).cloned()) {
            return Ok(Some(tx.borrow().clone()));
        }
        Ok(self
            .store
            .get(n)
            .map_err(Reject::internal)?
            .map(|rec| rec.into_view(&self.log_dir)))
    }

    pub fn status(&self, id: &str) -> Result<PlanView, Reject> {
        Ok(self.watch(id)?.0)
    }

    /// Fills in where a pending plan stands in the queue (the published
    /// views do not carry it: it changes whenever any plan starts).
    pub fn place(&self, mut view: PlanView) -> PlanView {
        if view.state == PlanState::Pending
            && let Some(n) = parse_id(&view.id)
        {
            (view.waiting, view.queue_position) = self.queue().place(&view, n);
        }
        view
    }

    /// The current view (by id or name) and, for a live plan, a receiver
    /// of its next ones.
    pub fn watch(&self, id: &str) -> Result<(PlanView, Option<watch::Receiver<PlanView>>), Reject> {
        let n = self.resolve(id)?;
        if let Some(tx) = self.live.read().ok().and_then(|m| m.get(&n).cloned()) {
            let rx = tx.subscribe();
            let view = rx.borrow().clone();
            return Ok((self.place(view), Some(rx)));
        }
        match self.store.get(n).map_err(Reject::internal)? {
            Some(rec) => Ok((rec.into_view(&self.log_dir), None)),
            None => Err(Reject::not_found(id)),
        }
    }

    pub fn list(&self, state: Option<PlanState>, limit: usize) -> Result<Vec<PlanSummary>, Reject> {
        let plans = self.store.list(state, limit).map_err(Reject::internal)?;
        let queue = self.queue();
        Ok(plans
            .iter()
            .map(|r| {
                let mut s = r.summary();
                if r.state == PlanState::Pending && queue.pending.contains(&r.id) {
                    s.queue_position = Some(queue.pending.range(..r.id).count() as u32 + 1);
                }
                s
            })
            .collect())
    }

    /// Plans in `state` (every plan without one), from the kept counts.
    pub fn total(&self, state: Option<PlanState>) -> Result<u64, Reject> {
        let c = |s| self.store.count(s).map_err(Reject::internal);
        match state {
            Some(s) => c(s),
            None => PlanState::ALL.iter().try_fold(0, |sum, s| Ok(sum + c(*s)?)),
        }
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

/// A plan's status by id, from whichever store holds the plans: what the
/// jobs room asks of its runs.
pub trait PlanLookup: Send + Sync + 'static {
    fn status<'a>(&'a self, id: &'a str) -> super::AnswerFut<'a, PlanView>;
}

impl PlanLookup for PlanReader {
    fn status<'a>(&'a self, id: &'a str) -> super::AnswerFut<'a, PlanView> {
        Box::pin(async move { PlanReader::status(self, id) })
    }
}
