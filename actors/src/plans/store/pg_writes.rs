//! The write side of the PostgreSQL backend ([`PgPlans`]): submit, cancel
//! (answered once the attempts it revoked have stopped), remove, and the
//! marking of ended plans whose `plan_finished` hooks a node runs. The
//! transitions of steps and plans are the database's (`store/postgres/
//! plans.rs` and `claims.rs`); the scheduler of a node on the shared store
//! asks these and no SQL of its own.

use super::PgPlans;
use super::pg::unavailable;
use super::pg_rows::{self, Submitted, plan_state};
use crate::kernel::Reject;
use crate::plans::model::{PlanRecord, format_id};
use crate::plans::scheduler::Cancelled;
use crate::store::postgres::PgError;
use crate::store::postgres::claims;
use crate::store::postgres::plans::{self, Cancel, PLANS_CHANNEL};
use flyto_protocol::PlanState;
use std::time::Duration;

/// How long a cancel waits for the attempts it revoked to stop, beyond
/// the kill grace: their nodes hear of it at once (LISTEN/NOTIFY).
const CANCEL_WAIT: Duration = Duration::from_secs(10);

impl PgPlans {
    /// The id the next new plan gets (the database's sequence).
    pub async fn next_id(&self) -> Result<u64, Reject> {
        Ok(plans::next_plan_id(&self.shared)
            .await
            .map_err(unavailable)? as u64)
    }

    /// Stores `rec` as a new plan, unless its idempotency key is an
    /// earlier plan's: then that one.
    pub async fn submit(&self, rec: PlanRecord) -> Result<Submitted, Reject> {
        pg_rows::submit(&self.shared, rec)
            .await
            .map_err(unavailable)
    }

    /// Cancels the plan behind `key`: its leases are revoked, and the
    /// answer waits (up to `kill_grace` and [`CANCEL_WAIT`]) until each
    /// revoked attempt's node has seen its process end.
    pub async fn cancel(&self, key: &str, kill_grace: Duration) -> Result<Cancelled, Reject> {
        let n = self.resolve(key).await?;
        let mut wake = self.listener.subscribe(PLANS_CHANNEL);
        let revoked = match plans::cancel_plan(&self.shared, n as i64, "cancelled by user")
            .await
            .map_err(unavailable)?
        {
            Cancel::NotFound => return Err(Reject::not_found(key)),
            Cancel::Finished(state) => {
                return Ok(Cancelled {
                    id: format_id(n),
                    state: plan_state(&state),
                    already_finished: true,
                });
            }
            Cancel::Cancelled { revoked } => revoked,
        };
        // A cancel after which a step keeps running would be a lie: answer
        // once each revoked attempt's node has seen its process end.
        let deadline = tokio::time::Instant::now() + kill_grace + CANCEL_WAIT;
        while !revoked.is_empty() {
            match claims::still_running(&self.shared, &revoked).await {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "cannot check that a cancelled plan's steps stopped")
                }
            }
            tokio::select! {
                _ = wake.woken() => {}
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(plan = %format_id(n), "a cancelled plan's steps were not seen to stop in time");
                    break;
                }
            }
        }
        Ok(Cancelled {
            id: format_id(n),
            state: PlanState::Cancelled,
            already_finished: false,
        })
    }

    /// Deletes plan `id`'s rows; `false` when it was gone already.
    pub async fn delete(&self, id: u64) -> Result<bool, Reject> {
        plans::delete_plan(&self.shared, id as i64)
            .await
            .map_err(unavailable)
    }

    /// Marks the plans that ended since `since_ms` and no node has marked
    /// yet, and answers their ids: this node runs their hooks.
    pub async fn take_finished(&self, since_ms: i64) -> Result<Vec<u64>, PgError> {
        let ids = plans::take_finished(&self.shared, since_ms).await?;
        Ok(ids.into_iter().map(|id| id as u64).collect())
    }
}
