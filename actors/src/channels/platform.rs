//! What a chat platform must offer the channels room: one long poll that
//! returns updates with the cursor acknowledging them, one send of one
//! chunk, a typing hint, and how it cuts a reply into chunks. Each platform
//! module (Telegram, WeChat iLink, WeCom, the inbox folder) implements this
//! and nothing else; journaling, dedup, the outbox and sessions live in the
//! room, never in a platform.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A platform call's future; boxed so platforms can sit behind `dyn`.
pub type PlatformFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, PlatformError>> + Send + 'a>>;

pub trait Platform: Send + Sync {
    /// One poll from `cursor` (`None`: from wherever the platform keeps
    /// unacknowledged updates). Must return within
    /// [`Platform::poll_timeout`] + a few seconds: every network wait has a
    /// deadline. The returned cursor acknowledges these updates and is
    /// stored only after they are journaled; polling with it must not
    /// return them again.
    fn poll<'a>(&'a self, cursor: Option<&'a str>) -> PlatformFuture<'a, Polled>;

    /// Called once `updates` (from one poll) are journaled durably, for
    /// platforms whose acknowledgement is an act rather than the next
    /// poll's cursor (the inbox folder moves the files it delivered).
    fn ack<'a>(&'a self, updates: &'a [Inbound]) -> PlatformFuture<'a, ()> {
        let _ = updates;
        Box::pin(async { Ok(()) })
    }

    /// Sends one chunk to `chat`; answers the platform's message id.
    fn send<'a>(&'a self, chat: &'a str, chunk: &'a OutChunk) -> PlatformFuture<'a, String>;

    /// Shows "typing…" in `chat` (a no-op where there is no such thing).
    fn typing<'a>(&'a self, chat: &'a str) -> PlatformFuture<'a, ()>;

    /// Cuts a reply into the chunks `send` takes, in order; concatenated
    /// they give the reply (plus any fence closing and reopening).
    fn chunk(&self, text: &str) -> Vec<String>;

    /// How long one poll may wait for updates.
    fn poll_timeout(&self) -> Duration;

    /// Drops the HTTP client (its pooled connections) and builds a fresh
    /// one: a poll that stalled may have left a dead connection behind.
    fn reset(&self);

    /// Whether the platform delivers messages to us at all (WeCom push is
    /// outbound only: no poller runs for it).
    fn inbound(&self) -> bool {
        true
    }

    /// The pause between two chunks of one reply.
    fn chunk_gap(&self) -> Duration {
        Duration::ZERO
    }

    /// At most this many chunks per reply; past that the room shortens the
    /// reply and says where the full text was saved.
    fn max_chunks(&self) -> Option<usize> {
        None
    }
}

/// One poll's result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Polled {
    pub updates: Vec<Inbound>,
    /// Acknowledges `updates`; `None` leaves the stored cursor as it is.
    pub cursor: Option<String>,
}

/// One inbound message, as the platform gave it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inbound {
    /// The platform's id of this update (Telegram `update_id`); unique
    /// per binding. Duplicates are dropped by it.
    pub update_id: String,
    /// The conversation the reply goes to.
    pub chat: String,
    /// Who wrote it; access control is by this.
    pub user: String,
    /// A human name for pairing requests (username or first name).
    pub user_name: String,
    /// The platform's id of the message within `chat`; duplicates are
    /// also dropped by (chat, message id).
    pub message_id: String,
    pub text: String,
    /// WeChat: the token a reply to this user must carry.
    pub context_token: Option<String>,
    /// Telegram: the chat became a supergroup with this id; its session
    /// follows it.
    pub migrate_to: Option<String>,
}

/// One chunk of a reply, as the outbox keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct OutChunk {
    /// Stable across retries and restarts: `<session>/<turn>/<n>`. WeChat
    /// derives its `client_id` from it.
    pub id: String,
    pub text: String,
    /// Position in the reply, from 0, and whether it is the last.
    pub index: u32,
    pub last: bool,
    /// Send without markup (Telegram: no `parse_mode`).
    pub plain: bool,
    /// WeChat: the context token of the user's latest message.
    pub context_token: Option<String>,
    /// The message this replies to (its `message_id`), when it is a reply.
    pub reply_to: Option<String>,
}

/// Why a platform call failed, in the classes the room acts on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlatformError {
    /// The token is wrong or revoked (Telegram 401/404): the binding stops
    /// as `auth_failed`, with no retry loop.
    #[error("the platform refused the token: {0}")]
    Auth(String),
    /// The user blocked the bot (Telegram 403): that chat is closed.
    #[error("the chat is closed: {0}")]
    ChatClosed(String),
    /// Another poller holds the update stream (Telegram 409 without a
    /// webhook): back off and show it.
    #[error("another poller is using this bot: {0}")]
    Conflict(String),
    /// Wait exactly this long before the next call.
    #[error("rate limited: retry after {retry_after:?}")]
    RateLimited { retry_after: Duration },
    /// 5xx, connection refused or reset, a deadline passed: back off with
    /// jitter and try again.
    #[error("{0}")]
    Transient(String),
    /// Telegram 400 "can't parse entities": resend the chunk as plain text.
    #[error("the platform could not parse the message's markup: {0}")]
    Markup(String),
    /// WeChat errcode -14: the bot's session expired; pause the binding.
    #[error("the platform session expired: {0}")]
    SessionExpired(String),
    /// WeChat: no context token young enough to send to this user; the
    /// delivery waits for the user's next message.
    #[error("needs a message from the user first: {0}")]
    NeedsUserMessage(String),
    /// The platform refused this one request (another 4xx, a non-zero
    /// `ret`): the chunk failed and is not retried.
    #[error("the platform refused the request: {0}")]
    Rejected(String),
}

/// The seconds of an HTTP `Retry-After` header, when it gives some.
pub fn retry_after_header(response: &reqwest::Response) -> Option<u64> {
    response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}
