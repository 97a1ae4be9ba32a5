//! The HTTP client under rmcp's streamable HTTP transport, with what real
//! servers need on top of it.
//!
//! A server that restarted no longer knows the session id flytod sends.
//! The specification says it answers 404, and rmcp then starts a new
//! session and sends the request again (it was not delivered). Servers
//! built on the TypeScript SDK's examples (server-everything among them)
//! answer 400 "No valid session ID" instead, with a JSON-RPC error that has
//! no `id`: rmcp cannot match it to the call, which waited for its
//! `call_timeout`, and every later call did the same. Here such an answer
//! to a request that carried a session id counts as the session's end (so
//! rmcp reconnects and retries once), and any other error without an `id`
//! answers the request it came back for (an HTTP POST carries one message),
//! so a call fails at once instead of waiting.
//!
//! rmcp's tool type drops `execution.taskSupport`, so `tools/list` answers
//! are read raw on their way through (each SSE event's data; a JSON answer
//! is asked for once more, raw) to leave out the tools that only run as
//! MCP tasks, as the stdio transport does.

use super::stdio::{TaskTools, note_task_tools};
use futures_util::StreamExt;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

type Error = StreamableHttpError<reqwest_mcp::Error>;

/// rmcp's reqwest client, counting the sessions it starts.
#[derive(Clone)]
pub struct Client {
    inner: reqwest_mcp::Client,
    /// Set by the first `initialize`: later ones are new sessions.
    initialized: Arc<AtomicBool>,
    /// New sessions after the first, over the server's life in flytod.
    reconnects: Arc<AtomicU32>,
    server: String,
    /// Tools the server's `tools/list` answers say run only as tasks.
    pub task_tools: TaskTools,
}

impl Client {
    pub fn new(server: &str, reconnects: Arc<AtomicU32>) -> Result<Self, String> {
        let inner = reqwest_mcp::Client::builder()
            // As rmcp's own client: a pooled connection whose last body was
            // not read to its end stalls the next request (delayed ACK).
            .pool_max_idle_per_host(0)
            .redirect(same_origin_redirects())
            .build()
            .map_err(|e| format!("cannot set up the HTTP client: {e}"))?;
        Ok(Client {
            inner,
            initialized: Arc::default(),
            reconnects,
            server: server.to_string(),
            task_tools: TaskTools::default(),
        })
    }

    fn note_initialize(&self, message: &ClientJsonRpcMessage) {
        if let JsonRpcMessage::Request(r) = message
            && matches!(r.request, ClientRequest::InitializeRequest(_))
            && self.initialized.swap(true, Ordering::Relaxed)
        {
            self.reconnects.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                server = %self.server,
                "MCP server no longer knows flytod's session (it restarted?): starting a new session"
            );
        }
    }

    /// Reads the task-only tools off a `tools/list` answer.
    async fn note_tool_list(
        &self,
        answer: StreamableHttpPostResponse,
        ask_again: RawPost,
    ) -> StreamableHttpPostResponse {
        match answer {
            StreamableHttpPostResponse::Sse(events, session) => {
                let tasks = self.task_tools.clone();
                let events = events
                    .inspect(move |event| {
                        if let Ok(event) = event
                            && let Some(data) = &event.data
                        {
                            note_task_tools(data.as_bytes(), &tasks);
                        }
                    })
                    .boxed();
                StreamableHttpPostResponse::Sse(events, session)
            }
            json @ StreamableHttpPostResponse::Json(..) => {
                // The parsed answer lost the field: the same read-only
                // request once more, kept raw.
                match ask_again.send(&self.inner).await {
                    Ok(body) => {
                        for message in raw_messages(&body).await {
                            note_task_tools(message.as_bytes(), &self.task_tools);
                        }
                    }
                    Err(e) => tracing::debug!(
                        server = %self.server,
                        "cannot read the raw tools/list answer (task-only tools stay listed): {e}"
                    ),
                }
                json
            }
            other => other,
        }
    }
}

/// A POST to repeat outside rmcp, to see its answer's raw text.
struct RawPost {
    uri: Arc<str>,
    body: Vec<u8>,
    session_id: Option<Arc<str>>,
    auth_header: Option<String>,
    custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    max_bytes: usize,
}

impl RawPost {
    async fn send(self, client: &reqwest_mcp::Client) -> Result<String, String> {
        let mut request = client
            .post(self.uri.as_ref())
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(self.body);
        if let Some(token) = self.auth_header {
            request = request.bearer_auth(token);
        }
        if let Some(session) = self.session_id {
            request = request.header("mcp-session-id", session.as_ref());
        }
        for (name, value) in self.custom_headers {
            request = request.header(name, value);
        }
        let mut response = request.send().await.map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
            if body.len() + chunk.len() > self.max_bytes {
                return Err(format!("the answer is over {} bytes", self.max_bytes));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}

/// The JSON-RPC messages of an answer body: the body itself when it is
/// JSON, else the data of each server-sent event (read by the SSE parser
/// the model clients use).
async fn raw_messages(body: &str) -> Vec<String> {
    use eventsource_stream::Eventsource;
    let trimmed = body.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        return vec![trimmed.to_string()];
    }
    // The body has ended, so its last event is whole even when the server
    // left out the blank line that ends it (a stream would drop it).
    let bytes = format!("{body}\n\n").into_bytes();
    futures_util::stream::once(async move { Ok::<_, std::convert::Infallible>(bytes) })
        .eventsource()
        .filter_map(|e| async move { e.ok().map(|e| e.data) })
        .collect()
        .await
}

/// Only same-origin 307 and 308 (which keep the method and the body), as
/// rmcp's own client: another origin would get the session and `headers`.
fn same_origin_redirects() -> reqwest_mcp::redirect::Policy {
    reqwest_mcp::redirect::Policy::custom(|attempt| {
        let same = attempt.previous().first().is_some_and(|first| {
            let next = attempt.url();
            first.scheme() == next.scheme()
                && first.host_str() == next.host_str()
                && first.port_or_known_default() == next.port_or_known_default()
        });
        let keeps_body = matches!(attempt.status().as_u16(), 307 | 308);
        if same && keeps_body && attempt.previous().len() < 10 {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// What a POST's answer means, given whether it carried a session id.
fn fix(
    answer: Result<StreamableHttpPostResponse, Error>,
    message: &ClientJsonRpcMessage,
    had_session: bool,
) -> Result<StreamableHttpPostResponse, Error> {
    let Ok(StreamableHttpPostResponse::Json(JsonRpcMessage::Error(mut error), session)) = answer
    else {
        return answer;
    };
    if had_session && error.error.message.to_lowercase().contains("session") {
        return Err(StreamableHttpError::SessionExpired);
    }
    if error.id.is_none()
        && let JsonRpcMessage::Request(r) = message
    {
        error.id = Some(r.id.clone());
    }
    Ok(StreamableHttpPostResponse::Json(
        JsonRpcMessage::Error(error),
        session,
    ))
}

impl StreamableHttpClient for Client {
    type Error = reqwest_mcp::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.note_initialize(&message);
        let had_session = session_id.is_some();
        let lists_tools = matches!(&message, JsonRpcMessage::Request(r)
            if matches!(r.request, ClientRequest::ListToolsRequest(_)));
        let ask_again = lists_tools.then(|| RawPost {
            uri: uri.clone(),
            body: serde_json::to_vec(&message).unwrap_or_default(),
            session_id: session_id.clone(),
            auth_header: auth_header.clone(),
            custom_headers: custom_headers.clone(),
            max_bytes: limits.max_json_response_size,
        });
        let answer = self
            .inner
            .post_message_with_response_limits(
                uri,
                message.clone(),
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        let answer = fix(answer, &message, had_session)?;
        match ask_again {
            Some(again) => Ok(self.note_tool_list(answer, again).await),
            None => Ok(answer),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<(), Error> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<BoxedSseResponse, Error> {
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxedSseResponse, Error> {
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn noted(body: &str) -> Vec<String> {
        let tasks = TaskTools::default();
        for m in raw_messages(body).await {
            note_task_tools(m.as_bytes(), &tasks);
        }
        let mut names: Vec<String> = tasks.lock().unwrap().iter().cloned().collect();
        names.sort();
        names
    }

    const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}},{"name":"research","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}}]}}"#;

    #[tokio::test]
    async fn a_json_tool_list_names_its_task_only_tools() {
        assert_eq!(noted(LIST).await, ["research"]);
    }

    #[tokio::test]
    async fn a_tool_list_sent_as_server_sent_events_names_them_too() {
        let body = format!(
            "event: message\nid: 7\ndata: {LIST}\n\n: keep-alive\n\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}}\n\n"
        );
        assert_eq!(noted(&body).await, ["research"]);
        // Data over several lines is one message (joined by a line end,
        // here between two JSON tokens); a stream cut without the final
        // blank line still counts.
        let (head, tail) = LIST.split_at(LIST.find("\"result\"").unwrap());
        assert_eq!(
            noted(&format!("data: {head}\ndata: {tail}")).await,
            ["research"]
        );
    }
}
