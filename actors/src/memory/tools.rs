//! The agent's memory tools. They live in this room, not in `tools/`,
//! because they talk to the memory actors (tools there never touch actors);
//! each picks the project from the session's workdir.

use super::{Kind, Memory, WriteReq, store::age};
use crate::clock::Clock;
use crate::tools::builtin::parse_args;
use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use serde::Deserialize;
use std::sync::Arc;

/// Most entries a search answers.
const SEARCH_LIMIT: usize = 10;

/// The four memory tools over `memory`.
pub fn all(memory: Memory, clock: Arc<dyn Clock>) -> Vec<Arc<dyn Tool>> {
    with_origin(memory, clock, None)
}

/// The four memory tools of a background extraction over the turns of
/// `session`: what they write says `source: extracted` and that session.
pub fn extracting(memory: Memory, clock: Arc<dyn Clock>, session: String) -> Vec<Arc<dyn Tool>> {
    with_origin(memory, clock, Some(session))
}

fn with_origin(
    memory: Memory,
    clock: Arc<dyn Clock>,
    extracted_from: Option<String>,
) -> Vec<Arc<dyn Tool>> {
    let shared = Arc::new(Shared {
        memory,
        clock,
        extracted_from,
    });
    vec![
        Arc::new(Search(shared.clone())),
        Arc::new(Read(shared.clone())),
        Arc::new(Write(shared.clone())),
        Arc::new(Forget(shared)),
    ]
}

struct Shared {
    memory: Memory,
    clock: Arc<dyn Clock>,
    /// Set for an extraction's tools: the session it reads.
    extracted_from: Option<String>,
}

impl Shared {
    /// Who made a change: the session whose tool made it, or the
    /// extraction (and the session it learned from).
    fn source(&self, ctx: &ToolContext) -> (String, Option<String>) {
        if let Some(s) = &self.extracted_from {
            return (super::entry::SOURCE_EXTRACTED.into(), Some(s.clone()));
        }
        let id = ctx
            .env
            .iter()
            .find(|(k, _)| k == "FLYTO_SESSION_ID")
            .map_or_else(|| "unknown".to_string(), |(_, v)| v.clone());
        (id, None)
    }
}

fn answer<T>(r: Result<T, super::MemoryError>, ok: impl FnOnce(T) -> String) -> ToolOutput {
    match r {
        Ok(v) => ToolOutput::ok(ok(v)),
        Err(e) => ToolOutput::error(e.to_string()),
    }
}

struct Search(Arc<Shared>);
struct Read(Arc<Shared>);
struct Write(Arc<Shared>);
struct Forget(Arc<Shared>);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
}

impl Tool for Search {
    fn name(&self) -> &'static str {
        "memory_search"
    }
    fn description(&self) -> &'static str {
        "Searches what you remembered in earlier sessions (this project's memory and the \
         user's) by topic. Answers the matching entries best first, each with its score, \
         type, age and description; read one with memory_read. Search before you write, \
         so you update an entry instead of duplicating it."
    }
    fn input_schema(&self) -> &'static str {
        r#"{
  "type": "object",
  "properties": {
    "query": {"type": "string", "description": "Words about the topic, in any language."}
  },
  "required": ["query"],
  "additionalProperties": false
}"#
    }
    fn concurrency_safe(&self, _: &str) -> bool {
        true
    }
    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: SearchArgs = match parse_args(self.name(), args_json, "{\"query\": string}") {
                Ok(a) => a,
                Err(out) => return out,
            };
            let now = self.0.clock.now_ms();
            let hits = self
                .0
                .memory
                .search(&ctx.workdir, &args.query, now, SEARCH_LIMIT)
                .await;
            answer(hits, |hits| {
                if hits.is_empty() {
                    return format!("no memory matches `{}`", args.query);
                }
                hits.iter()
                    .map(|f| {
                        format!(
                            "- {} (score {:.2}, {} {}, updated {}) — {}",
                            f.entry.meta.name,
                            f.score,
                            f.scope,
                            f.entry.meta.kind.as_str(),
                            age(now, f.entry.updated_ms),
                            f.entry.meta.description
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameArgs {
    name: String,
}

impl Tool for Read {
    fn name(&self) -> &'static str {
        "memory_read"
    }
    fn description(&self) -> &'static str {
        "Reads one remembered entry by name: its type, description, age, version and body. \
         What it says was true when it was saved; verify it before relying on it."
    }
    fn input_schema(&self) -> &'static str {
        r#"{
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "The entry's name, as memory_search shows it."}
  },
  "required": ["name"],
  "additionalProperties": false
}"#
    }
    fn concurrency_safe(&self, _: &str) -> bool {
        true
    }
    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: NameArgs = match parse_args(self.name(), args_json, "{\"name\": string}") {
                Ok(a) => a,
                Err(out) => return out,
            };
            let now = self.0.clock.now_ms();
            let found = self.0.memory.read(&ctx.workdir, &args.name).await;
            answer(found, |f| {
                let m = &f.entry.meta;
                format!(
                    "{} ({} {}, version {}, saved {}, updated {}) — {}\n\n{}",
                    m.name,
                    f.scope,
                    m.kind.as_str(),
                    m.version,
                    age(now, f.entry.created_ms),
                    age(now, f.entry.updated_ms),
                    m.description,
                    f.entry.body
                )
            })
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    description: String,
    body: String,
}

impl Tool for Write {
    fn name(&self) -> &'static str {
        "memory_write"
    }
    fn description(&self) -> &'static str {
        "Saves what will still hold in a later session: the user's preferences (type `user`, \
         kept across projects), corrections and guidance the user gave (`feedback`), this \
         project's conventions and facts (`project`), or where to find things \
         (`reference`). Writing an existing name replaces that entry: update instead of \
         duplicating. Never save secrets, or what the code or git history already says."
    }
    fn input_schema(&self) -> &'static str {
        r#"{
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "Lowercase letters, digits and single hyphens, e.g. test-command."},
    "type": {"type": "string", "enum": ["user", "feedback", "project", "reference"]},
    "description": {"type": "string", "description": "One line, at most 150 characters: what the entry holds; the index and search show it."},
    "body": {"type": "string", "description": "The entry in markdown; headings help search."}
  },
  "required": ["name", "type", "description", "body"],
  "additionalProperties": false
}"#
    }
    /// The `type` enum with the types declared in config.
    fn input_schema_for(&self, _workdir: &std::path::Path) -> Option<String> {
        let declared = crate::memory::entry::declared_types();
        if declared.is_empty() {
            return None;
        }
        let mut schema: serde_json::Value = serde_json::from_str(self.input_schema()).ok()?;
        schema["properties"]["type"]["enum"] = crate::memory::entry::type_names().into();
        Some(schema.to_string())
    }
    fn concurrency_safe(&self, _: &str) -> bool {
        false
    }
    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            const EXPECTED: &str = "{\"name\": string, \"type\": one of the memory types, \"description\": string, \"body\": string}";
            let args: WriteArgs = match parse_args(self.name(), args_json, EXPECTED) {
                Ok(a) => a,
                Err(out) => return out,
            };
            let Some(kind) = Kind::parse(&args.kind) else {
                return ToolOutput::error(format!(
                    "`{}` is not a memory type: use {}",
                    args.kind,
                    crate::memory::entry::type_names().join(", ")
                ));
            };
            let (source, session) = self.0.source(ctx);
            let req = WriteReq {
                name: args.name.clone(),
                kind,
                description: args.description,
                body: args.body,
                source,
                session,
            };
            let written = self.0.memory.write(&ctx.workdir, req).await;
            answer(written, |w| {
                if w.created {
                    format!("created memory `{}`", args.name)
                } else {
                    format!(
                        "replaced memory `{}` (now version {})",
                        args.name, w.version
                    )
                }
            })
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForgetArgs {
    name: String,
    reason: String,
}

impl Tool for Forget {
    fn name(&self) -> &'static str {
        "memory_forget"
    }
    fn description(&self) -> &'static str {
        "Forgets a remembered entry that is wrong or no longer holds, with the reason. The \
         user can restore it for 30 days."
    }
    fn input_schema(&self) -> &'static str {
        r#"{
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "reason": {"type": "string", "description": "Why it no longer holds."}
  },
  "required": ["name", "reason"],
  "additionalProperties": false
}"#
    }
    fn concurrency_safe(&self, _: &str) -> bool {
        false
    }
    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: ForgetArgs = match parse_args(
                self.name(),
                args_json,
                "{\"name\": string, \"reason\": string}",
            ) {
                Ok(a) => a,
                Err(out) => return out,
            };
            let (source, session) = self.0.source(ctx);
            let who = match session {
                Some(s) => format!("{source} from {s}"),
                None => source,
            };
            let gone = self
                .0
                .memory
                .forget(&ctx.workdir, &args.name, &args.reason, &who)
                .await;
            answer(gone, |_| {
                format!(
                    "forgot memory `{}` (the user can bring it back with `flytoctl memory_restore {}`)",
                    args.name, args.name
                )
            })
        })
    }
}
