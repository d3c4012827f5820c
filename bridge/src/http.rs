//! The HTTP side: `/healthz` (the process is alive), `/readyz` (this replica's role; store, daemon and chat platform —
//! 503 with a JSON body saying which is not), and the history API under `/api/v1`, bearer-protected with
//! `http.api_token`. Errors are JSON with stable codes (`unauthorized`, `bad_request`, `bad_cursor`,
//! `not_found`, `unavailable`); a store failure's cause goes to the log, never to the client.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use crate::replica::Status;
use crate::store::history::{self, Filter, HistoryError};
use crate::store::{Store, tool_calls};

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct HttpState {
    store: Store,
    status: Arc<Status>,
    api_token: Option<String>,
}

impl HttpState {
    /// State over the bridge's store and this replica's status; `api_token` unset disables the API
    /// (401).
    #[must_use]
    pub fn new(store: Store, status: Arc<Status>, api_token: Option<String>) -> Self {
        Self {
            store,
            status,
            api_token,
        }
    }
}

/// An API error: its `Display` is the public message.
#[derive(Debug)]
struct ApiError(StatusCode, &'static str, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.0,
            axum::Json(json!({"error": {"code": self.1, "message": self.2}})),
        )
            .into_response()
    }
}

fn store_failed(e: &dyn std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "history API store failure");
    ApiError(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "the store is not answering; try again".into(),
    )
}

fn authorize(state: &HttpState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = &state.api_token else {
        return Err(ApiError(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the API is disabled: set http.api_token".into(),
        ));
    };
    let given = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // Constant-time enough for a bearer check: compare all bytes regardless of where they differ.
    let ok = given.is_some_and(|g| {
        g.len() == expected.len()
            && g.bytes()
                .zip(expected.bytes())
                .fold(0u8, |a, (x, y)| a | (x ^ y))
                == 0
    });
    if ok {
        Ok(())
    } else {
        Err(ApiError(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token".into(),
        ))
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn prometheus(State(state): State<HttpState>) -> Response {
    // Queue figures are read at scrape time, so they are never stale.
    if let Ok(mut c) = state.store.conn().await
        && let Ok(stats) = crate::store::outbox::stats(&mut c, crate::store::now_ms()).await
    {
        metrics::gauge!("chatbridge_outbox_pending").set(stats.pending as f64);
        metrics::gauge!("chatbridge_outbox_oldest_pending_age_seconds")
            .set(stats.oldest_pending_age_ms as f64 / 1000.0);
        metrics::gauge!("chatbridge_outbox_dead_letters").set(stats.dead as f64);
    }
    metrics::gauge!("chatbridge_daemon_connected").set(
        if state.status.daemon_connected() == Some(true) {
            1.0
        } else {
            0.0
        },
    );
    match crate::metrics::handle() {
        Some(h) => ([("content-type", "text/plain; version=0.0.4")], h.render()).into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics are not available in this process",
        )
            .into_response(),
    }
}

async fn readyz(State(state): State<HttpState>) -> Response {
    let (ready, body) = state.status.readiness(&state.store).await;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

#[derive(Debug, Deserialize)]
struct ListParams {
    platform: Option<String>,
    channel: Option<String>,
    user: Option<String>,
    status: Option<String>,
    since: Option<i64>,
    until: Option<i64>,
    cursor: Option<String>,
    limit: Option<i64>,
}

async fn list(
    State(state): State<HttpState>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let Query(p) = params.map_err(bad_query)?;
    let limit = check_limit(p.limit)?;
    let filter = Filter {
        platform: p.platform,
        channel: p.channel,
        user: p.user,
        since: p.since,
        until: p.until,
        status: p.status,
        cursor: p.cursor,
        limit,
    };
    let mut c = state.store.conn().await.map_err(|e| store_failed(&e))?;
    match history::list(&mut c, &filter).await {
        Ok(page) => Ok(axum::Json(page).into_response()),
        Err(HistoryError::BadCursor(e)) => Err(ApiError(
            StatusCode::BAD_REQUEST,
            "bad_cursor",
            e.to_string(),
        )),
        Err(HistoryError::Store(e)) => Err(store_failed(&e)),
    }
}

/// The item as JSON, or a `not_found` error naming what was missing.
fn found<T: serde::Serialize>(item: Option<T>, what: &str, id: &str) -> Result<Response, ApiError> {
    match item {
        Some(item) => Ok(axum::Json(item).into_response()),
        None => Err(ApiError(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no {what} {id}"),
        )),
    }
}

async fn conversation(
    State(state): State<HttpState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let mut c = state.store.conn().await.map_err(|e| store_failed(&e))?;
    let detail = history::detail(&mut c, &id)
        .await
        .map_err(|e| store_failed(&e))?;
    found(detail, "conversation", &id)
}

async fn tool_call(
    State(state): State<HttpState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let mut c = state.store.conn().await.map_err(|e| store_failed(&e))?;
    let call = tool_calls::get(&mut c, &id)
        .await
        .map_err(|e| store_failed(&e))?;
    found(call, "tool call", &id)
}

#[derive(Debug, Deserialize)]
struct SearchParams {
    q: Option<String>,
    limit: Option<i64>,
}

async fn search(
    State(state): State<HttpState>,
    headers: HeaderMap,
    params: Result<Query<SearchParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let Query(p) = params.map_err(bad_query)?;
    let q = p.q.filter(|q| !q.trim().is_empty()).ok_or_else(|| {
        ApiError(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "q is required".into(),
        )
    })?;
    let limit = check_limit(p.limit)?.unwrap_or(50);
    let mut c = state.store.conn().await.map_err(|e| store_failed(&e))?;
    let hits = history::search(&mut c, &q, limit)
        .await
        .map_err(|e| store_failed(&e))?;
    Ok(axum::Json(json!({"hits": hits})).into_response())
}

#[derive(Debug, Deserialize)]
struct LimitParams {
    limit: Option<i64>,
}

/// A page size, if given, must be 1–500.
fn check_limit(l: Option<i64>) -> Result<Option<i64>, ApiError> {
    match l {
        Some(l) if !(1..=500).contains(&l) => Err(ApiError(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "limit must be between 1 and 500".into(),
        )),
        l => Ok(l),
    }
}

/// Query parameters that do not parse (a number that is not one, say).
fn bad_query(e: axum::extract::rejection::QueryRejection) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, "bad_request", e.body_text())
}

/// Chat actions the outbox gave up on (the platform refused them for good), newest first. What they
/// carried is in the conversation's history either way. Beside them, `inbound_dead_letters`: chat
/// events the bridge set aside after they failed to be handled again and again (S4).
async fn dead_letters(
    State(state): State<HttpState>,
    headers: HeaderMap,
    params: Result<Query<LimitParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    authorize(&state, &headers)?;
    let Query(p) = params.map_err(bad_query)?;
    let limit = check_limit(p.limit)?.unwrap_or(50);
    let mut c = state.store.conn().await.map_err(|e| store_failed(&e))?;
    let dead = crate::store::outbox::dead_letters(&mut c, limit)
        .await
        .map_err(|e| store_failed(&e))?;
    let inbound = crate::store::inbound::dead_letters(&mut c, limit)
        .await
        .map_err(|e| store_failed(&e))?;
    Ok(axum::Json(json!({"dead_letters": dead, "inbound_dead_letters": inbound})).into_response())
}

/// The OpenAPI document of this API (`docs/openapi.json`, built in).
pub const OPENAPI: &str = include_str!("../../docs/openapi.json");

async fn openapi() -> Response {
    ([("content-type", "application/json")], OPENAPI).into_response()
}

/// The router.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", axum::routing::get(healthz))
        .route("/readyz", axum::routing::get(readyz))
        .route("/metrics", axum::routing::get(prometheus))
        .route("/api/v1/conversations", axum::routing::get(list))
        .route(
            "/api/v1/conversations/{id}",
            axum::routing::get(conversation),
        )
        .route("/api/v1/tool-calls/{id}", axum::routing::get(tool_call))
        .route("/api/v1/search", axum::routing::get(search))
        .route("/api/v1/dead-letters", axum::routing::get(dead_letters))
        .route("/api/v1/openapi.json", axum::routing::get(openapi))
        .with_state(state)
}
