//! The agent's `channel_send` tool: pushes text to the chats of a binding
//! (every admitted chat, or one named) through the outbox, like a job's
//! result. It lives in this room because it talks to the ChannelManager
//! (tools in `tools/` never touch actors).

use super::manager::{CHANNELS, ChannelsMsg};
use crate::tools::builtin::parse_args;
use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use ractor::rpc::CallResult;
use serde::Deserialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub fn all() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(ChannelSend {
        sent: AtomicU64::new(0),
    })]
}

struct ChannelSend {
    /// Names each push's outbox entries apart.
    sent: AtomicU64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    binding: String,
    text: String,
    chat: Option<String>,
}

impl Tool for ChannelSend {
    fn name(&self) -> &'static str {
        "channel_send"
    }
    fn description(&self) -> &'static str {
        "Sends a message to the user through one of their chat bindings (`flytoctl channel_list` \
         names them: e.g. telegram, wechat, inbox): to every chat of the binding whose user was \
         admitted, or to `chat` only. Use it to report a result the user asked to be told about; \
         the reply to a chat message needs no tool."
    }
    fn input_schema(&self) -> &'static str {
        r#"{"type": "object", "properties": {
            "binding": {"type": "string", "description": "The binding's name"},
            "text": {"type": "string", "description": "What to send"},
            "chat": {"type": "string", "description": "One chat id of the binding (optional)"}
        }, "required": ["binding", "text"], "additionalProperties": false}"#
    }
    fn concurrency_safe(&self, _: &str) -> bool {
        false
    }
    fn call<'a>(&'a self, _ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args(
                "channel_send",
                args_json,
                r#"{"binding": "telegram", "text": "…"}"#,
            ) {
                Ok(a) => a,
                Err(out) => return out,
            };
            if args.text.trim().is_empty() {
                return ToolOutput::error("channel_send: `text` is empty: say what to send");
            }
            let Some(channels) = CHANNELS.find() else {
                return ToolOutput::error("the channels room is not running; see the daemon log");
            };
            let target = match &args.chat {
                Some(c) => format!("{}:{c}", args.binding),
                None => args.binding.clone(),
            };
            let n = self.sent.fetch_add(1, Ordering::Relaxed);
            let key = format!("push/{}/{n}", chrono::Utc::now().timestamp_millis());
            let answer = channels
                .call(
                    |reply| ChannelsMsg::Notify {
                        target: target.clone(),
                        key,
                        text: args.text.clone(),
                        reply: Some(reply),
                    },
                    Some(Duration::from_secs(30)),
                )
                .await;
            match answer {
                Ok(CallResult::Success(Ok(chats))) => {
                    ToolOutput::ok(format!("queued for {chats} chat(s) of `{target}`"))
                }
                Ok(CallResult::Success(Err(r))) => ToolOutput::error(r.message),
                _ => ToolOutput::error("the channels room did not answer; try again"),
            }
        })
    }
}
