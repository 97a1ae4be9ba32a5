//! Backoff between attempts: exponential with jitter, or the provider's
//! `retry-after` when it gave one. Pure arithmetic; the waiting happens in
//! the driver through `tokio::time`, so tests can pause the clock.

use super::config::RetrySettings;
use rand::Rng;
use std::time::Duration;

/// The pause after failed attempt number `attempt` (from 1), or `None`
/// when the provider's `retry-after` exceeds `max_retry_after` and the
/// caller should give up instead of stalling.
///
/// Without `retry-after`: `initial_backoff * 2^(attempt-1)`, capped at
/// `max_backoff`, of which a random half is taken off ("equal jitter"), so
/// sessions that failed together do not come back together.
pub(crate) fn delay<R: Rng>(
    settings: &RetrySettings,
    attempt: u32,
    retry_after: Option<Duration>,
    rng: &mut R,
) -> Option<Duration> {
    if let Some(wait) = retry_after {
        return (wait <= settings.max_retry_after).then_some(wait);
    }
    let exp = attempt.saturating_sub(1).min(20);
    let base = settings
        .initial_backoff
        .saturating_mul(1u32 << exp)
        .min(settings.max_backoff);
    let half = base / 2;
    let jitter_ms = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
    let jitter = Duration::from_millis(rng.gen_range(0..=jitter_ms));
    Some(half + jitter)
}
