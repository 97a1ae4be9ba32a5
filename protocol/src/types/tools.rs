//! What the agent works with: the permission policy's verdicts, skills, MCP servers and tools, hooks.

use super::*;

/// What the permission policy decided for a `bash` command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allow,
    Deny,
    /// Runs only when a person attached to the session approves it; with
    /// no one attached, refused.
    Ask,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
            Verdict::Ask => "ask",
        }
    }
}

/// `policy_check`'s answer: the verdict and what it rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyCheckView {
    pub verdict: Verdict,
    /// The rule that decided: a built-in check as `deny:recursive-delete`,
    /// a config rule as written (`deny_paths "/etc/**"`), `default =
    /// "ask"`, `unparsable`; `null` when no rule stood in the way.
    pub rule: Option<String>,
    pub reason: String,
    /// The simple command (or redirect) the verdict is about.
    pub command: Option<String>,
    /// Every simple command the parser found, quotes removed.
    pub commands: Vec<String>,
    /// What the model would be told when the tool refuses it.
    pub message: Option<String>,
    /// The workdir it was judged in.
    pub workdir: String,
}

/// A valid skill as a session sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkillView {
    pub name: String,
    pub description: String,
    /// `builtin`, `user` or `project`.
    pub source: String,
    /// Its folder (`<builtin>/NAME` for a built-in skill).
    pub path: String,
    /// The folders of the same name it shadowed, highest precedence first.
    pub shadowed: Vec<String>,
    /// Its files other than `SKILL.md`, relative to its folder.
    pub resources: Vec<String>,
    pub license: Option<String>,
    pub compatibility: Option<String>,
    pub allowed_tools: Option<String>,
    pub metadata: BTreeMap<String, String>,
}

/// A skill folder that could not be loaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrokenSkillView {
    pub file: String,
    /// 1-based; 0 when the problem is the file or folder as a whole.
    pub line: u64,
    pub reason: String,
}

/// A configured MCP server and how it is doing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpServerView {
    pub name: String,
    /// `stdio: COMMAND ARGS` or `http: URL` (no query, no secrets).
    pub transport: String,
    pub enabled: bool,
    /// `idle`, `starting`, `running`, `restarting`, `failed` or `disabled`.
    pub state: String,
    /// Tools offered to sessions (after the allow and deny lists).
    pub tools: u32,
    /// Why it last failed or stopped, and tools it left out.
    pub last_error: Option<String>,
    pub problems: Vec<String>,
    pub restarts: u32,
    /// The MCP revision it speaks, once connected.
    pub protocol: Option<String>,
}

/// One MCP tool as sessions get it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpToolView {
    /// The model's name: `mcp__<server>__<tool>`.
    pub name: String,
    /// The server's own name for it.
    pub remote: String,
    pub description: String,
    pub read_only: bool,
    /// JSON Schema of its arguments, as JSON text.
    pub input_schema: String,
}

/// A configured hook and how its last runs ended (oldest first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookView {
    pub name: String,
    pub event: String,
    pub matcher: Option<String>,
    pub command: String,
    pub timeout_ms: u64,
    pub required: bool,
    pub last: Vec<HookRunView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookRunView {
    pub outcome: String,
    pub duration_ms: u64,
    /// RFC 3339 (UTC).
    pub at: String,
}
