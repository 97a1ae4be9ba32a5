//! Short human forms of durations, ages and sizes. Times are unix epoch
//! milliseconds, as on the wire.

use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `340ms`, `1.2s`, `3m04s`, `2h05m`, `3d04h`.
/// `2026-12-01T15:02:02Z`.
pub fn rfc3339(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

pub fn duration(ms: u64) -> String {
    const S: u64 = 1000;
    const M: u64 = 60 * S;
    const H: u64 = 60 * M;
    const D: u64 = 24 * H;
    match ms {
        ms if ms < S => format!("{ms}ms"),
        ms if ms < M => format!("{}.{}s", ms / S, ms % S / 100),
        ms if ms < H => format!("{}m{:02}s", ms / M, ms % M / S),
        ms if ms < D => format!("{}h{:02}m", ms / H, ms % H / M),
        ms => format!("{}d{:02}h", ms / D, ms % D / H),
    }
}

/// How long ago `then_ms` was: `just now`, `12s ago`, `5m ago`, `3h ago`, `2d ago`.
pub fn age(now_ms: u64, then_ms: u64) -> String {
    let secs = now_ms.saturating_sub(then_ms) / 1000;
    match secs {
        0 => "just now".to_string(),
        s if s < 60 => format!("{s}s ago"),
        s if s < 3600 => format!("{}m ago", s / 60),
        s if s < 86_400 => format!("{}h ago", s / 3600),
        s => format!("{}d ago", s / 86_400),
    }
}

/// How long until `then_ms`: `in 40s`, `in 4m12s`; `now` once it has
/// passed. Rounded up to whole seconds: a countdown to the tenth of a
/// second is noise, and "in 0s" would read as already past.
pub fn until(now_ms: u64, then_ms: u64) -> String {
    match then_ms.saturating_sub(now_ms).div_ceil(1000) {
        0 => "now".to_string(),
        s if s < 60 => format!("in {s}s"),
        s => format!("in {}", duration(s * 1000)),
    }
}

/// `512 B`, `1.5 KiB`, `3.0 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS.get(unit).copied().unwrap_or("TiB"))
}

/// Token counts in little room: `950`, `12.3k`, `4.5M`.
pub fn tokens(n: u64) -> String {
    match n {
        n if n < 1_000 => n.to_string(),
        n if n < 1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        n => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// Exact counts with thousands separators: `950`, `18,200`, `1,234,567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Money in US dollars: `$0`, `$0.0123`, `$12.35`.
pub fn cost(usd: f64) -> String {
    if usd <= 0.0 || !usd.is_finite() {
        "$0".to_string()
    } else if usd < 1.0 {
        format!("${usd:.4}")
    } else {
        format!("${usd:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_short() {
        assert_eq!(duration(0), "0ms");
        assert_eq!(duration(340), "340ms");
        assert_eq!(duration(1_234), "1.2s");
        assert_eq!(duration(59_999), "59.9s");
        assert_eq!(duration(184_000), "3m04s");
        assert_eq!(duration(2 * 3_600_000 + 5 * 60_000 + 7_000), "2h05m");
        assert_eq!(duration(3 * 86_400_000 + 4 * 3_600_000), "3d04h");
    }

    #[test]
    fn ages() {
        let now = 10_000_000;
        assert_eq!(age(now, now), "just now");
        assert_eq!(age(now, now + 5_000), "just now");
        assert_eq!(age(now, now - 12_000), "12s ago");
        assert_eq!(age(now, now - 300_000), "5m ago");
        assert_eq!(age(now, now - 7_200_000), "2h ago");
    }

    #[test]
    fn countdowns() {
        let now = 10_000_000;
        assert_eq!(until(now, now), "now");
        assert_eq!(until(now, now - 5_000), "now");
        assert_eq!(until(now, now + 1), "in 1s");
        assert_eq!(until(now, now + 40_000), "in 40s");
        assert_eq!(until(now, now + 59_001), "in 1m00s");
        assert_eq!(until(now, now + 252_000), "in 4m12s");
        assert_eq!(until(now, now + 251_001), "in 4m12s");
    }

    #[test]
    fn sizes() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 * 1024 * 1024), "3.0 MiB");
    }

    #[test]
    fn tokens_and_costs() {
        assert_eq!(tokens(950), "950");
        assert_eq!(tokens(12_345), "12.3k");
        assert_eq!(tokens(4_500_000), "4.5M");
        assert_eq!(count(0), "0");
        assert_eq!(count(950), "950");
        assert_eq!(count(1_000), "1,000");
        assert_eq!(count(18_200), "18,200");
        assert_eq!(count(128_000), "128,000");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(cost(0.0), "$0");
        assert_eq!(cost(0.012_34), "$0.0123");
        assert_eq!(cost(12.345_6), "$12.35");
    }
}
