//! A session's context budget in the agent loop: loading the model-visible
//! window, counting it, warning, and compacting it (cheap step, then the
//! tiered summary through the `fast` role, behind the project's circuit
//! breaker). The compaction logic itself is in `crate::compaction`; this
//! file persists its results and reports them as events.

use super::SessionDeps;
use super::model::SessionRecord;
use super::run::Emitter;
use crate::compaction::breaker::{self, Gate, Outcome};
use crate::compaction::estimate::message_tokens;
use crate::compaction::{Applied, Budget, CompactError, Input, Summarizer, SummaryFuture};
use crate::compaction::{summary_step, trim_step};
use crate::llm::{ChatRequest, LlmClient, Message, Models, Route, Usage};
use flyto_protocol::SessionEvent;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// The budget of the session's model; None when it names no profile.
pub fn budget(models: &Models, model: &str) -> Option<Budget> {
    super::route_for(models, model)
        .ok()
        .map(|r| Budget::for_profile(&r.primary.profile))
}

/// The model-visible window: protected head, summary, and the messages
/// from `context_base_idx` on, old tool output shortened.
pub fn load_window(deps: &SessionDeps, rec: &SessionRecord) -> Result<Vec<Message>, String> {
    let (head, tail) = load_parts(deps, rec)?;
    let mut window = rec.context.window(rec.context_base_idx, &head, &tail);
    restore_skills(deps, rec, &head, &tail, &mut window);
    Ok(window)
}

/// A skill the model loaded before a compaction stays in the window
/// exactly once: its body follows the summary, unless the head or the
/// kept tail still holds that `load_skill` call.
fn restore_skills(
    deps: &SessionDeps,
    rec: &SessionRecord,
    head: &[(u64, Message)],
    tail: &[(u64, Message)],
    window: &mut [Message],
) {
    use crate::compaction::SKILL_PIN;
    use crate::llm::Block;
    if rec.context.summary.is_none() {
        return;
    }
    let visible: Vec<(u64, Message)> = head.iter().chain(tail).cloned().collect();
    let still_there = crate::compaction::summary_skill_pins(&visible);
    let names: Vec<&str> = rec
        .context
        .pinned
        .iter()
        .filter_map(|p| p.strip_prefix(SKILL_PIN))
        .filter(|n| {
            !still_there
                .iter()
                .any(|p| p.strip_prefix(SKILL_PIN) == Some(n))
        })
        .collect();
    if names.is_empty() {
        return;
    }
    let workdir =
        std::fs::canonicalize(&rec.workdir).unwrap_or_else(|_| rec.workdir.clone().into());
    let set = deps.skills.for_workdir(&workdir);
    let mut text = String::new();
    for name in names {
        match set.get(name) {
            Some(skill) => text.push_str(&format!(
                "\n## Skill `{name}`, loaded earlier (kept through the compaction)\n{}\n",
                skill.parsed.body
            )),
            None => text.push_str(&format!(
                "\n## Skill `{name}` was loaded earlier but is no longer available\n"
            )),
        }
    }
    // The summary is the window's text block that starts with the marker.
    for m in window.iter_mut() {
        for b in m.content.iter_mut() {
            if let Block::Text { text: t } = b
                && t.starts_with("[flyto: summary of the earlier conversation")
            {
                t.push_str(&text);
                return;
            }
        }
    }
}

type Indexed = Vec<(u64, Message)>;

fn load_parts(deps: &SessionDeps, rec: &SessionRecord) -> Result<(Indexed, Indexed), String> {
    let c = &rec.context;
    let head = if c.summary.is_some() {
        deps.store
            .messages_range(rec.id, c.head_start_idx, c.head_end_idx)
            .map_err(|e| format!("cannot load the transcript: {e}"))?
    } else {
        Vec::new()
    };
    let tail = deps
        .store
        .messages(rec.id, rec.context_base_idx)
        .map_err(|e| format!("cannot load the transcript: {e}"))?;
    Ok((head, tail))
}

/// Counts messages appended to the window.
pub fn count_appended(rec: &mut SessionRecord, messages: &[Message]) {
    rec.context.estimated_tokens += messages.iter().map(message_tokens).sum::<u64>();
}

/// After a provider call: its reported usage is the window's size.
pub fn count_usage(rec: &mut SessionRecord, usage: &Usage) {
    let reported = usage.input_tokens + usage.output_tokens;
    if reported > 0 {
        rec.context.counted_tokens = reported;
        rec.context.estimated_tokens = 0;
    }
}

/// The `fast` role, for summaries. Cancel drops the call.
struct LlmSummarizer<'a> {
    llm: &'a LlmClient,
    route: Route,
    cancel: CancellationToken,
    /// Usage of every call that answered, also when the compaction failed
    /// afterwards (no shrink, a later tier's error): it was paid for.
    spent: std::sync::Mutex<Usage>,
}

impl LlmSummarizer<'_> {
    fn spent(&self) -> std::sync::MutexGuard<'_, Usage> {
        self.spent.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Summarizer for LlmSummarizer<'_> {
    fn call(&self, request: ChatRequest) -> SummaryFuture<'_> {
        Box::pin(async move {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => Err(crate::llm::LlmError::Connection {
                    detail: "cancelled".into(),
                }),
                r = self.llm.complete(&self.route, request) => {
                    r.map(|a| {
                        let usage = a.usage.unwrap_or_default();
                        self.spent().add(&usage);
                        (a.text, usage)
                    })
                }
            }
        })
    }
    fn input_window(&self) -> u64 {
        Budget::for_profile(&self.route.primary.profile).effective
    }
}

/// What a run remembers between budget checks.
#[derive(Debug, Default)]
pub struct RunFlags {
    /// The warning was shown.
    pub warned: bool,
    /// A compaction failed.
    pub failed: bool,
    /// What this run's summary calls cost: they count towards
    /// `max_run_cost_usd` like the run's own model calls.
    pub summary_cost_usd: f64,
}

/// What the loop does after a budget check.
pub enum Checked {
    /// Under the threshold, or compacted: go on (reload the window if so).
    Go {
        compacted: bool,
    },
    /// Compaction was not possible but the context still fits.
    GoWithout,
    Cancelled,
    /// A forced compaction found nothing to summarise.
    Nothing,
    /// The context no longer fits and cannot be compacted now.
    Stop {
        stop: &'static str,
        message: String,
    },
    /// The compacted session could not be saved: the run fails.
    Failed(String),
}

pub struct Check<'a> {
    pub deps: &'a SessionDeps,
    pub route: &'a Route,
    pub workdir: &'a str,
    /// System prompt and tool schemas, estimated.
    pub fixed_tokens: u64,
    pub cancel: &'a CancellationToken,
    pub emit: &'a Emitter,
    /// `pre_compact` hooks hear of each compaction.
    pub hooks: Option<&'a super::run::SessionHooks>,
}

impl Check<'_> {
    /// Checks the budget before a provider call; compacts past the
    /// threshold, or always when `force` (a manual compaction or a
    /// provider that said the prompt is too long).
    pub async fn run(&self, rec: &mut SessionRecord, force: bool, run: &mut RunFlags) -> Checked {
        let budget = Budget::for_profile(&self.route.primary.profile);
        let tokens = rec.context.tokens();
        let warned = &mut run.warned;
        // One failed compaction per run is enough while the context fits:
        // trying again before every call would burn money.
        if !force && run.failed && tokens < budget.effective {
            return Checked::GoWithout;
        }
        if !force && tokens < budget.compact_at {
            if tokens >= budget.warn_at && !*warned {
                *warned = true;
                self.emit.emit(SessionEvent::Notice {
                    message: format!(
                        "the context holds about {tokens} tokens of {}; it will be compacted at {}",
                        budget.effective, budget.compact_at
                    ),
                });
            }
            return Checked::Go { compacted: false };
        }
        self.emit.emit(SessionEvent::CompactStarted {
            tokens,
            compact_at: budget.compact_at,
        });
        if let Some(h) = self.hooks {
            h.background(
                crate::hooks::HookEvent::PreCompact,
                serde_json::json!({ "tokens": tokens, "compact_at": budget.compact_at }),
            );
        }
        let started = Instant::now();
        let (head, visible) = match load_parts(self.deps, rec) {
            Ok(p) => p,
            Err(e) => return self.failed(tokens, budget, e, false),
        };
        let input = Input {
            budget,
            state: &rec.context,
            base_idx: rec.context_base_idx,
            fixed_tokens: self.fixed_tokens,
            head: &head,
            visible: &visible,
        };
        if let Some(applied) = trim_step(&input) {
            return self.applied(rec, applied, started);
        }
        let project = breaker::project_id(self.workdir);
        if let Gate::Open {
            failures,
            last_error,
            reset_at_ms,
        } = breaker::check(&project).await
        {
            let message = open_message(&project, failures, &last_error, reset_at_ms);
            return self.failed(tokens, budget, message, true);
        }
        let fast = match self.deps.models().route("fast") {
            Ok(r) => r,
            Err(e) => return self.failed(tokens, budget, e.to_string(), false),
        };
        let summarizer = LlmSummarizer {
            llm: &self.deps.llm,
            route: fast,
            cancel: self.cancel.clone(),
            spent: std::sync::Mutex::new(Usage::default()),
        };
        let result = summary_step(&input, &summarizer).await;
        let spent = *summarizer.spent();
        let cost = summarizer.route.primary.profile.cost(&spent);
        rec.usage.add(&spent);
        rec.cost_usd += cost;
        run.summary_cost_usd += cost;
        if self.cancel.is_cancelled() {
            return Checked::Cancelled;
        }
        match result {
            Ok(applied) => {
                breaker::record(&project, self.workdir, Outcome::Success).await;
                self.applied(rec, applied, started)
            }
            Err(CompactError::Nothing) if force && tokens < budget.effective => {
                self.emit.emit(SessionEvent::Notice {
                    message: "nothing to summarise yet: the window holds only the first exchange and the latest turns".into(),
                });
                Checked::Nothing
            }
            Err(e) => {
                let outcome = if e.counts_as_failure() {
                    Outcome::Failure {
                        error: e.to_string(),
                    }
                } else {
                    Outcome::Ignored
                };
                let gate = breaker::record(&project, self.workdir, outcome).await;
                let mut message = e.to_string();
                let open = matches!(gate, Gate::Open { .. });
                if let Gate::Open {
                    failures,
                    last_error,
                    reset_at_ms,
                } = gate
                {
                    message = format!(
                        "{message}; {}",
                        open_message(&project, failures, &last_error, reset_at_ms)
                    );
                }
                run.failed = true;
                self.failed(tokens, budget, message, open)
            }
        }
    }

    fn applied(&self, rec: &mut SessionRecord, applied: Applied, started: Instant) -> Checked {
        rec.context = applied.state;
        rec.context_base_idx = applied.base_idx;
        rec.updated_ms = self.deps.clock.now_ms();
        if let Err(e) = self.deps.store.save(rec, &[], false) {
            return Checked::Failed(format!("cannot save the compacted session: {e}"));
        }
        self.emit.emit(SessionEvent::Compacted {
            before_tokens: applied.before,
            after_tokens: applied.after,
            tier: applied.tier.into(),
            duration_ms: started.elapsed().as_millis() as u64,
        });
        Checked::Go { compacted: true }
    }

    fn failed(&self, tokens: u64, budget: Budget, message: String, breaker_open: bool) -> Checked {
        self.emit.emit(SessionEvent::CompactFailed {
            message: message.clone(),
            breaker_open,
        });
        if tokens < budget.effective {
            return Checked::GoWithout;
        }
        Checked::Stop {
            stop: if breaker_open {
                "breaker_open"
            } else {
                "compact_failed"
            },
            message: format!(
                "stopped: the context ({tokens} tokens) no longer fits the model's window ({}) and compaction failed: {message}",
                budget.effective
            ),
        }
    }
}

fn open_message(project: &str, failures: u32, last_error: &str, reset_at_ms: u64) -> String {
    format!(
        "the compaction breaker of this project ({project}) is open after {failures} failed compactions (last: {last_error}); it retries by itself at {} UTC, or run `flytoctl breaker_reset {project}` to retry now",
        clock_time(reset_at_ms)
    )
}

/// `HH:MM:SS` of a time in ms since the epoch (UTC).
fn clock_time(ms: u64) -> String {
    let s = ms / 1000;
    format!("{:02}:{:02}:{:02}", (s / 3600) % 24, (s / 60) % 60, s % 60)
}
