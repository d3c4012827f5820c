//! A raw ACP client over a real WebSocket, for asserting on frames exactly as a daemon sent them
//! (daemon-client would classify and filter them).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// A raw JSON-RPC connection.
#[derive(Debug)]
pub struct RawClient {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: i64,
}

impl RawClient {
    /// Connects with a bearer token.
    ///
    /// # Errors
    /// The handshake error (e.g. a 401).
    pub async fn connect(
        url: &str,
        token: &str,
    ) -> Result<Self, tokio_tungstenite::tungstenite::Error> {
        let mut req = url.into_client_request()?;
        req.headers_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("header value"),
        );
        let (ws, _) = tokio_tungstenite::connect_async(req).await?;
        Ok(Self { ws, next_id: 1 })
    }

    /// Sends a request; returns its id.
    pub async fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// Sends a notification.
    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// Sends a JSON value.
    pub async fn send(&mut self, v: Value) {
        self.send_raw(&v.to_string()).await;
    }

    /// Sends a text frame as is.
    pub async fn send_raw(&mut self, text: &str) {
        self.ws
            .send(Message::text(text.to_owned()))
            .await
            .expect("send");
    }

    /// The next JSON message (30 s limit).
    ///
    /// # Panics
    /// On timeout or a closed connection.
    pub async fn recv(&mut self) -> Value {
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(30), self.ws.next())
                .await
                .expect("a frame within 30 s")
                .expect("connection open")
                .expect("frame");
            if let Message::Text(t) = msg {
                return serde_json::from_str(&t).expect("daemon sent JSON");
            }
        }
    }

    /// Every message up to and including the response to `id`.
    pub async fn until_response(&mut self, id: i64) -> Vec<Value> {
        let mut out = Vec::new();
        loop {
            let v = self.recv().await;
            let done = v.get("method").is_none() && v["id"] == id;
            out.push(v);
            if done {
                return out;
            }
        }
    }

    /// A request and its response (with whatever arrived before it).
    pub async fn call(&mut self, method: &str, params: Value) -> (Value, Vec<Value>) {
        let id = self.request(method, params).await;
        let mut frames = self.until_response(id).await;
        let response = frames.pop().expect("response");
        (response, frames)
    }
}

/// The `update` objects of the `session/update` notifications among `frames`.
#[must_use]
pub fn updates(frames: &[Value]) -> Vec<Value> {
    frames
        .iter()
        .filter(|f| f["method"] == "session/update")
        .map(|f| f["params"]["update"].clone())
        .collect()
}

/// Heartbeat updates (kind-less `in_progress` with `_meta.shellProgress`).
#[must_use]
pub fn heartbeats(frames: &[Value]) -> Vec<Value> {
    updates(frames)
        .into_iter()
        .filter(|u| {
            u["status"] == "in_progress"
                && u.get("kind").is_none()
                && u["_meta"].get("shellProgress").is_some()
        })
        .collect()
}

/// The terminal update.
///
/// # Panics
/// When there is not exactly one.
#[must_use]
pub fn terminal(frames: &[Value]) -> Value {
    let t: Vec<_> = updates(frames)
        .into_iter()
        .filter(|u| u["status"] == "completed" || u["status"] == "failed")
        .collect();
    assert_eq!(t.len(), 1, "exactly one terminal update: {t:?}");
    t[0].clone()
}
