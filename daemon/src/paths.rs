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

/// Makes `dir` 0700 and everything under it private (files lose their
/// group and other bits, directories become 0700), so state written by an
/// older flytod or under another umask is not left readable by others.
pub fn make_private(dir: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::os::unix::fs::PermissionsExt;
    let set = |path: &Path, meta: &std::fs::Metadata| -> anyhow::Result<()> {
        let mode = meta.permissions().mode() & 0o7777;
        let private = if meta.is_dir() { 0o700 } else { mode & 0o700 };
        if mode != private {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(private)).with_context(
                || {
                    format!(
                        "cannot make {} private ({private:o}): fix its owner or mode",
                        path.display()
                    )
                },
            )?;
        }
        Ok(())
    };
    let meta = std::fs::metadata(dir)
        .with_context(|| format!("cannot inspect state directory {}", dir.display()))?;
    set(dir, &meta)?;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let entries =
            std::fs::read_dir(&d).with_context(|| format!("cannot list {}", d.display()))?;
        for entry in entries.flatten() {
            let path = entry.path();
            // Symlinks are left alone: their mode means nothing, and their
            // target may be anywhere.
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                continue;
            }
            set(&path, &meta)?;
            if meta.is_dir() {
                pending.push(path);
            }
        }
    }
    Ok(())
}
