//! The session room's storage, behind [`SessionStore`].
//!
//! sled layout, tree `sessions`, each change one atomic batch:
//! `r<id>` session record · `m<id><idx>` message (append-only, stamped
//! with the record's `updated_ms` when written) · `x<id><idx>` a memory
//! extraction over the messages before `idx` · `n` next id. Ids and
//! indexes are big-endian so keys sort numerically.

use super::model::{
    EXTRACTION_FORMAT_VERSION, ExtractionRecord, MESSAGE_FORMAT_VERSION, SESSION_FORMAT_VERSION,
    SessionRecord, SessionRecordV1, SessionRecordV2, SessionRecordV3, SessionRecordV4,
    StoredMessage,
};
use crate::llm::Message;
use crate::store::{
    AfterSync, Batch, Store, StoreError, decode_body, decode_record, encode_record,
};

pub trait SessionStore: Send + Sync + 'static {
    fn next_id(&self) -> Result<u64, StoreError>;
    /// Writes the record and appends `messages` at `record.next_idx -
    /// messages.len()` onwards, atomically. A new session bumps the id.
    fn save(
        &self,
        record: &SessionRecord,
        messages: &[Message],
        new: bool,
    ) -> Result<(), StoreError>;
    fn get(&self, id: u64) -> Result<Option<SessionRecord>, StoreError>;
    /// Every session, oldest first.
    fn list(&self) -> Result<Vec<SessionRecord>, StoreError>;
    /// Messages with index >= `from`, oldest first, with their indexes.
    fn messages(&self, id: u64, from: u64) -> Result<Vec<(u64, Message)>, StoreError> {
        self.messages_range(id, from, u64::MAX)
    }
    /// Messages with `from <= index < to`.
    fn messages_range(
        &self,
        id: u64,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, Message)>, StoreError> {
        Ok(self
            .stamped_messages(id, from, to)?
            .into_iter()
            .map(|(idx, m)| (idx, m.message))
            .collect())
    }
    /// [`Self::messages_range`] with the time each message was stored.
    fn stamped_messages(
        &self,
        id: u64,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, StoredMessage)>, StoreError>;
    /// Writes the record (whose totals include `extraction`'s cost) and
    /// the extraction's record, atomically.
    fn save_extraction(
        &self,
        record: &SessionRecord,
        extraction: &ExtractionRecord,
    ) -> Result<(), StoreError>;
    /// The session's extractions, oldest first.
    fn extractions(&self, id: u64) -> Result<Vec<ExtractionRecord>, StoreError>;
    /// Removes the record, every message and every extraction record of
    /// session `id`, atomically.
    fn delete(&self, id: u64) -> Result<(), StoreError>;
    fn after_sync(&self, then: AfterSync);
    /// Whether other nodes write this store too: then a session is run
    /// (or changed) only under its claim, and ids come from the store.
    fn shared(&self) -> bool {
        false
    }
    /// Takes session `id` for this node before a run or a change.
    fn claim(&self, _id: u64) -> Result<Claim, StoreError> {
        Ok(Claim::Local)
    }
    /// Gives the claim back (the run ended, the change is written).
    fn release(&self, _id: u64) {}
    /// Of `ids` (sessions stored `running`), those no live node holds: a
    /// node died running them, and the next claim repairs them.
    fn orphaned(&self, _ids: &[u64]) -> Result<Vec<u64>, StoreError> {
        Ok(Vec::new())
    }
}

/// What [`SessionStore::claim`] got.
pub enum Claim {
    /// Only this node writes the store: nothing to take.
    Local,
    /// Taken: the record as the store has it now (another node may have
    /// changed it since this node last looked), and a token cancelled if
    /// the claim is lost (this node could not renew it in time), so a run
    /// under it stops before another node may take the session.
    Taken {
        record: Box<SessionRecord>,
        lost: tokio_util::sync::CancellationToken,
    },
    /// Another node holds it (it runs the session now).
    Busy { node: String },
    /// It was deleted (on another node).
    Gone,
}

pub struct SledSessionStore {
    store: Store,
    tree: sled::Tree,
}

impl SledSessionStore {
    pub fn open(store: Store) -> Result<Self, StoreError> {
        let tree = store.tree("sessions")?;
        Ok(SledSessionStore { store, tree })
    }
}

fn record_key(id: u64) -> Vec<u8> {
    let mut k = vec![b'r'];
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn message_prefix(id: u64) -> Vec<u8> {
    let mut k = vec![b'm'];
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn message_key(id: u64, idx: u64) -> Vec<u8> {
    let mut k = message_prefix(id);
    k.extend_from_slice(&idx.to_be_bytes());
    k
}

fn extraction_prefix(id: u64) -> Vec<u8> {
    let mut k = vec![b'x'];
    k.extend_from_slice(&id.to_be_bytes());
    k
}

/// The messages a [`SessionStore::save`] appends, as every backend stores
/// them: (index, encoded message), the last at `record.next_idx - 1`,
/// each stamped with the record's `updated_ms`.
pub fn appended<'a>(
    record: &'a SessionRecord,
    messages: &'a [Message],
) -> impl Iterator<Item = (u64, Vec<u8>)> + 'a {
    let first = record.next_idx.saturating_sub(messages.len() as u64);
    messages.iter().enumerate().map(move |(i, m)| {
        let stored = StoredMessage {
            message: m.clone(),
            created_ms: record.updated_ms,
        };
        (
            first + i as u64,
            encode_record(MESSAGE_FORMAT_VERSION, &stored),
        )
    })
}

/// A session record as any backend stores it.
pub fn decode_session(bytes: &[u8]) -> Result<SessionRecord, StoreError> {
    decode_record(
        "session record",
        bytes,
        SESSION_FORMAT_VERSION,
        migrate_record,
    )
}

/// A stored message as any backend stores it.
pub fn decode_message(bytes: &[u8]) -> Result<StoredMessage, StoreError> {
    decode_record(
        "session message",
        bytes,
        MESSAGE_FORMAT_VERSION,
        migrate_message,
    )
}

/// A memory extraction record as any backend stores it.
pub fn decode_extraction(bytes: &[u8]) -> Result<ExtractionRecord, StoreError> {
    decode_record(
        "memory extraction record",
        bytes,
        EXTRACTION_FORMAT_VERSION,
        no_migration,
    )
}

fn no_migration<T>(found: u32, _: &[u8]) -> Result<T, String> {
    Err(format!("no migration from session format {found}"))
}

/// Format 1 kept no time: 0 says "unknown".
fn migrate_message(found: u32, body: &[u8]) -> Result<StoredMessage, String> {
    match found {
        1 => decode_body::<Message>(body).map(|message| StoredMessage {
            message,
            created_ms: 0,
        }),
        other => no_migration(other, body),
    }
}

fn migrate_record(found: u32, body: &[u8]) -> Result<SessionRecord, String> {
    match found {
        1 => decode_body::<SessionRecordV1>(body).map(SessionRecord::from),
        2 => decode_body::<SessionRecordV2>(body).map(SessionRecord::from),
        3 => decode_body::<SessionRecordV3>(body).map(SessionRecord::from),
        4 => decode_body::<SessionRecordV4>(body).map(SessionRecord::from),
        other => no_migration(other, body),
    }
}

impl SessionStore for SledSessionStore {
    fn next_id(&self) -> Result<u64, StoreError> {
        Ok(self
            .store
            .get(&self.tree, b"n")?
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map(u64::from_be_bytes)
            .unwrap_or(1))
    }

    fn save(
        &self,
        record: &SessionRecord,
        messages: &[Message],
        new: bool,
    ) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.insert(
            record_key(record.id),
            encode_record(SESSION_FORMAT_VERSION, record),
        );
        for (idx, bytes) in appended(record, messages) {
            batch.insert(message_key(record.id, idx), bytes);
        }
        if new {
            batch.insert(&b"n"[..], (record.id + 1).to_be_bytes());
        }
        self.store.apply(&self.tree, &batch)
    }

    fn get(&self, id: u64) -> Result<Option<SessionRecord>, StoreError> {
        match self.store.get(&self.tree, &record_key(id))? {
            Some(bytes) => Ok(Some(decode_record(
                "session record",
                &bytes,
                SESSION_FORMAT_VERSION,
                migrate_record,
            )?)),
            None => Ok(None),
        }
    }

    fn list(&self) -> Result<Vec<SessionRecord>, StoreError> {
        let mut out = Vec::new();
        for kv in self.store.scan_prefix(&self.tree, b"r", false) {
            let (_, v) = kv?;
            out.push(decode_record(
                "session record",
                &v,
                SESSION_FORMAT_VERSION,
                migrate_record,
            )?);
        }
        Ok(out)
    }

    fn stamped_messages(
        &self,
        id: u64,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, StoredMessage)>, StoreError> {
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        let end = if to == u64::MAX {
            message_prefix(id + 1)
        } else {
            message_key(id, to)
        };
        for kv in self
            .store
            .range(&self.tree, &message_key(id, from), &end, false)
        {
            let (k, v) = kv?;
            let idx = k
                .get(9..17)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_be_bytes)
                .unwrap_or(0);
            out.push((
                idx,
                decode_record(
                    "session message",
                    &v,
                    MESSAGE_FORMAT_VERSION,
                    migrate_message,
                )?,
            ));
        }
        Ok(out)
    }

    fn save_extraction(
        &self,
        record: &SessionRecord,
        extraction: &ExtractionRecord,
    ) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.insert(
            record_key(record.id),
            encode_record(SESSION_FORMAT_VERSION, record),
        );
        let mut key = extraction_prefix(record.id);
        key.extend_from_slice(&extraction.to_idx.to_be_bytes());
        batch.insert(key, encode_record(EXTRACTION_FORMAT_VERSION, extraction));
        self.store.apply(&self.tree, &batch)
    }

    fn extractions(&self, id: u64) -> Result<Vec<ExtractionRecord>, StoreError> {
        let mut out = Vec::new();
        for kv in self
            .store
            .scan_prefix(&self.tree, &extraction_prefix(id), false)
        {
            let (_, v) = kv?;
            out.push(decode_record(
                "memory extraction record",
                &v,
                EXTRACTION_FORMAT_VERSION,
                no_migration,
            )?);
        }
        Ok(out)
    }

    fn delete(&self, id: u64) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.remove(record_key(id));
        for prefix in [message_prefix(id), extraction_prefix(id)] {
            for kv in self.store.scan_prefix(&self.tree, &prefix, false) {
                let (k, _) = kv?;
                batch.remove(k.to_vec());
            }
        }
        self.store.apply(&self.tree, &batch)
    }

    fn after_sync(&self, then: AfterSync) {
        self.store.after_sync(then);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::model::SessionStatus;

    fn record(id: u64, next_idx: u64, updated_ms: u64) -> SessionRecord {
        SessionRecord {
            id,
            name: None,
            workdir: "/w".into(),
            model: "main".into(),
            status: SessionStatus::Idle,
            error: None,
            next_idx,
            context_base_idx: 0,
            usage: Default::default(),
            cost_usd: 0.0,
            created_ms: 1,
            updated_ms,
            runs: 0,
            chain: "s1".into(),
            depth: 0,
            context: Default::default(),
            sandbox: Default::default(),
            extract_from_idx: 0,
            extract_turns: 0,
            parent: None,
            agent_depth: 0,
        }
    }

    #[test]
    fn a_format_3_record_decodes_and_counts_extraction_turns_from_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db"), 8 << 20).unwrap();
        let sessions = SledSessionStore::open(store.clone()).unwrap();
        let r = record(4, 12, 9_000);
        let v3 = SessionRecordV3 {
            id: r.id,
            name: Some("old".into()),
            workdir: r.workdir.clone(),
            model: r.model.clone(),
            status: r.status,
            error: None,
            next_idx: r.next_idx,
            context_base_idx: 3,
            usage: crate::llm::Usage {
                input_tokens: 70,
                ..Default::default()
            },
            cost_usd: 0.5,
            created_ms: 1,
            updated_ms: 9_000,
            runs: 6,
            chain: "s4".into(),
            depth: 0,
            context: Default::default(),
            sandbox: Default::default(),
        };
        let mut batch = Batch::new();
        batch.insert(record_key(4), encode_record(3, &v3));
        store.apply(&sessions.tree, &batch).unwrap();
        let got = sessions.get(4).unwrap().unwrap();
        assert_eq!(got.name.as_deref(), Some("old"));
        assert_eq!((got.context_base_idx, got.runs), (3, 6));
        assert_eq!((got.usage.input_tokens, got.cost_usd), (70, 0.5));
        assert_eq!((got.extract_from_idx, got.extract_turns), (12, 0));
    }

    #[test]
    fn extractions_are_kept_in_order_with_the_totals_and_go_with_the_session() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db"), 8 << 20).unwrap();
        let sessions = SledSessionStore::open(store).unwrap();
        let mut r = record(1, 20, 1_000);
        sessions.save(&r, &[], true).unwrap();
        sessions.save(&record(2, 1, 1_000), &[], true).unwrap();
        for (to, cost) in [(300u64, 0.25), (10, 0.5)] {
            r.cost_usd += cost;
            let x = ExtractionRecord {
                at_ms: to,
                from_idx: 0,
                to_idx: to,
                turns: 5,
                model: "fake".into(),
                model_calls: 2,
                usage: Default::default(),
                cost_usd: cost,
                saved: vec![format!("e{to}")],
                forgot: vec![],
                outcome: "done".into(),
            };
            sessions.save_extraction(&r, &x).unwrap();
        }
        assert_eq!(sessions.get(1).unwrap().unwrap().cost_usd, 0.75);
        let got: Vec<u64> = sessions
            .extractions(1)
            .unwrap()
            .iter()
            .map(|x| x.to_idx)
            .collect();
        assert_eq!(got, [10, 300]);
        assert!(sessions.extractions(2).unwrap().is_empty());
        sessions.delete(1).unwrap();
        assert!(sessions.extractions(1).unwrap().is_empty());
    }

    #[test]
    fn messages_keep_their_time_and_old_ones_migrate_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db"), 8 << 20).unwrap();
        let sessions = SledSessionStore::open(store.clone()).unwrap();
        // A message as format 1 wrote it: a bare Message.
        let mut batch = Batch::new();
        batch.insert(
            message_key(1, 0),
            encode_record(1, &Message::user_text("old")),
        );
        store.apply(&sessions.tree, &batch).unwrap();
        sessions
            .save(&record(1, 2, 5_000), &[Message::user_text("new")], true)
            .unwrap();
        let got = sessions.stamped_messages(1, 0, u64::MAX).unwrap();
        let times: Vec<(u64, u64)> = got.iter().map(|(i, m)| (*i, m.created_ms)).collect();
        assert_eq!(times, [(0, 0), (1, 5_000)]);
        assert_eq!(got[0].1.message, Message::user_text("old"));

        // Deleting takes the record and every message, and only those.
        sessions
            .save(&record(2, 1, 6_000), &[Message::user_text("other")], true)
            .unwrap();
        sessions.delete(1).unwrap();
        assert!(sessions.get(1).unwrap().is_none());
        assert!(sessions.messages(1, 0).unwrap().is_empty());
        assert_eq!(sessions.messages(2, 0).unwrap().len(), 1);
    }
}
