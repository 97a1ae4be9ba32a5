//! plans: the SchedulerActor and its plan queue — validation, the step DAG,
//! persisted transitions, durable acks, recovery after a crash, cancel and
//! the TTL sweep, restart and remove. It runs `run` steps through
//! `tools::process`. Child plans of a running chain get a slot per level
//! beyond `max_parallel_plans`. Plans are kept behind one trait
//! (`store/`: `PlanStore`, a sled and a PostgreSQL backend side by side);
//! the read side (`reader.rs`) answers through it what a pending plan
//! waits for and its queue position, and resolves names.
//!
//! **Invariant**: the scheduler never reports a state it has not persisted
//! and synced: replies and published views are sent from `after_sync`
//! continuations. It never sees a connection; the daemon translates.

pub mod agent_step;
pub mod cluster;
pub mod dag;
pub mod model;
pub mod reader;
pub mod scheduler;
pub mod shared_scheduler;
pub mod store;
pub mod validate;

pub use reader::PlanReader;
pub use scheduler::{EarlyReply, SchedulerActor, SchedulerArgs, SchedulerMsg};
pub use store::{
    PgPlans, PlanChanges, PlanCounts, PlanRecords, PlanStore, SledPlanStore, SledPlans,
};

pub use crate::kernel::{AnswerFut, NoPlanSockets, PlanSockets, Reject};
use std::time::Duration;

/// Registry name of the scheduler actor; a restarted one takes it over.
pub const SCHEDULER_NAME: &str = crate::kernel::names::SCHEDULER;
/// The scheduler, found by its name.
pub const SCHEDULER: crate::kernel::Name<SchedulerMsg> = crate::kernel::Name::new(SCHEDULER_NAME);

#[derive(Debug, Clone)]
pub struct PlanConfig {
    pub max_parallel_plans: usize,
    /// Per plan.
    pub max_parallel_steps: usize,
    pub plan_ttl: Duration,
    pub default_step_timeout: Duration,
    pub default_max_attempts: u32,
    pub max_steps: usize,
    pub kill_grace: Duration,
    pub output_tail_bytes: usize,
    pub log_max_bytes: u64,
    pub default_workdir: String,
    /// The control socket; children get a scoped one from [`PlanSockets`]
    /// and this only when that fails.
    pub plan_socket: String,
    /// How deep plans submitted by agents and steps may nest.
    pub max_depth: u32,
    /// `[plans] sandbox`: the profile of `run` steps of plans users submit
    /// when the plan names none; and `[sandbox] network` for them.
    pub sandbox: crate::tools::sandbox::Profile,
    pub sandbox_network: bool,
}

impl Default for PlanConfig {
    fn default() -> Self {
        PlanConfig {
            max_parallel_plans: 1,
            max_parallel_steps: 1,
            plan_ttl: Duration::from_secs(24 * 3600),
            default_step_timeout: Duration::from_secs(3600),
            default_max_attempts: 3,
            max_steps: 1000,
            kill_grace: Duration::from_secs(2),
            output_tail_bytes: 4096,
            log_max_bytes: 8 * 1024 * 1024,
            default_workdir: std::env::var("HOME").unwrap_or_else(|_| "/".into()),
            plan_socket: String::new(),
            max_depth: 3,
            sandbox: crate::tools::sandbox::Profile::Off,
            sandbox_network: true,
        }
    }
}

/// Where a submitted plan comes from when a step's or an agent's child
/// submits it: its chain, and its depth (one below the submitter).
#[derive(Debug, Clone, PartialEq)]
pub struct Origin {
    pub chain: String,
    pub depth: u32,
    /// The submitter's confinement, which its plan's steps keep.
    pub sandbox: Option<crate::tools::sandbox::SandboxSpec>,
}

/// The `job_fired` and `plan_finished` hooks, and the place (workdir,
/// environment, sandbox) they run in for a plan.
#[derive(Clone)]
pub struct PlanHooks {
    pub hooks: std::sync::Arc<crate::hooks::Hooks>,
    pub env:
        std::sync::Arc<dyn Fn(&flyto_protocol::PlanSpec) -> crate::hooks::HookEnv + Send + Sync>,
}

impl PlanHooks {
    /// Runs the `plan_finished` hooks of a plan that ended, as a task on
    /// `rt` (callers may be on the store's commit thread): its id, name,
    /// state, reason and steps.
    pub fn finished(&self, rec: &model::PlanRecord, now_ms: u64, rt: &tokio::runtime::Handle) {
        use crate::hooks::HookEvent;
        if !self.hooks.any(HookEvent::PlanFinished, None) {
            return;
        }
        let steps: Vec<serde_json::Value> = rec
            .steps
            .iter()
            .map(|s| {
                serde_json::json!({
                    "id": s.id,
                    "state": s.state.as_str(),
                    "exit_code": s.exit_code,
                })
            })
            .collect();
        let input = serde_json::json!({
            "plan": model::format_id(rec.id),
            "name": rec.name,
            "state": rec.state.as_str(),
            "reason": rec.reason,
            "steps": steps,
        });
        let (hooks, env) = (self.hooks.clone(), (self.env)(&rec.spec()));
        rt.spawn(async move {
            hooks
                .run(
                    HookEvent::PlanFinished,
                    None,
                    input,
                    &env,
                    move || now_ms,
                    std::sync::Arc::new(|r: crate::hooks::Ran| {
                        tracing::info!(hook = %r.name, outcome = %r.outcome, "plan_finished hook ran")
                    }),
                )
                .await;
        });
    }
}
