//! A scripted ACP daemon over a real WebSocket on loopback.
//!
//! Each accepted connection is handed to the test's script as a [`Peer`]; the server checks the
//! bearer token during the handshake (401 otherwise) and counts connections. [`replay`] drives a
//! peer through a real capture, mapping the capture's request ids to the ones the client used.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::{Message, http};
use tokio_tungstenite::{WebSocketStream, accept_hdr_async};

use crate::capture::Line;

/// One connection from the client under test.
#[derive(Debug)]
pub struct Peer {
    ws: WebSocketStream<TcpStream>,
    /// 1 for the first connection, 2 for the next, …
    pub number: usize,
}

impl Peer {
    /// The next JSON message from the client (pings are answered and skipped); `None` when closed.
    pub async fn recv(&mut self) -> Option<Value> {
        while let Some(msg) = self.ws.next().await {
            match msg {
                Ok(Message::Text(t)) => {
                    return Some(serde_json::from_str(&t).expect("client sent invalid JSON"));
                }
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => {}
            }
        }
        None
    }

    /// Receives the next message and asserts it is a request or notification for `method`.
    ///
    /// # Panics
    /// When the connection closed or another method arrived.
    pub async fn expect(&mut self, method: &str) -> Value {
        let msg = tokio::time::timeout(Duration::from_secs(30), self.recv())
            .await
            .unwrap_or_else(|_| panic!("no {method} from the client within 30 s"))
            .unwrap_or_else(|| panic!("connection closed while waiting for {method}"));
        assert_eq!(msg["method"], method, "unexpected message {msg}");
        msg
    }

    /// Sends a JSON message.
    pub async fn send(&mut self, msg: Value) {
        self.send_raw(&msg.to_string()).await;
    }

    /// Sends JSON messages in one write: the client finds them all waiting at once.
    pub async fn send_burst(&mut self, msgs: &[Value]) {
        for msg in msgs {
            if self.ws.feed(Message::text(msg.to_string())).await.is_err() {
                return;
            }
        }
        let _ = self.ws.flush().await;
    }

    /// Sends JSON messages and then a close frame, all in one write: the client reads them all
    /// together with the connection's end.
    pub async fn send_burst_and_close(&mut self, msgs: &[Value]) {
        for msg in msgs {
            if self.ws.feed(Message::text(msg.to_string())).await.is_err() {
                return;
            }
        }
        let _ = self.ws.feed(Message::Close(None)).await;
        let _ = self.ws.flush().await;
    }

    /// Sends a text frame as is (for garbage).
    pub async fn send_raw(&mut self, text: &str) {
        let _ = self.ws.send(Message::text(text.to_owned())).await;
    }

    /// Sends a binary frame (for bytes that are not UTF-8).
    pub async fn send_binary(&mut self, bytes: Vec<u8>) {
        let _ = self.ws.send(Message::binary(bytes)).await;
    }

    /// Receives messages until one is a request or notification for `method` (others are skipped).
    ///
    /// # Panics
    /// When the connection closes first or nothing comes within 30 s.
    pub async fn expect_skipping(&mut self, method: &str) -> Value {
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(30), self.recv())
                .await
                .unwrap_or_else(|_| panic!("no {method} from the client within 30 s"))
                .unwrap_or_else(|| panic!("connection closed while waiting for {method}"));
            if msg["method"] == method {
                return msg;
            }
        }
    }

    /// Answers request `req` with `result`.
    pub async fn reply(&mut self, req: &Value, result: Value) {
        self.send(serde_json::json!({"jsonrpc": "2.0", "id": req["id"], "result": result}))
            .await;
    }

    /// Answers `initialize` as a daemon supporting `session/load`.
    pub async fn handshake(&mut self) {
        let init = self.expect("initialize").await;
        self.reply(
            &init,
            serde_json::json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true}}),
        )
        .await;
    }

    /// The handshake, `session/new` answered with `session`, and the first `session/prompt`, which
    /// is returned (to be answered).
    pub async fn open_and_prompted(&mut self, session: &str) -> Value {
        self.handshake().await;
        let new = self.expect("session/new").await;
        self.reply(&new, serde_json::json!({"sessionId": session}))
            .await;
        self.expect("session/prompt").await
    }

    /// Reads until the client closes: its close frame's code (`None`: a close without a code, or
    /// the connection ended without a close frame).
    pub async fn close_code(&mut self) -> Option<u16> {
        while let Some(msg) = self.ws.next().await {
            match msg {
                Ok(Message::Close(frame)) => return frame.map(|f| u16::from(f.code)),
                Err(_) => return None,
                Ok(_) => {}
            }
        }
        None
    }

    /// Drops the TCP connection without a close frame.
    pub fn drop_connection(self) {
        drop(self.ws);
    }

    /// Keeps the connection open without reading (so pings go unanswered) for `d`.
    pub async fn go_silent(self, d: Duration) -> Self {
        tokio::time::sleep(d).await;
        self
    }
}

/// A scripted daemon listening on loopback.
#[derive(Debug)]
pub struct ScriptedDaemon {
    /// `ws://127.0.0.1:PORT/acp`.
    pub url: String,
    /// The bearer token it requires at first ([`ScriptedDaemon::rotate_token`] changes it).
    pub token: String,
    expected: Arc<std::sync::Mutex<String>>,
    connections: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl ScriptedDaemon {
    /// Starts a daemon that runs `script` for every accepted connection.
    ///
    /// # Panics
    /// When loopback cannot be bound.
    pub async fn start<F, Fut>(script: F) -> Self
    where
        F: Fn(Peer) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("addr");
        let token = "scripted-token".to_owned();
        let connections = Arc::new(AtomicUsize::new(0));
        let script = Arc::new(script);
        let expected = Arc::new(std::sync::Mutex::new(format!("Bearer {token}")));
        let refused = Arc::new(AtomicUsize::new(0));
        let (required, count, refusals) = (expected.clone(), connections.clone(), refused.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let expected = required.lock().expect("token").clone();
                let refusals = refusals.clone();
                // The handshake callback's signature is tungstenite's; its error type is large by design.
                #[allow(clippy::result_large_err)]
                let check =
                    move |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
                        let ok = req
                            .headers()
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            == Some(expected.as_str());
                        if ok {
                            Ok(resp)
                        } else {
                            refusals.fetch_add(1, Ordering::SeqCst);
                            let mut e =
                                ErrorResponse::new(Some("missing or wrong bearer token".into()));
                            *e.status_mut() = http::StatusCode::UNAUTHORIZED;
                            Err(e)
                        }
                    };
                let Ok(ws) = accept_hdr_async(tcp, check).await else {
                    continue;
                };
                let number = count.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::spawn((script.clone())(Peer { ws, number }));
            }
        });
        Self {
            url: format!("ws://{addr}/acp"),
            token,
            expected,
            connections,
            refused,
            task,
        }
    }

    /// From now on the daemon requires `token` (a redeploy with a rotated Secret); open
    /// connections stay.
    ///
    /// # Panics
    /// When the token's lock is poisoned.
    pub fn rotate_token(&self, token: &str) {
        *self.expected.lock().expect("token") = format!("Bearer {token}");
    }

    /// Handshakes refused for a missing or wrong token so far.
    #[must_use]
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    #[must_use]
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for ScriptedDaemon {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Plays connection `conn` of a capture against the client on `peer`: every client message the
/// capture has is awaited (same method, ids mapped), every daemon message is sent in order.
///
/// # Panics
/// When the client diverges from the capture.
pub async fn replay(peer: &mut Peer, lines: &[Line], conn: u64) {
    let mut ids: HashMap<String, Value> = HashMap::new();
    for line in lines.iter().filter(|l| l.conn == conn) {
        let msg = &line.msg;
        if line.inbound {
            let mut msg = msg.clone();
            if msg.get("method").is_none()
                && let Some(id) = ids.get(&msg["id"].to_string())
            {
                msg["id"] = id.clone();
            }
            peer.send(msg).await;
        } else if let Some(method) = msg["method"].as_str() {
            let got = peer.expect(method).await;
            if msg.get("id").is_some() {
                ids.insert(msg["id"].to_string(), got["id"].clone());
            }
        } else {
            // Our answer to one of the daemon's requests (a permission): same id, a result.
            let got = tokio::time::timeout(Duration::from_secs(30), peer.recv())
                .await
                .expect("the client answered the daemon's request")
                .expect("connection open");
            assert_eq!(
                got["id"], msg["id"],
                "answer to the daemon's request: {got}"
            );
            assert!(
                got.get("result").is_some(),
                "answer carries a result: {got}"
            );
        }
    }
}
