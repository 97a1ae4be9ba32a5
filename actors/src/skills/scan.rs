//! scan: finding skill folders in one source, bounded (depth, folder count,
//! no `.git`, `node_modules` or hidden folders) and in sorted order, so the
//! result never depends on the order the filesystem lists entries in.

use super::parse;
use super::{Broken, Origin, Skill};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How deep below a source's root a skill folder may be.
pub const MAX_DEPTH: usize = 6;
/// Folders looked at per source before the scan stops (and says so).
pub const MAX_FOLDERS: usize = 2000;
/// Resources listed per skill.
pub const MAX_RESOURCES: usize = 500;

/// One skill folder found in a source: the skill, or why it is broken.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Precedence of its source: higher wins.
    pub rank: u8,
    /// The folder, as the listing shows it.
    pub folder: String,
    pub outcome: Result<Arc<Skill>, Broken>,
    /// A broken edit's report while the last good version serves.
    pub kept: Option<Broken>,
}

/// An entry of a folder: its name and whether it is a folder.
pub type Entry = (String, bool);

/// Lists a folder; the scan sorts what it returns. Tests pass one that
/// shuffles.
pub type Lister<'a> = &'a dyn Fn(&Path) -> std::io::Result<Vec<Entry>>;

/// The real lister: folders include symlinks to folders (a user may link a
/// skill in); the skill's own folder is then where the link points.
pub fn list_fs(dir: &Path) -> std::io::Result<Vec<Entry>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        out.push((name, entry.path().is_dir()));
    }
    Ok(out)
}

fn skipped(name: &str) -> bool {
    name.starts_with('.') || name == "node_modules"
}

/// Scans `root` (a source of rank `rank`): every folder holding a
/// `SKILL.md`, parsed. A missing root is an empty source.
pub fn scan(root: &Path, rank: u8, origin: Origin, list: Lister) -> Vec<Candidate> {
    let mut out = Vec::new();
    if !root.is_dir() {
        return out;
    }
    let mut folders = 0usize;
    // Depth-first in sorted order: deterministic, including where the cap cuts.
    let mut stack: Vec<(PathBuf, usize)> = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let mut entries = match list(&dir) {
            Ok(e) => e,
            Err(e) => {
                out.push(broken(
                    rank,
                    &dir,
                    0,
                    format!("cannot list the folder ({e}): check its permissions"),
                ));
                continue;
            }
        };
        entries.sort();
        if depth > 0 && entries.iter().any(|(n, d)| n == "SKILL.md" && !d) {
            out.push(load_dir(&dir, rank, origin));
            continue;
        }
        if depth >= MAX_DEPTH {
            continue;
        }
        for (name, is_dir) in entries.into_iter().rev() {
            if !is_dir || skipped(&name) {
                continue;
            }
            folders += 1;
            if folders > MAX_FOLDERS {
                out.push(broken(
                    rank,
                    root,
                    0,
                    format!(
                        "the scan stopped after {MAX_FOLDERS} folders: keep only skill folders here (the rest of this source was not read)"
                    ),
                ));
                return out;
            }
            stack.push((dir.join(name), depth + 1));
        }
    }
    out
}

fn broken(rank: u8, folder: &Path, line: usize, reason: String) -> Candidate {
    let file = if folder.join("SKILL.md").is_file() {
        folder.join("SKILL.md")
    } else {
        folder.to_path_buf()
    };
    Candidate {
        rank,
        folder: folder.display().to_string(),
        outcome: Err(Broken {
            file: file.display().to_string(),
            line,
            reason,
        }),
        kept: None,
    }
}

fn load_dir(dir: &Path, rank: u8, origin: Origin) -> Candidate {
    let folder_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let file = dir.join("SKILL.md");
    let meta = match std::fs::metadata(&file) {
        Ok(m) => m,
        Err(e) => return broken(rank, dir, 0, format!("cannot read it ({e})")),
    };
    // Read at most a little past the cap: a huge file is refused, not loaded.
    let limit = (parse::BODY_MAX + 16 * 1024) as u64;
    if meta.len() > limit {
        return broken(
            rank,
            dir,
            0,
            format!(
                "the file has {} bytes, more than the {} a skill may have: move details into references/",
                meta.len(),
                limit
            ),
        );
    }
    let text = match std::fs::read(&file) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(t) => t,
            Err(_) => return broken(rank, dir, 0, "the file is not UTF-8 text".into()),
        },
        Err(e) => return broken(rank, dir, 0, format!("cannot read it ({e})")),
    };
    let canonical = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    match parse::parse(&text, &folder_name) {
        Ok(parsed) => Candidate {
            rank,
            folder: dir.display().to_string(),
            outcome: Ok(Arc::new(Skill {
                resources: list_resources(&canonical),
                parsed,
                origin,
                folder: dir.display().to_string(),
                dir: Some(canonical),
            })),
            kept: None,
        },
        Err(e) => broken(rank, dir, e.line, e.reason),
    }
}

/// The files of a skill folder other than its `SKILL.md`, relative and
/// sorted; symlinks only when they stay inside the folder.
pub fn list_resources(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    while let Some((d, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || (depth == 0 && name == "SKILL.md") {
                continue;
            }
            let path = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                if depth + 1 < MAX_DEPTH {
                    stack.push((path, depth + 1));
                }
                continue;
            }
            if ft.is_symlink() {
                let inside =
                    std::fs::canonicalize(&path).is_ok_and(|t| t.starts_with(dir) && t.is_file());
                if !inside {
                    continue;
                }
            }
            if let Ok(rel) = path.strip_prefix(dir) {
                out.push(rel.display().to_string());
            }
            if out.len() >= MAX_RESOURCES {
                out.sort();
                return out;
            }
        }
    }
    out.sort();
    out
}

/// The built-in skills, from the copy embedded at build time.
pub fn builtins(files: &[(&str, &[u8])]) -> Vec<Candidate> {
    let mut out = Vec::new();
    for (path, bytes) in files {
        let Some((folder, "SKILL.md")) = path.split_once('/') else {
            continue;
        };
        let display = format!("<builtin>/{folder}");
        let outcome = std::str::from_utf8(bytes)
            .map_err(|_| (0, "the file is not UTF-8 text".to_string()))
            .and_then(|t| parse::parse(t, folder).map_err(|e| (e.line, e.reason)));
        let prefix = format!("{folder}/");
        let resources = files
            .iter()
            .filter_map(|(p, _)| p.strip_prefix(&prefix))
            .filter(|r| *r != "SKILL.md")
            .map(str::to_string)
            .collect();
        out.push(Candidate {
            rank: 0,
            folder: display.clone(),
            outcome: match outcome {
                Ok(parsed) => Ok(Arc::new(Skill {
                    parsed,
                    origin: Origin::Builtin,
                    folder: display,
                    dir: None,
                    resources,
                })),
                Err((line, reason)) => Err(Broken {
                    file: format!("{display}/SKILL.md"),
                    line,
                    reason,
                }),
            },
            kept: None,
        });
    }
    out
}
