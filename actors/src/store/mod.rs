//! store: the sled database, the versioned record envelope and durable
//! commits. It owns the db handle and the commit thread; it knows no room's
//! keys or records (each room keeps its own behind a small trait).
//!
//! **Invariant**: a continuation passed to [`Store::after_sync`] runs only
//! after every write made before the call is flushed and `fdatasync`ed.

mod commit;
pub mod record;

pub use record::{decode_record, encode_record};

use commit::Committer;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    committer: Committer,
}

impl Store {
    /// Opens (or creates) the database in `dir`. `cache_bytes` bounds sled's
    /// page cache, which is most of the daemon's resident memory.
    pub fn open(dir: &Path, cache_bytes: u64) -> Result<Store, StoreError> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(|source| StoreError::Sled {
                path: dir.to_path_buf(),
                source,
            })?;
        let committer = Committer::start(db.clone(), dir.join("db"))?;
        Ok(Store {
            inner: Arc::new(Inner {
                db,
                dir: dir.to_path_buf(),
                committer,
            }),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

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

    /// Records that a write happened; the next sync covers it.
    pub fn mark_dirty(&self) {
        self.inner.committer.mark_dirty();
    }

    /// Runs `then` once everything written so far is durable. Concurrent
    /// callers share one flush + fdatasync (group commit). Returns at once.
    pub fn after_sync(&self, then: AfterSync) {
        self.inner.committer.after_sync(then);
    }

    /// Flushes and syncs on the calling thread (start-up and shutdown).
    pub fn sync_blocking(&self) -> Result<(), StoreError> {
        commit::sync(&self.inner.db, &self.inner.dir.join("db"))
    }

    pub fn size_on_disk(&self) -> u64 {
        self.inner.db.size_on_disk().unwrap_or(0)
    }
}
