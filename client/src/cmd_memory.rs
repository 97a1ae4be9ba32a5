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

#[derive(Debug, Args)]
pub struct FolderArg {
    /// The folder: `user/` and `projects/<id>/`, one NAME.md per entry
    pub dir: PathBuf,
}

/// Writes every scope's entries under `dir` (new, or empty), private to
/// the user: memory can hold what people told the agent.
pub fn export(ctx: &Ctx, args: FolderArg) -> Result<u8> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = &args.dir;
    if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
        anyhow::bail!(
            "{} is not empty: export to a new folder (an old export's deleted entries would linger)",
            dir.display()
        );
    }
    let folders = match ctx.request(&Request::MemoryExport {})? {
        Response::MemoryFolders { folders } => folders,
        other => return Err(unexpected("memory_export", &other)),
    };
    let mut n = 0;
    for f in &folders {
        let sub = dir.join(&f.scope);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&sub)
            .with_context(|| format!("cannot create {}", sub.display()))?;
        for file in &f.files {
            let path = sub.join(&file.name);
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            std::io::Write::write_all(&mut out, file.text.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
            n += 1;
        }
    }
    print(&format!(
        "exported {n} entries of {} scopes to {}; edit them, then `flytoctl memory_import {}`\n",
        folders.len(),
        dir.display(),
        dir.display()
    ))?;
    Ok(exit::SUCCESS)
}

/// The entry files of one scope folder, by name.
fn entry_files(dir: &std::path::Path) -> Result<Vec<flyto_protocol::MemoryFile>> {
    let mut files = Vec::new();
    for d in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let d = d?;
        let name = d.file_name().to_string_lossy().into_owned();
        if !d.file_type()?.is_file() || name.starts_with('.') || name == "MEMORY.md" {
            continue;
        }
        let text = std::fs::read_to_string(d.path())
            .with_context(|| format!("cannot read {} as UTF-8 text", d.path().display()))?;
        files.push(flyto_protocol::MemoryFile { name, text });
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}

/// Makes each scope in `dir` hold exactly its entries.
pub fn import(ctx: &Ctx, args: FolderArg) -> Result<u8> {
    let dir = &args.dir;
    let mut folders = Vec::new();
    let user = dir.join("user");
    if user.is_dir() {
        folders.push(flyto_protocol::MemoryFolder {
            scope: "user".into(),
            files: entry_files(&user)?,
        });
    }
    let projects = dir.join("projects");
    if projects.is_dir() {
        let mut ids: Vec<String> = std::fs::read_dir(&projects)?
            .filter_map(|d| d.ok())
            .filter(|d| d.file_type().is_ok_and(|t| t.is_dir()))
            .map(|d| d.file_name().to_string_lossy().into_owned())
            .collect();
        ids.sort();
        for id in ids {
            folders.push(flyto_protocol::MemoryFolder {
                files: entry_files(&projects.join(&id))?,
                scope: format!("projects/{id}"),
            });
        }
    }
    if folders.is_empty() {
        anyhow::bail!(
            "{} holds no memory scope (user/ or projects/<id>/): give the folder `flytoctl memory_export` wrote",
            dir.display()
        );
    }
    match ctx.request(&Request::MemoryImport { folders })? {
        Response::MemoryImported {
            written,
            forgotten,
            unchanged,
        } => print(&format!(
            "imported: {written} written, {forgotten} forgotten (`flytoctl memory_restore NAME` brings one back for 30 days), {unchanged} unchanged\n"
        ))?,
        other => return Err(unexpected("memory_import", &other)),
    }
    Ok(exit::SUCCESS)
}
