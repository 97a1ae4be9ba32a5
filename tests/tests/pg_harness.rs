//! The real-PostgreSQL harness itself ([`flyto_tests::pg::TestPostgres`]):
//! start and query, isolation between servers, databases, password users,
//! terminating a node's sessions, and restart. No flytod here; these tests
//! may touch only servers they start.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{Output, Stdio};
use std::time::Duration;

use flyto_tests::pg::TestPostgres;
use flyto_tests::{DEADLINE, wait_until};

/// psql as `user` over TCP to `db`, running `sql`, with `password` (if any)
/// in PGPASSWORD.
fn psql_as(pg: &TestPostgres, user: &str, password: Option<&str>, db: &str, sql: &str) -> Output {
    let mut cmd = pg.psql();
    cmd.args(["-h", "127.0.0.1", "-p", &pg.port().to_string(), "-U", user])
        .args(["-d", db, "-tA", "-c", sql]);
    if let Some(pw) = password {
        cmd.env("PGPASSWORD", pw);
    }
    cmd.output().expect("run psql")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn start_answers_a_query_through_psql() {
    let pg = TestPostgres::start();
    assert_eq!(pg.sql("postgres", "select 40 + 2"), "42");
    assert_eq!(pg.sql("postgres", "show port"), pg.port().to_string());
    // The URL form works too, and durability is not switched off.
    let out = pg
        .psql()
        .arg(pg.url())
        .args(["-tA", "-c", "show fsync"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out), "on");
    assert_eq!(
        pg.url(),
        format!("postgres://postgres@127.0.0.1:{}/postgres", pg.port())
    );
}

#[test]
fn two_servers_run_side_by_side() {
    let a = TestPostgres::start();
    let b = TestPostgres::start();
    assert_ne!(a.port(), b.port());
    a.sql("postgres", "create table only_in_a (x int)");
    assert_eq!(
        a.sql(
            "postgres",
            "select count(*) from pg_tables where tablename = 'only_in_a'"
        ),
        "1"
    );
    assert_eq!(
        b.sql(
            "postgres",
            "select count(*) from pg_tables where tablename = 'only_in_a'"
        ),
        "0"
    );
}

#[test]
fn create_database_gives_a_usable_database() {
    let pg = TestPostgres::start();
    pg.create_database("flyto_t1");
    assert_eq!(
        pg.url_for("flyto_t1"),
        format!("postgres://postgres@127.0.0.1:{}/flyto_t1", pg.port())
    );
    pg.sql(
        "flyto_t1",
        "create table t (x int); insert into t values (7)",
    );
    assert_eq!(
        pg.sql("flyto_t1", "select current_database(), x from t"),
        "flyto_t1|7"
    );
    // The table lives in that database only.
    let out = psql_as(&pg, "postgres", None, "postgres", "select x from t");
    assert!(!out.status.success(), "t leaked into postgres: {out:?}");
}

#[test]
fn a_password_user_needs_its_password() {
    let pg = TestPostgres::start();
    pg.add_password_user("alice", "s3cret'pw");
    let ok = psql_as(
        &pg,
        "alice",
        Some("s3cret'pw"),
        "postgres",
        "select current_user",
    );
    assert!(ok.status.success(), "{ok:?}");
    assert_eq!(stdout(&ok), "alice");

    let none = psql_as(&pg, "alice", None, "postgres", "select 1");
    assert!(!none.status.success(), "no password accepted: {none:?}");
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("password"),
        "{none:?}"
    );
    let wrong = psql_as(&pg, "alice", Some("nope"), "postgres", "select 1");
    assert!(
        !wrong.status.success(),
        "a wrong password accepted: {wrong:?}"
    );
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("password authentication failed"),
        "{wrong:?}"
    );
}

#[test]
fn terminate_backends_ends_a_nodes_session() {
    let pg = TestPostgres::start();
    let mut held = pg
        .psql()
        .arg(pg.url())
        .args(["-c", "select pg_sleep(60)"])
        .env("PGAPPNAME", "node-x")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the held psql");
    let active = "select count(*) from pg_stat_activity \
                  where application_name = 'node-x' and state = 'active'";
    wait_until("node-x's session in pg_stat_activity", DEADLINE, || {
        (pg.sql("postgres", active) == "1").then_some(())
    });
    // Nothing matches another node's name; the harness's own session is spared.
    assert_eq!(pg.terminate_backends("node-y%"), 0);
    assert_eq!(pg.terminate_backends("node-%"), 1);
    let status = wait_until("the held psql to exit", Duration::from_secs(10), || {
        held.try_wait().expect("try_wait psql")
    });
    assert!(
        !status.success(),
        "psql survived its session's end: {status}"
    );
    let mut err = String::new();
    std::io::Read::read_to_string(&mut held.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("terminat"), "psql stderr: {err}");
}

#[test]
fn restart_keeps_data_and_port() {
    let pg = TestPostgres::start();
    pg.create_database("keep");
    pg.sql(
        "keep",
        "create table t (x text); insert into t values ('kept')",
    );
    let port = pg.port();
    pg.restart();
    assert_eq!(pg.sql("keep", "select x from t"), "kept");
    assert_eq!(pg.sql("postgres", "show port"), port.to_string());
    // After stop nothing answers on the port.
    pg.stop();
    let out = pg
        .psql()
        .arg(pg.url())
        .args(["-c", "select 1"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "answered after stop: {out:?}");
}

#[test]
fn drop_stops_the_server_and_removes_its_folder() {
    let pg = TestPostgres::start();
    let dir = pg.dir().to_path_buf();
    // Built before the drop: the command owns everything it needs.
    let mut probe = pg.psql();
    probe.arg(pg.url()).args(["-c", "select 1"]);
    assert!(dir.join("postgres.log").exists());
    drop(pg);
    assert!(!dir.exists(), "{} is still there", dir.display());
    let out = probe.output().expect("run psql");
    assert!(
        !out.status.success(),
        "the server still answers after drop: {out:?}"
    );
}
