//! `turns`: one prompt and its outcome. Open turns are what a restart resumes (D3).

use serde::Serialize;
use sqlx::AnyConnection;

use super::bind::{BindExt, FetchExt};
use super::{Result, new_id, sql};

/// A stored turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Turn {
    /// Our id.
    pub id: String,
    /// Its conversation.
    pub conversation_id: String,
    /// 1, 2, … within the conversation.
    pub seq: i64,
    /// The prompt text.
    pub prompt: String,
    /// Who asked.
    pub requested_by: String,
    /// `open`, `ended`, `stalled`, `cancelled`, `interrupted`, `failed`.
    pub status: String,
    /// The daemon's stop reason.
    pub stop_reason: Option<String>,
    /// The first cause of an early end (`stalled`, `cancelled`).
    pub end_cause: Option<String>,
    /// The agent's answer (text after the last tool call).
    pub answer: Option<String>,
    /// Unix ms.
    pub started_at: i64,
    /// Unix ms.
    pub ended_at: Option<i64>,
    /// The platform id of the message that asked for it, when there is one (its outcome mark goes
    /// there, also after a restart).
    #[serde(skip)]
    pub message_id: Option<String>,
}

const COLUMNS: &str = "id, conversation_id, seq, prompt, requested_by, status, stop_reason, end_cause, answer, started_at, ended_at, message_id";

/// Opens a turn.
///
/// # Errors
/// Database errors.
pub async fn start(
    c: &mut AnyConnection,
    conversation: &str,
    prompt: &str,
    requested_by: &str,
    now: i64,
) -> Result<Turn> {
    start_for(c, conversation, prompt, requested_by, None, now).await
}

/// Opens a turn asked for by the platform message `message_id`.
///
/// # Errors
/// Database errors.
pub async fn start_for(
    c: &mut AnyConnection,
    conversation: &str,
    prompt: &str,
    requested_by: &str,
    message_id: Option<&str>,
    now: i64,
) -> Result<Turn> {
    let id = new_id();
    sqlx::query(
        "INSERT INTO turns (id, conversation_id, seq, prompt, requested_by, status, started_at, message_id)
         SELECT $1, $2, COALESCE(MAX(seq), 0) + 1, $3, $4, 'open', $5, $6 FROM turns WHERE conversation_id = $2",
    )
    .arg(&id)
    .arg(conversation)
    .arg(prompt)
    .arg(requested_by)
    .arg(now)
    .arg(message_id)
    .execute(&mut *c)
    .await?;
    get(c, &id)
        .await?
        .ok_or_else(|| super::StoreError::Corrupt(format!("turn {id} vanished")))
}

/// The turn with `id`.
///
/// # Errors
/// Database errors.
pub async fn get(c: &mut AnyConnection, id: &str) -> Result<Option<Turn>> {
    Ok(
        sqlx::query_as::<_, Turn>(sql(format!("SELECT {COLUMNS} FROM turns WHERE id = $1")))
            .arg(id)
            .fetch_all(c)
            .await?
            .into_iter()
            .next(),
    )
}

/// The open turn of `conversation` started for the person's message `message_id`, if any: a turn
/// whose recording committed although its commit's answer never came back (the database went away
/// as it committed) — the step's retry takes it rather than recording a second turn.
///
/// # Errors
/// Database errors.
pub async fn open_for_message(
    c: &mut AnyConnection,
    conversation: &str,
    message_id: &str,
) -> Result<Option<Turn>> {
    Ok(sqlx::query_as::<_, Turn>(sql(format!(
        "SELECT {COLUMNS} FROM turns WHERE conversation_id = $1 AND message_id = $2 AND status = 'open'
         ORDER BY seq DESC LIMIT 1"
    )))
    .arg(conversation)
    .arg(message_id)
    .first(c)
    .await?)
}

/// How a turn ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ending<'a> {
    /// `ended`, `stalled`, `cancelled`, `interrupted`, `failed`.
    pub status: &'a str,
    /// The daemon's stop reason.
    pub stop_reason: Option<&'a str>,
    /// First cause of an early end.
    pub end_cause: Option<&'a str>,
    /// The answer.
    pub answer: Option<&'a str>,
}

/// Closes an open turn; `false` if it was not open (already closed — nothing changes).
///
/// # Errors
/// Database errors.
pub async fn finish(c: &mut AnyConnection, id: &str, end: &Ending<'_>, now: i64) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE turns SET status = $2, stop_reason = $3, end_cause = $4, answer = $5, ended_at = $6
         WHERE id = $1 AND status = 'open'",
    )
    .arg(id)
    .arg(end.status)
    .arg(end.stop_reason)
    .arg(end.end_cause)
    .arg(end.answer)
    .arg(now)
    .execute(c)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Every open turn, oldest first (what a restart must resume or close).
///
/// # Errors
/// Database errors.
pub async fn open(c: &mut AnyConnection) -> Result<Vec<Turn>> {
    Ok(sqlx::query_as::<_, Turn>(sql(format!(
        "SELECT {COLUMNS} FROM turns WHERE status = 'open' ORDER BY started_at, id"
    )))
    .fetch_all(c)
    .await?)
}

/// When the oldest open turn started (unix ms), if any turn is open.
///
/// # Errors
/// Database errors.
pub async fn oldest_open_started_at(c: &mut AnyConnection) -> Result<Option<i64>> {
    let (oldest,): (Option<i64>,) =
        sqlx::query_as("SELECT MIN(started_at) FROM turns WHERE status = 'open'")
            .only(c)
            .await?;
    Ok(oldest)
}

/// A conversation's turns in order.
///
/// # Errors
/// Database errors.
pub async fn of_conversation(c: &mut AnyConnection, conversation: &str) -> Result<Vec<Turn>> {
    Ok(sqlx::query_as::<_, Turn>(sql(format!(
        "SELECT {COLUMNS} FROM turns WHERE conversation_id = $1 ORDER BY seq"
    )))
    .arg(conversation)
    .fetch_all(c)
    .await?)
}

/// `(status, ended_at)` of every turn that ended at or after `since` (unix ms): the UI's overview
/// counts stalls per day from it.
///
/// # Errors
/// Database errors.
pub async fn endings_since(c: &mut AnyConnection, since: i64) -> Result<Vec<(String, i64)>> {
    Ok(sqlx::query_as(
        "SELECT status, ended_at FROM turns WHERE ended_at IS NOT NULL AND ended_at >= $1 ORDER BY ended_at",
    )
    .arg(since)
    .fetch_all(c)
    .await?)
}
