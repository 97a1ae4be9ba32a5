//! tool: `load_skill` — a skill's body, folder and list of resources, or
//! one resource. Its schema names the valid skills of the session's
//! workdir as an enum, rebuilt before every model call.
//!
//! **Invariant**: it reads only inside the skill's folder; built-ins only
//! from the embedded copy.

use super::registry::SkillRegistry;
use super::{Skill, embedded};
use crate::tools::builtin::{OnCancel, parse_args, run_blocking};
use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use serde::Deserialize;
use std::path::{Component, Path};
use std::sync::Arc;

/// Bytes of one resource the tool returns.
pub const MAX_RESOURCE_BYTES: u64 = 256 * 1024;

const EXPECTED: &str = "{\"name\": string (a skill of the catalogue), \"path\"?: string (one of its files, relative to its folder)}";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    name: String,
    #[serde(default)]
    path: Option<String>,
}

pub struct LoadSkillTool {
    pub registry: Arc<SkillRegistry>,
}

impl Tool for LoadSkillTool {
    fn name(&self) -> &'static str {
        "load_skill"
    }

    fn description(&self) -> &'static str {
        "Loads a skill from the catalogue in the system prompt: with `name` alone, returns its \
         instructions, its folder and the list of its files (references, scripts, assets); with \
         `name` and `path` (relative to the skill's folder, as listed), returns that one file. \
         Load a skill when the task matches its description, before you start, and follow it."
    }

    fn input_schema(&self) -> &'static str {
        r#"{
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "The skill's name, as the catalogue lists it."},
    "path": {"type": "string", "description": "One of the skill's files, relative to its folder (e.g. references/api.md). Omit it to load the skill itself."}
  },
  "required": ["name"],
  "additionalProperties": false
}"#
    }

    fn input_schema_for(&self, workdir: &Path) -> Option<String> {
        let set = self.registry.for_workdir(workdir);
        if set.skills.is_empty() {
            return None;
        }
        let mut schema: serde_json::Value = serde_json::from_str(self.input_schema()).ok()?;
        let names: Vec<&str> = set.skills.keys().map(String::as_str).collect();
        schema["properties"]["name"]["enum"] = serde_json::json!(names);
        Some(schema.to_string())
    }

    fn concurrency_safe(&self, _args_json: &str) -> bool {
        true
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args("load_skill", args_json, EXPECTED) {
                Ok(a) => a,
                Err(e) => return e,
            };
            let set = self.registry.for_workdir(&ctx.workdir);
            let Some(skill) = set.get(&args.name).cloned() else {
                let names: Vec<&str> = set.skills.keys().map(String::as_str).collect();
                return ToolOutput::error(format!(
                    "no skill named `{}`; the skills are: {}",
                    args.name,
                    if names.is_empty() {
                        "(none)".to_string()
                    } else {
                        names.join(", ")
                    }
                ));
            };
            match args.path {
                None => ToolOutput::ok(render(&skill)),
                Some(path) => {
                    run_blocking(
                        ctx,
                        "load_skill",
                        OnCancel::Abandon,
                        move |_| match read_resource(&skill, &path) {
                            Ok(text) => ToolOutput::ok(text),
                            Err(e) => ToolOutput::error(e),
                        },
                    )
                    .await
                }
            }
        })
    }
}

/// What `load_skill(name)` returns.
pub fn render(skill: &Skill) -> String {
    let folder = match &skill.dir {
        Some(d) => d.display().to_string(),
        None => skill.folder.clone(),
    };
    let mut out = format!(
        "Skill `{}` ({} skill)\nFolder: {folder}\n",
        skill.name(),
        skill.origin.as_str()
    );
    if skill.resources.is_empty() {
        out.push_str("Resources: none\n");
    } else {
        out.push_str(
            "Resources (load one with load_skill(name, path); paths are relative to the folder):\n",
        );
        for r in &skill.resources {
            out.push_str(&format!("- {r}\n"));
        }
    }
    out.push('\n');
    out.push_str(&skill.parsed.body);
    out
}

/// Checks a resource path: relative, plain components only.
fn check_relative(path: &str) -> Result<(), String> {
    let p = Path::new(path);
    if path.is_empty() {
        return Err("the path is empty: pass one of the files load_skill(name) lists".into());
    }
    if p.is_absolute() {
        return Err(format!(
            "`{path}` is absolute: pass a path relative to the skill's folder, as load_skill(name) lists it"
        ));
    }
    if p.components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "`{path}` leaves the skill's folder (`..`): a skill's files are only those inside its folder"
        ));
    }
    Ok(())
}

/// One file of a skill, confined to its folder and size-capped.
pub fn read_resource(skill: &Skill, path: &str) -> Result<String, String> {
    check_relative(path)?;
    let bytes = match &skill.dir {
        None => {
            let rel = Path::new(path)
                .components()
                .filter_map(|c| match c {
                    Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("/");
            let key = format!("{}/{rel}", skill.name());
            match embedded::FILES.iter().find(|(p, _)| *p == key) {
                Some((_, b)) if rel != "SKILL.md" => b.to_vec(),
                _ => return Err(missing(skill, path)),
            }
        }
        Some(dir) => {
            let target = std::fs::canonicalize(dir.join(path)).map_err(|_| missing(skill, path))?;
            if !target.starts_with(dir) {
                return Err(format!(
                    "`{path}` points outside the skill's folder (a symlink): a skill's files are only those inside its folder"
                ));
            }
            let meta = std::fs::metadata(&target).map_err(|_| missing(skill, path))?;
            if !meta.is_file() {
                return Err(format!(
                    "`{path}` is a folder: pass one of the files load_skill(name) lists"
                ));
            }
            if meta.len() > MAX_RESOURCE_BYTES {
                return Err(format!(
                    "`{path}` has {} bytes, more than the {MAX_RESOURCE_BYTES} load_skill returns: read a part of it with the read tool if it is in the workdir, or ask the user",
                    meta.len()
                ));
            }
            std::fs::read(&target).map_err(|e| format!("cannot read `{path}`: {e}"))?
        }
    };
    if bytes.len() as u64 > MAX_RESOURCE_BYTES {
        return Err(format!(
            "`{path}` has {} bytes, more than the {MAX_RESOURCE_BYTES} load_skill returns",
            bytes.len()
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        format!("`{path}` is not text (a binary asset): use it by its path instead of loading it")
    })
}

fn missing(skill: &Skill, path: &str) -> String {
    format!(
        "skill `{}` has no file `{path}`; its files are: {}",
        skill.name(),
        if skill.resources.is_empty() {
            "(none)".to_string()
        } else {
            skill.resources.join(", ")
        }
    )
}
