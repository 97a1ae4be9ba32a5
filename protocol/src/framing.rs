//! Frames: `u32` big-endian length, then that many bytes of bincode 2
//! (serde, standard config). JSON-lines helpers for the text mode.

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{Read, Write};

/// Largest payload either side accepts, in bytes (16 MiB).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
    #[error(
        "frame of {len} bytes exceeds the maximum of {max} bytes (is the peer a flyto client speaking protocol {}?)",
        crate::PROTOCOL_VERSION
    )]
    TooLarge { len: usize, max: usize },
    #[error("truncated frame: the connection closed after {got} of {expected} bytes")]
    Truncated { expected: usize, got: usize },
    #[error("could not decode message: {0}")]
    Decode(String),
    #[error("could not encode message: {0}")]
    Encode(String),
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    bincode::serde::encode_to_vec(msg, config()).map_err(|e| FrameError::Encode(e.to_string()))
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, FrameError> {
    let (value, used) = bincode::serde::decode_from_slice(bytes, config())
        .map_err(|e| FrameError::Decode(e.to_string()))?;
    if used != bytes.len() {
        return Err(FrameError::Decode(format!(
            "{} trailing bytes after the message",
            bytes.len() - used
        )));
    }
    Ok(value)
}

/// Length header + payload in one buffer, ready for one `write_all`.
pub fn frame<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let payload = encode(msg)?;
    if payload.len() > MAX_FRAME {
        return Err(FrameError::TooLarge {
            len: payload.len(),
            max: MAX_FRAME,
        });
    }
    let mut out = Vec::with_capacity(4 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

pub fn write_frame<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    w.write_all(&frame(msg)?)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame's payload. `Ok(None)` on a clean end of stream before the
/// first header byte.
pub fn read_frame_bytes<R: Read>(r: &mut R) -> Result<Option<Vec<u8>>, FrameError> {
    let mut header = [0u8; 4];
    let got = read_full(r, &mut header)?;
    if got == 0 {
        return Ok(None);
    }
    if got < 4 {
        return Err(FrameError::Truncated { expected: 4, got });
    }
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge {
            len,
            max: MAX_FRAME,
        });
    }
    let mut payload = vec![0u8; len];
    let got = read_full(r, &mut payload)?;
    if got < len {
        return Err(FrameError::Truncated { expected: len, got });
    }
    Ok(Some(payload))
}

pub fn read_frame<R: Read, T: DeserializeOwned>(r: &mut R) -> Result<Option<T>, FrameError> {
    match read_frame_bytes(r)? {
        Some(bytes) => Ok(Some(decode(&bytes)?)),
        None => Ok(None),
    }
}

fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> Result<usize, FrameError> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(got)
}

/// Whether a connection whose first byte is `first` speaks JSON lines: an
/// object's `{`, the whitespace a script may send before it, or any other
/// text (`ping`, `[1]`), so that a person typing at socat gets a JSON error
/// rather than a binary frame. No binary frame starts so: its first byte is
/// the top byte of a length of at most [`MAX_FRAME`] (0 or 1).
pub fn starts_json_line(first: u8) -> bool {
    first.is_ascii_graphic() || first.is_ascii_whitespace()
}

/// One JSON line (with the trailing newline).
pub fn json_line<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let mut out = serde_json::to_vec(msg).map_err(|e| FrameError::Encode(e.to_string()))?;
    out.push(b'\n');
    Ok(out)
}

/// Async framing over tokio streams, for the daemon.
#[cfg(feature = "tokio")]
pub mod nonblocking {
    use super::{FrameError, MAX_FRAME, frame};
    use serde::Serialize;
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

    pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
        w: &mut W,
        msg: &T,
    ) -> Result<(), FrameError> {
        w.write_all(&frame(msg)?).await?;
        w.flush().await?;
        Ok(())
    }

    /// Like [`super::read_frame_bytes`]; `first` is a byte already consumed
    /// from the stream (the encoding sniff), if any.
    pub async fn read_frame_bytes<R: AsyncRead + Unpin>(
        r: &mut R,
        first: Option<u8>,
    ) -> Result<Option<Vec<u8>>, FrameError> {
        let mut header = [0u8; 4];
        let mut got = 0;
        if let Some(b) = first {
            header[0] = b;
            got = 1;
        }
        got += read_full(r, &mut header[got..]).await?;
        if got == 0 {
            return Ok(None);
        }
        if got < 4 {
            return Err(FrameError::Truncated { expected: 4, got });
        }
        let len = u32::from_be_bytes(header) as usize;
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge {
                len,
                max: MAX_FRAME,
            });
        }
        let mut payload = vec![0u8; len];
        let got = read_full(r, &mut payload).await?;
        if got < len {
            return Err(FrameError::Truncated { expected: len, got });
        }
        Ok(Some(payload))
    }

    async fn read_full<R: AsyncRead + Unpin>(
        r: &mut R,
        buf: &mut [u8],
    ) -> Result<usize, FrameError> {
        let mut got = 0;
        while got < buf.len() {
            let n = r.read(&mut buf[got..]).await?;
            if n == 0 {
                break;
            }
            got += n;
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::*;
    use std::collections::BTreeMap;

    fn samples() -> (Vec<Request>, Vec<Response>) {
        let step = StepSpec {
            id: "a".into(),
            run: Some("echo hi".into()),
            deps: vec!["b".into()],
            timeout_secs: Some(3),
            ..Default::default()
        };
        let plan = PlanSpec {
            name: Some("p".into()),
            steps: vec![step],
            env: [("PATH".to_string(), "/bin".to_string())].into(),
            sandbox: Some("read-only".into()),
        };
        let view = PlanView {
            id: "p1".into(),
            name: None,
            state: PlanState::Running,
            reason: Some("r".into()),
            created_ms: 1,
            started_ms: Some(2),
            finished_ms: None,
            revision: 3,
            chain: "p1".into(),
            depth: 0,
            steps: vec![StepView {
                id: "a".into(),
                kind: "run".into(),
                text: "echo".into(),
                deps: vec![],
                state: StepState::Skipped,
                attempts: 1,
                max_attempts: 3,
                started_ms: None,
                finished_ms: Some(4),
                exit_code: Some(-1),
                error: None,
                stdout_tail: "é".into(),
                stderr_tail: String::new(),
                log_path: Some("/x".into()),
            }],
            waiting: Some("queued".into()),
            queue_position: Some(2),
            restarted_from: Some("p0".into()),
        };
        let requests = vec![
            Request::Hello {
                protocol: 1,
                client: "t".into(),
            },
            Request::Ping {},
            Request::Stats {},
            Request::SubmitPlan {
                plan,
                idempotency_key: Some("k".into()),
            },
            Request::PlanStatus { id: "p1".into() },
            Request::PlanWatch { id: "p1".into() },
            Request::PlanCancel { id: "p1".into() },
            Request::PlanList {
                state: Some(PlanState::Failed),
                limit: None,
            },
            Request::SessionNew {
                name: Some("n".into()),
                workdir: None,
                model: Some("fast".into()),
                sandbox: Some("read-only".into()),
                network: Some(false),
            },
            Request::SessionSend {
                id: "s1".into(),
                text: "hi".into(),
                can_approve: true,
            },
            Request::SessionAttach {
                id: "s1".into(),
                recent: Some(5),
                can_approve: false,
            },
            Request::SessionCancel { id: "s1".into() },
            Request::SessionList {},
            Request::SessionHistory { id: "s1".into() },
            Request::SessionReset {
                id: "s1".into(),
                soft: true,
            },
            Request::SessionSetModel {
                id: "s1".into(),
                model: "fast".into(),
            },
            Request::SessionCompact { id: "s1".into() },
            Request::BreakerStatus {},
            Request::BreakerReset {
                project: Some("0123456789abcdef".into()),
            },
            Request::BreakerReset { project: None },
            Request::PlanRestart { id: "p1".into() },
            Request::PlanRemove {
                id: "nightly".into(),
            },
            Request::SessionDelete { id: "s1".into() },
            Request::SessionApprove {
                id: "s1".into(),
                approval: 2,
                allow: true,
            },
            Request::PolicyCheck {
                command: "rm -rf /".into(),
                workdir: "/w".into(),
            },
            Request::SkillList {
                workdir: "/w".into(),
            },
            Request::SkillShow {
                name: "flyto-plans".into(),
                workdir: "/w".into(),
            },
            Request::SkillReload {
                workdir: "/w".into(),
            },
            Request::MemoryList {
                project: "/w".into(),
            },
            Request::MemoryShow {
                project: "/w".into(),
                name: "test-command".into(),
            },
            Request::MemorySearch {
                project: "/w".into(),
                query: "数据库 tests".into(),
            },
            Request::MemoryForget {
                project: "/w".into(),
                name: "a".into(),
                reason: "stale".into(),
            },
            Request::MemoryRestore {
                project: "/w".into(),
                name: "a".into(),
            },
            Request::MemoryPath {
                project: "/w".into(),
            },
            Request::MemoryExport {},
            Request::HookList {},
            Request::MemoryImport {
                folders: vec![MemoryFolder {
                    scope: "user".into(),
                    files: vec![MemoryFile {
                        name: "a.md".into(),
                        text: "---\nname: a\n---\n".into(),
                    }],
                }],
            },
            Request::DreamStatus { project: None },
            Request::DreamLog {
                project: Some("/w".into()),
                limit: 20,
            },
            Request::DreamDiff { run: "d1".into() },
            Request::DreamRun {
                project: "/w".into(),
                dry_run: true,
            },
            Request::DreamUndo {
                project: "/w".into(),
                run: Some("d1".into()),
            },
            Request::JobNext {
                expr: "0 8 * * MON-FRI".into(),
                tz: Some("Europe/Berlin".into()),
                after: None,
                count: 3,
            },
            Request::JobCreate {
                spec: JobSpec {
                    schedule: Some("@daily".into()),
                    prompt: Some("summarise".into()),
                    ..JobSpec::default()
                },
            },
            Request::JobUpdate {
                id: "j1".into(),
                spec: JobSpec::default(),
            },
            Request::JobList {},
            Request::JobShow { id: "j1".into() },
            Request::JobPause { id: "j1".into() },
            Request::JobResume { id: "j1".into() },
            Request::JobDelete { id: "j1".into() },
            Request::JobRun { id: "j1".into() },
            Request::ChannelList {},
            Request::ChannelBind {
                spec: ChannelSpec {
                    kind: "inbox".into(),
                    dir: Some("/home/u/inbox".into()),
                    ..ChannelSpec::default()
                },
            },
            Request::ChannelUnbind {
                name: "inbox".into(),
            },
            Request::ChannelPair {
                code: "K7QM2XPA".into(),
            },
            Request::ChannelTest {
                name: "telegram:42".into(),
            },
            Request::ChannelQr { base_url: None },
            Request::ChannelQrWait {
                id: "q1".into(),
                base_url: None,
                name: Some("wechat".into()),
            },
            Request::McpList {},
            Request::McpTools {
                server: "gh".into(),
            },
            Request::McpRestart {
                server: "gh".into(),
            },
        ];
        let memory_entry = MemoryEntryView {
            name: "test-command".into(),
            kind: "project".into(),
            description: "how the tests run".into(),
            scope: "project".into(),
            path: "/s/test-command.md".into(),
            created_ms: 1,
            updated_ms: 2,
            source: "extracted".into(),
            version: 3,
            session: "s1".into(),
        };
        let skill = SkillView {
            name: "flyto-plans".into(),
            description: "Use when".into(),
            source: "user".into(),
            path: "/c/skills/flyto-plans".into(),
            shadowed: vec!["<builtin>/flyto-plans".into()],
            resources: vec!["references/a.md".into()],
            license: Some("MIT".into()),
            compatibility: None,
            allowed_tools: Some("bash".into()),
            metadata: BTreeMap::from([("author".to_string(), "me".to_string())]),
        };
        let session = SessionView {
            parent: None,
            id: "s1".into(),
            name: None,
            workdir: "/w".into(),
            model: "m".into(),
            status: "idle".into(),
            error: Some("interrupted".into()),
            messages: 3,
            context_base_idx: 1,
            input_tokens: 10,
            output_tokens: 20,
            cost_usd: 0.5,
            created_ms: 1,
            updated_ms: 2,
            chain: "s1".into(),
            depth: 0,
            context: ContextView {
                tokens: 5,
                estimated: 2,
                context_window: 100,
                effective_window: 90,
                warn_at: 70,
                compact_at: 77,
                compactions: 1,
                head_from_idx: 0,
                summary_from_idx: 2,
                has_summary: true,
            },
        };
        let session_events = vec![
            SessionEvent::RunStart { run: 1 },
            SessionEvent::LlmStart { model: "m".into() },
            SessionEvent::Text { delta: "é".into() },
            SessionEvent::Reasoning { delta: "r".into() },
            SessionEvent::Restart { reason: "x".into() },
            SessionEvent::ToolCall {
                id: "c".into(),
                name: "read".into(),
                arguments: "{\"path\":\"a\"}".into(),
            },
            SessionEvent::ToolResult {
                id: "c".into(),
                name: "read".into(),
                preview: "p".into(),
                is_error: false,
            },
            SessionEvent::LlmEnd {
                input_tokens: 1,
                output_tokens: 2,
                cache_read_tokens: 3,
                cache_write_tokens: 4,
                cost_usd: 0.25,
            },
            SessionEvent::Notice {
                message: "n".into(),
            },
            SessionEvent::Cancelled {
                message: "c".into(),
                shutdown: true,
            },
            SessionEvent::Error {
                message: "e".into(),
            },
            SessionEvent::CompactStarted {
                tokens: 9,
                compact_at: 8,
            },
            SessionEvent::Compacted {
                before_tokens: 9,
                after_tokens: 3,
                tier: "summary".into(),
                duration_ms: 4,
            },
            SessionEvent::CompactFailed {
                message: "m".into(),
                breaker_open: true,
            },
            SessionEvent::Done {
                stop: "end_turn".into(),
                message: "m".into(),
            },
            SessionEvent::ApprovalRequested {
                approval: 1,
                command: "git push".into(),
                rule: "ask rule \"git push\"".into(),
                timeout_ms: 300_000,
            },
            SessionEvent::ApprovalResolved {
                approval: 1,
                outcome: "allowed".into(),
            },
        ];
        let responses = vec![
            Response::Welcome {
                protocol: 1,
                daemon_version: "v".into(),
            },
            Response::Pong {
                daemon_version: "v".into(),
                pid: 1,
                uptime_ms: 2,
            },
            Response::Stats {
                stats: DaemonStats {
                    contexts: vec![SessionContext {
                        session: "s1".into(),
                        context: ContextView::default(),
                    }],
                    ..DaemonStats::default()
                },
            },
            Response::Breakers {
                breakers: vec![BreakerView {
                    project: "0123456789abcdef".into(),
                    workdir: "/w".into(),
                    state: "open".into(),
                    failures: 3,
                    last_error: Some("e".into()),
                    reset_at_ms: Some(7),
                    updated_ms: 6,
                }],
            },
            Response::BreakersReset {
                projects: vec!["0123456789abcdef".into()],
            },
            Response::PlanSubmitted {
                id: "p1".into(),
                duplicate: true,
            },
            Response::Plan { plan: view.clone() },
            Response::Plans {
                plans: vec![PlanSummary {
                    id: "p1".into(),
                    chain: "p1".into(),
                    name: Some("n".into()),
                    state: PlanState::Pending,
                    created_ms: 1,
                    finished_ms: None,
                    steps_total: 2,
                    steps_done: 1,
                    queue_position: Some(1),
                    steps_succeeded: 1,
                    steps_failed: 0,
                    steps_skipped: 0,
                }],
                total: 7,
            },
            Response::PlanCancelled {
                id: "p1".into(),
                state: PlanState::Cancelled,
                already_finished: true,
            },
            Response::PlanRemoved { id: "p1".into() },
            Response::Event {
                seq: 9,
                event: Event::PlanUpdated { plan: view },
            },
            Response::End {},
            Response::error(ErrorCode::TooLarge, "m"),
            Response::Session {
                session: session.clone(),
            },
            Response::Sessions {
                sessions: vec![session.clone()],
            },
            Response::History {
                session,
                messages: vec![MessageView {
                    idx: 0,
                    role: "user".into(),
                    blocks: vec![
                        BlockView::Text { text: "t".into() },
                        BlockView::Thinking { text: "th".into() },
                        BlockView::ToolUse {
                            id: "c".into(),
                            name: "bash".into(),
                            arguments: "{}".into(),
                        },
                        BlockView::ToolResult {
                            call_id: "c".into(),
                            content: "ok".into(),
                            is_error: true,
                        },
                    ],
                    created_ms: 7,
                }],
                summary: Some("s".into()),
                extractions: vec![ExtractionView {
                    at_ms: 8,
                    from_idx: 0,
                    to_idx: 10,
                    turns: 5,
                    model: "fast".into(),
                    model_calls: 2,
                    input_tokens: 3,
                    output_tokens: 4,
                    cost_usd: 0.5,
                    saved: vec!["test-command".into()],
                    forgot: vec![],
                    outcome: "done".into(),
                }],
            },
            Response::SessionDeleted { id: "s1".into() },
            Response::ApprovalAnswered {
                approval: 2,
                allow: false,
            },
            Response::PolicyVerdict {
                check: PolicyCheckView {
                    verdict: Verdict::Deny,
                    rule: Some("deny:recursive-delete".into()),
                    reason: "it recursively deletes /".into(),
                    command: Some("rm -rf /".into()),
                    commands: vec!["rm -rf /".into()],
                    message: Some("Not run".into()),
                    workdir: "/w".into(),
                },
            },
            Response::PolicyVerdict {
                check: PolicyCheckView {
                    verdict: Verdict::Allow,
                    rule: None,
                    reason: "no rule refuses it".into(),
                    command: None,
                    commands: vec![],
                    message: None,
                    workdir: "/w".into(),
                },
            },
            Response::Skills {
                skills: vec![skill.clone()],
                broken: vec![BrokenSkillView {
                    file: "/w/.flyto/skills/x/SKILL.md".into(),
                    line: 3,
                    reason: "the description is empty".into(),
                }],
            },
            Response::Skill {
                skill,
                body: "# Plans\n".into(),
            },
            Response::SkillsReloaded {
                skills: 3,
                broken: 1,
            },
            Response::Memory {
                scopes: vec![MemoryScopeView {
                    scope: "project".into(),
                    dir: "/s/projects/0123/memory".into(),
                    entries: vec![memory_entry.clone()],
                    problems: vec![MemoryProblemView {
                        file: "/s/bad.md".into(),
                        line: 3,
                        reason: "bad".into(),
                    }],
                }],
            },
            Response::MemoryEntry {
                entry: memory_entry.clone(),
                body: "# Tests\n".into(),
            },
            Response::MemoryHits {
                hits: vec![MemoryHitView {
                    entry: memory_entry,
                    score: 1.5,
                }],
            },
            Response::MemoryForgotten {
                name: "a".into(),
                trash: "/s/.trash/a@1.md".into(),
            },
            Response::MemoryRestored {
                name: "a".into(),
                path: "/s/a.md".into(),
            },
            Response::MemoryPaths {
                project: "/p".into(),
                user: "/u".into(),
            },
            Response::MemoryFolders { folders: vec![] },
            Response::McpServers {
                servers: vec![McpServerView {
                    name: "gh".into(),
                    transport: "stdio: gh-mcp".into(),
                    enabled: true,
                    state: "running".into(),
                    tools: 3,
                    last_error: None,
                    problems: vec![],
                    restarts: 0,
                    protocol: Some("2025-06-18".into()),
                }],
            },
            Response::McpTools {
                tools: vec![McpToolView {
                    name: "mcp__gh__x".into(),
                    remote: "x".into(),
                    description: "d".into(),
                    read_only: true,
                    input_schema: "{}".into(),
                }],
            },
            Response::Hooks { hooks: vec![] },
            Response::MemoryImported {
                written: 1,
                forgotten: 2,
                unchanged: 3,
            },
            Response::Dream {
                json: "{\"outcome\":\"applied\"}".into(),
            },
            Response::JobNext {
                instants: vec!["2026-12-02T08:00:00+01:00".into()],
                warnings: vec![],
                tz: "Europe/Berlin".into(),
                tzdb: "2025b".into(),
            },
            Response::JobRan {
                id: "j1".into(),
                plan: "p3".into(),
            },
            Response::Channels {
                channels: vec![ChannelView {
                    name: "telegram".into(),
                    kind: "telegram".into(),
                    state: "ok".into(),
                    last_poll: Some("2026-12-01T08:00:00Z".into()),
                    queued: 2,
                    ..ChannelView::default()
                }],
                pairings: vec![PairingView {
                    code: "K7QM2XPA".into(),
                    binding: "telegram".into(),
                    user: "42".into(),
                    user_name: "ann".into(),
                    created: "2026-12-01T08:00:00Z".into(),
                }],
            },
            Response::Channel {
                channel: None,
                message: "admitted ann".into(),
            },
            Response::ChannelQr {
                id: "q1".into(),
                content: "https://example.com/q".into(),
            },
            Response::ChannelQrStatus {
                status: "wait".into(),
                channel: None,
            },
            Response::JobHistory {
                job: JobView {
                    id: "j1".into(),
                    name: None,
                    schedule: "@daily".into(),
                    tz: "UTC".into(),
                    mode: "isolated".into(),
                    state: "active".into(),
                    next_fire: None,
                    next_fire_utc: None,
                    last_outcome: None,
                    consecutive_failures: 0,
                    max_consecutive_failures: 5,
                    workdir: None,
                    what: "summarise".into(),
                    timeout_secs: None,
                    expires: None,
                    created_ms: 1,
                },
                fires: vec![FireView {
                    instant: "2026-12-02T00:00:00+00:00".into(),
                    at_ms: 2,
                    manual: false,
                    outcome: "submitted p3".into(),
                    plan: Some("p3".into()),
                    plan_state: None,
                    duration_ms: None,
                }],
            },
        ];
        let mut responses = responses;
        responses.extend(session_events.into_iter().enumerate().map(|(i, event)| {
            Response::Event {
                seq: i as u64,
                event: Event::Session {
                    session: "s1".into(),
                    event,
                },
            }
        }));
        (requests, responses)
    }

    #[test]
    fn every_message_round_trips_through_both_encodings() {
        let (requests, responses) = samples();
        for req in requests {
            let bytes = frame(&req).unwrap();
            let back: Request = read_frame(&mut &bytes[..]).unwrap().unwrap();
            assert_eq!(back, req);
            let line = json_line(&req).unwrap();
            let back: Request = serde_json::from_slice(&line).unwrap();
            assert_eq!(back, req);
        }
        for resp in responses {
            let bytes = frame(&resp).unwrap();
            let back: Response = read_frame(&mut &bytes[..]).unwrap().unwrap();
            assert_eq!(back, resp);
            let line = json_line(&resp).unwrap();
            let back: Response = serde_json::from_slice(&line).unwrap();
            assert_eq!(back, resp);
        }
    }

    #[test]
    fn json_requests_are_one_object_per_op() {
        let line = String::from_utf8(json_line(&Request::Ping {}).unwrap()).unwrap();
        assert_eq!(line, "{\"ping\":{}}\n");
        let req: Request = serde_json::from_str(r#"{"plan_status":{"id":"p7"}}"#).unwrap();
        assert_eq!(req, Request::PlanStatus { id: "p7".into() });
        // Optional fields may be left out by scripts.
        let req: Request =
            serde_json::from_str(r#"{"submit_plan":{"plan":{"steps":[{"id":"a","run":"true"}]}}}"#)
                .unwrap();
        assert!(matches!(req, Request::SubmitPlan { .. }));
        // A script's session_send needs no `can_approve`: it cannot answer.
        let req: Request =
            serde_json::from_str(r#"{"session_send":{"id":"s1","text":"hi"}}"#).unwrap();
        assert!(matches!(
            req,
            Request::SessionSend {
                can_approve: false,
                ..
            }
        ));
    }

    #[test]
    fn oversized_and_truncated_frames_are_errors() {
        let header = ((MAX_FRAME + 1) as u32).to_be_bytes();
        assert!(matches!(
            read_frame_bytes(&mut &header[..]),
            Err(FrameError::TooLarge { .. })
        ));
        let mut bytes = 10u32.to_be_bytes().to_vec();
        bytes.extend_from_slice(b"abc");
        assert!(matches!(
            read_frame_bytes(&mut &bytes[..]),
            Err(FrameError::Truncated {
                expected: 10,
                got: 3
            })
        ));
        assert!(read_frame_bytes(&mut &b""[..]).unwrap().is_none());
    }
}
