//! Jobs end to end: schedule semantics through `flytoctl job_next`, the
//! way a user checks an expression before creating a job.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::{Backend, TestEnv};

/// (expression, zone, after (exclusive), expected instants). The DST
/// changes of 2026: New York 8 March 02:00 → 03:00 and 1 November 02:00 →
/// 01:00; Berlin 29 March 02:00 → 03:00 and 25 October 03:00 → 02:00;
/// London 29 March 01:00 → 02:00 and 25 October 02:00 → 01:00; Lord Howe
/// 5 April 02:00 → 01:30 (+11:00 → +10:30) and 4 October 02:00 → 02:30;
/// Shanghai none. 1 January 2026 is a Thursday.
const TABLE: &[(&str, &str, &str, &[&str])] = &[
    // A fixed time in the spring-forward gap fires at the gap's end, once.
    (
        "30 2 * * *",
        "America/New_York",
        "2026-03-07T12:00:00Z",
        &[
            "2026-03-08T03:00:00-04:00",
            "2026-03-09T02:30:00-04:00",
            "2026-03-10T02:30:00-04:00",
        ],
    ),
    (
        "0 2 * * *",
        "America/New_York",
        "2026-03-07T12:00:00Z",
        &["2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"],
    ),
    // The repeated hour: a fixed time once (first pass), an interval in both.
    (
        "30 1 * * *",
        "America/New_York",
        "2026-10-31T12:00:00Z",
        &[
            "2026-11-01T01:30:00-04:00",
            "2026-11-02T01:30:00-05:00",
            "2026-11-03T01:30:00-05:00",
        ],
    ),
    (
        "*/30 1 * * *",
        "America/New_York",
        "2026-10-31T12:00:00Z",
        &[
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:30:00-05:00",
        ],
    ),
    // Names and ranges; Friday 6 March, then Monday 9 March after the change.
    (
        "0 9 * * MON-FRI",
        "America/New_York",
        "2026-03-06T00:00:00Z",
        &[
            "2026-03-06T09:00:00-05:00",
            "2026-03-09T09:00:00-04:00",
            "2026-03-10T09:00:00-04:00",
        ],
    ),
    (
        "5 4 * * SUN",
        "America/New_York",
        "2026-01-01T00:00:00Z",
        &["2026-01-04T04:05:00-05:00", "2026-01-11T04:05:00-05:00"],
    ),
    (
        "@monthly",
        "America/New_York",
        "2026-01-15T00:00:00Z",
        &[
            "2026-02-01T00:00:00-05:00",
            "2026-03-01T00:00:00-05:00",
            "2026-04-01T00:00:00-04:00",
        ],
    ),
    // every: whole periods after the epoch, in absolute time (both passes).
    (
        "every 15m",
        "America/New_York",
        "2026-03-08T06:50:00Z",
        &[
            "2026-03-08T03:00:00-04:00",
            "2026-03-08T03:15:00-04:00",
            "2026-03-08T03:30:00-04:00",
        ],
    ),
    (
        "every 30m",
        "America/New_York",
        "2026-11-01T05:10:00Z",
        &[
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:30:00-05:00",
            "2026-11-01T02:00:00-05:00",
        ],
    ),
    (
        "@daily",
        "Europe/Berlin",
        "2026-03-28T12:00:00Z",
        &[
            "2026-03-29T00:00:00+01:00",
            "2026-03-30T00:00:00+02:00",
            "2026-03-31T00:00:00+02:00",
        ],
    ),
    (
        "30 2 * * *",
        "Europe/Berlin",
        "2026-03-28T12:00:00Z",
        &["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
    ),
    (
        "30 2 * * *",
        "Europe/Berlin",
        "2026-10-24T12:00:00Z",
        &["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
    ),
    (
        "*/20 2 * * *",
        "Europe/Berlin",
        "2026-10-24T12:00:00Z",
        &[
            "2026-10-25T02:00:00+02:00",
            "2026-10-25T02:20:00+02:00",
            "2026-10-25T02:40:00+02:00",
            "2026-10-25T02:00:00+01:00",
            "2026-10-25T02:20:00+01:00",
            "2026-10-25T02:40:00+01:00",
        ],
    ),
    // 29 February: the next leap years.
    (
        "0 0 29 2 *",
        "Europe/Berlin",
        "2026-01-01T00:00:00Z",
        &["2028-02-29T00:00:00+01:00", "2032-02-29T00:00:00+01:00"],
    ),
    (
        "@yearly",
        "Europe/Berlin",
        "2026-06-01T00:00:00Z",
        &["2027-01-01T00:00:00+01:00"],
    ),
    (
        "0 22 * * 1-5",
        "Europe/Berlin",
        "2026-03-27T00:00:00Z",
        &["2026-03-27T22:00:00+01:00", "2026-03-30T22:00:00+02:00"],
    ),
    // Monday 30 March, then the first Monday of 2027 (1 January is a Friday).
    (
        "0 12 * JAN-MAR MON",
        "Europe/Berlin",
        "2026-03-27T00:00:00Z",
        &["2026-03-30T12:00:00+02:00", "2027-01-04T12:00:00+01:00"],
    ),
    (
        "at 2026-10-25 02:30",
        "Europe/Berlin",
        "2026-10-01T00:00:00Z",
        &["2026-10-25T02:30:00+02:00"],
    ),
    (
        "at 2026-03-29 02:30",
        "Europe/Berlin",
        "2026-03-01T00:00:00Z",
        &["2026-03-29T03:00:00+02:00"],
    ),
    // Day-of-month OR day-of-week: the 13th, or any Friday.
    (
        "0 12 13 * FRI",
        "Europe/London",
        "2026-01-01T00:00:00Z",
        &[
            "2026-01-02T12:00:00+00:00",
            "2026-01-09T12:00:00+00:00",
            "2026-01-13T12:00:00+00:00",
            "2026-01-16T12:00:00+00:00",
        ],
    ),
    (
        "30 1 * * *",
        "Europe/London",
        "2026-03-28T12:00:00Z",
        &["2026-03-29T02:00:00+01:00", "2026-03-30T01:30:00+01:00"],
    ),
    (
        "30 1 * * *",
        "Europe/London",
        "2026-10-24T12:00:00Z",
        &["2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00+00:00"],
    ),
    (
        "0 */6 * * *",
        "Europe/London",
        "2026-03-28T20:00:00Z",
        &[
            "2026-03-29T00:00:00+00:00",
            "2026-03-29T06:00:00+01:00",
            "2026-03-29T12:00:00+01:00",
            "2026-03-29T18:00:00+01:00",
        ],
    ),
    // 7 is Sunday too.
    (
        "0 0 * * 7",
        "Europe/London",
        "2026-01-01T00:00:00Z",
        &["2026-01-04T00:00:00+00:00", "2026-01-11T00:00:00+00:00"],
    ),
    (
        "0 0 1,15 * *",
        "Europe/London",
        "2026-02-01T00:00:00Z",
        &[
            "2026-02-15T00:00:00+00:00",
            "2026-03-01T00:00:00+00:00",
            "2026-03-15T00:00:00+00:00",
        ],
    ),
    // Lord Howe moves by 30 minutes: 02:00-02:30 is missing on 4 October.
    (
        "0 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-03T00:00:00Z",
        &["2026-10-04T02:30:00+11:00", "2026-10-05T02:00:00+11:00"],
    ),
    // 01:30-02:00 repeats on 5 April; 01:15 is before it.
    (
        "15 1 * * *",
        "Australia/Lord_Howe",
        "2026-04-04T00:00:00Z",
        &["2026-04-05T01:15:00+11:00", "2026-04-06T01:15:00+10:30"],
    ),
    (
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2026-04-04T00:00:00Z",
        &["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"],
    ),
    (
        "*/15 1 * * *",
        "Australia/Lord_Howe",
        "2026-04-04T00:00:00Z",
        &[
            "2026-04-05T01:00:00+11:00",
            "2026-04-05T01:15:00+11:00",
            "2026-04-05T01:30:00+11:00",
            "2026-04-05T01:45:00+11:00",
            "2026-04-05T01:30:00+10:30",
            "2026-04-05T01:45:00+10:30",
        ],
    ),
    // After is exclusive: 08:00 local is 00:00 UTC.
    (
        "0 8 * * *",
        "Asia/Shanghai",
        "2026-01-01T00:00:00Z",
        &["2026-01-02T08:00:00+08:00", "2026-01-03T08:00:00+08:00"],
    ),
    (
        "0 9 1 JAN,JUL *",
        "Asia/Shanghai",
        "2026-01-01T00:00:00Z",
        &[
            "2026-01-01T09:00:00+08:00",
            "2026-07-01T09:00:00+08:00",
            "2027-01-01T09:00:00+08:00",
        ],
    ),
    (
        "@hourly",
        "Asia/Shanghai",
        "2026-01-01T00:30:00Z",
        &["2026-01-01T09:00:00+08:00", "2026-01-01T10:00:00+08:00"],
    ),
    (
        "@weekly",
        "Asia/Shanghai",
        "2026-01-01T00:00:00Z",
        &["2026-01-04T00:00:00+08:00", "2026-01-11T00:00:00+08:00"],
    ),
    (
        "every 90m",
        "Asia/Shanghai",
        "2026-01-01T00:00:00Z",
        &["2026-01-01T09:30:00+08:00", "2026-01-01T11:00:00+08:00"],
    ),
    // */10 on days 1-31: 1, 11, 21, 31.
    (
        "0 0 */10 * *",
        "Asia/Shanghai",
        "2026-01-01T00:00:00Z",
        &[
            "2026-01-11T00:00:00+08:00",
            "2026-01-21T00:00:00+08:00",
            "2026-01-31T00:00:00+08:00",
            "2026-02-01T00:00:00+08:00",
        ],
    ),
];

fn next(env: &TestEnv, expr: &str, tz: &str, after: &str, n: usize) -> (i32, Vec<String>, String) {
    let count = n.to_string();
    let out = env.ctl(&[
        "job_next", expr, "--tz", tz, "--after", after, "--count", &count, "--json",
    ]);
    let instants = if out.code == 0 {
        serde_json::from_str(&out.stdout).unwrap()
    } else {
        Vec::new()
    };
    (out.code, instants, out.stderr)
}

#[test]
fn job_next_follows_the_stated_semantics_across_zones_and_dst() {
    let env = TestEnv::new("");
    let _daemon = env.start();
    let mut wrong = Vec::new();
    for (expr, tz, after, want) in TABLE {
        let (code, got, stderr) = next(&env, expr, tz, after, want.len());
        if code != 0 || got != *want {
            wrong.push(format!(
                "{expr} in {tz} after {after}: got {got:?} ({stderr}), want {want:?}"
            ));
        }
    }
    assert!(TABLE.len() >= 30);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn ambiguous_expressions_are_accepted_with_a_warning_and_bad_ones_refused() {
    let env = TestEnv::new("");
    let _daemon = env.start();
    // Two times inside New York's gap on 8 March: not fired that day.
    let (code, got, stderr) = next(
        &env,
        "0,30 2 * * *",
        "America/New_York",
        "2026-03-07T12:00:00Z",
        3,
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        got,
        [
            "2026-03-09T02:00:00-04:00",
            "2026-03-09T02:30:00-04:00",
            "2026-03-10T02:00:00-04:00"
        ]
    );
    assert!(
        stderr
            .contains("warning: `0,30 2 * * *` names local times that do not exist on 2026-03-08"),
        "{stderr}"
    );
    assert!(
        stderr.contains("next fires: 2026-03-09T02:00:00-04:00"),
        "{stderr}"
    );
    let (code, _, stderr) = next(
        &env,
        "0 9 */2 * MON",
        "America/New_York",
        "2026-01-01T00:00:00Z",
        3,
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("day-of-month `*/2` with a restricted day-of-week `MON`"),
        "{stderr}"
    );
    // ORed: the odd days, and Monday the 12th.
    let (_, got, _) = next(
        &env,
        "0 9 */2 * MON",
        "America/New_York",
        "2026-01-10T00:00:00Z",
        4,
    );
    assert_eq!(
        got,
        [
            "2026-01-11T09:00:00-05:00",
            "2026-01-12T09:00:00-05:00",
            "2026-01-13T09:00:00-05:00",
            "2026-01-15T09:00:00-05:00"
        ]
    );

    for (expr, tz, says) in [
        ("0 25 * * *", "UTC", "the hour field `25` is invalid"),
        (
            "0 8 * * *",
            "Europe/Atlantis",
            "unknown time zone `Europe/Atlantis`",
        ),
        ("0 0 31 4 *", "UTC", "never fires"),
        ("at 2026-01-01 08:00", "UTC", "is in the past"),
        ("every soon", "UTC", "is not a period"),
    ] {
        let (code, _, stderr) = next(&env, expr, tz, "2026-06-01T00:00:00Z", 1);
        assert_ne!(code, 0, "{expr} was accepted");
        assert!(stderr.contains(says), "{expr}: {stderr}");
    }
    let out = env.ctl(&["job_next", "@daily", "--after", "yesterday"]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr
            .contains("--after `yesterday` is not an RFC 3339 instant"),
        "{}",
        out.stderr
    );
    assert_eq!(env.ctl(&["ping"]).code, 0);
}

use serde_json::Value;

// The jobs suite, on both stores.
on_both_backends!(
    a_job_submits_one_plan_per_instant_and_shows_its_runs,
    downtime_is_one_missed_record_and_a_running_run_is_not_overlapped,
    a_crash_between_recording_a_fire_and_submitting_it_still_gives_one_plan,
    bad_job_input_gets_a_clear_error,
    failures_in_a_row_expiry_and_a_one_shot_each_stop_the_job_saying_why,
    editing_a_job_or_reloading_as_it_fires_still_gives_each_instant_one_plan,
    jitter_is_a_fixed_offset_of_at_most_the_value_given,
    a_client_cannot_borrow_a_jobs_idempotency_key,
);

/// A plan file with one `run` step.
fn plan_file(env: &TestEnv, name: &str, run: &str) -> String {
    let path = env.work.join(format!("{name}.toml"));
    std::fs::create_dir_all(&env.work).unwrap();
    std::fs::write(&path, format!("[[steps]]\nid = \"s\"\nrun = \"{run}\"\n")).unwrap();
    path.display().to_string()
}

fn json(env: &TestEnv, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = env.ctl(&all);
    assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

fn fires(env: &TestEnv, id: &str) -> Vec<Value> {
    json(env, &["job_show", id])["fires"]
        .as_array()
        .unwrap()
        .clone()
}

/// Asserts that no scheduled instant fired twice and no two fires name
/// one plan; gives the number of scheduled fires and the plans.
pub(crate) fn distinct_fires(fires: &[Value]) -> (usize, Vec<String>) {
    let mut instants: Vec<&str> = fires
        .iter()
        .filter(|f| f["manual"] == false)
        .map(|f| f["instant"].as_str().unwrap())
        .collect();
    let n = instants.len();
    instants.sort_unstable();
    instants.dedup();
    assert_eq!(instants.len(), n, "an instant fired twice: {fires:?}");
    let mut plans: Vec<String> = fires
        .iter()
        .filter_map(|f| f["plan"].as_str().map(str::to_string))
        .collect();
    let m = plans.len();
    plans.sort_unstable();
    plans.dedup();
    assert_eq!(plans.len(), m, "two fires share a plan: {fires:?}");
    (n, plans)
}

fn create(env: &TestEnv, args: &[&str]) -> String {
    let mut all = vec!["job_create"];
    all.extend_from_slice(args);
    json(env, &all)["id"].as_str().unwrap().to_string()
}

fn a_job_submits_one_plan_per_instant_and_shows_its_runs(backend: Backend) {
    let env = TestEnv::on(backend, "");
    let _daemon = env.start();
    let plan = plan_file(&env, "tick", "echo tick");
    let id = create(
        &env,
        &[
            "--schedule",
            "every 1s",
            "--plan",
            &plan,
            "--name",
            "ticker",
        ],
    );
    // A fire is recorded as `firing` before its plan is submitted: wait
    // until the first three have theirs.
    let seen = flyto_tests::wait_until("three submitted fires", flyto_tests::DEADLINE, || {
        let f = fires(&env, &id);
        (f.len() >= 3 && f[..3].iter().all(|f| f["outcome"] != "firing")).then(|| f[..3].to_vec())
    });
    let instants: Vec<&str> = seen
        .iter()
        .map(|f| f["instant"].as_str().unwrap())
        .collect();
    let mut unique = instants.clone();
    unique.dedup();
    assert_eq!(unique, instants, "an instant fired twice");
    let plans: Vec<&str> = seen.iter().filter_map(|f| f["plan"].as_str()).collect();
    let mut distinct = plans.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), plans.len(), "two fires share a plan");
    assert!(
        seen.iter()
            .all(|f| f["outcome"].as_str().unwrap().starts_with("submitted")),
        "{seen:?}"
    );
    let list = json(&env, &["job_list"]);
    assert_eq!(list["jobs"][0]["name"], "ticker");
    assert!(list["jobs"][0]["next_fire_utc"].is_string());
    assert!(list["tzdb"].as_str().unwrap().len() >= 5);

    // Paused, nothing fires; a manual run still does, recorded as manual.
    json(&env, &["job_pause", "ticker"]);
    let ran = json(&env, &["job_run", "ticker"]);
    let plan_id = ran["plan"].as_str().unwrap().to_string();
    let f = fires(&env, &id);
    let manual: Vec<&Value> = f.iter().filter(|f| f["manual"] == true).collect();
    assert_eq!(manual.len(), 1);
    assert_eq!(manual[0]["plan"], plan_id.as_str());
    assert_eq!(json(&env, &["job_show", &id])["job"]["state"], "paused");
    json(&env, &["job_delete", &id]);
    let out = env.ctl(&["job_show", &id]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains(&format!("no job `{id}`")),
        "{}",
        out.stderr
    );
}

fn downtime_is_one_missed_record_and_a_running_run_is_not_overlapped(backend: Backend) {
    let env = TestEnv::on(backend, "");
    let daemon = env.start();
    let slow = plan_file(&env, "slow", "sleep 30");
    let id = create(&env, &["--schedule", "every 1s", "--plan", &slow]);
    // The first run outlasts the period: the next fires are skipped.
    let f = flyto_tests::wait_until("a skipped fire", flyto_tests::DEADLINE, || {
        let f = fires(&env, &id);
        f.iter()
            .any(|f| f["outcome"] == "skipped (still running)")
            .then_some(f)
    });
    let submitted = f
        .iter()
        .filter(|f| f["outcome"].as_str().unwrap().starts_with("submitted"))
        .count();
    assert_eq!(submitted, 1, "{f:?}");
    // flytod is down for a simulated hour: no burst, one missed record.
    daemon.kill9();
    let hour = (3_600_000).to_string();
    let _daemon = env
        .try_start(&[("FLYTO_CLOCK_OFFSET_MS", hour.as_str())])
        .unwrap();
    let f = fires(&env, &id);
    let missed: Vec<&Value> = f
        .iter()
        .filter(|f| f["outcome"].as_str().unwrap().starts_with("missed"))
        .collect();
    assert_eq!(missed.len(), 1, "{f:?}");
    let n: u64 = missed[0]["outcome"].as_str().unwrap()["missed ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(n >= 3590, "{}", missed[0]["outcome"]);
}

fn a_crash_between_recording_a_fire_and_submitting_it_still_gives_one_plan(backend: Backend) {
    let env = TestEnv::on(backend, "");
    let mut daemon = env
        .try_start(&[("FLYTO_TEST_CRASH_AT", "job-before-submit")])
        .unwrap();
    let plan = plan_file(&env, "once", "echo once");
    let out = env.ctl(&["job_create", "--schedule", "every 1s", "--plan", &plan]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    daemon.wait_exit(flyto_tests::DEADLINE);
    let _daemon = env.start();
    let f = flyto_tests::wait_until(
        "the fire submitted after the restart",
        flyto_tests::DEADLINE,
        || {
            let f = fires(&env, "j1");
            let done = f
                .first()
                .is_some_and(|f| f["outcome"].as_str().unwrap().starts_with("submitted"));
            done.then_some(f)
        },
    );
    let first = f[0]["instant"].as_str().unwrap();
    // The plan of that instant exists once, under the fire's key.
    let plans = json(&env, &["plan_list"]);
    let named: Vec<&Value> = plans
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["id"] == f[0]["plan"])
        .collect();
    assert_eq!(named.len(), 1, "{first}: {plans}");
    let instants: Vec<&str> = f.iter().map(|f| f["instant"].as_str().unwrap()).collect();
    let mut unique = instants.clone();
    unique.dedup();
    assert_eq!(unique, instants);
}

fn bad_job_input_gets_a_clear_error(backend: Backend) {
    let env = TestEnv::on(backend, "");
    let _daemon = env.start();
    let bad_plan = env.work.join("bad.toml");
    std::fs::create_dir_all(&env.work).unwrap();
    std::fs::write(&bad_plan, "[[steps]]\nid = \"s\"\n").unwrap();
    let bad_plan = bad_plan.display().to_string();
    for (args, says) in [
        (
            vec!["--schedule", "0 25 * * *", "--prompt", "x"],
            "the hour field `25` is invalid",
        ),
        (
            vec![
                "--schedule",
                "0 8 * * *",
                "--tz",
                "Moon/Base",
                "--prompt",
                "x",
            ],
            "unknown time zone `Moon/Base`",
        ),
        (
            vec!["--schedule", "0 0 30 2 *", "--prompt", "x"],
            "never fires",
        ),
        (
            vec!["--schedule", "at 2020-01-01 08:00", "--prompt", "x"],
            "is in the past",
        ),
        (
            vec!["--schedule", "@daily", "--plan", &bad_plan],
            "not a valid plan",
        ),
        (vec!["--schedule", "@daily"], "a job needs what to run"),
        (vec!["--prompt", "x"], "a job needs --schedule"),
        (
            vec!["--schedule", "@daily", "--prompt", "x", "--mode", "shared"],
            "mode `shared` is not known",
        ),
        (
            vec![
                "--schedule",
                "@daily",
                "--prompt",
                "x",
                "--notify",
                "tele gram",
            ],
            "is not a channel binding name",
        ),
        (
            vec![
                "--schedule",
                "@daily",
                "--prompt",
                "x",
                "--notify",
                "telegram:",
            ],
            "must be a chat id",
        ),
        (
            vec![
                "--schedule",
                "@daily",
                "--prompt",
                "x",
                "--notify",
                "nosuch",
            ],
            "there is no channel binding `nosuch`",
        ),
    ] {
        let mut all = vec!["job_create"];
        all.extend(args.iter().copied());
        let out = env.ctl(&all);
        assert_ne!(out.code, 0, "{args:?} was accepted");
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
    assert!(
        json(&env, &["job_list"])["jobs"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

fn failures_in_a_row_expiry_and_a_one_shot_each_stop_the_job_saying_why(backend: Backend) {
    let env = TestEnv::on(backend, "");
    let _daemon = env.start();
    let failing = plan_file(&env, "fails", "false");
    let ok = plan_file(&env, "ok", "true");
    let f = create(
        &env,
        &[
            "--schedule",
            "every 1s",
            "--plan",
            &failing,
            "--max-failures",
            "2",
        ],
    );
    let soon = |secs: i64| {
        (chrono::Utc::now() + chrono::Duration::seconds(secs))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let once = create(
        &env,
        &["--schedule", &format!("at {}", soon(2)), "--plan", &ok],
    );
    let expiring = create(
        &env,
        &[
            "--schedule",
            "every 1s",
            "--plan",
            &ok,
            "--expires",
            &soon(3),
        ],
    );
    let state = |id: &str| {
        json(&env, &["job_show", id])["job"]["state"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let wait_state = |id: &str, prefix: &str| {
        flyto_tests::wait_until(
            &format!("{id} to be {prefix}"),
            flyto_tests::DEADLINE,
            || {
                let s = state(id);
                s.starts_with(prefix).then_some(s)
            },
        )
    };
    let s = wait_state(&f, "stopped: 2 runs failed in a row");
    assert!(s.contains("job_resume"), "{s}");
    wait_state(&once, "stopped: fired once");
    assert_eq!(fires(&env, &once).len(), 1);
    wait_state(&expiring, "stopped: expired at");
    // Resumed, it fires again (and counts from zero).
    json(&env, &["job_resume", &f]);
    assert_eq!(state(&f), "active");
}

#[test]
fn fifty_sigkills_around_fires_never_give_an_instant_two_plans() {
    let env = TestEnv::new("");
    let plan = plan_file(&env, "tick", "true");
    let mut daemon = env.start();
    let id = create(&env, &["--schedule", "every 1s", "--plan", &plan]);
    // Deterministic "random" kill points: 0 to 450 ms after a fire.
    let mut seed: u64 = 0x5eed;
    for round in 0..50 {
        let seen = fires(&env, &id).len();
        flyto_tests::wait_until(
            &format!("a fire in round {round}"),
            flyto_tests::DEADLINE,
            || (fires(&env, &id).len() > seen).then_some(()),
        );
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let delay = (seed >> 33) % 450;
        std::thread::sleep(std::time::Duration::from_millis(delay));
        daemon.kill9();
        daemon = env.start();
    }
    // A fire recorded just before a kill is submitted after the restart.
    let f = flyto_tests::wait_until("every fire settled", flyto_tests::DEADLINE, || {
        let f = fires(&env, &id);
        f.iter().all(|f| f["outcome"] != "firing").then_some(f)
    });
    let (n, fired) = distinct_fires(&f);
    // Every plan the job made belongs to one fire.
    let plans = json(&env, &["plan_list", "--limit", "10000"]);
    let job_plans: Vec<String> = plans
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == format!("job {id}").as_str())
        .map(|p| p["id"].as_str().unwrap().to_string())
        .collect();
    assert!(job_plans.len() >= 50, "{} plans", job_plans.len());
    for p in &job_plans {
        assert!(fired.contains(p), "plan {p} belongs to no fire: {f:?}");
    }
    assert!(n >= 50, "{n} fires");
}

fn editing_a_job_or_reloading_as_it_fires_still_gives_each_instant_one_plan(backend: Backend) {
    let env = TestEnv::on(backend, "");
    let daemon = env.start();
    let a = plan_file(&env, "a", "echo a");
    let b = plan_file(&env, "b", "echo b");
    let id = create(&env, &["--schedule", "every 1s", "--plan", &a]);
    for round in 0..10 {
        let seen = fires(&env, &id).len();
        flyto_tests::wait_until(
            &format!("a fire in round {round}"),
            flyto_tests::DEADLINE,
            || (fires(&env, &id).len() > seen).then_some(()),
        );
        let (plan, every) = if round % 2 == 0 {
            (&b, "every 1s")
        } else {
            (&a, "every 2s")
        };
        json(
            &env,
            &["job_update", &id, "--plan", plan, "--schedule", every],
        );
        // A reload as well, right at the fire: it must not re-fire it.
        daemon.signal(libc::SIGHUP);
    }
    let (n, _) = distinct_fires(&fires(&env, &id));
    assert!(n >= 10);
}

fn jitter_is_a_fixed_offset_of_at_most_the_value_given(backend: Backend) {
    let env = TestEnv::on(backend, "");
    let _daemon = env.start();
    let plan = plan_file(&env, "j", "true");
    let mut offsets = Vec::new();
    for _ in 0..6 {
        let id = create(
            &env,
            &["--schedule", "@hourly", "--plan", &plan, "--jitter", "600"],
        );
        let job = &json(&env, &["job_show", &id])["job"];
        let next =
            chrono::DateTime::parse_from_rfc3339(job["next_fire_utc"].as_str().unwrap()).unwrap();
        let offset = next.timestamp() % 3600;
        assert!(offset <= 600, "{job}");
        // Fixed: asked again, the same instant.
        assert_eq!(
            json(&env, &["job_show", &id])["job"]["next_fire_utc"],
            job["next_fire_utc"]
        );
        offsets.push(offset);
    }
    // Derived from the id: not all jobs get the same offset.
    offsets.sort_unstable();
    offsets.dedup();
    assert!(offsets.len() > 1, "{offsets:?}");
}

fn a_client_cannot_borrow_a_jobs_idempotency_key(backend: Backend) {
    let env = TestEnv::on(backend, "");
    let _daemon = env.start();
    let mut client = env.client();
    let err = client
        .call(&flyto_protocol::Request::SubmitPlan {
            plan: TestEnv::run_plan("true"),
            idempotency_key: Some("job j3 at 60000".into()),
        })
        .unwrap_err();
    assert!(err.to_string().contains("are the jobs' own"), "{err}");
    assert!(env.plans().is_empty());
}

#[test]
fn a_bad_retry_backoff_is_a_config_error() {
    let env = TestEnv::new("[jobs]\nretry_backoff = [\"30s\", \"soon\"]\n");
    let log = env
        .try_start(&[])
        .err()
        .expect("flytod started with a bad [jobs]");
    assert!(
        log.contains("[jobs] retry_backoff: `soon` is not a duration"),
        "{log}"
    );
}
