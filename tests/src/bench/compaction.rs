//! The `compaction` benchmark: what keeping one long session under its
//! context window costs. In process (no daemon, no HTTP): it measures the
//! policy, not the transport.
//!
//! 1. Cost: a scripted session (seeded, deterministic) of `turns` turns,
//!    each a user message, a tool call, its result and an answer: two main
//!    model calls a turn (the one that makes the tool call, the one that
//!    answers). Before each main call runs the policy of the session loop
//!    (`actors/src/session/context.rs`): at `compact_at`, the cheap step
//!    (`trim_step`), and when that is not enough the tiered summary
//!    (`summary_step`) through a scripted summariser. In the same run, a
//!    naive policy fed the same messages summarises its whole window in
//!    one call each time it crosses the same threshold and keeps only the
//!    summary. Provider calls and tokens of both, and the ratios.
//! 2. The daemon-side time of one compaction decision on a 1,000-message
//!    session (recount, `trim_step`, `summary_step` with an instant
//!    summariser), next to a plain clone of the 1,000 messages.

use crate::{machine, percentile};
use anyhow::{Context, bail};
use flyto_actors::compaction::estimate::{message_tokens, messages_tokens, request_tokens};
use flyto_actors::compaction::{
    Applied, Budget, CompactError, ContextState, Input, Summarizer, SummaryFuture, summary_step,
    trim_step,
};
use flyto_actors::llm::{Block, ChatRequest, LlmError, Message, Role, ToolSpec, Usage};
use flyto_actors::tools::policy::{PermissionsConfig, Policy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// What the `compaction` benchmark runs.
pub struct Args {
    pub turns: usize,
    pub decisions: usize,
}

const SEED: u64 = 0x5eed_c0de;
/// The model profile of the session (and of the `fast` summariser).
const CONTEXT_WINDOW: u64 = 128_000;
const MAX_OUTPUT: u64 = 8_192;
/// The scripted summariser writes min(this, input / 8) tokens.
const SUMMARY_CAP: u64 = 2_000;
const DECISION_MESSAGES: usize = 1_000;
const DECISION_WARMUP: usize = 10;

/// Stands in for the session's system prompt (private to the session
/// loop), at about its length.
const SYSTEM_PROMPT: &str = "You are Flyto, an agent working for the user on their Linux machine while they do something else. \
Work in the given working directory with your tools: read, write and edit files, search with glob and grep, run shell commands with bash. \
Be careful with destructive commands. When the task is done, answer with a short summary of what you did and what is left.\n\n\
# Environment\n- working directory: /home/user/projects/flyto-bench\n- date: 2025-01-01\n- OS: linux (x86_64)";

const NAIVE_SYSTEM: &str =
    "You compact the conversation of a coding agent. Summarise the whole conversation above.";

pub fn run(args: &Args) -> anyhow::Result<()> {
    let total = Instant::now();
    machine();
    if cfg!(debug_assertions) {
        println!(
            "WARNING: a debug build; the timings are meaningless. Run `cargo run --release -p flyto-tests --bin flyto-bench -- compaction`"
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .context("tokio current-thread runtime")?;
    let budget = Budget::new(CONTEXT_WINDOW, MAX_OUTPUT);
    let (fixed, tools) = fixed_tokens()?;
    println!(
        "\n== compaction: model context_window {CONTEXT_WINDOW}, max_output {MAX_OUTPUT} -> effective window {}, warn_at {}, compact_at {}; system prompt + the {tools} builtin tool schemas {fixed} tokens (estimate) ==",
        budget.effective, budget.warn_at, budget.compact_at
    );
    cost(&rt, budget, fixed, args.turns)?;
    decision(&rt, budget, fixed, args.decisions)?;
    println!("compaction done in {:.1}s", total.elapsed().as_secs_f64());
    Ok(())
}

/// Tokens every main call spends before the first message: the system
/// prompt and the real schemas of the builtin tools; and how many tools.
fn fixed_tokens() -> anyhow::Result<(u64, usize)> {
    let policy =
        Policy::new(&PermissionsConfig::default(), None).context("the default bash policy")?;
    let tools: Vec<ToolSpec> =
        flyto_actors::tools::builtin::all(Arc::new(RwLock::new(Arc::new(policy))))
            .iter()
            .map(|t| ToolSpec {
                name: t.name().into(),
                description: t.description().into(),
                input_schema_json: t.input_schema().into(),
            })
            .collect();
    Ok((request_tokens(SYSTEM_PROMPT, &tools, &[]), tools.len()))
}

// ---------------------------------------------------------------- script

/// The vocabulary of the scripted texts.
const WORDS: &str = "the module config function returns error value handler request session test \
build cache parse index file line struct field update check and of to in for with when then is \
not a must never always only prefer retry timeout queue worker schema migration deploy log token \
client server response option default";

/// The scripted session: seeded, so both policies and every run see the
/// same messages.
struct Script {
    rng: StdRng,
    words: Vec<&'static str>,
    turn: u64,
}

impl Script {
    fn new(seed: u64) -> Script {
        Script {
            rng: StdRng::seed_from_u64(seed),
            words: WORDS.split_whitespace().collect(),
            turn: 0,
        }
    }

    /// Words, sentences, now and then a path or a number; exactly `chars`
    /// ASCII characters.
    fn text(&mut self, chars: usize) -> String {
        let mut s = String::with_capacity(chars + 40);
        let mut n = 0u32;
        while s.len() < chars {
            if !s.is_empty() {
                s.push_str(if n.is_multiple_of(12) { ". " } else { " " });
            }
            match self.rng.gen_range(0..40) {
                0 => {
                    let (a, b) = (self.word(), self.word());
                    s.push_str(&format!("src/{a}/{b}.rs"));
                }
                1 => {
                    let v: u32 = self.rng.gen_range(0..100_000);
                    s.push_str(&v.to_string());
                }
                _ => {
                    let w = self.word();
                    s.push_str(w);
                }
            }
            n += 1;
        }
        s.truncate(chars);
        s
    }

    fn word(&mut self) -> &'static str {
        self.words[self.rng.gen_range(0..self.words.len())]
    }

    /// A length between `lo` and `hi`, log-uniform: mostly short, a long
    /// tail.
    fn long_tailed(&mut self, lo: usize, hi: usize) -> usize {
        let x: f64 = self.rng.gen_range((lo as f64).ln()..(hi as f64).ln());
        (x.exp() as usize).clamp(lo, hi)
    }

    /// One turn: user message (50–400 chars), tool call (arguments 50–2,000
    /// chars; one in ten a `write` of 2,000–12,000 chars), its result
    /// (100–16,000 chars, long-tailed; a `write` answers briefly), answer
    /// (100–1,500 chars).
    fn turn(&mut self) -> [Message; 4] {
        self.turn += 1;
        let id = format!("call_{}", self.turn);
        let n = self.rng.gen_range(50..=400);
        let user = Message::user_text(self.text(n));
        let write = self.rng.gen_bool(0.1);
        let (name, args) = if write {
            let path = format!("src/{}/{}.rs", self.word(), self.word());
            let n = self.rng.gen_range(2_000..=12_000);
            let content = self.text(n);
            (
                "write",
                serde_json::json!({ "path": path, "content": content }),
            )
        } else {
            let (name, key) = match self.rng.gen_range(0..4) {
                0 => ("read", "path"),
                1 => ("grep", "pattern"),
                2 => ("edit", "new_string"),
                _ => ("bash", "command"),
            };
            // The JSON framing around the value is about 15 characters.
            let n = self.long_tailed(50, 2_000).saturating_sub(15).max(10);
            (name, serde_json::json!({ key: self.text(n) }))
        };
        let call = Message {
            role: Role::Assistant,
            content: vec![Block::ToolUse {
                id: id.clone(),
                name: name.into(),
                arguments_json: args.to_string(),
            }],
        };
        let content = if write {
            let n = self.rng.gen_range(100..=200);
            self.text(n)
        } else {
            let n = self.long_tailed(100, 16_000);
            self.text(n)
        };
        let result = Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                call_id: id,
                content,
                is_error: false,
            }],
        };
        let n = self.rng.gen_range(100..=1_500);
        let answer = Message::assistant_text(self.text(n));
        [user, call, result, answer]
    }
}

// ---------------------------------------------------------------- summarisers

/// The `fast` model, scripted: a summary of min(2,000, input / 8) tokens,
/// prompt-too-long past its input window; it counts what it is paid for.
struct ScriptedSummarizer {
    input_window: u64,
    calls: AtomicU64,
    input: AtomicU64,
    output: AtomicU64,
}

impl ScriptedSummarizer {
    fn new(input_window: u64) -> ScriptedSummarizer {
        ScriptedSummarizer {
            input_window,
            calls: AtomicU64::new(0),
            input: AtomicU64::new(0),
            output: AtomicU64::new(0),
        }
    }
}

/// `tokens` tokens' worth of summary text (4 ASCII characters a token).
fn summary_text(tokens: u64) -> String {
    const SECTIONS: &str = "## Goal\nKeep the service running. ## Constraints and preferences the user confirmed\n- none new. ## Progress\n";
    let filler = "the agent read the module, changed the handler and ran the tests again; ";
    let chars = (tokens * 4) as usize;
    let mut s = String::with_capacity(chars + filler.len());
    s.push_str(SECTIONS);
    while s.len() < chars {
        s.push_str(filler);
    }
    s.truncate(chars.max(1));
    // The compactor trims the reply: end on a character that stays.
    s.pop();
    s.push('.');
    s
}

impl Summarizer for ScriptedSummarizer {
    fn call(&self, request: ChatRequest) -> SummaryFuture<'_> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let input = request_tokens(&request.system, &request.tools, &request.messages);
        // A rejected prompt is not billed.
        let reply = if input > self.input_window {
            Err(LlmError::PromptTooLong {
                detail: format!("{input} tokens > {}", self.input_window),
            })
        } else {
            let output = (input / 8).clamp(1, SUMMARY_CAP);
            self.input.fetch_add(input, Ordering::Relaxed);
            self.output.fetch_add(output, Ordering::Relaxed);
            Ok((
                summary_text(output),
                Usage {
                    input_tokens: input,
                    output_tokens: output,
                    ..Usage::default()
                },
            ))
        };
        Box::pin(async move { reply })
    }

    fn input_window(&self) -> u64 {
        self.input_window
    }
}

/// A summariser that answers at once with a short fixed text: the
/// decision timing measures the daemon's own work, not a model.
struct InstantSummarizer;

impl Summarizer for InstantSummarizer {
    fn call(&self, _request: ChatRequest) -> SummaryFuture<'_> {
        Box::pin(async {
            Ok((
                "## Goal\nKeep the service running.\n## Next steps\nContinue.".to_string(),
                Usage::default(),
            ))
        })
    }

    fn input_window(&self) -> u64 {
        Budget::new(CONTEXT_WINDOW, MAX_OUTPUT).effective
    }
}

// ---------------------------------------------------------------- policies

/// What one policy spent and reached.
#[derive(Default)]
struct Totals {
    main_calls: u64,
    main_input: u64,
    main_output: u64,
    summary_calls: u64,
    summary_input: u64,
    summary_output: u64,
    compactions: u64,
    tiers: BTreeMap<&'static str, u64>,
    failed: u64,
    /// Failed compactions with the context past the effective window: the
    /// daemon stops the run there.
    stops: u64,
    max_window: u64,
    /// Tokens left after each compaction, summed.
    kept: u64,
    /// Time spent deciding and compacting (the scripted summariser answers
    /// at once).
    work: Duration,
    /// Largest gap between the running count and a recount of the window.
    drift: u64,
}

impl Totals {
    fn main_call(&mut self, input: u64, output: u64) {
        self.main_calls += 1;
        self.main_input += input;
        self.main_output += output;
        self.max_window = self.max_window.max(input);
    }

    fn summaries(&mut self, s: &ScriptedSummarizer) {
        self.summary_calls = s.calls.load(Ordering::Relaxed);
        self.summary_input = s.input.load(Ordering::Relaxed);
        self.summary_output = s.output.load(Ordering::Relaxed);
    }

    fn calls(&self) -> u64 {
        self.main_calls + self.summary_calls
    }
    fn input(&self) -> u64 {
        self.main_input + self.summary_input
    }
    fn output(&self) -> u64 {
        self.main_output + self.summary_output
    }
    fn tokens(&self) -> u64 {
        self.input() + self.output()
    }
    fn tier(&self, name: &str) -> u64 {
        self.tiers.get(name).copied().unwrap_or(0)
    }
}

/// The session loop's policy: transcript, window state, the count.
struct Ours {
    budget: Budget,
    fixed: u64,
    transcript: Vec<(u64, Message)>,
    state: ContextState,
    base: u64,
    summarizer: ScriptedSummarizer,
    t: Totals,
}

impl Ours {
    fn append(&mut self, m: Message) {
        self.state.estimated_tokens += message_tokens(&m);
        let idx = self.transcript.len() as u64;
        self.transcript.push((idx, m));
    }

    fn head(&self) -> &[(u64, Message)] {
        if self.state.summary.is_some() {
            &self.transcript[self.state.head_start_idx as usize..self.state.head_end_idx as usize]
        } else {
            &[]
        }
    }

    /// A main call: the budget check first, then the call on the window
    /// as the model would see it; its usage becomes the count.
    fn call(&mut self, rt: &Runtime, reply: Message) {
        self.check(rt);
        let window = self.state.window(
            self.base,
            self.head(),
            &self.transcript[self.base as usize..],
        );
        let input = self.fixed + messages_tokens(&window);
        self.t.drift = self.t.drift.max(input.abs_diff(self.state.tokens()));
        let output = message_tokens(&reply);
        self.t.main_call(input, output);
        self.append(reply);
        self.state.counted_tokens = input + output;
        self.state.estimated_tokens = 0;
    }

    /// `Check::run` without the breaker and the events.
    fn check(&mut self, rt: &Runtime) {
        let tokens = self.state.tokens();
        if tokens < self.budget.compact_at {
            return;
        }
        let started = Instant::now();
        let result = {
            let input = Input {
                budget: self.budget,
                state: &self.state,
                base_idx: self.base,
                fixed_tokens: self.fixed,
                head: self.head(),
                visible: &self.transcript[self.base as usize..],
            };
            match trim_step(&input) {
                Some(applied) => Ok(applied),
                None => rt.block_on(summary_step(&input, &self.summarizer)),
            }
        };
        match result {
            Ok(applied) => {
                self.t.compactions += 1;
                *self.t.tiers.entry(applied.tier).or_default() += 1;
                self.t.kept += applied.after;
                self.state = applied.state;
                self.base = applied.base_idx;
            }
            Err(_) => {
                self.t.failed += 1;
                if tokens >= self.budget.effective {
                    self.t.stops += 1;
                }
            }
        }
        self.t.work += started.elapsed();
    }
}

/// Summarise everything at the threshold, keep only the summary.
struct Naive {
    budget: Budget,
    fixed: u64,
    window: Vec<Message>,
    window_tokens: u64,
    summarizer: ScriptedSummarizer,
    t: Totals,
}

impl Naive {
    fn append(&mut self, m: Message) {
        self.window_tokens += message_tokens(&m);
        self.window.push(m);
    }

    fn call(&mut self, rt: &Runtime, reply: Message) -> anyhow::Result<()> {
        if self.fixed + self.window_tokens >= self.budget.compact_at {
            let started = Instant::now();
            let mut messages = std::mem::take(&mut self.window);
            messages.push(Message::user_text(
                "Summarise the conversation so far for the agent to continue from.",
            ));
            let request = ChatRequest {
                system: NAIVE_SYSTEM.into(),
                messages,
                tools: vec![],
                max_tokens: 0,
            };
            let (text, _) = match rt.block_on(self.summarizer.call(request)) {
                Ok(r) => r,
                Err(e) => bail!("the naive policy's summary call failed: {e}"),
            };
            self.window = vec![Message::user_text(text)];
            self.window_tokens = messages_tokens(&self.window);
            self.t.compactions += 1;
            self.t.kept += self.fixed + self.window_tokens;
            self.t.work += started.elapsed();
        }
        let input = self.fixed + self.window_tokens;
        let output = message_tokens(&reply);
        self.t.main_call(input, output);
        self.append(reply);
        Ok(())
    }
}

// ---------------------------------------------------------------- figure 1

fn cost(rt: &Runtime, budget: Budget, fixed: u64, turns: usize) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut script = Script::new(SEED);
    let mut ours = Ours {
        budget,
        fixed,
        transcript: Vec::with_capacity(turns * 4),
        state: ContextState::default(),
        base: 0,
        summarizer: ScriptedSummarizer::new(budget.effective),
        t: Totals::default(),
    };
    ours.state.counted_tokens = fixed;
    let mut naive = Naive {
        budget,
        fixed,
        window: Vec::new(),
        window_tokens: 0,
        summarizer: ScriptedSummarizer::new(budget.effective),
        t: Totals::default(),
    };
    let (mut chars, mut tokens) = (0usize, 0u64);
    for _ in 0..turns {
        let [user, call, result, answer] = script.turn();
        for m in [&user, &call, &result, &answer] {
            chars += message_chars(m);
            tokens += message_tokens(m);
        }
        ours.append(user.clone());
        naive.append(user);
        ours.call(rt, call.clone());
        naive.call(rt, call)?;
        ours.append(result.clone());
        naive.append(result);
        ours.call(rt, answer.clone());
        naive.call(rt, answer)?;
    }
    ours.t.summaries(&ours.summarizer);
    naive.t.summaries(&naive.summarizer);
    let (o, n) = (&ours.t, &naive.t);
    println!(
        "\n== cost of staying under the window: {turns} scripted turns (seed {SEED:#x}), {} messages, {chars} characters, ~{tokens} tokens; 2 main calls a turn (the tool call, then the answer); summariser = `fast` with the same profile, min({SUMMARY_CAP}, input / 8) tokens a summary ==",
        turns * 4
    );
    println!(
        "flyto: cheap step (trim_step) then tiered summary (summary_step) at compact_at, head and tail protected; naive: at compact_at, one call over the whole window, the window becomes the summary alone"
    );
    let ratio = |a: u64, b: u64| format!("{:.2}", a as f64 / b.max(1) as f64);
    let mean = |sum: u64, n: u64| sum.checked_div(n).unwrap_or(0);
    let rows: Vec<(&str, String, String, String)> = vec![
        (
            "main calls",
            num(o.main_calls),
            num(n.main_calls),
            String::new(),
        ),
        (
            "summary calls",
            num(o.summary_calls),
            num(n.summary_calls),
            ratio(o.summary_calls, n.summary_calls),
        ),
        (
            "provider calls, total",
            num(o.calls()),
            num(n.calls()),
            ratio(o.calls(), n.calls()),
        ),
        (
            "main input tokens",
            num(o.main_input),
            num(n.main_input),
            ratio(o.main_input, n.main_input),
        ),
        (
            "main output tokens",
            num(o.main_output),
            num(n.main_output),
            String::new(),
        ),
        (
            "summary input tokens",
            num(o.summary_input),
            num(n.summary_input),
            ratio(o.summary_input, n.summary_input),
        ),
        (
            "summary output tokens",
            num(o.summary_output),
            num(n.summary_output),
            ratio(o.summary_output, n.summary_output),
        ),
        (
            "input tokens, total",
            num(o.input()),
            num(n.input()),
            ratio(o.input(), n.input()),
        ),
        (
            "output tokens, total",
            num(o.output()),
            num(n.output()),
            ratio(o.output(), n.output()),
        ),
        (
            "tokens, total",
            num(o.tokens()),
            num(n.tokens()),
            ratio(o.tokens(), n.tokens()),
        ),
        (
            "compactions",
            num(o.compactions),
            num(n.compactions),
            ratio(o.compactions, n.compactions),
        ),
        (
            "  tier trim (cheap step only)",
            num(o.tier("trim")),
            "-".into(),
            String::new(),
        ),
        (
            "  tier summary",
            num(o.tier("summary")),
            num(n.compactions),
            String::new(),
        ),
        (
            "  tier summary_dropped",
            num(o.tier("summary_dropped")),
            "-".into(),
            String::new(),
        ),
        (
            "  tier summary_chunked",
            num(o.tier("summary_chunked")),
            "-".into(),
            String::new(),
        ),
        (
            "failed compactions",
            num(o.failed),
            "0".into(),
            String::new(),
        ),
        (
            "  of which the run would stop",
            num(o.stops),
            "0".into(),
            String::new(),
        ),
        (
            "max window at a main call (tokens)",
            num(o.max_window),
            num(n.max_window),
            String::new(),
        ),
        (
            "mean window at a main call (tokens)",
            num(mean(o.main_input, o.main_calls)),
            num(mean(n.main_input, n.main_calls)),
            ratio(o.main_input, n.main_input),
        ),
        (
            "mean window after a compaction (tokens)",
            num(mean(o.kept, o.compactions)),
            num(mean(n.kept, n.compactions)),
            String::new(),
        ),
        (
            "compaction work in this process",
            format!("{:.1}ms", o.work.as_secs_f64() * 1e3),
            format!("{:.1}ms", n.work.as_secs_f64() * 1e3),
            String::new(),
        ),
    ];
    println!(
        "{:<42} {:>15} {:>15} {:>11}",
        "", "flyto", "naive", "flyto/naive"
    );
    for (label, a, b, r) in &rows {
        let line = format!("{label:<42} {a:>15} {b:>15} {r:>11}");
        println!("{}", line.trim_end());
    }
    let under = |t: &Totals| {
        if t.max_window < budget.effective {
            format!("yes ({} < {})", t.max_window, budget.effective)
        } else {
            format!("NO ({} >= {})", t.max_window, budget.effective)
        }
    };
    println!(
        "stayed under the effective window ({}): flyto {}; naive {}",
        budget.effective,
        under(o),
        under(n)
    );
    println!(
        "flyto running count against a recount of the window it sends: largest gap {} tokens",
        o.drift
    );
    println!(
        "compaction cost over {turns} turns: provider calls flyto {} naive {} ratio {}; tokens flyto {} naive {} ratio {}; compactions flyto {} naive {}; max window flyto {} naive {} (effective {})",
        o.calls(),
        n.calls(),
        ratio(o.calls(), n.calls()),
        o.tokens(),
        n.tokens(),
        ratio(o.tokens(), n.tokens()),
        o.compactions,
        n.compactions,
        o.max_window,
        n.max_window,
        budget.effective
    );
    println!(
        "(tokens are the estimate, 4 ASCII characters a token; no prompt cache modelled; the scripted session took {:.1}s)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn message_chars(m: &Message) -> usize {
    m.content
        .iter()
        .map(|b| match b {
            Block::Text { text } | Block::Thinking { text, .. } => text.len(),
            Block::ToolUse { arguments_json, .. } => arguments_json.len(),
            Block::ToolResult { content, .. } => content.len(),
            Block::RedactedThinking { data } => data.len(),
        })
        .sum()
}

/// 1234567 -> "1,234,567".
fn num(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

// ---------------------------------------------------------------- figure 2

fn decision(rt: &Runtime, budget: Budget, fixed: u64, iterations: usize) -> anyhow::Result<()> {
    let mut script = Script::new(SEED);
    let mut messages: Vec<(u64, Message)> = Vec::with_capacity(DECISION_MESSAGES);
    while messages.len() < DECISION_MESSAGES {
        for m in script.turn() {
            let idx = messages.len() as u64;
            messages.push((idx, m));
        }
    }
    messages.truncate(DECISION_MESSAGES);
    let chars: usize = messages.iter().map(|(_, m)| message_chars(m)).sum();
    let tokens = fixed + messages_tokens(messages.iter().map(|(_, m)| m));
    let summarizer = InstantSummarizer;

    // One compaction decision as `Check::run` makes it, minus the sled read
    // of the transcript and the persisting of the result.
    let decide = || -> Result<Option<Applied>, CompactError> {
        let state = ContextState {
            counted_tokens: fixed + messages_tokens(messages.iter().map(|(_, m)| m)),
            ..ContextState::default()
        };
        let input = Input {
            budget,
            state: &state,
            base_idx: 0,
            fixed_tokens: fixed,
            head: &[],
            visible: &messages,
        };
        if state.tokens() < budget.compact_at {
            return Ok(None);
        }
        match trim_step(&input) {
            Some(applied) => Ok(Some(applied)),
            None => rt.block_on(summary_step(&input, &summarizer)).map(Some),
        }
    };
    let state = ContextState {
        counted_tokens: tokens,
        ..ContextState::default()
    };
    let trim_input = Input {
        budget,
        state: &state,
        base_idx: 0,
        fixed_tokens: fixed,
        head: &[],
        visible: &messages,
    };
    let path = match decide() {
        Ok(Some(a)) => format!(
            "trim_step {}, then summary_step: tier {}, {} -> {} tokens, window now starts at message #{}",
            if trim_step(&trim_input).is_some() {
                "was enough"
            } else {
                "was not enough"
            },
            a.tier,
            a.before,
            a.after,
            a.base_idx
        ),
        Ok(None) => "under compact_at: nothing to do".into(),
        Err(e) => format!("the compaction failed: {e}"),
    };
    println!(
        "\n== one compaction decision on a {DECISION_MESSAGES}-message session ({chars} characters, ~{tokens} tokens, same generator), {iterations} iterations after {DECISION_WARMUP} warm-up, interleaved ==",
    );
    println!("decision path: {path}");
    println!(
        "(the daemon's synchronous work: recount, trim_step, summary_step with a summariser that answers at once; not the sled read of the transcript, nor persisting the result)"
    );

    let (mut decide_ns, mut trim_ns, mut count_ns, mut clone_ns) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..iterations + DECISION_WARMUP {
        let t = Instant::now();
        black_box(messages.clone());
        let clone = t.elapsed();
        let t = Instant::now();
        black_box(trim_step(black_box(&trim_input)));
        let trim = t.elapsed();
        let t = Instant::now();
        black_box(messages_tokens(black_box(&messages).iter().map(|(_, m)| m)));
        let count = t.elapsed();
        let t = Instant::now();
        let decided = black_box(decide());
        let full = t.elapsed();
        if let Err(e) = decided {
            bail!("the compaction decision failed: {e}");
        }
        if i >= DECISION_WARMUP {
            decide_ns.push(full.as_nanos() as u64);
            trim_ns.push(trim.as_nanos() as u64);
            count_ns.push(count.as_nanos() as u64);
            clone_ns.push(clone.as_nanos() as u64);
        }
    }
    for v in [&mut decide_ns, &mut trim_ns, &mut count_ns, &mut clone_ns] {
        v.sort_unstable();
    }
    let us = |ns: u64| format!("{:.1}us", ns as f64 / 1e3);
    println!("{:<58} {:>11} {:>11} {:>11}", "", "p50", "p99", "max");
    for (label, v) in [
        ("decision (recount + trim_step + summary_step)", &decide_ns),
        ("trim_step alone", &trim_ns),
        ("recount alone (messages_tokens)", &count_ns),
        ("baseline: clone of the 1,000 messages", &clone_ns),
    ] {
        println!(
            "{label:<58} {:>11} {:>11} {:>11}",
            us(percentile(v, 0.5)),
            us(percentile(v, 0.99)),
            us(v.last().copied().unwrap_or(0))
        );
    }
    let base = percentile(&clone_ns, 0.5).max(1) as f64;
    println!(
        "compaction decision on {DECISION_MESSAGES} messages: p50 {} p99 {} (trim_step alone p50 {} p99 {}); baseline clone p50 {} p99 {}; ratio to the clone p50 {:.1}x decision, {:.1}x trim_step",
        us(percentile(&decide_ns, 0.5)),
        us(percentile(&decide_ns, 0.99)),
        us(percentile(&trim_ns, 0.5)),
        us(percentile(&trim_ns, 0.99)),
        us(percentile(&clone_ns, 0.5)),
        us(percentile(&clone_ns, 0.99)),
        percentile(&decide_ns, 0.5) as f64 / base,
        percentile(&trim_ns, 0.5) as f64 / base,
    );
    Ok(())
}
