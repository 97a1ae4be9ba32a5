//! record: what the dream room keeps on disk per project, under
//! `<state>/projects/<id>/dream/`: one JSON record per run (`runs/`), the
//! staged results (`staged/<run>/`, kept for review when a run is refused
//! or was a dry run), the project's backoff and workdir (`state.json`) and
//! the lease of the run in progress (`lease.json`). Every file is written
//! atomically (0600).

use super::validate::{Citation, Diff, Patch};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// One gate as a check saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    pub name: String,
    pub value: String,
    pub passed: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: String,
    pub project: String,
    pub workdir: String,
    pub started_ms: u64,
    pub finished_ms: Option<u64>,
    pub manual: bool,
    pub dry_run: bool,
    pub gates: Vec<Gate>,
    /// Sessions whose messages the run could read.
    pub sessions: Vec<String>,
    pub model_calls: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    /// `running`, `applied`, `dry-run`, `no changes`, `rejected: …`,
    /// `failed: …`, `interrupted: …`.
    pub outcome: String,
    pub diff: Diff,
    /// What changed inside each entry of `diff` (absent in older records).
    #[serde(default)]
    pub patches: Vec<Patch>,
    pub citations: Vec<Citation>,
    /// The version the run made live.
    pub version: Option<u32>,
    pub base_version: Option<u32>,
    /// Files changed live during the run and carried over.
    pub carried: Vec<String>,
}

impl RunRecord {
    pub fn finished(&self) -> bool {
        self.outcome != "running"
    }
    pub fn applied(&self) -> bool {
        self.outcome == "applied"
    }
}

/// Per project, what survives a restart besides the runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProjectState {
    pub workdir: String,
    /// Failed automatic runs in a row.
    pub failures: u32,
    /// No automatic run before this (the backoff).
    pub retry_after_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    pub run: String,
    /// flytod's pid when it took the lease: a lease of another process is
    /// one a crash left behind.
    pub pid: u32,
    pub taken_ms: u64,
}

pub struct ProjectDir {
    /// `<state>/projects/<id>`.
    pub root: PathBuf,
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        // Synced: a run's record in a new `dream/runs/` must outlive a
        // power cut, or its staged result is left with nothing naming it.
        crate::durable::create_dir_all_synced(parent)?;
        let _ = fs::set_permissions(parent, fs::Permissions::from_mode(0o700));
    }
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    crate::tools::write::atomic_write_as(path, &bytes, Some(fs::Permissions::from_mode(0o600)))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    serde_json::from_slice(&fs::read(path).ok()?).ok()
}

impl ProjectDir {
    pub fn new(state_dir: &Path, project: &str) -> ProjectDir {
        ProjectDir {
            root: state_dir.join("projects").join(project),
        }
    }

    fn dream(&self) -> PathBuf {
        self.root.join("dream")
    }

    pub fn staged(&self, run: &str) -> PathBuf {
        self.dream().join("staged").join(run)
    }

    pub fn save_run(&self, r: &RunRecord) -> io::Result<()> {
        write_json(&self.dream().join("runs").join(format!("{}.json", r.id)), r)
    }

    pub fn runs(&self) -> Vec<RunRecord> {
        let Ok(rd) = fs::read_dir(self.dream().join("runs")) else {
            return Vec::new();
        };
        let mut out: Vec<RunRecord> = rd
            .filter_map(|d| d.ok())
            .filter_map(|d| read_json(&d.path()))
            .collect();
        out.sort_by_key(|r| (r.started_ms, run_number(&r.id)));
        out
    }

    pub fn state(&self) -> ProjectState {
        read_json(&self.dream().join("state.json")).unwrap_or_default()
    }

    pub fn save_state(&self, s: &ProjectState) -> io::Result<()> {
        write_json(&self.dream().join("state.json"), s)
    }

    pub fn save_checks<T: Serialize>(&self, checks: &[T]) -> io::Result<()> {
        write_json(&self.dream().join("checks.json"), &checks)
    }

    pub fn checks<T: for<'de> Deserialize<'de>>(&self) -> Vec<T> {
        read_json(&self.dream().join("checks.json")).unwrap_or_default()
    }

    pub fn lease(&self) -> Option<Lease> {
        read_json(&self.dream().join("lease.json"))
    }

    pub fn take_lease(&self, l: &Lease) -> io::Result<()> {
        write_json(&self.dream().join("lease.json"), l)
    }

    pub fn drop_lease(&self) {
        let _ = fs::remove_file(self.dream().join("lease.json"));
    }
}

/// `d17` → 17.
pub fn run_number(id: &str) -> u64 {
    id.strip_prefix('d')
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
