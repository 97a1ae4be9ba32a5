//! `skill_list`, `skill_show`, `skill_reload`: the skills a session in a
//! directory sees, where each came from, what it shadowed, and the skill
//! folders that could not be loaded.

use crate::cmd_session::workdir_or_cwd;
use crate::conn::{Ctx, unexpected};
use crate::exit;
use crate::output;
use anyhow::{Context, Result};
use clap::Args;
use flyto_protocol::{BrokenSkillView, Request, Response, SkillView};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Also list the skill folders that could not be loaded (file, line,
    /// reason) and the folders each skill shadows
    #[arg(long)]
    pub all: bool,
    /// Print one JSON object: {"skills": [...], "broken": [...]}
    #[arg(long)]
    pub json: bool,
    /// The project directory whose skills to list [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The skill's name
    pub name: String,
    /// The project directory [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ReloadArgs {
    /// The project directory whose counts to print [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
}

/// Daemon-provided text (skill files are the user's, but may hold
/// anything) reaches a terminal sanitised.
fn print(text: &str) -> Result<()> {
    output::stdout(&crate::sanitize::for_tty(
        text,
        std::io::stdout().is_terminal(),
    ))
}

pub fn list(ctx: &Ctx, args: ListArgs) -> Result<u8> {
    let workdir = workdir_or_cwd(args.project.as_deref())?;
    let (skills, broken) = match ctx.request(&Request::SkillList { workdir })? {
        Response::Skills { skills, broken } => (skills, broken),
        other => return Err(unexpected("skill_list", &other)),
    };
    if args.json {
        let broken = if args.all { broken } else { Vec::new() };
        let json = serde_json::json!({"skills": skills, "broken": broken});
        let text = serde_json::to_string_pretty(&json).context("cannot encode the list as JSON")?;
        return print(&format!("{text}\n")).map(|()| exit::SUCCESS);
    }
    print(&render_list(&skills, &broken, args.all))?;
    Ok(exit::SUCCESS)
}

fn render_list(skills: &[SkillView], broken: &[BrokenSkillView], all: bool) -> String {
    let mut out = String::new();
    if skills.is_empty() {
        out.push_str("no skills\n");
    }
    for s in skills {
        out.push_str(&format!("{}  ({}) {}\n", s.name, s.source, s.path));
        out.push_str(&format!("    {}\n", s.description));
        if all {
            for shadowed in &s.shadowed {
                out.push_str(&format!("    shadows {shadowed}\n"));
            }
        }
    }
    if all {
        for b in broken {
            out.push_str(&format!("broken: {}:{}: {}\n", b.file, b.line, b.reason));
        }
    } else if !broken.is_empty() {
        out.push_str(&format!(
            "({} skill folder{} could not be loaded: `flytoctl skill_list --all` says why)\n",
            broken.len(),
            if broken.len() == 1 { "" } else { "s" }
        ));
    }
    out
}

pub fn show(ctx: &Ctx, args: ShowArgs) -> Result<u8> {
    let workdir = workdir_or_cwd(args.project.as_deref())?;
    let (skill, body) = match ctx.request(&Request::SkillShow {
        name: args.name,
        workdir,
    })? {
        Response::Skill { skill, body } => (skill, body),
        other => return Err(unexpected("skill_show", &other)),
    };
    let mut out = format!(
        "name:        {}\nsource:      {} {}\ndescription: {}\n",
        skill.name, skill.source, skill.path, skill.description
    );
    for s in &skill.shadowed {
        out.push_str(&format!("shadows:     {s}\n"));
    }
    for (label, value) in [
        ("license", &skill.license),
        ("compatibility", &skill.compatibility),
        ("allowed-tools", &skill.allowed_tools),
    ] {
        if let Some(v) = value {
            out.push_str(&format!("{:<13}{v}\n", format!("{label}:")));
        }
    }
    for (k, v) in &skill.metadata {
        out.push_str(&format!("metadata:    {k}: {v}\n"));
    }
    for r in &skill.resources {
        out.push_str(&format!("resource:    {r}\n"));
    }
    out.push('\n');
    out.push_str(&body);
    if !body.ends_with('\n') {
        out.push('\n');
    }
    print(&out)?;
    Ok(exit::SUCCESS)
}

pub fn reload(ctx: &Ctx, args: ReloadArgs) -> Result<u8> {
    let workdir = workdir_or_cwd(args.project.as_deref())?;
    match ctx.request(&Request::SkillReload { workdir })? {
        Response::SkillsReloaded { skills, broken } => {
            let mut text = format!("skills reloaded: {skills} skills");
            if broken > 0 {
                text.push_str(&format!(
                    ", {broken} could not be loaded (`flytoctl skill_list --all` says why)"
                ));
            }
            print(&format!("{text}\n"))?;
            Ok(exit::SUCCESS)
        }
        other => Err(unexpected("skill_reload", &other)),
    }
}
