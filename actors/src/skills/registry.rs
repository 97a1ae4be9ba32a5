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
}

impl SkillRegistry {
    /// Scans the built-in and user sources now.
    pub fn new(config: SkillConfig) -> Self {
        let base = scan_base(&config, &scan::list_fs);
        SkillRegistry {
            config: RwLock::new(config),
            base: RwLock::new(Arc::new(base)),
            projects: Mutex::new(HashMap::new()),
        }
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
        let base = Arc::new(scan_base(&self.config(), &scan::list_fs));
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
        candidates.extend(scan_project(&self.config(), workdir, &scan::list_fs));
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
