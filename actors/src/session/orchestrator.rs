//! The tool orchestrator: runs the tool calls of one assistant message and
//! returns one result per call, in call order. It owns the scheduling rule
//! (consecutive concurrency-safe calls in parallel, bounded; every other call
//! alone), what the model sees of an output (at most
//! [`MODEL_OUTPUT_LIMIT`] chars), the event preview ([`PREVIEW_CHARS`]) and
//! the answers for calls that never ran (unknown tool, cancel).
//!
//! It does not touch storage, session events or the permission policy: the
//! caller persists the results and turns [`OrchestratorEvent`]s into session
//! events; permission checks happen inside the tools.
//!
//! **Cancel**: when `ctx.cancel` fires, [`run_calls`] returns at once. Calls
//! that had not started get [`CANCELLED`]; running ones are dropped (not
//! awaited) and get [`CANCELLED`] plus a note that they may have had partial
//! effects. A tool must therefore not rely on being polled after the token
//! fires to clean up: what it started must die when its future is dropped
//! (e.g. a drop guard killing the process group).

use crate::llm::{Block, Message, Role, ToolCall};
use crate::tools::{Registry, ToolContext, ToolOutput};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::{FutureExt, future::BoxFuture};
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::time::Duration;
use tokio::time::Instant;

pub use crate::tools::model_output::{MODEL_OUTPUT_LIMIT, truncate_for_model};

/// Characters of a tool output shown in events.
pub const PREVIEW_CHARS: usize = 400;
/// Safe calls running at once. Reads are cheap but each may hold files and
/// threads; eight keeps a burst of calls from starving the daemon.
pub const MAX_PARALLEL: usize = 8;
/// Result of a call that was cancelled before it started.
pub const CANCELLED: &str = "[cancelled by user]";
/// Result of a call that was running when the run was cancelled.
pub const CANCELLED_RUNNING: &str =
    "[cancelled by user] (the call was running and may have had partial effects)";

/// The outcome of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    pub call_id: String,
    pub name: String,
    /// What the model gets: the tool's output, truncated to
    /// [`MODEL_OUTPUT_LIMIT`] chars.
    pub output: ToolOutput,
    /// Characters removed from the output by the truncation (0 if none).
    pub cut_chars: usize,
    /// When the call started; `None` when it never did (cancelled first).
    pub started: Option<Instant>,
    /// How long it ran (until it finished or was cancelled).
    pub duration: Duration,
}

impl CallResult {
    /// The block that answers the call in the transcript.
    pub fn to_block(&self) -> Block {
        Block::ToolResult {
            call_id: self.call_id.clone(),
            content: self.output.content.clone(),
            is_error: self.output.is_error,
        }
    }
}

/// The user message answering a turn's calls, results in call order.
pub fn results_message(results: &[CallResult]) -> Message {
    Message {
        role: Role::User,
        content: results.iter().map(CallResult::to_block).collect(),
    }
}

/// Progress of [`run_calls`], for session events. `Started` comes when a
/// call is handed to its tool (never for calls cancelled before that);
/// every call gets exactly one `Finished`, in completion order.
#[derive(Debug, Clone, PartialEq)]
pub enum OrchestratorEvent {
    Started {
        call_id: String,
        name: String,
        arguments: String,
    },
    Finished {
        call_id: String,
        name: String,
        /// The output's first [`PREVIEW_CHARS`] chars.
        preview: String,
        is_error: bool,
    },
}

enum Slot {
    Pending,
    Running(Instant),
    Done(CallResult),
}

/// Runs `calls` and returns one result per call, in call order. Maximal
/// runs of consecutive calls whose tool says `concurrency_safe` run in
/// parallel (at most [`MAX_PARALLEL`] at once); any other call runs alone,
/// after everything before it finished and before anything after it starts.
/// See the module doc for cancel.
pub async fn run_calls(
    registry: &Registry,
    ctx: &ToolContext,
    calls: &[ToolCall],
    mut on_event: impl FnMut(OrchestratorEvent),
) -> Vec<CallResult> {
    let mut slots: Vec<Slot> = calls.iter().map(|_| Slot::Pending).collect();
    let mut i = 0;
    while i < calls.len() {
        let mut end = i + 1;
        let limit = if is_safe(registry, &calls[i]) {
            while end < calls.len() && is_safe(registry, &calls[end]) {
                end += 1;
            }
            MAX_PARALLEL
        } else {
            1
        };
        let finished = run_group(
            registry,
            ctx,
            calls,
            i..end,
            limit,
            &mut slots,
            &mut on_event,
        )
        .await;
        if !finished {
            break;
        }
        i = end;
    }
    // Only a cancel leaves calls without a result.
    let mut results = Vec::with_capacity(calls.len());
    for (call, slot) in calls.iter().zip(slots) {
        let result = match slot {
            Slot::Done(result) => result,
            Slot::Pending => cancelled(call, CANCELLED, None, &mut on_event),
            Slot::Running(started) => {
                cancelled(call, CANCELLED_RUNNING, Some(started), &mut on_event)
            }
        };
        results.push(result);
    }
    results
}

/// An unknown tool counts as safe: its answer is immediate and touches
/// nothing, so it need not break up a parallel run.
fn is_safe(registry: &Registry, call: &ToolCall) -> bool {
    registry
        .get(&call.name)
        .is_none_or(|tool| tool.concurrency_safe(&call.arguments_json))
}

/// Runs `calls[range]`, at most `limit` at once. False when cancelled; the
/// in-flight futures are dropped on return, which stops them.
async fn run_group(
    registry: &Registry,
    ctx: &ToolContext,
    calls: &[ToolCall],
    range: Range<usize>,
    limit: usize,
    slots: &mut [Slot],
    on_event: &mut impl FnMut(OrchestratorEvent),
) -> bool {
    let mut next = range.start;
    let mut in_flight: FuturesUnordered<BoxFuture<'_, (usize, ToolOutput)>> =
        FuturesUnordered::new();
    loop {
        // Checked before starting anything, because the token may fire
        // while a completion is handled.
        if ctx.cancel.is_cancelled() {
            return false;
        }
        while in_flight.len() < limit && next < range.end {
            let k = next;
            next += 1;
            let call = &calls[k];
            on_event(OrchestratorEvent::Started {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments_json.clone(),
            });
            slots[k] = Slot::Running(Instant::now());
            in_flight.push(Box::pin(
                run_one(registry, ctx, call).map(move |out| (k, out)),
            ));
        }
        if in_flight.is_empty() {
            return true;
        }
        tokio::select! {
            // Cancel wins over a completion that is ready at the same time:
            // the run must stop promptly, not drain finished work first.
            biased;
            () = ctx.cancel.cancelled() => return false,
            Some((k, output)) = in_flight.next() => {
                let call = &calls[k];
                let started = match slots[k] {
                    Slot::Running(t) => t,
                    _ => Instant::now(),
                };
                let is_error = output.is_error;
                let (content, cut_chars) = truncate_for_model(output.content);
                on_event(OrchestratorEvent::Finished {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    preview: preview(&content),
                    is_error,
                });
                slots[k] = Slot::Done(CallResult {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    output: ToolOutput { content, is_error },
                    cut_chars,
                    started: Some(started),
                    duration: started.elapsed(),
                });
            }
        }
    }
}

/// One call. A panicking tool becomes an error result, so one bad tool
/// cannot take the whole run (and its other calls' results) down.
async fn run_one(registry: &Registry, ctx: &ToolContext, call: &ToolCall) -> ToolOutput {
    let Some(tool) = registry.get(&call.name) else {
        return unknown_tool(registry, &call.name);
    };
    if let Some(hooks) = &ctx.hooks
        && let Some(reason) = hooks.before(&call.name, &call.arguments_json).await
    {
        return ToolOutput::error(format!("blocked by a hook, the call did not run: {reason}"));
    }
    let output = call_tool(tool.as_ref(), ctx, call).await;
    if let Some(hooks) = &ctx.hooks {
        hooks.after(&call.name, &call.arguments_json, &output);
    }
    output
}

async fn call_tool(
    tool: &dyn crate::tools::Tool,
    ctx: &ToolContext,
    call: &ToolCall,
) -> ToolOutput {
    match AssertUnwindSafe(tool.call(ctx, &call.arguments_json))
        .catch_unwind()
        .await
    {
        Ok(output) => output,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!(tool = %call.name, panic = %what, "tool panicked");
            ToolOutput::error(format!(
                "tool `{}` failed internally ({what}); this is a bug in flyto, not in your call",
                call.name
            ))
        }
    }
}

fn unknown_tool(registry: &Registry, name: &str) -> ToolOutput {
    let names: Vec<&str> = registry.iter().map(|t| t.name()).collect();
    if names.is_empty() {
        ToolOutput::error(format!("unknown tool `{name}`: no tools are available"))
    } else {
        ToolOutput::error(format!(
            "unknown tool `{name}`; available tools: {}",
            names.join(", ")
        ))
    }
}

/// The result of a call stopped by cancel, with its `Finished` event.
fn cancelled(
    call: &ToolCall,
    text: &str,
    started: Option<Instant>,
    on_event: &mut impl FnMut(OrchestratorEvent),
) -> CallResult {
    on_event(OrchestratorEvent::Finished {
        call_id: call.id.clone(),
        name: call.name.clone(),
        preview: preview(text),
        is_error: true,
    });
    CallResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        output: ToolOutput::error(text),
        cut_chars: 0,
        started,
        duration: started.map(|t| t.elapsed()).unwrap_or_default(),
    }
}

/// At most [`PREVIEW_CHARS`] chars of `content`, ending in `…` when cut.
pub fn preview(content: &str) -> String {
    let mut chars = content.char_indices();
    match chars.nth(PREVIEW_CHARS) {
        None => content.to_string(),
        Some(_) => {
            let end = content
                .char_indices()
                .nth(PREVIEW_CHARS - 1)
                .map_or(content.len(), |(i, _)| i);
            let mut out = content.get(..end).unwrap_or_default().to_string();
            out.push('…');
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::model_output::cut_note;
    use crate::tools::{Tool, ToolFuture};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    /// Counts calls in flight across all tools of a test.
    #[derive(Default)]
    struct Probe {
        in_flight: AtomicUsize,
        max: AtomicUsize,
        invoked: AtomicUsize,
        /// Set when an unsafe call started while anything else ran.
        overlap: AtomicUsize,
        dropped: AtomicUsize,
    }

    /// Decrements the in-flight count even when the future is dropped; the
    /// flag stays set until the call finishes normally.
    struct Guard(Arc<Probe>, bool);

    impl Guard {
        fn enter(probe: &Arc<Probe>, exclusive: bool) -> Guard {
            probe.invoked.fetch_add(1, Ordering::SeqCst);
            let now = probe.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            probe.max.fetch_max(now, Ordering::SeqCst);
            if exclusive && now > 1 {
                probe.overlap.fetch_add(1, Ordering::SeqCst);
            }
            Guard(probe.clone(), true)
        }
        fn leave(mut self) {
            self.1 = false;
        }
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
            if self.1 {
                // Still armed: dropped before it finished.
                self.0.dropped.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    fn arg(args: &str, key: &str) -> Option<serde_json::Value> {
        serde_json::from_str::<serde_json::Value>(args)
            .ok()?
            .get(key)
            .cloned()
    }

    /// `sleep`: sleeps `ms` (virtual time) and answers `done <ms>`; safe
    /// when its arguments say `"safe": true`. `out` sets the output length.
    struct Sleep(Arc<Probe>);

    impl Tool for Sleep {
        fn name(&self) -> &'static str {
            "sleep"
        }
        fn description(&self) -> &'static str {
            "sleeps"
        }
        fn input_schema(&self) -> &'static str {
            "{}"
        }
        fn concurrency_safe(&self, args: &str) -> bool {
            arg(args, "safe").and_then(|v| v.as_bool()).unwrap_or(false)
        }
        fn call<'a>(&'a self, _: &'a ToolContext, args: &'a str) -> ToolFuture<'a> {
            Box::pin(async move {
                let guard = Guard::enter(&self.0, !self.concurrency_safe(args));
                let ms = arg(args, "ms").and_then(|v| v.as_u64()).unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                guard.leave();
                match arg(args, "out").and_then(|v| v.as_u64()) {
                    Some(n) => ToolOutput::ok(
                        (0..n)
                            .map(|i| char::from(b'a' + (i % 26) as u8))
                            .collect::<String>(),
                    ),
                    None => ToolOutput::ok(format!("done {ms}")),
                }
            })
        }
    }

    /// `block`: says it started, then never finishes on its own (it
    /// ignores the token on purpose, to prove the orchestrator does not
    /// wait for it).
    struct Blocker {
        probe: Arc<Probe>,
        started: mpsc::UnboundedSender<()>,
        safe: bool,
    }

    impl Tool for Blocker {
        fn name(&self) -> &'static str {
            "block"
        }
        fn description(&self) -> &'static str {
            "blocks"
        }
        fn input_schema(&self) -> &'static str {
            "{}"
        }
        fn concurrency_safe(&self, _: &str) -> bool {
            self.safe
        }
        fn call<'a>(&'a self, _: &'a ToolContext, _: &'a str) -> ToolFuture<'a> {
            Box::pin(async move {
                let _guard = Guard::enter(&self.probe, !self.safe);
                let _ = self.started.send(());
                std::future::pending::<()>().await;
                ToolOutput::ok("unreachable")
            })
        }
    }

    /// `wait_cancel`: a well-behaved long tool that stops when the token
    /// fires.
    struct WaitCancel;

    impl Tool for WaitCancel {
        fn name(&self) -> &'static str {
            "wait_cancel"
        }
        fn description(&self) -> &'static str {
            "waits"
        }
        fn input_schema(&self) -> &'static str {
            "{}"
        }
        fn concurrency_safe(&self, _: &str) -> bool {
            false
        }
        fn call<'a>(&'a self, ctx: &'a ToolContext, _: &'a str) -> ToolFuture<'a> {
            Box::pin(async move {
                ctx.cancel.cancelled().await;
                ToolOutput::error("stopped")
            })
        }
    }

    struct Panic;

    impl Tool for Panic {
        fn name(&self) -> &'static str {
            "panic"
        }
        fn description(&self) -> &'static str {
            "panics"
        }
        fn input_schema(&self) -> &'static str {
            "{}"
        }
        fn concurrency_safe(&self, _: &str) -> bool {
            true
        }
        fn call<'a>(&'a self, _: &'a ToolContext, _: &'a str) -> ToolFuture<'a> {
            Box::pin(async move { panic!("boom") })
        }
    }

    struct Fixture {
        registry: Registry,
        ctx: ToolContext,
        probe: Arc<Probe>,
        started: mpsc::UnboundedReceiver<()>,
    }

    fn fixture(block_safe: bool) -> Fixture {
        let probe = Arc::new(Probe::default());
        let (tx, rx) = mpsc::unbounded_channel();
        let registry = Registry::new(vec![
            Arc::new(Sleep(probe.clone())),
            Arc::new(Blocker {
                probe: probe.clone(),
                started: tx,
                safe: block_safe,
            }),
            Arc::new(WaitCancel),
            Arc::new(Panic),
        ]);
        let ctx = ToolContext {
            workdir: std::env::temp_dir(),
            env: vec![],
            cancel: CancellationToken::new(),
            approver: None,
            sandbox: None,
            hooks: None,
        };
        Fixture {
            registry,
            ctx,
            probe,
            started: rx,
        }
    }

    fn call(id: &str, name: &str, args: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments_json: args.into(),
        }
    }

    fn sleep(id: &str, ms: u64, safe: bool) -> ToolCall {
        call(id, "sleep", &format!(r#"{{"ms":{ms},"safe":{safe}}}"#))
    }

    fn ids(results: &[CallResult]) -> Vec<&str> {
        results.iter().map(|r| r.call_id.as_str()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn consecutive_safe_calls_run_in_parallel() {
        let f = fixture(false);
        let calls = [
            sleep("a", 1000, true),
            sleep("b", 1000, true),
            sleep("c", 1000, true),
        ];
        let t0 = Instant::now();
        let results = run_calls(&f.registry, &f.ctx, &calls, |_| {}).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(1));
        assert_eq!(f.probe.max.load(Ordering::SeqCst), 3);
        assert_eq!(ids(&results), ["a", "b", "c"]);
        assert!(results.iter().all(|r| r.output.content == "done 1000"));
        assert!(results.iter().all(|r| r.duration == Duration::from_secs(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn parallelism_is_bounded() {
        let f = fixture(false);
        let calls: Vec<ToolCall> = (0..20)
            .map(|i| sleep(&format!("c{i}"), 1000, true))
            .collect();
        let t0 = Instant::now();
        let results = run_calls(&f.registry, &f.ctx, &calls, |_| {}).await;
        assert_eq!(f.probe.max.load(Ordering::SeqCst), MAX_PARALLEL);
        // 8 + 8 + 4.
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
        assert_eq!(results.len(), 20);
        assert_eq!(results[19].call_id, "c19");
    }

    #[tokio::test(start_paused = true)]
    async fn unsafe_calls_run_one_at_a_time() {
        let f = fixture(false);
        let calls = [
            sleep("a", 1000, false),
            sleep("b", 1000, false),
            sleep("c", 1000, false),
        ];
        let t0 = Instant::now();
        let results = run_calls(&f.registry, &f.ctx, &calls, |_| {}).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
        assert_eq!(f.probe.max.load(Ordering::SeqCst), 1);
        assert_eq!(ids(&results), ["a", "b", "c"]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unsafe_call_splits_the_parallel_runs() {
        let f = fixture(false);
        let calls = [
            sleep("s1", 1000, true),
            sleep("s2", 1000, true),
            sleep("u", 1000, false),
            sleep("s3", 1000, true),
            sleep("s4", 1000, true),
        ];
        let t0 = Instant::now();
        let results = run_calls(&f.registry, &f.ctx, &calls, |_| {}).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
        assert_eq!(f.probe.max.load(Ordering::SeqCst), 2);
        assert_eq!(f.probe.overlap.load(Ordering::SeqCst), 0);
        assert_eq!(ids(&results), ["s1", "s2", "u", "s3", "s4"]);
    }

    #[tokio::test(start_paused = true)]
    async fn results_keep_call_order_whatever_finishes_first() {
        let f = fixture(false);
        let calls = [
            sleep("slow", 300, true),
            sleep("fast", 100, true),
            sleep("mid", 200, true),
        ];
        let mut events = vec![];
        let results = run_calls(&f.registry, &f.ctx, &calls, |e| events.push(e)).await;
        assert_eq!(ids(&results), ["slow", "fast", "mid"]);
        assert_eq!(results[0].output.content, "done 300");
        assert_eq!(results[1].duration, Duration::from_millis(100));
        let started: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                OrchestratorEvent::Started { call_id, .. } => Some(call_id.as_str()),
                _ => None,
            })
            .collect();
        let finished: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                OrchestratorEvent::Finished { call_id, .. } => Some(call_id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(started, ["slow", "fast", "mid"]);
        assert_eq!(finished, ["fast", "mid", "slow"]);
        assert_eq!(
            events[0],
            OrchestratorEvent::Started {
                call_id: "slow".into(),
                name: "sleep".into(),
                arguments: r#"{"ms":300,"safe":true}"#.into(),
            }
        );
    }

    #[tokio::test]
    async fn unknown_tool_names_the_available_ones() {
        let f = fixture(false);
        let calls = [call("x", "nope", "{}"), sleep("a", 0, false)];
        let mut events = vec![];
        let results = run_calls(&f.registry, &f.ctx, &calls, |e| events.push(e)).await;
        assert!(results[0].output.is_error);
        assert_eq!(
            results[0].output.content,
            "unknown tool `nope`; available tools: sleep, block, wait_cancel, panic"
        );
        assert_eq!(results[1].output.content, "done 0");
        assert!(events.contains(&OrchestratorEvent::Finished {
            call_id: "x".into(),
            name: "nope".into(),
            preview: results[0].output.content.clone(),
            is_error: true,
        }));

        let empty = Registry::default();
        let results = run_calls(&empty, &f.ctx, &calls[..1], |_| {}).await;
        assert_eq!(
            results[0].output.content,
            "unknown tool `nope`: no tools are available"
        );
    }

    #[tokio::test]
    async fn a_panicking_tool_is_an_error_result() {
        let f = fixture(false);
        let calls = [call("p", "panic", "{}"), sleep("a", 0, true)];
        let results = run_calls(&f.registry, &f.ctx, &calls, |_| {}).await;
        assert!(results[0].output.is_error);
        assert!(results[0].output.content.contains("boom"));
        assert_eq!(results[1].output.content, "done 0");
    }

    #[tokio::test]
    async fn long_outputs_are_truncated_for_the_model() {
        let f = fixture(false);
        let calls = [call("big", "sleep", r#"{"out":40000}"#)];
        let mut previews = vec![];
        let results = run_calls(&f.registry, &f.ctx, &calls, |e| {
            if let OrchestratorEvent::Finished { preview, .. } = e {
                previews.push(preview);
            }
        })
        .await;
        let r = &results[0];
        let full: String = (0..40000u32)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let kept = r.output.content.chars().count() - cut_note(r.cut_chars).len();
        assert!(r.output.content.chars().count() <= MODEL_OUTPUT_LIMIT);
        assert_eq!(kept + r.cut_chars, 40000);
        assert!(
            r.output
                .content
                .contains(&format!("[... {} characters cut here ...]", r.cut_chars))
        );
        assert!(r.output.content.starts_with(&full[..7000]));
        assert!(r.output.content.ends_with(&full[40000 - 7000..]));
        assert_eq!(previews.len(), 1);
        assert_eq!(previews[0].chars().count(), PREVIEW_CHARS);
        assert!(previews[0].ends_with('…'));
    }

    #[test]
    fn previews_are_short() {
        assert_eq!(preview("short"), "short");
        let exact = "ü".repeat(PREVIEW_CHARS);
        assert_eq!(preview(&exact), exact);
        let p = preview(&"ü".repeat(PREVIEW_CHARS + 1));
        assert_eq!(p.chars().count(), PREVIEW_CHARS);
        assert!(p.ends_with('…'));
    }

    /// Cancels `ctx` once `n` calls have said they started.
    async fn cancel_after(started: &mut mpsc::UnboundedReceiver<()>, n: usize, ctx: &ToolContext) {
        for _ in 0..n {
            let _ = started.recv().await;
        }
        ctx.cancel.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn cancel_answers_every_call_at_once() {
        let mut f = fixture(false);
        let calls = [
            sleep("done", 10, false),
            call("running", "block", "{}"),
            sleep("later", 10, false),
            sleep("later_safe", 10, true),
        ];
        let mut events = vec![];
        let t0 = Instant::now();
        let (results, ()) = tokio::join!(
            run_calls(&f.registry, &f.ctx, &calls, |e| events.push(e)),
            cancel_after(&mut f.started, 1, &f.ctx),
        );
        // Nothing waited for the blocked tool, and no time passed beyond
        // the first call's 10 ms.
        assert_eq!(t0.elapsed(), Duration::from_millis(10));
        assert_eq!(ids(&results), ["done", "running", "later", "later_safe"]);
        assert_eq!(results[0].output, ToolOutput::ok("done 10"));
        assert_eq!(results[1].output, ToolOutput::error(CANCELLED_RUNNING));
        assert!(results[1].started.is_some());
        assert_eq!(results[2].output, ToolOutput::error(CANCELLED));
        assert_eq!(results[3].output, ToolOutput::error(CANCELLED));
        assert!(results[2].started.is_none());
        // The running future was dropped; the later calls never started.
        assert_eq!(f.probe.dropped.load(Ordering::SeqCst), 1);
        assert_eq!(f.probe.invoked.load(Ordering::SeqCst), 2);
        assert_eq!(f.probe.in_flight.load(Ordering::SeqCst), 0);
        let finished = events
            .iter()
            .filter(|e| matches!(e, OrchestratorEvent::Finished { .. }))
            .count();
        let started = events
            .iter()
            .filter(|e| matches!(e, OrchestratorEvent::Started { .. }))
            .count();
        assert_eq!((started, finished), (2, 4));
    }

    #[tokio::test(start_paused = true)]
    async fn cancel_drops_a_whole_parallel_run() {
        let mut f = fixture(true);
        let calls = [
            call("b1", "block", "{}"),
            call("b2", "block", "{}"),
            call("b3", "block", "{}"),
            sleep("after", 10, false),
        ];
        let (results, ()) = tokio::join!(
            run_calls(&f.registry, &f.ctx, &calls, |_| {}),
            cancel_after(&mut f.started, 3, &f.ctx),
        );
        assert_eq!(f.probe.max.load(Ordering::SeqCst), 3);
        assert_eq!(f.probe.dropped.load(Ordering::SeqCst), 3);
        assert_eq!(ids(&results), ["b1", "b2", "b3", "after"]);
        for r in &results[..3] {
            assert_eq!(r.output, ToolOutput::error(CANCELLED_RUNNING));
        }
        assert_eq!(results[3].output, ToolOutput::error(CANCELLED));
    }

    #[tokio::test]
    async fn a_tool_watching_the_token_is_cancelled_too() {
        let f = fixture(false);
        let calls = [call("w", "wait_cancel", "{}")];
        let token = f.ctx.cancel.clone();
        let (results, ()) = tokio::join!(run_calls(&f.registry, &f.ctx, &calls, |_| {}), async {
            tokio::task::yield_now().await;
            token.cancel();
        });
        assert_eq!(results[0].output, ToolOutput::error(CANCELLED_RUNNING));
    }

    #[tokio::test]
    async fn cancelled_before_the_start_runs_nothing() {
        let f = fixture(false);
        f.ctx.cancel.cancel();
        let calls = [sleep("a", 10, true), sleep("b", 10, false)];
        let mut events = vec![];
        let results = run_calls(&f.registry, &f.ctx, &calls, |e| events.push(e)).await;
        assert_eq!(f.probe.invoked.load(Ordering::SeqCst), 0);
        assert_eq!(ids(&results), ["a", "b"]);
        assert!(
            results
                .iter()
                .all(|r| r.output == ToolOutput::error(CANCELLED))
        );
        assert_eq!(events.len(), 2);
        assert!(
            matches!(&events[0], OrchestratorEvent::Finished { call_id, is_error: true, .. } if call_id == "a")
        );
    }

    #[test]
    fn results_message_answers_in_order() {
        let r = |id: &str| CallResult {
            call_id: id.into(),
            name: "sleep".into(),
            output: ToolOutput::ok(format!("out {id}")),
            cut_chars: 0,
            started: None,
            duration: Duration::ZERO,
        };
        let m = results_message(&[r("a"), r("b")]);
        assert_eq!(m.role, Role::User);
        assert_eq!(
            m.content,
            vec![
                Block::ToolResult {
                    call_id: "a".into(),
                    content: "out a".into(),
                    is_error: false
                },
                Block::ToolResult {
                    call_id: "b".into(),
                    content: "out b".into(),
                    is_error: false
                },
            ]
        );
    }

    #[tokio::test]
    async fn no_calls_no_results() {
        let f = fixture(false);
        let results = run_calls(&f.registry, &f.ctx, &[], |_| {}).await;
        assert!(results.is_empty());
    }
}
