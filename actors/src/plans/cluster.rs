//! One node's share of the plans on the shared store. The runner claims
//! ready steps up to its free slots (woken by LISTEN/NOTIFY, or by its
//! poll when a notification is lost), runs each attempt through a
//! [`Launch`], keeps the attempts' leases, reports each outcome under its
//! fencing token, sweeps expired leases every few seconds (whichever node
//! wins the advisory lock), and stops an attempt as soon as its lease is
//! lost: rescued, cancelled, or the node could not reach the database
//! long enough that it must fence itself. It holds no plan beyond the
//! attempts it runs; the database is the only source of truth.
//!
//! It may not touch the node's own (sled) store or the one-machine
//! scheduler's state.

use super::PlanSockets;
use super::model::{PlanRecord, StepAction, StepRecord, format_id, plan_log_dir, step_log_path};
use super::scheduler::{step_env, step_marker};
use super::store::decode_plan;
use crate::store::postgres::claims::{
    self, Claim, Depth, Fence, KeeperTimes, LeaseKeeper, StepEnd,
};
use crate::store::postgres::listen::Listener;
use crate::store::postgres::plans::{self, PLANS_CHANNEL, WORK_CHANNEL};
use crate::store::postgres::{PgError, Shared};
use crate::tools::env::child_env;
use crate::tools::process::{self, CancelReason, CommandSpec, Exit, Outcome};
use futures_util::future::BoxFuture;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, oneshot};

/// Runs one attempt to its end; `cancel` firing (or dropped) stops it.
/// Answers its outcome and where its full output is (if anywhere).
pub trait Launch: Send + Sync + 'static {
    fn launch(
        &self,
        plan: &PlanRecord,
        step: &StepRecord,
        token: i64,
        cancel: oneshot::Receiver<CancelReason>,
    ) -> BoxFuture<'static, (Outcome, Option<String>)>;
}

/// Runs `run` steps as process groups, as the one-machine scheduler does,
/// each with a scoped plan socket of its own (`FLYTO_PLAN_SOCK`), and
/// agent steps through the session room.
pub struct ProcessLaunch {
    pub kill_grace: Duration,
    pub log_dir: Option<PathBuf>,
    pub log_max: u64,
    pub tail_max: usize,
    pub sockets: Arc<dyn PlanSockets>,
    /// `FLYTO_PLAN_SOCK` when no scoped socket could be opened.
    pub fallback_socket: String,
    /// Attempts using each plan's socket here.
    pub socket_users: SocketUsers,
}

/// Per plan, how many of its attempts here use its scoped socket.
pub type SocketUsers = Arc<Mutex<HashMap<String, usize>>>;

/// The last attempt of a plan on this node closes its socket.
fn close_socket(sockets: &dyn PlanSockets, users: &SocketUsers, owner: &str) {
    let mut u = users.lock().unwrap_or_else(|e| e.into_inner());
    let last = match u.get_mut(owner) {
        Some(n) if *n > 1 => {
            *n -= 1;
            false
        }
        _ => true,
    };
    if last {
        u.remove(owner);
        sockets.close(owner);
    }
}

impl ProcessLaunch {
    /// Where the step's full output goes: the same place as on one
    /// machine (each attempt replaces the last's).
    fn open_socket(
        &self,
        owner: &str,
        chain: &str,
        depth: u32,
        sandbox: Option<crate::tools::sandbox::SandboxSpec>,
    ) -> Option<String> {
        let mut u = self.socket_users.lock().unwrap_or_else(|e| e.into_inner());
        let path = self.sockets.open(owner, chain, depth, sandbox)?;
        *u.entry(owner.to_string()).or_default() += 1;
        Some(path)
    }

    fn log_of(&self, plan: u64, step: &str) -> Option<PathBuf> {
        let dir = self.log_dir.as_ref()?;
        crate::durable::create_dir_all_synced(&plan_log_dir(dir, plan)).ok()?;
        Some(step_log_path(dir, plan, step))
    }
}

impl Launch for ProcessLaunch {
    fn launch(
        &self,
        plan: &PlanRecord,
        step: &StepRecord,
        token: i64,
        cancel: oneshot::Receiver<CancelReason>,
    ) -> BoxFuture<'static, (Outcome, Option<String>)> {
        let command = match &step.action {
            StepAction::Run { command } => command,
            StepAction::Agent { prompt, session } => {
                // The session room runs it: on the shared store, under the
                // session's own claim, on whichever node takes the step.
                let agent = super::agent_step::AgentStep {
                    prompt: prompt.clone(),
                    session: session.clone(),
                    plan: format_id(plan.id),
                    workdir: step.workdir.clone(),
                    chain: plan.chain.clone(),
                    depth: plan.depth,
                    timeout: Duration::from_secs(step.timeout_secs),
                    sandbox: plan
                        .sandbox_of(&step.id)
                        .map(|b| crate::session::SessionSandbox {
                            profile: Some(b.profile),
                            network: Some(b.network),
                            write_roots: Some(b.write_roots.clone()),
                        }),
                    job: plan
                        .idempotency_key
                        .as_deref()
                        .and_then(super::model::job_of_key),
                };
                let tail_max = self.tail_max;
                return Box::pin(async move {
                    (super::agent_step::run(agent, cancel, tail_max).await, None)
                });
            }
        };
        let id = format_id(plan.id);
        // Children of any confined step are confined.
        let children_sandbox = plan
            .sandboxes
            .iter()
            .map(|(_, b)| b)
            .find(|b| !b.is_off())
            .cloned();
        // One socket per plan on each node, as on one machine, open while
        // any of its attempts runs here.
        let owner = id.clone();
        let plan_sock = self
            .open_socket(&owner, &plan.chain, plan.depth, children_sandbox)
            .unwrap_or_else(|| self.fallback_socket.clone());
        let flyto = vec![
            ("FLYTO_PLAN_SOCK".to_string(), plan_sock),
            ("FLYTO_PLAN_ID".to_string(), id.clone()),
            ("FLYTO_CHAIN".to_string(), plan.chain.clone()),
            ("FLYTO_STEP".to_string(), step_marker(plan.id, &step.id)),
            // The fencing token of this attempt: what its writes present.
            ("FLYTO_ATTEMPT".to_string(), token.to_string()),
        ];
        let extra = step_env(&step.env, flyto);
        let log_path = self.log_of(plan.id, &step.id);
        let spec = CommandSpec {
            command: command.clone(),
            workdir: step.workdir.clone().into(),
            env: child_env(std::env::vars(), &extra),
            timeout: Duration::from_secs(step.timeout_secs),
            kill_grace: self.kill_grace,
            log_path,
            log_max: self.log_max,
            tail_max: self.tail_max,
            confined: plan.depth >= 1,
            sandbox: plan.sandbox_of(&step.id).filter(|b| !b.is_off()).cloned(),
        };
        let (sockets, users) = (self.sockets.clone(), self.socket_users.clone());
        let log = self.log_of(plan.id, &step.id);
        Box::pin(async move {
            let outcome = process::run(spec, cancel, |_| {}).await;
            close_socket(&*sockets, &users, &owner);
            // Durable before the outcome is stored, as on one machine.
            if let Some(log) = log.clone() {
                super::scheduler::sync_step_log(log).await;
            }
            let log = log.filter(|p| p.exists()).map(|p| p.display().to_string());
            (outcome, log)
        })
    }
}

#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// This node's id (new at every process start).
    pub node: String,
    /// Attempts of users' plans this node runs at once.
    pub slots: usize,
    /// Attempts of child plans (submitted by steps and agents) it runs
    /// beyond those: a step waiting for its child plan must not hold the
    /// slot the child needs.
    pub child_slots: usize,
    pub sweep_every: Duration,
    pub keeper: KeeperTimes,
    /// Finished plans older than this are deleted (by whichever node
    /// sweeps first); `None` keeps them.
    pub plan_ttl: Option<Duration>,
    /// This node's step logs: those of plans gone from the database are
    /// removed.
    pub log_dir: Option<PathBuf>,
}

/// Deletes finished plans older than `ttl`, and this node's logs of every
/// plan no longer in the database (another node may have deleted it).
async fn expire(shared: &Shared, ttl: Duration, log_dir: Option<&Path>) -> Result<(), PgError> {
    plans::expire(shared, ttl).await?;
    let Some(dir) = log_dir else { return Ok(()) };
    let local: Vec<(i64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let id = super::model::parse_id(e.file_name().to_str()?)?;
            Some((id as i64, e.path()))
        })
        .collect();
    if local.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = local.iter().map(|(id, _)| *id).collect();
    let kept = plans::existing(shared, &ids).await?;
    for (id, path) in local {
        if !kept.contains(&id) {
            let _ = std::fs::remove_dir_all(path);
            let _ =
                std::fs::remove_dir_all(crate::tools::sandbox::tmpdir_for(&format_id(id as u64)));
        }
    }
    Ok(())
}

/// The attempts whose process runs on this node. An attempt keeps its
/// entry, and so its slot, until its process has ended.
type Running = Arc<Mutex<HashMap<i64, Attempt>>>;

struct Attempt {
    /// A child plan's step (it holds a child slot).
    child: bool,
    /// How to stop it; taken once it was told to.
    stop: Option<oneshot::Sender<CancelReason>>,
    /// Why it was stopped, which decides what its end reports.
    why: Option<Stop>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Stop {
    /// Its lease was revoked (a cancel) or rescued: its report is refused.
    Lost,
    /// This node could not heartbeat for too long: hand the step back.
    Fenced,
    /// This node is shutting down: hand the step back.
    Draining,
}

fn running_lock(r: &Running) -> std::sync::MutexGuard<'_, HashMap<i64, Attempt>> {
    r.lock().unwrap_or_else(|e| e.into_inner())
}

/// Stops the attempts the keeper says are no longer this node's.
struct Stopper(Running);

impl Fence for Stopper {
    fn lost(&self, tokens: &[i64]) {
        stop(&self.0, tokens, Stop::Lost);
    }

    fn fence(&self, tokens: &[i64]) {
        stop(&self.0, tokens, Stop::Fenced);
    }
}

fn stop(running: &Running, tokens: &[i64], why: Stop) {
    let mut r = running_lock(running);
    for t in tokens {
        if let Some(a) = r.get_mut(t)
            && let Some(tx) = a.stop.take()
        {
            a.why = Some(why);
            let _ = tx.send(match why {
                Stop::Draining => CancelReason::Shutdown,
                Stop::Lost | Stop::Fenced => CancelReason::User,
            });
        }
    }
}

/// A node's runner. Dropping it is the node's death: its loops stop, its
/// attempts are killed and nothing more is reported (their leases run out
/// and the sweep takes their steps).
pub struct Runner {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    running: Running,
    dead: Arc<std::sync::atomic::AtomicBool>,
    /// Set by [`Runner::drain`]: claim nothing more.
    draining: Arc<std::sync::atomic::AtomicBool>,
    /// Attempts not yet reported (their process may have ended).
    unreported: Arc<std::sync::atomic::AtomicUsize>,
    /// Told whenever an attempt has been reported.
    ended: Arc<Notify>,
    /// Kept alive: its wake-ups drive the loops.
    _listener: Arc<Listener>,
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.dead.store(true, std::sync::atomic::Ordering::SeqCst);
        for t in &self.tasks {
            t.abort();
        }
        // Dropped senders stop their attempts.
        running_lock(&self.running).clear();
    }
}

impl Runner {
    /// `listener` must listen on [`WORK_CHANNEL`] and [`PLANS_CHANNEL`];
    /// its fallback poll is the runner's.
    pub fn start(
        shared: Shared,
        config: RunnerConfig,
        launch: Arc<dyn Launch>,
        listener: Arc<Listener>,
    ) -> Runner {
        let running: Running = Arc::default();
        let dead: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let draining: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let unreported: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let ended = Arc::new(Notify::new());
        let keeper = Arc::new(LeaseKeeper::start(
            shared.clone(),
            config.node.clone(),
            config.keeper,
            Arc::new(Stopper(running.clone())),
        ));
        let freed = Arc::new(Notify::new());
        let (mut work, mut changes) = (
            listener.subscribe(WORK_CHANNEL),
            listener.subscribe(PLANS_CHANNEL),
        );
        let claim_loop = {
            let (shared, config, running, freed, dead, draining, ended, unreported) = (
                shared.clone(),
                config.clone(),
                running.clone(),
                freed.clone(),
                dead.clone(),
                draining.clone(),
                ended.clone(),
                unreported.clone(),
            );
            tokio::spawn(async move {
                loop {
                    for (depth, slots) in [
                        (Depth::Top, config.slots),
                        (Depth::Child, config.child_slots),
                    ] {
                        let child = depth == Depth::Child;
                        let busy = running_lock(&running)
                            .values()
                            .filter(|a| a.child == child)
                            .count();
                        let free = slots.saturating_sub(busy);
                        if free == 0 || draining.load(std::sync::atomic::Ordering::SeqCst) {
                            continue;
                        }
                        match claims::claim_at(&shared, &config.node, free as i64, depth).await {
                            Ok(claimed) => {
                                for c in claimed {
                                    let node = Node {
                                        shared: &shared,
                                        keeper: &keeper,
                                        running: &running,
                                        freed: &freed,
                                        launch: &launch,
                                        dead: &dead,
                                        ended: &ended,
                                        unreported: &unreported,
                                    };
                                    start_attempt(node, c, child);
                                }
                            }
                            Err(e) => {
                                tracing::warn!(node = %config.node, error = %e, "cannot claim steps")
                            }
                        }
                    }
                    tokio::select! {
                        _ = work.woken() => {}
                        _ = freed.notified() => {}
                    }
                }
            })
        };
        // A cancel revokes leases; hear of it now rather than at the next
        // heartbeat.
        let cancel_watch = {
            let (shared, running) = (shared.clone(), running.clone());
            tokio::spawn(async move {
                loop {
                    changes.woken().await;
                    let mine: Vec<i64> = running_lock(&running).keys().copied().collect();
                    if mine.is_empty() {
                        continue;
                    }
                    if let Ok(held) = still_held(&shared, &mine).await {
                        let gone: Vec<i64> =
                            mine.into_iter().filter(|t| !held.contains(t)).collect();
                        stop(&running, &gone, Stop::Lost);
                    }
                }
            })
        };
        let sweeper = {
            let (shared, config) = (shared.clone(), config.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(config.sweep_every);
                let mut last_expired: Option<tokio::time::Instant> = None;
                loop {
                    tick.tick().await;
                    if let Err(e) = claims::sweep(&shared).await {
                        tracing::warn!(node = %config.node, error = %e, "cannot sweep expired leases");
                    }
                    let Some(ttl) = config.plan_ttl else { continue };
                    // A tenth of the TTL late at most, and no more often
                    // than the sweep or less than every ten minutes.
                    let every = (ttl / 10).clamp(config.sweep_every, Duration::from_secs(600));
                    if last_expired.is_some_and(|at| at.elapsed() < every) {
                        continue;
                    }
                    last_expired = Some(tokio::time::Instant::now());
                    if let Err(e) = expire(&shared, ttl, config.log_dir.as_deref()).await {
                        tracing::warn!(node = %config.node, error = %e, "cannot remove expired plans");
                    }
                }
            })
        };
        Runner {
            tasks: vec![claim_loop, cancel_watch, sweeper],
            running,
            dead,
            draining,
            unreported,
            ended,
            _listener: listener,
        }
    }

    /// Attempts running on this node now.
    pub fn running(&self) -> usize {
        running_lock(&self.running).len()
    }

    /// Stops claiming; gives the running attempts `grace` to end, then
    /// stops them and hands their steps back (see [`claims::hand_back`]).
    /// Returns once no attempt runs here, or after `grace` and `wait_more`.
    pub async fn drain(&self, grace: Duration, wait_more: Duration) {
        self.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + grace;
        if !self.idle_by(deadline).await {
            let all: Vec<i64> = running_lock(&self.running).keys().copied().collect();
            tracing::info!(
                attempts = all.len(),
                "draining: stopping the steps still running and handing them back"
            );
            stop(&self.running, &all, Stop::Draining);
            self.idle_by(tokio::time::Instant::now() + wait_more).await;
        }
    }

    /// Waits until no attempt runs here or waits to be reported, at most
    /// until `deadline`.
    async fn idle_by(&self, deadline: tokio::time::Instant) -> bool {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.unreported.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                return true;
            }
            tokio::select! {
                _ = ended => {}
                _ = tokio::time::sleep_until(deadline) => return false,
            }
        }
    }
}

/// Which of `tokens` still hold their steps.
async fn still_held(shared: &Shared, tokens: &[i64]) -> Result<Vec<i64>, PgError> {
    let c = shared.client().await?;
    let rows = c
        .query(
            "SELECT lease_token FROM flyto_steps WHERE lease_token = ANY($1) AND state = 'running'",
            &[&tokens],
        )
        .await
        .map_err(shared.query_err("checking leases"))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// What an attempt needs of its node.
struct Node<'a> {
    shared: &'a Shared,
    keeper: &'a Arc<LeaseKeeper>,
    running: &'a Running,
    freed: &'a Arc<Notify>,
    launch: &'a Arc<dyn Launch>,
    dead: &'a Arc<std::sync::atomic::AtomicBool>,
    ended: &'a Arc<Notify>,
    unreported: &'a Arc<std::sync::atomic::AtomicUsize>,
}

fn start_attempt(node: Node<'_>, claim: Claim, child: bool) {
    let (tx, rx) = oneshot::channel();
    running_lock(node.running).insert(
        claim.token,
        Attempt {
            child,
            stop: Some(tx),
            why: None,
        },
    );
    node.unreported
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    node.keeper.hold(claim.token);
    let (shared, keeper, running, freed, launch, dead, ended, unreported) = (
        node.shared.clone(),
        node.keeper.clone(),
        node.running.clone(),
        node.freed.clone(),
        node.launch.clone(),
        node.dead.clone(),
        node.ended.clone(),
        node.unreported.clone(),
    );
    tokio::spawn(async move {
        let end = match plan_and_step(&shared, &claim).await {
            Ok(Some((plan, step))) => {
                let (outcome, log_path) = launch.launch(&plan, &step, claim.token, rx).await;
                Some(StepEnd {
                    log_path,
                    ..end_of(outcome, &step)
                })
            }
            Ok(None) => None,
            Err(why) => Some(StepEnd::failed(&why)),
        };
        // The process has ended: its slot is free, whatever the report.
        let why = running_lock(&running)
            .remove(&claim.token)
            .and_then(|a| a.why);
        freed.notify_one();
        if dead.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        match (why, end) {
            // Never started: its lease runs out, and the sweep takes it.
            (_, None) => {}
            (Some(Stop::Draining), Some(end)) => {
                let why = "interrupted: flytod is shutting down";
                hand_back(&shared, claim.token, why, &end).await
            }
            (Some(Stop::Fenced), Some(end)) => {
                let why = "interrupted: its node could not reach the database";
                hand_back(&shared, claim.token, why, &end).await
            }
            (None | Some(Stop::Lost), Some(end)) => report(&shared, claim.token, &end).await,
        }
        keeper.release(claim.token);
        unreported.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        ended.notify_waiters();
    });
}

/// The claimed step and its plan: `Ok(None)` when the database stayed
/// away for the whole lease (the sweep takes the step); `Err` when the
/// plan cannot be run (its record is gone or unreadable), which fails it.
async fn plan_and_step(
    shared: &Shared,
    claim: &Claim,
) -> Result<Option<(PlanRecord, StepRecord)>, String> {
    // A database hiccup is not the step's failure: read again.
    let read = within_lease(claim.token, "read the plan's record", || {
        plans::get_record(shared, claim.plan)
    });
    let Some(record) = read.await else {
        return Ok(None);
    };
    let record = record.ok_or_else(|| format!("plan {} is gone from the database", claim.plan))?;
    let plan = decode_plan(&record).map_err(|e| e.to_string())?;
    let step = plan
        .steps
        .iter()
        .find(|s| s.id == claim.step)
        .cloned()
        .ok_or_else(|| format!("step `{}` is not in its plan's record", claim.step))?;
    Ok(Some((plan, step)))
}

fn end_of(outcome: Outcome, step: &StepRecord) -> StepEnd {
    // Worded as on one machine.
    let (succeeded, exit_code, mut error) = match outcome.exit {
        Exit::Code(0) => (true, Some(0), None),
        Exit::Code(n) => (false, Some(n), Some(format!("exit code {n}"))),
        Exit::Signal(s) => (false, None, Some(format!("killed by signal {s}"))),
        Exit::TimedOut => (
            false,
            Some(process::TIMEOUT_EXIT),
            Some(format!(
                "timed out after {}s: raise the step's timeout_secs if it needs longer",
                step.timeout_secs
            )),
        ),
        Exit::Cancelled(CancelReason::User) => (false, None, Some("cancelled".into())),
        Exit::Cancelled(CancelReason::Shutdown) => (
            false,
            None,
            Some("interrupted: flytod is shutting down".into()),
        ),
        Exit::SpawnFailed(why) => (false, None, Some(why)),
    };
    if outcome.log_truncated {
        let note = "output log truncated at plans.log_max_bytes";
        error = Some(match error {
            Some(e) => format!("{e}; {note}"),
            None => note.to_string(),
        });
    }
    StepEnd {
        succeeded,
        exit_code,
        error,
        stdout: outcome.stdout_tail,
        stderr: outcome.stderr_tail,
        log_path: None,
    }
}

/// Gives back the step of an attempt this node stopped (draining, or
/// fenced): another node runs it again when it may, else it fails with
/// `why`.
async fn hand_back(shared: &Shared, token: i64, why: &str, end: &StepEnd) {
    let done = within_lease(token, "hand a step back", || {
        claims::hand_back(shared, token, why)
    });
    match done.await {
        Some(true) => tracing::info!(token, why, "handed a step back"),
        Some(false) => refused(shared, token, end).await,
        None => {}
    }
}

/// Reports an attempt's end.
async fn report(shared: &Shared, token: i64, end: &StepEnd) {
    let done = within_lease(token, "report an attempt", || {
        claims::complete(shared, token, end)
    });
    if done.await == Some(false) {
        refused(shared, token, end).await;
    }
}

/// The attempt no longer held its step (rescued or cancelled): its
/// write changed nothing. Its process has ended, which a cancel waiting
/// for it is told.
async fn refused(shared: &Shared, token: i64, end: &StepEnd) {
    tracing::info!(
        token,
        "an attempt's report was refused: its lease was lost (rescued or cancelled)"
    );
    if let Err(e) = claims::stopped(shared, token, end).await {
        tracing::warn!(token, error = %e, "cannot record that an attempt stopped");
    }
}

/// Makes the write `attempt` of attempt `token`, retrying with backoff
/// while the database is away, for as long as the attempt's lease could
/// last: after that the sweep has taken the step, and the write would be
/// refused anyway. `None`: given up.
async fn within_lease<T, F>(token: i64, what: &str, mut attempt: impl FnMut() -> F) -> Option<T>
where
    F: std::future::Future<Output = Result<T, PgError>>,
{
    let mut backoff = Duration::from_millis(100);
    let give_up = tokio::time::Instant::now() + claims::LEASE;
    loop {
        match attempt().await {
            Ok(answer) => return Some(answer),
            Err(e) if tokio::time::Instant::now() < give_up => {
                tracing::warn!(token, error = %e, "cannot {what}; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e) => {
                tracing::error!(token, error = %e, "gave up trying to {what}: its lease has run out");
                return None;
            }
        }
    }
}
