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

/// `history list`.
///
/// # Errors
/// Store errors; a bad cursor.
pub async fn list(store: &Store, filter: &Filter, json: bool) -> anyhow::Result<String> {
    let mut c = store.conn().await?;
    let page = history::list(&mut c, filter).await?;
    if json {
        return Ok(serde_json::to_string_pretty(&page)?);
    }
    let mut out = format!(
        "{:<36}  {:<8}  {:<12}  {:<12}  {:<7}  {:<20}  {}\n",
        "ID", "PLATFORM", "CHANNEL", "USER", "STATUS", "STARTED", "TITLE"
    );
    for c in &page.items {
        let title: String = c.title.chars().take(40).collect();
        let _ = writeln!(
            out,
            "{:<36}  {:<8}  {:<12}  {:<12}  {:<7}  {:<20}  {title}",
            c.id,
            c.platform,
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
    let mut c = store.conn().await?;
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
                e.body.lines().next().unwrap_or("")
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
        "exit code: {:?}  signal: {:?}  heartbeats: {}",
        call.exit_code, call.signal, call.heartbeats
    );
    let _ = writeln!(
        out,
        "--- output ---\n{}",
        call.output.as_deref().unwrap_or("")
    );
    Ok(out)
}

/// `history search QUERY`.
///
/// # Errors
/// Store errors.
pub async fn search(store: &Store, q: &str, limit: i64, json: bool) -> anyhow::Result<String> {
    let mut c = store.conn().await?;
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
}
