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

/// Left in a state dir once its whole tree has been made private: flytod
/// runs with umask 077, so what it writes afterwards is private already.
pub const PRIVATE_MARKER: &str = ".private";

/// Makes `dir` 0700 and what is in it private (files lose their group and
/// other bits, directories become 0700), so state written by an older
/// flytod or under another umask is not left readable by others. The
/// whole tree is walked once (then [`PRIVATE_MARKER`] is left); later
/// starts fix only `dir` and its entries: walking every step log at each
/// start took about a second with 100,000 plans, and nothing below a
/// 0700 directory is reachable by others anyway.
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
    let marker = dir.join(PRIVATE_MARKER);
    let walked = std::fs::symlink_metadata(&marker).is_ok_and(|m| m.is_file());
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
            if meta.is_dir() && !walked {
                pending.push(path);
            }
        }
    }
    if !walked {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&marker)
            .and_then(|mut f| {
                f.write_all(
                    b"flytod made everything here private once; it writes with umask 077 since.\n",
                )
            })
            .with_context(|| format!("cannot write {}", marker.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    fn open_file(p: &Path) {
        std::fs::write(p, "x").unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
    }

    #[test]
    fn the_whole_tree_is_made_private_once_then_only_the_top() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        let deep = state.join("logs/p1");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&deep, std::fs::Permissions::from_mode(0o755)).unwrap();
        open_file(&deep.join("main.log"));
        open_file(&state.join("old"));

        make_private(&state).unwrap();
        assert_eq!(mode(&state), 0o700);
        assert_eq!(mode(&deep), 0o700);
        assert_eq!(mode(&deep.join("main.log")), 0o600);
        assert_eq!(mode(&state.join("old")), 0o600);
        assert_eq!(mode(&state.join(PRIVATE_MARKER)) & 0o077, 0);

        // Later starts: the state dir and its entries, not the tree.
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
        open_file(&state.join("new"));
        open_file(&deep.join("later.log"));
        make_private(&state).unwrap();
        assert_eq!(mode(&state), 0o700);
        assert_eq!(mode(&state.join("new")), 0o600);
        assert_eq!(
            mode(&deep.join("later.log")),
            0o644,
            "walked the tree again"
        );
    }
}
