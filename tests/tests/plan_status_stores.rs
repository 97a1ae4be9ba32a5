//! `plan_status` says the same things about a plan on either store: the
//! same plan, run on sled and on the PostgreSQL shared store, shows the
//! same fields in the table and in `--json` (values such as ids, times and
//! paths may differ).

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::{Backend, TestEnv};
use serde_json::Value;
use std::collections::BTreeSet;

const FAST: &str = "[daemon]\nshutdown_grace = \"1s\"\n[plans]\nkill_grace = \"200ms\"\n";

const PLAN: &str = r#"
name = "release"

[[steps]]
id = "build"
run = "echo built; echo warn >&2"

[[steps]]
id = "test"
run = "echo testing; exit 3"
deps = ["build"]

[[steps]]
id = "ship"
run = "echo never"
deps = ["test"]
"#;

/// Every path of a non-null value in `v` (array elements merged).
fn paths(v: &Value, at: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Null => {}
        Value::Object(m) => {
            for (k, v) in m {
                paths(v, &format!("{at}.{k}"), out);
            }
        }
        Value::Array(a) => {
            for v in a {
                paths(v, &format!("{at}[]"), out);
            }
        }
        _ => {
            out.insert(at.to_string());
        }
    }
}

/// The table's words with what varies between runs taken out: numbers,
/// ids, times and paths.
fn shape(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            l.split_whitespace()
                .map(|w| {
                    if w.chars().any(|c| c.is_ascii_digit()) || w.contains('/') {
                        "#"
                    } else {
                        w
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

struct Seen {
    json: BTreeSet<String>,
    table: Vec<String>,
    restarted_json: BTreeSet<String>,
    restarted_table: Vec<String>,
    /// A plan while its step runs, then once cancelled.
    running: (BTreeSet<String>, Vec<String>),
    cancelled: (BTreeSet<String>, Vec<String>),
}

fn run_on(backend: Backend) -> Seen {
    let env = TestEnv::on(backend, FAST);
    let _daemon = env.start();
    let path = env.work.join("release.toml");
    std::fs::write(&path, PLAN).unwrap();
    let out = env.ctl(&["submit_plan", path.to_str().unwrap(), "--wait"]);
    assert_ne!(
        out.code, 0,
        "{backend:?}: the test step fails: {}",
        out.stdout
    );
    let id = env.plans()[0].id.clone();
    let status = |id: &str| {
        let table = env.ctl(&["plan_status", id]);
        assert_eq!(
            table.code, 0,
            "{backend:?}: {} {}",
            table.stdout, table.stderr
        );
        let json = env.ctl(&["plan_status", id, "--json"]);
        let v: Value = serde_json::from_str(&json.stdout)
            .unwrap_or_else(|_| panic!("{backend:?}: {} {}", json.stdout, json.stderr));
        let mut keys = BTreeSet::new();
        paths(&v, "", &mut keys);
        (keys, shape(&table.stdout), table.stdout)
    };
    let (json, first_table, raw) = status(&id);
    eprintln!("--- {backend:?}\n{raw}");
    let out = env.ctl(&["plan_restart", &id]);
    assert_eq!(out.code, 0, "{backend:?}: {}", out.stderr);
    let again = out.stdout.split_whitespace().next().unwrap().to_string();
    env.wait_plan(&again, "finished", |p| p.finished_ms.is_some());
    let (restarted_json, restarted_table, raw) = status(&again);
    eprintln!("--- {backend:?} restarted\n{raw}");

    let long = env.work.join("long.toml");
    std::fs::write(
        &long,
        "name = \"long\"\n[[steps]]\nid = \"wait\"\nrun = \"echo started; sleep 60\"\n[[steps]]\nid = \"after\"\nrun = \"true\"\ndeps = [\"wait\"]\n",
    )
    .unwrap();
    let out = env.ctl(&["submit_plan", long.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{backend:?}: {}", out.stderr);
    let long_id = out.stdout.trim().to_string();
    // The table shows a running step's output so far.
    flyto_tests::wait_until("the running step's output", flyto_tests::DEADLINE, || {
        env.ctl(&["plan_status", &long_id])
            .stdout
            .contains("started")
            .then_some(())
    });
    let (keys, table, raw) = status(&long_id);
    eprintln!("--- {backend:?} running\n{raw}");
    let running = (keys, table);
    let out = env.ctl(&["plan_cancel", &long_id]);
    assert_eq!(out.code, 0, "{backend:?}: {}", out.stderr);
    env.wait_plan(&long_id, "cancelled", |p| p.finished_ms.is_some());
    let (keys, table, raw) = status(&long_id);
    eprintln!("--- {backend:?} cancelled\n{raw}");
    let cancelled = (keys, table);
    Seen {
        running,
        cancelled,
        json,
        table: first_table,
        restarted_json,
        restarted_table,
    }
}

#[test]
fn plan_status_shows_the_same_fields_on_sled_and_on_the_shared_store() {
    let sled = run_on(Backend::Sled);
    let pg = run_on(Backend::Postgres);
    assert_eq!(sled.json, pg.json, "plan_status --json fields differ");
    assert_eq!(sled.table, pg.table, "plan_status table differs");
    assert_eq!(sled.restarted_json, pg.restarted_json);
    assert_eq!(sled.restarted_table, pg.restarted_table);
    assert_eq!(sled.running, pg.running, "a running plan's status differs");
    assert_eq!(
        sled.cancelled, pg.cancelled,
        "a cancelled plan's status differs"
    );
}
