//! The `dream_*` requests: asked of the dream room's actor (status, runs,
//! undo) or read from its run records (log, diff), answered as JSON.

use flyto_actors::dream::DREAM_NAME;
use flyto_actors::dream::actor::{DreamMsg, find_run, project_for, runs};
use flyto_actors::plans::Reject;
use flyto_protocol::{ErrorCode, Response};
use ractor::ActorRef;
use ractor::rpc::CallResult;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Longest a `dream_run` waits for its run (past its own time limit).
const RUN_WAIT: Duration = Duration::from_secs(3600);
const ASK: Duration = Duration::from_secs(30);

fn json<T: Serialize + ?Sized>(v: &T) -> Result<Response, Reject> {
    serde_json::to_string(v)
        .map(|json| Response::Dream { json })
        .map_err(Reject::internal)
}

fn actor() -> Result<ActorRef<DreamMsg>, Reject> {
    ractor::registry::where_is(DREAM_NAME.into())
        .map(ActorRef::from)
        .ok_or_else(|| {
            Reject::new(
                ErrorCode::Unavailable,
                "the dream room is not running (it restarts after a failure): try again shortly",
            )
        })
}

fn answered<T>(r: Result<CallResult<T>, ractor::MessagingErr<DreamMsg>>) -> Result<T, Reject> {
    match r {
        Ok(CallResult::Success(v)) => Ok(v),
        Ok(CallResult::Timeout) => Err(Reject::new(
            ErrorCode::Unavailable,
            "the dream room did not answer in time: try again",
        )),
        _ => Err(Reject::new(
            ErrorCode::Unavailable,
            "the dream room stopped while answering: try again",
        )),
    }
}

fn project(dir: &str) -> Result<String, Reject> {
    project_for(Path::new(dir))
}

/// Gates, last success and lease, of one project or of every known one.
pub async fn status(project: Option<String>) -> Result<Response, Reject> {
    let workdir = project.map(PathBuf::from);
    let s = answered(
        actor()?
            .call(|reply| DreamMsg::Status { workdir, reply }, Some(ASK))
            .await,
    )?;
    json(&s)
}

/// The newest `limit` runs, of one project or of all.
pub fn log(state_dir: &Path, dir: Option<&str>, limit: u32) -> Result<Response, Reject> {
    let id = dir.map(project).transpose()?;
    let all = runs(state_dir, id.as_deref());
    let skip = all.len().saturating_sub(limit.max(1) as usize);
    json(&all[skip..])
}

pub fn diff(state_dir: &Path, run: &str) -> Result<Response, Reject> {
    match find_run(state_dir, run) {
        Some(r) => json(&r),
        None => Err(Reject::new(
            ErrorCode::NotFound,
            format!("no dream run `{run}`: `flytoctl dream_log` lists the runs"),
        )),
    }
}

/// A consolidation now; answers when it ends.
pub async fn run(dir: String, dry_run: bool) -> Result<Response, Reject> {
    let workdir = PathBuf::from(dir);
    let rec = answered(
        actor()?
            .call(
                |reply| DreamMsg::Run {
                    workdir,
                    dry_run,
                    reply,
                },
                Some(RUN_WAIT),
            )
            .await,
    )??;
    json(&rec)
}

pub async fn undo(dir: String, run: Option<String>) -> Result<Response, Reject> {
    let workdir = PathBuf::from(dir);
    let meta = answered(
        actor()?
            .call(
                |reply| DreamMsg::Undo {
                    workdir,
                    run,
                    reply,
                },
                Some(ASK),
            )
            .await,
    )??;
    json(&meta)
}
