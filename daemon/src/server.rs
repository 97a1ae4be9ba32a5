//! Connections on the control socket: peer check, encoding sniff, framing,
//! the handshake, and dispatch of requests to the plan reader or the
//! scheduler. Only this module knows about connections.

use crate::plan_reads::{PlanReads, StoreInfo};
use flyto_actors::compaction::breaker::{BREAKER_NAME, BreakerMsg};
use flyto_actors::plans::{EarlyReply, Origin, Reject, SCHEDULER_NAME, SchedulerMsg};
use flyto_actors::session::{ManagerMsg, SESSION_MANAGER_NAME, SessionMsg, Subscription};
use flyto_actors::tools::bash::SharedPolicy;
use flyto_protocol::SessionEvent;
use flyto_protocol::framing::{self, FrameError, nonblocking};
use flyto_protocol::{
    BrokenSkillView, DaemonStats, ErrorCode, Event, MAX_FRAME, PROTOCOL_VERSION, PolicyCheckView,
    Request, Response, SkillView, Verdict,
};
use ractor::ActorRef;
use ractor::rpc::CallResult;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::Semaphore;
use tokio::sync::broadcast;

pub const DAEMON_VERSION: &str = env!("CARGO_PKG_VERSION");

pub struct Ctx {
    /// Swapped once, when the shared store is joined (see `PlanReads`).
    pub plans: std::sync::RwLock<Arc<PlanReads>>,
    /// Where plans are kept, the node id and its peers (shared store).
    pub store: std::sync::RwLock<Arc<StoreInfo>>,
    pub draining: AtomicBool,
    /// Until the rooms have started (on the shared store the socket
    /// answers before): only `hello`, `ping` and `stats` are served.
    pub starting: AtomicBool,
    pub started: Instant,
    pub restarts: Arc<AtomicU64>,
    /// Requests waiting on the scheduler; bounded so overload is an answer,
    /// not a growing queue.
    pub inflight: Semaphore,
    pub connections: Arc<Semaphore>,
    pub uid: u32,
    /// The `bash` tool's policy, swapped on reload: `policy_check` reads
    /// the same one.
    pub policy: SharedPolicy,
    /// The skills every session sees; `skill_*` read and reload it.
    pub skills: Arc<flyto_actors::skills::SkillRegistry>,
    /// The memory room's way in, for the `memory_*` requests.
    pub memory: flyto_actors::memory::Memory,
    pub clock: Arc<dyn flyto_actors::Clock>,
    /// Streams of a run's events still being written to their clients.
    pub run_streams: Arc<RunStreams>,
    /// The hooks sessions run, for `hook_list`.
    pub hooks: Arc<flyto_actors::hooks::Hooks>,
    /// The MCP room's way in, for the `mcp_*` requests.
    pub mcp: flyto_actors::mcp::McpHandle,
}

impl Ctx {
    pub fn plans(&self) -> Arc<PlanReads> {
        self.plans.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn store(&self) -> Arc<StoreInfo> {
        self.store.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Counts the connections still writing a run's events.
#[derive(Debug, Default)]
pub struct RunStreams {
    open: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

pub struct RunStream<'a>(&'a RunStreams);

impl Drop for RunStream<'_> {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl RunStreams {
    pub fn enter(&self) -> RunStream<'_> {
        self.open.fetch_add(1, Ordering::SeqCst);
        RunStream(self)
    }

    /// Waits until no run's events are being written, at most `limit`.
    pub async fn wait_idle(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, async {
            loop {
                let idle = self.idle.notified();
                if self.open.load(Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        })
        .await;
    }
}

/// What a scoped plan socket may see: the plans of one chain, submitting
/// one level deeper than its owner (a plan or a session).
#[derive(Debug, Clone)]
pub struct Scope {
    pub owner: String,
    pub chain: String,
    pub depth: u32,
    /// The socket's path, as given in `FLYTO_PLAN_SOCK`.
    pub socket: String,
    /// The owner's confinement: plans submitted here keep it.
    pub sandbox: Option<flyto_actors::tools::sandbox::SandboxSpec>,
}

impl Scope {
    /// Where a plan submitted through this socket goes: one level deeper.
    fn child(&self) -> Origin {
        Origin {
            chain: self.chain.clone(),
            depth: self.depth + 1,
            sandbox: self.sandbox.clone(),
        }
    }

    /// Refuses what a scoped socket does not serve.
    async fn check(&self, req: &Request, ctx: &Ctx) -> Result<(), Reject> {
        let id = match req {
            Request::Hello { .. }
            | Request::Ping {}
            | Request::SubmitPlan { .. }
            | Request::PlanList { .. } => return Ok(()),
            Request::PlanStatus { id }
            | Request::PlanWatch { id }
            | Request::PlanCancel { id }
            | Request::PlanRestart { id }
            | Request::PlanRemove { id } => id,
            other => {
                return Err(Reject::new(
                    ErrorCode::PermissionDenied,
                    format!(
                        "{} is not served here: this socket ({}'s FLYTO_PLAN_SOCK) serves plan requests only (submit_plan, plan_status, plan_watch, plan_cancel, plan_list, plan_restart, plan_remove, ping)",
                        other.op(),
                        self.owner
                    ),
                ));
            }
        };
        match ctx.plans().status(id).await {
            Ok(plan) if plan.chain == self.chain => Ok(()),
            Ok(_) => Err(Reject::new(
                ErrorCode::NotFound,
                format!(
                    "no plan `{id}` in chain {}: this socket sees only the plans of its own chain",
                    self.chain
                ),
            )),
            Err(r) => Err(r),
        }
    }
}

pub async fn serve(listener: tokio::net::UnixListener, ctx: Arc<Ctx>, scope: Option<Arc<Scope>>) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ctx = ctx.clone();
        let scope = scope.clone();
        tokio::spawn(async move {
            let permit = ctx.connections.clone().try_acquire_owned();
            if let Err(e) = connection(stream, &ctx, permit.is_ok(), scope).await {
                tracing::debug!("connection ended: {e}");
            }
        });
    }
}

enum Mode {
    Binary,
    Json,
}

struct Sink {
    /// Shared with early replies (see [`EarlySubmit`]); every write goes
    /// through `&OwnedWriteHalf`.
    w: Arc<OwnedWriteHalf>,
    mode: Mode,
    scope: Option<Arc<Scope>>,
}

impl Sink {
    async fn send(&mut self, resp: &Response) -> Result<(), FrameError> {
        match self.mode {
            Mode::Binary => Ok(write_all(&self.w, &framing::frame(resp)?).await?),
            Mode::Json => Ok(write_all(&self.w, &framing::json_line(resp)?).await?),
        }
    }

    async fn error(
        &mut self,
        code: ErrorCode,
        message: impl Into<String>,
    ) -> Result<(), FrameError> {
        self.send(&Response::error(code, message)).await
    }
}

async fn connection(
    stream: UnixStream,
    ctx: &Ctx,
    admitted: bool,
    scope: Option<Arc<Scope>>,
) -> Result<(), FrameError> {
    let peer = stream.peer_cred().ok();
    let (r, w) = stream.into_split();
    let mut r = BufReader::new(r);
    let mut first = [0u8; 1];
    if r.read(&mut first).await? == 0 {
        return Ok(());
    }
    let mode = if framing::starts_json_line(first[0]) {
        Mode::Json
    } else {
        Mode::Binary
    };
    let mut sink = Sink {
        w: Arc::new(w),
        mode,
        scope,
    };
    let peer_uid = peer.map(|c| c.uid());
    if peer_uid != Some(ctx.uid) && peer_uid != Some(0) {
        tracing::warn!(
            peer_uid = ?peer_uid,
            peer_pid = ?peer.and_then(|c| c.pid()),
            "refused a connection from another user"
        );
        return sink
            .error(
                ErrorCode::PermissionDenied,
                format!(
                    "flytod serves only uid {} (and root); connect as that user",
                    ctx.uid
                ),
            )
            .await;
    }
    // Only the main socket: a scoped one is where confined processes belong.
    if sink.scope.is_none()
        && let Some(message) = crate::peer::refusal(peer.and_then(|c| c.pid()))
    {
        return sink.error(ErrorCode::PermissionDenied, message).await;
    }
    if let Some(scope) = &sink.scope
        && let Some(message) =
            crate::peer::scoped_refusal(peer.and_then(|c| c.pid()), &scope.socket)
    {
        return sink.error(ErrorCode::PermissionDenied, message).await;
    }
    if !admitted {
        return sink
            .error(
                ErrorCode::Unavailable,
                "flytod has too many open connections: retry shortly",
            )
            .await;
    }
    match sink.mode {
        Mode::Json => json_loop(r, first[0], &mut sink, ctx).await,
        Mode::Binary => binary_loop(r, first[0], &mut sink, ctx).await,
    }
}

async fn binary_loop(
    mut r: BufReader<tokio::net::unix::OwnedReadHalf>,
    first: u8,
    sink: &mut Sink,
    ctx: &Ctx,
) -> Result<(), FrameError> {
    let mut first = Some(first);
    let mut greeted = false;
    loop {
        let bytes = match nonblocking::read_frame_bytes(&mut r, first.take()).await {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(()),
            Err(e @ FrameError::TooLarge { .. }) => {
                return sink.error(ErrorCode::TooLarge, e.to_string()).await;
            }
            Err(e @ FrameError::Truncated { .. }) => {
                return sink.error(ErrorCode::BadRequest, e.to_string()).await;
            }
            Err(e) => return Err(e),
        };
        let req: Request = match framing::decode(&bytes) {
            Ok(req) => req,
            Err(e) => {
                sink.error(
                    ErrorCode::BadRequest,
                    format!("{e}: not a request of flyto protocol {PROTOCOL_VERSION}; is the client up to date?"),
                )
                .await?;
                continue;
            }
        };
        if !greeted {
            match req {
                Request::Hello { protocol, .. } if protocol == PROTOCOL_VERSION => {
                    greeted = true;
                    sink.send(&Response::Welcome {
                        protocol: PROTOCOL_VERSION,
                        daemon_version: DAEMON_VERSION.into(),
                    })
                    .await?;
                }
                Request::Hello { protocol, .. } => {
                    return sink
                        .error(
                            ErrorCode::ProtocolMismatch,
                            format!(
                                "the client speaks protocol {protocol} but flytod {DAEMON_VERSION} speaks protocol {PROTOCOL_VERSION}: install matching versions of flytoctl and flytod"
                            ),
                        )
                        .await;
                }
                other => {
                    return sink
                        .error(
                            ErrorCode::BadRequest,
                            format!(
                                "the first message must be hello {{protocol, client}}, got {}",
                                other.op()
                            ),
                        )
                        .await;
                }
            }
            continue;
        }
        dispatch(req, sink, ctx).await?;
    }
}

async fn json_loop(
    mut r: BufReader<tokio::net::unix::OwnedReadHalf>,
    first: u8,
    sink: &mut Sink,
    ctx: &Ctx,
) -> Result<(), FrameError> {
    let mut line = vec![first];
    loop {
        let mut limited = (&mut r).take(MAX_FRAME as u64 + 1);
        let n = limited.read_until(b'\n', &mut line).await?;
        if line.len() > MAX_FRAME {
            return sink
                .error(
                    ErrorCode::TooLarge,
                    format!("request line longer than the maximum of {MAX_FRAME} bytes"),
                )
                .await;
        }
        if n == 0 && line.is_empty() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        if !text.is_empty() {
            match serde_json::from_str::<Request>(text) {
                Ok(Request::Hello { protocol, .. }) if protocol != PROTOCOL_VERSION => {
                    return sink
                        .error(
                            ErrorCode::ProtocolMismatch,
                            format!("the client speaks protocol {protocol} but flytod {DAEMON_VERSION} speaks protocol {PROTOCOL_VERSION}"),
                        )
                        .await;
                }
                Ok(Request::Hello { .. }) => {
                    sink.send(&Response::Welcome {
                        protocol: PROTOCOL_VERSION,
                        daemon_version: DAEMON_VERSION.into(),
                    })
                    .await?;
                }
                Ok(req) => dispatch(req, sink, ctx).await?,
                Err(e) => {
                    sink.error(
                        ErrorCode::BadRequest,
                        format!("malformed JSON request: {e}; send one object per line, like {{\"ping\":{{}}}}"),
                    )
                    .await?;
                }
            }
        }
        if n == 0 {
            return Ok(());
        }
        line.clear();
    }
}

fn scheduler() -> Result<ActorRef<SchedulerMsg>, Reject> {
    ractor::registry::where_is(SCHEDULER_NAME.into())
        .map(ActorRef::from)
        .ok_or_else(|| {
            Reject::new(
                ErrorCode::Unavailable,
                "the scheduler is restarting: retry in a moment",
            )
        })
}

/// Sends a message built around a reply port and waits for the answer.
async fn ask<T: Send + 'static>(
    ctx: &Ctx,
    build: impl FnOnce(ractor::RpcReplyPort<Result<T, Reject>>) -> SchedulerMsg,
) -> Result<T, Reject> {
    call_actor(ctx, &scheduler()?, build).await?
}

fn session_manager() -> Result<ActorRef<ManagerMsg>, Reject> {
    ractor::registry::where_is(SESSION_MANAGER_NAME.into())
        .map(ActorRef::from)
        .ok_or_else(|| {
            Reject::new(
                ErrorCode::Unavailable,
                "the session manager is restarting: retry in a moment",
            )
        })
}

/// Asks an actor and waits; a stopped actor or a timeout is an answer too.
async fn call_actor<M: Send + 'static, T: Send + 'static>(
    ctx: &Ctx,
    actor: &ActorRef<M>,
    build: impl FnOnce(ractor::RpcReplyPort<T>) -> M,
) -> Result<T, Reject> {
    let _permit = ctx.inflight.try_acquire().map_err(|_| {
        Reject::new(
            ErrorCode::Unavailable,
            "flytod is overloaded (too many requests in flight): retry shortly",
        )
    })?;
    match actor.call(build, Some(Duration::from_secs(120))).await {
        Ok(CallResult::Success(answer)) => Ok(answer),
        Ok(CallResult::Timeout) => Err(Reject::new(
            ErrorCode::Internal,
            "flytod did not answer within 120 s; see the daemon log",
        )),
        Ok(CallResult::SenderError) | Err(_) => Err(Reject::new(
            ErrorCode::Unavailable,
            "the actor stopped while handling the request: retry in a moment",
        )),
    }
}

async fn session_call<T: Send + 'static>(
    ctx: &Ctx,
    build: impl FnOnce(ractor::RpcReplyPort<Result<T, Reject>>) -> ManagerMsg,
) -> Result<T, Reject> {
    call_actor(ctx, &session_manager()?, build).await?
}

async fn breaker_call<T: Send + 'static>(
    ctx: &Ctx,
    build: impl FnOnce(ractor::RpcReplyPort<T>) -> BreakerMsg,
) -> Result<T, Reject> {
    let breaker = ractor::registry::where_is(BREAKER_NAME.into())
        .map(ActorRef::from)
        .ok_or_else(|| {
            Reject::new(
                ErrorCode::Unavailable,
                "the compaction breaker is restarting: retry in a moment",
            )
        })?;
    call_actor(ctx, &breaker, build).await
}

async fn session_actor(ctx: &Ctx, id: &str) -> Result<ActorRef<SessionMsg>, Reject> {
    let id = id.to_string();
    session_call(ctx, |reply| ManagerMsg::Get { id, reply }).await
}

async fn session_cancel(id: &str, ctx: &Ctx) -> Result<Response, Reject> {
    let actor = session_actor(ctx, id).await?;
    let session = call_actor(ctx, &actor, |reply| SessionMsg::Cancel { reply }).await?;
    Ok(Response::Session { session })
}

/// How often a half-closed attached client is checked for a hang-up.
const HANGUP_CHECK: Duration = Duration::from_secs(5);

/// Resolves once the client hangs up or sends anything. A client that only
/// shut down its sending side (a script piping one request into `socat`)
/// still wants the events: from then on only a full hang-up, checked every
/// [`HANGUP_CHECK`] (a failed write ends it sooner), ends the stream.
async fn peer_done(sink: &Sink) {
    use std::os::fd::AsRawFd;
    let stream: &UnixStream = (*sink.w).as_ref();
    let fd = stream.as_raw_fd();
    loop {
        if stream.readable().await.is_err() {
            return;
        }
        let mut byte = 0u8;
        // SAFETY: a one-byte peek into a local buffer on a socket we own.
        let n = unsafe {
            libc::recv(
                fd,
                (&mut byte as *mut u8).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n > 0 {
            return;
        }
        if n == 0 {
            if hung_up(fd) {
                return;
            }
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::WouldBlock {
            return;
        }
    }
    // Half-closed: the socket stays readable (at end of file), so waiting
    // for readiness would spin.
    loop {
        tokio::time::sleep(HANGUP_CHECK).await;
        if hung_up(fd) {
            return;
        }
    }
}

/// Whether the peer closed both directions (a half-close is not a hang-up).
fn hung_up(fd: std::os::fd::RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one pollfd on the stack for a socket we own; no waiting.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n < 0 || p.revents & (libc::POLLHUP | libc::POLLERR) != 0
}

/// Streams a subscription's events; with `until_run_end`, stops after the
/// event that ends a run.
async fn forward_events(
    id: &str,
    mut sub: Subscription,
    until_run_end: bool,
    sink: &mut Sink,
) -> Result<(), FrameError> {
    loop {
        let next = tokio::select! {
            next = sub.rx.recv() => next,
            // An attached client stays until it disconnects: a hang-up (or
            // any input) ends the stream, so its receiver cannot linger. A
            // send's stream ends with its run anyway.
            _ = peer_done(sink), if !until_run_end => return Ok(()),
        };
        match next {
            Ok((seq, event)) => {
                let ends = event.ends_run();
                sink.send(&Response::Event {
                    seq,
                    event: Event::Session {
                        session: id.to_string(),
                        event,
                    },
                })
                .await?;
                if ends && until_run_end {
                    break;
                }
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                sink.send(&Response::Event {
                    seq: 0,
                    event: Event::Session {
                        session: id.to_string(),
                        event: SessionEvent::Notice {
                            message: format!(
                                "this client fell behind and missed {n} events; `flytoctl session_history {id}` has the stored transcript"
                            ),
                        },
                    },
                })
                .await?;
            }
            Err(broadcast::error::RecvError::Closed) => break,
        }
    }
    sink.send(&Response::End {}).await
}

/// One request to a session actor that answers a view.
async fn session_request(
    ctx: &Ctx,
    id: &str,
    build: impl FnOnce(ractor::RpcReplyPort<Result<flyto_protocol::SessionView, Reject>>) -> SessionMsg,
) -> Result<Response, Reject> {
    let actor = session_actor(ctx, id).await?;
    let session = call_actor(ctx, &actor, build).await??;
    Ok(Response::Session { session })
}

/// A run's events until it ends: `Some((text, can_approve))` sends a
/// message, `None` only compacts.
async fn session_send(
    id: &str,
    text: Option<(String, bool)>,
    sink: &mut Sink,
    ctx: &Ctx,
) -> Result<(), FrameError> {
    if ctx.draining.load(Ordering::SeqCst) {
        return sink
            .error(
                ErrorCode::Unavailable,
                "flytod is shutting down: send the message again once it has restarted",
            )
            .await;
    }
    let sub = match session_actor(ctx, id).await {
        Ok(actor) => call_actor(ctx, &actor, |reply| match text {
            Some((text, can_approve)) => SessionMsg::Send {
                text,
                can_approve,
                once: false,
                reply,
                job: None,
            },
            None => SessionMsg::Compact { reply },
        })
        .await
        .and_then(|r| r),
        Err(r) => Err(r),
    };
    match sub {
        Ok(sub) => {
            // Counted until its last event is written: a shutdown waits for
            // that, so the client hears how its run ended.
            let _streaming = ctx.run_streams.enter();
            forward_events(id, sub, true, sink).await
        }
        Err(r) => sink.error(r.code, r.message).await,
    }
}

async fn session_attach(
    id: &str,
    (recent, can_approve): (u32, bool),
    sink: &mut Sink,
    ctx: &Ctx,
) -> Result<(), FrameError> {
    let snapshot = match session_actor(ctx, id).await {
        Ok(actor) => call_actor(ctx, &actor, |reply| SessionMsg::Attach {
            recent: u64::from(recent),
            can_approve,
            reply,
        })
        .await
        .and_then(|r| r),
        Err(r) => Err(r),
    };
    match snapshot {
        Ok((session, messages, sub)) => {
            sink.send(&Response::History {
                session,
                messages,
                summary: None,
                extractions: Vec::new(),
            })
            .await?;
            forward_events(id, sub, false, sink).await
        }
        Err(r) => sink.error(r.code, r.message).await,
    }
}

async fn dispatch(req: Request, sink: &mut Sink, ctx: &Ctx) -> Result<(), FrameError> {
    if let Some(scope) = &sink.scope
        && let Err(r) = scope.check(&req, ctx).await
    {
        return sink.error(r.code, r.message).await;
    }
    if ctx.starting.load(Ordering::Acquire)
        && !matches!(
            req,
            Request::Hello { .. } | Request::Ping {} | Request::Stats {}
        )
    {
        let r = crate::plan_reads::joining();
        return sink.error(r.code, r.message).await;
    }
    let answer = match req {
        Request::Hello { .. } => Ok(Response::Welcome {
            protocol: PROTOCOL_VERSION,
            daemon_version: DAEMON_VERSION.into(),
        }),
        Request::Ping {} => Ok(Response::Pong {
            daemon_version: DAEMON_VERSION.into(),
            pid: std::process::id(),
            uptime_ms: ctx.started.elapsed().as_millis() as u64,
        }),
        Request::Stats {} => stats(ctx).await,
        Request::SubmitPlan {
            plan,
            idempotency_key,
        } => {
            if ctx.draining.load(Ordering::SeqCst) {
                Err(Reject::new(
                    ErrorCode::Unavailable,
                    "flytod is shutting down: submit the plan again once it has restarted",
                ))
            } else if idempotency_key
                .as_deref()
                .is_some_and(|k| flyto_actors::plans::model::job_of_key(k).is_some())
            {
                // Such a key marks a job's run (no schedule tools): a client
                // may not borrow it.
                Err(Reject::new(
                    ErrorCode::BadRequest,
                    "idempotency keys of the form `job jN at <ms>` are the jobs' own: choose another key",
                ))
            } else {
                let origin = sink.scope.as_deref().map(Scope::child);
                // Among many writers the answer is not written early.
                let early = (matches!(sink.mode, Mode::Binary) && !flyto_actors::store::crowded())
                    .then(|| EarlySubmit::new(&sink.w));
                let answer = ask(ctx, |reply| SchedulerMsg::Submit {
                    plan,
                    idempotency_key,
                    origin,
                    reply,
                    early: early.as_ref().map(EarlySubmit::reply),
                })
                .await;
                if let Some(rest) = early.and_then(|e| e.finish()) {
                    return Ok(write_all(&sink.w, &rest).await?);
                }
                answer.map(|(id, duplicate)| Response::PlanSubmitted { id, duplicate })
            }
        }
        Request::PlanStatus { id } => ctx
            .plans()
            .status(&id)
            .await
            .map(|plan| Response::Plan { plan }),
        Request::PlanList { state, limit } => {
            let limit = limit.unwrap_or(50).clamp(1, 10_000) as usize;
            let reads = ctx.plans();
            match &sink.scope {
                None => match reads.list(state, limit).await {
                    Ok(plans) => reads
                        .total(state)
                        .await
                        .map(|total| Response::Plans { plans, total }),
                    Err(r) => Err(r),
                },
                // A chain is small; look further back and keep its plans.
                Some(scope) => reads.list(state, 10_000).await.map(|all| {
                    let mut plans: Vec<_> =
                        all.into_iter().filter(|p| p.chain == scope.chain).collect();
                    let total = plans.len() as u64;
                    plans.truncate(limit);
                    Response::Plans { plans, total }
                }),
            }
        }
        Request::PlanCancel { id } => ask(ctx, |reply| SchedulerMsg::Cancel { id, reply })
            .await
            .map(|c| Response::PlanCancelled {
                id: c.id,
                state: c.state,
                already_finished: c.already_finished,
            }),
        Request::PlanRestart { id } => {
            let origin = sink.scope.as_deref().map(Scope::child);
            ask(ctx, |reply| SchedulerMsg::Restart { id, origin, reply })
                .await
                .map(|id| Response::PlanSubmitted {
                    id,
                    duplicate: false,
                })
        }
        Request::PlanRemove { id } => ask(ctx, |reply| SchedulerMsg::Remove { id, reply })
            .await
            .map(|id| Response::PlanRemoved { id }),
        Request::PlanWatch { id } => return watch(&id, sink, ctx).await,
        Request::SessionNew {
            name,
            workdir,
            model,
            sandbox,
            network,
        } => {
            // Refused here as well as in the manager: the manager hears of
            // the drain a moment after requests start being refused.
            let profile = sandbox
                .as_deref()
                .map(flyto_actors::tools::sandbox::Profile::parse)
                .transpose();
            if ctx.draining.load(Ordering::SeqCst) {
                Err(Reject::new(
                    ErrorCode::Unavailable,
                    "flytod is shutting down: create the session again once it has restarted",
                ))
            } else {
                match profile {
                    Err(m) => Err(Reject::new(ErrorCode::BadRequest, m)),
                    Ok(profile) => session_call(ctx, |reply| ManagerMsg::New {
                        name,
                        workdir,
                        model,
                        chain: None,
                        sandbox: flyto_actors::session::SessionSandbox {
                            profile,
                            network,
                            write_roots: None,
                        },
                        reply,
                    })
                    .await
                    .map(|session| Response::Session { session }),
                }
            }
        }
        Request::SessionSend {
            id,
            text,
            can_approve,
        } => {
            return session_send(&id, Some((text, can_approve)), sink, ctx).await;
        }
        Request::SessionCompact { id } => return session_send(&id, None, sink, ctx).await,
        Request::SessionAttach {
            id,
            recent,
            can_approve,
        } => {
            return session_attach(&id, (recent.unwrap_or(20), can_approve), sink, ctx).await;
        }
        Request::SessionCancel { id } => session_cancel(&id, ctx).await,
        Request::SessionList {} => session_call(ctx, |reply| ManagerMsg::List { reply })
            .await
            .map(|sessions| Response::Sessions { sessions }),
        Request::SessionHistory { id } => {
            session_call(ctx, |reply| ManagerMsg::History { id, reply })
                .await
                .map(
                    |(session, messages, summary, extractions)| Response::History {
                        session,
                        messages,
                        summary,
                        extractions,
                    },
                )
        }
        Request::SessionReset { id, soft } => {
            session_request(ctx, &id, |reply| SessionMsg::Reset { soft, reply }).await
        }
        Request::SessionSetModel { id, model } => {
            session_request(ctx, &id, |reply| SessionMsg::SetModel { model, reply }).await
        }
        Request::BreakerStatus {} => breaker_call(ctx, |reply| BreakerMsg::Status { reply })
            .await
            .map(|breakers| Response::Breakers { breakers }),
        Request::BreakerReset { project } => {
            breaker_call(ctx, |reply| BreakerMsg::Reset { project, reply })
                .await
                .and_then(|reset| reset)
                .map(|projects| Response::BreakersReset { projects })
        }
        Request::SessionDelete { id } => match session_actor(ctx, &id).await {
            Ok(actor) => call_actor(ctx, &actor, |reply| SessionMsg::Delete { reply })
                .await
                .and_then(|r| r)
                .map(|()| Response::SessionDeleted { id }),
            Err(r) => Err(r),
        },
        Request::SessionApprove {
            id,
            approval,
            allow,
        } => match session_actor(ctx, &id).await {
            Ok(actor) => call_actor(ctx, &actor, |reply| SessionMsg::Approve {
                approval,
                allow,
                reply,
            })
            .await
            .and_then(|r| r)
            .map(|()| Response::ApprovalAnswered { approval, allow }),
            Err(r) => Err(r),
        },
        Request::PolicyCheck { command, workdir } => policy_check(ctx, &command, &workdir),
        Request::HookList {} => Ok(hook_list(&ctx.hooks)),
        Request::McpList {} => ctx
            .mcp
            .list()
            .await
            .map(|servers| Response::McpServers { servers }),
        Request::McpTools { server } => ctx
            .mcp
            .tools_of(&server)
            .await
            .map(|tools| Response::McpTools { tools }),
        Request::McpRestart { server } => match ctx.mcp.restart(&server).await {
            Ok(()) => ctx.mcp.list().await.map(|all| Response::McpServers {
                servers: all.into_iter().filter(|s| s.name == server).collect(),
            }),
            Err(r) => Err(r),
        },
        Request::SkillList { workdir } => skill_set(ctx, "skill_list", &workdir).map(|set| {
            Response::Skills {
                skills: set.skills.values().map(|s| skill_view(&set, s)).collect(),
                broken: set
                    .broken
                    .iter()
                    .map(|b| BrokenSkillView {
                        file: b.file.clone(),
                        line: b.line as u64,
                        reason: b.reason.clone(),
                    })
                    .collect(),
            }
        }),
        Request::SkillShow { name, workdir } => {
            skill_set(ctx, "skill_show", &workdir).and_then(|set| match set.get(&name) {
                Some(skill) => Ok(Response::Skill {
                    skill: skill_view(&set, skill),
                    body: skill.parsed.body.clone(),
                }),
                None => Err(Reject::new(
                    ErrorCode::NotFound,
                    format!(
                        "no skill named `{name}` for {workdir}: `flytoctl skill_list --all` lists the skills and the broken ones"
                    ),
                )),
            })
        }
        Request::SkillReload { workdir } => {
            ctx.skills.reload();
            skill_set(ctx, "skill_reload", &workdir).map(|set| Response::SkillsReloaded {
                skills: set.skills.len() as u64,
                broken: set.broken.len() as u64,
            })
        }
        other => match crate::memory_api::handle(&ctx.memory, ctx.clock.now_ms(), &other).await {
            Some(answer) => answer,
            None => match crate::dream_api::handle(&ctx.memory.state_dir, &other).await {
                Some(answer) => answer,
                None => match crate::channel_api::handle(&other).await {
                  Some(answer) => answer,
                  None => match other {
                    Request::JobNext {
                        expr,
                        tz,
                        after,
                        count,
                    } => job_next(ctx, &expr, tz, after, count),
                    other @ (Request::JobCreate { .. }
                    | Request::JobUpdate { .. }
                    | Request::JobList {}
                    | Request::JobShow { .. }
                    | Request::JobPause { .. }
                    | Request::JobResume { .. }
                    | Request::JobDelete { .. }
                    | Request::JobRun { .. }) => {
                        // The jobs actor starts once the store is joined.
                        if matches!(*ctx.plans(), PlanReads::Joining) {
                            Err(crate::plan_reads::joining())
                        } else {
                            jobs_request(other).await
                        }
                    }
                    other => Err(Reject::new(
                        ErrorCode::BadRequest,
                        format!("`{}` is not served here", other.op()),
                    )),
                  },
                },
            },
        },
    };
    match answer {
        Ok(resp) => sink.send(&resp).await,
        Err(r) => sink.error(r.code, r.message).await,
    }
}

/// `policy_check`: the `bash` tool's own decision ([`Policy::check`] on the
/// live policy, in the workdir canonicalised as a session's is), run on
/// nothing.
///
/// [`Policy::check`]: flyto_actors::tools::policy::Policy::check
fn policy_check(ctx: &Ctx, command: &str, workdir: &str) -> Result<Response, Reject> {
    let dir = canonical_workdir("policy_check", workdir)?;
    let policy = ctx.policy.read().map(|p| p.clone()).map_err(|_| {
        Reject::new(
            ErrorCode::Internal,
            "policy_check: the permission policy is unavailable; restart flytod",
        )
    })?;
    let check = policy.check(command, &dir);
    let verdict = match check.verdict() {
        "deny" => Verdict::Deny,
        "ask" => Verdict::Ask,
        _ => Verdict::Allow,
    };
    Ok(Response::PolicyVerdict {
        check: PolicyCheckView {
            verdict,
            rule: check.rule_id(),
            reason: check.reason(),
            command: check.command().map(str::to_string),
            commands: check.commands.clone(),
            message: check.decision.message(),
            workdir: dir.display().to_string(),
        },
    })
}

/// The skills a session in `workdir` (absolute, canonicalised as a
/// session's is) sees.
fn skill_set(
    ctx: &Ctx,
    op: &str,
    workdir: &str,
) -> Result<Arc<flyto_actors::skills::SkillSet>, Reject> {
    Ok(ctx.skills.for_workdir(&canonical_workdir(op, workdir)?))
}

/// A request's `workdir`: absolute and existing, canonicalised as a
/// session's is.
fn canonical_workdir(op: &str, workdir: &str) -> Result<std::path::PathBuf, Reject> {
    if !std::path::Path::new(workdir).is_absolute() {
        return Err(Reject::new(
            ErrorCode::BadRequest,
            format!(
                "{op}: workdir `{workdir}` is not absolute; send the absolute path of the directory it is about"
            ),
        ));
    }
    std::fs::canonicalize(workdir).map_err(|e| {
        Reject::new(
            ErrorCode::BadRequest,
            format!("{op}: the workdir {workdir} is not usable ({e}); give an existing directory"),
        )
    })
}

fn skill_view(
    set: &flyto_actors::skills::SkillSet,
    skill: &flyto_actors::skills::Skill,
) -> SkillView {
    let p = &skill.parsed;
    SkillView {
        name: p.name.clone(),
        description: p.description.clone(),
        source: skill.origin.as_str().into(),
        path: skill.folder.clone(),
        shadowed: set.shadowed.get(&p.name).cloned().unwrap_or_default(),
        resources: skill.resources.clone(),
        license: p.license.clone(),
        compatibility: p.compatibility.clone(),
        allowed_tools: p.allowed_tools.clone(),
        metadata: p.metadata.clone(),
    }
}

/// Writes all of `buf` to the shared write half.
async fn write_all(w: &OwnedWriteHalf, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        w.writable().await?;
        match w.try_write(buf) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A submit acknowledged from the commit thread: once the plan is durable
/// it writes `plan_submitted` to the client's socket itself, without
/// blocking, instead of waking this connection's task to write it. That
/// takes a cross-CPU wake-up off the acknowledgement of a lone writer
/// (`flytoctl submit_plan`). What the socket did not take is left for the
/// task to write.
struct EarlySubmit {
    w: Arc<OwnedWriteHalf>,
    state: Arc<std::sync::Mutex<Early>>,
}

enum Early {
    Waiting,
    /// The frame is written but for these bytes.
    Written(Vec<u8>),
    /// The task answered by itself (the call failed or timed out): a late
    /// continuation must not write.
    Abandoned,
}

impl EarlySubmit {
    fn new(w: &Arc<OwnedWriteHalf>) -> EarlySubmit {
        EarlySubmit {
            w: w.clone(),
            state: Arc::new(std::sync::Mutex::new(Early::Waiting)),
        }
    }

    fn reply(&self) -> EarlyReply {
        let w = self.w.clone();
        let state = self.state.clone();
        Box::new(move |answer| {
            // With many clients at once, one runtime thread writing all
            // their answers in a row costs less CPU than this.
            let Ok((id, duplicate)) = answer else {
                return;
            };
            if !flyto_actors::store::lone_writer() {
                return;
            }
            let resp = Response::PlanSubmitted {
                id: id.clone(),
                duplicate: *duplicate,
            };
            let Ok(frame) = framing::frame(&resp) else {
                return;
            };
            let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
            if !matches!(*state, Early::Waiting) {
                return;
            }
            let mut sent = 0;
            while sent < frame.len() {
                match w.try_write(&frame[sent..]) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sent += n,
                }
            }
            // Nothing written: the task sends the whole answer as usual
            // (and sees any socket error itself).
            if sent > 0 {
                *state = Early::Written(frame[sent..].to_vec());
            }
        })
    }

    /// What is left to write of the early answer, if it was (partly)
    /// written; otherwise the task answers as usual.
    fn finish(self) -> Option<Vec<u8>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut *state, Early::Abandoned) {
            Early::Written(rest) => Some(rest),
            Early::Waiting | Early::Abandoned => None,
        }
    }
}

async fn stats(ctx: &Ctx) -> Result<Response, Reject> {
    let c = ctx.plans().counts().await?;
    let (node, peers) = ctx.store().peers().await;
    let sandbox = flyto_actors::tools::sandbox::probe();
    let t = session_call(ctx, |reply| ManagerMsg::Totals { reply })
        .await
        .unwrap_or_default();
    let breakers_open = breaker_call(ctx, |reply| BreakerMsg::Status { reply })
        .await
        .map(|b| b.iter().filter(|v| v.state == "open").count() as u64)
        .unwrap_or(0);
    Ok(Response::Stats {
        stats: DaemonStats {
            daemon_version: DAEMON_VERSION.into(),
            pid: std::process::id(),
            uptime_ms: ctx.started.elapsed().as_millis() as u64,
            draining: ctx.draining.load(Ordering::SeqCst),
            plans_pending: c.pending,
            plans_running: c.running,
            plans_succeeded: c.succeeded,
            plans_failed: c.failed,
            plans_cancelled: c.cancelled,
            steps_running: c.steps_running,
            scheduler_restarts: ctx.restarts.load(Ordering::Relaxed),
            db_bytes: c.db_bytes,
            sessions: t.sessions,
            sessions_running: t.running,
            sessions_live: t.live,
            input_tokens: t.usage.input_tokens,
            output_tokens: t.usage.output_tokens,
            cost_usd: t.cost_usd,
            breakers_open,
            compactions: t.compactions,
            contexts: t.contexts,
            disk_syncs: c.disk_syncs,
            sandbox: sandbox.describe(),
            landlock_abi: sandbox.landlock_abi.max(0) as u32,
            store: ctx.store().describe.clone(),
            node,
            peers,
        },
    })
}

/// Snapshot, then one event per published change, then `End` once the plan
/// is terminal.
async fn watch(id: &str, sink: &mut Sink, ctx: &Ctx) -> Result<(), FrameError> {
    let (view, rx) = match ctx.plans().watch(id).await {
        Ok(v) => v,
        Err(r) => return sink.error(r.code, r.message).await,
    };
    let mut last = view.revision;
    let mut terminal = view.state.is_terminal();
    sink.send(&Response::Plan { plan: view }).await?;
    if let Some(mut rx) = rx {
        while !terminal {
            let next = match rx.next().await {
                Some(next) => next,
                None => {
                    // The plan left the live set (or the scheduler
                    // restarted): send what is stored and stop.
                    terminal = true;
                    match ctx.plans().status(id).await {
                        Ok(v) => v,
                        Err(_) => break,
                    }
                }
            };
            terminal |= next.state.is_terminal();
            let next = ctx.plans().place(next);
            if next.revision > last {
                last = next.revision;
                sink.send(&Response::Event {
                    seq: next.revision,
                    event: Event::PlanUpdated { plan: next },
                })
                .await?;
            }
        }
    }
    sink.send(&Response::End {}).await
}

/// `job_next`: a schedule's next fires, creating nothing.
fn job_next(
    ctx: &Ctx,
    expr: &str,
    tz: Option<String>,
    after: Option<String>,
    count: u32,
) -> Result<Response, Reject> {
    use flyto_actors::jobs::schedule::{Schedule, machine_zone, tzdb_version};
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

/// The `job_*` requests, asked of the jobs actor.
async fn jobs_request(req: Request) -> Result<Response, Reject> {
    use flyto_actors::jobs::actor::{JOBS_NAME, JobsMsg};
    use flyto_actors::jobs::schedule::tzdb_version as tzdb;
    if let Request::JobCreate { spec } | Request::JobUpdate { spec, .. } = &req
        && let Some(target) = &spec.notify
    {
        crate::channel_api::check_binding(target).await?;
    }
    let Some(cell) = ractor::registry::where_is(JOBS_NAME.into()) else {
        return Err(Reject::new(
            ErrorCode::Unavailable,
            "the jobs service is not running (it restarts after a failure): try again shortly",
        ));
    };
    let jobs = ractor::ActorRef::<JobsMsg>::from(cell);
    let wait = Some(Duration::from_secs(30));
    let gone = || {
        Reject::new(
            ErrorCode::Unavailable,
            "the jobs service did not answer: try again",
        )
    };
    macro_rules! ask {
        ($build:expr) => {
            match jobs.call($build, wait).await {
                Ok(ractor::rpc::CallResult::Success(r)) => r,
                _ => Err(gone()),
            }
        };
    }
    match req {
        Request::JobCreate { spec } => ask!(|reply| JobsMsg::Create {
            spec: Box::new(spec.clone()),
            reply
        })
        .map(|(job, warnings)| Response::Job { job, warnings }),
        Request::JobUpdate { id, spec } => ask!(|reply| JobsMsg::Update {
            id: id.clone(),
            spec: Box::new(spec.clone()),
            reply
        })
        .map(|(job, warnings)| Response::Job { job, warnings }),
        Request::JobList {} => ask!(|reply| JobsMsg::List { reply }).map(|jobs| Response::Jobs {
            jobs,
            tzdb: tzdb().into(),
        }),
        Request::JobShow { id } => ask!(|reply| JobsMsg::Show {
            id: id.clone(),
            reply
        })
        .map(|(job, fires)| Response::JobHistory { job, fires }),
        Request::JobPause { id } => ask!(|reply| JobsMsg::SetEnabled {
            id: id.clone(),
            enabled: false,
            reply
        })
        .map(|job| Response::Job {
            job,
            warnings: Vec::new(),
        }),
        Request::JobResume { id } => ask!(|reply| JobsMsg::SetEnabled {
            id: id.clone(),
            enabled: true,
            reply
        })
        .map(|job| Response::Job {
            job,
            warnings: Vec::new(),
        }),
        Request::JobDelete { id } => ask!(|reply| JobsMsg::Delete {
            id: id.clone(),
            reply
        })
        .map(|job| Response::Job {
            job,
            warnings: Vec::new(),
        }),
        Request::JobRun { id } => ask!(|reply| JobsMsg::RunNow {
            id: id.clone(),
            reply
        })
        .map(|plan| Response::JobRan { id, plan }),
        other => Err(Reject::new(
            ErrorCode::BadRequest,
            format!("`{}` is not a job request", other.op()),
        )),
    }
}

fn hook_list(hooks: &flyto_actors::hooks::Hooks) -> Response {
    let rfc3339 = |ms: u64| {
        chrono::DateTime::from_timestamp_millis(ms as i64)
            .unwrap_or_default()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    };
    Response::Hooks {
        hooks: hooks
            .specs()
            .iter()
            .map(|h| flyto_protocol::HookView {
                name: h.name.clone(),
                event: h.event.as_str().into(),
                matcher: h.matcher_text.clone(),
                command: h.command.clone(),
                timeout_ms: h.timeout.as_millis() as u64,
                required: h.required,
                last: hooks
                    .last(&h.name)
                    .into_iter()
                    .map(|r| flyto_protocol::HookRunView {
                        outcome: r.outcome,
                        duration_ms: r.duration_ms,
                        at: rfc3339(r.at_ms),
                    })
                    .collect(),
            })
            .collect(),
    }
}
