//! Connections on the control socket and the scoped plan sockets: peer
//! check, encoding sniff, framing, the handshake, what a connection may
//! ask (its scope, and nothing but `hello`, `ping` and `stats` while
//! flytod starts), and the streaming of a session's events. What each
//! request means is `api`'s. Only this module knows about connections.

use crate::plan_reads::{PlanReads, StoreInfo};
use flyto_actors::plans::{Origin, Reject};
use flyto_actors::session::Subscription;
use flyto_actors::tools::bash::SharedPolicy;
use flyto_protocol::SessionEvent;
use flyto_protocol::framing::{self, FrameError, nonblocking};
use flyto_protocol::{ErrorCode, Event, MAX_FRAME, PROTOCOL_VERSION, Request, Response};
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
    pub(crate) fn child(&self) -> Origin {
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

pub(crate) enum Mode {
    Binary,
    Json,
}

/// A connection's writing side, how it speaks, and what it may see.
pub(crate) struct Sink {
    /// Shared with early replies (see `api::plans`); every write goes
    /// through `&OwnedWriteHalf`.
    pub(crate) w: Arc<OwnedWriteHalf>,
    pub(crate) mode: Mode,
    pub(crate) scope: Option<Arc<Scope>>,
}

impl Sink {
    pub(crate) async fn send(&mut self, resp: &Response) -> Result<(), FrameError> {
        match self.mode {
            Mode::Binary => Ok(write_all(&self.w, &framing::frame(resp)?).await?),
            Mode::Json => Ok(write_all(&self.w, &framing::json_line(resp)?).await?),
        }
    }

    pub(crate) async fn error(
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
        answer(req, sink, ctx).await?;
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
                Ok(req) => answer(req, sink, ctx).await?,
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

/// What a connection may ask, then the request table: a scoped socket
/// serves its chain's plan requests only, and while flytod starts only
/// `hello`, `ping` and `stats` are served.
async fn answer(req: Request, sink: &mut Sink, ctx: &Ctx) -> Result<(), FrameError> {
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
    crate::api::dispatch(req, sink, ctx).await
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
pub(crate) async fn forward_events(
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

/// Writes all of `buf` to the shared write half.
pub(crate) async fn write_all(w: &OwnedWriteHalf, mut buf: &[u8]) -> std::io::Result<()> {
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
