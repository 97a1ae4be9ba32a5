//! Agent sessions as text: a run's events as they stream ([`RunView`]),
//! stored messages (`session_history`, the snapshot of `session_attach`),
//! the session header and the session list.
//!
//! Everything here is pure: it turns its inputs into text for a given mode
//! and the caller writes it. Where it goes: the answer text on stdout, so
//! `flytoctl session_send s1 "..." > answer.md` captures exactly the reply;
//! reasoning, tool calls and results, notices and the end-of-run lines on
//! stderr.

use crate::context_render::{context_line, summary_block};
use crate::format::{age, cost, count, duration, tokens};
use crate::style::{Style, Tone, session_tone};
use crate::table::{Cell, Table};
use flyto_protocol::{BlockView, ExtractionView, MessageView, SessionEvent, SessionView};

/// Lines of a tool result shown by the history.
pub const RESULT_LINES: usize = 20;

/// How a run is shown.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    /// Styling of stderr (everything but the answer text, which is never
    /// styled).
    pub err: Style,
    /// stdout is a terminal: control characters in the model's text, which
    /// could drive the terminal, are dropped.
    pub out_tty: bool,
    /// Show reasoning (dimmed, on stderr).
    pub reasoning: bool,
    /// A usage line (tokens, cost) at the end of each run.
    pub usage: bool,
    /// Mark the start of every run (attach follows several).
    pub runs: bool,
    /// Columns for the one-line tool call and result lines.
    pub width: usize,
    /// This client answers approval requests on stdin (the caller prompts;
    /// the view only words the request accordingly).
    pub approve: bool,
}

impl Mode {
    /// The mode of a terminal on both streams.
    #[cfg(test)]
    pub fn terminal() -> Mode {
        Mode {
            err: Style::colored(),
            out_tty: true,
            reasoning: true,
            usage: true,
            runs: false,
            width: 80,
            approve: false,
        }
    }

    /// The mode of pipes on both streams.
    #[cfg(test)]
    pub fn pipe() -> Mode {
        Mode {
            err: Style::plain(),
            out_tty: false,
            reasoning: false,
            usage: false,
            runs: false,
            width: 80,
            approve: false,
        }
    }
}

/// A piece of output and where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    Out(String),
    Err(String),
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    Cancelled,
    Failed,
    /// Cancelled because flytod is shutting down.
    Interrupted,
}

#[derive(Debug, Default, Clone)]
struct Usage {
    calls: u64,
    input: u64,
    output: u64,
    cache_read: u64,
    cost: f64,
}

/// Turns the events of one or more runs into output chunks. The two streams
/// usually share a terminal, so a line left open on one is ended before the
/// other is written to.
#[derive(Debug)]
pub struct RunView {
    mode: Mode,
    /// stdout's last character is not a newline.
    out_open: bool,
    /// stderr's last character is not a newline (reasoning mid-line).
    err_open: bool,
    usage: Usage,
    model: Option<String>,
    /// The `stop` of the last `Done` event.
    stop: Option<String>,
    chunks: Vec<Chunk>,
    /// The session the events are of, for the commands a note names.
    session: Option<String>,
}

impl RunView {
    pub fn new(mode: Mode) -> RunView {
        RunView {
            mode,
            out_open: false,
            err_open: false,
            usage: Usage::default(),
            model: None,
            stop: None,
            chunks: Vec::new(),
            session: None,
        }
    }

    /// Names the session the next events are of.
    pub fn set_session(&mut self, id: &str) {
        if self.session.as_deref() != Some(id) {
            self.session = Some(id.to_string());
        }
    }

    /// Whether this client answers approval requests.
    pub fn approves(&self) -> bool {
        self.mode.approve
    }

    /// Why the last run that ended with `Done` stopped (`end_turn`,
    /// `compacted`, ...).
    pub fn last_stop(&self) -> Option<&str> {
        self.stop.as_deref()
    }

    /// The output for one event; for the event that ends a run, also how.
    pub fn event(&mut self, event: &SessionEvent) -> (Vec<Chunk>, Option<Outcome>) {
        let mut outcome = None;
        let err = self.mode.err;
        match event {
            SessionEvent::RunStart { run } => {
                self.usage = Usage::default();
                self.model = None;
                if self.mode.runs {
                    self.line(err.paint(&format!("── run {run} ──"), Tone::Dim));
                }
            }
            SessionEvent::LlmStart { model } => self.model = Some(model.clone()),
            SessionEvent::Text { delta } => self.text(delta),
            SessionEvent::Reasoning { delta } => self.reasoning(delta),
            SessionEvent::Restart { reason } => {
                let note = format!("↻ retrying ({reason}); the partial reply above is void");
                self.line(err.paint(&one_line(&note), Tone::Yellow));
            }
            SessionEvent::ToolCall {
                name, arguments, ..
            } => {
                let line = call_line(name, arguments, self.mode.width, err);
                self.line(line);
            }
            SessionEvent::ToolResult {
                preview, is_error, ..
            } => {
                let line = result_line(preview, *is_error, self.mode.width, err);
                self.line(line);
            }
            SessionEvent::LlmEnd {
                input_tokens,
                output_tokens,
                cache_read_tokens,
                cost_usd,
                ..
            } => {
                self.usage.calls += 1;
                self.usage.input += input_tokens;
                self.usage.output += output_tokens;
                self.usage.cache_read += cache_read_tokens;
                self.usage.cost += cost_usd;
            }
            SessionEvent::Notice { message } => {
                self.line(err.paint(&one_line(&format!("note: {message}")), Tone::Dim));
            }
            SessionEvent::Hook {
                name,
                event,
                outcome,
                duration_ms,
            } => {
                let note = format!("hook {name} ({event}): {outcome} in {duration_ms} ms");
                self.line(err.paint(&one_line(&note), Tone::Dim));
            }
            SessionEvent::CompactStarted { tokens, compact_at } => {
                // A manual compaction may start below the threshold.
                let relation = if tokens >= compact_at { "≥" } else { "<" };
                let note = format!(
                    "compacting the context ({} tokens {relation} threshold {})…",
                    count(*tokens),
                    count(*compact_at)
                );
                self.line(err.paint(&note, Tone::Dim));
            }
            SessionEvent::Compacted {
                before_tokens,
                after_tokens,
                tier,
                duration_ms,
            } => {
                let note = format!(
                    "compacted ({}): {} → {} tokens in {}",
                    one_line(tier),
                    count(*before_tokens),
                    count(*after_tokens),
                    duration(*duration_ms)
                );
                self.line(err.paint(&note, Tone::Dim));
            }
            SessionEvent::CompactFailed {
                message,
                breaker_open,
            } => {
                let note = format!("compaction failed: {}", message.trim());
                self.line(err.paint(&one_line(&note), Tone::Yellow));
                if *breaker_open {
                    self.line(err.paint(
                        "the compaction breaker is open: `flytoctl breaker_status`, `flytoctl breaker_reset`",
                        Tone::Yellow,
                    ));
                }
            }
            SessionEvent::Done { stop, message } => {
                self.stop = Some(stop.clone());
                self.close();
                if !message.trim().is_empty() {
                    self.line(err.paint(message.trim_end(), Tone::Yellow));
                }
                self.usage_line();
                outcome = Some(Outcome::Done);
            }
            SessionEvent::Cancelled { message, shutdown } => {
                let text = if message.trim().is_empty() {
                    "cancelled"
                } else {
                    message.trim_end()
                };
                self.line(err.paint(&one_line(text), Tone::Yellow));
                self.usage_line();
                outcome = Some(if *shutdown {
                    Outcome::Interrupted
                } else {
                    Outcome::Cancelled
                });
            }
            SessionEvent::ApprovalRequested {
                approval,
                command,
                rule,
                timeout_ms,
            } => {
                let ask = format!(
                    "approval needed: `{}` ({})",
                    one_line(command),
                    one_line(rule)
                );
                self.line(err.paint(&ask, Tone::Yellow));
                if !self.mode.approve {
                    let how = format!(
                        "waiting up to {} for `flytoctl session_approve {} {approval} --allow` (or --deny)",
                        duration(*timeout_ms),
                        self.session.as_deref().unwrap_or("<session>")
                    );
                    self.line(err.paint(&how, Tone::Dim));
                }
            }
            SessionEvent::ApprovalResolved { approval, outcome } => {
                let note = format!("approval {approval}: {}", one_line(outcome));
                self.line(err.paint(&note, Tone::Dim));
            }
            SessionEvent::Error { message } => {
                self.line(err.paint(&format!("error: {}", message.trim_end()), Tone::Red));
                self.usage_line();
                outcome = Some(Outcome::Failed);
            }
        }
        (std::mem::take(&mut self.chunks), outcome)
    }

    /// Ends a line left open (the stream stopped without an end event).
    pub fn finish(&mut self) -> Vec<Chunk> {
        self.close();
        std::mem::take(&mut self.chunks)
    }

    fn text(&mut self, delta: &str) {
        let delta = if self.mode.out_tty {
            sanitize(delta)
        } else {
            delta.to_string()
        };
        if delta.is_empty() {
            return;
        }
        if self.err_open {
            self.chunks.push(Chunk::Err("\n".into()));
            self.err_open = false;
        }
        self.out_open = !delta.ends_with('\n');
        self.chunks.push(Chunk::Out(delta));
    }

    fn reasoning(&mut self, delta: &str) {
        if !self.mode.reasoning {
            return;
        }
        let delta = sanitize(delta);
        if delta.is_empty() {
            return;
        }
        if self.out_open {
            self.chunks.push(Chunk::Out("\n".into()));
            self.out_open = false;
        }
        self.err_open = !delta.ends_with('\n');
        self.chunks
            .push(Chunk::Err(self.mode.err.paint(&delta, Tone::Dim)));
    }

    /// Ends the open lines of both streams.
    fn close(&mut self) {
        if self.out_open {
            self.chunks.push(Chunk::Out("\n".into()));
            self.out_open = false;
        }
        if self.err_open {
            self.chunks.push(Chunk::Err("\n".into()));
            self.err_open = false;
        }
    }

    /// A whole line on stderr.
    fn line(&mut self, text: String) {
        self.close();
        self.chunks.push(Chunk::Err(format!("{text}\n")));
    }

    fn usage_line(&mut self) {
        if self.mode.usage && self.usage.calls > 0 {
            let text = usage_text(&self.usage, self.model.as_deref());
            self.line(self.mode.err.paint(&text, Tone::Dim));
        }
    }
}

/// `model · 12.3k in (8.0k cached) · 456 out · $0.0123 · 3 calls`.
fn usage_text(u: &Usage, model: Option<&str>) -> String {
    let mut parts = Vec::new();
    if let Some(model) = model {
        parts.push(model.to_string());
    }
    let mut input = format!("{} in", tokens(u.input));
    if u.cache_read > 0 {
        input.push_str(&format!(" ({} cached)", tokens(u.cache_read)));
    }
    parts.push(input);
    parts.push(format!("{} out", tokens(u.output)));
    parts.push(cost(u.cost));
    if u.calls > 1 {
        parts.push(format!("{} calls", u.calls));
    }
    parts.join(" · ")
}

/// `⏺ bash {"command":"ls"}` on one line of at most `width` columns.
pub fn call_line(name: &str, arguments: &str, width: usize, style: Style) -> String {
    let name = one_line(name);
    let room = width.saturating_sub(3 + name.chars().count()).max(20);
    let args = truncate(&one_line(&minify_json(arguments)), room);
    let mut line = format!("⏺ {}", style.paint(&name, Tone::Bold));
    if !args.is_empty() {
        line.push(' ');
        line.push_str(&args);
    }
    line
}

/// `  ⎿ ok: <first line>` or `  ⎿ error: <first line>`, one line; ` …`
/// when the preview has more.
pub fn result_line(preview: &str, is_error: bool, width: usize, style: Style) -> String {
    let (label, tone) = if is_error {
        ("error", Tone::Red)
    } else {
        ("ok", Tone::Dim)
    };
    let mut lines = preview.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next().map(|l| one_line(l.trim_end()));
    let more = lines.next().is_some();
    let Some(first) = first else {
        return format!("  ⎿ {}", style.paint(label, tone));
    };
    let room = width.saturating_sub(6 + label.len()).max(20);
    let mut text = truncate(&first, room);
    if more && !text.ends_with('…') {
        text.push_str(" …");
    }
    if is_error {
        format!("  ⎿ {}: {text}", style.paint(label, tone))
    } else {
        format!("  ⎿ {}", style.paint(&format!("{label}: {text}"), tone))
    }
}

/// JSON text without the whitespace between tokens (strings untouched, key
/// order kept). Not JSON: returned as is.
pub fn minify_json(text: &str) -> String {
    if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() {
        return text.trim().to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !c.is_whitespace() {
            out.push(c);
        }
    }
    out
}

/// Control characters (newlines included) become spaces.
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Escape sequences from a model must not drive the terminal.
pub use crate::sanitize::sanitize;

/// At most `max` characters, the last one `…` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `session s3 "work" idle · model main · 12 messages · 1.2k in / 340 out ·
/// $0.0123 · updated 5m ago`, then the workdir, the error, the context
/// budget and the window.
/// One line per background memory extraction: when, over which messages,
/// what it cost and what it saved.
pub fn extractions(xs: &[ExtractionView], now_ms: u64, style: Style) -> String {
    let mut out = String::new();
    for x in xs {
        let mut parts = vec![
            format!(
                "messages [{}]..[{}]",
                x.from_idx,
                x.to_idx.saturating_sub(1)
            ),
            format!(
                "{} model call{}",
                x.model_calls,
                if x.model_calls == 1 { "" } else { "s" }
            ),
            format!(
                "{} in / {} out",
                tokens(x.input_tokens),
                tokens(x.output_tokens)
            ),
            cost(x.cost_usd),
        ];
        parts.push(if x.saved.is_empty() {
            "saved nothing".to_string()
        } else {
            format!("saved {}", x.saved.join(", "))
        });
        if !x.forgot.is_empty() {
            parts.push(format!("forgot {}", x.forgot.join(", ")));
        }
        if x.outcome != "done" {
            parts.push(one_line(&x.outcome));
        }
        out.push_str(&format!(
            "{} {} · {}\n",
            style.paint("memory extraction", Tone::Dim),
            age(now_ms, x.at_ms),
            parts.join(" · ")
        ));
    }
    out
}

pub fn header(s: &SessionView, now_ms: u64, style: Style) -> String {
    let mut first = format!("session {}", style.paint(&s.id, Tone::Bold));
    if let Some(name) = &s.name {
        first.push_str(&format!(" {name:?}"));
    }
    first.push(' ');
    first.push_str(&style.paint(&s.status, session_tone(&s.status)));
    let parts = [
        format!("model {}", s.model),
        format!(
            "{} message{}",
            s.messages,
            if s.messages == 1 { "" } else { "s" }
        ),
        format!(
            "{} in / {} out",
            tokens(s.input_tokens),
            tokens(s.output_tokens)
        ),
        cost(s.cost_usd),
        format!("updated {}", age(now_ms, s.updated_ms)),
    ];
    for part in parts {
        first.push_str(" · ");
        first.push_str(&part);
    }
    let mut out = format!("{first}\nworkdir {}\n", s.workdir);
    if let Some(parent) = &s.parent {
        out.push_str(&format!(
            "sub-agent of {parent} (`flytoctl session_history {parent}`)\n"
        ));
    }
    if let Some(error) = &s.error {
        out.push_str(&format!(
            "{} {}\n",
            style.paint("error:", Tone::Red),
            one_line(error)
        ));
    }
    out.push_str(&context_line(&s.context, style));
    out.push('\n');
    if let Some(note) = window_note(s) {
        out.push_str(&style.paint(&note, Tone::Dim));
        out.push('\n');
    }
    out
}

/// Which stored messages the model does not see; None when it sees all.
fn window_note(s: &SessionView) -> Option<String> {
    let base = s.context_base_idx;
    let (head, summary_from) = (s.context.head_from_idx, s.context.summary_from_idx);
    if base == 0 {
        return None;
    }
    if head < summary_from {
        return Some(format!(
            "the model sees messages [{head}]..[{}], the summary and [{base}] on; the others are outside its window",
            summary_from - 1
        ));
    }
    Some(format!(
        "messages before [{base}] are outside the model's window"
    ))
}

/// How stored messages are shown.
#[derive(Debug, Clone, Copy)]
pub struct HistoryMode {
    pub style: Style,
    /// The output is a terminal: control characters are dropped.
    pub tty: bool,
    /// Show thinking blocks (dimmed).
    pub reasoning: bool,
    pub width: usize,
    /// Lines of each tool result.
    pub result_lines: usize,
}

/// The model-visible window of a history: the protected head, the summary
/// the model sees in place of the compacted messages after it, and the
/// messages from `base` on.
#[derive(Debug, Clone, Copy)]
pub struct Window<'a> {
    /// `context_base_idx`: the model sees messages from here on.
    pub base: u64,
    pub summary: Option<&'a str>,
    /// The protected head `[head_from, summary_from)`, which the model still
    /// sees before the summary.
    pub head_from: u64,
    /// The first message the summary covers.
    pub summary_from: u64,
}

impl<'a> Window<'a> {
    pub fn of(session: &SessionView, summary: Option<&'a str>) -> Window<'a> {
        Window {
            base: session.context_base_idx,
            summary,
            head_from: session.context.head_from_idx,
            summary_from: session.context.summary_from_idx,
        }
    }

    /// The model sees message `idx`: it is in the head or from `base` on.
    fn sees(&self, idx: u64) -> bool {
        idx >= self.base || (self.head_from..self.summary_from).contains(&idx)
    }
}

/// Every message as `[idx] role:` and its blocks, a blank line between
/// messages; those the model does not see are marked, and the summary
/// stands where the window's tail starts (when that place is among `msgs`).
pub fn messages(msgs: &[MessageView], window: &Window<'_>, mode: &HistoryMode) -> String {
    let mut parts: Vec<String> = Vec::with_capacity(msgs.len() + 1);
    // Only where the window's start is in view: a snapshot of the last few
    // messages would otherwise show it in the wrong place.
    let mut summary = window
        .summary
        .filter(|_| msgs.first().is_some_and(|m| m.idx <= window.base));
    for m in msgs {
        if m.idx >= window.base
            && let Some(text) = summary.take()
        {
            parts.push(summary_part(text, window, mode));
        }
        parts.push(message(m, !window.sees(m.idx), mode));
    }
    if let Some(text) = summary {
        parts.push(summary_part(text, window, mode));
    }
    parts.join("\n")
}

fn summary_part(text: &str, window: &Window<'_>, mode: &HistoryMode) -> String {
    summary_block(text, window.summary_from, window.base, mode.style, mode.tty)
}

/// What a message is, for its heading: a user message that only answers
/// tool calls holds tool results, not words of the user.
fn label(m: &MessageView) -> &str {
    let results_only = !m.blocks.is_empty()
        && m.blocks
            .iter()
            .all(|b| matches!(b, BlockView::ToolResult { .. }));
    if m.role == "user" && results_only {
        "tool results"
    } else {
        &m.role
    }
}

/// `2024-05-01 14:02:11Z`; empty for messages stored without a time.
pub fn message_time(ms: u64) -> String {
    if ms == 0 {
        return String::new();
    }
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .unwrap_or_default()
        .format("%Y-%m-%d %H:%M:%SZ")
        .to_string()
}

fn message(m: &MessageView, outside: bool, mode: &HistoryMode) -> String {
    let style = mode.style;
    let mut out = style.paint(&format!("[{}]", m.idx), Tone::Dim);
    let time = message_time(m.created_ms);
    if !time.is_empty() {
        out.push(' ');
        out.push_str(&style.paint(&time, Tone::Dim));
    }
    out.push(' ');
    out.push_str(&style.paint(&format!("{}:", label(m)), Tone::Bold));
    if outside {
        out.push(' ');
        out.push_str(&style.paint("(outside the model's window)", Tone::Dim));
    }
    out.push('\n');
    let clean = |t: &str| if mode.tty { sanitize(t) } else { t.to_string() };
    for block in &m.blocks {
        match block {
            BlockView::Text { text } => {
                let text = clean(text);
                let text = text.trim_end_matches(['\n', '\r']);
                if !text.is_empty() {
                    out.push_str(text);
                    out.push('\n');
                }
            }
            BlockView::Thinking { text } if mode.reasoning => {
                let text = sanitize(text);
                let text = text.trim_end_matches(['\n', '\r']);
                if !text.is_empty() {
                    out.push_str(&style.paint(text, Tone::Dim));
                    out.push('\n');
                }
            }
            BlockView::Thinking { .. } => {}
            BlockView::ToolUse {
                name, arguments, ..
            } => {
                out.push_str(&call_line(name, arguments, mode.width, style));
                out.push('\n');
            }
            BlockView::ToolResult {
                content, is_error, ..
            } => out.push_str(&result_block(&clean(content), *is_error, mode)),
        }
    }
    out
}

/// `  ⎿ ok: <line 1>`, the next lines indented under it, at most
/// `result_lines` of them, then how many were left out.
fn result_block(content: &str, is_error: bool, mode: &HistoryMode) -> String {
    let style = mode.style;
    let label = if is_error {
        style.paint("error", Tone::Red)
    } else {
        style.paint("ok", Tone::Green)
    };
    let content = content.trim_end_matches(['\n', '\r']);
    let lines: Vec<&str> = content.lines().collect();
    let Some((first, rest)) = lines.split_first() else {
        return format!("  ⎿ {label}\n");
    };
    let shown = mode.result_lines.max(1);
    let mut out = format!("  ⎿ {label}: {}\n", first.trim_end());
    for line in rest.iter().take(shown - 1) {
        out.push_str("    ");
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let hidden = lines.len().saturating_sub(shown);
    if hidden > 0 {
        let note = format!("… {hidden} more line{}", if hidden == 1 { "" } else { "s" });
        out.push_str(&format!("    {}\n", style.paint(&note, Tone::Dim)));
    }
    out
}

/// The `session_list` table.
pub fn session_list(sessions: &[SessionView], now_ms: u64, style: Style) -> String {
    let mut table = Table::new(&[
        "ID",
        "NAME",
        "STATUS",
        "MSGS",
        "TOKENS IN/OUT",
        "COST",
        "WORKDIR",
        "UPDATED",
    ]);
    for s in sessions {
        table.row(vec![
            Cell::plain(&s.id),
            Cell::plain(s.name.as_deref().unwrap_or("-")),
            Cell::toned(&s.status, session_tone(&s.status)),
            Cell::plain(s.messages.to_string()),
            Cell::plain(format!(
                "{}/{}",
                tokens(s.input_tokens),
                tokens(s.output_tokens)
            )),
            Cell::plain(cost(s.cost_usd)),
            Cell::plain(&s.workdir),
            Cell::plain(age(now_ms, s.updated_ms)),
        ]);
    }
    table.render(style)
}

/// What `session_cancel` reports, from the session as the daemon answered.
pub fn cancelled(s: &SessionView) -> String {
    match s.status.as_str() {
        "running" | "cancelling" => format!("cancelled {}", s.id),
        _ => format!("{} was not running", s.id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mode: Mode, events: &[SessionEvent]) -> (String, String, Option<Outcome>) {
        let mut view = RunView::new(mode);
        let (mut out, mut err, mut end) = (String::new(), String::new(), None);
        for ev in events {
            let (chunks, outcome) = view.event(ev);
            end = end.or(outcome);
            for c in chunks {
                match c {
                    Chunk::Out(s) => out.push_str(&s),
                    Chunk::Err(s) => err.push_str(&s),
                }
            }
        }
        (out, err, end)
    }

    fn text(d: &str) -> SessionEvent {
        SessionEvent::Text { delta: d.into() }
    }

    fn llm_end(input: u64, output: u64, cost_usd: f64) -> SessionEvent {
        SessionEvent::LlmEnd {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            cost_usd,
        }
    }

    fn sample_run() -> Vec<SessionEvent> {
        vec![
            SessionEvent::RunStart { run: 1 },
            SessionEvent::LlmStart {
                model: "deepseek-chat".into(),
            },
            SessionEvent::Reasoning {
                delta: "think".into(),
            },
            text("Let me "),
            text("look."),
            SessionEvent::ToolCall {
                id: "c1".into(),
                name: "bash".into(),
                arguments: "{\n  \"command\": \"ls -l\"\n}".into(),
            },
            llm_end(1_000, 20, 0.001),
            SessionEvent::ToolResult {
                id: "c1".into(),
                name: "bash".into(),
                preview: "exit 0\nCargo.toml\nsrc\n".into(),
                is_error: false,
            },
            SessionEvent::LlmStart {
                model: "deepseek-chat".into(),
            },
            text("Two files."),
            llm_end(1_200, 5, 0.0015),
            SessionEvent::Done {
                stop: "end_turn".into(),
                message: String::new(),
            },
        ]
    }

    #[test]
    fn a_pipe_gets_the_answer_on_stdout_and_compact_tools_on_stderr() {
        let (out, err, end) = run(Mode::pipe(), &sample_run());
        assert_eq!(out, "Let me look.\nTwo files.\n");
        assert_eq!(
            err, "⏺ bash {\"command\":\"ls -l\"}\n  ⎿ ok: exit 0 …\n",
            "no reasoning, no usage"
        );
        assert_eq!(end, Some(Outcome::Done));
    }

    #[test]
    fn a_terminal_gets_dimmed_reasoning_and_usage() {
        let (out, err, _) = run(Mode::terminal(), &sample_run());
        assert_eq!(out, "Let me look.\nTwo files.\n");
        assert!(
            err.starts_with("\x1b[2mthink\x1b[0m\n⏺ \x1b[1mbash\x1b[0m"),
            "{err:?}"
        );
        assert!(
            err.ends_with("\x1b[2mdeepseek-chat · 2.2k in · 25 out · $0.0025 · 2 calls\x1b[0m\n"),
            "{err:?}"
        );
    }

    #[test]
    fn reasoning_can_be_asked_for_on_a_pipe() {
        let mode = Mode {
            reasoning: true,
            ..Mode::pipe()
        };
        let (out, err, _) = run(
            mode,
            &[SessionEvent::Reasoning { delta: "hm".into() }, text("yes")],
        );
        assert_eq!(err, "hm\n");
        assert_eq!(out, "yes");
    }

    #[test]
    fn restarts_notices_and_endings() {
        let (out, err, end) = run(
            Mode::pipe(),
            &[
                text("partial"),
                SessionEvent::Restart {
                    reason: "stream cut".into(),
                },
                SessionEvent::Notice {
                    message: "falling back to fast".into(),
                },
                text("whole\n"),
                SessionEvent::Done {
                    stop: "max_iterations".into(),
                    message: "stopped after 50 steps; send `continue` to go on".into(),
                },
            ],
        );
        assert_eq!(out, "partial\nwhole\n");
        assert_eq!(
            err,
            "↻ retrying (stream cut); the partial reply above is void\n\
             note: falling back to fast\n\
             stopped after 50 steps; send `continue` to go on\n"
        );
        assert_eq!(end, Some(Outcome::Done));

        let (out, err, end) = run(
            Mode::pipe(),
            &[
                text("half"),
                SessionEvent::Cancelled {
                    message: "cancelled by user; send a message to continue".into(),
                    shutdown: false,
                },
            ],
        );
        assert_eq!(out, "half\n");
        assert_eq!(err, "cancelled by user; send a message to continue\n");
        assert_eq!(end, Some(Outcome::Cancelled));

        let (_, err, end) = run(
            Mode::pipe(),
            &[SessionEvent::Error {
                message: "auth failed".into(),
            }],
        );
        assert_eq!(err, "error: auth failed\n");
        assert_eq!(end, Some(Outcome::Failed));
    }

    #[test]
    fn attach_marks_runs_and_resets_usage() {
        let mode = Mode {
            runs: true,
            usage: true,
            ..Mode::pipe()
        };
        let done = SessionEvent::Done {
            stop: "end_turn".into(),
            message: String::new(),
        };
        let (_, err, _) = run(
            mode,
            &[
                SessionEvent::RunStart { run: 4 },
                llm_end(10, 1, 0.0),
                done.clone(),
                SessionEvent::RunStart { run: 5 },
                llm_end(20, 2, 0.0),
                done,
            ],
        );
        assert_eq!(
            err,
            "── run 4 ──\n10 in · 1 out · $0\n── run 5 ──\n20 in · 2 out · $0\n"
        );
    }

    #[test]
    fn terminal_text_loses_escape_sequences() {
        let (out, _, _) = run(Mode::terminal(), &[text("a\x1b[2Jb\tc\n")]);
        assert_eq!(out, "ab\tc\n");
        let (out, _, _) = run(Mode::pipe(), &[text("a\x1b[2Jb")]);
        assert_eq!(out, "a\x1b[2Jb");
    }

    #[test]
    fn call_and_result_lines_fit_one_line() {
        let plain = Style::plain();
        assert_eq!(
            call_line("read", r#"{"path": "a b.rs", "range": [1, 2]}"#, 80, plain),
            r#"⏺ read {"path":"a b.rs","range":[1,2]}"#
        );
        assert_eq!(
            call_line("x", "not json\nat all", 80, plain),
            "⏺ x not json at all"
        );
        assert_eq!(call_line("noargs", "{}", 80, plain), "⏺ noargs {}");
        let long = format!(r#"{{"command":"{}"}}"#, "y".repeat(200));
        let line = call_line("bash", &long, 40, plain);
        assert_eq!(line.chars().count(), 40, "{line}");
        assert!(line.ends_with('…'));
        assert_eq!(result_line("", false, 80, plain), "  ⎿ ok");
        assert_eq!(
            result_line("\nno such file\nmore", true, 80, plain),
            "  ⎿ error: no such file …"
        );
        assert_eq!(minify_json(r#"{ "a" : "x  \" y" }"#), r#"{"a":"x  \" y"}"#);
    }

    fn session() -> SessionView {
        SessionView {
            parent: None,
            id: "s3".into(),
            name: Some("work".into()),
            workdir: "/srv/proj".into(),
            model: "main".into(),
            status: "error".into(),
            error: Some("interrupted".into()),
            messages: 4,
            context_base_idx: 1,
            input_tokens: 12_345,
            output_tokens: 678,
            cost_usd: 0.0123,
            created_ms: 0,
            updated_ms: 0,
            chain: "c1".into(),
            depth: 0,
            context: Default::default(),
        }
    }

    #[test]
    fn history_marks_the_window_and_bounds_results() {
        let msgs = vec![
            MessageView {
                idx: 0,
                role: "user".into(),
                blocks: vec![BlockView::Text {
                    text: "list files\n".into(),
                }],
                created_ms: 0,
            },
            MessageView {
                idx: 1,
                role: "assistant".into(),
                blocks: vec![
                    BlockView::Thinking {
                        text: "hidden".into(),
                    },
                    BlockView::Text {
                        text: "Sure.".into(),
                    },
                    BlockView::ToolUse {
                        id: "c1".into(),
                        name: "bash".into(),
                        arguments: r#"{"command": "ls"}"#.into(),
                    },
                ],
                created_ms: 0,
            },
            MessageView {
                idx: 2,
                role: "user".into(),
                blocks: vec![
                    BlockView::ToolResult {
                        call_id: "c1".into(),
                        content: (1..=5).map(|i| format!("f{i}\n")).collect(),
                        is_error: false,
                    },
                    BlockView::ToolResult {
                        call_id: "c2".into(),
                        content: "denied".into(),
                        is_error: true,
                    },
                ],
                created_ms: 0,
            },
        ];
        let mode = plain_history();
        let expected = "\
[0] user: (outside the model's window)
list files

[1] assistant:
Sure.
⏺ bash {\"command\":\"ls\"}

[2] tool results:
  ⎿ ok: f1
    f2
    f3
    … 2 more lines
  ⎿ error: denied
";
        // Without a summary there is no head: the window is `base` on.
        let window = |base| Window {
            base,
            summary: None,
            head_from: base,
            summary_from: base,
        };
        assert_eq!(messages(&msgs, &window(1), &mode), expected);
        let with_thinking = HistoryMode {
            reasoning: true,
            ..mode
        };
        assert!(
            messages(&msgs, &window(0), &with_thinking).contains("[1] assistant:\nhidden\nSure.\n")
        );
    }

    /// History into a pipe, three lines of each tool result.
    fn plain_history() -> HistoryMode {
        HistoryMode {
            style: Style::plain(),
            tty: false,
            reasoning: false,
            width: 80,
            result_lines: 3,
        }
    }

    fn said(idx: u64, role: &str, text: &str) -> MessageView {
        MessageView {
            idx,
            role: role.into(),
            blocks: vec![BlockView::Text { text: text.into() }],
            created_ms: 0,
        }
    }

    #[test]
    fn the_summary_stands_where_the_window_starts() {
        let mode = plain_history();
        let msgs = vec![
            said(0, "user", "goal"),
            said(1, "user", "old"),
            said(2, "assistant", "older reply"),
            said(3, "user", "now"),
        ];
        let window = Window {
            base: 3,
            summary: Some("Goal: keep /srv/a.rs\n"),
            head_from: 0,
            summary_from: 1,
        };
        assert_eq!(
            messages(&msgs, &window, &mode),
            "\
[0] user:
goal

[1] user: (outside the model's window)
old

[2] assistant: (outside the model's window)
older reply

── summary of messages [1]..[2] (what the model sees instead of them) ──
Goal: keep /srv/a.rs

[3] user:
now
"
        );
        // A snapshot that starts after the window's start leaves it out.
        assert!(!messages(&msgs[3..], &Window { base: 2, ..window }, &mode).contains("summary"));
        // A snapshot that starts right at it shows it first.
        assert!(
            messages(&msgs[3..], &window, &mode).starts_with("── summary of messages [1]..[2]")
        );
        // Every message before the window: the summary comes last.
        assert!(
            messages(&msgs, &Window { base: 4, ..window }, &mode)
                .ends_with("older reply\n\n[3] user: (outside the model's window)\nnow\n\n── summary of messages [1]..[3] (what the model sees instead of them) ──\nGoal: keep /srv/a.rs\n")
        );
    }

    #[test]
    fn the_protected_head_is_inside_the_window() {
        let mode = plain_history();
        // A reset moved the window to [1]; a compaction then kept [1]..[2]
        // as the head and summarised [3]..[4].
        let msgs = vec![
            said(0, "assistant", "before the reset"),
            said(1, "user", "goal"),
            said(2, "assistant", "ok"),
            said(3, "user", "old"),
            said(4, "assistant", "older reply"),
            said(5, "user", "now"),
        ];
        let window = Window {
            base: 5,
            summary: Some("Goal: keep /srv/a.rs"),
            head_from: 1,
            summary_from: 3,
        };
        let out = messages(&msgs, &window, &mode);
        let marked: Vec<&str> = out
            .lines()
            .filter(|l| l.ends_with("(outside the model's window)"))
            .collect();
        assert_eq!(
            marked,
            [
                "[0] assistant: (outside the model's window)",
                "[3] user: (outside the model's window)",
                "[4] assistant: (outside the model's window)",
            ],
            "{out}"
        );
        assert!(
            out.contains("\n[1] user:\ngoal\n\n[2] assistant:\nok\n"),
            "{out}"
        );
        assert!(
            out.ends_with("older reply\n\n── summary of messages [3]..[4] (what the model sees instead of them) ──\nGoal: keep /srv/a.rs\n\n[5] user:\nnow\n"),
            "{out}"
        );
        // The header says which messages the model still sees.
        let s = SessionView {
            parent: None,
            context_base_idx: 5,
            context: flyto_protocol::ContextView {
                head_from_idx: 1,
                summary_from_idx: 3,
                has_summary: true,
                ..Default::default()
            },
            ..session()
        };
        assert!(
            header(&s, 0, Style::plain()).ends_with(
                "\nthe model sees messages [1]..[2], the summary and [5] on; the others are outside its window\n"
            ),
            "{}",
            header(&s, 0, Style::plain())
        );
    }

    #[test]
    fn compaction_events() {
        let (out, err, end) = run(
            Mode::pipe(),
            &[
                SessionEvent::RunStart { run: 2 },
                SessionEvent::CompactStarted {
                    tokens: 18_200,
                    compact_at: 17_600,
                },
                SessionEvent::Compacted {
                    before_tokens: 18_200,
                    after_tokens: 3_100,
                    tier: "summary".into(),
                    duration_ms: 1_234,
                },
                SessionEvent::Done {
                    stop: "compacted".into(),
                    message: String::new(),
                },
            ],
        );
        assert_eq!(out, "");
        assert_eq!(
            err,
            "compacting the context (18,200 tokens ≥ threshold 17,600)…\n\
             compacted (summary): 18,200 → 3,100 tokens in 1.2s\n"
        );
        assert_eq!(end, Some(Outcome::Done));

        let failed = |breaker_open| {
            let mut view = RunView::new(Mode::terminal());
            let (chunks, _) = view.event(&SessionEvent::CompactFailed {
                message: "the summary call failed:\nHTTP 500".into(),
                breaker_open,
            });
            let (_, end) = view.event(&SessionEvent::Done {
                stop: "compact_failed".into(),
                message: String::new(),
            });
            assert_eq!(end, Some(Outcome::Done));
            assert_eq!(view.last_stop(), Some("compact_failed"));
            chunks
        };
        assert_eq!(
            failed(false),
            vec![Chunk::Err(
                "\x1b[33mcompaction failed: the summary call failed: HTTP 500\x1b[0m\n".into()
            )]
        );
        assert_eq!(
            failed(true),
            vec![
                Chunk::Err(
                    "\x1b[33mcompaction failed: the summary call failed: HTTP 500\x1b[0m\n".into()
                ),
                Chunk::Err(
                    "\x1b[33mthe compaction breaker is open: `flytoctl breaker_status`, `flytoctl breaker_reset`\x1b[0m\n"
                        .into()
                ),
            ]
        );
    }

    #[test]
    fn header_list_and_cancel_lines() {
        let s = session();
        assert_eq!(
            header(&s, 300_000, Style::plain()),
            "session s3 \"work\" error · model main · 4 messages · 12.3k in / 678 out · $0.0123 · updated 5m ago\n\
             workdir /srv/proj\n\
             error: interrupted\n\
             context: 0 tokens (model unknown)\n\
             messages before [1] are outside the model's window\n"
        );
        assert_eq!(
            session_list(std::slice::from_ref(&s), 300_000, Style::plain()),
            "ID  NAME  STATUS  MSGS  TOKENS IN/OUT  COST     WORKDIR    UPDATED\n\
             s3  work  error   4     12.3k/678      $0.0123  /srv/proj  5m ago\n"
        );
        assert_eq!(cancelled(&s), "s3 was not running");
        let running = SessionView {
            parent: None,
            status: "running".into(),
            ..s
        };
        assert_eq!(cancelled(&running), "cancelled s3");
    }
}
