//! versions: a project's memory folder as a series of whole versions, so
//! that a consolidation (dream) or its undo changes the live memory in one
//! atomic step and the version before it stays, byte for byte.
//!
//! Layout under `<state>/projects/<id>/`: `memory` is a symlink to
//! `memory.versions/vNNNN`; each version is a complete folder (entries,
//! `MEMORY.md`, `.trash/`) plus `.version.json`, its bookkeeping (which run
//! made it, from which base, when, and the last successful consolidation).
//! A version is built as `vNNNN.tmp` and renamed when complete; the switch
//! is a rename of a new symlink over `memory`. So the live folder and its
//! bookkeeping change together, and a crash at any step leaves either the
//! old version live or the new one, never a mix; [`Layout::repair`] removes
//! what a crash left half built.
//!
//! A plain folder (before the first consolidation) is converted on first
//! use by the dream with an exchange of names (`renameat2`), so people who
//! edit `memory/` by hand keep editing the same path.
//!
//! Only the scope actor calls what changes the live folder.

use crate::failpoint;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub const META: &str = ".version.json";
const VERSIONS: &str = "memory.versions";
const LINK: &str = "memory";
const NEW_LINK: &str = "memory.link-new";
const OLD_DIR: &str = "memory.plain-old";

/// Every file of a folder, by path relative to it (`.trash/x@1.md`).
pub type Files = BTreeMap<String, Vec<u8>>;

/// What made a version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionMeta {
    pub version: u32,
    /// `initial`, `dream`, or `undo`.
    pub kind: String,
    /// The run that made it (a dream run, or the run an undo reverted).
    pub run: Option<String>,
    /// The version it was made from.
    pub base: Option<u32>,
    pub made_ms: u64,
    /// When the last successful consolidation of this memory finished
    /// (carried forward by versions that are not one).
    pub last_success_ms: Option<u64>,
}

pub struct Layout {
    /// `<state>/projects/<id>`.
    pub root: PathBuf,
}

fn name_of(n: u32) -> String {
    format!("v{n:04}")
}

fn number_of(name: &str) -> Option<u32> {
    name.strip_prefix('v')?.parse().ok()
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    crate::durable::sync_dir(dir)
}

fn private_dir(dir: &Path) -> io::Result<()> {
    crate::durable::create_dir_all_synced(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// Reads every regular file under `dir` (not following symlinks).
pub fn read_files(dir: &Path) -> io::Result<Files> {
    let mut out = Files::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, rel)) = stack.pop() {
        let rd = match fs::read_dir(&d) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound && rel.is_empty() => return Ok(out),
            Err(e) => return Err(e),
        };
        for entry in rd {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = format!("{rel}{name}");
            let t = entry.file_type()?;
            if t.is_dir() {
                stack.push((entry.path(), format!("{path}/")));
            } else if t.is_file() {
                out.insert(path, fs::read(entry.path())?);
            }
        }
    }
    Ok(out)
}

/// Writes `files` into the new folder `dir` (0600 files, 0700 folders),
/// each synced, then the folders.
pub fn write_files(dir: &Path, files: &Files) -> io::Result<()> {
    private_dir(dir)?;
    let mut dirs = vec![dir.to_path_buf()];
    for (rel, bytes) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent()
            && parent != dir
        {
            private_dir(parent)?;
            dirs.push(parent.to_path_buf());
        }
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600))?;
        io::Write::write_all(&mut f, bytes)?;
        f.sync_all()?;
    }
    dirs.sort();
    dirs.dedup();
    for d in dirs.iter().rev() {
        sync_dir(d)?;
    }
    Ok(())
}

impl Layout {
    pub fn of_memory_dir(memory_dir: &Path) -> Layout {
        Layout {
            root: memory_dir
                .parent()
                .map_or_else(|| memory_dir.to_path_buf(), Path::to_path_buf),
        }
    }

    pub fn link(&self) -> PathBuf {
        self.root.join(LINK)
    }

    fn versions(&self) -> PathBuf {
        self.root.join(VERSIONS)
    }

    pub fn version_dir(&self, n: u32) -> PathBuf {
        self.versions().join(name_of(n))
    }

    /// The live version, if `memory` is a symlink to one.
    pub fn live(&self) -> io::Result<Option<u32>> {
        match fs::read_link(self.link()) {
            Ok(target) => Ok(target
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(number_of)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            // EINVAL: a plain folder.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Complete versions, oldest first.
    pub fn list(&self) -> io::Result<Vec<u32>> {
        let mut out: Vec<u32> = match fs::read_dir(self.versions()) {
            Ok(rd) => rd
                .filter_map(|d| d.ok())
                .filter_map(|d| d.file_name().to_str().and_then(number_of))
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        out.sort_unstable();
        Ok(out)
    }

    pub fn meta(&self, n: u32) -> Option<VersionMeta> {
        let text = fs::read(self.version_dir(n).join(META)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// The live version's bookkeeping (none before the first switch).
    pub fn live_meta(&self) -> Option<VersionMeta> {
        self.live().ok().flatten().and_then(|n| self.meta(n))
    }

    /// Removes what a crash left half done: versions being built, versions
    /// built but never switched to (their run did not happen), and the
    /// leftovers of a conversion. Returns the runs whose versions it removed.
    pub fn repair(&self) -> io::Result<Vec<String>> {
        let mut dropped = Vec::new();
        let _ = fs::remove_file(self.root.join(NEW_LINK));
        let link = self.link();
        let old = self.root.join(OLD_DIR);
        if old.exists() {
            if fs::symlink_metadata(&link).is_err() {
                // Crashed between the two renames of the fallback: put the
                // plain folder back.
                fs::rename(&old, &link)?;
            } else {
                fs::remove_dir_all(&old)?;
            }
        }
        let live = self.live()?;
        if let Ok(rd) = fs::read_dir(self.versions()) {
            for d in rd.filter_map(|d| d.ok()) {
                let name = d.file_name().to_string_lossy().into_owned();
                let unfinished = name.ends_with(".tmp");
                let unlinked = number_of(&name).is_some_and(|n| live.is_none_or(|l| n > l));
                if unfinished || unlinked {
                    if let Some(run) = number_of(&name)
                        .and_then(|n| self.meta(n))
                        .and_then(|m| m.run)
                    {
                        dropped.push(run);
                    }
                    fs::remove_dir_all(d.path())?;
                }
            }
        }
        Ok(dropped)
    }

    /// Makes `memory` a symlink to a version, converting a plain folder
    /// (or creating an empty one); returns the live version.
    pub fn ensure_versioned(&self, now_ms: u64) -> io::Result<u32> {
        self.repair()?;
        if let Some(n) = self.live()? {
            return Ok(n);
        }
        let link = self.link();
        let plain = fs::symlink_metadata(&link).is_ok_and(|m| m.is_dir());
        let files = if plain {
            read_files(&link)?
        } else {
            Files::new()
        };
        let meta = VersionMeta {
            version: 1,
            kind: "initial".into(),
            made_ms: now_ms,
            ..VersionMeta::default()
        };
        self.install(&files, &meta)?;
        let target = Path::new(VERSIONS).join(name_of(1));
        if !plain {
            self.point_at(&target)?;
            return Ok(1);
        }
        let new_link = self.root.join(NEW_LINK);
        std::os::unix::fs::symlink(&target, &new_link)?;
        let exchanged = nix::fcntl::renameat2(
            None,
            &new_link,
            None,
            &link,
            nix::fcntl::RenameFlags::RENAME_EXCHANGE,
        );
        let old = if exchanged.is_ok() {
            // `memory.link-new` is now the plain folder.
            let old = self.root.join(OLD_DIR);
            fs::rename(&new_link, &old)?;
            old
        } else {
            // No exchange on this filesystem: two renames; repair() puts
            // the plain folder back if a crash falls between them.
            let old = self.root.join(OLD_DIR);
            fs::rename(&link, &old)?;
            fs::rename(&new_link, &link)?;
            old
        };
        sync_dir(&self.root)?;
        // A person's edit between the copy and the exchange went to the old
        // folder: carry it over before the old folder goes.
        let late = read_files(&old)?;
        if late != files {
            let live = self.version_dir(1);
            for (rel, bytes) in &late {
                if files.get(rel) != Some(bytes) {
                    crate::tools::write::atomic_write_as(
                        &live.join(rel),
                        bytes,
                        Some(fs::Permissions::from_mode(0o600)),
                    )?;
                }
            }
        }
        fs::remove_dir_all(&old)?;
        Ok(1)
    }

    /// Builds version `meta.version` from `files`, complete and synced,
    /// not yet live.
    pub fn install(&self, files: &Files, meta: &VersionMeta) -> io::Result<PathBuf> {
        private_dir(&self.versions())?;
        let done = self.version_dir(meta.version);
        let tmp = self
            .versions()
            .join(format!("{}.tmp", name_of(meta.version)));
        let _ = fs::remove_dir_all(&tmp);
        let mut all = files.clone();
        all.remove(META);
        let mut json = serde_json::to_vec_pretty(meta).map_err(io::Error::other)?;
        json.push(b'\n');
        all.insert(META.into(), json);
        write_files(&tmp, &all)?;
        failpoint::reached("dream-mid-install");
        fs::rename(&tmp, &done)?;
        sync_dir(&self.versions())?;
        Ok(done)
    }

    /// Makes version `n` live: one rename of a new symlink over `memory`.
    pub fn switch_to(&self, n: u32) -> io::Result<()> {
        self.point_at(&Path::new(VERSIONS).join(name_of(n)))
    }

    fn point_at(&self, target: &Path) -> io::Result<()> {
        let new_link = self.root.join(NEW_LINK);
        let _ = fs::remove_file(&new_link);
        std::os::unix::fs::symlink(target, &new_link)?;
        fs::rename(&new_link, self.link())?;
        sync_dir(&self.root)
    }

    /// Removes the oldest versions beyond `keep`, never the live one.
    pub fn prune(&self, keep: usize) -> io::Result<()> {
        let live = self.live()?;
        let all = self.list()?;
        let excess = all.len().saturating_sub(keep.max(1));
        for n in all.into_iter().take(excess) {
            if Some(n) != live {
                fs::remove_dir_all(self.version_dir(n))?;
            }
        }
        Ok(())
    }

    /// The next version number.
    pub fn next(&self) -> io::Result<u32> {
        Ok(self.list()?.last().copied().unwrap_or(0) + 1)
    }
}

/// Files whose content is regenerated or is bookkeeping: not compared.
pub fn derived(rel: &str) -> bool {
    rel == super::store::INDEX || rel == META
}

/// `staged` with the changes made to the live folder since `base` carried
/// over; the paths changed on both sides (to different content) if any.
pub fn carry_over(base: &Files, live: &Files, staged: &Files) -> Result<Files, Vec<String>> {
    let mut out = staged.clone();
    let mut conflicts = Vec::new();
    let paths: std::collections::BTreeSet<&String> = base.keys().chain(live.keys()).collect();
    for rel in paths {
        if derived(rel) || base.get(rel) == live.get(rel) {
            continue;
        }
        if staged.get(rel) != base.get(rel) && staged.get(rel) != live.get(rel) {
            conflicts.push(rel.clone());
            continue;
        }
        match live.get(rel) {
            Some(bytes) => out.insert(rel.clone(), bytes.clone()),
            None => out.remove(rel),
        };
    }
    if conflicts.is_empty() {
        Ok(out)
    } else {
        Err(conflicts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(pairs: &[(&str, &str)]) -> Files {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn a_plain_folder_becomes_version_one_in_place() {
        let tmp = tempfile::tempdir().unwrap();
        let l = Layout {
            root: tmp.path().to_path_buf(),
        };
        fs::create_dir_all(l.link().join(".trash")).unwrap();
        fs::write(l.link().join("a.md"), "A").unwrap();
        fs::write(l.link().join(".trash/b@1.md"), "B").unwrap();
        assert_eq!(l.ensure_versioned(5).unwrap(), 1);
        assert!(fs::symlink_metadata(l.link()).unwrap().is_symlink());
        assert_eq!(fs::read_to_string(l.link().join("a.md")).unwrap(), "A");
        assert_eq!(
            fs::read_to_string(l.link().join(".trash/b@1.md")).unwrap(),
            "B"
        );
        assert_eq!(l.live_meta().unwrap().kind, "initial");
        assert!(!tmp.path().join(OLD_DIR).exists());
        // Again: nothing changes.
        assert_eq!(l.ensure_versioned(6).unwrap(), 1);
    }

    #[test]
    fn a_switch_is_whole_and_unswitched_versions_are_repaired_away() {
        let tmp = tempfile::tempdir().unwrap();
        let l = Layout {
            root: tmp.path().to_path_buf(),
        };
        l.ensure_versioned(1).unwrap();
        let meta = |n: u32, run: &str| VersionMeta {
            version: n,
            kind: "dream".into(),
            run: Some(run.into()),
            base: Some(n - 1),
            made_ms: 2,
            last_success_ms: Some(2),
        };
        l.install(&files(&[("x.md", "X")]), &meta(2, "d1")).unwrap();
        l.switch_to(2).unwrap();
        assert_eq!(fs::read_to_string(l.link().join("x.md")).unwrap(), "X");
        // Installed but never switched (a crash before the switch).
        l.install(&files(&[("y.md", "Y")]), &meta(3, "d2")).unwrap();
        assert_eq!(l.repair().unwrap(), ["d2"]);
        assert_eq!(l.list().unwrap(), [1, 2]);
        assert_eq!(l.live().unwrap(), Some(2));
        for n in 3..15 {
            l.install(&files(&[]), &meta(n, "d")).unwrap();
            l.switch_to(n).unwrap();
        }
        l.prune(10).unwrap();
        assert_eq!(l.list().unwrap(), (5..15).collect::<Vec<_>>());
    }

    #[test]
    fn live_changes_are_carried_over_unless_both_sides_changed_a_file() {
        let base = files(&[("a.md", "1"), ("b.md", "1"), ("c.md", "1")]);
        let live = files(&[("a.md", "2"), ("b.md", "1"), ("d.md", "new")]);
        let staged = files(&[("a.md", "1"), ("b.md", "merged"), ("c.md", "1")]);
        let out = carry_over(&base, &live, &staged).unwrap();
        assert_eq!(
            out,
            files(&[("a.md", "2"), ("b.md", "merged"), ("d.md", "new")])
        );
        let staged = files(&[("a.md", "dream"), ("b.md", "1"), ("c.md", "1")]);
        assert_eq!(carry_over(&base, &live, &staged).unwrap_err(), ["a.md"]);
    }
}
