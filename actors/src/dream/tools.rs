//! tools: what the dreamer may do, all inside its staging copy: read,
//! write and forget entries (a forget is a tombstone with a reason, and may
//! name the entry it was merged into), and search the transcripts of the
//! project's sessions since the last consolidation, read-only. Changing an
//! entry a person wrote (`source: user`) needs a newer statement of theirs,
//! cited by session and quote and checked against the transcript.

use super::validate::Citation;
use crate::memory::entry::{Kind, rfc3339};
use crate::memory::store::{ScopeDir, WriteReq};
use crate::session::model::{format_id, parse_id};
use crate::session::store::SessionStore;
use crate::tools::builtin::parse_args;
use crate::tools::{Registry, Tool, ToolContext, ToolFuture, ToolOutput};
use serde::Deserialize;
use std::sync::{Arc, Mutex};

/// Most transcript lines one search answers.
const HITS: usize = 20;
const SNIPPET: usize = 300;

pub struct Shared {
    pub dir: ScopeDir,
    pub run: String,
    pub project: String,
    pub sessions: Arc<dyn SessionStore>,
    /// Messages older than this are not offered (the last consolidation).
    pub since_ms: u64,
    pub citations: Mutex<Vec<Citation>>,
}

impl Shared {
    pub fn citations(&self) -> Vec<Citation> {
        self.citations.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// The project's sessions with messages since `since_ms`.
    pub fn session_ids(&self) -> Vec<u64> {
        self.sessions
            .list()
            .unwrap_or_default()
            .into_iter()
            .filter(|r| {
                r.updated_ms > self.since_ms
                    && crate::compaction::breaker::project_id(&r.workdir) == self.project
            })
            .map(|r| r.id)
            .collect()
    }

    /// (session, time, role, text) of every message since `since_ms`.
    fn lines(&self) -> Vec<(u64, u64, &'static str, String)> {
        let mut out = Vec::new();
        for id in self.session_ids() {
            let Ok(msgs) = self.sessions.stamped_messages(id, 0, u64::MAX) else {
                continue;
            };
            for (_, m) in msgs {
                if m.created_ms <= self.since_ms {
                    continue;
                }
                let role = match m.message.role {
                    crate::llm::Role::User => "user",
                    crate::llm::Role::Assistant => "assistant",
                };
                for b in &m.message.content {
                    if let crate::llm::Block::Text { text } = b {
                        out.push((id, m.created_ms, role, text.clone()));
                    }
                }
            }
        }
        out
    }

    /// Checks that `s.session` holds a user message with `s.quote`, said
    /// after the entry's last update.
    fn cite(&self, entry: &str, updated_ms: u64, s: &Statement) -> Result<Citation, String> {
        let norm = |t: &str| {
            t.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .to_lowercase()
        };
        let quote = norm(&s.quote);
        if quote.len() < 3 {
            return Err("the quote is too short to check: quote the user's words".into());
        }
        let id =
            parse_id(&s.session).ok_or_else(|| format!("`{}` is not a session id", s.session))?;
        let found = self.lines().into_iter().find(|(sid, _, role, text)| {
            *sid == id && *role == "user" && norm(text).contains(&quote)
        });
        match found {
            Some((_, said_ms, _, _)) if said_ms > updated_ms => Ok(Citation {
                entry: entry.into(),
                session: format_id(id),
                quote: s.quote.clone(),
                said_ms,
            }),
            Some(_) => Err(format!(
                "that statement is older than the entry (updated {}): the entry the user wrote stands",
                rfc3339(updated_ms)
            )),
            None => Err(format!(
                "no user message of {} since the last consolidation says {:?}: quote the user's words exactly (transcript_search finds them)",
                s.session, s.quote
            )),
        }
    }

    /// The entry as it is in the staging copy, if any.
    fn current(&self, name: &str) -> Option<crate::memory::entry::Entry> {
        self.dir.read_file(&format!("{name}.md")).ok()
    }

    /// For a change to a user's entry: checks and records the citation
    /// given (a citation that does not check out is refused at once).
    fn guard_user(&self, name: &str, statement: Option<&Statement>) -> Result<(), String> {
        let Some(e) = self.current(name) else {
            return Ok(());
        };
        if e.meta.source != "user" {
            return Ok(());
        }
        // Uncited, the change is made in the copy and the validation
        // refuses the whole result: the prompt told the model the rule.
        let Some(s) = statement else {
            return Ok(());
        };
        let c = self.cite(name, e.updated_ms, s)?;
        if let Ok(mut all) = self.citations.lock() {
            all.push(c);
        }
        Ok(())
    }
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Statement {
    session: String,
    quote: String,
}

pub fn registry(shared: Arc<Shared>) -> Registry {
    Registry::new(vec![
        Arc::new(Read(shared.clone())),
        Arc::new(Write(shared.clone())),
        Arc::new(Forget(shared.clone())),
        Arc::new(Transcripts(shared)),
    ])
}

struct Read(Arc<Shared>);
struct Write(Arc<Shared>);
struct Forget(Arc<Shared>);
struct Transcripts(Arc<Shared>);

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
        "Reads one memory entry of this project, frontmatter and body."
    }
    fn input_schema(&self) -> &'static str {
        r#"{"type":"object","properties":{"name":{"type":"string"}},"required":["name"],"additionalProperties":false}"#
    }
    fn concurrency_safe(&self, _: &str) -> bool {
        true
    }
    fn call<'a>(&'a self, _ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: NameArgs = match parse_args(self.name(), args_json, "{\"name\": string}") {
                Ok(a) => a,
                Err(out) => return out,
            };
            match std::fs::read_to_string(self.0.dir.path_of(&args.name)) {
                Ok(text) => ToolOutput::ok(text),
                Err(_) => ToolOutput::error(format!("no memory `{}`", args.name)),
            }
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
    user_statement: Option<Statement>,
}

impl Tool for Write {
    fn name(&self) -> &'static str {
        "memory_write"
    }
    fn description(&self) -> &'static str {
        "Creates or replaces a memory entry (merge duplicates into one entry, update what changed, \
         write dates as absolute dates). Replacing an entry the user wrote needs user_statement: \
         the session and the exact words of a newer statement of theirs."
    }
    fn input_schema(&self) -> &'static str {
        r#"{"type":"object","properties":{
  "name":{"type":"string"},
  "type":{"type":"string","enum":["user","feedback","project","reference"]},
  "description":{"type":"string"},
  "body":{"type":"string"},
  "user_statement":{"type":"object","properties":{"session":{"type":"string"},"quote":{"type":"string"}},"required":["session","quote"],"additionalProperties":false}
},"required":["name","type","description","body"],"additionalProperties":false}"#
    }
    fn concurrency_safe(&self, _: &str) -> bool {
        false
    }
    fn call<'a>(&'a self, _ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: WriteArgs = match parse_args(
                self.name(),
                args_json,
                "{\"name\", \"type\", \"description\", \"body\", optional \"user_statement\": {\"session\", \"quote\"}}",
            ) {
                Ok(a) => a,
                Err(out) => return out,
            };
            let Some(kind) = Kind::parse(&args.kind) else {
                return ToolOutput::error(format!("`{}` is not a memory type", args.kind));
            };
            if kind == Kind::User {
                return ToolOutput::error(
                    "entries of type `user` live in the user's own scope, which a project's consolidation does not change: use feedback, project or reference",
                );
            }
            if let Err(why) = self.0.guard_user(&args.name, args.user_statement.as_ref()) {
                return ToolOutput::error(why);
            }
            let keep_user = self
                .0
                .current(&args.name)
                .is_some_and(|e| e.meta.source == "user");
            let req = WriteReq {
                name: args.name.clone(),
                kind,
                description: args.description,
                body: args.body,
                source: if keep_user {
                    "user".into()
                } else {
                    format!("dream {}", self.0.run)
                },
                session: args.user_statement.as_ref().map(|s| s.session.clone()),
            };
            match self.0.dir.write(&req) {
                Ok(w) if w.created => ToolOutput::ok(format!("created `{}`", args.name)),
                Ok(w) => {
                    ToolOutput::ok(format!("replaced `{}` (version {})", args.name, w.version))
                }
                Err(e) => ToolOutput::error(e.to_string()),
            }
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForgetArgs {
    name: String,
    reason: String,
    merged_into: Option<String>,
    user_statement: Option<Statement>,
}

impl Tool for Forget {
    fn name(&self) -> &'static str {
        "memory_forget"
    }
    fn description(&self) -> &'static str {
        "Forgets an entry with the reason (a tombstone the user can restore; nothing is deleted). \
         After merging an entry into another, forget it with merged_into naming that entry. \
         Forgetting an entry the user wrote needs user_statement."
    }
    fn input_schema(&self) -> &'static str {
        r#"{"type":"object","properties":{
  "name":{"type":"string"},
  "reason":{"type":"string"},
  "merged_into":{"type":"string"},
  "user_statement":{"type":"object","properties":{"session":{"type":"string"},"quote":{"type":"string"}},"required":["session","quote"],"additionalProperties":false}
},"required":["name","reason"],"additionalProperties":false}"#
    }
    fn concurrency_safe(&self, _: &str) -> bool {
        false
    }
    fn call<'a>(&'a self, _ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: ForgetArgs = match parse_args(
                self.name(),
                args_json,
                "{\"name\", \"reason\", optional \"merged_into\", optional \"user_statement\"}",
            ) {
                Ok(a) => a,
                Err(out) => return out,
            };
            if let Some(into) = &args.merged_into
                && self.0.current(into).is_none()
            {
                return ToolOutput::error(format!(
                    "`{into}` does not exist: write the merged entry first"
                ));
            }
            if let Err(why) = self.0.guard_user(&args.name, args.user_statement.as_ref()) {
                return ToolOutput::error(why);
            }
            let source = format!("dream {}", self.0.run);
            match self.0.dir.forget(&args.name, &args.reason, &source) {
                Ok(stone) => {
                    if let Some(into) = &args.merged_into {
                        let note = stone.with_extension("json");
                        if let Some(mut v) = std::fs::read(&note)
                            .ok()
                            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                        {
                            v["merged_into"] = into.clone().into();
                            let _ = crate::tools::write::atomic_write_as(
                                &note,
                                format!("{v:#}\n").as_bytes(),
                                None,
                            );
                        }
                    }
                    ToolOutput::ok(format!("forgot `{}`", args.name))
                }
                Err(e) => ToolOutput::error(e.to_string()),
            }
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryArgs {
    query: String,
}

impl Tool for Transcripts {
    fn name(&self) -> &'static str {
        "transcript_search"
    }
    fn description(&self) -> &'static str {
        "Searches what was said in this project's sessions since the last consolidation \
         (read-only). Answers matching messages, newest first, with session id, time and \
         role; an empty query lists the newest user messages."
    }
    fn input_schema(&self) -> &'static str {
        r#"{"type":"object","properties":{"query":{"type":"string"}},"required":["query"],"additionalProperties":false}"#
    }
    fn concurrency_safe(&self, _: &str) -> bool {
        true
    }
    fn call<'a>(&'a self, _ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: QueryArgs = match parse_args(self.name(), args_json, "{\"query\": string}") {
                Ok(a) => a,
                Err(out) => return out,
            };
            let words: Vec<String> = args
                .query
                .split_whitespace()
                .map(str::to_lowercase)
                .collect();
            let mut hits: Vec<_> = self
                .0
                .lines()
                .into_iter()
                .filter(|(_, _, role, text)| {
                    let t = text.to_lowercase();
                    if words.is_empty() {
                        *role == "user"
                    } else {
                        words.iter().any(|w| t.contains(w.as_str()))
                    }
                })
                .collect();
            hits.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            if hits.is_empty() {
                return ToolOutput::ok("no messages match");
            }
            let out: Vec<String> = hits
                .iter()
                .take(HITS)
                .map(|(id, at, role, text)| {
                    let snippet: String = text.chars().take(SNIPPET).collect();
                    format!("{} · {} · {role}: {snippet}", format_id(*id), rfc3339(*at))
                })
                .collect();
            ToolOutput::ok(out.join("\n"))
        })
    }
}
