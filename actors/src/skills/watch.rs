//! watch: hot reload. The user's and the projects' skill folders are
//! watched (inotify through `notify`); a change to a `SKILL.md` or to a
//! folder starts a rescan once the changes have been quiet for
//! [`DEBOUNCE`], and a periodic rescan catches events the kernel dropped.
//! Other files changing (a skill's notes, a build in a project) start
//! nothing. It only tells the registry to reload; it reads no skill.

use super::SkillRegistry;
use notify::{EventKind, RecursiveMode, Watcher};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// Changes this close together make one rescan.
pub const DEBOUNCE: Duration = Duration::from_millis(250);
/// The fallback rescan when the config names none.
pub const RESCAN_EVERY: Duration = Duration::from_secs(300);

/// What the watcher thread hears.
pub enum Msg {
    /// A folder to watch (a project's skill source, once asked about).
    Watch(PathBuf),
    /// Something changed that may be a skill.
    Changed(PathBuf),
}

/// Starts the watcher thread for `registry`; it runs as long as the
/// process. Without inotify it still rescans periodically.
pub fn start(registry: Arc<SkillRegistry>) -> std::io::Result<()> {
    let (tx, rx) = channel::<Msg>();
    let events = tx.clone();
    let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(event) = res
            && let Some(path) = relevant(&event)
        {
            let _ = events.send(Msg::Changed(path));
        }
    });
    let mut watcher = match watcher {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(
                "skills: cannot watch folders ({e}); only periodic rescans pick up changes"
            );
            None
        }
    };
    let mut folders = Folders::default();
    if let Some(dir) = registry.user_dir() {
        folders.watch(&mut watcher, &dir);
    }
    registry.set_watch(tx);
    std::thread::Builder::new()
        .name("flyto-skills".into())
        .spawn(move || {
            let mut due: Option<(Instant, PathBuf)> = None;
            let mut next_rescan = Instant::now() + every(&registry);
            loop {
                let now = Instant::now();
                let until = due
                    .as_ref()
                    .map_or(next_rescan, |(at, _)| (*at).min(next_rescan));
                match rx.recv_timeout(until.saturating_duration_since(now)) {
                    Ok(Msg::Watch(dir)) => {
                        // A folder that exists by the time it is asked about
                        // was scanned by the asker: no rescan needed.
                        folders.watch(&mut watcher, &dir);
                    }
                    Ok(Msg::Changed(path)) => {
                        // Before re-arming: a removed folder is no longer
                        // watched after it, yet its removal is a change.
                        let inside = folders.covers(&path);
                        let armed = folders.rearm(&mut watcher);
                        if let Some(dir) = armed.first() {
                            tracing::info!("skills: {} appeared; watching it now", dir.display());
                            due = Some((Instant::now() + DEBOUNCE, dir.clone()));
                        } else if inside {
                            due = Some((Instant::now() + DEBOUNCE, path));
                        }
                        // Else: a folder made beside a missing skill folder's
                        // place (a build's `target/`); nothing to rescan.
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        let now = Instant::now();
                        if let Some((at, path)) = &due
                            && *at <= now
                        {
                            tracing::info!(
                                "skills: rescanned after a change in {}",
                                path.display()
                            );
                            registry.reload();
                            due = None;
                            next_rescan = now + every(&registry);
                        } else if next_rescan <= now {
                            tracing::debug!("skills: periodic rescan");
                            // Events may have been dropped: a folder that
                            // appeared meanwhile is armed now.
                            folders.rearm(&mut watcher);
                            registry.reload();
                            next_rescan = now + every(&registry);
                        }
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
        })?;
    Ok(())
}

fn every(registry: &SkillRegistry) -> Duration {
    registry
        .rescan_every()
        .unwrap_or(RESCAN_EVERY)
        .max(Duration::from_secs(1))
}

/// The skill folders asked for: those that exist are watched whole; one
/// that does not (yet) is waited for through its nearest existing
/// ancestor, watched alone, and armed when it appears. inotify cannot
/// watch a path that is not there, and a folder removed loses its watch,
/// so both are waited for the same way.
#[derive(Default)]
struct Folders {
    /// Watched whole (recursively).
    watched: HashSet<PathBuf>,
    /// Missing folder -> the ancestor watched for it.
    pending: HashMap<PathBuf, PathBuf>,
    /// Ancestors watched alone, with how many missing folders wait on each.
    ancestors: HashMap<PathBuf, usize>,
}

impl Folders {
    /// Watches `dir`, or waits for it. Returns whether it is watched now.
    fn watch(&mut self, watcher: &mut Option<notify::RecommendedWatcher>, dir: &Path) -> bool {
        let Some(w) = watcher.as_mut() else {
            return false;
        };
        if self.watched.contains(dir) {
            return true;
        }
        if dir.is_dir() {
            match w.watch(dir, RecursiveMode::Recursive) {
                Ok(()) => {
                    self.watched.insert(dir.to_path_buf());
                    self.stop_waiting(w, dir);
                    return true;
                }
                // Removed between the check and the watch: wait for it.
                Err(e) if dir.is_dir() => {
                    tracing::warn!(
                        "skills: cannot watch {} ({e}); only periodic rescans pick up its changes",
                        dir.display()
                    );
                    return false;
                }
                Err(_) => {}
            }
        }
        let Some(ancestor) = dir.ancestors().skip(1).find(|a| a.is_dir()) else {
            return false;
        };
        if self.pending.get(dir).is_some_and(|a| a == ancestor) {
            return false;
        }
        self.stop_waiting(w, dir);
        let count = self.ancestors.entry(ancestor.to_path_buf()).or_default();
        // Under a folder watched whole, its events come already.
        if *count == 0
            && !self.covers(ancestor)
            && let Err(e) = w.watch(ancestor, RecursiveMode::NonRecursive)
        {
            tracing::warn!(
                "skills: {} does not exist and {} cannot be watched for it ({e}); a skill added there is seen at the next periodic rescan",
                dir.display(),
                ancestor.display()
            );
        }
        *self.ancestors.entry(ancestor.to_path_buf()).or_default() += 1;
        self.pending
            .insert(dir.to_path_buf(), ancestor.to_path_buf());
        false
    }

    fn stop_waiting(&mut self, w: &mut notify::RecommendedWatcher, dir: &Path) {
        let Some(ancestor) = self.pending.remove(dir) else {
            return;
        };
        if let Some(count) = self.ancestors.get_mut(&ancestor) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.ancestors.remove(&ancestor);
                if !self.covers(&ancestor) {
                    let _ = w.unwatch(&ancestor);
                }
            }
        }
    }

    /// After a change: arms the folders that appeared, waits again for
    /// those removed, and waits nearer for those whose ancestors appeared.
    /// Returns the folders armed.
    fn rearm(&mut self, watcher: &mut Option<notify::RecommendedWatcher>) -> Vec<PathBuf> {
        let gone: Vec<PathBuf> = self
            .watched
            .iter()
            .filter(|d| !d.is_dir())
            .cloned()
            .collect();
        for dir in gone {
            self.watched.remove(&dir);
            if let Some(w) = watcher.as_mut() {
                let _ = w.unwatch(&dir);
            }
            self.watch(watcher, &dir);
        }
        let waiting: Vec<PathBuf> = self.pending.keys().cloned().collect();
        waiting
            .into_iter()
            .filter(|dir| self.watch(watcher, dir))
            .collect()
    }

    /// Whether `path` is in a folder watched whole.
    fn covers(&self, path: &Path) -> bool {
        self.watched.iter().any(|d| path.starts_with(d))
    }
}

/// The path of a change that may alter the skill set: a `SKILL.md`
/// written, created, removed or renamed, or a folder created, removed or
/// renamed. Data written to any other file is not.
fn relevant(event: &notify::Event) -> Option<PathBuf> {
    let is_skill_file = |p: &Path| p.file_name().is_some_and(|n| n == "SKILL.md");
    // Reading a skill (as every rescan does) must not count as a change,
    // or each rescan would start the next.
    let changes_content = matches!(
        event.kind,
        EventKind::Create(_)
            | EventKind::Remove(_)
            | EventKind::Modify(
                notify::event::ModifyKind::Data(_)
                    | notify::event::ModifyKind::Name(_)
                    | notify::event::ModifyKind::Any
            )
            | EventKind::Access(notify::event::AccessKind::Close(
                notify::event::AccessMode::Write
            ))
    );
    let folder_like = |p: &Path| p.is_dir() || (!p.exists() && p.extension().is_none());
    event
        .paths
        .iter()
        .find(|p| {
            (is_skill_file(p) && changes_content)
                || match event.kind {
                    EventKind::Create(notify::event::CreateKind::Folder)
                    | EventKind::Remove(notify::event::RemoveKind::Folder) => true,
                    EventKind::Modify(notify::event::ModifyKind::Name(_)) => folder_like(p),
                    _ => false,
                }
        })
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, DataChange, ModifyKind};

    fn event(kind: EventKind, path: &str) -> notify::Event {
        notify::Event::new(kind).add_path(PathBuf::from(path))
    }

    #[test]
    fn only_skill_files_and_folders_count() {
        let data = EventKind::Modify(ModifyKind::Data(DataChange::Any));
        assert!(relevant(&event(data, "/s/a/SKILL.md")).is_some());
        assert!(relevant(&event(data, "/s/a/notes.txt")).is_none());
        let file = EventKind::Create(CreateKind::File);
        assert!(relevant(&event(file, "/s/a/build.log")).is_none());
        let read = EventKind::Access(notify::event::AccessKind::Open(
            notify::event::AccessMode::Read,
        ));
        assert!(relevant(&event(read, "/s/a/SKILL.md")).is_none());
        let folder = EventKind::Create(CreateKind::Folder);
        assert!(relevant(&event(folder, "/s/new-skill")).is_some());
    }
}
