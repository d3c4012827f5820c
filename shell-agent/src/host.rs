//! `chat-bridge agent-host`: any stdio ACP agent served over WebSocket `/acp`, so the agent can run in
//! its own pod or machine, next to the repository, while the bridge runs elsewhere.
//!
//! One child serves every connection. Requests are given host-side ids (so two clients' ids never
//! collide) and answered to the connection that asked; notifications and the agent's own requests go
//! to the connection that created or last loaded their session. The child outlives connections: a
//! bridge that reconnects finds its sessions (and running turns) where it left them. When the child
//! exits, the calls in flight are answered with an error naming the exit, the connections are closed
//! (their clients `session/load` on reconnecting), and the child is started again with backoff.
//! The listener follows the shell-agent's rules: bearer token, loopback unless a token is given,
//! an empty token refused — and, since this one serves an arbitrary agent, a short one too.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use daemon_client::stdio::{self, AgentCommand, Read, StdioLink};
use futures_util::{SinkExt, StreamExt};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, http};
use tokio_util::sync::CancellationToken;

use crate::session::lock;

/// The shortest token agent-host accepts: it hands out an agent that runs commands.
pub const MIN_TOKEN_LEN: usize = 16;

/// Why agent-host did not start.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A non-loopback address needs an explicit token.
    #[error("refusing to listen on {0} (not loopback) without --token")]
    TokenRequired(SocketAddr),
    /// Empty, blank or shorter than [`MIN_TOKEN_LEN`] (S1).
    #[error(
        "the agent-host token (CHAT_BRIDGE_AGENT_HOST_TOKEN / --token) is empty or shorter than {MIN_TOKEN_LEN} characters; use a long random one (openssl rand -hex 24) or leave it unset on loopback to have one generated"
    )]
    WeakToken,
    /// The agent could not be started.
    #[error(transparent)]
    Spawn(#[from] daemon_client::Error),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A call from a client, waiting for the child's answer.
struct Call {
    conn: u64,
    id: Value,
    method: String,
}

#[derive(Default)]
struct Routes {
    conns: HashMap<u64, mpsc::Sender<Message>>,
    calls: HashMap<String, Call>,
    owners: HashMap<String, u64>,
    /// The child's answer to `initialize`, given to later clients without asking it again.
    initialized: Option<Value>,
    /// Clients waiting for the first `initialize` answer.
    initializing: Vec<(u64, Value)>,
}

struct Hub {
    routes: Mutex<Routes>,
    to_child: mpsc::Sender<String>,
    next: AtomicU64,
    shutdown: CancellationToken,
}

/// A running agent-host. Its `Debug` never shows the token.
#[derive(Debug)]
pub struct AgentHost {
    addr: SocketAddr,
    token: SecretString,
    generated_token: bool,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl AgentHost {
    /// Starts the child and serves it on `listen` (`/acp`).
    ///
    /// # Errors
    /// [`HostError`]: a weak token, a non-loopback address without one, a bind failure, or a
    /// command that cannot be started (checked once here, so a typo fails at start-up).
    pub async fn start(
        listen: SocketAddr,
        token: Option<String>,
        command: AgentCommand,
    ) -> Result<Self, HostError> {
        if token
            .as_deref()
            .is_some_and(|t| t.trim().chars().count() < MIN_TOKEN_LEN)
        {
            return Err(HostError::WeakToken);
        }
        if token.is_none() && !listen.ip().is_loopback() {
            return Err(HostError::TokenRequired(listen));
        }
        let generated_token = token.is_none();
        let token = token.unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
        let child = stdio::spawn(&command, 16 << 20)?;
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| HostError::Bind {
                addr: listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| HostError::Bind {
            addr: listen,
            source,
        })?;
        let shutdown = CancellationToken::new();
        let (to_child, from_clients) = mpsc::channel(256);
        let hub = Arc::new(Hub {
            routes: Mutex::new(Routes::default()),
            to_child,
            next: AtomicU64::new(1),
            shutdown: shutdown.clone(),
        });
        let tasks = vec![
            tokio::spawn(run_child(hub.clone(), command, child, from_clients)),
            tokio::spawn(accept_loop(listener, hub, token.clone())),
        ];
        tracing::info!(%addr, "agent-host listening on /acp");
        Ok(Self {
            addr,
            token: SecretString::from(token),
            generated_token,
            shutdown,
            tasks,
        })
    }

    /// The bound address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `ws://ADDR/acp`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("ws://{}/acp", self.addr)
    }

    /// The bearer token clients must send.
    #[must_use]
    pub fn token(&self) -> &str {
        self.token.expose_secret()
    }

    /// Whether the token was generated (so the caller should print it).
    #[must_use]
    pub fn token_was_generated(&self) -> bool {
        self.generated_token
    }

    /// Stops accepting, closes connections, ends the child and its process group.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Runs the child, restarting it with backoff when it exits, until shutdown.
async fn run_child(
    hub: Arc<Hub>,
    command: AgentCommand,
    first: StdioLink,
    mut from_clients: mpsc::Receiver<String>,
) {
    let mut child = Some(first);
    let mut attempt = 0u32;
    loop {
        let mut link = match child.take() {
            Some(l) => l,
            None => {
                let delay = daemon_client::client::backoff_delay(
                    Duration::from_millis(250),
                    Duration::from_secs(30),
                    attempt,
                );
                attempt = attempt.saturating_add(1);
                tokio::select! {
                    () = hub.shutdown.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
                match stdio::spawn(&command, 16 << 20) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(error = %e, attempt, "could not restart the agent");
                        continue;
                    }
                }
            }
        };
        let started = tokio::time::Instant::now();
        let reason = loop {
            tokio::select! {
                () = hub.shutdown.cancelled() => {
                    link.close().await;
                    return;
                }
                msg = from_clients.recv() => {
                    let Some(msg) = msg else {
                        link.close().await;
                        return;
                    };
                    if let Err(e) = link.send(&msg).await {
                        break e;
                    }
                }
                read = link.recv() => match read {
                    Read::Line(line) => hub.on_child_line(&line).await,
                    Read::TooLong(n) => tracing::warn!(bytes = n, "a line from the agent longer than the frame limit was skipped"),
                    Read::Ended(why) => break why,
                },
            }
        };
        link.close().await;
        if started.elapsed() > Duration::from_secs(60) {
            attempt = 0;
        }
        tracing::warn!(%reason, "the agent exited; restarting it");
        hub.child_exited(&reason).await;
    }
}

impl Hub {
    async fn send_to(&self, conn: u64, msg: &Value) {
        let tx = lock(&self.routes).conns.get(&conn).cloned();
        if let Some(tx) = tx {
            let _ = tx.send(Message::text(msg.to_string())).await;
        }
    }

    /// One line from the child: an answer goes to the client that asked, everything else to the
    /// client that owns its session.
    async fn on_child_line(&self, line: &[u8]) {
        let Ok(mut msg) = serde_json::from_slice::<Value>(line) else {
            tracing::warn!(
                bytes = line.len(),
                "a line from the agent that is not JSON was skipped"
            );
            return;
        };
        let is_answer = msg.get("method").is_none()
            && (msg.get("result").is_some() || msg.get("error").is_some());
        if is_answer {
            let key = msg.get("id").map(Value::to_string).unwrap_or_default();
            let targets: Vec<(u64, Value)> = {
                let mut routes = lock(&self.routes);
                let Some(call) = routes.calls.remove(&key) else {
                    return;
                };
                if call.method == "session/new"
                    && let Some(s) = msg.pointer("/result/sessionId").and_then(Value::as_str)
                {
                    routes.owners.insert(s.to_owned(), call.conn);
                }
                if call.method == "initialize" {
                    if msg.get("result").is_some() {
                        routes.initialized = msg.get("result").cloned();
                    }
                    let mut waiting = std::mem::take(&mut routes.initializing);
                    waiting.retain(|(c, _)| *c != call.conn);
                    waiting.push((call.conn, call.id));
                    waiting
                } else {
                    vec![(call.conn, call.id)]
                }
            };
            for (conn, id) in targets {
                msg["id"] = id;
                self.send_to(conn, &msg).await;
            }
            return;
        }
        let session = msg
            .pointer("/params/sessionId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let targets: Vec<u64> = {
            let routes = lock(&self.routes);
            match session.and_then(|s| routes.owners.get(&s).copied()) {
                Some(c) => vec![c],
                // A request must be answered once: it goes to one client.
                None if msg.get("id").is_some() => {
                    routes.conns.keys().min().into_iter().copied().collect()
                }
                None => routes.conns.keys().copied().collect(),
            }
        };
        for conn in targets {
            self.send_to(conn, &msg).await;
        }
    }

    /// One frame from a client: its calls get host ids; answers and notifications pass as they are.
    async fn on_client_frame(&self, conn: u64, bytes: &[u8]) {
        let Ok(mut msg) = serde_json::from_slice::<Value>(bytes) else {
            self.send_to(
                conn,
                &json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error: the frame is not JSON"}}),
            )
            .await;
            return;
        };
        if let (Some(method), Some(id)) = (
            msg.get("method").and_then(Value::as_str).map(str::to_owned),
            msg.get("id").cloned(),
        ) {
            let cached = {
                let mut routes = lock(&self.routes);
                let mut cached = None;
                if method == "initialize" {
                    if let Some(result) = routes.initialized.clone() {
                        cached = Some(Some(result));
                    } else if routes.calls.values().any(|c| c.method == "initialize") {
                        // The first client asks the child; others wait for its answer.
                        routes.initializing.push((conn, id.clone()));
                        cached = Some(None);
                    }
                }
                if method == "session/load"
                    && let Some(s) = msg.pointer("/params/sessionId").and_then(Value::as_str)
                {
                    routes.owners.insert(s.to_owned(), conn);
                }
                cached
            };
            match cached {
                Some(Some(result)) => {
                    self.send_to(conn, &json!({"jsonrpc": "2.0", "id": id, "result": result}))
                        .await;
                    return;
                }
                Some(None) => return,
                None => {}
            }
            let host_id = format!("h{}", self.next.fetch_add(1, Ordering::Relaxed));
            lock(&self.routes).calls.insert(
                Value::String(host_id.clone()).to_string(),
                Call { conn, id, method },
            );
            msg["id"] = Value::String(host_id);
        }
        let _ = self.to_child.send(msg.to_string()).await;
    }

    /// The child is gone: its calls are answered with the reason, and every connection is closed so
    /// its client reconnects and loads its sessions into the next child.
    async fn child_exited(&self, reason: &str) {
        let (calls, conns) = {
            let mut routes = lock(&self.routes);
            routes.initialized = None;
            routes.initializing.clear();
            routes.owners.clear();
            (
                std::mem::take(&mut routes.calls),
                std::mem::take(&mut routes.conns),
            )
        };
        for call in calls.into_values() {
            if let Some(tx) = conns.get(&call.conn) {
                let answer = json!({"jsonrpc": "2.0", "id": call.id, "error": {"code": -32603, "message": format!("{reason}; agent-host is starting it again")}});
                let _ = tx.send(Message::text(answer.to_string())).await;
            }
        }
        // Dropping the senders ends each connection's writer, which closes its socket.
        drop(conns);
    }
}

async fn accept_loop(listener: TcpListener, hub: Arc<Hub>, expected: String) {
    loop {
        let accepted = tokio::select! {
            () = hub.shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        let Ok((tcp, peer)) = accepted else { continue };
        let (hub, expected) = (hub.clone(), expected.clone());
        tokio::spawn(async move {
            if let Err(reason) = serve(tcp, hub, expected).await {
                tracing::info!(%peer, %reason, "connection refused");
            }
        });
    }
}

async fn serve(tcp: TcpStream, hub: Arc<Hub>, expected: String) -> Result<(), String> {
    let _ = tcp.set_nodelay(true);
    #[allow(clippy::result_large_err)]
    let check = move |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let refuse = |status: http::StatusCode, why: &str| {
            let mut e = ErrorResponse::new(Some(why.to_owned()));
            *e.status_mut() = status;
            e
        };
        let auth = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if !crate::auth::bearer_matches(auth, &expected) {
            return Err(refuse(
                http::StatusCode::UNAUTHORIZED,
                "missing or wrong bearer token",
            ));
        }
        if req.uri().path() != "/acp" {
            return Err(refuse(
                http::StatusCode::NOT_FOUND,
                "the ACP endpoint is /acp",
            ));
        }
        Ok(resp)
    };
    let config = WebSocketConfig::default()
        .max_message_size(Some(16 << 20))
        .max_frame_size(Some(16 << 20));
    let ws = tokio_tungstenite::accept_hdr_async_with_config(tcp, check, Some(config))
        .await
        .map_err(|e| e.to_string())?;
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = mpsc::channel::<Message>(256);
    let conn = hub.next.fetch_add(1, Ordering::Relaxed);
    lock(&hub.routes).conns.insert(conn, tx);
    let writer = tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            if sink.send(msg).await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });
    loop {
        let frame = tokio::select! {
            () = hub.shutdown.cancelled() => break,
            f = stream.next() => f,
        };
        match frame {
            Some(Ok(Message::Text(text))) => hub.on_client_frame(conn, text.as_bytes()).await,
            Some(Ok(Message::Binary(bytes))) => hub.on_client_frame(conn, &bytes).await,
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
            Some(Ok(_)) => {}
        }
        if writer.is_finished() {
            // The child exited and this connection was closed from our side.
            break;
        }
    }
    lock(&hub.routes).conns.remove(&conn);
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
    Ok(())
}
