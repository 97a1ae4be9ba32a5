//! The write-ahead log: every batch written through [`super::Store::apply`]
//! is framed into `<db dir>/flyto.wal` (sled ignores files it does not
//! know), and an acknowledgement waits for one `fdatasync` of that file
//! instead of a sled flush.
//!
//! # Format
//!
//! The file is preallocated to [`WAL_SIZE`] bytes of zeros (written and
//! synced once, when it is created), so that writing a record overwrites
//! blocks the file already owns: the `fdatasync` of an acknowledgement has
//! no file size or block allocation to write back. Records are framed as
//!
//! ```text
//! [len u32 BE][crc32 u32 BE of the payload][payload: len bytes]
//! payload = [lsn u64 BE][tree name len u16 BE][tree name][op count u32 BE]
//!           op = [0][key len u32 BE][key]                           remove
//!              | [1][key len u32 BE][key][value len u32 BE][value]   insert
//!              | [2][key len u32 BE][key][id u64 BE][value len u32 BE][value]
//!                                                   set a page's entry
//!              | [3][key len u32 BE][key][id u64 BE] drop a page's entry
//! ```
//!
//! A page's entry is written as itself: the page it belongs to (see
//! [`super::page`]) is patched when the record is applied, from what the
//! records before it left (or what sled holds), so a stream of small
//! records sharing a page costs the log their own bytes, not the page's.
//!
//! Every record has a log sequence number (lsn), one above the record
//! before it. Each group of records is written with 8 zero bytes after it,
//! so a log that ends cleanly ends with a zero length.
//!
//! # Write-ahead, then sled
//!
//! A writer only frames its batch into memory (and into an overlay that
//! reads consult, so it reads its own writes at once). The commit thread
//! writes a whole group to the log, `fdatasync`s it, runs the group's
//! continuations (replies, published views), and only then applies the
//! records to sled with plain inserts and removes, each tree's
//! [`LSN_KEY`] (the lsn of the last record applied to it) after its
//! records. So sled never holds a write that the log does not hold durably.
//!
//! About once a second, or when half the file is used, the commit thread
//! checkpoints: sled `flush`, `fdatasync` of sled's db file, `fsync` of new
//! blob files and of the blob directory. Everything in the log has been
//! applied to sled by then, so the next group is written at offset 0 again:
//! the file is *recycled*, never truncated, and never changes size.
//!
//! # Replay
//!
//! On open, the chain of records starting at offset 0 is read: each must
//! have a matching crc and an lsn one above the previous record's; the
//! first that does not ends the chain (a zero length is a clean end).
//! Records whose lsn is above their tree's [`LSN_KEY`] are applied to sled
//! in order; the others are already there. Then sled is flushed and synced
//! (a checkpoint), and new records get lsns above every lsn known plus
//! `WAL_SIZE`, written from offset 0.
//!
//! # Why this survives a power cut
//!
//! - **An acknowledged write is on disk.** A continuation runs only after
//!   the commit thread wrote every record appended before it was queued and
//!   `fdatasync` on the log returned (or, on the fallback path, after those
//!   records were applied to sled and a checkpoint synced sled). Replay
//!   brings sled up to every such record.
//! - **A torn tail is safe.** A group is written with one `pwrite`, then
//!   synced, and acknowledged only after the sync returns; that sync also
//!   covers every earlier group. So the first torn, corrupt or missing
//!   record after a crash belongs to a group that was never acknowledged,
//!   and so does everything after it: stopping the replay there loses
//!   nothing that was acknowledged. Its crc, its length or its lsn gives it
//!   away. sled never saw it either (write-ahead), so nothing half-applied
//!   is left behind.
//! - **A half-applied group is completed.** Whatever part of a group sled
//!   had written when the power went, the log holds the whole group durably
//!   (it was synced before sled got any of it), and its tree's lsn key was
//!   written after the group's records: sled recovers a prefix of its own
//!   log, so a tree whose lsn key is older gets the records replayed, in
//!   order, as full values and removals.
//! - **Recycling is safe.** The log only goes back to offset 0 after a
//!   checkpoint succeeded, and every record in the file was applied to sled
//!   before it began (the thread that writes the log applies each group
//!   right after). Records of an older cycle left in the file can never
//!   continue the new chain: their lsns are lower than any new record's,
//!   and their trees' lsn keys already cover them. At open the lsn jumps
//!   by `WAL_SIZE` (more records than the file can hold), so even records
//!   written after a torn one before a crash (never applied, never
//!   acknowledged) cannot later be mistaken for a continuation.
//! - **Replaying an old record is harmless.** The per-tree lsn key, written
//!   with the records it covers, tells replay which records a tree already
//!   has, so replay never rolls a tree back.
//! - **The file exists in full.** It is created as `flyto.wal.tmp`, zero
//!   filled, synced, renamed, and its directory synced, so after a crash it
//!   is either complete or absent; a file of another size (a copy, a
//!   truncation) is replaced only after its records were replayed and
//!   checkpointed. Nothing is acknowledged before open has finished.
//! - Writes made on a sled tree directly (see [`super::Store::mark_dirty`])
//!   are not in the log; the sync that acknowledges them is a checkpoint.

use super::StoreError;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Name of the log file inside the db directory (sled ignores other files).
pub const WAL_FILE: &str = "flyto.wal";
/// Size of the preallocated log. A checkpoint happens when half is used.
pub const WAL_SIZE: u64 = 4 << 20;
/// Reserved key in every tree written through [`super::Store::apply`]: the
/// lsn (u64 BE) of the last record applied to it. Keys starting with a zero
/// byte belong to the store; rooms must not use them.
pub const LSN_KEY: &[u8] = b"\0flyto.lsn";
/// Bytes of `[len][crc]` in front of each payload.
pub(super) const HEADER: usize = 8;
/// The zero bytes written after each group: a clean end of the log.
pub(super) const TERMINATOR: [u8; 8] = [0; 8];
/// Largest payload accepted (well below u32::MAX).
const MAX_PAYLOAD: usize = 1 << 30;

/// Writes to apply atomically to one tree: full values and removals, and
/// single entries of pages (see [`super::page`]).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Batch {
    ops: Vec<Op>,
}

#[derive(Debug, Clone, PartialEq)]
enum Op {
    /// A whole value (`None`: removed).
    Put(Vec<u8>, Option<Vec<u8>>),
    /// Entry `id` of the page at `key` set (`None`: dropped). `page` is the
    /// whole page after the write, for readers; the WAL gets the entry
    /// only.
    Entry {
        key: Vec<u8>,
        id: u64,
        value: Option<Vec<u8>>,
        page: sled::IVec,
    },
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    pub fn insert(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.ops.push(Op::Put(key.into(), Some(value.into())));
    }

    pub fn remove(&mut self, key: impl Into<Vec<u8>>) {
        self.ops.push(Op::Put(key.into(), None));
    }

    /// Sets entry `id` of the page at `key` to `value` (`None`: drops it).
    /// `page` must be the page as it is after this write (the stored one
    /// patched with [`super::page::with`]): readers see it at once, and
    /// sled gets the same once the entry's record is applied.
    pub fn set_entry(
        &mut self,
        key: impl Into<Vec<u8>>,
        id: u64,
        value: Option<Vec<u8>>,
        page: sled::IVec,
    ) {
        self.ops.push(Op::Entry {
            key: key.into(),
            id,
            value,
            page,
        });
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// The writes in order as readers see them: key and value (`None`:
    /// removed); an entry's write is its whole page (an empty page is
    /// removed).
    pub fn ops(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.ops.iter().map(|op| match op {
            Op::Put(k, v) => (k.as_slice(), v.as_deref()),
            Op::Entry { key, page, .. } => {
                (key.as_slice(), (!page.is_empty()).then_some(page.as_ref()))
            }
        })
    }

    /// Like [`Batch::ops`], with the values as the overlay holds them (a
    /// page is shared, not copied).
    pub(super) fn values(&self) -> impl Iterator<Item = (&[u8], Option<sled::IVec>)> {
        self.ops.iter().map(|op| match op {
            Op::Put(k, v) => (k.as_slice(), v.as_deref().map(sled::IVec::from)),
            Op::Entry { key, page, .. } => {
                (key.as_slice(), (!page.is_empty()).then(|| page.clone()))
            }
        })
    }
}

/// Appends one framed record to `buf`.
pub(super) fn encode(
    buf: &mut Vec<u8>,
    lsn: u64,
    tree: &[u8],
    batch: &Batch,
) -> Result<(), StoreError> {
    let size = 8
        + 2
        + tree.len()
        + 4
        + batch
            .ops
            .iter()
            .map(|op| match op {
                Op::Put(k, v) => 1 + 4 + k.len() + v.as_ref().map_or(0, |v| 4 + v.len()),
                Op::Entry { key, value, .. } => {
                    1 + 4 + key.len() + 8 + value.as_ref().map_or(0, |v| 4 + v.len())
                }
            })
            .sum::<usize>();
    if size > MAX_PAYLOAD || tree.len() > u16::MAX as usize || batch.ops.len() > u32::MAX as usize {
        return Err(StoreError::TooLarge { bytes: size });
    }
    buf.reserve(HEADER + size);
    let start = buf.len();
    buf.extend_from_slice(&(size as u32).to_be_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&lsn.to_be_bytes());
    buf.extend_from_slice(&(tree.len() as u16).to_be_bytes());
    buf.extend_from_slice(tree);
    buf.extend_from_slice(&(batch.ops.len() as u32).to_be_bytes());
    for op in &batch.ops {
        let (tag, key, id, value) = match op {
            Op::Put(k, v) => (u8::from(v.is_some()), k, None, v),
            Op::Entry { key, id, value, .. } => {
                (2 + u8::from(value.is_none()), key, Some(id), value)
            }
        };
        buf.push(tag);
        buf.extend_from_slice(&(key.len() as u32).to_be_bytes());
        buf.extend_from_slice(key);
        if let Some(id) = id {
            buf.extend_from_slice(&id.to_be_bytes());
        }
        if let Some(v) = value {
            buf.extend_from_slice(&(v.len() as u32).to_be_bytes());
            buf.extend_from_slice(v);
        }
    }
    let crc = crc32fast::hash(&buf[start + HEADER..]);
    buf[start + 4..start + HEADER].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// One write of a record, borrowing from the log bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum WalOp<'a> {
    /// A whole value (`None`: removed).
    Put(&'a [u8], Option<&'a [u8]>),
    /// One entry of the page at the key (`None`: dropped).
    Entry(&'a [u8], u64, Option<&'a [u8]>),
}

impl<'a> WalOp<'a> {
    pub(super) fn key(&self) -> &'a [u8] {
        match self {
            WalOp::Put(k, _) | WalOp::Entry(k, _, _) => k,
        }
    }
}

/// What a run of records writes to one tree in sled: the last value of
/// each key, with the entries written to a page patched into it (from the
/// page sled holds when no earlier record of the run wrote it).
#[derive(Default)]
pub(super) struct Writes<'a>(BTreeMap<&'a [u8], Pending<'a>>);

enum Pending<'a> {
    Value(Option<&'a [u8]>),
    Page(Vec<u8>),
}

impl<'a> Writes<'a> {
    pub(super) fn add(&mut self, tree: &sled::Tree, op: WalOp<'a>) -> Result<(), sled::Error> {
        match op {
            WalOp::Put(k, v) => {
                self.0.insert(k, Pending::Value(v));
            }
            WalOp::Entry(k, id, v) => {
                let page = match self.0.remove(k) {
                    Some(Pending::Page(p)) => super::page::patched(k, &p, id, v),
                    Some(Pending::Value(old)) => super::page::patched(k, old.unwrap_or(&[]), id, v),
                    None => super::page::patched(k, tree.get(k)?.as_deref().unwrap_or(&[]), id, v),
                };
                self.0.insert(k, Pending::Page(page));
            }
        }
        Ok(())
    }

    /// Writes them to `tree` (an empty page is removed).
    pub(super) fn write(&self, tree: &sled::Tree) -> Result<(), sled::Error> {
        for (k, w) in &self.0 {
            match w {
                Pending::Value(Some(v)) => tree.insert(k, *v).map(drop)?,
                Pending::Page(p) if !p.is_empty() => tree.insert(k, p.as_slice()).map(drop)?,
                Pending::Value(None) | Pending::Page(_) => tree.remove(k).map(drop)?,
            }
        }
        Ok(())
    }
}

/// One decoded record, borrowing from the log bytes.
#[derive(Debug, PartialEq)]
pub(super) struct Record<'a> {
    pub lsn: u64,
    pub tree: &'a [u8],
    pub ops: Vec<WalOp<'a>>,
}

/// What is at an offset of the log.
#[derive(Debug, PartialEq)]
pub(super) enum Frame<'a> {
    Record(Record<'a>, usize),
    /// A zero length, or the end of the file: nothing more was written.
    End,
    /// Not a whole, intact record.
    Torn(&'static str),
}

pub(super) fn frame_at(bytes: &[u8], off: usize) -> Frame<'_> {
    let Some(header) = bytes.get(off..off + HEADER) else {
        return Frame::End;
    };
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if len == 0 {
        return Frame::End;
    }
    let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    let Some(payload) = bytes.get(off + HEADER..off + HEADER + len) else {
        return Frame::Torn("the record runs past the end of the file");
    };
    if crc32fast::hash(payload) != crc {
        return Frame::Torn("the record's checksum does not match");
    }
    match parse(payload) {
        Some(rec) => Frame::Record(rec, off + HEADER + len),
        None => Frame::Torn("the record's checksum matches but its layout is invalid"),
    }
}

fn parse(p: &[u8]) -> Option<Record<'_>> {
    let mut r = Reader(p);
    let lsn = u64::from_be_bytes(r.take(8)?.try_into().ok()?);
    let name_len = u16::from_be_bytes(r.take(2)?.try_into().ok()?) as usize;
    let tree = r.take(name_len)?;
    let n = r.u32()?;
    let mut ops = Vec::with_capacity(n.min(4096) as usize);
    for _ in 0..n {
        let tag = r.take(1)?[0];
        let klen = r.u32()? as usize;
        let key = r.take(klen)?;
        let id = match tag {
            2 | 3 => Some(u64::from_be_bytes(r.take(8)?.try_into().ok()?)),
            _ => None,
        };
        let value = match tag {
            0 | 3 => None,
            1 | 2 => {
                let vlen = r.u32()? as usize;
                Some(r.take(vlen)?)
            }
            _ => return None,
        };
        ops.push(match id {
            Some(id) => WalOp::Entry(key, id, value),
            None => WalOp::Put(key, value),
        });
    }
    r.0.is_empty().then_some(Record { lsn, tree, ops })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
}

/// How the chain of records read at open ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Tail {
    /// A zero length or the end of the file.
    Clean,
    /// An intact record of an older cycle (already in sled) follows.
    OlderCycle,
    /// A torn or corrupt record at `offset`: it and everything after it
    /// were never acknowledged, and are dropped.
    Torn { offset: u64, reason: &'static str },
}

/// What replay found in the log at open.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovery {
    /// Records applied to sled.
    pub replayed: u64,
    /// Records sled already had (lsn not above their tree's).
    pub skipped: u64,
    /// Bytes of the chain.
    pub bytes: u64,
    pub tail: Tail,
    /// The highest lsn in the chain.
    pub last_lsn: Option<u64>,
}

impl Recovery {
    pub fn torn_tail_dropped(&self) -> bool {
        matches!(self.tail, Tail::Torn { .. })
    }
}

/// A tree being replayed: its lsn before replay, the last lsn replayed,
/// and the writes to make (the last one per key).
type Replay<'a> = (sled::Tree, u64, u64, Writes<'a>);

/// Applies the chain of records at the start of `bytes` to `db`: each
/// tree gets the records above its lsn key, as plain writes (the last one
/// per key), then its new lsn key. A crash in the middle replays it all
/// again: the log is not touched until a checkpoint covers the replay.
pub(super) fn replay(db: &sled::Db, bytes: &[u8]) -> Result<Recovery, sled::Error> {
    let mut trees: HashMap<&[u8], Replay<'_>> = HashMap::new();
    let mut out = Recovery {
        replayed: 0,
        skipped: 0,
        bytes: 0,
        tail: Tail::Clean,
        last_lsn: None,
    };
    let mut off = 0;
    loop {
        let (rec, next) = match frame_at(bytes, off) {
            Frame::Record(rec, next) => (rec, next),
            Frame::End => break,
            Frame::Torn(reason) => {
                out.tail = Tail::Torn {
                    offset: off as u64,
                    reason,
                };
                break;
            }
        };
        if out.last_lsn.is_some_and(|last| rec.lsn != last + 1) {
            out.tail = Tail::OlderCycle;
            break;
        }
        let (tree, applied, last, writes) = match trees.entry(rec.tree) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let tree = db.open_tree(rec.tree)?;
                let applied = tree_lsn(&tree)?;
                e.insert((tree, applied, applied, Writes::default()))
            }
        };
        if rec.lsn > *applied {
            for op in rec.ops {
                writes.add(tree, op)?;
            }
            *last = rec.lsn;
            out.replayed += 1;
        } else {
            out.skipped += 1;
        }
        out.last_lsn = Some(rec.lsn);
        out.bytes = next as u64;
        off = next;
    }
    for (tree, applied, last, writes) in trees.values() {
        if last <= applied {
            continue;
        }
        writes.write(tree)?;
        tree.insert(LSN_KEY, &last.to_be_bytes())?;
    }
    Ok(out)
}

/// The lsn of the last record applied to `tree` (0 if none).
pub(super) fn tree_lsn(tree: &sled::Tree) -> Result<u64, sled::Error> {
    Ok(tree
        .get(LSN_KEY)?
        .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0))
}

/// The highest lsn any tree of `db` has applied.
pub(super) fn max_tree_lsn(db: &sled::Db) -> Result<u64, sled::Error> {
    let mut max = 0;
    for name in db.tree_names() {
        max = max.max(tree_lsn(&db.open_tree(name)?)?);
    }
    Ok(max)
}

/// Reads the whole log, or nothing if it does not exist.
pub(super) fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    match std::fs::read(path) {
        Ok(b) => Ok(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Opens the log for writing, (re)creating it zero-filled at full size if
/// it is missing or has another size.
pub(super) fn open_for_writing(path: &Path, existing_len: u64) -> std::io::Result<File> {
    if existing_len != WAL_SIZE {
        create(path)?;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
}

/// Creates the zero-filled log atomically: temp file, sync, rename, sync dir.
fn create(path: &Path) -> std::io::Result<()> {
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    let zeros = vec![0u8; 64 * 1024];
    let mut left = WAL_SIZE as usize;
    while left > 0 {
        let n = left.min(zeros.len());
        f.write_all(&zeros[..n])?;
        left -= n;
    }
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// `fsync` of a directory: makes its entries (created, renamed) durable.
pub(super) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(ops: &[(&str, Option<&str>)]) -> Batch {
        let mut b = Batch::new();
        for (k, v) in ops {
            match v {
                Some(v) => b.insert(k.as_bytes(), v.as_bytes()),
                None => b.remove(k.as_bytes()),
            }
        }
        b
    }

    #[test]
    fn records_round_trip_and_end_cleanly() {
        let mut buf = Vec::new();
        encode(
            &mut buf,
            7,
            b"plans",
            &batch(&[("a", Some("1")), ("b", None)]),
        )
        .unwrap();
        encode(&mut buf, 8, b"t", &Batch::new()).unwrap();
        buf.extend_from_slice(&TERMINATOR);
        let Frame::Record(rec, next) = frame_at(&buf, 0) else {
            panic!("no record")
        };
        assert_eq!(rec.lsn, 7);
        assert_eq!(rec.tree, b"plans");
        assert_eq!(
            rec.ops,
            vec![
                WalOp::Put(&b"a"[..], Some(&b"1"[..])),
                WalOp::Put(&b"b"[..], None)
            ]
        );
        let Frame::Record(rec, end) = frame_at(&buf, next) else {
            panic!("no second record")
        };
        assert_eq!((rec.lsn, rec.ops.len()), (8, 0));
        assert_eq!(frame_at(&buf, end), Frame::End);
        assert_eq!(frame_at(&buf, buf.len()), Frame::End);
    }

    #[test]
    fn a_flipped_byte_or_a_cut_record_is_torn() {
        let mut buf = Vec::new();
        encode(&mut buf, 1, b"t", &batch(&[("key", Some("value"))])).unwrap();
        let mut flipped = buf.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(matches!(frame_at(&flipped, 0), Frame::Torn(_)));
        assert!(matches!(frame_at(&buf[..buf.len() - 2], 0), Frame::Torn(_)));
    }
}
