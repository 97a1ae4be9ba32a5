//! Scoped plan sockets: one per plan with running steps and per session
//! with a run, at `<socket dir>/plan-<owner>.sock`, given to their children
//! as `FLYTO_PLAN_SOCK`. Each serves plan requests only, for one chain, and
//! submits one level deeper (the scheduler caps the depth).

use crate::server::{self, Ctx, Scope};
use flyto_actors::plans::PlanSockets;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

pub struct DaemonPlanSockets {
    dir: PathBuf,
    ctx: Arc<Ctx>,
    runtime: Handle,
    open: Mutex<HashMap<String, (PathBuf, JoinHandle<()>)>>,
}

impl DaemonPlanSockets {
    pub fn new(dir: PathBuf, ctx: Arc<Ctx>, runtime: Handle) -> Self {
        DaemonPlanSockets {
            dir,
            ctx,
            runtime,
            open: Mutex::new(HashMap::new()),
        }
    }

    fn bind(&self, path: &PathBuf) -> std::io::Result<tokio::net::UnixListener> {
        // A leftover from a crash: nothing can be listening on it any more,
        // because only this daemon (holding the instance lock) binds here.
        let _ = std::fs::remove_file(path);
        // SAFETY: umask only changes this process's file-creation mask.
        let old = unsafe { libc::umask(0o177) };
        let bound = std::os::unix::net::UnixListener::bind(path);
        // SAFETY: as above, restoring the previous mask.
        unsafe { libc::umask(old) };
        let listener = bound?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        let _guard = self.runtime.enter();
        tokio::net::UnixListener::from_std(listener)
    }
}

impl PlanSockets for DaemonPlanSockets {
    fn open(
        &self,
        owner: &str,
        chain: &str,
        depth: u32,
        sandbox: Option<flyto_actors::tools::sandbox::SandboxSpec>,
    ) -> Option<String> {
        let mut open = self.open.lock().ok()?;
        if let Some((path, _)) = open.get(owner) {
            return Some(path.display().to_string());
        }
        let path = self.dir.join(format!("plan-{owner}.sock"));
        let listener = match self.bind(&path) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(
                    "cannot open the plan socket {}: {e}; children of {owner} get the control socket",
                    path.display()
                );
                return None;
            }
        };
        let scope = Arc::new(Scope {
            owner: owner.to_string(),
            chain: chain.to_string(),
            depth,
            socket: path.display().to_string(),
            sandbox,
        });
        let task = self
            .runtime
            .spawn(server::serve(listener, self.ctx.clone(), Some(scope)));
        open.insert(owner.to_string(), (path.clone(), task));
        Some(path.display().to_string())
    }

    fn close(&self, owner: &str) {
        let Ok(mut open) = self.open.lock() else {
            return;
        };
        if let Some((path, task)) = open.remove(owner) {
            task.abort();
            let _ = std::fs::remove_file(path);
        }
    }
}

impl DaemonPlanSockets {
    /// Removes the plan sockets a crashed flytod left in the socket
    /// directory. One that answers belongs to a live daemon (another
    /// instance sharing the directory) and is kept.
    pub fn remove_stale(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !(name.starts_with("plan-") && name.ends_with(".sock")) {
                continue;
            }
            let path = entry.path();
            let is_socket = std::fs::symlink_metadata(&path)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()));
            if is_socket && std::os::unix::net::UnixStream::connect(&path).is_err() {
                tracing::info!("removing stale plan socket {}", path.display());
                let _ = std::fs::remove_file(&path);
            }
        }
    }

    /// Removes every socket file (shutdown).
    pub fn close_all(&self) {
        let owners: Vec<String> = match self.open.lock() {
            Ok(open) => open.keys().cloned().collect(),
            Err(_) => return,
        };
        for owner in owners {
            self.close(&owner);
        }
    }
}
