//! `thread_members`: the people a thread's owner invited (A2). The owner is the conversation's
//! `started_by`; approvers come from the configuration; this table holds everyone else who may act.

use sqlx::AnyConnection;

use super::Result;
use super::bind::BindExt;

/// Adds `user` to the conversation's members; `false` when they were already one.
///
/// # Errors
/// Database errors.
pub async fn add(
    c: &mut AnyConnection,
    conversation: &str,
    user: &str,
    added_by: &str,
    now: i64,
) -> Result<bool> {
    let n = sqlx::query(
        "INSERT INTO thread_members (conversation_id, user_id, added_by, added_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (conversation_id, user_id) DO NOTHING",
    )
    .arg(conversation)
    .arg(user)
    .arg(added_by)
    .arg(now)
    .execute(c)
    .await?
    .rows_affected();
    Ok(n == 1)
}

/// Removes `user` from the conversation's members; `false` when they were not one.
///
/// # Errors
/// Database errors.
pub async fn remove(c: &mut AnyConnection, conversation: &str, user: &str) -> Result<bool> {
    let n = sqlx::query("DELETE FROM thread_members WHERE conversation_id = $1 AND user_id = $2")
        .arg(conversation)
        .arg(user)
        .execute(c)
        .await?
        .rows_affected();
    Ok(n == 1)
}

/// The conversation's invited members, in the order they were added.
///
/// # Errors
/// Database errors.
pub async fn of(c: &mut AnyConnection, conversation: &str) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar::<_, String>(
        "SELECT user_id FROM thread_members WHERE conversation_id = $1 ORDER BY added_at, user_id",
    )
    .arg(conversation)
    .fetch_all(c)
    .await?)
}
