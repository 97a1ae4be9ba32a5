//! Following a plan with `plan_watch` until it is terminal. When the
//! connection drops (daemon restarted), reconnect within a deadline and watch
//! again: a reconnect gets a fresh snapshot, so nothing is missed.

use crate::conn;
use anyhow::Result;
use flyto_protocol::{
    Client, ClientError, ErrorCode, Event, FrameError, PlanView, Request, Response,
};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long the daemon may stay away without the plan making progress.
pub const RECONNECT_DEADLINE: Duration = Duration::from_secs(60);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Receives every distinct state of the plan, the first snapshot included.
pub trait WatchSink {
    fn update(&mut self, plan: &PlanView) -> Result<()>;

    /// Reconnect notices; stderr by default.
    fn notice(&mut self, message: &str) {
        crate::output::note(message);
    }
}

enum Outcome {
    Done(Box<PlanView>),
    Dropped(String),
}

/// Watches plan `id` on `client` (already connected) and returns its terminal
/// state.
pub fn follow(
    socket: &Path,
    mut client: Client,
    id: &str,
    sink: &mut dyn WatchSink,
) -> Result<PlanView> {
    let mut last: Option<PlanView> = None;
    let mut outage_since: Option<Instant> = None;
    loop {
        let before = last.clone();
        let reason = match watch_once(&mut client, id, &mut last, sink)? {
            Outcome::Done(plan) => return Ok(*plan),
            Outcome::Dropped(reason) => reason,
        };
        if last != before {
            outage_since = None;
        }
        let since = *outage_since.get_or_insert_with(Instant::now);
        sink.notice(&format!(
            "lost the watch on {id} ({reason}); reconnecting for up to {}s",
            RECONNECT_DEADLINE.as_secs()
        ));
        client = reconnect(socket, since + RECONNECT_DEADLINE)?;
        sink.notice("reconnected");
    }
}

fn watch_once(
    client: &mut Client,
    id: &str,
    last: &mut Option<PlanView>,
    sink: &mut dyn WatchSink,
) -> Result<Outcome> {
    if let Err(e) = client.send(&Request::PlanWatch { id: id.to_string() }) {
        return dropped(e);
    }
    loop {
        let resp = match client.recv() {
            Ok(resp) => resp,
            Err(e) => return dropped(e),
        };
        let plan = match resp {
            Response::Plan { plan }
            | Response::Event {
                event: Event::PlanUpdated { plan },
                ..
            } => plan,
            // Terminal states return below, so this End came early.
            Response::End {} => {
                return Ok(Outcome::Dropped(
                    "the daemon ended the watch before the plan finished".to_string(),
                ));
            }
            Response::Error { code, message } => {
                return dropped(ClientError::Remote { code, message });
            }
            other => return Err(conn::unexpected("plan_watch", &other)),
        };
        if last.as_ref() != Some(&plan) {
            sink.update(&plan)?;
        }
        if plan.state.is_terminal() {
            return Ok(Outcome::Done(Box::new(plan)));
        }
        *last = Some(plan);
    }
}

/// A transient error ends this watch; any other is the command's error.
fn dropped(err: ClientError) -> Result<Outcome> {
    if retryable(&err) {
        let reason = match err {
            ClientError::Closed => "the daemon closed the connection".to_string(),
            other => other.to_string(),
        };
        Ok(Outcome::Dropped(reason))
    } else {
        Err(err.into())
    }
}

/// Errors a restarting daemon produces.
fn retryable(err: &ClientError) -> bool {
    matches!(
        err,
        ClientError::NotRunning { .. }
            | ClientError::Closed
            | ClientError::Frame(FrameError::Io(_) | FrameError::Truncated { .. })
            | ClientError::Remote {
                code: ErrorCode::Unavailable,
                ..
            }
    )
}

fn reconnect(socket: &Path, deadline: Instant) -> Result<Client> {
    let mut delay = Duration::from_millis(100);
    loop {
        std::thread::sleep(delay.min(deadline.saturating_duration_since(Instant::now())));
        match conn::connect(socket) {
            Ok(client) => return Ok(client),
            Err(e) if retryable(&e) && Instant::now() < deadline => {}
            Err(e) if retryable(&e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "lost the connection to flytod and it did not come back within {}s",
                    RECONNECT_DEADLINE.as_secs()
                )));
            }
            Err(e) => return Err(e.into()),
        }
        delay = (delay * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn only_restart_errors_are_retried() {
        assert!(retryable(&ClientError::NotRunning {
            path: PathBuf::from("/x")
        }));
        assert!(retryable(&ClientError::Closed));
        assert!(retryable(&ClientError::Remote {
            code: ErrorCode::Unavailable,
            message: String::new()
        }));
        assert!(!retryable(&ClientError::Remote {
            code: ErrorCode::NotFound,
            message: String::new()
        }));
        assert!(!retryable(&ClientError::Unexpected(String::new())));
    }
}
