//! A fake Slack: the Web API as a real HTTP server on loopback that records every call (method,
//! token, JSON body) and answers like Slack — `{"ok":true,…}`, `{"ok":false,"error":…}`, or a 429 with
//! `Retry-After` — as the test scripts it; and Socket Mode as a real WebSocket server that says
//! `hello`, sends the envelopes the test pushes, records the bridge's acknowledgements, and can send
//! `disconnect`. Like Slack, an `events_api` envelope that was not acknowledged when its connection
//! ended is delivered again on the next one, with `retry_attempt` raised (three retries at most).

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
    /// Every message posted (its JSON body and `ts`), for `conversations.replies`.
    posted: Mutex<Vec<Value>>,
    script: Mutex<HashMap<String, VecDeque<Reply>>>,
    next_ts: AtomicU64,
    socket_url: Mutex<String>,
    envelopes: Mutex<VecDeque<Value>>,
    pushed: tokio::sync::Notify,
    acks: Mutex<Vec<String>>,
    redelivered: AtomicU64,
    sent: AtomicU64,
    sockets: std::sync::atomic::AtomicUsize,
    /// Downloads of `/files/…` started.
    file_gets: AtomicU64,
    /// The fake's own origin (`http://127.0.0.1:PORT`), where its upload URLs point.
    origin: Mutex<String>,
    /// What the upload URL answers (0: 200).
    upload_status: std::sync::atomic::AtomicU16,
    /// Uploads to the upload URL.
    uploads: AtomicU64,
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
    let form = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
    let body: Value = if form {
        serde_urlencoded::from_str::<Vec<(String, String)>>(&body)
            .map(|pairs| {
                Value::Object(
                    pairs
                        .into_iter()
                        .map(|(k, v)| (k, Value::String(v)))
                        .collect(),
                )
            })
            .unwrap_or(Value::Null)
    } else {
        serde_json::from_str(&body).unwrap_or(Value::Null)
    };
    inner.calls.lock().expect("lock").push(ApiCall {
        method: method.clone(),
        auth: auth.clone(),
        body: body.clone(),
    });
    if !(auth.starts_with("Bearer xox") || auth.starts_with("Bearer xapp-")) {
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
            let answer = match method.as_str() {
                "auth.test" => {
                    json!({"ok": true, "user_id": "UBOT", "bot_id": "BBOT", "team_id": "T1"})
                }
                "apps.connections.open" => {
                    json!({"ok": true, "url": inner.socket_url.lock().expect("lock").clone()})
                }
                "chat.postMessage" => {
                    let n = inner.next_ts.fetch_add(1, Ordering::SeqCst) + 1;
                    let ts = format!("1700000000.{n:06}");
                    let mut message = body.clone();
                    message["ts"] = json!(ts);
                    inner.posted.lock().expect("lock").push(message);
                    json!({"ok": true, "channel": body["channel"], "ts": ts, "message": {"ts": ts}})
                }
                "conversations.replies" => {
                    // The thread's replies as Slack returns them; metadata only when asked for.
                    let with_metadata = body["include_all_metadata"] == "true";
                    let messages: Vec<Value> = inner
                        .posted
                        .lock()
                        .expect("lock")
                        .iter()
                        .filter(|m| m["channel"] == body["channel"] && m["thread_ts"] == body["ts"])
                        .map(|m| {
                            let mut reply = json!({"type": "message", "ts": m["ts"], "thread_ts": m["thread_ts"], "text": m["text"], "bot_id": "BBOT"});
                            if with_metadata && !m["metadata"].is_null() {
                                reply["metadata"] = m["metadata"].clone();
                            }
                            reply
                        })
                        .collect();
                    json!({"ok": true, "messages": messages, "has_more": false})
                }
                "chat.update" => json!({"ok": true, "channel": body["channel"], "ts": body["ts"]}),
                "files.getUploadURLExternal" => {
                    let origin = inner.origin.lock().expect("lock").clone();
                    json!({"ok": true, "upload_url": format!("{origin}/upload/F1"), "file_id": "F1"})
                }
                _ => json!({"ok": true}),
            };
            axum::Json(answer).into_response()
        }
    }
}

/// A file on the fake's own host (a Slack file host to the bridge): `slow-…` drips 10 bytes every
/// 100 ms and never ends; any other name is `hello\n` at once.
async fn file(State(inner): State<Arc<Inner>>, Path(name): Path<String>) -> Response {
    inner.file_gets.fetch_add(1, Ordering::SeqCst);
    if !name.starts_with("slow-") {
        return ([("content-type", "text/plain")], "hello\n").into_response();
    }
    let drip = futures_util::stream::unfold((), |()| async {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        Some((
            Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b"0123456789")),
            (),
        ))
    });
    (
        [("content-type", "text/plain")],
        axum::body::Body::from_stream(drip),
    )
        .into_response()
}

/// The upload URL `files.getUploadURLExternal` hands out: answers what the test set.
async fn upload(State(inner): State<Arc<Inner>>) -> Response {
    inner.uploads.fetch_add(1, Ordering::SeqCst);
    match inner.upload_status.load(Ordering::SeqCst) {
        0 => "OK - 5".into_response(),
        code => StatusCode::from_u16(code)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            .into_response(),
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
            .route("/files/{name}", axum::routing::get(file))
            .route("/upload/{id}", axum::routing::post(upload))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        *inner.origin.lock().expect("lock") = format!("http://{addr}");
        let socket = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind socket mode");
        *inner.socket_url.lock().expect("lock") =
            format!("ws://{}/socket", socket.local_addr().expect("addr"));
        let sockets = inner.clone();
        let task = tokio::spawn(async move {
            tokio::spawn(socket_mode(socket, sockets));
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

    /// Makes the upload URL answer HTTP `status` from now on.
    pub fn upload_answers(&self, status: u16) {
        self.inner.upload_status.store(status, Ordering::SeqCst);
    }

    /// Uploads of bytes to the upload URL so far.
    #[must_use]
    pub fn uploads(&self) -> u64 {
        self.inner.uploads.load(Ordering::SeqCst)
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

async fn socket_mode(listener: tokio::net::TcpListener, inner: Arc<Inner>) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    while let Ok((tcp, _)) = listener.accept().await {
        let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
            continue;
        };
        inner.sockets.fetch_add(1, Ordering::SeqCst);
        let hello = json!({"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A1"}, "debug_info": {"host": "fake"}});
        if ws.send(Message::text(hello.to_string())).await.is_err() {
            continue;
        }
        // Events sent on this connection and not acknowledged yet.
        let mut unacked: Vec<Value> = Vec::new();
        loop {
            let next = inner.envelopes.lock().expect("lock").pop_front();
            if let Some(envelope) = next {
                let is_disconnect = envelope["type"] == "disconnect";
                if ws.send(Message::text(envelope.to_string())).await.is_err() {
                    inner.envelopes.lock().expect("lock").push_front(envelope);
                    break;
                }
                inner.sent.fetch_add(1, Ordering::SeqCst);
                if envelope["type"] == "events_api" {
                    unacked.push(envelope);
                }
                if is_disconnect {
                    let _ = ws.close(None).await;
                    break;
                }
                continue;
            }
            tokio::select! {
                () = inner.pushed.notified() => {}
                msg = ws.next() => match msg {
                    Some(Ok(Message::Text(t))) => {
                        if let Some(id) = serde_json::from_str::<Value>(&t).ok().and_then(|v| v["envelope_id"].as_str().map(str::to_owned)) {
                            unacked.retain(|e| e["envelope_id"] != id.as_str());
                            inner.acks.lock().expect("lock").push(id);
                        }
                    }
                    Some(Ok(_)) => {}
                    _ => break,
                },
            }
        }
        // Slack retries what was not acknowledged.
        let mut queue = inner.envelopes.lock().expect("lock");
        for mut envelope in unacked.into_iter().rev() {
            let attempt = envelope["retry_attempt"].as_u64().unwrap_or(0) + 1;
            if attempt > 3 {
                continue;
            }
            envelope["retry_attempt"] = attempt.into();
            envelope["retry_reason"] = "timeout".into();
            inner.redelivered.fetch_add(1, Ordering::SeqCst);
            queue.push_front(envelope);
        }
    }
}

impl FakeSlack {
    /// Sends an envelope on the Socket Mode connection (queued until one is open).
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    pub fn push(&self, envelope: Value) {
        self.inner
            .envelopes
            .lock()
            .expect("lock")
            .push_back(envelope);
        self.inner.pushed.notify_one();
    }

    /// Every message posted (the `chat.postMessage` body with its `ts`), in order.
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    #[must_use]
    pub fn posted(&self) -> Vec<Value> {
        self.inner.posted.lock().expect("lock").clone()
    }

    /// Envelope ids the bridge acknowledged.
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    #[must_use]
    pub fn acks(&self) -> Vec<String> {
        self.inner.acks.lock().expect("lock").clone()
    }

    /// Envelopes sent on Socket Mode connections so far (`hello` not counted).
    #[must_use]
    pub fn sent(&self) -> u64 {
        self.inner.sent.load(Ordering::SeqCst)
    }

    /// The address of a file `name` served by the fake (see [`file`]: `slow-…` never finishes).
    #[must_use]
    pub fn file_url(&self, name: &str) -> String {
        format!("{}/files/{name}", self.base_url.trim_end_matches("/api"))
    }

    /// Downloads of the fake's files started so far.
    #[must_use]
    pub fn file_gets(&self) -> u64 {
        self.inner.file_gets.load(Ordering::SeqCst)
    }

    /// Events delivered again because their connection ended before they were acknowledged.
    #[must_use]
    pub fn redelivered(&self) -> u64 {
        self.inner.redelivered.load(Ordering::SeqCst)
    }

    /// Socket Mode connections opened so far.
    #[must_use]
    pub fn sockets(&self) -> usize {
        self.inner.sockets.load(Ordering::SeqCst)
    }

    /// Calls of one method.
    #[must_use]
    pub fn calls_of(&self, method: &str) -> Vec<ApiCall> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .collect()
    }

    /// Waits until `pred` holds (30 s at most).
    ///
    /// # Panics
    /// When it does not.
    pub async fn wait_for(&self, what: &str, pred: impl Fn(&Self) -> bool) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        while !pred(self) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}: {:#?}",
                self.calls()
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// An `events_api` envelope carrying `event` with `event_id`.
#[must_use]
pub fn event_envelope(
    envelope_id: &str,
    event_id: &str,
    retry_attempt: u32,
    event: Value,
) -> Value {
    json!({"envelope_id": envelope_id, "type": "events_api", "accepts_response_payload": false,
           "retry_attempt": retry_attempt, "retry_reason": if retry_attempt > 0 { "timeout" } else { "" },
           "payload": {"type": "event_callback", "team_id": "T1", "api_app_id": "A1", "event_id": event_id, "event": event}})
}

impl Drop for FakeSlack {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs the bridge on `fake` (Socket Mode, SQLite in `dir`, the built-in shell agent) after `tweak`
/// adjusts the configuration. Everyone may use it (`access.open`) unless `tweak` sets allowlists.
/// Stop it with the returned token and await the task.
pub async fn run_bridge(
    fake: &FakeSlack,
    dir: &std::path::Path,
    tweak: impl FnOnce(&mut chat_bridge::config::Config),
) -> (
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    crate::init_tracing();
    let mut cfg =
        crate::bridge::config(&format!("sqlite://{}", dir.join("slack.db").display()), dir);
    cfg.slack_mut().bot_token = Some("xoxb-test".into());
    cfg.slack_mut().app_token = Some("xapp-1-test".into());
    cfg.slack_mut().api_base_url = fake.base_url.clone();
    // A1: these tests let everyone in on purpose (the access tests set allowlists in `tweak`).
    cfg.access.open = true;
    tweak(&mut cfg);
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { chat_bridge::startup::run(&cfg, stop).await }
    });
    (stop, task)
}
