//! Where plans are kept, behind one trait, [`PlanStore`], with a backend
//! per store, side by side: `sled.rs` (this node's sled store, written by
//! the one-machine scheduler; the record layout is `sled_records.rs`) and
//! `pg.rs` (the shared PostgreSQL store every node reads and writes). The
//! daemon picks one at start-up; the reader ([`super::PlanReader`]) and
//! whatever reads plans then ask the trait and never the backend.
//!
//! The trait's calls answer boxed futures: sled answers at once, the
//! shared store after a round trip.

pub mod pg;
pub mod pg_rows;
pub mod pg_writes;
pub mod sled;
pub mod sled_records;

pub use pg::PgPlans;
pub use sled::SledPlans;
pub use sled_records::{PlanRecords, SledPlanStore, decode_plan};

use crate::kernel::AnswerFut;
use flyto_protocol::{PlanState, PlanSummary, PlanView};
use futures_util::future::BoxFuture;

/// The plans of one store, as the readers see them: each view is the
/// plan as it stands once its last change is durable.
pub trait PlanStore: Send + Sync + 'static {
    /// Plans named `name`, newest first, the first
    /// [`crate::kernel::Reject::NAMES_SHOWN`] of them with their state (to
    /// tell them apart when a name is ambiguous).
    fn named<'a>(&'a self, name: &'a str) -> AnswerFut<'a, Vec<(u64, Option<PlanState>)>>;
    /// Plan `n`'s current view, `None` when there is no such plan; a
    /// pending plan's says what it waits for where the store knows it
    /// without [`PlanStore::place`].
    fn view(&self, n: u64) -> AnswerFut<'_, Option<PlanView>>;
    /// Plan `n`'s current view and, while it may still change, its next
    /// ones; `key` is what the client called it (for a not-found answer).
    fn follow<'a>(&'a self, n: u64, key: &'a str)
    -> AnswerFut<'a, (PlanView, Option<PlanChanges>)>;
    /// Fills in where pending plan `view` stands in the queue, for a
    /// store whose views do not carry it (it changes whenever any plan
    /// starts).
    fn place(&self, view: PlanView) -> PlanView {
        view
    }
    /// Newest first.
    fn list(&self, state: Option<PlanState>, limit: usize) -> AnswerFut<'_, Vec<PlanSummary>>;
    /// Plans in `state` (every plan without one).
    fn total(&self, state: Option<PlanState>) -> AnswerFut<'_, u64>;
    /// The numbers `stats` shows.
    fn counts(&self) -> AnswerFut<'_, PlanCounts>;
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

/// A source of a followed plan's next views: the scheduler's published
/// channel on sled, the listener's wake-ups and a re-read on PostgreSQL.
pub trait NextView: Send {
    /// The next view; `None` once there are no more.
    fn next_view(&mut self) -> BoxFuture<'_, Option<PlanView>>;
}

/// A followed plan's next views, whichever store they come from.
pub struct PlanChanges(Box<dyn NextView>);

impl PlanChanges {
    pub fn new(source: impl NextView + 'static) -> Self {
        PlanChanges(Box::new(source))
    }

    /// The next view; `None` once the source has no more (the plan left
    /// the live set or is gone).
    pub async fn next(&mut self) -> Option<PlanView> {
        self.0.next_view().await
    }
}
