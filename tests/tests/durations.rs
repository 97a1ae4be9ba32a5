//! Durations a person writes — in the daemon's config, a plan file, a job
//! request over JSON, a CLI flag — take a bare number (in the key's unit)
//! or a humantime string (`30s`, `5m`, `1h30m`), and bad values are refused
//! naming the key and the accepted forms.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::flyto_protocol::{PlanState, StepState};
use flyto_tests::{TestEnv, bin};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};

const FAST: &str = "[daemon]\nshutdown_grace = 1\n[plans]\nkill_grace = \"200ms\"\n";

fn check_config(env: &TestEnv) -> (i32, String) {
    let out = Command::new(bin("flytod"))
        .arg("check-config")
        .env_remove("NOTIFY_SOCKET")
        .envs(env.vars())
        .stdin(Stdio::null())
        .output()
        .expect("run flytod");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn a_plan_file_takes_timeout_secs_as_a_duration_string() {
    let env = TestEnv::new(FAST);
    let _daemon = env.start();
    let path = env.work.join("plan.toml");
    std::fs::write(
        &path,
        "[[steps]]\nid = \"quick\"\nrun = \"true\"\ntimeout_secs = \"5m\"\n\
         [[steps]]\nid = \"slow\"\nrun = \"sleep 60\"\ntimeout_secs = \"1s\"\n",
    )
    .expect("plan");
    let out = env.ctl(&["submit_plan", path.to_str().expect("utf8")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = out.stdout.trim().to_string();
    let view = env.wait_plan(&id, "finished", |p| {
        p.state != PlanState::Running && p.state != PlanState::Pending
    });
    let step = |id: &str| view.steps.iter().find(|s| s.id == id).expect("step");
    assert_eq!(step("quick").state, StepState::Succeeded, "{view:#?}");
    let slow = step("slow");
    assert_eq!(slow.state, StepState::Failed, "{view:#?}");
    let error = slow.error.as_deref().unwrap_or("");
    assert!(error.contains("timed out after 1s"), "{error}");

    // The same key in JSON, and a bad value in either.
    for (name, text) in [
        (
            "bad.toml",
            "[[steps]]\nid = \"a\"\nrun = \"true\"\ntimeout_secs = \"5 minutes please\"\n",
        ),
        (
            "bad.json",
            r#"{"steps": [{"id": "a", "run": "true", "timeout_secs": "-3s"}]}"#,
        ),
    ] {
        let path = env.work.join(name);
        std::fs::write(&path, text).expect("plan");
        let out = env.ctl(&["submit_plan", path.to_str().expect("utf8")]);
        assert_eq!(out.code, 2, "{name}: {} {}", out.stdout, out.stderr);
        for want in [name, "timeout_secs", "30s, 5m, 2h, 1h30m"] {
            assert!(out.stderr.contains(want), "{want} missing: {}", out.stderr);
        }
    }
    let path = env.work.join("ok.json");
    std::fs::write(
        &path,
        r#"{"steps": [{"id": "a", "run": "true", "timeout_secs": "1m30s"}]}"#,
    )
    .expect("plan");
    let out = env.ctl(&["submit_plan", path.to_str().expect("utf8"), "--wait"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

#[test]
fn a_job_request_over_json_takes_durations_as_strings() {
    let env = TestEnv::new(FAST);
    let _daemon = env.start();
    let mut s = UnixStream::connect(&env.sock).expect("connect");
    let mut ask = |line: &str| {
        s.write_all(line.as_bytes()).expect("write");
        s.write_all(b"\n").expect("write");
        let mut answer = String::new();
        BufReader::new(&s).read_line(&mut answer).expect("read");
        serde_json::from_str::<serde_json::Value>(&answer).expect("json")
    };
    let made = ask(
        r#"{"job_create": {"spec": {"schedule": "every 1h", "prompt": "hi", "workdir": "/tmp", "timeout_secs": "5m", "jitter_secs": "30s"}}}"#,
    );
    assert_eq!(made["job"]["job"]["timeout_secs"], 300, "{made}");

    let bad = ask(
        r#"{"job_create": {"spec": {"schedule": "every 1h", "prompt": "hi", "workdir": "/tmp", "jitter_secs": "soon"}}}"#,
    );
    let message = bad["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("jitter_secs: `soon` is not a duration")
            && message.contains("30s, 5m, 2h, 1h30m"),
        "{bad}"
    );

    // The CLI flags take the same forms.
    let out = env.ctl(&[
        "job_create",
        "--schedule",
        "every 1h",
        "--prompt",
        "hi",
        "--timeout",
        "1h30m",
        "--jitter",
        "2m",
        "--json",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let job: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(job["timeout_secs"], 5400, "{job}");
}

#[test]
fn daemon_config_durations_take_bare_seconds_and_refuse_bad_values_naming_the_key() {
    // A bare number was an error for these keys; it is seconds.
    let env = TestEnv::new(
        "[daemon]\nshutdown_grace = 1\n[plans]\nkill_grace = \"200ms\"\nstep_timeout = 1\n",
    );
    let (code, text) = check_config(&env);
    assert_eq!(code, 0, "{text}");
    let daemon = env.start();
    let id = env.submit(TestEnv::run_plan("sleep 60"));
    let view = env.wait_plan(&id, "failed", |p| p.state == PlanState::Failed);
    let error = view.steps[0].error.as_deref().unwrap_or("");
    assert!(error.contains("timed out after 1s"), "{view:#?}");
    drop(daemon);

    for (config, key) in [
        (
            "[plans]\nstep_timeout = \"5 minutes please\"\n",
            "step_timeout",
        ),
        ("[daemon]\nshutdown_grace = \"-3s\"\n", "shutdown_grace"),
        ("[memory]\nstale_days = \"soon\"\n", "stale_days"),
    ] {
        env.write_config(config);
        let (code, text) = check_config(&env);
        assert_eq!(code, 1, "{config}: {text}");
        for want in [key, "30s, 5m, 2h, 1h30m"] {
            assert!(text.contains(want), "{want} missing for {config}: {text}");
        }
    }
    env.write_config("[memory]\nstale_days = \"2w\"\n[channels]\nsession_gap_hours = \"90m\"\n");
    let (code, text) = check_config(&env);
    assert_eq!(code, 0, "{text}");
}
