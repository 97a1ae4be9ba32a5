//! `memory_*`: what the agent remembers for a project (and for the user),
//! listed, shown, searched, forgotten and restored through flytod, which
//! owns the folders; `memory_path` prints them for editing by hand.

use crate::cmd_session::workdir_or_cwd;
use crate::conn::{Ctx, unexpected};
use crate::exit;
use crate::format::age;
use crate::output;
use crate::sanitize::for_tty;
use anyhow::{Context, Result};
use clap::Args;
use flyto_protocol::{MemoryEntryView, Request, Response};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ProjectArg {
    /// The project's directory [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
}

impl ProjectArg {
    fn dir(&self) -> Result<String> {
        workdir_or_cwd(self.project.as_deref())
    }
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub project: ProjectArg,
    /// Print the scopes as pretty JSON (entries and problems)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct NameArgs {
    /// The entry's name
    pub name: String,
    #[command(flatten)]
    pub project: ProjectArg,
}

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// Words about the topic (several are joined with spaces)
    #[arg(required = true)]
    pub query: Vec<String>,
    #[command(flatten)]
    pub project: ProjectArg,
}

#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// The entry's name
    pub name: String,
    /// Why it no longer holds (kept next to the tombstone)
    #[arg(long, default_value = "forgotten by the user")]
    pub reason: String,
    #[command(flatten)]
    pub project: ProjectArg,
}

fn print(text: &str) -> Result<()> {
    output::stdout(&for_tty(text, std::io::stdout().is_terminal()))
}

fn line(e: &MemoryEntryView, now: u64) -> String {
    format!(
        "{:<28} {:<9} {:<7} {:>8}  {}\n",
        e.name,
        e.kind,
        e.scope,
        age(now, e.updated_ms),
        e.description
    )
}

pub fn list(ctx: &Ctx, args: ListArgs) -> Result<u8> {
    let project = args.project.dir()?;
    let scopes = match ctx.request(&Request::MemoryList { project })? {
        Response::Memory { scopes } => scopes,
        other => return Err(unexpected("memory_list", &other)),
    };
    if args.json {
        let json = serde_json::to_string_pretty(&scopes)
            .context("cannot encode the memory listing as JSON")?;
        output::stdout(&format!("{json}\n"))?;
        return Ok(exit::SUCCESS);
    }
    let now = crate::format::now_ms();
    let mut out = String::new();
    for s in &scopes {
        out.push_str(&format!(
            "{} memory: {} ({} entries)\n",
            s.scope,
            s.dir,
            s.entries.len()
        ));
        for e in &s.entries {
            out.push_str("  ");
            out.push_str(&line(e, now));
        }
        for p in &s.problems {
            out.push_str(&format!(
                "  unreadable: {} line {}: {}\n",
                p.file, p.line, p.reason
            ));
        }
    }
    print(&out)?;
    Ok(exit::SUCCESS)
}

/// Who wrote an entry: `s3`, `user`, or `extracted from s3`.
fn origin(e: &MemoryEntryView) -> String {
    if e.session.is_empty() {
        e.source.clone()
    } else {
        format!("{} from {}", e.source, e.session)
    }
}

pub fn show(ctx: &Ctx, args: NameArgs) -> Result<u8> {
    let project = args.project.dir()?;
    let (entry, body) = match ctx.request(&Request::MemoryShow {
        project,
        name: args.name,
    })? {
        Response::MemoryEntry { entry, body } => (entry, body),
        other => return Err(unexpected("memory_show", &other)),
    };
    let now = crate::format::now_ms();
    print(&format!(
        "name:        {}\ntype:        {}\nscope:       {}\ndescription: {}\nupdated:     {} (version {}, by {})\nfile:        {}\n\n{body}",
        entry.name,
        entry.kind,
        entry.scope,
        entry.description,
        age(now, entry.updated_ms),
        entry.version,
        origin(&entry),
        entry.path
    ))?;
    Ok(exit::SUCCESS)
}

pub fn search(ctx: &Ctx, args: SearchArgs) -> Result<u8> {
    let project = args.project.dir()?;
    let query = args.query.join(" ");
    let hits = match ctx.request(&Request::MemorySearch { project, query })? {
        Response::MemoryHits { hits } => hits,
        other => return Err(unexpected("memory_search", &other)),
    };
    let now = crate::format::now_ms();
    let out: String = hits
        .iter()
        .map(|h| format!("{:>6.2}  {}", h.score, line(&h.entry, now)))
        .collect();
    print(&out)?;
    Ok(exit::SUCCESS)
}

pub fn forget(ctx: &Ctx, args: ForgetArgs) -> Result<u8> {
    let project = args.project.dir()?;
    match ctx.request(&Request::MemoryForget {
        project,
        name: args.name,
        reason: args.reason,
    })? {
        Response::MemoryForgotten { name, trash } => {
            print(&format!(
                "forgot {name} (tombstone: {trash}; `flytoctl memory_restore {name}` brings it back for 30 days)\n"
            ))?;
        }
        other => return Err(unexpected("memory_forget", &other)),
    }
    Ok(exit::SUCCESS)
}

pub fn restore(ctx: &Ctx, args: NameArgs) -> Result<u8> {
    let project = args.project.dir()?;
    match ctx.request(&Request::MemoryRestore {
        project,
        name: args.name,
    })? {
        Response::MemoryRestored { name, path } => print(&format!("restored {name}: {path}\n"))?,
        other => return Err(unexpected("memory_restore", &other)),
    }
    Ok(exit::SUCCESS)
}

pub fn path(ctx: &Ctx, args: ProjectArg) -> Result<u8> {
    let project = args.dir()?;
    match ctx.request(&Request::MemoryPath { project })? {
        Response::MemoryPaths { project, user } => {
            print(&format!("project: {project}\nuser:    {user}\n"))?;
        }
        other => return Err(unexpected("memory_path", &other)),
    }
    Ok(exit::SUCCESS)
}
