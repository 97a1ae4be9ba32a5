//! The guard against realistic keys (generated at run time, so this file
//! does not itself trip secret scanners), placeholders, documented example
//! values and ordinary code and prose.

use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const UPPER_DIGITS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const BASE32: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const BASE62: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const BASE64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URLSAFE: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const HEX: &str = "0123456789abcdef";
const DIGITS: &str = "0123456789";
const LETTERS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const PASSWORD: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!@#%^&*_+=-";

fn random(rng: &mut StdRng, alphabet: &str, n: usize) -> String {
    let chars: Vec<char> = alphabet.chars().collect();
    (0..n)
        .map(|_| chars[rng.gen_range(0..chars.len())])
        .collect()
}

/// A filler made of `text` repeated to `n` characters.
fn cycle(text: &str, n: usize) -> String {
    text.chars().cycle().take(n).collect()
}

/// One realistic secret in context per rule: (rule, text, the secret).
fn realistic(rng: &mut StdRng) -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    let mut add = |rule, text: String, secret: String| out.push((rule, text, secret));

    let id = format!("AKIA{}", random(rng, BASE32, 16));
    add("aws-access-key-id", format!("aws_access_key_id = {id}"), id);
    let id = format!("ASIA{}", random(rng, UPPER_DIGITS, 16));
    add(
        "aws-access-key-id",
        format!("\"AccessKeyId\": \"{id}\""),
        id,
    );

    let key = random(rng, BASE64, 40);
    add(
        "aws-secret-access-key",
        format!("[default]\naws_secret_access_key = {key}\n"),
        key,
    );
    let key = random(rng, BASE64, 40);
    add(
        "aws-secret-access-key",
        format!("export AWS_SECRET_ACCESS_KEY={key}"),
        key,
    );
    let key = random(rng, BASE64, 40);
    add(
        "aws-secret-access-key",
        format!("{{\"Credentials\": {{\"SecretAccessKey\": \"{key}\"}}}}"),
        key,
    );
    let key = random(rng, BASE64, 40);
    add(
        "aws-secret-access-key",
        format!("  aws_secret_access_key: '{key}'"),
        key,
    );

    let t = format!("ghp_{}", random(rng, BASE62, 36));
    add("github-token", format!("GITHUB_TOKEN={t}"), t);
    let t = format!("gho_{}", random(rng, BASE62, 36));
    add("github-token", format!("token: {t}"), t);
    let t = format!(
        "github_pat_{}_{}",
        random(rng, BASE62, 22),
        random(rng, BASE62, 59)
    );
    add("github-fine-grained-token", format!("pat = \"{t}\""), t);
    let t = format!("glpat-{}", random(rng, URLSAFE, 20));
    add("gitlab-token", format!("GITLAB_TOKEN='{t}'"), t);
    let t = format!("sk-ant-api03-{}AA", random(rng, URLSAFE, 93));
    add("anthropic-api-key", format!("ANTHROPIC_API_KEY={t}"), t);
    let t = format!("sk-proj-{}", random(rng, URLSAFE, 156));
    add("openai-project-key", format!("OPENAI_API_KEY=\"{t}\""), t);
    let t = format!("sk-{}", random(rng, BASE62, 48));
    add(
        "openai-style-api-key",
        format!("client = OpenAI(api_key=\"{t}\")"),
        t,
    );
    let t = format!(
        "xoxb-{}-{}-{}",
        random(rng, DIGITS, 12),
        random(rng, DIGITS, 13),
        random(rng, BASE62, 24)
    );
    add("slack-token", format!("SLACK_BOT_TOKEN={t}"), t);
    let t = format!(
        "https://hooks.slack.com/services/T{}/B{}/{}",
        random(rng, UPPER_DIGITS, 8),
        random(rng, UPPER_DIGITS, 10),
        random(rng, BASE62, 24)
    );
    add("slack-webhook", format!("url = \"{t}\""), t);
    let t = format!("AIza{}", random(rng, URLSAFE, 35));
    add("google-api-key", format!("const key = '{t}';"), t);
    let t = format!("sk_live_{}", random(rng, BASE62, 99));
    add("stripe-live-key", format!("Stripe.api_key = \"{t}\""), t);
    let t = format!("npm_{}", random(rng, BASE62, 36));
    add(
        "npm-token",
        format!("//registry.npmjs.org/:_authToken={t}"),
        t,
    );
    let t = format!("hf_{}", random(rng, LETTERS, 34));
    add("huggingface-token", format!("HF_TOKEN={t}"), t);
    let t = format!(
        "SG.{}.{}",
        random(rng, URLSAFE, 22),
        random(rng, URLSAFE, 43)
    );
    add("sendgrid-api-key", format!("SENDGRID_API_KEY={t}"), t);
    let t = format!("pypi-AgEIcHlwaS5vcmc{}", random(rng, URLSAFE, 70));
    add("pypi-token", format!("password = {t}"), t);

    let body: Vec<String> = (0..4).map(|_| random(rng, BASE64, 64)).collect();
    let pem = format!(
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA{}\n-----END RSA PRIVATE KEY-----",
        body.join("\n")
    );
    add("private-key", format!("KEY = '''\n{pem}\n'''"), pem);
    let pem = format!(
        "-----BEGIN OPENSSH PRIVATE KEY-----\n\
         b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n{}\n\
         -----END OPENSSH PRIVATE KEY-----",
        body.join("\n")
    );
    add("private-key", pem.clone(), pem);

    let t = random(rng, BASE62, 40);
    add(
        "bearer-token",
        format!("curl -H 'Authorization: Bearer {t}' https://api.example.com"),
        t,
    );

    let generic = [
        ("DB_PASSWORD", random(rng, PASSWORD, 24)),
        ("client_secret", random(rng, HEX, 64)),
        ("api_key", random(rng, BASE62, 32)),
        ("SECRET_KEY", random(rng, URLSAFE, 50)),
        ("auth_token", random(rng, BASE64, 44)),
        ("mySigningKey", random(rng, BASE62, 32)),
    ];
    for (name, value) in generic {
        add(
            "generic-secret-assignment",
            format!("{name} = \"{value}\""),
            value.clone(),
        );
        add(
            "generic-secret-assignment",
            format!("{name}={value}"),
            value.clone(),
        );
        add(
            "generic-secret-assignment",
            format!("\"{name}\": \"{value}\","),
            value.clone(),
        );
        add(
            "generic-secret-assignment",
            format!("const {name}: &str = \"{value}\";"),
            value,
        );
    }
    out
}

#[test]
fn every_rule_compiles() {
    assert_eq!(RULES.len(), 19);
}

#[test]
fn realistic_keys_are_refused_by_their_rule_at_their_line_without_being_echoed() {
    let mut rng = StdRng::seed_from_u64(10);
    // Many rounds: a key's random part must not pass the placeholder and
    // entropy checks by chance.
    for _ in 0..40 {
        for (rule, text, secret) in realistic(&mut rng) {
            let text = format!("line one\nline two\n{text}\n");
            let m = scan(&text).unwrap_or_else(|| panic!("{rule} not found in {text}"));
            assert_eq!(m.rule, rule, "in {text}");
            let at = text.find(&secret).unwrap();
            let line = 1 + text[..at].matches('\n').count();
            assert_eq!(m.line, line, "in {text}");
            let msg = m.refusal("config.py");
            assert!(!msg.contains(&secret), "refusal echoes the secret: {msg}");
            assert!(
                msg.contains(rule) && msg.contains(&format!("line {line}")),
                "{msg}"
            );
        }
    }
}

#[test]
fn placeholders_and_documented_examples_pass() {
    let n = 40;
    let fillers = [
        cycle("x", n),
        cycle("X", n),
        cycle("a", n),
        cycle("0", n),
        cycle("*", n),
        cycle("1234567890abcdefghijklmnopqrstuvwxyz", n),
        cycle("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", n),
        format!("your-api-key-here-{}", cycle("x", n)),
        format!("YOUR_TOKEN_{}", cycle("0", n)),
        format!("Not-A-Real-Key-{}", cycle("1a", n)),
        format!("abc{}", cycle("x", n)),
        cycle("ab", n),
    ];
    let prefixes = [
        "AKIA",
        "ghp_",
        "github_pat_",
        "glpat-",
        "sk-ant-api03-",
        "sk-proj-",
        "sk-",
        "xoxb-123456789012-",
        "AIza",
        "sk_live_",
        "npm_",
        "hf_",
    ];
    for prefix in prefixes {
        for filler in &fillers {
            let text = format!("KEY={prefix}{filler}");
            assert_eq!(scan(&text), None, "{text}");
        }
    }
    for filler in &fillers {
        for text in [
            format!("aws_secret_access_key = {}", &filler[..40]),
            format!("password = \"{filler}\""),
            format!("\"client_secret\": \"{filler}\""),
        ] {
            assert_eq!(scan(&text), None, "{text}");
        }
    }
    let documented = [
        "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "\"SecretAccessKey\": \"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\"",
        "\"AccessKeyId\": \"ASIAIOSFODNN7EXAMPLE\"",
        "API_KEY = \"your-api-key-here\"",
        "OPENAI_API_KEY=sk-your-key-here",
        "token: <token>",
        "aws_secret_access_key = <YOUR_SECRET_ACCESS_KEY>",
        "AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY}",
        "DB_PASSWORD=$DB_PASSWORD",
        "password = \"changeme\"",
        "password: change_me_1234567890",
        "\"SecretAccessKey\": \"{{ secret_access_key }}\"",
        "client_secret = \"%(client_secret)s\"",
        "api_key = \"REDACTED-0000000000000000\"",
        "-----BEGIN PRIVATE KEY-----\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n-----END PRIVATE KEY-----",
        "-----BEGIN RSA PRIVATE KEY-----\n...your key here...\n-----END RSA PRIVATE KEY-----",
        "Authorization: Bearer $OPENAI_API_KEY",
        "curl -H \"Authorization: Bearer ${TOKEN}\"",
        "stripe_key = sk_test_51Hab2Cd3Ef4Gh5Ij6Kl7Mn8Op9Qr0St",
    ];
    for text in documented {
        assert_eq!(scan(text), None, "{text}");
    }
}

#[test]
fn ordinary_code_and_prose_pass() {
    let clean = [
        "fn main() { println!(\"hello\"); }",
        "The password must be at least 12 characters long and contain a digit.",
        "password: required",
        "Set `api_key` to your key; never commit the secret itself.",
        "let task-runner = sk-some-long-kebab-case-name-that-is-not-a-key;",
        "if line == \"-----BEGIN RSA PRIVATE KEY-----\" { parse(line) }",
        "ghp_short",
        "api_key = os.environ[\"OPENAI_API_KEY\"]",
        "token = request.headers.get(\"Authorization\")",
        "let token = self.next_token()?;",
        "fn check_password(password: &str) -> bool {",
        "fn set_token(token: HashMap<String, Vec<u8>>) {}",
        "password_hash = \"5f4dcc3b5aa765d61d8327deb882cf99\"",
        "api_key_env = \"DEEPSEEK_API_KEY\"",
        "private_key = \"/etc/ssl/private/server2024.pem\"",
        "private_key_path: ./keys/deploy_2024.pem",
        "token_url = \"https://oauth2.googleapis.com/token\"",
        "api_key = \"https://vault.internal:8200/v1/secret/data/api2\"",
        "secret = settings.SECRET_KEY2",
        "SECRET_KEY = config.secrets.main_v2",
        "rev = \"9a038989604e8da62ecddbe2094b16ce1b778be1\"",
        "sha256 = \"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\"",
        "const API_KEY_HEADER: &str = \"x-api-key\";",
        "max_tokens = 4096",
        "password = \"hunter2\"",
        "\"token\": \"abc\"",
        "csrf_token = \"{{ csrf_token() }}\"",
        "token: ${{ secrets.GITHUB_TOKEN }}",
        "DB_PASSWORD=\nDB_USER=app",
        "password = \"correct-horse-battery-staple\"",
        "API_TOKEN = \"DEPLOYMENT_TOKEN_FOR_STAGING\"",
        "https://hooks.slack.com/services/<team>/<channel>/<token>",
        "Commit 9a038989604e8da62ecddbe2094b16ce1b778be1 fixed the token refresh.",
    ];
    for text in clean {
        assert_eq!(scan(text), None, "{text}");
    }
}

/// Random values under names that are not secrets, after an empty
/// assignment, inside longer identifiers, and already masked: none is a
/// secret to refuse. Each class once broke (refused a clean text).
#[test]
fn look_alikes_of_secrets_pass() {
    let mut rng = StdRng::seed_from_u64(11);
    for _ in 0..40 {
        let v = random(&mut rng, BASE62, 40);
        let u = random(&mut rng, URLSAFE, 43);
        let clean = [
            // Anti-CSRF tokens are sent to every browser; pagination
            // tokens are cursors.
            format!("csrf_token = \"{v}\""),
            format!("CSRF_TOKEN={v}"),
            format!("X-XSRF-TOKEN: {u}"),
            format!("headers = {{\"X-CSRF-Token\": \"{u}\"}}"),
            format!("csrfmiddlewaretoken={v}"),
            format!("\"csrfToken\": \"{u}\","),
            format!("_csrf: '{v}'"),
            format!("xsrf_token := \"{v}\""),
            format!("authenticity_token = \"{u}\""),
            format!("__RequestVerificationToken={u}"),
            format!("anti_forgery_token: {v}"),
            format!("next_page_token = \"{u}\""),
            format!("\"nextPageToken\": \"{u}\""),
            format!("continuation_token={v}"),
            // An empty value ends at the line end.
            format!("API_KEY=\nNEXT={v}"),
            format!("DB_PASSWORD=\nDB_HOST={u}\n"),
            format!("SECRET_KEY=\n\n{v}"),
            format!("password:\n  {v}"),
            format!("api_key = \n# {v}"),
            format!("Authorization: Bearer\n{v}"),
            // A vendor prefix inside a longer identifier.
            format!("cache_key = \"risk-sk-{v}\""),
            format!("id: my-sk-{v}"),
            format!("let name = \"sk-{v}-cache\";"),
            format!("sk-{v}_suffix"),
            format!("AIza{u}XYZ"),
            format!("see ghp_{}-backup", &v[..36]),
            format!("npm_{}-lock", &v[..36]),
            format!("path/AKIA{}-x", random(&mut rng, UPPER_DIGITS, 16)),
            format!("SG.{}.{}.more", &u[..22], random(&mut rng, URLSAFE, 43)),
            // Already masked or cut short.
            format!("OPENAI_API_KEY=sk-{}***", &v[..34]),
            format!("key: sk-proj-{}****", random(&mut rng, URLSAFE, 44)),
            format!("token = \"ghp_{}******\"", &v[..36]),
            format!(
                "ANTHROPIC_API_KEY=sk-ant-api03-{}…",
                random(&mut rng, URLSAFE, 40)
            ),
            format!("Found sk-{}... in the log", &v[..36]),
            format!("api_key = \"{}********\"", &v[..20]),
            format!("password: {}•••••", &v[..18]),
            format!("Authorization: Bearer {}***", &v[..24]),
            format!("aws_secret_access_key = {}****", &v[..36]),
        ];
        for text in &clean {
            assert_eq!(scan(text), None, "{text}");
        }
    }
}

/// The boundaries above do not hide whole keys in ordinary surroundings.
#[test]
fn whole_keys_are_found_at_their_boundaries() {
    let mut rng = StdRng::seed_from_u64(12);
    for _ in 0..40 {
        let sk = format!("sk-{}", random(&mut rng, BASE62, 48));
        let google = format!("AIza{}", random(&mut rng, URLSAFE, 35));
        let ghp = format!("ghp_{}", random(&mut rng, BASE62, 36));
        let akia = format!("AKIA{}", random(&mut rng, BASE32, 16));
        let cases = [
            ("openai-style-api-key", format!("Use {sk}. Then run it.")),
            ("openai-style-api-key", format!("(key: {sk})")),
            ("openai-style-api-key", format!("keys=[\"{sk}\",\"x\"]")),
            ("openai-style-api-key", format!("{sk}\n")),
            (
                "google-api-key",
                format!("https://maps.googleapis.com/maps/api/js?key={google}&callback=init"),
            ),
            (
                "google-api-key",
                format!("<script src=\"x?key={google}\"></script>"),
            ),
            (
                "github-token",
                format!("git clone https://{ghp}@github.com/me/repo"),
            ),
            ("github-token", format!("token: '{ghp}'")),
            ("aws-access-key-id", format!("{akia}:secret")),
            // Not a CSRF token: a session token.
            (
                "generic-secret-assignment",
                format!("session_token = \"{}\"", random(&mut rng, BASE62, 40)),
            ),
            (
                "generic-secret-assignment",
                format!("API_KEY={}\nNEXT=1", random(&mut rng, BASE62, 32)),
            ),
        ];
        for (rule, text) in cases {
            assert_eq!(scan(&text).map(|m| m.rule), Some(rule), "{text}");
        }
    }
}

#[test]
fn a_vendor_prefix_names_the_vendor_even_when_assigned_to_a_secret_name() {
    let mut rng = StdRng::seed_from_u64(3);
    let key = format!("sk-ant-api03-{}", random(&mut rng, URLSAFE, 93));
    assert_eq!(scan(&key).map(|m| m.rule), Some("anthropic-api-key"));
    let text = format!("ANTHROPIC_API_KEY = \"{key}\"");
    assert_eq!(scan(&text).map(|m| m.rule), Some("anthropic-api-key"));
    let text = format!("aws_secret_access_key = {}", random(&mut rng, BASE64, 40));
    assert_eq!(scan(&text).map(|m| m.rule), Some("aws-secret-access-key"));
}

#[test]
fn scan_new_ignores_secrets_already_present_but_not_new_ones() {
    let mut rng = StdRng::seed_from_u64(4);
    let old_key = format!("ghp_{}", random(&mut rng, BASE62, 36));
    let new_key = format!("ghp_{}", random(&mut rng, BASE62, 36));
    let before = format!("TOKEN={old_key}\nNAME=a\n");
    let after = format!("TOKEN={old_key}\nNAME=b\n");
    assert_eq!(scan_new(&before, &after), None);
    let after = format!("TOKEN={old_key}\nOTHER={new_key}\n");
    let m = scan_new(&before, &after).unwrap();
    assert_eq!((m.rule, m.line), ("github-token", 2));
}

#[test]
fn the_placeholder_judgement_names_its_reason() {
    assert_eq!(placeholder("${TOKEN}"), Some("template or reference"));
    assert_eq!(placeholder("<token>"), Some("template or reference"));
    assert_eq!(
        placeholder("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        Some("placeholder word")
    );
    assert_eq!(placeholder("changeme"), Some("placeholder word"));
    assert_eq!(placeholder(&cycle("x", 40)), Some("one repeated character"));
    assert_eq!(placeholder("1234567890ABCDEF"), Some("characters in order"));
    let mut rng = StdRng::seed_from_u64(5);
    assert_eq!(placeholder(&random(&mut rng, BASE62, 40)), None);
}

#[test]
fn entropy_separates_random_from_repetitive_values() {
    assert_eq!(entropy(""), 0.0);
    assert_eq!(entropy("aaaa"), 0.0);
    assert!((entropy("abab") - 1.0).abs() < 1e-9);
    let mut rng = StdRng::seed_from_u64(6);
    let random40 = random(&mut rng, BASE62, 40);
    assert!(entropy(&random40) >= token_threshold(40), "{random40}");
    assert!(entropy(&cycle("abc", 40)) < token_threshold(40));
}
