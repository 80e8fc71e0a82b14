//! How numbers read in everything runner prints and in the facts line a model sees: seconds,
//! token counts, dollars. Low in the tree so the session and the reports share it.

/// A duration as people read it (docs/src/runs.md "How times read"): milliseconds under a
/// second, tenths under ten, whole seconds under a minute, then minutes and seconds, hours and
/// minutes.
pub fn seconds(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..10_000 => format!("{:.1}s", ms as f64 / 1000.0),
        10_000..60_000 => format!("{}s", ms / 1000),
        60_000..3_600_000 => format!("{}m {:02}s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{}h {:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

/// A recorded time (RFC 3339) to the second, in UTC: `2026-12-07 11:33:09Z`. Text that is not
/// a time is shown as it is.
pub fn when(at: &str) -> String {
    match at.parse::<jiff::Timestamp>() {
        Ok(at) => at.strftime("%Y-%m-%d %H:%M:%SZ").to_string(),
        Err(_) => at.to_owned(),
    }
}

/// `one` for 1, `many` otherwise: `1 tool`, `3 tools`.
pub fn plural<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// `1 tool`, `3 tools`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", plural(n, one, many))
}

pub fn tokens(n: u64) -> String {
    // A sum that stopped at the largest count (see [`sum`]) says so rather than show a number.
    if n == u64::MAX {
        return "overflowed (a server reported impossible usage)".to_owned();
    }
    if n >= 1_000_000 {
        // A window of a million tokens reads `1.0M`, not `1000.0k`.
        format!("{:.1}M", n as f64 / 1e6)
    } else if n >= 1000 {
        format!("{:.1}k", n as f64 / 1000.0)
    } else {
        n.to_string()
    }
}

/// Dollars as people read them: cents, or more digits below a cent.
pub fn usd(amount: f64) -> String {
    if amount >= 0.01 {
        format!("${amount:.2}")
    } else {
        format!("${amount:.4}")
    }
}

/// Token counts added up, stopping at the largest count rather than wrapping: a hostile server
/// may report any figure (docs/src/security.md).
pub fn sum(counts: impl IntoIterator<Item = u64>) -> u64 {
    counts.into_iter().fold(0, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Times read to the second, with milliseconds only where they matter; never nanoseconds.
    #[test]
    fn times_read_to_the_second() {
        let shown: Vec<String> = [0, 35, 999, 1_000, 9_949, 10_000, 59_999, 61_000, 3_725_000]
            .map(seconds)
            .to_vec();
        assert_eq!(
            shown,
            [
                "0ms", "35ms", "999ms", "1.0s", "9.9s", "10s", "59s", "1m 01s", "1h 02m"
            ]
        );
        assert_eq!(
            when("2026-12-07T11:33:09.123456789Z"),
            "2026-12-07 11:33:09Z"
        );
        assert_eq!(when("not a time"), "not a time");
        assert_eq!(count(1, "tool", "tools"), "1 tool");
        assert_eq!(count(2, "tool", "tools"), "2 tools");
    }
}
