//! The plans on this node's sled store: the records (`sled_records.rs`),
//! and the views the one-machine scheduler publishes after each change's
//! sync, with its queue, so that readers answer from any task without a
//! round trip through the actor: live plans from the published views,
//! finished plans from the store. Only the scheduler writes here.

use super::{NextView, PlanChanges, PlanCounts, PlanRecords, PlanStore};
use crate::kernel::{AnswerFut, Reject};
use crate::plans::model::{format_id, parse_id};
use crate::plans::reader::pick;
use flyto_protocol::{PlanState, PlanSummary, PlanView};
use futures_util::future::BoxFuture;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use tokio::sync::watch;

/// Active plans, each with a watch channel holding its latest synced view
/// once one is made. Keyed by plan id with a fast hash: every submit adds one, to a map as
/// large as the queue (SipHash and its rehashes showed in profiles).
pub type LiveViews = Arc<RwLock<rustc_hash::FxHashMap<u64, Arc<LivePlan>>>>;

/// An active plan's view channel, made the first time a watcher or a
/// change of the plan needs it. A plan waiting in the queue unwatched has
/// none (most never have a watcher before they start): a channel and its
/// view cost a submit more CPU and memory than the rest of the plan.
///
/// While there is no channel the store holds the plan's last synced
/// record: the scheduler makes the channel (under this lock) before it
/// writes a change of the plan.
#[derive(Default)]
pub struct LivePlan {
    tx: Mutex<Option<Arc<watch::Sender<PlanView>>>>,
}

impl LivePlan {
    fn lock(&self) -> MutexGuard<'_, Option<Arc<watch::Sender<PlanView>>>> {
        self.tx.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The channel, made from `stored` (the view of the stored record) if
    /// there is none yet.
    pub(crate) fn sender(
        &self,
        stored: impl FnOnce() -> Result<PlanView, Reject>,
    ) -> Result<Arc<watch::Sender<PlanView>>, Reject> {
        let mut tx = self.lock();
        if let Some(tx) = &*tx {
            return Ok(tx.clone());
        }
        let made = Arc::new(watch::channel(stored()?).0);
        *tx = Some(made.clone());
        Ok(made)
    }

    /// The current view: the channel's, or `stored`'s while there is none
    /// (read under the lock, so before any unsynced change is written).
    fn current(
        &self,
        stored: impl FnOnce() -> Result<Option<PlanView>, Reject>,
    ) -> Result<Option<PlanView>, Reject> {
        let tx = self.lock();
        match &*tx {
            Some(tx) => Ok(Some(tx.borrow().clone())),
            None => stored(),
        }
    }
}

/// The sled backend of [`PlanStore`]: the scheduler writes the records
/// and publishes the views and queue; every clone reads them.
#[derive(Clone)]
pub struct SledPlans {
    pub(crate) store: Arc<dyn PlanRecords>,
    pub(crate) live: LiveViews,
    pub(crate) log_dir: PathBuf,
    pub(crate) steps_running: Arc<AtomicU64>,
    pub(crate) queue: Arc<RwLock<Queue>>,
}

/// The plan queue as the scheduler keeps it, so that readers can say where
/// a pending plan stands without asking the actor.
#[derive(Debug, Default)]
pub struct Queue {
    /// Pending plans, in the order they get a plan slot.
    pub(crate) pending: BTreeSet<u64>,
    /// Plans holding a slot.
    pub(crate) running: Vec<Slot>,
    pub(crate) max_plans: usize,
    pub(crate) draining: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Slot {
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

impl SledPlans {
    pub fn new(store: Arc<dyn PlanRecords>, log_dir: PathBuf) -> Self {
        SledPlans {
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
        pick(key, self.named(key)?)
    }

    /// Plans named `name`, newest first; the first few with their state.
    fn named(&self, name: &str) -> Result<Vec<(u64, Option<PlanState>)>, Reject> {
        let ids = self.store.find_by_name(name).map_err(Reject::internal)?;
        Ok(ids
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let state = (i < Reject::NAMES_SHOWN)
                    .then(|| self.view(n).ok().flatten().map(|v| v.state))
                    .flatten();
                (n, state)
            })
            .collect())
    }

    fn view(&self, n: u64) -> Result<Option<PlanView>, Reject> {
        match self.live_plan(n) {
            Some(live) => live.current(|| self.stored_view(n)),
            None => self.stored_view(n),
        }
    }

    fn live_plan(&self, n: u64) -> Option<Arc<LivePlan>> {
        self.live.read().ok().and_then(|m| m.get(&n).cloned())
    }

    /// Plan `n`'s view as the store holds it.
    pub(crate) fn stored_view(&self, n: u64) -> Result<Option<PlanView>, Reject> {
        Ok(self
            .store
            .get(n)
            .map_err(Reject::internal)?
            .map(|rec| rec.into_view(&self.log_dir)))
    }

    pub fn status(&self, id: &str) -> Result<PlanView, Reject> {
        let n = self.resolve(id)?;
        match self.view(n)? {
            Some(view) => Ok(self.place(view)),
            None => Err(Reject::not_found(id)),
        }
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
        self.follow(self.resolve(id)?, id)
    }

    /// [`SledPlans::watch`] of plan `n`, called `id` by the client.
    fn follow(
        &self,
        n: u64,
        id: &str,
    ) -> Result<(PlanView, Option<watch::Receiver<PlanView>>), Reject> {
        if let Some(live) = self.live_plan(n) {
            let tx = live.sender(|| self.stored_view(n)?.ok_or_else(|| Reject::not_found(id)))?;
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

/// The scheduler's published channel of a live plan.
impl NextView for watch::Receiver<PlanView> {
    fn next_view(&mut self) -> BoxFuture<'_, Option<PlanView>> {
        Box::pin(async move {
            match self.changed().await {
                Ok(()) => Some(self.borrow_and_update().clone()),
                Err(_) => None,
            }
        })
    }
}

/// Answers at once: everything is in memory or on this node's disk.
impl PlanStore for SledPlans {
    fn named<'a>(&'a self, name: &'a str) -> AnswerFut<'a, Vec<(u64, Option<PlanState>)>> {
        let named = self.named(name);
        Box::pin(async move { named })
    }

    fn view(&self, n: u64) -> AnswerFut<'_, Option<PlanView>> {
        let view = self.view(n);
        Box::pin(async move { view })
    }

    fn follow<'a>(
        &'a self,
        n: u64,
        key: &'a str,
    ) -> AnswerFut<'a, (PlanView, Option<PlanChanges>)> {
        let followed = self
            .follow(n, key)
            .map(|(view, rx)| (view, rx.map(PlanChanges::new)));
        Box::pin(async move { followed })
    }

    fn place(&self, view: PlanView) -> PlanView {
        SledPlans::place(self, view)
    }

    fn list(&self, state: Option<PlanState>, limit: usize) -> AnswerFut<'_, Vec<PlanSummary>> {
        let listed = self.list(state, limit);
        Box::pin(async move { listed })
    }

    fn total(&self, state: Option<PlanState>) -> AnswerFut<'_, u64> {
        let total = self.total(state);
        Box::pin(async move { total })
    }

    fn counts(&self) -> AnswerFut<'_, PlanCounts> {
        let counts = self.counts();
        Box::pin(async move { counts })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plans::store::SledPlanStore;
    use crate::plans::store::sled_records::tests::plan;
    use crate::store::testutil::{hold_commits, open_no_checkpoint, wait_durable};

    type Queued = (
        tempfile::TempDir,
        crate::store::Store,
        Arc<SledPlanStore>,
        SledPlans,
        Arc<LivePlan>,
    );

    /// A reader of a store holding plan `id`, queued and published as the
    /// scheduler does it (no channel yet).
    fn queued(id: u64) -> Queued {
        let tmp = tempfile::tempdir().unwrap();
        let store = open_no_checkpoint(&tmp.path().join("db"));
        let plans = Arc::new(SledPlanStore::open(store.clone()).unwrap());
        let reader = SledPlans::new(plans.clone(), tmp.path().join("logs"));
        plans.put(&plan(id, PlanState::Pending), None).unwrap();
        let live = Arc::new(LivePlan::default());
        reader.live.write().unwrap().insert(id, live.clone());
        (tmp, store, plans, reader, live)
    }

    /// The scheduler's order for a change of a live plan: the channel
    /// first, then the write, then (once synced) the new view.
    #[test]
    fn a_change_of_a_queued_plan_is_shown_only_once_synced() {
        let (_tmp, store, plans, reader, live) = queued(1);
        wait_durable(&store);
        // Queued and unwatched: no channel, the store's record is shown.
        assert_eq!(reader.status("p1").unwrap().state, PlanState::Pending);
        assert!(live.lock().is_none());

        let tx = live.sender(|| Ok(reader.stored_view(1)?.unwrap())).unwrap();
        let held = hold_commits(&store);
        let running = plan(1, PlanState::Running);
        plans.put(&running, Some(PlanState::Pending)).unwrap();
        assert_eq!(plans.get(1).unwrap().unwrap().state, PlanState::Running);
        let (view, rx) = reader.watch("p1").unwrap();
        assert_eq!(view.state, PlanState::Pending, "not synced yet");
        assert_eq!(reader.status("p1").unwrap().state, PlanState::Pending);
        drop(held);
        wait_durable(&store);
        tx.send_replace(running.view(&reader.log_dir));
        assert_eq!(reader.status("p1").unwrap().state, PlanState::Running);
        assert_eq!(rx.unwrap().borrow().state, PlanState::Running);
    }

    #[test]
    fn a_watcher_of_a_queued_plan_gets_a_channel_from_the_stored_record() {
        let (_tmp, _store, _plans, reader, live) = queued(7);
        let (view, rx) = reader.watch("p7").unwrap();
        assert_eq!((view.id.as_str(), view.state), ("p7", PlanState::Pending));
        // The scheduler's next change goes through the same channel.
        let tx = live.sender(|| panic!("the watcher made it")).unwrap();
        tx.send_replace(plan(7, PlanState::Cancelled).view(&reader.log_dir));
        assert_eq!(rx.unwrap().borrow().state, PlanState::Cancelled);
    }
}
