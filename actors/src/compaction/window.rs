//! The model-visible window of a compacted session and its pieces: the
//! protected head, the summary message, the tail, and the cheap step's
//! shortened rendering of old tool output. Pure functions; the transcript
//! itself is never changed.

use super::estimate::message_tokens;
use crate::llm::{Block, Message, Role};

/// Tool output and arguments longer than this are shortened by the cheap step.
const TRIM_OVER: usize = 1_200;
const KEEP_HEAD: usize = 500;
const KEEP_TAIL: usize = 300;

/// Where a compacted window may start: never between a tool call and its
/// results (a user message holding results belongs to the call before it).
pub fn is_boundary(m: &Message) -> bool {
    match m.role {
        Role::Assistant => true,
        Role::User => !m
            .content
            .iter()
            .any(|b| matches!(b, Block::ToolResult { .. })),
    }
}

/// A user message the user typed (not tool results).
pub fn is_user_turn(m: &Message) -> bool {
    m.role == Role::User && is_boundary(m)
}

fn shorten(text: &str, idx: u64, what: &str) -> Option<String> {
    let chars = text.chars().count();
    if chars <= TRIM_OVER {
        return None;
    }
    let head: String = text.chars().take(KEEP_HEAD).collect();
    let tail: String = text.chars().skip(chars - KEEP_TAIL).collect();
    Some(format!(
        "{head}\n[flyto: cut {} characters of this {what} to save context; the full text is message #{idx} of the transcript (`flytoctl session_history`)]\n{tail}",
        chars - KEEP_HEAD - KEEP_TAIL
    ))
}

/// Arguments stay a JSON object (Anthropic needs one): long string values
/// are shortened in place; arguments that are not an object stay as they are.
fn shorten_arguments(args: &str, idx: u64) -> Option<String> {
    if args.len() <= TRIM_OVER {
        return None;
    }
    let mut value: serde_json::Value = serde_json::from_str(args).ok()?;
    let obj = value.as_object_mut()?;
    let mut changed = false;
    for v in obj.values_mut() {
        if let Some(s) = v.as_str()
            && let Some(short) = shorten(s, idx, "tool-call argument")
        {
            *v = serde_json::Value::String(short);
            changed = true;
        }
    }
    if changed {
        serde_json::to_string(&value).ok()
    } else {
        None
    }
}

/// The cheap step's rendering of message `idx`: long tool results and
/// long tool-call arguments shortened, with a note of what was cut and
/// where the full text is. Every call keeps its result.
pub fn trimmed(idx: u64, m: &Message) -> Option<Message> {
    let mut changed = false;
    let content = m
        .content
        .iter()
        .map(|b| match b {
            Block::ToolResult {
                call_id,
                content,
                is_error,
            } => match shorten(content, idx, "tool result") {
                Some(short) => {
                    changed = true;
                    Block::ToolResult {
                        call_id: call_id.clone(),
                        content: short,
                        is_error: *is_error,
                    }
                }
                None => b.clone(),
            },
            Block::ToolUse {
                id,
                name,
                arguments_json,
            } => match shorten_arguments(arguments_json, idx) {
                Some(short) => {
                    changed = true;
                    Block::ToolUse {
                        id: id.clone(),
                        name: name.clone(),
                        arguments_json: short,
                    }
                }
                None => b.clone(),
            },
            other => other.clone(),
        })
        .collect();
    changed.then_some(Message {
        role: m.role,
        content,
    })
}

/// Message `idx` as the model sees it.
pub fn render(idx: u64, m: &Message, trim_below_idx: u64) -> Message {
    if idx < trim_below_idx {
        trimmed(idx, m).unwrap_or_else(|| m.clone())
    } else {
        m.clone()
    }
}

/// The summary as the model sees it: marked as reference, not as a new
/// instruction.
pub fn summary_message(text: &str) -> Message {
    Message::user_text(text)
}

/// The window: head, summary, then the tail, with old tool output
/// shortened.
pub fn assemble(
    head: &[(u64, Message)],
    summary: Option<&str>,
    tail: &[(u64, Message)],
    trim_below_idx: u64,
) -> Vec<Message> {
    let mut out = Vec::with_capacity(head.len() + tail.len() + 1);
    if summary.is_some() {
        out.extend(head.iter().map(|(i, m)| render(*i, m, trim_below_idx)));
    }
    if let Some(s) = summary {
        out.push(summary_message(s));
    }
    out.extend(tail.iter().map(|(i, m)| render(*i, m, trim_below_idx)));
    out
}

/// End (exclusive) of the protected head at the start of `msgs`: the first
/// turn (the user's first message and everything up to their next one) if
/// it fits in `budget` tokens, else as much of it as fits, cut at a
/// boundary; nothing when even the first message does not fit.
pub fn head_end(msgs: &[(u64, Message)], budget: u64) -> u64 {
    let Some((first, _)) = msgs.first() else {
        return 0;
    };
    let mut end = *first;
    let mut used = 0;
    for (n, (i, m)) in msgs.iter().enumerate() {
        if n > 0 && is_user_turn(m) {
            break;
        }
        used += message_tokens(m);
        if used > budget {
            break;
        }
        // Never end between a call and its results.
        let next_is_results = msgs.get(n + 1).is_some_and(|(_, next)| !is_boundary(next));
        if !next_is_results {
            end = i + 1;
        }
    }
    end
}

/// Start of the protected tail: the most recent messages within `budget`
/// tokens, at a boundary, never before `floor`. Returns `floor` when even
/// the last boundary lies there.
pub fn tail_start(msgs: &[(u64, Message)], floor: u64, budget: u64) -> u64 {
    let mut used = 0;
    let mut start = None;
    for (i, m) in msgs.iter().rev() {
        if *i < floor {
            break;
        }
        used += message_tokens(m);
        // The last exchange stays whatever it costs: the model must see
        // where it is.
        if used > budget && start.is_some() {
            break;
        }
        if is_boundary(m) {
            start = Some(*i);
        }
    }
    start.unwrap_or(floor).max(floor)
}

/// Start of the region the cheap step leaves alone: the last
/// `untouched` tokens.
pub fn untouched_start(msgs: &[(u64, Message)], untouched: u64) -> u64 {
    let mut used = 0;
    let mut start = msgs.last().map_or(0, |(i, _)| i + 1);
    for (i, m) in msgs.iter().rev() {
        used += message_tokens(m);
        if used > untouched {
            break;
        }
        start = *i;
    }
    start
}

/// Tokens the cheap step saves by trimming messages in `[from, to)`.
pub fn trim_savings(msgs: &[(u64, Message)], from: u64, to: u64) -> u64 {
    msgs.iter()
        .filter(|(i, _)| *i >= from && *i < to)
        .filter_map(|(i, m)| {
            trimmed(*i, m).map(|t| message_tokens(m).saturating_sub(message_tokens(&t)))
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, args: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![Block::ToolUse {
                id: id.into(),
                name: "bash".into(),
                arguments_json: args.into(),
            }],
        }
    }
    fn result(id: &str, content: &str) -> Message {
        Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                call_id: id.into(),
                content: content.into(),
                is_error: false,
            }],
        }
    }
    fn indexed(ms: Vec<Message>) -> Vec<(u64, Message)> {
        ms.into_iter()
            .enumerate()
            .map(|(i, m)| (i as u64, m))
            .collect()
    }

    #[test]
    fn trimming_keeps_every_call_and_result_and_says_where_the_rest_is() {
        let long = "x".repeat(5_000);
        let args = serde_json::json!({"path": "a.txt", "content": long}).to_string();
        let c = trimmed(3, &call("c1", &args)).unwrap();
        let Block::ToolUse {
            id, arguments_json, ..
        } = &c.content[0]
        else {
            panic!()
        };
        assert_eq!(id, "c1");
        let v: serde_json::Value = serde_json::from_str(arguments_json).unwrap();
        assert_eq!(v["path"], "a.txt");
        assert!(v["content"].as_str().unwrap().contains("message #3"));
        let r = trimmed(4, &result("c1", &long)).unwrap();
        let Block::ToolResult {
            call_id, content, ..
        } = &r.content[0]
        else {
            panic!()
        };
        assert_eq!(call_id, "c1");
        assert!(content.contains("cut 4200 characters") && content.contains("#4"));
        assert!(trimmed(4, &result("c1", "short")).is_none());
    }

    #[test]
    fn the_tail_never_starts_at_tool_results() {
        let msgs = indexed(vec![
            Message::user_text("one"),
            call("c1", "{}"),
            result("c1", &"y".repeat(400)),
            Message::assistant_text("done"),
            Message::user_text("two"),
            call("c2", "{}"),
            result("c2", &"z".repeat(40)),
        ]);
        let start = tail_start(&msgs, 0, 44);
        assert!(is_boundary(&msgs[start as usize].1), "start {start}");
        assert_eq!(start, 4);
        // The last exchange stays even over the budget.
        assert_eq!(tail_start(&msgs, 0, 1), 5);
        // A big budget keeps everything from the floor on.
        assert_eq!(tail_start(&msgs, 1, 1_000_000), 1);
    }

    #[test]
    fn the_head_is_the_first_exchange_with_its_results() {
        let msgs = indexed(vec![
            Message::user_text("one"),
            call("c1", "{}"),
            result("c1", "r"),
            Message::assistant_text("done"),
            Message::user_text("two"),
        ]);
        assert_eq!(head_end(&msgs, 1_000), 4);
        // Too big for the budget: cut at a boundary, never inside a call.
        assert_eq!(head_end(&msgs, 30), 1);
        assert_eq!(head_end(&msgs, 8), 1);
        assert_eq!(head_end(&msgs, 0), 0);
    }
}
