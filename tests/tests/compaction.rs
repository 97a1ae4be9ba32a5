//! Long sessions: compaction past the threshold (what the model sees next,
//! what history keeps), the summary tiers, the circuit breaker across
//! failures, rate limits, SIGKILL, its 5-minute reset and its TTL, and
//! `session_reset` / `session_model` / `session_compact`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_llm::{FakeLlm, Reply};
use flyto_tests::flyto_protocol::{Request, Response, SessionEvent};
use flyto_tests::sessions_support::*;
use flyto_tests::{Backend, Daemon, TestEnv};
use serde_json::Value;

/// Main model: 12,000-token window, 1,000 max output → effective 11,000,
/// warning at 7,700, compaction at 8,800; input at 1 USD per million
/// tokens. Summaries go to a second server (`fast`, input at 2 USD per
/// million) that fails at once (no retries) when told to. `extra` is
/// added to the config (e.g. a `[sessions]` section). Memory extraction,
/// the other user of the `fast` role, is off: the fast server's script is
/// the summaries'.
fn config(main: &FakeLlm, fast: &FakeLlm, fast_window: u32, extra: &str) -> String {
    format!(
        "{BASE}{extra}\n[memory]\nextract_every = 0\n\n[models.main]\napi = \"openai\"\nbase_url = \"{}\"\nmodel = \"main-model\"\ncontext_window = 12000\nmax_output = 1000\ninput_price = 1.0\n\n\
[models.big]\napi = \"openai\"\nbase_url = \"{}\"\nmodel = \"big-model\"\ncontext_window = 200000\nmax_output = 1000\n\n\
[models.summ]\napi = \"openai\"\nbase_url = \"{}\"\nmodel = \"summ-model\"\ncontext_window = {fast_window}\nmax_output = 500\ninput_price = 2.0\n\n\
[models.summ.retry]\nmax_attempts = 1\n\n[roles]\nmain = \"main\"\nfast = \"summ\"\n",
        main.base_url(),
        main.base_url(),
        fast.base_url()
    )
}

// The compaction suite's core, on both stores.
on_both_backends!(
    a_session_past_the_threshold_compacts_and_keeps_what_the_user_confirmed,
    session_reset_moves_the_window_and_keeps_history,
    switching_to_a_smaller_model_compacts_at_once_and_session_compact_works,
);

struct Setup {
    main: FakeLlm,
    fast: FakeLlm,
    env: TestEnv,
    daemon: Daemon,
    id: String,
}

fn setup(fast_window: u32) -> Setup {
    setup_with(fast_window, "")
}

/// [`setup`] with `extra` in the config.
fn setup_with(fast_window: u32, extra: &str) -> Setup {
    setup_on(Backend::Sled, fast_window, extra)
}

/// [`setup_with`] on `backend`.
fn setup_on(backend: Backend, fast_window: u32, extra: &str) -> Setup {
    let main = FakeLlm::start(vec![]);
    let fast = FakeLlm::start(vec![]);
    let env = TestEnv::on(backend, &config(&main, &fast, fast_window, extra));
    let daemon = start(&env);
    let dir = workdir(&env, "proj");
    std::fs::write(dir.join("big.log"), "log line with details\n".repeat(2_000)).unwrap();
    let id = new_session(&env, &dir);
    Setup {
        main,
        fast,
        env,
        daemon,
        id,
    }
}

const CONSTRAINT: &str = "Important: never run migrations on the prod database.";
const PATH: &str = "/srv/app/config/prod.toml";

/// Three turns that end past the compaction threshold: a first exchange,
/// a confirmed constraint with a path, and a big tool result.
fn fill(s: &Setup) {
    s.main.push(vec![Reply::text("Set up.").usage(2_000, 20)]);
    send_logged(&s.env, &s.daemon, &s.id, "Set up the project.");
    s.main.push(vec![Reply::text("Noted.").usage(3_000, 20)]);
    send_logged(
        &s.env,
        &s.daemon,
        &s.id,
        &format!("{CONSTRAINT} The config is at {PATH}. Confirmed."),
    );
    s.main.push(vec![
        Reply::tool_call("c1", "read", r#"{"path":"big.log"}"#).usage(4_000, 20),
        Reply::text("Looked at the log.").usage(9_000, 20),
    ]);
    send_logged(&s.env, &s.daemon, &s.id, "Read big.log.");
}

fn compacted(events: &[SessionEvent]) -> Option<(String, u64, u64)> {
    events.iter().find_map(|e| match e {
        SessionEvent::Compacted {
            tier,
            before_tokens,
            after_tokens,
            ..
        } => Some((tier.clone(), *before_tokens, *after_tokens)),
        _ => None,
    })
}

fn failed(events: &[SessionEvent]) -> Option<(String, bool)> {
    events.iter().find_map(|e| match e {
        SessionEvent::CompactFailed {
            message,
            breaker_open,
        } => Some((message.clone(), *breaker_open)),
        _ => None,
    })
}

fn last_request_text(fake: &FakeLlm) -> String {
    let reqs = fake.requests();
    reqs.last().expect("a request").to_string()
}

fn summary_prompt(body: &Value) -> String {
    request_messages(body)
        .last()
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn a_session_past_the_threshold_compacts_and_keeps_what_the_user_confirmed(backend: Backend) {
    let s = setup_on(backend, 128_000, "");
    fill(&s);
    // The summariser forgets the constraint and the path.
    s.fast
        .push(vec![Reply::text("## Goal\nSet up the project.")]);
    s.main.push(vec![Reply::text("Fine.").usage(3_000, 10)]);
    let events = send_logged(&s.env, &s.daemon, &s.id, "What next?");
    let (tier, before, after) = compacted(&events).expect("compacted");
    assert_eq!(tier, "summary", "{events:#?}");
    assert!(after < before, "{before} → {after}");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, SessionEvent::CompactStarted { .. }))
    );
    // What the model sees next keeps the constraint and the path verbatim.
    let seen = last_request_text(&s.main);
    assert!(seen.contains(CONSTRAINT), "{seen}");
    assert!(seen.contains(PATH));
    assert!(seen.contains("reference material"));
    assert!(seen.contains("What next?"));
    // The summary call covered the middle, not the protected head.
    let prompt = summary_prompt(&s.fast.requests()[0]);
    assert!(prompt.contains("Read big.log.") && !prompt.contains("Set up the project."));
    // Nothing is deleted: history lists every message, in order.
    let (view, messages) = history(&s.env, &s.id);
    assert_eq!(messages.len() as u64, view.messages);
    assert!(messages.iter().enumerate().all(|(i, m)| m.idx == i as u64));
    assert!(
        messages
            .iter()
            .any(|m| message_text(m).contains(CONSTRAINT))
    );
    assert!(view.context_base_idx > 0 && view.context.has_summary);
    assert_eq!(view.context.compactions, 1);
    // The protected head [0].. is what the model still sees before the
    // summary: history does not mark it, only the summarised messages.
    assert_eq!(view.context.head_from_idx, 0);
    let out = s.env.ctl(&["session_history", &s.id]);
    assert_eq!(out.code, 0, "{out:?}");
    // Headings are `[idx] <time> role:`.
    let heading = |idx: u64, rest: &str| {
        out.stdout
            .lines()
            .any(|l| l.starts_with(&format!("[{idx}] ")) && l.ends_with(rest))
    };
    assert!(heading(0, " user:"), "{}", out.stdout);
    assert!(
        out.stdout.contains(" user:\nSet up the project.\n"),
        "{}",
        out.stdout
    );
    assert!(
        heading(
            view.context.summary_from_idx,
            " user: (outside the model's window)"
        ),
        "{}",
        out.stdout
    );
    assert_eq!(view.context.compact_at, 8_800);
    assert_eq!(view.context.effective_window, 11_000);
    assert_every_call_answered(&messages);
    // No tool call lost its result in anything the model was sent.
    s.main.assert_protocol_ok();
    // A second compaction updates the first summary.
    s.main.push(vec![
        Reply::tool_call("c2", "read", r#"{"path":"big.log"}"#).usage(5_000, 20),
        Reply::text("Again.").usage(9_500, 20),
    ]);
    send_logged(&s.env, &s.daemon, &s.id, "Read it again.");
    s.fast.push(vec![Reply::text("## Goal\nSet up, updated.")]);
    s.main.push(vec![Reply::text("Ok.").usage(3_000, 10)]);
    let events = send_logged(&s.env, &s.daemon, &s.id, "And now?");
    assert!(compacted(&events).is_some(), "{events:#?}");
    let prompt = summary_prompt(&s.fast.requests()[1]);
    assert!(
        prompt.contains("<previous-summary>\n## Goal\nSet up the project."),
        "{prompt}"
    );
    let seen = last_request_text(&s.main);
    assert!(seen.contains(CONSTRAINT) && seen.contains(PATH));
    s.main.assert_protocol_ok();
    let (view, messages) = history(&s.env, &s.id);
    assert_eq!(view.context.compactions, 2);
    assert_eq!(messages.len() as u64, view.messages);
}

#[test]
fn a_summary_call_counts_towards_the_run_budget() {
    // fill's runs cost at most $0.0130 each (input at $1 per million).
    let s = setup_with(128_000, "[sessions]\nmax_run_cost_usd = 0.02\n");
    fill(&s);
    // This run: a summary of 8,000 input tokens at $2 per million
    // ($0.016), then a call of 5,000 at $1 ($0.005). Each stays under the
    // limit; together they reach it, so the run stops after the tool round
    // instead of making the second call.
    s.fast.push(vec![
        Reply::text("## Goal\nSet up the project.").usage(8_000, 0),
    ]);
    s.main.push(vec![
        Reply::tool_call("c9", "glob", r#"{"pattern":"*.log"}"#).usage(5_000, 0),
        Reply::text("Done.").usage(5_100, 0),
    ]);
    let main_calls = s.main.request_count();
    let events = send_logged(&s.env, &s.daemon, &s.id, "What next?");
    assert!(compacted(&events).is_some(), "{events:#?}");
    let Some(SessionEvent::Done { stop, message }) = events.last() else {
        panic!("{events:#?}")
    };
    assert_eq!(stop, "budget", "{events:#?}");
    assert!(
        message.contains("$0.0210 ($0.0160 of it compaction summaries)")
            && message.contains("sessions.max_run_cost_usd = $0.0200"),
        "{message}"
    );
    assert_eq!(s.main.request_count(), main_calls + 1);
    let (view, messages) = history(&s.env, &s.id);
    assert_eq!(view.status, "idle");
    assert_every_call_answered(&messages);
}

#[test]
fn a_prompt_too_long_summary_drops_old_groups_then_chunks() {
    // Tier 2: the first summary call is too long; the retry leaves out
    // the oldest group.
    let s = setup(128_000);
    fill(&s);
    s.fast.push(vec![
        Reply::prompt_too_long(),
        Reply::text("## Goal\nshort"),
    ]);
    s.main.push(vec![Reply::text("Fine.").usage(3_000, 10)]);
    let events = send_logged(&s.env, &s.daemon, &s.id, "What next?");
    assert_eq!(compacted(&events).expect("compacted").0, "summary_dropped");
    let reqs = s.fast.requests();
    assert_eq!(reqs.len(), 2);
    assert!(summary_prompt(&reqs[0]).contains(CONSTRAINT));
    assert!(!summary_prompt(&reqs[1]).contains(CONSTRAINT));
    // …yet the constraint is still pinned in what the model sees.
    assert!(last_request_text(&s.main).contains(CONSTRAINT));

    // Tier 3: every whole attempt too long → chunks, then a merge; a chunk
    // that is still too long halves the chunk size.
    let s = setup(2_000);
    fill(&s);
    let mut script = vec![Reply::prompt_too_long(); 3];
    script.extend((0..8).map(|i| Reply::text(&format!("part summary {i}"))));
    s.fast.push(script);
    s.main.push(vec![Reply::text("Fine.").usage(3_000, 10)]);
    let events = send_logged(&s.env, &s.daemon, &s.id, "What next?");
    assert_eq!(
        compacted(&events).expect("compacted").0,
        "summary_chunked",
        "{events:#?}"
    );
    let prompts: Vec<String> = s.fast.requests().iter().map(summary_prompt).collect();
    let chunks = prompts
        .iter()
        .filter(|p| p.starts_with("This is part"))
        .count();
    assert!(chunks >= 3, "{prompts:#?}");
    assert!(
        prompts.last().unwrap().contains("<part n=\"2\">"),
        "{prompts:#?}"
    );
    assert!(
        prompts
            .last()
            .unwrap()
            .starts_with("Merge these partial summaries")
    );
    s.main.assert_protocol_ok();
}

fn breaker_status(env: &TestEnv) -> Vec<flyto_tests::flyto_protocol::BreakerView> {
    match env
        .client()
        .call(&Request::BreakerStatus {})
        .expect("breaker_status")
    {
        Response::Breakers { breakers } => breakers,
        other => panic!("unexpected answer: {other:?}"),
    }
}

#[test]
fn three_failures_open_the_breaker_which_survives_sigkill_resets_and_expires() {
    let s = setup(128_000);
    fill(&s);
    // Three failed compactions; the context still fits, so runs go on.
    for n in 1..=3 {
        s.fast.push(vec![Reply::status(500, None)]);
        let usage = if n == 3 { 11_500 } else { 9_000 };
        s.main.push(vec![Reply::text("Went on.").usage(usage, 10)]);
        let events = send_logged(&s.env, &s.daemon, &s.id, &format!("Step {n}."));
        let (message, open) = failed(&events).expect("compaction failed");
        assert_eq!(open, n == 3, "{message}");
        assert!(
            events
                .iter()
                .any(|e| matches!(e, SessionEvent::Done { stop, .. } if stop == "end_turn"))
        );
    }
    assert_eq!(s.fast.request_count(), 3);
    // Open, and the context no longer fits: the run stops without calling
    // the summariser (or the model), saying why and how to retry.
    let main_calls = s.main.request_count();
    let events = send_logged(&s.env, &s.daemon, &s.id, "Step 4.");
    assert_eq!(s.fast.request_count(), 3);
    assert_eq!(s.main.request_count(), main_calls);
    let Some(SessionEvent::Done { stop, message }) = events.last() else {
        panic!("{events:#?}")
    };
    assert_eq!(stop, "breaker_open");
    assert!(
        message.contains("breaker")
            && message.contains("breaker_reset")
            && message.contains("retries"),
        "{message}"
    );
    // flytoctl's exit code says the run did not answer, for a send as for
    // a manual compaction.
    for args in [
        ["session_send", &s.id, "Step 4 again."].as_slice(),
        ["session_compact", &s.id].as_slice(),
    ] {
        let out = s.env.ctl(args);
        assert_eq!(out.code, 1, "{args:?}: {out:?}");
        assert!(out.stderr.contains("breaker_reset"), "{args:?}: {out:?}");
    }
    assert_eq!(s.fast.request_count(), 3);
    assert_eq!(s.main.request_count(), main_calls);
    let status = breaker_status(&s.env);
    assert_eq!(status.len(), 1);
    assert_eq!((status[0].state.as_str(), status[0].failures), ("open", 3));
    assert!(
        status[0]
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("server error")
    );
    let out = s.env.ctl(&["breaker_status"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains(&status[0].project) && out.stdout.contains("open"));

    // SIGKILL: the restarted daemon remembers the open breaker.
    let Setup {
        main,
        fast,
        env,
        daemon,
        id,
    } = s;
    daemon.kill9();
    let daemon = start(&env);
    let status = breaker_status(&env);
    assert_eq!(status[0].state, "open");
    let _ = daemon.terminate();
    // Five minutes later it lets one trial through.
    let daemon = start_with(&env, &[("FLYTO_CLOCK_OFFSET_MS", "301000")]);
    fast.push(vec![Reply::status(500, None)]);
    let events = send_logged(&env, &daemon, &id, "Step 5.");
    assert_eq!(fast.request_count(), 4, "{events:#?}");
    assert!(failed(&events).expect("the trial failed").1);
    let _ = daemon.terminate();
    // After the 1-hour TTL a restarted daemon has forgotten it.
    let daemon = start_with(&env, &[("FLYTO_CLOCK_OFFSET_MS", "4000000")]);
    assert!(breaker_status(&env).is_empty());
    let _ = daemon.terminate();
    drop(main);
}

#[test]
fn rate_limits_do_not_open_the_breaker_and_a_summary_that_does_not_shrink_counts() {
    let s = setup(128_000);
    fill(&s);
    for n in 1..=4 {
        s.fast.push(vec![Reply::status(429, None)]);
        s.main.push(vec![Reply::text("Went on.").usage(9_000, 10)]);
        let events = send_logged(&s.env, &s.daemon, &s.id, &format!("Step {n}."));
        let (message, open) = failed(&events).expect("compaction failed");
        assert!(!open && message.contains("rate limited"), "{message}");
    }
    assert!(
        breaker_status(&s.env)
            .iter()
            .all(|b| b.state == "closed" && b.failures == 0)
    );
    // A summary longer than what it replaces is a failure, but it was
    // paid for: 8,000 input tokens at $2 per million, next to the main
    // call's 9,000 at $1.
    let (before, _) = history(&s.env, &s.id);
    s.fast.push(vec![
        Reply::text(&"very long summary ".repeat(4_000)).usage(8_000, 0),
    ]);
    s.main.push(vec![Reply::text("Went on.").usage(9_000, 10)]);
    let events = send_logged(&s.env, &s.daemon, &s.id, "Step 5.");
    let (message, _) = failed(&events).expect("compaction failed");
    assert!(message.contains("did not shrink"), "{message}");
    let (after, _) = history(&s.env, &s.id);
    let charged = after.cost_usd - before.cost_usd;
    assert!(
        (charged - 0.025).abs() < 1e-9,
        "the failed summary's $0.016 is in the session's cost: {charged}"
    );
    let status = breaker_status(&s.env);
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].failures, 1);
    // The window was left as it was.
    let (view, _) = history(&s.env, &s.id);
    assert!(!view.context.has_summary);
    // A prefix of an id that no breaker has is refused; the project's
    // directory, named relative to where the user is, resets it.
    let out = s.env.ctl(&["breaker_reset", "ffffffff"]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("NotFound"), "{out:?}");
    let out = s
        .env
        .command(&flyto_tests::bin("flytoctl"))
        .args(["breaker_reset", "."])
        .current_dir(&status[0].workdir)
        .output()
        .expect("flytoctl");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("closed the compaction breaker of {}\n", status[0].project)
    );
    assert!(breaker_status(&s.env).is_empty());
}

fn session_reset_moves_the_window_and_keeps_history(backend: Backend) {
    let s = setup_on(backend, 128_000, "");
    s.main.push(vec![Reply::text("one done")]);
    send_logged(&s.env, &s.daemon, &s.id, "one");
    s.main.push(vec![Reply::text("two done")]);
    send_logged(&s.env, &s.daemon, &s.id, "two");
    let out = s.env.ctl(&["session_reset", &s.id, "--soft"]);
    assert_eq!(out.code, 0, "{out:?}");
    let (view, messages) = history(&s.env, &s.id);
    assert_eq!(view.context_base_idx, 2);
    assert_eq!(messages.len(), 4);
    s.main.push(vec![Reply::text("three done")]);
    send_logged(&s.env, &s.daemon, &s.id, "three");
    let body = s.main.requests().last().unwrap().clone();
    let texts: Vec<String> = request_messages(&body)
        .iter()
        .filter(|m| m["role"] != "system")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect();
    assert_eq!(texts, ["two", "two done", "three"]);
    let out = s.env.ctl(&["session_reset", &s.id, "--hard"]);
    assert_eq!(out.code, 0, "{out:?}");
    s.main.push(vec![Reply::text("four done")]);
    send_logged(&s.env, &s.daemon, &s.id, "four");
    let body = s.main.requests().last().unwrap().clone();
    assert_eq!(
        request_messages(&body).len(),
        2,
        "system + the new message: {body}"
    );
    let (view, messages) = history(&s.env, &s.id);
    assert_eq!(messages.len(), 8);
    assert_eq!(view.context_base_idx, 6);
    // Neither flag: a usage error that says what to pass.
    let out = s.env.ctl(&["session_reset", &s.id]);
    assert_eq!(out.code, 2, "{out:?}");
}

fn switching_to_a_smaller_model_compacts_at_once_and_session_compact_works(backend: Backend) {
    let s = setup_on(backend, 128_000, "");
    // On the big model, the full context is fine.
    let out = s.env.ctl(&["session_model", &s.id, "big"]);
    assert_eq!(out.code, 0, "{out:?}");
    fill(&s);
    let (view, _) = history(&s.env, &s.id);
    assert!(!view.context.has_summary);
    // Back to the small one: over its threshold, so it compacts at once.
    s.fast.push(vec![Reply::text("## Goal\nSet up.")]);
    let out = s.env.ctl(&["session_model", &s.id, "main"]);
    assert_eq!(out.code, 0, "{out:?}");
    flyto_tests::wait_until(
        "the compaction after the model switch",
        flyto_tests::DEADLINE,
        || {
            let (view, _) = history(&s.env, &s.id);
            (view.context.compactions == 1 && view.status == "idle").then_some(())
        },
    );
    assert_eq!(s.fast.request_count(), 1);
    // A manual compaction on a window with nothing left to summarise.
    let out = s.env.ctl(&["session_compact", &s.id]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        format!("{}{}", out.stdout, out.stderr).contains("nothing to"),
        "{out:?}"
    );
    assert_eq!(s.fast.request_count(), 1, "{out:?}");
    // An unknown model is refused and changes nothing.
    let out = s.env.ctl(&["session_model", &s.id, "nope"]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(
        out.stderr.contains("no model profile or role named `nope`"),
        "{out:?}"
    );
}

#[test]
fn old_tool_output_is_shortened_only_under_pressure_and_first() {
    let s = setup(128_000);
    s.main.push(vec![
        Reply::tool_call("c1", "read", r#"{"path":"big.log"}"#).usage(1_500, 20),
        Reply::text("Read it.").usage(3_000, 20),
    ]);
    send_logged(&s.env, &s.daemon, &s.id, "Read big.log.");
    s.main.push(vec![Reply::text("Ok.").usage(9_000, 20)]);
    send_logged(
        &s.env,
        &s.daemon,
        &s.id,
        &"Here is a long note. ".repeat(1_000),
    );
    // Under the threshold the tool result went out whole (a stable prefix).
    let before = s.main.requests().last().unwrap().clone();
    let full = request_tool_result(&before, "c1");
    assert!(full.len() > 10_000 && !full.contains("[flyto: cut"));
    // Past it, the cheap step alone is enough: no summary call.
    s.main.push(vec![Reply::text("Fine.").usage(6_000, 10)]);
    let events = send_logged(&s.env, &s.daemon, &s.id, "Go on.");
    assert_eq!(
        compacted(&events).expect("compacted").0,
        "trim",
        "{events:#?}"
    );
    assert_eq!(s.fast.request_count(), 0);
    let after = s.main.requests().last().unwrap().clone();
    let short = request_tool_result(&after, "c1");
    assert!(
        short.contains("[flyto: cut") && short.contains("message #2"),
        "{short}"
    );
    s.main.assert_protocol_ok();
    // The transcript keeps the whole output.
    let (_, messages) = history(&s.env, &s.id);
    let kept = messages[2].blocks.iter().find_map(|b| match b {
        flyto_tests::flyto_protocol::BlockView::ToolResult { content, .. } => Some(content.clone()),
        _ => None,
    });
    assert_eq!(kept.as_deref(), Some(full.as_str()));
}

#[test]
fn a_loaded_skill_survives_a_compaction_exactly_once_in_the_window() {
    const MARKER: &str = "DEPLOY-STEP-MARKER: drain the node, then ship.";
    let s = setup(128_000);
    let skill = s.env.work.join("proj/.flyto/skills/deploy");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        format!("---\nname: deploy\ndescription: Use when deploying.\n---\n{MARKER}\n"),
    )
    .unwrap();
    let out = s.env.ctl(&["session_model", &s.id, "big"]);
    assert_eq!(out.code, 0, "{out:?}");
    s.main.push(vec![Reply::text("Set up.").usage(2_000, 20)]);
    send_logged(&s.env, &s.daemon, &s.id, "Set up the project.");
    s.main.push(vec![
        Reply::tool_call("c_skill", "load_skill", r#"{"name":"deploy"}"#).usage(2_500, 20),
        Reply::text("Loaded the deploy skill.").usage(3_000, 20),
    ]);
    send_logged(&s.env, &s.daemon, &s.id, "Get ready to deploy.");
    s.main.push(vec![
        Reply::tool_call("c1", "read", r#"{"path":"big.log"}"#).usage(4_000, 20),
        Reply::text("Looked at the log.").usage(9_000, 20),
    ]);
    send_logged(&s.env, &s.daemon, &s.id, "Read big.log.");
    // The smaller model compacts at once: the skill's turn is summarised.
    s.fast.push(vec![Reply::text("## Goal\nDeploy.")]);
    let out = s.env.ctl(&["session_model", &s.id, "main"]);
    assert_eq!(out.code, 0, "{out:?}");
    flyto_tests::wait_until("the compaction", flyto_tests::DEADLINE, || {
        let (view, _) = history(&s.env, &s.id);
        (view.context.compactions == 1 && view.status == "idle").then_some(())
    });
    assert!(
        !summary_prompt(&s.fast.requests()[0]).is_empty(),
        "the summariser was asked"
    );

    s.main
        .push(vec![Reply::text("Deploying.").usage(3_000, 20)]);
    send_logged(&s.env, &s.daemon, &s.id, "Now deploy.");
    let sent = last_request_text(&s.main);
    assert_eq!(sent.matches("DEPLOY-STEP-MARKER").count(), 1, "{sent}");
    assert!(
        sent.contains("Skill `deploy`, loaded earlier (kept through the compaction)"),
        "{sent}"
    );
}
