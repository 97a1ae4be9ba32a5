//! The agent's schedule tools end to end: a user creates, lists, changes
//! and cancels jobs by talking (the scripted fake provider plays the
//! model), `flytoctl job_*` sees the same jobs, and a run a job started can
//! use none of them.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::TestEnv;
use flyto_tests::fake_llm::{FakeLlm, Reply};
use flyto_tests::sessions_support::{
    new_session, request_messages, request_tool_result, send, setup, text_of, workdir,
};
use serde_json::{Value, json};

/// The tool result of `call` in whichever request the fake was sent it.
fn tool_result(fake: &FakeLlm, call: &str) -> String {
    fake.requests()
        .iter()
        .find(|b| {
            request_messages(b)
                .iter()
                .any(|m| m["role"] == "tool" && m["tool_call_id"] == call)
        })
        .map(|b| request_tool_result(b, call))
        .unwrap_or_else(|| panic!("no tool result for {call}"))
}

/// The tool names a request offered.
fn offered(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn jobs(env: &TestEnv) -> Vec<Value> {
    let out = env.ctl(&["job_list", "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    v["jobs"].as_array().unwrap().clone()
}

const SCHEDULE_TOOLS: [&str; 4] = [
    "schedule_create",
    "schedule_list",
    "schedule_update",
    "schedule_cancel",
];

#[test]
fn an_agent_creates_lists_changes_and_cancels_a_job_that_flytoctl_sees() {
    let create = json!({
        "schedule": "0 8 * * MON-FRI",
        "tz": "Europe/Berlin",
        "prompt": "Summarise the TODO file in this folder and report what is overdue.",
        "name": "morning-todo",
    });
    let update = json!({"job": "morning-todo", "schedule": "30 9 * * *", "paused": true});
    let (fake, env, _daemon) = setup(vec![
        Reply::tool_call("c1", "schedule_create", create.to_string()),
        Reply::text("Every weekday at 08:00 Berlin time."),
        Reply::tool_call("c2", "schedule_list", "{}"),
        Reply::text("You have one job."),
        Reply::tool_call("c3", "schedule_update", update.to_string()),
        Reply::text("Moved to 09:30 daily, paused."),
        Reply::tool_call("c4", "schedule_cancel", json!({"job": "j1"}).to_string()),
        Reply::text("Cancelled."),
    ]);
    let dir = workdir(&env, "proj");
    let session = new_session(&env, &dir);
    let events = send(&env, &session, "every weekday at 8 summarise my todo file");
    assert!(text_of(&events).contains("Berlin"), "{events:?}");
    assert!(
        SCHEDULE_TOOLS
            .iter()
            .all(|t| offered(&fake.requests()[0]).iter().any(|o| o == t)),
        "{:?}",
        offered(&fake.requests()[0])
    );

    // The job exists with the session's workdir, and the answer names its
    // next fire as flytoctl shows it, in local time and UTC.
    let listed = jobs(&env);
    assert_eq!(listed.len(), 1, "{listed:?}");
    let job = &listed[0];
    assert_eq!(job["id"], "j1");
    assert_eq!(job["name"], "morning-todo");
    assert_eq!(job["tz"], "Europe/Berlin");
    let canonical = std::fs::canonicalize(&dir).unwrap();
    assert_eq!(job["workdir"], canonical.display().to_string().as_str());
    let created = tool_result(&fake, "c1");
    assert!(created.starts_with("created job j1"), "{created}");
    assert!(
        created.contains("`0 8 * * MON-FRI` in Europe/Berlin"),
        "{created}"
    );
    let next = job["next_fire"].as_str().unwrap();
    let next_utc = job["next_fire_utc"].as_str().unwrap();
    assert!(
        created.contains(&format!("next fire: {next} (UTC {next_utc})")),
        "{created}\n{job}"
    );
    assert_eq!(created.matches("\nthen: ").count(), 2, "{created}");

    send(&env, &session, "what is scheduled?");
    let list = tool_result(&fake, "c2");
    assert!(list.contains("job j1 `morning-todo`"), "{list}");
    assert!(list.contains(next_utc), "{list}");

    send(
        &env,
        &session,
        "make it 9:30 every day, and pause it for now",
    );
    let changed = tool_result(&fake, "c3");
    assert!(changed.starts_with("changed job j1"), "{changed}");
    let job = &jobs(&env)[0];
    assert_eq!(job["schedule"], "30 9 * * *");
    assert_eq!(job["state"], "paused");
    assert!(changed.contains("paused"), "{changed}");

    send(&env, &session, "cancel it");
    let cancelled = tool_result(&fake, "c4");
    assert!(cancelled.starts_with("cancelled job j1"), "{cancelled}");
    assert!(jobs(&env).is_empty());
}

#[test]
fn a_bad_schedule_through_the_tool_is_an_error_naming_the_problem_and_the_session_goes_on() {
    let bad = json!({"schedule": "0 25 * * *", "prompt": "check the backups"});
    let zone = json!({"schedule": "@daily", "tz": "Mars/Olympus", "prompt": "check the backups"});
    let (fake, env, _daemon) = setup(vec![
        Reply::tool_calls(vec![
            ("c1", "schedule_create", bad.to_string()),
            ("c2", "schedule_create", zone.to_string()),
        ]),
        Reply::text("That schedule does not work."),
        Reply::text("Still here."),
    ]);
    let dir = workdir(&env, "proj");
    let session = new_session(&env, &dir);
    send(&env, &session, "check the backups at 25 o'clock");
    let hour = tool_result(&fake, "c1");
    assert!(hour.starts_with("no job was created:"), "{hour}");
    assert!(hour.contains("hour"), "{hour}");
    let tz = tool_result(&fake, "c2");
    assert!(tz.contains("Mars/Olympus"), "{tz}");
    assert!(jobs(&env).is_empty());
    let events = send(&env, &session, "are you there?");
    assert_eq!(text_of(&events), "Still here.");
}

#[test]
fn a_run_started_by_a_job_is_not_offered_the_schedule_tools_and_a_call_is_refused() {
    let (fake, env, _daemon) = setup(vec![
        Reply::tool_call(
            "c1",
            "schedule_create",
            json!({"schedule": "every 1m", "prompt": "do it again"}).to_string(),
        ),
        Reply::text("could not schedule"),
    ]);
    let dir = workdir(&env, "proj");
    let out = env.ctl(&[
        "job_create",
        "--schedule",
        "0 0 1 1 *",
        "--prompt",
        "schedule yourself every minute",
        "--workdir",
        &dir.display().to_string(),
        "--json",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = env.ctl(&["job_run", "j1"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let refusal =
        flyto_tests::wait_until("the job run's tool result", flyto_tests::DEADLINE, || {
            fake.requests().iter().find_map(|b| {
                request_messages(b)
                    .iter()
                    .any(|m| m["role"] == "tool" && m["tool_call_id"] == "c1")
                    .then(|| request_tool_result(b, "c1"))
            })
        });
    assert!(
        refusal.contains(
            "this run was started by job j1; a job's run cannot create, change or delete jobs"
        ),
        "{refusal}"
    );
    let first = &fake.requests()[0];
    let tools = offered(first);
    assert!(!tools.is_empty(), "{first}");
    for t in SCHEDULE_TOOLS {
        assert!(!tools.iter().any(|o| o == t), "{t} offered in {tools:?}");
    }
    let listed = jobs(&env);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["id"], "j1");
}

/// The user messages of a request, in order.
fn user_texts(body: &Value) -> Vec<String> {
    request_messages(body)
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_persistent_job_keeps_one_session_across_runs_and_an_isolated_one_does_not() {
    let (fake, env, _daemon) = setup(vec![
        Reply::text("first run done"),
        Reply::text("second run done"),
        Reply::text("isolated one"),
        Reply::text("isolated two"),
    ]);
    let dir = workdir(&env, "proj");
    let wd = dir.display().to_string();
    for (mode, prompt) in [("persistent", "keep notes"), ("isolated", "start fresh")] {
        let out = env.ctl(&[
            "job_create",
            "--schedule",
            "0 0 1 1 *",
            "--prompt",
            prompt,
            "--mode",
            mode,
            "--workdir",
            &wd,
        ]);
        assert_eq!(out.code, 0, "{}", out.stderr);
    }
    let run = |job: &str, n: usize| {
        assert_eq!(env.ctl(&["job_run", job]).code, 0);
        flyto_tests::wait_until("the run's model call", flyto_tests::DEADLINE, || {
            (fake.requests().len() >= n).then_some(())
        });
        // Wait for the plan to finish before the next run (no overlap).
        flyto_tests::wait_until("the run to end", flyto_tests::DEADLINE, || {
            let out = env.ctl(&["job_show", job, "--json"]);
            let v: Value = serde_json::from_str(&out.stdout).ok()?;
            let fires = v["fires"].as_array()?;
            fires
                .last()
                .filter(|f| f["plan_state"] == "succeeded")
                .map(|_| ())
        });
    };
    run("j1", 1);
    run("j1", 2);
    run("j2", 3);
    run("j2", 4);
    let reqs = fake.requests();
    // The persistent job's second run sees the first run's turn.
    let second = user_texts(&reqs[1]);
    assert_eq!(
        second.iter().filter(|t| t.contains("keep notes")).count(),
        2,
        "{second:?}"
    );
    let assistant: Vec<String> = request_messages(&reqs[1])
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect();
    assert!(
        assistant.iter().any(|t| t.contains("first run done")),
        "{assistant:?}"
    );
    // The isolated job starts each run from nothing.
    let fourth = user_texts(&reqs[3]);
    assert_eq!(
        fourth.iter().filter(|t| t.contains("start fresh")).count(),
        1,
        "{fourth:?}"
    );
}

#[test]
fn a_transient_failure_is_retried_and_another_failure_counts() {
    let fake = FakeLlm::start(vec![
        Reply::status(503, None),
        Reply::text("done on retry"),
        Reply::status(400, None),
    ]);
    let env = TestEnv::new(&format!(
        "{}[jobs]\nretry_backoff = [\"1s\", \"1s\"]\n\n{}[models.fake.retry]\nmax_attempts = 1\n",
        flyto_tests::sessions_support::BASE,
        fake.config()
    ));
    let _daemon = flyto_tests::sessions_support::start(&env);
    let dir = workdir(&env, "proj");
    // Far enough ahead that a loaded machine still creates the job before
    // its instant (whole seconds would leave as little as a few ms).
    let soon = || {
        (chrono::Utc::now() + chrono::Duration::seconds(2))
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    };
    let show = |id: &str| -> Value {
        let out = env.ctl(&["job_show", id, "--json"]);
        serde_json::from_str(&out.stdout).unwrap()
    };
    let make = || {
        let out = env.ctl(&[
            "job_create",
            "--schedule",
            &format!("at {}", soon()),
            "--prompt",
            "check the build",
            "--workdir",
            &dir.display().to_string(),
        ]);
        assert_eq!(out.code, 0, "{}", out.stderr);
    };
    make();
    // A provider error: retried after its backoff, and the retry succeeds.
    let v = flyto_tests::wait_until("the retry to succeed", flyto_tests::DEADLINE, || {
        let v = show("j1");
        let fires = v["fires"].as_array()?;
        (fires.len() == 2 && fires[1]["plan_state"] == "succeeded").then_some(v)
    });
    let fires = v["fires"].as_array().unwrap();
    assert_eq!(fires[0]["plan_state"], "failed", "{v}");
    assert!(
        fires[1]["outcome"].as_str().unwrap().ends_with("(retry 1)"),
        "{v}"
    );
    assert_eq!(fires[0]["instant"], fires[1]["instant"]);
    assert_ne!(fires[0]["plan"], fires[1]["plan"]);
    assert_eq!(v["job"]["consecutive_failures"], 0);
    // A request the provider refuses is not transient: no retry, it counts.
    make();
    let v = flyto_tests::wait_until("the failure counted", flyto_tests::DEADLINE, || {
        let v = show("j2");
        (v["job"]["consecutive_failures"] == 1).then_some(v)
    });
    assert_eq!(v["fires"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(fake.requests().len(), 3);
}

#[test]
fn a_plan_submitted_from_a_jobs_run_carries_the_mark_and_cannot_schedule() {
    let (fake, env, _daemon) = setup(vec![
        Reply::tool_call(
            "c9",
            "schedule_create",
            json!({"schedule": "every 1m", "prompt": "again"}).to_string(),
        ),
        Reply::text("refused, as it should be"),
    ]);
    let dir = workdir(&env, "proj");
    // The job's run is a step that submits a sub-plan with an agent step.
    let step = format!(
        "{} submit_plan --prompt 'schedule something' --workdir {} --wait",
        flyto_tests::bin("flytoctl").display(),
        dir.display()
    );
    let plan = env.work.join("nest.toml");
    std::fs::write(
        &plan,
        format!("[[steps]]\nid = \"nest\"\nrun = \"{step}\"\n"),
    )
    .unwrap();
    let out = env.ctl(&[
        "job_create",
        "--schedule",
        "0 0 1 1 *",
        "--plan",
        &plan.display().to_string(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(env.ctl(&["job_run", "j1"]).code, 0);
    let refusal =
        flyto_tests::wait_until("the sub-plan's tool result", flyto_tests::DEADLINE, || {
            fake.requests().iter().find_map(|b| {
                request_messages(b)
                    .iter()
                    .any(|m| m["role"] == "tool" && m["tool_call_id"] == "c9")
                    .then(|| request_tool_result(b, "c9"))
            })
        });
    assert!(
        refusal.contains("this run was started by job j1"),
        "{refusal}"
    );
    assert!(
        offered(&fake.requests()[0])
            .iter()
            .all(|t| !t.starts_with("schedule_"))
    );
    assert_eq!(jobs(&env).len(), 1);
}
