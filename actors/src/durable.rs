//! durable: the one way flytod makes a file or a folder survive a power
//! cut. A write reaches the disk only when its file is synced, and a new
//! name (a created file or folder, a rename) only when the folder that
//! holds it is synced; a disk that loses power forgets everything else.
//! Every writer beside the store (step logs, memory, channel journals,
//! dream staging, the state directory itself) goes through these, so
//! what a client may have seen is on disk before it is told.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[cfg(test)]
static SYNCED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Paths synced so far (by any test thread) under `root`, in order: the
/// record tests assert the contract with.
#[cfg(test)]
pub fn synced_under(root: &Path) -> Vec<PathBuf> {
    SYNCED
        .lock()
        .map(|s| s.iter().filter(|p| p.starts_with(root)).cloned().collect())
        .unwrap_or_default()
}

fn fsync(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()?;
    #[cfg(test)]
    if let Ok(mut s) = SYNCED.lock() {
        s.push(path.to_path_buf());
    }
    Ok(())
}

/// `fsync` of a file already written (through another handle: the sync
/// is of the file, not of the descriptor).
pub fn sync_file(path: &Path) -> io::Result<()> {
    fsync(path)
}

/// `fsync` of a folder: its entries (created, renamed, removed) are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    fsync(dir)
}

/// Syncs the folder holding `path`, so `path`'s name is durable.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => sync_dir(p),
        _ => sync_dir(Path::new(".")),
    }
}

/// `create_dir_all` that makes what it created durable: each folder it
/// created is synced, and the folder above the topmost one it created
/// (which holds that one's name). A folder that exists already costs a
/// `stat`, no sync.
pub fn create_dir_all_synced(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    // The missing folders, deepest first.
    let mut missing: Vec<PathBuf> = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at {
        if d.as_os_str().is_empty() || d.is_dir() {
            break;
        }
        missing.push(d.to_path_buf());
        at = d.parent();
    }
    for d in missing.iter().rev() {
        match fs::create_dir(d) {
            Ok(()) => {}
            // Another writer made it meanwhile; syncing it again is cheap
            // and does not depend on that writer having synced it yet.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && d.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    for d in &missing {
        sync_dir(d)?;
    }
    if let Some(top) = missing.last() {
        sync_parent(top)?;
    }
    Ok(())
}

/// Replaces `path` with `bytes` atomically and durably: a temporary file
/// beside it (mode `mode`), synced, renamed over it, then its folder
/// synced. A reader sees the old content or the new, never a part, and
/// after a power cut the new content is there once this returned.
pub fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        #[cfg(test)]
        if let Ok(mut s) = SYNCED.lock() {
            s.push(tmp.clone());
        }
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    sync_parent(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creating_a_tree_syncs_every_new_folder_and_the_one_above_them() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let deep = root.join("a/b/c");
        create_dir_all_synced(&deep).unwrap();
        assert!(deep.is_dir());
        let synced = synced_under(&root);
        for d in [
            root.join("a/b/c"),
            root.join("a/b"),
            root.join("a"),
            root.clone(),
        ] {
            assert!(
                synced.contains(&d),
                "{} not synced: {synced:?}",
                d.display()
            );
        }
        // Existing folders cost no sync.
        let before = synced_under(&root).len();
        create_dir_all_synced(&deep).unwrap();
        assert_eq!(synced_under(&root).len(), before);
        // Only what is new: the parent of `d`, and `d`.
        create_dir_all_synced(&root.join("a/b/c/d")).unwrap();
        let after = synced_under(&root);
        assert_eq!(after[before..], [root.join("a/b/c/d"), root.join("a/b/c")]);
    }

    #[test]
    fn a_synced_write_syncs_the_file_before_its_rename_and_the_folder_after() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let path = root.join("state.json");
        write_synced(&path, b"{}", 0o600).unwrap();
        write_synced(&path, b"{\"v\":2}", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"v\":2}");
        let synced = synced_under(&root);
        assert_eq!(synced.len(), 4, "{synced:?}");
        assert!(synced[0].starts_with(&root) && synced[0] != path);
        assert_eq!(synced[1], root);
        // No temporary file is left behind.
        let left: Vec<_> = std::fs::read_dir(&root).unwrap().collect();
        assert_eq!(left.len(), 1);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
