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
        // Opened once: opening and closing it per commit would add two
        // syscalls and a path lookup to every acknowledgement.
        let handle = std::fs::File::open(&file).map_err(|source| StoreError::Sync {
            path: file.clone(),
            source,
        })?;
        std::thread::Builder::new()
            .name("flyto-commit".into())
            .spawn(move || run(db, file, handle, rx, counters))
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

fn run(
    db: sled::Db,
    file: PathBuf,
    handle: std::fs::File,
    rx: mpsc::Receiver<AfterSync>,
    counters: Arc<Counters>,
) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        let target = counters.written.load(Ordering::SeqCst);
        let result = if counters.synced.load(Ordering::SeqCst) >= target {
            Ok(())
        } else {
            sync_handle(&db, &file, &handle).map_err(Arc::new)
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
    let handle = std::fs::File::open(file).map_err(|source| StoreError::Sync {
        path: file.to_path_buf(),
        source,
    })?;
    sync_handle(db, file, &handle)
}

/// [`sync`] with the db file already open (`path` is for messages).
fn sync_handle(db: &sled::Db, path: &Path, handle: &std::fs::File) -> Result<(), StoreError> {
    db.flush().map_err(|source| StoreError::Sled {
        path: path.to_path_buf(),
        source,
    })?;
    handle.sync_data().map_err(|source| StoreError::Sync {
        path: path.to_path_buf(),
        source,
    })
}
