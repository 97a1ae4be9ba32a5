//! The normalize pipeline: turns the model-visible window of a transcript
//! into a message list every provider accepts, run before every provider
//! call. It owns the shape rules of a request's messages ([`check`]) and the
//! repairs that establish them ([`normalize`]).
//!
//! It is pure: no I/O, no storage, no events. It never touches the stored
//! transcript (which stays append-only); the session stores what happened
//! and sends what this module makes of it. Callers log the [`Report`].
//!
//! Stages, in order, each a small function tested on its own:
//! 1. [`repair_pairing`]: every tool call is answered exactly once, in call
//!    order, at the head of the user message right after the assistant
//!    message(s) that made it; a call without a result gets a synthetic
//!    error result; duplicate results, orphan results and blocks in the
//!    wrong role are dropped. A call is never dropped: a call whose id an
//!    earlier call already has (servers that send `call_0` for every call,
//!    transcripts stored before flyto made ids unique) or that a provider
//!    would reject gets a new id, and so do its results (matched in order
//!    within the turn), so every round the model made is sent back.
//! 2. [`drop_empty`]: empty and whitespace-only text blocks go, then
//!    messages left with no block.
//! 3. [`merge_roles`]: consecutive same-role messages become one, tool
//!    results first in a user message.
//! 4. [`ensure_user_first`]: a window that starts with the assistant gets a
//!    placeholder user message, because Anthropic requires a user turn first.
//!
//! The output always passes [`check`], and normalizing it again changes
//! nothing (both are property-tested below).

use crate::llm::{Assembled, Block, Message, Role};
use std::collections::HashSet;
use std::fmt;

/// Content of the result made up for a call that never got one (the run was
/// killed or cancelled between the call and its result).
pub const MISSING_RESULT: &str = "[no result: the tool call was interrupted]";

/// Text of the user message put in front of a window that starts with an
/// assistant message.
pub const LEADING_PLACEHOLDER: &str = "[earlier messages omitted]";

/// What each stage changed, for logs and tests. All zero means the input
/// already passed [`check`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// Tool calls sent under a new id: an earlier call had theirs, or it
    /// was empty or held characters a provider rejects.
    pub call_ids_renamed: usize,
    /// Tool calls in user messages and tool results in assistant messages.
    pub misplaced_blocks_dropped: usize,
    /// Second and later results for the same call.
    pub duplicate_results_dropped: usize,
    /// Results that answer no call of the assistant turn just before them.
    pub orphan_results_dropped: usize,
    /// Calls that got a [`MISSING_RESULT`].
    pub synthetic_results: usize,
    /// Answering user messages whose results had to be moved to the head of
    /// the message or put in call order.
    pub results_reordered: usize,
    /// Empty or whitespace-only text blocks removed.
    pub empty_blocks_removed: usize,
    /// Messages removed because no block was left.
    pub empty_messages_removed: usize,
    /// Messages folded into the previous message of the same role.
    pub messages_merged: usize,
    /// 1 when a [`LEADING_PLACEHOLDER`] user message was added.
    pub placeholder_inserted: usize,
}

impl Report {
    /// True when normalize changed nothing.
    pub fn is_clean(&self) -> bool {
        *self == Report::default()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = [
            ("call ids renamed", self.call_ids_renamed),
            ("misplaced blocks dropped", self.misplaced_blocks_dropped),
            ("duplicate results dropped", self.duplicate_results_dropped),
            ("orphan results dropped", self.orphan_results_dropped),
            ("synthetic results", self.synthetic_results),
            ("results reordered", self.results_reordered),
            ("empty blocks removed", self.empty_blocks_removed),
            ("empty messages removed", self.empty_messages_removed),
            ("messages merged", self.messages_merged),
            ("placeholder inserted", self.placeholder_inserted),
        ];
        let mut any = false;
        for (label, n) in parts.iter().filter(|(_, n)| *n > 0) {
            if any {
                f.write_str(", ")?;
            }
            write!(f, "{label}: {n}")?;
            any = true;
        }
        if !any {
            f.write_str("clean")?;
        }
        Ok(())
    }
}

/// Runs the whole pipeline. The result passes [`check`].
pub fn normalize(messages: Vec<Message>) -> (Vec<Message>, Report) {
    let mut report = Report::default();
    let messages = repair_pairing(messages, &mut report);
    let messages = drop_empty(messages, &mut report);
    let messages = merge_roles(messages, &mut report);
    let messages = ensure_user_first(messages, &mut report);
    (messages, report)
}

/// Validates what providers require of a message list: roles alternate,
/// starting with the user; no message is empty and no text block is blank;
/// tool calls only in assistant messages, with unique [`portable_id`]s; the user message
/// right after an assistant message starts with exactly one result per call,
/// in call order; no other tool result anywhere. The error names the first
/// message (by index) that breaks a rule.
pub fn check(messages: &[Message]) -> Result<(), String> {
    let mut call_ids: HashSet<&str> = HashSet::new();
    let mut expected: Vec<&str> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if i == 0 && m.role != Role::User {
            return Err("message 0 is not a user message".into());
        }
        if i > 0 && messages[i - 1].role == m.role {
            return Err(format!("messages {} and {i} have the same role", i - 1));
        }
        if m.content.is_empty() {
            return Err(format!("message {i} has no content"));
        }
        if m.content.iter().any(is_blank_text) {
            return Err(format!("message {i} has an empty text block"));
        }
        match m.role {
            Role::Assistant => {
                if !expected.is_empty() {
                    // Only reachable if the message before was not a user
                    // message, which alternation already rejects.
                    return Err(format!("message {i} follows unanswered calls"));
                }
                for block in &m.content {
                    match block {
                        Block::ToolUse { id, .. } => {
                            if !portable_id(id) {
                                return Err(format!(
                                    "message {i}: call id `{id}` is empty or has characters a provider rejects"
                                ));
                            }
                            if !call_ids.insert(id.as_str()) {
                                return Err(format!("message {i}: call id `{id}` used twice"));
                            }
                            expected.push(id.as_str());
                        }
                        Block::ToolResult { call_id, .. } => {
                            return Err(format!(
                                "message {i}: tool result `{call_id}` in an assistant message"
                            ));
                        }
                        _ => {}
                    }
                }
            }
            Role::User => {
                let mut results = m.content.iter().map(|b| match b {
                    Block::ToolResult { call_id, .. } => Some(call_id.as_str()),
                    _ => None,
                });
                for want in expected.drain(..) {
                    match results.next().flatten() {
                        Some(got) if got == want => {}
                        Some(got) => {
                            return Err(format!(
                                "message {i}: expected the result of `{want}`, found `{got}`"
                            ));
                        }
                        None => {
                            return Err(format!(
                                "message {i}: call `{want}` has no result at the head of the message"
                            ));
                        }
                    }
                }
                if let Some(extra) = results.flatten().next() {
                    return Err(format!(
                        "message {i}: result `{extra}` answers no call of the previous message"
                    ));
                }
                if let Some(Block::ToolUse { id, .. }) = m
                    .content
                    .iter()
                    .find(|b| matches!(b, Block::ToolUse { .. }))
                {
                    return Err(format!("message {i}: tool call `{id}` in a user message"));
                }
            }
        }
    }
    if let Some(id) = expected.first() {
        return Err(format!("call `{id}` in the last message has no result"));
    }
    Ok(())
}

fn is_blank_text(block: &Block) -> bool {
    matches!(block, Block::Text { text } if text.trim().is_empty())
}

fn synthetic_result(call_id: &str) -> Block {
    Block::ToolResult {
        call_id: call_id.to_string(),
        content: MISSING_RESULT.to_string(),
        is_error: true,
    }
}

/// Whether `id` may go to every provider as a call id: Anthropic accepts
/// only ASCII letters, digits, `_` and `-`, and no provider an empty id.
pub fn portable_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `base` made portable, then suffixed `_2`, `_3`… until it is in neither
/// set.
fn fresh_id(base: &str, used: &HashSet<String>, reserved: &HashSet<String>) -> String {
    let mut base: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if base.is_empty() {
        base = "call".into();
    }
    let free = |id: &String| !used.contains(id) && !reserved.contains(id);
    if free(&base) {
        return base;
    }
    (2u64..)
        .map(|k| format!("{base}_{k}"))
        .find(free)
        .unwrap_or(base)
}

/// The call ids of a session's transcript, so that every call it stores
/// gets an id of its own. Provider ids are not to be trusted: some servers
/// send `call_0` for every call, restart their count each response, send
/// the same id for two parallel calls, or none at all. A stored id that
/// repeats an earlier one makes the round ambiguous to the provider and to
/// everything keyed by call id (events, approvals, the repeat guard), so
/// the session gives such a call a new id before it stores or runs it.
///
/// No provider needs its own id back (chat completions and Messages only
/// require that a result names a call of the same request), so the
/// transcript keeps one id per call and the request sends it in both the
/// call and its result.
#[derive(Debug, Default)]
pub struct CallIds {
    taken: HashSet<String>,
}

impl CallIds {
    /// Notes the ids of the calls in `messages` as taken.
    pub fn record<'a>(&mut self, messages: impl IntoIterator<Item = &'a Message>) {
        for m in messages {
            for b in &m.content {
                if let Block::ToolUse { id, .. } = b {
                    self.taken.insert(id.clone());
                }
            }
        }
    }

    /// Gives each call of `reply` an id no recorded call has: the
    /// provider's when it is [`portable_id`] and unused, else one made
    /// from `scope` (which must name this reply, such as the session and
    /// the index the reply will be stored at) and the call's position.
    /// Returns how many calls got a new id.
    pub fn assign(&mut self, reply: &mut Assembled, scope: &str) -> usize {
        let mut renamed = 0;
        let none = HashSet::new();
        for n in 0..reply.tool_calls.len() {
            let id = &reply.tool_calls[n].id;
            if portable_id(id) && !self.taken.contains(id) {
                self.taken.insert(id.clone());
                continue;
            }
            let new = fresh_id(&format!("call_{scope}_{n}"), &self.taken, &none);
            tracing::debug!(provider_id = %id, id = %new, "tool call renamed: its id is taken or not portable");
            self.taken.insert(new.clone());
            reply.set_call_id(n, new);
            renamed += 1;
        }
        renamed
    }
}

/// Stage 1. Consecutive assistant messages count as one turn (stage 3 will
/// merge them), and the user messages after them up to the next assistant
/// message are its answer: the turn's results are gathered from all of them
/// and put, in call order, at the head of the first one, or in a new user
/// message when there is none. A result found anywhere else answers nothing
/// the model can still see and is dropped. A call whose id is taken by an
/// earlier call, or is not [`portable_id`], is sent under a new id, and the
/// results naming its old id answer the turn's calls of that id in order.
pub fn repair_pairing(messages: Vec<Message>, report: &mut Report) -> Vec<Message> {
    let messages = drop_misplaced(messages, report);
    // New ids must not take the id of a later call either.
    let mut stored = CallIds::default();
    stored.record(&messages);
    let reserved = stored.taken;
    let mut used: HashSet<String> = HashSet::new();
    let mut out = Vec::with_capacity(messages.len() + 1);
    let mut iter = messages.into_iter().peekable();
    // No call precedes the leading user messages: their results are orphans.
    while let Some(m) = iter.next_if(|m| m.role == Role::User) {
        out.extend(answer_turn(&[], vec![m], report));
    }
    while iter.peek().is_some() {
        // (id as stored, id as sent), in call order.
        let mut calls: Vec<(String, String)> = Vec::new();
        while let Some(mut m) = iter.next_if(|m| m.role == Role::Assistant) {
            for b in &mut m.content {
                if let Block::ToolUse { id, .. } = b {
                    let sent = if portable_id(id) && !used.contains(id.as_str()) {
                        id.clone()
                    } else {
                        report.call_ids_renamed += 1;
                        fresh_id(id, &used, &reserved)
                    };
                    used.insert(sent.clone());
                    calls.push((std::mem::replace(id, sent.clone()), sent));
                }
            }
            out.push(m);
        }
        let mut users = Vec::new();
        while let Some(m) = iter.next_if(|m| m.role == Role::User) {
            users.push(m);
        }
        out.extend(answer_turn(&calls, users, report));
    }
    out
}

/// Drops blocks in the wrong role: calls in user messages, results in
/// assistant messages.
fn drop_misplaced(mut messages: Vec<Message>, report: &mut Report) -> Vec<Message> {
    for m in &mut messages {
        let role = m.role;
        m.content.retain(|b| match (b, role) {
            (Block::ToolUse { .. }, Role::User) | (Block::ToolResult { .. }, Role::Assistant) => {
                report.misplaced_blocks_dropped += 1;
                false
            }
            _ => true,
        });
    }
    messages
}

/// Rebuilds the user messages answering `calls` ((stored id, sent id) in
/// call order). A result answers the first call of its id not yet
/// answered, and is sent under that call's id.
fn answer_turn(
    calls: &[(String, String)],
    users: Vec<Message>,
    report: &mut Report,
) -> Vec<Message> {
    let mut answers: Vec<Option<Block>> = vec![None; calls.len()];
    // Whether every kept result already sits where it will end up: at the
    // head of the first user message, in call order, under its sent id.
    let mut in_place = true;
    let mut last_answered: Option<usize> = None;
    let mut rebuilt = Vec::with_capacity(users.len());
    for (u, m) in users.into_iter().enumerate() {
        let mut kept = Vec::with_capacity(m.content.len());
        for block in m.content {
            let Block::ToolResult {
                call_id,
                content,
                is_error,
            } = block
            else {
                kept.push(block);
                continue;
            };
            let open = (0..calls.len()).find(|&k| calls[k].0 == call_id && answers[k].is_none());
            match open {
                Some(k) => {
                    // `kept` holds only non-result blocks, so a non-empty
                    // `kept` means other content came first.
                    if u != 0 || !kept.is_empty() || last_answered.is_some_and(|l| l > k) {
                        in_place = false;
                    }
                    last_answered = Some(k);
                    answers[k] = Some(Block::ToolResult {
                        call_id: calls[k].1.clone(),
                        content,
                        is_error,
                    });
                }
                None if calls.iter().any(|(stored, _)| *stored == call_id) => {
                    report.duplicate_results_dropped += 1;
                }
                None => report.orphan_results_dropped += 1,
            }
        }
        rebuilt.push(Message {
            role: m.role,
            content: kept,
        });
    }
    if calls.is_empty() {
        return rebuilt;
    }
    if !in_place {
        report.results_reordered += 1;
    }
    let results: Vec<Block> = calls
        .iter()
        .zip(answers)
        .map(|((_, id), answer)| {
            answer.unwrap_or_else(|| {
                report.synthetic_results += 1;
                synthetic_result(id)
            })
        })
        .collect();
    match rebuilt.first_mut() {
        Some(first) => {
            first.content.splice(0..0, results);
        }
        None => rebuilt.push(Message {
            role: Role::User,
            content: results,
        }),
    }
    rebuilt
}

/// Stage 2. Providers reject blank text blocks and empty messages. A message
/// holding a tool call or result is never empty, so pairing survives.
pub fn drop_empty(messages: Vec<Message>, report: &mut Report) -> Vec<Message> {
    let mut out = Vec::with_capacity(messages.len());
    for mut m in messages {
        let before = m.content.len();
        m.content.retain(|b| !is_blank_text(b));
        report.empty_blocks_removed += before - m.content.len();
        if m.content.is_empty() {
            report.empty_messages_removed += 1;
        } else {
            out.push(m);
        }
    }
    out
}

/// Stage 3. Roles must alternate. Merging two user messages can put text in
/// front of tool results, which providers reject in the message answering
/// calls, so results are moved to the head (order otherwise kept).
pub fn merge_roles(messages: Vec<Message>, report: &mut Report) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    for m in messages {
        match out.last_mut() {
            Some(last) if last.role == m.role => {
                last.content.extend(m.content);
                report.messages_merged += 1;
            }
            _ => out.push(m),
        }
    }
    for m in out.iter_mut().filter(|m| m.role == Role::User) {
        let is_result = |b: &Block| matches!(b, Block::ToolResult { .. });
        // Already in shape when no result follows a non-result block.
        let first_other = m.content.iter().position(|b| !is_result(b));
        let misplaced = first_other.is_some_and(|p| m.content[p..].iter().any(is_result));
        if misplaced {
            let (results, others): (Vec<Block>, Vec<Block>) = std::mem::take(&mut m.content)
                .into_iter()
                .partition(is_result);
            m.content = results;
            m.content.extend(others);
            report.results_reordered += 1;
        }
    }
    out
}

/// Stage 4. A window can start with an assistant message (e.g. right after
/// `context_base_idx`); a placeholder keeps its content instead of dropping
/// it along with the results that answer it.
pub fn ensure_user_first(mut messages: Vec<Message>, report: &mut Report) -> Vec<Message> {
    if messages.first().is_some_and(|m| m.role == Role::Assistant) {
        messages.insert(0, Message::user_text(LEADING_PLACEHOLDER));
        report.placeholder_inserted += 1;
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn text(t: &str) -> Block {
        Block::Text { text: t.into() }
    }
    fn call(id: &str) -> Block {
        Block::ToolUse {
            id: id.into(),
            name: "read".into(),
            arguments_json: "{}".into(),
        }
    }
    fn res(id: &str) -> Block {
        Block::ToolResult {
            call_id: id.into(),
            content: format!("out {id}"),
            is_error: false,
        }
    }
    fn user(content: Vec<Block>) -> Message {
        Message {
            role: Role::User,
            content,
        }
    }
    fn asst(content: Vec<Block>) -> Message {
        Message {
            role: Role::Assistant,
            content,
        }
    }

    // ---- stage 1 ----

    #[test]
    fn valid_transcript_is_untouched() {
        let x = vec![
            user(vec![text("hi")]),
            asst(vec![text("reading"), call("a"), call("b")]),
            user(vec![res("a"), res("b"), text("also this")]),
            asst(vec![text("done")]),
        ];
        assert_eq!(check(&x), Ok(()));
        let (y, report) = normalize(x.clone());
        assert_eq!(y, x);
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.to_string(), "clean");
    }

    #[test]
    fn call_at_the_end_gets_a_synthetic_result_in_a_new_message() {
        let x = vec![user(vec![text("go")]), asst(vec![call("a")])];
        let mut r = Report::default();
        let y = repair_pairing(x, &mut r);
        assert_eq!(y.len(), 3);
        assert_eq!(y[2], user(vec![synthetic_result("a")]));
        assert_eq!(r.synthetic_results, 1);
        let Block::ToolResult {
            content, is_error, ..
        } = &y[2].content[0]
        else {
            panic!("not a result")
        };
        assert_eq!(content, MISSING_RESULT);
        assert!(is_error);
    }

    #[test]
    fn missing_result_goes_into_the_following_user_message_in_call_order() {
        let x = vec![
            user(vec![text("go")]),
            asst(vec![call("a"), call("b"), call("c")]),
            user(vec![res("c"), res("a")]),
            user(vec![text("next")]),
        ];
        let mut r = Report::default();
        let y = repair_pairing(x, &mut r);
        assert_eq!(y[2], user(vec![res("a"), synthetic_result("b"), res("c")]));
        assert_eq!(y[3], user(vec![text("next")]));
        assert_eq!(r.synthetic_results, 1);
        assert_eq!(r.results_reordered, 1);
    }

    #[test]
    fn results_spread_over_user_messages_are_gathered_at_the_head() {
        let x = vec![
            user(vec![text("go")]),
            asst(vec![call("a"), call("b")]),
            user(vec![text("interjection"), res("a")]),
            user(vec![res("b")]),
        ];
        let mut r = Report::default();
        let y = repair_pairing(x, &mut r);
        assert_eq!(y[2], user(vec![res("a"), res("b"), text("interjection")]));
        assert_eq!(y[3], user(vec![]));
        assert_eq!(r.results_reordered, 1);
        assert_eq!(r.synthetic_results, 0);
    }

    #[test]
    fn duplicate_results_keep_the_first() {
        let first = Block::ToolResult {
            call_id: "a".into(),
            content: "first".into(),
            is_error: false,
        };
        let x = vec![
            user(vec![text("go")]),
            asst(vec![call("a")]),
            user(vec![first.clone(), res("a")]),
            user(vec![res("a")]),
        ];
        let mut r = Report::default();
        let y = repair_pairing(x, &mut r);
        assert_eq!(y[2], user(vec![first]));
        assert_eq!(r.duplicate_results_dropped, 2);
    }

    fn call_named(id: &str, args: &str) -> Block {
        Block::ToolUse {
            id: id.into(),
            name: "bash".into(),
            arguments_json: args.into(),
        }
    }
    fn res_text(id: &str, content: &str) -> Block {
        Block::ToolResult {
            call_id: id.into(),
            content: content.into(),
            is_error: false,
        }
    }

    #[test]
    fn a_reused_call_id_renames_the_later_call_and_keeps_its_round() {
        // A server that restarts its count each response: both rounds are
        // `call_0`. Before, the second round was dropped as a duplicate and
        // the model, not seeing it, made the call again.
        let x = vec![
            user(vec![text("go")]),
            asst(vec![call_named("call_0", "1")]),
            user(vec![res_text("call_0", "r1")]),
            asst(vec![call_named("call_0", "2"), call_named("call_1", "3")]),
            user(vec![res_text("call_0", "r2"), res_text("call_1", "r3")]),
        ];
        let (y, r) = normalize(x);
        assert_eq!(check(&y), Ok(()));
        assert_eq!(r.call_ids_renamed, 1);
        assert_eq!((r.orphan_results_dropped, r.synthetic_results), (0, 0));
        assert_eq!(y[1], asst(vec![call_named("call_0", "1")]));
        assert_eq!(y[2], user(vec![res_text("call_0", "r1")]));
        assert_eq!(
            y[3],
            asst(vec![call_named("call_0_2", "2"), call_named("call_1", "3")])
        );
        assert_eq!(
            y[4],
            user(vec![res_text("call_0_2", "r2"), res_text("call_1", "r3")])
        );
    }

    #[test]
    fn parallel_calls_sharing_one_id_are_answered_in_order() {
        let x = vec![
            user(vec![text("go")]),
            asst(vec![call_named("call_0", "a"), call_named("call_0", "b")]),
            user(vec![res_text("call_0", "ra"), res_text("call_0", "rb")]),
        ];
        let (y, r) = normalize(x);
        assert_eq!(check(&y), Ok(()));
        assert_eq!(r.call_ids_renamed, 1);
        assert_eq!(r.duplicate_results_dropped, 0);
        assert_eq!(
            y[1],
            asst(vec![call_named("call_0", "a"), call_named("call_0_2", "b")])
        );
        assert_eq!(
            y[2],
            user(vec![res_text("call_0", "ra"), res_text("call_0_2", "rb")])
        );
    }

    #[test]
    fn a_new_id_takes_no_id_a_later_call_has() {
        let x = vec![
            user(vec![text("go")]),
            asst(vec![call("a"), call("a")]),
            user(vec![res("a"), res("a")]),
            asst(vec![call("a_2")]),
            user(vec![res("a_2")]),
        ];
        let (y, r) = normalize(x);
        assert_eq!(check(&y), Ok(()));
        assert_eq!(r.call_ids_renamed, 1);
        assert_eq!(y[1], asst(vec![call("a"), call("a_3")]));
        assert_eq!(y[3], asst(vec![call("a_2")]));
    }

    #[test]
    fn empty_and_unportable_ids_are_renamed_with_their_results() {
        let x = vec![
            user(vec![text("go")]),
            asst(vec![
                call_named("", "1"),
                call_named("functions.bash:0", "2"),
            ]),
            user(vec![res_text("", "r1"), res_text("functions.bash:0", "r2")]),
        ];
        assert!(check(&x).is_err());
        let (y, r) = normalize(x);
        assert_eq!(check(&y), Ok(()));
        assert_eq!(r.call_ids_renamed, 2);
        assert_eq!(
            y[1],
            asst(vec![
                call_named("call", "1"),
                call_named("functions_bash_0", "2")
            ])
        );
        assert_eq!(
            y[2],
            user(vec![
                res_text("call", "r1"),
                res_text("functions_bash_0", "r2")
            ])
        );
    }

    #[test]
    fn an_extra_result_for_a_shared_id_is_a_duplicate() {
        let x = vec![
            user(vec![text("go")]),
            asst(vec![call("a"), call("a")]),
            user(vec![res("a"), res("a"), res("a")]),
        ];
        let (y, r) = normalize(x);
        assert_eq!(check(&y), Ok(()));
        assert_eq!(r.duplicate_results_dropped, 1);
        assert_eq!(y[2].content.len(), 2);
    }

    fn reply_with_calls(ids: &[&str]) -> Assembled {
        let calls: Vec<crate::llm::ToolCall> = ids
            .iter()
            .enumerate()
            .map(|(n, id)| crate::llm::ToolCall {
                id: (*id).into(),
                name: "bash".into(),
                arguments_json: format!("{{\"n\":{n}}}"),
            })
            .collect();
        let mut content = vec![text("on it")];
        content.extend(calls.iter().map(|c| Block::ToolUse {
            id: c.id.clone(),
            name: c.name.clone(),
            arguments_json: c.arguments_json.clone(),
        }));
        Assembled {
            content,
            text: "on it".into(),
            reasoning: String::new(),
            reasoning_signature: None,
            refusal: String::new(),
            tool_calls: calls,
            stop_reason: crate::llm::StopReason::ToolUse,
            usage: None,
            profile: "fake".into(),
            cost: 0.0,
        }
    }

    fn ids_of(reply: &Assembled) -> (Vec<String>, Vec<String>) {
        let calls = reply.tool_calls.iter().map(|c| c.id.clone()).collect();
        let blocks = reply
            .content
            .iter()
            .filter_map(|b| match b {
                Block::ToolUse { id, .. } => Some(id.clone()),
                _ => None,
            })
            .collect();
        (calls, blocks)
    }

    #[test]
    fn assign_keeps_unused_provider_ids_and_renames_the_rest() {
        let mut ids = CallIds::default();
        ids.record(&[asst(vec![call("call_0")])]);
        // Restarted count, a repeat inside the response, an empty id and
        // one Anthropic would reject.
        let mut reply = reply_with_calls(&["call_0", "call_1", "call_1", "", "a.b:1", "toolu_x"]);
        assert_eq!(ids.assign(&mut reply, "s7m4"), 4);
        let want: Vec<String> = [
            "call_s7m4_0",
            "call_1",
            "call_s7m4_2",
            "call_s7m4_3",
            "call_s7m4_4",
            "toolu_x",
        ]
        .map(String::from)
        .into();
        assert_eq!(ids_of(&reply), (want.clone(), want));
        // The message stored is the renamed one, and passes check.
        let x = vec![
            user(vec![text("go")]),
            reply.to_message(),
            user(
                reply
                    .tool_calls
                    .iter()
                    .map(|c| res_text(&c.id, "ok"))
                    .collect(),
            ),
        ];
        assert_eq!(check(&x), Ok(()));
        // The next response reusing every id again gets new ones too.
        let mut again = reply_with_calls(&["call_0", "call_1"]);
        assert_eq!(ids.assign(&mut again, "s7m6"), 2);
        assert_eq!(ids_of(&again).0, ["call_s7m6_0", "call_s7m6_1"]);
        // Even a made-up id someone already has is not given twice.
        let mut clash = reply_with_calls(&["call_0"]);
        assert_eq!(ids.assign(&mut clash, "s7m6"), 1);
        assert_eq!(ids_of(&clash).0, ["call_s7m6_0_2"]);
    }

    #[test]
    fn orphan_results_are_dropped() {
        let x = vec![
            user(vec![res("x"), text("hello")]),
            asst(vec![text("hi")]),
            user(vec![res("y")]),
            asst(vec![call("a")]),
            user(vec![res("a"), res("z")]),
        ];
        let mut r = Report::default();
        let y = repair_pairing(x, &mut r);
        assert_eq!(r.orphan_results_dropped, 3);
        assert_eq!(y[0], user(vec![text("hello")]));
        assert_eq!(y[2], user(vec![]));
        assert_eq!(y[4], user(vec![res("a")]));
    }

    #[test]
    fn a_result_after_the_next_assistant_message_is_too_late() {
        let x = vec![
            user(vec![text("go")]),
            asst(vec![call("a")]),
            user(vec![text("what happened?")]),
            asst(vec![text("let me see")]),
            user(vec![res("a")]),
        ];
        let (y, r) = normalize(x);
        assert_eq!(r.synthetic_results, 1);
        assert_eq!(r.orphan_results_dropped, 1);
        assert_eq!(
            y[2],
            user(vec![synthetic_result("a"), text("what happened?")])
        );
        assert_eq!(y.len(), 4);
    }

    #[test]
    fn consecutive_assistant_messages_form_one_turn() {
        let x = vec![
            user(vec![text("go")]),
            asst(vec![call("a")]),
            asst(vec![text("and"), call("b")]),
            user(vec![res("a"), res("b")]),
        ];
        let (y, r) = normalize(x);
        assert_eq!(r.synthetic_results, 0);
        assert_eq!(r.messages_merged, 1);
        assert_eq!(y[1], asst(vec![call("a"), text("and"), call("b")]));
        assert_eq!(y[2], user(vec![res("a"), res("b")]));
    }

    #[test]
    fn blocks_in_the_wrong_role_are_dropped() {
        let x = vec![
            user(vec![text("go"), call("u")]),
            asst(vec![res("u"), text("hm")]),
        ];
        let mut r = Report::default();
        let y = repair_pairing(x, &mut r);
        assert_eq!(r.misplaced_blocks_dropped, 2);
        assert_eq!(y, vec![user(vec![text("go")]), asst(vec![text("hm")])]);
    }

    // ---- stage 2 ----

    #[test]
    fn blank_text_and_empty_messages_are_removed() {
        let x = vec![
            user(vec![text("go"), text("")]),
            asst(vec![text(" \n\t")]),
            user(vec![]),
            asst(vec![text(""), call("a")]),
            user(vec![text("  "), res("a")]),
        ];
        let mut r = Report::default();
        let y = drop_empty(x, &mut r);
        assert_eq!(r.empty_blocks_removed, 4);
        assert_eq!(r.empty_messages_removed, 2);
        assert_eq!(
            y,
            vec![
                user(vec![text("go")]),
                asst(vec![call("a")]),
                user(vec![res("a")]),
            ]
        );
    }

    #[test]
    fn thinking_and_untrimmed_text_are_kept() {
        let thinking = Block::Thinking {
            text: String::new(),
            signature: Some("sig".into()),
        };
        let x = vec![asst(vec![thinking.clone(), text("  padded  ")])];
        let mut r = Report::default();
        let y = drop_empty(x.clone(), &mut r);
        assert_eq!(y, x);
        assert!(r.is_clean());
    }

    // ---- stage 3 ----

    #[test]
    fn same_role_messages_merge_in_order() {
        let x = vec![
            user(vec![text("a")]),
            user(vec![text("b")]),
            asst(vec![text("c")]),
            asst(vec![text("d")]),
            asst(vec![text("e")]),
        ];
        let mut r = Report::default();
        let y = merge_roles(x, &mut r);
        assert_eq!(r.messages_merged, 3);
        assert_eq!(
            y,
            vec![
                user(vec![text("a"), text("b")]),
                asst(vec![text("c"), text("d"), text("e")]),
            ]
        );
    }

    #[test]
    fn merged_user_message_puts_results_first() {
        let x = vec![
            asst(vec![call("a"), call("b")]),
            user(vec![text("typed while it ran"), res("a")]),
            user(vec![res("b"), text("more")]),
        ];
        let mut r = Report::default();
        let y = merge_roles(x, &mut r);
        assert_eq!(
            y[1],
            user(vec![
                res("a"),
                res("b"),
                text("typed while it ran"),
                text("more")
            ])
        );
        assert_eq!(r.results_reordered, 1);
    }

    // ---- stage 4 ----

    #[test]
    fn window_starting_with_the_assistant_gets_a_placeholder() {
        let x = vec![asst(vec![call("a")]), user(vec![res("a")])];
        let (y, r) = normalize(x);
        assert_eq!(r.placeholder_inserted, 1);
        assert_eq!(y[0], Message::user_text(LEADING_PLACEHOLDER));
        assert_eq!(check(&y), Ok(()));
    }

    #[test]
    fn empty_window_stays_empty() {
        let (y, r) = normalize(vec![]);
        assert!(y.is_empty());
        assert!(r.is_clean());
        assert_eq!(check(&y), Ok(()));
        let (y, _) = normalize(vec![user(vec![text(" ")]), asst(vec![])]);
        assert!(y.is_empty());
    }

    // ---- check ----

    #[test]
    fn check_names_each_broken_rule() {
        let cases: Vec<(Vec<Message>, &str)> = vec![
            (vec![asst(vec![text("x")])], "not a user message"),
            (
                vec![user(vec![text("a")]), user(vec![text("b")])],
                "same role",
            ),
            (vec![user(vec![])], "no content"),
            (vec![user(vec![text(" ")])], "empty text"),
            (
                vec![user(vec![text("a")]), asst(vec![call("a")])],
                "has no result",
            ),
            (
                vec![
                    user(vec![text("a")]),
                    asst(vec![call("a")]),
                    user(vec![text("b"), res("a")]),
                ],
                "no result at the head",
            ),
            (
                vec![
                    user(vec![text("a")]),
                    asst(vec![call("a"), call("b")]),
                    user(vec![res("b"), res("a")]),
                ],
                "expected the result of `a`",
            ),
            (vec![user(vec![res("a")])], "answers no call"),
            (
                vec![
                    user(vec![text("a")]),
                    asst(vec![call("a")]),
                    user(vec![res("a"), res("a")]),
                ],
                "answers no call",
            ),
            (
                vec![
                    user(vec![text("a")]),
                    asst(vec![call("a")]),
                    user(vec![res("a")]),
                    asst(vec![call("a")]),
                ],
                "used twice",
            ),
            (
                vec![user(vec![text("a")]), asst(vec![res("a")])],
                "in an assistant message",
            ),
            (vec![user(vec![text("a"), call("a")])], "in a user message"),
        ];
        for (x, want) in cases {
            let err = check(&x).expect_err(want);
            assert!(err.contains(want), "{err:?} should contain {want:?}");
            let (y, r) = normalize(x);
            assert_eq!(check(&y), Ok(()), "{y:?}");
            assert!(!r.is_clean());
        }
    }

    // ---- properties ----

    /// Random transcripts with no structure at all: any role, any block,
    /// ids from a small pool so that duplicates and stray results are
    /// common, some of them empty or unportable. Each call's arguments are
    /// its own, so that the calls can be told apart after renaming.
    fn chaotic(rng: &mut StdRng) -> Vec<Message> {
        let ids = ["a", "b", "c", "d", "e", "a_2", "", "x.y"];
        let mut n = 0;
        let texts = ["", " ", "\n\t", "hello", "ok", " x "];
        (0..rng.gen_range(0..10))
            .map(|_| {
                let role = if rng.gen_bool(0.5) {
                    Role::User
                } else {
                    Role::Assistant
                };
                let content = (0..rng.gen_range(0..5))
                    .map(|_| {
                        let id = ids[rng.gen_range(0..ids.len())];
                        match rng.gen_range(0..5) {
                            0 => {
                                n += 1;
                                call_named(id, &n.to_string())
                            }
                            1 => res(id),
                            2 => Block::Thinking {
                                text: "hmm".into(),
                                signature: None,
                            },
                            _ => text(texts[rng.gen_range(0..texts.len())]),
                        }
                    })
                    .collect();
                Message { role, content }
            })
            .collect()
    }

    /// A well-formed session, then damaged the way real ones get damaged:
    /// cut off mid-turn by a crash, results lost or repeated, messages
    /// split or repeated, blank text.
    fn damaged(rng: &mut StdRng) -> Vec<Message> {
        let mut x = vec![user(vec![text("task")])];
        let mut next_id = 0;
        for _ in 0..rng.gen_range(1..6) {
            let mut a = vec![];
            if rng.gen_bool(0.5) {
                a.push(text(if rng.gen_bool(0.2) {
                    ""
                } else {
                    "thinking aloud"
                }));
            }
            let ids: Vec<String> = (0..rng.gen_range(0..4))
                .map(|_| {
                    next_id += 1;
                    format!("call_{next_id}")
                })
                .collect();
            a.extend(ids.iter().map(|id| call(id)));
            x.push(asst(a));
            if !ids.is_empty() {
                x.push(user(ids.iter().map(|id| res(id)).collect()));
            }
            if rng.gen_bool(0.4) {
                x.push(user(vec![text("follow-up")]));
            }
        }
        for _ in 0..rng.gen_range(0..4) {
            if x.is_empty() {
                break;
            }
            let i = rng.gen_range(0..x.len());
            match rng.gen_range(0..7) {
                // Crash: everything after this point is lost.
                0 => x.truncate(i + 1),
                // A lost block (a result, a call, some text).
                1 if !x[i].content.is_empty() => {
                    let j = rng.gen_range(0..x[i].content.len());
                    x[i].content.remove(j);
                }
                // A repeated message (a replayed write).
                2 => {
                    let m = x[i].clone();
                    x.insert(i, m);
                }
                // A split message.
                3 if x[i].content.len() > 1 => {
                    let j = rng.gen_range(1..x[i].content.len());
                    let tail = x[i].content.split_off(j);
                    let role = x[i].role;
                    x.insert(
                        i + 1,
                        Message {
                            role,
                            content: tail,
                        },
                    );
                }
                // Blocks shuffled within a message.
                4 => {
                    let c = &mut x[i].content;
                    if c.len() > 1 {
                        let j = rng.gen_range(0..c.len());
                        let k = rng.gen_range(0..c.len());
                        c.swap(j, k);
                    }
                }
                // Blank noise.
                5 => x.insert(i, user(vec![text("  ")])),
                // A lost message.
                _ => {
                    x.remove(i);
                }
            }
        }
        x
    }

    fn texts_of(x: &[Message]) -> Vec<String> {
        x.iter()
            .flat_map(|m| &m.content)
            .filter_map(|b| match b {
                Block::Text { text } if !text.trim().is_empty() && text != LEADING_PLACEHOLDER => {
                    Some(text.clone())
                }
                _ => None,
            })
            .collect()
    }

    /// Every call the assistant made: (name, arguments), in order.
    fn calls_of(x: &[Message]) -> Vec<(String, String)> {
        x.iter()
            .filter(|m| m.role == Role::Assistant)
            .flat_map(|m| &m.content)
            .filter_map(|b| match b {
                Block::ToolUse {
                    name,
                    arguments_json,
                    ..
                } => Some((name.clone(), arguments_json.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn normalize_always_passes_check_and_is_idempotent() {
        let mut rng = StdRng::seed_from_u64(0x5eed_f1f0);
        let mut total = Report::default();
        for case in 0..20_000 {
            let x = if case % 2 == 0 {
                chaotic(&mut rng)
            } else {
                damaged(&mut rng)
            };
            let (y, r) = normalize(x.clone());
            if let Err(e) = check(&y) {
                panic!("case {case}: {e}\ninput: {x:#?}\noutput: {y:#?}");
            }
            let (z, r2) = normalize(y.clone());
            assert_eq!(z, y, "case {case}: not idempotent\ninput: {x:#?}");
            assert!(r2.is_clean(), "case {case}: second pass reported {r2}");
            assert_eq!(check(&x).is_ok(), r.is_clean(), "case {case}: {x:#?}");
            // Nothing meaningful is lost: every non-blank text and every
            // call survives, in order, whatever its id.
            assert_eq!(texts_of(&y), texts_of(&x), "case {case}");
            assert_eq!(calls_of(&y), calls_of(&x), "case {case}");
            total.call_ids_renamed += r.call_ids_renamed;
            total.misplaced_blocks_dropped += r.misplaced_blocks_dropped;
            total.duplicate_results_dropped += r.duplicate_results_dropped;
            total.orphan_results_dropped += r.orphan_results_dropped;
            total.synthetic_results += r.synthetic_results;
            total.results_reordered += r.results_reordered;
            total.empty_blocks_removed += r.empty_blocks_removed;
            total.empty_messages_removed += r.empty_messages_removed;
            total.messages_merged += r.messages_merged;
            total.placeholder_inserted += r.placeholder_inserted;
        }
        // The generators exercise every repair.
        let counts = [
            total.call_ids_renamed,
            total.misplaced_blocks_dropped,
            total.duplicate_results_dropped,
            total.orphan_results_dropped,
            total.synthetic_results,
            total.results_reordered,
            total.empty_blocks_removed,
            total.empty_messages_removed,
            total.messages_merged,
            total.placeholder_inserted,
        ];
        assert!(counts.iter().all(|n| *n > 0), "{total:?}");
    }

    #[test]
    fn a_crash_after_a_call_answers_it_synthetically() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut seen = 0;
        for _ in 0..2_000 {
            let mut x = damaged(&mut rng);
            // Cut right after an assistant message, as a SIGKILL mid-tool
            // leaves the transcript: its calls have no results.
            let Some(i) = x.iter().rposition(|m| m.role == Role::Assistant) else {
                continue;
            };
            x.truncate(i + 1);
            let (y, _) = normalize(x.clone());
            assert_eq!(check(&y), Ok(()));
            let cut = x[i]
                .content
                .iter()
                .filter(|b| matches!(b, Block::ToolUse { .. }))
                .count();
            if cut == 0 {
                continue;
            }
            // Every call of the cut message, even one whose id an earlier
            // call has, is still there (the last ones of the merged last
            // assistant message) and answered synthetically.
            let [.., calls, answers] = y.as_slice() else {
                panic!("{y:#?}")
            };
            let ids: Vec<&String> = calls
                .content
                .iter()
                .filter_map(|b| match b {
                    Block::ToolUse { id, .. } => Some(id),
                    _ => None,
                })
                .collect();
            assert!(ids.len() >= cut, "{x:#?}");
            for id in &ids[ids.len() - cut..] {
                seen += 1;
                let answer = answers.content.iter().find_map(|b| match b {
                    Block::ToolResult {
                        call_id,
                        content,
                        is_error,
                    } if call_id == *id => Some((content.as_str(), *is_error)),
                    _ => None,
                });
                assert_eq!(answer, Some((MISSING_RESULT, true)), "{x:#?}");
            }
        }
        assert!(seen > 100, "{seen}");
    }
}
