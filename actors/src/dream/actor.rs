//! The DreamActor: registered as [`super::DREAM_NAME`]. It keeps every
//! known project's gate inputs in memory (the last success, from the live
//! memory version; the sessions with messages since, from the session
//! room's activity notes; the backoff), so a check round over many
//! projects reads no file. Runs are tasks it owns; the project's lease is
//! its `running` slot, mirrored in `lease.json` so a restart can tell a run
//! a crash cut short.

use super::record::{Gate, Lease, ProjectDir, ProjectState, RunRecord, run_number};
use super::run::{RunArgs, RunCtx};
use super::{DreamConfig, backoff};
use crate::kernel::Reject;
use crate::memory::versions::{Layout, VersionMeta};
use flyto_protocol::ErrorCode;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Checks kept per project (in memory; runs are on disk).
const CHECKS_KEPT: usize = 8;

/// Tells the dream room that `session` in `workdir` got a new message.
pub fn activity(workdir: &str, session: u64, at_ms: u64) {
    if let Some(dream) = super::DREAM.find() {
        let _ = dream.cast(DreamMsg::Activity {
            workdir: workdir.into(),
            session,
            at_ms,
        });
    }
}

/// Which gate a check stopped at, with the value it saw. Plain data, so a
/// check round allocates nothing; it is put into words when shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stop {
    Disabled,
    /// Hours since the last success (or the backoff's end not reached).
    TooSoon {
        hours: u64,
        backoff: bool,
    },
    TooFewSessions {
        sessions: usize,
    },
    LeaseHeld,
    Passed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    pub at_ms: u64,
    pub stop: Stop,
}

impl Check {
    pub fn gates(&self, cfg: &DreamConfig) -> Vec<Gate> {
        let g = |name: &str, value: String, passed: bool| Gate {
            name: name.into(),
            value,
            passed,
        };
        let mut out = vec![g(
            "enabled",
            (self.stop != Stop::Disabled).to_string(),
            self.stop != Stop::Disabled,
        )];
        match self.stop {
            Stop::Disabled => return out,
            Stop::TooSoon { hours, backoff } => {
                let what = if backoff {
                    "backing off after a failed run".to_string()
                } else {
                    format!(
                        "{hours} h since the last success (at least {})",
                        cfg.min_hours
                    )
                };
                out.push(g("time", what, false));
                return out;
            }
            _ => out.push(g("time", "passed".into(), true)),
        }
        match self.stop {
            Stop::TooFewSessions { sessions } => {
                out.push(g(
                    "sessions",
                    format!("{sessions} sessions since (at least {})", cfg.min_sessions),
                    false,
                ));
                return out;
            }
            _ => out.push(g("sessions", "passed".into(), true)),
        }
        out.push(g("lease", "free".into(), self.stop == Stop::Passed));
        out
    }
}

#[derive(Debug, Default)]
pub struct Project {
    pub id: String,
    pub workdir: String,
    pub last_success_ms: Option<u64>,
    /// Sessions with messages since the last success, with the newest.
    pub sessions: HashMap<u64, u64>,
    pub state: ProjectState,
    pub running: Option<(String, CancellationToken)>,
    pub checks: VecDeque<Check>,
    waiters: Vec<RpcReplyPort<Result<RunRecord, Reject>>>,
}

/// The gates, cheapest first.
pub fn gate(p: &Project, cfg: &DreamConfig, now_ms: u64) -> Stop {
    if !cfg.enabled {
        return Stop::Disabled;
    }
    if let Some(until) = p.state.retry_after_ms
        && now_ms < until
    {
        return Stop::TooSoon {
            hours: 0,
            backoff: true,
        };
    }
    if let Some(last) = p.last_success_ms {
        let hours = now_ms.saturating_sub(last) / 3_600_000;
        if hours < cfg.min_hours {
            return Stop::TooSoon {
                hours,
                backoff: false,
            };
        }
    }
    if p.sessions.len() < cfg.min_sessions {
        return Stop::TooFewSessions {
            sessions: p.sessions.len(),
        };
    }
    if p.running.is_some() {
        return Stop::LeaseHeld;
    }
    Stop::Passed
}

/// What a check round found.
#[derive(Debug, Default)]
pub struct Round {
    /// Projects whose gates all passed, sorted.
    pub ready: Vec<String>,
    /// Projects whose check stopped at another gate than the one before.
    pub changed: Vec<String>,
}

/// Checks every project's gates and records the check. Reads no file.
pub fn check_all(projects: &mut HashMap<String, Project>, cfg: &DreamConfig, now_ms: u64) -> Round {
    let mut round = Round::default();
    for p in projects.values_mut() {
        let stop = gate(p, cfg, now_ms);
        let before = p.checks.back().map(|c| std::mem::discriminant(&c.stop));
        if p.checks.len() == CHECKS_KEPT {
            p.checks.pop_front();
        }
        p.checks.push_back(Check {
            at_ms: now_ms,
            stop,
        });
        if before != Some(std::mem::discriminant(&stop)) {
            round.changed.push(p.id.clone());
        }
        if stop == Stop::Passed {
            round.ready.push(p.id.clone());
        }
    }
    round.ready.sort();
    round
}

/// One project as `dream_status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectStatus {
    pub project: String,
    pub workdir: String,
    pub enabled: bool,
    pub last_success_ms: Option<u64>,
    pub next_eligible_ms: Option<u64>,
    pub sessions_since: usize,
    pub lease: Option<String>,
    pub last_check: Option<Vec<Gate>>,
    pub last_outcomes: Vec<(String, String)>,
    pub live_version: Option<u32>,
    /// The latest checks (kept in memory), oldest first: time and gates.
    pub checks: Vec<(u64, Vec<Gate>)>,
}

pub enum DreamMsg {
    /// A check round, then the next one after `check_every`.
    Tick,
    Activity {
        workdir: String,
        session: u64,
        at_ms: u64,
    },
    /// A run now (manual: the time and session gates do not apply); the
    /// answer comes when it ends.
    Run {
        workdir: PathBuf,
        dry_run: bool,
        reply: RpcReplyPort<Result<RunRecord, Reject>>,
    },
    Done {
        project: String,
        record: Box<RunRecord>,
    },
    Status {
        workdir: Option<PathBuf>,
        reply: RpcReplyPort<Vec<ProjectStatus>>,
    },
    Undo {
        workdir: PathBuf,
        run: Option<String>,
        reply: RpcReplyPort<Result<VersionMeta, Reject>>,
    },
    Reconfigure(DreamConfig),
}

pub struct DreamArgs {
    pub ctx: Arc<RunCtx>,
    pub config: DreamConfig,
}

pub struct DreamState {
    ctx: Arc<RunCtx>,
    config: DreamConfig,
    pub projects: HashMap<String, Project>,
    next_run: u64,
    /// Stops every run on shutdown.
    cancel: CancellationToken,
}

pub struct DreamActor;

impl DreamState {
    /// Reads what survives a restart, and settles runs a crash cut short:
    /// applied if the live version is theirs, else interrupted (the project
    /// is eligible again).
    pub fn load(ctx: Arc<RunCtx>, config: DreamConfig) -> DreamState {
        let mut s = DreamState {
            ctx,
            config,
            projects: HashMap::new(),
            next_run: 1,
            cancel: CancellationToken::new(),
        };
        let root = s.ctx.state_dir.join("projects");
        let ids: Vec<String> = std::fs::read_dir(&root)
            .map(|rd| {
                rd.filter_map(|d| d.ok())
                    .filter_map(|d| d.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        for id in ids {
            let pd = ProjectDir::new(&s.ctx.state_dir, &id);
            let layout = Layout {
                root: pd.root.clone(),
            };
            let live = layout.live_meta();
            for mut r in pd.runs() {
                s.next_run = s.next_run.max(run_number(&r.id) + 1);
                if r.finished() {
                    continue;
                }
                let mine = live.as_ref().and_then(|m| m.run.as_deref()) == Some(r.id.as_str());
                r.outcome = if mine {
                    r.version = live.as_ref().map(|m| m.version);
                    "applied".into()
                } else {
                    let _ = std::fs::remove_dir_all(pd.staged(&r.id));
                    "interrupted: flytod stopped during the run; nothing was applied and the project is eligible again".into()
                };
                r.finished_ms = Some(s.ctx.clock.now_ms());
                if let Err(e) = pd.save_run(&r) {
                    tracing::error!("dream run {}: cannot save its record: {e}", r.id);
                }
            }
            pd.drop_lease();
            let state = pd.state();
            let checks: Vec<Check> = pd.checks();
            let p = s.projects.entry(id.clone()).or_default();
            p.checks = checks.into_iter().rev().take(CHECKS_KEPT).rev().collect();
            p.id = id;
            p.workdir = state.workdir.clone();
            p.state = state;
            p.last_success_ms = live.and_then(|m| m.last_success_ms);
        }
        // Sessions with messages since each project's last success.
        if let Ok(all) = s.ctx.sessions.list() {
            for r in all {
                s.note(&r.workdir, r.id, r.updated_ms);
            }
        }
        s
    }

    fn note(&mut self, workdir: &str, session: u64, at_ms: u64) {
        let id = crate::compaction::breaker::project_id(workdir);
        let p = self.projects.entry(id.clone()).or_default();
        if p.id.is_empty() {
            p.id = id;
        }
        if p.workdir.is_empty() {
            p.workdir = workdir.to_string();
        }
        if p.last_success_ms.is_none_or(|t| at_ms > t) {
            let e = p.sessions.entry(session).or_insert(at_ms);
            *e = (*e).max(at_ms);
        }
    }

    /// One round over every project; the projects whose gates all passed.
    pub fn check_round(&mut self, now_ms: u64) -> Vec<String> {
        let round = check_all(&mut self.projects, &self.config, now_ms);
        // Kept on disk when a check stops at another gate than the last
        // one: a record of every change, not a write per project per round.
        for id in &round.changed {
            if let Some(p) = self.projects.get(id) {
                let checks: Vec<Check> = p.checks.iter().copied().collect();
                if let Err(e) = ProjectDir::new(&self.ctx.state_dir, id).save_checks(&checks) {
                    tracing::warn!("dream checks of {id}: {e}");
                }
            }
        }
        round.ready
    }

    fn start(
        &mut self,
        myself: &ActorRef<DreamMsg>,
        project: &str,
        manual: bool,
        dry_run: bool,
    ) -> Result<String, Reject> {
        let now = self.ctx.clock.now_ms();
        let config = self.config.clone();
        let Some(p) = self.projects.get_mut(project) else {
            return Err(Reject::new(
                ErrorCode::NotFound,
                format!("no project {project} is known to the dream room"),
            ));
        };
        if let Some((run, _)) = &p.running {
            return Err(Reject::new(
                ErrorCode::Conflict,
                format!(
                    "a dream is already running for this project (run {run}): wait for it, `flytoctl dream_status` shows it"
                ),
            ));
        }
        if p.workdir.is_empty() {
            return Err(Reject::new(
                ErrorCode::BadRequest,
                "this project's directory is not known yet: start a session in it first",
            ));
        }
        let id = format!("d{}", self.next_run);
        self.next_run += 1;
        if let Some((mem, node)) = &self.ctx.shared {
            // One node at a time consolidates a project; the lease covers
            // the run's time limit, so a dead node's runs out by itself.
            let run = format!("{node}/{id}");
            let lease = config.time_limit + std::time::Duration::from_secs(60);
            let taken = tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(async {
                    match mem.take_dream_lease(project, node, &run, lease).await? {
                        true => Ok(None),
                        false => mem.dream_holder(project).await.map(Some),
                    }
                })
            })
            .map_err(|e| Reject::new(ErrorCode::Unavailable, format!("the shared store: {e}")))?;
            if let Some(holder) = taken {
                return Err(Reject::new(
                    ErrorCode::Conflict,
                    format!(
                        "a dream of this project is running on node {}: wait for it, `flytoctl dream_status` shows its end",
                        holder.unwrap_or_else(|| "(just ended)".into())
                    ),
                ));
            }
        }
        let pd = ProjectDir::new(&self.ctx.state_dir, project);
        let stop = gate(p, &config, now);
        let gates = Check { at_ms: now, stop }.gates(&config);
        pd.take_lease(&Lease {
            run: id.clone(),
            pid: std::process::id(),
            taken_ms: now,
        })
        .map_err(|e| {
            Reject::new(
                ErrorCode::Internal,
                format!("cannot take the dream lease in {}: {e}", pd.root.display()),
            )
        })?;
        let cancel = self.cancel.child_token();
        p.running = Some((id.clone(), cancel.clone()));
        let args = RunArgs {
            id: id.clone(),
            project: project.to_string(),
            workdir: PathBuf::from(&p.workdir),
            manual,
            dry_run,
            gates,
            config,
        };
        let ctx = self.ctx.clone();
        let me = myself.clone();
        let project = project.to_string();
        tokio::spawn(async move {
            let record = super::run::run(ctx, args, cancel).await;
            let _ = me.cast(DreamMsg::Done {
                project,
                record: Box::new(record),
            });
        });
        Ok(id)
    }

    fn done(&mut self, project: &str, record: RunRecord) {
        let now = self.ctx.clock.now_ms();
        let pd = ProjectDir::new(&self.ctx.state_dir, project);
        pd.drop_lease();
        if let Some((mem, node)) = &self.ctx.shared {
            let (mem, project, run) = (
                mem.clone(),
                project.to_string(),
                format!("{node}/{}", record.id),
            );
            tokio::spawn(async move {
                if let Err(e) = mem.drop_dream_lease(&project, &run).await {
                    tracing::warn!(project = %project, error = %e, "cannot give the dream lease back; it runs out by itself");
                }
            });
        }
        let Some(p) = self.projects.get_mut(project) else {
            return;
        };
        p.running = None;
        if record.applied() {
            let layout = Layout {
                root: pd.root.clone(),
            };
            p.last_success_ms = layout
                .live_meta()
                .and_then(|m| m.last_success_ms)
                .or(Some(now));
            // Sessions that spoke during the run count for the next one.
            p.sessions.retain(|_, at| *at > record.started_ms);
            p.state.failures = 0;
            p.state.retry_after_ms = None;
        } else if !record.manual && !record.dry_run {
            p.state.failures += 1;
            p.state.retry_after_ms = Some(now + backoff(p.state.failures).as_millis() as u64);
        }
        p.state.workdir = p.workdir.clone();
        if let Err(e) = pd.save_state(&p.state) {
            tracing::error!("dream state of {}: {e}", pd.root.display());
        }
        for w in p.waiters.drain(..) {
            let _ = w.send(Ok(record.clone()));
        }
    }

    pub fn status(&self, only: Option<&str>) -> Vec<ProjectStatus> {
        let mut out: Vec<ProjectStatus> = self
            .projects
            .values()
            .filter(|p| only.is_none_or(|o| o == p.id))
            .map(|p| {
                let pd = ProjectDir::new(&self.ctx.state_dir, &p.id);
                let runs = pd.runs();
                let next = [
                    p.last_success_ms
                        .map(|t| t + self.config.min_hours * 3_600_000),
                    p.state.retry_after_ms,
                ]
                .into_iter()
                .flatten()
                .max();
                ProjectStatus {
                    project: p.id.clone(),
                    workdir: p.workdir.clone(),
                    enabled: self.config.enabled,
                    last_success_ms: p.last_success_ms,
                    next_eligible_ms: next,
                    sessions_since: p.sessions.len(),
                    lease: p.running.as_ref().map(|(r, _)| r.clone()),
                    last_check: p.checks.back().map(|c| c.gates(&self.config)),
                    last_outcomes: runs
                        .iter()
                        .rev()
                        .take(3)
                        .map(|r| (r.id.clone(), r.outcome.clone()))
                        .collect(),
                    live_version: Layout {
                        root: pd.root.clone(),
                    }
                    .live()
                    .ok()
                    .flatten(),
                    checks: p
                        .checks
                        .iter()
                        .map(|c| (c.at_ms, c.gates(&self.config)))
                        .collect(),
                }
            })
            .collect();
        out.sort_by(|a, b| a.workdir.cmp(&b.workdir));
        out
    }
}

/// The project id of a directory a person names.
pub fn project_for(dir: &Path) -> Result<String, Reject> {
    crate::memory::project_of(dir).map_err(|e| Reject::new(e.code(), e.to_string()))
}

impl Actor for DreamActor {
    type Msg = DreamMsg;
    type State = DreamState;
    type Arguments = DreamArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<DreamMsg>,
        args: DreamArgs,
    ) -> Result<DreamState, ActorProcessingErr> {
        let every = args.config.check_every;
        let state = DreamState::load(args.ctx, args.config);
        myself.send_after(every, || DreamMsg::Tick);
        Ok(state)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<DreamMsg>,
        state: &mut DreamState,
    ) -> Result<(), ActorProcessingErr> {
        state.cancel.cancel();
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<DreamMsg>,
        msg: DreamMsg,
        state: &mut DreamState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            DreamMsg::Tick => {
                let now = state.ctx.clock.now_ms();
                for project in state.check_round(now) {
                    if let Err(e) = state.start(&myself, &project, false, false) {
                        tracing::warn!("dream of {project}: {}", e.message);
                    }
                }
                myself.send_after(state.config.check_every, || DreamMsg::Tick);
            }
            DreamMsg::Activity {
                workdir,
                session,
                at_ms,
            } => state.note(&workdir, session, at_ms),
            DreamMsg::Run {
                workdir,
                dry_run,
                reply,
            } => {
                if !state.config.enabled {
                    let _ = reply.send(Err(Reject::new(
                        ErrorCode::BadRequest,
                        "consolidation is off ([dream] enabled = false in the config): set enabled = true and reload (SIGHUP) to run it",
                    )));
                    return Ok(());
                }
                let project = match project_for(&workdir) {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        return Ok(());
                    }
                };
                let canon = std::fs::canonicalize(&workdir).map_or_else(
                    |_| workdir.display().to_string(),
                    |c| c.display().to_string(),
                );
                let p = state.projects.entry(project.clone()).or_default();
                p.id.clone_from(&project);
                if p.workdir.is_empty() {
                    p.workdir = canon;
                }
                match state.start(&myself, &project, true, dry_run) {
                    Ok(_) => {
                        if let Some(p) = state.projects.get_mut(&project) {
                            p.waiters.push(reply);
                        }
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            DreamMsg::Done { project, record } => state.done(&project, *record),
            DreamMsg::Status { workdir, reply } => {
                let only = match workdir.as_deref().map(project_for) {
                    Some(Ok(p)) => Some(p),
                    Some(Err(_)) => {
                        let _ = reply.send(Vec::new());
                        return Ok(());
                    }
                    None => None,
                };
                let _ = reply.send(state.status(only.as_deref()));
            }
            DreamMsg::Undo {
                workdir,
                run,
                reply,
            } => {
                let project = project_for(&workdir);
                if let Ok(p) = &project
                    && let Some((r, _)) = state.projects.get(p).and_then(|p| p.running.as_ref())
                {
                    let _ = reply.send(Err(Reject::new(
                        ErrorCode::Conflict,
                        format!(
                            "a dream is running for this project (run {r}): undo after it ends"
                        ),
                    )));
                    return Ok(());
                }
                let memory = state.ctx.memory.clone();
                let keep = state.config.keep;
                tokio::spawn(async move {
                    let done = memory
                        .undo(&workdir, run, keep)
                        .await
                        .map_err(|e| Reject::new(e.code(), e.to_string()));
                    let _ = reply.send(done);
                });
            }
            DreamMsg::Reconfigure(c) => state.config = c,
        }
        Ok(())
    }
}

/// A run record by id, from any project.
pub fn find_run(state_dir: &Path, id: &str) -> Option<RunRecord> {
    let rd = std::fs::read_dir(state_dir.join("projects")).ok()?;
    for d in rd.filter_map(|d| d.ok()) {
        let path = d
            .path()
            .join("dream")
            .join("runs")
            .join(format!("{id}.json"));
        if let Ok(bytes) = std::fs::read(&path)
            && let Ok(r) = serde_json::from_slice(&bytes)
        {
            return Some(r);
        }
    }
    None
}

/// Runs of one project (or of all), oldest first.
pub fn runs(state_dir: &Path, project: Option<&str>) -> Vec<RunRecord> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(state_dir.join("projects")) else {
        return out;
    };
    for d in rd.filter_map(|d| d.ok()) {
        let id = d.file_name().to_string_lossy().into_owned();
        if project.is_some_and(|p| p != id) {
            continue;
        }
        out.extend(ProjectDir::new(state_dir, &id).runs());
    }
    out.sort_by_key(|r| run_number(&r.id));
    out
}
