//! `chat-bridge agent-host`: any stdio ACP agent served over WebSocket `/acp`, so the agent can run in
//! its own pod or machine, next to the repository, while the bridge runs elsewhere.
//!
//! One child serves every connection. Requests are given host-side ids (so two clients' ids never
//! collide) and answered to the connection that asked; notifications and the agent's own requests go
//! to the connection that created or last loaded their session. The child outlives connections: a
//! bridge that reconnects finds its sessions (and running turns) where it left them. When the child
//! exits, the calls in flight are answered with an error naming the exit, the connections are closed
//! (their clients `session/load` on reconnecting), and the child is started again with backoff.
//!
//! With `--per-session` ([`Mode::PerSession`]) every session gets its own child instead, started for
//! its `session/new` (or for a session the host has no child for: then initialised and
//! `session/load`ed behind the client's back), and ended when it has been idle for a while; its next
//! message starts a child again and reloads the session. A crash then interrupts one session only.
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
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
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

/// How agent-host maps sessions to children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One child for every session and connection (the default), restarted when it exits.
    Shared,
    /// One child per session, ended after `idle` without traffic and started again (with a
    /// `session/load`) at the session's next message.
    PerSession {
        /// How long a session's child may sit idle.
        idle: Duration,
    },
}

/// What one client may hold of agent-host: bounds so that a token holder (or anyone who can reach
/// the port, before the handshake) cannot exhaust its file descriptors or bury the shared agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time for a client to complete the WebSocket handshake (with its token); default 10 s.
    pub handshake: Duration,
    /// Connections served at once, authenticated or not; more are closed at once. Default 64.
    pub max_connections: usize,
    /// Requests of one connection waiting for the agent; more are answered with an error and not
    /// passed on. Default 1024 (a bridge has about one per open turn).
    pub max_in_flight: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            handshake: crate::handshake::DEFAULT_HANDSHAKE_TIMEOUT,
            max_connections: 64,
            max_in_flight: 1024,
        }
    }
}

/// The shared child's id.
const SHARED: u64 = 0;

/// A call from a client, waiting for a child's answer.
struct Call {
    conn: u64,
    id: Value,
    method: String,
    child: u64,
    /// The call's `params.sessionId`, if any.
    session: Option<String>,
}

/// A request from a child, waiting for a client's answer.
struct AgentCall {
    child: u64,
    id: Value,
}

#[derive(Default)]
struct Routes {
    conns: HashMap<u64, mpsc::Sender<Message>>,
    calls: HashMap<String, Call>,
    agent_calls: HashMap<String, AgentCall>,
    owners: HashMap<String, u64>,
    /// Which child serves a session (per-session mode).
    session_child: HashMap<String, u64>,
    /// The cwd of each session, to load it into a new child.
    cwds: HashMap<String, Value>,
    /// The child's answer to `initialize`, given to later clients without asking it again.
    initialized: Option<Value>,
    /// The first client's `initialize` params, sent to every child started later.
    init_params: Option<Value>,
    /// Clients waiting for the first `initialize` answer.
    initializing: Vec<(u64, Value)>,
    /// Turns that ended while the connection that prompted them was gone and no other client had
    /// loaded their session yet: session → stop reason, told to the next client that loads it.
    ended: HashMap<String, Value>,
}

struct Slot {
    tx: mpsc::Sender<String>,
    last: Instant,
    stop: CancellationToken,
}

struct Hub {
    routes: Mutex<Routes>,
    children: Mutex<HashMap<u64, Slot>>,
    /// The host's own calls (initialize, session/load of a new per-session child), by host id.
    internal: Mutex<HashMap<String, (u64, oneshot::Sender<Value>)>>,
    command: AgentCommand,
    mode: Mode,
    limits: Limits,
    next: AtomicU64,
    shutdown: CancellationToken,
    /// When a non-JSON line from an agent was last logged, and how many were skipped since.
    garbage: Mutex<(Option<Instant>, u64)>,
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
    /// Starts one shared child and serves it on `listen` (`/acp`).
    ///
    /// # Errors
    /// [`HostError`]: a weak token, a non-loopback address without one, a bind failure, or a
    /// command that cannot be started (checked once here, so a typo fails at start-up).
    pub async fn start(
        listen: SocketAddr,
        token: Option<String>,
        command: AgentCommand,
    ) -> Result<Self, HostError> {
        Self::start_with(listen, token, command, Mode::Shared).await
    }

    /// Like [`AgentHost::start`], with the session-to-child mapping `mode`.
    ///
    /// # Errors
    /// As [`AgentHost::start`].
    pub async fn start_with(
        listen: SocketAddr,
        token: Option<String>,
        command: AgentCommand,
        mode: Mode,
    ) -> Result<Self, HostError> {
        Self::start_limited(listen, token, command, mode, Limits::default()).await
    }

    /// Like [`AgentHost::start_with`], with the client bounds `limits`.
    ///
    /// # Errors
    /// As [`AgentHost::start`].
    pub async fn start_limited(
        listen: SocketAddr,
        token: Option<String>,
        command: AgentCommand,
        mode: Mode,
        limits: Limits,
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
        // Started once here in both modes, so a command that cannot start fails at start-up.
        let first = stdio::spawn(&command, 16 << 20)?;
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
        let hub = Arc::new(Hub {
            routes: Mutex::new(Routes::default()),
            children: Mutex::new(HashMap::new()),
            internal: Mutex::new(HashMap::new()),
            command,
            mode,
            limits,
            next: AtomicU64::new(1),
            shutdown: shutdown.clone(),
            garbage: Mutex::new((None, 0)),
        });
        let mut tasks = Vec::new();
        match mode {
            Mode::Shared => tasks.push(tokio::spawn(run_shared(hub.clone(), first))),
            Mode::PerSession { idle } => {
                let mut first = first;
                first.close().await;
                tasks.push(tokio::spawn(reap(hub.clone(), idle)));
            }
        }
        tasks.push(tokio::spawn(accept_loop(listener, hub, token.clone())));
        tracing::info!(%addr, ?mode, "agent-host listening on /acp");
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

    /// Stops accepting, closes connections, ends every child and its process group.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Pumps one child until it ends, is stopped, or the host shuts down; returns why it ended, or
/// `None` when it was ended on purpose.
async fn pump(
    hub: &Arc<Hub>,
    id: u64,
    link: &mut StdioLink,
    rx: &mut mpsc::Receiver<String>,
    stop: &CancellationToken,
) -> Option<String> {
    loop {
        tokio::select! {
            () = hub.shutdown.cancelled() => return None,
            () = stop.cancelled() => return None,
            msg = rx.recv() => {
                let msg = msg?;
                if let Err(e) = link.send(&msg).await {
                    return Some(e);
                }
            }
            read = link.recv() => match read {
                Read::Line(line) => hub.on_child_line(id, &line).await,
                Read::TooLong(n) => tracing::warn!(bytes = n, "a line from the agent longer than the frame limit was skipped"),
                Read::Ended(why) => return Some(why),
            },
        }
    }
}

impl Hub {
    fn register(&self, id: u64) -> (mpsc::Receiver<String>, CancellationToken) {
        let (tx, rx) = mpsc::channel(256);
        let stop = CancellationToken::new();
        lock(&self.children).insert(
            id,
            Slot {
                tx,
                last: Instant::now(),
                stop: stop.clone(),
            },
        );
        (rx, stop)
    }

    /// Starts a child for one session (per-session mode), initialised with the first client's
    /// `initialize` params.
    async fn spawn_session_child(self: &Arc<Self>) -> Result<u64, String> {
        let mut link = stdio::spawn(&self.command, 16 << 20).map_err(|e| e.to_string())?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (mut rx, stop) = self.register(id);
        let hub = self.clone();
        tokio::spawn(async move {
            let ended = pump(&hub, id, &mut link, &mut rx, &stop).await;
            link.close().await;
            hub.child_gone(id, ended.as_deref()).await;
        });
        let params = lock(&self.routes)
            .init_params
            .clone()
            .unwrap_or(Value::Null);
        self.internal_call(id, "initialize", params).await?;
        Ok(id)
    }

    /// A call of the host's own to child `id` (never seen by a client).
    async fn internal_call(
        &self,
        child: u64,
        method: &str,
        params: Value,
    ) -> Result<Value, String> {
        let host_id = format!("i{}", self.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        lock(&self.internal).insert(Value::String(host_id.clone()).to_string(), (child, tx));
        let msg = json!({"jsonrpc": "2.0", "id": host_id, "method": method, "params": params});
        self.to_child(child, msg.to_string()).await;
        let answer = tokio::time::timeout(Duration::from_secs(60), rx)
            .await
            .map_err(|_| format!("the agent did not answer {method} within 60 s"))?
            .map_err(|_| format!("the agent exited before answering {method}"))?;
        match answer.get("error") {
            Some(e) => Err(e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("error")
                .to_owned()),
            None => Ok(answer.get("result").cloned().unwrap_or(Value::Null)),
        }
    }

    async fn to_child(&self, child: u64, msg: String) {
        let tx = {
            let mut children = lock(&self.children);
            children.get_mut(&child).map(|s| {
                s.last = Instant::now();
                s.tx.clone()
            })
        };
        if let Some(tx) = tx {
            let _ = tx.send(msg).await;
        }
    }

    async fn send_to(&self, conn: u64, msg: &Value) {
        let tx = lock(&self.routes).conns.get(&conn).cloned();
        if let Some(tx) = tx {
            let _ = tx.send(Message::text(msg.to_string())).await;
        }
    }

    /// One line from child `child`: an answer goes to whoever asked, everything else to the client
    /// that owns its session.
    async fn on_child_line(&self, child: u64, line: &[u8]) {
        let Ok(mut msg) = serde_json::from_slice::<Value>(line) else {
            // Some agents print banners on stdout: counted, and logged at most every 10 s.
            let mut g = lock(&self.garbage);
            g.1 += 1;
            if g.0.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                tracing::warn!(
                    bytes = line.len(),
                    skipped = g.1,
                    "lines from the agent that are not JSON were skipped"
                );
                *g = (Some(Instant::now()), 0);
            }
            return;
        };
        if let Some(slot) = lock(&self.children).get_mut(&child) {
            slot.last = Instant::now();
        }
        let is_answer = msg.get("method").is_none()
            && (msg.get("result").is_some() || msg.get("error").is_some());
        if is_answer {
            let key = msg.get("id").map(Value::to_string).unwrap_or_default();
            if let Some((_, tx)) = lock(&self.internal).remove(&key) {
                let _ = tx.send(msg);
                return;
            }
            let mut after: Option<(u64, Value)> = None;
            let targets: Vec<(u64, Value)> = {
                let mut routes = lock(&self.routes);
                let Some(call) = routes.calls.remove(&key) else {
                    return;
                };
                if call.method == "session/prompt"
                    && !routes.conns.contains_key(&call.conn)
                    && let (Some(s), Some(stop)) = (
                        call.session.clone(),
                        msg.pointer("/result/stopReason").cloned(),
                    )
                {
                    // The client that prompted is gone (a bridge restart): its answer would be
                    // lost, and the turn with it. Whoever loaded the session since hears that the
                    // turn ended; if nobody has yet, the next client that loads it does.
                    match routes.owners.get(&s).copied() {
                        Some(owner) if owner != call.conn && routes.conns.contains_key(&owner) => {
                            after = Some((owner, turn_complete(&s, &stop)));
                        }
                        _ => {
                            routes.ended.insert(s, stop);
                        }
                    }
                    Vec::new()
                } else {
                    if call.method == "session/load"
                        && msg.get("result").is_some()
                        && let Some(s) = &call.session
                        && let Some(stop) = routes.ended.remove(s)
                    {
                        after = Some((call.conn, turn_complete(s, &stop)));
                    }
                    if call.method == "session/new"
                        && let Some(s) = msg.pointer("/result/sessionId").and_then(Value::as_str)
                    {
                        routes.owners.insert(s.to_owned(), call.conn);
                        routes.session_child.insert(s.to_owned(), call.child);
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
                }
            };
            for (conn, id) in targets {
                msg["id"] = id;
                self.send_to(conn, &msg).await;
            }
            if let Some((conn, note)) = after {
                self.send_to(conn, &note).await;
            }
            return;
        }
        if let Some(id) = msg.get("id").cloned() {
            // The agent's own request: its id is the host's, so two children's ids never collide.
            let host_id = format!("a{}", self.next.fetch_add(1, Ordering::Relaxed));
            lock(&self.routes).agent_calls.insert(
                Value::String(host_id.clone()).to_string(),
                AgentCall { child, id },
            );
            msg["id"] = Value::String(host_id);
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

    /// The child that serves `session` now, started (and the session loaded) if it has none.
    async fn child_for(
        self: &Arc<Self>,
        session: Option<&str>,
        method: &str,
    ) -> Result<u64, String> {
        if self.mode == Mode::Shared {
            return Ok(SHARED);
        }
        let Some(session) = session else {
            return self.spawn_session_child().await;
        };
        let known = lock(&self.routes).session_child.get(session).copied();
        if let Some(c) = known
            && lock(&self.children).contains_key(&c)
        {
            return Ok(c);
        }
        let child = self.spawn_session_child().await?;
        if method != "session/load" {
            let cwd = lock(&self.routes)
                .cwds
                .get(session)
                .cloned()
                .unwrap_or_else(|| Value::String(".".into()));
            let params = json!({"sessionId": session, "cwd": cwd, "mcpServers": []});
            if let Err(e) = self.internal_call(child, "session/load", params).await {
                if let Some(slot) = lock(&self.children).get(&child) {
                    slot.stop.cancel();
                }
                return Err(format!(
                    "the session could not be loaded into a new agent process: {e}"
                ));
            }
        }
        lock(&self.routes)
            .session_child
            .insert(session.to_owned(), child);
        Ok(child)
    }

    /// One frame from a client: its calls get host ids; answers go back to the child that asked;
    /// notifications to their session's child.
    async fn on_client_frame(self: &Arc<Self>, conn: u64, bytes: &[u8]) {
        let Ok(mut msg) = serde_json::from_slice::<Value>(bytes) else {
            self.send_to(
                conn,
                &json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error: the frame is not JSON"}}),
            )
            .await;
            return;
        };
        let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
        let session = msg
            .pointer("/params/sessionId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let is_answer =
            msg.get("id").is_some() && (msg.get("result").is_some() || msg.get("error").is_some());
        if method.is_none() && !is_answer {
            // Valid JSON that is neither a request, a notification nor an answer ([], 42, {}).
            self.send_to(
                conn,
                &json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "invalid request: not a JSON-RPC request, notification or response"}}),
            )
            .await;
            return;
        }
        let Some(method) = method else {
            // An answer to an agent's request: back to the child that asked, under its own id.
            let key = msg.get("id").map(Value::to_string).unwrap_or_default();
            let Some(call) = lock(&self.routes).agent_calls.remove(&key) else {
                return;
            };
            msg["id"] = call.id;
            self.to_child(call.child, msg.to_string()).await;
            return;
        };
        let Some(id) = msg.get("id").cloned() else {
            // A notification (session/cancel): to the session's child, if it has one.
            let child = match (self.mode, &session) {
                (Mode::Shared, _) => Some(SHARED),
                (_, Some(s)) => lock(&self.routes).session_child.get(s).copied(),
                _ => None,
            };
            if let Some(child) = child {
                self.to_child(child, msg.to_string()).await;
            }
            return;
        };
        let in_flight = lock(&self.routes)
            .calls
            .values()
            .filter(|c| c.conn == conn)
            .count();
        if in_flight >= self.limits.max_in_flight {
            // Not passed on: one client must not bury the agent that others share.
            self.send_to(
                conn,
                &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": format!("agent-host: too many requests in flight on this connection (limit {}); wait for answers", self.limits.max_in_flight)}}),
            )
            .await;
            return;
        }
        let cached = {
            let mut routes = lock(&self.routes);
            let mut cached = None;
            if method == "initialize" {
                if routes.init_params.is_none() {
                    routes.init_params = msg.get("params").cloned();
                }
                if let Some(result) = routes.initialized.clone() {
                    cached = Some(Some(result));
                } else if routes.calls.values().any(|c| c.method == "initialize") {
                    // The first client asks the child; others wait for its answer.
                    routes.initializing.push((conn, id.clone()));
                    cached = Some(None);
                }
            }
            if let Some(s) = &session {
                if method == "session/load" {
                    routes.owners.insert(s.clone(), conn);
                }
                if let Some(cwd) = msg.pointer("/params/cwd") {
                    routes.cwds.insert(s.clone(), cwd.clone());
                }
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
        let child = if method == "initialize" && self.mode != Mode::Shared {
            // Per-session: a child answers for the agent's capabilities, then is ended (idle).
            match stdio::spawn(&self.command, 16 << 20) {
                Ok(link) => {
                    let cid = self.next.fetch_add(1, Ordering::Relaxed);
                    let (mut rx, stop) = self.register(cid);
                    let hub = self.clone();
                    let mut link = link;
                    tokio::spawn(async move {
                        let ended = pump(&hub, cid, &mut link, &mut rx, &stop).await;
                        link.close().await;
                        hub.child_gone(cid, ended.as_deref()).await;
                    });
                    Ok(cid)
                }
                Err(e) => Err(e.to_string()),
            }
        } else {
            self.child_for(session.as_deref(), &method).await
        };
        let child = match child {
            Ok(c) => c,
            Err(reason) => {
                self.send_to(
                    conn,
                    &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": reason}}),
                )
                .await;
                return;
            }
        };
        let host_id = format!("h{}", self.next.fetch_add(1, Ordering::Relaxed));
        lock(&self.routes).calls.insert(
            Value::String(host_id.clone()).to_string(),
            Call {
                conn,
                id,
                method,
                child,
                session,
            },
        );
        msg["id"] = Value::String(host_id);
        self.to_child(child, msg.to_string()).await;
    }

    /// Child `id` is gone. Its calls are answered with the reason (`None`: ended on purpose, idle).
    /// The shared child takes every connection with it, so each client reconnects and reloads its
    /// sessions into the next one; a session's own child takes only its sessions.
    async fn child_gone(&self, id: u64, reason: Option<&str>) {
        if id != SHARED {
            lock(&self.children).remove(&id);
        }
        let reason = reason.unwrap_or("the agent process was ended");
        let (calls, conns) = {
            let mut routes = lock(&self.routes);
            let ids: Vec<String> = routes
                .calls
                .iter()
                .filter(|(_, c)| c.child == id)
                .map(|(k, _)| k.clone())
                .collect();
            let calls: Vec<Call> = ids.iter().filter_map(|k| routes.calls.remove(k)).collect();
            routes.agent_calls.retain(|_, c| c.child != id);
            routes.session_child.retain(|_, c| *c != id);
            let conns = if id == SHARED {
                routes.initialized = None;
                routes.initializing.clear();
                routes.owners.clear();
                std::mem::take(&mut routes.conns)
            } else {
                routes.conns.clone()
            };
            (calls, conns)
        };
        // The host's own calls to it fail now ("exited before answering"), not after a timeout.
        lock(&self.internal).retain(|_, (child, _)| *child != id);
        for call in calls {
            if let Some(tx) = conns.get(&call.conn) {
                // `data.agentExited` lets the client tell this from the agent's own errors: the
                // turn went with the process (its tool messages are closed as interrupted).
                let answer = json!({"jsonrpc": "2.0", "id": call.id, "error": {"code": -32603, "message": format!("{reason}; agent-host is starting it again"), "data": {"agentExited": reason}}});
                let _ = tx.send(Message::text(answer.to_string())).await;
            }
        }
        // For the shared child, dropping the senders ends each connection's writer, which closes
        // its socket.
        drop(conns);
    }
}

/// `_agent_host/turn_complete`: a turn of `session` ended with `stop` while the client that
/// prompted it was gone (the same params as `_shell_agent/turn_complete`).
fn turn_complete(session: &str, stop: &Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "_agent_host/turn_complete", "params": {"sessionId": session, "stopReason": stop}})
}

/// Runs the shared child, restarting it with backoff when it exits, until shutdown.
async fn run_shared(hub: Arc<Hub>, first: StdioLink) {
    let mut child = Some(first);
    let mut attempt = 0u32;
    // One channel for the life of the host: what clients send while the child restarts waits for
    // the next one.
    let (mut rx, stop) = hub.register(SHARED);
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
                match stdio::spawn(&hub.command, 16 << 20) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(error = %e, attempt, "could not restart the agent");
                        continue;
                    }
                }
            }
        };
        let started = Instant::now();
        let ended = pump(&hub, SHARED, &mut link, &mut rx, &stop).await;
        link.close().await;
        let Some(reason) = ended else {
            hub.child_gone(SHARED, None).await;
            return;
        };
        if started.elapsed() > Duration::from_secs(60) {
            attempt = 0;
        }
        tracing::warn!(%reason, "the agent exited; restarting it");
        hub.child_gone(SHARED, Some(&reason)).await;
    }
}

/// Ends per-session children idle for `idle` with no call in flight.
async fn reap(hub: Arc<Hub>, idle: Duration) {
    let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    loop {
        tokio::select! {
            () = hub.shutdown.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        // A child with a call in flight — a client's or the host's own (a child still starting is
        // being initialised) — is never idle.
        let mut busy: std::collections::HashSet<u64> =
            lock(&hub.routes).calls.values().map(|c| c.child).collect();
        busy.extend(lock(&hub.internal).values().map(|(child, _)| *child));
        for (id, slot) in lock(&hub.children).iter() {
            if !busy.contains(id) && slot.last.elapsed() >= idle {
                tracing::info!(child = id, "ending an idle agent process");
                slot.stop.cancel();
            }
        }
    }
}

async fn accept_loop(listener: TcpListener, hub: Arc<Hub>, expected: String) {
    let slots = Arc::new(tokio::sync::Semaphore::new(hub.limits.max_connections));
    let mut refused_at: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            () = hub.shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        let Ok((tcp, peer)) = accepted else { continue };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Closed at once (dropped); logged at most once a minute.
            if refused_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                refused_at = Some(Instant::now());
                tracing::warn!(%peer, limit = hub.limits.max_connections, "connection limit reached; closing new connections");
            }
            continue;
        };
        let (hub, expected) = (hub.clone(), expected.clone());
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(reason) = serve(tcp, hub, expected).await {
                tracing::info!(%peer, %reason, "connection refused");
            }
        });
    }
}

async fn serve(tcp: TcpStream, hub: Arc<Hub>, expected: String) -> Result<(), String> {
    let ws = crate::handshake::accept_acp(tcp, &expected, 16 << 20, hub.limits.handshake).await?;
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
    // Frames are handled in order on their own task, so this loop keeps reading (and answering the
    // client's pings) while a frame waits for a per-session child to start.
    let (frames, mut queue) = mpsc::channel::<Vec<u8>>(256);
    let worker = {
        let hub = hub.clone();
        tokio::spawn(async move {
            while let Some(frame) = queue.recv().await {
                hub.on_client_frame(conn, &frame).await;
            }
        })
    };
    loop {
        let frame = tokio::select! {
            () = hub.shutdown.cancelled() => break,
            f = stream.next() => f,
        };
        match frame {
            Some(Ok(Message::Text(text))) => {
                let _ = frames.send(text.as_bytes().to_vec()).await;
            }
            Some(Ok(Message::Binary(bytes))) => {
                let _ = frames.send(bytes.to_vec()).await;
            }
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
            Some(Ok(_)) => {}
        }
        if writer.is_finished() {
            // The child exited and this connection was closed from our side.
            break;
        }
    }
    drop(frames);
    worker.abort();
    lock(&hub.routes).conns.remove(&conn);
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
    Ok(())
}
