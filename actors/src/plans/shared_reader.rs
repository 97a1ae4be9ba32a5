//! Read side of the plans on the shared store: every answer comes from
//! the database, so each node's `plan_status`, `plan_list` and
//! `plan_watch` show every node's work. A watch re-reads its plan when the
//! listener hears of a change (or at its fallback poll). It may not write.

use super::Reject;
use super::model::{PlanRecord, format_id, parse_id};
use super::reader::PlanCounts;
use super::shared::record_of;
use crate::store::postgres::listen::{Listener, Wake};
use crate::store::postgres::plans::{self, PLANS_CHANNEL};
use crate::store::postgres::{PgError, Shared};
use flyto_protocol::{ErrorCode, PlanState, PlanSummary, PlanView};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Clone)]
pub struct SharedReader {
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

impl SharedReader {
    /// A plan's number from its id (`p12`, `12`) or its name, when one
    /// plan has it.
    pub async fn resolve(&self, key: &str) -> Result<u64, Reject> {
        if let Some(n) = parse_id(key) {
            return Ok(n);
        }
        let named = plans::find_by_name(&self.shared, key)
            .await
            .map_err(unavailable)?;
        match named.as_slice() {
            [] => Err(Reject::not_found(key)),
            [(one, _)] => Ok(*one as u64),
            many => Err(Reject::ambiguous(
                key,
                many.len(),
                many.iter()
                    .take(Reject::NAMES_SHOWN)
                    .map(|(n, state)| format!("{} ({state})", format_id(*n as u64)))
                    .collect(),
            )),
        }
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

    fn view(&self, rec: PlanRecord) -> PlanView {
        let mut view = rec.into_view(&self.log_dir);
        if view.state == PlanState::Pending {
            view.waiting = Some(WAITING.into());
        }
        view
    }

    pub async fn status(&self, key: &str) -> Result<PlanView, Reject> {
        Ok(self.view(self.record(key).await?))
    }

    /// The current view and, unless the plan has finished, a watch of
    /// its next ones.
    pub async fn watch(&self, key: &str) -> Result<(PlanView, Option<SharedWatch>), Reject> {
        let n = self.resolve(key).await?;
        // Subscribed before reading: a change between the two still wakes.
        let wake = self.listener.subscribe_key(PLANS_CHANNEL, &n.to_string());
        let view = self.view(
            self.record_of(n)
                .await?
                .ok_or_else(|| Reject::not_found(key))?,
        );
        let watch = (!view.state.is_terminal()).then(|| SharedWatch {
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
pub struct SharedWatch {
    reader: SharedReader,
    plan: u64,
    wake: Wake,
    revision: u64,
}

impl SharedWatch {
    /// The plan's next view (a newer revision); `None` once it is gone.
    /// A database that does not answer is waited out: the listener wakes
    /// again when it reconnects.
    pub async fn next(&mut self) -> Option<PlanView> {
        loop {
            self.wake.woken().await;
            match self.reader.record_of(self.plan).await {
                Ok(Some(rec)) if rec.revision > self.revision => {
                    self.revision = rec.revision;
                    return Some(self.reader.view(rec));
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

impl super::reader::PlanLookup for SharedReader {
    fn status<'a>(&'a self, id: &'a str) -> super::AnswerFut<'a, PlanView> {
        Box::pin(SharedReader::status(self, id))
    }
}
