//! OpenAI-compatible chat completions: the request body and the decoder of
//! its SSE stream. One dialect serves DeepSeek, OpenAI, vLLM, llama.cpp,
//! Ollama, LiteLLM and Groq, so the decoder accepts every variant seen from
//! them: reasoning as `reasoning_content` (DeepSeek, llama.cpp) or
//! `reasoning` (Groq), usage on the finishing chunk or in a trailing chunk
//! with `choices: []`, cache hits as `prompt_tokens_details.cached_tokens`
//! or `prompt_cache_hit_tokens`, errors as `event: error` or as a data chunk
//! holding an `error` object.

use super::config::{MaxTokensParam, ModelProfile};
use super::conversation::{Block, ChatRequest, Role};
use super::error::{Ctx, LlmError, classify_stream_error};
use super::event::{Assembled, Assembler, StopReason, StreamEvent, Usage};
use super::stream::Progress;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;

/// `{base_url}/chat/completions`, unless base_url already names it.
pub(crate) fn url(base_url: &str) -> String {
    let base = base_url.trim_end_matches('/');
    if base.ends_with("/chat/completions") {
        base.to_string()
    } else {
        format!("{base}/chat/completions")
    }
}

/// The JSON body of a streaming chat completion.
pub(crate) fn body(profile: &ModelProfile, req: &ChatRequest) -> Result<Value, LlmError> {
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    if !req.system.is_empty() {
        messages.push(json!({"role": "system", "content": req.system}));
    }
    for m in &req.messages {
        match m.role {
            Role::User => user_messages(&m.content, &mut messages),
            Role::Assistant => messages.push(assistant_message(&m.content)),
        }
    }
    let mut body = json!({
        "model": profile.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let max_tokens = effective_max_tokens(profile, req);
    let field = match profile.max_tokens_param {
        MaxTokensParam::MaxTokens => "max_tokens",
        MaxTokensParam::MaxCompletionTokens => "max_completion_tokens",
    };
    body[field] = json!(max_tokens);
    if !req.tools.is_empty() {
        let mut tools = Vec::with_capacity(req.tools.len());
        for t in &req.tools {
            tools.push(json!({
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": schema(&t.name, &t.input_schema_json)?,
                },
            }));
        }
        body["tools"] = Value::Array(tools);
        // Sent only to turn parallel calls off: some compatible servers
        // reject the field, and on is everybody's default.
        if !profile.parallel_tool_calls {
            body["parallel_tool_calls"] = json!(false);
        }
    }
    if let Some(effort) = &profile.reasoning_effort {
        body["reasoning_effort"] = json!(effort);
    }
    Ok(body)
}

pub(crate) fn effective_max_tokens(profile: &ModelProfile, req: &ChatRequest) -> u32 {
    if req.max_tokens == 0 {
        profile.max_output
    } else {
        req.max_tokens.min(profile.max_output)
    }
}

pub(crate) fn schema(tool: &str, json: &str) -> Result<Value, LlmError> {
    serde_json::from_str(json).map_err(|e| LlmError::InvalidRequest {
        detail: format!("tool {tool:?} has an input schema that is not valid JSON: {e}"),
    })
}

/// Tool results become `role: tool` messages, sent first (they answer the
/// previous assistant message); any text follows as one user message.
fn user_messages(blocks: &[Block], out: &mut Vec<Value>) {
    let mut text = Vec::new();
    for b in blocks {
        match b {
            Block::ToolResult {
                call_id, content, ..
            } => out.push(json!({"role": "tool", "tool_call_id": call_id, "content": content})),
            Block::Text { text: t } => text.push(t.as_str()),
            Block::Thinking { .. } | Block::RedactedThinking { .. } | Block::ToolUse { .. } => {}
        }
    }
    if !text.is_empty() {
        out.push(json!({"role": "user", "content": text.join("\n")}));
    }
}

/// Text and tool calls of an assistant turn. Reasoning goes back as
/// `reasoning_content` only on a message with tool calls: DeepSeek's
/// thinking mode requires it there and ignores it elsewhere.
fn assistant_message(blocks: &[Block]) -> Value {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for b in blocks {
        match b {
            Block::Text { text: t } => text.push_str(t),
            Block::Thinking { text: t, .. } => reasoning.push_str(t),
            // Anthropic's alone; nothing another provider can read.
            Block::RedactedThinking { .. } => {}
            Block::ToolUse {
                id,
                name,
                arguments_json,
            } => {
                let args = if arguments_json.trim().is_empty() {
                    "{}"
                } else {
                    arguments_json.as_str()
                };
                calls.push(json!({
                    "id": id,
                    "type": "function",
                    "function": {"name": name, "arguments": args},
                }));
            }
            Block::ToolResult { .. } => {}
        }
    }
    let mut msg = json!({"role": "assistant"});
    if calls.is_empty() {
        msg["content"] = json!(text);
    } else {
        msg["content"] = if text.is_empty() {
            Value::Null
        } else {
            json!(text)
        };
        msg["tool_calls"] = Value::Array(calls);
        if !reasoning.is_empty() {
            msg["reasoning_content"] = json!(reasoning);
        }
    }
    msg
}

// Every field optional and unknown fields ignored: compatible servers add,
// omit and null things freely.
#[derive(Deserialize)]
struct Chunk {
    choices: Option<Vec<Choice>>,
    usage: Option<UsageJson>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    index: Option<u64>,
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    index: Option<usize>,
    id: Option<String>,
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct UsageJson {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptDetails>,
    completion_tokens_details: Option<CompletionDetails>,
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    reasoning_tokens: Option<u64>,
}

impl UsageJson {
    fn to_usage(&self) -> Usage {
        let cached = self
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0);
        Usage {
            input_tokens: self.prompt_tokens.unwrap_or(0),
            output_tokens: self.completion_tokens.unwrap_or(0),
            cache_read_tokens: cached.max(self.prompt_cache_hit_tokens.unwrap_or(0)),
            cache_write_tokens: 0,
            reasoning_tokens: self
                .completion_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
        }
    }
}

/// Turns the SSE events of one response into stream events.
#[derive(Default)]
pub(crate) struct Decoder {
    asm: Assembler,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    /// The server's tool-call index → the assembler's index.
    calls: HashMap<usize, usize>,
    /// The server index and id of the last call seen, for servers that
    /// omit the index.
    last_call: Option<usize>,
    last_id: Option<String>,
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
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(Progress::Complete);
        }
        if data.is_empty() {
            return Ok(Progress::More);
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| LlmError::MalformedStream {
            detail: ctx.detail(
                None,
                &format!("a chunk is not the JSON expected ({e}): {data}"),
            ),
        })?;
        if chunk.error.is_some() {
            return Err(classify_stream_error(ctx, data));
        }
        if let Some(u) = &chunk.usage {
            self.usage = Some(u.to_usage());
        }
        // Only choice 0: we never ask for more than one.
        let choice = chunk
            .choices
            .into_iter()
            .flatten()
            .find(|c| c.index.unwrap_or(0) == 0);
        if let Some(choice) = choice {
            if let Some(delta) = choice.delta {
                self.delta(delta, out);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
        }
        Ok(Progress::More)
    }

    fn delta(&mut self, delta: Delta, out: &mut Vec<StreamEvent>) {
        let reasoning = delta.reasoning_content.or(delta.reasoning);
        if let Some(r) = reasoning {
            self.asm.reasoning(&r, out);
        }
        if let Some(t) = delta.content {
            self.asm.text(&t, out);
        }
        if let Some(r) = delta.refusal {
            self.asm.refusal(&r, out);
        }
        for call in delta.tool_calls.into_iter().flatten() {
            let function = call.function;
            let (name, args) = match function {
                Some(f) => (f.name, f.arguments),
                None => (None, None),
            };
            let server_index = match (call.index, self.last_call) {
                (Some(i), _) => i,
                // No index: a new id opens a new call; no id, or the same
                // id repeated, continues the last one, unless that call is
                // whole and a name comes (parallel calls all sent as
                // `call_0`, each in one chunk).
                (None, Some(last))
                    if (call.id.is_none() || call.id.as_deref() == self.last_id.as_deref())
                        && !(name.is_some()
                            && self
                                .calls
                                .get(&last)
                                .is_some_and(|&i| self.asm.tool_is_whole(i))) =>
                {
                    last
                }
                (None, _) => self.calls.len(),
            };
            self.last_call = Some(server_index);
            if call.id.is_some() {
                self.last_id.clone_from(&call.id);
            }
            let index = match self.calls.get(&server_index) {
                Some(&i) => {
                    if let Some(n) = &name {
                        self.asm.tool_name(i, n);
                    }
                    i
                }
                None => {
                    let id = call.id.as_deref().unwrap_or("");
                    let i = self.asm.tool_start(id, name.as_deref().unwrap_or(""), out);
                    self.calls.insert(server_index, i);
                    i
                }
            };
            if let Some(a) = args {
                self.asm.tool_args(index, &a, out);
            }
        }
    }

    /// The body ended without `[DONE]`: complete only if a finish reason came.
    pub(crate) fn at_eof(&self, ctx: Ctx<'_>) -> Result<(), LlmError> {
        if self.finish_reason.is_some() {
            Ok(())
        } else {
            Err(LlmError::Connection {
                detail: ctx.detail(
                    None,
                    "the stream ended before a finish_reason or [DONE] (connection closed early)",
                ),
            })
        }
    }

    pub(crate) fn finish(self) -> Assembled {
        // `[DONE]` without a finish reason: infer it rather than fail a
        // response that is otherwise whole.
        let stop = match &self.finish_reason {
            Some(r) => StopReason::from_openai(r),
            None if self.asm.has_tool_calls() => StopReason::ToolUse,
            None => StopReason::EndTurn,
        };
        self.asm.finish(stop, self.usage)
    }
}
