//! schedule: when a job fires. Three forms: a 5-field cron expression (or
//! an `@daily`-style nickname), parsed and iterated by croner in the job's
//! IANA time zone; `every <duration>`, instants a whole number of periods
//! after the Unix epoch (so `every 15m` fires at :00, :15, :30, :45 UTC);
//! and `at <instant>`, once.
//!
//! Semantics, as `flytoctl job_next` shows them:
//! - day-of-month and day-of-week are ORed when both are restricted (as
//!   vixie cron);
//! - a fixed-time job whose local time does not exist on a spring-forward
//!   day fires at the first instant after the gap, once;
//! - in the repeated hour of a fall-back day a fixed-time job fires once
//!   (in the first pass), an interval job (`*/15 1 * * *`) in both passes;
//! - expressions whose meaning differs between cron implementations (a
//!   list of times inside a DST gap, a `*/N` day-of-month with a restricted
//!   day-of-week) are accepted with a warning that shows the next fires;
//! - an expression that can never fire is an error.
//!
//! Next fires are always computed from the zone's name, never from a
//! stored offset.

use chrono::{DateTime, Duration as Span, LocalResult, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use std::time::Duration;

/// Shortest `every` period.
pub const MIN_EVERY: Duration = Duration::from_secs(1);
/// How far ahead a warning looks for DST gaps.
const GAP_LOOKAHEAD_DAYS: i64 = 400;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct ScheduleError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, ScheduleError> {
    Err(ScheduleError(msg.into()))
}

#[derive(Debug, Clone)]
enum Kind {
    Cron(Box<Cron>),
    Every(Duration),
    At(DateTime<Utc>),
}

#[derive(Debug, Clone)]
pub struct Schedule {
    pub expr: String,
    pub tz: Tz,
    kind: Kind,
}

/// The tz database version compiled into this binary.
pub fn tzdb_version() -> &'static str {
    chrono_tz::IANA_TZDB_VERSION
}

/// The machine's zone: `TZ` if it names one, else the system's setting,
/// else UTC.
pub fn machine_zone() -> String {
    if let Ok(tz) = std::env::var("TZ") {
        let name = tz.trim_start_matches(':');
        if name.parse::<Tz>().is_ok() {
            return name.to_string();
        }
    }
    iana_time_zone::get_timezone()
        .ok()
        .filter(|n| n.parse::<Tz>().is_ok())
        .unwrap_or_else(|| "UTC".into())
}

pub fn zone(name: &str) -> Result<Tz, ScheduleError> {
    name.parse::<Tz>().or_else(|_| {
        err(format!(
            "unknown time zone `{name}`: use an IANA name such as Europe/Berlin or America/New_York (`timedatectl list-timezones` lists them)"
        ))
    })
}

const FIELDS: [(&str, &str); 5] = [
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 or SUN-SAT"),
];

fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
}

/// Names the field croner refused, by parsing each alone.
fn which_field(expr: &str) -> Option<String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    if fields.len() != 5 {
        return None;
    }
    for (i, (name, range)) in FIELDS.iter().enumerate() {
        let mut probe = ["*"; 5];
        probe[i] = fields[i];
        if let Err(e) = parser().parse(&probe.join(" ")) {
            let why = e.to_string();
            let why = why
                .trim_start_matches("Component error: ")
                .trim_start_matches("Invalid pattern: ")
                .trim_end_matches('.');
            return Some(format!(
                "the {name} field `{}` is invalid ({why}; it takes {range}, lists `1,5`, ranges `1-5` and steps `*/15`)",
                fields[i]
            ));
        }
    }
    None
}

fn parse_cron(expr: &str) -> Result<Cron, ScheduleError> {
    if expr.starts_with('@') {
        let known = [
            "@yearly",
            "@annually",
            "@monthly",
            "@weekly",
            "@daily",
            "@midnight",
            "@hourly",
        ];
        if !known.contains(&expr.to_lowercase().as_str()) {
            return err(format!(
                "`{expr}` is not a schedule nickname: use one of {}",
                known.join(", ")
            ));
        }
    } else {
        let n = expr.split_whitespace().count();
        if n != 5 {
            return err(format!(
                "`{expr}` has {n} fields; a cron expression has 5: minute hour day-of-month month day-of-week (e.g. `0 8 * * MON-FRI`); or write `every 15m` or `at 2026-12-24 08:00`"
            ));
        }
    }
    parser().parse(expr).or_else(|e| match which_field(expr) {
        Some(why) => err(format!("`{expr}`: {why}")),
        None => err(format!("`{expr}` is not a cron expression: {e}")),
    })
}

/// The first instant at or after local `naive` that exists in `tz`: the
/// earlier of a repeated local time, or the first instant after a gap.
fn resolve_local(tz: &Tz, naive: NaiveDateTime) -> Option<DateTime<Tz>> {
    match tz.from_local_datetime(&naive) {
        LocalResult::Single(t) => return Some(t),
        LocalResult::Ambiguous(a, _) => return Some(a),
        LocalResult::None => {}
    }
    // Gaps start and end on whole minutes: the first local minute that
    // exists again is the end of the gap.
    let start = naive.with_second(0)?;
    (1..=24 * 60).find_map(
        |m| match tz.from_local_datetime(&(start + Span::minutes(m))) {
            LocalResult::Single(t) => Some(t),
            LocalResult::Ambiguous(a, _) => Some(a),
            LocalResult::None => None,
        },
    )
}

fn parse_at(rest: &str, tz: &Tz) -> Result<DateTime<Utc>, ScheduleError> {
    let rest = rest.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(rest) {
        return Ok(t.with_timezone(&Utc));
    }
    let formats = [
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
    ];
    let naive = formats
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(rest, f).ok());
    let Some(naive) = naive else {
        return err(format!(
            "`at {rest}` is not a time: write an RFC 3339 instant (2026-12-24T08:00:00+01:00) or a local date and time in the job's zone (2026-12-24 08:00)"
        ));
    };
    resolve_local(tz, naive)
        .map(|t| t.with_timezone(&Utc))
        .ok_or_else(|| ScheduleError(format!("`at {rest}` does not exist in {tz}")))
}

fn parse_every(rest: &str) -> Result<Duration, ScheduleError> {
    let d = humantime::parse_duration(rest.trim()).map_err(|e| {
        ScheduleError(format!(
            "`every {}` is not a period ({e}): write e.g. `every 15m`, `every 2h` or `every 1h30m`",
            rest.trim()
        ))
    })?;
    if d < MIN_EVERY {
        return err(format!(
            "`every {}` is shorter than the shortest period, 1 second",
            rest.trim()
        ));
    }
    Ok(d)
}

/// DST gaps of `tz` in the local-time coordinates: (first missing local
/// time, first local time after the gap), for the year after `from`.
fn gaps(tz: &Tz, from: DateTime<Utc>) -> Vec<(NaiveDateTime, NaiveDateTime)> {
    use chrono::Offset;
    let offset = |t: DateTime<Utc>| t.with_timezone(tz).offset().fix().local_minus_utc();
    let mut out = Vec::new();
    let mut t = from;
    let end = from + Span::days(GAP_LOOKAHEAD_DAYS);
    while t < end {
        let next = t + Span::hours(1);
        let (a, b) = (offset(t), offset(next));
        if b > a {
            // The offset grew within this hour: find the minute it did.
            let (mut lo, mut hi) = (t, next);
            while hi - lo > Span::minutes(1) {
                let mid = lo + (hi - lo) / 2;
                if offset(mid) == a {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            let at = hi;
            let before = (at + Span::seconds(i64::from(a))).naive_utc();
            let after = (at + Span::seconds(i64::from(b))).naive_utc();
            out.push((before, after));
        }
        t = next;
    }
    out
}

impl Schedule {
    /// Parses `expr` in zone `tz`; the warnings to show with it. `now`
    /// decides what "in the past" and "never fires" mean.
    pub fn parse(
        expr: &str,
        tz: &str,
        now: DateTime<Utc>,
    ) -> Result<(Schedule, Vec<String>), ScheduleError> {
        let expr = expr.trim();
        let zone = zone(tz)?;
        if expr.is_empty() {
            return err(
                "the schedule is empty: give a cron expression (`0 8 * * MON-FRI`), `every 15m` or `at 2026-12-24 08:00`",
            );
        }
        let lower = expr.to_lowercase();
        let kind = if let Some(rest) = lower.strip_prefix("every ") {
            Kind::Every(parse_every(rest)?)
        } else if lower.starts_with("at ") {
            let at = parse_at(&expr[3..], &zone)?;
            if at <= now {
                return err(format!(
                    "`{expr}` is in the past ({}): give a time after now",
                    at.with_timezone(&zone).to_rfc3339()
                ));
            }
            Kind::At(at)
        } else {
            Kind::Cron(Box::new(parse_cron(expr)?))
        };
        let s = Schedule {
            expr: expr.to_string(),
            tz: zone,
            kind,
        };
        if s.next_after(now).is_none() {
            return err(format!(
                "`{expr}` never fires (no matching date exists, e.g. 30 February): check the day-of-month and month fields"
            ));
        }
        let warnings = s.warnings(now);
        Ok((s, warnings))
    }

    /// The first fire strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Tz>> {
        match &self.kind {
            Kind::At(t) => (*t > after).then(|| t.with_timezone(&self.tz)),
            Kind::Every(period) => {
                let p = i64::try_from(period.as_millis()).ok()?.max(1);
                let k = after.timestamp_millis().div_euclid(p) + 1;
                let t = DateTime::<Utc>::from_timestamp_millis(k.checked_mul(p)?)?;
                Some(t.with_timezone(&self.tz))
            }
            Kind::Cron(c) => c
                .find_next_occurrence(&after.with_timezone(&self.tz), false)
                .ok(),
        }
    }

    /// The next `n` fires after `after`.
    pub fn upcoming(&self, after: DateTime<Utc>, n: usize) -> Vec<DateTime<Tz>> {
        let mut out = Vec::with_capacity(n);
        let mut t = after;
        while out.len() < n {
            let Some(next) = self.next_after(t) else {
                break;
            };
            t = next.with_timezone(&Utc);
            out.push(next);
        }
        out
    }

    /// A one-shot `at` schedule.
    pub fn once(&self) -> bool {
        matches!(self.kind, Kind::At(_))
    }

    fn warnings(&self, now: DateTime<Utc>) -> Vec<String> {
        let Kind::Cron(c) = &self.kind else {
            return Vec::new();
        };
        let next = || {
            let fires: Vec<String> = self
                .upcoming(now, 3)
                .iter()
                .map(DateTime::to_rfc3339)
                .collect();
            format!("next fires: {}", fires.join(", "))
        };
        let mut out = Vec::new();
        let fields: Vec<&str> = self.expr.split_whitespace().collect();
        if fields.len() == 5 && fields[2].starts_with("*/") && fields[4] != "*" && fields[4] != "?"
        {
            out.push(format!(
                "day-of-month `{}` with a restricted day-of-week `{}`: a day matching either fires (flyto ORs them, as vixie cron; some cron implementations AND them, and some treat `*/N` as unrestricted); {}",
                fields[2],
                fields[4],
                next()
            ));
        }
        if c.determine_job_type() != croner::JobType::FixedTime {
            for (from, to) in gaps(&self.tz, now) {
                let mut t = from;
                let mut hit = false;
                while t < to {
                    if c.is_time_matching(&t).unwrap_or(false) {
                        hit = true;
                        break;
                    }
                    t += Span::minutes(1);
                }
                if hit {
                    out.push(format!(
                        "`{}` names local times that do not exist on {} in {} (the clocks skip from {} to {}): on that day those times do not fire here, while other cron implementations fire them at {}; {}",
                        self.expr,
                        from.format("%Y-%m-%d"),
                        self.tz,
                        from.format("%H:%M"),
                        to.format("%H:%M"),
                        to.format("%H:%M"),
                        next()
                    ));
                    break;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
