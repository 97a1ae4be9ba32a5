//! The context budget of a model: effective window, warning and
//! compaction thresholds (docs/sessions.md, "Long sessions").

use crate::llm::ModelProfile;
use flyto_protocol::ContextView;

/// Output room kept free: the profile's max output, at most this.
const OUTPUT_RESERVE_CAP: u64 = 20_000;
/// Compaction starts this far below the effective window…
const COMPACT_BUFFER: u64 = 13_000;
/// …and a warning this far below it.
const WARN_BUFFER: u64 = 20_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub context_window: u64,
    /// Context window − min(max output, 20 K).
    pub effective: u64,
    pub warn_at: u64,
    pub compact_at: u64,
}

impl Budget {
    /// Small windows (a local 8 K model) cannot spare 13 K: the buffers
    /// are then a fifth and three tenths of the effective window.
    pub fn new(context_window: u64, max_output: u64) -> Budget {
        let effective = context_window.saturating_sub(max_output.min(OUTPUT_RESERVE_CAP));
        Budget {
            context_window,
            effective,
            compact_at: effective.saturating_sub(COMPACT_BUFFER.min(effective / 5)),
            warn_at: effective.saturating_sub(WARN_BUFFER.min(effective * 3 / 10)),
        }
    }

    pub fn for_profile(p: &ModelProfile) -> Budget {
        Budget::new(u64::from(p.context_window), u64::from(p.max_output))
    }

    /// Room for the protected tail of a summary compaction.
    pub fn tail_tokens(&self) -> u64 {
        self.effective / 8
    }

    /// Where the cheap step alone must bring the context to count: well
    /// below the threshold, or it would fire again a few turns later and
    /// rewrite the prompt (and its provider cache) each time.
    pub fn trim_target(&self) -> u64 {
        self.compact_at * 3 / 4
    }

    /// Room for the protected head (system + first exchange).
    pub fn head_tokens(&self) -> u64 {
        self.effective / 10
    }

    /// Recent messages the cheap step leaves alone.
    pub fn untouched_tokens(&self) -> u64 {
        self.effective * 2 / 5
    }

    pub fn view(&self, tokens: u64, estimated: u64) -> ContextView {
        ContextView {
            tokens,
            estimated,
            context_window: self.context_window,
            effective_window: self.effective,
            warn_at: self.warn_at,
            compact_at: self.compact_at,
            ..ContextView::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_windows_use_the_fixed_buffers() {
        let b = Budget::new(128_000, 8_192);
        assert_eq!(b.effective, 119_808);
        assert_eq!(b.compact_at, 106_808);
        assert_eq!(b.warn_at, 99_808);
        // A huge max output only reserves 20 K.
        assert_eq!(Budget::new(200_000, 64_000).effective, 180_000);
    }

    #[test]
    fn small_windows_scale_the_buffers() {
        let b = Budget::new(8_192, 2_048);
        assert_eq!(b.effective, 6_144);
        assert!(b.warn_at < b.compact_at && b.compact_at < b.effective);
        assert_eq!(Budget::new(0, 0).compact_at, 0);
    }
}
