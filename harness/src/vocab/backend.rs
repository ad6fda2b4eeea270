//! Backend identity: a PostgreSQL backend is `(pid, backend_start)`, never a pid alone.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A PostgreSQL backend's identity: a pid alone can be reused, `(pid, backend_start)` cannot.
/// Serialised as `[pid, start_us]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "(i32, i64)", into = "(i32, i64)")]
pub struct BackendId {
    pub pid: i32,
    /// `backend_start` in microseconds since the Unix epoch.
    pub start_us: i64,
}

impl From<(i32, i64)> for BackendId {
    fn from((pid, start_us): (i32, i64)) -> Self {
        BackendId { pid, start_us }
    }
}

impl From<BackendId> for (i32, i64) {
    fn from(b: BackendId) -> Self {
        (b.pid, b.start_us)
    }
}

impl fmt::Display for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pid {} (backend_start {})",
            self.pid,
            self.backend_start()
        )
    }
}

/// Microseconds since the Unix epoch of a `timestamptz` printed in ISO DateStyle:
/// `2026-11-30 11:20:11.710037+00` (fraction 0-6 digits, offset `+HH`, `+HH:MM` or
/// `+HH:MM:SS`). `None` for anything else (BC dates, infinity, other DateStyles).
pub fn parse_timestamptz(s: &str) -> Option<i64> {
    let (date, rest) = s.split_once(' ')?;
    let mut d = date.splitn(3, '-');
    let (y, m, day): (i64, i64, i64) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || date.len() < 10 {
        return None;
    }
    let sign_at = rest.find(['+', '-'])?;
    let (time, offset) = rest.split_at(sign_at);
    let (hms, frac) = match time.split_once('.') {
        Some((hms, frac)) => (hms, frac),
        None => (time, ""),
    };
    if frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let micros: i64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<i64>().ok()? * 10i64.pow(6 - frac.len() as u32)
    };
    let mut t = hms.splitn(3, ':');
    let (hh, mm, ss): (i64, i64, i64) = (
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
    );
    let negative = offset.starts_with('-');
    let mut o = offset[1..].splitn(3, ':');
    let mut off_secs = o.next()?.parse::<i64>().ok()? * 3600;
    if let Some(mm) = o.next() {
        off_secs += mm.parse::<i64>().ok()? * 60;
    }
    if let Some(ss) = o.next() {
        off_secs += ss.parse::<i64>().ok()?;
    }
    if negative {
        off_secs = -off_secs;
    }
    // Days from 1970-01-01 in the proleptic Gregorian calendar (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    let secs = days * 86400 + hh * 3600 + mm * 60 + ss - off_secs;
    Some(secs * 1_000_000 + micros)
}

/// `backend_start` as PostgreSQL prints it in UTC with ISO DateStyle
/// (`2026-11-30 09:17:26.807923+00`), from microseconds since the Unix epoch.
pub fn format_timestamptz(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let micros = us.rem_euclid(1_000_000);
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let mut s = format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    if micros != 0 {
        let frac = format!("{micros:06}");
        s.push('.');
        s.push_str(frac.trim_end_matches('0'));
    }
    s.push_str("+00");
    s
}

/// Now, UTC, as `YYYYMMDDTHHMMSSZ` (report directory names, history headers).
pub fn utc_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let t = format_timestamptz(secs * 1_000_000);
    // "2026-11-30 09:17:26+00" -> "20261130T091726Z"
    let digits: String = t[..19].chars().filter(|c| c.is_ascii_digit()).collect();
    format!("{}T{}Z", &digits[..8], &digits[8..])
}

impl BackendId {
    /// `backend_start` as PostgreSQL prints it (UTC).
    pub fn backend_start(&self) -> String {
        format_timestamptz(self.start_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamptz_parses_fractions_offsets_and_calendar() {
        // Values checked with PostgreSQL: extract(epoch FROM '...'::timestamptz) * 1e6.
        let cases = [
            ("1970-01-01 00:00:00+00", 0),
            ("2025-11-30 09:00:00.123456+00", 1764493200123456),
            ("2025-11-30 09:00:00.12+00", 1764493200120000),
            ("2025-11-30 09:00:00+00", 1764493200000000),
            ("2025-11-30 14:30:00+05:30", 1764493200000000),
            ("2025-11-30 05:00:00-04", 1764493200000000),
            ("2024-02-29 23:59:59.999999+00", 1709251199999999),
            ("2000-03-01 00:00:00+00", 951868800000000),
            ("1900-03-01 00:00:00+00", -2203891200000000),
            ("2026-11-30 11:20:11.710037+00", 1796037611710037),
        ];
        for (text, us) in cases {
            assert_eq!(parse_timestamptz(text), Some(us), "{text}");
        }
        for bad in [
            "",
            "2025-11-30",
            "2025-13-01 00:00:00+00",
            "2025-11-30 09:00:00.1234567+00",
            "2025-11-30 09:00:00",
            "infinity",
        ] {
            assert_eq!(parse_timestamptz(bad), None, "{bad}");
        }
    }

    #[test]
    fn timestamps_print_as_postgresql_prints_them_and_round_trip() {
        for (text, us) in [
            ("1970-01-01 00:00:00+00", 0),
            ("2025-11-30 09:00:00.123456+00", 1764493200123456),
            ("2025-11-30 09:00:00.12+00", 1764493200120000),
            ("2024-02-29 23:59:59.999999+00", 1709251199999999),
            ("1900-03-01 00:00:00+00", -2203891200000000),
        ] {
            assert_eq!(format_timestamptz(us), text);
            assert_eq!(parse_timestamptz(text), Some(us));
        }
    }

    #[test]
    fn identity_serialises_as_a_pair() {
        let b = BackendId {
            pid: 7,
            start_us: 9,
        };
        assert_eq!(serde_json::to_string(&b).unwrap(), "[7,9]");
        assert_eq!(serde_json::from_str::<BackendId>("[7,9]").unwrap(), b);
    }
}

/// When PostgreSQL ran an op, by its own clock (`clock_timestamp()`, microseconds since the
/// Unix epoch), read in the same statement as the op (`sql::echo`). `lo`: read before the op's
/// call; `hi`: read after it (a bound missing when the statement has none: BEGIN, COMMIT and
/// ROLLBACK report only a time after them, a call that failed none after it). `clock` names the
/// PostgreSQL whose clock it is (its postmaster's start, `pg_postmaster_start_time()`): times of
/// different clocks are never compared (a standby after failover, another host, a restart).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ServerTime {
    pub clock: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lo: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hi: Option<i64>,
}

impl ServerTime {
    /// A time inside the op's statement (its backend runs one statement at a time, so any
    /// such time orders the ops of one backend).
    pub fn any(&self) -> Option<i64> {
        self.lo.or(self.hi)
    }

    /// Whether `self`'s op certainly ran before `later`'s on the server (one clock, the one
    /// ended before the other began). Ops of one backend are ordered by [`ServerTime::any`]
    /// instead ([`ServerTime::precedes_on`]).
    pub fn precedes(&self, later: &ServerTime) -> bool {
        self.clock == later.clock && matches!((self.hi, later.lo), (Some(a), Some(b)) if a < b)
    }

    /// [`ServerTime::precedes`] for two ops of one backend: any time of each orders them.
    pub fn precedes_on(&self, later: &ServerTime) -> bool {
        self.clock == later.clock
            && matches!((self.any(), later.any()), (Some(a), Some(b)) if a < b)
    }
}
