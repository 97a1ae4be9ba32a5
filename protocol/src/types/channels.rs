//! Chat channel bindings and pairing, as `channel_*` requests carry them.

use super::*;

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
