//! Scheduled prompts in a thread: what `/every 1h <prompt>` and `/at 09:00 <prompt>` mean, when a
//! schedule runs next, and a run missed while no replica was active running once, not once per
//! missed interval. Pure: times are Unix milliseconds, given.

use std::time::Duration;

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// The longest interval `/every` takes (a year and a day): a longer one is refused, not stored as
/// something else.
pub const MAX_INTERVAL: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// What a schedule command asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// Repeats this often; `None`: once.
    pub every: Option<Duration>,
    /// The first run (Unix ms).
    pub first: i64,
    /// The prompt.
    pub prompt: String,
}

/// `1h`, `30m`, `2s`, `1h30m`: a duration of whole seconds or more.
#[must_use]
pub fn parse_interval(s: &str) -> Option<Duration> {
    let d = shell_agent::parse_duration(s).ok()?;
    (d.as_secs() >= 1 && d.subsec_nanos() == 0).then_some(d)
}

/// `/every <interval> <prompt>` at `now`: the first run one interval from now. An interval below
/// `min` is refused.
///
/// # Errors
/// What is wrong, in words for the thread.
pub fn every(rest: &str, now: i64, min: Duration) -> Result<Asked, String> {
    let (when, prompt) = split(rest).ok_or_else(|| EVERY_USAGE.to_owned())?;
    let every = parse_interval(when).ok_or_else(|| {
        format!("`{when}` is not an interval (like `30m`, `1h`, `24h`). {EVERY_USAGE}")
    })?;
    if every < min {
        return Err(format!(
            "Schedules repeat at most every {} here.",
            daemon_client::liveness::human_duration(min)
        ));
    }
    if every > MAX_INTERVAL {
        return Err(format!(
            "`{when}` is longer than a schedule may repeat: at most every 366 days (`366d`)."
        ));
    }
    Ok(Asked {
        every: Some(every),
        first: now.saturating_add(ms(every)),
        prompt,
    })
}

/// `/at HH:MM <prompt>` at `now`: once, at the next such time (UTC).
///
/// # Errors
/// What is wrong, in words for the thread.
pub fn at(rest: &str, now: i64) -> Result<Asked, String> {
    let (when, prompt) = split(rest).ok_or_else(|| AT_USAGE.to_owned())?;
    let minute = parse_clock(when)
        .ok_or_else(|| format!("`{when}` is not a time of day (like `09:00`, UTC). {AT_USAGE}"))?;
    let today = now - now.rem_euclid(DAY_MS);
    let mut first = today + minute * 60_000;
    if first <= now {
        first += DAY_MS;
    }
    Ok(Asked {
        every: None,
        first,
        prompt,
    })
}

/// The run after the one due at `was`, for a schedule repeating every `every` ms, seen at `now`.
/// On time (late by less than a tenth of the interval: the scheduler's own delay), the next
/// interval on the schedule's grid, so it does not drift. Later than that — runs missed while no
/// replica was active, made up once now — one whole interval after `now`, so a catch-up run is
/// not followed by the regular one moments later.
#[must_use]
pub fn next_run(was: i64, every: i64, now: i64) -> i64 {
    let every = every.max(1);
    if was > now {
        return was;
    }
    if now - was > every / 10 {
        return now.saturating_add(every);
    }
    was.saturating_add(every)
}

/// `HH:MM` (24 h) as minutes after midnight.
fn parse_clock(s: &str) -> Option<i64> {
    let (h, m) = s.split_once(':')?;
    if h.is_empty() || h.len() > 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
    ((0..24).contains(&h) && (0..60).contains(&m)).then_some(h * 60 + m)
}

fn split(rest: &str) -> Option<(&str, String)> {
    let rest = rest.trim();
    let (when, prompt) = rest.split_once(char::is_whitespace)?;
    let prompt = prompt.trim();
    (!prompt.is_empty()).then(|| (when, prompt.to_owned()))
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// `/every` without what it needs.
pub const EVERY_USAGE: &str =
    "Usage: `/every <interval> <prompt>`, like `/every 1h git pull && make test`.";
/// `/at` without what it needs.
pub const AT_USAGE: &str =
    "Usage: `/at <HH:MM> <prompt>` (UTC, once), like `/at 09:00 make report`.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_longer_than_a_year_and_a_day_is_refused_not_stored_as_another() {
        let min = Duration::from_secs(60);
        let err = every("99999999999999d echo hi", 0, min).expect_err("refused");
        assert!(err.contains("366 days"), "{err}");
        assert!(every("367d echo hi", 0, min).is_err());
        let ok = every("366d echo hi", 0, min).expect("a year and a day");
        assert_eq!(ok.every, Some(MAX_INTERVAL));
    }
}
