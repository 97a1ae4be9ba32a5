//! The on-disk format of one memory entry: a markdown file whose YAML
//! frontmatter names it, and the checks a hand-edited file must pass.
//! Parsing reports the first problem with its line; it never guesses.

use serde::{Deserialize, Serialize};

/// Longest description, in characters: it is what the index shows.
pub const MAX_DESCRIPTION: usize = 150;
/// Longest name, in bytes.
pub const MAX_NAME: usize = 64;

/// An entry's type: the four built in, or one declared in config
/// (`[memory.types.NAME]`), by its place in [`declared_types`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    User,
    Feedback,
    Project,
    Reference,
    Declared(u16),
}

/// A type the user declared, with what the model is told about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredType {
    pub name: &'static str,
    pub when_to_save: String,
    pub how_to_use: String,
}

static DECLARED: std::sync::RwLock<Vec<DeclaredType>> = std::sync::RwLock::new(Vec::new());

/// Sets the declared types (at start and on a config reload). A name seen
/// before keeps its place, so entries already parsed keep their type;
/// names are leaked once each (a config holds a handful).
pub fn declare_types(types: &[(String, String, String)]) {
    let Ok(mut d) = DECLARED.write() else {
        return;
    };
    for t in d.iter_mut() {
        t.when_to_save.clear();
        t.how_to_use.clear();
    }
    for (name, when, how) in types {
        match d.iter_mut().find(|t| t.name == name) {
            Some(t) => {
                t.when_to_save = when.clone();
                t.how_to_use = how.clone();
            }
            None => d.push(DeclaredType {
                name: Box::leak(name.clone().into_boxed_str()),
                when_to_save: when.clone(),
                how_to_use: how.clone(),
            }),
        }
    }
    // Removed ones stay as placeholders with no text; parse refuses them.
}

/// The declared types in force (those with text), in config order.
pub fn declared_types() -> Vec<DeclaredType> {
    DECLARED
        .read()
        .map(|d| {
            d.iter()
                .filter(|t| !t.when_to_save.is_empty() || !t.how_to_use.is_empty())
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Every type a write may use, built-in first.
pub fn type_names() -> Vec<&'static str> {
    let mut out = vec!["user", "feedback", "project", "reference"];
    out.extend(declared_types().iter().map(|t| t.name));
    out
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::User => "user",
            Kind::Feedback => "feedback",
            Kind::Project => "project",
            Kind::Reference => "reference",
            Kind::Declared(i) => DECLARED
                .read()
                .ok()
                .and_then(|d| d.get(usize::from(i)).map(|t| t.name))
                .unwrap_or("declared"),
        }
    }
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "user" => Some(Kind::User),
            "feedback" => Some(Kind::Feedback),
            "project" => Some(Kind::Project),
            "reference" => Some(Kind::Reference),
            other => {
                let d = DECLARED.read().ok()?;
                d.iter()
                    .position(|t| {
                        t.name == other && (!t.when_to_save.is_empty() || !t.how_to_use.is_empty())
                    })
                    .and_then(|i| u16::try_from(i).ok())
                    .map(Kind::Declared)
            }
        }
    }
}

impl Serialize for Kind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Kind, D::Error> {
        let name = String::deserialize(d)?;
        Kind::parse(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown memory type `{name}`: use {}, or declare it under [memory.types.{name}] in the config",
                type_names().join(", ")
            ))
        })
    }
}

/// The frontmatter, in the order it is written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    pub name: String,
    pub description: String,
    #[serde(rename = "type")]
    pub kind: Kind,
    pub created: String,
    pub updated: String,
    /// Who wrote it: a session id, `user`, or `extracted` (the background
    /// extraction, whose session is [`Meta::session`]).
    pub source: String,
    pub version: u32,
    /// The session an extracted entry was learned from. Absent in older
    /// and hand-written files, which read and render as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// `source` of the entries the background extraction writes.
pub const SOURCE_EXTRACTED: &str = "extracted";

impl Meta {
    /// Who wrote it, for people: `s3`, or `extracted from s3`.
    pub fn origin(&self) -> String {
        match &self.session {
            Some(s) => format!("{} from {s}", self.source),
            None => self.source.clone(),
        }
    }
}

/// A parsed, valid entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub meta: Meta,
    pub body: String,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// The body's markdown headings, without their `#`s.
    pub headings: Vec<String>,
}

/// A file that could not be read as an entry: where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    /// 1-based; 0 when the problem is the file as a whole.
    pub line: usize,
    pub reason: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} line {}: {}", self.file, self.line, self.reason)
    }
}

/// Why a name is not a valid entry name, if it is not.
pub fn check_name(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    (!ok).then(|| {
        format!(
            "`{name}` is not a memory name: use 1 to {MAX_NAME} lowercase letters, digits and single hyphens, e.g. `test-command`"
        )
    })
}

/// Why a description is not valid, if it is not.
pub fn check_description(d: &str) -> Option<String> {
    if d.trim().is_empty() {
        return Some("the description is empty: say in one line what the entry holds".into());
    }
    if d.contains(['\n', '\r']) {
        return Some("the description must be one line: put details into the body".into());
    }
    let n = d.chars().count();
    (n > MAX_DESCRIPTION).then(|| {
        format!(
            "the description has {n} characters, over the {MAX_DESCRIPTION} allowed: shorten it and put details into the body"
        )
    })
}

pub fn rfc3339(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn parse_time(s: &str) -> Option<u64> {
    let s = s.trim();
    let t = chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .ok()
        .or_else(|| {
            // A person may write a date, or a time without its zone (UTC).
            [
                "%Y-%m-%d %H:%M:%S",
                "%Y-%m-%dT%H:%M:%S",
                "%Y-%m-%d %H:%M",
                "%Y-%m-%dT%H:%M",
            ]
            .iter()
            .find_map(|f| chrono::NaiveDateTime::parse_from_str(s, f).ok())
            .or_else(|| {
                chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
                    .ok()
                    .and_then(|d| d.and_hms_opt(0, 0, 0))
            })
            .map(|n| n.and_utc())
        })?;
    u64::try_from(t.timestamp_millis()).ok()
}

/// The file's text for `meta` and `body` (the body ends with a newline).
pub fn render(meta: &Meta, body: &str) -> String {
    // A struct of strings and a number always serializes; the fallback
    // only keeps this total.
    let yaml = serde_yaml_ng::to_string(meta).unwrap_or_default();
    let mut out = format!("---\n{yaml}---\n\n{}", body.trim_end_matches('\n'));
    out.push('\n');
    out
}

/// The frontmatter as a person or another agent may write it: only what
/// cannot be inferred is needed, the rest is filled (see [`Fill`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    name: Option<String>,
    description: Option<String>,
    #[serde(rename = "type")]
    kind: Option<Kind>,
    created: Option<String>,
    updated: Option<String>,
    source: Option<String>,
    version: Option<u32>,
    session: Option<String>,
}

/// What fills the keys a hand-written file leaves out: the file's own
/// metadata and its scope. Filled keys are written in full only when the
/// entry is next changed; reading never rewrites a file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fill {
    /// `created` and `updated`: the file's modification time.
    pub mtime_ms: u64,
    /// `type`: the scope's own (`project` or `user`).
    pub kind: Kind,
}

impl Default for Fill {
    fn default() -> Fill {
        Fill {
            mtime_ms: 0,
            kind: Kind::Project,
        }
    }
}

/// `source` of an entry whose file does not say who wrote it: a person
/// (or another agent) wrote it by hand.
pub const SOURCE_HAND: &str = "user";

/// The first line of `body` with text, without a heading's `#`s, cut to
/// [`MAX_DESCRIPTION`] characters: the description of a file without one.
fn first_line(body: &str) -> String {
    body.lines()
        .map(|l| l.trim().trim_start_matches('#').trim())
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .chars()
        .take(MAX_DESCRIPTION)
        .collect()
}

/// Parses the text of `<stem>.md`, filling left-out keys with defaults
/// (see [`parse_with`]).
pub fn parse(file: &str, stem: &str, text: &str) -> Result<Entry, Problem> {
    parse_with(file, stem, text, Fill::default())
}

/// Parses the text of `<stem>.md`. A file may leave out every key but
/// what it cannot do without: `name` is the file's, `description` the
/// body's first line, `type` the scope's, the times the file's mtime,
/// `source` [`SOURCE_HAND`], `version` 1. A file with no frontmatter at
/// all is read the same way, as a body.
pub fn parse_with(file: &str, stem: &str, text: &str, fill: Fill) -> Result<Entry, Problem> {
    let problem = |line: usize, reason: String| Problem {
        file: file.to_string(),
        line,
        reason,
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let text = text.replace("\r\n", "\n");
    let (yaml, body) = match text.strip_prefix("---\n") {
        None => ("", text.as_str()),
        Some(rest) => match rest.find("\n---\n") {
            Some(i) => (&rest[..i + 1], &rest[i + 5..]),
            None if rest.ends_with("\n---") => (&rest[..rest.len() - 3], ""),
            // `---` then nothing: an empty frontmatter.
            None if rest.starts_with("---\n") || rest == "---" => {
                ("", rest.strip_prefix("---").unwrap_or(rest))
            }
            None => {
                return Err(problem(
                    1,
                    "the frontmatter is not closed by a `---` line".into(),
                ));
            }
        },
    };
    let written: Written = if yaml.trim().is_empty() {
        Written::default()
    } else {
        serde_yaml_ng::from_str(yaml).map_err(|e| {
            // +1: the opening `---` line.
            let mut line = e.location().map_or(1, |l| l.line() + 1);
            let msg = e.to_string();
            // The library appends " at line L column C"; the line is ours.
            let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
            // A type's own check does not know its position: the `type:` line.
            if msg.contains("unknown memory type")
                && let Some(i) = yaml.lines().position(|l| l.starts_with("type:"))
            {
                line = i + 2;
            }
            problem(line, msg)
        })?
    };
    let body = body.strip_prefix('\n').unwrap_or(body).to_string();
    let filled_time = || rfc3339(fill.mtime_ms);
    let meta = Meta {
        name: written.name.unwrap_or_else(|| stem.to_string()),
        description: written.description.unwrap_or_else(|| first_line(&body)),
        kind: written.kind.unwrap_or(fill.kind),
        created: written.created.unwrap_or_else(filled_time),
        updated: written.updated.unwrap_or_else(filled_time),
        source: written.source.unwrap_or_else(|| SOURCE_HAND.to_string()),
        version: written.version.unwrap_or(1),
        session: written.session,
    };
    let key_line = |key: &str| {
        yaml.lines()
            .position(|l| l.starts_with(&format!("{key}:")))
            .map_or(1, |i| i + 2)
    };
    if let Some(why) = check_name(&meta.name) {
        return Err(problem(key_line("name"), why));
    }
    if meta.name != stem {
        return Err(problem(
            key_line("name"),
            format!(
                "the name `{}` differs from the file's name `{stem}.md`: rename one to match",
                meta.name
            ),
        ));
    }
    if let Some(why) = check_description(&meta.description) {
        return Err(problem(key_line("description"), why));
    }
    let time = |key: &str, value: &str| {
        parse_time(value).ok_or_else(|| {
            problem(
                key_line(key),
                format!("`{key}` is not an RFC 3339 UTC time such as 2025-01-31T09:30:00Z"),
            )
        })
    };
    let created_ms = time("created", &meta.created)?;
    let updated_ms = time("updated", &meta.updated)?;
    let headings = headings(&body);
    Ok(Entry {
        meta,
        body,
        created_ms,
        updated_ms,
        headings,
    })
}

/// Markdown headings outside code fences.
fn headings(body: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in body.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fenced = !fenced;
        } else if !fenced && t.starts_with('#') {
            let h = t.trim_start_matches('#');
            if h.starts_with(' ') {
                out.push(h.trim().to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str) -> Meta {
        Meta {
            name: name.into(),
            description: "how: the tests run".into(),
            kind: Kind::Project,
            created: rfc3339(1_700_000_000_000),
            updated: rfc3339(1_700_000_100_000),
            source: "s-1".into(),
            version: 1,
            session: None,
        }
    }

    #[test]
    fn render_then_parse_round_trips() {
        let m = meta("test-cmd");
        let text = render(&m, "# Tests\nrun `cargo test`\n```\n# not a heading\n```\n");
        let e = parse("test-cmd.md", "test-cmd", &text).unwrap();
        assert_eq!(e.meta, m);
        assert_eq!(e.headings, vec!["Tests".to_string()]);
        assert_eq!(e.created_ms, 1_700_000_000_000);
        assert!(e.body.starts_with("# Tests\n"));
        // CRLF and a BOM from a hand edit read the same.
        let crlf = format!("\u{feff}{}", text.replace('\n', "\r\n"));
        assert_eq!(parse("x", "test-cmd", &crlf).unwrap().meta, m);
    }

    #[test]
    fn an_extracted_entry_names_its_session_and_older_files_read_as_before() {
        let plain = render(&meta("a"), "body");
        assert!(!plain.contains("session"), "{plain}");
        let mut m = meta("a");
        m.source = SOURCE_EXTRACTED.into();
        m.session = Some("s7".into());
        let text = render(&m, "body");
        assert!(
            text.contains("\nsource: extracted\n") && text.contains("\nsession: s7\n"),
            "{text}"
        );
        let e = parse("a.md", "a", &text).unwrap();
        assert_eq!(e.meta, m);
        assert_eq!(e.meta.origin(), "extracted from s7");
        assert_eq!(parse("a.md", "a", &plain).unwrap().meta.session, None);
    }

    #[test]
    fn problems_name_their_line() {
        let text = render(&meta("a"), "body");
        let bad_type = text.replace("type: project", "type: opinion");
        let p = parse("a.md", "a", &bad_type).unwrap_err();
        assert_eq!(p.line, 4, "{p}");
        assert!(p.reason.contains("opinion"), "{p}");
        let p = parse("b.md", "b", &text).unwrap_err();
        assert_eq!(p.line, 2, "{p}");
        assert!(p.reason.contains("differs"), "{p}");
        let p = parse("a.md", "a", "---\nname: a\ntype: project\n---\n\n").unwrap_err();
        assert!(p.reason.contains("description is empty"), "{p}");
        let bad_time = text.replace(&rfc3339(1_700_000_100_000), "last tuesday");
        assert_eq!(parse("a.md", "a", &bad_time).unwrap_err().line, 6);
        let unclosed = text.replace("---\n\n", "");
        assert!(
            parse("a.md", "a", &unclosed)
                .unwrap_err()
                .reason
                .contains("closed")
        );
    }

    #[test]
    fn a_hand_written_entry_gets_what_it_leaves_out_from_its_file() {
        let fill = Fill {
            mtime_ms: 1_700_000_000_000,
            kind: Kind::User,
        };
        let text = "---\nname: tabs\ndescription: prefers tabs\ntype: feedback\n---\n\nUse tabs.\n";
        let e = parse_with("tabs.md", "tabs", text, fill).unwrap();
        assert_eq!(e.meta.kind, Kind::Feedback);
        assert_eq!(e.meta.description, "prefers tabs");
        assert_eq!(e.meta.created, "2023-11-14T22:13:20Z");
        assert_eq!((e.created_ms, e.updated_ms), (fill.mtime_ms, fill.mtime_ms));
        assert_eq!(e.meta.source, SOURCE_HAND);
        assert_eq!(e.meta.version, 1);
        assert_eq!(e.body, "Use tabs.\n");
        // Every key may be left out, even the frontmatter as a whole.
        for text in [
            "# Deploy steps\n\nRun make deploy.\n",
            "---\n---\n# Deploy steps\n\nRun make deploy.\n",
        ] {
            let e = parse_with("deploy.md", "deploy", text, fill).unwrap();
            assert_eq!(e.meta.name, "deploy");
            assert_eq!(e.meta.description, "Deploy steps");
            assert_eq!(e.meta.kind, Kind::User);
            assert_eq!(e.headings, ["Deploy steps"]);
        }
        // A name that cannot be a memory name still says so.
        let p = parse_with("Notes.md", "Notes", "hello\n", fill).unwrap_err();
        assert!(p.reason.contains("not a memory name"), "{p}");
    }

    #[test]
    fn names_and_descriptions_are_checked() {
        for ok in ["a", "test-cmd", "x1-2"] {
            assert_eq!(check_name(ok), None, "{ok}");
        }
        for bad in ["", "A", "a_b", "-a", "a-", "a--b", "a.b", &"a".repeat(65)] {
            assert!(check_name(bad).is_some(), "{bad}");
        }
        assert!(check_description("two\nlines").is_some());
        assert!(check_description(&"é".repeat(150)).is_none());
        assert!(check_description(&"é".repeat(151)).is_some());
    }
}
