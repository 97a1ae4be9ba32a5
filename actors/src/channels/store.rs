//! The channels room's records in the tree `channels`: bindings (with
//! their secrets), each binding's cursor, the inbound journal with its
//! dedup keys, per-chat state, the outbox, pairing requests and admitted
//! users. Keys start with one letter naming the record kind, then the
//! binding name and a zero byte, so one binding's records are one prefix.
//!
//! Writes that must go together (journal entries and the cursor that
//! acknowledges them; a turn's end and its reply chunks) are one batch.
//!
//! The records live behind [`ChannelBackend`]: this node's sled tree, or
//! the shared store (`shared.rs`), where a binding's poller, sender and
//! chat workers write through a store fenced by the binding's lease.

use crate::store::{Batch, Store, StoreError, decode_record, encode_record};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

const FORMAT: u32 = 1;

/// What a binding talks to, with what it needs to (secrets included: they
/// live only here, in the state directory, and in config).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub enum BindingKind {
    Telegram {
        token: String,
        api_base: Option<String>,
    },
    Wechat {
        bot_token: String,
        base_url: Option<String>,
    },
    Wecom {
        corp_id: String,
        agent_id: String,
        secret: String,
        userid: String,
    },
    Inbox {
        dir: String,
    },
}

impl BindingKind {
    pub fn name(&self) -> &'static str {
        match self {
            BindingKind::Telegram { .. } => "telegram",
            BindingKind::Wechat { .. } => "wechat",
            BindingKind::Wecom { .. } => "wecom",
            BindingKind::Inbox { .. } => "inbox",
        }
    }
}

impl std::fmt::Debug for BindingKind {
    // Secrets never reach a log line, even through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BindingKind::Inbox { dir } => write!(f, "Inbox({dir})"),
            other => write!(f, "{}([redacted])", other.name()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BindingRecord {
    pub name: String,
    pub kind: BindingKind,
    pub created_ms: u64,
    /// Set when the platform refused the token: no polling until rebound.
    pub auth_failed: Option<String>,
    /// Paused (WeChat session expired) until then.
    pub paused_until_ms: Option<u64>,
}

/// The cursor that acknowledges what was journaled, and when it was last
/// used (Telegram forgets offsets after a week of silence).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CursorRecord {
    pub cursor: String,
    pub used_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum TurnState {
    /// Journaled, waiting for its chat's earlier messages.
    Queued,
    /// Sent to the session, which then had `base` messages.
    Started { session: String, base: u64 },
    /// Its reply is in the outbox.
    Answered,
    /// Handled without a model (a command such as `/status`).
    Command,
}

/// One inbound message, journaled before the platform's cursor moves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboundRecord {
    pub binding: String,
    pub seq: u64,
    pub update_id: String,
    pub chat: String,
    pub user: String,
    pub message_id: String,
    pub text: String,
    pub received_ms: u64,
    pub state: TurnState,
}

/// What the room knows of one chat.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatRecord {
    pub session: Option<String>,
    /// When its user last wrote (for the soft reset after a gap).
    pub last_user_ms: u64,
    /// The user blocked the bot.
    pub closed: bool,
    /// WeChat: the token of the user's latest message, and when it came.
    pub context_token: Option<(String, u64)>,
    /// Bumped by `/new`: the chat's next session is a fresh one.
    pub generation: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum OutState {
    Pending,
    /// Handed to the platform; not known to have arrived. A restart finds
    /// it so and gives it up (visibly) rather than risk sending it twice.
    Sending,
    Sent {
        platform_id: String,
        at_ms: u64,
    },
    /// Given up, with why (stale, refused, the chat closed).
    Dropped {
        why: String,
    },
    /// WeChat: no fresh context token; sent when the user writes again.
    NeedsUserMessage,
}

/// One reply chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutRecord {
    pub binding: String,
    pub seq: u64,
    /// `<session or source>/<turn>/<n>`: stable across restarts.
    pub id: String,
    pub chat: String,
    pub text: String,
    pub index: u32,
    pub last: bool,
    pub plain: bool,
    pub created_ms: u64,
    /// The message this answers (the inbox names its reply after it).
    pub reply_to: Option<String>,
    pub state: OutState,
}

/// A stranger's request to be admitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairingRecord {
    pub code: String,
    pub binding: String,
    pub user: String,
    pub user_name: String,
    pub chat: String,
    pub created_ms: u64,
}

fn key(kind: u8, binding: &str, rest: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + binding.len() + rest.len());
    k.push(kind);
    k.extend_from_slice(binding.as_bytes());
    k.push(0);
    k.extend_from_slice(rest);
    k
}

fn seq_key(kind: u8, binding: &str, seq: u64) -> Vec<u8> {
    key(kind, binding, &seq.to_be_bytes())
}

fn chat_message_key(binding: &str, chat: &str, message_id: &str) -> Vec<u8> {
    let mut rest = chat.as_bytes().to_vec();
    rest.push(0);
    rest.extend_from_slice(message_id.as_bytes());
    key(b'm', binding, &rest)
}

/// One write of several records, applied atomically.
#[derive(Default)]
pub struct Write {
    batch: Batch,
}

impl Write {
    pub fn inbound(&mut self, r: &InboundRecord) -> &mut Self {
        self.batch
            .insert(seq_key(b'i', &r.binding, r.seq), encode_record(FORMAT, r));
        self.batch
            .insert(key(b'u', &r.binding, r.update_id.as_bytes()), &b""[..]);
        self.batch.insert(
            chat_message_key(&r.binding, &r.chat, &r.message_id),
            &b""[..],
        );
        self
    }
    /// An update seen and deliberately not journaled (a stranger's, one
    /// without text): only its id, so it is not looked at again.
    pub fn seen(&mut self, binding: &str, update_id: &str) -> &mut Self {
        self.batch
            .insert(key(b'u', binding, update_id.as_bytes()), &b""[..]);
        self
    }
    pub fn cursor(&mut self, binding: &str, c: &CursorRecord) -> &mut Self {
        self.batch
            .insert(key(b'c', binding, b""), encode_record(FORMAT, c));
        self
    }
    pub fn chat(&mut self, binding: &str, chat: &str, c: &ChatRecord) -> &mut Self {
        self.batch.insert(
            key(b'k', binding, chat.as_bytes()),
            encode_record(FORMAT, c),
        );
        self
    }
    pub fn out(&mut self, o: &OutRecord) -> &mut Self {
        self.batch
            .insert(seq_key(b'o', &o.binding, o.seq), encode_record(FORMAT, o));
        self.batch.insert(
            key(b'x', &o.binding, o.id.as_bytes()),
            o.seq.to_be_bytes().to_vec(),
        );
        self
    }
    pub fn pairing(&mut self, p: &PairingRecord) -> &mut Self {
        self.batch
            .insert(key(b'p', "", p.code.as_bytes()), encode_record(FORMAT, p));
        self.batch.insert(
            key(b'q', &p.binding, p.user.as_bytes()),
            p.code.as_bytes().to_vec(),
        );
        self
    }
    pub fn unpair(&mut self, p: &PairingRecord) -> &mut Self {
        self.batch.remove(key(b'p', "", p.code.as_bytes()));
        self.batch.remove(key(b'q', &p.binding, p.user.as_bytes()));
        self
    }
    pub fn allow(&mut self, binding: &str, user: &str) -> &mut Self {
        self.batch
            .insert(key(b'a', binding, user.as_bytes()), &b""[..]);
        self
    }
    pub fn binding(&mut self, b: &BindingRecord) -> &mut Self {
        self.batch
            .insert(key(b'b', &b.name, b""), encode_record(FORMAT, b));
        self
    }
}

/// The prefix of every binding's record.
pub const BINDINGS: &[u8] = b"b";

/// The kinds of record kept under a binding's name (pairing requests, `p`,
/// are kept under their code and name their binding inside).
const BINDING_KINDS: [u8; 10] = [b'b', b'c', b'u', b'm', b'i', b'k', b'o', b'x', b'a', b'q'];

fn unknown_format<T>(ver: u32, _: &[u8]) -> Result<T, String> {
    Err(format!("channel record format {ver} is not known"))
}

/// A binding of a one-machine store with every record of it.
pub struct ExportedBinding {
    pub name: String,
    /// The key of its binding record (whether a store has it already).
    pub key: Vec<u8>,
    pub records: Entries,
    /// Its outbox's last sequence number.
    pub last_out_seq: u64,
}

impl ExportedBinding {
    /// Renames the sessions its chats and started turns name (`rename`:
    /// old id → new id). A session without a new id is forgotten by its
    /// chat, which then finds its session by name or starts one.
    pub fn rename_sessions(
        &mut self,
        rename: impl Fn(&str) -> Option<String>,
    ) -> Result<(), StoreError> {
        for (k, v) in &mut self.records {
            match k.first() {
                Some(b'k') => {
                    let mut chat: ChatRecord =
                        decode_record(String::from_utf8_lossy(k), v, FORMAT, unknown_format)?;
                    chat.session = chat.session.as_deref().and_then(&rename);
                    *v = encode_record(FORMAT, &chat);
                }
                Some(b'i') => {
                    let mut msg: InboundRecord =
                        decode_record(String::from_utf8_lossy(k), v, FORMAT, unknown_format)?;
                    if let TurnState::Started { session, .. } = &mut msg.state {
                        match rename(session) {
                            Some(new) => *session = new,
                            // Started in a session that is not there: its
                            // chat's session runs it from the start.
                            None => msg.state = TurnState::Queued,
                        }
                    }
                    *v = encode_record(FORMAT, &msg);
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Decodes scanned records.
pub fn decode_all<T: serde::de::DeserializeOwned>(entries: Entries) -> Result<Vec<T>, StoreError> {
    let mut out = Vec::new();
    for (k, v) in entries {
        out.push(decode_record(
            String::from_utf8_lossy(&k),
            &v,
            FORMAT,
            |ver, _| Err(format!("channel record format {ver} is not known")),
        )?);
    }
    Ok(out)
}

/// A binding's lease on the shared store: writes that present it change
/// nothing once another node holds the binding.
#[derive(Debug, Clone, PartialEq)]
pub struct Fence {
    pub binding: String,
    pub token: i64,
}

pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Where the room's records are kept.
pub trait ChannelBackend: Send + Sync {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    /// The entries under `prefix` in key order (last first when
    /// `reverse`), at most `limit` of them.
    fn scan(
        &self,
        prefix: &[u8],
        reverse: bool,
        limit: Option<usize>,
    ) -> Result<Entries, StoreError>;
    /// Applies `batch` atomically; under `fence`, only while that lease
    /// holds (else a `Conflict` and nothing written).
    fn apply(&self, batch: &Batch, fence: Option<&Fence>) -> Result<(), StoreError>;
    /// Waits until everything written so far is durable.
    fn synced(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;
    /// The next outbox sequence number of a binding whose last one on
    /// this node is `local`: unique across every writer of the outbox.
    fn next_out_seq(&self, local: &mut u64) -> Result<u64, StoreError>;
}

/// One node's own store: the tree `channels`. Leases are never needed
/// (one node), so fences are ignored.
struct SledBackend {
    store: Store,
    tree: sled::Tree,
}

impl ChannelBackend for SledBackend {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.store.get(&self.tree, key)?.map(|v| v.to_vec()))
    }

    fn scan(
        &self,
        prefix: &[u8],
        reverse: bool,
        limit: Option<usize>,
    ) -> Result<Entries, StoreError> {
        let mut out = Vec::new();
        for entry in self.store.scan_prefix(&self.tree, prefix, reverse) {
            if limit.is_some_and(|n| out.len() >= n) {
                break;
            }
            let (k, v) = entry?;
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    fn apply(&self, batch: &Batch, _fence: Option<&Fence>) -> Result<(), StoreError> {
        self.store.apply(&self.tree, batch)
    }

    fn synced(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(self.store.synced())
    }

    fn next_out_seq(&self, local: &mut u64) -> Result<u64, StoreError> {
        *local += 1;
        Ok(*local)
    }
}

#[derive(Clone)]
pub struct ChannelStore {
    backend: Arc<dyn ChannelBackend>,
    fence: Option<Arc<Fence>>,
}

impl ChannelStore {
    pub fn open(store: Store) -> Result<ChannelStore, StoreError> {
        let tree = store.tree("channels")?;
        Ok(ChannelStore::on(Arc::new(SledBackend { store, tree })))
    }

    pub fn on(backend: Arc<dyn ChannelBackend>) -> ChannelStore {
        ChannelStore {
            backend,
            fence: None,
        }
    }

    /// The same records, written under `binding`'s lease `token`.
    pub fn fenced(&self, binding: &str, token: i64) -> ChannelStore {
        ChannelStore {
            backend: self.backend.clone(),
            fence: Some(Arc::new(Fence {
                binding: binding.to_string(),
                token,
            })),
        }
    }

    pub fn apply(&self, w: &Write) -> Result<(), StoreError> {
        self.backend.apply(&w.batch, self.fence.as_deref())
    }

    /// Waits until everything written so far is durable.
    pub async fn synced(&self) -> Result<(), String> {
        self.backend.synced().await
    }

    /// The next outbox sequence number (see [`ChannelBackend::next_out_seq`]).
    pub fn next_out_seq(&self, local: &mut u64) -> Result<u64, StoreError> {
        self.backend.next_out_seq(local)
    }

    fn get<T: serde::de::DeserializeOwned>(&self, k: &[u8]) -> Result<Option<T>, StoreError> {
        match self.backend.get(k)? {
            Some(v) => decode_record(String::from_utf8_lossy(k), &v, FORMAT, |ver, _| {
                Err(format!("channel record format {ver} is not known"))
            })
            .map(Some),
            None => Ok(None),
        }
    }

    fn has(&self, k: &[u8]) -> Result<bool, StoreError> {
        Ok(self.backend.get(k)?.is_some())
    }

    fn scan<T: serde::de::DeserializeOwned>(&self, prefix: &[u8]) -> Result<Vec<T>, StoreError> {
        decode_all(self.backend.scan(prefix, false, None)?)
    }

    pub fn bindings(&self) -> Result<Vec<BindingRecord>, StoreError> {
        self.scan(BINDINGS)
    }

    pub fn binding(&self, name: &str) -> Result<Option<BindingRecord>, StoreError> {
        self.get(&key(b'b', name, b""))
    }

    /// The binding and every record under it.
    pub fn remove_binding(&self, name: &str) -> Result<(), StoreError> {
        let mut b = Batch::new();
        for (k, _) in self.binding_records(name)? {
            b.remove(k);
        }
        self.backend.apply(&b, None)
    }

    /// Every record of binding `name`: its own, its chats', journal's,
    /// outbox's, admitted users' and pending pairing requests.
    fn binding_records(&self, name: &str) -> Result<Entries, StoreError> {
        let mut out = Vec::new();
        for kind in BINDING_KINDS {
            out.extend(self.backend.scan(&key(kind, name, b""), false, None)?);
        }
        for (k, v) in self.backend.scan(&key(b'p', "", b""), false, None)? {
            let p: PairingRecord =
                decode_record(String::from_utf8_lossy(&k), &v, FORMAT, unknown_format)?;
            if p.binding == name {
                out.push((k, v));
            }
        }
        Ok(out)
    }

    /// Every binding with all its records, as `flytod migrate --from-sled`
    /// copies them.
    pub fn export(&self) -> Result<Vec<ExportedBinding>, StoreError> {
        let mut out = Vec::new();
        for b in self.bindings()? {
            out.push(ExportedBinding {
                key: key(b'b', &b.name, b""),
                records: self.binding_records(&b.name)?,
                last_out_seq: self.last_seq(b'o', &b.name)?,
                name: b.name,
            });
        }
        Ok(out)
    }

    pub fn cursor(&self, binding: &str) -> Result<Option<CursorRecord>, StoreError> {
        self.get(&key(b'c', binding, b""))
    }

    pub fn seen_update(&self, binding: &str, update_id: &str) -> Result<bool, StoreError> {
        self.has(&key(b'u', binding, update_id.as_bytes()))
    }

    pub fn seen_message(
        &self,
        binding: &str,
        chat: &str,
        message_id: &str,
    ) -> Result<bool, StoreError> {
        self.has(&chat_message_key(binding, chat, message_id))
    }

    /// The binding's journal, oldest first.
    pub fn inbound(&self, binding: &str) -> Result<Vec<InboundRecord>, StoreError> {
        self.scan(&key(b'i', binding, b""))
    }

    pub fn last_seq(&self, kind: u8, binding: &str) -> Result<u64, StoreError> {
        let prefix = key(kind, binding, b"");
        match self
            .backend
            .scan(&prefix, true, Some(1))?
            .into_iter()
            .next()
        {
            Some((k, _)) => {
                let tail: [u8; 8] = k[prefix.len()..].try_into().unwrap_or([0; 8]);
                Ok(u64::from_be_bytes(tail))
            }
            None => Ok(0),
        }
    }

    pub fn chat(&self, binding: &str, chat: &str) -> Result<Option<ChatRecord>, StoreError> {
        self.get(&key(b'k', binding, chat.as_bytes()))
    }

    pub fn chats(&self, binding: &str) -> Result<Vec<(String, ChatRecord)>, StoreError> {
        let prefix = key(b'k', binding, b"");
        let mut out = Vec::new();
        for (k, v) in self.backend.scan(&prefix, false, None)? {
            let chat = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
            let rec = decode_record(&chat, &v, FORMAT, |ver, _| {
                Err(format!("channel record format {ver} is not known"))
            })?;
            out.push((chat, rec));
        }
        Ok(out)
    }

    /// The binding's outbox, oldest first.
    pub fn outbox(&self, binding: &str) -> Result<Vec<OutRecord>, StoreError> {
        self.scan(&key(b'o', binding, b""))
    }

    /// Whether a chunk with this stable id was ever queued.
    pub fn has_out(&self, binding: &str, id: &str) -> Result<bool, StoreError> {
        self.has(&key(b'x', binding, id.as_bytes()))
    }

    pub fn pairings(&self) -> Result<Vec<PairingRecord>, StoreError> {
        self.scan(&key(b'p', "", b""))
    }

    pub fn pairing(&self, code: &str) -> Result<Option<PairingRecord>, StoreError> {
        self.get(&key(b'p', "", code.as_bytes()))
    }

    pub fn pending_pairing(&self, binding: &str, user: &str) -> Result<bool, StoreError> {
        self.has(&key(b'q', binding, user.as_bytes()))
    }

    pub fn allowed(&self, binding: &str, user: &str) -> Result<bool, StoreError> {
        self.has(&key(b'a', binding, user.as_bytes()))
    }

    /// Journal entries and outbox chunks that are done and older than
    /// `before_ms` go; dedup keys of the journal stay a week longer than
    /// a platform redelivers.
    pub fn prune(&self, binding: &str, before_ms: u64) -> Result<usize, StoreError> {
        let mut b = Batch::new();
        let mut n = 0;
        for r in self.inbound(binding)? {
            if r.received_ms < before_ms
                && matches!(r.state, TurnState::Answered | TurnState::Command)
            {
                b.remove(seq_key(b'i', binding, r.seq));
                n += 1;
            }
        }
        for o in self.outbox(binding)? {
            if o.created_ms < before_ms
                && !matches!(
                    o.state,
                    OutState::Pending | OutState::Sending | OutState::NeedsUserMessage
                )
            {
                b.remove(seq_key(b'o', binding, o.seq));
                n += 1;
            }
        }
        self.backend.apply(&b, self.fence.as_deref())?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbound(seq: u64, state: TurnState, at: u64) -> InboundRecord {
        InboundRecord {
            binding: "tg".into(),
            seq,
            update_id: format!("u{seq}"),
            chat: "c".into(),
            user: "42".into(),
            message_id: format!("m{seq}"),
            text: "hi".into(),
            received_ms: at,
            state,
        }
    }

    fn out(seq: u64, state: OutState, at: u64) -> OutRecord {
        OutRecord {
            binding: "tg".into(),
            seq,
            id: format!("s/{seq}/0"),
            chat: "c".into(),
            text: "hello".into(),
            index: 0,
            last: true,
            plain: false,
            created_ms: at,
            reply_to: None,
            state,
        }
    }

    #[test]
    fn pruning_forgets_what_is_done_and_old_but_keeps_what_dedups_and_what_is_pending() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("db"), 8 << 20).unwrap();
        let s = ChannelStore::open(store).unwrap();
        let mut w = Write::default();
        w.inbound(&inbound(1, TurnState::Answered, 10))
            .inbound(&inbound(2, TurnState::Queued, 10))
            .inbound(&inbound(3, TurnState::Answered, 1000))
            .out(&out(
                1,
                OutState::Sent {
                    platform_id: "9".into(),
                    at_ms: 10,
                },
                10,
            ))
            .out(&out(2, OutState::Pending, 10))
            .out(&out(3, OutState::Sending, 10));
        s.apply(&w).unwrap();
        assert_eq!(s.prune("tg", 500).unwrap(), 2);
        let seqs: Vec<u64> = s.inbound("tg").unwrap().iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [2, 3]);
        let outs: Vec<u64> = s.outbox("tg").unwrap().iter().map(|o| o.seq).collect();
        assert_eq!(outs, [2, 3]);
        // A redelivered update or message of a pruned entry is still known.
        assert!(s.seen_update("tg", "u1").unwrap());
        assert!(s.seen_message("tg", "c", "m1").unwrap());
        assert!(s.has_out("tg", "s/1/0").unwrap());
        assert_eq!(s.last_seq(b'i', "tg").unwrap(), 3);
    }

    #[test]
    fn unbinding_removes_every_record_of_the_binding_and_no_other() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("db"), 8 << 20).unwrap();
        let s = ChannelStore::open(store).unwrap();
        let mut w = Write::default();
        for name in ["tg", "tg2"] {
            w.binding(&BindingRecord {
                name: name.into(),
                kind: BindingKind::Inbox { dir: "/x".into() },
                created_ms: 1,
                auth_failed: None,
                paused_until_ms: None,
            });
        }
        w.inbound(&inbound(1, TurnState::Queued, 1))
            .allow("tg", "42")
            .pairing(&PairingRecord {
                code: "ABC".into(),
                binding: "tg".into(),
                user: "7".into(),
                user_name: "x".into(),
                chat: "c".into(),
                created_ms: 1,
            });
        s.apply(&w).unwrap();
        s.remove_binding("tg").unwrap();
        assert_eq!(s.bindings().unwrap().len(), 1);
        assert!(s.inbound("tg").unwrap().is_empty());
        assert!(!s.allowed("tg", "42").unwrap());
        assert!(s.pairings().unwrap().is_empty());
        assert!(!s.seen_update("tg", "u1").unwrap());
        // "tg2" shares the prefix "tg" but not the key: it stays.
        assert!(s.binding("tg2").unwrap().is_some());
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let k = BindingKind::Telegram {
            token: "123:secret-token".into(),
            api_base: None,
        };
        assert!(!format!("{k:?}").contains("secret-token"));
    }
}
