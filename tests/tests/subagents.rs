//! Sub-agents through the real daemon and a scripted model: the `agent`
//! tool runs a task in a child session that starts from the parent's
//! window (the request the provider gets begins with the parent's
//! messages), answers as the tool result, and is stored as its own
//! session linked to the parent; several run at once; the depth cap and
//! the child's own iteration bound hold; cancelling the parent cancels
//! the child and its commands; SIGKILL mid-child leaves both transcripts
//! consistent.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_llm::Reply;
use flyto_tests::sessions_support::{
    assert_every_call_answered, cancel, history, new_session, next_event, offered_tools,
    request_messages, request_tool_result, send, setup_with, start, start_send, stored_result,
    workdir,
};
use flyto_tests::{DEADLINE, TestEnv, processes_with, wait_until};
use serde_json::json;
use std::time::Duration;

fn child_processes(env: &TestEnv, session: &str) -> Vec<i32> {
    processes_with(&[
        &format!("FLYTO_SESSION_ID={session}"),
        &env.plan_sock_prefix(),
    ])
}

#[test]
fn a_sub_agent_starts_from_the_parents_window_and_is_its_own_linked_session() {
    let (fake, env, _daemon) = setup_with(
        "",
        vec![
            Reply::tool_call("a1", "agent", json!({"task": "count the files"})),
            Reply::text("there are 3 files"),
            Reply::text("done: 3 files"),
        ],
    );
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    send(&env, &id, "look around");
    let requests = fake.requests();
    // The child's request starts with the parent's messages (the prompt
    // cache's prefix), then the task.
    let (parent, child) = (
        request_messages(&requests[0]),
        request_messages(&requests[1]),
    );
    // The same system prompt and messages, then the parent's reply with
    // the call (its result stays the parent's), then the task.
    assert_eq!(child[..parent.len()], parent[..], "{child:#?}");
    assert_eq!(child[parent.len()]["role"], "assistant", "{child:#?}");
    assert!(
        child.last().unwrap()["content"]
            .to_string()
            .contains("count the files")
    );
    assert!(offered_tools(&requests[0]).contains(&"agent".to_string()));
    assert!(!offered_tools(&requests[1]).contains(&"agent".to_string()));
    let answer = request_tool_result(&requests[2], "a1");
    assert!(answer.starts_with("there are 3 files"), "{answer}");
    assert!(answer.contains("[sub-agent s2: 1 model calls"), "{answer}");

    let (child_view, child_messages) = history(&env, "s2");
    assert_eq!(child_view.parent.as_deref(), Some(id.as_str()));
    assert_every_call_answered(&child_messages);
    let shown = env.ctl(&["session_history", "s2"]);
    assert!(shown.stdout.contains("sub-agent of s1"), "{shown:?}");
    let (parent_view, _) = history(&env, &id);
    assert_eq!(parent_view.parent, None);
}

#[test]
fn sub_agents_run_at_once_within_the_depth_cap_and_their_own_bounds() {
    let (fake, env, _daemon) = setup_with(
        "[sessions]\nmax_agent_depth = 1\nagent_max_iterations = 1\n",
        vec![
            Reply::tool_calls(vec![
                (
                    "a1",
                    "agent",
                    json!({"task": "first", "tools": ["agent", "read"]}).to_string(),
                ),
                (
                    "a2",
                    "agent",
                    json!({"task": "second", "fresh": true}).to_string(),
                ),
            ]),
            Reply::text("child answer").held("children"),
            Reply::text("child answer").held("children"),
            Reply::tool_call("a3", "agent", json!({"task": "loop"})),
            Reply::tool_call("c1", "read", json!({"path": "nothing.txt"})),
            Reply::text("done"),
        ],
    );
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    let mut stream = start_send(&env, &id, "split the work");
    // Both children's model calls are in flight together.
    fake.wait_requests(3, DEADLINE);
    fake.release("children");
    while let Some((_, e)) = next_event(&mut stream, &id) {
        if e.ends_run() {
            break;
        }
    }
    let requests = fake.wait_requests(6, DEADLINE);
    for child in &requests[1..3] {
        let tools = offered_tools(child);
        // The depth cap keeps `agent` from the children even when asked for.
        assert!(!tools.contains(&"agent".to_string()), "{tools:?}");
    }
    // The one that asked for `read` and `agent` got `read` alone.
    let restricted = requests[1..3]
        .iter()
        .filter(|r| offered_tools(r) == ["read"])
        .count();
    assert_eq!(restricted, 1);
    // A fresh child starts from nothing but its task.
    let fresh = requests[1..3]
        .iter()
        .filter(|r| {
            request_messages(r)
                .iter()
                .filter(|m| m["role"] == "user")
                .count()
                == 1
        })
        .count();
    assert_eq!(fresh, 1);
    assert!(request_tool_result(&requests[3], "a1").starts_with("child answer"));
    assert!(request_tool_result(&requests[3], "a2").starts_with("child answer"));
    // A child stops at its own bound (one model call) and says so.
    let bounded = request_tool_result(&requests[5], "a3");
    assert!(
        bounded.contains("stopped before it finished")
            && bounded.contains("sessions.agent_max_iterations"),
        "{bounded}"
    );
}

#[test]
fn cancelling_the_parent_cancels_the_sub_agent_and_its_commands() {
    let (_fake, env, _daemon) = setup_with(
        "",
        vec![
            Reply::tool_call("a1", "agent", json!({"task": "wait"})),
            Reply::tool_call("b1", "bash", json!({"command": "sleep 30"})),
        ],
    );
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    let mut stream = start_send(&env, &id, "delegate");
    wait_until("the child's command to run", DEADLINE, || {
        (!child_processes(&env, "s2").is_empty()).then_some(())
    });
    cancel(&env, &id);
    while let Some((_, e)) = next_event(&mut stream, &id) {
        if e.ends_run() {
            break;
        }
    }
    wait_until("the child's command to be killed", DEADLINE, || {
        child_processes(&env, "s2").is_empty().then_some(())
    });
    let (child, messages) = wait_until("the child's run to end", DEADLINE, || {
        let (v, m) = history(&env, "s2");
        (v.status == "idle").then_some((v, m))
    });
    assert_eq!(child.parent.as_deref(), Some(id.as_str()));
    assert_every_call_answered(&messages);
    let (_, parent) = history(&env, &id);
    assert_every_call_answered(&parent);
    let (content, is_error) = stored_result(&parent, "a1").unwrap();
    assert!(is_error && content.contains("cancelled"), "{content}");
}

#[test]
fn sigkill_mid_child_leaves_both_transcripts_consistent() {
    let (fake, env, daemon) = setup_with(
        "",
        vec![
            Reply::tool_call("a1", "agent", json!({"task": "wait"})),
            Reply::tool_call("b1", "bash", json!({"command": "sleep 30"})),
            Reply::text("recovered"),
        ],
    );
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    let _stream = start_send(&env, &id, "delegate");
    wait_until("the child's command to run", DEADLINE, || {
        (!child_processes(&env, "s2").is_empty()).then_some(())
    });
    // Everything written so far is durable once another request answers.
    new_session(&env, &dir);
    daemon.kill9();
    wait_until(
        "the child's command to die with flytod",
        Duration::from_secs(10),
        || child_processes(&env, "s2").is_empty().then_some(()),
    );
    let _daemon = start(&env);
    for session in [id.as_str(), "s2"] {
        let (view, messages) = history(&env, session);
        assert_every_call_answered(&messages);
        assert_eq!(view.status, "error", "{view:#?}");
    }
    let (_, parent) = history(&env, &id);
    let (content, is_error) = stored_result(&parent, "a1").unwrap();
    assert!(is_error && content.contains("interrupted"), "{content}");
    let (_, child) = history(&env, "s2");
    let (content, is_error) = stored_result(&child, "b1").unwrap();
    assert!(is_error && content.contains("interrupted"), "{content}");
    send(&env, &id, "go on");
    assert!(request_tool_result(&fake.requests()[2], "a1").contains("interrupted"));
}

#[test]
fn a_sub_agent_spends_at_most_its_share_of_the_parents_budget() {
    // Each fake call costs $0.0011 (1,000 tokens in at $1/M, 50 out at
    // $2/M). The parent's run may spend $0.004; after its first call
    // $0.0029 is left, of which the child gets 30%: $0.00087, so the
    // child stops before its second call.
    let (fake, env, _daemon) = setup_with(
        "[sessions]\nmax_run_cost_usd = 0.004\nagent_budget_share = 0.3\n",
        vec![
            Reply::tool_call("a1", "agent", json!({"task": "read a lot"})),
            Reply::tool_call("r1", "read", json!({"path": "nothing.txt"})),
            Reply::text("done"),
        ],
    );
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    send(&env, &id, "delegate");
    let requests = fake.wait_requests(3, DEADLINE);
    let result = request_tool_result(&requests[2], "a1");
    assert!(
        result.contains("stopped before it finished")
            && result.contains(
                "its share of the parent's budget (sessions.agent_budget_share) = $0.0009"
            ),
        "{result}"
    );
    assert_eq!(fake.request_count(), 3);
}
