//! A throwaway real PostgreSQL server per test: [`TestPostgres`] owns one
//! temporary folder (data directory, socket directory, server log) and the
//! server running from it, on a free 127.0.0.1 port. It uses Debian's server
//! binaries (`/usr/lib/postgresql/<N>/bin`) and runs SQL through `psql`; it
//! may not touch any other cluster on the machine (the package's own `main`
//! cluster included) nor add a Rust PostgreSQL client to this crate.
//!
//! Authentication (see `pg_hba.conf` in [`TestPostgres::start`]): the
//! `postgres` superuser is trusted on 127.0.0.1 and on the socket, so the
//! harness needs no secret; every other role must give its password over TCP
//! (scram-sha-256), so a user made with [`TestPostgres::add_password_user`]
//! is refused without it.
//!
//! Durability is real: `fsync` and `synchronous_commit` keep their defaults,
//! so a test that kills the server (`pg_ctl -m immediate`) sees what a crash
//! would leave.
//!
//! ```no_run
//! let pg = flyto_tests::pg::TestPostgres::start();
//! pg.create_database("t1");
//! assert_eq!(pg.sql("t1", "select 1 + 1"), "2");
//! ```

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// How long `pg_ctl -w` waits for the server to start or stop (seconds).
const PG_CTL_WAIT_SECS: &str = "30";

/// One running PostgreSQL server in its own temporary folder; dropping it
/// stops the server (`-m immediate`) and removes the folder.
pub struct TestPostgres {
    tmp: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// Run the server tools as the `postgres` OS user (we are root, and
    /// initdb/postgres refuse to run as root).
    as_postgres: bool,
}

impl TestPostgres {
    /// initdb, configure and start a fresh server; panics (with the server
    /// log) if any step fails.
    pub fn start() -> TestPostgres {
        let bin = server_bin_dir();
        let owner = nix::unistd::geteuid().is_root().then(postgres_user);
        let tmp = tempfile::Builder::new()
            .prefix("flyto-pg-")
            .tempdir_in("/tmp")
            .expect("temp dir for PostgreSQL");
        let mut pg = TestPostgres {
            tmp,
            bin,
            port: 0,
            as_postgres: owner.is_some(),
        };
        std::fs::create_dir(pg.sock_dir()).expect("socket dir");
        if let Some(user) = owner {
            for dir in [pg.tmp.path().to_path_buf(), pg.sock_dir()] {
                nix::unistd::chown(&dir, Some(user.uid), Some(user.gid))
                    .unwrap_or_else(|e| panic!("chown {} to postgres: {e}", dir.display()));
            }
        }
        // --no-sync only skips initdb's final flush of the fresh files; the
        // server itself keeps fsync on.
        let out = pg
            .tool("initdb")
            .arg("-D")
            .arg(pg.data_dir())
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
                "--no-instructions",
            ])
            .output()
            .expect("run initdb");
        pg.check(&out, "initdb");
        std::fs::write(
            pg.data_dir().join("pg_hba.conf"),
            "# flyto-tests: postgres is trusted; every other role needs its password over TCP.\n\
             local all postgres trust\n\
             host  all postgres 127.0.0.1/32 trust\n\
             host  all all      127.0.0.1/32 scram-sha-256\n",
        )
        .expect("write pg_hba.conf");
        // The port is picked by the kernel and released just before the
        // server binds it; another process can take it in between, so a
        // failed bind is retried with a new port.
        for attempt in 1..=5 {
            pg.port = free_port();
            pg.write_conf();
            let out = pg.pg_ctl(&["-w", "-t", PG_CTL_WAIT_SECS, "start"]);
            if out.status.success() {
                return pg;
            }
            let log = pg.log();
            if attempt < 5 && log.contains("could not bind") {
                continue;
            }
            pg.check(&out, "pg_ctl start");
        }
        unreachable!("the last start attempt panics on failure")
    }

    /// The TCP port the server listens on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    /// The superuser's URL for database `db`.
    pub fn url_for(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// The temporary folder: `data/`, `sock/` and `postgres.log`.
    pub fn dir(&self) -> &Path {
        self.tmp.path()
    }

    /// The server log so far (`postgres.log` in the temp folder).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Creates database `name` (owned by `postgres`): one per test.
    pub fn create_database(&self, name: &str) {
        self.sql_vars("postgres", "create database :\"name\"", &[("name", name)]);
    }

    /// Creates login role `user` with `password` (scram-sha-256); over TCP
    /// it must give the password, see the module doc.
    pub fn add_password_user(&self, user: &str, password: &str) {
        self.sql_vars(
            "postgres",
            "create role :\"user\" login password :'password'",
            &[("user", user), ("password", password)],
        );
    }

    /// Ends every other session whose `application_name` matches the SQL
    /// LIKE pattern `application_name_like` (`node-%`, `node-a`); returns
    /// how many were signalled.
    pub fn terminate_backends(&self, application_name_like: &str) -> usize {
        let n = self.sql_vars(
            "postgres",
            "select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity \
             where application_name like :'pattern' and pid <> pg_backend_pid()) t",
            &[("pattern", application_name_like)],
        );
        n.parse()
            .unwrap_or_else(|e| panic!("terminate_backends: count {n:?} is not a number: {e}"))
    }

    /// Fast shutdown and start again, on the same port and data.
    pub fn restart(&self) {
        let out = self.pg_ctl(&["-w", "-t", PG_CTL_WAIT_SECS, "-m", "fast", "restart"]);
        self.check(&out, "pg_ctl restart");
    }

    /// Serves TLS from now on with this certificate chain and key (PEM);
    /// plain connections stay allowed.
    pub fn enable_tls(&self, cert_pem: &str, key_pem: &str) {
        use std::os::unix::fs::PermissionsExt;
        for (name, text, mode) in [
            ("server.crt", cert_pem, 0o644),
            ("server.key", key_pem, 0o600),
        ] {
            let path = self.data_dir().join(name);
            std::fs::write(&path, text).expect("write a TLS file");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .expect("chmod a TLS file");
            if self.as_postgres {
                let user = postgres_user();
                nix::unistd::chown(&path, Some(user.uid), Some(user.gid))
                    .expect("chown a TLS file to postgres");
            }
        }
        self.sql("postgres", "ALTER SYSTEM SET ssl = on");
        self.sql("postgres", "SELECT pg_reload_conf()");
    }

    /// Starts the server again after [`TestPostgres::stop`].
    pub fn start_again(&self) {
        let out = self.pg_ctl(&["-w", "-t", PG_CTL_WAIT_SECS, "start"]);
        self.check(&out, "pg_ctl start");
    }

    /// Fast shutdown; the folder stays until drop.
    pub fn stop(&self) {
        let out = self.pg_ctl(&["-w", "-t", PG_CTL_WAIT_SECS, "-m", "fast", "stop"]);
        self.check(&out, "pg_ctl stop");
    }

    /// Runs `sql` as `postgres` in database `db` and returns its output
    /// (unaligned, tuples only, trimmed); panics with psql's error and the
    /// server log on failure.
    pub fn sql(&self, db: &str, sql: &str) -> String {
        self.sql_vars(db, sql, &[])
    }

    /// Like [`TestPostgres::sql`], with psql variables (`:'name'` quotes a
    /// literal, `:"name"` an identifier) so values need no escaping here.
    pub fn sql_vars(&self, db: &str, sql: &str, vars: &[(&str, &str)]) -> String {
        let mut cmd = self.psql();
        cmd.arg(self.url_for(db))
            .args(["-q", "-t", "-A", "-f", "-"]);
        for (k, v) in vars {
            cmd.arg("-v").arg(format!("{k}={v}"));
        }
        // Through stdin, not -c: psql interpolates variables only there.
        let out = run_with_stdin(&mut cmd, sql);
        if !out.status.success() {
            panic!(
                "psql on {db} failed ({}) running:\n{sql}\n--- stderr ---\n{}\n--- server log ---\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr),
                self.log()
            );
        }
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A bare `psql` command (no connection arguments yet): no psqlrc, never
    /// prompts for a password, stops at the first error, and no `PG*`
    /// variables inherited from the test's environment.
    pub fn psql(&self) -> Command {
        let mut cmd = Command::new(psql_path(&self.bin));
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("PG") {
                cmd.env_remove(k);
            }
        }
        cmd.args(["-X", "-w", "-v", "ON_ERROR_STOP=1"])
            .stdin(Stdio::null());
        cmd
    }

    fn data_dir(&self) -> PathBuf {
        self.tmp.path().join("data")
    }

    fn sock_dir(&self) -> PathBuf {
        self.tmp.path().join("sock")
    }

    fn log_path(&self) -> PathBuf {
        self.tmp.path().join("postgres.log")
    }

    /// Appended last, so these win over initdb's defaults; rewritten with
    /// the port on each start attempt (the marker line starts our part).
    fn write_conf(&self) {
        let path = self.data_dir().join("postgresql.conf");
        let text = std::fs::read_to_string(&path).expect("read postgresql.conf");
        let marker = "# --- flyto-tests ---\n";
        let base = text.split(marker).next().unwrap_or_default();
        // Small memory: several servers run side by side on a CI machine.
        let ours = format!(
            "{marker}port = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             shared_buffers = 16MB\nmax_connections = 50\n",
            self.port,
            self.sock_dir().display()
        );
        // Overwrite in place: the file keeps its owner (postgres).
        std::fs::write(&path, format!("{base}{ours}")).expect("write postgresql.conf");
    }

    /// A server tool, run as `postgres` when we are root, from the temp
    /// folder (postgres may not be able to enter the test's cwd).
    fn tool(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        cmd.current_dir(self.tmp.path()).stdin(Stdio::null());
        cmd
    }

    fn pg_ctl(&self, args: &[&str]) -> Output {
        self.tool("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.log_path())
            .args(args)
            .output()
            .expect("run pg_ctl")
    }

    fn check(&self, out: &Output, what: &str) {
        if !out.status.success() {
            panic!(
                "{what} failed ({}) in {}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- server log ---\n{}",
                out.status,
                self.tmp.path().display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.log()
            );
        }
    }
}

impl Drop for TestPostgres {
    fn drop(&mut self) {
        // Harmless when already stopped; the TempDir then removes the folder.
        let _ = self.pg_ctl(&["-w", "-t", PG_CTL_WAIT_SECS, "-m", "immediate", "stop"]);
    }
}

/// The `postgres` OS user, which runs the server tools when we are root.
fn postgres_user() -> nix::unistd::User {
    nix::unistd::User::from_name("postgres")
        .ok()
        .flatten()
        .unwrap_or_else(|| {
            panic!(
                "running as root but there is no `postgres` OS user to run initdb and postgres as \
                 (they refuse root): install Debian's `postgresql` package (apt-get install postgresql)"
            )
        })
}

/// `/usr/lib/postgresql/<N>/bin` with the highest N that has initdb,
/// pg_ctl and postgres.
fn server_bin_dir() -> PathBuf {
    let root = Path::new("/usr/lib/postgresql");
    let best = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            ["initdb", "pg_ctl", "postgres"]
                .iter()
                .all(|t| bin.join(t).is_file())
                .then_some((n, bin))
        })
        .max_by_key(|(n, _)| *n);
    match best {
        Some((_, bin)) => bin,
        None => panic!(
            "no PostgreSQL server binaries (initdb, pg_ctl, postgres) under {}/<version>/bin: \
             install Debian's `postgresql` package (apt-get install postgresql)",
            root.display()
        ),
    }
}

/// psql from the server's own version when it has one, else the one on
/// the system.
fn psql_path(bin: &Path) -> PathBuf {
    let versioned = bin.join("psql");
    if versioned.is_file() {
        versioned
    } else {
        PathBuf::from("/usr/bin/psql")
    }
}

/// A port that was free on 127.0.0.1 a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0 to pick a port")
        .port()
}

fn run_with_stdin(cmd: &mut Command, input: &str) -> Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn psql");
    let mut pipe = child.stdin.take().expect("psql stdin");
    pipe.write_all(input.as_bytes()).expect("write SQL to psql");
    drop(pipe);
    child.wait_with_output().expect("psql output")
}

/// A runtime for tests that drive the shared store directly.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start a tokio runtime: {e}"))
}

/// A fresh, migrated database `name` of `pg`.
pub async fn fresh(pg: &TestPostgres, name: &str) -> flyto_actors::store::postgres::Shared {
    use flyto_actors::store::postgres::{Shared, migrate};
    pg.create_database(name);
    let shared = Shared::connect(&pg.url_for(name), "test")
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test database: {e}"));
    migrate(&shared)
        .await
        .unwrap_or_else(|e| panic!("cannot migrate the test database: {e}"));
    shared
}

/// Makes every running step's lease run out now (by the database's clock),
/// as if its node had stopped heartbeating long ago.
pub async fn expire_leases(shared: &flyto_actors::store::postgres::Shared) {
    shared
        .client()
        .await
        .unwrap_or_else(|e| panic!("no connection: {e}"))
        .execute(
            "UPDATE flyto_steps SET lease_until = now() - interval '1 second'
             WHERE state = 'running'",
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("cannot expire the leases: {e}"));
}
