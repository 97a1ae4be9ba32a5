//! subrun: a headless, bounded agent loop for the daemon's own background
//! work (memory extraction, dream). One system prompt, one task, a fixed
//! tool registry, at most `max_calls` model calls, an optional cost cap and
//! wall-clock limit. Nothing streams and no transcript is stored: the
//! caller records the outcome. Tool calls run one after another, since
//! background work is never in a hurry; cancel drops the model call and
//! fires the tools' token.
//!
//! It uses only `llm` and `tools` and may not touch sessions, memory or
//! dream: they all run it, so it sits on the floor below them.

use crate::llm::{Block, ChatRequest, LlmClient, Message, Role, Route, ToolSpec, Usage};
use crate::tools::model_output::truncate_for_model;
use crate::tools::{Registry, ToolContext, ToolOutput};
use std::time::Duration;

pub struct SubRun {
    pub system: String,
    pub task: String,
    pub tools: Registry,
    pub ctx: ToolContext,
    pub max_calls: u32,
    /// Stop before a call once this much was spent (USD); `None`: no cap.
    pub max_cost_usd: Option<f64>,
    pub time_limit: Option<Duration>,
}

/// How a sub-run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum SubRunEnd {
    /// The model ended its turn; its last text.
    Done(String),
    OutOfCalls,
    OverBudget,
    TimedOut,
    Cancelled,
    /// The provider failed (after its retries): what it said.
    Failed(String),
}

impl SubRunEnd {
    pub fn succeeded(&self) -> bool {
        matches!(self, SubRunEnd::Done(_))
    }

    /// One line for logs and records.
    pub fn describe(&self) -> String {
        match self {
            SubRunEnd::Done(_) => "done".into(),
            SubRunEnd::OutOfCalls => "stopped: it used all its model calls".into(),
            SubRunEnd::OverBudget => "stopped: over its cost budget".into(),
            SubRunEnd::TimedOut => "stopped: over its time limit".into(),
            SubRunEnd::Cancelled => "cancelled".into(),
            SubRunEnd::Failed(e) => format!("failed: {e}"),
        }
    }
}

/// One tool call the sub-run made, with its answer.
#[derive(Debug, Clone)]
pub struct SubCall {
    pub name: String,
    pub arguments_json: String,
    pub output: ToolOutput,
}

#[derive(Debug, Clone)]
pub struct SubRunOutcome {
    pub end: SubRunEnd,
    pub model_calls: u32,
    pub usage: Usage,
    pub cost: f64,
    pub calls: Vec<SubCall>,
}

fn specs(tools: &Registry, ctx: &ToolContext) -> Vec<ToolSpec> {
    tools
        .iter()
        .map(|t| ToolSpec {
            name: t.name().into(),
            description: t.description().into(),
            input_schema_json: t
                .input_schema_for(&ctx.workdir)
                .unwrap_or_else(|| t.input_schema().into()),
        })
        .collect()
}

pub async fn run(llm: &LlmClient, route: &Route, sub: SubRun) -> SubRunOutcome {
    let mut out = SubRunOutcome {
        end: SubRunEnd::OutOfCalls,
        model_calls: 0,
        usage: Usage::default(),
        cost: 0.0,
        calls: Vec::new(),
    };
    let limit = sub.time_limit.unwrap_or(Duration::MAX);
    let looped = tokio::time::timeout(limit, turns(llm, route, &sub, &mut out)).await;
    if looped.is_err() {
        sub.ctx.cancel.cancel();
        out.end = SubRunEnd::TimedOut;
    }
    out
}

async fn turns(llm: &LlmClient, route: &Route, sub: &SubRun, out: &mut SubRunOutcome) {
    let tools = specs(&sub.tools, &sub.ctx);
    let mut messages = vec![Message::user_text(sub.task.clone())];
    // Each result must name its own call even when the server reuses ids.
    let mut call_ids = crate::llm::normalize::CallIds::default();
    loop {
        if out.model_calls >= sub.max_calls {
            out.end = SubRunEnd::OutOfCalls;
            return;
        }
        if sub.max_cost_usd.is_some_and(|cap| out.cost >= cap) {
            out.end = SubRunEnd::OverBudget;
            return;
        }
        let request = ChatRequest {
            system: sub.system.clone(),
            messages: messages.clone(),
            tools: tools.clone(),
            max_tokens: 0,
        };
        out.model_calls += 1;
        let reply = tokio::select! {
            r = llm.complete(route, request) => r,
            () = sub.ctx.cancel.cancelled() => {
                out.end = SubRunEnd::Cancelled;
                return;
            }
        };
        let mut reply = match reply {
            Ok(r) => r,
            Err(e) => {
                out.end = SubRunEnd::Failed(e.to_string());
                return;
            }
        };
        if let Some(u) = &reply.usage {
            out.usage.add(u);
        }
        out.cost += reply.cost;
        call_ids.assign(&mut reply, &format!("r{}", messages.len()));
        messages.push(reply.to_message());
        // Some servers end a turn with tool calls and `stop`: the calls win.
        if reply.tool_calls.is_empty() {
            out.end = SubRunEnd::Done(reply.text.clone());
            return;
        }
        let mut results = Vec::new();
        for call in &reply.tool_calls {
            let output = match sub.tools.get(&call.name) {
                Some(tool) => tool.call(&sub.ctx, &call.arguments_json).await,
                None => ToolOutput::error(format!(
                    "no tool named `{}` here: use one of {}",
                    call.name,
                    tools
                        .iter()
                        .map(|t| t.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            };
            if sub.ctx.cancel.is_cancelled() {
                out.end = SubRunEnd::Cancelled;
                return;
            }
            let (content, _) = truncate_for_model(output.content.clone());
            results.push(Block::ToolResult {
                call_id: call.id.clone(),
                content,
                is_error: output.is_error,
            });
            out.calls.push(SubCall {
                name: call.name.clone(),
                arguments_json: call.arguments_json.clone(),
                output,
            });
        }
        messages.push(Message {
            role: Role::User,
            content: results,
        });
    }
}
