//! Helpers for tests that simulate a crash by copying a live store's files.

use super::Store;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

/// Opens `dir` with checkpoints an hour apart: after open, sled's files
/// change only on its own (IO buffers filling up), so what a test writes
/// afterwards is durable only through the WAL.
pub(crate) fn open_no_checkpoint(dir: &Path) -> Store {
    Store::open_with(dir, 8 << 20, Duration::from_secs(3600)).expect("open store")
}

/// Keeps the commit thread from making anything durable (or running
/// `after_sync` continuations) until the guard is dropped.
pub(crate) fn hold_commits(store: &Store) -> std::sync::MutexGuard<'_, ()> {
    super::commit::lock(&store.inner.log.hold)
}

/// Makes the commit thread gather records for up to `limit` after a group
/// of several (instead of `GATHER_MAX`).
pub(crate) fn gather_for(store: &Store, limit: Duration) {
    store
        .inner
        .log
        .gather_ns
        .store(limit.as_nanos() as u64, std::sync::atomic::Ordering::SeqCst);
}

/// Waits (up to 10 s) until the commit thread sleeps with nothing to do,
/// when a writer may lead its own sync.
pub(crate) fn wait_committer_idle(store: &Store) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !super::commit::idle(&store.inner.log) {
        assert!(
            std::time::Instant::now() < deadline,
            "the commit thread never went idle"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits (up to 10 s) until the commit thread sleeps, waiting for
/// writers or for time to pass.
pub(crate) fn wait_committer_asleep(store: &Store) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !store
        .inner
        .log
        .asleep
        .load(std::sync::atomic::Ordering::SeqCst)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the commit thread never went to sleep"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Makes the next WAL write of a leading writer fail.
pub(crate) fn fail_next_lead_write(store: &Store) {
    store
        .inner
        .log
        .fail_lead_write
        .store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Waits (up to 10 s) until sled has every write made so far (the overlay
/// is empty).
pub(crate) fn wait_applied(store: &Store) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while super::commit::overlay_len(&store.inner.log) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "writes never reached sled"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until every write so far is durable; panics if the sync fails.
pub(crate) fn wait_durable(store: &Store) {
    let (tx, rx) = mpsc::channel();
    store.after_sync(Box::new(move |r| {
        let _ = tx.send(r.map_err(|e| e.to_string()));
    }));
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the sync answers")
        .expect("the sync succeeds");
}

/// Copies the files of a (possibly open) db directory: what a crash of the
/// process at this instant leaves behind, as the kernel holds it.
pub(crate) fn crash_copy(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).expect("create copy dir");
    for entry in std::fs::read_dir(src).expect("read db dir") {
        let entry = entry.expect("dir entry");
        let to = dst.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            crash_copy(&entry.path(), &to);
        } else {
            std::fs::copy(entry.path(), &to).expect("copy file");
        }
    }
}

/// Offsets of the records in a WAL file's chain, and where it ends.
pub(crate) fn record_offsets(wal: &[u8]) -> (Vec<usize>, usize) {
    let mut offsets = Vec::new();
    let mut off = 0;
    while let super::wal::Frame::Record(_, next) = super::wal::frame_at(wal, off) {
        offsets.push(off);
        off = next;
    }
    (offsets, off)
}
