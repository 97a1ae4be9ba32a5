//! The exit-code contract, and how a failure is shown on stderr.

use anyhow::Error;
use flyto_protocol::{ClientError, ErrorCode, FrameError, PlanState};

pub const SUCCESS: u8 = 0;
pub const PLAN_FAILED: u8 = 1;
/// Also what any other local failure (e.g. an unreadable log file) exits with.
pub const OTHER: u8 = 1;
pub const USAGE: u8 = 2;
pub const NOT_RUNNING: u8 = 3;
pub const REFUSED: u8 = 4;
pub const PLAN_CANCELLED: u8 = 5;
pub const UNAVAILABLE: u8 = 6;
/// A session run ended with an `Error` event, a guard stopped it (stop
/// `max_iterations`, `budget`, `repeat_guard`, `stalled`), or it stopped
/// because the context no longer fits and compaction failed (stop
/// `compact_failed` or `breaker_open`).
pub const RUN_FAILED: u8 = 1;
/// A session run was cancelled.
pub const RUN_CANCELLED: u8 = 5;
/// A second Ctrl-C while a run was being cancelled (128 + SIGINT).
pub const INTERRUPTED: u8 = 130;

/// Shown under the top-level `--help`.
pub const AFTER_HELP: &str = "\
Exit codes:
  0    success; with --wait or --watch: the plan succeeded; session_send:
       the run finished its turn; session_compact: compacted, or nothing to
       compact
  1    the plan failed (with --wait or --watch), a session run ended with an
       error or was stopped by a guard (sessions.max_iterations,
       max_run_cost_usd, a repeated call, a stall), a compaction failed
       (session_send too stops with 1 when the context no longer fits and
       compaction failed or its breaker is open), or another local error
  2    usage error: bad arguments or an invalid plan file
  3    flytod is not running or cannot be reached
  4    flytod refused the request (BadRequest, NotFound, Conflict,
       PermissionDenied, TooLarge, ProtocolMismatch, Internal), e.g. a
       session_send while a run is active
  5    the plan (with --wait or --watch), the session run or the compaction
       was cancelled
  6    flytod is unavailable (shutting down), or a session run was
       interrupted because flytod shut down
  130  a second Ctrl-C quit while a run was being cancelled; Ctrl-C while
       waiting for a plan (submit_plan --wait, plan_status --watch or
       --follow) stops waiting, leaves the plan running and ends flytoctl
       as SIGINT does (130 in a shell)
plan_status --log STEP --follow exits like --watch, with the step's outcome
(a skipped step counts as failed).

Every subcommand also answers to its kebab-case name: submit-plan,
plan-status, session-send, ...";

/// A mistake in what the user gave us (arguments, plan file): exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

pub fn usage(message: impl Into<String>) -> Error {
    Error::new(UsageError(message.into()))
}

/// Exit code of a finished plan followed with `--wait` / `--watch`.
pub fn plan_outcome(state: PlanState) -> u8 {
    match state {
        PlanState::Failed => PLAN_FAILED,
        PlanState::Cancelled => PLAN_CANCELLED,
        PlanState::Succeeded | PlanState::Pending | PlanState::Running => SUCCESS,
    }
}

pub fn code_for(err: &Error) -> u8 {
    for cause in err.chain() {
        if let Some(client) = cause.downcast_ref::<ClientError>() {
            return client_code(client);
        }
        if cause.downcast_ref::<UsageError>().is_some() {
            return USAGE;
        }
    }
    OTHER
}

fn client_code(err: &ClientError) -> u8 {
    match err {
        ClientError::NotRunning { .. } | ClientError::Connect { .. } | ClientError::Closed => {
            NOT_RUNNING
        }
        ClientError::Frame(FrameError::Io(_) | FrameError::Truncated { .. }) => NOT_RUNNING,
        ClientError::Frame(
            FrameError::TooLarge { .. } | FrameError::Decode(_) | FrameError::Encode(_),
        ) => REFUSED,
        ClientError::Remote {
            code: ErrorCode::Unavailable,
            ..
        } => UNAVAILABLE,
        ClientError::Remote { .. } | ClientError::Unexpected(_) => REFUSED,
    }
}

/// True when stdout was closed under us (`flytoctl ... | head`): not worth a
/// message.
pub fn is_broken_pipe(err: &Error) -> bool {
    let mut pipe = false;
    for cause in err.chain() {
        if cause.downcast_ref::<ClientError>().is_some() {
            return false;
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            pipe |= io.kind() == std::io::ErrorKind::BrokenPipe;
        }
    }
    pipe
}

/// The text after `flytoctl: `. Remote errors read `<code>: <message>`; a
/// cause already spelled out by the message before it is not repeated.
pub fn message(err: &Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = match cause.downcast_ref::<ClientError>() {
            Some(ClientError::Remote { code, message }) => format!("{code}: {message}"),
            _ => cause.to_string(),
        };
        if parts.last().is_some_and(|prev| prev.contains(&text)) {
            continue;
        }
        parts.push(text);
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn codes_follow_the_contract() {
        let not_running = Error::from(ClientError::NotRunning {
            path: PathBuf::from("/x"),
        });
        assert_eq!(code_for(&not_running), NOT_RUNNING);
        let refused = Error::from(ClientError::Remote {
            code: ErrorCode::NotFound,
            message: "no plan p9".into(),
        });
        assert_eq!(code_for(&refused), REFUSED);
        assert_eq!(message(&refused), "NotFound: no plan p9");
        let draining = Error::from(ClientError::Remote {
            code: ErrorCode::Unavailable,
            message: "daemon is shutting down".into(),
        })
        .context("watching p1");
        assert_eq!(code_for(&draining), UNAVAILABLE);
        assert_eq!(
            message(&draining),
            "watching p1: Unavailable: daemon is shutting down"
        );
        assert_eq!(code_for(&usage("bad file")), USAGE);
        assert_eq!(code_for(&anyhow::anyhow!("other")), OTHER);
    }

    #[test]
    fn repeated_causes_are_shown_once() {
        let io = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "broken pipe");
        let err = Error::from(ClientError::Frame(FrameError::Io(io)));
        assert_eq!(message(&err), "connection error: broken pipe");
        assert_eq!(code_for(&err), NOT_RUNNING);
        assert!(!is_broken_pipe(&err));
        let stdout = Error::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("cannot write to stdout");
        assert!(is_broken_pipe(&stdout));
    }

    #[test]
    fn plan_outcomes() {
        assert_eq!(plan_outcome(PlanState::Succeeded), SUCCESS);
        assert_eq!(plan_outcome(PlanState::Failed), PLAN_FAILED);
        assert_eq!(plan_outcome(PlanState::Cancelled), PLAN_CANCELLED);
    }
}
