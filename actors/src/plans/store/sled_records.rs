//! The one-machine scheduler's records in sled, behind [`PlanRecords`]
//! (written synchronously, made durable by group commit): the record
//! layout under the sled backend (`sled.rs`) of the plan store.
//!
//! sled layout, all in tree `plans`, each plan change one atomic batch
//! through the store's WAL:
//! `p<id / 16>` page of the records of up to 16 queued or running plans ·
//! `r<id>` the record of a finished plan, or one too large for its page
//! (and every record of a database written before pages) · `b<state><id / 64>` state index bitmap · `e<finished_ms><id>` expiry
//! index · `i<key>` idempotency key → id · `m<name>\0<id>` name index (`M`
//! once it covers every plan) · `n` next id · `c<state>` number of plans in
//! that state (u64). Ids, times and counts are big-endian so
//! keys sort numerically.
//!
//! A plan's write sets its entry in its page ([`crate::store::page`]): the
//! WAL carries the record alone, and the commit thread patches it into the
//! page in sled.
//!
//! The counts are written in the same batch as the state index entries
//! they count, so they are exactly as durable; a database without them
//! (written before they existed) gets them from a scan of the state index
//! at open.

use crate::plans::model::{
    PLAN_FORMAT_VERSION, PlanRecord, PlanRecordV1, PlanRecordV2, PlanRecordV3, PlanRecordV4,
};
use crate::store::{
    AfterSync, Batch, Store, StoreError, decode_body, decode_record, encode_record, page,
};
use flyto_protocol::PlanState;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

pub trait PlanRecords: Send + Sync + 'static {
    /// The id the next new plan gets.
    fn next_id(&self) -> Result<u64, StoreError>;
    /// Writes `plan` and its indexes atomically; `prev` is the state it was
    /// stored with (`None` for a new plan).
    fn put(&self, plan: &PlanRecord, prev: Option<PlanState>) -> Result<(), StoreError>;
    fn get(&self, id: u64) -> Result<Option<PlanRecord>, StoreError>;
    fn delete(&self, plan: &PlanRecord) -> Result<(), StoreError>;
    /// Pending and running plans, oldest first.
    fn load_active(&self) -> Result<Vec<PlanRecord>, StoreError>;
    /// Newest first.
    fn list(&self, state: Option<PlanState>, limit: usize) -> Result<Vec<PlanRecord>, StoreError>;
    fn find_idempotent(&self, key: &str) -> Result<Option<u64>, StoreError>;
    /// Ids of the plans named `name`, newest first.
    fn find_by_name(&self, name: &str) -> Result<Vec<u64>, StoreError>;
    /// Ids of terminal plans finished before `before_ms`, oldest first.
    fn expired(&self, before_ms: u64, limit: usize) -> Result<Vec<u64>, StoreError>;
    fn count(&self, state: PlanState) -> Result<u64, StoreError>;
    /// Runs `then` once every write so far is durable (group commit).
    fn after_sync(&self, then: AfterSync);
    /// Like `after_sync`; a lone writer may make its write durable and run
    /// `then` on the calling thread before this returns (see
    /// `Store::after_sync_leading`).
    fn after_sync_leading(&self, then: AfterSync) {
        self.after_sync(then);
    }
    fn sync_blocking(&self) -> Result<(), StoreError>;
    fn size_on_disk(&self) -> u64;
    /// Disk syncs the store has made since it opened.
    fn disk_syncs(&self) -> u64;
}

pub struct SledPlanStore {
    store: Store,
    tree: sled::Tree,
    /// Plans per state, as stored; the lock also orders writes, so that
    /// each batch carries the counts that follow from the one before.
    counts: Mutex<Counts>,
    /// The page written last, by number, as stored: the next submit
    /// (the next id) almost always goes to it, and finds it here instead
    /// of in the overlay or, once applied, in sled. Taken only with the
    /// counts lock held.
    last_page: Mutex<Option<(u64, sled::IVec)>>,
    /// The highest page number that may be stored: none above it was
    /// ever written (ids only grow), so the first submit of a new page
    /// does not look for it in sled, where a miss costs a tree descent.
    /// Changed only with the counts lock held.
    top_page: AtomicU64,
    /// The state-index buckets written last, as stored, for the same
    /// reason (a few: a state change writes two). Taken only with the
    /// counts lock held.
    last_buckets: Mutex<HashMap<[u8; 10], u64>>,
    recent: Mutex<Recent>,
}

/// Recently read terminal plans, decoded: a finished plan no longer
/// changes, and clients poll the status of the ones they just ran. Every
/// write of a plan drops it, and bumps `generation` so that a read that
/// started before the write does not put the old record back.
#[derive(Default)]
struct Recent {
    generation: u64,
    plans: HashMap<u64, (PlanRecord, usize)>,
    bytes: usize,
}

/// Bounds of [`Recent`]: encoded bytes in all, and of one record.
const RECENT_BYTES: usize = 1 << 20;
const RECENT_MAX_RECORD: usize = 64 << 10;

type Counts = [u64; 5];

const STATES: [PlanState; 5] = [
    PlanState::Pending,
    PlanState::Running,
    PlanState::Succeeded,
    PlanState::Failed,
    PlanState::Cancelled,
];

/// Names a plan record in errors; formatted only when there is one.
struct PlanKey(Option<u64>);

impl std::fmt::Display for PlanKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(id) => write!(f, "plan p{id}"),
            None => f.write_str("plan ?"),
        }
    }
}

impl SledPlanStore {
    pub fn open(store: Store) -> Result<Self, StoreError> {
        let tree = store.tree("plans")?;
        let this = SledPlanStore {
            store,
            tree,
            counts: Mutex::new([0; 5]),
            last_page: Mutex::new(None),
            top_page: AtomicU64::new(u64::MAX),
            last_buckets: Mutex::default(),
            recent: Mutex::default(),
        };
        this.bucket_state_index()?;
        *this.counts() = this.load_counts()?;
        let top = match this.store.scan_prefix(&this.tree, b"p", true).next() {
            Some(kv) => page_number(&kv?.0).unwrap_or(u64::MAX),
            None => 0,
        };
        this.top_page.store(top, Ordering::Relaxed);
        this.index_names()?;
        Ok(this)
    }

    /// Builds the name index on the first open of a database written
    /// before it existed.
    fn index_names(&self) -> Result<(), StoreError> {
        if self.store.get(&self.tree, NAMES_INDEXED)?.is_some() {
            return Ok(());
        }
        let mut batch = Batch::new();
        for kv in self.records(false) {
            let (id, v) = kv?;
            let rec = self.decode(Some(id), &v)?;
            if let Some(name) = &rec.name {
                batch.insert(name_key(name, rec.id), Vec::new());
            }
        }
        batch.insert(NAMES_INDEXED, Vec::new());
        self.store.apply(&self.tree, &batch)
    }

    /// Moves the state index of a database written before it was bucketed
    /// (one `s` key per plan) into buckets, a chunk per batch: each batch
    /// removes its keys and sets their bits together, so a crash midway
    /// leaves every plan indexed once and the next open goes on.
    fn bucket_state_index(&self) -> Result<(), StoreError> {
        loop {
            let mut old = Vec::new();
            for kv in self.store.scan_prefix(&self.tree, b"s", false).take(4096) {
                old.push(kv?.0);
            }
            if old.is_empty() {
                return Ok(());
            }
            let mut bits: BTreeMap<[u8; 10], u64> = BTreeMap::new();
            let mut batch = Batch::new();
            for k in &old {
                let (Some(state), Some(id)) =
                    (k.get(1).and_then(|b| state_of_byte(*b)), tail_id(k))
                else {
                    continue;
                };
                *bits.entry(bucket_key(state, id)).or_default() |= bucket_bit(id);
            }
            for (key, add) in bits {
                let had = self.bucket(&key)?;
                batch.insert(key, (had | add).to_be_bytes());
            }
            for k in old {
                batch.remove(k.to_vec());
            }
            self.store.apply(&self.tree, &batch)?;
        }
    }

    /// The bitmap of the state-index bucket `key` (0 when absent).
    fn bucket(&self, key: &[u8]) -> Result<u64, StoreError> {
        Ok(self
            .store
            .get(&self.tree, key)?
            .and_then(|v| tail_id(&v))
            .unwrap_or(0))
    }

    /// Adds to `batch` the write that puts plan `id` in (or takes it out
    /// of) the index of `state`. Only with the counts lock held, which
    /// orders these read-modify-writes.
    fn index(
        &self,
        batch: &mut Batch,
        state: PlanState,
        id: u64,
        on: bool,
    ) -> Result<(), StoreError> {
        let key = bucket_key(state, id);
        let mut last = lock(&self.last_buckets);
        let had = match last.get(&key) {
            Some(bits) => *bits,
            None => self.bucket(&key)?,
        };
        let now = if on {
            had | bucket_bit(id)
        } else {
            had & !bucket_bit(id)
        };
        if now == 0 {
            batch.remove(key.to_vec());
        } else {
            batch.insert(key.to_vec(), now.to_be_bytes());
        }
        if last.len() >= 8 {
            last.clear();
        }
        last.insert(key, now);
        Ok(())
    }

    /// Ids in the index of `state`, ascending (or descending).
    fn indexed(
        &self,
        state: PlanState,
        reverse: bool,
    ) -> impl Iterator<Item = Result<u64, StoreError>> + '_ {
        self.store
            .scan_prefix(&self.tree, &bucket_prefix(state), reverse)
            .flat_map(move |kv| {
                let ids: Vec<Result<u64, StoreError>> = match kv {
                    Err(e) => vec![Err(e)],
                    Ok((k, v)) => match (tail_id(&k), tail_id(&v)) {
                        (Some(b), Some(bits)) => bucket_ids(b, bits, reverse).map(Ok).collect(),
                        _ => Vec::new(),
                    },
                };
                ids
            })
    }

    /// The stored counts, or (first open of an older database) counted
    /// from the state index and stored.
    fn load_counts(&self) -> Result<Counts, StoreError> {
        let mut counts = [0; 5];
        let mut missing = false;
        for (i, st) in STATES.into_iter().enumerate() {
            match self.tree.get(count_key(st)).map_err(|e| self.err(e))? {
                Some(v) => counts[i] = tail_id(&v).unwrap_or(0),
                None => missing = true,
            }
        }
        if !missing {
            return Ok(counts);
        }
        let mut batch = Batch::new();
        for (i, st) in STATES.into_iter().enumerate() {
            let mut n = 0;
            for kv in self
                .store
                .scan_prefix(&self.tree, &bucket_prefix(st), false)
            {
                n += tail_id(&kv?.1).map_or(0, |bits| u64::from(bits.count_ones()));
            }
            counts[i] = n;
            batch.insert(count_key(st), n.to_be_bytes());
        }
        self.store.apply(&self.tree, &batch)?;
        Ok(counts)
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        lock(&self.counts)
    }

    fn recent(&self) -> MutexGuard<'_, Recent> {
        lock(&self.recent)
    }

    /// After a write of plan `id` (not before: a read between the two
    /// could cache the old record).
    fn forget(&self, id: u64) {
        let mut r = self.recent();
        r.generation += 1;
        if let Some((_, n)) = r.plans.remove(&id) {
            r.bytes -= n;
        }
    }

    fn err(&self, e: sled::Error) -> StoreError {
        self.store.sled_err(e)
    }

    fn decode(&self, id: Option<u64>, bytes: &[u8]) -> Result<PlanRecord, StoreError> {
        decode_plan_as(id, bytes)
    }

    /// The page holding plan `id`'s neighbours, parsed (empty when absent).
    fn page(&self, id: u64) -> Result<Option<(sled::IVec, Vec<page::Entry>)>, StoreError> {
        let Some(bytes) = self.store.get(&self.tree, &page_key(id))? else {
            return Ok(None);
        };
        let entries = page::parse(&bytes).map_err(|detail| corrupt_page(id / PAGE, detail))?;
        Ok(Some((bytes, entries)))
    }

    /// Adds to `batch` the writes that store `record` as plan `id`'s (or,
    /// with `None`, remove it): in its page while the plan is `active` and
    /// its record small, else under its own key, and gone from the other
    /// place. `known` says the plan may already be stored. Only with the
    /// counts lock held, which orders the page's read-modify-write; a
    /// caller whose batch then fails calls [`SledPlanStore::forget_page`].
    fn place(
        &self,
        batch: &mut Batch,
        id: u64,
        record: Option<Vec<u8>>,
        active: bool,
        known: bool,
    ) -> Result<(), StoreError> {
        let mut last = lock(&self.last_page);
        let number = id / PAGE;
        let top = self.top_page.load(Ordering::Relaxed);
        let stored: Option<sled::IVec> = match last.take() {
            Some((n, bytes)) if n == number => Some(bytes),
            _ if number > top => None,
            _ => self.store.get(&self.tree, &page_key(id))?,
        };
        self.top_page.store(top.max(number), Ordering::Relaxed);
        let stored = stored.unwrap_or_default();
        let entries = page::parse(&stored).map_err(|detail| corrupt_page(number, detail))?;
        let in_page = entries.iter().any(|e| e.id == id);
        let (paged, single) = match record {
            Some(r) if active && r.len() <= PAGED_MAX => (Some(r), None),
            other => (None, other),
        };
        let now = match paged.is_some() || in_page {
            true => {
                // One copy of the page, shared by the batch, the overlay
                // and this cache.
                let now = sled::IVec::from(page::with(&stored, &entries, id, paged.as_deref()));
                batch.set_entry(page_key(id), id, paged, now.clone());
                now
            }
            false => stored,
        };
        *last = Some((number, now));
        drop(last);
        match single {
            Some(r) => batch.insert(record_key(id), r),
            // Stored on its own before (too large then, or written before
            // pages): gone from there.
            None if known && !in_page => batch.remove(record_key(id).to_vec()),
            None => {}
        }
        Ok(())
    }

    /// After a batch from [`SledPlanStore::place`] or
    /// [`SledPlanStore::index`] failed: what they cached is not what the
    /// store holds.
    fn forget_page(&self) {
        *lock(&self.last_page) = None;
        lock(&self.last_buckets).clear();
    }

    /// Plan `id`'s stored record: in its page, or under its own key.
    fn record_bytes(&self, id: u64) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some((bytes, entries)) = self.page(id)?
            && let Some(r) = page::find(&bytes, &entries, id)
        {
            return Ok(Some(r.to_vec()));
        }
        Ok(self
            .store
            .get(&self.tree, &record_key(id))?
            .map(|v| v.to_vec()))
    }

    /// Every stored record, by id (ascending, or descending): the pages'
    /// and those under their own keys, merged.
    fn records(
        &self,
        reverse: bool,
    ) -> impl Iterator<Item = Result<(u64, Vec<u8>), StoreError>> + '_ {
        let paged = self
            .store
            .scan_prefix(&self.tree, b"p", reverse)
            .flat_map(move |kv| {
                let entries: Vec<Result<(u64, Vec<u8>), StoreError>> = match kv {
                    Err(e) => vec![Err(e)],
                    Ok((k, v)) => match page::parse(&v) {
                        Ok(mut entries) => {
                            if reverse {
                                entries.reverse();
                            }
                            entries
                                .into_iter()
                                .map(|e| Ok((e.id, v[e.range].to_vec())))
                                .collect()
                        }
                        Err(detail) => vec![Err(corrupt_page(tail_id(&k).unwrap_or(0), detail))],
                    },
                };
                entries
            });
        let single = self
            .store
            .scan_prefix(&self.tree, b"r", reverse)
            .map(|kv| kv.map(|(k, v)| (tail_id(&k).unwrap_or(0), v.to_vec())));
        MergeById {
            a: paged.peekable(),
            b: single.peekable(),
            reverse,
        }
    }
}

/// Two id-ordered record streams as one (an error comes out first).
struct MergeById<A: Iterator, B: Iterator> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
    reverse: bool,
}

type IdRecord = Result<(u64, Vec<u8>), StoreError>;

impl<A: Iterator<Item = IdRecord>, B: Iterator<Item = IdRecord>> Iterator for MergeById<A, B> {
    type Item = IdRecord;

    fn next(&mut self) -> Option<IdRecord> {
        let take_a = match (self.a.peek(), self.b.peek()) {
            (None, _) => false,
            (_, None) => true,
            (Some(Err(_)), _) => true,
            (_, Some(Err(_))) => false,
            (Some(Ok((x, _))), Some(Ok((y, _)))) => (x < y) != self.reverse,
        };
        match take_a {
            true => self.a.next(),
            false => self.b.next(),
        }
    }
}

/// A plan record as any store holds it (the shared store too).
pub fn decode_plan(bytes: &[u8]) -> Result<PlanRecord, StoreError> {
    decode_plan_as(None, bytes)
}

fn decode_plan_as(id: Option<u64>, bytes: &[u8]) -> Result<PlanRecord, StoreError> {
    decode_record(
        PlanKey(id),
        bytes,
        PLAN_FORMAT_VERSION,
        |found, body| match found {
            1 => decode_body::<PlanRecordV1>(body).map(PlanRecord::from),
            2 => decode_body::<PlanRecordV2>(body).map(PlanRecord::from),
            3 => decode_body::<PlanRecordV3>(body).map(PlanRecord::from),
            4 => decode_body::<PlanRecordV4>(body).map(PlanRecord::from),
            _ => Err(format!("no migration from plan format {found}")),
        },
    )
}

fn record_key(id: u64) -> [u8; 9] {
    let mut k = [b'r'; 9];
    k[1..].copy_from_slice(&id.to_be_bytes());
    k
}

/// Queued and running plans live [`PAGE`] consecutive ids to a key: the
/// plans submitted together share a page, which a group commit then writes
/// to sled once (as the state index's buckets). With a key per plan, each
/// submit cost sled an insert, and every sixteenth a leaf split, in the
/// commit thread: most of its CPU under many clients. A plan that ends
/// moves to a key of its own: finished plans are most of what is stored
/// and are read at random, and a read through a page would load sixteen
/// records into sled's cache for one. A record larger than [`PAGED_MAX`]
/// keeps a key of its own too, so that rewriting a plan never copies much
/// more than itself.
const PAGE: u64 = 16;
const PAGED_MAX: usize = 1024;

fn page_key(id: u64) -> [u8; 9] {
    let mut k = [b'p'; 9];
    k[1..].copy_from_slice(&(id / PAGE).to_be_bytes());
    k
}

/// The number of the page stored under `key`.
fn page_number(key: &[u8]) -> Option<u64> {
    let n: [u8; 8] = key.get(1..)?.try_into().ok()?;
    Some(u64::from_be_bytes(n))
}

fn corrupt_page(number: u64, detail: String) -> StoreError {
    StoreError::Corrupt {
        key: format!("plan page {number}"),
        detail,
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn state_byte(state: PlanState) -> u8 {
    match state {
        PlanState::Pending => b'p',
        PlanState::Running => b'r',
        PlanState::Succeeded => b's',
        PlanState::Failed => b'f',
        PlanState::Cancelled => b'c',
    }
}

fn state_index(state: PlanState) -> usize {
    match state {
        PlanState::Pending => 0,
        PlanState::Running => 1,
        PlanState::Succeeded => 2,
        PlanState::Failed => 3,
        PlanState::Cancelled => 4,
    }
}

fn count_key(state: PlanState) -> [u8; 2] {
    [b'c', state_byte(state)]
}

fn state_of_byte(b: u8) -> Option<PlanState> {
    STATES.into_iter().find(|st| state_byte(*st) == b)
}

/// The state index keeps 64 plans to a key (`b`, state byte, id / 64; the
/// value a bitmap of the 64). Ids are sequential, so the plans submitted
/// together share a key, which a group commit then writes to sled once:
/// with a key per plan, every submit cost a sled insert, and every eighth
/// a leaf split, in the commit thread.
const BUCKET: u64 = 64;

fn bucket_prefix(state: PlanState) -> [u8; 2] {
    [b'b', state_byte(state)]
}

fn bucket_key(state: PlanState, id: u64) -> [u8; 10] {
    let mut k = [0; 10];
    k[..2].copy_from_slice(&bucket_prefix(state));
    k[2..].copy_from_slice(&(id / BUCKET).to_be_bytes());
    k
}

fn bucket_bit(id: u64) -> u64 {
    1 << (id % BUCKET)
}

/// The ids of bucket number `bucket` whose bits are set in `bits`.
fn bucket_ids(bucket: u64, bits: u64, reverse: bool) -> impl Iterator<Item = u64> {
    let base = bucket * BUCKET;
    let mut rest = bits;
    std::iter::from_fn(move || {
        if rest == 0 {
            return None;
        }
        let bit = if reverse {
            63 - u64::from(rest.leading_zeros())
        } else {
            u64::from(rest.trailing_zeros())
        };
        rest &= !(1 << bit);
        Some(base + bit)
    })
}

fn expiry_key(finished_ms: u64, id: u64) -> Vec<u8> {
    let mut k = vec![b'e'];
    k.extend_from_slice(&finished_ms.to_be_bytes());
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn idem_key(key: &str) -> Vec<u8> {
    let mut k = vec![b'i'];
    k.extend_from_slice(key.as_bytes());
    k
}

/// Present once the name index covers every plan.
const NAMES_INDEXED: &[u8] = b"M";

fn name_prefix(name: &str) -> Vec<u8> {
    let mut k = vec![b'm'];
    k.extend_from_slice(name.as_bytes());
    // Names hold no control characters (validate.rs), so the NUL ends the
    // name and `a` never matches the entries of `ab`.
    k.push(0);
    k
}

fn name_key(name: &str, id: u64) -> Vec<u8> {
    let mut k = name_prefix(name);
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn tail_id(key: &[u8]) -> Option<u64> {
    let start = key.len().checked_sub(8)?;
    key[start..].try_into().ok().map(u64::from_be_bytes)
}

impl PlanRecords for SledPlanStore {
    fn next_id(&self) -> Result<u64, StoreError> {
        Ok(self
            .store
            .get(&self.tree, b"n")?
            .and_then(|v| tail_id(&v))
            .unwrap_or(1))
    }

    fn put(&self, plan: &PlanRecord, prev: Option<PlanState>) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        let record = encode_record(PLAN_FORMAT_VERSION, plan);
        if plan.state.is_terminal()
            && let Some(f) = plan.finished_ms
        {
            batch.insert(expiry_key(f, plan.id), Vec::new());
        }
        if prev.is_none() {
            batch.insert(&b"n"[..], (plan.id + 1).to_be_bytes());
            if let Some(key) = &plan.idempotency_key {
                batch.insert(idem_key(key), plan.id.to_be_bytes());
            }
            if let Some(name) = &plan.name {
                batch.insert(name_key(name, plan.id), Vec::new());
            }
        }
        let mut counts = self.counts();
        let mut next = *counts;
        let write = || {
            let active = !plan.state.is_terminal();
            self.place(&mut batch, plan.id, Some(record), active, prev.is_some())?;
            if prev != Some(plan.state) {
                if let Some(p) = prev {
                    self.index(&mut batch, p, plan.id, false)?;
                    let n = &mut next[state_index(p)];
                    *n = n.saturating_sub(1);
                    batch.insert(count_key(p), n.to_be_bytes());
                }
                self.index(&mut batch, plan.state, plan.id, true)?;
                let n = &mut next[state_index(plan.state)];
                *n += 1;
                batch.insert(count_key(plan.state), n.to_be_bytes());
            }
            self.store.apply(&self.tree, &batch)
        };
        if let Err(e) = write() {
            self.forget_page();
            return Err(e);
        }
        *counts = next;
        drop(counts);
        self.forget(plan.id);
        Ok(())
    }

    fn get(&self, id: u64) -> Result<Option<PlanRecord>, StoreError> {
        let generation = {
            let r = self.recent();
            if let Some((rec, _)) = r.plans.get(&id) {
                return Ok(Some(rec.clone()));
            }
            r.generation
        };
        let Some(bytes) = self.record_bytes(id)? else {
            return Ok(None);
        };
        let rec = self.decode(Some(id), &bytes)?;
        let n = bytes.len();
        if rec.state.is_terminal() && n <= RECENT_MAX_RECORD {
            let mut r = self.recent();
            if r.generation == generation {
                if r.bytes + n > RECENT_BYTES {
                    r.plans.clear();
                    r.bytes = 0;
                }
                r.bytes += n;
                if let Some((_, old)) = r.plans.insert(id, (rec.clone(), n)) {
                    r.bytes -= old;
                }
            }
        }
        Ok(Some(rec))
    }

    fn delete(&self, plan: &PlanRecord) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        if let Some(f) = plan.finished_ms {
            batch.remove(expiry_key(f, plan.id));
        }
        if let Some(key) = &plan.idempotency_key {
            batch.remove(idem_key(key));
        }
        if let Some(name) = &plan.name {
            batch.remove(name_key(name, plan.id));
        }
        let mut counts = self.counts();
        let mut next = *counts;
        let n = &mut next[state_index(plan.state)];
        *n = n.saturating_sub(1);
        batch.insert(count_key(plan.state), n.to_be_bytes());
        let written = self
            .place(&mut batch, plan.id, None, false, true)
            .and_then(|()| self.index(&mut batch, plan.state, plan.id, false))
            .and_then(|()| self.store.apply(&self.tree, &batch));
        if let Err(e) = written {
            self.forget_page();
            return Err(e);
        }
        *counts = next;
        drop(counts);
        self.forget(plan.id);
        Ok(())
    }

    fn load_active(&self) -> Result<Vec<PlanRecord>, StoreError> {
        let mut ids = Vec::new();
        for state in [PlanState::Pending, PlanState::Running] {
            for id in self.indexed(state, false) {
                ids.push(id?);
            }
        }
        ids.sort_unstable();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.extend(self.get(id)?);
        }
        Ok(out)
    }

    fn list(&self, state: Option<PlanState>, limit: usize) -> Result<Vec<PlanRecord>, StoreError> {
        let mut out = Vec::new();
        match state {
            Some(st) => {
                for id in self.indexed(st, true) {
                    if out.len() >= limit {
                        break;
                    }
                    out.extend(self.get(id?)?);
                }
            }
            None => {
                for kv in self.records(true) {
                    if out.len() >= limit {
                        break;
                    }
                    let (id, v) = kv?;
                    out.push(self.decode(Some(id), &v)?);
                }
            }
        }
        Ok(out)
    }

    fn find_idempotent(&self, key: &str) -> Result<Option<u64>, StoreError> {
        Ok(self
            .store
            .get(&self.tree, &idem_key(key))?
            .and_then(|v| tail_id(&v)))
    }

    fn find_by_name(&self, name: &str) -> Result<Vec<u64>, StoreError> {
        let mut out = Vec::new();
        for kv in self.store.scan_prefix(&self.tree, &name_prefix(name), true) {
            out.extend(tail_id(&kv?.0));
        }
        Ok(out)
    }

    fn expired(&self, before_ms: u64, limit: usize) -> Result<Vec<u64>, StoreError> {
        let mut out = Vec::new();
        let (start, end) = (expiry_key(0, 0), expiry_key(before_ms, 0));
        for kv in self.store.range(&self.tree, &start, &end, false) {
            if out.len() >= limit {
                break;
            }
            out.extend(tail_id(&kv?.0));
        }
        Ok(out)
    }

    fn count(&self, state: PlanState) -> Result<u64, StoreError> {
        Ok(self.counts()[state_index(state)])
    }

    fn after_sync(&self, then: AfterSync) {
        self.store.after_sync(then);
    }

    fn after_sync_leading(&self, then: AfterSync) {
        self.store.after_sync_leading(then);
    }

    fn sync_blocking(&self) -> Result<(), StoreError> {
        self.store.sync_blocking()
    }

    fn size_on_disk(&self) -> u64 {
        self.store.size_on_disk()
    }

    fn disk_syncs(&self) -> u64 {
        self.store.disk_syncs()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::plans::model::{StepAction, StepRecord};
    use crate::store::testutil::{crash_copy, open_no_checkpoint, wait_durable};
    use flyto_protocol::StepState;
    use std::path::Path;

    pub(crate) fn plan(id: u64, state: PlanState) -> PlanRecord {
        PlanRecord {
            id,
            name: None,
            state,
            reason: None,
            created_ms: id,
            started_ms: None,
            finished_ms: state.is_terminal().then_some(1000 + id),
            revision: 1,
            idempotency_key: Some(format!("key-{id}")),
            chain: format!("p{id}"),
            depth: 0,
            steps: vec![StepRecord {
                id: "main".into(),
                action: StepAction::Run {
                    command: "true".into(),
                },
                deps: vec![],
                timeout_secs: 60,
                max_attempts: 1,
                workdir: "/".into(),
                state: StepState::Pending,
                attempts: 0,
                started_ms: None,
                finished_ms: None,
                exit_code: None,
                error: None,
                stdout_tail: String::new(),
                stderr_tail: String::new(),
                pgid: None,
                has_log: false,
                env: Vec::new(),
                idempotent: false,
            }],
            restarted_from: None,
            sandboxes: Vec::new(),
        }
    }

    fn counts(s: &SledPlanStore) -> [u64; 5] {
        STATES.map(|st| s.count(st).unwrap())
    }

    /// What the state index says, counted entry by entry.
    fn index_counts(s: &SledPlanStore) -> [u64; 5] {
        STATES.map(|st| s.indexed(st, false).count() as u64)
    }

    /// 5 plans: p1 pending, p2 running, p3 succeeded, p4 failed then
    /// deleted, p5 cancelled → [1, 1, 1, 0, 1].
    fn fill(s: &SledPlanStore) {
        use PlanState::*;
        for id in 1..=5 {
            s.put(&plan(id, Pending), None).unwrap();
        }
        s.put(&plan(2, Running), Some(Pending)).unwrap();
        for (id, end) in [(3, Succeeded), (4, Failed)] {
            s.put(&plan(id, Running), Some(Pending)).unwrap();
            s.put(&plan(id, end), Some(Running)).unwrap();
        }
        s.put(&plan(5, Cancelled), Some(Pending)).unwrap();
        // Rewriting a plan in the same state changes no count.
        s.put(&plan(5, Cancelled), Some(Cancelled)).unwrap();
        s.delete(&plan(4, Failed)).unwrap();
    }

    const FILLED: [u64; 5] = [1, 1, 1, 0, 1];

    fn open(dir: &Path) -> (Store, SledPlanStore) {
        let store = open_no_checkpoint(dir);
        let plans = SledPlanStore::open(store.clone()).unwrap();
        (store, plans)
    }

    #[test]
    fn counts_follow_every_write_without_scanning() {
        let tmp = tempfile::tempdir().unwrap();
        let (store, s) = open(&tmp.path().join("db"));
        assert_eq!(counts(&s), [0; 5]);
        fill(&s);
        assert_eq!(counts(&s), FILLED);
        assert_eq!(index_counts(&s), FILLED);
        assert_eq!(s.get(4).unwrap(), None);
        assert_eq!(s.find_idempotent("key-4").unwrap(), None);
        assert_eq!(s.find_idempotent("key-3").unwrap(), Some(3));
        assert_eq!(s.next_id().unwrap(), 6);
        assert_eq!(
            s.list(None, 10)
                .unwrap()
                .iter()
                .map(|p| p.id)
                .collect::<Vec<_>>(),
            vec![5, 3, 2, 1]
        );
        store.sync_blocking().unwrap();
        drop((s, store));
        let (_store, s) = open(&tmp.path().join("db"));
        assert_eq!(counts(&s), FILLED);
    }

    #[test]
    fn counts_survive_a_crash_together_with_the_index() {
        let tmp = tempfile::tempdir().unwrap();
        let (live, crashed) = (tmp.path().join("live"), tmp.path().join("crashed"));
        let (store, s) = open(&live);
        fill(&s);
        wait_durable(&store);
        crash_copy(&live, &crashed);
        drop((s, store));
        let (store, s) = open(&crashed);
        assert!(store.recovery().replayed > 0, "{:?}", store.recovery());
        assert_eq!(counts(&s), FILLED);
        assert_eq!(index_counts(&s), FILLED);
    }

    #[test]
    fn a_format_4_record_reads_with_steps_not_idempotent() {
        use crate::plans::model::{PlanRecordV4, StepRecordV3};
        let now = plan(3, PlanState::Pending);
        let s = &now.steps[0];
        let v4 = PlanRecordV4 {
            id: now.id,
            name: now.name.clone(),
            state: now.state,
            reason: None,
            created_ms: now.created_ms,
            started_ms: None,
            finished_ms: None,
            revision: 1,
            idempotency_key: now.idempotency_key.clone(),
            steps: vec![StepRecordV3 {
                id: s.id.clone(),
                action: s.action.clone(),
                deps: vec![],
                timeout_secs: s.timeout_secs,
                max_attempts: s.max_attempts,
                workdir: s.workdir.clone(),
                state: s.state,
                attempts: 0,
                started_ms: None,
                finished_ms: None,
                exit_code: None,
                error: None,
                stdout_tail: String::new(),
                stderr_tail: String::new(),
                pgid: None,
                has_log: false,
                env: vec![("A".into(), "1".into())],
            }],
            chain: now.chain.clone(),
            depth: 0,
            restarted_from: None,
            sandboxes: Vec::new(),
        };
        let read = decode_plan(&encode_record(4, &v4)).unwrap();
        assert_eq!(read.steps[0].env, vec![("A".to_string(), "1".to_string())]);
        assert!(!read.steps[0].idempotent);
        assert_eq!(read.steps[0].id, s.id);
    }

    #[test]
    fn the_state_index_lists_plans_across_its_buckets_newest_first() {
        use PlanState::*;
        let tmp = tempfile::tempdir().unwrap();
        let (store, s) = open(&tmp.path().join("db"));
        // Ids on both sides of bucket edges (63/64, 127/128).
        let ids = [1u64, 62, 63, 64, 65, 127, 128, 200, 1000];
        for id in ids {
            s.put(&plan(id, Pending), None).unwrap();
        }
        for id in [63, 128] {
            s.put(&plan(id, Running), Some(Pending)).unwrap();
        }
        let listed = |st| {
            s.list(Some(st), 100)
                .unwrap()
                .iter()
                .map(|p| p.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(listed(Pending), vec![1000, 200, 127, 65, 64, 62, 1]);
        assert_eq!(listed(Running), vec![128, 63]);
        assert_eq!(s.list(Some(Pending), 3).unwrap().len(), 3);
        let active: Vec<u64> = s.load_active().unwrap().iter().map(|p| p.id).collect();
        assert_eq!(active, ids.to_vec());
        // A bucket whose last plan leaves is removed, not left empty.
        s.delete(&plan(1000, Pending)).unwrap();
        assert_eq!(s.tree.get(bucket_key(Pending, 1000)).unwrap(), None);
        store.sync_blocking().unwrap();
        assert_eq!(s.tree.get(bucket_key(Pending, 1000)).unwrap(), None);
        assert_eq!(index_counts(&s), counts(&s));
        assert_eq!(counts(&s), [6, 2, 0, 0, 0]);
    }

    #[test]
    fn an_older_database_with_a_key_per_plan_is_bucketed_on_open() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db");
        let (store, s) = open(&dir);
        fill(&s);
        for id in 100..5000 {
            s.put(&plan(id, PlanState::Pending), None).unwrap();
        }
        let want = |s: &SledPlanStore| {
            STATES.map(|st| {
                s.list(Some(st), 10_000)
                    .unwrap()
                    .iter()
                    .map(|p| p.id)
                    .collect::<Vec<_>>()
            })
        };
        let before = want(&s);
        // As written by a flytod with one `s` key per plan.
        let mut b = Batch::new();
        for st in STATES {
            for kv in store.scan_prefix(&s.tree, &bucket_prefix(st), false) {
                let (k, v) = kv.unwrap();
                b.remove(k.to_vec());
                let bucket = tail_id(&k).unwrap();
                for id in bucket_ids(bucket, tail_id(&v).unwrap(), false) {
                    let mut old = vec![b's', state_byte(st)];
                    old.extend_from_slice(&id.to_be_bytes());
                    b.insert(old, Vec::new());
                }
            }
        }
        store.apply(&s.tree, &b).unwrap();
        store.sync_blocking().unwrap();
        drop((s, store));
        let (_store, s) = open(&dir);
        assert_eq!(want(&s), before);
        assert_eq!(s.store.scan_prefix(&s.tree, b"s", false).count(), 0);
        assert_eq!(index_counts(&s), counts(&s));
    }

    /// A plan whose record is `len` bytes or more (its step's tail).
    fn big(id: u64, state: PlanState, len: usize) -> PlanRecord {
        let mut p = plan(id, state);
        p.steps[0].stdout_tail = "x".repeat(len);
        p
    }

    #[test]
    fn a_page_written_before_a_reopen_keeps_its_plans_when_more_join_it() {
        use PlanState::*;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db");
        {
            let (_store, s) = open(&dir);
            // Out of order, so the next-id key (51) says less than the
            // highest page (6) holds.
            for id in [1, 40, 100, 50] {
                s.put(&plan(id, Pending), None).unwrap();
            }
            s.sync_blocking().unwrap();
        }
        let (_store, s) = open(&dir);
        for id in [41, 101, 112, 113] {
            s.put(&plan(id, Pending), None).unwrap();
        }
        for id in [1, 40, 41, 50, 100, 101, 112, 113] {
            assert_eq!(s.get(id).unwrap(), Some(plan(id, Pending)), "p{id}");
        }
        assert_eq!(s.count(Pending).unwrap(), 8);
    }

    #[test]
    fn records_share_pages_and_large_or_older_ones_keep_their_own_key() {
        use PlanState::*;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db");
        let (store, s) = open(&dir);
        for id in 1..=40 {
            s.put(&plan(id, Pending), None).unwrap();
        }
        // 1..=15, 16..=31, 32..=40: three pages, no key per plan.
        assert_eq!(s.store.scan_prefix(&s.tree, b"p", false).count(), 3);
        assert_eq!(s.store.scan_prefix(&s.tree, b"r", false).count(), 0);
        // p17 grows past what a page takes, then shrinks back.
        s.put(&big(17, Running, 4000), Some(Pending)).unwrap();
        assert_eq!(s.get(17).unwrap(), Some(big(17, Running, 4000)));
        assert_eq!(s.store.scan_prefix(&s.tree, b"r", false).count(), 1);
        s.put(&plan(17, Running), Some(Running)).unwrap();
        assert_eq!(s.store.scan_prefix(&s.tree, b"r", false).count(), 0);
        // Once it ends, it keeps a key of its own.
        s.put(&plan(17, Succeeded), Some(Running)).unwrap();
        assert_eq!(s.store.scan_prefix(&s.tree, b"r", false).count(), 1);
        let page1 = s.store.get(&s.tree, &page_key(17)).unwrap().unwrap();
        assert!(page::find(&page1, &page::parse(&page1).unwrap(), 17).is_none());
        // p41 is large from its submit on; p33 is deleted from its page.
        s.put(&big(41, Pending, 2000), None).unwrap();
        s.delete(&plan(33, Pending)).unwrap();
        assert_eq!(s.get(33).unwrap(), None);
        // p5 as a flytod before pages wrote it: under its own key only.
        let mut b = Batch::new();
        b.insert(
            record_key(5),
            encode_record(PLAN_FORMAT_VERSION, &plan(5, Pending)),
        );
        let stored = s.store.get(&s.tree, &page_key(5)).unwrap().unwrap();
        b.insert(page_key(5), page::patched(&page_key(5), &stored, 5, None));
        store.apply(&s.tree, &b).unwrap();
        assert_eq!(s.get(5).unwrap(), Some(plan(5, Pending)));
        let ids = |s: &SledPlanStore| {
            s.list(None, 1000)
                .unwrap()
                .iter()
                .map(|p| p.id)
                .collect::<Vec<_>>()
        };
        let want: Vec<u64> = (1..=41).rev().filter(|id| *id != 33).collect();
        assert_eq!(ids(&s), want);
        // Its next write moves it into its page.
        s.put(&plan(5, Running), Some(Pending)).unwrap();
        assert_eq!(s.store.scan_prefix(&s.tree, b"r", false).count(), 2);
        assert_eq!(s.get(5).unwrap(), Some(plan(5, Running)));
        // All of it after a crash (the WAL only) and a reopen.
        wait_durable(&store);
        let copy = tmp.path().join("crashed");
        crash_copy(&dir, &copy);
        let (_c, s2) = open(&copy);
        assert_eq!(ids(&s2), want);
        assert_eq!(s2.get(41).unwrap(), Some(big(41, Pending, 2000)));
        assert_eq!(s2.get(17).unwrap(), Some(plan(17, Succeeded)));
        assert_eq!(s2.list(Some(Pending), 100).unwrap().len(), 38);
    }

    #[test]
    fn a_cut_page_is_reported_as_corrupt() {
        let tmp = tempfile::tempdir().unwrap();
        let (store, s) = open(&tmp.path().join("db"));
        s.put(&plan(3, PlanState::Pending), None).unwrap();
        let page = s.store.get(&s.tree, &page_key(3)).unwrap().unwrap();
        let mut b = Batch::new();
        b.insert(page_key(3), page[..page.len() - 1].to_vec());
        store.apply(&s.tree, &b).unwrap();
        let e = s.get(3).unwrap_err().to_string();
        assert!(e.contains("plan page 0") && e.contains("cut"), "{e}");
    }

    #[test]
    fn a_cached_finished_plan_is_forgotten_when_it_changes_or_goes() {
        let tmp = tempfile::tempdir().unwrap();
        let (_store, s) = open(&tmp.path().join("db"));
        s.put(&plan(1, PlanState::Pending), None).unwrap();
        let mut done = plan(1, PlanState::Failed);
        s.put(&done, Some(PlanState::Pending)).unwrap();
        assert_eq!(s.get(1).unwrap().as_ref(), Some(&done));
        // Served from the cache now; a rewrite replaces it.
        assert_eq!(s.get(1).unwrap().as_ref(), Some(&done));
        done.reason = Some("rewritten".into());
        done.revision += 1;
        s.put(&done, Some(PlanState::Failed)).unwrap();
        assert_eq!(s.get(1).unwrap().as_ref(), Some(&done));
        s.delete(&done).unwrap();
        assert_eq!(s.get(1).unwrap(), None);
        assert_eq!(counts(&s), [0; 5]);
    }

    #[test]
    fn names_find_plans_newest_first_also_in_an_older_database() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db");
        let (store, s) = open(&dir);
        for (id, name) in [(1, "ab"), (2, "a"), (3, "a")] {
            let mut p = plan(id, PlanState::Pending);
            p.name = Some(name.into());
            s.put(&p, None).unwrap();
        }
        assert_eq!(s.find_by_name("a").unwrap(), vec![3, 2]);
        assert_eq!(s.find_by_name("ab").unwrap(), vec![1]);
        let mut gone = plan(3, PlanState::Pending);
        gone.name = Some("a".into());
        s.delete(&gone).unwrap();
        assert_eq!(s.find_by_name("a").unwrap(), vec![2]);
        // As written by a flytod without the index.
        let mut b = Batch::new();
        b.remove(NAMES_INDEXED);
        b.remove(name_key("a", 2));
        b.remove(name_key("ab", 1));
        store.apply(&s.tree, &b).unwrap();
        store.sync_blocking().unwrap();
        drop((s, store));
        let (_store, s) = open(&dir);
        assert_eq!(s.find_by_name("a").unwrap(), vec![2]);
        assert_eq!(s.find_by_name("ab").unwrap(), vec![1]);
    }

    #[test]
    fn a_database_without_counts_gets_them_from_the_index() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db");
        let (store, s) = open(&dir);
        fill(&s);
        // As written by a flytod without counts.
        let mut b = Batch::new();
        for st in STATES {
            b.remove(count_key(st));
        }
        store.apply(&s.tree, &b).unwrap();
        store.sync_blocking().unwrap();
        drop((s, store));
        let (store, s) = open(&dir);
        assert_eq!(counts(&s), FILLED);
        store.sync_blocking().unwrap();
        drop((s, store));
        // And they were stored.
        let (_store, s) = open(&dir);
        assert_eq!(
            s.tree
                .get(count_key(PlanState::Running))
                .unwrap()
                .as_deref(),
            Some(&1u64.to_be_bytes()[..])
        );
    }
}
