//! run: one consolidation of one project, start to end: record it as
//! running, stage a copy of the live memory, let the dreamer work on the
//! copy (a bounded sub-run, `session/subrun.rs`), validate the result,
//! and have the scope actor switch it in. Every outcome is recorded; a
//! refused or dry run keeps its staged result for review.

use super::DreamConfig;
use super::record::{Gate, ProjectDir, RunRecord};
use super::tools::{Shared, registry};
use super::validate;
use crate::clock::Clock;
use crate::llm::{LlmClient, Models};
use crate::memory::entry::rfc3339;
use crate::memory::store::{INDEX, ScopeDir};
use crate::memory::versions::{VersionMeta, read_files};
use crate::memory::{Memory, MemoryError};
use crate::session::store::SessionStore;
use crate::subrun::{self, SubRun};
use crate::tools::ToolContext;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

const SYSTEM: &str = "You consolidate an agent's memory of one project: markdown entries the agent \
and the user saved in earlier sessions. Work in four phases.\n\
1. Orient: read the index below and the entries (memory_read) before you change anything.\n\
2. Gather: search what was said since the last consolidation (transcript_search) for \
   preferences, corrections and facts that change what the entries say.\n\
3. Consolidate: merge duplicates into one entry (memory_write the merged entry, then \
   memory_forget the others with merged_into), update what changed, turn relative dates \
   (\"yesterday\", \"last week\") into absolute ones, and resolve contradictions in favour of \
   the newer statement and of the user's own words. Entries with `source: user` were written \
   by the user: change or forget one only for a newer statement of theirs, cited as \
   user_statement {session, quote}.\n\
4. Prune: keep the index well under 200 lines and 25 KB; forget what no longer holds, with the \
   reason. Never delete; never save secrets.\n\
Change little: a run that removes many entries is refused whole. When you are done, answer \
with one short paragraph of what you changed and why.";

/// What every run shares.
pub struct RunCtx {
    pub state_dir: PathBuf,
    pub memory: Memory,
    pub sessions: Arc<dyn SessionStore>,
    pub llm: LlmClient,
    pub models: Arc<dyn Fn() -> Arc<Models> + Send + Sync>,
    pub clock: Arc<dyn Clock>,
    /// On the shared store: where the dream leases are, and this node's id.
    pub shared: Option<(Arc<crate::memory::shared::SharedMemory>, String)>,
}

pub struct RunArgs {
    pub id: String,
    pub project: String,
    pub workdir: PathBuf,
    pub manual: bool,
    pub dry_run: bool,
    pub gates: Vec<Gate>,
    pub config: DreamConfig,
}

fn task(index: &str, entries: usize, sessions: &[String], since_ms: u64, now_ms: u64) -> String {
    let since = if since_ms == 0 {
        "ever".to_string()
    } else {
        rfc3339(since_ms)
    };
    format!(
        "Today is {}. The project's memory has {entries} entries; its index (MEMORY.md):\n\n{}\n\nSessions with messages since {since}: {}.",
        rfc3339(now_ms),
        if index.trim().is_empty() {
            "(empty)"
        } else {
            index
        },
        if sessions.is_empty() {
            "none".to_string()
        } else {
            sessions.join(", ")
        }
    )
}

fn save(pd: &ProjectDir, rec: &RunRecord) {
    if let Err(e) = pd.save_run(rec) {
        tracing::error!("dream run {}: cannot save its record: {e}", rec.id);
    }
}

pub async fn run(ctx: Arc<RunCtx>, args: RunArgs, cancel: CancellationToken) -> RunRecord {
    let pd = ProjectDir::new(&ctx.state_dir, &args.project);
    let mut rec = RunRecord {
        id: args.id.clone(),
        project: args.project.clone(),
        workdir: args.workdir.display().to_string(),
        started_ms: ctx.clock.now_ms(),
        manual: args.manual,
        dry_run: args.dry_run,
        gates: args.gates.clone(),
        outcome: "running".into(),
        ..RunRecord::default()
    };
    save(&pd, &rec);
    let outcome = work(&ctx, &args, &pd, &mut rec, cancel).await;
    rec.outcome = match outcome {
        Ok(o) => o,
        Err(o) => o,
    };
    rec.finished_ms = Some(ctx.clock.now_ms());
    save(&pd, &rec);
    tracing::info!("dream run {} of {}: {}", rec.id, rec.workdir, rec.outcome);
    rec
}

async fn work(
    ctx: &RunCtx,
    args: &RunArgs,
    pd: &ProjectDir,
    rec: &mut RunRecord,
    cancel: CancellationToken,
) -> Result<String, String> {
    crate::failpoint::reached("dream-before-staging");
    let staged = ctx
        .memory
        .stage(&args.workdir, pd.staged(&args.id))
        .await
        .map_err(|e| format!("failed: {e}"))?;
    rec.base_version = Some(staged.base_version);
    let since_ms = staged.last_success_ms.unwrap_or(0);
    let shared = Arc::new(Shared {
        dir: ScopeDir {
            dir: staged.dir.clone(),
            label: "project",
            clock: ctx.clock.clone(),
        },
        run: args.id.clone(),
        project: args.project.clone(),
        sessions: ctx.sessions.clone(),
        since_ms,
        citations: Mutex::new(Vec::new()),
    });
    rec.sessions = shared
        .session_ids()
        .into_iter()
        .map(crate::session::model::format_id)
        .collect();
    let models = (ctx.models)();
    let route = crate::session::route_for(&models, &args.config.model)
        .map_err(|e| format!("failed: {e}"))?;
    let index = String::from_utf8_lossy(staged.base.get(INDEX).map_or(&[][..], |v| v)).into_owned();
    let entries = shared.dir.scan().map(|s| s.entries.len()).unwrap_or(0);
    let sub = SubRun {
        system: SYSTEM.into(),
        task: task(&index, entries, &rec.sessions, since_ms, ctx.clock.now_ms()),
        tools: registry(shared.clone()),
        ctx: ToolContext {
            workdir: staged.dir.clone(),
            env: Vec::new(),
            cancel,
            approver: None,
            sandbox: None,
            hooks: None,
        },
        max_calls: args.config.max_calls.max(1),
        max_cost_usd: (args.config.max_cost_usd > 0.0).then_some(args.config.max_cost_usd),
        time_limit: Some(args.config.time_limit),
    };
    let out = subrun::run(&ctx.llm, &route, sub).await;
    rec.model_calls = out.model_calls;
    rec.input_tokens = out.usage.input_tokens;
    rec.output_tokens = out.usage.output_tokens;
    rec.cost_usd = out.cost;
    rec.citations = shared.citations();
    if !out.end.succeeded() {
        let _ = std::fs::remove_dir_all(&staged.dir);
        return Err(format!("failed: the dreamer {}", out.end.describe()));
    }
    let result = read_files(&staged.dir)
        .map_err(|e| format!("failed: cannot read the staged result: {e}"))?;
    let cap = args.config.max_removed;
    let checked = validate::check(&staged.base, &result, cap, &rec.citations);
    rec.diff = match &checked {
        Ok(d) => d.clone(),
        // The attempt is recorded too, for `dream_diff`.
        Err(_) => validate::diff(&staged.base, &result),
    };
    rec.patches = validate::patches(&staged.base, &result);
    if let Err(why) = checked {
        return Err(format!(
            "rejected: {why}; nothing was applied, the staged result is kept in {}",
            staged.dir.display()
        ));
    }
    if args.dry_run {
        return Ok("dry-run".into());
    }
    let base = Arc::new(staged.base.clone());
    let check_base = base.clone();
    let citations = rec.citations.clone();
    let check: crate::memory::switch::Check =
        Arc::new(move |merged| validate::check(&check_base, merged, cap, &citations).map(drop));
    let now = ctx.clock.now_ms();
    let meta = VersionMeta {
        version: 0,
        kind: "dream".into(),
        run: Some(args.id.clone()),
        base: Some(staged.base_version),
        made_ms: now,
        last_success_ms: Some(now),
    };
    match ctx
        .memory
        .switch(
            &args.workdir,
            base,
            Arc::new(result),
            meta,
            check,
            args.config.keep,
        )
        .await
    {
        Ok(s) => {
            rec.version = Some(s.version);
            rec.carried = s.carried;
            let _ = std::fs::remove_dir_all(&staged.dir);
            Ok("applied".into())
        }
        Err(e @ (MemoryError::Conflict(_) | MemoryError::Invalid(_))) => Err(format!(
            "rejected: {e}; the staged result is kept in {}",
            staged.dir.display()
        )),
        Err(e) => Err(format!("failed: {e}")),
    }
}
