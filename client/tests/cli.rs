//! Runs the real `flytoctl` binary against a scripted fake daemon that
//! speaks the binary protocol on a temporary socket.

// Helpers outside #[test] fns are not covered by allow-unwrap-in-tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flyto_protocol::framing::{read_frame, write_frame};
use flyto_protocol::{
    ErrorCode, Event, PROTOCOL_VERSION, PlanState, PlanSummary, PlanView, Request, Response,
    StepState, StepView,
};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

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
                    id: "p1".into(),
                    name: Some("nightly".into()),
                    state: PlanState::Running,
                    created_ms: 0,
                    finished_ms: None,
                    steps_total: 2,
                    steps_done: 1,
                }],
            }])
        }
        Request::PlanCancel { id } => reply(vec![Response::PlanCancelled {
            id: id.clone(),
            state: PlanState::Cancelled,
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
        text(&out.stdout).contains("p1  running  1/2"),
        "{}",
        text(&out.stdout)
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
