//! Plan and step records as stored, and how they look to clients.

use crate::tools::sandbox::SandboxSpec;
use flyto_protocol::{PlanSpec, PlanState, PlanSummary, PlanView, StepSpec, StepState, StepView};
use serde::{Deserialize, Serialize};

/// Bump with a migration in `store.rs` when a record's shape changes.
/// 4: the steps' confinement (`sandboxes`). 5: steps' `idempotent`.
pub const PLAN_FORMAT_VERSION: u32 = 5;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRecord {
    pub id: u64,
    pub name: Option<String>,
    pub state: PlanState,
    pub reason: Option<String>,
    pub created_ms: u64,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    pub revision: u64,
    pub idempotency_key: Option<String>,
    pub steps: Vec<StepRecord>,
    /// Added in format 2: the chain and depth (0 for plans users submit).
    pub chain: String,
    pub depth: u32,
    /// Added in format 3: the plan `plan_restart` made this one from.
    pub restarted_from: Option<u64>,
    /// Added in format 4: each confined step and its sandbox, resolved at
    /// submit (a step not listed runs unconfined).
    pub sandboxes: Vec<(String, SandboxSpec)>,
}

impl PlanRecord {
    /// The sandbox of step `id`, if it has one.
    pub fn sandbox_of(&self, id: &str) -> Option<&SandboxSpec> {
        self.sandboxes.iter().find(|(s, _)| s == id).map(|(_, b)| b)
    }
}

/// Format 4, before steps could be idempotent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRecordV4 {
    pub id: u64,
    pub name: Option<String>,
    pub state: PlanState,
    pub reason: Option<String>,
    pub created_ms: u64,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    pub revision: u64,
    pub idempotency_key: Option<String>,
    pub steps: Vec<StepRecordV3>,
    pub chain: String,
    pub depth: u32,
    pub restarted_from: Option<u64>,
    pub sandboxes: Vec<(String, SandboxSpec)>,
}

impl From<PlanRecordV4> for PlanRecord {
    fn from(v4: PlanRecordV4) -> PlanRecord {
        PlanRecord {
            id: v4.id,
            name: v4.name,
            state: v4.state,
            reason: v4.reason,
            created_ms: v4.created_ms,
            started_ms: v4.started_ms,
            finished_ms: v4.finished_ms,
            revision: v4.revision,
            idempotency_key: v4.idempotency_key,
            steps: v4.steps.into_iter().map(StepRecord::from).collect(),
            chain: v4.chain,
            depth: v4.depth,
            restarted_from: v4.restarted_from,
            sandboxes: v4.sandboxes,
        }
    }
}

/// Format 3, before steps had a sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRecordV3 {
    pub id: u64,
    pub name: Option<String>,
    pub state: PlanState,
    pub reason: Option<String>,
    pub created_ms: u64,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    pub revision: u64,
    pub idempotency_key: Option<String>,
    pub steps: Vec<StepRecordV3>,
    pub chain: String,
    pub depth: u32,
    pub restarted_from: Option<u64>,
}

impl From<PlanRecordV3> for PlanRecord {
    fn from(v3: PlanRecordV3) -> PlanRecord {
        PlanRecord {
            id: v3.id,
            name: v3.name,
            state: v3.state,
            reason: v3.reason,
            created_ms: v3.created_ms,
            started_ms: v3.started_ms,
            finished_ms: v3.finished_ms,
            revision: v3.revision,
            idempotency_key: v3.idempotency_key,
            steps: v3.steps.into_iter().map(StepRecord::from).collect(),
            chain: v3.chain,
            depth: v3.depth,
            restarted_from: v3.restarted_from,
            sandboxes: Vec::new(),
        }
    }
}

/// Format 2, before steps had an environment and plans a predecessor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRecordV2 {
    pub id: u64,
    pub name: Option<String>,
    pub state: PlanState,
    pub reason: Option<String>,
    pub created_ms: u64,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    pub revision: u64,
    pub idempotency_key: Option<String>,
    pub steps: Vec<StepRecordV2>,
    pub chain: String,
    pub depth: u32,
}

impl From<PlanRecordV2> for PlanRecord {
    fn from(v2: PlanRecordV2) -> PlanRecord {
        PlanRecord {
            id: v2.id,
            name: v2.name,
            state: v2.state,
            reason: v2.reason,
            created_ms: v2.created_ms,
            started_ms: v2.started_ms,
            finished_ms: v2.finished_ms,
            revision: v2.revision,
            idempotency_key: v2.idempotency_key,
            steps: v2.steps.into_iter().map(StepRecord::from).collect(),
            chain: v2.chain,
            depth: v2.depth,
            restarted_from: None,
            sandboxes: Vec::new(),
        }
    }
}

/// Format 1, before plans knew their chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRecordV1 {
    pub id: u64,
    pub name: Option<String>,
    pub state: PlanState,
    pub reason: Option<String>,
    pub created_ms: u64,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    pub revision: u64,
    pub idempotency_key: Option<String>,
    pub steps: Vec<StepRecordV2>,
}

impl From<PlanRecordV1> for PlanRecord {
    fn from(v1: PlanRecordV1) -> PlanRecord {
        PlanRecord::from(PlanRecordV2 {
            chain: format_id(v1.id),
            depth: 0,
            id: v1.id,
            name: v1.name,
            state: v1.state,
            reason: v1.reason,
            created_ms: v1.created_ms,
            started_ms: v1.started_ms,
            finished_ms: v1.finished_ms,
            revision: v1.revision,
            idempotency_key: v1.idempotency_key,
            steps: v1.steps,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StepAction {
    Run {
        command: String,
    },
    Agent {
        prompt: String,
        session: Option<String>,
    },
}

impl StepAction {
    /// The step kind as clients see it.
    pub fn kind(&self) -> &'static str {
        match self {
            StepAction::Run { .. } => "run",
            StepAction::Agent { .. } => "agent",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub id: String,
    pub action: StepAction,
    pub deps: Vec<String>,
    pub timeout_secs: u64,
    pub max_attempts: u32,
    pub workdir: String,
    pub state: StepState,
    pub attempts: u32,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// Process group of the running attempt, to clean up after a crash.
    pub pgid: Option<i32>,
    pub has_log: bool,
    /// Added in format 3: set in the step's environment (the plan's `env`
    /// under the step's own), sorted by name.
    pub env: Vec<(String, String)>,
    /// Added in format 5: may run again after its node was lost mid-run.
    pub idempotent: bool,
}

/// A step of formats 3 and 4.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecordV3 {
    pub id: String,
    pub action: StepAction,
    pub deps: Vec<String>,
    pub timeout_secs: u64,
    pub max_attempts: u32,
    pub workdir: String,
    pub state: StepState,
    pub attempts: u32,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub stdout_tail: String,
    pub stderr_tail: String,
    pub pgid: Option<i32>,
    pub has_log: bool,
    pub env: Vec<(String, String)>,
}

impl From<StepRecordV3> for StepRecord {
    fn from(s: StepRecordV3) -> StepRecord {
        StepRecord {
            id: s.id,
            action: s.action,
            deps: s.deps,
            timeout_secs: s.timeout_secs,
            max_attempts: s.max_attempts,
            workdir: s.workdir,
            state: s.state,
            attempts: s.attempts,
            started_ms: s.started_ms,
            finished_ms: s.finished_ms,
            exit_code: s.exit_code,
            error: s.error,
            stdout_tail: s.stdout_tail,
            stderr_tail: s.stderr_tail,
            pgid: s.pgid,
            has_log: s.has_log,
            env: s.env,
            idempotent: false,
        }
    }
}

/// A step of formats 1 and 2.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecordV2 {
    pub id: String,
    pub action: StepAction,
    pub deps: Vec<String>,
    pub timeout_secs: u64,
    pub max_attempts: u32,
    pub workdir: String,
    pub state: StepState,
    pub attempts: u32,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub stdout_tail: String,
    pub stderr_tail: String,
    pub pgid: Option<i32>,
    pub has_log: bool,
}

impl From<StepRecordV2> for StepRecord {
    fn from(s: StepRecordV2) -> StepRecord {
        StepRecord {
            id: s.id,
            action: s.action,
            deps: s.deps,
            timeout_secs: s.timeout_secs,
            max_attempts: s.max_attempts,
            workdir: s.workdir,
            state: s.state,
            attempts: s.attempts,
            started_ms: s.started_ms,
            finished_ms: s.finished_ms,
            exit_code: s.exit_code,
            error: s.error,
            stdout_tail: s.stdout_tail,
            stderr_tail: s.stderr_tail,
            pgid: s.pgid,
            has_log: s.has_log,
            env: Vec::new(),
            idempotent: false,
        }
    }
}

/// Plan ids are `p<number>`; numbers grow with submission order.
pub use crate::kernel::ids::plan::{format as format_id, parse as parse_id};

/// The job (`j<N>`) whose fire submitted the plan with idempotency key
/// `key` (the jobs room's `fire_key` and `attempt_key` write them:
/// `job jN at <ms>` or `job jN manual <ms>`, a retry's with ` retry <k>`):
/// how a job's run is recognised. It lives here, not in the jobs room,
/// because the scheduler marks a job's runs and plans may not depend on
/// jobs.
pub fn job_of_key(key: &str) -> Option<String> {
    let rest = key.strip_prefix("job ")?;
    let (id, rest) = rest.split_once(' ')?;
    let instant = rest
        .strip_prefix("at ")
        .or_else(|| rest.strip_prefix("manual "))?;
    // A retry's key: `job jN at <ms> retry <k>`.
    let instant = match instant.split_once(" retry ") {
        Some((at, k)) if k.parse::<u32>().is_ok() => at,
        _ => instant,
    };
    let job_id = id.strip_prefix('j').and_then(|n| n.parse::<u64>().ok());
    (job_id.is_some() && instant.parse::<u64>().is_ok()).then(|| id.to_string())
}

impl PlanRecord {
    /// The view clients see; see [`PlanRecord::into_view`] when the record
    /// is not needed afterwards.
    pub fn view(&self, log_dir: &std::path::Path) -> PlanView {
        PlanView {
            id: format_id(self.id),
            name: self.name.clone(),
            state: self.state,
            reason: self.reason.clone(),
            created_ms: self.created_ms,
            started_ms: self.started_ms,
            finished_ms: self.finished_ms,
            revision: self.revision,
            chain: self.chain.clone(),
            depth: self.depth,
            waiting: None,
            queue_position: None,
            restarted_from: self.restarted_from.map(format_id),
            steps: self
                .steps
                .iter()
                .map(|s| StepView {
                    id: s.id.clone(),
                    kind: s.action.kind().into(),
                    text: match &s.action {
                        StepAction::Run { command } => command.clone(),
                        StepAction::Agent { prompt, .. } => prompt.clone(),
                    },
                    deps: s.deps.clone(),
                    state: s.state,
                    attempts: s.attempts,
                    max_attempts: s.max_attempts,
                    started_ms: s.started_ms,
                    finished_ms: s.finished_ms,
                    exit_code: s.exit_code,
                    error: s.error.clone(),
                    stdout_tail: s.stdout_tail.clone(),
                    stderr_tail: s.stderr_tail.clone(),
                    log_path: s.has_log.then(|| step_log_string(log_dir, self.id, &s.id)),
                })
                .collect(),
        }
    }

    /// Like [`PlanRecord::view`], moving the fields instead of copying them.
    pub fn into_view(self, log_dir: &std::path::Path) -> PlanView {
        let id = self.id;
        PlanView {
            id: format_id(id),
            name: self.name,
            state: self.state,
            reason: self.reason,
            created_ms: self.created_ms,
            started_ms: self.started_ms,
            finished_ms: self.finished_ms,
            revision: self.revision,
            chain: self.chain,
            depth: self.depth,
            waiting: None,
            queue_position: None,
            restarted_from: self.restarted_from.map(format_id),
            steps: self
                .steps
                .into_iter()
                .map(|s| {
                    let log_path = s.has_log.then(|| step_log_string(log_dir, id, &s.id));
                    let kind = s.action.kind().into();
                    StepView {
                        id: s.id,
                        kind,
                        text: match s.action {
                            StepAction::Run { command } => command,
                            StepAction::Agent { prompt, .. } => prompt,
                        },
                        deps: s.deps,
                        state: s.state,
                        attempts: s.attempts,
                        max_attempts: s.max_attempts,
                        started_ms: s.started_ms,
                        finished_ms: s.finished_ms,
                        exit_code: s.exit_code,
                        error: s.error,
                        stdout_tail: s.stdout_tail,
                        stderr_tail: s.stderr_tail,
                        log_path,
                    }
                })
                .collect(),
        }
    }

    pub fn summary(&self) -> PlanSummary {
        PlanSummary {
            chain: self.chain.clone(),
            id: format_id(self.id),
            name: self.name.clone(),
            state: self.state,
            created_ms: self.created_ms,
            finished_ms: self.finished_ms,
            steps_total: self.steps.len() as u32,
            steps_done: self.count_steps(StepState::is_terminal),
            queue_position: None,
            steps_succeeded: self.count_steps(|s| s == StepState::Succeeded),
            steps_failed: self.count_steps(|s| s == StepState::Failed),
            steps_skipped: self.count_steps(|s| s == StepState::Skipped),
        }
    }

    /// The spec this plan was made from, with defaults filled in and the
    /// plan's env merged into each step's: what `plan_restart` submits and
    /// what a reused idempotency key is compared with.
    pub fn spec(&self) -> PlanSpec {
        PlanSpec {
            name: self.name.clone(),
            env: Default::default(),
            sandbox: None,
            steps: self
                .steps
                .iter()
                .map(|s| {
                    let (run, prompt, session) = match &s.action {
                        StepAction::Run { command } => (Some(command.clone()), None, None),
                        StepAction::Agent { prompt, session } => {
                            (None, Some(prompt.clone()), session.clone())
                        }
                    };
                    StepSpec {
                        id: s.id.clone(),
                        run,
                        prompt,
                        session,
                        deps: s.deps.clone(),
                        timeout_secs: Some(s.timeout_secs),
                        max_attempts: Some(s.max_attempts),
                        workdir: Some(s.workdir.clone()),
                        env: s.env.iter().cloned().collect(),
                        sandbox: self.sandbox_of(&s.id).map(|b| b.profile.name().to_string()),
                        idempotent: s.idempotent,
                    }
                })
                .collect(),
        }
    }

    fn count_steps(&self, pred: impl Fn(StepState) -> bool) -> u32 {
        self.steps.iter().filter(|s| pred(s.state)).count() as u32
    }

    pub fn step_index(&self, id: &str) -> Option<usize> {
        self.steps.iter().position(|s| s.id == id)
    }
}

pub fn plan_log_dir(log_dir: &std::path::Path, plan: u64) -> std::path::PathBuf {
    log_dir.join(format_id(plan))
}

pub fn step_log_path(log_dir: &std::path::Path, plan: u64, step: &str) -> std::path::PathBuf {
    plan_log_dir(log_dir, plan).join(format!("{step}.log"))
}

/// [`step_log_path`] as the string views carry, built in one allocation.
fn step_log_string(log_dir: &std::path::Path, plan: u64, step: &str) -> String {
    use std::fmt::Write;
    let dir = log_dir.to_string_lossy();
    let mut out = String::with_capacity(dir.len() + step.len() + 28);
    out.push_str(&dir);
    if !out.is_empty() && !out.ends_with('/') {
        out.push('/');
    }
    let _ = write!(out, "p{plan}/{step}.log");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn into_view_is_the_same_view() {
        let step = |id: &str, action, has_log| StepRecord {
            id: id.into(),
            action,
            deps: vec!["a".into()],
            timeout_secs: 5,
            max_attempts: 2,
            workdir: "/tmp".into(),
            state: StepState::Failed,
            attempts: 1,
            started_ms: Some(3),
            finished_ms: Some(4),
            exit_code: Some(2),
            error: Some("exit code 2".into()),
            stdout_tail: "out".into(),
            stderr_tail: "err".into(),
            pgid: Some(9),
            has_log,
            env: vec![("A".into(), "1".into())],
            idempotent: true,
        };
        let rec = PlanRecord {
            id: 7,
            name: Some("n".into()),
            state: PlanState::Failed,
            reason: Some("step `b` failed".into()),
            created_ms: 1,
            started_ms: Some(2),
            finished_ms: Some(5),
            revision: 6,
            idempotency_key: Some("k".into()),
            chain: "p1".into(),
            depth: 1,
            restarted_from: Some(3),
            sandboxes: Vec::new(),
            steps: vec![
                step(
                    "a",
                    StepAction::Run {
                        command: "echo".into(),
                    },
                    true,
                ),
                step(
                    "b",
                    StepAction::Agent {
                        prompt: "think".into(),
                        session: None,
                    },
                    false,
                ),
            ],
        };
        let dir = std::path::Path::new("/state/logs");
        assert_eq!(rec.clone().into_view(dir), rec.view(dir));
    }

    #[test]
    fn log_path_string_matches_the_path() {
        for dir in ["/var/lib/flyto/logs", "/var/lib/flyto/logs/", "logs", "/"] {
            let dir = std::path::Path::new(dir);
            assert_eq!(
                step_log_string(dir, 42, "build.x"),
                step_log_path(dir, 42, "build.x").display().to_string()
            );
        }
    }
}
