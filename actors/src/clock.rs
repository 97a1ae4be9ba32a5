//! Time for everything that schedules or expires, behind a trait so tests can
//! move it by hand.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// The system clock shifted by a fixed offset: lets a test move a whole
/// daemon forward (or back) in time without touching the machine's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct OffsetClock {
    pub offset_ms: i64,
}

impl Clock for OffsetClock {
    fn now_ms(&self) -> u64 {
        SystemClock.now_ms().saturating_add_signed(self.offset_ms)
    }
}

/// A clock that only moves when told to.
#[derive(Debug, Default, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn new(start_ms: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(start_ms)))
    }
    pub fn advance_ms(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_clock_shifts_the_system_clock() {
        let hour = 3_600_000;
        let before = SystemClock.now_ms();
        let shifted = OffsetClock { offset_ms: hour }.now_ms();
        let after = SystemClock.now_ms();
        assert!(shifted >= before + hour as u64 && shifted <= after + hour as u64);
        let back = OffsetClock { offset_ms: -hour }.now_ms();
        assert!(back <= after - hour as u64);
        // Before the epoch saturates instead of wrapping around.
        assert_eq!(
            OffsetClock {
                offset_ms: i64::MIN
            }
            .now_ms(),
            0
        );
    }
}
