//! compaction: keeps long sessions inside their model's context window.
//! It owns the token estimate (`estimate.rs`), the budget and thresholds
//! (`budget.rs`), the model-visible window of a compacted session
//! (`window.rs`), the tiered summary (`summary.rs`) and the per-project
//! circuit breaker (`breaker.rs`, the `BreakerActor`).
//!
//! Compaction never deletes: it moves the window (a protected head, a
//! summary message, and the messages from `context_base_idx` on) and
//! shortens old tool output in what the model sees. The transcript keeps
//! every message. It touches no storage of its own except the breaker's;
//! the session persists the [`ContextState`] it gets back.

pub mod breaker;
pub mod budget;
pub mod estimate;
pub mod summary;
pub mod window;

pub use budget::Budget;
pub use summary::{SKILL_PIN, Summarizer, SummaryFuture, Tier, skill_pins as summary_skill_pins};

use crate::llm::{LlmError, Message, Usage};
use estimate::messages_tokens;
use serde::{Deserialize, Serialize};

/// What a session keeps about its window besides `context_base_idx`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ContextState {
    /// Tokens of the window as of the last provider call (its reported
    /// input + output), or as estimated after a compaction or reset.
    pub counted_tokens: u64,
    /// Estimate of what was appended since.
    pub estimated_tokens: u64,
    /// Tool output in messages below this index is shown shortened.
    pub trim_below_idx: u64,
    /// The summarised span's protected head, `[head_start, head_end)`.
    pub head_start_idx: u64,
    pub head_end_idx: u64,
    /// The summariser's text; the model sees it wrapped by `summary_text`.
    pub summary: Option<String>,
    /// Constraints, paths and ids pinned verbatim.
    pub pinned: Vec<String>,
    /// The user's latest request when it fell inside the summarised span.
    pub latest_request: Option<String>,
    pub compactions: u64,
}

impl ContextState {
    pub fn tokens(&self) -> u64 {
        self.counted_tokens + self.estimated_tokens
    }

    /// The summary message as the model sees it.
    pub fn summary_message(&self, base_idx: u64) -> Option<String> {
        self.summary.as_deref().map(|s| {
            summary::summary_text(
                s,
                self.head_end_idx,
                base_idx,
                self.compactions,
                &self.pinned,
                self.latest_request.as_deref(),
            )
        })
    }

    /// The window as the model sees it, from the head (loaded only when
    /// there is a summary) and the messages from `base_idx` on.
    pub fn window(
        &self,
        base_idx: u64,
        head: &[(u64, Message)],
        tail: &[(u64, Message)],
    ) -> Vec<Message> {
        let summary = self.summary_message(base_idx);
        window::assemble(head, summary.as_deref(), tail, self.trim_below_idx)
    }

    /// A window moved by `session_reset`: no summary, counted afresh.
    pub fn reset(&self, fixed_tokens: u64, visible: &[Message]) -> ContextState {
        ContextState {
            counted_tokens: fixed_tokens + messages_tokens(visible),
            compactions: self.compactions,
            ..ContextState::default()
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    #[error(
        "nothing to summarise: the recent turns alone fill the window; start over with `flytoctl session_reset --soft` or `--hard`"
    )]
    Nothing,
    #[error("the summary call failed: {0}")]
    Llm(LlmError),
    #[error(
        "the compaction did not shrink the context below the compaction threshold ({before} → {after} tokens, threshold {threshold}); the session keeps its window"
    )]
    NoShrink {
        before: u64,
        after: u64,
        threshold: u64,
    },
}

impl CompactError {
    /// Rate limits and overloads say nothing about this session, and
    /// finding nothing to summarise cost no call: neither counts towards
    /// opening the breaker.
    pub fn counts_as_failure(&self) -> bool {
        !matches!(
            self,
            CompactError::Nothing
                | CompactError::Llm(LlmError::RateLimited { .. } | LlmError::Overloaded { .. })
        )
    }
}

/// What compaction works on: the session's window as it is now.
pub struct Input<'a> {
    pub budget: Budget,
    pub state: &'a ContextState,
    pub base_idx: u64,
    /// System prompt and tool schemas.
    pub fixed_tokens: u64,
    /// The protected head, when there is a summary already.
    pub head: &'a [(u64, Message)],
    /// Messages from `base_idx` on.
    pub visible: &'a [(u64, Message)],
}

/// A compaction to persist: the new state and window start.
#[derive(Debug)]
pub struct Applied {
    pub state: ContextState,
    pub base_idx: u64,
    pub tier: &'static str,
    pub before: u64,
    pub after: u64,
    pub calls: u32,
    pub usage: Usage,
}

impl Input<'_> {
    fn untouched_from(&self) -> u64 {
        window::untouched_start(self.visible, self.budget.untouched_tokens())
    }
}

/// The cheap step: shorten old tool output. `Some` when that alone brings
/// the context well below the threshold (`Budget::trim_target`).
pub fn trim_step(input: &Input<'_>) -> Option<Applied> {
    let before = input.state.tokens();
    let from = input.state.trim_below_idx;
    let to = input.untouched_from().max(from);
    let saved = window::trim_savings(input.visible, from, to);
    let after = before.saturating_sub(saved);
    if saved == 0 || after > input.budget.trim_target() {
        return None;
    }
    Some(Applied {
        state: ContextState {
            counted_tokens: after,
            estimated_tokens: 0,
            trim_below_idx: to,
            ..input.state.clone()
        },
        base_idx: input.base_idx,
        tier: "trim",
        before,
        after,
        calls: 0,
        usage: Usage::default(),
    })
}

/// The tiered summary, with old tool output also shortened.
pub async fn summary_step(
    input: &Input<'_>,
    model: &dyn Summarizer,
) -> Result<Applied, CompactError> {
    let before = input.state.tokens();
    let trim_below_idx = input.untouched_from().max(input.state.trim_below_idx);
    let (head, head_start, head_end, floor): (Vec<(u64, Message)>, u64, u64, u64) =
        if input.state.summary.is_some() {
            (
                input.head.to_vec(),
                input.state.head_start_idx,
                input.state.head_end_idx,
                input.base_idx,
            )
        } else {
            let end = window::head_end(input.visible, input.budget.head_tokens());
            let head = input
                .visible
                .iter()
                .filter(|(i, _)| *i < end)
                .cloned()
                .collect();
            (
                head,
                input.base_idx,
                end.max(input.base_idx),
                end.max(input.base_idx),
            )
        };
    let tail_start = window::tail_start(input.visible, floor, input.budget.tail_tokens());
    let middle: Vec<(u64, Message)> = input
        .visible
        .iter()
        .filter(|(i, _)| *i >= floor && *i < tail_start)
        .cloned()
        .collect();
    if middle.is_empty() {
        return Err(CompactError::Nothing);
    }
    let latest_request = input
        .visible
        .iter()
        .rev()
        .find(|(_, m)| window::is_user_turn(m))
        .filter(|(i, _)| *i >= head_end && *i < tail_start)
        .map(|(_, m)| summary::user_text(m));
    let mut found = summary::skill_pins(&middle);
    found.extend(summary::pin_candidates(&middle));
    let pins = summary::merge_pins(&input.state.pinned, found);
    let written = summary::summarize(model, input.state.summary.as_deref(), &middle)
        .await
        .map_err(CompactError::Llm)?;
    let state = ContextState {
        counted_tokens: 0,
        estimated_tokens: 0,
        trim_below_idx,
        head_start_idx: head_start,
        head_end_idx: head_end,
        summary: Some(written.text),
        pinned: pins,
        latest_request,
        compactions: input.state.compactions + 1,
    };
    let tail: Vec<(u64, Message)> = input
        .visible
        .iter()
        .filter(|(i, _)| *i >= tail_start)
        .cloned()
        .collect();
    let after = input.fixed_tokens + messages_tokens(&state.window(tail_start, &head, &tail));
    // Not under the threshold means compacting again at the next call:
    // a loop that burns money. It counts as a failure.
    if after >= before || after >= input.budget.compact_at {
        return Err(CompactError::NoShrink {
            before,
            after,
            threshold: input.budget.compact_at,
        });
    }
    Ok(Applied {
        state: ContextState {
            counted_tokens: after,
            ..state
        },
        base_idx: tail_start,
        tier: written.tier.name(),
        before,
        after,
        calls: written.calls,
        usage: written.usage,
    })
}

#[cfg(test)]
mod tests;
