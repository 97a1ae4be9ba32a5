//! Wire types. bincode is not self-describing, so: externally tagged enums
//! only, no `flatten`/`untagged`/`skip_serializing_if`, and free-form JSON
//! travels as a `String`.
//!
//! The request, response and event enums live here; the types each room's
//! requests carry live in one file per room, re-exported from here.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

mod channels;
mod jobs;
mod memory;
mod plans;
mod sessions;
mod stats;
mod tools;
pub use channels::*;
pub use jobs::*;
pub use memory::*;
pub use plans::*;
pub use sessions::*;
pub use stats::*;
pub use tools::*;

/// A request from a client. Every variant is a struct so that each JSON line
/// is exactly one object `{"<op>":{...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// First frame of a binary connection.
    Hello {
        protocol: u32,
        client: String,
    },
    Ping {},
    Stats {},
    SubmitPlan {
        plan: PlanSpec,
        /// A retried submit with the same key returns the first plan's id.
        idempotency_key: Option<String>,
    },
    PlanStatus {
        id: String,
    },
    /// Snapshot, then live events until the plan is terminal.
    PlanWatch {
        id: String,
    },
    PlanCancel {
        id: String,
    },
    PlanList {
        state: Option<PlanState>,
        limit: Option<u32>,
    },
    /// A new agent session. `model` names a profile or a role (default
    /// role `main`); `workdir` defaults to the daemon's default workdir.
    SessionNew {
        name: Option<String>,
        workdir: Option<String>,
        model: Option<String>,
        /// Sandbox profile of its tools' processes; unset: `[sandbox]`.
        sandbox: Option<String>,
        /// `Some(false)`: no TCP connect or bind; unset: `[sandbox]`.
        network: Option<bool>,
    },
    /// Starts a run with a user message and streams its events until it
    /// ends, then `End`. `Conflict` while a run is active.
    SessionSend {
        id: String,
        text: String,
        /// This client answers approval requests (`session_approve`): an
        /// `ask` rule then waits for a person instead of refusing.
        #[serde(default)]
        can_approve: bool,
    },
    /// Snapshot (`History` of recent messages), then live events of every
    /// run until the client disconnects.
    SessionAttach {
        id: String,
        recent: Option<u32>,
        /// As for `session_send`: this client answers approval requests.
        #[serde(default)]
        can_approve: bool,
    },
    SessionCancel {
        id: String,
    },
    SessionList {},
    SessionHistory {
        id: String,
    },
    /// Moves the model-visible window without deleting anything: `soft`
    /// starts it at the last user message, hard (`soft = false`) starts it
    /// empty. History keeps every message.
    SessionReset {
        id: String,
        soft: bool,
    },
    /// Switches the session's model (a profile or a role) and re-checks
    /// the context against the new window at once.
    SessionSetModel {
        id: String,
        model: String,
    },
    /// Compacts the session now; streams the compaction's events, then `End`.
    SessionCompact {
        id: String,
    },
    /// The compaction circuit breaker of every project.
    BreakerStatus {},
    /// Closes the breaker of one project (its 16-hex id), or of all.
    BreakerReset {
        project: Option<String>,
    },
    /// Submits a new plan from a plan's spec (its `restarted_from` names
    /// the old one). The old plan must have finished.
    PlanRestart {
        id: String,
    },
    /// Deletes a finished plan and its logs; `Conflict` while it is pending
    /// or running.
    PlanRemove {
        id: String,
    },
    /// Deletes a session that is not running: its record and messages.
    SessionDelete {
        id: String,
    },
    /// Answers an approval request (`ApprovalRequested`) of session `id`;
    /// the first answer wins, a later one is a `Conflict`.
    SessionApprove {
        id: String,
        approval: u64,
        allow: bool,
    },
    /// What the agent's `bash` tool would decide for `command` run in
    /// `workdir` (absolute), under the live `[permissions]`; runs nothing.
    PolicyCheck {
        command: String,
        workdir: String,
    },
    /// The skills a session in `workdir` (absolute) sees, the shadowed
    /// folders and the skill folders that could not be loaded.
    SkillList {
        workdir: String,
    },
    /// One skill as a session in `workdir` sees it, with its body.
    SkillShow {
        name: String,
        workdir: String,
    },
    /// Rescans every skill source now; answers with the counts `workdir`
    /// then sees.
    SkillReload {
        workdir: String,
    },
    /// The memory of project `project` (an absolute directory) and the
    /// user's: every entry, and every file that could not be read.
    MemoryList {
        project: String,
    },
    /// One entry with its body.
    MemoryShow {
        project: String,
        name: String,
    },
    /// Entries ranked for `query`, best first.
    MemorySearch {
        project: String,
        query: String,
    },
    /// Moves an entry to its scope's `.trash/`.
    MemoryForget {
        project: String,
        name: String,
        reason: String,
    },
    /// Brings back the newest tombstone of `name`.
    MemoryRestore {
        project: String,
        name: String,
    },
    /// The folders of the project's and the user's memory.
    MemoryPath {
        project: String,
    },
    /// Every scope's entries as files (the client writes them to a folder).
    MemoryExport {},
    /// The configured hooks and their last outcomes.
    HookList {},
    /// Makes each named scope hold exactly these entries: new and changed
    /// ones are written, missing ones forgotten (to the trash, restorable).
    /// Every file is checked first; one that does not parse refuses it all.
    MemoryImport {
        folders: Vec<MemoryFolder>,
    },
    /// Per project (one, or all known): gates, last success, lease.
    DreamStatus {
        project: Option<String>,
    },
    /// The newest runs, of one project or of all.
    DreamLog {
        project: Option<String>,
        limit: u32,
    },
    /// One run's record with its per-entry diff.
    DreamDiff {
        run: String,
    },
    /// A consolidation now (answers when it ends); `dry_run` applies nothing.
    DreamRun {
        project: String,
        dry_run: bool,
    },
    /// Makes the memory before a run (the newest if none) live again.
    DreamUndo {
        project: String,
        run: Option<String>,
    },
    /// The next `count` fires of a schedule expression after `after` (an
    /// RFC 3339 instant; now if none), creating nothing.
    JobNext {
        expr: String,
        tz: Option<String>,
        after: Option<String>,
        count: u32,
    },
    JobCreate {
        spec: JobSpec,
    },
    /// Changes the fields `spec` sets (the others stay).
    JobUpdate {
        id: String,
        spec: JobSpec,
    },
    JobList {},
    /// The job and its fires.
    JobShow {
        id: String,
    },
    JobPause {
        id: String,
    },
    JobResume {
        id: String,
    },
    JobDelete {
        id: String,
    },
    /// One run now, outside the schedule, recorded as manual.
    JobRun {
        id: String,
    },
    /// Every binding's health and the pending pairing requests.
    ChannelList {},
    ChannelBind {
        spec: ChannelSpec,
    },
    /// Removes the binding and everything kept for it.
    ChannelUnbind {
        name: String,
    },
    /// Admits the user who was given this pairing code.
    ChannelPair {
        code: String,
    },
    /// Sends one message (`NAME` or `NAME:CHAT`) and reports the
    /// platform's answer.
    ChannelTest {
        name: String,
    },
    /// WeChat: a login QR code to show (`content` is what it encodes).
    ChannelQr {
        base_url: Option<String>,
    },
    /// WeChat: waits (long poll) for the QR code's status; on `confirmed`
    /// the daemon stores the binding itself.
    ChannelQrWait {
        id: String,
        base_url: Option<String>,
        name: Option<String>,
    },
    /// The configured MCP servers: state, tools, last error.
    McpList {},
    /// One MCP server's tools, with their schemas.
    McpTools {
        server: String,
    },
    /// Stops one MCP server and starts it again.
    McpRestart {
        server: String,
    },
}

// Durations a person writes (see `crate::duration`), each named in errors.
fn timeout_secs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    crate::duration::de_opt_secs("timeout_secs", d)
}

fn jitter_secs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    crate::duration::de_opt_secs("jitter_secs", d)
}

impl Request {
    /// The operation name as the CLI and the JSON encoding spell it.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Hello { .. } => "hello",
            Request::Ping {} => "ping",
            Request::Stats {} => "stats",
            Request::SubmitPlan { .. } => "submit_plan",
            Request::PlanStatus { .. } => "plan_status",
            Request::PlanWatch { .. } => "plan_watch",
            Request::PlanCancel { .. } => "plan_cancel",
            Request::PlanList { .. } => "plan_list",
            Request::SessionNew { .. } => "session_new",
            Request::SessionSend { .. } => "session_send",
            Request::SessionAttach { .. } => "session_attach",
            Request::SessionCancel { .. } => "session_cancel",
            Request::SessionList {} => "session_list",
            Request::SessionHistory { .. } => "session_history",
            Request::SessionReset { .. } => "session_reset",
            Request::SessionSetModel { .. } => "session_set_model",
            Request::SessionCompact { .. } => "session_compact",
            Request::BreakerStatus {} => "breaker_status",
            Request::BreakerReset { .. } => "breaker_reset",
            Request::PlanRestart { .. } => "plan_restart",
            Request::PlanRemove { .. } => "plan_remove",
            Request::SessionDelete { .. } => "session_delete",
            Request::SessionApprove { .. } => "session_approve",
            Request::PolicyCheck { .. } => "policy_check",
            Request::SkillList { .. } => "skill_list",
            Request::SkillShow { .. } => "skill_show",
            Request::SkillReload { .. } => "skill_reload",
            Request::MemoryList { .. } => "memory_list",
            Request::MemoryShow { .. } => "memory_show",
            Request::MemorySearch { .. } => "memory_search",
            Request::MemoryForget { .. } => "memory_forget",
            Request::MemoryRestore { .. } => "memory_restore",
            Request::MemoryPath { .. } => "memory_path",
            Request::MemoryExport { .. } => "memory_export",
            Request::HookList { .. } => "hook_list",
            Request::MemoryImport { .. } => "memory_import",
            Request::DreamStatus { .. } => "dream_status",
            Request::DreamLog { .. } => "dream_log",
            Request::DreamDiff { .. } => "dream_diff",
            Request::DreamRun { .. } => "dream_run",
            Request::DreamUndo { .. } => "dream_undo",
            Request::JobNext { .. } => "job_next",
            Request::JobCreate { .. } => "job_create",
            Request::JobUpdate { .. } => "job_update",
            Request::JobList {} => "job_list",
            Request::JobShow { .. } => "job_show",
            Request::JobPause { .. } => "job_pause",
            Request::JobResume { .. } => "job_resume",
            Request::JobDelete { .. } => "job_delete",
            Request::JobRun { .. } => "job_run",
            Request::ChannelList {} => "channel_list",
            Request::ChannelBind { .. } => "channel_bind",
            Request::ChannelUnbind { .. } => "channel_unbind",
            Request::ChannelPair { .. } => "channel_pair",
            Request::ChannelTest { .. } => "channel_test",
            Request::ChannelQr { .. } => "channel_qr",
            Request::ChannelQrWait { .. } => "channel_qr_wait",
            Request::McpList {} => "mcp_list",
            Request::McpTools { .. } => "mcp_tools",
            Request::McpRestart { .. } => "mcp_restart",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    Welcome {
        protocol: u32,
        daemon_version: String,
    },
    Pong {
        daemon_version: String,
        pid: u32,
        uptime_ms: u64,
    },
    Stats {
        stats: DaemonStats,
    },
    PlanSubmitted {
        id: String,
        /// True when an idempotency key matched an earlier plan.
        duplicate: bool,
    },
    Plan {
        plan: PlanView,
    },
    Plans {
        plans: Vec<PlanSummary>,
        /// How many plans match the request without its limit.
        total: u64,
    },
    PlanCancelled {
        id: String,
        state: PlanState,
        /// True when the plan had finished before the cancel came.
        already_finished: bool,
    },
    Event {
        seq: u64,
        event: Event,
    },
    Session {
        session: SessionView,
    },
    Sessions {
        sessions: Vec<SessionView>,
    },
    /// A session and (some of) its messages, oldest first.
    History {
        session: SessionView,
        messages: Vec<MessageView>,
        /// The summary the model sees in place of the compacted messages.
        summary: Option<String>,
        /// The background memory extractions over its turns, oldest first.
        extractions: Vec<ExtractionView>,
    },
    Breakers {
        breakers: Vec<BreakerView>,
    },
    /// The projects whose breaker was closed.
    BreakersReset {
        projects: Vec<String>,
    },
    End {},
    Error {
        code: ErrorCode,
        message: String,
    },
    /// `plan_remove` deleted the plan and its logs.
    PlanRemoved {
        id: String,
    },
    SessionDeleted {
        id: String,
    },
    /// The answer to `session_approve` was taken.
    ApprovalAnswered {
        approval: u64,
        allow: bool,
    },
    /// The answer to `policy_check`.
    PolicyVerdict {
        check: PolicyCheckView,
    },
    /// The answer to `skill_list`: valid skills by name, then the broken
    /// ones by file.
    Skills {
        skills: Vec<SkillView>,
        broken: Vec<BrokenSkillView>,
    },
    /// The answer to `skill_show`.
    Skill {
        skill: SkillView,
        body: String,
    },
    /// The answer to `skill_reload`.
    SkillsReloaded {
        skills: u64,
        broken: u64,
    },
    /// `memory_list`: the project scope, then the user scope.
    Memory {
        scopes: Vec<MemoryScopeView>,
    },
    /// `memory_show`.
    MemoryEntry {
        entry: MemoryEntryView,
        body: String,
    },
    /// `memory_search`, best first.
    MemoryHits {
        hits: Vec<MemoryHitView>,
    },
    /// `memory_forget`: where the tombstone is.
    MemoryForgotten {
        name: String,
        trash: String,
    },
    /// `memory_restore`: the entry's file again.
    MemoryRestored {
        name: String,
        path: String,
    },
    /// `memory_path`.
    MemoryPaths {
        project: String,
        user: String,
    },
    /// `memory_export`.
    MemoryFolders {
        folders: Vec<MemoryFolder>,
    },
    /// `hook_list`, in config order.
    Hooks {
        hooks: Vec<HookView>,
    },
    /// `memory_import`: entries written, forgotten, left as they were.
    MemoryImported {
        written: u64,
        forgotten: u64,
        unchanged: u64,
    },
    /// The `dream_*` answers: a JSON document (statuses, run records, the
    /// restored version), free-form as the records grow.
    Dream {
        json: String,
    },
    /// `job_next`: RFC 3339 instants with the zone's offset.
    JobNext {
        instants: Vec<String>,
        warnings: Vec<String>,
        tz: String,
        tzdb: String,
    },
    /// `job_create`, `job_update`, `job_pause`, `job_resume`, `job_delete`.
    Job {
        job: JobView,
        warnings: Vec<String>,
    },
    Jobs {
        jobs: Vec<JobView>,
        tzdb: String,
    },
    JobHistory {
        job: JobView,
        fires: Vec<FireView>,
    },
    /// `job_run`: the plan of the manual run.
    JobRan {
        id: String,
        plan: String,
    },
    Channels {
        channels: Vec<ChannelView>,
        pairings: Vec<PairingView>,
    },
    /// `channel_bind`, `channel_unbind`: the binding; `channel_pair`,
    /// `channel_test`: what happened, in `message`.
    Channel {
        channel: Option<ChannelView>,
        message: String,
    },
    ChannelQr {
        id: String,
        content: String,
    },
    /// `wait`, `scanned`, `expired` or `confirmed` (then `channel` is the
    /// new binding).
    ChannelQrStatus {
        status: String,
        channel: Option<ChannelView>,
    },
    /// `mcp_list`, by name.
    McpServers {
        servers: Vec<McpServerView>,
    },
    /// `mcp_tools`: as the model sees them.
    McpTools {
        tools: Vec<McpToolView>,
    },
}

impl Response {
    pub fn error(code: ErrorCode, message: impl Into<String>) -> Self {
        Response::Error {
            code,
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// A plan changed; carries its whole new state (plans are small).
    PlanUpdated { plan: PlanView },
    /// Something happened in a session's run.
    Session {
        session: String,
        event: SessionEvent,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    BadRequest,
    NotFound,
    Conflict,
    Unavailable,
    PermissionDenied,
    TooLarge,
    ProtocolMismatch,
    Internal,
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}
