//! The daemon client: JSON-RPC correlation, typed ACP calls, and the reconnecting connection.
//!
//! One [`DaemonClient`] holds one connection to the daemon — a WebSocket, or a child process's stdio
//! (the transport seam is `transport::Link`) — and multiplexes any number of sessions over
//! it. Inbound frames are classified in arrival order and delivered on one [`EventStream`]; responses
//! to our requests resolve the awaiting call. A `session/prompt` in flight when the connection drops
//! is kept: after reconnecting, the client re-initialises, `session/load`s every session with an open
//! turn and reports [`DaemonEvent::Reconnected`]; the turn then ends with the daemon's vendor
//! "turn complete" notification, or fails with [`Error::SessionLost`]. A child agent that exits takes
//! its turns with it: their prompts fail with [`Error::AgentExited`], the child is started again with
//! the same backoff, and sessions are `session/load`ed lazily before their next prompt (L6) when the
//! agent can load sessions.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::Rng;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::classify::{Classifier, ClassifierStats, Inbound, parse_stop_reason};
use crate::error::Error;
use crate::event::{DaemonEvent, PermissionOutcome, PermissionRequest, StopReason};
use crate::ids::{RequestId, SessionId};
use crate::stdio::AgentCommand;
use crate::transport::{self, Frame, Incoming, Link, Token};
use crate::warn_budget::{self, Verdict, WarnBudget};

/// ACP protocol version this client speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// Answers permission requests without a person, when the caller wants that (yolo, tests).
/// `None` leaves the request to whoever reads the event stream.
pub type PermissionPolicy =
    Arc<dyn Fn(&PermissionRequest) -> Option<PermissionOutcome> + Send + Sync>;

/// How to reach the daemon and how patient to be.
#[derive(Clone)]
pub struct ClientConfig {
    /// `ws://host:port/acp` or `wss://…`; for a child agent, its label (`stdio:<program>`).
    pub url: String,
    /// A child agent spoken to over stdio; when set, `url` and `token` are not used.
    pub command: Option<AgentCommand>,
    /// Bearer token, if the daemon requires one.
    pub token: Option<Token>,
    /// A file holding the bearer token, read again before every connection attempt, so a token
    /// rotated in it (a Kubernetes Secret mounted as a file) is taken at the next reconnect. While
    /// it cannot be read or is blank, `token` is used.
    pub token_file: Option<PathBuf>,
    /// Largest frame accepted (qwen sends a ~570 kB skills list); default 16 MiB.
    pub max_frame_size: usize,
    /// Limit for the handshake; default 10 s.
    pub connect_timeout: Duration,
    /// Limit for requests other than `session/prompt`; default 60 s (qwen's `session/new` takes
    /// seconds).
    pub request_timeout: Duration,
    /// WebSocket ping period (L4); default 20 s.
    pub ping_interval: Duration,
    /// Reconnect when no pong arrives within this (L4); default 10 s.
    pub pong_timeout: Duration,
    /// First reconnect delay; doubled per attempt, with jitter; default 250 ms.
    pub backoff_base: Duration,
    /// Longest reconnect delay; default 30 s.
    pub backoff_cap: Duration,
    /// A connection (or child agent) that stayed up this long resets the backoff; one that drops
    /// sooner (a crash-looping agent that answers `initialize` and exits) keeps doubling it.
    /// Default 10 s.
    pub stable_after: Duration,
    /// Events buffered before the reader waits for the consumer; default 1024.
    pub event_buffer: usize,
    /// Optional automatic answer to permission requests.
    pub permission_policy: Option<PermissionPolicy>,
    /// Mode (`session/set_mode`) applied after every `session/new` and every `session/load` (L6): a
    /// daemon may bring a reloaded session back in its default mode.
    pub session_mode: Option<String>,
    /// The project this daemon serves (`[[projects]]`), logged as `project` with every line the
    /// client writes; `None` in the one-daemon configuration.
    pub project: Option<String>,
    /// The configuration key of this daemon (`daemon`, `projects[name].daemon`), named by the hints
    /// of a refused token and of a workspace mismatch; default `daemon`.
    pub key: String,
    /// The configured working directory (`daemon.cwd`): on every reconnect after the daemon was
    /// first reached, a daemon serving one workspace must serve this one (unset: the workspace it
    /// served when first reached), or the connection is not used and tried again later (L7).
    pub cwd: Option<PathBuf>,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("url", &crate::mask::mask_url(&self.url))
            .field("command", &self.command)
            .field("token", &self.token)
            .field("token_file", &self.token_file)
            .field("max_frame_size", &self.max_frame_size)
            .field("request_timeout", &self.request_timeout)
            .field("ping_interval", &self.ping_interval)
            .field("pong_timeout", &self.pong_timeout)
            .field("permission_policy", &self.permission_policy.is_some())
            .field("session_mode", &self.session_mode)
            .field("project", &self.project)
            .finish_non_exhaustive()
    }
}

impl ClientConfig {
    /// Defaults for `url`.
    #[must_use]
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            command: None,
            token: None,
            token_file: None,
            max_frame_size: 16 << 20,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            ping_interval: Duration::from_secs(20),
            pong_timeout: Duration::from_secs(10),
            backoff_base: Duration::from_millis(250),
            backoff_cap: Duration::from_secs(30),
            stable_after: Duration::from_secs(10),
            event_buffer: 1024,
            permission_policy: None,
            session_mode: None,
            project: None,
            key: "daemon".into(),
            cwd: None,
        }
    }

    /// Defaults for a child agent on stdio.
    #[must_use]
    pub fn stdio(command: AgentCommand) -> Self {
        let mut cfg = Self::new(command.label());
        cfg.command = Some(command);
        cfg
    }

    /// Sets the bearer token.
    #[must_use]
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(Token::new(token));
        self
    }
}

/// The reconnect delay before attempt `attempt` (0-based): exponential, capped, with equal jitter.
#[must_use]
pub fn backoff_delay(base: Duration, cap: Duration, attempt: u32) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.min(20)).min(cap);
    let half = exp / 2;
    let jitter = rand::rng().random_range(0..=half.as_millis().max(1) as u64);
    (half + Duration::from_millis(jitter)).min(cap)
}

/// One content block of a prompt (ACP `ContentBlock`, the kinds the bridge sends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptBlock {
    /// `{type:"text", text}`.
    Text(String),
    /// `{type:"image", mimeType, data}`: `data` is the image's bytes in standard base64.
    Image {
        /// `image/png`, `image/jpeg`, …
        mime_type: String,
        /// Base64 of the bytes.
        data: String,
    },
    /// `{type:"resource_link", uri, name, mimeType?, size?}`: a file the agent can read itself.
    /// Every ACP agent takes these (no capability needed).
    ResourceLink {
        /// `file:///…` for a file on the agent's machine.
        uri: String,
        /// The name a person knows it by.
        name: String,
        /// Its MIME type, when known.
        mime_type: Option<String>,
        /// Its size in bytes, when known.
        size: Option<u64>,
    },
    /// `{type:"resource", resource:{uri, mimeType?, text}}`: a text file's contents embedded in the
    /// prompt. Send only to a daemon whose `initialize` said `promptCapabilities.embeddedContext`.
    Resource {
        /// Where the contents come from (`file:///…`).
        uri: String,
        /// Its MIME type, when known.
        mime_type: Option<String>,
        /// The contents.
        text: String,
    },
}

impl PromptBlock {
    /// The block as ACP writes it.
    #[must_use]
    pub fn to_json(&self) -> Value {
        match self {
            Self::Text(text) => json!({"type": "text", "text": text}),
            Self::Image { mime_type, data } => {
                json!({"type": "image", "mimeType": mime_type, "data": data})
            }
            Self::ResourceLink {
                uri,
                name,
                mime_type,
                size,
            } => {
                let mut block = json!({"type": "resource_link", "uri": uri, "name": name});
                if let Some(m) = mime_type {
                    block["mimeType"] = json!(m);
                }
                if let Some(n) = size {
                    block["size"] = json!(n);
                }
                block
            }
            Self::Resource {
                uri,
                mime_type,
                text,
            } => {
                let mut resource = json!({"uri": uri, "text": text});
                if let Some(m) = mime_type {
                    resource["mimeType"] = json!(m);
                }
                json!({"type": "resource", "resource": resource})
            }
        }
    }
}

/// What `initialize` told us about the daemon.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentInfo {
    /// Protocol version the daemon chose.
    pub protocol_version: u64,
    /// Whether the daemon supports `session/load`.
    pub load_session: bool,
    /// Whether prompts may carry `image` content (`promptCapabilities.image`).
    pub images: bool,
    /// Whether prompts may carry embedded `resource` content (`promptCapabilities.embeddedContext`);
    /// `resource_link` needs no capability.
    pub embedded_context: bool,
    /// The one workspace the daemon serves, when it says (qwen's `_meta.qwen.workspaceCwd`): sessions
    /// in any other directory are refused.
    pub workspace: Option<PathBuf>,
    /// `agentInfo.name`, when the daemon says (the built-in shell agent: `chat-bridge shell-agent`).
    pub name: Option<String>,
}

impl AgentInfo {
    /// The working directory for new sessions: `configured` when it agrees with the workspace the
    /// daemon serves, the daemon's workspace when nothing is configured, `None` when neither says.
    ///
    /// # Errors
    /// [`WorkspaceMismatch`] when the daemon serves one workspace and `configured` is another: every
    /// `session/new` would be refused, so the caller should stop at start-up and say so.
    pub fn session_cwd(
        &self,
        configured: Option<&std::path::Path>,
    ) -> Result<Option<PathBuf>, WorkspaceMismatch> {
        match (configured, &self.workspace) {
            (Some(c), Some(w)) if !same_dir(c, w) => Err(WorkspaceMismatch {
                configured: c.to_path_buf(),
                workspace: w.clone(),
            }),
            (Some(c), _) => Ok(Some(c.to_path_buf())),
            (None, w) => Ok(w.clone()),
        }
    }
}

fn same_dir(a: &std::path::Path, b: &std::path::Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// The configured working directory is not the one workspace the daemon serves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.naming("daemon"))]
pub struct WorkspaceMismatch {
    /// `daemon.cwd`.
    pub configured: PathBuf,
    /// What the daemon reported at `initialize`.
    pub workspace: PathBuf,
}

impl WorkspaceMismatch {
    /// The mismatch, naming the daemon's configuration key (`daemon`, `projects[name].daemon`).
    #[must_use]
    pub fn naming(&self, key: &str) -> String {
        format!(
            "the daemon serves the workspace {} but {key}.cwd is {}: set {key}.cwd to {} or leave it unset",
            self.workspace.display(),
            self.configured.display(),
            self.workspace.display()
        )
    }
}

/// What `session/new` returned.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSession {
    /// The new session.
    pub session: SessionId,
    /// Mode ids the daemon offers (`default`, `yolo`, …), when it said.
    pub modes: Vec<String>,
    /// The mode the session starts in, when it said.
    pub current_mode: Option<String>,
}

/// Connection counters for metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClientStats {
    /// Frame classification counters.
    pub classifier: ClassifierStats,
    /// Successful reconnects.
    pub reconnects: u64,
}

/// Inbound events in arrival order.
#[derive(Debug)]
pub struct EventStream(mpsc::Receiver<DaemonEvent>);

impl EventStream {
    /// The next event; `None` once the client is closed and every event was read.
    pub async fn recv(&mut self) -> Option<DaemonEvent> {
        self.0.recv().await
    }

    /// Waits for the next event, then takes it and every event already waiting, up to `limit` in
    /// all, onto the end of `buffer`, in order. Returns how many were taken: 0 once the client is
    /// closed and every event was read.
    pub async fn recv_many(&mut self, buffer: &mut Vec<DaemonEvent>, limit: usize) -> usize {
        self.0.recv_many(buffer, limit).await
    }
}

/// How the daemon ends the history replay of a `session/load` (L6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplayEnd {
    /// Before it answers the load (shell-agent, the ACP reference agents).
    WithResponse,
    /// After the answer, with a `_qwen/notify` of kind `replay_complete` (qwen-code; it sends the
    /// replay only when the connection next speaks, typically with the next prompt).
    Marker,
}

/// Sessions whose frames are history, not live output.
#[derive(Debug, Default)]
struct Replays {
    active: HashSet<SessionId>,
    /// Loaded sessions waiting for their `replay_complete`, oldest first (the marker names none).
    awaiting_marker: VecDeque<SessionId>,
}

struct Pending {
    method: &'static str,
    session: Option<SessionId>,
    tx: oneshot::Sender<Result<Box<RawValue>, Error>>,
}

/// A prompt whose response was lost with a dropped connection, waiting for the turn to end.
struct Orphan {
    tx: oneshot::Sender<Result<Box<RawValue>, Error>>,
}

struct Shared {
    cfg: ClientConfig,
    next_id: AtomicI64,
    classifier: Mutex<Classifier>,
    /// How many malformed frames are logged a minute (F2, without flooding the log).
    malformed_warnings: Mutex<WarnBudget>,
    pending: Mutex<HashMap<RequestId, Pending>>,
    orphans: Mutex<HashMap<SessionId, Orphan>>,
    cwds: Mutex<HashMap<SessionId, PathBuf>>,
    /// The connection a session was created or loaded on (L6): a daemon may refuse a session on any
    /// other connection.
    bound: Mutex<HashMap<SessionId, u64>>,
    generation: AtomicU64,
    replays: Mutex<Replays>,
    replay_end: Mutex<ReplayEnd>,
    out: Mutex<Option<mpsc::Sender<String>>>,
    /// What the last `initialize` said: capabilities gate `session/load`.
    agent: Mutex<Option<AgentInfo>>,
    /// Whether the current connection is a child process (its exit ends its turns).
    child: std::sync::atomic::AtomicBool,
    events: mpsc::Sender<DaemonEvent>,
    reconnects: AtomicU64,
    /// The workspace sessions open in (`cfg.cwd`, else the one the daemon served when first reached):
    /// a reconnect to a daemon serving another one is not used (L7).
    expected_workspace: Mutex<Option<PathBuf>>,
    shutdown: CancellationToken,
}

/// How many things read from the connection are taken in one go (see `serve_connection`).
const READ_AT_ONCE: usize = 64;

/// The next thing read from `link` when one is ready at once: polled once, with the task's own
/// waker (the one the connection's `select!` registers anyway, so the transport's waker is not
/// swapped back and forth every frame); `None` when nothing is ready.
async fn ready_now(link: &mut Link) -> Option<Incoming> {
    std::future::poll_fn(|cx| {
        let next = std::pin::pin!(link.next());
        std::task::Poll::Ready(match next.poll(cx) {
            std::task::Poll::Ready(incoming) => Some(incoming),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A handle to the daemon connection; cheap to clone.
#[derive(Clone)]
pub struct DaemonClient {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for DaemonClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonClient")
            .field("url", &crate::mask::mask_url(&self.shared.cfg.url))
            .finish_non_exhaustive()
    }
}

impl DaemonClient {
    /// Connects, runs `initialize`, and starts the reconnecting supervisor.
    ///
    /// # Errors
    /// [`Error::Unauthorized`] or [`Error::BadUrl`] (fatal), [`Error::Unreachable`] (retry later),
    /// or the `initialize` call's error.
    pub async fn connect(cfg: ClientConfig) -> Result<(Self, AgentInfo, EventStream), Error> {
        match Self::connect_or_wait(cfg, false).await? {
            (client, Some(info), events) => Ok((client, info, events)),
            // Not waiting: an unreachable daemon was returned as the error above.
            (client, None, _) => {
                client.close();
                Err(Error::ConnectionLost)
            }
        }
    }

    /// [`DaemonClient::connect`], except that with `wait` a daemon that cannot be reached yet
    /// ([`Error::Unreachable`]: nothing listens, DNS, a timeout) is not an error: the client starts
    /// disconnected, keeps trying with the reconnect backoff, and reports
    /// [`DaemonEvent::Reconnected`] once it is up and initialized. The [`AgentInfo`] is `None` then
    /// ([`DaemonClient::agent_info`] has it once the daemon was reached). A refused token, a bad
    /// URL, an agent command that cannot start and a failed `initialize` at start-up are still
    /// errors; once started, a refused token and a daemon serving another workspace than `cwd` are
    /// said at error and tried again on the backoff (L7).
    ///
    /// # Errors
    /// As [`DaemonClient::connect`], without [`Error::Unreachable`] when `wait`ing.
    pub async fn connect_or_wait(
        cfg: ClientConfig,
        wait: bool,
    ) -> Result<(Self, Option<AgentInfo>, EventStream), Error> {
        let (events, rx) = mpsc::channel(cfg.event_buffer.max(1));
        let expected_workspace = Mutex::new(cfg.cwd.clone());
        let shared = Arc::new(Shared {
            cfg,
            next_id: AtomicI64::new(1),
            classifier: Mutex::new(Classifier::new()),
            pending: Mutex::new(HashMap::new()),
            orphans: Mutex::new(HashMap::new()),
            cwds: Mutex::new(HashMap::new()),
            bound: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            replays: Mutex::new(Replays::default()),
            replay_end: Mutex::new(ReplayEnd::WithResponse),
            malformed_warnings: Mutex::new(WarnBudget::new()),
            out: Mutex::new(None),
            agent: Mutex::new(None),
            child: std::sync::atomic::AtomicBool::new(false),
            events,
            reconnects: AtomicU64::new(0),
            expected_workspace,
            shutdown: CancellationToken::new(),
        });
        let client = Self {
            shared: shared.clone(),
        };
        let link = match shared.open().await {
            Ok(link) => link,
            Err(e @ Error::Unreachable { .. }) if wait => {
                tracing::warn!(project = shared.cfg.project.as_deref(), error = %e, "the agent daemon cannot be reached yet; starting without it and retrying");
                tokio::spawn(Shared::supervise(shared, None));
                return Ok((client, None, EventStream(rx)));
            }
            Err(e) => return Err(e),
        };
        let mut io = Shared::spawn_connection(&shared, link);
        // An agent that exits (or a daemon that hangs up) before answering fails start-up at once,
        // with how it ended, instead of after the request timeout.
        let first = tokio::select! {
            r = client.initialize() => r,
            ended = &mut io => {
                let reason = ended.unwrap_or_else(|e| format!("connection task failed: {e}"));
                Err(match &shared.cfg.command {
                    Some(c) => Error::Spawn { command: c.label(), reason },
                    None => Error::ConnectionLost,
                })
            }
        };
        let info = match first {
            Ok(info) => info,
            // A daemon that hangs up before it answers — restarting, or an agent-host whose agent
            // just ended — is waited for like one that does not listen yet (L7).
            Err(e @ Error::ConnectionLost) if wait => {
                tracing::warn!(project = shared.cfg.project.as_deref(), error = %e, "the agent daemon hung up before answering; starting without it and retrying");
                io.abort();
                shared.on_disconnect("hung up before answering");
                tokio::spawn(Shared::supervise(shared, None));
                return Ok((client, None, EventStream(rx)));
            }
            Err(e) => {
                shared.shutdown.cancel();
                return Err(e);
            }
        };
        shared.mark_reached(&info);
        tokio::spawn(Shared::supervise(shared, Some(io)));
        Ok((client, Some(info), EventStream(rx)))
    }

    /// Closes the connection; the event stream ends with [`DaemonEvent::Closed`].
    pub fn close(&self) {
        self.shared.shutdown.cancel();
    }

    /// Counters for metrics.
    #[must_use]
    pub fn stats(&self) -> ClientStats {
        ClientStats {
            classifier: lock(&self.shared.classifier).stats(),
            reconnects: self.shared.reconnects.load(Ordering::Relaxed),
        }
    }

    /// What the latest `initialize` said — the one of the current connection, since the client
    /// initializes again on every reconnect (a daemon may come back with other capabilities).
    #[must_use]
    pub fn agent_info(&self) -> Option<AgentInfo> {
        lock(&self.shared.agent).clone()
    }

    /// `initialize` with protocol version 1 and no client-side fs/terminal capabilities.
    ///
    /// # Errors
    /// Transport or daemon errors, as [`Error`].
    pub async fn initialize(&self) -> Result<AgentInfo, Error> {
        self.shared.initialize().await
    }

    /// `session/new` in `cwd`.
    ///
    /// # Errors
    /// Transport or daemon errors; [`Error::BadResponse`] without a valid `sessionId`.
    pub async fn new_session(&self, cwd: impl Into<PathBuf>) -> Result<NewSession, Error> {
        let cwd = cwd.into();
        let v = self
            .shared
            .call("session/new", None, json!({"cwd": cwd, "mcpServers": []}))
            .await?;
        let v: Value = serde_json::from_str(v.get()).map_err(|e| Error::BadResponse {
            method: "session/new",
            reason: e.to_string(),
        })?;
        let session = v
            .get("sessionId")
            .and_then(Value::as_str)
            .and_then(|s| SessionId::parse(s).ok())
            .ok_or_else(|| Error::BadResponse {
                method: "session/new",
                reason: "no sessionId".into(),
            })?;
        let modes = v
            .pointer("/modes/availableModes")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|m| m.get("id")?.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let current_mode = v
            .pointer("/modes/currentModeId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        lock(&self.shared.cwds).insert(session.clone(), cwd);
        self.shared.bind(&session);
        self.shared.apply_mode(&session).await;
        Ok(NewSession {
            session,
            modes,
            current_mode,
        })
    }

    /// `session/load`: binds the session to this connection and re-applies `session_mode` (L6). The
    /// daemon's replay of the session's history arrives on the event stream as
    /// [`DaemonEvent::Replayed`].
    ///
    /// # Errors
    /// [`Error::Rpc`] when the daemon does not know the session; transport errors.
    pub async fn load_session(
        &self,
        session: &SessionId,
        cwd: impl Into<PathBuf>,
    ) -> Result<(), Error> {
        let cwd = cwd.into();
        self.shared.load(session, &cwd).await?;
        lock(&self.shared.cwds).insert(session.clone(), cwd);
        Ok(())
    }

    /// Whether `session` was created or loaded on the current connection. A session that is not must be
    /// `session/load`ed before its next prompt (L6): after a reconnect, qwen refuses it otherwise.
    #[must_use]
    pub fn is_bound(&self, session: &SessionId) -> bool {
        let generation = self.shared.generation.load(Ordering::SeqCst);
        lock(&self.shared.bound).get(session) == Some(&generation)
    }

    /// `session/set_mode`.
    ///
    /// # Errors
    /// Transport or daemon errors.
    pub async fn set_mode(&self, session: &SessionId, mode: &str) -> Result<(), Error> {
        self.shared.set_mode(session, mode).await
    }

    /// `session/prompt` with one text block; resolves when the turn ends (no request timeout: the
    /// bridge's liveness limits govern turns). [`DaemonEvent::TurnEnded`] is also emitted on the
    /// event stream, after every event of the turn.
    ///
    /// # Errors
    /// Daemon errors; [`Error::SessionLost`] if a reconnect found the session gone; [`Error::Closed`].
    pub async fn prompt(&self, session: &SessionId, text: &str) -> Result<StopReason, Error> {
        self.prompt_content(session, &[PromptBlock::Text(text.to_owned())])
            .await
    }

    /// `session/prompt` with several content blocks (text, images); waits for its `stopReason`.
    /// Send images only to a daemon whose `initialize` said `promptCapabilities.image`.
    ///
    /// # Errors
    /// As [`DaemonClient::prompt`].
    pub async fn prompt_content(
        &self,
        session: &SessionId,
        blocks: &[PromptBlock],
    ) -> Result<StopReason, Error> {
        let prompt: Vec<Value> = blocks.iter().map(PromptBlock::to_json).collect();
        let params = json!({"sessionId": session, "prompt": prompt});
        let raw = self
            .shared
            .call("session/prompt", Some(session.clone()), params)
            .await?;
        parse_stop_reason(&raw).map_err(|reason| Error::BadResponse {
            method: "session/prompt",
            reason,
        })
    }

    /// `session/cancel` (a notification: the prompt then ends with `cancelled`).
    ///
    /// # Errors
    /// [`Error::ConnectionLost`] when no connection is up.
    pub async fn cancel(&self, session: &SessionId) -> Result<(), Error> {
        self.shared.send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})).await
    }

    /// Answers a `session/request_permission` request.
    ///
    /// # Errors
    /// [`Error::ConnectionLost`] when no connection is up.
    pub async fn answer_permission(
        &self,
        id: &RequestId,
        outcome: &PermissionOutcome,
    ) -> Result<(), Error> {
        self.shared.send(permission_answer(id, outcome)).await
    }
}

fn permission_answer(id: &RequestId, outcome: &PermissionOutcome) -> Value {
    let outcome = match outcome {
        PermissionOutcome::Selected(option) => json!({"outcome": "selected", "optionId": option}),
        PermissionOutcome::Cancelled => json!({"outcome": "cancelled"}),
    };
    json!({"jsonrpc": "2.0", "id": id, "result": {"outcome": outcome}})
}

/// The token in `path` (trailing whitespace ignored), or `None`, said at warn, when the file
/// cannot be read or is blank: the token read before is used then.
fn read_token(path: &std::path::Path, key: &str) -> Option<Token> {
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => Some(Token::new(text.trim().to_owned())),
        Ok(_) => {
            tracing::warn!(file = %path.display(), "{key}.token_file is empty now; connecting with the token read before");
            None
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e.kind(), "{key}.token_file cannot be read now; connecting with the token read before");
            None
        }
    }
}

impl Shared {
    async fn open(&self) -> Result<Link, Error> {
        let c = &self.cfg;
        if let Some(command) = &c.command {
            return crate::stdio::spawn(command, c.max_frame_size)
                .map(|l| Link::Stdio(Box::new(l)));
        }
        let fresh = c
            .token_file
            .as_deref()
            .and_then(|path| read_token(path, &c.key));
        transport::connect(
            &c.url,
            fresh.as_ref().or(c.token.as_ref()),
            c.max_frame_size,
            c.connect_timeout,
        )
        .await
        .map(|ws| Link::Ws(Box::new(ws)))
        .map_err(|e| match e {
            Error::Unauthorized { url, status, .. } => Error::Unauthorized {
                url,
                status,
                key: c.key.clone(),
            },
            e => e,
        })
    }

    async fn send(&self, msg: Value) -> Result<(), Error> {
        let tx = self.sender().await?;
        tx.send(msg.to_string())
            .await
            .map_err(|_| Error::ConnectionLost)
    }

    /// The current connection's writer. While a child agent is being started again (a matter of a
    /// backoff step and a spawn), a call waits for it up to `connect_timeout` rather than failing:
    /// a message sent just after the child died runs on the next one.
    async fn sender(&self) -> Result<mpsc::Sender<String>, Error> {
        let deadline = Instant::now() + self.cfg.connect_timeout;
        loop {
            if let Some(tx) = lock(&self.out).clone() {
                return Ok(tx);
            }
            if !self.child.load(Ordering::SeqCst)
                || self.shutdown.is_cancelled()
                || Instant::now() >= deadline
            {
                return Err(Error::ConnectionLost);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    async fn call(
        &self,
        method: &'static str,
        session: Option<SessionId>,
        params: Value,
    ) -> Result<Box<RawValue>, Error> {
        let id = RequestId::Number(self.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(
            id.clone(),
            Pending {
                method,
                session,
                tx,
            },
        );
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if let Err(e) = self.send(frame).await {
            lock(&self.pending).remove(&id);
            return Err(e);
        }
        let answer = if method == "session/prompt" {
            rx.await.map_err(|_| Error::Closed)
        } else {
            match tokio::time::timeout(self.cfg.request_timeout, rx).await {
                Ok(r) => r.map_err(|_| Error::Closed),
                Err(_) => {
                    lock(&self.pending).remove(&id);
                    return Err(Error::Timeout {
                        method,
                        timeout: self.cfg.request_timeout,
                    });
                }
            }
        };
        answer?
    }

    async fn initialize(&self) -> Result<AgentInfo, Error> {
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false},
            "clientInfo": {"name": "chat-bridge", "version": env!("CARGO_PKG_VERSION")},
        });
        let raw = self.call("initialize", None, params).await?;
        let v: Value = serde_json::from_str(raw.get()).map_err(|e| Error::BadResponse {
            method: "initialize",
            reason: e.to_string(),
        })?;
        let protocol_version = v
            .get("protocolVersion")
            .and_then(Value::as_u64)
            .ok_or_else(|| Error::BadResponse {
                method: "initialize",
                reason: "no protocolVersion".into(),
            })?;
        let load_session = v
            .pointer("/agentCapabilities/loadSession")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let images = v
            .pointer("/agentCapabilities/promptCapabilities/image")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let embedded_context = v
            .pointer("/agentCapabilities/promptCapabilities/embeddedContext")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let qwen = v.pointer("/agentCapabilities/_meta/qwen");
        let workspace = qwen
            .and_then(|q| q.get("workspaceCwd"))
            .and_then(Value::as_str)
            .filter(|w| !w.is_empty())
            .map(PathBuf::from);
        *lock(&self.replay_end) = if qwen.is_some() {
            ReplayEnd::Marker
        } else {
            ReplayEnd::WithResponse
        };
        let name = v
            .pointer("/agentInfo/name")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let info = AgentInfo {
            protocol_version,
            load_session,
            images,
            embedded_context,
            workspace,
            name,
        };
        *lock(&self.agent) = Some(info.clone());
        Ok(info)
    }

    /// `session/load`; its replay is marked as such from the moment the request is sent (L6).
    async fn load(&self, session: &SessionId, cwd: &std::path::Path) -> Result<(), Error> {
        if lock(&self.agent).as_ref().is_some_and(|a| !a.load_session) {
            // Asking would only earn a "method not found": answer as the agent would.
            return Err(Error::Rpc {
                method: "session/load",
                code: -32601,
                message: "the agent cannot load sessions (no loadSession capability)".into(),
            });
        }
        lock(&self.replays).active.insert(session.clone());
        let loaded = self
            .call(
                "session/load",
                Some(session.clone()),
                json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
            )
            .await;
        if loaded.is_err() {
            let mut replays = lock(&self.replays);
            replays.active.remove(session);
            replays.awaiting_marker.retain(|s| s != session);
        }
        loaded?;
        self.bind(session);
        self.apply_mode(session).await;
        Ok(())
    }

    fn bind(&self, session: &SessionId) {
        let generation = self.generation.load(Ordering::SeqCst);
        lock(&self.bound).insert(session.clone(), generation);
    }

    /// Applies `session_mode` (L6). A refusal is logged, not fatal: the session still works, and the
    /// person sees approval requests they did not expect rather than nothing at all.
    async fn apply_mode(&self, session: &SessionId) {
        let Some(mode) = self.cfg.session_mode.as_deref() else {
            return;
        };
        if let Err(e) = self.set_mode(session, mode).await {
            tracing::warn!(error = %e, %mode, session = %session, "could not set the session mode");
        }
    }

    async fn set_mode(&self, session: &SessionId, mode: &str) -> Result<(), Error> {
        self.call(
            "session/set_mode",
            Some(session.clone()),
            json!({"sessionId": session, "modeId": mode}),
        )
        .await
        .map(drop)
    }

    /// F2: a malformed frame is logged at warn with its session — at most
    /// [`warn_budget::PER_MINUTE`] a minute, the rest counted (the metrics count every one).
    fn warn_malformed(&self, session: Option<&SessionId>, reason: &str) {
        let session = session.map(SessionId::as_str);
        match lock(&self.malformed_warnings).take(Instant::now()) {
            Verdict::Log { skipped } => {
                if skipped > 0 {
                    tracing::warn!(
                        skipped,
                        "malformed frames from the daemon skipped in the last minute without a line of their own"
                    );
                }
                tracing::warn!(session, %reason, "malformed frame from the daemon skipped");
            }
            Verdict::LogLast => {
                tracing::warn!(session, %reason, "malformed frame from the daemon skipped");
                tracing::warn!(
                    per_minute = warn_budget::PER_MINUTE,
                    "more malformed frames from the daemon: the rest of this minute's are counted (chatbridge_malformed_frames_total), not logged each"
                );
            }
            Verdict::Count => {}
        }
    }

    /// Marks a replayed frame as history; ends the replay at the daemon's marker, naming the
    /// session whose replay it ended.
    fn replayed(&self, event: DaemonEvent) -> (DaemonEvent, Option<SessionId>) {
        if let DaemonEvent::Other {
            kind: Some(kind), ..
        } = &event
            && kind == "replay_complete"
        {
            let mut replays = lock(&self.replays);
            let done = replays.awaiting_marker.pop_front();
            if let Some(done) = &done {
                replays.active.remove(done);
            }
            return (event, done);
        }
        let Some(session) = event.session() else {
            return (event, None);
        };
        if !lock(&self.replays).active.contains(session) {
            return (event, None);
        }
        let event = DaemonEvent::Replayed {
            session: session.clone(),
            event: Box::new(event),
        };
        (event, None)
    }

    async fn emit(&self, event: DaemonEvent) {
        // What was folded came first.
        self.hand_on_folded().await;
        // A closed receiver means nobody listens any more; there is nobody left to tell.
        let _ = self.events.send(event).await;
    }

    /// Hands on the heartbeats folded so far, one event per call.
    async fn hand_on_folded(&self) {
        let folded: Vec<DaemonEvent> = {
            let mut classifier = lock(&self.classifier);
            let fold = classifier.fold();
            if fold.is_empty() {
                return;
            }
            fold.take().collect()
        };
        for event in folded {
            let _ = self.events.send(event).await;
        }
    }

    /// A heartbeat is folded with the others of its call read in this burst (handed on when the
    /// connection has no frame waiting, or when the fold is full); any other event is handed on
    /// after them.
    async fn fold_or_emit(&self, event: DaemonEvent) {
        let (other, full) = {
            let mut classifier = lock(&self.classifier);
            let fold = classifier.fold();
            (fold.add(event), fold.full())
        };
        match other {
            Some(event) => self.emit(event).await,
            None if full => self.hand_on_folded().await,
            None => {}
        }
    }

    fn spawn_connection(this: &Arc<Self>, link: Link) -> JoinHandle<String> {
        let (tx, rx) = mpsc::channel(256);
        this.child.store(link.is_child(), Ordering::SeqCst);
        this.generation.fetch_add(1, Ordering::SeqCst);
        *lock(&this.replays) = Replays::default();
        *lock(&this.out) = Some(tx);
        tokio::spawn(Self::run_connection(this.clone(), link, rx))
    }

    /// Reads and writes one connection until it ends; returns why it ended.
    async fn run_connection(self: Arc<Self>, link: Link, out: mpsc::Receiver<String>) -> String {
        let reason = self.serve_connection(link, out).await;
        let skipped = lock(&self.malformed_warnings).take_skipped();
        if skipped > 0 {
            tracing::warn!(
                skipped,
                "malformed frames from the daemon skipped without a line of their own before the connection ended"
            );
        }
        if self.shutdown.is_cancelled() {
            // Closing: like the frames left unread, folded heartbeats are not handed on to a
            // bridge that is stopping (they are counts, and its turns are taken back at start).
            drop(lock(&self.classifier).fold().take());
        } else {
            self.hand_on_folded().await;
        }
        reason
    }

    async fn serve_connection(&self, mut link: Link, mut out: mpsc::Receiver<String>) -> String {
        let mut ping = tokio::time::interval_at(
            Instant::now() + self.cfg.ping_interval,
            self.cfg.ping_interval,
        );
        let pings = link.pings();
        let mut pong_deadline: Option<Instant> = None;
        loop {
            let pong_wait = async {
                match pong_deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let folded = !lock(&self.classifier).fold().is_empty();
            // In this order: the frames waiting to be read come before the heartbeats folded from
            // the ones read, which are handed on once none is waiting.
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => {
                    link.close().await;
                    return "client closed".into();
                }
                msg = out.recv() => {
                    let Some(msg) = msg else {
                        link.close().await;
                        return "client closed".into();
                    };
                    if let Err(e) = link.send(msg).await {
                        link.close().await;
                        return e;
                    }
                }
                _ = ping.tick(), if pings => {
                    if let Err(e) = link.ping().await {
                        return e;
                    }
                    pong_deadline.get_or_insert(Instant::now() + self.cfg.pong_timeout);
                }
                () = pong_wait => {
                    return format!("no pong within {:?}", self.cfg.pong_timeout);
                }
                incoming = link.next() => {
                    // The frames already read off the connection are taken here, not one per
                    // turn of this `select!`: setting its futures up again for every frame
                    // (the shutdown's, the queue's, the timers') cost more than a heartbeat's
                    // classification. A few at a time, so what we send, pings and a shutdown
                    // keep their turn.
                    let mut incoming = incoming;
                    let mut taken = 0;
                    loop {
                        if let Some(reason) =
                            self.take_incoming(&mut link, &mut pong_deadline, incoming).await
                        {
                            return reason;
                        }
                        taken += 1;
                        // A shutdown is seen at the next turn, at most this many frames later.
                        if taken == READ_AT_ONCE {
                            break;
                        }
                        match ready_now(&mut link).await {
                            Some(next) => incoming = next,
                            None => break,
                        }
                    }
                }
                () = std::future::ready(()), if folded => self.hand_on_folded().await,
            }
        }
    }

    /// Acts on one thing read from the connection; `Some(reason)` when it ended the connection.
    async fn take_incoming(
        &self,
        link: &mut Link,
        pong_deadline: &mut Option<Instant>,
        incoming: Incoming,
    ) -> Option<String> {
        match incoming {
            Incoming::Pong => *pong_deadline = None,
            Incoming::Nothing => {}
            Incoming::Ended(reason) => {
                link.close().await;
                return Some(reason);
            }
            Incoming::TooBig(reason) => {
                link.close_too_big().await;
                return Some(reason);
            }
            frame => {
                if let Some(frame) = frame.frame() {
                    self.handle_frame(frame).await;
                }
            }
        }
        None
    }

    async fn handle_frame(&self, frame: Frame<'_>) {
        let inbound = match frame {
            // While no session replays its history, a heartbeat is folded as it is classified,
            // under the one lock (a replayed one is marked history first, below).
            Frame::Text(text) if lock(&self.replays).active.is_empty() => {
                let classified = {
                    let mut classifier = lock(&self.classifier);
                    classifier
                        .classify_folding(text)
                        .ok_or_else(|| classifier.fold().full())
                };
                match classified {
                    Ok(inbound) => inbound,
                    Err(full) => {
                        if full {
                            self.hand_on_folded().await;
                        }
                        return;
                    }
                }
            }
            Frame::Text(text) => lock(&self.classifier).classify_text(text),
            Frame::Bytes(bytes) => lock(&self.classifier).classify(bytes),
        };
        match inbound {
            Inbound::Event(event) => {
                if let DaemonEvent::Malformed { session, reason } = &event {
                    self.warn_malformed(session.as_ref(), reason);
                }
                let (event, ended) = self.replayed(event);
                self.fold_or_emit(event).await;
                if let Some(session) = ended {
                    self.emit(DaemonEvent::ReplayEnded { session }).await;
                }
            }
            Inbound::VendorTurnComplete {
                event,
                session,
                stop_reason,
            } => {
                // A load's replay of an old turn's end is history like the rest of it (L6, D6).
                let (event, _) = self.replayed(event);
                self.emit(event).await;
                let orphan = lock(&self.orphans).remove(&session);
                if let Some(orphan) = orphan {
                    self.emit(DaemonEvent::TurnEnded {
                        session,
                        stop_reason: stop_reason.clone(),
                    })
                    .await;
                    let raw = serde_json::value::to_raw_value(
                        &json!({"stopReason": stop_reason.as_str()}),
                    )
                    .map_err(|e| Error::BadResponse {
                        method: "session/prompt",
                        reason: e.to_string(),
                    });
                    let _ = orphan.tx.send(raw);
                }
            }
            Inbound::Request { id, method, event } => self.handle_request(id, &method, event).await,
            Inbound::Response { id, result } => {
                let Some(pending) = lock(&self.pending).remove(&id) else {
                    tracing::debug!(%id, "response to an unknown or timed-out request ignored");
                    return;
                };
                let result = result.map_err(|e| {
                    // agent-host answers the calls of an agent process that died with how it
                    // ended: the turn went with it, as with a child of our own.
                    match e.data.as_ref().and_then(|d| d.get("agentExited")) {
                        Some(how) if pending.method == "session/prompt" => Error::AgentExited {
                            reason: how.as_str().unwrap_or(&e.message).to_owned(),
                        },
                        _ => Error::Rpc {
                            method: pending.method,
                            code: e.code,
                            message: e.message,
                        },
                    }
                });
                // The replay's end is decided here, in frame order, not when the caller wakes up.
                if pending.method == "session/load"
                    && let Some(session) = &pending.session
                {
                    let end = *lock(&self.replay_end);
                    {
                        let mut replays = lock(&self.replays);
                        if result.is_ok() && end == ReplayEnd::Marker {
                            replays.awaiting_marker.push_back(session.clone());
                        } else {
                            replays.active.remove(session);
                        }
                    }
                    if result.is_ok() && end == ReplayEnd::WithResponse {
                        // Every replayed frame came before the answer.
                        self.emit(DaemonEvent::ReplayEnded {
                            session: session.clone(),
                        })
                        .await;
                    }
                }
                if pending.method == "session/prompt"
                    && let (Ok(raw), Some(session)) = (&result, &pending.session)
                    && let Ok(stop_reason) = parse_stop_reason(raw)
                {
                    let session = session.clone();
                    self.emit(DaemonEvent::TurnEnded {
                        session,
                        stop_reason,
                    })
                    .await;
                }
                let _ = pending.tx.send(result);
            }
        }
    }

    async fn handle_request(&self, id: RequestId, method: &str, event: DaemonEvent) {
        let answer = match &event {
            DaemonEvent::PermissionRequested(req) => {
                let auto = self.cfg.permission_policy.as_ref().and_then(|p| p(req));
                auto.map(|outcome| permission_answer(&id, &outcome))
            }
            DaemonEvent::Malformed { reason, .. } => {
                tracing::warn!(%method, %reason, "malformed request from the daemon answered with invalid params");
                Some(
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": reason}}),
                )
            }
            _ => Some(
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("method not found: {method}")}}),
            ),
        };
        self.emit(event).await;
        if let Some(answer) = answer
            && let Err(e) = self.send(answer).await
        {
            tracing::warn!(%method, error = %e, "could not answer a daemon request");
        }
    }

    /// Fails in-flight calls when a connection ends; prompts become orphans that wait for the turn —
    /// unless the connection was a child process: its turns ended with it, and their prompts fail
    /// with [`Error::AgentExited`].
    fn on_disconnect(&self, reason: &str) {
        *lock(&self.out) = None;
        let pending: Vec<_> = lock(&self.pending).drain().collect();
        let child = self.child.load(Ordering::SeqCst);
        let mut orphans = lock(&self.orphans);
        for (_, p) in pending {
            match (p.method, p.session) {
                ("session/prompt", Some(_)) if child && !self.shutdown.is_cancelled() => {
                    let _ = p.tx.send(Err(Error::AgentExited {
                        reason: reason.to_owned(),
                    }));
                }
                ("session/prompt", Some(session)) => {
                    orphans.insert(session, Orphan { tx: p.tx });
                }
                _ => {
                    let _ = p.tx.send(Err(Error::ConnectionLost));
                }
            }
        }
    }

    fn fail_orphans(&self, error: impl Fn() -> Error) {
        for (_, o) in lock(&self.orphans).drain() {
            let _ = o.tx.send(Err(error()));
        }
    }

    /// The daemon was reached and accepted: later reconnects are checked against what it served.
    fn mark_reached(&self, info: &AgentInfo) {
        let mut expected = lock(&self.expected_workspace);
        if expected.is_none() {
            expected.clone_from(&info.workspace);
        }
    }

    /// After a reconnect, or the first connection of a client started without its daemon:
    /// `initialize`, then `session/load` each session with an open turn. A daemon that serves
    /// another workspace than the sessions' (`cwd`, else the one it served when first reached) is
    /// not used (L7): every `session/new` and `session/load` would be refused, and the held prompts
    /// with them. It is tried again on the backoff, so one project's daemon in the wrong place does
    /// not stop the bridge and the others with it.
    async fn resume(&self) -> Result<(), Error> {
        let info = self.initialize().await?;
        let expected = lock(&self.expected_workspace).clone();
        if let Some(expected) = expected
            && let Err(m) = info.session_cwd(Some(&expected))
        {
            return Err(Error::WorkspaceChanged {
                key: self.cfg.key.clone(),
                workspace: m.workspace,
                expected: m.configured,
            });
        }
        self.mark_reached(&info);
        let open: Vec<SessionId> = lock(&self.orphans).keys().cloned().collect();
        let mut resumed = Vec::new();
        let mut lost = Vec::new();
        for session in open {
            let cwd = lock(&self.cwds)
                .get(&session)
                .cloned()
                .unwrap_or_else(|| PathBuf::from("."));
            match self.load(&session, &cwd).await {
                Ok(()) => resumed.push(session),
                Err(Error::Rpc { message, .. }) => {
                    if let Some(o) = lock(&self.orphans).remove(&session) {
                        let _ = o.tx.send(Err(Error::SessionLost {
                            session: session.to_string(),
                            message: message.clone(),
                        }));
                    }
                    lost.push((session, message));
                }
                Err(e) => return Err(e),
            }
        }
        self.reconnects.fetch_add(1, Ordering::Relaxed);
        self.emit(DaemonEvent::Reconnected { resumed, lost }).await;
        Ok(())
    }

    /// Watches the connection `io` and connects again whenever it ends; with `None` it starts by
    /// connecting (the daemon could not be reached at start-up).
    async fn supervise(self: Arc<Self>, mut io: Option<JoinHandle<String>>) {
        // Kept across connections: only one that stayed up `stable_after` starts the backoff over.
        let mut attempt = 0u32;
        let mut up_since = tokio::time::Instant::now();
        loop {
            if let Some(current) = io.as_mut() {
                let reason = current
                    .await
                    .unwrap_or_else(|e| format!("connection task failed: {e}"));
                if up_since.elapsed() >= self.cfg.stable_after {
                    attempt = 0;
                }
                self.on_disconnect(&reason);
                if self.shutdown.is_cancelled() {
                    self.fail_orphans(|| Error::Closed);
                    self.emit(DaemonEvent::Closed { reason }).await;
                    return;
                }
                tracing::warn!(project = self.cfg.project.as_deref(), %reason, url = %crate::mask::mask_url(&self.cfg.url), "daemon connection lost; reconnecting");
                self.emit(DaemonEvent::Disconnected { reason }).await;
            }
            io = Some(loop {
                let delay = backoff_delay(self.cfg.backoff_base, self.cfg.backoff_cap, attempt);
                attempt = attempt.saturating_add(1);
                tokio::select! {
                    () = self.shutdown.cancelled() => {
                        self.fail_orphans(|| Error::Closed);
                        self.emit(DaemonEvent::Closed { reason: "client closed".into() }).await;
                        return;
                    }
                    () = tokio::time::sleep(delay) => {}
                }
                match self.open().await {
                    Ok(link) => {
                        let mut io = Self::spawn_connection(&self, link);
                        // A daemon that hangs up before answering is a failed attempt now, not a
                        // wait for the request timeout.
                        let resumed = tokio::select! {
                            r = self.resume() => r,
                            ended = &mut io => {
                                let reason = ended.unwrap_or_else(|e| format!("connection task failed: {e}"));
                                tracing::warn!(project = self.cfg.project.as_deref(), %reason, attempt, "the daemon hung up before answering initialize");
                                Err(Error::ConnectionLost)
                            }
                        };
                        match resumed {
                            Ok(()) => {
                                up_since = tokio::time::Instant::now();
                                break io;
                            }
                            Err(e) => {
                                if matches!(e, Error::WorkspaceChanged { .. }) {
                                    tracing::error!(project = self.cfg.project.as_deref(), error = %e, attempt, "the daemon is back serving another workspace; not using it, retrying");
                                } else {
                                    tracing::warn!(project = self.cfg.project.as_deref(), error = %e, attempt, "re-initialising the daemon connection failed");
                                }
                                io.abort();
                                self.on_disconnect("re-initialising failed");
                            }
                        }
                    }
                    // A refused token after start-up is a daemon redeployed with another one (or a
                    // Secret being rotated), or one first reached after start-up with a token it
                    // does not take: said at error on every attempt, and tried again on the backoff
                    // until it is accepted (L7) — one project's daemon does not stop the bridge and
                    // the other projects with it. At start-up itself it is a configuration error.
                    Err(e @ Error::Unauthorized { .. }) => {
                        if self.cfg.token_file.is_some() {
                            tracing::error!(project = self.cfg.project.as_deref(), error = %e, attempt, "the daemon refused our credentials; retrying, with the token file read again each time");
                        } else {
                            tracing::error!(project = self.cfg.project.as_deref(), error = %e, attempt, "the daemon refused our credentials; retrying (the token was given at start-up: restart the bridge after changing it, or use a token file)");
                        }
                    }
                    Err(e @ Error::BadUrl { .. }) => {
                        tracing::error!(project = self.cfg.project.as_deref(), error = %e, "giving up on the daemon connection");
                        self.fail_orphans(|| Error::Closed);
                        self.emit(DaemonEvent::Closed {
                            reason: e.to_string(),
                        })
                        .await;
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(project = self.cfg.project.as_deref(), error = %e, attempt, "reconnect attempt failed")
                    }
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s1_a_token_file_read_again_gives_its_token_and_nothing_when_blank_or_gone() {
        let dir = std::env::temp_dir().join(format!("cb-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("token");
        std::fs::write(&file, "rotated\n").expect("write");
        assert_eq!(
            read_token(&file, "daemon").as_ref().map(Token::expose),
            Some("rotated")
        );
        std::fs::write(&file, " \n").expect("write");
        assert!(
            read_token(&file, "daemon").is_none(),
            "a blank file is never a blank token (S1)"
        );
        std::fs::remove_file(&file).expect("remove");
        assert!(
            read_token(&file, "daemon").is_none(),
            "gone: the token read before stays"
        );
        let _ = std::fs::remove_dir(&dir);
    }

    #[test]
    fn prompt_blocks_are_written_as_acp_names_them() {
        let link = PromptBlock::ResourceLink {
            uri: "file:///w/a.log".into(),
            name: "a.log".into(),
            mime_type: Some("text/plain".into()),
            size: Some(12),
        };
        assert_eq!(
            link.to_json(),
            json!({"type": "resource_link", "uri": "file:///w/a.log", "name": "a.log",
                "mimeType": "text/plain", "size": 12})
        );
        let bare = PromptBlock::ResourceLink {
            uri: "file:///w/b".into(),
            name: "b".into(),
            mime_type: None,
            size: None,
        };
        assert_eq!(
            bare.to_json(),
            json!({"type": "resource_link", "uri": "file:///w/b", "name": "b"})
        );
        let embedded = PromptBlock::Resource {
            uri: "file:///w/a.log".into(),
            mime_type: Some("text/plain".into()),
            text: "error\n".into(),
        };
        assert_eq!(
            embedded.to_json(),
            json!({"type": "resource", "resource": {"uri": "file:///w/a.log",
                "mimeType": "text/plain", "text": "error\n"}})
        );
    }
}
