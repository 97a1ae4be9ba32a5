//! What a provider stream yields ([`StreamEvent`]) and what it adds up to
//! ([`Assembled`]), plus the assembler both decoders feed, so that
//! "fragments in, whole tool calls out" is written once.

use super::conversation::{Block, Message, Role};
use super::error::LlmError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One item of an [`LlmStream`](super::LlmStream).
///
/// Content events (`TextDelta`, `ReasoningDelta`, `RefusalDelta`,
/// `ToolCallStart`, `ToolCallDelta`) are provisional until `Done`: when an
/// attempt fails after some of them were handed out and the request is sent
/// again, a [`StreamEvent::Restart`] says to throw them away.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// Answer text.
    TextDelta(String),
    /// Reasoning/thinking text, kept apart from the answer.
    ReasoningDelta(String),
    /// A refusal (OpenAI's `refusal` field), kept apart from the answer.
    RefusalDelta(String),
    /// A tool call begins. `index` counts the calls of this response from 0.
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// A fragment of the JSON arguments of call `index`. Fragments split
    /// anywhere; only their concatenation is meaningful.
    ToolCallDelta { index: usize, fragment: String },
    /// An attempt failed with a retryable error; the next one starts after
    /// `delay`. `attempt` is the number of the failed attempt (from 1).
    Retrying {
        attempt: u32,
        max_attempts: u32,
        delay: Duration,
        error: LlmError,
    },
    /// The `main` role switched to its fallback profile after repeated
    /// overloads; the request is sent there next.
    Fallback {
        from: String,
        to: String,
        error: LlmError,
    },
    /// Discard every content event received since the stream began or since
    /// the previous `Restart`: the attempt that produced them failed and the
    /// request is being sent again. Follows a `Retrying` or `Fallback`.
    Restart,
    /// The response is complete. Always the last event of a stream.
    Done(Assembled),
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    /// The model finished its turn (`stop`, `end_turn`).
    EndTurn,
    /// The output budget ran out (`length`, `max_tokens`): continue.
    MaxTokens,
    /// The model wants tool results (`tool_calls`, `tool_use`).
    ToolUse,
    /// A stop sequence matched.
    StopSequence,
    /// Output was withheld by a content filter or the model refused.
    ContentFilter,
    /// Anything else, as the provider named it.
    Other(String),
}

impl StopReason {
    pub(crate) fn from_openai(reason: &str) -> StopReason {
        match reason {
            "stop" => StopReason::EndTurn,
            "length" => StopReason::MaxTokens,
            "tool_calls" | "function_call" => StopReason::ToolUse,
            "content_filter" => StopReason::ContentFilter,
            other => StopReason::Other(other.to_string()),
        }
    }

    pub(crate) fn from_anthropic(reason: &str) -> StopReason {
        match reason {
            "end_turn" => StopReason::EndTurn,
            "max_tokens" | "model_context_window_exceeded" => StopReason::MaxTokens,
            "tool_use" => StopReason::ToolUse,
            "stop_sequence" => StopReason::StopSequence,
            "refusal" => StopReason::ContentFilter,
            other => StopReason::Other(other.to_string()),
        }
    }
}

/// Token counts of one response, the same meaning for every provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// The whole prompt, cached parts included: what the context holds.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Part of `input_tokens` served from the provider's prompt cache.
    pub cache_read_tokens: u64,
    /// Part of `input_tokens` written to the prompt cache.
    pub cache_write_tokens: u64,
    /// Part of `output_tokens` spent on reasoning, where reported.
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Input tokens billed at the plain input price.
    pub fn uncached_input_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_sub(self.cache_read_tokens)
            .saturating_sub(self.cache_write_tokens)
    }

    /// Adds `other` to `self`, for running totals.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

/// A complete tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments object as the model wrote it (`{}` when it sent none).
    /// It may be invalid JSON when the output was cut off: the caller
    /// reports that to the model as a tool error.
    pub arguments_json: String,
}

/// The whole response of a finished stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembled {
    /// The assistant message to store, blocks in the order they came
    /// (thinking with its signature, text, tool calls; a refusal as text).
    pub content: Vec<Block>,
    pub text: String,
    pub reasoning: String,
    /// Signature of the last thinking block (Anthropic).
    pub reasoning_signature: Option<String>,
    pub refusal: String,
    pub tool_calls: Vec<ToolCall>,
    pub stop_reason: StopReason,
    /// `None` when the provider reported none.
    pub usage: Option<Usage>,
    /// The profile that produced this response (differs from the route's
    /// primary after a fallback).
    pub profile: String,
    /// USD at that profile's prices; 0 without usage.
    pub cost: f64,
}

impl Assembled {
    /// Gives call `n` (counted from 0 in call order) the id `id`, in
    /// `tool_calls` and in `content` alike. The provider's ids are not
    /// unique everywhere (some servers send `call_0` for every call): the
    /// session replaces those it cannot use before storing the reply.
    pub fn set_call_id(&mut self, n: usize, id: String) {
        let Some(call) = self.tool_calls.get_mut(n) else {
            return;
        };
        // Content holds the calls' blocks in the same order as `tool_calls`.
        let block = self
            .content
            .iter_mut()
            .filter_map(|b| match b {
                Block::ToolUse { id, .. } => Some(id),
                _ => None,
            })
            .nth(n);
        if let Some(block_id) = block {
            block_id.clone_from(&id);
        }
        call.id = id;
    }

    /// The assistant message to append to the transcript.
    pub fn to_message(&self) -> Message {
        Message {
            role: Role::Assistant,
            content: self.content.clone(),
        }
    }
}

enum Segment {
    Text(String),
    Thinking {
        text: String,
        signature: Option<String>,
    },
    Tool(usize),
    Redacted(String),
}

struct ToolAcc {
    id: String,
    name: String,
    args: String,
    /// Arguments given whole at the start (Anthropic's `input`), used only
    /// when no fragment follows.
    initial: Option<String>,
}

/// Collects deltas into an [`Assembled`] and mirrors them as events.
#[derive(Default)]
pub(crate) struct Assembler {
    segments: Vec<Segment>,
    tools: Vec<ToolAcc>,
    text: String,
    reasoning: String,
    refusal: String,
}

impl Assembler {
    pub(crate) fn text(&mut self, delta: &str, out: &mut Vec<StreamEvent>) {
        if delta.is_empty() {
            return;
        }
        match self.segments.last_mut() {
            Some(Segment::Text(t)) => t.push_str(delta),
            _ => self.segments.push(Segment::Text(delta.to_string())),
        }
        self.text.push_str(delta);
        out.push(StreamEvent::TextDelta(delta.to_string()));
    }

    /// Starts a new thinking block (Anthropic marks block boundaries; an
    /// OpenAI-compatible stream has one implicit block).
    pub(crate) fn begin_thinking(&mut self) {
        self.segments.push(Segment::Thinking {
            text: String::new(),
            signature: None,
        });
    }

    /// An encrypted thinking block: kept for the transcript, shown as
    /// nothing (there is nothing readable in it).
    pub(crate) fn redacted_thinking(&mut self, data: String) {
        if !data.is_empty() {
            self.segments.push(Segment::Redacted(data));
        }
    }

    pub(crate) fn reasoning(&mut self, delta: &str, out: &mut Vec<StreamEvent>) {
        if delta.is_empty() {
            return;
        }
        match self.segments.last_mut() {
            Some(Segment::Thinking { text, .. }) => text.push_str(delta),
            _ => self.segments.push(Segment::Thinking {
                text: delta.to_string(),
                signature: None,
            }),
        }
        self.reasoning.push_str(delta);
        out.push(StreamEvent::ReasoningDelta(delta.to_string()));
    }

    /// Appends to the signature of the latest thinking block.
    pub(crate) fn signature(&mut self, part: &str) {
        if part.is_empty() {
            return;
        }
        let last_thinking = self
            .segments
            .iter_mut()
            .rev()
            .find(|s| matches!(s, Segment::Thinking { .. }));
        match last_thinking {
            Some(Segment::Thinking { signature, .. }) => {
                signature.get_or_insert_with(String::new).push_str(part);
            }
            _ => self.segments.push(Segment::Thinking {
                text: String::new(),
                signature: Some(part.to_string()),
            }),
        }
    }

    pub(crate) fn refusal(&mut self, delta: &str, out: &mut Vec<StreamEvent>) {
        if delta.is_empty() {
            return;
        }
        self.refusal.push_str(delta);
        out.push(StreamEvent::RefusalDelta(delta.to_string()));
    }

    /// Opens a tool call and returns its index. A missing id is made up,
    /// because the result must name the call it answers.
    pub(crate) fn tool_start(&mut self, id: &str, name: &str, out: &mut Vec<StreamEvent>) -> usize {
        let index = self.tools.len();
        let id = if id.is_empty() {
            format!("call_{:016x}", rand::random::<u64>())
        } else {
            id.to_string()
        };
        out.push(StreamEvent::ToolCallStart {
            index,
            id: id.clone(),
            name: name.to_string(),
        });
        self.tools.push(ToolAcc {
            id,
            name: name.to_string(),
            args: String::new(),
            initial: None,
        });
        self.segments.push(Segment::Tool(index));
        index
    }

    /// Fills in a name that arrived after the call was opened.
    pub(crate) fn tool_name(&mut self, index: usize, name: &str) {
        if let Some(t) = self.tools.get_mut(index).filter(|t| t.name.is_empty()) {
            t.name = name.to_string();
        }
    }

    pub(crate) fn tool_initial_args(&mut self, index: usize, json: String) {
        if let Some(t) = self.tools.get_mut(index) {
            t.initial = Some(json);
        }
    }

    pub(crate) fn tool_args(&mut self, index: usize, fragment: &str, out: &mut Vec<StreamEvent>) {
        if fragment.is_empty() {
            return;
        }
        if let Some(t) = self.tools.get_mut(index) {
            t.args.push_str(fragment);
            out.push(StreamEvent::ToolCallDelta {
                index,
                fragment: fragment.to_string(),
            });
        }
    }

    /// Whether call `index` has a name and arguments that are a whole
    /// JSON value: a server that sends neither index nor a new id can only
    /// be starting another call when a name comes after that.
    pub(crate) fn tool_is_whole(&self, index: usize) -> bool {
        self.tools.get(index).is_some_and(|t| {
            let args = if t.args.trim().is_empty() {
                t.initial.as_deref().unwrap_or("")
            } else {
                &t.args
            };
            !t.name.is_empty() && serde_json::from_str::<serde::de::IgnoredAny>(args).is_ok()
        })
    }

    pub(crate) fn has_tool_calls(&self) -> bool {
        !self.tools.is_empty()
    }

    pub(crate) fn finish(self, stop_reason: StopReason, usage: Option<Usage>) -> Assembled {
        let tool_calls: Vec<ToolCall> = self
            .tools
            .into_iter()
            .map(|t| {
                let arguments_json = if !t.args.trim().is_empty() {
                    t.args
                } else {
                    t.initial.unwrap_or_else(|| "{}".to_string())
                };
                ToolCall {
                    id: t.id,
                    name: t.name,
                    arguments_json,
                }
            })
            .collect();
        let mut reasoning_signature = None;
        let mut content = Vec::with_capacity(self.segments.len() + 1);
        for segment in self.segments {
            match segment {
                Segment::Text(text) => content.push(Block::Text { text }),
                Segment::Thinking { text, signature } => {
                    if text.is_empty() && signature.is_none() {
                        continue;
                    }
                    if signature.is_some() {
                        reasoning_signature.clone_from(&signature);
                    }
                    content.push(Block::Thinking { text, signature });
                }
                Segment::Redacted(data) => content.push(Block::RedactedThinking { data }),
                Segment::Tool(i) => {
                    if let Some(call) = tool_calls.get(i) {
                        content.push(Block::ToolUse {
                            id: call.id.clone(),
                            name: call.name.clone(),
                            arguments_json: call.arguments_json.clone(),
                        });
                    }
                }
            }
        }
        if !self.refusal.is_empty() {
            content.push(Block::Text {
                text: self.refusal.clone(),
            });
        }
        Assembled {
            content,
            text: self.text,
            reasoning: self.reasoning,
            reasoning_signature,
            refusal: self.refusal,
            tool_calls,
            stop_reason,
            usage,
            profile: String::new(),
            cost: 0.0,
        }
    }
}
