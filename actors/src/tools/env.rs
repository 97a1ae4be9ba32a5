//! The environment a spawned process gets: the daemon's own, minus secrets
//! and systemd's per-service variables, plus what the caller adds.

const SECRET_MARKERS: [&str; 5] = ["API_KEY", "TOKEN", "SECRET", "PASSWORD", "PRIVATE_KEY"];

/// Variables systemd hands to flytod itself; a child must not act on them.
const SERVICE_ONLY: [&str; 5] = [
    "NOTIFY_SOCKET",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "WATCHDOG_USEC",
];

pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_MARKERS.iter().any(|m| upper.contains(m))
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
}
