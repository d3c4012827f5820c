//! `chat-bridge history list|show|search`: on-call reads past sessions from the store.

use std::fmt::Write;

use anyhow::Context;

use crate::store::history::{self, Filter};
use crate::store::{Store, tool_calls};

/// Formats unix ms as `YYYY-MM-DD HH:MM:SSZ`.
#[must_use]
pub fn fmt_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A point in time for `--since` / `--until`: unix milliseconds, a UTC date (`2026-11-29`), a UTC
/// time (`2026-11-29T14:05:00Z` or `2026-11-29 14:05:00Z`), or a duration ago (`90m`, `24h`, `7d`).
///
/// # Errors
/// Anything else, with the forms it takes.
pub fn parse_time(s: &str, now_ms: i64) -> anyhow::Result<i64> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && s.len() > 8 {
        return s.parse().context("unix milliseconds");
    }
    if let Some(days) = s.strip_suffix('d')
        && let Ok(n) = days.parse::<i64>()
    {
        return Ok(now_ms - n * 86_400_000);
    }
    if let Ok(d) = shell_agent::parse_duration(s) {
        return Ok(now_ms - i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    }
    let bad = || {
        anyhow::anyhow!(
            "{s:?} is not a time: use 2026-11-29, 2026-11-29T14:05:00Z, unix milliseconds, or a duration ago like 24h or 7d"
        )
    };
    let (date, time) = match s.split_once(['T', ' ']) {
        Some((d, t)) => (d, Some(t.trim_end_matches('Z'))),
        None => (s, None),
    };
    let num = |p: Option<&str>| p.and_then(|p| p.parse::<i64>().ok()).ok_or_else(bad);
    let mut parts = date.split('-');
    let (y, m, d) = (num(parts.next())?, num(parts.next())?, num(parts.next())?);
    if parts.next().is_some() || !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return Err(bad());
    }
    let secs = match time {
        None => 0,
        Some(t) => {
            let mut hms = t.split(':');
            let (h, mi) = (num(hms.next())?, num(hms.next())?);
            let sec = hms.next().map_or(Ok(0), |x| num(Some(x)))?;
            if h > 23 || mi > 59 || sec > 60 {
                return Err(bad());
            }
            h * 3600 + mi * 60 + sec
        }
    };
    Ok((days_from_civil(y, m, d) * 86_400 + secs) * 1000)
}

/// `history list`.
///
/// # Errors
/// Store errors; a bad cursor.
pub async fn list(store: &Store, filter: &Filter, json: bool) -> anyhow::Result<String> {
    let mut c = store.read_conn().await?;
    let page = history::list(&mut c, filter).await?;
    if json {
        return Ok(serde_json::to_string_pretty(&page)?);
    }
    let mut out = format!(
        "{:<36}  {:<8}  {:<12}  {:<12}  {:<12}  {:<7}  {:<20}  {}\n",
        "ID", "PLATFORM", "PROJECT", "CHANNEL", "USER", "STATUS", "STARTED", "TITLE"
    );
    for c in &page.items {
        let title: String = c.title.chars().take(40).collect();
        let _ = writeln!(
            out,
            "{:<36}  {:<8}  {:<12}  {:<12}  {:<12}  {:<7}  {:<20}  {title}",
            c.id,
            c.platform,
            c.project,
            c.channel,
            c.started_by,
            c.status,
            fmt_time(c.created_at)
        );
    }
    if let Some(next) = &page.next_cursor {
        let _ = writeln!(out, "more: --cursor {next}");
    }
    Ok(out)
}

/// `history show ID`: a conversation's transcript, or one tool call with its full output.
///
/// # Errors
/// Store errors; an id that is neither.
pub async fn show(store: &Store, id: &str, json: bool) -> anyhow::Result<String> {
    let mut c = store.read_conn().await?;
    if let Some(d) = history::detail(&mut c, id).await? {
        if json {
            return Ok(serde_json::to_string_pretty(&d)?);
        }
        let mut out = format!(
            "conversation {} — {} {} thread {} — started by {} at {}\n",
            d.conversation.id,
            d.conversation.platform,
            d.conversation.channel,
            d.conversation.thread,
            d.conversation.started_by,
            fmt_time(d.conversation.created_at)
        );
        for e in &d.transcript {
            let who = e.actor.as_deref().unwrap_or("-");
            let _ = writeln!(
                out,
                "{}  {:<13} {:<8} {}",
                fmt_time(e.created_at),
                e.kind,
                who,
                crate::channel::text::plain(e.body.lines().next().unwrap_or(""))
            );
            if let Some(tc) = &e.tool_call_id
                && e.kind == "tool_finished"
            {
                let _ = writeln!(out, "{:<22}   output: chat-bridge history show {tc}", "");
            }
        }
        return Ok(out);
    }
    let call = tool_calls::get(&mut c, id)
        .await?
        .with_context(|| format!("no conversation or tool call with id {id}"))?;
    if json {
        return Ok(serde_json::to_string_pretty(&call)?);
    }
    let mut out = format!("tool call {} — {} — {}\n", call.id, call.title, call.status);
    if let Some(s) = &call.summary {
        let _ = writeln!(out, "{s}");
    }
    let _ = writeln!(
        out,
        "exit code: {}  signal: {}  heartbeats: {}",
        shown(call.exit_code.as_ref()),
        shown(call.signal.as_ref()),
        call.heartbeats
    );
    let _ = writeln!(
        out,
        "--- output ---\n{}",
        call.output.as_deref().unwrap_or("")
    );
    Ok(out)
}

/// A value for people: itself, or `-` when there is none (never `Some(0)`).
fn shown(v: Option<&impl std::fmt::Display>) -> String {
    v.map_or_else(|| "-".to_owned(), ToString::to_string)
}

/// `history search QUERY`.
///
/// # Errors
/// Store errors.
pub async fn search(store: &Store, q: &str, limit: i64, json: bool) -> anyhow::Result<String> {
    let mut c = store.read_conn().await?;
    let hits = history::search(&mut c, q, limit).await?;
    if json {
        return Ok(serde_json::to_string_pretty(&hits)?);
    }
    let mut out = String::new();
    for h in hits {
        let _ = writeln!(
            out,
            "{}  {:<11} {}  {}",
            fmt_time(h.at),
            h.field,
            h.conversation_id,
            h.snippet.replace('\n', " ⏎ ")
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_format_as_utc() {
        assert_eq!(super::fmt_time(0), "1970-01-01 00:00:00Z");
        assert_eq!(super::fmt_time(1_795_983_578_686), "2026-11-29 20:19:38Z");
        assert_eq!(
            super::fmt_time(951_782_400_000),
            "2000-02-29 00:00:00Z",
            "leap day"
        );
    }

    #[test]
    fn since_and_until_take_dates_times_unix_ms_and_durations_ago() {
        let now = 1_795_983_578_686;
        let p = |s: &str| super::parse_time(s, now).expect(s);
        assert_eq!(super::fmt_time(p("2026-11-29")), "2026-11-29 00:00:00Z");
        assert_eq!(
            super::fmt_time(p("2000-02-29T13:05:09Z")),
            "2000-02-29 13:05:09Z"
        );
        assert_eq!(
            super::fmt_time(p("2026-11-29 20:19:38Z")),
            "2026-11-29 20:19:38Z"
        );
        assert_eq!(p("1795983578686"), 1_795_983_578_686);
        assert_eq!(p("24h"), now - 86_400_000);
        assert_eq!(p("7d"), now - 7 * 86_400_000);
        for bad in ["yesterday", "2026-13-01", "2026-11-29T25:00:00Z", "2026-11"] {
            let err = super::parse_time(bad, now).expect_err(bad).to_string();
            assert!(err.contains("24h"), "{err}");
        }
    }
}
