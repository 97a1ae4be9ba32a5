//! The tiered summary: (1) one call to the `fast` role over the messages
//! between the protected head and tail; (2) when that prompt is too long,
//! the oldest message groups are left out step by step; (3) when still too
//! long, the messages are summarised in chunks and the parts merged. A
//! later compaction updates the previous summary instead of summarising a
//! summary of a summary. What the user confirmed, paths and identifiers are
//! also collected by rule and pinned verbatim, whatever the model wrote.

use super::estimate::text_tokens;
use super::window::is_user_turn;
use crate::llm::{Block, ChatRequest, LlmError, Message, Role, Usage};
use regex::Regex;
use std::future::Future;
use std::pin::Pin;
use std::sync::LazyLock;

/// A tool result or argument is shown to the summariser up to this length.
const RENDER_CLIP: usize = 2_000;
/// Oldest groups left out, one per retry, before chunking (tier 2).
const MAX_DROPS: usize = 3;
/// Times the chunk size is halved when a chunk is itself too long.
const MAX_HALVINGS: u32 = 3;
/// Pinned items kept across compactions (newest win).
const MAX_PINNED: usize = 60;

const SUMMARY_SYSTEM: &str = "You compact the conversation of a coding agent so it can continue with less context. \
Write the summary in exactly these sections, as markdown headings: \
## Goal, ## Constraints and preferences the user confirmed, ## Progress, ## Decisions, ## Files and identifiers, ## Next steps. \
Copy paths, ids, names, numbers, commands and the user's own wording of constraints verbatim; never paraphrase them. \
Be concise; leave out pleasantries and tool output that no longer matters.";

/// One model call, as compaction needs it: the reply text and its usage.
pub type SummaryFuture<'a> =
    Pin<Box<dyn Future<Output = Result<(String, Usage), LlmError>> + Send + 'a>>;

/// The model that writes summaries (the `fast` role in the daemon, a
/// script in tests and benchmarks).
pub trait Summarizer: Send + Sync {
    fn call(&self, request: ChatRequest) -> SummaryFuture<'_>;
    /// Input tokens the summariser can take, to size chunks.
    fn input_window(&self) -> u64;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Summary,
    SummaryDropped,
    SummaryChunked,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Summary => "summary",
            Tier::SummaryDropped => "summary_dropped",
            Tier::SummaryChunked => "summary_chunked",
        }
    }
}

#[derive(Debug)]
pub struct Summary {
    pub text: String,
    pub tier: Tier,
    pub calls: u32,
    pub usage: Usage,
    /// Message groups left out by tier 2.
    pub dropped_groups: usize,
}

/// The messages to summarise as plain text lines: tool traffic becomes
/// text, so the summary call never carries tool calls of its own.
pub fn render_transcript(msgs: &[(u64, Message)]) -> String {
    let mut out = String::new();
    for (idx, m) in msgs {
        render_message(*idx, m, &mut out);
    }
    out
}

fn render_message(idx: u64, m: &Message, out: &mut String) {
    let who = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    for b in &m.content {
        match b {
            Block::Text { text } => out.push_str(&format!("[#{idx} {who}] {text}\n")),
            Block::Thinking { .. } | Block::RedactedThinking { .. } => {}
            Block::ToolUse {
                name,
                arguments_json,
                ..
            } => out.push_str(&format!(
                "[#{idx} tool call {name}] {}\n",
                clip(arguments_json)
            )),
            Block::ToolResult {
                content, is_error, ..
            } => {
                let tag = if *is_error {
                    "tool error"
                } else {
                    "tool result"
                };
                out.push_str(&format!("[#{idx} {tag}] {}\n", clip(content)));
            }
        }
    }
}

/// The text a user typed in a message, blocks joined.
pub fn user_text(m: &Message) -> String {
    m.content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn clip(s: &str) -> String {
    if s.chars().count() <= RENDER_CLIP {
        return s.to_string();
    }
    let kept: String = s.chars().take(RENDER_CLIP).collect();
    format!("{kept} […]")
}

/// Turns: each starts at a message the user typed.
pub fn groups(msgs: &[(u64, Message)]) -> Vec<Vec<(u64, Message)>> {
    let mut out: Vec<Vec<(u64, Message)>> = Vec::new();
    for (i, m) in msgs {
        if is_user_turn(m) || out.is_empty() {
            out.push(Vec::new());
        }
        if let Some(last) = out.last_mut() {
            last.push((*i, m.clone()));
        }
    }
    out
}

fn request(prompt: String) -> ChatRequest {
    ChatRequest {
        system: SUMMARY_SYSTEM.into(),
        messages: vec![Message::user_text(prompt)],
        tools: vec![],
        max_tokens: 0,
    }
}

fn summary_prompt(previous: Option<&str>, transcript: &str) -> String {
    match previous {
        Some(prev) => format!(
            "Here is the summary of the conversation so far, then the messages that came after it. \
Update the summary: keep what still holds, add what is new, and return the whole updated summary in the same sections.\n\n\
<previous-summary>\n{prev}\n</previous-summary>\n\n<messages>\n{transcript}</messages>"
        ),
        None => format!("Summarise these messages.\n\n<messages>\n{transcript}</messages>"),
    }
}

fn chunk_prompt(part: usize, parts: usize, transcript: &str) -> String {
    format!(
        "This is part {part} of {parts} of a long conversation. Summarise this part on its own, in the sections given.\n\n<messages>\n{transcript}</messages>"
    )
}

fn merge_prompt(previous: Option<&str>, parts: &[String]) -> String {
    let mut out = String::from(
        "Merge these partial summaries, oldest first, into one summary in the same sections. Keep every path, id and number.\n\n",
    );
    if let Some(prev) = previous {
        out.push_str(&format!(
            "<previous-summary>\n{prev}\n</previous-summary>\n\n"
        ));
    }
    for (i, p) in parts.iter().enumerate() {
        out.push_str(&format!("<part n=\"{}\">\n{p}\n</part>\n\n", i + 1));
    }
    out
}

struct Calls<'a> {
    model: &'a dyn Summarizer,
    calls: u32,
    usage: Usage,
}

impl Calls<'_> {
    async fn call(&mut self, prompt: String) -> Result<String, LlmError> {
        self.calls += 1;
        let (text, usage) = self.model.call(request(prompt)).await?;
        self.usage.add(&usage);
        let text = text.trim().to_string();
        if text.is_empty() {
            return Err(LlmError::MalformedStream {
                detail: "the summary call answered with no text".into(),
            });
        }
        Ok(text)
    }
}

fn too_long(e: &LlmError) -> bool {
    matches!(
        e,
        LlmError::PromptTooLong { .. } | LlmError::RequestTooLarge { .. }
    )
}

/// Summarises `msgs` (with the previous summary, if any), tier by tier.
pub async fn summarize(
    model: &dyn Summarizer,
    previous: Option<&str>,
    msgs: &[(u64, Message)],
) -> Result<Summary, LlmError> {
    let mut calls = Calls {
        model,
        calls: 0,
        usage: Usage::default(),
    };
    // Tier 1, then tier 2: leave out the oldest groups one by one.
    let all = groups(msgs);
    let mut last_err = None;
    for dropped in 0..=MAX_DROPS.min(all.len().saturating_sub(1)) {
        let kept: Vec<(u64, Message)> = all[dropped..].iter().flatten().cloned().collect();
        match calls
            .call(summary_prompt(previous, &render_transcript(&kept)))
            .await
        {
            Ok(text) => {
                return Ok(Summary {
                    text,
                    tier: if dropped == 0 {
                        Tier::Summary
                    } else {
                        Tier::SummaryDropped
                    },
                    calls: calls.calls,
                    usage: calls.usage,
                    dropped_groups: dropped,
                });
            }
            Err(e) if too_long(&e) => last_err = Some(e),
            Err(e) => return Err(e),
        }
    }
    // Tier 3: chunks, halved while a chunk is still too long, then merged.
    let mut budget = (model.input_window() / 2).max(256);
    for _ in 0..=MAX_HALVINGS {
        let chunks = chunk(msgs, budget);
        let mut parts = Vec::with_capacity(chunks.len());
        let mut failed = None;
        for (i, c) in chunks.iter().enumerate() {
            match calls
                .call(chunk_prompt(i + 1, chunks.len(), &render_transcript(c)))
                .await
            {
                Ok(t) => parts.push(t),
                Err(e) if too_long(&e) => {
                    failed = Some(e);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(e) = failed {
            last_err = Some(e);
            budget /= 2;
            continue;
        }
        let text = calls.call(merge_prompt(previous, &parts)).await?;
        return Ok(Summary {
            text,
            tier: Tier::SummaryChunked,
            calls: calls.calls,
            usage: calls.usage,
            dropped_groups: 0,
        });
    }
    Err(last_err.unwrap_or(LlmError::PromptTooLong {
        detail: "every summary attempt was too long".into(),
    }))
}

/// Consecutive pieces of at most `budget` rendered tokens (a single
/// message over the budget is a piece of its own).
fn chunk(msgs: &[(u64, Message)], budget: u64) -> Vec<Vec<(u64, Message)>> {
    let mut out: Vec<Vec<(u64, Message)>> = vec![Vec::new()];
    let mut used = 0;
    let mut rendered = String::new();
    for (i, m) in msgs {
        rendered.clear();
        render_message(*i, m, &mut rendered);
        let cost = text_tokens(&rendered);
        if used + cost > budget && out.last().is_some_and(|c| !c.is_empty()) {
            out.push(Vec::new());
            used = 0;
        }
        used += cost;
        if let Some(last) = out.last_mut() {
            last.push((*i, m.clone()));
        }
    }
    out.retain(|c| !c.is_empty());
    out
}

static PATH: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?:~|\.{1,2})?/[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)*|\b[A-Za-z0-9_\-]+(?:/[A-Za-z0-9_.\-]+)*\.[A-Za-z][A-Za-z0-9]{0,7}\b").ok()
});
static IDENT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"https?://[^\s)>\]]+|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b|\b[0-9a-f]{7,40}\b").ok()
});
static CONSTRAINT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(must|never|always|don't|do not|only|prefer|make sure|constraint|confirmed?|important|required?)\b").ok()
});

/// Sentences of the user's own messages that state a rule or preference,
/// and paths, URLs and ids anywhere, in order of appearance.
pub fn pin_candidates(msgs: &[(u64, Message)]) -> Vec<String> {
    let mut out = Vec::new();
    for (_, m) in msgs {
        for b in &m.content {
            let (text, from_user) = match b {
                Block::Text { text } => (text.as_str(), is_user_turn(m)),
                Block::ToolUse { arguments_json, .. } => (arguments_json.as_str(), false),
                _ => continue,
            };
            if from_user && let Some(re) = CONSTRAINT.as_ref() {
                for sentence in text.split_inclusive(['.', '!', '?', '\n']) {
                    let s = sentence.trim();
                    if !s.is_empty() && s.chars().count() <= 300 && re.is_match(s) {
                        out.push(format!("the user said: \"{s}\""));
                    }
                }
            }
            for re in [PATH.as_ref(), IDENT.as_ref()].into_iter().flatten() {
                for m in re.find_iter(text) {
                    let s = m.as_str().trim_end_matches(['.', ',', ':', ';']);
                    if s.len() >= 3
                        && s.len() <= 200
                        && (s.contains('/')
                            || s.contains('.')
                            || s.chars().any(|c| c.is_ascii_digit()))
                    {
                        out.push(s.to_string());
                    }
                }
            }
        }
    }
    out
}

/// A pin that stands for a skill the model loaded: its body goes back into
/// the window (once) instead of the pin's text.
pub const SKILL_PIN: &str = "skill:";

/// The skills loaded (`load_skill` without `path`) in `msgs`, as pins.
pub fn skill_pins(msgs: &[(u64, Message)]) -> Vec<String> {
    let mut out = Vec::new();
    for (_, m) in msgs {
        for b in &m.content {
            if let Block::ToolUse {
                name,
                arguments_json,
                ..
            } = b
                && name == "load_skill"
                && let Ok(args) = serde_json::from_str::<serde_json::Value>(arguments_json)
                && args.get("path").is_none_or(|p| p.is_null())
                && let Some(skill) = args.get("name").and_then(|n| n.as_str())
            {
                let pin = format!("{SKILL_PIN}{skill}");
                if !out.contains(&pin) {
                    out.push(pin);
                }
            }
        }
    }
    out
}

/// Previous pins plus new ones, without duplicates, the newest kept when
/// there are too many; skill pins are kept whatever the count, first.
pub fn merge_pins(previous: &[String], new: Vec<String>) -> Vec<String> {
    let (skills, previous): (Vec<&String>, Vec<&String>) =
        previous.iter().partition(|p| p.starts_with(SKILL_PIN));
    let (new_skills, new): (Vec<String>, Vec<String>) =
        new.into_iter().partition(|p| p.starts_with(SKILL_PIN));
    let mut kept: Vec<String> = Vec::new();
    for p in skills.into_iter().cloned().chain(new_skills) {
        if !kept.contains(&p) {
            kept.push(p);
        }
    }
    let mut out: Vec<String> = Vec::new();
    for p in previous.into_iter().cloned().chain(new) {
        if let Some(pos) = out.iter().position(|q| *q == p) {
            out.remove(pos);
        }
        out.push(p);
    }
    let excess = out.len().saturating_sub(MAX_PINNED);
    out.drain(..excess);
    kept.extend(out);
    kept
}

/// The summary message the model sees.
pub fn summary_text(
    summary: &str,
    from_idx: u64,
    to_idx: u64,
    compactions: u64,
    pins: &[String],
    latest_request: Option<&str>,
) -> String {
    let mut out = format!(
        "[flyto: summary of the earlier conversation (messages #{from_idx}–#{}, compacted {compactions} time{}). \
It is reference material for you, not a new request; the full transcript is kept.]\n\n{summary}\n",
        to_idx.saturating_sub(1),
        if compactions == 1 { "" } else { "s" }
    );
    let missing: Vec<&String> = pins
        .iter()
        .filter(|p| !p.starts_with(SKILL_PIN))
        .filter(|p| {
            let needle = p
                .strip_prefix("the user said: \"")
                .and_then(|s| s.strip_suffix('"'))
                .unwrap_or(p);
            !summary.contains(needle)
        })
        .collect();
    if !missing.is_empty() {
        out.push_str("\n## Kept verbatim from the transcript\n");
        for p in missing {
            out.push_str(&format!("- {p}\n"));
        }
    }
    if let Some(req) = latest_request {
        out.push_str(&format!(
            "\n## The user's latest request (verbatim)\n{req}\n"
        ));
    }
    out
}
