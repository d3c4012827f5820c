//! `message_map`: a conversation's logical message keys (`tool:<call>`, `answer:<turn>`) → the platform's
//! message id, so a tool message is created once and edited in place afterwards (R1).

use sqlx::AnyConnection;

use super::Result;
use super::bind::{BindExt, FetchExt};

/// The platform message id for `key`.
///
/// # Errors
/// Database errors.
pub async fn get(c: &mut AnyConnection, conversation: &str, key: &str) -> Result<Option<String>> {
    let row: Option<(String,)> = sqlx::query_as(
        "SELECT platform_id FROM message_map WHERE conversation_id = $1 AND logical_key = $2",
    )
    .arg(conversation)
    .arg(key)
    .first(c)
    .await?;
    Ok(row.map(|r| r.0))
}

/// Records (or replaces) the platform message id for `key`.
///
/// # Errors
/// Database errors.
pub async fn put(
    c: &mut AnyConnection,
    conversation: &str,
    key: &str,
    platform_id: &str,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO message_map (conversation_id, logical_key, platform_id, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $4)
         ON CONFLICT (conversation_id, logical_key) DO UPDATE SET platform_id = excluded.platform_id, updated_at = excluded.updated_at",
    )
    .arg(conversation)
    .arg(key)
    .arg(platform_id)
    .arg(now)
    .execute(c)
    .await?;
    Ok(())
}
