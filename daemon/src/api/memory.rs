//! The `memory_*` requests: translated into calls on the memory room's
//! [`Memory`] handle, answered as wire views.

use flyto_actors::memory::entry::{self, Entry};
use flyto_actors::memory::{Found, Listing, Memory, MemoryError, ScopeKey, WriteReq};
use flyto_actors::plans::Reject;
use flyto_protocol::{
    ErrorCode, MemoryEntryView, MemoryFile, MemoryFolder, MemoryHitView, MemoryProblemView,
    MemoryScopeView, Response,
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

pub async fn list(memory: &Memory, p: &str) -> Result<Response, Reject> {
    let all = memory.list(project(p)?).await.map_err(reject)?;
    Ok(Response::Memory {
        scopes: all.iter().map(scope_view).collect(),
    })
}

pub async fn show(memory: &Memory, p: &str, name: &str) -> Result<Response, Reject> {
    let f = memory.read(project(p)?, name).await.map_err(reject)?;
    Ok(Response::MemoryEntry {
        entry: found_view(&f),
        body: f.entry.body.clone(),
    })
}

pub async fn search(
    memory: &Memory,
    p: &str,
    query: &str,
    now_ms: u64,
) -> Result<Response, Reject> {
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

/// Moves an entry to its scope's `.trash/`, as the user.
pub async fn forget(
    memory: &Memory,
    p: &str,
    name: String,
    reason: &str,
) -> Result<Response, Reject> {
    let trash = memory
        .forget(project(p)?, &name, reason, "user")
        .await
        .map_err(reject)?;
    Ok(Response::MemoryForgotten {
        name,
        trash: trash.display().to_string(),
    })
}

pub async fn restore(memory: &Memory, p: &str, name: String) -> Result<Response, Reject> {
    let path = memory.restore(project(p)?, &name).await.map_err(reject)?;
    Ok(Response::MemoryRestored {
        name,
        path: path.display().to_string(),
    })
}

pub fn path(memory: &Memory, p: &str) -> Result<Response, Reject> {
    let paths = memory.paths(project(p)?).map_err(reject)?;
    Ok(Response::MemoryPaths {
        project: paths.project.display().to_string(),
        user: paths.user.display().to_string(),
    })
}

/// The folder a scope is exported to.
fn folder_of(key: &ScopeKey) -> String {
    match key {
        ScopeKey::User => "user".into(),
        ScopeKey::Project(id) => format!("projects/{id}"),
    }
}

fn key_of(folder: &str) -> Option<ScopeKey> {
    match folder.split_once('/') {
        Some(("projects", id)) => ScopeKey::from_shared_name(&format!("project/{id}")),
        None if folder == "user" => Some(ScopeKey::User),
        _ => None,
    }
}

pub async fn export(memory: &Memory) -> Result<Response, Reject> {
    let mut folders = Vec::new();
    for key in memory.scope_keys().await.map_err(reject)? {
        let scan = memory.scan_scope(&key).await.map_err(reject)?;
        folders.push(MemoryFolder {
            scope: folder_of(&key),
            files: scan
                .entries
                .iter()
                .map(|e| MemoryFile {
                    name: format!("{}.md", e.meta.name),
                    text: entry::render(&e.meta, &e.body),
                })
                .collect(),
        });
    }
    Ok(Response::MemoryFolders { folders })
}

fn bad(m: String) -> Reject {
    Reject::new(ErrorCode::BadRequest, m)
}

/// Checks every file first: one that is not an entry refuses the whole
/// import, so a half-edited folder changes nothing.
pub async fn import(memory: &Memory, folders: &[MemoryFolder]) -> Result<Response, Reject> {
    let mut parsed: Vec<(ScopeKey, Vec<Entry>)> = Vec::new();
    let mut problems = Vec::new();
    for f in folders {
        let key = key_of(&f.scope).ok_or_else(|| {
            bad(format!(
                "`{}` is not a memory scope: the folder holds `user/` and `projects/<id>/`, as `flytoctl memory_export` writes them",
                f.scope
            ))
        })?;
        let mut entries = Vec::new();
        for file in &f.files {
            let shown = format!("{}/{}", f.scope, file.name);
            let Some(stem) = file.name.strip_suffix(".md") else {
                problems.push(format!("{shown}: not an entry (entries are NAME.md files)"));
                continue;
            };
            if let Some(why) = entry::check_name(stem) {
                problems.push(format!("{shown}: {why}"));
                continue;
            }
            match entry::parse(&shown, stem, &file.text) {
                Ok(e) => entries.push(e),
                Err(p) => problems.push(p.to_string()),
            }
        }
        parsed.push((key, entries));
    }
    if !problems.is_empty() {
        return Err(bad(format!(
            "nothing was imported: {} file(s) are not memory entries; fix them and import again:\n{}",
            problems.len(),
            problems.join("\n")
        )));
    }
    let (mut written, mut forgotten, mut unchanged) = (0, 0, 0);
    for (key, entries) in parsed {
        let now = memory.scan_scope(&key).await.map_err(reject)?;
        for e in &entries {
            let same = now.entries.iter().any(|o| {
                o.meta.name == e.meta.name
                    && o.meta.kind == e.meta.kind
                    && o.meta.description == e.meta.description
                    && o.body == e.body
            });
            if same {
                unchanged += 1;
                continue;
            }
            let req = WriteReq {
                name: e.meta.name.clone(),
                kind: e.meta.kind,
                description: e.meta.description.clone(),
                body: e.body.clone(),
                source: "user".into(),
                session: None,
            };
            memory.write_scope(&key, req).await.map_err(reject)?;
            written += 1;
        }
        for o in &now.entries {
            if !entries.iter().any(|e| e.meta.name == o.meta.name) {
                memory
                    .forget_scope(
                        &key,
                        &o.meta.name,
                        "not in the folder given to memory_import",
                        "user",
                    )
                    .await
                    .map_err(reject)?;
                forgotten += 1;
            }
        }
    }
    Ok(Response::MemoryImported {
        written,
        forgotten,
        unchanged,
    })
}
