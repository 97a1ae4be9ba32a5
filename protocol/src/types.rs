//! Wire types. bincode is not self-describing, so: externally tagged enums
//! only, no `flatten`/`untagged`/`skip_serializing_if`, and free-form JSON
//! travels as a `String`.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

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

/// What `channel_bind` creates. Secrets travel only from the local
/// client to the daemon, which keeps them in its state directory.
#[derive(Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChannelSpec {
    /// `telegram`, `wechat`, `wecom` or `inbox`.
    pub kind: String,
    /// Defaults to the kind.
    pub name: Option<String>,
    pub token: Option<String>,
    /// Telegram's Bot API server, WeChat's iLink base URL.
    pub api_base: Option<String>,
    pub dir: Option<String>,
    pub userid: Option<String>,
    pub corp_id: Option<String>,
    pub agent_id: Option<String>,
    pub secret: Option<String>,
}

impl std::fmt::Debug for ChannelSpec {
    // Never the token or the secret, whoever logs a request.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelSpec")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("api_base", &self.api_base)
            .field("dir", &self.dir)
            .field("userid", &self.userid)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChannelView {
    pub name: String,
    pub kind: String,
    /// `ok`, `starting`, `backing_off`, `auth_failed` or `paused`.
    pub state: String,
    /// RFC 3339 (UTC) of the last completed poll.
    pub last_poll: Option<String>,
    pub last_error: Option<String>,
    /// Messages journaled and not answered yet.
    pub queued: u64,
    pub outbox_pending: u64,
    pub needs_user_message: u64,
    pub dropped: u64,
    pub sent: u64,
    pub chats: u64,
    /// The folder, server or user it talks to (never a secret).
    pub target: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairingView {
    pub code: String,
    pub binding: String,
    pub user: String,
    pub user_name: String,
    pub created: String,
}

/// What `job_create` and `job_update` set; `None` leaves a field as it is
/// (on create: its default).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct JobSpec {
    pub schedule: Option<String>,
    pub tz: Option<String>,
    /// One agent step with this prompt, or `plan`.
    pub prompt: Option<String>,
    pub plan: Option<PlanSpec>,
    /// `isolated` or `persistent`.
    pub mode: Option<String>,
    pub name: Option<String>,
    pub workdir: Option<String>,
    #[serde(default, deserialize_with = "timeout_secs")]
    pub timeout_secs: Option<u64>,
    /// RFC 3339, or a local date and time in the job's zone.
    pub expires: Option<String>,
    pub notify: Option<String>,
    pub max_consecutive_failures: Option<u32>,
    #[serde(default, deserialize_with = "jitter_secs")]
    pub jitter_secs: Option<u64>,
}

// Durations a person writes (see `crate::duration`), each named in errors.
fn timeout_secs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    crate::duration::de_opt_secs("timeout_secs", d)
}

fn jitter_secs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    crate::duration::de_opt_secs("jitter_secs", d)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    pub id: String,
    pub name: Option<String>,
    pub schedule: String,
    pub tz: String,
    pub mode: String,
    /// `active`, `paused`, or `stopped: <why>`.
    pub state: String,
    /// RFC 3339 in the job's zone, and in UTC.
    pub next_fire: Option<String>,
    pub next_fire_utc: Option<String>,
    pub last_outcome: Option<String>,
    pub consecutive_failures: u32,
    pub max_consecutive_failures: u32,
    pub workdir: Option<String>,
    /// The prompt, or "plan: <n> steps".
    pub what: String,
    pub timeout_secs: Option<u64>,
    pub expires: Option<String>,
    pub created_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FireView {
    /// The scheduled instant (RFC 3339 in the job's zone).
    pub instant: String,
    pub at_ms: u64,
    pub manual: bool,
    /// `submitted`, `skipped (still running)`, `missed 3 (first …)`, …
    pub outcome: String,
    pub plan: Option<String>,
    /// The plan's state now, when it still exists.
    pub plan_state: Option<String>,
    pub duration_ms: Option<u64>,
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

/// A plan as submitted: a DAG of steps. Also the format of plan files.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanSpec {
    pub name: Option<String>,
    #[serde(default)]
    pub steps: Vec<StepSpec>,
    /// Environment of every step (a step's own `env` overrides it), on top
    /// of flytod's filtered environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Sandbox profile of the plan's `run` steps (`workspace-write`,
    /// `read-only`, `off`); unset: `[plans] sandbox`. A plan an agent
    /// submits is never less confined than the agent.
    #[serde(default)]
    pub sandbox: Option<String>,
}

impl PlanSpec {
    /// The checks that need nothing but the plan itself: steps exist, ids
    /// are valid and unique, each step has exactly one of `run` or
    /// `prompt`, deps name steps of the plan and form no cycle, env names
    /// are usable. flytoctl runs them before it sends a plan file, the
    /// daemon again on every submit; each error names the step and the fix.
    pub fn check(&self) -> Result<(), String> {
        if self.steps.is_empty() {
            return Err(
                "the plan has no steps: add at least one step with `id` and `run` (a shell command) or `prompt` (an agent task)".into(),
            );
        }
        check_env_names(&self.env, "the plan")?;
        let mut seen = HashSet::new();
        for step in &self.steps {
            check_step_id(&step.id)?;
            if !seen.insert(step.id.as_str()) {
                return Err(format!(
                    "duplicate step id `{}`: every step needs its own id",
                    step.id
                ));
            }
        }
        for step in &self.steps {
            let id = &step.id;
            let text = match (&step.run, &step.prompt) {
                (Some(t), None) | (None, Some(t)) => t,
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "step `{id}` has both `run` and `prompt`: give it exactly one of them"
                    ));
                }
                (None, None) => {
                    return Err(format!(
                        "step `{id}` has neither `run` nor `prompt`: give it a shell command or an agent prompt"
                    ));
                }
            };
            if text.trim().is_empty() {
                return Err(format!("step `{id}` has an empty command or prompt"));
            }
            for dep in &step.deps {
                if dep == id {
                    return Err(format!(
                        "step `{id}` depends on itself: remove it from its `deps`"
                    ));
                }
                if !seen.contains(dep.as_str()) {
                    return Err(format!(
                        "step `{id}` depends on `{dep}`, which is not a step of this plan: fix the name or add the step"
                    ));
                }
            }
            if !step.env.is_empty() {
                check_env_names(&step.env, &format!("step `{id}`"))?;
            }
        }
        // Without deps (most plans) there is no cycle to look for.
        if self.steps.iter().any(|s| !s.deps.is_empty())
            && let Some(cycle) = find_cycle(&self.steps)
        {
            return Err(format!(
                "dependency cycle: {}: remove one of these dependencies",
                cycle.join(" -> ")
            ));
        }
        Ok(())
    }
}

fn check_step_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !id.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "step id `{id}` is not valid: use 1 to 64 letters, digits, `-`, `_` or `.`"
        ))
    }
}

fn check_env_names(env: &BTreeMap<String, String>, whose: &str) -> Result<(), String> {
    for (k, v) in env {
        let ok = !k.is_empty()
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(format!(
                "{whose}: env name `{k}` is not valid: use letters, digits and `_`, not starting with a digit"
            ));
        }
        if v.contains('\0') {
            return Err(format!(
                "{whose}: the value of env `{k}` contains a NUL byte, which no environment can hold"
            ));
        }
    }
    Ok(())
}

/// A cycle as a path of step ids (first id repeated at the end), if any.
/// Every dep must name a step (checked before).
fn find_cycle(steps: &[StepSpec]) -> Option<Vec<String>> {
    let index: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    // 0 = unvisited, 1 = on the current path, 2 = done.
    let mut mark = vec![0u8; steps.len()];
    let mut path: Vec<usize> = Vec::new();
    fn visit(
        i: usize,
        steps: &[StepSpec],
        index: &HashMap<&str, usize>,
        mark: &mut [u8],
        path: &mut Vec<usize>,
    ) -> Option<Vec<String>> {
        mark[i] = 1;
        path.push(i);
        for dep in &steps[i].deps {
            let j = *index.get(dep.as_str())?;
            if mark[j] == 1 {
                let start = path.iter().position(|&p| p == j).unwrap_or(0);
                let mut cycle: Vec<String> =
                    path[start..].iter().map(|&p| steps[p].id.clone()).collect();
                cycle.push(steps[j].id.clone());
                return Some(cycle);
            }
            if mark[j] == 0
                && let Some(c) = visit(j, steps, index, mark, path)
            {
                return Some(c);
            }
        }
        path.pop();
        mark[i] = 2;
        None
    }
    for i in 0..steps.len() {
        if mark[i] == 0
            && let Some(c) = visit(i, steps, &index, &mut mark, &mut path)
        {
            return Some(c);
        }
    }
    None
}

/// One step: exactly one of `run` (a shell command) or `prompt` (an agent
/// turn) is set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    pub id: String,
    pub run: Option<String>,
    pub prompt: Option<String>,
    /// Named session for an agent step; a new one per plan when absent.
    pub session: Option<String>,
    #[serde(default)]
    pub deps: Vec<String>,
    /// Seconds, or a duration like `5m` in TOML and JSON.
    #[serde(default, deserialize_with = "timeout_secs")]
    pub timeout_secs: Option<u64>,
    pub max_attempts: Option<u32>,
    pub workdir: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// This step's sandbox profile, over the plan's.
    #[serde(default)]
    pub sandbox: Option<String>,
    /// Running it twice does no harm: on the shared store, a step whose
    /// node was lost mid-run runs again elsewhere (agent steps always may).
    #[serde(default)]
    pub idempotent: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanState {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl PlanState {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            PlanState::Succeeded | PlanState::Failed | PlanState::Cancelled
        )
    }
    pub fn as_str(self) -> &'static str {
        match self {
            PlanState::Pending => "pending",
            PlanState::Running => "running",
            PlanState::Succeeded => "succeeded",
            PlanState::Failed => "failed",
            PlanState::Cancelled => "cancelled",
        }
    }
    pub const ALL: [PlanState; 5] = [
        PlanState::Pending,
        PlanState::Running,
        PlanState::Succeeded,
        PlanState::Failed,
        PlanState::Cancelled,
    ];
}

impl std::str::FromStr for PlanState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PlanState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown plan state `{s}`: use one of pending, running, succeeded, failed, cancelled"
                )
            })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Skipped,
}

impl StepState {
    pub fn is_terminal(self) -> bool {
        !matches!(self, StepState::Pending | StepState::Running)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            StepState::Pending => "pending",
            StepState::Running => "running",
            StepState::Succeeded => "succeeded",
            StepState::Failed => "failed",
            StepState::Cancelled => "cancelled",
            StepState::Skipped => "skipped",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanView {
    pub id: String,
    pub name: Option<String>,
    pub state: PlanState,
    /// Why the plan failed or was cancelled, in words.
    pub reason: Option<String>,
    pub created_ms: u64,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    /// Increases with every persisted transition; watch events carry it.
    pub revision: u64,
    /// The chain the plan belongs to (its own id when a user submitted it)
    /// and how deep in it: plans submitted by an agent or a step are one
    /// level below what submitted them.
    pub chain: String,
    pub depth: u32,
    pub steps: Vec<StepView>,
    /// For a pending plan: what it waits for, in words.
    pub waiting: Option<String>,
    /// For a pending plan: its place in the queue, from 1.
    pub queue_position: Option<u32>,
    /// The plan this one was restarted from (`plan_restart`).
    pub restarted_from: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepView {
    pub id: String,
    /// `run` or `agent`.
    pub kind: String,
    /// The command or the prompt.
    pub text: String,
    pub deps: Vec<String>,
    pub state: StepState,
    /// How many times the step has been started.
    pub attempts: u32,
    pub max_attempts: u32,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    /// The last bytes of stdout/stderr (lossy UTF-8).
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// The full (bounded) output log, while the plan exists.
    pub log_path: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanSummary {
    pub id: String,
    pub chain: String,
    pub name: Option<String>,
    pub state: PlanState,
    pub created_ms: u64,
    pub finished_ms: Option<u64>,
    pub steps_total: u32,
    /// Steps in a terminal state; the next three count some of them (the
    /// rest were cancelled).
    pub steps_done: u32,
    /// For a pending plan: its place in the queue, from 1.
    pub queue_position: Option<u32>,
    pub steps_succeeded: u32,
    pub steps_failed: u32,
    pub steps_skipped: u32,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DaemonStats {
    pub daemon_version: String,
    pub pid: u32,
    pub uptime_ms: u64,
    pub draining: bool,
    pub plans_pending: u64,
    pub plans_running: u64,
    pub plans_succeeded: u64,
    pub plans_failed: u64,
    pub plans_cancelled: u64,
    pub steps_running: u64,
    pub scheduler_restarts: u64,
    pub db_bytes: u64,
    pub sessions: u64,
    pub sessions_running: u64,
    /// Session actors in memory (idle ones stop after `sessions.idle_stop`).
    pub sessions_live: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    pub compactions: u64,
    pub breakers_open: u64,
    /// Live sessions' context budgets, fullest first (at most 10).
    pub contexts: Vec<SessionContext>,
    /// `fdatasync`/`fsync` calls the store made since start (WAL group
    /// commits and checkpoints); over the submits acknowledged meanwhile,
    /// how many acknowledgements share one sync.
    pub disk_syncs: u64,
    /// How agents' processes are confined here: "landlock ABI 7, mount
    /// namespace", or why they are not.
    pub sandbox: String,
    /// The kernel's Landlock ABI; 0: none.
    pub landlock_abi: u32,
    /// Where plans are kept: "sled at <dir>", or "postgres at host:port
    /// (database d, user u)" for the shared store.
    pub store: String,
    /// This daemon's node id on the shared store (new at every start);
    /// empty with sled.
    pub node: String,
    /// The nodes on the shared store that heartbeated lately, this one
    /// among them.
    pub peers: Vec<PeerView>,
}

/// A node of the shared store, as `stats` shows it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PeerView {
    pub node: String,
    pub host: String,
    pub pid: u32,
    /// Since its last heartbeat, by the database's clock.
    pub heartbeat_age_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SessionContext {
    pub session: String,
    pub context: ContextView,
}
