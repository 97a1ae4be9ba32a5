//! Anthropic Messages: the request body and the decoder of its SSE stream
//! (`message_start`, `content_block_*`, `message_delta`, `message_stop`,
//! `ping`, `error`). Thinking blocks keep their signature so they can be
//! sent back with the tool results of the same turn.

use super::config::ModelProfile;
use super::conversation::{Block, ChatRequest, Role};
use super::error::{Ctx, LlmError, classify_stream_error};
use super::event::{Assembled, Assembler, StopReason, StreamEvent, Usage};
use super::openai::{effective_max_tokens, schema};
use super::stream::Progress;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;

pub(crate) const VERSION: &str = "2023-06-01";

/// `{base_url}/v1/messages`, tolerating a base_url that already ends in /v1.
pub(crate) fn url(base_url: &str) -> String {
    let base = base_url.trim_end_matches('/');
    if base.ends_with("/v1/messages") {
        base.to_string()
    } else if base.ends_with("/v1") {
        format!("{base}/messages")
    } else {
        format!("{base}/v1/messages")
    }
}

/// The JSON body of a streaming Messages call. Prompt-cache breakpoints go
/// on the last tool, the system prompt and the last message, so a session's
/// growing prefix is read from cache on the next call (Anthropic caches
/// nothing unless asked).
pub(crate) fn body(profile: &ModelProfile, req: &ChatRequest) -> Result<Value, LlmError> {
    let mut messages = Vec::with_capacity(req.messages.len());
    for m in &req.messages {
        let content: Vec<Value> = m.content.iter().filter_map(block).collect();
        if content.is_empty() {
            continue;
        }
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        messages.push(json!({"role": role, "content": content}));
    }
    if let Some(last) = messages
        .last_mut()
        .and_then(|m| m["content"].as_array_mut())
        .and_then(|c| c.last_mut())
        .filter(|b| b["type"] != "thinking")
    {
        last["cache_control"] = json!({"type": "ephemeral"});
    }
    let mut body = json!({
        "model": profile.model,
        "max_tokens": effective_max_tokens(profile, req),
        "messages": messages,
        "stream": true,
    });
    if !req.system.is_empty() {
        body["system"] = json!([{
            "type": "text",
            "text": req.system,
            "cache_control": {"type": "ephemeral"},
        }]);
    }
    if !req.tools.is_empty() {
        let mut tools = Vec::with_capacity(req.tools.len());
        for t in &req.tools {
            tools.push(json!({
                "name": t.name,
                "description": t.description,
                "input_schema": schema(&t.name, &t.input_schema_json)?,
            }));
        }
        if let Some(last) = tools.last_mut() {
            last["cache_control"] = json!({"type": "ephemeral"});
        }
        body["tools"] = Value::Array(tools);
        if !profile.parallel_tool_calls {
            body["tool_choice"] = json!({"type": "auto", "disable_parallel_tool_use": true});
        }
    }
    if let Some(budget) = profile.thinking_budget {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
    }
    Ok(body)
}

fn block(b: &Block) -> Option<Value> {
    match b {
        // Empty text blocks are rejected by the API.
        Block::Text { text } if text.trim().is_empty() => None,
        Block::Text { text } => Some(json!({"type": "text", "text": text})),
        // Only signed thinking can be sent back; an unsigned block came
        // from another provider and would be rejected.
        Block::Thinking {
            text,
            signature: Some(sig),
        } => Some(json!({"type": "thinking", "thinking": text, "signature": sig})),
        Block::Thinking {
            signature: None, ..
        } => None,
        Block::RedactedThinking { data } => {
            Some(json!({"type": "redacted_thinking", "data": data}))
        }
        Block::ToolUse {
            id,
            name,
            arguments_json,
        } => {
            // The API wants an object; arguments cut off mid-way are sent as
            // an empty one (the tool result already told the model).
            let input = match serde_json::from_str::<Value>(arguments_json) {
                Ok(v @ Value::Object(_)) => v,
                _ => json!({}),
            };
            Some(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
        }
        Block::ToolResult {
            call_id,
            content,
            is_error,
        } => Some(json!({
            "type": "tool_result",
            "tool_use_id": call_id,
            "content": content,
            "is_error": is_error,
        })),
    }
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: Option<String>,
    message: Option<MessageStart>,
    index: Option<u64>,
    content_block: Option<ContentBlock>,
    delta: Option<DeltaJson>,
    usage: Option<UsageJson>,
}

#[derive(Deserialize)]
struct MessageStart {
    usage: Option<UsageJson>,
}

#[derive(Deserialize)]
struct ContentBlock {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    thinking: Option<String>,
    signature: Option<String>,
    /// A `redacted_thinking` block's encrypted content.
    data: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<Value>,
}

#[derive(Deserialize)]
struct DeltaJson {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    thinking: Option<String>,
    signature: Option<String>,
    partial_json: Option<String>,
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct UsageJson {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

#[derive(Default)]
struct UsageAcc {
    seen: bool,
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
}

impl UsageAcc {
    /// Later reports win field by field: `message_delta` carries the final
    /// output count and, on newer API versions, repeats the input counts.
    fn merge(&mut self, u: &UsageJson) {
        self.seen = true;
        if let Some(v) = u.input_tokens {
            self.input = v;
        }
        if let Some(v) = u.output_tokens {
            self.output = v;
        }
        if let Some(v) = u.cache_read_input_tokens {
            self.cache_read = v;
        }
        if let Some(v) = u.cache_creation_input_tokens {
            self.cache_write = v;
        }
    }

    fn usage(&self) -> Option<Usage> {
        self.seen.then(|| Usage {
            // Anthropic's input_tokens excludes cached tokens; ours includes.
            input_tokens: self.input + self.cache_read + self.cache_write,
            output_tokens: self.output,
            cache_read_tokens: self.cache_read,
            cache_write_tokens: self.cache_write,
            reasoning_tokens: 0,
        })
    }
}

/// Turns the SSE events of one response into stream events.
#[derive(Default)]
pub(crate) struct Decoder {
    asm: Assembler,
    /// Content block index → tool call index.
    tools: HashMap<u64, usize>,
    stop_reason: Option<String>,
    usage: UsageAcc,
}

impl Decoder {
    pub(crate) fn feed(
        &mut self,
        ctx: Ctx<'_>,
        event: &str,
        data: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<Progress, LlmError> {
        if event == "error" {
            return Err(classify_stream_error(ctx, data));
        }
        let ev: Event = serde_json::from_str(data).map_err(|e| LlmError::MalformedStream {
            detail: ctx.detail(
                None,
                &format!("an event is not the JSON expected ({e}): {data}"),
            ),
        })?;
        // The data's own type is authoritative; the SSE event name is the
        // fallback for proxies that strip one or the other.
        let kind = ev.kind.as_deref().unwrap_or(event);
        match kind {
            "message_start" => {
                if let Some(u) = ev.message.as_ref().and_then(|m| m.usage.as_ref()) {
                    self.usage.merge(u);
                }
            }
            "content_block_start" => {
                if let Some(cb) = ev.content_block {
                    self.block_start(ev.index.unwrap_or(0), cb, out);
                }
            }
            "content_block_delta" => {
                if let Some(d) = ev.delta {
                    self.block_delta(ev.index.unwrap_or(0), d, out);
                }
            }
            "message_delta" => {
                if let Some(reason) = ev.delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(reason);
                }
                if let Some(u) = &ev.usage {
                    self.usage.merge(u);
                }
            }
            "message_stop" => return Ok(Progress::Complete),
            "error" => return Err(classify_stream_error(ctx, data)),
            // ping, content_block_stop and types added later.
            _ => {}
        }
        Ok(Progress::More)
    }

    fn block_start(&mut self, index: u64, cb: ContentBlock, out: &mut Vec<StreamEvent>) {
        match cb.kind.as_str() {
            "text" => self.asm.text(cb.text.as_deref().unwrap_or(""), out),
            "thinking" => {
                self.asm.begin_thinking();
                self.asm
                    .reasoning(cb.thinking.as_deref().unwrap_or(""), out);
                self.asm.signature(cb.signature.as_deref().unwrap_or(""));
            }
            "tool_use" => {
                let call = self.asm.tool_start(
                    cb.id.as_deref().unwrap_or(""),
                    cb.name.as_deref().unwrap_or(""),
                    out,
                );
                if let Some(input) = cb
                    .input
                    .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
                {
                    self.asm.tool_initial_args(call, input.to_string());
                }
                self.tools.insert(index, call);
            }
            "redacted_thinking" => self.asm.redacted_thinking(cb.data.unwrap_or_default()),
            // Server tool blocks: not kept.
            _ => {}
        }
    }

    fn block_delta(&mut self, index: u64, d: DeltaJson, out: &mut Vec<StreamEvent>) {
        match d.kind.as_deref().unwrap_or("") {
            "text_delta" => self.asm.text(d.text.as_deref().unwrap_or(""), out),
            "thinking_delta" => self.asm.reasoning(d.thinking.as_deref().unwrap_or(""), out),
            "signature_delta" => self.asm.signature(d.signature.as_deref().unwrap_or("")),
            "input_json_delta" => {
                if let Some(&call) = self.tools.get(&index) {
                    self.asm
                        .tool_args(call, d.partial_json.as_deref().unwrap_or(""), out);
                }
            }
            _ => {}
        }
    }

    /// The body ended without `message_stop`: complete only if the stop
    /// reason came.
    pub(crate) fn at_eof(&self, ctx: Ctx<'_>) -> Result<(), LlmError> {
        if self.stop_reason.is_some() {
            Ok(())
        } else {
            Err(LlmError::Connection {
                detail: ctx.detail(
                    None,
                    "the stream ended before message_stop (connection closed early)",
                ),
            })
        }
    }

    pub(crate) fn finish(self) -> Assembled {
        // `message_stop` without a stop reason: infer it rather than fail a
        // response that is otherwise whole.
        let stop = match &self.stop_reason {
            Some(r) => StopReason::from_anthropic(r),
            None if self.asm.has_tool_calls() => StopReason::ToolUse,
            None => StopReason::EndTurn,
        };
        self.asm.finish(stop, self.usage.usage())
    }
}
