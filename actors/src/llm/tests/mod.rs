//! Tests of the provider layer: recorded provider streams replayed through
//! a local server and through the decoder directly, split at awkward byte
//! boundaries; retries, fallback, timeouts and cancellation against a
//! scripted server; classification, request bodies and config.

mod behaviour;
mod classify;
mod config;
mod fixtures;
mod requests;
mod server;

use super::client::LlmClient;
use super::config::{Api, ModelProfile, Route};
use super::error::LlmError;
use super::event::{Assembled, StreamEvent};
use super::stream::BodyStream;
use super::{ChatRequest, LlmStream, Message};
use std::sync::Arc;
use std::time::Duration;

/// The key the tests' key source hands out: distinctive, so a leak into any
/// formatted output is found by a plain `contains`.
pub(crate) const SECRET: &str = "sk-flyto-SECRET-7f3a9c2e51d04b8e";
pub(crate) const KEY_ENV: &str = "FLYTO_TEST_API_KEY";

pub(crate) fn client() -> LlmClient {
    LlmClient::for_tests(Arc::new(|name: &str| {
        (name == KEY_ENV).then(|| SECRET.to_string())
    }))
    .unwrap()
}

pub(crate) fn profile(api: Api, base_url: &str) -> ModelProfile {
    let mut p = ModelProfile::new(api, base_url, "made-up-model-7");
    p.api_key_env = Some(KEY_ENV.to_string());
    p.input_price = 1.0;
    p.output_price = 2.0;
    p
}

pub(crate) fn route(api: Api, base_url: &str) -> Route {
    Route::single("test", profile(api, base_url))
}

pub(crate) fn request() -> ChatRequest {
    ChatRequest {
        system: "be brief".into(),
        messages: vec![Message::user_text("hi")],
        tools: vec![],
        max_tokens: 100,
    }
}

/// Every event up to the end, and how the stream ended.
pub(crate) async fn drain(
    mut stream: LlmStream,
) -> (Vec<StreamEvent>, Result<Assembled, LlmError>) {
    let mut events = Vec::new();
    while let Some(item) = stream.next_event().await {
        match item {
            Ok(StreamEvent::Done(a)) => {
                assert!(stream.next_event().await.is_none(), "events after Done");
                return (events, Ok(a));
            }
            Ok(ev) => events.push(ev),
            Err(e) => {
                assert!(stream.next_event().await.is_none(), "events after an error");
                return (events, Err(e));
            }
        }
    }
    panic!("stream ended without Done or an error");
}

/// Decodes `pieces` as one response body, without HTTP.
pub(crate) async fn decode_pieces(
    api: Api,
    pieces: Vec<Vec<u8>>,
) -> (Vec<StreamEvent>, Result<Assembled, LlmError>) {
    let bytes = futures_util::stream::iter(pieces.into_iter().map(Ok::<_, LlmError>));
    let mut body = BodyStream::new(bytes, api, Duration::from_secs(60), "test".into(), None);
    let mut events = Vec::new();
    loop {
        let mut out = Vec::new();
        match body.step(&mut out).await {
            Ok(Some(a)) => {
                events.extend(out);
                return (events, Ok(a));
            }
            Ok(None) => {
                assert!(!out.is_empty(), "a step returned no event");
                events.extend(out);
            }
            Err(e) => return (events, Err(e)),
        }
    }
}

/// Concatenated text deltas (resetting at each Restart).
pub(crate) fn text_of(events: &[StreamEvent]) -> String {
    let mut s = String::new();
    for e in events {
        match e {
            StreamEvent::TextDelta(t) => s.push_str(t),
            StreamEvent::Restart => s.clear(),
            _ => {}
        }
    }
    s
}

pub(crate) fn reasoning_of(events: &[StreamEvent]) -> String {
    let mut s = String::new();
    for e in events {
        match e {
            StreamEvent::ReasoningDelta(t) => s.push_str(t),
            StreamEvent::Restart => s.clear(),
            _ => {}
        }
    }
    s
}

/// A small OpenAI-compatible stream saying `parts` as text deltas.
pub(crate) fn openai_text_sse(parts: &[&str]) -> String {
    let mut s = String::new();
    for p in parts {
        s.push_str(&format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{}}},\"finish_reason\":null}}]}}\n\n",
            serde_json::to_string(p).unwrap()
        ));
    }
    s.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
    s.push_str("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n");
    s.push_str("data: [DONE]\n\n");
    s
}

/// The same for Anthropic Messages.
pub(crate) fn anthropic_text_sse(parts: &[&str]) -> String {
    let mut s = String::from(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n\
         event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    );
    for p in parts {
        s.push_str(&format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{}}}}}\n\n",
            serde_json::to_string(p).unwrap()
        ));
    }
    s.push_str(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
         event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n\
         event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    s
}
