//! One scope's folder: its entries, its `MEMORY.md` index, its `.trash/`.
//! Only the scope's actor calls this, so a read-check-write here is never
//! interleaved with another.
//!
//! Every file is replaced atomically (temp file, fsync, rename, fsync of
//! the folder) with mode 0600. A file that does not parse is reported and
//! never overwritten; the index leaves it out.

use super::MemoryError;
use super::entry::{self, Entry, Kind, Meta, Problem};
use crate::clock::Clock;
use crate::tools::secrets;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const INDEX: &str = "MEMORY.md";
pub const TRASH: &str = ".trash";
/// Caps, in bytes and lines.
pub const MAX_ENTRY_BYTES: usize = 16 * 1024;
pub const MAX_INDEX_BYTES: usize = 25 * 1024;
pub const MAX_INDEX_LINES: usize = 200;
/// Tombstones older than this are deleted by the sweep.
pub const TRASH_TTL_MS: u64 = 30 * 86_400_000;
const DAY_MS: u64 = 86_400_000;

/// What is in a folder now.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Valid entries, by name.
    pub entries: Vec<Entry>,
    pub problems: Vec<Problem>,
}

/// A write to make.
#[derive(Debug, Clone)]
pub struct WriteReq {
    pub name: String,
    pub kind: Kind,
    pub description: String,
    pub body: String,
    /// Session id, `user`, or `extracted`.
    pub source: String,
    /// The session an extracted entry was learned from.
    pub session: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub created: bool,
    pub version: u32,
    pub path: PathBuf,
}

pub struct ScopeDir {
    pub dir: PathBuf,
    /// `project` or `user`, for messages.
    pub label: &'static str,
    pub clock: Arc<dyn Clock>,
}

pub(super) fn io_err(what: &str, path: &Path, e: io::Error) -> MemoryError {
    MemoryError::Io(format!("cannot {what} {}: {e}", path.display()))
}

/// "today", "1 day ago", "12 days ago".
pub fn age(now_ms: u64, then_ms: u64) -> String {
    match now_ms.saturating_sub(then_ms) / DAY_MS {
        0 => "today".into(),
        1 => "1 day ago".into(),
        n => format!("{n} days ago"),
    }
}

/// Replaces `path` atomically with a private file.
fn write_private(path: &Path, content: &[u8]) -> io::Result<()> {
    crate::tools::write::atomic_write_as(path, content, Some(fs::Permissions::from_mode(0o600)))
}

fn sync_dir(dir: &Path) {
    // A failed directory sync only weakens crash durability; the data is
    // in place, so it does not fail the change.
    let _ = crate::durable::sync_dir(dir);
}

impl ScopeDir {
    fn ensure(&self) -> Result<(), MemoryError> {
        // Synced up to the folder that was there: a new scope's folders
        // (`projects/<id>/memory/`) must outlive a power cut with the
        // entries written into them.
        crate::durable::create_dir_all_synced(&self.dir.join(TRASH))
            .map_err(|e| io_err("create the memory folder", &self.dir, e))?;
        for d in [self.dir.clone(), self.dir.join(TRASH)] {
            let _ = fs::set_permissions(&d, fs::Permissions::from_mode(0o700));
        }
        Ok(())
    }

    pub fn path_of(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.md"))
    }

    /// The folder's entry files, sorted by name: every `*.md` but the
    /// index; hidden files (temp files, the trash) are not entries.
    pub fn files(&self) -> Result<Vec<fs::DirEntry>, MemoryError> {
        let rd = match fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("list", &self.dir, e)),
        };
        let mut files: Vec<(String, fs::DirEntry)> = rd
            .filter_map(|d| d.ok())
            .filter(|d| d.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|d| d.file_name().into_string().ok().map(|n| (n, d)))
            .filter(|(n, _)| n.ends_with(".md") && n != INDEX && !n.starts_with('.'))
            .collect();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(files.into_iter().map(|(_, d)| d).collect())
    }

    /// Reads and parses one entry file of the folder.
    pub fn read_file(&self, file: &str) -> Result<Entry, Problem> {
        let path = self.dir.join(file);
        let stem = file.trim_end_matches(".md");
        let problem = |reason: String| Problem {
            file: path.display().to_string(),
            line: 0,
            reason,
        };
        let bytes = fs::read(&path).map_err(|e| problem(format!("cannot read it: {e}")))?;
        let text = String::from_utf8(bytes).map_err(|_| problem("it is not UTF-8 text".into()))?;
        entry::parse_with(&path.display().to_string(), stem, &text, self.fill(&path))
    }

    /// What fills the keys a hand-written file at `path` leaves out.
    fn fill(&self, path: &Path) -> entry::Fill {
        let mtime_ms = fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or_else(|| self.clock.now_ms(), |d| d.as_millis() as u64);
        entry::Fill {
            mtime_ms,
            kind: if self.label == "user" {
                entry::Kind::User
            } else {
                entry::Kind::Project
            },
        }
    }

    /// Reads every entry file.
    pub fn scan(&self) -> Result<Scan, MemoryError> {
        let mut scan = Scan::default();
        for d in self.files()? {
            let file = d.file_name().to_string_lossy().into_owned();
            match self.read_file(&file) {
                Ok(e) => scan.entries.push(e),
                Err(p) => scan.problems.push(p),
            }
        }
        Ok(scan)
    }

    /// The index text for `entries` (sorted by name).
    fn index_text(&self, entries: &[&Entry]) -> String {
        let now = self.clock.now_ms();
        let mut out = String::new();
        for e in entries {
            // Only extracted entries say where they came from, so the
            // lines of every other entry stay as they were.
            let origin = match &e.meta.session {
                Some(s) => format!(", {} from {s}", e.meta.source),
                None => String::new(),
            };
            out.push_str(&format!(
                "- [{n}]({n}.md) ({}{origin}, updated {}) — {}\n",
                e.meta.kind.as_str(),
                age(now, e.updated_ms),
                e.meta.description,
                n = e.meta.name,
            ));
        }
        out
    }

    /// Refuses an index over a cap, naming the cap and what to do.
    fn check_index(&self, entries: &[&Entry], text: &str) -> Result<(), MemoryError> {
        let lines = text.lines().count();
        let over = if lines > MAX_INDEX_LINES {
            Some(format!(
                "the {} index would have {lines} lines, over the cap of {MAX_INDEX_LINES}",
                self.label
            ))
        } else if text.len() > MAX_INDEX_BYTES {
            Some(format!(
                "the {} index would be {} bytes, over the cap of 25 KB ({MAX_INDEX_BYTES} bytes)",
                self.label,
                text.len()
            ))
        } else {
            None
        };
        let Some(over) = over else { return Ok(()) };
        let mut oldest: Vec<&&Entry> = entries.iter().collect();
        oldest.sort_by_key(|e| (e.updated_ms, e.meta.name.clone()));
        let names: Vec<&str> = oldest
            .iter()
            .take(5)
            .map(|e| e.meta.name.as_str())
            .collect();
        Err(MemoryError::Cap(format!(
            "{over}: merge related entries into one (memory_write replaces an entry) or forget stale ones (memory_forget); the least recently updated are {}",
            names.join(", ")
        )))
    }

    fn write_index(&self, entries: &[&Entry]) -> Result<(), MemoryError> {
        let path = self.dir.join(INDEX);
        write_private(&path, self.index_text(entries).as_bytes())
            .map_err(|e| io_err("write the index", &path, e))
    }

    /// Regenerates the index from what is on disk.
    pub fn reindex(&self) -> Result<Scan, MemoryError> {
        self.ensure()?;
        let scan = self.scan()?;
        let all: Vec<&Entry> = scan.entries.iter().collect();
        self.write_index(&all)?;
        Ok(scan)
    }

    pub fn write(&self, req: &WriteReq) -> Result<Written, MemoryError> {
        self.write_over(&self.scan()?, req)
    }

    /// [`Self::write`] given what is in the folder now (the actor's cache).
    pub fn write_over(&self, scan: &Scan, req: &WriteReq) -> Result<Written, MemoryError> {
        if let Some(why) = entry::check_name(&req.name) {
            return Err(MemoryError::Invalid(why));
        }
        if let Some(why) = entry::check_description(&req.description) {
            return Err(MemoryError::Invalid(why));
        }
        let path = self.path_of(&req.name);
        if let Some(p) = scan.problems.iter().find(|p| Path::new(&p.file) == path) {
            return Err(MemoryError::Malformed(format!(
                "the existing entry {p}; it was left as it is: fix it by hand (see `flytoctl memory_path`) or forget it before replacing it"
            )));
        }
        let old = scan.entries.iter().find(|e| e.meta.name == req.name);
        let now = self.clock.now_ms();
        let meta = Meta {
            name: req.name.clone(),
            description: req.description.clone(),
            kind: req.kind,
            created: old.map_or_else(|| entry::rfc3339(now), |e| e.meta.created.clone()),
            updated: entry::rfc3339(now),
            source: req.source.clone(),
            version: old.map_or(1, |e| e.meta.version.saturating_add(1)),
            session: req.session.clone(),
        };
        let text = entry::render(&meta, &req.body);
        if let Some(found) = secrets::scan(&text) {
            return Err(MemoryError::Secret(format!(
                "refused to save memory `{}`: it contains what looks like {} (rule `{}`) at line {} of the entry. Never save secrets in memory: say where the value is kept instead (an environment variable, a config file). Nothing was written.",
                req.name, found.what, found.rule, found.line
            )));
        }
        if text.len() > MAX_ENTRY_BYTES {
            return Err(MemoryError::Cap(format!(
                "memory `{}` would be {} bytes, over the cap of 16 KB ({MAX_ENTRY_BYTES} bytes) per entry: keep only what will hold next time, or split it into entries by topic",
                req.name,
                text.len()
            )));
        }
        let new = entry::parse(&path.display().to_string(), &req.name, &text)
            .map_err(|p| MemoryError::Invalid(p.to_string()))?;
        let mut all: Vec<&Entry> = scan
            .entries
            .iter()
            .filter(|e| e.meta.name != req.name)
            .collect();
        all.push(&new);
        all.sort_by(|a, b| a.meta.name.cmp(&b.meta.name));
        self.check_index(&all, &self.index_text(&all))?;
        self.ensure()?;
        write_private(&path, text.as_bytes()).map_err(|e| io_err("write", &path, e))?;
        self.write_index(&all)?;
        Ok(Written {
            created: old.is_none(),
            version: meta.version,
            path,
        })
    }

    /// Moves the entry to `.trash/<name>@<ms>.md`, with a `.json` beside it
    /// that says why, who and when.
    pub fn forget(&self, name: &str, reason: &str, source: &str) -> Result<PathBuf, MemoryError> {
        let path = self.path_of(name);
        if !path.is_file() {
            return Err(MemoryError::NotFound(format!(
                "no memory `{name}` in the {} scope: `flytoctl memory_list` shows the entries",
                self.label
            )));
        }
        self.ensure()?;
        let now = self.clock.now_ms();
        let trash = self.dir.join(TRASH);
        let stone = trash.join(format!("{name}@{now}.md"));
        let note = serde_json::json!({
            "name": name,
            "reason": reason,
            "source": source,
            "forgotten": entry::rfc3339(now),
        });
        let note_path = stone.with_extension("json");
        write_private(&note_path, format!("{note:#}\n").as_bytes())
            .map_err(|e| io_err("write", &note_path, e))?;
        fs::rename(&path, &stone).map_err(|e| io_err("move to the trash", &path, e))?;
        sync_dir(&trash);
        sync_dir(&self.dir);
        self.reindex()?;
        self.sweep()?;
        Ok(stone)
    }

    /// Tombstones of `name`, newest last.
    fn tombstones(&self, name: Option<&str>) -> Result<Vec<(String, u64, PathBuf)>, MemoryError> {
        let trash = self.dir.join(TRASH);
        let rd = match fs::read_dir(&trash) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("list", &trash, e)),
        };
        let mut out = Vec::new();
        for d in rd.filter_map(|d| d.ok()) {
            let Ok(file) = d.file_name().into_string() else {
                continue;
            };
            let Some(stem) = file.strip_suffix(".md") else {
                continue;
            };
            let Some((n, ms)) = stem.rsplit_once('@') else {
                continue;
            };
            let Ok(ms) = ms.parse::<u64>() else { continue };
            if name.is_none_or(|want| want == n) {
                out.push((n.to_string(), ms, d.path()));
            }
        }
        out.sort();
        Ok(out)
    }

    /// Brings back the newest tombstone of `name`, byte for byte.
    pub fn restore(&self, name: &str) -> Result<PathBuf, MemoryError> {
        let Some((_, _, stone)) = self.tombstones(Some(name))?.pop() else {
            return Err(MemoryError::NotFound(format!(
                "no forgotten memory `{name}` in the {} scope's trash (tombstones are deleted after 30 days)",
                self.label
            )));
        };
        let path = self.path_of(name);
        if path.exists() {
            return Err(MemoryError::Conflict(format!(
                "memory `{name}` exists again: forget it first (`flytoctl memory_forget {name}`) to restore the old one"
            )));
        }
        let scan = self.scan()?;
        let text = fs::read_to_string(&stone).map_err(|e| io_err("read", &stone, e))?;
        let back = entry::parse_with(&path.display().to_string(), name, &text, self.fill(&stone))
            .map_err(|p| MemoryError::Malformed(p.to_string()))?;
        let mut all: Vec<&Entry> = scan.entries.iter().collect();
        all.push(&back);
        all.sort_by(|a, b| a.meta.name.cmp(&b.meta.name));
        self.check_index(&all, &self.index_text(&all))?;
        fs::rename(&stone, &path).map_err(|e| io_err("restore", &stone, e))?;
        let _ = fs::remove_file(stone.with_extension("json"));
        sync_dir(&self.dir.join(TRASH));
        sync_dir(&self.dir);
        self.write_index(&all)?;
        Ok(path)
    }

    /// Deletes tombstones forgotten 30 days ago or more (by the time in
    /// their name, so the result depends only on the clock). Answers what
    /// it deleted.
    pub fn sweep(&self) -> Result<Vec<PathBuf>, MemoryError> {
        let now = self.clock.now_ms();
        let mut gone = Vec::new();
        for (_, ms, stone) in self.tombstones(None)? {
            if ms.saturating_add(TRASH_TTL_MS) <= now {
                let _ = fs::remove_file(stone.with_extension("json"));
                fs::remove_file(&stone).map_err(|e| io_err("delete", &stone, e))?;
                gone.push(stone);
            }
        }
        if !gone.is_empty() {
            sync_dir(&self.dir.join(TRASH));
        }
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn scope(dir: &Path) -> (ScopeDir, ManualClock) {
        let clock = ManualClock::new(1_700_000_000_000);
        (
            ScopeDir {
                dir: dir.join("memory"),
                label: "project",
                clock: Arc::new(clock.clone()),
            },
            clock,
        )
    }

    fn req(name: &str, body: &str) -> WriteReq {
        WriteReq {
            name: name.into(),
            kind: Kind::Project,
            description: format!("about {name}"),
            body: body.into(),
            source: "s-1".into(),
            session: None,
        }
    }

    #[test]
    fn write_replace_and_index() {
        let tmp = tempfile::tempdir().unwrap();
        let (s, clock) = scope(tmp.path());
        let w = s.write(&req("b-entry", "one")).unwrap();
        assert!(w.created);
        assert_eq!(w.version, 1);
        s.write(&req("a-entry", "two")).unwrap();
        clock.advance_ms(3 * DAY_MS);
        let w = s.write(&req("b-entry", "three")).unwrap();
        assert!(!w.created);
        assert_eq!(w.version, 2);
        let index = fs::read_to_string(s.dir.join(INDEX)).unwrap();
        assert_eq!(
            index,
            "- [a-entry](a-entry.md) (project, updated 3 days ago) — about a-entry\n\
             - [b-entry](b-entry.md) (project, updated today) — about b-entry\n"
        );
        let mode = fs::metadata(s.path_of("a-entry"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let scan = s.scan().unwrap();
        assert_eq!(scan.entries[1].body, "three\n");
        assert_eq!(scan.entries[1].created_ms, 1_700_000_000_000);
    }

    #[test]
    fn caps_are_refused_with_what_to_do() {
        let tmp = tempfile::tempdir().unwrap();
        let (s, _) = scope(tmp.path());
        let err = s
            .write(&req("big", &"x".repeat(MAX_ENTRY_BYTES)))
            .unwrap_err();
        assert!(err.to_string().contains("16 KB"), "{err}");
        assert!(!s.path_of("big").exists());
        for i in 0..MAX_INDEX_LINES {
            s.write(&req(&format!("e{i}"), "b")).unwrap();
        }
        let err = s.write(&req("one-more", "b")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("201 lines, over the cap of 200"), "{msg}");
        assert!(msg.contains("memory_forget"), "{msg}");
        // Replacing still works at the cap.
        s.write(&req("e0", "again")).unwrap();
    }

    #[test]
    fn a_malformed_file_is_reported_and_never_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let (s, _) = scope(tmp.path());
        s.write(&req("good", "x")).unwrap();
        let bad = "---\nname: bad\ndescription: [unclosed\n---\nbody\n";
        fs::write(s.path_of("bad"), bad).unwrap();
        let scan = s.scan().unwrap();
        assert_eq!(scan.entries.len(), 1);
        assert_eq!(scan.problems.len(), 1, "{:?}", scan.problems);
        assert!(scan.problems[0].file.ends_with("bad.md"));
        let err = s.write(&req("bad", "y")).unwrap_err();
        assert!(err.to_string().contains("left as it is"), "{err}");
        assert_eq!(fs::read_to_string(s.path_of("bad")).unwrap(), bad);
    }

    #[test]
    fn forget_restore_and_sweep() {
        let tmp = tempfile::tempdir().unwrap();
        let (s, clock) = scope(tmp.path());
        s.write(&req("gone", "keep me")).unwrap();
        let before = fs::read(s.path_of("gone")).unwrap();
        let stone = s.forget("gone", "stale", "s-2").unwrap();
        assert!(!s.path_of("gone").exists());
        assert_eq!(fs::read(&stone).unwrap(), before);
        let note = fs::read_to_string(stone.with_extension("json")).unwrap();
        assert!(note.contains("stale") && note.contains("s-2"), "{note}");
        assert_eq!(fs::read_to_string(s.dir.join(INDEX)).unwrap(), "");
        s.restore("gone").unwrap();
        assert_eq!(fs::read(s.path_of("gone")).unwrap(), before);
        assert!(
            fs::read_to_string(s.dir.join(INDEX))
                .unwrap()
                .contains("[gone]")
        );
        // Forgotten again, then swept exactly at 30 days.
        let stone = s.forget("gone", "stale", "s-2").unwrap();
        clock.advance_ms(TRASH_TTL_MS - 1);
        assert!(s.sweep().unwrap().is_empty());
        clock.advance_ms(1);
        assert_eq!(s.sweep().unwrap(), vec![stone.clone()]);
        assert!(!stone.exists() && !stone.with_extension("json").exists());
        assert!(s.restore("gone").is_err());
    }

    #[test]
    fn a_secret_is_refused_with_nothing_on_disk() {
        let tmp = tempfile::tempdir().unwrap();
        let (s, _) = scope(tmp.path());
        let token = crate::tools::builtin::test_support::fake_github_token();
        let err = s
            .write(&req("creds", &format!("token: {token}")))
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("Nothing was written"), "{msg}");
        assert!(!msg.contains(&token), "{msg}");
        assert!(!s.path_of("creds").exists());
    }
}
