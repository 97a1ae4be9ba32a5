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
        fix(answer, &message, had_session)
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
