//! Group commit: one thread flushes sled and fdatasyncs the db file for every
//! batch of waiters, then runs their continuations in order.

use super::{AfterSync, StoreError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};

pub(super) struct Committer {
    tx: mpsc::Sender<AfterSync>,
    state: Arc<Counters>,
}

struct Counters {
    written: AtomicU64,
    synced: AtomicU64,
}

impl Committer {
    pub(super) fn start(db: sled::Db, file: PathBuf) -> Result<Committer, StoreError> {
        let (tx, rx) = mpsc::channel::<AfterSync>();
        let state = Arc::new(Counters {
            written: AtomicU64::new(0),
            synced: AtomicU64::new(0),
        });
        let counters = state.clone();
        std::thread::Builder::new()
            .name("flyto-commit".into())
            .spawn(move || run(db, file, rx, counters))
            .map_err(|source| StoreError::Sync {
                path: PathBuf::from("flyto-commit thread"),
                source,
            })?;
        Ok(Committer { tx, state })
    }

    pub(super) fn mark_dirty(&self) {
        self.state.written.fetch_add(1, Ordering::SeqCst);
    }

    pub(super) fn after_sync(&self, then: AfterSync) {
        // The commit thread runs every continuation in order and skips the
        // sync when nothing was written since the last one.
        if let Err(mpsc::SendError(then)) = self.tx.send(then) {
            then(Err(Arc::new(StoreError::CommitterGone)));
        }
    }
}

fn run(db: sled::Db, file: PathBuf, rx: mpsc::Receiver<AfterSync>, counters: Arc<Counters>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        let target = counters.written.load(Ordering::SeqCst);
        let result = if counters.synced.load(Ordering::SeqCst) >= target {
            Ok(())
        } else {
            sync(&db, &file).map_err(Arc::new)
        };
        if result.is_ok() {
            counters.synced.fetch_max(target, Ordering::SeqCst);
        } else if let Err(e) = &result {
            tracing::error!("durable commit failed: {e}");
        }
        for then in batch {
            then(result.clone());
        }
    }
}

/// sled's own flush survives a killed process but not a power cut; the
/// fdatasync of the db file makes it durable.
pub(super) fn sync(db: &sled::Db, file: &Path) -> Result<(), StoreError> {
    db.flush().map_err(|source| StoreError::Sled {
        path: file.to_path_buf(),
        source,
    })?;
    std::fs::File::open(file)
        .and_then(|f| f.sync_data())
        .map_err(|source| StoreError::Sync {
            path: file.to_path_buf(),
            source,
        })
}
