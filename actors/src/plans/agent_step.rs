//! Runs an `agent` step: a prompt sent to a session (a new one per step, or
//! the named one) through the session room's actor messages, followed to
//! the end of its run. Cancel and timeout cancel the session's run.

use crate::session::{ManagerMsg, SESSION_MANAGER, SessionMsg};
use crate::tools::process::{CancelReason, Exit, Outcome};
use flyto_protocol::SessionEvent;
use ractor::rpc::CallResult;
use std::time::Duration;
use tokio::sync::oneshot;

pub struct AgentStep {
    pub prompt: String,
    /// A named session to use (created if missing); without one, the
    /// plan's own session (`plan <id>`), shared by its agent steps.
    pub session: Option<String>,
    pub plan: String,
    pub workdir: String,
    /// The plan's chain and depth; the session works at the same depth.
    pub chain: String,
    pub depth: u32,
    pub timeout: Duration,
    /// The step's confinement, for the session it creates or may use.
    pub sandbox: Option<crate::session::SessionSandbox>,
    /// The job whose fire submitted the plan (`j<N>`): its session's run
    /// may not create, change or delete jobs.
    pub job: Option<String>,
}

fn failed(message: String) -> Outcome {
    Outcome {
        exit: Exit::SpawnFailed(message),
        stdout_tail: String::new(),
        stderr_tail: String::new(),
        log_truncated: false,
    }
}

use crate::session::ask;

pub async fn run(
    step: AgentStep,
    mut cancel: oneshot::Receiver<CancelReason>,
    tail_max: usize,
) -> Outcome {
    let Some(manager) = SESSION_MANAGER.find() else {
        return failed("the session manager is not running; see the daemon log".into());
    };
    let name = step
        .session
        .clone()
        .unwrap_or_else(|| format!("plan {}", step.plan));
    let workdir = step.workdir.clone();
    let chain = Some((step.chain.clone(), step.depth));
    let sandbox = step.sandbox.clone();
    let id = ask(&manager, |reply| ManagerMsg::ByName {
        name,
        workdir,
        chain,
        sandbox,
        reply,
    })
    .await;
    let id = match id {
        Ok(id) => id,
        Err(m) => return failed(m),
    };
    let session = match ask(&manager, |reply| ManagerMsg::Get {
        id: id.clone(),
        reply,
    })
    .await
    {
        Ok(s) => s,
        Err(m) => return failed(m),
    };
    let deadline = tokio::time::sleep(step.timeout);
    tokio::pin!(deadline);
    // The session may be busy with another step of the plan (parallel
    // steps) or a user's run: wait for it rather than fail.
    let mut sub = loop {
        let text = step.prompt.clone();
        let answer = session
            .call(
                // `once`: a step retried after a crash finds its prompt
                // already stored, unanswered, and must not add it again.
                |reply| SessionMsg::Send {
                    text,
                    can_approve: false,
                    once: true,
                    reply,
                    job: step.job.clone(),
                },
                Some(Duration::from_secs(60)),
            )
            .await;
        match answer {
            Ok(CallResult::Success(Ok(sub))) => break sub,
            Ok(CallResult::Success(Err(r))) if r.code == flyto_protocol::ErrorCode::Conflict => {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
                    reason = &mut cancel => {
                        return Outcome {
                            exit: Exit::Cancelled(reason.unwrap_or(CancelReason::Shutdown)),
                            stdout_tail: String::new(),
                            stderr_tail: format!("session {id} was busy; the step never started"),
                            log_truncated: false,
                        };
                    }
                    _ = &mut deadline => {
                        return Outcome {
                            exit: Exit::TimedOut,
                            stdout_tail: String::new(),
                            stderr_tail: format!("session {id} stayed busy until the step's timeout"),
                            log_truncated: false,
                        };
                    }
                }
            }
            Ok(CallResult::Success(Err(r))) => return failed(r.message),
            _ => return failed("the session did not answer; see the daemon log".into()),
        }
    };
    let mut stop: Option<Exit> = None;
    let mut reply = crate::session::subagent::LastReply::default();
    let (mut tokens_in, mut tokens_out, mut cost) = (0u64, 0u64, 0f64);
    loop {
        let event = tokio::select! {
            reason = &mut cancel, if stop.is_none() => {
                stop = Some(Exit::Cancelled(reason.unwrap_or(CancelReason::Shutdown)));
                let _ = session.call(|reply| SessionMsg::Cancel { reply }, Some(Duration::from_secs(10))).await;
                continue;
            }
            _ = &mut deadline, if stop.is_none() => {
                stop = Some(Exit::TimedOut);
                let _ = session.call(|reply| SessionMsg::Cancel { reply }, Some(Duration::from_secs(10))).await;
                continue;
            }
            event = sub.next() => event,
        };
        let Some(event) = event else {
            return failed(format!("session {id} stopped before its run ended"));
        };
        // The step's output is the text of the last reply.
        reply.see(&event);
        let text = &reply.text;
        match event {
            SessionEvent::LlmEnd {
                input_tokens,
                output_tokens,
                cost_usd,
                ..
            } => {
                tokens_in += input_tokens;
                tokens_out += output_tokens;
                cost += cost_usd;
            }
            SessionEvent::Done { message, .. } => {
                let usage = format!(
                    "session {id}: {tokens_in} tokens in, {tokens_out} out, ${cost:.4}{}{message}",
                    if message.is_empty() { "" } else { "; " }
                );
                return Outcome {
                    exit: stop.unwrap_or(Exit::Code(0)),
                    stdout_tail: tail(text, tail_max),
                    stderr_tail: usage,
                    log_truncated: false,
                };
            }
            SessionEvent::Cancelled { .. } => {
                return Outcome {
                    exit: stop.unwrap_or(Exit::Cancelled(CancelReason::User)),
                    stdout_tail: tail(text, tail_max),
                    stderr_tail: format!("session {id}: run cancelled"),
                    log_truncated: false,
                };
            }
            SessionEvent::Error { message } => {
                return match stop {
                    Some(exit) => Outcome {
                        exit,
                        stdout_tail: tail(text, tail_max),
                        stderr_tail: message,
                        log_truncated: false,
                    },
                    None => failed(format!("session {id}: {message}")),
                };
            }
            _ => {}
        }
    }
}

fn tail(text: &str, max: usize) -> String {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_string()
}
