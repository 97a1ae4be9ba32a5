//! Sessions on the shared store: records, messages and extractions are
//! rows every node reads, so each node's `session_list` and
//! `session_history` show every node's sessions. One node at a time runs
//! (or changes) a session, under a claim: a lease with a fresh fencing
//! token that the node renews every 10 s and every write presents; a
//! write under a lost claim changes nothing. A node that cannot renew for
//! 30 s cancels its claims' runs (self-fencing) before the lease (45 s)
//! lets another node take the session. A claim that finds the record
//! `running` took it from a node that died mid-run, and the session room
//! repairs it as after a crash.
//!
//! The session room's storage is synchronous (on sled it answers from
//! memory and the group commit); here each call is one round trip,
//! blocking its thread inside `block_in_place`, so this store needs the
//! multi-threaded runtime flytod runs. It may not run anything.

use super::model::{
    EXTRACTION_FORMAT_VERSION, ExtractionRecord, MESSAGE_FORMAT_VERSION, SESSION_FORMAT_VERSION,
    SessionRecord, StoredMessage, format_id,
};
use super::store::{
    Claim, SessionStore, appended, decode_extraction, decode_message, decode_session,
};
use crate::llm::Message;
use crate::store::postgres::Shared;
use crate::store::postgres::claims::{HEARTBEAT_EVERY, LEASE, SELF_FENCE_AFTER};
use crate::store::postgres::imports::{Copied, drop_taken_name, first_copy, next_value};
use crate::store::{AfterSync, StoreError, encode_record};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// Lets the claims of `node` (this node's previous run on the same state
/// directory, over for sure) run out now: another node, or this one,
/// takes those sessions at once and repairs a run the crash cut short.
pub async fn release_node(
    shared: &Shared,
    node: &str,
) -> Result<u64, crate::store::postgres::PgError> {
    let c = shared.client().await?;
    c.execute(
        "UPDATE flyto_sessions SET lease_until = now() - interval '1 second'
         WHERE lease_node = $1 AND lease_until >= now()",
        &[&node],
    )
    .await
    .map_err(shared.query_err("releasing a previous run's session claims"))
}

/// A claim this node holds, or held until it was lost: writes keep
/// presenting its token (and so are refused) until the room releases it.
struct Held {
    token: i64,
    lost: CancellationToken,
}

impl Held {
    fn gone(&self) -> bool {
        self.lost.is_cancelled()
    }
}

struct Inner {
    shared: Shared,
    node: String,
    handle: tokio::runtime::Handle,
    held: Mutex<HashMap<u64, Held>>,
}

#[derive(Clone)]
pub struct SharedSessionStore {
    inner: Arc<Inner>,
    /// Renews the claims; ends with the last clone.
    _renewer: Arc<Renewer>,
}

struct Renewer(tokio::task::JoinHandle<()>);

impl Drop for Renewer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn db(e: impl std::fmt::Display) -> StoreError {
    StoreError::Database(e.to_string())
}

impl SharedSessionStore {
    /// A store for node `node`; must be made inside the runtime, whose
    /// handle it keeps.
    pub fn new(shared: Shared, node: String) -> SharedSessionStore {
        let inner = Arc::new(Inner {
            shared,
            node,
            handle: tokio::runtime::Handle::current(),
            held: Mutex::new(HashMap::new()),
        });
        let renewer = Renewer(tokio::spawn(renew(inner.clone())));
        SharedSessionStore {
            inner,
            _renewer: Arc::new(renewer),
        }
    }

    fn block<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::task::block_in_place(|| self.inner.handle.block_on(f))
    }

    fn token(&self, id: u64) -> Option<i64> {
        self.inner
            .held
            .lock()
            .ok()
            .and_then(|h| h.get(&id).map(|c| c.token))
    }

    fn err(&self, what: &'static str) -> impl Fn(tokio_postgres::Error) -> StoreError + '_ {
        let q = self.inner.shared.query_err(what);
        move |e| {
            if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) {
                return StoreError::Conflict(
                    "another node just gave a session this name: choose another name".into(),
                );
            }
            db(q(e))
        }
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.inner.shared.client().await.map_err(db)
    }

    /// Refused: another node holds the session, or this node's claim was lost.
    fn fenced(&self, id: u64) -> StoreError {
        StoreError::Conflict(format!(
            "session {} is held by another node now (this node's claim on it was lost): nothing was written; `flytoctl session_history {}` shows where it stands",
            format_id(id),
            format_id(id)
        ))
    }

    /// Writes `record` (under this node's claim, or where no live claim
    /// of another node is) and `messages` after it, in `tx`.
    async fn write(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        record: &SessionRecord,
        messages: &[Message],
        new: bool,
    ) -> Result<(), StoreError> {
        let id = record.id as i64;
        let bytes = encode_record(SESSION_FORMAT_VERSION, record);
        let next = record.next_idx as i64;
        let n = if new {
            tx.execute(
                "INSERT INTO flyto_sessions (id, name, record, next_idx) VALUES ($1, $2, $3, $4)",
                &[&id, &record.name, &bytes, &next],
            )
            .await
            .map_err(self.err("creating a session"))?
        } else {
            match self.token(record.id) {
                Some(token) => tx
                    .execute(
                        "UPDATE flyto_sessions SET name = $2, record = $3, next_idx = $4
                         WHERE id = $1 AND lease_token = $5",
                        &[&id, &record.name, &bytes, &next, &token],
                    )
                    .await
                    .map_err(self.err("writing a session"))?,
                // Outside a claim (the bookkeeping after a run): only where
                // nobody holds the session and nothing was appended since.
                None if messages.is_empty() => tx
                    .execute(
                        "UPDATE flyto_sessions SET name = $2, record = $3
                         WHERE id = $1 AND lease_token IS NULL AND next_idx = $4",
                        &[&id, &record.name, &bytes, &next],
                    )
                    .await
                    .map_err(self.err("writing a session"))?,
                None => 0,
            }
        };
        if n == 0 {
            return Err(self.fenced(record.id));
        }
        for (idx, bytes) in appended(record, messages) {
            tx.execute(
                "INSERT INTO flyto_session_messages (session, idx, record) VALUES ($1, $2, $3)
                 ON CONFLICT (session, idx) DO UPDATE SET record = EXCLUDED.record",
                &[&id, &(idx as i64), &bytes],
            )
            .await
            .map_err(self.err("writing a session's messages"))?;
        }
        Ok(())
    }

    async fn do_save(
        &self,
        record: &SessionRecord,
        messages: &[Message],
        new: bool,
    ) -> Result<(), StoreError> {
        let mut c = self.client().await?;
        let tx = c
            .transaction()
            .await
            .map_err(self.err("writing a session"))?;
        self.write(&tx, record, messages, new).await?;
        tx.commit().await.map_err(self.err("writing a session"))
    }

    async fn do_claim(&self, id: u64) -> Result<Claim, StoreError> {
        let c = self.client().await?;
        let row = c
            .query_opt(
                "UPDATE flyto_sessions
                 SET lease_node = $2, lease_token = nextval('flyto_fencing'),
                     lease_until = now() + make_interval(secs => $3)
                 WHERE id = $1 AND (lease_token IS NULL OR lease_until < now() OR lease_node = $2)
                 RETURNING lease_token, record",
                &[&(id as i64), &self.inner.node, &LEASE.as_secs_f64()],
            )
            .await
            .map_err(self.err("claiming a session"))?;
        let Some(row) = row else {
            let holder = c
                .query_opt(
                    "SELECT lease_node FROM flyto_sessions WHERE id = $1",
                    &[&(id as i64)],
                )
                .await
                .map_err(self.err("claiming a session"))?;
            return match holder {
                Some(r) => Ok(Claim::Busy {
                    node: r.get::<_, Option<String>>(0).unwrap_or_default(),
                }),
                None => Ok(Claim::Gone),
            };
        };
        let record = decode_session(row.get::<_, &[u8]>(1))?;
        let lost = CancellationToken::new();
        if let Ok(mut held) = self.inner.held.lock() {
            held.insert(
                id,
                Held {
                    token: row.get(0),
                    lost: lost.clone(),
                },
            );
        }
        Ok(Claim::Taken {
            record: Box::new(record),
            lost,
        })
    }

    async fn do_release(&self, id: u64, token: i64) -> Result<(), StoreError> {
        self.client()
            .await?
            .execute(
                "UPDATE flyto_sessions SET lease_node = NULL, lease_token = NULL, lease_until = NULL
                 WHERE id = $1 AND lease_token = $2",
                &[&(id as i64), &token],
            )
            .await
            .map_err(self.err("releasing a session"))?;
        Ok(())
    }
}

/// Renews this node's claims every [`HEARTBEAT_EVERY`]; a claim the
/// database no longer has is lost, and after [`SELF_FENCE_AFTER`] without
/// a renewal every claim is given up, so their runs stop before their
/// leases can run out.
async fn renew(inner: Arc<Inner>) {
    let mut last_ok = Instant::now();
    loop {
        tokio::time::sleep(HEARTBEAT_EVERY).await;
        let tokens: Vec<i64> = match inner.held.lock() {
            Ok(h) => h.values().filter(|c| !c.gone()).map(|c| c.token).collect(),
            Err(_) => return,
        };
        if tokens.is_empty() {
            last_ok = Instant::now();
            continue;
        }
        let renewed = async {
            let c = inner.shared.client().await.map_err(db)?;
            let rows = c
                .query(
                    "UPDATE flyto_sessions SET lease_until = now() + make_interval(secs => $2)
                     WHERE lease_token = ANY($1) RETURNING lease_token",
                    &[&tokens, &LEASE.as_secs_f64()],
                )
                .await
                .map_err(|e| db(inner.shared.query_err("renewing session claims")(e)))?;
            Ok::<Vec<i64>, StoreError>(rows.iter().map(|r| r.get(0)).collect())
        }
        .await;
        let Ok(held) = inner.held.lock() else {
            return;
        };
        match renewed {
            Ok(kept) => {
                last_ok = Instant::now();
                for (id, c) in held.iter() {
                    if !c.gone() && !kept.contains(&c.token) {
                        tracing::warn!(session = %format_id(*id), "this node's claim on the session was lost: its run stops");
                        c.lost.cancel();
                    }
                }
            }
            Err(e) if last_ok.elapsed() >= SELF_FENCE_AFTER => {
                tracing::error!(
                    "cannot renew the session claims for {} s ({e}): stopping their runs before another node may take them",
                    last_ok.elapsed().as_secs()
                );
                for c in held.values() {
                    c.lost.cancel();
                }
            }
            Err(e) => tracing::warn!("cannot renew the session claims now: {e}"),
        }
    }
}

impl SessionStore for SharedSessionStore {
    fn next_id(&self) -> Result<u64, StoreError> {
        self.block(async {
            let row = self
                .client()
                .await?
                .query_one("SELECT nextval('flyto_session_ids')", &[])
                .await
                .map_err(self.err("taking a session id"))?;
            Ok(row.get::<_, i64>(0) as u64)
        })
    }

    fn save(
        &self,
        record: &SessionRecord,
        messages: &[Message],
        new: bool,
    ) -> Result<(), StoreError> {
        self.block(self.do_save(record, messages, new))
    }

    fn get(&self, id: u64) -> Result<Option<SessionRecord>, StoreError> {
        self.block(async {
            let row = self
                .client()
                .await?
                .query_opt(
                    "SELECT record FROM flyto_sessions WHERE id = $1",
                    &[&(id as i64)],
                )
                .await
                .map_err(self.err("reading a session"))?;
            row.map(|r| decode_session(r.get::<_, &[u8]>(0)))
                .transpose()
        })
    }

    fn list(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.block(async {
            let rows = self
                .client()
                .await?
                .query("SELECT record FROM flyto_sessions ORDER BY id", &[])
                .await
                .map_err(self.err("listing the sessions"))?;
            rows.iter()
                .map(|r| decode_session(r.get::<_, &[u8]>(0)))
                .collect()
        })
    }

    fn stamped_messages(
        &self,
        id: u64,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, StoredMessage)>, StoreError> {
        if from >= to {
            return Ok(Vec::new());
        }
        let cap = |n: u64| n.min(i64::MAX as u64) as i64;
        self.block(async {
            let rows = self
                .client()
                .await?
                .query(
                    "SELECT idx, record FROM flyto_session_messages
                     WHERE session = $1 AND idx >= $2 AND idx < $3 ORDER BY idx",
                    &[&(id as i64), &cap(from), &cap(to)],
                )
                .await
                .map_err(self.err("reading a session's messages"))?;
            rows.iter()
                .map(|r| {
                    Ok((
                        r.get::<_, i64>(0) as u64,
                        decode_message(r.get::<_, &[u8]>(1))?,
                    ))
                })
                .collect()
        })
    }

    fn save_extraction(
        &self,
        record: &SessionRecord,
        extraction: &ExtractionRecord,
    ) -> Result<(), StoreError> {
        self.block(async {
            let mut c = self.client().await?;
            let tx = c
                .transaction()
                .await
                .map_err(self.err("writing an extraction"))?;
            self.write(&tx, record, &[], false).await?;
            tx.execute(
                "INSERT INTO flyto_session_extractions (session, to_idx, record) VALUES ($1, $2, $3)
                 ON CONFLICT (session, to_idx) DO UPDATE SET record = EXCLUDED.record",
                &[
                    &(record.id as i64),
                    &(extraction.to_idx as i64),
                    &encode_record(EXTRACTION_FORMAT_VERSION, extraction),
                ],
            )
            .await
            .map_err(self.err("writing an extraction"))?;
            tx.commit().await.map_err(self.err("writing an extraction"))
        })
    }

    fn extractions(&self, id: u64) -> Result<Vec<ExtractionRecord>, StoreError> {
        self.block(async {
            let rows = self
                .client()
                .await?
                .query(
                    "SELECT record FROM flyto_session_extractions WHERE session = $1 ORDER BY to_idx",
                    &[&(id as i64)],
                )
                .await
                .map_err(self.err("reading a session's extractions"))?;
            rows.iter()
                .map(|r| decode_extraction(r.get::<_, &[u8]>(0)))
                .collect()
        })
    }

    fn delete(&self, id: u64) -> Result<(), StoreError> {
        let token = self.token(id);
        self.block(async {
            let mut c = self.client().await?;
            let err = self.err("deleting a session");
            let tx = c.transaction().await.map_err(&err)?;
            let n = tx
                .execute(
                    "DELETE FROM flyto_sessions WHERE id = $1
                     AND (lease_token IS NULL OR lease_until < now() OR lease_token = $2)",
                    &[&(id as i64), &token],
                )
                .await
                .map_err(&err)?;
            if n == 0 {
                return Err(self.fenced(id));
            }
            for sql in [
                "DELETE FROM flyto_session_messages WHERE session = $1",
                "DELETE FROM flyto_session_extractions WHERE session = $1",
            ] {
                tx.execute(sql, &[&(id as i64)]).await.map_err(&err)?;
            }
            tx.commit().await.map_err(&err)
        })?;
        if let Ok(mut held) = self.inner.held.lock() {
            held.remove(&id);
        }
        Ok(())
    }

    /// A committed write is durable.
    fn after_sync(&self, then: AfterSync) {
        then(Ok(()));
    }

    fn shared(&self) -> bool {
        true
    }

    fn claim(&self, id: u64) -> Result<Claim, StoreError> {
        self.block(self.do_claim(id))
    }

    fn orphaned(&self, ids: &[u64]) -> Result<Vec<u64>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
        self.block(async {
            let rows = self
                .client()
                .await?
                .query(
                    "SELECT id FROM flyto_sessions
                     WHERE id = ANY($1) AND (lease_token IS NULL OR lease_until < now())",
                    &[&ids],
                )
                .await
                .map_err(self.err("reading the sessions' claims"))?;
            Ok(rows.iter().map(|r| r.get::<_, i64>(0) as u64).collect())
        })
    }

    fn release(&self, id: u64) {
        let held = self.inner.held.lock().ok().and_then(|mut h| h.remove(&id));
        if let Some(c) = held
            && let Err(e) = self.block(self.do_release(id, c.token))
        {
            // Its lease runs out by itself.
            tracing::warn!(session = %format_id(id), "cannot give the session's claim back: {e}");
        }
    }
}

/// A session of a one-machine store, as `flytod migrate --from-sled`
/// copies it.
pub struct ImportedSession {
    pub record: SessionRecord,
    pub messages: Vec<(u64, StoredMessage)>,
    pub extractions: Vec<ExtractionRecord>,
}

/// Copies `sessions` of the store at `source` once (`None`: copied
/// before), each under a new id, with its messages and extractions; a
/// session's chain names the plan its copy belongs to (`plans`: old plan
/// number → new). In one transaction: all or nothing.
pub async fn import(
    shared: &Shared,
    source: &str,
    sessions: Vec<ImportedSession>,
    plans: &HashMap<u64, u64>,
) -> Result<Option<Vec<Copied>>, StoreError> {
    let err = |what| {
        let q = shared.query_err(what);
        move |e| db(q(e))
    };
    let mut c = shared.client().await.map_err(db)?;
    let tx = c.transaction().await.map_err(err("copying sessions"))?;
    if !first_copy(&tx, source, "sessions", sessions.len())
        .await
        .map_err(err("copying sessions"))?
    {
        return Ok(None);
    }
    let mut copied = Vec::new();
    for s in sessions {
        let old = s.record.id;
        let id = next_value(&tx, "flyto_session_ids")
            .await
            .map_err(err("taking a session id"))?;
        let mut rec = s.record;
        rec.id = id;
        // Its own chain (`s<old>`) or a plan's (`p<old>`).
        if rec.chain == format_id(old) {
            rec.chain = format_id(id);
        } else if let Some(new) =
            crate::kernel::ids::plan::parse(&rec.chain).and_then(|p| plans.get(&p))
        {
            rec.chain = crate::kernel::ids::plan::format(*new);
        }
        let name_dropped = drop_taken_name(&tx, "flyto_sessions", &mut rec.name)
            .await
            .map_err(err("copying sessions"))?;
        tx.execute(
            "INSERT INTO flyto_sessions (id, name, record, next_idx) VALUES ($1, $2, $3, $4)",
            &[
                &(id as i64),
                &rec.name,
                &encode_record(SESSION_FORMAT_VERSION, &rec),
                &(rec.next_idx as i64),
            ],
        )
        .await
        .map_err(err("copying sessions"))?;
        for (idx, m) in &s.messages {
            tx.execute(
                "INSERT INTO flyto_session_messages (session, idx, record) VALUES ($1, $2, $3)",
                &[
                    &(id as i64),
                    &(*idx as i64),
                    &encode_record(MESSAGE_FORMAT_VERSION, m),
                ],
            )
            .await
            .map_err(err("copying sessions"))?;
        }
        for x in &s.extractions {
            tx.execute(
                "INSERT INTO flyto_session_extractions (session, to_idx, record) VALUES ($1, $2, $3)",
                &[
                    &(id as i64),
                    &(x.to_idx as i64),
                    &encode_record(EXTRACTION_FORMAT_VERSION, x),
                ],
            )
            .await
            .map_err(err("copying sessions"))?;
        }
        copied.push(Copied {
            old,
            new: id,
            name_dropped,
        });
    }
    tx.commit().await.map_err(err("copying sessions"))?;
    Ok(Some(copied))
}
