//! The `job_*` requests: asked of the jobs actor; `job_next` only parses
//! a schedule and creates nothing.

use crate::plan_reads::PlanReads;
use crate::server::Ctx;
use flyto_actors::jobs::actor::{JOBS_NAME, JobsMsg};
use flyto_actors::jobs::schedule::tzdb_version;
use flyto_actors::plans::Reject;
use flyto_protocol::{ErrorCode, JobSpec, Response};
use std::time::Duration;

/// Asks the jobs actor and waits up to 30 s.
async fn ask<T: Send + 'static>(
    ctx: &Ctx,
    build: impl FnOnce(ractor::RpcReplyPort<Result<T, Reject>>) -> JobsMsg,
) -> Result<T, Reject> {
    joined(ctx)?;
    let jobs = super::registered::<JobsMsg>(
        JOBS_NAME,
        "the jobs service is not running (it restarts after a failure): try again shortly",
    )?;
    match jobs.call(build, Some(Duration::from_secs(30))).await {
        Ok(ractor::rpc::CallResult::Success(r)) => r,
        _ => Err(Reject::new(
            ErrorCode::Unavailable,
            "the jobs service did not answer: try again",
        )),
    }
}

/// The jobs actor starts once the shared store is joined.
fn joined(ctx: &Ctx) -> Result<(), Reject> {
    match *ctx.plans() {
        PlanReads::Joining => Err(crate::plan_reads::joining()),
        _ => Ok(()),
    }
}

/// A job's `--notify BINDING[:CHAT]` must name a binding that exists.
async fn check_notify(ctx: &Ctx, spec: &JobSpec) -> Result<(), Reject> {
    joined(ctx)?;
    match &spec.notify {
        Some(target) => super::channels::check_binding(target).await,
        None => Ok(()),
    }
}

fn job(job: flyto_protocol::JobView) -> Response {
    Response::Job {
        job,
        warnings: Vec::new(),
    }
}

pub async fn create(ctx: &Ctx, spec: JobSpec) -> Result<Response, Reject> {
    check_notify(ctx, &spec).await?;
    ask(ctx, |reply| JobsMsg::Create {
        spec: Box::new(spec),
        reply,
    })
    .await
    .map(|(job, warnings)| Response::Job { job, warnings })
}

pub async fn update(ctx: &Ctx, id: String, spec: JobSpec) -> Result<Response, Reject> {
    check_notify(ctx, &spec).await?;
    ask(ctx, |reply| JobsMsg::Update {
        id,
        spec: Box::new(spec),
        reply,
    })
    .await
    .map(|(job, warnings)| Response::Job { job, warnings })
}

pub async fn list(ctx: &Ctx) -> Result<Response, Reject> {
    ask(ctx, |reply| JobsMsg::List { reply })
        .await
        .map(|jobs| Response::Jobs {
            jobs,
            tzdb: tzdb_version().into(),
        })
}

pub async fn show(ctx: &Ctx, id: String) -> Result<Response, Reject> {
    ask(ctx, |reply| JobsMsg::Show { id, reply })
        .await
        .map(|(job, fires)| Response::JobHistory { job, fires })
}

/// `job_pause` (false) and `job_resume` (true).
pub async fn set_enabled(ctx: &Ctx, id: String, enabled: bool) -> Result<Response, Reject> {
    ask(ctx, |reply| JobsMsg::SetEnabled { id, enabled, reply })
        .await
        .map(job)
}

pub async fn delete(ctx: &Ctx, id: String) -> Result<Response, Reject> {
    ask(ctx, |reply| JobsMsg::Delete { id, reply })
        .await
        .map(job)
}

pub async fn run(ctx: &Ctx, id: String) -> Result<Response, Reject> {
    let asked = id.clone();
    ask(ctx, |reply| JobsMsg::RunNow { id: asked, reply })
        .await
        .map(|plan| Response::JobRan { id, plan })
}

/// `job_next`: a schedule's next fires, creating nothing.
pub fn next(
    ctx: &Ctx,
    expr: &str,
    tz: Option<String>,
    after: Option<String>,
    count: u32,
) -> Result<Response, Reject> {
    use flyto_actors::jobs::schedule::{Schedule, machine_zone};
    let bad = |m: String| Reject::new(ErrorCode::BadRequest, m);
    let tz = tz.unwrap_or_else(machine_zone);
    let after = match after {
        Some(a) => chrono::DateTime::parse_from_rfc3339(a.trim())
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|e| {
                bad(format!(
                    "--after `{a}` is not an RFC 3339 instant ({e}): write e.g. 2026-03-08T00:00:00-05:00"
                ))
            })?,
        None => chrono::DateTime::from_timestamp_millis(ctx.clock.now_ms() as i64)
            .unwrap_or_default(),
    };
    let (schedule, warnings) = Schedule::parse(expr, &tz, after).map_err(|e| bad(e.0))?;
    let count = count.clamp(1, 1000) as usize;
    Ok(Response::JobNext {
        instants: schedule
            .upcoming(after, count)
            .iter()
            .map(|t| t.to_rfc3339())
            .collect(),
        warnings,
        tz: schedule.tz.name().to_string(),
        tzdb: tzdb_version().to_string(),
    })
}
