//! Plan records on the shared store, under its backend (`pg.rs`): how a
//! submitted record becomes a plan row and step rows, and how those rows
//! become the record a client sees (the record as submitted, with each
//! step's live state from its row). It may not run anything;
//! `plans/cluster.rs` does.

use super::decode_plan;
use crate::plans::model::{PLAN_FORMAT_VERSION, PlanRecord, StepAction, StepRecord, format_id};
use crate::store::encode_record;
use crate::store::postgres::plans::{
    self, ImportedPlan, ImportedStep, Inserted, NewPlan, NewStep, PlanRow,
};
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
        steps: rec.steps.iter().map(new_step).collect(),
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

fn new_step(s: &StepRecord) -> NewStep {
    NewStep {
        step: s.id.clone(),
        deps: s.deps.clone(),
        max_attempts: s.max_attempts.min(i32::MAX as u32) as i32,
        // An agent's turn is safe to run again (its session keeps what it
        // did); a command only when it says so.
        retry_on_lease_loss: s.idempotent || matches!(s.action, StepAction::Agent { .. }),
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
            // where the node that ran it keeps it too. A running command
            // writes it already (as on sled, whose views show it from the
            // start), though the row learns the path only at the end.
            s.has_log = live.log_path.is_some()
                || (s.state == StepState::Running && matches!(s.action, StepAction::Run { .. }));
        }
    }
    Ok(rec)
}

pub(crate) fn plan_state(s: &str) -> PlanState {
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

/// Copies the plans of a one-machine store into the shared store, once
/// per `source` (see [`plans::import`]): finished plans as they ended;
/// pending and running ones ready to run here (a step that was running
/// runs again, its attempts kept). Answers (old id, new id) per plan, or
/// `None` when `source` was copied before.
pub async fn import(
    shared: &Shared,
    source: &str,
    records: Vec<PlanRecord>,
) -> Result<Option<Vec<(u64, u64)>>, PgError> {
    let ms = |t: Option<u64>| t.map(|t| t.min(i64::MAX as u64) as i64);
    let imported: Vec<ImportedPlan> = records
        .iter()
        .map(|rec| ImportedPlan {
            old_id: rec.id as i64,
            record: Vec::new(),
            idempotency_key: rec.idempotency_key.clone(),
            name: rec.name.clone(),
            depth: rec.depth.min(i32::MAX as u32) as i32,
            state: match rec.state {
                PlanState::Succeeded => "succeeded",
                PlanState::Failed => "failed",
                PlanState::Cancelled => "cancelled",
                PlanState::Pending | PlanState::Running => "pending",
            }
            .into(),
            reason: rec.reason.clone(),
            created_ms: ms(Some(rec.created_ms)).unwrap_or(0),
            started_ms: ms(rec.started_ms),
            finished_ms: ms(rec.finished_ms),
            steps: rec
                .steps
                .iter()
                .map(|s| ImportedStep {
                    new: new_step(s),
                    state: match s.state {
                        StepState::Succeeded => "succeeded",
                        StepState::Failed => "failed",
                        StepState::Skipped => "skipped",
                        StepState::Cancelled => "cancelled",
                        // Not run, or interrupted: runs (again) here.
                        StepState::Pending | StepState::Running => "waiting",
                    }
                    .into(),
                    attempts: s.attempts.min(i32::MAX as u32) as i32,
                    exit_code: s.exit_code,
                    error: s.error.clone(),
                    stdout: s.stdout_tail.clone(),
                    stderr: s.stderr_tail.clone(),
                    started_ms: ms(s.started_ms),
                    finished_ms: ms(s.finished_ms),
                })
                .collect(),
        })
        .collect();
    let by_old: std::collections::HashMap<i64, &PlanRecord> =
        records.iter().map(|r| (r.id as i64, r)).collect();
    let record = |p: &ImportedPlan, id: i64| {
        let Some(old) = by_old.get(&p.old_id) else {
            return Vec::new();
        };
        let mut rec = (*old).clone();
        // A chain named after the old id is this plan's own.
        if rec.chain == format_id(rec.id) {
            rec.chain = format_id(id as u64);
        }
        rec.id = id as u64;
        encode_record(PLAN_FORMAT_VERSION, &rec)
    };
    Ok(plans::import(shared, source, &imported, record)
        .await?
        .map(|ids| ids.into_iter().map(|(a, b)| (a as u64, b as u64)).collect()))
}
