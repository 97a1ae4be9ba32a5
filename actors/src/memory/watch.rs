//! watch: tells a scope actor whether its folder may have changed since
//! it last looked, so an unchanged folder is served from the cache without
//! a `stat` per entry file.
//!
//! One inotify descriptor serves every scope of the daemon (inotify
//! instances are few per user; watches are many). It is drained, without
//! blocking, at each question: the kernel queues an event before the write
//! that caused it returns, so a change made before the question is always
//! seen, by any process. Anything uncertain answers "changed": a folder not
//! watched (it does not exist yet, or the watch limit is reached), a queue
//! overflow, a folder removed or moved, and every [`FALLBACK`] anyway, for
//! filesystems that do not report changes made elsewhere (NFS).

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest a folder is trusted on the watch's word alone.
pub const FALLBACK: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Watched {
    wd: WatchDescriptor,
    dirty: bool,
    looked: Instant,
}

#[derive(Debug)]
struct Inner {
    fd: Inotify,
    dirs: HashMap<PathBuf, Watched>,
    by_wd: HashMap<WatchDescriptor, PathBuf>,
}

#[derive(Debug)]
pub struct FolderWatch {
    inner: Mutex<Inner>,
}

fn interesting() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
}

impl FolderWatch {
    pub fn new() -> nix::Result<FolderWatch> {
        let fd = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        Ok(FolderWatch {
            inner: Mutex::new(Inner {
                fd,
                dirs: HashMap::new(),
                by_wd: HashMap::new(),
            }),
        })
    }

    /// Whether `dir` may have changed since the last time this answered
    /// "yes" for it; the caller then looks at the folder itself.
    pub fn may_have_changed(&self, dir: &Path) -> bool {
        let mut inner = match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        inner.drain();
        let now = Instant::now();
        if let Some(w) = inner.dirs.get_mut(dir) {
            let changed = w.dirty || now.duration_since(w.looked) >= FALLBACK;
            if changed {
                w.dirty = false;
                w.looked = now;
            }
            return changed;
        }
        // Not watched yet: watch it from now on, and look this time.
        if let Ok(wd) = inner.fd.add_watch(dir, interesting()) {
            if let Some(old) = inner.by_wd.insert(wd, dir.to_path_buf()) {
                // The same folder under another name: both names look.
                inner.dirs.remove(&old);
            }
            inner.dirs.insert(
                dir.to_path_buf(),
                Watched {
                    wd,
                    dirty: false,
                    looked: now,
                },
            );
        }
        true
    }

    /// Stops watching `dir` (its actor stopped).
    pub fn unwatch(&self, dir: &Path) {
        let mut inner = match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(w) = inner.dirs.remove(dir) {
            inner.by_wd.remove(&w.wd);
            // Fails only if the kernel dropped the watch already.
            let _ = inner.fd.rm_watch(w.wd);
        }
    }

    /// Folders watched now (for tests).
    pub fn watched(&self) -> usize {
        self.inner.lock().map_or(0, |g| g.dirs.len())
    }
}

impl Inner {
    fn drain(&mut self) {
        loop {
            let events = match self.fd.read_events() {
                Ok(ev) if !ev.is_empty() => ev,
                // EAGAIN: nothing queued. Any other error: trust nothing.
                Ok(_) | Err(nix::errno::Errno::EAGAIN) => return,
                Err(_) => {
                    self.dirs.values_mut().for_each(|w| w.dirty = true);
                    return;
                }
            };
            for ev in events {
                if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    self.dirs.values_mut().for_each(|w| w.dirty = true);
                    continue;
                }
                let Some(dir) = self.by_wd.get(&ev.wd).cloned() else {
                    continue;
                };
                let gone = ev.mask.intersects(
                    AddWatchFlags::IN_IGNORED
                        | AddWatchFlags::IN_DELETE_SELF
                        | AddWatchFlags::IN_MOVE_SELF,
                );
                if gone {
                    // The watch follows the inode, not the name: forget it,
                    // so the next question watches whatever the name is now.
                    self.by_wd.remove(&ev.wd);
                    self.dirs.remove(&dir);
                    let _ = self.fd.rm_watch(ev.wd);
                } else if let Some(w) = self.dirs.get_mut(&dir) {
                    w.dirty = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_change_made_before_the_question_is_always_seen() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("memory");
        let w = FolderWatch::new().unwrap();
        // Missing: always "changed", and not watched.
        assert!(w.may_have_changed(&dir));
        assert_eq!(w.watched(), 0);
        fs::create_dir(&dir).unwrap();
        assert!(w.may_have_changed(&dir), "the first look");
        assert!(!w.may_have_changed(&dir), "nothing happened");
        fs::write(dir.join("a.md"), "x").unwrap();
        assert!(w.may_have_changed(&dir), "a new file");
        assert!(!w.may_have_changed(&dir));
        // In place, same size: the write is reported even if stat could
        // not tell.
        fs::write(dir.join("a.md"), "y").unwrap();
        assert!(w.may_have_changed(&dir), "an edit in place");
        fs::remove_file(dir.join("a.md")).unwrap();
        assert!(w.may_have_changed(&dir), "a removal");
        assert!(!w.may_have_changed(&dir));
    }

    #[test]
    fn a_folder_replaced_under_its_name_is_watched_again() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("memory");
        fs::create_dir(&dir).unwrap();
        let w = FolderWatch::new().unwrap();
        assert!(w.may_have_changed(&dir));
        assert!(!w.may_have_changed(&dir));
        fs::rename(&dir, tmp.path().join("old")).unwrap();
        fs::create_dir(&dir).unwrap();
        assert!(w.may_have_changed(&dir), "moved away");
        assert!(!w.may_have_changed(&dir), "the new folder is watched");
        fs::write(dir.join("b.md"), "x").unwrap();
        assert!(w.may_have_changed(&dir), "a file in the new folder");
        // Changes in the old folder no longer count.
        fs::write(tmp.path().join("old").join("c.md"), "x").unwrap();
        assert!(!w.may_have_changed(&dir));
        w.unwatch(&dir);
        assert_eq!(w.watched(), 0);
    }
}
