//! Where the state directory and the config file are (docs/design.md, "Paths").
//! The control socket's path is resolved in flyto-protocol, shared with
//! clients.

use std::path::{Path, PathBuf};

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn first_of_list(p: PathBuf) -> PathBuf {
    // systemd passes several directories separated by ':'.
    p.to_string_lossy()
        .split(':')
        .next()
        .map(PathBuf::from)
        .unwrap_or(p)
}

fn home() -> PathBuf {
    env_path("HOME").unwrap_or_else(|| PathBuf::from("/"))
}

/// `FLYTO_HOME`, `$STATE_DIRECTORY`, `$XDG_STATE_HOME/flyto`,
/// `~/.local/state/flyto`.
pub fn state_dir() -> PathBuf {
    if let Some(p) = env_path("FLYTO_HOME") {
        return p;
    }
    if let Some(p) = env_path("STATE_DIRECTORY") {
        return first_of_list(p);
    }
    if let Some(p) = env_path("XDG_STATE_HOME") {
        return p.join("flyto");
    }
    home().join(".local/state/flyto")
}

/// The config file and whether it must exist (named explicitly).
/// `--config`, `FLYTO_CONFIG`, `$CONFIGURATION_DIRECTORY/config.toml`,
/// `$XDG_CONFIG_HOME/flyto/config.toml`, `~/.config/flyto/config.toml`.
pub fn config_file(explicit: Option<&Path>) -> (PathBuf, bool) {
    if let Some(p) = explicit {
        return (p.to_path_buf(), true);
    }
    if let Some(p) = env_path("FLYTO_CONFIG") {
        return (p, true);
    }
    if let Some(p) = env_path("CONFIGURATION_DIRECTORY") {
        return (first_of_list(p).join("config.toml"), false);
    }
    if let Some(p) = env_path("XDG_CONFIG_HOME") {
        return (p.join("flyto/config.toml"), false);
    }
    (home().join(".config/flyto/config.toml"), false)
}
