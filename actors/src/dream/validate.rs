//! validate: what a dream changed (the per-entry diff) and whether its
//! result may go live. A result is refused whole when any check fails:
//! an entry that does not parse, a cap passed, a secret, an entry a person
//! wrote (`source: user`) removed or rewritten without a newer statement
//! of theirs cited, an entry gone without a tombstone, or more entries
//! removed than the loss cap allows.

use crate::memory::entry::{self, Entry};
use crate::memory::store::{INDEX, MAX_ENTRY_BYTES, MAX_INDEX_BYTES, MAX_INDEX_LINES, TRASH};
use crate::memory::versions::Files;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A removal the model made: a tombstone in `.trash/` with its note.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removal {
    pub name: String,
    pub reason: String,
    /// Set when the entry was merged into another one.
    pub merged_into: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diff {
    pub added: Vec<String>,
    pub updated: Vec<String>,
    pub merged: Vec<Removal>,
    pub tombstoned: Vec<Removal>,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.updated.is_empty()
            && self.merged.is_empty()
            && self.tombstoned.is_empty()
    }

    pub fn removed(&self) -> usize {
        self.merged.len() + self.tombstoned.len()
    }
}

/// A newer statement of the user that a change to their entry rests on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Citation {
    pub entry: String,
    pub session: String,
    pub quote: String,
    pub said_ms: u64,
}

/// Top-level entry files of a folder, by name.
fn entries(files: &Files) -> BTreeMap<String, &[u8]> {
    files
        .iter()
        .filter(|(rel, _)| !rel.contains('/') && rel.ends_with(".md") && *rel != INDEX)
        .map(|(rel, bytes)| (rel.trim_end_matches(".md").to_string(), bytes.as_slice()))
        .collect()
}

/// Tombstone notes added since `base`: `.trash/<name>@<ms>.json`.
fn new_notes(base: &Files, result: &Files) -> BTreeMap<String, serde_json::Value> {
    let prefix = format!("{TRASH}/");
    result
        .iter()
        .filter(|(rel, _)| rel.starts_with(&prefix) && rel.ends_with(".json"))
        .filter(|(rel, _)| !base.contains_key(*rel))
        .filter_map(|(_, bytes)| {
            let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
            Some((v["name"].as_str()?.to_string(), v))
        })
        .collect()
}

/// What `result` changed of `base`, entry by entry.
pub fn diff(base: &Files, result: &Files) -> Diff {
    let (old, new) = (entries(base), entries(result));
    let notes = new_notes(base, result);
    let mut d = Diff::default();
    for (name, bytes) in &new {
        match old.get(name) {
            None => d.added.push(name.clone()),
            Some(b) if b != bytes => d.updated.push(name.clone()),
            Some(_) => {}
        }
    }
    for name in old.keys().filter(|n| !new.contains_key(*n)) {
        let note = notes.get(name);
        let reason = note
            .and_then(|n| n["reason"].as_str())
            .unwrap_or("(no tombstone)")
            .to_string();
        let merged_into = note
            .and_then(|n| n["merged_into"].as_str())
            .map(str::to_string);
        let r = Removal {
            name: name.clone(),
            reason,
            merged_into: merged_into.clone(),
        };
        if merged_into.is_some() {
            d.merged.push(r);
        } else {
            d.tombstoned.push(r);
        }
    }
    d
}

/// The content change of one entry: a unified diff of its file (from an
/// empty file for an added entry, to one for a removed entry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Patch {
    pub name: String,
    pub unified: String,
}

/// The unified diff of every entry `result` added, changed or removed,
/// by name.
pub fn patches(base: &Files, result: &Files) -> Vec<Patch> {
    let (old, new) = (entries(base), entries(result));
    let names: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| {
            let (a, b) = (old.get(name).copied(), new.get(name).copied());
            if a == b {
                return None;
            }
            let (a, b) = (
                String::from_utf8_lossy(a.unwrap_or_default()),
                String::from_utf8_lossy(b.unwrap_or_default()),
            );
            let file = format!("{name}.md");
            let unified = similar::TextDiff::from_lines(a.as_ref(), b.as_ref())
                .unified_diff()
                .context_radius(3)
                .header(&format!("a/{file}"), &format!("b/{file}"))
                .to_string();
            Some(Patch {
                name: name.clone(),
                unified,
            })
        })
        .collect()
}

/// At most this many of `entries` may be removed by one run: `max_removed`
/// as a count, or as a percentage; at least 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LossCap {
    Entries(usize),
    Percent(f64),
}

impl LossCap {
    pub fn allowed(&self, entries: usize) -> usize {
        match *self {
            LossCap::Entries(n) => n.max(1),
            LossCap::Percent(p) => ((entries as f64 * p / 100.0).floor() as usize).max(1),
        }
    }
}

fn parse_entry(name: &str, bytes: &[u8]) -> Result<Entry, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| format!("`{name}` is not UTF-8"))?;
    entry::parse(&format!("{name}.md"), name, text).map_err(|p| p.to_string())
}

/// Whether `result` may replace `base`; the reason it may not.
pub fn check(
    base: &Files,
    result: &Files,
    cap: LossCap,
    citations: &[Citation],
) -> Result<Diff, String> {
    let d = diff(base, result);
    let (old, new) = (entries(base), entries(result));
    for (name, bytes) in &new {
        // A file that was malformed before and is untouched stays as the
        // person left it; anything the run wrote must parse.
        if old.get(name) == Some(bytes) {
            continue;
        }
        parse_entry(name, bytes).map_err(|e| format!("invalid entry: {e}"))?;
        if bytes.len() > MAX_ENTRY_BYTES {
            return Err(format!(
                "cap: `{name}` is {} bytes, over 16 KB",
                bytes.len()
            ));
        }
        if let Some(hit) = crate::tools::secrets::scan(&String::from_utf8_lossy(bytes)) {
            return Err(format!(
                "secret: `{name}` holds what looks like {} (rule `{}`)",
                hit.what, hit.rule
            ));
        }
    }
    if let Some(index) = result.get(INDEX) {
        let text = String::from_utf8_lossy(index);
        if text.lines().count() > MAX_INDEX_LINES || text.len() > MAX_INDEX_BYTES {
            return Err("cap: the index is over 200 lines or 25 KB".into());
        }
    }
    for r in d.tombstoned.iter().chain(&d.merged) {
        if r.reason == "(no tombstone)" {
            return Err(format!(
                "`{}` is gone without a tombstone: a dream may only forget, never delete",
                r.name
            ));
        }
    }
    let cited: BTreeSet<&str> = citations.iter().map(|c| c.entry.as_str()).collect();
    let touched: BTreeSet<&String> = d
        .updated
        .iter()
        .chain(d.tombstoned.iter().map(|r| &r.name))
        .chain(d.merged.iter().map(|r| &r.name))
        .collect();
    for name in touched {
        let Some(bytes) = old.get(name) else { continue };
        let Ok(was) = parse_entry(name, bytes) else {
            continue;
        };
        if was.meta.source == "user" && !cited.contains(name.as_str()) {
            return Err(format!(
                "user entry: `{name}` was written by the user and the run changed it without citing a newer statement of theirs"
            ));
        }
    }
    let allowed = cap.allowed(old.len());
    if d.removed() > allowed {
        return Err(format!(
            "loss cap: the run would remove {} of {} entries, more than the {allowed} allowed (dream.max_removed)",
            d.removed(),
            old.len()
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry_file(name: &str, source: &str, body: &str) -> Vec<u8> {
        format!(
            "---\nname: {name}\ndescription: about {name}\ntype: project\ncreated: 2026-01-01T00:00:00Z\nupdated: 2026-01-01T00:00:00Z\nsource: {source}\nversion: 1\n---\n{body}\n"
        )
        .into_bytes()
    }

    fn folder(n: usize) -> Files {
        (0..n)
            .map(|i| (format!("e{i}.md"), entry_file(&format!("e{i}"), "s1", "x")))
            .collect()
    }

    fn forget(files: &mut Files, name: &str, merged_into: Option<&str>) {
        let bytes = files.remove(&format!("{name}.md")).unwrap();
        files.insert(format!(".trash/{name}@1.md"), bytes);
        let note = serde_json::json!({"name": name, "reason": "stale", "merged_into": merged_into});
        files.insert(
            format!(".trash/{name}@1.json"),
            note.to_string().into_bytes(),
        );
    }

    #[test]
    fn the_loss_cap_counts_merges_and_tombstones() {
        let base = folder(30);
        let mut result = base.clone();
        for i in 0..3 {
            forget(&mut result, &format!("e{i}"), None);
        }
        let d = check(&base, &result, LossCap::Percent(10.0), &[]).unwrap();
        assert_eq!(d.tombstoned.len(), 3);
        forget(&mut result, "e3", Some("e4"));
        let err = check(&base, &result, LossCap::Percent(10.0), &[]).unwrap_err();
        assert!(
            err.starts_with("loss cap: the run would remove 4 of 30"),
            "{err}"
        );
        assert_eq!(LossCap::Percent(10.0).allowed(5), 1);
    }

    #[test]
    fn a_user_entry_changes_only_with_a_citation_and_nothing_vanishes() {
        let mut base = folder(10);
        base.insert("pref.md".into(), entry_file("pref", "user", "tabs"));
        let mut result = base.clone();
        result.insert("pref.md".into(), entry_file("pref", "user", "spaces"));
        let err = check(&base, &result, LossCap::Percent(10.0), &[]).unwrap_err();
        assert!(err.starts_with("user entry: `pref`"), "{err}");
        let cite = Citation {
            entry: "pref".into(),
            session: "s3".into(),
            quote: "use spaces".into(),
            said_ms: 5,
        };
        let d = check(&base, &result, LossCap::Percent(10.0), &[cite]).unwrap();
        assert_eq!(d.updated, ["pref"]);
        let mut gone = base.clone();
        gone.remove("e1.md");
        let err = check(&base, &gone, LossCap::Percent(10.0), &[]).unwrap_err();
        assert!(err.contains("without a tombstone"), "{err}");
    }

    #[test]
    fn what_the_run_writes_must_parse_and_hold_no_secret() {
        let base = folder(3);
        let mut result = base.clone();
        result.insert("bad.md".into(), b"---\nname: [\n---\n".to_vec());
        assert!(
            check(&base, &result, LossCap::Entries(1), &[])
                .unwrap_err()
                .starts_with("invalid entry")
        );
        let mut result = base.clone();
        let token = format!("ghp_{}", "aB3dE5fG7hJ9kL1m".repeat(3));
        result.insert(
            "creds.md".into(),
            entry_file("creds", "s1", &format!("token {}", &token[..40])),
        );
        let err = check(&base, &result, LossCap::Entries(1), &[]).unwrap_err();
        assert!(err.starts_with("secret"), "{err}");
    }
}
