//! flytoctl as a person at a terminal meets it, through the real binaries:
//! escape sequences in step output never reach a terminal (but do reach
//! pipes), live output of running steps and `--log --follow`, `--wait`
//! printing short steps whole, `plan_list` counts, Ctrl-C on `--wait`,
//! completions and kebab-case aliases, and `chat` with line editing and
//! local slash commands. A terminal is a pty from util-linux `script`.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_llm::Reply;
use flyto_tests::flyto_protocol::{PlanState, StepState};
use flyto_tests::sessions_support;
use flyto_tests::{DEADLINE, TestEnv, bin, wait_until};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};

/// An OSC sequence that retitles a terminal.
const RETITLE: &str = "\x1b]0;pwned\x07";

fn quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// `flytoctl args` on a pty (util-linux `script`), its input from a pipe.
fn spawn_in_pty(env: &TestEnv, args: &[&str], extra: &[(&str, &str)]) -> Child {
    // `exec`: no shell left between the pty and flytoctl (see chat_in_pty).
    let mut line = format!("exec {}", quote(bin("flytoctl").to_str().unwrap()));
    for arg in args {
        line.push(' ');
        line.push_str(&quote(arg));
    }
    Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env_remove("FLYTO_PLAN_SOCK")
        .envs(env.vars())
        .envs(extra.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run util-linux `script` (package bsdutils) to get a pty")
}

/// What a person sees of `flytoctl args` on a terminal (stdout and stderr
/// both), and its exit code.
fn in_pty(env: &TestEnv, args: &[&str]) -> (i32, String) {
    let child = spawn_in_pty(env, args, &[]);
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n"),
    )
}

fn assert_no_escapes(what: &str, text: &str) {
    assert!(
        !text.contains('\x1b') && !text.contains('\x07'),
        "{what} reached the terminal with escape sequences: {text:?}"
    );
}

#[test]
fn escape_sequences_reach_pipes_but_never_a_terminal() {
    let env = TestEnv::new("");
    let _daemon = env.start();
    let cmd = format!(
        "printf 'before{}after\\n'; printf 'err{}or\\n' >&2",
        "\\033]0;pwned\\007", "\\033[2J"
    );
    let out = env.ctl(&["submit_plan", "--run", &cmd, "--name", "n", "--wait"]);
    assert_eq!(out.code, 0, "{out:?}");
    // A script gets the bytes the step printed.
    assert_eq!(out.stdout, format!("before{RETITLE}after\n"));
    assert_eq!(out.stderr, "err\x1b[2Jor\n");
    let id = "p1";

    let (code, seen) = in_pty(&env, &["plan_status", id]);
    assert_eq!(code, 0, "{seen}");
    assert_no_escapes("plan_status", &seen);
    assert!(seen.contains("beforeafter"), "{seen}");
    assert!(seen.contains("error"), "{seen}");

    let (_, seen) = in_pty(&env, &["plan_status", id, "--log", "main"]);
    assert_no_escapes("plan_status --log", &seen);
    assert!(seen.contains("beforeafter\n"), "{seen}");

    let (_, seen) = in_pty(&env, &["plan_list"]);
    assert_no_escapes("plan_list", &seen);
    assert!(seen.contains(" n\n"), "{seen}");

    let (code, seen) = in_pty(&env, &["submit_plan", "--run", &cmd, "--wait"]);
    assert_eq!(code, 0, "{seen}");
    assert_no_escapes("submit_plan --wait", &seen);
    assert!(seen.contains("beforeafter\n"), "{seen}");

    let out = env.ctl(&["plan_status", id]);
    assert!(
        out.stdout.contains(&format!("before{RETITLE}after")),
        "{out:?}"
    );
}

/// A spawned flytoctl whose stdout is collected as it comes.
struct Running {
    child: Child,
    out: Arc<Mutex<Vec<u8>>>,
}

impl Running {
    fn spawn(mut cmd: Command) -> Running {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    return;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Running { child, out }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).replace("\r\n", "\n")
    }

    /// Waits until the output from byte `from` on contains `needle`;
    /// returns where it ends.
    fn wait_for(&self, from: usize, needle: &str) -> usize {
        wait_until(&format!("{needle:?} in the output"), DEADLINE, || {
            let text = self.text();
            text.get(from..)?
                .find(needle)
                .map(|i| from + i + needle.len())
        })
    }

    fn stdin(&mut self) -> &mut ChildStdin {
        self.child.stdin.as_mut().unwrap()
    }

    fn wait(mut self) -> (std::process::ExitStatus, String, String) {
        drop(self.child.stdin.take());
        let status = wait_until("flytoctl to exit", DEADLINE, || {
            self.child.try_wait().ok().flatten()
        });
        let mut err = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        // The reader thread has seen the end once the process is gone.
        let out = wait_until("the rest of the output", DEADLINE, || {
            Arc::strong_count(&self.out).eq(&1).then(|| self.text())
        });
        (status, out, err)
    }
}

fn ctl_command(env: &TestEnv, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin("flytoctl"));
    cmd.args(args)
        .env_remove("FLYTO_PLAN_SOCK")
        .envs(env.vars());
    cmd
}

#[test]
fn running_steps_show_their_output_and_follow_streams_it() {
    let env = TestEnv::new("");
    let _daemon = env.start();
    let go = env.work.join("go");
    let cmd = format!(
        "echo first; while [ ! -e {} ]; do sleep 0.02; done; echo second",
        go.display()
    );
    let out = env.ctl(&["submit_plan", "--run", &cmd]);
    let id = out.stdout.trim().to_string();
    // Its output so far, while it runs, with the command that follows it.
    let status = wait_until("plan_status to show the output so far", DEADLINE, || {
        let out = env.ctl(&["plan_status", &id]);
        out.stdout.contains("    first\n").then_some(out.stdout)
    });
    assert!(status.contains("main output so far:"), "{status}");
    assert!(
        status.contains(&format!(
            "`flytoctl plan_status {id} --log main --follow` follows it"
        )),
        "{status}"
    );

    let follow = Running::spawn(ctl_command(
        &env,
        &["plan_status", &id, "--log", "main", "--follow"],
    ));
    follow.wait_for(0, "first\n");
    std::fs::write(&go, "").unwrap();
    let (status, out, err) = follow.wait();
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!(out, "first\nsecond\n");

    // A failing step: --follow exits like --watch.
    let out = env.ctl(&["submit_plan", "--run", "echo bye; exit 3"]);
    let id = out.stdout.trim();
    let out = env.ctl(&["plan_status", id, "--log", "main", "--follow"]);
    assert_eq!((out.code, out.stdout.as_str()), (1, "bye\n"), "{out:?}");
}

#[test]
fn wait_prints_short_steps_whole_and_says_when_it_shows_a_tail() {
    let env = TestEnv::new("[plans]\noutput_tail_bytes = 100\n");
    let _daemon = env.start();
    let whole: String = (1..=500).map(|i| format!("{i}\n")).collect();
    let out = env.ctl(&["submit_plan", "--run", "seq 1 500", "--wait"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, whole);
    assert_eq!(out.stderr, "");

    // Both streams long: their tails, and how to get the rest.
    let out = env.ctl(&["submit_plan", "--run", "seq 1 500; seq 1 500 >&2", "--wait"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.ends_with("499\n500\n") && out.stdout.len() <= 100,
        "{out:?}"
    );
    assert!(
        out.stderr.contains(
            "above is only its end: `flytoctl plan_status p2 --log main` prints all of it"
        ),
        "{out:?}"
    );
    let log = env.ctl(&["plan_status", "p2", "--log", "main"]);
    assert_eq!(log.stdout.len(), 2 * whole.len());
}

#[test]
fn wait_shows_the_end_of_a_step_whose_log_was_capped_and_says_so() {
    let env = TestEnv::new(
        "[plans]
output_tail_bytes = 100
log_max_bytes = 1000
",
    );
    let _daemon = env.start();
    let out = env.ctl(&["submit_plan", "--run", "seq 1 5000", "--wait"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.ends_with("4999\n5000\n"), "{out:?}");
    assert!(
        out.stderr.contains("printed more than ")
            && out
                .stderr
                .contains("`flytoctl plan_status p1 --log main` prints its first "),
        "{out:?}"
    );
    assert!(!out.stderr.contains("all of it"), "{out:?}");
}

#[test]
fn plan_list_counts_outcomes_and_says_how_many_more() {
    let env = TestEnv::new("");
    let _daemon = env.start();
    let file = env.work.join("plan.toml");
    std::fs::write(
        &file,
        "[[steps]]\nid = \"ok\"\nrun = \"true\"\n[[steps]]\nid = \"bad\"\nrun = \"false\"\ndeps = [\"ok\"]\n[[steps]]\nid = \"after\"\nrun = \"true\"\ndeps = [\"bad\"]\n",
    )
    .unwrap();
    assert_eq!(env.ctl(&["submit_plan", "--run", "true", "--wait"]).code, 0);
    let out = env.ctl(&["submit_plan", file.to_str().unwrap(), "--wait"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(env.ctl(&["submit_plan", "--run", "true", "--wait"]).code, 0);

    let out = env.ctl(&["plan_list"]);
    let row = |id: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("no {id} in {out:?}"))
            .to_string()
    };
    let steps = |id: &str| {
        let row = row(id);
        let cells: Vec<&str> = row
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        (cells[1].to_string(), cells[2].to_string())
    };
    assert_eq!(
        steps("p2"),
        ("failed".into(), "1 ok, 1 failed, 1 skipped".into())
    );
    assert_eq!(steps("p1"), ("succeeded".into(), "1 ok".into()));
    assert_eq!(out.stderr, "");

    let out = env.ctl(&["plan_list", "--limit", "1"]);
    assert_eq!(out.stdout.lines().count(), 2, "{out:?}");
    assert_eq!(
        out.stderr,
        "flytoctl: 2 more plans; `flytoctl plan_list --limit 3` lists them\n"
    );
    let out = env.ctl(&["plan_list", "--state", "succeeded", "--limit", "1"]);
    assert!(
        out.stderr
            .contains("1 more plan; `flytoctl plan_list --state succeeded --limit 2`"),
        "{out:?}"
    );
    let help = env.ctl(&["plan_list", "--help"]);
    assert!(help.stdout.contains("[default: 50]"), "{help:?}");

    // A failed step is not retried: its attempts have no "of 3".
    let out = env.ctl(&["plan_status", "p2"]);
    let attempts: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("bad  ") || l.starts_with("after  "))
        .map(|l| l.split_whitespace().nth(3).unwrap())
        .collect();
    assert_eq!(attempts, ["1", "0"], "{out:?}");
}

/// Whether process `pid` catches SIGINT (its handler is installed).
fn catches_sigint(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
}

#[test]
fn ctrl_c_on_wait_leaves_the_plan_running_and_says_how_to_cancel_it() {
    let env = TestEnv::new("[plans]\nkill_grace = \"200ms\"\n");
    let _daemon = env.start();
    let waiting = Running::spawn(ctl_command(
        &env,
        &["submit_plan", "--run", "sleep 600", "--wait"],
    ));
    wait_until("p1 to run", DEADLINE, || {
        let out = env.ctl(&["plan_status", "p1", "--json"]);
        out.stdout.contains("\"state\": \"running\"").then_some(())
    });
    let pid = waiting.child.id();
    wait_until("flytoctl to handle Ctrl-C", DEADLINE, || {
        catches_sigint(pid).then_some(())
    });
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let (status, _, err) = waiting.wait();
    // Ends as an unhandled Ctrl-C did before: killed by SIGINT (130).
    assert_eq!(status.signal(), Some(libc::SIGINT), "{err}");
    assert!(
        err.contains("plan p1 keeps running (`flytoctl plan_cancel p1` cancels it)"),
        "{err}"
    );
    let plan = env.status("p1");
    assert_eq!(plan.state, PlanState::Running);
    assert_eq!(plan.steps[0].state, StepState::Running);
    assert_eq!(env.ctl(&["plan_cancel", "p1"]).stdout, "cancelled p1\n");
}

#[test]
fn completions_and_kebab_case_aliases() {
    let env = TestEnv::new("");
    let _daemon = env.start();
    let bash = env.ctl(&["completions", "bash"]);
    assert_eq!(bash.code, 0, "{bash:?}");
    let mut shell = Command::new("bash")
        .args(["-c", "source /dev/stdin; complete -p flytoctl"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    shell
        .stdin
        .take()
        .unwrap()
        .write_all(bash.stdout.as_bytes())
        .unwrap();
    let registered = shell.wait_with_output().unwrap();
    assert!(
        String::from_utf8_lossy(&registered.stdout).contains("_flytoctl"),
        "{registered:?}"
    );
    for shell in ["zsh", "fish"] {
        let out = env.ctl(&["completions", shell]);
        assert!(
            out.code == 0 && out.stdout.contains("plan_status"),
            "{out:?}"
        );
    }

    let out = env.ctl(&["submit-plan", "--run", "echo kebab", "--wait"]);
    assert_eq!((out.code, out.stdout.as_str()), (0, "kebab\n"), "{out:?}");
    let out = env.ctl(&["plan-list"]);
    assert!(out.stdout.contains("1 ok"), "{out:?}");
    assert_eq!(env.ctl(&["plan-status", "p1"]).code, 0);
}

/// `flytoctl chat` in a new session on a pty; its line history under `state`.
fn chat_in_pty(env: &TestEnv, state: &std::path::Path) -> Running {
    let mut cmd = Command::new("script");
    // `exec`: the terminal's Ctrl-C must reach flytoctl alone; a shell left
    // in between (dash, when SHELL is unset) would die of it.
    let line = format!(
        "exec {} chat --workdir {}",
        quote(bin("flytoctl").to_str().unwrap()),
        quote(env.work.to_str().unwrap())
    );
    cmd.args(["-qec", &line, "/dev/null"])
        .env_remove("FLYTO_PLAN_SOCK")
        .envs(env.vars())
        .env("TERM", "xterm")
        .env("XDG_STATE_HOME", state);
    Running::spawn(cmd)
}

#[test]
fn chat_on_a_terminal_edits_lines_and_keeps_slash_commands_local() {
    let (llm, env, _daemon) =
        sessions_support::setup(vec![Reply::text("hello back"), Reply::text("hello again")]);
    let state = env.tmp.path().join("user-state");
    let mut chat = chat_in_pty(&env, &state);
    let mut at = chat.wait_for(0, "/help lists commands");
    at = chat.wait_for(at, "> ");
    let say = |chat: &mut Running, line: &str, expect: &str, at: usize| {
        chat.stdin()
            .write_all(format!("{line}\r").as_bytes())
            .unwrap();
        let after = chat.wait_for(at, expect);
        chat.wait_for(after, "> ")
    };
    at = say(&mut chat, "/help", "soft reset: the model sees", at);
    at = say(
        &mut chat,
        "/bogus now",
        "unknown command /bogus; the commands are:",
        at,
    );
    at = say(&mut chat, "/model", "/model needs a name", at);
    at = say(&mut chat, "/reset", "(soft reset)", at);
    at = say(&mut chat, "/cancel", "s1", at);
    assert!(
        llm.requests().is_empty(),
        "a slash command reached the model"
    );
    at = say(&mut chat, "hi there", "hello back", at);
    // Up-arrow recalls the last line.
    let _ = say(&mut chat, "\x1b[A", "hello again", at);
    chat.stdin().write_all(b"\x04").unwrap();
    let (status, _, _) = chat.wait();
    assert_eq!(status.code(), Some(0));

    let requests = llm.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let sent: Vec<String> = requests
        .iter()
        .flat_map(|r| sessions_support::request_messages(r).clone())
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect();
    assert!(sent.iter().all(|m| m.contains("hi there")), "{sent:?}");

    let history = state.join("flytoctl/chat_history");
    let mode = std::fs::metadata(&history).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(
        std::fs::read_to_string(&history)
            .unwrap()
            .contains("hi there")
    );
}

#[test]
fn ctrl_c_in_chat_on_a_terminal_cancels_the_reply() {
    let slow = Reply::slow_text(
        (1..=40).map(|i| format!("w{i} ")),
        std::time::Duration::from_millis(300),
    );
    let (llm, env, _daemon) = sessions_support::setup(vec![slow]);
    let mut chat = chat_in_pty(&env, &env.tmp.path().join("user-state"));
    let mut at = chat.wait_for(0, "> ");
    chat.stdin().write_all(b"count slowly\r").unwrap();
    at = chat.wait_for(at, "w2 ");
    // The terminal turns ^C into SIGINT for flytoctl, as a person's key does.
    chat.stdin().write_all(b"\x03").unwrap();
    // The cancel note (from the Ctrl-C handler) and the next prompt (from
    // the chat loop, once the run has ended) may come in either order.
    let said = chat.wait_for(at, "cancelled s1");
    at = chat.wait_for(at, "> ").max(said);
    chat.stdin().write_all(b"\x04").unwrap();
    let (status, out, _) = chat.wait();
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(
        !out[..at].contains("w40 "),
        "the reply ran to its end: {out}"
    );
    assert_eq!(llm.request_count(), 1);
}
