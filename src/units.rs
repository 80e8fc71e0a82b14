//! How numbers read in everything runner prints and in the facts line a model sees: seconds,
//! token counts, dollars. Low in the tree so the session and the reports share it.

pub fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

pub fn tokens(n: u64) -> String {
    // A sum that stopped at the largest count (see [`sum`]) says so rather than show a number.
    if n == u64::MAX {
        return "overflowed (a server reported impossible usage)".to_owned();
    }
    if n >= 1000 {
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
