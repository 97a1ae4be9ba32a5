//! The ChannelManager (registered as [`CHANNELS_NAME`]): owns the
//! bindings (one supervised [`BindingActor`] each) and the chats' workers
//! (one task per chat, woken for each journaled message), answers the
//! `channel_*` requests, and puts job results and agent pushes into the
//! outbox. It reaches sessions only through the chat workers.
//!
//! On the shared store each binding runs on the one node holding its
//! lease (see `lease.rs`): the manager starts a binding when its keeper
//! takes the lease and stops it when the lease is lost, and answers for
//! the bindings other nodes hold from the shared records.

use super::binding::{BindingActor, BindingArgs, BindingStatus, SharedStatus};
use super::chat::{self, ChatDeps};
use super::lease::{self, Cluster, Held, Tick};
use super::platform::{OutChunk, Platform};
use super::store::{
    BindingKind, BindingRecord, ChannelStore, OutRecord, OutState, TurnState, Write,
};
use crate::clock::Clock;
use crate::kernel::Reject;
use flyto_protocol::{ChannelSpec, ChannelView, ErrorCode, PairingView};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};

pub const CHANNELS_NAME: &str = crate::kernel::names::CHANNELS;
/// The channels manager, found by its name.
pub const CHANNELS: crate::kernel::Name<ChannelsMsg> = crate::kernel::Name::new(CHANNELS_NAME);

const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// Finished messages and chunks are kept this long (for `channel_list`'s
/// counts and for a look after a problem); their dedup keys stay.
const KEEP_DONE: Duration = Duration::from_secs(86_400);

type Build = dyn Fn(&BindingRecord) -> Result<Arc<dyn Platform>, String> + Send + Sync;

/// Builds a binding's platform from its record (the daemon knows the
/// config each platform takes).
#[derive(Clone)]
pub struct PlatformFactory {
    build: Arc<Build>,
    /// Binding kind → what its platforms are built from, in any stable
    /// text: on a reload, the bindings whose kind's text changed restart
    /// with a new platform.
    settings: HashMap<String, String>,
}

impl PlatformFactory {
    pub fn new(
        build: impl Fn(&BindingRecord) -> Result<Arc<dyn Platform>, String> + Send + Sync + 'static,
        settings: HashMap<String, String>,
    ) -> PlatformFactory {
        PlatformFactory {
            build: Arc::new(build),
            settings,
        }
    }

    pub fn build(&self, rec: &BindingRecord) -> Result<Arc<dyn Platform>, String> {
        (self.build)(rec)
    }
}

#[derive(Debug, Clone)]
pub struct ChannelsConfig {
    pub outbox_ttl: Duration,
    pub session_gap: Duration,
    pub stall_grace: Duration,
    pub context_ttl: Duration,
    pub pause_on_expiry: Duration,
    /// Where chat sessions work.
    pub workdir: String,
    /// binding name → user ids admitted by config.
    pub allow: HashMap<String, Vec<String>>,
}

impl ChannelsConfig {
    /// Whether `binding` (of `kind`) runs differently under `new`.
    fn differs_for(&self, new: &ChannelsConfig, binding: &str) -> bool {
        self.outbox_ttl != new.outbox_ttl
            || self.session_gap != new.session_gap
            || self.stall_grace != new.stall_grace
            || self.context_ttl != new.context_ttl
            || self.pause_on_expiry != new.pause_on_expiry
            || self.workdir != new.workdir
            || self.allow.get(binding) != new.allow.get(binding)
    }
}

pub struct ChannelsArgs {
    pub store: ChannelStore,
    pub clock: Arc<dyn Clock>,
    pub config: ChannelsConfig,
    pub factory: PlatformFactory,
    /// Set on the shared store: bindings are leased per node.
    pub cluster: Option<Cluster>,
}

/// Every binding, and the pending pairing requests.
pub type Listing = (Vec<ChannelView>, Vec<PairingView>);

pub enum ChannelsMsg {
    /// A journaled message for a chat's worker.
    Route { binding: String, chat: String },
    /// Forgets finished journal entries and outbox chunks older than
    /// [`KEEP_DONE`]: the state stays the size of what is in flight.
    Prune,
    /// A binding's actor is up.
    Started {
        name: String,
        actor: ActorRef<super::binding::BindingMsg>,
    },
    /// The lease keeper's news (shared store only).
    Leases(Tick),
    /// The config was reloaded (SIGHUP): the bindings it changes restart
    /// with it, the others keep running untouched.
    Reconfigure {
        config: Box<ChannelsConfig>,
        factory: PlatformFactory,
    },
    List {
        reply: RpcReplyPort<Result<Listing, Reject>>,
    },
    Bind {
        spec: Box<ChannelSpec>,
        reply: RpcReplyPort<Result<ChannelView, Reject>>,
    },
    /// A binding whose secret the daemon obtained itself (WeChat's QR
    /// login): never through a client.
    BindRecord {
        rec: Box<BindingRecord>,
        reply: RpcReplyPort<Result<ChannelView, Reject>>,
    },
    Unbind {
        name: String,
        reply: RpcReplyPort<Result<ChannelView, Reject>>,
    },
    Pair {
        code: String,
        reply: RpcReplyPort<Result<String, Reject>>,
    },
    Test {
        name: String,
        reply: RpcReplyPort<Result<String, Reject>>,
    },
    /// Text for a binding's chats through the outbox, once per `key`:
    /// `target` is `BINDING` (every admitted chat) or `BINDING:CHAT`.
    Notify {
        target: String,
        key: String,
        text: String,
        reply: Option<RpcReplyPort<Result<usize, Reject>>>,
    },
}

struct Live {
    rec: BindingRecord,
    /// Fenced by the binding's lease on the shared store.
    store: ChannelStore,
    platform: Arc<dyn Platform>,
    status: SharedStatus,
    flush: Arc<Notify>,
    out_seq: Arc<tokio::sync::Mutex<u64>>,
    actor: Option<ActorRef<super::binding::BindingMsg>>,
}

pub struct ChannelsState {
    store: ChannelStore,
    clock: Arc<dyn Clock>,
    config: ChannelsConfig,
    factory: PlatformFactory,
    bindings: HashMap<String, Live>,
    chats: HashMap<(String, String), (mpsc::Sender<()>, tokio::task::JoinHandle<()>)>,
    route_tx: mpsc::Sender<(String, String, u64)>,
    forward: Option<tokio::task::JoinHandle<()>>,
    cluster: Option<ClusterState>,
    /// A restarted binding's previous actor, stopped before its
    /// successor (which takes its registered name) starts.
    retiring: HashMap<String, ActorRef<super::binding::BindingMsg>>,
}

/// A binding another node holds (or nobody, for a moment).
struct Other {
    rec: BindingRecord,
    holder: Option<String>,
    /// For chunking what this node adds to its outbox.
    platform: Option<Arc<dyn Platform>>,
}

struct ClusterState {
    c: Cluster,
    held: Held,
    others: BTreeMap<String, Other>,
    keeper: tokio::task::JoinHandle<()>,
}

impl ClusterState {
    /// Wakes every node's keeper (the holder of `binding` flushes its
    /// outbox); the fallback is their tick.
    fn tell_nodes(&self, binding: &str) {
        let (backend, binding) = (self.c.backend.clone(), binding.to_string());
        tokio::spawn(async move {
            if let Err(e) = backend.notify(&binding).await {
                tracing::debug!(error = %e, "cannot notify the other nodes");
            }
        });
    }
}

pub struct ChannelManager;

fn bad(m: impl Into<String>) -> Reject {
    Reject::new(ErrorCode::BadRequest, m)
}

/// A store error as a request's answer: the shared store being away is
/// `Unavailable` (try again), not a fault of the daemon.
fn stored(e: crate::store::StoreError) -> Reject {
    match e {
        crate::store::StoreError::Database(why) => Reject::new(
            ErrorCode::Unavailable,
            format!("the shared store cannot be reached ({why}): try again once it is back"),
        ),
        crate::store::StoreError::Conflict(why) => Reject::new(ErrorCode::Conflict, why),
        other => Reject::internal(other),
    }
}

fn not_found(name: &str) -> Reject {
    Reject::new(
        ErrorCode::NotFound,
        format!("no channel binding `{name}`: see `flytoctl channel_list`"),
    )
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl ChannelsState {
    /// Starts `rec`'s poller, sender and unanswered chats; on the shared
    /// store under its lease `token`.
    fn start_binding(
        &mut self,
        myself: &ActorRef<ChannelsMsg>,
        rec: BindingRecord,
        token: Option<i64>,
    ) -> Result<(), String> {
        let platform = self.factory.build(&rec)?;
        let status: SharedStatus = Arc::new(Mutex::new(BindingStatus::default()));
        let store = match token {
            Some(t) => self.store.fenced(&rec.name, t),
            None => self.store.clone(),
        };
        let out_seq = store.last_seq(b'o', &rec.name).map_err(|e| e.to_string())?;
        if let Some(c) = &mut self.cluster {
            c.others.remove(&rec.name);
        }
        let live = Live {
            rec: rec.clone(),
            store,
            platform,
            status,
            flush: Arc::new(Notify::new()),
            out_seq: Arc::new(tokio::sync::Mutex::new(out_seq)),
            actor: None,
        };
        self.bindings.insert(rec.name.clone(), live);
        // What a crash (here or on the node that held it) left
        // unanswered goes first, in order.
        if let Ok(journal) = self.store.inbound(&rec.name) {
            for r in journal {
                if matches!(r.state, TurnState::Queued | TurnState::Started { .. }) {
                    self.wake_chat(&rec.name, &r.chat);
                }
            }
        }
        self.spawn_actor(myself, &rec.name);
        Ok(())
    }

    fn spawn_actor(&mut self, myself: &ActorRef<ChannelsMsg>, name: &str) {
        let Some(l) = self.bindings.get(name) else {
            return;
        };
        let args = BindingArgs {
            name: l.rec.name.clone(),
            kind: l.rec.kind.name(),
            store: l.store.clone(),
            platform: l.platform.clone(),
            clock: self.clock.clone(),
            status: l.status.clone(),
            flush: l.flush.clone(),
            route: self.route_tx.clone(),
            allow: self.config.allow.get(name).cloned().unwrap_or_default(),
            open: matches!(l.rec.kind, BindingKind::Inbox { .. }),
            stall_grace: self.config.stall_grace,
            outbox_ttl: self.config.outbox_ttl,
            context_ttl: self.config.context_ttl,
            pause_on_expiry: self.config.pause_on_expiry,
            out_seq: l.out_seq.clone(),
            record: Default::default(),
        };
        let retiring = self.retiring.remove(name);
        let name = name.to_string();
        // Spawned from a task: `spawn_linked` is async and the handler
        // must not wait on it holding other work.
        let cell: ActorCell = myself.get_cell();
        let me = myself.clone();
        tokio::spawn(async move {
            if let Some(old) = retiring {
                let _ = old.stop_and_wait(None, Some(Duration::from_secs(10))).await;
            }
            match Actor::spawn_linked(
                Some(format!("flyto.channel.{name}")),
                BindingActor,
                args,
                cell,
            )
            .await
            {
                Ok((actor, _)) => {
                    let _ = me.send_message(ChannelsMsg::Started { name, actor });
                }
                Err(e) => {
                    tracing::warn!(binding = %name, error = %e, "cannot start the channel binding")
                }
            }
        });
    }

    fn chat_deps(&self, binding: &str) -> Option<ChatDeps> {
        let l = self.bindings.get(binding)?;
        Some(ChatDeps {
            binding: binding.to_string(),
            store: l.store.clone(),
            platform: l.platform.clone(),
            clock: self.clock.clone(),
            flush: l.flush.clone(),
            workdir: self.config.workdir.clone(),
            session_gap: self.config.session_gap,
            out_seq: l.out_seq.clone(),
        })
    }

    fn wake_chat(&mut self, binding: &str, chat: &str) {
        let key = (binding.to_string(), chat.to_string());
        if let Some((tx, task)) = self.chats.get(&key)
            && !task.is_finished()
        {
            // Full means a wake-up is already pending: the worker reads
            // the journal, not the channel.
            let _ = tx.try_send(());
            return;
        }
        let Some(deps) = self.chat_deps(binding) else {
            return;
        };
        let (tx, rx) = mpsc::channel(1);
        let _ = tx.try_send(());
        let task = tokio::spawn(chat::run(deps, chat.to_string(), rx));
        self.chats.insert(key, (tx, task));
    }

    fn view(&self, l: &Live) -> ChannelView {
        let status = l.status.lock().map(|s| s.clone()).unwrap_or_default();
        self.view_of(&l.rec, status)
    }

    /// A binding another node holds: its records, and who holds it.
    fn view_other(&self, o: &Other) -> ChannelView {
        let status = BindingStatus {
            state: match &o.holder {
                Some(n) => format!("on node {n}"),
                None => "waiting for a node".into(),
            },
            ..Default::default()
        };
        self.view_of(&o.rec, status)
    }

    fn view_of(&self, rec: &BindingRecord, status: BindingStatus) -> ChannelView {
        let journal = self.store.inbound(&rec.name).unwrap_or_default();
        let outbox = self.store.outbox(&rec.name).unwrap_or_default();
        let count = |f: &dyn Fn(&OutRecord) -> bool| outbox.iter().filter(|o| f(o)).count() as u64;
        let state = if rec.auth_failed.is_some() {
            "auth_failed".to_string()
        } else if rec.paused_until_ms.is_some_and(|u| u > self.clock.now_ms()) {
            "paused".to_string()
        } else if status.state.is_empty() {
            "starting".to_string()
        } else {
            status.state.clone()
        };
        ChannelView {
            name: rec.name.clone(),
            kind: rec.kind.name().to_string(),
            state,
            last_poll: status.last_poll_ms.map(rfc3339),
            last_error: status
                .last_error
                .clone()
                .or_else(|| rec.auth_failed.clone()),
            queued: journal
                .iter()
                .filter(|r| matches!(r.state, TurnState::Queued | TurnState::Started { .. }))
                .count() as u64,
            outbox_pending: count(&|o| o.state == OutState::Pending),
            needs_user_message: count(&|o| o.state == OutState::NeedsUserMessage),
            dropped: count(&|o| matches!(o.state, OutState::Dropped { .. })),
            sent: count(&|o| matches!(o.state, OutState::Sent { .. })),
            chats: self
                .store
                .chats(&rec.name)
                .map(|c| c.len() as u64)
                .unwrap_or(0),
            target: match &rec.kind {
                BindingKind::Inbox { dir } => Some(dir.clone()),
                BindingKind::Telegram { api_base, .. } => api_base.clone(),
                BindingKind::Wechat { base_url, .. } => base_url.clone(),
                BindingKind::Wecom { userid, .. } => Some(format!("userid {userid}")),
            },
        }
    }

    fn record_from_spec(&self, spec: &ChannelSpec) -> Result<BindingRecord, Reject> {
        let name = spec.name.clone().unwrap_or_else(|| spec.kind.clone());
        if !valid_name(&name) {
            return Err(bad(format!(
                "`{name}` is not a binding name: use letters, digits, `_` and `-` (at most 64)"
            )));
        }
        let need = |v: &Option<String>, what: &str| -> Result<String, Reject> {
            match v {
                Some(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
                _ => Err(bad(format!("a {} binding needs {what}", spec.kind))),
            }
        };
        let kind = match spec.kind.as_str() {
            "telegram" => BindingKind::Telegram {
                token: need(
                    &spec.token,
                    "a bot token: --token-env VAR names the variable that holds it",
                )?,
                api_base: spec.api_base.clone(),
            },
            "wechat" => BindingKind::Wechat {
                bot_token: need(
                    &spec.token,
                    "a bot token (bind it with `flytoctl channel_bind wechat`, which shows a QR code)",
                )?,
                base_url: spec.api_base.clone(),
            },
            "wecom" => BindingKind::Wecom {
                corp_id: need(
                    &spec.corp_id,
                    "a corp id ([channels.wecom] corp_id or WECOM_CORP_ID)",
                )?,
                agent_id: need(
                    &spec.agent_id,
                    "an agent id ([channels.wecom] agent_id or WECOM_AGENT_ID)",
                )?,
                secret: need(
                    &spec.secret,
                    "a secret ([channels.wecom] secret or WECOM_SECRET)",
                )?,
                userid: need(&spec.userid, "--userid ID")?,
            },
            "inbox" => {
                let dir = need(&spec.dir, "--dir DIR")?;
                if !std::path::Path::new(&dir).is_absolute() {
                    return Err(bad(format!("--dir {dir} must be an absolute path")));
                }
                BindingKind::Inbox { dir }
            }
            other => {
                return Err(bad(format!(
                    "channel kind `{other}` is not known: use telegram, wechat, wecom or inbox"
                )));
            }
        };
        Ok(BindingRecord {
            name,
            kind,
            created_ms: self.clock.now_ms(),
            auth_failed: None,
            paused_until_ms: None,
        })
    }

    fn bind(
        &mut self,
        myself: &ActorRef<ChannelsMsg>,
        rec: BindingRecord,
    ) -> Result<ChannelView, Reject> {
        let elsewhere = match &self.cluster {
            Some(c) => {
                c.others.contains_key(&rec.name)
                    || self.store.binding(&rec.name).map_err(stored)?.is_some()
            }
            None => false,
        };
        if self.bindings.contains_key(&rec.name) || elsewhere {
            return Err(Reject::new(
                ErrorCode::Conflict,
                format!(
                    "a binding `{}` exists: `flytoctl channel_unbind {}` first, or give --name",
                    rec.name, rec.name
                ),
            ));
        }
        // The platform is built first: a bad folder or URL is refused
        // before anything is stored.
        self.factory.build(&rec).map_err(bad)?;
        let mut w = Write::default();
        w.binding(&rec);
        self.store.apply(&w).map_err(stored)?;
        if self.cluster.is_some() {
            // Whichever node's keeper takes the lease first runs it.
            let other = Other {
                rec: rec.clone(),
                holder: None,
                platform: self.factory.build(&rec).ok(),
            };
            let view = self.view_other(&other);
            if let Some(c) = &mut self.cluster {
                c.others.insert(rec.name.clone(), other);
                c.tell_nodes(&rec.name);
            }
            return Ok(view);
        }
        self.start_binding(myself, rec.clone(), None).map_err(bad)?;
        self.bindings
            .get(&rec.name)
            .map(|l| self.view(l))
            .ok_or_else(|| not_found(&rec.name))
    }

    fn unbind(&mut self, name: &str) -> Result<ChannelView, Reject> {
        let view = match self.bindings.get(name) {
            Some(l) => self.view(l),
            None => {
                let other = self.cluster.as_mut().and_then(|c| c.others.remove(name));
                match other {
                    Some(o) => self.view_other(&o),
                    None => return Err(not_found(name)),
                }
            }
        };
        self.stop_binding(name);
        self.store.remove_binding(name).map_err(stored)?;
        if let Some(c) = &self.cluster {
            if let Ok(mut h) = c.held.lock() {
                h.remove(name);
            }
            let (backend, name) = (c.c.backend.clone(), name.to_string());
            tokio::spawn(async move {
                let _ = backend.release(&name, None).await;
                let _ = backend.notify(&name).await;
            });
        }
        Ok(view)
    }

    /// Stops a binding's actor and chat workers here (unbound, or its
    /// lease went to another node).
    fn stop_binding(&mut self, name: &str) {
        if let Some(l) = self.bindings.remove(name)
            && let Some(a) = &l.actor
        {
            a.stop(None);
        }
        self.chats.retain(|(b, _), (_, task)| {
            if b == name {
                task.abort();
            }
            b != name
        });
    }

    /// The lease keeper's news: stop what this node lost, start what it
    /// took, and note who holds the rest.
    fn leases(&mut self, myself: &ActorRef<ChannelsMsg>, tick: Tick) {
        for name in &tick.lost {
            if self.bindings.contains_key(name) {
                tracing::warn!(binding = %name, "stopping the channel binding here: this node no longer holds its lease");
                self.stop_binding(name);
            }
        }
        for (rec, token) in tick.acquired {
            let name = rec.name.clone();
            tracing::info!(binding = %name, "this node now polls the channel binding");
            if let Err(e) = self.start_binding(myself, rec, Some(token)) {
                tracing::warn!(binding = %name, error = %e, "cannot start the channel binding; fix it and restart, or unbind it");
            }
        }
        let Some(c) = &mut self.cluster else { return };
        if let Some(records) = tick.records {
            let mut others = BTreeMap::new();
            for rec in records {
                if self.bindings.contains_key(&rec.name) {
                    continue;
                }
                let platform = match c.others.remove(&rec.name) {
                    Some(o) if o.rec == rec => o.platform,
                    _ => self.factory.build(&rec).ok(),
                };
                let holder = tick
                    .holders
                    .as_ref()
                    .and_then(|h| h.get(&rec.name).cloned());
                others.insert(
                    rec.name.clone(),
                    Other {
                        rec,
                        holder,
                        platform,
                    },
                );
            }
            c.others = others;
        } else if let Some(holders) = &tick.holders {
            // The list is as it was; who holds each binding is news.
            for (name, o) in c.others.iter_mut() {
                o.holder = holders.get(name).cloned();
            }
        }
        // Another node may have added to an outbox this node sends (a
        // timer tick does not look: each sender has its own safety net).
        if tick.notified {
            for l in self.bindings.values() {
                l.flush.notify_one();
            }
        }
    }

    /// A reloaded config: restarts each binding it changes (a new
    /// platform from the new factory, its chats resumed from the journal),
    /// leaves the rest running. A binding whose new platform cannot be
    /// built keeps running as it was.
    fn reconfigure(
        &mut self,
        myself: &ActorRef<ChannelsMsg>,
        config: ChannelsConfig,
        factory: PlatformFactory,
    ) {
        let old = std::mem::replace(&mut self.config, config);
        let old_factory = std::mem::replace(&mut self.factory, factory);
        let mut names: Vec<String> = self.bindings.keys().cloned().collect();
        names.sort();
        for name in names {
            let Some(l) = self.bindings.get(&name) else {
                continue;
            };
            let rec = l.rec.clone();
            let kind = rec.kind.name();
            if !old.differs_for(&self.config, &name)
                && old_factory.settings.get(kind) == self.factory.settings.get(kind)
            {
                continue;
            }
            if let Err(e) = self.factory.build(&rec) {
                tracing::error!(binding = %name, error = %e, "keeping the channel binding as it was: the reloaded [channels] does not fit it");
                continue;
            }
            let token = self
                .cluster
                .as_ref()
                .and_then(|c| c.held.lock().ok().and_then(|h| h.get(&name).copied()));
            if self.cluster.is_some() && token.is_none() {
                continue;
            }
            if let Some(actor) = self.bindings.get_mut(&name).and_then(|l| l.actor.take()) {
                self.retiring.insert(name.clone(), actor);
            }
            self.stop_binding(&name);
            tracing::info!(binding = %name, "restarting the channel binding with the reloaded [channels]");
            if let Err(e) = self.start_binding(myself, rec, token) {
                if let Some(a) = self.retiring.remove(&name) {
                    a.stop(None);
                }
                tracing::warn!(binding = %name, error = %e, "cannot restart the channel binding; fix it and reload, or unbind it");
            }
        }
        if let Some(c) = &mut self.cluster {
            for o in c.others.values_mut() {
                o.platform = self.factory.build(&o.rec).ok();
            }
        }
    }

    async fn pair(&mut self, code: &str) -> Result<String, Reject> {
        let code = code.trim().to_uppercase();
        let p = self.store.pairing(&code).map_err(stored)?.ok_or_else(|| {
            Reject::new(
                ErrorCode::NotFound,
                format!("no pairing request with code {code}: `flytoctl channel_list` shows the pending ones"),
            )
        })?;
        let mut w = Write::default();
        w.unpair(&p).allow(&p.binding, &p.user);
        self.store.apply(&w).map_err(stored)?;
        let msg = format!(
            "admitted {} ({}) on {}: their next message reaches the agent",
            p.user_name, p.user, p.binding
        );
        self.queue_text(
            &p.binding,
            &p.chat,
            &format!("pair/{code}/admitted"),
            "You are admitted: send your message again and the agent will answer.",
        )
        .await?;
        Ok(msg)
    }

    /// Chunks `text` into the outbox for one chat, once per `key`.
    async fn queue_text(
        &self,
        binding: &str,
        chat: &str,
        key: &str,
        text: &str,
    ) -> Result<bool, Reject> {
        // The binding's own writer here; on the shared store, for a
        // binding another node holds, an unfenced write that wakes it.
        let (platform, out_seq, flush) = match self.bindings.get(binding) {
            Some(l) => (l.platform.clone(), l.out_seq.clone(), Some(l.flush.clone())),
            None => {
                let o = self
                    .cluster
                    .as_ref()
                    .and_then(|c| c.others.get(binding))
                    .ok_or_else(|| not_found(binding))?;
                let platform = o.platform.clone().ok_or_else(|| {
                    bad(format!(
                        "binding `{binding}` cannot be used from this node: its platform does not start here (see the log)"
                    ))
                })?;
                (platform, Arc::new(tokio::sync::Mutex::new(0)), None)
            }
        };
        let first = format!("{key}/0");
        if self.store.has_out(binding, &first).map_err(stored)? {
            return Ok(false);
        }
        let chunks = platform.chunk(text);
        let n = chunks.len();
        let now = self.clock.now_ms();
        let mut w = Write::default();
        // Serialised with the binding's other writers of the outbox.
        let mut seq = out_seq.lock().await;
        for (i, t) in chunks.into_iter().enumerate() {
            let seq = self.store.next_out_seq(&mut seq).map_err(stored)?;
            w.out(&OutRecord {
                binding: binding.to_string(),
                seq,
                id: format!("{key}/{i}"),
                chat: chat.to_string(),
                text: t,
                index: i as u32,
                last: i + 1 == n,
                plain: false,
                created_ms: now,
                reply_to: None,
                state: OutState::Pending,
            });
        }
        self.store.apply(&w).map_err(stored)?;
        drop(seq);
        match flush {
            Some(flush) => {
                let store = self.store.clone();
                tokio::spawn(async move {
                    if store.synced().await.is_ok() {
                        flush.notify_one();
                    }
                });
            }
            None => {
                if let Some(c) = &self.cluster {
                    c.tell_nodes(binding);
                }
            }
        }
        Ok(true)
    }

    /// The chats a push goes to: the named one, or every chat of the
    /// binding whose user was admitted and which is not closed.
    fn targets(&self, target: &str) -> Result<(String, Vec<String>), Reject> {
        let (binding, chat) = match target.split_once(':') {
            Some((b, c)) => (b.to_string(), Some(c.to_string())),
            None => (target.to_string(), None),
        };
        let rec = match self.bindings.get(&binding) {
            Some(l) => &l.rec,
            None => self
                .cluster
                .as_ref()
                .and_then(|c| c.others.get(&binding))
                .map(|o| &o.rec)
                .ok_or_else(|| not_found(&binding))?,
        };
        if let Some(c) = chat {
            return Ok((binding, vec![c]));
        }
        let chats = match &rec.kind {
            BindingKind::Inbox { .. } => vec![super::inbox::INBOX_CHAT.to_string()],
            BindingKind::Wecom { userid, .. } => vec![userid.clone()],
            _ => self
                .store
                .chats(&binding)
                .map_err(stored)?
                .into_iter()
                .filter(|(_, c)| !c.closed && c.session.is_some())
                .map(|(id, _)| id)
                .collect(),
        };
        if chats.is_empty() {
            return Err(bad(format!(
                "binding `{binding}` has no chat to send to yet: write to the bot once, or name the chat as {binding}:CHAT"
            )));
        }
        Ok((binding, chats))
    }
}

impl ChannelsState {
    /// Answers once what was written is durable, without holding the
    /// mailbox for the disk.
    fn reply_when_durable<T: Send + 'static>(
        &self,
        reply: RpcReplyPort<Result<T, Reject>>,
        answer: Result<T, Reject>,
    ) {
        let store = self.store.clone();
        tokio::spawn(async move {
            let answer = match answer {
                Ok(v) => store.synced().await.map(|()| v).map_err(|e| {
                    Reject::new(ErrorCode::Internal, format!("cannot store the change: {e}"))
                }),
                Err(e) => Err(e),
            };
            let _ = reply.send(answer);
        });
    }
}

fn rfc3339(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl Actor for ChannelManager {
    type Msg = ChannelsMsg;
    type State = ChannelsState;
    type Arguments = ChannelsArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ChannelsMsg>,
        args: ChannelsArgs,
    ) -> Result<ChannelsState, ActorProcessingErr> {
        let (route_tx, mut route_rx) = mpsc::channel::<(String, String, u64)>(256);
        let me = myself.clone();
        let forward = tokio::spawn(async move {
            while let Some((binding, chat, _)) = route_rx.recv().await {
                if me
                    .send_message(ChannelsMsg::Route { binding, chat })
                    .is_err()
                {
                    break;
                }
            }
        });
        let mut s = ChannelsState {
            store: args.store,
            clock: args.clock,
            config: args.config,
            factory: args.factory,
            bindings: HashMap::new(),
            chats: HashMap::new(),
            route_tx,
            forward: Some(forward),
            cluster: None,
            retiring: HashMap::new(),
        };
        myself.send_interval(PRUNE_EVERY, || ChannelsMsg::Prune);
        if let Some(c) = args.cluster {
            // Bindings start as this node's keeper takes their leases.
            let held: Held = Default::default();
            let me = myself.clone();
            let keeper = tokio::spawn(lease::run(c.clone(), held.clone(), move |tick| {
                me.send_message(ChannelsMsg::Leases(tick)).is_ok()
            }));
            s.cluster = Some(ClusterState {
                c,
                held,
                others: BTreeMap::new(),
                keeper,
            });
            return Ok(s);
        }
        for rec in s.store.bindings()? {
            let name = rec.name.clone();
            if let Err(e) = s.start_binding(&myself, rec, None) {
                tracing::warn!(binding = %name, error = %e, "cannot start the channel binding; fix it and restart, or unbind it");
            }
        }
        Ok(s)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<ChannelsMsg>,
        s: &mut ChannelsState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(f) = s.forward.take() {
            f.abort();
        }
        for (_, (_, task)) in s.chats.drain() {
            task.abort();
        }
        if let Some(c) = s.cluster.take() {
            c.keeper.abort();
            for l in s.bindings.values() {
                if let Some(a) = &l.actor {
                    a.stop(None);
                }
            }
            // Given back, so another node takes them at once rather than
            // after the lease runs out.
            let held: Vec<(String, i64)> = c
                .held
                .lock()
                .map(|h| h.iter().map(|(k, v)| (k.clone(), *v)).collect())
                .unwrap_or_default();
            for (name, token) in held {
                let _ = tokio::time::timeout(
                    Duration::from_secs(2),
                    c.c.backend.release(&name, Some(token)),
                )
                .await;
                let _ =
                    tokio::time::timeout(Duration::from_secs(2), c.c.backend.notify(&name)).await;
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<ChannelsMsg>,
        event: SupervisionEvent,
        s: &mut ChannelsState,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(cell, why) = event {
            let name = s
                .bindings
                .iter()
                .find(|(_, l)| {
                    l.actor
                        .as_ref()
                        .is_some_and(|a| a.get_id() == cell.get_id())
                })
                .map(|(n, _)| n.clone());
            if let Some(name) = name {
                tracing::warn!(binding = %name, error = %why, "a channel binding failed; restarting it");
                if let Some(l) = s.bindings.get_mut(&name) {
                    l.actor = None;
                }
                s.spawn_actor(&myself, &name);
            }
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<ChannelsMsg>,
        msg: ChannelsMsg,
        s: &mut ChannelsState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ChannelsMsg::Route { binding, chat } => s.wake_chat(&binding, &chat),
            ChannelsMsg::Leases(tick) => s.leases(&myself, tick),
            ChannelsMsg::Reconfigure { config, factory } => {
                s.reconfigure(&myself, *config, factory)
            }
            ChannelsMsg::Prune => {
                let before = s
                    .clock
                    .now_ms()
                    .saturating_sub(KEEP_DONE.as_millis() as u64);
                for (name, l) in &s.bindings {
                    match l.store.prune(name, before) {
                        Ok(0) => {}
                        Ok(n) => {
                            tracing::debug!(binding = %name, n, "pruned finished channel records")
                        }
                        Err(e) => {
                            tracing::warn!(binding = %name, error = %e, "cannot prune channel records")
                        }
                    }
                }
            }
            ChannelsMsg::Started { name, actor } => match s.bindings.get_mut(&name) {
                Some(l) => l.actor = Some(actor),
                // Unbound while it started.
                None => actor.stop(None),
            },
            ChannelsMsg::List { reply } => {
                let mut names: Vec<&String> = s.bindings.keys().collect();
                names.sort();
                let mut views: Vec<ChannelView> = names
                    .iter()
                    .filter_map(|n| s.bindings.get(*n))
                    .map(|l| s.view(l))
                    .collect();
                if let Some(c) = &s.cluster {
                    views.extend(c.others.values().map(|o| s.view_other(o)));
                    views.sort_by(|a, b| a.name.cmp(&b.name));
                }
                let pairings = s.store.pairings().map_err(stored).map(|ps| {
                    ps.into_iter()
                        .map(|p| PairingView {
                            code: p.code,
                            binding: p.binding,
                            user: p.user,
                            user_name: p.user_name,
                            created: rfc3339(p.created_ms),
                        })
                        .collect()
                });
                let _ = reply.send(pairings.map(|p| (views, p)));
            }
            ChannelsMsg::Bind { spec, reply } => {
                let r = s
                    .record_from_spec(&spec)
                    .and_then(|rec| s.bind(&myself, rec));
                s.reply_when_durable(reply, r);
            }
            ChannelsMsg::BindRecord { rec, reply } => {
                let r = s.bind(&myself, *rec);
                s.reply_when_durable(reply, r);
            }
            ChannelsMsg::Unbind { name, reply } => {
                let r = s.unbind(&name);
                s.reply_when_durable(reply, r);
            }
            ChannelsMsg::Pair { code, reply } => {
                let r = s.pair(&code).await;
                s.reply_when_durable(reply, r);
            }
            ChannelsMsg::Test { name, reply } => {
                let target = s.targets(&name);
                let binding = name.split(':').next().unwrap_or("");
                let platform = s
                    .bindings
                    .get(binding)
                    .map(|l| l.platform.clone())
                    .or_else(|| {
                        s.cluster
                            .as_ref()
                            .and_then(|c| c.others.get(binding))
                            .and_then(|o| o.platform.clone())
                    });
                // The platform's answer is awaited in a task: a slow
                // platform must not hold the mailbox.
                tokio::spawn(async move {
                    let r = async {
                        let (binding, chats) = target?;
                        let platform = platform.ok_or_else(|| not_found(&binding))?;
                        let chat = chats.first().cloned().unwrap_or_default();
                        let chunk = OutChunk {
                            id: format!("test/{}", chrono::Utc::now().timestamp_millis()),
                            text: "A test message from flytod: this binding can send.".into(),
                            index: 0,
                            last: true,
                            plain: true,
                            context_token: None,
                            reply_to: None,
                        };
                        match tokio::time::timeout(
                            Duration::from_secs(30),
                            platform.send(&chat, &chunk),
                        )
                        .await
                        {
                            Ok(Ok(id)) => Ok(format!(
                                "sent to {binding}:{chat}: the platform answered message id {id}"
                            )),
                            Ok(Err(e)) => Err(Reject::new(
                                ErrorCode::Unavailable,
                                format!("{binding}:{chat}: {e}"),
                            )),
                            Err(_) => Err(Reject::new(
                                ErrorCode::Unavailable,
                                format!(
                                    "{binding}:{chat}: the platform did not answer within 30 s"
                                ),
                            )),
                        }
                    }
                    .await;
                    let _ = reply.send(r);
                });
            }
            ChannelsMsg::Notify {
                target,
                key,
                text,
                reply,
            } => {
                let r = match s.targets(&target) {
                    Ok((binding, chats)) => {
                        let mut n = Ok(0);
                        for chat in chats {
                            match s
                                .queue_text(&binding, &chat, &format!("{key}/{chat}"), &text)
                                .await
                            {
                                Ok(true) => n = n.map(|k| k + 1),
                                Ok(false) => {}
                                Err(e) => n = Err(e),
                            }
                        }
                        n
                    }
                    Err(e) => Err(e),
                };
                if let Err(e) = &r {
                    tracing::warn!(target = %target, error = %e.message, "a notification was not queued");
                }
                if let Some(reply) = reply {
                    s.reply_when_durable(reply, r);
                }
            }
        }
        Ok(())
    }
}
