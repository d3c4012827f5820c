//! The bridge core: routes inbound chat to conversations, runs one turn per conversation at a time,
//! turns daemon events into chat actions, and keeps every turn honest about liveness.
//!
//! One actor per conversation (an ordered queue, like a portal's event loop): adapters only convert
//! and enqueue. Every chat action is written to the outbox in the same transaction as the state change
//! that caused it (D1); the outbox worker delivers it. Heartbeats feed liveness and the progress line,
//! never a message of their own (F1, L5).
//!
//! # Layout
//! - [`access`]: A2, A3, who may act in a thread.
//! - [`keys`]: message keys and button values, typed.
//! - [`redact`]: R7, secrets out of chat-bound text.
//! - [`render`]: R1–R6 as platform-neutral messages.
//! - `actor`: one conversation's event loop.

pub mod access;
mod actor;
pub mod keys;
pub mod redact;
pub mod render;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use daemon_client::{DaemonClient, DaemonEvent, EventStream, LivenessConfig, SessionId};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::channel::{Inbound, Target};
use crate::store::{self, Store, conversations, inbound, now_ms};
use redact::Redactor;

/// What to do when a turn stalls (L3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStall {
    /// Tell the thread and keep waiting.
    Notify,
    /// Tell the thread and send `session/cancel`.
    Cancel,
}

/// Core settings.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// Idle and wall limits per turn (L1, L2).
    pub liveness: LivenessConfig,
    /// L3 policy.
    pub on_stall: OnStall,
    /// A tool running longer than this shows a progress line (L5).
    pub progress_after: Duration,
    /// The progress line is edited at most this often (L5).
    pub progress_every: Duration,
    /// Heartbeat counts and progress are written to the store at most this often.
    pub progress_flush: Duration,
    /// Prompts that may wait behind a running turn.
    pub queue_cap: usize,
    /// Unanswered permission requests expire (as rejected) after this.
    pub permission_timeout: Duration,
    /// Working directory for new daemon sessions.
    pub cwd: PathBuf,
    /// `session/set_mode` for new sessions (e.g. `yolo`).
    pub mode: Option<String>,
    /// Users who may answer anyone's permission requests (and act in every thread).
    pub approvers: Vec<String>,
    /// A2: who may act in a thread.
    pub threads: crate::config::ThreadAccess,
    /// A3: the requester may not approve their own tool call.
    pub require_second_person: bool,
    /// Store redacted text in the history too (`redact.store`).
    pub redact_store: bool,
    /// How much tool output a result message shows (from the channel's capabilities).
    pub output_cap: usize,
    /// An idle conversation's actor is let go after this (see `service.conversation_idle`).
    pub actor_idle: Duration,
    /// An inbound event that failed (or was interrupted by a crash) this many times is set aside
    /// as a dead letter (S4).
    pub inbound_attempts: i64,
}

impl Default for CoreConfig {
    fn default() -> Self {
        Self {
            liveness: LivenessConfig::default(),
            on_stall: OnStall::Notify,
            progress_after: Duration::from_secs(15),
            progress_every: Duration::from_secs(30),
            progress_flush: Duration::from_secs(10),
            queue_cap: 5,
            permission_timeout: Duration::from_secs(600),
            cwd: PathBuf::from("."),
            mode: None,
            approvers: Vec::new(),
            threads: crate::config::ThreadAccess::Owner,
            require_second_person: false,
            redact_store: false,
            output_cap: render::CHAT_OUTPUT_CAP,
            actor_idle: Duration::from_secs(600),
            inbound_attempts: 3,
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A message for a conversation's actor.
#[derive(Debug)]
pub(crate) enum ConvMsg {
    Inbound(Inbound),
    Daemon(DaemonEvent),
    PromptDone(u64, Result<daemon_client::StopReason, daemon_client::Error>),
    Resume(store::turns::Turn),
}

/// What becomes of an inbound event whose handling failed (not a transient fault).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterFailure {
    /// Try again (the failure is recorded; the next attempt must be counted first).
    Again,
    /// It failed too often and was set aside as a dead letter, with a notice in its thread.
    SetAside,
    /// It was handled or set aside meanwhile; nothing to do.
    Gone,
}

/// Why an event was set aside, for the thread, the log and the dead-letter listing: a category and
/// at most an error code — never the message's text, a secret or raw bytes.
fn failure_reason(e: &store::StoreError) -> String {
    match e {
        store::StoreError::Query(sqlx::Error::Database(db)) => format!(
            "the database refused it (error {})",
            db.code().as_deref().unwrap_or("without a code")
        ),
        store::StoreError::Corrupt(_) => "its stored form could not be read".to_owned(),
        e if e.is_transient() => "the database was unreachable".to_owned(),
        _ => "it could not be handled (see the log)".to_owned(),
    }
}

/// The inbound event as the store keeps it: what runs the first time is what a replay after a
/// restart runs and what the history shows (NUL made visible, S4).
fn storable_inbound(msg: Inbound) -> Inbound {
    let crate::channel::InboundKind::Message(text) = &msg.kind else {
        return msg;
    };
    if !text.contains('\0') {
        return msg;
    }
    let text = store::bind::storable(text).into_owned();
    Inbound {
        kind: crate::channel::InboundKind::Message(text),
        ..msg
    }
}

/// Heartbeat counts and the latest progress of one tool call, for the progress writer.
#[derive(Debug)]
pub(crate) struct ProgressWrite {
    pub conversation: String,
    pub call: String,
    pub heartbeats: i64,
    pub progress: Option<String>,
}

/// How many progress writes wait for the writer at most; past it an actor keeps its counts for the
/// next flush.
const PROGRESS_QUEUE: usize = 4096;

/// How many progress writes go into one transaction.
const PROGRESS_BATCH: usize = 256;

/// Writes heartbeat counts in batches, off the actors' path: a conversation never waits for the
/// database because a silent command is alive (P2). On the bookkeeping connections (a count lost to a
/// database crash costs nothing but the count). Ends after `stop`, writing what is queued.
async fn progress_writer(
    store: Store,
    mut rx: mpsc::Receiver<ProgressWrite>,
    pending: Arc<AtomicUsize>,
    stop: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            w = rx.recv() => w,
            () = stop.cancelled() => {
                rx.close();
                rx.recv().await
            }
        };
        let Some(first) = first else { return };
        let mut batch = vec![first];
        while batch.len() < PROGRESS_BATCH {
            match rx.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        match store::retry_transient(20, &stop, |_| {}, || write_progress(&store, &batch)).await {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                tracing::warn!(error = %e, writes = batch.len(), "heartbeat counts not written");
            }
            None => tracing::warn!(
                writes = batch.len(),
                "heartbeat counts not written: stopping"
            ),
        }
        pending.fetch_sub(batch.len(), Ordering::SeqCst);
    }
}

async fn write_progress(store: &Store, batch: &[ProgressWrite]) -> Result<(), store::StoreError> {
    let mut tx = store.relaxed_begin().await?;
    for w in batch {
        store::tool_calls::progress(
            tx.conn(),
            &w.conversation,
            &w.call,
            w.heartbeats,
            w.progress.as_deref(),
            now_ms(),
        )
        .await?;
    }
    tx.commit().await
}

/// The core, shared by the router, the actors and the application.
#[derive(Debug)]
pub struct Core {
    pub(crate) store: Store,
    pub(crate) client: DaemonClient,
    pub(crate) cfg: CoreConfig,
    pub(crate) redactor: Redactor,
    pub(crate) wake_outbox: Arc<Notify>,
    actors: Mutex<HashMap<String, mpsc::Sender<ConvMsg>>>,
    pub(crate) sessions: Mutex<HashMap<SessionId, String>>,
    /// Turns open or queued, across conversations (the console waits for zero before exiting).
    pub(crate) busy: AtomicUsize,
    pub(crate) idle: Notify,
    shutdown: CancellationToken,
    progress: mpsc::Sender<ProgressWrite>,
    progress_pending: Arc<AtomicUsize>,
    /// Whether the daemon connection is up (for `/readyz`).
    pub daemon_connected: std::sync::atomic::AtomicBool,
}

impl Core {
    /// A core over `store` and `client`.
    #[must_use]
    pub fn new(
        store: Store,
        client: DaemonClient,
        cfg: CoreConfig,
        redactor: Redactor,
        wake_outbox: Arc<Notify>,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let (progress, rx) = mpsc::channel(PROGRESS_QUEUE);
        let progress_pending = Arc::new(AtomicUsize::new(0));
        tokio::spawn(progress_writer(
            store.clone(),
            rx,
            progress_pending.clone(),
            shutdown.clone(),
        ));
        Arc::new(Self {
            store,
            client,
            cfg,
            redactor,
            wake_outbox,
            actors: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            busy: AtomicUsize::new(0),
            idle: Notify::new(),
            shutdown,
            progress,
            progress_pending,
            daemon_connected: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// Hands a progress write to the writer; `false` when its queue is full (keep the counts).
    pub(crate) fn queue_progress(&self, w: ProgressWrite) -> bool {
        self.progress_pending.fetch_add(1, Ordering::SeqCst);
        if self.progress.try_send(w).is_ok() {
            true
        } else {
            self.progress_pending.fetch_sub(1, Ordering::SeqCst);
            false
        }
    }

    /// Heartbeat-count writes queued and not yet written.
    #[must_use]
    pub fn progress_writes_pending(&self) -> usize {
        self.progress_pending.load(Ordering::SeqCst)
    }

    /// Conversations held in memory (an actor each) right now.
    #[must_use]
    pub fn conversations_in_memory(&self) -> usize {
        lock(&self.actors).len()
    }

    /// Sends `msg` to the conversation's actor, starting one when there is none — also when the
    /// one looked up was letting go at that moment (its channel closed between lookup and send).
    pub(crate) async fn send_to(
        self: &Arc<Self>,
        conv: &conversations::Conversation,
        mut msg: ConvMsg,
    ) -> bool {
        for _ in 0..3 {
            match self.actor(conv).send(msg).await {
                Ok(()) => return true,
                Err(mpsc::error::SendError(m)) => msg = m,
            }
        }
        tracing::error!(conversation = %conv.id, "no actor would take a message");
        false
    }

    /// An idle actor lets go: it is forgotten (unless a newer actor already replaced it), so the
    /// next message starts a fresh one from the store.
    pub(crate) fn retire(
        &self,
        conv: &str,
        session: Option<&SessionId>,
        tx: &mpsc::Sender<ConvMsg>,
    ) {
        let mut actors = lock(&self.actors);
        if actors.get(conv).is_some_and(|t| t.same_channel(tx)) {
            actors.remove(conv);
            if let Some(s) = session {
                let mut sessions = lock(&self.sessions);
                if sessions.get(s).is_some_and(|c| c == conv) {
                    sessions.remove(s);
                }
            }
        }
        metrics::gauge!("chatbridge_conversations_in_memory").set(actors.len() as f64);
    }

    /// Turns open or queued right now.
    #[must_use]
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::SeqCst)
    }

    /// Waits until no turn is open or queued.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.busy() == 0 {
                return;
            }
            notified.await;
        }
    }

    pub(crate) fn busy_add(&self, n: isize) {
        if n >= 0 {
            self.busy.fetch_add(n.unsigned_abs(), Ordering::SeqCst);
        } else {
            self.busy.fetch_sub(n.unsigned_abs(), Ordering::SeqCst);
        }
        self.idle.notify_waiters();
    }

    fn actor(self: &Arc<Self>, conv: &conversations::Conversation) -> mpsc::Sender<ConvMsg> {
        let mut actors = lock(&self.actors);
        if let Some(tx) = actors.get(&conv.id)
            && !tx.is_closed()
        {
            return tx.clone();
        }
        let (tx, rx) = mpsc::channel(1024);
        actors.insert(conv.id.clone(), tx.clone());
        metrics::gauge!("chatbridge_conversations_in_memory").set(actors.len() as f64);
        if let Some(s) = conv
            .daemon_session
            .as_deref()
            .and_then(|s| SessionId::parse(s).ok())
        {
            lock(&self.sessions).insert(s, conv.id.clone());
        }
        tokio::spawn(actor::run(self.clone(), conv.clone(), tx.clone(), rx));
        tx
    }

    /// Handles one inbound chat event: records it in the inbox, deduplicating it (D2), finds or
    /// creates its conversation, and hands it to that conversation's actor. Returns once the event
    /// is recorded — the platform may be told it arrived — and before the agent's work; the actor
    /// marks it handled in the transaction that acts on it.
    ///
    /// # Errors
    /// Store errors (the caller logs and tells the user).
    pub async fn accept(self: &Arc<Self>, msg: Inbound) -> Result<(), store::StoreError> {
        if self.record_inbound(&msg).await? {
            self.dispatch_inbound(msg).await?;
        }
        Ok(())
    }

    /// Records an inbound event in the inbox; `false` when it was seen before (D2: a platform's
    /// retry or a gateway replay), and then nothing more is done with it.
    ///
    /// # Errors
    /// Store errors: nothing was recorded.
    pub async fn record_inbound(&self, msg: &Inbound) -> Result<bool, store::StoreError> {
        let payload =
            serde_json::to_string(msg).map_err(|e| store::StoreError::Corrupt(e.to_string()))?;
        let mut c = self.store.conn().await?;
        if inbound::record(&mut c, &msg.platform, &msg.event_id, &payload, now_ms()).await?
            == inbound::Seen::Duplicate
        {
            tracing::debug!(platform = %msg.platform, event = %msg.event_id, "duplicate inbound event ignored");
            metrics::counter!("chatbridge_inbound_duplicates_total", "platform" => msg.platform.clone()).increment(1);
            return Ok(false);
        }
        Ok(true)
    }

    /// Hands a recorded event on (see [`Core::dispatch`]). An event whose handling fails for good
    /// (not a transient fault) is tried again until it has failed `inbound_attempts` times, then set
    /// aside as a dead letter with a notice in its thread (S4) — and this returns `Ok`.
    ///
    /// # Errors
    /// Transient store errors; the event stays in the inbox, so calling this again is safe.
    pub async fn dispatch_inbound(self: &Arc<Self>, msg: Inbound) -> Result<(), store::StoreError> {
        let mut c = self.store.conn().await?;
        loop {
            match self.dispatch(&mut c, msg.clone()).await {
                Err(e) if !e.is_transient() => {
                    tracing::error!(platform = %msg.platform, event = %msg.event_id, error = %e, "an inbound event could not be handed on");
                    if self.inbound_failed(&msg, &e, true).await? != AfterFailure::Again {
                        return Ok(());
                    }
                }
                r => return r,
            }
        }
    }

    /// Hands a recorded event to its conversation's actor (creating the conversation when the event
    /// may open one); an event with nowhere to go is marked handled. The attempt is counted in the
    /// inbox (durably, before the actor has it) once nothing but the hand-over is left, so a
    /// transient fault before it is not counted and a crash after it is; an event that already
    /// failed `inbound_attempts` times — crashes included — is set aside instead.
    async fn dispatch(
        self: &Arc<Self>,
        c: &mut sqlx::AnyConnection,
        msg: Inbound,
    ) -> Result<(), store::StoreError> {
        let msg = storable_inbound(msg);
        // Redacted before it is cut, so a title never holds half a secret (S2).
        let title: String = match &msg.kind {
            crate::channel::InboundKind::Message(t) => {
                self.redactor.redact(t).chars().take(80).collect()
            }
            crate::channel::InboundKind::Action(_) => String::new(),
        };
        let key = conversations::Key {
            platform: &msg.platform,
            workspace: &msg.target.workspace,
            channel: &msg.target.channel,
            thread: &msg.target.thread,
        };
        let conv = if msg.opens {
            conversations::find_or_create(c, &key, &msg.user, &title, now_ms())
                .await?
                .0
        } else {
            match conversations::find(c, &key).await? {
                Some(conv) => conv,
                None => {
                    tracing::debug!(platform = %msg.platform, "reply in a thread the bridge does not own ignored");
                    inbound::mark_handled(c, &msg.platform, &msg.event_id, now_ms()).await?;
                    return Ok(());
                }
            }
        };
        match inbound::start_attempt(c, &msg.platform, &msg.event_id).await? {
            None => return Ok(()),
            Some(n) if n > self.cfg.inbound_attempts => {
                let reason = format!(
                    "handling it was interrupted {} times (the bridge stopped while handling it)",
                    n - 1
                );
                self.set_aside(&msg, &reason, n - 1).await?;
                return Ok(());
            }
            Some(_) => {}
        }
        // In flight until the actor has handled it (it then counts the turn it opened or queued).
        self.busy_add(1);
        if !self.send_to(&conv, ConvMsg::Inbound(msg)).await {
            self.busy_add(-1);
        }
        Ok(())
    }

    /// Counts another handling attempt of `msg` (before an actor tries it again); `false` when it
    /// is no longer waiting.
    ///
    /// # Errors
    /// Store errors.
    pub(crate) async fn count_attempt(&self, msg: &Inbound) -> Result<bool, store::StoreError> {
        let mut c = self.store.conn().await?;
        Ok(inbound::start_attempt(&mut c, &msg.platform, &msg.event_id)
            .await?
            .is_some())
    }

    /// Records that handling `msg` failed with `e` (not a transient fault; `count` when the attempt
    /// was not counted before it began) and sets it aside once it has failed `inbound_attempts`
    /// times.
    ///
    /// # Errors
    /// Store errors.
    pub(crate) async fn inbound_failed(
        &self,
        msg: &Inbound,
        e: &store::StoreError,
        count: bool,
    ) -> Result<AfterFailure, store::StoreError> {
        let reason = failure_reason(e);
        let mut c = self.store.conn().await?;
        match inbound::failed(&mut c, &msg.platform, &msg.event_id, &reason, count).await? {
            None => Ok(AfterFailure::Gone),
            Some(n) if n >= self.cfg.inbound_attempts => {
                self.set_aside(msg, &reason, n).await?;
                Ok(AfterFailure::SetAside)
            }
            Some(_) => Ok(AfterFailure::Again),
        }
    }

    /// Sets `msg` aside as a dead letter: never taken again, counted, logged with ids only, and
    /// a notice posted in its thread when the bridge knows the thread (S4). When even the notice
    /// cannot be written, the event is set aside without it.
    async fn set_aside(
        &self,
        msg: &Inbound,
        reason: &str,
        attempts: i64,
    ) -> Result<(), store::StoreError> {
        let conv = match self.set_aside_with_notice(msg, reason).await {
            Ok(Some(conv)) => conv,
            Ok(None) => return Ok(()),
            Err(e) if e.is_transient() => return Err(e),
            Err(e) => {
                tracing::error!(platform = %msg.platform, event = %msg.event_id, error = %e, "no notice for a dead letter");
                let mut c = self.store.conn().await?;
                if !inbound::set_aside(&mut c, &msg.platform, &msg.event_id, reason, now_ms())
                    .await?
                {
                    return Ok(());
                }
                None
            }
        };
        metrics::counter!("chatbridge_inbound_dead_letters_total", "platform" => msg.platform.clone())
            .increment(1);
        tracing::error!(
            platform = %msg.platform,
            event = %msg.event_id,
            conversation = conv.as_ref().map_or("", |c| c.id.as_str()),
            attempts,
            "an inbound event was set aside as a dead letter after repeated failures"
        );
        Ok(())
    }

    /// Sets `msg` aside and queues the notice in one transaction: `None` when it was no longer
    /// waiting, else `Some` with its conversation when the thread is known.
    #[allow(clippy::option_option)]
    async fn set_aside_with_notice(
        &self,
        msg: &Inbound,
        reason: &str,
    ) -> Result<Option<Option<conversations::Conversation>>, store::StoreError> {
        let key = conversations::Key {
            platform: &msg.platform,
            workspace: &msg.target.workspace,
            channel: &msg.target.channel,
            thread: &msg.target.thread,
        };
        let mut tx = self.store.begin().await?;
        if !inbound::set_aside(tx.conn(), &msg.platform, &msg.event_id, reason, now_ms()).await? {
            return Ok(None);
        }
        // The thread: its conversation, or — for a message that would have opened it and failed
        // before it existed — a new one without a title.
        let conv = match conversations::find(tx.conn(), &key).await? {
            Some(conv) => Some(conv),
            None if msg.opens => Some(
                conversations::find_or_create(tx.conn(), &key, &msg.user, "", now_ms())
                    .await?
                    .0,
            ),
            None => None,
        };
        if let Some(conv) = &conv {
            let text = format!("A message could not be handled and was set aside: {reason}.");
            store::transcript::append(
                tx.conn(),
                &conv.id,
                &store::transcript::NewEntry {
                    turn_id: None,
                    kind: "notice",
                    actor: Some("bridge"),
                    body: &text,
                    tool_call_id: None,
                },
                now_ms(),
            )
            .await?;
            let key = format!("dead-letter:{}", msg.event_id);
            let action = crate::channel::ChatAction::Post {
                target: Self::target(conv),
                key: key.clone(),
                message: render::notice(&self.redactor, crate::channel::Tone::Error, &text),
            };
            let json = serde_json::to_string(&action)
                .map_err(|e| store::StoreError::Corrupt(e.to_string()))?;
            store::outbox::enqueue(
                tx.conn(),
                &store::outbox::NewAction {
                    conversation_id: &conv.id,
                    kind: store::outbox::Kind::Post,
                    coalesce_key: Some(&key),
                    action: &json,
                },
                now_ms(),
            )
            .await?;
        }
        tx.commit().await?;
        self.wake_outbox.notify_one();
        Ok(Some(conv))
    }

    /// After a restart: events recorded but never acted on — the process died between recording an
    /// event and its turn, or while a message waited behind a running turn — are handed to their
    /// conversations again, oldest first. Returns how many. One event never fails the start: its
    /// failure is logged (ids only) and counted against it, and an event that keeps failing or
    /// cannot be read is set aside (S4).
    ///
    /// # Errors
    /// Store errors reading the inbox itself.
    pub async fn take_unhandled_inbound(self: &Arc<Self>) -> Result<usize, store::StoreError> {
        let pending = {
            let mut c = self.store.conn().await?;
            inbound::unhandled(&mut c).await?
        };
        let n = pending.len();
        for (platform, event_id, payload) in pending {
            let r = match serde_json::from_str::<Inbound>(&payload) {
                Ok(msg) => self.dispatch_inbound(msg).await,
                Err(_) => self.set_aside_unreadable(&platform, &event_id).await,
            };
            if let Err(e) = r {
                tracing::error!(%platform, event = %event_id, transient = e.is_transient(), "an inbox event could not be taken at start-up; it stays in the inbox");
            }
        }
        Ok(n)
    }

    /// An inbox entry whose payload is not an event (written by another version, or damaged): set
    /// aside without a notice (its thread is unknown).
    async fn set_aside_unreadable(
        &self,
        platform: &str,
        event_id: &str,
    ) -> Result<(), store::StoreError> {
        let mut c = self.store.conn().await?;
        if inbound::set_aside(
            &mut c,
            platform,
            event_id,
            "its stored form could not be read",
            now_ms(),
        )
        .await?
        {
            metrics::counter!("chatbridge_inbound_dead_letters_total", "platform" => platform.to_owned())
                .increment(1);
            tracing::error!(%platform, event = %event_id, "an unreadable inbox entry was set aside as a dead letter");
        }
        Ok(())
    }

    /// Routes daemon events to the conversation that owns their session, until the stream ends.
    pub async fn route_events(self: Arc<Self>, mut events: EventStream) {
        loop {
            let event = tokio::select! {
                () = self.shutdown.cancelled() => return,
                e = events.recv() => match e { Some(e) => e, None => return },
            };
            metrics::counter!("chatbridge_daemon_events_total", "kind" => event.name())
                .increment(1);
            match &event {
                // Heartbeats (kind-less `in_progress` updates): proof a silent command is alive.
                DaemonEvent::ToolProgress { .. } => {
                    metrics::counter!("chatbridge_heartbeats_total").increment(1);
                }
                DaemonEvent::Malformed { .. } => {
                    metrics::counter!("chatbridge_malformed_frames_total").increment(1);
                }
                _ => {}
            }
            match &event {
                DaemonEvent::Disconnected { reason } => {
                    self.daemon_connected.store(false, Ordering::SeqCst);
                    tracing::warn!(%reason, "daemon connection lost; reconnecting");
                    continue;
                }
                DaemonEvent::Reconnected { resumed, lost } => {
                    self.daemon_connected.store(true, Ordering::SeqCst);
                    metrics::counter!("chatbridge_daemon_reconnects_total").increment(1);
                    tracing::info!(
                        resumed = resumed.len(),
                        lost = lost.len(),
                        "daemon reconnected"
                    );
                    continue;
                }
                DaemonEvent::Closed { reason } => {
                    self.daemon_connected.store(false, Ordering::SeqCst);
                    tracing::error!(%reason, "daemon connection closed");
                    continue;
                }
                _ => {}
            }
            let Some(session) = event.session() else {
                continue;
            };
            let conv = lock(&self.sessions).get(session).cloned();
            let Some(conv) = conv else {
                tracing::debug!(session = %session, kind = event.name(), "event for a session no conversation owns");
                continue;
            };
            let tx = lock(&self.actors).get(&conv).cloned();
            if let Some(tx) = tx {
                let _ = tx.send(ConvMsg::Daemon(event)).await;
            }
        }
    }

    /// After a restart: every open turn is resumed with `session/load`, or closed with a visible
    /// "interrupted" notice (D3).
    ///
    /// # Errors
    /// Store errors.
    pub async fn resume_open_turns(self: &Arc<Self>) -> Result<usize, store::StoreError> {
        let mut c = self.store.conn().await?;
        let open = store::turns::open(&mut c).await?;
        let n = open.len();
        for turn in open {
            let Some(conv) = conversations::get(&mut c, &turn.conversation_id).await? else {
                continue;
            };
            // Busy from now on, so nobody sees "idle" before the actor has taken the turn back.
            self.busy_add(1);
            if !self.send_to(&conv, ConvMsg::Resume(turn)).await {
                self.busy_add(-1);
            }
        }
        Ok(n)
    }

    pub(crate) fn target(conv: &conversations::Conversation) -> Target {
        Target {
            workspace: conv.workspace.clone(),
            channel: conv.channel.clone(),
            thread: conv.thread.clone(),
        }
    }
}
