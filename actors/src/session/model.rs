//! Session and message records as stored, and how they look to clients.

use crate::compaction::{Budget, ContextState};
use crate::llm::{Block, Message, Role, Usage};
use flyto_protocol::{BlockView, MessageView, SessionView};
use serde::{Deserialize, Serialize};

/// Bump with a migration in `store.rs` when a record's shape changes.
/// 2: the compaction state (`context`). 3: the sandbox choice (`sandbox`).
/// 4: where the next memory extraction's turns start (`extract_from_idx`).
/// 5: the parent of a sub-agent's session (`parent`, `agent_depth`).
pub const SESSION_FORMAT_VERSION: u32 = 5;
/// Extraction records ([`ExtractionRecord`]) have their own version.
pub const EXTRACTION_FORMAT_VERSION: u32 = 1;
/// Messages have their own version. 2: each message keeps the time it was
/// stored ([`StoredMessage`]); format 1 was a bare [`Message`].
pub const MESSAGE_FORMAT_VERSION: u32 = 2;

/// A message as format 2 stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredMessage {
    pub message: Message,
    /// ms since the epoch; 0 for messages migrated from format 1.
    pub created_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionStatus {
    Idle,
    Running,
    Error,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub id: u64,
    pub name: Option<String>,
    pub workdir: String,
    /// Profile name, or a role (`main`, `fast`) resolved at each run.
    pub model: String,
    pub status: SessionStatus,
    pub error: Option<String>,
    /// Number of stored messages; the next message gets this index.
    pub next_idx: u64,
    pub context_base_idx: u64,
    pub usage: Usage,
    pub cost_usd: f64,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// Runs started so far.
    pub runs: u64,
    pub chain: String,
    pub depth: u32,
    /// Token count, summary and trimming of the model-visible window.
    pub context: ContextState,
    /// How its tools' processes are confined.
    pub sandbox: SessionSandbox,
    /// The first message of the turns the next memory extraction counts
    /// and reads: turns before it were extracted, or skipped because the
    /// agent wrote memory itself. Persisted, so a restart neither loses
    /// the count nor extracts a turn twice.
    pub extract_from_idx: u64,
    /// Turns (a user message and the run it starts) since then.
    pub extract_turns: u64,
    /// A sub-agent's session: the session whose `agent` call started it.
    pub parent: Option<u64>,
    /// Sub-agents between it and a session people started (0 there).
    pub agent_depth: u32,
}

/// A session record as format 4 wrote it (before sub-agents).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecordV4 {
    pub id: u64,
    pub name: Option<String>,
    pub workdir: String,
    pub model: String,
    pub status: SessionStatus,
    pub error: Option<String>,
    pub next_idx: u64,
    pub context_base_idx: u64,
    pub usage: Usage,
    pub cost_usd: f64,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub runs: u64,
    pub chain: String,
    pub depth: u32,
    pub context: ContextState,
    pub sandbox: SessionSandbox,
    pub extract_from_idx: u64,
    pub extract_turns: u64,
}

impl From<SessionRecordV4> for SessionRecord {
    fn from(v4: SessionRecordV4) -> SessionRecord {
        SessionRecord {
            id: v4.id,
            name: v4.name,
            workdir: v4.workdir,
            model: v4.model,
            status: v4.status,
            error: v4.error,
            next_idx: v4.next_idx,
            context_base_idx: v4.context_base_idx,
            usage: v4.usage,
            cost_usd: v4.cost_usd,
            created_ms: v4.created_ms,
            updated_ms: v4.updated_ms,
            runs: v4.runs,
            chain: v4.chain,
            depth: v4.depth,
            context: v4.context,
            sandbox: v4.sandbox,
            extract_from_idx: v4.extract_from_idx,
            extract_turns: v4.extract_turns,
            parent: None,
            agent_depth: 0,
        }
    }
}

/// One background memory extraction over a session's turns, as stored
/// (one sled key per extraction, beside the session's messages).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractionRecord {
    /// When it ended, ms since the epoch.
    pub at_ms: u64,
    /// The messages it read: `from_idx..to_idx`.
    pub from_idx: u64,
    pub to_idx: u64,
    pub turns: u64,
    /// The model profile it used.
    pub model: String,
    pub model_calls: u32,
    pub usage: Usage,
    pub cost_usd: f64,
    /// Entries it wrote, and entries it forgot.
    pub saved: Vec<String>,
    pub forgot: Vec<String>,
    /// `done`, or how it stopped.
    pub outcome: String,
}

impl ExtractionRecord {
    pub fn view(&self) -> flyto_protocol::ExtractionView {
        flyto_protocol::ExtractionView {
            at_ms: self.at_ms,
            from_idx: self.from_idx,
            to_idx: self.to_idx,
            turns: self.turns,
            model: self.model.clone(),
            model_calls: self.model_calls,
            input_tokens: self.usage.input_tokens,
            output_tokens: self.usage.output_tokens,
            cost_usd: self.cost_usd,
            saved: self.saved.clone(),
            forgot: self.forgot.clone(),
            outcome: self.outcome.clone(),
        }
    }
}

/// A session record as format 3 wrote it (before memory extraction).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecordV3 {
    pub id: u64,
    pub name: Option<String>,
    pub workdir: String,
    pub model: String,
    pub status: SessionStatus,
    pub error: Option<String>,
    pub next_idx: u64,
    pub context_base_idx: u64,
    pub usage: Usage,
    pub cost_usd: f64,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub runs: u64,
    pub chain: String,
    pub depth: u32,
    pub context: ContextState,
    pub sandbox: SessionSandbox,
}

impl From<SessionRecordV3> for SessionRecord {
    /// An older session starts counting at its end: its earlier turns are
    /// not extracted after an upgrade.
    fn from(v3: SessionRecordV3) -> SessionRecord {
        SessionRecord {
            id: v3.id,
            name: v3.name,
            workdir: v3.workdir,
            model: v3.model,
            status: v3.status,
            error: v3.error,
            next_idx: v3.next_idx,
            context_base_idx: v3.context_base_idx,
            usage: v3.usage,
            cost_usd: v3.cost_usd,
            created_ms: v3.created_ms,
            updated_ms: v3.updated_ms,
            runs: v3.runs,
            chain: v3.chain,
            depth: v3.depth,
            context: v3.context,
            sandbox: v3.sandbox,
            extract_from_idx: v3.next_idx,
            extract_turns: 0,
            parent: None,
            agent_depth: 0,
        }
    }
}

/// A session's sandbox choice; `None` takes `[sandbox]` at each run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSandbox {
    pub profile: Option<crate::tools::sandbox::Profile>,
    pub network: Option<bool>,
    /// Where its commands may write; unset: the session's workdir. Set for
    /// the session of an agent step in a plan an agent submitted: that
    /// agent's workdir, whatever the step's.
    pub write_roots: Option<Vec<std::path::PathBuf>>,
}

/// A session record as format 2 wrote it (before the sandbox choice).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecordV2 {
    pub id: u64,
    pub name: Option<String>,
    pub workdir: String,
    pub model: String,
    pub status: SessionStatus,
    pub error: Option<String>,
    pub next_idx: u64,
    pub context_base_idx: u64,
    pub usage: Usage,
    pub cost_usd: f64,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub runs: u64,
    pub chain: String,
    pub depth: u32,
    pub context: ContextState,
}

impl From<SessionRecordV2> for SessionRecord {
    fn from(v2: SessionRecordV2) -> SessionRecord {
        SessionRecord {
            id: v2.id,
            name: v2.name,
            workdir: v2.workdir,
            model: v2.model,
            status: v2.status,
            error: v2.error,
            next_idx: v2.next_idx,
            context_base_idx: v2.context_base_idx,
            usage: v2.usage,
            cost_usd: v2.cost_usd,
            created_ms: v2.created_ms,
            updated_ms: v2.updated_ms,
            runs: v2.runs,
            chain: v2.chain,
            depth: v2.depth,
            context: v2.context,
            sandbox: SessionSandbox::default(),
            extract_from_idx: v2.next_idx,
            extract_turns: 0,
            parent: None,
            agent_depth: 0,
        }
    }
}

/// A session record as format 1 wrote it (before compaction).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecordV1 {
    pub id: u64,
    pub name: Option<String>,
    pub workdir: String,
    pub model: String,
    pub status: SessionStatus,
    pub error: Option<String>,
    pub next_idx: u64,
    pub context_base_idx: u64,
    pub usage: Usage,
    pub cost_usd: f64,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub runs: u64,
    pub chain: String,
    pub depth: u32,
}

impl From<SessionRecordV1> for SessionRecord {
    /// The window is counted afresh at the next run.
    fn from(v1: SessionRecordV1) -> SessionRecord {
        SessionRecord {
            id: v1.id,
            name: v1.name,
            workdir: v1.workdir,
            model: v1.model,
            status: v1.status,
            error: v1.error,
            next_idx: v1.next_idx,
            context_base_idx: v1.context_base_idx,
            usage: v1.usage,
            cost_usd: v1.cost_usd,
            created_ms: v1.created_ms,
            updated_ms: v1.updated_ms,
            runs: v1.runs,
            chain: v1.chain,
            depth: v1.depth,
            context: ContextState::default(),
            sandbox: SessionSandbox::default(),
            extract_from_idx: v1.next_idx,
            extract_turns: 0,
            parent: None,
            agent_depth: 0,
        }
    }
}

/// Session ids are `s<number>`.
pub use crate::kernel::ids::session::{format as format_id, parse as parse_id};

impl SessionRecord {
    /// The context budget under `budget` (None when the model is unknown).
    pub fn context_view(&self, budget: Option<Budget>) -> flyto_protocol::ContextView {
        let c = &self.context;
        let mut v =
            budget.map_or_else(Default::default, |b| b.view(c.tokens(), c.estimated_tokens));
        v.tokens = c.tokens();
        v.estimated = c.estimated_tokens;
        v.compactions = c.compactions;
        v.has_summary = c.summary.is_some();
        (v.head_from_idx, v.summary_from_idx) = if c.summary.is_some() {
            (c.head_start_idx, c.head_end_idx)
        } else {
            (self.context_base_idx, self.context_base_idx)
        };
        v
    }

    pub fn view(&self, running: bool, budget: Option<Budget>) -> SessionView {
        SessionView {
            parent: self.parent.map(format_id),
            id: format_id(self.id),
            name: self.name.clone(),
            workdir: self.workdir.clone(),
            model: self.model.clone(),
            status: match (self.status, running) {
                (_, true) | (SessionStatus::Running, _) => "running".into(),
                (SessionStatus::Idle, false) => "idle".into(),
                (SessionStatus::Error, false) => "error".into(),
            },
            error: self.error.clone(),
            messages: self.next_idx,
            context_base_idx: self.context_base_idx,
            input_tokens: self.usage.input_tokens,
            output_tokens: self.usage.output_tokens,
            cost_usd: self.cost_usd,
            created_ms: self.created_ms,
            updated_ms: self.updated_ms,
            chain: self.chain.clone(),
            depth: self.depth,
            context: self.context_view(budget),
        }
    }
}

pub fn message_view(idx: u64, created_ms: u64, m: &Message) -> MessageView {
    MessageView {
        created_ms,
        idx,
        role: match m.role {
            Role::User => "user".into(),
            Role::Assistant => "assistant".into(),
        },
        blocks: m
            .content
            .iter()
            .map(|b| match b {
                Block::Text { text } => BlockView::Text { text: text.clone() },
                Block::Thinking { text, .. } => BlockView::Thinking { text: text.clone() },
                Block::RedactedThinking { .. } => BlockView::Thinking {
                    text: "(redacted by the provider)".into(),
                },
                Block::ToolUse {
                    id,
                    name,
                    arguments_json,
                } => BlockView::ToolUse {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: arguments_json.clone(),
                },
                Block::ToolResult {
                    call_id,
                    content,
                    is_error,
                } => BlockView::ToolResult {
                    call_id: call_id.clone(),
                    content: content.clone(),
                    is_error: *is_error,
                },
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(base: u64, context: ContextState) -> SessionRecord {
        SessionRecord {
            id: 1,
            name: None,
            workdir: "/srv/proj".into(),
            model: "main".into(),
            status: SessionStatus::Idle,
            error: None,
            next_idx: 10,
            context_base_idx: base,
            usage: Usage::default(),
            cost_usd: 0.0,
            created_ms: 0,
            updated_ms: 0,
            runs: 0,
            chain: "c1".into(),
            depth: 0,
            context,
            sandbox: Default::default(),
            extract_from_idx: 0,
            extract_turns: 0,
            parent: None,
            agent_depth: 0,
        }
    }

    #[test]
    fn the_context_view_names_the_protected_head() {
        // A reset moved the window to [2]; a compaction kept [2]..[3] as
        // the head and summarised [4]..[7].
        let compacted = ContextState {
            head_start_idx: 2,
            head_end_idx: 4,
            summary: Some("Goal".into()),
            ..ContextState::default()
        };
        let v = record(8, compacted).context_view(None);
        assert_eq!((v.head_from_idx, v.summary_from_idx), (2, 4));
        assert!(v.has_summary);
        // Without a summary there is no head: the window is `base` on.
        let v = record(8, ContextState::default()).context_view(None);
        assert_eq!((v.head_from_idx, v.summary_from_idx), (8, 8));
        assert!(!v.has_summary);
    }
}
