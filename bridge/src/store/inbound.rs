//! `inbound_events`: platform event ids already seen, so a retried or replayed event is handled once
//! (D2), across restarts.

use sqlx::AnyConnection;

use super::Result;

/// Whether an inbound event is new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// First time: handle it.
    New,
    /// Seen before: acknowledge and drop it.
    Duplicate,
}

/// Records `event_id` and says, atomically, whether it was already seen.
///
/// # Errors
/// Database errors.
pub async fn record(
    c: &mut AnyConnection,
    platform: &str,
    event_id: &str,
    now: i64,
) -> Result<Seen> {
    let inserted = sqlx::query(
        "INSERT INTO inbound_events (platform, event_id, received_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
    )
    .bind(platform)
    .bind(event_id)
    .bind(now)
    .execute(c)
    .await?
    .rows_affected();
    Ok(if inserted == 1 {
        Seen::New
    } else {
        Seen::Duplicate
    })
}

/// Forgets event ids received before `before` (platforms stop retrying after minutes); returns how many.
///
/// # Errors
/// Database errors.
pub async fn prune(c: &mut AnyConnection, before: i64) -> Result<u64> {
    Ok(
        sqlx::query("DELETE FROM inbound_events WHERE received_at < $1")
            .bind(before)
            .execute(c)
            .await?
            .rows_affected(),
    )
}
