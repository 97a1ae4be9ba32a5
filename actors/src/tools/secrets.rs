//! secrets: finds secrets (cloud keys, API tokens with a distinctive
//! prefix, private key blocks, high-entropy values assigned to secret-looking
//! names) in text that `write` and `edit` are about to put on disk.
//!
//! It owns the rules, the placeholder judgement and the refusal wording. It
//! never touches the file system, and never puts the secret itself into a
//! [`Match`] or a message: those go to the model and into the transcript.
//!
//! A false positive blocks legitimate work and the model cannot override
//! it, so a pattern match alone is not enough: every candidate's random
//! part is judged, and placeholders pass. A value is a placeholder when it
//! - is a template or a reference (`${VAR}`, `{{ x }}`, `<token>`, `$VAR`,
//!   `%(name)s`);
//! - contains a word of [`PLACEHOLDER_WORDS`] once lowercased and stripped
//!   of separators (`your-api-key-here`, `changeme`, `<REDACTED>`, and the
//!   `EXAMPLE` that providers put into their documented keys, such as AWS's
//!   `AKIAIOSFODNN7EXAMPLE`);
//! - is mostly one repeated character (`xxxx…`, `0000…`): its longest run
//!   is at least 4 long and a third of the value;
//! - holds a run of 6 or more consecutive characters in order (`123456`,
//!   `abcdef`), which random keys practically never do;
//! - or has too little Shannon entropy per character for its length: a
//!   random string of `n` characters uses close to `log2(n)` bits per
//!   character (up to its alphabet's size), so less than 70 % of that (at
//!   most 3 bits) means a repetitive, made-up value.
//!
//! A value that is masked or cut short (`***`, `…`, `...`, `•`) is not a
//! secret either, nor is a vendor pattern that is only part of a longer
//! string (`my-sk-…`, `sk-…-cache`, `sk-abc***`): a match must stand alone.
//! Names for values that are not secrets (anti-CSRF tokens such as
//! `csrf_token` or `X-XSRF-TOKEN`, pagination tokens) are left out, and an
//! assignment never reaches past its line end (`API_KEY=` then a newline
//! has an empty value).
//!
//! Values assigned to a secret-looking name without a vendor prefix
//! (`db_password = "…"`) are judged harder, because names alone say little:
//! at least 16 characters, a letter and a digit or symbol, 3.5 bits per
//! character, and not a path, a URL, a dotted identifier or code.

use std::sync::LazyLock;

use regex::Regex;

/// Where a secret was found. Deliberately holds no part of the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    /// Rule id, e.g. `github-token`.
    pub rule: &'static str,
    /// What the rule detects, for people.
    pub what: &'static str,
    /// 1-based line of the secret's first character.
    pub line: usize,
}

impl Match {
    /// The refusal the model sees: which rule, which line, what to do instead.
    pub fn refusal(&self, path: &str) -> String {
        format!(
            "refused to save {path}: the new content contains what looks like {} (rule \
             `{}`) at line {}. Secrets must not be written into files: read it at run time \
             from an environment variable or a config file outside the workdir, or put a \
             placeholder such as <YOUR_KEY> in its place. The file was not changed.",
            self.what, self.rule, self.line
        )
    }
}

/// Words that mark a value as made up. Compared against the value
/// lowercased with everything but letters and digits removed, so
/// `your_api_key`, `CHANGE-ME` and `Not-A-Real-Key` all count. Each is long
/// enough (4+ letters) that a random key contains it by chance about once
/// in 10^4 keys or less.
pub const PLACEHOLDER_WORDS: &[&str] = &[
    "example",
    "sample",
    "placeholder",
    "dummy",
    "fake",
    "changeme",
    "redacted",
    "your",
    "insert",
    "replace",
    "notareal",
    "foobar",
];

/// How much a rule's match has to look random before it is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Judge {
    /// A distinctive prefix or a key name fixes what the value is: refuse it
    /// unless it is a placeholder.
    Token,
    /// Only the name suggests a secret: refuse only a value that clearly
    /// looks random (see the module doc).
    Assigned,
}

struct Rule {
    id: &'static str,
    what: &'static str,
    re: Regex,
    judge: Judge,
}

/// (id, what, pattern, judge). Each pattern has a group `secret` (the whole
/// secret: what is reported and compared between old and new text) and may
/// have a group `body` (its random part, which is judged; else `secret` is).
type RuleSpec = (&'static str, &'static str, &'static str, Judge);

/// Characters around a value in an assignment: an optional closing quote of
/// a quoted key, the operator (`=`, `:`, `:=`, `=>`, a Rust/TS type
/// annotation before `=`), an optional opening quote. Spaces only, never a
/// line end: in `API_KEY=` followed by a newline the next line is not the
/// value.
macro_rules! assign {
    () => {
        r#"["']?[ \t]*(?:(?::[ \t]*&?(?:'static[ \t]+)?[A-Za-z][A-Za-z0-9_<>]*[ \t]*)?(?:=|:=|=>)|:)[ \t]*["'`]?"#
    };
}

/// Rules in priority order: at the same position, the first wins (so
/// `sk-ant-` is reported as Anthropic, not as the generic `sk-` form, and a
/// prefixed token assigned to `API_KEY` names its vendor).
static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let specs: [RuleSpec; 19] = [
        (
            "private-key",
            "a private key block",
            // The header plus a base64 body: code that merely names the
            // header (PEM parsers) has no 40-character base64 run after it.
            r"(?P<secret>-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?s:.){0,200}?(?P<body>[A-Za-z0-9+/]{40,}))",
            Judge::Token,
        ),
        (
            "aws-access-key-id",
            "an AWS access key id",
            r"\b(?P<secret>(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)(?P<body>[A-Z0-9]{16}))\b",
            Judge::Token,
        ),
        (
            "aws-secret-access-key",
            "an AWS secret access key",
            concat!(
                r"(?i:\b(?:aws[_.\-]?secret[_.\-]?(?:access[_.\-]?)?key|secret[_.\-]?access[_.\-]?key))",
                assign!(),
                r"(?P<secret>[A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)"
            ),
            Judge::Token,
        ),
        (
            "github-token",
            "a GitHub token",
            r"\b(?P<secret>gh[pousr]_(?P<body>[A-Za-z0-9]{36}))\b",
            Judge::Token,
        ),
        (
            "github-fine-grained-token",
            "a GitHub fine-grained personal access token",
            r"\b(?P<secret>github_pat_(?P<body>[A-Za-z0-9]{22}_[A-Za-z0-9]{59}))\b",
            Judge::Token,
        ),
        (
            "gitlab-token",
            "a GitLab personal access token",
            r"\b(?P<secret>glpat-(?P<body>[A-Za-z0-9_\-]{20,}))",
            Judge::Token,
        ),
        (
            "anthropic-api-key",
            "an Anthropic API key",
            r"\b(?P<secret>sk-ant-[a-z]+[0-9]{2}-(?P<body>[A-Za-z0-9_\-]{32,}))",
            Judge::Token,
        ),
        (
            "openai-project-key",
            "an OpenAI project, service-account or admin key",
            r"\b(?P<secret>sk-(?:proj|svcacct|admin)-(?P<body>[A-Za-z0-9_\-]{40,}))",
            Judge::Token,
        ),
        (
            "openai-style-api-key",
            "an OpenAI-style API key (sk-…)",
            // No dashes after the prefix: keeps kebab-case identifiers
            // like `sk-some-long-name` out.
            r"\b(?P<secret>sk-(?P<body>[A-Za-z0-9]{32,}))\b",
            Judge::Token,
        ),
        (
            "slack-token",
            "a Slack token",
            r"\b(?P<secret>xox[baprs]-(?P<body>[0-9]{6,}-[A-Za-z0-9\-]{10,}))",
            Judge::Token,
        ),
        (
            "slack-webhook",
            "a Slack incoming webhook URL",
            r"(?P<secret>https://hooks\.slack\.com/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/(?P<body>[A-Za-z0-9]{20,}))",
            Judge::Token,
        ),
        (
            "google-api-key",
            "a Google API key",
            r"\b(?P<secret>AIza(?P<body>[0-9A-Za-z_\-]{35}))",
            Judge::Token,
        ),
        (
            "stripe-live-key",
            "a Stripe live secret or restricted key",
            r"\b(?P<secret>(?:sk|rk)_live_(?P<body>[0-9A-Za-z]{24,}))",
            Judge::Token,
        ),
        (
            "npm-token",
            "an npm access token",
            r"\b(?P<secret>npm_(?P<body>[A-Za-z0-9]{36}))\b",
            Judge::Token,
        ),
        (
            "huggingface-token",
            "a Hugging Face access token",
            r"\b(?P<secret>hf_(?P<body>[A-Za-z]{34}))\b",
            Judge::Token,
        ),
        (
            "sendgrid-api-key",
            "a SendGrid API key",
            r"\b(?P<secret>SG\.(?P<body>[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}))",
            Judge::Token,
        ),
        (
            "pypi-token",
            "a PyPI upload token",
            r"\b(?P<secret>pypi-AgEIcHlwaS5vcmc(?P<body>[A-Za-z0-9_\-]{50,}))",
            Judge::Token,
        ),
        (
            "bearer-token",
            "a bearer token in an Authorization header",
            r"(?i:\bauthorization[\x22']?[ \t]*[:=][ \t]*[\x22']?bearer[ \t]+)(?P<secret>[A-Za-z0-9_~+/.\-]{16,}=*)",
            Judge::Assigned,
        ),
        (
            "generic-secret-assignment",
            "a high-entropy value assigned to a secret-looking name",
            // The name must end in the keyword: `password_hash`,
            // `token_url` or `api_key_env` do not hold the secret itself.
            concat!(
                r"(?i:\b(?P<name>[a-z0-9_.\-]*(?:secret|token|passw(?:or)?d|pwd|credentials?|api[_.\-]?key|apikey",
                r"|access[_.\-]?key|private[_.\-]?key|secret[_.\-]?key|auth[_.\-]?key|signing[_.\-]?key",
                r"|encryption[_.\-]?key|master[_.\-]?key|client[_.\-]?key)))",
                assign!(),
                r"(?P<secret>[^\s\x22'`,;]{1,200})"
            ),
            Judge::Assigned,
        ),
    ];
    specs
        .into_iter()
        .filter_map(|(id, what, pattern, judge)| match Regex::new(pattern) {
            Ok(re) => Some(Rule {
                id,
                what,
                re,
                judge,
            }),
            // The patterns are constants checked by a test; a broken one
            // must not take the file tools down with it.
            Err(err) => {
                tracing::error!(rule = id, %err, "secret rule does not compile");
                None
            }
        })
        .collect()
});

/// Shannon entropy of `s` in bits per character.
fn entropy(s: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    let mut n = 0usize;
    for c in s.chars() {
        *counts.entry(c).or_insert(0usize) += 1;
        n += 1;
    }
    if n == 0 {
        return 0.0;
    }
    let n = n as f64;
    counts
        .values()
        .map(|&k| {
            let p = k as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// The entropy below which a prefixed token's body is made up: 70 % of
/// what a random string of its length reaches, at most 3 bits.
fn token_threshold(len: usize) -> f64 {
    (0.7 * (len.max(2) as f64).log2()).min(3.0)
}

fn longest_run(s: &str) -> usize {
    let mut best = 0;
    let mut run = 0;
    let mut prev = None;
    for c in s.chars() {
        run = if Some(c) == prev { run + 1 } else { 1 };
        prev = Some(c);
        best = best.max(run);
    }
    best
}

/// Longest stretch of characters each one after the previous (`3456`, `cdef`).
fn longest_sequence(s: &str) -> usize {
    let mut best = 0;
    let mut run = 0;
    let mut prev: Option<char> = None;
    for c in s.chars() {
        let next = prev.and_then(|p| char::from_u32(p as u32 + 1));
        run = if c.is_ascii_alphanumeric() && next == Some(c) {
            run + 1
        } else {
            1
        };
        prev = Some(c);
        best = best.max(run);
    }
    best
}

/// Why `value` is a placeholder rather than a secret, if it is one.
fn placeholder(value: &str) -> Option<&'static str> {
    if value.starts_with('$')
        || value.starts_with('<')
        || ["${", "{{", "%(", "<", ">"]
            .iter()
            .any(|t| value.contains(t))
    {
        return Some("template or reference");
    }
    if ["***", "•", "…", "...", "###"]
        .iter()
        .any(|m| value.contains(m))
    {
        return Some("masked or cut short");
    }
    let plain: String = value
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if PLACEHOLDER_WORDS.iter().any(|w| plain.contains(w)) {
        return Some("placeholder word");
    }
    let run = longest_run(value);
    if run >= 4 && run * 3 >= plain.len() {
        return Some("one repeated character");
    }
    if longest_sequence(value) >= 6 {
        return Some("characters in order");
    }
    None
}

/// Paths, URLs and dotted identifiers (`settings.API_KEY2`) are where
/// values come from, not secrets.
fn reference(value: &str) -> bool {
    value.contains("://")
        || value.starts_with('/')
        || value.starts_with("./")
        || value.starts_with("../")
        || value.starts_with("~/")
        || value.split('.').count() > 1
            && value.split('.').all(|part| {
                part.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                    && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        || value.contains(['(', '[', '{'])
}

/// Whether `value` (a rule's random part) is refused under `judge`.
fn looks_secret(value: &str, judge: Judge) -> bool {
    if placeholder(value).is_some() {
        return false;
    }
    match judge {
        Judge::Token => entropy(value) >= token_threshold(value.chars().count()),
        Judge::Assigned => {
            value.chars().count() >= 16
                && value.chars().any(|c| c.is_ascii_alphabetic())
                // Letters alone (with `_ - .`) are names and words.
                && value
                    .chars()
                    .any(|c| c.is_ascii_digit() || !(c.is_ascii_alphabetic() || "_-.".contains(c)))
                && !reference(value)
                && entropy(value) >= 3.5
        }
    }
}

/// Whether the token at `start..end` of `text` is a whole value: not the
/// middle of a longer identifier (`my-sk-…`, `sk-…-cache`) and not the
/// visible part of a masked or shortened one (`sk-abc***`, `ghp_ab…`).
fn stands_alone(text: &str, start: usize, end: usize) -> bool {
    let continues = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*' | '•' | '…');
    let before = text[..start].chars().next_back();
    let after = &text[end..];
    !before.is_some_and(continues)
        && !after.chars().next().is_some_and(continues)
        && !after.starts_with("..")
        // `SG.a.b.more`: another dotted segment of the same string.
        && !after
            .strip_prefix('.')
            .and_then(|rest| rest.chars().next())
            .is_some_and(|c| c.is_ascii_alphanumeric())
}

/// Names that end in a secret-looking word but hold no secret: anti-CSRF
/// tokens (sent to every browser in the page), pagination and sync
/// cursors.
fn not_a_secret_name(name: &str) -> bool {
    let plain: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    [
        "csrf",
        "xsrf",
        "forgery",
        "authenticitytoken",
        "requestverificationtoken",
        "pagetoken",
        "nexttoken",
        "continuationtoken",
        "synctoken",
        "resumetoken",
        "cursortoken",
    ]
    .iter()
    .any(|w| plain.contains(w))
}

/// A refused secret in some text.
struct Hit<'a> {
    /// Where the secret starts (a key block's header): its line is
    /// reported, and it orders hits, so that the same secret found by two
    /// rules is reported by the earlier one.
    at: usize,
    rule: usize,
    secret: &'a str,
}

/// All refused secrets in `text`, in order.
fn hits(text: &str) -> Vec<Hit<'_>> {
    let mut out = Vec::new();
    for (i, rule) in RULES.iter().enumerate() {
        for caps in rule.re.captures_iter(text) {
            let Some(secret) = caps.name("secret") else {
                continue;
            };
            let body = caps.name("body").unwrap_or(secret);
            if rule.id != "private-key" && !stands_alone(text, secret.start(), secret.end()) {
                continue;
            }
            if caps
                .name("name")
                .is_some_and(|n| not_a_secret_name(n.as_str()))
            {
                continue;
            }
            if looks_secret(body.as_str(), rule.judge) {
                out.push(Hit {
                    at: secret.start(),
                    rule: i,
                    secret: secret.as_str(),
                });
            }
        }
    }
    out.sort_by_key(|h| (h.at, h.rule));
    out
}

fn to_match(text: &str, hit: &Hit) -> Option<Match> {
    let rule = RULES.get(hit.rule)?;
    let line = text.as_bytes()[..hit.at]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1;
    Some(Match {
        rule: rule.id,
        what: rule.what,
        line,
    })
}

/// The first secret in `text`, if any.
pub fn scan(text: &str) -> Option<Match> {
    let hit = hits(text).into_iter().next()?;
    to_match(text, &hit)
}

/// The first secret in `after` that is not already in `before`.
///
/// Used when a file is changed: a secret the user keeps in a file (a local
/// `.env`) must not block every later edit of that file, but a new secret,
/// including one formed by joining old and new text, is refused.
pub fn scan_new(before: &str, after: &str) -> Option<Match> {
    let old: Vec<&str> = hits(before).into_iter().map(|h| h.secret).collect();
    let hit = hits(after).into_iter().find(|h| !old.contains(&h.secret))?;
    to_match(after, &hit)
}

#[cfg(test)]
mod tests;
