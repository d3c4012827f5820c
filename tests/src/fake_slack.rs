//! A fake Slack Web API: a real HTTP server on loopback that records every call (method, token, JSON
//! body) and answers like Slack — `{"ok":true,…}`, `{"ok":false,"error":…}`, or a 429 with
//! `Retry-After` — as the test scripts it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// One recorded call.
#[derive(Debug, Clone)]
pub struct ApiCall {
    /// `chat.postMessage`, …
    pub method: String,
    /// The `Authorization` header.
    pub auth: String,
    /// The JSON body.
    pub body: Value,
}

/// A scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// `{"ok": false, "error": code}`.
    Error(&'static str),
    /// HTTP 429 with `Retry-After: secs`.
    RateLimited(u64),
}

#[derive(Debug, Default)]
struct Inner {
    calls: Mutex<Vec<ApiCall>>,
    script: Mutex<HashMap<String, VecDeque<Reply>>>,
    next_ts: AtomicU64,
}

/// The running fake.
#[derive(Debug)]
pub struct FakeSlack {
    /// Base URL to give the bridge as `slack.api_base_url`.
    pub base_url: String,
    inner: Arc<Inner>,
    task: JoinHandle<()>,
}

async fn handle(
    State(inner): State<Arc<Inner>>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    inner.calls.lock().expect("lock").push(ApiCall {
        method: method.clone(),
        auth: auth.clone(),
        body: body.clone(),
    });
    if !auth.starts_with("Bearer xox") {
        return axum::Json(json!({"ok": false, "error": "not_authed"})).into_response();
    }
    let scripted = inner
        .script
        .lock()
        .expect("lock")
        .get_mut(&method)
        .and_then(VecDeque::pop_front);
    match scripted {
        Some(Reply::RateLimited(secs)) => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", secs.to_string())],
            "",
        )
            .into_response(),
        Some(Reply::Error(code)) => axum::Json(json!({"ok": false, "error": code})).into_response(),
        None => {
            let n = inner.next_ts.fetch_add(1, Ordering::SeqCst) + 1;
            let ts = format!("1700000000.{n:06}");
            let answer = match method.as_str() {
                "auth.test" => {
                    json!({"ok": true, "user_id": "UBOT", "bot_id": "BBOT", "team_id": "T1"})
                }
                "apps.connections.open" => json!({"ok": true, "url": "ws://127.0.0.1:1/socket"}),
                "chat.postMessage" => {
                    json!({"ok": true, "channel": body["channel"], "ts": ts, "message": {"ts": ts}})
                }
                "chat.update" => json!({"ok": true, "channel": body["channel"], "ts": body["ts"]}),
                _ => json!({"ok": true}),
            };
            axum::Json(answer).into_response()
        }
    }
}

impl FakeSlack {
    /// Starts the fake on a free loopback port.
    ///
    /// # Panics
    /// When loopback cannot be bound.
    pub async fn start() -> Self {
        let inner = Arc::new(Inner::default());
        let app = Router::new()
            .route("/api/{method}", axum::routing::post(handle))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            base_url: format!("http://{addr}/api"),
            inner,
            task,
        }
    }

    /// Makes the next call of `method` answer `reply`.
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    pub fn script(&self, method: &str, reply: Reply) {
        self.inner
            .script
            .lock()
            .expect("lock")
            .entry(method.to_owned())
            .or_default()
            .push_back(reply);
    }

    /// Every call so far.
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    #[must_use]
    pub fn calls(&self) -> Vec<ApiCall> {
        self.inner.calls.lock().expect("lock").clone()
    }
}

impl Drop for FakeSlack {
    fn drop(&mut self) {
        self.task.abort();
    }
}
