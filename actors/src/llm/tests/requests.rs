//! The requests each dialect sends: path, headers and the body built from a
//! conversation with thinking, tool calls and tool results.

use super::server::{FakeServer, Reply};
use super::{anthropic_text_sse, client, drain, openai_text_sse, profile, route};
use crate::llm::config::{Api, MaxTokensParam};
use crate::llm::conversation::{Block, ChatRequest, Message, Role, ToolSpec};
use crate::llm::{anthropic, openai};
use serde_json::json;

fn conversation() -> ChatRequest {
    ChatRequest {
        system: "You are flyto.".into(),
        messages: vec![
            Message::user_text("list files"),
            Message {
                role: Role::Assistant,
                content: vec![
                    Block::Thinking {
                        text: "I should call ls.".into(),
                        signature: Some("sig-abc".into()),
                    },
                    Block::RedactedThinking {
                        data: "opaque==".into(),
                    },
                    Block::Text {
                        text: "Looking.".into(),
                    },
                    Block::ToolUse {
                        id: "call_1".into(),
                        name: "bash".into(),
                        arguments_json: r#"{"command":"ls"}"#.into(),
                    },
                    Block::ToolUse {
                        id: "call_2".into(),
                        name: "glob".into(),
                        arguments_json: String::new(),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    Block::ToolResult {
                        call_id: "call_1".into(),
                        content: "a.txt".into(),
                        is_error: false,
                    },
                    Block::ToolResult {
                        call_id: "call_2".into(),
                        content: "no pattern".into(),
                        is_error: true,
                    },
                ],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    // From another provider: no signature.
                    Block::Thinking {
                        text: "unsigned".into(),
                        signature: None,
                    },
                    Block::Text {
                        text: "One file.".into(),
                    },
                ],
            },
            Message::user_text("thanks"),
        ],
        tools: vec![ToolSpec {
            name: "bash".into(),
            description: "run a command".into(),
            input_schema_json: r#"{"type":"object","properties":{"command":{"type":"string"}}}"#
                .into(),
        }],
        max_tokens: 50_000,
    }
}

#[test]
fn openai_body() {
    let mut p = profile(Api::Openai, "http://x");
    p.max_output = 4096;
    let body = openai::body(&p, &conversation()).unwrap();
    assert_eq!(body["model"], "made-up-model-7");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["max_tokens"], 4096, "capped at max_output");
    assert!(body.get("parallel_tool_calls").is_none());
    assert_eq!(
        body["tools"][0],
        json!({"type": "function", "function": {"name": "bash", "description": "run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}})
    );
    let m = body["messages"].as_array().unwrap();
    assert_eq!(m[0], json!({"role": "system", "content": "You are flyto."}));
    assert_eq!(m[1], json!({"role": "user", "content": "list files"}));
    assert_eq!(
        m[2],
        json!({"role": "assistant", "content": "Looking.",
        "reasoning_content": "I should call ls.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}},
            {"id": "call_2", "type": "function", "function": {"name": "glob", "arguments": "{}"}}
        ]})
    );
    assert_eq!(
        m[3],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "a.txt"})
    );
    assert_eq!(
        m[4],
        json!({"role": "tool", "tool_call_id": "call_2", "content": "no pattern"})
    );
    // No tool calls: reasoning stays home.
    assert_eq!(m[5], json!({"role": "assistant", "content": "One file."}));
    assert_eq!(m[6], json!({"role": "user", "content": "thanks"}));
    assert_eq!(m.len(), 7);

    p.parallel_tool_calls = false;
    p.max_tokens_param = MaxTokensParam::MaxCompletionTokens;
    p.reasoning_effort = Some("high".into());
    let body = openai::body(&p, &conversation()).unwrap();
    assert_eq!(body["parallel_tool_calls"], false);
    assert_eq!(body["max_completion_tokens"], 4096);
    assert!(body.get("max_tokens").is_none());
    assert_eq!(body["reasoning_effort"], "high");
}

#[test]
fn anthropic_body() {
    let mut p = profile(Api::Anthropic, "http://x");
    p.thinking_budget = Some(2000);
    let body = anthropic::body(&p, &conversation()).unwrap();
    assert_eq!(body["max_tokens"], 8192, "capped at the default max_output");
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2000})
    );
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You are flyto.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
    assert_eq!(
        body["tools"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    let m = body["messages"].as_array().unwrap();
    assert_eq!(m.len(), 5);
    assert_eq!(
        m[1]["content"],
        json!([
            {"type": "thinking", "thinking": "I should call ls.", "signature": "sig-abc"},
            {"type": "redacted_thinking", "data": "opaque=="},
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "call_1", "name": "bash", "input": {"command": "ls"}},
            {"type": "tool_use", "id": "call_2", "name": "glob", "input": {}}
        ])
    );
    assert_eq!(
        m[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "call_1", "content": "a.txt", "is_error": false},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "no pattern", "is_error": true}
        ])
    );
    // The unsigned thinking block is dropped, the text kept.
    assert_eq!(
        m[3]["content"],
        json!([{"type": "text", "text": "One file."}])
    );
    assert_eq!(
        m[4]["content"],
        json!([{"type": "text", "text": "thanks", "cache_control": {"type": "ephemeral"}}])
    );
}

#[test]
fn urls() {
    assert_eq!(
        openai::url("https://api.deepseek.com"),
        "https://api.deepseek.com/chat/completions"
    );
    assert_eq!(
        openai::url("http://127.0.0.1:8080/v1/"),
        "http://127.0.0.1:8080/v1/chat/completions"
    );
    assert_eq!(
        anthropic::url("https://api.anthropic.com"),
        "https://api.anthropic.com/v1/messages"
    );
    assert_eq!(
        anthropic::url("https://gw.example/v1"),
        "https://gw.example/v1/messages"
    );
}

#[test]
fn a_bad_tool_schema_is_refused_before_sending() {
    let mut req = conversation();
    req.tools[0].input_schema_json = "{not json".into();
    let err = openai::body(&profile(Api::Openai, "http://x"), &req).unwrap_err();
    assert_eq!(err.kind(), "invalid_request");
    assert!(err.to_string().contains("bash"), "{err}");
}

#[tokio::test]
async fn requests_on_the_wire() {
    let server = FakeServer::start(vec![Reply::sse(openai_text_sse(&["x"]))]).await;
    drain(client().stream(&route(Api::Openai, &server.url), conversation()))
        .await
        .1
        .unwrap();
    let r = &server.requests()[0];
    assert_eq!(r.request_line, "POST /chat/completions HTTP/1.1");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("accept"), Some("text/event-stream"));
    assert_eq!(r.json()["stream"], true);

    let server = FakeServer::start(vec![Reply::sse(anthropic_text_sse(&["x"]))]).await;
    drain(client().stream(&route(Api::Anthropic, &server.url), conversation()))
        .await
        .1
        .unwrap();
    let r = &server.requests()[0];
    assert_eq!(r.request_line, "POST /v1/messages HTTP/1.1");
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert!(r.header("authorization").is_none());
    assert_eq!(r.json()["messages"].as_array().unwrap().len(), 5);
}
