//! Background memory extraction end to end: after `[memory] extract_every`
//! turns without a memory write of the agent's own, flytod runs a short
//! extraction over those turns against the scripted fake provider; what it
//! saves says `source: extracted` and the session, and what it costs is in
//! the session's totals and `session_history`.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::memory::project_dir;
use flyto_tests::fake_llm::Reply;
use flyto_tests::flyto_protocol::{ExtractionView, Request, Response, SessionView};
use flyto_tests::sessions_support::{
    history, new_session, request_messages, send, setup, setup_with, system_prompt, workdir,
};
use flyto_tests::{DEADLINE, TestEnv, wait_until};
use serde_json::{Value, json};

const EXTRACTOR: &str = "You are flytod's memory extractor";

fn is_extraction(body: &Value) -> bool {
    system_prompt(body).starts_with(EXTRACTOR)
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["function"]["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The text of the first user message of a request: an extraction's task.
fn task_of(body: &Value) -> String {
    request_messages(body)
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn extractions(env: &TestEnv, id: &str) -> (SessionView, Vec<ExtractionView>) {
    match env
        .client()
        .call(&Request::SessionHistory { id: id.into() })
        .expect("session_history")
    {
        Response::History {
            session,
            extractions,
            ..
        } => (session, extractions),
        other => panic!("unexpected answer to session_history: {other:?}"),
    }
}

/// Waits until session `id` has recorded `n` extractions.
fn wait_extractions(env: &TestEnv, id: &str, n: usize) -> (SessionView, Vec<ExtractionView>) {
    wait_until(&format!("{n} extraction(s) of {id}"), DEADLINE, || {
        let (s, xs) = extractions(env, id);
        (xs.len() >= n).then_some((s, xs))
    })
}

fn save_args(name: &str) -> String {
    json!({
        "name": name,
        "type": "feedback",
        "description": "the user wants tabs, not spaces",
        "body": "Indent with tabs in every file of this project.\n",
    })
    .to_string()
}

/// One chat turn's cost at the fake's prices ($1 / $2 per million tokens).
fn cost(input: u64, output: u64) -> f64 {
    (input as f64 + 2.0 * output as f64) / 1e6
}

#[test]
fn five_turns_without_a_memory_write_start_one_extraction_that_saves_with_its_origin_and_costs() {
    let mut script: Vec<Reply> = (0..5)
        .map(|i| Reply::text(&format!("answer {i}")))
        .collect();
    script.push(Reply::tool_call("x1", "memory_write", save_args("indent-style")).usage(2000, 100));
    script.push(Reply::text("saved indent-style").usage(3000, 20));
    let (fake, env, _daemon) = setup(script);
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    for i in 0..5 {
        let text = if i == 2 {
            "I prefer tabs over spaces, always".to_string()
        } else {
            format!("turn {i}")
        };
        send(&env, &id, &text);
    }
    let (session, xs) = wait_extractions(&env, &id, 1);
    let requests = fake.requests();
    assert_eq!(requests.len(), 7);
    assert!(requests[..5].iter().all(|b| !is_extraction(b)));
    for b in &requests[5..] {
        assert!(is_extraction(b), "{}", system_prompt(b));
        assert_eq!(
            tool_names(b),
            [
                "memory_search",
                "memory_read",
                "memory_write",
                "memory_forget"
            ]
        );
    }
    let task = task_of(&requests[5]);
    assert!(
        task.contains(&format!("session {id}"))
            && task.contains("USER: I prefer tabs over spaces, always")
            && task.contains("ASSISTANT: answer 4"),
        "{task}"
    );
    fake.assert_protocol_ok();

    // The entry says where it came from, on disk, in the index and in
    // `memory_show`.
    let folder = project_dir(&env, &dir);
    let text = std::fs::read_to_string(folder.join("indent-style.md")).unwrap();
    assert!(
        text.contains("\nsource: extracted\n") && text.contains(&format!("\nsession: {id}\n")),
        "{text}"
    );
    let index = std::fs::read_to_string(folder.join("MEMORY.md")).unwrap();
    assert!(
        index.contains(&format!(
            "- [indent-style](indent-style.md) (feedback, extracted from {id}, updated today)"
        )),
        "{index}"
    );
    let out = env.ctl(&[
        "memory_show",
        "indent-style",
        "--project",
        &dir.display().to_string(),
    ]);
    assert!(
        out.stdout.contains(&format!("by extracted from {id})")),
        "{}",
        out.stdout
    );

    // Its cost is in the session's totals, here and in session_list.
    let x = &xs[0];
    assert_eq!((x.turns, x.model_calls), (5, 2));
    assert_eq!((x.input_tokens, x.output_tokens), (5000, 120));
    assert_eq!(x.saved, ["indent-style"]);
    assert_eq!(x.outcome, "done");
    assert!((x.cost_usd - cost(5000, 120)).abs() < 1e-9, "{x:?}");
    assert_eq!(
        (session.input_tokens, session.output_tokens),
        (5 * 1000 + 5000, 5 * 50 + 120)
    );
    let total = 5.0 * cost(1000, 50) + cost(5000, 120);
    assert!((session.cost_usd - total).abs() < 1e-9, "{session:?}");
    let out = env.ctl(&["session_list", "--json"]);
    let listed: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(listed[0]["input_tokens"], 10_000);
    let out = env.ctl(&["session_history", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains(
            " · messages [0]..[9] · 2 model calls · 5.0k in / 120 out · $0.0052 · saved indent-style\n"
        ),
        "{}",
        out.stdout
    );
}

#[test]
fn no_extraction_when_the_agent_saved_memory_itself_and_the_count_starts_again() {
    // Turn 2 writes memory: turns 0-4 are not extracted, turns 5-9 are.
    let mut script = Vec::new();
    for i in 0..5 {
        if i == 2 {
            script.push(Reply::tool_call(
                "w1",
                "memory_write",
                save_args("by-agent"),
            ));
        }
        script.push(Reply::text(&format!("answer {i}")));
    }
    for i in 5..10 {
        script.push(Reply::text(&format!("answer {i}")));
    }
    script.push(Reply::text("nothing to save"));
    let (fake, env, _daemon) = setup(script);
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    for i in 0..10 {
        send(&env, &id, &format!("turn {i}"));
    }
    let (_, xs) = wait_extractions(&env, &id, 1);
    let requests = fake.requests();
    assert_eq!(requests.len(), 12);
    // Had the first five turns been extracted, that extraction would have
    // taken the reply of turn 5.
    let kinds: Vec<bool> = requests.iter().map(is_extraction).collect();
    assert_eq!(kinds.iter().filter(|k| **k).count(), 1, "{kinds:?}");
    assert!(kinds[11]);
    let task = task_of(&requests[11]);
    assert!(
        task.contains("USER: turn 5") && task.contains("USER: turn 9"),
        "{task}"
    );
    assert!(!task.contains("USER: turn 4"), "{task}");
    assert_eq!(xs.len(), 1);
    assert_eq!((xs[0].from_idx, xs[0].saved.len()), (12, 0));
}

#[test]
fn two_sessions_of_one_project_never_extract_at_once() {
    let mut script: Vec<Reply> = (0..8).map(|i| Reply::text(&format!("early {i}"))).collect();
    script.push(Reply::text("a4"));
    // The first extraction's first reply waits until the second session's
    // extraction was triggered.
    script.push(Reply::tool_call("xa", "memory_write", save_args("from-a")).held("first"));
    script.push(Reply::text("b4"));
    script.push(Reply::text("saved from-a"));
    script.push(Reply::text("nothing to save"));
    let (fake, env, daemon) = setup(script);
    let dir = workdir(&env, "proj");
    let a = new_session(&env, &dir);
    let b = new_session(&env, &dir);
    for i in 0..4 {
        send(&env, &a, &format!("a turn {i}"));
        send(&env, &b, &format!("b turn {i}"));
    }
    send(&env, &a, "a turn 4");
    let seen = fake.wait_requests(10, DEADLINE);
    assert!(is_extraction(&seen[9]) && task_of(&seen[9]).contains(&format!("session {a}")));
    // The session takes its next message while its extraction works.
    assert_eq!(history(&env, &a).0.status, "idle");

    send(&env, &b, "b turn 4");
    wait_until("the second extraction to queue", DEADLINE, || {
        daemon
            .log()
            .lines()
            .any(|l| l.contains("memory extraction queued") && l.contains(&b))
            .then_some(())
    });
    // Triggered, and still not sent: only the held one is in flight.
    let requests = fake.requests();
    assert_eq!(requests.len(), 11);
    assert_eq!(requests.iter().filter(|r| is_extraction(r)).count(), 1);

    fake.release("first");
    wait_extractions(&env, &a, 1);
    let (_, xs) = wait_extractions(&env, &b, 1);
    let requests = fake.requests();
    assert_eq!(requests.len(), 13);
    assert!(
        is_extraction(&requests[11]) && task_of(&requests[11]).contains(&format!("session {a}"))
    );
    assert!(
        is_extraction(&requests[12]) && task_of(&requests[12]).contains(&format!("session {b}"))
    );
    assert_eq!(xs[0].outcome, "done");
    fake.assert_protocol_ok();
}

#[test]
fn extract_every_zero_turns_extraction_off_and_a_reload_turns_it_on() {
    let script: Vec<Reply> = (0..6)
        .map(|i| Reply::text(&format!("answer {i}")))
        .collect();
    let (fake, env, daemon) = setup_with("[memory]\nextract_every = 0\n", script);
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);
    for i in 0..6 {
        send(&env, &id, &format!("turn {i}"));
    }
    // An extraction after the fifth turn would have taken the sixth's reply.
    let requests = fake.requests();
    assert_eq!(requests.len(), 6);
    assert!(requests.iter().all(|b| !is_extraction(b)));
    assert!(extractions(&env, &id).1.is_empty());

    // SIGHUP applies a new `extract_every`; the turns kept counting.
    let config = std::fs::read_to_string(&env.config).unwrap();
    env.write_config(&config.replace("extract_every = 0", "extract_every = 7"));
    daemon.signal(libc::SIGHUP);
    wait_until("the config to be reloaded", DEADLINE, || {
        daemon.log().contains("config reloaded").then_some(())
    });
    fake.push(vec![
        Reply::text("answer 6"),
        Reply::text("nothing to save"),
    ]);
    send(&env, &id, "turn 6");
    let (_, xs) = wait_extractions(&env, &id, 1);
    assert_eq!(xs[0].turns, 7);
    assert!(is_extraction(&fake.requests()[7]));
    fake.assert_protocol_ok();
}
