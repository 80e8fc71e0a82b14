//! Durations as users write them: `90s`, `10m`, `1h30m`, `500ms`.

use std::time::Duration;

/// Parses a sequence of `<number><unit>` parts (`ms`, `s`, `m`, `h`, `d`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("expected a number at `{rest}`"));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("`{}` is too large", &rest[..digits]))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = rest[..unit_len].trim();
        rest = rest[unit_len..].trim_start();
        let part = match unit {
            "ms" => Duration::from_millis(number),
            "s" | "sec" | "secs" => Duration::from_secs(number),
            "m" | "min" | "mins" => Duration::from_secs(number.saturating_mul(60)),
            "h" | "hr" | "hrs" => Duration::from_secs(number.saturating_mul(3600)),
            "d" => Duration::from_secs(number.saturating_mul(86_400)),
            "" => return Err(format!("`{number}` needs a unit (ms, s, m, h)")),
            other => return Err(format!("unknown unit `{other}` (use ms, s, m, h)")),
        };
        total = total.saturating_add(part);
    }
    if total.is_zero() {
        return Err("a duration must be longer than zero".into());
    }
    Ok(total)
}

/// Formats a duration the short way users write it (`15m`, `1h30m`, `90s` -> `1m30s`).
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if !millis.is_multiple_of(1000) {
        return format!("{millis}ms");
    }
    let mut secs = duration.as_secs();
    let mut out = String::new();
    for (unit, size) in [("h", 3600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if out.is_empty() { "0s".into() } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_sums() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    }

    #[test]
    fn rejects_bad_text() {
        assert!(parse_duration("").is_err());
        assert!(parse_duration("90").unwrap_err().contains("needs a unit"));
        assert!(parse_duration("5y").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("99999999999999999999s").is_err());
    }

    #[test]
    fn formats_round_trip() {
        for text in ["15m", "1h30m", "45s", "2h", "250ms"] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
    }
}
