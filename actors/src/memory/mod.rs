//! memory: what the agent remembers across sessions. Two scopes of
//! markdown entries with YAML frontmatter (`entry.rs`): one per project
//! (`<state>/projects/<project id>/memory/`, the id the compaction breaker
//! uses) and one for the user (`<state>/memory/`, entries of type `user`).
//! Each scope has a `MEMORY.md` index and a `.trash/` of tombstones
//! (`store.rs`); relevance is BM25 plus recency and type (`search.rs`);
//! what a session's system prompt gets of it is `prompt.rs`.
//!
//! It owns those folders and nothing else: it reads no session, no sled
//! tree, and no file outside `<state>/memory` and `<state>/projects/*/memory`.
//! The agent reaches it through its tools (`tools.rs`), the daemon through
//! [`Memory`].
//!
//! **Invariant**: the only writer of a memory folder is its
//! [`actor::ScopeActor`], one per folder, spawned on demand by the
//! [`actor::MemoryManager`] and stopped when idle; so concurrent sessions
//! never lose an update or interleave a file.

pub mod actor;
pub mod cache;
pub mod entry;
pub mod extract;
pub mod prompt;
pub mod search;
pub mod shared;
pub mod store;
pub mod switch;
pub mod tools;
pub mod versions;
pub mod watch;

pub use actor::{MEMORY_MANAGER_NAME, MemoryArgs, MemoryManager};
pub use entry::{Entry, Kind, Problem};
pub use store::{Scan, WriteReq, Written};

pub use actor::ScopeKey;
use actor::{ManagerMsg, ScopeMsg};
use flyto_protocol::ErrorCode;
use ractor::rpc::CallResult;
use ractor::{ActorRef, RpcReplyPort};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Cap(String),
    #[error("{0}")]
    Secret(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Malformed(String),
    #[error("{0}")]
    Io(String),
    #[error("{0}")]
    Unavailable(String),
}

impl MemoryError {
    pub fn code(&self) -> ErrorCode {
        match self {
            MemoryError::Invalid(_) | MemoryError::Secret(_) => ErrorCode::BadRequest,
            MemoryError::Cap(_) => ErrorCode::TooLarge,
            MemoryError::NotFound(_) => ErrorCode::NotFound,
            MemoryError::Conflict(_) | MemoryError::Malformed(_) => ErrorCode::Conflict,
            MemoryError::Io(_) => ErrorCode::Internal,
            MemoryError::Unavailable(_) => ErrorCode::Unavailable,
        }
    }
}

/// A scope's folder and what is in it.
#[derive(Debug, Clone)]
pub struct Listing {
    /// `project` or `user`.
    pub scope: &'static str,
    pub dir: PathBuf,
    pub scan: Scan,
}

/// An entry found by name or by search.
#[derive(Debug, Clone)]
pub struct Found {
    pub scope: &'static str,
    pub path: PathBuf,
    pub entry: Entry,
    /// The relevance score; 0 for a lookup by name.
    pub score: f64,
}

/// The folders of a workdir's two scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    pub project: PathBuf,
    pub user: PathBuf,
}

/// The way in: finds the manager by its registered name.
#[derive(Debug, Clone)]
pub struct Memory {
    pub manager: String,
    pub state_dir: PathBuf,
}

/// The project id of a workdir (canonicalized, as a session's is).
pub fn project_of(workdir: &Path) -> Result<String, MemoryError> {
    let canon = std::fs::canonicalize(workdir).map_err(|e| {
        MemoryError::Invalid(format!(
            "project directory {} is not usable ({e}): pass an existing directory with --project",
            workdir.display()
        ))
    })?;
    Ok(crate::compaction::breaker::project_id(
        &canon.display().to_string(),
    ))
}

impl Memory {
    pub fn new(state_dir: PathBuf) -> Self {
        Memory {
            manager: MEMORY_MANAGER_NAME.into(),
            state_dir,
        }
    }

    pub fn paths(&self, workdir: &Path) -> Result<Paths, MemoryError> {
        let project = project_of(workdir)?;
        Ok(Paths {
            project: ScopeKey::Project(project).dir(&self.state_dir),
            user: ScopeKey::User.dir(&self.state_dir),
        })
    }

    async fn scope(&self, key: &ScopeKey) -> Result<ActorRef<ScopeMsg>, MemoryError> {
        let gone = || MemoryError::Unavailable("the memory service is not running".into());
        let cell = ractor::registry::where_is(self.manager.clone()).ok_or_else(gone)?;
        let manager = ActorRef::<ManagerMsg>::from(cell);
        let key = key.clone();
        match manager
            .call(|reply| ManagerMsg::Get { key, reply }, Some(CALL_TIMEOUT))
            .await
        {
            Ok(CallResult::Success(r)) => r,
            _ => Err(gone()),
        }
    }

    /// Asks a scope's actor; once more if it stopped (idle) in between.
    async fn ask<T: Send + 'static>(
        &self,
        key: &ScopeKey,
        build: impl Fn(RpcReplyPort<Result<T, MemoryError>>) -> ScopeMsg,
    ) -> Result<T, MemoryError> {
        for _ in 0..2 {
            let actor = self.scope(key).await?;
            match actor.call(&build, Some(CALL_TIMEOUT)).await {
                Ok(CallResult::Success(answer)) => return answer,
                Ok(CallResult::Timeout) => {
                    return Err(MemoryError::Unavailable(
                        "the memory folder's actor did not answer in time: try again".into(),
                    ));
                }
                Ok(CallResult::SenderError) | Err(_) => continue,
            }
        }
        Err(MemoryError::Unavailable(
            "the memory folder's actor stopped: try again".into(),
        ))
    }

    fn keys(&self, workdir: &Path) -> Result<[ScopeKey; 2], MemoryError> {
        Ok([ScopeKey::Project(project_of(workdir)?), ScopeKey::User])
    }

    /// Both scopes, project first.
    pub async fn list(&self, workdir: &Path) -> Result<Vec<Listing>, MemoryError> {
        let mut out = Vec::new();
        for key in self.keys(workdir)? {
            let scan = self.ask(&key, |reply| ScopeMsg::Scan { reply }).await?;
            out.push(Listing {
                scope: key.label(),
                dir: key.dir(&self.state_dir),
                scan,
            });
        }
        Ok(out)
    }

    fn found(scope: &'static str, dir: &Path, e: &Entry, score: f64) -> Found {
        Found {
            scope,
            path: dir.join(format!("{}.md", e.meta.name)),
            entry: e.clone(),
            score,
        }
    }

    pub async fn read(&self, workdir: &Path, name: &str) -> Result<Found, MemoryError> {
        let all = self.list(workdir).await?;
        for l in &all {
            if let Some(e) = l.scan.entries.iter().find(|e| e.meta.name == name) {
                return Ok(Self::found(l.scope, &l.dir, e, 0.0));
            }
            if let Some(p) = l
                .scan
                .problems
                .iter()
                .find(|p| p.file.ends_with(&format!("/{name}.md")))
            {
                return Err(MemoryError::Malformed(format!(
                    "memory `{name}` cannot be read: {p}"
                )));
            }
        }
        Err(MemoryError::NotFound(format!(
            "no memory `{name}`: memory_search finds entries by topic, `flytoctl memory_list` lists them"
        )))
    }

    /// Entries of both scopes ranked for `query`, best first.
    pub async fn search(
        &self,
        workdir: &Path,
        query: &str,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<Found>, MemoryError> {
        let scopes = self.snapshots(workdir).await?;
        Ok(Self::ranked(&scopes, query, now_ms, limit))
    }

    /// Each scope's label, folder and the actor's snapshot: its cached
    /// entries and their ranking terms, shared rather than copied.
    async fn snapshots(
        &self,
        workdir: &Path,
    ) -> Result<Vec<(&'static str, PathBuf, std::sync::Arc<cache::Snapshot>)>, MemoryError> {
        let mut scopes = Vec::new();
        for key in self.keys(workdir)? {
            let snap = self.ask(&key, |reply| ScopeMsg::Snapshot { reply }).await?;
            scopes.push((key.label(), key.dir(&self.state_dir), snap));
        }
        Ok(scopes)
    }

    /// What a session's next model call gets: both scopes' `MEMORY.md` as
    /// written (project first) and the entries ranked for `query`.
    pub async fn for_prompt(
        &self,
        workdir: &Path,
        query: &str,
        now_ms: u64,
        limit: usize,
    ) -> Result<(Vec<prompt::ScopeIndex>, Vec<Found>), MemoryError> {
        let scopes = self.snapshots(workdir).await?;
        let mut indexes = Vec::with_capacity(scopes.len());
        for (scope, dir, _) in &scopes {
            let path = dir.join(store::INDEX);
            // Reading is safe beside the actor: the index is replaced by
            // rename, so a read sees the old file or the new one.
            let text = match tokio::fs::read_to_string(&path).await {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(e) => {
                    return Err(MemoryError::Io(format!(
                        "cannot read the memory index {}: {e}",
                        path.display()
                    )));
                }
            };
            indexes.push(prompt::ScopeIndex { scope, text });
        }
        Ok((indexes, Self::ranked(&scopes, query, now_ms, limit)))
    }

    fn ranked(
        scopes: &[(&'static str, PathBuf, std::sync::Arc<cache::Snapshot>)],
        query: &str,
        now_ms: u64,
        limit: usize,
    ) -> Vec<Found> {
        let mut flat = Vec::new();
        for (label, dir, snap) in scopes {
            flat.extend(snap.scan.entries.iter().map(|e| (*label, dir, e)));
        }
        let entries: Vec<&Entry> = flat.iter().map(|(_, _, e)| *e).collect();
        let parts: Vec<&search::Postings> = scopes.iter().map(|(_, _, s)| &s.postings).collect();
        search::rank_indexed(&entries, &parts, query, now_ms, limit)
            .into_iter()
            .map(|s| {
                let (scope, dir, e) = flat[s.index];
                Self::found(scope, dir, e, s.score)
            })
            .collect()
    }

    /// Creates or replaces; `user` entries go to the user scope. A name is
    /// unique across both scopes.
    pub async fn write(&self, workdir: &Path, req: WriteReq) -> Result<Written, MemoryError> {
        let [project, user] = self.keys(workdir)?;
        let (key, other) = if req.kind == Kind::User {
            (user, project)
        } else {
            (project, user)
        };
        let theirs = self.ask(&other, |reply| ScopeMsg::Scan { reply }).await?;
        if theirs.entries.iter().any(|e| e.meta.name == req.name) {
            return Err(MemoryError::Conflict(format!(
                "memory `{}` already exists in the {} scope: choose another name, or forget that one first",
                req.name,
                other.label()
            )));
        }
        self.ask(&key, |reply| ScopeMsg::Write {
            req: req.clone(),
            reply,
        })
        .await
    }

    /// Every scope that has memory (see [`ManagerMsg::Keys`]).
    pub async fn scope_keys(&self) -> Result<Vec<ScopeKey>, MemoryError> {
        let gone = || MemoryError::Unavailable("the memory service is not running".into());
        let cell = ractor::registry::where_is(self.manager.clone()).ok_or_else(gone)?;
        let manager = ActorRef::<ManagerMsg>::from(cell);
        match manager
            .call(|reply| ManagerMsg::Keys { reply }, Some(CALL_TIMEOUT))
            .await
        {
            Ok(CallResult::Success(r)) => r,
            _ => Err(gone()),
        }
    }

    /// What one scope holds.
    pub async fn scan_scope(&self, key: &ScopeKey) -> Result<Scan, MemoryError> {
        self.ask(key, |reply| ScopeMsg::Scan { reply }).await
    }

    /// Creates or replaces an entry in one scope.
    pub async fn write_scope(&self, key: &ScopeKey, req: WriteReq) -> Result<Written, MemoryError> {
        self.ask(key, |reply| ScopeMsg::Write {
            req: req.clone(),
            reply,
        })
        .await
    }

    /// Tombstones an entry of one scope.
    pub async fn forget_scope(
        &self,
        key: &ScopeKey,
        name: &str,
        reason: &str,
        source: &str,
    ) -> Result<PathBuf, MemoryError> {
        self.ask(key, |reply| ScopeMsg::Forget {
            name: name.to_string(),
            reason: reason.to_string(),
            source: source.to_string(),
            reply,
        })
        .await
    }

    /// Tombstones the entry of that name, in whichever scope holds it.
    pub async fn forget(
        &self,
        workdir: &Path,
        name: &str,
        reason: &str,
        source: &str,
    ) -> Result<PathBuf, MemoryError> {
        let found = self.read(workdir, name).await;
        let key = match &found {
            Ok(f) if f.scope == "user" => ScopeKey::User,
            _ => ScopeKey::Project(project_of(workdir)?),
        };
        self.ask(&key, |reply| ScopeMsg::Forget {
            name: name.to_string(),
            reason: reason.to_string(),
            source: source.to_string(),
            reply,
        })
        .await
    }

    /// A copy of the project's live memory at `staging`, for a dream.
    pub async fn stage(
        &self,
        workdir: &Path,
        staging: PathBuf,
    ) -> Result<switch::Staged, MemoryError> {
        let key = ScopeKey::Project(project_of(workdir)?);
        self.ask(&key, |reply| ScopeMsg::Stage {
            staging: staging.clone(),
            reply,
        })
        .await
    }

    /// Switches a dream's result in as the project's live memory.
    pub async fn switch(
        &self,
        workdir: &Path,
        base: Arc<versions::Files>,
        staged: Arc<versions::Files>,
        meta: versions::VersionMeta,
        check: switch::Check,
        keep: usize,
    ) -> Result<switch::Switched, MemoryError> {
        let key = ScopeKey::Project(project_of(workdir)?);
        self.ask(&key, |reply| ScopeMsg::Switch {
            base: base.clone(),
            staged: staged.clone(),
            meta: meta.clone(),
            check: check.clone(),
            keep,
            reply,
        })
        .await
    }

    /// Makes the project's memory before dream `run` (the newest if none)
    /// live again.
    pub async fn undo(
        &self,
        workdir: &Path,
        run: Option<String>,
        keep: usize,
    ) -> Result<versions::VersionMeta, MemoryError> {
        let key = ScopeKey::Project(project_of(workdir)?);
        self.ask(&key, |reply| ScopeMsg::Undo {
            run: run.clone(),
            keep,
            reply,
        })
        .await
    }

    /// Restores the newest tombstone of `name`, project scope first.
    pub async fn restore(&self, workdir: &Path, name: &str) -> Result<PathBuf, MemoryError> {
        let mut last = None;
        for key in self.keys(workdir)? {
            match self
                .ask(&key, |reply| ScopeMsg::Restore {
                    name: name.to_string(),
                    reply,
                })
                .await
            {
                Err(MemoryError::NotFound(m)) => last = Some(MemoryError::NotFound(m)),
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| MemoryError::NotFound(format!("no forgotten memory `{name}`"))))
    }
}
