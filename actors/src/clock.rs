//! Time for everything that schedules or expires, behind a trait so tests can
//! move it by hand.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::watch;

pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;

    /// Changes each time the clock is set rather than running on (an NTP
    /// step, `date -s`, a resume that corrects the time): whoever sleeps
    /// until a wall-clock instant must look again. `None`: never reported.
    fn jumps(&self) -> Option<watch::Receiver<u64>> {
        None
    }
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

    fn jumps(&self) -> Option<watch::Receiver<u64>> {
        system_jumps()
    }
}

/// One thread per process blocks on a timerfd armed with
/// `TFD_TIMER_CANCEL_ON_SET`: the kernel cancels it whenever the real-time
/// clock is set, which is the only reliable way to hear of it (a jump cannot
/// be told from a long sleep by looking at the time).
fn system_jumps() -> Option<watch::Receiver<u64>> {
    static JUMPS: OnceLock<Option<watch::Sender<u64>>> = OnceLock::new();
    JUMPS
        .get_or_init(|| match watch_clock_sets() {
            Ok(tx) => Some(tx),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "cannot watch for changes of the system clock; after one, timers catch up within 30 s"
                );
                None
            }
        })
        .as_ref()
        .map(watch::Sender::subscribe)
}

fn watch_clock_sets() -> std::io::Result<watch::Sender<u64>> {
    use nix::errno::Errno;
    use nix::sys::time::TimeSpec;
    use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

    let fd = TimerFd::new(ClockId::CLOCK_REALTIME, TimerFlags::TFD_CLOEXEC)?;
    // An absolute deadline far off: it never expires, it only gets cancelled.
    let arm = |fd: &TimerFd| {
        let far = SystemClock.now_ms() / 1000 + 100 * 365 * 86_400;
        fd.set(
            Expiration::OneShot(TimeSpec::new(far as i64, 0)),
            TimerSetTimeFlags::TFD_TIMER_ABSTIME | TimerSetTimeFlags::TFD_TIMER_CANCEL_ON_SET,
        )
    };
    arm(&fd)?;
    let (tx, _) = watch::channel(0u64);
    let sender = tx.clone();
    std::thread::Builder::new()
        .name("clock-jumps".into())
        .spawn(move || {
            let mut buf = [0u8; 8];
            loop {
                match nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(&fd)), &mut buf) {
                    Err(Errno::ECANCELED) => {
                        sender.send_modify(|n| *n += 1);
                        if let Err(e) = arm(&fd) {
                            tracing::warn!(error = %e, "cannot re-arm the clock watch; after the next clock change, timers catch up within 30 s");
                            return;
                        }
                    }
                    Err(Errno::EINTR) => {}
                    // The far deadline passed (a clock set a century ahead):
                    // that is a jump too.
                    Ok(_) => {
                        sender.send_modify(|n| *n += 1);
                        if arm(&fd).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the clock watch stopped; timers catch up within 30 s of a clock change");
                        return;
                    }
                }
            }
        })?;
    Ok(tx)
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

    fn jumps(&self) -> Option<watch::Receiver<u64>> {
        system_jumps()
    }
}

/// A clock that only moves when told to.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
    jumps: Arc<watch::Sender<u64>>,
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new(0)
    }
}

impl ManualClock {
    pub fn new(start_ms: u64) -> Self {
        ManualClock {
            now: Arc::new(AtomicU64::new(start_ms)),
            jumps: Arc::new(watch::channel(0).0),
        }
    }
    /// Time passing, as a paused tokio clock would see it.
    pub fn advance_ms(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
    /// The clock being set to `ms`, as `date -s` would: reported to
    /// [`Clock::jumps`].
    pub fn set_ms(&self, ms: u64) {
        self.now.store(ms, Ordering::SeqCst);
        self.jumps.send_modify(|n| *n += 1);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    fn jumps(&self) -> Option<watch::Receiver<u64>> {
        Some(self.jumps.subscribe())
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
