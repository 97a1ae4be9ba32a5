//! A server's tool as one of the session's tools: `mcp__<server>__<tool>`,
//! called through the server's live connection. Cancel drops the call,
//! which tells the server (`notifications/cancelled`) and abandons it.

use super::config::Scrubber;
use super::conn::call_error;
use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ResourceContents};
use rmcp::service::{Peer, RoleClient};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// The live connection of one server, shared by its tools; empty while
/// it restarts.
#[derive(Default)]
pub struct Slot {
    peer: RwLock<Option<Peer<RoleClient>>>,
    /// Why the last connection ended, for calls made while it is down.
    down: RwLock<Option<String>>,
    /// Calls waiting for an answer: an idle check leaves the server be.
    in_flight: std::sync::atomic::AtomicUsize,
    /// The server entry's secrets, kept out of what calls return.
    secrets: RwLock<Arc<Scrubber>>,
}

impl Slot {
    pub fn set(&self, peer: Option<Peer<RoleClient>>, down: Option<String>) {
        if let Ok(mut p) = self.peer.write() {
            *p = peer;
        }
        if let Ok(mut d) = self.down.write() {
            *d = down;
        }
    }
    fn peer(&self) -> Option<Peer<RoleClient>> {
        self.peer.read().ok().and_then(|p| p.clone())
    }
    fn down(&self) -> Option<String> {
        self.down.read().ok().and_then(|d| d.clone())
    }
    pub fn set_secrets(&self, secrets: Scrubber) {
        if let Ok(mut s) = self.secrets.write() {
            *s = Arc::new(secrets);
        }
    }
    fn scrub(&self, mut out: ToolOutput) -> ToolOutput {
        if let Ok(s) = self.secrets.read() {
            out.content = s.scrub(&out.content);
        }
        out
    }
    pub fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) > 0
    }
}

/// Counts a call in flight while it lives.
struct InFlight<'a>(&'a Slot);

impl<'a> InFlight<'a> {
    fn new(slot: &'a Slot) -> Self {
        slot.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(slot)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// When any MCP tool was last called (ms on the manager's clock), so the
/// manager can stop idle servers.
pub type LastUse = Arc<AtomicU64>;

pub struct McpTool {
    pub model_name: String,
    pub server: String,
    pub remote_name: String,
    pub description: String,
    pub schema: String,
    pub read_only: bool,
    pub call_timeout: Duration,
    pub max_result_bytes: u64,
    pub slot: Arc<Slot>,
    pub last_use: LastUse,
    pub epoch: tokio::time::Instant,
}

impl McpTool {
    fn touch(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_use.fetch_max(ms, Ordering::Relaxed);
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.model_name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn input_schema(&self) -> &str {
        &self.schema
    }
    fn concurrency_safe(&self, _args_json: &str) -> bool {
        self.read_only
    }
    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        // What a server says may hold its config's secrets (an error with
        // the URL, a tool that prints its environment).
        Box::pin(async move { self.slot.scrub(self.call_unscrubbed(ctx, args_json).await) })
    }
}

impl McpTool {
    async fn call_unscrubbed(&self, ctx: &ToolContext, args_json: &str) -> ToolOutput {
        {
            let server = &self.server;
            let tool = &self.remote_name;
            let args =
                match serde_json::from_str::<serde_json::Value>(if args_json.trim().is_empty() {
                    "{}"
                } else {
                    args_json
                }) {
                    Ok(serde_json::Value::Object(m)) => m,
                    Ok(_) | Err(_) => {
                        return ToolOutput::error(format!(
                            "the arguments of `{}` must be a JSON object matching its schema",
                            self.model_name
                        ));
                    }
                };
            let Some(peer) = self.slot.peer() else {
                let why = self
                    .slot
                    .down()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default();
                return ToolOutput::error(format!(
                    "server restarting: MCP server `{server}` is not connected{why}; flytod starts it again on its own: try again shortly, or go on without it"
                ));
            };
            self.touch();
            let _counted = InFlight::new(&self.slot);
            let params = CallToolRequestParams::new(tool.clone()).with_arguments(args);
            let outcome = tokio::select! {
                biased;
                _ = ctx.cancel.cancelled() => {
                    return ToolOutput::error(format!(
                        "cancelled: the call of `{tool}` on MCP server `{server}` was abandoned (the server was told)"
                    ));
                }
                r = tokio::time::timeout(self.call_timeout, peer.call_tool(params)) => r,
            };
            self.touch();
            match outcome {
                Err(_) => ToolOutput::error(format!(
                    "MCP server `{server}` did not answer `{tool}` within {} (call_timeout): the call was abandoned",
                    humantime::format_duration(self.call_timeout)
                )),
                Ok(Err(rmcp::ServiceError::TransportClosed)) => ToolOutput::error(format!(
                    "interrupted: MCP server `{server}` closed the connection during `{tool}` (it exited or crashed); it is restarted on its own, so the call may be tried again"
                )),
                Ok(Err(e)) if call_error(&e).contains("task augmentation") => {
                    // Listed without its `execution` (rmcp drops it), as
                    // over HTTP: the server says so only when called.
                    ToolOutput::error(format!(
                        "MCP server `{server}` runs `{tool}` only as an MCP task (execution.taskSupport = \"required\"), which flytod does not support: go on without it"
                    ))
                }
                Ok(Err(e)) => ToolOutput::error(format!(
                    "MCP server `{server}` failed `{tool}`: {}",
                    call_error(&e)
                )),
                Ok(Ok(result)) => render(server, tool, result, self.max_result_bytes),
            }
        }
    }
}

/// A result as the model sees it: text as is, other content as short
/// references; `isError` results are errors.
pub fn render(server: &str, tool: &str, result: CallToolResult, max: u64) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        parts.push(match block {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => format!(
                "[image {}, {} bytes (base64): not shown]",
                i.mime_type,
                i.data.len()
            ),
            ContentBlock::Audio(a) => format!(
                "[audio {}, {} bytes (base64): not shown]",
                a.mime_type,
                a.data.len()
            ),
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    format!("[resource {uri}]\n{text}")
                }
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => format!(
                    "[resource {uri}: {}, {} bytes (base64): not shown]",
                    mime_type.as_deref().unwrap_or("binary"),
                    blob.len()
                ),
                _ => "[a resource of a kind flytod does not know: not shown]".into(),
            },
            ContentBlock::ResourceLink(l) => format!("[resource link {} ({})]", l.uri, l.name),
            _ => "[content of a kind flytod does not know: not shown]".into(),
        });
    }
    if parts.is_empty()
        && let Some(s) = &result.structured_content
    {
        parts.push(s.to_string());
    }
    let text = parts.join("\n");
    if text.len() as u64 > max {
        return ToolOutput::error(format!(
            "MCP server `{server}` answered `{tool}` with {} bytes, over its limit of {max} (max_result_bytes): ask for less, or raise the limit in its config",
            text.len()
        ));
    }
    if result.is_error == Some(true) {
        ToolOutput::error(if text.is_empty() {
            format!("`{tool}` on MCP server `{server}` failed (no details)")
        } else {
            text
        })
    } else {
        ToolOutput::ok(text)
    }
}

/// The model's name of server `server`'s tool `tool`: providers accept
/// `[A-Za-z0-9_-]{1,64}`.
pub fn model_name(server: &str, tool: &str) -> String {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut name = format!("mcp__{server}__{clean}");
    name.truncate(64);
    name
}

/// Checks that `schema` is a JSON Schema for an arguments object: an
/// object whose `type` (if given) is "object", with `properties` an object
/// of schemas and `required` a list of names.
pub fn check_schema(schema: &serde_json::Map<String, serde_json::Value>) -> Result<(), String> {
    use serde_json::Value;
    const TYPES: [&str; 7] = [
        "object", "string", "number", "integer", "boolean", "array", "null",
    ];
    fn check_type(v: &Value) -> Result<(), String> {
        let ok = |t: &Value| t.as_str().is_some_and(|s| TYPES.contains(&s));
        match v {
            Value::String(_) if ok(v) => Ok(()),
            Value::Array(a) if !a.is_empty() && a.iter().all(ok) => Ok(()),
            other => Err(format!("`type` is {other}, not a JSON Schema type")),
        }
    }
    fn check_node(v: &Value, depth: usize) -> Result<(), String> {
        if depth > 32 {
            return Err("it nests deeper than 32 levels".into());
        }
        let Value::Object(m) = v else {
            return match v {
                Value::Bool(_) => Ok(()),
                other => Err(format!("a schema must be an object, not {other}")),
            };
        };
        if let Some(t) = m.get("type") {
            check_type(t)?;
        }
        if let Some(p) = m.get("properties") {
            let Value::Object(props) = p else {
                return Err("`properties` must be an object".into());
            };
            for (name, sub) in props {
                check_node(sub, depth + 1).map_err(|e| format!("property `{name}`: {e}"))?;
            }
        }
        if let Some(items) = m.get("items") {
            check_node(items, depth + 1).map_err(|e| format!("`items`: {e}"))?;
        }
        if let Some(r) = m.get("required")
            && !r
                .as_array()
                .is_some_and(|a| a.iter().all(|x| x.is_string()))
        {
            return Err("`required` must be a list of property names".into());
        }
        Ok(())
    }
    if let Some(t) = schema.get("type")
        && t.as_str() != Some("object")
    {
        return Err(format!(
            "its input schema has `type` {t}: tool arguments are an object"
        ));
    }
    check_node(&serde_json::Value::Object(schema.clone()), 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn schemas_are_checked() {
        assert!(check_schema(&obj(json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}))).is_ok());
        assert!(
            check_schema(&obj(json!({"type": "string"})))
                .unwrap_err()
                .contains("object")
        );
        assert!(
            check_schema(&obj(
                json!({"type": "object", "properties": {"a": {"type": "text"}}})
            ))
            .unwrap_err()
            .contains("property `a`")
        );
        assert!(check_schema(&obj(json!({"type": "object", "properties": []}))).is_err());
        assert!(check_schema(&obj(json!({"type": "object", "required": "a"}))).is_err());
    }

    #[test]
    fn names_fit_providers() {
        assert_eq!(model_name("gh", "issues.list"), "mcp__gh__issues_list");
        assert!(model_name("gh", &"x".repeat(100)).len() <= 64);
    }

    #[test]
    fn results_render_as_text_and_errors_stay_errors() {
        let r: CallToolResult = serde_json::from_value(json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///a", "text": "body"}}
            ]
        }))
        .unwrap();
        let out = render("s", "t", r, 1 << 20);
        assert!(!out.is_error);
        assert!(out.content.contains("hello") && out.content.contains("[image image/png, 4 bytes"));
        assert!(out.content.contains("[resource file:///a]\nbody"));
        let r: CallToolResult = serde_json::from_value(
            json!({"content": [{"type": "text", "text": "nope"}], "isError": true}),
        )
        .unwrap();
        let out = render("s", "t", r, 1 << 20);
        assert!(out.is_error && out.content == "nope");
        let r: CallToolResult =
            serde_json::from_value(json!({"content": [{"type": "text", "text": "x".repeat(100)}]}))
                .unwrap();
        let out = render("s", "t", r, 10);
        assert!(
            out.is_error && out.content.contains("max_result_bytes"),
            "{}",
            out.content
        );
    }
}
