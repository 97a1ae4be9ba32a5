//! Jobs (schedules that submit plans) and their fires.

use super::*;

/// What `job_create` and `job_update` set; `None` leaves a field as it is
/// (on create: its default).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct JobSpec {
    pub schedule: Option<String>,
    pub tz: Option<String>,
    /// One agent step with this prompt, or `plan`.
    pub prompt: Option<String>,
    pub plan: Option<PlanSpec>,
    /// `isolated` or `persistent`.
    pub mode: Option<String>,
    pub name: Option<String>,
    pub workdir: Option<String>,
    #[serde(default, deserialize_with = "timeout_secs")]
    pub timeout_secs: Option<u64>,
    /// RFC 3339, or a local date and time in the job's zone.
    pub expires: Option<String>,
    pub notify: Option<String>,
    pub max_consecutive_failures: Option<u32>,
    #[serde(default, deserialize_with = "jitter_secs")]
    pub jitter_secs: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    pub id: String,
    pub name: Option<String>,
    pub schedule: String,
    pub tz: String,
    pub mode: String,
    /// `active`, `paused`, or `stopped: <why>`.
    pub state: String,
    /// RFC 3339 in the job's zone, and in UTC.
    pub next_fire: Option<String>,
    pub next_fire_utc: Option<String>,
    pub last_outcome: Option<String>,
    pub consecutive_failures: u32,
    pub max_consecutive_failures: u32,
    pub workdir: Option<String>,
    /// The prompt, or "plan: <n> steps".
    pub what: String,
    pub timeout_secs: Option<u64>,
    pub expires: Option<String>,
    pub created_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FireView {
    /// The scheduled instant (RFC 3339 in the job's zone).
    pub instant: String,
    pub at_ms: u64,
    pub manual: bool,
    /// `submitted`, `skipped (still running)`, `missed 3 (first …)`, …
    pub outcome: String,
    pub plan: Option<String>,
    /// The plan's state now, when it still exists.
    pub plan_state: Option<String>,
    pub duration_ms: Option<u64>,
}
