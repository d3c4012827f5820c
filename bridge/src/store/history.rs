//! The read side for on-call: conversations with filters and cursor pagination, a conversation's
//! transcript with its tool calls, one tool call with its full output, and text search over prompts,
//! answers, tool titles and tool output — the same results on both backends.

use serde::Serialize;
use sqlx::AnyConnection;

use super::bind::BindExt;
use super::conversations::Conversation;
use super::tool_calls::ToolCall;
use super::transcript::Entry;
use super::turns::Turn;
use super::{Result, StoreError};

/// Filters for [`list`]; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// `slack`, `discord`, `console`.
    pub platform: Option<String>,
    /// The project (`default` in the one-project configuration).
    pub project: Option<String>,
    /// Channel id.
    pub channel: Option<String>,
    /// Who started the conversation.
    pub user: Option<String>,
    /// Created at or after (unix ms).
    pub since: Option<i64>,
    /// Created before (unix ms).
    pub until: Option<i64>,
    /// `active` or `closed`.
    pub status: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size (1–500; default 50).
    pub limit: Option<i64>,
}

/// One page of conversations, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Page {
    /// The conversations.
    pub items: Vec<Conversation>,
    /// Pass as `cursor` for the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// A cursor that was not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cursor {0:?}: pass the next_cursor of a previous page")]
pub struct BadCursor(pub String);

fn parse_cursor(c: &str) -> Result<(i64, String), BadCursor> {
    let (at, id) = c.split_once('.').ok_or_else(|| BadCursor(c.to_owned()))?;
    let at = at.parse().map_err(|_| BadCursor(c.to_owned()))?;
    if id.is_empty() {
        return Err(BadCursor(c.to_owned()));
    }
    Ok((at, id.to_owned()))
}

/// Lists conversations, newest first.
///
/// # Errors
/// [`HistoryError::BadCursor`] for a cursor we did not issue; database errors.
pub async fn list(c: &mut AnyConnection, f: &Filter) -> Result<Page, HistoryError> {
    let limit = f.limit.unwrap_or(50).clamp(1, 500);
    let cursor = f.cursor.as_deref().map(parse_cursor).transpose()?;
    let (cursor_at, cursor_id) = match cursor {
        Some((at, id)) => (Some(at), Some(id)),
        None => (None, None),
    };
    let mut items = sqlx::query_as::<_, Conversation>(
        "SELECT id, platform, project, workspace, channel, thread, daemon_session, cwd, started_by, title, status, created_at, updated_at
         FROM conversations
         WHERE ($1 IS NULL OR platform = $1)
           AND ($2 IS NULL OR channel = $2)
           AND ($3 IS NULL OR started_by = $3)
           AND ($4 IS NULL OR created_at >= $4)
           AND ($5 IS NULL OR created_at < $5)
           AND ($6 IS NULL OR status = $6)
           AND ($7 IS NULL OR created_at < $7 OR (created_at = $7 AND id < $8))
           AND ($10 IS NULL OR project = $10)
         ORDER BY created_at DESC, id DESC
         LIMIT $9",
    )
    .arg(f.platform.as_deref())
    .arg(f.channel.as_deref())
    .arg(f.user.as_deref())
    .arg(f.since)
    .arg(f.until)
    .arg(f.status.as_deref())
    .arg(cursor_at)
    .arg(cursor_id)
    .arg(limit + 1)
    .arg(f.project.as_deref())
    .fetch_all(c)
    .await
    .map_err(StoreError::from)?;
    let next_cursor = if items.len() as i64 > limit {
        items.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        items.last().map(|l| format!("{}.{}", l.created_at, l.id))
    } else {
        None
    };
    Ok(Page { items, next_cursor })
}

/// History errors: bad input, or the store.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The caller passed a cursor we did not issue.
    #[error(transparent)]
    BadCursor(#[from] BadCursor),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A conversation with everything that happened in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Detail {
    /// The conversation.
    pub conversation: Conversation,
    /// Its turns.
    pub turns: Vec<Turn>,
    /// Its transcript, in order.
    pub transcript: Vec<Entry>,
    /// Its tool calls (with full output).
    pub tool_calls: Vec<ToolCall>,
}

/// One conversation in full.
///
/// # Errors
/// Database errors.
pub async fn detail(c: &mut AnyConnection, id: &str) -> Result<Option<Detail>> {
    let Some(conversation) = super::conversations::get(c, id).await? else {
        return Ok(None);
    };
    let turns = super::turns::of_conversation(c, id).await?;
    let transcript = super::transcript::list(c, id).await?;
    let tool_calls = super::tool_calls::of_conversation(c, id).await?;
    Ok(Some(Detail {
        conversation,
        turns,
        transcript,
        tool_calls,
    }))
}

/// Where a search term was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hit {
    /// Conversation.
    pub conversation_id: String,
    /// `prompt`, `answer`, `tool_title`, `tool_output`.
    pub field: &'static str,
    /// The turn (prompts, answers) or our tool-call id (tools).
    pub id: String,
    /// Up to ~160 characters around the first match.
    pub snippet: String,
    /// Unix ms of the turn or tool call.
    pub at: i64,
}

/// Escapes `%`, `_` and `\` for a `LIKE … ESCAPE '\'` pattern.
fn like_pattern(q: &str) -> String {
    let mut p = String::with_capacity(q.len() + 2);
    p.push('%');
    for ch in q.to_lowercase().chars() {
        if matches!(ch, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(ch);
    }
    p.push('%');
    p
}

/// Up to 160 characters of `text` around the first match of `q`, cut only in plain text: escape
/// sequences are taken out first, so a snippet never starts or ends inside one.
fn snippet(text: &str, q: &str) -> String {
    let text = crate::ui::ansi::strip(text);
    let text = text.as_str();
    let lower = text.to_lowercase();
    let pos = lower.find(&q.to_lowercase()).unwrap_or(0);
    let mut start = pos.saturating_sub(60).min(text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let s: String = text[start..].chars().take(160).collect();
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.push_str(&s);
    if text[start..].chars().count() > 160 {
        out.push('…');
    }
    out
}

/// Case-insensitive substring search, newest first, at most `limit` hits.
///
/// # Errors
/// Database errors.
pub async fn search(c: &mut AnyConnection, q: &str, limit: i64) -> Result<Vec<Hit>> {
    let pattern = like_pattern(q);
    let limit = limit.clamp(1, 500);
    let sources: [(&'static str, &str); 4] = [
        (
            "prompt",
            "SELECT conversation_id, id, prompt, started_at FROM turns WHERE LOWER(prompt) LIKE $1 ESCAPE '\\' ORDER BY started_at DESC, id LIMIT $2",
        ),
        (
            "answer",
            "SELECT conversation_id, id, answer, started_at FROM turns WHERE answer IS NOT NULL AND LOWER(answer) LIKE $1 ESCAPE '\\' ORDER BY started_at DESC, id LIMIT $2",
        ),
        (
            "tool_title",
            "SELECT conversation_id, id, title, started_at FROM tool_calls WHERE LOWER(title) LIKE $1 ESCAPE '\\' ORDER BY started_at DESC, id LIMIT $2",
        ),
        (
            "tool_output",
            "SELECT conversation_id, id, output, started_at FROM tool_calls WHERE output IS NOT NULL AND LOWER(output) LIKE $1 ESCAPE '\\' ORDER BY started_at DESC, id LIMIT $2",
        ),
    ];
    let mut hits = Vec::new();
    for (field, sql) in sources {
        let rows: Vec<(String, String, Option<String>, i64)> = sqlx::query_as(sql)
            .arg(&pattern)
            .arg(limit)
            .fetch_all(&mut *c)
            .await?;
        hits.extend(rows.into_iter().map(|(conversation_id, id, text, at)| Hit {
            conversation_id,
            field,
            id,
            snippet: snippet(text.as_deref().unwrap_or(""), q),
            at,
        }));
    }
    hits.sort_by(|a, b| {
        b.at.cmp(&a.at)
            .then_with(|| a.field.cmp(b.field))
            .then_with(|| a.id.cmp(&b.id))
    });
    hits.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok(hits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns_escape_wildcards() {
        assert_eq!(like_pattern("50%_done\\"), "%50\\%\\_done\\\\%");
        assert_eq!(like_pattern("Error"), "%error%");
    }

    #[test]
    fn snippets_center_on_the_match_and_mark_cuts() {
        let text = format!("{}needle{}", "a".repeat(200), "b".repeat(200));
        let s = snippet(&text, "NEEDLE");
        assert!(
            s.starts_with('…') && s.ends_with('…') && s.contains("needle"),
            "{s}"
        );
        assert_eq!(snippet("short needle", "needle"), "short needle");
    }

    #[test]
    fn snippets_never_start_or_end_inside_an_escape_sequence() {
        let text = format!(
            "{}\u{1b}[38;2;255;255;255;48;2;0;0;0mE-blackonblack {}needle{}\u{1b}]0;title\u{7}",
            "a".repeat(40),
            "c".repeat(30),
            "b".repeat(90)
        );
        let s = snippet(&text, "needle");
        assert!(!s.contains('\u{1b}') && !s.contains("48;2"), "{s:?}");
        assert!(
            s.contains("E-blackonblack ccc") && s.contains("needle"),
            "{s:?}"
        );
    }

    #[test]
    fn cursors_must_be_ours() {
        assert_eq!(
            parse_cursor("1700000000000.abc"),
            Ok((1_700_000_000_000, "abc".into()))
        );
        assert!(parse_cursor("garbage").is_err());
        assert!(parse_cursor("x.abc").is_err());
        assert!(parse_cursor("12.").is_err());
    }
}
