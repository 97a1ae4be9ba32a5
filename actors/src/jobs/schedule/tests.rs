use super::*;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn refused(expr: &str, tz: &str) -> String {
    Schedule::parse(expr, tz, now()).unwrap_err().0
}

#[test]
fn bad_schedules_say_what_is_wrong() {
    let e = refused("61 * * * *", "UTC");
    assert!(e.contains("the minute field `61` is invalid"), "{e}");
    let e = refused("0 8 * * FUNDAY", "UTC");
    assert!(e.contains("the day-of-week field `FUNDAY`"), "{e}");
    let e = refused("0 8 * *", "UTC");
    assert!(e.contains("has 4 fields; a cron expression has 5"), "{e}");
    let e = refused("0 8 * * *", "Mars/Olympus");
    assert!(e.starts_with("unknown time zone `Mars/Olympus`"), "{e}");
    let e = refused("0 0 30 2 *", "UTC");
    assert!(e.contains("never fires"), "{e}");
    let e = refused("at 2025-06-01 08:00", "Europe/Berlin");
    assert!(
        e.contains("is in the past (2025-06-01T08:00:00+02:00)"),
        "{e}"
    );
    let e = refused("every 500ms", "UTC");
    assert!(e.contains("shorter than the shortest period"), "{e}");
    let e = refused("@reboot", "UTC");
    assert!(e.contains("not a schedule nickname"), "{e}");
    let e = refused("at tomorrow", "UTC");
    assert!(e.contains("is not a time"), "{e}");
}

#[test]
fn an_at_in_a_gap_fires_at_its_end_and_every_is_anchored_at_the_epoch() {
    let (s, _) = Schedule::parse("at 2026-03-08 02:30", "America/New_York", now()).unwrap();
    assert_eq!(
        s.upcoming(now(), 3)
            .iter()
            .map(DateTime::to_rfc3339)
            .collect::<Vec<_>>(),
        ["2026-03-08T03:00:00-04:00"]
    );
    assert!(s.once());
    let (s, _) = Schedule::parse("every 15m", "Asia/Shanghai", now()).unwrap();
    let after = DateTime::parse_from_rfc3339("2026-01-01T00:07:00Z")
        .unwrap()
        .with_timezone(&Utc);
    assert_eq!(
        s.next_after(after).unwrap().to_rfc3339(),
        "2026-01-01T08:15:00+08:00"
    );
}
