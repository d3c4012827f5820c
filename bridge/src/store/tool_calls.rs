//! `tool_calls`: each tool call's state, timing, heartbeat count, last progress, and on completion its
//! outcome, summary and full output. Progress is flushed by the caller at most every few seconds,
//! never per heartbeat.

use serde::Serialize;
use sqlx::AnyConnection;

use super::bind::{BindExt, FetchExt, Json};
use super::{Result, new_id, sql};

/// A stored tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ToolCall {
    /// Our id (the one `GET /api/v1/tool-calls/{id}` and `history show` use).
    pub id: String,
    /// Its conversation.
    pub conversation_id: String,
    /// Its turn.
    pub turn_id: Option<String>,
    /// The daemon's `toolCallId`.
    pub call_id: String,
    /// Title.
    pub title: String,
    /// ACP kind.
    pub kind: Option<String>,
    /// `running`, `completed`, `failed`, `timed_out`, `cancelled`.
    pub status: String,
    /// Short summary.
    pub summary: Option<String>,
    /// Full output (as the daemon kept it).
    pub output: Option<String>,
    /// Exit code.
    pub exit_code: Option<i64>,
    /// Signal.
    pub signal: Option<i64>,
    /// Heartbeats received.
    pub heartbeats: i64,
    /// Last progress (`shellProgress` JSON).
    pub last_progress: Option<String>,
    /// Unix ms.
    pub started_at: i64,
    /// Unix ms of the last progress flush.
    pub progress_at: Option<i64>,
    /// Unix ms.
    pub finished_at: Option<i64>,
}

const COLUMNS: &str = "id, conversation_id, turn_id, call_id, title, kind, status, summary, output, exit_code, signal, heartbeats, last_progress, started_at, progress_at, finished_at";

/// Records a started call (or refreshes its title/kind when it is seen again); returns our id.
///
/// # Errors
/// Database errors.
pub async fn start(
    c: &mut AnyConnection,
    conversation: &str,
    turn: Option<&str>,
    call_id: &str,
    title: &str,
    kind: Option<&str>,
    now: i64,
) -> Result<String> {
    let id: (String,) = sqlx::query_as(
        "INSERT INTO tool_calls (id, conversation_id, turn_id, call_id, title, kind, status, started_at)
         VALUES ($1, $2, $3, $4, $5, $6, 'running', $7)
         ON CONFLICT (conversation_id, call_id) DO UPDATE SET
             title = CASE WHEN excluded.title = '' THEN tool_calls.title ELSE excluded.title END,
             kind = COALESCE(excluded.kind, tool_calls.kind)
         RETURNING id",
    )
    .arg(new_id())
    .arg(conversation)
    .arg(turn)
    .arg(call_id)
    .arg(title)
    .arg(kind)
    .arg(now)
    .only(c)
    .await?;
    Ok(id.0)
}

/// Flushes accumulated progress: `heartbeats` more, the latest progress JSON. Heartbeats are counted
/// even when the write lands after the result (they were received before it; counts are written in
/// batches, off the conversation's path), but a terminal call's progress stays as it was. Returns
/// whether the call was still running.
///
/// # Errors
/// Database errors.
pub async fn progress(
    c: &mut AnyConnection,
    conversation: &str,
    call_id: &str,
    heartbeats: i64,
    last_progress: Option<&str>,
    now: i64,
) -> Result<bool> {
    let status: Option<(String,)> = sqlx::query_as(
        "UPDATE tool_calls SET heartbeats = heartbeats + $3,
             last_progress = CASE WHEN status = 'running' THEN COALESCE($4, last_progress) ELSE last_progress END,
             progress_at = CASE WHEN status = 'running' THEN $5 ELSE progress_at END
         WHERE conversation_id = $1 AND call_id = $2
         RETURNING status",
    )
    .arg(conversation)
    .arg(call_id)
    .arg(heartbeats)
    .arg(last_progress.map(Json))
    .arg(now)
    .first(c)
    .await?;
    Ok(status.is_some_and(|(s,)| s == "running"))
}

/// One call's heartbeat count and latest progress, for [`progress_many`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgressRow<'a> {
    /// The conversation.
    pub conversation: &'a str,
    /// The call's stored id (scoped by session).
    pub call_id: &'a str,
    /// Heartbeats to add.
    pub heartbeats: i64,
    /// The latest progress (JSON), if any came.
    pub last_progress: Option<&'a str>,
}

/// [`progress`] for many calls in one statement (the progress writer's batch): one `UPDATE … FROM
/// (VALUES …)` instead of one per call, which at thousands of running commands is a large share of
/// the database's statements. Rows of the same call are added up first (a statement updates a row
/// once), the latest progress kept. Same rules as [`progress`]: counts always add up, a terminal
/// call's progress stays as it was.
///
/// # Errors
/// Database errors.
pub async fn progress_many(
    c: &mut AnyConnection,
    rows: &[ProgressRow<'_>],
    now: i64,
) -> Result<()> {
    let mut merged: Vec<ProgressRow<'_>> = Vec::with_capacity(rows.len());
    let mut at: std::collections::HashMap<(&str, &str), usize> =
        std::collections::HashMap::with_capacity(rows.len());
    for r in rows {
        match at.get(&(r.conversation, r.call_id)) {
            Some(&i) => {
                merged[i].heartbeats += r.heartbeats;
                if r.last_progress.is_some() {
                    merged[i].last_progress = r.last_progress;
                }
            }
            None => {
                at.insert((r.conversation, r.call_id), merged.len());
                merged.push(r.clone());
            }
        }
    }
    // 4 parameters a row, well under both backends' limits at the writer's batch of 256.
    for chunk in merged.chunks(1000) {
        let values: Vec<String> = (0..chunk.len())
            .map(|i| {
                let n = 4 * i + 2;
                format!("(${n}, ${}, ${}, ${})", n + 1, n + 2, n + 3)
            })
            .collect();
        // VALUES columns are column1… on both PostgreSQL and SQLite.
        let query = format!(
            "UPDATE tool_calls SET heartbeats = heartbeats + v.column3,
                 last_progress = CASE WHEN status = 'running' THEN COALESCE(v.column4, last_progress) ELSE last_progress END,
                 progress_at = CASE WHEN status = 'running' THEN $1 ELSE progress_at END
             FROM (VALUES {}) AS v
             WHERE tool_calls.conversation_id = v.column1 AND tool_calls.call_id = v.column2",
            values.join(", ")
        );
        let mut q = sqlx::query(sql(query)).arg(now);
        for r in chunk {
            q = q
                .arg(r.conversation)
                .arg(r.call_id)
                .arg(r.heartbeats)
                .arg(r.last_progress.map(Json));
        }
        q.execute(&mut *c).await?;
    }
    Ok(())
}

/// A call's terminal state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finish<'a> {
    /// `completed`, `failed`, `timed_out`, `cancelled`, or `interrupted` (the daemon lost the session).
    pub outcome: &'a str,
    /// Short summary.
    pub summary: Option<&'a str>,
    /// Full output.
    pub output: &'a str,
    /// Exit code.
    pub exit_code: Option<i64>,
    /// Signal.
    pub signal: Option<i64>,
}

/// Records the terminal state; `Some(id)` when the call went from running to terminal now, `None` when
/// it was already terminal (a replay or a duplicate: nothing is recorded twice).
///
/// # Errors
/// Database errors.
pub async fn finish(
    c: &mut AnyConnection,
    conversation: &str,
    call_id: &str,
    f: &Finish<'_>,
    now: i64,
) -> Result<Option<String>> {
    finish_counted(c, conversation, call_id, f, 0, None, now).await
}

/// A call's finishing `UPDATE` (`$1`–`$10`, bound by [`FinishArgs::args_finish`]), with `$also`
/// added to its condition; it returns the call's id.
macro_rules! finish_sql {
    ($also:literal) => {
        concat!(
            "UPDATE tool_calls SET status = $3, summary = $4, output = $5, exit_code = $6, signal = $7, finished_at = $8,
                 heartbeats = heartbeats + $9,
                 last_progress = COALESCE($10, last_progress),
                 progress_at = CASE WHEN $9 > 0 THEN $8 ELSE progress_at END
             WHERE conversation_id = $1 AND call_id = $2 AND status = 'running'",
            $also,
            " RETURNING id"
        )
    };
}

/// [`finish`] with the call's last `heartbeats` (and its latest progress) added in the same
/// statement, as [`progress`] would have before it — one statement for a result instead of two
/// (P2). Nothing is added to a call that was terminal already.
///
/// # Errors
/// Database errors.
pub async fn finish_counted(
    c: &mut AnyConnection,
    conversation: &str,
    call_id: &str,
    f: &Finish<'_>,
    heartbeats: i64,
    last_progress: Option<&str>,
    now: i64,
) -> Result<Option<String>> {
    let row: Option<(String,)> = sqlx::query_as(finish_sql!(""))
        .args_finish(conversation, call_id, f, now, heartbeats, last_progress)
        .fetch_all(c)
        .await?
        .into_iter()
        .next();
    Ok(row.map(|r| r.0))
}

/// Binds `$1`–`$10` of a call's finishing `UPDATE` ([`finish_counted`], [`finish_with_result`]).
trait FinishArgs: BindExt {
    fn args_finish(
        self,
        conversation: &str,
        call_id: &str,
        f: &Finish<'_>,
        now: i64,
        heartbeats: i64,
        last_progress: Option<&str>,
    ) -> Self {
        self.arg(conversation)
            .arg(call_id)
            .arg(f.outcome)
            .arg(f.summary)
            .arg(f.output)
            .arg(f.exit_code)
            .arg(f.signal)
            .arg(now)
            .arg(heartbeats)
            .arg(last_progress.map(Json))
    }
}

impl<T: BindExt> FinishArgs for T {}

/// A tool's result as one statement, on PostgreSQL (P2): the call `id` (`call_id` of
/// `conversation`) finished as [`finish_counted`] does, the result's transcript `entry` (its
/// `tool_call_id` is the call's) and the chat `action` queued — what the result's transaction
/// wrote in five round trips (`BEGIN`, three statements, `COMMIT`), with the same atomicity: one
/// statement commits whole or not at all. Returns the id; `None` when that row is not running (a
/// replay, or not the row `id` names) and nothing was written. With `ending`, the turn it names is
/// closed in the same statement as [`super::turns::finish`] closes it — only when the result is
/// written (a command's turn that ends with its result: one commit for both). PostgreSQL only:
/// SQLite's `WITH` takes no `UPDATE`/`INSERT`.
///
/// # Errors
/// Database errors.
#[allow(clippy::too_many_arguments)]
pub async fn finish_with_result(
    c: &mut AnyConnection,
    conversation: &str,
    call_id: &str,
    id: &str,
    f: &Finish<'_>,
    heartbeats: i64,
    last_progress: Option<&str>,
    entry: &super::transcript::NewEntry<'_>,
    action: &super::outbox::NewAction<'_>,
    ending: Option<(&str, &super::turns::Ending<'_>)>,
    now: i64,
) -> Result<Option<String>> {
    let query = if ending.is_some() {
        result_sql!(
            ", e AS (
             UPDATE turns SET status = $20, stop_reason = $21, end_cause = $22, answer = $23, ended_at = $8
             WHERE id = $19 AND status = 'open' AND EXISTS (SELECT 1 FROM f)
         )"
        )
    } else {
        result_sql!("")
    };
    let statement = sqlx::query_as::<_, (String,)>(query)
        .args_finish(conversation, call_id, f, now, heartbeats, last_progress)
        .arg(id)
        .arg(entry.turn_id)
        .arg(entry.kind)
        .arg(entry.actor)
        .arg(entry.body)
        .arg(action.kind.as_str())
        .arg(action.coalesce_key)
        .arg(Json(action.action));
    let row: Option<(String,)> = match ending {
        Some((turn, end)) => {
            statement
                .arg(turn)
                .arg(end.status)
                .arg(end.stop_reason)
                .arg(end.end_cause)
                .arg(end.answer)
                .first(c)
                .await?
        }
        None => statement.first(c).await?,
    };
    Ok(row.map(|r| r.0))
}

/// [`finish_with_result`]'s statement, with `$also` (more common table expressions) after its own.
macro_rules! result_sql {
    ($also:literal) => {
        concat!(
            "WITH f AS (",
            finish_sql!(" AND id = $11"),
            "), t AS (
             INSERT INTO transcript (conversation_id, turn_id, seq, kind, actor, body, tool_call_id, created_at)
             SELECT $1, $12, (SELECT COALESCE(MAX(seq), 0) + 1 FROM transcript WHERE conversation_id = $1),
                    $13, $14, $15, f.id, $8
             FROM f
         ), o AS (
             INSERT INTO outbox (conversation_id, kind, coalesce_key, action, status, attempts, next_attempt_at, created_at)
             SELECT $1, $16, $17, $18, 'pending', 0, $8, $8 FROM f
         )",
            $also,
            " SELECT id FROM f"
        )
    };
}
use result_sql;

/// One call by our id, with its full output.
///
/// # Errors
/// Database errors.
pub async fn get(c: &mut AnyConnection, id: &str) -> Result<Option<ToolCall>> {
    Ok(sqlx::query_as::<_, ToolCall>(sql(format!(
        "SELECT {COLUMNS} FROM tool_calls WHERE id = $1"
    )))
    .arg(id)
    .first(c)
    .await?)
}

/// One call by the daemon's id.
///
/// # Errors
/// Database errors.
pub async fn by_call_id(
    c: &mut AnyConnection,
    conversation: &str,
    call_id: &str,
) -> Result<Option<ToolCall>> {
    Ok(sqlx::query_as::<_, ToolCall>(sql(format!(
        "SELECT {COLUMNS} FROM tool_calls WHERE conversation_id = $1 AND call_id = $2"
    )))
    .arg(conversation)
    .arg(call_id)
    .first(c)
    .await?)
}

/// A conversation's calls in start order.
///
/// # Errors
/// Database errors.
pub async fn of_conversation(c: &mut AnyConnection, conversation: &str) -> Result<Vec<ToolCall>> {
    Ok(sqlx::query_as::<_, ToolCall>(sql(format!(
        "SELECT {COLUMNS} FROM tool_calls WHERE conversation_id = $1 ORDER BY started_at, id"
    )))
    .arg(conversation)
    .fetch_all(c)
    .await?)
}

/// The ids of `conversation`'s calls that belong to another turn than `turn` (no output read).
///
/// # Errors
/// Database errors.
pub async fn ids_of_other_turns(
    c: &mut AnyConnection,
    conversation: &str,
    turn: &str,
) -> Result<Vec<String>> {
    let rows: Vec<(String,)> = sqlx::query_as(sql(
        "SELECT call_id FROM tool_calls WHERE conversation_id = $1 AND (turn_id IS NULL OR turn_id <> $2)"
            .to_owned(),
    ))
    .arg(conversation)
    .arg(turn)
    .fetch_all(c)
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// The calls of `conversation` still running although their turn is over (the daemon answered
/// the prompt before their results), oldest first: their results may still come.
///
/// # Errors
/// Database errors.
pub async fn running_after_their_turn(
    c: &mut AnyConnection,
    conversation: &str,
) -> Result<Vec<ToolCall>> {
    Ok(sqlx::query_as::<_, ToolCall>(sql(format!(
        "SELECT {COLUMNS} FROM tool_calls WHERE conversation_id = $1 AND status = 'running'
           AND turn_id IN (SELECT id FROM turns WHERE conversation_id = $1 AND status <> 'open')
         ORDER BY started_at, id"
    )))
    .arg(conversation)
    .fetch_all(c)
    .await?)
}

/// Every call still running, oldest first (the UI's "running now").
///
/// # Errors
/// Database errors.
pub async fn running(c: &mut AnyConnection) -> Result<Vec<ToolCall>> {
    Ok(sqlx::query_as::<_, ToolCall>(sql(format!(
        "SELECT {COLUMNS} FROM tool_calls WHERE status = 'running' ORDER BY started_at, id"
    )))
    .fetch_all(c)
    .await?)
}

/// `(status, started_at, finished_at)` of every call started at or after `since` (unix ms), for the
/// UI's overview: outcomes over time and duration percentiles, without the output.
///
/// # Errors
/// Database errors.
pub async fn timings_since(
    c: &mut AnyConnection,
    since: i64,
) -> Result<Vec<(String, i64, Option<i64>)>> {
    Ok(sqlx::query_as(
        "SELECT status, started_at, finished_at FROM tool_calls WHERE started_at >= $1 ORDER BY started_at",
    )
    .arg(since)
    .fetch_all(c)
    .await?)
}
