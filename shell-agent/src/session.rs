//! Sessions outlive connections: a session's updates go to whichever connection last attached it
//! (`session/new` or `session/load`), and its history is replayed to a connection that loads it.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

/// Updates kept per session for `session/load` (heartbeats and live output are not kept).
const HISTORY_CAP: usize = 2000;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One client connection, as sessions see it.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    pub id: u64,
    pub tx: mpsc::Sender<Message>,
    /// Our requests to this client (permission requests) awaiting answers, by id.
    pub pending: Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>,
}

impl Conn {
    pub(crate) async fn send(&self, msg: &Value) -> bool {
        self.tx.send(Message::text(msg.to_string())).await.is_ok()
    }
}

#[derive(Debug, Default)]
struct Inner {
    history: VecDeque<Value>,
    attached: Option<Conn>,
    running: Option<CancellationToken>,
    mode: String,
}

/// One agent session.
#[derive(Debug)]
pub(crate) struct Session {
    pub id: String,
    pub cwd: PathBuf,
    inner: Mutex<Inner>,
    pub allow_always: AtomicBool,
    next_call: AtomicU64,
    next_request: AtomicU64,
}

impl Session {
    pub(crate) fn new(id: String, cwd: PathBuf, conn: Conn) -> Self {
        let inner = Inner {
            attached: Some(conn),
            mode: "default".into(),
            ..Inner::default()
        };
        Self {
            id,
            cwd,
            inner: Mutex::new(inner),
            allow_always: AtomicBool::new(false),
            next_call: AtomicU64::new(1),
            next_request: AtomicU64::new(1),
        }
    }

    pub(crate) fn next_call_id(&self) -> String {
        format!("call_{}", self.next_call.fetch_add(1, Ordering::Relaxed))
    }

    pub(crate) fn mode(&self) -> String {
        lock(&self.inner).mode.clone()
    }

    pub(crate) fn set_mode(&self, mode: &str) {
        lock(&self.inner).mode = mode.to_owned();
    }

    /// Attaches `conn` and returns the history to replay to it.
    pub(crate) fn attach(&self, conn: Conn) -> Vec<Value> {
        let mut g = lock(&self.inner);
        g.attached = Some(conn);
        g.history.iter().cloned().collect()
    }

    /// Detaches `conn_id` if it is the attached connection.
    pub(crate) fn detach(&self, conn_id: u64) {
        let mut g = lock(&self.inner);
        if g.attached.as_ref().is_some_and(|c| c.id == conn_id) {
            g.attached = None;
        }
    }

    pub(crate) fn attached(&self) -> Option<Conn> {
        lock(&self.inner).attached.clone()
    }

    /// Starts a prompt; `None` when one is already running.
    pub(crate) fn begin_prompt(&self) -> Option<CancellationToken> {
        let mut g = lock(&self.inner);
        if g.running.is_some() {
            return None;
        }
        let token = CancellationToken::new();
        g.running = Some(token.clone());
        Some(token)
    }

    pub(crate) fn end_prompt(&self) {
        lock(&self.inner).running = None;
    }

    /// Cancels the running prompt, if any.
    pub(crate) fn cancel(&self) -> bool {
        match &lock(&self.inner).running {
            Some(t) => {
                t.cancel();
                true
            }
            None => false,
        }
    }

    /// Sends a `session/update` to the attached connection; kept for replay unless `live_only`.
    pub(crate) async fn update(&self, update: Value, live_only: bool) {
        let msg = json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": self.id, "update": update}});
        let conn = {
            let mut g = lock(&self.inner);
            if !live_only {
                g.history.push_back(msg.clone());
                if g.history.len() > HISTORY_CAP {
                    g.history.pop_front();
                }
            }
            g.attached.clone()
        };
        if let Some(conn) = conn
            && !conn.send(&msg).await
        {
            self.detach(conn.id);
        }
    }

    /// Sends a notification (not kept) to the attached connection.
    pub(crate) async fn notify(&self, msg: &Value) {
        if let Some(conn) = self.attached() {
            let _ = conn.send(msg).await;
        }
    }

    /// Keeps `msg` for replay without sending it now.
    pub(crate) fn keep(&self, msg: Value) {
        let mut g = lock(&self.inner);
        g.history.push_back(msg);
        if g.history.len() > HISTORY_CAP {
            g.history.pop_front();
        }
    }

    /// Sends a notification to the attached connection and keeps it for replay.
    pub(crate) async fn notify_kept(&self, msg: &Value) {
        self.keep(msg.clone());
        self.notify(msg).await;
    }

    /// Asks the attached connection to approve; `None` when nobody could answer (no connection, or it
    /// went away).
    pub(crate) async fn request_permission(&self, params: Value) -> Option<Value> {
        let conn = self.attached()?;
        let id = format!(
            "perm_{}_{}",
            self.id,
            self.next_request.fetch_add(1, Ordering::Relaxed)
        );
        let (tx, rx) = oneshot::channel();
        lock(&conn.pending).insert(id.clone(), tx);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": "session/request_permission", "params": params});
        if !conn.send(&msg).await {
            lock(&conn.pending).remove(&id);
            return None;
        }
        rx.await.ok()
    }
}
