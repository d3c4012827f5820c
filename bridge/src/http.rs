//! The HTTP side: `/healthz` (the process is alive), `/readyz` (this replica's role; store, daemon and chat platform —
//! 503 with a JSON body saying which is not), and the history API under `/api/v1`, bearer-protected with
//! `http.api_token`. Errors are JSON with stable codes (`unauthorized`, `bad_request`, `bad_cursor`,
//! `not_found`, `method_not_allowed`, `unavailable`); a store failure's cause goes to the log, never to
//! the client.
//!
//! Under `/api` the token is checked before anything else answers (S1, issue 13 item 9): a layer in
//! front of every route, the 404 fallback and the 405 answers, so without a token every path there —
//! known or not — is 401. The one exception is `/api/v1/openapi.json`, the public contract (no data).
//! The check is constant-time including the length, and the `Bearer` scheme is matched in any case
//! (RFC 7235). Wrong tokens are limited per client address with the UI's limiter (S-LOGIN1, shared
//! with `/ui/login`): after `http.ui_login_attempts` within `http.ui_login_window` the address gets
//! 429 with `Retry-After` — with the right token too — until its oldest failure leaves the window.

use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::json;

use crate::clock::{Clock, SystemClock};
use crate::replica::Status;
use crate::store::history::{self, Filter, HistoryError};
use crate::store::{Store, tool_calls};
use crate::ui::limit::{self, LoginLimit};

/// What the handlers share. Its `Debug` never shows the API token (a [`SecretString`]).
#[derive(Debug, Clone)]
pub struct HttpState {
    store: Store,
    status: Arc<Status>,
    api_token: Option<SecretString>,
    clock: Arc<dyn Clock>,
    ui: Option<Arc<crate::ui::Ui>>,
    login_limit: Arc<LoginLimit>,
    client_ip_header: Option<HeaderName>,
}

impl HttpState {
    /// State over the bridge's store and this replica's status; `api_token` unset disables the API
    /// (401).
    #[must_use]
    pub fn new(store: Store, status: Arc<Status>, api_token: Option<SecretString>) -> Self {
        Self {
            store,
            status,
            api_token,
            clock: Arc::new(SystemClock),
            ui: None,
            login_limit: Arc::new(LoginLimit::new(
                DEFAULT_LOGIN_ATTEMPTS,
                DEFAULT_LOGIN_WINDOW,
            )),
            client_ip_header: None,
        }
    }

    /// The same state limiting wrong tokens per client address as `http` says
    /// (`ui_login_attempts`, `ui_login_window`, `ui_client_ip_header`); with the UI on, the UI's
    /// limiter is used instead (the same settings, one count for both).
    ///
    /// # Errors
    /// `http.ui_client_ip_header` that is not a header name.
    pub fn with_login_limit(mut self, http: &crate::config::Http) -> anyhow::Result<Self> {
        self.login_limit = Arc::new(LoginLimit::new(
            http.ui_login_attempts,
            http.ui_login_window,
        ));
        self.client_ip_header = http
            .ui_client_ip_header
            .as_deref()
            .map(|h| HeaderName::from_bytes(h.trim().as_bytes()))
            .transpose()
            .map_err(|_| anyhow::anyhow!("http.ui_client_ip_header is not a header name"))?;
        Ok(self)
    }

    /// The same state serving the history pages under `/ui/`.
    #[must_use]
    pub fn with_ui(mut self, ui: crate::ui::Ui) -> Self {
        (self.login_limit, self.client_ip_header) = ui.login_limit();
        self.ui = Some(Arc::new(ui));
        self
    }

    pub(crate) fn ui(&self) -> Option<&crate::ui::Ui> {
        self.ui.as_deref()
    }

    pub(crate) fn status(&self) -> &Arc<Status> {
        &self.status
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The same state reading "now" (for the outbox's age figures) from `clock`.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

/// `http.ui_login_attempts` and `http.ui_login_window` by default.
const DEFAULT_LOGIN_ATTEMPTS: u32 = 10;
const DEFAULT_LOGIN_WINDOW: std::time::Duration = std::time::Duration::from_secs(600);

/// An API error: its `Display` is the public message.
#[derive(Debug)]
struct ApiError(StatusCode, &'static str, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.0,
            axum::Json(json!({"error": {"code": self.1, "message": self.2}})),
        )
            .into_response();
        if self.0 == StatusCode::UNAUTHORIZED {
            // RFC 7235 §3.1: a 401 names the scheme it wants.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
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

fn authorize(
    state: &HttpState,
    headers: &HeaderMap,
    peer: Option<std::net::SocketAddr>,
) -> Result<(), Refusal> {
    let Some(expected) = &state.api_token else {
        return Err(ApiError(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the API is disabled: set http.api_token".into(),
        )
        .into());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let ip = limit::client_ip(state.client_ip_header.as_ref(), headers, peer);
    let now = state.now_ms();
    // Checked before the token, so a blocked address learns nothing — not even that it has the
    // right one.
    if let limit::Verdict::Refused {
        retry_after_s,
        first,
    } = state.login_limit.check(ip, now)
    {
        let client = limit::client_key(ip);
        if first {
            tracing::warn!(%client, retry_after_s, "API refused: too many wrong tokens from this address");
        } else {
            tracing::debug!(%client, retry_after_s, "API refused: too many wrong tokens from this address");
        }
        return Err(Refusal::TooMany(retry_after_s));
    }
    if shell_agent::auth::bearer_matches(given, expected.expose_secret()) {
        state.login_limit.succeeded(ip);
        Ok(())
    } else {
        // A request without any token is no guess; a wrong one counts.
        if given.is_some() {
            state.login_limit.failed(ip, now);
            tracing::debug!(client = %limit::client_key(ip), "API refused: wrong bearer token");
        }
        Err(ApiError(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token".into(),
        )
        .into())
    }
}

/// Why `/api` did not let a request in.
#[derive(Debug)]
enum Refusal {
    /// No or a wrong token (401).
    Api(ApiError),
    /// Too many wrong tokens from this address: seconds to wait (429 + `Retry-After`).
    TooMany(u64),
}

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Self {
        Self::Api(e)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Self::Api(e) => e.into_response(),
            Self::TooMany(retry_after_s) => {
                let mut r = ApiError(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too_many_requests",
                    format!(
                        "too many wrong tokens from this address; try again in {retry_after_s} s"
                    ),
                )
                .into_response();
                r.headers_mut().insert(
                    header::RETRY_AFTER,
                    header::HeaderValue::from(retry_after_s),
                );
                r
            }
        }
    }
}

fn peer_of(request: &Request) -> Option<std::net::SocketAddr> {
    request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0)
}

/// In front of everything under `/api`: nothing there answers before the token is checked.
async fn require_token(State(state): State<HttpState>, request: Request, next: Next) -> Response {
    match authorize(&state, request.headers(), peer_of(&request)) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// An `/api` path that is no route (reached only with a valid token).
async fn api_not_found() -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such API path (see /api/v1/openapi.json)".into(),
    )
}

/// Any other path: under `/api` (`/api/` itself included, which the nested router does not
/// see) the token comes first; then the JSON 404.
async fn not_found(
    State(state): State<HttpState>,
    headers: HeaderMap,
    request: Request,
) -> Response {
    if request.uri().path().starts_with("/api")
        && let Err(refusal) = authorize(&state, &headers, peer_of(&request))
    {
        return refusal.into_response();
    }
    ApiError(StatusCode::NOT_FOUND, "not_found", "no such path".into()).into_response()
}

/// A known `/api` path with a method it does not serve (reached only with a valid token).
async fn api_method_not_allowed() -> ApiError {
    ApiError(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "the history API is read-only: use GET".into(),
    )
}

/// A path segment that does not decode (invalid percent-encoding, not UTF-8).
fn bad_path(e: &PathRejection) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, "bad_request", e.body_text())
}

async fn healthz() -> &'static str {
    "ok"
}

async fn prometheus(State(state): State<HttpState>) -> Response {
    crate::metrics::refresh(&state.store, &state.status, state.clock.now_ms()).await;
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
    let (ready, body) = state.status.probe(&state.store).await;
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
    project: Option<String>,
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
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(p) = params.map_err(bad_query)?;
    let limit = check_limit(p.limit)?;
    let filter = Filter {
        platform: p.platform,
        project: p.project,
        channel: p.channel,
        user: p.user,
        since: p.since,
        until: p.until,
        status: p.status,
        cursor: p.cursor,
        limit,
    };
    let mut c = state
        .store
        .read_conn()
        .await
        .map_err(|e| store_failed(&e))?;
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
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(|e| bad_path(&e))?;
    let mut c = state
        .store
        .read_conn()
        .await
        .map_err(|e| store_failed(&e))?;
    let detail = history::detail(&mut c, &id)
        .await
        .map_err(|e| store_failed(&e))?;
    found(detail, "conversation", &id)
}

async fn tool_call(
    State(state): State<HttpState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(|e| bad_path(&e))?;
    let mut c = state
        .store
        .read_conn()
        .await
        .map_err(|e| store_failed(&e))?;
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
    params: Result<Query<SearchParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(p) = params.map_err(bad_query)?;
    let q = p.q.filter(|q| !q.trim().is_empty()).ok_or_else(|| {
        ApiError(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "q is required".into(),
        )
    })?;
    let limit = check_limit(p.limit)?.unwrap_or(50);
    let mut c = state
        .store
        .read_conn()
        .await
        .map_err(|e| store_failed(&e))?;
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
    params: Result<Query<LimitParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(p) = params.map_err(bad_query)?;
    let limit = check_limit(p.limit)?.unwrap_or(50);
    let mut c = state
        .store
        .read_conn()
        .await
        .map_err(|e| store_failed(&e))?;
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
    let api = Router::new()
        .route("/v1/conversations", axum::routing::get(list))
        .route("/v1/conversations/{id}", axum::routing::get(conversation))
        .route("/v1/tool-calls/{id}", axum::routing::get(tool_call))
        .route("/v1/search", axum::routing::get(search))
        .route("/v1/dead-letters", axum::routing::get(dead_letters))
        .fallback(api_not_found)
        .method_not_allowed_fallback(api_method_not_allowed)
        // Last, so it wraps the routes, the fallback and the 405s alike.
        .layer(middleware::from_fn_with_state(state.clone(), require_token));
    let ui = if state.ui.is_some() {
        crate::ui::router(&state)
    } else {
        Router::new()
    };
    Router::new()
        .route("/healthz", axum::routing::get(healthz))
        .route("/readyz", axum::routing::get(readyz))
        .route("/metrics", axum::routing::get(prometheus))
        .route("/api/v1/openapi.json", axum::routing::get(openapi))
        .nest("/api", api)
        .merge(ui)
        .fallback(not_found)
        .layer(middleware::from_fn(crate::ui::security_headers))
        .with_state(state)
}
