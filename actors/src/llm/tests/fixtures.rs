//! Replays every recorded stream of `tests/fixtures/sse` and compares the
//! result with the fixture's `expect`: through the decoder directly, whole,
//! in 1-byte and 1..7-byte pieces, split in two at every offset (a sample
//! of mid-UTF-8, mid-JSON and even offsets for the big ones) and in three
//! at seeded random offsets; and through the local HTTP server, whole, in
//! tiny pieces, and cut at every mid-UTF-8 and mid-JSON offset at once.

use super::server::{FakeServer, Reply};
use super::{client, decode_pieces, drain, reasoning_of, request, route, text_of};
use crate::llm::config::Api;
use crate::llm::conversation::Block;
use crate::llm::error::LlmError;
use crate::llm::event::{Assembled, StopReason, StreamEvent, Usage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::path::PathBuf;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/sse");

struct Fixture {
    name: String,
    api: Api,
    body: Vec<u8>,
    expect: Value,
}

/// The fixtures. They are part of the repository, so a missing folder is a
/// broken checkout and fails the test rather than skipping it.
fn fixtures() -> Vec<Fixture> {
    let dir = PathBuf::from(DIR);
    assert!(
        dir.is_dir(),
        "no fixture folder at {}: restore tests/fixtures/sse from the repository",
        dir.display()
    );
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let meta: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let api = match meta["api"].as_str() {
            Some("openai-chat") => Api::Openai,
            Some("anthropic-messages") => Api::Anthropic,
            other => panic!("{name}: unknown fixture api {other:?}"),
        };
        let body = std::fs::read(path.with_extension("sse"))
            .unwrap_or_else(|e| panic!("{name}: no .sse beside the .json: {e}"));
        out.push(Fixture {
            name,
            api,
            body,
            expect: meta["expect"].clone(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(!out.is_empty(), "the fixture folder has no fixture");
    out
}

fn stop_reason(name: &str) -> StopReason {
    match name {
        "stop" | "end_turn" => StopReason::EndTurn,
        "length" | "max_tokens" => StopReason::MaxTokens,
        "tool_calls" | "tool_use" => StopReason::ToolUse,
        other => panic!("fixture stop reason {other:?} not mapped in the test"),
    }
}

fn n(v: &Value, path: &[&str]) -> Option<u64> {
    path.iter().try_fold(v, |v, k| v.get(*k))?.as_u64()
}

/// The usage the fixture's raw numbers mean, in our terms.
fn expected_usage(api: Api, expect: &Value) -> Option<Usage> {
    match api {
        Api::Openai => {
            let u = &expect["usage"];
            if u.is_null() {
                return None;
            }
            Some(Usage {
                input_tokens: n(u, &["prompt_tokens"]).unwrap_or(0),
                output_tokens: n(u, &["completion_tokens"]).unwrap_or(0),
                cache_read_tokens: n(u, &["prompt_tokens_details", "cached_tokens"])
                    .unwrap_or(0)
                    .max(n(u, &["prompt_cache_hit_tokens"]).unwrap_or(0)),
                cache_write_tokens: 0,
                reasoning_tokens: n(u, &["completion_tokens_details", "reasoning_tokens"])
                    .unwrap_or(0),
            })
        }
        Api::Anthropic => {
            let (start, end) = (&expect["usage_message_start"], &expect["usage"]);
            if start.is_null() && end.is_null() {
                return None;
            }
            // The final report wins field by field.
            let get = |k: &str| n(end, &[k]).or_else(|| n(start, &[k])).unwrap_or(0);
            let (read, write) = (
                get("cache_read_input_tokens"),
                get("cache_creation_input_tokens"),
            );
            Some(Usage {
                input_tokens: get("input_tokens") + read + write,
                output_tokens: get("output_tokens"),
                cache_read_tokens: read,
                cache_write_tokens: write,
                reasoning_tokens: 0,
            })
        }
    }
}

fn expected_error_kind(error: &Value) -> &'static str {
    match error["type"].as_str() {
        Some("overloaded_error") => "overloaded",
        Some("invalid_request_error") => "invalid_request",
        other => panic!("fixture error type {other:?} not mapped in the test"),
    }
}

/// Compares one replay with the fixture. `how` names the replay in failures.
fn check(f: &Fixture, how: &str, events: &[StreamEvent], result: &Result<Assembled, LlmError>) {
    let e = &f.expect;
    let ctx = format!("{} ({how})", f.name);
    let want_text = e["text"].as_str().unwrap_or("");
    let want_reasoning = e["reasoning"].as_str().unwrap_or("");
    // What was streamed before the end is the same either way.
    assert_eq!(text_of(events), want_text, "{ctx}: streamed text");
    assert_eq!(
        reasoning_of(events),
        want_reasoning,
        "{ctx}: streamed reasoning"
    );

    if !e["error"].is_null() {
        let err = result.as_ref().expect_err(&format!("{ctx}: must fail"));
        assert_eq!(err.kind(), expected_error_kind(&e["error"]), "{ctx}: {err}");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(
            err.to_string().contains(&msg[..msg.len().min(40)]),
            "{ctx}: {err}"
        );
        return;
    }
    let a = result
        .as_ref()
        .unwrap_or_else(|err| panic!("{ctx}: failed: {err}"));
    assert_eq!(a.text, want_text, "{ctx}: text");
    assert_eq!(a.reasoning, want_reasoning, "{ctx}: reasoning");
    assert_eq!(
        a.reasoning_signature.as_deref(),
        e["reasoning_signature"].as_str(),
        "{ctx}: signature"
    );
    assert_eq!(
        a.refusal,
        e["refusal"].as_str().unwrap_or(""),
        "{ctx}: refusal"
    );
    let reason = e["stop_reason"]
        .as_str()
        .or(e["finish_reason"].as_str())
        .unwrap_or_else(|| panic!("{ctx}: fixture has no stop reason"));
    assert_eq!(a.stop_reason, stop_reason(reason), "{ctx}: stop reason");
    assert_eq!(a.usage, expected_usage(f.api, e), "{ctx}: usage");

    let want_calls = e["tool_calls"].as_array().unwrap();
    assert_eq!(
        a.tool_calls.len(),
        want_calls.len(),
        "{ctx}: tool call count"
    );
    for (i, (got, want)) in a.tool_calls.iter().zip(want_calls).enumerate() {
        assert_eq!(got.id, want["id"].as_str().unwrap(), "{ctx}: call {i} id");
        assert_eq!(
            got.name,
            want["name"].as_str().unwrap(),
            "{ctx}: call {i} name"
        );
        let args: Value = serde_json::from_str(&got.arguments_json).unwrap_or_else(|err| {
            panic!("{ctx}: call {i} arguments {:?}: {err}", got.arguments_json)
        });
        assert_eq!(args, want["arguments"], "{ctx}: call {i} arguments");
        // The streamed events tell the same story as the assembly.
        let started = events.iter().any(|ev| {
            matches!(ev, StreamEvent::ToolCallStart { index, id, name }
                if *index == i && *id == got.id && *name == got.name)
        });
        assert!(started, "{ctx}: no ToolCallStart for call {i}");
        let streamed: String = events
            .iter()
            .filter_map(|ev| match ev {
                StreamEvent::ToolCallDelta { index, fragment } if *index == i => {
                    Some(fragment.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(streamed, got.arguments_json, "{ctx}: call {i} fragments");
    }
    // The message to store holds the same content, in order.
    let msg = a.to_message();
    let uses = msg
        .content
        .iter()
        .filter(|b| matches!(b, crate::llm::Block::ToolUse { .. }))
        .count();
    assert_eq!(uses, want_calls.len(), "{ctx}: tool_use blocks");
}

fn split_at(body: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut pieces = Vec::new();
    let mut start = 0;
    for &c in cuts {
        if c > start && c < body.len() {
            pieces.push(body[start..c].to_vec());
            start = c;
        }
    }
    pieces.push(body[start..].to_vec());
    pieces
}

/// Offsets inside a multi-byte UTF-8 character.
fn mid_utf8(body: &[u8]) -> Vec<usize> {
    (1..body.len())
        .filter(|&i| body[i] & 0xC0 == 0x80)
        .collect()
}

/// Offsets right after a JSON quote, brace or colon: mid-JSON.
fn mid_json(body: &[u8]) -> Vec<usize> {
    (1..body.len())
        .filter(|&i| matches!(body[i - 1], b'"' | b'{' | b':' | b'\\'))
        .collect()
}

/// Bytes decoded per fixture by the two-way split test: it keeps the debug
/// build's run to a couple of seconds.
const SPLIT_BUDGET: usize = 1_500_000;

/// Two-way split points: every offset when the budget allows; otherwise
/// every mid-UTF-8 offset (up to 32), then mid-JSON offsets and even
/// offsets, sampled evenly, half the remaining budget each.
fn split_points(body: &[u8]) -> Vec<usize> {
    let budget = SPLIT_BUDGET / body.len().max(1);
    if budget >= body.len() {
        return (1..body.len()).collect();
    }
    let sample = |all: Vec<usize>, k: usize| -> Vec<usize> {
        let step = all.len().div_ceil(k.max(1)).max(1);
        all.into_iter().step_by(step).collect()
    };
    let mut points = sample(mid_utf8(body), 32);
    points.extend(sample(mid_json(body), budget / 2));
    points.extend(sample((1..body.len()).collect(), budget / 2));
    points.sort_unstable();
    points.dedup();
    points
}

#[tokio::test]
async fn fixtures_decode_whole_and_in_small_pieces() {
    let fixtures = fixtures();
    let mut rng = StdRng::seed_from_u64(7);
    for f in &fixtures {
        let (ev, res) = decode_pieces(f.api, vec![f.body.clone()]).await;
        check(f, "whole", &ev, &res);

        let bytes: Vec<Vec<u8>> = f.body.iter().map(|b| vec![*b]).collect();
        let (ev, res) = decode_pieces(f.api, bytes).await;
        check(f, "1-byte pieces", &ev, &res);

        // Pieces of 1 to 7 bytes, so cuts land at every phase.
        let mut pieces = Vec::new();
        let mut at = 0;
        for len in (1..=7).cycle() {
            if at >= f.body.len() {
                break;
            }
            let end = (at + len).min(f.body.len());
            pieces.push(f.body[at..end].to_vec());
            at = end;
        }
        let (ev, res) = decode_pieces(f.api, pieces).await;
        check(f, "1..7-byte pieces", &ev, &res);

        for _ in 0..16 {
            let mut cuts = [
                rng.gen_range(1..f.body.len()),
                rng.gen_range(1..f.body.len()),
            ];
            cuts.sort_unstable();
            let (ev, res) = decode_pieces(f.api, split_at(&f.body, &cuts)).await;
            check(f, &format!("split at {cuts:?}"), &ev, &res);
        }
    }
}

#[tokio::test]
async fn fixtures_decode_split_in_two_everywhere() {
    let fixtures = fixtures();
    for f in &fixtures {
        let points = split_points(&f.body);
        let mid = mid_utf8(&f.body);
        assert!(
            mid.is_empty() || mid.iter().any(|p| points.contains(p)),
            "{}: no mid-UTF-8 split",
            f.name
        );
        for at in points {
            let (ev, res) = decode_pieces(f.api, split_at(&f.body, &[at])).await;
            check(f, &format!("split at {at}"), &ev, &res);
        }
    }
}

#[tokio::test]
async fn fixtures_replay_over_http() {
    let fixtures = fixtures();
    let client = client();
    for f in &fixtures {
        let mut awkward = mid_utf8(&f.body);
        awkward.extend(mid_json(&f.body));
        let tiny = if f.body.len() <= 16 * 1024 { 1 } else { 7 };
        let replies = [
            ("whole", Reply::sse(f.body.clone())),
            ("tiny pieces", Reply::sse(f.body.clone()).every(tiny)),
            (
                "mid-UTF-8 and mid-JSON cuts",
                Reply::sse(f.body.clone()).cuts(awkward),
            ),
            (
                "close-delimited",
                Reply::sse(f.body.clone()).every(13).close_delimited(),
            ),
        ];
        for (how, reply) in replies {
            let server = FakeServer::start(vec![reply]).await;
            let mut route = route(f.api, &server.url);
            // An error fixture must surface as is, not be retried.
            route.primary.profile.retry.max_attempts = 1;
            let (events, res) = drain(client.stream(&route, request())).await;
            check(f, how, &events, &res);
            assert_eq!(server.requests().len(), 1, "{}: {how}", f.name);
            if let Ok(a) = &res {
                assert_eq!(a.profile, "test");
                let want = a
                    .usage
                    .map(|u| route.primary.profile.cost(&u))
                    .unwrap_or(0.0);
                assert!((a.cost - want).abs() < 1e-12);
            }
        }
    }
}

/// Not a recording: two tool calls whose argument fragments interleave by
/// index and split inside multi-byte characters and JSON tokens.
#[tokio::test]
async fn interleaved_tool_calls_split_mid_utf8() {
    let chunk = |delta: &str| {
        format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":null}}]}}\n\n"
        )
    };
    let frag = |i: usize, s: &str| {
        chunk(&format!(
            "{{\"tool_calls\":[{{\"index\":{i},\"function\":{{\"arguments\":{}}}}}]}}",
            serde_json::to_string(s).unwrap()
        ))
    };
    let mut body = String::new();
    body.push_str(&chunk(
        r#"{"role":"assistant","content":"Zürich → 東京 😀"}"#,
    ));
    body.push_str(&chunk(
        r#"{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read","arguments":""}}]}"#,
    ));
    body.push_str(&chunk(
        r#"{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"grep","arguments":"{\"pat"}}]}"#,
    ));
    body.push_str(&frag(0, "{\"path\": \"Zü"));
    body.push_str(&frag(1, "tern\": \"東"));
    body.push_str(&frag(0, "rich/😀.txt\"}"));
    body.push_str(&frag(1, "京\"}"));
    body.push_str(
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":9}}\n\ndata: [DONE]\n\n",
    );
    let body = body.into_bytes();
    let verify = |how: &str, events: &[StreamEvent], res: &Result<Assembled, LlmError>| {
        let a = res.as_ref().unwrap_or_else(|e| panic!("{how}: {e}"));
        assert_eq!(a.text, "Zürich → 東京 😀", "{how}");
        assert_eq!(text_of(events), a.text, "{how}");
        assert_eq!(a.tool_calls.len(), 2, "{how}");
        assert_eq!(a.tool_calls[0].id, "call_a");
        assert_eq!(a.tool_calls[0].name, "read");
        assert_eq!(
            a.tool_calls[0].arguments_json, r#"{"path": "Zürich/😀.txt"}"#,
            "{how}"
        );
        assert_eq!(a.tool_calls[1].id, "call_b");
        assert_eq!(
            a.tool_calls[1].arguments_json, r#"{"pattern": "東京"}"#,
            "{how}"
        );
        assert_eq!(a.stop_reason, StopReason::ToolUse);
    };
    for at in 1..body.len() {
        let (ev, res) = decode_pieces(Api::Openai, split_at(&body, &[at])).await;
        verify(&format!("split at {at}"), &ev, &res);
    }
    let server = FakeServer::start(vec![Reply::sse(body.clone()).every(1)]).await;
    let (ev, res) = drain(client().stream(&route(Api::Openai, &server.url), request())).await;
    verify("1-byte pieces over HTTP", &ev, &res);
}

/// Servers that omit the tool-call index: a new id opens a call, a missing
/// or repeated id continues it.
#[tokio::test]
async fn tool_calls_without_index() {
    let call = |id: Option<&str>, name: Option<&str>, args: &str| {
        let mut c = serde_json::json!({"function": {"arguments": args}});
        if let Some(id) = id {
            c["id"] = id.into();
        }
        if let Some(name) = name {
            c["function"]["name"] = name.into();
        }
        let chunk = serde_json::json!({"choices": [{"delta": {"tool_calls": [c]}}]});
        format!("data: {chunk}\n\n")
    };
    let body = [
        call(Some("a"), Some("read"), "{\"path\":"),
        call(Some("a"), None, "\"x\"}"),
        call(Some("b"), Some("glob"), "{\"pattern\":"),
        call(None, None, "\"*\"}"),
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n".to_string(),
    ]
    .concat();
    let (_, res) = decode_pieces(Api::Openai, vec![body.into_bytes()]).await;
    let a = res.unwrap();
    let calls: Vec<(&str, &str, &str)> = a
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments_json.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            ("a", "read", r#"{"path":"x"}"#),
            ("b", "glob", r#"{"pattern":"*"}"#)
        ]
    );
}

/// A server without indexes that gives parallel calls one id (`call_0`
/// each, every call whole in its chunk) makes separate calls; a call whose
/// fragments all repeat its id and name is still one call.
#[tokio::test]
async fn parallel_calls_sharing_an_id_without_index_stay_apart() {
    let call = |id: &str, name: &str, args: &str| {
        let c = serde_json::json!({"id": id, "function": {"name": name, "arguments": args}});
        let chunk = serde_json::json!({"choices": [{"delta": {"tool_calls": [c]}}]});
        format!("data: {chunk}\n\n")
    };
    let body = [
        call("call_0", "append", r#"{"line":"a"}"#),
        call("call_0", "append", r#"{"line":"b"}"#),
        call("call_0", "read", r#"{"path":"#),
        call("call_0", "read", r#""x"}"#),
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n".to_string(),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat()
    .into_bytes();
    for at in 1..body.len() {
        let (_, res) = decode_pieces(Api::Openai, split_at(&body, &[at])).await;
        let a = res.unwrap_or_else(|e| panic!("split at {at}: {e}"));
        let calls: Vec<(&str, &str, &str)> = a
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments_json.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                ("call_0", "append", r#"{"line":"a"}"#),
                ("call_0", "append", r#"{"line":"b"}"#),
                ("call_0", "read", r#"{"path":"x"}"#),
            ],
            "split at {at}"
        );
    }
}

/// A `redacted_thinking` block is kept, in its place and unchanged,
/// however the bytes are split.
#[tokio::test]
async fn redacted_thinking_is_kept_in_place() {
    let event = |name: &str, data: serde_json::Value| format!("event: {name}\ndata: {data}\n\n");
    let data = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP+==";
    let body = [
        event(
            "message_start",
            serde_json::json!({"type": "message_start", "message": {"usage": {"input_tokens": 12, "output_tokens": 1}}}),
        ),
        event(
            "content_block_start",
            serde_json::json!({"type": "content_block_start", "index": 0, "content_block": {"type": "redacted_thinking", "data": data}}),
        ),
        event(
            "content_block_stop",
            serde_json::json!({"type": "content_block_stop", "index": 0}),
        ),
        event(
            "content_block_start",
            serde_json::json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}}),
        ),
        event(
            "content_block_delta",
            serde_json::json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"path\":\"a\"}"}}),
        ),
        event(
            "content_block_stop",
            serde_json::json!({"type": "content_block_stop", "index": 1}),
        ),
        event(
            "message_delta",
            serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        ),
        event("message_stop", serde_json::json!({"type": "message_stop"})),
    ]
    .concat()
    .into_bytes();
    for at in 1..body.len() {
        let (ev, res) = decode_pieces(Api::Anthropic, split_at(&body, &[at])).await;
        let a = res.unwrap_or_else(|e| panic!("split at {at}: {e}"));
        assert_eq!(
            a.to_message().content,
            [
                Block::RedactedThinking { data: data.into() },
                Block::ToolUse {
                    id: "toolu_1".into(),
                    name: "read".into(),
                    arguments_json: r#"{"path":"a"}"#.into(),
                },
            ],
            "split at {at}"
        );
        assert_eq!(reasoning_of(&ev), "", "nothing readable is shown");
    }
}
