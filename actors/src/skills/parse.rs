//! parse: one `SKILL.md` — its frontmatter (the public Agent Skills
//! fields) and its body, with every refusal naming the line and the fix.
//!
//! Lenient where other implementations break on hand-written files: a
//! BOM, CRLF line ends, an unquoted `a: b: c` description and YAML 1.1
//! `yes`/`no` all parse. YAML first (block scalars, quotes, lists); what
//! YAML refuses goes through a line-based reading of the flat `key: value`
//! subset (plus an indented `metadata:` map) before it is an error.

use std::collections::BTreeMap;

/// Limits of the format (the Agent Skills specification).
pub const NAME_MAX: usize = 64;
pub const DESCRIPTION_MAX: usize = 1024;
/// Bytes of body a skill may have: it enters the window whole when loaded.
pub const BODY_MAX: usize = 64 * 1024;

/// A parsed `SKILL.md`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parsed {
    pub name: String,
    pub description: String,
    pub license: Option<String>,
    pub compatibility: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub allowed_tools: Option<String>,
    /// The markdown after the frontmatter, LF line ends.
    pub body: String,
}

/// Why a `SKILL.md` was refused: the 1-based line and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub reason: String,
}

fn err(line: usize, reason: impl Into<String>) -> ParseError {
    ParseError {
        line,
        reason: reason.into(),
    }
}

/// Checks a skill name: 1-64 lowercase letters, digits and single hyphens,
/// not starting or ending with one.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(format!(
            "name `{name}` must be 1-{NAME_MAX} characters (it has {})",
            name.chars().count()
        ));
    }
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok_chars || name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        return Err(format!(
            "name `{name}` may hold only lowercase letters, digits and single hyphens, not at either end (e.g. `my-skill`)"
        ));
    }
    Ok(())
}

/// Parses `text` (a `SKILL.md`) found in the folder named `folder`.
pub fn parse(text: &str, folder: &str) -> Result<Parsed, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let text = text.replace("\r\n", "\n");
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err(err(
            1,
            "SKILL.md must start with a frontmatter block: a line `---`, `name: ...`, `description: ...`, and a closing `---`",
        ));
    }
    let mut front = String::new();
    let mut closed_at = None;
    let mut offset = first.len();
    for (i, line) in lines.enumerate() {
        offset += line.len();
        if line.trim_end() == "---" {
            closed_at = Some(i + 2);
            break;
        }
        front.push_str(line);
    }
    let Some(close_line) = closed_at else {
        return Err(err(
            1,
            "the frontmatter is never closed: add a line `---` after its last field",
        ));
    };
    let body = text[offset..].trim_start_matches('\n').to_string();
    let fields = read_fields(&front)?;
    let line_of = |key: &str| {
        front
            .lines()
            .position(|l| l.strip_prefix(key).is_some_and(|r| r.starts_with(':')))
            .map_or(2, |i| i + 2)
    };
    let name = match fields.get("name") {
        Some(Field::Text(n)) => n.trim().to_string(),
        Some(Field::Map(_)) => return Err(err(line_of("name"), "`name` must be a single value")),
        None => {
            return Err(err(
                close_line,
                format!("the frontmatter has no `name`: add `name: {folder}`"),
            ));
        }
    };
    check_name(&name).map_err(|e| err(line_of("name"), e))?;
    if name != folder {
        return Err(err(
            line_of("name"),
            format!(
                "name `{name}` differs from its folder `{folder}`: rename the folder or set `name: {folder}`"
            ),
        ));
    }
    let description = match fields.get("description") {
        Some(Field::Text(d)) => d.trim().to_string(),
        Some(Field::Map(_)) => {
            return Err(err(
                line_of("description"),
                "`description` must be text, not a map",
            ));
        }
        None => {
            return Err(err(
                close_line,
                "the frontmatter has no `description`: add one line saying what the skill does and when to use it",
            ));
        }
    };
    if description.is_empty() {
        return Err(err(
            line_of("description"),
            "the description is empty: say what the skill does and when to use it",
        ));
    }
    let count = description.chars().count();
    if count > DESCRIPTION_MAX {
        return Err(err(
            line_of("description"),
            format!(
                "the description has {count} characters, more than {DESCRIPTION_MAX}: shorten it and move details into the body"
            ),
        ));
    }
    if body.len() > BODY_MAX {
        return Err(err(
            close_line + 1,
            format!(
                "the body has {} bytes, more than {BODY_MAX}: move details into references/ files the skill names",
                body.len()
            ),
        ));
    }
    let text_of = |key: &str| match fields.get(key) {
        Some(Field::Text(t)) if !t.trim().is_empty() => Some(t.trim().to_string()),
        _ => None,
    };
    let metadata = match fields.get("metadata") {
        Some(Field::Map(m)) => m.clone(),
        Some(Field::Text(t)) if t.trim().is_empty() => BTreeMap::new(),
        Some(Field::Text(_)) => {
            return Err(err(
                line_of("metadata"),
                "`metadata` must be a map of `key: value` lines indented under it",
            ));
        }
        None => BTreeMap::new(),
    };
    Ok(Parsed {
        name,
        description,
        license: text_of("license"),
        compatibility: text_of("compatibility"),
        metadata,
        allowed_tools: text_of("allowed-tools"),
        body,
    })
}

#[derive(Debug, Clone, PartialEq)]
enum Field {
    Text(String),
    Map(BTreeMap<String, String>),
}

/// The frontmatter's top-level fields; unknown ones (other tools' fields)
/// are read and ignored by the caller.
fn read_fields(front: &str) -> Result<BTreeMap<String, Field>, ParseError> {
    match serde_yaml_ng::from_str::<serde_yaml_ng::Value>(front) {
        Ok(serde_yaml_ng::Value::Mapping(map)) => Ok(map
            .into_iter()
            .filter_map(|(k, v)| Some((scalar(&k)?, field(v))))
            .collect()),
        Ok(serde_yaml_ng::Value::Null) => Ok(BTreeMap::new()),
        Ok(_) => Err(err(2, "the frontmatter must be `key: value` lines")),
        Err(yaml) => read_lines(front).map_err(|mut e| {
            // The line reader's reason is the precise one; YAML's adds context.
            e.reason = format!("{} (YAML: {yaml})", e.reason);
            e
        }),
    }
}

fn scalar(v: &serde_yaml_ng::Value) -> Option<String> {
    use serde_yaml_ng::Value;
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Null => Some(String::new()),
        Value::Sequence(items) => Some(
            items
                .iter()
                .filter_map(scalar)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        Value::Tagged(t) => scalar(&t.value),
        Value::Mapping(_) => None,
    }
}

fn field(v: serde_yaml_ng::Value) -> Field {
    match v {
        serde_yaml_ng::Value::Mapping(m) => Field::Map(
            m.iter()
                .filter_map(|(k, v)| Some((scalar(k)?, scalar(v).unwrap_or_default())))
                .collect(),
        ),
        other => Field::Text(scalar(&other).unwrap_or_default()),
    }
}

/// The flat subset, line by line: `key: value` (the value is everything
/// after the first `: `, colons included), comments, blank lines, and
/// indented `key: value` lines under a key with no value (a map).
fn read_lines(front: &str) -> Result<BTreeMap<String, Field>, ParseError> {
    let mut fields = BTreeMap::new();
    let mut open_map: Option<(String, BTreeMap<String, String>)> = None;
    for (i, raw) in front.lines().enumerate() {
        let line_no = i + 2;
        if raw.trim().is_empty() || raw.trim_start().starts_with('#') {
            continue;
        }
        let indented = raw.starts_with(' ') || raw.starts_with('\t');
        let Some((key, value)) = split_key(raw.trim()) else {
            return Err(err(
                line_no,
                format!(
                    "`{}` is not a `key: value` line: quote values that span lines, or indent map entries under their key",
                    raw.trim()
                ),
            ));
        };
        if indented {
            match &mut open_map {
                Some((_, map)) => {
                    map.insert(key, unquote(&value));
                }
                None => {
                    return Err(err(
                        line_no,
                        "an indented line outside a map: remove the indentation",
                    ));
                }
            }
            continue;
        }
        if let Some((k, map)) = open_map.take() {
            fields.insert(k, Field::Map(map));
        }
        if value.is_empty() {
            open_map = Some((key, BTreeMap::new()));
        } else {
            fields.insert(key, Field::Text(unquote(&value)));
        }
    }
    if let Some((k, map)) = open_map {
        let field = if map.is_empty() {
            Field::Text(String::new())
        } else {
            Field::Map(map)
        };
        fields.insert(k, field);
    }
    Ok(fields)
}

fn split_key(line: &str) -> Option<(String, String)> {
    let (key, value) = match line.split_once(": ") {
        Some((k, v)) => (k, v),
        None => (line.strip_suffix(':')?, ""),
    };
    let key = key.trim();
    if key.is_empty() || key.contains(char::is_whitespace) {
        return None;
    }
    Some((key.to_string(), value.trim().to_string()))
}

fn unquote(v: &str) -> String {
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return v[1..v.len() - 1].to_string();
        }
    }
    v.to_string()
}
