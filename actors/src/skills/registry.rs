//! registry: the one [`SkillRegistry`] all sessions share. It keeps the
//! scanned built-in and user sources as one `Arc` swapped atomically on a
//! reload, and the resolved set of each project (workdir) it was asked
//! about, dropped on the next reload.

use super::scan::{self, Candidate, Lister};
use super::{Broken, Origin, Skill};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

/// Projects whose resolved set is kept between reloads.
const MAX_PROJECTS: usize = 64;

/// Where the sources are.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SkillConfig {
    /// `<config dir>/skills`; `None`: no user source.
    pub user_dir: Option<PathBuf>,
    /// `[skills] project`: read `<workdir>/.flyto/skills` and
    /// `<workdir>/.agents/skills`.
    pub project: bool,
    /// `[skills] rescan_every`: the periodic rescan behind the watcher
    /// (events can be lost); `None`: the default.
    pub rescan_every: Option<std::time::Duration>,
}

/// The project's sources, lowest to highest precedence.
pub fn project_dirs(workdir: &Path) -> [PathBuf; 2] {
    [
        workdir.join(".flyto/skills"),
        workdir.join(".agents/skills"),
    ]
}

/// The skills a session in one workdir sees.
#[derive(Debug, Clone, Default)]
pub struct SkillSet {
    /// The winners, by name.
    pub skills: BTreeMap<String, Arc<Skill>>,
    /// Name → the folders its winner shadowed, highest precedence first.
    pub shadowed: BTreeMap<String, Vec<String>>,
    /// Folders that could not be loaded, sorted by file.
    pub broken: Vec<Broken>,
}

impl SkillSet {
    pub fn get(&self, name: &str) -> Option<&Arc<Skill>> {
        self.skills.get(name)
    }
}

/// Resolves candidates from every source into one set: per name, the
/// highest source wins, and within one source the first folder in path
/// order. Sorting first makes the result independent of the order the
/// candidates (and the filesystem's listings) came in.
pub fn resolve(mut candidates: Vec<Candidate>) -> SkillSet {
    candidates.sort_by(|a, b| b.rank.cmp(&a.rank).then_with(|| a.folder.cmp(&b.folder)));
    let mut set = SkillSet::default();
    for c in candidates {
        if let Some(report) = c.kept {
            set.broken.push(report);
        }
        match c.outcome {
            Ok(skill) => {
                let name = skill.name().to_string();
                match set.skills.entry(name) {
                    std::collections::btree_map::Entry::Occupied(e) => {
                        set.shadowed
                            .entry(e.key().clone())
                            .or_default()
                            .push(c.folder);
                    }
                    std::collections::btree_map::Entry::Vacant(e) => {
                        e.insert(skill);
                    }
                }
            }
            Err(b) => set.broken.push(b),
        }
    }
    set.broken
        .sort_by(|a, b| (&a.file, a.line, &a.reason).cmp(&(&b.file, b.line, &b.reason)));
    set.broken.dedup();
    set
}

/// Scans the built-in and user sources.
fn scan_base(config: &SkillConfig, list: Lister) -> Vec<Candidate> {
    let mut out = scan::builtins(super::embedded::FILES);
    if let Some(dir) = &config.user_dir {
        out.extend(scan::scan(dir, 1, Origin::User, list));
    }
    out
}

/// Scans a project's sources (none when project skills are off).
pub fn scan_project(config: &SkillConfig, workdir: &Path, list: Lister) -> Vec<Candidate> {
    if !config.project {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (i, dir) in project_dirs(workdir).iter().enumerate() {
        out.extend(scan::scan(dir, 2 + i as u8, Origin::Project, list));
    }
    out
}

pub struct SkillRegistry {
    config: RwLock<SkillConfig>,
    base: RwLock<Arc<Vec<Candidate>>>,
    projects: Mutex<HashMap<PathBuf, Arc<SkillSet>>>,
    /// Folder → the last version of its skill that loaded, so a broken edit
    /// keeps the good one serving (and is reported).
    last_good: Mutex<HashMap<String, Arc<Skill>>>,
    /// Where the watcher is told about project folders to watch.
    watch: Mutex<Option<std::sync::mpsc::Sender<super::watch::Msg>>>,
    /// Rescans done (start-up, reloads, watcher, fallback).
    rescans: std::sync::atomic::AtomicU64,
}

impl SkillRegistry {
    /// Scans the built-in and user sources now.
    pub fn new(config: SkillConfig) -> Self {
        let last_good = Mutex::new(HashMap::new());
        let mut base = scan_base(&config, &scan::list_fs);
        keep_last_good(&mut base, &last_good);
        SkillRegistry {
            config: RwLock::new(config),
            base: RwLock::new(Arc::new(base)),
            projects: Mutex::new(HashMap::new()),
            last_good,
            watch: Mutex::new(None),
            rescans: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// The folders whose changes call for a rescan: the user source now;
    /// project sources as sessions ask for them.
    pub(super) fn user_dir(&self) -> Option<PathBuf> {
        self.config().user_dir
    }

    pub(super) fn rescan_every(&self) -> Option<std::time::Duration> {
        self.config().rescan_every
    }

    pub(super) fn set_watch(&self, tx: std::sync::mpsc::Sender<super::watch::Msg>) {
        if let Ok(mut w) = self.watch.lock() {
            *w = Some(tx);
        }
    }

    /// Rescans done so far.
    pub fn rescans(&self) -> u64 {
        self.rescans.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes a new config (SIGHUP) and rescans.
    pub fn reconfigure(&self, config: SkillConfig) {
        if let Ok(mut c) = self.config.write() {
            *c = config;
        }
        self.reload();
    }

    fn config(&self) -> SkillConfig {
        self.config.read().map(|c| c.clone()).unwrap_or_default()
    }

    /// Rescans the built-in and user sources and forgets the projects'
    /// sets (rescanned when next asked for). A session sees the new set at
    /// its next model call.
    pub fn reload(&self) {
        self.rescans
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut base = scan_base(&self.config(), &scan::list_fs);
        keep_last_good(&mut base, &self.last_good);
        let base = Arc::new(base);
        if let Ok(mut b) = self.base.write() {
            *b = base;
        }
        if let Ok(mut p) = self.projects.lock() {
            p.clear();
        }
    }

    /// The set a session in `workdir` (canonical) sees.
    pub fn for_workdir(&self, workdir: &Path) -> Arc<SkillSet> {
        if let Ok(p) = self.projects.lock()
            && let Some(set) = p.get(workdir)
        {
            return set.clone();
        }
        let base = self
            .base
            .read()
            .map(|b| b.clone())
            .unwrap_or_else(|_| Arc::new(Vec::new()));
        let mut candidates: Vec<Candidate> = base.as_ref().clone();
        let config = self.config();
        let mut project = scan_project(&config, workdir, &scan::list_fs);
        keep_last_good(&mut project, &self.last_good);
        candidates.extend(project);
        if config.project
            && let Ok(w) = self.watch.lock()
            && let Some(tx) = w.as_ref()
        {
            for dir in project_dirs(workdir) {
                let _ = tx.send(super::watch::Msg::Watch(dir));
            }
        }
        let set = Arc::new(resolve(candidates));
        if let Ok(mut p) = self.projects.lock() {
            if p.len() >= MAX_PROJECTS {
                p.clear();
            }
            p.insert(workdir.to_path_buf(), set.clone());
        }
        set
    }
}

/// A folder whose skill loaded before and is broken now keeps serving the
/// last good version; its report stays, saying so.
fn keep_last_good(candidates: &mut [Candidate], memo: &Mutex<HashMap<String, Arc<Skill>>>) {
    let Ok(mut memo) = memo.lock() else {
        return;
    };
    for c in candidates.iter_mut() {
        match &c.outcome {
            Ok(skill) => {
                memo.insert(c.folder.clone(), skill.clone());
            }
            Err(broken) => {
                if let Some(good) = memo.get(&c.folder) {
                    let mut report = broken.clone();
                    report.reason = format!(
                        "{}; the last good version of `{}` keeps serving until this is fixed",
                        report.reason,
                        good.name()
                    );
                    c.kept = Some(report);
                    c.outcome = Ok(good.clone());
                }
            }
        }
    }
}
