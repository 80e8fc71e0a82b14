//! Durations as users write them: `90s`, `10m`, `1h30m`, `500ms`.

use std::time::Duration;

/// Parses a duration as people write it (`90s`, `10m`, `1h30m`, `1h 30m`, `500ms`, `2d`,
/// `15 minutes`, or ISO 8601 `PT1H`), with jiff. A day is 24 hours. Zero, negative and bare
/// numbers are refused, the last with the unit it probably lacks.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".into());
    }
    if text.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("`{text}` needs a unit: did you mean `{text}s`?"));
    }
    let span: jiff::Span = text.parse().map_err(|err: jiff::Error| {
        // jiff says which format it tried first; the rest is what went wrong.
        let why = err.to_string();
        match why.split_once(" format: ") {
            Some((_, rest)) => rest.to_owned(),
            None => why,
        }
    })?;
    let duration = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .map_err(|err| err.to_string())?;
    if duration.is_negative() {
        return Err("a duration cannot be negative".into());
    }
    if duration.is_zero() {
        return Err("a duration must be longer than zero".into());
    }
    Duration::try_from(duration).map_err(|err| err.to_string())
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
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(2 * 86_400)));
        assert_eq!(parse_duration("15 minutes"), Ok(Duration::from_secs(900)));
    }

    #[test]
    fn rejects_bad_text() {
        assert!(parse_duration("").is_err());
        assert_eq!(
            parse_duration("90").unwrap_err(),
            "`90` needs a unit: did you mean `90s`?"
        );
        assert!(parse_duration("5q").is_err());
        assert!(parse_duration("-5m").is_err());
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
