//! `transcript`: a conversation's ordered events (prompts, answers, tool starts and results,
//! permission decisions, notices). Heartbeats are never written here.

use serde::Serialize;
use sqlx::AnyConnection;

use super::Result;
use super::bind::{BindExt, FetchExt};

/// One transcript entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Entry {
    /// Position within the conversation (1, 2, …).
    pub seq: i64,
    /// The turn, when it belongs to one.
    pub turn_id: Option<String>,
    /// `prompt`, `answer`, `tool_started`, `tool_finished`, `permission`, `notice`, …
    pub kind: String,
    /// Who: a user id, or `agent`, or `bridge`.
    pub actor: Option<String>,
    /// The text, or JSON for structured kinds.
    pub body: String,
    /// Our tool-call id, for tool entries.
    pub tool_call_id: Option<String>,
    /// Unix ms.
    pub created_at: i64,
}

/// A new entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEntry<'a> {
    /// The turn.
    pub turn_id: Option<&'a str>,
    /// The kind.
    pub kind: &'a str,
    /// Who.
    pub actor: Option<&'a str>,
    /// The body.
    pub body: &'a str,
    /// Our tool-call id.
    pub tool_call_id: Option<&'a str>,
}

/// Appends an entry at the end of the conversation's transcript; returns its position.
///
/// # Errors
/// Database errors.
pub async fn append(
    c: &mut AnyConnection,
    conversation: &str,
    e: &NewEntry<'_>,
    now: i64,
) -> Result<i64> {
    let seq: (i64,) = sqlx::query_as(
        "INSERT INTO transcript (conversation_id, turn_id, seq, kind, actor, body, tool_call_id, created_at)
         SELECT $1, $2, COALESCE(MAX(seq), 0) + 1, $3, $4, $5, $6, $7 FROM transcript WHERE conversation_id = $1
         RETURNING seq",
    )
    .arg(conversation)
    .arg(e.turn_id)
    .arg(e.kind)
    .arg(e.actor)
    .arg(e.body)
    .arg(e.tool_call_id)
    .arg(now)
    .only(c)
    .await?;
    Ok(seq.0)
}

/// The whole transcript in order.
///
/// # Errors
/// Database errors.
pub async fn list(c: &mut AnyConnection, conversation: &str) -> Result<Vec<Entry>> {
    Ok(sqlx::query_as::<_, Entry>(
        "SELECT seq, turn_id, kind, actor, body, tool_call_id, created_at FROM transcript WHERE conversation_id = $1 ORDER BY seq",
    )
    .arg(conversation)
    .fetch_all(c)
    .await?)
}

/// The entries of `kind` written since the conversation's last prompt (at most `limit`, the newest),
/// oldest first.
///
/// # Errors
/// Database errors.
pub async fn since_last_prompt(
    c: &mut AnyConnection,
    conversation: &str,
    kind: &str,
    limit: i64,
) -> Result<Vec<Entry>> {
    let mut rows = sqlx::query_as::<_, Entry>(
        "SELECT seq, turn_id, kind, actor, body, tool_call_id, created_at FROM transcript
         WHERE conversation_id = $1 AND kind = $2
           AND seq > COALESCE((SELECT MAX(seq) FROM transcript WHERE conversation_id = $1 AND kind = 'prompt'), 0)
         ORDER BY seq DESC LIMIT $3",
    )
    .arg(conversation)
    .arg(kind)
    .arg(limit)
    .fetch_all(c)
    .await?;
    rows.reverse();
    Ok(rows)
}
