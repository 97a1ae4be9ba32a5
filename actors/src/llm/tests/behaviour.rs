//! Retries, fallback, timeouts, cancellation and key hygiene against the
//! scripted server. Waits run on tokio's paused clock where they matter, so
//! a 7-second `retry-after` costs no real time.

use super::server::{End, FakeServer, Reply};
use super::{
    KEY_ENV, SECRET, anthropic_text_sse, client, drain, openai_text_sse, profile, request, route,
    text_of,
};
use crate::llm::client::LlmClient;
use crate::llm::config::{Api, Models, Roles};
use crate::llm::error::LlmError;
use crate::llm::event::StreamEvent;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

fn rng() -> StdRng {
    StdRng::seed_from_u64(1)
}

#[tokio::test(start_paused = true)]
async fn rate_limit_waits_for_retry_after_then_succeeds() {
    let server = FakeServer::start(vec![
        Reply::json(
            429,
            r#"{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}"#,
        )
        .header("retry-after", "7"),
        Reply::sse(openai_text_sse(&["hel", "lo"])),
    ])
    .await;
    let started = Instant::now();
    let stream = client().stream_with_rng(&route(Api::Openai, &server.url), request(), rng());
    let (events, res) = drain(stream).await;
    let waited = started.elapsed();

    let a = res.unwrap();
    assert_eq!(a.text, "hello");
    assert_eq!(server.requests().len(), 2);
    match &events[0] {
        StreamEvent::Retrying {
            attempt: 1,
            delay,
            error: LlmError::RateLimited { retry_after, .. },
            ..
        } => {
            assert_eq!(*delay, Duration::from_secs(7));
            assert_eq!(*retry_after, Some(Duration::from_secs(7)));
        }
        other => panic!("expected Retrying first, got {other:?}"),
    }
    assert!(
        !events.contains(&StreamEvent::Restart),
        "nothing was handed out before the retry"
    );
    assert!(waited >= Duration::from_secs(7), "waited only {waited:?}");
    assert!(waited < Duration::from_secs(8), "waited {waited:?}");
}

#[tokio::test(start_paused = true)]
async fn retry_after_beyond_the_cap_fails_at_once() {
    let server = FakeServer::start(vec![
        Reply::json(
            429,
            r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#,
        )
        .header("retry-after", "3600"),
    ])
    .await;
    let (events, res) =
        drain(client().stream(&route(Api::Anthropic, &server.url), request())).await;
    let err = res.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(3600)));
    assert!(err.to_string().contains("retry after 3600 s"), "{err}");
    assert!(events.is_empty());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn auth_error_is_not_retried_and_the_key_never_shows() {
    for api in [Api::Openai, Api::Anthropic] {
        // A provider that echoes the key back in its error message.
        let body = format!(
            r#"{{"error":{{"message":"Incorrect API key provided: {SECRET}","type":"authentication_error","code":"invalid_api_key"}}}}"#
        );
        let server = FakeServer::start(vec![Reply::json(401, &body)]).await;
        let route = route(api, &server.url);
        let client = client();
        let (events, res) = drain(client.stream(&route, request())).await;
        let err = res.unwrap_err();
        assert!(matches!(err, LlmError::Auth { .. }), "{err:?}");
        assert!(!err.is_retryable());
        assert!(events.is_empty(), "{events:?}");
        let reqs = server.requests();
        assert_eq!(reqs.len(), 1, "auth errors are never retried");

        // The key was sent, in the right header...
        let sent = match api {
            Api::Openai => reqs[0].header("authorization").map(str::to_string),
            Api::Anthropic => reqs[0].header("x-api-key").map(str::to_string),
        };
        assert!(sent.unwrap().ends_with(SECRET));
        // ...and appears in nothing we format.
        for text in [
            err.to_string(),
            format!("{err:?}"),
            format!("{route:?}"),
            format!("{:?}", request()),
            format!("{client:?}"),
        ] {
            assert!(!text.contains(SECRET), "key leaked into {text}");
        }
        assert!(err.to_string().contains("[redacted]"), "{err}");
    }
}

#[tokio::test]
async fn missing_key_is_a_config_error_naming_the_variable() {
    let server = FakeServer::start(vec![Reply::sse(openai_text_sse(&["x"]))]).await;
    let client = LlmClient::for_tests(Arc::new(|_: &str| None)).unwrap();
    let (_, res) = drain(client.stream(&route(Api::Openai, &server.url), request())).await;
    let err = res.unwrap_err();
    assert!(matches!(err, LlmError::Config { .. }), "{err:?}");
    assert!(err.to_string().contains(KEY_ENV), "{err}");
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_profile_without_api_key_env_sends_no_key() {
    let server = FakeServer::start(vec![Reply::sse(openai_text_sse(&["local"]))]).await;
    let mut route = route(Api::Openai, &server.url);
    route.primary.profile.api_key_env = None;
    let (_, res) = drain(client().stream(&route, request())).await;
    assert_eq!(res.unwrap().text, "local");
    assert!(server.requests()[0].header("authorization").is_none());
}

fn fallback_models(primary_url: &str, backup_url: &str) -> Models {
    let mut primary = profile(Api::Anthropic, primary_url);
    primary.retry.fallback_after = 2;
    let mut profiles = BTreeMap::new();
    profiles.insert("primary".to_string(), primary);
    profiles.insert("backup".to_string(), profile(Api::Openai, backup_url));
    Models::new(
        profiles,
        Roles {
            main: Some("primary".into()),
            fast: None,
            main_fallback: Some("backup".into()),
        },
    )
}

#[tokio::test(start_paused = true)]
async fn repeated_overload_falls_back_and_says_so() {
    let primary = FakeServer::start(vec![Reply::json(
        529,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    )])
    .await;
    let backup = FakeServer::start(vec![Reply::sse(openai_text_sse(&["from ", "backup"]))]).await;
    let models = fallback_models(&primary.url, &backup.url);
    let route = models.route("main").unwrap();
    let (events, res) = drain(client().stream_with_rng(&route, request(), rng())).await;

    let a = res.unwrap();
    assert_eq!(a.text, "from backup");
    assert_eq!(a.profile, "backup");
    assert_eq!(primary.requests().len(), 2, "fallback_after = 2");
    assert_eq!(backup.requests().len(), 1);
    assert!(
        matches!(
            &events[0],
            StreamEvent::Retrying {
                error: LlmError::Overloaded { .. },
                ..
            }
        ),
        "{events:?}"
    );
    assert!(
        matches!(&events[1], StreamEvent::Fallback { from, to, error: LlmError::Overloaded { .. } }
            if from == "primary" && to == "backup"),
        "{events:?}"
    );
    // The backup got the request in its own dialect.
    assert!(
        backup.requests()[0]
            .request_line
            .starts_with("POST /chat/completions")
    );

    // Only main falls back.
    assert!(models.route("fast").unwrap().fallback.is_none());
}

#[tokio::test(start_paused = true)]
async fn overload_inside_a_stream_is_retried() {
    let server = FakeServer::start(vec![
        Reply::sse(
            "event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n",
        ),
        Reply::sse(anthropic_text_sse(&["ok"])),
    ])
    .await;
    let (events, res) =
        drain(client().stream_with_rng(&route(Api::Anthropic, &server.url), request(), rng()))
            .await;
    let a = res.unwrap();
    assert_eq!(a.text, "ok");
    assert_eq!(a.usage.unwrap().output_tokens, 3);
    assert!(
        matches!(events[0], StreamEvent::Retrying { .. }),
        "{events:?}"
    );
}

/// The first `n` events of an OpenAI text stream, then nothing: no finish
/// reason, no `[DONE]`.
fn truncated_openai(parts: &[&str], keep_events: usize) -> String {
    openai_text_sse(parts)
        .split_inclusive("\n\n")
        .take(keep_events)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn stream_cut_midway_is_retried_with_restart() {
    let server = FakeServer::start(vec![
        Reply::sse(truncated_openai(&["par", "tial", "never"], 2)).end(End::Abort),
        Reply::sse(openai_text_sse(&["whole ", "answer"])),
    ])
    .await;
    let (events, res) =
        drain(client().stream_with_rng(&route(Api::Openai, &server.url), request(), rng())).await;
    let a = res.unwrap();
    assert_eq!(a.text, "whole answer");
    let retry = events
        .iter()
        .position(|e| matches!(e, StreamEvent::Retrying { .. }))
        .expect("a Retrying event");
    assert_eq!(
        events[..retry],
        [
            StreamEvent::TextDelta("par".into()),
            StreamEvent::TextDelta("tial".into())
        ]
    );
    assert!(
        matches!(&events[retry], StreamEvent::Retrying { error, .. } if error.kind() == "connection"),
        "{events:?}"
    );
    assert_eq!(events[retry + 1], StreamEvent::Restart);
    assert_eq!(text_of(&events), "whole answer");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_cut_stream_is_a_retryable_error() {
    // Cut inside the chunked framing, and a clean close before the end marker.
    for (how, reply) in [
        (
            "aborted",
            Reply::sse(truncated_openai(&["a", "b"], 2)).end(End::Abort),
        ),
        (
            "closed",
            Reply::sse(truncated_openai(&["a", "b"], 2)).close_delimited(),
        ),
        (
            "anthropic closed",
            Reply::sse(
                anthropic_text_sse(&["a", "b"])
                    .split_inclusive("\n\n")
                    .take(4)
                    .collect::<String>(),
            )
            .close_delimited(),
        ),
    ] {
        let api = if how.starts_with("anthropic") {
            Api::Anthropic
        } else {
            Api::Openai
        };
        let server = FakeServer::start(vec![reply]).await;
        let mut route = route(api, &server.url);
        route.primary.profile.retry.max_attempts = 1;
        let (events, res) = drain(client().stream(&route, request())).await;
        let err = res.unwrap_err();
        assert!(err.is_retryable(), "{how}: {err:?}");
        assert_eq!(err.kind(), "connection", "{how}: {err:?}");
        assert_eq!(text_of(&events), "ab", "{how}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_idle_stream_times_out() {
    let server = FakeServer::start(vec![
        Reply::sse(truncated_openai(&["slow"], 1)).end(End::Hang),
    ])
    .await;
    let mut route = route(Api::Openai, &server.url);
    route.primary.profile.stream_idle_timeout = Duration::from_secs(5);
    route.primary.profile.retry.max_attempts = 1;
    let started = Instant::now();
    let (events, res) = drain(client().stream(&route, request())).await;
    let waited = started.elapsed();
    let err = res.unwrap_err();
    assert!(matches!(err, LlmError::Timeout { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(text_of(&events), "slow");
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_server_that_never_answers_times_out() {
    let server = FakeServer::start(vec![Reply::silent()]).await;
    let mut route = route(Api::Anthropic, &server.url);
    route.primary.profile.stream_idle_timeout = Duration::from_secs(3);
    route.primary.profile.retry.max_attempts = 2;
    route.primary.profile.retry.initial_backoff = Duration::from_secs(1);
    let (events, res) = drain(client().stream_with_rng(&route, request(), rng())).await;
    assert!(matches!(res, Err(LlmError::Timeout { .. })), "{res:?}");
    assert!(matches!(
        events[..],
        [StreamEvent::Retrying {
            attempt: 1,
            max_attempts: 2,
            ..
        }]
    ));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection_at_once() {
    let server = FakeServer::start(vec![
        Reply::sse(truncated_openai(&["first"], 1)).end(End::Hang),
    ])
    .await;
    let mut stream = client().stream(&route(Api::Openai, &server.url), request());
    let first = stream.next_event().await.unwrap().unwrap();
    assert_eq!(first, StreamEvent::TextDelta("first".into()));
    let dropped = std::time::Instant::now();
    drop(stream);
    tokio::time::timeout(Duration::from_secs(2), server.disconnected.notified())
        .await
        .expect("the server saw the connection close");
    assert!(dropped.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn non_stream_json_answers_are_classified() {
    // Status 200 with an error object, and a server that ignored stream: true.
    let server = FakeServer::start(vec![
        Reply::json(
            200,
            r#"{"error":{"message":"Insufficient Balance","type":"unknown_error"}}"#,
        ),
        Reply::json(
            200,
            r#"{"id":"x","choices":[{"message":{"content":"hi"}}]}"#,
        ),
    ])
    .await;
    let route = route(Api::Openai, &server.url);
    let (_, res) = drain(client().stream(&route, request())).await;
    assert!(matches!(res, Err(LlmError::Billing { .. })), "{res:?}");
    let (_, res) = drain(client().stream(&route, request())).await;
    assert!(
        matches!(res, Err(LlmError::MalformedStream { .. })),
        "{res:?}"
    );
}

#[tokio::test]
async fn connection_refused_is_a_connection_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let mut route = route(Api::Openai, &url);
    route.primary.profile.retry.max_attempts = 1;
    let (_, res) = drain(client().stream(&route, request())).await;
    let err = res.unwrap_err();
    assert_eq!(err.kind(), "connection", "{err:?}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn a_cut_after_the_finish_reason_keeps_the_answer() {
    // finish_reason came; the connection dies before usage and [DONE].
    let body = truncated_openai(&["all", " here"], 3);
    let server = FakeServer::start(vec![Reply::sse(body).end(End::Abort)]).await;
    let (events, res) = drain(client().stream(&route(Api::Openai, &server.url), request())).await;
    let a = res.unwrap();
    assert_eq!(a.text, "all here");
    assert_eq!(a.usage, None);
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, StreamEvent::Retrying { .. }))
    );
    assert_eq!(server.requests().len(), 1);
}
