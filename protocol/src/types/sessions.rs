//! Agent sessions: their events, views, transcript messages and context.

use super::*;

/// What a session's run reports, in order. Every run starts with
/// `RunStart` and ends with exactly one of `Done`, `Cancelled`, `Error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionEvent {
    RunStart {
        run: u64,
    },
    LlmStart {
        model: String,
    },
    /// Answer text as it streams.
    Text {
        delta: String,
    },
    /// Reasoning text, kept apart from the answer.
    Reasoning {
        delta: String,
    },
    /// The text/reasoning streamed since the last `LlmStart` is void (the
    /// provider call is being retried).
    Restart {
        reason: String,
    },
    ToolCall {
        id: String,
        name: String,
        /// JSON text.
        arguments: String,
    },
    ToolResult {
        id: String,
        name: String,
        /// The first 400 characters.
        preview: String,
        is_error: bool,
    },
    LlmEnd {
        input_tokens: u64,
        output_tokens: u64,
        cache_read_tokens: u64,
        cache_write_tokens: u64,
        cost_usd: f64,
    },
    /// Retries, fallbacks and other things worth telling the user.
    Notice {
        message: String,
    },
    /// A hook ran: its name, its event, how it ended (`ok`, `blocked:
    /// <reason>`, `context added`, `failed: …`, `timed out after Ns`).
    Hook {
        name: String,
        event: String,
        outcome: String,
        duration_ms: u64,
    },
    /// The run was cancelled: by a user, or (`shutdown`) because flytod
    /// is shutting down.
    Cancelled {
        message: String,
        shutdown: bool,
    },
    Error {
        message: String,
    },
    /// The context passed the compaction threshold; compaction begins.
    CompactStarted {
        tokens: u64,
        compact_at: u64,
    },
    /// The model-visible window was compacted. `tier`: `trim` (old tool
    /// output shortened), `summary`, `summary_dropped` (oldest groups
    /// left out), `summary_chunked`.
    Compacted {
        before_tokens: u64,
        after_tokens: u64,
        tier: String,
        duration_ms: u64,
    },
    /// Compaction failed; `breaker_open` when this opened (or met an open)
    /// circuit breaker.
    CompactFailed {
        message: String,
        breaker_open: bool,
    },
    /// The run ended; `message` says why and how to continue.
    Done {
        stop: String,
        message: String,
    },
    /// A `bash` command hit an `ask` rule: the run waits until a client
    /// answers with `session_approve` (or `timeout_ms` passes).
    ApprovalRequested {
        approval: u64,
        command: String,
        /// The rule and why it asks, e.g. `ask rule "git push": the user
        /// wants to approve it first`.
        rule: String,
        timeout_ms: u64,
    },
    /// How an approval request ended: `allowed`, `denied` or `timed out`
    /// (`no one attached` when the last client that could answer left).
    ApprovalResolved {
        approval: u64,
        outcome: String,
    },
}

impl SessionEvent {
    /// True for the events that end a run.
    pub fn ends_run(&self) -> bool {
        matches!(
            self,
            SessionEvent::Done { .. } | SessionEvent::Cancelled { .. } | SessionEvent::Error { .. }
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionView {
    pub id: String,
    pub name: Option<String>,
    pub workdir: String,
    /// Model profile the session uses.
    pub model: String,
    /// `idle`, `running`, `cancelling` or `error`.
    pub status: String,
    /// Why the session is in `error` (e.g. "interrupted").
    pub error: Option<String>,
    pub messages: u64,
    /// Messages before this index are history only; the model sees the rest.
    pub context_base_idx: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub chain: String,
    pub depth: u32,
    pub context: ContextView,
    /// A sub-agent's session: the session whose `agent` call started it.
    pub parent: Option<String>,
}

/// A session's context budget. `tokens` = the last provider-reported usage
/// + an estimate of what came after (`estimated` of them).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ContextView {
    pub tokens: u64,
    pub estimated: u64,
    /// The model's context window; 0 when the session's model is unknown.
    pub context_window: u64,
    /// Window − min(max output, 20 K).
    pub effective_window: u64,
    pub warn_at: u64,
    pub compact_at: u64,
    pub compactions: u64,
    /// The first message of the protected head: the model still sees
    /// `[head_from_idx, summary_from_idx)` before the summary. Equal to
    /// `summary_from_idx` (no head) when there is no summary.
    pub head_from_idx: u64,
    /// The first message the summary covers (the protected head before it
    /// stays visible); `context_base_idx` when there is no summary.
    pub summary_from_idx: u64,
    pub has_summary: bool,
}

/// One project's compaction circuit breaker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BreakerView {
    /// sha256 of the workdir, 16 hex characters.
    pub project: String,
    pub workdir: String,
    /// `closed`, `open`, or `half_open` (5 minutes after opening: the next
    /// compaction is a trial; a failure reopens it).
    pub state: String,
    pub failures: u32,
    pub last_error: Option<String>,
    /// When an open breaker closes by itself (ms since the epoch).
    pub reset_at_ms: Option<u64>,
    pub updated_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageView {
    pub idx: u64,
    /// `user` or `assistant`.
    pub role: String,
    pub blocks: Vec<BlockView>,
    /// When the message was stored (ms since the epoch); 0 when unknown
    /// (stored before flytod kept message times).
    pub created_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockView {
    Text {
        text: String,
    },
    Thinking {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        arguments: String,
    },
    ToolResult {
        call_id: String,
        content: String,
        is_error: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SessionContext {
    pub session: String,
    pub context: ContextView,
}
