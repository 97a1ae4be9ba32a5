//! Memory entries, scopes, folders and extraction, as `memory_*` requests show them.

use super::*;

/// One background memory extraction over a session's turns: its cost is
/// part of the session's totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractionView {
    /// When it ended, ms since the epoch.
    pub at_ms: u64,
    /// The messages it read: `from_idx..to_idx`.
    pub from_idx: u64,
    pub to_idx: u64,
    pub turns: u64,
    /// The model profile it used (the `fast` role's).
    pub model: String,
    pub model_calls: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    /// Entries it wrote (created or replaced).
    pub saved: Vec<String>,
    /// Entries it forgot.
    pub forgot: Vec<String>,
    /// `done`, or how it stopped.
    pub outcome: String,
}

/// One memory entry, without its body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryEntryView {
    pub name: String,
    /// `user`, `feedback`, `project` or `reference`.
    pub kind: String,
    pub description: String,
    /// `project` or `user`.
    pub scope: String,
    pub path: String,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// A session id, `user`, or `extracted`.
    pub source: String,
    pub version: u32,
    /// The session an extracted entry was learned from; empty otherwise.
    pub session: String,
}

/// One memory scope as files: `scope` is `user` or `projects/<id>` (the
/// folder it is exported to), each file `<name>.md`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryFolder {
    pub scope: String,
    pub files: Vec<MemoryFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryFile {
    pub name: String,
    pub text: String,
}

/// A file in a memory folder that could not be read as an entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryProblemView {
    pub file: String,
    /// 1-based; 0 for the file as a whole.
    pub line: u64,
    pub reason: String,
}

/// One scope's folder and what is in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryScopeView {
    pub scope: String,
    pub dir: String,
    pub entries: Vec<MemoryEntryView>,
    pub problems: Vec<MemoryProblemView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryHitView {
    pub entry: MemoryEntryView,
    pub score: f64,
}
