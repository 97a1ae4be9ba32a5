//! Runs the real `flytoctl` binary against a scripted fake daemon that
//! speaks the binary protocol on a temporary socket.

// Helpers outside #[test] fns are not covered by allow-unwrap-in-tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flyto_protocol::framing::{read_frame, write_frame};
use flyto_protocol::{
    BlockView, BreakerView, ContextView, DaemonStats, ErrorCode, Event, MessageView,
    PROTOCOL_VERSION, PlanState, PlanSummary, PlanView, Request, Response, SessionContext,
    SessionEvent, SessionView, StepState, StepView,
};
use std::io::Write;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What the fake answers to one request: frames, then maybe a hang-up.
struct Reply {
    frames: Vec<Response>,
    close: bool,
}

fn reply(frames: Vec<Response>) -> Reply {
    Reply {
        frames,
        close: false,
    }
}

type Script = dyn Fn(usize, &Request) -> Reply + Send + Sync;

struct Fake {
    dir: PathBuf,
    socket: PathBuf,
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Serves connections forever; `script` gets the connection number.
fn fake(name: &str, script: impl Fn(usize, &Request) -> Reply + Send + Sync + 'static) -> Fake {
    let dir = std::env::temp_dir().join(format!("flytoctl-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("flytod.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let script: Arc<Script> = Arc::new(script);
    let conns = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let script = Arc::clone(&script);
            let n = conns.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                while let Ok(Some(req)) = read_frame::<_, Request>(&mut stream) {
                    let answer = match req {
                        Request::Hello { .. } => reply(vec![Response::Welcome {
                            protocol: PROTOCOL_VERSION,
                            daemon_version: "9.9.9".into(),
                        }]),
                        other => script(n, &other),
                    };
                    for frame in &answer.frames {
                        if write_frame(&mut stream, frame).is_err() {
                            return;
                        }
                    }
                    if answer.close {
                        return;
                    }
                }
            });
        }
    });
    Fake { dir, socket }
}

fn flytoctl(fake: &Fake, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flytoctl"))
        .arg("--socket")
        .arg(&fake.socket)
        .args(args)
        .env_remove("FLYTO_PLAN_SOCK")
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn plan(state: PlanState, step_state: StepState, out: &str, err: &str) -> PlanView {
    PlanView {
        waiting: None,
        queue_position: None,
        restarted_from: None,
        chain: "p1".into(),
        depth: 0,
        id: "p1".into(),
        name: None,
        state,
        reason: (state == PlanState::Failed).then(|| "step main failed".to_string()),
        created_ms: 0,
        started_ms: Some(0),
        finished_ms: state.is_terminal().then_some(1_200),
        revision: 1,
        steps: vec![StepView {
            id: "main".into(),
            kind: "run".into(),
            text: "echo hello".into(),
            deps: vec![],
            state: step_state,
            attempts: 1,
            max_attempts: 1,
            started_ms: Some(0),
            finished_ms: step_state.is_terminal().then_some(1_200),
            exit_code: step_state.is_terminal().then_some(0),
            error: None,
            stdout_tail: out.into(),
            stderr_tail: err.into(),
            log_path: None,
        }],
    }
}

fn event(seq: u64, plan: PlanView) -> Response {
    Response::Event {
        seq,
        event: Event::PlanUpdated { plan },
    }
}

fn submitted() -> Reply {
    reply(vec![Response::PlanSubmitted {
        id: "p1".into(),
        duplicate: false,
    }])
}

#[test]
fn submit_wait_prints_exactly_the_output() {
    let fake = fake("wait", |_, req| match req {
        Request::SubmitPlan { plan, .. } => {
            assert_eq!(plan.steps[0].id, "main");
            assert_eq!(plan.steps[0].run.as_deref(), Some("echo hello"));
            assert!(plan.steps[0].workdir.as_deref().unwrap().starts_with('/'));
            submitted()
        }
        Request::PlanWatch { .. } => reply(vec![
            Response::Plan {
                plan: plan(PlanState::Running, StepState::Running, "", ""),
            },
            event(
                1,
                plan(PlanState::Succeeded, StepState::Succeeded, "hello\n", ""),
            ),
            Response::End {},
        ]),
        other => panic!("unexpected {other:?}"),
    });
    let out = flytoctl(&fake, &["submit_plan", "--run", "echo hello", "--wait"]);
    assert_eq!(text(&out.stdout), "hello\n");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn submit_wait_exits_with_the_plan_outcome() {
    let fake = fake("failed", |_, req| match req {
        Request::SubmitPlan { .. } => submitted(),
        _ => reply(vec![Response::Plan {
            plan: plan(PlanState::Failed, StepState::Failed, "", "boom\n"),
        }]),
    });
    let out = flytoctl(&fake, &["submit_plan", "--run", "false", "--wait"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    let err = text(&out.stderr);
    assert!(err.starts_with("boom\n"), "{err}");
    assert!(
        err.contains("flytoctl: plan p1 failed: step main failed"),
        "{err}"
    );
}

#[test]
fn submit_wait_survives_a_daemon_restart() {
    let fake = fake("reconnect", |conn, req| match req {
        Request::SubmitPlan { .. } => submitted(),
        // The first watch drops after the snapshot, like a restarting daemon.
        Request::PlanWatch { .. } if conn == 0 => Reply {
            frames: vec![Response::Plan {
                plan: plan(PlanState::Running, StepState::Running, "", ""),
            }],
            close: true,
        },
        Request::PlanWatch { .. } => reply(vec![
            Response::Plan {
                plan: plan(PlanState::Succeeded, StepState::Succeeded, "hello\n", ""),
            },
            Response::End {},
        ]),
        other => panic!("unexpected {other:?}"),
    });
    let out = flytoctl(&fake, &["submit_plan", "--run", "echo hello", "--wait"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hello\n");
    assert!(text(&out.stderr).contains("reconnected"));
}

#[test]
fn submit_prints_the_id_and_reads_plan_files() {
    let fake = fake("submit", |_, req| match req {
        Request::SubmitPlan {
            plan,
            idempotency_key,
        } => {
            assert_eq!(plan.name.as_deref(), Some("two"));
            assert_eq!(plan.steps.len(), 2);
            assert_eq!(idempotency_key.as_deref(), Some("k1"));
            submitted()
        }
        other => panic!("unexpected {other:?}"),
    });
    let file = fake.dir.join("plan.toml");
    std::fs::write(
        &file,
        "name = \"two\"\n[[steps]]\nid = \"a\"\nrun = \"true\"\n[[steps]]\nid = \"b\"\nprompt = \"hi\"\ndeps = [\"a\"]\n",
    )
    .unwrap();
    let out = flytoctl(
        &fake,
        &[
            "submit_plan",
            file.to_str().unwrap(),
            "--idempotency-key",
            "k1",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "p1\n");
}

#[test]
fn status_watch_prints_one_line_per_change() {
    let fake = fake("watch", |_, req| match req {
        Request::PlanWatch { .. } => reply(vec![
            Response::Plan {
                plan: plan(PlanState::Pending, StepState::Pending, "", ""),
            },
            event(1, plan(PlanState::Running, StepState::Running, "", "")),
            event(2, plan(PlanState::Running, StepState::Running, "", "")),
            event(3, plan(PlanState::Cancelled, StepState::Cancelled, "", "")),
            Response::End {},
        ]),
        other => panic!("unexpected {other:?}"),
    });
    let out = flytoctl(&fake, &["plan_status", "p1", "--watch"]);
    assert_eq!(
        text(&out.stdout),
        "main pending\nmain running\nmain cancelled\n"
    );
    assert_eq!(out.status.code(), Some(5));
}

#[test]
fn status_list_ping_and_cancel() {
    let fake = fake("misc", |_, req| match req {
        Request::PlanStatus { id } if id == "p1" => reply(vec![Response::Plan {
            plan: plan(PlanState::Succeeded, StepState::Succeeded, "hello\n", ""),
        }]),
        Request::PlanStatus { id } => reply(vec![Response::error(
            ErrorCode::NotFound,
            format!("no plan {id}: it may have expired"),
        )]),
        Request::PlanList { state, limit } => {
            assert_eq!(*state, Some(PlanState::Running));
            assert_eq!(*limit, Some(5));
            reply(vec![Response::Plans {
                plans: vec![PlanSummary {
                    queue_position: None,
                    id: "p1".into(),
                    chain: "p1".into(),
                    name: Some("nightly".into()),
                    state: PlanState::Running,
                    created_ms: 0,
                    finished_ms: None,
                    steps_total: 2,
                    steps_done: 1,
                    steps_succeeded: 1,
                    steps_failed: 0,
                    steps_skipped: 0,
                }],
                total: 8,
            }])
        }
        Request::PlanCancel { id } => reply(vec![Response::PlanCancelled {
            id: id.clone(),
            state: PlanState::Cancelled,
            already_finished: false,
        }]),
        Request::Ping {} => reply(vec![Response::Pong {
            daemon_version: "9.9.9".into(),
            pid: 7,
            uptime_ms: 65_000,
        }]),
        Request::Stats {} => reply(vec![Response::error(
            ErrorCode::Unavailable,
            "daemon is shutting down",
        )]),
        other => panic!("unexpected {other:?}"),
    });
    let out = flytoctl(&fake, &["plan_status", "p1"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("plan p1 succeeded after 1.2s\nSTEP  KIND"),
        "{stdout}"
    );
    assert!(stdout.ends_with("main stdout:\n    hello\n"), "{stdout}");

    let out = flytoctl(&fake, &["plan_status", "p9"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(
        text(&out.stderr),
        "flytoctl: NotFound: no plan p9: it may have expired\n"
    );

    let out = flytoctl(&fake, &["plan_status", "p1", "--log", "main"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("has no log"));

    let out = flytoctl(&fake, &["plan_status", "p1", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["steps"][0]["stdout_tail"], "hello\n");

    let out = flytoctl(&fake, &["plan_list", "--state", "running", "--limit", "5"]);
    assert!(
        text(&out.stdout).contains("p1  running  1/2: 1 ok"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        text(&out.stderr),
        "flytoctl: 7 more plans; `flytoctl plan_list --state running --limit 8` lists them\n"
    );

    let out = flytoctl(&fake, &["plan_cancel", "p1"]);
    assert_eq!(text(&out.stdout), "cancelled p1\n");

    let out = flytoctl(&fake, &["ping"]);
    assert_eq!(text(&out.stdout), "flytod 9.9.9 pid 7 up 1m05s\n");

    let out = flytoctl(&fake, &["stats"]);
    assert_eq!(out.status.code(), Some(6));
    assert_eq!(
        text(&out.stderr),
        "flytoctl: Unavailable: daemon is shutting down\n"
    );
}

#[test]
fn a_missing_daemon_is_exit_3() {
    let out = Command::new(env!("CARGO_BIN_EXE_flytoctl"))
        .args(["--socket", "/nonexistent/flytod.sock", "ping"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).starts_with("flytoctl: flytod is not running"));
}

fn session_view(id: &str, status: &str) -> SessionView {
    SessionView {
        parent: None,
        id: id.into(),
        name: Some("work".into()),
        workdir: "/srv/proj".into(),
        model: "main".into(),
        status: status.into(),
        error: None,
        messages: 3,
        context_base_idx: 0,
        input_tokens: 1_500,
        output_tokens: 40,
        cost_usd: 0.002,
        created_ms: 0,
        updated_ms: 0,
        chain: "c1".into(),
        depth: 0,
        context: Default::default(),
    }
}

fn session_event(seq: u64, event: SessionEvent) -> Response {
    Response::Event {
        seq,
        event: Event::Session {
            session: "s1".into(),
            event,
        },
    }
}

fn text_delta(delta: &str) -> SessionEvent {
    SessionEvent::Text {
        delta: delta.into(),
    }
}

/// A whole run: text, a tool call and its result, more text, then `end`.
fn run_frames(reply: &str, end: SessionEvent) -> Vec<Response> {
    let events = vec![
        SessionEvent::RunStart { run: 1 },
        SessionEvent::LlmStart {
            model: "deepseek-chat".into(),
        },
        SessionEvent::Reasoning {
            delta: "secret thoughts".into(),
        },
        text_delta("Let me "),
        text_delta("look."),
        SessionEvent::ToolCall {
            id: "c1".into(),
            name: "bash".into(),
            arguments: "{\"command\": \"ls\"}".into(),
        },
        SessionEvent::ToolResult {
            id: "c1".into(),
            name: "bash".into(),
            preview: "exit 0\nCargo.toml\n".into(),
            is_error: false,
        },
        text_delta(reply),
        SessionEvent::LlmEnd {
            input_tokens: 1_000,
            output_tokens: 12,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            cost_usd: 0.0012,
        },
        end,
    ];
    let mut frames: Vec<Response> = events
        .into_iter()
        .enumerate()
        .map(|(i, e)| session_event(i as u64 + 1, e))
        .collect();
    frames.push(Response::End {});
    frames
}

fn done() -> SessionEvent {
    SessionEvent::Done {
        stop: "end_turn".into(),
        message: String::new(),
    }
}

#[test]
fn session_send_streams_the_reply() {
    let fake = fake("send", |_, req| match req {
        Request::SessionSend { id, text, .. } => {
            assert_eq!(id, "s1");
            assert_eq!(text, "list the files");
            reply(run_frames("Two files.", done()))
        }
        other => panic!("unexpected {other:?}"),
    });
    let out = flytoctl(&fake, &["session_send", "s1", "list the files"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Let me look.\nTwo files.\n");
    // Not a terminal: no reasoning, no usage line unless asked for.
    assert_eq!(
        text(&out.stderr),
        "⏺ bash {\"command\":\"ls\"}\n  ⎿ ok: exit 0 …\n"
    );

    let out = flytoctl(&fake, &["session_send", "s1", "list the files", "--usage"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).ends_with("deepseek-chat · 1.0k in · 12 out · $0.0012\n"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn session_send_reads_stdin_and_reports_how_the_run_ended() {
    let fake = fake("send-ends", |_, req| match req {
        Request::SessionSend { text, .. } if text == "fail" => reply(run_frames(
            "",
            SessionEvent::Error {
                message: "the provider refused the key; send a message to try again".into(),
            },
        )),
        Request::SessionSend { text, .. } => {
            assert_eq!(text, "from stdin");
            reply(run_frames(
                "",
                SessionEvent::Cancelled {
                    message: "cancelled by user; send a message to continue".into(),
                    shutdown: false,
                },
            ))
        }
        other => panic!("unexpected {other:?}"),
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_flytoctl"))
        .arg("--socket")
        .arg(&fake.socket)
        .args(["session_send", "s1", "-"])
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"from stdin\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert!(text(&out.stderr).ends_with("cancelled by user; send a message to continue\n"));

    let out = flytoctl(&fake, &["session_send", "s1", "fail"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .ends_with("error: the provider refused the key; send a message to try again\n"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn session_send_while_running_is_refused_with_exit_4() {
    let fake = fake("conflict", |_, req| match req {
        Request::SessionSend { .. } => reply(vec![Response::error(
            ErrorCode::Conflict,
            "s1 is already running; wait for it or `flytoctl session_cancel s1`",
        )]),
        other => panic!("unexpected {other:?}"),
    });
    let out = flytoctl(&fake, &["session_send", "s1", "hi"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(
        text(&out.stderr),
        "flytoctl: Conflict: s1 is already running; wait for it or `flytoctl session_cancel s1`\n"
    );
}

/// A fake whose `session_send` (or `session_compact`) streams the start of a
/// run, then waits for a `session_cancel` (on another connection) before
/// ending it. `sent` hears
/// when the send arrived, `cancels` when a cancel did.
fn cancellable_fake(name: &str) -> (Fake, mpsc::Receiver<()>, mpsc::Receiver<()>) {
    let (sent_tx, sent) = mpsc::channel();
    let (cancel_tx, cancels) = mpsc::channel();
    let sent_tx = Mutex::new(sent_tx);
    let cancel_tx = Mutex::new(cancel_tx);
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let fake = fake(name, move |_, req| match req {
        Request::SessionSend { .. } | Request::SessionCompact { .. } => {
            sent_tx.lock().unwrap().send(()).unwrap();
            let (lock, cvar) = &*gate;
            let mut cancelled = lock.lock().unwrap();
            while !*cancelled {
                cancelled = cvar.wait(cancelled).unwrap();
            }
            reply(vec![
                session_event(1, SessionEvent::RunStart { run: 1 }),
                session_event(2, text_delta("partial")),
                session_event(
                    3,
                    SessionEvent::Cancelled {
                        message: "cancelled by user; send a message to continue".into(),
                        shutdown: false,
                    },
                ),
                Response::End {},
            ])
        }
        Request::SessionCancel { id } => {
            let _ = cancel_tx.lock().unwrap().send(());
            let (lock, cvar) = &*gate;
            *lock.lock().unwrap() = true;
            cvar.notify_all();
            reply(vec![Response::Session {
                session: session_view(id, "running"),
            }])
        }
        other => panic!("unexpected {other:?}"),
    });
    (fake, sent, cancels)
}

fn spawn_send(fake: &Fake) -> std::process::Child {
    spawn(fake, &["session_send", "s1", "hi"])
}

fn spawn(fake: &Fake, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_flytoctl"))
        .arg("--socket")
        .arg(&fake.socket)
        .args(args)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The run's last line is the cancel; the Ctrl-C thread's own note
/// ("flytoctl: cancelled s1") comes from another thread and may follow it.
fn ends_with_the_cancel(err: &str) -> bool {
    let end = "cancelled by user; send a message to continue\n";
    err.ends_with(end)
        || err
            .strip_suffix("flytoctl: cancelled s1\n")
            .is_some_and(|rest| rest.ends_with(end))
}

fn interrupt(child: &std::process::Child) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) with a pid of our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
}

#[test]
fn ctrl_c_cancels_the_run_and_waits_for_its_end() {
    let (fake, sent, cancels) = cancellable_fake("ctrlc");
    let child = spawn_send(&fake);
    sent.recv_timeout(Duration::from_secs(10)).unwrap();
    interrupt(&child);
    cancels.recv_timeout(Duration::from_secs(10)).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "partial\n");
    let err = text(&out.stderr);
    assert!(err.contains("flytoctl: cancelling s1"), "{err}");
    assert!(ends_with_the_cancel(&err), "{err}");
}

#[test]
fn ctrl_c_cancels_a_compaction() {
    let (fake, sent, cancels) = cancellable_fake("ctrlc-compact");
    let child = spawn(&fake, &["session_compact", "s1"]);
    sent.recv_timeout(Duration::from_secs(10)).unwrap();
    interrupt(&child);
    cancels.recv_timeout(Duration::from_secs(10)).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("flytoctl: cancelling s1"), "{err}");
    assert!(ends_with_the_cancel(&err), "{err}");
}

#[test]
fn a_second_ctrl_c_quits_at_once() {
    // The cancel is answered but the run never ends: the gate is held shut
    // by answering the cancel from a fake that ignores it.
    let (sent_tx, sent) = mpsc::channel();
    let (cancel_tx, cancels) = mpsc::channel();
    let sent_tx = Mutex::new(sent_tx);
    let cancel_tx = Mutex::new(cancel_tx);
    let fake = fake("ctrlc2", move |_, req| match req {
        Request::SessionSend { .. } => {
            sent_tx.lock().unwrap().send(()).unwrap();
            std::thread::sleep(Duration::from_secs(30));
            reply(vec![Response::End {}])
        }
        Request::SessionCancel { id } => {
            let _ = cancel_tx.lock().unwrap().send(());
            reply(vec![Response::Session {
                session: session_view(id, "running"),
            }])
        }
        other => panic!("unexpected {other:?}"),
    });
    let child = spawn_send(&fake);
    sent.recv_timeout(Duration::from_secs(10)).unwrap();
    interrupt(&child);
    cancels.recv_timeout(Duration::from_secs(10)).unwrap();
    interrupt(&child);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert!(text(&out.stderr).ends_with("flytoctl: interrupted\n"));
}

#[test]
fn chat_reads_one_message_per_line() {
    let sends = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&sends);
    let fake = fake("chat", move |_, req| match req {
        Request::SessionNew {
            name,
            workdir,
            model,
            ..
        } => {
            assert_eq!(name, &None);
            assert!(workdir.as_deref().unwrap().starts_with('/'));
            assert_eq!(model.as_deref(), Some("fast"));
            reply(vec![Response::Session {
                session: session_view("s1", "idle"),
            }])
        }
        Request::SessionSend { id, text, .. } => {
            assert_eq!(id, "s1");
            counter.fetch_add(1, Ordering::SeqCst);
            reply(vec![
                session_event(1, SessionEvent::RunStart { run: 1 }),
                session_event(2, text_delta(&format!("echo: {text}"))),
                session_event(3, done()),
                Response::End {},
            ])
        }
        other => panic!("unexpected {other:?}"),
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_flytoctl"))
        .arg("--socket")
        .arg(&fake.socket)
        .args(["chat", "--model", "fast"])
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"one\n\ntwo\n/quit\nnever sent\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "echo: one\necho: two\n");
    assert_eq!(text(&out.stderr), "session s1\n");
    assert_eq!(sends.load(Ordering::SeqCst), 2);
}

#[test]
fn sessions_new_list_history_cancel_and_names() {
    let fake = fake("sessions", |_, req| match req {
        Request::SessionNew {
            name,
            workdir,
            model,
            ..
        } => {
            assert_eq!(name.as_deref(), Some("work"));
            assert_eq!(workdir.as_deref(), Some("/"));
            assert_eq!(model, &None);
            reply(vec![Response::Session {
                session: session_view("s7", "idle"),
            }])
        }
        Request::SessionList {} => reply(vec![Response::Sessions {
            sessions: vec![session_view("s7", "idle")],
        }]),
        Request::SessionCancel { id } => reply(vec![Response::Session {
            session: session_view(id, "idle"),
        }]),
        Request::SessionHistory { id } => {
            assert_eq!(id, "s7");
            let mut session = session_view(id, "idle");
            session.context_base_idx = 1;
            reply(vec![Response::History {
                session,
                messages: vec![
                    MessageView {
                        idx: 0,
                        role: "user".into(),
                        blocks: vec![BlockView::Text { text: "hi".into() }],
                        created_ms: 0,
                    },
                    MessageView {
                        idx: 1,
                        role: "assistant".into(),
                        blocks: vec![BlockView::Text {
                            text: "hello".into(),
                        }],
                        created_ms: 0,
                    },
                ],
                summary: None,
                extractions: vec![flyto_protocol::ExtractionView {
                    at_ms: 0,
                    from_idx: 0,
                    to_idx: 10,
                    turns: 5,
                    model: "fake".into(),
                    model_calls: 2,
                    input_tokens: 1500,
                    output_tokens: 40,
                    cost_usd: 0.0125,
                    saved: vec!["test-command".into()],
                    forgot: vec![],
                    outcome: "done".into(),
                }],
            }])
        }
        other => panic!("unexpected {other:?}"),
    });
    let out = flytoctl(&fake, &["session_new", "--name", "work", "--workdir", "/"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "s7\n");

    let out = flytoctl(&fake, &["session_list"]);
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("ID  NAME  STATUS"), "{stdout}");
    assert!(
        stdout.contains("s7  work  idle    3     1.5k/40"),
        "{stdout}"
    );

    let out = flytoctl(&fake, &["session_list", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json[0]["id"], "s7");

    // A name resolves to the session's id.
    let out = flytoctl(&fake, &["session_cancel", "work"]);
    assert_eq!(text(&out.stdout), "s7 was not running\n");
    let out = flytoctl(&fake, &["session_cancel", "nosuch"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(text(&out.stderr).contains("NotFound: no session nosuch"));

    let out = flytoctl(&fake, &["session_history", "s7"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.ends_with("\n[0] user: (outside the model's window)\nhi\n\n[1] assistant:\nhello\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\nmemory extraction ")
            && stdout.contains(
                " · messages [0]..[9] · 2 model calls · 1.5k in / 40 out · $0.0125 · saved test-command\n"
            ),
        "{stdout}"
    );
    let out = flytoctl(&fake, &["session_history", "s7", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["messages"][1]["blocks"][0]["text"]["text"], "hello");
}

#[test]
fn attach_prints_the_snapshot_then_follows() {
    let fake = fake("attach", |_, req| match req {
        Request::SessionAttach { id, recent, .. } => {
            assert_eq!(*recent, Some(1));
            let mut frames = vec![Response::History {
                session: session_view(id, "idle"),
                messages: vec![MessageView {
                    idx: 2,
                    role: "assistant".into(),
                    blocks: vec![BlockView::Text {
                        text: "earlier reply".into(),
                    }],
                    created_ms: 0,
                }],
                summary: None,
                extractions: vec![],
            }];
            frames.extend(run_frames("Done.", done()));
            reply(frames)
        }
        other => panic!("unexpected {other:?}"),
    });
    let out = flytoctl(&fake, &["session_attach", "s1", "--recent", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("… 2 earlier messages not shown; `flytoctl session_history s1` shows them\n\n[2] assistant:\nearlier reply\n"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("earlier reply\nLet me look.\nDone.\n"),
        "{stdout}"
    );
    assert!(
        text(&out.stderr).starts_with("── run 1 ──\n⏺ bash"),
        "{}",
        text(&out.stderr)
    );
}

fn breaker(project: &str, state: &str, failures: u32, reset_at_ms: Option<u64>) -> BreakerView {
    BreakerView {
        project: project.into(),
        workdir: format!("/srv/{project}"),
        state: state.into(),
        failures,
        last_error: (failures > 0).then(|| format!("summary call failed:\n{}", "e".repeat(90))),
        reset_at_ms,
        updated_ms: 0,
    }
}

#[test]
fn breaker_status_shows_every_project_and_breaker_reset_closes_them() {
    let status_calls = Arc::new(AtomicUsize::new(0));
    let calls = Arc::clone(&status_calls);
    let fake = fake("breakers", move |_, req| match req {
        // The first two answers list breakers, later ones none.
        Request::BreakerStatus {} if calls.fetch_add(1, Ordering::SeqCst) < 2 => {
            let in_5m = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64
                + 300_000;
            reply(vec![Response::Breakers {
                breakers: vec![
                    breaker("0123456789abcdef", "open", 3, Some(in_5m)),
                    breaker("fedcba9876543210", "closed", 0, None),
                ],
            }])
        }
        Request::BreakerStatus {} => reply(vec![Response::Breakers { breakers: vec![] }]),
        Request::BreakerReset { project: None } => reply(vec![Response::BreakersReset {
            projects: vec!["0123456789abcdef".into(), "00000000000000aa".into()],
        }]),
        Request::BreakerReset {
            project: Some(p), ..
        } if p == "0123456789abcdef" => reply(vec![Response::BreakersReset { projects: vec![] }]),
        Request::BreakerReset { project: Some(p) } => reply(vec![Response::error(
            ErrorCode::NotFound,
            format!("no project {p}: `flytoctl breaker_status` lists them"),
        )]),
        other => panic!("unexpected {other:?}"),
    });

    let out = flytoctl(&fake, &["breaker_status"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines[0].starts_with("PROJECT           STATE   FAILURES  RESETS"),
        "{stdout}"
    );
    assert!(lines[0].contains("LAST ERROR"), "{stdout}");
    assert!(lines[0].ends_with("WORKDIR"), "{stdout}");
    // The countdown is a few milliseconds under 5 minutes by now, rounded up.
    let (open, rest) = lines[1].split_at(44);
    assert_eq!(
        open, "0123456789abcdef  open    3         in 5m00s",
        "{stdout}"
    );
    assert!(rest.starts_with("  summary call failed: eee"), "{stdout}");
    assert!(lines[1].ends_with("…  /srv/0123456789abcdef"), "{stdout}");
    assert!(
        lines[2].starts_with("fedcba9876543210  closed  0         -         -"),
        "{stdout}"
    );

    let out = flytoctl(&fake, &["breaker_status", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json[0]["project"], "0123456789abcdef");
    assert_eq!(json[0]["state"], "open");
    assert_eq!(json[0]["failures"], 3);
    assert_eq!(json[1]["reset_at_ms"], serde_json::Value::Null);

    let out = flytoctl(&fake, &["breaker_status"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(
        text(&out.stderr),
        "flytoctl: no compaction breakers recorded (all closed)\n"
    );

    let out = flytoctl(&fake, &["breaker_reset"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "closed the compaction breaker of 0123456789abcdef\n\
         closed the compaction breaker of 00000000000000aa\n"
    );

    let out = flytoctl(&fake, &["breaker_reset", "0123456789abcdef"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "no breaker was open\n");

    let out = flytoctl(&fake, &["breaker_reset", "beefbeefbeefbeef"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(
        text(&out.stderr),
        "flytoctl: NotFound: no project beefbeefbeefbeef: `flytoctl breaker_status` lists them\n"
    );
}

fn with_context(mut session: SessionView) -> SessionView {
    session.context = ContextView {
        tokens: 18_200,
        estimated: 1_300,
        context_window: 128_000,
        effective_window: 110_000,
        warn_at: 90_000,
        compact_at: 97_000,
        compactions: 2,
        head_from_idx: 0,
        summary_from_idx: 1,
        has_summary: true,
    };
    session
}

#[test]
fn session_reset_and_session_model() {
    let fake = fake("reset-model", |_, req| match req {
        Request::SessionList {} => reply(vec![Response::Sessions {
            sessions: vec![session_view("s3", "idle")],
        }]),
        Request::SessionReset { id, soft } => {
            assert_eq!(id, "s3");
            let mut session = session_view(id, "idle");
            session.messages = 40;
            session.context_base_idx = if *soft { 12 } else { 40 };
            reply(vec![Response::Session { session }])
        }
        Request::SessionSetModel { id, model } if model == "nosuch" => {
            reply(vec![Response::error(
                ErrorCode::BadRequest,
                format!("{id}: no model profile or role `nosuch`; the config defines main, fast"),
            )])
        }
        Request::SessionSetModel { id, model } => {
            // Switching to `tiny` leaves the context over its threshold.
            let status = if model == "tiny" { "running" } else { "idle" };
            let mut session = with_context(session_view(id, status));
            session.model = model.clone();
            reply(vec![Response::Session { session }])
        }
        other => panic!("unexpected {other:?}"),
    });

    let out = flytoctl(&fake, &["session_reset", "s3", "--soft"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "s3: the model now sees messages from [12] on (soft reset), 0 tokens; history keeps all 40 messages\n"
    );
    // By name, like the other session commands.
    let out = flytoctl(&fake, &["session_reset", "work", "--hard"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "s3: the model starts from an empty context (hard reset), 0 tokens; history keeps all 40 messages\n"
    );
    for args in [
        &["session_reset", "s3"][..],
        &["session_reset", "s3", "--soft", "--hard"][..],
    ] {
        let out = flytoctl(&fake, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(text(&out.stdout), "");
        assert!(
            text(&out.stderr).contains("--soft"),
            "{}",
            text(&out.stderr)
        );
    }

    let context = "context: 18,200 tokens (1,300 estimated) · compacts at 97,000 · warns at 90,000 · effective window 110,000 of 128,000 · 2 compactions";
    let out = flytoctl(&fake, &["session_model", "s3", "fast"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("s3: model fast\n{context}\n"));

    let out = flytoctl(&fake, &["session_model", "s3", "tiny"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "s3: model tiny\n{context}\n\
             the context is over the new model's compaction threshold: compacting now (follow with `flytoctl session_attach s3`)\n"
        )
    );

    let out = flytoctl(&fake, &["session_model", "s3", "nosuch"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(
        text(&out.stderr),
        "flytoctl: BadRequest: s3: no model profile or role `nosuch`; the config defines main, fast\n"
    );
}

/// The frames of a `session_compact` stream that ends with `Done { stop }`.
fn compact_frames(middle: Vec<SessionEvent>, stop: &str, message: &str) -> Vec<Response> {
    let mut events = vec![SessionEvent::RunStart { run: 2 }];
    events.extend(middle);
    events.push(SessionEvent::Done {
        stop: stop.into(),
        message: message.into(),
    });
    let mut frames: Vec<Response> = events
        .into_iter()
        .enumerate()
        .map(|(i, e)| session_event(i as u64 + 1, e))
        .collect();
    frames.push(Response::End {});
    frames
}

#[test]
fn session_compact_streams_and_exits_with_the_outcome() {
    let fake = fake("compact", |_, req| match req {
        Request::SessionCompact { id } => match id.as_str() {
            "s1" => reply(compact_frames(
                vec![
                    SessionEvent::CompactStarted {
                        tokens: 18_200,
                        compact_at: 17_600,
                    },
                    SessionEvent::LlmStart {
                        model: "fast-model".into(),
                    },
                    SessionEvent::LlmEnd {
                        input_tokens: 17_000,
                        output_tokens: 900,
                        cache_read_tokens: 0,
                        cache_write_tokens: 0,
                        cost_usd: 0.01,
                    },
                    SessionEvent::Compacted {
                        before_tokens: 18_200,
                        after_tokens: 3_100,
                        tier: "summary".into(),
                        duration_ms: 1_200,
                    },
                ],
                "compacted",
                "",
            )),
            "s2" => reply(compact_frames(
                vec![],
                "nothing_to_compact",
                "nothing to compact: the context is 2,000 tokens",
            )),
            "s3" => reply(compact_frames(
                vec![
                    SessionEvent::CompactStarted {
                        tokens: 18_200,
                        compact_at: 17_600,
                    },
                    SessionEvent::CompactFailed {
                        message: "the summary call failed: HTTP 500".into(),
                        breaker_open: true,
                    },
                ],
                "compact_failed",
                "",
            )),
            "s4" => reply(vec![
                session_event(1, SessionEvent::RunStart { run: 2 }),
                session_event(
                    2,
                    SessionEvent::Error {
                        message: "the session's model is not configured".into(),
                    },
                ),
                Response::End {},
            ]),
            _ => reply(vec![Response::error(
                ErrorCode::Conflict,
                format!("{id} is already running; wait for it or `flytoctl session_cancel {id}`"),
            )]),
        },
        other => panic!("unexpected {other:?}"),
    });

    let out = flytoctl(&fake, &["session_compact", "s1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(
        text(&out.stderr),
        "compacting the context (18,200 tokens ≥ threshold 17,600)…\n\
         compacted (summary): 18,200 → 3,100 tokens in 1.2s\n"
    );
    let out = flytoctl(&fake, &["session_compact", "s1", "--usage"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).ends_with("fast-model · 17.0k in · 900 out · $0.0100\n"),
        "{}",
        text(&out.stderr)
    );

    let out = flytoctl(&fake, &["session_compact", "s2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "nothing to compact: the context is 2,000 tokens\n"
    );

    let out = flytoctl(&fake, &["session_compact", "s3"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "compacting the context (18,200 tokens ≥ threshold 17,600)…\n\
         compaction failed: the summary call failed: HTTP 500\n\
         the compaction breaker is open: `flytoctl breaker_status`, `flytoctl breaker_reset`\n"
    );

    let out = flytoctl(&fake, &["session_compact", "s4"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "error: the session's model is not configured\n"
    );

    let out = flytoctl(&fake, &["session_compact", "s5"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(
        text(&out.stderr),
        "flytoctl: Conflict: s5 is already running; wait for it or `flytoctl session_cancel s5`\n"
    );
}

#[test]
fn history_shows_the_context_budget_and_the_summary() {
    let fake = fake("summary", |_, req| match req {
        Request::SessionHistory { id } => {
            let mut session = with_context(session_view(id, "idle"));
            session.context_base_idx = 2;
            session.messages = 3;
            let said = |idx, role: &str, text: &str| MessageView {
                idx,
                role: role.into(),
                blocks: vec![BlockView::Text { text: text.into() }],
                created_ms: 0,
            };
            reply(vec![Response::History {
                session,
                messages: vec![
                    said(0, "user", "keep /srv/proj/a.rs"),
                    said(1, "assistant", "noted"),
                    said(2, "user", "go on"),
                ],
                summary: Some("Goal: edit /srv/proj/a.rs\nConstraints: none".into()),
                extractions: vec![],
            }])
        }
        Request::Stats {} => reply(vec![Response::Stats {
            stats: DaemonStats {
                compactions: 5,
                breakers_open: 1,
                contexts: vec![
                    SessionContext {
                        session: "s3".into(),
                        context: with_context(session_view("s3", "idle")).context,
                    },
                    SessionContext {
                        session: "s9".into(),
                        context: ContextView {
                            tokens: 1_200,
                            ..Default::default()
                        },
                    },
                ],
                ..Default::default()
            },
        }]),
        other => panic!("unexpected {other:?}"),
    });

    let out = flytoctl(&fake, &["session_history", "s1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "\ncontext: 18,200 tokens (1,300 estimated) · compacts at 97,000 · warns at 90,000 · effective window 110,000 of 128,000 · 2 compactions\n"
        ),
        "{stdout}"
    );
    // [0] is the protected head: the model sees it before the summary.
    assert!(
        stdout.contains(
            "\nthe model sees messages [0]..[0], the summary and [2] on; the others are outside its window\n\n[0] user:\nkeep /srv/proj/a.rs\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.ends_with(
            "\n[1] assistant: (outside the model's window)\nnoted\n\n\
             ── summary of message [1] (what the model sees instead of them) ──\n\
             Goal: edit /srv/proj/a.rs\nConstraints: none\n\n\
             [2] user:\ngo on\n"
        ),
        "{stdout}"
    );

    let out = flytoctl(&fake, &["session_history", "s1", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["summary"],
        "Goal: edit /srv/proj/a.rs\nConstraints: none"
    );
    assert_eq!(json["session"]["context"]["compact_at"], 97_000);
    assert_eq!(json["messages"][2]["idx"], 2);

    let out = flytoctl(&fake, &["stats"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("\ncompactions:        5\n"), "{stdout}");
    assert!(stdout.contains("\nbreakers open:      1\n"), "{stdout}");
    assert!(
        stdout.ends_with(
            "contexts (fullest first):\n\
             \x20 s3: 18,200 / 97,000 tokens before compaction\n\
             \x20 s9: 1,200 tokens (model unknown)\n"
        ),
        "{stdout}"
    );
    let out = flytoctl(&fake, &["stats", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["compactions"], 5);
    assert_eq!(json["breakers_open"], 1);
    assert_eq!(json["contexts"][0]["session"], "s3");
    assert_eq!(json["contexts"][0]["context"]["tokens"], 18_200);
}
