//! The agent loop's guards end to end: the real flytod against the scripted
//! fake OpenAI-compatible server. Each stop is checked from the user's side
//! (the `Done`/`Error` event and its "how to continue" message, the stored
//! history) and from the model's side (what the fake was sent): the repeat
//! guard (soft note, hard stop), the stall stop, the `max_iterations`
//! backstop, `max_tokens` continuation and its limit (also across a tool
//! round and in an agent plan step's output), the per-run budget, and a
//! provider error that is not retried.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::Backend;
use flyto_tests::fake_llm::{DEFAULT_USAGE, Reply};
use flyto_tests::flyto_protocol::{
    BlockView, MessageView, PlanSpec, PlanState, SessionEvent, StepSpec,
};
use flyto_tests::sessions_support::{
    assert_every_call_answered, history, message_text, new_session, request_messages,
    request_tool_result, send_logged, setup_with, setup_with_on, text_of, workdir,
};
use serde_json::{Value, json};

/// The note the loop appends to a repeated tool result.
const REPEAT_NOTE: &str = "[flyto: you already called `read`";
/// The user message the loop sends after a reply cut off by the output limit.
const CONTINUE_PROMPT: &str = "Continue exactly where you stopped";

// The guards' core, on both stores.
on_both_backends!(
    max_iterations_stops_the_run_and_a_new_send_continues_it,
    the_run_budget_stops_after_the_tool_round_and_resets_per_run,
    an_agent_step_records_the_whole_text_of_a_continued_reply,
    runs_stopped_by_a_guard_make_session_send_exit_1,
);

/// The `stop` and `message` of the run's `Done` event.
fn stopped(events: &[SessionEvent]) -> (String, String) {
    match events.last() {
        Some(SessionEvent::Done { stop, message }) => (stop.clone(), message.clone()),
        _ => panic!("the run did not end with Done: {events:#?}"),
    }
}

fn roles(messages: &[MessageView]) -> Vec<&str> {
    messages.iter().map(|m| m.role.as_str()).collect()
}

/// The stored result of tool call `call`.
fn stored_result(messages: &[MessageView], call: &str) -> String {
    messages
        .iter()
        .flat_map(|m| &m.blocks)
        .find_map(|b| match b {
            BlockView::ToolResult {
                call_id, content, ..
            } if call_id == call => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no stored result for {call}: {messages:#?}"))
}

/// A reply streaming `text` that the provider cut off at its output limit:
/// finish_reason "length", then usage and `[DONE]`.
fn cut_off(text: &str) -> Reply {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "model": "fake-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
        .to_string()
    };
    let (head, tail) = text.split_at(text.len() / 2);
    let (prompt, completion) = DEFAULT_USAGE;
    Reply::raw(vec![
        chunk(json!({"role": "assistant"}), Value::Null),
        chunk(json!({"content": head}), Value::Null),
        chunk(json!({"content": tail}), Value::Null),
        chunk(json!({}), json!("length")),
        json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        })
        .to_string(),
        "[DONE]".into(),
    ])
}

fn read_call(id: &str, path: &str) -> Reply {
    Reply::tool_call(id, "read", json!({"path": path}))
}

#[test]
fn the_same_call_with_the_same_result_is_flagged_then_stopped_at_the_fourth() {
    let calls = ["r1", "r2", "r3", "r4", "r5"];
    let (fake, env, daemon) = setup_with(
        "",
        calls.iter().map(|c| read_call(c, "notes.txt")).collect(),
    );
    let dir = workdir(&env, "ws");
    std::fs::write(dir.join("notes.txt"), "alpha\nbeta\n").expect("notes.txt");
    let id = new_session(&env, &dir);

    let events = send_logged(&env, &daemon, &id, "what is in notes.txt?");
    let (stop, message) = stopped(&events);
    assert_eq!(stop, "repeat_guard", "{events:#?}");
    assert!(
        message.contains("`read`") && message.contains("send a message with new guidance"),
        "the stop names the tool and says how to continue: {message}"
    );
    // The fourth identical result ended the run: no fifth model call.
    assert_eq!(fake.request_count(), 4, "{:#?}", fake.requests());

    let requests = fake.requests();
    let first = request_tool_result(&requests[1], "r1");
    assert!(first.contains("alpha"), "{first}");
    assert!(
        !first.contains("[flyto:"),
        "the first result is plain: {first}"
    );
    for (n, call, times) in [(2, "r2", 2), (3, "r3", 3)] {
        let result = request_tool_result(&requests[n], call);
        assert!(result.contains("alpha"), "{result}");
        assert!(
            result.contains(REPEAT_NOTE) && result.contains(&format!("{times} times")),
            "the model is told it repeats itself ({call}): {result}"
        );
    }
    fake.assert_protocol_ok();

    let (session, messages) = history(&env, &id);
    assert_eq!(session.status, "idle", "{session:#?}");
    // user, then 4 × (assistant call, user result).
    assert_eq!(messages.len(), 9, "{messages:#?}");
    assert_every_call_answered(&messages);
    assert!(stored_result(&messages, "r3").contains(REPEAT_NOTE));
    assert!(stored_result(&messages, "r4").contains("alpha"));
}

#[test]
fn steps_that_only_repeat_earlier_calls_stop_the_run_as_stalled() {
    // Four different calls, then each of them twice more: every step after
    // the fourth repeats an earlier (tool, arguments, result) and none
    // reaches the hard repeat limit (4), so the 8th such step in a row
    // stops the run as stalled.
    let files = ["a.txt", "b.txt", "c.txt", "d.txt"];
    let mut script: Vec<Reply> = (0..12)
        .map(|i| read_call(&format!("s{}", i + 1), files[i % 4]))
        .collect();
    script.push(read_call("s13", "e.txt"));
    let (fake, env, daemon) = setup_with("", script);
    let dir = workdir(&env, "ws");
    for f in files.iter().chain(&["e.txt"]) {
        std::fs::write(dir.join(f), format!("contents of {f}\n")).expect("file");
    }
    let id = new_session(&env, &dir);

    let events = send_logged(&env, &daemon, &id, "look around");
    let (stop, message) = stopped(&events);
    assert_eq!(stop, "stalled", "{events:#?}");
    assert!(
        message.contains("8 steps") && message.contains("send a message with new guidance"),
        "the stop says why and how to continue: {message}"
    );
    assert_eq!(
        fake.request_count(),
        12,
        "4 new steps, then 8 repeating ones"
    );

    let requests = fake.requests();
    for (n, call) in (1..=4).map(|n| (n, format!("s{n}"))) {
        let result = request_tool_result(&requests[n], &call);
        assert!(!result.contains("[flyto:"), "{call} is new: {result}");
    }
    for (n, times) in [(5, 2), (8, 2), (9, 3), (11, 3)] {
        let result = request_tool_result(&requests[n], &format!("s{n}"));
        assert!(
            result.contains(REPEAT_NOTE) && result.contains(&format!("{times} times")),
            "s{n} is a repeat ({times} times): {result}"
        );
    }
    fake.assert_protocol_ok();

    let (session, messages) = history(&env, &id);
    assert_eq!(session.status, "idle", "{session:#?}");
    assert_eq!(messages.len(), 1 + 2 * 12, "{messages:#?}");
    assert_every_call_answered(&messages);
    let last = stored_result(&messages, "s12");
    assert!(
        last.contains("contents of d.txt") && last.contains("3 times"),
        "{last}"
    );
}

fn max_iterations_stops_the_run_and_a_new_send_continues_it(backend: Backend) {
    let (fake, env, daemon) = setup_with_on(
        backend,
        "[sessions]\nmax_iterations = 3\n",
        vec![
            read_call("m1", "f1.txt"),
            read_call("m2", "f2.txt"),
            read_call("m3", "f3.txt"),
            Reply::text("Picked up where I left off."),
        ],
    );
    let dir = workdir(&env, "ws");
    for n in 1..=3 {
        std::fs::write(dir.join(format!("f{n}.txt")), format!("file {n}\n")).expect("file");
    }
    let id = new_session(&env, &dir);

    let events = send_logged(&env, &daemon, &id, "read every file");
    let (stop, message) = stopped(&events);
    assert_eq!(stop, "max_iterations", "{events:#?}");
    assert!(
        message.contains("3 model calls")
            && message.contains("sessions.max_iterations")
            && message.contains("send a message"),
        "the stop names the setting and says how to continue: {message}"
    );
    assert_eq!(fake.request_count(), 3);
    let (session, messages) = history(&env, &id);
    assert_eq!(session.status, "idle", "{session:#?}");
    assert_eq!(messages.len(), 7, "{messages:#?}");
    assert_every_call_answered(&messages);

    let events = send_logged(&env, &daemon, &id, "go on");
    assert_eq!(stopped(&events).0, "end_turn", "{events:#?}");
    assert_eq!(text_of(&events), "Picked up where I left off.");
    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    let sent = request_messages(&requests[3]);
    assert_eq!(
        sent.iter()
            .find(|m| m["role"] == "user")
            .map(|m| &m["content"]),
        Some(&json!("read every file")),
        "the earlier transcript is sent: {sent:#?}"
    );
    for (n, call) in [(1, "m1"), (2, "m2"), (3, "m3")] {
        assert!(
            request_tool_result(&requests[3], call).contains(&format!("file {n}")),
            "{call} is in the continued transcript"
        );
    }
    assert_eq!(
        sent.last().map(|m| (&m["role"], &m["content"])),
        Some((&json!("user"), &json!("go on"))),
        "{sent:#?}"
    );
    fake.assert_protocol_ok();

    let (_, messages) = history(&env, &id);
    assert_eq!(messages.len(), 9, "{messages:#?}");
    assert_eq!(message_text(&messages[7]), "go on");
    assert_eq!(message_text(&messages[8]), "Picked up where I left off.");
}

#[test]
fn cut_off_replies_are_continued_up_to_max_continuations() {
    let (fake, env, daemon) = setup_with(
        "[sessions]\nmax_continuations = 2\n",
        vec![
            // Run 1: two cut-off replies, then the end.
            cut_off("The first part, "),
            cut_off("the second part, "),
            Reply::text("and the end."),
            // Run 2: cut off three times in a row.
            cut_off("One, "),
            cut_off("two, "),
            cut_off("three, "),
            // Run 3: "continue".
            Reply::text("four."),
        ],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let events = send_logged(&env, &daemon, &id, "tell me a long story");
    assert_eq!(stopped(&events).0, "end_turn", "{events:#?}");
    assert_eq!(
        text_of(&events),
        "The first part, the second part, and the end."
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    for (n, cut) in [(1, "The first part, "), (2, "the second part, ")] {
        let sent = request_messages(&requests[n]);
        let [.., assistant, user] = sent.as_slice() else {
            panic!("request {n} is too short: {sent:#?}");
        };
        assert_eq!(assistant["role"], "assistant", "{sent:#?}");
        assert_eq!(assistant["content"], cut, "{sent:#?}");
        assert_eq!(user["role"], "user", "{sent:#?}");
        assert!(
            user["content"]
                .as_str()
                .is_some_and(|c| c.contains(CONTINUE_PROMPT)),
            "request {n} asks the model to continue: {sent:#?}"
        );
    }
    let (_, messages) = history(&env, &id);
    assert_eq!(
        roles(&messages),
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant"
        ],
        "{messages:#?}"
    );
    let replies: String = messages
        .iter()
        .filter(|m| m.role == "assistant")
        .map(message_text)
        .collect();
    assert_eq!(replies, "The first part, the second part, and the end.");

    let events = send_logged(&env, &daemon, &id, "another one");
    let (stop, message) = stopped(&events);
    assert_eq!(stop, "max_tokens", "{events:#?}");
    assert!(
        message.contains("3 times") && message.contains("send \"continue\""),
        "the stop says how to continue: {message}"
    );
    assert_eq!(text_of(&events), "One, two, three, ");
    // The first reply and max_continuations = 2 continuations, no more.
    assert_eq!(fake.request_count(), 6);

    let events = send_logged(&env, &daemon, &id, "continue");
    assert_eq!(stopped(&events).0, "end_turn", "{events:#?}");
    assert_eq!(text_of(&events), "four.");
    let requests = fake.requests();
    let sent = request_messages(&requests[6]);
    let assistants: Vec<&Value> = sent
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| &m["content"])
        .collect();
    assert_eq!(
        assistants,
        [
            "The first part, ",
            "the second part, ",
            "and the end.",
            "One, ",
            "two, ",
            "three, "
        ],
        "the whole transcript is sent: {sent:#?}"
    );
    assert_eq!(sent.last().expect("message")["content"], "continue");
    fake.assert_protocol_ok();
}

#[test]
fn the_run_budget_also_stops_continuations_of_cut_off_replies() {
    // Each cut-off reply costs $0.0011 (1,000 input tokens at $1 per
    // million, 50 output at $2): over the limit after the first.
    let (fake, env, daemon) = setup_with(
        "[sessions]\nmax_run_cost_usd = 0.001\nmax_continuations = 3\n",
        vec![
            cut_off("The first part, "),
            cut_off("the second part, "),
            cut_off("the third part, "),
            cut_off("the fourth part, "),
        ],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let events = send_logged(&env, &daemon, &id, "tell me a long story");
    let (stop, message) = stopped(&events);
    assert_eq!(stop, "budget", "{events:#?}");
    assert!(
        message.contains("$0.0011") && message.contains("sessions.max_run_cost_usd = $0.0010"),
        "{message}"
    );
    assert_eq!(fake.request_count(), 1, "no continuation past the limit");
    let (session, _) = history(&env, &id);
    assert!((session.cost_usd - 0.0011).abs() < 1e-9, "{session:#?}");
}

fn the_run_budget_stops_after_the_tool_round_and_resets_per_run(backend: Backend) {
    // Prices: 1 USD per million input tokens, 2 per million output tokens.
    let (fake, env, daemon) = setup_with_on(
        backend,
        "[sessions]\nmax_run_cost_usd = 0.001\n",
        vec![
            // Run 1: $0.0004, then $0.0007: over the limit after call 2.
            read_call("b1", "one.txt").usage(300, 50),
            read_call("b2", "two.txt").usage(600, 50),
        ],
    );
    let dir = workdir(&env, "ws");
    std::fs::write(dir.join("one.txt"), "one\n").expect("one.txt");
    std::fs::write(dir.join("two.txt"), "two\n").expect("two.txt");
    let id = new_session(&env, &dir);

    let events = send_logged(&env, &daemon, &id, "read both files");
    let (stop, message) = stopped(&events);
    assert_eq!(stop, "budget", "{events:#?}");
    assert!(
        message.contains("$0.0011")
            && message.contains("sessions.max_run_cost_usd = $0.0010")
            && message.contains("send a message to continue"),
        "the stop names the cost, the limit and how to continue: {message}"
    );
    assert_eq!(fake.request_count(), 2);
    let (session, messages) = history(&env, &id);
    assert_eq!(session.status, "idle", "{session:#?}");
    // The tool round of the call that crossed the limit was completed.
    assert_eq!(messages.len(), 5, "{messages:#?}");
    assert!(stored_result(&messages, "b2").contains("two"));
    assert_every_call_answered(&messages);
    assert!((session.cost_usd - 0.0011).abs() < 1e-9, "{session:#?}");

    // The limit is per run: after this run's first call the cost carried
    // over from run 1 would cross it; this run alone costs $0.0008.
    fake.push(vec![
        read_call("b3", "one.txt").usage(300, 50),
        Reply::text("Both read.").usage(300, 50),
    ]);
    let events = send_logged(&env, &daemon, &id, "go on");
    assert_eq!(stopped(&events).0, "end_turn", "{events:#?}");
    assert_eq!(text_of(&events), "Both read.");
    assert_eq!(fake.request_count(), 4);
    let (session, _) = history(&env, &id);
    assert!((session.cost_usd - 0.0019).abs() < 1e-9, "{session:#?}");
    fake.assert_protocol_ok();
}

#[test]
fn an_auth_error_is_not_retried_and_the_next_send_works() {
    let (fake, env, daemon) = setup_with(
        "",
        vec![Reply::status(401, None), Reply::text("Back in business.")],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let events = send_logged(&env, &daemon, &id, "first try");
    let message = match events.last() {
        Some(SessionEvent::Error { message }) => message.clone(),
        _ => panic!("the run did not end with Error: {events:#?}"),
    };
    assert!(
        message.contains("authentication failed")
            && message.contains("send a message to try again"),
        "the error says what failed and how to go on: {message}"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, SessionEvent::Notice { .. })),
        "an auth error is not retried: {events:#?}"
    );
    assert_eq!(fake.request_count(), 1, "not retried");
    let (session, messages) = history(&env, &id);
    assert_eq!(session.status, "error", "{session:#?}");
    assert!(
        session
            .error
            .as_deref()
            .is_some_and(|e| e.contains("authentication failed")),
        "{session:#?}"
    );
    assert_eq!(roles(&messages), ["user"], "{messages:#?}");

    let events = send_logged(&env, &daemon, &id, "second try");
    assert_eq!(stopped(&events).0, "end_turn", "{events:#?}");
    assert_eq!(text_of(&events), "Back in business.");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let sent = requests[1]["messages"].to_string();
    assert!(
        sent.contains("first try") && sent.contains("second try"),
        "both user messages are sent: {sent}"
    );
    fake.assert_protocol_ok();
    let (session, messages) = history(&env, &id);
    assert_eq!(session.status, "idle", "{session:#?}");
    assert_eq!(session.error, None, "{session:#?}");
    assert_eq!(
        message_text(messages.last().expect("message")),
        "Back in business."
    );
}

fn an_agent_step_records_the_whole_text_of_a_continued_reply(backend: Backend) {
    let (fake, env, _daemon) = setup_with_on(
        backend,
        "[sessions]\nmax_continuations = 2\n",
        vec![
            Reply::tool_call("a1", "read", json!({"path": "in.txt"})),
            cut_off("Summary: the file says "),
            Reply::text("hello, and nothing else."),
        ],
    );
    let dir = workdir(&env, "plan-ws");
    std::fs::write(dir.join("in.txt"), "hello\n").expect("in.txt");
    let plan = env.submit(PlanSpec {
        name: None,
        env: Default::default(),
        steps: vec![StepSpec {
            id: "summarize".into(),
            prompt: Some("summarize in.txt".into()),
            workdir: Some(dir.display().to_string()),
            ..Default::default()
        }],
        sandbox: None,
    });
    let view = env.wait_plan(&plan, "terminal", |p| p.state.is_terminal());
    assert_eq!(view.state, PlanState::Succeeded, "{view:#?}");
    assert_eq!(
        view.steps[0].stdout_tail, "Summary: the file says hello, and nothing else.",
        "the step's output is the whole reply, across the continuation: {view:#?}"
    );
    assert_eq!(fake.request_count(), 3);
    fake.assert_protocol_ok();
}

#[test]
fn continuations_are_counted_per_reply_not_per_run() {
    // With max_continuations = 1, a cut-off reply before a tool round and
    // another after it are each continued once: they are not "in a row".
    let (fake, env, daemon) = setup_with(
        "[sessions]\nmax_continuations = 1\n",
        vec![
            cut_off("Let me look "),
            Reply::tool_call("c1", "read", json!({"path": "in.txt"})),
            cut_off("The file says "),
            Reply::text("hello."),
        ],
    );
    let dir = workdir(&env, "ws");
    std::fs::write(dir.join("in.txt"), "hello\n").expect("in.txt");
    let id = new_session(&env, &dir);

    let events = send_logged(&env, &daemon, &id, "what does in.txt say?");
    assert_eq!(stopped(&events).0, "end_turn", "{events:#?}");
    assert_eq!(text_of(&events), "Let me look The file says hello.");
    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    let last = request_messages(&requests[3]).last().expect("message");
    assert!(
        last["content"]
            .as_str()
            .is_some_and(|c| c.contains(CONTINUE_PROMPT)),
        "the second cut-off reply is continued: {last:#}"
    );
    fake.assert_protocol_ok();
}

/// A run a guard stopped is not an answer: `session_send` exits 1 and says
/// how to go on; a run that ends its turn exits 0.
fn runs_stopped_by_a_guard_make_session_send_exit_1(backend: Backend) {
    let mut script = vec![read_call("g1", "f.txt")];
    script.extend(["r1", "r2", "r3", "r4"].map(|c| read_call(c, "f.txt")));
    script.push(Reply::text("fine"));
    let (fake, env, daemon) = setup_with_on(backend, "[sessions]\nmax_iterations = 1\n", script);
    let dir = workdir(&env, "ws");
    std::fs::write(dir.join("f.txt"), "x\n").expect("f.txt");
    let id = new_session(&env, &dir);

    let out = env.ctl(&["session_send", &id, "read f.txt"]);
    assert_eq!(out.code, 1, "max_iterations: {out:?}");
    assert!(
        out.stderr.contains("sessions.max_iterations"),
        "{}",
        out.stderr
    );

    // The same call four times: the repeat guard (max_iterations allows it).
    let config = std::fs::read_to_string(&env.config).expect("config");
    env.write_config(&config.replace("max_iterations = 1", "max_iterations = 10"));
    daemon.signal(libc::SIGHUP);
    flyto_tests::wait_until("the config to be reloaded", flyto_tests::DEADLINE, || {
        daemon.log().contains("config reloaded").then_some(())
    });
    let out = env.ctl(&["session_send", &id, "read it again"]);
    assert_eq!(out.code, 1, "repeat guard: {out:?}");
    assert!(out.stderr.contains("same result"), "{}", out.stderr);

    let out = env.ctl(&["session_send", &id, "just answer"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.trim(), "fine");
    fake.assert_protocol_ok();
}
