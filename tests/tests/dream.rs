//! Dream end to end: consolidation runs of a project's memory through the
//! real flytod against the scripted fake provider (the dreamer), driven by
//! `flytoctl dream_*`, with hand edits, refusals, crashes at every step of
//! a run, and the gates.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_llm::{FakeLlm, Reply};
use flyto_tests::sessions_support::{BASE, new_session, send, start, start_with, workdir};
use flyto_tests::{DEADLINE, TestEnv, wait_until};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The dreamer's prompt starts with this.
const DREAMER: &str = "You consolidate an agent's memory";

fn env_with(fake: &FakeLlm, dream: &str) -> TestEnv {
    TestEnv::new(&format!("{BASE}[dream]\n{dream}\n\n{}", fake.config()))
}

/// The project's memory folder (`memory_path`), created.
fn memory_dir(env: &TestEnv, dir: &Path) -> PathBuf {
    let out = env.ctl(&["memory_path", "--project", &dir.display().to_string()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let p = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("project: "))
        .map(|l| PathBuf::from(l.trim()))
        .unwrap();
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// flytod with `[dream]` set to `dream`, and the memory folder of a
/// project `proj`: (env, daemon, its dir, the dir as text, the folder).
fn project(
    fake: &FakeLlm,
    dream: &str,
) -> (TestEnv, flyto_tests::Daemon, PathBuf, String, PathBuf) {
    let env = env_with(fake, dream);
    let daemon = start(&env);
    let dir = workdir(&env, "proj");
    let folder = memory_dir(&env, &dir);
    let wd = dir.display().to_string();
    (env, daemon, dir, wd, folder)
}

fn entry(name: &str, source: &str, body: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: about {name}\ntype: project\ncreated: 2026-01-01T00:00:00Z\nupdated: 2026-01-01T00:00:00Z\nsource: {source}\nversion: 1\n---\n{body}\n"
    )
}

fn seed(folder: &Path, n: usize) {
    for i in 0..n {
        std::fs::write(
            folder.join(format!("e{i}.md")),
            entry(&format!("e{i}"), "s1", &format!("body {i}")),
        )
        .unwrap();
    }
}

/// Every file under the folder (following the `memory` symlink), but the
/// version's bookkeeping.
fn files(folder: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for d in rd.filter_map(|d| d.ok()) {
            let name = d.file_name().to_string_lossy().into_owned();
            let path = d.path();
            if path.is_dir() {
                walk(&path, &format!("{rel}{name}/"), out);
            } else if name != ".version.json" {
                out.insert(format!("{rel}{name}"), std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(folder, "", &mut out);
    out
}

fn dream(env: &TestEnv, args: &[&str]) -> (i32, Value) {
    let mut all = args.to_vec();
    all.push("--json");
    let out = env.ctl(&all);
    let v = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|_| panic!("not JSON ({}): {} {}", out.code, out.stdout, out.stderr));
    (out.code, v)
}

/// A dreamer that updates `e0` and forgets `e1`, then ends.
fn small_dream() -> Vec<Reply> {
    vec![
        Reply::tool_calls(vec![
            (
                "w",
                "memory_write",
                json!({"name": "e0", "type": "project", "description": "about e0", "body": "consolidated body"}).to_string(),
            ),
            (
                "f",
                "memory_forget",
                json!({"name": "e1", "reason": "no longer holds"}).to_string(),
            ),
        ]),
        Reply::text("Updated e0 and forgot e1."),
    ]
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| {
            x.as_str()
                .map_or_else(|| x["name"].as_str().unwrap().to_string(), str::to_string)
        })
        .collect()
}

#[test]
fn a_dry_run_shows_the_diff_a_real_run_applies_and_undo_restores_every_byte() {
    let fake = FakeLlm::start(small_dream());
    let (env, _daemon, _dir, wd, folder) = project(&fake, "");
    seed(&folder, 10);
    let before = files(&folder);

    let (code, dry) = dream(&env, &["dream_run", "--dry-run", "--project", &wd]);
    assert_eq!(code, 0, "{dry}");
    assert_eq!(dry["outcome"], "dry-run", "{dry}");
    assert_eq!(names(&dry["diff"]["updated"]), ["e0"]);
    assert_eq!(names(&dry["diff"]["tombstoned"]), ["e1"]);
    assert_eq!(files(&folder), before, "a dry run changed the memory");
    let req = &fake.requests()[0];
    assert!(
        req["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with(DREAMER),
        "{req}"
    );
    let tools: Vec<&str> = req["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "memory_read",
            "memory_write",
            "memory_forget",
            "transcript_search"
        ]
    );

    fake.push(small_dream());
    let (code, real) = dream(&env, &["dream_run", "--project", &wd]);
    assert_eq!(code, 0, "{real}");
    assert_eq!(real["outcome"], "applied", "{real}");
    assert_eq!(real["diff"], dry["diff"], "the dry run showed another diff");
    assert!(std::fs::symlink_metadata(&folder).unwrap().is_symlink());
    let after = files(&folder);
    assert!(!after.contains_key("e1.md"));
    assert!(String::from_utf8_lossy(&after["e0.md"]).contains("consolidated body"));
    assert!(after.keys().any(|k| k.starts_with(".trash/e1@")));
    let shown = env.ctl(&["dream_diff", real["id"].as_str().unwrap()]);
    assert!(shown.stdout.contains("updated: e0"), "{}", shown.stdout);
    assert!(
        shown.stdout.contains("tombstoned: e1 (no longer holds)"),
        "{}",
        shown.stdout
    );
    // The content change, as a unified diff per entry.
    for want in [
        "--- a/e0.md\n+++ b/e0.md\n",
        "\n-body 0\n",
        "\n+consolidated body\n",
        "--- a/e1.md\n+++ b/e1.md\n",
        "\n-body 1\n",
    ] {
        assert!(
            shown.stdout.contains(want),
            "{want:?} missing: {}",
            shown.stdout
        );
    }
    assert!(!shown.stdout.contains("a/e2.md"), "{}", shown.stdout);

    let (code, undone) = dream(&env, &["dream_undo", "--project", &wd]);
    assert_eq!(code, 0, "{undone}");
    assert_eq!(undone["kind"], "undo");
    assert_eq!(files(&folder), before, "undo did not restore every byte");
    // Undoing the same run again says so and changes nothing.
    for args in [
        vec!["dream_undo", "--project", &wd],
        vec!["dream_undo", "--project", &wd, real["id"].as_str().unwrap()],
    ] {
        let again = env.ctl(&args);
        assert_eq!(again.code, 4, "{args:?}: {}", again.stdout);
        let run = real["id"].as_str().unwrap();
        assert!(
            again
                .stderr
                .contains(&format!("dream run {run} was already undone")),
            "{args:?}: {}",
            again.stderr
        );
        assert_eq!(files(&folder), before, "a second undo changed the memory");
    }
    // And memory still works on the restored version.
    let out = env.ctl(&["memory_show", "e1", "--project", &wd]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

#[test]
fn a_dreamer_that_removes_23_of_30_entries_is_rejected_whole() {
    let calls: Vec<(String, String, String)> = (0..23)
        .map(|i| {
            (
                format!("f{i}"),
                "memory_forget".to_string(),
                json!({"name": format!("e{i}"), "reason": "noise"}).to_string(),
            )
        })
        .collect();
    let fake = FakeLlm::start(vec![
        Reply::tool_calls(
            calls
                .iter()
                .map(|(a, b, c)| (a.as_str(), b.as_str(), c.clone()))
                .collect(),
        ),
        Reply::text("Pruned."),
    ]);
    let (env, _daemon, _dir, wd, folder) = project(&fake, "");
    seed(&folder, 30);
    let before = files(&folder);
    let (code, run) = dream(&env, &["dream_run", "--project", &wd]);
    assert_ne!(code, 0, "{run}");
    let outcome = run["outcome"].as_str().unwrap();
    assert!(outcome.starts_with("rejected: loss cap"), "{outcome}");
    assert!(outcome.contains("23 of 30"), "{outcome}");
    assert_eq!(files(&folder), before, "a rejected run changed the memory");
    // The attempt stays readable.
    let (_, diff) = dream(&env, &["dream_diff", run["id"].as_str().unwrap()]);
    assert_eq!(diff["diff"]["tombstoned"].as_array().unwrap().len(), 23);
    let log = env.ctl(&["dream_log", "--project", &wd]);
    assert!(log.stdout.contains("rejected: loss cap"), "{}", log.stdout);
}

#[test]
fn a_user_entry_changes_only_for_a_newer_statement_the_transcript_holds() {
    let rewrite = |with: Option<Value>| {
        let mut args = json!({"name": "indent", "type": "project", "description": "about indent", "body": "use spaces"});
        if let Some(s) = with {
            args["user_statement"] = s;
        }
        vec![
            Reply::tool_call("w", "memory_write", args.to_string()),
            Reply::text("Rewrote indent."),
        ]
    };
    let fake = FakeLlm::start(rewrite(None));
    let (env, _daemon, dir, wd, folder) = project(&fake, "");
    seed(&folder, 5);
    std::fs::write(
        folder.join("indent.md"),
        entry("indent", "user", "use tabs"),
    )
    .unwrap();
    let before = files(&folder);
    let (code, run) = dream(&env, &["dream_run", "--project", &wd]);
    assert_ne!(code, 0);
    assert!(
        run["outcome"]
            .as_str()
            .unwrap()
            .starts_with("rejected: user entry: `indent`"),
        "{run}"
    );
    assert_eq!(files(&folder), before);

    // The user says otherwise in a session; cited, the change goes in.
    fake.push(vec![Reply::text("noted")]);
    let id = new_session(&env, &dir);
    send(&env, &id, "From now on we indent with spaces, not tabs.");
    fake.push(rewrite(Some(
        json!({"session": id, "quote": "we indent with spaces"}),
    )));
    let (code, run) = dream(&env, &["dream_run", "--project", &wd]);
    assert_eq!(code, 0, "{run}");
    assert_eq!(run["citations"][0]["entry"], "indent", "{run}");
    let now = std::fs::read_to_string(folder.join("indent.md")).unwrap();
    assert!(
        now.contains("use spaces") && now.contains("source: user"),
        "{now}"
    );
}

#[test]
fn a_hand_edit_during_a_run_is_kept_and_a_clash_applies_nothing() {
    // The dreamer's last reply waits at the fake while the test edits.
    let last = |gate: &str| Reply::text("Consolidated the memory.").held(gate);
    let write_e0 = || {
        Reply::tool_call(
            "w",
            "memory_write",
            json!({"name": "e0", "type": "project", "description": "about e0", "body": "merged"})
                .to_string(),
        )
    };
    let fake = FakeLlm::start(vec![write_e0(), last("first")]);
    let (env, _daemon, _dir, wd, folder) = project(&fake, "");
    seed(&folder, 10);
    let run_in_background = || {
        env.command(&flyto_tests::bin("flytoctl"))
            .args(["dream_run", "--json", "--project", wd.as_str()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let child = run_in_background();
    // The run waits for its last reply: edit e5 by hand now.
    wait_until("the dreamer's second call", DEADLINE, || {
        (fake.requests().len() >= 2).then_some(())
    });
    let edited = entry("e5", "s1", "edited by hand during the run");
    std::fs::write(folder.join("e5.md"), &edited).unwrap();
    fake.release("first");
    let out = child.wait_with_output().unwrap();
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["outcome"], "applied", "{run}");
    assert_eq!(
        std::fs::read_to_string(folder.join("e5.md")).unwrap(),
        edited
    );
    assert!(
        std::fs::read_to_string(folder.join("e0.md"))
            .unwrap()
            .contains("merged")
    );
    assert_eq!(names(&run["carried"]), ["e5.md"], "{run}");

    // Now the person edits the very entry the run rewrites: nothing applied.
    fake.push(vec![
        Reply::tool_call(
            "w2",
            "memory_write",
            json!({"name": "e2", "type": "project", "description": "about e2", "body": "dreamed"})
                .to_string(),
        ),
        last("second"),
    ]);
    let seen = fake.requests().len();
    let child = run_in_background();
    wait_until("the dreamer's second call", DEADLINE, || {
        (fake.requests().len() >= seen + 2).then_some(())
    });
    let mine = entry("e2", "s1", "the person's version");
    std::fs::write(folder.join("e2.md"), &mine).unwrap();
    fake.release("second");
    let out = child.wait_with_output().unwrap();
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    let outcome = run["outcome"].as_str().unwrap();
    assert!(
        outcome.starts_with("rejected") && outcome.contains("e2.md"),
        "{outcome}"
    );
    assert_eq!(std::fs::read_to_string(folder.join("e2.md")).unwrap(), mine);
}

#[test]
fn fifty_concurrent_runs_of_one_project_start_exactly_one() {
    // The one run that starts waits at the fake until the others are done.
    let fake = FakeLlm::start(vec![Reply::text("Nothing to change.").held("go")]);
    let (env, _daemon, _dir, wd, folder) = project(&fake, "");
    seed(&folder, 3);
    let done = std::sync::atomic::AtomicUsize::new(0);
    let outs: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..50)
            .map(|_| {
                s.spawn(|| {
                    let out = env.ctl(&["dream_run", "--json", "--project", &wd]);
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    out
                })
            })
            .collect();
        wait_until("49 runs refused", DEADLINE, || {
            (done.load(std::sync::atomic::Ordering::SeqCst) >= 49).then_some(())
        });
        fake.release("go");
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ran: Vec<_> = outs
        .iter()
        .filter(|o| o.stdout.contains("\"outcome\""))
        .collect();
    assert_eq!(
        ran.len(),
        1,
        "{:?}",
        outs.iter().map(|o| &o.stderr).collect::<Vec<_>>()
    );
    assert!(ran[0].stdout.contains("\"applied\""), "{}", ran[0].stdout);
    let refused = outs
        .iter()
        .filter(|o| {
            o.stderr
                .contains("a dream is already running for this project")
        })
        .count();
    assert_eq!(refused, 49);
    assert_eq!(fake.requests().len(), 1);
}

/// Runs in the log of the project, as (id, outcome).
fn outcomes(env: &TestEnv, wd: &str) -> Vec<(String, String)> {
    let (_, log) = dream(env, &["dream_log", "--project", wd]);
    log.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_string(),
                r["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_crash_at_any_step_of_a_run_leaves_the_old_or_the_new_memory_whole() {
    for step in [
        "dream-before-staging",
        "dream-mid-staging",
        "dream-after-validation",
        "dream-mid-install",
        "dream-before-switch",
        "dream-after-switch",
    ] {
        let fake = FakeLlm::start(small_dream());
        let env = env_with(&fake, "");
        let dir = workdir(&env, "proj");
        let wd = dir.display().to_string();
        let mut daemon = start_with(&env, &[("FLYTO_TEST_CRASH_AT", step)]);
        let folder = memory_dir(&env, &dir);
        seed(&folder, 10);
        let old = files(&folder);
        let out = env.ctl(&["dream_run", "--project", &wd]);
        assert_ne!(out.code, 0, "{step}: the run survived its failpoint");
        daemon.wait_exit(DEADLINE);
        let now = files(&folder);
        let new_shape = |f: &BTreeMap<String, Vec<u8>>| {
            !f.contains_key("e1.md")
                && String::from_utf8_lossy(&f["e0.md"]).contains("consolidated body")
                && f.keys().any(|k| k.starts_with(".trash/e1@"))
        };
        let applied = new_shape(&now);
        assert!(
            now == old || applied,
            "{step}: the live memory is a mix: {:?}",
            now.keys().collect::<Vec<_>>()
        );
        assert_eq!(applied, step == "dream-after-switch", "{step}");

        let _daemon = start(&env);
        let runs = outcomes(&env, &wd);
        assert_eq!(runs.len(), 1, "{step}: {runs:?}");
        if applied {
            assert_eq!(runs[0].1, "applied", "{step}");
        } else {
            assert!(runs[0].1.starts_with("interrupted"), "{step}: {runs:?}");
            // Eligible again: the next run applies it, once.
            fake.push(small_dream());
            let (code, run) = dream(&env, &["dream_run", "--project", &wd]);
            assert_eq!(code, 0, "{step}: {run}");
            assert!(new_shape(&files(&folder)), "{step}");
        }
        let applied_runs = outcomes(&env, &wd)
            .iter()
            .filter(|(_, o)| o == "applied")
            .count();
        assert_eq!(applied_runs, 1, "{step}");
        let trash = files(&folder)
            .keys()
            .filter(|k| k.starts_with(".trash/e1@") && k.ends_with(".md"))
            .count();
        assert_eq!(trash, 1, "{step}: e1 was forgotten twice");
    }
}

#[test]
fn the_gates_hold_a_run_until_enough_sessions_and_time_and_a_failure_backs_off() {
    let fake = FakeLlm::start(vec![]);
    let env = env_with(&fake, "check_every = \"100ms\"\n");
    let daemon = start(&env);
    let dir = workdir(&env, "proj");
    let wd = dir.display().to_string();
    let folder = memory_dir(&env, &dir);
    seed(&folder, 5);
    let talk = |n: usize| {
        for _ in 0..n {
            fake.push(vec![Reply::text("ok")]);
            let id = new_session(&env, &dir);
            send(&env, &id, "hello");
        }
    };
    let status = || {
        let (_, s) = dream(&env, &["dream_status", "--project", &wd]);
        s[0].clone()
    };
    let wait_check = |what: &str, pred: &dyn Fn(&Value) -> bool| {
        wait_until(what, DEADLINE, || {
            let s = status();
            pred(&s).then_some(s)
        })
    };
    talk(4);
    let s = wait_check("a check that stops at the sessions gate", &|s| {
        s["last_check"]
            .to_string()
            .contains("4 sessions since (at least 5)")
    });
    assert_eq!(s["sessions_since"], 4);
    assert!(outcomes(&env, &wd).is_empty());
    // The change of gate is on disk, for after a restart.
    let checks =
        std::fs::read_to_string(folder.parent().unwrap().join("dream/checks.json")).unwrap();
    assert!(checks.contains("TooFewSessions"), "{checks}");

    // The fifth session opens the gate: exactly one run.
    let dreams_before = fake.requests().len();
    fake.push(small_dream());
    talk(1);
    wait_until("the automatic run", DEADLINE, || {
        outcomes(&env, &wd)
            .iter()
            .any(|(_, o)| o == "applied")
            .then_some(())
    });
    assert_eq!(fake.requests().len(), dreams_before + 1 + 2);
    // More sessions at once: the time gate holds (0 h of 24).
    talk(5);
    wait_check("a check that stops at the time gate", &|s| {
        s["last_check"]
            .to_string()
            .contains("h since the last success (at least 24)")
    });
    assert_eq!(outcomes(&env, &wd).len(), 1);
    let last_success = status()["last_success_ms"].clone();
    assert!(last_success.is_u64());

    // A day later a run starts again; this one fails and backs off.
    drop(daemon);
    fake.push(vec![Reply::status(400, None)]);
    let offset = (25 * 3_600_000).to_string();
    let _daemon = start_with(&env, &[("FLYTO_CLOCK_OFFSET_MS", &offset)]);
    // The checks from before the restart are still there (a round adds
    // one each 100 ms; 8 are kept).
    assert!(
        status()["checks"]
            .to_string()
            .contains("h since the last success")
    );
    wait_until("the failed run", DEADLINE, || {
        outcomes(&env, &wd)
            .iter()
            .any(|(_, o)| o.starts_with("failed"))
            .then_some(())
    });
    // The checks from before the restart are still there.
    assert!(
        status()["checks"]
            .to_string()
            .contains("h since the last success")
    );
    let s = wait_check("a check that stops at the backoff", &|s| {
        s["last_check"]
            .to_string()
            .contains("backing off after a failed run")
    });
    assert_eq!(
        s["last_success_ms"], last_success,
        "a failure moved the last success"
    );
    let next = s["next_eligible_ms"].as_u64().unwrap();
    let last = last_success.as_u64().unwrap();
    assert!(next >= last + 25 * 3_600_000 + 3_600_000 - 60_000, "{s}");
    assert_eq!(outcomes(&env, &wd).len(), 2);
}

#[test]
fn bad_dream_input_gets_a_clear_error_and_flytod_keeps_serving() {
    for (bad, says) in [
        (
            "max_removed = \"lots\"",
            "max_removed = \"lots\" is not a count or a share",
        ),
        ("keep = 0", "keep must be at least 1"),
        ("check_every = \"0s\"", "check_every must be more than 0"),
        (
            "model = \"gpt-9\"",
            "[dream] model = \"gpt-9\" is neither a role",
        ),
    ] {
        let env = TestEnv::new(&format!("[dream]\n{bad}\n"));
        let log = env
            .try_start(&[])
            .err()
            .unwrap_or_else(|| panic!("{bad} was accepted"));
        assert!(log.contains(says), "{bad}: {log}");
    }
    let fake = FakeLlm::start(vec![]);
    let (env, _daemon, _dir, wd, _folder) = project(&fake, "");
    let out = env.ctl(&["dream_diff", "d999"]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr
            .contains("no dream run `d999`: `flytoctl dream_log` lists the runs"),
        "{}",
        out.stderr
    );
    let out = env.ctl(&["dream_run", "--project", "/nonexistent/flyto-project"]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("/nonexistent/flyto-project"),
        "{}",
        out.stderr
    );
    let out = env.ctl(&["dream_undo", "--project", &wd]);
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("nothing to undo"), "{}", out.stderr);
    assert_eq!(env.ctl(&["ping"]).code, 0);
    assert!(fake.requests().is_empty());

    // Switched off, a manual run is refused too.
    let env = TestEnv::new(&format!(
        "{BASE}[dream]\nenabled = false\n\n{}",
        fake.config()
    ));
    let _daemon = start(&env);
    let dir = workdir(&env, "proj");
    let out = env.ctl(&["dream_run", "--project", &dir.display().to_string()]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("[dream] enabled = false"),
        "{}",
        out.stderr
    );
    assert!(fake.requests().is_empty());
}

#[test]
fn a_dream_reads_a_hand_written_entry_and_leaves_its_bytes_alone() {
    let hand = "---\nname: tabs\ndescription: the user prefers tabs\ntype: feedback\n---\n\nIndent with tabs.\n";
    let fake = FakeLlm::start(vec![
        Reply::tool_calls(vec![
            (
                "r",
                "memory_read",
                json!({"name": "tabs"}).to_string(),
            ),
            (
                "w",
                "memory_write",
                json!({"name": "e0", "type": "project", "description": "about e0", "body": "consolidated body"}).to_string(),
            ),
        ]),
        Reply::text("Updated e0."),
    ]);
    let (env, _daemon, _dir, wd, folder) = project(&fake, "");
    seed(&folder, 3);
    std::fs::write(folder.join("tabs.md"), hand).unwrap();

    let (code, run) = dream(&env, &["dream_run", "--project", &wd]);
    assert_eq!(code, 0, "{run}");
    assert_eq!(run["outcome"], "applied", "{run}");
    assert_eq!(names(&run["diff"]["updated"]), ["e0"], "{run}");
    // The dreamer could read it ...
    let read = fake
        .requests()
        .iter()
        .flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default())
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "r")
        .and_then(|m| m["content"].as_str().map(str::to_string))
        .unwrap();
    assert!(read.contains("Indent with tabs."), "{read}");
    // ... and the new memory holds the person's file as they wrote it.
    assert_eq!(files(&folder)["tabs.md"], hand.as_bytes());
    let listed = env.ctl(&["memory_list", "--project", &wd]);
    assert!(
        listed.stdout.contains("tabs") && !listed.stdout.contains("unreadable"),
        "{}",
        listed.stdout
    );
}
