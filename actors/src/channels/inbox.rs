//! The inbox folder as a platform: a file renamed into `new/` (writers
//! write into `tmp/` first, as with maildir) is one message; once it is
//! journaled it is moved into `cur/`, and its reply is written atomically
//! (into `tmp/`, then renamed) as `out/<same name>`. Works with no network.
//! inotify (through `notify`) only wakes the poll early; each poll scans
//! the folder, since inotify can overflow. Only events that can put a
//! file into `new/` wake it: the scan's own opendir and reads, and the
//! moves into `cur/`, are events on `new/` too, and waking on them made
//! an idle inbox rescan itself in a busy loop. Owns only that folder.

use super::platform::{Inbound, OutChunk, Platform, PlatformError, PlatformFuture, Polled};
use notify::Watcher;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Every message of the folder belongs to this one chat.
pub const INBOX_CHAT: &str = "inbox";
/// Files larger than this are refused (moved to `cur/` with a reply saying so).
const MAX_MESSAGE_BYTES: u64 = 256 * 1024;

pub struct InboxPlatform {
    dir: PathBuf,
    poll_timeout: Duration,
    wake: Arc<Notify>,
    watcher: Mutex<Option<notify::RecommendedWatcher>>,
}

impl InboxPlatform {
    /// Creates `tmp/`, `new/`, `cur/` and `out/` under `dir` if missing.
    pub fn new(dir: &Path, poll_timeout: Duration) -> Result<InboxPlatform, PlatformError> {
        for sub in ["tmp", "new", "cur", "out"] {
            // Synced: a reply written into a new `out/` must outlive a
            // power cut with its folder.
            crate::durable::create_dir_all_synced(&dir.join(sub)).map_err(|e| {
                PlatformError::Rejected(format!(
                    "cannot create {}: {e}; check the inbox folder's permissions",
                    dir.join(sub).display()
                ))
            })?;
        }
        let p = InboxPlatform {
            dir: dir.to_path_buf(),
            poll_timeout,
            wake: Arc::new(Notify::new()),
            watcher: Mutex::new(None),
        };
        p.reset();
        Ok(p)
    }

    fn scan(&self) -> Result<Vec<Inbound>, PlatformError> {
        let new = self.dir.join("new");
        let entries = std::fs::read_dir(&new)
            .map_err(|e| PlatformError::Transient(format!("cannot read {}: {e}", new.display())))?;
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            let path = new.join(&name);
            let text = match std::fs::metadata(&path) {
                Ok(m) if m.len() > MAX_MESSAGE_BYTES => format!(
                    "(the file {name} is {} bytes, over the inbox limit of {MAX_MESSAGE_BYTES}: write a shorter message)",
                    m.len()
                ),
                Ok(_) => match std::fs::read(&path) {
                    Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                    Err(_) => continue,
                },
                // Gone between listing and reading: a later scan sees the rest.
                Err(_) => continue,
            };
            out.push(Inbound {
                update_id: name.clone(),
                chat: INBOX_CHAT.into(),
                user: "local".into(),
                user_name: "local".into(),
                message_id: name,
                text,
                context_token: None,
                migrate_to: None,
            });
        }
        Ok(out)
    }
}

/// Whether an event on `new/` can mean a file arrived there: created,
/// renamed in, or written and closed. Opens, reads and closes after
/// reading (the scan's own), and renames out (the ack's), cannot.
fn adds_a_file(kind: &notify::EventKind) -> bool {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
    match kind {
        EventKind::Create(_) | EventKind::Any | EventKind::Other => true,
        EventKind::Modify(ModifyKind::Name(mode)) => !matches!(mode, RenameMode::From),
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) | EventKind::Modify(_) | EventKind::Remove(_) => false,
    }
}

/// Writes `bytes` to `dir/tmp/<name>`, syncs it, and renames it to `to`.
fn write_atomically(dir: &Path, name: &str, to: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = dir.join("tmp").join(format!(".{name}.reply"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, to)?;
    // The reply counts as sent once this returns: its name must be durable.
    crate::durable::sync_parent(to)
}

/// A file name from a chunk id or message id: nothing that leaves `out/`.
fn safe_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect::<String>()
        .trim_start_matches('.')
        .to_string()
}

#[cfg(test)]
mod durability {
    #[test]
    fn a_new_inbox_and_a_reply_in_it_are_synced_with_their_folders() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let dir = root.join("inbox");
        let inbox = super::InboxPlatform::new(&dir, std::time::Duration::from_millis(10)).unwrap();
        let to = dir.join("out/m1.txt");
        super::write_atomically(&dir, "m1.txt", &to, b"reply").unwrap();
        drop(inbox);
        let synced = crate::durable::synced_under(&root);
        for d in [root.clone(), dir.clone(), dir.join("out"), dir.join("new")] {
            assert!(
                synced.contains(&d),
                "{} not synced: {synced:?}",
                d.display()
            );
        }
        // The reply's name in `out/` is synced after it was renamed there.
        assert_eq!(synced.last(), Some(&dir.join("out")), "{synced:?}");
    }
}

impl Platform for InboxPlatform {
    fn poll<'a>(&'a self, _cursor: Option<&'a str>) -> PlatformFuture<'a, Polled> {
        Box::pin(async move {
            let found = self.scan()?;
            if !found.is_empty() {
                return Ok(Polled {
                    updates: found,
                    cursor: None,
                });
            }
            let _ = tokio::time::timeout(self.poll_timeout, self.wake.notified()).await;
            Ok(Polled {
                updates: self.scan()?,
                cursor: None,
            })
        })
    }

    fn ack<'a>(&'a self, updates: &'a [Inbound]) -> PlatformFuture<'a, ()> {
        Box::pin(async move {
            for u in updates {
                let from = self.dir.join("new").join(&u.message_id);
                let to = self.dir.join("cur").join(&u.message_id);
                match std::fs::rename(&from, &to) {
                    Ok(()) => {}
                    // Moved already (a restart after the journal but before
                    // this ack, then a second delivery).
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(PlatformError::Transient(format!(
                            "cannot move {} to cur/: {e}",
                            from.display()
                        )));
                    }
                }
            }
            Ok(())
        })
    }

    fn send<'a>(&'a self, _chat: &'a str, chunk: &'a OutChunk) -> PlatformFuture<'a, String> {
        Box::pin(async move {
            let name = match &chunk.reply_to {
                Some(m) => safe_name(m),
                None => format!("{}.txt", safe_name(&chunk.id)),
            };
            let to = self.dir.join("out").join(&name);
            write_atomically(&self.dir, &name, &to, chunk.text.as_bytes()).map_err(|e| {
                PlatformError::Transient(format!("cannot write {}: {e}", to.display()))
            })?;
            Ok(name)
        })
    }

    fn typing<'a>(&'a self, _chat: &'a str) -> PlatformFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    /// A reply is one file, however long.
    fn chunk(&self, text: &str) -> Vec<String> {
        if text.is_empty() {
            Vec::new()
        } else {
            vec![text.to_string()]
        }
    }

    fn poll_timeout(&self) -> Duration {
        self.poll_timeout
    }

    fn reset(&self) {
        let wake = self.wake.clone();
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            match res {
                Ok(event) if !adds_a_file(&event.kind) => {}
                // An error (an overflow among them) may hide an arrival.
                _ => wake.notify_one(),
            }
        });
        let watcher = watcher.and_then(|mut w| {
            w.watch(&self.dir.join("new"), notify::RecursiveMode::NonRecursive)
                .map(|()| w)
        });
        match watcher {
            Ok(w) => {
                if let Ok(mut slot) = self.watcher.lock() {
                    *slot = Some(w);
                }
            }
            Err(e) => tracing::warn!(
                dir = %self.dir.display(),
                error = %e,
                "cannot watch the inbox folder; new files are seen at the next scan"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::adds_a_file;
    use notify::EventKind;
    use notify::event::{
        AccessKind, AccessMode, CreateKind, DataChange, ModifyKind, RemoveKind, RenameMode,
    };

    #[test]
    fn only_an_arrival_wakes_the_poll() {
        let arrivals = [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
        ];
        for k in arrivals {
            assert!(adds_a_file(&k), "{k:?} can bring a message");
        }
        // What the poller's own scan and ack cause on `new/`.
        let own = [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Modify(ModifyKind::Name(RenameMode::From)),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Remove(RemoveKind::File),
        ];
        for k in own {
            assert!(!adds_a_file(&k), "{k:?} must not wake the poll");
        }
    }
}
