//! cache: what a scope actor remembers of its folder between messages —
//! each file's parsed entry and ranking terms, keyed by what `stat` says
//! of the file — so a search reads and parses only files that changed
//! instead of the whole folder.
//!
//! Hand edits are still seen. With a [`FolderWatch`], a use whose folder
//! had no inotify event since the last look is served from memory; every
//! other use lists the folder and stats each entry file; a file added,
//! removed, or with another size, mtime, ctime or inode is read again. A file changed within [`RACY`] of being read is
//! read again next time too, because a second edit in the same timestamp
//! tick (coarse on some filesystems) with the same size would look
//! unchanged. The actor also drops a file's record when it writes that file
//! itself. Memory is bounded: a folder holding more than
//! [`MAX_CACHED_BYTES`] of entry files is not cached (read every time).

use super::MemoryError;
use super::entry::{Entry, Problem};
use super::search::{Doc, Postings};
use super::store::{Scan, ScopeDir};
use super::watch::FolderWatch;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How recently changed a file is still read again on each use.
pub const RACY: Duration = Duration::from_secs(2);
/// Entry-file bytes above which a folder is not cached.
pub const MAX_CACHED_BYTES: u64 = 32 * 1024 * 1024;

/// A folder as of one look: its scan, and its entries' ranking terms
/// (in `scan.entries` order).
#[derive(Debug, Default)]
pub struct Snapshot {
    pub scan: Scan,
    pub postings: Postings,
}

/// What `stat` says of a file; any change means the file is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
}

impl Stamp {
    fn of(md: &std::fs::Metadata) -> Stamp {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Stamp {
            len: md.len(),
            mtime_ns: ns(md.mtime(), md.mtime_nsec()),
            ctime_ns: ns(md.ctime(), md.ctime_nsec()),
            ino: md.ino(),
        }
    }

    fn racy(&self, now_ns: i128) -> bool {
        now_ns - self.mtime_ns.max(self.ctime_ns) < RACY.as_nanos() as i128
    }
}

struct Cached {
    stamp: Stamp,
    outcome: Result<(Entry, Doc), Problem>,
    /// Changed too recently to trust the stamp: read again next time.
    racy: bool,
}

#[derive(Default)]
pub struct Cache {
    files: BTreeMap<String, Cached>,
    snapshot: Option<Arc<Snapshot>>,
    /// Without one, every use stats the folder.
    watch: Option<Arc<FolderWatch>>,
}

fn read(dir: &ScopeDir, file: &str) -> Result<(Entry, Doc), Problem> {
    dir.read_file(file).map(|e| {
        let doc = Doc::of(&e);
        (e, doc)
    })
}

impl Cache {
    pub fn watched_by(watch: Option<Arc<FolderWatch>>) -> Cache {
        Cache {
            watch,
            ..Cache::default()
        }
    }

    /// Forgets what it knew of `file` (the actor is about to change it).
    pub fn forget(&mut self, file: &str) {
        self.files.remove(file);
        self.snapshot = None;
    }

    /// The folder now: from memory for files unchanged since last time.
    pub fn snapshot(&mut self, dir: &ScopeDir) -> Result<Arc<Snapshot>, MemoryError> {
        // Asked even without a snapshot, so that the folder is watched from
        // the first look on.
        let quiet = self
            .watch
            .as_ref()
            .is_some_and(|w| !w.may_have_changed(&dir.dir));
        if quiet && let Some(s) = &self.snapshot {
            return Ok(s.clone());
        }
        let now_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        let mut old = std::mem::take(&mut self.files);
        let mut changed = self.snapshot.is_none();
        let mut bytes = 0u64;
        for d in dir.files()? {
            let file = d.file_name().to_string_lossy().into_owned();
            let Ok(md) = d.metadata() else {
                // Gone since the listing, or unreadable: the read reports it.
                let outcome = read(dir, &file);
                changed = true;
                self.files.insert(
                    file,
                    Cached {
                        stamp: Stamp {
                            len: 0,
                            mtime_ns: 0,
                            ctime_ns: 0,
                            ino: 0,
                        },
                        outcome,
                        racy: true,
                    },
                );
                continue;
            };
            let stamp = Stamp::of(&md);
            bytes += stamp.len;
            let racy = stamp.racy(now_ns);
            let cached = match old.remove(&file) {
                Some(c) if c.stamp == stamp && !c.racy => Cached { racy, ..c },
                prev => {
                    let outcome = read(dir, &file);
                    if prev.is_none_or(|p| p.outcome != outcome) {
                        changed = true;
                    }
                    Cached {
                        stamp,
                        outcome,
                        racy,
                    }
                }
            };
            self.files.insert(file, cached);
        }
        // A file that is gone.
        changed |= !old.is_empty();
        let snapshot = match (&self.snapshot, changed) {
            (Some(s), false) => s.clone(),
            _ => Arc::new(self.build()),
        };
        if bytes > MAX_CACHED_BYTES {
            self.files.clear();
            self.snapshot = None;
        } else {
            self.snapshot = Some(snapshot.clone());
        }
        Ok(snapshot)
    }

    fn build(&self) -> Snapshot {
        let mut s = Snapshot::default();
        let mut docs = Vec::new();
        for c in self.files.values() {
            match &c.outcome {
                Ok((e, doc)) => {
                    s.scan.entries.push(e.clone());
                    docs.push(doc);
                }
                Err(p) => s.scan.problems.push(p.clone()),
            }
        }
        s.postings = Postings::of(docs);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::memory::entry::Kind;
    use crate::memory::search::rank_indexed;
    use crate::memory::store::WriteReq;
    use std::fs;

    fn scope(dir: &std::path::Path) -> ScopeDir {
        ScopeDir {
            dir: dir.join("memory"),
            label: "project",
            clock: Arc::new(ManualClock::new(1_700_000_000_000)),
        }
    }

    fn req(name: &str, description: &str) -> WriteReq {
        WriteReq {
            name: name.into(),
            kind: Kind::Project,
            description: description.into(),
            body: "body".into(),
            source: "s-1".into(),
            session: None,
        }
    }

    fn search(cache: &mut Cache, dir: &ScopeDir, query: &str) -> Vec<String> {
        let snap = cache.snapshot(dir).unwrap();
        let entries: Vec<&Entry> = snap.scan.entries.iter().collect();
        rank_indexed(&entries, &[&snap.postings], query, 1_700_000_000_000, 5)
            .into_iter()
            .map(|s| entries[s.index].meta.name.clone())
            .collect()
    }

    #[test]
    fn a_hand_edit_after_a_cached_search_is_seen_by_the_next_search() {
        hand_edits_are_seen(Cache::default());
    }

    #[test]
    fn a_hand_edit_is_seen_through_the_folder_watch_too() {
        let watch = Arc::new(FolderWatch::new().unwrap());
        hand_edits_are_seen(Cache::watched_by(Some(watch.clone())));
        assert_eq!(watch.watched(), 1);
    }

    #[test]
    fn a_new_scope_folder_is_synced_up_to_the_folder_that_was_there() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let dir = scope(&root.join("projects/p1"));
        dir.write(&req("build", "how the project builds")).unwrap();
        // A power cut must not take the new folders, and the entry with
        // them: each is synced, and the one above the first created.
        let synced = crate::durable::synced_under(&root);
        for d in [
            root.clone(),
            root.join("projects"),
            root.join("projects/p1"),
            root.join("projects/p1/memory"),
        ] {
            assert!(
                synced.contains(&d),
                "{} not synced: {synced:?}",
                d.display()
            );
        }
    }

    fn hand_edits_are_seen(mut cache: Cache) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = scope(tmp.path());
        dir.write(&req("deploy-steps", "how we deploy to staging"))
            .unwrap();
        dir.write(&req("test-command", "run the tests with nextest"))
            .unwrap();
        assert_eq!(search(&mut cache, &dir, "kubernetes"), Vec::<String>::new());
        assert_eq!(search(&mut cache, &dir, "deploy"), ["deploy-steps"]);
        // A person edits the file in place (same inode), then adds one.
        let path = dir.path_of("test-command");
        let text = fs::read_to_string(&path).unwrap();
        fs::write(&path, text.replace("with nextest", "on kubernetes")).unwrap();
        assert_eq!(search(&mut cache, &dir, "kubernetes"), ["test-command"]);
        let added = text
            .replace("test-command", "k8s-notes")
            .replace("with nextest", "kubernetes notes");
        fs::write(dir.path_of("k8s-notes"), added).unwrap();
        assert_eq!(
            search(&mut cache, &dir, "kubernetes"),
            ["k8s-notes", "test-command"]
        );
        // Removed by hand, and broken by hand: both seen, the broken one
        // reported.
        fs::remove_file(dir.path_of("k8s-notes")).unwrap();
        fs::write(&path, "---\nname: [unclosed\n---\n").unwrap();
        assert_eq!(search(&mut cache, &dir, "kubernetes"), Vec::<String>::new());
        let snap = cache.snapshot(&dir).unwrap();
        assert_eq!(snap.scan.problems.len(), 1, "{:?}", snap.scan.problems);
        assert!(snap.scan.problems[0].file.ends_with("test-command.md"));
    }

    #[test]
    fn an_unchanged_folder_is_served_from_memory_until_a_stamp_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = scope(tmp.path());
        dir.write(&req("alpha", "first entry about caching"))
            .unwrap();
        dir.write(&req("beta", "second entry about caching"))
            .unwrap();
        let mut cache = Cache::default();
        let first = cache.snapshot(&dir).unwrap();
        let again = cache.snapshot(&dir).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "an unchanged folder is re-read"
        );
        // An edit keeping the size, with its mtime set back to the old one:
        // the ctime still tells.
        let path = dir.path_of("beta");
        let md = fs::metadata(&path).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        fs::write(&path, text.replace("second", "latest")).unwrap();
        let f = fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(md.modified().unwrap()).unwrap();
        let after = cache.snapshot(&dir).unwrap();
        assert!(!Arc::ptr_eq(&first, &after));
        assert_eq!(search(&mut cache, &dir, "latest"), ["beta"]);
    }
}
