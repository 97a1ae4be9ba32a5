//! Durations as people write them, in config files, plan and job specs,
//! CLI flags and JSON requests: a bare number in the key's unit (seconds
//! for `*_secs` keys and most durations, hours for `*_hours`, days for
//! `*_days`), or a humantime string such as `30s`, `5m`, `2h`, `1h30m`,
//! `500ms`. One parser for all of them, so every key accepts the same forms
//! and rejects bad input with the same message.
//!
//! The binary encoding carries the plain number (bincode is not
//! self-describing); only human-readable formats (TOML, JSON) take strings.

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serializer};
use std::fmt;
use std::time::Duration;

/// What a bare number counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Secs,
    Hours,
    Days,
}

impl Unit {
    fn secs(self) -> f64 {
        match self {
            Unit::Secs => 1.0,
            Unit::Hours => 3600.0,
            Unit::Days => 86_400.0,
        }
    }

    fn example(self) -> &'static str {
        match self {
            Unit::Secs => "a number of seconds (90)",
            Unit::Hours => "a number of hours (6)",
            Unit::Days => "a number of days (30)",
        }
    }
}

/// The message for a value that is not a duration.
fn bad(key: &str, shown: &str, unit: Unit, why: &str) -> String {
    format!(
        "{key}: `{shown}` is not a duration{why}: write {} or a duration like 30s, 5m, 2h, 1h30m",
        unit.example()
    )
}

fn from_number(key: &str, n: f64, shown: &str, unit: Unit) -> Result<Duration, String> {
    if !n.is_finite() || n < 0.0 {
        return Err(bad(key, shown, unit, " (it must not be negative)"));
    }
    Duration::try_from_secs_f64(n * unit.secs()).map_err(|_| bad(key, shown, unit, " (too long)"))
}

/// Parses `text` for `key`: a bare number in `unit`, or a humantime
/// duration.
pub fn parse(key: &str, text: &str, unit: Unit) -> Result<Duration, String> {
    let t = text.trim();
    if let Ok(n) = t.parse::<f64>() {
        return from_number(key, n, text, unit);
    }
    if t.starts_with('-') {
        return Err(bad(key, text, unit, " (it must not be negative)"));
    }
    humantime::parse_duration(t).map_err(|e| bad(key, text, unit, &format!(" ({e})")))
}

/// Whole seconds, rounded up (a timeout of 1.5s waits 2s, not 1s).
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// [`parse`] in whole seconds (rounded up).
pub fn parse_secs(key: &str, text: &str) -> Result<u64, String> {
    parse(key, text, Unit::Secs).map(ceil_secs)
}

/// A number (in `unit`) or a string, from a human-readable format.
struct Any<'k> {
    key: &'k str,
    unit: Unit,
}

impl<'de> Visitor<'de> for Any<'_> {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "{} or a duration like 30s, 5m, 2h, 1h30m",
            self.unit.example()
        )
    }
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Duration, E> {
        from_number(self.key, n as f64, &n.to_string(), self.unit).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Duration, E> {
        from_number(self.key, n as f64, &n.to_string(), self.unit).map_err(E::custom)
    }
    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Duration, E> {
        from_number(self.key, n, &n.to_string(), self.unit).map_err(E::custom)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Duration, E> {
        parse(self.key, s, self.unit).map_err(E::custom)
    }
}

/// `Some` of [`Any`], or `None` for a JSON `null`.
struct Opt<'k>(Any<'k>);

impl<'de> Visitor<'de> for Opt<'_> {
    type Value = Option<Duration>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self.0).map(Some)
    }
}

/// A duration key of a human-readable format, named `key` in errors.
pub fn de_duration<'de, D: Deserializer<'de>>(
    key: &str,
    unit: Unit,
    d: D,
) -> Result<Duration, D::Error> {
    d.deserialize_any(Any { key, unit })
}

/// An optional `*_secs` key: whole seconds on the wire (bincode carries
/// the number as before), a number or a duration string in TOML and JSON.
pub fn de_opt_secs<'de, D: Deserializer<'de>>(key: &str, d: D) -> Result<Option<u64>, D::Error> {
    if !d.is_human_readable() {
        return Option::<u64>::deserialize(d);
    }
    d.deserialize_option(Opt(Any {
        key,
        unit: Unit::Secs,
    }))
    .map(|o| o.map(ceil_secs))
}

/// `with = "flyto_protocol::duration::human"` for a `Duration` key: a
/// number of seconds or a duration string; written back as a string.
pub mod human {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        if !d.is_human_readable() {
            return Duration::deserialize(d);
        }
        de_duration("the duration", Unit::Secs, d)
    }

    pub fn serialize<S: Serializer>(v: &Duration, s: S) -> Result<S::Ok, S::Error> {
        if !s.is_human_readable() {
            return serde::Serialize::serialize(v, s);
        }
        s.collect_str(&humantime::format_duration(*v))
    }
}

/// `with = "flyto_protocol::duration::hours"` for an `f64` number of
/// hours: also takes `90m`, `1d`.
pub mod hours {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        if !d.is_human_readable() {
            return f64::deserialize(d);
        }
        de_duration("the number of hours", Unit::Hours, d).map(|v| v.as_secs_f64() / 3600.0)
    }

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(*v)
    }
}

/// `with = "flyto_protocol::duration::whole_hours"`: a `u64` of hours,
/// rounded up; also takes `90m`, `2d`.
pub mod whole_hours {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        if !d.is_human_readable() {
            return u64::deserialize(d);
        }
        de_duration("the number of hours", Unit::Hours, d).map(|v| ceil_secs(v).div_ceil(3600))
    }

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*v)
    }
}

/// `with = "flyto_protocol::duration::whole_days"`: a `u64` of days,
/// rounded up; also takes `2w`, `36h`.
pub mod whole_days {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        if !d.is_human_readable() {
            return u64::deserialize(d);
        }
        de_duration("the number of days", Unit::Days, d).map(|v| ceil_secs(v).div_ceil(86_400))
    }

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_humantime_strings_parse_in_the_keys_unit() {
        assert_eq!(parse_secs("timeout_secs", "90"), Ok(90));
        assert_eq!(parse_secs("timeout_secs", "5m"), Ok(300));
        assert_eq!(parse_secs("timeout_secs", "1h30m"), Ok(5400));
        assert_eq!(parse_secs("timeout_secs", "1.5s"), Ok(2));
        assert_eq!(
            parse("k", "500ms", Unit::Secs),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(
            parse("k", "6", Unit::Hours),
            Ok(Duration::from_secs(6 * 3600))
        );
        assert_eq!(
            parse("k", "2", Unit::Days),
            Ok(Duration::from_secs(2 * 86_400))
        );
    }

    #[test]
    fn bad_values_name_the_key_and_show_the_accepted_forms() {
        for bad in ["5 minutes please", "-3s", "-3", "soon", ""] {
            let e = parse_secs("timeout_secs", bad).unwrap_err();
            assert!(
                e.starts_with("timeout_secs: `") && e.contains("30s, 5m, 2h, 1h30m"),
                "{bad}: {e}"
            );
        }
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Spec {
        #[serde(default, deserialize_with = "t")]
        timeout_secs: Option<u64>,
        #[serde(default = "d", with = "human")]
        grace: Duration,
    }
    fn t<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        de_opt_secs("timeout_secs", d)
    }
    fn d() -> Duration {
        Duration::from_secs(1)
    }

    #[test]
    fn json_and_bincode_take_what_they_took_before() {
        let s: Spec = serde_json::from_str(r#"{"timeout_secs": "5m", "grace": 30}"#).unwrap();
        assert_eq!(
            s,
            Spec {
                timeout_secs: Some(300),
                grace: Duration::from_secs(30)
            }
        );
        let s: Spec = serde_json::from_str(r#"{"timeout_secs": 7, "grace": "2m"}"#).unwrap();
        assert_eq!(s.timeout_secs, Some(7));
        assert_eq!(s.grace, Duration::from_secs(120));
        let s: Spec = serde_json::from_str(r#"{"timeout_secs": null}"#).unwrap();
        assert_eq!(s.timeout_secs, None);
        let e = serde_json::from_str::<Spec>(r#"{"timeout_secs": "-3s"}"#).unwrap_err();
        assert!(e.to_string().contains("timeout_secs: `-3s`"), "{e}");

        let cfg = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(&s, cfg).unwrap();
        let (back, _): (Spec, usize) = bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
        assert_eq!(back, s);
    }
}
