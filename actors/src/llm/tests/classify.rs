//! The classification table, `retry-after` parsing and the backoff curve.

use crate::llm::config::RetrySettings;
use crate::llm::error::{Ctx, LlmError, classify_http, classify_stream_error, parse_retry_after};
use crate::llm::retry;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::time::Duration;

const CTX: Ctx<'static> = Ctx {
    profile: "p",
    key: Some("sk-classify-0123456789"),
};

#[test]
fn http_errors_are_classified() {
    let table: &[(u16, &str, &str)] = &[
        // OpenAI
        (
            429,
            r#"{"error":{"message":"Rate limit reached for gpt in organization org-x on tokens per min. Visit https://platform.openai.com/account/billing to add a payment method.","type":"tokens","code":"rate_limit_exceeded"}}"#,
            "rate_limited",
        ),
        (
            429,
            r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}"#,
            "billing",
        ),
        (
            400,
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            "prompt_too_long",
        ),
        (
            401,
            r#"{"error":{"message":"Incorrect API key provided: sk-classify-0123456789.","type":"invalid_request_error","code":"invalid_api_key"}}"#,
            "auth",
        ),
        (
            404,
            r#"{"error":{"message":"The model `made-up` does not exist or you do not have access to it.","type":"invalid_request_error","code":"model_not_found"}}"#,
            "model_not_found",
        ),
        (
            500,
            r#"{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}"#,
            "server",
        ),
        (
            503,
            r#"{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error"}}"#,
            "overloaded",
        ),
        (
            400,
            r#"{"error":{"message":"Invalid schema for function 'x'","type":"invalid_request_error","code":"invalid_function_parameters"}}"#,
            "invalid_request",
        ),
        // DeepSeek
        (
            402,
            r#"{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}"#,
            "billing",
        ),
        (
            400,
            r#"{"error":{"message":"This model's maximum context length is 65536 tokens. However, you requested 70000 tokens (69000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#,
            "prompt_too_long",
        ),
        (
            503,
            r#"{"error":{"message":"Server overloaded, please try again later","type":"unknown_error"}}"#,
            "overloaded",
        ),
        // Anthropic
        (
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            "overloaded",
        ),
        (
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215000 tokens > 200000 maximum"}}"#,
            "prompt_too_long",
        ),
        (
            413,
            r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#,
            "request_too_large",
        ),
        (
            401,
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
            "auth",
        ),
        (
            403,
            r#"{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}"#,
            "auth",
        ),
        (
            404,
            r#"{"type":"error","error":{"type":"not_found_error","message":"model: made-up"}}"#,
            "model_not_found",
        ),
        (
            429,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#,
            "rate_limited",
        ),
        (
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}"#,
            "billing",
        ),
        (
            500,
            r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#,
            "server",
        ),
        // llama.cpp, vLLM, gateways
        (
            400,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#,
            "prompt_too_long",
        ),
        (
            400,
            r#"{"object":"error","message":"This model's maximum context length is 32768 tokens.","type":"BadRequestError","code":400}"#,
            "prompt_too_long",
        ),
        (502, "<html><body>Bad Gateway</body></html>", "server"),
        (408, "", "timeout"),
        (413, "Payload Too Large", "request_too_large"),
        (422, r#"{"detail":"field required"}"#, "invalid_request"),
    ];
    for (status, body, want) in table {
        let err = classify_http(CTX, *status, None, body);
        assert_eq!(err.kind(), *want, "{status} {body}: {err}");
        assert!(!err.to_string().contains("sk-classify-0123456789"), "{err}");
        assert!(err.to_string().contains("model profile 'p'"), "{err}");
    }
}

#[test]
fn stream_errors_are_classified() {
    let overloaded = classify_stream_error(
        CTX,
        r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
    );
    assert_eq!(overloaded.kind(), "overloaded");
    let unknown = classify_stream_error(CTX, r#"{"error":{"message":"upstream hiccup"}}"#);
    assert_eq!(
        unknown.kind(),
        "server",
        "an unexplained stream error may pass"
    );
    let bad = classify_stream_error(
        CTX,
        r#"{"error":{"message":"bad tool call","type":"invalid_request_error","status_code":400}}"#,
    );
    assert_eq!(bad.kind(), "invalid_request");
}

#[test]
fn retryable_classes() {
    let d = || "x".to_string();
    let retryable = [
        LlmError::RateLimited {
            retry_after: None,
            detail: d(),
        },
        LlmError::Overloaded { detail: d() },
        LlmError::Server { detail: d() },
        LlmError::Connection { detail: d() },
        LlmError::Timeout { detail: d() },
    ];
    let final_ = [
        LlmError::PromptTooLong { detail: d() },
        LlmError::RequestTooLarge { detail: d() },
        LlmError::Auth { detail: d() },
        LlmError::ModelNotFound { detail: d() },
        LlmError::Billing { detail: d() },
        LlmError::InvalidRequest { detail: d() },
        LlmError::Tls { detail: d() },
        LlmError::MalformedStream { detail: d() },
        LlmError::Config { detail: d() },
    ];
    assert!(retryable.iter().all(LlmError::is_retryable));
    assert!(!final_.iter().any(LlmError::is_retryable));
}

#[test]
fn long_provider_messages_are_bounded() {
    let body = format!(r#"{{"error":{{"message":"{}"}}}}"#, "é".repeat(5000));
    let err = classify_http(CTX, 500, None, &body);
    assert!(err.to_string().len() < 1000, "{}", err.to_string().len());
}

#[test]
fn retry_after_headers() {
    let mut h = reqwest::header::HeaderMap::new();
    assert_eq!(parse_retry_after(&h), None);
    h.insert("retry-after", "12".parse().unwrap());
    assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(12)));
    h.insert("retry-after", "1.5".parse().unwrap());
    assert_eq!(parse_retry_after(&h), Some(Duration::from_millis(1500)));
    h.insert(
        "retry-after",
        "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
    );
    assert_eq!(parse_retry_after(&h), None, "dates fall back to backoff");
    h.insert("retry-after-ms", "250".parse().unwrap());
    assert_eq!(parse_retry_after(&h), Some(Duration::from_millis(250)));
}

#[test]
fn backoff_grows_with_jitter_and_honours_retry_after() {
    let s = RetrySettings::default();
    let mut rng = StdRng::seed_from_u64(3);
    for attempt in 1..=8u32 {
        let base = (s.initial_backoff * 2u32.pow(attempt - 1)).min(s.max_backoff);
        for _ in 0..50 {
            let d = retry::delay(&s, attempt, None, &mut rng).unwrap();
            assert!(
                d >= base / 2 && d <= base,
                "attempt {attempt}: {d:?} vs {base:?}"
            );
        }
    }
    let d1 = retry::delay(&s, 1, None, &mut StdRng::seed_from_u64(9));
    let d2 = retry::delay(&s, 1, None, &mut StdRng::seed_from_u64(9));
    assert_eq!(d1, d2, "the same seed gives the same jitter");
    assert_eq!(
        retry::delay(&s, 1, Some(Duration::from_secs(5)), &mut rng),
        Some(Duration::from_secs(5))
    );
    assert_eq!(
        retry::delay(&s, 1, Some(s.max_retry_after * 2), &mut rng),
        None
    );
}
