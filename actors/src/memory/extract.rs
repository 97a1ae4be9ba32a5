//! Background extraction: every `[memory] extract_every` turns of a session
//! in which the agent itself saved nothing, a short headless run (the
//! session room's `subrun`, role `fast`, at most [`MAX_CALLS`] model calls)
//! reads those turns and saves what will hold next time. Its only tools are
//! the memory tools of the session's project, so it writes through the
//! scope actors like every other writer, and what it writes says
//! `source: extracted` and the session.
//!
//! The session room decides when (after a run has ended, never inside it)
//! and records the cost; this room owns the prompt, the transcript it is
//! shown and the single flight per project.

use super::Memory;
use crate::clock::Clock;
use crate::llm::{Block, LlmClient, Message, Models, Role};
use crate::subrun::{self, SubRun, SubRunOutcome};
use crate::tools::{Registry, ToolContext};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Model calls an extraction makes at most.
pub const MAX_CALLS: u32 = 5;
/// Characters of transcript an extraction is shown at most (the latest).
pub const MAX_TRANSCRIPT_CHARS: usize = 24_000;
/// Characters of one text block shown at most.
const MAX_TEXT_CHARS: usize = 4_000;
/// Characters of a tool call's arguments shown.
const MAX_CALL_CHARS: usize = 160;
/// An extraction that takes longer than this is stopped.
const TIME_LIMIT: Duration = Duration::from_secs(300);

/// The extraction's system prompt. Its first line names it, so a log (or
/// a test's fake provider) can tell it from a session's.
pub const SYSTEM_PROMPT: &str = "\
You are flytod's memory extractor. You read a few turns of a conversation \
between a user and a coding agent and save what will still hold in a later \
session, using only the memory tools.

Save:
- the user's stated preferences about how to work (type `user`, kept across projects);
- corrections and guidance the user gave the agent (type `feedback`);
- facts about this project that will hold next time: commands, conventions, \
where things are (type `project` or `reference`).

Do not save:
- secrets of any kind (keys, tokens, passwords): say where a value is kept instead;
- what the code or its git history already says, one-off details of the task, \
or guesses the user did not confirm.

Search before you write (memory_search), and update the existing entry of a \
topic (memory_write with its name) instead of adding a duplicate. Most turns \
hold nothing worth keeping: then write nothing. End with one line saying what \
you saved, or `nothing to save`.";

/// One extraction to run.
pub struct Job {
    /// The session whose turns these are, e.g. `s3`.
    pub session: String,
    pub workdir: PathBuf,
    /// The turns as [`transcript`] shows them.
    pub transcript: String,
    pub turns: u64,
}

/// What an extraction did.
#[derive(Debug, Clone)]
pub struct Extracted {
    pub outcome: SubRunOutcome,
    /// Names of the entries it wrote (created or replaced), in order.
    pub saved: Vec<String>,
    /// Names of the entries it forgot.
    pub forgot: Vec<String>,
    /// The model profile it used.
    pub model: String,
}

/// At most one extraction in flight per project. A second one for the
/// same project waits until the first has finished (queued, not skipped:
/// the turns it covers were counted already); the session room lets each
/// session have at most one extraction waiting or running, so a project's
/// queue is at most its number of sessions.
#[derive(Default)]
pub struct Flights {
    projects: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Flights {
    fn slot(&self, project: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.projects.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(project.to_string()).or_default().clone()
    }

    /// Forgets a project's slot once nobody holds or waits for it.
    fn release(&self, project: &str) {
        let mut map = self.projects.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(project).is_some_and(|s| Arc::strong_count(s) == 1) {
            map.remove(project);
        }
    }
}

/// The turns as the extractor reads them: user and assistant text, each
/// tool call on one short line, tool results left out; at most
/// [`MAX_TRANSCRIPT_CHARS`], the latest kept.
pub fn transcript(messages: &[Message]) -> String {
    let mut lines = Vec::new();
    for m in messages {
        for b in &m.content {
            match (m.role, b) {
                (Role::User, Block::Text { text }) => {
                    lines.push(format!("USER: {}", cut(text, MAX_TEXT_CHARS)));
                }
                (Role::Assistant, Block::Text { text }) if !text.trim().is_empty() => {
                    lines.push(format!("ASSISTANT: {}", cut(text, MAX_TEXT_CHARS)));
                }
                (
                    _,
                    Block::ToolUse {
                        name,
                        arguments_json,
                        ..
                    },
                ) => {
                    let args = arguments_json.replace(['\n', '\r'], " ");
                    lines.push(format!("TOOL CALL: {name} {}", cut(&args, MAX_CALL_CHARS)));
                }
                _ => {}
            }
        }
    }
    let all = lines.join("\n");
    let n = all.chars().count();
    if n <= MAX_TRANSCRIPT_CHARS {
        return all;
    }
    let tail: String = all.chars().skip(n - MAX_TRANSCRIPT_CHARS).collect();
    format!("[earlier part of these turns left out]\n{tail}")
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max).collect();
    format!("{head} […]")
}

/// Runs one extraction over `job`, after any other extraction of the same
/// project has finished. `Err` says why none could start (no model, an
/// unusable workdir); a run that started reports how it ended in its
/// outcome, cost included.
pub async fn run(
    llm: &LlmClient,
    models: &Models,
    memory: &Memory,
    clock: Arc<dyn Clock>,
    flights: &Flights,
    job: Job,
    cancel: CancellationToken,
) -> Result<Extracted, String> {
    let route = models.route("fast").map_err(|e| e.to_string())?;
    let project = super::project_of(&job.workdir).map_err(|e| e.to_string())?;
    let slot = flights.slot(&project);
    let guard = match slot.clone().try_lock_owned() {
        Ok(g) => g,
        Err(_) => {
            tracing::info!(
                session = %job.session,
                project = %project,
                "memory extraction queued: another one of this project is running"
            );
            tokio::select! {
                g = slot.clone().lock_owned() => g,
                () = cancel.cancelled() => {
                    drop(slot);
                    flights.release(&project);
                    return Err("cancelled before it started".into());
                }
            }
        }
    };
    tracing::info!(session = %job.session, project = %project, turns = job.turns, "memory extraction started");
    let tools = super::tools::extracting(memory.clone(), clock, job.session.clone());
    let task = format!(
        "Here are the last {} turns of session {} in {}. Save what will hold next time.\n\n<turns>\n{}\n</turns>",
        job.turns,
        job.session,
        job.workdir.display(),
        job.transcript
    );
    let sub = SubRun {
        system: SYSTEM_PROMPT.into(),
        task,
        tools: Registry::new(tools),
        ctx: ToolContext {
            workdir: job.workdir.clone(),
            env: Vec::new(),
            cancel,
            approver: None,
            sandbox: None,
            hooks: None,
        },
        max_calls: MAX_CALLS,
        max_cost_usd: None,
        time_limit: Some(TIME_LIMIT),
    };
    let outcome = subrun::run(llm, &route, sub).await;
    drop(guard);
    drop(slot);
    flights.release(&project);
    let named = |tool: &str| -> Vec<String> {
        outcome
            .calls
            .iter()
            .filter(|c| c.name == tool && !c.output.is_error)
            .filter_map(|c| {
                serde_json::from_str::<serde_json::Value>(&c.arguments_json)
                    .ok()
                    .and_then(|v| v["name"].as_str().map(str::to_string))
            })
            .collect()
    };
    let (saved, forgot) = (named("memory_write"), named("memory_forget"));
    tracing::info!(
        session = %job.session,
        project = %project,
        calls = outcome.model_calls,
        cost_usd = outcome.cost,
        saved = ?saved,
        "memory extraction {}",
        outcome.end.describe()
    );
    Ok(Extracted {
        outcome,
        saved,
        forgot,
        model: route.primary.name.clone(),
    })
}

/// Whether `messages` hold a memory write of the agent's own that
/// succeeded (`memory_write` or `memory_forget` answered without error).
pub fn agent_wrote_memory(messages: &[Message]) -> bool {
    let mut calls = std::collections::HashSet::new();
    for m in messages {
        for b in &m.content {
            match b {
                Block::ToolUse { id, name, .. }
                    if name == "memory_write" || name == "memory_forget" =>
                {
                    calls.insert(id.as_str());
                }
                Block::ToolResult {
                    call_id, is_error, ..
                } if !is_error && calls.contains(call_id.as_str()) => return true,
                _ => {}
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, name: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![Block::ToolUse {
                id: id.into(),
                name: name.into(),
                arguments_json: "{\"name\":\"x\"}".into(),
            }],
        }
    }

    fn result(id: &str, is_error: bool) -> Message {
        Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                call_id: id.into(),
                content: "ok".into(),
                is_error,
            }],
        }
    }

    #[test]
    fn only_a_memory_write_that_succeeded_counts() {
        let refused = [call("a", "memory_write"), result("a", true)];
        assert!(!agent_wrote_memory(&refused));
        let other = [call("b", "write"), result("b", false)];
        assert!(!agent_wrote_memory(&other));
        let forgot = [call("c", "memory_forget"), result("c", false)];
        assert!(agent_wrote_memory(&forgot));
    }

    #[test]
    fn the_transcript_shows_text_and_one_line_per_call_and_keeps_the_latest() {
        let ms = vec![
            Message::user_text("use tabs"),
            call("a", "bash"),
            result("a", false),
            Message {
                role: Role::Assistant,
                content: vec![Block::Text {
                    text: "done".into(),
                }],
            },
        ];
        assert_eq!(
            transcript(&ms),
            "USER: use tabs\nTOOL CALL: bash {\"name\":\"x\"}\nASSISTANT: done"
        );
        let long: Vec<Message> = (0..20)
            .map(|i| Message::user_text(format!("{i} {}", "é".repeat(3_000))))
            .collect();
        let t = transcript(&long);
        assert!(t.chars().count() < MAX_TRANSCRIPT_CHARS + 100);
        assert!(t.starts_with("[earlier part"), "{}", &t[..40]);
        assert!(t.contains("USER: 19 "));
    }
}
