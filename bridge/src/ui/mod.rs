//! The read-only history pages under `/ui/` (issue 19): the conversation list, one conversation's
//! timeline, one tool call's full output, what is running now (live, server-sent events) and an
//! overview with server-rendered SVG. Server-rendered HTML (maud), one small stylesheet and a few
//! lines of script, all built into the binary.
//!
//! Off unless `http.ui = true`. Sign-in: the API token posted to `/ui/login` sets a signed,
//! expiring session cookie (`HttpOnly`, `SameSite=Strict`, `Secure` behind TLS); or a trusted
//! proxy's header (`http.ui_auth_header`), honoured only when configured. Every response carries a
//! strict Content-Security-Policy (set for the whole listener in [`crate::http`]); every piece of
//! user text is redacted (R7) and escaped.
//!
//! # Layout
//! - [`ansi`]: terminal output → inert HTML (colours kept, cursor moves and controls defused).
//! - [`limit`]: wrong tokens on `/ui/login` limited per client address.
//! - [`oidc`]: single sign-on (OpenID Connect, PKCE), discovery and keys cached.
//! - [`render`]: the pages as pure functions (what the benchmark measures).
//! - [`session`]: the signed session cookie.

pub mod ansi;
pub mod limit;
pub mod oidc;
pub mod render;
pub mod session;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Form, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use maud::Markup;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use self::render::{Chrome, ListQuery, Listing};
use self::session::Sessions;
use crate::core::redact::Redactor;
use crate::http::HttpState;
use crate::store::history::{self, Filter, HistoryError};
use crate::store::{permissions, tool_calls, turns};

/// The Content-Security-Policy of every response: nothing inline, nothing from elsewhere.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const CSS: &str = include_str!("assets/ui.css");
const JS: &str = include_str!("assets/ui.js");

/// The UI's settings and what its pages share.
pub struct Ui {
    redactor: Redactor,
    sessions: Sessions,
    login_token: Option<SecretString>,
    login_limit: Arc<limit::LoginLimit>,
    oidc: Option<oidc::Oidc>,
    auth_header: Option<HeaderName>,
    client_ip_header: Option<HeaderName>,
    base_url: Option<String>,
    live_every: Duration,
    keep_alive: Duration,
    stop: CancellationToken,
    streams: Arc<std::sync::atomic::AtomicUsize>,
    max_streams: usize,
}

impl std::fmt::Debug for Ui {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ui")
            .field("token_login", &self.login_token.is_some())
            .field("oidc", &self.oidc)
            .field("auth_header", &self.auth_header)
            .field("live_every", &self.live_every)
            .finish_non_exhaustive()
    }
}

impl Ui {
    /// The wrong-token limit and the client-address header, which the API shares: a wrong bearer
    /// token on `/api/v1` counts against the same address as a wrong one on `/ui/login`.
    pub(crate) fn login_limit(&self) -> (Arc<limit::LoginLimit>, Option<HeaderName>) {
        (self.login_limit.clone(), self.client_ip_header.clone())
    }

    /// The UI over `http` settings: `login_token` is the API token (sign-in on `/ui/login`),
    /// `redactor` R7's; the live view ends its streams when `stop` is cancelled.
    ///
    /// # Errors
    /// `http.ui_auth_header` that is not a header name (the configuration check refuses it first).
    pub fn new(
        http: &crate::config::Http,
        redactor: Redactor,
        stop: CancellationToken,
    ) -> anyhow::Result<Self> {
        let auth_header = http
            .ui_auth_header
            .as_deref()
            .map(|h| HeaderName::from_bytes(h.trim().as_bytes()))
            .transpose()
            .map_err(|_| anyhow::anyhow!("http.ui_auth_header is not a header name"))?;
        let client_ip_header = http
            .ui_client_ip_header
            .as_deref()
            .map(|h| HeaderName::from_bytes(h.trim().as_bytes()))
            .transpose()
            .map_err(|_| anyhow::anyhow!("http.ui_client_ip_header is not a header name"))?;
        let ttl_ms = i64::try_from(http.ui_session_minutes.max(1).saturating_mul(60_000))
            .unwrap_or(i64::MAX);
        let oidc = http
            .ui_oidc
            .as_ref()
            .map(|o| {
                oidc::Oidc::new(
                    o,
                    http.ui_oidc_client_secret.as_ref(),
                    http.ui_url.as_deref(),
                )
            })
            .transpose()?;
        // The key comes from the API token, else from the OIDC client secret: either way every
        // replica derives the same one.
        let key_from = http.api_token.as_ref().or(if oidc.is_some() {
            http.ui_oidc_client_secret.as_ref()
        } else {
            None
        });
        Ok(Self {
            redactor,
            sessions: Sessions::new(key_from, ttl_ms),
            login_token: http.api_token.clone(),
            login_limit: Arc::new(limit::LoginLimit::new(
                http.ui_login_attempts,
                http.ui_login_window,
            )),
            oidc,
            auth_header,
            client_ip_header,
            base_url: http
                .ui_url
                .as_ref()
                .map(|u| u.trim_end_matches('/').to_owned()),
            live_every: Duration::from_secs(1),
            keep_alive: Duration::from_secs(15),
            stop,
            streams: Arc::default(),
            max_streams: MAX_STREAMS,
        })
    }

    /// The least time between two updates of the live view (default 1 s; tests make it short).
    #[must_use]
    pub fn with_live_every(mut self, every: Duration) -> Self {
        self.live_every = every;
        self
    }

    /// How often the live view's stream sends a keep-alive comment while nothing changes (default
    /// 15 s, under the idle timeouts of common proxies).
    #[must_use]
    pub fn with_keep_alive(mut self, every: Duration) -> Self {
        self.keep_alive = every;
        self
    }

    /// At most `n` live streams at once on this replica (default 100); beyond, 503.
    #[must_use]
    pub fn with_max_streams(mut self, n: usize) -> Self {
        self.max_streams = n;
        self
    }

    /// Where a tool call's page is, for chat's "full output" pointer.
    #[must_use]
    pub fn tool_call_url(base: Option<&str>, id: &str) -> String {
        format!("{}/ui/tool-calls/{}", base.unwrap_or(""), render::seg(id))
    }
}

/// Who is looking (set by [`require_viewer`]).
#[derive(Debug, Clone)]
struct Viewer(String);

/// The cookie session a request was signed in with (`None`: by the trusted proxy's header).
#[derive(Debug, Clone)]
struct SignedIn(Option<session::Session>);

/// A place among the live streams this replica serves; given back when the stream ends.
struct StreamSlot(Arc<std::sync::atomic::AtomicUsize>);

impl StreamSlot {
    fn take(count: &Arc<std::sync::atomic::AtomicUsize>, max: usize) -> Option<Self> {
        use std::sync::atomic::Ordering;
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Self(count.clone()))
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// At most this many live streams per replica by default (`Ui::with_max_streams`).
const MAX_STREAMS: usize = 100;

fn ui(state: &HttpState) -> &Ui {
    // The UI routes exist only when the state has a UI; `router` checks.
    state
        .ui()
        .expect("the UI routes are mounted only with a UI")
}

/// An HTML page with the headers every UI page has.
fn page(status: StatusCode, m: Markup) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        m.into_string(),
    )
        .into_response()
}

fn error_page(state: &HttpState, viewer: &Viewer, status: StatusCode, msg: &str) -> Response {
    let chrome = Chrome {
        who: &viewer.0,
        now: state.now_ms(),
    };
    page(status, render::list_error(chrome, msg))
}

fn store_failed(state: &HttpState, viewer: &Viewer, e: &dyn std::fmt::Display) -> Response {
    tracing::error!(error = %e, "history pages: store failure");
    error_page(
        state,
        viewer,
        StatusCode::SERVICE_UNAVAILABLE,
        "The store is not answering; try again.",
    )
}

/// Whether the request came over TLS (directly or through a proxy that says so).
fn over_tls(ui: &Ui, headers: &HeaderMap) -> bool {
    ui.base_url
        .as_deref()
        .is_some_and(|u| u.starts_with("https://"))
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|p| p.eq_ignore_ascii_case("https"))
}

/// In front of every page but the sign-in form and the assets: a trusted proxy's header (when
/// configured) or a valid session cookie; otherwise the sign-in form (or 401 for the event stream).
async fn require_viewer(
    State(state): State<HttpState>,
    mut request: Request,
    next: Next,
) -> Response {
    let ui = ui(&state);
    let headers = request.headers();
    let by_proxy = ui
        .auth_header
        .as_ref()
        .and_then(|h| headers.get(h))
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned);
    // Signed in with a cookie: its session (a live stream ends with it).
    let mut signed_in = None;
    let who = by_proxy.or_else(|| {
        let c = session::cookie(headers)?;
        let now = state.now_ms();
        let who = ui.sessions.viewer(c, now)?;
        signed_in = ui.sessions.session(c, now);
        Some(who)
    });
    match who {
        Some(who) => {
            request.extensions_mut().insert(Viewer(who));
            request.extensions_mut().insert(SignedIn(signed_in));
            next.run(request).await
        }
        None if request.uri().path().ends_with("/events") => {
            (StatusCode::UNAUTHORIZED, "sign in at /ui/login").into_response()
        }
        None => {
            // Back to where they were going once signed in (a page, not a form post).
            let wanted = request
                .uri()
                .path_and_query()
                .map_or("/ui/", axum::http::uri::PathAndQuery::as_str);
            match (request.method() == axum::http::Method::GET)
                .then(|| safe_next(wanted))
                .flatten()
            {
                Some(n) if n != "/ui/" => {
                    Redirect::to(&format!("/ui/login?next={}", render::seg(n))).into_response()
                }
                _ => Redirect::to("/ui/login").into_response(),
            }
        }
    }
}

/// Where to go after signing in: a path under `/ui/` on this site only — never an absolute URL,
/// `//host`, a backslash (browsers read it as `/`), a `..` segment or a control character.
fn safe_next(next: &str) -> Option<&str> {
    let ok = next.starts_with("/ui/")
        && next.len() <= 2048
        && !next.contains('\\')
        && !next.contains("//")
        && !next
            .split(['/', '?', '#'])
            .any(|part| part == ".." || part == ".")
        && !next.to_ascii_lowercase().contains("%2e")
        && !next.to_ascii_lowercase().contains("%5c")
        && next.bytes().all(|b| b.is_ascii_graphic())
        && !next.starts_with("/ui/login")
        && !next.starts_with("/ui/logout")
        && !next.starts_with("/ui/oidc/");
    ok.then_some(next)
}

#[derive(Debug, Default, Deserialize)]
struct NextQuery {
    #[serde(default)]
    next: String,
}

async fn login_form(
    State(state): State<HttpState>,
    q: Result<Query<NextQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let next = q.as_ref().ok().and_then(|Query(q)| safe_next(&q.next));
    page(
        StatusCode::OK,
        render::login(
            None,
            ui(&state).login_token.is_some(),
            ui(&state).oidc.is_some(),
            next,
        ),
    )
}

#[derive(Debug, Default, Deserialize)]
struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    next: String,
}

/// The client's address (see [`limit::client_ip`]) under `http.ui_client_ip_header`.
fn client_ip(
    ui: &Ui,
    headers: &HeaderMap,
    peer: Option<&axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
) -> std::net::IpAddr {
    limit::client_ip(ui.client_ip_header.as_ref(), headers, peer.map(|p| p.0.0))
}

async fn login(
    State(state): State<HttpState>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let ui = ui(&state);
    let form = form.map(|Form(f)| f).unwrap_or_default();
    let next = safe_next(&form.next);
    let Some(expected) = &ui.login_token else {
        return page(
            StatusCode::FORBIDDEN,
            render::login(
                Some("Signing in with a token is off."),
                false,
                ui.oidc.is_some(),
                next,
            ),
        );
    };
    let ip = client_ip(ui, &headers, peer.as_ref());
    let now = state.now_ms();
    if let limit::Verdict::Refused {
        retry_after_s,
        first,
    } = ui.login_limit.check(ip, now)
    {
        let client = limit::client_key(ip);
        if first {
            tracing::warn!(%client, retry_after_s, "UI sign-in refused: too many wrong tokens from this address");
        } else {
            tracing::debug!(%client, retry_after_s, "UI sign-in refused: too many wrong tokens from this address");
        }
        let minutes = retry_after_s.div_ceil(60);
        let msg = format!(
            "Too many wrong tokens from your address; try again in {minutes} minute{}.",
            if minutes == 1 { "" } else { "s" }
        );
        let mut r = page(
            StatusCode::TOO_MANY_REQUESTS,
            render::login(Some(&msg), true, ui.oidc.is_some(), next),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
        return r;
    }
    let given = form.token;
    if !shell_agent::auth::tokens_match(given.trim(), expected.expose_secret())
        || given.trim().is_empty()
    {
        ui.login_limit.failed(ip, now);
        tracing::warn!(client = %limit::client_key(ip), "UI sign-in refused: wrong token");
        return page(
            StatusCode::UNAUTHORIZED,
            render::login(Some("Wrong token."), true, ui.oidc.is_some(), next),
        );
    }
    ui.login_limit.succeeded(ip);
    let value = ui.sessions.issue(now);
    let cookie = session::set_cookie(&value, ui.sessions.ttl_ms() / 1000, over_tls(ui, &headers));
    tracing::info!("UI sign-in with the API token");
    let mut r = Redirect::to(next.unwrap_or("/ui/")).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

async fn logout(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    // Void the session here too (and end its live streams), not only in this browser.
    if let Some(c) = session::cookie(&headers) {
        ui(&state).sessions.sign_out(c, state.now_ms());
    }
    let mut r = Redirect::to("/ui/login").into_response();
    if let Ok(v) = HeaderValue::from_str(&session::clear_cookie(over_tls(ui(&state), &headers))) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

fn with_cookies(mut r: Response, cookies: &[String]) -> Response {
    for c in cookies {
        if let Ok(v) = HeaderValue::from_str(c) {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    r
}

/// The cookie of a sign-in in progress: `SameSite=Lax`, as the provider's redirect back is a
/// cross-site navigation that a `Strict` cookie would not ride on.
fn pending_cookie(value: &str, max_age_s: i64, secure: bool) -> String {
    format!(
        "{}={value}; Path=/ui/oidc; Max-Age={max_age_s}; HttpOnly; SameSite=Lax{}",
        oidc::PENDING_COOKIE,
        if secure { "; Secure" } else { "" }
    )
}

fn sso_refused(ui: &Ui, headers: &HeaderMap, status: StatusCode, msg: &str) -> Response {
    with_cookies(
        page(
            status,
            render::login(Some(msg), ui.login_token.is_some(), ui.oidc.is_some(), None),
        ),
        &[pending_cookie("", 0, over_tls(ui, headers))],
    )
}

/// `/ui/oidc/start`: to the provider, with a fresh state, nonce and PKCE challenge.
async fn oidc_start(
    State(state): State<HttpState>,
    headers: HeaderMap,
    q: Result<Query<NextQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let ui = ui(&state);
    let next = q.as_ref().ok().and_then(|Query(q)| safe_next(&q.next));
    let Some(client) = &ui.oidc else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let d = match client.discover().await {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = %e, "UI single sign-on: discovery failed");
            return sso_refused(
                ui,
                &headers,
                StatusCode::BAD_GATEWAY,
                "The identity provider is not answering; try again.",
            );
        }
    };
    let pending = oidc::Pending::new();
    let exp = state.now_ms().saturating_add(oidc::PENDING_TTL_MS);
    // Where to go afterwards rides along, signed, hex-encoded (no dots).
    let value = ui.sessions.seal(&format!(
        "{exp}.{}.{}",
        pending.encode(),
        hex::encode(next.unwrap_or("/ui/"))
    ));
    with_cookies(
        Redirect::to(&client.authorize_url(&d, &pending)).into_response(),
        &[pending_cookie(
            &value,
            oidc::PENDING_TTL_MS / 1000,
            over_tls(ui, &headers),
        )],
    )
}

#[derive(Debug, Deserialize)]
struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

fn pending_from(ui: &Ui, headers: &HeaderMap, now: i64) -> Option<(oidc::Pending, String)> {
    let value = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == oidc::PENDING_COOKIE).then_some(v)
        })?;
    let payload = ui.sessions.open(value)?;
    let (exp, rest) = payload.split_once('.')?;
    (exp.parse::<i64>().ok()? > now).then_some(())?;
    let (rest, next) = rest.rsplit_once('.')?;
    let next = String::from_utf8(hex::decode(next).ok()?).ok()?;
    let next = safe_next(&next).unwrap_or("/ui/").to_owned();
    Some((oidc::Pending::decode(rest)?, next))
}

/// `/ui/oidc/callback`: state checked, code redeemed, ID token verified, allow rules applied.
async fn oidc_callback(
    State(state): State<HttpState>,
    headers: HeaderMap,
    q: Result<Query<Callback>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let ui = ui(&state);
    let Some(client) = &ui.oidc else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let refused = |status, msg: &str| sso_refused(ui, &headers, status, msg);
    let Ok(Query(q)) = q else {
        return refused(
            StatusCode::BAD_REQUEST,
            "That sign-in answer does not parse.",
        );
    };
    if let Some(e) = q.error {
        // The provider's error code, kept to its alphabet: the query is anyone's to write.
        let code: String = e
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(64)
            .collect();
        tracing::warn!(error = %code, "UI single sign-on: the provider refused");
        return refused(
            StatusCode::UNAUTHORIZED,
            "The identity provider refused the sign-in.",
        );
    }
    let now = state.now_ms();
    let Some((pending, next)) = pending_from(ui, &headers, now) else {
        tracing::warn!(
            "UI single sign-on refused: no valid sign-in in progress (cookie missing, forged or expired)"
        );
        return refused(
            StatusCode::BAD_REQUEST,
            "This sign-in was not started here or took too long; sign in again.",
        );
    };
    let given = q.state.unwrap_or_default();
    if !shell_agent::auth::tokens_match(&given, &pending.state) {
        tracing::warn!("UI single sign-on refused: state does not match");
        return refused(
            StatusCode::BAD_REQUEST,
            "This sign-in was not started here or took too long; sign in again.",
        );
    }
    let Some(code) = q.code.filter(|c| !c.is_empty()) else {
        return refused(StatusCode::BAD_REQUEST, "The sign-in answer has no code.");
    };
    let who = match client.finish(&code, &pending, now.div_euclid(1000)).await {
        Ok(who) => who,
        Err(e) => {
            tracing::warn!(error = %e, "UI single sign-on refused");
            let status = match e {
                oidc::OidcError::Provider(_) => StatusCode::BAD_GATEWAY,
                _ => StatusCode::UNAUTHORIZED,
            };
            return refused(
                status,
                "Single sign-on failed; try again or ask whoever runs the bridge.",
            );
        }
    };
    if !client.allows(&who) {
        tracing::warn!(who = %who.display(), "UI single sign-on refused: no allow rule names this person");
        return refused(
            StatusCode::FORBIDDEN,
            "You signed in, but this bridge does not let that account in.",
        );
    }
    tracing::info!(who = %who.display(), "UI sign-in with single sign-on");
    let secure = over_tls(ui, &headers);
    let value = ui.sessions.issue_as(now, &who.display());
    // A page, not a redirect: the SameSite=Strict session cookie is not sent on a redirect chain
    // that began at the provider, so the next request must start here.
    with_cookies(
        page(StatusCode::OK, render::signed_in(&next)),
        &[
            session::set_cookie(&value, ui.sessions.ttl_ms() / 1000, secure),
            pending_cookie("", 0, secure),
        ],
    )
}

async fn css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        CSS,
    )
        .into_response()
}

async fn js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        JS,
    )
        .into_response()
}

fn some(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

async fn list(
    State(state): State<HttpState>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let ui = ui(&state);
    let chrome = Chrome {
        who: &viewer.0,
        now: state.now_ms(),
    };
    let Ok(Query(q)) = q else {
        return error_page(
            &state,
            &viewer,
            StatusCode::BAD_REQUEST,
            "Those filters do not parse.",
        );
    };
    let mut error = None;
    let mut time = |s: &str, what: &str| match some(s) {
        None => None,
        Some(s) => render::parse_time(&s).or_else(|| {
            error = Some(format!(
                "{what} is not a time (use the picker, or unix ms); ignored."
            ));
            None
        }),
    };
    let since = time(&q.since, "From");
    let until = time(&q.until, "Until");
    let limit = match some(&q.limit).map(|l| l.parse::<i64>()) {
        None => 50,
        Some(Ok(l)) if (1..=500).contains(&l) => l,
        Some(_) => {
            error = Some("The page size must be between 1 and 500; showing 50.".into());
            50
        }
    };
    let mut c = match state.store().read_conn().await {
        Ok(c) => c,
        Err(e) => return store_failed(&state, &viewer, &e),
    };
    if let Some(text) = some(&q.q) {
        return match history::search(&mut c, &text, limit).await {
            Ok(hits) => page(
                StatusCode::OK,
                render::list(
                    &ui.redactor,
                    chrome,
                    &q,
                    &Listing::Hits(&hits),
                    error.as_deref(),
                ),
            ),
            Err(e) => store_failed(&state, &viewer, &e),
        };
    }
    let filter = Filter {
        platform: some(&q.platform),
        project: some(&q.project),
        channel: some(&q.channel),
        user: some(&q.user),
        since,
        until,
        status: some(&q.status),
        cursor: some(&q.cursor),
        limit: Some(limit),
    };
    match history::list(&mut c, &filter).await {
        Ok(p) => page(
            StatusCode::OK,
            render::list(
                &ui.redactor,
                chrome,
                &q,
                &Listing::Page(&p),
                error.as_deref(),
            ),
        ),
        Err(HistoryError::BadCursor(_)) => error_page(
            &state,
            &viewer,
            StatusCode::BAD_REQUEST,
            "That page link is not valid (a cursor this bridge did not issue).",
        ),
        Err(HistoryError::Store(e)) => store_failed(&state, &viewer, &e),
    }
}

async fn conversation(
    State(state): State<HttpState>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Response {
    let Ok(Path(id)) = id else {
        return error_page(
            &state,
            &viewer,
            StatusCode::BAD_REQUEST,
            "That address does not decode.",
        );
    };
    let mut c = match state.store().read_conn().await {
        Ok(c) => c,
        Err(e) => return store_failed(&state, &viewer, &e),
    };
    let detail = match history::detail(&mut c, &id).await {
        Ok(Some(d)) => d,
        Ok(None) => {
            return error_page(
                &state,
                &viewer,
                StatusCode::NOT_FOUND,
                "No such conversation.",
            );
        }
        Err(e) => return store_failed(&state, &viewer, &e),
    };
    let approvals = match permissions::of_conversation(&mut c, &id).await {
        Ok(a) => a,
        Err(e) => return store_failed(&state, &viewer, &e),
    };
    let chrome = Chrome {
        who: &viewer.0,
        now: state.now_ms(),
    };
    page(
        StatusCode::OK,
        render::conversation(&ui(&state).redactor, chrome, &detail, &approvals),
    )
}

async fn load_call(
    state: &HttpState,
    viewer: &Viewer,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<tool_calls::ToolCall, Response> {
    let Ok(Path(id)) = id else {
        return Err(error_page(
            state,
            viewer,
            StatusCode::BAD_REQUEST,
            "That address does not decode.",
        ));
    };
    let mut c = state
        .store()
        .read_conn()
        .await
        .map_err(|e| store_failed(state, viewer, &e))?;
    match tool_calls::get(&mut c, &id).await {
        Ok(Some(call)) => Ok(call),
        Ok(None) => Err(error_page(
            state,
            viewer,
            StatusCode::NOT_FOUND,
            "No such tool call.",
        )),
        Err(e) => Err(store_failed(state, viewer, &e)),
    }
}

async fn tool_call(
    State(state): State<HttpState>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Response {
    match load_call(&state, &viewer, id).await {
        Ok(call) => {
            let chrome = Chrome {
                who: &viewer.0,
                now: state.now_ms(),
            };
            page(
                StatusCode::OK,
                render::tool_call(&ui(&state).redactor, chrome, &call),
            )
        }
        Err(r) => r,
    }
}

/// The full output as a text file (redacted like the page; colours kept as escape codes).
async fn tool_output(
    State(state): State<HttpState>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Response {
    match load_call(&state, &viewer, id).await {
        Ok(call) => {
            let text = ui(&state)
                .redactor
                .redact(call.output.as_deref().unwrap_or(""));
            let name = format!("tool-call-{}.txt", render::seg(&call.id));
            (
                [
                    (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()),
                    (
                        header::CONTENT_DISPOSITION,
                        format!("attachment; filename=\"{name}\""),
                    ),
                    (header::CACHE_CONTROL, "no-store".to_owned()),
                ],
                text,
            )
                .into_response()
        }
        Err(r) => r,
    }
}

fn standby(state: &HttpState) -> bool {
    state.status().role() == crate::replica::Role::Standby
}

/// `/ui/running`: this replica's open turns, from its memory (no store query).
async fn running(
    State(state): State<HttpState>,
    axum::Extension(viewer): axum::Extension<Viewer>,
) -> Response {
    let live = state.status().live().snapshot();
    let chrome = Chrome {
        who: &viewer.0,
        now: state.now_ms(),
    };
    page(
        StatusCode::OK,
        render::running(&ui(&state).redactor, chrome, &live, standby(&state)),
    )
}

/// `/ui/running/events`: the live part of the page as server-sent events — one at once, then one
/// each time the open turns change (changes closer together than `live_every` are pushed together),
/// a keep-alive comment while nothing changes — until the client goes or the bridge stops.
async fn running_events(
    State(state): State<HttpState>,
    axum::Extension(SignedIn(signed_in)): axum::Extension<SignedIn>,
) -> Response {
    let (stop, every, keep_alive, slot) = {
        let ui = ui(&state);
        let Some(slot) = StreamSlot::take(&ui.streams, ui.max_streams) else {
            tracing::warn!(
                max = ui.max_streams,
                "UI live view refused: too many streams open"
            );
            let mut r = (
                StatusCode::SERVICE_UNAVAILABLE,
                "too many live views open on this replica; try again",
            )
                .into_response();
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("30"));
            return r;
        };
        (ui.stop.clone(), ui.live_every, ui.keep_alive, slot)
    };
    let mut changes = state.status().live().subscribe();
    changes.mark_changed();
    // The stream ends with the session it was opened with: when it expires or is signed out.
    let stream = futures_util::stream::unfold(
        (state, stop, changes, true, slot, signed_in),
        move |(state, stop, mut changes, first, slot, signed_in)| async move {
            let gone = |state: &HttpState| {
                signed_in.as_ref().is_some_and(|s| {
                    state.now_ms() >= s.expires_at || ui(state).sessions.signed_out(s)
                })
            };
            if !first {
                tokio::select! {
                    () = stop.cancelled() => return None,
                    () = tokio::time::sleep(every) => {}
                }
            }
            let mut sign_outs = ui(&state).sessions.sign_outs();
            let ends = signed_in.as_ref().map(|s| {
                let left = u64::try_from(s.expires_at - state.now_ms()).unwrap_or(0);
                tokio::time::Instant::now() + Duration::from_millis(left)
            });
            loop {
                if gone(&state) {
                    return None;
                }
                tokio::select! {
                    () = stop.cancelled() => return None,
                    () = async {
                        match ends {
                            Some(at) => tokio::time::sleep_until(at).await,
                            None => std::future::pending().await,
                        }
                    } => return None,
                    changed = sign_outs.changed() => {
                        changed.ok()?;
                    }
                    changed = changes.changed() => {
                        changed.ok()?;
                        break;
                    }
                }
            }
            let live = state.status().live().snapshot();
            let html = render::running_fragment(
                &ui(&state).redactor,
                state.now_ms(),
                &live,
                standby(&state),
            )
            .into_string();
            let event = Event::default()
                .event("running")
                .id(live.version.to_string())
                .data(html);
            Some((
                Ok::<_, Infallible>(event),
                (state, stop, changes, false, slot, signed_in),
            ))
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(keep_alive))
        .into_response()
}

#[derive(Debug, Deserialize)]
struct OverviewQuery {
    days: Option<i64>,
}

async fn overview(
    State(state): State<HttpState>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    q: Result<Query<OverviewQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let days = q
        .ok()
        .and_then(|Query(q)| q.days)
        .unwrap_or(14)
        .clamp(1, 90);
    let now = state.now_ms();
    let today = now.div_euclid(86_400_000);
    let first = today - days + 1;
    let since = first * 86_400_000;
    let figures = async {
        let mut c = state.store().read_conn().await?;
        let calls = tool_calls::timings_since(&mut c, since).await?;
        let endings = turns::endings_since(&mut c, since).await?;
        let dead_outbox = crate::store::outbox::stats(&mut c, now).await?.dead;
        let dead_inbound = crate::store::inbound::dead_count(&mut c).await?;
        Ok::<_, crate::store::StoreError>(render::Overview {
            days: render::Overview::build(first, today, &calls, &endings),
            dead_outbox,
            dead_inbound,
        })
    };
    match figures.await {
        Ok(o) => page(
            StatusCode::OK,
            render::overview(
                Chrome {
                    who: &viewer.0,
                    now,
                },
                &o,
            ),
        ),
        Err(e) => store_failed(&state, &viewer, &e),
    }
}

/// The UI's routes (mounted by [`crate::http::router`] when the state has a UI).
pub fn router(state: &HttpState) -> Router<HttpState> {
    let pages = Router::new()
        .route("/ui/", axum::routing::get(list))
        .route("/ui/conversations/{id}", axum::routing::get(conversation))
        .route("/ui/tool-calls/{id}", axum::routing::get(tool_call))
        .route(
            "/ui/tool-calls/{id}/output.txt",
            axum::routing::get(tool_output),
        )
        .route("/ui/running", axum::routing::get(running))
        .route("/ui/running/events", axum::routing::get(running_events))
        .route("/ui/overview", axum::routing::get(overview))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_viewer,
        ));
    Router::new()
        .route(
            "/ui",
            axum::routing::get(|| async { Redirect::permanent("/ui/") }),
        )
        .route("/ui/login", axum::routing::get(login_form).post(login))
        .route("/ui/logout", axum::routing::post(logout))
        .route("/ui/oidc/start", axum::routing::get(oidc_start))
        .route(oidc::CALLBACK_PATH, axum::routing::get(oidc_callback))
        .route("/ui/assets/ui.css", axum::routing::get(css))
        .route("/ui/assets/ui.js", axum::routing::get(js))
        .merge(pages)
}

/// Sets the security headers on every response of the listener: the strict CSP, no sniffing, no
/// framing, no referrer.
pub async fn security_headers(request: Request, next: Next) -> Response {
    let mut r = next.run(request).await;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}
