//! The kernel sandbox under the agent's commands: what an agent's `bash`
//! and the plans it submits cannot touch, whatever the policy allows.

// Helpers outside #[test] fns build fixtures; a failure there is the test's.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_protocol::SessionEvent;
use flyto_tests::fake_llm::{FakeLlm, Reply};
use flyto_tests::sessions_support::{BASE, done, new_session, request_tool_result, send, workdir};
use flyto_tests::{Daemon, TestEnv, bin};
use std::path::PathBuf;

/// Every built-in check switched off: only the kernel stands in the way.
const POLICY_OFF: &str = "[permissions]\nallow_builtin = [\"recursive-delete\", \"recursive-permissions\", \"raw-device\", \"fork-bomb\", \"shutdown\", \"force-push\", \"download-to-shell\", \"dynamic-code\"]\n";

struct Setup {
    fake: FakeLlm,
    env: TestEnv,
    daemon: Daemon,
    /// The daemon's HOME, outside every workdir, with `.ssh/id_rsa` and
    /// `notes.txt`.
    home: PathBuf,
}

/// flytod with `extra` config and a fake model playing `script`. Scripts
/// name paths through the environment flytod (and so the tool) gets:
/// `$SBX_OUT` (outside every workdir), `$SBX_STATE`, `$SBX_CONFIG`,
/// `$SBX_CTL` (flytoctl), `$HOME`.
fn setup(extra: &str, script: Vec<Reply>, daemon_env: &[(&str, &str)]) -> Setup {
    let fake = FakeLlm::start(script);
    let env = TestEnv::new(&format!("{BASE}{extra}\n{}", fake.config()));
    let home = env.tmp.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), "PRIVATE KEY MATERIAL\n").unwrap();
    std::fs::write(home.join("notes.txt"), "the user's notes\n").unwrap();
    let out = env.tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let (home_s, out_s) = (home.display().to_string(), out.display().to_string());
    let state = env.state.display().to_string();
    let config = env.config.display().to_string();
    let ctl = bin("flytoctl").display().to_string();
    let mut vars = vec![
        ("HOME", home_s.as_str()),
        ("SBX_OUT", out_s.as_str()),
        ("SBX_STATE", state.as_str()),
        ("SBX_CONFIG", config.as_str()),
        ("SBX_CTL", ctl.as_str()),
    ];
    vars.extend_from_slice(daemon_env);
    let daemon = env
        .try_start(&vars)
        .unwrap_or_else(|log| panic!("flytod did not start:\n{log}"));
    Setup {
        fake,
        env,
        daemon,
        home,
    }
}

impl Setup {
    fn out(&self) -> PathBuf {
        self.env.tmp.path().join("out")
    }

    /// Runs one agent turn in a new session working in `ws`; the result of
    /// tool call `call`.
    fn turn(&self, call: &str) -> (Vec<SessionEvent>, String) {
        let dir = workdir(&self.env, "ws");
        let id = new_session(&self.env, &dir);
        let events = send(&self.env, &id, "go");
        let requests = self.fake.requests();
        let result = request_tool_result(&requests[1], call);
        (events, result)
    }
}

fn bash(call: &str, command: &str) -> Reply {
    Reply::tool_call(call, "bash", serde_json::json!({ "command": command }))
}

#[test]
fn the_kernel_confines_an_agents_bash_even_with_the_policy_off() {
    let command = "echo x > \"$SBX_OUT/outside.txt\"; echo write=$?; \
         rm -f \"$HOME/notes.txt\"; echo delete=$?; \
         ls -A \"$SBX_STATE\"; echo state=$?; cat \"$SBX_STATE/flytod.lock\"; echo lock=$?; \
         cat \"$HOME/.ssh/id_rsa\"; echo key=$?; \
         echo y >> \"$SBX_CONFIG\"; echo config=$?; \
         bash -c 'sh -c \"touch $SBX_OUT/grandchild\"'; echo grandchild=$?; \
         umount \"$SBX_STATE\" 2>/dev/null; echo umount=$?; \
         echo in > inside.txt && cat inside.txt; \
         echo tmp > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"";
    let s = setup(
        POLICY_OFF,
        vec![bash("call_escape", command), Reply::text("ok")],
        &[],
    );
    let config_before = std::fs::read_to_string(&s.env.config).unwrap();
    let (events, result) = s.turn("call_escape");
    assert!(done(&events), "{events:#?}");

    // Each attempt failed with the command's own error...
    for refused in [
        "write=1",
        "delete=1",
        "lock=1",
        "key=1",
        "config=1",
        "grandchild=1",
    ] {
        assert!(result.contains(refused), "{refused} in:\n{result}");
    }
    // The mounts that hide things cannot be taken away from inside.
    assert!(
        result.contains("umount=") && !result.contains("umount=0"),
        "{result}"
    );
    assert!(!result.contains("PRIVATE KEY"), "{result}");
    // ...and a line from flytod says where it came from.
    assert!(
        result.contains("flytod: the sandbox (workspace-write) blocks writes outside the workdir"),
        "{result}"
    );
    // The state dir looks empty from inside: its listing names nothing.
    let listing: Vec<&str> = result
        .lines()
        .skip_while(|l| !l.starts_with("delete="))
        .skip(1)
        .take_while(|l| !l.starts_with("state="))
        .collect();
    assert!(listing.is_empty(), "{listing:?} in:\n{result}");
    // The same commands work inside the workdir and TMPDIR.
    assert!(result.contains("\nin\n"), "{result}");
    assert!(result.contains("\ntmp\n"), "{result}");
    assert_eq!(
        std::fs::read_to_string(s.env.work.join("ws/inside.txt")).unwrap(),
        "in\n"
    );

    // And nothing outside changed.
    assert!(!s.out().join("outside.txt").exists());
    assert!(!s.out().join("grandchild").exists());
    assert_eq!(
        std::fs::read_to_string(s.home.join("notes.txt")).unwrap(),
        "the user's notes\n"
    );
    assert_eq!(
        std::fs::read_to_string(s.home.join(".ssh/id_rsa")).unwrap(),
        "PRIVATE KEY MATERIAL\n"
    );
    assert_eq!(
        std::fs::read_to_string(&s.env.config).unwrap(),
        config_before
    );

    let stats = s.env.ctl(&["stats"]);
    assert!(
        stats.stdout.contains("sandbox:") && stats.stdout.contains("landlock ABI"),
        "{}",
        stats.stdout
    );
}

#[test]
fn a_plan_an_agent_submits_stays_in_its_sandbox_and_a_users_does_not() {
    // Through FLYTO_PLAN_SOCK, as any program the agent starts would.
    let command = "\"$SBX_CTL\" submit_plan --run 'echo planned > \"$SBX_OUT/from-plan.txt\"; echo rc=$?' --wait; \
         echo submit=$?; ls /proc/self/ns >/dev/null";
    let s = setup(
        POLICY_OFF,
        vec![bash("call_plan", command), Reply::text("done")],
        &[],
    );
    let (events, result) = s.turn("call_plan");
    assert!(done(&events), "{events:#?}");
    assert!(result.contains("Permission denied"), "{result}");
    assert!(result.contains("rc=1"), "{result}");
    assert!(!s.out().join("from-plan.txt").exists());

    // The same plan from the user runs unconfined.
    let target = s.out().join("from-plan.txt");
    let out = s.env.ctl(&[
        "submit_plan",
        "--run",
        &format!("echo planned > {}", target.display()),
        "--wait",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "planned\n");

    // A user's plan file may ask for the sandbox.
    let plan = s.env.work.join("confined.toml");
    let inside = s.env.work.join("ws");
    std::fs::write(
        &plan,
        format!(
            "sandbox = \"workspace-write\"\n[[steps]]\nid = \"a\"\nworkdir = \"{}\"\nrun = \"echo ok > here.txt; echo x > {}/plan-file.txt\"\n",
            inside.display(),
            s.out().display()
        ),
    )
    .unwrap();
    let out = s
        .env
        .ctl(&["submit_plan", plan.to_str().unwrap(), "--wait"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("Permission denied") || out.stderr.contains("Permission denied"),
        "{}{}",
        out.stdout,
        out.stderr
    );
    assert!(inside.join("here.txt").exists());
    assert!(!s.out().join("plan-file.txt").exists());
}

#[test]
fn no_network_refuses_tcp_connect_and_the_default_allows_it() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let command = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')\"; echo net=$?"
    );
    let s = setup(
        "",
        vec![
            bash("call_open", &command),
            Reply::text("one"),
            bash("call_closed", &command),
            Reply::text("two"),
        ],
        &[],
    );
    let (_, open) = s.turn("call_open");
    assert!(
        open.contains("connected") && open.contains("net=0"),
        "{open}"
    );

    let dir = workdir(&s.env, "ws2");
    let out = s.env.ctl(&[
        "session_new",
        "--no-network",
        "--workdir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = out.stdout.trim().to_string();
    let events = send(&s.env, &id, "again");
    assert!(done(&events), "{events:#?}");
    let closed = request_tool_result(&s.fake.requests()[3], "call_closed");
    assert!(closed.contains("net=1"), "{closed}");
    assert!(closed.contains("PermissionError"), "{closed}");
    drop(listener);
}

#[test]
fn without_landlock_flytod_says_so_and_require_refuses() {
    let s = setup(
        "",
        vec![bash("call_x", "echo ran"), Reply::text("ok")],
        &[("FLYTO_SANDBOX_PROBE", "unavailable")],
    );
    let stats = s.env.ctl(&["stats"]);
    assert!(stats.stdout.contains("sandbox:") && stats.stdout.contains("unavailable"));
    assert!(
        s.daemon.log().contains("agents' commands run unconfined"),
        "{}",
        s.daemon.log()
    );
    let (events, result) = s.turn("call_x");
    assert!(result.contains("ran"), "{result}");
    assert!(
        events.iter().any(|e| matches!(e, SessionEvent::Notice { message } if message.contains("commands run unconfined"))),
        "{events:#?}"
    );

    let s = setup(
        "[sandbox]\nrequire = true\n",
        vec![bash("call_y", "echo ran > ran.txt"), Reply::text("ok")],
        &[("FLYTO_SANDBOX_PROBE", "unavailable")],
    );
    let (events, result) = s.turn("call_y");
    assert!(done(&events), "{events:#?}");
    assert!(
        result.contains("the sandbox is required") && result.contains("require = false"),
        "{result}"
    );
    assert!(!s.env.work.join("ws/ran.txt").exists());
}

#[test]
fn a_read_only_session_writes_nowhere_but_its_tmpdir() {
    let s = setup(
        "",
        vec![
            bash(
                "call_ro",
                "echo a > in-workdir.txt; echo ws=$?; echo b > \"$TMPDIR/t\" && echo tmp=ok; echo tmpdir=$TMPDIR",
            ),
            Reply::text("ok"),
        ],
        &[],
    );
    let dir = workdir(&s.env, "ro");
    let out = s.env.ctl(&[
        "session_new",
        "--sandbox",
        "read-only",
        "--workdir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = out.stdout.trim().to_string();
    let events = send(&s.env, &id, "write");
    assert!(done(&events), "{events:#?}");
    let result = request_tool_result(&s.fake.requests()[1], "call_ro");
    assert!(
        result.contains("ws=1") && result.contains("tmp=ok"),
        "{result}"
    );
    assert!(!dir.join("in-workdir.txt").exists());
    // Its TMPDIR is its own, and goes when the session does.
    let tmpdir = result
        .lines()
        .find_map(|l| l.strip_prefix("tmpdir="))
        .expect("the tool printed its TMPDIR")
        .to_string();
    assert!(tmpdir.ends_with(&format!("/{id}")), "{tmpdir}");
    assert!(std::path::Path::new(&tmpdir).join("t").exists());
    let out = s.env.ctl(&["session_delete", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!std::path::Path::new(&tmpdir).exists());

    let out = s.env.ctl(&["session_new", "--sandbox", "strict"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
}

#[test]
fn without_user_namespaces_hidden_paths_are_left_out_of_the_read_grants() {
    let command = "cat \"$HOME/.ssh/id_rsa\"; echo key=$?; ls \"$SBX_STATE\"; echo state=$?; \
         cat \"$HOME/notes.txt\"; echo x > \"$SBX_OUT/o\"; echo write=$?; \
         echo in > inside.txt && cat inside.txt";
    let s = setup(
        POLICY_OFF,
        vec![bash("call_fallback", command), Reply::text("ok")],
        &[("FLYTO_SANDBOX_PROBE", "no-userns")],
    );
    let stats = s.env.ctl(&["stats"]);
    assert!(
        stats.stdout.contains("no mount namespace"),
        "{}",
        stats.stdout
    );
    assert!(
        s.daemon.log().contains("no mount namespace"),
        "{}",
        s.daemon.log()
    );
    let (events, result) = s.turn("call_fallback");
    assert!(done(&events), "{events:#?}");
    assert!(
        result.contains("key=1") && !result.contains("PRIVATE KEY"),
        "{result}"
    );
    assert!(result.contains("state=2"), "{result}");
    assert!(result.contains("the user's notes"), "{result}");
    assert!(
        result.contains("write=1") && result.contains("\nin\n"),
        "{result}"
    );
    assert!(!s.out().join("o").exists());
}

#[test]
fn a_workdir_made_again_between_commands_stays_writable() {
    let s = setup(
        "",
        vec![
            bash("call_1", "echo one > one.txt; echo w=$?"),
            Reply::text("one"),
            bash("call_2", "echo two > two.txt; echo w=$?"),
            Reply::text("two"),
        ],
        &[],
    );
    let dir = workdir(&s.env, "again");
    let id = new_session(&s.env, &dir);
    assert!(done(&send(&s.env, &id, "first")));
    assert!(dir.join("one.txt").exists());
    // The user replaces the folder (a fresh checkout, say).
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    assert!(done(&send(&s.env, &id, "second")));
    let result = request_tool_result(&s.fake.requests()[3], "call_2");
    assert!(result.contains("w=0"), "{result}");
    assert!(dir.join("two.txt").exists());
}

/// A real server the test user runs, stopped when dropped.
struct UserServer {
    stop: Vec<String>,
    env: Vec<(String, String)>,
}

impl UserServer {
    /// Starts `program args` (a tmux or screen server that detaches), or
    /// fails the test saying how to install it.
    fn start(program: &str, args: &[&str], env: &[(&str, &str)], stop: &[&str]) -> UserServer {
        let status = std::process::Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .status()
            .unwrap_or_else(|e| {
                panic!("cannot run {program} ({e}): install it (apt-get install {program}; .ci/run does)")
            });
        assert!(status.success(), "{program} {args:?}: {status}");
        UserServer {
            stop: std::iter::once(program)
                .chain(stop.iter().copied())
                .map(String::from)
                .collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }
}

impl Drop for UserServer {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.stop[0])
            .args(&self.stop[1..])
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .status();
    }
}

#[test]
fn an_agent_cannot_reach_the_users_tmux_screen_or_any_other_unix_socket() {
    use std::os::linux::net::SocketAddrExt;
    let tag = format!("flyto-gate-{}", std::process::id());
    let s = setup(
        POLICY_OFF,
        vec![bash("call_gate", "sh ./escape.sh"), Reply::text("ok")],
        &[],
    );
    let out = s.out();
    let sockets = s.env.tmp.path().join("sockets");
    std::fs::create_dir_all(&sockets).unwrap();
    let screendir = s.env.tmp.path().join("screens");
    std::fs::create_dir_all(&screendir).unwrap();
    std::fs::set_permissions(
        &screendir,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let screendir_s = screendir.display().to_string();
    let tmux_sock = sockets.join("tmux.sock");
    let tmux_sock_s = tmux_sock.display().to_string();

    // The user's own servers: tmux in its default folder and at a path
    // nothing hides, screen in a folder nothing hides.
    let _tmux_default = UserServer::start(
        "tmux",
        &["-L", &tag, "new-session", "-d", "sleep", "600"],
        &[],
        &["-L", &tag, "kill-server"],
    );
    let _tmux_path = UserServer::start(
        "tmux",
        &["-S", &tmux_sock_s, "new-session", "-d", "sleep", "600"],
        &[],
        &["-S", &tmux_sock_s, "kill-server"],
    );
    let _screen = UserServer::start(
        "screen",
        &["-dmS", &tag, "sleep", "600"],
        &[("SCREENDIR", &screendir_s)],
        &["-S", &tag, "-X", "quit"],
    );
    // Any other server: one on a path, one on an abstract name.
    let unix_path = sockets.join("server.sock");
    let path_listener = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
    path_listener.set_nonblocking(true).unwrap();
    let abstract_addr = std::os::unix::net::SocketAddr::from_abstract_name(tag.as_bytes()).unwrap();
    let abstract_listener = std::os::unix::net::UnixListener::bind_addr(&abstract_addr).unwrap();
    abstract_listener.set_nonblocking(true).unwrap();

    // Written to the workdir beforehand: what the policy sees is only
    // `sh ./escape.sh`, so this is the kernel's work alone.
    let ws = workdir(&s.env, "ws");
    let py_connect = |label: &str, addr: &str| {
        format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect({addr}); print('reached')\" 2>&1 | tail -1 | sed 's/^/{label}: /'"
        )
    };
    std::fs::write(
        ws.join("escape.sh"),
        format!(
            "tmux -L {tag} run-shell 'touch {out}/tmux-default'; echo tmux-default=$?\n\
             tmux -S {tmux_sock_s} run-shell 'touch {out}/tmux-path'; echo tmux-path=$?\n\
             SCREENDIR={screendir_s} screen -S {tag} -X exec touch {out}/screen; echo screen=$?\n\
             {path}\n\
             {abs}\n\
             \"$SBX_CTL\" --socket {main} submit_plan --run 'touch {out}/main-socket'; echo main=$?\n\
             python3 -c \"import socket; s=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendto(b'x', '{path_s}')\" 2>&1 | tail -1 | sed 's/^/dgram: /'\n\
             python3 -c \"import socket,os; p=os.environ['TMPDIR']+'/own.sock'; l=socket.socket(socket.AF_UNIX); l.bind(p); l.listen(); c=socket.socket(socket.AF_UNIX); c.connect(p); print('own=ok')\"\n",
            out = out.display(),
            path = py_connect("path", &format!("'{}'", unix_path.display())),
            abs = py_connect("abstract", &format!("'\\\\0{tag}'")),
            main = s.env.sock.display(),
            path_s = unix_path.display(),
        ),
    )
    .unwrap();

    let (events, result) = s.turn("call_gate");
    assert!(done(&events), "{events:#?}");
    for refused in [
        "tmux-default=1",
        "tmux-path=1",
        "screen=1",
        "path: PermissionError",
        "abstract: PermissionError",
        "dgram: PermissionError",
    ] {
        assert!(result.contains(refused), "{refused} in:\n{result}");
    }
    assert!(!result.contains("reached"), "{result}");
    assert!(!result.contains("main=0"), "{result}");
    // The agent's own sockets still work.
    assert!(result.contains("own=ok"), "{result}");
    // Nothing ran outside and no server saw a connection.
    for name in ["tmux-default", "tmux-path", "screen", "main-socket"] {
        assert!(!out.join(name).exists(), "{name} ran outside:\n{result}");
    }
    assert!(path_listener.accept().is_err(), "{result}");
    assert!(abstract_listener.accept().is_err(), "{result}");
    // The user's servers still work for the user.
    let mine = std::process::Command::new("tmux")
        .args([
            "-S",
            &tmux_sock_s,
            "run-shell",
            &format!("touch {}/by-user", out.display()),
        ])
        .status()
        .unwrap();
    assert!(mine.success());
    assert!(out.join("by-user").exists());
}

#[test]
fn no_network_sends_no_packet_of_any_protocol() {
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let port = udp.local_addr().unwrap().port();
    let command = format!(
        "python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'leak', ('127.0.0.1', {port})); print('sent')\"; \
         python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'leak', ('192.0.2.1', 53))\" 2>&1 | tail -1; \
         python3 -c \"import socket; l=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); l.bind(('127.0.0.1', 0)); l.sendto(b'ok', l.getsockname()); print('loopback=' + l.recv(8).decode())\""
    );
    let s = setup(
        "",
        vec![bash("call_udp", &command), Reply::text("done")],
        &[],
    );
    let dir = workdir(&s.env, "ws");
    let out = s.env.ctl(&[
        "session_new",
        "--no-network",
        "--workdir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = out.stdout.trim().to_string();
    let events = send(&s.env, &id, "go");
    assert!(done(&events), "{events:#?}");
    let result = request_tool_result(&s.fake.requests()[1], "call_udp");
    // The sandbox's loopback is its own: the datagram went nowhere, and no
    // route leads out.
    assert!(result.contains("sent"), "{result}");
    assert!(result.contains("Network is unreachable"), "{result}");
    assert!(result.contains("loopback=ok"), "{result}");
    let mut buf = [0u8; 16];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "a datagram left: {result}"
    );
}
