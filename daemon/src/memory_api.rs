//! The `memory_*` requests: translated into calls on the memory room's
//! [`Memory`] handle, answered as wire views.

use flyto_actors::memory::{Found, Listing, Memory, MemoryError};
use flyto_actors::plans::Reject;
use flyto_protocol::{
    ErrorCode, MemoryEntryView, MemoryHitView, MemoryProblemView, MemoryScopeView, Request,
    Response,
};
use std::path::Path;

/// Entries a `memory_search` answers at most.
const SEARCH_LIMIT: usize = 20;

fn reject(e: MemoryError) -> Reject {
    Reject::new(e.code(), e.to_string())
}

fn entry_view(scope: &str, path: &Path, e: &flyto_actors::memory::Entry) -> MemoryEntryView {
    MemoryEntryView {
        name: e.meta.name.clone(),
        kind: e.meta.kind.as_str().into(),
        description: e.meta.description.clone(),
        scope: scope.into(),
        path: path.display().to_string(),
        created_ms: e.created_ms,
        updated_ms: e.updated_ms,
        source: e.meta.source.clone(),
        version: e.meta.version,
        session: e.meta.session.clone().unwrap_or_default(),
    }
}

fn found_view(f: &Found) -> MemoryEntryView {
    entry_view(f.scope, &f.path, &f.entry)
}

fn scope_view(l: &Listing) -> MemoryScopeView {
    MemoryScopeView {
        scope: l.scope.into(),
        dir: l.dir.display().to_string(),
        entries: l
            .scan
            .entries
            .iter()
            .map(|e| entry_view(l.scope, &l.dir.join(format!("{}.md", e.meta.name)), e))
            .collect(),
        problems: l
            .scan
            .problems
            .iter()
            .map(|p| MemoryProblemView {
                file: p.file.clone(),
                line: p.line as u64,
                reason: p.reason.clone(),
            })
            .collect(),
    }
}

fn project(dir: &str) -> Result<&Path, Reject> {
    let p = Path::new(dir);
    if !p.is_absolute() {
        return Err(Reject::new(
            ErrorCode::BadRequest,
            format!(
                "project `{dir}` is not absolute: send the absolute path of the project's directory"
            ),
        ));
    }
    Ok(p)
}

/// Answers a `memory_*` request; `None` for any other.
pub async fn handle(
    memory: &Memory,
    now_ms: u64,
    req: &Request,
) -> Option<Result<Response, Reject>> {
    let answer = match req {
        Request::MemoryList { project: p } => {
            async {
                let all = memory.list(project(p)?).await.map_err(reject)?;
                Ok(Response::Memory {
                    scopes: all.iter().map(scope_view).collect(),
                })
            }
            .await
        }
        Request::MemoryShow { project: p, name } => {
            async {
                let f = memory.read(project(p)?, name).await.map_err(reject)?;
                Ok(Response::MemoryEntry {
                    entry: found_view(&f),
                    body: f.entry.body.clone(),
                })
            }
            .await
        }
        Request::MemorySearch { project: p, query } => {
            async {
                let hits = memory
                    .search(project(p)?, query, now_ms, SEARCH_LIMIT)
                    .await
                    .map_err(reject)?;
                Ok(Response::MemoryHits {
                    hits: hits
                        .iter()
                        .map(|f| MemoryHitView {
                            entry: found_view(f),
                            score: f.score,
                        })
                        .collect(),
                })
            }
            .await
        }
        Request::MemoryForget {
            project: p,
            name,
            reason,
        } => {
            async {
                let trash = memory
                    .forget(project(p)?, name, reason, "user")
                    .await
                    .map_err(reject)?;
                Ok(Response::MemoryForgotten {
                    name: name.clone(),
                    trash: trash.display().to_string(),
                })
            }
            .await
        }
        Request::MemoryRestore { project: p, name } => {
            async {
                let path = memory.restore(project(p)?, name).await.map_err(reject)?;
                Ok(Response::MemoryRestored {
                    name: name.clone(),
                    path: path.display().to_string(),
                })
            }
            .await
        }
        Request::MemoryPath { project: p } => {
            async {
                let paths = memory.paths(project(p)?).map_err(reject)?;
                Ok(Response::MemoryPaths {
                    project: paths.project.display().to_string(),
                    user: paths.user.display().to_string(),
                })
            }
            .await
        }
        _ => return None,
    };
    Some(answer)
}
