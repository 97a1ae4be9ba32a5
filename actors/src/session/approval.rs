//! Interactive approval of `ask` commands. A session's [`Approvals`] know
//! how many attached clients can answer (each holds an [`ApproverGuard`] in
//! its subscription) and which requests wait. A run's [`RunApprover`] asks:
//! with no one who can answer it is a refusal at once (today's unattended
//! behaviour); otherwise it emits `ApprovalRequested` on the session's
//! event stream and waits for the first `session_approve`, the timeout, or
//! the last such client leaving.

use super::run::Emitter;
use crate::tools::{Approval, Approver};
use flyto_protocol::SessionEvent;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::oneshot;

#[derive(Default)]
pub struct Approvals {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    /// Clients attached that can answer.
    approvers: usize,
    pending: HashMap<u64, oneshot::Sender<Approval>>,
}

impl Approvals {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a client that can answer for as long as the guard lives.
    pub fn approver(self: &Arc<Self>) -> ApproverGuard {
        self.lock().approvers += 1;
        ApproverGuard(self.clone())
    }

    /// The first answer wins: false when `approval` no longer waits.
    pub fn answer(&self, approval: u64, allow: bool) -> bool {
        let tx = self.lock().pending.remove(&approval);
        tx.is_some_and(|tx| {
            tx.send(if allow {
                Approval::Allowed
            } else {
                Approval::Denied
            })
            .is_ok()
        })
    }
}

/// One attached client that can answer approvals.
pub struct ApproverGuard(Arc<Approvals>);

impl Drop for ApproverGuard {
    fn drop(&mut self) {
        let mut inner = self.0.lock();
        inner.approvers = inner.approvers.saturating_sub(1);
        if inner.approvers == 0 {
            // Nobody is left to answer: refuse now rather than at the timeout.
            for (_, tx) in inner.pending.drain() {
                let _ = tx.send(Approval::NoOneAttached);
            }
        }
    }
}

/// The approver of one run.
pub struct RunApprover {
    pub approvals: Arc<Approvals>,
    pub emit: Emitter,
    pub timeout: Duration,
    /// `notification` hooks hear of each request.
    pub hooks: Option<Arc<super::run::SessionHooks>>,
}

/// Withdraws a request whose waiting future was dropped (a cancelled run).
struct Withdraw<'a>(&'a Approvals, u64);

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.0.lock().pending.remove(&self.1);
    }
}

impl Approver for RunApprover {
    fn approve<'a>(
        &'a self,
        command: &'a str,
        rule: &'a str,
    ) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            let id = {
                let mut inner = self.approvals.lock();
                if inner.approvers == 0 {
                    return Approval::NoOneAttached;
                }
                inner.next += 1;
                let id = inner.next;
                inner.pending.insert(id, tx);
                id
            };
            let _withdraw = Withdraw(&self.approvals, id);
            self.emit.emit(SessionEvent::ApprovalRequested {
                approval: id,
                command: command.to_string(),
                rule: rule.to_string(),
                timeout_ms: self.timeout.as_millis() as u64,
            });
            if let Some(h) = &self.hooks {
                h.background(
                    crate::hooks::HookEvent::Notification,
                    serde_json::json!({
                        "message": format!("approval needed to run: {command}"),
                        "command": command,
                        "rule": rule,
                    }),
                );
            }
            let answer = match tokio::time::timeout(self.timeout, rx).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(_)) => Approval::NoOneAttached,
                Err(_) => Approval::TimedOut(self.timeout),
            };
            let outcome = match answer {
                Approval::Allowed => "allowed",
                Approval::Denied => "denied",
                Approval::NoOneAttached => "no one attached",
                Approval::TimedOut(_) => "timed out",
            };
            self.emit.emit(SessionEvent::ApprovalResolved {
                approval: id,
                outcome: outcome.into(),
            });
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approver(approvals: &Arc<Approvals>, timeout: Duration) -> RunApprover {
        RunApprover {
            approvals: approvals.clone(),
            emit: Emitter::new(),
            timeout,
            hooks: None,
        }
    }

    #[tokio::test]
    async fn with_no_one_attached_an_ask_is_refused_at_once() {
        let approvals = Arc::new(Approvals::default());
        let a = approver(&approvals, Duration::from_secs(60));
        assert_eq!(a.approve("git push", "r").await, Approval::NoOneAttached);
    }

    #[tokio::test]
    async fn the_first_answer_wins_and_the_last_client_leaving_refuses() {
        let approvals = Arc::new(Approvals::default());
        let guard = approvals.approver();
        let a = approver(&approvals, Duration::from_secs(60));
        let mut rx = a.emit.tx.subscribe();
        let ask = tokio::spawn(async move { a.approve("git push", "r").await });
        let Ok((_, SessionEvent::ApprovalRequested { approval, .. })) = rx.recv().await else {
            panic!("no request");
        };
        assert!(approvals.answer(approval, true));
        assert!(
            !approvals.answer(approval, false),
            "a second answer is late"
        );
        assert_eq!(ask.await.unwrap(), Approval::Allowed);

        let a = approver(&approvals, Duration::from_secs(60));
        let ask = tokio::spawn(async move { a.approve("git push", "r").await });
        // Wait for the request to be registered, then leave.
        while approvals.lock().pending.is_empty() {
            tokio::task::yield_now().await;
        }
        drop(guard);
        assert_eq!(ask.await.unwrap(), Approval::NoOneAttached);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_request_times_out() {
        let approvals = Arc::new(Approvals::default());
        let _guard = approvals.approver();
        let a = approver(&approvals, Duration::from_secs(300));
        assert_eq!(
            a.approve("git push", "r").await,
            Approval::TimedOut(Duration::from_secs(300))
        );
        assert!(approvals.lock().pending.is_empty(), "withdrawn");
    }
}
