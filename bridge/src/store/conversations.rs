//! `conversations`: one row per chat thread, keyed by (platform, workspace, channel, thread), linked to
//! its daemon session.

use serde::Serialize;
use sqlx::AnyConnection;

use super::bind::{BindExt, FetchExt};
use super::{Result, new_id, sql};

/// A conversation's key, as the channel adapter sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key<'a> {
    /// `slack`, `discord`, `console`.
    pub platform: &'a str,
    /// Slack team or Discord guild (`-` for none).
    pub workspace: &'a str,
    /// Channel id.
    pub channel: &'a str,
    /// Thread id (Slack `thread_ts`, Discord thread channel id).
    pub thread: &'a str,
}

/// A stored conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Conversation {
    /// Our id.
    pub id: String,
    /// Platform.
    pub platform: String,
    /// The project it belongs to (`default` in the one-project configuration).
    pub project: String,
    /// Workspace or guild.
    pub workspace: String,
    /// Channel.
    pub channel: String,
    /// Thread.
    pub thread: String,
    /// The daemon session, once created.
    pub daemon_session: Option<String>,
    /// The session's working directory.
    pub cwd: String,
    /// Who started it.
    pub started_by: String,
    /// A short title (the first prompt's start).
    pub title: String,
    /// `active` or `closed`.
    pub status: String,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
}

pub(crate) const COLUMNS: &str = "id, platform, project, workspace, channel, thread, daemon_session, cwd, started_by, title, status, created_at, updated_at";

/// The project of conversations in the one-project configuration (and of rows from before projects).
pub const DEFAULT_PROJECT: &str = crate::config::IMPLICIT_PROJECT;

/// Finds the conversation for `key`, creating it if needed (in [`DEFAULT_PROJECT`]); `true` when it
/// was created.
///
/// # Errors
/// Database errors.
pub async fn find_or_create(
    c: &mut AnyConnection,
    key: &Key<'_>,
    started_by: &str,
    title: &str,
    now: i64,
) -> Result<(Conversation, bool)> {
    find_or_create_in(c, key, DEFAULT_PROJECT, started_by, title, now).await
}

/// [`find_or_create`] for a conversation of `project` (a conversation found keeps its project).
///
/// # Errors
/// Database errors.
pub async fn find_or_create_in(
    c: &mut AnyConnection,
    key: &Key<'_>,
    project: &str,
    started_by: &str,
    title: &str,
    now: i64,
) -> Result<(Conversation, bool)> {
    let inserted = sqlx::query(
        "INSERT INTO conversations (id, platform, workspace, channel, thread, started_by, title, status, created_at, updated_at, project)
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'active', $8, $8, $9)
         ON CONFLICT (platform, workspace, channel, thread) DO NOTHING",
    )
    .arg(new_id())
    .arg(key.platform)
    .arg(key.workspace)
    .arg(key.channel)
    .arg(key.thread)
    .arg(started_by)
    .arg(title)
    .arg(now)
    .arg(project)
    .execute(&mut *c)
    .await?
    .rows_affected()
        == 1;
    let conv = sqlx::query_as::<_, Conversation>(sql(format!(
        "SELECT {COLUMNS} FROM conversations WHERE platform = $1 AND workspace = $2 AND channel = $3 AND thread = $4"
    )))
    .arg(key.platform)
    .arg(key.workspace)
    .arg(key.channel)
    .arg(key.thread)
    .only(&mut *c)
    .await?;
    Ok((conv, inserted))
}

/// The conversation for `key`, if there is one.
///
/// # Errors
/// Database errors.
pub async fn find(c: &mut AnyConnection, key: &Key<'_>) -> Result<Option<Conversation>> {
    Ok(sqlx::query_as::<_, Conversation>(sql(format!(
        "SELECT {COLUMNS} FROM conversations WHERE platform = $1 AND workspace = $2 AND channel = $3 AND thread = $4"
    )))
    .arg(key.platform)
    .arg(key.workspace)
    .arg(key.channel)
    .arg(key.thread)
    .first(c)
    .await?)
}

/// The conversation with `id`.
///
/// # Errors
/// Database errors.
pub async fn get(c: &mut AnyConnection, id: &str) -> Result<Option<Conversation>> {
    Ok(sqlx::query_as::<_, Conversation>(sql(format!(
        "SELECT {COLUMNS} FROM conversations WHERE id = $1"
    )))
    .arg(id)
    .first(c)
    .await?)
}

/// The conversation bound to a daemon session.
///
/// # Errors
/// Database errors.
pub async fn by_session(c: &mut AnyConnection, session: &str) -> Result<Option<Conversation>> {
    Ok(sqlx::query_as::<_, Conversation>(sql(format!(
        "SELECT {COLUMNS} FROM conversations WHERE daemon_session = $1"
    )))
    .arg(session)
    .first(c)
    .await?)
}

/// Binds the conversation to a daemon session (new, or replaced after `/new` or a lost session);
/// a closed conversation is active again.
///
/// # Errors
/// Database errors.
pub async fn set_session(
    c: &mut AnyConnection,
    id: &str,
    session: &str,
    cwd: &str,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "UPDATE conversations SET daemon_session = $2, cwd = $3, status = 'active', updated_at = $4 WHERE id = $1",
    )
    .arg(id)
    .arg(session)
    .arg(cwd)
    .arg(now)
    .execute(c)
    .await?;
    Ok(())
}

/// Lets the conversation's daemon session go (`/new`): its next message opens a new one, even after
/// the bridge restarts or lets the idle thread go from memory.
///
/// # Errors
/// Database errors.
pub async fn forget_session(c: &mut AnyConnection, id: &str, now: i64) -> Result<()> {
    sqlx::query("UPDATE conversations SET daemon_session = NULL, updated_at = $2 WHERE id = $1")
        .arg(id)
        .arg(now)
        .execute(c)
        .await?;
    Ok(())
}

/// Moves a conversation to `project` (its project is no longer configured and its channel is now
/// another project's): its daemon session is let go with it, so the new project's daemon opens a
/// new one instead of loading a session it never had.
///
/// # Errors
/// Database errors.
pub async fn move_to_project(
    c: &mut AnyConnection,
    id: &str,
    project: &str,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "UPDATE conversations SET project = $2, daemon_session = NULL, updated_at = $3 WHERE id = $1",
    )
    .arg(id)
    .arg(project)
    .arg(now)
    .execute(c)
    .await?;
    Ok(())
}

/// Records that the thread of `id` was told its project `project` is no longer served here;
/// `false` when it already was (told once, across restarts).
///
/// # Errors
/// Database errors.
pub async fn mark_unserved_told(c: &mut AnyConnection, id: &str, project: &str) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE conversations SET unserved_told = $2 WHERE id = $1 AND (unserved_told IS NULL OR unserved_told <> $2)",
    )
    .arg(id)
    .arg(project)
    .execute(c)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// Titles a conversation that has no title yet (one opened with a command, not a prompt).
///
/// # Errors
/// Database errors.
pub async fn title_if_untitled(c: &mut AnyConnection, id: &str, title: &str) -> Result<()> {
    sqlx::query("UPDATE conversations SET title = $2 WHERE id = $1 AND title = ''")
        .arg(id)
        .arg(title)
        .execute(c)
        .await?;
    Ok(())
}

/// Marks activity (or closes it with `status = closed`).
///
/// # Errors
/// Database errors.
pub async fn touch(c: &mut AnyConnection, id: &str, status: &str, now: i64) -> Result<()> {
    sqlx::query("UPDATE conversations SET status = $2, updated_at = $3 WHERE id = $1")
        .arg(id)
        .arg(status)
        .arg(now)
        .execute(c)
        .await?;
    Ok(())
}

/// Closes a conversation (`/done`): its session is let go (a new message starts a new one).
///
/// # Errors
/// Database errors.
pub async fn close(c: &mut AnyConnection, id: &str, now: i64) -> Result<()> {
    sqlx::query(
        "UPDATE conversations SET status = 'closed', daemon_session = NULL, updated_at = $2 WHERE id = $1",
    )
    .arg(id)
    .arg(now)
    .execute(c)
    .await?;
    Ok(())
}

/// Active conversations whose session works under `prefix` (a directory, ending in `/`) and that
/// have had no activity since `before` (Unix ms), the longest idle first: the worktrees the idle
/// sweep removes.
///
/// # Errors
/// Database errors.
pub async fn idle_under(
    c: &mut AnyConnection,
    prefix: &str,
    before: i64,
    limit: i64,
) -> Result<Vec<Conversation>> {
    let pattern = format!(
        "{}%",
        prefix
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_")
    );
    Ok(sqlx::query_as::<_, Conversation>(sql(format!(
        "SELECT {COLUMNS} FROM conversations WHERE status = 'active' AND updated_at < $1 AND cwd LIKE $2 ESCAPE '\\' ORDER BY updated_at LIMIT $3"
    )))
    .arg(before)
    .arg(pattern)
    .arg(limit)
    .fetch_all(c)
    .await?)
}
