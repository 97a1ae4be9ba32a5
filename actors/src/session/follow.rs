//! Following another node's run (a shared store): what that run stores
//! becomes events for the clients attached here — each message as it is
//! stored (answer text, tool calls, tool results), and the run's end once
//! the record leaves `running`. Message by message, not token by token:
//! the tokens stream only on the node that runs the session. It may not
//! write.

use super::SessionDeps;
use super::model::SessionStatus;
use super::run::Emitter;
use crate::llm::{Block, Role};
use flyto_protocol::SessionEvent;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How often the store is read while someone follows.
const POLL: Duration = Duration::from_millis(300);
/// A tool result's preview, as the running node's events give it.
const PREVIEW: usize = 400;

/// Follows session `id` from message `from` until its run ends or no one
/// listens any more.
pub fn spawn(
    deps: Arc<SessionDeps>,
    id: u64,
    from: u64,
    emit: Emitter,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut next = from;
        let mut names: HashMap<String, String> = HashMap::new();
        loop {
            tokio::time::sleep(POLL).await;
            if emit.tx.receiver_count() == 0 {
                return;
            }
            let Ok(Some(rec)) = deps.store.get(id) else {
                continue;
            };
            let Ok(messages) = deps.store.messages(id, next) else {
                continue;
            };
            for (idx, m) in messages {
                next = idx + 1;
                for block in m.content {
                    let event = match (m.role, block) {
                        (Role::Assistant, Block::Text { text }) => {
                            SessionEvent::Text { delta: text }
                        }
                        (Role::Assistant, Block::Thinking { text, .. }) => {
                            SessionEvent::Reasoning { delta: text }
                        }
                        (
                            Role::Assistant,
                            Block::ToolUse {
                                id,
                                name,
                                arguments_json,
                            },
                        ) => {
                            names.insert(id.clone(), name.clone());
                            SessionEvent::ToolCall {
                                id,
                                name,
                                arguments: arguments_json,
                            }
                        }
                        (
                            _,
                            Block::ToolResult {
                                call_id,
                                content,
                                is_error,
                            },
                        ) => SessionEvent::ToolResult {
                            name: names.get(&call_id).cloned().unwrap_or_default(),
                            id: call_id,
                            preview: content.chars().take(PREVIEW).collect(),
                            is_error,
                        },
                        _ => continue,
                    };
                    emit.emit(event);
                }
            }
            if rec.status != SessionStatus::Running {
                emit.emit(match (rec.status, rec.error) {
                    (SessionStatus::Error, Some(message)) => SessionEvent::Error { message },
                    _ => SessionEvent::Done {
                        stop: "end".into(),
                        message: "the run on another node ended".into(),
                    },
                });
                return;
            }
        }
    })
}
