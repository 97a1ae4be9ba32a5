//! secrets: finds high-confidence secrets (cloud keys, API tokens with a
//! distinctive prefix, private key blocks) in text that `write` and `edit`
//! are about to put on disk.
//!
//! It owns the pattern list and the refusal wording. It never touches the
//! file system, and never puts the secret itself into a [`Match`] or a
//! message: those go to the model and into the transcript.
//!
//! Only patterns that almost never match non-secrets are listed: a false
//! positive blocks legitimate work, and the model cannot override it.

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

struct Rule {
    id: &'static str,
    what: &'static str,
    re: Regex,
    /// Matches that are documented examples, not secrets.
    allow: fn(&str) -> bool,
}

fn allow_none(_: &str) -> bool {
    false
}

/// AWS documents `AKIAIOSFODNN7EXAMPLE`; such ids end in `EXAMPLE`.
fn aws_example(m: &str) -> bool {
    m.ends_with("EXAMPLE")
}

/// (id, what, pattern, allow-list check).
type RuleSpec = (&'static str, &'static str, &'static str, fn(&str) -> bool);

/// Rules in priority order: at the same position, the first wins (so
/// `sk-ant-` is reported as Anthropic, not as the generic `sk-` form).
static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let specs: [RuleSpec; 16] = [
        (
            "private-key",
            "a private key block",
            // The header plus a base64 body: code that merely names the
            // header (PEM parsers) has no 40-character base64 run after it.
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?s:.){0,200}?[A-Za-z0-9+/]{40}",
            allow_none,
        ),
        (
            "aws-access-key-id",
            "an AWS access key id",
            r"\b(?:AKIA|ASIA)[A-Z2-7]{16}\b",
            aws_example,
        ),
        (
            "github-token",
            "a GitHub token",
            r"\bgh[pousr]_[A-Za-z0-9]{36}\b",
            allow_none,
        ),
        (
            "github-fine-grained-token",
            "a GitHub fine-grained personal access token",
            r"\bgithub_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}\b",
            allow_none,
        ),
        (
            "gitlab-token",
            "a GitLab personal access token",
            r"\bglpat-[A-Za-z0-9_\-]{20,}",
            allow_none,
        ),
        (
            "anthropic-api-key",
            "an Anthropic API key",
            r"\bsk-ant-[a-z]+[0-9]{2}-[A-Za-z0-9_\-]{32,}",
            allow_none,
        ),
        (
            "openai-project-key",
            "an OpenAI project, service-account or admin key",
            r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{40,}",
            allow_none,
        ),
        (
            "openai-style-api-key",
            "an OpenAI-style API key (sk-…)",
            // No dashes after the prefix: keeps kebab-case identifiers
            // like `sk-some-long-name` out.
            r"\bsk-[A-Za-z0-9]{32,}\b",
            allow_none,
        ),
        (
            "slack-token",
            "a Slack token",
            r"\bxox[baprs]-[0-9]{6,}-[A-Za-z0-9\-]{10,}",
            allow_none,
        ),
        (
            "slack-webhook",
            "a Slack incoming webhook URL",
            r"https://hooks\.slack\.com/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{20,}",
            allow_none,
        ),
        (
            "google-api-key",
            "a Google API key",
            r"\bAIza[0-9A-Za-z_\-]{35}",
            allow_none,
        ),
        (
            "stripe-live-key",
            "a Stripe live secret or restricted key",
            r"\b(?:sk|rk)_live_[0-9A-Za-z]{24,}",
            allow_none,
        ),
        (
            "npm-token",
            "an npm access token",
            r"\bnpm_[A-Za-z0-9]{36}\b",
            allow_none,
        ),
        (
            "huggingface-token",
            "a Hugging Face access token",
            r"\bhf_[A-Za-z]{34}\b",
            allow_none,
        ),
        (
            "sendgrid-api-key",
            "a SendGrid API key",
            r"\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}\b",
            allow_none,
        ),
        (
            "pypi-token",
            "a PyPI upload token",
            r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}",
            allow_none,
        ),
    ];
    specs
        .into_iter()
        .filter_map(|(id, what, pattern, allow)| match Regex::new(pattern) {
            Ok(re) => Some(Rule {
                id,
                what,
                re,
                allow,
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

/// All hits in `text`: (start offset, rule index, matched text).
fn hits(text: &str) -> Vec<(usize, usize, &str)> {
    let mut out = Vec::new();
    for (i, rule) in RULES.iter().enumerate() {
        for m in rule.re.find_iter(text) {
            if !(rule.allow)(m.as_str()) {
                out.push((m.start(), i, m.as_str()));
            }
        }
    }
    out.sort_by_key(|&(start, i, _)| (start, i));
    out
}

fn to_match(text: &str, start: usize, rule: usize) -> Option<Match> {
    let rule = RULES.get(rule)?;
    let line = text.as_bytes()[..start]
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
    let (start, rule, _) = hits(text).into_iter().next()?;
    to_match(text, start, rule)
}

/// The first secret in `after` that is not already in `before`.
///
/// Used when a file is changed: a secret the user keeps in a file (a local
/// `.env`) must not block every later edit of that file, but a new secret,
/// including one formed by joining old and new text, is refused.
pub fn scan_new(before: &str, after: &str) -> Option<Match> {
    let old: Vec<&str> = hits(before).into_iter().map(|(_, _, s)| s).collect();
    let (start, rule, _) = hits(after).into_iter().find(|(_, _, s)| !old.contains(s))?;
    to_match(after, start, rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a fake token at run time so this source file does not itself
    /// trip secret scanners.
    fn fake(prefix: &str, body: &str, n: usize) -> String {
        let mut s = prefix.to_string();
        s.extend(body.chars().cycle().take(n));
        s
    }

    fn samples() -> Vec<(&'static str, String)> {
        let pem_body = fake("", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", 64);
        vec![
            ("aws-access-key-id", fake("AKIA", "Q3ZR7XWPL2MB4K6T", 16)),
            ("aws-access-key-id", fake("ASIA", "Z2K7WPQ4R5TXLM3B", 16)),
            ("github-token", fake("ghp_", "aB3dE5fG7hJ9kL1m", 36)),
            ("github-token", fake("ghs_", "Zx9Yw8Vu7Ts6Rq5P", 36)),
            (
                "github-fine-grained-token",
                format!(
                    "{}_{}",
                    fake("github_pat_", "11ABCDEFG0", 22),
                    fake("", "xYz123AbC", 59)
                ),
            ),
            ("gitlab-token", fake("glpat-", "Ab1Cd2Ef3Gh4", 20)),
            (
                "anthropic-api-key",
                fake("sk-ant-api03-", "Ab1_Cd2-Ef3Gh4", 93),
            ),
            (
                "openai-project-key",
                fake("sk-proj-", "Ab1Cd2_Ef3-Gh4", 120),
            ),
            ("openai-style-api-key", fake("sk-", "a1b2c3d4e5f6", 48)),
            (
                "slack-token",
                format!("xoxb-1234567890-{}", fake("", "Ab1Cd2Ef3", 24)),
            ),
            (
                "slack-webhook",
                format!(
                    "https://hooks.slack.com/services/T0123ABCD/B0456EFGH/{}",
                    fake("", "aB3dE5fG7h", 24)
                ),
            ),
            ("google-api-key", fake("AIza", "Sy1Ab2_Cd3-Ef4", 35)),
            ("stripe-live-key", fake("sk_live_", "51Hab2Cd3Ef4", 32)),
            ("npm-token", fake("npm_", "aB3dE5fG7h", 36)),
            ("huggingface-token", fake("hf_", "aBcDeFgHiJ", 34)),
            (
                "private-key",
                format!(
                    "-----BEGIN RSA PRIVATE KEY-----\n{pem_body}\n-----END RSA PRIVATE KEY-----"
                ),
            ),
            (
                "private-key",
                format!(
                    "-----BEGIN OPENSSH PRIVATE KEY-----\n{pem_body}\n-----END OPENSSH PRIVATE KEY-----"
                ),
            ),
        ]
    }

    #[test]
    fn every_rule_compiles() {
        assert_eq!(RULES.len(), 16);
    }

    #[test]
    fn each_sample_is_found_by_its_rule_at_its_line() {
        for (rule, secret) in samples() {
            let text = format!("line one\nline two\nkey = \"{secret}\"\n");
            let m = scan(&text).unwrap_or_else(|| panic!("{rule} not found"));
            assert_eq!(m.rule, rule, "sample for {rule}");
            assert_eq!(m.line, 3, "sample for {rule}");
            let msg = m.refusal("config.py");
            assert!(!msg.contains(&secret), "refusal echoes the secret: {msg}");
            assert!(msg.contains(rule) && msg.contains("line 3"), "{msg}");
        }
    }

    #[test]
    fn ordinary_text_is_not_flagged() {
        let clean = [
            "fn main() { println!(\"hello\"); }",
            "let task-runner = sk-some-long-kebab-case-name-that-is-not-a-key;",
            "AKIAIOSFODNN7EXAMPLE is the documented example id",
            "if line == \"-----BEGIN RSA PRIVATE KEY-----\" { parse(line) }",
            "ghp_short",
            "api_key = os.environ[\"OPENAI_API_KEY\"]",
            "https://hooks.slack.com/services/<team>/<channel>/<token>",
        ];
        for text in clean {
            assert_eq!(scan(text), None, "{text}");
        }
        // Stripe test-mode keys are not secrets.
        assert_eq!(scan(&fake("sk_test_", "51Hab2Cd3Ef4", 32)), None);
    }

    #[test]
    fn scan_new_ignores_secrets_already_present_but_not_new_ones() {
        let old_key = fake("ghp_", "aB3dE5fG7hJ9kL1m", 36);
        let new_key = fake("ghp_", "Zx9Yw8Vu7Ts6Rq5P", 36);
        let before = format!("TOKEN={old_key}\nNAME=a\n");
        let after = format!("TOKEN={old_key}\nNAME=b\n");
        assert_eq!(scan_new(&before, &after), None);
        let after = format!("TOKEN={old_key}\nOTHER={new_key}\n");
        let m = scan_new(&before, &after).unwrap();
        assert_eq!((m.rule, m.line), ("github-token", 2));
    }

    #[test]
    fn anthropic_wins_over_the_generic_sk_rule() {
        let key = fake("sk-ant-api03-", "Ab1Cd2Ef3Gh4", 93);
        assert_eq!(scan(&key).map(|m| m.rule), Some("anthropic-api-key"));
    }
}
