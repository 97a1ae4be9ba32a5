//! store: the sled database, its write-ahead log, the versioned record
//! envelope and durable commits. It owns the db handle and the commit
//! thread; it knows no room's keys or records (each room keeps its own
//! behind a small trait).
//!
//! Rooms write with [`Store::apply`]: one [`Batch`] on one tree, applied to
//! sled atomically and appended to the WAL (`wal.rs`). An acknowledgement
//! costs one `fdatasync` of the WAL, shared by every writer waiting at that
//! moment (group commit, `commit.rs`); sled itself is flushed and synced in
//! the background about once a second (a checkpoint), and the WAL is
//! replayed into sled at open.
//!
//! **Invariant**: a continuation passed to [`Store::after_sync`] runs only
//! after every write made before the call is durable: in the WAL (written
//! and `fdatasync`ed), or in sled after a checkpoint (flushed and synced).
//!
//! Keys starting with a zero byte are the store's own ([`wal::LSN_KEY`]).

mod commit;
pub mod page;
pub mod postgres;
pub mod record;
mod scan;
#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod testutil;
pub mod wal;

pub use commit::{crowded, lone_writer};
pub use record::{decode_body, decode_record, encode_record};
pub use scan::Scan;
pub use wal::{Batch, Recovery, Tail};

use commit::{Checkpointer, Committer, Log};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The smallest key above every key starting with `prefix` (`None`: no
/// such key, the prefix is all 0xff).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error in {path}: {source}")]
    Sled { path: PathBuf, source: sled::Error },
    #[error("cannot sync {path} to disk: {source}")]
    Sync {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "record {key} was written by a newer flytod (format {found}, this binary reads up to {supported}): upgrade flytod or restore an older state directory"
    )]
    NewerFormat {
        key: String,
        found: u32,
        supported: u32,
    },
    #[error("record {key} is corrupt: {detail}")]
    Corrupt { key: String, detail: String },
    #[error("the commit thread has stopped; restart flytod")]
    CommitterGone,
    #[error("a batch of {bytes} bytes is too large to write")]
    TooLarge { bytes: usize },
    #[error("the store stopped taking writes after an earlier error ({detail}); restart flytod")]
    Failed { detail: String },
    #[error("{0}")]
    Shared(Arc<StoreError>),
    /// The shared database refused or could not take the write.
    #[error("{0}")]
    Database(String),
    /// Another node holds what this write needed (a name, a session).
    #[error("{0}")]
    Conflict(String),
}

/// A store's error as the client sees it: the shared database away is
/// `Unavailable` (worth a retry), a write another node's claim or name
/// stood in the way of is a `Conflict`, anything else `Internal`.
impl From<StoreError> for crate::kernel::Reject {
    fn from(e: StoreError) -> crate::kernel::Reject {
        use crate::kernel::Reject;
        use flyto_protocol::ErrorCode;
        match e {
            StoreError::Database(m) => Reject::new(
                ErrorCode::Unavailable,
                format!("{m}; retry once PostgreSQL is reachable again"),
            ),
            StoreError::Conflict(m) => Reject::new(ErrorCode::Conflict, m),
            e => Reject::internal(e),
        }
    }
}

/// A continuation run after a durable sync, with its outcome.
pub type AfterSync = Box<dyn FnOnce(Result<(), Arc<StoreError>>) + Send>;

#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    db: sled::Db,
    dir: PathBuf,
    log: Arc<Log>,
    recovery: Recovery,
    // Last: dropping it joins the commit thread.
    committer: Committer,
}

impl Store {
    /// Opens (or creates) the database in `dir` and replays its WAL.
    /// `cache_bytes` bounds sled's page cache, which is most of the
    /// daemon's resident memory.
    pub fn open(dir: &Path, cache_bytes: u64) -> Result<Store, StoreError> {
        Store::open_with(dir, cache_bytes, commit::CHECKPOINT_EVERY)
    }

    /// [`Store::open`] with another checkpoint period (tests use a long one
    /// to see what only the WAL holds).
    pub(crate) fn open_with(
        dir: &Path,
        cache_bytes: u64,
        checkpoint_every: std::time::Duration,
    ) -> Result<Store, StoreError> {
        let sled_err = |source| StoreError::Sled {
            path: dir.to_path_buf(),
            source,
        };
        let sync_err = |path: PathBuf| move |source| StoreError::Sync { path, source };
        let config = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .mode(sled::Mode::HighThroughput)
            // The commit thread checkpoints; sled's own flusher would only
            // add disk syncs competing with the WAL's.
            .flush_every_ms(None);
        // A store closed in this process a moment ago may still hold sled's
        // file lock in one of sled's IO threads finishing a write: wait for
        // it (briefly). Another process's lock is flytod.lock's business.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let db = loop {
            match config.open() {
                Ok(db) => break db,
                Err(sled::Error::Io(e))
                    if e.to_string().contains("could not acquire lock")
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => return Err(sled_err(e)),
            }
        };
        let wal_path = dir.join(wal::WAL_FILE);
        let bytes = wal::read(&wal_path).map_err(sync_err(wal_path.clone()))?;
        let recovery = wal::replay(&db, &bytes).map_err(sled_err)?;
        match &recovery.tail {
            wal::Tail::Torn { offset, reason } => tracing::warn!(
                replayed = recovery.replayed,
                already_in_db = recovery.skipped,
                "WAL {}: replayed {} records; dropped a torn tail at byte {offset} ({reason}): it was never acknowledged",
                wal_path.display(),
                recovery.replayed
            ),
            _ if recovery.replayed > 0 => tracing::info!(
                already_in_db = recovery.skipped,
                "WAL {}: replayed {} records, no torn tail",
                wal_path.display(),
                recovery.replayed
            ),
            _ => tracing::debug!(
                already_in_db = recovery.skipped,
                "WAL {}: nothing to replay",
                wal_path.display()
            ),
        }
        let mut checkpointer = Checkpointer::new(db.clone(), dir)?;
        // Replayed records (and sled's own files) are durable before the
        // WAL that held them can be reused.
        checkpointer.run()?;
        let conf = dir.join("conf");
        std::fs::File::open(&conf)
            .and_then(|f| f.sync_all())
            .map_err(sync_err(conf))?;
        // sled's files, and the db directory itself, are there after a
        // power cut (sled syncs neither directory).
        wal::sync_dir(dir).map_err(sync_err(dir.to_path_buf()))?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            wal::sync_dir(parent).map_err(sync_err(parent.to_path_buf()))?;
        }
        let wal_file = wal::open_for_writing(&wal_path, bytes.len() as u64)
            .map_err(sync_err(wal_path.clone()))?;
        drop(bytes);
        // New lsns start above anything the file can hold, so no leftover
        // record can ever continue the new chain (see wal.rs).
        let known = recovery
            .last_lsn
            .unwrap_or(0)
            .max(wal::max_tree_lsn(&db).map_err(sled_err)?);
        let log = Arc::new(Log::new(dir, known + wal::WAL_SIZE + 1, wal_file));
        let committer = Committer::start(log.clone(), checkpointer, checkpoint_every)?;
        Ok(Store {
            inner: Arc::new(Inner {
                db,
                dir: dir.to_path_buf(),
                log,
                recovery,
                committer,
            }),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// What the WAL replay at open found.
    pub fn recovery(&self) -> &Recovery {
        &self.inner.recovery
    }

    /// A tree, for reads. Write with [`Store::apply`].
    pub fn tree(&self, name: &str) -> Result<sled::Tree, StoreError> {
        self.inner
            .db
            .open_tree(name)
            .map_err(|source| self.sled_err(source))
    }

    pub fn sled_err(&self, source: sled::Error) -> StoreError {
        StoreError::Sled {
            path: self.inner.dir.clone(),
            source,
        }
    }

    /// Writes `batch` to `tree` atomically (all of it survives a crash or
    /// none). [`Store::get`] sees it at once; reading the tree directly
    /// (scans) sees it once it is durable; the next [`Store::after_sync`]
    /// continuation runs once it is durable.
    pub fn apply(&self, tree: &sled::Tree, batch: &Batch) -> Result<(), StoreError> {
        self.inner.log.append(tree, batch)
    }

    /// Reads `key` of `tree`, including writes [`Store::apply`] made that
    /// are not durable yet.
    pub fn get(&self, tree: &sled::Tree, key: &[u8]) -> Result<Option<sled::IVec>, StoreError> {
        self.inner
            .log
            .get(tree, key)
            .map_err(|source| self.sled_err(source))
    }

    /// Entries of `tree` whose key starts with `prefix`, in key order (or
    /// reversed), including writes not yet in sled.
    pub fn scan_prefix(&self, tree: &sled::Tree, prefix: &[u8], reverse: bool) -> Scan {
        let end = prefix_end(prefix);
        let end_bound = match &end {
            Some(e) => Bound::Excluded(e.as_slice()),
            None => Bound::Unbounded,
        };
        let overlay = self
            .inner
            .log
            .overlay_range(tree, (Bound::Included(prefix), end_bound));
        Scan::new(
            tree.scan_prefix(prefix),
            overlay,
            reverse,
            self.inner.dir.clone(),
        )
    }

    /// Entries of `tree` with `start <= key < end`, in key order (or
    /// reversed), including writes not yet in sled.
    pub fn range(&self, tree: &sled::Tree, start: &[u8], end: &[u8], reverse: bool) -> Scan {
        let overlay = self
            .inner
            .log
            .overlay_range(tree, (Bound::Included(start), Bound::Excluded(end)));
        Scan::new(
            tree.range(start..end),
            overlay,
            reverse,
            self.inner.dir.clone(),
        )
    }

    /// For a write made on a sled tree directly instead of through
    /// [`Store::apply`]: the next sync then flushes and syncs sled itself,
    /// which costs several disk round trips instead of one. Prefer `apply`.
    pub fn mark_dirty(&self) {
        self.inner.log.mark_legacy();
    }

    /// Runs `then` once everything written so far is durable. Concurrent
    /// callers share one WAL `fdatasync` (group commit). Returns at once.
    pub fn after_sync(&self, then: AfterSync) {
        self.inner.committer.after_sync(then);
    }

    /// Like [`Store::after_sync`], but a lone writer (the commit thread
    /// idle, the disk fast) commits on the calling thread and runs `then`
    /// before this returns, which spares the acknowledgement a thread
    /// wake-up. Call it only where blocking for one `fdatasync` is fine
    /// and no lock is held that a continuation may take.
    pub fn after_sync_leading(&self, then: AfterSync) {
        self.inner.committer.after_sync_leading(then);
    }

    /// Waits until everything written so far is durable (the async form
    /// of [`Store::after_sync`]).
    pub async fn synced(&self) -> Result<(), String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.after_sync(Box::new(move |r| {
            let _ = tx.send(r.map_err(|e| e.to_string()));
        }));
        rx.await
            .map_err(|_| "the store stopped before the write was durable".to_string())?
    }

    /// Makes every write so far durable in sled itself (flushed and
    /// synced), waiting for it (start-up and shutdown). Not from an
    /// `after_sync` continuation.
    pub fn sync_blocking(&self) -> Result<(), StoreError> {
        self.inner
            .committer
            .checkpoint()
            .map_err(StoreError::Shared)
    }

    pub fn size_on_disk(&self) -> u64 {
        self.inner.db.size_on_disk().unwrap_or(0)
    }

    /// `fdatasync`/`fsync` calls the commit thread has made since open (WAL
    /// groups and checkpoints): with acknowledgements counted alongside,
    /// how well concurrent writers share syncs.
    pub fn disk_syncs(&self) -> u64 {
        self.inner.log.syncs()
    }
}
