//! Job fires across daemons: every node evaluates the schedules, and a
//! fire is an insert keyed by (job, instant, manual, attempt) with ON
//! CONFLICT DO NOTHING. Only the node whose insert wins submits the plan.

use super::{PgError, Shared};

/// `true` when this node won the instant and must submit its plan.
pub async fn record_fire(
    shared: &Shared,
    job: i64,
    instant_ms: i64,
    manual: bool,
    attempt: i32,
    node: &str,
) -> Result<bool, PgError> {
    let c = shared.client().await?;
    let n = c
        .execute(
            "INSERT INTO flyto_job_fires (job, instant_ms, manual, attempt, node)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT DO NOTHING",
            &[&job, &instant_ms, &manual, &attempt, &node],
        )
        .await
        .map_err(shared.query_err("recording a job fire"))?;
    Ok(n == 1)
}
