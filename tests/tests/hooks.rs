//! Hooks through the real daemon and a scripted model: a `pre_tool_use`
//! hook that exits 2 stops the call (the model is told why, the command
//! never runs) and lets others through; `post_tool_use` sees each result
//! of a call that ran;
//! `user_prompt` adds context the model receives; a `stop` hook sends the
//! run on once; a failing hook is ignored unless it is `required`; every
//! run shows as a `hook` event and in `hook_list`; a bad `[[hooks]]` entry
//! is a config error that names the fix.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_llm::Reply;
use flyto_tests::flyto_protocol::SessionEvent;
use flyto_tests::sessions_support::{
    new_session, request_messages, request_tool_result, send, setup_with, workdir,
};
use flyto_tests::{DEADLINE, TestEnv, wait_until};
use serde_json::{Value, json};

const HOOKS: &str = r#"
[[hooks]]
name = "no-rm"
event = "pre_tool_use"
matcher = "bash"
command = "grep -q 'rm ' && { echo 'deleting files is not allowed here' >&2; exit 2; } || exit 0"

[[hooks]]
name = "audit"
event = "post_tool_use"
command = "cat >> audit.log; echo >> audit.log"

[[hooks]]
name = "ticket"
event = "user_prompt"
command = "echo '{\"additional_context\": \"ticket FLY-7 is open\"}'"

[[hooks]]
name = "tests-first"
event = "stop"
command = "echo '{\"decision\": \"block\", \"reason\": \"run the tests before you finish\"}'"

[[hooks]]
name = "flaky"
event = "pre_tool_use"
command = "exit 7"
"#;

fn hook_events(events: &[SessionEvent]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::Hook { name, outcome, .. } => Some((name.clone(), outcome.clone())),
            _ => None,
        })
        .collect()
}

fn all_text(body: &Value) -> String {
    request_messages(body)
        .iter()
        .map(|m| m["content"].to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn hooks_block_a_call_see_results_add_context_and_send_a_run_on_once() {
    let (fake, env, _daemon) = setup_with(
        HOOKS,
        vec![
            Reply::tool_call("del", "bash", json!({"command": "rm -f keep.txt"})),
            Reply::tool_call("ok", "bash", json!({"command": "echo made > made.txt"})),
            Reply::text("all done"),
            Reply::text("tests pass, done"),
        ],
    );
    let dir = workdir(&env, "proj");
    std::fs::write(dir.join("keep.txt"), "precious").unwrap();
    let id = new_session(&env, &dir);
    let events = send(&env, &id, "tidy up");

    // The blocked call never ran; the model was told why.
    assert!(dir.join("keep.txt").exists(), "the blocked command ran");
    let requests = fake.requests();
    let refused = request_tool_result(&requests[1], "del");
    assert!(
        refused.contains("blocked by a hook") && refused.contains("deleting files is not allowed"),
        "{refused}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("made.txt")).unwrap(),
        "made\n"
    );
    // The prompt hook's context reached the model with the first request.
    assert!(all_text(&requests[0]).contains("ticket FLY-7 is open"));
    // The stop hook sent the run on once: a fourth request, then the end.
    assert_eq!(fake.request_count(), 4);
    assert!(all_text(&requests[3]).contains("run the tests before you finish"));

    let hooks = hook_events(&events);
    assert!(
        hooks.contains(&(
            "no-rm".into(),
            "blocked: deleting files is not allowed here".into()
        )),
        "{hooks:?}"
    );
    assert!(
        hooks.contains(&("ticket".into(), "context added".into())),
        "{hooks:?}"
    );
    // A failing hook that is not required is reported and ignored.
    assert!(
        hooks
            .iter()
            .any(|(n, o)| n == "flaky" && o.starts_with("failed: exited 7")),
        "{hooks:?}"
    );

    // post_tool_use saw the call that ran (in the background); the
    // blocked one never ran, so it has no result to see.
    let audit = wait_until("the audit hook saw the call", DEADLINE, || {
        std::fs::read_to_string(dir.join("audit.log"))
            .ok()
            .filter(|t| t.ends_with("\n\n"))
    });
    let lines: Vec<Value> = audit
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{audit}");
    assert_eq!(lines[0]["event"], "post_tool_use");
    assert_eq!(lines[0]["session_id"], id.as_str());
    assert_eq!(lines[0]["tool_input"]["command"], "echo made > made.txt");
    assert_eq!(lines[0]["is_error"], false);
    assert!(
        lines[0]["tool_result"]
            .as_str()
            .unwrap()
            .contains("exit code 0")
    );

    // hook_list shows each hook with its last outcomes.
    let out = env.ctl(&["hook_list", "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let listed: Value = serde_json::from_str(&out.stdout).unwrap();
    let no_rm = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "no-rm")
        .unwrap();
    assert_eq!(no_rm["matcher"], "bash");
    assert!(
        no_rm["last"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["outcome"].as_str().unwrap().starts_with("blocked")),
        "{no_rm}"
    );
}

#[test]
fn a_required_hook_that_fails_blocks_and_bad_entries_are_config_errors() {
    let (fake, env, _daemon) = setup_with(
        "[[hooks]]\nname = \"gate\"\nevent = \"pre_tool_use\"\ncommand = \"sleep 5\"\ntimeout = \"300ms\"\nrequired = true\n",
        vec![
            Reply::tool_call("c", "bash", json!({"command": "echo ran > ran.txt"})),
            Reply::text("ok"),
        ],
    );
    let dir = workdir(&env, "p");
    let id = new_session(&env, &dir);
    send(&env, &id, "go");
    assert!(
        !dir.join("ran.txt").exists(),
        "a call ran past a required hook that timed out"
    );
    let result = request_tool_result(&fake.requests()[1], "c");
    assert!(
        result.contains("required hook `gate` timed out"),
        "{result}"
    );

    for (entry, says) in [
        (
            "event = \"on_boot\"\ncommand = \"true\"",
            "event `on_boot` is not known",
        ),
        ("event = \"stop\"\ncommand = \" \"", "`command` is empty"),
        (
            "event = \"user_prompt\"\nmatcher = \"bash\"\ncommand = \"true\"",
            "applies only to pre_tool_use and post_tool_use",
        ),
        (
            "event = \"pre_tool_use\"\nmatcher = \"[\"\ncommand = \"true\"",
            "not a tool name or glob",
        ),
    ] {
        let bad = TestEnv::new(&format!("[[hooks]]\n{entry}\n"));
        let out = bad
            .command(&flyto_tests::bin("flytod"))
            .arg("check-config")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{entry}: {stderr}");
        assert!(stderr.contains(says), "{entry}: {stderr}");
    }
}

/// A hook for `event` that saves its input as `<event>.json` in the
/// session's workdir.
fn saving(event: &str) -> String {
    format!("[[hooks]]\nevent = \"{event}\"\ncommand = \"cat > {event}.json\"\n")
}

#[test]
fn background_hooks_hear_of_approvals_compactions_and_the_sessions_end() {
    let (_fake, env, _daemon) = setup_with(
        &format!(
            "[permissions]\nask = [\"touch\"]\n[sessions]\napproval_timeout = \"1s\"\n{}{}{}{}",
            saving("session_start"),
            saving("notification"),
            saving("pre_compact"),
            saving("session_end")
        ),
        vec![
            Reply::tool_call("t", "bash", json!({"command": "touch asked.txt"})),
            Reply::text("nobody answered"),
            Reply::text("a summary"),
        ],
    );
    let dir = workdir(&env, "w");
    let id = new_session(&env, &dir);
    // Someone who could answer is attached, but does not.
    let _attached = {
        let mut c = env.client();
        c.set_read_timeout(Some(DEADLINE)).unwrap();
        c.send(&flyto_tests::flyto_protocol::Request::SessionAttach {
            id: id.clone(),
            recent: Some(0),
            can_approve: true,
        })
        .unwrap();
        c.recv().unwrap();
        c
    };
    send(&env, &id, "touch it");
    let read = |event: &str| {
        let path = dir.join(format!("{event}.json"));
        wait_until(&format!("the {event} hook ran"), DEADLINE, || {
            let text = std::fs::read_to_string(&path).ok()?;
            serde_json::from_str::<Value>(&text).ok()
        })
    };
    let started = read("session_start");
    assert_eq!(started["event"], "session_start");
    assert_eq!(started["session_id"], id.as_str());
    assert_eq!(
        started["workdir"],
        dir.canonicalize().unwrap().display().to_string()
    );
    let asked = read("notification");
    assert_eq!(asked["command"], "touch asked.txt");
    assert_eq!(asked["session_id"], id.as_str());

    let out = env.ctl(&["session_compact", &id]);
    assert!(out.code == 0 || out.code == 1, "{}", out.stderr);
    let compact = read("pre_compact");
    assert_eq!(compact["event"], "pre_compact");
    assert!(compact["tokens"].as_u64().is_some(), "{compact}");

    let out = env.ctl(&["session_delete", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let ended = read("session_end");
    assert_eq!(ended["session_id"], id.as_str());
}

#[test]
fn a_job_fired_hook_hears_of_each_fire_with_its_plan() {
    let env = TestEnv::new(&saving("job_fired"));
    let _daemon = env.start();
    let plan = env.work.join("tick.toml");
    // The hook runs where the job's plan runs.
    std::fs::write(
        &plan,
        format!(
            "[[steps]]\nid = \"s\"\nrun = \"true\"\nworkdir = \"{}\"\n",
            env.work.display()
        ),
    )
    .unwrap();
    let out = env.ctl(&[
        "job_create",
        "--schedule",
        "@daily",
        "--plan",
        plan.to_str().unwrap(),
        "--name",
        "nightly",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let ran = env.ctl(&["job_run", "nightly", "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let plan_id = serde_json::from_str::<Value>(&ran.stdout).unwrap()["plan"]
        .as_str()
        .unwrap()
        .to_string();
    let path = env.work.join("job_fired.json");
    let fired = wait_until("the job_fired hook ran", DEADLINE, || {
        serde_json::from_str::<Value>(&std::fs::read_to_string(&path).ok()?).ok()
    });
    assert_eq!(fired["event"], "job_fired");
    assert_eq!(fired["plan"], plan_id.as_str());
    assert_eq!(fired["manual"], true);
    assert!(fired["job"].as_str().unwrap().starts_with('j'), "{fired}");
}

on_both_backends!(a_plan_finished_hook_hears_of_each_plan_once_with_its_steps);

fn a_plan_finished_hook_hears_of_each_plan_once_with_its_steps(backend: flyto_tests::Backend) {
    let env = TestEnv::on(
        backend,
        "[[hooks]]\nname = \"done\"\nevent = \"plan_finished\"\ncommand = \"cat >> finished.jsonl; echo >> finished.jsonl\"\n",
    );
    let _daemon = env.start();
    let dir = env.work.clone();
    let spec = |command: &str| {
        let mut plan = TestEnv::run_plan(command);
        plan.steps[0].workdir = Some(dir.display().to_string());
        plan
    };
    let ok = env.submit(spec("true"));
    let bad = env.submit(spec("exit 3"));
    // One line per plan, as it ended, in the plan's workdir.
    let path = dir.join("finished.jsonl");
    let ended = wait_until("both plans' hooks ran", DEADLINE, || {
        let lines: Vec<Value> = std::fs::read_to_string(&path)
            .ok()?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (lines.len() >= 2).then_some(lines)
    });
    let of = |id: &str| {
        let mine: Vec<&Value> = ended.iter().filter(|v| v["plan"] == id).collect();
        assert_eq!(mine.len(), 1, "{ended:#?}");
        mine[0].clone()
    };
    let first = of(&ok);
    assert_eq!(first["event"], "plan_finished");
    assert_eq!(first["state"], "succeeded");
    let second = of(&bad);
    assert_eq!(second["state"], "failed");
    assert_eq!(second["steps"][0]["id"], "main");
    assert_eq!(second["steps"][0]["exit_code"], 3);
    let listed = env.ctl(&["hook_list"]);
    assert!(listed.stdout.contains("done (plan_finished"), "{listed:?}");
    assert!(listed.stdout.contains(" ok ("), "{listed:?}");
}

#[test]
fn a_hook_that_fails_in_the_sandbox_says_why_in_the_events_the_log_and_hook_list() {
    let (_fake, env, daemon) = setup_with(
        concat!(
            // Writes outside the session's workdir: the sandbox refuses.
            "[[hooks]]\nname = \"outside\"\nevent = \"pre_tool_use\"\n",
            "command = \"cat > \\\"$HOME/hook-input.json\\\"\"\n",
            "[[hooks]]\nname = \"missing\"\nevent = \"user_prompt\"\n",
            "command = \"no-such-hook-program\"\n",
        ),
        vec![
            Reply::tool_call("c", "bash", json!({"command": "echo ran > ran.txt"})),
            Reply::text("ok"),
        ],
    );
    let dir = workdir(&env, "p");
    let id = new_session(&env, &dir);
    let events = send(&env, &id, "go");
    assert!(
        !env.work.join("hook-input.json").exists(),
        "the sandbox let a hook write outside the workdir"
    );
    // Not blocking: the call still ran.
    assert!(dir.join("ran.txt").exists());

    let hooks = hook_events(&events);
    let outcome = |name: &str| {
        hooks
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, o)| o.clone())
            .unwrap_or_else(|| panic!("no event for hook {name}: {hooks:?}"))
    };
    let outside = outcome("outside");
    assert!(
        outside.starts_with("failed: exited 1: ") && outside.contains("Permission denied"),
        "{outside}"
    );
    assert!(outside.contains("`[sandbox] writable`"), "{outside}");
    let missing = outcome("missing");
    assert!(missing.starts_with("failed: exited 127: "), "{missing}");
    assert!(missing.contains("check `command`"), "{missing}");

    // The log names the hook, the reason and the fix.
    let log = wait_until("the hook failures in the log", DEADLINE, || {
        let log = daemon.log();
        (log.contains("hook `outside` (pre_tool_use) exited 1")
            && log.contains("hook `missing` (user_prompt) exited 127"))
        .then_some(log)
    });
    assert!(log.contains("`[sandbox] writable`"), "{log}");

    // hook_list keeps the same outcome.
    let out = env.ctl(&["hook_list", "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("Permission denied"), "{}", out.stdout);
}
