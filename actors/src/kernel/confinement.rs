//! The words for how far a process tree is confined: a sandbox profile
//! and the spec a plan or session carries. Plain data, so plans, sessions
//! and the store can keep it; `tools::sandbox` turns it into kernel rules.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How much an agent's process may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// Read anywhere but the hidden paths; write in the workdir, TMPDIR and
    /// `[sandbox] writable`.
    #[default]
    WorkspaceWrite,
    /// Read anywhere but the hidden paths; write nowhere (TMPDIR aside).
    ReadOnly,
    /// Unconfined.
    Off,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::WorkspaceWrite => "workspace-write",
            Profile::ReadOnly => "read-only",
            Profile::Off => "off",
        }
    }

    /// The profile named `name`, or an error listing the valid names.
    pub fn parse(name: &str) -> Result<Profile, String> {
        match name {
            "workspace-write" => Ok(Profile::WorkspaceWrite),
            "read-only" => Ok(Profile::ReadOnly),
            "off" => Ok(Profile::Off),
            other => Err(format!(
                "unknown sandbox profile `{other}`: use workspace-write, read-only or off"
            )),
        }
    }

    /// Which of two profiles confines more (a child never gets less).
    pub fn stricter(self, other: Profile) -> Profile {
        let rank = |p: Profile| match p {
            Profile::Off => 0,
            Profile::WorkspaceWrite => 1,
            Profile::ReadOnly => 2,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

/// What one process tree is confined to; stored with the plans an agent
/// submits, so their steps stay as confined as the agent, across restarts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    pub profile: Profile,
    /// Where writes are allowed (the session's workdir), besides TMPDIR
    /// and `[sandbox] writable`.
    pub write_roots: Vec<PathBuf>,
    /// The private temporary directory (also given as `TMPDIR`).
    pub tmpdir: Option<PathBuf>,
    pub network: bool,
}

impl SandboxSpec {
    pub fn is_off(&self) -> bool {
        self.profile == Profile::Off
    }

    /// One line for the model when a command failed with an access error.
    pub fn refusal_note(&self) -> String {
        let roots: Vec<String> = self
            .write_roots
            .iter()
            .chain(self.tmpdir.iter())
            .map(|p| p.display().to_string())
            .collect();
        match self.profile {
            Profile::ReadOnly => format!(
                "flytod: the sandbox (read-only) blocks writes outside TMPDIR ({}) and hides flytod's files, credential folders and other programs' UNIX sockets (tmux, screen, D-Bus, ssh-agent); a `Permission denied` above comes from it",
                roots.join(", ")
            ),
            _ => format!(
                "flytod: the sandbox (workspace-write) blocks writes outside the workdir and TMPDIR ({}) and hides flytod's files, credential folders and other programs' UNIX sockets (tmux, screen, D-Bus, ssh-agent); a `Permission denied` above comes from it",
                roots.join(", ")
            ),
        }
    }
}
