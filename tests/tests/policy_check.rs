//! `flytoctl policy_check`: the verdict, rule and parsed commands through
//! the real binaries, `--json`, the live `[permissions]` (a reload), the
//! plan socket's refusal, and agreement with what the `bash` tool does on
//! every command of the shell tests.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_llm::Reply;
use flyto_tests::policy_cases::SHELL_COMMANDS;
use flyto_tests::sessions_support::{done, new_session, request_tool_result, send, setup, workdir};
use flyto_tests::{DEADLINE, TestEnv, bin, wait_until};
use serde_json::{Value, json};

/// `policy_check --json` in `dir`: the parsed object.
fn check_json(env: &TestEnv, dir: &std::path::Path, command: &str) -> Value {
    let dir = dir.display().to_string();
    let out = env.ctl(&["policy_check", "--json", "--workdir", &dir, "--", command]);
    assert_eq!(out.code, 0, "{command:?}: {out:?}");
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{command:?}: not JSON ({e}): {}", out.stdout))
}

#[test]
fn policy_check_prints_the_verdict_the_rule_and_the_commands() {
    let env = TestEnv::new("");
    let _daemon = env.start();
    let dir = workdir(&env, "ws");

    let out = env.ctl(&["policy_check", "--", "rm -rf /"]);
    assert_eq!(out.code, 0, "a deny is an answer, not a failure: {out:?}");
    assert!(out.stdout.contains("verdict:  deny"), "{}", out.stdout);
    assert!(
        out.stdout.contains("rule:     deny:recursive-delete"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("the whole file system"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("allow_builtin"), "{}", out.stdout);

    // The kebab alias; a command hidden two levels down is listed.
    let out = env.ctl(&[
        "policy-check",
        "--workdir",
        &dir.display().to_string(),
        "--",
        "echo $(sudo bash -c 'ls; reboot')",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    for line in [
        "verdict:  deny",
        "rule:     deny:shutdown",
        "\n  ls\n",
        "\n  reboot\n",
    ] {
        assert!(
            out.stdout.contains(line),
            "missing {line:?}: {}",
            out.stdout
        );
    }

    let v = check_json(&env, &dir, "git status && rm -rf ./build");
    assert_eq!(v["verdict"], "allow", "{v:#}");
    assert_eq!(v["rule"], Value::Null, "{v:#}");
    assert!(v["reason"].is_string(), "{v:#}");
    assert_eq!(
        v["commands"],
        json!(["git status", "rm -rf ./build"]),
        "{v:#}"
    );
    assert_eq!(v["message"], Value::Null, "{v:#}");

    let v = check_json(
        &env,
        &dir,
        "python3 -c \"import os; os.system('rm -rf ~')\"",
    );
    assert_eq!(v["verdict"], "deny", "{v:#}");
    assert_eq!(v["rule"], "deny:recursive-delete", "{v:#}");
    assert_eq!(v["command"], "rm -rf ~", "{v:#}");

    let v = check_json(&env, &dir, "git push --force");
    assert_eq!(
        (&v["verdict"], &v["rule"]),
        (&json!("ask"), &json!("ask:force-push"))
    );

    // Usage errors exit 2 and say what is wrong.
    let out = env.ctl(&["policy_check", "--workdir", "/no/such/dir", "--", "ls"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("/no/such/dir is not a directory"),
        "{out:?}"
    );
    let out = env.ctl(&["policy_check"]);
    assert_eq!(out.code, 2, "{out:?}");
    let out = env.ctl(&["policy_check", "--", " "]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("the command is empty"), "{out:?}");
}

#[test]
fn policy_check_follows_the_live_permissions_config() {
    let env = TestEnv::new("");
    let mut daemon = env.start();
    let dir = workdir(&env, "ws");
    let v = check_json(&env, &dir, "git push origin main");
    assert_eq!(v["verdict"], "allow", "{v:#}");

    env.write_config("[permissions]\ndeny = [\"git push\"]\ndeny_paths = [\"/etc/**\"]\n");
    daemon.signal(libc::SIGHUP);
    let v = wait_until("policy_check to see the new rules", DEADLINE, || {
        let v = check_json(&env, &dir, "git push origin main");
        (v["verdict"] == "deny").then_some(v)
    });
    assert_eq!(v["rule"], "deny \"git push\"", "{v:#}");
    let message = v["message"].as_str().unwrap_or_default();
    assert!(message.contains("remove or narrow"), "{message}");

    let v = check_json(&env, &dir, "cat /etc/hostname");
    assert_eq!(v["verdict"], "deny", "{v:#}");
    assert_eq!(v["rule"], "deny_paths \"/etc/**\"", "{v:#}");

    // An invalid reload keeps the running rules.
    env.write_config("[permissions]\ndeny_paths = [\"/etc/[abc\"]\n");
    daemon.signal(libc::SIGHUP);
    wait_until("the reload to fail", DEADLINE, || {
        daemon.log().contains("config reload failed").then_some(())
    });
    assert_eq!(check_json(&env, &dir, "git push")["verdict"], "deny");
    assert!(daemon.wait_notify("reload failed", DEADLINE).is_ok());
}

#[test]
fn a_plan_socket_does_not_serve_policy_check() {
    let env = TestEnv::new("");
    let _daemon = env.start();
    let ctl = bin("flytoctl").display().to_string();
    let id = env.submit(TestEnv::run_plan(&format!(
        "{ctl} policy_check -- ls 2>&1; echo rc=$?"
    )));
    let view = env.wait_plan(&id, "finished", |p| p.state.is_terminal());
    let out = &view.steps[0].stdout_tail;
    assert!(out.contains("rc=4"), "{out}");
    assert!(out.contains("policy_check is not served here"), "{out}");
}

/// What the tool did with a command, from the tool result the model got.
fn tool_verdict(content: &str) -> &'static str {
    if !content.starts_with("Not run:") {
        "allow"
    } else if content.contains("needs the user's approval")
        || content.contains("could not be parsed")
    {
        "ask"
    } else {
        "deny"
    }
}

#[test]
fn policy_check_agrees_with_the_tool_on_every_command_of_the_shell_tests() {
    let calls: Vec<(String, &str, String)> = SHELL_COMMANDS
        .iter()
        .enumerate()
        .map(|(i, (command, _))| {
            (
                format!("call_{i}"),
                "bash",
                json!({ "command": command }).to_string(),
            )
        })
        .collect();
    let (fake, env, _daemon) = setup(vec![
        Reply::tool_calls(
            calls
                .iter()
                .map(|(id, name, args)| (id.as_str(), *name, args.clone()))
                .collect(),
        ),
        Reply::text("done"),
    ]);
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);
    // Ask the CLI first: nothing it would refuse runs if the tool differed.
    let verdicts: Vec<Value> = SHELL_COMMANDS
        .iter()
        .map(|(command, _)| check_json(&env, &dir, command))
        .collect();
    let mut wrong = Vec::new();
    for ((command, want), v) in SHELL_COMMANDS.iter().zip(&verdicts) {
        if v["verdict"] != *want {
            wrong.push(format!(
                "{command:?}: policy_check says {v}, the list says {want}"
            ));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));

    let events = send(&env, &id, "run these");
    assert!(done(&events), "{events:#?}");
    let requests = fake.requests();
    assert_eq!(
        requests.len(),
        2,
        "one round of tool calls, then the answer"
    );
    let mut disagree = Vec::new();
    for (((call, _, _), (command, _)), v) in calls.iter().zip(SHELL_COMMANDS).zip(&verdicts) {
        let content = request_tool_result(&requests[1], call);
        let did = tool_verdict(&content);
        if v["verdict"] != did {
            disagree.push(format!(
                "{command:?}: policy_check {} but the tool {did}: {content}",
                v["verdict"]
            ));
        } else if let Some(message) = v["message"].as_str()
            && !content.contains(message)
        {
            disagree.push(format!(
                "{command:?}: the tool said {content:?}, policy_check {message:?}"
            ));
        }
    }
    assert!(disagree.is_empty(), "\n{}", disagree.join("\n"));
    // The refused commands did not run; the allowed ones did.
    assert!(!dir.join("pushed-marker").exists());
    assert!(dir.join("ok-marker").exists());
    assert!(dir.join("out.bin").exists());
    assert!(env.work.exists(), "the home directory is intact");
    fake.assert_protocol_ok();
}
