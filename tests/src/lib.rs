//! flyto-tests: end-to-end tests and benchmarks that drive the real
//! `flytod` and `flytoctl` binaries. This library is the harness: an
//! isolated environment per test (temp state, socket and config), starting
//! the daemon and waiting for its sd_notify `READY=1`, killing it, and
//! running the CLI. Waiting is always for an event or a state, with a
//! deadline — never a fixed sleep.
//!
//! ```no_run
//! let env = flyto_tests::TestEnv::new("");
//! let daemon = env.start();
//! let out = env.ctl(&["submit_plan", "--run", "echo hi", "--wait"]);
//! assert_eq!(out.stdout, "hi\n");
//! ```

// This crate is test code: a panic is how a harness step fails a test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Read;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub use flyto_protocol;

pub mod fake_anthropic;
mod fake_http;
pub mod fake_ilink;
pub mod fake_llm;
pub mod fake_telegram;
pub mod fake_wecom;
pub mod pg;
pub mod policy_cases;
pub mod sessions_support;

/// The directory holding the built `flytod` and `flytoctl`: next to the
/// running test or bench binary (`target/<profile>/` or its `deps/`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first with `cargo build --workspace --bins` (add --release for benchmarks)",
        path.display()
    );
    path
}

/// Polls `f` until it returns `Some`, or panics naming `what` after `limit`.
pub fn wait_until<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// The default deadline for things that should happen promptly.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// One isolated flyto installation: state dir, socket, config, a work dir.
/// True while process `pid` is alive with every `KEY=value` of `vars` in
/// its environment (so a reused pid does not count). A var ending in `/`
/// is a prefix (a daemon's socket directory).
pub fn process_has(pid: i32, vars: &[&str]) -> bool {
    let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    vars.iter().all(|v| {
        environ.split(|b| *b == 0).any(|kv| {
            if v.ends_with('/') {
                kv.starts_with(v.as_bytes())
            } else {
                kv == v.as_bytes()
            }
        })
    })
}

/// Live processes with every one of `vars` (see [`process_has`]).
/// Zombies have no environment left and do not count.
pub fn processes_with(vars: &[&str]) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|&pid| process_has(pid, vars))
        .collect()
}

/// Where a test's daemon keeps its plans.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Backend {
    Sled,
    /// A PostgreSQL of the test's own (see [`TestEnv::on`]).
    Postgres,
}

pub struct TestEnv {
    /// With [`Backend::Postgres`]: the env's own server, stopped with it.
    pub pg: Option<pg::TestPostgres>,
    pub tmp: tempfile::TempDir,
    /// The state dir's parent when it is not under `tmp` (see
    /// [`TestEnv::with_state_in`]).
    pub state_tmp: Option<tempfile::TempDir>,
    pub state: PathBuf,
    pub sock: PathBuf,
    pub config: PathBuf,
    pub work: PathBuf,
}

#[derive(Debug)]
pub struct CtlOutput {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl TestEnv {
    /// `config` is the text of config.toml.
    pub fn new(config: &str) -> TestEnv {
        Self::with_state_in(config, None)
    }

    /// Like [`TestEnv::new`], with the state dir in a new directory under
    /// `parent` (another filesystem, say); the socket and config stay in
    /// /tmp.
    pub fn with_state_in(config: &str, parent: Option<&Path>) -> TestEnv {
        let state_tmp = parent.map(|p| {
            tempfile::Builder::new()
                .prefix("flyto-state-")
                .tempdir_in(p)
                .expect("state dir")
        });
        let tmp = tempfile::Builder::new()
            .prefix("flyto-")
            .tempdir_in("/tmp")
            .expect("temp dir");
        let root = tmp.path().to_path_buf();
        let env = TestEnv {
            pg: None,
            state: state_tmp
                .as_ref()
                .map_or_else(|| root.join("state"), |t| t.path().join("state")),
            sock: root.join("run/flytod.sock"),
            config: root.join("config.toml"),
            work: root.join("work"),
            tmp,
            state_tmp,
        };
        std::fs::create_dir_all(&env.work).expect("work dir");
        env.write_config(config);
        env
    }

    /// Like [`TestEnv::new`], with the daemon's plans on `backend`: for
    /// PostgreSQL, a server of this env's own, with the `[store]` section
    /// appended to `config` (so it may not have one). [`TestEnv::write_config`]
    /// keeps it.
    pub fn on(backend: Backend, config: &str) -> TestEnv {
        match backend {
            Backend::Sled => TestEnv::new(config),
            Backend::Postgres => {
                let pg = pg::TestPostgres::start();
                pg.create_database("flyto");
                let mut env = TestEnv::new("");
                env.pg = Some(pg);
                env.write_config(config);
                env
            }
        }
    }

    pub fn backend(&self) -> Backend {
        match self.pg {
            Some(_) => Backend::Postgres,
            None => Backend::Sled,
        }
    }

    pub fn write_config(&self, text: &str) {
        if let Some(pg) = &self.pg {
            let store = format!(
                "\n[store]\nbackend = \"postgres\"\nurl = \"{}\"\n",
                pg.url_for("flyto")
            );
            // A config read back and extended already has it.
            let text = text.replace(&store, "");
            std::fs::write(&self.config, format!("{text}{store}")).expect("write config");
            return;
        }
        std::fs::write(&self.config, text).expect("write config");
    }

    /// Environment variables that point flytod and flytoctl at this env.
    pub fn vars(&self) -> Vec<(String, String)> {
        vec![
            ("FLYTO_HOME".into(), self.state.display().to_string()),
            ("FLYTO_SOCK".into(), self.sock.display().to_string()),
            ("FLYTO_CONFIG".into(), self.config.display().to_string()),
            ("HOME".into(), self.work.display().to_string()),
            ("NO_COLOR".into(), "1".into()),
        ]
    }

    /// A command for `program` (flytod, flytoctl) pointed at this env.
    pub fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        for var in [
            "FLYTO_PLAN_SOCK",
            "RUNTIME_DIRECTORY",
            "STATE_DIRECTORY",
            "CONFIGURATION_DIRECTORY",
            "XDG_RUNTIME_DIR",
            "XDG_STATE_HOME",
            "XDG_CONFIG_HOME",
            "NOTIFY_SOCKET",
            "LISTEN_FDS",
            "LISTEN_PID",
            "WATCHDOG_USEC",
            "RUST_LOG",
        ] {
            cmd.env_remove(var);
        }
        cmd.envs(self.vars());
        cmd
    }

    /// Starts flytod and waits for READY=1; panics with its log if it fails.
    pub fn start(&self) -> Daemon {
        self.try_start(&[])
            .unwrap_or_else(|log| panic!("flytod did not become ready:\n{log}"))
    }

    /// Starts flytod with extra environment; `Err(log)` if it exits or does
    /// not report READY within the deadline.
    pub fn try_start(&self, extra: &[(&str, &str)]) -> Result<Daemon, String> {
        self.try_start_under(&[], extra)
    }

    /// Like [`TestEnv::try_start`], with flytod run by `wrapper` (a
    /// program and its arguments, flytod's path appended: `strace -o f`).
    /// The [`Daemon`]'s child is then the wrapper.
    pub fn try_start_under(
        &self,
        wrapper: &[&str],
        extra: &[(&str, &str)],
    ) -> Result<Daemon, String> {
        let notify_path = self.tmp.path().join(format!("notify-{}.sock", unique()));
        let notify = UnixDatagram::bind(&notify_path).expect("notify socket");
        notify
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let log_path = self.tmp.path().join(format!("flytod-{}.log", unique()));
        let log = std::fs::File::create(&log_path).expect("log file");
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = self.command(Path::new(program));
                cmd.args(args).arg(bin("flytod"));
                cmd
            }
            None => self.command(&bin("flytod")),
        };
        cmd.env("NOTIFY_SOCKET", &notify_path)
            .envs(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        let child = cmd.spawn().expect("spawn flytod");
        let mut daemon = Daemon {
            child,
            notify,
            log_path,
            notes: Vec::new(),
        };
        match daemon.wait_notify("READY=1", DEADLINE) {
            Ok(()) => Ok(daemon),
            Err(why) => {
                let _ = daemon.child.kill();
                let _ = daemon.child.wait();
                Err(format!("{why}\n--- flytod log ---\n{}", daemon.log()))
            }
        }
    }

    /// Runs flytoctl with `args` against this env and waits for it.
    pub fn ctl(&self, args: &[&str]) -> CtlOutput {
        self.ctl_with(args, &[], None)
    }

    pub fn ctl_with(
        &self,
        args: &[&str],
        extra: &[(&str, &str)],
        stdin: Option<&str>,
    ) -> CtlOutput {
        let mut cmd = self.command(&bin("flytoctl"));
        cmd.args(args)
            .envs(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())))
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn flytoctl");
        if let Some(input) = stdin {
            use std::io::Write;
            let mut pipe = child.stdin.take().expect("stdin");
            pipe.write_all(input.as_bytes()).expect("write stdin");
        }
        let out = child.wait_with_output().expect("flytoctl output");
        CtlOutput {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `FLYTO_PLAN_SOCK=<socket dir>/`: every plan socket this env's daemon
    /// hands to a child starts so (each plan and session gets its own).
    pub fn plan_sock_prefix(&self) -> String {
        let dir = self.sock.parent().unwrap_or(&self.sock);
        format!("FLYTO_PLAN_SOCK={}/", dir.display())
    }

    /// A protocol client (handshake done).
    pub fn client(&self) -> flyto_protocol::Client {
        flyto_protocol::Client::connect(&self.sock).expect("connect to flytod")
    }

    /// Submits a plan through the protocol and returns its id.
    pub fn submit(&self, plan: flyto_protocol::PlanSpec) -> String {
        match self
            .client()
            .call(&flyto_protocol::Request::SubmitPlan {
                plan,
                idempotency_key: None,
            })
            .expect("submit")
        {
            flyto_protocol::Response::PlanSubmitted { id, .. } => id,
            other => panic!("unexpected answer {other:?}"),
        }
    }

    pub fn status(&self, id: &str) -> flyto_protocol::PlanView {
        match self
            .client()
            .call(&flyto_protocol::Request::PlanStatus { id: id.into() })
            .expect("status")
        {
            flyto_protocol::Response::Plan { plan } => plan,
            other => panic!("unexpected answer {other:?}"),
        }
    }

    /// Every plan the main socket lists (newest first, the default limit).
    pub fn plans(&self) -> Vec<flyto_protocol::PlanSummary> {
        match self
            .client()
            .call(&flyto_protocol::Request::PlanList {
                state: None,
                limit: None,
            })
            .expect("plan_list")
        {
            flyto_protocol::Response::Plans { plans, .. } => plans,
            other => panic!("unexpected answer {other:?}"),
        }
    }

    /// Waits until plan `id` satisfies `pred`, returning that view.
    pub fn wait_plan(
        &self,
        id: &str,
        what: &str,
        pred: impl Fn(&flyto_protocol::PlanView) -> bool,
    ) -> flyto_protocol::PlanView {
        wait_until(&format!("plan {id}: {what}"), DEADLINE, || {
            let v = self.status(id);
            pred(&v).then_some(v)
        })
    }

    /// A one-step `run` plan.
    pub fn run_plan(command: &str) -> flyto_protocol::PlanSpec {
        flyto_protocol::PlanSpec {
            steps: vec![flyto_protocol::StepSpec {
                id: "main".into(),
                run: Some(command.into()),
                ..Default::default()
            }],
            ..Default::default()
        }
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

pub struct Daemon {
    pub child: Child,
    notify: UnixDatagram,
    log_path: PathBuf,
    /// Every sd_notify message received so far.
    pub notes: Vec<String>,
}

impl Daemon {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log_path) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// Waits for an sd_notify datagram containing `needle`.
    pub fn wait_notify(&mut self, needle: &str, limit: Duration) -> Result<(), String> {
        if self.notes.iter().any(|n| n.contains(needle)) {
            return Ok(());
        }
        let deadline = Instant::now() + limit;
        let mut buf = [0u8; 4096];
        while Instant::now() < deadline {
            if let Ok(n) = self.notify.recv(&mut buf) {
                let note = String::from_utf8_lossy(&buf[..n]).into_owned();
                let hit = note.contains(needle);
                self.notes.push(note);
                if hit {
                    return Ok(());
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("flytod exited ({status}) before sending {needle}"));
            }
        }
        Err(format!("no {needle} from flytod within {limit:?}"))
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: sending a signal to our own child process.
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    /// SIGKILL, then reap.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to exit on its own.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        wait_until("flytod to exit", limit, || {
            self.child.try_wait().ok().flatten()
        })
    }

    /// SIGTERM and wait for the exit.
    pub fn terminate(mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait_exit(Duration::from_secs(90))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
