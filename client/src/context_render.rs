//! A session's context budget and compaction as text: the `context:` line,
//! the marker of a compaction summary in the history, what `session_reset`
//! and `session_model` report, the `breaker_status` table and the context
//! lines of `stats`. Pure functions of their inputs, like `session_render`.

use crate::format::{count, until};
use crate::session_render::{one_line, sanitize, truncate};
use crate::style::{Style, Tone};
use crate::table::{Cell, Table};
use flyto_protocol::{BreakerView, ContextView, SessionContext, SessionView};

/// Characters of a breaker's last error in the table.
const ERROR_CHARS: usize = 60;

/// `context: 18,200 tokens (1,300 estimated) · compacts at 97,000 · warns at
/// 90,000 · effective window 110,000 of 128,000 · 2 compactions`, or
/// `context: 18,200 tokens (model unknown)` without a known window. The
/// count turns yellow once it reaches the warning threshold.
pub fn context_line(c: &ContextView, style: Style) -> String {
    let mut tokens = format!("{} tokens", count(c.tokens));
    if c.context_window == 0 {
        let mut line = format!("context: {tokens} (model unknown)");
        push_compactions(&mut line, c.compactions);
        return line;
    }
    if c.warn_at > 0 && c.tokens >= c.warn_at {
        tokens = style.paint(&tokens, Tone::Yellow);
    }
    let mut line = format!("context: {tokens}");
    if c.estimated > 0 {
        line.push_str(&format!(" ({} estimated)", count(c.estimated)));
    }
    line.push_str(&format!(
        " · compacts at {} · warns at {} · effective window {} of {}",
        count(c.compact_at),
        count(c.warn_at),
        count(c.effective_window),
        count(c.context_window)
    ));
    push_compactions(&mut line, c.compactions);
    line
}

fn push_compactions(line: &mut String, n: u64) {
    if n > 0 {
        line.push_str(&format!(
            " · {} compaction{}",
            count(n),
            if n == 1 { "" } else { "s" }
        ));
    }
}

/// `summary of messages [2]..[11] (what the model sees instead of them)`:
/// the summary covers `from..base`.
pub fn summary_label(from: u64, base: u64) -> String {
    let range = match base.checked_sub(1) {
        Some(last) if from < last => format!("summary of messages [{from}]..[{last}]"),
        Some(last) if from == last => format!("summary of message [{from}]"),
        // A range the daemon should not send; still say where it stands.
        _ => return format!("summary (what the model sees before [{base}])"),
    };
    format!("{range} (what the model sees instead of them)")
}

/// The summary as the history shows it: the marked label, then its text,
/// both dimmed.
pub fn summary_block(text: &str, from: u64, base: u64, style: Style, tty: bool) -> String {
    let label = format!("── {} ──", summary_label(from, base));
    let mut out = format!("{}\n", style.paint(&label, Tone::Dim));
    let text = if tty {
        sanitize(text)
    } else {
        text.to_string()
    };
    let text = text.trim_end_matches(['\n', '\r']);
    if !text.is_empty() {
        out.push_str(&style.paint(text, Tone::Dim));
        out.push('\n');
    }
    out
}

/// What `session_reset` reports: `s3: the model now sees messages from [12]
/// on (soft reset), 1,234 tokens; history keeps all 40 messages`. The figure
/// is the new window (system prompt and tools included), what the next
/// model call will be sent.
pub fn reset_line(s: &SessionView, soft: bool) -> String {
    let kind = if soft { "soft reset" } else { "hard reset" };
    let window = if s.context_base_idx >= s.messages {
        format!("the model starts from an empty context ({kind})")
    } else {
        format!(
            "the model now sees messages from [{}] on ({kind})",
            s.context_base_idx
        )
    };
    let history = match s.messages {
        0 => "history is empty".to_string(),
        1 => "history keeps its 1 message".to_string(),
        n => format!("history keeps all {} messages", count(n)),
    };
    format!(
        "{}: {window}, {} tokens; {history}",
        s.id,
        count(s.context.tokens)
    )
}

/// What `session_model` reports: the model, the context line, and whether
/// the switch started a compaction.
pub fn model_lines(s: &SessionView, style: Style) -> String {
    let mut out = format!(
        "{}: model {}\n{}\n",
        s.id,
        s.model,
        context_line(&s.context, style)
    );
    if s.status == "running" {
        let note = format!(
            "the context is over the new model's compaction threshold: compacting now (follow with `flytoctl session_attach {}`)",
            s.id
        );
        out.push_str(&style.paint(&note, Tone::Yellow));
        out.push('\n');
    }
    out
}

fn breaker_tone(state: &str) -> Tone {
    match state {
        "open" => Tone::Red,
        "half_open" => Tone::Yellow,
        _ => Tone::Plain,
    }
}

/// The `breaker_status` table. RESETS says when an open breaker closes by
/// itself.
pub fn breaker_table(breakers: &[BreakerView], now_ms: u64, style: Style) -> String {
    let mut table = Table::new(&[
        "PROJECT",
        "STATE",
        "FAILURES",
        "RESETS",
        "LAST ERROR",
        "WORKDIR",
    ]);
    for b in breakers {
        let resets = match b.reset_at_ms {
            Some(at) if b.state != "closed" => until(now_ms, at),
            _ => "-".to_string(),
        };
        let error = b
            .last_error
            .as_deref()
            .map(|e| truncate(one_line(e).trim(), ERROR_CHARS))
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| "-".to_string());
        table.row(vec![
            Cell::plain(&b.project),
            Cell::toned(&b.state, breaker_tone(&b.state)),
            Cell::plain(b.failures.to_string()),
            Cell::plain(resets),
            Cell::plain(error),
            Cell::plain(&b.workdir),
        ]);
    }
    table.render(style)
}

/// The `stats` lines of the fullest contexts: `  s3: 18,200 / 97,000 tokens
/// before compaction`.
pub fn stats_contexts(contexts: &[SessionContext]) -> String {
    let mut out = String::new();
    for SessionContext { session, context } in contexts {
        let line = if context.context_window == 0 || context.compact_at == 0 {
            format!(
                "  {session}: {} tokens (model unknown)",
                count(context.tokens)
            )
        } else {
            format!(
                "  {session}: {} / {} tokens before compaction",
                count(context.tokens),
                count(context.compact_at)
            )
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> ContextView {
        ContextView {
            tokens: 18_200,
            estimated: 1_300,
            context_window: 128_000,
            effective_window: 110_000,
            warn_at: 90_000,
            compact_at: 97_000,
            compactions: 2,
            head_from_idx: 0,
            summary_from_idx: 2,
            has_summary: true,
        }
    }

    fn session(messages: u64, base: u64, status: &str) -> SessionView {
        SessionView {
            parent: None,
            id: "s3".into(),
            name: None,
            workdir: "/srv/proj".into(),
            model: "fast".into(),
            status: status.into(),
            error: None,
            messages,
            context_base_idx: base,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            created_ms: 0,
            updated_ms: 0,
            chain: "c1".into(),
            depth: 0,
            context: context(),
        }
    }

    #[test]
    fn the_context_line_names_every_threshold() {
        assert_eq!(
            context_line(&context(), Style::plain()),
            "context: 18,200 tokens (1,300 estimated) · compacts at 97,000 · warns at 90,000 · effective window 110,000 of 128,000 · 2 compactions"
        );
        let fresh = ContextView {
            estimated: 0,
            compactions: 1,
            ..context()
        };
        assert_eq!(
            context_line(&fresh, Style::plain()),
            "context: 18,200 tokens · compacts at 97,000 · warns at 90,000 · effective window 110,000 of 128,000 · 1 compaction"
        );
        let unknown = ContextView {
            context_window: 0,
            compactions: 0,
            ..context()
        };
        assert_eq!(
            context_line(&unknown, Style::plain()),
            "context: 18,200 tokens (model unknown)"
        );
    }

    #[test]
    fn a_context_past_the_warning_is_yellow() {
        let full = ContextView {
            tokens: 91_000,
            ..context()
        };
        let line = context_line(&full, Style::colored());
        assert!(
            line.starts_with("context: \x1b[33m91,000 tokens\x1b[0m"),
            "{line:?}"
        );
        let line = context_line(&context(), Style::colored());
        assert!(line.starts_with("context: 18,200 tokens"), "{line:?}");
    }

    #[test]
    fn summary_labels_name_the_range() {
        assert_eq!(
            summary_label(2, 12),
            "summary of messages [2]..[11] (what the model sees instead of them)"
        );
        assert_eq!(
            summary_label(5, 6),
            "summary of message [5] (what the model sees instead of them)"
        );
        assert_eq!(
            summary_label(6, 6),
            "summary (what the model sees before [6])"
        );
        assert_eq!(
            summary_block("Goal: x\n\x1b[2J", 0, 3, Style::plain(), true),
            "── summary of messages [0]..[2] (what the model sees instead of them) ──\nGoal: x\n"
        );
    }

    #[test]
    fn resets_say_what_the_model_sees_and_that_history_stays() {
        assert_eq!(
            reset_line(&session(40, 12, "idle"), true),
            "s3: the model now sees messages from [12] on (soft reset), 18,200 tokens; history keeps all 40 messages"
        );
        assert_eq!(
            reset_line(&session(40, 40, "idle"), false),
            "s3: the model starts from an empty context (hard reset), 18,200 tokens; history keeps all 40 messages"
        );
        assert_eq!(
            reset_line(&session(1, 1, "idle"), false),
            "s3: the model starts from an empty context (hard reset), 18,200 tokens; history keeps its 1 message"
        );
        assert_eq!(
            reset_line(&session(0, 0, "idle"), true),
            "s3: the model starts from an empty context (soft reset), 18,200 tokens; history is empty"
        );
    }

    #[test]
    fn a_model_switch_that_starts_a_compaction_says_so() {
        let idle = model_lines(&session(4, 0, "idle"), Style::plain());
        assert_eq!(
            idle,
            "s3: model fast\ncontext: 18,200 tokens (1,300 estimated) · compacts at 97,000 · warns at 90,000 · effective window 110,000 of 128,000 · 2 compactions\n"
        );
        let running = model_lines(&session(4, 0, "running"), Style::plain());
        assert!(
            running.ends_with("\nthe context is over the new model's compaction threshold: compacting now (follow with `flytoctl session_attach s3`)\n"),
            "{running}"
        );
    }

    #[test]
    fn the_breaker_table() {
        let now = 1_000_000;
        let breakers = vec![
            BreakerView {
                project: "0123456789abcdef".into(),
                workdir: "/srv/a".into(),
                state: "open".into(),
                failures: 3,
                last_error: Some(format!("summary call failed:\n{}", "x".repeat(100))),
                reset_at_ms: Some(now + 252_000),
                updated_ms: now,
            },
            BreakerView {
                project: "fedcba9876543210".into(),
                workdir: "/srv/b".into(),
                state: "closed".into(),
                failures: 1,
                last_error: None,
                reset_at_ms: None,
                updated_ms: now,
            },
        ];
        let text = breaker_table(&breakers, now, Style::plain());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("PROJECT           STATE   FAILURES  RESETS    LAST ERROR"),
            "{text}"
        );
        assert!(
            lines[1].starts_with(
                "0123456789abcdef  open    3         in 4m12s  summary call failed: xxx"
            ),
            "{text}"
        );
        assert!(lines[1].ends_with("…  /srv/a"), "{text}");
        assert!(
            lines[2].starts_with("fedcba9876543210  closed  1         -         -"),
            "{text}"
        );
        assert!(lines[2].ends_with("/srv/b"), "{text}");
    }

    #[test]
    fn stats_lines_per_context() {
        let contexts = vec![
            SessionContext {
                session: "s3".into(),
                context: context(),
            },
            SessionContext {
                session: "s9".into(),
                context: ContextView {
                    tokens: 500,
                    ..Default::default()
                },
            },
        ];
        assert_eq!(
            stats_contexts(&contexts),
            "  s3: 18,200 / 97,000 tokens before compaction\n  s9: 500 tokens (model unknown)\n"
        );
    }
}
