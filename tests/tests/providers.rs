//! Provider dialects end to end: the real flytod against the fake Anthropic
//! Messages server of `flyto_tests::fake_anthropic` and the fake
//! OpenAI-compatible server of `flyto_tests::fake_llm`: streamed text, tool
//! arguments split mid-JSON and mid-UTF-8, signed thinking sent back, cost
//! from cache tokens, the API key kept out of logs, events, history, the
//! state dir and tool children, and the overload fallback.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_anthropic::{self, FakeAnthropic, PRICES, SplitProxy, Usage};
use flyto_tests::fake_llm::{self, FakeLlm};
use flyto_tests::flyto_protocol::{
    BlockView, PlanSpec, PlanState, Request, Response, SessionEvent, SessionView, StepSpec,
};
use flyto_tests::sessions_support::{
    BASE, done, history, message_text, new_session, notices, send, start_with, text_of, workdir,
};
use flyto_tests::{DEADLINE, Daemon, TestEnv};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The variable holding the fake Anthropic key in flytod's environment.
const KEY_ENV: &str = "FAKE_ANTHROPIC_KEY";
const KEY: &str = "sk-ant-test-123";

/// Starts flytod with the Anthropic key in its environment and no proxy in
/// the way of the loopback fake servers.
fn start(env: &TestEnv) -> Daemon {
    start_with(env, &[(KEY_ENV, KEY)])
}

fn reasoning_of(events: &[SessionEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::Reasoning { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

/// The arguments (parsed) of the ToolCall event of `call`.
fn tool_call_args(events: &[SessionEvent], call: &str) -> Value {
    events
        .iter()
        .find_map(|e| match e {
            SessionEvent::ToolCall { id, arguments, .. } if id == call => {
                Some(serde_json::from_str(arguments).unwrap_or_else(|e| {
                    panic!("the arguments of {call} are not JSON ({e}): {arguments:?}")
                }))
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no ToolCall for {call}: {events:#?}"))
}

fn tool_result(events: &[SessionEvent], call: &str) -> (String, bool) {
    events
        .iter()
        .find_map(|e| match e {
            SessionEvent::ToolResult {
                id,
                preview,
                is_error,
                ..
            } if id == call => Some((preview.clone(), *is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no ToolResult for {call}: {events:#?}"))
}

/// (input, output, cache read, cache write, cost) of every LlmEnd.
fn llm_ends(events: &[SessionEvent]) -> Vec<(u64, u64, u64, u64, f64)> {
    events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::LlmEnd {
                input_tokens,
                output_tokens,
                cache_read_tokens,
                cache_write_tokens,
                cost_usd,
            } => Some((
                *input_tokens,
                *output_tokens,
                *cache_read_tokens,
                *cache_write_tokens,
                *cost_usd,
            )),
            _ => None,
        })
        .collect()
}

fn listed_session(env: &TestEnv, id: &str) -> SessionView {
    match env
        .client()
        .call(&Request::SessionList {})
        .expect("session_list")
    {
        Response::Sessions { sessions } => sessions
            .into_iter()
            .find(|s| s.id == id)
            .unwrap_or_else(|| panic!("session {id} is not listed")),
        other => panic!("unexpected answer to session_list: {other:?}"),
    }
}

fn assert_close(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() < 1e-9,
        "{what}: got {got}, expected {want}"
    );
}

/// The `[models.<name>]` table of an Anthropic profile with extra lines.
fn anthropic_profile(fake: &FakeAnthropic, name: &str, extra: &str) -> String {
    format!("{}{extra}\n", fake.profile(name, KEY_ENV))
}

#[test]
fn an_anthropic_session_streams_text_runs_a_tool_and_sends_signed_thinking_back() {
    let greeting = "Bonjour — ça va? ✓ All good.";
    let thinking = "The user wants greeting.txt; I will write it with the write tool.";
    let signature = "EqQBCkYIBxgCKkD+fake/signature==";
    let content = "héllo ✓";
    let args = json!({"path": "greeting.txt", "content": content}).to_string();
    let usages = [
        Usage::new(100, 20, 0, 1500),
        Usage::new(50, 60, 1500, 200),
        Usage::new(30, 10, 1700, 0),
    ];
    let fake = FakeAnthropic::start(
        KEY,
        vec![
            fake_anthropic::Reply::text(greeting)
                .cut_utf8(true)
                .usage(usages[0]),
            fake_anthropic::Reply::thinking_then_tool_use(
                thinking, signature, "toolu_01", "write", &args,
            )
            .usage(usages[1]),
            fake_anthropic::Reply::text("Wrote greeting.txt.").usage(usages[2]),
        ],
    );
    let config = format!(
        "{BASE}{}[roles]\nmain = \"claude\"\n",
        anthropic_profile(&fake, "claude", "max_output = 4096\nthinking_budget = 1024")
    );
    let env = TestEnv::new(&config);
    let _daemon = start(&env);
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    // A text reply streams as several deltas and is stored whole.
    let events = send(&env, &id, "Say hi");
    assert!(done(&events), "{events:#?}");
    assert!(
        matches!(&events[1], SessionEvent::LlmStart { model } if model == "claude"),
        "{events:#?}"
    );
    let deltas = events
        .iter()
        .filter(|e| matches!(e, SessionEvent::Text { .. }))
        .count();
    assert!(
        deltas >= 2,
        "the text arrives as several deltas: {events:#?}"
    );
    assert_eq!(text_of(&events), greeting);
    let ends = llm_ends(&events);
    assert_eq!(ends.len(), 1, "{events:#?}");
    assert_eq!(
        (ends[0].0, ends[0].1, ends[0].2, ends[0].3),
        (1600, 20, 0, 1500),
        "input includes the cache tokens: {events:#?}"
    );
    assert_close("first call cost", ends[0].4, usages[0].cost(&PRICES));
    let (_, messages) = history(&env, &id);
    assert_eq!(messages.len(), 2, "{messages:#?}");
    assert_eq!(messages[1].role, "assistant");
    assert_eq!(message_text(&messages[1]), greeting);

    // Thinking, then a write whose arguments were split mid-JSON and cut
    // mid-UTF-8 on the wire.
    let events = send(&env, &id, "Write greeting.txt");
    assert!(done(&events), "{events:#?}");
    assert_eq!(reasoning_of(&events), thinking, "{events:#?}");
    assert!(
        !text_of(&events).contains("greeting.txt; I will"),
        "thinking is kept apart from the answer: {events:#?}"
    );
    assert_eq!(
        tool_call_args(&events, "toolu_01"),
        json!({"path": "greeting.txt", "content": content})
    );
    let (preview, is_error) = tool_result(&events, "toolu_01");
    assert!(!is_error, "the write failed: {preview}");
    assert_eq!(text_of(&events), "Wrote greeting.txt.");
    assert_eq!(
        std::fs::read(dir.join("greeting.txt")).expect("greeting.txt in the workdir"),
        content.as_bytes()
    );

    let requests = fake.wait_requests(3, DEADLINE);
    assert_eq!(requests.len(), 3);
    let first = &requests[0];
    assert_eq!(first["model"], "fake-claude");
    assert_eq!(first["max_tokens"], 4096);
    assert_eq!(
        first["thinking"],
        json!({"type": "enabled", "budget_tokens": 1024})
    );
    let canonical = std::fs::canonicalize(&dir).expect("canonical workdir");
    assert!(
        first["system"]
            .to_string()
            .contains(&canonical.display().to_string()),
        "the system prompt names the workdir: {}",
        first["system"]
    );
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["input_schema"].is_object())
        .filter_map(|t| t["name"].as_str())
        .collect();
    for tool in ["read", "write", "edit", "glob", "grep", "bash"] {
        assert!(tools.contains(&tool), "{tool} is offered: {tools:?}");
    }
    // The third request sends the signed thinking back before the call,
    // and the result right after.
    let msgs = requests[2]["messages"].as_array().expect("messages");
    let pos = msgs
        .iter()
        .position(|m| {
            m["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(|b| b["type"] == "thinking"))
        })
        .unwrap_or_else(|| panic!("the thinking is not sent back: {:#}", requests[2]));
    let turn = &msgs[pos];
    assert_eq!(turn["role"], "assistant");
    assert_eq!(turn["content"][0]["type"], "thinking", "{turn:#}");
    assert_eq!(turn["content"][0]["thinking"], thinking, "{turn:#}");
    assert_eq!(turn["content"][0]["signature"], signature, "{turn:#}");
    let call = turn["content"]
        .as_array()
        .expect("content")
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap_or_else(|| panic!("no tool_use after the thinking: {turn:#}"));
    assert_eq!(call["id"], "toolu_01");
    assert_eq!(
        call["input"],
        json!({"path": "greeting.txt", "content": content})
    );
    let answer = &msgs[pos + 1];
    assert_eq!(answer["role"], "user");
    assert!(
        answer["content"].as_array().is_some_and(|c| c
            .iter()
            .any(|b| b["type"] == "tool_result" && b["tool_use_id"] == "toolu_01")),
        "{answer:#}"
    );
    assert_eq!(pos + 2, msgs.len(), "the result is the last message");
    fake.assert_protocol_ok();

    // The stored turn keeps the thinking apart and the whole arguments.
    let (_, messages) = history(&env, &id);
    let stored = messages
        .iter()
        .find(|m| {
            m.blocks
                .iter()
                .any(|b| matches!(b, BlockView::ToolUse { .. }))
        })
        .expect("the stored tool call");
    assert!(
        matches!(&stored.blocks[0], BlockView::Thinking { text } if text == thinking),
        "{stored:#?}"
    );
    let stored_args = stored
        .blocks
        .iter()
        .find_map(|b| match b {
            BlockView::ToolUse { arguments, .. } => Some(arguments.clone()),
            _ => None,
        })
        .expect("arguments");
    assert_eq!(
        serde_json::from_str::<Value>(&stored_args).expect("stored arguments are JSON"),
        json!({"path": "greeting.txt", "content": content})
    );

    // Tokens and cost add up from the profile prices, cache included.
    let input: u64 = usages.iter().map(Usage::total_input).sum();
    let output: u64 = usages.iter().map(|u| u.output).sum();
    let cost: f64 = usages.iter().map(|u| u.cost(&PRICES)).sum();
    let session = listed_session(&env, &id);
    assert_eq!(
        (session.input_tokens, session.output_tokens),
        (input, output),
        "{session:#?}"
    );
    assert_close("session cost", session.cost_usd, cost);
    let stats = match env.client().call(&Request::Stats {}).expect("stats") {
        Response::Stats { stats } => stats,
        other => panic!("unexpected answer {other:?}"),
    };
    assert_eq!((stats.input_tokens, stats.output_tokens), (input, output));
    assert_close("stats cost", stats.cost_usd, cost);
}

/// Every regular file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return hits;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            hits.extend(files_containing(&path, needle));
        } else if meta.is_file()
            && std::fs::read(&path).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle))
        {
            hits.push(path);
        }
    }
    hits
}

#[test]
fn the_api_key_stays_out_of_logs_events_history_and_tool_children() {
    let fake = FakeAnthropic::start(
        KEY,
        vec![
            fake_anthropic::Reply::tool_use(
                "toolu_env",
                "bash",
                json!({"command": "printenv FAKE_ANTHROPIC_KEY; echo \"printenv=$?\"; env"}),
            ),
            fake_anthropic::Reply::text("I looked at the environment."),
            // A provider that echoes the key it was sent in its error.
            fake_anthropic::Reply::error(
                401,
                "authentication_error",
                &format!("invalid x-api-key: {KEY}"),
            ),
        ],
    );
    // Verbose logging: whatever flytod and its HTTP stack print.
    let config = format!(
        "[daemon]\nshutdown_grace = \"1s\"\nlog_level = \"trace\"\n\n[plans]\nkill_grace = \"200ms\"\n\n{}",
        fake.config("claude", KEY_ENV)
    );
    let env = TestEnv::new(&config);
    let daemon = start(&env);
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let mut all_events = send(&env, &id, "show me the environment");
    assert!(done(&all_events), "{all_events:#?}");
    let (preview, is_error) = tool_result(&all_events, "toolu_env");
    assert!(!is_error, "env failed: {preview}");
    // The whole result as the model got it.
    let requests = fake.wait_requests(2, DEADLINE);
    let result = requests[1]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == "toolu_env")
        .map(|b| b["content"].to_string())
        .unwrap_or_else(|| panic!("no tool result: {:#}", requests[1]));
    assert!(
        result.contains("printenv=1"),
        "the tool ran and {KEY_ENV} is not set in its environment: {result}"
    );
    assert!(result.contains("PATH="), "env printed: {result}");
    for text in [&result, &preview] {
        assert!(
            !text.contains(KEY) && !text.contains(KEY_ENV),
            "the tool child saw the key: {text}"
        );
    }

    // An auth error that quotes the key is reported without it.
    let events = send(&env, &id, "again");
    let message = match events.last() {
        Some(SessionEvent::Error { message }) => message.clone(),
        other => panic!("the run should fail with an auth error: {other:?}\n{events:#?}"),
    };
    assert!(
        message.to_lowercase().contains("authentication"),
        "{message}"
    );
    assert!(
        message.contains("api_key_env"),
        "says where the key comes from: {message}"
    );
    all_events.extend(events);

    // A plan's run step does not get it either.
    let plan = env.submit(PlanSpec {
        name: None,
        env: Default::default(),
        steps: vec![StepSpec {
            id: "env".into(),
            run: Some(
                "if env | grep -q -e ANTHROPIC -e sk-ant; then echo leaked; else echo clean; fi"
                    .into(),
            ),
            ..Default::default()
        }],
        sandbox: None,
    });
    let view = env.wait_plan(&plan, "terminal", |p| p.state.is_terminal());
    assert_eq!(view.state, PlanState::Succeeded, "{view:#?}");
    assert_eq!(view.steps[0].stdout_tail, "clean\n", "{view:#?}");

    let events_text = format!("{all_events:?}");
    assert!(
        !events_text.contains(KEY),
        "an event carries the key: {events_text}"
    );
    let (session, messages) = history(&env, &id);
    let history_text = format!("{session:?}{messages:?}");
    assert!(!history_text.contains(KEY), "the history carries the key");
    let out = env.ctl(&["session_history", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stdout.contains(KEY) && !out.stderr.contains(KEY));
    assert!(
        out.stdout.contains("I looked at the environment."),
        "{}",
        out.stdout
    );
    let out = env.ctl(&["session_list"]);
    assert!(!out.stdout.contains(KEY) && !out.stderr.contains(KEY));
    fake.assert_protocol_ok();

    // Nothing on disk, nothing in the log (flushed by a clean shutdown).
    let status = daemon.terminate();
    assert!(status.success(), "{status:?}");
    let on_disk = files_containing(&env.state, KEY.as_bytes());
    assert!(on_disk.is_empty(), "the key was written to {on_disk:?}");
    let log = last_log(&env);
    assert!(
        !log.trim().is_empty(),
        "flytod logged nothing at trace level"
    );
    assert!(!log.contains(KEY), "flytod's log carries the key");
}

/// Everything flytod logged in this env (its log files outlive it).
fn last_log(env: &TestEnv) -> String {
    let mut log = String::new();
    for entry in std::fs::read_dir(env.tmp.path())
        .expect("tmp dir")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("flytod-") && name.ends_with(".log") {
            log.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    log
}

#[test]
fn repeated_overloads_fall_back_to_the_configured_profile() {
    let primary = FakeAnthropic::start(
        KEY,
        vec![
            fake_anthropic::Reply::overloaded(),
            fake_anthropic::Reply::overloaded(),
        ],
    );
    let backup = FakeLlm::start(vec![fake_llm::Reply::text("answer from the backup")]);
    let config = format!(
        "{BASE}{}\n[models.primary.retry]\ninitial_backoff = \"50ms\"\nmax_backoff = \"100ms\"\nfallback_after = 2\n\n[models.backup]\napi = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\ninput_price = 1.0\noutput_price = 2.0\n\n[roles]\nmain = \"primary\"\nmain_fallback = \"backup\"\n",
        primary.profile("primary", KEY_ENV),
        backup.base_url(),
    );
    let env = TestEnv::new(&config);
    let _daemon = start(&env);
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let events = send(&env, &id, "hello");
    assert!(done(&events), "{events:#?}");
    let notices = notices(&events);
    let fallback = notices
        .iter()
        .find(|n| n.contains("falling back"))
        .unwrap_or_else(|| panic!("no Notice about the fallback: {events:#?}"));
    assert!(
        fallback.contains("primary")
            && fallback.contains("backup")
            && fallback.contains("overloaded"),
        "{fallback}"
    );
    assert_eq!(text_of(&events), "answer from the backup");
    let ends = llm_ends(&events);
    assert_eq!(ends.len(), 1, "{events:#?}");
    let (prompt, completion) = fake_llm::DEFAULT_USAGE;
    assert_eq!((ends[0].0, ends[0].1), (prompt, completion));
    assert_close(
        "cost at the backup's prices",
        ends[0].4,
        (prompt as f64 * 1.0 + completion as f64 * 2.0) / 1e6,
    );

    assert_eq!(
        primary.request_count(),
        2,
        "two overloads, then the fallback"
    );
    assert_eq!(backup.request_count(), 1);
    let body = &backup.requests()[0];
    assert_eq!(
        body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .map(|m| &m["content"]),
        Some(&json!("hello")),
        "{body:#}"
    );
    let (session, messages) = history(&env, &id);
    assert_eq!(session.status, "idle", "{session:#?}");
    assert_eq!(messages.len(), 2, "{messages:#?}");
    assert_eq!(message_text(&messages[1]), "answer from the backup");
    primary.assert_protocol_ok();
    backup.assert_protocol_ok();
}

/// `127.0.0.1:<port>` of a `http://127.0.0.1:<port>/v1` base URL.
fn addr_of(base_url: &str) -> SocketAddr {
    base_url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .parse()
        .expect("a loopback address")
}

fn openai_chunk(delta: Value) -> String {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": null}],
    })
    .to_string()
}

/// A tool call opened by one chunk, its arguments in the given fragments.
fn openai_call(index: usize, id: &str, name: &str, fragments: &[&str]) -> Vec<String> {
    let mut out = vec![openai_chunk(json!({"tool_calls": [{
        "index": index, "id": id, "type": "function",
        "function": {"name": name, "arguments": ""},
    }]}))];
    for f in fragments {
        out.push(openai_chunk(json!({"tool_calls": [{
            "index": index, "function": {"arguments": f},
        }]})));
    }
    out
}

#[test]
fn openai_tool_call_fragments_split_mid_json_and_mid_utf8_arrive_whole() {
    // Fragments cut inside keys, inside `\u00e9` escapes, between the two
    // halves of a surrogate pair, next to literal multi-byte characters;
    // the proxy also cuts every multi-byte character in two on the wire.
    let write = [
        r#"{"pa"#,
        r#"th": "ü"#,
        r#"tf8.txt", "con"#,
        r#"tent": "h\u0"#,
        r#"0e9llo "#,
        "✓",
        r#" and \ud83d"#,
        r#"\ude00 caf\u00"#,
        r#"e9 — ✓"}"#,
    ];
    let cat = [
        r#"{"comm"#,
        r#"and": "cat ü"#,
        r#"tf8.txt; echo; echo \u00e"#,
        r#"9t\u00e9"}"#,
    ];
    let mut payloads = vec![openai_chunk(json!({"role": "assistant", "content": null}))];
    payloads.extend(openai_call(0, "call_w", "write", &write));
    payloads.extend(openai_call(1, "call_cat", "bash", &cat));
    payloads.push(
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
        .to_string(),
    );
    payloads.push(
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940}})
        .to_string(),
    );
    payloads.push("[DONE]".into());
    let fake = FakeLlm::start(vec![
        fake_llm::Reply::raw(payloads),
        fake_llm::Reply::text("Wrote and showed ütf8.txt."),
    ]);
    let proxy = SplitProxy::start(addr_of(&fake.base_url()));
    let config = format!(
        "{BASE}{}",
        fake.config()
            .replace(&fake.base_url(), &format!("http://{}/v1", proxy.addr()))
    );
    let env = TestEnv::new(&config);
    let _daemon = start(&env);
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let expected = "héllo ✓ and 😀 café — ✓";
    let events = send(&env, &id, "write ütf8.txt and show it");
    assert!(done(&events), "{events:#?}");
    assert_eq!(
        tool_call_args(&events, "call_w"),
        json!({"path": "ütf8.txt", "content": expected})
    );
    assert_eq!(
        tool_call_args(&events, "call_cat"),
        json!({"command": "cat ütf8.txt; echo; echo été"})
    );
    let (preview, is_error) = tool_result(&events, "call_w");
    assert!(!is_error, "the write failed: {preview}");
    let (preview, is_error) = tool_result(&events, "call_cat");
    assert!(!is_error, "cat failed: {preview}");
    assert_eq!(
        std::fs::read(dir.join("ütf8.txt")).expect("ütf8.txt in the workdir"),
        expected.as_bytes()
    );
    assert_eq!(text_of(&events), "Wrote and showed ütf8.txt.");

    let requests = fake.wait_requests(2, DEADLINE);
    let shown = requests[1]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call_cat")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no result for call_cat: {:#}", requests[1]))
        .to_string();
    assert!(
        shown.contains(expected) && shown.contains("été"),
        "the bash tool read the file back: {shown}"
    );
    let (_, messages) = history(&env, &id);
    let stored: Vec<Value> = messages
        .iter()
        .flat_map(|m| &m.blocks)
        .filter_map(|b| match b {
            BlockView::ToolUse { arguments, .. } => {
                Some(serde_json::from_str(arguments).expect("stored arguments are JSON"))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        stored,
        [
            json!({"path": "ütf8.txt", "content": expected}),
            json!({"command": "cat ütf8.txt; echo; echo été"}),
        ]
    );
    fake.assert_protocol_ok();
}
