//! The `McpManager` actor: owns the connections to the configured
//! servers. A server starts with the first session run that needs MCP
//! (never at daemon start), is restarted with backoff when it dies while
//! in use, and is stopped when no session has used MCP for `idle_timeout`.
//! Starting, listing and stopping run in tasks the actor owns; its
//! mailbox never waits on a server. Sessions read the published
//! [`Snapshot`] (tools of running servers, who is starting, who failed)
//! and call tools through each server's [`Slot`], not through the actor.

use super::config::ServerSpec;
use super::conn::{self, Connected, Handler, Host};
use super::tool::{LastUse, McpTool, Slot, check_schema, model_name};
use crate::kernel::Reject;
use crate::tools::Tool;
use flyto_protocol::{ErrorCode, McpServerView, McpToolView};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use rmcp::service::{Peer, RoleClient};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub const MCP_NAME: &str = crate::kernel::names::MCP;
/// The MCP manager, found by its name.
pub const MCP: crate::kernel::Name<McpMsg> = crate::kernel::Name::new(MCP_NAME);

/// How often idle servers are looked for (at most).
const IDLE_CHECK: Duration = Duration::from_secs(15);
/// Restart backoff: doubles from the first to the last.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A server up this long has its backoff reset when it dies.
const STABLE_AFTER: Duration = Duration::from_secs(60);

/// What sessions see of the servers.
#[derive(Default)]
pub struct Snapshot {
    /// Tools of the running servers.
    pub tools: Vec<Arc<dyn Tool>>,
    /// Servers still connecting.
    pub starting: Vec<String>,
    /// Enabled servers that are down, with why.
    pub failed: Vec<(String, String)>,
}

/// Lives across restarts of the actor: config, the published snapshot,
/// when MCP was last used.
pub struct Shared {
    specs: RwLock<Arc<Vec<ServerSpec>>>,
    idle_timeout: RwLock<Duration>,
    startup_wait: RwLock<Duration>,
    host: RwLock<Host>,
    snapshot: watch::Sender<Arc<Snapshot>>,
    last_use: LastUse,
    epoch: Instant,
}

impl Shared {
    fn specs(&self) -> Arc<Vec<ServerSpec>> {
        self.specs.read().map(|s| s.clone()).unwrap_or_default()
    }
    fn host(&self) -> Option<Host> {
        self.host.read().ok().map(|h| h.clone())
    }
    fn idle_timeout(&self) -> Duration {
        self.idle_timeout
            .read()
            .map(|d| *d)
            .unwrap_or(Duration::from_secs(600))
    }
    fn touch(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_use
            .fetch_max(ms, std::sync::atomic::Ordering::Relaxed);
    }
    fn idle_for(&self) -> Duration {
        let last = self.last_use.load(std::sync::atomic::Ordering::Relaxed);
        self.epoch
            .elapsed()
            .saturating_sub(Duration::from_millis(last))
    }
}

/// What sessions and the control socket hold.
#[derive(Clone)]
pub struct McpHandle {
    shared: Arc<Shared>,
}

impl McpHandle {
    pub fn new(specs: Vec<ServerSpec>, section: &super::McpSection, host: Host) -> Self {
        let (snapshot, _) = watch::channel(Arc::new(Snapshot::default()));
        McpHandle {
            shared: Arc::new(Shared {
                specs: RwLock::new(Arc::new(specs)),
                idle_timeout: RwLock::new(section.idle_timeout),
                startup_wait: RwLock::new(section.startup_wait),
                host: RwLock::new(host),
                snapshot,
                last_use: Arc::default(),
                epoch: Instant::now(),
            }),
        }
    }

    /// New config (SIGHUP): servers whose entry changed restart, removed
    /// ones stop, unchanged ones are not touched.
    pub fn configure(&self, specs: Vec<ServerSpec>, section: &super::McpSection, host: Host) {
        if let Ok(mut s) = self.shared.specs.write() {
            *s = Arc::new(specs);
        }
        if let Ok(mut d) = self.shared.idle_timeout.write() {
            *d = section.idle_timeout;
        }
        if let Ok(mut d) = self.shared.startup_wait.write() {
            *d = section.startup_wait;
        }
        if let Ok(mut h) = self.shared.host.write() {
            *h = host;
        }
        if let Some(actor) = actor() {
            let _ = actor.cast(McpMsg::Reconfigure);
        }
    }

    /// Whether any server is configured and enabled.
    pub fn enabled(&self) -> bool {
        self.shared.specs().iter().any(|s| s.entry.enabled)
    }

    /// The servers a run may use: starts those not running (once the actor
    /// has taken this in, the snapshot shows them starting), then waits
    /// for the ones starting, up to `[mcp] startup_wait` (or their
    /// `startup_timeout`, if shorter) or `cancel`: a slow server holds a
    /// run up that long at most, and joins its later calls when it is up.
    pub async fn ready(&self, cancel: &CancellationToken) -> Arc<Snapshot> {
        self.shared.touch();
        if !self.enabled() {
            return Arc::new(Snapshot::default());
        }
        if let Some(actor) = actor() {
            let _ = ractor::call_t!(actor, McpMsg::Ensure, 2_000);
        }
        let longest = self
            .shared
            .specs()
            .iter()
            .filter(|s| s.entry.enabled)
            .map(|s| s.entry.startup_timeout)
            .max()
            .unwrap_or_default();
        let wait = self
            .shared
            .startup_wait
            .read()
            .map(|d| *d)
            .unwrap_or_default();
        let deadline = Instant::now() + longest.min(wait);
        let mut rx = self.shared.snapshot.subscribe();
        loop {
            if rx.borrow_and_update().starting.is_empty() {
                break;
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { break },
                _ = tokio::time::sleep_until(deadline) => break,
                _ = cancel.cancelled() => break,
            }
        }
        self.snapshot()
    }

    /// The tools of the running servers, now. A run asks before each
    /// model call, so a run in progress keeps its servers from idling.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.touch();
        self.shared.snapshot.borrow().clone()
    }

    pub async fn list(&self) -> Result<Vec<McpServerView>, Reject> {
        let actor = actor().ok_or_else(not_running)?;
        ractor::call_t!(actor, McpMsg::List, 5_000).map_err(no_answer)
    }

    pub async fn tools_of(&self, server: &str) -> Result<Vec<McpToolView>, Reject> {
        let actor = actor().ok_or_else(not_running)?;
        ractor::call_t!(actor, McpMsg::Tools, 5_000, server.to_string()).map_err(no_answer)?
    }

    pub async fn restart(&self, server: &str) -> Result<(), Reject> {
        let actor = actor().ok_or_else(not_running)?;
        ractor::call_t!(actor, McpMsg::Restart, 5_000, server.to_string()).map_err(no_answer)?
    }
}

fn not_running() -> Reject {
    Reject::new(
        ErrorCode::Unavailable,
        "the MCP room is not running (flytod is starting or stopping): try again",
    )
}

fn no_answer(e: impl std::fmt::Display) -> Reject {
    Reject::new(
        ErrorCode::Unavailable,
        format!("the MCP room did not answer: {e}"),
    )
}

fn actor() -> Option<ActorRef<McpMsg>> {
    MCP.find()
}

pub enum McpMsg {
    /// Start the enabled servers that are not running (answers at once).
    Ensure(RpcReplyPort<()>),
    /// The config changed.
    Reconfigure,
    Restart(String, RpcReplyPort<Result<(), Reject>>),
    List(RpcReplyPort<Vec<McpServerView>>),
    Tools(String, RpcReplyPort<Result<Vec<McpToolView>, Reject>>),
    Started {
        name: String,
        generation: u64,
        result: Result<Box<Connected>, String>,
    },
    Ended {
        name: String,
        generation: u64,
        why: String,
    },
    ListChanged {
        name: String,
        generation: u64,
    },
    Listed {
        name: String,
        generation: u64,
        result: Result<Vec<rmcp::model::Tool>, String>,
    },
    Retry {
        name: String,
        generation: u64,
    },
    IdleCheck,
}

enum Phase {
    Idle,
    Starting,
    Running {
        stop: CancellationToken,
        peer: Peer<RoleClient>,
        since: Instant,
    },
    /// Died while in use: starts again at `until` (a `Retry`).
    Backoff {
        until: Instant,
    },
    /// Could not start: starts again with a run that needs it, from `after`.
    Failed {
        after: Instant,
    },
    Disabled,
}

struct Server {
    spec: ServerSpec,
    /// Bumped by every start and stop: messages of an older connection
    /// are ignored.
    generation: u64,
    phase: Phase,
    tools: Vec<Arc<McpTool>>,
    problems: Vec<String>,
    last_error: Option<String>,
    restarts: u32,
    attempt: u32,
    protocol: Option<String>,
    slot: Arc<Slot>,
    /// New HTTP sessions after the first (the server lost ours).
    reconnects: Arc<AtomicU32>,
    /// Its tools that need task-based execution (as last listed).
    task_tools: super::stdio::TaskTools,
}

impl Server {
    fn new(spec: ServerSpec) -> Self {
        let phase = if spec.entry.enabled {
            Phase::Idle
        } else {
            Phase::Disabled
        };
        let slot = Arc::new(Slot::default());
        slot.set_secrets(spec.scrubber());
        Server {
            spec,
            generation: 0,
            phase,
            tools: Vec::new(),
            problems: Vec::new(),
            last_error: None,
            restarts: 0,
            attempt: 0,
            protocol: None,
            slot,
            reconnects: Arc::default(),
            task_tools: Default::default(),
        }
    }

    /// Stops the connection, if any (its watcher kills the process).
    fn stop(&mut self, then: Phase) {
        self.generation += 1;
        if let Phase::Running { stop, .. } = &self.phase {
            stop.cancel();
        }
        self.phase = then;
        self.tools.clear();
        self.slot.set(None, Some("stopped".into()));
    }

    fn backoff(&self) -> Duration {
        BACKOFF_FIRST
            .saturating_mul(1u32 << self.attempt.min(6))
            .min(BACKOFF_MAX)
    }

    fn state_name(&self) -> &'static str {
        match self.phase {
            Phase::Idle => "idle",
            Phase::Starting => "starting",
            Phase::Running { .. } => "running",
            Phase::Backoff { .. } => "restarting",
            Phase::Failed { .. } => "failed",
            Phase::Disabled => "disabled",
        }
    }
}

pub struct McpManager;

pub struct McpArgs {
    pub handle: McpHandle,
}

pub struct McpState {
    shared: Arc<Shared>,
    servers: BTreeMap<String, Server>,
    /// Cancelled when this actor stops: every connection ends with it.
    life: CancellationToken,
}

impl Actor for McpManager {
    type Msg = McpMsg;
    type State = McpState;
    type Arguments = McpArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: McpArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let shared = args.handle.shared.clone();
        let servers = shared
            .specs()
            .iter()
            .map(|s| (s.name.clone(), Server::new(s.clone())))
            .collect();
        let every = (shared.idle_timeout() / 2).clamp(Duration::from_millis(100), IDLE_CHECK);
        myself.send_interval(every, || McpMsg::IdleCheck);
        let state = McpState {
            shared,
            servers,
            life: CancellationToken::new(),
        };
        publish(&state);
        Ok(state)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.life.cancel();
        for s in state.servers.values() {
            s.slot.set(None, Some("flytod is stopping".into()));
        }
        state
            .shared
            .snapshot
            .send_replace(Arc::new(Snapshot::default()));
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            McpMsg::Ensure(reply) => {
                let now = Instant::now();
                let names: Vec<String> = state
                    .servers
                    .iter()
                    .filter(|(_, s)| match s.phase {
                        Phase::Idle => true,
                        Phase::Failed { after } => after <= now,
                        _ => false,
                    })
                    .map(|(n, _)| n.clone())
                    .collect();
                for name in names {
                    start(&myself, state, &name);
                }
                let _ = reply.send(());
            }
            McpMsg::Reconfigure => reconfigure(&myself, state),
            McpMsg::Restart(name, reply) => {
                let answer = match state.servers.get_mut(&name) {
                    None => Err(unknown(&name, state)),
                    Some(s) if !s.spec.entry.enabled => Err(Reject::new(
                        ErrorCode::Conflict,
                        format!(
                            "MCP server `{name}` is disabled (enabled = false): enable it in the config and reload flytod (SIGHUP)"
                        ),
                    )),
                    Some(s) => {
                        // Its tools stay offered (calls fail at once) until
                        // it lists them again.
                        let tools = std::mem::take(&mut s.tools);
                        s.stop(Phase::Idle);
                        s.tools = tools;
                        s.attempt = 0;
                        start(&myself, state, &name);
                        Ok(())
                    }
                };
                let _ = reply.send(answer);
            }
            McpMsg::List(reply) => {
                let _ = reply.send(state.servers.values().map(view).collect());
            }
            McpMsg::Tools(name, reply) => {
                let answer = match state.servers.get(&name) {
                    None => Err(unknown(&name, state)),
                    Some(s) if s.tools.is_empty() && !matches!(s.phase, Phase::Running { .. }) => {
                        Err(Reject::new(
                            ErrorCode::Unavailable,
                            format!(
                                "MCP server `{name}` is {}{}: its tools are listed once it runs (`flytoctl mcp_restart {name}` starts it)",
                                s.state_name(),
                                s.last_error
                                    .as_ref()
                                    .map(|e| format!(" ({e})"))
                                    .unwrap_or_default()
                            ),
                        ))
                    }
                    Some(s) => Ok(s
                        .tools
                        .iter()
                        .map(|t| McpToolView {
                            name: t.model_name.clone(),
                            remote: t.remote_name.clone(),
                            description: t.description.clone(),
                            read_only: t.read_only,
                            input_schema: t.schema.clone(),
                        })
                        .collect()),
                };
                let _ = reply.send(answer);
            }
            McpMsg::Started {
                name,
                generation,
                result,
            } => started(&myself, state, name, generation, result),
            McpMsg::Ended {
                name,
                generation,
                why,
            } => {
                let idle = state.shared.idle_for() >= state.shared.idle_timeout();
                if let Some(s) = state.servers.get_mut(&name)
                    && s.generation == generation
                    && let Phase::Running { since, .. } = s.phase
                {
                    let why = s.spec.scrub(&why);
                    tracing::warn!(server = %name, "MCP server stopped: {why}");
                    if since.elapsed() >= STABLE_AFTER {
                        s.attempt = 0;
                    }
                    s.restarts += 1;
                    s.last_error = Some(why.clone());
                    // Its tools stay offered while it is down (calls fail at
                    // once): a list that changes under a conversation breaks
                    // the provider's prompt cache and the model's plan.
                    s.slot.set(None, Some(why));
                    s.generation += 1;
                    if idle {
                        s.phase = Phase::Idle;
                    } else {
                        let wait = s.backoff();
                        s.attempt += 1;
                        s.phase = Phase::Backoff {
                            until: Instant::now() + wait,
                        };
                        let (name, generation) = (name.clone(), s.generation);
                        myself.send_after(wait, move || McpMsg::Retry { name, generation });
                    }
                }
            }
            McpMsg::Retry { name, generation } => {
                if state.servers.get(&name).is_some_and(|s| {
                    s.generation == generation && matches!(s.phase, Phase::Backoff { .. })
                }) {
                    start(&myself, state, &name);
                }
            }
            McpMsg::ListChanged { name, generation } => {
                if let Some(s) = state.servers.get(&name)
                    && s.generation == generation
                    && let Phase::Running { peer, .. } = &s.phase
                {
                    let (peer, me, wait) =
                        (peer.clone(), myself.clone(), s.spec.entry.startup_timeout);
                    tokio::spawn(async move {
                        let result = match tokio::time::timeout(wait, peer.list_all_tools()).await {
                            Ok(Ok(t)) => Ok(t),
                            Ok(Err(e)) => Err(conn::call_error(&e)),
                            Err(_) => Err("it did not list its tools in time".into()),
                        };
                        let _ = me.cast(McpMsg::Listed {
                            name,
                            generation,
                            result,
                        });
                    });
                }
            }
            McpMsg::Listed {
                name,
                generation,
                result,
            } => {
                let (epoch, last_use) = (state.shared.epoch, state.shared.last_use.clone());
                if let Some(s) = state.servers.get_mut(&name)
                    && s.generation == generation
                {
                    match result {
                        Ok(tools) => {
                            tracing::info!(server = %name, tools = tools.len(), "MCP server's tool list changed");
                            adopt_tools(s, tools, epoch, last_use);
                        }
                        Err(e) => {
                            s.last_error = Some(format!(
                                "listing its changed tools failed: {}",
                                s.spec.scrub(&e)
                            ))
                        }
                    }
                }
            }
            McpMsg::IdleCheck => {
                if state.shared.idle_for() >= state.shared.idle_timeout() {
                    for (name, s) in state.servers.iter_mut() {
                        if matches!(s.phase, Phase::Running { .. } | Phase::Backoff { .. })
                            && !s.slot.busy()
                        {
                            tracing::info!(server = %name, "stopping idle MCP server");
                            s.stop(Phase::Idle);
                        }
                    }
                }
            }
        }
        publish(state);
        Ok(())
    }
}

fn unknown(name: &str, state: &McpState) -> Reject {
    let names: Vec<&str> = state.servers.keys().map(String::as_str).collect();
    let message = if names.is_empty() {
        format!(
            "no MCP server named `{name}`: none is configured ([mcp.servers.NAME] in the config)"
        )
    } else {
        format!(
            "no MCP server named `{name}`: the configured ones are {}",
            names.join(", ")
        )
    };
    Reject::new(ErrorCode::NotFound, message)
}

/// Starts server `name` in a task; the result comes back as `Started`.
fn start(myself: &ActorRef<McpMsg>, state: &mut McpState, name: &str) {
    let Some(host) = state.shared.host() else {
        return;
    };
    let Some(s) = state.servers.get_mut(name) else {
        return;
    };
    s.generation += 1;
    s.phase = Phase::Starting;
    let (generation, spec, me) = (s.generation, s.spec.clone(), myself.clone());
    let name = name.to_string();
    let notify = {
        let (me, name) = (me.clone(), name.clone());
        Arc::new(move || {
            let _ = me.cast(McpMsg::ListChanged {
                name: name.clone(),
                generation,
            });
        })
    };
    let reconnects = s.reconnects.clone();
    tracing::info!(server = %name, "starting MCP server");
    tokio::spawn(async move {
        let result = conn::connect(
            &spec,
            &host,
            Handler {
                list_changed: notify,
            },
            reconnects,
        )
        .await
        .map(Box::new)
        // Whatever a failure quotes (a URL, the server's stderr) goes
        // through the one place that knows the entry's secrets.
        .map_err(|e| spec.scrub(&e));
        let _ = me.cast(McpMsg::Started {
            name,
            generation,
            result,
        });
    });
}

fn started(
    myself: &ActorRef<McpMsg>,
    state: &mut McpState,
    name: String,
    generation: u64,
    result: Result<Box<Connected>, String>,
) {
    let (epoch, last_use, life) = (
        state.shared.epoch,
        state.shared.last_use.clone(),
        state.life.clone(),
    );
    let Some(s) = state.servers.get_mut(&name) else {
        return;
    };
    if s.generation != generation || !matches!(s.phase, Phase::Starting) {
        // Stopped or restarted meanwhile: dropping it ends it.
        return;
    }
    match result {
        Err(e) => {
            tracing::warn!(server = %name, "MCP server failed to start: {e}");
            let wait = s.backoff();
            s.attempt += 1;
            s.last_error = Some(e.clone());
            s.slot.set(None, Some(e));
            s.phase = Phase::Failed {
                after: Instant::now() + wait,
            };
        }
        Ok(connected) => {
            let Connected {
                service,
                process,
                tools,
                protocol,
                task_tools,
            } = *connected;
            s.task_tools = task_tools;
            let peer = service.peer().clone();
            let stop = life.child_token();
            s.protocol = Some(protocol);
            s.last_error = None;
            s.slot.set(Some(peer.clone()), None);
            adopt_tools(s, tools, epoch, last_use);
            tracing::info!(server = %name, tools = s.tools.len(), "MCP server is running");
            s.phase = Phase::Running {
                stop: stop.clone(),
                peer,
                since: Instant::now(),
            };
            let me = myself.clone();
            tokio::spawn(async move {
                let why = watch(service, process, stop).await;
                if let Some(why) = why {
                    let _ = me.cast(McpMsg::Ended {
                        name,
                        generation,
                        why,
                    });
                }
            });
        }
    }
}

/// Waits for a connection to end (`Some(why)`) or to be stopped (`None`);
/// either way its process is gone after.
async fn watch(
    service: conn::Service,
    mut process: Option<super::stdio::ServerProcess>,
    stop: CancellationToken,
) -> Option<String> {
    let token = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    let ended = tokio::select! {
        _ = stop.cancelled() => {
            token.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(2), &mut waiting).await;
            false
        }
        _ = &mut waiting => true,
    };
    if !ended {
        return None;
    }
    let mut why = "the connection closed".to_string();
    if let Some(p) = process.as_mut() {
        if let Some(status) = p.settle().await {
            why = format!("it exited ({status})");
        }
        let more = p.explain();
        if !more.is_empty() {
            why.push_str(&format!("; {more}"));
        }
    }
    Some(why)
}

/// Takes a server's tool list: the allowed ones with usable schemas
/// become session tools; the rest are noted in `problems`.
fn adopt_tools(s: &mut Server, tools: Vec<rmcp::model::Tool>, epoch: Instant, last_use: LastUse) {
    let mut out: Vec<Arc<McpTool>> = Vec::new();
    let mut problems = Vec::new();
    for t in tools {
        let remote = t.name.to_string();
        if !s.spec.tool_allowed(&remote) {
            continue;
        }
        if s.task_tools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&remote)
        {
            problems.push(format!(
                "tool `{remote}` is left out: it only runs as an MCP task (execution.taskSupport = \"required\"), which flytod does not support; a server option to run it directly would make it usable"
            ));
            continue;
        }
        if let Err(e) = check_schema(&t.input_schema) {
            problems.push(format!(
                "tool `{remote}` is left out: its input schema is not valid JSON Schema ({e})"
            ));
            continue;
        }
        let name = model_name(&s.spec.name, &remote);
        if out.iter().any(|o| o.model_name == name) {
            problems.push(format!(
                "tool `{remote}` is left out: its name clashes with another tool as `{name}`"
            ));
            continue;
        }
        let schema = serde_json::Value::Object((*t.input_schema).clone()).to_string();
        out.push(Arc::new(McpTool {
            model_name: name,
            server: s.spec.name.clone(),
            remote_name: remote,
            description: t
                .description
                .as_deref()
                .filter(|d| !d.trim().is_empty())
                .unwrap_or("(the server gives no description)")
                .to_string(),
            schema,
            read_only: t
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false),
            call_timeout: s.spec.entry.call_timeout,
            max_result_bytes: s.spec.entry.max_result_bytes,
            slot: s.slot.clone(),
            last_use: last_use.clone(),
            epoch,
        }));
    }
    for p in &problems {
        tracing::warn!(server = %s.spec.name, "{p}");
    }
    s.tools = out;
    s.problems = problems;
}

fn reconfigure(myself: &ActorRef<McpMsg>, state: &mut McpState) {
    let specs = state.shared.specs();
    let wanted: BTreeMap<&str, &ServerSpec> = specs.iter().map(|s| (s.name.as_str(), s)).collect();
    let gone: Vec<String> = state
        .servers
        .keys()
        .filter(|n| !wanted.contains_key(n.as_str()))
        .cloned()
        .collect();
    for name in gone {
        if let Some(mut s) = state.servers.remove(&name) {
            tracing::info!(server = %name, "MCP server removed from the config");
            s.stop(Phase::Disabled);
        }
    }
    for (name, spec) in wanted {
        match state.servers.get_mut(name) {
            Some(s) if s.spec.entry == spec.entry => {}
            Some(s) => {
                let was_up = matches!(
                    s.phase,
                    Phase::Running { .. } | Phase::Starting | Phase::Backoff { .. }
                );
                tracing::info!(server = %name, "MCP server's config changed");
                let mut fresh = Server::new(spec.clone());
                fresh.generation = s.generation + 1;
                fresh.slot = s.slot.clone();
                fresh.slot.set_secrets(spec.scrubber());
                s.stop(Phase::Idle);
                *s = fresh;
                if was_up && s.spec.entry.enabled {
                    start(myself, state, name);
                }
            }
            None => {
                state
                    .servers
                    .insert(name.to_string(), Server::new(spec.clone()));
            }
        }
    }
}

fn view(s: &Server) -> McpServerView {
    McpServerView {
        name: s.spec.name.clone(),
        transport: s.spec.describe(),
        enabled: s.spec.entry.enabled,
        state: match s.phase {
            Phase::Backoff { until } => format!(
                "restarting (in {}s)",
                until.saturating_duration_since(Instant::now()).as_secs() + 1
            ),
            _ => s.state_name().into(),
        },
        tools: s.tools.len() as u32,
        last_error: {
            let reconnects = s.reconnects.load(Ordering::Relaxed);
            let note = (reconnects > 0).then(|| {
                format!(
                    "reconnected {reconnects} time(s): the server no longer knew flytod's session (it restarted?), so a new session was started and the call sent again"
                )
            });
            match (s.last_error.clone(), note) {
                (Some(e), Some(n)) => Some(format!("{e}; {n}")),
                (e, n) => e.or(n),
            }
        },
        problems: s.problems.clone(),
        restarts: s.restarts,
        protocol: s.protocol.clone(),
    }
}

fn publish(state: &McpState) {
    let mut snap = Snapshot::default();
    for (name, s) in &state.servers {
        // A server that is down keeps its last tools (calls fail at once).
        snap.tools
            .extend(s.tools.iter().map(|t| t.clone() as Arc<dyn Tool>));
        match s.phase {
            Phase::Running { .. } => {}
            Phase::Starting => snap.starting.push(name.clone()),
            Phase::Failed { .. } | Phase::Backoff { .. } => snap.failed.push((
                name.clone(),
                s.last_error.clone().unwrap_or_else(|| "down".into()),
            )),
            Phase::Idle | Phase::Disabled => {}
        }
    }
    state.shared.snapshot.send_replace(Arc::new(snap));
}
