//! Crash tests of the WAL: a crash is simulated by copying the files of a
//! live store (sled not flushed since open) and opening the copy.

use super::testutil::{crash_copy, hold_commits, open_no_checkpoint, record_offsets, wait_durable};
use super::wal::{self, WAL_FILE, WAL_SIZE};
use super::{Batch, Store, Tail};
use std::path::Path;

fn put(store: &Store, tree: &str, key: &str, value: &[u8]) {
    let t = store.tree(tree).unwrap();
    let mut b = Batch::new();
    b.insert(key.as_bytes(), value);
    store.apply(&t, &b).unwrap();
}

fn get(store: &Store, tree: &str, key: &str) -> Option<Vec<u8>> {
    store
        .tree(tree)
        .unwrap()
        .get(key)
        .unwrap()
        .map(|v| v.to_vec())
}

/// What plain sled (no WAL replay) finds in `dir`; opens a copy so that
/// sled's own writes at close do not touch `dir`.
fn sled_only(dir: &Path, tree: &str, key: &str) -> Option<Vec<u8>> {
    let scratch = tempfile::tempdir().unwrap();
    let copy = scratch.path().join("db");
    crash_copy(dir, &copy);
    let db = sled::open(&copy).unwrap();
    db.open_tree(tree)
        .unwrap()
        .get(key)
        .unwrap()
        .map(|v| v.to_vec())
}

#[test]
fn acknowledged_writes_are_replayed_from_the_wal_after_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let (live, crashed) = (tmp.path().join("live"), tmp.path().join("crashed"));
    let store = open_no_checkpoint(&live);
    put(&store, "plans", "a", b"1");
    put(&store, "other", "b", b"2");
    let t = store.tree("plans").unwrap();
    let mut b = Batch::new();
    b.insert(&b"c"[..], &b"3"[..]);
    b.remove(&b"a"[..]);
    store.apply(&t, &b).unwrap();
    wait_durable(&store);
    crash_copy(&live, &crashed);
    drop(store);

    // sled's own files do not have the writes: only the WAL does.
    assert_eq!(sled_only(&crashed, "plans", "c"), None);
    assert_eq!(sled_only(&crashed, "other", "b"), None);

    let store = open_no_checkpoint(&crashed);
    assert_eq!(store.recovery().replayed, 3, "{:?}", store.recovery());
    assert_eq!(store.recovery().tail, Tail::Clean);
    assert_eq!(get(&store, "plans", "a"), None);
    assert_eq!(get(&store, "plans", "c"), Some(b"3".to_vec()));
    assert_eq!(get(&store, "other", "b"), Some(b"2".to_vec()));
    // Open checkpointed the replay: sled alone has it now.
    drop(store);
    assert_eq!(sled_only(&crashed, "plans", "c"), Some(b"3".to_vec()));
}

/// Three records in three groups; returns the crashed copy's WAL bytes and
/// the offsets of the records.
fn three_groups(live: &Path, crashed: &Path) -> (Vec<u8>, Vec<usize>, usize) {
    let store = open_no_checkpoint(live);
    for (k, v) in [("k1", "v1"), ("k2", "v2"), ("k3", "v3")] {
        put(&store, "t", k, v.as_bytes());
        wait_durable(&store);
    }
    crash_copy(live, crashed);
    drop(store);
    let bytes = std::fs::read(crashed.join(WAL_FILE)).unwrap();
    let (offsets, end) = record_offsets(&bytes);
    assert_eq!(offsets.len(), 3);
    (bytes, offsets, end)
}

fn assert_third_dropped(dir: &Path) {
    let store = open_no_checkpoint(dir);
    let r = store.recovery().clone();
    assert_eq!(r.replayed, 2, "{r:?}");
    assert!(r.torn_tail_dropped(), "{r:?}");
    assert_eq!(get(&store, "t", "k1"), Some(b"v1".to_vec()));
    assert_eq!(get(&store, "t", "k2"), Some(b"v2".to_vec()));
    assert_eq!(get(&store, "t", "k3"), None);
    // The store works on: new writes get through a crash too.
    put(&store, "t", "k4", b"v4");
    wait_durable(&store);
    let again = dir.with_extension("again");
    crash_copy(dir, &again);
    drop(store);
    let store = open_no_checkpoint(&again);
    assert_eq!(get(&store, "t", "k4"), Some(b"v4".to_vec()));
    assert_eq!(get(&store, "t", "k3"), None);
    assert!(
        !store.recovery().torn_tail_dropped(),
        "{:?}",
        store.recovery()
    );
}

#[test]
fn a_cut_last_record_is_dropped_and_the_earlier_ones_replayed() {
    let tmp = tempfile::tempdir().unwrap();
    let (live, crashed) = (tmp.path().join("live"), tmp.path().join("crashed"));
    let (_, offsets, end) = three_groups(&live, &crashed);
    let cut = offsets[2] + (end - offsets[2]) / 2;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(crashed.join(WAL_FILE))
        .unwrap();
    f.set_len(cut as u64).unwrap();
    drop(f);
    assert_third_dropped(&crashed);
    // The short file was replaced by a full-size one.
    let len = std::fs::metadata(crashed.join(WAL_FILE)).unwrap().len();
    assert_eq!(len, WAL_SIZE);
}

#[test]
fn a_flipped_byte_in_the_last_record_drops_only_that_record() {
    let tmp = tempfile::tempdir().unwrap();
    let (live, crashed) = (tmp.path().join("live"), tmp.path().join("crashed"));
    let (mut bytes, _, end) = three_groups(&live, &crashed);
    bytes[end - 1] ^= 0x40;
    std::fs::write(crashed.join(WAL_FILE), &bytes).unwrap();
    assert_third_dropped(&crashed);
}

#[test]
fn replaying_a_log_again_or_an_older_log_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (live, crashed) = (tmp.path().join("live"), tmp.path().join("crashed"));
    let store = open_no_checkpoint(&live);
    put(&store, "t", "k", b"old");
    put(&store, "t", "gone", b"x");
    wait_durable(&store);
    let old_log = std::fs::read(live.join(WAL_FILE)).unwrap();
    put(&store, "t", "k", b"new");
    let t = store.tree("t").unwrap();
    let mut b = Batch::new();
    b.remove(&b"gone"[..]);
    store.apply(&t, &b).unwrap();
    wait_durable(&store);
    crash_copy(&live, &crashed);
    let crash_log = std::fs::read(crashed.join(WAL_FILE)).unwrap();
    drop(store);

    let check = |store: &Store| {
        assert_eq!(get(store, "t", "k"), Some(b"new".to_vec()));
        assert_eq!(get(store, "t", "gone"), None);
    };
    let store = open_no_checkpoint(&crashed);
    assert_eq!(store.recovery().replayed, 4);
    check(&store);
    drop(store);

    // As if the crash had come between sled's sync and the WAL's reuse.
    std::fs::write(crashed.join(WAL_FILE), &crash_log).unwrap();
    let store = open_no_checkpoint(&crashed);
    assert_eq!(store.recovery().replayed, 0, "{:?}", store.recovery());
    assert_eq!(store.recovery().skipped, 4);
    check(&store);
    drop(store);

    // A log older than what sled holds must not roll it back.
    std::fs::write(crashed.join(WAL_FILE), &old_log).unwrap();
    let store = open_no_checkpoint(&crashed);
    assert_eq!(store.recovery().replayed, 0, "{:?}", store.recovery());
    check(&store);
}

#[test]
fn sled_ahead_of_the_wal_is_not_rolled_back() {
    // sled may hold writes whose WAL group was never synced (its own
    // writes reach the disk on their own): replaying the shorter log must
    // keep the newer values, not mix old and new.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let store = open_no_checkpoint(&dir);
    put(&store, "t", "k", b"v1");
    wait_durable(&store);
    let short_log = std::fs::read(dir.join(WAL_FILE)).unwrap();
    put(&store, "t", "k", b"v2");
    store.sync_blocking().unwrap();
    drop(store);
    std::fs::write(dir.join(WAL_FILE), &short_log).unwrap();
    let store = open_no_checkpoint(&dir);
    assert_eq!(get(&store, "t", "k"), Some(b"v2".to_vec()));
}

#[test]
fn the_log_starts_over_after_a_checkpoint_and_old_records_end_the_chain() {
    // Equal-size records, so that the old cycle has a record exactly where
    // the new cycle's first record ends.
    let tmp = tempfile::tempdir().unwrap();
    let (live, crashed) = (tmp.path().join("live"), tmp.path().join("crashed"));
    let store = open_no_checkpoint(&live);
    let value = |i: u8| vec![i; 200 * 1024];
    // 11 records pass half the log: the commit thread checkpoints after
    // that group and starts over at offset 0.
    for i in 0..11u8 {
        put(&store, "t", &format!("k{i:02}"), &value(i));
        wait_durable(&store);
    }
    let old_cycle = std::fs::read(live.join(WAL_FILE)).unwrap();
    put(&store, "t", "k11", &value(11));
    wait_durable(&store);
    crash_copy(&live, &crashed);
    drop(store);
    let new_cycle = std::fs::read(crashed.join(WAL_FILE)).unwrap();
    let (offsets, end) = record_offsets(&new_cycle);
    assert_eq!(offsets, vec![0], "k11 went to offset 0");
    let (old_offsets, _) = record_offsets(&old_cycle);
    assert_eq!(old_offsets[1], end, "equal sizes");

    // As if the zero terminator after k11 never reached the disk.
    let mut crafted = new_cycle[..end].to_vec();
    crafted.extend_from_slice(&old_cycle[end..]);
    std::fs::write(crashed.join(WAL_FILE), &crafted).unwrap();
    let store = open_no_checkpoint(&crashed);
    let r = store.recovery().clone();
    assert_eq!(r.tail, Tail::OlderCycle, "{r:?}");
    assert_eq!((r.replayed, r.skipped), (1, 0), "{r:?}");
    for i in 0..12u8 {
        assert_eq!(
            get(&store, "t", &format!("k{i:02}")),
            Some(value(i)),
            "k{i:02}"
        );
    }
}

#[test]
fn large_groups_and_blobs_survive_through_checkpoints() {
    // A value bigger than the whole log is made durable by a checkpoint;
    // values above sled's blob threshold live in files sled never syncs.
    let tmp = tempfile::tempdir().unwrap();
    let (live, crashed) = (tmp.path().join("live"), tmp.path().join("crashed"));
    let store = open_no_checkpoint(&live);
    let huge = vec![7u8; WAL_SIZE as usize + 1000];
    put(&store, "t", "huge", &huge);
    wait_durable(&store);
    let blob = vec![9u8; 300 * 1024];
    for i in 0..12 {
        put(&store, "t", &format!("blob{i}"), &blob);
        wait_durable(&store);
    }
    crash_copy(&live, &crashed);
    drop(store);
    let store = open_no_checkpoint(&crashed);
    assert_eq!(get(&store, "t", "huge"), Some(huge));
    for i in 0..12 {
        assert_eq!(
            get(&store, "t", &format!("blob{i}")).as_deref(),
            Some(&blob[..])
        );
    }
}

#[test]
fn concurrent_writers_share_syncs_and_all_survive() {
    let tmp = tempfile::tempdir().unwrap();
    let (live, crashed) = (tmp.path().join("live"), tmp.path().join("crashed"));
    let store = open_no_checkpoint(&live);
    std::thread::scope(|s| {
        for w in 0..8 {
            let store = store.clone();
            s.spawn(move || {
                for i in 0..50 {
                    put(&store, "t", &format!("w{w}-{i}"), b"v");
                    wait_durable(&store);
                }
            });
        }
    });
    crash_copy(&live, &crashed);
    drop(store);
    let store = open_no_checkpoint(&crashed);
    for w in 0..8 {
        for i in 0..50 {
            assert_eq!(get(&store, "t", &format!("w{w}-{i}")), Some(b"v".to_vec()));
        }
    }
}

#[test]
fn writes_queued_during_a_sync_share_the_next_one() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let store = open_no_checkpoint(&tmp.path().join("db"));
    let before = store.disk_syncs();
    let acked = Arc::new(AtomicUsize::new(0));
    let held = hold_commits(&store);
    // While the commit thread is held (as if in a slow fdatasync), 100
    // writers each append and wait for their acknowledgement.
    for i in 0..100 {
        put(&store, "t", &format!("k{i}"), b"v");
        let acked = acked.clone();
        store.after_sync(Box::new(move |r| {
            r.unwrap();
            acked.fetch_add(1, Ordering::SeqCst);
        }));
    }
    drop(held);
    wait_durable(&store);
    assert_eq!(acked.load(Ordering::SeqCst), 100);
    // The group the thread had taken when it was held, then all the rest.
    let syncs = store.disk_syncs() - before;
    assert!((1..=2).contains(&syncs), "{syncs} syncs for 100 writes");
}

#[test]
fn direct_sled_writes_marked_dirty_are_synced_by_a_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let (live, crashed) = (tmp.path().join("live"), tmp.path().join("crashed"));
    let store = open_no_checkpoint(&live);
    let t = store.tree("legacy").unwrap();
    t.insert("k", "v").unwrap();
    store.mark_dirty();
    wait_durable(&store);
    crash_copy(&live, &crashed);
    drop(store);
    assert_eq!(sled_only(&crashed, "legacy", "k"), Some(b"v".to_vec()));
}

#[test]
fn the_wal_is_created_full_size_with_its_directory_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let store = open_no_checkpoint(&dir);
    assert_eq!(
        std::fs::metadata(dir.join(WAL_FILE)).unwrap().len(),
        WAL_SIZE
    );
    assert!(!dir.join(format!("{WAL_FILE}.tmp")).exists());
    assert_eq!(wal::max_tree_lsn(&store.inner.db).unwrap(), 0);
}

#[test]
fn reads_and_scans_see_writes_before_sled_has_them() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_no_checkpoint(&tmp.path().join("db"));
    let t = store.tree("t").unwrap();
    for k in ["k1", "k2", "k3", "k4", "k5"] {
        put(&store, "t", k, b"old");
    }
    wait_durable(&store);
    let mut b = Batch::new();
    b.remove(&b"k2"[..]);
    b.insert(&b"k3"[..], &b"new"[..]);
    b.insert(&b"k6"[..], &b"new"[..]);
    b.insert(&b"j"[..], &b"other prefix"[..]);
    store.apply(&t, &b).unwrap();

    let expect = [
        ("k1", "old"),
        ("k3", "new"),
        ("k4", "old"),
        ("k5", "old"),
        ("k6", "new"),
    ];
    let check = |store: &Store| {
        assert_eq!(store.get(&t, b"k2").unwrap(), None);
        assert_eq!(store.get(&t, b"k3").unwrap().as_deref(), Some(&b"new"[..]));
        let scan = |reverse| -> Vec<(String, String)> {
            store
                .scan_prefix(&t, b"k", reverse)
                .map(|kv| {
                    let (k, v) = kv.unwrap();
                    (
                        String::from_utf8(k.to_vec()).unwrap(),
                        String::from_utf8(v.to_vec()).unwrap(),
                    )
                })
                .collect()
        };
        let forward: Vec<_> = expect
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(scan(false), forward);
        let mut backward = forward.clone();
        backward.reverse();
        assert_eq!(scan(true), backward);
        let ranged: Vec<_> = store
            .range(&t, b"k2", b"k5", true)
            .map(|kv| kv.unwrap().0.to_vec())
            .collect();
        assert_eq!(ranged, vec![b"k4".to_vec(), b"k3".to_vec()]);
    };
    // Not durable yet: the overlay answers, merged with sled.
    check(&store);
    wait_durable(&store);
    store.sync_blocking().unwrap();
    // Now from sled alone.
    check(&store);
    assert_eq!(
        store
            .inner
            .log
            .overlay_range(&t, (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)),
        vec![]
    );
}

#[test]
fn writes_nobody_waits_for_reach_sled_within_a_period() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_with(
        &tmp.path().join("db"),
        8 << 20,
        std::time::Duration::from_millis(20),
    )
    .unwrap();
    let t = store.tree("t").unwrap();
    let mut b = Batch::new();
    b.insert(&b"k"[..], &b"v"[..]);
    store.apply(&t, &b).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while t.get(b"k").unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "never applied to sled"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn a_key_written_several_times_in_a_group_ends_with_its_last_value() {
    let tmp = tempfile::tempdir().unwrap();
    let (live, crashed) = (tmp.path().join("live"), tmp.path().join("crashed"));
    let store = open_no_checkpoint(&live);
    let t = store.tree("t").unwrap();
    let steps: [(&str, Option<&str>); 6] = [
        ("a", Some("1")),
        ("b", Some("1")),
        ("a", Some("2")),
        ("b", None),
        ("c", None),
        ("c", Some("3")),
    ];
    for (k, v) in steps {
        let mut b = Batch::new();
        match v {
            Some(v) => b.insert(k.as_bytes(), v.as_bytes()),
            None => b.remove(k.as_bytes()),
        }
        store.apply(&t, &b).unwrap();
    }
    wait_durable(&store);
    crash_copy(&live, &crashed);
    store.sync_blocking().unwrap();
    let expect = |s: &Store| {
        assert_eq!(get(s, "t", "a"), Some(b"2".to_vec()));
        assert_eq!(get(s, "t", "b"), None);
        assert_eq!(get(s, "t", "c"), Some(b"3".to_vec()));
    };
    // Applied to sled (sync_blocking waits for the group's application).
    expect(&store);
    assert_eq!(t.get("a").unwrap().as_deref(), Some(&b"2"[..]));
    drop(store);
    let store = open_no_checkpoint(&crashed);
    assert_eq!(store.recovery().replayed, 6);
    expect(&store);
}

#[test]
fn a_panicking_continuation_does_not_stop_later_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_no_checkpoint(&tmp.path().join("db"));
    put(&store, "t", "a", b"1");
    store.after_sync(Box::new(|_| panic!("a bug in a continuation")));
    put(&store, "t", "b", b"2");
    wait_durable(&store);
    store.sync_blocking().unwrap();
    assert_eq!(get(&store, "t", "b"), Some(b"2".to_vec()));
}

#[test]
fn every_continuation_runs_after_its_write_is_in_the_log() {
    // Writers that queue two continuations per write, as the scheduler
    // does (publish, reply): the second often arrives while the group is
    // being committed and is answered before the apply. Each continuation
    // checks that its write is already in the log file.
    use std::io::Read;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let store = open_no_checkpoint(&dir);
    let wal_path = dir.join(WAL_FILE);
    let missing = Arc::new(Mutex::new(Vec::new()));
    let ran = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|s| {
        for w in 0..6 {
            let (store, wal_path) = (store.clone(), wal_path.clone());
            let (missing, ran) = (missing.clone(), ran.clone());
            s.spawn(move || {
                for i in 0..40 {
                    let value = format!("<value {w}-{i}>");
                    put(&store, "t", &format!("k{w}-{i}"), value.as_bytes());
                    for _ in 0..2 {
                        let (value, wal_path) = (value.clone(), wal_path.clone());
                        let (missing, ran) = (missing.clone(), ran.clone());
                        store.after_sync(Box::new(move |r| {
                            r.unwrap();
                            let mut head = vec![0u8; 256 * 1024];
                            let mut f = std::fs::File::open(&wal_path).unwrap();
                            f.read_exact(&mut head).unwrap();
                            if !head.windows(value.len()).any(|win| win == value.as_bytes()) {
                                missing.lock().unwrap().push(value);
                            }
                            ran.fetch_add(1, Ordering::SeqCst);
                        }));
                    }
                }
                wait_durable(&store);
            });
        }
    });
    assert_eq!(ran.load(Ordering::SeqCst), 6 * 40 * 2);
    let missing = missing.lock().unwrap();
    assert!(
        missing.is_empty(),
        "continuations ran before their write was in the log: {missing:?}"
    );
}

#[test]
fn a_lone_writer_syncs_on_its_own_thread_and_survives_a_crash() {
    use super::testutil::{wait_applied, wait_committer_idle};
    use std::sync::{Arc, Mutex};
    let tmp = tempfile::tempdir().unwrap();
    let (live, crashed) = (tmp.path().join("live"), tmp.path().join("crashed"));
    let store = open_no_checkpoint(&live);
    wait_committer_idle(&store);
    let before = store.disk_syncs();
    put(&store, "plans", "a", b"1");
    let ran_on = Arc::new(Mutex::new(None));
    let seen = ran_on.clone();
    store.after_sync_leading(Box::new(move |r| {
        r.unwrap();
        *seen.lock().unwrap() = Some(std::thread::current().id());
    }));
    // Answered before the call returned, on the writer's own thread.
    assert_eq!(
        *ran_on.lock().unwrap(),
        Some(std::thread::current().id()),
        "the continuation did not run on the leading writer"
    );
    assert_eq!(store.disk_syncs() - before, 1);
    crash_copy(&live, &crashed);
    // The commit thread applies it to sled later, on its own.
    wait_applied(&store);
    assert_eq!(get(&store, "plans", "a"), Some(b"1".to_vec()));
    drop(store);
    assert_eq!(sled_only(&crashed, "plans", "a"), None);
    let store = open_no_checkpoint(&crashed);
    assert_eq!(store.recovery().replayed, 1, "{:?}", store.recovery());
    assert_eq!(get(&store, "plans", "a"), Some(b"1".to_vec()));
}

#[test]
fn what_a_leader_committed_reaches_sled_before_later_writes_of_the_same_key() {
    use super::testutil::{wait_applied, wait_committer_idle};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let store = open_no_checkpoint(&dir);
    let t = store.tree("t").unwrap();
    for round in 0..20u32 {
        wait_committer_idle(&store);
        put(&store, "t", "k", format!("led {round}").as_bytes());
        store.after_sync_leading(Box::new(|r| r.unwrap()));
        // The next value goes through the commit thread, which must apply
        // the led record first.
        put(&store, "t", "k", format!("last {round}").as_bytes());
        wait_durable(&store);
        wait_applied(&store);
        assert_eq!(
            t.get(b"k").unwrap().map(|v| v.to_vec()),
            Some(format!("last {round}").into_bytes()),
            "round {round}: sled ended with an older value"
        );
    }
    drop(t);
    drop(store);
    let store = open_no_checkpoint(&dir);
    assert_eq!(get(&store, "t", "k"), Some(b"last 19".to_vec()));
}

#[test]
fn a_writer_does_not_lead_while_the_commit_thread_is_busy() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let store = open_no_checkpoint(&tmp.path().join("db"));
    let held = hold_commits(&store);
    put(&store, "t", "a", b"1");
    let ran = Arc::new(AtomicBool::new(false));
    let seen = ran.clone();
    store.after_sync_leading(Box::new(move |r| {
        r.unwrap();
        seen.store(true, Ordering::SeqCst);
    }));
    assert!(
        !ran.load(Ordering::SeqCst),
        "answered before anything could be durable"
    );
    drop(held);
    wait_durable(&store);
    assert!(ran.load(Ordering::SeqCst));
}

#[test]
fn leading_and_queued_writers_together_lose_nothing_and_answer_in_order() {
    use std::sync::{Arc, Mutex};
    let tmp = tempfile::tempdir().unwrap();
    let (live, crashed) = (tmp.path().join("live"), tmp.path().join("crashed"));
    let store = Store::open_with(&live, 8 << 20, std::time::Duration::from_millis(30)).unwrap();
    std::thread::scope(|s| {
        for w in 0..6 {
            let store = store.clone();
            s.spawn(move || {
                let answered = Arc::new(Mutex::new(Vec::new()));
                for i in 0..150 {
                    put(&store, "t", &format!("w{w}-{i}"), b"v");
                    let answered = answered.clone();
                    let then: super::AfterSync = Box::new(move |r| {
                        r.unwrap();
                        answered.lock().unwrap().push(i);
                    });
                    if i % 3 == 0 {
                        store.after_sync(then);
                    } else {
                        store.after_sync_leading(then);
                    }
                }
                wait_durable(&store);
                let answered = answered.lock().unwrap();
                assert_eq!(*answered, (0..150).collect::<Vec<_>>(), "writer {w}");
            });
        }
    });
    crash_copy(&live, &crashed);
    drop(store);
    let store = open_no_checkpoint(&crashed);
    for w in 0..6 {
        for i in 0..150 {
            assert_eq!(get(&store, "t", &format!("w{w}-{i}")), Some(b"v".to_vec()));
        }
    }
}

#[test]
fn after_a_group_of_several_writers_the_next_one_does_not_lead_until_one_is_alone() {
    use super::testutil::wait_committer_idle;
    use std::sync::{Arc, Mutex};
    let tmp = tempfile::tempdir().unwrap();
    let store = open_no_checkpoint(&tmp.path().join("db"));
    let me = std::thread::current().id();
    let lead = |key: &str| {
        wait_committer_idle(&store);
        put(&store, "t", key, b"v");
        let ran_on = Arc::new(Mutex::new(None));
        let seen = ran_on.clone();
        store.after_sync_leading(Box::new(move |r| {
            r.unwrap();
            *seen.lock().unwrap() = Some(std::thread::current().id());
        }));
        wait_durable(&store);
        let ran_on = *ran_on.lock().unwrap();
        ran_on == Some(me)
    };
    assert!(lead("alone"), "a lone writer on an idle store leads");
    // Several writers share a group while the commit thread is held.
    let held = hold_commits(&store);
    for i in 0..5 {
        put(&store, "t", &format!("k{i}"), b"v");
        store.after_sync(Box::new(|r| r.unwrap()));
    }
    drop(held);
    wait_durable(&store);
    assert!(
        !lead("after the crowd"),
        "led right after a group of several"
    );
    // That group was a lone one: the next writer leads again.
    assert!(lead("alone again"));
}

#[test]
fn a_leader_whose_wal_write_fails_hands_its_group_to_the_commit_thread() {
    use super::testutil::{fail_next_lead_write, wait_committer_idle};
    use std::sync::{Arc, Mutex};
    let tmp = tempfile::tempdir().unwrap();
    let (live, crashed) = (tmp.path().join("live"), tmp.path().join("crashed"));
    let store = open_no_checkpoint(&live);
    wait_committer_idle(&store);
    put(&store, "t", "a", b"1");
    fail_next_lead_write(&store);
    let answer = Arc::new(Mutex::new(None));
    let seen = answer.clone();
    store.after_sync_leading(Box::new(move |r| {
        *seen.lock().unwrap() = Some((r.is_ok(), std::thread::current().id()));
    }));
    // Then a write made after it, which must land after it.
    put(&store, "t", "a", b"2");
    wait_durable(&store);
    let (ok, thread) = answer.lock().unwrap().expect("answered");
    assert!(ok, "the retried group failed");
    assert_ne!(
        thread,
        std::thread::current().id(),
        "answered before durable"
    );
    crash_copy(&live, &crashed);
    drop(store);
    let store = open_no_checkpoint(&crashed);
    assert_eq!(store.recovery().replayed, 2, "{:?}", store.recovery());
    assert_eq!(get(&store, "t", "a"), Some(b"2".to_vec()));
}

#[test]
fn a_leader_with_nothing_new_answers_without_a_sync() {
    use super::testutil::wait_committer_idle;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let store = open_no_checkpoint(&tmp.path().join("db"));
    put(&store, "t", "a", b"1");
    wait_durable(&store);
    wait_committer_idle(&store);
    let before = store.disk_syncs();
    let ran = Arc::new(AtomicBool::new(false));
    let seen = ran.clone();
    store.after_sync_leading(Box::new(move |r| {
        r.unwrap();
        seen.store(true, Ordering::SeqCst);
    }));
    assert!(ran.load(Ordering::SeqCst), "not answered at once");
    assert_eq!(store.disk_syncs(), before, "synced nothing new");
}

/// Sets entry `id` of page `key` as a room does: the page as read, patched.
fn set_entry(store: &Store, key: &str, id: u64, value: Option<&[u8]>) {
    let t = store.tree("plans").unwrap();
    let page = store.get(&t, key.as_bytes()).unwrap().unwrap_or_default();
    let after = super::page::patched(key.as_bytes(), &page, id, value);
    let mut b = Batch::new();
    b.set_entry(key.as_bytes(), id, value.map(<[u8]>::to_vec), after.into());
    store.apply(&t, &b).unwrap();
}

fn entries(page: Option<Vec<u8>>) -> Vec<(u64, Vec<u8>)> {
    let page = page.unwrap_or_default();
    super::page::parse(&page)
        .unwrap()
        .into_iter()
        .map(|e| (e.id, page[e.range].to_vec()))
        .collect()
}

#[test]
fn a_pages_entries_reach_sled_through_the_wal_alone_and_after_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let (live, crashed) = (tmp.path().join("live"), tmp.path().join("crashed"));
    let store = open_no_checkpoint(&live);
    set_entry(&store, "p0", 1, Some(b"one"));
    set_entry(&store, "p0", 2, Some(b"two"));
    wait_durable(&store);
    // A whole value, then entries patched into it, in one later group.
    put(
        &store,
        "plans",
        "p1",
        &super::page::patched(b"p1", &[], 20, Some(b"twenty")),
    );
    set_entry(&store, "p1", 21, Some(b"21"));
    set_entry(&store, "p0", 1, None);
    set_entry(&store, "p0", 3, Some(b"three"));
    wait_durable(&store);
    // An entry's record carries the entry, not its page.
    let wal_bytes = std::fs::read(live.join(WAL_FILE)).unwrap();
    let (offsets, end) = record_offsets(&wal_bytes);
    let last = offsets[offsets.len() - 1];
    assert!(end - last < 60, "the last record is {} bytes", end - last);
    let want_p0 = vec![(2, b"two".to_vec()), (3, b"three".to_vec())];
    let want_p1 = vec![(20, b"twenty".to_vec()), (21, b"21".to_vec())];
    let t = store.tree("plans").unwrap();
    assert_eq!(
        entries(store.get(&t, b"p0").unwrap().map(|v| v.to_vec())),
        want_p0
    );
    crash_copy(&live, &crashed);
    // Applied by the commit thread: sled has the patched pages.
    store.sync_blocking().unwrap();
    assert_eq!(entries(get(&store, "plans", "p0")), want_p0);
    assert_eq!(entries(get(&store, "plans", "p1")), want_p1);
    drop(store);

    assert_eq!(sled_only(&crashed, "plans", "p0"), None);
    let store = open_no_checkpoint(&crashed);
    assert_eq!(store.recovery().replayed, 6, "{:?}", store.recovery());
    assert_eq!(entries(get(&store, "plans", "p0")), want_p0);
    assert_eq!(entries(get(&store, "plans", "p1")), want_p1);
    // Dropping the last entry removes the page.
    set_entry(&store, "p1", 20, None);
    set_entry(&store, "p1", 21, None);
    wait_durable(&store);
    store.sync_blocking().unwrap();
    assert_eq!(get(&store, "plans", "p1"), None);
}

#[test]
fn after_a_group_of_several_the_next_as_many_writers_share_one_sync() {
    use super::testutil::{gather_for, wait_committer_asleep};
    use std::sync::mpsc;
    let tmp = tempfile::tempdir().unwrap();
    let store = open_no_checkpoint(&tmp.path().join("db"));
    // However slow this test's thread is, the gathering outlasts it.
    gather_for(&store, std::time::Duration::from_secs(60));
    let (tx, rx) = mpsc::channel();
    let ack = |tx: &mpsc::Sender<()>| -> super::AfterSync {
        let tx = tx.clone();
        Box::new(move |r| {
            r.unwrap();
            tx.send(()).unwrap();
        })
    };
    // A group of five writers (five records, one sync).
    for i in 0..5 {
        put(&store, "t", &format!("a{i}"), b"v");
    }
    store.after_sync(ack(&tx));
    rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
    // The commit thread has answered them and is back to waiting, with
    // nobody waiting for a sync: the writers are still being answered.
    wait_committer_asleep(&store);
    let before = store.disk_syncs();
    // They come back one by one, each given time to be synced alone.
    let mut early = 0;
    for i in 0..5 {
        put(&store, "t", &format!("b{i}"), b"v");
        store.after_sync(ack(&tx));
        if i < 4
            && rx
                .recv_timeout(std::time::Duration::from_millis(50))
                .is_ok()
        {
            early += 1;
        }
    }
    for _ in early..5 {
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
    }
    assert_eq!(early, 0, "writers were answered before the group was full");
    assert_eq!(
        store.disk_syncs() - before,
        1,
        "the writers that came back one by one were synced apart"
    );
}
