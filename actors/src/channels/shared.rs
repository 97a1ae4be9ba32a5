//! The channels room on the shared store: its records are rows keyed
//! exactly as in the sled tree (so the room's logic is the same on both),
//! and each binding has a lease (a row with a node, a fencing token from
//! `flyto_fencing` and an expiry by the database's clock). One node at a
//! time holds a binding: it polls it, sends its outbox and runs its
//! chats; every write of those presents the lease's token in the same
//! transaction that checks it, so a node that lost the lease (paused, cut
//! off, too slow) changes nothing. Other nodes read the records and add
//! to the outbox (job results, `channel_send`, pairing answers), with
//! sequence numbers from one database sequence.
//!
//! The room's storage is synchronous (on sled it answers from memory and
//! the group commit); here each call is one round trip inside
//! `block_in_place`, so this needs the multi-threaded runtime flytod runs.
//! It may not run anything: the lease keeper (`lease.rs`) decides.

use super::store::{BINDINGS, BindingRecord, ChannelBackend, Entries, Fence, decode_all};
use crate::store::postgres::{PgError, Shared};
use crate::store::{Batch, StoreError, prefix_end};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// NOTIFY channel: a binding's records changed on some node (payload: the
/// binding); the node holding it looks at its outbox, every node at its
/// list of bindings.
pub const CHANNELS_CHANNEL: &str = "flyto_channels";

pub struct SharedChannels {
    shared: Shared,
    handle: tokio::runtime::Handle,
}

fn db(e: impl std::fmt::Display) -> StoreError {
    StoreError::Database(e.to_string())
}

fn lost(f: &Fence) -> StoreError {
    StoreError::Conflict(format!(
        "channel binding `{}` is held by another node now (this node's lease on it was lost): nothing was written",
        f.binding
    ))
}

impl SharedChannels {
    /// Must be made inside the runtime, whose handle it keeps.
    pub fn new(shared: Shared) -> SharedChannels {
        SharedChannels {
            shared,
            handle: tokio::runtime::Handle::current(),
        }
    }

    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    fn block<T>(&self, f: impl Future<Output = Result<T, PgError>>) -> Result<T, StoreError> {
        tokio::task::block_in_place(|| self.handle.block_on(f)).map_err(db)
    }

    /// `false`: the fence's lease is not held, nothing was written.
    async fn do_apply(&self, batch: &Batch, fence: Option<&Fence>) -> Result<bool, PgError> {
        // The last write of each key wins, as in one sled batch.
        let mut last: BTreeMap<&[u8], Option<&[u8]>> = BTreeMap::new();
        for (k, v) in batch.ops() {
            last.insert(k, v);
        }
        let (mut put_k, mut put_v, mut del) = (Vec::new(), Vec::new(), Vec::new());
        for (k, v) in last {
            match v {
                Some(v) => {
                    put_k.push(k);
                    put_v.push(v);
                }
                None => del.push(k),
            }
        }
        let err = self.shared.query_err("writing channel records");
        let mut c = self.shared.client().await?;
        let tx = c.transaction().await.map_err(&err)?;
        if let Some(f) = fence {
            // FOR SHARE: a node taking the lease over waits for this
            // write to commit, so the two never overlap.
            let held = tx
                .query_opt(
                    "SELECT 1 FROM flyto_channel_leases
                     WHERE binding = $1 AND token = $2 AND until > now() FOR SHARE",
                    &[&f.binding, &f.token],
                )
                .await
                .map_err(&err)?;
            if held.is_none() {
                return Ok(false);
            }
        }
        if !del.is_empty() {
            tx.execute(
                "DELETE FROM flyto_channel_records WHERE key = ANY($1)",
                &[&del],
            )
            .await
            .map_err(&err)?;
        }
        if !put_k.is_empty() {
            put(&tx, &put_k, &put_v).await.map_err(&err)?;
        }
        tx.commit().await.map_err(&err)?;
        Ok(true)
    }

    /// Takes `binding`'s lease for `node` when nobody holds it (or its
    /// holder's ran out); the new fencing token, or `None`.
    pub async fn acquire(
        &self,
        binding: &str,
        node: &str,
        lease: Duration,
    ) -> Result<Option<i64>, PgError> {
        let c = self.shared.client().await?;
        let row = c
            .query_opt(
                "INSERT INTO flyto_channel_leases (binding, node, token, until)
                 VALUES ($1, $2, nextval('flyto_fencing'), now() + make_interval(secs => $3))
                 ON CONFLICT (binding) DO UPDATE
                     SET node = EXCLUDED.node, token = EXCLUDED.token, until = EXCLUDED.until
                     WHERE flyto_channel_leases.until < now()
                 RETURNING token",
                &[&binding, &node, &lease.as_secs_f64()],
            )
            .await
            .map_err(self.shared.query_err("taking a channel binding's lease"))?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Renews the leases with these tokens; the tokens still held.
    pub async fn renew(&self, tokens: &[i64], lease: Duration) -> Result<Vec<i64>, PgError> {
        let c = self.shared.client().await?;
        let rows = c
            .query(
                "UPDATE flyto_channel_leases SET until = now() + make_interval(secs => $2)
                 WHERE token = ANY($1) RETURNING token",
                &[&tokens, &lease.as_secs_f64()],
            )
            .await
            .map_err(self.shared.query_err("renewing channel leases"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Gives a lease up (the node stops, or the binding is gone), so
    /// another node takes the binding at once.
    pub async fn release(&self, binding: &str, token: Option<i64>) -> Result<(), PgError> {
        let c = self.shared.client().await?;
        c.execute(
            "DELETE FROM flyto_channel_leases WHERE binding = $1 AND ($2::bigint IS NULL OR token = $2)",
            &[&binding, &token],
        )
        .await
        .map_err(self.shared.query_err("releasing a channel lease"))?;
        Ok(())
    }

    /// Gives up every lease of `node`: this node's previous run on the
    /// same state directory, dead for sure (its lock is ours), so its
    /// bindings need not wait for its leases to run out.
    pub async fn release_node(&self, node: &str) -> Result<u64, PgError> {
        let c = self.shared.client().await?;
        c.execute("DELETE FROM flyto_channel_leases WHERE node = $1", &[&node])
            .await
            .map_err(
                self.shared
                    .query_err("releasing a previous run's channel leases"),
            )
    }

    /// binding → the node holding it, for every live lease.
    pub async fn holders(&self) -> Result<HashMap<String, String>, PgError> {
        let c = self.shared.client().await?;
        let rows = c
            .query(
                "SELECT binding, node FROM flyto_channel_leases WHERE until > now()",
                &[],
            )
            .await
            .map_err(self.shared.query_err("reading channel leases"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Wakes the node holding `binding` (and every node's list).
    pub async fn notify(&self, binding: &str) -> Result<(), PgError> {
        crate::store::postgres::listen::notify(&self.shared, CHANNELS_CHANNEL, binding).await
    }
}

impl SharedChannels {
    async fn scan_rows(
        &self,
        prefix: &[u8],
        reverse: bool,
        limit: Option<usize>,
    ) -> Result<Entries, PgError> {
        let end = prefix_end(prefix);
        let limit = limit.map_or(i64::MAX, |n| n as i64);
        let sql = if reverse {
            "SELECT key, value FROM flyto_channel_records
             WHERE key >= $1 AND ($2::bytea IS NULL OR key < $2) ORDER BY key DESC LIMIT $3"
        } else {
            "SELECT key, value FROM flyto_channel_records
             WHERE key >= $1 AND ($2::bytea IS NULL OR key < $2) ORDER BY key LIMIT $3"
        };
        let c = self.shared.client().await?;
        let rows = c
            .query(sql, &[&prefix, &end, &limit])
            .await
            .map_err(self.shared.query_err("reading channel records"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Every binding, without blocking a thread (the keeper can give up
    /// waiting).
    pub async fn bindings(&self) -> Result<Vec<BindingRecord>, StoreError> {
        let rows = self.scan_rows(BINDINGS, false, None).await.map_err(db)?;
        decode_all(rows)
    }
}

impl ChannelBackend for SharedChannels {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.block(async {
            let c = self.shared.client().await?;
            let row = c
                .query_opt(
                    "SELECT value FROM flyto_channel_records WHERE key = $1",
                    &[&key],
                )
                .await
                .map_err(self.shared.query_err("reading a channel record"))?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn scan(
        &self,
        prefix: &[u8],
        reverse: bool,
        limit: Option<usize>,
    ) -> Result<Entries, StoreError> {
        self.block(self.scan_rows(prefix, reverse, limit))
    }

    fn apply(&self, batch: &Batch, fence: Option<&Fence>) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        match self.block(self.do_apply(batch, fence))? {
            true => Ok(()),
            false => Err(fence.map_or_else(|| db("fenced"), lost)),
        }
    }

    fn synced(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        // Every write was committed before `apply` returned.
        Box::pin(std::future::ready(Ok(())))
    }

    fn next_out_seq(&self, local: &mut u64) -> Result<u64, StoreError> {
        let n: i64 = self.block(async {
            let c = self.shared.client().await?;
            let row = c
                .query_one("SELECT nextval('flyto_channel_out_seq')", &[])
                .await
                .map_err(self.shared.query_err("numbering an outbox chunk"))?;
            Ok(row.get(0))
        })?;
        *local = n as u64;
        Ok(*local)
    }
}

/// Writes these records in `tx`, replacing what the keys held.
async fn put(
    tx: &deadpool_postgres::Transaction<'_>,
    keys: &[&[u8]],
    values: &[&[u8]],
) -> Result<u64, tokio_postgres::Error> {
    tx.execute(
        "INSERT INTO flyto_channel_records (key, value)
         SELECT * FROM unnest($1::bytea[], $2::bytea[])
         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        &[&keys, &values],
    )
    .await
}

/// What `flytod migrate --from-sled` did with a node's channel bindings.
#[derive(Debug, Default, PartialEq)]
pub struct ImportedChannels {
    /// Copied with every record: polled by a node of the shared store.
    pub copied: Vec<String>,
    /// Not copied: the shared store has a binding of that name.
    pub taken: Vec<String>,
}

/// Copies the channel bindings of the store at `source` once (`None`:
/// copied before), each with its records (chats, journal, outbox,
/// admitted users, pairing requests), renaming the sessions they name
/// (`sessions`: old session number → new). A binding whose name the shared
/// store has is left out. In one transaction: all or nothing.
pub async fn import(
    shared: &Shared,
    source: &str,
    bindings: Vec<super::store::ExportedBinding>,
    sessions: &HashMap<u64, u64>,
) -> Result<Option<ImportedChannels>, StoreError> {
    use crate::session::model::{format_id, parse_id};
    use crate::store::postgres::imports::first_copy;
    let err = |e: tokio_postgres::Error| db(shared.query_err("copying channel bindings")(e));
    let mut c = shared.client().await.map_err(db)?;
    let tx = c.transaction().await.map_err(err)?;
    if !first_copy(&tx, source, "channels", bindings.len())
        .await
        .map_err(err)?
    {
        return Ok(None);
    }
    let mut done = ImportedChannels::default();
    let mut last_out_seq = 0;
    for mut b in bindings {
        let taken = tx
            .query_opt(
                "SELECT 1 FROM flyto_channel_records WHERE key = $1",
                &[&b.key],
            )
            .await
            .map_err(err)?
            .is_some();
        if taken {
            done.taken.push(b.name);
            continue;
        }
        b.rename_sessions(|old| Some(format_id(*sessions.get(&parse_id(old)?)?)))?;
        let (keys, values): (Vec<&[u8]>, Vec<&[u8]>) = b
            .records
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .unzip();
        // What a binding of that name left behind before it was unbound
        // gives way to the copy.
        put(&tx, &keys, &values).await.map_err(err)?;
        last_out_seq = last_out_seq.max(b.last_out_seq);
        done.copied.push(b.name);
    }
    if last_out_seq > 0 {
        // The outbox's sequence numbers key its chunks: the next one any
        // node takes must be above every copied chunk's.
        tx.execute(
            "SELECT setval('flyto_channel_out_seq',
                 GREATEST($1, (SELECT last_value FROM flyto_channel_out_seq)))",
            &[&(last_out_seq.min(i64::MAX as u64) as i64)],
        )
        .await
        .map_err(err)?;
    }
    tx.commit().await.map_err(err)?;
    Ok(Some(done))
}
