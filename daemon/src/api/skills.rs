//! The `skill_*` requests: read from (and reload) the skill registry every
//! session shares.

use super::canonical_workdir;
use crate::server::Ctx;
use flyto_actors::plans::Reject;
use flyto_actors::skills::{Skill, SkillSet};
use flyto_protocol::{BrokenSkillView, ErrorCode, Response, SkillView};
use std::sync::Arc;

/// The skills a session in `workdir` (absolute, canonicalised as a
/// session's is) sees.
fn skill_set(ctx: &Ctx, op: &str, workdir: &str) -> Result<Arc<SkillSet>, Reject> {
    Ok(ctx.skills.for_workdir(&canonical_workdir(op, workdir)?))
}

fn view(set: &SkillSet, skill: &Skill) -> SkillView {
    let p = &skill.parsed;
    SkillView {
        name: p.name.clone(),
        description: p.description.clone(),
        source: skill.origin.as_str().into(),
        path: skill.folder.clone(),
        shadowed: set.shadowed.get(&p.name).cloned().unwrap_or_default(),
        resources: skill.resources.clone(),
        license: p.license.clone(),
        compatibility: p.compatibility.clone(),
        allowed_tools: p.allowed_tools.clone(),
        metadata: p.metadata.clone(),
    }
}

pub fn list(ctx: &Ctx, workdir: &str) -> Result<Response, Reject> {
    let set = skill_set(ctx, "skill_list", workdir)?;
    Ok(Response::Skills {
        skills: set.skills.values().map(|s| view(&set, s)).collect(),
        broken: set
            .broken
            .iter()
            .map(|b| BrokenSkillView {
                file: b.file.clone(),
                line: b.line as u64,
                reason: b.reason.clone(),
            })
            .collect(),
    })
}

pub fn show(ctx: &Ctx, name: &str, workdir: &str) -> Result<Response, Reject> {
    let set = skill_set(ctx, "skill_show", workdir)?;
    match set.get(name) {
        Some(skill) => Ok(Response::Skill {
            skill: view(&set, skill),
            body: skill.parsed.body.clone(),
        }),
        None => Err(Reject::new(
            ErrorCode::NotFound,
            format!(
                "no skill named `{name}` for {workdir}: `flytoctl skill_list --all` lists the skills and the broken ones"
            ),
        )),
    }
}

/// Rescans every skill source now; answers with the counts `workdir` then
/// sees.
pub fn reload(ctx: &Ctx, workdir: &str) -> Result<Response, Reject> {
    ctx.skills.reload();
    let set = skill_set(ctx, "skill_reload", workdir)?;
    Ok(Response::SkillsReloaded {
        skills: set.skills.len() as u64,
        broken: set.broken.len() as u64,
    })
}
