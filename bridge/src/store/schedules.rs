//! `schedules`: prompts a thread runs on a schedule (`/every`, `/at`). Read by the active replica's
//! scheduler ([`crate::schedules`]); written by the thread's commands.

use sqlx::AnyConnection;

use super::Result;
use super::bind::BindExt;

/// One schedule.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Schedule {
    /// Short id, as `/unschedule` takes it.
    pub id: String,
    /// The thread it runs in.
    pub conversation_id: String,
    /// Who scheduled it (each run is theirs, A2 checked at run time).
    pub created_by: String,
    /// The prompt.
    pub prompt: String,
    /// Repeats this often (ms); `None`: runs once.
    pub every_ms: Option<i64>,
    /// When it runs next (Unix ms).
    pub next_run_at: i64,
    /// Unix ms.
    pub created_at: i64,
}

const COLUMNS: &str = "id, conversation_id, created_by, prompt, every_ms, next_run_at, created_at";

/// Adds `s`.
///
/// # Errors
/// Database errors.
pub async fn add(c: &mut AnyConnection, s: &Schedule) -> Result<()> {
    sqlx::query(
        "INSERT INTO schedules (id, conversation_id, created_by, prompt, every_ms, next_run_at, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .arg(&s.id)
    .arg(&s.conversation_id)
    .arg(&s.created_by)
    .arg(&s.prompt)
    .arg(s.every_ms)
    .arg(s.next_run_at)
    .arg(s.created_at)
    .execute(c)
    .await?;
    Ok(())
}

/// The thread's schedules, soonest first.
///
/// # Errors
/// Database errors.
pub async fn of(c: &mut AnyConnection, conversation: &str) -> Result<Vec<Schedule>> {
    Ok(sqlx::query_as::<_, Schedule>(super::sql(format!(
        "SELECT {COLUMNS} FROM schedules WHERE conversation_id = $1 ORDER BY next_run_at, id"
    )))
    .arg(conversation)
    .fetch_all(c)
    .await?)
}

/// Schedules due at `now` (Unix ms) of the conversations of `project`, soonest first, at most
/// `limit`. Those of a project no longer configured are nobody's: they stay due, and never fill
/// the batch of a project that is served.
///
/// # Errors
/// Database errors.
pub async fn due(
    c: &mut AnyConnection,
    project: &str,
    now: i64,
    limit: i64,
) -> Result<Vec<Schedule>> {
    Ok(sqlx::query_as::<_, Schedule>(super::sql(format!(
        "SELECT {COLUMNS} FROM schedules WHERE next_run_at <= $1
           AND conversation_id IN (SELECT id FROM conversations WHERE project = $3)
         ORDER BY next_run_at, id LIMIT $2"
    )))
    .arg(now)
    .arg(limit)
    .arg(project)
    .fetch_all(c)
    .await?)
}

/// Moves schedule `id` from its run at `was` to `next`; `false` when another step moved or
/// removed it meanwhile.
///
/// # Errors
/// Database errors.
pub async fn advance(c: &mut AnyConnection, id: &str, was: i64, next: i64) -> Result<bool> {
    let n = sqlx::query("UPDATE schedules SET next_run_at = $1 WHERE id = $2 AND next_run_at = $3")
        .arg(next)
        .arg(id)
        .arg(was)
        .execute(c)
        .await?
        .rows_affected();
    Ok(n == 1)
}

/// Removes the thread's schedule `id`; `false` when it has none by that id.
///
/// # Errors
/// Database errors.
pub async fn remove(c: &mut AnyConnection, conversation: &str, id: &str) -> Result<bool> {
    let n = sqlx::query("DELETE FROM schedules WHERE conversation_id = $1 AND id = $2")
        .arg(conversation)
        .arg(id)
        .execute(c)
        .await?
        .rows_affected();
    Ok(n == 1)
}
