//! dream: periodic consolidation of each project's memory. One
//! [`actor::DreamActor`] checks the gates of every known project, cheapest
//! first (enabled → `min_hours` since the last success → `min_sessions`
//! sessions with new messages since → the project's lease is free), runs
//! at most one consolidation per project at a time as a task it owns, and
//! records every check and run with its per-entry diff.
//!
//! A run works on a staging copy of the live memory (the memory room's
//! `switch::stage`), through its own tools (`tools.rs`: the dreamer reads,
//! writes and forgets in the copy and searches the transcripts of the
//! sessions since the last consolidation, read-only); its result is
//! validated (`validate.rs`) and switched in by the project's scope actor
//! in one atomic step, with the last-success time inside the new version.
//!
//! It owns `<state>/projects/<id>/dream/` (run records, staged results,
//! the lease and the backoff) and nothing else: it never writes a live
//! memory folder and never writes a session.
//!
//! **Invariant**: the live memory changes only by one atomic switch or
//! through the memory actor.

pub mod actor;
pub mod record;
pub mod run;
pub mod tools;
pub mod validate;

use std::time::Duration;
pub use validate::LossCap;

pub const DREAM_NAME: &str = crate::kernel::names::DREAM;
/// The dream actor, found by its name.
pub const DREAM: crate::kernel::Name<actor::DreamMsg> = crate::kernel::Name::new(DREAM_NAME);

/// `[dream]` in the config.
#[derive(Debug, Clone, PartialEq)]
pub struct DreamConfig {
    pub enabled: bool,
    pub check_every: Duration,
    pub min_hours: u64,
    pub min_sessions: usize,
    /// A role or profile; `fast` by default.
    pub model: String,
    pub max_calls: u32,
    /// USD; 0: no cap.
    pub max_cost_usd: f64,
    pub time_limit: Duration,
    pub max_removed: LossCap,
    /// Memory versions kept per project.
    pub keep: usize,
}

impl Default for DreamConfig {
    fn default() -> Self {
        DreamConfig {
            enabled: true,
            check_every: Duration::from_secs(600),
            min_hours: 24,
            min_sessions: 5,
            model: "fast".into(),
            max_calls: 30,
            max_cost_usd: 0.5,
            time_limit: Duration::from_secs(600),
            max_removed: LossCap::Percent(10.0),
            keep: 10,
        }
    }
}

/// Backoff after the `failures`-th failed run in a row: 1 h, 2 h, 4 h, …,
/// at most 24 h.
pub fn backoff(failures: u32) -> Duration {
    let hours = 1u64 << failures.saturating_sub(1).min(5);
    Duration::from_secs(3600 * hours.min(24))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_an_hour_to_a_day() {
        let h: Vec<u64> = (1..=7).map(|n| backoff(n).as_secs() / 3600).collect();
        assert_eq!(h, [1, 2, 4, 8, 16, 24, 24]);
    }
}
