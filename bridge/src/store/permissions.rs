//! `permission_requests`: each approval the daemon asked for, who asked, who decided what and when, or
//! that it expired (R6).

use serde::Serialize;
use sqlx::AnyConnection;

use super::bind::{BindExt, FetchExt, Json};
use super::{Result, new_id, sql};

/// A stored permission request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct PermissionRow {
    /// Our id (carried by the buttons).
    pub id: String,
    /// Conversation.
    pub conversation_id: String,
    /// Turn.
    pub turn_id: Option<String>,
    /// The daemon's JSON-RPC id, as JSON (`"_qwen_perm_…"` or `7`).
    pub request_id: String,
    /// The tool call asked about.
    pub call_id: Option<String>,
    /// What it looks like.
    pub title: String,
    /// The options, as JSON.
    pub options: String,
    /// Who started the turn (may decide).
    pub requester: String,
    /// `pending`, `decided`, `expired`.
    pub status: String,
    /// Who decided.
    pub decider: Option<String>,
    /// What they chose.
    pub option_id: Option<String>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub expires_at: i64,
    /// Unix ms.
    pub decided_at: Option<i64>,
}

const COLUMNS: &str = "id, conversation_id, turn_id, request_id, call_id, title, options, requester, status, decider, option_id, created_at, expires_at, decided_at";

/// A new request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRequest<'a> {
    /// Conversation.
    pub conversation_id: &'a str,
    /// Turn.
    pub turn_id: Option<&'a str>,
    /// The daemon's JSON-RPC id, as JSON.
    pub request_id: &'a str,
    /// The tool call.
    pub call_id: Option<&'a str>,
    /// Title.
    pub title: &'a str,
    /// Options JSON.
    pub options: &'a str,
    /// Requester.
    pub requester: &'a str,
    /// Unix ms.
    pub expires_at: i64,
}

/// Stores a pending request; returns our id.
///
/// # Errors
/// Database errors.
pub async fn create(c: &mut AnyConnection, r: &NewRequest<'_>, now: i64) -> Result<String> {
    let id = new_id();
    sqlx::query(
        "INSERT INTO permission_requests (id, conversation_id, turn_id, request_id, call_id, title, options, requester, status, created_at, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', $9, $10)",
    )
    .arg(&id)
    .arg(r.conversation_id)
    .arg(r.turn_id)
    .arg(Json(r.request_id))
    .arg(r.call_id)
    .arg(r.title)
    .arg(Json(r.options))
    .arg(r.requester)
    .arg(now)
    .arg(r.expires_at)
    .execute(c)
    .await?;
    Ok(id)
}

/// Records a decision; `None` when the request was no longer pending (decided or expired already:
/// the first decision wins).
///
/// # Errors
/// Database errors.
pub async fn resolve(
    c: &mut AnyConnection,
    id: &str,
    decider: &str,
    option_id: &str,
    now: i64,
) -> Result<Option<PermissionRow>> {
    Ok(sqlx::query_as::<_, PermissionRow>(sql(format!(
        "UPDATE permission_requests SET status = 'decided', decider = $2, option_id = $3, decided_at = $4
         WHERE id = $1 AND status = 'pending' RETURNING {COLUMNS}"
    )))
    .arg(id)
    .arg(decider)
    .arg(option_id)
    .arg(now)
    .first(c)
    .await?)
}

/// The requests of `conversation` still pending (asked before a restart, when resumed).
///
/// # Errors
/// Database errors.
pub async fn pending_of(c: &mut AnyConnection, conversation: &str) -> Result<Vec<PermissionRow>> {
    Ok(sqlx::query_as::<_, PermissionRow>(sql(format!(
        "SELECT {COLUMNS} FROM permission_requests WHERE conversation_id = $1 AND status = 'pending' ORDER BY created_at"
    )))
    .arg(conversation)
    .fetch_all(c)
    .await?)
}

/// Whether `conversation` has a request asked at or after `since` (Unix ms) that nobody answered:
/// still pending in the store, expired, or closed by the bridge (lapsed with a restart, not answered
/// when the input ended, no longer needed).
///
/// # Errors
/// Database errors.
pub async fn unanswered_since(
    c: &mut AnyConnection,
    conversation: &str,
    since: i64,
) -> Result<bool> {
    let (n,): (i64,) = sqlx::query_as(sql(
        "SELECT COUNT(*) FROM permission_requests WHERE conversation_id = $1 AND created_at >= $2
           AND (status IN ('pending', 'expired') OR (status = 'decided' AND decider = 'bridge'))"
            .to_owned(),
    ))
    .arg(conversation)
    .arg(since)
    .only(c)
    .await?;
    Ok(n > 0)
}

/// Expires every pending request whose time is up, returning them (each is answered as rejected).
///
/// # Errors
/// Database errors.
pub async fn expire_due(c: &mut AnyConnection, now: i64) -> Result<Vec<PermissionRow>> {
    Ok(sqlx::query_as::<_, PermissionRow>(sql(format!(
        "UPDATE permission_requests SET status = 'expired', decided_at = $1
         WHERE status = 'pending' AND expires_at <= $1 RETURNING {COLUMNS}"
    )))
    .arg(now)
    .fetch_all(c)
    .await?)
}

/// One request.
///
/// # Errors
/// Database errors.
pub async fn get(c: &mut AnyConnection, id: &str) -> Result<Option<PermissionRow>> {
    Ok(sqlx::query_as::<_, PermissionRow>(sql(format!(
        "SELECT {COLUMNS} FROM permission_requests WHERE id = $1"
    )))
    .arg(id)
    .fetch_all(c)
    .await?
    .into_iter()
    .next())
}

/// Every request of `conversation`, in the order asked (the UI's timeline shows who decided what).
///
/// # Errors
/// Database errors.
pub async fn of_conversation(
    c: &mut AnyConnection,
    conversation: &str,
) -> Result<Vec<PermissionRow>> {
    Ok(sqlx::query_as::<_, PermissionRow>(sql(format!(
        "SELECT {COLUMNS} FROM permission_requests WHERE conversation_id = $1 ORDER BY created_at, id"
    )))
    .arg(conversation)
    .fetch_all(c)
    .await?)
}
