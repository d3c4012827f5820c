//! The ACP server: WebSocket on `/acp` with a bearer token, JSON-RPC dispatch, and the prompt turn
//! that runs one command (H1, H3, T1–T3, approvals).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use secrecy::{ExposeSecret, SecretString};

use crate::duration::{format_duration, parse_duration};
use crate::runner::{self, RunOutcome, RunResult, RunSpec, RunUpdate};
use crate::session::{Conn, Session, lock};

/// How the agent runs commands.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Heartbeat period while a command is silent (H2); zero disables. Default 10 s.
    pub heartbeat_interval: Duration,
    /// Timeout for commands that do not set one (`timeout=…`); zero means none. Default 10 min.
    pub default_timeout: Duration,
    /// Output kept per call (T4). Default 1 MiB.
    pub output_cap: usize,
    /// Ask `session/request_permission` before each command.
    pub require_approval: bool,
    /// SIGTERM → SIGKILL grace when ending a process group. Default 2 s.
    pub kill_grace: Duration,
    /// Largest inbound frame. Default 1 MiB.
    pub max_frame_size: usize,
    /// Time a client has to complete the WebSocket handshake (with its token); a socket that opens
    /// the port and says nothing is closed after it. Default 10 s.
    pub handshake_timeout: Duration,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval: Duration::from_secs(10),
            default_timeout: Duration::from_secs(600),
            output_cap: 1 << 20,
            require_approval: false,
            kill_grace: Duration::from_secs(2),
            max_frame_size: 1 << 20,
            handshake_timeout: crate::handshake::DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }
}

/// Why the agent did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A non-loopback address needs an explicit token.
    #[error("refusing to listen on {0} (not loopback) without --token")]
    TokenRequired(SocketAddr),
    /// A token was given but is empty or only whitespace (S1): it would let anyone in.
    #[error(
        "the shell-agent token (CHAT_BRIDGE_SHELL_AGENT_TOKEN / --token) is set but empty; set a real token or leave it unset to have one generated"
    )]
    EmptyToken,
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

struct Agent {
    cfg: AgentConfig,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    next_conn: AtomicU64,
    shutdown: CancellationToken,
    /// The running prompts: at shutdown their commands are cancelled and they are waited for, so
    /// each client hears its turn end `cancelled` before the connection closes.
    prompts: TaskTracker,
    /// The connections, waited for at shutdown (bounded) so what they queued is written.
    conns: TaskTracker,
}

/// A running shell-agent. Its `Debug` never shows the token (a [`SecretString`]).
#[derive(Debug)]
pub struct ShellAgent {
    addr: SocketAddr,
    token: SecretString,
    generated_token: bool,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Agent {
    /// Waits, at shutdown, for the cancelled prompts to end (their process groups get the kill
    /// grace, and a second more to say so); `false` when some are still running then.
    async fn prompts_ended(&self) -> bool {
        let bound = self.cfg.kill_grace + Duration::from_secs(1);
        tokio::time::timeout(bound, self.prompts.wait())
            .await
            .is_ok()
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl ShellAgent {
    /// Binds `listen` and serves `/acp`. Without a token one is generated ([`Self::token`]).
    ///
    /// # Errors
    /// [`StartError::TokenRequired`] for a non-loopback address without a token;
    /// [`StartError::EmptyToken`] for a token that is empty or whitespace;
    /// [`StartError::Bind`] when the address cannot be bound.
    pub async fn start(
        listen: SocketAddr,
        token: Option<String>,
        cfg: AgentConfig,
    ) -> Result<Self, StartError> {
        if token.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err(StartError::EmptyToken);
        }
        if token.is_none() && !listen.ip().is_loopback() {
            return Err(StartError::TokenRequired(listen));
        }
        let generated_token = token.is_none();
        let token = token.unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| StartError::Bind {
                addr: listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: listen,
            source,
        })?;
        let shutdown = CancellationToken::new();
        let agent = Arc::new(Agent {
            cfg,
            sessions: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            shutdown: shutdown.clone(),
            prompts: TaskTracker::new(),
            conns: TaskTracker::new(),
        });
        let task = tokio::spawn(accept_loop(listener, agent, token.clone()));
        tracing::info!(%addr, "shell-agent listening on /acp");
        Ok(Self {
            addr,
            token: SecretString::from(token),
            generated_token,
            shutdown,
            task,
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

    /// Stops accepting, cancels running commands and closes connections.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }

    /// Runs until `stop` is cancelled, then shuts down.
    pub async fn run_until(self, stop: CancellationToken) {
        stop.cancelled().await;
        self.shutdown().await;
    }
}

async fn accept_loop(listener: TcpListener, agent: Arc<Agent>, expected: String) {
    loop {
        let accepted = tokio::select! {
            () = agent.shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        let Ok((tcp, peer)) = accepted else { continue };
        let (conn_agent, expected) = (agent.clone(), expected.clone());
        agent.conns.spawn(async move {
            if let Err(reason) = serve(tcp, conn_agent, expected).await {
                tracing::info!(%peer, %reason, "connection refused");
            }
        });
    }
    // Cancel every running command so their process groups end with us; each prompt then ends
    // `cancelled` and its client hears so (as qwen does when stopped) before the connections close.
    for session in lock(&agent.sessions).values() {
        session.cancel();
    }
    agent.prompts.close();
    agent.conns.close();
    if !agent.prompts_ended().await {
        tracing::warn!(
            running = agent.prompts.len(),
            "stopping with prompts still running after the kill grace"
        );
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), agent.conns.wait()).await;
}

async fn serve(tcp: TcpStream, agent: Arc<Agent>, expected: String) -> Result<(), String> {
    let ws = crate::handshake::accept_acp(
        tcp,
        &expected,
        agent.cfg.max_frame_size,
        agent.cfg.handshake_timeout,
    )
    .await?;
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = mpsc::channel::<Message>(64);
    let conn = Conn {
        id: agent.next_conn.fetch_add(1, Ordering::Relaxed),
        tx,
        pending: Arc::default(),
    };
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
            () = agent.shutdown.cancelled() => {
                // Stopping: the running prompts end cancelled first, and say so on this
                // connection while it is still attached.
                agent.prompts_ended().await;
                break;
            }
            f = stream.next() => f,
        };
        match frame {
            Some(Ok(Message::Text(text))) => handle(&agent, &conn, text.as_bytes()).await,
            Some(Ok(Message::Binary(bytes))) => handle(&agent, &conn, &bytes).await,
            Some(Ok(Message::Close(_))) | None => break,
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                tracing::info!(error = %e, "connection ended");
                break;
            }
        }
    }
    for session in lock(&agent.sessions).values() {
        session.detach(conn.id);
    }
    lock(&conn.pending).clear();
    drop(conn);
    // A running prompt may still hold the connection; flush what is queued, but do not wait for it.
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
    Ok(())
}

fn error(id: &Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

async fn handle(agent: &Arc<Agent>, conn: &Conn, bytes: &[u8]) {
    let Ok(msg) = serde_json::from_slice::<Value>(bytes) else {
        conn.send(&error(
            &Value::Null,
            -32700,
            "parse error: the frame is not JSON",
        ))
        .await;
        return;
    };
    let id = msg.get("id").cloned();
    let Some(method) = msg.get("method").and_then(Value::as_str) else {
        // A response to one of our requests (a permission answer).
        if let Some(key) = id.as_ref().and_then(Value::as_str)
            && let Some(tx) = lock(&conn.pending).remove(key)
        {
            let _ = tx.send(msg);
            return;
        }
        if id.is_none() {
            conn.send(&error(&Value::Null, -32600, "invalid request: no method"))
                .await;
        }
        return;
    };
    let params = msg.get("params").cloned().unwrap_or(Value::Null);
    let Some(id) = id else {
        // Notifications: only session/cancel means something to us.
        if method == "session/cancel"
            && let Some(session) = find(agent, &params)
        {
            session.cancel();
        }
        return;
    };
    let answer = match method {
        "initialize" => result(
            &id,
            json!({
                "protocolVersion": 1,
                "agentCapabilities": {
                    "loadSession": true,
                    "promptCapabilities": {"image": false, "audio": false, "embeddedContext": false},
                },
                "agentInfo": {"name": crate::AGENT_NAME, "version": env!("CARGO_PKG_VERSION")},
                "authMethods": [],
            }),
        ),
        "session/new" => new_session(agent, conn, &id, &params),
        "session/load" => return load_session(agent, conn, &id, &params).await,
        "session/set_mode" => match (
            find(agent, &params),
            params.get("modeId").and_then(Value::as_str),
        ) {
            (Some(s), Some(mode @ ("default" | "yolo"))) => {
                s.set_mode(mode);
                result(&id, json!({}))
            }
            (None, _) => error(&id, -32602, "unknown session"),
            _ => error(&id, -32602, "unknown mode (use default or yolo)"),
        },
        "session/prompt" => match find(agent, &params) {
            None => error(&id, -32602, "unknown session"),
            Some(session) => match session.begin_prompt() {
                None => error(
                    &id,
                    -32000,
                    "a prompt is already running in this session; cancel it or wait",
                ),
                Some(cancel) => {
                    let text = prompt_text(&params);
                    // The prompt and (below) the turn's end are kept for `session/load`, as qwen
                    // replays them: a client that reconnects after the turn ended while it was away
                    // reads from the replay which prompt the frames belong to and that it ended.
                    session.keep(json!({"jsonrpc": "2.0", "method": "session/update", "params": {
                        "sessionId": session.id,
                        "update": {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}}}));
                    let (prompt_agent, conn) = (agent.clone(), conn.clone());
                    agent.prompts.spawn(async move {
                        let agent = prompt_agent;
                        let stop = run_prompt(&agent, &session, &text, cancel).await;
                        session.end_prompt();
                        let response = result(&id, json!({"stopReason": stop}));
                        if !conn.send(&response).await {
                            tracing::info!(session = %session.id, "prompt finished after its connection closed");
                        }
                        let done = json!({"jsonrpc": "2.0", "method": "_shell_agent/turn_complete",
                                          "params": {"sessionId": session.id, "stopReason": stop}});
                        session.notify_kept(&done).await;
                    });
                    return;
                }
            },
        },
        other => error(&id, -32601, format!("method not found: {other}")),
    };
    conn.send(&answer).await;
}

fn find(agent: &Agent, params: &Value) -> Option<Arc<Session>> {
    let id = params.get("sessionId")?.as_str()?;
    lock(&agent.sessions).get(id).cloned()
}

fn new_session(agent: &Agent, conn: &Conn, id: &Value, params: &Value) -> Value {
    let Some(cwd) = params.get("cwd").and_then(Value::as_str).map(PathBuf::from) else {
        return error(id, -32602, "session/new needs a cwd");
    };
    if !cwd.is_dir() {
        return error(
            id,
            -32602,
            format!("cwd {} is not a directory", cwd.display()),
        );
    }
    let session_id = uuid::Uuid::new_v4().to_string();
    let session = Arc::new(Session::new(session_id.clone(), cwd, conn.clone()));
    lock(&agent.sessions).insert(session_id.clone(), session);
    result(
        id,
        json!({
            "sessionId": session_id,
            "modes": {"currentModeId": "default", "availableModes": [
                {"id": "default", "name": "Default", "description": "Ask before each command when approvals are on"},
                {"id": "yolo", "name": "YOLO", "description": "Run every command without asking"},
            ]},
        }),
    )
}

async fn load_session(agent: &Agent, conn: &Conn, id: &Value, params: &Value) {
    let Some(session) = find(agent, params) else {
        conn.send(&error(id, -32602, "unknown session")).await;
        return;
    };
    for msg in session.attach(conn.clone()) {
        conn.send(&msg).await;
    }
    conn.send(&result(id, json!({}))).await;
}

fn prompt_text(params: &Value) -> String {
    params
        .get("prompt")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Splits an optional leading `timeout=DURATION ` off the command.
fn split_timeout(text: &str) -> Result<(Option<Duration>, &str), String> {
    let text = text.trim();
    let Some(rest) = text.strip_prefix("timeout=") else {
        return Ok((None, text));
    };
    let (value, command) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let d = parse_duration(value).map_err(|e| e.to_string())?;
    Ok((Some(d), command.trim()))
}

fn text_block(text: &str) -> Value {
    json!({"type": "content", "content": {"type": "text", "text": text}})
}

async fn say(session: &Session, text: &str) {
    session
        .update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}), false)
        .await;
}

/// Runs one prompt turn; returns its stop reason.
async fn run_prompt(
    agent: &Agent,
    session: &Arc<Session>,
    text: &str,
    cancel: CancellationToken,
) -> &'static str {
    let (timeout, command) = match split_timeout(text) {
        Ok(parts) => parts,
        Err(e) => {
            say(session, &format!("{e}. Write it as `timeout=30s COMMAND`.")).await;
            return "end_turn";
        }
    };
    if command.is_empty() {
        say(
            session,
            &format!(
                "Send a shell command; it runs in {}.",
                session.cwd.display()
            ),
        )
        .await;
        return "end_turn";
    }
    let timeout =
        timeout.or((!agent.cfg.default_timeout.is_zero()).then_some(agent.cfg.default_timeout));
    let call = session.next_call_id();
    let raw_input = json!({"command": command, "timeout": timeout.map(|t| t.as_millis() as u64)});
    session
        .update(
            json!({"sessionUpdate": "tool_call", "toolCallId": call, "title": command, "kind": "execute",
                   "status": "pending", "rawInput": raw_input}),
            false,
        )
        .await;

    let ask = agent.cfg.require_approval
        && session.mode() != "yolo"
        && !session.allow_always.load(Ordering::Relaxed);
    if ask {
        match approve(session, &call, command, &raw_input, &cancel).await {
            Approval::Allowed => {}
            Approval::Rejected(why) => {
                finish(session, &call, "failed", &why, None, json!({"type": "shell_result", "outcome": "rejected", "output": "", "error": why})).await;
                return "end_turn";
            }
            Approval::Cancelled => {
                finish_cancelled_before_start(session, &call).await;
                return "cancelled";
            }
        }
    }
    if cancel.is_cancelled() {
        finish_cancelled_before_start(session, &call).await;
        return "cancelled";
    }

    let spec = RunSpec {
        command: command.to_owned(),
        cwd: session.cwd.clone(),
        timeout,
        heartbeat: Some(agent.cfg.heartbeat_interval),
        output_cap: agent.cfg.output_cap,
        kill_grace: agent.cfg.kill_grace,
    };
    let (tx, mut rx) = mpsc::channel(8);
    let run = runner::run(spec, cancel, tx);
    tokio::pin!(run);
    let result = loop {
        tokio::select! {
            r = &mut run => break r,
            Some(u) = rx.recv() => forward(session, &call, u).await,
        }
    };
    // Everything the runner sent goes out before the terminal update (H3).
    while let Ok(u) = rx.try_recv() {
        forward(session, &call, u).await;
    }
    let stop = if result.outcome == RunOutcome::Cancelled {
        "cancelled"
    } else {
        "end_turn"
    };
    report(session, &call, command, timeout, &result).await;
    stop
}

async fn forward(session: &Session, call: &str, update: RunUpdate) {
    match update {
        RunUpdate::Spawned { pid } => {
            session
                .update(
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "in_progress",
                           "kind": "execute", "_meta": {"toolName": "shell", "pid": pid}}),
                    false,
                )
                .await;
        }
        RunUpdate::Output(text) => {
            session
                .update(
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "in_progress",
                           "content": [text_block(&text)]}),
                    true,
                )
                .await;
        }
        RunUpdate::Heartbeat(p) => {
            let mut progress = json!({
                "type": "shell_progress",
                "elapsedMs": p.elapsed.as_millis() as u64,
                "totalLines": p.total_lines,
                "totalBytes": p.total_bytes,
            });
            if let Some(age) = p.last_output_age {
                progress["lastOutputAgeMs"] = json!(age.as_millis() as u64);
            }
            if let Some(t) = p.timeout {
                progress["timeoutMs"] = json!(t.as_millis() as u64);
            }
            session
                .update(
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "in_progress",
                           "_meta": {"toolName": "shell", "shellProgress": progress}}),
                    true,
                )
                .await;
        }
    }
}

enum Approval {
    Allowed,
    Rejected(String),
    Cancelled,
}

async fn approve(
    session: &Session,
    call: &str,
    command: &str,
    raw_input: &Value,
    cancel: &CancellationToken,
) -> Approval {
    let params = json!({
        "sessionId": session.id,
        "toolCall": {"toolCallId": call, "title": command, "kind": "execute", "status": "pending", "rawInput": raw_input},
        "options": [
            {"optionId": "allow_once", "kind": "allow_once", "name": "Allow once"},
            {"optionId": "allow_always", "kind": "allow_always", "name": "Allow always"},
            {"optionId": "reject_once", "kind": "reject_once", "name": "Reject"},
        ],
    });
    let answer = tokio::select! {
        a = session.request_permission(params) => a,
        () = cancel.cancelled() => return Approval::Cancelled,
    };
    let Some(answer) = answer else {
        return Approval::Rejected(
            "Nobody could approve the command (the client went away), so it did not run.".into(),
        );
    };
    let outcome = answer
        .pointer("/result/outcome/outcome")
        .and_then(Value::as_str);
    match (
        outcome,
        answer
            .pointer("/result/outcome/optionId")
            .and_then(Value::as_str),
    ) {
        (Some("selected"), Some("allow_once")) => Approval::Allowed,
        (Some("selected"), Some("allow_always")) => {
            session.allow_always.store(true, Ordering::Relaxed);
            Approval::Allowed
        }
        (Some("selected"), _) => {
            Approval::Rejected("The command was rejected, so it did not run.".into())
        }
        _ if cancel.is_cancelled() => Approval::Cancelled,
        _ => Approval::Rejected("The approval was withdrawn, so the command did not run.".into()),
    }
}

async fn finish(
    session: &Session,
    call: &str,
    status: &str,
    summary: &str,
    second: Option<&str>,
    raw_output: Value,
) {
    let mut content = vec![text_block(summary)];
    if let Some(s) = second {
        content.push(text_block(s));
    }
    session
        .update(
            json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": status,
                   "content": content, "rawOutput": raw_output}),
            false,
        )
        .await;
}

async fn finish_cancelled_before_start(session: &Session, call: &str) {
    let summary = "Command cancelled before it started.";
    let raw =
        json!({"type": "shell_result", "outcome": "cancelled", "output": "", "error": summary});
    finish(session, call, "failed", summary, None, raw).await;
}

/// The terminal update, in the `shell_result` shape qwen uses, so the bridge has one code path (T1).
async fn report(
    session: &Session,
    call: &str,
    command: &str,
    timeout: Option<Duration>,
    r: &RunResult,
) {
    let took = format_duration(r.duration);
    let (status, outcome, summary) = match &r.outcome {
        RunOutcome::Completed => (
            "completed",
            "completed",
            format!("Command finished in {took}"),
        ),
        RunOutcome::Failed => match (r.exit_code, r.signal) {
            (_, Some(sig)) => (
                "failed",
                "failed",
                format!("Command was killed by signal {sig} after {took}"),
            ),
            (Some(code), None) => (
                "failed",
                "failed",
                format!("Command exited with code {code} after {took}"),
            ),
            (None, None) => (
                "failed",
                "failed",
                format!("Command ended without an exit status after {took}"),
            ),
        },
        RunOutcome::TimedOut => {
            let limit = timeout.map(format_duration).unwrap_or_else(|| took.clone());
            (
                "failed",
                "timed_out",
                format!("Command timed out after {limit}"),
            )
        }
        RunOutcome::Cancelled => (
            "failed",
            "cancelled",
            "Command cancelled by user.".to_owned(),
        ),
        RunOutcome::SpawnFailed(e) => (
            "failed",
            "failed",
            format!("Could not start the command: {e}"),
        ),
    };
    let no_output = r.output.is_empty();
    let second = match (&r.outcome, no_output) {
        (RunOutcome::TimedOut, true) => Some("There was no output before it timed out."),
        (_, true) => None,
        (_, false) => Some(r.output.as_str()),
    };
    let text = match second {
        Some(s) => format!("{summary}\n{s}"),
        None => summary.clone(),
    };
    let error = (status == "failed").then(|| summary.clone());
    let raw = json!({
        "type": "shell_result",
        "version": 1,
        "text": text,
        "output": r.output,
        "directory": session.cwd,
        "exitCode": r.exit_code,
        "signal": r.signal,
        "pid": r.pid,
        "error": error,
        "outcome": outcome,
        "notices": if r.truncated { json!(["output truncated to its tail"]) } else { json!([]) },
        "truncated": r.truncated,
        "outputFiles": [],
        "command": command,
        "durationMs": r.duration.as_millis() as u64,
    });
    finish(session, call, status, &summary, second, raw).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn s2_debug_of_a_running_agent_never_shows_its_token() {
        let agent = ShellAgent::start(
            "127.0.0.1:0".parse().expect("addr"),
            Some("agent-token-424242".into()),
            AgentConfig::default(),
        )
        .await
        .expect("start");
        let debug = format!("{agent:?}");
        assert!(!debug.contains("424242"), "{debug}");
        assert_eq!(agent.token(), "agent-token-424242");
        agent.shutdown().await;
    }

    #[test]
    fn timeout_prefix_is_split_off_the_command() {
        assert_eq!(
            split_timeout("timeout=2s sleep 5"),
            Ok((Some(Duration::from_secs(2)), "sleep 5"))
        );
        assert_eq!(split_timeout("  ls -la "), Ok((None, "ls -la")));
        assert!(split_timeout("timeout=2x sleep 5").is_err());
        assert_eq!(
            split_timeout("timeout=1m"),
            Ok((Some(Duration::from_secs(60)), ""))
        );
    }
}
