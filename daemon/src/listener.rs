//! The control socket: taken from systemd (`LISTEN_FDS`) or bound at the
//! resolved path in a 0700 directory, mode 0600. A stale socket file is
//! removed; one that answers is never stolen.

use anyhow::{Context, bail};
use std::os::fd::FromRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::net::UnixListener;

pub struct Bound {
    pub listener: UnixListener,
    pub path: PathBuf,
    /// True when we created the file and must remove it on exit.
    pub owned: bool,
}

/// First fd systemd passes (sd_listen_fds(3)).
const SD_LISTEN_FDS_START: i32 = 3;

pub fn bind(path: &Path) -> anyhow::Result<Bound> {
    if let Some(listener) = activated()? {
        return Ok(Bound {
            listener,
            path: path.to_path_buf(),
            owned: false,
        });
    }
    if let Some(dir) = path.parent() {
        prepare_dir(dir)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                bail!(
                    "{} exists and is not a socket: remove it or choose another path with --socket",
                    path.display()
                );
            }
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => bail!(
                    "another flytod is serving {}: stop it first, or start this one with another --socket",
                    path.display()
                ),
                Err(_) => {
                    tracing::info!("removing stale socket {}", path.display());
                    std::fs::remove_file(path).with_context(|| {
                        format!("cannot remove stale socket {}", path.display())
                    })?;
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", path.display())),
    }
    // The socket file is created with the umask; make it 0600 from the start.
    // SAFETY: umask only changes this process's file-creation mask.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    let listener = bound.with_context(|| format!("cannot listen on {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(Bound {
        listener,
        path: path.to_path_buf(),
        owned: true,
    })
}

fn activated() -> anyhow::Result<Option<UnixListener>> {
    let pid_matches = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        == Some(std::process::id());
    let fds = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse::<i32>().ok())
        .unwrap_or(0);
    if !pid_matches || fds < 1 {
        return Ok(None);
    }
    // SAFETY: systemd passed us this fd as a listening socket and nothing else
    // in the process uses it.
    let std_listener =
        unsafe { std::os::unix::net::UnixListener::from_raw_fd(SD_LISTEN_FDS_START) };
    std_listener
        .set_nonblocking(true)
        .context("the socket passed by systemd (LISTEN_FDS) is not usable")?;
    let listener = UnixListener::from_std(std_listener)
        .context("the socket passed by systemd (LISTEN_FDS) is not a Unix stream socket")?;
    tracing::info!("using the socket passed by systemd");
    Ok(Some(listener))
}

fn prepare_dir(dir: &Path) -> anyhow::Result<()> {
    let created = !dir.exists();
    if created {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create socket directory {}", dir.display()))?;
    }
    let meta = std::fs::metadata(dir)?;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if meta.uid() != uid {
        bail!(
            "socket directory {} belongs to uid {}, not to us (uid {uid}): use another --socket or FLYTO_SOCK",
            dir.display(),
            meta.uid()
        );
    }
    // A shared folder the user named (`--socket /tmp/flyto.sock` as root,
    // whose /tmp it is) keeps its mode: tightening /tmp would break the
    // machine. Sticky or world-writable means shared; there the socket
    // file's 0600 is what keeps others out.
    let shared = !created && meta.mode() & 0o1002 != 0;
    if meta.mode() & 0o077 != 0 && !shared {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} private (0700)", dir.display()))?;
    }
    Ok(())
}
