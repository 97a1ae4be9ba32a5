//! Group commit, applying to sled, and checkpoints.
//!
//! Writers ([`Log::append`]) frame their batch into an in-memory buffer and
//! put its values in an overlay that reads consult first; they do not touch
//! sled. A continuation ([`Log::after_sync`]) is queued in the same locked
//! state, with the lsn of the last record appended before it. One thread,
//! `flyto-commit`, takes the whole buffer, writes it to the WAL with one
//! `pwrite`, makes it durable with one `fdatasync`, runs every queued
//! continuation whose records that covered (also those queued while it
//! synced, if they wait for nothing newer: a reply does not wait for a
//! second sync or for sled), and only then applies the records to sled
//! (plain inserts and removes, each tree's lsn key last) and drops them
//! from the overlay. It applies a few groups at once ([`APPLY_BATCH`]),
//! or what there is when it has nothing else to do.
//!
//! So sled never holds a write the WAL does not already hold durably (the
//! write-ahead rule): whatever part of a group sled has after a crash,
//! replaying the WAL completes it. sled's batches are not needed for
//! atomicity, which matters: each `apply_batch` seals and writes sled's IO
//! buffer twice and wakes its whole thread pool.
//!
//! About once a second (or when half the WAL is used) the same thread
//! checkpoints: sled `flush`, `fdatasync` of sled's db file, sync of new
//! blob files and of the blob directory. Every record written to the WAL
//! so far has been applied to sled by then (the same thread applies them),
//! so after the checkpoint sled alone holds them and the WAL starts over at
//! offset 0 (see `wal.rs`).
//!
//! Writes made on a sled tree directly (not through the log) call
//! [`Log::mark_legacy`]; the next group then checkpoints instead of only
//! syncing the WAL, which is what every sync cost before the WAL existed.
//!
//! Within what it applies at once, a key written several times is written
//! to sled once; the entries written to one page (see `page.rs`) are
//! patched into it and the page written once. Consecutive groups write
//! the same few keys (the page being filled, the counts, the next id), so
//! applying a few groups together saves sled writes. Not many more: the
//! commit thread holds the WAL while it applies, and a long apply holds
//! the next commits back (a 256 KiB batch made acknowledgements slower).
//!
//! A lone writer may commit its own group instead ([`Log::after_sync_leading`]):
//! when the commit thread sleeps with nothing to do and the disk is fast,
//! the writer takes the buffer, writes and syncs it and runs the ready
//! continuations itself, sparing the acknowledgement the wake-up of the
//! commit thread (on a VM, a wake-up of an idle CPU costs tens of
//! microseconds). Whoever commits holds the [`Wal`] lock, which orders the
//! groups in the WAL, their continuations and their applies; a led group
//! is left in `Wal::committed` for the commit thread to apply to sled
//! (within [`APPLY_DELAY`], many groups at once) before anything newer.
//!
//! The thread never spins: it sleeps on a condition variable, and writers
//! wake it only when what it waits for is there (see [`Wake`]). After a
//! group of several records (concurrent writers), it waits up to
//! [`GATHER_MAX`] for as many records again before the next sync, so that
//! a sync covers many acknowledgements (see [`Writer::gather`]), also
//! while nobody waits yet (the last group's writers are being answered);
//! a lone writer's group (one record) is synced at once.
//!
//! A failed WAL write falls back to applying the group to sled and
//! checkpointing. If that fails too, or applying to sled fails, the store
//! stops taking writes (each later write and sync is an error): sled may
//! then lack acknowledged writes that only a restart (WAL replay) restores.

use super::wal::{self, Batch, Frame, LSN_KEY, TERMINATOR, WAL_SIZE, Writes};
use super::{AfterSync, StoreError};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fs::File;
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

/// How often the commit thread checkpoints while there are new writes.
pub(super) const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// The longest the commit thread holds a sync back to gather more records
/// after a group of several (see [`Writer::gather`]).
const GATHER_MAX: Duration = Duration::from_micros(500);
/// How long records committed by a leading writer may wait to be applied
/// to sled (the overlay serves them meanwhile).
const APPLY_DELAY: Duration = Duration::from_millis(20);
/// Committed records the commit thread lets wait (bytes) before it
/// applies them to sled: consecutive groups write the same keys (the page
/// being filled, the counts, the next id, each tree's lsn key), and
/// applying a few groups at once writes each of them once.
const APPLY_BATCH: usize = 32 << 10;
/// Committed but unapplied bytes past which a leading writer wakes the
/// commit thread to apply them at once.
const APPLY_BACKLOG_MAX: usize = 256 << 10;
/// A writer leads a sync only while a WAL write + `fdatasync` takes less
/// than this (smoothed): on a slow disk, blocking a runtime thread for the
/// sync costs more than waking the commit thread.
const LEAD_MAX_SYNC: Duration = Duration::from_millis(2);

thread_local! {
    /// Records in the group whose continuations the commit thread is
    /// running (0 elsewhere); see [`lone_writer`].
    static GROUP_RECORDS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Whether the continuation calling this runs after the sync of a lone
/// record (a single writer, nothing gathered). Replies may then take the
/// shortest way to their client; after a group of many, the runtime's own
/// batched writes are cheaper.
pub fn lone_writer() -> bool {
    GROUP_RECORDS.with(|n| n.get() == 1)
}

/// Whether the last group committed in this process had several records:
/// until one is alone again, [`lone_writer`] is unlikely, and a caller can
/// skip preparing for it. Only a hint (any store's last group).
pub fn crowded() -> bool {
    LAST_GROUP.load(Ordering::Relaxed) > 1
}

static LAST_GROUP: AtomicU64 = AtomicU64::new(0);

impl Log {
    fn set_last_group(&self, records: u64) {
        self.last_group.store(records, Ordering::Relaxed);
        LAST_GROUP.store(records, Ordering::Relaxed);
    }
}

/// Whether the commit thread sleeps with nothing to do (a writer may lead).
#[cfg(test)]
pub(super) fn idle(log: &Log) -> bool {
    lock(&log.pending).wake == Wake::Any
}

/// Writes not yet applied to sled.
#[cfg(test)]
pub(super) fn overlay_len(log: &Log) -> usize {
    log.overlay_len.load(Ordering::SeqCst)
}

/// A poisoned lock only means another thread panicked while holding it;
/// the data it guards stays consistent (a record is appended in full or
/// not at all).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes not yet applied to sled, by tree name then key: the lsn of the
/// record that wrote it and the value (`None`: removed).
type Overlay = HashMap<Vec<u8>, BTreeMap<Vec<u8>, (u64, Option<sled::IVec>)>>;

/// State shared by writers, readers and the commit thread.
pub(super) struct Log {
    dir: PathBuf,
    pending: Mutex<Pending>,
    /// Where the commit thread sleeps; see [`Wake`] for who notifies it.
    work: Condvar,
    overlay: Mutex<Overlay>,
    /// Entries in `overlay`; reads skip its lock when zero.
    overlay_len: AtomicUsize,
    /// Writes made on sled directly.
    legacy_written: AtomicU64,
    /// Held by whoever commits a group (see [`Wal`]); taken after
    /// `pending` only with `try_lock`.
    wal: Mutex<Wal>,
    /// Mirrors of `Wal::pos` and of the length of `Wal::committed`, for
    /// the commit thread's timers.
    wal_pos: AtomicU64,
    committed_len: AtomicUsize,
    /// Direct sled writes (`legacy_written`) covered by the last
    /// checkpoint.
    legacy_synced: AtomicU64,
    /// A WAL write + `fdatasync`, smoothed, in ns.
    sync_ns: AtomicU64,
    /// Records in the last group committed: a writer leads only after a
    /// lone one, so concurrent writers keep sharing the commit thread's
    /// gathered syncs.
    last_group: AtomicU64,
    /// `fdatasync` and `fsync` calls made so far (WAL groups and
    /// checkpoints), for `stats`.
    syncs: AtomicU64,
    failed: AtomicBool,
    failure: Mutex<Option<Arc<StoreError>>>,
    /// Held by a test to keep the commit thread from making anything
    /// durable (see `testutil::hold_commits`).
    #[cfg(test)]
    pub(super) hold: Mutex<()>,
    /// Replaces [`GATHER_MAX`] when set (ns): a test that counts syncs
    /// must not depend on how fast its writers are.
    #[cfg(test)]
    pub(super) gather_ns: AtomicU64,
    /// The commit thread sleeps in [`Writer::wait`].
    #[cfg(test)]
    pub(super) asleep: AtomicBool,
    /// Set by a test: the next WAL write a leading writer makes fails.
    #[cfg(test)]
    pub(super) fail_lead_write: AtomicBool,
}

struct Pending {
    /// Framed records not yet taken by the commit thread.
    buf: Vec<u8>,
    next_lsn: u64,
    /// Continuations, in the order they were queued (so in lsn order).
    waiters: VecDeque<Waiter>,
    /// `sync_blocking` callers: commit, checkpoint, then answer.
    checkpoints: Vec<mpsc::Sender<Result<(), Arc<StoreError>>>>,
    /// Every record below this lsn is durable.
    durable: u64,
    /// What the sleeping commit thread waits for.
    wake: Wake,
    /// The last `Store` is gone: commit what is queued, then stop.
    stop: bool,
}

/// The WAL's writing end, held by whoever commits a group: the commit
/// thread, or a writer leading a lone sync. Holding it across the write,
/// the continuations and the apply keeps all three in lsn order.
pub(super) struct Wal {
    file: File,
    /// Where the next group goes.
    pos: u64,
    /// Records a leading writer made durable that sled does not have yet;
    /// the commit thread applies them before anything newer and before a
    /// checkpoint.
    committed: Vec<u8>,
}

/// A continuation and what must be durable before it runs.
struct Waiter {
    /// Every record below this lsn.
    lsn: u64,
    /// Direct sled writes up to this count (a checkpoint).
    legacy: u64,
    then: AfterSync,
}

/// What a writer must notify the commit thread of. Writers notify at most
/// once per sleep (they reset it to `Busy`), so a stream of writes costs
/// the thread one wake-up, not one per write.
#[derive(Clone, Copy, PartialEq)]
enum Wake {
    /// Not sleeping (or already notified): it looks at `Pending` when done.
    Busy,
    /// Sleeping until anything is queued.
    Any,
    /// Gathering: sleeping until a continuation waits for the records
    /// below this lsn, or for nothing not yet durable (or a checkpoint is
    /// asked for, or the deadline passes).
    Lsn(u64),
}

impl Log {
    /// The longest a sync is held back to gather records.
    fn gather_max(&self) -> Duration {
        #[cfg(test)]
        match self.gather_ns.load(Ordering::SeqCst) {
            0 => {}
            ns => return Duration::from_nanos(ns),
        }
        GATHER_MAX
    }

    pub(super) fn new(dir: &Path, next_lsn: u64, wal: File) -> Log {
        Log {
            dir: dir.to_path_buf(),
            pending: Mutex::new(Pending {
                buf: Vec::new(),
                next_lsn,
                waiters: VecDeque::new(),
                checkpoints: Vec::new(),
                durable: next_lsn,
                wake: Wake::Busy,
                stop: false,
            }),
            work: Condvar::new(),
            overlay: Mutex::new(HashMap::new()),
            overlay_len: AtomicUsize::new(0),
            legacy_written: AtomicU64::new(0),
            wal: Mutex::new(Wal {
                file: wal,
                pos: 0,
                committed: Vec::new(),
            }),
            wal_pos: AtomicU64::new(0),
            committed_len: AtomicUsize::new(0),
            legacy_synced: AtomicU64::new(0),
            sync_ns: AtomicU64::new(0),
            last_group: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            #[cfg(test)]
            hold: Mutex::new(()),
            #[cfg(test)]
            gather_ns: AtomicU64::new(0),
            #[cfg(test)]
            asleep: AtomicBool::new(false),
            #[cfg(test)]
            fail_lead_write: AtomicBool::new(false),
        }
    }

    fn failure(&self) -> Option<Arc<StoreError>> {
        if !self.failed.load(Ordering::SeqCst) {
            return None;
        }
        lock(&self.failure).clone()
    }

    fn fail(&self, e: StoreError) -> Arc<StoreError> {
        tracing::error!(
            "{e}; flytod stops taking writes: restart it (the WAL replays every acknowledged write)"
        );
        let e = Arc::new(e);
        *lock(&self.failure) = Some(e.clone());
        self.failed.store(true, Ordering::SeqCst);
        e
    }

    /// Appends `batch` for `tree` to the log: readers see it at once
    /// through [`Log::get`]; sled gets it once it is durable.
    pub(super) fn append(&self, tree: &sled::Tree, batch: &Batch) -> Result<(), StoreError> {
        if let Some(e) = self.failure() {
            return Err(StoreError::Failed {
                detail: e.to_string(),
            });
        }
        let name = tree.name();
        let mut p = lock(&self.pending);
        let lsn = p.next_lsn;
        wal::encode(&mut p.buf, lsn, &name, batch)?;
        p.next_lsn = lsn + 1;
        let mut overlay = lock(&self.overlay);
        let writes = match overlay.get_mut(name.as_ref()) {
            Some(w) => w,
            None => overlay.entry(name.to_vec()).or_default(),
        };
        let before = writes.len();
        for (k, v) in batch.values() {
            // A key written again (the page being filled, the counts)
            // keeps its allocation.
            match writes.get_mut(k) {
                Some(slot) => *slot = (lsn, v),
                None => {
                    writes.insert(k.to_vec(), (lsn, v));
                }
            }
        }
        self.overlay_len
            .fetch_add(writes.len() - before, Ordering::SeqCst);
        Ok(())
    }

    /// Reads `key` of `tree`, including writes not yet in sled.
    pub(super) fn get(
        &self,
        tree: &sled::Tree,
        key: &[u8],
    ) -> Result<Option<sled::IVec>, sled::Error> {
        if self.overlay_len.load(Ordering::SeqCst) > 0 {
            let overlay = lock(&self.overlay);
            if let Some((_, v)) = overlay.get(tree.name().as_ref()).and_then(|w| w.get(key)) {
                return Ok(v.clone());
            }
        }
        tree.get(key)
    }

    /// The overlay's writes to keys of `tree` within the bounds, in key
    /// order (`None`: removed).
    pub(super) fn overlay_range(
        &self,
        tree: &sled::Tree,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
    ) -> Vec<(sled::IVec, Option<sled::IVec>)> {
        if self.overlay_len.load(Ordering::SeqCst) == 0 {
            return Vec::new();
        }
        let overlay = lock(&self.overlay);
        let Some(writes) = overlay.get(tree.name().as_ref()) else {
            return Vec::new();
        };
        writes
            .range::<[u8], _>(bounds)
            .map(|(k, (_, v))| (sled::IVec::from(k.as_slice()), v.clone()))
            .collect()
    }

    pub(super) fn mark_legacy(&self) {
        self.legacy_written.fetch_add(1, Ordering::SeqCst);
    }

    /// `fdatasync`/`fsync` calls made by the commit thread so far.
    pub(super) fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Queues `then` to run once every write appended so far is durable.
    pub(super) fn after_sync(&self, then: AfterSync) {
        // Loaded before the lock: a direct sled write made after it is not
        // this continuation's to wait for.
        let legacy = self.legacy_written.load(Ordering::SeqCst);
        let mut p = lock(&self.pending);
        if p.stop {
            drop(p);
            return then(Err(Arc::new(StoreError::CommitterGone)));
        }
        let lsn = p.next_lsn;
        p.waiters.push_back(Waiter { lsn, legacy, then });
        let wake = match p.wake {
            Wake::Busy => false,
            Wake::Any => true,
            Wake::Lsn(want) => lsn >= want || lsn <= p.durable,
        };
        if wake {
            p.wake = Wake::Busy;
            drop(p);
            self.work.notify_one();
        }
    }

    /// Like [`Log::after_sync`], but when the commit thread sleeps with
    /// nothing to do (a lone writer), commits on the calling thread and
    /// runs the ready continuations (`then` among them) before returning.
    /// The caller must hold nothing a continuation may need, and may block
    /// for one WAL write and `fdatasync` (only while the disk is fast; see
    /// [`LEAD_MAX_SYNC`]).
    pub(super) fn after_sync_leading(&self, then: AfterSync) {
        let legacy = self.legacy_written.load(Ordering::SeqCst);
        let mut p = lock(&self.pending);
        let may_lead = p.wake == Wake::Any
            && !p.stop
            && p.checkpoints.is_empty()
            && legacy <= self.legacy_synced.load(Ordering::SeqCst)
            && self.sync_ns.load(Ordering::Relaxed) < LEAD_MAX_SYNC.as_nanos() as u64
            && self.last_group.load(Ordering::Relaxed) <= 1
            && !self.failed.load(Ordering::SeqCst);
        #[cfg(test)]
        let held = self.hold.try_lock();
        #[cfg(test)]
        let may_lead = may_lead && held.is_ok();
        let wal = match may_lead {
            true => self.wal.try_lock().ok(),
            false => None,
        };
        // Room for the group, and no checkpoint due for the WAL's size.
        let fits = |w: &Wal| {
            w.pos < WAL_SIZE / 2 && w.pos + (p.buf.len() + TERMINATOR.len()) as u64 <= WAL_SIZE
        };
        let Some(mut wal) = wal.filter(|w| fits(w)) else {
            drop(p);
            return self.after_sync(then);
        };
        let lsn = p.next_lsn;
        p.waiters.push_back(Waiter { lsn, legacy, then });
        let mut group = std::mem::take(&mut p.buf);
        let (from, upto) = (p.durable, p.next_lsn);
        // The commit thread stays asleep (`Wake::Any`): writers that come
        // meanwhile wake it, and it waits for this lock.
        drop(p);
        #[cfg(test)]
        let injected = self
            .fail_lead_write
            .swap(false, Ordering::SeqCst)
            .then(|| std::io::Error::other("injected by a test"));
        #[cfg(not(test))]
        let injected = None;
        let written = match injected {
            Some(e) => Err(e),
            // Nothing new: with the WAL lock held, every earlier record is
            // already durable (a failed commit fails the store).
            None if group.is_empty() => Ok(()),
            None => self.write_group(&mut wal, &mut group),
        };
        if let Err(e) = written {
            tracing::warn!(
                "cannot write the WAL {}: {e}; the commit thread retries",
                self.dir.join(wal::WAL_FILE).display()
            );
            // Back in front of what came meanwhile, for the commit thread
            // (which falls back to a checkpoint if the WAL stays unwritable).
            let mut p = lock(&self.pending);
            group.extend_from_slice(&p.buf);
            p.buf = group;
            return self.notify_busy(p);
        }
        let ready: Vec<Waiter> = {
            let mut p = lock(&self.pending);
            p.durable = p.durable.max(upto);
            let synced = self.legacy_synced.load(Ordering::SeqCst);
            let waits = |w: &Waiter| w.lsn > upto || w.legacy > synced;
            let n = p.waiters.iter().position(waits).unwrap_or(p.waiters.len());
            p.waiters.drain(..n).collect()
        };
        if upto > from {
            self.set_last_group(upto - from);
        }
        GROUP_RECORDS.with(|n| n.set(upto - from));
        for w in ready {
            run_continuation(w.then, Ok(()));
        }
        GROUP_RECORDS.with(|n| n.set(0));
        if group.is_empty() {
            return;
        }
        let first = wal.committed.is_empty();
        wal.committed.extend_from_slice(&group);
        self.committed_len
            .store(wal.committed.len(), Ordering::SeqCst);
        let full = wal.committed.len() >= APPLY_BACKLOG_MAX || wal.pos >= WAL_SIZE / 2;
        drop(wal);
        // The sleeping commit thread learns of the backlog once, then
        // applies it on its own timer (APPLY_DELAY), or at once when full.
        if first || full {
            self.notify_busy(lock(&self.pending));
        }
    }

    /// Writes `records` (framed) at the end of the WAL and syncs it.
    /// `records` is unchanged on return.
    fn write_group(&self, wal: &mut Wal, records: &mut Vec<u8>) -> std::io::Result<()> {
        let len = records.len();
        records.extend_from_slice(&TERMINATOR);
        let started = Instant::now();
        let written = wal.file.write_all_at(records, wal.pos).and_then(|()| {
            self.syncs.fetch_add(1, Ordering::Relaxed);
            wal.file.sync_data()
        });
        records.truncate(len);
        written?;
        let took = started.elapsed().as_nanos() as u64;
        let smoothed = self.sync_ns.load(Ordering::Relaxed);
        self.sync_ns
            .store((smoothed * 7 + took) / 8, Ordering::Relaxed);
        wal.pos += len as u64;
        self.wal_pos.store(wal.pos, Ordering::SeqCst);
        Ok(())
    }

    /// Asks for a commit and a checkpoint; the answer comes on the channel.
    fn ask_checkpoint(&self, tx: mpsc::Sender<Result<(), Arc<StoreError>>>) {
        let mut p = lock(&self.pending);
        if p.stop {
            let _ = tx.send(Err(Arc::new(StoreError::CommitterGone)));
            return;
        }
        p.checkpoints.push(tx);
        self.notify_busy(p);
    }

    fn stop(&self) {
        let mut p = lock(&self.pending);
        p.stop = true;
        self.notify_busy(p);
    }

    /// Wakes the commit thread whatever it waits for.
    fn notify_busy(&self, mut p: MutexGuard<'_, Pending>) {
        if p.wake != Wake::Busy {
            p.wake = Wake::Busy;
            drop(p);
            self.work.notify_one();
        }
    }
}

/// Flushes sled and syncs its files.
pub(super) struct Checkpointer {
    db: sled::Db,
    dir: PathBuf,
    db_file: File,
    /// Blob files already synced (sled names them by number).
    blobs_synced: HashSet<u64>,
}

impl Checkpointer {
    pub(super) fn new(db: sled::Db, dir: &Path) -> Result<Checkpointer, StoreError> {
        let db_path = dir.join("db");
        // Opened once: opening it per checkpoint would add syscalls and a
        // path lookup each time.
        let db_file = File::open(&db_path).map_err(|source| StoreError::Sync {
            path: db_path,
            source,
        })?;
        Ok(Checkpointer {
            db,
            dir: dir.to_path_buf(),
            db_file,
            blobs_synced: HashSet::new(),
        })
    }

    /// Makes everything applied to sled so far durable; returns how many
    /// `fdatasync`/`fsync` calls that took.
    pub(super) fn run(&mut self) -> Result<u64, StoreError> {
        let sync_err = |path: PathBuf| move |source| StoreError::Sync { path, source };
        self.db.flush().map_err(|source| StoreError::Sled {
            path: self.dir.clone(),
            source,
        })?;
        // sled's flush uses sync_file_range: it survives a killed process,
        // not a power cut (no metadata, no disk cache flush).
        self.db_file
            .sync_data()
            .map_err(sync_err(self.dir.join("db")))?;
        let blobs = self.dir.join("blobs");
        let synced = self.sync_blobs(&blobs).map_err(sync_err(blobs))?;
        Ok(1 + synced)
    }

    /// sled writes large values to `blobs/<n>` without syncing them;
    /// returns how many files (and directories) this synced.
    fn sync_blobs(&mut self, dir: &Path) -> std::io::Result<u64> {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let mut present = HashSet::new();
        let mut synced = 0;
        for entry in entries {
            let entry = entry?;
            let Some(id) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            present.insert(id);
            if self.blobs_synced.contains(&id) {
                continue;
            }
            match File::open(entry.path()) {
                Ok(f) => f.sync_all()?,
                // Removed by sled's garbage collection meanwhile.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
            synced += 1;
        }
        if synced > 0 {
            wal::sync_dir(dir)?;
            synced += 1;
        }
        self.blobs_synced = present;
        Ok(synced)
    }
}

pub(super) struct Committer {
    log: Arc<Log>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Committer {
    pub(super) fn start(
        log: Arc<Log>,
        checkpointer: Checkpointer,
        checkpoint_every: Duration,
    ) -> Result<Committer, StoreError> {
        let writer = Writer {
            db: checkpointer.db.clone(),
            log: log.clone(),
            spare: Vec::new(),
            trees: HashMap::new(),
            checkpointer,
            dirty: false,
            last_checkpoint: Instant::now(),
            checkpoint_every,
            gather: None,
        };
        let thread = std::thread::Builder::new()
            .name("flyto-commit".into())
            .spawn(move || writer.run())
            .map_err(|source| StoreError::Sync {
                path: PathBuf::from("flyto-commit thread"),
                source,
            })?;
        Ok(Committer {
            log,
            thread: Some(thread),
        })
    }

    pub(super) fn after_sync(&self, then: AfterSync) {
        self.log.after_sync(then);
    }

    pub(super) fn after_sync_leading(&self, then: AfterSync) {
        self.log.after_sync_leading(then);
    }

    /// Commits and checkpoints, waiting for it. Must not be called from a
    /// continuation (it runs on the commit thread).
    pub(super) fn checkpoint(&self) -> Result<(), Arc<StoreError>> {
        let (tx, rx) = mpsc::channel();
        self.log.ask_checkpoint(tx);
        rx.recv()
            .unwrap_or_else(|_| Err(Arc::new(StoreError::CommitterGone)))
    }
}

impl Drop for Committer {
    /// Stops the thread (once it has committed what is queued) and waits
    /// for it, so that sled is closed (and its file lock released) once the
    /// last `Store` is gone.
    fn drop(&mut self) {
        self.log.stop();
        if let Some(t) = self.thread.take()
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}

/// Runs one continuation. A panicking continuation must not take the
/// commit thread (and every later write) down with it.
fn run_continuation(then: AfterSync, result: Result<(), Arc<StoreError>>) {
    let run = std::panic::AssertUnwindSafe(move || then(result));
    if std::panic::catch_unwind(run).is_err() {
        tracing::error!("an after-sync continuation panicked");
    }
}

/// After a group of several records: sync the next one once it has as
/// many, or at the deadline.
struct Gather {
    /// Wake once a continuation waits for the records below this lsn.
    lsn: u64,
    until: Instant,
}

/// What the commit thread took from [`Pending`] for one group.
struct Group {
    /// Every record below this lsn is in `Writer::spare`.
    upto: u64,
    /// Records in the group (those below `upto` not yet durable).
    records: u64,
    checkpoints: Vec<mpsc::Sender<Result<(), Arc<StoreError>>>>,
    stop: bool,
}

/// The commit thread's own state: only it applies logged records to sled
/// and checkpoints.
struct Writer {
    log: Arc<Log>,
    db: sled::Db,
    /// The group being committed (swapped with the pending buffer).
    spare: Vec<u8>,
    trees: HashMap<Vec<u8>, sled::Tree>,
    checkpointer: Checkpointer,
    /// Records were applied to sled since the last checkpoint.
    dirty: bool,
    last_checkpoint: Instant,
    checkpoint_every: Duration,
    gather: Option<Gather>,
}

impl Writer {
    fn run(mut self) {
        let log = self.log.clone();
        loop {
            let (group, mut wal) = self.wait(&log);
            let records = group.records;
            if records > 0 {
                self.log.set_last_group(records);
            }
            GROUP_RECORDS.with(|n| n.set(records));
            let result = self.group(&mut wal, group.upto);
            GROUP_RECORDS.with(|n| n.set(0));
            // Gather the next group only after one of several records: a
            // lone writer (one record per sync) waits for nothing.
            self.gather = (result.is_ok() && records >= 2).then(|| Gather {
                lsn: group.upto + records,
                until: Instant::now() + self.log.gather_max(),
            });
            if !group.checkpoints.is_empty() {
                let done = match self.log.failure() {
                    Some(e) => Err(e),
                    None => self.checkpoint(&mut wal).map_err(Arc::new),
                };
                for tx in group.checkpoints {
                    let _ = tx.send(done.clone());
                }
            }
            if group.stop && lock(&self.log.pending).waiters.is_empty() {
                // What waits to be applied goes to sled now; the WAL has
                // it anyway, for the next open to replay.
                if self.log.failure().is_none()
                    && let Err(e) = self.apply_committed(&mut wal)
                {
                    tracing::error!(
                        "applying the last writes to sled failed (the WAL still holds them): {e}"
                    );
                }
                return;
            }
            let due = self
                .due_in()
                .is_some_and(|left| left.is_zero() || wal.pos >= WAL_SIZE / 2);
            if due
                && self.log.failure().is_none()
                && let Err(e) = self.checkpoint(&mut wal)
            {
                tracing::error!("checkpoint failed (the WAL still holds the writes): {e}");
            }
        }
    }

    /// Sleeps until there is a group to commit, and takes it (with the
    /// WAL lock): the pending records go to `spare`. A group is due when a
    /// continuation or a checkpoint waits (unless gathering), or after a
    /// quiet period (writes nobody waits for, such as the TTL sweep's, and
    /// records a leading writer committed, are applied within a period
    /// too; a due checkpoint follows).
    fn wait<'a>(&mut self, log: &'a Log) -> (Group, MutexGuard<'a, Wal>) {
        let mut p = lock(&log.pending);
        loop {
            let now = Instant::now();
            let until = if p.stop || !p.checkpoints.is_empty() {
                break;
            } else if let Some(oldest) = p.waiters.front() {
                let runnable = oldest.lsn <= p.durable;
                let newest = p.waiters.back().map_or(0, |w| w.lsn);
                match &self.gather {
                    Some(g) if !runnable && newest < g.lsn && now < g.until => {
                        p.wake = Wake::Lsn(g.lsn);
                        g.until
                    }
                    _ => break,
                }
            } else if let Some(g) = self.gather.as_ref().filter(|g| now < g.until) {
                // Nobody waits yet: the writers of the last group are
                // being answered and will write again. Ending the
                // gathering here would sync the first of them alone, and
                // the groups after it would grow back from one record.
                p.wake = Wake::Lsn(g.lsn);
                g.until
            } else {
                // Nobody waits, and the gathering is over. A writer may
                // lead the next sync meanwhile (`Wake::Any`).
                self.gather = None;
                p.wake = Wake::Any;
                let mut left = match self.due_in() {
                    Some(left) => left.max(Duration::from_millis(1)),
                    None => self.checkpoint_every,
                };
                if log.committed_len.load(Ordering::SeqCst) > 0 {
                    left = left.min(APPLY_DELAY);
                }
                now + left
            };
            #[cfg(test)]
            log.asleep.store(true, Ordering::SeqCst);
            let (guard, timeout) = log
                .work
                .wait_timeout(p, until.saturating_duration_since(now))
                .unwrap_or_else(|e| e.into_inner());
            p = guard;
            #[cfg(test)]
            log.asleep.store(false, Ordering::SeqCst);
            p.wake = Wake::Busy;
            if timeout.timed_out() {
                if p.waiters.is_empty() {
                    break;
                }
                self.gather = None;
            }
        }
        // `Wake::Busy` keeps writers from leading; one that leads already
        // holds the WAL lock, and its group comes before this one.
        drop(p);
        let wal = lock(&log.wal);
        let mut p = lock(&log.pending);
        std::mem::swap(&mut p.buf, &mut self.spare);
        let group = Group {
            upto: p.next_lsn,
            records: p.next_lsn.saturating_sub(p.durable),
            checkpoints: std::mem::take(&mut p.checkpoints),
            stop: p.stop,
        };
        (group, wal)
    }

    /// Writes made on sled directly since the last checkpoint.
    fn legacy_unsynced(&self) -> bool {
        self.log.legacy_written.load(Ordering::SeqCst)
            > self.log.legacy_synced.load(Ordering::SeqCst)
    }

    /// Time left before a checkpoint is due, if anything needs one.
    fn due_in(&self) -> Option<Duration> {
        let legacy = self.legacy_unsynced();
        let full = self.log.wal_pos.load(Ordering::SeqCst) >= WAL_SIZE / 2;
        let unapplied = self.log.committed_len.load(Ordering::SeqCst) > 0;
        (self.dirty || legacy || full || unapplied).then(|| {
            self.checkpoint_every
                .saturating_sub(self.last_checkpoint.elapsed())
        })
    }

    /// Commits `spare` (the records below `upto`), runs every continuation
    /// that waits for nothing newer, including those queued meanwhile (a
    /// writer that appends and then queues two continuations, publish and
    /// reply, gets both run after one commit), then applies the group to
    /// sled (after what leading writers committed).
    fn group(&mut self, wal: &mut Wal, upto: u64) -> Result<(), Arc<StoreError>> {
        #[cfg(test)]
        drop(lock(&self.log.hold));
        let result = match self.log.failure() {
            Some(e) => Err(e),
            None => self.commit(wal),
        };
        let ready: Vec<Waiter> = {
            let mut p = lock(&self.log.pending);
            if result.is_ok() {
                p.durable = p.durable.max(upto);
            }
            // After an error the store has failed: everyone gets it.
            let synced = self.log.legacy_synced.load(Ordering::SeqCst);
            let waits = |w: &Waiter| w.lsn > upto || w.legacy > synced;
            let n = match &result {
                Ok(()) => p.waiters.iter().position(waits).unwrap_or(p.waiters.len()),
                Err(_) => p.waiters.len(),
            };
            p.waiters.drain(..n).collect()
        };
        for w in ready {
            run_continuation(w.then, result.clone());
        }
        // Off the acknowledgement path: the overlay serves reads until sled
        // has the records. (After an error the store has failed: nothing
        // more reaches sled.)
        if result.is_ok()
            && let Err(e) = self.apply_or_defer(wal)
        {
            self.log.fail(e);
        }
        self.spare.clear();
        if self.spare.capacity() > 1 << 20 {
            self.spare = Vec::new();
        }
        result
    }

    /// Makes every record appended so far durable. The records stay in
    /// `spare` to be applied to sled, unless this already did.
    fn commit(&mut self, wal: &mut Wal) -> Result<(), Arc<StoreError>> {
        let legacy = self.legacy_unsynced();
        let fits = wal.pos + (self.spare.len() + TERMINATOR.len()) as u64 <= WAL_SIZE;
        if !legacy && fits {
            if self.spare.is_empty() {
                return Ok(());
            }
            match self.log.write_group(wal, &mut self.spare) {
                Ok(()) => return Ok(()),
                Err(e) => tracing::error!(
                    "cannot write the WAL {}: {e}; checkpointing instead",
                    self.log.dir.join(wal::WAL_FILE).display()
                ),
            }
        }
        // sled directly: apply the records, then flush and sync it.
        if let Err(e) = self.apply_in_order(wal) {
            return Err(self.log.fail(e));
        }
        self.spare.clear();
        self.checkpoint(wal).map_err(|e| self.log.fail(e))
    }

    /// Applies `spare` with what waits to be applied, or (while they are
    /// small) leaves it to be applied with the next groups.
    fn apply_or_defer(&mut self, wal: &mut Wal) -> Result<(), StoreError> {
        // An empty group: the thread woke up with nothing new (idle).
        if self.spare.is_empty() || wal.committed.len() + self.spare.len() >= APPLY_BATCH {
            return self.apply_in_order(wal);
        }
        wal.committed.extend_from_slice(&self.spare);
        self.log
            .committed_len
            .store(wal.committed.len(), Ordering::SeqCst);
        Ok(())
    }

    /// Applies what leading writers committed, then `spare`: lsn order.
    fn apply_in_order(&mut self, wal: &mut Wal) -> Result<(), StoreError> {
        self.apply_committed(wal)?;
        let spare = std::mem::take(&mut self.spare);
        let applied = self.apply(&spare);
        self.spare = spare;
        applied
    }

    /// Applies what leading writers committed (it precedes anything the
    /// commit thread takes next).
    fn apply_committed(&mut self, wal: &mut Wal) -> Result<(), StoreError> {
        if wal.committed.is_empty() {
            return Ok(());
        }
        let committed = std::mem::take(&mut wal.committed);
        let applied = self.apply(&committed);
        // Keep the buffer for the next leaders unless a burst grew it.
        if committed.capacity() <= APPLY_BACKLOG_MAX * 2 {
            wal.committed = committed;
            wal.committed.clear();
        }
        self.log.committed_len.store(0, Ordering::SeqCst);
        applied
    }

    /// Applies the records in `records` to sled (each tree's lsn key after
    /// its records) and drops them from the overlay. A key written several
    /// times in them is written to sled once, with its last value: a crash
    /// in the middle replays them all anyway (their lsn keys come last).
    fn apply(&mut self, records: &[u8]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let sled_err = |source| StoreError::Sled {
            path: self.log.dir.clone(),
            source,
        };
        let mut last: HashMap<&[u8], (u64, Writes<'_>)> = HashMap::new();
        let mut off = 0;
        loop {
            let (rec, next) = match wal::frame_at(records, off) {
                Frame::Record(rec, next) => (rec, next),
                Frame::End => break,
                Frame::Torn(why) => {
                    return Err(StoreError::Corrupt {
                        key: "the in-memory log".into(),
                        detail: why.into(),
                    });
                }
            };
            let tree = match self.trees.get(rec.tree) {
                Some(t) => t,
                None => {
                    let t = self.db.open_tree(rec.tree).map_err(sled_err)?;
                    self.trees.entry(rec.tree.to_vec()).or_insert(t)
                }
            };
            let (lsn, writes) = last.entry(rec.tree).or_default();
            *lsn = rec.lsn;
            for op in rec.ops {
                writes.add(tree, op).map_err(sled_err)?;
            }
            off = next;
        }
        for (name, (lsn, writes)) in &last {
            let Some(tree) = self.trees.get(*name) else {
                continue;
            };
            writes.write(tree).map_err(sled_err)?;
            tree.insert(LSN_KEY, &lsn.to_be_bytes()).map_err(sled_err)?;
        }
        self.dirty |= !last.is_empty();
        // Now sled has them: drop overlay entries no later write replaced.
        let mut overlay = lock(&self.log.overlay);
        let mut removed = 0;
        let mut off = 0;
        while let Frame::Record(rec, next) = wal::frame_at(records, off) {
            if let Some(writes) = overlay.get_mut(rec.tree) {
                for op in &rec.ops {
                    let k = op.key();
                    if writes.get(k).is_some_and(|(lsn, _)| *lsn == rec.lsn) {
                        writes.remove(k);
                        removed += 1;
                    }
                }
            }
            off = next;
        }
        self.log.overlay_len.fetch_sub(removed, Ordering::SeqCst);
        Ok(())
    }

    /// Checkpoints, then starts the WAL over at offset 0. Everything in the
    /// WAL has been applied to sled by then (this thread applies what it
    /// and leading writers committed, first thing here if not before), so
    /// the checkpoint covers it all.
    fn checkpoint(&mut self, wal: &mut Wal) -> Result<(), StoreError> {
        self.apply_committed(wal)?;
        let legacy = self.log.legacy_written.load(Ordering::SeqCst);
        let syncs = self.checkpointer.run()?;
        self.log.syncs.fetch_add(syncs, Ordering::Relaxed);
        tracing::debug!(wal_bytes = wal.pos, "checkpoint");
        self.log.legacy_synced.store(legacy, Ordering::SeqCst);
        self.dirty = false;
        wal.pos = 0;
        self.log.wal_pos.store(0, Ordering::SeqCst);
        self.last_checkpoint = Instant::now();
        Ok(())
    }
}
