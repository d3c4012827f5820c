//! The HTTP Events API mode, for workspaces that disallow Socket Mode: Slack POSTs events to
//! `/slack/events` (JSON) and interactions to `/slack/interactive` (form-encoded `payload`). Every
//! request's v0 signature is checked against the signing secret before anything else (401 otherwise);
//! `url_verification` is answered with its challenge; an event is answered 200 once it is recorded in
//! the inbox (within Slack's 3 s), so a crash before that leaves it to Slack's retry — the same rules as
//! Socket Mode decide what it means. An event not recorded in time (the database is down) is answered
//! 503 and Slack retries it; the bridge keeps the copy it has and deduplicates the retry.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::events::{self, Access, Decision};
use super::signature;
use crate::channel::Arrival;
use crate::log_budget::Repeats;

/// How long a request waits for its event to be recorded before answering: inside Slack's 3 s.
const RECORD_WAIT: std::time::Duration = std::time::Duration::from_millis(2500);

struct Shared {
    secret: Vec<u8>,
    me: String,
    access: Access,
    sink: mpsc::Sender<Arrival>,
}

fn verified(
    shared: &Shared,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), signature::SignatureError> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let now = crate::store::now_ms() / 1000;
    signature::verify(
        &shared.secret,
        header("x-slack-request-timestamp"),
        body,
        header("x-slack-signature"),
        now,
    )
}

fn refuse(e: signature::SignatureError) -> Response {
    tracing::warn!(error = %e, "Slack request refused");
    (StatusCode::UNAUTHORIZED, e.to_string()).into_response()
}

/// Hands an envelope on; whether it was recorded within [`RECORD_WAIT`] (true when there was nothing
/// to record).
async fn hand_on(shared: &Shared, envelope: &Value) -> bool {
    let m = match events::decide(envelope, &shared.me, &shared.access) {
        Decision::Inbound(m) => m,
        Decision::Refused(why) => {
            crate::metrics::access_refused("slack");
            tracing::debug!(why, "Slack request refused by the access rules");
            return true;
        }
        _ => return true,
    };
    let (arrival, recorded) = Arrival::acknowledged(m);
    if shared.sink.send(arrival).await.is_err() {
        return false;
    }
    matches!(
        tokio::time::timeout(RECORD_WAIT, recorded).await,
        Ok(Ok(()))
    )
}

async fn on_event(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(e) = verified(&shared, &headers, &body) {
        return refuse(e);
    }
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "the body is not JSON").into_response();
    };
    match payload.get("type").and_then(Value::as_str) {
        Some("url_verification") => {
            axum::Json(json!({"challenge": payload["challenge"]})).into_response()
        }
        Some("event_callback") => {
            if hand_on(&shared, &json!({"type": "events_api", "payload": payload})).await {
                StatusCode::OK.into_response()
            } else {
                // Once per event while the database is away: kept to a line every few seconds.
                static NOT_RECORDED: Repeats = Repeats::new();
                if let Some(left_out) = NOT_RECORDED.due(std::time::Instant::now()) {
                    tracing::warn!(
                        left_out,
                        "a Slack event was not recorded in time; answering 503 so Slack retries it"
                    );
                }
                StatusCode::SERVICE_UNAVAILABLE.into_response()
            }
        }
        _ => StatusCode::OK.into_response(),
    }
}

async fn on_interactive(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(e) = verified(&shared, &headers, &body) {
        return refuse(e);
    }
    let form: Vec<(String, String)> = serde_urlencoded::from_bytes(&body).unwrap_or_default();
    let Some(payload) = form
        .iter()
        .find(|(k, _)| k == "payload")
        .and_then(|(_, v)| serde_json::from_str::<Value>(v).ok())
    else {
        return (StatusCode::BAD_REQUEST, "no payload").into_response();
    };
    let id = payload.get("trigger_id").cloned().unwrap_or(Value::Null);
    // Slack does not retry interactions: a click not recorded in time is still held and taken once
    // the database answers, so it is answered 200 either way.
    if !hand_on(
        &shared,
        &json!({"type": "interactive", "envelope_id": id, "payload": payload}),
    )
    .await
    {
        tracing::warn!(
            "a Slack interaction was not recorded within 2.5 s; it is held until the database answers"
        );
    }
    StatusCode::OK.into_response()
}

/// Serves the Events API on `listen` until `stop`; returns the bound address once listening.
///
/// # Errors
/// When the address cannot be bound.
pub async fn serve(
    listen: SocketAddr,
    signing_secret: &str,
    me: String,
    access: Access,
    sink: mpsc::Sender<Arrival>,
    stop: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let shared = Arc::new(Shared {
        secret: signing_secret.as_bytes().to_vec(),
        me,
        access,
        sink,
    });
    let app = Router::new()
        .route("/slack/events", axum::routing::post(on_event))
        .route("/slack/interactive", axum::routing::post(on_interactive))
        .with_state(shared);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
    });
    tracing::info!(%addr, "Slack Events API listening on /slack/events and /slack/interactive");
    Ok((addr, task))
}
