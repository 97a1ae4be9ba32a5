//! Agent sessions end to end: the real flytod against the scripted fake
//! OpenAI-compatible server of `flyto_tests::fake_llm`, driven through the
//! protocol client and `flytoctl`: streaming, history and cost, tool
//! rounds, the bash policy, Conflict, cancel (mid-stream and mid-tool),
//! SIGKILL recovery, attach, agent plan steps, plans from a tool's child
//! through FLYTO_PLAN_SOCK, retries (429, cut and idle streams), parallel
//! calls, and the "no model configured" errors.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_llm::{FakeLlm, Reply};
use flyto_tests::flyto_protocol::{
    ClientError, ErrorCode, Event, PlanSpec, PlanState, Request, Response, SessionEvent, StepSpec,
    StepState,
};
use flyto_tests::sessions_support::{
    BASE, assert_every_call_answered, assert_run_shape, cancel, done, drain, history, message_text,
    new_session, next_event, request_tool_result, send, send_refused, setup, setup_on, start,
    start_send, stored_result, text_of, try_new_session, wait_for_text, workdir,
};
use flyto_tests::{Backend, DEADLINE, TestEnv, bin, wait_until};
use serde_json::json;
use std::time::{Duration, Instant};

// The session suite's core, on both stores.
on_both_backends!(
    a_text_reply_streams_and_is_recorded_with_its_cost,
    a_tool_round_writes_reads_and_sends_results_after_their_calls,
    a_second_send_while_running_is_a_conflict,
    cancel_during_a_tool_kills_it_and_records_a_cancelled_result,
    attach_gives_recent_history_then_live_events_of_other_clients_runs,
    the_cli_drives_sessions,
    names_are_unique_and_a_deleted_session_is_gone,
    history_labels_tool_results_and_shows_when_each_message_came,
    after_a_reset_the_context_figure_is_the_new_window,
    parallel_tool_calls_get_their_results_in_call_order,
    an_agent_step_writes_a_file_that_the_next_run_step_checks,
    dangerous_bash_commands_are_blocked_and_the_model_is_told,
    cancel_during_a_slow_stream_is_prompt_and_keeps_no_partial_reply,
    a_json_client_that_half_closes_after_attach_still_gets_the_events,
    a_tool_child_submits_a_plan_through_flyto_plan_sock,
    a_429_with_retry_after_is_retried_with_a_notice,
    sigterm_drains_a_running_session_then_it_continues_after_restart,
    a_session_model_may_name_a_profile,
    a_reloaded_permission_rule_applies_to_the_next_tool_call,
    session_cancel_and_ctrl_c_in_chat_say_cancelled,
    a_run_cut_short_by_a_shutdown_makes_session_send_exit_6,
    idle_session_actors_stop_and_start_again_on_demand,
    an_ask_rule_prompts_the_terminal_and_runs_or_refuses_by_its_answer,
    approvals_travel_on_the_streams_the_first_answer_wins_and_unanswered_asks_are_refused,
    the_printed_approve_command_names_the_session_and_works,
);

fn tool_result<'a>(events: &'a [SessionEvent], call: &str) -> (&'a str, bool) {
    events
        .iter()
        .find_map(|e| match e {
            SessionEvent::ToolResult {
                id,
                preview,
                is_error,
                ..
            } if id == call => Some((preview.as_str(), *is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no ToolResult for {call}: {events:#?}"))
}

/// Pids of live processes started for session `session` of this env: their
/// environment holds FLYTO_SESSION_ID=<session> and a FLYTO_PLAN_SOCK in
/// this env's socket directory.
fn session_processes(env: &TestEnv, session: &str) -> Vec<i32> {
    let sock_dir = env.sock.parent().expect("socket dir").display().to_string();
    let want_id = format!("FLYTO_SESSION_ID={session}");
    let mut pids = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let vars: Vec<String> = environ
            .split(|b| *b == 0)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        let ours = vars.contains(&want_id)
            && vars.iter().any(|v| {
                v.strip_prefix("FLYTO_PLAN_SOCK=")
                    .is_some_and(|p| p.starts_with(&sock_dir))
            });
        if ours {
            pids.push(pid);
        }
    }
    pids
}

/// Kills what is left of a session's tool processes when a test ends, so
/// a failing test leaves no `sleep` behind.
struct ReapOnDrop<'a> {
    env: &'a TestEnv,
    id: String,
}

impl Drop for ReapOnDrop<'_> {
    fn drop(&mut self) {
        for pid in session_processes(self.env, &self.id) {
            // SAFETY: signalling a process this test caused to be started
            // (its environment names this env's socket directory).
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

fn assert_no_model_message(message: &str) {
    assert!(
        message.contains("no model configured") && message.contains("[models."),
        "the error should say what to set: {message}"
    );
}

#[test]
fn without_a_model_sessions_and_agent_steps_say_what_to_set() {
    let fake = FakeLlm::start(vec![]);
    let env = TestEnv::new(&format!("{BASE}{}", fake.config()));
    let daemon = start(&env);
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    // Take the model away and reload.
    env.write_config(BASE);
    daemon.signal(libc::SIGHUP);
    let message = wait_until(
        "the reload to drop the model",
        DEADLINE,
        || match try_new_session(&env, &dir) {
            Err(ClientError::Remote { code, message }) => {
                assert_eq!(code, ErrorCode::BadRequest, "{message}");
                Some(message)
            }
            Ok(_) => None,
            Err(e) => panic!("session_new: {e}"),
        },
    );
    assert_no_model_message(&message);

    let (code, message) = send_refused(&env, &id, "hello");
    assert_eq!(code, ErrorCode::BadRequest, "{message}");
    assert_no_model_message(&message);
    let (_, messages) = history(&env, &id);
    let out = env.ctl(&["session_new", "--workdir", &dir.display().to_string()]);
    assert_eq!(out.code, 4, "{}\n{}", out.stdout, out.stderr);
    assert_no_model_message(&out.stderr);
    let out = env.ctl(&["session_send", &id, "hello"]);
    assert_eq!(out.code, 4, "{}\n{}", out.stdout, out.stderr);
    assert_no_model_message(&out.stderr);
    assert!(messages.is_empty(), "nothing stored: {messages:#?}");

    let plan = env.submit(PlanSpec {
        name: None,
        env: Default::default(),
        steps: vec![StepSpec {
            id: "think".into(),
            prompt: Some("summarize the repo".into()),
            workdir: Some(dir.display().to_string()),
            ..Default::default()
        }],
        sandbox: None,
    });
    let view = env.wait_plan(&plan, "terminal", |p| p.state.is_terminal());
    assert_eq!(view.state, PlanState::Failed, "{view:#?}");
    let step = &view.steps[0];
    assert_eq!(step.state, StepState::Failed, "{view:#?}");
    assert_no_model_message(step.error.as_deref().unwrap_or(""));
    assert_eq!(fake.request_count(), 0);
}

fn a_text_reply_streams_and_is_recorded_with_its_cost(backend: Backend) {
    let answer = "Hello from the fake model — all good.";
    let (fake, env, _daemon) = setup_on(backend, vec![Reply::text(answer).usage(1200, 30)]);
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let events = send(&env, &id, "Say hello");
    assert!(done(&events), "{events:#?}");
    assert!(
        matches!(&events[1], SessionEvent::LlmStart { model } if model == "fake"),
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
    assert_eq!(text_of(&events), answer);
    let cost = 1200.0 * 1.0 / 1e6 + 30.0 * 2.0 / 1e6;
    let llm_end = events
        .iter()
        .find_map(|e| match e {
            SessionEvent::LlmEnd {
                input_tokens,
                output_tokens,
                cost_usd,
                ..
            } => Some((*input_tokens, *output_tokens, *cost_usd)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no LlmEnd: {events:#?}"));
    assert_eq!((llm_end.0, llm_end.1), (1200, 30), "{events:#?}");
    assert!((llm_end.2 - cost).abs() < 1e-9, "{events:#?}");

    let (session, messages) = history(&env, &id);
    assert_eq!(session.status, "idle", "{session:#?}");
    assert_eq!(messages.len(), 2, "{messages:#?}");
    assert_eq!(messages[0].role, "user");
    assert_eq!(message_text(&messages[0]), "Say hello");
    assert_eq!(messages[1].role, "assistant");
    assert_eq!(message_text(&messages[1]), answer);
    assert_eq!((session.input_tokens, session.output_tokens), (1200, 30));

    let stats = match env.client().call(&Request::Stats {}).expect("stats") {
        Response::Stats { stats } => stats,
        other => panic!("unexpected answer {other:?}"),
    };
    assert_eq!(stats.sessions, 1, "{stats:#?}");
    assert_eq!((stats.input_tokens, stats.output_tokens), (1200, 30));
    assert!((stats.cost_usd - cost).abs() < 1e-9, "{stats:#?}");

    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0];
    assert_eq!(body["model"], "fake-model");
    let msgs = body["messages"].as_array().expect("messages");
    assert_eq!(msgs[0]["role"], "system");
    let canonical = std::fs::canonicalize(&dir).expect("canonical workdir");
    assert!(
        msgs[0]["content"]
            .as_str()
            .is_some_and(|s| s.contains(&canonical.display().to_string())),
        "the system prompt names the workdir: {}",
        msgs[0]["content"]
    );
    assert_eq!(msgs.last().expect("last")["content"], "Say hello");
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    for tool in ["read", "write", "edit", "glob", "grep", "bash"] {
        assert!(tools.contains(&tool), "{tool} is offered: {tools:?}");
    }
    fake.assert_protocol_ok();
}

fn a_tool_round_writes_reads_and_sends_results_after_their_calls(backend: Backend) {
    let (fake, env, _daemon) = setup_on(
        backend,
        vec![
            Reply::tool_call(
                "call_w",
                "write",
                json!({"path": "out.txt", "content": "hello file\nsecond line\n"}),
            ),
            Reply::tool_call("call_r", "read", json!({"path": "out.txt"})),
            Reply::text("Wrote and read out.txt."),
        ],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let events = send(&env, &id, "write out.txt then read it");
    assert!(done(&events), "{events:#?}");
    let (preview, is_error) = tool_result(&events, "call_w");
    assert!(!is_error, "write failed: {preview}");
    let (preview, is_error) = tool_result(&events, "call_r");
    assert!(!is_error && preview.contains("hello file"), "{preview}");
    assert_eq!(text_of(&events), "Wrote and read out.txt.");
    assert_eq!(
        std::fs::read_to_string(dir.join("out.txt")).expect("out.txt in the workdir"),
        "hello file\nsecond line\n"
    );

    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    // The results follow their calls directly.
    for (n, call, name) in [(1, "call_w", "write"), (2, "call_r", "read")] {
        let msgs = requests[n]["messages"].as_array().expect("messages");
        let pos = msgs
            .iter()
            .position(|m| m["role"] == "tool" && m["tool_call_id"] == call)
            .unwrap_or_else(|| panic!("request {n} has no result for {call}"));
        assert_eq!(pos, msgs.len() - 1, "the result is the last message");
        assert_eq!(msgs[pos - 1]["role"], "assistant");
        assert_eq!(msgs[pos - 1]["tool_calls"][0]["id"], call);
        assert_eq!(msgs[pos - 1]["tool_calls"][0]["function"]["name"], name);
    }
    assert!(request_tool_result(&requests[2], "call_r").contains("second line"));
    fake.assert_protocol_ok();

    let (_, messages) = history(&env, &id);
    let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(
        roles,
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
    assert_every_call_answered(&messages);
}

fn dangerous_bash_commands_are_blocked_and_the_model_is_told(backend: Backend) {
    // Shared with policy_check::, which checks the CLI agrees on them.
    use flyto_tests::policy_cases::{FORCE_PUSH, HARMLESS_WRITE, RM_ROOT};
    let (fake, env, _daemon) = setup_on(
        backend,
        vec![
            Reply::tool_call("call_rm", "bash", json!({ "command": RM_ROOT })),
            Reply::tool_call("call_push", "bash", json!({ "command": FORCE_PUSH })),
            Reply::tool_call("call_ok", "bash", json!({ "command": HARMLESS_WRITE })),
            Reply::text("I will not do that."),
        ],
    );
    let dir = workdir(&env, "ws");
    std::fs::write(dir.join("keep.txt"), "keep me").expect("keep.txt");
    let id = new_session(&env, &dir);

    let events = send(&env, &id, "clean up everything");
    assert!(done(&events), "{events:#?}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    for (n, call) in [(1, "call_rm"), (2, "call_push")] {
        let (preview, is_error) = tool_result(&events, call);
        assert!(is_error, "{call} must be an error result: {preview}");
        let content = request_tool_result(&requests[n], call).to_lowercase();
        assert!(
            ["block", "denied", "refused", "not allowed"]
                .iter()
                .any(|w| content.contains(w)),
            "the model is told {call} was blocked: {content}"
        );
    }
    // Nothing of the blocked commands ran; the harmless one did.
    assert!(!dir.join("pushed-marker").exists(), "a blocked command ran");
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.txt")).expect("keep.txt"),
        "keep me"
    );
    let (preview, is_error) = tool_result(&events, "call_ok");
    assert!(!is_error, "a harmless command is allowed: {preview}");
    assert!(dir.join("ok-marker").exists());
    fake.assert_protocol_ok();
}

fn a_second_send_while_running_is_a_conflict(backend: Backend) {
    let (fake, env, _daemon) = setup_on(
        backend,
        vec![Reply::slow_text(
            (1..=40).map(|i| format!("{i} ")),
            Duration::from_millis(500),
        )],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let mut first = start_send(&env, &id, "count slowly");
    wait_for_text(&mut first, &id);
    let (code, message) = send_refused(&env, &id, "and another thing");
    assert_eq!(code, ErrorCode::Conflict, "{message}");
    assert!(
        message.contains("session_cancel"),
        "says how to go on: {message}"
    );

    cancel(&env, &id);
    let rest = drain(&mut first, &id);
    assert!(
        matches!(rest.last(), Some(SessionEvent::Cancelled { .. })),
        "{rest:#?}"
    );
    let (_, messages) = history(&env, &id);
    assert_eq!(
        messages.len(),
        2,
        "the refused message is not stored, the cancelled reply leaves its marker: {messages:#?}"
    );
    assert_eq!(message_text(&messages[0]), "count slowly");
    assert!(message_text(&messages[1]).starts_with("[cancelled]"));
    assert_eq!(fake.request_count(), 1);
}

fn cancel_during_a_slow_stream_is_prompt_and_keeps_no_partial_reply(backend: Backend) {
    let interval = Duration::from_secs(1);
    let chunks = 30;
    let (fake, env, _daemon) = setup_on(
        backend,
        vec![
            Reply::slow_text((1..=chunks).map(|i| format!("tick{i} ")), interval),
            Reply::text("fresh start"),
        ],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let mut stream = start_send(&env, &id, "count slowly");
    wait_for_text(&mut stream, &id);
    let first_chunk = Instant::now();

    let asked = Instant::now();
    cancel(&env, &id);
    let mut after = Vec::new();
    let latency = loop {
        match next_event(&mut stream, &id) {
            Some((_, SessionEvent::Cancelled { message, .. })) => {
                let latency = asked.elapsed();
                assert!(message.contains("send a message"), "{message}");
                break latency;
            }
            Some((_, e)) => {
                assert!(!e.ends_run(), "the run ended otherwise: {e:?}");
                after.push(e);
            }
            None => panic!("the stream ended without Cancelled: {after:#?}"),
        }
    };
    let stream_end = first_chunk + interval * (chunks - 1);
    let remaining = stream_end.saturating_duration_since(asked);
    println!("cancel latency (request to Cancelled event): {latency:?}");
    assert!(
        latency < remaining / 2,
        "Cancelled took {latency:?}; the stream had {remaining:?} left"
    );
    assert!(
        next_event(&mut stream, &id).is_none(),
        "End follows Cancelled"
    );
    let hung_up = fake.wait_hangup(0, Duration::from_secs(10));
    println!(
        "fake server saw the connection closed {:?} after the cancel request",
        hung_up.saturating_duration_since(asked)
    );

    let (session, messages) = history(&env, &id);
    assert_eq!(session.status, "idle", "{session:#?}");
    assert!(
        !messages.iter().any(|m| message_text(m).contains("tick")),
        "no half-written assistant message is stored: {messages:#?}"
    );
    // What is left is a marker the user sees in the history...
    let last = messages.last().expect("messages");
    assert_eq!(last.role, "assistant");
    assert!(
        message_text(last).starts_with("[cancelled]") && message_text(last).contains("by the user"),
        "{messages:#?}"
    );
    let out = env.ctl(&["session_history", &id]);
    assert!(out.stdout.contains("[cancelled]"), "{}", out.stdout);

    let events = send(&env, &id, "start over");
    assert!(done(&events), "{events:#?}");
    assert_eq!(text_of(&events), "fresh start");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        !requests[1].to_string().contains("tick1"),
        "the partial reply is not sent back: {:#}",
        requests[1]
    );
    // ...and the model reads on its next run.
    assert!(
        requests[1]
            .to_string()
            .contains("cancelled by the user before it was finished"),
        "the model is told the reply was cancelled: {:#}",
        requests[1]
    );
    fake.assert_protocol_ok();
}

/// Waits for the session's `bash` child to be visible in /proc.
fn wait_for_tool_process(env: &TestEnv, id: &str) -> Vec<i32> {
    wait_until("the tool process to start", DEADLINE, || {
        let pids = session_processes(env, id);
        (!pids.is_empty()).then_some(pids)
    })
}

fn cancel_during_a_tool_kills_it_and_records_a_cancelled_result(backend: Backend) {
    let (fake, env, _daemon) = setup_on(
        backend,
        vec![
            Reply::tool_call("call_sleep", "bash", json!({"command": "sleep 30"})),
            Reply::text("continuing"),
        ],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);
    let _reap = ReapOnDrop {
        env: &env,
        id: id.clone(),
    };

    let mut stream = start_send(&env, &id, "wait a while");
    loop {
        match next_event(&mut stream, &id) {
            Some((_, SessionEvent::ToolCall { id: call, .. })) if call == "call_sleep" => break,
            Some((_, e)) => assert!(!e.ends_run(), "the run ended early: {e:?}"),
            None => panic!("the stream ended before the tool call"),
        }
    }
    let pids = wait_for_tool_process(&env, &id);
    let asked = Instant::now();
    cancel(&env, &id);
    let rest = drain(&mut stream, &id);
    let latency = asked.elapsed();
    println!("cancel latency during a tool: {latency:?} (pids {pids:?})");
    assert!(
        matches!(rest.last(), Some(SessionEvent::Cancelled { .. })),
        "{rest:#?}"
    );
    assert!(latency < Duration::from_secs(10), "{latency:?}");
    wait_until(
        "the tool's processes to be gone",
        Duration::from_secs(10),
        || session_processes(&env, &id).is_empty().then_some(()),
    );

    let (session, messages) = history(&env, &id);
    assert_eq!(session.status, "idle", "{session:#?}");
    assert_every_call_answered(&messages);
    let (content, is_error) =
        stored_result(&messages, "call_sleep").expect("a result for the cancelled call");
    assert!(
        is_error && content.to_lowercase().contains("cancelled"),
        "{content}"
    );
    assert_eq!(fake.request_count(), 1);

    let events = send(&env, &id, "go on");
    assert!(done(&events), "{events:#?}");
    assert_eq!(text_of(&events), "continuing");
    let requests = fake.requests();
    assert!(
        request_tool_result(&requests[1], "call_sleep")
            .to_lowercase()
            .contains("cancelled")
    );
    fake.assert_protocol_ok();
}

#[test]
fn sigkill_mid_tool_then_restart_leaves_a_consistent_session() {
    let (fake, env, daemon) = setup(vec![
        Reply::tool_call("call_sleep", "bash", json!({"command": "sleep 30"})),
        Reply::text("recovered"),
    ]);
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);
    // The `sleep` outlives the killed flytod; it is ours to clean up.
    let _reap = ReapOnDrop {
        env: &env,
        id: id.clone(),
    };

    let mut stream = start_send(&env, &id, "wait a while");
    loop {
        match next_event(&mut stream, &id) {
            Some((_, SessionEvent::ToolCall { .. })) => break,
            Some((_, e)) => assert!(!e.ends_run(), "the run ended early: {e:?}"),
            None => panic!("the stream ended before the tool call"),
        }
    }
    let pids = wait_for_tool_process(&env, &id);
    // session_new answers once everything written so far is durable, so
    // the stored tool call survives the kill.
    new_session(&env, &dir);
    daemon.kill9();
    // The tool's process dies with flytod (it gets SIGKILL when its parent
    // dies) rather than running on unowned.
    wait_until(
        &format!("the tool process {pids:?} to die with flytod"),
        Duration::from_secs(10),
        || session_processes(&env, &id).is_empty().then_some(()),
    );
    let _daemon = start(&env);

    let (session, messages) = history(&env, &id);
    assert_eq!(session.status, "error", "{session:#?}");
    assert!(
        session
            .error
            .as_deref()
            .unwrap_or("")
            .contains("interrupted"),
        "{session:#?}"
    );
    assert_every_call_answered(&messages);
    let (content, is_error) =
        stored_result(&messages, "call_sleep").expect("the interrupted call has a result");
    assert!(is_error && content.contains("interrupted"), "{content}");

    let events = send(&env, &id, "continue");
    assert!(done(&events), "{events:#?}");
    assert_eq!(text_of(&events), "recovered");
    let requests = fake.wait_requests(2, DEADLINE);
    assert!(request_tool_result(&requests[1], "call_sleep").contains("interrupted"));
    fake.assert_protocol_ok();
    let (session, _) = history(&env, &id);
    assert_eq!(session.status, "idle", "{session:#?}");
    assert_eq!(session.error, None, "{session:#?}");
}

fn attach_gives_recent_history_then_live_events_of_other_clients_runs(backend: Backend) {
    let (fake, env, _daemon) = setup_on(
        backend,
        vec![Reply::text("first answer"), Reply::text("second answer")],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);
    assert!(done(&send(&env, &id, "one")));

    let mut watcher = env.client();
    watcher.set_read_timeout(Some(DEADLINE)).expect("timeout");
    watcher
        .send(&Request::SessionAttach {
            id: id.clone(),
            recent: Some(10),
            can_approve: false,
        })
        .expect("attach");
    match watcher.recv().expect("snapshot") {
        Response::History {
            session, messages, ..
        } => {
            assert_eq!(session.id, id);
            let texts: Vec<String> = messages.iter().map(message_text).collect();
            assert_eq!(texts, ["one", "first answer"], "{messages:#?}");
        }
        other => panic!("attach starts with History, got {other:?}"),
    }

    let sent = send(&env, &id, "two");
    assert!(done(&sent), "{sent:#?}");
    let mut seen = Vec::new();
    let mut last_seq = 0;
    loop {
        let (seq, event) = next_event(&mut watcher, &id).expect("attach stays open");
        assert!(seq > last_seq, "seq {seq} after {last_seq}");
        last_seq = seq;
        let end = event.ends_run();
        seen.push(event);
        if end {
            break;
        }
    }
    assert_run_shape(&seen);
    assert_eq!(seen, sent, "the attached client sees the same run");
    assert_eq!(text_of(&seen), "second answer");
    fake.assert_protocol_ok();
}

/// A script that pipes one JSON request into the socket and shuts down its
/// sending side still gets the live events of the session it attached to.
fn a_json_client_that_half_closes_after_attach_still_gets_the_events(backend: Backend) {
    use std::io::{BufRead, BufReader, Write};
    use std::net::Shutdown;
    let (fake, env, _daemon) = setup_on(backend, vec![Reply::text("the answer")]);
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let s = std::os::unix::net::UnixStream::connect(&env.sock).expect("connect");
    s.set_read_timeout(Some(DEADLINE)).expect("timeout");
    let mut w = s.try_clone().expect("clone");
    w.write_all(format!("{{\"session_attach\":{{\"id\":\"{id}\",\"recent\":5}}}}\n").as_bytes())
        .expect("write");
    w.shutdown(Shutdown::Write).expect("half-close");
    let mut r = BufReader::new(s);
    let mut next = || -> Response {
        let mut line = String::new();
        r.read_line(&mut line).expect("read");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    };
    assert!(
        matches!(next(), Response::History { .. }),
        "attach starts with History"
    );

    let sent = send(&env, &id, "a question");
    assert!(done(&sent), "{sent:#?}");
    let mut seen = Vec::new();
    loop {
        match next() {
            Response::Event {
                event: Event::Session { event, .. },
                ..
            } => {
                let end = event.ends_run();
                seen.push(event);
                if end {
                    break;
                }
            }
            other => panic!("the attach ended before the run's events: {other:?}"),
        }
    }
    assert_eq!(seen, sent, "the half-closed client sees the whole run");
    fake.assert_protocol_ok();
}

fn an_agent_step_writes_a_file_that_the_next_run_step_checks(backend: Backend) {
    let (fake, env, _daemon) = setup_on(
        backend,
        vec![
            Reply::tool_call(
                "call_w",
                "write",
                json!({"path": "made.txt", "content": "made by the agent\n"}),
            ),
            Reply::text("I wrote made.txt for you."),
        ],
    );
    let dir = workdir(&env, "plan-ws");
    let wd = Some(dir.display().to_string());
    let plan = env.submit(PlanSpec {
        name: Some("agent then check".into()),
        env: Default::default(),
        steps: vec![
            StepSpec {
                id: "agent".into(),
                prompt: Some("create made.txt".into()),
                workdir: wd.clone(),
                ..Default::default()
            },
            StepSpec {
                id: "check".into(),
                run: Some("test -f made.txt && cat made.txt".into()),
                deps: vec!["agent".into()],
                workdir: wd,
                ..Default::default()
            },
        ],
        sandbox: None,
    });
    let view = env.wait_plan(&plan, "terminal", |p| p.state.is_terminal());
    assert_eq!(view.state, PlanState::Succeeded, "{view:#?}");
    assert!(
        view.steps[0]
            .stdout_tail
            .contains("I wrote made.txt for you."),
        "{view:#?}"
    );
    assert_eq!(
        view.steps[1].stdout_tail, "made by the agent\n",
        "{view:#?}"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let first = requests[0]["messages"].as_array().expect("messages");
    assert_eq!(first.last().expect("prompt")["content"], "create made.txt");
    fake.assert_protocol_ok();
}

fn a_tool_child_submits_a_plan_through_flyto_plan_sock(backend: Backend) {
    let command = format!(
        "{} submit_plan --run 'echo nested' --wait",
        bin("flytoctl").display()
    );
    let (fake, env, _daemon) = setup_on(
        backend,
        vec![
            Reply::tool_call("call_nest", "bash", json!({ "command": command })),
            Reply::text("the nested plan ran"),
        ],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let events = send(&env, &id, "run a nested plan");
    assert!(done(&events), "{events:#?}");
    let (preview, is_error) = tool_result(&events, "call_nest");
    assert!(!is_error, "{preview}");
    let requests = fake.requests();
    let content = request_tool_result(&requests[1], "call_nest");
    assert!(content.contains("nested"), "{content}");

    let plans = env.plans();
    assert_eq!(plans.len(), 1, "{plans:#?}");
    let view = env.status(&plans[0].id);
    assert_eq!(view.state, PlanState::Succeeded, "{view:#?}");
    assert_eq!(view.steps[0].stdout_tail, "nested\n");
    fake.assert_protocol_ok();
}

fn a_429_with_retry_after_is_retried_with_a_notice(backend: Backend) {
    let (fake, env, _daemon) = setup_on(
        backend,
        vec![
            Reply::status(429, Some(1)),
            Reply::text("after the rate limit"),
        ],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let events = send(&env, &id, "hello");
    assert!(done(&events), "{events:#?}");
    let notice = events
        .iter()
        .find_map(|e| match e {
            SessionEvent::Notice { message } => Some(message.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Notice about the retry: {events:#?}"));
    assert!(
        notice.contains("rate limited") && notice.contains("retry"),
        "{notice}"
    );
    assert_eq!(text_of(&events), "after the rate limit");
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    let waited = seen[1].at.duration_since(seen[0].at);
    assert!(
        waited >= Duration::from_millis(900),
        "retry-after: 1 was honoured: {waited:?}"
    );
    fake.assert_protocol_ok();
}

fn the_cli_drives_sessions(backend: Backend) {
    let (fake, env, _daemon) = setup_on(
        backend,
        vec![
            Reply::tool_call(
                "call_w",
                "write",
                json!({"path": "cli.txt", "content": "from the cli\n"}),
            ),
            Reply::text("All done via the CLI."),
            Reply::slow_text(
                (1..=40).map(|i| format!("{i} ")),
                Duration::from_millis(500),
            ),
            Reply::text("Chatting works."),
        ],
    );
    let dir = workdir(&env, "ws");
    let wd = dir.display().to_string();

    let out = env.ctl(&["session_new", "--workdir", &wd, "--name", "helper"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = out.stdout.trim().to_string();
    assert!(
        id.starts_with('s'),
        "session_new prints the id: {:?}",
        out.stdout
    );

    let out = env.ctl(&["session_send", &id, "make cli.txt"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("All done via the CLI."),
        "the reply goes to stdout: {:?}",
        out.stdout
    );
    assert!(
        out.stderr.contains("write"),
        "tool calls are shown: {}",
        out.stderr
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("cli.txt")).expect("cli.txt"),
        "from the cli\n"
    );

    let out = env.ctl(&["session_history", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("make cli.txt") && out.stdout.contains("All done via the CLI."),
        "{}",
        out.stdout
    );
    let out = env.ctl(&["session_list"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains(&id) && out.stdout.contains("helper"),
        "{}",
        out.stdout
    );

    // A second send while a run is active is refused (exit 4); the
    // session is found by name; session_cancel ends the run.
    let mut running = start_send(&env, &id, "count slowly");
    wait_for_text(&mut running, &id);
    let out = env.ctl(&["session_send", "helper", "more"]);
    assert_eq!(out.code, 4, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("session_cancel"), "{}", out.stderr);
    let out = env.ctl(&["session_cancel", "helper"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let rest = drain(&mut running, &id);
    assert!(
        matches!(rest.last(), Some(SessionEvent::Cancelled { .. })),
        "{rest:#?}"
    );

    let out = env.ctl_with(&["chat", "--workdir", &wd], &[], Some("hello there\n"));
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("Chatting works."), "{}", out.stdout);
    let requests = fake.requests();
    assert_eq!(requests.len(), 4, "{requests:#?}");
    let last = requests[3]["messages"].as_array().expect("messages");
    assert_eq!(last.last().expect("message")["content"], "hello there");
    fake.assert_protocol_ok();
}

/// The text of the last attempt: deltas after the last `Restart`.
fn final_text(events: &[SessionEvent]) -> String {
    let start = events
        .iter()
        .rposition(|e| matches!(e, SessionEvent::Restart { .. }))
        .map_or(0, |i| i + 1);
    text_of(&events[start..])
}

#[test]
fn cut_and_idle_streams_are_retried_without_splicing_replies() {
    let fake = FakeLlm::start(vec![
        Reply::text("a partial answer that").cut(),
        Reply::hang(),
        Reply::text("the whole answer"),
    ]);
    // A short idle guard and quick retries keep this test fast.
    let models = fake.config().replace(
        "output_price = 2.0\n",
        "output_price = 2.0\nstream_idle_timeout = \"500ms\"\n",
    );
    let config = format!(
        "{BASE}{models}\n[models.fake.retry]\ninitial_backoff = \"50ms\"\nmax_backoff = \"100ms\"\n"
    );
    let env = TestEnv::new(&config);
    let _daemon = start(&env);
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let events = send(&env, &id, "answer fully");
    assert!(done(&events), "{events:#?}");
    let notices = events
        .iter()
        .filter(|e| matches!(e, SessionEvent::Notice { .. }))
        .count();
    assert_eq!(
        notices, 2,
        "one retry notice per failed attempt: {events:#?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, SessionEvent::Restart { .. })),
        "the partial text is declared void: {events:#?}"
    );
    assert_eq!(final_text(&events), "the whole answer");
    fake.wait_hangup(1, DEADLINE);
    assert_eq!(fake.request_count(), 3);

    let (_, messages) = history(&env, &id);
    assert_eq!(messages.len(), 2, "{messages:#?}");
    assert_eq!(message_text(&messages[1]), "the whole answer");
    fake.assert_protocol_ok();
}

fn parallel_tool_calls_get_their_results_in_call_order(backend: Backend) {
    let (fake, env, _daemon) = setup_on(
        backend,
        vec![
            Reply::tool_calls(vec![
                (
                    "call_a",
                    "write",
                    json!({"path": "a.txt", "content": "A"}).to_string(),
                ),
                (
                    "call_b",
                    "write",
                    json!({"path": "b.txt", "content": "B"}).to_string(),
                ),
                ("call_g", "glob", json!({"pattern": "*.txt"}).to_string()),
                ("call_r", "read", json!({"path": "a.txt"}).to_string()),
            ]),
            Reply::text("Both files exist."),
        ],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let events = send(&env, &id, "write two files and look");
    assert!(done(&events), "{events:#?}");
    for call in ["call_a", "call_b", "call_g", "call_r"] {
        let (preview, is_error) = tool_result(&events, call);
        assert!(!is_error, "{call}: {preview}");
    }
    let requests = fake.requests();
    let msgs = requests[1]["messages"].as_array().expect("messages");
    let calls: Vec<&str> = msgs[msgs.len() - 5]["tool_calls"]
        .as_array()
        .expect("the calls")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(calls, ["call_a", "call_b", "call_g", "call_r"]);
    let results: Vec<&str> = msgs[msgs.len() - 4..]
        .iter()
        .filter_map(|m| m["tool_call_id"].as_str())
        .collect();
    assert_eq!(results, ["call_a", "call_b", "call_g", "call_r"]);
    let glob = request_tool_result(&requests[1], "call_g");
    assert!(glob.contains("a.txt") && glob.contains("b.txt"), "{glob}");
    assert!(request_tool_result(&requests[1], "call_r").contains('A'));
    fake.assert_protocol_ok();
}

/// SIGTERM while a run streams: the run gets `shutdown_grace` (1 s here),
/// then is cancelled and stored consistently; flytod exits 0, a new send
/// during the drain is refused, and after a restart the session works.
fn sigterm_drains_a_running_session_then_it_continues_after_restart(backend: Backend) {
    let (fake, env, mut daemon) = setup_on(
        backend,
        vec![
            Reply::slow_text(
                (1..=30).map(|i| format!("tick{i} ")),
                Duration::from_secs(1),
            ),
            Reply::text("back again"),
        ],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);
    let mut stream = start_send(&env, &id, "count slowly");
    wait_for_text(&mut stream, &id);

    daemon.signal(libc::SIGTERM);
    daemon
        .wait_notify("STOPPING=1", DEADLINE)
        .expect("STOPPING=1");
    let (code, message) = send_refused(&env, &id, "another");
    assert_eq!(code, ErrorCode::Unavailable, "{message}");
    let refused = try_new_session(&env, &dir).expect_err("session_new while draining");
    assert!(
        matches!(&refused, ClientError::Remote { code: ErrorCode::Unavailable, message } if message.contains("shutting down")),
        "{refused:?}"
    );
    let events = drain(&mut stream, &id);
    assert!(
        matches!(events.last(), Some(SessionEvent::Cancelled { message, shutdown: true })
            if message.starts_with("interrupted: flytod is shutting down")),
        "the run ends cancelled by the shutdown once the grace is over: {events:#?}"
    );
    let status = daemon.wait_exit(DEADLINE);
    assert!(status.success(), "flytod exited with {status}");
    fake.wait_hangup(0, DEADLINE);

    let _daemon = start(&env);
    let (session, messages) = history(&env, &id);
    assert_eq!(session.status, "idle", "{session:#?}");
    assert!(
        !messages.iter().any(|m| message_text(m).contains("tick")),
        "no half-written reply is stored: {messages:#?}"
    );
    assert!(
        messages
            .last()
            .is_some_and(|m| message_text(m).contains("flytod shut down")),
        "the interrupted reply leaves its marker: {messages:#?}"
    );
    let events = send(&env, &id, "again");
    assert_eq!(text_of(&events), "back again");
    fake.assert_protocol_ok();
}

/// A session's model may name a profile as well as a role; an unknown name
/// is refused with the names that work.
fn a_session_model_may_name_a_profile(backend: Backend) {
    let (fake, env, _daemon) = setup_on(backend, vec![Reply::text("by profile")]);
    let dir = workdir(&env, "ws");
    let out = env.ctl(&[
        "session_new",
        "--workdir",
        &dir.display().to_string(),
        "--model",
        "fake",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = out.stdout.trim().to_string();
    let events = send(&env, &id, "hi");
    assert_eq!(text_of(&events), "by profile");
    let out = env.ctl(&[
        "session_new",
        "--workdir",
        &dir.display().to_string(),
        "--model",
        "nosuch",
    ]);
    assert_eq!(out.code, 4, "{}", out.stderr);
    assert!(out.stderr.contains("`nosuch`"), "{}", out.stderr);
    assert!(out.stderr.contains("[models.<name>]"), "{}", out.stderr);
    fake.assert_protocol_ok();
}

/// A tool's background processes outlive a SIGKILLed flytod (only the
/// tool's shell dies with it); the restarted daemon finds and kills them
/// when it repairs the interrupted session.
#[test]
fn leftovers_of_a_tool_are_killed_when_the_session_is_repaired() {
    let (_fake, env, daemon) = setup(vec![Reply::tool_call(
        "call_bg",
        "bash",
        json!({"command": "sleep 300 & sleep 300"}),
    )]);
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);
    let _reap = ReapOnDrop {
        env: &env,
        id: id.clone(),
    };
    let mut stream = start_send(&env, &id, "start something");
    loop {
        match next_event(&mut stream, &id) {
            Some((_, SessionEvent::ToolCall { .. })) => break,
            Some((_, e)) => assert!(!e.ends_run(), "the run ended early: {e:?}"),
            None => panic!("the stream ended before the tool call"),
        }
    }
    wait_until("both sleeps to run", DEADLINE, || {
        (session_processes(&env, &id).len() >= 3).then_some(())
    });
    new_session(&env, &dir);
    daemon.kill9();
    // The shell dies with flytod, and so does its background `sleep`
    // (flytod's guard kills the tool's whole session).
    wait_until("the tool's processes to die with flytod", DEADLINE, || {
        session_processes(&env, &id).is_empty().then_some(())
    });
    let _daemon = start(&env);
    let (session, _) = history(&env, &id);
    assert_eq!(session.status, "error", "{session:#?}");
}

/// `[permissions]` is re-read on SIGHUP: a rule added to the config takes
/// effect for the next tool call without a restart.
fn a_reloaded_permission_rule_applies_to_the_next_tool_call(backend: Backend) {
    let (fake, env, daemon) = setup_on(
        backend,
        vec![
            Reply::tool_call("call_1", "bash", json!({"command": "echo before"})),
            Reply::text("ok"),
            Reply::tool_call("call_2", "bash", json!({"command": "echo after"})),
            Reply::text("ok"),
        ],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);
    let events = send(&env, &id, "say before");
    let (out, is_error) = tool_result(&events, "call_1");
    assert!(!is_error && out.contains("before"), "{out}");

    let config = std::fs::read_to_string(&env.config).expect("config");
    env.write_config(&format!("{config}\n[permissions]\ndeny = [\"echo *\"]\n"));
    daemon.signal(libc::SIGHUP);
    wait_until("the config to be reloaded", DEADLINE, || {
        daemon.log().contains("config reloaded").then_some(())
    });
    let events = send(&env, &id, "say after");
    let (out, is_error) = tool_result(&events, "call_2");
    assert!(is_error, "the reloaded deny rule applies: {out}");
    assert!(out.contains("echo"), "{out}");
    fake.assert_protocol_ok();
}

/// An idle session's actor stops after `sessions.idle_stop`; its state
/// stays in the store and the next message starts it again.
fn idle_session_actors_stop_and_start_again_on_demand(backend: Backend) {
    let (fake, env, _daemon) = flyto_tests::sessions_support::setup_with_on(
        backend,
        "[sessions]\nidle_stop = \"1s\"\n",
        vec![Reply::text("one"), Reply::text("two")],
    );
    let live = |env: &TestEnv| match env.client().call(&Request::Stats {}).expect("stats") {
        Response::Stats { stats } => stats.sessions_live,
        other => panic!("unexpected {other:?}"),
    };
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);
    assert_eq!(text_of(&send(&env, &id, "first")), "one");
    assert_eq!(live(&env), 1);
    wait_until("the idle session actor to stop", DEADLINE, || {
        (live(&env) == 0).then_some(())
    });
    let (session, messages) = history(&env, &id);
    assert_eq!(session.status, "idle");
    assert_eq!(messages.len(), 2);
    assert_eq!(text_of(&send(&env, &id, "second")), "two");
    assert_eq!(live(&env), 1);
    fake.assert_protocol_ok();
}

/// `[permissions]` asking before any `touch`.
const ASK_TOUCH: &str = "[permissions]\nask = [\"touch\"]\n";

/// A protocol client attached to session `id` that can answer approvals,
/// past the history snapshot.
fn attach_approver(env: &TestEnv, id: &str) -> flyto_tests::flyto_protocol::Client {
    let mut attached = env.client();
    attached.set_read_timeout(Some(DEADLINE)).expect("timeout");
    attached
        .send(&Request::SessionAttach {
            id: id.to_string(),
            recent: Some(0),
            can_approve: true,
        })
        .expect("attach");
    assert!(matches!(
        attached.recv().expect("snapshot"),
        Response::History { .. }
    ));
    attached
}

/// Reads a child's stderr in the background, so a test can wait for a line
/// before it goes on.
fn watch_stderr(child: &mut std::process::Child) -> std::sync::Arc<std::sync::Mutex<String>> {
    use std::io::Read;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut stderr = child.stderr.take().expect("stderr");
    let sink = seen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .expect("stderr")
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    seen
}

fn session_cancel_and_ctrl_c_in_chat_say_cancelled(backend: Backend) {
    let slow = || {
        Reply::slow_text(
            (1..=40).map(|i| format!("{i} ")),
            Duration::from_millis(500),
        )
    };
    let (fake, env, _daemon) = setup_on(backend, vec![slow(), slow()]);
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let mut stream = start_send(&env, &id, "count slowly");
    wait_for_text(&mut stream, &id);
    let out = env.ctl(&["session_cancel", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), format!("cancelled {id}"), "{out:?}");
    let rest = drain(&mut stream, &id);
    assert!(
        matches!(rest.last(), Some(SessionEvent::Cancelled { .. })),
        "{rest:#?}"
    );
    let out = env.ctl(&["session_cancel", &id]);
    assert_eq!(
        out.stdout.trim(),
        format!("{id} was not running"),
        "{out:?}"
    );

    // Ctrl-C in chat cancels the reply and says so in the same words.
    let mut chat = flyto_tests::sessions_support::spawn_ctl(&env, &["chat", "--session", &id]);
    let stderr = watch_stderr(&mut chat);
    flyto_tests::sessions_support::write_stdin(&mut chat, "count again\n");
    // The reply is streaming: the model has the second request.
    wait_until("the chat's message to reach the model", DEADLINE, || {
        (fake.request_count() == 2).then_some(())
    });
    // SAFETY: signalling the flytoctl this test started.
    unsafe {
        libc::kill(chat.id() as i32, libc::SIGINT);
    }
    let said = format!("cancelled {id}");
    wait_until("chat to report the cancel", DEADLINE, || {
        stderr.lock().expect("stderr").contains(&said).then_some(())
    });
    let (code, _, _) = flyto_tests::sessions_support::finish_ctl(chat);
    let stderr = stderr.lock().expect("stderr").clone();
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("was not running"), "{stderr}");
    assert_eq!(fake.request_count(), 2);
}

fn an_ask_rule_prompts_the_terminal_and_runs_or_refuses_by_its_answer(backend: Backend) {
    let (fake, env, _daemon) = flyto_tests::sessions_support::setup_with_on(
        backend,
        ASK_TOUCH,
        vec![
            Reply::tool_call("call_y", "bash", json!({"command": "touch yes.txt"})),
            Reply::text("made it"),
            Reply::tool_call("call_n", "bash", json!({"command": "touch no.txt"})),
            Reply::text("left it"),
        ],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    // session_send: `y` on stdin (a pipe, hence --prompt-approvals).
    let out = env.ctl_with(
        &["session_send", &id, "make yes.txt", "--prompt-approvals"],
        &[],
        Some("y\n"),
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("approval needed: `touch yes.txt`")
            && out.stderr.contains("ask rule \"touch\"")
            && out.stderr.contains("[y/N]"),
        "the prompt shows the command and the rule: {}",
        out.stderr
    );
    assert!(dir.join("yes.txt").exists(), "the approved command ran");
    let requests = fake.requests();
    let result = request_tool_result(&requests[1], "call_y");
    assert!(result.contains("exit code 0"), "{result}");

    // chat: the message and then `n`, on the same stdin.
    let out = env.ctl_with(
        &["chat", "--session", &id, "--prompt-approvals"],
        &[],
        Some("make no.txt\nn\n"),
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("approval needed: `touch no.txt`"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.contains("left it"), "{}", out.stdout);
    assert!(
        !dir.join("no.txt").exists(),
        "the denied command did not run"
    );
    let result = request_tool_result(&fake.requests()[3], "call_n");
    assert!(
        result.contains("the user declined") && result.contains("Nothing was executed"),
        "the model is told: {result}"
    );
    fake.assert_protocol_ok();
}

fn approvals_travel_on_the_streams_the_first_answer_wins_and_unanswered_asks_are_refused(
    backend: Backend,
) {
    let (fake, env, _daemon) = flyto_tests::sessions_support::setup_with_on(
        backend,
        &format!("{ASK_TOUCH}\n[sessions]\napproval_timeout = \"1s\"\n"),
        vec![
            Reply::tool_call("call_alone", "bash", json!({"command": "touch alone.txt"})),
            Reply::text("nobody there"),
            Reply::tool_call("call_ok", "bash", json!({"command": "touch ok.txt"})),
            Reply::text("approved"),
            Reply::tool_call("call_late", "bash", json!({"command": "touch late.txt"})),
            Reply::text("no answer"),
        ],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    // Nobody attached who could answer: refused at once, the model told.
    let events = send(&env, &id, "make alone.txt");
    assert!(done(&events), "{events:#?}");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, SessionEvent::ApprovalRequested { .. })),
        "{events:#?}"
    );
    let (result, is_error) = tool_result(&events, "call_alone");
    assert!(
        is_error && result.contains("no one is attached"),
        "{result}"
    );
    assert!(!dir.join("alone.txt").exists());

    // An attached client that can answer gets the request; its answer is
    // taken, a second one is late.
    let mut attached = attach_approver(&env, &id);
    let wait_request = |client: &mut flyto_tests::flyto_protocol::Client| loop {
        match next_event(client, &id) {
            Some((
                _,
                SessionEvent::ApprovalRequested {
                    approval,
                    command,
                    rule,
                    ..
                },
            )) => break (approval, command, rule),
            // An attached client sees every run: earlier runs' events too.
            Some(_) => {}
            None => panic!("the stream ended"),
        }
    };
    let mut script = start_send(&env, &id, "make ok.txt");
    let (approval, command, rule) = wait_request(&mut attached);
    assert_eq!(command, "touch ok.txt");
    assert!(rule.contains("ask rule \"touch\""), "{rule}");
    let approve = |allow| {
        env.client().call(&Request::SessionApprove {
            id: id.clone(),
            approval,
            allow,
        })
    };
    assert_eq!(
        approve(true).expect("the first answer"),
        Response::ApprovalAnswered {
            approval,
            allow: true
        }
    );
    match approve(false) {
        Err(ClientError::Remote { code, message }) => {
            assert_eq!(code, ErrorCode::Conflict, "{message}");
        }
        other => panic!("a second answer is late: {other:?}"),
    }
    let events = drain(&mut script, &id);
    assert!(
        events.iter().any(|e| matches!(e,
            SessionEvent::ApprovalResolved { outcome, .. } if outcome == "allowed")),
        "{events:#?}"
    );
    assert!(done(&events), "{events:#?}");
    assert!(dir.join("ok.txt").exists(), "the approved command ran");

    // Nobody answers: the run waits for approval_timeout, then refuses.
    let mut script = start_send(&env, &id, "make late.txt");
    wait_request(&mut attached);
    let events = drain(&mut script, &id);
    assert!(done(&events), "{events:#?}");
    let (result, is_error) = tool_result(&events, "call_late");
    assert!(
        is_error && result.contains("no one answered within 1 s"),
        "{result}"
    );
    assert!(!dir.join("late.txt").exists());
    fake.assert_protocol_ok();
}

fn names_are_unique_and_a_deleted_session_is_gone(backend: Backend) {
    let (_fake, env, _daemon) = setup_on(
        backend,
        vec![Reply::slow_text(
            (1..=40).map(|i| format!("{i} ")),
            Duration::from_millis(500),
        )],
    );
    let dir = workdir(&env, "ws");
    let wd = dir.display().to_string();
    let out = env.ctl(&["session_new", "--workdir", &wd, "--name", "work"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = out.stdout.trim().to_string();
    let out = env.ctl(&["session_new", "--workdir", &wd, "--name", "work"]);
    assert_eq!(out.code, 4, "a name in use is a Conflict: {out:?}");
    assert!(
        out.stderr.contains("already exists") && out.stderr.contains(&id),
        "names the existing session: {}",
        out.stderr
    );

    let mut stream = start_send(&env, &id, "count slowly");
    wait_for_text(&mut stream, &id);
    let out = env.ctl(&["session_delete", "work"]);
    assert_eq!(out.code, 4, "a running session is not deleted: {out:?}");
    assert!(
        out.stderr.contains("cannot be deleted: cancel it first"),
        "{}",
        out.stderr
    );
    cancel(&env, &id);
    drain(&mut stream, &id);
    let plan_sock = env
        .sock
        .parent()
        .expect("socket dir")
        .join(format!("plan-{id}.sock"));
    assert!(
        plan_sock.exists(),
        "the run opened the session's plan socket"
    );

    let out = env.ctl(&["session_delete", "work"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), format!("deleted {id}"));
    wait_until("the session's plan socket to close", DEADLINE, || {
        (!plan_sock.exists()).then_some(())
    });
    let out = env.ctl(&["session_list"]);
    assert!(!out.stdout.contains(&id), "{}", out.stdout);
    let out = env.ctl(&["session_history", &id]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("no session"), "{}", out.stderr);
    // The name is free again.
    let out = env.ctl(&["session_new", "--workdir", &wd, "--name", "work"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_ne!(out.stdout.trim(), id);
}

fn a_run_cut_short_by_a_shutdown_makes_session_send_exit_6(backend: Backend) {
    let (_fake, env, mut daemon) = setup_on(
        backend,
        vec![Reply::slow_text(
            (1..=30).map(|i| format!("tick{i} ")),
            Duration::from_secs(1),
        )],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);
    let child = flyto_tests::sessions_support::spawn_ctl(&env, &["session_send", &id, "count"]);
    flyto_tests::sessions_support::wait_running(&env, &id);
    daemon.signal(libc::SIGTERM);
    let (code, _, stderr) = flyto_tests::sessions_support::finish_ctl(child);
    assert_eq!(code, 6, "{stderr}");
    assert!(
        stderr.contains("interrupted: flytod is shutting down"),
        "{stderr}"
    );
    assert!(daemon.wait_exit(DEADLINE).success());
}

#[test]
fn an_agent_step_retried_after_a_crash_sends_its_prompt_once() {
    let (fake, env, daemon) = setup(vec![
        Reply::tool_call("call_sleep", "bash", json!({"command": "sleep 30"})),
        Reply::text("finished after the restart"),
    ]);
    let dir = workdir(&env, "ws");
    let prompt = "wait a while, then report";
    let plan = env.submit(PlanSpec {
        name: None,
        steps: vec![StepSpec {
            id: "agent".into(),
            prompt: Some(prompt.into()),
            workdir: Some(dir.display().to_string()),
            ..Default::default()
        }],
        env: Default::default(),
        sandbox: None,
    });
    let name = format!("plan {plan}");
    let id = wait_until("the step's session to run its tool", DEADLINE, || {
        let Ok(Response::Sessions { sessions }) = env.client().call(&Request::SessionList {})
        else {
            return None;
        };
        let s = sessions
            .into_iter()
            .find(|s| s.name.as_deref() == Some(name.as_str()))?;
        (!session_processes(&env, &s.id).is_empty()).then_some(s.id)
    });
    let _reap = ReapOnDrop {
        env: &env,
        id: id.clone(),
    };
    // session_new answers once what came before is durable.
    new_session(&env, &dir);
    daemon.kill9();
    let _daemon = start(&env);

    let view = env.wait_plan(&plan, "terminal", |p| p.state.is_terminal());
    assert_eq!(view.state, PlanState::Succeeded, "{view:#?}");
    assert_eq!(view.steps[0].attempts, 2, "{view:#?}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let sent = flyto_tests::sessions_support::request_messages(&requests[1]);
    let prompts = sent
        .iter()
        .filter(|m| m["role"] == "user" && m["content"] == prompt)
        .count();
    assert_eq!(
        prompts, 1,
        "the retried step's prompt is sent once: {sent:#?}"
    );
    let (_, messages) = history(&env, &id);
    let stored = messages
        .iter()
        .filter(|m| m.role == "user" && message_text(m) == prompt)
        .count();
    assert_eq!(stored, 1, "and stored once: {messages:#?}");
    assert_every_call_answered(&messages);
}

fn history_labels_tool_results_and_shows_when_each_message_came(backend: Backend) {
    let (_fake, env, _daemon) = setup_on(
        backend,
        vec![
            Reply::tool_call("call_r", "read", json!({"path": "a.txt"})),
            Reply::text("It says hi."),
        ],
    );
    let dir = workdir(&env, "ws");
    std::fs::write(dir.join("a.txt"), "hi\n").expect("a.txt");
    let id = new_session(&env, &dir);
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    assert!(done(&send(&env, &id, "read a.txt")));
    let (_, messages) = history(&env, &id);
    assert_eq!(messages.len(), 4, "{messages:#?}");
    for m in &messages {
        assert!(
            m.created_ms + 1000 >= before && m.created_ms <= before + 60_000,
            "message {} has its time: {}",
            m.idx,
            m.created_ms
        );
    }
    let out = env.ctl(&["session_history", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains(" tool results:\n"), "{}", out.stdout);
    assert!(
        out.stdout.contains(" user:\nread a.txt\n"),
        "{}",
        out.stdout
    );
    // `[2] 2026-01-31 12:00:00Z tool results:`: a date on every heading.
    let dated = out
        .stdout
        .lines()
        .filter(|l| l.starts_with('[') && l.contains("Z ") && l.contains(':'))
        .count();
    assert_eq!(dated, 4, "{}", out.stdout);
}

/// After a reset the context figure is what the model will see next (an
/// estimate of the new window), not the last reported usage of the old one.
fn after_a_reset_the_context_figure_is_the_new_window(backend: Backend) {
    let (fake, env, _daemon) = setup_on(
        backend,
        vec![
            Reply::text("a long answer").usage(60_000, 500),
            Reply::text("again").usage(61_000, 500),
        ],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);
    assert!(done(&send(&env, &id, "first")));
    let (session, _) = history(&env, &id);
    assert!(session.context.tokens >= 60_000, "{session:#?}");

    let out = env.ctl(&["session_reset", &id, "--hard"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let (session, _) = history(&env, &id);
    let tokens = session.context.tokens;
    assert!(
        tokens > 0 && tokens < 10_000,
        "the figure counts the new window: {session:#?}"
    );
    // `count` groups thousands with commas.
    let shown = |text: &str| text.replace(',', "").contains(&format!("{tokens} tokens"));
    assert!(shown(&out.stdout), "session_reset says it: {}", out.stdout);
    let out = env.ctl(&["session_history", &id]);
    assert!(shown(&out.stdout), "{}", out.stdout);
    assert!(!out.stdout.contains("60,"), "{}", out.stdout);

    // The figure is the size of what the model is sent next (the system
    // prompt and the tools, as the window is empty), at about 4 bytes a token.
    assert!(done(&send(&env, &id, "again")));
    let requests = fake.requests();
    let next = requests.last().expect("the request after the reset");
    let bytes = next["messages"].to_string().len() + next["tools"].to_string().len();
    let estimate = bytes as u64 / 4;
    assert!(
        tokens * 2 >= estimate && tokens <= estimate * 2,
        "{tokens} tokens shown, {bytes} bytes sent: {next}"
    );
}

/// A `session_send` that cannot answer itself says how to answer, with a
/// command that works as printed.
fn the_printed_approve_command_names_the_session_and_works(backend: Backend) {
    let (_fake, env, _daemon) = flyto_tests::sessions_support::setup_with_on(
        backend,
        ASK_TOUCH,
        vec![
            Reply::tool_call("call_ok", "bash", json!({"command": "touch ok.txt"})),
            Reply::text("approved"),
        ],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);
    // Someone who can answer is attached, so the ask waits.
    let _attached = attach_approver(&env, &id);
    let mut send = flyto_tests::sessions_support::spawn_ctl(&env, &["session_send", &id, "go"]);
    let stderr = watch_stderr(&mut send);
    let printed = wait_until("the approve command on stderr", DEADLINE, || {
        let text = stderr.lock().expect("stderr").clone();
        let start = text.find("`flytoctl session_approve ")? + "`flytoctl ".len();
        let len = text[start..].find('`')?;
        Some(text[start..start + len].to_string())
    });
    let args: Vec<&str> = printed.split_whitespace().collect();
    let out = env.ctl(&args);
    assert_eq!(out.code, 0, "`{printed}`: {out:?}");
    let (code, _, err) = flyto_tests::sessions_support::finish_ctl(send);
    assert_eq!(code, 0, "{err}");
    assert!(dir.join("ok.txt").exists(), "the approved command ran");
}
