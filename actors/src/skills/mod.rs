//! skills: procedures the agent loads on demand (the public Agent Skills
//! format). A skill is a folder with a `SKILL.md` (frontmatter + body) and
//! optional `references/`, `scripts/`, `assets/`.
//!
//! It owns: parsing `SKILL.md` (`parse.rs`), finding skill folders in each
//! source (`scan.rs`), resolving the sources into one set with shadowing
//! (`registry.rs`: the one [`SkillRegistry`] every session shares, its
//! sets swapped atomically), the catalogue the system prompt carries
//! (`catalogue.rs`), the `load_skill` tool (`tool.rs`) and hot reload
//! (`watch.rs`).
//! Sources, lowest to highest precedence: the built-ins embedded in the
//! binary (the workspace's `skills/` folder, read-only, never copied out),
//! the user's `<config dir>/skills/`, the project's `<workdir>/.flyto/skills/`
//! and `<workdir>/.agents/skills/`.
//!
//! It may not touch storage, sessions or other actors, and it never writes
//! a file: skills are the user's, read as they are.
//! **Invariant**: a skill is never read outside its folder: `load_skill`
//! serves only files whose canonical path is inside the skill's canonical
//! folder (no `..`, no absolute path, no symlink out), size-capped, and
//! built-ins only from the embedded copy.

pub mod catalogue;
pub mod parse;
pub mod registry;
pub mod scan;
pub mod tool;
pub mod watch;

#[cfg(test)]
mod tests;

pub use catalogue::{Catalogue, catalogue};
pub use registry::{SkillConfig, SkillRegistry, SkillSet};
pub use tool::LoadSkillTool;

use std::path::PathBuf;

/// Where a skill came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    Builtin,
    User,
    Project,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Builtin => "builtin",
            Origin::User => "user",
            Origin::Project => "project",
        }
    }
}

/// A valid skill.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub parsed: parse::Parsed,
    pub origin: Origin,
    /// The folder as found (`<builtin>/NAME` for built-ins).
    pub folder: String,
    /// Its canonical folder on disk; `None` for built-ins (embedded).
    pub dir: Option<PathBuf>,
    /// Its files other than `SKILL.md`, relative to the folder, sorted.
    pub resources: Vec<String>,
}

impl Skill {
    pub fn name(&self) -> &str {
        &self.parsed.name
    }
}

/// A skill folder that could not be loaded, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    pub file: String,
    /// 1-based; 0 when the problem is the file or folder as a whole.
    pub line: usize,
    pub reason: String,
}

/// The built-in skills' files, embedded at build time (see `build.rs`):
/// (path relative to `skills/`, bytes), sorted.
pub mod embedded {
    include!(concat!(env!("OUT_DIR"), "/builtin_skills.rs"));
}
