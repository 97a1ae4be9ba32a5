//! Plan and step records as stored, and how they look to clients.

use flyto_protocol::{PlanState, PlanSummary, PlanView, StepState, StepView};
use serde::{Deserialize, Serialize};

/// Bump with a migration in `store.rs` when a record's shape changes.
pub const PLAN_FORMAT_VERSION: u32 = 1;

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
}

/// Plan ids are `p<number>`; numbers grow with submission order.
pub fn format_id(id: u64) -> String {
    format!("p{id}")
}

pub fn parse_id(s: &str) -> Option<u64> {
    s.strip_prefix('p').unwrap_or(s).parse().ok()
}

impl PlanRecord {
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
            steps: self
                .steps
                .iter()
                .map(|s| StepView {
                    id: s.id.clone(),
                    kind: match s.action {
                        StepAction::Run { .. } => "run".into(),
                        StepAction::Agent { .. } => "agent".into(),
                    },
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
                    log_path: s
                        .has_log
                        .then(|| step_log_path(log_dir, self.id, &s.id).display().to_string()),
                })
                .collect(),
        }
    }

    pub fn summary(&self) -> PlanSummary {
        PlanSummary {
            id: format_id(self.id),
            name: self.name.clone(),
            state: self.state,
            created_ms: self.created_ms,
            finished_ms: self.finished_ms,
            steps_total: self.steps.len() as u32,
            steps_done: self.steps.iter().filter(|s| s.state.is_terminal()).count() as u32,
        }
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
