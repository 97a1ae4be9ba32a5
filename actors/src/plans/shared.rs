//! Plan records on the shared store: how a submitted record becomes a
//! plan row and step rows, and how those rows become the record a client
//! sees (the record as submitted, with each step's live state from its
//! row). It may not run anything; `cluster.rs` does.

use super::model::{PLAN_FORMAT_VERSION, PlanRecord, StepAction, format_id};
use super::store::decode_plan;
use crate::store::encode_record;
use crate::store::postgres::plans::{self, Inserted, NewPlan, NewStep, PlanRow};
use crate::store::postgres::{PgError, Shared};
use flyto_protocol::{PlanState, StepState};

/// What a submit to the shared store did.
#[derive(Debug, Clone, PartialEq)]
pub enum Submitted {
    New(u64),
    /// The idempotency key is an earlier plan's: this one.
    Existing(Box<PlanRecord>),
}

/// Stores `rec` as a new plan, unless its idempotency key is taken. Its id
/// is the database's (taken here unless `rec` has one); so is its chain
/// when it has none (a plan a user
/// submits starts its own).
pub async fn submit(shared: &Shared, mut rec: PlanRecord) -> Result<Submitted, PgError> {
    // Id 0: none taken yet (see `plans::next_plan_id`).
    let id = match rec.id {
        0 => plans::next_plan_id(shared).await?,
        n => n as i64,
    };
    rec.id = id as u64;
    if rec.chain.is_empty() {
        rec.chain = format_id(rec.id);
    }
    let plan = NewPlan {
        id,
        record: encode_record(PLAN_FORMAT_VERSION, &rec),
        idempotency_key: rec.idempotency_key.clone(),
        name: rec.name.clone(),
        depth: rec.depth.min(i32::MAX as u32) as i32,
        steps: rec
            .steps
            .iter()
            .map(|s| NewStep {
                step: s.id.clone(),
                deps: s.deps.clone(),
                max_attempts: s.max_attempts.min(i32::MAX as u32) as i32,
                // An agent's turn is safe to run again (its session keeps
                // what it did); a command only when it says so.
                retry_on_lease_loss: s.idempotent || matches!(s.action, StepAction::Agent { .. }),
            })
            .collect(),
    };
    match plans::insert_plan(shared, &plan).await? {
        Inserted::New => Ok(Submitted::New(rec.id)),
        Inserted::Existing { record, .. } => {
            let first = decode_plan(&record).map_err(|e| PgError::Query {
                target: shared.target.clone(),
                what: "reading the plan an idempotency key belongs to",
                detail: e.to_string(),
            })?;
            Ok(Submitted::Existing(Box::new(first)))
        }
    }
}

/// The record a client sees: as submitted, with the live state of the
/// plan and of each step.
pub fn record_of(row: &PlanRow) -> Result<PlanRecord, String> {
    let mut rec = decode_plan(&row.record).map_err(|e| e.to_string())?;
    rec.state = plan_state(&row.state);
    rec.reason = row.reason.clone();
    rec.started_ms = row.started_ms.map(|t| t.max(0) as u64);
    rec.finished_ms = row.finished_ms.map(|t| t.max(0) as u64);
    rec.revision = row.revision.max(1) as u64;
    for live in &row.steps {
        if let Some(s) = rec.steps.iter_mut().find(|s| s.id == live.step) {
            s.state = step_state(&live.state);
            s.attempts = live.attempts.max(0) as u32;
            s.exit_code = live.exit_code;
            s.error = live.error.clone();
            s.stdout_tail = live.stdout.clone().unwrap_or_default();
            s.stderr_tail = live.stderr.clone().unwrap_or_default();
            s.started_ms = live.started_ms.map(|t| t.max(0) as u64);
            s.finished_ms = live.finished_ms.map(|t| t.max(0) as u64);
            // Its view points at the log in this node's state directory,
            // where the node that ran it keeps it too.
            s.has_log = live.log_path.is_some();
        }
    }
    Ok(rec)
}

pub(super) fn plan_state(s: &str) -> PlanState {
    match s {
        "running" => PlanState::Running,
        "succeeded" => PlanState::Succeeded,
        "failed" => PlanState::Failed,
        "cancelled" => PlanState::Cancelled,
        _ => PlanState::Pending,
    }
}

fn step_state(s: &str) -> StepState {
    match s {
        "running" => StepState::Running,
        "succeeded" => StepState::Succeeded,
        "failed" => StepState::Failed,
        "skipped" => StepState::Skipped,
        "cancelled" => StepState::Cancelled,
        // waiting and ready: not started yet.
        _ => StepState::Pending,
    }
}
