//! Durations as people type them on a command line or in a prompt: `500ms`, `10s`, `2m`, `1h`, `7d`,
//! `1m30s`.

use std::time::Duration;

/// A duration string that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a duration (use e.g. 500ms, 10s, 2m, 1h, 7d, 1m30s)")]
pub struct DurationError {
    input: String,
}

/// Parses `500ms`, `10s`, `2m`, `1h`, `7d`, `1m30s`, or a bare number of seconds.
///
/// # Errors
/// [`DurationError`] for anything else, or a value that overflows.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let err = || DurationError {
        input: input.to_owned(),
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err());
    }
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(err)?;
        if digits == 0 {
            return Err(err());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| err())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.checked_mul(60).ok_or_else(err)?),
            "h" => Duration::from_secs(n.checked_mul(3600).ok_or_else(err)?),
            "d" => Duration::from_secs(n.checked_mul(86_400).ok_or_else(err)?),
            _ => return Err(err()),
        };
        total = total.checked_add(part).ok_or_else(err)?;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// Formats a duration the way summaries show it: `2s`, `500ms`, `1m 30s`, `1h 5m`, `1.2s`.
#[must_use]
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs();
    if secs < 60 {
        let tenths = (ms % 1000) / 100;
        return if tenths == 0 {
            format!("{secs}s")
        } else {
            format!("{secs}.{tenths}s")
        };
    }
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    match (h, s) {
        (0, 0) => format!("{m}m"),
        (0, _) => format!("{m}m {s}s"),
        _ => format!("{h}h {m}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_people_type() {
        let cases = [
            ("500ms", 500),
            ("10s", 10_000),
            ("2m", 120_000),
            ("1h", 3_600_000),
            ("1m30s", 90_000),
            ("7d", 604_800_000),
            ("7", 7000),
        ];
        for (input, ms) in cases {
            assert_eq!(
                parse_duration(input),
                Ok(Duration::from_millis(ms)),
                "{input}"
            );
        }
        for bad in ["", "s", "10x", "1.5s", "-1s", "m5"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_like_the_summaries() {
        assert_eq!(format_duration(Duration::from_secs(2)), "2s");
        assert_eq!(format_duration(Duration::from_millis(1250)), "1.2s");
        assert_eq!(format_duration(Duration::from_millis(300)), "300ms");
        assert_eq!(format_duration(Duration::from_secs(90)), "1m 30s");
        assert_eq!(format_duration(Duration::from_secs(600)), "10m");
        assert_eq!(format_duration(Duration::from_secs(3900)), "1h 5m");
    }
}
