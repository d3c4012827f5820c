//! `outbox`: chat actions waiting to be delivered (D1).
//!
//! Rows are written in the same transaction as the state change that caused them. A worker claims the
//! head of a conversation's queue (the oldest pending row, only if no earlier row of that conversation
//! is pending), with a lease so a crashed worker's claim expires; it then marks the row delivered,
//! schedules a retry (exponential backoff, or the platform's `Retry-After`), or dead-letters it after
//! too many failures. Dead letters stop blocking their conversation but are kept and counted: nothing
//! is silently dropped. A pending edit of the same message is replaced in place instead of queueing
//! another (edits coalesce).

use std::time::Duration;

use serde::Serialize;
use sqlx::AnyConnection;

use super::bind::{BindExt, FetchExt, Json};
use super::{Result, ms, sql};

/// What kind of action a row holds; only edits coalesce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Creates a message.
    Post,
    /// Edits a message (coalesces with a pending edit of the same message).
    Edit,
    /// Anything else (reactions, ephemeral replies).
    Other,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Post => "post",
            Self::Edit => "edit",
            Self::Other => "other",
        }
    }
}

/// A new action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAction<'a> {
    /// The conversation it belongs to (delivery is ordered per conversation).
    pub conversation_id: &'a str,
    /// The kind.
    pub kind: Kind,
    /// The logical message it targets (`tool:<call>`), for coalescing edits.
    pub coalesce_key: Option<&'a str>,
    /// The action, serialised by the core.
    pub action: &'a str,
}

/// What `enqueue` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// A new row.
    Inserted(i64),
    /// A pending edit of the same message was replaced.
    Coalesced(i64),
}

/// Queues an action (call inside the transaction that caused it).
///
/// # Errors
/// Database errors.
pub async fn enqueue(c: &mut AnyConnection, a: &NewAction<'_>, now: i64) -> Result<Enqueued> {
    if let (Kind::Edit, Some(key)) = (a.kind, a.coalesce_key) {
        let replaced: Option<(i64,)> = sqlx::query_as(
            "UPDATE outbox SET action = $3
             WHERE id = (SELECT id FROM outbox
                         WHERE conversation_id = $1 AND coalesce_key = $2 AND kind = 'edit'
                           AND status = 'pending' AND claimed_by IS NULL
                         ORDER BY id DESC LIMIT 1)
               AND claimed_by IS NULL AND status = 'pending'
             RETURNING id",
        )
        .arg(a.conversation_id)
        .arg(key)
        .arg(Json(a.action))
        .fetch_all(&mut *c)
        .await?
        .into_iter()
        .next();
        if let Some((id,)) = replaced {
            return Ok(Enqueued::Coalesced(id));
        }
    }
    Ok(Enqueued::Inserted(insert(c, a, now).await?))
}

/// Queues `a` as a row of its own, never replacing a waiting edit ([`enqueue`] without the look,
/// for a caller that knows no edit of the message waits); returns its id.
///
/// # Errors
/// Database errors.
pub async fn insert(c: &mut AnyConnection, a: &NewAction<'_>, now: i64) -> Result<i64> {
    let (id,): (i64,) = sqlx::query_as(
        "INSERT INTO outbox (conversation_id, kind, coalesce_key, action, status, attempts, next_attempt_at, created_at)
         VALUES ($1, $2, $3, $4, 'pending', 0, $5, $5) RETURNING id",
    )
    .arg(a.conversation_id)
    .arg(a.kind.as_str())
    .arg(a.coalesce_key)
    .arg(Json(a.action))
    .arg(now)
    .only(c)
    .await?;
    Ok(id)
}

/// Queues `actions` in their order, each a row of its own as [`insert`] would write it, in one
/// statement (a turn's end marks the person's message twice: one round trip, not two).
///
/// # Errors
/// Database errors.
pub async fn insert_all(c: &mut AnyConnection, actions: &[NewAction<'_>], now: i64) -> Result<()> {
    // 4 parameters a row, well under both backends' limits.
    for chunk in actions.chunks(1000) {
        let values: Vec<String> = (0..chunk.len())
            .map(|i| {
                let n = 4 * i + 2;
                format!(
                    "(${n}, ${}, ${}, ${}, 'pending', 0, $1, $1)",
                    n + 1,
                    n + 2,
                    n + 3
                )
            })
            .collect();
        // One VALUES list is inserted in its order: the rows' ids keep the actions' order.
        let query = format!(
            "INSERT INTO outbox (conversation_id, kind, coalesce_key, action, status, attempts, next_attempt_at, created_at)
             VALUES {}",
            values.join(", ")
        );
        let mut q = sqlx::query(sql(query)).arg(now);
        for a in chunk {
            q = q
                .arg(a.conversation_id)
                .arg(a.kind.as_str())
                .arg(a.coalesce_key)
                .arg(Json(a.action));
        }
        q.execute(&mut *c).await?;
    }
    Ok(())
}

/// A claimed action, ready to deliver.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Claimed {
    /// Row id.
    pub id: i64,
    /// Conversation.
    pub conversation_id: String,
    /// `post`, `edit`, `other`.
    pub kind: String,
    /// Logical message key.
    pub coalesce_key: Option<String>,
    /// The serialised action.
    pub action: String,
    /// Failed attempts so far.
    pub attempts: i64,
    /// The conversation's platform (which channel delivers it when one process serves several);
    /// `None` for a row whose conversation is gone.
    pub platform: Option<String>,
    /// When it became due (unix ms): queued, or its retry's time.
    pub due_at: i64,
    /// The platform id the message map holds for its message (`coalesce_key`), read with the
    /// claim: `Some("")` when an earlier attempt recorded its intent, `None` when there is none.
    /// Only a delivery of this conversation's earlier rows writes it, and those are delivered
    /// before this head is claimed, so it is what a lookup after the claim would read.
    pub mapped: Option<String>,
}

/// The claim, with `$lock` (empty, or PostgreSQL's row lock) on the chosen head and `$skip` (empty,
/// or a further condition on the candidate `o`).
macro_rules! claim_sql {
    ($lock:literal) => {
        claim_sql!($lock, "")
    };
    ($lock:literal, $skip:literal) => {
        concat!(
            "UPDATE outbox SET claimed_by = $1, claim_until = $2
         WHERE id = (
             SELECT o.id FROM outbox o
             WHERE o.status = 'pending' AND o.next_attempt_at <= $3 AND o.id >= $4
               AND (o.claimed_by IS NULL OR o.claim_until < $3 OR o.claimed_by = $1)",
            $skip,
            "
               AND NOT EXISTS (SELECT 1 FROM outbox e
                               WHERE e.conversation_id = o.conversation_id AND e.status = 'pending' AND e.id < o.id)
             ORDER BY o.id LIMIT 1",
            $lock,
            ")
           AND status = 'pending' AND (claimed_by IS NULL OR claim_until < $3 OR claimed_by = $1)
         RETURNING id, conversation_id, kind, coalesce_key, action, attempts, next_attempt_at AS due_at,
                   (SELECT c.platform FROM conversations c WHERE c.id = outbox.conversation_id) AS platform,
                   (SELECT m.platform_id FROM message_map m
                     WHERE m.conversation_id = outbox.conversation_id AND m.logical_key = outbox.coalesce_key) AS mapped"
        )
    };
}

/// Claims the next deliverable action: the oldest due head of any conversation's queue not already
/// claimed. `None` when nothing is due.
///
/// A row `worker` itself holds counts as not claimed: a worker holds one claim at a time and claims
/// again only after recording or giving back the one it held, so such a row is a claim whose answer
/// it never read (the connection cut after the commit) — taken again at once, not a lease later.
///
/// On PostgreSQL the head is locked with `SKIP LOCKED`: workers claiming at the same moment take
/// different heads. Without it they all pick the same row; one wins, the others wait for its lock,
/// find the row claimed, take nothing and rest until woken — at 10,000 sessions three claims in five
/// came back empty and delivery ran at one worker's pace. SQLite has one writer: claims never
/// overlap there.
///
/// # Errors
/// Database errors.
pub async fn claim_next(
    c: &mut AnyConnection,
    worker: &str,
    now: i64,
    lease: Duration,
) -> Result<Option<Claimed>> {
    claim_next_from(c, worker, now, lease, 0).await
}

/// [`claim_next`] looking only at rows from id `floor` on ([`ClaimFloor`]): the head rule still sees
/// every pending row of the conversation, so order is kept whatever the floor.
///
/// # Errors
/// Database errors.
pub async fn claim_next_from(
    c: &mut AnyConnection,
    worker: &str,
    now: i64,
    lease: Duration,
    floor: i64,
) -> Result<Option<Claimed>> {
    let query = if c.backend_name().eq_ignore_ascii_case("postgresql") {
        CLAIM_ON_POSTGRES
    } else {
        claim_sql!("")
    };
    Ok(sqlx::query_as::<_, Claimed>(query)
        .arg(worker)
        .arg(now.saturating_add(ms(lease)))
        .arg(now)
        .arg(floor)
        .fetch_all(c)
        .await?
        .into_iter()
        .next())
}

/// The claim as PostgreSQL runs it: `$1` worker, `$2` lease end, `$3` now, `$4` floor.
pub const CLAIM_ON_POSTGRES: &str = claim_sql!(" FOR UPDATE OF o SKIP LOCKED");

/// What [`delivered_and_claim_next`] records of the action it marks delivered.
#[derive(Debug, Clone, Copy)]
pub struct Delivered<'a> {
    /// Its row id (claimed by the worker).
    pub id: i64,
    /// Its conversation.
    pub conversation_id: &'a str,
    /// The message's key and the platform id it is now known by, to record in the message map;
    /// `None` when there is nothing to remember (a reaction, or an edit of a message the map holds).
    pub remember: Option<(&'a str, &'a str)>,
}

/// What [`delivered_and_claim_next`] found after recording a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfterDelivery {
    /// The next action it claimed, if any was due.
    pub claimed: Option<Claimed>,
    /// Whether the delivered action's conversation has more pending: the statement could not
    /// claim its next row (see [`delivered_and_claim_next`]), so a claim of its own should.
    pub more_in_its_conversation: bool,
}

/// [`AfterDelivery`] as the statement returns it: one row, the claim's columns NULL when it
/// claimed nothing.
#[derive(sqlx::FromRow)]
struct AfterRow {
    id: Option<i64>,
    conversation_id: Option<String>,
    kind: Option<String>,
    coalesce_key: Option<String>,
    action: Option<String>,
    attempts: Option<i64>,
    platform: Option<String>,
    due_at: Option<i64>,
    mapped: Option<String>,
    more: bool,
}

/// Records a delivery — the message's platform id in the message map when there is one to remember,
/// and the row delivered — and claims the next deliverable action, as ONE statement (P2: a worker
/// claims again after each delivery anyway; at 10,000 sessions that was a round trip in four of the
/// result phase's). PostgreSQL only: SQLite's `WITH` takes no `UPDATE`, and its statements cost no
/// round trip.
///
/// The statement sees the table as it was before it: the delivered row still looks pending, so the
/// claim never takes its conversation's next row (the head rule) — `more_in_its_conversation` says
/// whether there is one, for a claim of its own — and never the delivered row itself, even with its
/// lease run out. The delivery is recorded whatever is claimed, or, on an error, not at all.
///
/// # Errors
/// Database errors.
pub async fn delivered_and_claim_next(
    c: &mut AnyConnection,
    delivered: Delivered<'_>,
    worker: &str,
    now: i64,
    lease: Duration,
    floor: i64,
) -> Result<AfterDelivery> {
    let (key, platform_id) = delivered.remember.unwrap_or(("", ""));
    let row = sqlx::query_as::<_, AfterRow>(DELIVERED_AND_CLAIM_ON_POSTGRES)
        .arg(worker)
        .arg(now.saturating_add(ms(lease)))
        .arg(now)
        .arg(floor)
        .arg(delivered.id)
        .arg(platform_id)
        .arg(delivered.conversation_id)
        .arg(key)
        .arg(delivered.remember.is_some())
        .fetch_all(c)
        .await?
        .into_iter()
        .next()
        .ok_or(sqlx::Error::RowNotFound)?;
    let claimed = row.id.map(|id| Claimed {
        id,
        conversation_id: row.conversation_id.unwrap_or_default(),
        kind: row.kind.unwrap_or_default(),
        coalesce_key: row.coalesce_key,
        action: row.action.unwrap_or_default(),
        attempts: row.attempts.unwrap_or_default(),
        platform: row.platform,
        due_at: row.due_at.unwrap_or_default(),
        mapped: row.mapped,
    });
    Ok(AfterDelivery {
        claimed,
        more_in_its_conversation: row.more,
    })
}

/// [`delivered_and_claim_next`]'s statement, PostgreSQL's: `$1`–`$4` as the claim's; `$5` the
/// delivered row; `$6` the platform id its message is now known by, recorded in the message map
/// under `$7` (the conversation) and `$8` (the message's key) when `$9` is true.
pub const DELIVERED_AND_CLAIM_ON_POSTGRES: &str = concat!(
    "WITH m AS (
         INSERT INTO message_map (conversation_id, logical_key, platform_id, created_at, updated_at)
         SELECT $7, $8, $6, $3, $3 WHERE $9
         ON CONFLICT (conversation_id, logical_key) DO UPDATE SET platform_id = excluded.platform_id, updated_at = excluded.updated_at),
     d AS (
         UPDATE outbox SET status = 'delivered', delivered_at = $3, claimed_by = NULL, claim_until = NULL
         WHERE id = $5 AND claimed_by = $1 AND status = 'pending'),
     claim AS (",
    claim_sql!(" FOR UPDATE OF o SKIP LOCKED", " AND o.id <> $5"),
    ")
     SELECT claim.*,
            EXISTS (SELECT 1 FROM outbox e WHERE e.conversation_id = $7 AND e.status = 'pending' AND e.id > $5) AS more
     FROM (SELECT 1) one LEFT JOIN claim ON true"
);

/// How often [`ClaimFloor`] is found again.
pub const FLOOR_EVERY: Duration = Duration::from_millis(100);

/// Ids below the lowest pending one a claim may still meet: a row whose transaction took its id
/// before the floor was found and committed after it (short transactions, a few rows each).
pub const FLOOR_MARGIN: i64 = 1024;

/// Where claims start looking, on PostgreSQL (P2).
///
/// A delivered row leaves its entry in the pending-rows index until the table is vacuumed (the
/// update that delivers it is not a HOT one: `status` is the index's predicate). A claim walks that
/// index from the lowest id, so every claim stepped over every row delivered since the last vacuum —
/// at 10,000 sessions 0.6 ms a claim, 50,000 claims, PostgreSQL's largest cost in the run. The floor
/// is the lowest pending id less [`FLOOR_MARGIN`], found with one such walk every [`FLOOR_EVERY`]
/// and shared by the workers; their claims start there. A row pending for long (a retry waiting for
/// its time) holds the floor at its id, so it is never passed over; a row below the floor (see
/// [`FLOOR_MARGIN`]) is found when the floor is next found.
#[derive(Debug, Default)]
pub struct ClaimFloor {
    floor: std::sync::atomic::AtomicI64,
    /// When it was last found, as milliseconds since `epoch`; 0 before the first time.
    found_at: std::sync::atomic::AtomicU64,
    finding: std::sync::atomic::AtomicBool,
    epoch: std::sync::OnceLock<std::time::Instant>,
}

impl ClaimFloor {
    /// The floor, found again first when it is older than [`FLOOR_EVERY`] and no other caller is
    /// finding it.
    ///
    /// # Errors
    /// Database errors.
    pub async fn get(&self, c: &mut AnyConnection) -> Result<i64> {
        use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
        let epoch = *self.epoch.get_or_init(std::time::Instant::now);
        let now = u64::try_from(epoch.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let found_at = self.found_at.load(Acquire);
        let stale = found_at == 0 || now.saturating_sub(found_at) >= ms(FLOOR_EVERY).unsigned_abs();
        if stale && !self.finding.swap(true, Acquire) {
            // Let go however this ends (an error, or the caller dropped mid-query): a floor nobody
            // may find again would hide the rows committed below it for good.
            struct Finding<'a>(&'a std::sync::atomic::AtomicBool);
            impl Drop for Finding<'_> {
                fn drop(&mut self) {
                    self.0.store(false, Release);
                }
            }
            let _finding = Finding(&self.finding);
            let lowest = lowest_pending(c).await?;
            self.floor
                .store(lowest.saturating_sub(FLOOR_MARGIN).max(0), Relaxed);
            self.found_at.store(now, Release);
        }
        Ok(if self.found_at.load(Acquire) == 0 {
            0
        } else {
            self.floor.load(Relaxed)
        })
    }
}

/// The lowest pending id; with none pending, one past the highest id.
async fn lowest_pending(c: &mut AnyConnection) -> Result<i64> {
    let (lowest,): (i64,) = sqlx::query_as(
        "SELECT COALESCE((SELECT MIN(id) FROM outbox WHERE status = 'pending'),
                         (SELECT MAX(id) + 1 FROM outbox), 0)",
    )
    .only(c)
    .await?;
    Ok(lowest)
}

/// Marks a claimed action delivered; `false` if this worker no longer held the claim.
///
/// # Errors
/// Database errors.
pub async fn mark_delivered(
    c: &mut AnyConnection,
    id: i64,
    worker: &str,
    now: i64,
) -> Result<bool> {
    Ok(sqlx::query(
        "UPDATE outbox SET status = 'delivered', delivered_at = $3, claimed_by = NULL, claim_until = NULL
         WHERE id = $1 AND claimed_by = $2 AND status = 'pending'",
    )
    .arg(id)
    .arg(worker)
    .arg(now)
    .execute(c)
    .await?
    .rows_affected()
        == 1)
}

/// Gives back a claim whose delivery could not start (its step failed before the platform saw
/// anything): the next claim takes the action at once instead of after the lease. `false` if this
/// worker no longer held it.
///
/// # Errors
/// Database errors.
pub async fn release(c: &mut AnyConnection, id: i64, worker: &str) -> Result<bool> {
    Ok(sqlx::query(
        "UPDATE outbox SET claimed_by = NULL, claim_until = NULL
         WHERE id = $1 AND claimed_by = $2 AND status = 'pending'",
    )
    .arg(id)
    .arg(worker)
    .execute(c)
    .await?
    .rows_affected()
        == 1)
}

/// How failed deliveries are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// First delay.
    pub base: Duration,
    /// Longest delay.
    pub cap: Duration,
    /// Failures before the action is dead-lettered.
    pub max_attempts: i64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(300),
            max_attempts: 8,
        }
    }
}

impl RetryPolicy {
    /// The delay after the `attempt`-th failure (1-based): base × 2^(attempt-1), capped.
    #[must_use]
    pub fn delay(&self, attempt: i64) -> Duration {
        let exp = u32::try_from(attempt.saturating_sub(1).clamp(0, 30)).unwrap_or(30);
        self.base.saturating_mul(1u32 << exp).min(self.cap)
    }
}

/// Why a delivery failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure<'a> {
    /// The platform said to wait (429 `Retry-After`); not counted against the action.
    RateLimited {
        /// How long it asked us to wait.
        retry_after: Duration,
    },
    /// Anything else; counted.
    Error(&'a str),
}

/// What happened to a failed action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Scheduled again at this unix-ms time.
    At(i64),
    /// Too many failures: kept as a dead letter.
    DeadLettered,
}

/// Records a failed delivery and releases the claim.
///
/// # Errors
/// Database errors.
pub async fn retry(
    c: &mut AnyConnection,
    id: i64,
    worker: &str,
    failure: &Failure<'_>,
    policy: &RetryPolicy,
    now: i64,
) -> Result<Retry> {
    let (attempts,): (i64,) = sqlx::query_as("SELECT attempts FROM outbox WHERE id = $1")
        .arg(id)
        .only(&mut *c)
        .await?;
    let (attempts, delay, error) = match failure {
        Failure::RateLimited { retry_after } => (
            attempts,
            *retry_after,
            format!("rate limited for {retry_after:?}"),
        ),
        Failure::Error(e) => (attempts + 1, policy.delay(attempts + 1), (*e).to_owned()),
    };
    let dead = attempts >= policy.max_attempts;
    let at = now.saturating_add(ms(delay));
    sqlx::query(
        "UPDATE outbox SET attempts = $3, next_attempt_at = $4, last_error = $5, status = $6, claimed_by = NULL, claim_until = NULL
         WHERE id = $1 AND claimed_by = $2",
    )
    .arg(id)
    .arg(worker)
    .arg(attempts)
    .arg(at)
    .arg(error)
    .arg(if dead { "dead" } else { "pending" })
    .execute(c)
    .await?;
    Ok(if dead {
        Retry::DeadLettered
    } else {
        Retry::At(at)
    })
}

/// Queue figures for `/metrics` and `/readyz`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Actions waiting.
    pub pending: i64,
    /// Age of the oldest waiting action, ms (0 when none).
    pub oldest_pending_age_ms: i64,
    /// Dead letters kept.
    pub dead: i64,
}

/// Current queue figures.
///
/// # Errors
/// Database errors.
pub async fn stats(c: &mut AnyConnection, now: i64) -> Result<Stats> {
    let (pending, oldest): (i64, Option<i64>) =
        sqlx::query_as("SELECT COUNT(*), MIN(created_at) FROM outbox WHERE status = 'pending'")
            .only(&mut *c)
            .await?;
    let (dead,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM outbox WHERE status = 'dead'")
        .only(c)
        .await?;
    Ok(Stats {
        pending,
        oldest_pending_age_ms: oldest.map_or(0, |t| (now - t).max(0)),
        dead,
    })
}

/// A dead-lettered action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct DeadLetter {
    /// Row id.
    pub id: i64,
    /// Conversation.
    pub conversation_id: String,
    /// Kind.
    pub kind: String,
    /// Failed attempts.
    pub attempts: i64,
    /// The last error.
    pub last_error: Option<String>,
    /// Unix ms.
    pub created_at: i64,
}

/// Dead letters, newest first.
///
/// # Errors
/// Database errors.
pub async fn dead_letters(c: &mut AnyConnection, limit: i64) -> Result<Vec<DeadLetter>> {
    Ok(sqlx::query_as::<_, DeadLetter>(
        "SELECT id, conversation_id, kind, attempts, last_error, created_at FROM outbox WHERE status = 'dead' ORDER BY id DESC LIMIT $1",
    )
    .arg(limit)
    .fetch_all(c)
    .await?)
}

/// Releases every claim (at start-up of the one active replica: whoever held them is gone), so
/// nothing waits out a dead worker's lease. Returns how many were released.
///
/// # Errors
/// Database errors.
pub async fn release_claims(c: &mut AnyConnection) -> Result<u64> {
    Ok(sqlx::query("UPDATE outbox SET claimed_by = NULL, claim_until = NULL WHERE status = 'pending' AND claimed_by IS NOT NULL")
        .execute(c)
        .await?
        .rows_affected())
}
