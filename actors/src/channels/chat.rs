//! One chat's turns, strictly in order: a task per (binding, chat) that
//! takes journaled messages one at a time, runs each as one turn of the
//! chat's persistent session (through the session manager's messages),
//! and writes the reply's chunks to the outbox together with the turn's
//! end. A turn a crash cut short is resumed on the message the session
//! already stored, or, when the session had answered it, its answer is
//! taken from the history: one turn per message either way.

use super::platform::Platform;
use super::store::{
    ChannelStore, ChatRecord, InboundRecord, OutRecord, OutState, TurnState, Write,
};
use crate::clock::Clock;
use crate::session::{ManagerMsg, SESSION_MANAGER, SessionMsg};
use flyto_protocol::{BlockView, MessageView, SessionEvent};
use ractor::ActorRef;
use ractor::rpc::CallResult;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, mpsc};

/// How often "typing…" is refreshed while a turn runs (Telegram shows it
/// for about 5 s).
const TYPING_EVERY: Duration = Duration::from_secs(4);

/// What a chat's worker needs; shared by all chats of a binding.
#[derive(Clone)]
pub struct ChatDeps {
    pub binding: String,
    pub store: ChannelStore,
    pub platform: Arc<dyn Platform>,
    pub clock: Arc<dyn Clock>,
    /// Wakes the binding's outbox sender.
    pub flush: Arc<Notify>,
    pub workdir: String,
    pub session_gap: Duration,
    /// Serialises writes of the binding's outbox sequence.
    pub out_seq: Arc<tokio::sync::Mutex<u64>>,
}

/// Failed attempts at one message before it is answered with the error.
const ATTEMPTS: u32 = 3;

/// The worker of one chat: each wake-up, it takes the chat's unfinished
/// messages from the journal, oldest first, until none is left. The
/// journal, not the channel, says what is to do, so nothing journaled is
/// missed however the wake-ups came.
pub async fn run(deps: ChatDeps, chat: String, mut rx: mpsc::Receiver<()>) {
    let mut failures: (u64, u32) = (0, 0);
    loop {
        let next = deps.store.inbound(&deps.binding).map(|j| {
            j.into_iter().find(|r| {
                r.chat == chat && matches!(r.state, TurnState::Queued | TurnState::Started { .. })
            })
        });
        let msg = match next {
            Ok(Some(m)) => m,
            Ok(None) => {
                if rx.recv().await.is_none() {
                    return;
                }
                continue;
            }
            Err(e) => {
                tracing::warn!(binding = %deps.binding, error = %e, "cannot read the channel journal");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
        };
        let Err(e) = turn(&deps, &chat, msg.seq).await else {
            continue;
        };
        failures = if failures.0 == msg.seq {
            (msg.seq, failures.1 + 1)
        } else {
            (msg.seq, 1)
        };
        tracing::warn!(binding = %deps.binding, chat = %chat, seq = msg.seq, error = %e, "a chat turn failed");
        if failures.1 >= ATTEMPTS {
            // Said, not dropped: the user learns the message was not taken.
            let mut rec = deps
                .store
                .chat(&deps.binding, &chat)
                .ok()
                .flatten()
                .unwrap_or_default();
            let mut msg = msg;
            msg.state = TurnState::Answered;
            let text = format!("(The agent could not take this message: {e})");
            if let Err(e) = finish(&deps, &chat, &msg, &mut rec, &text).await {
                tracing::warn!(binding = %deps.binding, error = %e, "cannot record a failed turn");
            }
        } else {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

fn manager() -> Result<ActorRef<ManagerMsg>, String> {
    SESSION_MANAGER
        .find()
        .ok_or_else(|| "the session manager is not running; see the daemon log".to_string())
}

use crate::session::ask;

fn session_name(binding: &str, chat: &str, generation: u64) -> String {
    if generation == 0 {
        format!("chat {binding} {chat}")
    } else {
        format!("chat {binding} {chat} #{generation}")
    }
}

async fn session_actor(id: &str) -> Result<ActorRef<SessionMsg>, String> {
    let m = manager()?;
    ask(&m, |reply| ManagerMsg::Get {
        id: id.to_string(),
        reply,
    })
    .await
}

/// The chat's session id, created on its first message.
async fn ensure_session(
    deps: &ChatDeps,
    chat: &str,
    rec: &mut ChatRecord,
) -> Result<String, String> {
    if let Some(id) = &rec.session {
        return Ok(id.clone());
    }
    let m = manager()?;
    let name = session_name(&deps.binding, chat, rec.generation);
    let id = ask(&m, |reply| ManagerMsg::ByName {
        name,
        workdir: deps.workdir.clone(),
        chain: None,
        sandbox: None,
        reply,
    })
    .await?;
    rec.session = Some(id.clone());
    Ok(id)
}

async fn turn(deps: &ChatDeps, chat: &str, seq: u64) -> Result<(), String> {
    let store = &deps.store;
    let Some(mut msg) = store
        .inbound(&deps.binding)
        .map_err(|e| e.to_string())?
        .into_iter()
        .find(|r| r.seq == seq)
    else {
        return Ok(());
    };
    if matches!(msg.state, TurnState::Answered | TurnState::Command) {
        return Ok(());
    }
    let mut rec = store
        .chat(&deps.binding, chat)
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    let command = msg.text.trim().to_lowercase();
    if matches!(msg.state, TurnState::Queued) && (command == "/new" || command == "/status") {
        let reply = if command == "/new" {
            rec.generation += 1;
            rec.session = None;
            "Started a new conversation: the agent no longer sees the earlier messages of this chat."
                .to_string()
        } else {
            status_text(rec.session.as_deref()).await
        };
        msg.state = TurnState::Command;
        return finish(deps, chat, &msg, &mut rec, &reply).await;
    }
    let id = ensure_session(deps, chat, &mut rec).await?;
    let session = session_actor(&id).await?;
    let (base, resume) = match &msg.state {
        TurnState::Started { session: s, base } if *s == id => (*base, true),
        _ => {
            let now = deps.clock.now_ms();
            let gap = deps.session_gap.as_millis() as u64;
            if rec.last_user_ms > 0 && now.saturating_sub(rec.last_user_ms) > gap {
                // After a long silence the model starts from this message;
                // the history keeps everything.
                ask(&session, |reply| SessionMsg::Reset { soft: false, reply }).await?;
            }
            let view = match session
                .call(
                    |reply| SessionMsg::View { reply },
                    Some(Duration::from_secs(60)),
                )
                .await
            {
                Ok(CallResult::Success(v)) => v,
                _ => return Err(format!("session {id} did not answer")),
            };
            msg.state = TurnState::Started {
                session: id.clone(),
                base: view.messages,
            };
            rec.last_user_ms = deps.clock.now_ms();
            let mut w = Write::default();
            w.inbound(&msg)
                .chat(&deps.binding, chat, &current(deps, chat, &rec));
            store.apply(&w).map_err(|e| e.to_string())?;
            store.synced().await?;
            crate::failpoint::reached("channel-turn-started");
            (view.messages, false)
        }
    };
    let reply = match answered(&id, base).await? {
        Some(text) => text,
        None => {
            let ended = run_once(deps, chat, &session, &id, &msg.text, resume).await?;
            match (answered(&id, base).await?, ended) {
                (Some(text), _) => text,
                // Said to the user: a turn that failed is not silence.
                (None, Some(why)) => format!("(The agent could not answer: {why})"),
                (None, None) => "(The agent ended its turn without a reply.)".to_string(),
            }
        }
    };
    crate::failpoint::reached("channel-turn-answered");
    msg.state = TurnState::Answered;
    finish(deps, chat, &msg, &mut rec, &reply).await
}

/// Sends the message and follows the run to its end, showing "typing…".
async fn run_once(
    deps: &ChatDeps,
    chat: &str,
    session: &ActorRef<SessionMsg>,
    id: &str,
    text: &str,
    once: bool,
) -> Result<Option<String>, String> {
    let mut sub = loop {
        let answer = session
            .call(
                |reply| SessionMsg::Send {
                    text: text.to_string(),
                    can_approve: false,
                    once,
                    reply,
                    job: None,
                },
                Some(Duration::from_secs(60)),
            )
            .await;
        match answer {
            Ok(CallResult::Success(Ok(sub))) => break sub,
            // Busy with a run someone started from the CLI: wait for it.
            Ok(CallResult::Success(Err(r))) if r.code == flyto_protocol::ErrorCode::Conflict => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(CallResult::Success(Err(r))) => return Err(r.message),
            _ => return Err(format!("session {id} did not answer")),
        }
    };
    let mut typing = tokio::time::interval(TYPING_EVERY);
    loop {
        tokio::select! {
            _ = typing.tick() => {
                // A hint only: a failure here must not stop the turn.
                let _ = tokio::time::timeout(Duration::from_secs(10), deps.platform.typing(chat)).await;
            }
            event = sub.rx.recv() => match event {
                Ok((_, SessionEvent::Done { .. })) => return Ok(None),
                Ok((_, SessionEvent::Cancelled { .. })) => return Ok(Some("the run was cancelled".into())),
                Ok((_, SessionEvent::Error { message })) => return Ok(Some(message)),
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    return Err(format!("session {id} stopped before its run ended"));
                }
            }
        }
    }
}

/// The session's answer to this turn (see [`answer_in`]); `None` while it
/// has none (not sent yet, or cut short).
/// Reads only the messages from `base` on: a chat's session grows for
/// months, a turn must not load all of it.
async fn answered(id: &str, base: u64) -> Result<Option<String>, String> {
    let session = session_actor(id).await?;
    let view = match session
        .call(
            |reply| SessionMsg::View { reply },
            Some(Duration::from_secs(60)),
        )
        .await
    {
        Ok(CallResult::Success(v)) => v,
        _ => return Err(format!("session {id} did not answer")),
    };
    let recent = view.messages.saturating_sub(base);
    if recent == 0 {
        return Ok(None);
    }
    let (_, messages, _) = ask(&session, |reply| SessionMsg::Attach {
        recent,
        can_approve: false,
        reply,
    })
    .await?;
    Ok(answer_in(&messages, base))
}

/// The first assistant message without tool calls stored at or after
/// `base` (the session's length when this turn began): the chat's worker
/// is the one sender of its session's turns, so that is this turn's
/// answer, wherever the session put the prompt (an unanswered prompt
/// before it absorbs the next one).
fn answer_in(messages: &[MessageView], base: u64) -> Option<String> {
    for m in messages.iter().filter(|m| m.idx >= base) {
        if m.role == "user" {
            continue;
        }
        if m.blocks
            .iter()
            .any(|b| matches!(b, BlockView::ToolUse { .. }))
        {
            continue;
        }
        let answer: String = m
            .blocks
            .iter()
            .filter_map(|b| match b {
                BlockView::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("");
        return Some(answer);
    }
    None
}

async fn status_text(session: Option<&str>) -> String {
    let Some(id) = session else {
        return "No conversation yet: send a message to start one.".into();
    };
    let view = match session_actor(id).await {
        Ok(s) => match s
            .call(
                |reply| SessionMsg::View { reply },
                Some(Duration::from_secs(10)),
            )
            .await
        {
            Ok(CallResult::Success(v)) => v,
            _ => return format!("Session {id} did not answer."),
        },
        Err(e) => return e,
    };
    format!(
        "Session {}: {}, {} messages ({} in the model's window), {} tokens in, {} out, ${:.4}.",
        view.id,
        view.status,
        view.messages,
        view.messages.saturating_sub(view.context_base_idx),
        view.input_tokens,
        view.output_tokens,
        view.cost_usd
    )
}

/// The chat's record to write: what the worker owns (its session, its
/// generation, when its user last wrote) from `rec`, the rest read again,
/// since the poller (context token, reopening) and the outbox sender
/// (closing) change it while a turn runs.
fn current(deps: &ChatDeps, chat: &str, rec: &ChatRecord) -> ChatRecord {
    let mut fresh = deps
        .store
        .chat(&deps.binding, chat)
        .ok()
        .flatten()
        .unwrap_or_default();
    fresh.session = rec.session.clone();
    fresh.generation = rec.generation;
    fresh.last_user_ms = rec.last_user_ms;
    fresh
}

/// The turn's end and its reply chunks, in one durable write; then the
/// outbox sender is woken.
async fn finish(
    deps: &ChatDeps,
    chat: &str,
    msg: &InboundRecord,
    rec: &mut ChatRecord,
    reply: &str,
) -> Result<(), String> {
    let chunks = reply_chunks(deps, reply);
    let source = rec.session.clone().unwrap_or_else(|| "command".into());
    let now = deps.clock.now_ms();
    let mut seq = deps.out_seq.lock().await;
    let mut w = Write::default();
    w.inbound(msg)
        .chat(&deps.binding, chat, &current(deps, chat, rec));
    let n = chunks.len();
    for (i, text) in chunks.into_iter().enumerate() {
        let seq = deps
            .store
            .next_out_seq(&mut seq)
            .map_err(|e| e.to_string())?;
        w.out(&OutRecord {
            binding: deps.binding.clone(),
            seq,
            id: format!("{source}/{}/{i}", msg.seq),
            chat: chat.to_string(),
            text,
            index: i as u32,
            last: i + 1 == n,
            plain: false,
            created_ms: now,
            reply_to: Some(msg.message_id.clone()),
            state: OutState::Pending,
        });
    }
    deps.store.apply(&w).map_err(|e| e.to_string())?;
    drop(seq);
    deps.store.synced().await?;
    deps.flush.notify_one();
    Ok(())
}

/// The platform's chunks of `reply`; past its chunk limit the reply is
/// shortened, and the full text saved in the workdir, which the last
/// chunk names.
pub fn reply_chunks(deps: &ChatDeps, reply: &str) -> Vec<String> {
    let text = if reply.trim().is_empty() {
        "(empty reply)"
    } else {
        reply
    };
    let chunks = deps.platform.chunk(text);
    let Some(max) = deps.platform.max_chunks() else {
        return chunks;
    };
    if chunks.len() <= max || max == 0 {
        return chunks;
    }
    let name = format!("reply-{}-{}.md", deps.binding, deps.clock.now_ms());
    let path = std::path::Path::new(&deps.workdir).join(&name);
    // Synced before the chat is told where it is.
    let note = match crate::durable::write_synced(&path, text.as_bytes(), 0o600) {
        Ok(()) => format!(
            "\n\n(The reply was too long for this chat; the full text is in {}.)",
            path.display()
        ),
        Err(e) => format!(
            "\n\n(The reply was too long for this chat, and saving it to {} failed: {e}.)",
            path.display()
        ),
    };
    let mut kept: Vec<String> = chunks.into_iter().take(max).collect();
    // The note must fit: it replaces the end of the last chunk kept.
    if let Some(last) = kept.last_mut() {
        let room = deps.platform.chunk(&format!("{last}{note}"));
        if room.len() == 1 {
            last.push_str(&note);
        } else {
            let keep = last
                .chars()
                .count()
                .saturating_sub(note.chars().count() + 1);
            *last = last.chars().take(keep).collect::<String>() + "…" + &note;
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(idx: u64, role: &str, blocks: Vec<BlockView>) -> MessageView {
        MessageView {
            idx,
            role: role.into(),
            blocks,
            created_ms: 0,
        }
    }
    fn t(s: &str) -> BlockView {
        BlockView::Text { text: s.into() }
    }

    #[test]
    fn the_answer_is_the_first_reply_without_tools_after_the_prompt_at_or_after_base() {
        let tool = BlockView::ToolUse {
            id: "c1".into(),
            name: "bash".into(),
            arguments: "{}".into(),
        };
        let result = BlockView::ToolResult {
            call_id: "c1".into(),
            content: "ok".into(),
            is_error: false,
        };
        let ms = vec![
            m(0, "user", vec![t("hi")]),
            m(1, "assistant", vec![t("old answer")]),
            m(2, "user", vec![t("hi")]),
            m(3, "assistant", vec![t("let me look"), tool]),
            m(4, "user", vec![result]),
            m(5, "assistant", vec![t("new answer")]),
        ];
        // The same words sent twice: the base tells them apart.
        assert_eq!(answer_in(&ms, 0).as_deref(), Some("old answer"));
        assert_eq!(answer_in(&ms, 2).as_deref(), Some("new answer"));
        // Cut short after a tool call: not answered.
        assert_eq!(answer_in(&ms[..5], 2), None);
        // Not stored yet.
        assert_eq!(answer_in(&ms, 6), None);
        // A prompt the session folded into an earlier unanswered one: the
        // answer after the base is still this turn's.
        let folded = vec![
            m(0, "user", vec![t("failed turn\nnext message")]),
            m(1, "assistant", vec![t("answer to both")]),
        ];
        assert_eq!(answer_in(&folded, 1).as_deref(), Some("answer to both"));
    }
}
