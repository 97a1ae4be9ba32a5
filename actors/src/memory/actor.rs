//! The actors: a `MemoryManager` (registered by name) maps each scope to
//! its `ScopeActor`, spawning it on demand, linked to itself; a scope
//! actor with nothing to do for `idle` stops, and the manager forgets it.
//! A scope actor handles one message at a time, so its folder sees one
//! change at a time. On the shared store it syncs its folder with the
//! scope's rows around each message (`shared.rs`): a change is made on
//! the memory as the database has it, and made again if another node
//! wrote first.

use super::MemoryError;
use super::cache::{Cache, Snapshot};
use super::shared::{ScopeSync, SharedMemory};
use super::store::{Scan, ScopeDir, WriteReq, Written};
use super::switch::{Check, Staged, Switched};
use super::versions::{Files, VersionMeta};
use super::watch::FolderWatch;
use crate::clock::Clock;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub const MEMORY_MANAGER_NAME: &str = crate::kernel::names::MEMORY;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ScopeKey {
    /// A project's id (see [`super::project_of`]).
    Project(String),
    User,
}

impl ScopeKey {
    pub fn dir(&self, state_dir: &Path) -> PathBuf {
        match self {
            ScopeKey::Project(id) => state_dir.join("projects").join(id).join("memory"),
            ScopeKey::User => state_dir.join("memory"),
        }
    }
    pub fn label(&self) -> &'static str {
        match self {
            ScopeKey::Project(_) => "project",
            ScopeKey::User => "user",
        }
    }
    /// Its name on the shared store: `user` or `project/<id>`.
    pub fn shared_name(&self) -> String {
        match self {
            ScopeKey::Project(id) => format!("project/{id}"),
            ScopeKey::User => "user".into(),
        }
    }
    /// The key of a shared store name.
    pub fn from_shared_name(name: &str) -> Option<ScopeKey> {
        match name.split_once('/') {
            Some(("project", id)) if !id.is_empty() && !id.contains('/') && id != ".." => {
                Some(ScopeKey::Project(id.to_string()))
            }
            None if name == "user" => Some(ScopeKey::User),
            _ => None,
        }
    }
}

/// Times a change is made again after other nodes wrote the scope first.
const MAX_REDO: usize = 16;
/// The longest random pause before a redo. The pause range doubles with
/// each collision (5, 10, 20 ms, ...): on a loaded machine one attempt
/// takes tens of milliseconds, and nodes that wait a few milliseconds
/// collide again in step.
const REDO_PAUSE_MAX_MS: u64 = 500;

pub enum ScopeMsg {
    Scan {
        reply: RpcReplyPort<Result<Scan, MemoryError>>,
    },
    Write {
        req: WriteReq,
        reply: RpcReplyPort<Result<Written, MemoryError>>,
    },
    Forget {
        name: String,
        reason: String,
        source: String,
        reply: RpcReplyPort<Result<PathBuf, MemoryError>>,
    },
    Restore {
        name: String,
        reply: RpcReplyPort<Result<PathBuf, MemoryError>>,
    },
    /// Stop if nothing happened since the message of this number.
    Idle(u64),
    /// The folder now, with each entry's ranking terms (for search).
    Snapshot {
        reply: RpcReplyPort<Result<Arc<Snapshot>, MemoryError>>,
    },
    /// A copy of the live folder for a consolidation to work on.
    Stage {
        staging: PathBuf,
        reply: RpcReplyPort<Result<Staged, MemoryError>>,
    },
    /// A consolidation's result, to switch in (see `switch.rs`).
    Switch {
        base: Arc<Files>,
        staged: Arc<Files>,
        meta: VersionMeta,
        check: Check,
        keep: usize,
        reply: RpcReplyPort<Result<Switched, MemoryError>>,
    },
    Undo {
        run: Option<String>,
        keep: usize,
        reply: RpcReplyPort<Result<VersionMeta, MemoryError>>,
    },
}

pub struct ScopeActor;

pub struct ScopeState {
    dir: ScopeDir,
    idle: Duration,
    /// Messages handled so far; an `Idle` check with an older number is stale.
    seen: u64,
    /// The folder's parsed entries between messages; gone when idle.
    cache: Cache,
    watch: Option<Arc<FolderWatch>>,
    /// Set on the shared store.
    sync: Option<ScopeSync>,
}

impl ScopeState {
    /// The folder as the database has the scope now.
    fn sync_in(&mut self) -> Result<(), MemoryError> {
        if let Some(s) = &mut self.sync
            && s.pull(&self.dir.dir, true)?
        {
            self.relook();
        }
        Ok(())
    }

    /// Makes a change and, on the shared store, writes it back; made
    /// again on what another node wrote when it wrote first.
    fn mutate<T>(
        &mut self,
        op: impl Fn(&ScopeDir, &mut Cache) -> Result<T, MemoryError>,
    ) -> Result<T, MemoryError> {
        for attempt in 0..MAX_REDO {
            if attempt > 0
                && let Some(s) = &mut self.sync
            {
                // Nodes that keep colliding drift apart.
                let range = (5u64 << attempt.min(16)).min(REDO_PAUSE_MAX_MS);
                let ms = rand::Rng::gen_range(&mut rand::thread_rng(), 0..=range);
                // Only with a shared store (multi-threaded runtime, as its
                // round trips): the runtime's other tasks go on meanwhile.
                tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(ms)));
                // The folder holds this node's change that lost: back to
                // what the other node wrote.
                s.pull(&self.dir.dir, false)?;
                self.relook();
            }
            let done = op(&self.dir, &mut self.cache)?;
            let Some(s) = &mut self.sync else {
                return Ok(done);
            };
            if s.push(&self.dir.dir)? {
                return Ok(done);
            }
            tracing::debug!(scope = %s.scope, attempt, "another node changed the memory first; making the change again");
        }
        Err(MemoryError::Unavailable(
            "other nodes keep changing this memory scope: try again".into(),
        ))
    }

    /// After a switch the folder is another inode: drop what was known of
    /// the old one, and watch the new one from the next look.
    fn relook(&mut self) {
        if let Some(w) = &self.watch {
            w.unwatch(&self.dir.dir);
        }
        self.cache = Cache::watched_by(self.watch.clone());
    }
}

impl Actor for ScopeActor {
    type Msg = ScopeMsg;
    type State = ScopeState;
    type Arguments = (
        ScopeDir,
        Duration,
        Option<Arc<FolderWatch>>,
        Option<ScopeSync>,
    );

    async fn pre_start(
        &self,
        myself: ActorRef<ScopeMsg>,
        (dir, idle, watch, sync): Self::Arguments,
    ) -> Result<ScopeState, ActorProcessingErr> {
        let mut state = ScopeState {
            dir,
            idle,
            seen: 0,
            cache: Cache::watched_by(watch.clone()),
            watch,
            sync,
        };
        // Old tombstones go whenever a folder wakes up.
        let swept = state
            .sync_in()
            .and_then(|()| state.mutate(|d, _| d.sweep()));
        if let Err(e) = swept {
            tracing::warn!("memory trash sweep of {}: {e}", state.dir.dir.display());
        }
        myself.send_after(idle, || ScopeMsg::Idle(0));
        Ok(state)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<ScopeMsg>,
        state: &mut ScopeState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(w) = &state.watch {
            w.unwatch(&state.dir.dir);
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<ScopeMsg>,
        msg: ScopeMsg,
        state: &mut ScopeState,
    ) -> Result<(), ActorProcessingErr> {
        if let ScopeMsg::Idle(n) = msg {
            if n == state.seen {
                myself.stop(None);
            }
            return Ok(());
        }
        state.seen += 1;
        let seen = state.seen;
        myself.send_after(state.idle, move || ScopeMsg::Idle(seen));
        let synced = state.sync_in();
        let file = |name: &str| format!("{name}.md");
        match msg {
            ScopeMsg::Scan { reply } => {
                let (d, cache) = (&state.dir, &mut state.cache);
                let _ = reply.send(synced.and_then(|()| cache.snapshot(d).map(|s| s.scan.clone())));
            }
            ScopeMsg::Snapshot { reply } => {
                let (d, cache) = (&state.dir, &mut state.cache);
                let _ = reply.send(synced.and_then(|()| cache.snapshot(d)));
            }
            ScopeMsg::Write { req, reply } => {
                let written = synced.and_then(|()| {
                    state.mutate(|d, cache| {
                        cache.snapshot(d).and_then(|s| {
                            cache.forget(&file(&req.name));
                            d.write_over(&s.scan, &req)
                        })
                    })
                });
                let _ = reply.send(written);
            }
            ScopeMsg::Forget {
                name,
                reason,
                source,
                reply,
            } => {
                let done = synced.and_then(|()| {
                    state.mutate(|d, cache| {
                        cache.forget(&file(&name));
                        d.forget(&name, &reason, &source)
                    })
                });
                let _ = reply.send(done);
            }
            ScopeMsg::Restore { name, reply } => {
                let done = synced.and_then(|()| {
                    state.mutate(|d, cache| {
                        cache.forget(&file(&name));
                        d.restore(&name)
                    })
                });
                let _ = reply.send(done);
            }
            ScopeMsg::Stage { staging, reply } => {
                let d = &state.dir;
                let _ = reply.send(synced.and_then(|()| super::switch::stage(d, staging)));
            }
            ScopeMsg::Switch {
                base,
                staged,
                meta,
                check,
                keep,
                reply,
            } => {
                let done = synced.and_then(|()| {
                    state.mutate(|d, _| {
                        super::switch::switch(d, &base, &staged, meta.clone(), &check, keep)
                    })
                });
                state.relook();
                let _ = reply.send(done);
            }
            ScopeMsg::Undo { run, keep, reply } => {
                let shared = state.sync.is_some();
                let done = synced
                    .and_then(|()| {
                        state.mutate(|d, _| super::switch::undo(d, run.as_deref(), keep))
                    })
                    .map_err(|e| match e {
                        // Run records and versions stay on the node that
                        // dreamed.
                        MemoryError::NotFound(m) if shared => MemoryError::NotFound(format!(
                            "{m} on this node (on the shared store a dream run is undone on the node that ran it: `flytoctl dream_log` there lists its runs)"
                        )),
                        other => other,
                    });
                state.relook();
                let _ = reply.send(done);
            }
            ScopeMsg::Idle(_) => {}
        }
        Ok(())
    }
}

pub enum ManagerMsg {
    Get {
        key: ScopeKey,
        reply: RpcReplyPort<Result<ActorRef<ScopeMsg>, MemoryError>>,
    },
    /// Scope actors alive now.
    Live { reply: RpcReplyPort<usize> },
    /// Every scope that has memory: the database's on the shared store,
    /// else the folders under the state directory.
    Keys {
        reply: RpcReplyPort<Result<Vec<ScopeKey>, MemoryError>>,
    },
}

/// The scopes whose folders exist under `state_dir`.
fn local_keys(state_dir: &Path) -> Vec<ScopeKey> {
    let mut keys = Vec::new();
    if ScopeKey::User.dir(state_dir).is_dir() {
        keys.push(ScopeKey::User);
    }
    let mut projects: Vec<String> = std::fs::read_dir(state_dir.join("projects"))
        .into_iter()
        .flatten()
        .filter_map(|d| d.ok())
        .filter_map(|d| d.file_name().into_string().ok())
        .filter(|id| ScopeKey::Project(id.clone()).dir(state_dir).is_dir())
        .collect();
    projects.sort();
    keys.extend(projects.into_iter().map(ScopeKey::Project));
    keys
}

pub struct MemoryArgs {
    pub state_dir: PathBuf,
    pub clock: Arc<dyn Clock>,
    /// A scope actor with no message for this long stops.
    pub idle: Duration,
    /// Set on the shared store: the folders are working copies of rows.
    pub shared: Option<Arc<SharedMemory>>,
}

pub struct MemoryManager;

pub struct ManagerState {
    args: MemoryArgs,
    /// Shared by every scope actor; none if inotify is unavailable.
    watch: Option<Arc<FolderWatch>>,
    live: HashMap<ScopeKey, ActorRef<ScopeMsg>>,
}

impl Actor for MemoryManager {
    type Msg = ManagerMsg;
    type State = ManagerState;
    type Arguments = MemoryArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<ManagerMsg>,
        args: MemoryArgs,
    ) -> Result<ManagerState, ActorProcessingErr> {
        let watch = match FolderWatch::new() {
            Ok(w) => Some(Arc::new(w)),
            Err(e) => {
                tracing::warn!(
                    "inotify is unavailable ({e}): memory folders are re-checked file by file at each use"
                );
                None
            }
        };
        Ok(ManagerState {
            args,
            watch,
            live: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<ManagerMsg>,
        msg: ManagerMsg,
        state: &mut ManagerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ManagerMsg::Get { key, reply } => {
                let answer = match state.live.get(&key) {
                    Some(a) => Ok(a.clone()),
                    None => {
                        let dir = ScopeDir {
                            dir: key.dir(&state.args.state_dir),
                            label: key.label(),
                            clock: state.args.clock.clone(),
                        };
                        let sync = state
                            .args
                            .shared
                            .as_ref()
                            .map(|m| ScopeSync::new(m.clone(), key.shared_name()));
                        match Actor::spawn_linked(
                            None,
                            ScopeActor,
                            (dir, state.args.idle, state.watch.clone(), sync),
                            myself.get_cell(),
                        )
                        .await
                        {
                            Ok((a, _)) => {
                                state.live.insert(key, a.clone());
                                Ok(a)
                            }
                            Err(e) => Err(MemoryError::Unavailable(format!(
                                "cannot start the memory actor: {e}"
                            ))),
                        }
                    }
                };
                let _ = reply.send(answer);
            }
            ManagerMsg::Live { reply } => {
                let _ = reply.send(state.live.len());
            }
            ManagerMsg::Keys { reply } => {
                let keys = match &state.args.shared {
                    Some(m) => m
                        .scopes()
                        .await
                        .map(|names| {
                            names
                                .iter()
                                .filter_map(|n| ScopeKey::from_shared_name(n))
                                .collect()
                        })
                        .map_err(|e| MemoryError::Unavailable(format!("the shared store: {e}"))),
                    None => Ok(local_keys(&state.args.state_dir)),
                };
                let _ = reply.send(keys);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<ManagerMsg>,
        event: SupervisionEvent,
        state: &mut ManagerState,
    ) -> Result<(), ActorProcessingErr> {
        let cell: ActorCell = match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => cell,
            SupervisionEvent::ActorFailed(cell, err) => {
                tracing::error!("memory actor failed: {err}");
                cell
            }
            _ => return Ok(()),
        };
        state.live.retain(|_, r| r.get_id() != cell.get_id());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Kind, Memory};
    use super::*;
    use crate::clock::ManualClock;

    async fn start(dir: &Path, name: &str, idle: Duration) -> (Memory, ActorRef<ManagerMsg>) {
        let (m, _) = Actor::spawn(
            Some(name.into()),
            MemoryManager,
            MemoryArgs {
                state_dir: dir.join("state"),
                clock: Arc::new(ManualClock::new(1_700_000_000_000)),
                idle,
                shared: None,
            },
        )
        .await
        .unwrap();
        let mem = Memory {
            manager: name.into(),
            state_dir: dir.join("state"),
        };
        (mem, m)
    }

    fn req(name: &str, kind: Kind) -> WriteReq {
        WriteReq {
            name: name.into(),
            kind,
            description: format!("about {name}"),
            body: "body".into(),
            source: "s-1".into(),
            session: None,
        }
    }

    #[tokio::test]
    async fn concurrent_writers_lose_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let (mem, m) = start(
            tmp.path(),
            "test.memory.concurrent",
            Duration::from_secs(60),
        )
        .await;
        let work = tmp.path().to_path_buf();
        let writers = (0..10).map(|w| {
            let (mem, work) = (mem.clone(), work.clone());
            tokio::spawn(async move {
                for i in 0..10 {
                    mem.write(&work, req(&format!("w{w}-e{i}"), Kind::Project))
                        .await
                        .unwrap();
                }
            })
        });
        for h in futures_util::future::join_all(writers).await {
            h.unwrap();
        }
        let all = mem.list(&work).await.unwrap();
        assert_eq!(all[0].scan.entries.len(), 100);
        let index = std::fs::read_to_string(all[0].dir.join("MEMORY.md")).unwrap();
        assert_eq!(index.lines().count(), 100);
        // A user entry lands in the user scope; its name is then taken.
        mem.write(&work, req("prefers-tabs", Kind::User))
            .await
            .unwrap();
        let all = mem.list(&work).await.unwrap();
        assert_eq!(all[1].scan.entries.len(), 1);
        let err = mem
            .write(&work, req("prefers-tabs", Kind::Project))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("user scope"), "{err}");
        m.stop(None);
    }

    #[tokio::test]
    async fn idle_scope_actors_stop_and_come_back() {
        let tmp = tempfile::tempdir().unwrap();
        let (mem, m) = start(tmp.path(), "test.memory.idle", Duration::from_millis(50)).await;
        let work = tmp.path().to_path_buf();
        mem.write(&work, req("a", Kind::Project)).await.unwrap();
        let live = || async {
            m.call(|reply| ManagerMsg::Live { reply }, None)
                .await
                .unwrap()
                .unwrap()
        };
        assert!(live().await >= 1);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while live().await > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "scope actors never stopped"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(mem.read(&work, "a").await.unwrap().entry.meta.name, "a");
        m.stop(None);
    }
}
