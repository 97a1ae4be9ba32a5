//! `dream_*`: the consolidation of a project's memory — its gates and
//! state, the log of runs with their per-entry diffs, a run now (or a dry
//! run that applies nothing), and undo of a run.

use crate::cmd_session::workdir_or_cwd;
use crate::conn::{Ctx, unexpected};
use crate::exit;
use crate::output;
use crate::sanitize::for_tty;
use anyhow::{Context, Result};
use clap::Args;
use flyto_protocol::{Request, Response};
use serde_json::Value;
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Only this project's directory [default: every known project]
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Print the answer as pretty JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Only this project's directory [default: every project]
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// How many of the newest runs to show
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The run's id, as `dream_log` shows it (d7)
    pub run: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The project's directory [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Show what the run would change and apply nothing
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct UndoArgs {
    /// The run to undo [default: the newest run that changed the memory]
    pub run: Option<String>,
    /// The project's directory [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

fn print(text: &str) -> Result<()> {
    output::stdout(&for_tty(text, std::io::stdout().is_terminal()))
}

fn ask(ctx: &Ctx, op: &str, req: &Request) -> Result<Value> {
    match ctx.request(req)? {
        Response::Dream { json } => {
            serde_json::from_str(&json).with_context(|| format!("flytod's {op} answer is not JSON"))
        }
        other => Err(unexpected(op, &other)),
    }
}

fn pretty(v: &Value) -> Result<u8> {
    print(&format!("{v:#}\n"))?;
    Ok(exit::SUCCESS)
}

fn time(v: &Value) -> String {
    v.as_u64()
        .map_or_else(|| "never".into(), crate::format::rfc3339)
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| match x {
                    Value::String(s) => s.clone(),
                    other => {
                        let name = other["name"].as_str().unwrap_or("?");
                        match other["merged_into"].as_str() {
                            Some(into) => format!("{name} → {into}"),
                            None => format!("{name} ({})", other["reason"].as_str().unwrap_or("")),
                        }
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A run record in a few lines, its diff one kind per line.
fn run_text(r: &Value) -> String {
    let mut out = format!(
        "{} {} {}{}: {}\n",
        r["id"].as_str().unwrap_or("?"),
        time(&r["started_ms"]),
        r["workdir"].as_str().unwrap_or(""),
        match (r["manual"].as_bool(), r["dry_run"].as_bool()) {
            (_, Some(true)) => " (dry run)",
            (Some(true), _) => " (manual)",
            _ => "",
        },
        r["outcome"].as_str().unwrap_or("?")
    );
    out.push_str(&format!(
        "  {} model calls, {} tokens in, {} out, ${:.4}; sessions read: {}\n",
        r["model_calls"],
        r["input_tokens"],
        r["output_tokens"],
        r["cost_usd"].as_f64().unwrap_or(0.0),
        {
            let s = names(&r["sessions"]);
            if s.is_empty() {
                "none".to_string()
            } else {
                s.join(", ")
            }
        }
    ));
    for kind in ["added", "updated", "merged", "tombstoned"] {
        let n = names(&r["diff"][kind]);
        if !n.is_empty() {
            out.push_str(&format!("  {kind}: {}\n", n.join(", ")));
        }
    }
    let carried = names(&r["carried"]);
    if !carried.is_empty() {
        out.push_str(&format!(
            "  carried over from live edits: {}\n",
            carried.join(", ")
        ));
    }
    out
}

pub fn status(ctx: &Ctx, args: StatusArgs) -> Result<u8> {
    let project = args
        .project
        .as_deref()
        .map(|p| workdir_or_cwd(Some(p)))
        .transpose()?;
    let v = ask(ctx, "dream_status", &Request::DreamStatus { project })?;
    if args.json {
        return pretty(&v);
    }
    let all = v.as_array().cloned().unwrap_or_default();
    if all.is_empty() {
        print(
            "no projects known to the dream room yet (a project appears with its first session)\n",
        )?;
        return Ok(exit::SUCCESS);
    }
    let mut out = String::new();
    for p in &all {
        out.push_str(&format!(
            "{}\n  enabled: {}; last success: {}; next eligible: {}; sessions since: {}; lease: {}; live version: {}\n",
            p["workdir"].as_str().unwrap_or("?"),
            p["enabled"],
            time(&p["last_success_ms"]),
            p["next_eligible_ms"]
                .as_u64()
                .map_or_else(|| "now".into(), crate::format::rfc3339),
            p["sessions_since"],
            p["lease"].as_str().unwrap_or("free"),
            p["live_version"]
                .as_u64()
                .map_or_else(|| "-".into(), |n| n.to_string()),
        ));
        if let Some(gates) = p["last_check"].as_array() {
            let g: Vec<String> = gates
                .iter()
                .map(|g| {
                    format!(
                        "{} {} ({})",
                        g["name"].as_str().unwrap_or("?"),
                        if g["passed"].as_bool() == Some(true) {
                            "ok"
                        } else {
                            "stop"
                        },
                        g["value"].as_str().unwrap_or("")
                    )
                })
                .collect();
            out.push_str(&format!("  last check: {}\n", g.join("; ")));
        }
        if let Some(o) = p["last_outcomes"].as_array() {
            for pair in o {
                out.push_str(&format!(
                    "  {}: {}\n",
                    pair[0].as_str().unwrap_or("?"),
                    pair[1].as_str().unwrap_or("?")
                ));
            }
        }
    }
    print(&out)?;
    Ok(exit::SUCCESS)
}

pub fn log(ctx: &Ctx, args: LogArgs) -> Result<u8> {
    let project = args
        .project
        .as_deref()
        .map(|p| workdir_or_cwd(Some(p)))
        .transpose()?;
    let v = ask(
        ctx,
        "dream_log",
        &Request::DreamLog {
            project,
            limit: args.limit,
        },
    )?;
    if args.json {
        return pretty(&v);
    }
    let runs = v.as_array().cloned().unwrap_or_default();
    if runs.is_empty() {
        print("no dream runs yet\n")?;
    }
    let text: String = runs.iter().map(run_text).collect();
    print(&text)?;
    Ok(exit::SUCCESS)
}

pub fn diff(ctx: &Ctx, args: DiffArgs) -> Result<u8> {
    let v = ask(ctx, "dream_diff", &Request::DreamDiff { run: args.run })?;
    if args.json {
        return pretty(&v);
    }
    let mut text = run_text(&v);
    // What changed inside each entry; records from before patches were
    // kept have none.
    for p in v["patches"].as_array().into_iter().flatten() {
        text.push('\n');
        text.push_str(p["unified"].as_str().unwrap_or(""));
    }
    print(&text)?;
    Ok(exit::SUCCESS)
}

pub fn run(ctx: &Ctx, args: RunArgs) -> Result<u8> {
    let project = workdir_or_cwd(args.project.as_deref())?;
    let v = ask(
        ctx,
        "dream_run",
        &Request::DreamRun {
            project,
            dry_run: args.dry_run,
        },
    )?;
    let outcome = v["outcome"].as_str().unwrap_or("");
    let code = if outcome == "applied" || outcome == "dry-run" {
        exit::SUCCESS
    } else {
        exit::OTHER
    };
    if args.json {
        pretty(&v)?;
    } else {
        print(&run_text(&v))?;
    }
    Ok(code)
}

pub fn undo(ctx: &Ctx, args: UndoArgs) -> Result<u8> {
    let project = workdir_or_cwd(args.project.as_deref())?;
    let v = ask(
        ctx,
        "dream_undo",
        &Request::DreamUndo {
            project,
            run: args.run,
        },
    )?;
    if args.json {
        return pretty(&v);
    }
    print(&format!(
        "undid dream run {}: the memory of version {} is live again (as version {})\n",
        v["run"].as_str().unwrap_or("?"),
        v["base"],
        v["version"]
    ))?;
    Ok(exit::SUCCESS)
}
