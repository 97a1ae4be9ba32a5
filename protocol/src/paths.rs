//! Control-socket resolution, shared by the daemon and every client so both
//! always agree (docs/design.md, "Paths").

use std::path::{Path, PathBuf};

const SOCKET_NAME: &str = "flytod.sock";

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The daemon's control socket: `explicit` (`--socket`), `FLYTO_SOCK`,
/// `$RUNTIME_DIRECTORY/flytod.sock`, `$XDG_RUNTIME_DIR/flyto/flytod.sock`,
/// `/run/flyto/flytod.sock` for root, else `/tmp/flyto-<uid>/flytod.sock`.
pub fn control_socket(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    if let Some(p) = env_path("FLYTO_SOCK") {
        return p;
    }
    if let Some(dir) = env_path("RUNTIME_DIRECTORY") {
        // systemd may pass several directories separated by ':'.
        let first = dir
            .to_string_lossy()
            .split(':')
            .next()
            .map(PathBuf::from)
            .unwrap_or(dir);
        return first.join(SOCKET_NAME);
    }
    if let Some(dir) = env_path("XDG_RUNTIME_DIR") {
        return dir.join("flyto").join(SOCKET_NAME);
    }
    // SAFETY: getuid cannot fail and has no preconditions.
    let uid = unsafe { libc::getuid() };
    if uid == 0 {
        return PathBuf::from("/run/flyto").join(SOCKET_NAME);
    }
    PathBuf::from(format!("/tmp/flyto-{uid}")).join(SOCKET_NAME)
}

/// The socket a client talks to: `explicit`, then `FLYTO_PLAN_SOCK` (set for
/// processes the agent starts), then [`control_socket`].
pub fn client_socket(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    if let Some(p) = env_path("FLYTO_PLAN_SOCK") {
        return p;
    }
    control_socket(None)
}
