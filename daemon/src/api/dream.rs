//! The `dream_*` requests: asked of the dream room's actor (status, runs,
//! undo) or read from its run records (log, diff), answered as JSON.

use flyto_actors::dream::DREAM_NAME;
use flyto_actors::dream::actor::{DreamMsg, find_run, project_for, runs};
use flyto_actors::plans::Reject;
use flyto_protocol::{ErrorCode, Request, Response};
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

pub async fn handle(state_dir: &Path, req: &Request) -> Option<Result<Response, Reject>> {
    Some(match req {
        Request::DreamStatus { project } => {
            let workdir = project.as_ref().map(PathBuf::from);
            match actor() {
                Ok(a) => answered(
                    a.call(
                        |reply| DreamMsg::Status {
                            workdir: workdir.clone(),
                            reply,
                        },
                        Some(ASK),
                    )
                    .await,
                )
                .and_then(|s| json(&s)),
                Err(r) => Err(r),
            }
        }
        Request::DreamLog {
            project: dir,
            limit,
        } => {
            let id = match dir.as_deref().map(project).transpose() {
                Ok(id) => id,
                Err(r) => return Some(Err(r)),
            };
            let all = runs(state_dir, id.as_deref());
            let skip = all.len().saturating_sub((*limit).max(1) as usize);
            json(&all[skip..])
        }
        Request::DreamDiff { run } => match find_run(state_dir, run) {
            Some(r) => json(&r),
            None => Err(Reject::new(
                ErrorCode::NotFound,
                format!("no dream run `{run}`: `flytoctl dream_log` lists the runs"),
            )),
        },
        Request::DreamRun {
            project: dir,
            dry_run,
        } => {
            let workdir = PathBuf::from(dir);
            match actor() {
                Ok(a) => answered(
                    a.call(
                        |reply| DreamMsg::Run {
                            workdir: workdir.clone(),
                            dry_run: *dry_run,
                            reply,
                        },
                        Some(RUN_WAIT),
                    )
                    .await,
                )
                .and_then(|r| r)
                .and_then(|rec| json(&rec)),
                Err(r) => Err(r),
            }
        }
        Request::DreamUndo { project: dir, run } => {
            let workdir = PathBuf::from(dir);
            match actor() {
                Ok(a) => answered(
                    a.call(
                        |reply| DreamMsg::Undo {
                            workdir: workdir.clone(),
                            run: run.clone(),
                            reply,
                        },
                        Some(ASK),
                    )
                    .await,
                )
                .and_then(|r| r)
                .and_then(|meta| json(&meta)),
                Err(r) => Err(r),
            }
        }
        _ => return None,
    })
}
