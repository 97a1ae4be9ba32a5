//! The environment a spawned process gets: the daemon's own, minus secrets
//! and systemd's per-service variables, plus what the caller adds.

use crate::llm::Models;
use std::collections::BTreeSet;
use std::sync::RwLock;

const SECRET_MARKERS: [&str; 5] = ["API_KEY", "TOKEN", "SECRET", "PASSWORD", "PRIVATE_KEY"];

/// Variables systemd hands to flytod itself; a child must not act on them.
const SERVICE_ONLY: [&str; 5] = [
    "NOTIFY_SOCKET",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "WATCHDOG_USEC",
];

/// Variables named by a model profile's `api_key_env`: secrets whatever
/// their name. Only ever added to, so a key a reload stops naming stays
/// hidden.
static KEY_VARS: RwLock<BTreeSet<String>> = RwLock::new(BTreeSet::new());

/// Hides the `api_key_env` variables of `models` from every child from now
/// on. The daemon calls it at start and on each config reload.
pub fn hide_key_vars(models: &Models) {
    let names = models
        .profiles
        .values()
        .filter_map(|p| p.api_key_env.clone());
    if let Ok(mut set) = KEY_VARS.write() {
        set.extend(names);
    }
}

pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_MARKERS.iter().any(|m| upper.contains(m))
        || KEY_VARS.read().is_ok_and(|set| set.contains(name))
}

/// The filtered environment for a child process.
pub fn child_env(
    base: impl IntoIterator<Item = (String, String)>,
    extra: &[(String, String)],
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = base
        .into_iter()
        .filter(|(k, _)| {
            !is_secret_name(k) && !SERVICE_ONLY.contains(&k.as_str()) && k != "WATCHDOG_PID"
        })
        .filter(|(k, _)| !extra.iter().any(|(ek, _)| ek == k))
        .collect();
    out.extend(extra.iter().cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_service_variables_are_removed() {
        let base = [
            ("PATH", "/bin"),
            ("DEEPSEEK_API_KEY", "sk-1"),
            ("telegram_bot_token", "t"),
            ("DB_PASSWORD", "p"),
            ("NOTIFY_SOCKET", "/run/n"),
            ("FLYTO_CHAIN", "old"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let env = child_env(base, &[("FLYTO_CHAIN".into(), "new".into())]);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "FLYTO_CHAIN"]);
        assert_eq!(env[1].1, "new");
    }

    #[test]
    fn variables_named_by_api_key_env_are_removed() {
        use crate::llm::{Api, ModelProfile, Roles};
        let mut profile = ModelProfile::new(Api::Anthropic, "http://127.0.0.1:1", "m");
        profile.api_key_env = Some("ENV_TEST_PROVIDER_CRED".into());
        let models = Models::new([("p".to_string(), profile)].into(), Roles::default());
        let base = [("PATH", "/bin"), ("ENV_TEST_PROVIDER_CRED", "sk-x")]
            .map(|(k, v)| (k.to_string(), v.to_string()));
        assert_eq!(child_env(base.clone(), &[]).len(), 2);
        hide_key_vars(&models);
        let env = child_env(base, &[]);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH"]);
    }
}
