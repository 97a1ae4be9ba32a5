//! switch: the scope actor's side of a consolidation — copy the live
//! folder out for a dream to work on, switch a validated result in (with
//! what changed live meanwhile carried over), and undo a run. These run
//! inside the scope actor, between its other messages, so no write lands
//! between the last look at the live folder and the switch.

use super::MemoryError;
use super::store::ScopeDir;
use super::versions::{Files, Layout, VersionMeta, carry_over, read_files, write_files};
use std::path::PathBuf;
use std::sync::Arc;

/// Validates a result about to go live (the dream's checks, again, on
/// what carrying over made of it).
pub type Check = Arc<dyn Fn(&Files) -> Result<(), String> + Send + Sync>;

/// A copy of the live folder to work on.
#[derive(Debug, Clone)]
pub struct Staged {
    pub dir: PathBuf,
    /// The live folder as copied.
    pub base: Files,
    pub base_version: u32,
    pub last_success_ms: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Switched {
    pub version: u32,
    /// Files changed live during the run and carried into the new version.
    pub carried: Vec<String>,
}

fn io(what: &str, e: std::io::Error) -> MemoryError {
    MemoryError::Io(format!("cannot {what}: {e}"))
}

pub fn stage(dir: &ScopeDir, staging: PathBuf) -> Result<Staged, MemoryError> {
    let layout = Layout::of_memory_dir(&dir.dir);
    let now = dir.clock.now_ms();
    let base_version = layout
        .ensure_versioned(now)
        .map_err(|e| io("make the memory folder versioned", e))?;
    let base = read_files(&layout.link()).map_err(|e| io("read the memory folder", e))?;
    let _ = std::fs::remove_dir_all(&staging);
    let mut copy = base.clone();
    copy.remove(super::versions::META);
    write_files(&staging, &copy).map_err(|e| io("copy the memory folder to stage it", e))?;
    crate::failpoint::reached("dream-mid-staging");
    Ok(Staged {
        dir: staging,
        base,
        base_version,
        last_success_ms: layout.live_meta().and_then(|m| m.last_success_ms),
    })
}

/// Switches `staged` in as a new version made by `run`, or refuses.
pub fn switch(
    dir: &ScopeDir,
    base: &Files,
    staged: &Files,
    mut meta: VersionMeta,
    check: &Check,
    keep: usize,
) -> Result<Switched, MemoryError> {
    let layout = Layout::of_memory_dir(&dir.dir);
    let live = read_files(&layout.link()).map_err(|e| io("read the memory folder", e))?;
    let merged = carry_over(base, &live, staged).map_err(|paths| {
        MemoryError::Conflict(format!(
            "changed both live and by the run: {}; the run was not applied, so nothing written meanwhile is lost",
            paths.join(", ")
        ))
    })?;
    let carried: Vec<String> = merged
        .iter()
        .filter(|(k, v)| staged.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .chain(staged.keys().filter(|k| !merged.contains_key(*k)).cloned())
        .collect();
    check(&merged).map_err(MemoryError::Invalid)?;
    crate::failpoint::reached("dream-after-validation");
    let n = layout
        .next()
        .map_err(|e| io("list the memory versions", e))?;
    meta.version = n;
    let built = layout
        .install(&merged, &meta)
        .map_err(|e| io("build the new memory version", e))?;
    if !carried.is_empty() {
        // The index must list what was carried over too.
        ScopeDir {
            dir: built,
            label: dir.label,
            clock: dir.clock.clone(),
        }
        .reindex()?;
    }
    crate::failpoint::reached("dream-before-switch");
    layout
        .switch_to(n)
        .map_err(|e| io("switch the memory folder to the new version", e))?;
    crate::failpoint::reached("dream-after-switch");
    if let Err(e) = layout.prune(keep) {
        tracing::warn!("memory versions of {}: {e}", layout.root.display());
    }
    Ok(Switched {
        version: n,
        carried,
    })
}

/// Makes the version before `run` live again (as a new version, so the
/// undone one stays too). `None`: the newest dream run.
pub fn undo(dir: &ScopeDir, run: Option<&str>, keep: usize) -> Result<VersionMeta, MemoryError> {
    let layout = Layout::of_memory_dir(&dir.dir);
    let versions = layout
        .list()
        .map_err(|e| io("list the memory versions", e))?;
    let made = versions
        .iter()
        .rev()
        .filter_map(|n| layout.meta(*n))
        .find(|m| m.kind == "dream" && run.is_none_or(|r| m.run.as_deref() == Some(r)))
        .ok_or_else(|| {
            MemoryError::NotFound(match run {
                Some(r) => format!(
                    "no kept memory version made by dream run {r}: `flytoctl dream_log` lists the runs (the last versions are kept)"
                ),
                None => "no dream run has changed this project's memory: nothing to undo".into(),
            })
        })?;
    // Undoing twice would make the same old memory live again and hide
    // that nothing was left to undo.
    if let Some(undone) = versions
        .iter()
        .filter(|n| **n > made.version)
        .filter_map(|n| layout.meta(*n))
        .find(|m| m.kind == "undo" && m.run == made.run)
    {
        return Err(MemoryError::Conflict(format!(
            "dream run {} was already undone (by memory version {}): nothing changed; `flytoctl dream_log` lists the runs",
            made.run.as_deref().unwrap_or("?"),
            undone.version
        )));
    }
    let base = made.base.filter(|b| versions.contains(b)).ok_or_else(|| {
        MemoryError::NotFound(format!(
            "the version before run {} is no longer kept",
            made.run.as_deref().unwrap_or("?")
        ))
    })?;
    let files = read_files(&layout.version_dir(base)).map_err(|e| io("read the old version", e))?;
    let n = layout
        .next()
        .map_err(|e| io("list the memory versions", e))?;
    let meta = VersionMeta {
        version: n,
        kind: "undo".into(),
        run: made.run.clone(),
        base: Some(base),
        made_ms: dir.clock.now_ms(),
        last_success_ms: layout.live_meta().and_then(|m| m.last_success_ms),
    };
    layout
        .install(&files, &meta)
        .map_err(|e| io("build the restored version", e))?;
    layout
        .switch_to(n)
        .map_err(|e| io("switch the memory folder back", e))?;
    if let Err(e) = layout.prune(keep) {
        tracing::warn!("memory versions of {}: {e}", layout.root.display());
    }
    Ok(meta)
}
