use super::*;
use crate::llm::{Block, ChatRequest, Role};
use std::collections::VecDeque;
use std::sync::Mutex;

/// A summariser that answers from a script and keeps the prompts.
struct Scripted {
    replies: Mutex<VecDeque<Result<String, LlmError>>>,
    prompts: Mutex<Vec<String>>,
}

impl Scripted {
    fn new(replies: Vec<Result<String, LlmError>>) -> Scripted {
        Scripted {
            replies: Mutex::new(replies.into()),
            prompts: Mutex::new(Vec::new()),
        }
    }
    fn prompts(&self) -> Vec<String> {
        self.prompts.lock().unwrap().clone()
    }
}

impl Summarizer for Scripted {
    fn call(&self, request: ChatRequest) -> SummaryFuture<'_> {
        let Block::Text { text } = &request.messages[0].content[0] else {
            panic!("the summary request is one text message")
        };
        self.prompts.lock().unwrap().push(text.clone());
        let reply = self.replies.lock().unwrap().pop_front().unwrap_or_else(|| {
            Err(LlmError::Server {
                detail: "script ran out".into(),
            })
        });
        Box::pin(async move { reply.map(|t| (t, Usage::default())) })
    }
    fn input_window(&self) -> u64 {
        4_000
    }
}

fn ptl() -> Result<String, LlmError> {
    Err(LlmError::PromptTooLong {
        detail: "too long".into(),
    })
}

fn call(id: &str, args: &str) -> Message {
    Message {
        role: Role::Assistant,
        content: vec![Block::ToolUse {
            id: id.into(),
            name: "read".into(),
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

/// A session of `turns` turns, each a user message, a tool call with a
/// big result and an answer; the first states a constraint and a path.
fn session(turns: usize) -> Vec<(u64, Message)> {
    let mut ms = Vec::new();
    for t in 0..turns {
        let text = if t == 0 {
            "Set up the service.".to_string()
        } else if t == 2 {
            "Next. You must never restart nginx in production. Config is /etc/flyto/prod.toml."
                .to_string()
        } else {
            format!("Turn {t}: continue with the next module.")
        };
        ms.push(Message::user_text(text));
        let id = format!("c{t}");
        ms.push(call(&id, &format!("{{\"path\":\"src/mod{t}.rs\"}}")));
        ms.push(result(&id, &format!("{t}:{}", "x".repeat(6_000))));
        ms.push(Message::assistant_text(format!("Module {t} looks fine.")));
    }
    ms.into_iter()
        .enumerate()
        .map(|(i, m)| (i as u64, m))
        .collect()
}

fn input<'a>(state: &'a ContextState, visible: &'a [(u64, Message)], budget: Budget) -> Input<'a> {
    Input {
        budget,
        state,
        base_idx: visible[0].0,
        fixed_tokens: 500,
        head: &[],
        visible,
    }
}

fn counted(visible: &[(u64, Message)]) -> ContextState {
    ContextState {
        counted_tokens: 500 + estimate::messages_tokens(visible.iter().map(|(_, m)| m)),
        ..ContextState::default()
    }
}

fn assert_every_call_answered(window: &[Message]) {
    let mut open: Vec<String> = Vec::new();
    for m in window {
        for b in &m.content {
            match b {
                Block::ToolUse { id, .. } => open.push(id.clone()),
                Block::ToolResult { call_id, .. } => {
                    let pos = open.iter().position(|i| i == call_id);
                    assert!(pos.is_some(), "result {call_id} without its call");
                    open.remove(pos.unwrap());
                }
                _ => {}
            }
        }
    }
    assert!(open.is_empty(), "calls without results: {open:?}");
}

#[tokio::test]
async fn a_summary_keeps_head_tail_and_pins_constraints_and_paths_verbatim() {
    let visible = session(12);
    let state = counted(&visible);
    let budget = Budget::new(24_000, 2_000);
    assert!(state.tokens() >= budget.compact_at, "{}", state.tokens());
    // The summariser forgets the constraint and the path.
    let model = Scripted::new(vec![Ok("## Goal\nSet up the service.".into())]);
    let applied = summary_step(&input(&state, &visible, budget), &model)
        .await
        .unwrap();
    assert_eq!(applied.tier, "summary");
    assert!(applied.after < applied.before && applied.after < budget.compact_at);
    let head: Vec<_> = visible
        .iter()
        .filter(|(i, _)| *i >= applied.state.head_start_idx && *i < applied.state.head_end_idx)
        .cloned()
        .collect();
    let tail: Vec<_> = visible
        .iter()
        .filter(|(i, _)| *i >= applied.base_idx)
        .cloned()
        .collect();
    let window = applied.state.window(applied.base_idx, &head, &tail);
    let seen = format!("{window:?}");
    assert!(
        seen.contains("You must never restart nginx in production."),
        "{seen}"
    );
    assert!(seen.contains("/etc/flyto/prod.toml"));
    assert!(seen.contains("reference material"));
    assert_every_call_answered(&window);
    // The head (first exchange) is still there, verbatim.
    assert_eq!(window[0], visible[0].1);
    // The summariser saw the middle, not the head.
    let prompt = &model.prompts()[0];
    assert!(prompt.contains("[#4 user] Turn 1") && !prompt.contains("[#0 user]"));
}

#[tokio::test]
async fn a_later_compaction_updates_the_previous_summary() {
    let visible = session(12);
    let state = counted(&visible);
    let budget = Budget::new(24_000, 2_000);
    let model = Scripted::new(vec![
        Ok("first summary".into()),
        Ok("second summary".into()),
    ]);
    let first = summary_step(&input(&state, &visible, budget), &model)
        .await
        .unwrap();
    let mut more = session(24);
    more.retain(|(i, _)| *i >= first.base_idx);
    let head: Vec<_> = session(1);
    let state2 = ContextState {
        counted_tokens: budget.compact_at + 1,
        ..first.state.clone()
    };
    let input2 = Input {
        budget,
        state: &state2,
        base_idx: first.base_idx,
        fixed_tokens: 500,
        head: &head[..first.state.head_end_idx as usize],
        visible: &more,
    };
    let second = summary_step(&input2, &model).await.unwrap();
    let prompt = &model.prompts()[1];
    assert!(prompt.contains("<previous-summary>\nfirst summary\n</previous-summary>"));
    assert_eq!(second.state.summary.as_deref(), Some("second summary"));
    assert_eq!(second.state.compactions, 2);
    assert_eq!(second.state.head_end_idx, first.state.head_end_idx);
    // Pins carry over.
    assert!(
        second
            .state
            .pinned
            .iter()
            .any(|p| p.contains("never restart nginx"))
    );
}

#[tokio::test]
async fn prompt_too_long_drops_the_oldest_groups_then_chunks() {
    let visible = session(12);
    let state = counted(&visible);
    let budget = Budget::new(24_000, 2_000);
    // Tier 2: one retry without the oldest group.
    let model = Scripted::new(vec![ptl(), Ok("s".into())]);
    let applied = summary_step(&input(&state, &visible, budget), &model)
        .await
        .unwrap();
    assert_eq!(applied.tier, "summary_dropped");
    assert_eq!(applied.calls, 2);
    let prompts = model.prompts();
    assert!(prompts[0].contains("Turn 1:") && !prompts[1].contains("Turn 1:"));
    // Tier 3: every whole attempt too long; chunks then a merge.
    let mut script = vec![ptl(), ptl(), ptl(), ptl()];
    script.extend((0..20).map(|i| Ok(format!("part {i}"))));
    let model = Scripted::new(script);
    let applied = summary_step(&input(&state, &visible, budget), &model)
        .await
        .unwrap();
    assert_eq!(applied.tier, "summary_chunked");
    let prompts = model.prompts();
    let chunks = prompts
        .iter()
        .filter(|p| p.starts_with("This is part"))
        .count();
    assert!(chunks >= 2, "{chunks} chunks");
    assert!(
        prompts
            .last()
            .unwrap()
            .starts_with("Merge these partial summaries")
    );
    assert_eq!(applied.calls as usize, 4 + chunks + 1);
}

#[tokio::test]
async fn a_summary_that_does_not_shrink_is_a_failure() {
    let visible = session(12);
    let state = counted(&visible);
    let budget = Budget::new(24_000, 2_000);
    let model = Scripted::new(vec![Ok("y".repeat(200_000))]);
    let err = summary_step(&input(&state, &visible, budget), &model)
        .await
        .unwrap_err();
    assert!(matches!(err, CompactError::NoShrink { .. }), "{err}");
    assert!(err.counts_as_failure());
    let limited = CompactError::Llm(LlmError::RateLimited {
        retry_after: None,
        detail: "429".into(),
    });
    assert!(!limited.counts_as_failure());
}

#[test]
fn the_cheap_step_alone_when_it_is_enough() {
    let visible = session(6);
    let state = counted(&visible);
    // A window where trimming old tool output gets under the warning line.
    let budget = Budget::new(state.tokens() + 3_000, 1_000);
    let applied = trim_step(&input(&state, &visible, budget)).expect("trim is enough");
    assert_eq!(applied.tier, "trim");
    assert!(applied.after <= budget.trim_target());
    let window = applied.state.window(0, &[], &visible);
    assert_every_call_answered(&window);
    let text = format!("{window:?}");
    assert!(text.contains("the full text is message #2"));
    // A window far too small: trimming is not enough.
    let tiny = Budget::new(5_000, 1_000);
    assert!(trim_step(&input(&state, &visible, tiny)).is_none());
}

#[tokio::test]
async fn when_the_recent_turns_fill_everything_there_is_nothing_to_summarise() {
    let visible: Vec<(u64, Message)> = vec![(0, Message::user_text("x".repeat(200_000)))];
    let state = counted(&visible);
    let model = Scripted::new(vec![]);
    let err = summary_step(&input(&state, &visible, Budget::new(24_000, 2_000)), &model)
        .await
        .unwrap_err();
    assert!(matches!(err, CompactError::Nothing));
    assert!(!err.counts_as_failure());
    assert!(model.prompts().is_empty());
}
