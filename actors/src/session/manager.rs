//! The SessionManager: creates sessions, maps ids to live SessionActors
//! (spawning them on demand, linked to itself) and forgets actors that
//! stopped. At start it repairs sessions a crash left `running`.

use super::SessionDeps;
use super::actor::{SessionActor, SessionArgs, SessionMsg, recover};
use super::model::{
    SessionRecord, SessionSandbox, SessionStatus, format_id, message_view, parse_id,
};
use super::store::Claim;
use crate::kernel::Reject;
use crate::llm::Usage;
use flyto_protocol::{ErrorCode, MessageView, SessionView};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

pub const SESSION_MANAGER_NAME: &str = crate::kernel::names::SESSIONS;
/// The session manager, found by its name.
pub const SESSION_MANAGER: crate::kernel::Name<ManagerMsg> =
    crate::kernel::Name::new(SESSION_MANAGER_NAME);

pub enum ManagerMsg {
    New {
        name: Option<String>,
        workdir: Option<String>,
        model: Option<String>,
        /// Chain id and depth for sessions started by plans.
        chain: Option<(String, u32)>,
        sandbox: SessionSandbox,
        reply: RpcReplyPort<Result<SessionView, Reject>>,
    },
    /// The live actor of a session, started if needed.
    Get {
        id: String,
        reply: RpcReplyPort<Result<ActorRef<SessionMsg>, Reject>>,
    },
    /// A session by name (for plans that name one), created if missing.
    ByName {
        name: String,
        workdir: String,
        /// Chain and depth for a session this creates.
        chain: Option<(String, u32)>,
        /// The confinement of the plan that asks: a session it creates gets
        /// it; with one set, only a session of the same chain is used.
        sandbox: Option<SessionSandbox>,
        reply: RpcReplyPort<Result<String, Reject>>,
    },
    List {
        reply: RpcReplyPort<Result<Vec<SessionView>, Reject>>,
    },
    History {
        id: String,
        reply: RpcReplyPort<Result<History, Reject>>,
    },
    Totals {
        reply: RpcReplyPort<Result<SessionTotals, Reject>>,
    },
    /// Shutdown: every live session's run gets `grace`, then is cancelled.
    /// Answers once all have ended.
    Drain {
        grace: std::time::Duration,
        reply: RpcReplyPort<()>,
    },
    /// A sub-agent's session: a child of `of.parent`, starting with
    /// `of.prefix` (the parent's window); answers its id.
    Child {
        workdir: String,
        model: String,
        chain: (String, u32),
        sandbox: SessionSandbox,
        of: ChildOf,
        reply: RpcReplyPort<Result<String, Reject>>,
    },
    /// A deferred [`ManagerState::return_memory`].
    Trim,
}

/// What makes a session a sub-agent's.
pub struct ChildOf {
    pub parent: u64,
    pub agent_depth: u32,
    /// Its first messages: the parent's window, and the task.
    pub prefix: Vec<crate::llm::Message>,
}

/// A session, every message, the summary the model sees, and the memory
/// extractions over its turns.
pub type History = (
    SessionView,
    Vec<MessageView>,
    Option<String>,
    Vec<flyto_protocol::ExtractionView>,
);

/// Sessions listed in `stats` by how full their context is.
const STATS_CONTEXTS: usize = 10;

#[derive(Debug, Clone, Default)]
pub struct SessionTotals {
    pub compactions: u64,
    /// The fullest contexts, relative to their compaction threshold.
    pub contexts: Vec<flyto_protocol::SessionContext>,
    pub sessions: u64,
    pub running: u64,
    /// Session actors alive right now.
    pub live: u64,
    pub usage: Usage,
    pub cost_usd: f64,
}

pub struct SessionManager;

pub struct ManagerState {
    deps: Arc<SessionDeps>,
    live: HashMap<u64, ActorRef<SessionMsg>>,
    next_id: u64,
    myself: Option<ActorRef<ManagerMsg>>,
    last_trim: Option<std::time::Instant>,
    trim_pending: bool,
    /// flytod is shutting down: no new sessions.
    draining: bool,
}

fn not_found(id: &str) -> Reject {
    Reject::new(
        ErrorCode::NotFound,
        format!("no session `{id}`: `flytoctl session_list` shows the sessions that exist"),
    )
}

impl Actor for SessionManager {
    type Msg = ManagerMsg;
    type State = ManagerState;
    type Arguments = Arc<SessionDeps>;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        deps: Arc<SessionDeps>,
    ) -> Result<Self::State, ActorProcessingErr> {
        for rec in deps.store.list()? {
            if rec.status != SessionStatus::Running {
                continue;
            }
            // On a shared store only what no live node runs: a claim
            // succeeds once the run's node is gone.
            let rec = match deps.store.claim(rec.id)? {
                Claim::Local => rec,
                Claim::Taken { record, .. } => *record,
                Claim::Busy { .. } | Claim::Gone => continue,
            };
            let id = rec.id;
            if rec.status == SessionStatus::Running {
                tracing::warn!(session = %format_id(id), "repairing a session interrupted mid-run");
                recover(&deps, rec)?;
            }
            deps.store.release(id);
        }
        Ok(ManagerState {
            next_id: deps.store.next_id()?,
            deps,
            live: HashMap::new(),
            myself: Some(myself),
            last_trim: None,
            trim_pending: false,
            draining: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ManagerMsg::New {
                name,
                workdir,
                model,
                chain,
                sandbox,
                reply,
            } => {
                let answer = state.create(name, workdir, model, chain, sandbox, None);
                match answer {
                    Ok(view) => state.deps.store.after_sync(Box::new(move |synced| {
                        let _ = reply.send(synced.map(|_| view).map_err(Reject::internal));
                    })),
                    Err(r) => {
                        let _ = reply.send(Err(r));
                    }
                }
            }
            ManagerMsg::Get { id, reply } => {
                let answer = state.get(&id, &myself).await;
                let _ = reply.send(answer);
            }
            ManagerMsg::Child {
                workdir,
                model,
                chain,
                sandbox,
                of,
                reply,
            } => {
                let answer = state
                    .create(
                        None,
                        Some(workdir),
                        Some(model),
                        Some(chain),
                        sandbox,
                        Some(of),
                    )
                    .map(|v| v.id);
                let _ = reply.send(answer);
            }
            ManagerMsg::ByName {
                name,
                workdir,
                chain,
                sandbox,
                reply,
            } => {
                let existing = state.deps.store.list().map_err(Reject::from).map(|all| {
                    all.into_iter()
                        .find(|r| r.name.as_deref() == Some(name.as_str()))
                });
                let answer = match existing {
                    // A confined plan may not borrow a looser session.
                    Ok(Some(r))
                        if sandbox.is_some()
                            && chain
                                .as_ref()
                                .is_some_and(|(c, depth)| *depth >= 1 && *c != r.chain) =>
                    {
                        Err(Reject::new(
                            ErrorCode::PermissionDenied,
                            format!(
                                "session `{name}` belongs to another chain: a plan submitted by an agent may use only sessions of its own chain; leave out `session` to get a new one"
                            ),
                        ))
                    }
                    Ok(Some(r)) => Ok(format_id(r.id)),
                    Ok(None) => state
                        .create(
                            Some(name),
                            Some(workdir),
                            None,
                            chain,
                            sandbox.unwrap_or_default(),
                            None,
                        )
                        .map(|v| v.id),
                    Err(e) => Err(e),
                };
                let _ = reply.send(answer);
            }
            ManagerMsg::List { reply } => {
                let answer = state
                    .deps
                    .store
                    .list()
                    .map(|all| {
                        let models = state.deps.models();
                        let mut views: Vec<SessionView> = all
                            .iter()
                            .map(|r| {
                                r.view(
                                    r.status == SessionStatus::Running,
                                    super::context::budget(&models, &r.model),
                                )
                            })
                            .collect();
                        state.mark_orphaned(&all, &mut views);
                        views
                    })
                    .map_err(Reject::from);
                let _ = reply.send(answer);
            }
            ManagerMsg::History { id, reply } => {
                let answer = state.history(&id);
                let _ = reply.send(answer);
            }
            ManagerMsg::Drain { grace, reply } => {
                state.draining = true;
                let sessions: Vec<ActorRef<SessionMsg>> = state.live.values().cloned().collect();
                // Waiting here would block the mailbox; a task waits instead.
                tokio::spawn(async move {
                    let limit = grace + std::time::Duration::from_secs(30);
                    // All at once, so each gets the same grace.
                    let calls = sessions
                        .iter()
                        .map(|s| s.call(|r| SessionMsg::Drain { grace, reply: r }, Some(limit)));
                    futures_util::future::join_all(calls).await;
                    let _ = reply.send(());
                });
            }
            ManagerMsg::Trim => {
                state.trim_pending = false;
                state.last_trim = None;
                state.return_memory();
            }
            ManagerMsg::Totals { reply } => {
                let answer = state
                    .deps
                    .store
                    .list()
                    .map(|all| {
                        let mut t = SessionTotals {
                            sessions: all.len() as u64,
                            live: state.live.len() as u64,
                            ..SessionTotals::default()
                        };
                        let models = state.deps.models();
                        let mut fill = Vec::new();
                        for r in &all {
                            t.usage.add(&r.usage);
                            t.cost_usd += r.cost_usd;
                            t.running += u64::from(r.status == SessionStatus::Running);
                            t.compactions += r.context.compactions;
                            let budget = super::context::budget(&models, &r.model);
                            let ratio = budget.map_or(0.0, |b| {
                                r.context.tokens() as f64 / b.compact_at.max(1) as f64
                            });
                            fill.push((ratio, r));
                        }
                        fill.sort_by(|a, b| b.0.total_cmp(&a.0));
                        t.contexts = fill
                            .into_iter()
                            .take(STATS_CONTEXTS)
                            .filter(|(_, r)| r.context.tokens() > 0)
                            .map(|(_, r)| flyto_protocol::SessionContext {
                                session: format_id(r.id),
                                context: r.context_view(super::context::budget(&models, &r.model)),
                            })
                            .collect();
                        t
                    })
                    .map_err(Reject::from);
                let _ = reply.send(answer);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let cell: ActorCell = match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => cell,
            SupervisionEvent::ActorFailed(cell, err) => {
                tracing::error!("session actor failed: {err}");
                cell
            }
            _ => return Ok(()),
        };
        state.live.retain(|_, r| r.get_id() != cell.get_id());
        state.return_memory();
        Ok(())
    }
}

/// glibc keeps memory that stopped actors freed; without handing it back,
/// a burst of sessions would leave the daemon's RSS at its peak for good.
#[cfg(target_env = "gnu")]
fn trim_heap() {
    // SAFETY: malloc_trim has no preconditions; it only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(target_env = "gnu"))]
fn trim_heap() {}

impl ManagerState {
    /// Returns freed memory to the system after actors stopped, at most
    /// once a second (a trim walks the heap), off the mailbox.
    fn return_memory(&mut self) {
        let now = std::time::Instant::now();
        if self
            .last_trim
            .is_some_and(|t| now.duration_since(t) < std::time::Duration::from_secs(1))
        {
            if !self.trim_pending {
                self.trim_pending = true;
                if let Some(me) = self.myself.clone() {
                    me.send_after(std::time::Duration::from_secs(1), || ManagerMsg::Trim);
                }
            }
            return;
        }
        self.last_trim = Some(now);
        self.trim_pending = false;
        tokio::task::spawn_blocking(trim_heap);
    }

    fn create(
        &mut self,
        name: Option<String>,
        workdir: Option<String>,
        model: Option<String>,
        chain: Option<(String, u32)>,
        sandbox: SessionSandbox,
        child: Option<ChildOf>,
    ) -> Result<SessionView, Reject> {
        if self.draining {
            return Err(Reject::new(
                ErrorCode::Unavailable,
                "flytod is shutting down: create the session again once it has restarted",
            ));
        }
        let config = self.deps.config();
        let workdir = workdir.unwrap_or(config.default_workdir);
        let path = Path::new(&workdir);
        if !path.is_absolute() || !path.is_dir() {
            return Err(Reject::new(
                ErrorCode::BadRequest,
                format!(
                    "workdir {workdir} is not an existing absolute directory: create it or pass another --workdir"
                ),
            ));
        }
        let model = model.unwrap_or(config.default_model);
        super::route_for(&self.deps.models(), &model)
            .map_err(|e| Reject::new(ErrorCode::BadRequest, e.to_string()))?;
        if let Some(n) = &name
            && (n.is_empty() || n.len() > 128)
        {
            return Err(Reject::new(
                ErrorCode::BadRequest,
                "a session name must be 1 to 128 bytes",
            ));
        }
        if let Some(n) = &name
            && let Some(existing) = self
                .deps
                .store
                .list()
                .map_err(Reject::from)?
                .iter()
                .find(|r| r.name.as_deref() == Some(n.as_str()))
        {
            let id = format_id(existing.id);
            return Err(Reject::new(
                ErrorCode::Conflict,
                format!(
                    "a session named `{n}` already exists: {id}; continue it (`flytoctl chat --name {n}`, `flytoctl session_send {id} …`), delete it with `flytoctl session_delete {id}`, or choose another name"
                ),
            ));
        }
        // Other nodes take ids too on a shared store: it hands them out.
        let id = if self.deps.store.shared() {
            self.deps.store.next_id().map_err(Reject::from)?
        } else {
            self.next_id
        };
        let now = self.deps.clock.now_ms();
        let (chain, depth) = chain.unwrap_or_else(|| (format_id(id), 0));
        let rec = SessionRecord {
            id,
            name,
            workdir,
            model,
            status: SessionStatus::Idle,
            error: None,
            next_idx: 0,
            context_base_idx: 0,
            usage: Usage::default(),
            cost_usd: 0.0,
            created_ms: now,
            updated_ms: now,
            runs: 0,
            chain,
            depth,
            context: Default::default(),
            sandbox,
            extract_from_idx: 0,
            extract_turns: 0,
            parent: child.as_ref().map(|c| c.parent),
            agent_depth: child.as_ref().map_or(0, |c| c.agent_depth),
        };
        let prefix = child.map(|c| c.prefix).unwrap_or_default();
        let mut rec = rec;
        rec.next_idx = prefix.len() as u64;
        super::context::count_appended(&mut rec, &prefix);
        self.deps
            .store
            .save(&rec, &prefix, true)
            .map_err(Reject::from)?;
        self.next_id += 1;
        Ok(rec.view(false, self.deps.budget(&rec.model)))
    }

    async fn get(
        &mut self,
        id: &str,
        myself: &ActorRef<ManagerMsg>,
    ) -> Result<ActorRef<SessionMsg>, Reject> {
        let n = parse_id(id).ok_or_else(|| not_found(id))?;
        if let Some(r) = self.live.get(&n) {
            return Ok(r.clone());
        }
        if self.deps.store.get(n).map_err(Reject::from)?.is_none() {
            return Err(not_found(id));
        }
        let (actor, _) = Actor::spawn_linked(
            None,
            SessionActor,
            SessionArgs {
                id: n,
                deps: self.deps.clone(),
            },
            myself.get_cell(),
        )
        .await
        .map_err(|e| Reject::internal(format!("cannot start session {id}: {e}")))?;
        self.live.insert(n, actor.clone());
        Ok(actor)
    }

    fn history(&self, id: &str) -> Result<History, Reject> {
        let n = parse_id(id).ok_or_else(|| not_found(id))?;
        let rec = self
            .deps
            .store
            .get(n)
            .map_err(Reject::from)?
            .ok_or_else(|| not_found(id))?;
        let messages = self
            .deps
            .store
            .stamped_messages(n, 0, u64::MAX)
            .map_err(Reject::from)?
            .iter()
            .map(|(i, m)| message_view(*i, m.created_ms, &m.message))
            .collect();
        let running = self.live.contains_key(&n) && rec.status == SessionStatus::Running;
        let summary = rec.context.summary_message(rec.context_base_idx);
        let extractions = self
            .deps
            .store
            .extractions(n)
            .map_err(Reject::from)?
            .iter()
            .map(|x| x.view())
            .collect();
        let mut view = [rec.view(running, self.deps.budget(&rec.model))];
        self.mark_orphaned(std::slice::from_ref(&rec), &mut view);
        let [view] = view;
        Ok((view, messages, summary, extractions))
    }

    /// On a shared store, a session stored `running` whose node died shows
    /// as what it is: interrupted, to be repaired by the next message.
    /// Only the view: the record is repaired under a claim.
    fn mark_orphaned(&self, recs: &[SessionRecord], views: &mut [SessionView]) {
        let running: Vec<u64> = recs
            .iter()
            .filter(|r| r.status == SessionStatus::Running)
            .map(|r| r.id)
            .collect();
        let Ok(orphaned) = self.deps.store.orphaned(&running) else {
            return;
        };
        for (rec, view) in recs.iter().zip(views.iter_mut()) {
            if orphaned.contains(&rec.id) {
                view.status = "error".into();
                view.error = Some(
                    "interrupted: the node that ran it stopped; send a message to continue (its transcript is repaired first)"
                        .into(),
                );
            }
        }
    }
}
