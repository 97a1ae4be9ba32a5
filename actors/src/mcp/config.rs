//! `[mcp]` in the config: the servers people bring, checked into specs.
//! Values of `env` and `headers` may name the daemon's environment
//! variables (`${GITHUB_TOKEN}`); they are read when a server starts and
//! never shown: `Debug` and the views print names only.

use crate::tools::sandbox::Profile;
use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// `[mcp]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpSection {
    /// `[mcp.servers.NAME]`.
    pub servers: BTreeMap<String, ServerEntry>,
    /// Servers no session has used for this long are stopped (they start
    /// again with the next session that needs them).
    #[serde(with = "flyto_protocol::duration::human")]
    pub idle_timeout: Duration,
    /// How long a run waits for servers still starting before its first
    /// model call; later calls get their tools once they are up.
    #[serde(with = "flyto_protocol::duration::human")]
    pub startup_wait: Duration,
}

impl Default for McpSection {
    fn default() -> Self {
        McpSection {
            servers: BTreeMap::new(),
            idle_timeout: Duration::from_secs(600),
            startup_wait: Duration::from_secs(5),
        }
    }
}

/// One `[mcp.servers.NAME]` entry: `command` (stdio) or `url` (HTTP).
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables the server gets besides the filtered environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Where a stdio server runs (default: `plans.default_workdir`).
    pub cwd: Option<String>,
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default)]
    pub tools: ToolLists,
    #[serde(default = "startup_timeout", with = "flyto_protocol::duration::human")]
    pub startup_timeout: Duration,
    #[serde(default = "call_timeout", with = "flyto_protocol::duration::human")]
    pub call_timeout: Duration,
    /// `off`, `read-only` or `workspace-write`; default: the sessions'
    /// sandbox profile.
    pub sandbox: Option<String>,
    /// A result larger than this is refused (the model is told).
    #[serde(default = "max_result_bytes")]
    pub max_result_bytes: u64,
}

/// Names only: values may be secrets.
impl std::fmt::Debug for ServerEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerEntry")
            .field("command", &self.command)
            .field("args", &self.args.len())
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("url", &self.url.as_deref().map(mask_url))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

/// `tools = { allow = [...], deny = [...] }`: globs over the server's own
/// tool names; deny wins.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolLists {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

fn yes() -> bool {
    true
}
fn startup_timeout() -> Duration {
    Duration::from_secs(30)
}
fn call_timeout() -> Duration {
    Duration::from_secs(120)
}
fn max_result_bytes() -> u64 {
    1 << 20
}

/// How a server is reached.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    Stdio { command: String, args: Vec<String> },
    Http { url: String },
}

/// Where a stdio server's sandbox comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SandboxChoice {
    /// The sessions' profile.
    Sessions,
    Profile(Profile),
}

/// A checked server entry.
#[derive(Clone)]
pub struct ServerSpec {
    pub name: String,
    pub entry: ServerEntry,
    pub transport: Transport,
    pub sandbox: SandboxChoice,
    allow: Option<GlobSet>,
    deny: Option<GlobSet>,
}

/// What `describe` shows: a URL's query may hold a token.
impl std::fmt::Debug for ServerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSpec")
            .field("name", &self.name)
            .field("transport", &self.describe())
            .field("entry", &self.entry)
            .finish_non_exhaustive()
    }
}

impl ServerSpec {
    /// Whether the server's tool `name` is offered to sessions.
    pub fn tool_allowed(&self, name: &str) -> bool {
        self.allow.as_ref().is_none_or(|a| a.is_match(name))
            && !self.deny.as_ref().is_some_and(|d| d.is_match(name))
    }

    /// One line for `mcp_list`: the command and its arguments, or the URL
    /// (without a query, which may carry a token).
    pub fn describe(&self) -> String {
        match &self.transport {
            Transport::Stdio { command, args } if args.is_empty() => format!("stdio: {command}"),
            Transport::Stdio { command, args } => {
                format!("stdio: {command} {}", mask_args(args).join(" "))
            }
            Transport::Http { url } => format!("http: {}", mask_url(url)),
        }
    }

    /// The literal secrets of this entry: what `mask_args` and `mask_url`
    /// hide, and the values of `env` and `headers` (as written and as
    /// expanded from flytod's environment now).
    fn secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut add = |v: &str| {
            let v = v.trim();
            // Shorter ones would blank out ordinary words and hide nothing.
            if v.chars().count() >= 4 && !out.iter().any(|o: &String| o == v) {
                out.push(v.to_string());
            }
        };
        let args = match &self.transport {
            Transport::Stdio { args, .. } => args.as_slice(),
            Transport::Http { .. } => &[],
        };
        for (arg, shown) in args.iter().zip(mask_args(args)) {
            if shown != *arg {
                // `--token=abc` hides `abc`; an argument hidden whole goes whole.
                add(arg.split_once('=').map_or(arg.as_str(), |(_, v)| v));
                add(arg);
            }
        }
        let urls = args.iter().filter(|a| a.contains("://"));
        let url = match &self.transport {
            Transport::Http { url } => Some(url),
            Transport::Stdio { .. } => None,
        };
        for u in urls.chain(url) {
            for v in url_secrets(u) {
                add(&v);
            }
        }
        for v in self.entry.env.values().chain(self.entry.headers.values()) {
            for value in [Some(v.clone()), expand(v, |n| std::env::var(n).ok()).ok()]
                .into_iter()
                .flatten()
            {
                add(&value);
                // `Bearer abc`: the token alone may be quoted back.
                for word in value.split_whitespace() {
                    if word.len() >= 8 {
                        add(word);
                    }
                }
            }
        }
        // The longest first, so a secret's part never leaves the rest bare.
        out.sort_by_key(|v| std::cmp::Reverse(v.len()));
        out
    }

    /// `text` (an error, a log line, what the server wrote) without this
    /// entry's secrets.
    pub fn scrub(&self, text: &str) -> String {
        Scrubber(self.secrets()).scrub(text)
    }

    /// What [`Self::scrub`] hides, for text made where the spec is not at
    /// hand (a tool call's error).
    pub fn scrubber(&self) -> Scrubber {
        Scrubber(self.secrets())
    }
}

/// Hides a server entry's secrets in text.
#[derive(Default)]
pub struct Scrubber(Vec<String>);

impl Scrubber {
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.0 {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), "***");
            }
        }
        out
    }
}

/// Parts of names that make a flag, a query key or a `NAME=value` secret.
const SECRET_PARTS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "pass",
    "pwd",
    "secret",
    "token",
    "key",
    "apikey",
    "auth",
    "authorization",
    "credential",
    "credentials",
    "bearer",
    "cookie",
    "session",
    "sig",
    "signature",
    "jwt",
    "pat",
];

/// Whether `name` (`--api-key`, `access_token`, `DB_PASSWORD`) names a
/// secret: one of its parts is a secret word, or it runs one in
/// (`apiKey`, `accesstoken`).
fn secret_name(name: &str) -> bool {
    let lower = name.trim_start_matches('-').to_lowercase();
    lower
        .split(['-', '_', '.'])
        .any(|part| SECRET_PARTS.contains(&part))
        || [
            "password",
            "passwd",
            "secret",
            "token",
            "apikey",
            "credential",
        ]
        .iter()
        .any(|w| lower.contains(w))
}

/// Arguments as shown: the value of a secret flag (`--password x`,
/// `--token=x`, `-p x` unless a port), a secret `NAME=value`, a URL's
/// password and secret query values, and anything that looks like a key
/// by itself, are `***`.
pub fn mask_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut hide_next = false;
    for arg in args {
        if std::mem::take(&mut hide_next) && !arg.starts_with('-') {
            out.push("***".to_string());
            continue;
        }
        if arg.starts_with('-') {
            match arg.split_once('=') {
                Some((flag, _)) if secret_name(flag) => out.push(format!("{flag}=***")),
                Some((flag, value)) if value.contains("://") => {
                    out.push(format!("{flag}={}", mask_url(value)))
                }
                Some(_) => out.push(arg.clone()),
                None => {
                    hide_next = secret_name(arg) || arg == "-p";
                    out.push(arg.clone());
                }
            }
            continue;
        }
        if arg.contains("://") {
            out.push(mask_url(arg));
        } else if let Some((name, _)) = arg.split_once('=').filter(|(n, _)| secret_name(n)) {
            out.push(format!("{name}=***"));
        } else if crate::tools::secrets::scan(arg).is_some() {
            out.push("***".to_string());
        } else {
            out.push(arg.clone());
        }
    }
    // `-p 8080` is a port, not a password.
    for (i, arg) in args.iter().enumerate() {
        if arg == "-p"
            && let Some(next) = args.get(i + 1)
            && next.chars().all(|c| c.is_ascii_digit())
        {
            out[i + 1] = next.clone();
        }
    }
    out
}

/// `url` as shown: its password and the values of its secret-looking
/// query parameters are `***`, its fragment is dropped.
pub fn mask_url(url: &str) -> String {
    let Ok(mut parsed) = reqwest::Url::parse(url) else {
        return mask_url_text(url);
    };
    parsed.set_fragment(None);
    if parsed.password().is_some() {
        let _ = parsed.set_password(Some("***"));
    }
    if parsed.query().is_some() {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| {
                let hide = secret_name(&k) || crate::tools::secrets::scan(&v).is_some();
                (
                    k.into_owned(),
                    if hide { "***".into() } else { v.into_owned() },
                )
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.to_string()
}

/// [`mask_url`] for text that does not parse as a URL: the query and
/// fragment go, and a password before `@`.
fn mask_url_text(url: &str) -> String {
    let bare = url.split(['?', '#']).next().unwrap_or(url);
    let Some((scheme, rest)) = bare.split_once("://") else {
        return bare.to_string();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{host}{path}")
        }
        None => bare.to_string(),
    }
}

/// The secret parts of `url`: its password (as written and decoded) and
/// its query values.
fn url_secrets(url: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(parsed) = reqwest::Url::parse(url) {
        if let Some(p) = parsed.password() {
            out.push(p.to_string());
            if let Ok(decoded) = urlencoding_decode(p) {
                out.push(decoded);
            }
        }
        for (_, v) in parsed.query_pairs() {
            out.push(v.into_owned());
        }
    }
    out
}

/// Percent-decoding, for a password as the server or an error may spell it.
fn urlencoding_decode(s: &str) -> Result<String, std::string::FromUtf8Error> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).and_then(|b| hex(*b)),
                bytes.get(i + 2).and_then(|b| hex(*b)),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
}

/// Checks `[mcp]`: every problem names the entry and the fix.
pub fn check(section: &McpSection) -> Result<Vec<ServerSpec>, String> {
    if section.idle_timeout.is_zero() {
        return Err("[mcp] idle_timeout must be more than 0 (for example \"10m\")".into());
    }
    let mut out = Vec::new();
    for (name, entry) in &section.servers {
        let at = format!("[mcp.servers.{name}]");
        if name.is_empty()
            || name.len() > 32
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            || name.contains("__")
        {
            return Err(format!(
                "{at}: a server name is 1 to 32 letters, digits, `-` or `_` (no `__`): its tools are named mcp__<server>__<tool>; rename it"
            ));
        }
        let transport = match (&entry.command, &entry.url) {
            (Some(c), None) if !c.trim().is_empty() => Transport::Stdio {
                command: c.clone(),
                args: entry.args.clone(),
            },
            (Some(_), None) => {
                return Err(format!(
                    "{at}: `command` is empty: give the server's program"
                ));
            }
            (None, Some(u)) => {
                let parsed = reqwest::Url::parse(u).map_err(|e| {
                    format!("{at}: `url = \"{}\"` is not a URL ({e}): use http://HOST:PORT/PATH or https://…", mask_url_text(u))
                })?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(format!(
                        "{at}: `url` must be http:// or https:// (streamable HTTP), not {}://",
                        parsed.scheme()
                    ));
                }
                if !entry.args.is_empty() || !entry.env.is_empty() || entry.cwd.is_some() {
                    return Err(format!(
                        "{at}: `args`, `env` and `cwd` are for stdio servers (`command`), not for `url`: remove them"
                    ));
                }
                Transport::Http { url: u.clone() }
            }
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{at}: give either `command` (a stdio server) or `url` (streamable HTTP), not both"
                ));
            }
            (None, None) => {
                return Err(format!(
                    "{at}: give `command` (a stdio server) or `url` (streamable HTTP)"
                ));
            }
        };
        if matches!(transport, Transport::Stdio { .. }) && !entry.headers.is_empty() {
            return Err(format!(
                "{at}: `headers` are for `url` servers; a stdio server gets `env`"
            ));
        }
        for (k, v) in entry.env.iter().chain(&entry.headers) {
            if k.is_empty() || k.contains('=') {
                return Err(format!(
                    "{at}: `{k}` is not a valid variable or header name"
                ));
            }
            placeholders(v).map_err(|e| format!("{at}: the value of `{k}` {e}"))?;
        }
        for (what, d) in [
            ("startup_timeout", entry.startup_timeout),
            ("call_timeout", entry.call_timeout),
        ] {
            if d.is_zero() {
                return Err(format!(
                    "{at}: `{what}` must be more than 0 (for example \"30s\")"
                ));
            }
        }
        if entry.max_result_bytes == 0 {
            return Err(format!("{at}: `max_result_bytes` must be more than 0"));
        }
        let sandbox = match entry.sandbox.as_deref() {
            None => SandboxChoice::Sessions,
            Some(p) => SandboxChoice::Profile(
                Profile::parse(p).map_err(|e| format!("{at}: `sandbox`: {e}"))?,
            ),
        };
        let globs =
            |list: &[String], which: &str| -> Result<Option<GlobSet>, String> {
                if list.is_empty() {
                    return Ok(None);
                }
                let mut b = GlobSetBuilder::new();
                for g in list {
                    b.add(Glob::new(g).map_err(|e| {
                        format!("{at}: tools.{which} `{g}` is not a valid glob ({e})")
                    })?);
                }
                b.build()
                    .map(Some)
                    .map_err(|e| format!("{at}: tools.{which}: {e}"))
            };
        out.push(ServerSpec {
            name: name.clone(),
            entry: entry.clone(),
            transport,
            sandbox,
            allow: globs(&entry.tools.allow, "allow")?,
            deny: globs(&entry.tools.deny, "deny")?,
        });
    }
    Ok(out)
}

/// The `${NAME}`s in `value`; an error for an unclosed or empty one.
fn placeholders(value: &str) -> Result<Vec<&str>, String> {
    let mut names = Vec::new();
    let mut rest = value;
    while let Some(i) = rest.find("${") {
        let after = &rest[i + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| "has `${` without a closing `}`".to_string())?;
        let name = &after[..end];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "names `${{{name}}}`, which is not a variable name (letters, digits, `_`)"
            ));
        }
        names.push(name);
        rest = &after[end + 1..];
    }
    Ok(names)
}

/// `value` with each `${NAME}` replaced by the daemon's variable `NAME`;
/// an error names the variable that is not set (never the value).
pub fn expand(value: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else {
            return Err("has `${` without a closing `}`".into());
        };
        let name = &after[..end];
        let v = lookup(name).ok_or_else(|| {
            format!("names ${{{name}}}, which is not set in flytod's environment: set it (for a systemd unit, in Environment= or EnvironmentFile=) or write the value")
        })?;
        out.push_str(&v);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<ServerSpec>, String> {
        let section: McpSection = toml::from_str(text).map_err(|e| e.to_string())?;
        check(&section)
    }

    #[test]
    fn durations_take_a_number_of_seconds_or_a_duration_string() {
        let section: McpSection = toml::from_str(
            "idle_timeout = 600\nstartup_wait = \"30s\"\n[servers.a]\ncommand = \"x\"\ncall_timeout = \"2m\"\nstartup_timeout = 15\n",
        )
        .unwrap();
        assert_eq!(section.idle_timeout, Duration::from_secs(600));
        assert_eq!(section.startup_wait, Duration::from_secs(30));
        let a = &section.servers["a"];
        assert_eq!(a.call_timeout, Duration::from_secs(120));
        assert_eq!(a.startup_timeout, Duration::from_secs(15));
    }

    #[test]
    fn entries_need_one_transport_and_valid_names() {
        assert!(
            parse("[servers.a]\ncommand = \"x\"\nurl = \"http://h/\"")
                .unwrap_err()
                .contains("not both")
        );
        assert!(
            parse("[servers.a]\nenabled = true")
                .unwrap_err()
                .contains("give `command`")
        );
        assert!(
            parse("[servers.\"a b\"]\ncommand = \"x\"")
                .unwrap_err()
                .contains("rename it")
        );
        assert!(
            parse("[servers.a__b]\ncommand = \"x\"")
                .unwrap_err()
                .contains("no `__`")
        );
        assert!(
            parse("[servers.a]\nurl = \"ftp://h/\"")
                .unwrap_err()
                .contains("http://")
        );
        assert!(
            parse("[servers.a]\ncommand = \"x\"\nsandbox = \"jail\"")
                .unwrap_err()
                .contains("read-only")
        );
        assert!(
            parse("[servers.a]\ncommand = \"x\"\ntools = { allow = [\"[\"] }")
                .unwrap_err()
                .contains("not a valid glob")
        );
        assert!(
            parse("[servers.a]\ncommand = \"x\"\nenv = { T = \"${}\" }")
                .unwrap_err()
                .contains("not a variable name")
        );
        let ok = parse(
            "[servers.gh]\ncommand = \"gh-mcp\"\nargs = [\"--stdio\"]\ncall_timeout = \"5s\"",
        )
        .unwrap();
        assert_eq!(ok[0].entry.call_timeout, Duration::from_secs(5));
        assert_eq!(ok[0].describe(), "stdio: gh-mcp --stdio");
    }

    #[test]
    fn deny_wins_over_allow() {
        let s = parse("[servers.a]\ncommand = \"x\"\ntools = { allow = [\"read_*\", \"list\"], deny = [\"read_secret\"] }").unwrap();
        assert!(s[0].tool_allowed("read_file"));
        assert!(s[0].tool_allowed("list"));
        assert!(!s[0].tool_allowed("read_secret"));
        assert!(!s[0].tool_allowed("write_file"));
    }

    #[test]
    fn placeholders_expand_and_name_what_is_missing() {
        let look = |n: &str| (n == "TOKEN").then(|| "s3cret".to_string());
        assert_eq!(expand("Bearer ${TOKEN}", look).unwrap(), "Bearer s3cret");
        let e = expand("${NOPE}", look).unwrap_err();
        assert!(e.contains("${NOPE}") && !e.contains("s3cret"), "{e}");
    }

    #[test]
    fn secrets_in_args_and_urls_are_masked_wherever_they_are() {
        let args = |a: &[&str]| mask_args(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            args(&[
                "--password",
                "pw",
                "--token=t0k",
                "-p",
                "x1",
                "-p",
                "8080",
                "--verbose"
            ]),
            [
                "--password",
                "***",
                "--token=***",
                "-p",
                "***",
                "-p",
                "8080",
                "--verbose"
            ]
        );
        assert_eq!(
            args(&["DB_PASSWORD=abc", "--api-key", "k", "--apiKey=k", "dir"]),
            ["DB_PASSWORD=***", "--api-key", "***", "--apiKey=***", "dir"]
        );
        assert_eq!(
            args(&[
                "--db=postgres://u:pw@h/db",
                "https://h/x?access_token=abc&n=1"
            ]),
            [
                "--db=postgres://u:***@h/db",
                "https://h/x?access_token=***&n=1"
            ]
        );
        assert_eq!(
            mask_url("https://u:pw@host/mcp?api_key=abc&page=2#frag"),
            "https://u:***@host/mcp?api_key=***&page=2"
        );
        assert_eq!(
            mask_url_text("http://u:pw@ho st/p?token=x"),
            "http://u:***@ho st/p"
        );
        let s = parse(
            "[servers.a]\ncommand = \"x\"\nargs = [\"--password\", \"hunter22\"]\nenv = { T = \"Bearer envtoken123\" }",
        )
        .unwrap();
        let text = s[0].scrub("failed: hunter22, envtoken123");
        assert_eq!(text, "failed: ***, ***");
    }

    #[test]
    fn debug_never_shows_values() {
        let s = parse("[servers.a]\nurl = \"https://h/mcp?key=abc\"\nheaders = { Authorization = \"Bearer zzz\" }").unwrap();
        let shown = format!("{:?} {}", s[0], s[0].describe());
        assert!(
            !shown.contains("zzz") && !shown.contains("key=abc"),
            "{shown}"
        );
    }
}
