//! The plans on the shared PostgreSQL store, the backend of
//! [`PlanStore`] every node of a cluster uses: every answer comes from the
//! database, so each node's `plan_status`, `plan_list` and `plan_watch`
//! show every node's work. A followed plan is read again when the
//! listener hears of a change (or at its fallback poll). Its reads may
//! not write; the SQL is `store/postgres/plans.rs`.

use super::pg_rows::{plan_state, record_of};
use super::{NextView, PlanChanges, PlanCounts, PlanStore};
use crate::kernel::{AnswerFut, Reject};
use crate::plans::model::{PlanRecord, parse_id};
use crate::plans::reader::pick;
use crate::store::postgres::listen::{Listener, Wake};
use crate::store::postgres::plans::{self, PLANS_CHANNEL};
use crate::store::postgres::{PgError, Shared};
use flyto_protocol::{ErrorCode, PlanState, PlanSummary, PlanView};
use futures_util::future::BoxFuture;
use std::path::PathBuf;
use std::sync::Arc;

/// The PostgreSQL backend of [`PlanStore`].
#[derive(Clone)]
pub struct PgPlans {
    pub shared: Shared,
    /// The daemon's one listener (on [`PLANS_CHANNEL`] among others).
    pub listener: Arc<Listener>,
    pub log_dir: PathBuf,
}

/// The database could not answer: say which and that it is worth a retry.
pub fn unavailable(e: PgError) -> Reject {
    Reject::new(
        ErrorCode::Unavailable,
        format!("the shared store cannot answer: {e}; retry once PostgreSQL is reachable again"),
    )
}

/// A plan waiting for its first step to be claimed.
const WAITING: &str = "waiting for a node with a free step slot";

impl PgPlans {
    /// A plan's number from its id (`p12`, `12`) or its name, when one
    /// plan has it.
    pub async fn resolve(&self, key: &str) -> Result<u64, Reject> {
        if let Some(n) = parse_id(key) {
            return Ok(n);
        }
        pick(key, self.named(key).await?)
    }

    /// Plans named `name`, newest first, with their state.
    async fn named(&self, name: &str) -> Result<Vec<(u64, Option<PlanState>)>, Reject> {
        let named = plans::find_by_name(&self.shared, name)
            .await
            .map_err(unavailable)?;
        Ok(named
            .into_iter()
            .map(|(n, state)| (n as u64, Some(plan_state(&state))))
            .collect())
    }

    /// The plan behind `key` as it stands now: its record as submitted,
    /// with its live state.
    pub async fn record(&self, key: &str) -> Result<PlanRecord, Reject> {
        let n = self.resolve(key).await?;
        self.record_of(n)
            .await?
            .ok_or_else(|| Reject::not_found(key))
    }

    pub async fn record_of(&self, n: u64) -> Result<Option<PlanRecord>, Reject> {
        let row = plans::get_plan(&self.shared, n as i64)
            .await
            .map_err(unavailable)?;
        row.map(|r| record_of(&r).map_err(Reject::internal))
            .transpose()
    }

    /// The view a client sees of `rec`.
    fn view_of(&self, rec: PlanRecord) -> PlanView {
        let mut view = rec.into_view(&self.log_dir);
        if view.state == PlanState::Pending {
            view.waiting = Some(WAITING.into());
        }
        view
    }

    pub async fn status(&self, key: &str) -> Result<PlanView, Reject> {
        Ok(self.view_of(self.record(key).await?))
    }

    /// The current view and, unless the plan has finished, a watch of
    /// its next ones.
    pub async fn watch(&self, key: &str) -> Result<(PlanView, Option<PgWatch>), Reject> {
        self.follow(self.resolve(key).await?, key).await
    }

    /// [`PgPlans::watch`] of plan `n`, called `key` by the client.
    async fn follow(&self, n: u64, key: &str) -> Result<(PlanView, Option<PgWatch>), Reject> {
        // Subscribed before reading: a change between the two still wakes.
        let wake = self.listener.subscribe_key(PLANS_CHANNEL, &n.to_string());
        let view = self.view_of(
            self.record_of(n)
                .await?
                .ok_or_else(|| Reject::not_found(key))?,
        );
        let watch = (!view.state.is_terminal()).then(|| PgWatch {
            reader: self.clone(),
            plan: n,
            wake,
            revision: view.revision,
        });
        Ok((view, watch))
    }

    pub async fn list(
        &self,
        state: Option<PlanState>,
        limit: usize,
    ) -> Result<Vec<PlanSummary>, Reject> {
        let rows = plans::list_plans(&self.shared, state.map(PlanState::as_str), limit as i64)
            .await
            .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                record_of(r)
                    .map(|rec| rec.summary())
                    .map_err(Reject::internal)
            })
            .collect()
    }

    pub async fn total(&self, state: Option<PlanState>) -> Result<u64, Reject> {
        let n = plans::count_plans(&self.shared, state.map(PlanState::as_str))
            .await
            .map_err(unavailable)?;
        Ok(n.max(0) as u64)
    }

    pub async fn counts(&self) -> Result<PlanCounts, Reject> {
        let (states, steps_running, size) =
            plans::counts(&self.shared).await.map_err(unavailable)?;
        let of = |s: PlanState| {
            states
                .iter()
                .find(|(name, _)| name == s.as_str())
                .map_or(0, |(_, n)| (*n).max(0) as u64)
        };
        Ok(PlanCounts {
            pending: of(PlanState::Pending),
            running: of(PlanState::Running),
            succeeded: of(PlanState::Succeeded),
            failed: of(PlanState::Failed),
            cancelled: of(PlanState::Cancelled),
            steps_running: steps_running.max(0) as u64,
            // The shared database's, all nodes' rows; its syncs are its own.
            db_bytes: size.max(0) as u64,
            disk_syncs: 0,
        })
    }
}

/// One plan's changes, read again when it changed (its notification, or
/// the listener's reconnect and fallback poll).
pub struct PgWatch {
    reader: PgPlans,
    plan: u64,
    wake: Wake,
    revision: u64,
}

impl PgWatch {
    /// The plan's next view (a newer revision); `None` once it is gone.
    /// A database that does not answer is waited out: the listener wakes
    /// again when it reconnects.
    pub async fn next(&mut self) -> Option<PlanView> {
        loop {
            self.wake.woken().await;
            match self.reader.record_of(self.plan).await {
                Ok(Some(rec)) if rec.revision > self.revision => {
                    self.revision = rec.revision;
                    return Some(self.reader.view_of(rec));
                }
                Ok(Some(_)) => {}
                Ok(None) => return None,
                Err(r) => {
                    tracing::debug!(plan = self.plan, error = %r.message, "a watch cannot read its plan")
                }
            }
        }
    }
}

impl NextView for PgWatch {
    fn next_view(&mut self) -> BoxFuture<'_, Option<PlanView>> {
        Box::pin(self.next())
    }
}

/// Each answer is a query (or two) of the shared database.
impl PlanStore for PgPlans {
    fn named<'a>(&'a self, name: &'a str) -> AnswerFut<'a, Vec<(u64, Option<PlanState>)>> {
        Box::pin(self.named(name))
    }

    fn view(&self, n: u64) -> AnswerFut<'_, Option<PlanView>> {
        Box::pin(async move { Ok(self.record_of(n).await?.map(|rec| self.view_of(rec))) })
    }

    fn follow<'a>(
        &'a self,
        n: u64,
        key: &'a str,
    ) -> AnswerFut<'a, (PlanView, Option<PlanChanges>)> {
        Box::pin(async move {
            let (view, watch) = self.follow(n, key).await?;
            Ok((view, watch.map(PlanChanges::new)))
        })
    }

    fn list(&self, state: Option<PlanState>, limit: usize) -> AnswerFut<'_, Vec<PlanSummary>> {
        Box::pin(self.list(state, limit))
    }

    fn total(&self, state: Option<PlanState>) -> AnswerFut<'_, u64> {
        Box::pin(self.total(state))
    }

    fn counts(&self) -> AnswerFut<'_, PlanCounts> {
        Box::pin(self.counts())
    }
}
