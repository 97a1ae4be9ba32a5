//! watch: hot reload. The user's and the projects' skill folders are
//! watched (inotify through `notify`); a change to a `SKILL.md` or to a
//! folder starts a rescan once the changes have been quiet for
//! [`DEBOUNCE`], and a periodic rescan catches events the kernel dropped.
//! Other files changing (a skill's notes, a build in a project) start
//! nothing. It only tells the registry to reload; it reads no skill.

use super::SkillRegistry;
use notify::{EventKind, RecursiveMode, Watcher};
use std::collections::HashSet;
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
    let mut watched: HashSet<PathBuf> = HashSet::new();
    if let Some(dir) = registry.user_dir() {
        watch_dir(&mut watcher, &mut watched, &dir);
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
                    Ok(Msg::Watch(dir)) => watch_dir(&mut watcher, &mut watched, &dir),
                    Ok(Msg::Changed(path)) => due = Some((Instant::now() + DEBOUNCE, path)),
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

fn watch_dir(
    watcher: &mut Option<notify::RecommendedWatcher>,
    watched: &mut HashSet<PathBuf>,
    dir: &Path,
) {
    let Some(w) = watcher.as_mut() else {
        return;
    };
    if watched.contains(dir) || !dir.is_dir() {
        return;
    }
    match w.watch(dir, RecursiveMode::Recursive) {
        Ok(()) => {
            watched.insert(dir.to_path_buf());
        }
        Err(e) => tracing::warn!("skills: cannot watch {} ({e})", dir.display()),
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
