//! `inbound_events`: platform event ids already seen, so a retried or replayed event is handled once
//! (D2), across restarts — and an inbox: the event is kept until the transaction that acts on it marks
//! it handled, so one recorded (and acknowledged to the platform) but not yet acted on when the
//! process died is taken again at start-up.

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

/// Records `event_id` with the event itself (`payload`, JSON) and says, atomically, whether it was
/// already seen.
///
/// # Errors
/// Database errors.
pub async fn record(
    c: &mut AnyConnection,
    platform: &str,
    event_id: &str,
    payload: &str,
    now: i64,
) -> Result<Seen> {
    let inserted = sqlx::query(
        "INSERT INTO inbound_events (platform, event_id, received_at, payload) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
    )
    .bind(platform)
    .bind(event_id)
    .bind(now)
    .bind(payload)
    .execute(c)
    .await?
    .rows_affected();
    Ok(if inserted == 1 {
        Seen::New
    } else {
        Seen::Duplicate
    })
}

/// Marks an event handled (call inside the transaction that acted on it). Marking twice is harmless.
///
/// # Errors
/// Database errors.
pub async fn mark_handled(
    c: &mut AnyConnection,
    platform: &str,
    event_id: &str,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "UPDATE inbound_events SET handled_at = $3 WHERE platform = $1 AND event_id = $2 AND handled_at IS NULL",
    )
    .bind(platform)
    .bind(event_id)
    .bind(now)
    .execute(c)
    .await?;
    Ok(())
}

/// Events recorded but never handled, oldest first, as `(platform, event_id, payload)`.
///
/// # Errors
/// Database errors.
pub async fn unhandled(c: &mut AnyConnection) -> Result<Vec<(String, String, String)>> {
    Ok(sqlx::query_as(
        "SELECT platform, event_id, payload FROM inbound_events
         WHERE handled_at IS NULL AND payload IS NOT NULL ORDER BY received_at, event_id",
    )
    .fetch_all(c)
    .await?)
}

/// Forgets handled events received before `before` (platforms stop retrying after minutes); returns
/// how many. Unhandled ones stay until they are taken.
///
/// # Errors
/// Database errors.
pub async fn prune(c: &mut AnyConnection, before: i64) -> Result<u64> {
    Ok(
        sqlx::query("DELETE FROM inbound_events WHERE received_at < $1 AND (handled_at IS NOT NULL OR payload IS NULL)")
            .bind(before)
            .execute(c)
            .await?
            .rows_affected(),
    )
}
