//! Sessions on the shared store, across two real flytod: a session made
//! on one node is listed, read and continued on the other; while one
//! node runs it, the other's send is a `Conflict` naming that node; a
//! node killed mid-tool leaves its claim to run out, and the node that
//! takes the session over repairs the transcript first.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_llm::{FakeLlm, Reply};
use flyto_tests::flyto_protocol::{ErrorCode, Request, Response, SessionEvent};
use flyto_tests::pg::TestPostgres;
use flyto_tests::sessions_support::{
    assert_every_call_answered, done, drain, history, message_text, new_session, next_event,
    request_tool_result, send, send_refused, start, start_send, text_of, wait_for_text, workdir,
};
use flyto_tests::{DEADLINE, TestEnv, wait_until};
use serde_json::json;
use std::time::Duration;

fn node(pg: &TestPostgres, fake: &FakeLlm) -> TestEnv {
    TestEnv::new(&format!(
        "[daemon]\nshutdown_grace = \"1s\"\n[plans]\nkill_grace = \"200ms\"\n[store]\nbackend = \"postgres\"\nurl = \"{}\"\n\n{}",
        pg.url_for("sessions"),
        fake.config()
    ))
}

#[test]
fn a_session_moves_between_nodes_one_runs_it_at_a_time_and_a_dead_ones_run_is_repaired() {
    let pg = TestPostgres::start();
    pg.create_database("sessions");
    let fake = FakeLlm::start(vec![
        Reply::slow_text(
            (1..=30).map(|i| format!("{i} ")),
            Duration::from_millis(100),
        ),
        Reply::text("b-turn"),
        Reply::tool_call("call_sleep", "bash", json!({"command": "sleep 30"})),
        Reply::text("recovered"),
    ]);
    let (a, b) = (node(&pg, &fake), node(&pg, &fake));
    let da = start(&a);
    let _db = start(&b);
    let dir = workdir(&a, "ws");
    let id = new_session(&a, &dir);

    // Made on a, listed on b.
    let listed = match b.client().call(&Request::SessionList {}).unwrap() {
        Response::Sessions { sessions } => sessions,
        other => panic!("{other:?}"),
    };
    assert!(listed.iter().any(|s| s.id == id), "{listed:?}");

    // While a runs it, b's send is a conflict that names a's node.
    let mut first = start_send(&a, &id, "count");
    wait_for_text(&mut first, &id);
    let (code, message) = send_refused(&b, &id, "me too");
    assert_eq!(code, ErrorCode::Conflict, "{message}");
    assert!(message.contains("running on node"), "{message}");
    // Attached on b, a's run is seen as it is stored, to its end.
    let mut watcher = b.client();
    watcher.set_read_timeout(Some(DEADLINE)).unwrap();
    watcher
        .send(&Request::SessionAttach {
            id: id.clone(),
            recent: Some(10),
            can_approve: false,
        })
        .unwrap();
    match watcher.recv().unwrap() {
        Response::History { session, .. } => assert_eq!(session.status, "running"),
        other => panic!("attach starts with History, got {other:?}"),
    }
    let rest = drain(&mut first, &id);
    assert!(
        matches!(rest.last(), Some(SessionEvent::Done { .. })),
        "{rest:#?}"
    );
    // An attach stays open: read to the run's end.
    let mut seen = Vec::new();
    while !seen.last().is_some_and(SessionEvent::ends_run) {
        seen.push(next_event(&mut watcher, &id).expect("attach stays open").1);
    }
    assert!(
        matches!(seen.last(), Some(SessionEvent::Done { .. })),
        "{seen:#?}"
    );
    let whole: String = (1..=30).map(|i| format!("{i} ")).collect();
    assert_eq!(text_of(&seen), whole);

    // Then b continues it, and a sees b's turn.
    let events = send(&b, &id, "your turn");
    assert!(done(&events), "{events:#?}");
    assert_eq!(text_of(&events), "b-turn");
    let (session, messages) = history(&a, &id);
    assert_eq!(session.status, "idle", "{session:#?}");
    let texts: Vec<String> = messages.iter().map(message_text).collect();
    assert_eq!(texts[0], "count");
    assert_eq!(texts[2], "your turn");
    assert_eq!(texts[3], "b-turn");

    // a dies in the middle of a tool call.
    let mut stream = start_send(&a, &id, "wait a while");
    loop {
        match next_event(&mut stream, &id) {
            Some((_, SessionEvent::ToolCall { .. })) => break,
            Some((_, e)) => assert!(!e.ends_run(), "the run ended early: {e:?}"),
            None => panic!("the stream ended before the tool call"),
        }
    }
    let a_socks = format!("FLYTO_PLAN_SOCK={}/", a.sock.parent().unwrap().display());
    let session_var = format!("FLYTO_SESSION_ID={id}");
    wait_until("the tool's process", DEADLINE, || {
        (!flyto_tests::processes_with(&[&session_var, &a_socks]).is_empty()).then_some(())
    });
    da.kill9();
    wait_until("the tool's process to die with a", DEADLINE, || {
        flyto_tests::processes_with(&[&session_var, &a_socks])
            .is_empty()
            .then_some(())
    });
    // Its claim still holds: b must not run the session yet.
    let (code, message) = send_refused(&b, &id, "too early");
    assert_eq!(code, ErrorCode::Conflict, "{message}");
    // The lease runs out (here at once, rather than after 45 s); the
    // session then shows as interrupted, not running.
    pg.sql(
        "sessions",
        "UPDATE flyto_sessions SET lease_until = now() - interval '1 second'",
    );
    let (session, _) = history(&b, &id);
    assert_eq!(session.status, "error", "{session:#?}");
    assert!(
        session
            .error
            .as_deref()
            .unwrap_or("")
            .contains("interrupted"),
        "{session:#?}"
    );
    let events = send(&b, &id, "continue");
    assert!(done(&events), "{events:#?}");
    assert_eq!(text_of(&events), "recovered");
    let (session, messages) = history(&b, &id);
    assert_eq!(session.status, "idle", "{session:#?}");
    assert_every_call_answered(&messages);
    let requests = fake.wait_requests(4, DEADLINE);
    assert!(
        request_tool_result(&requests[3], "call_sleep").contains("interrupted"),
        "{}",
        requests[3]
    );
    // Nothing of the refused sends was stored.
    assert!(
        !messages
            .iter()
            .any(|m| ["me too", "too early"].contains(&message_text(m).as_str())),
        "{messages:#?}"
    );
    fake.assert_protocol_ok();
    // Deleted on one node (a new a), it is gone for the other, whose
    // actor for it is still up.
    let _da = start(&a);
    let out = a.ctl(&["session_delete", &id]);
    assert_eq!(out.code, 0, "{out:?}");
    let (code, message) = send_refused(&b, &id, "still there?");
    assert_eq!(code, ErrorCode::NotFound, "{message}");
}

#[test]
fn a_node_that_lost_its_claim_stops_its_run_and_writes_nothing_more() {
    let pg = TestPostgres::start();
    pg.create_database("sessions");
    let fake = FakeLlm::start(vec![
        Reply::slow_text(
            (1..=600).map(|i| format!("{i} ")),
            Duration::from_millis(100),
        ),
        Reply::text("b-run"),
    ]);
    let (a, b) = (node(&pg, &fake), node(&pg, &fake));
    let _da = start(&a);
    let _db = start(&b);
    let dir = workdir(&a, "ws");
    let id = new_session(&a, &dir);
    let mut first = start_send(&a, &id, "count");
    wait_for_text(&mut first, &id);
    // a's claim is gone while it runs (as after a lease a paused a let
    // run out), and b takes the session: a hears of it at its next
    // renewal and stops. (Revoked rather than expired, so a's renewal
    // cannot win it back first.)
    pg.sql(
        "sessions",
        "UPDATE flyto_sessions SET lease_node = NULL, lease_token = NULL, lease_until = NULL",
    );
    let events = send(&b, &id, "take over");
    assert!(done(&events), "{events:#?}");
    let rest = drain(&mut first, &id);
    assert!(rest.last().is_some_and(|e| e.ends_run()), "{rest:#?}");
    // a's run wrote nothing after b took over: b's turn follows a's prompt.
    let (_, messages) = history(&b, &id);
    let texts: Vec<String> = messages.iter().map(message_text).collect();
    assert_eq!(texts, ["count", "take over", "b-run"], "{messages:#?}");
    // Idle again, a's node can continue it, from the transcript as it is.
    let (session, _) = history(&a, &id);
    assert_eq!(session.status, "idle", "{session:#?}");
}

#[test]
fn agent_steps_and_prompt_jobs_run_on_the_shared_store() {
    let pg = TestPostgres::start();
    pg.create_database("sessions");
    let fake = FakeLlm::start(vec![Reply::text("the summary"), Reply::text("job ran")]);
    let (a, b) = (node(&pg, &fake), node(&pg, &fake));
    let _da = start(&a);
    let _db = start(&b);
    let out = b.ctl(&["submit_plan", "--prompt", "summarise the logs", "--wait"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("the summary"), "{out:?}");
    // Its session is on the shared store: a lists it.
    let listed = match a.client().call(&Request::SessionList {}).unwrap() {
        Response::Sessions { sessions } => sessions,
        other => panic!("{other:?}"),
    };
    assert!(
        listed
            .iter()
            .any(|s| s.name.as_deref().is_some_and(|n| n.starts_with("plan p"))),
        "{listed:?}"
    );
    // A prompt job made on a runs its agent step wherever it is claimed.
    let job = a.ctl(&[
        "job_create",
        "--schedule",
        "@daily",
        "--prompt",
        "report",
        "--name",
        "report",
    ]);
    assert_eq!(job.code, 0, "{job:?}");
    let ran = a.ctl(&["job_run", "report", "--json"]);
    assert_eq!(ran.code, 0, "{ran:?}");
    let plan: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    let plan = plan["plan"].as_str().unwrap().to_string();
    let done = b.wait_plan(&plan, "the job's run", |p| p.state.is_terminal());
    assert_eq!(
        done.state,
        flyto_tests::flyto_protocol::PlanState::Succeeded,
        "{done:?}"
    );
    assert!(done.steps[0].stdout_tail.contains("job ran"), "{done:?}");
    fake.assert_protocol_ok();
}
