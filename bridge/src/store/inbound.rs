//! `inbound_events`: platform event ids already seen, so a retried or replayed event is handled once
//! (D2), across restarts — and an inbox: the event is kept until the transaction that acts on it marks
//! it handled, so one recorded (and acknowledged to the platform) but not yet acted on when the
//! process died is taken again at start-up.
//!
//! Poison events never loop (S4): each handling attempt is counted in the row before it starts (a
//! crash during it counts too), and an event that failed that many times is set aside as a dead
//! letter — never taken again, kept with its reason for on-call ([`dead_letters`]).

use sqlx::AnyConnection;

use super::Result;
use super::bind::{BindExt, FetchExt, Json};

/// Whether an inbound event is new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// First time: handle it.
    New,
    /// Seen before: acknowledge and drop it.
    Duplicate,
}

/// When an event arrived, as the inbox records it (`received_at`, unix ms): taken in arrival
/// order, and later than every stamp taken before it in this process. Events are recorded several
/// at once, so the time of each insert is not their order, and a burst falls within one
/// millisecond; the events still waiting in the inbox at a restart are taken again by this stamp
/// (then by id, a random one for the console), so without it a thread's queued messages ran in a
/// shuffled order after a restart (D2; outside tester).
#[must_use]
pub fn arrival_stamp() -> i64 {
    static LAST: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let now = super::now_ms();
    let before = LAST
        .fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            |last| Some(now.max(last.saturating_add(1))),
        )
        .unwrap_or_else(|last| last);
    now.max(before.saturating_add(1))
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
    .arg(platform)
    .arg(event_id)
    .arg(now)
    .arg(Json(payload))
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
/// Its payload — the person's raw text — is dropped then: the inbox only needs it until the event
/// is acted on, and the history (with `redact.store`, redacted) is the record from there on; the id
/// stays for deduplication (D2).
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
        "UPDATE inbound_events SET handled_at = $3, payload = NULL WHERE platform = $1 AND event_id = $2 AND handled_at IS NULL",
    )
    .arg(platform)
    .arg(event_id)
    .arg(now)
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
         WHERE handled_at IS NULL AND payload IS NOT NULL AND dead_at IS NULL
         ORDER BY received_at, event_id",
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
            .arg(before)
            .execute(c)
            .await?
            .rows_affected(),
    )
}

/// Counts the start of a handling attempt, in its own commit (so an attempt that ends in a crash
/// counts too); the attempts so far, this one included. `None` when the event is no longer waiting
/// (handled or set aside meanwhile) — then there is nothing to do.
///
/// # Errors
/// Database errors.
pub async fn start_attempt(
    c: &mut AnyConnection,
    platform: &str,
    event_id: &str,
) -> Result<Option<i64>> {
    let row: Option<(i64,)> = sqlx::query_as(
        "UPDATE inbound_events SET attempts = attempts + 1
         WHERE platform = $1 AND event_id = $2 AND handled_at IS NULL AND dead_at IS NULL
         RETURNING attempts",
    )
    .arg(platform)
    .arg(event_id)
    .fetch_all(c)
    .await?
    .into_iter()
    .next();
    Ok(row.map(|r| r.0))
}

/// Records a failed attempt with its `reason` (counting it when `count`: the attempt failed before
/// [`start_attempt`] counted it); the attempts so far, `None` when the event is no longer waiting.
///
/// # Errors
/// Database errors.
pub async fn failed(
    c: &mut AnyConnection,
    platform: &str,
    event_id: &str,
    reason: &str,
    count: bool,
) -> Result<Option<i64>> {
    let row: Option<(i64,)> = sqlx::query_as(
        "UPDATE inbound_events SET attempts = attempts + $3, last_error = $4
         WHERE platform = $1 AND event_id = $2 AND handled_at IS NULL AND dead_at IS NULL
         RETURNING attempts",
    )
    .arg(platform)
    .arg(event_id)
    .arg(i64::from(count))
    .arg(reason)
    .fetch_all(c)
    .await?
    .into_iter()
    .next();
    Ok(row.map(|r| r.0))
}

/// Forgets the attempts of an event that was taken into a conversation's queue (it waits behind a
/// running turn; restarts while it waits are not failures). Its turn marks it handled.
///
/// # Errors
/// Database errors.
pub async fn taken(c: &mut AnyConnection, platform: &str, event_id: &str) -> Result<()> {
    sqlx::query(
        "UPDATE inbound_events SET attempts = 0 WHERE platform = $1 AND event_id = $2 AND handled_at IS NULL",
    )
    .arg(platform)
    .arg(event_id)
    .execute(c)
    .await?;
    Ok(())
}

/// Sets an event aside as a dead letter with `reason`: it is never taken again. `false` when it was
/// no longer waiting (handled, or set aside already).
///
/// # Errors
/// Database errors.
pub async fn set_aside(
    c: &mut AnyConnection,
    platform: &str,
    event_id: &str,
    reason: &str,
    now: i64,
) -> Result<bool> {
    Ok(sqlx::query(
        "UPDATE inbound_events SET dead_at = $3, last_error = $4
         WHERE platform = $1 AND event_id = $2 AND handled_at IS NULL AND dead_at IS NULL",
    )
    .arg(platform)
    .arg(event_id)
    .arg(now)
    .arg(reason)
    .execute(c)
    .await?
    .rows_affected()
        == 1)
}

/// An inbound event set aside (S4).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct DeadLetter {
    /// Platform.
    pub platform: String,
    /// The platform's event id.
    pub event_id: String,
    /// Handling attempts (crashes included).
    pub attempts: i64,
    /// Why it was set aside (no message text).
    pub last_error: Option<String>,
    /// Unix ms it arrived.
    pub received_at: i64,
    /// Unix ms it was set aside.
    pub dead_at: i64,
}

/// Inbound dead letters, newest first.
///
/// # Errors
/// Database errors.
pub async fn dead_letters(c: &mut AnyConnection, limit: i64) -> Result<Vec<DeadLetter>> {
    Ok(sqlx::query_as::<_, DeadLetter>(
        "SELECT platform, event_id, attempts, last_error, received_at, dead_at FROM inbound_events
         WHERE dead_at IS NOT NULL ORDER BY dead_at DESC, event_id LIMIT $1",
    )
    .arg(limit)
    .fetch_all(c)
    .await?)
}

/// How many inbound dead letters are kept.
///
/// # Errors
/// Database errors.
pub async fn dead_count(c: &mut AnyConnection) -> Result<i64> {
    let (n,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM inbound_events WHERE dead_at IS NOT NULL")
            .only(c)
            .await?;
    Ok(n)
}
