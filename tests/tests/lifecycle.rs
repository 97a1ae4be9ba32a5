//! The daemon's life as a service: draining on SIGTERM, one instance per
//! state dir and per socket, the socket's hygiene (stale files, permissions,
//! other users, socket activation), SIGHUP reloads, sd_notify, and the
//! command line.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::durability::{cancel, lines, wait_no_step_processes};
use flyto_protocol::{Client, ClientError, ErrorCode, PlanState, Request, Response, StepState};
use flyto_tests::{DEADLINE, TestEnv, bin, wait_until};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A one-second drain and a quick SIGKILL after SIGTERM.
const DRAIN: &str = "[daemon]\nshutdown_grace = \"1s\"\n[plans]\nkill_grace = \"200ms\"\n";

fn ping(sock: &Path) -> u32 {
    match Client::connect(sock)
        .expect("connect")
        .call(&Request::Ping {})
        .expect("ping")
    {
        Response::Pong { pid, .. } => pid,
        other => panic!("unexpected answer {other:?}"),
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

fn expect_refused(env: &TestEnv, extra: &[(&str, &str)]) -> String {
    match env.try_start(extra) {
        Ok(daemon) => panic!(
            "a second flytod started (pid {}) but should have been refused",
            daemon.pid()
        ),
        Err(log) => log,
    }
}

/// A command that records its start in `starts` and then ignores SIGTERM
/// for as long as it is let run (its background `sleep` is only reachable
/// through the process group).
fn stubborn(starts: &Path) -> String {
    format!(
        "trap '' TERM; echo started >> {}; sleep 300 & wait",
        starts.display()
    )
}

#[test]
fn sigterm_lets_a_step_finish_within_the_grace_and_it_is_not_run_again() {
    let env = TestEnv::new(DRAIN);
    let started = env.work.join("started");
    let mut daemon = env.start();
    let id = env.submit(TestEnv::run_plan(&format!(
        "touch {}; sleep 0.3; echo done",
        started.display()
    )));
    wait_until("the step to start", DEADLINE, || {
        started.exists().then_some(())
    });
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait_exit(DEADLINE);
    assert!(
        status.success(),
        "flytod exited with {status}:\n{}",
        daemon.log()
    );

    let _daemon = env.start();
    let plan = env.status(&id);
    assert_eq!(plan.state, PlanState::Succeeded, "{plan:?}");
    let step = &plan.steps[0];
    assert_eq!(step.attempts, 1, "the finished step ran again: {plan:?}");
    assert_eq!(step.stdout_tail, "done\n");
    assert_eq!(step.exit_code, Some(0));
}

#[test]
fn sigterm_kills_a_step_that_outlives_the_grace_and_it_runs_again() {
    let env = TestEnv::new(DRAIN);
    let starts = env.work.join("starts");
    let mut daemon = env.start();
    let id = env.submit(TestEnv::run_plan(&stubborn(&starts)));
    let marker = format!("{id}/main");
    wait_until("the step to start", DEADLINE, || {
        (lines(&starts) == 1).then_some(())
    });
    let signalled = Instant::now();
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(15));
    let took = signalled.elapsed();
    assert!(
        status.success(),
        "flytod exited with {status}:\n{}",
        daemon.log()
    );
    assert!(
        took >= Duration::from_millis(900),
        "flytod exited after {took:?}, before the step's 1 s shutdown grace"
    );
    // SIGKILLed by flytod before it exited (it does not wait for them to
    // be reaped), so they go at once.
    wait_no_step_processes(&env, &marker);

    let _daemon = env.start();
    let plan = env.wait_plan(&id, "the step to run again", |p| {
        p.steps[0].state == StepState::Running && p.steps[0].attempts == 2
    });
    let error = plan.steps[0].error.as_deref().unwrap_or_default();
    assert!(error.contains("interrupted"), "{plan:?}");
    wait_until("the second attempt to start", DEADLINE, || {
        (lines(&starts) == 2).then_some(())
    });
    assert_eq!(cancel(&env, &id), PlanState::Cancelled);
    wait_no_step_processes(&env, &marker);
}

#[test]
fn submits_during_the_drain_are_answered_unavailable() {
    // The step holds flytod in its drain until `go` exists; the long grace
    // keeps a slow machine from ending the drain before the checks.
    let env = TestEnv::new("[daemon]\nshutdown_grace = \"60s\"\n[plans]\nkill_grace = \"200ms\"\n");
    let starts = env.work.join("starts");
    let go = env.work.join("go");
    let mut daemon = env.start();
    let id = env.submit(TestEnv::run_plan(&format!(
        "trap '' TERM; echo started >> {}; while [ ! -f {} ]; do sleep 0.05; done; echo drained",
        starts.display(),
        go.display()
    )));
    wait_until("the step to start", DEADLINE, || {
        (lines(&starts) == 1).then_some(())
    });
    daemon.signal(libc::SIGTERM);
    daemon
        .wait_notify("STOPPING=1", DEADLINE)
        .expect("STOPPING=1");

    let answer = env.client().call(&Request::SubmitPlan {
        plan: TestEnv::run_plan("echo late"),
        idempotency_key: None,
    });
    match answer {
        Err(ClientError::Remote { code, message }) => {
            assert_eq!(code, ErrorCode::Unavailable, "{message}");
            assert!(message.contains("shutting down"), "{message}");
        }
        other => panic!("a submit during the drain got {other:?}"),
    }
    let out = env.ctl(&["submit_plan", "--run", "echo late"]);
    assert_eq!(
        out.code, 6,
        "stdout: {}\nstderr: {}",
        out.stdout, out.stderr
    );
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(out.stderr.contains("shutting down"), "{}", out.stderr);
    // Reads are still answered while draining.
    assert_eq!(env.status(&id).steps[0].state, StepState::Running);

    std::fs::write(&go, "").unwrap();
    let status = daemon.wait_exit(DEADLINE);
    assert!(status.success(), "flytod exited with {status}");
    // The step finished inside the drain; the late submits left no trace.
    let _daemon = env.start();
    let plan = env.status(&id);
    assert_eq!(plan.state, PlanState::Succeeded, "{plan:?}");
    assert_eq!(plan.steps[0].stdout_tail, "drained\n");
    let all = env.plans();
    assert_eq!(all.len(), 1, "{all:?}");
}

#[test]
fn a_second_instance_on_the_same_state_dir_names_the_first() {
    let env = TestEnv::new("");
    let daemon = env.start();
    let log = expect_refused(&env, &[]);
    assert!(
        log.contains(&format!("pid {}", daemon.pid())),
        "the refusal should name pid {}:\n{log}",
        daemon.pid()
    );
    assert!(log.contains("already running"), "{log}");
    assert!(log.contains("exit status: 1"), "{log}");
    assert_eq!(ping(&env.sock), daemon.pid() as u32);
}

#[test]
fn a_second_instance_on_the_same_socket_is_refused() {
    let env = TestEnv::new("");
    let daemon = env.start();
    let other_home = env.tmp.path().join("other-state");
    let log = expect_refused(&env, &[("FLYTO_HOME", other_home.to_str().unwrap())]);
    assert!(log.contains("another flytod is serving"), "{log}");
    assert!(log.contains(&env.sock.display().to_string()), "{log}");
    assert_eq!(ping(&env.sock), daemon.pid() as u32);
}

#[test]
fn a_stale_socket_left_by_sigkill_is_replaced() {
    let env = TestEnv::new("");
    let daemon = env.start();
    daemon.kill9();
    let meta = std::fs::symlink_metadata(&env.sock).expect("the killed daemon's socket file");
    assert!(meta.file_type().is_socket());

    let daemon = env.start();
    assert!(
        daemon.log().contains("removing stale socket"),
        "{}",
        daemon.log()
    );
    assert_eq!(ping(&env.sock), daemon.pid() as u32);
}

#[test]
fn a_file_that_is_not_a_socket_is_left_alone() {
    let env = TestEnv::new("");
    std::fs::create_dir_all(env.sock.parent().unwrap()).unwrap();
    std::fs::write(&env.sock, "precious").unwrap();
    let log = expect_refused(&env, &[]);
    assert!(log.contains("is not a socket"), "{log}");
    assert!(log.contains(&env.sock.display().to_string()), "{log}");
    assert_eq!(std::fs::read_to_string(&env.sock).unwrap(), "precious");
}

#[test]
fn the_socket_is_private_to_its_user() {
    let env = TestEnv::new("");
    let dir = env.sock.parent().unwrap().to_path_buf();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _daemon = env.start();
    assert_eq!(mode(&env.sock), 0o600, "socket mode");
    assert_eq!(mode(&dir), 0o700, "socket directory mode");
}

/// `path` can be run by any user: every ancestor directory is searchable by
/// others and the file is readable and executable by them.
fn runnable_by_anyone(path: &Path) -> bool {
    mode(path) & 0o005 == 0o005
        && path
            .ancestors()
            .skip(1)
            .filter(|d| !d.as_os_str().is_empty())
            .all(|d| mode(d) & 0o001 != 0)
}

#[test]
fn another_user_is_refused_and_the_daemon_keeps_serving() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to connect as another user (uid 65534)");
        return;
    }
    let env = TestEnv::new("");
    let daemon = env.start();
    // Let the kernel allow another user to reach the socket, so that
    // flytod's own peer check is what refuses it.
    let dir = env.sock.parent().unwrap();
    for (path, bits) in [(env.tmp.path(), 0o755), (dir, 0o755), (&*env.sock, 0o666)] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(bits)).unwrap();
    }
    let mut ctl = bin("flytoctl");
    if !runnable_by_anyone(&ctl) {
        let copy = env.tmp.path().join("flytoctl");
        std::fs::copy(&ctl, &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
        ctl = copy;
    }
    let out = Command::new(&ctl)
        .arg("ping")
        .env_clear()
        .env("FLYTO_SOCK", &env.sock)
        .env("HOME", "/")
        .env("NO_COLOR", "1")
        .uid(65534)
        .gid(65534)
        .stdin(Stdio::null())
        .output()
        .expect("run flytoctl as uid 65534");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "stderr: {stderr}");
    assert!(stderr.contains("PermissionDenied"), "{stderr}");
    assert!(stderr.contains("uid 0"), "{stderr}");
    wait_until("the refusal in the daemon log", DEADLINE, || {
        daemon
            .log()
            .contains("refused a connection from another user")
            .then_some(())
    });
    assert_eq!(ping(&env.sock), daemon.pid() as u32);
}

/// Answered by the scheduler only after everything it did before is synced
/// and published: once this returns, earlier submits have been scheduled.
fn scheduler_barrier(env: &TestEnv) {
    match env.client().call(&Request::PlanCancel {
        id: "p999999".into(),
    }) {
        Err(ClientError::Remote {
            code: ErrorCode::NotFound,
            ..
        }) => {}
        other => panic!("unexpected answer {other:?}"),
    }
}

#[test]
fn sighup_reloads_the_config_and_keeps_it_when_the_new_one_is_invalid() {
    let env = TestEnv::new("[plans]\nmax_parallel_plans = 1\nkill_grace = \"200ms\"\n");
    let daemon = env.start();
    let a = env.submit(TestEnv::run_plan("sleep 300"));
    env.wait_plan(&a, "running", |p| p.state == PlanState::Running);
    let b = env.submit(TestEnv::run_plan("sleep 300"));
    scheduler_barrier(&env);
    assert_eq!(env.status(&b).state, PlanState::Pending);

    env.write_config("[plans]\nmax_parallel_plans = 2\nkill_grace = \"200ms\"\n");
    daemon.signal(libc::SIGHUP);
    wait_until("\"config reloaded\" in the log", DEADLINE, || {
        daemon.log().contains("config reloaded").then_some(())
    });
    env.wait_plan(&b, "running", |p| p.state == PlanState::Running);
    assert_eq!(env.status(&a).state, PlanState::Running);

    // An invalid file (a misspelt key) is refused as a whole: its
    // max_parallel_plans = 3 must not take effect either.
    env.write_config("[plans]\nmax_parallel_plans = 3\nmax_paralel_steps = 2\n");
    daemon.signal(libc::SIGHUP);
    let log = wait_until("the failed reload in the log", DEADLINE, || {
        let log = daemon.log();
        log.contains("config reload failed").then_some(log)
    });
    assert!(log.contains("keeping the running config"), "{log}");
    assert!(log.contains("max_paralel_steps"), "{log}");
    assert_eq!(ping(&env.sock), daemon.pid() as u32);
    let c = env.submit(TestEnv::run_plan("sleep 300"));
    scheduler_barrier(&env);
    assert_eq!(env.status(&c).state, PlanState::Pending);
    // The kept config has two slots: freeing one starts `c`.
    assert_eq!(cancel(&env, &a), PlanState::Cancelled);
    env.wait_plan(&c, "running", |p| p.state == PlanState::Running);
    assert_eq!(env.status(&b).state, PlanState::Running);
    assert_eq!(cancel(&env, &b), PlanState::Cancelled);
    assert_eq!(cancel(&env, &c), PlanState::Cancelled);
}

/// A flytod started by hand; killed when dropped.
struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn a_socket_passed_by_the_service_manager_is_used_and_left_in_place() {
    let env = TestEnv::new("");
    let dir = env.sock.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let listener = UnixListener::bind(&env.sock).expect("bind the activation socket");
    let notify_path = env.tmp.path().join("activation-notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let log_path: PathBuf = env.tmp.path().join("activation.log");
    let log = std::fs::File::create(&log_path).unwrap();

    // Like systemd: the socket is fd 3, LISTEN_FDS=1 and LISTEN_PID is the
    // daemon's own pid. The pid is only known in the child, so a shell sets
    // it to its own pid ($$) and execs flytod, which keeps that pid.
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("LISTEN_PID=$$; export LISTEN_PID; exec \"$0\"")
        .arg(bin("flytod"));
    for var in [
        "FLYTO_PLAN_SOCK",
        "RUNTIME_DIRECTORY",
        "STATE_DIRECTORY",
        "CONFIGURATION_DIRECTORY",
        "XDG_RUNTIME_DIR",
        "XDG_STATE_HOME",
        "XDG_CONFIG_HOME",
        "LISTEN_PID",
        "WATCHDOG_USEC",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.vars())
        .env("NOTIFY_SOCKET", &notify_path)
        .env("LISTEN_FDS", "1")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let fd = listener.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe calls (dup2, fcntl) on file descriptors; it touches
    // no memory shared with the parent's other threads.
    unsafe {
        cmd.pre_exec(move || {
            if fd != 3 && libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // dup2 clears FD_CLOEXEC on the copy, but not when fd already is 3.
            let flags = libc::fcntl(3, libc::F_GETFD);
            if flags < 0 || libc::fcntl(3, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut daemon = Spawned(cmd.spawn().expect("spawn flytod"));
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    let mut buf = [0u8; 4096];
    let ready = wait_until("READY=1 from the socket-activated flytod", DEADLINE, || {
        if let Ok(Some(status)) = daemon.0.try_wait() {
            panic!("flytod exited ({status}):\n{}", read_log());
        }
        let n = notify.recv(&mut buf).ok()?;
        let note = String::from_utf8_lossy(&buf[..n]).into_owned();
        note.contains("READY=1").then_some(note)
    });
    assert!(ready.contains(&env.sock.display().to_string()), "{ready}");
    assert_eq!(ping(&env.sock), daemon.0.id());
    assert!(
        read_log().contains("using the socket passed by systemd"),
        "{}",
        read_log()
    );

    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(daemon.0.id() as i32, libc::SIGTERM);
    }
    let status = wait_until("flytod to exit", DEADLINE, || {
        daemon.0.try_wait().ok().flatten()
    });
    assert!(
        status.success(),
        "flytod exited with {status}:\n{}",
        read_log()
    );
    let meta = std::fs::symlink_metadata(&env.sock)
        .expect("flytod removed the socket file the service manager owns");
    assert!(meta.file_type().is_socket());
    drop(listener);
}

#[test]
fn the_watchdog_is_fed_when_the_service_manager_asks_for_it() {
    let env = TestEnv::new("");
    let mut daemon = env
        .try_start(&[("WATCHDOG_USEC", "200000")])
        .unwrap_or_else(|log| panic!("flytod did not start:\n{log}"));
    daemon
        .wait_notify("WATCHDOG=1", DEADLINE)
        .unwrap_or_else(|why| panic!("{why}\n{}", daemon.log()));
}

#[test]
fn sd_notify_reports_ready_with_the_socket_and_stopping_on_sigterm() {
    let env = TestEnv::new("");
    let mut daemon = env.start();
    let ready = daemon
        .notes
        .iter()
        .find(|n| n.contains("READY=1"))
        .cloned()
        .expect("the READY=1 notification");
    let status = ready
        .lines()
        .find(|l| l.starts_with("STATUS="))
        .unwrap_or_else(|| panic!("no STATUS= with READY=1: {ready:?}"));
    assert!(status.contains(&env.sock.display().to_string()), "{status}");

    daemon.signal(libc::SIGTERM);
    daemon
        .wait_notify("STOPPING=1", DEADLINE)
        .unwrap_or_else(|why| panic!("{why}\n{}", daemon.log()));
    let exit = daemon.wait_exit(DEADLINE);
    assert!(exit.success(), "flytod exited with {exit}");
    assert!(
        !env.sock.exists(),
        "flytod left the socket file it created behind"
    );
}

#[test]
fn version_and_help() {
    let run = |arg: &str| {
        let out = Command::new(bin("flytod"))
            .arg(arg)
            .stdin(Stdio::null())
            .output()
            .expect("run flytod");
        assert!(out.status.success(), "flytod {arg}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let version = run("--version");
    assert_eq!(
        version.trim(),
        format!("flytod {}", env!("CARGO_PKG_VERSION"))
    );
    let help = run("--help");
    assert!(help.contains("check-config"), "{help}");
    assert!(help.contains("Exit codes"), "{help}");
    assert!(help.contains("SIGHUP"), "{help}");
}

/// Every file and directory under `dir` (not `dir` itself), with its mode.
fn tree_modes(dir: &Path) -> Vec<(PathBuf, u32, bool)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            let is_dir = meta.is_dir();
            out.push((entry.path(), meta.permissions().mode() & 0o777, is_dir));
            if is_dir {
                pending.push(entry.path());
            }
        }
    }
    out
}

/// Kills the child when the test ends, passed or not.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A foreground flytod keeps its state private (0700 directories, files
/// without group or other bits, also what an older flytod left open)
/// whatever umask it was started with, and the steps it runs get that
/// umask back.
#[test]
fn state_is_private_whatever_the_umask_and_steps_keep_the_umask() {
    for mask in [0o022, 0o000] {
        let env = TestEnv::new(DRAIN);
        std::fs::create_dir_all(&env.state).unwrap();
        std::fs::set_permissions(&env.state, std::fs::Permissions::from_mode(0o755)).unwrap();
        let old = env.state.join("left-by-an-old-version");
        std::fs::write(&old, "x").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();

        let mut cmd = Command::new(bin("flytod"));
        for var in [
            "FLYTO_PLAN_SOCK",
            "NOTIFY_SOCKET",
            "LISTEN_FDS",
            "LISTEN_PID",
        ] {
            cmd.env_remove(var);
        }
        cmd.envs(env.vars())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: umask is async-signal-safe and touches no shared memory.
        unsafe {
            cmd.pre_exec(move || {
                libc::umask(mask);
                Ok(())
            });
        }
        let _daemon = KillOnDrop(cmd.spawn().expect("spawn flytod"));
        wait_until("flytod to serve", DEADLINE, || {
            Client::connect(&env.sock)
                .ok()?
                .call(&Request::Ping {})
                .ok()
        });

        let id = env.submit(TestEnv::run_plan(
            "umask; echo data > made.txt; mkdir made.d",
        ));
        let view = env.wait_plan(&id, "finished", |p| p.state.is_terminal());
        assert_eq!(view.state, PlanState::Succeeded, "{view:?}");
        assert_eq!(view.steps[0].stdout_tail, format!("{mask:04o}\n"));
        assert_eq!(mode(&env.work.join("made.txt")), 0o666 & !mask);
        assert_eq!(mode(&env.work.join("made.d")), 0o777 & !mask);

        assert_eq!(mode(&env.state), 0o700, "umask {mask:o}: the state dir");
        let tree = tree_modes(&env.state);
        assert!(
            tree.iter()
                .any(|(p, _, _)| p.starts_with(env.state.join("logs"))),
            "no step log under {}: {tree:?}",
            env.state.display()
        );
        assert!(
            tree.iter()
                .any(|(p, _, _)| p.starts_with(env.state.join("db")))
        );
        for (path, m, is_dir) in &tree {
            if *is_dir {
                assert_eq!(*m, 0o700, "umask {mask:o}: {}", path.display());
            } else {
                assert_eq!(m & 0o077, 0, "umask {mask:o}: {} is {m:o}", path.display());
            }
        }
    }
}

/// Plan sockets a crashed flytod left behind are removed at start; one
/// that another process still serves is kept.
#[test]
fn stale_plan_sockets_are_removed_at_start() {
    let env = TestEnv::new(DRAIN);
    let dir = env.sock.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let stale = dir.join("plan-p41.sock");
    drop(UnixListener::bind(&stale).unwrap());
    let live = dir.join("plan-s7.sock");
    let _listener = UnixListener::bind(&live).unwrap();
    let other = dir.join("notes.sock");
    drop(UnixListener::bind(&other).unwrap());

    let daemon = env.start();
    assert!(!stale.exists(), "{}", daemon.log());
    assert!(
        daemon.log().contains("removing stale plan socket"),
        "{}",
        daemon.log()
    );
    assert!(live.exists(), "a socket that answers is kept");
    assert!(other.exists(), "only plan sockets are flytod's");
}

#[test]
fn a_socket_in_a_shared_folder_leaves_the_folder_as_it_was() {
    let env = TestEnv::new("");
    let shared = env.tmp.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let sock = shared.join("flytod.sock");
    let sock_arg = sock.display().to_string();
    let _daemon = env
        .try_start(&[("FLYTO_SOCK", sock_arg.as_str())])
        .unwrap_or_else(|log| panic!("{log}"));
    assert_eq!(mode(&sock), 0o600, "socket mode");
    assert_eq!(
        std::fs::metadata(&shared).unwrap().permissions().mode() & 0o7777,
        0o1777,
        "the shared folder was changed"
    );
}
